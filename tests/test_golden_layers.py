"""Golden layers: every backward against float64 central finite differences, attention masking,
TT layers against their dense equivalents, dtype preservation."""

import math

import numpy as np
import pytest

from ttrain.golden import layers as L
from ttrain.golden import tt
from ttrain.golden.config import TTMSpec, TTSpec

H = 1e-5      # central-difference step (float64)
RTOL = 1e-6   # max relative error ||analytic - numeric|| / max(||analytic||, ||numeric||)


def numeric_grad(f, x, h=H, idx=None):
    """Central differences of scalar ``f()`` w.r.t. array ``x`` (modified in place, restored).

    ``idx``: optional list of flat indices to probe (others are returned as NaN)."""
    g = np.full(x.shape, np.nan)
    flat = x.reshape(-1)
    gflat = g.reshape(-1)
    for i in (range(flat.size) if idx is None else idx):
        old = flat[i]
        flat[i] = old + h
        fp = f()
        flat[i] = old - h
        fm = f()
        flat[i] = old
        gflat[i] = (fp - fm) / (2 * h)
    return g


def rel_err(a, b):
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    den = max(np.linalg.norm(a), np.linalg.norm(b))
    assert den > 0, "gradient is identically zero: the check would prove nothing"
    return np.linalg.norm(a - b) / den


def check_grads(forward, backward, inputs, rng, names=None, expect_zero=()):
    """Check ``backward(cache, R)`` against finite differences of ``sum(forward(*inputs) * R)``.

    ``backward`` must return one gradient per entry of ``inputs`` (lists flattened). Inputs named
    in ``expect_zero`` have a mathematically zero gradient: both sides must be ~0 instead."""
    out, cache = forward(*inputs)
    r = rng.standard_normal(out.shape)
    grads = backward(cache, r)

    def f():
        return float(np.sum(forward(*inputs)[0] * r))
    for i, (x, g) in enumerate(zip(inputs, grads)):
        assert g.shape == x.shape, (names or [])[i:i + 1]
        num = numeric_grad(f, x)
        if names and names[i] in expect_zero:
            assert np.abs(g).max() < 1e-12 and np.abs(num).max() < 1e-8, names[i]
            continue
        err = rel_err(g, num)
        assert err <= RTOL, f"input {(names or list(range(len(inputs))))[i]}: rel err {err:.2e}"


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def padding_mask(n, s, rng):
    """Real tokens first (position 0 always real), then padding; lengths vary."""
    lengths = rng.integers(1, s + 1, size=n)
    lengths[0] = s            # one full sequence
    lengths[-1] = max(1, s // 2)  # one with padding
    return np.arange(s)[None, :] < lengths[:, None]


# ------------------------------------------------------------------------------------ dense

def test_linear_grads(rng):
    x = rng.standard_normal((2, 3, 4))
    w = rng.standard_normal((4, 5))
    b = rng.standard_normal(5)
    check_grads(L.linear_forward, L.linear_backward, [x, w, b], rng, ["x", "w", "b"])


def test_linear_matches_loop(rng):
    x = rng.standard_normal((2, 3, 4))
    w = rng.standard_normal((4, 5))
    b = rng.standard_normal(5)
    y, _ = L.linear_forward(x, w, b)
    for i in range(2):
        for j in range(3):
            for o in range(5):
                ref = b[o] + sum(x[i, j, k] * w[k, o] for k in range(4))
                assert y[i, j, o] == pytest.approx(ref, rel=1e-12, abs=1e-12)


def test_linear_rejects_bad_shapes(rng):
    with pytest.raises(ValueError, match="linear shapes"):
        L.linear_forward(np.zeros((2, 4)), np.zeros((5, 3)), np.zeros(3))


def test_embedding_grads_with_repeats(rng):
    table = rng.standard_normal((5, 4))
    ids = np.array([[0, 3, 3], [4, 0, 3]])

    def fwd(t):
        return L.embedding_forward(t, ids)

    def bwd(cache, d):
        return (L.embedding_backward(cache, d),)
    check_grads(fwd, bwd, [table], rng)


def test_embedding_rejects_out_of_range():
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 5\)"):
        L.embedding_forward(np.zeros((5, 2)), np.array([0, 5]))


