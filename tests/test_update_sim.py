# amaranth: UnusedElaboratable=no
"""SGD update pipeline and region sweeper: golden self-tests and Amaranth-simulator tests.

Also the home of the operand sets shared with ``test_update_verilator.py``:
:func:`update_operands` (edge cases, then random pairs from every FP32 class, with a learning
rate per pair drawn from edge values and realistic rates).
"""

import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.lib import memory, wiring
from amaranth.sim import Simulator

from test_fp32_sim import random_pairs
from ttrain.golden import numerics as gn
from ttrain.golden.update import sgd_update, sgd_update_bits, sweep_region
from ttrain.rtl.update import RegionSweeper, UpdatePipeline


def _b(x):
    return int(np.array(x, dtype=np.float32).view(np.uint32))


NAN, QNAN_NEG, SNAN = 0x7FC00000, 0xFFC00001, 0x7F800001
INF, NINF = 0x7F800000, 0xFF800000
PZERO, NZERO = 0x00000000, 0x80000000
SUB_MIN, SUB_MAX, NORM_MIN = 0x00000001, 0x007FFFFF, 0x00800000
MAX_F = 0x7F7FFFFF
EDGE_WORDS = [PZERO, NZERO, SUB_MIN, SUB_MAX | 0x80000000, SUB_MAX, NORM_MIN, NORM_MIN | 1 << 31,
              MAX_F, MAX_F | 1 << 31, INF, NINF, NAN, QNAN_NEG, SNAN, _b(1.0), _b(-1.0),
              _b(1e-3), _b(-3.5e4), _b(2.0 ** -126 * 1.5), _b(2.0 ** 127)]
EDGE_LRS = [PZERO, NZERO, _b(1e-3), _b(0.1), _b(1.0), _b(-0.5), SUB_MIN, NORM_MIN, MAX_F, INF,
            NAN]


def update_operands(count, seed, *, edges=True):
    """Return ``(theta, grad, lr)`` uint32 arrays of ``count`` update triples.

    With ``edges`` the first triples are every pair of :data:`EDGE_WORDS` under a few
    :data:`EDGE_LRS` (including ``lr = ±0``); the rest are :func:`test_fp32_sim.random_pairs`
    operands (zeros, subnormals, normals, near-cancellation and tie-prone pairs, infinities,
    NaNs) with a learning rate drawn from :data:`EDGE_LRS` (1 in 8) or a random normal in
    ``[2**-20, 2)`` (mostly positive, 1 in 16 negative).
    """
    rng = np.random.default_rng(seed)
    parts = []
    if edges:
        t, g = np.meshgrid(np.array(EDGE_WORDS, np.uint32), np.array(EDGE_WORDS, np.uint32))
        t, g = t.ravel(), g.ravel()
        lrs = np.array(EDGE_LRS, np.uint32)
        for k, lr in enumerate(lrs):
            parts.append((t, g, np.full(t.shape, lr, np.uint32)) if k < 4 else
                         (t[k::7], g[k::7], np.full(t[k::7].shape, lr, np.uint32)))
    theta_r, grad_r = random_pairs(max(count, 1), seed)
    lr_r = (rng.integers(107, 128, count) << 23 | rng.integers(0, 1 << 23, count)).astype(
        np.uint32)
    lr_r |= (rng.random(count) < 1 / 16).astype(np.uint32) << 31
    pick = rng.random(count) < 1 / 8
    lr_r[pick] = rng.choice(np.array(EDGE_LRS, np.uint32), pick.sum())
    parts.append((theta_r[:count], grad_r[:count], lr_r))
    theta, grad, lr = (np.concatenate([p[i] for p in parts])[:count] for i in range(3))
    return theta.astype(np.uint32), grad.astype(np.uint32), lr.astype(np.uint32)


