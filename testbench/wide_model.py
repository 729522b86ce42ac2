"""Analytical lane-utilization model of the contraction engine at P lanes: the design study of
the wide engine (issue 15, ``docs/wide-engine.md``).

Takes the dynamic CONTRACT stream of a compiled training step (loops unrolled) and counts
issue cycles per descriptor under four lane mappings, each with the engine's adder latency
hidden by interleaving (an output's adder sees it at most every ``add latency + 1`` = 7
cycles) and a fixed per-descriptor fill/drain:

* ``current``: today's engine (``rtl/engine.py: issue_cycles``): tiles of ``h <= slots`` rows
  interleaved in time x ``P`` columns on the lanes, A broadcast, the better orientation;
* ``batch``: as ``current``, but when ``n < P`` several matrices of a batched descriptor sit
  side by side on the lanes (each lane group its own A word per cycle);
* ``split-k``: the reduction cut into ``s`` parts on ``s`` groups of lanes (best ``s`` per
  descriptor), then the ``s`` partial sums added in a fixed order (a changed accumulation order
  that golden would follow: ``(s - 1) m n / P`` extra cycles plus the adder chain);
* ``array``: a 2-D array of ``Pm x Pn`` lanes (best split per descriptor) fed an A vector and a
  B vector per k-step (outer products), up to 7 tiles interleaved;
* ``engine``: the lane groups as built (``rtl/engine.py`` with ``max_split = P``): the golden
  cycle model :func:`ttrain.golden.isa.engine_cycles` of the orientation and ``split``
  that :meth:`ttrain.golden.isa.Program.for_engine` picks (the fold tree's latency per
  descriptor, no extra reduction cycles: the tree is pipelined behind the write-back);

and ``best``: the best of the last three per descriptor. ``--overlap`` drops the per-descriptor
fill/drain (descriptors pipelined back to back). These rows ignore bank conflicts and operand
bandwidth (which a wide engine must provide) and the vector unit (its element count is printed
beside).

``--fetch-words W`` and/or ``--banks NB`` add the row ``machine``: the engine as built with
``W``-word operand beats and ``NB`` banks per store, each dynamic CONTRACT of the compiled
program (its real views: strides and bases) mapped by :meth:`ttrain.golden.isa.Program.
for_engine`'s rule and costed by :func:`ttrain.golden.isa.engine_cycles` with the fetch bound
and the bank conflicts (within 2% of Verilator on the paper layer's TT step at 64 lanes).

It is a model for choosing the design, not a measurement: cycle counts of the RTL come from
``ttrain bench step``.

``--row-fetch F [--k-stage K]`` (with ``--banks``) make the machine row a design study of
fetchers that are not built: one row entry per lane group for unit-stride vectors, ``F``
per-lane ports otherwise, and with ``K`` strided operands staged along k (``engine_cycles``'s
``row_fetch``/``k_stage``). ``--route omega`` (with ``--banks``; built as
``ContractionEngine(route="omega")``): every engine vector whole through an Omega port from
its lanes to the banks (``engine_cycles``'s ``route``; ``--xor-skew`` the XOR bank hash beside
it); ``--route omega-shared`` the study of one read port shared by A, B and old C.

``python -m ttrain.testbench.wide_model --config paper-l1 [--lanes 8,64,256] [--fetch-words W]
[--banks NB] [--bank-skew | --xor-skew] [--row-operands | --row-fetch F [--k-stage K] |
--route omega|omega-shared] [--positions P] [--order O] [--vector-width V [--special-lanes S]
[--levers]] [--engine-sums P] [--ttm-group G] [--json]``
"""

import argparse
import functools
import json
import math
from collections import Counter, defaultdict

__all__ = ["MAPPINGS", "step_descriptors", "cycles", "machine_cycles", "study",
           "vector_cycles", "vector_study", "walk_study"]

