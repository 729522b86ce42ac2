"""Tensor-train (TT) linear layers and tensor-train-matrix (TTM) embeddings: the fast float path.

Conventions (``algorithms.md`` §1–2, ``docs/tt-formats.md``):

* **TT linear.** ``W`` is ``N_in x N_out``, stored as ``2d`` cores ``G_k`` of shape
  ``spec.core_shapes[k] == (r_{k-1}, s_k, r_k)`` with ``s = in_modes + out_modes``.
  ``W[i, j] = G_1[:, i_1, :] ... G_d[:, i_d, :] G_{d+1}[:, j_1, :] ... G_2d[:, j_d, :]`` where the
  digits of ``i`` (over ``in_modes``) and ``j`` (over ``out_modes``) are most significant first,
  i.e. a row-major reshape. The layer computes ``y = x @ W`` (no bias).
* **TTM embedding.** The ``V x D`` table is stored as ``d`` cores ``F_k`` of shape
  ``(r_{k-1}, v_k, e_k, r_k)``; token ``t`` has mixed-radix digits ``t_1..t_d`` (MSD first) and
  its row is the chain product of the slices ``F_k[:, t_k, :, :]``, with the column index over
  ``dim_modes`` row-major (MSD first).

The TT-linear forward/backward use the bi-directional flow: a left merge ``L`` (``N_in x r_d``)
with its prefix products, a right merge ``R`` (``r_d x N_out``) with its suffix products,
``Z = X L`` and ``Y = Z R``. No ``N_in x N_out`` array is ever formed outside of
:func:`tt_to_dense`, which exists for tests and reference only. The TTM lookup runs the same
two-ended chain on each distinct token's slices, meeting at the cheapest rank
(:func:`ttm_split`); the table is never formed outside of :func:`ttm_to_dense`.
:func:`tt_linear_macs` and :func:`ttm_macs` give the exact multiply-accumulate counts.

Computation dtype follows the inputs (``np.result_type`` of ``x`` and the cores): float32 is the
fast path, float64 is what gradient checks use. Every contraction is a BLAS ``matmul`` over
reshaped views.
"""

from dataclasses import dataclass
from math import prod

import numpy as np

from .config import TTMSpec, TTSpec

__all__ = [
    "TTLinearCache", "TTMCache",
    "tt_init_std", "init_tt_cores", "tt_to_dense", "tt_left_merge", "tt_right_merge",
    "tt_linear_forward", "tt_linear_backward", "tt_param_count", "tt_linear_macs",
    "ttm_init_std", "init_ttm_cores", "ttm_to_dense", "token_digits", "ttm_split", "ttm_lookup",
    "ttm_backward", "ttm_backward_sparse", "ttm_param_count", "ttm_macs",
]


# --------------------------------------------------------------------------------------------
# validation helpers

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _check_spec(spec, cls):
    if not isinstance(spec, cls):
        raise TypeError(f"spec must be a {cls.__name__} (from ttrain.golden.config), "
                        f"not {type(spec).__name__}")


def _check_cores(spec, cores, what="cores"):
    """Return ``cores`` as a list of floating ndarrays after checking count and shapes."""
    if isinstance(cores, np.ndarray) or not hasattr(cores, "__len__"):
        raise TypeError(f"{what} must be a list of arrays (one per core), "
                        f"not {type(cores).__name__}")
    shapes = spec.core_shapes
    if len(cores) != len(shapes):
        raise ValueError(f"{what}: expected {len(shapes)} cores for {spec}, got {len(cores)}")
    out = []
    for k, (core, shape) in enumerate(zip(cores, shapes)):
        core = np.asarray(core)
        if core.shape != tuple(shape):
            raise ValueError(f"{what}[{k}] has shape {core.shape}, expected {tuple(shape)} "
                             f"(spec.core_shapes[{k}]) for {spec}")
        if core.dtype not in _FLOATS:
            raise TypeError(f"{what}[{k}] has dtype {core.dtype}; cores must be float32 or "
                            f"float64 arrays")
        out.append(core)
    return out


def _check_float(name, a):
    a = np.asarray(a)
    if a.dtype not in _FLOATS:
        raise TypeError(f"{name} has dtype {a.dtype}; pass a float32 or float64 array")
    return a


def _check_rng(rng):
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator (np.random.default_rng(seed)), "
                        f"not {type(rng).__name__}")


