# amaranth: UnusedElaboratable=no
"""PRNGUnit under Verilator: millions of draws, bit for bit against :mod:`ttrain.golden.prng`.

``testbench/prng_stream_tb.v`` plays a command file into the unit with pseudo-random idle
cycles, stalls ``o.ready`` pseudo-randomly, checks every cycle that a stalled beat stays
unchanged, folds each command's words into a 64-bit checksum (``h = h * M + word``) and dumps
the checksums, the beat counts per command and the first beats' words; cocotb
(``testbench/prng_cocotb.py``) only starts it and awaits ``done``. The checksums are compared
with :func:`~ttrain.golden.prng.stream_checksum` of :func:`~ttrain.golden.prng.stream_beats`,
the dumped words with the golden words themselves.

Command-line benchmark (figures in ``docs/prng.md``)::

    .venv/bin/python tests/test_prng_verilator.py --lanes 8 --draws 50000000
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ttrain.golden.prng import stream_beats, stream_checksum
from ttrain.platforms.sim.verilator import build_verilator, lint_verilator, run_cocotb
from ttrain.rtl.prng import PRNGUnit
from ttrain.testbench import TESTBENCH_DIR

TB = TESTBENCH_DIR / "prng_stream_tb.v"
#: Most commands per run and beats dumped word by word (the bench's MAXCMD and DUMPBEATS).
MAXCMD, DUMPBEATS = 4096, 256
M32 = (1 << 32) - 1


def build(lanes):
    """Build (or reuse) the Verilator bench of a ``lanes``-lane unit."""
    name = f"prng_unit_l{lanes}"
    return build_verilator(PRNGUnit(lanes=lanes), name=name, extra_sources=[TB],
                           toplevel="prng_stream_tb", defines={"DUT": name},
                           parameters={"LANES": lanes}, public="top")


def random_commands(rng, draws, lanes, *, max_beats=1 << 15):
    """Return random commands asking for about ``draws`` words: random and consecutive seeds,
    bases anywhere (some wrapping past 2**32 - 1), a few empty and one-beat commands."""
    commands, total = [], 0
    while total * lanes < draws:
        j = len(commands)
        seed = j if j % 3 == 0 else int(rng.integers(0, 1 << 32))
        base = M32 - int(rng.integers(0, 3 * lanes)) if j % 5 == 1 else int(
            rng.integers(0, 1 << 32))
        count = (0 if j % 11 == 4 else 1 if j % 7 == 3
                 else int(rng.integers(1, max_beats + 1)))
        commands.append((seed, base, count))
        total += count
    if len(commands) > MAXCMD:
        raise ValueError(f"{len(commands)} commands: at most {MAXCMD} per run; raise max_beats")
    return commands


def run_commands(commands, lanes, *, work_dir, gap=4, stall=6, max_cycles=None, timeout=600):
    """Run ``commands`` on the Verilator bench; return ``(results, dump, cycles_file)``.

    ``results``: one ``(beats, checksum)`` per command that emitted beats, in order; ``dump``:
    the first :data:`DUMPBEATS` beats' words as a ``(beats, lanes)`` uint32 array.
    """
    work_dir = Path(work_dir).resolve()            # the simulator runs in another folder
    work_dir.mkdir(parents=True, exist_ok=True)
    files = {k: work_dir / f"{k}.hex" for k in ("commands", "results", "dump")}
    files["commands"].write_text("".join(f"{c:08x}{b:08x}{s:08x}\n" for s, b, c in commands))
    for k in ("results", "dump"):
        files[k].unlink(missing_ok=True)
    beats = sum(c for _, _, c in commands)
    env = {"PRNG_EXPECT": beats, "PRNG_TIMEOUT_CYCLES": 20 * beats + 100 * len(commands) + 1000}
    if max_cycles is not None:
        env["PRNG_MAX_CYCLES"] = max_cycles
    run_cocotb(build(lanes), "prng_cocotb", test_dir=work_dir, module_dirs=[TESTBENCH_DIR],
               extra_env=env, timeout=timeout,
               plusargs=[f"+COMMANDS={files['commands']}", f"+NCMD={len(commands)}",
                         f"+BEATS={beats}", f"+RESULTS={files['results']}",
                         f"+DUMP={files['dump']}", f"+GAP={gap}", f"+STALL={stall}"])
    results = [(int(w, 16) >> 64, int(w, 16) & ((1 << 64) - 1))
               for w in _hex_words(files["results"])]
    dump = np.array([int(w, 16) for w in _hex_words(files["dump"])], dtype=np.uint32)
    return results, dump.reshape(-1, lanes)


def _hex_words(path):
    return [w for w in path.read_text().split() if not w.startswith(("//", "@"))]


def check_against_golden(commands, lanes, results, dump):
    """Assert the bench's checksums, beat counts and dumped words equal golden's."""
    expect, first = [], []
    for seed, base, count in commands:
        if count:
            words = stream_beats(seed, base, count, lanes)
            expect.append((count, stream_checksum(words)))
            first.append(words[:DUMPBEATS])
    assert len(results) == len(expect), (
        f"{len(results)} commands ended with a last beat, {len(expect)} expected")
    for j, (got, want) in enumerate(zip(results, expect)):
        assert got == want, f"command {j} (beats, checksum): unit {got}, golden {want}"
    first = np.concatenate(first)[:DUMPBEATS]
    assert np.array_equal(dump, first), "the first beats differ from golden"


@pytest.mark.parametrize("lanes, draws", [(8, 4_000_000), (1, 1_000_000)])
def test_millions_of_draws_under_stalls(lanes, draws, tmp_path):
    commands = random_commands(np.random.default_rng(lanes), draws, lanes)
    results, dump = run_commands(commands, lanes, work_dir=tmp_path)
    assert sum(b for b, _ in results) * lanes >= draws
    check_against_golden(commands, lanes, results, dump)


def test_full_throughput_back_to_back(tmp_path):
    lanes = 8
    commands = random_commands(np.random.default_rng(3), 400_000, lanes, max_beats=4096)
    beats = sum(c for _, _, c in commands)
    empty = sum(1 for _, _, c in commands if c == 0)
    # one beat per cycle after the pipeline fills; an empty command costs one cycle
    limit = beats + empty + PRNGUnit(lanes=lanes).latency + 4
    results, dump = run_commands(commands, lanes, work_dir=tmp_path, gap=0, stall=0,
                                 max_cycles=limit)
    check_against_golden(commands, lanes, results, dump)


def test_lint_clean():
    assert lint_verilator(PRNGUnit(lanes=8), name="prng_unit") == ""


def main(argv=None):
    """Benchmark: draws per second of simulation and the golden check of a long run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", type=int, default=8)
    parser.add_argument("--draws", type=int, default=20_000_000)
    parser.add_argument("--gap", type=int, default=4)
    parser.add_argument("--stall", type=int, default=6)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work-dir", default="build/prng-bench")
    args = parser.parse_args(argv)
    if args.draws < 1:
        parser.error("--draws must be positive")
    rng = np.random.default_rng(args.seed)
    commands = random_commands(rng, args.draws, args.lanes,
                               max_beats=max(1 << 15, args.draws // args.lanes // 1000 + 1))
    build(args.lanes)
    t0 = time.time()
    results, dump = run_commands(commands, args.lanes, work_dir=args.work_dir, gap=args.gap,
                                 stall=args.stall, timeout=3600)
    t1 = time.time()
    check_against_golden(commands, args.lanes, results, dump)
    t2 = time.time()
    beats = sum(b for b, _ in results)
    print(f"{beats * args.lanes} draws ({beats} beats of {args.lanes} lanes, {len(commands)} "
          f"commands, gap {args.gap}/16, stall {args.stall}/16): simulation {t1 - t0:.1f} s "
          f"({beats * args.lanes / (t1 - t0) / 1e6:.1f} M draws/s), golden check "
          f"{t2 - t1:.1f} s: equal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
