"""``ttrain demo``: train a preset on the simulated accelerator, every step checked bit-exactly.

Elaborates the accelerator for the config (Amaranth -> Verilog -> Verilator), compiles one
training step of the whole model (``golden/model_compiler.py``), runs ``--steps`` steps on the
built-in generated data set, compares every word of every on-chip store after every step with
the golden interpreter, and prints per step the loss (chip = interpreter, bit for bit) next to
the float32 fast path's loss for the same step, the cycles, the contraction engine's cycles
and utilization, then the on-chip memory map in BRAM/URAM blocks.
"""

import json
import time


def register(sub):
    p = sub.add_parser(
        "demo", help="train on the simulated accelerator (Verilator), bit-exact every step",
        description="Build the accelerator for a preset under Verilator, run training steps of "
                    "the whole model on the built-in data set, check every store word after "
                    "every step against the golden interpreter, and report loss, cycles, "
                    "utilization and the on-chip memory map.")
    p.add_argument("--config", default="tiny", metavar="NAME",
                   help="preset (default tiny; paper presets need a long build and run)")
    p.add_argument("--steps", type=int, default=12, metavar="N",
                   help="training steps (default 12)")
    p.add_argument("--lanes", type=int, default=4, metavar="P",
                   help="engine lanes = store banks, a power of two >= 4 (default 4)")
    p.add_argument("--seed", type=int, default=0, metavar="S",
                   help="initialization and data-order seed (default 0)")
    p.add_argument("--per-session", type=int, default=4, metavar="K",
                   help="steps per simulation session (default 4)")
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON here")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    from .debug_cmd import add_sim_debug_flags, with_sim_debug
    add_sim_debug_flags(p)
    p.set_defaults(func=with_sim_debug(run))


def memory_lines(store_sizes, lanes):
    """Lines describing the stores mapped onto the U50's BRAM/URAM (and the report dict)."""
    from .platforms.hw import round_store_words
    from .platforms.memory import fit_memory
    sizes = round_store_words(store_sizes, lanes)
    fit = fit_memory(sizes, lanes)
    best = fit["best"] or fit["auto"]
    lines = ["on-chip memory map (stores -> U50 RAM blocks, "
             f"{lanes} banks per store):"]
    for st in best["map"]["stores"]:
        lines.append(f"  {st['name']:8s} {st['words']:>10,} words  {st['style']:6s} "
                     f"RAMB36 {st['ramb36']:>4}  RAMB18 {st['ramb18']:>4}  URAM288 "
                     f"{st['uram288']:>4}")
    tot, left = best["map"]["total"], best["left"]
    lines.append(f"  total    {tot['words']:>10,} words ({tot['bytes'] / 2**20:.2f} MiB): "
                 f"RAMB36-equivalent {tot['ramb36_equiv']:g}, URAM288 {tot['uram288']}; left "
                 f"on the U50: {left['ramb36_equiv']:g} RAMB36, {left['uram288']} URAM288"
                 + ("" if fit["fits"] else "  (DOES NOT FIT)"))
    return lines, {"stores": best["map"]["stores"], "total": tot, "left": left,
                   "fits": fit["fits"]}


