"""The quantized models and the zeroth-order rule in golden: the integer forward pass against a
pure-Python reference, float back-propagation against finite differences, the ZO estimator's
bias and variance against theory, the estimate on the int8 model against the true gradient,
the NP local gradient, reproducibility from a seed, and the settings' errors."""

import copy

import numpy as np
import pytest

from ttrain.golden import adapt, digits, qnn, zo

SMALL = qnn.CNNConfig("small-test", (5, 5, 2), 3, (
    qnn.Conv(4, 3, 1), qnn.InvertedResidual(2, 4, 1), qnn.Conv(4, 3, 2, groups=2),
    qnn.GlobalPool(), qnn.Linear(3)))


def _random_quant(cfg, seed=0):
    rng = np.random.default_rng(seed)
    model = qnn.FloatCNN(cfg, seed=seed)
    for p in model.params.values():
        p[1][:] = rng.normal(0, 0.1, p[1].shape)
    calib = rng.uniform(0, 1, (16, *cfg.input_shape)).astype(np.float32)
    return model, qnn.quantize(model, calib), rng


def _reference_forward(q, x):
    """Pure-Python integer forward (loops, Python ints, half-up rounding) of a QuantCNN."""
    def rq(acc, m, s, z, lo):
        v = ((acc * m + (1 << (s - 1))) >> s if s else acc * m) + z
        return min(max(v, lo), 127)
    acts = []
    for i, n in enumerate(q.cfg.nodes):
        src = [x if j < 0 else acts[j] for j in n.inputs]
        zin = [q.zp[j] for j in n.inputs]
        H, W, C = n.shape
        out = np.zeros((x.shape[0], H, W, C), np.int64)
        for b in range(x.shape[0]):
            for h in range(H):
                for w in range(W):
                    for c in range(C):
                        if n.kind == "conv":
                            g = c // (C // n.groups)
                            cg = n.cin // n.groups
                            acc = int(q.b[n.name][c])
                            for ky in range(n.k):
                                for kx in range(n.k):
                                    yy, xx = h * n.stride + ky - n.pad, w * n.stride + kx - n.pad
                                    if not (0 <= yy < src[0].shape[1] and 0 <= xx < src[0].shape[2]):
                                        continue
                                    for ci in range(cg):
                                        a = int(src[0][b, yy, xx, g * cg + ci]) - zin[0]
                                        acc += a * int(q.w[n.name][ky, kx, ci, c])
                            lo = q.zp[i] if n.relu else -128
                            out[b, h, w, c] = rq(acc, int(q.mult[i][c]), int(q.shift[i][c]),
                                                 q.zp[i], lo)
                        elif n.kind == "add":
                            ma, mb = (int(v) for v in q.mult[i])
                            acc = (int(src[0][b, h, w, c]) - zin[0]) * ma + \
                                  (int(src[1][b, h, w, c]) - zin[1]) * mb
                            out[b, h, w, c] = rq(acc, 1, int(q.shift[i]), q.zp[i], -128)
                        else:
                            acc = sum(int(v) - zin[0] for v in src[0][b, :, :, c].ravel())
                            out[b, h, w, c] = rq(acc, int(q.mult[i]), int(q.shift[i]), q.zp[i],
                                                 -128)
        acts.append(out)
    return acts


def test_integer_forward_matches_a_pure_python_reference():
    _, q, rng = _random_quant(SMALL, 1)
    assert [n.kind for n in SMALL.nodes].count("add") == 1          # residual path exercised
    assert any(n.groups > 1 for n in SMALL.nodes)                    # grouped + depthwise
    x = rng.integers(-128, 128, (3, 5, 5, 2))
    got = qnn.int_forward(q, x)
    want = _reference_forward(q, x)
    for i, (g, w) in enumerate(zip(got, want)):
        assert np.array_equal(g, w), SMALL.nodes[i].name


