"""Golden model: whole-model gradients against finite differences, padding invariance, batch
validation, parameter naming, SGD, and a short overfit run on the tiny preset."""

import numpy as np
import pytest

from ttrain.golden import layers as L
from ttrain.golden import model as M
from ttrain.golden.config import TTMSpec, get_config

TINY = get_config("tiny")
#: tiny with TTM position and segment tables (cfg.pos_embedding / seg_embedding)
TTM_TABLES = dict(pos_embedding=TTMSpec((2, 2, 2), (2, 4, 4), (1, 2, 4, 1)),
                  seg_embedding=TTMSpec((2, 1, 1), (2, 4, 4), (1, 2, 2, 1)))


def make_batch(cfg, rng, n, min_len=2, slots=True):
    """Random sentences: [CLS] first, variable lengths, padding (token 0) after."""
    s = cfg.seq_len
    lengths = rng.integers(min_len, s + 1, size=n)
    lengths[0] = s
    if n > 1:
        lengths[-1] = min(min_len, s)
    mask = np.arange(s)[None, :] < lengths[:, None]
    tokens = np.where(mask, rng.integers(1, cfg.vocab, size=(n, s)), 0)
    tokens[:, 0] = 1                                     # [CLS]
    segments = np.where(mask, rng.integers(0, cfg.n_segments, size=(n, s)), 0)
    batch = {"tokens": tokens.astype(np.int64), "segments": segments.astype(np.int64),
             "mask": mask, "intent": rng.integers(0, cfg.n_intents, size=n).astype(np.int64)}
    if slots:
        lab = rng.integers(0, cfg.n_slots, size=(n, s))
        lab[rng.random((n, s)) < 0.2] = -1                # some ignored real tokens
        batch["slots"] = np.where(mask, lab, -1).astype(np.int64)
    return batch


def perturbed_params(cfg, rng):
    """float64 params with non-trivial biases and LayerNorm affines (so every tensor matters)."""
    p = M.init_params(cfg, rng, dtype=np.float64)
    for k, v in p.items():
        if k.endswith((".bias", ".beta")):
            v += rng.standard_normal(v.shape) * 0.1
        elif k.endswith(".gamma"):
            v += rng.standard_normal(v.shape) * 0.1
    return p


# ---------------------------------------------------------------------------------- names

@pytest.mark.parametrize("slot_head", [False, True])
def test_param_names_and_shapes(slot_head):
    cfg = TINY.with_(slot_head=slot_head)
    p = M.init_params(cfg, np.random.default_rng(0))
    shapes = M.param_shapes(cfg)
    assert list(p) == list(shapes)
    assert {k: v.shape for k, v in p.items()} == {k: tuple(s) for k, s in shapes.items()}
    assert all(v.dtype == np.float32 for v in p.values())
    for name, spec in cfg.tt_layers():            # every TT layer of the config is there
        assert [p[f"{name}.core{k}"].shape for k in range(2 * spec.d)] == spec.core_shapes
        assert p[f"{name}.bias"].shape == (spec.n_out,)
    assert sum(v.size for v in p.values()) == M.num_params(cfg)
    assert ("slot.weight" in p) == slot_head


def test_init_params_rejects_bad_arguments():
    with pytest.raises(TypeError, match="default_rng"):
        M.init_params(TINY, 0)
    with pytest.raises(ValueError, match="float32 or float64"):
        M.init_params(TINY, np.random.default_rng(0), dtype=np.int32)


# ---------------------------------------------------------------------------- gradients

def numeric(f, arr, i, h=1e-6):
    flat = arr.reshape(-1)
    old = flat[i]
    flat[i] = old + h
    fp = f()
    flat[i] = old - h
    fm = f()
    flat[i] = old
    return (fp - fm) / (2 * h)


@pytest.mark.parametrize("slot_head, tables", [(False, "dense"), (True, "dense"),
                                               (False, "ttm")])
