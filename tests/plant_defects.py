"""Plant one-line RTL defects in a scratch copy and run the random-program tests against each.

Not a test module (pytest collects ``test_*.py`` only): a tool that proves the constrained-
random tests have teeth (``docs/verification.md`` has the table it printed). For every defect
of :data:`DEFECTS` it builds an overlay package in a temporary folder — ``ttrain`` from
``git archive HEAD`` (``--ref``), so edits in progress in the working tree do not leak in
(a ``sitecustomize`` removes the editable install's finder, which would serve missing
modules from the working tree) —
replaces exactly one line of source in the copy, and runs the chosen test files from a copy of ``tests/`` with ``PYTHONPATH``
pointing at the overlay (which wins over the editable install) and ``TTRAIN_SIM_BUILD`` at a
scratch build root, so the checkout, its builds and other sessions are never touched. The
unmodified overlay is run first: every test must pass there.

    .venv/bin/python tests/plant_defects.py [--only NAME ...] [--tests FILE ...] [--keep DIR]
                                            [--ref COMMIT] [--no-baseline]

Prints one line per defect: its name, the failed tests (``caught``) or ``MISSED``, seconds.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SIM = ["tests/test_random_sequencer_sim.py", "tests/test_random_fp32_sim.py"]
TOP = ["tests/test_random_programs_verilator.py"]

#: (name, file, old text, new text, test files): each replaces one line (``old`` must occur
#: exactly once in the file).
DEFECTS = [
    ("scoreboard: no WAR check", "rtl/sequencer.py",
     '& (write[s] | r["write"]) & (base[s] <= r["hi"])',
     '& r["write"] & (base[s] <= r["hi"])', SIM[:1] + TOP),
    ("scoreboard: no RAW check", "rtl/sequencer.py",
     '& (write[s] | r["write"]) & (base[s] <= r["hi"])',
     '& write[s] & (base[s] <= r["hi"])', SIM[:1] + TOP),
    ("scoreboard: no WAW check", "rtl/sequencer.py",
     '& (write[s] | r["write"]) & (base[s] <= r["hi"])',
     '& (write[s] ^ r["write"]) & (base[s] <= r["hi"])', SIM[:1] + TOP),
    ("scoreboard: UPDATE's gradient slot not a write", "rtl/sequencer.py",
     'm.d.comb += [s_used[0].eq(1), s_used[1].eq(1), s_write[1].eq(1)]',
     'm.d.comb += [s_used[0].eq(1), s_used[1].eq(1)]', SIM[:1] + TOP),
    ("scoreboard: interval end is the base (one word)", "rtl/sequencer.py",
     'rec[u][s]["lo"].eq(base[s]), rec[u][s]["hi"].eq(last[s])]',
     'rec[u][s]["lo"].eq(base[s]), rec[u][s]["hi"].eq(base[s])]', SIM[:1] + TOP),
    ("END/BARRIER do not wait for the units", "rtl/sequencer.py",
     'with m.Elif(~any_inflight):\n                            m.d.sync += self.executed',
     'with m.Elif(1):\n                            m.d.sync += self.executed', SIM[:1] + TOP),
    ("verified program stays verified after an instruction write", "rtl/sequencer.py",
     'm.d.sync += verified.eq(0)', 'm.d.sync += verified.eq(verified)',
     ["tests/test_sequencer_sim.py"]),
    ("check passes skipped whatever the run's length", "rtl/sequencer.py",
     'verified & (self.length == verified_len) & ~self.imem_we',
     'verified & ~self.imem_we', ["tests/test_sequencer_sim.py"]),
    ("check pass: no ERR_B_RANGE for CONTRACT", "rtl/sequencer.py",
     '                                               (~in_range[2], ERR_B_RANGE),\n', '',
     SIM[:1] + TOP),
    ("check pass: no ERR_B_RANGE for vector ops", "rtl/sequencer.py",
     '(used[2] & ~in_range[2], ERR_B_RANGE)])', '])', SIM[:1] + TOP),
    ("check pass: last word may be one past the store", "rtl/sequencer.py",
     'lt = [last[s][0:32] < self._sizes[STORE_NAMES[i]]',
     'lt = [last[s][0:32] <= self._sizes[STORE_NAMES[i]]', SIM[:1] + TOP),
    ("engine: fresh sum starts from +0.0", "rtl/engine.py",
     '                       Mux(int_on, 0, NEG_ZERO))',
     '                       Mux(int_on, 0, 0))', TOP),
    ("multiplier: sticky of the subnormal shift dropped", "rtl/fp32.py",
     's4_norm[0:23].any() | (s4_right & s4_right_ext[0:64].any()))',
     's4_norm[0:23].any())', SIM[1:] + TOP),
    ("rounding: sticky ignored (ties to even on G only)", "rtl/fp32.py",
     'round_up = guard & (sticky | sig[0])', 'round_up = guard & sig[0]', SIM[1:] + TOP),
    ("adder: round bit dropped from the sticky", "rtl/fp32.py",
     's5_sticky = _reg(m, 1, "s5_sticky", s4_norm[0:3].any())',
     's5_sticky = _reg(m, 1, "s5_sticky", s4_norm[0:2].any())', SIM[1:] + TOP),
    ("special: subnormal exponent off by one in split", "rtl/special.py",
     'e = self._int(Mux(normal, field - 127, -127 - lz), a.t)',
     'e = self._int(Mux(normal, field - 127, -126 - lz), a.t)',
     ["tests/test_random_special_sim.py"] + TOP),
]


def overlay(root, ref="HEAD"):
    """Create the overlay package and test copy under ``root`` from commit ``ref`` (a
    consistent snapshot even while the working tree is being edited); return the env."""
    src = root / "src"
    src.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref, "cli", "golden", "rtl",
                              "platforms", "testbench", "tests", "pyproject.toml"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    pkg = root / "ttrain"
    shutil.copytree(src / "cli", pkg)
    for name in ("golden", "platforms", "rtl", "testbench"):
        shutil.copytree(src / name, pkg / name)
    shutil.copytree(src / "tests", root / "tests")
    shutil.copy(src / "pyproject.toml", root / "pyproject.toml")
    # The editable install's finder would still serve modules the snapshot lacks from the
    # working tree (its parent-package fallback); drop it in every interpreter of the run.
    (root / "sitecustomize.py").write_text(
        "import sys\n"
        "sys.meta_path[:] = [f for f in sys.meta_path\n"
        "                    if getattr(f, '__name__', '') != '_EditableFinder']\n")
    env = dict(os.environ, PYTHONPATH=str(root), TTRAIN_SIM_BUILD=str(root.parent / "build"),
               AMARANTH_USE_YOSYS="builtin")
    return env


def run_tests(root, env, tests):
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
           "-rf", "--rootdir", str(root), "-c", str(root / "pyproject.toml"),
           *[str(root / t) for t in tests]]
    t0 = time.time()
    out = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    failed = sorted(set(re.findall(r"^FAILED \S+::(\S+)", out.stdout, re.M)))
    summary = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr[-400:]
    return failed, summary, time.time() - t0, out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="defect names (substrings) to plant")
    ap.add_argument("--tests", nargs="*", help="test files to run instead of each defect's")
    ap.add_argument("--keep", help="scratch folder to use and keep (default: a temporary one)")
    ap.add_argument("--no-baseline", action="store_true", help="skip the unmodified run")
    ap.add_argument("--ref", default="HEAD", help="commit to copy (default HEAD)")
    args = ap.parse_args(argv)
    scratch = Path(args.keep or tempfile.mkdtemp(prefix="ttrain-plant-")).resolve()
    scratch.mkdir(parents=True, exist_ok=True)
    chosen = [d for d in DEFECTS if not args.only or any(o in d[0] for o in args.only)]
    if not args.no_baseline:
        root = scratch / "baseline"
        shutil.rmtree(root, ignore_errors=True)
        env = overlay(root, args.ref)
        tests = args.tests or sorted({t for d in chosen for t in d[4]})
        failed, summary, secs, out = run_tests(root, env, tests)
        print(f"baseline (no defect): {summary} [{secs:.0f} s]", flush=True)
        if failed or " passed" not in summary:
            print(out.stdout[-3000:], out.stderr[-2000:])
            return 1
    rows = []
    for i, (name, fname, old, new, tests) in enumerate(chosen):
        root = scratch / f"d{i}"
        shutil.rmtree(root, ignore_errors=True)
        env = overlay(root, args.ref)
        path = root / "ttrain" / fname                 # rtl/... or testbench/... copies
        text = path.read_text()
        if text.count(old) != 1:
            print(f"{name}: the line to change occurs {text.count(old)} times in {fname}")
            return 2
        path.write_text(text.replace(old, new))
        failed, summary, secs, _ = run_tests(root, env, args.tests or tests)
        verdict = ("caught by " + ", ".join(failed)) if failed else "MISSED"
        rows.append((name, verdict, secs))
        print(f"{name}: {verdict} ({summary}) [{secs:.0f} s]", flush=True)
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    missed = [r for r in rows if r[1] == "MISSED"]
    print(f"{len(rows) - len(missed)} of {len(rows)} planted defects caught")
    return 0


if __name__ == "__main__":
    sys.exit(main())
