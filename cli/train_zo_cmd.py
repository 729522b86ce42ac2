"""``ttrain train`` for the int8 CNN presets: float pre-training on clean digits, and the
quantized zeroth-order rule (``--rule zo``) adapting to digits-C, with the back-propagation
references."""

import json
import os


def add_arguments(p):
    g = p.add_argument_group("int8 CNN presets (digits-cnn): --data digits | digits-c")
    g.add_argument("--rule", choices=("sgd", "zo"), default="sgd",
                   help="sgd: back-propagation (float pre-training of a CNN preset on clean "
                        "digits; the transformer presets' SGD); zo: quantized zeroth-order "
                        "adaptation of the int8 model to digits-C, beside float and int8 "
                        "back-propagation fine-tuning of the same model on the same data")
    g.add_argument("--corruption", metavar="NAME",
                   help="--rule zo: one digits-C corruption (default: all 16, about 1.5 min each)")
    g.add_argument("--runs", metavar="A,B",
                   help="--rule zo: comma-separated subset of bp-float, bp-int8, zo-wp, zo-np, "
                        "zo-mixed, zo-sparse (default all)")
    g.add_argument("--json", metavar="FILE", dest="json_out",
                   help="--rule zo: write the table (per corruption and averaged) as JSON")


def is_cnn(name):
    from ttrain.golden.qnn import CNN_PRESETS
    return name in CNN_PRESETS


def _check(args):
    from .commands import check_int, check_output_dir, check_output_file, check_seed
    from ttrain.golden import adapt, digits
    check_seed("--seed", args.seed)
    check_int("--epochs", args.epochs, 1)
    check_output_dir("--out", args.out)
    check_output_file("--json", args.json_out)
    for flag in ("engine", "lanes", "batch_size", "schedule", "clip", "train_sentences",
                 "max_steps"):
        v = getattr(args, flag, None)
        if v is not None and not (flag == "engine" and v == "golden"):
            raise ValueError(f"--{flag.replace('_', '-')} does not apply to the CNN preset "
                             f"{args.config} (its runs are golden NumPy; the chip programs of "
                             "the integer rules are not compiled yet)")
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


def run(args):
    from ttrain.golden import adapt, digits, qnn, zo
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
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            path = os.path.join(args.out, "best.npz")
            adapt.save_checkpoint(path, model)
            print(f"wrote {path} (load it with --init)")
        return 0
    corruptions = [args.corruption] if args.corruption else list(digits.CORRUPTIONS)
    runs = None if args.runs is None else args.runs.split(",")
    epochs = 10 if args.epochs is None else args.epochs
    table = {}
    labels = runs or (list(adapt.REFERENCE_LR) + list(adapt.ZO_RUNS))
    print(f"adaptation, {epochs} epochs, batch 50, seed {args.seed}; test accuracy % of the "
          "best-validation epoch (before -> after)")
    print(f"{'corruption':18s}" + "".join(f"{lab:>16s}" for lab in labels))
    for c in corruptions:
        table[c] = adapt.adapt_corruption(model, q, c, runs=runs, epochs=epochs,
                                          seed=args.seed)
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
                           "per_corruption": table, "mean": mean}, indent=1)
        write_atomically(args.json_out, lambda f: f.write(text.encode()))
        print(f"wrote {args.json_out}")
    return 0