def test_model_gradients_match_finite_differences(slot_head, tables):
    """Every parameter tensor: its largest-gradient entry plus 2 random ones, float64 (with
    dense or TTM position and segment tables)."""
    cfg = TINY.with_(slot_head=slot_head, n_layers=2, **(TTM_TABLES if tables == "ttm" else {}))
    rng = np.random.default_rng(7)
    params = perturbed_params(cfg, rng)
    batch = make_batch(cfg, rng, n=3)
    assert not batch["mask"].all()
    loss, grads, _ = M.forward_backward(cfg, params, batch)
    assert grads.keys() == params.keys()

    def f():
        return M.forward_backward(cfg, params, batch, need_grads=False)[0]
    for name, p in params.items():
        g = grads[name]
        assert g.shape == p.shape and g.dtype == np.float64
        if name.endswith(".k.bias"):
            # a key bias adds q.b to every score of a query row: softmax cancels it exactly
            assert np.abs(g).max() < 1e-12, name
            continue
        gflat = g.reshape(-1)
        idx = {int(np.abs(gflat).argmax())} | set(rng.choice(g.size, size=min(2, g.size),
                                                             replace=False).tolist())
        idx = sorted(idx)
        num = np.array([numeric(f, p, i) for i in idx])
        ana = gflat[idx]
        den = max(np.linalg.norm(ana), np.linalg.norm(num))
        assert den > 1e-9, f"{name}: gradient is zero, the check proves nothing"
        err = np.linalg.norm(ana - num) / den
        assert err <= 1e-6, f"{name}: relative error {err:.2e} (analytic {ana}, numeric {num})"


def test_loss_is_sum_of_heads_and_float32_path():
    cfg = TINY.with_(slot_head=True)
    rng = np.random.default_rng(3)
    p32 = M.init_params(cfg, rng)
    batch = make_batch(cfg, rng, n=4)
    loss, grads, out = M.forward_backward(cfg, p32, batch)
    assert isinstance(loss, float)
    assert loss == pytest.approx(out["intent_loss"] + out["slot_loss"], rel=1e-6)
    assert out["intent_logits"].shape == (4, cfg.n_intents)
    assert out["slot_logits"].shape == (4, cfg.seq_len, cfg.n_slots)
    assert out["intent_logits"].dtype == np.float32
    assert all(g.dtype == np.float32 for g in grads.values())
    # float32 and float64 runs of the same parameters agree to float32 accuracy
    p64 = {k: v.astype(np.float64) for k, v in p32.items()}
    loss64, grads64, _ = M.forward_backward(cfg, p64, batch)
    assert loss == pytest.approx(loss64, rel=1e-5)
    # (the floor covers gradients that are exactly 0 in exact arithmetic, like the key bias's)
    floor = 1e-4 * max(np.abs(g).max() for g in grads64.values())
    for k in grads:
        scale = max(np.abs(grads64[k]).max(), floor)
        assert np.abs(grads[k] - grads64[k]).max() <= 1e-3 * scale, k
    # an evaluation pass returns no gradients and the same loss
    loss2, none, _ = M.forward_backward(cfg, p32, batch, need_grads=False)
    assert none is None and loss2 == loss


# ------------------------------------------------------------------ full-layout reference

def reference_logits(cfg, params, batch, rng=None):
    """The post-LN model written out on the full (n, S, D) grid with the layer functions
    (the model itself computes only the real tokens). With a generator ``rng``, the training
    path: explicit dropout masks drawn in the model's documented order (embedding, per layer
    attention then FFN output, pooled vector; one uniform per real token and feature)."""
    mask = batch["mask"]
    n, s = mask.shape
    t = int(mask.sum())
    keep = 1.0 - cfg.dropout

    def draw_tokens():
        if rng is None:
            return 1.0
        full = np.zeros((n, s, cfg.d_model))
        full[mask] = (rng.random((t, cfg.d_model)) >= cfg.dropout) / keep
        return full

    def ln(x, name):
        return L.layernorm_forward(x, params[f"{name}.gamma"], params[f"{name}.beta"],
                                   cfg.ln_eps)[0]

    def ttl(x, name, spec):
        return L.tt_linear_bias_forward(spec, M.tt_cores(params, name, spec),
                                        params[f"{name}.bias"], x)[0]
    tok = L.ttm_embedding_forward(
        cfg.embedding, [params[f"emb.tok.core{k}"] for k in range(cfg.embedding.d)],
        batch["tokens"])[0]
    x = ln(tok + params["emb.pos"][None] + params["emb.seg"][batch["segments"]], "emb.ln")
    x = x * draw_tokens()
    for i in range(cfg.n_layers):
        e = f"enc{i}"
        proj = {p: (M.tt_cores(params, f"{e}.{p}", cfg.attention), params[f"{e}.{p}.bias"])
                for p in "qkvo"}
        att = L.mha_forward(cfg.attention, proj, x, mask, cfg.n_heads)[0]
        x = ln(x + att * draw_tokens(), f"{e}.ln1")
        h = L.gelu_forward(ttl(x, f"{e}.ffn1", cfg.ffn1))[0]
        x = ln(x + ttl(h, f"{e}.ffn2", cfg.ffn2) * draw_tokens(), f"{e}.ln2")
    if cfg.pooling == "mean":
        pin = (x * mask[..., None]).sum(axis=1) / mask.sum(axis=1)[:, None]
    else:
        pin = x[:, 0]
    pooled = np.tanh(ttl(pin, "pooler", cfg.pooler))
    if rng is not None:
        pooled = pooled * ((rng.random(pooled.shape) >= cfg.dropout) / keep)
    intent = pooled @ params["intent.weight"] + params["intent.bias"]
    if not cfg.slot_head:
        return intent, None
    sl = ln(L.gelu_forward(ttl(x, "slot_pre", cfg.pooler))[0], "slot.ln")
    return intent, sl @ params["slot.weight"] + params["slot.bias"]