def test_partial_forward_and_perturbation_equal_the_full_pass():
    _, q, rng = _random_quant(SMALL, 2)
    x = rng.integers(-128, 128, (4, 5, 5, 2))
    full = qnn.int_forward(q, x)
    k = 3
    pert = {k: rng.integers(-5, 6, full[k].shape)}
    again = qnn.int_forward(q, x, perturb=pert, start=k, cache=full)
    ref = qnn.int_forward(q, x, perturb=pert)
    assert all(np.array_equal(a, b) for a, b in zip(again, ref))
    assert not np.array_equal(ref[-1], full[-1])


def test_float_backward_matches_finite_differences():
    model = qnn.FloatCNN(SMALL, seed=3)
    for p in model.params.values():
        p[0] = p[0].astype(np.float64)
        p[1] = np.random.default_rng(4).normal(0, 0.1, p[1].shape)
    rng = np.random.default_rng(5)
    x = rng.uniform(0, 1, (3, 5, 5, 2))
    y = np.array([0, 2, 1])

    def loss():
        logits, _ = model.forward(x)
        return qnn._softmax_ce(logits.astype(np.float64), y)[0]

    logits, acts = model.forward(x)
    acts = [a.astype(np.float64) for a in acts]
    _, d = qnn._softmax_ce(logits.astype(np.float64), y)
    grads = model.backward(x, acts, d.astype(np.float64))
    for name, (w, b) in model.params.items():
        for arr, g in ((w, grads[name][0]), (b, grads[name][1])):
            idx = np.unravel_index(rng.integers(arr.size), arr.shape)
            old = arr[idx]
            arr[idx] = old + 1e-5
            up = loss()
            arr[idx] = old - 1e-5
            down = loss()
            arr[idx] = old
            assert abs((up - down) / 2e-5 - g[idx]) < 1e-3 + 1e-2 * abs(g[idx]), name


def _quadratic_cubic(d=16, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(d, d))
    a = a @ a.T / d
    b, c = rng.normal(size=d), 0.3
    f = lambda t: 0.5 * t @ a @ t + b @ t + c * np.sum(t ** 3)       # noqa: E731
    grad = lambda t: a @ t + b + 3 * c * t ** 2                       # noqa: E731
    return f, grad, rng.normal(size=d)


def test_zo_estimator_bias_is_sigma_squared_exactly_and_variance_falls_as_one_over_n():
    f, grad, theta = _quadratic_cubic(d=8)
    true = grad(theta)
    signs = np.array(np.meshgrid(*[[-1, 1]] * 8)).reshape(8, -1).T     # all 2**8 directions

    def expectation(sigma, antithetic=False):
        return zo.estimate_gradient(f, theta, queries=0, sigma=sigma, directions=signs,
                                    antithetic=antithetic)

    # Rademacher forward differences: exact on the quadratic part; the cubic term c*sum t**3
    # leaves E[sigma**2 c u_k**3 u_k] = c sigma**2 per entry (c = 0.3).
    for sigma in (0.4, 0.2, 0.05):
        assert np.allclose(expectation(sigma) - true, 0.3 * sigma ** 2, atol=1e-9)
        assert np.allclose(expectation(sigma, antithetic=True) - true, 0.3 * sigma ** 2,
                           atol=1e-9)
    # The PRNG's directions: the variance at fixed sigma falls as 1/n, the mean converges.
    def estimates(n, runs=400):
        return np.stack([zo.estimate_gradient(f, theta, queries=n, sigma=0.05, seed=s)
                         for s in range(runs)])
    e4, e16 = estimates(4), estimates(16)
    assert 2.8 < e4.var(0).sum() / e16.var(0).sum() < 5.5
    sem = np.sqrt(e16.var(0) / len(e16))
    assert np.all(np.abs(e16.mean(0) - (true + 0.3 * 0.05 ** 2)) < 5 * sem)