def assert_update_equal(got_theta, got_grad, theta, grad, lr):
    """Assert that results equal :func:`sgd_update_bits`, listing the first mismatches."""
    want_theta, want_grad = sgd_update_bits(theta, grad, lr)
    got_theta = np.asarray(got_theta, np.uint32)
    bad = np.flatnonzero((got_theta != want_theta) | (np.asarray(got_grad) != want_grad))
    if bad.size:
        rows = "\n".join(f"  theta={theta[k]:08x} grad={grad[k]:08x} lr={lr[k]:08x} "
                         f"got=({got_theta[k]:08x}, {int(got_grad[k]):08x}) "
                         f"want={want_theta[k]:08x}" for k in bad[:10])
        raise AssertionError(f"{bad.size} of {len(theta)} updates differ from golden:\n{rows}")


# -- golden ------------------------------------------------------------------------------------

def test_golden_equals_numpy_float32():
    theta, grad, lr = update_operands(20_000, seed=1)
    t, g, r = (x.view(np.float32) for x in (theta, grad, lr))
    with np.errstate(all="ignore"):
        ref = (t - r * g).view(np.uint32).copy()         # NumPy float32, no FMA
    ref[(ref & 0x7FFFFFFF) > 0x7F800000] = gn.CANONICAL_NAN
    new, cleared = sgd_update_bits(theta, grad, lr)
    np.testing.assert_array_equal(new, ref)
    np.testing.assert_array_equal(cleared, np.zeros_like(theta))
    # Values in, values out; bits in, bits out.
    np.testing.assert_array_equal(gn.f32_to_bits(sgd_update(t, g, r)), ref)
    np.testing.assert_array_equal(sgd_update(theta, grad, lr), ref)
    assert sgd_update(theta, grad, lr).dtype == np.uint32


def test_golden_hand_cases():
    # Worked by hand from IEEE-754 rules: lr = 0 keeps finite theta, except -0 - (-0) = +0.
    cases = [  # theta, grad, lr, expected
        (_b(1.5), _b(2.0), _b(0.25), _b(1.0)),
        (_b(1.5), _b(7.0), PZERO, _b(1.5)),
        (NZERO, _b(7.0), PZERO, NZERO),       # -0 - (+0) = -0
        (NZERO, _b(-7.0), PZERO, PZERO),      # -0 - (-0) = +0
        (_b(3.0), INF, PZERO, NAN),           # 0 * inf
        (INF, INF, _b(1.0), NAN),             # inf - inf
        (_b(1.0), SNAN, _b(1.0), NAN),        # NaN payloads become canonical
        (MAX_F, MAX_F | 1 << 31, _b(1.0), INF),   # overflow
        (SUB_MIN, SUB_MIN, _b(1.0), PZERO),   # x - x = +0
        # Below 1.0 the spacing is 2^-24: 1 - 2^-25 is a tie between 0x3F7FFFFF (odd) and
        # 1.0 (even); 1 - 3 * 2^-25 a tie between 0x3F7FFFFF and 0x3F7FFFFE (even).
        (_b(1.0), _b(1.0), _b(2.0 ** -25), _b(1.0)),
        (_b(1.0), _b(3.0), _b(2.0 ** -25), 0x3F7FFFFE),
        (_b(1.0), _b(1.0), _b(2.0 ** -24), 0x3F7FFFFF),   # exact
    ]
    theta, grad, lr, want = (np.array(c, np.uint32) for c in zip(*cases))
    np.testing.assert_array_equal(sgd_update_bits(theta, grad, lr)[0], want)


def test_golden_sweep_region():
    rng = np.random.default_rng(2)
    params = rng.integers(0, 2 ** 32, 40, dtype=np.uint32)
    grads = rng.integers(0, 2 ** 32, 33, dtype=np.uint32)
    new_p, new_g, err = sweep_region(params, grads, 5, 20, _b(0.5))
    assert not err
    inside = slice(5, 25)
    np.testing.assert_array_equal(new_p[inside], sgd_update(params[inside], grads[inside],
                                                            np.uint32(_b(0.5))))
    assert not new_g[inside].any()
    for new, old in ((new_p, params), (new_g, grads)):
        np.testing.assert_array_equal(np.delete(new, np.r_[inside]), np.delete(old, np.r_[inside]))
    # The region must fit the smaller store; then nothing changes.
    p2, g2, err = sweep_region(params, grads, 20, 14, _b(0.5))
    assert err
    np.testing.assert_array_equal(p2, params)
    np.testing.assert_array_equal(g2, grads)
    assert sweep_region(params, grads, 33, 0, 0)[2] is False
    with pytest.raises(ValueError, match="base must be a non-negative integer"):
        sweep_region(params, grads, -1, 2, 0)
    with pytest.raises(ValueError, match="one-dimensional"):
        sweep_region(params.reshape(4, 10), grads, 0, 1, 0)


