"""The vector units' integer ops (rtl/intops.py) against their golden semantics in the ISA table
(golden.isa.OPS: i2f, f2i, iadd, requant, ext8, ins8, ext16, ins16, fcmp, bitop) on edge cases and random words, Amaranth simulator."""

import numpy as np
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from ttrain.golden.isa import SPEC
from ttrain.rtl import intops


def _edge_words():
    f = np.float32
    floats = [0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 0.49999997, 0.50000006, 1.0, -1.0,
              2 ** 31, -2 ** 31, 2 ** 31 - 128, -2 ** 31 + 128, 2 ** 30 + 0.5, 3e-39, -3e-39,
              np.inf, -np.inf, 123456.75, -123456.5, 8388607.5, 16777215.0, 1e10, -1e10]
    words = [int(np.array(v, f).view(np.uint32)) for v in floats]
    words += [0x7FC00000, 0x7F800001, 0xFFC00000]                    # NaNs
    ints = [0, 1, -1, 2 ** 31 - 1, -2 ** 31, 2 ** 24 + 1, 2 ** 24 + 3, -(2 ** 24) - 1, 255,
            -255, 127, -128, 2 ** 25 + 2 ** 1]
    words += [v & 0xFFFFFFFF for v in ints]
    return words


def _run(op, a_words, b_words, imms, staged=False):
    """The op's outputs for each operand triple; ``staged``: built with pipeline registers
    (``intops.STAGES[op]`` of them, one triple per cycle) instead of combinational. The
    staged ops read their ``imm`` field (iadd's ``bits``, requant's bounds) at the last
    stage, where the vector unit holds it (the command): here it is delayed to match."""
    from amaranth.hdl import ClockDomain
    m = Module()
    a, b, imm = Signal(32), Signal(32), Signal(32)
    depth = intops.STAGES.get(op, 0) if staged else 0

    def stage(value, name):
        r = Signal(value.shape(), name=name)
        m.d.sync += r.eq(value)
        return r

    late = imm                       # imm as the op's last stage sees it
    for k in range(depth):
        late = stage(late, f"imm_d{k}")
    kw = {"stage": stage} if staged and depth else {}
    if op == "i2f":
        out = intops.i2f(m, a, **kw)
    elif op == "f2i":
        out = intops.f2i(m, a, imm[0], **kw)
    elif op == "iadd":
        out = intops.iadd(m, a, b, late, **kw)
    elif op == "ext8":
        out = intops.ext8(m, a, imm)
    elif op == "ins8":
        out = intops.ins8(m, a, b, imm)
    elif op == "ext16":
        out = intops.ext16(m, a, imm)
    elif op == "ins16":
        out = intops.ins16(m, a, b, imm)
    elif op == "fcmp":
        out = intops.fcmp(m, a, b, imm)
    elif op == "bitop":
        out = intops.bitop(m, a, b, imm)
    else:
        out = intops.requant(m, a, b, late, **kw)
    m.domains.sync = ClockDomain()
    got = []

    async def tb(ctx):
        n = len(a_words)
        for k in range(n + depth):
            if k < n:
                ctx.set(a, int(a_words[k]))
                ctx.set(b, int(b_words[k]))
                ctx.set(imm, int(imms[k]))
            if k >= depth:
                got.append(ctx.get(out))
            if depth:
                await ctx.tick()

    sim = Simulator(m)
    if depth:
        sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return np.array(got, dtype=np.uint32)


def _golden(op, a, b, imm):
    sem = SPEC[op].semantics
    return np.array([int(sem(np.array([x], np.uint32), np.array([y], np.uint32), int(z))[0])
                     for x, y, z in zip(a, b, imm)], dtype=np.uint32)


def _check(op, a, b, imm):
    want = _golden(op, a, b, imm)
    for staged in (False, True) if op in intops.STAGES else (False,):
        got = _run(op, a, b, imm, staged=staged)
        bad = np.nonzero(got != want)[0]
        assert bad.size == 0, [(staged, hex(a[i]), hex(b[i]), hex(imm[i]), hex(got[i]),
                                hex(want[i])) for i in bad[:5]]


def test_i2f_and_f2i_match_golden_on_edges_and_random_words():
    rng = np.random.default_rng(5)
    words = np.array(_edge_words() + list(rng.integers(0, 1 << 32, 1500, dtype=np.uint64)) +
                     list(np.float32(rng.normal(0, 1e4, 500)).view(np.uint32)),
                     dtype=np.uint64)
    zeros = np.zeros_like(words)
    _check("i2f", words, zeros, zeros)
    _check("f2i", words, zeros, zeros)
    _check("f2i", words, zeros, np.ones_like(words))