@pytest.fixture(scope="module")
def digits_model():
    model, rec = adapt.pretrain(qnn.get_cnn_config("digits-cnn"))
    return model, adapt.quantized(model), rec


def test_quantized_digits_model_keeps_the_float_accuracy(digits_model):
    model, q, rec = digits_model
    d = digits.load_digits_clean("pretrain")
    assert rec["test"] > 0.85
    assert zo.evaluate(q, d.test.images, d.test.labels) > rec["test"] - 0.05


def _cos(a, b):
    a, b = np.ravel(a), np.ravel(b)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize("mode, layer, queries, floor", [("np", "conv2", 120, 0.6),
                                                          ("wp", "fc4", 120, 0.3)])
def test_zo_step_moves_the_int8_model_along_the_true_gradient(digits_model, mode, layer,
                                                              queries, floor):
    _, q, _ = digits_model
    data = digits.load_digits_c("gaussian_noise")
    xb, yb = qnn.quantize_input(data.train.images[:50]), data.train.labels[:50]
    ste = qnn.ste_backward(q, xb, qnn.int_forward(q, xb), yb)[layer][0]
    q2 = q.copy()
    s = zo.ZOSettings(mode=mode, lr=1.0, queries=queries, layers=(layer,), rounding="nearest")
    zo.zo_step(q2, xb, yb, s, 0)
    step = (q2.w[layer] - q.w[layer]).astype(float)
    assert np.count_nonzero(step) > step.size // 4
    assert _cos(step, -ste / q.s_w[layer] ** 2) > floor


def test_np_local_gradient_is_the_float_contraction(digits_model):
    _, q, _ = digits_model
    rng = np.random.default_rng(7)
    x = qnn.quantize_input(rng.uniform(0, 1, (6, 8, 8)).astype(np.float32))
    acts = qnn.int_forward(q, x)
    i = q.cfg.conv_names.index("conv1")
    node_index = [n.name for n in q.cfg.nodes].index("conv1")
    dacc = rng.normal(size=(6, *q.cfg.nodes[node_index].shape)).astype(np.float32)
    dw, db = zo.np_local_grads(q, node_index, acts, x, dacc)
    n = q.cfg.nodes[node_index]
    src = (acts[n.inputs[0]] - q.zp[n.inputs[0]]).astype(np.float64)
    _, want = qnn._conv_backward(n, src, np.zeros(n.weight_shape), dacc.astype(np.float64),
                                 need_dx=False)
    assert i >= 0
    assert np.allclose(dw, want, rtol=1e-4, atol=1e-3)
    assert np.allclose(db, dacc.astype(np.float64).sum((0, 1, 2)), rtol=1e-4, atol=1e-3)


def test_a_fixed_seed_reproduces_a_run_exactly(digits_model):
    _, q, _ = digits_model
    full = digits.load_digits_c("contrast")
    small = copy.copy(full)
    object.__setattr__(small, "train", digits.Split(full.train.images[:100],
                                                    full.train.labels[:100],
                                                    full.train.index[:100]))
    runs = []
    for seed in (5, 5, 6):
        s = zo.ZOSettings(mode="mixed", queries=4, lr=0.1, seed=seed, sparse="random",
                          density=0.5)
        _, trained = zo.train_zo(q, small, s, epochs=1)
        runs.append(trained)
    same = all(np.array_equal(runs[0].w[k], runs[1].w[k]) for k in q.w)
    differ = any(not np.array_equal(runs[0].w[k], runs[2].w[k]) for k in q.w)
    moved = any(not np.array_equal(runs[0].w[k], q.w[k]) for k in q.w)
    assert same and differ and moved


