"""Transformer layers of the golden fast path: forward and backward, vectorized NumPy.

Every layer is a pair of functions. ``*_forward(...)`` returns ``(out, cache)``;
``*_backward(cache, dout)`` returns the gradient with respect to the input(s) followed by the
parameter gradients. Inputs may carry any leading batch shape (``(n, S, ...)`` in the model) and
every result keeps the dtype of the inputs (float32 for training, float64 for gradient checks):
constants are Python floats, which NumPy 2 never lets promote an array.

Numerical definitions the hardware must follow (``docs/model.md``):

* GELU is the **tanh approximation**
  ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``. The pooler already needs tanh, so the
  special-function unit implements one transcendental (tanh, itself built from exp and a
  reciprocal that softmax needs anyway) instead of adding erf.
* Attention scores are ``(Q K^T) * (1/sqrt(d_head))`` plus :data:`MASK_VALUE` on padded keys,
  softmax over keys with the row maximum subtracted first.
* LayerNorm uses the biased variance, ``(x - mean) / sqrt(var + eps) * gamma + beta``.
* Cross-entropy is the mean over non-ignored labels (label ``-1`` is ignored).

TT-linear and TTM layers wrap :mod:`ttrain.golden.tt`; this module has no tensor-train
arithmetic of its own.
"""

import math

import numpy as np

from . import tt

__all__ = [
    "MASK_VALUE", "IGNORE_INDEX", "GELU_C", "GELU_A",
    "linear_forward", "linear_backward",
    "tt_linear_bias_forward", "tt_linear_bias_backward",
    "ttm_embedding_forward", "ttm_embedding_backward",
    "embedding_forward", "embedding_backward",
    "layernorm_forward", "layernorm_backward",
    "gelu_forward", "gelu_backward",
    "tanh_forward", "tanh_backward",
    "residual_forward", "residual_backward",
    "attention_forward", "attention_backward",
    "mha_forward", "mha_backward",
    "cross_entropy_forward", "cross_entropy_backward",
]

#: Additive score for padded keys. -1e9 is exact in FP32 (1e9 = 2^9 * 5^9) and so far below any
#: real score that ``exp(masked - max)`` underflows to exactly 0 in FP32 and FP64: padded keys
#: get exactly zero attention weight and zero gradient, whatever the scores. A finite value (not
#: -inf) keeps the arithmetic free of inf - inf.
MASK_VALUE = -1e9

#: Label value that cross-entropy skips (slot labels of padding and sub-word continuations).
IGNORE_INDEX = -1

#: GELU tanh-approximation constants: ``sqrt(2/pi)`` and the cubic coefficient.
GELU_C = math.sqrt(2.0 / math.pi)
GELU_A = 0.044715


def _check_float(name, x):
    if not isinstance(x, np.ndarray) or x.dtype not in (np.float32, np.float64):
        raise TypeError(
            f"{name} must be a float32 or float64 NumPy array, got "
            f"{type(x).__name__}{'' if not isinstance(x, np.ndarray) else ' of ' + str(x.dtype)}")


# --------------------------------------------------------------------------------------------
# Dense linear
# --------------------------------------------------------------------------------------------

def linear_forward(x, w, b):
    """Apply a dense affine map ``y = x @ w + b``.

    Parameters
    ----------
    x : ndarray, shape (..., n_in)
    w : ndarray, shape (n_in, n_out)
    b : ndarray, shape (n_out,)

    Returns
    -------
    y : ndarray, shape (..., n_out)
    cache : tuple
    """
    if w.ndim != 2 or x.shape[-1] != w.shape[0] or b.shape != (w.shape[1],):
        raise ValueError(
            f"linear shapes do not match: x {x.shape}, w {w.shape}, b {b.shape}; need x (..., "
            f"n_in), w (n_in, n_out), b (n_out,)")
    return x @ w + b, (x, w)


