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
:func:`tt_to_dense`, which exists for tests and reference only.

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
    "tt_linear_forward", "tt_linear_backward", "tt_param_count",
    "ttm_init_std", "init_ttm_cores", "ttm_to_dense", "token_digits", "ttm_lookup",
    "ttm_backward", "ttm_backward_sparse", "ttm_param_count",
]


# --------------------------------------------------------------------------------------------
# validation helpers

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
        if core.dtype.kind != "f":
            raise TypeError(f"{what}[{k}] has dtype {core.dtype}; cores must be float32 or "
                            f"float64 arrays")
        out.append(core)
    return out


def _check_float(name, a):
    a = np.asarray(a)
    if a.dtype.kind != "f":
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
    if dtype.kind != "f":
        raise TypeError(f"dtype must be a floating type (np.float32 or np.float64), got {dtype}")
    return dtype


# --------------------------------------------------------------------------------------------
# TT linear

def tt_param_count(spec):
    """Number of parameters of a TT layer (sum of core sizes)."""
    _check_spec(spec, TTSpec)
    return spec.num_params


def tt_init_std(spec, std):
    """Per-core standard deviation that gives the dense equivalent entry variance ``std**2``.

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
    d = spec.d
    g = cores[0].astype(dtype, copy=False)
    prefixes = [g.reshape(g.shape[1], g.shape[2])]           # r_0 == 1
    for k in range(1, d):
        g = cores[k].astype(dtype, copy=False)
        r0, s, r1 = g.shape
        prefixes.append((prefixes[-1] @ g.reshape(r0, s * r1)).reshape(-1, r1))
    return prefixes


def _right_merge(spec, cores, dtype):
    d = spec.d
    g = cores[-1].astype(dtype, copy=False)
    suffixes = [g.reshape(g.shape[0], g.shape[1])]           # r_2d == 1
    for k in range(2 * d - 2, d - 1, -1):
        g = cores[k].astype(dtype, copy=False)
        r0, s, r1 = g.shape
        suffixes.append((g.reshape(r0 * s, r1) @ suffixes[-1]).reshape(r0, -1))
    suffixes.reverse()
    return suffixes


@dataclass(frozen=True, eq=False)
class TTLinearCache:
    """What :func:`tt_linear_forward` saves for :func:`tt_linear_backward`.

    Attributes
    ----------
    x : ndarray, ``(B, n_in)``
        The input, flattened to two dimensions.
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
    z = x2 @ prefixes[-1]                                     # (B, r_d)
    y = z @ suffixes[0]                                       # (B, n_out)
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
    dz = dy2 @ R.T                                            # (B, r_d)
    dx = dz @ L.T                                             # (B, n_in)
    dR = cache.z.T @ dy2                                      # (r_d, n_out)
    dL = cache.x.T @ dz                                       # (n_in, r_d)

    dcores = [None] * (2 * d)
    # Input half, right-to-left. D holds dL contracted with G_{k+1..d}: (m_1..m_k, r_k).
    D = dL
    for k in range(d - 1, -1, -1):
        g = cores[k].astype(dtype, copy=False)
        r0, s, r1 = g.shape
        Dk = D.reshape(-1, s * r1)                            # (m_1..m_{k-1}, m_k r_k)
        if k == 0:
            dcores[0] = Dk.reshape(r0, s, r1)
        else:
            dcores[k] = (cache.prefixes[k - 1].T @ Dk).reshape(r0, s, r1)
            D = Dk @ g.reshape(r0, s * r1).T                  # (m_1..m_{k-1}, r_{k-1})
    # Output half, left-to-right. E holds G_{d+1..k-1} contracted with dR: (r_{k-1}, n_k..n_d).
    E = dR
    for k in range(d, 2 * d):
        g = cores[k].astype(dtype, copy=False)
        r0, s, r1 = g.shape
        Ek = E.reshape(r0 * s, -1)                            # (r_{k-1} n_k, n_{k+1}..n_d)
        if k == 2 * d - 1:
            dcores[k] = Ek.reshape(r0, s, r1)
        else:
            dcores[k] = (Ek @ cache.suffixes[k - d + 1].T).reshape(r0, s, r1)
            E = g.reshape(r0 * s, r1).T @ Ek                  # (r_k, n_{k+1}..n_d)
    return dx.reshape(cache.batch_shape + (spec.n_in,)), dcores


# --------------------------------------------------------------------------------------------
# TTM embedding

