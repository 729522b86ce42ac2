"""``ttrain train`` for the int8 CNN presets and the fixed-point digits MLP: float pre-training
on clean digits, the quantized zeroth-order rule (``--rule zo``) adapting to digits-C with the
back-propagation references, and online low-rank training (``--rule lrt``) with its SGD and
bias-only baselines on the digits-drift stream (``--data digits-drift``)."""

import json
import os


def add_arguments(p):
    g = p.add_argument_group("int8 CNN presets (digits-cnn): --data digits | digits-c")
    g.add_argument("--rule", choices=("sgd", "zo", "lrt"), default="sgd",
                   help="sgd: back-propagation (float pre-training of a CNN preset on clean "
                        "digits; the transformer presets' SGD; with --data digits-drift the "
                        "online 8-bit SGD baseline of digits-mlp); zo: quantized zeroth-order "
                        "adaptation of the int8 model to digits-C, beside float and int8 "
                        "back-propagation fine-tuning of the same model on the same data; lrt: "
                        "online low-rank training of digits-mlp or digits-lrt-cnn on "
                        "digits-drift")
    g.add_argument("--corruption", metavar="NAME",
                   help="--rule zo: one digits-C corruption (default: all 16, about 1.5 min each)")
    g.add_argument("--runs", metavar="A,B",
                   help="--rule zo: comma-separated subset of bp-float, bp-int8, zo-wp, zo-np, "
                        "zo-mixed, zo-sparse (default all)")
    g.add_argument("--zo-lr", type=float, metavar="LR",
                   help="--rule zo: (peak) learning rate of every ZO run of --runs (default: "
                        "each run's, golden/adapt.py ZO_RUNS)")
    g.add_argument("--zo-schedule", metavar="NAME",
                   help="--rule zo: learning-rate schedule of every ZO run of --runs: constant, "
                        "cosine, linear or warmup_linear (default: each run's, constant); the "
                        "per-step rate is host data, so it runs compiled too")
    g.add_argument("--zo-warmup", type=float, metavar="W",
                   help="--zo-schedule warmup_linear: fraction of the run over which the rate "
                        "rises to its peak before the linear decay (default 0.1)")
    g.add_argument("--json", metavar="FILE", dest="json_out",
                   help="--rule zo: write the table (per corruption and averaged) as JSON; "
                        "--data digits-drift: the run's result (accuracies, writes per cell "
                        "with their histogram, per-layer counters)")
    g = p.add_argument_group(
        "online training of digits-mlp and digits-lrt-cnn: --data digits-drift",
        "one pass over the stream, predicting each sample before training on it; --seed "
        "chooses the stream and the unbiased variant's random signs (the model is always the "
        "seed-0 pre-training); --lr is the weights' rate (default: tuned per rule, "
        "docs/lrt.md), biases use 0.01")
    g.add_argument("--variant", metavar="biased|unbiased", default=None,
                   help="--rule lrt: biased (top-r) or unbiased (optimal Kronecker sum with "
                        "seeded random signs) rank reduction (default biased)")
    g.add_argument("--norm", metavar="none|max", default=None,
                   help="--rule lrt: gradient max-norm of the factors at the read-out (default "
                        "none)")
    g.add_argument("--rank", type=int, metavar="R", help="--rule lrt: rank (default 4)")
    g.add_argument("--eff-batch", type=int, metavar="B",
                   help="--rule lrt and --accumulate: samples per weight read-out of a dense "
                        "layer (default 100, the paper's)")
    g.add_argument("--conv-batch", type=int, metavar="B",
                   help="--rule lrt and --accumulate, digits-lrt-cnn: images per weight "
                        "read-out of a convolution (default 10, the paper's)")
    g.add_argument("--accumulate", action="store_true",
                   help="--rule sgd: the SGD baseline with a weight-sized gradient accumulator "
                        "read out every --eff-batch samples")
    g.add_argument("--bias-only", action="store_true",
                   help="--rule sgd: train the biases only (weights never written)")
    g.add_argument("--rounding", metavar="nearest|stochastic", default=None,
                   help="--rule sgd at batch 1: round the 8-bit weight step to nearest "
                        "(default) or stochastically (seeded, unbiased: the SGD that keeps "
                        "learning below one LSB, and writes)")
    g.add_argument("--segments", type=int, metavar="K",
                   help="digits-drift: corruptions in the stream (default 4)")
    g.add_argument("--segment-len", type=int, metavar="N",
                   help="digits-drift: samples per corruption (default 750)")


