"""Low-rank training (LRT): streaming rank-r accumulation of weight gradients, the golden
definition.

A layer with weights ``W`` (n_o x n_i) sees one outer product ``dz (x) a`` per sample (a
convolution: one per output pixel, see below). Instead of summing them in a weight-sized
accumulator, LRT keeps the running sum as ``Q_L diag(c_x) Q_R^T`` with ``r`` orthonormal
columns each (auxiliary memory ``r (n_o + n_i)`` 16-bit words plus ``r`` FP32 values) and
writes the 8-bit weights only once per effective batch (``algorithms.md`` §5).

rankReduce of one sample (:func:`project`, then :func:`core`, :func:`ttrain.golden.svd.
jacobi_svd`, :func:`reduce_rotate`; :func:`rank_reduce` chains them), ``q = r + 1``, every
step in FP32 (float32 ufuncs = the :mod:`ttrain.golden.numerics` operations, sums in index
order, square roots and reciprocals the special unit's sequences):

1. *Gram-Schmidt* (modified, columns in order): ``c_j = Q_j . v``, ``v -= c_j Q_j`` for ``j =
   1..r`` (``Q`` the bases dequantized from 16 bits), ``c_q = sqrt(v . v) + 1e-12``, ``Q_q = v *
   recip(c_q)``; for ``dz`` against ``Q_L`` and ``a`` against ``Q_R``. The identity ``dz =
   sum_j c_j Q_j + c_q Q_q`` holds whatever ``Q`` is, so rounding of the bases never makes
   the accumulated sum inconsistent, it only makes the truncation less than optimal.
2. *Condition check*: the sample is skipped (state unchanged, counted) when ``c_x[0] >
   kappa_th * c_Lq * c_Rq`` (``kappa_th`` = 100).
3. *Core*: ``C = c_L c_R^T + diag(c_x, 0)`` (q x q); ``C = U diag(s) V^T`` by the fixed Jacobi
   sequence, ``s`` descending.
4. *Reduction* to rank r. **biased**: keep the top ``r`` triplets. **unbiased** (optimal
   Kronecker sum, Benzing et al. 2019): the smallest ``m`` (1-based) with ``(q - m) s_m <=
   t_m``, ``t_m = sum_{j >= m} s_j`` (suffix sums from ``s_q`` up); ``k = q - m``;
   ``x0_j = sqrt(max(0, 1 - s_j k recip(t_m)))`` on the tail ``j >= m`` (0 elsewhere; ``e_m``
   when ``t_m = 0``), a unit vector; Householder ``H = I - v v^T recip(1 + x0_m)`` with
   ``v = x0 + e_m`` (identity on the head); random signs ``D = diag(rademacher(seed, j))`` on
   the tail (``+1`` on the head; :func:`ttrain.golden.prng.rademacher`, one seed per layer
   and sample, :func:`sign_seed`). The new factors are ``U D H`` and ``V D H`` with column
   ``m`` deleted, and ``c_x = (s_1 .. s_{m-1}, t_m/k .. t_m/k)``. Then ``E[L R^T]`` is exactly
   the sum (``E[D H' H'^T D] = diag(s_tail) k / t_m``). The biased rule is the same deletion
   with ``m = q`` and no mixing, so one gather serves both.
5. *Rotation*: ``Q_L <- [Q_L, Q_Lq] U'``, ``Q_R <- [Q_R, Q_Rq] V'`` (contractions over q),
   re-quantized to 16 bits.

Bases in 16 bits (:func:`quantize_basis`): one FP32 ``step = max|Q| * 2**-15`` per matrix, the
entries ``f2i(Q * recip(step))`` saturated to [-32767, 32767] (the largest entry loses at most
one part in 32768); dequantized as ``i2f(q) * step``.

Read-out (:func:`factors`): ``L = Q_L diag(sqrt c_x)``, ``R = Q_R diag(sqrt c_x)``,
``sum ~= L R^T``.

Convolutions (:func:`feed_pixels`): a convolution is one matrix-vector product per output
pixel (the paper's appendix B.2: the unrolled kernel-size input slice maps to all output
channels of that pixel), so its gradient is the sum over pixels of ``dz_p (x) a_p``; every
pixel's outer product is one rankReduce, pixels in raster order, and the effective batch counts
samples (images), which is why the paper's conv layers use a smaller effective batch (10).

Gradient max-norm (:class:`MaxNorm`) and streaming batch norm (:class:`StreamingBatchNorm`) are
the paper's appendix rules; the write rule and per-cell write counters are :func:`write_weights`
and :class:`WriteCounter`.
"""

