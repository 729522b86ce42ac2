"""Benchmark: cycles of low-rank training's compiled programs (golden/lrt_compiler.py) on the
simulated accelerator.

Behind ``ttrain bench step --rule lrt``. The per-sample and read-out programs of the
pre-trained ``digits-mlp`` run on a Verilator build of the accelerator top sized for them, on
samples of the digits-drift stream, every store word compared with the golden interpreter after
every run (whose numbers equal ``lrt_online.run_online``: ``tests/test_lrt_compiler.py``). Each
sample program is also run cut after each of its phases (the forward pass; the backward pass
and bias update; Gram-Schmidt, condition check and cores; the Jacobi SVD of every core),
restarted from the same state, so the report splits its cycles by phase; the reductions and
basis rotations are the rest.
"""

import json
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path

__all__ = ["bench_lrt", "LRT_BENCH_RUNS", "PHASES"]

#: ``--variant/--norm`` -> the benchmark table's run label (golden/lrt_online.py).
LRT_BENCH_RUNS = {(v, n): f"lrt {v}/{n}" for v in ("biased", "unbiased") for n in ("none", "max")}
#: The sample program's phases, in order (CompiledLRT.phase_ends), then the rest.
PHASES = ("forward", "backward", "project", "svd")
_MHZ = 300.0


