"""golden/train.py options of issue 12 item 3: per-tensor and lagged clipping, and the report of
the settings the chip cannot run (``not_chip_runnable``, ``ttrain train``'s summary line)."""

import json
import math

import numpy as np
import pytest

from ttrain.golden import model
from ttrain.golden.config import get_config
from ttrain.golden.data import generate_dataset
from ttrain.golden.train import (CLIP_MODES, clip_per_tensor, initial_params, lr_at,
                                 not_chip_runnable, train)
from ttrain.main import main


@pytest.fixture(scope="module")
def data():
    cfg = get_config("tiny")
    return generate_dataset(seed=3, n_train=24, n_dev=8, n_test=8, seq_len=cfg.seq_len,
                            vocab_size=cfg.vocab)


def test_clip_per_tensor_formula():
    rng = np.random.default_rng(0)
    grads = {"a": rng.standard_normal((3, 4)).astype(np.float32) * 5,
             "b": rng.standard_normal(7).astype(np.float32) * 0.01,
             "c": np.zeros(2, np.float32)}
    want = {}
    for k, g in grads.items():
        n = math.sqrt(float(np.sum(g.astype(np.float64) ** 2)))
        want[k] = g * np.float32(min(1.0, 1.5 / n)) if n > 0 else g.copy()
    norms = clip_per_tensor(grads, 1.5)
    for k in grads:
        np.testing.assert_allclose(grads[k], want[k], rtol=1e-6)
        assert math.sqrt(float(np.vdot(grads[k], grads[k]))) <= 1.5 * (1 + 1e-6)
    assert norms["a"] > 1.5 and norms["b"] < 1.5 and norms["c"] == 0
    np.testing.assert_array_equal(grads["b"], want["b"])      # below the bound: untouched
    with pytest.raises(ValueError, match="max_norm must be positive"):
        clip_per_tensor(grads, 0)


def _steps_by_hand(cfg, data, seed, lr, n_steps, clip, mode):
    """The first ``n_steps`` batch-1 SGD steps of train() with a clip mode, written out."""
    params = initial_params(cfg, seed)
    batches = data.batches("train", 1, seed=np.random.default_rng([seed, 1]))
    prev = None
    for step in range(n_steps):
        b = next(batches)
        _, grads, _ = model.forward_backward(
            cfg, params, {k: b[k] for k in ("tokens", "segments", "mask", "intent")},
            rng=np.random.default_rng([seed, 3]))
        rate = lr_at(step, n_steps, lr)
        if mode == "tensor":
            for g in grads.values():
                n = math.sqrt(float(np.vdot(g, g)))
                if n > clip:
                    g *= np.float32(clip / n)
        elif mode == "lagged":
            norm = math.sqrt(sum(float(np.vdot(g, g)) for g in grads.values()))
            rate *= 1.0 if prev is None or prev <= clip else clip / prev
            prev = norm
        model.sgd_update(params, grads, rate)
    return params


@pytest.mark.parametrize("mode", ["tensor", "lagged"])
def test_clip_modes_match_their_formula(data, mode):
    cfg = get_config("tiny").with_(n_intents=data.n_intents, n_slots=data.n_slots)
    n = data.size("train")
    r = train(cfg, data, epochs=1, lr=0.2, seed=1, clip=0.05, clip_mode=mode, progress=False)
    want = _steps_by_hand(cfg, data, 1, 0.2, n, 0.05, mode)
    assert r["clip_mode"] == mode and r["steps"] == n
    for k in want:
        np.testing.assert_array_equal(r["params"][k], want[k], err_msg=k)
    # a small clip really clips: the result differs from the unclipped run
    free = train(cfg, data, epochs=1, lr=0.2, seed=1, progress=False)
    assert any(not np.array_equal(free["params"][k], want[k]) for k in want)


def test_clip_modes_with_a_huge_bound_are_plain_sgd(data):
    cfg = get_config("tiny")
    free = train(cfg, data, epochs=1, lr=0.1, seed=2, progress=False)
    for mode in CLIP_MODES:
        r = train(cfg, data, epochs=1, lr=0.1, seed=2, clip=1e30, clip_mode=mode,
                  progress=False)
        for k in free["params"]:
            np.testing.assert_array_equal(r["params"][k], free["params"][k])


