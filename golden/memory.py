"""On-chip memory of one tensor-compressed training step, and of dense training beside it.

Everything is FP32 (4 bytes a word; token ids and labels are counted as one word each). The
rules are written out in ``docs/memory-accounting.md``; in short, for a :class:`ModelConfig`
with ``b`` sentences of ``S`` tokens (``B = b S``):

``parameters``
    TT cores and biases of every TT layer, the TTM embedding cores, position (``S x D``) and
    segment embeddings, every LayerNorm's gamma and beta, the dense intent head (and the slot
    head when the config has one).
``gradients``
    the same layout as ``parameters``; the TTM gradient is stored core-sized (only the slices a
    token selects are written, but the store is not compressed further).
``activations``
    what the backward pass reads that the forward pass wrote: each TT layer's input ``X`` (Q, K
    and V share one) and the intermediates its contraction order keeps between the phases
    (``Z``, ``L``, ``R``, prefix/suffix products: :attr:`OrderPlan.saved_words`), Q, K, V, the
    attention probabilities, LayerNorm ``x_hat`` and ``1/sigma``, GELU inputs, the tanh output,
    softmax outputs of the heads, token/segment ids and labels.
``scratch``
    the largest set of temporaries live at once during one backward phase (activation-gradient
    buffers, the residual gradient held across a branch, and the order's non-kept
    intermediates, :attr:`OrderPlan.temp_peak_words`); phases run one after the other so
    scratch is reused and only the largest counts.

The dense side uses the same model, batch and rules with dense ``W`` (``N_in x N_out``) in every
TT layer's place and a dense ``V x D`` embedding table: dense parameters + dense gradients
(plain SGD: no optimizer state) + saved activations (no TT intermediates) + scratch.
"""

from dataclasses import dataclass

from .config import ModelConfig
from .planner import ORDER_NAMES, layer_tokens, plan_layer, ttm_cost

__all__ = ["WORD_BYTES", "CATEGORIES", "MemoryReport", "memory_report", "REGION_CLASSES",
           "region_layer", "compiled_memory", "program_macs"]

#: Bytes per FP32 word.
WORD_BYTES = 4
#: Memory categories, in report order.
CATEGORIES = ("parameters", "gradients", "activations", "scratch")


@dataclass
class MemoryReport:
    """On-chip and dense training memory of one config (all figures in bytes).

    Members
    -------
    config : str
    tokens : int
        B, tokens per step.
    order : str
        Contraction order whose kept intermediates and temporaries are counted.
    onchip_items, dense_items : dict
        ``{category: {item: bytes}}``.
    layers : list of dict
        Per TT layer: ``name``, ``shape``, ``ranks``, ``tokens``, bytes per category and
        ``total`` (parameters + gradients + activations: the layer's own storage). Its
        ``scratch`` is the size of the backward phase it runs in (``scratch_phase``); scratch
        is shared between phases, so it is not part of ``total`` and does not add up.
    scratch_phase, dense_scratch_phase : str
        The backward phase that sets the scratch size.
    """
    config: str
    tokens: int
    order: str
    onchip_items: dict
    dense_items: dict
    layers: list
    scratch_phase: str
    dense_scratch_phase: str

    @staticmethod
    def _split(items):
        out = {c: sum(items[c].values()) for c in CATEGORIES}
        out["total"] = sum(out[c] for c in CATEGORIES)
        return out

    @property
    def onchip(self):
        """On-chip bytes per category and ``total``."""
        return self._split(self.onchip_items)

    @property
    def dense(self):
        """Dense-training bytes per category and ``total``."""
        return self._split(self.dense_items)

    @property
    def dense_training_bytes(self):
        """Total bytes of dense uncompressed FP32 SGD training of the same model and batch."""
        return self.dense["total"]

    @property
    def memory_ratio(self):
        """``dense_training_bytes / onchip total``."""
        return self.dense_training_bytes / self.onchip["total"]

    def to_dict(self):
        return {"config": self.config, "tokens": self.tokens, "order": self.order,
                "onchip_bytes": self.onchip, "dense_bytes": self.dense,
                "dense_training_bytes": self.dense_training_bytes,
                "memory_ratio": self.memory_ratio,
                "onchip_items": self.onchip_items, "dense_items": self.dense_items,
                "scratch_phase": self.scratch_phase,
                "dense_scratch_phase": self.dense_scratch_phase, "layers": self.layers}


