# amaranth: UnusedElaboratable=no
"""OmegaNetwork (``rtl/omega.py``) in the Amaranth simulator against golden's routing rule
(:func:`ttrain.golden.isa.omega_pass`).

Every cycle a new random set of messages enters (random sources, destinations with repeats,
random payloads); :attr:`latency` cycles later the forward network's outputs must be exactly
the messages golden delivers, each at its destination. The delivered messages then go back
through the inverse network (tag = source), entering where they arrived, and every one of them
must come out at its source. Also Lawrie's strided vectors in one pass, and the constructor's
checks.
"""

import numpy as np
import pytest
from amaranth.sim import Simulator

from ttrain.golden.isa import bank_of, omega_pass, omega_passes
from ttrain.rtl.omega import OmegaNetwork


def _run(dut, waves):
    """Drive one set of messages per cycle (``[(port, tag, data), ...]``); return, per set,
    the messages out ``latency`` cycles later as ``{port: (tag, data)}``."""
    out = []

    async def tb(ctx):
        for cycle in range(len(waves) + dut.latency):
            for x in range(dut.ports):
                ctx.set(dut.i[x].valid, 0)
            if cycle < len(waves):
                for port, tag, word in waves[cycle]:
                    ctx.set(dut.i[port].valid, 1)
                    ctx.set(dut.i[port].tag, tag)
                    ctx.set(dut.i[port].data, word)
            await ctx.delay(1e-9)
            if cycle >= dut.latency:
                out.append({x: (ctx.get(dut.o[x].tag), ctx.get(dut.o[x].data))
                            for x in range(dut.ports) if ctx.get(dut.o[x].valid)})
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    sim.run()
    return out


@pytest.mark.parametrize("ports, every", [(8, 1), (16, 2), (32, 3)])
def test_random_sets_follow_golden_and_come_back(ports, every):
    rng = np.random.default_rng(ports)
    width = 16
    waves, want = [], []
    for _ in range(40):
        k = int(rng.integers(0, ports + 1))
        src = rng.choice(ports, k, replace=False)
        if rng.random() < 0.5:                       # a strided vector from a random base
            dst = (int(rng.integers(0, ports)) + int(rng.integers(1, ports)) * src) % ports
        else:
            dst = rng.integers(0, ports, k)
        # the payload carries its source (low bits) for the way back, and random bits
        words = (rng.integers(0, 1 << (width - 5), k) << 5) | src
        waves.append([(int(s), int(d), int(w)) for s, d, w in zip(src, dst, words)])
        ok = omega_pass(src, dst, ports)
        want.append({int(d): (int(d), int(w)) for s, d, w, o in zip(src, dst, words, ok) if o})
    fwd = OmegaNetwork(ports, width, register_every=every)
    got = _run(fwd, waves)
    assert got == want
    # the way back: each delivered message enters the inverse network at the output it
    # reached, tagged with its source; all of them arrive, each at its source
    back_waves, back_want = [], []
    for wave, arrived in zip(waves, got):
        back_waves.append([(d, w & 31, w) for d, (_, w) in arrived.items()])
        back_want.append({w & 31: (w & 31, w) for d, (_, w) in arrived.items()})
    inv = OmegaNetwork(ports, width, inverse=True, register_every=every)
    assert _run(inv, back_waves) == back_want


def test_odd_strides_and_shifts_pass_whole():
    ports = 16
    lanes = np.arange(ports)
    waves = [[(int(s), int((base + stride * s) % ports), int(s)) for s in lanes]
             for stride in (1, 3, 5, 7, 9, 15) for base in (0, 5)]
    got = _run(OmegaNetwork(ports, 4), waves)
    assert all(len(g) == ports for g in got)
    assert all(omega_pass([s for s, _, _ in w], [d for _, d, _ in w], ports).all()
               for w in waves)


@pytest.mark.parametrize("kw, msg", [({"ports": 12, "width": 8}, "power of two"),
                                     ({"ports": 1, "width": 8}, "power of two"),
                                     ({"ports": 8, "width": 0}, "width"),
                                     ({"ports": 8, "width": 8, "register_every": 0},
                                      "register_every")])