def run(args):
    import numpy as np

    from .golden import model as M
    from .golden.config import get_config
    from .golden.data import generate_dataset
    from .golden.model_compiler import compile_model
    from .platforms.host.chip import ChipRun, build_model_top, chip_config

    if args.steps < 1 or args.steps > 2000:
        raise ValueError(f"--steps must be in 1..2000, got {args.steps}")
    if args.lanes < 4 or args.lanes & (args.lanes - 1):
        raise ValueError(f"--lanes must be a power of two >= 4, got {args.lanes}")
    if args.per_session < 1:
        raise ValueError(f"--per-session must be >= 1, got {args.per_session}")
    from .commands import check_output_file, check_seed
    check_seed("--seed", args.seed)
    check_output_file("--json", args.json)          # before the build, not after the run
    t0 = time.time()
    base = get_config(args.config)
    dataset = generate_dataset(seed=0, seq_len=base.seq_len, vocab_size=base.vocab)
    cfg, notes = chip_config(base, dataset)
    for note in notes:
        print(f"note: {note}")
    cm = compile_model(cfg)
    prog = cm.program
    n = {k: hi - lo for k, (lo, hi) in cm.sections.items()}
    split = (f"forward {n['forward']}, backward {n['backward']} with each tensor's SGD update "
             f"fused in" if cm.fused_update else
             f"forward {n['forward']}, backward {n['backward']}, update {n['update']}")
    print(f"{cfg.name}: {M.num_params(cfg):,} parameters; one training step = "
          f"{len(prog.instructions)} instructions ({split}); data: {dataset.name}, "
          f"{dataset.size('train')} training sentences")
    mem_lines, mem = memory_lines(cm.store_sizes, args.lanes)
    print(f"building the accelerator ({args.lanes} lanes, special-function unit) under "
          f"Verilator; the first build takes a few minutes", flush=True)
    tb = time.time()
    build = build_model_top(cm, lanes=args.lanes)
    build_s = time.time() - tb
    params = M.init_params(cfg, np.random.default_rng(args.seed))
    fast = {k: v.copy() for k, v in params.items()}
    import tempfile
    chip = ChipRun(cm, build, params, tempfile.mkdtemp(prefix="ttrain-demo-"), check="all")
    batches = []
    for b in dataset.batches("train", cfg.batch, seed=np.random.default_rng([args.seed, 1])):
        batches.append(b)
        if len(batches) == args.steps:
            break
    bar = None
    if not args.no_progress:
        from tqdm import tqdm
        bar = tqdm(total=len(batches), unit="step", desc="training on the simulated chip")
    rows = []
    for lo in range(0, len(batches), args.per_session):
        part = batches[lo:lo + args.per_session]
        res = chip.run_steps(part)
        for b, r in zip(part, res):
            loss, grads, _ = M.forward_backward(cfg, fast, b)
            M.sgd_update(fast, grads, cm.lr)
            ideal = -(-r.macs // args.lanes)
            rows.append({"step": len(rows), "loss_chip": r.loss, "loss_fast_path": loss,
                         "cycles": r.cycles, "engine_cycles": r.engine_cycles,
                         "ideal_cycles": ideal, "utilization": ideal / r.cycles,
                         "engine_utilization": ideal / r.engine_cycles, "macs": r.macs,
                         "instructions": r.instructions, "bit_exact": True})
        if bar is not None:
            bar.update(len(part))
    if bar is not None:
        bar.close()
    print(f"\n{'step':>4}  {'loss (chip = golden interpreter)':>32}  {'loss (fast path)':>16}  "
          f"{'cycles':>9}  {'engine':>9}  {'util':>6}  check")
    for r in rows:
        print(f"{r['step']:>4}  {r['loss_chip']:>32.6f}  {r['loss_fast_path']:>16.6f}  "
              f"{r['cycles']:>9,}  {r['engine_cycles']:>9,}  {r['utilization']:>6.1%}  "
              f"every store word bit-exact")
    cyc = float(np.mean([r["cycles"] for r in rows]))
    util = float(np.mean([r["utilization"] for r in rows]))
    params_diff = max(float(np.abs(chip.params()[k] - fast[k]).max()) for k in fast)
    print(f"\nmean {cyc:,.0f} cycles per training step ({cyc / 250e6 * 1e6:.1f} us at 250 MHz), "
          f"MAC utilization {util:.1%} of {args.lanes} lanes; after {len(rows)} steps the chip's "
          f"parameters differ from the fast path's by at most {params_diff:.2e} (rounding "
          f"order only)")
    for line in mem_lines:
        print(line)
    total_s = time.time() - t0
    print(f"time: build {build_s:.0f} s, simulation {chip.sim_seconds:.0f} s, golden "
          f"interpreter {chip.golden_seconds:.0f} s, total {total_s:.0f} s")
    if args.json:
        report = {"config": cfg.name, "lanes": args.lanes, "steps": rows, "memory": mem,
                  "mean_cycles": cyc, "mean_utilization": util, "max_param_diff": params_diff,
                  "seconds": {"build": build_s, "simulation": chip.sim_seconds,
                              "golden": chip.golden_seconds, "total": total_s},
                  "store_sizes": build.config["store_sizes"]}
        from .golden.train import write_atomically
        text = json.dumps(report, indent=1).encode("utf-8")
        write_atomically(args.json, lambda f: f.write(text))
    return 0
