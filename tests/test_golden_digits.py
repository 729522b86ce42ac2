"""The digits data and digits-C (golden/digits.py): fixed disjoint splits, deterministic seeded
corruptions, and a clean-trained baseline that every corruption measurably hurts."""

import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest

from ttrain.golden import digits as D

SPLITS = ("train", "val", "test")
#: The corruptions that draw nothing from the generator (the seed does not change them).
DETERMINISTIC = {"gaussian_blur", "zoom_blur", "contrast", "brightness", "saturate",
                 "solarize", "pixelate", "jpeg"}


def _digest(data):
    h = hashlib.sha256()
    for name in SPLITS:
        s = getattr(data, name)
        h.update(s.images.tobytes() + s.labels.tobytes() + s.index.tobytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def suite():
    """Every corruption at the default severity and seed 0, requested in table order."""
    return {name: D.load_digits_c(name) for name in D.CORRUPTIONS}


@pytest.fixture(scope="module")
def adapt_clean():
    return D.load_digits_clean("adapt")


def test_suite_size_and_names():
    assert len(D.CORRUPTIONS) >= 12
    assert set(D.CORRUPTIONS) == set(D.SEVERITY_PARAMS)
    for name, (param, values) in D.SEVERITY_PARAMS.items():
        assert len(values) == len(D.SEVERITIES), name
    assert D.DEFAULT_SEVERITY in D.SEVERITIES


@pytest.mark.parametrize("pool", ["pretrain", "adapt"])
def test_clean_splits_sizes_dtypes_and_values(pool):
    from sklearn.datasets import load_digits
    raw = load_digits()
    data = D.load_digits_clean(pool)
    assert data.pool == pool and data.corruption is None
    for name in SPLITS:
        s = getattr(data, name)
        assert len(s) == D.SPLIT_SIZES[(pool, name)]
        assert s.images.shape == (len(s), 8, 8) and s.images.dtype == np.float32
        assert s.labels.shape == (len(s),) and s.labels.dtype == np.int64
        assert s.index.dtype == np.int64 and np.all(np.diff(s.index) > 0)
        assert s.images.min() >= 0.0 and s.images.max() <= 1.0
        np.testing.assert_array_equal(s.images, (raw.images[s.index] / 16).astype(np.float32))
        np.testing.assert_array_equal(s.labels, raw.target[s.index])
    # The documented sizes (docs/digits-c.md) and the paper's "train >= test" spirit.
    assert [D.SPLIT_SIZES[(pool, n)] for n in SPLITS] == \
        ([597, 100, 100] if pool == "pretrain" else [500, 100, 400])


def test_splits_partition_the_data_stratified():
    _, labels = D._raw()
    parts = {(pool, name): getattr(D.load_digits_clean(pool), name).index
             for pool in ("pretrain", "adapt") for name in SPLITS}
    every = np.concatenate(list(parts.values()))
    assert len(every) == len(labels) == 1797
    np.testing.assert_array_equal(np.sort(every), np.arange(len(labels)))   # disjoint, cover
    share = np.bincount(labels, minlength=10) / len(labels)
    for key, idx in parts.items():
        counts = np.bincount(labels[idx], minlength=10)
        # Sequential largest-remainder allocation: within 1 of the exact class share.
        assert np.all(np.abs(counts - share * len(idx)) < 1), (key, counts)


def test_adaptation_test_images_never_seen_in_pretraining_or_adaptation(suite):
    pretrain = D.load_digits_clean("pretrain")
    seen_clean = np.concatenate([getattr(pretrain, n).index for n in SPLITS])
    for name, data in suite.items():
        assert np.intersect1d(data.test.index, seen_clean).size == 0, name
        assert np.intersect1d(data.test.index, data.train.index).size == 0, name
        assert np.intersect1d(data.test.index, data.val.index).size == 0, name
        assert np.intersect1d(data.train.index, data.val.index).size == 0, name
    # No test image is a pixel-for-pixel copy of a pre-training image either.
    raw, _ = D._raw()
    pre_rows = {raw[i].tobytes() for i in seen_clean}
    assert not any(raw[i].tobytes() in pre_rows for i in suite["jpeg"].test.index)


def test_corrupted_splits_keep_images_labels_and_range(suite, adapt_clean):
    for name, data in suite.items():
        assert (data.corruption, data.severity, data.seed) == (name, D.DEFAULT_SEVERITY, 0)
        for split in SPLITS:
            s, c = getattr(data, split), getattr(adapt_clean, split)
            np.testing.assert_array_equal(s.labels, c.labels)
            np.testing.assert_array_equal(s.index, c.index)
            assert s.images.dtype == np.float32 and s.images.shape == c.images.shape
            assert np.isfinite(s.images).all()
            assert s.images.min() >= 0.0 and s.images.max() <= 1.0, (name, split)


def test_deterministic_across_calls_and_request_order(suite):
    first = {name: _digest(data) for name, data in suite.items()}
    again = {name: _digest(D.load_digits_c(name)) for name in reversed(list(D.CORRUPTIONS))}
    assert again == first
    # A fresh interpreter with another hash seed, corruptions requested in reverse order.
    code = ("import hashlib, sys\nfrom ttrain.golden import digits as D\n"
            "for name in reversed(list(D.CORRUPTIONS)):\n"
            "    d = D.load_digits_c(name)\n    h = hashlib.sha256()\n"
            "    for s in (d.train, d.val, d.test):\n"
            "        h.update(s.images.tobytes() + s.labels.tobytes() + s.index.tobytes())\n"
            "    print(name, h.hexdigest())\n")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True, env={**os.environ, "PYTHONHASHSEED": "12345"}).stdout
    assert dict(line.split() for line in out.splitlines()) == first