def test_golden_rejects_inexact_values():
    with pytest.raises(ValueError, match="as_f32"):
        sgd_update(np.float64(0.1), 1.0, 1.0)


# -- pipeline under the Amaranth simulator ------------------------------------------------------

def run_pipeline(theta, grad, lr, *, in_gap=0.0, out_stall=0.0, seed=0, dut=None):
    """Stream the triples through an :class:`UpdatePipeline`; return results and cycle info.

    ``in_gap``/``out_stall`` are the probabilities of an idle input cycle and of ``o.ready``
    low. ``lr`` is driven per pair and scrambled while no pair is offered, so a pipeline that
    sampled it at the wrong time would fail.
    """
    dut = dut or UpdatePipeline()
    rng = np.random.default_rng(seed)
    n = len(theta)
    out = {"theta": [], "grad": [], "cycles": None, "first_valid": None, "max_credit": 0}

    async def producer(ctx):
        for k in range(n):
            while rng.random() < in_gap:
                ctx.set(dut.i.valid, 0)
                ctx.set(dut.lr, int(rng.integers(0, 2 ** 32)))
                await ctx.tick()
            ctx.set(dut.i.payload, {"theta": int(theta[k]), "grad": int(grad[k])})
            ctx.set(dut.lr, int(lr[k]))
            ctx.set(dut.i.valid, 1)
            await ctx.tick().until(dut.i.ready)
        ctx.set(dut.i.valid, 0)
        ctx.set(dut.lr, int(rng.integers(0, 2 ** 32)))

    async def consumer(ctx):
        cycle = 0
        held = None
        while len(out["theta"]) < n:
            ready = int(rng.random() >= out_stall)
            ctx.set(dut.o.ready, ready)
            _, _, valid, payload = await ctx.tick().sample(dut.o.valid, dut.o.payload)
            if held is not None:      # a stalled beat must be held unchanged
                assert valid and (payload.theta, payload.grad) == held
            held = None
            if valid and ready:
                out["theta"].append(payload.theta)
                out["grad"].append(payload.grad)
                if out["first_valid"] is None:
                    out["first_valid"] = cycle
            elif valid:
                held = (payload.theta, payload.grad)
            cycle += 1
            if cycle > 40 * n + 200:
                raise AssertionError(f"only {len(out['theta'])} of {n} results after {cycle} "
                                     "cycles")
        out["cycles"] = cycle

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(producer)
    sim.add_testbench(consumer)
    sim.run()
    return out


def test_pipeline_edge_cases_back_to_back():
    theta, grad, lr = update_operands(600, seed=3)
    dut = UpdatePipeline()
    out = run_pipeline(theta, grad, lr, dut=dut)
    assert_update_equal(out["theta"], out["grad"], theta, grad, lr)
    # First pair accepted in cycle 0, its result valid `latency` cycles later; then one result
    # per cycle (full throughput).
    assert out["first_valid"] == dut.latency == 13
    assert out["cycles"] == len(theta) + dut.latency


@pytest.mark.parametrize("in_gap, out_stall", [(0.3, 0.5), (0.0, 0.8), (0.6, 0.1)])
def test_pipeline_random_stalls(in_gap, out_stall):
    theta, grad, lr = update_operands(500, seed=int(in_gap * 10 + out_stall * 100), edges=False)
    out = run_pipeline(theta, grad, lr, in_gap=in_gap, out_stall=out_stall, seed=7)
    assert_update_equal(out["theta"], out["grad"], theta, grad, lr)


