"""``ttrain train``: train a preset on a data directory or the built-in generated data set."""

import os


def register(sub):
    p = sub.add_parser(
        "train", help="train a config with plain SGD (golden model) and report intent accuracy",
        description="Train the tensorized transformer of a preset with plain SGD on the golden "
                    "NumPy model (or, with --engine, on the golden interpreter or the simulated "
                    "chip: one training loop). Without --data it uses the built-in generated "
                    "ATIS-like data set (seed 0). Prints one line per epoch and the dev and "
                    "test intent accuracy (first listed intent) of the best-dev epoch.")
    p.add_argument("--config", required=True, metavar="NAME",
                   help="preset name (see `ttrain plan --help` or golden/config.py)")
    p.add_argument("--data", metavar="DIR",
                   help="data directory in the ATIS/SNIPS layout (e.g. ../shared/data/atis); "
                        "default: the built-in generated data set")
    p.add_argument("--train-sentences", type=int, metavar="N",
                   help="without --data: sentences in the built-in data set's train split "
                        "(default 1200; dev and test stay 200)")
    p.add_argument("--epochs", type=int, metavar="N", help="epochs (default: the config's)")
    p.add_argument("--lr", type=float, metavar="X", help="peak learning rate (default: config's)")
    p.add_argument("--seed", type=int, default=0, metavar="S",
                   help="seed of initialization and shuffling (default 0)")
    p.add_argument("--batch-size", type=int, metavar="N",
                   help="sentences per SGD step (default: the config's batch; 1 = the paper)")
    p.add_argument("--schedule", choices=("constant", "linear"),
                   help="learning-rate schedule (default: the config's)")
    p.add_argument("--clip", type=float, metavar="X",
                   help="clip the gradient's L2 norm to X (default: the config's, if any); not "
                        "chip-runnable (see --clip-mode)")
    p.add_argument("--clip-mode", choices=("global", "tensor", "lagged"),
                   help="how --clip applies: global = the norm over all gradients of the step; "
                        "tensor = each parameter array's own norm; lagged = the previous step's "
                        "global norm, folded into this step's rate (default: the config's, else "
                        "global). None is chip-runnable today; the run's summary says so")
    p.add_argument("--warmup", type=float, metavar="F",
                   help="linear schedule: warm-up fraction of all steps (default: the config's)")
    p.add_argument("--word-dropout", type=float, metavar="P",
                   help="probability that a training word is sent as [UNK] (chip-runnable: the "
                        "host edits the sample; default: the config's)")
    p.add_argument("--slot-head", action="store_true",
                   help="also train the per-token slot head and report slot F1")
    p.add_argument("--out", metavar="DIR",
                   help="write best.npz, history.json and curves.png here (checked before "
                        "training; each file is replaced atomically)")
    p.add_argument("--init", metavar="FILE",
                   help="start from the parameters of this checkpoint (a best.npz of an earlier "
                        "run of the same --config) instead of a seeded initialization; the data "
                        "are encoded with the checkpoint's vocabulary and label lists, and the "
                        "slot head follows the checkpoint unless --slot-head")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--engine", choices=("golden", "interpreter", "rtl"), default="golden",
                   help="what runs each step of the one training loop (same data order, "
                        "seeds, schedule and evaluation): golden = the NumPy fast path "
                        "(default); interpreter = the compiled training step on the bit-exact "
                        "golden interpreter (the chip's numbers, no simulator); rtl = every "
                        "step on the simulated accelerator (Verilator), checked bit-exactly "
                        "against the interpreter; slow for large presets")
    p.add_argument("--lanes", type=int, metavar="P",
                   help="--engine rtl: engine lanes = store banks (default 4)")
    p.add_argument("--buckets", metavar="auto|P,P,...",
                   help="--engine interpreter/rtl: one compiled step per sentence-length "
                        "bucket (grid positions; seq_len always added), each batch on the "
                        "shortest that holds it (the same words as the full step, fewer "
                        "cycles); auto: the train split's median and 90th percentile lengths, "
                        "rounded up to a multiple of 4")
    p.add_argument("--max-steps", type=int, metavar="N",
                   help="stop after N steps (default: all epochs; the schedule still spans "
                        "them)")
    p.add_argument("--compare", action="store_true",
                   help="--engine interpreter/rtl: also train the golden fast path with the "
                        "same settings and seed and print both accuracies")
    from .train_zo_cmd import add_arguments
    add_arguments(p)
    from .debug_cmd import add_sim_debug_flags, with_sim_debug
    add_sim_debug_flags(p)
    p.set_defaults(func=with_sim_debug(run, check=_check_debug))


def _check_debug(args):
    if args.engine != "rtl":
        raise ValueError("--waves and --trace apply to --engine rtl only (the other engines "
                         "run no simulation)")


