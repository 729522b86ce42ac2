"""The small SVD of low-rank training as a fixed sequence of FP32 operations.

Low-rank training (:mod:`ttrain.golden.lrt`) factors one ``q x q`` core matrix per layer and
sample (``q = r + 1``, 5 at rank 4). The chip must follow the factorization bit for bit, so it
is defined here as one data-independent sequence of binary32 operations: no convergence test,
no data-dependent branch (every choice is a 2:1 ``select`` whose both inputs are computed), every
multiply/add/subtract rounded to nearest even (the :mod:`ttrain.golden.numerics` operations;
NumPy's float32 ufuncs are those bit for bit, subnormals kept — ``numerics.check_environment``
checks the FPU mode — and no NaN can arise, see the guards below), every square root and
reciprocal through the special-function unit's sequences (:func:`ttrain.golden.special.
rsqrt_sequence`, :func:`~ttrain.golden.special.recip_sequence`).

The sequence (:func:`jacobi_svd`), for ``A`` (q x q, FP32):

1. **One-sided (Hestenes) Jacobi**, ``SWEEPS`` sweeps. ``V = I``. A sweep visits every column
   pair ``(p, s)``, ``p < s``, once, in the round-robin order of :func:`pivot_schedule` (the
   circle method: ``q`` rounds for odd ``q``, ``q - 1`` for even; the pairs of one round are
   disjoint, so a round's rotations are independent and run as one vector operation). For a
   pair, with sums over the rows in index order (row 0 first)::

       alpha = sum_i A[i,p]^2     beta = sum_i A[i,s]^2     gamma = sum_i A[i,p] A[i,s]
       d     = beta - alpha
       w     = d*d + 4*gamma*gamma          (computed as d*d + (gamma+gamma)*(gamma+gamma))
       root  = w * rsqrt(w)   (0 if w == 0)
       t     = (gamma + gamma) * recip(|d| + root), clamped to [-1, 1], sign flipped when
               d < 0, 0 if gamma == 0 (the clamp only acts when recip overflows: den subnormal)
       c     = rsqrt(1 + t*t);  sn = c * t
       A[:,p], A[:,s] = c*A[:,p] - sn*A[:,s],  sn*A[:,p] + c*A[:,s]      (V likewise)

   ``t`` is the smaller root of ``gamma t^2 + d t - gamma = 0``: the rotation that makes the two
   columns orthogonal, by at most 45 degrees (Rutishauser's stable form written with ``d``
   and ``gamma`` instead of their quotient, which saves one reciprocal per rotation).
2. **Column norms**: ``n_j = sum_i A[i,j]^2`` (rows in order).
3. **Sort** the columns by ``n_j``, largest first: odd-even transposition sort, ``q`` passes
   of compare-exchange on the adjacent pairs ``(0,1), (2,3), ...`` (even passes) and ``(1,2),
   (3,4), ...`` (odd passes); a pair is swapped when ``n_left < n_right`` (strict, so equal
   norms keep their order); ``A``'s and ``V``'s columns move with their norms.
4. **Singular values and left vectors**: ``k_j = rsqrt(n_j)``, ``sigma_j = n_j * k_j``,
   ``U[:,j] = A[:,j] * k_j``; ``sigma_j = 0`` and ``U[:,j] = 0`` where ``n_j == 0`` (a rank-
   deficient core: low-rank training tolerates zero columns, see :mod:`ttrain.golden.lrt`).

Then ``A_in ~= U diag(sigma) V^T`` with ``V`` orthogonal (a product of rotations), ``sigma``
descending and the columns of ``U`` orthonormal up to the convergence of the sweeps.

Operation count per sweep (q = 5): 10 rotations, each 3 special-function calls (one recip, two
rsqrt), 3 dot products of length q and 4 column updates of length q on ``A`` and ``V``.
Accuracy against ``numpy.linalg.svd`` (float64) is measured by :func:`accuracy_report`; the
figures are in ``docs/lrt.md`` and ``tests/test_golden_lrt.py`` holds the tolerance.
"""

import numpy as np

from .special import NumpyOps, recip_sequence, rsqrt_sequence

__all__ = ["SWEEPS", "FastOps", "fp32_rsqrt_fast", "fp32_recip_fast", "fp32_sqrt",
           "pivot_schedule", "jacobi_svd", "accuracy_report"]

#: Fixed number of Jacobi sweeps: 4 already reach FP32 accuracy on 5x5 cores, one more is the
#: margin (docs/lrt.md).
SWEEPS = 5

_F32 = np.float32


def _fbits(a):
    return np.asarray(a, dtype=_F32).view(np.uint32).astype(np.int64)


def _ffrom(b):
    return (np.asarray(b, dtype=np.int64) & 0xFFFFFFFF).astype(np.uint32).view(_F32)


