# amaranth: UnusedElaboratable=no
"""FP32 units under the Amaranth simulator, bit for bit against the golden numerics.

Also the home of the operand sets shared with the Verilator tests (``test_fp32_verilator.py``):
:func:`edge_case_pairs` (hand-made corner cases per unit) and :func:`random_pairs` (operands
drawn from every class: zeros, subnormals, normals, near-overflow, infinities, NaNs, and
near-cancellation pairs).
"""

import numpy as np
import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from ttrain.golden import numerics as gn
from ttrain.rtl.fp32 import (CANONICAL_NAN, FP32Add, FP32Compare, FP32CompareResult, FP32Mul,
                             leading_zeros)

UNITS = ("mul", "add", "compare")

# -- golden reference, as raw bit patterns ------------------------------------------------------


def golden_bits(unit, a_bits, b_bits):
    """Return the golden results of ``unit`` for operand bit patterns.

    Parameters
    ----------
    unit : {"mul", "add", "compare"}
    a_bits, b_bits : numpy.ndarray of uint32

    Returns
    -------
    dict of str to numpy.ndarray
        ``{"o": uint32}`` for mul/add; ``{"max", "min": uint32, "is_lt", "is_le", "is_eq":
        bool}`` for compare.
    """
    a = gn.bits_to_f32(np.asarray(a_bits, dtype=np.uint32))
    b = gn.bits_to_f32(np.asarray(b_bits, dtype=np.uint32))
    if unit == "mul":
        return {"o": gn.f32_to_bits(gn.fp32_mul(a, b))}
    if unit == "add":
        return {"o": gn.f32_to_bits(gn.fp32_add(a, b))}
    if unit == "compare":
        return {"max": gn.f32_to_bits(gn.fp32_max(a, b)),
                "min": gn.f32_to_bits(gn.fp32_min(a, b)),
                "is_lt": np.asarray(gn.fp32_lt(a, b), dtype=bool),
                "is_le": np.asarray(gn.fp32_le(a, b), dtype=bool),
                "is_eq": np.asarray(gn.fp32_eq(a, b), dtype=bool)}
    raise ValueError(f"unit must be one of {UNITS}, not {unit!r}")


def unpack_compare(words):
    """Split packed :data:`FP32CompareResult` words (Python ints) into field arrays."""
    words = [int(w) for w in words]
    return {"max": np.array([w & 0xFFFFFFFF for w in words], dtype=np.uint32),
            "min": np.array([(w >> 32) & 0xFFFFFFFF for w in words], dtype=np.uint32),
            "is_lt": np.array([(w >> 64) & 1 for w in words], dtype=bool),
            "is_le": np.array([(w >> 65) & 1 for w in words], dtype=bool),
            "is_eq": np.array([(w >> 66) & 1 for w in words], dtype=bool)}


def assert_bits_equal(unit, got, a_bits, b_bits):
    """Assert that ``got`` (dict like :func:`golden_bits`) equals golden, listing mismatches."""
    want = golden_bits(unit, a_bits, b_bits)
    for key, expected in want.items():
        bad = np.flatnonzero(got[key] != expected)
        if bad.size:
            rows = "\n".join(
                f"  a={int(a_bits[k]):08x} b={int(b_bits[k]):08x} "
                f"got={int(got[key][k]):08x} want={int(expected[k]):08x}" for k in bad[:10])
            raise AssertionError(
                f"{unit}.{key}: {bad.size} of {len(a_bits)} results differ from golden:\n{rows}")


# -- operand sets --------------------------------------------------------------------------------

def _f(x):
    return int(np.array(x, dtype=np.float32).view(np.uint32))


MAX_NORMAL = 0x7F7FFFFF
MIN_NORMAL = 0x00800000
MAX_SUBNORMAL = 0x007FFFFF
POS_INF, NEG_INF = 0x7F800000, 0xFF800000
NANS = (CANONICAL_NAN, 0xFFC00000, 0x7F800001, 0x7FBFFFFF, 0xFFFFFFFF, 0x7FC12345)
SIGN = 0x80000000

# Products that are exact ties (checked in test_edge_cases_are_what_they_claim): an odd
# significand times 1.5 is halfway between two floats; which neighbour is even alternates.
MUL_TIES = [(0x3F800001, _f(1.5)), (0x3F800003, _f(1.5)), (0x3F800005, _f(1.5)),
            (0x3F800007, _f(1.5)), (0xBF800001, _f(1.5)), (0x3F800003, _f(-1.5)),
            (0x00000003, _f(0.5)), (0x00000001, _f(0.5)), (0x00000005, _f(0.5)),
            (0x00000007, _f(0.5))]
