"""Data loader (real ATIS directory) and the built-in generated data set."""

import os
from pathlib import Path

import numpy as np
import pytest

from ttrain.golden.config import get_config
from ttrain.golden.data import (CLS, PAD, SPECIAL_TOKENS, UNK, build_vocab, first_intent,
                                generate_dataset, load_dataset)

from conftest import shared_data

ATIS = shared_data("atis")


def _lines(name):
    return (ATIS / name).read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module")
def atis():
    # room for every train word (867 + 3 specials) and every sentence (max 46 words)
    return load_dataset(ATIS, seq_len=48, vocab_size=1024)


def test_atis_counts_match_readme(atis):
    assert [atis.size(s) for s in ("train", "dev", "test")] == [4478, 500, 893]
    assert atis.n_intents == 22 and atis.intent_labels[0] == "UNK"
    assert atis.n_slots == 122 and atis.slot_labels[:2] == ["PAD", "UNK"]
    # README: 867 train words (+ 3 specials)
    assert atis.vocab_size == 867 + len(SPECIAL_TOKENS)
    assert atis.vocab[:3] == list(SPECIAL_TOKENS) and (PAD, UNK, CLS) == (0, 1, 2)


def test_atis_majority_and_multi_intent(atis):
    labels = atis.intent_labels
    test = atis.batch("test")
    raw = _lines("test.label")
    # majority baseline of the README (first-listed rule): 72.2 %
    majority = np.bincount(test["intent"]).max() / len(raw)
    assert round(100 * majority, 1) == 72.2
    for i, line in enumerate(raw):
        first = line.split("#")[0]
        want = labels.index(first) if first in labels else 0
        assert test["intent"][i] == want
        assert test["intent_exact"][i] == (labels.index(line) if line in labels else 0)
    multi = [i for i, line in enumerate(raw) if "#" in line]
    assert len(multi) == 15
    i = raw.index("atis_flight#atis_airline")          # combination not in intent_label.txt
    assert labels[test["intent"][i]] == "atis_flight" and test["intent_exact"][i] == 0
    i = raw.index("atis_flight#atis_airfare")          # combination listed in intent_label.txt
    assert labels[test["intent"][i]] == "atis_flight"
    assert labels[test["intent_exact"][i]] == "atis_flight#atis_airfare"
    assert "atis_day_name" not in labels
    assert all(test["intent"][i] == 0 for i, line in enumerate(raw) if line == "atis_day_name")


def test_atis_encoding_oov_and_slots(atis):
    train_words = {w for line in _lines("train.seq.in") for w in line.split()}
    sentences, tags = _lines("test.seq.in"), _lines("test.seq.out")
    test = atis.batch("test")
    assert test["tokens"].dtype == np.int64 and test["mask"].dtype == bool
    assert np.all(test["tokens"][:, 0] == CLS) and np.all(test["segments"] == 0)
    oov_types = set()
    for i, s in enumerate(sentences):
        words = s.split()
        k = len(words)
        assert np.array_equal(test["mask"][i], np.arange(atis.seq_len) <= k)
        assert np.all(test["tokens"][i, k + 1:] == PAD)
        for j, w in enumerate(words):
            tok = test["tokens"][i, j + 1]
            if w in train_words:
                assert atis.vocab[tok] == w
            else:
                assert tok == UNK
                oov_types.add(w)
        slots = test["slots"][i]
        assert slots[0] == -1 and np.all(slots[k + 1:] == -1)
        for j, t in enumerate(tags[i].split()):
            want = atis.slot_labels.index(t) if t in atis.slot_labels else 1
            assert slots[j + 1] == want
    assert len(oov_types) == 56                        # README: 56 test words out of vocabulary


def test_atis_truncation_and_small_vocab():
    ds = load_dataset(ATIS, seq_len=6, vocab_size=20)
    assert ds.vocab_size == 20
    sentences = _lines("train.seq.in")
    counts = {}
    for s in sentences:
        for w in s.split():
            counts[w] = counts.get(w, 0) + 1
    top = sorted(counts, key=lambda w: (-counts[w], w))[:17]
    assert ds.vocab[3:] == top
    train = ds.batch("train")
    longest = max(range(len(sentences)), key=lambda i: len(sentences[i].split()))
    words = sentences[longest].split()[:5]
    want = [CLS] + [ds.vocab.index(w) if w in top else UNK for w in words]
    assert train["tokens"][longest].tolist() == want
    assert np.all(train["mask"][longest]) and np.all(train["slots"][longest][1:] >= 0)


def test_build_vocab_tie_break_and_too_small():
    assert build_vocab([["b", "a", "c"], ["c", "b"]], 5) == list(SPECIAL_TOKENS) + ["b", "c"]
    with pytest.raises(ValueError, match="too small"):
        build_vocab([["a"]], 3)
    with pytest.raises(ValueError, match="too small"):
        load_dataset(ATIS, seq_len=8, vocab_size=2)
    assert first_intent("a#b#c") == "a"


def _copy(src, dst, names):
    dst.mkdir(exist_ok=True)
    for name in names:
        (dst / name).write_text((src / name).read_text(encoding="utf-8"), encoding="utf-8")


FILES = [f"{s}.{e}" for s in ("train", "dev", "test") for e in ("seq.in", "seq.out", "label")]