def test_model_matches_full_layout_reference():
    cfg = TINY.with_(slot_head=True, n_layers=2)
    rng = np.random.default_rng(4)
    params = perturbed_params(cfg, rng)
    batch = make_batch(cfg, rng, n=4)
    _, _, out = M.forward_backward(cfg, params, batch, need_grads=False)
    intent, slots = reference_logits(cfg, params, batch)
    np.testing.assert_allclose(out["intent_logits"], intent, rtol=1e-11, atol=1e-12)
    m = batch["mask"]
    np.testing.assert_allclose(out["slot_logits"][m], slots[m], rtol=1e-11, atol=1e-12)
    assert not out["slot_logits"][~m].any()


# ---------------------------------------------------------------------- padding invariance

def test_padding_tokens_do_not_influence_real_outputs():
    cfg = TINY.with_(slot_head=True, n_layers=2)
    rng = np.random.default_rng(5)
    params = M.init_params(cfg, rng, dtype=np.float64)
    batch = make_batch(cfg, rng, n=4)
    pad = ~batch["mask"]
    assert pad.any()
    _, _, out = M.forward_backward(cfg, params, batch, need_grads=False)
    other = dict(batch)
    other["tokens"] = np.where(pad, rng.integers(0, cfg.vocab, size=pad.shape), batch["tokens"])
    other["segments"] = np.where(pad, 1 - batch["segments"], batch["segments"])
    other["slots"] = np.where(pad, rng.integers(0, cfg.n_slots, size=pad.shape), -1)
    other["slots"][batch["mask"]] = batch["slots"][batch["mask"]]
    loss2, _, out2 = M.forward_backward(cfg, params, other, need_grads=False)
    np.testing.assert_array_equal(out2["intent_logits"], out["intent_logits"])
    m = batch["mask"]
    np.testing.assert_array_equal(out2["slot_logits"][m], out["slot_logits"][m])
    # slot labels at padded positions are ignored
    assert loss2 == M.forward_backward(cfg, params, batch, need_grads=False)[0]


def test_predict_matches_logits_and_marks_padding():
    cfg = TINY.with_(slot_head=True)
    rng = np.random.default_rng(9)
    params = M.init_params(cfg, rng)
    batch = make_batch(cfg, rng, n=5)
    _, _, out = M.forward_backward(cfg, params, batch, need_grads=False)
    unlabeled = {k: batch[k] for k in ("tokens", "segments", "mask")}
    pred = M.predict(cfg, params, unlabeled)
    np.testing.assert_array_equal(pred["intent"], out["intent_logits"].argmax(-1))
    m = batch["mask"]
    np.testing.assert_array_equal(pred["slots"][m], out["slot_logits"].argmax(-1)[m])
    assert (pred["slots"][~m] == -1).all()
    assert "slots" not in M.predict(TINY, M.init_params(TINY, rng), unlabeled)


# --------------------------------------------------------------------------- validation

def bad(batch, **changes):
    b = dict(batch)
    for k, v in changes.items():
        if v is None:
            del b[k]
        else:
            b[k] = v
    return b