def _check_std(std):
    if not (isinstance(std, (int, float, np.floating, np.integer)) and np.isfinite(std)
            and std > 0):
        raise ValueError(f"std must be a positive finite number, got {std!r}")
    return float(std)


def _check_dtype(dtype):
    dtype = np.dtype(dtype)
    if dtype not in _FLOATS:
        raise TypeError(f"dtype must be a floating type (np.float32 or np.float64), got {dtype}")
    return dtype


# --------------------------------------------------------------------------------------------
# chain kernels, shared by TT-linear (no batch) and TTM (one chain per distinct token)
#
# A "chain" is a list of 3-way blocks (..., r_{k-1}, s_k, r_k) with a common leading batch
# shape "...". Prefix products carry the merged mode index row-major (first block most
# significant) in front of the open rank; suffix products carry the open rank in front.

def _swap(a):
    return np.swapaxes(a, -1, -2)


def _chain_prefixes(mats):
    """``P_k = A_1 * ... * A_k`` as ``(..., s_1..s_k, r_k)``; needs ``r_0 == 1``."""
    bs = mats[0].shape[:-3]
    _, s, r1 = mats[0].shape[-3:]
    out = [mats[0].reshape(bs + (s, r1))]
    for g in mats[1:]:
        r0, s, r1 = g.shape[-3:]
        p = np.matmul(out[-1], g.reshape(bs + (r0, s * r1)))
        out.append(p.reshape(bs + (out[-1].shape[-2] * s, r1)))
    return out


def _chain_suffixes(mats):
    """``S_k = A_k * ... * A_n`` as ``(..., r_{k-1}, s_k..s_n)``; needs ``r_n == 1``."""
    bs = mats[-1].shape[:-3]
    r0, s, _ = mats[-1].shape[-3:]
    out = [mats[-1].reshape(bs + (r0, s))]
    for g in mats[-2::-1]:
        r0, s, r1 = g.shape[-3:]
        p = np.matmul(g.reshape(bs + (r0 * s, r1)), out[-1])
        out.append(p.reshape(bs + (r0, s * out[-1].shape[-1])))
    out.reverse()
    return out


def _sweep_prefixes(mats, prefixes, grad):
    """Return the block gradients of a left chain, given ``grad`` of its product ``(..., S, r_n)``.

    Right to left: ``D`` is ``grad`` with ``A_{k+1..n}`` absorbed (the right environment),
    ``(..., s_1..s_k, r_k)``; ``dA_k = P_{k-1}^T D`` (``P_{k-1}`` the left environment).
    """
    bs = mats[0].shape[:-3]
    grads = [None] * len(mats)
    D = grad
    for k in range(len(mats) - 1, -1, -1):
        g = mats[k]
        r0, s, r1 = g.shape[-3:]
        lead = prefixes[k - 1].shape[-2] if k else 1
        Dk = D.reshape(bs + (lead, s * r1))                   # (..., s_1..s_{k-1}, s_k r_k)
        if k == 0:
            grads[0] = Dk.reshape(bs + (r0, s, r1))
        else:
            grads[k] = np.matmul(_swap(prefixes[k - 1]), Dk).reshape(bs + (r0, s, r1))
            D = np.matmul(Dk, _swap(g.reshape(bs + (r0, s * r1))))    # (..., lead, r_{k-1})
    return grads


def _sweep_suffixes(mats, suffixes, grad):
    """Return the block gradients of a right chain, given ``grad`` of its product ``(..., r_0, S)``.

    Left to right: ``E`` is ``A_{1..k-1}`` absorbed into ``grad``, ``(..., r_{k-1}, s_k..s_n)``;
    ``dA_k = E S_{k+1}^T`` (``S_{k+1}`` the right environment).
    """
    bs = mats[0].shape[:-3]
    n = len(mats)
    grads = [None] * n
    E = grad
    for k in range(n):
        g = mats[k]
        r0, s, r1 = g.shape[-3:]
        tail = suffixes[k + 1].shape[-1] if k + 1 < n else 1
        Ek = E.reshape(bs + (r0 * s, tail))                   # (..., r_{k-1} s_k, s_{k+1}..)
        if k == n - 1:
            grads[k] = Ek.reshape(bs + (r0, s, r1))
        else:
            grads[k] = np.matmul(Ek, _swap(suffixes[k + 1])).reshape(bs + (r0, s, r1))
            E = np.matmul(_swap(g.reshape(bs + (r0 * s, r1))), Ek)    # (..., r_k, tail)
    return grads