class FastOps(NumpyOps):
    """:class:`~ttrain.golden.special.NumpyOps` with the plain float32 ufuncs for the FP32
    arithmetic and cached constants: the same results bit for bit on every non-NaN value (the
    numerics functions add operand checks and NaN canonicalization only), about 3x faster.
    ``tests/test_golden_lrt.py`` compares the two on random and special inputs."""

    _consts = {}

    @classmethod
    def const(cls, value):
        # keyed by the value's bits: a float NaN key never equals itself, so keying by value
        # added one entry per NaN constant (5 GB over a 3,000-sample conv LRT run)
        key = (type(value), np.float64(value).tobytes())
        hit = cls._consts.get(key)
        if hit is None:
            hit = cls._consts[key] = NumpyOps.const(value)
        return hit

    mul = staticmethod(np.multiply)
    add = staticmethod(np.add)
    sub = staticmethod(np.subtract)

    # The bit operations of NumpyOps on array views (no checks): only the conversions differ.
    _bits = staticmethod(_fbits)
    _float = staticmethod(_ffrom)

    @staticmethod
    def select(c, a, b):
        return np.where(c, np.asarray(a, dtype=_F32), np.asarray(b, dtype=_F32))


_OPS = FastOps()


def fp32_rsqrt_fast(x):
    """:func:`ttrain.golden.special.fp32_rsqrt` of a float32 array (the same sequence)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return rsqrt_sequence(_OPS, np.asarray(x, dtype=_F32))


def fp32_recip_fast(x):
    """:func:`ttrain.golden.special.fp32_recip` of a float32 array (the same sequence)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return recip_sequence(_OPS, np.asarray(x, dtype=_F32))


def fp32_sqrt(x):
    """Return ``sqrt(x)`` as ``x * rsqrt(x)`` (two roundings), ``0`` for ``x == 0``.

    ``x`` must be finite and non-negative (the callers pass sums of squares)."""
    x = np.asarray(x, dtype=_F32)
    with np.errstate(invalid="ignore"):
        r = np.multiply(x, fp32_rsqrt_fast(x))
    return np.where(x == 0, _F32(0), r).astype(_F32)


def _rowsum_sq(a, b):
    """``sum_i a[..., i, :] * b[..., i, :]`` over the row axis, row 0 first."""
    s = np.multiply(a[..., 0, :], b[..., 0, :])
    for i in range(1, a.shape[-2]):
        s = np.add(s, np.multiply(a[..., i, :], b[..., i, :]))
    return s