def ttm_param_count(spec):
    """Number of parameters of a TTM table (sum of core sizes)."""
    _check_spec(spec, TTMSpec)
    return spec.num_params


def ttm_init_std(spec, std):
    """Per-core std giving table entries of variance ``std**2``.

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
    slices : tuple of ndarray
        ``slices[k][u] == F_k[:, digits[u, k], :, :]``, ``(U, r_{k-1}, e_k, r_k)``.
    prefixes : tuple of ndarray
        Chain products of the first ``k+1`` slices, ``(U, e_1..e_{k+1}, r_{k+1})``; the last
        one, squeezed, is the rows of the distinct tokens.
    """
    tokens_shape: tuple
    unique: np.ndarray
    inverse: np.ndarray
    digits: np.ndarray
    slices: tuple
    prefixes: tuple

    @property
    def dtype(self):
        """Computation dtype of the lookup."""
        return self.prefixes[-1].dtype


def ttm_lookup(spec, cores, tokens):
    """Look up the embedding rows of ``tokens`` without forming the table.

    Parameters
    ----------
    spec : TTMSpec
    cores : list of ndarray
        ``cores[k].shape == spec.core_shapes[k]``.
    tokens : int array ``(...)``, values in ``[0, V)``

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
    digits = token_digits(spec, unique)                      # (U, d)
    n = unique.shape[0]
    slices, prefixes = [], []
    acc = np.ones((n, 1, 1), dtype=dtype)                     # (U, E_<k, r_{k-1})
    for k, core in enumerate(cores):
        r0, v, e, r1 = core.shape
        sl = core.astype(dtype, copy=False).transpose(1, 0, 2, 3)[digits[:, k]]
        slices.append(sl)                                     # (U, r0, e, r1)
        acc = (acc @ sl.reshape(n, r0, e * r1)).reshape(n, prod(spec.dim_modes[:k + 1]), r1)
        prefixes.append(acc)
    rows = acc.reshape(n, spec.dim)[inverse]
    cache = TTMCache(tokens_shape=tokens.shape, unique=unique, inverse=inverse.reshape(-1),
                     digits=digits, slices=tuple(slices), prefixes=tuple(prefixes))
    return rows.reshape(tokens.shape + (spec.dim,)), cache


def ttm_backward_sparse(spec, cores, cache, drows):
    """Return the TTM core gradients as used slices only.

    For each distinct token the row gradients of its occurrences are summed, then the gradient
    of slice ``k`` is that sum contracted with the product of the other selected slices (left:
    the saved prefix; right: swept from the last core). Slices shared by several tokens are
    accumulated.

    Parameters
    ----------
    spec : TTMSpec
    cores : list of ndarray
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
    cores = _check_cores(spec, cores)
    if not isinstance(cache, TTMCache):
        raise TypeError(f"cache must be the TTMCache returned by ttm_lookup, "
                        f"not {type(cache).__name__}")
    if cache.digits.shape[1] != spec.d or cache.prefixes[-1].shape[1] != spec.dim:
        raise ValueError("cache does not match spec: pass the cache from ttm_lookup with the "
                         "same spec")
    drows = _check_float("drows", drows)
    want = cache.tokens_shape + (spec.dim,)
    if drows.shape != want:
        raise ValueError(f"drows has shape {drows.shape}, expected {want} (the shape of rows)")
    dtype = cache.dtype
    n = cache.unique.shape[0]
    g = np.zeros((n, spec.dim), dtype=dtype)
    np.add.at(g, cache.inverse, drows.reshape(-1, spec.dim).astype(dtype, copy=False))

    out = [None] * spec.d
    D = g.reshape(n, spec.dim, 1)                             # (U, E_<=k, r_k), k = d
    for k in range(spec.d - 1, -1, -1):
        sl = cache.slices[k]
        _, r0, e, r1 = sl.shape
        Dk = D.reshape(n, prod(spec.dim_modes[:k]), e * r1)   # (U, E_<k, e_k r_k)
        if k == 0:
            ds = Dk.reshape(n, r0, e, r1)
        else:
            ds = (cache.prefixes[k - 1].transpose(0, 2, 1) @ Dk).reshape(n, r0, e, r1)
            D = Dk @ sl.reshape(n, r0, e * r1).transpose(0, 2, 1)   # (U, E_<k, r_{k-1})
        idx, inv = np.unique(cache.digits[:, k], return_inverse=True)
        acc = np.zeros((idx.shape[0], r0, e, r1), dtype=dtype)
        np.add.at(acc, inv.reshape(-1), ds)
        out[k] = (idx, acc)
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