# --------------------------------------------------------------------------------------------
# TT linear

def tt_param_count(spec):
    """Return the number of parameters of a TT layer (sum of core sizes)."""
    _check_spec(spec, TTSpec)
    return spec.num_params


def tt_linear_macs(spec, batch):
    """Return the multiply-accumulates of one TT-linear step in the bi-directional flow.

    These are exactly the MACs :func:`tt_linear_forward` and :func:`tt_linear_backward`
    perform (the self-tests count them).

    Parameters
    ----------
    spec : TTSpec
    batch : int
        Rows of ``x`` (``B``, tokens per step).

    Returns
    -------
    dict
        ``left_merge`` (``sum_{k=2..d} m_1..m_{k-1} r_{k-1} m_k r_k``), ``right_merge`` (its
        mirror), ``forward_data`` (``B r_d (N_in + N_out)``: ``X L`` and ``Z R``),
        ``backward_data`` (``2 B r_d (N_in + N_out)``: ``dZ``, ``dX``, ``dR``, ``dL``),
        ``core_grads`` (``2 (left_merge + right_merge)``, batch-independent), and the totals
        ``forward`` (merges + forward_data) and ``backward`` (backward_data + core_grads).
    """
    _check_spec(spec, TTSpec)
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 0:
        raise ValueError(f"batch must be a non-negative integer, got {batch!r}")
    d, r = spec.d, spec.ranks
    m, n = spec.in_modes, spec.out_modes
    left = sum(prod(m[:k]) * r[k] * m[k] * r[k + 1] for k in range(1, d))
    right = sum(r[d + k] * n[k] * r[d + k + 1] * prod(n[k + 1:]) for k in range(d - 1))
    fwd = int(batch) * r[d] * (spec.n_in + spec.n_out)
    out = {"left_merge": left, "right_merge": right, "forward_data": fwd,
           "backward_data": 2 * fwd, "core_grads": 2 * (left + right)}
    out["forward"] = left + right + fwd
    out["backward"] = out["backward_data"] + out["core_grads"]
    return out


def tt_init_std(spec, std):
    """Return the per-core std that gives the dense equivalent entry variance ``std**2``.

    ``W[i, j]`` is a sum over the ``prod(r_1..r_{2d-1})`` rank paths of products of ``2d``
    independent zero-mean entries (one per core). The terms are uncorrelated (two different
    paths differ in at least one rank index, hence in at least one independent factor), so
    ``var(W[i, j]) = prod_k sigma_k**2 * prod_{k=1..2d-1} r_k``. Splitting evenly over the
    ``2d`` cores gives ``sigma = (std**2 / prod r)**(1 / (4d))``.
    """
    _check_spec(spec, TTSpec)
    std = _check_std(std)
    paths = prod(spec.ranks[1:-1])
    return (std * std / paths) ** (1.0 / (4 * spec.d))


def init_tt_cores(spec, rng, std, dtype=np.float32):
    """Draw TT cores i.i.d. normal so that the dense ``W`` has entry variance ``std**2``.

    Parameters
    ----------
    spec : TTSpec
    rng : numpy.random.Generator
    std : float
        Target standard deviation of the entries of the dense equivalent ``W``.
    dtype : float32 or float64

    Returns
    -------
    list of ndarray
        ``cores[k].shape == spec.core_shapes[k]``, every core with std :func:`tt_init_std`.
        The draws are float64 scaled then cast, so float32 and float64 cores from the same seed
        are the same model up to rounding.
    """
    _check_spec(spec, TTSpec)
    _check_rng(rng)
    dtype = _check_dtype(dtype)
    sigma = tt_init_std(spec, std)
    return [(rng.standard_normal(shape) * sigma).astype(dtype) for shape in spec.core_shapes]


def tt_to_dense(spec, cores):
    """Return the dense ``(n_in, n_out)`` float64 matrix of a TT layer (tests/reference only).

    Contracts all ``2d`` cores left to right into the full ``(s_1, ..., s_2d)`` tensor and
    reshapes it row-major, independently of the bi-directional split used by the layer.
    """
    _check_spec(spec, TTSpec)
    cores = _check_cores(spec, cores)
    acc = np.ones((1, 1))
    for core in cores:
        r0, s, r1 = core.shape
        acc = (acc @ core.astype(np.float64).reshape(r0, s * r1)).reshape(-1, r1)
    return acc.reshape(spec.n_in, spec.n_out)


