"""SGD training loop, metrics, schedules and checkpoints."""

import json

import numpy as np
import pytest

from ttrain.golden import model
from ttrain.golden.config import get_config
from ttrain.golden.data import generate_dataset
from ttrain.golden.train import (conll_spans, config_from_dict, config_to_dict, epoch_order,
                                 load_checkpoint, lr_at, save_checkpoint, slot_f1, train)


# ---------------------------------------------------------------------------- metrics


@pytest.mark.parametrize("tags, spans", [
    (["B-a", "I-a", "O", "B-b"], {("a", 0, 2), ("b", 3, 4)}),
    (["I-a", "I-a"], {("a", 0, 2)}),                   # conlleval: I- may open a chunk
    (["B-a", "I-b"], {("a", 0, 1), ("b", 1, 2)}),      # type change closes and opens
    (["B-a", "B-a", "I-a"], {("a", 0, 1), ("a", 1, 3)}),
    (["O", "UNK", "PAD"], set()),                      # prefix-less tags are outside
    (["O", "I-x.y", "O", "B-x.y"], {("x.y", 1, 2), ("x.y", 3, 4)}),
])
def test_conll_spans(tags, spans):
    assert conll_spans(tags) == spans


def test_slot_f1_by_hand():
    labels = ["PAD", "UNK", "O", "B-a", "I-a", "B-b"]
    # sentence 1: gold a[0:2] b[3]; predicted a[0:2] only      -> 1 right of 1 predicted, 2 gold
    # sentence 2: gold b[0]; predicted a[0] (wrong type)         -> 0 right of 1 predicted, 1 gold
    gold = np.array([[-1, 3, 4, 2, 5, -1], [-1, 5, -1, -1, -1, -1]])
    pred = np.array([[5, 3, 4, 2, 2, 5], [0, 3, 5, 5, 5, 5]])   # ignored positions differ freely
    p, r, f = slot_f1(gold, pred, labels)
    assert (p, r) == (1 / 2, 1 / 3)
    assert f == pytest.approx(2 * (1 / 2) * (1 / 3) / (1 / 2 + 1 / 3))
    assert slot_f1(gold, gold, labels) == (1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="differ"):
        slot_f1(gold, pred[:1], labels)


def test_lr_schedules():
    assert [lr_at(s, 4, 0.1) for s in range(4)] == [0.1] * 4
    assert [lr_at(s, 4, 0.4, "linear") for s in range(4)] == pytest.approx([0.4, 0.3, 0.2, 0.1])
    assert [lr_at(s, 4, 0.4, "linear", warmup=0.5) for s in range(4)] == pytest.approx(
        [0.2, 0.4, 0.4, 0.2])
    with pytest.raises(ValueError, match="unknown schedule"):
        lr_at(0, 4, 0.1, "cosine")


# ---------------------------------------------------------------------------- checkpoints


def _fake_params(rng):
    return {"embedding.core0": rng.standard_normal((1, 4, 2, 4)).astype(np.float32),
            "enc0.q.bias": rng.standard_normal(32).astype(np.float32),
            "intent.weight": rng.standard_normal((32, 8)).astype(np.float32)}


def test_config_dict_round_trip():
    for name in ("tiny", "small", "paper-l2-r10"):
        cfg = get_config(name)
        d = config_to_dict(cfg)
        assert json.loads(json.dumps(d)) == d
        assert config_from_dict(d) == cfg