def test_pipeline_small_fifo_is_correct_but_slower():
    theta, grad, lr = update_operands(120, seed=4, edges=False)
    dut = UpdatePipeline(fifo_depth=3)
    out = run_pipeline(theta, grad, lr, dut=dut, out_stall=0.3, seed=1)
    assert_update_equal(out["theta"], out["grad"], theta, grad, lr)
    # At most fifo_depth pairs per latency + 1 cycles.
    assert out["cycles"] >= (len(theta) // 3) * (dut.latency + 1)


def test_pipeline_signature_and_errors():
    dut = UpdatePipeline()
    assert dut.fifo_depth == dut.latency + 1
    assert sorted(dut.signature.members) == ["i", "lr", "o"]
    with pytest.raises(TypeError, match="fifo_depth must be a positive integer, not 0"):
        UpdatePipeline(fifo_depth=0)
    with pytest.raises(TypeError, match="param_depth must be a positive integer"):
        RegionSweeper(param_depth=2.5)
    with pytest.raises(TypeError, match="grad_depth must be a positive integer"):
        RegionSweeper(param_depth=8, grad_depth=True)
    with pytest.raises(ValueError, match="length must be a non-negative integer"):
        RegionSweeper(param_depth=8).cycles(-1)


# -- region sweeper with Amaranth memories ------------------------------------------------------

class SweeperHarness(wiring.Component):
    """A :class:`RegionSweeper` attached to two ``lib.memory`` stores (test harness)."""

    def __init__(self, params, grads, fifo_depth=None):
        self.sweeper = RegionSweeper(param_depth=len(params), grad_depth=len(grads),
                                     fifo_depth=fifo_depth)
        self.pdata = memory.MemoryData(shape=32, depth=len(params), init=params.tolist())
        self.gdata = memory.MemoryData(shape=32, depth=len(grads), init=grads.tolist())
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.submodules.sweeper = sw = self.sweeper
        m.submodules.pmem = pmem = memory.Memory(data=self.pdata)
        m.submodules.gmem = gmem = memory.Memory(data=self.gdata)
        wiring.connect(m, pmem.read_port(), sw.param_r)
        wiring.connect(m, pmem.write_port(), sw.param_w)
        wiring.connect(m, gmem.read_port(), sw.grad_r)
        wiring.connect(m, gmem.write_port(), sw.grad_w)
        return m


# fifo_depth=3 makes the pipeline refuse pairs, which exercises the read-hold (skid) path.
@pytest.mark.parametrize("fifo_depth", [None, 3])
def test_sweeper_regions_word_for_word(fifo_depth):
    rng = np.random.default_rng(5)
    theta, grad, _ = update_operands(300, seed=6)
    params, grads = theta[:72].copy(), grad[100:160].copy()   # stores of different sizes
    commands = [(3, 40, _b(0.01)), (0, 0, _b(1.0)), (50, 10, PZERO), (55, 6, _b(0.5)),
                (59, 2, _b(2.0)), (43, 7, NAN), (0, 1, _b(-0.25))]
    top = SweeperHarness(params, grads, fifo_depth)
    sw = top.sweeper
    seen = []

    async def bench(ctx):
        for base, length, lr in commands:
            for _ in range(int(rng.integers(0, 3))):
                await ctx.tick()
            ctx.set(sw.base, base)
            ctx.set(sw.length, length)
            ctx.set(sw.lr, lr)
            ctx.set(sw.start, 1)
            await ctx.tick()
            ctx.set(sw.start, 0)
            ctx.set(sw.lr, 0xFFFFFFFF)              # latched: later changes must not matter
            ctx.set(sw.base, 0)
            cycles = 1
            while not ctx.get(sw.done):
                # A start while busy must be ignored (and must not relatch base/length/lr).
                ctx.set(sw.start, cycles == 5)
                await ctx.tick()
                cycles += 1
                assert cycles < 400
            ctx.set(sw.start, 0)
            seen.append((cycles, ctx.get(sw.error), ctx.get(sw.busy)))

    got = {}

    async def bench_and_read(ctx):
        await bench(ctx)
        # Read both stores back at the end of the same simulation.
        got["p"] = np.array([ctx.get(top.pdata[k]) for k in range(len(params))], np.uint32)
        got["g"] = np.array([ctx.get(top.gdata[k]) for k in range(len(grads))], np.uint32)

    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(bench_and_read)
    sim.run()
    want_p, want_g = params, grads
    for (base, length, lr), (cycles, error, busy) in zip(commands, seen):
        want_p, want_g, want_err = sweep_region(want_p, want_g, base, length, lr)
        assert bool(error) == want_err, (base, length)
        assert not busy
        if want_err or length == 0:
            assert cycles == 1
        elif fifo_depth is None:
            assert cycles == sw.cycles(length)
        else:                                           # at most 3 pairs per 14 cycles
            assert cycles >= sw.cycles(length) + (length - 1) // 3 * (sw.latency + 1 - 3) - 2
    assert seen[-2][1] == 0 and seen[3][1] == 1         # 55 + 6 > 60 words of grads
    np.testing.assert_array_equal(got["p"], want_p)
    np.testing.assert_array_equal(got["g"], want_g)


# -- integer mode ---------------------------------------------------------------------------------

MODES = ["FLOOR", "CEIL", "TRUNC", "HALF_UP", "HALF_AWAY", "HALF_EVEN"]


def _reference_int_update(theta, grad, mult, shift, bits, mode):
    """Independent scalar reference with Python's exact integers and Fractions."""
    from fractions import Fraction
    import math
    x = Fraction(int(grad) * int(mult), 2 ** int(shift))
    fl = math.floor(x)
    frac = x - fl
    step = {"FLOOR": fl, "CEIL": math.ceil(x), "TRUNC": math.trunc(x),
            "HALF_UP": fl + (frac >= Fraction(1, 2)),
            "HALF_AWAY": (fl + (frac >= Fraction(1, 2))) if x >= 0
            else -math.floor(-x + Fraction(1, 2)),
            "HALF_EVEN": fl + (frac > Fraction(1, 2) or (frac == Fraction(1, 2) and fl % 2 == 1))
            }[mode]
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return min(max(int(theta) - step, lo), hi)


def int_operands(count, seed, bits=8, grad_bits=32, mult_bits=16):
    """Return ``(theta, grad, mult, shift)`` int64 arrays: extremes, exact ties, random."""
    rng = np.random.default_rng(seed)
    tlo, thi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    glo, ghi = -(1 << (grad_bits - 1)), (1 << (grad_bits - 1)) - 1
    mlo, mhi = -(1 << (mult_bits - 1)), (1 << (mult_bits - 1)) - 1
    pw = grad_bits + mult_bits
    theta = rng.integers(tlo, thi + 1, count)
    grad = rng.integers(glo, ghi + 1, count) >> rng.integers(0, grad_bits, count)
    mult = rng.integers(mlo, mhi + 1, count) >> rng.integers(0, mult_bits, count)
    shift = rng.integers(0, pw, count)
    # A third are exact ties: mult = 1, grad = k * 2**s + 2**(s-1) (either sign of k).
    t = np.arange(count) % 3 == 0
    s = rng.integers(1, grad_bits - 4, count)            # |k * 2**s| < 2**(grad_bits - 2)
    k = rng.integers(-8, 8, count)
    grad[t] = (k[t] << s[t]) + (1 << (s[t] - 1))
    mult[t], shift[t] = 1, s[t]
    ext = [(thi, glo, mlo, 0), (tlo, glo, mlo, 0), (tlo, ghi, mhi, 0), (thi, glo, mhi, pw - 1),
           (tlo, glo, mlo, pw - 1), (0, ghi, mhi, pw - 1), (0, -1, 1, 1), (0, 1, 1, 1),
           (0, 3, 1, 1), (0, -3, 1, 1), (thi, 0, mhi, 5), (tlo, 1, -1, 0)]
    for j, e in enumerate(ext[:count]):
        theta[j], grad[j], mult[j], shift[j] = e
    assert (glo <= grad).all() and (grad <= ghi).all() and (mlo <= mult).all() \
        and (mult <= mhi).all()
    return theta, grad, mult, shift


@pytest.mark.parametrize("mode", MODES)
def test_golden_int_update_matches_exact_reference(mode):
    theta, grad, mult, shift = int_operands(3000, seed=MODES.index(mode))
    from ttrain.golden.update import int_sgd_update
    got = int_sgd_update(theta, grad, mult, shift, bits=8, mode=mode)
    want = [_reference_int_update(*row, 8, mode) for row in zip(theta, grad, mult, shift)]
    np.testing.assert_array_equal(got, want)


def test_golden_int_update_errors():
    from ttrain.golden.update import int_sgd_update
    with pytest.raises(ValueError, match="outside signed 8-bit"):
        int_sgd_update([128], [1], 1, 0)
    with pytest.raises(ValueError, match="overflows int64"):
        int_sgd_update([0], [2 ** 62], 4, 0)


def run_int_pipeline(dut, theta, grad, mult, shift, *, in_gap, out_stall, seed):
    rng = np.random.default_rng(seed)
    n = len(theta)
    got = []

    async def producer(ctx):
        for k in range(n):
            while rng.random() < in_gap:
                ctx.set(dut.i.valid, 0)
                ctx.set(dut.lr_mult, int(rng.integers(-2 ** 15, 2 ** 15)))
                await ctx.tick()
            ctx.set(dut.i.payload, {"theta": int(theta[k]), "grad": int(grad[k])})
            ctx.set(dut.lr_mult, int(mult[k]))
            ctx.set(dut.shift, int(shift[k]))
            ctx.set(dut.i.valid, 1)
            await ctx.tick().until(dut.i.ready)
        ctx.set(dut.i.valid, 0)

    async def consumer(ctx):
        cycles = 0
        while len(got) < n:
            ready = int(rng.random() >= out_stall)
            ctx.set(dut.o.ready, ready)
            _, _, valid, payload = await ctx.tick().sample(dut.o.valid, dut.o.payload)
            if valid and ready:
                assert payload.grad == 0
                got.append(payload.theta)
            cycles += 1
            assert cycles < 20 * n + 100

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(producer)
    sim.add_testbench(consumer)
    sim.run()
    return np.array(got, dtype=np.int64)


@pytest.mark.parametrize("mode", MODES)
def test_int_pipeline_matches_golden(mode):
    from ttrain.golden.update import int_sgd_update
    from ttrain.rtl.update import IntUpdatePipeline
    theta, grad, mult, shift = int_operands(400, seed=10 + MODES.index(mode))
    dut = IntUpdatePipeline(mode=mode)
    got = run_int_pipeline(dut, theta, grad, mult, shift, in_gap=0.2, out_stall=0.3, seed=1)
    np.testing.assert_array_equal(got, int_sgd_update(theta, grad, mult, shift, mode=mode))


def test_int_pipeline_other_widths_and_throughput():
    from ttrain.golden.update import int_sgd_update
    from ttrain.rtl.update import IntUpdatePipeline
    theta, grad, mult, shift = int_operands(300, seed=20, bits=16, grad_bits=24, mult_bits=8)
    dut = IntUpdatePipeline(bits=16, grad_bits=24, mult_bits=8, mode="half_away")
    got = run_int_pipeline(dut, theta, grad, mult, shift, in_gap=0.0, out_stall=0.0, seed=2)
    np.testing.assert_array_equal(
        got, int_sgd_update(theta, grad, mult, shift, bits=16, mode="HALF_AWAY"))


def test_int_pipeline_parameter_errors():
    from ttrain.rtl.update import IntUpdatePipeline
    with pytest.raises(TypeError, match=r"bits must be an integer in \[2, 32\], not 1"):
        IntUpdatePipeline(bits=1)
    with pytest.raises(TypeError, match="grad_bits must be an integer"):
        IntUpdatePipeline(grad_bits=64)
    with pytest.raises(ValueError, match="mode must be a Rounding member or one of"):
        IntUpdatePipeline(mode="nearest")