def linear_backward(cache, dy):
    """Return ``(dx, dw, db)`` of :func:`linear_forward`."""
    x, w = cache
    x2 = x.reshape(-1, x.shape[-1])
    dy2 = dy.reshape(-1, dy.shape[-1])
    return dy @ w.T, x2.T @ dy2, dy2.sum(axis=0)


# --------------------------------------------------------------------------------------------
# Tensor-train layers (wrapping golden.tt)
# --------------------------------------------------------------------------------------------

def tt_linear_bias_forward(spec, cores, bias, x):
    """Apply a TT-linear layer plus a dense bias, ``y = x W + b`` with W in TT format.

    Parameters
    ----------
    spec : TTSpec
    cores : list of ndarray
        The 2d cores, shapes ``spec.core_shapes``.
    bias : ndarray, shape (spec.n_out,)
    x : ndarray, shape (..., spec.n_in)

    Returns
    -------
    y : ndarray, shape (..., spec.n_out)
    cache : tuple
    """
    if x.shape[-1] != spec.n_in or bias.shape != (spec.n_out,):
        raise ValueError(
            f"TT-linear {spec.n_in} x {spec.n_out} got input {x.shape} and bias {bias.shape}; "
            f"need input (..., {spec.n_in}) and bias ({spec.n_out},)")
    lead = x.shape[:-1]
    y, tcache = tt.tt_linear_forward(spec, cores, x.reshape(-1, spec.n_in))
    y = y.reshape(*lead, spec.n_out) + bias
    return y, (spec, cores, tcache, lead)


def tt_linear_bias_backward(cache, dy):
    """Return ``(dx, dcores, dbias)`` of :func:`tt_linear_bias_forward`."""
    spec, cores, tcache, lead = cache
    dy2 = dy.reshape(-1, spec.n_out)
    dx, dcores = tt.tt_linear_backward(spec, cores, tcache, dy2)
    return dx.reshape(*lead, spec.n_in), dcores, dy2.sum(axis=0)


def ttm_embedding_forward(spec, cores, tokens):
    """Look up token rows of a TTM embedding table.

    Parameters
    ----------
    spec : TTMSpec
    cores : list of ndarray
    tokens : int ndarray, any shape, values in ``[0, spec.vocab)``

    Returns
    -------
    rows : ndarray, shape tokens.shape + (spec.dim,)
    cache : tuple
    """
    rows, tcache = tt.ttm_lookup(spec, cores, tokens)
    return rows, (spec, cores, tcache)


def ttm_embedding_backward(cache, drows):
    """Return the core gradients (list, core shapes) of :func:`ttm_embedding_forward`."""
    spec, cores, tcache = cache
    return tt.ttm_backward(spec, cores, tcache, drows)


# --------------------------------------------------------------------------------------------
# Dense embeddings
# --------------------------------------------------------------------------------------------

def embedding_forward(table, ids):
    """Gather rows of a dense table: ``table[ids]``.

    Parameters
    ----------
    table : ndarray, shape (V, D)
    ids : int ndarray, any shape, values in ``[0, V)``

    Returns
    -------
    rows : ndarray, shape ids.shape + (D,)
    cache : tuple
    """
    ids = np.asarray(ids)
    if ids.size and (ids.min() < 0 or ids.max() >= table.shape[0]):
        raise ValueError(
            f"embedding ids must lie in [0, {table.shape[0]}), got range [{ids.min()}, "
            f"{ids.max()}]")
    return table[ids], (table.shape, ids)


def embedding_backward(cache, drows):
    """Return ``dtable`` of :func:`embedding_forward` (row gradients summed per id)."""
    shape, ids = cache
    dtable = np.zeros(shape, dtype=drows.dtype)
    flat = ids.reshape(-1)
    if flat.size == 0:
        return dtable
    # sort + reduceat: several times faster than np.add.at for (rows x D) updates
    order = np.argsort(flat, kind="stable")
    sid = flat[order]
    starts = np.flatnonzero(np.concatenate(([True], sid[1:] != sid[:-1])))
    dtable[sid[starts]] = np.add.reduceat(drows.reshape(-1, shape[1])[order], starts, axis=0)
    return dtable