_ONLINE_FLAGS = ("variant", "norm", "rank", "eff_batch", "conv_batch", "segments",
                 "segment_len", "rounding")
_ZO_FLAGS = ("zo_lr", "zo_schedule", "zo_warmup")


def zo_overrides(args):
    """``ZOSettings`` fields set by ``--zo-lr``, ``--zo-schedule`` and ``--zo-warmup``."""
    return {k: v for k, v in (("lr", args.zo_lr), ("schedule", args.zo_schedule),
                              ("warmup", args.zo_warmup)) if v is not None}


def _write_checkpoint(out, model):
    """The pre-trained float model as ``out/best.npz`` (``--out``; nothing when None)."""
    if out:
        from ttrain.golden import adapt
        os.makedirs(out, exist_ok=True)
        path = os.path.join(out, "best.npz")
        adapt.save_checkpoint(path, model)
        print(f"wrote {path} (load it with --init)")


def is_cnn(name):
    from ttrain.golden.lrt_model import LRT_PRESETS
    from ttrain.golden.qnn import CNN_PRESETS
    return name in CNN_PRESETS or name in LRT_PRESETS


def _flag(name):
    return "--" + name.replace("_out", "").replace("_", "-")


def _check_online(args):
    """Flags of the online runs (digits-mlp, digits-lrt-cnn); ValueError naming the flag to
    change."""
    from .commands import check_int, check_output_file, check_positive_float, check_seed
    check_seed("--seed", args.seed)
    check_output_file("--json", args.json_out)
    check_positive_float("--lr", args.lr)
    for flag in ("rank", "eff_batch", "conv_batch", "segments", "segment_len"):
        check_int(_flag(flag), getattr(args, flag), 1)
    if args.segments is not None and args.segments > 16:
        raise ValueError("--segments must be at most 16 (one per digits-C corruption)")
    if args.seed >= 1 << 32:
        raise ValueError(f"--seed must be below 2**32 for the online runs, got {args.seed}")
    chip = args.engine in ("interpreter", "rtl")
    if chip and args.rule != "lrt":
        raise ValueError(f"--engine {args.engine} runs the compiled low-rank training programs "
                         f"(--rule lrt); the {_online_label(args)} baseline runs on --engine "
                         "golden only")
    if args.lanes is not None and args.engine != "rtl":
        raise ValueError("--lanes goes with --engine rtl (the simulated chip)")
    for flag in ("batch_size", "schedule", "clip", "train_sentences", "max_steps", "epochs",
                 "corruption", "runs", "out") + _ZO_FLAGS:
        if getattr(args, flag, None) is not None:
            raise ValueError(f"{_flag(flag)} does not apply to the online runs on digits-drift "
                             "(one pass over the stream)")
    from ttrain.golden.lrt import VARIANTS
    from ttrain.golden.lrt_model import MLP_PRESETS
    from ttrain.golden.lrt_online import NORMS
    if args.variant is not None and args.variant not in VARIANTS:
        raise ValueError(f"--variant {args.variant!r} is not a low-rank variant; choose "
                         f"{' or '.join(VARIANTS)}")
    if args.norm is not None and args.norm not in NORMS:
        raise ValueError(f"--norm {args.norm!r} is not a gradient norm; choose "
                         f"{' or '.join(NORMS)}")
    from ttrain.golden.lrt_online import ROUNDINGS
    if args.rounding is not None and args.rounding not in ROUNDINGS:
        raise ValueError(f"--rounding {args.rounding!r} is not a rounding; choose "
                         f"{' or '.join(ROUNDINGS)}")
    if args.rounding is not None and (args.rule != "sgd" or args.accumulate or args.bias_only):
        raise ValueError("--rounding applies to the 8-bit SGD baseline at batch 1 (--rule sgd "
                         "without --accumulate or --bias-only)")
    if args.rule == "lrt":
        for flag in ("accumulate", "bias_only"):
            if getattr(args, flag):
                raise ValueError(f"{_flag(flag)} applies to --rule sgd (the baselines), not "
                                 "--rule lrt")
    else:
        for flag in ("variant", "norm", "rank"):
            if getattr(args, flag) is not None:
                raise ValueError(f"{_flag(flag)} applies to --rule lrt only")
        if args.accumulate and args.bias_only:
            raise ValueError("--accumulate and --bias-only are two different baselines; pass "
                             "one of them")
        for flag in ("eff_batch", "conv_batch"):
            if getattr(args, flag) is not None and not args.accumulate:
                raise ValueError(f"{_flag(flag)} applies to --rule lrt and --rule sgd "
                                 "--accumulate")
    if args.conv_batch is not None and args.config in MLP_PRESETS:
        raise ValueError(f"--conv-batch sets the read-out of convolutions; {args.config} has "
                         "dense layers only (use --eff-batch)")
    if args.init is not None and not os.path.isfile(args.init):
        raise ValueError(f"--init {args.init} does not exist: pass a best.npz written by "
                         f"`ttrain train --config {args.config} --data digits --out DIR`")