from dataclasses import dataclass, field

import numpy as np

from . import prng
from .quant import f2i, i2f
from .svd import fp32_recip_fast, fp32_rsqrt_fast, fp32_sqrt, jacobi_svd

__all__ = ["KAPPA_TH", "EPS_GS", "VARIANTS", "LowRank", "new_state", "quantize_basis",
           "dequantize_basis", "project", "core", "reduce_rotate", "rank_reduce", "factors",
           "sign_seed", "feed_pixels", "MaxNorm", "StreamingBatchNorm", "WriteCounter",
           "write_weights", "MIN_WRITE_FRACTION"]

KAPPA_TH = 100.0
EPS_GS = np.float32(1e-12)
VARIANTS = ("biased", "unbiased")
#: A weight update is written only when at least this fraction of its entries is non-zero.
MIN_WRITE_FRACTION = 0.01
_F32 = np.float32
_QMAX = 32767


def _seqsum(x, axis):
    """Sum float32 values along ``axis`` in index order (one rounding per add)."""
    return np.add.accumulate(np.asarray(x, dtype=_F32), axis=axis, dtype=_F32).take(-1, axis)


def _dot(a, b, axis=-1):
    return _seqsum(np.multiply(a, b), axis)


def _matmul(a, b):
    """``a @ b`` over the last/second-to-last axes, products summed in index order."""
    return _seqsum(np.multiply(a[..., :, :, None], b[..., None, :, :]), -2)


def quantize_basis(Q):
    """Return ``(q16, step)`` of FP32 bases ``Q`` (..., n, r): see the module notes."""
    Q = np.asarray(Q, dtype=_F32)
    mx = np.max(np.abs(Q), axis=(-2, -1))
    step = np.multiply(mx, _F32(2.0 ** -15))
    with np.errstate(invalid="ignore", over="ignore"):
        inv = fp32_recip_fast(step)
        scaled = np.multiply(Q, inv[..., None, None])
    scaled = np.where((step == 0)[..., None, None], _F32(0), scaled)
    return np.clip(f2i(scaled), -_QMAX, _QMAX), step.astype(_F32)


def dequantize_basis(q16, step):
    """Return the FP32 bases ``i2f(q16) * step``."""
    return np.multiply(i2f(q16), np.asarray(step, dtype=_F32)[..., None, None])


@dataclass
class LowRank:
    """State of a batch of rank-r accumulators (leading axes ``batch``): 16-bit bases with
    their steps, FP32 ``cx`` (..., r), and counters of fed and skipped outer products."""
    ql: np.ndarray
    sl: np.ndarray
    qr: np.ndarray
    sr: np.ndarray
    cx: np.ndarray
    fed: np.ndarray
    skipped: np.ndarray

    @property
    def rank(self):
        return self.cx.shape[-1]

    def copy(self):
        return LowRank(*(np.array(getattr(self, f)) for f in
                         ("ql", "sl", "qr", "sr", "cx", "fed", "skipped")))


def new_state(n_o, n_i, rank, batch=()):
    """Return an empty accumulator (zero bases, ``cx = 0``)."""
    batch = tuple(batch)
    if rank < 1 or n_o < 1 or n_i < 1:
        raise ValueError(f"low-rank state needs positive sizes, not n_o={n_o}, n_i={n_i}, "
                         f"rank={rank}")
    z = np.zeros(batch, dtype=np.int64)
    return LowRank(np.zeros(batch + (n_o, rank), np.int64), np.zeros(batch, _F32),
                   np.zeros(batch + (n_i, rank), np.int64), np.zeros(batch, _F32),
                   np.zeros(batch + (rank,), _F32), z.copy(), z.copy())


