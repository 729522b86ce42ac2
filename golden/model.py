"""The tensorized BERT-style intent (and slot) classifier: parameters, forward/backward, predict.

Post-LN encoder (``algorithms.md`` §3, ``docs/model.md``)::

    emb    = Drop(LN_emb(TTM(tokens) + pos[0..S-1] + seg[segments]))
    block  X1 = LN_1(X + Drop(O(Attn(Q(X), K(X), V(X), mask))))  Q, K, V, O: TT-linear + bias
           X2 = LN_2(X1 + Drop(FFN2(GELU(FFN1(X1)))))            FFN1, FFN2: TT-linear + bias
    pooled = Drop(tanh(pooler(P) + b))       pooler: TT-linear; P = X2[:, 0] ([CLS], pooling
                                             "cls") or the mean of X2 over real tokens ("mean")
    intent_logits = pooled @ W_intent + b_intent                 dense
    slot head (cfg.slot_head): slot_logits = LN_slot(GELU(slot_pre(X2))) @ W_slot + b_slot

``Drop`` is inverted dropout with rate ``cfg.dropout`` (BERT's hidden-dropout places): it only
acts in training steps, i.e. when :func:`forward_backward` gets a ``rng`` that draws the masks;
evaluation, :func:`predict` and ``cfg.dropout == 0`` compute the identity (no random numbers
drawn, bit-identical to the model without dropout). The intent loss uses label smoothing
``cfg.label_smoothing`` (0 = plain cross-entropy).

Parameters live in one flat ``dict`` name -> ndarray (see :func:`param_shapes` for the names),
so an optimizer is one loop over keys. A TT layer ``name`` (``cfg.tt_layers()``) is stored as
``name.core0 .. name.core{2d-1}`` plus ``name.bias``.

Batches are dicts of NumPy arrays for ``n`` sentences of ``cfg.seq_len`` tokens:
``tokens`` int (n, S), ``segments`` int (n, S), ``mask`` bool (n, S) True = real token (position
0, [CLS], must be real), ``intent`` int (n,), and ``slots`` int (n, S) with -1 = ignore (needed
when ``cfg.slot_head``; labels at padded positions are ignored whatever their value).
"""

import contextlib
import functools
import math

import numpy as np
from threadpoolctl import ThreadpoolController

from . import layers as L
from . import tt

__all__ = [
    "INIT_STD", "param_shapes", "num_params", "init_params", "check_params", "validate_batch",
    "forward_backward", "intent_log_prior", "predict", "sgd_update", "clip_grads", "tt_cores",
    "blas_threads", "benchmark", "ttm_tables",
]

#: Initialization (``docs/model.md`` explains the choice). ``"embedding"`` is the absolute
#: standard deviation of the token rows (TTM, dense-equivalent), position and segment tables;
#: the others are gains: a layer with ``n_in`` inputs gets dense-equivalent std
#: ``gain / sqrt(n_in)`` (gain 1 keeps the variance of a unit-variance input).
INIT_STD = {
    "embedding": 1.0,   # LayerNorm follows the sum, so only the ratio of the three matters
    "encoder": 1.0,     # Q, K, V, O, FFN1, FFN2 (TT)
    "pooler": 0.4,      # pooler and slot_pre (TT): smaller, so tanh/GELU start unsaturated
    "head": 1.0,        # dense intent and slot heads
}


_BLAS = None


@contextlib.contextmanager
def blas_threads(n=1):
    """Limit BLAS to ``n`` threads inside the ``with`` block (restored afterwards).

    :func:`forward_backward` and :func:`predict` run under ``blas_threads(1)``: their matrices
    are small (hundreds of rows, tens of columns), where multi-threaded OpenBLAS only adds
    synchronization; on a busy 2-core machine a 512x12 @ 12x128 product took 7.8 ms with two
    threads and 0.04 ms with one.
    """
    global _BLAS
    if _BLAS is None:
        _BLAS = ThreadpoolController()
    with _BLAS.limit(limits=n, user_api="blas"):
        yield


def tt_cores(params, name, spec):
    """Return the list of TT cores of layer ``name`` stored in ``params``."""
    return [params[f"{name}.core{k}"] for k in range(2 * spec.d)]


def _ttm_cores(params, spec, table="tok"):
    return [params[f"emb.{table}.core{k}"] for k in range(spec.d)]


