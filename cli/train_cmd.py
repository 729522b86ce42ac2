"""``ttrain train``: train a preset on a data directory or the built-in generated data set."""

import os


def register(sub):
    p = sub.add_parser(
        "train", help="train a config with plain SGD (golden model) and report intent accuracy",
        description="Train the tensorized transformer of a preset with plain SGD on the golden "
                    "NumPy model. Without --data it uses the built-in generated ATIS-like data "
                    "set (seed 0). Prints one line per epoch and the dev and test intent "
                    "accuracy (first listed intent) of the best-dev epoch.")
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
                   help="clip the gradient's global L2 norm to X (default: the config's, if any)")
    p.add_argument("--slot-head", action="store_true",
                   help="also train the per-token slot head and report slot F1")
    p.add_argument("--out", metavar="DIR",
                   help="write best.npz, history.json and curves.png here")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--engine", choices=("golden", "rtl"), default="golden",
                   help="golden: the NumPy fast path (default); rtl: every step on the "
                        "simulated accelerator (Verilator), checked bit-exactly against the "
                        "golden interpreter; slow for large presets")
    p.add_argument("--lanes", type=int, default=4, metavar="P",
                   help="--engine rtl: engine lanes = store banks (default 4)")
    p.add_argument("--max-steps", type=int, metavar="N",
                   help="--engine rtl: stop after N steps (default: all epochs)")
    p.add_argument("--compare", action="store_true",
                   help="--engine rtl: also train the golden fast path with the same settings "
                        "and seed and print both accuracies")
    p.set_defaults(func=run)


def run(args):
    from ttrain.golden.config import get_config
    from ttrain.golden.data import generate_dataset, load_dataset
    from ttrain.golden.train import train

    cfg = get_config(args.config)
    if args.epochs is not None and args.epochs < 1:
        raise ValueError(f"--epochs must be at least 1, got {args.epochs}")
    if args.lr is not None and not args.lr > 0:
        raise ValueError(f"--lr must be positive, got {args.lr}")
    if args.clip is not None and not args.clip > 0:
        raise ValueError(f"--clip must be a positive gradient norm, got {args.clip}")
    if args.batch_size is not None and args.batch_size < 1:
        raise ValueError(f"--batch-size must be at least 1, got {args.batch_size}")
    if args.data is not None:
        if args.train_sentences is not None:
            raise ValueError("--train-sentences sizes the built-in data set; it cannot be used "
                             "with --data")
        if not os.path.isdir(args.data):
            raise ValueError(f"--data {args.data} is not a directory: pass a directory holding "
                             f"{{train,dev,test}}.seq.in/.seq.out/.label, intent_label.txt and "
                             f"slot_label.txt (e.g. ../shared/data/atis)")
        dataset = load_dataset(args.data, cfg)
    else:
        n_train = 1200 if args.train_sentences is None else args.train_sentences
        if n_train < 1:
            raise ValueError(f"--train-sentences must be at least 1, got {n_train}")
        dataset = generate_dataset(seed=0, n_train=n_train, seq_len=cfg.seq_len,
                                   vocab_size=cfg.vocab)
    print(dataset.summary())
    if args.engine == "rtl":
        return _run_rtl(args, cfg, dataset)
    for flag in ("max_steps", "compare"):
        if getattr(args, flag):
            raise ValueError(f"--{flag.replace('_', '-')} applies to --engine rtl only")
    slot_head = True if args.slot_head else None
    result = train(cfg, dataset, epochs=args.epochs, lr=args.lr, seed=args.seed,
                   batch_size=args.batch_size, slot_head=slot_head, out_dir=args.out,
                   progress=not args.no_progress, schedule=args.schedule, clip=args.clip,
                   log=print)
    t = result["cfg"]
    print(f"config {t.name}: batch {result['batch_size']}, lr {result['lr']:g} "
          f"({result['schedule']}), clip {result['clip']}, word dropout "
          f"{result['word_dropout']:g}, {result['epochs']} epochs, seed {result['seed']}, "
          f"{result['seconds']:.1f} s")
    dev, test = result["dev"], result["test"]
    print(f"best dev epoch {result['best_epoch']}: dev intent accuracy "
          f"{100 * dev['intent_acc']:.2f}%, test intent accuracy {100 * test['intent_acc']:.2f}% "
          f"(exact label string: dev {100 * dev['intent_exact_acc']:.2f}%, test "
          f"{100 * test['intent_exact_acc']:.2f}%)")
    if t.slot_head:
        print(f"slot F1: dev {100 * dev['slot_f1']:.2f}%, test {100 * test['slot_f1']:.2f}%")
    if result["checkpoint"]:
        print(f"wrote {result['checkpoint']}, {result['history_file']}, {result['curves']}")
    return 0


def _run_rtl(args, cfg, dataset):
    from ttrain.golden.train import train
    from ttrain.testbench.model import chip_config, train_on_chip

    for flag in ("batch_size", "schedule", "clip", "out"):
        if getattr(args, flag) is not None:
            raise ValueError(f"--{flag.replace('_', '-')} is not available with --engine rtl "
                             f"(the chip trains the config's batch and schedule, no clipping)")
    if args.slot_head:
        raise ValueError("--slot-head is not available with --engine rtl (intent head only)")
    if args.lanes < 4 or args.lanes & (args.lanes - 1):
        raise ValueError(f"--lanes must be a power of two >= 4, got {args.lanes}")
    if args.max_steps is not None and args.max_steps < 1:
        raise ValueError(f"--max-steps must be at least 1, got {args.max_steps}")
    res = train_on_chip(cfg, dataset, epochs=args.epochs, lr=args.lr, seed=args.seed,
                        lanes=args.lanes, max_steps=args.max_steps,
                        progress=not args.no_progress, log=print)
    cyc = sum(res["cycles"]) / max(1, len(res["cycles"]))
    print(f"{res['steps']} steps on the simulated chip, every step's loss and logits and every "
          f"store word after each session bit-exact; mean {cyc:,.0f} cycles per step "
          f"(simulation {res['sim_seconds']:.0f} s, golden interpreter "
          f"{res['golden_seconds']:.0f} s)")
    print(f"best dev epoch {res['best_epoch']}: dev intent accuracy "
          f"{100 * res['dev']['intent_acc']:.2f}%, test intent accuracy "
          f"{100 * res['test']['intent_acc']:.2f}%")
    if args.compare:
        ccfg, _ = chip_config(cfg, dataset)
        if args.max_steps is not None:
            print("--compare: skipped (the golden run trains whole epochs; drop --max-steps)")
            return 0
        ref = train(ccfg, dataset, epochs=args.epochs, lr=args.lr, seed=args.seed,
                    progress=False)
        print(f"golden fast path, same config and seed: best dev epoch {ref['best_epoch']}: "
              f"dev {100 * ref['dev']['intent_acc']:.2f}%, test "
              f"{100 * ref['test']['intent_acc']:.2f}%")
    return 0
