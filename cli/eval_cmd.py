"""``ttrain eval``: evaluate a checkpoint's parameters on the dev and test splits (golden model)."""

import json
import os
import re


def register(sub):
    p = sub.add_parser(
        "eval", help="evaluate a checkpoint (best.npz of `ttrain train --out`) on dev and test",
        description="Load a checkpoint written by `ttrain train --out DIR` (DIR/best.npz) and "
                    "report the dev and test intent accuracy (first listed intent and exact "
                    "label string), the loss and, with a slot head, slot F1, computed with the "
                    "golden model. The config, vocabulary and label lists come from the "
                    "checkpoint; the data are encoded with them.")
    p.add_argument("--checkpoint", required=True, metavar="FILE",
                   help="the checkpoint (.npz) to evaluate")
    p.add_argument("--data", metavar="DIR",
                   help="data directory in the ATIS/SNIPS layout; default: the data set the "
                        "checkpoint was trained on (its directory, or the built-in generated "
                        "data set with its default sizes)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=run)


def _data_dir(args, meta):
    """The directory to evaluate on, or None for the built-in generated data set."""
    if args.data is not None:
        if not os.path.isdir(args.data):
            raise ValueError(f"--data {args.data} is not a directory: pass a directory holding "
                             f"{{train,dev,test}}.seq.in/.seq.out/.label, intent_label.txt and "
                             f"slot_label.txt")
        return args.data
    recorded = meta.get("dataset")
    if recorded is None or re.fullmatch(r"generated\(seed=0\)", recorded):
        return None
    if recorded.startswith("generated("):
        raise ValueError(f"checkpoint {args.checkpoint} was trained on {recorded}, which this "
                         f"command cannot regenerate: pass --data DIR")
    if not os.path.isdir(recorded):
        raise ValueError(f"checkpoint {args.checkpoint} was trained on the data directory "
                         f"{recorded}, which does not exist here: pass --data DIR")
    return recorded


def evaluate_checkpoint(path, data_dir=None):
    """Return the evaluation report of checkpoint ``path`` on ``data_dir`` (None: built-in)."""
    from ttrain.golden.data import generate_dataset, load_dataset
    from ttrain.golden.train import evaluate, load_checkpoint

    ck = load_checkpoint(path)
    cfg = ck["cfg"]
    if data_dir is None:
        raw = generate_dataset(seed=0, seq_len=cfg.seq_len, vocab_size=cfg.vocab)
    else:
        raw = load_dataset(data_dir, seq_len=cfg.seq_len, vocab_size=cfg.vocab)
    dataset = raw.reencode(ck["vocab"], ck["intent_labels"], ck["slot_labels"],
                           labels_from=f"the label lists of checkpoint {path}")
    report = {"checkpoint": os.fspath(path), "config": cfg.name, "data": dataset.name,
              "slot_head": cfg.slot_head, "trained_on": ck["meta"].get("dataset"),
              "best_epoch": ck["meta"].get("best_epoch")}
    for split in ("dev", "test"):
        report[split] = evaluate(cfg, ck["params"], dataset, split)
    return report, dataset


def run(args):
    from .commands import warn

    from ttrain.golden.train import load_checkpoint

    if not os.path.isfile(args.checkpoint):
        raise ValueError(f"--checkpoint {args.checkpoint} does not exist: pass a best.npz "
                         f"written by `ttrain train --out DIR`")
    meta = load_checkpoint(args.checkpoint)["meta"]
    report, dataset = evaluate_checkpoint(args.checkpoint, _data_dir(args, meta))
    warn("eval", dataset.warnings)
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"checkpoint {report['checkpoint']}: config {report['config']}, trained on "
          f"{report['trained_on']} (best dev epoch {report['best_epoch']})")
    print(dataset.summary())
    for split in ("dev", "test"):
        r = report[split]
        line = (f"{split}: intent accuracy {100 * r['intent_acc']:.2f}% (exact label string "
                f"{100 * r['intent_exact_acc']:.2f}%), loss {r['loss']:.4f}, {r['n']} sentences")
        if "slot_f1" in r:
            line += f", slot F1 {100 * r['slot_f1']:.2f}%"
        print(line)
    return 0
