"""The stores on the U50's RAMs: sizes from the compiler (or the planner), BRAM/URAM mapping, fit.

Platform knowledge used by :func:`ttrain.platforms.hw.hw_config` (which mapping the chip is
built with), ``ttrain resources`` and ``ttrain plan`` (:func:`plan_report`: the compiled
memory map beside the dense baseline, the memory-vs-MACs table of the recompute settings, the
planner's figure as a labelled estimate). The per-store primitive counts follow
:func:`store_primitives`: a RAMB36E2 holds 1024 x 32 (two RAMB18E2 of 512 x 32), a URAM288
4096 x 72 used 32 bits wide, one bank per column.
"""

import itertools
import math

__all__ = ["STORE_CATEGORY", "store_sizes_from_plan", "store_sizes_from_compiler",
           "SIZE_SOURCES", "memory_map", "fit_memory", "fits_u50", "check_banks",
           "store_primitives", "plan_report"]

#: Store name -> category of the memory plan (``onchip_bytes``) it holds.
STORE_CATEGORY = {"param": "parameters", "grad": "gradients", "act": "activations",
                  "scratch": "scratch"}


def store_primitives(store):
    """Return a dict describing a :class:`~ttrain.rtl.store.BankedStore` and its estimated
    Xilinx primitives (``ramb36``/``ramb18``/``uram288`` always present).

    BRAM: a RAMB36E2 holds 1024 x 32 (two RAMB18E2 of 512 x 32); URAM: a URAM288 holds
    4096 x 72, used here 32 bits wide (one bank per column). Estimates, not synthesis.
    """
    bd = store.bank_depth
    if store.style == "ultra":
        per_bank = {"ramb36": 0, "ramb18": 0, "uram288": math.ceil(bd / 4096)}
    else:
        per_bank = {"ramb36": bd // 1024 + (1 if bd % 1024 > 512 else 0),
                    "ramb18": 1 if 0 < bd % 1024 <= 512 else 0, "uram288": 0}
    prims = {k: v * store.banks for k, v in per_bank.items()}
    return {"name": store.name, "words": store.depth, "bytes": 4 * store.depth,
            "banks": store.banks, "bank_depth": bd, "style": store.style,
            "impl": store.impl, **prims}


def _capacity():
    from .u50 import U50_CAPACITY
    return dict(U50_CAPACITY)