# ------------------------------------------------------------------------------ element-wise

@pytest.mark.parametrize("eps", [1e-12, 1e-5])
def test_layernorm_grads(rng, eps):
    x = rng.standard_normal((2, 3, 6)) * 3 + 1
    gamma = rng.standard_normal(6)
    beta = rng.standard_normal(6)

    def fwd(x, g, b):
        return L.layernorm_forward(x, g, b, eps)
    check_grads(fwd, L.layernorm_backward, [x, gamma, beta], rng, ["x", "gamma", "beta"])


def test_layernorm_matches_formula(rng):
    x = rng.standard_normal((3, 5))
    gamma = rng.standard_normal(5)
    beta = rng.standard_normal(5)
    y, _ = L.layernorm_forward(x, gamma, beta, 1e-5)
    for i in range(3):
        row = list(x[i])
        mu = sum(row) / 5
        var = sum((v - mu) ** 2 for v in row) / 5
        for j in range(5):
            ref = (row[j] - mu) / math.sqrt(var + 1e-5) * gamma[j] + beta[j]
            assert y[i, j] == pytest.approx(ref, rel=1e-12, abs=1e-12)


def test_gelu_grads_and_form(rng):
    x = np.linspace(-5, 5, 23).reshape(1, 23) + rng.standard_normal((2, 23)) * 0.1

    def bwd(cache, d):
        return (L.gelu_backward(cache, d),)
    check_grads(L.gelu_forward, bwd, [x], rng)
    y, _ = L.gelu_forward(x)
    for v, got in zip(x.ravel(), y.ravel()):
        ref = 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))
        assert got == pytest.approx(ref, rel=1e-12, abs=1e-15)
        # the tanh form stays within 1e-3 of the exact erf GELU
        assert abs(got - 0.5 * v * (1 + math.erf(v / math.sqrt(2)))) < 1e-3


def test_tanh_grads(rng):
    x = rng.standard_normal((3, 4)) * 2

    def bwd(cache, d):
        return (L.tanh_backward(cache, d),)
    check_grads(L.tanh_forward, bwd, [x], rng)


def test_residual_grads(rng):
    a = rng.standard_normal((2, 3))
    b = rng.standard_normal((2, 3))
    check_grads(L.residual_forward, L.residual_backward, [a, b], rng)
    with pytest.raises(ValueError, match="same shape"):
        L.residual_forward(a, b[:1])


# --------------------------------------------------------------------------------- attention

def naive_attention(q, k, v, mask, n_heads):
    """Loop reference: softmax over the real keys only (no additive mask at all)."""
    n, s, d = q.shape
    dh = d // n_heads
    out = np.zeros_like(q)
    for b in range(n):
        keys = [j for j in range(s) if mask[b, j]]
        for h in range(n_heads):
            cols = slice(h * dh, (h + 1) * dh)
            for i in range(s):
                sc = [float(q[b, i, cols] @ k[b, j, cols]) / math.sqrt(dh) for j in keys]
                m = max(sc)
                w = [math.exp(c - m) for c in sc]
                tot = sum(w)
                out[b, i, cols] = sum(wj / tot * v[b, j, cols] for wj, j in zip(w, keys))
    return out


def test_attention_matches_naive(rng):
    n, s, d, h = 3, 5, 6, 2
    q, k, v = (rng.standard_normal((n, s, d)) for _ in range(3))
    mask = padding_mask(n, s, rng)
    a, _ = L.attention_forward(q, k, v, mask, h)
    np.testing.assert_allclose(a, naive_attention(q, k, v, mask, h), rtol=1e-12, atol=1e-12)


