"""Low-rank training in golden: the fixed Jacobi SVD against numpy, rankReduce against the exact
sum (biased: exact on low-rank sums and the best rank-r truncation per step; unbiased: the
mean over seeds converges to the sum), the 16-bit bases, max-norm and streaming batch norm
against their formulas, the 1%-nonzero write rule, the write counters, the fixed-point model,
the digits-drift stream and the reproducibility of an online run."""

import dataclasses

import numpy as np
import pytest

from ttrain.golden import drift, lrt, lrt_model, lrt_online, qnn, special, svd


# --------------------------------------------------------------------------------------------
# Jacobi SVD
# --------------------------------------------------------------------------------------------

#: Stated tolerance of the fixed sequence (docs/lrt.md has the measured figures): singular
#: values within 2e-6 of the largest one, reconstruction within 2e-6 (relative, Frobenius).
SVD_TOL = 2e-6


def test_fast_ops_match_the_special_unit_bit_for_bit():
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(20000) * np.exp(rng.standard_normal(20000) * 15)).astype(np.float32)
    words = rng.integers(0, 1 << 32, 20000, dtype=np.uint64).astype(np.uint32)
    edge = np.array([0.0, -0.0, np.inf, -np.inf, 1e-45, -1e-45, 1.1754942e-38, 3.4028235e38],
                    np.float32)
    x = np.concatenate([x, words.view(np.float32), edge])
    for fast, ref in ((svd.fp32_rsqrt_fast, special.fp32_rsqrt),
                      (svd.fp32_recip_fast, special.fp32_recip)):
        got, want = fast(x), ref(x)
        nan = np.isnan(want)
        np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))
        assert np.isnan(got[nan]).all()


def test_fast_ops_constant_cache_does_not_grow_with_calls():
    """The cached constants are keyed by bits: the NaN constant of recip/rsqrt once, not once
    per call (the leak took 5 GB over a 3,000-sample conv LRT run)."""
    x = np.float32([0.5, 3.0, 0.0])
    svd.fp32_recip_fast(x), svd.fp32_rsqrt_fast(x)
    size = len(svd.FastOps._consts)
    for _ in range(50):
        svd.fp32_recip_fast(x), svd.fp32_rsqrt_fast(x)
    assert len(svd.FastOps._consts) == size


def test_pivot_schedule_visits_every_pair_once_in_disjoint_rounds():
    for q in range(2, 9):
        rounds = svd.pivot_schedule(q)
        pairs = [p for rnd in rounds for p in rnd]
        assert sorted(pairs) == [(i, j) for i in range(q) for j in range(i + 1, q)]
        for rnd in rounds:
            cols = [c for p in rnd for c in p]
            assert len(cols) == len(set(cols))


def test_jacobi_svd_matches_numpy_on_random_and_ill_conditioned_matrices():
    report = svd.accuracy_report(n=300, seed=1)
    assert set(report) == {"random", "cond1e3", "cond1e6", "rank1plus"}
    for fam, r in report.items():
        assert r["sigma_rel_max"] < SVD_TOL, fam
        assert r["recon_max"] < SVD_TOL, fam


def test_jacobi_svd_factors_are_sorted_and_orthogonal():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((50, 5, 5)).astype(np.float32)
    U, s, V = svd.jacobi_svd(a)
    assert np.all(np.diff(s, axis=-1) <= 0) and np.all(s >= 0)
    eye = np.eye(5)
    assert np.abs(np.swapaxes(V, -1, -2) @ V - eye).max() < 1e-5
    assert np.abs(np.swapaxes(U, -1, -2) @ U - eye).max() < 1e-4
    # Rank-deficient input: zero singular values come with zero left columns, no NaN.
    u = rng.standard_normal((5, 1)).astype(np.float32)
    U1, s1, V1 = svd.jacobi_svd(u @ u.T)
    assert np.all(np.isfinite(U1)) and np.all(np.isfinite(V1))
    assert s1[0] == pytest.approx(float((u.T @ u).item()), rel=1e-5)
    assert np.all(s1[1:] < 1e-5 * s1[0])


