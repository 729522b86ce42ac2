"""``ttrain plan``: contraction orders, MACs and on-chip memory of one training step.

Argument parsing and printing only; the report is :func:`ttrain.platforms.memory.plan_report`
(memory from the compiled step's memory map, the planner's figure as a labelled estimate).
"""

import json
import sys

from .golden.config import preset_names
from .golden.memory import REGION_CLASSES
from .golden.model_compiler import RECOMPUTE
from .golden.planner import ORDER_NAMES
from .platforms.memory import plan_report

MAC_COLUMNS = ORDER_NAMES + ("dense",)


def register(sub):
    p = sub.add_parser(
        "plan", help="MACs per contraction order and on-chip memory of one training step",
        description="Plan every TT layer of a preset (bi-directional, left-to-right and the "
                    "dynamic-programming optimum), count the MACs of one training step "
                    "(forward + backward) per order and against dense training, and report "
                    "the on-chip FP32 memory the compiled training step allocates (its memory "
                    "map per store, region class and model part, stores rounded as the chip "
                    "gets them) against dense uncompressed SGD training, beside the "
                    "planner's estimate. Presets: "
                    + ", ".join(preset_names()) + ".")
    p.add_argument("--config", required=True, metavar="NAME", help="preset name")
    p.add_argument("--batch", type=int, metavar="N",
                   help="sentences per step (default: the config's); B = N x seq_len tokens")
    p.add_argument("--order", choices=ORDER_NAMES + ("best",), default=None,
                   help="order of every TT layer of the compiled step, the estimate and the "
                        "`entries` list (default: the compiler's auto choice per layer kind "
                        "for the step, the bidirectional flow for the planner's figures; "
                        "`best` compiles each layer's planner-best order)")
    p.add_argument("--no-fused-update", dest="fused_update", action="store_false",
                   help="memory of the step compiled with one UPDATE at its end (gradients of "
                        "every tensor held at once) instead of the default fused update")
    p.add_argument("--recompute", choices=RECOMPUTE, default=None,
                   help="activation recomputation of the compiled step: none (the backward "
                        "pass reads what the forward pass kept), sublayer (keep each "
                        "attention/FFN half's LayerNorm x_hat, run the half again before its "
                        "backward pass) or layer (default: keep each encoder block's output "
                        "x_hat only); the table of all three is printed either way")
    p.add_argument("--rule", choices=("sgd", "zo", "lrt"), default="sgd",
                   help="sgd: a transformer training step (default); zo: the compiled "
                        "zeroth-order step of an int8 CNN preset (digits-cnn, mcunet-s), dense "
                        "and sparse, beside an int8 back-propagation estimate; lrt: the "
                        "compiled low-rank training programs of digits-mlp (weights against "
                        "the auxiliary memory and its r (n_i + n_o) bound)")
    p.add_argument("--rank", type=int, default=None, metavar="R",
                   help="--rule lrt: rank of the accumulators (default 4)")
    p.add_argument("--sparse-layers", type=int, default=None, metavar="K",
                   help="--rule zo: the sparse step trains the last K convolution layers "
                        "(default 2)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--steps", action="store_true",
                   help="with --json: include every contraction step of every order")
    p.set_defaults(func=run)


def _mb(n):
    return f"{n / 1e6:9.3f}"


def _pct(x):
    return "" if x is None else f"{100 * x:+.1f}%"