def tt_left_merge(spec, cores):
    """Return the left prefix products ``[P_1, ..., P_d]`` of the input-side cores.

    ``P_k = G_1 * ... * G_k`` viewed as ``(m_1...m_k, r_k)`` (row-major over the input digits);
    ``P_d`` is ``L`` (``n_in x r_d``). dtype is the cores' common dtype.
    """
    _check_spec(spec, TTSpec)
    cores = _check_cores(spec, cores)
    return _left_merge(spec, cores, np.result_type(*cores))


def tt_right_merge(spec, cores):
    """Return the right suffix products ``[S_{d+1}, ..., S_2d]`` of the output-side cores.

    ``S_k = G_k * ... * G_2d`` viewed as ``(r_{k-1}, n_{k-d}...n_d)`` (row-major over the output
    digits); ``S_{d+1}`` is ``R`` (``r_d x n_out``). Built from the right end.
    """
    _check_spec(spec, TTSpec)
    cores = _check_cores(spec, cores)
    return _right_merge(spec, cores, np.result_type(*cores))


def _left_merge(spec, cores, dtype):
    return _chain_prefixes([c.astype(dtype, copy=False) for c in cores[:spec.d]])


def _right_merge(spec, cores, dtype):
    return _chain_suffixes([c.astype(dtype, copy=False) for c in cores[spec.d:]])


@dataclass(frozen=True, eq=False)
class TTLinearCache:
    """What :func:`tt_linear_forward` saves for :func:`tt_linear_backward`.

    Attributes
    ----------
    x : ndarray, ``(B, n_in)``
        The input, flattened to two dimensions (a view of the caller's array when no dtype
        conversion is needed: do not modify ``x`` in place before the backward).
    z : ndarray, ``(B, r_d)``
        ``Z = X L``.
    prefixes : tuple of ndarray
        ``P_k`` of shape ``(m_1...m_k, r_k)`` for ``k = 1..d``; ``prefixes[-1]`` is ``L``.
    suffixes : tuple of ndarray
        ``S_k`` of shape ``(r_{k-1}, n_{k-d}...n_d)`` for ``k = d+1..2d``; ``suffixes[0]`` is
        ``R``.
    batch_shape : tuple
        Leading shape of the caller's ``x`` (``x.shape[:-1]``), restored on ``dx``.
    """
    x: np.ndarray
    z: np.ndarray
    prefixes: tuple
    suffixes: tuple
    batch_shape: tuple

    @property
    def left(self):
        """``L``, ``(n_in, r_d)``."""
        return self.prefixes[-1]

    @property
    def right(self):
        """``R``, ``(r_d, n_out)``."""
        return self.suffixes[0]

    @property
    def dtype(self):
        """Computation dtype of the forward pass."""
        return self.z.dtype

    @property
    def nbytes(self):
        """Bytes held (X, Z, prefix and suffix products)."""
        return (self.x.nbytes + self.z.nbytes + sum(p.nbytes for p in self.prefixes)
                + sum(s.nbytes for s in self.suffixes))


def tt_linear_forward(spec, cores, x):
    """Compute ``y = x @ W`` with the bi-directional flow, without forming ``W``.

    Parameters
    ----------
    spec : TTSpec
    cores : list of ndarray
        ``cores[k].shape == spec.core_shapes[k]``.
    x : ndarray, ``(B, n_in)`` (any leading shape ``(..., n_in)`` is accepted)

    Returns
    -------
    y : ndarray, ``(B, n_out)`` (same leading shape as ``x``)
        dtype ``np.result_type(x, *cores)``.
    cache : TTLinearCache
        X, Z, the prefix products (``L`` last) and the suffix products (``R`` first).
    """
    _check_spec(spec, TTSpec)
    cores = _check_cores(spec, cores)
    x = _check_float("x", x)
    if x.ndim < 1 or x.shape[-1] != spec.n_in:
        raise ValueError(f"x has shape {x.shape}, but the TT layer takes (..., n_in) with "
                         f"n_in = {spec.n_in} (in_modes {list(spec.in_modes)})")
    dtype = np.result_type(x, *cores)
    batch_shape = x.shape[:-1]
    x2 = x.reshape(-1, spec.n_in).astype(dtype, copy=False)
    prefixes = _left_merge(spec, cores, dtype)                # L = prefixes[-1]
    suffixes = _right_merge(spec, cores, dtype)               # R = suffixes[0]
    z = np.matmul(x2, prefixes[-1])                           # (B, r_d)
    y = np.matmul(z, suffixes[0])                             # (B, n_out)
    cache = TTLinearCache(x=x2, z=z, prefixes=tuple(prefixes), suffixes=tuple(suffixes),
                          batch_shape=batch_shape)
    return y.reshape(batch_shape + (spec.n_out,)), cache