def test_jacobi_svd_batch_is_bit_identical_to_one_matrix_at_a_time():
    # The online loop factors every layer's core in one batched call; each must get exactly
    # the bits of its own sequence (what a chip program computes per layer).
    rng = np.random.default_rng(15)
    a = rng.standard_normal((6, 5, 5)).astype(np.float32)
    a[2, :, 3] = 0                                     # a rank-deficient member
    U, s, V = svd.jacobi_svd(a)
    for i in range(len(a)):
        u1, s1, v1 = svd.jacobi_svd(a[i])
        for x, y in ((U[i], u1), (s[i], s1), (V[i], v1)):
            np.testing.assert_array_equal(x.view(np.uint32), y.view(np.uint32))


def test_jacobi_svd_rejects_bad_input():
    with pytest.raises(ValueError, match="square"):
        svd.jacobi_svd(np.zeros((3, 4), np.float32))
    with pytest.raises(ValueError, match="NaN"):
        svd.jacobi_svd(np.full((3, 3), np.nan, np.float32))


# --------------------------------------------------------------------------------------------
# rankReduce
# --------------------------------------------------------------------------------------------

def _stream(rng, n, n_o, n_i, rank=None):
    """Random outer products; with ``rank`` the dz and a lie in fixed ``rank``-dim subspaces."""
    if rank is None:
        dz = rng.standard_normal((n, n_o))
        a = rng.standard_normal((n, n_i))
    else:
        dz = rng.standard_normal((n, rank)) @ rng.standard_normal((rank, n_o))
        a = rng.standard_normal((n, rank)) @ rng.standard_normal((rank, n_i))
    return dz.astype(np.float32), a.astype(np.float32)


def _accumulate(dz, a, rank, variant="biased", seeds=None, kappa=np.inf, batch=()):
    st = lrt.new_state(dz.shape[-1], a.shape[-1], rank, batch)
    for t in range(dz.shape[0]):
        sd = None if seeds is None else lrt.sign_seed(seeds, 0, t)
        st = lrt.rank_reduce(st, dz[t], a[t], variant, sd, kappa)
    L, R = lrt.factors(st)
    return st, L.astype(np.float64) @ np.swapaxes(R, -1, -2).astype(np.float64)


def _rel(x, y):
    return float(np.linalg.norm(x - y) / np.linalg.norm(y))


@pytest.mark.parametrize("variant", lrt.VARIANTS)
def test_rank_reduce_is_exact_when_the_sum_has_rank_at_most_r(variant):
    rng = np.random.default_rng(4)
    dz, a = _stream(rng, 30, 12, 9, rank=2)
    exact = dz.T.astype(np.float64) @ a.astype(np.float64)
    _, approx = _accumulate(dz, a, 4, variant, seeds=np.uint32(7))
    # 16-bit bases: a few parts in 10^5 per step.
    assert _rel(approx, exact) < 2e-3


def test_biased_step_is_the_best_rank_r_truncation():
    rng = np.random.default_rng(5)
    for trial in range(5):
        dz, a = _stream(rng, 8, 10, 7)
        st, before = _accumulate(dz[:-1], a[:-1], 3)
        full = before + dz[-1:].T.astype(np.float64) @ a[-1:].astype(np.float64)
        st2 = lrt.rank_reduce(st, dz[-1], a[-1], "biased", None, np.inf)
        L, R = lrt.factors(st2)
        got = L.astype(np.float64) @ R.T.astype(np.float64)
        u, s, vt = np.linalg.svd(full)
        best = (u[:, :3] * s[:3]) @ vt[:3]
        assert _rel(got, best) < 1e-3
        # Eckart-Young: nothing of rank 3 is closer to the running sum.
        assert np.linalg.norm(got - full) >= np.linalg.norm(best - full) * (1 - 1e-3)


