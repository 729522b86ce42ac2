# amaranth: UnusedElaboratable=no
"""FP32 units under the Amaranth simulator, bit for bit against the golden numerics.

The operand sets (:func:`~ttrain.testbench.bench_fp32.edge_case_pairs`, hand-made corner cases
per unit, and :func:`~ttrain.testbench.bench_fp32.random_pairs`, operands drawn from every
class), the golden bit patterns and :func:`make_unit` come from
:mod:`ttrain.testbench.bench_fp32`, shared with the Verilator tests
(``test_fp32_verilator.py``) and ``ttrain bench fp32``; they are re-exported here for the
tests that import them from this module.
"""

import numpy as np
import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from ttrain.rtl.fp32 import FP32Add, FP32Compare, FP32CompareResult, FP32Mul, leading_zeros
from ttrain.testbench.bench_fp32 import (ADD_TIES, MAX_NORMAL, MUL_TIES, UNITS,
                                         edge_case_pairs, golden_bits, make_unit,
                                         random_pairs)

# -- comparison with golden ----------------------------------------------------------------------


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


# -- Amaranth simulation -------------------------------------------------------------------------

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