def _online_label(args):
    if args.rule == "lrt":
        return f"lrt {args.variant or 'biased'}/{args.norm or 'none'}"
    return "sgd accumulator" if args.accumulate else "bias only" if args.bias_only \
        else "sgd stochastic" if args.rounding == "stochastic" else "sgd batch 1"


def run_mlp(args):
    """``--config digits-mlp`` or ``digits-lrt-cnn``: pre-training (``--data digits``) or an
    online run."""
    from dataclasses import replace
    from ttrain.golden import adapt, digits, drift, lrt_model, lrt_online
    cfg = lrt_model.LRT_PRESETS[args.config]
    if args.rule == "zo":
        raise ValueError(f"--rule zo trains the int8 CNN preset digits-cnn; {cfg.name} trains "
                         "with --rule lrt or sgd on --data digits-drift")
    online = args.data == "digits-drift"
    if not online and not (args.rule == "sgd" and args.data == "digits"):
        alt = " or digits (pre-training)" if args.rule == "sgd" else ""
        raise ValueError(f"--rule {args.rule} with {cfg.name} takes --data digits-drift (the "
                         f"online stream){alt}, not {args.data!r}")
    if not online:
        for flag in _ONLINE_FLAGS + ("json_out", "accumulate", "bias_only"):
            if getattr(args, flag) not in (None, False):
                raise ValueError(f"{_flag(flag)} applies to the online runs (--data "
                                 "digits-drift) only")
        _check(args)
    else:
        _check_online(args)
    if args.init is not None:
        model = adapt.load_checkpoint(args.init, cfg)
        clean = digits.load_digits_clean("pretrain")
        fixed, shift, _ = lrt_model.quantize_fixed(model, clean.val.images, clean.val.labels)
        test = float((fixed.predict(lrt_model.quantize_input(clean.test.images))
                      == clean.test.labels).mean())
        print(f"float model of {cfg.name} from {args.init}")
    else:
        model, rec = adapt.pretrain(cfg, seed=args.seed if not online else 0)
        clean = digits.load_digits_clean("pretrain")
        fixed, shift, _ = lrt_model.quantize_fixed(model, clean.val.images, clean.val.labels)
        test = float((fixed.predict(lrt_model.quantize_input(clean.test.images))
                      == clean.test.labels).mean())
        print(f"{cfg.name}: {cfg.n_params:,} parameters; float pre-training on clean digits "
              f"({adapt.PRETRAIN['epochs']} epochs): test {100 * rec['test']:.1f}%")
    print(f"fixed-point model (8-bit weights and activations, 16-bit biases, power-of-two "
          f"LSBs, hidden shift{'s' if isinstance(shift, (tuple, list)) else ''} "
          f"{list(shift) if isinstance(shift, (tuple, list)) else shift}): clean test "
          f"{100 * test:.1f}%")
    if not online:
        _write_checkpoint(args.out, model)
        return 0
    kw = {k: v for k, v in (("segments", args.segments), ("segment_len", args.segment_len))
          if v is not None}
    stream = drift.make_stream(args.seed, **kw)
    label = _online_label(args)
    st = lrt_online.BENCHMARK_RUNS[label]
    st = replace(st, seed=args.seed, lr=lrt_online.default_lr(cfg.name)[label] if args.lr is
                 None else args.lr, rank=args.rank or st.rank, batch=args.eff_batch or st.batch,
                 conv_batch=args.conv_batch or st.conv_batch)
    print(f"digits-drift seed {args.seed}: {' -> '.join(stream.corruptions)} (severity 5), "
          f"{len(stream):,} samples; held-out test: {stream.corruptions[-1]} (400 images)")
    conv = cfg.name not in lrt_model.MLP_PRESETS
    batches = f"effective batch {st.batch}" + (f" (dense), {st.conv_batch} images (conv)"
                                                if conv else "")
    detail = f", rank {st.rank}, {batches}" if st.rule == "lrt" else \
        f", {batches}" if st.rule == "sgd-accum" else ""
    print(f"{label}{detail}, lr {st.lr:g} (biases {st.bias_lr:g})")
    stepper = None
    if args.engine in ("interpreter", "rtl"):
        from ttrain.golden.lrt_compiler import InterpretedLRT
        stepper = InterpretedLRT
        where = "the golden interpreter"
        if args.engine == "rtl":
            from ttrain.platforms.host.lrt_chip import ChipLRT
            lanes = 4 if args.lanes is None else args.lanes
            chips = []

            def chip_stepper(model, settings):
                chips.append(ChipLRT(model, settings, lanes=lanes,
                                     progress=lambda m: print(m, flush=True)))
                return chips[-1]
            stepper = chip_stepper
            where = ("the simulated chip (Verilator), checked against the interpreter after "
                     "every program")
        print(f"runs the compiled programs (golden/lrt_compiler.py: one per sample, one per "
              f"read-out) on {where}")
    r = lrt_online.run_online(fixed, stream, st, stepper=stepper)
    if args.engine == "rtl" and chips and chips[0].cycles["sample"]:
        c = chips[0].cycles
        reads = [f"{sum(v) / len(v):,.0f} per {name.replace('_', ' ')}"
                 for name, v in c.items() if name != "sample" and v]
        print(f"chip cycles: {sum(c['sample']) / len(c['sample']):,.0f} per sample, "
              + (", ".join(reads) if reads else "no read-out verified"))
    w = r["writes"]
    print(f"online accuracy {100 * r['online_acc']:.1f}%  final accuracy "
          f"{100 * r['final_acc']:.1f}% (before training {100 * r['before_acc']:.1f}%)")
    print(f"writes per weight cell: max {w['max']}, mean {w['mean']:.3g} ({w['cells']:,} "
          "cells)")
    hist = ", ".join(f"{n}: {c:,}" for n, c in enumerate(w["histogram"]) if c)
    print(f"  cells by number of writes: {hist}")
    if conv and st.rule == "sgd":
        wp = r["writes_paper_count"]
        print(f"  as the authors' code counts (a conv cell once per output pixel with non-zero "
              f"input and gradient): max {wp['max']:,}, mean {wp['mean']:.4g}")
    names = [n.name for n in cfg.nodes if n.kind == "conv"]
    for name, layer in zip(names, r["layers"]):
        fed = "pixel-samples" if layer["pixels"] > 1 else "samples"
        extra = f", {layer['skipped']:,} {fed} skipped" if st.rule == "lrt" else ""
        print(f"  {name} {layer['shape'][0]}x{layer['shape'][1]} ({layer['pixels']} output "
              f"pixel{'s' if layer['pixels'] > 1 else ''}): {layer['weight_writes']} "
              f"weight writes{extra}, aux memory {layer['aux_words']:,} words, writes per "
              f"cell max {layer['writes']['max']} mean {layer['writes']['mean']:.3g}")
    if args.json_out:
        from ttrain.golden.train import write_atomically
        rec = {"config": cfg.name, "label": label, "stream": {
            "seed": args.seed, "corruptions": list(stream.corruptions), "samples": len(stream)},
            **r}
        text = json.dumps(rec, indent=1)
        write_atomically(args.json_out, lambda f: f.write(text.encode()))
        print(f"wrote {args.json_out}")
    return 0