def test_clip_mode_validation(data):
    from ttrain.golden.stepper import InterpreterStepper
    with pytest.raises(ValueError, match="unknown clip_mode 'norm'"):
        train(get_config("tiny"), data, epochs=1, clip=1.0, clip_mode="norm", progress=False)
    with pytest.raises(ValueError, match="golden fast path only"):
        train(get_config("tiny"), data, epochs=1, clip=1.0, clip_mode="lagged",
              stepper=InterpreterStepper(), progress=False)


def test_not_chip_runnable_lists_each_option():
    cfg = get_config("tiny")
    assert not_chip_runnable(cfg, batch_size=1) == []
    assert not_chip_runnable(get_config("demo"), batch_size=1) == []
    for mode in CLIP_MODES:
        [(opt, why)] = not_chip_runnable(cfg, batch_size=1, clip=1.0, clip_mode=mode)
        assert opt == f"clip 1 ({mode})" and "not compiled" in why
    opts = [o for o, _ in not_chip_runnable(
        cfg.with_(dropout=0.1, label_smoothing=0.1, logit_adjustment=1.0, pooling="mean",
                  slot_head=True), batch_size=8, average=0.5, balance=0.3, unk_alpha=1.0)]
    assert opts == ["dropout 0.1", "label_smoothing 0.1", "logit_adjustment 1",
                    "pooling mean", "slot_head", "batch_size 8", "average 0.5",
                    "balance 0.3", "unk_alpha 1"]


@pytest.mark.parametrize("name,epochs,word_dropout", [("paper-l1", 24, 0.15), ("paper-l2", 16, 0.1)])
def test_atis_presets_are_the_documented_chip_runnable_settings(name, epochs, word_dropout):
    # docs/atis-training.md: the settings of the seed table (paper-l1: word dropout 0.15 since
    # its protocol run; paper-l2 unchanged); every one of them chip-runnable at batch 1
    cfg = get_config(name)
    assert (cfg.lr, cfg.epochs, cfg.batch, cfg.dropout) == (0.02, epochs, 1, 0.0)
    assert {k: cfg.extra[k] for k in ("schedule", "warmup", "word_dropout")} == \
        {"schedule": "linear", "warmup": 0.05, "word_dropout": word_dropout}
    assert "clip" not in cfg.extra
    assert set(cfg.extra["init_scale"].values()) == {0.1}
    assert not_chip_runnable(cfg, batch_size=1) == []


def test_result_history_and_summary_report_chip_runnability(data, tmp_path, capsys):
    r = train(get_config("tiny"), data, epochs=1, progress=False, schedule="linear",
              warmup=0.1, word_dropout=0.2)
    assert r["chip_runnable"] and r["not_chip_runnable"] == []
    r = train(get_config("tiny"), data, epochs=1, progress=False, clip=1.0, out_dir=tmp_path)
    assert not r["chip_runnable"] and r["not_chip_runnable"][0][0] == "clip 1 (global)"
    meta = json.loads((tmp_path / "history.json").read_text())
    assert meta["chip_runnable"] is False and meta["not_chip_runnable"][0][0] == "clip 1 (global)"
    assert meta["clip_mode"] == "global"

    data.save(tmp_path / "d")
    base = ["train", "--config", "tiny", "--data", str(tmp_path / "d"), "--epochs", "1",
            "--no-progress"]
    assert main(base + ["--schedule", "linear", "--warmup", "0.1", "--word-dropout", "0.1"]) == 0
    out = capsys.readouterr().out
    assert "\nchip-runnable: yes" in out and "(linear, warm-up 0.1)" in out
    assert "word dropout 0.1" in out
    assert main(base + ["--clip", "1", "--clip-mode", "tensor"]) == 0
    out = capsys.readouterr().out
    assert "clip 1.0 (tensor)" in out and "\nnot chip-runnable: clip 1 (tensor) (" in out


@pytest.mark.parametrize("argv, message", [
    (["--warmup", "1"], "--warmup must be a fraction in [0, 1)"),
    (["--word-dropout", "-0.1"], "--word-dropout must be a fraction in [0, 1)"),
    (["--engine", "interpreter", "--clip-mode", "tensor"], "--clip-mode is not available"),
])
def test_new_flags_are_checked(argv, message, capsys):
    assert main(["train", "--config", "tiny", *argv]) == 2
    assert message in capsys.readouterr().err