def _check_args(args):
    """Every flag's range and every path, before the data are read or a step is run."""
    from .commands import (check_int, check_output_dir, check_positive_float, check_seed)
    check_int("--epochs", args.epochs, 1)
    check_positive_float("--lr", args.lr)
    check_positive_float("--clip", args.clip, "a positive gradient norm")
    check_int("--batch-size", args.batch_size, 1)
    check_seed("--seed", args.seed)
    check_int("--train-sentences", args.train_sentences, 1)
    check_int("--max-steps", args.max_steps, 1)
    for flag, value in (("--warmup", args.warmup), ("--word-dropout", args.word_dropout)):
        if value is not None and not 0 <= value < 1:
            raise ValueError(f"{flag} must be a fraction in [0, 1), got {value:g}")
    if args.clip_mode is not None and args.engine != "golden":
        raise ValueError(f"--clip-mode is not available with --engine {args.engine} (the "
                         f"compiled step has no clipping)")
    check_output_dir("--out", args.out)
    if args.data is not None:
        if args.train_sentences is not None:
            raise ValueError("--train-sentences sizes the built-in data set; it cannot be used "
                             "with --data")
        if not os.path.isdir(args.data):
            raise ValueError(f"--data {args.data} is not a directory: pass a directory holding "
                             f"{{train,dev,test}}.seq.in/.seq.out/.label, intent_label.txt and "
                             f"slot_label.txt (e.g. ../shared/data/atis)")
    if args.engine == "golden":
        if args.compare:
            raise ValueError("--compare applies to --engine interpreter or rtl only")
        if args.buckets is not None:
            raise ValueError("--buckets applies to --engine interpreter or rtl (the compiled "
                             "steps); the golden fast path has no grid to cut")
    else:
        for flag in ("batch_size", "schedule", "clip"):
            if getattr(args, flag) is not None:
                raise ValueError(f"--{flag.replace('_', '-')} is not available with --engine "
                                 f"{args.engine} (the compiled step trains the config's batch "
                                 f"and schedule, no clipping)")
        if args.slot_head:
            raise ValueError(f"--slot-head is not available with --engine {args.engine} "
                             f"(intent head only)")
        if args.init is not None:
            raise ValueError(f"--init is not available with --engine {args.engine} (the "
                             f"compiled run starts from the seeded initialization); drop it or "
                             f"use --engine golden")
    if args.lanes is not None:
        if args.engine != "rtl":
            raise ValueError("--lanes applies to --engine rtl only")
        if args.lanes < 4 or args.lanes & (args.lanes - 1):
            raise ValueError(f"--lanes must be a power of two >= 4, got {args.lanes}")


def _load_init(path, cfg, slot_head):
    """Read the --init checkpoint; it must fit ``cfg`` (with its label counts and slot head)."""
    from ttrain.golden.train import check_config_fits, load_checkpoint
    if not os.path.isfile(path):
        raise ValueError(f"--init {path} does not exist: pass a best.npz written by "
                         f"`ttrain train --out DIR`")
    try:
        ck = load_checkpoint(path)
        stored = ck["cfg"]
        want = cfg.with_(n_intents=stored.n_intents, n_slots=stored.n_slots,
                         slot_head=stored.slot_head if slot_head is None else slot_head)
        check_config_fits(stored, want, path)
    except ValueError as exc:
        raise ValueError(f"--init: {exc}") from None
    return ck