def ttm_tables(cfg):
    """Return ``{table: TTMSpec}`` of the TTM-compressed embedding tables of ``cfg``: always
    ``"tok"``, plus ``"pos"`` / ``"seg"`` when ``cfg.pos_embedding`` / ``cfg.seg_embedding``
    are set (their parameters are then ``emb.pos.core{k}`` / ``emb.seg.core{k}`` instead of
    the dense ``emb.pos`` / ``emb.seg``)."""
    out = {"tok": cfg.embedding}
    if cfg.pos_embedding is not None:
        out["pos"] = cfg.pos_embedding
    if cfg.seg_embedding is not None:
        out["seg"] = cfg.seg_embedding
    return out


@functools.lru_cache(maxsize=32)
def _shape_items(cfg):
    return tuple((k, tuple(v)) for k, v in param_shapes(cfg).items())


def param_shapes(cfg):
    """Return ``{name: shape}`` of every parameter of ``cfg``, in forward order.

    Names::

        emb.tok.core{k}               TTM token-embedding cores (r_k, v_k, e_k, r_k+1)
        emb.pos, emb.seg              dense position (seq_len, D) and segment (n_segments, D)
        emb.pos.core{k}, emb.seg.core{k}   instead, TTM cores when cfg.pos_embedding /
                                      cfg.seg_embedding are set (:func:`ttm_tables`)
        emb.ln.gamma, emb.ln.beta     embedding LayerNorm (D,)
        enc{i}.{q,k,v,o}.core{k}      attention TT cores, .bias (D,)
        enc{i}.ln1.gamma/.beta        LayerNorm after attention
        enc{i}.ffn1.core{k}, .bias    (d_ffn,) bias;  enc{i}.ffn2.core{k}, .bias (D,)
        enc{i}.ln2.gamma/.beta        LayerNorm after the FFN
        pooler.core{k}, pooler.bias   TT pre-classifier on [CLS]
        intent.weight (D, n_intents), intent.bias (n_intents,)
        slot_pre.core{k}, slot_pre.bias, slot.ln.gamma/.beta,
        slot.weight (D, n_slots), slot.bias (n_slots,)           only with cfg.slot_head
    """
    d = cfg.d_model
    shapes = {}
    for k, s in enumerate(cfg.embedding.core_shapes):
        shapes[f"emb.tok.core{k}"] = s
    for table, spec, rows in (("pos", cfg.pos_embedding, cfg.seq_len),
                              ("seg", cfg.seg_embedding, cfg.n_segments)):
        if spec is None:
            shapes[f"emb.{table}"] = (rows, d)
        else:
            for k, s in enumerate(spec.core_shapes):
                shapes[f"emb.{table}.core{k}"] = s
    shapes["emb.ln.gamma"] = shapes["emb.ln.beta"] = (d,)

    def add_tt(name, spec):
        for k, s in enumerate(spec.core_shapes):
            shapes[f"{name}.core{k}"] = s
        shapes[f"{name}.bias"] = (spec.n_out,)

    for i in range(cfg.n_layers):
        for p in ("q", "k", "v", "o"):
            add_tt(f"enc{i}.{p}", cfg.attention)
        shapes[f"enc{i}.ln1.gamma"] = shapes[f"enc{i}.ln1.beta"] = (d,)
        add_tt(f"enc{i}.ffn1", cfg.ffn1)
        add_tt(f"enc{i}.ffn2", cfg.ffn2)
        shapes[f"enc{i}.ln2.gamma"] = shapes[f"enc{i}.ln2.beta"] = (d,)
    add_tt("pooler", cfg.pooler)
    shapes["intent.weight"] = (d, cfg.n_intents)
    shapes["intent.bias"] = (cfg.n_intents,)
    if cfg.slot_head:
        add_tt("slot_pre", cfg.pooler)
        shapes["slot.ln.gamma"] = shapes["slot.ln.beta"] = (d,)
        shapes["slot.weight"] = (d, cfg.n_slots)
        shapes["slot.bias"] = (cfg.n_slots,)
    return shapes


def num_params(cfg):
    """Return the number of trainable scalars of ``cfg``."""
    return sum(math.prod(s) for s in param_shapes(cfg).values())


def _std(kind, n_in):
    if kind == "embedding":
        return float(INIT_STD["embedding"])
    return float(INIT_STD[kind]) / math.sqrt(n_in)


