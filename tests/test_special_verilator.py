"""SpecialFunctionUnit under Verilator: 20k inputs per function, 8 functions (1M each in the
benchmark), bit for bit against golden.

The streaming wrapper ``testbench/fp32_stream_tb.v`` (shared with the FP32 units; its widths
are parameters) plays ``{func, x}`` words from a ``$readmemh`` file into the unit at one per
cycle, checks ``o.valid`` against ``i.valid`` delayed by the unit's latency on every cycle and
dumps the results with ``$writememh``; cocotb (``testbench/tb_fp32.py``) only starts it and
awaits ``done``. The functions are interleaved at random, so the unit switches function on
every cycle. The results are compared with :func:`ttrain.golden.special.fp32_special`.

Also a command-line run for larger sweeps::

    .venv/bin/python tests/test_special_verilator.py --per-function 1000000 --seed 1
"""

import argparse
import functools
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:                      # when run as a script
    sys.path.insert(0, str(_HERE))

from ttrain.golden import numerics as nx  # noqa: E402
from ttrain.golden import special as S  # noqa: E402
from ttrain.rtl.special import SpecialFunctionUnit  # noqa: E402
from ttrain.platforms.sim.top import special_fp_sources  # noqa: E402
from ttrain.platforms.sim.verilator import build_verilator, lint_verilator  # noqa: E402
from ttrain.rtl.fp32 import latency_of  # noqa: E402
from ttrain.testbench import TESTBENCH_DIR  # noqa: E402
from ttrain.testbench.bench_fp32 import play_stream  # noqa: E402
WRAPPER = TESTBENCH_DIR / "fp32_stream_tb.v"
IN_W = 35                       # x in bits 0-31, func in bits 32-34
DEPTH = 1 << 20
NAME = "special_unit"
#: Inputs per function in ``make test`` (and how many beats come with random idle cycles).
PER_FUNCTION = 20_000           # the benchmark command above streams 1M per function
GAP_BEATS = 5_000


@functools.cache
def build_unit(unit=None):
    """Build (or reuse) the streaming simulation of the full unit; return the VerilatorBuild.

    The unit is built with ``impl="verilog"``: its 90 FP32 units are instances of three
    Verilog modules, which Verilator compiles once each.
    """
    unit = unit or SpecialFunctionUnit(impl="verilog")
    return build_verilator(unit, name=NAME, extra_sources=[*special_fp_sources(), WRAPPER],
                           toplevel="fp32_stream_tb", defines={"DUT": NAME}, public="top",
                           parameters={"IN_W": IN_W, "OUT_W": 32, "DEPTH": DEPTH,
                                       "MAX_LATENCY": unit.latency})


def _bits(x):
    return nx.f32_to_bits(np.asarray(x, dtype=np.float32))


#: Working range of each function for the dense part of its inputs.
RANGES = {"exp": (-105.0, 90.0), "recip": (-4.0, 4.0), "rsqrt": (0.0, 16.0),
          "tanh": (-10.0, 10.0), "tanh_grad": (-1.25, 1.25), "gelu": (-12.0, 12.0),
          "gelu_grad": (-12.0, 12.0), "log": (0.0, 8.0)}

EDGE_BITS = [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000,
             0x7F800001, 0xFFFFFFFF, 0x00000001, 0x80000001, 0x007FFFFF, 0x00800000,
             0x00200000, 0x00400000, 0x7F000000, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000,
             0xBF800000, 0x42B17218, 0x42B20000, 0xC2CFF1B5, 0xC2D00000, 0x3F200000,
             0xBF200000, 0x3F1FFFFF, 0xC1A00000, 0x41A00000, 0xBF40733E,
             0x3FB504F3, 0x3FB504F4, 0x3F7FFFFF, 0x3F800001]     # log: sqrt 2 switch, 1 -+ ulp


