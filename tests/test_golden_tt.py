"""Self-tests of ``ttrain.golden.tt``: TT linear and TTM embedding formats, forward/backward.

References used here are independent of the code under test: explicit per-entry products of
core slices, dense matmuls, ``np.einsum`` chain rules through the dense equivalent,
``np.unravel_index`` for digits, and central finite differences.
"""

import string
from math import prod

import numpy as np
import pytest

from ttrain.golden.config import TTMSpec, TTSpec, get_config
from ttrain.golden import tt as tt_module
from ttrain.golden.tt import (
    TTLinearCache, TTMCache, init_tt_cores, init_ttm_cores, token_digits, tt_init_std,
    tt_left_merge, tt_linear_backward, tt_linear_forward, tt_linear_macs, tt_param_count,
    tt_right_merge, tt_to_dense, ttm_backward, ttm_backward_sparse, ttm_init_std, ttm_lookup,
    ttm_macs, ttm_param_count, ttm_to_dense,
)

TT_SPECS = {
    "d1": TTSpec((3,), (5,), (1, 2, 1)),
    "d2-unequal": TTSpec((2, 3), (4, 5), (1, 2, 3, 4, 1)),
    "d3-varied": TTSpec((2, 3, 4), (3, 2, 5), (1, 2, 3, 4, 3, 2, 1)),
    "d3-rank1": TTSpec((2, 2, 3), (3, 1, 2), (1, 1, 1, 1, 1, 1, 1)),
    "unit-modes": TTSpec((1, 4), (3, 1), (1, 1, 3, 1, 1)),
}
TTM_SPECS = {
    "d1": TTMSpec((7,), (5,), (1, 1)),
    "d2": TTMSpec((4, 3), (2, 5), (1, 3, 1)),
    "d3": TTMSpec((3, 4, 2), (2, 3, 2), (1, 3, 2, 1)),
}
tt_specs = pytest.mark.parametrize("spec", TT_SPECS.values(), ids=TT_SPECS.keys())
ttm_specs = pytest.mark.parametrize("spec", TTM_SPECS.values(), ids=TTM_SPECS.keys())


def rel_err(a, b):
    return np.linalg.norm(np.asarray(a, np.float64) - b) / np.linalg.norm(b)


def naive_tt_dense(spec, cores):
    """W[i, j] as the explicit product of slice matrices over unravelled digits."""
    W = np.zeros((spec.n_in, spec.n_out))
    for i in range(spec.n_in):
        di = np.unravel_index(i, spec.in_modes)
        for j in range(spec.n_out):
            dj = np.unravel_index(j, spec.out_modes)
            m = np.eye(1)
            for core, t in zip(cores, tuple(di) + tuple(dj)):
                m = m @ core[:, t, :]
            W[i, j] = m[0, 0]
    return W


def naive_ttm_dense(spec, cores):
    T = np.zeros((spec.vocab, spec.dim))
    for t in range(spec.vocab):
        dt = np.unravel_index(t, spec.vocab_modes)
        for c in range(spec.dim):
            dc = np.unravel_index(c, spec.dim_modes)
            m = np.eye(1)
            for core, a, b in zip(cores, dt, dc):
                m = m @ core[:, a, b, :]
            T[t, c] = m[0, 0]
    return T


def einsum_chain_grads(cores, mode_axes, dfull):
    """Core gradients of <dfull, full(cores)> by the chain rule through the dense tensor.

    ``cores[k]`` has axes (rank_k, *modes of core k, rank_{k+1}); ``mode_axes[k]`` lists the
    positions of core k's mode axes in ``dfull``.
    """
    letters = iter(string.ascii_letters)
    ranks = [next(letters) for _ in range(len(cores) + 1)]
    full = [None] * dfull.ndim
    subs = []
    for k, core in enumerate(cores):
        modes = []
        for ax in mode_axes[k]:
            full[ax] = next(letters)
            modes.append(full[ax])
        subs.append(ranks[k] + "".join(modes) + ranks[k + 1])
    grads = []
    for k in range(len(cores)):
        # the boundary ranks (size 1) get a ones vector so their letters occur in the inputs
        ops = [c for j, c in enumerate(cores) if j != k] + [dfull, np.ones(1), np.ones(1)]
        spec = ",".join([s for j, s in enumerate(subs) if j != k]
                        + ["".join(full), ranks[0], ranks[-1]])
        grads.append(np.einsum(spec + "->" + subs[k], *ops, optimize="greedy"))
    return grads