def init_params(cfg, rng, dtype=np.float32):
    """Return freshly initialized parameters of ``cfg`` (flat dict, see :func:`param_shapes`).

    TT and TTM cores are drawn by :func:`ttrain.golden.tt.init_tt_cores` /
    :func:`~ttrain.golden.tt.init_ttm_cores` with the dense-equivalent standard deviations of
    :data:`INIT_STD`, then scaled (all cores of a layer by the same factor) so the RMS of the
    dense matrix / table is exactly that std. Dense position/segment tables and heads are
    normal with those stds; biases and LayerNorm betas are 0, gammas 1.

    Parameters
    ----------
    cfg : ModelConfig
    rng : numpy.random.Generator
    dtype : float32 or float64
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator (np.random.default_rng(seed)), "
                        f"got {type(rng).__name__}")
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"dtype must be float32 or float64, got {dtype}")
    shapes = param_shapes(cfg)
    p = {}

    def normal(name, std):
        p[name] = (rng.standard_normal(shapes[name]) * std).astype(dtype)

    def put_tt(name, spec, kind):
        std = _std(kind, spec.n_in)
        cores = [c.astype(np.float64) for c in tt.init_tt_cores(spec, rng, std, np.float64)]
        # TT products have heavy-tailed norms: a draw can be 0.2x or 2x the target (a near-zero
        # V or O silences attention). Rescale so the dense-equivalent RMS is exactly ``std``.
        w, _ = tt.tt_linear_forward(spec, cores, np.eye(spec.n_in))
        scale = (std / np.sqrt(np.mean(w * w))) ** (1.0 / len(cores))
        for k, c in enumerate(cores):
            p[f"{name}.core{k}"] = np.ascontiguousarray(c * scale, dtype=dtype)
        p[f"{name}.bias"] = np.zeros(spec.n_out, dtype)

    def put_ln(name):
        p[f"{name}.gamma"] = np.ones(cfg.d_model, dtype)
        p[f"{name}.beta"] = np.zeros(cfg.d_model, dtype)

    emb_std = _std("embedding", cfg.d_model)

    def put_ttm(table, spec, rows):
        # rescaled so the RMS of the table's used rows is exactly emb_std
        cores = tt.init_ttm_cores(spec, rng, emb_std, np.float64)
        got, _ = tt.ttm_lookup(spec, cores, np.arange(rows))
        scale = (emb_std / np.sqrt(np.mean(got * got))) ** (1.0 / len(cores))
        for k, c in enumerate(cores):
            p[f"emb.{table}.core{k}"] = np.ascontiguousarray(c * scale, dtype=dtype)

    put_ttm("tok", cfg.embedding, cfg.vocab)
    for table, spec, rows in (("pos", cfg.pos_embedding, cfg.seq_len),
                              ("seg", cfg.seg_embedding, cfg.n_segments)):
        if spec is None:
            normal(f"emb.{table}", emb_std)
        else:
            put_ttm(table, spec, rows)
    put_ln("emb.ln")
    for i in range(cfg.n_layers):
        for proj in ("q", "k", "v", "o"):
            put_tt(f"enc{i}.{proj}", cfg.attention, "encoder")
        put_ln(f"enc{i}.ln1")
        put_tt(f"enc{i}.ffn1", cfg.ffn1, "encoder")
        put_tt(f"enc{i}.ffn2", cfg.ffn2, "encoder")
        put_ln(f"enc{i}.ln2")
    put_tt("pooler", cfg.pooler, "pooler")
    normal("intent.weight", _std("head", cfg.d_model))
    p["intent.bias"] = np.zeros(cfg.n_intents, dtype)
    if cfg.slot_head:
        put_tt("slot_pre", cfg.pooler, "pooler")
        put_ln("slot.ln")
        normal("slot.weight", _std("head", cfg.d_model))
        p["slot.bias"] = np.zeros(cfg.n_slots, dtype)
    # same order as param_shapes, so iteration order is the documented one
    return {name: p[name] for name in shapes}


def check_params(cfg, params):
    """Raise ValueError/TypeError unless ``params`` has exactly the names and shapes of ``cfg``.

    Returns the common dtype.
    """
    if not isinstance(params, dict):
        raise TypeError(f"params must be a dict name -> ndarray (init_params), got "
                        f"{type(params).__name__}")
    shapes = _shape_items(cfg)
    if len(params) != len(shapes) or any(k not in params for k, _ in shapes):
        names = dict(shapes)
        missing = [k for k in names if k not in params]
        extra = [k for k in params if k not in names]
        raise ValueError(
            f"params do not match config {cfg.name!r}: missing {missing[:5]}"
            f"{'...' if len(missing) > 5 else ''}, unexpected {extra[:5]}"
            f"{'...' if len(extra) > 5 else ''}; build them with init_params(cfg, rng)")
    dtype = None
    for k, shape in shapes:
        a = params[k]
        if not isinstance(a, np.ndarray) or a.shape != shape:
            got = a.shape if isinstance(a, np.ndarray) else type(a).__name__
            raise ValueError(f"param {k!r} must be an ndarray of shape {tuple(shape)}, got {got}")
        if dtype is None:
            dtype = a.dtype
            if dtype not in (np.float32, np.float64):
                raise TypeError(f"params must be float32 or float64, {k!r} is {dtype}")
        elif a.dtype != dtype:
            raise TypeError(f"all params must share one dtype: {k!r} is {a.dtype}, others "
                            f"{dtype}; cast them all with .astype()")
    return dtype


def _int_array(batch, key, shape):
    a = batch[key]
    if not isinstance(a, np.ndarray) or not np.issubdtype(a.dtype, np.integer):
        got = a.dtype if isinstance(a, np.ndarray) else type(a).__name__
        raise TypeError(f"batch[{key!r}] must be an integer NumPy array (int64), got {got}")
    if a.shape != shape:
        raise ValueError(f"batch[{key!r}] has shape {a.shape}, expected {shape} "
                         f"(n sentences x seq_len)" if len(shape) == 2 else
                         f"batch[{key!r}] has shape {a.shape}, expected {shape} (n sentences)")
    return a


def _check_range(key, a, lo, hi, what):
    if a.size and (a.min() < lo or a.max() >= hi):
        bad = a[(a < lo) | (a >= hi)]
        raise ValueError(f"batch[{key!r}] values must lie in [{lo}, {hi}) ({what}), found "
                         f"{bad[:5].tolist()}")


def validate_batch(cfg, batch, labels=True):
    """Raise ValueError/TypeError unless ``batch`` is a valid batch for ``cfg``.

    Parameters
    ----------
    cfg : ModelConfig
    batch : dict
        See the module docstring.
    labels : bool
        Require ``intent`` (and ``slots`` when ``cfg.slot_head``).

    Returns
    -------
    n : int
        Number of sentences.
    """
    if not isinstance(batch, dict):
        raise TypeError(f"batch must be a dict of NumPy arrays, got {type(batch).__name__}")
    need = ["tokens", "segments", "mask"]
    if labels:
        need.append("intent")
        if cfg.slot_head:
            need.append("slots")
    missing = [k for k in need if k not in batch]
    if missing:
        hint = ""
        if "slots" in missing:
            hint = " (the config has slot_head=True; give slot labels, -1 where unknown)"
        raise ValueError(f"batch is missing {missing}{hint}")
    tokens = batch["tokens"]
    if not isinstance(tokens, np.ndarray) or tokens.ndim != 2:
        got = tokens.shape if isinstance(tokens, np.ndarray) else type(tokens).__name__
        raise ValueError(f"batch['tokens'] must be a 2-D array (n, seq_len), got {got}")
    n, s = tokens.shape
    if s != cfg.seq_len:
        raise ValueError(f"batch sequences have length {s} but config {cfg.name!r} has seq_len "
                         f"{cfg.seq_len}: pad or truncate to {cfg.seq_len}")
    if n < 1:
        raise ValueError("batch is empty: give at least one sentence")
    _check_range("tokens", _int_array(batch, "tokens", (n, s)), 0, cfg.vocab, "vocabulary")
    _check_range("segments", _int_array(batch, "segments", (n, s)), 0, cfg.n_segments,
                 "segment ids")
    mask = batch["mask"]
    if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_:
        got = mask.dtype if isinstance(mask, np.ndarray) else type(mask).__name__
        raise TypeError(f"batch['mask'] must be a bool array (True = real token), got {got}")
    if mask.shape != (n, s):
        raise ValueError(f"batch['mask'] has shape {mask.shape}, expected {(n, s)}")
    if not mask[:, 0].all():
        raise ValueError("batch['mask'][:, 0] must be True: position 0 holds [CLS], which the "
                         "pooler reads")
    if "intent" in batch:
        _check_range("intent", _int_array(batch, "intent", (n,)), 0, cfg.n_intents,
                     "intent classes")
    if "slots" in batch:
        _check_range("slots", _int_array(batch, "slots", (n, s)), -1, cfg.n_slots,
                     "slot classes, -1 = ignore")
    return n


def _dropout(x, rate, rng):
    """Inverted dropout: ``x * keep / (1 - rate)``; returns ``(y, scaled_mask)`` (mask None = off)."""
    if rng is None or rate == 0:
        return x, None
    keep = rng.random(x.shape) >= rate
    mask = keep.astype(x.dtype) * x.dtype.type(1.0 / (1.0 - rate))
    return x * mask, mask


def _dropout_backward(mask, dy):
    return dy if mask is None else dy * mask


def _forward(cfg, params, batch, rng=None):
    """Run the model; return ``(out, caches)`` (logits and everything backward needs).

    ``rng`` (a ``numpy.random.Generator``) switches on training-mode dropout (``cfg.dropout``);
    masks are drawn in forward order: embedding, then per layer attention and FFN outputs,
    then the pooled vector.

    Position-wise work runs on the ``T`` real tokens only ("packed" rows, ``x_full[mask]``):
    padded positions cannot influence real ones (their keys get exactly zero attention weight)
    and their outputs feed no loss, so computing them would only cost time (ATIS sentences
    fill about 40% of the 32 positions).
    """
    tokens, segments, mask = batch["tokens"], batch["segments"], batch["mask"]
    n, s = tokens.shape
    real = np.flatnonzero(mask.reshape(-1))             # flat positions of the real tokens
    cls = np.searchsorted(real, np.arange(n) * s)        # packed row of each [CLS]
    c = {"mask": mask, "cls": cls}
    tok, c["tok"] = L.ttm_embedding_forward(cfg.embedding, _ttm_cores(params, cfg.embedding),
                                            tokens.reshape(-1)[real])
    ids = {"pos": real % s, "seg": segments.reshape(-1)[real]}
    rows = {}
    for table, spec in (("pos", cfg.pos_embedding), ("seg", cfg.seg_embedding)):
        if spec is None:
            rows[table], c[table] = L.embedding_forward(params[f"emb.{table}"], ids[table])
        else:
            rows[table], c[table] = L.ttm_embedding_forward(
                spec, _ttm_cores(params, spec, table), ids[table])
    pos, seg = rows["pos"], rows["seg"]
    x, c["emb.ln"] = L.layernorm_forward(tok + pos + seg, params["emb.ln.gamma"],
                                         params["emb.ln.beta"], cfg.ln_eps)
    x, c["emb.drop"] = _dropout(x, cfg.dropout, rng)
    for i in range(cfg.n_layers):
        e = f"enc{i}"
        proj = {p: (tt_cores(params, f"{e}.{p}", cfg.attention), params[f"{e}.{p}.bias"])
                for p in ("q", "k", "v", "o")}
        att, c[f"{e}.mha"] = L.mha_forward(cfg.attention, proj, x, mask, cfg.n_heads,
                                           packed=True)
        att, c[f"{e}.mha.drop"] = _dropout(att, cfg.dropout, rng)
        x, c[f"{e}.ln1"] = L.layernorm_forward(x + att, params[f"{e}.ln1.gamma"],
                                               params[f"{e}.ln1.beta"], cfg.ln_eps)
        h, c[f"{e}.ffn1"] = L.tt_linear_bias_forward(
            cfg.ffn1, tt_cores(params, f"{e}.ffn1", cfg.ffn1), params[f"{e}.ffn1.bias"], x)
        h, c[f"{e}.gelu"] = L.gelu_forward(h)
        f, c[f"{e}.ffn2"] = L.tt_linear_bias_forward(
            cfg.ffn2, tt_cores(params, f"{e}.ffn2", cfg.ffn2), params[f"{e}.ffn2.bias"], h)
        f, c[f"{e}.ffn2.drop"] = _dropout(f, cfg.dropout, rng)
        x, c[f"{e}.ln2"] = L.layernorm_forward(x + f, params[f"{e}.ln2.gamma"],
                                               params[f"{e}.ln2.beta"], cfg.ln_eps)
    out = {}
    if cfg.pooling == "mean":
        counts = mask.sum(axis=1)
        c["counts"] = counts
        pin = np.add.reduceat(x, cls, axis=0) / counts[:, None].astype(x.dtype)
    else:
        pin = x[cls]
    pooled, c["pooler"] = L.tt_linear_bias_forward(
        cfg.pooler, tt_cores(params, "pooler", cfg.pooler), params["pooler.bias"], pin)
    pooled, c["tanh"] = L.tanh_forward(pooled)
    pooled, c["pooled.drop"] = _dropout(pooled, cfg.dropout, rng)
    out["intent_logits"], c["intent"] = L.linear_forward(pooled, params["intent.weight"],
                                                         params["intent.bias"])
    if cfg.slot_head:
        sl, c["slot_pre"] = L.tt_linear_bias_forward(
            cfg.pooler, tt_cores(params, "slot_pre", cfg.pooler), params["slot_pre.bias"], x)
        sl, c["slot.gelu"] = L.gelu_forward(sl)
        sl, c["slot.ln"] = L.layernorm_forward(sl, params["slot.ln.gamma"],
                                               params["slot.ln.beta"], cfg.ln_eps)
        packed, c["slot"] = L.linear_forward(sl, params["slot.weight"], params["slot.bias"])
        out["slot_logits_packed"] = packed
        full = np.zeros((n, s, cfg.n_slots), packed.dtype)
        full[mask] = packed
        out["slot_logits"] = full
    c["x_shape"] = x.shape
    return out, c


def _put_tt(grads, name, dcores, dbias):
    for k, g in enumerate(dcores):
        grads[f"{name}.core{k}"] = g
    grads[f"{name}.bias"] = dbias


def _backward(cfg, params, c, d_intent, d_slot):
    """Backpropagate logit gradients (``d_slot`` packed, (T, n_slots)) through :func:`_forward`."""
    g = {}
    dpooled, g["intent.weight"], g["intent.bias"] = L.linear_backward(c["intent"], d_intent)
    dpooled = _dropout_backward(c["pooled.drop"], dpooled)
    dpooled = L.tanh_backward(c["tanh"], dpooled)
    dcls, dcores, dbias = L.tt_linear_bias_backward(c["pooler"], dpooled)
    _put_tt(g, "pooler", dcores, dbias)
    if cfg.slot_head:
        ds, g["slot.weight"], g["slot.bias"] = L.linear_backward(c["slot"], d_slot)
        ds, g["slot.ln.gamma"], g["slot.ln.beta"] = L.layernorm_backward(c["slot.ln"], ds)
        ds = L.gelu_backward(c["slot.gelu"], ds)
        dx, dcores, dbias = L.tt_linear_bias_backward(c["slot_pre"], ds)
        _put_tt(g, "slot_pre", dcores, dbias)
    else:
        dx = np.zeros(c["x_shape"], dcls.dtype)
    if cfg.pooling == "mean":
        counts = c["counts"]
        dx += np.repeat(dcls / counts[:, None].astype(dcls.dtype), counts, axis=0)
    else:
        dx[c["cls"]] += dcls                             # [CLS] rows are distinct
    for i in reversed(range(cfg.n_layers)):
        e = f"enc{i}"
        dsum, g[f"{e}.ln2.gamma"], g[f"{e}.ln2.beta"] = L.layernorm_backward(c[f"{e}.ln2"], dx)
        dh, dcores, dbias = L.tt_linear_bias_backward(
            c[f"{e}.ffn2"], _dropout_backward(c[f"{e}.ffn2.drop"], dsum))
        _put_tt(g, f"{e}.ffn2", dcores, dbias)
        dh = L.gelu_backward(c[f"{e}.gelu"], dh)
        dx1, dcores, dbias = L.tt_linear_bias_backward(c[f"{e}.ffn1"], dh)
        _put_tt(g, f"{e}.ffn1", dcores, dbias)
        dx1 = dx1 + dsum                             # residual X1 -> X2
        dsum, g[f"{e}.ln1.gamma"], g[f"{e}.ln1.beta"] = L.layernorm_backward(c[f"{e}.ln1"], dx1)
        dx, pgrads = L.mha_backward(c[f"{e}.mha"],
                                    _dropout_backward(c[f"{e}.mha.drop"], dsum))
        for p, (dcores, dbias) in pgrads.items():
            _put_tt(g, f"{e}.{p}", dcores, dbias)
        dx = dx + dsum                               # residual X -> X1
    dx = _dropout_backward(c["emb.drop"], dx)
    demb, g["emb.ln.gamma"], g["emb.ln.beta"] = L.layernorm_backward(c["emb.ln"], dx)
    for table, spec in (("seg", cfg.seg_embedding), ("pos", cfg.pos_embedding)):
        if spec is None:
            g[f"emb.{table}"] = L.embedding_backward(c[table], demb)
        else:
            for k, gk in enumerate(L.ttm_embedding_backward(c[table], demb)):
                g[f"emb.{table}.core{k}"] = gk
    for k, gk in enumerate(L.ttm_embedding_backward(c["tok"], demb)):
        g[f"emb.tok.core{k}"] = gk
    return {name: g[name] for name in params}


def forward_backward(cfg, params, batch, need_grads=True, rng=None, intent_offset=None):
    """Compute the training loss, its parameter gradients and the logits of one batch.

    Parameters
    ----------
    cfg : ModelConfig
    params : dict
        From :func:`init_params` (float32 for training, float64 for gradient checks).
    batch : dict
        Labelled batch (module docstring); ``n`` may differ from ``cfg.batch``.
    need_grads : bool
        Skip the backward pass when False (evaluation).
    rng : numpy.random.Generator, optional
        Training mode: draws the dropout masks of ``cfg.dropout`` (a fresh mask per call; the
        same generator state gives the same masks). None (evaluation) = no dropout.
    intent_offset : ndarray, shape (n_intents,), optional
        Added to the intent logits inside the loss only (logit-adjusted loss: ``tau * log
        prior``, see :func:`intent_log_prior`); the returned logits and predictions are the
        model's own. None = 0.

    Returns
    -------
    loss : float
        Mean intent cross-entropy (label-smoothed by ``cfg.label_smoothing``), plus the mean slot cross-entropy over real, non-ignored
        tokens when ``cfg.slot_head``.
    grads : dict or None
        Same keys, shapes and dtype as ``params``.
    out : dict
        ``intent_logits`` (n, n_intents), ``intent_loss``; with the slot head ``slot_logits``
        (n, S, n_slots), 0 at padded positions (they are never computed), and ``slot_loss``.
    """
    check_params(cfg, params)
    validate_batch(cfg, batch, labels=True)
    if rng is not None and not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator (training mode) or None "
                        f"(evaluation), got {type(rng).__name__}")
    if intent_offset is not None:
        intent_offset = np.asarray(intent_offset)
        if intent_offset.shape != (cfg.n_intents,) or not np.isfinite(intent_offset).all():
            raise ValueError(f"intent_offset must be {cfg.n_intents} finite numbers (one per "
                             f"intent), got shape {intent_offset.shape}")
    with blas_threads(1):
        return _forward_backward(cfg, params, batch, need_grads, rng, intent_offset)


def intent_log_prior(labels, n_intents, tau=1.0):
    """Return the logit-adjustment offset ``tau * log(count_c / N)`` of training labels.

    Intents with no training sentence get the offset of the most frequent intent (they are
    never a target, so no boost: the loss only pushes their logits down).
    """
    labels = np.asarray(labels)
    if labels.size == 0 or not np.issubdtype(labels.dtype, np.integer) \
            or labels.min() < 0 or labels.max() >= n_intents:
        raise ValueError(f"labels must be a non-empty array of intent ids in [0, {n_intents})")
    counts = np.bincount(labels, minlength=n_intents).astype(np.float64)
    n = counts.sum()
    counts[counts == 0] = counts.max()
    return tau * np.log(counts / n)


def _forward_backward(cfg, params, batch, need_grads, rng=None, intent_offset=None):
    out, caches = _forward(cfg, params, batch, rng)
    logits = out["intent_logits"]
    if intent_offset is not None:
        logits = logits + intent_offset.astype(logits.dtype)
    loss_i, ce_i = L.cross_entropy_forward(logits, batch["intent"])
    eps = cfg.label_smoothing
    if eps:
        # (1 - eps) CE(one-hot) + eps CE(uniform); CE(uniform) = -mean_c log p_c
        z = logits - logits.max(axis=-1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
        loss_i = logits.dtype.type((1.0 - eps) * loss_i - eps * float(logp.mean()))
    out["intent_loss"] = float(loss_i)
    loss = float(loss_i)
    ce_s = None
    if cfg.slot_head:
        labels = batch["slots"][batch["mask"]]         # packed; padded positions never count
        loss_s, ce_s = L.cross_entropy_forward(out.pop("slot_logits_packed"), labels)
        out["slot_loss"] = float(loss_s)
        loss = float(loss_i + loss_s)
    if not need_grads:
        return loss, None, out
    d_intent = L.cross_entropy_backward(ce_i)
    if eps:
        # gradient (p - target) / n with target (1 - eps) one-hot + eps / C
        n, n_cls = logits.shape
        d_intent += (eps / n) * (np.eye(n_cls, dtype=logits.dtype)[batch["intent"]]
                                 - logits.dtype.type(1.0 / n_cls))
    d_slot = L.cross_entropy_backward(ce_s) if ce_s is not None else None
    return loss, _backward(cfg, params, caches, d_intent, d_slot), out


def predict(cfg, params, batch):
    """Return predicted classes: ``intent`` (n,), and ``slots`` (n, S) with the slot head.

    Labels in ``batch`` are not needed. Slot predictions at padded positions are -1.
    """
    check_params(cfg, params)
    validate_batch(cfg, batch, labels=False)
    with blas_threads(1):
        out, _ = _forward(cfg, params, batch)
    res = {"intent": out["intent_logits"].argmax(axis=-1)}
    if cfg.slot_head:
        res["slots"] = np.where(batch["mask"], out["slot_logits"].argmax(axis=-1), -1)
    return res


def sgd_update(params, grads, lr):
    """Apply plain SGD in place: ``p -= lr * g`` for every parameter.

    Raises ValueError if the two dicts do not have the same keys and shapes.
    """
    if params.keys() != grads.keys():
        raise ValueError(f"grads keys differ from params keys: missing "
                         f"{sorted(set(params) - set(grads))[:5]}, unexpected "
                         f"{sorted(set(grads) - set(params))[:5]}")
    lr = float(lr)
    for k, p in params.items():
        g = grads[k]
        if g.shape != p.shape:
            raise ValueError(f"grad {k!r} has shape {g.shape}, param {p.shape}")
        p -= lr * g


def clip_grads(grads, max_norm):
    """Scale ``grads`` in place so their global L2 norm is at most ``max_norm``.

    Returns the norm before clipping. Plain SGD on TT cores can hit late loss spikes (see
    ``docs/model.md``, Initialization); clipping the global norm is the usual remedy.
    """
    max_norm = float(max_norm)
    if not max_norm > 0:
        raise ValueError(f"max_norm must be positive, got {max_norm!r}")
    norm = math.sqrt(sum(float(np.vdot(g, g)) for g in grads.values()))
    if norm > max_norm:
        scale = max_norm / norm
        for g in grads.values():
            g *= scale
    return norm


def benchmark(cfg, steps=50, mean_len=None, seed=0):
    """Time :func:`forward_backward` on random float32 batches of ``cfg.batch`` sentences.

    Parameters
    ----------
    cfg : ModelConfig
    steps : int
        Timed steps (after one warm-up step).
    mean_len : float, optional
        Mean real length including [CLS] (lengths uniform in ``[2, 2 * mean_len - 2]``,
        clipped to ``seq_len``); None fills every position. ATIS averages 12.3 with [CLS].
    seed : int

    Returns
    -------
    dict
        ``wall_ms`` and ``cpu_ms`` (medians per step) and ``tokens`` (mean real tokens per
        batch).
    """
    import time
    rng = np.random.default_rng(seed)
    params = init_params(cfg, rng)
    n, s = cfg.batch, cfg.seq_len
    batches = []
    for _ in range(steps + 1):
        if mean_len is None:
            lengths = np.full(n, s)
        else:
            lengths = np.clip(rng.integers(2, max(3, int(2 * mean_len - 1)), size=n), 2, s)
        mask = np.arange(s)[None, :] < lengths[:, None]
        b = {"tokens": np.where(mask, rng.integers(0, cfg.vocab, size=(n, s)), 0),
             "segments": np.zeros((n, s), np.int64), "mask": mask,
             "intent": rng.integers(0, cfg.n_intents, size=n)}
        if cfg.slot_head:
            b["slots"] = np.where(mask, rng.integers(0, cfg.n_slots, size=(n, s)), -1)
        batches.append(b)
    forward_backward(cfg, params, batches[0])
    wall, cpu = [], []
    for b in batches[1:]:
        t0, c0 = time.perf_counter(), time.process_time()
        forward_backward(cfg, params, b)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return {"wall_ms": 1e3 * float(np.median(wall)), "cpu_ms": 1e3 * float(np.median(cpu)),
            "tokens": float(np.mean([b["mask"].sum() for b in batches[1:]]))}


if __name__ == "__main__":   # python -m ttrain.golden.model [preset ...]
    import sys
    from .config import get_config
    for _name in sys.argv[1:] or ["small"]:
        for _slot in (False, True):
            _cfg = get_config(_name).with_(slot_head=_slot)
            for _len in (12.3, None):
                _r = benchmark(_cfg, mean_len=_len)
                print(f"{_name:8s} slot_head={_slot!s:5s} "
                      f"{'ATIS-like' if _len else 'full':9s} ({_r['tokens']:5.0f} real tokens): "
                      f"forward_backward {_r['wall_ms']:6.1f} ms wall, {_r['cpu_ms']:6.1f} ms CPU "
                      f"(medians of 50)")