def test_biased_error_is_bounded_by_the_discarded_tail():
    # A rank-2 signal plus a small rank-full perturbation: the biased estimate's error stays
    # at the level of the perturbation's total, far below the signal.
    rng = np.random.default_rng(6)
    dz, a = _stream(rng, 40, 10, 8, rank=2)
    ndz, na = _stream(rng, 40, 10, 8)
    dz = dz + np.float32(1e-2) * ndz
    a = a + np.float32(1e-2) * na
    exact = dz.T.astype(np.float64) @ a.astype(np.float64)
    _, approx = _accumulate(dz, a, 4)
    noise = sum(np.linalg.norm(np.outer(dz[t], a[t]) - np.outer(dz[t] - 1e-2 * ndz[t],
                                                                a[t] - 1e-2 * na[t]))
                for t in range(40))
    assert np.linalg.norm(approx - exact) <= noise
    assert _rel(approx, exact) < 0.05


def test_unbiased_mean_over_seeds_converges_to_the_exact_sum():
    rng = np.random.default_rng(8)
    dz, a = _stream(rng, 6, 5, 6)
    exact = dz.T.astype(np.float64) @ a.astype(np.float64)
    n = 512
    seeds = np.arange(n, dtype=np.uint32)
    _, est = _accumulate(np.broadcast_to(dz[:, None], (6, n, 5)),
                         np.broadcast_to(a[:, None], (6, n, 6)), 2, "unbiased", seeds,
                         batch=(n,))
    mean = est.mean(axis=0)
    stderr = np.sqrt((est.var(axis=0) / n).sum())
    assert np.linalg.norm(mean - exact) < 4 * stderr
    # The estimates really vary (signs drawn per seed), and the biased rule is off by much more.
    assert stderr > 0
    _, biased = _accumulate(dz, a, 2)
    assert np.linalg.norm(biased - exact) > 4 * np.linalg.norm(mean - exact)
    # Different seeds of one run differ; the same seed reproduces bit for bit.
    _, again = _accumulate(np.broadcast_to(dz[:, None], (6, n, 5)),
                           np.broadcast_to(a[:, None], (6, n, 6)), 2, "unbiased", seeds,
                           batch=(n,))
    np.testing.assert_array_equal(again, est)


def test_condition_check_skips_the_sample_and_keeps_the_state():
    rng = np.random.default_rng(9)
    dz, a = _stream(rng, 3, 6, 5)
    st, _ = _accumulate(dz, a, 2)
    # A sample almost inside the bases: tiny residual, so cx[0] > kappa * c_Lq * c_Rq.
    QL = lrt.dequantize_basis(st.ql, st.sl)
    QR = lrt.dequantize_basis(st.qr, st.sr)
    new = lrt.rank_reduce(st, QL[:, 0] * 1e-3, QR[:, 0] * 1e-3, "biased", None, 100.0)
    assert int(new.skipped) == int(st.skipped) + 1 and int(new.fed) == int(st.fed) + 1
    for f in ("ql", "sl", "qr", "sr", "cx"):
        np.testing.assert_array_equal(getattr(new, f), getattr(st, f))
    proj = lrt.project(st, QL[:, 0] * 1e-3, QR[:, 0] * 1e-3, 100.0)
    assert st.cx[0] > 100.0 * proj.cl[-1] * proj.cr[-1]
    # Without the check the same sample is taken.
    taken = lrt.rank_reduce(st, QL[:, 0] * 1e-3, QR[:, 0] * 1e-3, "biased", None, np.inf)
    assert int(taken.skipped) == int(st.skipped)


def test_conv_pixels_feed_one_rank_reduce_each():
    rng = np.random.default_rng(10)
    dz, a = _stream(rng, 16, 8, 9, rank=2)           # 16 pixels of one image
    st = lrt.feed_pixels(lrt.new_state(8, 9, 4), dz, a, kappa=np.inf)
    assert int(st.fed) == 16
    L, R = lrt.factors(st)
    assert _rel(L.astype(np.float64) @ R.T, dz.T.astype(np.float64) @ a) < 2e-3