def memory_report(cfg, order="bidirectional", batch=None, plans=None):
    """Return the :class:`MemoryReport` of one training step of ``cfg``.

    Parameters
    ----------
    cfg : ModelConfig
    order : str
        ``"bidirectional"`` (default: the flow the accelerator runs), ``"left_to_right"``,
        ``"dp_best"`` or ``"best"`` (each layer's best order by the planner's objective).
    batch : int, optional
        Sentences per step (default ``cfg.batch``).
    plans : dict, optional
        ``{(TTSpec, tokens): LayerPlan}`` cache shared with the caller.
    """
    if not isinstance(cfg, ModelConfig):
        raise TypeError(f"cfg must be a ModelConfig, not {type(cfg).__name__}")
    if order not in ORDER_NAMES + ("best",):
        raise ValueError(f"order must be one of {', '.join(ORDER_NAMES + ('best',))}, "
                         f"got {order!r}")
    if batch is not None:
        cfg = cfg.with_(batch=batch)
    plans = {} if plans is None else plans
    b, S, D, F, H = cfg.batch, cfg.seq_len, cfg.d_model, cfg.d_ffn, cfg.n_heads
    B = cfg.tokens
    W = WORD_BYTES

    def plan(name, spec):
        key = (spec, layer_tokens(cfg, name))
        if key not in plans:
            plans[key] = plan_layer(*key)
        return plans[key]

    tt = [(name, spec, plan(name, spec)) for name, spec in cfg.tt_layers()]

    def chosen(p):
        return p.orders[p.best if order == "best" else order]

    # ---------------------------------------------------------------- parameters (words)
    n_ln = 1 + 2 * cfg.n_layers + (1 if cfg.slot_head else 0)
    shared = {"layernorm": 2 * D * n_ln, "intent_head": D * cfg.n_intents + cfg.n_intents}
    if cfg.slot_head:
        shared["slot_head"] = D * cfg.n_slots + cfg.n_slots
    dense_pos_seg = {"position_embedding": S * D, "segment_embedding": cfg.n_segments * D}
    on_pos_seg = {k: (v if spec is None else spec.num_params) for (k, v), spec in
                  zip(dense_pos_seg.items(), (cfg.pos_embedding, cfg.seg_embedding))}
    on_par = {"tt_cores": sum(s.num_params for _, s, _ in tt),
              "tt_biases": sum(s.n_out for _, s, _ in tt),
              "ttm_embedding": cfg.embedding.num_params, **on_pos_seg, **shared}
    de_par = {"dense_weights": sum(s.n_in * s.n_out for _, s, _ in tt),
              "biases": sum(s.n_out for _, s, _ in tt),
              "embedding_table": cfg.vocab * D, **dense_pos_seg, **shared}

    # ---------------------------------------------------------------- activations (words)
    # Input X of each TT layer (Q, K and V read the same one).
    x_words = {}
    for i in range(cfg.n_layers):
        x_words.update({f"enc{i}.q": B * D, f"enc{i}.k": 0, f"enc{i}.v": 0,
                        f"enc{i}.o": B * D, f"enc{i}.ffn1": B * D, f"enc{i}.ffn2": B * F})
    x_words["pooler"] = b * D
    x_words["slot_pre"] = B * D
    acts = {"token_and_segment_ids": 2 * B, "intent_labels": b,
            "embedding_layernorm": B * D + B}
    for i in range(cfg.n_layers):
        acts[f"enc{i}.qkv"] = 3 * B * D
        acts[f"enc{i}.attention_probs"] = b * H * S * S
        acts[f"enc{i}.layernorm"] = 2 * (B * D + B)
        acts[f"enc{i}.gelu_input"] = B * F
    acts["pooler_tanh_output"] = b * D
    acts["intent_softmax"] = b * cfg.n_intents
    if cfg.slot_head:
        acts["slot_labels"] = B
        acts["slot_gelu_input"] = B * D
        acts["slot_layernorm"] = B * D + B
        acts["slot_head_input"] = B * D
        acts["slot_softmax"] = B * cfg.n_slots
    acts["tt_inputs"] = sum(x_words[name] for name, _, _ in tt)
    on_act = dict(acts)
    on_act["tt_kept_intermediates"] = sum(chosen(p).saved_words for _, _, p in tt)
    de_act = dict(acts)

    # ---------------------------------------------------------------- scratch (words)
    ttm = ttm_cost(cfg.embedding, B)

    def phases(temp):
        """Return ``{phase: words}``; ``temp(name)`` is the TT layer's temporaries."""
        ph = {}
        for i in range(cfg.n_layers):
            e = f"enc{i}"
            # post-LN block backward: the LN output gradient is the branch's dY and the
            # residual at once; the attention half holds it while O, attention and QKV run.
            ph[f"{e}.ffn2"] = B * D + B * F + temp(f"{e}.ffn2")
            ph[f"{e}.ffn1"] = B * F + B * D + B * D + temp(f"{e}.ffn1")
            ph[f"{e}.o"] = B * D + B * D + temp(f"{e}.o")
            ph[f"{e}.attention"] = B * D + b * H * S * S + 3 * B * D + B * D
            ph[f"{e}.qkv"] = 3 * B * D + B * D + B * D + max(
                temp(f"{e}.{p}") for p in ("q", "k", "v"))
        ph["pooler"] = 2 * b * D + temp("pooler")
        if cfg.slot_head:
            ph["slot_pre"] = 2 * B * D + temp("slot_pre")
        return ph

    temps = {name: chosen(p).temp_peak_words for name, _, p in tt}
    on_ph = phases(lambda n: temps[n])
    on_ph["embedding"] = B * D + ttm["scratch_words"]
    de_ph = phases(lambda n: 0)
    de_ph["embedding"] = B * D
    on_key = max(on_ph, key=on_ph.get)
    de_key = max(de_ph, key=de_ph.get)

    def to_bytes(d):
        return {k: v * W for k, v in d.items()}

    onchip_items = {"parameters": to_bytes(on_par), "gradients": to_bytes(on_par),
                    "activations": to_bytes(on_act),
                    "scratch": {f"phase {on_key}": on_ph[on_key] * W}}
    dense_items = {"parameters": to_bytes(de_par), "gradients": to_bytes(de_par),
                   "activations": to_bytes(de_act),
                   "scratch": {f"phase {de_key}": de_ph[de_key] * W}}

    layers = []
    for name, spec, p in tt:
        o = chosen(p)
        par = (spec.num_params + spec.n_out) * W
        act = (x_words[name] + o.saved_words) * W
        phase = name if name in on_ph else name.rsplit(".", 1)[0] + ".qkv"
        layers.append({"name": name, "in_modes": list(spec.in_modes),
                       "out_modes": list(spec.out_modes), "shape": [spec.n_in, spec.n_out],
                       "ranks": list(spec.ranks), "tokens": p.tokens, "order": o.name,
                       "parameters": par, "gradients": par, "activations": act,
                       "scratch": on_ph[phase] * W, "scratch_phase": phase,
                       "total": 2 * par + act})
    return MemoryReport(config=cfg.name, tokens=B, order=order, onchip_items=onchip_items,
                        dense_items=dense_items, layers=layers, scratch_phase=on_key,
                        dense_scratch_phase=de_key)