def _gram_schmidt(Q, v):
    """Modified Gram-Schmidt of ``v`` (..., n) against the columns of ``Q`` (..., n, r)."""
    v = np.array(v, dtype=_F32)
    cs = []
    for j in range(Q.shape[-1]):
        c = _dot(Q[..., :, j], v)
        v = np.subtract(v, np.multiply(c[..., None], Q[..., :, j]))
        cs.append(c)
    cq = np.add(fp32_sqrt(_dot(v, v)), EPS_GS)
    cs.append(cq)
    return np.stack(cs, axis=-1), np.multiply(v, fp32_recip_fast(cq)[..., None])


@dataclass
class Projection:
    """Step 1-2 of one sample: coefficients ``cl`` (..., q), ``cr``; the full bases ``QL``
    (..., n_o, q) and ``QR`` (..., n_i, q) (dequantized bases plus the new direction); the skip
    mask."""
    cl: np.ndarray
    cr: np.ndarray
    QL: np.ndarray
    QR: np.ndarray
    skip: np.ndarray


def project(state, dz, a, kappa=KAPPA_TH):
    """Gram-Schmidt ``dz`` (..., n_o) and ``a`` (..., n_i) against the bases; condition check."""
    QL = dequantize_basis(state.ql, state.sl)
    QR = dequantize_basis(state.qr, state.sr)
    cl, ql_new = _gram_schmidt(QL, dz)
    cr, qr_new = _gram_schmidt(QR, a)
    skip = state.cx[..., 0] > np.multiply(_F32(kappa), np.multiply(cl[..., -1], cr[..., -1]))
    return Projection(cl, cr, np.concatenate([QL, ql_new[..., None]], axis=-1),
                      np.concatenate([QR, qr_new[..., None]], axis=-1), skip)


def core(state, proj):
    """Return the core ``C = c_L c_R^T + diag(c_x, 0)`` (..., q, q)."""
    C = np.multiply(proj.cl[..., :, None], proj.cr[..., None, :])
    r = state.rank
    idx = np.arange(r)
    C[..., idx, idx] = np.add(C[..., idx, idx], state.cx)
    return C


def sign_seed(seed, layer, sample):
    """Seed of the random signs of one rankReduce: ``draw(seed, layer * 2**24 + sample)``."""
    return prng.draw(np.asarray(seed, dtype=np.uint32), np.uint32((int(layer) << 24) + int(sample)))


def _okron(s, seeds):
    """Unbiased reduction of singular values ``s`` (..., q): ``(M, cx, m0)`` with ``M`` the
    (..., q, q) mixing ``D H`` and ``m0`` the 0-based column to delete."""
    q = s.shape[-1]
    suffix = np.empty_like(s)
    suffix[..., q - 1] = s[..., q - 1]
    for j in range(q - 2, -1, -1):
        suffix[..., j] = np.add(s[..., j], suffix[..., j + 1])
    kk = (q - 1 - np.arange(q)).astype(_F32)                 # q - m for 1-based m = j + 1
    ok = np.multiply(kk, s) <= suffix
    m0 = np.argmax(ok, axis=-1)                               # first true (always by q - 2)

    def take(x):
        return np.take_along_axis(x, m0[..., None], axis=-1)[..., 0]

    t = take(suffix)
    k = (q - 1 - m0).astype(_F32)
    tail = np.arange(q) >= m0[..., None]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        ratio = np.multiply(np.multiply(s, k[..., None]), fp32_recip_fast(t)[..., None])
    x0 = fp32_sqrt(np.maximum(np.subtract(_F32(1), ratio), _F32(0)))
    first = np.arange(q) == m0[..., None]
    x0 = np.where(tail, x0, _F32(0))
    x0 = np.where((t == 0)[..., None], np.where(first, _F32(1), _F32(0)), x0).astype(_F32)
    v = np.where(first, np.add(x0, _F32(1)), x0)
    inv = fp32_recip_fast(np.add(_F32(1), take(x0)))
    H = np.multiply(np.multiply(v[..., :, None], v[..., None, :]), inv[..., None, None])
    H = np.subtract(np.eye(q, dtype=_F32), H)
    signs = prng.rademacher(np.asarray(seeds, dtype=np.uint32)[..., None], np.arange(q))
    d = np.where(tail, signs.astype(_F32), _F32(1))
    M = np.multiply(d[..., :, None], H)                        # D H (row scaling, exact)
    share = np.multiply(t, fp32_recip_fast(k))
    cx = np.where(tail, share[..., None], s)
    return M, cx, m0