def test_basis_quantization_is_16_bit_with_a_max_abs_step():
    rng = np.random.default_rng(11)
    Q = rng.standard_normal((7, 3)).astype(np.float32)
    q16, step = lrt.quantize_basis(Q)
    assert q16.min() >= -32767 and q16.max() <= 32767 and np.abs(q16).max() == 32767
    assert step == np.float32(np.abs(Q).max() * 2.0 ** -15)
    back = lrt.dequantize_basis(q16, step)
    err = np.abs(back - Q)
    top = np.abs(Q) == np.abs(Q).max()
    assert err[~top].max() <= 0.5 * step * 1.001        # rounding to nearest
    assert err[top].max() <= step * 1.001                # the saturated largest entry
    z16, zstep = lrt.quantize_basis(np.zeros((4, 2), np.float32))
    assert zstep == 0 and not z16.any()


# --------------------------------------------------------------------------------------------
# Max-norm, streaming batch norm, write rule, counters
# --------------------------------------------------------------------------------------------

def test_max_norm_follows_its_formula():
    rng = np.random.default_rng(12)
    mn = lrt.MaxNorm()
    beta, eps, x_mv = 0.999, 1e-4, 1e-4
    for k in range(1, 60):
        x = (rng.standard_normal((6, 4)) * rng.uniform(0.01, 10)).astype(np.float32)
        got = mn(x)
        x_max = np.abs(x).max() + eps
        x_mv = beta * x_mv + (1 - beta) * x_max
        x_hat = x_mv / (1 - beta ** k)
        want = x / max(x_max, x_hat)
        # FP32 state: 1 - beta**k cancels (beta**k is a running product), so a few 1e-5.
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-7)
        assert np.abs(got).max() <= 1.0


def test_streaming_batch_norm_follows_its_formula():
    rng = np.random.default_rng(13)
    B = 10
    bn = lrt.StreamingBatchNorm(3, B)
    eta, mu_s, sq_s = 1 - 1 / B, np.zeros(3), np.zeros(3)
    for step in range(1, 40):
        x = rng.uniform(0, 2, (16, 3)).astype(np.float32)      # 16 pixels, 3 channels
        got = bn.update(x)
        mu_i, var_i = x.mean(0), x.var(0)
        mu_s = eta * mu_s + (1 - eta) * mu_i
        sq_s = eta * sq_s + (1 - eta) * (var_i + mu_i ** 2)
        c = 1 - eta ** step
        mu = mu_s / c
        var = sq_s / c - mu ** 2
        want = (x - mu) / np.sqrt(var + 1e-5)
        mu_got, var_got = bn.statistics()
        # 16-bit storage of the statistics (LSB 2**-12), amplified by the bias correction.
        tol = 4 * 2.0 ** -12 / c
        np.testing.assert_allclose(mu_got, mu, atol=tol)
        np.testing.assert_allclose(var_got, var, atol=3 * tol)
        np.testing.assert_allclose(got, want, atol=0.05, rtol=0.05)
    # A dense layer (one value per channel): the sample's variance is 0.
    dense = lrt.StreamingBatchNorm(2, 4)
    dense.update(np.array([1.0, 0.5], np.float32))
    mu, var = dense.statistics()
    np.testing.assert_allclose(mu, [1.0, 0.5], atol=2.0 ** -10)
    np.testing.assert_allclose(var, [0.0, 0.0], atol=2.0 ** -9)


def test_write_rule_needs_one_percent_nonzero_and_counts_changed_cells():
    w = np.zeros((10, 30), np.int64)
    w[0, 0] = -128
    counter = lrt.WriteCounter.of_shape(w.shape)
    delta = np.zeros_like(w)
    delta[0, :2] = 1                                   # 2 of 300 < 1%: kept back
    new, written = lrt.write_weights(w, delta, counter)
    assert not written and new is w and counter.summary()["max"] == 0
    delta[1, :3] = -1                                  # 5 of 300 >= 1%: written
    new, written = lrt.write_weights(w, delta, counter)
    assert written
    assert new[0, 0] == -128                           # saturated: value kept, no write
    assert new[0, 1] == -1 and new[1, 0] == 1
    s = counter.summary()
    assert s["max"] == 1 and s["mean"] == pytest.approx(4 / 300)
    assert s["histogram"] == [296, 4] and s["cells"] == 300
    lrt.write_weights(new, delta, counter)
    assert counter.summary()["histogram"] == [296, 0, 4]