def test_checkpoint_round_trip_and_wrong_config(tmp_path):
    tiny = get_config("tiny")
    params = _fake_params(np.random.default_rng(0))
    ds = generate_dataset(seed=0, n_train=30, n_dev=5, n_test=5)
    path = save_checkpoint(tmp_path / "sub" / "c.npz", tiny, params, vocab=ds.vocab,
                           intent_labels=ds.intent_labels, slot_labels=ds.slot_labels,
                           meta={"epoch": 3, "dev": {"intent_acc": 0.5}})
    ck = load_checkpoint(path, tiny)
    assert ck["cfg"] == tiny and ck["meta"] == {"epoch": 3, "dev": {"intent_acc": 0.5}}
    assert ck["vocab"] == ds.vocab and ck["intent_labels"] == ds.intent_labels
    assert ck["slot_labels"] == ds.slot_labels
    assert sorted(ck["params"]) == sorted(params)
    for k, v in params.items():
        assert ck["params"][k].dtype == v.dtype
        np.testing.assert_array_equal(ck["params"][k], v)
    # hyperparameters may differ; names and shapes may not
    assert load_checkpoint(path, tiny.with_(lr=0.5, epochs=9, batch=4))["cfg"] == tiny
    with pytest.raises(ValueError, match="written for config 'tiny'.*--config tiny"):
        load_checkpoint(path, get_config("small"))
    with pytest.raises(ValueError, match="n_intents: checkpoint 8 vs config 9"):
        load_checkpoint(path, tiny.with_(n_intents=9))
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path / "missing.npz")
    np.savez(tmp_path / "other.npz", a=np.zeros(3))
    with pytest.raises(ValueError, match="not a ttrain checkpoint"):
        load_checkpoint(tmp_path / "other.npz")


# ---------------------------------------------------------------------------- training


@pytest.fixture(scope="module")
def generated():
    return generate_dataset(seed=0)


def test_train_tiny_learns_generated(generated, tmp_path):
    tiny = get_config("tiny")
    # tiny's rank-4 TT layers learn slowly at batch 1; mini-batches of 8 with a clipped step
    # of 0.3 reach about 75 % in 3 epochs (docs/training.md)
    result = train(tiny, generated, epochs=3, lr=0.3, batch_size=8, clip=1.0, seed=0,
                   out_dir=tmp_path, progress=False)
    chance = 1 / (generated.n_intents - 1)             # 7 intents occur, evenly drawn
    hist = result["history"]
    assert len(hist) == 3 and result["best_epoch"] in (1, 2, 3)
    assert hist[-1]["train_loss"] < hist[0]["train_loss"] - 0.5
    assert result["test"]["intent_acc"] > 3.5 * chance
    assert result["dev"]["intent_acc"] == max(h["dev_acc"] for h in hist)
    for name in ("best.npz", "history.json", "curves.png"):
        assert (tmp_path / name).stat().st_size > 0
    ck = load_checkpoint(result["checkpoint"], tiny)
    for k, v in result["params"].items():
        np.testing.assert_array_equal(ck["params"][k], v)
    assert ck["meta"]["best_epoch"] == result["best_epoch"]
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_train_deterministic_and_slot_head():
    ds = generate_dataset(seed=2, n_train=96, n_dev=16, n_test=16)
    tiny = get_config("tiny")
    runs = [train(tiny, ds, epochs=1, lr=0.05, seed=4, batch_size=8, slot_head=True,
                  progress=False, schedule="linear") for _ in range(2)]
    assert runs[0]["cfg"].slot_head
    assert runs[0]["history"][0]["train_loss"] == runs[1]["history"][0]["train_loss"]
    for k, v in runs[0]["params"].items():
        np.testing.assert_array_equal(runs[1]["params"][k], v)
    assert 0.0 <= runs[0]["test"]["slot_f1"] <= 1.0
    other = train(tiny, ds, epochs=1, lr=0.05, seed=5, batch_size=8, progress=False)
    assert any(not np.array_equal(other["params"][k], v) for k, v in runs[0]["params"].items())


def test_train_adapts_label_counts_and_validates(generated):
    tiny = get_config("tiny")
    ds = generate_dataset(seed=1, n_train=16, n_dev=4, n_test=4)
    ds.intent_labels = ds.intent_labels + ["extra"]     # 9 classes: config follows the data
    result = train(tiny, ds, epochs=1, lr=0.05, seed=0, progress=False)
    assert result["cfg"].n_intents == 9 and result["params"]
    with pytest.raises(ValueError, match="epochs"):
        train(tiny, generated, epochs=0, lr=0.1)
    with pytest.raises(ValueError, match="lr"):
        train(tiny, generated, epochs=1, lr=0.0)
    with pytest.raises(ValueError, match="batch_size"):
        train(tiny, generated, epochs=1, lr=0.1, batch_size=0)
    with pytest.raises(ValueError, match="schedule"):
        train(tiny, generated, epochs=1, lr=0.1, schedule="cosine")
    with pytest.raises(ValueError, match="seq_len 8"):
        train(get_config("small"), generated, epochs=1, lr=0.1)
    with pytest.raises(TypeError, match="Dataset"):
        train(tiny, {"train": None}, epochs=1, lr=0.1)


