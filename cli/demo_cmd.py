"""``ttrain demo``: a model learning on the simulated accelerator, bit-exact every step.

Elaborates the accelerator for the preset (Amaranth -> Verilog -> Verilator), compiles one
training step of the whole model (``golden/model_compiler.py``: forward, backward and the SGD
update as one program), and trains on the built-in generated intent data set
(:func:`ttrain.golden.data.generate_dataset`) at batch 1, the step's learning rate written as
sample data each step (the preset's schedule). The steps run in simulation sessions of
``--per-session`` steps; after every step the host compares the chip's loss and logits with the
golden interpreter's, bit for bit, and at the end of every session every word of every store
(``ChipRun(check="outputs")``), so the parameters of the table's accuracy column are exactly the
ones in the chip's param store. Test accuracy is computed on the host (the float32 fast path's
forward pass on those parameters): the chip only trains. Writes the per-step report as JSON and
the loss curve as a PNG.
"""

import json
import os
import time

#: Where ``make demo`` writes its files.
DEFAULT_PLOT = os.path.join("build", "demo-loss.png")
MAX_STEPS = 2000
#: A session writes the image once and checks it whole at its end; the ROM of
#: :func:`ttrain.platforms.host.chip.build_model_top` holds 256 steps of sample words.
MAX_PER_SESSION = 200


def register(sub):
    p = sub.add_parser(
        "demo", help="watch a model learn on the simulated accelerator (Verilator), bit-exact "
                     "every step",
        description="Build the accelerator for a preset under Verilator and train it on the "
                    "built-in data set, batch 1, the learning rate as sample data; check loss "
                    "and logits after every step and every store word after every session "
                    "against the golden interpreter; report test accuracy of the chip's "
                    "parameters before, during and after, the loss per step, a PNG loss curve, "
                    "cycles and the on-chip memory map.")
    p.add_argument("--config", default="demo", metavar="NAME",
                   help="preset (default demo; paper presets need a long build and run)")
    p.add_argument("--steps", type=int, default=None, metavar="N",
                   help="training steps (default: the preset's demo_steps, else 12)")
    p.add_argument("--lr", type=float, default=None, metavar="LR",
                   help="peak learning rate (default: the preset's lr)")
    p.add_argument("--lanes", type=int, default=4, metavar="P",
                   help="engine lanes = store banks, a power of two >= 4 (default 4)")
    p.add_argument("--seed", type=int, default=0, metavar="S",
                   help="initialization and data-order seed (default 0)")
    p.add_argument("--per-session", type=int, default=40, metavar="K",
                   help=f"steps per simulation session, 1..{MAX_PER_SESSION} (default 40); each "
                        f"session ends with every store word checked")
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON here")
    p.add_argument("--plot", metavar="FILE.png", default=DEFAULT_PLOT,
                   help=f"loss curve PNG (default {DEFAULT_PLOT})")
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


def demo_steps(cfg, steps=None):
    """Return the number of demo steps: ``steps``, else the preset's ``extra["demo_steps"]``,
    else 12; ValueError outside 1..MAX_STEPS."""
    n = cfg.extra.get("demo_steps", 12) if steps is None else steps
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_STEPS:
        raise ValueError(f"--steps must be in 1..{MAX_STEPS}, got {n!r}")
    return n


def moving_average(values, window):
    """Trailing mean of the last ``window`` values at each index (fewer at the start)."""
    import numpy as np
    v = np.asarray(values, dtype=np.float64)
    c = np.concatenate([[0.0], np.cumsum(v)])
    idx = np.arange(1, len(v) + 1)
    lo = np.maximum(0, idx - window)
    return (c[idx] - c[lo]) / (idx - lo)