def test_loader_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_dataset(tmp_path / "nope", seq_len=8, vocab_size=64)
    ds = generate_dataset(seed=3, n_train=20, n_dev=5, n_test=5)
    ds.save(tmp_path / "d")
    os.remove(tmp_path / "d" / "dev.seq.out")
    with pytest.raises(FileNotFoundError, match="dev.seq.out"):
        load_dataset(tmp_path / "d", seq_len=8, vocab_size=64)
    ds.save(tmp_path / "d")
    lines = (tmp_path / "d" / "test.label").read_text().splitlines()
    (tmp_path / "d" / "test.label").write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(ValueError, match="5/5/4 lines"):
        load_dataset(tmp_path / "d", seq_len=8, vocab_size=64)
    ds.save(tmp_path / "d")
    tags = (tmp_path / "d" / "train.seq.out").read_text().splitlines()
    tags[2] += " O"
    (tmp_path / "d" / "train.seq.out").write_text("\n".join(tags) + "\n")
    with pytest.raises(ValueError, match="line 3 has"):
        load_dataset(tmp_path / "d", seq_len=8, vocab_size=64)
    with pytest.raises(ValueError, match="config or both"):
        load_dataset(ATIS)


def test_generated_deterministic_and_sized_for_tiny():
    tiny = get_config("tiny")
    a, b = generate_dataset(seed=0), generate_dataset(seed=0)
    c = generate_dataset(seed=1)
    for split in ("train", "dev", "test"):
        for key in a.splits[split]:
            assert np.array_equal(a.splits[split][key], b.splits[split][key])
    assert not np.array_equal(a.splits["train"]["tokens"], c.splits["train"]["tokens"])
    assert [a.size(s) for s in ("train", "dev", "test")] == [1200, 200, 200]
    assert a.n_intents == tiny.n_intents and a.n_slots <= 8 and a.n_slots == tiny.n_slots
    words = {w for s in a.raw.values() for sent in s.words for w in sent}
    assert len(words) + len(SPECIAL_TOKENS) <= tiny.vocab
    assert a.vocab_size <= tiny.vocab and a.seq_len == tiny.seq_len
    assert max(len(sent) for s in a.raw.values() for sent in s.words) <= tiny.seq_len - 1
    # every real intent is well represented; UNK (label-file slot 0) is never a target
    counts = np.bincount(a.splits["train"]["intent"], minlength=a.n_intents)
    assert counts[0] == 0 and np.all(counts[1:] > 100)
    # every tag is a known one and every word has one
    train = a.batch("train")
    assert np.all((train["slots"] >= 0) == (train["mask"] & (np.arange(8) > 0)))
    assert np.all(train["slots"][train["slots"] >= 0] >= 2)


def test_generated_label_noise():
    clean = generate_dataset(seed=5, label_noise=0.0)
    noisy = generate_dataset(seed=5, label_noise=0.2)
    # same sentences (the noise draw follows the sentence draw), some labels flipped
    flipped = np.mean(clean.splits["train"]["intent"] != noisy.splits["train"]["intent"])
    assert 0.1 < flipped < 0.3
    with pytest.raises(ValueError, match="label_noise"):
        generate_dataset(label_noise=1.0)
    with pytest.raises(ValueError, match="n_train"):
        generate_dataset(n_train=0)


def test_generated_disk_round_trip(tmp_path):
    ds = generate_dataset(seed=7)
    ds.save(tmp_path)
    assert sorted(os.listdir(tmp_path)) == sorted(FILES + ["intent_label.txt", "slot_label.txt"])
    back = load_dataset(tmp_path, get_config("tiny"))
    assert back.vocab == ds.vocab and back.intent_labels == ds.intent_labels
    assert back.slot_labels == ds.slot_labels and back.raw == ds.raw
    for split in ("train", "dev", "test"):
        for key, value in ds.splits[split].items():
            np.testing.assert_array_equal(back.splits[split][key], value)


def test_batches_seeded_and_complete():
    ds = generate_dataset(seed=0, n_train=50, n_dev=5, n_test=5)
    first = [b["intent"].tolist() for b in ds.batches("train", 16, seed=4)]
    again = [b["intent"].tolist() for b in ds.batches("train", 16, seed=4)]
    assert first == again and [len(b) for b in first] == [16, 16, 16, 2]
    rows = np.concatenate([b["tokens"] for b in ds.batches("train", 16, seed=4)])
    assert sorted(map(tuple, rows.tolist())) == sorted(map(tuple, ds.batch("train")["tokens"]
                                                           .tolist()))
    assert len(list(ds.batches("train", 16, seed=4, drop_last=True))) == 3
    with pytest.raises(ValueError, match="batch_size"):
        next(ds.batches("train", 0))
    with pytest.raises(ValueError, match="unknown split"):
        ds.batch("valid")
    assert np.array_equal(ds.encode("flights to " + ds.vocab[5]),
                          [CLS, ds.vocab.index("flights"), ds.vocab.index("to"), 5, 0, 0, 0, 0])


def test_atis_with_small_preset():
    small = get_config("small")
    ds = load_dataset(ATIS, small)
    assert ds.seq_len == small.seq_len and ds.vocab_size == small.vocab
    train = ds.batch("train")
    lengths = np.array([len(w) for w in ds.raw["train"].words])
    assert np.array_equal(train["mask"].sum(1), np.minimum(lengths, small.seq_len - 1) + 1)
