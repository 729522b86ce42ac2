# amaranth: UnusedElaboratable=no
"""Amaranth-simulator tests of the vector unit (elementwise / reduce / gather) against the
golden interpreter, bit-exact, on random strided views and special FP32 values."""

import numpy as np
import pytest
from amaranth.hdl import Elaboratable, Module, Mux, Signal
from amaranth.lib import memory
from amaranth.sim import Simulator

from ttrain.golden.contract import Descriptor, View
from ttrain.golden.interpreter import check_program, run
from ttrain.golden.isa import (ELEMENTWISE_OPS, ERR_INDEX, ERR_OPCODE, SPECIAL_OPS, STORE_IDS,
                               Contract, Elementwise, End, Gather, Reduce, Update, f32_bits)
from ttrain.rtl.command import VectorCommand, vector_command
from ttrain.testbench.vector_ref import VectorUnit
from sequencer_harness import connect_units, descriptor_of, load_and_run, read_image

SIZE = 64
STORES = ("param", "grad", "act", "scratch")
SPECIAL = [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001,
           0x00000001, 0x807FFFFF, 0x7F7FFFFF, 0x3F800000, 0xBF800000]


class _Harness(Elaboratable):
    """The vector unit on four ``SIZE``-word memories (one read, one write port each)."""

    def __init__(self, handshake=False):
        self.dut = VectorUnit(addr_bits=6, handshake=handshake)
        self.mems = [memory.Memory(shape=32, depth=SIZE, init=[]) for _ in STORES]
        # handshake mode: the testbench drives these at random (port busy / slow answer)
        self.go_r, self.go_v, self.go_w = Signal(), Signal(), Signal()

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        rdata = []
        rd_acc = dut.rd_en & self.go_r
        wr_acc = dut.wr_en & self.go_w
        pending = Signal()
        with m.If(rd_acc):
            m.d.sync += pending.eq(1)
        with m.Elif(pending & self.go_v):
            m.d.sync += pending.eq(0)
        m.d.comb += [dut.rd_ready.eq(self.go_r), dut.wr_ready.eq(self.go_w),
                     dut.rd_valid.eq(pending & self.go_v)]
        for s, mem in enumerate(self.mems):
            m.submodules[f"mem{s}"] = mem
            rp = mem.read_port(transparent_for=())
            wp = mem.write_port()
            m.d.comb += [rp.en.eq(rd_acc & (dut.rd_store == s)), rp.addr.eq(dut.rd_addr),
                         wp.en.eq(wr_acc & (dut.wr_store == s)), wp.addr.eq(dut.wr_addr),
                         wp.data.eq(dut.wr_data)]
            rdata.append(rp.data)
        sel = self.dut.rd_store
        last = Signal(2)
        with m.If(rd_acc):
            m.d.sync += last.eq(sel)
        word = Mux(last[1], Mux(last[0], rdata[3], rdata[2]), Mux(last[0], rdata[1], rdata[0]))
        if self.dut._handshake:       # data is garbage outside rd_valid
            word = Mux(dut.rd_valid, word, 0x7F80DEAD)
        m.d.comb += dut.rd_data.eq(word)
        return m


def _random_image(rng):
    img = {}
    for s in STORES:
        w = rng.standard_normal(SIZE).astype(np.float32).view(np.uint32)
        k = rng.integers(0, SIZE, 8)
        w[k] = rng.choice(SPECIAL, 8)
        img[s] = w.astype(np.uint32)
    return img


def simulate(instrs, image, stall_seed=None):
    """Run the vector instructions in turn on the harness; return (image, errors, cycles).

    ``stall_seed``: handshake mode with random read/write stalls and slow read answers."""
    h = _Harness(handshake=stall_seed is not None)
    dut = h.dut
    rng = np.random.default_rng(stall_seed)

    async def stalls(ctx):
        while True:
            if stall_seed is None:
                ctx.set(h.go_r, 1), ctx.set(h.go_v, 1), ctx.set(h.go_w, 1)
            else:
                for sig in (h.go_r, h.go_v, h.go_w):
                    ctx.set(sig, int(rng.random() < 0.6))
            await ctx.tick()
    out = {}
    errors = []
    cycles = []

    async def tb(ctx):
        for s, mem in enumerate(h.mems):
            for a, wd in enumerate(image[STORES[s]]):
                ctx.set(mem.data[a], int(wd))
        for ins in instrs:
            ctx.set(dut.cmd.payload, VectorCommand.const(vector_command(ins)))
            ctx.set(dut.cmd.valid, 1)
            await ctx.tick().until(dut.cmd.ready)
            ctx.set(dut.cmd.valid, 0)
            n = 0
            while not ctx.get(dut.done):
                await ctx.tick()
                n += 1
            errors.append(ctx.get(dut.error))
            cycles.append(n)
        for s, mem in enumerate(h.mems):
            out[STORES[s]] = np.array([ctx.get(mem.data[a]) for a in range(SIZE)],
                                      dtype=np.uint32)

    sim = Simulator(h)
    sim.add_clock(1e-8)
    sim.add_testbench(stalls, background=True)
    sim.add_testbench(tb)
    sim.run()
    return out, errors, cycles