@pytest.mark.parametrize("case, exc, match", [
    ("short", ValueError, "length 7 but config 'tiny' has seq_len 8"),
    ("token_high", ValueError, r"tokens'\] values must lie in \[0, 128\)"),
    ("token_negative", ValueError, r"tokens'\] values must lie in \[0, 128\)"),
    ("segment", ValueError, r"segments'\] values must lie in \[0, 2\)"),
    ("segments_shape", ValueError, r"segments'\] has shape \(3, 4\)"),
    ("mask_shape", ValueError, r"mask'\] has shape \(2, 8\)"),
    ("mask_dtype", TypeError, "bool array"),
    ("cls_padded", ValueError, r"mask'\]\[:, 0\] must be True"),
    ("intent_shape", ValueError, r"intent'\] has shape \(2,\)"),
    ("intent_range", ValueError, r"intent'\] values must lie in \[0, 8\)"),
    ("float_tokens", TypeError, "integer NumPy array"),
    ("missing_intent", ValueError, r"missing \['intent'\]"),
    ("missing_slots", ValueError, "slot_head=True"),
    ("slot_range", ValueError, r"slots'\] values must lie in \[-1, 8\)"),
    ("tokens_1d", ValueError, "2-D array"),
    ("not_dict", TypeError, "dict of NumPy arrays"),
])
def test_invalid_batches_rejected(case, exc, match):
    cfg = TINY.with_(slot_head=True)
    rng = np.random.default_rng(1)
    params = M.init_params(cfg, rng)
    b = make_batch(cfg, rng, n=3)
    t = b["tokens"]
    batch = {
        "short": bad(b, tokens=t[:, :7], segments=b["segments"][:, :7], mask=b["mask"][:, :7]),
        "token_high": bad(b, tokens=np.where(b["mask"], t, cfg.vocab)),
        "token_negative": bad(b, tokens=np.where(b["mask"], t, -3)),
        "segment": bad(b, segments=b["segments"] + 2),
        "segments_shape": bad(b, segments=np.zeros((3, 4), np.int64)),
        "mask_shape": bad(b, mask=b["mask"][:2]),
        "mask_dtype": bad(b, mask=b["mask"].astype(np.int64)),
        "cls_padded": bad(b, mask=np.concatenate([~b["mask"][:, :1], b["mask"][:, 1:]], 1)),
        "intent_shape": bad(b, intent=b["intent"][:2]),
        "intent_range": bad(b, intent=b["intent"] + cfg.n_intents),
        "float_tokens": bad(b, tokens=t.astype(np.float64)),
        "missing_intent": bad(b, intent=None),
        "missing_slots": bad(b, slots=None),
        "slot_range": bad(b, slots=b["slots"] - 1),
        "tokens_1d": bad(b, tokens=t[0]),
        "not_dict": list(b.values()),
    }[case]
    with pytest.raises(exc, match=match):
        M.forward_backward(cfg, params, batch)


def test_invalid_params_rejected():
    rng = np.random.default_rng(0)
    params = M.init_params(TINY, rng)
    with pytest.raises(ValueError, match=r"missing \['slot_pre.core0'"):
        M.forward_backward(TINY.with_(slot_head=True), params, make_batch(TINY, rng, 2))
    wrong = dict(params)
    wrong["emb.pos"] = np.zeros((3, 32), np.float32)
    with pytest.raises(ValueError, match=r"'emb.pos' must be an ndarray of shape \(8, 32\)"):
        M.forward_backward(TINY, wrong, make_batch(TINY, rng, 2, slots=False))
    mixed = dict(params)
    mixed["intent.bias"] = mixed["intent.bias"].astype(np.float64)
    with pytest.raises(TypeError, match="share one dtype"):
        M.forward_backward(TINY, mixed, make_batch(TINY, rng, 2, slots=False))


# ---------------------------------------------------------------------------------- SGD

def test_sgd_update_in_place_and_descends():
    cfg = TINY.with_(slot_head=True)
    rng = np.random.default_rng(2)
    params = M.init_params(cfg, rng, dtype=np.float64)
    batch = make_batch(cfg, rng, n=4)
    loss0, grads, _ = M.forward_backward(cfg, params, batch)
    before = {k: v.copy() for k, v in params.items()}
    ids = {k: id(v) for k, v in params.items()}
    M.sgd_update(params, grads, 1e-3)
    for k in params:
        assert id(params[k]) == ids[k]
        np.testing.assert_allclose(params[k], before[k] - 1e-3 * grads[k], rtol=0, atol=1e-15)
    loss1 = M.forward_backward(cfg, params, batch, need_grads=False)[0]
    gnorm2 = sum(float((g * g).sum()) for g in grads.values())
    # first-order prediction of the decrease, within 10%
    assert loss0 - loss1 == pytest.approx(1e-3 * gnorm2, rel=0.1)
    with pytest.raises(ValueError, match="grads keys differ"):
        M.sgd_update(params, {k: grads[k] for k in list(grads)[1:]}, 0.1)