ADD_INTERLEAVE = 7          # adder latency 6 + 1: the minimum distance between an output's adds
OVERHEAD = 27               # rtl/engine.py overhead_cycles: check, first fetch, pipeline, done
SLOTS = 16
#: The machines of ``walk_study(levers=True)`` beside the one as built (their labels).
LEVERS = {"no_descriptor_cost": "design study, not built: every CONTRACT without its fill, "
                                "fold and edge cycles",
          "two_read_streams": "built (--vector-reads 2): the vector unit reading both "
                              "sources of a beat in one request",
          "both": "both of these"}
MAPPINGS = ("current", "batch", "split-k", "array", "engine")


def _cdiv(a, b):
    return -(-a // b)


def _engine_cycles(m, n, k, b, P, ov, split=1):
    """The engine's own cycle model (golden.isa.engine_cycles) of one orientation, its fixed
    fill and drain replaced by ``ov``."""
    from ..golden.contract import Descriptor, View
    from ..golden.isa import engine_cycles
    v = View("s", 0, 1, 1)
    return engine_cycles(Descriptor(m, n, k, v, v, v, batch=b, split=split), P, SLOTS) \
        - OVERHEAD + ov


def _current(m, n, k, b, P, ov):
    return min(_engine_cycles(m, n, k, b, P, ov), _engine_cycles(n, m, k, b, P, ov))


def _batch(m, n, k, b, P, ov):
    best = None
    for mm, nn in ((m, n), (n, m)):
        g = max(1, min(b, P // nn)) if nn < P else 1
        mt = _cdiv(mm, SLOTS)
        h = _cdiv(mm, mt)
        cyc = _cdiv(b, g) * mt * _cdiv(nn * g, P) * k * max(h, ADD_INTERLEAVE) + ov
        best = cyc if best is None else min(best, cyc)
    return best


def _split_k(m, n, k, b, P, ov):
    best = _current(m, n, k, b, P, ov)
    s = 2
    while s <= k and s <= P:
        cyc = (_current(m, n * s, _cdiv(k, s), b, P, ov) + _cdiv(b * m * n * (s - 1), P)
               + ADD_INTERLEAVE * int(math.log2(s)))
        best = min(best, cyc)
        s *= 2
    return best


def _array(m, n, k, b, P, ov):
    best = None
    pm = 1
    while pm <= P:
        pn = P // pm
        for mm, nn in ((m, n), (n, m)):
            tiles = b * _cdiv(mm, pm) * _cdiv(nn, pn)
            inter = min(tiles, ADD_INTERLEAVE)
            cyc = _cdiv(tiles, inter) * k * max(inter, ADD_INTERLEAVE) + ov
            best = cyc if best is None else min(best, cyc)
        pm *= 2
    return best


def _engine(m, n, k, b, P, ov):
    from ..golden.contract import Descriptor, View
    from ..golden.isa import best_split
    v = View("s", 0, 1, 1)
    return min(_engine_cycles(mm, nn, k, b, P, ov,
                              best_split(Descriptor(mm, nn, k, v, v, v, batch=b), P, SLOTS,
                                         P).split)
               for mm, nn in ((m, n), (n, m)))


_FN = {"current": _current, "batch": _batch, "split-k": _split_k, "array": _array,
       "engine": _engine}


def cycles(desc, P, mapping, overlap=False):
    """Model cycles of one descriptor ``(m, n, k, batch)`` at ``P`` lanes."""
    ov = 0 if overlap else OVERHEAD
    if mapping == "best":
        return min(_FN[k](*desc, P, ov) for k in ("batch", "split-k", "array"))
    return _FN[mapping](*desc, P, ov)


def _program(config, compile_kw=None):
    from ..golden import config as C
    from ..golden.model_compiler import compile_model
    return compile_model(C.get_config(config), **(compile_kw or {})).program


def step_descriptors(config, compile_kw=None):
    """``(descriptors, vector elements, vector instructions)`` of the compiled training step of
    ``config`` (loops unrolled; ``compile_kw``: :func:`compile_model` options such as
    ``positions`` and ``order``)."""
    from ..golden.interpreter import dynamic_stream
    from ..golden.isa import Contract, Elementwise, Gather, Reduce, Update
    prog = _program(config, compile_kw)
    descs, vec, nvec = [], 0, 0
    for _, ins in dynamic_stream(prog.instructions):
        if isinstance(ins, Contract):
            d = ins.desc
            descs.append((d.m, d.n, d.k, d.batch))
        elif isinstance(ins, (Elementwise, Reduce, Gather)):
            vec += ins.rows * ins.cols
            nvec += 1
        elif isinstance(ins, Update):
            vec += ins.count
            nvec += 1
    return descs, vec, nvec


def machine_cycles(config, lanes, *, fetch_words=None, banks=None, bank_skew=False,
                   slots=SLOTS, row_fetch=None, k_stage=None, detail=None, compile_kw=None,
                   row_operands=False, route=None):
    """Model cycles of the compiled step of ``config`` on the engine as built (``max_split =
    lanes``, ``fetch_words``, ``banks``): every dynamic CONTRACT with its own views, mapped and
    costed by golden's cycle model. Returns ``(cycles, MACs)``."""
    from ..golden.interpreter import dynamic_stream
    from ..golden.isa import Contract, engine_cycles, map_contract
    prog = _program(config, compile_kw)
    counts = Counter((ins.desc, ins.step) for _, ins in dynamic_stream(prog.instructions)
                     if isinstance(ins, Contract))
    total = macs = 0
    for (desc, step), n in counts.items():
        machine = {"fetch_words": fetch_words, "banks": banks, "bank_skew": bank_skew}
        if row_fetch is not None:
            machine.update(row_fetch=row_fetch, k_stage=k_stage)
        if row_operands:
            machine["row_operands"] = True
        if route is not None:
            machine["route"] = route
        d, _ = map_contract(desc, step, lanes, slots, lanes, **machine)
        cyc = engine_cycles(d, lanes, slots, **machine)
        total += n * cyc
        macs += n * desc.macs
        if detail is not None:
            detail.append((n, d, cyc))
    return total, macs


def overlap_study(config, lanes, *, banks=None, bank_skew=False, route=None, slots=SLOTS,
                  compile_kw=None):
    """What descriptor overlap could hide on the engine as built (``max_split = lanes``;
    a design study, not built): every dynamic CONTRACT of ``config``'s compiled step mapped
    and costed by golden's cycle model, split into its body and its per-descriptor terms
    (``fill + fold + edges`` of :func:`ttrain.golden.isa.engine_cycles` ``parts``). A
    CONTRACT's terms are *hideable* when its operands touch no word written since the last
    CONTRACT began, and no word that CONTRACT or the instructions between them read or write
    is written by it (the sequencer's scoreboard rule: only then could it start while the
    one before drains). Returns ``{contracts, independent, cycles, overhead, hideable,
    macs}``."""
    from ..golden.interpreter import dynamic_stream
    from ..golden.isa import Contract, engine_cycles, map_contract
    from ..golden.schedule import conflicts, extents
    prog = _program(config, compile_kw)
    machine = {"banks": banks, "bank_skew": bank_skew}
    if route is not None:
        machine["route"] = route
    memo = {}
    out = {"contracts": 0, "independent": 0, "cycles": 0, "overhead": 0, "hideable": 0,
           "macs": 0}
    since = []                       # extents of the last CONTRACT and everything after it
    for _, ins in dynamic_stream(prog.instructions):
        ext = extents(ins)
        if not isinstance(ins, Contract):
            since.extend(ext)
            continue
        key = (ins.desc, ins.step)
        if key not in memo:
            d, _ = map_contract(ins.desc, ins.step, lanes, slots, lanes, **machine)
            memo[key] = engine_cycles(d, lanes, slots, parts=True, **machine)
        p = memo[key]
        over = p["fill"] + p["fold"] + p["edges"]
        free = bool(since) and not conflicts(ext, since)
        out["contracts"] += 1
        out["independent"] += free
        out["cycles"] += over + p["body"]
        out["overhead"] += over
        out["hideable"] += over if free else 0
        out["macs"] += ins.desc.macs
        since = list(ext)
    return out


def walk_study(config, lanes, width, special_lanes=1, *, banks=None, bank_skew=False,
               route=None, slots=SLOTS, compile_kw=None, levers=False):
    """The whole step through the sequencer's issue model (:mod:`ttrain.golden.schedule`:
    in program order, one instruction per unit, the scoreboard's conflicts), each CONTRACT
    mapped for the engine as built (``max_split = lanes``, :meth:`Program.for_engine`) and
    costed by :func:`ttrain.golden.isa.engine_cycles`, each vector and update instruction by
    :func:`vector_cycles` on ``width`` lanes: in the compiled order, reordered by the
    compiler's scheduling pass (:func:`~ttrain.golden.schedule.interleave`), and the
    dependency bound (the longest chain of conflicting instructions). Returns ``{program,
    interleave, critical_path, busy: {engine, vector, update}}`` in cycles; a model, not a
    measurement (the engine and the vector unit do not compete for the store ports in it).

    ``levers=True`` adds ``levers``: the same three figures and the busy cycles on other
    machines: ``no_descriptor_cost`` (a design study, **not built**: every CONTRACT costs
    only its ``body``, the fill, fold and edges of :func:`engine_cycles` gone, an upper
    bound of descriptor overlap and shorter fills together), ``two_read_streams`` (built:
    the vector unit's port with two read vectors a request, ``HwConfig.vector_reads = 2``;
    :func:`vector_cycles` with ``read_streams=2`` on these banks) and ``both``."""
    from ..golden.interpreter import dynamic_stream
    from ..golden.isa import Contract, engine_cycles
    from ..golden.schedule import (busy_cycles, conflicts, extents, interleave, schedule,
                                   unit_of)
    prog = _program(config, compile_kw)
    machine = {"banks": banks, "bank_skew": bank_skew}
    if route is not None:
        machine.update(route=route)
    prog = prog.for_engine(lanes, slots, lanes, **machine)
    if route is not None:
        machine["omega_lanes"] = slots * lanes
    lat = _special_latencies()

    def coster(body_only=False, read_streams=1):
        @functools.lru_cache(maxsize=None)
        def cost(ins):
            if isinstance(ins, Contract):
                if body_only:
                    return engine_cycles(ins.desc, lanes, slots, parts=True, **machine)["body"]
                return engine_cycles(ins.desc, lanes, slots, **machine)
            return vector_cycles(ins, width, special_lanes, lat, read_streams=read_streams,
                                 banks=banks, bank_skew=bank_skew)[1] \
                if unit_of(ins) is not None else 0
        return cost
    dyn = [ins for _, ins in dynamic_stream(prog.instructions)]
    work = [ins for ins in dyn if unit_of(ins) is not None]
    ext = [extents(ins) for ins in work]
    preds = [[j for j in range(i) if conflicts(ext[i], ext[j])] for i in range(len(work))]

    def figures(cost):
        new, _ = interleave(prog, cost)
        fin = []
        for i, ins in enumerate(work):
            fin.append(max((fin[j] for j in preds[i]), default=0) + cost(ins))
        return {"program": schedule(dyn, cost)[0],
                "interleave": schedule([x for _, x in dynamic_stream(new.instructions)],
                                       cost)[0],
                "critical_path": max(fin, default=0),
                "busy": dict(zip(("engine", "vector", "update"), busy_cycles(dyn, cost)))}
    out = figures(coster())
    if levers:
        out["levers"] = {name: figures(coster(*args)) for name, args in (
            ("no_descriptor_cost", (True, 1)), ("two_read_streams", (False, 2)),
            ("both", (True, 2)))}
    return out


def study(config="paper-l1", lanes=(8, 64, 256), *, fetch_words=None, banks=None,
          bank_skew=False, row_fetch=None, k_stage=None, compile_kw=None, row_operands=False,
          route=None):
    descs, vec, nvec = step_descriptors(config, compile_kw)
    macs = sum(m * n * k * b for m, n, k, b in descs)
    rows = []
    for P in lanes:
        ideal = _cdiv(macs, P)
        entry = {"lanes": P, "ideal_cycles": ideal, "mappings": {}}
        for mp in MAPPINGS + ("best",):
            for ov in (False, True):
                c = sum(cycles(d, P, mp, ov) for d in descs)
                entry["mappings"][mp + (" +overlap" if ov else "")] = {
                    "cycles": c, "utilization": ideal / c}
        if fetch_words is not None or banks is not None:
            c, _ = machine_cycles(config, P, fetch_words=fetch_words and min(fetch_words, P),
                                  banks=banks, bank_skew=bank_skew, row_fetch=row_fetch,
                                  k_stage=k_stage, compile_kw=compile_kw,
                                  row_operands=row_operands, route=route)
            how = ("whole vectors through an Omega network" if route == "omega" else
                   "whole vectors, A/B/old C through one Omega port" if route == "omega-shared"
                   else
                   f"W {fetch_words}{' + row operands' if row_operands else ''}"
                   if row_fetch is None else
                   f"row entries, {row_fetch}-port fallback, k-stage {k_stage or 1}")
            skew = {False: "", True: ", skewed", "xor": ", XOR-skewed"}[bank_skew]
            label = f"machine ({how}, {banks} banks{skew})"
            entry["mappings"][label] = {
                "cycles": c, "utilization": ideal / c}
        losses = defaultdict(lambda: [0, 0, 0])
        for d in descs:
            a = losses[d]
            a[0] += 1
            a[1] += cycles(d, P, "best", True)
            a[2] += d[0] * d[1] * d[2] * d[3]
        worst = sorted(losses.items(), key=lambda kv: -(kv[1][1] - kv[1][2] / P))[:8]
        entry["worst_best_overlap"] = [
            {"m": d[0], "n": d[1], "k": d[2], "batch": d[3], "count": c, "cycles": cy,
             "ideal": _cdiv(mac, P)} for d, (c, cy, mac) in worst]
        rows.append(entry)
    shapes = Counter(descs)
    return {"config": config, "contracts": len(descs), "distinct_shapes": len(shapes),
            "macs": macs, "vector_elements": vec, "vector_instructions": nvec,
            "label": "analytical model (engine only; rows other than 'machine': no bank "
                     "conflicts, no operand-bandwidth limit): a design study, not a "
                     "measurement", "lanes": rows}


@functools.lru_cache(maxsize=1)
def _special_latencies():
    """Per special function, its latency in the chip's unit (read off the RTL class)."""
    from ..rtl.special import SpecialFunctionUnit
    unit = SpecialFunctionUnit(latency="per_function")
    unit._MustUse__silence = True                  # only asked for its latencies
    return dict(unit.latencies)


def vector_cycles(ins, width, special_lanes=1, latencies=None, **port):
    """:func:`ttrain.golden.isa.vector_cycles` with the chip's special-function latencies
    (``port``: its ``read_streams``, ``banks`` and ``bank_skew``)."""
    from ..golden.isa import vector_cycles as model
    return model(ins, width, special_lanes, latencies or _special_latencies(), **port)


def vector_study(config, width, special_lanes=1, compile_kw=None):
    """Model cycles of the vector and update work of ``config``'s compiled step (loops
    unrolled; :func:`vector_cycles`): ``{kind: {"instructions", "elements", "cycles"}}``."""
    from ..golden.interpreter import dynamic_stream
    from ..golden.isa import Elementwise, Gather, Reduce, Update
    lat = _special_latencies()
    out = defaultdict(lambda: {"instructions": 0, "elements": 0, "cycles": 0})
    for _, ins in dynamic_stream(_program(config, compile_kw).instructions):
        if isinstance(ins, (Elementwise, Reduce, Gather, Update)):
            kind, c = vector_cycles(ins, width, special_lanes, lat)
            e = out[kind]
            e["instructions"] += 1
            e["elements"] += ins.count if isinstance(ins, Update) else ins.rows * ins.cols
            e["cycles"] += c
    return dict(out)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m ttrain.testbench.wide_model",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="paper-l1")
    p.add_argument("--lanes", default="8,64,256")
    p.add_argument("--fetch-words", type=int, default=None, metavar="W",
                   help="add the machine row: W-word operand beats (power of two)")
    p.add_argument("--banks", type=int, default=None, metavar="NB",
                   help="add the machine row: NB banks per store (power of two)")
    p.add_argument("--bank-skew", action="store_true",
                   help="machine row: rows skewed across the banks (rtl engine bank_skew)")
    p.add_argument("--row-fetch", type=int, default=None, metavar="F",
                   help="machine row, a design study (not built): row-entry fetchers, one "
                        "entry per lane group, F per-lane ports for strided vectors")
    p.add_argument("--k-stage", type=int, default=None, metavar="K",
                   help="with --row-fetch: strided A/B vectors read K k-steps at a time "
                        "along k into per-lane buffers, C^T tiles written as columns")
    p.add_argument("--xor-skew", action="store_true",
                   help="machine row, a design study (not built): word a in bank (a ^ (a >> "
                        "log2 NB)) %% NB")
    p.add_argument("--route", choices=("omega", "omega-shared"), default=None,
                   help="machine row: every engine vector whole through an Omega port from "
                        "its lanes to the banks (golden.isa.omega_passes; built: "
                        "ContractionEngine(route=...), HwConfig.route): 'omega' a port per "
                        "fetcher and the C writer, 'omega-shared' A, B and old C in turns "
                        "through one read port")
    p.add_argument("--overlap-study", action="store_true",
                   help="with --banks: what overlapping descriptors could hide on the machine "
                        "row (overlap_study: the per-descriptor fill, fold and edge cycles, "
                        "and those of CONTRACTs independent of the one before)")
    p.add_argument("--row-operands", action="store_true",
                   help="machine row: unit-stride B/C vectors as row entries (the engine's "
                        "row_operands, built), the others through the --fetch-words ports")
    p.add_argument("--positions", type=int, default=None, metavar="P",
                   help="the step compiled for P grid positions (a length bucket)")
    p.add_argument("--order", default="auto",
                   choices=("auto", "fast", "bidirectional", "left_to_right", "dp_best",
                            "best"),
                   help="the TT layers' contraction order of the compiled step")
    p.add_argument("--vector-width", type=int, default=None, metavar="V",
                   help="add the vector and update work of the step on a V-lane vector unit "
                        "(vector_cycles: the chip's per-instruction costs) and the serial "
                        "whole-step estimate beside each machine row; with --banks and "
                        "whole-vector fetches also the step through the sequencer's issue "
                        "model, compiled and interleaved")
    p.add_argument("--special-lanes", type=int, default=1, metavar="S",
                   help="with --vector-width: words per cycle into the special-function unit "
                        "(1 as built)")
    p.add_argument("--engine-sums", type=int, default=None, metavar="P",
                   help="compile the step with the row sums a P-lane engine does faster as "
                        "contractions with a ones vector (compile_model engine_sums)")
    p.add_argument("--ttm-group", type=int, default=None, metavar="G",
                   help="compile the step with G grid rows per TTM LOOP iteration "
                        "(compile_model ttm_group; default auto)")
    p.add_argument("--levers", action="store_true",
                   help="with the issue model's rows: the same step on other machines: every "
                        "CONTRACT without its per-descriptor cycles (a design study, not "
                        "built), the vector unit with two read vectors a request (built: "
                        "--vector-reads 2), both (walk_study levers)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if a.ttm_group is not None and a.ttm_group < 1:
        p.error(f"--ttm-group must be a positive number of rows, not {a.ttm_group}")
    if a.row_fetch is not None and a.banks is None:
        p.error("--row-fetch needs --banks NB (the row entries' cost is their banks)")
    if a.row_operands and (a.banks is None or a.row_fetch is not None):
        p.error("--row-operands needs --banks NB and no --row-fetch (it is the built engine's "
                "option; --row-fetch is the study machine)")
    if a.k_stage is not None and a.row_fetch is None:
        p.error("--k-stage needs --row-fetch F")
    if a.route is not None and (a.banks is None or a.row_fetch is not None or a.row_operands):
        p.error(f"--route {a.route} needs --banks NB and neither --row-fetch nor --row-operands")
    if a.xor_skew and (a.bank_skew or a.banks is None):
        p.error("--xor-skew needs --banks NB and replaces --bank-skew (choose one)")
    if a.special_lanes != 1 and a.vector_width is None:
        p.error("--special-lanes needs --vector-width V")
    if a.levers and (a.vector_width is None or a.banks is None or a.fetch_words is not None
                     or a.row_fetch is not None or a.row_operands):
        p.error("--levers studies the issue model's rows: give --vector-width V and --banks "
                "NB, and no --fetch-words, --row-fetch or --row-operands")
    if a.overlap_study and (a.banks is None or a.row_fetch is not None or a.fetch_words
                            or a.row_operands):
        p.error("--overlap-study studies the machine row of whole-vector fetches: give --banks "
                "NB and no --row-fetch, --fetch-words or --row-operands")
    for flag, v in (("--fetch-words", a.fetch_words), ("--banks", a.banks),
                    ("--row-fetch", a.row_fetch), ("--k-stage", a.k_stage),
                    ("--vector-width", a.vector_width), ("--special-lanes", a.special_lanes)):
        if v is not None and (v < 1 or v & (v - 1)):
            p.error(f"{flag} must be a positive power of two, not {v}")
    try:
        lanes = tuple(int(x) for x in a.lanes.split(","))
        if any(x < 1 for x in lanes):
            raise ValueError
    except ValueError:
        p.error(f"--lanes takes comma-separated positive integers, not {a.lanes!r}")
    kw = {"order": a.order, **({} if a.positions is None else {"positions": a.positions}),
          **({} if a.engine_sums is None else {"engine_sums": a.engine_sums}),
          **({} if a.ttm_group is None else {"ttm_group": a.ttm_group})}
    try:
        rep = study(a.config, lanes, fetch_words=a.fetch_words, banks=a.banks,
                    bank_skew="xor" if a.xor_skew else a.bank_skew, row_fetch=a.row_fetch,
                    k_stage=a.k_stage, compile_kw=kw, row_operands=a.row_operands,
                    route=a.route)
        if a.vector_width is not None:
            rep["vector_label"] = ("model of the chip's vector and update units, min(V, P) "
                                   "lanes, no contention with the engine; the serial "
                                   "whole-step figures add it to each mapping; the walk "
                                   "rows overlap what the sequencer's scoreboard lets "
                                   "run side by side")
            for e in rep["lanes"]:
                width = min(a.vector_width, e["lanes"])
                vec = vector_study(a.config, width, a.special_lanes, kw)
                vtot = sum(v["cycles"] for v in vec.values())
                e["vector"] = {"width": width, "special_lanes": a.special_lanes,
                               "cycles": vtot, "kinds": vec}
                e["whole_step_serial"] = {k: {"cycles": v["cycles"] + vtot,
                                              "utilization": e["ideal_cycles"]
                                              / (v["cycles"] + vtot)}
                                          for k, v in e["mappings"].items()}
                if a.banks is not None and a.fetch_words is None and a.row_fetch is None \
                        and not a.row_operands:
                    e["whole_step_walk"] = walk_study(
                        a.config, e["lanes"], width, a.special_lanes, banks=a.banks,
                        bank_skew="xor" if a.xor_skew else a.bank_skew, route=a.route,
                        compile_kw=kw, levers=a.levers)
        if a.overlap_study:
            rep["overlap_label"] = ("design study (not built): per-descriptor cycles of the "
                                    "machine row; hideable = those of CONTRACTs whose "
                                    "operands do not meet the words written since the "
                                    "previous CONTRACT began")
            for e in rep["lanes"]:
                e["overlap_study"] = overlap_study(
                    a.config, e["lanes"], banks=a.banks,
                    bank_skew="xor" if a.xor_skew else a.bank_skew, route=a.route,
                    compile_kw=kw)
    except (KeyError, ValueError) as e:
        p.error(str(e).strip("'\""))
    if a.json:
        print(json.dumps(rep, indent=1))
        return 0
    print(f"{rep['config']}: {rep['contracts']:,} contractions ({rep['distinct_shapes']} shapes), "
          f"{rep['macs']:,} MACs; {rep['vector_elements']:,} vector elements in "
          f"{rep['vector_instructions']:,} vector instructions ({rep['label']})")
    for e in rep["lanes"]:
        print(f"P = {e['lanes']}: ideal {e['ideal_cycles']:,} cycles")
        for k, v in e["mappings"].items():
            print(f"  {k:<18} {v['cycles']:>12,} cycles  {v['utilization']:6.1%}")
        if "whole_step_serial" in e:
            v = e["vector"]
            print(f"  + vector/update work on {v['width']} lanes ({v['special_lanes']} "
                  f"special-function lane(s)): {v['cycles']:,} cycles ("
                  + ", ".join(f"{k} {x['cycles']:,}" for k, x in v["kinds"].items())
                  + "); whole step, serial:")
            for k, x in e["whole_step_serial"].items():
                if k.startswith("machine") or k in ("engine", "engine +overlap"):
                    print(f"    {k:<18} {x['cycles']:>12,} cycles  {x['utilization']:6.1%}")
        if "whole_step_walk" in e:
            w, ideal = e["whole_step_walk"], e["ideal_cycles"]
            print("  whole step through the sequencer's issue model (golden/schedule.py; "
                  f"machine row's engine, busy: engine {w['busy']['engine']:,}, vector "
                  f"{w['busy']['vector']:,}, update {w['busy']['update']:,}):")
            for k, label in (("program", "compiled order"),
                             ("interleave", "interleaved (the scheduling pass)"),
                             ("critical_path", "dependency bound (longest chain)")):
                print(f"    {label:<36} {w[k]:>10,} cycles  {ideal / w[k]:6.1%}")
            for name, x in w.get("levers", {}).items():
                print(f"    {LEVERS[name]} (busy: engine "
                      f"{x['busy']['engine']:,}, vector {x['busy']['vector']:,}):")
                for k, label in (("program", "compiled order"),
                                 ("interleave", "interleaved"),
                                 ("critical_path", "dependency bound")):
                    print(f"      {label:<34} {x[k]:>10,} cycles  {ideal / x[k]:6.1%}")
        if "overlap_study" in e:
            o = e["overlap_study"]
            print(f"  machine row's per-descriptor cycles (fill, fold, edges): "
                  f"{o['overhead']:,} of {o['cycles']:,}; {o['independent']:,} of "
                  f"{o['contracts']:,} CONTRACTs independent of the one before, their "
                  f"{o['hideable']:,} hideable by descriptor overlap "
                  f"({e['ideal_cycles'] / (o['cycles'] - o['hideable']):.1%} of the ideal "
                  f"then; {e['ideal_cycles'] / (o['cycles'] - o['overhead']):.1%} with all "
                  f"hidden)")
        print("  largest losses (best mapping, overlapped):")
        for w in e["worst_best_overlap"]:
            print(f"    {w['m']}x{w['n']}x{w['k']} batch {w['batch']} x{w['count']}: "
                  f"{w['cycles']:,} cycles for {w['ideal']:,} ideal")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