def test_attention_grads(rng):
    n, s, d, h = 2, 5, 6, 3
    q, k, v = (rng.standard_normal((n, s, d)) for _ in range(3))
    mask = padding_mask(n, s, rng)
    assert not mask.all()

    def fwd(q, k, v):
        return L.attention_forward(q, k, v, mask, h)
    check_grads(fwd, L.attention_backward, [q, k, v], rng, ["q", "k", "v"])


def test_attention_masked_keys_have_no_influence(rng):
    n, s, d, h = 3, 6, 8, 2
    q, k, v = (rng.standard_normal((n, s, d)) for _ in range(3))
    mask = padding_mask(n, s, rng)
    a, cache = L.attention_forward(q, k, v, mask, h)
    k2, v2 = k.copy(), v.copy()
    k2[~mask] = rng.standard_normal(k2[~mask].shape) * 100
    v2[~mask] = rng.standard_normal(v2[~mask].shape) * 100
    a2, _ = L.attention_forward(q, k2, v2, mask, h)
    np.testing.assert_array_equal(a2, a)   # exactly: padded keys get weight exactly 0
    # and they receive exactly zero gradient
    _, dk, dv = L.attention_backward(cache, rng.standard_normal(a.shape))
    assert not dk[~mask].any() and not dv[~mask].any()
    assert dk[mask].any() and dv[mask].any()


def test_attention_rejects_bad_input(rng):
    q = np.zeros((1, 4, 6))
    with pytest.raises(ValueError, match="n_heads"):
        L.attention_forward(q, q, q, np.ones((1, 4), bool), 4)
    with pytest.raises(ValueError, match="bool array of shape"):
        L.attention_forward(q, q, q, np.ones((1, 3), bool), 2)
    with pytest.raises(ValueError, match="at least one real"):
        L.attention_forward(q, q, q, np.zeros((1, 4), bool), 2)


# ------------------------------------------------------------------------------------- loss

def test_cross_entropy_value_and_grads(rng):
    logits = rng.standard_normal((3, 4, 5)) * 2
    labels = rng.integers(0, 5, size=(3, 4))
    labels[0, 1] = labels[2, 3] = L.IGNORE_INDEX
    loss, _ = L.cross_entropy_forward(logits, labels)
    terms = []
    for idx in np.ndindex(3, 4):
        if labels[idx] >= 0:
            row = logits[idx]
            terms.append(-(row[labels[idx]] - math.log(sum(math.exp(t) for t in row))))
    assert float(loss) == pytest.approx(sum(terms) / len(terms), rel=1e-12)

    def fwd(z):
        out, cache = L.cross_entropy_forward(z, labels)
        return np.asarray(out), cache

    def bwd(cache, d):
        return (L.cross_entropy_backward(cache, float(d)),)
    check_grads(fwd, bwd, [logits], rng)
    g = L.cross_entropy_backward(L.cross_entropy_forward(logits, labels)[1])
    assert not g[0, 1].any() and not g[2, 3].any()


def test_cross_entropy_all_ignored_and_bad_labels():
    logits = np.ones((2, 3))
    loss, cache = L.cross_entropy_forward(logits, np.array([-1, -1]))
    assert loss == 0 and not L.cross_entropy_backward(cache).any()
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\)"):
        L.cross_entropy_forward(logits, np.array([0, 3]))
    with pytest.raises(ValueError, match="labels shape"):
        L.cross_entropy_forward(logits, np.array([0, 1, 2]))
    with pytest.raises(TypeError, match="integers"):
        L.cross_entropy_forward(logits, np.array([0.0, 1.0]))


# ------------------------------------------------------------------------------- TT layers

TT_SPEC = TTSpec((2, 3), (3, 2), (1, 2, 3, 2, 1))     # 6 x 6
TTM_SPEC = TTMSpec((3, 4), (2, 3), (1, 3, 1))          # 12 rows x 6