def test_inplace_variant_applies_each_query_and_keeps_no_gradient(digits_model):
    _, q, _ = digits_model
    data = digits.load_digits_c("brightness")
    xb, yb = qnn.quantize_input(data.train.images[:50]), data.train.labels[:50]
    q2 = q.copy()
    zo.zo_step(q2, xb, yb, zo.ZOSettings(mode="wp", queries=4, lr=0.5, inplace=True,
                                         layers=("fc4",)), 0)
    assert not np.array_equal(q2.w["fc4"], q.w["fc4"])
    assert all(np.array_equal(q2.w[k], q.w[k]) for k in q.w if k != "fc4")


def test_layerwise_queries_perturb_one_layer_each_and_equal_joint_for_one_layer(digits_model):
    _, q, _ = digits_model
    data = digits.load_digits_c("solarize")
    xb, yb = qnn.quantize_input(data.train.images[:20]), data.train.labels[:20]
    # One trainable layer: the layerwise step is the joint step, bit for bit.
    for mode, layers in (("np", ("conv1",)), ("wp", ("fc4",))):
        a, b = q.copy(), q.copy()
        ra = zo.zo_step(a, xb, yb, zo.ZOSettings(mode=mode, queries=3, lr=0.3, layers=layers), 2)
        rb = zo.zo_step(b, xb, yb, zo.ZOSettings(mode=mode, queries=3, lr=0.3, layers=layers,
                                                 layerwise=True), 2)
        assert all(np.array_equal(a.w[k], b.w[k]) and np.array_equal(a.b[k], b.b[k])
                   for k in q.w)
        assert ra == rb and any(not np.array_equal(a.w[k], q.w[k]) for k in q.w)
    # Four layers: n queries per layer, each re-running the net from its layer only.
    macs = [n.macs for n in q.cfg.nodes]
    starts = [i for i, n in enumerate(q.cfg.nodes) if n.kind == "conv"]
    joint = zo.zo_step(q.copy(), xb, yb, zo.ZOSettings(mode="np", queries=3, lr=0.3), 0)
    lw = zo.zo_step(q.copy(), xb, yb, zo.ZOSettings(mode="np", queries=3, lr=0.3,
                                                    layerwise=True), 0)
    assert joint["forwards"] == 1 + 3 and lw["forwards"] == 1 + 3 * len(starts)
    assert joint["macs"] == 20 * (sum(macs) + 3 * sum(macs))
    assert lw["macs"] == 20 * (sum(macs) + 3 * sum(sum(macs[i:]) for i in starts))
    anti = zo.zo_step(q.copy(), xb, yb, zo.ZOSettings(mode="mixed", queries=3, lr=0.3,
                                                      layerwise=True, antithetic=True), 0)
    assert anti["forwards"] == 1 + 2 * 3 * len(starts)


def test_layerwise_np_directions_touch_only_their_layer(digits_model, monkeypatch):
    _, q, _ = digits_model
    data = digits.load_digits_c("contrast")
    xb, yb = qnn.quantize_input(data.train.images[:8]), data.train.labels[:8]
    seen = []
    real = qnn.int_forward

    def spy(q_, x, *, perturb=None, start=0, cache=None, w=None, b=None):
        if perturb is not None:
            seen.append((start, sorted(perturb)))
        return real(q_, x, perturb=perturb, start=start, cache=cache, w=w, b=b)

    monkeypatch.setattr(qnn, "int_forward", spy)
    zo.zo_step(q.copy(), xb, yb, zo.ZOSettings(mode="np", queries=2, lr=0.1, layerwise=True), 0)
    convs = [i for i, n in enumerate(q.cfg.nodes) if n.kind == "conv"]
    assert seen == [(i, [i]) for i in convs for _ in range(2)]