def pivot_schedule(q):
    """Return the rounds of column pairs of one sweep, as a tuple of tuples of ``(p, s)``.

    Circle method: players ``0 .. m-1`` with ``m = q`` rounded up to even (an odd ``q`` adds a
    dummy player ``q`` whose pairs are dropped); in round ``k`` player ``m - 1`` meets
    ``k``, and ``(k + i) mod (m - 1)`` meets ``(k - i) mod (m - 1)`` for ``i = 1 .. m/2 - 1``.
    Every pair occurs exactly once per sweep; pairs are written ``p < s`` and sorted within
    a round.
    """
    if q < 2:
        return ()
    m = q + (q % 2)
    rounds = []
    for k in range(m - 1):
        pairs = [(k, m - 1)]
        for i in range(1, m // 2):
            pairs.append(((k + i) % (m - 1), (k - i) % (m - 1)))
        rounds.append(tuple(sorted((min(p), max(p)) for p in pairs if max(p) < q)))
    return tuple(rounds)


def _rotation(alpha, beta, gamma):
    """Return ``(c, sn)`` of the Jacobi rotation for column moments alpha, beta, gamma."""
    d = np.subtract(beta, alpha)
    g2 = np.add(gamma, gamma)
    w = np.add(np.multiply(d, d), np.multiply(g2, g2))
    root = fp32_sqrt(w)
    den = np.add(np.abs(d), root)
    with np.errstate(invalid="ignore"):
        t = np.multiply(g2, fp32_recip_fast(den))
    # |t| <= 1 in exact arithmetic; the clamp catches recip(den) overflowing for subnormal den.
    t = np.maximum(np.minimum(t, _F32(1)), _F32(-1))
    t = np.where(d < 0, -t, t)
    t = np.where(gamma == 0, _F32(0), t).astype(_F32)
    c = fp32_rsqrt_fast(np.add(_F32(1), np.multiply(t, t)))
    return c, np.multiply(c, t)


def jacobi_svd(a, sweeps=SWEEPS):
    """Factor ``a`` (..., q, q) as ``U diag(sigma) V^T`` by the fixed sequence above.

    Parameters
    ----------
    a : array_like
        Finite binary32 matrices, any leading batch axes (each matrix is factored on its own;
        the batch only vectorizes the golden evaluation).
    sweeps : int
        Jacobi sweeps (default :data:`SWEEPS`).

    Returns
    -------
    (U, sigma, V) : float32 arrays of shapes (..., q, q), (..., q), (..., q, q)
        ``sigma`` descending and non-negative.
    """
    A = np.array(a, dtype=_F32)
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
        raise ValueError(f"jacobi_svd takes square matrices (..., q, q), not shape {A.shape}")
    if not np.all(np.isfinite(A)):
        raise ValueError("jacobi_svd: the matrix holds a NaN or an infinity")
    q = A.shape[-1]
    V = np.broadcast_to(np.eye(q, dtype=_F32), A.shape).copy()
    rounds = pivot_schedule(q)
    for _ in range(int(sweeps)):
        for pairs in rounds:
            p = np.array([pq[0] for pq in pairs])
            s = np.array([pq[1] for pq in pairs])
            ap, as_ = A[..., :, p], A[..., :, s]
            alpha, beta, gamma = _rowsum_sq(ap, ap), _rowsum_sq(as_, as_), _rowsum_sq(ap, as_)
            c, sn = _rotation(alpha, beta, gamma)
            c, sn = c[..., None, :], sn[..., None, :]
            for M in (A, V):
                mp, ms = M[..., :, p], M[..., :, s]
                M[..., :, p] = np.subtract(np.multiply(c, mp), np.multiply(sn, ms))
                M[..., :, s] = np.add(np.multiply(sn, mp), np.multiply(c, ms))
    norms = _rowsum_sq(A, A)
    for pas in range(q):
        for left in range(pas % 2, q - 1, 2):
            right = left + 1
            swap = norms[..., left] < norms[..., right]
            nl, nr = norms[..., left].copy(), norms[..., right].copy()
            norms[..., left] = np.where(swap, nr, nl)
            norms[..., right] = np.where(swap, nl, nr)
            for M in (A, V):
                ml, mr = M[..., :, left].copy(), M[..., :, right].copy()
                M[..., :, left] = np.where(swap[..., None], mr, ml)
                M[..., :, right] = np.where(swap[..., None], ml, mr)
    k = fp32_rsqrt_fast(norms)
    zero = norms == 0
    with np.errstate(invalid="ignore"):
        sigma = np.where(zero, _F32(0), np.multiply(norms, k)).astype(_F32)
        U = np.where(zero[..., None, :], _F32(0), np.multiply(A, k[..., None, :])).astype(_F32)
    return U, sigma, V


def accuracy_report(n=2000, q=5, seed=0, sweeps=SWEEPS):
    """Measure :func:`jacobi_svd` against ``numpy.linalg.svd`` (float64) on ``n`` matrices.

    Returns a dict per family (``random``: standard normal entries; ``cond1e3``/``cond1e6``:
    ``Q1 diag(logspace(0, -3 or -6)) Q2`` with random orthogonal ``Q1``, ``Q2``; ``rank1plus``:
    the low-rank-training shape ``diag(s, 0) + u v^T``) holding the worst and median of the
    largest relative singular-value error ``max_j |s_j - s*_j| / s*_1`` (relative to the
    largest), of the smallest singular value's relative error ``|s_q - s*_q| / s*_q`` and of the
    reconstruction error ``|A - U S V^T|_F / |A|_F``.
    """
    rng = np.random.default_rng(seed)

    def orth():
        return np.linalg.qr(rng.standard_normal((n, q, q)))[0]

    fams = {"random": rng.standard_normal((n, q, q))}
    for name, lo in (("cond1e3", -3), ("cond1e6", -6)):
        s = np.logspace(0, lo, q)
        fams[name] = orth() @ (s[:, None] * orth())
    diag = np.zeros((n, q, q))
    idx = np.arange(q - 1)
    diag[:, idx, idx] = -np.sort(-np.abs(rng.standard_normal((n, q - 1))) * 10, axis=1)
    fams["rank1plus"] = diag + rng.standard_normal((n, q, 1)) * rng.standard_normal((n, 1, q))
    out = {}
    for name, a64 in fams.items():
        a = a64.astype(np.float32)
        U, s, V = jacobi_svd(a, sweeps)
        ref = np.linalg.svd(a.astype(np.float64), compute_uv=False)
        rel = np.max(np.abs(s - ref), axis=1) / ref[:, 0]
        small = np.abs(s[:, -1] - ref[:, -1]) / ref[:, -1]
        rec = (np.linalg.norm(a - (U.astype(np.float64) * s[:, None, :]) @
                              np.swapaxes(V, -1, -2).astype(np.float64), axis=(1, 2))
               / np.linalg.norm(a.astype(np.float64), axis=(1, 2)))
        out[name] = {"sigma_rel_max": float(rel.max()), "sigma_rel_median": float(np.median(rel)),
                     "smallest_rel_max": float(small.max()),
                     "smallest_rel_median": float(np.median(small)),
                     "recon_max": float(rec.max()), "recon_median": float(np.median(rec))}
    return out