def test_write_counter_histogram_max_and_mean():
    c = lrt.WriteCounter.of_shape((2, 3))
    c.record(np.zeros((2, 3)), np.array([[1, 0, 1], [0, 0, 1]]))
    c.record(np.zeros((2, 3)), np.array([[1, 0, 0], [0, 0, 0]]))
    s = c.summary()
    assert s == {"max": 2, "mean": pytest.approx(4 / 6), "histogram": [3, 2, 1], "cells": 6}


# --------------------------------------------------------------------------------------------
# Fixed-point model, stream, online runs
# --------------------------------------------------------------------------------------------

def test_fixed_point_forward_matches_a_python_reference():
    rng = np.random.default_rng(14)
    model = lrt_model.FixedMLP([rng.integers(-128, 128, (6, 5)), rng.integers(-128, 128, (3, 6))],
                               [rng.integers(-3000, 3000, 6), rng.integers(-3000, 3000, 3)])
    x = rng.integers(0, 256, (4, 5))
    acts, logits = model.forward(x)
    for n in range(4):
        h = []
        for o in range(6):
            acc = sum(int(model.w[0][o, i]) * int(x[n, i]) for i in range(5))
            acc += 4 * int(model.b[0][o])
            h.append(min(max((acc + 64) >> 7, 0), 255))
        assert acts[1][n].tolist() == h
        for o in range(3):
            acc = sum(int(model.w[1][o, i]) * h[i] for i in range(6)) + 4 * int(model.b[1][o])
            assert logits[n, o] == np.float32(acc * 2.0 ** -14)
    g = model.backward(acts, logits, [0, 1, 2, 0])
    assert g[1].min() >= -128 and g[1].max() <= 127
    assert np.all(g[0][(acts[1] == 0) | (acts[1] == 255)] == 0)


def test_drift_stream_is_seeded_and_ramps():
    s = drift.make_stream(3, segments=2, segment_len=200, ramp=100)
    again = drift.make_stream(3, segments=2, segment_len=200, ramp=100)
    np.testing.assert_array_equal(s.images, again.images)
    np.testing.assert_array_equal(s.source, again.source)
    assert len(s) == 400 and len(s.corruptions) == 2 and len(set(s.corruptions)) == 2
    # Segment 1: the share of its corruption grows through the ramp, then is total.
    seg = s.source[200:]
    assert (seg[:50] == 1).mean() < (seg[50:100] == 1).mean() and np.all(seg[100:] == 1)
    assert set(np.unique(s.source[:200])) <= {-1, 0}
    assert len(s.test_labels) == 400 and len(s.val_labels) == 100
    other = drift.make_stream(4, segments=2, segment_len=200, ramp=100)
    assert not np.array_equal(other.images, s.images)
    with pytest.raises(ValueError, match="segments"):
        drift.make_stream(0, segments=17)


@pytest.fixture(scope="module")
def small_stream():
    return drift.make_stream(0, segments=2, segment_len=60, ramp=30)


def _model():
    return lrt_model.pretrained_mlp(0)[0]


def test_online_run_is_reproducible_from_its_seed(small_stream):
    st = lrt_online.OnlineSettings("lrt", "unbiased", "max", batch=20, lr=1e-3, seed=5)
    m1, m2, m3 = _model(), _model(), _model()
    r1 = lrt_online.run_online(m1, small_stream, st)
    r2 = lrt_online.run_online(m2, small_stream, st)
    for k in ("online_acc", "final_acc", "writes", "layers"):
        assert r1[k] == r2[k]
    for a, b in zip(m1.w + m1.b, m2.w + m2.b):
        np.testing.assert_array_equal(a, b)
    from dataclasses import replace
    lrt_online.run_online(m3, small_stream, replace(st, seed=6))
    assert any(not np.array_equal(a, b) for a, b in zip(m1.w, m3.w))