def test_np_dim_scaling_over_batch_times_queries_moves_further(digits_model):
    _, q, _ = digits_model
    data = digits.load_digits_c("gaussian_noise")
    xb, yb = qnn.quantize_input(data.train.images[:50]), data.train.labels[:50]
    ste = qnn.ste_backward(q, xb, qnn.int_forward(q, xb), yb)["conv1"][0]
    steps = {}
    for dim in zo.NP_DIMS:
        q2 = q.copy()
        zo.zo_step(q2, xb, yb, zo.ZOSettings(mode="np", lr=0.05, queries=40, layers=("conv1",),
                                             rounding="nearest", np_dim=dim), 0)
        steps[dim] = (q2.w["conv1"] - q.w["conv1"]).astype(float)
    # d = 512 outputs per sample: n/(n+d-1) = 0.07, Bn/(Bn+d-1) = 0.80 -> about 11x the step.
    ratio = np.abs(steps["batch"]).sum() / max(np.abs(steps["queries"]).sum(), 1)
    assert ratio > 5
    assert _cos(steps["batch"], -ste) > 0.25     # a random step has cosine ~0 +- 0.02


def test_layer_learning_rates_scale_only_their_layer(digits_model):
    _, q, _ = digits_model
    data = digits.load_digits_c("translate")
    xb, yb = qnn.quantize_input(data.train.images[:20]), data.train.labels[:20]
    base = dict(mode="np", queries=3, layerwise=True, np_dim="batch")
    ref, frozen, halved = q.copy(), q.copy(), q.copy()
    zo.zo_step(ref, xb, yb, zo.ZOSettings(lr=0.1, **base), 1)
    zo.zo_step(frozen, xb, yb, zo.ZOSettings(lr=0.1, layer_lr=(("conv0", 0.0),), **base), 1)
    zo.zo_step(halved, xb, yb, zo.ZOSettings(lr=0.2, layer_lr=tuple((n, 0.5) for n in q.w),
                                             **base), 1)
    assert np.array_equal(frozen.w["conv0"], q.w["conv0"])
    assert not np.array_equal(ref.w["conv0"], q.w["conv0"])
    assert all(np.array_equal(frozen.w[k], ref.w[k]) for k in q.w if k != "conv0")
    assert all(np.array_equal(halved.w[k], ref.w[k]) and np.array_equal(halved.b[k], ref.b[k])
               for k in q.w)


@pytest.mark.parametrize("kw, needle", [
    ({"mode": "sgd"}, "ZO mode must be one of"),
    ({"queries": 0}, "queries must be a positive integer"),
    ({"density": 0.5}, "needs a sparse mask"),
    ({"sparse": "topk", "density": 0}, "density must be in (0, 1]"),
    ({"lr": 0}, "learning rate must be positive"),
    ({"inplace": True, "mode": "np"}, "in-place variant"),
    ({"rounding": "up"}, "update rounding must be one of"),
    ({"np_dim": "all"}, "NP dim scaling must be one of"),
    ({"layer_lr": (("fc4", -1.0),)}, "layer_lr must be"),
    ({"layer_lr": ("fc4",)}, "layer_lr must be"),
    ({"layerwise": True, "inplace": True}, "not defined with layerwise"),
])
def test_settings_are_checked(kw, needle):
    with pytest.raises(ValueError) as exc:
        zo.ZOSettings(**kw)
    assert needle in str(exc.value)


def test_unknown_layer_and_bad_presets_are_named():
    _, q, rng = _random_quant(SMALL)
    with pytest.raises(ValueError, match="unknown layer"):
        zo.zo_step(q, rng.integers(-128, 128, (2, 5, 5, 2)), np.array([0, 1]),
                   zo.ZOSettings(layers=("nope",)), 0)
    with pytest.raises(ValueError, match="choose one of"):
        qnn.get_cnn_config("resnet")
    with pytest.raises(ValueError, match="needs a 1x1 input"):
        qnn.CNNConfig("bad", (4, 4, 1), 2, (qnn.Conv(2), qnn.Linear(2)))


def test_mcunet_scale_preset_shape():
    cfg = qnn.get_cnn_config("mcunet-s")
    assert 300_000 < cfg.n_params < 700_000
    assert cfg.nodes[-1].shape == (1, 1, 10)
    assert sum(n.kind == "add" for n in cfg.nodes) >= 4