# --------------------------------------------------------------------------------------------
# Element-wise and normalization
# --------------------------------------------------------------------------------------------

def layernorm_forward(x, gamma, beta, eps):
    """Normalize over the last axis: ``(x - mean) / sqrt(var + eps) * gamma + beta``.

    ``var`` is the biased (population) variance, as in PyTorch and BERT.
    """
    if gamma.shape != (x.shape[-1],) or beta.shape != gamma.shape:
        raise ValueError(
            f"LayerNorm gamma {gamma.shape} and beta {beta.shape} must both be "
            f"({x.shape[-1]},) for input {x.shape}")
    inv_d = 1.0 / x.shape[-1]
    mu = x.sum(axis=-1, keepdims=True) * inv_d
    xc = x - mu
    var = (xc * xc).sum(axis=-1, keepdims=True) * inv_d
    rstd = 1.0 / np.sqrt(var + eps)
    xhat = xc * rstd
    return xhat * gamma + beta, (xhat, rstd, gamma)


def layernorm_backward(cache, dy):
    """Return ``(dx, dgamma, dbeta)`` of :func:`layernorm_forward`."""
    xhat, rstd, gamma = cache
    d = xhat.shape[-1]
    dy2 = dy.reshape(-1, d)
    dgamma = (dy2 * xhat.reshape(-1, d)).sum(axis=0)
    dbeta = dy2.sum(axis=0)
    dxhat = dy * gamma
    inv_d = 1.0 / d
    m1 = dxhat.sum(axis=-1, keepdims=True) * inv_d
    m2 = (dxhat * xhat).sum(axis=-1, keepdims=True) * inv_d
    return (dxhat - m1 - xhat * m2) * rstd, dgamma, dbeta


def gelu_forward(x):
    """Apply GELU, tanh approximation: ``0.5 x (1 + tanh(GELU_C (x + GELU_A x^3)))``."""
    u = x * x
    u *= GELU_A
    u += 1.0
    u *= x
    u *= GELU_C                       # GELU_C * (x + GELU_A x^3)
    t = np.tanh(u, out=u)
    y = t + 1.0
    y *= x
    y *= 0.5
    return y, (x, t)


def gelu_backward(cache, dy):
    """Return ``dx`` of :func:`gelu_forward`."""
    x, t = cache
    dt = x * x
    dt *= 3.0 * GELU_A
    dt += 1.0
    dt *= GELU_C                      # d/dx of the tanh argument
    s = t * t
    np.subtract(1.0, s, out=s)
    s *= x
    s *= dt                           # x (1 - t^2) dt
    s += t
    s += 1.0
    s *= 0.5
    s *= dy
    return s


def tanh_forward(x):
    """Apply tanh."""
    y = np.tanh(x)
    return y, y


def tanh_backward(cache, dy):
    """Return ``dx`` of :func:`tanh_forward`."""
    y = cache
    return dy * (1.0 - y * y)


def residual_forward(a, b):
    """Add a residual branch: ``a + b`` (same shapes)."""
    if a.shape != b.shape:
        raise ValueError(f"residual operands must have the same shape, got {a.shape} and {b.shape}")
    return a + b, None


def residual_backward(cache, dy):
    """Return ``(da, db)`` of :func:`residual_forward` (both ``dy``)."""
    return dy, dy


# --------------------------------------------------------------------------------------------
# Attention
# --------------------------------------------------------------------------------------------