def test_online_rules_write_as_specified(small_stream):
    base = _model()
    res = {}
    for rule in ("lrt", "sgd", "sgd-accum", "bias"):
        m = _model()
        res[rule] = lrt_online.run_online(m, small_stream, lrt_online.OnlineSettings(
            rule, batch=20, lr=1e-2 if rule == "sgd" else 1e-3))
        if rule == "bias":
            for a, b in zip(m.w, base.w):
                np.testing.assert_array_equal(a, b)
    assert res["bias"]["writes"]["max"] == 0
    n = len(small_stream)
    for rule in ("lrt", "sgd-accum"):
        for layer in res[rule]["layers"]:
            assert layer["readouts"] == n // 20
            assert layer["writes"]["max"] <= layer["weight_writes"] <= layer["readouts"]
    assert res["lrt"]["layers"][0]["aux_words"] == 4 * (64 + 64)
    assert res["sgd-accum"]["layers"][0]["aux_words"] == 64 * 64
    assert res["sgd"]["writes"]["max"] <= n
    for r in res.values():
        assert 0 <= r["online_acc"] <= 1 and 0 <= r["final_acc"] <= 1


def test_stochastic_rounding_sgd_moves_weights_below_one_lsb_and_is_seeded(small_stream):
    """At a rate whose steps all round to 0 (nearest rounding never writes), the
    stochastically rounded SGD still writes, a fixed seed reproduces it, another seed does
    not; and its step is unbiased: E[floor(G + u)] = G over the PRNG's uniform u."""
    from dataclasses import replace
    st = lrt_online.OnlineSettings("sgd", lr=1e-4, seed=3)
    near = lrt_online.run_online(_model(), small_stream, st)
    assert near["writes"]["max"] == 0
    sr = replace(st, rounding="stochastic")
    m1, m2, m3 = _model(), _model(), _model()
    a = lrt_online.run_online(m1, small_stream, sr)
    b = lrt_online.run_online(m2, small_stream, sr)
    lrt_online.run_online(m3, small_stream, replace(sr, seed=4))
    assert a["writes"]["max"] > 0 and a["writes"] == b["writes"]
    assert all(np.array_equal(x, y) for x, y in zip(m1.w, m2.w))
    assert any(not np.array_equal(x, y) for x, y in zip(m1.w, m3.w))
    from ttrain.golden import prng
    from ttrain.golden.quant import f2i
    g = np.float32(0.3)
    u = np.multiply((prng.draw(np.uint32(1), np.arange(200_000, dtype=np.uint64))
                     >> np.uint32(8)).astype(np.float32), np.float32(2.0 ** -24))
    assert abs(f2i(np.add(g, u), mode="floor").mean() - 0.3) < 0.005


def test_online_settings_reject_bad_values():
    with pytest.raises(ValueError, match="rounding 'up'"):
        lrt_online.OnlineSettings("sgd", rounding="up").check()
    with pytest.raises(ValueError, match="variant of the sgd baseline, not of 'lrt'"):
        lrt_online.OnlineSettings("lrt", rounding="stochastic").check()
    for kw, msg in (({"rule": "adam"}, "rule"), ({"variant": "x"}, "variant"),
                    ({"norm": "l2"}, "norm"), ({"rank": 0}, "rank"), ({"lr": -1.0}, "lr")):
        with pytest.raises(ValueError, match=msg):
            lrt_online.OnlineSettings(**kw).check()


# --------------------------------------------------------------------------------------------
# The convolutional preset (digits-lrt-cnn): one rankReduce per output pixel
# --------------------------------------------------------------------------------------------

