"""Benchmark: cycles of compiled ZO steps (golden/zo_compiler.py) on the simulated accelerator.

Behind ``ttrain bench step --rule zo``. The step of a CNN preset runs on a Verilator build of
the accelerator top sized for it, with every store word compared with the golden interpreter
after every run (whose parameters equal ``zo.zo_step``: ``tests/test_zo_compiler.py``). Each
step is also run cut after its unperturbed pass and after its queries, so the report splits
the cycles into the unperturbed forward pass, the queries (and cycles per query) and the
update.
"""

import json
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

__all__ = ["bench_zo", "ZO_BENCH_RUNS"]

#: The settings benchmarked: the digits table's WP run (last layer, 20 queries), dense WP
#: of every layer (the step the memory figures of ``ttrain plan --rule zo`` describe), and the
#: table's node-perturbation and mixed runs (layer-wise, 20 queries per layer).
ZO_BENCH_RUNS = ("zo-wp", "wp-all", "zo-np", "zo-mixed")


def _settings(run, queries):
    from ..golden import adapt, zo
    if run in ("zo-wp", "zo-np", "zo-mixed"):
        s = adapt.ZO_RUNS[run]
    elif run == "wp-all":
        s = zo.ZOSettings(mode="wp", lr=0.05)
    else:
        raise ValueError(f"unknown ZO benchmark run {run!r}; choose one of "
                         f"{', '.join(ZO_BENCH_RUNS)}")
    return s if queries is None else replace(s, queries=queries)


def _model(cfg, seed):
    """The pre-trained int8 digits model; seeded random weights for the figures-only presets."""
    from ..golden import adapt
    from ..golden.zo_compiler import figures_model
    if cfg.input_shape == (8, 8, 1) and cfg.classes == 10:
        model, _ = adapt.pretrain(cfg, seed=seed)
        return adapt.quantized(model), "pre-trained on clean digits, quantized"
    return figures_model(cfg, seed), "seeded random weights (figures only: never trained)"


def bench_zo(config="digits-cnn", *, run="zo-wp", batch=50, queries=None, lanes=8, slots=16,
             steps=2, seed=0, out_json=None, progress=None, workdir=None):
    """Cycles of ``steps`` compiled ZO steps of ``config`` (``run``: :data:`ZO_BENCH_RUNS`)."""
    from ..golden import qnn
    from ..golden.isa import End, Program
    from ..golden.zo_compiler import compile_zo_step
    from ..platforms.hw import hw_config
    from ..platforms.sim.top import TopSession, build_top, interpret_traced, pad_image, run_top
    for name, v, lo, hi in (("steps", steps, 1, 20), ("batch", batch, 1, 4096)):
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise ValueError(f"{name} must be an int in {lo}..{hi}, not {v!r}")
    say = progress or (lambda m: None)
    cfg = qnn.get_cnn_config(config)
    s = _settings(run, queries)
    t0 = time.time()
    q, origin = _model(cfg, seed)
    cz = compile_zo_step(q, batch, s)
    ins = cz.program.instructions
    cuts = {"forward": cz.phase_ends["forward"], "queries": cz.phase_ends["queries"]}
    progs = {k: Program(ins[:i] + [End()], cz.program.store_sizes, cz.memory_map)
             for k, i in cuts.items()}
    progs["step"] = cz.program
    hw = hw_config({"zo_step": cz.program}, config=f"{cfg.name}-{run}", lanes=lanes,
                   slots=slots)
    sizes = hw.stores
    rng = np.random.default_rng([seed, 7])
    image, sess, golden_s, stats = None, TopSession(), 0.0, []
    for step in range(steps):
        x = rng.integers(-128, 128, (batch, *cfg.input_shape))
        y = rng.integers(0, cfg.classes, batch)
        if image is None:
            image = pad_image(cz.initial_image(x, y, step), sizes)
            sess.write_image(image)
        else:
            cz.set_step(image, x, y, step)
            for region in ("in.x", "in.onehot", "zo.seeds"):
                r = cz.memory_map[region]
                sess.write(r.store, r.base, image[r.store][r.base:r.base + r.size])
        g0 = time.time()
        per = {}
        for k in ("forward", "queries", "step"):
            want, st, golden = interpret_traced(progs[k], image)
            if st.error:
                raise RuntimeError(f"the golden interpreter stopped the {k} program: "
                                   f"{st.message}")
            sess.program(progs[k].words())
            sess.run(f"s{step}_{k}", expect=want, golden=golden)
            per[k] = st
        golden_s += time.time() - g0
        stats.append(per)
        image = want
    depth = sess.rom_depth()
    say(f"{cfg.name} {run}: {len(ins)} instructions, stores {dict(sizes)}; building the "
        f"accelerator ({lanes} lanes)")
    build = build_top(hw, f"ttrain_zo_{cfg.name.replace('-', '_')}_l{lanes}_s{slots}",
                      rom_depth=depth)
    build_s = time.time() - t0 - golden_s
    say(f"running {steps} step(s), each also cut after its unperturbed pass and its queries")
    s0 = time.time()
    res = run_top(build, sess, test_dir=Path(workdir or tempfile.mkdtemp(prefix="zo-bench-")),
                  timeout=4 * 3600)
    sim_s = time.time() - s0
    entries = []
    for step in range(steps):
        f, qs, w = (res[3 * step + i]["cycles"] for i in range(3))
        macs = stats[step]["step"].macs
        entries.append({
            "step": step, "cycles": w, "forward_cycles": f, "query_cycles": qs - f,
            "cycles_per_query": (qs - f) / cz.queries, "update_cycles": w - qs,
            "macs": int(macs), "ideal_cycles": -(-int(macs) // lanes),
            "utilization": -(-int(macs) // lanes) / w, "loss": float(cz.loss(image))
            if step == steps - 1 else None, "bit_exact": True})
    report = {"config": cfg.name, "model": origin, "run": run, "settings": asdict(s),
              "batch": batch, "queries": cz.queries, "lanes": lanes, "slots": slots,
              "instructions": len(ins), "store_sizes": dict(sizes),
              "store_bytes": {k: 4 * v for k, v in sizes.items()},
              "entries": entries,
              "seconds": {"build": round(build_s, 1), "simulation": round(sim_s, 1),
                          "golden": round(golden_s, 1)}}
    if out_json:
        Path(out_json).write_text(json.dumps(report, indent=1))
    return report