def test_tail_average_is_mean_of_iterates():
    # one step per epoch (the batch is the whole train split), constant lr, no clip: the
    # iterates can be recomputed with the model's own functions
    tiny = get_config("tiny")
    ds = generate_dataset(seed=3, n_train=12, n_dev=8, n_test=8)
    result = train(tiny, ds, epochs=2, lr=0.1, batch_size=12, seed=6, average=1.0,
                   progress=False)
    assert [h["averaged"] for h in result["history"]] == [True, True]
    p = model.init_params(tiny, np.random.default_rng(6))
    batch = {k: v for k, v in ds.batch("train").items() if k in ("tokens", "segments", "mask",
                                                                  "intent")}
    iterates = []
    for _ in range(2):
        _, g, _ = model.forward_backward(tiny, p, batch)
        model.sgd_update(p, g, 0.1)
        iterates.append({k: v.astype(np.float64) for k, v in p.items()})
    want = iterates[0] if result["best_epoch"] == 1 else {
        k: (iterates[0][k] + iterates[1][k]) / 2 for k in p}
    for k, v in result["params"].items():
        np.testing.assert_allclose(v, want[k], rtol=1e-5, atol=1e-6)


def test_word_dropout_changes_training_only():
    tiny = get_config("tiny")
    ds = generate_dataset(seed=3, n_train=48, n_dev=8, n_test=8)
    runs = {p: train(tiny, ds, epochs=1, lr=0.1, batch_size=8, seed=1, word_dropout=p,
                     progress=False) for p in (0.0, 0.5)}
    assert runs[0.0]["history"][0]["train_loss"] != runs[0.5]["history"][0]["train_loss"]
    with pytest.raises(ValueError, match="word_dropout"):
        train(tiny, ds, epochs=1, lr=0.1, word_dropout=1.0)
    with pytest.raises(ValueError, match="average"):
        train(tiny, ds, epochs=1, lr=0.1, average=1.5)


def test_epoch_order_rebalances_classes():
    labels = np.array([0] * 900 + [1] * 90 + [2] * 10)
    counts = {}
    for balance in (0.0, 0.5, 1.0):
        order = epoch_order(labels, balance, np.random.default_rng(0))
        assert len(order) == 1000 and order.min() >= 0 and order.max() < 1000
        counts[balance] = np.bincount(labels[order], minlength=3)
    # expected class shares: count^(1 - balance), normalized
    assert abs(counts[0.0][0] - 900) < 60
    assert abs(counts[0.5][2] - 1000 * 10 ** 0.5 / (30 + 90 ** 0.5 + 10 ** 0.5)) < 30
    assert np.all(np.abs(counts[1.0] - 1000 / 3) < 60)


def test_balance_resamples_rare_intents():
    tiny = get_config("tiny")
    ds = generate_dataset(seed=3, n_train=48, n_dev=8, n_test=8)
    # make one intent rare: keep 2 of its sentences in train (rows dropped from every array)
    train_split = ds.splits["train"]
    rare = train_split["intent"] == 1
    keep = ~rare | (np.cumsum(rare) <= 2)
    ds.splits["train"] = {k: v[keep] for k, v in train_split.items()}
    plain = train(tiny, ds, epochs=1, lr=0.1, batch_size=8, seed=1, progress=False)
    balanced = train(tiny, ds, epochs=1, lr=0.1, batch_size=8, seed=1, balance=1.0,
                     progress=False)
    assert plain["balance"] == 0 and balanced["balance"] == 1.0
    assert plain["history"][0]["train_loss"] != balanced["history"][0]["train_loss"]
    with pytest.raises(ValueError, match="balance"):
        train(tiny, ds, epochs=1, lr=0.1, balance=-0.5)