def store_sizes_from_plan(config, banks):
    """Return ``{store: words}`` of preset ``config`` from the planner's on-chip memory
    *estimate* (``golden/memory.py``; not what the compiled step allocates).

    Parameters
    ----------
    config : str
        Preset name (``ttrain plan`` presets).
    banks : int
        Banks per store; every store is rounded up to whole rows of ``banks`` words.
    """
    from ..golden.config import get_config
    from ..golden.memory import memory_report
    from .hw import round_store_words
    onchip = memory_report(get_config(config)).onchip
    words = {s: -(-int(onchip[c]) // 4) for s, c in STORE_CATEGORY.items()}
    return round_store_words(words, banks)


def store_sizes_from_compiler(config, banks):
    """Return ``{store: words}`` of preset ``config`` from the whole-model compiler's memory map
    (``golden/model_compiler.py``: the program of one training step as the chip runs it, with
    the changes ``golden.model_compiler.chip_model_config`` makes, e.g. dropout off), rounded
    up to whole rows of ``banks`` words."""
    from ..golden.config import get_config
    from ..golden.model_compiler import chip_model_config, compile_model
    from .hw import round_store_words
    cfg, _ = chip_model_config(get_config(config))
    return round_store_words(compile_model(cfg).program.store_sizes, banks)


#: Where ``build_report`` takes the store sizes from.
SIZE_SOURCES = {"compiler": store_sizes_from_compiler, "plan": store_sizes_from_plan}


def check_banks(banks):
    if not isinstance(banks, int) or isinstance(banks, bool) or banks < 1 or banks & (banks - 1):
        raise ValueError(f"banks must be a positive power of two, not {banks!r}")


def memory_map(store_sizes, banks, styles="auto"):
    """Map the stores to Xilinx RAM primitives with :meth:`BankedStore.mapping`.

    Parameters
    ----------
    store_sizes : dict
        ``{store: words}`` (multiples of ``banks``).
    banks : int
        Banks per store.
    styles : str or dict
        ``"auto"``, ``"block"`` or ``"ultra"`` for every store, or per store name.

    Returns
    -------
    dict
        ``stores`` (one :meth:`~ttrain.rtl.store.BankedStore.mapping` dict per store, with
        ``ramb36``/``ramb18``/``uram288`` always present) and ``total`` (sums, plus
        ``ramb36_equiv`` = RAMB36 + RAMB18 / 2).
    """
    from ..rtl.store import BankedStore
    check_banks(banks)
    if not isinstance(styles, dict):
        styles = {name: styles for name in store_sizes}
    stores = []
    for name, words in store_sizes.items():
        st = BankedStore(depth=int(words), banks=banks, style=styles.get(name, "auto"),
                         impl="verilog", name=name)
        st._MustUse__silence = True          # only the mapping report is wanted
        rep = store_primitives(st)
        stores.append(rep)
    total = {k: sum(s[k] for s in stores) for k in ("words", "bytes", "ramb36", "ramb18",
                                                     "uram288")}
    total["ramb36_equiv"] = total["ramb36"] + total["ramb18"] / 2
    return {"stores": stores, "total": total}


def _left(total, capacity, reserve):
    """Return the RAMB36-equivalent and URAM288 left after the stores and ``reserve``."""
    bram = capacity["ramb36"] - total["ramb36_equiv"] - reserve.get("ramb36_equiv", 0)
    uram = capacity["uram288"] - total["uram288"] - reserve.get("uram288", 0)
    return {"ramb36_equiv": bram, "uram288": uram}


def fit_memory(store_sizes, banks, capacity=None, reserve=None):
    """Map the stores on the U50's BRAM and URAM; find a per-store mapping that fits.

    Parameters
    ----------
    store_sizes : dict
        ``{store: words}``.
    banks : int
        Banks per store.
    capacity : dict or None
        Device resources (default :data:`ttrain.platforms.u50.U50_CAPACITY`).
    reserve : dict or None
        RAMs the rest of the design takes (``ramb36_equiv``, ``uram288``), e.g. the logic
        estimate's instruction memory and FIFOs.

    Returns
    -------
    dict
        ``auto`` (the stores' default mapping, its ``fits`` and ``left``), ``best`` (``auto``
        if it fits, else the per-store ``styles`` among all BRAM/URAM assignments that fit
        with the largest smaller fraction left, or ``None`` if none fits) and ``fits``.
    """
    capacity = _capacity() if capacity is None else capacity
    reserve = reserve or {}

    def entry(styles):
        mm = memory_map(store_sizes, banks, styles)
        left = _left(mm["total"], capacity, reserve)
        fits = left["ramb36_equiv"] >= 0 and left["uram288"] >= 0
        return {"styles": {s["name"]: s["style"] for s in mm["stores"]}, "map": mm,
                "left": left, "fits": fits,
                "left_fraction": min(left["ramb36_equiv"] / capacity["ramb36"],
                                     left["uram288"] / capacity["uram288"])}

    auto = entry("auto")
    best = auto if auto["fits"] else None
    names = list(store_sizes)
    combos = [] if best else itertools.product(("block", "ultra"), repeat=len(names))
    for combo in combos:
        e = entry(dict(zip(names, combo)))
        if e["fits"] and (best is None or e["left_fraction"] > best["left_fraction"]):
            best = e
    return {"auto": auto, "best": best, "fits": best is not None, "capacity": capacity}


def fits_u50(store_sizes, banks, styles, reserve=None):
    """Return True if the stores mapped with ``styles`` fit the U50 (after ``reserve``)."""
    capacity = _capacity()
    left = _left(memory_map(store_sizes, banks, styles)["total"], capacity, reserve or {})
    return left["ramb36_equiv"] >= 0 and left["uram288"] >= 0


# ---- ttrain plan: the compiled memory map beside the dense baseline ------------------------

def plan_report(name, batch=None, order=None, steps=False, banks=None,
                fused_update=True, recompute="layer"):
    """Return the ``ttrain plan`` report of preset ``name`` as a JSON-ready dict.

    MACs per contraction order come from the planner (``golden/planner.py``). Memory comes
    from the compiled training step as the chip runs it
    (``golden.model_compiler.compile_model`` of ``chip_model_config(cfg)``; its default
    ``order="auto"`` when ``order`` is None, else ``order`` for every TT layer if the model
    compiler takes it, else the bi-directional flow; the planner's figures and ``entries``
    use ``order``, the bi-directional flow by default), with every store rounded to whole
    rows of ``banks`` words exactly as :func:`ttrain.platforms.hw.hw_config` sizes the chip
    (``banks`` defaults to :data:`~ttrain.platforms.hw.DEFAULT_LANES`, the ``ttrain
    resources`` default): ``onchip_bytes`` (per region class, ``padding`` = the rounding,
    and ``total``), ``compiled`` (per store, per class, per model part) and ``memory_ratio``
    against dense uncompressed FP32 SGD training (``golden/memory.py``). The planner's own
    count is kept as ``estimate`` with its error against the compiled step it models (no
    recomputation).
    ``fused_update``: compile with the fused SGD update (default, as the chip runs) or with
    one UPDATE at the end of the step (gradients in the parameters' layout). ``recompute``:
    the activation recomputation the step is compiled with (``golden.model_compiler.
    RECOMPUTE``; default ``"layer"``, the compiler's default); ``recompute_table`` has
    every setting's on-chip bytes (rounded as above), ratio and compiled MACs
    (``golden.memory.program_macs``) with the overhead against ``"none"``.
    """
    from ..golden.compiler import ORDERS
    from ..golden.config import get_config
    from ..golden.memory import CATEGORIES, REGION_CLASSES, WORD_BYTES, compiled_memory, \
        memory_report, program_macs
    from ..golden.model_compiler import RECOMPUTE, chip_model_config, compile_model
    from ..golden.planner import ORDER_NAMES, model_macs
    from .hw import DEFAULT_LANES, hw_config

    cfg = get_config(name)
    if batch is not None:
        if batch < 1:
            raise ValueError(f"--batch must be at least 1, got {batch}")
        cfg = cfg.with_(batch=batch)
    banks = DEFAULT_LANES if banks is None else banks
    check_banks(banks)
    mm = model_macs(cfg)
    plans = {(p.spec, p.tokens): p for _, p in mm["layers"]}
    plan_order = "bidirectional" if order is None else order
    mem = memory_report(cfg, order=plan_order, plans=plans)

    # ---- the compiled step, as the chip allocates it
    if recompute not in RECOMPUTE:
        raise ValueError(f"--recompute must be one of {', '.join(RECOMPUTE)}, got "
                         f"{recompute!r}")
    chip_cfg, notes = chip_model_config(cfg)
    compiled_order = "auto" if order is None else (order if order in ORDERS
                                                   else "bidirectional")
    try:
        cm = compile_model(chip_cfg, order=compiled_order, fused_update=fused_update,
                           recompute=recompute)
    except ValueError as e:
        if compiled_order == "auto":
            raise
        notes.append(f"the model compiler does not take order {order!r} ({e}); the memory "
                     f"map is its default order's")
        cm = compile_model(chip_cfg, fused_update=fused_update, recompute=recompute)
    compiled_order = cm.order
    comp = compiled_memory(cm)
    W = WORD_BYTES

    def chip_words(c):
        return hw_config({cfg.name: c}, config=cfg.name, banks=banks, lanes=banks).stores

    words = chip_words(cm)
    dense_total = mem.dense_training_bytes
    table = []
    for r in RECOMPUTE:
        # the same TT orders for every setting: the MACs compare like for like
        c = cm if r == recompute else compile_model(chip_cfg, order=compiled_order,
                                                   fused_update=fused_update, recompute=r)
        w = chip_words(c)
        if r == "none":
            cm_none, words_none = c, w
        table.append({"recompute": r, "stores": w, "onchip_bytes": sum(w.values()) * W,
                      "classes": {k: v * W for k, v in compiled_memory(c)["classes"].items()},
                      "memory_ratio": dense_total / (sum(w.values()) * W),
                      "macs": program_macs(c.program)})
    none_macs = next(t["macs"] for t in table if t["recompute"] == "none")
    for t in table:
        t["mac_overhead"] = t["macs"] / none_macs - 1
    onchip = {c: comp["classes"][c] * W for c in REGION_CLASSES}
    onchip["padding"] = (sum(words.values()) - sum(comp["stores"].values())) * W
    onchip["total"] = sum(words.values()) * W
    stores = {s: {"words": words[s], "compiled_words": comp["stores"].get(s, 0),
                  "bytes": words[s] * W,
                  "classes": {c: v * W for c, v in comp["store_classes"].get(s, {}).items()}}
              for s in words}

    # ---- the planner's estimate and its error against the compiled step it models (no
    # recomputation: every activation kept for the backward pass)
    est = mem.onchip
    comp_none = compiled_memory(cm_none)
    on_none = {c: comp_none["classes"][c] * W for c in REGION_CLASSES}
    on_none["total"] = sum(words_none.values()) * W
    error = {}
    for c in CATEGORIES + ("total",):
        got = on_none[c]
        error[c] = {"estimate": est[c], "compiled": got, "error": est[c] - got,
                    "relative": (est[c] - got) / got if got else None}

    layers, entries = [], []
    for (lname, lp), lm in zip(mm["layers"], mem.layers):
        chosen = lp.best if plan_order == "best" else plan_order
        macs = {o: lp.orders[o].macs for o in ORDER_NAMES}
        macs["dense"] = lp.dense.macs
        layer = {"name": lname, "shape": lm["shape"], "in_modes": lm["in_modes"],
                 "out_modes": lm["out_modes"], "ranks": lm["ranks"], "tokens": lp.tokens,
                 "best": lp.best, "macs": macs,
                 "forward_macs": {o: lp.orders[o].forward_macs for o in ORDER_NAMES},
                 "peak_live_words": {o: lp.orders[o].peak_live_words for o in ORDER_NAMES},
                 "saved_words": {o: lp.orders[o].saved_words for o in ORDER_NAMES},
                 "dp_best_tree": lp.orders["dp_best"].tree,
                 "estimate_bytes": {c: lm[c] for c in CATEGORIES + ("total",)},
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
    entry_total = sum(e["macs"] for e in entries)
    return {
        "config": cfg.name, "batch": cfg.batch, "seq_len": cfg.seq_len, "tokens": cfg.tokens,
        "order": plan_order,
        "objective": mm["layers"][0][1].objective,
        "onchip_bytes": onchip, "dense_bytes": mem.dense,
        "dense_training_bytes": dense_total, "memory_ratio": dense_total / onchip["total"],
        "compiled": {"source": "golden/model_compiler.py compile_model (chip_model_config), "
                               f"stores rounded to whole rows of {banks} banks "
                               "(platforms/hw.py hw_config)",
                     "order": compiled_order, "fused_update": comp["fused_update"],
                     "recompute": comp["recompute"], "allocate": comp["allocate"],
                     "ttm_group": comp["ttm_group"], "macs": program_macs(cm.program),
                     "peak": {s: {"words": d["words"], "live_sum": d["live_sum"],
                                  "at": d["at"],
                                  "largest_live": dict(list(d["regions"].items())[:8])}
                              for s, d in comp["peak"].items()},
                     "banks": banks, "notes": notes, "stores": stores,
                     "layers": {p: {c: v * W for c, v in d.items()}
                                for p, d in comp["layers"].items()},
                     "regions": {c: {r: v * W for r, v in d.items()}
                                 for c, d in comp["regions"].items()}},
        "estimate": {"source": "golden/memory.py memory_report (planner estimate, not what "
                               "the chip allocates)",
                     "error_against": "the compiled step with recompute none (what the "
                                      "planner models: every activation kept)",
                     "onchip_bytes": est, "memory_ratio": mem.memory_ratio,
                     "error": error, "items": mem.onchip_items,
                     "scratch_phase": mem.scratch_phase},
        "recompute": recompute, "recompute_table": table,
        "macs": dict(mm["totals"]), "update_macs": mm["update"], "other_macs": mm["other"],
        "embedding": mm["embedding"], "layers": layers, "entries": entries,
        "total": {"macs": entry_total, "onchip_bytes": onchip["total"]},
        "memory": {"dense": mem.dense_items, "dense_scratch_phase": mem.dense_scratch_phase},
    }
