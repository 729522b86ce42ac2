"""``ttrain plan``: contraction orders, MACs and on-chip memory of one training step."""

import json
import sys

from .golden.config import get_config, preset_names
from .golden.memory import CATEGORIES, memory_report
from .golden.planner import ORDER_NAMES, model_macs

MAC_COLUMNS = ORDER_NAMES + ("dense",)


def register(sub):
    p = sub.add_parser(
        "plan", help="MACs per contraction order and on-chip memory of one training step",
        description="Plan every TT layer of a preset (bi-directional, left-to-right and the "
                    "dynamic-programming optimum), count the MACs of one training step "
                    "(forward + backward) per order and against dense training, and account "
                    "the on-chip FP32 memory (parameters, gradients, saved activations, "
                    "scratch) against dense uncompressed SGD training. Presets: "
                    + ", ".join(preset_names()) + ".")
    p.add_argument("--config", required=True, metavar="NAME", help="preset name")
    p.add_argument("--batch", type=int, metavar="N",
                   help="sentences per step (default: the config's); B = N x seq_len tokens")
    p.add_argument("--order", choices=ORDER_NAMES + ("best",), default="bidirectional",
                   help="order whose kept intermediates and temporaries the memory figures "
                        "and the `entries` list use (default: bidirectional, the flow the "
                        "accelerator runs)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--steps", action="store_true",
                   help="with --json: include every contraction step of every order")
    p.set_defaults(func=run)


def build_report(name, batch=None, order="bidirectional", steps=False):
    """Return the plan report of preset ``name`` as a JSON-ready dict."""
    cfg = get_config(name)
    if batch is not None:
        if batch < 1:
            raise ValueError(f"--batch must be at least 1, got {batch}")
        cfg = cfg.with_(batch=batch)
    mm = model_macs(cfg)
    plans = {(p.spec, p.tokens): p for _, p in mm["layers"]}
    mem = memory_report(cfg, order=order, plans=plans)
    layers, entries = [], []
    for (lname, lp), lm in zip(mm["layers"], mem.layers):
        chosen = lp.best if order == "best" else order
        macs = {o: lp.orders[o].macs for o in ORDER_NAMES}
        macs["dense"] = lp.dense.macs
        layer = {"name": lname, "shape": lm["shape"], "in_modes": lm["in_modes"],
                 "out_modes": lm["out_modes"], "ranks": lm["ranks"], "tokens": lp.tokens,
                 "best": lp.best, "macs": macs,
                 "forward_macs": {o: lp.orders[o].forward_macs for o in ORDER_NAMES},
                 "peak_live_words": {o: lp.orders[o].peak_live_words for o in ORDER_NAMES},
                 "saved_words": {o: lp.orders[o].saved_words for o in ORDER_NAMES},
                 "dp_best_tree": lp.orders["dp_best"].tree,
                 "bytes": {c: lm[c] for c in CATEGORIES + ("total",)},
                 "scratch_phase": lm["scratch_phase"]}
        if steps:
            layer["orders"] = {o: lp.orders[o].to_dict() for o in ORDER_NAMES}
            layer["dense_order"] = lp.dense.to_dict()
        layers.append(layer)
        for group, m in lp.orders[chosen].macs_by_group().items():
            entries.append({"name": f"{lname}.{group}", "macs": m})
    for oname, m in mm["other"].items():
        entries.append({"name": oname, "macs": m})
    entries.append({"name": "embedding.ttm", "macs": mm["embedding"]["total"]})
    onchip = mem.onchip
    entry_total = sum(e["macs"] for e in entries)
    return {
        "config": cfg.name, "batch": cfg.batch, "seq_len": cfg.seq_len, "tokens": cfg.tokens,
        "order": order,
        "objective": mm["layers"][0][1].objective,
        "onchip_bytes": onchip, "dense_bytes": mem.dense,
        "dense_training_bytes": mem.dense_training_bytes, "memory_ratio": mem.memory_ratio,
        "macs": dict(mm["totals"]), "update_macs": mm["update"], "other_macs": mm["other"],
        "embedding": mm["embedding"], "layers": layers, "entries": entries,
        "total": {"macs": entry_total, "onchip_bytes": onchip["total"]},
        "memory": {"onchip": mem.onchip_items, "dense": mem.dense_items,
                   "scratch_phase": mem.scratch_phase,
                   "dense_scratch_phase": mem.dense_scratch_phase},
    }


def _mb(n):
    return f"{n / 1e6:9.3f}"


def format_report(rep):
    """Return the human-readable text of a report from :func:`build_report`."""
    out = [f"config {rep['config']}: batch {rep['batch']} x seq {rep['seq_len']} = "
           f"{rep['tokens']} tokens per step; memory and entries use order {rep['order']}",
           "", "MACs per training step (forward + backward), per TT layer:"]
    head = (f"{'layer':<10} {'N_in x N_out':>12} {'B':>3} {'bidirectional':>14} "
            f"{'left_to_right':>14} {'dp_best':>12} {'dense':>12}  best")
    out += [head, "-" * len(head)]
    for lay in rep["layers"]:
        m = lay["macs"]
        shape = f"{lay['shape'][0]}x{lay['shape'][1]}"
        out.append(f"{lay['name']:<10} {shape:>12} {lay['tokens']:>3} {m['bidirectional']:>14,} "
                   f"{m['left_to_right']:>14,} {m['dp_best']:>12,} {m['dense']:>12,}  "
                   f"{lay['best']}")
    out += ["", "ranks: " + "; ".join(
        f"{lay['name']} {lay['ranks']}" for lay in rep["layers"]
        if lay["name"].endswith((".q", ".ffn1", ".ffn2")) and lay["name"].startswith("enc0")
        or lay["name"] == "pooler")]
    out += ["", "Order-independent MACs: " + ", ".join(
        f"{k} {v:,}" for k, v in rep["other_macs"].items())
        + f", TTM embedding {rep['embedding']['total']:,} (dense lookup 0)"]
    out += ["Model totals: " + ", ".join(f"{k} {v:,}" for k, v in rep["macs"].items()),
            f"SGD update MACs: TT {rep['update_macs']['tt']:,}, "
            f"dense {rep['update_macs']['dense']:,}"]
    out += ["", f"Memory per TT layer (MB; order {rep['order']}; scratch is per backward phase, "
            "shared, not additive):"]
    head = (f"{'layer':<10} {'params':>9} {'grads':>9} {'acts':>9} {'own total':>9} "
            f"{'scratch':>9}  phase")
    out += [head, "-" * len(head)]
    for lay in rep["layers"]:
        b = lay["bytes"]
        out.append(f"{lay['name']:<10} {_mb(b['parameters'])} {_mb(b['gradients'])} "
                   f"{_mb(b['activations'])} {_mb(b['total'])} {_mb(b['scratch'])}  "
                   f"{lay['scratch_phase']}")
    on, de = rep["onchip_bytes"], rep["dense_bytes"]
    out += ["", f"{'memory (MB)':<14} {'on-chip':>9} {'dense':>9}"]
    for c in CATEGORIES + ("total",):
        out.append(f"{c:<14} {_mb(on[c])} {_mb(de[c])}")
    out += ["", f"dense training bytes {rep['dense_training_bytes']:,}; on-chip total "
            f"{on['total']:,}; memory ratio {rep['memory_ratio']:.2f}x"]
    return "\n".join(out)


def run(args):
    rep = build_report(args.config, batch=args.batch, order=args.order, steps=args.steps)
    if args.json:
        json.dump(rep, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(format_report(rep))
    return 0