def _view(rng, rows, cols, store=None):
    store = store or STORES[int(rng.integers(0, 4))]
    rs, cs = (cols, 1) if rng.random() < 0.5 else (1, rows)
    if rng.random() < 0.3:
        rs, cs = rs * 2 if rs > 1 else rs, cs * 2 if cs > 1 else cs
    span = (rows - 1) * rs + (cols - 1) * cs + 1
    return View(store, int(rng.integers(0, SIZE - span + 1)), rs, cs)


def _random_instr(rng, kind):
    sizes = {s: SIZE for s in STORES}
    for _ in range(500):
        rows, cols = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        imm = int(rng.choice(SPECIAL + [f32_bits(rng.standard_normal())]))
        if kind in ("add", "sub", "mul"):
            ins = Elementwise(kind, rows, cols, _view(rng, rows, cols), _view(rng, rows, cols),
                              _view(rng, rows, cols))
        elif kind in ("scale", "addi", "copy"):
            a = _view(rng, rows, cols)
            d = a if rng.random() < 0.3 else _view(rng, rows, cols)
            ins = Elementwise(kind, rows, cols, d, a, None, imm if kind != "copy" else 0)
        elif kind == "fill":
            ins = Elementwise(kind, rows, cols, _view(rng, rows, cols), imm=imm)
        elif kind in ("sum", "max"):
            d = _view(rng, rows, 1)
            d = View(d.store, d.base, d.row_stride if d.row_stride else 1, 0)
            ins = Reduce(kind, rows, cols, d, _view(rng, rows, cols),
                         accumulate=bool(rng.random() < 0.5))
        elif kind == "update":
            n = int(rng.integers(1, 9))
            th, g = STORES[int(rng.integers(0, 2))], STORES[int(rng.integers(0, 4))]
            ins = Update(View(th, int(rng.integers(0, SIZE - n + 1))),
                         View(g, int(rng.integers(0, SIZE - n + 1))), n, imm)
        else:
            tr = int(rng.integers(1, 6))
            idx = _view(rng, rows, 1)
            idx = View(idx.store, idx.base, idx.row_stride if idx.row_stride else 1, 0)
            if kind == "gather":
                ins = Gather(kind, rows, cols, tr, _view(rng, rows, cols),
                             _view(rng, tr, cols), idx)
            else:
                ins = Gather(kind, rows, cols, tr, _view(rng, tr, cols), _view(rng, rows, cols),
                             idx)
        if check_program([ins, End()], sizes)[0] == 0:
            return ins
    raise AssertionError(f"no legal random {kind} found")


def _set_indices(rng, ins, image, valid=True):
    """Write index data for a gather/scatter (repeats likely; one bad entry if not valid)."""
    addr = ins.index.base + ins.index.row_stride * np.arange(ins.rows)
    idx = rng.integers(0, ins.table_rows, ins.rows)
    if not valid:
        idx[int(rng.integers(0, ins.rows))] = ins.table_rows + int(rng.integers(0, 3))
    image[ins.index.store][addr] = idx.astype(np.uint32)


KINDS = ["add", "sub", "mul", "scale", "addi", "copy", "fill", "sum", "max", "gather",
         "scatter_add", "update"]


@pytest.mark.parametrize("kind", ["sub", "sum", "max", "scatter_add", "update"])
def test_vector_handshake_with_stalls(kind):
    """Handshake mode (shared port): random request stalls and slow read answers."""
    rng = np.random.default_rng(KINDS.index(kind) + 300)
    image = _random_image(rng)
    ins = _random_instr(rng, kind)
    if isinstance(ins, Gather):
        _set_indices(rng, ins, image)
    want, stats = run([ins, End()], image)
    assert stats.ok
    got, errors, cycles = simulate([ins], image, stall_seed=KINDS.index(kind))
    _, _, fixed = simulate([ins], image)
    assert errors == [0] and cycles[0] > fixed[0]          # the stalls really happened
    for s in STORES:
        np.testing.assert_array_equal(got[s], want[s])


