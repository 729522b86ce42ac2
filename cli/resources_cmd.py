"""``ttrain resources``: does a preset fit the Alveo U50? Memory map and logic estimate.

Argument parsing and printing only; the report is :func:`ttrain.platforms.resources.
build_report` (memory map from :mod:`ttrain.platforms.memory`, logic from Yosys).
"""

import json
import sys

from .platforms.memory import SIZE_SOURCES
from .platforms.resources import SYNTH_MODES, build_report

__all__ = ["format_report", "register"]


def _pct(used, cap):
    return f"{100 * used / cap:5.1f}%"


def format_report(rep):
    """Return the human-readable text of a report from :func:`build_report`."""
    cap = rep["capacity"]
    out = [f"config {rep['config']} on the Alveo U50 ({rep['part']}), {rep['lanes']} lanes, "
           f"{rep['banks']} banks per store -- ESTIMATES (no Vivado run)", "",
           "Memory map (stores from " + ("the whole-model compiler's memory map" if
                                          rep.get("sizes_from") == "compiler" else
                                          "`ttrain plan` on-chip bytes")
           + "; BankedStore.mapping rules):"]
    head = (f"{'store':<8} {'words':>11} {'MB':>8} {'rows/bank':>10} {'style':<6} "
            f"{'RAMB36':>7} {'RAMB18':>7} {'URAM288':>8}")
    entries = [("default mapping (style auto)", rep["memory_map"]["auto"])]
    if rep["memory_map"]["best"] != rep["memory_map"]["auto"]:
        entries.append(("the default does not fit; per-store mapping that fits with the most "
                        "left (Accelerator store_style=)", rep["memory_map"]["best"]))
    for label, entry in entries:
        if entry is None:
            out += ["", f"{label}: no BRAM/URAM assignment of the stores fits"]
            continue
        out += ["", f"{label}:", head, "-" * len(head)]
        for s in entry["stores"]:
            out.append(f"{s['name']:<8} {s['words']:>11,} {s['bytes'] / 1e6:8.3f} "
                       f"{s['bank_depth']:>10,} {s['style']:<6} {s['ramb36']:>7} "
                       f"{s['ramb18']:>7} {s['uram288']:>8}")
        t = entry["total"]
        out.append(f"{'total':<8} {t['words']:>11,} {t['bytes'] / 1e6:8.3f} {'':>10} {'':<6} "
                   f"{t['ramb36']:>7} {t['ramb18']:>7} {t['uram288']:>8}")
        lf = entry["left"]
        out.append(f"left on the U50: {lf['ramb36_equiv']:g} of {cap['ramb36']} RAMB36 "
                   f"(equivalents), {lf['uram288']} of {cap['uram288']} URAM288"
                   + ("" if entry["fits"] else "  -> DOES NOT FIT"))
    logic = rep["logic"]
    if logic:
        out += ["", "Logic (Yosys synth_xilinx -family xcup of the accelerator "
                    + ("top's parts" if logic.get("by_part") else "top")
                    + ", stores as black boxes; estimate"
                    + (", cached" if logic.get("cached") else "") + "):",
                f"  method: {logic['method']}"]
        for k, label in (("lut", "LUT"), ("ff", "FF"), ("dsp48e2", "DSP48E2"),
                         ("ramb36", "RAMB36"), ("ramb18", "RAMB18"), ("uram288", "URAM288")):
            out.append(f"  {label:<8} {logic[k]:>9,}  {_pct(logic[k], cap[k])} of "
                       f"{cap[k]:,}")
        out.append(f"  longest register-to-register path: {logic['logic_levels']} logic "
                   f"levels (LUT/MUXF/CARRY; timing proxy)"
                   + (f", in {logic['deepest_part']}" if logic.get("deepest_part") else ""))
        for unit, c in (logic.get("by_part") or {}).items():
            out.append(f"  part {logic['parts'][unit]:>3} x {unit:<14} LUT {c['lut']:>10,.0f}  "
                       f"FF {c['ff']:>9,.0f}  DSP {c['dsp48e2']:>6,.0f}")
        for k, f in (logic.get("fit") or {}).items():
            terms = " + ".join(f"{c:g} {n}" if n != "1" else f"{c:g}"
                               for n, c in f["terms"].items())
            out.append(f"  fit {k}: {terms}; residuals at the points {f['residuals']}")
        out.append("  note: Yosys does not pack pipeline registers into DSP48E2s, so FF/LUT "
                   "around the multipliers are pessimistic")
        t = rep["total"]
        out += ["", f"Total (stores + logic): LUT {_pct(t['lut'], cap['lut'])}, FF "
                    f"{_pct(t['ff'], cap['ff'])}, DSP {_pct(t['dsp48e2'], cap['dsp48e2'])}, "
                    f"BRAM {_pct(t['ramb36_equiv'], cap['ramb36'])}, URAM "
                    f"{_pct(t['uram288'], cap['uram288'])}"]
    out.append("")
    out.append("fits the U50: " + ("yes" if rep["fits"] else "NO") + " (estimate)")
    return "\n".join(out)


