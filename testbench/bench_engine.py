# amaranth: UnusedElaboratable=no
"""Contraction-engine benchmark under Verilator: one TT-linear training step of the paper layer.

Library side of ``ttrain bench engine`` and of ``tests/test_engine_verilator.py``:
:func:`make_engine` / :func:`build_engine` (a :class:`~ttrain.rtl.engine.ContractionEngine`
from a JSON-able configuration, built under Verilator inside a plain Verilog wrapper),
:func:`run_step` (descriptors in order through the ``bench`` test of the cocotb testbench
``testbench/tb_engine.py``, bit-exact, cycles measured) and :func:`bench_engine` (every
contraction of the paper's [12,8,8 | 8,8,12] layer for the rank sets of
:data:`ttrain.testbench.bench_layer.PAPER_RANKS`). From a shell::

    .venv/bin/python -m ttrain.testbench.bench_engine [out.json]
"""

import dataclasses
import json
from pathlib import Path

from ..platforms.memory import store_primitives
from ..rtl.engine import ContractionEngine, StoreSpec
from ..rtl.store import ram_verilog_path
from .bench_layer import PAPER_LAYER, PAPER_RANKS
from ..platforms.sim.verilator import build_wrapped, run_cocotb
from . import TESTBENCH_DIR

__all__ = ["BENCH_LANES", "BENCH_SLOTS", "PAPER_RANKS", "make_engine", "build_engine",
           "run_step", "bench_engine"]

#: Default engine size of the benchmark.
BENCH_LANES = 8
BENCH_SLOTS = 16


def make_engine(cfg):
    """The engine of ``cfg`` (``lanes``, ``stores`` as ``[[name, depth, style, impl], ...]``,
    optional ``slots``, ``max_split``, ``banks``, ``fetch_words``, ``bank_skew``,
    ``row_operands``, ``route`` (``"omega"``), ``fetch_depth`` and ``shared_units``: the
    FP32 units as instances of one Verilog module each, :func:`ttrain.rtl.export.shared_unit`,
    for wide builds): the same configuration ``testbench/tb_engine.py`` reads from
    ``$ENGINE_CONFIG``."""
    units = {}
    if cfg.get("shared_units"):
        from ..rtl.export import shared_unit
        from ..rtl.fp32 import FP32Add, FP32Mul
        units = {"mul_unit": shared_unit(FP32Mul), "add_unit": shared_unit(FP32Add)}
    return ContractionEngine(lanes=cfg["lanes"], stores=[StoreSpec(*s) for s in cfg["stores"]],
                             max_split=cfg.get("max_split", 1), banks=cfg.get("banks"),
                             fetch_words=cfg.get("fetch_words"),
                             bank_skew=bool(cfg.get("bank_skew")),
                             row_operands=bool(cfg.get("row_operands")),
                             route=cfg.get("route"), fetch_depth=cfg.get("fetch_depth"),
                             **units, **({"slots": cfg["slots"]} if cfg.get("slots") else {}))


def build_engine(eng, name):
    """Build ``eng`` under Verilator inside a plain Verilog wrapper (see ``build_wrapped``),
    with the Verilog of its shared units (:func:`ttrain.rtl.export.shared_sources`).
    ``eng`` is a :class:`ContractionEngine` or a :func:`make_engine` configuration; the
    latter, whole (testbench keys too: a key :func:`make_engine` reads is never left out),
    also keys the conversion cache (``build_verilator(convert_key=...)``), so another
    process asking for the same engine does not convert it again."""
    from ..platforms.sim.verilator import build_root
    from ..rtl.export import shared_sources
    key = None
    if isinstance(eng, dict):
        key = {"engine": eng}
        eng = make_engine(eng)
    shared = [u for u in (eng.mul_unit, eng.add_unit) if hasattr(u, "unit_class")]
    extra = shared_sources(shared, build_root() / "shared" / "amaranth") if shared else []
    return build_wrapped(eng, name=name, extra_sources=[ram_verilog_path(), *extra],
                         **({} if key is None else {"convert_key": key}))


def run_step(build, eng, cfg, jobs, tdir, sizes):
    """Run ``jobs`` (``[(name, Descriptor)]``) in order on ``build`` (tb_engine's ``bench``
    test: C checked after each, every word of ``sizes`` at the end). Returns
    ``{name: cycles}``.

    (The model used to crash after ``$finish`` now and then with megabyte stores, and this
    function accepted such runs when cocotb had recorded a pass. The cause was the cached
    cocotb main of another design, ``platforms/sim/verilator.py: _RUNTIME_OBJECTS``; fixed,
    so any crash is a failure again.)"""
    out = Path(tdir) / "cycles.json"
    bench = {"out": str(out), "sizes": sizes,
             "jobs": [{"name": n, "desc": dataclasses.asdict(d)} for n, d in jobs]}
    run_cocotb(build, "tb_engine", test_dir=tdir, testcase="bench",
               module_dirs=[TESTBENCH_DIR],
               extra_env={"ENGINE_CONFIG": json.dumps(cfg), "ENGINE_BENCH": json.dumps(bench)})
    return {r["name"]: r["cycles"] for r in json.loads(out.read_text())}