def tt_linear_backward(spec, cores, cache, dy):
    """Back-propagate ``dy`` through a TT layer.

    ``dZ = dY R^T``, ``dX = dZ L^T``, ``dR = Z^T dY``, ``dL = X^T dZ``; then the core
    gradients: for the input half, ``dL`` is swept right to left, absorbing ``G_d, G_{d-1}, ...``
    (the right environment, which carries the middle rank) and contracted with the saved prefix
    product ``P_{k-1}`` (the left environment); the output half mirrors this with ``dR``, the
    saved suffix products and a left-to-right sweep.

    Parameters
    ----------
    spec : TTSpec
    cores : list of ndarray
        The cores passed to :func:`tt_linear_forward`.
    cache : TTLinearCache
    dy : ndarray, same shape as the forward's ``y``
        Converted to the forward's computation dtype.

    Returns
    -------
    dx : ndarray, same shape as the forward's ``x``
    dcores : list of ndarray
        ``dcores[k].shape == spec.core_shapes[k]``, in the computation dtype.
    """
    _check_spec(spec, TTSpec)
    cores = _check_cores(spec, cores)
    if not isinstance(cache, TTLinearCache):
        raise TypeError(f"cache must be the TTLinearCache returned by tt_linear_forward, "
                        f"not {type(cache).__name__}")
    if cache.x.shape[1] != spec.n_in or cache.right.shape[1] != spec.n_out:
        raise ValueError(f"cache is for a {cache.x.shape[1]} x {cache.right.shape[1]} layer, "
                         f"but spec is {spec.n_in} x {spec.n_out}: pass the cache from the "
                         f"forward call of this layer")
    dy = _check_float("dy", dy)
    want = cache.batch_shape + (spec.n_out,)
    if dy.shape != want:
        raise ValueError(f"dy has shape {dy.shape}, expected {want} (the shape of y)")
    dtype = cache.dtype
    d = spec.d
    dy2 = dy.reshape(-1, spec.n_out).astype(dtype, copy=False)
    L, R = cache.left, cache.right
    dz = np.matmul(dy2, R.T)                                  # (B, r_d)
    dx = np.matmul(dz, L.T)                                   # (B, n_in)
    dR = np.matmul(cache.z.T, dy2)                            # (r_d, n_out)
    dL = np.matmul(cache.x.T, dz)                             # (n_in, r_d)

    mats = [c.astype(dtype, copy=False) for c in cores]
    dcores = (_sweep_prefixes(mats[:d], cache.prefixes, dL)
              + _sweep_suffixes(mats[d:], cache.suffixes, dR))
    return dx.reshape(cache.batch_shape + (spec.n_in,)), dcores


# --------------------------------------------------------------------------------------------
# TTM embedding

def ttm_param_count(spec):
    """Return the number of parameters of a TTM table (sum of core sizes)."""
    _check_spec(spec, TTMSpec)
    return spec.num_params


def _segment_sum(values, inverse, n):
    """Return ``out[j] = sum(values[inverse == j])`` for ``j < n``.

    A one-hot ``(n, T)`` matmul (BLAS; ``np.add.at`` and ``reduceat`` are 10x slower here),
    falling back to ``np.add.at`` when the one-hot matrix would exceed 2**24 entries.
    """
    out_shape = (n,) + values.shape[1:]
    flat = values.reshape(values.shape[0], prod(values.shape[1:]))
    if n * values.shape[0] <= 1 << 24:
        onehot = (inverse[None, :] == np.arange(n)[:, None]).astype(values.dtype)
        return np.dot(onehot, flat).reshape(out_shape)       # a scatter, not a contraction
    out = np.zeros((n, flat.shape[1]), dtype=values.dtype)
    np.add.at(out, inverse, flat)
    return out.reshape(out_shape)