def function_inputs(func, n, rng):
    """``n`` inputs for ``func``: edge cases, a dense grid of its range, random bit patterns
    (every class: subnormals, infinities, NaNs with payloads)."""
    lo, hi = RANGES[func]
    dense = _bits(np.linspace(lo, hi, n // 2).astype(np.float32))
    rand = rng.integers(0, 1 << 32, n - len(dense) - len(EDGE_BITS), dtype=np.uint64)
    return np.concatenate([np.array(EDGE_BITS, np.uint32), dense, rand.astype(np.uint32)])


def stream_inputs(per_function, seed):
    """All functions' inputs in a random interleaving (every 3-bit code is a function since
    log took code 7; the NaN of a code without a datapath is tested in test_special_sim.py).

    Returns ``(codes, x_bits)``.
    """
    rng = np.random.default_rng(seed)
    codes, xs = [], []
    for func in S.FUNCTIONS:
        x = function_inputs(func, per_function, rng)
        codes.append(np.full(len(x), S.FUNCTION_CODES[func], dtype=np.uint64))
        xs.append(x)
    codes, xs = np.concatenate(codes), np.concatenate(xs)
    order = rng.permutation(len(xs))
    return codes[order], xs[order]


def golden_bits(codes, xs):
    """Expected outputs: fp32_special per code, canonical NaN for codes without a function."""
    want = np.full(len(xs), nx.CANONICAL_NAN, dtype=np.uint32)
    for func, code in S.FUNCTION_CODES.items():
        sel = codes == code
        if sel.any():
            want[sel] = _bits(S.fp32_special(func, nx.bits_to_f32(xs[sel])))
    return want


def _read_results(path, count):
    lines = [ln.strip() for ln in path.read_bytes().split(b"\n")
             if ln.strip() and not ln.startswith((b"//", b"@"))]
    if len(lines) != count:
        raise AssertionError(f"{path} holds {len(lines)} results, expected {count}")
    try:
        return np.array([int(ln, 16) for ln in lines], dtype=np.uint32)
    except ValueError as exc:
        raise AssertionError(f"{path} holds non-hex results (X or Z?): {exc}") from None


def stream_unit(codes, xs, *, work_dir, gaps=0, build=None, latency=None, timeout=600):
    """Run the ``(code, x)`` beats through the unit under Verilator; return the result bits."""
    count = len(xs)
    if not 1 <= count <= DEPTH:
        raise ValueError(f"stream between 1 and {DEPTH} inputs per run, not {count}")
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    build = build or build_unit()
    if latency is None:
        latency = latency_of(lambda: SpecialFunctionUnit(impl="verilog"))
    words = (np.asarray(codes, np.uint64) << np.uint64(32)) | np.asarray(xs, np.uint64)
    operands = work_dir / "operands.hex"
    operands.write_text("\n".join(map("{:09x}".format, words.tolist())) + "\n")
    return _read_results(play_stream(build, work_dir, operands, count, latency=latency,
                                     gaps=gaps, timeout=timeout), count)


def mismatch_report(codes, xs, got, want, limit=8):
    bad = np.flatnonzero(got != want)
    return f"{len(bad)} mismatches; first (func, x, rtl, golden): " + ", ".join(
        f"({int(codes[k])}, {int(xs[k]):#010x}, {int(got[k]):#010x}, {int(want[k]):#010x})"
        for k in bad[:limit])


# -- pytest ----------------------------------------------------------------------------------

def test_stream_matches_golden(tmp_path):
    # 8 x 20k inputs (edge cases, dense range, random bits) interleaved at random; the first
    # GAP_BEATS beats come with random idle cycles.
    codes, xs = stream_inputs(PER_FUNCTION, seed=11)
    got = stream_unit(codes, xs, work_dir=tmp_path, gaps=GAP_BEATS)
    want = golden_bits(codes, xs)
    assert np.array_equal(got, want), mismatch_report(codes, xs, got, want)
    for func, code in S.FUNCTION_CODES.items():       # every function really was exercised
        assert (codes == code).sum() >= PER_FUNCTION
    assert set(S.FUNCTION_CODES) == set(S.FUNCTIONS) and "log" in S.FUNCTIONS


def test_lint_wall():
    # Every kind of operator (FP32 unit instances, compare, split, pow2, scale_exp,
    # int_from_magic, magic_from_int, rsqrt_seed, integer ops, selects, delay lines, output
    # multiplexer) in a small instance: -Wall lint time grows with the FP32 instances. (Every
    # build is also linted with Verilator's default warnings, which are fatal.)
    unit = SpecialFunctionUnit(functions=("exp", "rsqrt", "tanh_grad", "log"), impl="verilog")
    assert lint_verilator(unit, name="special_unit_lint", extra_sources=special_fp_sources(),
                          flags=("-Wall",)) == ""


# -- command line ----------------------------------------------------------------------------

def main(argv=None):
    """Stream ``--per-function`` inputs per function (in runs of at most DEPTH) and report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-function", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    unit = SpecialFunctionUnit(impl="verilog")
    build = build_unit(unit)
    t1 = time.perf_counter()
    codes, xs = stream_inputs(args.per_function, args.seed)
    mismatches, sim_s = 0, 0.0
    with tempfile.TemporaryDirectory(prefix="special-sweep-") as tmp:
        for k, start in enumerate(range(0, len(xs), DEPTH)):
            c, x = codes[start:start + DEPTH], xs[start:start + DEPTH]
            ts = time.perf_counter()
            got = stream_unit(c, x, work_dir=Path(tmp) / f"run{k}", build=build,
                              latency=unit.latency)
            sim_s += time.perf_counter() - ts
            want = golden_bits(c, x)
            if not np.array_equal(got, want):
                print(mismatch_report(c, x, got, want), flush=True)
            mismatches += int((got != want).sum())
    print({"inputs": len(xs), "per_function": args.per_function, "mismatches": mismatches,
           "latency": unit.latency, "build_seconds": round(t1 - t0, 1),
           "sim_seconds": round(sim_s, 1), "total_seconds": round(time.perf_counter() - t0, 1)})
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