# ---- the compiled memory map (what the chip allocates) -------------------------------------

#: Region classes of a compiled step's memory map (:func:`compiled_memory`), in report order.
REGION_CLASSES = ("parameters", "gradients", "activations", "scratch", "sample_io")
#: Region names the host writes or reads every step (``golden/model_compiler.py``).
_SAMPLE_IO = ("in.", "loss", "logits")


def region_layer(name):
    """Return the model part a memory-map region of the whole-model compiler belongs to.

    ``grad:`` is dropped; ``enc{i}.*`` -> ``enc{i}``; ``emb.*`` -> ``embedding``; ``pooler*``,
    ``pin``, ``pooled`` -> ``pooler``; ``intent.*``, ``ce.*``, ``probs``, ``dlogits``,
    ``dpooled`` -> ``head``; ``in.*``, ``loss``, ``logits`` -> ``sample_io``; anything else
    (``dtop``, the gradient into the last block) -> ``shared``.
    """
    n = name[5:] if name.startswith("grad:") else name
    first = n.split(".", 1)[0]
    if first.startswith("enc") and first[3:].isdigit():
        return first
    if first == "emb":
        return "embedding"
    if first in ("pooler", "pin", "pooled"):
        return "pooler"
    if first in ("intent", "ce", "probs", "dlogits", "dpooled"):
        return "head"
    if n.startswith(_SAMPLE_IO):
        return "sample_io"
    return "shared"


def _region_classes(cm):
    """``{region: class}`` for every region of ``cm``'s memory map.

    The store decides for parameters and gradients; the names decide the sample I/O (the
    host's ``in.*``, ``loss``, ``logits``); every other region (act and scratch stores) is
    classed by its live interval (``cm.liveness``, the compiler's): ``activations`` when it
    is live across the end of the forward pass (written in the forward pass and read in the
    backward pass: with recomputation the kept sub-layer or layer inputs, the embedding's
    LayerNorm, and without it every TT input, ``Z = X·L``, Q/K/V, attention probabilities,
    LayerNorm ``x_hat``/``1/sigma`` ...), else ``scratch`` (a temporary of one phase:
    recomputed activations, backward buffers, recomputed merges, forward-only
    intermediates).
    """
    fwd_end = cm.sections["forward"][1]
    out = {}
    for name, r in cm.memory_map.items():
        if r.store == "param":
            out[name] = "parameters"
        elif r.store == "grad" or name.startswith("grad:"):
            out[name] = "gradients"            # (the TTM cores' may be in the act store)
        elif name.startswith(_SAMPLE_IO):
            out[name] = "sample_io"
        else:
            a, b = cm.liveness[r.store]["intervals"][name]
            out[name] = "activations" if a < fwd_end <= b else "scratch"
    return out