def attention_forward(q, k, v, mask, n_heads):
    """Multi-head scaled dot-product attention with a key padding mask (no projections).

    Parameters
    ----------
    q, k, v : ndarray, shape (n, S, D)
        Projected queries, keys and values; head ``h`` uses columns ``h*D/H .. (h+1)*D/H - 1``.
    mask : bool ndarray, shape (n, S)
        True for real tokens. Keys where it is False get :data:`MASK_VALUE` added to their
        scores; every query row (padded ones included) needs at least one real key.
    n_heads : int

    Returns
    -------
    a : ndarray, shape (n, S, D)
        Per-head ``softmax(Q K^T / sqrt(D/H) + mask) V``, heads concatenated.
    cache : tuple
    """
    n, s, d = q.shape
    if k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"q, k, v must have one shape (n, S, D), got {q.shape}, {k.shape}, "
                         f"{v.shape}")
    if mask.shape != (n, s) or mask.dtype != np.bool_:
        raise ValueError(f"mask must be a bool array of shape {(n, s)}, got {mask.dtype} "
                         f"{mask.shape}")
    if not isinstance(n_heads, int) or n_heads < 1 or d % n_heads:
        raise ValueError(f"n_heads must be a positive integer dividing D = {d}, got {n_heads!r}")
    if not mask.any(axis=1).all():
        raise ValueError("every sequence needs at least one real (mask True) token")
    dh = d // n_heads
    scale = 1.0 / math.sqrt(dh)
    # (n, S, D) -> (n, H, S, dh)
    qh = q.reshape(n, s, n_heads, dh).transpose(0, 2, 1, 3)
    kh = k.reshape(n, s, n_heads, dh).transpose(0, 2, 1, 3)
    vh = v.reshape(n, s, n_heads, dh).transpose(0, 2, 1, 3)
    scores = (qh @ kh.transpose(0, 1, 3, 2)) * scale
    add = np.where(mask, q.dtype.type(0.0), q.dtype.type(MASK_VALUE))
    scores = scores + add[:, None, None, :]
    scores = scores - scores.max(axis=-1, keepdims=True)
    p = np.exp(scores)
    p /= p.sum(axis=-1, keepdims=True)
    ah = p @ vh
    a = ah.transpose(0, 2, 1, 3).reshape(n, s, d)
    return a, (qh, kh, vh, p, scale)


def attention_backward(cache, da):
    """Return ``(dq, dk, dv)`` of :func:`attention_forward`."""
    qh, kh, vh, p, scale = cache
    n, h, s, dh = qh.shape
    dah = da.reshape(n, s, h, dh).transpose(0, 2, 1, 3)
    dvh = p.transpose(0, 1, 3, 2) @ dah
    dp = dah @ vh.transpose(0, 1, 3, 2)
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))
    ds *= scale
    dqh = ds @ kh
    dkh = ds.transpose(0, 1, 3, 2) @ qh

    def merge(t):
        return t.transpose(0, 2, 1, 3).reshape(n, s, h * dh)
    return merge(dqh), merge(dkh), merge(dvh)


def mha_forward(spec, proj, x, mask, n_heads, packed=False):
    """Multi-head self-attention block with TT-linear Q, K, V, O projections (plus biases).

    Parameters
    ----------
    spec : TTSpec
        Shape shared by the four projections (D x D).
    proj : mapping
        ``proj[name] = (cores, bias)`` for name in ``"q", "k", "v", "o"``.
    x : ndarray, shape (n, S, D), or (T, D) when ``packed``
    mask : bool ndarray, shape (n, S)
    n_heads : int
    packed : bool
        ``x`` holds only the ``T = mask.sum()`` real tokens, in row-major order of ``mask``
        (``x_full[mask]``). The projections then run on real tokens only; padded keys and
        values are zero, which changes nothing because their attention weight is exactly 0.

    Returns
    -------
    y : ndarray, same shape as ``x``
        ``O(Attn(Q(x), K(x), V(x)))``, before the residual add.
    cache : tuple
    """
    n, s = mask.shape
    if packed and x.shape[:-1] != (int(mask.sum()),):
        raise ValueError(f"packed x must have one row per real token ({int(mask.sum())}), "
                         f"got shape {x.shape}")
    if not packed and x.shape[:-1] != (n, s):
        raise ValueError(f"x must have shape (n, S, D) = ({n}, {s}, D) to match the mask, "
                         f"got {x.shape}")
    if packed:
        if not mask.any(axis=1).all():
            raise ValueError("every sequence needs at least one real (mask True) token")
        # trailing positions that are padding in every sequence are dropped from the grid
        s = int(np.flatnonzero(mask.any(axis=0))[-1]) + 1
        mask = mask[:, :s]
    caches = {}
    qkv = []
    for name in ("q", "k", "v"):
        cores, bias = proj[name]
        t, caches[name] = tt_linear_bias_forward(spec, cores, bias, x)
        if packed:
            full = np.zeros((n, s, t.shape[-1]), t.dtype)
            full[mask] = t
            t = full
        qkv.append(t)
    a, acache = attention_forward(*qkv, mask, n_heads)
    if packed:
        a = a[mask]
    cores, bias = proj["o"]
    y, caches["o"] = tt_linear_bias_forward(spec, cores, bias, a)
    return y, (caches, acache, mask if packed else None)