def test_seed_changes_exactly_the_random_corruptions(suite):
    for name, data in suite.items():
        other = D.load_digits_c(name, seed=1)
        same = np.array_equal(other.train.images, data.train.images)
        assert same == (name in DETERMINISTIC), name


def test_every_corruption_changes_the_images_and_differs_from_the_others(suite, adapt_clean):
    clean = adapt_clean.test.images.astype(np.float64)
    names = list(suite)
    imgs = {n: suite[n].test.images.astype(np.float64) for n in names}
    for n in names:
        assert np.abs(imgs[n] - clean).mean() > 0.05, n
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert np.abs(imgs[a] - imgs[b]).mean() > 0.05, (a, b)


def test_higher_severity_moves_images_further(adapt_clean):
    clean = adapt_clean.test.images.astype(np.float64)
    for name in D.CORRUPTIONS:
        dist = [np.abs(D.load_digits_c(name, severity=s).test.images - clean).mean()
                for s in D.SEVERITIES]
        assert np.all(np.diff(dist) > 0), (name, dist)


def test_corruption_functions_are_pure(adapt_clean):
    x = adapt_clean.val.images.astype(np.float64)
    keep = x.copy()
    for name, f in D.CORRUPTIONS.items():
        a = f(x, np.random.default_rng(7), 3)
        b = f(x, np.random.default_rng(7), 3)
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(x, keep)
        assert a.shape == x.shape, name
        np.testing.assert_array_equal(
            D.corrupt(x, name, severity=3, seed=2),
            D.corrupt(x.astype(np.float32), name, severity=3, seed=2))


def test_corruption_definitions_spot_checks(adapt_clean):
    x = adapt_clean.val.images.astype(np.float64)
    rng = np.random.default_rng(0)
    offset = D.SEVERITY_PARAMS["brightness"][1][4]
    np.testing.assert_allclose(D.corrupt(x, "brightness"), np.clip(x + offset, 0, 1),
                               rtol=0, atol=1e-7)
    np.testing.assert_allclose(D.contrast(x, rng, 5).mean(axis=(1, 2)), x.mean(axis=(1, 2)))
    # Pixelate at an integer side that divides 8 is the block mean, repeated.
    down = D._area_matrix(4.0, 8)
    block = x.reshape(-1, 4, 2, 4, 2).mean(axis=(2, 4)).repeat(2, axis=1).repeat(2, axis=2)
    np.testing.assert_allclose(np.einsum("ij,njk,lk->nil", np.repeat(down, 2, axis=0), x,
                                         np.repeat(down, 2, axis=0)), block)
    d = D._dct_matrix()
    np.testing.assert_allclose(d @ d.T, np.eye(8), atol=1e-12)
    # Impulse noise only writes 0 or 1; where it writes, the pixel is one of them.
    y = D.impulse_noise(x, rng, 5)
    changed = y != x
    assert changed.any() and np.isin(y[changed], (0.0, 1.0)).all()