def tt_cores(spec, rng, dtype=np.float64):
    return tt.init_tt_cores(spec, rng, 0.5, dtype=dtype)


def test_tt_linear_bias_matches_dense(rng):
    cores = tt_cores(TT_SPEC, rng)
    bias = rng.standard_normal(6)
    x = rng.standard_normal((2, 3, 6))
    y, _ = L.tt_linear_bias_forward(TT_SPEC, cores, bias, x)
    w = tt.tt_to_dense(TT_SPEC, cores)
    np.testing.assert_allclose(y, x @ w + bias, rtol=1e-12, atol=1e-12)


def test_tt_linear_bias_grads(rng):
    cores = tt_cores(TT_SPEC, rng)
    bias = rng.standard_normal(6)
    x = rng.standard_normal((2, 3, 6))

    def fwd(x, b, *cs):
        return L.tt_linear_bias_forward(TT_SPEC, list(cs), b, x)

    def bwd(cache, d):
        dx, dcores, db = L.tt_linear_bias_backward(cache, d)
        return [dx, db, *dcores]
    check_grads(fwd, bwd, [x, bias, *cores], rng,
                ["x", "bias"] + [f"core{k}" for k in range(len(cores))])


def test_ttm_embedding_matches_dense_and_grads(rng):
    cores = tt.init_ttm_cores(TTM_SPEC, rng, 0.5, dtype=np.float64)
    tokens = np.array([[0, 11, 5, 5], [7, 0, 3, 11]])
    rows, _ = L.ttm_embedding_forward(TTM_SPEC, cores, tokens)
    table = tt.ttm_to_dense(TTM_SPEC, cores)
    np.testing.assert_allclose(rows, table[tokens], rtol=1e-12, atol=1e-12)

    def fwd(*cs):
        return L.ttm_embedding_forward(TTM_SPEC, list(cs), tokens)

    def bwd(cache, d):
        return L.ttm_embedding_backward(cache, d)
    check_grads(fwd, bwd, list(cores), rng)


def test_mha_grads(rng):
    n, s, h = 2, 4, 2
    proj = {name: (tt_cores(TT_SPEC, rng), rng.standard_normal(6) * 0.1)
            for name in ("q", "k", "v", "o")}
    x = rng.standard_normal((n, s, 6))
    mask = padding_mask(n, s, rng)
    names = ["x"]
    arrays = [x]
    for name in ("q", "k", "v", "o"):
        cores, bias = proj[name]
        arrays += [bias, *cores]
        names += [f"{name}.bias"] + [f"{name}.core{k}" for k in range(len(cores))]

    def fwd(*arrs):
        return L.mha_forward(TT_SPEC, proj, arrs[0], mask, h)

    def bwd(cache, d):
        dx, grads = L.mha_backward(cache, d)
        out = [dx]
        for name in ("q", "k", "v", "o"):
            dcores, dbias = grads[name]
            out += [dbias, *dcores]
        return out
    # proj holds the very arrays in `arrays`, so perturbing them in place perturbs the layer.
    # A key bias shifts every score of a query row by the same q.b: softmax ignores it.
    check_grads(fwd, bwd, arrays, rng, names, expect_zero=["k.bias"])