def test_clip_grads():
    rng = np.random.default_rng(6)
    grads = {"a": rng.standard_normal((3, 4)), "b": rng.standard_normal(5)}
    norm = np.sqrt(sum((g * g).sum() for g in grads.values()))
    before = {k: v.copy() for k, v in grads.items()}
    assert M.clip_grads(grads, 2 * norm) == pytest.approx(norm)
    assert all(np.array_equal(grads[k], before[k]) for k in grads)      # under the limit
    assert M.clip_grads(grads, norm / 4) == pytest.approx(norm)
    for k in grads:
        np.testing.assert_allclose(grads[k], before[k] / 4, rtol=1e-12)
    with pytest.raises(ValueError, match="max_norm must be positive"):
        M.clip_grads(grads, 0)


# ------------------------------------------------------------------------------ overfit

@pytest.mark.parametrize("slot_head", [False, True])
def test_overfits_a_handful_of_sentences(slot_head):
    """8 sentences, 8 intents, plain full-batch SGD (lr 0.1): 100% after 300 steps. Segments are
    all 0 as in the data loader, so [CLS] is identical in every sentence and the intent must
    come through attention. (Seeds 0-9 all pass; recorded in docs/model.md.)"""
    cfg = TINY.with_(slot_head=slot_head)
    rng = np.random.default_rng(11)
    params = M.init_params(cfg, rng)
    batch = make_batch(cfg, rng, n=8, min_len=4)
    batch["intent"] = np.arange(8, dtype=np.int64) % cfg.n_intents
    batch["segments"][:] = 0
    first = None
    for _ in range(300):
        loss, grads, _ = M.forward_backward(cfg, params, batch)
        first = loss if first is None else first
        M.sgd_update(params, grads, 0.1)
    pred = M.predict(cfg, params, batch)
    np.testing.assert_array_equal(pred["intent"], batch["intent"])
    assert loss < 0.1 * first
    if slot_head:
        lab = batch["slots"]
        assert (pred["slots"][lab >= 0] == lab[lab >= 0]).mean() >= 0.95


def test_init_scales():
    """Dense-equivalent RMS of every TT layer and of the TTM table equals the documented std."""
    from ttrain.golden import tt
    cfg = get_config("small").with_(slot_head=True)
    p = M.init_params(cfg, np.random.default_rng(0), dtype=np.float64)
    for name, spec in cfg.tt_layers():
        w = tt.tt_to_dense(spec, M.tt_cores(p, name, spec))
        gain = M.INIT_STD["pooler" if name in ("pooler", "slot_pre") else "encoder"]
        assert np.sqrt(np.mean(w * w)) == pytest.approx(gain / np.sqrt(spec.n_in), rel=1e-9)
    table = tt.ttm_to_dense(cfg.embedding, [p[f"emb.tok.core{k}"] for k in range(3)])
    assert np.sqrt(np.mean(table * table)) == pytest.approx(M.INIT_STD["embedding"], rel=1e-9)
    for name in ("intent.weight", "slot.weight"):
        assert p[name].std() == pytest.approx(M.INIT_STD["head"] / np.sqrt(cfg.d_model), rel=0.1)
    # same seed, same parameters
    q = M.init_params(cfg, np.random.default_rng(0), dtype=np.float64)
    assert all(np.array_equal(p[k], q[k]) for k in p)


# ------------------------------------------- dropout, label smoothing, mean pooling

def fd_check(cfg, params, batch, rng, grads, f, skip_key_bias=True):
    """Largest-gradient entry plus 2 random ones of every tensor against central differences."""
    for name, p in params.items():
        g = grads[name]
        if skip_key_bias and name.endswith(".k.bias"):
            assert np.abs(g).max() < 1e-12, name
            continue
        gflat = g.reshape(-1)
        idx = sorted({int(np.abs(gflat).argmax())}
                     | set(rng.choice(g.size, size=min(2, g.size), replace=False).tolist()))
        num = np.array([numeric(f, p, i) for i in idx])
        ana = gflat[idx]
        den = max(np.linalg.norm(ana), np.linalg.norm(num))
        assert den > 1e-9, f"{name}: gradient is zero, the check proves nothing"
        err = np.linalg.norm(ana - num) / den
        assert err <= 1e-6, f"{name}: relative error {err:.2e} (analytic {ana}, numeric {num})"


