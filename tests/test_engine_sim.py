# amaranth: UnusedElaboratable=no
"""Amaranth-simulator tests of the banked store and the contraction engine (small, fast)."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from ttrain.golden.contract import (
    ERROR_A_RANGE, ERROR_C_RANGE, ERROR_DIM, ERROR_NONE, ERROR_STORE, Descriptor, View,
    check_descriptor, contract, random_descriptor)
from ttrain.rtl.engine import ContractionEngine, StoreSpec
from ttrain.rtl.store import BankedStore


# ---- store ----------------------------------------------------------------------------------

def test_store_parameters_rejected():
    with pytest.raises(TypeError, match="power of two"):
        BankedStore(depth=64, banks=3)
    with pytest.raises(ValueError, match="multiple of banks"):
        BankedStore(depth=66, banks=4)
    with pytest.raises(ValueError, match="style"):
        BankedStore(depth=64, banks=4, style="lutram")
    with pytest.raises(ValueError, match="impl"):
        BankedStore(depth=64, banks=4, impl="sram")


def test_store_mapping():
    from ttrain.platforms.memory import store_primitives
    small = store_primitives(BankedStore(depth=4 * 512, banks=4))
    assert small["style"] == "block" and small["ramb18"] == 4
    rep = store_primitives(BankedStore(depth=16 * 8192, banks=16))
    assert (rep["style"], rep["impl"], rep["uram288"], rep["bytes"]) == \
        ("ultra", "verilog", 32, 4 * 16 * 8192)
    assert store_primitives(BankedStore(depth=8 * 1024, banks=8, style="block"))["ramb36"] == 8


def test_store_read_write_timing():
    dut = BankedStore(depth=32, banks=4)
    seen = []

    async def tb(ctx):
        for b in range(4):                      # write word 4*row + b = 100 + addr
            for row in range(8):
                ctx.set(dut.w_en[b], 1)
                ctx.set(dut.w_addr[b], row)
                ctx.set(dut.w_data[b], 100 + 4 * row + b)
                await ctx.tick()
            ctx.set(dut.w_en[b], 0)
        # read while writing the same row: old word; data one cycle after the request
        ctx.set(dut.r_en[2], 1)
        ctx.set(dut.r_addr[2], 3)
        ctx.set(dut.w_en[2], 1)
        ctx.set(dut.w_addr[2], 3)
        ctx.set(dut.w_data[2], 7)
        await ctx.tick()
        ctx.set(dut.w_en[2], 0)
        ctx.set(dut.r_en[2], 0)
        seen.append(ctx.get(dut.r_data[2]))
        await ctx.tick()                        # r_en low: data holds
        seen.append(ctx.get(dut.r_data[2]))
        ctx.set(dut.r_en[2], 1)
        await ctx.tick()
        seen.append(ctx.get(dut.r_data[2]))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    assert seen == [100 + 12 + 2, 100 + 12 + 2, 7]


# ---- arbiter --------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 7, 8, 9, 17, 64, 104])
def test_prefix_or_blocks(n):
    """The blocked prefix OR (kept block totals, the 8-lane top's timing fix) is the prefix OR
    of its values for any count, within a block, at a block edge and two levels of blocks."""
    from amaranth.hdl import Module, Signal
    from ttrain.rtl.engine import _prefix_or
    m = Module()
    vals = [Signal(3, name=f"v{i}") for i in range(n)]
    outs = _prefix_or(m, "pf", vals)
    rng = np.random.default_rng(n)
    cases = [[0] * n, [7] * n] + [list(rng.integers(0, 8, n) * (rng.random(n) < p))
                                  for p in (0.05, 0.2, 0.5) for _ in range(4)]
    seen = []

    async def tb(ctx):
        for case in cases:
            for v, x in zip(vals, case):
                ctx.set(v, int(x))
            seen.append([ctx.get(o) for o in outs])

    sim = Simulator(m)
    sim.add_testbench(tb)
    sim.run()
    for case, got in zip(cases, seen):
        want, acc = [], 0
        for x in case:
            acc |= int(x)
            want.append(acc)
        assert got == want


def test_arbiter_grants_first_requester_per_bank():
    """``_arbitrate``: each (store, bank) goes to the first requesting port in priority order;
    ``_first`` over a bank's ``(hit, addr)`` pairs picks the granted port's address."""
    from amaranth.hdl import Module, Signal
    from ttrain.rtl.engine import _arbitrate, _first
    n, n_stores, nb_log2 = 21, 3, 2
    m = Module()
    reqs = [Signal(name=f"req{i}") for i in range(n)]
    stores = [Signal(2, name=f"store{i}") for i in range(n)]
    banks = [Signal(nb_log2, name=f"bank{i}") for i in range(n)]
    grants = [Signal(name=f"grant{i}") for i in range(n)]
    addrs = [Signal(8, name=f"addr{i}") for i in range(n)]
    sel = _arbitrate(m, "arb", list(zip(reqs, stores, banks, addrs, grants)), n_stores, nb_log2)
    first = [[_first(sel[s][b], 8) for b in range(4)] for s in range(n_stores)]
    rng = np.random.default_rng(5)
    cases = [(rng.random(n) < p, rng.integers(0, n_stores, n), rng.integers(0, 4, n))
             for p in (0.1, 0.5, 0.9) for _ in range(10)]
    seen = []

    async def tb(ctx):
        for req, st, bk in cases:
            for i in range(n):
                ctx.set(reqs[i], int(req[i]))
                ctx.set(stores[i], int(st[i]))
                ctx.set(banks[i], int(bk[i]))
                ctx.set(addrs[i], 100 + i)
            seen.append(([ctx.get(g) for g in grants],
                         [[(ctx.get(a), ctx.get(v)) for a, v in row] for row in first]))

    sim = Simulator(m)
    sim.add_testbench(tb)
    sim.run()
    for (req, st, bk), (got, got_first) in zip(cases, seen):
        taken, want = {}, []
        for i in range(n):
            key = (int(st[i]), int(bk[i]))
            want.append(int(bool(req[i]) and key not in taken))
            if req[i]:
                taken.setdefault(key, i)
        assert got == want
        for s in range(n_stores):
            for b in range(4):
                hit, addr = got_first[s][b]
                assert hit == int((s, b) in taken)
                if hit:
                    assert addr == 100 + taken[(s, b)]


@pytest.mark.parametrize("bank_order", [False, True], ids=["lane-order", "bank-order"])
@pytest.mark.parametrize("skew", [False, True], ids=["plain", "skew"])
def test_row_entries_grant_as_their_lanes(skew, bank_order):
    """A row client's one arbiter entry (``_RowPorts``: the host port, the store ports) is
    granted exactly what its lanes would be as separate entries in lane order, between
    per-lane entries of higher and lower priority, and ``_first`` at each bank picks its row
    and write word there: random bases (row-aligned or not, so skewed full beats that cross a
    row), masks and stores; beats as wide as the banks and narrower (a quarter of the banks
    and 3 lanes: narrow entries, whose rotators are narrower than the banks). Both kinds of
    entry: pending lanes in lane order (row-operand segments), and in bank order (the row
    clients: the lane mask rotated to the banks as a load does, the grants rotated back)."""
    from amaranth.hdl import Cat, Module, Signal
    from ttrain.rtl.engine import _RowPorts, _arbitrate, _first
    nb_log2, n_stores, AW = 4, 2, 12
    NB = 1 << nb_log2
    widths = (NB, NB // 4, 3)
    m = Module()
    # per-lane entries: 3 before the rows, 3 after
    lane_sig = [(Signal(name=f"req{i}"), Signal(1, name=f"store{i}"),
                 Signal(nb_log2, name=f"bank{i}"), Signal(AW, name=f"addr{i}"),
                 Signal(name=f"grant{i}")) for i in range(6)]
    rows = []
    for r, L in enumerate(widths):
        base = Signal(AW, name=f"base{r}")
        rp = _RowPorts(m, f"row{r}", L, AW, nb_log2, skew, base, bank_order=bank_order)
        pending, store = Signal(L, name=f"pend{r}"), Signal(1, name=f"rstore{r}")
        data = [Signal(32, name=f"data{r}_{w}") for w in range(L)]
        if bank_order:
            rp.hold_data(m, data)             # words held per slot, as loaded
        for reg, _wait, loaded in rp.fields:  # the registers as a load of this base sets them
            m.d.comb += reg.eq(loaded)
        if bank_order:
            held = Signal(rp.pwidth, name=f"held{r}")
            m.d.comb += held.eq(rp.bank_mask(m, pending))
            rp.connect(m, held, store, True)
            lane_grant = Signal(L, name=f"lgrant{r}")
            m.d.comb += lane_grant.eq(Cat(*rp.lane_grants(m, rp.grant, rp.rot, rp.cross)))
        else:
            rp.connect(m, pending, store, data)
            lane_grant = rp.grant
        rows.append((rp, base, pending, store, data, lane_grant))
    assert [rp.W for rp, *_ in rows] == [NB, 8 if skew else 4, 4]
    assert [rp.pwidth for rp, *_ in rows] == ([2 * NB if skew else NB, NB, NB] if bank_order
                                              else list(widths))
    entries = lane_sig[:3] + [rp for rp, *_ in rows] + lane_sig[3:]
    words = [Signal(32, name=f"w{i}") for i in range(6)]
    wdata = words[:3] + [None] * len(rows) + words[3:]
    sel = _arbitrate(m, "arb", entries, n_stores, nb_log2, data=wdata)
    first = [[_first([(h, Cat(a[nb_log2:], d)) for h, a, d in sel[s][b]], AW - nb_log2 + 32)
              for b in range(NB)] for s in range(n_stores)]
    rng = np.random.default_rng(11 + skew)

    def bank(a):
        lo, hi = a % NB, a // NB
        return (lo + hi) % NB if skew else lo

    cases = []
    for _ in range(50):
        lanes = [(bool(rng.random() < 0.4), int(rng.integers(0, 2)), int(rng.integers(0, NB)))
                 for _ in range(6)]
        rws = []
        for L in widths:
            b0 = int(rng.integers(0, 64)) * (NB if rng.random() < 0.2 else 1) % 512
            rws.append((b0, int(rng.integers(0, 1 << L)), int(rng.integers(0, 2)),
                        [int(rng.integers(0, 1 << 32)) for _ in range(L)]))
        cases.append((lanes, rws))
    seen = []

    async def tb(ctx):
        for lanes, rws in cases:
            for i, (req, st, bk) in enumerate(lanes):
                r_, s_, b_, a_, _ = lane_sig[i]
                ctx.set(r_, int(req)); ctx.set(s_, st); ctx.set(b_, bk)
                ctx.set(a_, (bk + NB * (100 + i)) if not skew else NB * (100 + i))
                ctx.set(words[i], 1000 + i)
            for (rp, base, pending, store, data, _), (b0, mask, st, dat) in zip(rows, rws):
                ctx.set(base, b0); ctx.set(pending, mask); ctx.set(store, st)
                for w, v in enumerate(dat):
                    ctx.set(data[w], v)
            seen.append(([ctx.get(g) for *_, g in lane_sig],
                         [ctx.get(row[-1]) for row in rows],
                         [[(ctx.get(h), ctx.get(v)) for h, v in row] for row in first]))

    sim = Simulator(m)
    sim.add_testbench(tb)
    sim.run()
    for (lanes, rws), (g_lanes, g_rows, got_first) in zip(cases, seen):
        # the reference: every lane of every entry separately, in priority order
        flat = [("lane", i, req, (st, bk), 100 + i, 1000 + i)
                for i, (req, st, bk) in enumerate(lanes[:3])]
        for r, (b0, mask, st, dat) in enumerate(rws):
            for w in range(len(dat)):
                a = b0 + w
                flat.append(("row", (r, w), bool(mask >> w & 1), (st, bank(a)), a // NB,
                             dat[w]))
        flat += [("lane", i, req, (st, bk), 100 + i, 1000 + i)
                 for i, (req, st, bk) in list(enumerate(lanes))[3:]]
        taken, want_lane, want_row = {}, [0] * 6, [0] * len(rows)
        for kind, who, req, key, row, word in flat:
            ok = req and key not in taken
            if req:
                taken.setdefault(key, (row, word))
            if kind == "lane":
                want_lane[who] = int(ok)
            elif ok:
                want_row[who[0]] |= 1 << who[1]
        assert g_lanes == want_lane
        assert g_rows == want_row, (lanes, [(b0, mask, st) for b0, mask, st, _ in rws])
        for s_ in range(n_stores):
            for b in range(NB):
                hit, value = got_first[s_][b]
                assert hit == int((s_, b) in taken)
                if hit:
                    row, word = taken[(s_, b)]
                    assert value == row | (word << (AW - nb_log2)), (s_, b)

@pytest.mark.parametrize("skew", [False, True], ids=["plain", "skew"])
def test_narrow_store_ports_random_traffic(skew):
    """A store port a quarter of the banks wide reading two vectors a request (the wide
    machine's vector port, whose row entries have rotators narrower than the banks): random
    write beats (any base, crossing rows and the store's end, random masks and stores), then
    random two-vector reads with the consumer stalling at random; every word read equals a
    word-by-word model, and the host port reads the same stores back."""
    sizes = {"s0": 96, "s1": 64}
    stores = [StoreSpec(n, s) for n, s in sizes.items()]
    PW = 2
    eng = ContractionEngine(lanes=8, slots=8, stores=stores, ports=1, port_width=PW,
                            port_reads=(2,), bank_skew=skew)
    port, nb = eng.port0, eng.banks
    assert nb == 8
    rng = np.random.default_rng(61 + skew)
    mem = {n: [0] * s for n, s in sizes.items()}
    names = list(sizes)
    phases = []
    for _ in range(3):
        writes = []
        for _ in range(12):
            st = names[int(rng.integers(0, 2))]
            a = int(rng.integers(0, sizes[st]))
            mask = int(rng.integers(1, 1 << PW))
            words = [int(rng.integers(0, 1 << 32)) for _ in range(PW)]
            writes.append((st, a, mask, words))
        reads = [tuple((names[int(rng.integers(0, 2))], int(rng.integers(0, 96)),
                        int(rng.integers(0, 1 << PW))) for _ in range(2)) for _ in range(10)]
        phases.append((writes, reads))
    want, got, back, done_reads = [], [], {}, [0]

    def expect(st, a, mask):
        return [mem[st][a + w] if mask >> w & 1 and a + w < sizes[st] else 0
                for w in range(PW)]

    for writes, reads in phases:            # the model
        for st, a, mask, words in writes:
            for w in range(PW):
                if mask >> w & 1 and a + w < sizes[st]:
                    mem[st][a + w] = words[w]
        want += [expect(*r1) + expect(*r2) for r1, r2 in reads]
    sid = {n: i for i, n in enumerate(names)}

    async def tb(ctx):
        for writes, reads in phases:
            for st, a, mask, words in writes:
                for _ in range(int(rng.integers(0, 2))):
                    await ctx.tick()
                ctx.set(port.wr.payload.store, sid[st]); ctx.set(port.wr.payload.addr, a)
                ctx.set(port.wr.payload.mask, mask)
                for w in range(PW):
                    ctx.set(port.wr.payload.data[w], words[w])
                ctx.set(port.wr.valid, 1)
                await ctx.tick().until(port.wr.ready)
                ctx.set(port.wr.valid, 0)
            await ctx.tick()
            await ctx.tick().until(port.wr_idle)
            for (s1, a1, m1), (s2, a2, m2) in reads:
                for field, v in (("store", sid[s1]), ("addr", a1), ("mask", m1),
                                 ("store2", sid[s2]), ("addr2", a2), ("mask2", m2)):
                    ctx.set(getattr(port.rd.payload, field), v)
                ctx.set(port.rd.valid, 1)
                await ctx.tick().until(port.rd.ready)
                ctx.set(port.rd.valid, 0)
            done_reads[0] += len(reads)
            while len(got) < done_reads[0]:    # the next writes after this phase's reads
                await ctx.tick()
        full = (1 << nb) - 1
        for st in names:                        # every word back through the host port
            out = []
            for a in range(0, sizes[st], nb):
                ctx.set(eng.host_i.payload.as_value(),
                        eng.encode_host_beat(write=0, store=st, addr=a, mask=full))
                ctx.set(eng.host_i.valid, 1)
                await ctx.tick().until(eng.host_i.ready)
                ctx.set(eng.host_i.valid, 0)
                ctx.set(eng.host_o.ready, 1)
                word, = await ctx.tick().sample(
                    eng.host_o.payload.as_value()).until(eng.host_o.valid)
                ctx.set(eng.host_o.ready, 0)
                out += [(int(word) >> (32 * i)) & 0xFFFFFFFF for i in range(nb)]
            back[st] = out[:sizes[st]]

    async def consume(ctx):
        for _ in range(len(want)):
            while True:
                ready = bool(rng.random() < 0.6)
                ctx.set(port.rd_data.ready, ready)
                *_, valid, beat = await ctx.tick().sample(port.rd_data.valid,
                                                      port.rd_data.payload.as_value())
                if ready and valid:
                    got.append([(int(beat) >> (32 * i)) & 0xFFFFFFFF for i in range(2 * PW)])
                    break
        ctx.set(port.rd_data.ready, 0)

    sim = Simulator(eng)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    sim.add_testbench(consume)
    sim.run()
    assert got == want
    assert back == mem


# ---- engine ---------------------------------------------------------------------------------

def test_engine_parameters_rejected():
    stores = [StoreSpec("s", 64)]
    with pytest.raises(ValueError, match="lanes must be a power of two"):
        ContractionEngine(lanes=6, stores=stores)
    with pytest.raises(ValueError, match="use slots >= 7"):
        ContractionEngine(lanes=2, slots=4, stores=stores)
    with pytest.raises(ValueError, match="slots must be a power of two"):
        ContractionEngine(lanes=2, slots=12, stores=stores)
    with pytest.raises(TypeError, match="StoreSpec"):
        ContractionEngine(lanes=2, stores=["s"])
    with pytest.raises(ValueError, match="unique"):
        ContractionEngine(lanes=2, stores=[StoreSpec("s", 64), StoreSpec("s", 64)])
    with pytest.raises(ValueError, match="multiple of banks"):
        ContractionEngine(lanes=4, stores=[StoreSpec("s", 66)])
    with pytest.raises(ValueError, match="fetch_depth"):
        ContractionEngine(lanes=2, stores=stores, fetch_depth=1)
    eng = ContractionEngine(lanes=2, stores=stores)
    with pytest.raises(ValueError, match="exceeds the engine limit"):
        eng.encode_descriptor(Descriptor(1 << 16, 1, 1, View("s"), View("s"), View("s")))
    with pytest.raises(ValueError, match="not one of"):
        eng.encode_descriptor(Descriptor(1, 1, 1, View("x"), View("s"), View("s")))


def run_engine(eng, image, descs, *, stall_seed=None, back_to_back=False, written_only=False):
    """Load ``image`` through the host port, run ``descs`` in turn, read every store back
    after each (``back_to_back``: only after the last, each descriptor issued the cycle after
    the previous one is done; ``written_only``: after each but the last only the store the
    descriptor writes, its C view's). Returns a list of ``(image, error, error_code,
    cycles)`` (the image ``None`` but for the last when ``back_to_back``; only the stores
    read back)."""
    nb = eng.banks
    full = (1 << nb) - 1
    results = []
    rng = np.random.default_rng(stall_seed)

    async def stall(ctx):
        if stall_seed is not None:
            for _ in range(int(rng.integers(0, 3))):
                await ctx.tick()

    async def put(ctx, payload):
        await stall(ctx)
        ctx.set(eng.host_i.payload.as_value(), payload)
        ctx.set(eng.host_i.valid, 1)
        await ctx.tick().until(eng.host_i.ready)
        ctx.set(eng.host_i.valid, 0)

    async def tb(ctx):
        for name, words in image.items():
            for a in range(0, len(words), nb):
                await put(ctx, eng.encode_host_beat(write=1, store=name, addr=a, mask=full,
                                                    words=[int(w) for w in words[a:a + nb]]))
        for desc in descs:
            ctx.set(eng.desc.payload.as_value(), desc if isinstance(desc, int)
                    else eng.encode_descriptor(desc))
            # idle: the descriptor is taken once the host beats already accepted have
            # landed (the host port's 2-beat FIFO), within 3 cycles
            ctx.set(eng.desc.valid, 1)
            for _ in range(4):
                if ctx.get(eng.desc.ready):
                    break
                await ctx.tick()
            assert ctx.get(eng.desc.ready)
            await ctx.tick()
            ctx.set(eng.desc.valid, 0)
            for _ in range(200_000):             # a hung engine fails, it does not hang
                await ctx.tick()
                if ctx.get(eng.done):
                    break
            else:
                raise AssertionError(f"engine not done after 200,000 cycles: {desc}")
            state = (ctx.get(eng.error), ctx.get(eng.error_code), ctx.get(eng.cycles))
            if back_to_back and desc is not descs[-1]:
                results.append((None, *state))
                continue
            got = {}
            for name, words in image.items():
                if written_only and desc is not descs[-1] and name != desc.c.store:
                    continue
                out = []
                for a in range(0, len(words), nb):
                    await put(ctx, eng.encode_host_beat(write=0, store=name, addr=a, mask=full))
                    await stall(ctx)
                    ctx.set(eng.host_o.ready, 1)
                    word, = await ctx.tick().sample(
                        eng.host_o.payload.as_value()).until(eng.host_o.valid)
                    ctx.set(eng.host_o.ready, 0)
                    out += [(int(word) >> (32 * i)) & 0xFFFFFFFF for i in range(nb)]
                got[name] = np.array(out[:len(words)], dtype=np.uint32)
            results.append((got, *state))

    sim = Simulator(eng)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return results


def _image(rng, sizes):
    return {n: rng.standard_normal(s).astype(np.float32).view(np.uint32).copy()
            for n, s in sizes.items()}


def test_engine_descriptors_bit_exact():
    sizes = {"f": 96, "s": 64}
    eng = ContractionEngine(lanes=4, stores=[StoreSpec(n, s) for n, s in sizes.items()])
    rng = np.random.default_rng(3)
    image = _image(rng, sizes)
    descs = [
        # 10 rows: balanced tiles of 5 (padded to 7 slots); accumulate, A and B in one store
        Descriptor(10, 5, 3, View("f", 0, 3, 1), View("f", 30, 5, 1), View("s", 0, 5, 1),
                   accumulate=True),
        # transposed A and B (swapped strides), C with a padded leading dimension
        Descriptor(3, 6, 4, View.matrix("f", 50, 4, 3, transpose=True),
                   View.matrix("s", 40, 6, 4, transpose=True), View("f", 0, 7, 1)),
        # batched with a broadcast B (batch stride 0)
        Descriptor(2, 3, 2, View("s", 0, 2, 1, 4), View("f", 80, 3, 1, 0),
                   View("f", 64, 3, 1, 6), batch=2),
    ]
    results = run_engine(eng, image, descs, stall_seed=1)
    expect = image
    for desc, (got, err, code, cycles) in zip(descs, results):
        expect = contract(desc, expect)
        assert (err, code) == (0, ERROR_NONE)
        assert cycles >= eng.ideal_cycles(desc)
        for name in sizes:
            np.testing.assert_array_equal(got[name], expect[name], err_msg=f"{desc} {name}")


def test_engine_errors_change_nothing_and_next_runs():
    sizes = {"f": 32, "s": 32}
    eng = ContractionEngine(lanes=2, stores=[StoreSpec(n, s) for n, s in sizes.items()])
    rng = np.random.default_rng(4)
    image = _image(rng, sizes)
    good = Descriptor(2, 2, 3, View("f", 0, 3, 1), View("f", 8, 2, 1), View("s", 0, 2, 1))
    bad_a = Descriptor(2, 2, 3, View("f", 28, 3, 1), good.b, good.c)
    bad_c = Descriptor(2, 2, 3, good.a, good.b, View("s", 20, 2, 1, 10), batch=2)
    raw = eng.encode_descriptor(good)
    zero_k = raw & ~(((1 << eng.dim_bits) - 1) << (2 * eng.dim_bits))        # k = 0
    runs = run_engine(eng, image, [bad_a, bad_c, zero_k, good])
    for (got, err, code, _), want in zip(runs[:3], [ERROR_A_RANGE, ERROR_C_RANGE, ERROR_DIM]):
        assert (err, code) == (1, want)
        for name in sizes:
            np.testing.assert_array_equal(got[name], image[name])
    got, err, code, _ = runs[3]
    assert (err, code) == (0, ERROR_NONE)
    expect = contract(good, image)
    for name in sizes:
        np.testing.assert_array_equal(got[name], expect[name])
    assert check_descriptor(bad_a, sizes) == ERROR_A_RANGE


def test_engine_random_descriptors_sim():
    sizes = {"f": 128, "s": 64}
    eng = ContractionEngine(lanes=4, stores=[StoreSpec(n, s) for n, s in sizes.items()])
    rng = np.random.default_rng(11)
    image = _image(rng, sizes)
    descs = [random_descriptor(rng, sizes, max_mn=6, max_k=5, max_batch=2) for _ in range(2)]
    expect = image
    for desc, (got, err, code, _) in zip(descs, run_engine(eng, image, descs, stall_seed=2)):
        expect = contract(desc, expect)
        assert (err, code) == (0, ERROR_NONE)
        for name in sizes:
            np.testing.assert_array_equal(got[name], expect[name], err_msg=str(desc))


def test_engine_unknown_store_code():
    sizes = {"f": 16, "s": 16, "t": 16}
    eng = ContractionEngine(lanes=2, stores=[StoreSpec(n, s) for n, s in sizes.items()])
    rng = np.random.default_rng(5)
    image = _image(rng, sizes)
    good = Descriptor(1, 2, 2, View("f", 0, 2, 1), View("s", 0, 2, 1), View("t", 0, 2, 1))
    raw = eng.encode_descriptor(good)
    layout = eng.desc.payload.shape()
    off = layout["b"].offset + layout["b"].shape["store"].offset
    bad = raw | (3 << off)                       # b.store = 3: no such store
    runs = run_engine(eng, image, [bad])
    got, err, code, _ = runs[0]
    assert (err, code) == (1, ERROR_STORE)
    for name in sizes:
        np.testing.assert_array_equal(got[name], image[name])


def test_best_orientation_and_cycle_model():
    eng = ContractionEngine(lanes=8, slots=16, stores=[StoreSpec("s", 1024)])
    # 80 x 10 output, k = 96: lanes over 10 columns waste 6 of 16; the transpose does not
    # (odd leading dimensions of A and C keep the transposed B and C vectors off one bank)
    tall = Descriptor(80, 10, 96, View("s", 0, 97, 1), View("s", 0, 10, 1), View("s", 0, 11, 1))
    best = eng.best_orientation(tall)
    assert (best.m, best.n) == (10, 80) and best == tall.transposed()
    assert eng.issue_cycles(best) - eng.overhead_cycles == eng.ideal_cycles(tall)
    # m = 20 on 16 slots: balanced tiles of 10, so no padding rows
    d = Descriptor(20, 8, 5, View("s", 0, 5, 1), View("s", 0, 8, 1), View("s", 0, 8, 1))
    assert eng.issue_cycles(d) - eng.overhead_cycles == 2 * 1 * 5 * 10
    # fewer rows than the adder latency + 1: padded to 7 slots per k-step
    small = Descriptor(3, 8, 4, View("s", 0, 4, 1), View("s", 0, 8, 1), View("s", 0, 8, 1))
    assert eng.issue_cycles(small) - eng.overhead_cycles == 4 * (eng.add_latency + 1)
    assert eng.best_orientation(d) is d
    # the banks are in the model: a column stride of 96 puts a B vector's 8 lanes in one of
    # the 8 banks, 8 cycles per vector against the 7-cycle k-step of 4 rows; 97 does not
    wide_ld = Descriptor(4, 8, 96, View("s", 0, 1, 4), View("s", 0, 1, 96), View("s", 0, 8, 1))
    assert eng.issue_cycles(wide_ld) - eng.overhead_cycles >= 96 * 8
    odd_ld = Descriptor(4, 8, 96, View("s", 0, 1, 4), View("s", 0, 1, 97), View("s", 0, 8, 1))
    assert eng.issue_cycles(odd_ld) - eng.overhead_cycles == 96 * (eng.add_latency + 1)


def test_engine_integer_mode_random_descriptors_sim():
    """Integer mode: sign-extended 16-bit operands (the high halves of the words are junk the
    engine must ignore), wrapping int32 sums, accumulate; mixed with FP32 runs, random stalls."""
    sizes = {"f": 128, "s": 64}
    eng = ContractionEngine(lanes=4, stores=[StoreSpec(n, s) for n, s in sizes.items()])
    rng = np.random.default_rng(12)
    image = {n: rng.integers(0, 1 << 32, s, dtype=np.uint64).astype(np.uint32)
             for n, s in sizes.items()}
    # a wrap-around case: 8 products 0x7FFF * 0x7FFF overflow int32; the sum wraps mod 2**32
    image["f"][:8] = 0x12347FFF
    image["f"][8:16] = 0xABCD7FFF
    descs = [Descriptor(1, 1, 8, View("f", 0, 8, 1), View("f", 8, 1, 1), View("s", 0, 1, 1),
                        integer=True),
             *[random_descriptor(rng, sizes, max_mn=6, max_k=5, max_batch=2, integer="random")
               for _ in range(4)]]
    descs.append(Descriptor(2, 2, 2, View("f", 100, 2, 1), View("f", 110, 2, 1),
                            View("s", 40, 2, 1), integer=True, accumulate=True))
    assert {d.integer for d in descs[1:5]} == {True, False}     # both modes, interleaved
    expect = image
    for desc, (got, err, code, _) in zip(descs, run_engine(eng, image, descs, stall_seed=3)):
        expect = contract(desc, expect)
        assert (err, code) == (0, ERROR_NONE)
        for name in sizes:
            np.testing.assert_array_equal(got[name], expect[name], err_msg=str(desc))
    assert int(expect["s"][0]) == (8 * 0x7FFF * 0x7FFF) & 0xFFFFFFFF


def test_engine_split_descriptors_sim():
    """Lane groups: split 1..4 on 4 lanes (each group a part of k, the fold tree adds the
    parts in golden's order), FP32 and integer, accumulate, parts past k empty, random stalls;
    a split above the engine's limit is ERROR_DIM and changes nothing."""
    sizes = {"f": 128, "s": 64}
    eng = ContractionEngine(lanes=4, stores=[StoreSpec(n, s) for n, s in sizes.items()],
                            max_split=4)
    rng = np.random.default_rng(21)
    image = _image(rng, sizes)
    descs = [
        # k = 7 in parts of 2: the last part is short; 5 columns on groups of 2 lanes
        Descriptor(3, 5, 7, View("f", 0, 7, 1), View("f", 21, 5, 1), View("s", 0, 5, 1),
                   accumulate=True, split=4),
        # k = 2 with split 4: two empty parts
        Descriptor(2, 3, 2, View("f", 60, 2, 1), View("s", 20, 3, 1), View("f", 90, 3, 1),
                   split=4),
    ]
    descs += [random_descriptor(rng, sizes, max_mn=6, max_k=9, max_batch=2, max_split=4,
                                integer="random") for _ in range(3)]
    over = Descriptor(2, 2, 2, View("f", 0, 2, 1), View("f", 8, 2, 1), View("s", 0, 2, 1),
                      split=8)
    raw = eng.encode_descriptor(over)
    expect = image
    runs = run_engine(eng, image, descs + [raw], stall_seed=5)
    for desc, (got, err, code, cycles) in zip(descs, runs):
        expect = contract(desc, expect)
        assert (err, code) == (0, ERROR_NONE), desc
        for name in sizes:
            np.testing.assert_array_equal(got[name], expect[name], err_msg=str(desc))
    got, err, code, _ = runs[-1]
    assert (err, code) == (1, ERROR_DIM)
    for name in sizes:
        np.testing.assert_array_equal(got[name], expect[name])
    assert check_descriptor(over, sizes, max_split=eng.max_split) == ERROR_DIM


def test_engine_split_descriptors_back_to_back():
    """Descriptors of changing splits issued back to back (the sequencer's pace): a vector
    of one descriptor still in the fold tree must not reach the next one's output level
    (a split-2 run followed at once by a split-4 run hung the engine before the fix)."""
    sizes = {"f": 256, "s": 128}
    eng = ContractionEngine(lanes=4, stores=[StoreSpec(n, s) for n, s in sizes.items()],
                            max_split=4)
    rng = np.random.default_rng(31)
    image = _image(rng, sizes)
    a, b = View("f", 0, 6, 1), View("f", 100, 3, 1)
    descs = []
    for i, split in enumerate((2, 4, 1, 4, 2, 2, 4, 1, 2)):
        descs.append(Descriptor(8 + i % 3, 3, 6, a, b, View("s", 12 * i, 3, 1),
                                accumulate=bool(i % 2), split=split))
    runs = run_engine(eng, image, descs, back_to_back=True)
    expect = image
    for desc, (_, err, code, _) in zip(descs, runs):
        assert (err, code) == (0, ERROR_NONE), desc
        expect = contract(desc, expect)
    for name in sizes:
        np.testing.assert_array_equal(runs[-1][0][name], expect[name])


def _run_bit_exact(eng, image, descs, *, stall_seed):
    """:func:`run_engine` with the written store checked against golden after each
    descriptor and every store after the last (no error raised; a word another descriptor
    changed in a store it does not write would still be wrong at the end, since descriptors
    write only their C views); returns the runs."""
    runs = run_engine(eng, image, descs, stall_seed=stall_seed, written_only=True)
    expect = image
    for desc, (got, err, code, _) in zip(descs, runs):
        expect = contract(desc, expect)
        assert (err, code) == (0, ERROR_NONE), desc
        for name in got:
            np.testing.assert_array_equal(got[name], expect[name], err_msg=str(desc))
    return runs


def test_engine_fetch_beats_sim():
    """Operand fetchers and the C writer in beats of ``fetch_words`` words: 8 lanes through 2
    ports, lane groups, accumulate, masked beats skipped, strided operands, random stalls;
    bit-exact. With A, B and C in separate stores (no bank conflicts) the cycles are the
    golden cycle model's with its fetch bound, within 6%."""
    sizes = {"a": 192, "b": 256, "c": 128}
    eng = ContractionEngine(lanes=8, slots=8, stores=[StoreSpec(n, s) for n, s in sizes.items()],
                            max_split=4, fetch_words=2)
    assert eng.fetch_words == 2
    rng = np.random.default_rng(41)
    image = _image(rng, sizes)
    clean = [
        # 8 columns, 1 group: B and C vectors of 4 beats each; two column tiles, accumulate
        Descriptor(8, 16, 12, View("a", 0, 12, 1), View("b", 0, 16, 1), View("c", 0, 16, 1),
                   accumulate=True),
        # 3 columns on groups of 2 lanes (split 4): every beat partly masked
        Descriptor(5, 3, 9, View("a", 100, 9, 1), View("b", 40, 3, 1), View("c", 0, 3, 1),
                   split=4),
        # 3 rows, a long k: the B vector's 4 beats and the A vector's 2 within a 7-cycle k-step
        Descriptor(3, 8, 30, View("a", 0, 30, 1), View("b", 0, 8, 1), View("c", 50, 8, 1)),
    ]
    mixed = [
        # strided B (column stride 3), A and B in one store, split 2
        Descriptor(2, 4, 6, View("a", 150, 6, 1), View("a", 0, 1, 3), View("c", 80, 5, 1),
                   accumulate=True, split=2),
    ] + [random_descriptor(rng, sizes, max_mn=9, max_k=9, max_batch=2, max_split=4,
                           integer="random") for _ in range(3)]
    descs = clean + mixed
    expect = image
    for desc, (got, err, code, cycles) in zip(descs, run_engine(eng, image, descs,
                                                                 stall_seed=6)):
        expect = contract(desc, expect)
        assert (err, code) == (0, ERROR_NONE), desc
        for name in sizes:
            np.testing.assert_array_equal(got[name], expect[name], err_msg=str(desc))
        if desc in clean:
            assert abs(cycles - eng.issue_cycles(desc)) <= 0.06 * cycles, (desc, cycles)
    with pytest.raises(ValueError, match="fetch_words must be a power of two in 1..lanes"):
        ContractionEngine(lanes=4, stores=[StoreSpec("s", 64)], fetch_words=8)


def test_engine_bank_skew_sim():
    """Rows skewed across the banks (``bank_skew``): the same words, bit-exact (host beats,
    strided fetches, beats, lane groups), and a B vector of stride 3 x banks, which puts every
    lane in one bank without the skew, runs at the k-step rate with it; the cycle model
    follows both within 6%."""
    sizes = {"a": 128, "b": 256, "c": 64}
    stores = [StoreSpec(n, s) for n, s in sizes.items()]
    skewed = ContractionEngine(lanes=8, slots=8, stores=stores, max_split=2, fetch_words=4,
                               bank_skew=True)
    plain = ContractionEngine(lanes=8, slots=8, stores=stores, max_split=2, fetch_words=4)
    assert skewed.bank_skew and not plain.bank_skew
    rng = np.random.default_rng(51)
    image = _image(rng, sizes)
    # k-contiguous B with leading dimension 24 = 3 x 8 banks: lanes 24 words apart
    kcont = Descriptor(4, 8, 20, View("a", 0, 20, 1), View("b", 0, 1, 24), View("c", 0, 8, 1))
    descs = [kcont] + [random_descriptor(rng, sizes, max_mn=9, max_k=9, max_batch=2,
                                         max_split=2, integer="random") for _ in range(3)]
    runs = _run_bit_exact(skewed, image, descs, stall_seed=7)
    cyc_skew = runs[0][3]
    cyc_plain = run_engine(plain, image, [kcont])[0][3]
    assert abs(cyc_skew - skewed.issue_cycles(kcont)) <= 0.06 * cyc_skew
    assert abs(cyc_plain - plain.issue_cycles(kcont)) <= 0.06 * cyc_plain
    # skewed: one 7-cycle k-step per k (the adder interleave); plain: 2 beats of 4 lanes in
    # one bank, 8 cycles per k-step
    rate = kcont.k * (skewed.add_latency + 1) + skewed.overhead_cycles
    assert cyc_skew <= rate + 4 < cyc_plain, (cyc_skew, rate, cyc_plain)


def test_engine_row_operands_sim():
    """``row_operands``: B, old-C and C vectors of consecutive words go to the arbiter as row
    entries (one per lane group), strided ones through the ``fetch_words`` ports as before.
    Bit-exact on clean, strided and random descriptors (lane groups, accumulate, integer mode,
    one store for all, random stalls, 16 lanes on 8 banks so B has two entries per group); a
    unit-stride descriptor is as fast as with whole-vector ports and faster than with the
    2-word beats alone, and the cycle model follows both within 6%. Skewed banks only (the
    unskewed row entries' grants: ``test_row_entries_grant_as_their_lanes[plain]``)."""
    skew = True
    sizes = {"a": 128, "b": 256, "c": 128}
    stores = [StoreSpec(n, s) for n, s in sizes.items()]
    kw = dict(lanes=16, slots=8, stores=stores, banks=8, max_split=4, fetch_words=2,
              bank_skew=skew)
    rows = ContractionEngine(row_operands=True, **kw)
    beats = ContractionEngine(**kw)
    assert rows.row_operands and not beats.row_operands
    rng = np.random.default_rng(61 + skew)
    image = _image(rng, sizes)
    unit = Descriptor(6, 16, 10, View("a", 3, 10, 1), View("b", 5, 16, 1), View("c", 1, 16, 1),
                      accumulate=True)
    grouped = Descriptor(4, 6, 24, View("a", 0, 24, 1), View("b", 40, 6, 1),
                         View("c", 100, 6, 1), split=4)
    strided = Descriptor(3, 5, 7, View("a", 0, 7, 1), View("b", 0, 1, 7), View("c", 50, 1, 3),
                         accumulate=True)
    descs = [unit, grouped, strided] + [
        random_descriptor(rng, sizes, max_mn=17, max_k=9, max_batch=2, max_split=4,
                          integer="random") for _ in range(2)]     # (the route chosen
    runs = _run_bit_exact(rows, image, descs, stall_seed=8)       # for 256 lanes is Omega's)
    for i, desc in ((0, unit), (2, strided)):   # (grouped: A-bound, the model 17% over)
        cyc = runs[i][3]
        assert abs(cyc - rows.issue_cycles(desc)) <= 0.06 * cyc, (desc, cyc,
                                                                  rows.issue_cycles(desc))
    cyc_beats = run_engine(beats, image, [unit])[0][3]
    whole = ContractionEngine(**{**kw, "fetch_words": None})
    assert rows.issue_cycles(unit) < beats.issue_cycles(unit)
    assert runs[0][3] < cyc_beats
    assert rows.issue_cycles(unit) == whole.issue_cycles(unit)


@pytest.mark.parametrize("route", ["omega", "omega-shared"])
def test_engine_omega_route_sim(route):
    """``route="omega"``: the A, B, old-C and C vectors reach the banks through Omega
    ports (rtl/omega.py) instead of one arbiter request per lane (``"omega-shared"``: A, B
    and old C in turns through one read port, each vector tagged with its store). Bit-exact
    on clean, strided and random descriptors (lane groups, accumulate, integer mode, A and B in one
    store, skewed banks, random stalls, the A port 16 lanes wide over 8 banks); a
    unit-stride accumulating descriptor runs within 6% of the golden cycle model's omega
    route (on the shared port too: its old-C rows go before further A and B vectors), and
    the route's constraints are named when broken."""
    sizes = {"a": 128, "b": 192, "c": 96}
    stores = [StoreSpec(n, s) for n, s in sizes.items()]
    eng = ContractionEngine(lanes=8, slots=8, stores=stores, max_split=2, bank_skew=True,
                            route=route)
    assert eng.route == route
    rng = np.random.default_rng(71)
    image = _image(rng, sizes)
    unit = Descriptor(4, 8, 22, View("a", 3, 22, 1), View("b", 5, 8, 1), View("c", 1, 8, 1),
                      accumulate=True)
    strided = Descriptor(3, 5, 7, View("a", 0, 7, 1), View("a", 40, 1, 7),
                         View("c", 50, 1, 3), accumulate=True, split=2)
    descs = [unit, strided] + [random_descriptor(rng, sizes, max_mn=9, max_k=9, max_batch=2,
                                                 max_split=2, integer="random")
                               for _ in range(3)]
    runs = _run_bit_exact(eng, image, descs, stall_seed=9)
    cyc = runs[0][3]
    assert abs(cyc - eng.issue_cycles(unit)) <= 0.06 * cyc, (cyc, eng.issue_cycles(unit))
    for bad, match in (({"banks": 1}, "needs banks >= 2"),
                       ({"fetch_words": 4}, "whole-vector fetches"),
                       ({"route": "mesh"}, "route must be None")):
        with pytest.raises(ValueError, match=match):
            ContractionEngine(**{"lanes": 8, "stores": stores, "route": "omega", **bad})
