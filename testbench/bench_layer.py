"""Benchmark: consecutive training steps of the paper's 768x768 TT layer on the accelerator top.

Behind ``ttrain bench layer`` / ``make bench-layer``. The chip is the simulated platform
(:mod:`ttrain.platforms.sim.top`); this module only chooses the layer, the rank sets and the
report.
"""

import json
from pathlib import Path

from ..platforms.hw import hw_config
from ..platforms.sim.top import build_top, layer_session, run_top

__all__ = ["PAPER_LAYER", "PAPER_RANKS", "paper_layers", "bench_layer"]


#: The paper's 768x768 TT layer ([12,8,8 | 8,8,12]) rank sets (``architecture.md``).
PAPER_LAYER = ((12, 8, 8), (8, 8, 12))
PAPER_RANKS = {"r10": (1, 10, 10, 10, 10, 10, 1), "r20": (1, 12, 20, 20, 20, 12, 1)}


def paper_layers(batch=32, lr=0.01, rank_sets=tuple(PAPER_RANKS)):
    """Compile the paper layer for each rank set: ``{name: CompiledLayer}``."""
    from ..golden.compiler import compile_tt_linear
    from ..golden.config import TTSpec
    bad = [r for r in rank_sets if r not in PAPER_RANKS]
    if bad:
        raise ValueError(f"unknown rank set(s) {bad}; choose from {', '.join(PAPER_RANKS)}")
    return {name: compile_tt_linear(TTSpec(*PAPER_LAYER, PAPER_RANKS[name]), batch, lr=lr)
            for name in rank_sets}


def bench_layer(out_json=None, *, rank_sets=tuple(PAPER_RANKS), steps=3, batch=32, lanes=8,
                slots=16, test_dir=None, progress=None):
    """Consecutive training steps of the paper layer on the accelerator top under Verilator.

    Every store word is compared with the interpreter after every step (a mismatch raises
    :class:`SimulationError`). Returns the report ``{"config", "entries", "total"}``: per step
    the measured cycles, the engine's own cycles summed over the step's CONTRACTs (measured in
    the same run), the ideal cycles (MACs / lanes), utilization = ideal / cycles, sequencing
    overhead = cycles / engine cycles - 1, and the vector / update units' busy cycles.
    """
    import tempfile
    import time

    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= 50:
        raise ValueError(f"steps must be an int in 1..50, not {steps!r}")
    layers = paper_layers(batch=batch, rank_sets=rank_sets)
    hw = hw_config(layers, config="paper-layer", lanes=lanes, slots=slots)
    cfg = hw.accelerator_kwargs("sim")
    words = hw.total_words
    rom_depth = 1 << (words * (steps + 2) + 4096).bit_length()
    t0 = time.time()
    if progress:
        progress(f"building the accelerator ({lanes} lanes, stores {cfg['store_sizes']}); "
                 f"the first build takes 10-20 minutes")
    build_name = "ttrain_top_paper" + ("" if (lanes, slots) == (8, 16)
                                       else f"_l{lanes}_s{slots}")
    top = build_top(hw, build_name, rom_depth=rom_depth)
    build_s = time.time() - t0
    root = Path(test_dir or tempfile.mkdtemp(prefix="layer-bench-"))
    entries, totals = [], {}
    for name, cl in layers.items():
        sess, stats = layer_session(cl, cfg["store_sizes"], steps=steps, seed=1)
        if progress:
            progress(f"{name}: {steps} steps, {len(cl.program.instructions)} instructions")
        t1 = time.time()
        res = run_top(top, sess, test_dir=root / name, timeout=4 * 3600)
        sim_s = time.time() - t1
        for s, (r, st) in enumerate(zip(res, stats)):
            ideal = -(-st.macs // lanes)
            entries.append({
                "name": f"{name}.step{s}", "cycles": r["cycles"],
                "engine_cycles": r["engine_cycles"], "ideal_cycles": ideal, "macs": st.macs,
                "utilization": ideal / r["cycles"],
                "overhead": r["cycles"] / r["engine_cycles"] - 1,
                "busy_engine": r["busy_engine"], "busy_vector": r["busy_vector"],
                "busy_update": r["busy_update"], "instructions": r["executed"],
                "vector_elements": st.elementwise, "updated_words": st.updated,
                "bit_exact": True})
        last = entries[-1]
        totals[name] = {k: last[k] for k in ("cycles", "engine_cycles", "ideal_cycles",
                                             "utilization", "overhead")}
        totals[name]["sim_seconds"] = round(sim_s, 1)
    report = {"config": {"lanes": lanes, "slots": slots, "banks": lanes, "batch": batch,
                         "steps": steps, "layer": "[12,8,8 | 8,8,12]",
                         "ranks": {n: PAPER_RANKS[n] for n in layers},
                         "store_sizes": cfg["store_sizes"], "build_seconds": round(build_s, 1)},
              "entries": entries, "total": totals}
    if out_json:
        Path(out_json).write_text(json.dumps(report, indent=1))
    return report