def test_constructor_checks(kw, msg):
    with pytest.raises(ValueError, match=msg):
        OmegaNetwork(**kw)


# ---- OmegaReadPort: vector reads over the request network and its inverse ------------------

def _read_vectors(rng, lanes, addr_bits, count):
    """Random read requests: strided vectors from random bases (odd and even strides), random
    addresses with repeated banks, random masks, and an empty one."""
    out = []
    for v in range(count):
        kind = v % 4
        if kind == 0:
            addr = int(rng.integers(0, 1 << addr_bits)) + int(rng.integers(1, 40)) * \
                np.arange(lanes)
        elif kind == 1:
            addr = int(rng.integers(0, 1 << addr_bits)) + np.arange(lanes)
        else:
            addr = rng.integers(0, 1 << addr_bits, lanes)
        addr = np.asarray(addr) % (1 << addr_bits)
        mask = (rng.random(lanes) < (0.0 if v == 7 else 0.8)) if kind == 3 else \
            np.ones(lanes, dtype=bool)
        out.append((addr.astype(np.int64), mask))
    return out


def _run_read_port(dut, vectors, mem, *, grant_p=1.0, ready_p=1.0, seed=0, latency=1):
    """Offer ``vectors`` back to back from cycle 0; banks answer from ``mem`` (word address ->
    word), granting with probability ``grant_p``; the consumer is ready with probability
    ``ready_p``. Returns ``[(accepted, left, words), ...]``."""
    rng = np.random.default_rng(seed)
    L, NB = dut.lanes, dut.banks
    nb = NB.bit_length() - 1
    out, accepted = [], []

    async def tb(ctx):
        nxt, t = 0, 0
        answers = [{} for _ in range(latency)]
        while len(out) < len(vectors):
            assert t < 200 * len(vectors) + 100, "the read port hung"
            # the banks: the requests granted ``latency`` cycles ago answered, this cycle's
            # granted at random
            for b in range(NB):
                ctx.set(dut.rdata[b], answers[0].get(b, 0))
            answer, grant = {}, 0
            for b in range(NB):
                if ctx.get(dut.bank[b].valid) and rng.random() < grant_p:
                    grant |= 1 << b
                    row = ctx.get(dut.bank[b].row)
                    answer[b] = mem[(row << nb) | b]
            answers = answers[1:] + [answer]
            ctx.set(dut.grant, grant)
            if nxt < len(vectors):
                addr, mask = vectors[nxt]
                ctx.set(dut.i.valid, 1)
                for x in range(L):
                    ctx.set(dut.i.payload.addr[x], int(addr[x]))
                ctx.set(dut.i.payload.mask, int(sum(1 << x for x in range(L) if mask[x])))
            else:
                ctx.set(dut.i.valid, 0)
            ready = rng.random() < ready_p
            ctx.set(dut.o.ready, ready)
            if ctx.get(dut.i.valid) and ctx.get(dut.i.ready):
                accepted.append(t)
                nxt += 1
            if ctx.get(dut.o.valid) and ready:
                words = [ctx.get(dut.o.payload[x]) for x in range(L)]
                out.append((accepted[len(out)], t, words))
            await ctx.tick()
            t += 1

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    sim.run()
    return out


def _bank_addr(addr, banks, skew):
    """Word address -> the address the banks of ``mem`` are indexed by: ``row << n | bank``."""
    n = banks.bit_length() - 1
    return ((addr >> n) << n) | bank_of(addr, banks, skew)


def _passes(vectors, lanes, banks, skew):
    """Golden's omega_passes of each vector (networks of max(lanes, banks) ports)."""
    return [omega_passes(np.nonzero(m)[0], bank_of(a[m], banks, skew), max(lanes, banks))
            for a, m, *_ in vectors]