def test_iadd_saturates_to_every_width():
    rng = np.random.default_rng(6)
    n = 1500
    vals = np.concatenate([rng.integers(-300, 300, n // 2), rng.integers(-2 ** 31, 2 ** 31,
                                                                          n - n // 2)])
    a = (vals & 0xFFFFFFFF).astype(np.uint64)
    b = (rng.permutation(vals) & 0xFFFFFFFF).astype(np.uint64)
    bits = rng.choice([1, 2, 8, 9, 16, 31, 32], n).astype(np.uint64)
    _check("iadd", a, b, bits)


def test_requant_rounds_half_up_shifts_and_clamps():
    rng = np.random.default_rng(7)
    n = 1500
    acc = rng.integers(-2 ** 31, 2 ** 31, n)
    acc[:50] = rng.integers(-4, 5, 50)                              # ties at small shifts
    m = rng.integers(0, 1 << 15, n)
    s = rng.integers(0, 64, n)
    s[:50] = 1
    lo = rng.integers(-300, 1, n)
    hi = rng.integers(-1, 300, n)
    hi[:20] = 32767
    lo[:20] = -32768
    b = (m | s << 15 | rng.integers(0, 1 << 11, n) << 21).astype(np.uint64)   # junk high bits
    imm = ((lo & 0xFFFF) | (hi & 0xFFFF) << 16).astype(np.uint64)
    _check("requant", (acc & 0xFFFFFFFF).astype(np.uint64), b, imm)


def test_packed_int8_extract_and_insert_every_byte():
    rng = np.random.default_rng(8)
    n = 1200
    a = rng.integers(0, 1 << 32, n, dtype=np.uint64)
    a[:8] = [0, 0xFFFFFFFF, 0x80808080, 0x7F7F7F7F, 0x01020304, 0xFF00FF00, 0x00FF00FF,
             0x7F80017F]
    b = rng.integers(0, 1 << 32, n, dtype=np.uint64)              # only the low byte counts
    b[:8] = [0x7F, 0x80, 0xFFFFFF80, 0x12345601, 0, 0xFF, 0x100, 0xFFFFFFFF]
    k = np.tile(np.arange(4, dtype=np.uint64), n // 4)
    _check("ext8", a, np.zeros_like(a), k)
    _check("ins8", a, b, k)
    # by hand: the signed bytes of one word, and a word rebuilt byte by byte
    w = np.array([0x80FF017F], np.uint32)
    assert [int(np.int32(SPEC["ext8"].semantics(w, w, i)[0])) for i in range(4)] == \
        [127, 1, -1, -128]
    out = np.zeros(1, np.uint32)
    for i, v in enumerate((-2, 3, -128, 127)):
        out = SPEC["ins8"].semantics(out, np.array([v & 0xFFFFFFFF], np.uint32), i)
    assert int(out[0]) == 0x7F8003FE


def test_packed_16_bit_extract_and_insert_every_half():
    """ext16 / ins16 (low-rank training's bases two to a word) against golden on edge and
    random words, and a word rebuilt half by half by hand."""
    rng = np.random.default_rng(16)
    n = 800
    a = rng.integers(0, 1 << 32, n, dtype=np.uint64)
    a[:6] = [0, 0xFFFFFFFF, 0x80008000, 0x7FFF7FFF, 0x80017FFF, 0x0001FFFF]
    b = rng.integers(0, 1 << 32, n, dtype=np.uint64)              # only the low half counts
    b[:6] = [0x7FFF, 0x8000, 0xFFFF8000, 0x12340001, 0xFFFFFFFF, 0x10000]
    k = np.tile(np.arange(2, dtype=np.uint64), n // 2)
    _check("ext16", a, np.zeros_like(a), k)
    _check("ins16", a, b, k)
    w = np.array([0x8000FFFF], np.uint32)
    assert [int(np.int32(SPEC["ext16"].semantics(w, w, i)[0])) for i in range(2)] == \
        [-1, -32768]
    out = np.zeros(1, np.uint32)
    for i, v in enumerate((-32767, 32767)):
        out = SPEC["ins16"].semantics(out, np.array([v & 0xFFFFFFFF], np.uint32), i)
    assert int(out[0]) == 0x7FFF8001


def test_compare_masks_on_every_pair_of_edge_values():
    """fcmp lt/le/eq on every ordered pair of edge words (NaNs, signed zeros, infinities,
    subnormals, integers read as floats), and the three predicates by hand."""
    w = np.array(_edge_words(), dtype=np.uint64)
    a, b = np.repeat(w, len(w)), np.tile(w, len(w))
    for pred in range(3):
        _check("fcmp", a, b, np.full(len(a), pred, np.uint64))
    f = np.float32
    x = np.array([1, -0.0, np.nan, 2, -3], f).view(np.uint32)
    y = np.array([2, 0.0, 1, 2, -4], f).view(np.uint32)
    ones = 0xFFFFFFFF
    assert SPEC["fcmp"].semantics(x, y, 0).tolist() == [ones, 0, 0, 0, 0]
    assert SPEC["fcmp"].semantics(x, y, 1).tolist() == [ones, ones, 0, ones, 0]
    assert SPEC["fcmp"].semantics(x, y, 2).tolist() == [0, ones, 0, ones, 0]


def test_bit_operations_and_the_select_they_build():
    rng = np.random.default_rng(9)
    n = 800
    a = rng.integers(0, 1 << 32, n, dtype=np.uint64)
    b = rng.integers(0, 1 << 32, n, dtype=np.uint64)
    b[:4] = [0, 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000]
    _check("bitop", a, b, np.tile(np.arange(4, dtype=np.uint64), n // 4))
    # select(m, x, y) = (x & m) | (y & ~m), and |x| = x & 0x7FFFFFFF, by hand
    op = SPEC["bitop"].semantics
    m = np.array([0xFFFFFFFF, 0], np.uint32)
    x = np.array([0x3F800000, 0x40000000], np.uint32)
    y = np.array([0xBF800000, 0xC0000000], np.uint32)
    assert op(op(x, m, 0), op(y, m, 1), 2).tolist() == [0x3F800000, 0xC0000000]
    assert op(y, np.uint32(0x7FFFFFFF), 0).tolist() == [0x3F800000, 0x40000000]