def reduce_rotate(state, proj, U, s, V, variant, seeds=None):
    """Steps 4-5: the new state (skipped batch elements keep the old one)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown low-rank variant {variant!r}; choose biased or unbiased")
    q = s.shape[-1]
    r = q - 1
    if variant == "biased":
        m0 = np.full(s.shape[:-1], q - 1)
        Ur, Vr, cx = U, V, s
    else:
        if seeds is None:
            raise ValueError("the unbiased reduction needs the random-sign seeds")
        M, cx, m0 = _okron(s, seeds)
        Ur, Vr = _matmul(U, M), _matmul(V, M)
    keep = np.arange(r) + (np.arange(r) >= m0[..., None])       # columns without m0
    Ur = np.take_along_axis(Ur, keep[..., None, :], axis=-1)
    Vr = np.take_along_axis(Vr, keep[..., None, :], axis=-1)
    cx = np.take_along_axis(cx, keep, axis=-1).astype(_F32)
    ql, sl = quantize_basis(_matmul(proj.QL, Ur))
    qr, sr = quantize_basis(_matmul(proj.QR, Vr))
    sk = proj.skip
    new = LowRank(np.where(sk[..., None, None], state.ql, ql), np.where(sk, state.sl, sl),
                  np.where(sk[..., None, None], state.qr, qr), np.where(sk, state.sr, sr),
                  np.where(sk[..., None], state.cx, cx), state.fed + 1,
                  state.skipped + sk.astype(np.int64))
    return new


def rank_reduce(state, dz, a, variant="biased", seeds=None, kappa=KAPPA_TH):
    """Return the state after adding ``dz (x) a`` (one rankReduce, every batch element)."""
    proj = project(state, dz, a, kappa)
    U, s, V = jacobi_svd(core(state, proj))
    return reduce_rotate(state, proj, U, s, V, variant, seeds)


def factors(state):
    """Return ``(L, R)`` with ``L R^T`` the accumulated sum: ``Q diag(sqrt c_x)``."""
    root = fp32_sqrt(state.cx)
    L = np.multiply(dequantize_basis(state.ql, state.sl), root[..., None, :])
    R = np.multiply(dequantize_basis(state.qr, state.sr), root[..., None, :])
    return L, R


def feed_pixels(state, dz_pixels, a_pixels, variant="biased", seed=0, layer=0, kappa=KAPPA_TH):
    """Feed a convolution's per-pixel outer products (P, n_o) x (P, n_i), raster order."""
    for p in range(len(dz_pixels)):
        seeds = sign_seed(seed, layer, int(state.fed))
        state = rank_reduce(state, dz_pixels[p], a_pixels[p], variant, seeds, kappa)
    return state


class MaxNorm:
    """Gradient max-norm with a bias-corrected moving average of the maxima (appendix D).

    ``k += 1``; ``x_max = max|x| + eps``; ``x_mv = beta x_mv + (1 - beta) x_max``; ``x_hat =
    x_mv recip(1 - beta^k)`` (``beta^k`` kept as a running FP32 product); return ``x *
    recip(max(x_max, x_hat))``. State starts ``k = 0``, ``x_mv = eps``. FP32 throughout.
    """

    def __init__(self, beta=0.999, eps=1e-4):
        self.beta, self.eps = _F32(beta), _F32(eps)
        self.one_minus_beta = _F32(1.0 - beta)
        self.k, self.bk, self.x_mv = 0, _F32(1.0), _F32(eps)

    def __call__(self, x):
        x = np.asarray(x, dtype=_F32)
        self.k += 1
        self.bk = np.multiply(self.bk, self.beta)
        x_max = np.add(np.max(np.abs(x)), self.eps)
        self.x_mv = np.add(np.multiply(self.beta, self.x_mv),
                           np.multiply(self.one_minus_beta, x_max))
        x_hat = np.multiply(self.x_mv, fp32_recip_fast(np.subtract(_F32(1), self.bk)))
        return np.multiply(x, fp32_recip_fast(np.maximum(x_max, x_hat)))


