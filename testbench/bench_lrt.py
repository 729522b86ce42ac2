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
    if config not in lrt_model.LRT_PRESETS:
        raise ValueError(f"--rule lrt benchmarks the compiled programs of the fixed-point LRT "
                         f"presets ({', '.join(lrt_model.LRT_PRESETS)}), not {config}")
    if (variant, norm) not in LRT_BENCH_RUNS:
        raise ValueError(f"unknown LRT variant/norm {variant}/{norm}; choose biased or unbiased "
                         "and none or max")
    if isinstance(samples, bool) or not isinstance(samples, int) or not 1 <= samples <= 20:
        raise ValueError(f"samples must be an int in 1..20, not {samples!r}")
    say = progress or (lambda m: None)
    label = LRT_BENCH_RUNS[(variant, norm)]
    st = replace(lrt_online.BENCHMARK_RUNS[label], lr=lrt_online.DEFAULT_LR[label])
    t0 = time.time()
    model = lrt_model.pretrained(config, 0)[0]
    cl = compile_lrt(model.shapes, st, getattr(model, "geometry", None))
    conv = max(cl.pixels) > 1
    # a convolutional model's sample program ends with its pixel LOOPs: cut after the one-pixel
    # layers' reductions ("dense") too, the rest is the LOOPs ("conv_pixels")
    phases = PHASES + (("dense",) if conv else ())
    rest = "conv_pixels" if conv else "reduce_rotate"
    ins = cl.sample.instructions
    progs = {k: Program(ins[:cl.phase_ends[k]] + [End()], cl.sample.store_sizes, cl.memory_map)
             for k in phases}
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
        for k in (phases if i == 0 else ()) + ("sample",):
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
    reads = {}
    for name, period, layers in cl.readout_schedule:
        want, rres, golden = interpret_traced(cl.readouts[name], image)
        if rres.error:
            raise RuntimeError(f"the golden interpreter stopped the {name} program: "
                               f"{rres.message}")
        sess.program(cl.readouts[name].words())
        sess.run(name, expect=want, golden=golden)
        reads[name] = (rres, want, period, layers)
        image = want
    depth = sess.rom_depth()
    say(f"{config} {label}: " + " + ".join(f"{len(p.instructions)} ({k})"
                                           for k, p in cl.programs.items())
        + f" instructions, stores {dict(sizes)}; building the accelerator ({lanes} lanes)")
    build = build_top(hw, f"ttrain_lrt_{config.replace('-', '_')}_l{lanes}_s{slots}",
                      rom_depth=depth)
    build_s = time.time() - t0 - golden_s
    say(f"running {samples} sample(s), the first also cut after each phase, and each read-out "
        "once")
    s0 = time.time()
    out = run_top(build, sess, test_dir=Path(workdir or tempfile.mkdtemp(prefix="lrt-bench-")),
                  timeout=4 * 3600)
    sim_s = time.time() - s0
    entries = []
    cuts = {k: r["cycles"] for k, r in zip(phases, out)}
    for i in range(samples):
        cycles = out[len(phases) + i]["cycles"]
        entry = {"sample": i, "cycles": cycles, "verified_rerun": i > 0}
        if i == 0:                       # the cuts split the first (passes included) run
            split, prev = {}, 0
            for k in phases:
                split[k] = cuts[k] - prev
                prev = cuts[k]
            split[rest] = cycles - prev
            entry["phase_cycles"] = split
        macs = int(stats[i]["sample"].macs)
        entries.append({**entry, "macs": macs, "ideal_cycles": -(-macs // lanes),
                        "utilization": -(-macs // lanes) / cycles,
                        "instructions_executed": int(stats[i]["sample"].instructions),
                        "bit_exact": True})
    per_sample = entries[-1]["cycles"]
    # the static and check passes of the sample program, paid again after every read-out
    # (the host reloads it); unknown (0) with one sample
    passes = entries[0]["cycles"] - per_sample
    n = len(stream)
    readouts = {}
    for (name, (rres, want, period, layers)), r in zip(reads.items(), out[-len(reads):]):
        readouts[name] = {"cycles": r["cycles"], "macs": int(rres.macs), "layers": layers,
                          "every_samples": period, "per_stream": n // period,
                          "written": [bool(cl.get_f32(want, f"written{l}")[0]) for l in layers],
                          "bit_exact": True}
    reloads = n // min(p for _, p, _ in cl.readout_schedule)
    stream_cycles = n * per_sample + reloads * passes + sum(
        v["per_stream"] * v["cycles"] for v in readouts.values())
    report = {"config": config, "run": label, "settings": asdict(st), "lanes": lanes,
              "slots": slots, "pixels": cl.pixels,
              "instructions": {k: len(p.instructions) for k, p in cl.programs.items()},
              "store_sizes": dict(sizes), "entries": entries,
              "readout": readouts["readout"], "readouts": readouts,
              "sample_passes_cycles": passes,
              "stream": {"samples": n, "readouts": {k: v["per_stream"] for k, v in
                                                    readouts.items()},
                         "cycles": stream_cycles,
                         "seconds_at_300MHz": stream_cycles / (_MHZ * 1e6)},
              "us_per_sample_at_300MHz": per_sample / _MHZ,
              "seconds": {"build": round(build_s, 1), "simulation": round(sim_s, 1),
                          "golden": round(golden_s, 1)}}
    if out_json:
        Path(out_json).write_text(json.dumps(report, indent=1))
    return report