# Sums that are exact ties: 1 + 2^-24 (round down to 1), (1 + 2^-23) + 2^-24 (round up).
ADD_TIES = [(_f(1.0), _f(2.0 ** -24)), (0x3F800001, _f(2.0 ** -24)),
            (_f(-1.0), _f(-(2.0 ** -24))), (0xBF800001, _f(-(2.0 ** -24))),
            (MAX_NORMAL, _f(2.0 ** 103)),            # tie at the top: rounds to even = inf
            (_f(3.0), _f(2.0 ** -23)), (_f(2.0 ** 24), _f(1.0)), (_f(2.0 ** 24 + 2), _f(1.0))]


def edge_case_pairs(unit):
    """Return hand-made corner-case operand pairs for ``unit`` as two uint32 arrays.

    Covers ties rounding both ways, subnormal inputs and outputs, rounding up into the smallest
    normal, overflow, infinities and NaNs, signed zeros and (near-)cancellation.
    """
    specials = [0, SIGN, _f(1.0), _f(-1.0), 1, SIGN | 1, MAX_SUBNORMAL, MIN_NORMAL, MAX_NORMAL,
                SIGN | MAX_NORMAL, POS_INF, NEG_INF, *NANS, _f(1.5), _f(-3.0), 0x00400000]
    pairs = [(x, y) for x in specials for y in specials]     # every class against every class
    pairs += MUL_TIES + ADD_TIES
    pairs += [
        # Subnormal results, with and without rounding.
        (_f(2.0 ** -70), _f(2.0 ** -70)), (0x1E3FFFFF, 0x1F3FFFFF), (0x20000001, 0x1E800003),
        (_f(2.0 ** -126), _f(0.5)), (_f(2.0 ** -126), _f(0.75)), (0x00000003, _f(0.25)),
        (0x00000001, _f(0.49)), (0x00000001, _f(0.5000001)), (0x00000001, _f(1.9999999)),
        (0x00123456, _f(3.14159)), (0x00654321, _f(-0.333)),
        # Round up into the smallest normal: largest subnormal times (1 + 2^-23).
        (MAX_SUBNORMAL, 0x3F800001), (0x3F7FFFFF, 0x00800001), (0x3F000000, 0x00FFFFFF),
        (0x00400000, 0x00400000), (MAX_SUBNORMAL, 1), (SIGN | MAX_SUBNORMAL, SIGN | 1),
        # Overflow and near-overflow.
        (MAX_NORMAL, _f(2.0)), (MAX_NORMAL, 0x3F800001), (MAX_NORMAL, MAX_NORMAL),
        (SIGN | MAX_NORMAL, SIGN | MAX_NORMAL), (_f(2.0 ** 64), _f(2.0 ** 64)),
        (_f(2.0 ** 63), _f(2.0 ** 64)), (MAX_NORMAL, _f(2.0 ** 102)),
        (MAX_NORMAL, 0x73000000), (0x5F800000, 0x5F7FFFFF),
        # Cancellation and near-cancellation.
        (_f(1.0), _f(-1.0)), (_f(-1.0), _f(1.0)), (0x3F800001, 0xBF800000),
        (0x3F800000, 0xBF7FFFFF), (0x00800000, 0x807FFFFF), (0x4B000001, 0xCB000000),
        (0x7F7FFFFF, 0xFF7FFFFE), (0x12345678, 0x92345678), (0x12345678, 0x92345679),
        (0x00000001, 0x80000001), (0x40000000, 0xBFFFFFFF),
        # Large exponent differences (everything becomes sticky).
        (_f(1.0), 1), (_f(1.0), SIGN | 1), (MAX_NORMAL, 1), (_f(2.0 ** 30), _f(-1.0)),
        (_f(1.0), _f(2.0 ** -25)), (_f(1.0), _f(-(2.0 ** -25))), (_f(1.0), _f(2.0 ** -24) | 1),
    ]
    both = pairs + [(y, x) for x, y in pairs]
    a = np.array([p[0] for p in both], dtype=np.uint32)
    b = np.array([p[1] for p in both], dtype=np.uint32)
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {UNITS}, not {unit!r}")
    return a, b