def _ttm_split_costs(spec):
    """Return the per-token lookup MACs for every split ``m`` in ``0..d``."""
    d, e, r = spec.d, spec.dim_modes, spec.ranks
    costs = []
    for m in range(d + 1):
        left = sum(prod(e[:k]) * r[k] * e[k] * r[k + 1] for k in range(1, m))
        right = sum(r[j] * e[j] * r[j + 1] * prod(e[j + 1:]) for j in range(m, d - 1))
        join = spec.dim * r[m] if 0 < m < d else 0
        costs.append(left + right + join)
    return costs


def ttm_split(spec):
    """Return the split ``m`` of the TTM lookup chain: the cheapest per token (ties: smallest).

    Cores ``0..m-1`` are merged left to right (prefix products), cores ``m..d-1`` right to left
    (suffix products), and the two meet through rank ``r_m`` — the TT-linear bi-directional
    flow applied to one token's slices. ``m == d`` is the plain left-to-right chain.
    """
    _check_spec(spec, TTMSpec)
    costs = _ttm_split_costs(spec)
    return costs.index(min(costs))


def ttm_macs(spec, n_unique, split=None):
    """Return the multiply-accumulates of :func:`ttm_lookup` and :func:`ttm_backward_sparse`.

    Work is done once per distinct token (``n_unique``). With the split ``m`` of
    :func:`ttm_split`, one token costs ``left + right + join`` MACs: the left chain
    ``sum_{k=1..m-1} e_1..e_k r_k e_{k+1} r_{k+1}`` (0-based cores), its right-hand mirror and
    ``D r_m`` to join them (none when ``m`` is ``0`` or ``d``). The backward costs twice the
    lookup (slice gradients plus the environment sweeps). Scatter-adds are not counted.

    ``split`` forces the split point as in :func:`ttm_lookup`.

    Returns
    -------
    dict
        ``split``, ``lookup`` and ``backward``.
    """
    _check_spec(spec, TTMSpec)
    if isinstance(n_unique, bool) or not isinstance(n_unique, (int, np.integer)) or n_unique < 0:
        raise ValueError(f"n_unique must be a non-negative integer, got {n_unique!r}")
    costs = _ttm_split_costs(spec)
    m = costs.index(min(costs)) if split is None else split
    if not (isinstance(m, (int, np.integer)) and 0 <= m <= spec.d):
        raise ValueError(f"split must be an integer in 0..{spec.d} (or None), got {split!r}")
    return {"split": m, "lookup": int(n_unique) * costs[m],
            "backward": 2 * int(n_unique) * costs[m]}


def ttm_init_std(spec, std):
    """Return the per-core std that gives table entries of variance ``std**2``.

    A table entry is a sum over ``prod(r_1..r_{d-1})`` rank paths of products of ``d``
    independent zero-mean entries, so ``sigma = (std**2 / prod r)**(1 / (2d))``.
    """
    _check_spec(spec, TTMSpec)
    std = _check_std(std)
    paths = prod(spec.ranks[1:-1])
    return (std * std / paths) ** (1.0 / (2 * spec.d))


def init_ttm_cores(spec, rng, std, dtype=np.float32):
    """Draw TTM cores i.i.d. normal so that the dense table has entry variance ``std**2``.

    Returns
    -------
    list of ndarray
        ``cores[k].shape == spec.core_shapes[k] == (r_{k-1}, v_k, e_k, r_k)``.
    """
    _check_spec(spec, TTMSpec)
    _check_rng(rng)
    dtype = _check_dtype(dtype)
    sigma = ttm_init_std(spec, std)
    return [(rng.standard_normal(shape) * sigma).astype(dtype) for shape in spec.core_shapes]


def ttm_to_dense(spec, cores):
    """Return the dense ``(V, D)`` float64 table (tests/reference only)."""
    _check_spec(spec, TTMSpec)
    cores = _check_cores(spec, cores)
    acc = np.ones((1, 1))
    for core in cores:                                        # -> (v1 e1 v2 e2 ... vd ed)
        r0, v, e, r1 = core.shape
        acc = (acc @ core.astype(np.float64).reshape(r0, v * e * r1)).reshape(-1, r1)
    d = spec.d
    full = acc.reshape([m for ve in zip(spec.vocab_modes, spec.dim_modes) for m in ve])
    full = full.transpose(list(range(0, 2 * d, 2)) + list(range(1, 2 * d, 2)))
    return full.reshape(spec.vocab, spec.dim)