def bench_engine(out_json=None, *, lanes=BENCH_LANES, slots=BENCH_SLOTS, batch=32,
                 rank_sets=tuple(PAPER_RANKS), test_dir=None, max_split=1, fetch_words=None,
                 banks=None, bank_skew=False, row_operands=False):
    """Measure every contraction of one TT-linear training step under Verilator.

    For the paper's [12,8,8 | 8,8,12] layer with each rank set in ``rank_sets`` and ``batch``
    tokens, builds one engine (``lanes`` lanes, ``slots`` slots, ``max_split`` lane groups,
    ``fetch_words``-word beats, ``banks`` banks (default ``lanes``), shared FP32 units,
    stores sized for the largest step), maps each of
    :func:`ttrain.golden.contract.tt_linear_step`'s descriptors for it (orientation and split,
    :func:`ttrain.golden.isa.map_contract`), runs them in order, checks
    them bit-exact against the golden model and returns the report
    ``{"config": ..., "entries": [...], "total": ...}`` (``architecture.md`` "Measurement"
    shape; one entry per contraction and per step total). Writes it to ``out_json`` if given.
    """
    import tempfile
    import time

    from ..golden.config import TTSpec
    from ..golden.contract import BATCH_DEPENDENT, tt_linear_step
    from ..golden.isa import map_contract

    steps = {}
    need = {}
    for name in rank_sets:
        spec = TTSpec(*PAPER_LAYER, PAPER_RANKS[name])
        sizes, jobs = tt_linear_step(spec, batch)
        steps[name] = (sizes, jobs)           # oriented below, once the engine exists
        for store, words in sizes.items():
            need[store] = max(need.get(store, 0), words)
    nb = banks or lanes
    stores = [[s, -(-w // nb) * nb, "auto", "verilog"] for s, w in sorted(need.items())]
    cfg = {"lanes": lanes, "slots": slots, "stores": stores, "seed": 7,
           "max_split": max_split, "fetch_words": fetch_words, "banks": banks,
           "bank_skew": bool(bank_skew), "row_operands": bool(row_operands),
           "shared_units": True}
    t0 = time.time()
    eng = make_engine(cfg)
    suffix = (f"_g{max_split}" if max_split > 1 else "") + \
        (f"_f{fetch_words}" if fetch_words else "") + (f"_b{banks}" if banks else "") + \
        ("_skew" if bank_skew else "") + ("_rows" if row_operands else "")
    build = build_engine(eng, f"ttrain_engine_bench_l{lanes}_s{slots}{suffix}")
    build_s = time.time() - t0
    steps = {name: (sizes, [(j, map_contract(d, (0, 0, 0), lanes, slots, max_split,
                                             fetch_words=fetch_words, banks=eng.banks,
                                             bank_skew=eng.bank_skew,
                                             row_operands=eng.row_operands)[0])
                            for j, d in jobs])
             for name, (sizes, jobs) in steps.items()}
    entries = []
    totals = {}
    for name, (sizes, jobs) in steps.items():
        tdir = Path(test_dir or tempfile.mkdtemp(prefix="engine-bench-")) / name
        tdir.mkdir(parents=True, exist_ok=True)
        t1 = time.time()
        cycles = run_step(build, eng, cfg, jobs, tdir, {st: eng.store_sizes[st] for st in sizes})
        sim_s = time.time() - t1
        tot = {"macs": 0, "cycles": 0, "ideal_cycles": 0}
        batch_dep = dict(tot)
        for jname, desc in jobs:
            ideal = eng.ideal_cycles(desc)
            e = {"name": f"{name}.{jname}", "macs": desc.macs, "cycles": cycles[jname],
                 "ideal_cycles": ideal, "utilization": ideal / cycles[jname],
                 "model_cycles": eng.issue_cycles(desc),
                 "shape": [desc.batch, desc.m, desc.n, desc.k], "split": desc.split}
            entries.append(e)
            for acc in (tot, batch_dep) if jname in BATCH_DEPENDENT else (tot,):
                for key in ("macs", "cycles", "ideal_cycles"):
                    acc[key] += e[key]
        for label, acc in ((f"{name}.step", tot), (f"{name}.batch_dependent", batch_dep)):
            entries.append({"name": label, **acc,
                            "utilization": acc["ideal_cycles"] / acc["cycles"]})
        totals[name] = {**tot, "utilization": tot["ideal_cycles"] / tot["cycles"],
                        "sim_seconds": round(sim_s, 1)}
    report = {"config": {"lanes": lanes, "slots": slots, "banks": eng.banks, "batch": batch,
                         "max_split": max_split, "fetch_words": fetch_words,
                         "bank_skew": bool(bank_skew), "row_operands": eng.row_operands,
                         "layer": "[12,8,8 | 8,8,12]", "ranks": {n: PAPER_RANKS[n]
                                                                 for n in rank_sets},
                         "stores": [store_primitives(st) for st in eng.stores], "build_seconds": round(build_s, 1)},
              "entries": entries, "total": totals}
    if out_json:
        Path(out_json).write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":      # python -m ttrain.testbench.bench_engine [out.json]
    import sys
    rep = bench_engine(sys.argv[1] if len(sys.argv) > 1 else "engine_bench.json")
    for e in rep["entries"]:
        print(f"{e['name']:28s} macs {e['macs']:9d} cycles {e['cycles']:8d} "
              f"ideal {e['ideal_cycles']:8d} util {e['utilization']:.3f}")