def _check(args):
    from .commands import check_int, check_output_dir, check_output_file, check_seed
    from ttrain.golden import adapt, digits
    check_seed("--seed", args.seed)
    check_int("--epochs", args.epochs, 1)
    check_output_dir("--out", args.out)
    check_output_file("--json", args.json_out)
    chip = args.rule == "zo" and args.engine in ("interpreter", "rtl")
    for flag in ("engine", "lanes", "batch_size", "schedule", "clip", "train_sentences",
                 "max_steps"):
        v = getattr(args, flag, None)
        if v is None or (flag == "engine" and (v == "golden" or chip)) or \
                (flag == "lanes" and args.engine == "rtl" and chip):
            continue
        raise ValueError(f"--{flag.replace('_', '-')} does not apply to the CNN preset "
                         f"{args.config} with --rule {args.rule}" +
                         (" (--engine interpreter|rtl runs the compiled ZO step: --rule zo)"
                          if flag == "engine" else "") +
                         (" (--lanes goes with --engine rtl)" if flag == "lanes" else ""))
    from dataclasses import replace
    over = zo_overrides(args)
    if over:
        from ttrain.golden import zo
        if args.rule != "zo":
            raise ValueError("--zo-lr, --zo-schedule and --zo-warmup apply to --rule zo only")
        if args.zo_warmup is not None and args.zo_schedule != "warmup_linear":
            raise ValueError("--zo-warmup goes with --zo-schedule warmup_linear")
        default_runs = "zo-wp" if chip else ",".join(adapt.ZO_RUNS)
        zo_runs = [r for r in (args.runs or default_runs).split(",") if r in adapt.ZO_RUNS]
        if not zo_runs:
            raise ValueError("--zo-lr, --zo-schedule and --zo-warmup change the ZO runs; --runs "
                             f"{args.runs} has none (choose among {', '.join(adapt.ZO_RUNS)})")
        if args.zo_schedule is not None and args.zo_schedule not in zo.SCHEDULES:
            raise ValueError(f"--zo-schedule {args.zo_schedule!r} is not a schedule; choose "
                             f"{', '.join(zo.SCHEDULES)}")
        for r in zo_runs:
            try:
                replace(adapt.ZO_RUNS[r], **over)
            except ValueError as e:
                flag = "--zo-lr" if "learning rate" in str(e) else "--zo-warmup"
                raise ValueError(f"{flag}: {e}") from None
    if chip:
        from ttrain.golden.zo_compiler import _check_settings
        for r in (args.runs or "zo-wp").split(","):
            if r in adapt.ZO_RUNS:
                try:
                    _check_settings(replace(adapt.ZO_RUNS[r], **over).at_step(0, 1)
                                    if over else adapt.ZO_RUNS[r].at_step(0, 1))  # schedule: data
                except ValueError as e:
                    raise ValueError(f"--runs {r} cannot run with --engine {args.engine}: {e}; "
                                     "choose zo-wp, zo-np or zo-mixed (or use --engine "
                                     "golden)") from None
        if args.lanes is not None and (args.lanes < 4 or args.lanes & (args.lanes - 1)):
            raise ValueError(f"--lanes must be a power of two >= 4, not {args.lanes}")
    want = "digits-c" if args.rule == "zo" else "digits"
    if args.data != want:
        raise ValueError(f"--rule {args.rule} with {args.config} takes --data {want} (the built-in "
                         f"8x8 digits{'-C corruptions' if want == 'digits-c' else ''}), not "
                         f"{args.data!r}")
    if args.rule == "sgd":
        for flag in ("corruption", "runs", "json_out", "init"):
            if getattr(args, flag) is not None:
                raise ValueError(f"--{flag.replace('_out', '')} applies to --rule zo only")
    if args.corruption is not None and args.corruption not in digits.CORRUPTIONS:
        raise ValueError(f"--corruption {args.corruption!r} is not a digits-C corruption; "
                         f"choose one of {', '.join(digits.CORRUPTIONS)}")
    if args.runs is not None:
        labels = list(adapt.REFERENCE_LR) + list(adapt.ZO_RUNS)
        bad = [r for r in args.runs.split(",") if r not in labels]
        if bad:
            raise ValueError(f"--runs: unknown run(s) {', '.join(bad)}; choose among "
                             f"{', '.join(labels)}")
    if args.init is not None and not os.path.isfile(args.init):
        raise ValueError(f"--init {args.init} does not exist: pass a best.npz written by "
                         f"`ttrain train --config {args.config} --data digits --out DIR`")


