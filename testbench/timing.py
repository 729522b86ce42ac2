"""Benchmark: logic depth per unit (Yosys ``synth_xilinx -family xcup``), the timing proxy.

Each unit is synthesized on its own with :func:`ttrain.platforms.resources.synth_component`
(stores as black boxes; a unit's ports start and end paths) and reported with its LUT, FF and
DSP48E2 counts and its longest register-to-register path in logic levels (LUT, MUXF, CARRY4,
INV: one level each, so a carry chain is one level per 4 bits). The target is at most
:data:`MAX_LEVELS` levels per unit (``docs/u50.md``, "Logic depth per unit")::

    .venv/bin/python -m ttrain.testbench.timing --unit sequencer
    .venv/bin/python -m ttrain.testbench.timing --unit all --json build/timing/units.json

One Yosys run at a time (2-core machine); ``special`` is the largest (~58k LUT, minutes).
"""

import argparse
import json
import sys
from pathlib import Path

from ..platforms.units import COMPOSED, MAX_LEVELS, UNITS, build_unit, compose, measure

__all__ = ["COMPOSED", "MAX_LEVELS", "UNITS", "build_unit", "compose", "main", "measure"]


def _path_text(path):
    out, prev, n = [], None, 0
    for cell in path + [None]:
        if cell is not None and cell == prev:
            n += 1
            continue
        if prev is not None:
            out.append(f"{n} {prev}" if n > 1 else prev)
        prev, n = cell, 1
    return ", ".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m ttrain.testbench.timing",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--unit", action="append", required=True,
                    help=f"unit to synthesize (repeatable; 'all' for every one): "
                         f"{', '.join(UNITS)}; or a unit composed of units: "
                         f"{', '.join(COMPOSED)}")
    ap.add_argument("--work-dir", default="build/timing")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--over", type=int, default=MAX_LEVELS, metavar="N",
                    help=f"list every register reached in more than N levels (default "
                         f"{MAX_LEVELS}, the goal)")
    ap.add_argument("--keep-netlist", action="store_true",
                    help="leave WORK_DIR/UNIT/netlist.json (Yosys write_json) to trace a path")
    ap.add_argument("--show", type=int, default=40, metavar="K",
                    help="print at most K of those registers (all go to --json)")
    args = ap.parse_args(argv)
    bad = [u for u in args.unit if u != "all" and u not in UNITS and u not in COMPOSED]
    if bad:
        ap.error(f"unknown --unit {bad[0]!r}; choose from all, "
                 f"{', '.join([*UNITS, *COMPOSED])}")
    names = list(UNITS) if "all" in args.unit else args.unit
    rows = []
    for name in names:
        r = measure(name, work_dir=args.work_dir, timeout=args.timeout, over=args.over,
                    keep_netlist=args.keep_netlist,
                    log=lambda msg: print(msg, file=sys.stderr, flush=True))
        rows.append(r)
        mark = "ok" if r["logic_levels"] <= MAX_LEVELS else f"> {MAX_LEVELS}"
        print(f"{name:16s} LUT {r['lut']:6d}  FF {r['ff']:6d}  DSP {r['dsp48e2']:3d}  "
              f"levels {r['logic_levels']:3d} ({mark})  {r['seconds']:.0f} s\n"
              f"{'':16s} path: {_path_text(r['critical_path'])}\n"
              f"{'':16s} from {' to '.join(r['critical_nets']) or '-'}"
              + ("" if "parts" not in r else f"\n{'':16s} parts (estimate): " + ", ".join(
                  f"{n} x {u}" for u, n in r["parts"].items() if u != "core")
                 + f", the core fitted (deepest: {r['deepest_part']})"),
              flush=True)
        if r["deep"]:
            print(f"{'':16s} {len(r['deep'])} registers over {args.over} levels:")
            for lv, reg, src in r["deep"][:args.show]:
                print(f"{'':18s}{lv:3d}  {reg}  (from {src})")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0 if all(r["logic_levels"] <= MAX_LEVELS for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