def random_pairs(count, seed):
    """Return ``count`` random operand pairs (two uint32 arrays) drawn from every class.

    Each operand is independently a zero, a subnormal, a normal of any exponent, a normal near
    1 (so products and sums land in common ranges), a near-overflow value, an infinity or a NaN
    (with random payload and sign). A quarter of the pairs are near-cancellation pairs: ``b`` is
    ``-a`` with a few low bits or the exponent's last bit perturbed. Another quarter have
    exponents whose sum is near the subnormal/overflow edges for products, and another quarter
    are tie-prone (``b`` has a short significand and an exponent a little or 23-26 below
    ``a``'s).
    """
    if not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be a positive integer, not {count!r}")
    rng = np.random.default_rng(seed)

    def operands(n):
        cls = rng.choice(7, size=n, p=[0.04, 0.12, 0.34, 0.3, 0.1, 0.04, 0.06])
        sign = rng.integers(0, 2, n, dtype=np.uint32) << 31
        frac = rng.integers(0, 1 << 23, n, dtype=np.uint32)
        exp = np.select(
            [cls == 0, cls == 1, cls == 2, cls == 3, cls == 4, cls == 5, cls == 6],
            [0, 0, rng.integers(1, 255, n), rng.integers(120, 135, n),
             rng.integers(250, 255, n), 255, 255]).astype(np.uint32)
        frac = np.where(cls == 0, 0, frac)
        frac = np.where(cls == 1, np.maximum(frac >> rng.integers(0, 23, n, dtype=np.uint32),
                                             1), frac)
        frac = np.where(cls == 5, 0, frac)
        frac = np.where(cls == 6, np.maximum(frac, 1), frac)
        return (sign | (exp << 23) | frac).astype(np.uint32)

    a = operands(count)
    b = operands(count)
    kind = rng.integers(0, 4, count)
    # Near-cancellation: b = -a perturbed in its low bits (or the exponent's last bit).
    delta = rng.integers(-4, 5, count).astype(np.int64)
    near = ((a.astype(np.int64) ^ SIGN) + delta) & 0xFFFFFFFF
    near = np.where(rng.random(count) < 0.2, near ^ (1 << 23), near)
    b = np.where(kind == 0, near.astype(np.uint32), b)
    # Product-range edges: biased exponents summing to about 127 - 24 .. 127 or 254 + 127.
    lo = rng.integers(1, 104, count)
    target = np.where(rng.random(count) < 0.5, rng.integers(80, 130, count),
                      rng.integers(375, 383, count))
    ea = np.clip(np.where(target > 300, rng.integers(130, 255, count), lo), 1, 254)
    eb = np.clip(target - ea, 0, 254)
    a_edge = (a & 0x807FFFFF) | (ea.astype(np.uint32) << 23)
    b_edge = (b & 0x807FFFFF) | (eb.astype(np.uint32) << 23)
    a = np.where(kind == 1, a_edge, a).astype(np.uint32)
    b = np.where(kind == 1, b_edge, b).astype(np.uint32)
    # Tie-prone: b has a short significand (1, 1.5, 1.25, 1.75, 1.125) and an exponent 0..26
    # below a's, so many products and sums land exactly halfway between two floats.
    a_exp = (a >> 23) & 0xFF
    b_frac = rng.choice(np.array([0, 1 << 22, 1 << 21, 3 << 21, 1 << 20], dtype=np.uint32),
                        count)
    b_exp = np.clip(a_exp.astype(np.int64) - rng.choice([0, 1, 2, 23, 24, 24, 24, 25, 26],
                                                        count), 1, 254).astype(np.uint32)
    b_tie = (b & SIGN) | (b_exp << 23) | b_frac
    b = np.where(kind == 2, b_tie, b).astype(np.uint32)
    return a, b


# -- Amaranth simulation -------------------------------------------------------------------------

def make_unit(unit, **kwargs):
    """Return a fresh component for ``unit``."""
    if unit == "mul":
        return FP32Mul(**kwargs)
    if unit == "add":
        return FP32Add(**kwargs)
    if unit == "compare":
        return FP32Compare(**kwargs)
    raise ValueError(f"unit must be one of {UNITS}, not {unit!r}")


def simulate(dut, a_bits, b_bits, gaps=False):
    """Stream operand pairs through ``dut`` in the Amaranth simulator; return raw outputs.

    One pair per cycle (or, with ``gaps``, idle cycles between some beats) and check on the
    way that every ``o`` beat arrives exactly :attr:`latency` cycles after its ``i`` beat.
    """
    n = len(a_bits)
    words = [(int(b) << 32) | int(a) for a, b in zip(a_bits, b_bits)]
    rng = np.random.default_rng(1)
    valid_in = [True] * n
    if gaps:
        valid_in = []
        for _ in range(n):
            while rng.random() < 0.3:
                valid_in.append(False)
            valid_in.append(True)
    results, in_cycles, out_cycles = [], [], []

    async def testbench(ctx):
        k = 0
        payload = dut.i.payload.as_value()
        for cycle in range(len(valid_in) + dut.latency + 2):
            beat = cycle < len(valid_in) and valid_in[cycle]
            ctx.set(dut.i.valid, beat)
            if beat:
                ctx.set(payload, words[k])
                in_cycles.append(cycle)
                k += 1
            else:
                ctx.set(payload, 0xDEADBEEF_0BADF00D)      # garbage must not leak out
            if ctx.get(dut.o.valid):
                results.append(ctx.get(dut.o.payload.as_value()
                                       if hasattr(dut.o.payload, "as_value")
                                       else dut.o.payload))
                out_cycles.append(cycle)
            await ctx.tick()

    # A wrapper with a clocked register gives combinational units a `sync` domain to tick.
    top = Module()
    top.submodules.dut = dut
    top.d.sync += Signal(name="tick").eq(1)
    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()
    assert len(results) == n, f"{n} operand beats in, {len(results)} result beats out"
    assert [o - i for i, o in zip(in_cycles, out_cycles)] == [dut.latency] * n
    return results