@pytest.mark.parametrize("trailing_padding", [False, True])
def test_mha_packed_equals_full_at_real_tokens_and_grads(rng, trailing_padding):
    n, s, h = 3, 5, 2
    proj = {name: (tt_cores(TT_SPEC, rng), rng.standard_normal(6) * 0.1)
            for name in ("q", "k", "v", "o")}
    mask = padding_mask(n, s, rng)
    if trailing_padding:          # the last positions are padding everywhere: grid is trimmed
        mask[:, 3:] = False
        mask[1, 1] = False        # and a hole in the middle of one sequence
    x = rng.standard_normal((n, s, 6))
    y_full, c_full = L.mha_forward(TT_SPEC, proj, x, mask, h)
    xp = x[mask]
    y_packed, c_packed = L.mha_forward(TT_SPEC, proj, xp, mask, h, packed=True)
    np.testing.assert_allclose(y_packed, y_full[mask], rtol=1e-12, atol=1e-12)
    dy = rng.standard_normal(y_full.shape)
    dy[~mask] = 0                 # what the packed form sees: nothing flows into padded rows
    dx_full, g_full = L.mha_backward(c_full, dy)
    dx_packed, g_packed = L.mha_backward(c_packed, dy[mask])
    np.testing.assert_allclose(dx_packed, dx_full[mask], rtol=1e-10, atol=1e-12)
    for name in "qkvo":
        for a, b in zip([*g_full[name][0], g_full[name][1]], [*g_packed[name][0],
                                                              g_packed[name][1]]):
            np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12)

    def fwd(xp):
        return L.mha_forward(TT_SPEC, proj, xp, mask, h, packed=True)

    def bwd(cache, d):
        return (L.mha_backward(cache, d)[0],)
    check_grads(fwd, bwd, [xp], rng)
    with pytest.raises(ValueError, match="one row per real token"):
        L.mha_forward(TT_SPEC, proj, x.reshape(-1, 6), mask, h, packed=True)
    with pytest.raises(ValueError, match=r"shape \(n, S, D\)"):
        L.mha_forward(TT_SPEC, proj, xp, mask, h)


@pytest.mark.parametrize("name", ["linear", "layernorm", "gelu", "tanh", "attention",
                                  "tt_linear", "ttm", "cross_entropy", "mha"])
def test_float32_stays_float32(rng, name):
    f = np.float32
    x = rng.standard_normal((2, 4, 6)).astype(f)
    mask = np.array([[True] * 4, [True, True, False, False]])
    if name == "linear":
        out, c = L.linear_forward(x, rng.standard_normal((6, 3)).astype(f), np.zeros(3, f))
        grads = L.linear_backward(c, out)
    elif name == "layernorm":
        out, c = L.layernorm_forward(x, np.ones(6, f), np.zeros(6, f), 1e-12)
        grads = L.layernorm_backward(c, out)
    elif name == "gelu":
        out, c = L.gelu_forward(x)
        grads = [L.gelu_backward(c, out)]
    elif name == "tanh":
        out, c = L.tanh_forward(x)
        grads = [L.tanh_backward(c, out)]
    elif name == "attention":
        out, c = L.attention_forward(x, x, x, mask, 2)
        grads = L.attention_backward(c, out)
    elif name == "tt_linear":
        cores = tt_cores(TT_SPEC, rng, f)
        out, c = L.tt_linear_bias_forward(TT_SPEC, cores, np.zeros(6, f), x)
        dx, dcores, db = L.tt_linear_bias_backward(c, out)
        grads = [dx, db, *dcores]
    elif name == "ttm":
        cores = tt.init_ttm_cores(TTM_SPEC, rng, 0.5, dtype=f)
        out, c = L.ttm_embedding_forward(TTM_SPEC, cores, np.array([[1, 2], [3, 11]]))
        grads = L.ttm_embedding_backward(c, out)
    elif name == "cross_entropy":
        loss, c = L.cross_entropy_forward(x, np.zeros((2, 4), np.int64))
        out = np.asarray(loss)
        grads = [L.cross_entropy_backward(c)]
    else:
        proj = {p: (tt_cores(TT_SPEC, rng, f), np.zeros(6, f)) for p in "qkvo"}
        out, c = L.mha_forward(TT_SPEC, proj, x, mask, 2)
        dx, g = L.mha_backward(c, out)
        grads = [dx] + [a for p in "qkvo" for a in (*g[p][0], g[p][1])]
    assert out.dtype == f
    for g in grads:
        assert g.dtype == f