class CountingNumpy:
    """Stand-in for the ``np`` module inside ``ttrain.golden.tt`` that counts matmul MACs."""

    def __init__(self):
        self.macs = 0

    def __getattr__(self, name):
        return getattr(np, name)

    def matmul(self, a, b):
        a, b = np.asarray(a), np.asarray(b)
        assert a.ndim >= 2 and b.ndim >= 2, "contractions are matrix products"
        batch = prod(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
        self.macs += batch * a.shape[-2] * a.shape[-1] * b.shape[-1]
        return np.matmul(a, b)


def central_fd(loss, cores, h=1e-3):
    """Central finite differences of ``loss(cores)`` w.r.t. every core entry.

    The losses used here are linear in every single core entry, so the central difference has
    no truncation error and only float64 round-off remains.
    """
    grads = []
    for k, core in enumerate(cores):
        g = np.zeros_like(core)
        for idx in np.ndindex(core.shape):
            work = list(cores)
            plus = core.copy()
            plus[idx] += h
            work[k] = plus
            lp = loss(work)
            minus = core.copy()
            minus[idx] -= h
            work[k] = minus
            g[idx] = (lp - loss(work)) / (2 * h)
        grads.append(g)
    return grads


# --------------------------------------------------------------------------------------------
# TT linear

@tt_specs
def test_tt_to_dense_matches_slice_products(spec):
    cores = init_tt_cores(spec, np.random.default_rng(1), 0.5, np.float64)
    np.testing.assert_allclose(tt_to_dense(spec, cores), naive_tt_dense(spec, cores),
                               rtol=1e-12, atol=1e-14)
    assert tt_to_dense(spec, cores).dtype == np.float64


@tt_specs
def test_merges_multiply_to_dense(spec):
    cores = init_tt_cores(spec, np.random.default_rng(2), 0.5, np.float64)
    prefixes, suffixes = tt_left_merge(spec, cores), tt_right_merge(spec, cores)
    d = spec.d
    assert [p.shape for p in prefixes] == [
        (prod(spec.in_modes[:k + 1]), spec.ranks[k + 1]) for k in range(d)]
    assert [s.shape for s in suffixes] == [
        (spec.ranks[d + k], prod(spec.out_modes[k:])) for k in range(d)]
    np.testing.assert_allclose(prefixes[-1] @ suffixes[0], naive_tt_dense(spec, cores),
                               rtol=1e-12, atol=1e-14)


@tt_specs
def test_forward_equals_dense_float64(spec):
    rng = np.random.default_rng(3)
    cores = init_tt_cores(spec, rng, 0.5, np.float64)
    x = rng.standard_normal((6, spec.n_in))
    y, cache = tt_linear_forward(spec, cores, x)
    assert y.dtype == np.float64 and y.shape == (6, spec.n_out)
    np.testing.assert_allclose(y, x @ naive_tt_dense(spec, cores), rtol=1e-12, atol=1e-13)
    assert isinstance(cache, TTLinearCache)
    np.testing.assert_array_equal(cache.x, x)
    np.testing.assert_allclose(cache.z, x @ cache.left, rtol=1e-13, atol=1e-14)


@tt_specs
def test_forward_float32_close_to_float64(spec):
    rng = np.random.default_rng(4)
    cores = init_tt_cores(spec, rng, 0.5, np.float32)
    x = rng.standard_normal((6, spec.n_in)).astype(np.float32)
    y, cache = tt_linear_forward(spec, cores, x)
    assert y.dtype == np.float32 and cache.dtype == np.float32
    assert all(p.dtype == np.float32 for p in cache.prefixes + cache.suffixes)
    ref = x.astype(np.float64) @ tt_to_dense(spec, cores)
    assert rel_err(y, ref) < 1e-5


def test_forward_accepts_leading_dims():
    spec = TT_SPECS["d2-unequal"]
    rng = np.random.default_rng(5)
    cores = init_tt_cores(spec, rng, 0.5, np.float64)
    x = rng.standard_normal((2, 3, spec.n_in))
    y, cache = tt_linear_forward(spec, cores, x)
    assert y.shape == (2, 3, spec.n_out)
    np.testing.assert_allclose(y, x @ tt_to_dense(spec, cores), rtol=1e-12, atol=1e-13)
    dy = rng.standard_normal(y.shape)
    dx, _ = tt_linear_backward(spec, cores, cache, dy)
    assert dx.shape == x.shape
    np.testing.assert_allclose(dx, dy @ tt_to_dense(spec, cores).T, rtol=1e-12, atol=1e-13)
    # a single vector and an empty batch
    y1, c1 = tt_linear_forward(spec, cores, x[0, 0])
    np.testing.assert_allclose(y1, y[0, 0], rtol=1e-12, atol=1e-13)
    assert tt_linear_backward(spec, cores, c1, dy[0, 0])[0].shape == (spec.n_in,)
    y0, c0 = tt_linear_forward(spec, cores, np.zeros((0, spec.n_in)))
    dx0, dc0 = tt_linear_backward(spec, cores, c0, np.zeros((0, spec.n_out)))
    assert y0.shape == (0, spec.n_out) and dx0.shape == (0, spec.n_in)
    assert not any(g.any() for g in dc0)


@tt_specs
def test_backward_dx_equals_dense(spec):
    rng = np.random.default_rng(6)
    cores = init_tt_cores(spec, rng, 0.5, np.float64)
    x = rng.standard_normal((5, spec.n_in))
    y, cache = tt_linear_forward(spec, cores, x)
    dy = rng.standard_normal(y.shape)
    dx, dcores = tt_linear_backward(spec, cores, cache, dy)
    np.testing.assert_allclose(dx, dy @ naive_tt_dense(spec, cores).T, rtol=1e-12, atol=1e-13)
    assert [g.shape for g in dcores] == [tuple(s) for s in spec.core_shapes]


@tt_specs
def test_backward_dcores_finite_differences(spec):
    rng = np.random.default_rng(7)
    cores = init_tt_cores(spec, rng, 0.5, np.float64)
    x = rng.standard_normal((4, spec.n_in))
    y, cache = tt_linear_forward(spec, cores, x)
    Rm = rng.standard_normal(y.shape)                 # loss = sum(y * Rm), so dy = Rm
    _, dcores = tt_linear_backward(spec, cores, cache, Rm)
    fd = central_fd(lambda c: float(np.sum(tt_linear_forward(spec, c, x)[0] * Rm)), cores)
    for k, (g, ref) in enumerate(zip(dcores, fd)):
        assert rel_err(g, ref) <= 1e-6, f"core {k}"


@tt_specs
def test_backward_dcores_chain_rule_through_dense(spec):
    rng = np.random.default_rng(8)
    cores = init_tt_cores(spec, rng, 0.5, np.float64)
    x = rng.standard_normal((5, spec.n_in))
    y, cache = tt_linear_forward(spec, cores, x)
    dy = rng.standard_normal(y.shape)
    _, dcores = tt_linear_backward(spec, cores, cache, dy)
    dW = (x.T @ dy).reshape(spec.modes)              # dense gradient, digits row-major
    ref = einsum_chain_grads(cores, [(k,) for k in range(2 * spec.d)], dW)
    for k, (g, r) in enumerate(zip(dcores, ref)):
        np.testing.assert_allclose(g, r, rtol=1e-11, atol=1e-12, err_msg=f"core {k}")


def random_tt_spec(rng):
    """A random valid TTSpec: d in 1..3, modes 1..5, each rank drawn up to its TT-rank bound."""
    d = int(rng.integers(1, 4))
    modes = [int(m) for m in rng.integers(1, 6, size=2 * d)]
    ranks = [1]
    for k in range(1, 2 * d):
        bound = min(prod(modes[:k]), prod(modes[k:]))
        ranks.append(int(rng.integers(1, min(bound, 6) + 1)))
    return TTSpec(modes[:d], modes[d:], ranks + [1])


@pytest.mark.parametrize("seed", range(12))
def test_random_specs_against_dense(seed):
    rng = np.random.default_rng(100 + seed)
    spec = random_tt_spec(rng)
    cores = init_tt_cores(spec, rng, 1.0, np.float64)
    W = naive_tt_dense(spec, cores)
    x = rng.standard_normal((3, spec.n_in))
    y, cache = tt_linear_forward(spec, cores, x)
    np.testing.assert_allclose(y, x @ W, rtol=1e-12, atol=1e-12)
    dy = rng.standard_normal(y.shape)
    dx, dcores = tt_linear_backward(spec, cores, cache, dy)
    np.testing.assert_allclose(dx, dy @ W.T, rtol=1e-12, atol=1e-12)
    ref = einsum_chain_grads(cores, [(k,) for k in range(2 * spec.d)],
                             (x.T @ dy).reshape(spec.modes))
    for g, r in zip(dcores, ref):
        np.testing.assert_allclose(g, r, rtol=1e-11, atol=1e-12)


@tt_specs
def test_backward_float32_close_to_float64(spec):
    rng = np.random.default_rng(9)
    cores64 = init_tt_cores(spec, rng, 0.5, np.float64)
    cores32 = [c.astype(np.float32) for c in cores64]
    x = rng.standard_normal((5, spec.n_in))
    dy = rng.standard_normal((5, spec.n_out))
    dx64, dc64 = tt_linear_backward(spec, cores64, tt_linear_forward(spec, cores64, x)[1], dy)
    _, cache32 = tt_linear_forward(spec, cores32, x.astype(np.float32))
    dx32, dc32 = tt_linear_backward(spec, cores32, cache32, dy.astype(np.float32))
    assert dx32.dtype == np.float32 and all(g.dtype == np.float32 for g in dc32)
    assert rel_err(dx32, dx64) < 1e-5
    for g32, g64 in zip(dc32, dc64):
        assert rel_err(g32, g64) < 1e-5


def test_cache_never_holds_dense_sized_arrays():
    # 4096-entry W; every saved array must be far smaller (L and R are 64 x 2, 2 x 64).
    spec = TTSpec((4, 4, 4), (4, 4, 4), (1, 2, 2, 2, 2, 2, 1))
    rng = np.random.default_rng(10)
    cores = init_tt_cores(spec, rng, 0.5)
    _, cache = tt_linear_forward(spec, cores, rng.standard_normal((8, 64)).astype(np.float32))
    arrays = [cache.x, cache.z, *cache.prefixes, *cache.suffixes]
    assert max(a.size for a in arrays) <= 8 * 64
    assert cache.left.shape == (64, 2) and cache.right.shape == (2, 64)
    assert cache.nbytes == sum(a.nbytes for a in arrays)


@pytest.mark.parametrize("spec", [TT_SPECS["d1"], TTSpec((3, 4), (4, 3), (1, 3, 5, 3, 1)),
                                  TT_SPECS["d3-varied"]], ids=["d1", "d2", "d3"])
def test_init_dense_variance(spec):
    # E[W_ij^2] = std^2 exactly. Entries of one draw share cores (correlated), so the estimate
    # averages 2000 independent draws and its standard error comes from the spread of the
    # per-draw means (CLT). |mean - std^2| < 5 SE fails a correct init with p < 1e-6; SE is
    # required below 5% of std^2, so any variance error above 25% is caught (a missing rank
    # factor here is >= 2x).
    std, draws = 0.7, 2000
    rng = np.random.default_rng(11)
    per_draw, mean_w = [], []
    for _ in range(draws):
        W = tt_to_dense(spec, init_tt_cores(spec, rng, std))
        per_draw.append(np.mean(W * W))
        mean_w.append(np.mean(W))
    per_draw = np.array(per_draw)
    se = per_draw.std(ddof=1) / np.sqrt(draws)
    assert se < 0.05 * std ** 2
    assert abs(per_draw.mean() - std ** 2) < 5 * se
    mean_w = np.array(mean_w)
    assert abs(mean_w.mean()) < 5 * mean_w.std(ddof=1) / np.sqrt(draws)


def test_init_core_std_and_dtype():
    spec = TTSpec((12, 8, 8), (8, 8, 12), (1, 12, 20, 20, 20, 12, 1))
    cores = init_tt_cores(spec, np.random.default_rng(12), 0.02)
    sigma = tt_init_std(spec, 0.02)
    assert sigma ** (4 * spec.d) * prod(spec.ranks[1:-1]) == pytest.approx(0.02 ** 2)
    for core, shape in zip(cores, spec.core_shapes):
        assert core.shape == shape and core.dtype == np.float32
        # relative standard error of a sample std of n normals is 1/sqrt(2n); allow 5 of them
        assert core.std() == pytest.approx(sigma, rel=5 / np.sqrt(2 * core.size))
        assert abs(core.mean()) < 5 * sigma / np.sqrt(core.size)
    assert init_tt_cores(spec, np.random.default_rng(0), 1.0, np.float64)[0].dtype == np.float64
    a = init_tt_cores(spec, np.random.default_rng(5), 1.0)
    b = init_tt_cores(spec, np.random.default_rng(5), 1.0)
    assert all(np.array_equal(p, q) for p, q in zip(a, b))
    # same seed, both dtypes: the same model up to float32 rounding
    c = init_tt_cores(spec, np.random.default_rng(5), 1.0, np.float64)
    assert all(np.array_equal(p, q.astype(np.float32)) for p, q in zip(a, c))


def test_param_counts_equal_initialised_sizes():
    cfg = get_config("paper-l1")
    rng = np.random.default_rng(16)
    for spec in (cfg.attention, cfg.ffn1, cfg.ffn2):
        assert tt_param_count(spec) == sum(c.size for c in init_tt_cores(spec, rng, 1.0))
    assert ttm_param_count(cfg.embedding) == sum(
        c.size for c in init_ttm_cores(cfg.embedding, rng, 1.0))
    # the attention layer compresses 768*768 = 589,824 weights to 10,528 (algorithms.md ranks)
    assert tt_param_count(cfg.attention) == 12 * 12 + 12 * 8 * 20 + 20 * 8 * 20 \
        + 20 * 8 * 20 + 20 * 8 * 12 + 12 * 12


def test_paper_layer_forward_backward_against_dense():
    spec = get_config("paper-l1").attention            # 768 x 768, ranks 12/20
    rng = np.random.default_rng(13)
    cores = init_tt_cores(spec, rng, 0.02)
    x = rng.standard_normal((32, 768)).astype(np.float32)
    y, cache = tt_linear_forward(spec, cores, x)
    W = tt_to_dense(spec, cores)
    assert rel_err(y, x.astype(np.float64) @ W) < 1e-5
    dy = rng.standard_normal(y.shape).astype(np.float32)
    dx, _ = tt_linear_backward(spec, cores, cache, dy)
    assert rel_err(dx, dy.astype(np.float64) @ W.T) < 1e-5


def test_mixed_dtypes_compute_in_the_wider_one():
    spec = TT_SPECS["d2-unequal"]
    rng = np.random.default_rng(14)
    cores = init_tt_cores(spec, rng, 0.5, np.float64)
    x = rng.standard_normal((3, spec.n_in)).astype(np.float32)
    y, cache = tt_linear_forward(spec, cores, x)
    assert y.dtype == np.float64 and cache.dtype == np.float64
    np.testing.assert_allclose(y, x.astype(np.float64) @ tt_to_dense(spec, cores), rtol=1e-12)
    cores32 = [c.astype(np.float32) for c in cores]
    _, cache32 = tt_linear_forward(spec, cores32, x)
    dx, dcores = tt_linear_backward(spec, cores32, cache32, rng.standard_normal(y.shape))
    assert dx.dtype == np.float32 and all(g.dtype == np.float32 for g in dcores)


@pytest.mark.parametrize("spec", [*TT_SPECS.values(), get_config("paper-l1").ffn1],
                         ids=[*TT_SPECS.keys(), "paper-ffn1"])
def test_counted_macs_match_tt_linear_macs(spec, monkeypatch):
    rng = np.random.default_rng(15)
    cores = init_tt_cores(spec, rng, 0.5)
    x = rng.standard_normal((7, spec.n_in)).astype(np.float32)
    counter = CountingNumpy()
    monkeypatch.setattr(tt_module, "np", counter)
    y, cache = tt_linear_forward(spec, cores, x)
    fwd = counter.macs
    tt_linear_backward(spec, cores, cache, np.ones_like(y))
    macs = tt_linear_macs(spec, 7)
    assert fwd == macs["forward"]
    assert counter.macs - fwd == macs["backward"]


def test_tt_linear_macs_algorithms_md_examples():
    # algorithms.md section 2: 768x768, B=32 forward MACs for the two rank settings.
    att = get_config("paper-l1").attention
    assert tt_linear_macs(att, 32)["forward"] == 1_643_520
    assert tt_linear_macs(get_config("paper-l1-r10").attention, 32)["forward"] == 664_320
    assert tt_linear_macs(att, 32)["backward_data"] == 2 * 32 * 20 * (768 + 768)
    with pytest.raises(ValueError, match="batch must be a non-negative integer"):
        tt_linear_macs(att, 1.5)


# --------------------------------------------------------------------------------------------
# TTM embedding

@ttm_specs
def test_ttm_to_dense_matches_slice_products(spec):
    cores = init_ttm_cores(spec, np.random.default_rng(20), 1.0, np.float64)
    np.testing.assert_allclose(ttm_to_dense(spec, cores), naive_ttm_dense(spec, cores),
                               rtol=1e-12, atol=1e-14)


@ttm_specs
def test_token_digits_msd_first(spec):
    tokens = np.arange(spec.vocab).reshape(-1, 1)
    digits = token_digits(spec, tokens)
    assert digits.shape == (spec.vocab, 1, spec.d) and digits.dtype == np.int64
    ref = np.stack(np.unravel_index(np.arange(spec.vocab), spec.vocab_modes), axis=-1)
    np.testing.assert_array_equal(digits[:, 0, :], ref)


@ttm_specs
def test_ttm_lookup_equals_dense_rows(spec):
    rng = np.random.default_rng(21)
    cores = init_ttm_cores(spec, rng, 1.0, np.float64)
    tokens = rng.integers(0, spec.vocab, size=(3, 5))
    rows, cache = ttm_lookup(spec, cores, tokens)
    assert rows.shape == (3, 5, spec.dim) and isinstance(cache, TTMCache)
    np.testing.assert_allclose(rows, naive_ttm_dense(spec, cores)[tokens], rtol=1e-12,
                               atol=1e-14)
    rows32, _ = ttm_lookup(spec, [c.astype(np.float32) for c in cores], tokens)
    assert rows32.dtype == np.float32 and rel_err(rows32, rows) < 1e-6


@ttm_specs
def test_ttm_backward_finite_differences(spec):
    rng = np.random.default_rng(22)
    cores = init_ttm_cores(spec, rng, 1.0, np.float64)
    tokens = np.concatenate([rng.integers(0, spec.vocab, size=6), [0, 0, spec.vocab - 1]])
    rows, cache = ttm_lookup(spec, cores, tokens)
    Rm = rng.standard_normal(rows.shape)
    dcores = ttm_backward(spec, cores, cache, Rm)
    fd = central_fd(lambda c: float(np.sum(ttm_lookup(spec, c, tokens)[0] * Rm)), cores)
    for k, (g, ref) in enumerate(zip(dcores, fd)):
        assert rel_err(g, ref) <= 1e-6, f"core {k}"


@ttm_specs
def test_ttm_backward_matches_dense_table_gradient(spec):
    rng = np.random.default_rng(23)
    cores = init_ttm_cores(spec, rng, 1.0, np.float64)
    tokens = rng.integers(0, spec.vocab, size=(4, 6))
    rows, cache = ttm_lookup(spec, cores, tokens)
    drows = rng.standard_normal(rows.shape)
    dcores = ttm_backward(spec, cores, cache, drows)
    dtable = np.zeros((spec.vocab, spec.dim))
    np.add.at(dtable, tokens.reshape(-1), drows.reshape(-1, spec.dim))
    d = spec.d
    dfull = dtable.reshape(spec.vocab_modes + spec.dim_modes)
    ref = einsum_chain_grads(cores, [(k, d + k) for k in range(d)], dfull)
    for k, (g, r) in enumerate(zip(dcores, ref)):
        np.testing.assert_allclose(g, r, rtol=1e-11, atol=1e-12, err_msg=f"core {k}")


@pytest.mark.parametrize("seed", range(8))
def test_random_ttm_specs_against_dense(seed):
    rng = np.random.default_rng(200 + seed)
    d = int(rng.integers(1, 4))
    spec = TTMSpec(rng.integers(1, 5, size=d), rng.integers(1, 4, size=d),
                   [1, *rng.integers(1, 5, size=d - 1), 1])
    cores = init_ttm_cores(spec, rng, 1.0, np.float64)
    table = naive_ttm_dense(spec, cores)
    tokens = rng.integers(0, spec.vocab, size=(2, 5))
    drows = rng.standard_normal((2, 5, spec.dim))
    dtable = np.zeros_like(table)
    np.add.at(dtable, tokens.reshape(-1), drows.reshape(-1, spec.dim))
    ref = einsum_chain_grads(cores, [(k, d + k) for k in range(d)],
                             dtable.reshape(spec.vocab_modes + spec.dim_modes))
    for split in range(d + 1):
        rows, cache = ttm_lookup(spec, cores, tokens, split=split)
        np.testing.assert_allclose(rows, table[tokens], rtol=1e-12, atol=1e-13)
        for g, r in zip(ttm_backward(spec, cores, cache, drows), ref):
            np.testing.assert_allclose(g, r, rtol=1e-11, atol=1e-12)


def test_ttm_repeated_tokens_accumulate():
    spec = TTM_SPECS["d3"]
    rng = np.random.default_rng(24)
    cores = init_ttm_cores(spec, rng, 1.0, np.float64)
    drow = rng.standard_normal(spec.dim)
    _, c1 = ttm_lookup(spec, cores, [13])
    once = ttm_backward(spec, cores, c1, drow[None])
    rows, c5 = ttm_lookup(spec, cores, [13] * 5)
    np.testing.assert_array_equal(rows, np.repeat(rows[:1], 5, axis=0))
    five = ttm_backward(spec, cores, c5, np.repeat(drow[None], 5, axis=0))
    for a, b in zip(once, five):
        np.testing.assert_allclose(b, 5 * a, rtol=1e-13, atol=1e-15)


@ttm_specs
def test_ttm_sparse_gradients_only_used_slices(spec):
    rng = np.random.default_rng(25)
    cores = init_ttm_cores(spec, rng, 1.0, np.float64)
    tokens = rng.integers(0, spec.vocab, size=4)
    rows, cache = ttm_lookup(spec, cores, tokens)
    drows = rng.standard_normal(rows.shape)
    sparse = ttm_backward_sparse(spec, cores, cache, drows)
    dense = ttm_backward(spec, cores, cache, drows)
    digits = np.stack(np.unravel_index(tokens, spec.vocab_modes), axis=-1)
    for k, ((idx, grads), dc) in enumerate(zip(sparse, dense)):
        np.testing.assert_array_equal(idx, np.unique(digits[:, k]))
        r0, _, e, r1 = spec.core_shapes[k]
        assert grads.shape == (len(idx), r0, e, r1)
        np.testing.assert_array_equal(dc[:, idx], grads.transpose(1, 0, 2, 3))
        unused = np.setdiff1d(np.arange(spec.vocab_modes[k]), idx)
        assert not dc[:, unused].any()


def test_ttm_init_variance():
    # Same argument as test_init_dense_variance, for the table entries.
    spec, std, draws = TTM_SPECS["d3"], 0.5, 2000
    rng = np.random.default_rng(26)
    per_draw = np.array([np.mean(ttm_to_dense(spec, init_ttm_cores(spec, rng, std)) ** 2)
                         for _ in range(draws)])
    se = per_draw.std(ddof=1) / np.sqrt(draws)
    assert se < 0.05 * std ** 2
    assert abs(per_draw.mean() - std ** 2) < 5 * se
    assert ttm_init_std(spec, std) ** (2 * spec.d) * 6 == pytest.approx(std ** 2)


TTM_SPLIT_CASES = [(name, spec, m) for name, spec in TTM_SPECS.items()
                   for m in range(spec.d + 1)]
ttm_split_cases = pytest.mark.parametrize(
    "spec,split", [(spec, m) for _, spec, m in TTM_SPLIT_CASES],
    ids=[f"{name}-split{m}" for name, _, m in TTM_SPLIT_CASES])


@ttm_split_cases
def test_ttm_every_split_matches_dense_and_finite_differences(spec, split):
    rng = np.random.default_rng(29)
    cores = init_ttm_cores(spec, rng, 1.0, np.float64)
    tokens = np.concatenate([rng.integers(0, spec.vocab, size=5), [2, 2]])
    rows, cache = ttm_lookup(spec, cores, tokens, split=split)
    assert cache.split == split
    np.testing.assert_allclose(rows, naive_ttm_dense(spec, cores)[tokens], rtol=1e-12,
                               atol=1e-14)
    Rm = rng.standard_normal(rows.shape)
    dcores = ttm_backward(spec, cores, cache, Rm)
    fd = central_fd(lambda c: float(np.sum(ttm_lookup(spec, c, tokens)[0] * Rm)), cores)
    for k, (g, ref) in enumerate(zip(dcores, fd)):
        assert rel_err(g, ref) <= 1e-6, f"core {k}"


@ttm_split_cases
def test_ttm_counted_macs(spec, split, monkeypatch):
    rng = np.random.default_rng(28)
    cores = init_ttm_cores(spec, rng, 1.0)
    tokens = rng.integers(0, spec.vocab, size=9)
    n_unique = len(np.unique(tokens))
    counter = CountingNumpy()
    monkeypatch.setattr(tt_module, "np", counter)
    rows, cache = ttm_lookup(spec, cores, tokens, split=split)
    lookup = counter.macs
    ttm_backward_sparse(spec, cores, cache, np.ones_like(rows))
    macs = ttm_macs(spec, n_unique, split=split)
    assert (lookup, counter.macs - lookup) == (macs["lookup"], macs["backward"])


def test_ttm_default_split_is_cheapest():
    for spec in [*TTM_SPECS.values(), get_config("paper-l1").embedding]:
        best = ttm_macs(spec, 1)
        assert best == ttm_macs(spec, 1, split=best["split"])
        assert all(best["lookup"] <= ttm_macs(spec, 1, split=m)["lookup"]
                   for m in range(spec.d + 1))
    # paper embedding: meeting in the middle beats the plain left-to-right chain
    paper = get_config("paper-l1").embedding
    assert ttm_macs(paper, 1)["lookup"] < ttm_macs(paper, 1, split=paper.d)["lookup"]


@pytest.mark.parametrize("name", ["tiny", "small", "paper-l1", "paper-l1-r10"])
def test_macs_agree_with_planner(name):
    # golden.planner models orders independently; the flow implemented here must cost what it
    # predicts for the forward pass, and the TTM split must reach its DP-optimal bracketing.
    from ttrain.golden import planner
    cfg = get_config(name)
    for spec in (cfg.attention, cfg.ffn1, cfg.ffn2):
        plan = planner.plan_layer(spec, 32).orders["bidirectional"]
        assert tt_linear_macs(spec, 32)["forward"] == plan.forward_macs
    assert ttm_macs(cfg.embedding, 1)["lookup"] == \
        planner.ttm_cost(cfg.embedding, 1)["per_token_forward"]


def test_ttm_empty_tokens():
    spec = TTM_SPECS["d2"]
    cores = init_ttm_cores(spec, np.random.default_rng(27), 1.0)
    rows, cache = ttm_lookup(spec, cores, np.zeros((0,), dtype=np.int64))
    assert rows.shape == (0, spec.dim)
    dcores = ttm_backward(spec, cores, cache, np.zeros((0, spec.dim), np.float32))
    assert all(not g.any() for g in dcores)


# --------------------------------------------------------------------------------------------
# bad inputs

def _tt_setup():
    spec = TT_SPECS["d2-unequal"]
    rng = np.random.default_rng(30)
    cores = init_tt_cores(spec, rng, 0.5)
    x = rng.standard_normal((3, spec.n_in)).astype(np.float32)
    return spec, cores, x


def test_tt_rejects_bad_inputs():
    spec, cores, x = _tt_setup()
    with pytest.raises(TypeError, match="TTSpec"):
        tt_linear_forward(TTM_SPECS["d2"], cores, x)
    with pytest.raises(ValueError, match="expected 4 cores"):
        tt_linear_forward(spec, cores[:3], x)
    with pytest.raises(TypeError, match="list of arrays"):
        tt_linear_forward(spec, cores[0], x)
    bad = list(cores)
    bad[1] = bad[1][:, :, :2]
    with pytest.raises(ValueError, match=r"cores\[1\] has shape \(2, 3, 2\), expected \(2, 3, 3\)"):
        tt_linear_forward(spec, bad, x)
    bad = list(cores)
    bad[0] = bad[0].astype(np.int32)
    with pytest.raises(TypeError, match=r"cores\[0\] has dtype int32"):
        tt_linear_forward(spec, bad, x)
    with pytest.raises(ValueError, match="n_in = 6"):
        tt_linear_forward(spec, cores, x[:, :5])
    with pytest.raises(TypeError, match="x has dtype int64"):
        tt_linear_forward(spec, cores, np.ones((3, 6), dtype=np.int64))
    y, cache = tt_linear_forward(spec, cores, x)
    with pytest.raises(ValueError, match=r"dy has shape \(3, 19\), expected \(3, 20\)"):
        tt_linear_backward(spec, cores, cache, y[:, :19])
    with pytest.raises(TypeError, match="TTLinearCache"):
        tt_linear_backward(spec, cores, {"x": x}, y)
    other = TT_SPECS["d3-varied"]
    with pytest.raises(ValueError, match="pass the cache"):
        tt_linear_backward(other, init_tt_cores(other, np.random.default_rng(0), 1.0), cache,
                           np.zeros((3, other.n_out), np.float32))


def test_init_rejects_bad_arguments():
    spec = TT_SPECS["d1"]
    for std in (0, -1.0, float("nan"), "1"):
        with pytest.raises(ValueError, match="std must be a positive"):
            init_tt_cores(spec, np.random.default_rng(0), std)
    with pytest.raises(TypeError, match="numpy.random.Generator"):
        init_tt_cores(spec, 0, 1.0)
    with pytest.raises(TypeError, match="floating type"):
        init_tt_cores(spec, np.random.default_rng(0), 1.0, dtype=np.int32)
    with pytest.raises(ValueError, match="std must be a positive"):
        init_ttm_cores(TTM_SPECS["d1"], np.random.default_rng(0), 0.0)


def test_ttm_rejects_bad_inputs():
    spec = TTM_SPECS["d3"]
    cores = init_ttm_cores(spec, np.random.default_rng(31), 1.0)
    for bad in (-1, 24, 1000):
        with pytest.raises(ValueError, match=rf"token id {bad} is out of range.*\[0, 23\]"):
            ttm_lookup(spec, cores, np.array([0, bad, 3]))
        with pytest.raises(ValueError, match="out of range"):
            token_digits(spec, [bad])
    with pytest.raises(TypeError, match="integer array"):
        ttm_lookup(spec, cores, np.array([1.0, 2.0]))
    with pytest.raises(TypeError, match="TTMSpec"):
        ttm_lookup(TT_SPECS["d1"], cores, [1])
    with pytest.raises(ValueError, match="expected 3 cores"):
        ttm_lookup(spec, cores[:2], [1])
    bad = list(cores)
    bad[2] = np.zeros((2, 2, 3, 1), np.float32)
    with pytest.raises(ValueError, match=r"cores\[2\] has shape"):
        ttm_lookup(spec, bad, [1])
    rows, cache = ttm_lookup(spec, cores, [[1, 2], [3, 4]])
    with pytest.raises(ValueError, match=r"drows has shape \(4, 12\), expected \(2, 2, 12\)"):
        ttm_backward(spec, cores, cache, rows.reshape(4, 12))
    with pytest.raises(TypeError, match="TTMCache"):
        ttm_backward_sparse(spec, cores, None, rows)
    for split in (-1, 4, 1.0):
        with pytest.raises(ValueError, match=r"split must be an integer in 0\.\.3"):
            ttm_lookup(spec, cores, [1], split=split)