def compiled_memory(cm):
    """Return the memory of a compiled whole-model step (``compile_model(...)``) in words.

    This is what the chip allocates (before the platform rounds each store to whole rows of
    its banks, ``platforms/hw.py``). Returns a dict:

    ``stores``
        ``{store: words}`` (``program.store_sizes``).
    ``classes``
        ``{class: words}`` over :data:`REGION_CLASSES`, adding up to the stores' total: the
        param store is ``parameters``, the grad store ``gradients`` (with the fused update
        the liveness-allocated peak, less than the sum of the gradient regions); the act and
        scratch stores are split by :func:`_region_classes` over the regions live at the
        store's peak (``peak``; with ``allocate="bump"`` over every region), the words the
        allocator could not fill at the peak (none when the peak is the live sum) count as
        scratch.
    ``store_classes``
        ``{store: {class: words}}``.
    ``peak``
        ``{store: {"words", "live_sum", "at", "regions"}}`` for the act and scratch stores:
        the store's words, the largest sum of live region sizes, the instruction where it
        occurs and the regions live there (largest first).
    ``regions``
        ``{class: {region: words}}``: every region (with the liveness allocator regions share
        words, so these add up to more than the stores).
    ``layers``
        ``{part: {class: words}}`` by :func:`region_layer`, additive like ``classes``: at
        the peak of each act/scratch store; ``gradients`` is the sum of the part's gradient
        regions (with the fused update they share the grad store, so the parts' gradients
        add up to more than the store).
    ``fused_update``, ``recompute``, ``allocate``, ``ttm_group``
        The compiler options of the step.
    """
    classes = _region_classes(cm)
    mm = cm.memory_map
    stores = {s: int(w) for s, w in cm.store_sizes.items()}
    packed = getattr(cm, "allocate", "bump") == "liveness"
    store_classes = {s: {} for s in stores}
    regions = {c: {} for c in REGION_CLASSES}
    layers = {}
    peak = {}
    for s, info in cm.liveness.items():
        at = info["at"]
        live = sorted(((mm[n].size, n) for n, (a, b) in info["intervals"].items()
                       if a <= at <= b), reverse=True)
        peak[s] = {"words": stores.get(s, 0), "live_sum": info["live_sum"], "at": at,
                   "regions": {n: w for w, n in live}}

    def counted(name, r):
        if r.store not in peak or not packed:
            return True
        return name in peak[r.store]["regions"]

    for name, r in mm.items():
        c = classes[name]
        regions[c][name] = r.size
        part = layers.setdefault(region_layer(name), {k: 0 for k in REGION_CLASSES})
        if c == "gradients" or counted(name, r):
            part[c] += r.size
        if r.store != "grad" and counted(name, r):
            sc = store_classes[r.store]
            sc[c] = sc.get(c, 0) + r.size
    store_classes["grad"] = {"gradients": stores.get("grad", 0)}
    for s, sc in store_classes.items():
        # words no live region fills at the peak count as scratch
        rest = stores.get(s, 0) - sum(sc.values())
        if rest:
            sc["scratch"] = sc.get("scratch", 0) + rest
            if s in peak:
                layers.setdefault("shared", {k: 0 for k in REGION_CLASSES})["scratch"] += rest
    total = {c: sum(sc.get(c, 0) for sc in store_classes.values()) for c in REGION_CLASSES}
    return {"stores": stores, "classes": total, "store_classes": store_classes,
            "peak": peak, "regions": regions, "layers": layers,
            "fused_update": bool(getattr(cm, "fused_update", False)),
            "recompute": getattr(cm, "recompute", "none"),
            "allocate": getattr(cm, "allocate", "bump"),
            "ttm_group": getattr(cm, "ttm_group", 0)}


def program_macs(program):
    """Multiply-accumulates of one run of ``program`` (a :class:`~ttrain.golden.isa.Program`
    or instruction list): every CONTRACT's ``m * n * k * batch``, times its LOOP's count."""
    from .isa import Contract, EndLoop, Loop
    instrs = getattr(program, "instructions", program)
    total, count = 0, 1
    for ins in instrs:
        if isinstance(ins, Loop):
            count = ins.count
        elif isinstance(ins, EndLoop):
            count = 1
        elif isinstance(ins, Contract):
            d = ins.desc
            total += count * d.m * d.n * d.k * d.batch
    return total