@pytest.mark.parametrize("lanes, banks, skew, every, latency, tickets", [
    (8, 8, False, 2, 1, None), (16, 16, "xor", 2, 1, None), (32, 32, "xor", 3, 1, None),
    (8, 16, True, 2, 2, None), (16, 4, "xor", 2, 3, None), (8, 8, True, 2, 1, 3)])
def test_read_port_cycle_exact_with_every_bank_granted(lanes, banks, skew, every, latency,
                                                      tickets):
    """With every bank granted and the consumer always ready, every vector is accepted and
    leaves in exactly the cycles golden's schedule gives for its omega_passes, with the words
    at its addresses (masked lanes 0); also with fewer or more lanes than banks, banks
    answering 2 or 3 cycles after the grant, and fewer tickets than slots (3 of 5: accepts
    wait for the oldest vectors to leave)."""
    from ttrain.golden.isa import omega_read_schedule
    from ttrain.rtl.omega import OmegaReadPort
    rng = np.random.default_rng(lanes + 7)
    abits = 12
    dut = OmegaReadPort(lanes, abits, banks=banks, skew=skew, register_every=every,
                        latency=latency, tickets=tickets)
    vectors = _read_vectors(rng, lanes, abits, 24)
    words = rng.integers(0, 1 << 32, 1 << abits, dtype=np.uint64)
    mem = {int(_bank_addr(a, banks, skew)): int(words[a]) for a in range(1 << abits)}
    got = _run_read_port(dut, vectors, mem, latency=latency)
    passes = _passes(vectors, lanes, banks, skew)
    assert max(passes) > 1 and min(passes) == 0       # the set exercises retries and no-ops
    want = omega_read_schedule(passes, dut.round_trip, tickets=tickets)
    assert [(a, t) for a, t, _ in got] == want
    for (addr, mask), (_, _, w) in zip(vectors, got):
        assert w == [int(words[a]) if k else 0 for a, k in zip(addr, mask)]


@pytest.mark.parametrize("lanes, skew", [(8, "xor"), (16, False)])
def test_read_port_retries_what_the_banks_refuse(lanes, skew):
    """Banks refusing a third of the requests (other clients holding them) and a consumer
    ready half the time: every lane is sent again until its word comes home; all vectors
    leave in order with the right words, and no slower than with every bank granted."""
    from ttrain.golden.isa import omega_read_schedule
    from ttrain.rtl.omega import OmegaReadPort
    rng = np.random.default_rng(lanes + 11)
    abits = 10
    dut = OmegaReadPort(lanes, abits, skew=skew)
    vectors = _read_vectors(rng, lanes, abits, 20)
    words = rng.integers(0, 1 << 32, 1 << abits, dtype=np.uint64)
    mem = {int(_bank_addr(a, lanes, skew)): int(words[a]) for a in range(1 << abits)}
    got = _run_read_port(dut, vectors, mem, grant_p=0.67, ready_p=0.5, seed=lanes)
    for (addr, mask), (_, _, w) in zip(vectors, got):
        assert w == [int(words[a]) if k else 0 for a, k in zip(addr, mask)]
    passes = _passes(vectors, lanes, lanes, skew)
    assert got[-1][1] > omega_read_schedule(passes, dut.round_trip)[-1][1]


@pytest.mark.parametrize("kw, msg", [({"lanes": 12, "addr_bits": 8}, "power of two"),
                                     ({"lanes": 8, "addr_bits": 3}, "addr_bits"),
                                     ({"lanes": 8, "addr_bits": 8, "banks": 6}, "banks"),
                                     ({"lanes": 8, "addr_bits": 8, "skew": "add"}, "skew"),
                                     ({"lanes": 8, "addr_bits": 8, "latency": 0}, "latency"),
                                     ({"lanes": 8, "addr_bits": 8, "tickets": 0}, "tickets"),
                                     ({"lanes": 8, "addr_bits": 8, "tag_bits": -1},
                                      "tag_bits")])
def test_read_port_constructor_checks(kw, msg):
    from ttrain.rtl.omega import OmegaReadPort
    with pytest.raises(ValueError, match=msg):
        OmegaReadPort(**kw)


