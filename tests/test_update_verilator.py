# amaranth: UnusedElaboratable=no
"""Update pipeline and region sweeper under Verilator, bit for bit against golden.

Simulation-only wrappers keep Python off the per-cycle path: ``testbench/update_stream_tb.v``
streams ``(theta, grad, lr)`` triples from a ``$readmemh`` file into :class:`UpdatePipeline`
with pseudo-random idle cycles and ``o.ready`` stalls and dumps the results;
``testbench/update_sweep_tb.v`` holds two stores, runs a list of :class:`RegionSweeper`
commands and dumps both stores and a status word per command. cocotb
(``tests/cocotb/tb_update.py``) only starts them and awaits ``done``; the results are compared
with :mod:`ttrain.golden.update` in NumPy.

Command-line sweep (figures in ``docs/update-pipeline.md``)::

    .venv/bin/python tests/test_update_verilator.py --pairs 250000 --seed 1
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pytest

_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:                      # when run as a script
    sys.path.insert(0, str(_HERE))

from test_update_sim import assert_update_equal, int_operands, update_operands  # noqa: E402

from ttrain.golden.update import int_sgd_update, sweep_region  # noqa: E402
from ttrain.rtl.update import IntUpdatePipeline, RegionSweeper, UpdatePipeline  # noqa: E402
from ttrain.platforms.sim.verilator import (build_verilator, lint_verilator,  # noqa: E402
                                            run_cocotb)
from ttrain.testbench import TESTBENCH_DIR  # noqa: E402

COCOTB_DIR = _HERE / "cocotb"
STREAM_TB = TESTBENCH_DIR / "update_stream_tb.v"
INT_STREAM_TB = TESTBENCH_DIR / "update_int_stream_tb.v"
#: Integer configuration under Verilator (the simulator tests cover every rounding mode).
INT_CONFIG = {"bits": 8, "grad_bits": 32, "mult_bits": 16, "mode": "HALF_EVEN"}
SWEEP_TB = TESTBENCH_DIR / "update_sweep_tb.v"
#: Most triples one stream run takes (the wrapper's memory depth).
DEPTH = 1 << 18
#: Store sizes of the sweep wrapper (different on purpose: the region must fit both).
PDEPTH, GDEPTH = 1024, 1000
#: -Wall, except DECLFILENAME: Amaranth writes every submodule of a design into the one
#: ``<name>.v`` as ``\\<name>.<sub>`` modules, which can never match the file name. (It belongs
#: in ``platforms/sim/waivers.vlt`` for ``*/amaranth/*.v``; that file is not ours to edit.)
LINT_FLAGS = ("-Wall", "-Wno-DECLFILENAME")


def _write_hex(path, words, digits):
    path.write_text("\n".join(f"{int(w):0{digits}x}" for w in words) + "\n")


def _read_hex(path, count):
    words = [int(ln, 16) for ln in path.read_text().split()
             if not ln.startswith(("//", "@"))]
    if len(words) != count:
        raise AssertionError(f"{path} holds {len(words)} words, expected {count}")
    return words


def build_stream():
    """Build (or reuse) the streaming simulation of :class:`UpdatePipeline`."""
    return build_verilator(UpdatePipeline(), name="update_pipeline", extra_sources=[STREAM_TB],
                           toplevel="update_stream_tb", defines={"DUT": "update_pipeline"},
                           parameters={"DEPTH": DEPTH})


def build_sweep():
    """Build (or reuse) the sweep simulation of :class:`RegionSweeper` with two stores."""
    return build_verilator(RegionSweeper(param_depth=PDEPTH, grad_depth=GDEPTH),
                           name="region_sweeper", extra_sources=[SWEEP_TB],
                           toplevel="update_sweep_tb", defines={"DUT": "region_sweeper"},
                           parameters={"PDEPTH": PDEPTH, "GDEPTH": GDEPTH})


def stream_pipeline(theta, grad, lr, *, work_dir, gap=4, stall=6, max_cycles=None,
                    timeout=300):
    """Run the triples through the pipeline under Verilator; return ``(theta', grad')``.

    ``gap``/``stall`` are the idle-input and ``o.ready``-low probabilities in 16ths.
    """
    count = len(theta)
    if not 1 <= count <= DEPTH:
        raise ValueError(f"stream between 1 and {DEPTH} triples per run, not {count}")
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    operands, results = work_dir / "operands.hex", work_dir / "results.hex"
    words = (np.asarray(lr, np.uint64).astype(object) << 64
             | np.asarray(grad, np.uint64).astype(object) << 32
             | np.asarray(theta, np.uint64).astype(object))
    _write_hex(operands, words, 24)
    results.unlink(missing_ok=True)
    env = {"UPDATE_EXPECT": count, "UPDATE_TIMEOUT_CYCLES": 20 * count + 1000}
    if max_cycles is not None:
        env["UPDATE_MAX_CYCLES"] = max_cycles
    run_cocotb(build_stream(), "tb_update", testcase="stream", test_dir=work_dir,
               module_dirs=[COCOTB_DIR], extra_env=env, timeout=timeout,
               plusargs=[f"+OPERANDS={operands}", f"+RESULTS={results}", f"+PAIRS={count}",
                         f"+GAP={gap}", f"+STALL={stall}"])
    out = np.array(_read_hex(results, count), dtype=np.uint64)
    return (out & np.uint64(0xFFFFFFFF)).astype(np.uint32), (out >> np.uint64(32)).astype(
        np.uint32)


def stream_int_pipeline(theta, grad, mult, shift, *, work_dir, gap=4, stall=6, timeout=300):
    """Run integer pairs through :class:`IntUpdatePipeline` (:data:`INT_CONFIG`) under
    Verilator; return ``(theta', grad')`` as int64 arrays."""
    count = len(theta)
    if not 1 <= count <= 1 << 16:
        raise ValueError(f"stream between 1 and 65536 pairs per run, not {count}")
    bits, gb = INT_CONFIG["bits"], INT_CONFIG["grad_bits"]
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    operands, results = work_dir / "operands.hex", work_dir / "results.hex"
    m32 = 0xFFFFFFFF
    _write_hex(operands, [(int(s) & m32) << 96 | (int(m) & m32) << 64 | (int(g) & m32) << 32
                          | (int(t) & m32) for t, g, m, s in zip(theta, grad, mult, shift)], 32)
    build = build_verilator(
        IntUpdatePipeline(**INT_CONFIG), name="int_update_pipeline",
        extra_sources=[INT_STREAM_TB], toplevel="update_int_stream_tb",
        defines={"DUT": "int_update_pipeline"},
        parameters={"BITS": bits, "GRAD_BITS": gb, "MULT_BITS": INT_CONFIG["mult_bits"]})
    run_cocotb(build, "tb_update", testcase="stream", test_dir=work_dir,
               module_dirs=[COCOTB_DIR], timeout=timeout,
               extra_env={"UPDATE_EXPECT": count, "UPDATE_TIMEOUT_CYCLES": 20 * count + 1000},
               plusargs=[f"+OPERANDS={operands}", f"+RESULTS={results}", f"+PAIRS={count}",
                         f"+GAP={gap}", f"+STALL={stall}"])

    def signed(value, width):
        return value - (1 << width) if value >> (width - 1) else value

    words = _read_hex(results, count)
    return (np.array([signed(w & ((1 << bits) - 1), bits) for w in words], np.int64),
            np.array([signed(w >> bits, gb) for w in words], np.int64))


def sweep_commands(params, grads, commands, *, work_dir, timeout=120):
    """Run sweep ``commands`` (``(base, length, lr)``) on the stores under Verilator.

    Returns ``(params', grads', errors, cycles)`` as arrays.
    """
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    files = {k: work_dir / f"{k}.hex" for k in ("params", "grads", "commands", "out_params",
                                                  "out_grads", "out_status")}
    _write_hex(files["params"], params, 8)
    _write_hex(files["grads"], grads, 8)
    _write_hex(files["commands"], [lr << 64 | length << 32 | base
                                   for base, length, lr in commands], 24)
    run_cocotb(build_sweep(), "tb_update", testcase="sweep", test_dir=work_dir,
               module_dirs=[COCOTB_DIR], timeout=timeout,
               extra_env={"UPDATE_EXPECT": len(commands),
                          "UPDATE_TIMEOUT_CYCLES": 4 * (PDEPTH + 40) * len(commands)},
               plusargs=[f"+{k.upper()}={v}" for k, v in files.items()]
               + [f"+NCMD={len(commands)}"])
    status = _read_hex(files["out_status"], len(commands))
    return (np.array(_read_hex(files["out_params"], PDEPTH), np.uint32),
            np.array(_read_hex(files["out_grads"], GDEPTH), np.uint32),
            np.array([s & 1 for s in status], bool), np.array([s >> 32 for s in status]))


# -- pytest ----------------------------------------------------------------------------------

def test_stream_100k_pairs_with_backpressure(tmp_path):
    # Edge cases first, then random triples (every FP32 class, lr per pair incl. 0, NaN, inf);
    # input idle 4/16 and o.ready low 6/16 of the cycles, from independent LFSRs.
    theta, grad, lr = update_operands(120_000, seed=11)
    got_theta, got_grad = stream_pipeline(theta, grad, lr, work_dir=tmp_path)
    assert_update_equal(got_theta, got_grad, theta, grad, lr)


def test_stream_full_throughput(tmp_path):
    theta, grad, lr = update_operands(20_000, seed=12, edges=False)
    latency = UpdatePipeline().latency
    # No gaps, no stalls: one pair per cycle, so done after pairs + latency (+2 start cycles).
    got_theta, got_grad = stream_pipeline(theta, grad, lr, work_dir=tmp_path, gap=0, stall=0,
                                          max_cycles=len(theta) + latency + 2)
    assert_update_equal(got_theta, got_grad, theta, grad, lr)


def test_int_stream_with_backpressure(tmp_path):
    theta, grad, mult, shift = int_operands(50_000, seed=15)
    got_theta, got_grad = stream_int_pipeline(theta, grad, mult, shift, work_dir=tmp_path)
    want = int_sgd_update(theta, grad, mult, shift, bits=INT_CONFIG["bits"],
                          mode=INT_CONFIG["mode"])
    np.testing.assert_array_equal(got_theta, want)
    assert not got_grad.any()


def _b(x):
    return int(np.array(x, dtype=np.float32).view(np.uint32))


def test_sweeper_regions(tmp_path):
    rng = np.random.default_rng(13)
    theta, grad, _ = update_operands(PDEPTH + GDEPTH, seed=14)
    params, grads = theta[:PDEPTH], grad[PDEPTH:]
    commands = [(10, 300, _b(0.01)), (0, 0, _b(1.0)), (500, 200, 0), (900, 101, _b(0.5)),
                (990, 10, _b(-0.125)), (700, 1, 0x7FC00000), (1000, 0, _b(1.0)),
                (1001, 0, _b(1.0)), (0, GDEPTH, _b(2.0 ** -10))]
    for _ in range(6):
        base = int(rng.integers(0, GDEPTH))
        commands.append((base, int(rng.integers(0, GDEPTH - base + 1)),
                         int(rng.choice([_b(0.03), _b(1e-6), 0x80000000, 0x00000001]))))
    got_p, got_g, errors, cycles = sweep_commands(params, grads, commands, work_dir=tmp_path)
    want_p, want_g = params, grads
    sweeper = RegionSweeper(param_depth=PDEPTH, grad_depth=GDEPTH)
    for k, (base, length, lr) in enumerate(commands):
        want_p, want_g, want_err = sweep_region(want_p, want_g, base, length, lr)
        assert errors[k] == want_err, commands[k]
        assert cycles[k] == (1 if want_err else sweeper.cycles(length)), commands[k]
    assert errors.tolist()[3] and errors.tolist()[7] and not errors.tolist()[6]
    # Every word of both stores: regions updated and zeroed, everything else untouched.
    np.testing.assert_array_equal(got_p, want_p)
    np.testing.assert_array_equal(got_g, want_g)


def test_lint_components():
    assert lint_verilator(UpdatePipeline(), name="update_pipeline", flags=LINT_FLAGS) == ""
    assert lint_verilator(RegionSweeper(param_depth=PDEPTH, grad_depth=GDEPTH),
                          name="region_sweeper", flags=LINT_FLAGS) == ""
    assert lint_verilator(IntUpdatePipeline(), name="int_update_pipeline") == ""


def test_lint_wrappers():
    # Hand-written Verilog gets no waivers at all.
    assert lint_verilator(UpdatePipeline(), name="update_pipeline", extra_sources=[STREAM_TB],
                          top="update_stream_tb", defines={"DUT": "update_pipeline"},
                          flags=LINT_FLAGS) == ""
    assert lint_verilator(RegionSweeper(param_depth=PDEPTH, grad_depth=GDEPTH),
                          name="region_sweeper", extra_sources=[SWEEP_TB],
                          top="update_sweep_tb", defines={"DUT": "region_sweeper"},
                          parameters={"PDEPTH": PDEPTH, "GDEPTH": GDEPTH},
                          flags=LINT_FLAGS) == ""
    assert lint_verilator(IntUpdatePipeline(**INT_CONFIG), name="int_update_pipeline",
                          extra_sources=[INT_STREAM_TB], top="update_int_stream_tb",
                          defines={"DUT": "int_update_pipeline"}) == ""


def main(argv=None):
    """Stream ``--pairs`` triples through the pipeline under back-pressure; print figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=250_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    import tempfile
    mismatches = 0
    t0 = time.perf_counter()
    theta, grad, lr = update_operands(args.pairs, seed=args.seed)
    with tempfile.TemporaryDirectory(prefix="update-sweep-") as tmp:
        for start in range(0, args.pairs, DEPTH):
            sl = slice(start, start + DEPTH)
            gt, gg = stream_pipeline(theta[sl], grad[sl], lr[sl],
                                     work_dir=Path(tmp) / f"run{start // DEPTH}")
            try:
                assert_update_equal(gt, gg, theta[sl], grad[sl], lr[sl])
            except AssertionError as exc:
                print(exc)
                mismatches += 1
    print({"pairs": args.pairs, "seed": args.seed, "failed_runs": mismatches,
           "seconds": round(time.perf_counter() - t0, 1)})
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
