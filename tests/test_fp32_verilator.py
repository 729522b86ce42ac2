"""FP32 units under Verilator, hundreds of thousands of pairs, bit for bit against golden.

The simulation-only wrapper ``testbench/fp32_stream_tb.v`` streams operand pairs from a
``$readmemh`` file into the unit at one pair per cycle and dumps the results with
``$writememh``; cocotb (``tests/cocotb/tb_fp32.py``) only starts it and awaits ``done``. The
results are compared with the golden functions in one vectorized call.

Also a command-line benchmark for the one-million-pairs-per-unit requirement::

    .venv/bin/python tests/test_fp32_verilator.py --pairs 1000000 --seed 1

which calls :func:`run_fp32_sweep` for every unit and prints pairs, mismatches and seconds.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:                      # when run as a script
    sys.path.insert(0, str(_HERE))

from test_fp32_sim import (UNITS, assert_bits_equal, edge_case_pairs, golden_bits,  # noqa: E402
                           make_unit, random_pairs)

from ttrain.testbench.verilator import (TESTBENCH_DIR, LintError,  # noqa: E402
                                        SimulationError, build_verilator, component_ports,
                                        lint_verilator, run_cocotb, toolchain_env)

COCOTB_DIR = _HERE / "cocotb"
WRAPPER = TESTBENCH_DIR / "fp32_stream_tb.v"
#: Result width of each unit (the compare unit packs max, min and three flags).
OUT_WIDTH = {"mul": 32, "add": 32, "compare": 67}
#: Operand memory depth of the wrapper: the most pairs one simulation run can take.
DEPTH = 1 << 20
#: Pairs per unit in ``make test``, and how many of them come with random idle cycles.
TEST_PAIRS = 200_000
GAP_BEATS = 5_000


def build_unit(unit):
    """Build (or reuse) the streaming simulation of ``unit``; return the VerilatorBuild."""
    name = f"fp32_{unit}"
    return build_verilator(make_unit(unit), name=name, extra_sources=[WRAPPER],
                           toplevel="fp32_stream_tb", defines={"DUT": name},
                           parameters={"OUT_W": OUT_WIDTH[unit], "DEPTH": DEPTH})


def _write_operands(path, a_bits, b_bits):
    words = (np.asarray(b_bits, dtype=np.uint64) << np.uint64(32)) | np.asarray(a_bits,
                                                                                 np.uint64)
    path.write_text("\n".join(map("{:016x}".format, words.tolist())) + "\n")


_HEX = np.full(256, 255, dtype=np.uint8)
_HEX[np.frombuffer(b"0123456789", np.uint8)] = np.arange(10)
_HEX[np.frombuffer(b"abcdef", np.uint8)] = np.arange(10, 16)
_HEX[np.frombuffer(b"ABCDEF", np.uint8)] = np.arange(10, 16)


def _read_results(path, count, width):
    """Parse a ``$writememh`` dump of ``count`` words into an (count, digits) nibble array."""
    lines = [ln for ln in path.read_bytes().split(b"\n")
             if ln.strip() and not ln.startswith((b"//", b"@"))]
    if len(lines) != count:
        raise AssertionError(f"{path} holds {len(lines)} results, expected {count}")
    digits = (width + 3) // 4
    raw = np.frombuffer(b"".join(ln.strip().rjust(digits, b"0") for ln in lines), np.uint8)
    nibbles = _HEX[raw].reshape(count, digits)
    if (nibbles == 255).any():
        raise AssertionError(f"{path} holds non-hex digits (X or Z results?)")
    return nibbles


def _nibbles_to_uint32(nibbles):
    value = np.zeros(len(nibbles), dtype=np.uint32)
    for col in range(nibbles.shape[1]):
        value = (value << np.uint32(4)) | nibbles[:, col].astype(np.uint32)
    return value


def decode_results(unit, nibbles):
    """Turn result nibbles into the field arrays of :func:`test_fp32_sim.golden_bits`."""
    if unit in ("mul", "add"):
        return {"o": _nibbles_to_uint32(nibbles)}
    # 67 bits = 17 digits: flags in the top digit (bit 0 is_lt, 1 is_le, 2 is_eq), then min,
    # then max (least significant).
    top = nibbles[:, 0]
    return {"max": _nibbles_to_uint32(nibbles[:, 9:17]),
            "min": _nibbles_to_uint32(nibbles[:, 1:9]),
            "is_lt": (top & 1).astype(bool), "is_le": (top & 2).astype(bool),
            "is_eq": (top & 4).astype(bool)}


def stream_unit(unit, a_bits, b_bits, *, work_dir, gaps=0, latency=None, build=None,
                timeout=600):
    """Run the pairs through ``unit`` under Verilator and return the decoded results.

    Parameters
    ----------
    unit : {"mul", "add", "compare"}
    a_bits, b_bits : numpy.ndarray of uint32
        At most :data:`DEPTH` pairs.
    work_dir : path-like
        Folder for the operand/result files and the cocotb results/log.
    gaps : int
        Insert pseudo-random idle cycles (about one in four) before each of the first ``gaps``
        beats; the rest stream back to back.
    latency : int, optional
        Latency the wrapper checks ``o.valid`` against (default: the unit's own).
    build : VerilatorBuild, optional
        Reuse a build (default: :func:`build_unit`).
    timeout : float
        Wall-clock limit of the simulation in seconds (a hung run fails instead of blocking).
    """
    count = len(a_bits)
    if not 1 <= count <= DEPTH:
        raise ValueError(f"stream between 1 and {DEPTH} pairs per run, not {count}")
    if not isinstance(gaps, int) or gaps < 0:
        raise ValueError(f"gaps must be a non-negative number of beats, not {gaps!r}")
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    build = build or build_unit(unit)
    latency = make_unit(unit).latency if latency is None else latency
    operands, results = work_dir / "operands.hex", work_dir / "results.hex"
    _write_operands(operands, a_bits, b_bits)
    results.unlink(missing_ok=True)
    run_cocotb(build, "tb_fp32", testcase="stream_pairs", test_dir=work_dir,
               module_dirs=[COCOTB_DIR],
               plusargs=[f"+OPERANDS={operands}", f"+RESULTS={results}", f"+PAIRS={count}",
                         f"+LATENCY={latency}", f"+GAPS={int(gaps)}"],
               extra_env={"FP32_PAIRS": count, "FP32_TIMEOUT_CYCLES": 2 * count + 1000},
               timeout=timeout)
    return decode_results(unit, _read_results(results, count, OUT_WIDTH[unit]))


def count_mismatches(unit, got, a_bits, b_bits):
    """Return the number of pairs where any output field differs from golden."""
    want = golden_bits(unit, a_bits, b_bits)
    bad = np.zeros(len(a_bits), dtype=bool)
    for key, expected in want.items():
        bad |= got[key] != expected
    return int(bad.sum())


def sweep_pairs(unit, pairs, seed, uniform=False):
    """Return the operand set of a sweep: the unit's edge cases, then random pairs.

    With ``uniform``, only uniformly random 32-bit patterns instead (no edge cases, no class
    weighting): a cross-check that does not depend on :func:`random_pairs`' choices.
    """
    if uniform:
        rng = np.random.default_rng(seed)
        return (rng.integers(0, 1 << 32, pairs, dtype=np.uint64).astype(np.uint32),
                rng.integers(0, 1 << 32, pairs, dtype=np.uint64).astype(np.uint32))
    ea, eb = edge_case_pairs(unit)
    ra, rb = random_pairs(max(pairs - len(ea), 1), seed)
    return np.concatenate([ea, ra])[:pairs], np.concatenate([eb, rb])[:pairs]


def result_classes(bits):
    """Count golden results per class: zero, subnormal, normal, infinity, NaN."""
    bits = np.asarray(bits, dtype=np.uint32)
    exp, frac = (bits >> 23) & 0xFF, bits & 0x7FFFFF
    return {"zero": int(((exp == 0) & (frac == 0)).sum()),
            "subnormal": int(((exp == 0) & (frac != 0)).sum()),
            "normal": int(((exp > 0) & (exp < 255)).sum()),
            "inf": int(((exp == 255) & (frac == 0)).sum()),
            "nan": int(((exp == 255) & (frac != 0)).sum())}


def run_fp32_sweep(unit, pairs=1_000_000, seed=0, *, uniform=False, work_dir=None):
    """Stream ``pairs`` operand pairs through ``unit`` under Verilator; compare with golden.

    Parameters
    ----------
    unit : {"mul", "add", "compare"}
    pairs : int
        Number of pairs (edge cases first, then :func:`test_fp32_sim.random_pairs`); runs of
        more than :data:`DEPTH` pairs are split into several simulations.
    seed : int
        Seed of the random pairs.
    uniform : bool
        Uniformly random bit patterns instead (see :func:`sweep_pairs`).
    work_dir : path-like, optional
        Folder for the files of each run (a temporary folder by default).

    Returns
    -------
    dict
        ``unit``, ``pairs``, ``mismatches``, ``build_seconds``, ``sim_seconds`` (cocotb runs,
        including file writing and reading), ``golden_seconds``, ``total_seconds`` and
        ``first_mismatches`` (up to 10 ``(a, b)`` hex pairs) and ``classes`` (golden results
        per class, see :func:`result_classes`; of ``max`` for the compare unit).
    """
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {UNITS}, not {unit!r}")
    if not isinstance(pairs, int) or pairs < 1:
        raise ValueError(f"pairs must be a positive integer, not {pairs!r}")
    t0 = time.perf_counter()
    a_all, b_all = sweep_pairs(unit, pairs, seed, uniform)
    build = build_unit(unit)
    t1 = time.perf_counter()
    sim_s = golden_s = 0.0
    mismatches, first = 0, []
    classes = dict.fromkeys(("zero", "subnormal", "normal", "inf", "nan"), 0)
    with tempfile.TemporaryDirectory(prefix=f"fp32-sweep-{unit}-") as tmp:
        root = Path(work_dir) if work_dir is not None else Path(tmp)
        for start in range(0, pairs, DEPTH):
            a, b = a_all[start:start + DEPTH], b_all[start:start + DEPTH]
            ts = time.perf_counter()
            got = stream_unit(unit, a, b, work_dir=root / f"run{start // DEPTH}", build=build)
            tg = time.perf_counter()
            want = golden_bits(unit, a, b)
            bad = np.zeros(len(a), dtype=bool)
            for key, expected in want.items():
                bad |= got[key] != expected
            mismatches += int(bad.sum())
            for key, n in result_classes(want["o" if "o" in want else "max"]).items():
                classes[key] += n
            first += [(f"{int(a[k]):08x}", f"{int(b[k]):08x}") for k in np.flatnonzero(bad)]
            te = time.perf_counter()
            sim_s += tg - ts
            golden_s += te - tg
    return {"unit": unit, "pairs": pairs, "uniform": uniform, "mismatches": mismatches,
            "build_seconds": round(t1 - t0, 2), "sim_seconds": round(sim_s, 2),
            "golden_seconds": round(golden_s, 2),
            "total_seconds": round(time.perf_counter() - t0, 2), "first_mismatches": first[:10], "classes": classes}


# -- pytest ----------------------------------------------------------------------------------

@pytest.mark.parametrize("unit", UNITS)
def test_stream_matches_golden(unit, tmp_path):
    # The first GAP_BEATS beats come with random idle cycles (the wrapper checks o.valid
    # against i.valid delayed by the latency on every cycle), the rest back to back.
    a, b = sweep_pairs(unit, TEST_PAIRS, seed=100 + UNITS.index(unit))
    got = stream_unit(unit, a, b, work_dir=tmp_path, gaps=GAP_BEATS)
    assert_bits_equal(unit, got, a, b)


def test_wrong_latency_is_reported(tmp_path):
    # The wrapper checks o.valid against i.valid delayed by the declared latency; a wrong
    # declaration must fail the cocotb test and surface as SimulationError.
    a, b = random_pairs(500, seed=3)
    with pytest.raises(SimulationError, match="1 of 1 cocotb tests failed"):
        stream_unit("mul", a, b, work_dir=tmp_path, latency=5, gaps=500)
    assert "valid disagreed" in (tmp_path / "sim.log").read_text()


def test_hung_simulation_times_out(tmp_path):
    # `never_finishes` keeps the simulator busy for ~10^8 cycles, like a hung design; the
    # wall-clock watchdog must stop it and report it.
    operands = tmp_path / "operands.hex"
    _write_operands(operands, *random_pairs(4, seed=5))
    with pytest.raises(SimulationError, match="still running after 2 s and was terminated"):
        run_cocotb(build_unit("compare"), "tb_fp32", testcase="never_finishes",
                   test_dir=tmp_path, module_dirs=[COCOTB_DIR], timeout=2,
                   plusargs=[f"+OPERANDS={operands}", f"+RESULTS={tmp_path / 'results.hex'}",
                             "+PAIRS=4", "+LATENCY=1"])


@pytest.mark.parametrize("unit", UNITS)
def test_lint_wall(unit):
    assert lint_verilator(make_unit(unit), name=f"fp32_{unit}", flags=("-Wall",)) == ""


def test_lint_wall_compare_combinational():
    assert lint_verilator(make_unit("compare", latency=0), name="fp32_compare_comb") == ""


def test_lint_wall_stream_wrapper():
    # Hand-written Verilog has no waivers at all.
    assert lint_verilator(make_unit("compare"), name="fp32_compare", extra_sources=[WRAPPER],
                          top="fp32_stream_tb", defines={"DUT": "fp32_compare"},
                          parameters={"OUT_W": OUT_WIDTH["compare"]}) == ""


def test_lint_reports_unwaived_warnings(tmp_path):
    # Hand-written Verilog gets no waivers: an unused input must be reported.
    bad = tmp_path / "unused_input.v"
    bad.write_text("module unused_input(input wire a, input wire b, output wire y);\n"
                   "  assign y = a;\nendmodule\n")
    with pytest.raises(LintError, match="UNUSEDSIGNAL"):
        lint_verilator(None, name="unused_input", extra_sources=[bad])


def test_build_is_reused():
    first = build_unit("add")
    again = build_unit("add")
    assert again.reused and again.build_dir == first.build_dir
    assert (first.build_dir / "amaranth" / "fp32_add.v").is_file()


def test_build_failure_is_reported(tmp_path):
    broken = tmp_path / "broken.v"
    broken.write_text("module broken(input wire a);\n  assign b = ;\nendmodule\n")
    with pytest.raises(SimulationError, match="Verilator build of 'broken' failed"):
        build_verilator(None, name="broken", extra_sources=[broken], root=tmp_path / "sim")


def test_build_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="Verilog identifier"):
        build_verilator(make_unit("mul"), name="fp32-mul")
    with pytest.raises(ValueError, match="does not exist"):
        build_verilator(None, name="x", extra_sources=[tmp_path / "missing.v"])
    with pytest.raises(ValueError, match="nothing to build"):
        build_verilator(None, name="x")
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    for sub in ("one", "two"):
        (tmp_path / sub / "same.v").write_text("module same; endmodule\n")
    with pytest.raises(ValueError, match="two extra sources are called 'same.v'"):
        build_verilator(None, name="x", extra_sources=[tmp_path / "one" / "same.v",
                                                       tmp_path / "two" / "same.v"])


def test_toolchain_env_applies_and_restores_the_wheel_fixes():
    import os
    import shutil
    before = dict(os.environ)
    with toolchain_env():
        verilator = Path(shutil.which("verilator"))
        assert verilator.parent.name == "bin" and verilator.parent.parent.name == "verilator"
        assert "CFG_CXXFLAGS_PCH_I=-include" in os.environ["MAKEFLAGS"]
        assert Path(shutil.which("python")).parent == Path(sys.executable).parent
    assert dict(os.environ) == before


def test_component_ports_skip_constants():
    ports = component_ports(make_unit("mul"))
    assert sorted(ports) == ["i__payload", "i__valid", "o__payload", "o__valid"]


def main(argv=None):
    """Run :func:`run_fp32_sweep` for the chosen units and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--unit", choices=[*UNITS, "all"], default="all")
    parser.add_argument("--pairs", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--uniform", action="store_true",
                        help="uniformly random bit patterns instead of edge cases + classes")
    args = parser.parse_args(argv)
    failed = False
    for unit in (UNITS if args.unit == "all" else (args.unit,)):
        report = run_fp32_sweep(unit, args.pairs, args.seed, uniform=args.uniform)
        print(report, flush=True)
        failed |= report["mismatches"] > 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
