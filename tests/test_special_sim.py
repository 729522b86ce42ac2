"""SpecialFunctionUnit in the Amaranth simulator (small builds) and its parameter checks.

The full unit is streamed under Verilator (``tests/test_special_verilator.py``); here a unit
with only the two smallest datapaths (recip, tanh_grad) runs a few hundred mixed inputs in the
Python simulator, checking the latency, the in-order interleaving of functions, idle cycles and
the NaN of codes without a datapath (exp, log).
"""

import numpy as np
import pytest
from amaranth.sim import Simulator

from ttrain.golden import numerics as nx
from ttrain.golden import special as S
from ttrain.rtl.special import SpecialFunctionUnit


def _run(dut, beats, watch=None):
    """Drive ``beats`` ((code, x bits) or None for an idle cycle); return (cycle, result) pairs
    of every o.valid cycle, cycles counted from the first beat (with ``watch``, a signal, also
    its value after each cycle)."""
    out, seen = [], []

    async def bench(ctx):
        for cycle in range(len(beats) + dut.latency + 3):
            beat = beats[cycle] if cycle < len(beats) else None
            if beat is None:
                ctx.set(dut.i.valid, 0)
                ctx.set(dut.i.payload, {"x": 0xFFFFFFFF, "func": 0})   # garbage, not valid
            else:
                ctx.set(dut.i.payload, {"x": beat[1], "func": beat[0]})
                ctx.set(dut.i.valid, 1)
            await ctx.tick()
            if ctx.get(dut.o.valid):
                out.append((cycle, ctx.get(dut.o.payload)))
            if watch is not None:
                seen.append(ctx.get(watch))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return out if watch is None else (out, seen)