def _check_tokens(spec, tokens):
    tokens = np.asarray(tokens)
    if tokens.dtype.kind not in "iu":
        raise TypeError(f"tokens have dtype {tokens.dtype}; pass an integer array of token ids")
    if tokens.size:
        lo, hi = tokens.min(), tokens.max()
        if lo < 0 or hi >= spec.vocab:
            bad = lo if lo < 0 else hi
            raise ValueError(f"token id {int(bad)} is out of range for a vocabulary of "
                             f"{spec.vocab} (vocab_modes {list(spec.vocab_modes)}): ids must "
                             f"be in [0, {spec.vocab - 1}]")
    return tokens.astype(np.int64, copy=False)


def token_digits(spec, tokens):
    """Return the mixed-radix digits of ``tokens``, most significant first.

    Digit ``k`` is ``(t // prod(v_{k+1}..v_d)) % v_k``.

    Parameters
    ----------
    spec : TTMSpec
    tokens : int array, any shape ``(...)``, values in ``[0, V)``

    Returns
    -------
    ndarray of int64, ``(..., d)``
    """
    _check_spec(spec, TTMSpec)
    tokens = _check_tokens(spec, tokens)
    radix = np.array([prod(spec.vocab_modes[k + 1:]) for k in range(spec.d)], dtype=np.int64)
    return (tokens[..., None] // radix) % np.array(spec.vocab_modes, dtype=np.int64)


@dataclass(frozen=True, eq=False)
class TTMCache:
    """What :func:`ttm_lookup` saves for the backward functions.

    Work is done once per distinct token: ``unique[inverse]`` restores the flattened tokens.

    Attributes
    ----------
    tokens_shape : tuple
    unique : ndarray of int64, ``(U,)``
    inverse : ndarray of int64, ``(T,)`` with ``T = prod(tokens_shape)``
    digits : ndarray of int64, ``(U, d)``
    split : int
        ``m`` of :func:`ttm_split`.
    slices : tuple of ndarray
        ``slices[k][u] == F_k[:, digits[u, k], :, :]``, ``(U, r_{k-1}, e_k, r_k)``.
    prefixes : tuple of ndarray
        Products of slices ``0..k`` for ``k < m``: ``(U, e_1..e_{k+1}, r_{k+1})``.
    suffixes : tuple of ndarray
        Products of slices ``k..d-1`` for ``k >= m``: ``(U, r_k, e_{k+1}..e_d)``.
    """
    tokens_shape: tuple
    unique: np.ndarray
    inverse: np.ndarray
    digits: np.ndarray
    split: int
    slices: tuple
    prefixes: tuple
    suffixes: tuple

    @property
    def dtype(self):
        """Computation dtype of the lookup."""
        return self.slices[0].dtype


def ttm_lookup(spec, cores, tokens, split=None):
    """Look up the embedding rows of ``tokens`` without forming the table.

    The selected slices of each distinct token are chain-contracted over the ranks, from both
    ends towards the split :func:`ttm_split` (the cheapest order; same result as the plain
    left-to-right chain up to float rounding).

    Parameters
    ----------
    spec : TTMSpec
    cores : list of ndarray
        ``cores[k].shape == spec.core_shapes[k]``.
    tokens : int array ``(...)``, values in ``[0, V)``
    split : int in ``0..d``, optional
        Force the split point (default :func:`ttm_split`); every split gives the same rows up
        to float rounding.

    Returns
    -------
    rows : ndarray, ``(..., D)``, dtype of the cores
    cache : TTMCache
    """
    _check_spec(spec, TTMSpec)
    cores = _check_cores(spec, cores)
    tokens = _check_tokens(spec, tokens)
    dtype = np.result_type(*cores)
    unique, inverse = np.unique(tokens.reshape(-1), return_inverse=True)
    digits = token_digits(spec, unique)                       # (U, d)
    if split is None:
        m = ttm_split(spec)
    elif isinstance(split, (int, np.integer)) and not isinstance(split, bool) \
            and 0 <= split <= spec.d:
        m = int(split)
    else:
        raise ValueError(f"split must be an integer in 0..{spec.d} (or None), got {split!r}")
    n = unique.shape[0]
    slices = tuple(np.ascontiguousarray(core.astype(dtype, copy=False).transpose(1, 0, 2, 3))
                   [digits[:, k]] for k, core in enumerate(cores))   # (U, r_k, e_k, r_{k+1})
    prefixes = tuple(_chain_prefixes(slices[:m])) if m else ()
    suffixes = tuple(_chain_suffixes(slices[m:])) if m < spec.d else ()
    if m == 0:
        rows = suffixes[0]
    elif m == spec.d:
        rows = prefixes[-1]
    else:
        rows = np.matmul(prefixes[-1], suffixes[0])           # (U, E_<m, E_>=m)
    rows = rows.reshape(n, spec.dim)[inverse]
    cache = TTMCache(tokens_shape=tokens.shape, unique=unique, inverse=inverse.reshape(-1),
                     digits=digits, split=m, slices=slices, prefixes=prefixes,
                     suffixes=suffixes)
    return rows.reshape(tokens.shape + (spec.dim,)), cache


def ttm_backward_sparse(spec, cores, cache, drows):
    """Return the TTM core gradients as used slices only.

    For each distinct token the row gradients of its occurrences are summed; the gradient of
    slice ``k`` is that sum contracted with the product of the other selected slices (the saved
    prefix/suffix products on one side, a sweep over the remaining slices on the other). Slices
    shared by several tokens are accumulated.

    Parameters
    ----------
    spec : TTMSpec
    cores : list of ndarray
        The cores passed to :func:`ttm_lookup` (shapes are checked; the saved slices are used).
    cache : TTMCache
    drows : ndarray, same shape as the lookup's ``rows``

    Returns
    -------
    list of (slice_indices, slice_grads), one per core
        ``slice_indices`` is a sorted int64 array of the used digit values of core ``k``;
        ``slice_grads[j]`` (shape ``(r_{k-1}, e_k, r_k)``) is the gradient of
        ``F_k[:, slice_indices[j], :, :]``.
    """
    _check_spec(spec, TTMSpec)
    _check_cores(spec, cores)
    if not isinstance(cache, TTMCache):
        raise TypeError(f"cache must be the TTMCache returned by ttm_lookup, "
                        f"not {type(cache).__name__}")
    if (cache.digits.shape[1] != spec.d
            or [s.shape[1:] for s in cache.slices] != [(r0, e, r1) for r0, _, e, r1
                                                      in spec.core_shapes]):
        raise ValueError("cache does not match spec: pass the cache from ttm_lookup with the "
                         "same spec")
    drows = _check_float("drows", drows)
    want = cache.tokens_shape + (spec.dim,)
    if drows.shape != want:
        raise ValueError(f"drows has shape {drows.shape}, expected {want} (the shape of rows)")
    dtype = cache.dtype
    n, m, d = cache.unique.shape[0], cache.split, spec.d
    g = _segment_sum(drows.reshape(-1, spec.dim).astype(dtype, copy=False), cache.inverse, n)

    if m == 0:
        dslices = _sweep_suffixes(cache.slices, cache.suffixes, g.reshape(n, 1, spec.dim))
    elif m == d:
        dslices = _sweep_prefixes(cache.slices, cache.prefixes, g.reshape(n, spec.dim, 1))
    else:
        A, B = cache.prefixes[-1], cache.suffixes[0]          # (U, E_<m, r_m), (U, r_m, E_>=m)
        g = g.reshape(n, A.shape[1], B.shape[2])
        dA = np.matmul(g, _swap(B))
        dB = np.matmul(_swap(A), g)
        dslices = (_sweep_prefixes(cache.slices[:m], cache.prefixes, dA)
                   + _sweep_suffixes(cache.slices[m:], cache.suffixes, dB))
    out = []
    for k, ds in enumerate(dslices):
        idx, inv = np.unique(cache.digits[:, k], return_inverse=True)
        out.append((idx, _segment_sum(ds, inv.reshape(-1), idx.shape[0])))
    return out


def ttm_backward(spec, cores, cache, drows):
    """Return the TTM core gradients as dense-shaped arrays (zero except the used slices).

    See :func:`ttm_backward_sparse`; ``dcores[k].shape == spec.core_shapes[k]``.
    """
    sparse = ttm_backward_sparse(spec, cores, cache, drows)
    dcores = []
    for shape, (idx, grads) in zip(spec.core_shapes, sparse):
        dc = np.zeros(shape, dtype=cache.dtype)
        dc[:, idx, :, :] = grads.transpose(1, 0, 2, 3)
        dcores.append(dc)
    return dcores