def mha_backward(cache, dy):
    """Return ``(dx, grads)`` of :func:`mha_forward`.

    ``grads[name] = (dcores, dbias)`` for name in ``"q", "k", "v", "o"``.
    """
    caches, acache, packed_mask = cache
    grads = {}
    da, dcores, dbias = tt_linear_bias_backward(caches["o"], dy)
    grads["o"] = (dcores, dbias)
    if packed_mask is not None:
        full = np.zeros(packed_mask.shape + da.shape[-1:], da.dtype)
        full[packed_mask] = da
        da = full
    dq, dk, dv = attention_backward(acache, da)
    dx = None
    for name, dt in (("q", dq), ("k", dk), ("v", dv)):
        if packed_mask is not None:
            dt = dt[packed_mask]
        dxi, dcores, dbias = tt_linear_bias_backward(caches[name], dt)
        grads[name] = (dcores, dbias)
        dx = dxi if dx is None else dx + dxi
    return dx, grads


# --------------------------------------------------------------------------------------------
# Loss
# --------------------------------------------------------------------------------------------

def cross_entropy_forward(logits, labels, ignore_index=IGNORE_INDEX):
    """Mean softmax cross-entropy over the labels that are not ``ignore_index``.

    Parameters
    ----------
    logits : ndarray, shape (..., C)
    labels : int ndarray, shape logits.shape[:-1], values in ``[0, C)`` or ``ignore_index``

    Returns
    -------
    loss : scalar of the logits' dtype
        0 when every label is ignored.
    cache : tuple
    """
    _check_float("logits", logits)
    labels = np.asarray(labels)
    c = logits.shape[-1]
    if labels.shape != logits.shape[:-1]:
        raise ValueError(f"labels shape {labels.shape} must equal logits shape without the "
                         f"class axis, {logits.shape[:-1]}")
    if not np.issubdtype(labels.dtype, np.integer):
        raise TypeError(f"labels must be integers, got {labels.dtype}")
    valid = labels != ignore_index
    if labels.size and ((labels[valid] < 0).any() or (labels[valid] >= c).any()):
        raise ValueError(f"labels must lie in [0, {c}) or equal {ignore_index} (ignored)")
    z = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(z)
    se = e.sum(axis=-1, keepdims=True)
    logp = z - np.log(se)
    safe = np.where(valid, labels, 0)
    picked = np.take_along_axis(logp, safe[..., None], axis=-1)[..., 0]
    count = int(valid.sum())
    total = np.where(valid, picked, logits.dtype.type(0.0)).sum()
    loss = -total / count if count else 0.0
    return logits.dtype.type(loss), (e / se, safe, valid, count)


def cross_entropy_backward(cache, dloss=1.0):
    """Return ``dlogits`` of :func:`cross_entropy_forward` scaled by ``dloss``."""
    p, safe, valid, count = cache
    g = p.copy()
    np.put_along_axis(g, safe[..., None], np.take_along_axis(g, safe[..., None], axis=-1) - 1.0,
                      axis=-1)
    g *= (valid * (float(dloss) / max(count, 1)))[..., None].astype(p.dtype)
    return g