def plot_demo(rows, sessions, path, *, title, chance, window=25):
    """Write the loss curve (per step and its trailing mean) with the test accuracy of the
    chip's parameters after each session (right axis) as a PNG; return ``path``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    steps = [r["step"] + 1 for r in rows]
    losses = [r["loss_chip"] for r in rows]
    fig = Figure(figsize=(9, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    ax.plot(steps, losses, ".", color="tab:blue", alpha=0.35, markersize=3,
            label="loss per step (chip = golden interpreter, bit for bit)")
    ax.plot(steps, moving_average(losses, window), "-", color="tab:blue", linewidth=2,
            label=f"mean of the last {window} steps")
    ax.set_xlabel("training step (batch 1)")
    ax.set_ylabel("cross-entropy loss")
    ax.set_xlim(0, max(steps) + 1)
    ax.grid(alpha=0.3)
    acc = ax.twinx()
    acc.plot([s["step"] for s in sessions], [100 * s["test_acc"] for s in sessions], "s-",
             color="tab:red", label="test accuracy of the chip's parameters")
    acc.axhline(100 * chance, color="tab:red", linestyle=":", linewidth=1,
                label=f"chance ({100 * chance:.0f}%)")
    acc.set_ylabel("test intent accuracy (%)", color="tab:red")
    acc.set_ylim(0, 100)
    lines = ax.get_legend_handles_labels()
    more = acc.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], loc="upper right", fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    from .golden.train import write_atomically
    write_atomically(path, lambda f: fig.savefig(f, format="png", dpi=110))
    return path


def _check_args(args):
    from .commands import check_output_file, check_seed
    if args.lanes < 4 or args.lanes & (args.lanes - 1):
        raise ValueError(f"--lanes must be a power of two >= 4, got {args.lanes}")
    if not 1 <= args.per_session <= MAX_PER_SESSION:
        raise ValueError(f"--per-session must be >= 1 and <= {MAX_PER_SESSION}, got "
                         f"{args.per_session}")
    if args.lr is not None and not (args.lr > 0 and args.lr < float("inf")):
        raise ValueError(f"--lr must be a positive finite number, got {args.lr}")
    if args.steps is not None:
        if not 1 <= args.steps <= MAX_STEPS:
            raise ValueError(f"--steps must be in 1..{MAX_STEPS}, got {args.steps}")
    check_seed("--seed", args.seed)
    check_output_file("--json", args.json)          # before the build, not after the run
    if not args.plot.endswith(".png"):
        raise ValueError(f"--plot {args.plot}: give a file name ending in .png")
    check_output_file("--plot", args.plot)


def run(args):
    from .golden.config import get_config
    from .golden.data import generate_dataset
    from .golden.model_compiler import compile_model
    from .platforms.host.chip import build_model_top, chip_config, model_hw, scheduled

    _check_args(args)
    t0 = time.time()
    base = get_config(args.config)
    steps = demo_steps(base, args.steps)
    dataset = generate_dataset(seed=0, seq_len=base.seq_len, vocab_size=base.vocab)
    cfg, notes = chip_config(base, dataset)
    lr = cfg.lr if args.lr is None else args.lr
    cm = compile_model(cfg, lr=lr)
    cm = scheduled(cm, model_hw(cm, lanes=args.lanes))   # the compiler's order for this chip
    intro(cfg, cm, dataset, lanes=args.lanes, per_session=args.per_session, steps=steps, lr=lr,
          notes=notes)
    print(f"building the accelerator ({args.lanes} lanes, special-function unit) under "
          f"Verilator; the first build takes a few minutes", flush=True)
    tb = time.time()
    build = build_model_top(cm, lanes=args.lanes)
    report = train_demo(cm, build, dataset, steps=steps, lr=lr, seed=args.seed,
                        per_session=args.per_session, lanes=args.lanes, plot=args.plot,
                        progress=not args.no_progress, build_seconds=time.time() - tb, t0=t0)
    if args.json:
        from .golden.train import write_atomically
        text = json.dumps(report, indent=1).encode("utf-8")
        write_atomically(args.json, lambda f: f.write(text))
    return 0


def intro(cfg, cm, dataset, *, lanes, per_session, steps, lr, notes=()):
    """Print the lines that tell a newcomer what the demo is doing."""
    from .golden import model as M
    from .golden.data import LABEL_NOISE
    schedule = cfg.extra.get("schedule", "constant")
    warmup = cfg.extra.get("warmup", 0.0)
    n_real = dataset.n_intents - 1                 # UNK is never a label of the generated set
    print("ttrain demo: a neural network learning on the simulated accelerator.")
    print(f"  The accelerator's RTL (Amaranth -> Verilog -> Verilator, {lanes} lanes) runs whole "
          f"training\n  steps -- forward, backward and SGD update of a tensor-train transformer "
          f"-- from its\n  on-chip memory, one sentence per step. After every step the host "
          f"checks the chip's loss\n  and logits bit for bit against the golden interpreter, "
          f"after every {per_session} steps every word\n  of every store: the parameters below "
          f"are the chip's.")
    print(f"  Task: {dataset.name}, {n_real} intents (chance {1 / n_real:.0%}), "
          f"{dataset.size('train')} training and\n  {dataset.size('test')} test sentences of "
          f"up to {cfg.seq_len - 1} words, {LABEL_NOISE:.0%} of the labels flipped.")
    print("  Host-only: the test accuracy (the host's float32 forward pass on the chip's "
          "parameters).")
    for note in notes:
        print(f"note: {note}")
    n = {k: hi - lo for k, (lo, hi) in cm.sections.items()}
    split = (f"forward {n['forward']}, backward {n['backward']} with each tensor's SGD update "
             f"fused in" if cm.fused_update else
             f"forward {n['forward']}, backward {n['backward']}, update {n['update']}")
    sched = (f"{schedule} from {lr:g}" + (f" after {warmup:.0%} warm-up" if warmup else "")
             if schedule != "constant" else f"constant {lr:g}")
    print(f"model: {cfg.name}, {M.num_params(cfg):,} parameters; one training step = "
          f"{len(cm.program.instructions)} instructions\n  ({split});\n  {steps} steps at batch 1, learning rate {sched} (sample data)")


def train_demo(cm, build, dataset, *, steps, lr, seed=0, per_session=40, lanes=4, plot=None,
               progress=False, build_seconds=0.0, t0=None, log=print):
    """Train ``cm`` (a CompiledModel) on ``build`` (:func:`~ttrain.platforms.host.chip.
    build_model_top`) for ``steps`` batch-1 steps of ``dataset``'s train split; print the
    session table, the summary, the loss per step; write the PNG ``plot``; return the report.

    Initial parameters: :func:`ttrain.golden.train.initial_params` of ``cm.cfg`` and ``seed``;
    data order: epochs of ``dataset.batches("train", 1, seed=default_rng([seed, 1]))`` (the
    order of ``ttrain train``); learning rates: :func:`ttrain.golden.train.lr_at` of the
    config's schedule over ``steps``."""
    import tempfile

    import numpy as np

    from .golden import model as M
    from .golden.train import evaluate, initial_params, lr_at
    from .platforms.host.chip import ChipRun

    t0 = time.time() if t0 is None else t0
    cfg = cm.cfg
    schedule = cfg.extra.get("schedule", "constant")
    warmup = cfg.extra.get("warmup", 0.0)
    chance = 1.0 / (dataset.n_intents - 1)
    params = initial_params(cfg, seed)
    fast = {k: v.copy() for k, v in params.items()}
    chip = ChipRun(cm, build, params, tempfile.mkdtemp(prefix="ttrain-demo-"), check="outputs")
    batches = []
    order = np.random.default_rng([seed, 1])
    while len(batches) < steps:                          # epochs of the train split, seeded
        for b in dataset.batches("train", cfg.batch, seed=order):
            batches.append(b)
            if len(batches) == steps:
                break
    rates = [lr_at(s, steps, lr, schedule, warmup) for s in range(steps)]
    before = evaluate(cfg, chip.params(), dataset, "test")
    sessions = [{"step": 0, "test_acc": before["intent_acc"], "test_loss": before["loss"]}]
    words = sum(int(v) for v in build.config["store_sizes"].values())
    log("")
    log(f"before training: test accuracy {before['intent_acc']:.1%} with the chip's initial "
        f"parameters (chance {chance:.0%})")
    log(f"{'steps':>11}  {'lr':>7}  {'mean loss':>9}  {'test acc':>8}  checked against the "
        f"golden interpreter")
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=steps, unit="step", desc="training on the simulated chip",
                   leave=False)
    rows = []
    for lo in range(0, steps, per_session):
        part, part_lr = batches[lo:lo + per_session], rates[lo:lo + per_session]
        res = chip.run_steps(part, part_lr)
        for b, r, rate in zip(part, res, part_lr):
            if not np.isfinite(r.loss):
                raise FloatingPointError(f"the loss of step {len(rows) + 1} is {r.loss}: lower "
                                         f"--lr (now {lr:g})")
            loss, grads, _ = M.forward_backward(cfg, fast, b)
            M.sgd_update(fast, grads, rate)
            ideal = -(-r.macs // lanes)
            rows.append({"step": len(rows), "lr": rate, "loss_chip": r.loss,
                         "loss_fast_path": float(loss), "intent": int(b["intent"][0]),
                         "predicted": int(np.argmax(r.logits[0])), "cycles": r.cycles,
                         "engine_cycles": r.engine_cycles, "ideal_cycles": ideal,
                         "utilization": ideal / r.cycles, "macs": r.macs,
                         "instructions": r.instructions, "bit_exact": True})
        test = evaluate(cfg, chip.params(), dataset, "test")
        sessions.append({"step": len(rows), "test_acc": test["intent_acc"],
                         "test_loss": test["loss"]})
        mean = float(np.mean([r["loss_chip"] for r in rows[lo:]]))
        if bar is not None:
            bar.clear()
        log(f"{lo + 1:>5}-{len(rows):<5}  {part_lr[0]:>7.4f}  {mean:>9.4f}  "
            f"{test['intent_acc']:>8.1%}  {len(part)} losses and logits, all {words:,} store "
            f"words: bit-exact")
        if bar is not None:
            bar.update(len(part))
    if bar is not None:
        bar.close()
    after = sessions[-1]
    window = min(25, steps)
    smooth = moving_average([r["loss_chip"] for r in rows], window)
    log("")
    log(f"after {steps} steps on the chip: test accuracy {before['intent_acc']:.1%} -> "
        f"{after['test_acc']:.1%} (chance {chance:.0%}); loss, mean of {window} steps: "
        f"{smooth[window - 1]:.3f} (steps 1-{window}) -> {smooth[-1]:.3f} (last {window})")
    if plot is not None:
        plot = plot_demo(rows, sessions, plot, chance=chance, window=window,
                         title=f"{cfg.name} trained on the simulated accelerator ({lanes} "
                               f"lanes), every step bit-exact: test accuracy "
                               f"{before['intent_acc']:.0%} -> {after['test_acc']:.0%}")
        log(f"loss curve: {plot}")
    log("loss per step (chip):")
    for i in range(0, len(rows), 20):
        log(f"  {i + 1:>4}: " + " ".join(f"{r['loss_chip']:.2f}" for r in rows[i:i + 20]))
    cyc = float(np.mean([r["cycles"] for r in rows]))
    util = float(np.mean([r["utilization"] for r in rows]))
    params_diff = max(float(np.abs(chip.params()[k] - fast[k]).max()) for k in fast)
    log(f"mean {cyc:,.0f} cycles per training step ({cyc / 250e6 * 1e6:.1f} us at 250 MHz), "
        f"MAC utilization {util:.1%} of {lanes} lanes; the float32 fast path, trained beside "
        f"it, ends {params_diff:.2e} away from the chip's parameters (rounding order only)")
    mem_lines, mem = memory_lines(cm.store_sizes, lanes)
    for line in mem_lines:
        log(line)
    total_s = time.time() - t0
    log(f"time: build {build_seconds:.0f} s, simulation {chip.sim_seconds:.0f} s, golden "
        f"interpreter {chip.golden_seconds:.0f} s, total {total_s:.0f} s")
    return {"config": cfg.name, "lanes": lanes, "seed": seed, "lr": lr, "schedule": schedule,
            "warmup": warmup, "per_session": per_session, "dataset": dataset.name,
            "chance": chance, "test_acc_before": before["intent_acc"],
            "test_acc_after": after["test_acc"], "sessions": sessions, "steps": rows,
            "memory": mem, "plot": plot, "mean_cycles": cyc, "mean_utilization": util,
            "max_param_diff": params_diff,
            "seconds": {"build": build_seconds, "simulation": chip.sim_seconds,
                        "golden": chip.golden_seconds, "total": total_s},
            "store_sizes": build.config["store_sizes"]}