def _small_cnn(rng):
    """A 6x6x1 input -> conv 3x3 stride 2 pad 1 (3 channels, 3x3 map) -> conv 3x3 pad 0 (dense,
    4) -> 1x1 linear (3 classes)."""
    cfg = qnn.CNNConfig("t-cnn", (6, 6, 1), 3, (qnn.Conv(3, k=3, stride=2, pad=1),
                                                 qnn.Conv(4, k=3, stride=1, pad=0),
                                                 qnn.GlobalPool(), qnn.Linear(3)))
    geo = lrt_model._geometries(cfg)
    ws = [rng.integers(-128, 128, (g.cout, g.k * g.k * g.cin)) for g in geo]
    bs = [rng.integers(-3000, 3000, g.cout) for g in geo]
    return lrt_model.FixedCNN(ws, bs, geo)


def test_fixed_cnn_forward_and_backward_match_a_python_reference():
    rng = np.random.default_rng(21)
    model = _small_cnn(rng)
    assert model.pixels == [9, 1, 1]
    x = rng.integers(0, 256, (3, 36))
    acts, logits = model.forward(x)
    labels = [0, 2, 1]
    g = model.backward(acts, logits, labels)
    w0, w1, w2 = (w.tolist() for w in model.w)
    b0, b1, b2 = (b.tolist() for b in model.b)

    def rs(v):                                     # round_shift(v, 7, HALF_UP)
        return (v + 64) >> 7

    for n in range(3):
        img = [[int(x[n, 6 * r + c]) for c in range(6)] for r in range(6)]

        def px(r, c):
            return img[r][c] if 0 <= r < 6 and 0 <= c < 6 else 0
        h0 = [[[0] * 3 for _ in range(3)] for _ in range(3)]     # [y][x][channel]
        for y in range(3):
            for xx in range(3):
                patch = [px(2 * y - 1 + ky, 2 * xx - 1 + kx) for ky in range(3) for kx in range(3)]
                assert acts[0][n, 3 * y + xx].tolist() == patch
                for o in range(3):
                    acc = sum(w0[o][i] * patch[i] for i in range(9)) + 4 * b0[o]
                    h0[y][xx][o] = min(max(rs(acc), 0), 255)
        flat = [h0[y][xx][c] for y in range(3) for xx in range(3) for c in range(3)]
        assert acts[1][n, 0].tolist() == flat
        h1 = [min(max(rs(sum(w1[o][i] * flat[i] for i in range(27)) + 4 * b1[o]), 0), 255)
              for o in range(4)]
        assert acts[2][n, 0].tolist() == h1
        for o in range(3):
            acc = sum(w2[o][i] * h1[i] for i in range(4)) + 4 * b2[o]
            assert logits[n, o] == np.float32(acc * 2.0 ** -14)
        # Backward from the int8 logit gradient (golden's softmax) down to conv0's pixels.
        g2 = g[2][n, 0].tolist()
        back1 = [max(min(rs(sum(g2[o] * w2[o][i] for o in range(3))), 127), -128)
                 for i in range(4)]
        g1 = [back1[i] if 0 < h1[i] < 255 else 0 for i in range(4)]
        assert g[1][n, 0].tolist() == g1
        cols = [sum(g1[o] * w1[o][i] for o in range(4)) for i in range(27)]   # pad 0: one patch
        for y in range(3):
            for xx in range(3):
                for c in range(3):
                    v = max(min(rs(cols[(3 * y + xx) * 3 + c]), 127), -128)
                    want = v if 0 < h0[y][xx][c] < 255 else 0
                    assert g[0][n, 3 * y + xx, c] == want


def test_fixed_cnn_col2im_sums_every_patch_that_reads_a_pixel():
    rng = np.random.default_rng(3)
    geo = lrt_model._Geometry(4, 4, 2, 3, 1, 1, 4, 4, 5)
    maps = rng.integers(-50, 50, (2, 4, 4, 2))
    cols = rng.integers(-50, 50, (2, 16, 18))
    # <patches(x), cols> == <x, fold(cols)>: fold is the transpose of im2col.
    lhs = int(np.sum(geo.patches(maps) * cols))
    rhs = int(np.sum(maps * geo.fold(cols)))
    assert lhs == rhs