@pytest.fixture(scope="module")
def baseline():
    return D.baseline()


def test_baseline_far_above_chance_and_every_corruption_hurts(baseline):
    clean = baseline["clean"]
    assert baseline["clean_pretrain_test"]["logistic"] > 0.85
    assert clean["logistic"] > 0.85 and clean["centroid"] > 0.80     # chance is 0.10
    drops = []
    for name in D.CORRUPTIONS:
        acc = baseline[name]["logistic"]
        assert acc < clean["logistic"] - 0.05, (name, acc)          # loses clearly ...
        assert acc > 0.25, (name, acc)                              # ... but not totally
        drops.append(clean["logistic"] - acc)
    # A mix of mild and severe drops.
    assert min(drops) < 0.15 and max(drops) > 0.45


def test_main_prints_the_table(capsys):
    D.main(["--severity", "2", "--seed", "3"])
    out = capsys.readouterr().out
    assert "severity 2" in out
    for name in D.CORRUPTIONS:
        assert f"| {name} |" in out


@pytest.mark.parametrize("call, message", [
    (lambda: D.load_digits_c("fog"), "unknown corruption 'fog'; valid: gaussian_noise, "),
    (lambda: D.load_digits_c(None), "unknown corruption None; valid: "),
    (lambda: D.load_digits_c("jpeg", severity=0), "severity must be an integer 1..5, not 0"),
    (lambda: D.load_digits_c("jpeg", severity=6), "severity must be an integer 1..5, not 6"),
    (lambda: D.load_digits_c("jpeg", severity=2.0), "severity must be an integer 1..5"),
    (lambda: D.load_digits_c("jpeg", severity=True), "severity must be an integer 1..5"),
    (lambda: D.load_digits_c("jpeg", seed=-1), "seed must be a non-negative integer, not -1"),
    (lambda: D.load_digits_c("jpeg", seed=0.5), "seed must be a non-negative integer"),
    (lambda: D.load_digits_c("jpeg", seed="0"), "seed must be a non-negative integer"),
    (lambda: D.load_digits_clean("test"), "pool must be 'pretrain' or 'adapt', not 'test'"),
    (lambda: D.corrupt(np.zeros((2, 64)), "jpeg"), "images must have shape (n, 8, 8)"),
    (lambda: D.baseline(severity=9), "severity must be an integer 1..5, not 9"),
])
def test_bad_arguments_rejected_with_a_one_line_message(call, message):
    with pytest.raises(ValueError) as err:
        call()
    text = str(err.value)
    assert text.startswith(message) and "\n" not in text
    if "unknown corruption" in message:
        assert all(name in text for name in D.CORRUPTIONS)


def test_a_different_copy_of_the_digits_is_refused(monkeypatch):
    import sklearn.datasets
    real = sklearn.datasets.load_digits

    def altered():
        bunch = real()
        bunch.images = bunch.images.copy()
        bunch.images[0, 0, 0] = 16 - bunch.images[0, 0, 0]
        return bunch

    monkeypatch.setattr(sklearn.datasets, "load_digits", altered)
    D._raw.cache_clear()
    try:
        with pytest.raises(ValueError, match="SHA-256 .* is not the expected"):
            D._raw()
    finally:
        monkeypatch.undo()
        D._raw.cache_clear()
    assert D._raw()[0].shape == (1797, 8, 8)


def test_import_ttrain_pins_the_float_kernels():
    """`import ttrain` before numpy pins OpenBLAS's kernel family on x86-64 (the float
    pre-training and BP references then sum in one order on every machine with AVX2:
    docs/zo-results.md, fifth round); elsewhere it sets nothing."""
    import platform
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    code = ("import ttrain, os, numpy, threadpoolctl\n"
            "print(os.environ.get('OPENBLAS_CORETYPE'))\n"
            "print(*[i.get('architecture') for i in threadpoolctl.threadpool_info()\n"
            "        if i.get('internal_api') == 'openblas'])\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout.split("\n")
    if platform.machine().lower() in ("x86_64", "amd64"):
        assert out[:2] == ["Haswell", "Haswell"], out
    else:
        assert out[0] == "None", out