@pytest.mark.parametrize("kind", KINDS)
def test_vector_op_matches_interpreter(kind):
    rng = np.random.default_rng(KINDS.index(kind) + 100)
    image = _random_image(rng)
    instrs = []
    for _ in range(3):
        ins = _random_instr(rng, kind)
        if isinstance(ins, Gather):
            _set_indices(rng, ins, image)
            # keep later instructions from overwriting this one's index list
            if any(isinstance(p, Gather) and p.index.store == ins.index.store for p in instrs):
                continue
        instrs.append(ins)
    want, stats = run(instrs + [End()], image)
    assert stats.ok, stats.message
    got, errors, _ = simulate(instrs, image)
    assert errors == [0] * len(instrs)
    for s in STORES:
        bad = np.nonzero(got[s] != want[s])[0]
        assert bad.size == 0, (s, bad, got[s][bad], want[s][bad], instrs)
    # the instructions really changed words (not a vacuous comparison)
    assert any(not np.array_equal(want[s], image[s]) for s in STORES) or kind == "copy"


def test_vector_reduce_special_rows():
    """rsum from -0.0 (all -0 row stays -0), rmax with NaN and +-0, accumulate."""
    image = {s: np.zeros(SIZE, dtype=np.uint32) for s in STORES}
    rows = [[0x80000000, 0x80000000, 0x80000000],       # -0 sum stays -0
            [0x80000000, 0x00000000, 0x80000000],       # max(-0, +0) = +0
            [0x3F800000, 0x7FC00001 & 0x7FFFFFFF, 0x40000000],   # NaN -> canonical
            [0x7F800000, 0xFF800000, 0x3F800000]]      # inf - inf = NaN
    image["act"][:12] = np.array(rows, dtype=np.uint32).ravel()
    image["grad"][:4] = [0x80000000, 0x00000000, 0xBF800000, 0x7F7FFFFF]
    instrs = [Reduce("sum", 4, 3, View("scratch", 0, 1, 0), View("act", 0, 3, 1)),
              Reduce("max", 4, 3, View("scratch", 8, 1, 0), View("act", 0, 3, 1)),
              Reduce("sum", 4, 3, View("grad", 0, 1, 0), View("act", 0, 3, 1), True),
              Reduce("max", 4, 3, View("grad", 8, 2, 0), View("act", 0, 3, 1), True)]
    want, stats = run(instrs + [End()], image)
    assert stats.ok
    got, errors, _ = simulate(instrs, image)
    assert errors == [0] * 4
    for s in STORES:
        np.testing.assert_array_equal(got[s], want[s])
    assert want["scratch"][0] == 0x80000000 and want["scratch"][9] == 0x00000000


def test_vector_index_error_writes_nothing():
    rng = np.random.default_rng(7)
    for kind in ("gather", "scatter_add"):
        image = _random_image(rng)
        ins = _random_instr(rng, kind)
        _set_indices(rng, ins, image, valid=False)
        want, stats = run([ins, End()], image)
        assert stats.error == ERR_INDEX
        got, errors, _ = simulate([ins], image)
        assert errors == [ERR_INDEX]
        for s in STORES:
            np.testing.assert_array_equal(got[s], image[s])


def test_vector_unit_parameters_rejected():
    with pytest.raises(ValueError, match="addr_bits"):
        VectorUnit(addr_bits=0)
    with pytest.raises(ValueError, match="addr_bits"):
        VectorUnit(addr_bits=40)
    with pytest.raises(TypeError, match="Elementwise, Reduce, Gather or Update"):
        vector_command(End())
    assert STORE_IDS == {s: i for i, s in enumerate(STORES)}


# ---- instruction decoder ----------------------------------------------------------------

def _golden_code(words):
    from ttrain.golden.isa import ISAError, decode
    try:
        decode(words)
    except ISAError as e:
        return e.code
    return 0


def _legal_words(rng):
    """Encoded random legal instructions of every opcode."""
    from ttrain.golden.contract import random_descriptor
    from ttrain.golden.isa import (Barrier, Contract, EndLoop, Loop, encode)
    sizes = {s: SIZE for s in STORES}
    out = [encode(End()), encode(Barrier()), encode(EndLoop()),
           encode(Loop(int(rng.integers(1, 9)), (1, 2, 3))),
           encode(Update(View("param", 3), View("grad", 5), 7, f32_bits(0.01))),
           encode(Contract(random_descriptor(rng, sizes), (1, 0, 2)))]
    for kind in KINDS:
        out.append(encode(_random_instr(rng, kind)))
    for kind in SPECIAL_OPS:                   # unary special functions (0x40..0x47)
        rows, cols = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        out.append(encode(Elementwise(kind, rows, cols, _view(rng, rows, cols),
                                      _view(rng, rows, cols), step=(1, 2, 0))))
    return out