def _run_write_port(dut, vectors, mem, *, grant_p=1.0, ready_p=1.0, seed=0):
    """Offer write ``vectors`` (addr, mask, words) back to back; banks write into ``mem``
    (bank address -> word) when they grant (probability ``grant_p``). Returns ``[(accepted,
    acknowledged), ...]``."""
    rng = np.random.default_rng(seed)
    L, NB = dut.lanes, dut.banks
    nb = NB.bit_length() - 1
    out, accepted = [], []

    async def tb(ctx):
        nxt, t = 0, 0
        while len(out) < len(vectors):
            assert t < 200 * len(vectors) + 100, "the write port hung"
            grant = 0
            for b in range(NB):
                if ctx.get(dut.bank[b].valid) and rng.random() < grant_p:
                    grant |= 1 << b
                    mem[(ctx.get(dut.bank[b].row) << nb) | b] = ctx.get(dut.bank[b].data)
            ctx.set(dut.grant, grant)
            if nxt < len(vectors):
                addr, mask, words = vectors[nxt]
                ctx.set(dut.i.valid, 1)
                for x in range(L):
                    ctx.set(dut.i.payload.addr[x], int(addr[x]))
                    ctx.set(dut.i.payload.data[x], int(words[x]))
                ctx.set(dut.i.payload.mask, int(sum(1 << x for x in range(L) if mask[x])))
            else:
                ctx.set(dut.i.valid, 0)
            ready = rng.random() < ready_p
            ctx.set(dut.o.ready, ready)
            if ctx.get(dut.i.valid) and ctx.get(dut.i.ready):
                accepted.append(t)
                nxt += 1
            if ctx.get(dut.o.valid) and ready:
                out.append((accepted[len(out)], t))
            await ctx.tick()
            t += 1

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    sim.run()
    return out


@pytest.mark.parametrize("lanes, banks, skew, grant_p, ready_p", [(8, 8, False, 1.0, 1.0),
                                                                  (16, 16, "xor", 1.0, 1.0),
                                                                  (16, 16, False, 0.6, 0.5),
                                                                  (16, 8, True, 1.0, 1.0)])
def test_write_port_writes_every_word_once(lanes, banks, skew, grant_p, ready_p):
    """Write vectors (each word of the store written by one lane of one vector: strided runs
    and random scatters, random masks) land word for word; with every bank granted, each is
    acknowledged in exactly the cycles of golden's schedule, else later (lanes refused are
    sent again)."""
    from ttrain.golden.isa import omega_read_schedule
    from ttrain.rtl.omega import OmegaWritePort
    rng = np.random.default_rng(lanes + 23)
    abits = 10
    dut = OmegaWritePort(lanes, abits, banks=banks, skew=skew)
    # the store's words, in vectors: strided runs (stride 1, 3, 8) then a random scatter
    order = np.concatenate([np.arange(0, 256), np.arange(256, 256 + 3 * 128).reshape(-1, 3).T
                            .ravel(), np.arange(640, 768).reshape(-1, 8).T.ravel(),
                            rng.permutation(np.arange(768, 1024))])
    vectors = []
    for v, chunk in enumerate(order.reshape(-1, lanes)):
        mask = np.ones(lanes, dtype=bool) if v % 3 else rng.random(lanes) < 0.7
        vectors.append((chunk, mask, rng.integers(0, 1 << 32, lanes, dtype=np.uint64)))
    mem = {}
    got = _run_write_port(dut, vectors, mem, grant_p=grant_p, ready_p=ready_p, seed=lanes)
    want = {}
    for addr, mask, words in vectors:
        for a, k, w in zip(addr, mask, words):
            if k:
                want[int(_bank_addr(int(a), banks, skew))] = int(w)
    assert mem == want
    passes = _passes(vectors, lanes, banks, skew)
    sched = omega_read_schedule(passes, dut.round_trip)
    if grant_p == 1.0 and ready_p == 1.0:
        assert max(passes) > 1
        assert got == sched
    else:
        assert got[-1][1] > sched[-1][1]