def run(args):
    from ttrain.golden.config import get_config
    from ttrain.golden.data import generate_dataset, load_dataset
    from ttrain.golden.train import train

    from .commands import warn
    from .train_zo_cmd import is_cnn

    if is_cnn(args.config):
        for flag in ("clip_mode", "warmup", "word_dropout", "buckets"):
            if getattr(args, flag) is not None:
                raise ValueError(f"--{flag.replace('_', '-')} applies to the transformer "
                                 f"presets only")
        from .train_zo_cmd import run as run_cnn
        return run_cnn(args)
    cfg = get_config(args.config)
    if args.rule != "sgd":
        raise ValueError(f"--rule {args.rule} trains the int8 CNN presets (digits-cnn); the "
                         f"transformer {args.config} trains with --rule sgd")
    for flag in ("corruption", "runs", "json_out", "zo_lr", "zo_schedule", "zo_warmup"):
        if getattr(args, flag, None) is not None:
            raise ValueError(f"--{flag.replace('_out', '').replace('_', '-')} applies to the CNN "
                             "presets with --rule zo only")
    for flag in ("variant", "norm", "rank", "eff_batch", "segments", "segment_len",
                 "accumulate", "bias_only"):
        if getattr(args, flag, None) not in (None, False):
            raise ValueError(f"--{flag.replace('_', '-')} applies to the online runs of "
                             "digits-mlp (--data digits-drift) only")
    _check_args(args)
    if args.buckets not in (None, "auto"):
        from ttrain.golden.buckets import parse_buckets
        parse_buckets(args.buckets, cfg)            # a bad list fails before the data load
    slot_head = True if args.slot_head else None
    ck = None if args.init is None else _load_init(args.init, cfg, slot_head)
    if args.data is not None:
        dataset = load_dataset(args.data, cfg)
    else:
        n_train = 1200 if args.train_sentences is None else args.train_sentences
        dataset = generate_dataset(seed=0, n_train=n_train, seq_len=cfg.seq_len,
                                   vocab_size=cfg.vocab)
    if ck is not None:
        dataset = dataset.reencode(ck["vocab"], ck["intent_labels"], ck["slot_labels"],
                                   labels_from=f"the label lists of --init {args.init}")
        slot_head = ck["cfg"].slot_head if slot_head is None else slot_head
    warn("train", dataset.warnings)
    print(dataset.summary())
    import numpy as np
    stepper = None
    buckets = None
    if args.buckets is not None:
        from ttrain.golden.buckets import parse_buckets, train_lengths
        buckets = parse_buckets(args.buckets, cfg, train_lengths(dataset))
        print(f"sentence-length buckets (grid positions): {', '.join(map(str, buckets))}")
    if args.engine == "interpreter":
        from ttrain.golden.stepper import InterpreterStepper
        stepper = InterpreterStepper(buckets=buckets)
    elif args.engine == "rtl":
        from ttrain.platforms.host.chip import ChipStepper
        stepper = ChipStepper(lanes=4 if args.lanes is None else args.lanes, buckets=buckets)
    # A diverging run overflows before its loss turns non-finite: train() then stops with one
    # FloatingPointError line (lower --lr, set --clip), not a page of NumPy RuntimeWarnings.
    with np.errstate(over="ignore", invalid="ignore"):
        result = train(cfg, dataset, epochs=args.epochs, lr=args.lr, seed=args.seed,
                       batch_size=args.batch_size, slot_head=slot_head, out_dir=args.out,
                       progress=not args.no_progress, schedule=args.schedule, clip=args.clip,
                       clip_mode=args.clip_mode, warmup=args.warmup,
                       word_dropout=args.word_dropout,
                       log=print, init=None if ck is None else ck["params"], stepper=stepper,
                       max_steps=args.max_steps)
    t = result["cfg"]
    clip = result['clip'] if result['clip'] is None else \
        f"{result['clip']} ({result['clip_mode']})"
    warm = f", warm-up {result['warmup']:g}" if result["schedule"] == "linear" \
        and result["warmup"] else ""
    print(f"config {t.name}: batch {result['batch_size']}, lr {result['lr']:g} "
          f"({result['schedule']}{warm}), clip {clip}, word dropout "
          f"{result['word_dropout']:g}, {result['epochs']} epochs, seed {result['seed']}, "
          f"{result['seconds']:.1f} s")
    print(_chip_line(result["not_chip_runnable"]))
    if args.engine == "rtl":
        cyc = sum(result["cycles"]) / max(1, len(result["cycles"]))
        print(f"{result['steps']} steps on the simulated chip, every step's loss and logits and "
              f"every store word after each session bit-exact; mean {cyc:,.0f} cycles per step "
              f"(simulation {result['sim_seconds']:.0f} s, golden interpreter "
              f"{result['golden_seconds']:.0f} s)")
    elif args.engine == "interpreter":
        print(f"{result['steps']} steps of the compiled training step on the bit-exact golden "
              f"interpreter")
    if "steps_per_bucket" in result:
        print("steps per bucket (grid positions: steps): " + ", ".join(
            f"{p}: {n:,}" for p, n in result["steps_per_bucket"].items()))
    dev, test = result["dev"], result["test"]
    print(f"best dev epoch {result['best_epoch']}: dev intent accuracy "
          f"{100 * dev['intent_acc']:.2f}%, test intent accuracy {100 * test['intent_acc']:.2f}% "
          f"(exact label string: dev {100 * dev['intent_exact_acc']:.2f}%, test "
          f"{100 * test['intent_exact_acc']:.2f}%)")
    if t.slot_head:
        print(f"slot F1: dev {100 * dev['slot_f1']:.2f}%, test {100 * test['slot_f1']:.2f}%")
    if result["checkpoint"]:
        print(f"wrote {result['checkpoint']}, {result['history_file']}, {result['curves']}")
    if args.compare:
        _compare(args, cfg, dataset)
    return 0


def _chip_line(blocked):
    """The summary line on chip-runnability (``result["not_chip_runnable"]``)."""
    if not blocked:
        return ("chip-runnable: yes (every setting of this run is part of the compiled training "
                "step or host-side sample data)")
    return "not chip-runnable: " + "; ".join(f"{opt} ({why})" for opt, why in blocked)


def _compare(args, cfg, dataset):
    """The golden fast path on the compiled step's config, same seed and settings."""
    from ttrain.golden.model_compiler import chip_model_config
    from ttrain.golden.train import train
    if args.max_steps is not None:
        print("--compare: skipped (the golden run trains whole epochs; drop --max-steps)")
        return
    ccfg, _ = chip_model_config(cfg, dataset)
    ref = train(ccfg, dataset, epochs=args.epochs, lr=args.lr, seed=args.seed, progress=False)
    print(f"golden fast path, same config and seed: best dev epoch {ref['best_epoch']}: "
          f"dev {100 * ref['dev']['intent_acc']:.2f}%, test {100 * ref['test']['intent_acc']:.2f}%")