def test_model_dropout_uses_its_own_stream_in_training_only():
    # one full-batch step per epoch, constant lr: the step is recomputed with the model's own
    # functions and the documented generator default_rng([seed, 3]) for the dropout masks
    tiny = get_config("tiny").with_(dropout=0.3, label_smoothing=0.1, pooling="mean")
    ds = generate_dataset(seed=3, n_train=12, n_dev=8, n_test=8)
    result = train(tiny, ds, epochs=1, lr=0.1, batch_size=12, seed=6, progress=False)
    p = model.init_params(tiny, np.random.default_rng(6))
    # the epoch's (shuffled) batch, as train draws it: the masks follow the sentence order
    (full,) = ds.batches("train", 12, seed=np.random.default_rng([6, 1]))
    batch = {k: full[k] for k in ("tokens", "segments", "mask", "intent")}
    _, g, _ = model.forward_backward(tiny, p, batch, rng=np.random.default_rng([6, 3]))
    model.sgd_update(p, g, 0.1)
    for k, v in result["params"].items():
        np.testing.assert_allclose(v, p[k], rtol=1e-6, atol=1e-7)
    # evaluation is deterministic (no dropout): re-evaluating the result gives its numbers
    from ttrain.golden.train import evaluate
    assert evaluate(tiny, result["params"], ds, "dev") == result["dev"]
    # without dropout the step differs
    plain = train(tiny.with_(dropout=0.0), ds, epochs=1, lr=0.1, batch_size=12, seed=6,
                  progress=False)
    assert any(not np.allclose(plain["params"][k], v) for k, v in result["params"].items())


def test_checkpoint_without_new_fields_still_loads(tmp_path):
    # checkpoints written before dropout/label_smoothing/pooling existed lack those keys
    tiny = get_config("tiny")
    params = _fake_params(np.random.default_rng(1))
    ds = generate_dataset(seed=0, n_train=30, n_dev=5, n_test=5)
    path = save_checkpoint(tmp_path / "c.npz", tiny, params, vocab=ds.vocab,
                           intent_labels=ds.intent_labels, slot_labels=ds.slot_labels)
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    old = json.loads(str(arrays["config_json"]))
    for key in ("dropout", "label_smoothing", "pooling"):
        del old[key]
    arrays["config_json"] = np.array(json.dumps(old))
    np.savez(tmp_path / "old.npz", **arrays)
    assert load_checkpoint(tmp_path / "old.npz", tiny)["cfg"] == tiny
    # dropout and smoothing are hyperparameters; pooling changes the model
    assert load_checkpoint(path, tiny.with_(dropout=0.2, label_smoothing=0.1))["cfg"] == tiny
    with pytest.raises(ValueError, match="pooling: checkpoint 'cls' vs config 'mean'"):
        load_checkpoint(path, tiny.with_(pooling="mean"))


def test_unk_probabilities_and_frequency_word_dropout():
    from collections import Counter

    from ttrain.golden.train import unk_probabilities
    ds = generate_dataset(seed=3, n_train=48, n_dev=8, n_test=8)
    p = unk_probabilities(ds, 2.0)
    # counts recomputed from the raw text: every train word is in the (128-row) vocabulary
    counts = Counter(w for s in ds.raw["train"].words for w in s[:ds.seq_len - 1])
    assert p.shape == (ds.vocab_size,)
    assert p[:3].tolist() == [0.0, 0.0, 0.0]
    for i, w in enumerate(ds.vocab[3:], start=3):
        want = 2.0 / (2.0 + counts[w]) if counts[w] else 0.0
        assert p[i] == pytest.approx(want), w
    with pytest.raises(ValueError, match="alpha must be positive"):
        unk_probabilities(ds, 0.0)
    tiny = get_config("tiny")
    runs = {a: train(tiny, ds, epochs=1, lr=0.1, batch_size=8, seed=1, word_dropout=0.1,
                     unk_alpha=a, progress=False) for a in (0.0, 3.0)}
    assert runs[0.0]["history"][0]["train_loss"] != runs[3.0]["history"][0]["train_loss"]
    assert runs[3.0]["unk_alpha"] == 3.0
    with pytest.raises(ValueError, match=r"unk_alpha must be a number in \[0, 100\]"):
        train(tiny, ds, epochs=1, lr=0.1, unk_alpha=-1.0)