def run_unit(unit, a_bits, b_bits, *, gaps=False, **kwargs):
    """Simulate ``unit`` on the pairs and return outputs shaped like :func:`golden_bits`."""
    dut = make_unit(unit, **kwargs)
    words = simulate(dut, a_bits, b_bits, gaps=gaps)
    if unit == "compare":
        return unpack_compare(words)
    return {"o": np.array(words, dtype=np.uint32)}


# -- tests ---------------------------------------------------------------------------------------

def test_edge_cases_are_what_they_claim():
    # The tie lists must really be ties, rounding both ways, or the tests prove less than
    # they say. float64 holds every FP32 product and these sums exactly.
    def tie_directions(pairs, op):
        ups = downs = 0
        for x, y in pairs:
            fx = float(np.uint32(x).view(np.float32))
            fy = float(np.uint32(y).view(np.float32))
            exact = op(fx, fy)
            lo = np.float32(exact)
            if float(lo) > exact:
                lo = np.nextafter(lo, np.float32(-np.inf))
            hi = np.nextafter(lo, np.float32(np.inf))
            assert exact - float(lo) == float(hi) - exact, (hex(x), hex(y), "not a tie")
            rounded = float(np.float32(exact))
            ups += abs(rounded) > abs(exact)
            downs += abs(rounded) < abs(exact)
        return ups, downs

    ups, downs = tie_directions(MUL_TIES, lambda x, y: x * y)
    assert ups >= 2 and downs >= 2
    ups, downs = tie_directions([p for p in ADD_TIES if p[0] != MAX_NORMAL],
                                lambda x, y: x + y)
    assert ups >= 2 and downs >= 2


@pytest.mark.parametrize("unit", UNITS)
def test_edge_cases(unit):
    a, b = edge_case_pairs(unit)
    assert_bits_equal(unit, run_unit(unit, a, b), a, b)


@pytest.mark.parametrize("unit", UNITS)
def test_random_pairs(unit):
    a, b = random_pairs(3000, seed=UNITS.index(unit))
    assert_bits_equal(unit, run_unit(unit, a, b), a, b)


def test_compare_combinational_with_gaps():
    a, b = random_pairs(300, seed=7)
    assert_bits_equal("compare", run_unit("compare", a, b, latency=0, gaps=True), a, b)


@pytest.mark.parametrize("unit", ["mul", "add"])
def test_gaps_keep_beats_aligned(unit):
    a, b = random_pairs(200, seed=11)
    assert_bits_equal(unit, run_unit(unit, a, b, gaps=True), a, b)


def test_latency_and_ports():
    assert FP32Mul().latency == 6
    assert FP32Add().latency == 6
    assert FP32Compare().latency == 1
    assert FP32Compare(latency=0).latency == 0
    for dut in (FP32Mul(), FP32Add()):
        assert dut.i.payload.shape().size == 64 and len(dut.o.payload) == 32
    assert FP32Compare().o.payload.shape() == FP32CompareResult


@pytest.mark.parametrize("bad", [2, -1, True, "1", None])
def test_compare_rejects_bad_latency(bad):
    with pytest.raises(ValueError, match="latency must be 0 .* or 1"):
        FP32Compare(latency=bad)


@pytest.mark.parametrize("width", [1, 3, 8, 24, 28, 48])
def test_leading_zeros(width):
    value = Signal(width)
    count = Signal(8)
    m = Module()
    m.d.comb += count.eq(leading_zeros(value))
    rng = np.random.default_rng(width)
    samples = {0, 1, (1 << width) - 1} | {1 << k for k in range(width)}
    samples |= {int(x) >> int(s) for x, s in zip(rng.integers(0, 1 << min(width, 62), 40),
                                                 rng.integers(0, width, 40))}
    got = {}

    async def testbench(ctx):
        for x in sorted(samples):
            ctx.set(value, x)
            got[x] = ctx.get(count)

    sim = Simulator(m)
    sim.add_testbench(testbench)
    sim.run()
    for x, lz in got.items():
        if x:
            assert lz == width - x.bit_length(), (width, x)
        else:
            assert lz >= width


def test_leading_zeros_rejects_empty():
    from amaranth.hdl import Const
    with pytest.raises(ValueError, match="at least 1 bit"):
        leading_zeros(Const(0, 0))