@pytest.mark.parametrize("pooling, slot_head", [("cls", True), ("mean", False)])
def test_gradients_with_dropout_smoothing_and_pooling(pooling, slot_head):
    """Training-mode dropout with a fixed mask (same generator seed on every call), label
    smoothing, a logit-adjustment offset and both poolings: float64 gradients against finite
    differences."""
    cfg = TINY.with_(slot_head=slot_head, n_layers=2, dropout=0.3, label_smoothing=0.1,
                     pooling=pooling)
    rng = np.random.default_rng(17)
    params = perturbed_params(cfg, rng)
    batch = make_batch(cfg, rng, n=3)
    offset = rng.standard_normal(cfg.n_intents)          # logit-adjusted loss
    loss, grads, _ = M.forward_backward(cfg, params, batch, rng=np.random.default_rng(5),
                                        intent_offset=offset)

    def f():
        return M.forward_backward(cfg, params, batch, need_grads=False,
                                  rng=np.random.default_rng(5), intent_offset=offset)[0]
    assert f() == loss
    # the masks matter: a different draw gives a different loss
    assert M.forward_backward(cfg, params, batch, need_grads=False,
                              rng=np.random.default_rng(6))[0] != loss
    fd_check(cfg, params, batch, rng, grads, f)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_dropout_masks_and_pooling_match_full_layout_reference(pooling):
    cfg = TINY.with_(n_layers=2, dropout=0.25, pooling=pooling)
    rng = np.random.default_rng(21)
    params = perturbed_params(cfg, rng)
    batch = make_batch(cfg, rng, n=4, slots=False)
    assert not batch["mask"].all()
    _, _, out = M.forward_backward(cfg, params, batch, need_grads=False,
                                   rng=np.random.default_rng(8))
    want = reference_logits(cfg, params, batch, np.random.default_rng(8))[0]
    np.testing.assert_allclose(out["intent_logits"], want, rtol=1e-11, atol=1e-12)
    # evaluation (no generator): no dropout at all
    _, _, ev = M.forward_backward(cfg, params, batch, need_grads=False)
    want0 = reference_logits(cfg.with_(dropout=0.0), params, batch,
                             np.random.default_rng(8))[0]
    np.testing.assert_allclose(ev["intent_logits"], want0, rtol=1e-11, atol=1e-12)
    assert not np.allclose(ev["intent_logits"], out["intent_logits"])


def test_disabled_features_are_bit_identical_and_draw_nothing():
    cfg = TINY.with_(slot_head=True)
    rng = np.random.default_rng(2)
    params = M.init_params(cfg, rng)
    batch = make_batch(cfg, rng, n=4)
    loss, grads, out = M.forward_backward(cfg, params, batch)
    gen = np.random.default_rng(3)
    state = gen.bit_generator.state
    loss2, grads2, out2 = M.forward_backward(cfg, params, batch, rng=gen)
    assert gen.bit_generator.state == state            # dropout 0: no random numbers drawn
    assert loss2 == loss
    for k in grads:
        np.testing.assert_array_equal(grads2[k], grads[k])
    # dropout > 0 without a generator (evaluation) is the same model too
    loss3, grads3, _ = M.forward_backward(cfg.with_(dropout=0.5), params, batch)
    assert loss3 == loss
    for k in grads:
        np.testing.assert_array_equal(grads3[k], grads[k])
    pred = M.predict(cfg.with_(dropout=0.5), params, batch)
    np.testing.assert_array_equal(pred["intent"], out["intent_logits"].argmax(-1))
    with pytest.raises(TypeError, match="numpy.random.Generator"):
        M.forward_backward(cfg, params, batch, rng=3)