def bench_lrt(config="digits-mlp", *, variant="unbiased", norm="max", samples=2, lanes=8,
              slots=16, seed=0, out_json=None, progress=None, workdir=None):
    """Cycles of ``samples`` compiled LRT samples and one read-out of ``config``."""
    from ..golden import drift, lrt_model, lrt_online
    from ..golden.isa import End, Program
    from ..golden.lrt_compiler import compile_lrt
    from ..golden.lrt_model import quantize_input
    from ..platforms.hw import hw_config
    from ..platforms.sim.top import TopSession, build_top, interpret_traced, pad_image, run_top
    if config not in lrt_model.MLP_PRESETS:
        extra = (" (one rankReduce per output pixel: its online runs are golden only, "
                 "`ttrain train --config digits-lrt-cnn --rule lrt --data digits-drift`)"
                 if config in lrt_model.LRT_PRESETS else "")
        raise ValueError(f"--rule lrt benchmarks the compiled programs of the fixed-point MLP "
                         f"presets ({', '.join(lrt_model.MLP_PRESETS)}), not {config}{extra}")
    if (variant, norm) not in LRT_BENCH_RUNS:
        raise ValueError(f"unknown LRT variant/norm {variant}/{norm}; choose biased or unbiased "
                         "and none or max")
    if isinstance(samples, bool) or not isinstance(samples, int) or not 1 <= samples <= 20:
        raise ValueError(f"samples must be an int in 1..20, not {samples!r}")
    say = progress or (lambda m: None)
    label = LRT_BENCH_RUNS[(variant, norm)]
    st = replace(lrt_online.BENCHMARK_RUNS[label], lr=lrt_online.DEFAULT_LR[label])
    t0 = time.time()
    model = lrt_model.pretrained_mlp(0)[0]
    cl = compile_lrt(model.shapes, st)
    ins = cl.sample.instructions
    progs = {k: Program(ins[:cl.phase_ends[k]] + [End()], cl.sample.store_sizes, cl.memory_map)
             for k in PHASES}
    progs["sample"] = cl.sample
    hw = hw_config(cl.programs, config=f"{config}-lrt", lanes=lanes, slots=slots)
    sizes = hw.stores
    stream = drift.make_stream(seed)
    xs = quantize_input(stream.images)
    image = pad_image(cl.initial_image(model), sizes)
    sess = TopSession()
    sess.write_image(image)
    stats, golden_s, loaded = [], 0.0, None
    for i in range(samples):
        cl.set_sample(image, xs[i], int(stream.labels[i]), i)
        g0 = time.time()
        per = {}
        # sample 0 also runs cut after each phase (its split); later samples run the sample
        # program only, still loaded and verified: the static and check passes are skipped,
        # as on a stream (docs/sequencer.md)
        for k in (PHASES if i == 0 else ()) + ("sample",):
            want, res, golden = interpret_traced(progs[k], image)
            if res.error:
                raise RuntimeError(f"the golden interpreter stopped the {k} program: "
                                   f"{res.message}")
            for store in ("param", "act"):         # every cut starts from the same state
                sess.write(store, 0, image[store])
            if loaded != k:
                sess.program(progs[k].words())
                loaded = k
            sess.run(f"s{i}_{k}", expect=want, golden=golden)
            per[k] = res
        golden_s += time.time() - g0
        stats.append(per)
        image = want
    want, rres, golden = interpret_traced(cl.readout, image)
    if rres.error:
        raise RuntimeError(f"the golden interpreter stopped the read-out: {rres.message}")
    sess.program(cl.readout.words())
    sess.run("readout", expect=want, golden=golden)
    depth = sess.rom_depth()
    say(f"{config} {label}: {len(ins)} + {len(cl.readout.instructions)} instructions, stores "
        f"{dict(sizes)}; building the accelerator ({lanes} lanes)")
    build = build_top(hw, f"ttrain_lrt_{config.replace('-', '_')}_l{lanes}_s{slots}",
                      rom_depth=depth)
    build_s = time.time() - t0 - golden_s
    say(f"running {samples} sample(s), the first also cut after each phase, and one read-out")
    s0 = time.time()
    out = run_top(build, sess, test_dir=Path(workdir or tempfile.mkdtemp(prefix="lrt-bench-")),
                  timeout=4 * 3600)
    sim_s = time.time() - s0
    entries = []
    cuts = {k: r["cycles"] for k, r in zip(PHASES, out)}
    for i in range(samples):
        cycles = out[len(PHASES) + i]["cycles"]
        entry = {"sample": i, "cycles": cycles, "verified_rerun": i > 0}
        if i == 0:                       # the cuts split the first (passes included) run
            split, prev = {}, 0
            for k in PHASES:
                split[k] = cuts[k] - prev
                prev = cuts[k]
            split["reduce_rotate"] = cycles - prev
            entry["phase_cycles"] = split
        macs = int(stats[i]["sample"].macs)
        entries.append({**entry, "macs": macs, "ideal_cycles": -(-macs // lanes),
                        "utilization": -(-macs // lanes) / cycles,
                        "instructions_executed": int(stats[i]["sample"].instructions),
                        "bit_exact": True})
    rc = out[-1]["cycles"]
    per_sample = entries[-1]["cycles"]
    # the static and check passes of the sample program, paid again after every read-out
    # (the host reloads it); unknown (0) with one sample
    passes = entries[0]["cycles"] - per_sample
    n, b = len(stream), st.batch
    stream_cycles = n * per_sample + (n // b) * (rc + passes)
    report = {"config": config, "run": label, "settings": asdict(st), "lanes": lanes,
              "slots": slots, "instructions": {"sample": len(ins),
                                               "readout": len(cl.readout.instructions)},
              "store_sizes": dict(sizes), "entries": entries,
              "readout": {"cycles": rc, "macs": int(rres.macs), "layers": len(cl.shapes),
                          "written": [bool(cl.get_f32(want, f"written{l}")[0])
                                      for l in range(len(cl.shapes))], "bit_exact": True},
              "sample_passes_cycles": passes,
              "stream": {"samples": n, "readouts": n // b, "cycles": stream_cycles,
                         "seconds_at_300MHz": stream_cycles / (_MHZ * 1e6)},
              "us_per_sample_at_300MHz": per_sample / _MHZ,
              "seconds": {"build": round(build_s, 1), "simulation": round(sim_s, 1),
                          "golden": round(golden_s, 1)}}
    if out_json:
        Path(out_json).write_text(json.dumps(report, indent=1))
    return report