def _decoder_cases(rng):
    words = []
    for w in _legal_words(rng):
        words.append(list(w))
        for _ in range(24):                    # single flipped bits anywhere
            v = list(w)
            b = int(rng.integers(0, 512))
            v[b // 32] ^= 1 << (b % 32)
            words.append(v)
        for _ in range(6):                     # a whole word randomized or cleared
            v = list(w)
            v[int(rng.integers(0, 16))] = int(rng.choice([0, 1, int(rng.integers(0, 2**32))]))
            words.append(v)
        for op in (0x00, 0x05, 0x17, 0x22, 0x2A, 0x31, 0x48, 0x4F, 0x50, 0x7F, 0xFF,
                   int(rng.integers(0x48, 0x80))):   # unassigned, incl. reserved special
            v = list(w)
            v[0] = (v[0] & ~0xFF) | op
            words.append(v)
        v = list(w)                            # bad store id in each slot
        v[1] |= int(rng.integers(4, 256)) << (8 * int(rng.integers(0, 3)))
        words.append(v)
        if w[0] & 0xFF in SPECIAL_OPS.values():   # copy's field rules: imm, slot 2, batch
            for i, val in ((3, 1), (12, 1), (15, 2), (7, 1), (11, 4)):
                v = list(w)
                v[i] = val
                words.append(v)
            v = list(w)
            v[0] |= 1 << 20                    # a step select on the unused slot 2
            words.append(v)
            v = list(w)
            v[0] = (v[0] & ~0xFF) | ELEMENTWISE_OPS["copy"]   # the same fields as copy
            words.append(v)
    loop = _legal_words(rng)[3]
    words.append([loop[0], loop[1], 0] + list(loop[3:]))          # zero loop count
    upd = _legal_words(rng)[4]
    for mode in (1, 7, 15, 16):                                   # reserved update modes
        words.append([upd[0] | mode << 8] + list(upd[1:]))
    words.append(list(upd[:2]) + [0] + list(upd[3:]))             # zero update count
    return words


def test_decoder_error_codes_match_golden():
    from ttrain.rtl.sequencer import CLASS_NAMES, InstructionDecoder
    rng = np.random.default_rng(11)
    cases = _decoder_cases(rng)
    want = [_golden_code(w) for w in cases]
    dut = InstructionDecoder()
    got = []
    cls = []

    async def tb(ctx):
        for w in cases:
            ctx.set(dut.word, sum(int(x) << (32 * i) for i, x in enumerate(w)))
            got.append(ctx.get(dut.error))
            cls.append(ctx.get(dut.cls))

    sim = Simulator(dut)
    sim.add_testbench(tb)
    sim.run()
    mism = [(i, hex(cases[i][0]), want[i], got[i]) for i in range(len(cases))
            if want[i] != got[i]]
    assert not mism, mism[:10]
    # the special ops are legal elementwise instructions (routed to the vector unit)
    ew_bit = 1 << CLASS_NAMES.index("elementwise")
    special = [i for i, w in enumerate(cases) if w[0] & 0xFF in SPECIAL_OPS.values()]
    assert sum(want[i] == 0 for i in special) >= len(SPECIAL_OPS)
    # every special opcode, log's 0x47 included, is accepted by the RTL decoder somewhere
    assert {cases[i][0] & 0xFF for i in special if got[i] == 0} == set(SPECIAL_OPS.values())
    assert 0x47 in SPECIAL_OPS.values()
    assert all(cls[i] == ew_bit for i in special if want[i] == 0)
    assert {want[i] for i in special} >= {0, 1, 7}
    # every error code the decoder can raise appears among the cases
    assert {0, 1, 2, 6, 7, 8, 9}.issubset(set(want)), sorted(set(want))


# ---- sequencer ----------------------------------------------------------------------------

class _SeqHarness(Elaboratable):
    """Sequencer + vector unit + update unit (a second VectorUnit) on four memories; the
    contraction engine is played by the testbench (golden ``contract`` on the memory words,
    after a delay), which only tests the sequencing, not the engine."""

    def __init__(self, sizes, imem_depth, overlap=True, max_split=None):
        from ttrain.rtl.sequencer import Sequencer
        self.seq = Sequencer(store_sizes=sizes, imem_depth=imem_depth, overlap=overlap,
                             max_split=max_split)
        ab = max(1, (max(sizes.values()) - 1).bit_length())
        self.vec = VectorUnit(addr_bits=ab)
        self.upd = VectorUnit(addr_bits=ab)
        self.mems = [memory.Memory(shape=32, depth=sizes[s], init=[]) for s in STORES]

    def elaborate(self, platform):
        m = Module()
        m.submodules.seq = seq = self.seq
        m.submodules.vec = vec = self.vec
        m.submodules.upd = upd = self.upd
        connect_units(m, seq, vec, upd)
        for u, unit in enumerate((vec, upd)):
            rdata = []
            for s, mem in enumerate(self.mems):
                if u == 0:
                    m.submodules[f"mem{s}"] = mem
                rp = mem.read_port(transparent_for=())
                wp = mem.write_port()
                m.d.comb += [rp.en.eq(unit.rd_en & (unit.rd_store == s)),
                             rp.addr.eq(unit.rd_addr),
                             wp.en.eq(unit.wr_en & (unit.wr_store == s)),
                             wp.addr.eq(unit.wr_addr), wp.data.eq(unit.wr_data)]
                rdata.append(rp.data)
            last = Signal(2, name=f"last{u}")
            with m.If(unit.rd_en):
                m.d.sync += last.eq(unit.rd_store)
            m.d.comb += unit.rd_data.eq(Mux(last[1], Mux(last[0], rdata[3], rdata[2]),
                                            Mux(last[0], rdata[1], rdata[0])))
        return m


def run_sequencer(programs, image, *, engine_delay=20, overlap=True, imem_depth=None,
                  max_split=None):
    """Load and run each ``(words)`` of ``programs`` in turn on one harness; return a list of
    ``(image, error_code, error_pc, executed, cycles, busy_engine, busy_vector, busy_update,
    max_concurrent)``. An entry ``(words, load, length)`` writes only the word addresses
    ``load`` (``()``: none, a rerun of what the memory holds) and runs ``length``
    instructions (``None``: all of ``words``)."""
    from ttrain.golden.contract import contract, view_addresses
    sizes = {s: len(image[s]) for s in STORES}
    programs = [p if isinstance(p, tuple) else (p, None, None) for p in programs]
    depth = imem_depth or max(len(p[0]) // 16 for p in programs) + 1
    h = _SeqHarness(sizes, depth, overlap, max_split)
    seq = h.seq
    results = []
    concurrent = [0]

    async def engine(ctx):
        ctx.set(seq.eng.ready, 1)
        while True:
            _, _, valid, p = await ctx.tick().sample(seq.eng.valid, seq.eng.payload)
            if not valid:
                continue
            desc = descriptor_of(p)
            ctx.set(seq.eng.ready, 0)
            out = contract(desc, read_image(ctx, h.mems, sizes))
            for _ in range(engine_delay):
                await ctx.tick()
                if ctx.get(h.vec.busy) or ctx.get(h.upd.busy):
                    concurrent[0] += 1
            mem = h.mems[STORES.index(desc.c.store)]
            for a in np.unique(view_addresses(desc.c, desc.batch, desc.m, desc.n)):
                ctx.set(mem.data[int(a)], int(out[desc.c.store][a]))   # C's words only
            ctx.set(seq.eng_done, 1)
            await ctx.tick()
            ctx.set(seq.eng_done, 0)
            ctx.set(seq.eng.ready, 1)

    async def host(ctx):
        for s, mem in enumerate(h.mems):
            for a, wd in enumerate(image[STORES[s]]):
                ctx.set(mem.data[a], int(wd))
        for words, load, length in programs:
            await load_and_run(ctx, seq, words, on_start=lambda: concurrent.__setitem__(0, 0),
                               load=load, length=length)
            results.append((read_image(ctx, h.mems, sizes), ctx.get(seq.error_code),
                            ctx.get(seq.error_pc),
                            ctx.get(seq.executed), ctx.get(seq.cycles),
                            ctx.get(seq.busy_engine), ctx.get(seq.busy_vector),
                            ctx.get(seq.busy_update), concurrent[0]))

    sim = Simulator(h)
    sim.add_clock(1e-8)
    sim.add_testbench(engine, background=True)
    sim.add_testbench(host)
    sim.run()
    return results


def _tt_layer(seed=21, batch=3, spec_index=1, **kw):
    from ttrain.golden.compiler import compile_tt_linear
    from ttrain.golden.config import TTSpec
    from ttrain.golden.tt import init_tt_cores
    spec = [TTSpec((4,), (3,), (1, 2, 1)), TTSpec((2, 3), (3, 2), (1, 2, 3, 2, 1))][spec_index]
    rng = np.random.default_rng(seed)
    cores = init_tt_cores(spec, rng, 0.7)
    bias = (0.1 * rng.standard_normal(spec.n_out)).astype(np.float32)
    x = rng.standard_normal((batch, spec.n_in)).astype(np.float32)
    t = rng.standard_normal((batch, spec.n_out)).astype(np.float32)
    cl = compile_tt_linear(spec, batch, lr=0.05, **kw)
    return cl, cl.initial_image(cores + [bias], x, t)


@pytest.mark.parametrize("sample_loop", [False, True])
def test_sequencer_tt_layer_steps_bit_exact(sample_loop):
    cl, img = _tt_layer(sample_loop=sample_loop)
    words = cl.program.words()
    steps = 3
    res = run_sequencer([words] * steps, img)
    cur = img
    for step, (got, code, pc, executed, cycles, be, bv, bu, _) in enumerate(res):
        want, stats = run(cl.program, cur)
        assert stats.ok and code == 0, (step, code, pc)
        for s in STORES:
            bad = np.nonzero(got[s] != want[s])[0]
            assert bad.size == 0, (step, s, bad[:8])
        assert executed == stats.instructions
        assert 0 < be < cycles and 0 < bv < cycles and 0 < bu < cycles
        assert not np.array_equal(want["param"], cur["param"])   # the step trained
        cur = want


def test_sequencer_overlaps_independent_units():
    """A contraction and an independent elementwise op run concurrently; a dependent one
    waits (RAW), and the result is still bit-exact."""
    from ttrain.golden.contract import Descriptor
    from ttrain.golden.isa import Barrier, Contract, encode_program
    rng = np.random.default_rng(3)
    image = _random_image(rng)
    for s in STORES:
        image[s] = rng.standard_normal(SIZE).astype(np.float32).view(np.uint32)
    mm = Contract(Descriptor(2, 2, 3, View("act", 0, 3, 1), View("act", 8, 2, 1),
                             View("scratch", 0, 2, 1)))
    indep = Elementwise("add", 2, 4, View("grad", 0, 4, 1), View("param", 0, 4, 1),
                        View("param", 16, 4, 1))
    dep = Elementwise("scale", 2, 2, View("grad", 20, 2, 1), View("scratch", 0, 2, 1),
                      imm=f32_bits(3.0))
    prog_overlap = encode_program([mm, indep, End()])
    prog_dep = encode_program([mm, dep, Barrier(), End()])
    for prog, expect_overlap in ((prog_overlap, True), (prog_dep, False)):
        (got, code, _, _, cycles, *_rest, conc), = run_sequencer([prog], image)
        want, st = run(prog, image)
        assert code == 0 and st.ok
        for s in STORES:
            np.testing.assert_array_equal(got[s], want[s])
        assert (conc > 0) == expect_overlap, conc
    # with overlap disabled the independent pair runs one after the other
    (*_, conc), = run_sequencer([prog_overlap], image, overlap=False)
    assert conc == 0


def _bad_programs(cl):
    """(name, words) of malformed or out-of-range variants of a compiled program."""
    from ttrain.golden.isa import Loop, EndLoop, encode, encode_program
    words = list(cl.program.words())
    n = len(words) // 16
    out = []
    v = list(words)
    v[16 * 2] = (v[16 * 2] & ~0xFF) | 0x5A                    # illegal opcode at pc 2
    out.append(("opcode", v))
    v = list(words)
    v[16 * 1] |= 1 << 30                                      # reserved bit
    out.append(("field", v))
    v = list(words)
    v[16 * (n - 2) + 1] = (v[16 * (n - 2) + 1] & ~0xFF) | 9  # store id 9
    out.append(("store", v))
    v = list(words)                                           # base past the store
    pcs = [i for i in range(n) if (v[16 * i] & 0xFF) in (0x08, 0x10, 0x30)]
    v[16 * pcs[-1] + 4] = 0x7FFFFFF0
    out.append(("range", v))
    out.append(("no_end", words[:-16]))
    ins = cl.program.instructions
    out.append(("loop", encode_program([Loop(2)] + list(ins[:-1]) + [End()])))
    out.append(("endloop", encode_program(list(ins[:3]) + [EndLoop()] + list(ins[3:]))))
    out.append(("zero_loop", encode_program(list(ins[:-1]) + [End()])[:16 * (n - 1)]
                + [0x03] + [0] * 15 + [0x04] + [0] * 15 + encode(End())))
    return out


def test_sequencer_errors_change_nothing_and_next_program_runs():
    cl, img = _tt_layer(spec_index=0, batch=2)
    good = cl.program.words()
    bad = _bad_programs(cl)
    progs = []
    for _, words in bad:
        progs += [words, good]
    res = run_sequencer(progs, img)
    cur = img
    for i, (name, words) in enumerate(bad):
        want, st = run(words, cur)
        got, code, pc, *_ = res[2 * i]
        assert st.error != 0, name
        assert (code, pc) == (st.error, st.error_pc), (name, code, pc, st.error, st.error_pc)
        for s in STORES:
            np.testing.assert_array_equal(got[s], cur[s])      # nothing written
        want, st = run(good, cur)
        got, code, *_ = res[2 * i + 1]
        assert code == 0 and st.ok
        for s in STORES:
            np.testing.assert_array_equal(got[s], want[s])
        cur = want


def test_verified_program_reruns_from_the_execute_pass_until_the_memory_changes():
    """A program run clean once starts its next run (same length, nothing written) at the
    execute pass: same words as the golden's, fewer cycles. A run with another length, or
    after one instruction word is rewritten, is checked again: the truncated program reports
    ERR_NO_END and the patched one its range error, with nothing written."""
    cl, img = _tt_layer(spec_index=0, batch=2)
    good = np.asarray(cl.program.words(), dtype=np.uint32)
    n = len(good) // 16
    name, bad = next((nm, np.asarray(w, dtype=np.uint32)) for nm, w in _bad_programs(cl)
                     if nm == "range")
    diff = tuple(int(a) for a in np.nonzero(bad != good)[0])
    assert diff                                              # a patch of a few words
    res = run_sequencer([good, (good, (), None), (good, (), None), (good, (), n - 1),
                         (bad, diff, None), (good, diff, None), (good, (), None)], img)
    cur, cycles = img, []
    for i, want_words in enumerate([good, good, good, None, bad, good, good]):
        got, code, pc, executed, cyc, *_ = res[i]
        words = want_words if want_words is not None else good[:16 * (n - 1)]
        want, st = run(words, cur)
        assert code == st.error and (code == 0 or pc == st.error_pc), (i, code, pc, st)
        for s in STORES:
            np.testing.assert_array_equal(got[s], want[s], err_msg=f"run {i} {s}")
        assert executed == st.instructions
        cur, cycles = want, cycles + [cyc]
    assert res[3][1] != 0 and res[4][1] != 0, name             # both checked again
    # the static pass takes at least 3 cycles and the check pass 2 per instruction
    assert cycles[1] == cycles[2] <= cycles[0] - 5 * n
    assert cycles[5] == cycles[0] and cycles[6] == cycles[1]   # patched back: checked once


@pytest.mark.parametrize("bad", [True, False], ids=["index-error", "clean"])
def test_sequencer_gather_runs_beside_an_earlier_contract_and_stops_at_its_error(bad):
    """A gather issues while an earlier, independent CONTRACT is still on the engine (its unit
    idle, no conflict), and nothing after it issues until it is done. With a bad index the run
    stops at the gather's pc once the CONTRACT has finished: its words written, the fill after
    the gather not run, as golden."""
    from ttrain.golden.isa import encode_program
    rng = np.random.default_rng(5)
    image = _random_image(rng)
    con = Contract(Descriptor(2, 3, 4, View("param", 20, 4, 1), View("grad", 30, 3, 1),
                              View("scratch", 20, 3, 1)))
    g = Gather("gather", 3, 2, 4, View("act", 0, 2, 1), View("grad", 0, 2, 1),
               View("scratch", 10, 1, 0))
    image["scratch"][10:13] = [1, 4 if bad else 3, 0]        # 4 is outside the 4-row table
    after = Elementwise("fill", 1, 4, View("param", 50, 4, 1), imm=f32_bits(5.0))
    prog = encode_program([con, g, after, End()])
    (got, code, pc, executed, _, _, busy_vec, _, concurrent), = run_sequencer(
        [prog], image, engine_delay=300)
    want, st = run(prog, image)
    if bad:
        assert (code, pc, executed) == (ERR_INDEX, 1, st.instructions) == (st.error,
                                                                           st.error_pc, 1)
    else:
        assert (code, executed) == (0, st.instructions) and st.ok
    for s in STORES:
        np.testing.assert_array_equal(got[s], want[s])
    assert concurrent > 0 and busy_vec > 0      # the gather ran while the engine was busy


def test_decoder_without_special_unit_rejects_special_opcodes():
    from ttrain.rtl.sequencer import InstructionDecoder
    rng = np.random.default_rng(12)
    cases = _decoder_cases(rng)
    want = [_golden_code(w) for w in cases]
    special = [i for i, w in enumerate(cases) if w[0] & 0xFF in SPECIAL_OPS.values()]
    assert special
    dut = InstructionDecoder(special=False)
    got = []

    async def tb(ctx):
        for w in cases:
            ctx.set(dut.word, sum(int(x) << (32 * i) for i, x in enumerate(w)))
            got.append(ctx.get(dut.error))

    sim = Simulator(dut)
    sim.add_testbench(tb)
    sim.run()
    for i, w in enumerate(cases):
        reserved = (w[0] >> 22) or (w[1] >> 24)       # ERR_FIELD is checked before the opcode
        if i in special and not reserved:
            assert got[i] == ERR_OPCODE, (hex(w[0]), got[i])
        else:
            assert got[i] == want[i], (hex(w[0]), got[i], want[i])
    with pytest.raises(TypeError, match="special must be a bool"):
        InstructionDecoder(special=1)


def test_sequencer_carries_split_and_rejects_it_above_the_engine():
    """A CONTRACT's split reaches the engine's descriptor; one above the engine's lane groups
    is ERR_DIM in the check pass (nothing written), as golden ``run(max_split=...)``."""
    from ttrain.golden.isa import ERR_DIM, encode_program
    rng = np.random.default_rng(8)
    image = _random_image(rng)
    a, b = View("act", 0, 9, 1), View("param", 0, 3, 1)

    def prog(split):
        return encode_program([Contract(Descriptor(2, 3, 9, a, b, View("scratch", 0, 3, 1),
                                                   split=split)), End()])
    res = run_sequencer([prog(2), prog(4)], image, max_split=2)
    want, st = run(prog(2), image, max_split=2)
    got, code, *_ = res[0]
    assert code == 0 and st.ok
    for s in STORES:
        np.testing.assert_array_equal(got[s], want[s])
    # the engine got split 2: these words round differently in the sequential order
    assert not np.array_equal(want["scratch"], run(prog(1), image)[0]["scratch"])
    _, st4 = run(prog(4), want, max_split=2)
    got, code, pc, *_ = res[1]
    assert (code, pc) == (st4.error, st4.error_pc) == (ERR_DIM, 0)
    for s in STORES:
        np.testing.assert_array_equal(got[s], want[s])


def _check_pass_only(programs, sizes):
    """Run each flat program on a lone Sequencer whose units acknowledge every command at
    once (nothing is read or written); return ``[(error_code, error_pc, executed)]``."""
    from ttrain.rtl.sequencer import Sequencer
    seq = Sequencer(store_sizes=sizes, imem_depth=8)
    out = []

    async def units(ctx):
        ctx.set(seq.eng.ready, 1)
        ctx.set(seq.vec.ready, 1)
        ctx.set(seq.upd.ready, 1)
        while True:
            _, _, ev, vv, uv = await ctx.tick().sample(seq.eng.valid, seq.vec.valid,
                                                       seq.upd.valid)
            ctx.set(seq.eng_done, ev)
            ctx.set(seq.vec_done, vv)
            ctx.set(seq.upd_done, uv)

    async def host(ctx):
        for words in programs:
            await load_and_run(ctx, seq, words)
            out.append((ctx.get(seq.error_code), ctx.get(seq.error_pc), ctx.get(seq.executed)))

    sim = Simulator(seq)
    sim.add_clock(1e-8)
    sim.add_testbench(units, background=True)
    sim.add_testbench(host)
    sim.run()
    return out


def test_sequencer_range_check_saturates_like_the_golden():
    """The check pass computes last addresses in saturating 32-bit pieces (16x16 partial
    products, a flag for 2**32 and above) instead of 72 bits: at the edges of a 2**32-word
    store (loop offsets past 2**32, products of 2**32, the store's last word) it gives the
    golden's code and pc, and a legal program runs."""
    from ttrain.golden.isa import ERR_C_RANGE, ERR_FIELD, EndLoop, Loop, encode_program
    sizes = {"param": 1 << 32, "grad": SIZE, "act": SIZE, "scratch": SIZE}
    top = (1 << 32) - 1

    def fill(base, rows=1, cols=1, row=0, step=(0, 0, 0)):
        return Elementwise("fill", rows, cols, View("param", base, row, 1), imm=0, step=step)

    def table(rows, stride, base=0):  # gather 1 x 1 from a table of `rows` rows
        return Gather("gather", 1, 1, rows, View("grad", 0, 1, 1),
                      View("param", base, stride, 1), View("act", 0, 1, 0))

    # A loop-stepped base past 32 bits: the golden raises ERR_FIELD without a pc (the stepped
    # instruction cannot be built); the sequencer reports it as the range error of that slot
    # at the instruction's pc, as the 72-bit sequencer did. Asserted as it is; see
    # docs/sequencer.md.
    stepped_past_32_bits = encode_program(
        [Loop(3, (top, 0, 0)), fill(0, step=(1, 0, 0)), EndLoop(), End()])   # 2 * (2**32-1)
    assert check_program(stepped_past_32_bits, sizes)[:2] == (ERR_FIELD, None)
    assert _check_pass_only([stepped_past_32_bits], sizes) == [(ERR_C_RANGE, 1, 0)]
    cases = [
        [Loop(2, (top, 0, 0)), fill(0, step=(1, 0, 0)), EndLoop(), End()],   # last word: ok
        [fill(0, rows=2, row=top), End()],                   # 1 * (2**32-1): the last word
        [fill(1, rows=2, row=top), End()],                   # ... one past it
        [table(top, 1, base=1), End()],                      # (2**32-2) * 1: the last word
        [table(top, 1, base=2), End()],
        [table(0x10001, 0x10000), End()],                    # both halves high: 2**32
        [table(0x10000, 0xFFFF), End()],                     # 0xFFFF * 0xFFFF: in range
        [fill(0), table(0x10000, 0x10001), End()],           # 0xFFFF * 0x10001 = 2**32-1
        [fill(0), table(0x10001, 0x10001), End()],           # 0x10000 * 0x10001
    ]
    programs = [encode_program(c) for c in cases]
    got = _check_pass_only(programs, sizes)
    for i, (words, (code, pc, executed)) in enumerate(zip(programs, got)):
        want, want_pc, _ = check_program(words, sizes)
        assert code == want, (i, code, want)
        if want:
            assert pc == want_pc, (i, pc, want_pc)
            assert executed == 0, i
        else:
            assert executed > 0, i
    assert [g[0] for g in got].count(0) == 5 and len({g[0] for g in got}) > 1