class StreamingBatchNorm:
    """Streaming batch norm (appendix E) of ``channels`` features, momentum ``eta = 1 - 1/B``.

    Per sample ``x`` (pixels, channels) or (channels,): ``mu_i``, ``var_i`` the sample's
    per-channel mean and (biased) variance over pixels (0 for a dense layer); ``mu_s <- eta
    mu_s + (1 - eta) mu_i``, ``sq_s <- eta sq_s + (1 - eta)(var_i + mu_i^2)``, both stored in
    16 bits (signed, LSB 2**-12, range [-8, 8): the bias format); then with ``c = 1 -
    eta^step``: ``mu = mu_s recip(c)``, ``var = max(sq_s recip(c) - mu^2, 0)`` and the output
    ``(x - mu) rsqrt(var + eps)``. FP32 arithmetic, sums over pixels in order.
    """

    FRAC = 12

    def __init__(self, channels, batch, eps=1e-5):
        if batch < 1:
            raise ValueError(f"streaming batch norm needs a batch >= 1, not {batch}")
        self.eta = _F32(1.0 - 1.0 / batch)
        self.one_minus_eta = _F32(1.0 / batch)
        self.eps = _F32(eps)
        self.mu_s = np.zeros(channels, _F32)
        self.sq_s = np.zeros(channels, _F32)
        self.eta_k = _F32(1.0)
        self.step = 0

    def _store(self, x):
        q = np.clip(f2i(np.multiply(x, _F32(2.0 ** self.FRAC))), -(1 << 15), (1 << 15) - 1)
        return np.multiply(i2f(q), _F32(2.0 ** -self.FRAC))

    def statistics(self):
        """Return the bias-corrected ``(mu, var)`` (after at least one update)."""
        c = fp32_recip_fast(np.subtract(_F32(1), self.eta_k))
        mu = np.multiply(self.mu_s, c)
        var = np.maximum(np.subtract(np.multiply(self.sq_s, c), np.multiply(mu, mu)), _F32(0))
        return mu, var

    def update(self, x):
        """Fold one sample's statistics in; return the normalized ``x``."""
        x = np.asarray(x, dtype=_F32)
        x2 = x.reshape(-1, x.shape[-1])
        inv_p = _F32(1.0 / len(x2))
        mu_i = np.multiply(_seqsum(x2, 0), inv_p)
        dev = np.subtract(x2, mu_i)
        var_i = np.multiply(_seqsum(np.multiply(dev, dev), 0), inv_p)
        self.step += 1
        self.eta_k = np.multiply(self.eta_k, self.eta)
        self.mu_s = self._store(np.add(np.multiply(self.eta, self.mu_s),
                                       np.multiply(self.one_minus_eta, mu_i)))
        second = np.add(var_i, np.multiply(mu_i, mu_i))
        self.sq_s = self._store(np.add(np.multiply(self.eta, self.sq_s),
                                       np.multiply(self.one_minus_eta, second)))
        mu, var = self.statistics()
        return np.multiply(np.subtract(x, mu), fp32_rsqrt_fast(np.add(var, self.eps)))


@dataclass
class WriteCounter:
    """Writes per weight cell: a cell counts a write when its stored value changes."""
    counts: np.ndarray = field(default=None)

    @classmethod
    def of_shape(cls, shape):
        return cls(np.zeros(shape, dtype=np.int64))

    def record(self, old, new):
        self.counts += np.asarray(old) != np.asarray(new)

    def summary(self):
        c = self.counts.ravel()
        return {"max": int(c.max(initial=0)), "mean": float(c.mean()) if c.size else 0.0,
                "histogram": np.bincount(c).tolist(), "cells": int(c.size)}


def write_weights(w, delta, counter=None, min_fraction=MIN_WRITE_FRACTION, bits=8):
    """Apply an integer update ``w - delta`` (saturated to ``bits``) if at least
    ``min_fraction`` of ``delta``'s entries are non-zero; returns ``(w, written)``."""
    delta = np.asarray(delta, dtype=np.int64)
    if np.count_nonzero(delta) < min_fraction * delta.size:
        return w, False
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    new = np.clip(w - delta, lo, hi)
    if counter is not None:
        counter.record(w, new)
    return new, True