def test_label_smoothing_loss_by_hand():
    eps = 0.2
    cfg = TINY.with_(label_smoothing=eps)
    rng = np.random.default_rng(12)
    params = M.init_params(cfg, rng, dtype=np.float64)
    batch = make_batch(cfg, rng, n=5, slots=False)
    loss, _, out = M.forward_backward(cfg, params, batch)
    z = out["intent_logits"]
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    y = batch["intent"]
    want = np.mean(-(1 - eps) * logp[np.arange(5), y] - eps * logp.mean(axis=1))
    assert loss == pytest.approx(want, rel=1e-12)
    plain = M.forward_backward(TINY, params, batch)[0]
    assert plain == pytest.approx(np.mean(-logp[np.arange(5), y]), rel=1e-12)


@pytest.mark.parametrize("change, match", [
    ({"dropout": 1.0}, r"dropout must be a number in \[0, 1\)"),
    ({"dropout": -0.1}, r"dropout must be a number in \[0, 1\)"),
    ({"dropout": True}, r"dropout must be a number in \[0, 1\)"),
    ({"label_smoothing": 1.5}, r"label_smoothing must be a number in \[0, 1\)"),
    ({"pooling": "max"}, r"pooling must be one of \['cls', 'mean'\]"),
    ({"logit_adjustment": -1.0}, r"logit_adjustment must be a number in \[0, 4\]"),
])
def test_new_config_fields_validated(change, match):
    with pytest.raises(ValueError, match=match):
        TINY.with_(**change)


def test_logit_adjustment_offset_and_prior():
    cfg = TINY
    rng = np.random.default_rng(13)
    params = M.init_params(cfg, rng, dtype=np.float64)
    batch = make_batch(cfg, rng, n=5, slots=False)
    offset = rng.standard_normal(cfg.n_intents)
    loss, _, out = M.forward_backward(cfg, params, batch, intent_offset=offset)
    _, _, plain = M.forward_backward(cfg, params, batch)
    # the returned logits are the model's own; only the loss sees the offset
    np.testing.assert_array_equal(out["intent_logits"], plain["intent_logits"])
    z = plain["intent_logits"] + offset
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    assert loss == pytest.approx(-logp[np.arange(5), batch["intent"]].mean(), rel=1e-12)
    with pytest.raises(ValueError, match="intent_offset must be 8 finite numbers"):
        M.forward_backward(cfg, params, batch, intent_offset=np.zeros(3))
    # prior: tau * log(count / N); unseen intents get the most frequent intent's offset
    prior = M.intent_log_prior([1, 1, 1, 2], 4, tau=0.5)
    np.testing.assert_allclose(prior, 0.5 * np.log([3 / 4, 3 / 4, 1 / 4, 3 / 4]))
    with pytest.raises(ValueError, match="intent ids"):
        M.intent_log_prior([], 4)


def test_ttm_position_and_segment_tables():
    """With cfg.pos_embedding / seg_embedding the dense tables are replaced by TTM cores;
    the model's embedding rows are the TTM tables' rows (dense equivalent), the initial
    rows have the embedding std, and leaving the options off draws the same parameters."""
    from ttrain.golden import tt
    cfg = TINY.with_(**TTM_TABLES)
    p = M.init_params(cfg, np.random.default_rng(3), dtype=np.float64)
    assert "emb.pos" not in p and "emb.seg" not in p
    for t, spec, rows in (("pos", cfg.pos_embedding, cfg.seq_len),
                          ("seg", cfg.seg_embedding, cfg.n_segments)):
        cores = [p[f"emb.{t}.core{k}"] for k in range(spec.d)]
        assert [c.shape for c in cores] == spec.core_shapes
        table = tt.ttm_to_dense(spec, cores)[:rows]
        assert np.sqrt(np.mean(table ** 2)) == pytest.approx(M.INIT_STD["embedding"])
        # the same model with the dense table holding these rows gives the same logits
        dense_cfg = cfg.with_(**{f"{t}_embedding": None})
        q = {k: v for k, v in p.items() if not k.startswith(f"emb.{t}.core")}
        q[f"emb.{t}"] = table
        q = {k: q[k] for k in M.param_shapes(dense_cfg)}
        batch = make_batch(cfg, np.random.default_rng(4), n=2, slots=False)
        a = M.forward_backward(cfg, p, batch, need_grads=False)[2]["intent_logits"]
        b = M.forward_backward(dense_cfg, q, batch, need_grads=False)[2]["intent_logits"]
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    plain = M.init_params(TINY, np.random.default_rng(3))
    again = M.init_params(TINY.with_(pos_embedding=None, seg_embedding=None),
                          np.random.default_rng(3))
    for k in plain:
        np.testing.assert_array_equal(plain[k], again[k])