def _chip_stepper(args):
    """``settings -> stepper`` of the compiled ZO step for ``--engine``."""
    if args.engine == "interpreter":
        from ttrain.golden.zo_compiler import InterpretedZO
        return InterpretedZO
    from ttrain.platforms.host.zo_chip import ChipZO
    lanes = 4 if args.lanes is None else args.lanes
    return lambda s: ChipZO(s, lanes=lanes, progress=lambda m: print(m, flush=True))


def run(args):
    from ttrain.golden import adapt, digits, lrt_model, qnn, zo
    if args.config in lrt_model.LRT_PRESETS:
        return run_mlp(args)
    if args.rule == "lrt" or args.data == "digits-drift":
        raise ValueError(f"--rule lrt and --data digits-drift train the fixed-point models of "
                         f"the paper ({', '.join(lrt_model.LRT_PRESETS)}); use one of them, not "
                         f"{args.config}")
    for flag in _ONLINE_FLAGS + ("accumulate", "bias_only"):
        if getattr(args, flag) not in (None, False):
            raise ValueError(f"{_flag(flag)} applies to the online runs of "
                             f"{' and '.join(lrt_model.LRT_PRESETS)} (--data digits-drift) only")
    cfg = qnn.get_cnn_config(args.config)
    _check(args)
    if cfg.input_shape != (8, 8, 1):
        raise ValueError(f"{cfg.name} ({cfg.note}) cannot train on the digits; use digits-cnn")
    if args.init is not None:
        model = adapt.load_checkpoint(args.init, cfg)
        print(f"float model of {cfg.name} from {args.init}")
    else:
        model, rec = adapt.pretrain(cfg, seed=args.seed)
        print(f"{cfg.name}: {cfg.n_params:,} parameters, {cfg.macs:,} MACs per image; float "
              f"pre-training on clean digits ({adapt.PRETRAIN['epochs']} epochs): test "
              f"{100 * rec['test']:.1f}%")
    q = adapt.quantized(model)
    clean = digits.load_digits_clean("pretrain")
    print(f"int8 model (per-channel weights, calibrated activations): clean test "
          f"{100 * zo.evaluate(q, clean.test.images, clean.test.labels):.1f}%")
    if args.rule == "sgd":
        _write_checkpoint(args.out, model)
        return 0
    corruptions = [args.corruption] if args.corruption else list(digits.CORRUPTIONS)
    runs = None if args.runs is None else args.runs.split(",")
    stepper = None
    if args.engine in ("interpreter", "rtl"):
        runs = runs or ["zo-wp"]
        stepper = _chip_stepper(args)
        where = ("the golden interpreter" if args.engine == "interpreter" else
                 "the simulated chip (Verilator), checked against the interpreter every step")
        print(f"the ZO runs execute the compiled step (golden/zo_compiler.py) on {where}; the "
              "back-propagation references run on the golden fast path")
    epochs = 10 if args.epochs is None else args.epochs
    over = zo_overrides(args)
    if over:
        print("ZO runs with " + ", ".join(f"{k}={v}" for k, v in over.items()) +
              " (instead of golden/adapt.py ZO_RUNS)")
    table = {}
    labels = runs or (list(adapt.REFERENCE_LR) + list(adapt.ZO_RUNS))
    print(f"adaptation, {epochs} epochs, batch 50, seed {args.seed}; test accuracy % of the "
          "best-validation epoch (before -> after)")
    print(f"{'corruption':18s}" + "".join(f"{lab:>16s}" for lab in labels))
    for c in corruptions:
        table[c] = adapt.adapt_corruption(model, q, c, runs=runs, epochs=epochs,
                                          seed=args.seed, stepper=stepper,
                                          overrides=over or None)
        row = "".join(f"{100 * r['before']:6.1f} -> {100 * r['after']:5.1f}"
                      for r in table[c].values())
        print(f"{c:18s}{row}", flush=True)
    mean = adapt.summarize(table)
    if len(corruptions) > 1:
        print(f"{'mean':18s}" + "".join(f"{100 * m['before']:6.1f} -> {100 * m['after']:5.1f}"
                                        for m in mean.values()))
    if args.json_out:
        from ttrain.golden.train import write_atomically
        text = json.dumps({"config": cfg.name, "epochs": epochs, "seed": args.seed,
                           "zo_overrides": over, "per_corruption": table, "mean": mean},
                          indent=1)
        write_atomically(args.json_out, lambda f: f.write(text.encode()))
        print(f"wrote {args.json_out}")
    return 0