def _run(args):
    log = (lambda msg: print(msg, file=sys.stderr, flush=True)) if not args.json else None
    rep = build_report(args.config, lanes=args.lanes, banks=args.banks,
                       synth="none" if args.no_synth else args.synth, cache_dir=args.cache_dir,
                       timeout=args.synth_timeout, log=log, sizes_from=args.sizes,
                       vector_width=args.vector_width, special_lanes=args.special_lanes,
                       special_full=args.special_full)
    if args.json:
        print(json.dumps(rep, indent=1))
    else:
        print(format_report(rep))
    return 0


def register(sub):
    from .golden.config import preset_names
    p = sub.add_parser(
        "resources", help="U50 fit of a preset: store memory map and a Yosys logic estimate",
        description="Estimate whether a preset fits the Alveo U50 (no Vivado): the four stores "
                    "sized by the whole-model compiler's memory map (or `ttrain plan`'s "
                    "on-chip bytes with --sizes plan) and mapped to RAMB36/RAMB18/"
                    "URAM288 (and, if the default mapping does not fit, the per-store mapping "
                    "that does), plus a Yosys synth_xilinx estimate of the accelerator's logic "
                    "(LUT, FF, DSP48E2, RAMs, logic levels). Presets: "
                    + ", ".join(preset_names()) + ".")
    p.add_argument("--config", required=True, metavar="NAME", help="preset name")
    p.add_argument("--lanes", type=int, default=8, metavar="P",
                   help="contraction-engine lanes (power of two; default 8)")
    p.add_argument("--banks", type=int, default=None, metavar="B",
                   help="banks per store (power of two; default = lanes)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--sizes", choices=list(SIZE_SOURCES), default="compiler",
                   help="store sizes from the compiled training-step program (default) or "
                        "from the memory plan")
    p.add_argument("--vector-width", type=int, default=None, metavar="V",
                   help="vector and update units' lanes (power of two up to --lanes; with "
                        "--synth full or fit; default = lanes)")
    p.add_argument("--special-lanes", type=int, default=None, metavar="S",
                   help="special-function units side by side (power of two up to the "
                        "vector lanes; with --synth fit (default 1) or composed (16))")
    p.add_argument("--special-full", type=int, default=None, metavar="F",
                   help="how many of the --special-lanes units have every special function "
                        "(power of two; default all): the others are GELU/GELU'-only units, "
                        "synthesized alone too (`ttrain bench step --special-full`; with "
                        "--synth fit, or composed: its 4)")
    p.add_argument("--synth", choices=list(SYNTH_MODES), default="auto",
                   help="logic estimate: full synthesis of the top, scaled (1- and 2-lane "
                        "tops extrapolated linearly to --lanes: LUTs a lower bound), fit (2-, "
                        "4- and 8-lane tops with lane groups fitted, LUT quadratic; ~30 min of "
                        "Yosys the first time, cached), composed (the 256-lane wide machine of "
                        "`ttrain bench step --lanes 256` from its separately synthesized "
                        "parts: engine core at 32 and 64 lanes, Omega ports, FP32 units, "
                        "vector unit at 8 and 16 lanes, special-function unit, sequencer; ~60 "
                        "min of Yosys the first time, cached), none, or auto (full up to 2 "
                        "lanes, composed at 256, else scaled; default)")
    p.add_argument("--no-synth", action="store_true",
                   help="memory map only (same as --synth none)")
    p.add_argument("--cache-dir", default="build/resources", metavar="DIR",
                   help="Yosys build folder and result cache (default build/resources)")
    p.add_argument("--synth-timeout", type=float, default=1800, metavar="S",
                   help="seconds Yosys may run (default 1800)")
    p.set_defaults(func=_run)