def test_fixed_cnn_of_dense_layers_is_the_mlp_bit_for_bit():
    mlp = _model()
    geo = lrt_model._geometries(lrt_model.MLP_CONFIG)
    cnn = lrt_model.FixedCNN([w.copy() for w in mlp.w], [b.copy() for b in mlp.b], geo)
    x = lrt_model.quantize_input(drift.make_stream(0, segments=1, segment_len=20).images)
    a1, l1 = mlp.forward(x)
    a2, l2 = cnn.forward(x)
    np.testing.assert_array_equal(l1.view(np.uint32), l2.view(np.uint32))
    y = np.arange(20) % 10
    for g_mlp, g_cnn in zip(mlp.backward(a1, l1, y), cnn.backward(a2, l2, y)):
        np.testing.assert_array_equal(g_mlp, g_cnn[:, 0, :])


def test_conv_preset_is_pretrained_and_quantized():
    model, rec = lrt_model.pretrained("digits-lrt-cnn")
    assert model.shapes == [(8, 9), (16, 72), (32, 256), (10, 32)]
    assert model.pixels == [16, 16, 1, 1]
    assert rec["float_test"] > 0.9 and rec["fixed_test"] > 0.85
    with pytest.raises(ValueError, match="unknown fixed-point LRT preset"):
        lrt_model.pretrained("digits-cnn")


def test_conv_lrt_feeds_every_pixel_and_reads_out_every_conv_batch():
    st = lrt_online.OnlineSettings("lrt", "unbiased", "max", batch=40, conv_batch=10, lr=0.01)
    short = drift.make_stream(0, segments=1, segment_len=20, ramp=10)
    r = lrt_online.run_online(lrt_model.pretrained("digits-lrt-cnn")[0], short, st)
    conv0, conv1, dense2, fc = r["layers"]
    assert [L["pixels"] for L in r["layers"]] == [16, 16, 1, 1]
    assert conv0["readouts"] == conv1["readouts"] == 2 and dense2["readouts"] == 0
    assert conv0["weight_writes"] >= 1 and conv0["writes"]["max"] <= 2
    assert 0 < conv0["skipped"] <= 16 * 20
    assert r["writes_paper_count"] == {"max": r["writes"]["max"],
                                       "mean": pytest.approx(r["writes"]["mean"])}
    again = lrt_online.run_online(lrt_model.pretrained("digits-lrt-cnn")[0], short, st)
    assert again["layers"] == r["layers"] and again["final_acc"] == r["final_acc"]


def test_conv_sgd_counts_the_authors_per_pixel_writes():
    short = drift.make_stream(0, segments=1, segment_len=12, ramp=4)
    model = lrt_model.pretrained("digits-lrt-cnn")[0]
    start = model.copy()
    r = lrt_online.run_online(model, short, lrt_online.OnlineSettings("sgd", lr=0.01))
    # The authors' count, recomputed: per sample, pixels with non-zero input and gradient.
    want = np.zeros((8, 9), np.int64)
    m = start.copy()
    for i, x in enumerate(lrt_model.quantize_input(short.images)):
        acts, logits = m.forward(x[None])
        g = m.backward(acts, logits, [int(short.labels[i])])
        want += (g[0][0] != 0).T.astype(np.int64) @ (acts[0][0] != 0)
        # The same sample's SGD step (one rule, tested above), to follow the trajectory.
        one = dataclasses.replace(short, images=short.images[i:i + 1],
                                  labels=short.labels[i:i + 1], source=short.source[i:i + 1])
        lrt_online.run_online(m, one, lrt_online.OnlineSettings("sgd", lr=0.01))
    conv0 = r["layers"][0]
    assert conv0["writes_paper_count"]["max"] == int(want.max())
    assert conv0["writes_paper_count"]["max"] > conv0["writes"]["max"]
    assert r["layers"][2]["writes_paper_count"] == {
        "max": r["layers"][2]["writes"]["max"],
        "mean": pytest.approx(r["layers"][2]["writes"]["mean"])}