def test_small_unit_matches_golden_with_idle_cycles():
    dut = SpecialFunctionUnit(functions=("tanh_grad", "recip"))
    assert dut.functions == ("recip", "tanh_grad")               # code order
    rng = np.random.default_rng(0)
    n = 120
    xs = np.concatenate([
        nx.f32_to_bits(np.linspace(-3, 3, n // 2).astype(np.float32)),
        rng.integers(0, 1 << 32, n - n // 2, dtype=np.uint64).astype(np.uint32)])
    codes = rng.choice([S.FUNCTION_CODES["recip"], S.FUNCTION_CODES["tanh_grad"],
                        S.FUNCTION_CODES["exp"], S.FUNCTION_CODES["log"]], size=n,
                       p=[0.45, 0.45, 0.05, 0.05])
    beats = []
    for k in range(n):
        if k % 7 == 3:
            beats.append(None)                                    # idle cycle
        beats.append((int(codes[k]), int(xs[k])))
    out = _run(dut, beats)
    want = []
    for code, x in zip(codes.tolist(), xs.tolist()):
        if code in (S.FUNCTION_CODES["recip"], S.FUNCTION_CODES["tanh_grad"]):
            want.append(int(nx.f32_to_bits(S.fp32_special(code, nx.bits_to_f32(np.uint32(x))))))
        else:
            want.append(nx.CANONICAL_NAN)                         # no datapath in this build
    assert [v for _, v in out] == want
    # Every result comes exactly `latency` cycles after its beat (the clock edge that
    # registers the input is cycle k's tick, o.valid is sampled after the latency-th).
    beat_cycles = [k for k, b in enumerate(beats) if b is not None]
    assert [c for c, _ in out] == [k + dut.latency - 1 for k in beat_cycles]


class _CountingOps:
    """Op set that only counts the FP32 operations of a golden sequence."""

    def __init__(self):
        self.counts = {"mul": 0, "add": 0, "compare": 0}

    def __getattr__(self, name):
        kind = {"mul": "mul", "add": "add", "sub": "add", "max": "compare", "min": "compare",
                "lt": "compare"}.get(name)

        def op(*args):
            if kind:
                self.counts[kind] += 1
            return (None, None) if name == "split" else None
        return op


def golden_counts(func):
    ops = _CountingOps()
    S.SEQUENCES[func](ops, None)
    return ops.counts["mul"], ops.counts["add"], ops.counts["compare"]


def unit(**kwargs):
    """A unit built only to read its latency and statistics (not elaborated)."""
    dut = SpecialFunctionUnit(**kwargs)
    dut._MustUse__silence = True
    return dut


@pytest.mark.parametrize("func", S.FUNCTIONS)
def test_single_function_unit_has_the_sequence_operators(func):
    # A one-function unit instantiates exactly one FP32 unit per operation of the sequence.
    stats = unit(functions=(func,)).stats
    assert (stats["mul"], stats["add"], stats["compare"]) == golden_counts(func)


def test_full_unit_shares_the_exp_and_recip_datapaths():
    dut = unit()
    stats = dut.stats
    assert set(stats["result_stage"]) == set(S.FUNCTIONS)
    assert dut.latency == max(stats["result_stage"].values()) + 1
    # exp 12/11/2 + recip 9/5/0 + rsqrt 11/4/0 + tanh_grad 1/1/0 + log 14/14/1 (each once),
    # tanh head 8/5/0 and tail 1/1/1, core input 1 + E 0/1/0, gelu head 4/1/2, E*R and t < 0
    # 1/0/1, gelu tail 1/0/0, gelu_grad tail 5/2/0: (mul, add, compare).
    assert golden_counts("log") == (14, 14, 1)
    assert (stats["mul"], stats["add"], stats["compare"]) == (67, 45, 7)
    separate = [sum(golden_counts(f)[k] for f in S.FUNCTIONS) for k in range(2)]
    assert separate == [135, 96]            # what one datapath per function would need
    # log is independent (own operators) and finishes before gelu_grad: no latency change
    assert stats["result_stage"]["log"] < stats["result_stage"]["gelu_grad"]
    assert dut.latency == unit(functions=("gelu_grad",)).latency
    small = unit(functions=("tanh_grad",))
    assert small.latency == 6 + 6 + 1      # multiply, subtract, output register


def test_parameter_errors():
    with pytest.raises(ValueError, match="unknown special function\\(s\\) \\['sigmoid'\\]"):
        SpecialFunctionUnit(functions=("exp", "sigmoid"))
    with pytest.raises(ValueError, match="at least one"):
        SpecialFunctionUnit(functions=())
    with pytest.raises(ValueError, match="twice"):
        SpecialFunctionUnit(functions=("exp", "exp"))
    with pytest.raises(TypeError, match="write functions=\\('exp',\\)"):
        SpecialFunctionUnit(functions="exp")


def _grouped_beats(dut, funcs, n, rng):
    """Beats of ``funcs`` one function at a time (an idle cycle inside each group, and idle
    cycles after it until its last result is out); return (beats, expected results)."""
    beats, want = [], []
    for func in funcs:
        code = S.FUNCTION_CODES[func]
        xs = nx.f32_to_bits(rng.uniform(-4, 4, n).astype(np.float32))
        xs[0] = 0x7F800000 if func != "exp" else 0xC2D00000          # inf / exp underflow
        for k, x in enumerate(xs.tolist()):
            if k == n // 2:
                beats.append(None)
            beats.append((code, int(x)))
            want.append(int(nx.f32_to_bits(S.fp32_special(code, nx.bits_to_f32(np.uint32(x)))))
                        if func in dut.functions else nx.CANONICAL_NAN)
        beats += [None] * dut.latencies.get(func, 1)
    return beats, want


def test_per_function_latency_time_multiplexes_the_shared_datapaths():
    # exp, recip and tanh (whose head feeds the exp datapath and whose 1 + E feeds the recip
    # datapath at later stages): with latency="per_function" an exp or recip beat enters its
    # datapath at once and each result leaves after its own function's latency, so a recip op
    # takes 86 cycles instead of the slowest function's. One function at a time, back to back
    # after the previous one's last result; log has no datapath here (NaN after one cycle).
    dut = SpecialFunctionUnit(functions=("exp", "recip", "tanh"), latency="per_function")
    fixed = unit(functions=("exp", "recip", "tanh"))
    lat = dut.latencies
    assert dut.latency == fixed.latency == lat["tanh"] == max(lat.values())
    assert set(fixed.latencies.values()) == {fixed.latency}
    assert lat["recip"] < lat["exp"] < lat["tanh"]
    assert lat["recip"] == unit(functions=("recip",)).latency        # its datapath alone
    assert lat["exp"] == unit(functions=("exp",)).latency
    funcs = ["recip", "tanh", "exp", "recip", "log", "exp", "tanh"]
    beats, want = _grouped_beats(dut, funcs, 6, np.random.default_rng(5))
    out, clash = _run(dut, beats, watch=dut.clash)
    assert [v for _, v in out] == want
    name_of = {code: func for func, code in S.FUNCTION_CODES.items()}
    expect = []                                   # o.valid cycles: each beat's own latency
    for k, beat in enumerate(beats):
        if beat is not None:
            expect.append(k + lat.get(name_of[beat[0]], 1) - 1)
    assert [c for c, _ in out] == expect
    assert not any(clash)


def test_per_function_clash_flag():
    # A beat of another function while one is in flight breaks the rule: the sticky clash
    # output rises (the result stream is then undefined); back to back after the last result
    # it does not.
    dut = SpecialFunctionUnit(functions=("recip", "tanh_grad"), latency="per_function")
    recip, tgrad = S.FUNCTION_CODES["recip"], S.FUNCTION_CODES["tanh_grad"]
    one = int(nx.f32_to_bits(np.float32(1.0)))
    ok = [(recip, one)] + [None] * (dut.latencies["recip"] - 1) + [(tgrad, one)]
    _, clash = _run(dut, ok, watch=dut.clash)
    assert not any(clash)
    bad = [(recip, one), None, (tgrad, one)]
    _, clash = _run(dut, bad, watch=dut.clash)
    assert clash[2:] == [1] * (len(clash) - 2) and clash[:2] == [0, 0]


def test_latency_mode_is_checked():
    with pytest.raises(ValueError, match="latency must be 'fixed'.*or 'per_function'"):
        SpecialFunctionUnit(latency="variable")