def format_report(rep):
    """Return the human-readable text of a report from :func:`plan_report`."""
    out = [f"config {rep['config']}: batch {rep['batch']} x seq {rep['seq_len']} = "
           f"{rep['tokens']} tokens per step; the planner's figures and entries use order "
           f"{rep['order']}",
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
    comp, est = rep["compiled"], rep["estimate"]
    orders = ", ".join(f"{k} {v}" for k, v in comp["order"].items())
    out += ["", f"On-chip memory of the compiled training step (MB; TT orders {orders}, "
            f"fused update {'on' if comp['fused_update'] else 'off'}, recompute "
            f"{comp['recompute']}, {comp['allocate']} allocation; the memory map of "
            f"golden/model_compiler.py, each store rounded to whole rows of {comp['banks']} "
            "banks as the chip gets it):"]
    for note in comp["notes"]:
        out.append(f"  note: {note}")
    cls = REGION_CLASSES
    head = f"{'store':<8} {'words':>11} " + " ".join(f"{c:>11}" for c in cls) + f" {'MB':>9}"
    out += [head, "-" * len(head)]
    for s, d in comp["stores"].items():
        out.append(f"{s:<8} {d['words']:>11,} " + " ".join(
            f"{_mb(d['classes'].get(c, 0)):>11}" for c in cls) + f" {_mb(d['bytes'])}")
    out += ["", f"{'part':<10} " + " ".join(f"{c:>11}" for c in cls)
            + "   (act/scratch: live at the store's peak; gradients: region sizes, with the "
              "fused update they share the grad store)"]
    for p, d in comp["layers"].items():
        out.append(f"{p:<10} " + " ".join(f"{_mb(d[c]):>11}" for c in cls))
    for s, d in comp["peak"].items():
        top = ", ".join(f"{n} {w:,}" for n, w in list(d["largest_live"].items())[:4])
        out.append(f"peak of {s}: {d['words']:,} words (live regions {d['live_sum']:,} at "
                   f"instruction {d['at']}: {top}, ...)")
    out += ["", f"Memory vs MACs per recompute setting (compiled step, stores rounded as "
            f"above; MACs of the compiled program, overhead against none; this report: "
            f"{rep['recompute']}):"]
    head = f"{'recompute':<10} {'on-chip MB':>10} {'ratio':>8} {'MACs':>14} {'overhead':>9}"
    out += [head, "-" * len(head)]
    for t in rep["recompute_table"]:
        out.append(f"{t['recompute']:<10} {t['onchip_bytes'] / 1e6:>10.3f} "
                   f"{t['memory_ratio']:>7.2f}x {t['macs']:>14,} "
                   f"{100 * t['mac_overhead']:>+8.1f}%")
    on, de = rep["onchip_bytes"], rep["dense_bytes"]
    err = est["error"]
    out += ["", f"{'memory (MB)':<14} {'on-chip':>9} {'dense':>9} {'estimate':>9} "
            f"{'est. error':>10}   (estimate: the planner's, its error against the compiled "
            "step without recomputation)"]
    for c in cls + ("padding", "total"):
        e = err.get(c)
        tail = f" {_mb(e['estimate'])} {_pct(e['relative']):>10}" if e else ""
        out.append(f"{c:<14} {_mb(on[c])} {_mb(de[c]) if c in de else ' ' * 9}{tail}")
    out += ["", f"dense training bytes {rep['dense_training_bytes']:,}; on-chip total "
            f"{on['total']:,} (compiled); memory ratio {rep['memory_ratio']:.2f}x "
            f"(planner estimate {est['onchip_bytes']['total']:,} bytes, "
            f"{est['memory_ratio']:.2f}x)"]
    out += ["", f"Planner estimate per TT layer (MB; an estimate of golden/memory.py, not the "
            f"compiled map; order {rep['order']}, no recomputation; scratch is per backward "
            "phase, shared, not additive):"]
    head = (f"{'layer':<10} {'params':>9} {'grads':>9} {'acts':>9} {'own total':>9} "
            f"{'scratch':>9}  phase")
    out += [head, "-" * len(head)]
    for lay in rep["layers"]:
        b = lay["estimate_bytes"]
        out.append(f"{lay['name']:<10} {_mb(b['parameters'])} {_mb(b['gradients'])} "
                   f"{_mb(b['activations'])} {_mb(b['total'])} {_mb(b['scratch'])}  "
                   f"{lay['scratch_phase']}")
    return "\n".join(out)


#: Estimate-chunk and unpack-buffer words of the sparse step (the dense one uses the
#: compiler's defaults): smaller buffers for the 256 KB budget, at the cost of instructions.
SPARSE_CHUNK = 1024


def zo_plan_report(config, *, batch=1, sparse_layers=2):
    """Memory of the compiled ZO step of a CNN preset: dense (every layer) and sparse (the
    last ``sparse_layers`` convolution layers), and an int8 BP estimate."""
    from .golden import qnn, zo
    from .golden.zo_compiler import (GRAD_CHUNK, bp_memory_estimate, compile_zo_step,
                                     figures_model, zo_memory)
    if config not in qnn.cnn_preset_names():
        raise ValueError(f"--rule zo plans the int8 CNN presets "
                         f"({', '.join(qnn.cnn_preset_names())}), not {config}")
    cfg = qnn.get_cnn_config(config)
    convs = [n.name for n in cfg.nodes if n.kind == "conv"]
    if isinstance(sparse_layers, bool) or not 1 <= sparse_layers < len(convs):
        raise ValueError(f"--sparse-layers must be in 1..{len(convs) - 1} for {config} "
                         f"({len(convs)} convolution layers), not {sparse_layers}")
    q = figures_model(cfg)
    steps = {}
    for name, layers, chunk in (("dense", None, GRAD_CHUNK),
                                ("sparse", tuple(convs[-sparse_layers:]), SPARSE_CHUNK)):
        cz = compile_zo_step(q, batch, zo.ZOSettings(mode="wp", layers=layers),
                             grad_chunk=chunk, unpack_words=chunk)
        steps[name] = {"layers": list(layers) if layers else "all", "queries": cz.queries,
                       "grad_chunk_words": chunk, "unpack_words": chunk,
                       "instructions": len(cz.program.instructions),
                       "store_words": dict(cz.program.store_sizes), **zo_memory(cz)}
    # the in-place variant of the dense step (each antithetic query updates at once: no
    # coefficient list; our accumulate-then-update keeps no gradient buffer either)
    cz = compile_zo_step(q, batch, zo.ZOSettings(mode="wp", inplace=True))
    inplace = {"layers": "all", "queries": cz.queries, "forwards_per_query": 2,
               "instructions": len(cz.program.instructions),
               "store_words": dict(cz.program.store_sizes), **zo_memory(cz)}
    # the digits-C table's node-perturbation run (layer-wise NP of every layer), where the
    # model has no grouped convolution (their local gradient is not compiled)
    from .golden import adapt
    try:
        cz = compile_zo_step(q, batch, adapt.ZO_RUNS["zo-np"].at_step(0, 1))
        np_step = {"run": "zo-np", "queries": cz.queries,
                   "instructions": len(cz.program.instructions),
                   "store_words": dict(cz.program.store_sizes), **zo_memory(cz)}
    except ValueError as e:
        np_step = {"run": "zo-np", "not_compiled": str(e)}
    return {"config": cfg.name, "note": cfg.note, "params": cfg.n_params, "batch": batch,
            "zo": steps, "zo_inplace": inplace, "zo_np": np_step,
            "bp_int8_estimate": bp_memory_estimate(q, batch),
            "budgets_bytes": {"dense": 1024 * 1024, "sparse": 256 * 1024},
            "budget_applies_to": "writable_bytes (the paper's MCU SRAM: 1024 KB dense, 256 KB "
                                 "sparse; program, constants and frozen weights in flash)",
            "labels": {
                "bytes": "as compiled: what the chip holds (int8 weights packed four to a "
                         "32-bit word; biases, node outputs and accumulators one per word)",
                "packed_int8_projection": "NOT BUILT: the same map with the int8 node "
                                          "outputs and input packed four to a word too (the "
                                          "chip packs the int8 weights only)",
                "writable": "everything but the frozen parameters, constants and program "
                            "(the MCU's SRAM; read-only data would sit in its flash)",
                "bp_int8_estimate": "an estimate: the int8 back-propagation step is not "
                                    "compiled"}}


def format_zo_report(rep):
    kb = 1024
    out = [f"{rep['config']} ({rep['note']}): {rep['params']:,} parameters, batch "
           f"{rep['batch']}; compiled ZO steps (weight perturbation, "
           f"{rep['zo']['dense']['queries']} queries)"]
    head = (f"{'step':<8} {'layers':>7} {'instr':>6} {'as compiled KB':>15} {'writable':>9} "
            f"{'packed-int8 KB (projection)':>28} {'writable':>9}  budget")
    out += ["", head, "-" * len(head)]
    for name, st in rep["zo"].items():
        pj = st["packed_int8_projection"]
        lay = "all" if st["layers"] == "all" else str(len(st["layers"]))
        budget = rep["budgets_bytes"][name]
        key = "writable_bytes"
        verdict = "fits" if pj[key] <= budget else "over"
        out.append(f"{name:<8} {lay:>7} {st['instructions']:>6,} {st['total_bytes'] / kb:>15,.1f} "
                   f"{st['writable_bytes'] / kb:>9,.1f} {pj['total_bytes'] / kb:>28,.1f} "
                   f"{pj['writable_bytes'] / kb:>9,.1f}  {budget // kb} KB writable: "
                   f"as compiled {'fits' if st[key] <= budget else 'over'}, projection "
                   f"{verdict}")
    out += ["", "per class (KB as compiled / packed-int8 projection):"]
    for name, st in rep["zo"].items():
        pj = st["packed_int8_projection"]["bytes"]
        out.append(f"  {name}: " + ", ".join(f"{c} {v / kb:,.1f}/{pj[c] / kb:,.1f}"
                                           for c, v in st["bytes"].items())
                   + f", program {st['program_bytes'] / kb:,.1f}")
    ip, dn = rep["zo_inplace"], rep["zo"]["dense"]
    out += ["", f"in-place variant (dense, {ip['queries']} antithetic queries, each updating "
            f"at once): {ip['instructions']:,} instructions, {ip['total_bytes'] / kb:,.1f} KB "
            f"as compiled, {ip['writable_bytes'] / kb:,.1f} KB writable "
            f"({(ip['writable_bytes'] - dn['writable_bytes']) / kb:+,.1f} KB against "
            "accumulate-then-update, which regenerates u and keeps no gradient buffer either; "
            "2 forward passes per query instead of 1)"]
    npst = rep["zo_np"]
    if "not_compiled" in npst:
        out += ["", f"node perturbation (zo-np): not compiled for {rep['config']}: "
                f"{npst['not_compiled'].split('; train it')[0]}"]
    else:
        out += ["", f"node perturbation (zo-np, every layer, {npst['queries']} queries): "
                f"{npst['instructions']:,} instructions, {npst['total_bytes'] / kb:,.1f} KB as "
                f"compiled, {npst['writable_bytes'] / kb:,.1f} KB writable ("
                + ", ".join(f"{c} {v / kb:,.1f}" for c, v in npst["bytes"].items()) + ")"]
    bp = rep["bp_int8_estimate"]
    out += ["", f"int8 BP training (estimate, not compiled): {bp['total_bytes'] / kb:,.1f} KB as "
            f"32-bit words, {bp['packed_int8_projection']['total_bytes'] / kb:,.1f} KB packed: "
            + ", ".join(f"{k} {v / kb:,.1f}" for k, v in bp["bytes"].items())]
    out += [""] + [f"{k}: {v}" for k, v in rep["labels"].items()]
    return "\n".join(out)


def lrt_plan_report(config, *, rank=None):
    """Memory of the compiled LRT programs (unbiased reduction, max-norm: the largest)."""
    from dataclasses import replace
    from .golden import lrt_model, lrt_online
    from .golden.lrt_compiler import compile_lrt, lrt_memory
    if config not in lrt_model.LRT_PRESETS:
        raise ValueError(f"--rule lrt plans the compiled programs of the fixed-point LRT "
                         f"presets ({', '.join(lrt_model.LRT_PRESETS)}), not {config}")
    st = lrt_online.BENCHMARK_RUNS["lrt unbiased/max"]
    if rank is not None:
        if isinstance(rank, bool) or rank < 1:
            raise ValueError(f"--rank must be at least 1, not {rank}")
        st = replace(st, rank=rank)
    cfg = lrt_model.LRT_PRESETS[config]
    geometry = lrt_model.geometry_of(cfg)
    cl = compile_lrt([(g.cout, g.k * g.k * g.cin) for g in geometry], st, geometry)
    return {"config": config, "note": cfg.note, "rule": "lrt", "variant": st.variant,
            "norm": st.norm, "rank": st.rank, "instructions": {
                name: len(p.instructions) for name, p in cl.programs.items()},
            **lrt_memory(cl)}


def format_lrt_report(rep):
    kb = 1024
    out = [f"{rep['config']} ({rep['note']}); compiled LRT programs ({rep['variant']}, "
           f"{rep['norm']} norm, rank {rep['rank']}): "
           + " + ".join(f"{v} ({k.replace('_', ' ')})" for k, v in rep["instructions"].items())
           + " instructions",
           f"on chip {rep['total_bytes'] / kb:,.1f} KB in the stores + "
           f"{rep['program_bytes'] / kb:,.1f} KB of instruction memory; by class (KB): "
           + ", ".join(f"{k} {v / kb:,.2f}" for k, v in rep["bytes"].items()), "",
           f"{'layer':>8} {'aux as compiled B':>18} {'of it bases B':>14} "
           f"{'bound r(n_i+n_o) 16-bit B':>26} {'SGD accumulator B':>18}"]
    for L in rep["layers"]:
        out.append(f"{L['shape'][0]:>3}x{L['shape'][1]:<4} {L['aux_bytes_as_compiled']:>18,} "
                   f"{4 * L['bases_words']:>14,} {L['bound_bytes']:>26,} "
                   f"{L['sgd_accumulator_bytes']:>18,}")
    out += [""] + [f"{k}: {v}" for k, v in rep["labels"].items()]
    return "\n".join(out)


def _only(args, flags, rule):
    """Reject flags of another rule's plan (ValueError naming the flag)."""
    for flag, given in flags:
        if given:
            raise ValueError(f"{flag} does not apply to --rule {rule}")


def run(args):
    sgd_flags = [("--order", args.order is not None), ("--no-fused-update", not args.fused_update),
                 ("--recompute", args.recompute is not None), ("--steps", args.steps)]
    if args.rule != "lrt":
        _only(args, [("--rank", args.rank is not None)], args.rule)
    if args.rule != "zo":
        _only(args, [("--sparse-layers", args.sparse_layers is not None)], args.rule)
    if args.rule == "lrt":
        _only(args, sgd_flags + [("--batch", args.batch is not None)], "lrt")
        rep = lrt_plan_report(args.config, rank=args.rank)
        text = format_lrt_report
    elif args.rule == "zo":
        _only(args, sgd_flags, "zo")
        rep = zo_plan_report(args.config, batch=1 if args.batch is None else args.batch,
                             sparse_layers=2 if args.sparse_layers is None
                             else args.sparse_layers)
        text = format_zo_report
    else:
        rep = plan_report(args.config, batch=args.batch, order=args.order, steps=args.steps,
                          fused_update=args.fused_update, recompute=args.recompute or "layer")
        text = format_report
    if args.json:
        json.dump(rep, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(text(rep))
    return 0
