"""The 8x8 handwritten digits and digits-C, a seeded corruption suite in the spirit of CIFAR-10-C.

Source: the 1,797 8x8 digit images that scikit-learn ships inside its wheel
(:func:`sklearn.datasets.load_digits`, values 0..16, ten classes of 174..183 images); nothing is
downloaded. The loader checks the images and labels against :data:`DIGITS_SHA256`, so a
changed copy cannot silently change every split below.

Splits (fixed, independent of ``seed``; ``docs/digits-c.md`` gives the reasons):

* The 1,797 images are partitioned once, stratified by class with ``default_rng(SPLIT_SEED)``,
  into six disjoint parts: the **pre-training** pool (``train`` 597, ``val`` 100, ``test`` 100,
  clean only: :func:`load_digits_clean`) and the **adaptation** pool (``train`` 500, ``val``
  100, ``test`` 400: :func:`load_digits_c`). No image of the adaptation pool is used in
  pre-training, so a corrupted test image was never seen clean (as CIFAR-10-C is made from the
  CIFAR-10 test set only). Every corruption uses the same adaptation images, as every
  CIFAR-10-C corruption uses the same 10,000 test images.
* Within a part, images are in the order of their row in ``load_digits()`` (``Split.index``).

Corruptions: :data:`CORRUPTIONS` maps each name to a pure function ``f(images, rng, severity)``
of float64 images (n, 8, 8) in [0, 1], a :class:`numpy.random.Generator` and a severity 1..5
(:data:`SEVERITY_PARAMS` holds each one's parameter per severity); it returns new float64
images of the same shape, which :func:`load_digits_c` clips to [0, 1] and stores as float32.
The default severity is 5, as in the paper's CIFAR-10-C experiment, calibrated so that a
classifier trained on clean digits loses clearly but not totally (:func:`baseline`).

Determinism: the adaptation pool (all 1,000 images, in row order) is corrupted in one call with
``default_rng([seed, RNG_KEY, zlib.crc32(name)])``, then split; the result depends on
(corruption, severity, seed) only, not on the order corruptions are requested, on Python's hash
seed, or on the process. The same seed gives every severity the same random draws, so a higher
severity is the same corruption made stronger.

``python -m ttrain.golden.digits`` prints the baseline table (clean and per-corruption
accuracy of a logistic regression and a nearest-centroid classifier trained on the clean
pre-training split).
"""

import argparse
import hashlib
import numbers
import zlib
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType

import numpy as np
from scipy import ndimage

__all__ = ["DIGITS_SHA256", "SPLIT_SEED", "RNG_KEY", "SPLIT_SIZES", "SEVERITIES",
           "DEFAULT_SEVERITY", "SEVERITY_PARAMS", "CORRUPTIONS", "Split", "DigitsData",
           "load_digits_clean", "load_digits_c", "corrupt", "baseline", "format_baseline",
           "main"]

#: SHA-256 of the uint8 images (1797, 8, 8) followed by the uint8 labels, as scikit-learn ships
#: them (unchanged since the data set was added); checked on load.
DIGITS_SHA256 = "87ff0c9e40dc7e2c0e34e7257799c2e3f3aec1a016363bb11cad869ec428a826"
#: Seed of the one stratified partition into the six splits.
SPLIT_SEED = 20_260_513
#: Second word of every corruption generator's seed (``default_rng([seed, RNG_KEY, crc32])``).
RNG_KEY = 0x6469_6763   # "digc"
#: (pool, split) -> size; the parts are disjoint and cover all 1,797 images.
SPLIT_SIZES = MappingProxyType({
    ("pretrain", "train"): 597, ("pretrain", "val"): 100, ("pretrain", "test"): 100,
    ("adapt", "train"): 500, ("adapt", "val"): 100, ("adapt", "test"): 400})
SEVERITIES = (1, 2, 3, 4, 5)
DEFAULT_SEVERITY = 5
N_CLASSES = 10
SIDE = 8


# ---------------------------------------------------------------------------------------------
# Data and splits
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Split:
    """One split: ``images`` float32 (n, 8, 8) in [0, 1], ``labels`` int64 (n,) in 0..9 and
    ``index`` int64 (n,), each image's row in :func:`sklearn.datasets.load_digits`."""
    images: np.ndarray
    labels: np.ndarray
    index: np.ndarray

    def __len__(self):
        return len(self.labels)


@dataclass(frozen=True)
class DigitsData:
    """Train, validation and test splits of one pool; ``corruption`` is None for clean images
    (then ``severity`` and ``seed`` are None too)."""
    train: Split
    val: Split
    test: Split
    pool: str
    corruption: str | None = None
    severity: int | None = None
    seed: int | None = None


@lru_cache(maxsize=1)
def _raw():
    """Return the shipped images as uint8 (1797, 8, 8) and labels int64, read-only, checked."""
    from sklearn.datasets import load_digits      # the loader only; it reads the wheel's file
    bunch = load_digits()
    images = np.asarray(bunch.images)
    if not np.array_equal(images, np.round(images)) or images.min() < 0 or images.max() > 16:
        raise ValueError("sklearn load_digits: expected integer pixel values 0..16")
    images = images.astype(np.uint8)
    labels = np.asarray(bunch.target).astype(np.int64)
    digest = hashlib.sha256(images.tobytes() + labels.astype(np.uint8).tobytes()).hexdigest()
    if digest != DIGITS_SHA256:
        raise ValueError(f"sklearn load_digits: data SHA-256 {digest} is not the expected "
                         f"{DIGITS_SHA256} (another copy of the digits would change every split)")
    images.flags.writeable = False
    labels.flags.writeable = False
    return images, labels


def _stratified_partition(labels, sizes, rng):
    """Return one sorted int64 index array per entry of ``sizes`` (disjoint, exact sizes).

    Each class's rows are shuffled by ``rng`` (classes in increasing order); then the parts are
    taken in turn, each getting from every class its share of the part's size among the rows
    left (floor, the remainder to the classes with the largest fractional share, ties to the
    lower class), from the front of that class's shuffled rows.
    """
    if sum(sizes) != len(labels):
        raise ValueError(f"split sizes {sizes} do not sum to {len(labels)}")
    left = [list(rng.permutation(np.flatnonzero(labels == c))) for c in range(N_CLASSES)]
    parts = []
    for size in sizes:
        counts = np.array([len(rows) for rows in left])
        exact = counts * size / counts.sum()
        take = np.floor(exact).astype(np.int64)
        short = size - int(take.sum())
        order = sorted(range(N_CLASSES), key=lambda c: (-(exact[c] - take[c]), c))
        for c in order[:short]:
            take[c] += 1
        part = []
        for c in range(N_CLASSES):
            part += left[c][:take[c]]
            left[c] = left[c][take[c]:]
        parts.append(np.sort(np.array(part, dtype=np.int64)))
    return parts


@lru_cache(maxsize=1)
def _split_index():
    """Return {(pool, split): sorted row indices}, the fixed partition (read-only arrays)."""
    _, labels = _raw()
    keys = list(SPLIT_SIZES)
    parts = _stratified_partition(labels, [SPLIT_SIZES[k] for k in keys],
                                  np.random.default_rng(SPLIT_SEED))
    for p in parts:
        p.flags.writeable = False
    return dict(zip(keys, parts))


def _pool_index(pool):
    """Return the rows of ``pool`` in train, val, test order, and the three split lengths."""
    idx = _split_index()
    parts = [idx[(pool, s)] for s in ("train", "val", "test")]
    return np.concatenate(parts), [len(p) for p in parts]


def _make(pool, images, labels, index, lengths, **meta):
    """Cut the pool arrays (train, val, test order) into a :class:`DigitsData`."""
    cuts = np.cumsum([0, *lengths])
    splits = [Split(images=images[a:b].copy(), labels=labels[a:b].copy(),
                    index=index[a:b].copy()) for a, b in zip(cuts[:-1], cuts[1:])]
    return DigitsData(*splits, pool=pool, **meta)


def load_digits_clean(pool="pretrain"):
    """Return the clean splits of ``pool``: ``"pretrain"`` (597/100/100, for pre-training) or
    ``"adapt"`` (500/100/400: the images of :func:`load_digits_c` before corruption, for
    reference accuracies; never pre-train on them).

    Images float32 (n, 8, 8) = value / 16 in [0, 1]; labels int64.
    """
    if pool not in ("pretrain", "adapt"):
        raise ValueError(f"pool must be 'pretrain' or 'adapt', not {pool!r}")
    raw, labels = _raw()
    index, lengths = _pool_index(pool)
    images = (raw[index].astype(np.float32) / np.float32(16))
    return _make(pool, images, labels[index], index, lengths)


# ---------------------------------------------------------------------------------------------
# Corruptions: f(images float64 (n, 8, 8) in [0, 1], rng, severity) -> float64 (n, 8, 8)
# ---------------------------------------------------------------------------------------------

#: name -> (parameter name, its value at severity 1..5). Calibration: docs/digits-c.md.
SEVERITY_PARAMS = MappingProxyType({
    "gaussian_noise": ("sigma", (0.08, 0.12, 0.18, 0.26, 0.38)),
    "shot_noise": ("photons at white", (60.0, 25.0, 12.0, 6.0, 3.0)),
    "impulse_noise": ("fraction", (0.03, 0.06, 0.09, 0.17, 0.27)),
    "speckle_noise": ("sigma", (0.15, 0.25, 0.35, 0.5, 0.7)),
    "gaussian_blur": ("sigma px", (0.4, 0.55, 0.7, 0.85, 1.0)),
    "zoom_blur": ("zoom", (0.2, 0.4, 0.6, 0.8, 1.0)),
    "motion_blur": ("length px", (1.0, 1.5, 2.0, 2.5, 3.0)),
    "contrast": ("factor", (0.5, 0.4, 0.3, 0.23, 0.17)),
    "brightness": ("offset", (0.1, 0.2, 0.3, 0.4, 0.5)),
    "saturate": ("gain", (1.5, 2.0, 3.0, 5.0, 8.0)),
    "solarize": ("threshold x16", (15.5, 14.5, 13.5, 12.5, 11.5)),
    "pixelate": ("side px", (6.5, 5.5, 4.5, 4.0, 3.5)),
    "jpeg": ("quality", (30, 20, 12, 8, 5)),
    "elastic": ("displacement px", (0.4, 0.6, 0.8, 1.0, 1.2)),
    "rotate": ("degrees", (8.0, 13.0, 18.0, 23.0, 28.0)),
    "translate": ("shift px", (0.3, 0.45, 0.6, 0.75, 0.9)),
})


def _check_severity(severity):
    if (isinstance(severity, bool) or not isinstance(severity, numbers.Integral)
            or int(severity) not in SEVERITIES):
        raise ValueError(f"severity must be an integer 1..5, not {severity!r}")
    return int(severity)


def _param(name, severity):
    return SEVERITY_PARAMS[name][1][_check_severity(severity) - 1]


def _warp(images, dy, dx):
    """Sample each image at (row + dy, col + dx), bilinear, black (0) outside; dy, dx
    broadcast to (n, 8, 8)."""
    n = len(images)
    z, r, c = np.meshgrid(np.arange(n), np.arange(SIDE), np.arange(SIDE), indexing="ij")
    coords = np.stack([z.astype(np.float64),
                       r + np.broadcast_to(dy, images.shape),
                       c + np.broadcast_to(dx, images.shape)])
    return ndimage.map_coordinates(images, coords, order=1, mode="constant", cval=0.0)


def gaussian_noise(images, rng, severity):
    """Add i.i.d. normal noise of standard deviation sigma to every pixel."""
    return images + rng.normal(0.0, _param("gaussian_noise", severity), images.shape)


def shot_noise(images, rng, severity):
    """Photon (Poisson) noise: Poisson(x * photons) / photons, photons counted at white."""
    lam = _param("shot_noise", severity)
    return rng.poisson(images * lam) / lam


def impulse_noise(images, rng, severity):
    """Salt and pepper: each pixel independently, with probability fraction, set to 0 or 1
    (equally likely)."""
    p = _param("impulse_noise", severity)
    hit = rng.random(images.shape) < p
    salt = rng.random(images.shape) < 0.5
    return np.where(hit, salt.astype(np.float64), images)


def speckle_noise(images, rng, severity):
    """Multiplicative noise: x + x * N(0, sigma^2) (the background stays black)."""
    return images + images * rng.normal(0.0, _param("speckle_noise", severity), images.shape)


def gaussian_blur(images, rng, severity):
    """Gaussian filter of standard deviation sigma px, black outside (truncated at 4 sigma)."""
    s = _param("gaussian_blur", severity)
    return ndimage.gaussian_filter(images, sigma=(0, s, s), mode="constant", cval=0.0)


def zoom_blur(images, rng, severity):
    """Average of the image zoomed about its centre by 1 + t for t in 0, zoom / 5, ..., zoom
    (six copies, bilinear, black outside): radial streaks, as a camera zooming while exposing."""
    zoom = _param("zoom_blur", severity)
    c = (SIDE - 1) / 2
    r, q = np.meshgrid(np.arange(SIDE) - c, np.arange(SIDE) - c, indexing="ij")
    steps = np.linspace(0.0, zoom, 6)
    out = np.zeros_like(images)
    for t in steps:
        shrink = 1 / (1 + t) - 1            # output (r, q) samples the input at (r, q) / (1 + t)
        out += _warp(images, r * shrink, q * shrink)
    return out / len(steps)


def motion_blur(images, rng, severity):
    """Average along a line of the given length centred on each pixel, at an angle drawn
    uniformly in [0, 180) degrees per image (9 bilinear taps, black outside)."""
    length = _param("motion_blur", severity)
    theta = rng.uniform(0.0, np.pi, len(images))[:, None, None]
    out = np.zeros_like(images)
    offsets = np.linspace(-length / 2, length / 2, 9)
    for t in offsets:
        out += _warp(images, t * np.sin(theta), t * np.cos(theta))
    return out / len(offsets)


def contrast(images, rng, severity):
    """Shrink every image towards its own mean by factor: (x - mean) * factor + mean."""
    f = _param("contrast", severity)
    mean = images.mean(axis=(1, 2), keepdims=True)
    return (images - mean) * f + mean


def brightness(images, rng, severity):
    """Add offset to every pixel (the clip to [0, 1] then saturates the strokes)."""
    return images + _param("brightness", severity)


def saturate(images, rng, severity):
    """Multiply by gain (clipped to [0, 1] after): every pixel of at least 1 / gain turns white,
    so the strokes' grey edges saturate and the strokes thicken; the background stays black."""
    return images * _param("saturate", severity)


def solarize(images, rng, severity):
    """Invert the pixels above a threshold: x > t -> 1 - x, t = (threshold x16) / 16, half-way
    between two of the clean images' 17 levels (severity 1 inverts only full white, 16/16;
    severity 5 every pixel of 12/16 and more)."""
    t = _param("solarize", severity) / 16
    return np.where(images > t, 1.0 - images, images)


def _area_matrix(side, n_in):
    """(ceil(side), n_in) box-resampling weights: cell i averages the input pixels' overlap with
    [i, i + 1) * n_in / side (the last cell cut at n_in when side is fractional)."""
    n_out = int(np.ceil(side))
    edges = np.minimum(np.arange(n_out + 1) * n_in / side, n_in)
    lo = np.maximum(edges[:-1, None], np.arange(n_in)[None, :])
    hi = np.minimum(edges[1:, None], np.arange(n_in)[None, :] + 1)
    w = np.clip(hi - lo, 0.0, None)
    return w / w.sum(axis=1, keepdims=True)


def pixelate(images, rng, severity):
    """Box-downsample to cells of 8 / side pixels (side may be fractional: then the last row and
    column of cells are narrower), then give each pixel the value of the cell its centre is in."""
    side = _param("pixelate", severity)
    down = _area_matrix(side, SIDE)
    up = np.zeros((SIDE, down.shape[0]))
    up[np.arange(SIDE), np.floor((np.arange(SIDE) + 0.5) * side / SIDE).astype(int)] = 1.0
    return np.einsum("ij,njk,lk->nil", up @ down, images, up @ down)


#: The JPEG luminance quantization table (ITU-T T.81, Annex K, Table K.1).
JPEG_LUMA = np.array([
    [16, 11, 10, 16, 24, 40, 51, 61], [12, 12, 14, 19, 26, 58, 60, 55],
    [14, 13, 16, 24, 40, 57, 69, 56], [14, 17, 22, 29, 51, 87, 80, 62],
    [18, 22, 37, 56, 68, 109, 103, 77], [24, 35, 55, 64, 81, 104, 113, 92],
    [49, 64, 78, 87, 103, 121, 120, 101], [72, 92, 95, 98, 112, 100, 103, 99]], dtype=np.float64)


def _dct_matrix():
    """Orthonormal 8-point DCT-II matrix (rows: frequencies)."""
    k, n = np.meshgrid(np.arange(SIDE), np.arange(SIDE), indexing="ij")
    m = np.cos(np.pi * (2 * n + 1) * k / (2 * SIDE)) * np.sqrt(2 / SIDE)
    m[0] /= np.sqrt(2)
    return m


def jpeg(images, rng, severity):
    """One baseline-JPEG block per image (the image is exactly 8x8): scale to 0..255, level
    shift by 128, 2-D DCT, divide by the Annex K luminance table scaled for quality (the IJG
    rule: 5000/q for q < 50, table = max(1, floor((T * scale + 50) / 100))), round half away
    from zero, dequantize, inverse DCT, back to [0, 1] (not rounded to 8 bits; the final clip
    bounds it)."""
    q = _param("jpeg", severity)
    scale = 5000 / q if q < 50 else 200 - 2 * q
    table = np.maximum(1.0, np.floor((JPEG_LUMA * scale + 50) / 100))
    d = _dct_matrix()
    coef = np.einsum("ij,njk,lk->nil", d, images * 255.0 - 128.0, d)
    coef = np.sign(coef) * np.floor(np.abs(coef) / table + 0.5) * table
    return (np.einsum("ji,njk,kl->nil", d, coef, d) + 128.0) / 255.0


def elastic(images, rng, severity):
    """Elastic distortion (Simard et al. 2003): per image a displacement field of uniform
    (-1, 1) noise smoothed by a Gaussian of 1.5 px, scaled so its largest displacement is the
    given number of pixels; bilinear resampling, black outside."""
    amount = _param("elastic", severity)
    field = rng.uniform(-1.0, 1.0, (2, *images.shape))
    field = ndimage.gaussian_filter(field, sigma=(0, 0, 1.5, 1.5), mode="constant", cval=0.0)
    peak = np.abs(field).max(axis=(0, 2, 3), keepdims=True)
    field = field / peak * amount
    return _warp(images, field[0], field[1])


def rotate(images, rng, severity):
    """Rotate each image about its centre by sign * U(degrees / 2, degrees), sign +-1 equally
    likely; bilinear, black outside."""
    deg = _param("rotate", severity)
    n = len(images)
    angle = np.deg2rad(rng.uniform(deg / 2, deg, n) * rng.choice([-1.0, 1.0], n))
    c = (SIDE - 1) / 2
    r, q = np.meshgrid(np.arange(SIDE) - c, np.arange(SIDE) - c, indexing="ij")
    cos, sin = np.cos(angle)[:, None, None], np.sin(angle)[:, None, None]
    # Output (r, q) samples the input at the point rotated back by the angle.
    src_r = cos * r - sin * q
    src_q = sin * r + cos * q
    return _warp(images, src_r - r, src_q - q)


def translate(images, rng, severity):
    """Shift each image by the given distance in a direction drawn uniformly per image;
    bilinear, black where the shift uncovers the border."""
    dist = _param("translate", severity)
    phi = rng.uniform(0.0, 2 * np.pi, len(images))[:, None, None]
    return _warp(images, dist * np.sin(phi), dist * np.cos(phi))


#: name -> f(images, rng, severity), in the order of the documentation's table.
CORRUPTIONS = MappingProxyType({f.__name__: f for f in (
    gaussian_noise, shot_noise, impulse_noise, speckle_noise, gaussian_blur, zoom_blur,
    motion_blur, contrast, brightness, saturate, solarize, pixelate, jpeg, elastic, rotate,
    translate)})
assert tuple(CORRUPTIONS) == tuple(SEVERITY_PARAMS)


def _check_corruption(name):
    if not isinstance(name, str) or name not in CORRUPTIONS:
        raise ValueError(f"unknown corruption {name!r}; valid: {', '.join(CORRUPTIONS)}")
    return name


def _check_seed(seed):
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, not {seed!r}")
    return int(seed)


def corrupt(images, corruption, *, severity=DEFAULT_SEVERITY, seed=0):
    """Return ``images`` (n, 8, 8) in [0, 1] corrupted as :func:`load_digits_c` does: float32,
    clipped to [0, 1], with the generator ``default_rng([seed, RNG_KEY, crc32(name)])``."""
    name = _check_corruption(corruption)
    severity = _check_severity(severity)
    seed = _check_seed(seed)
    images = np.asarray(images, dtype=np.float64)
    if images.ndim != 3 or images.shape[1:] != (SIDE, SIDE):
        raise ValueError(f"images must have shape (n, 8, 8), not {images.shape}")
    rng = np.random.default_rng([seed, RNG_KEY, zlib.crc32(name.encode())])
    out = CORRUPTIONS[name](images, rng, severity)
    return np.clip(out, 0.0, 1.0).astype(np.float32)


def load_digits_c(corruption, *, severity=DEFAULT_SEVERITY, seed=0):
    """Return digits-C for one corruption: the adaptation pool (train 500, val 100, test 400,
    the same images for every corruption, none of them in :func:`load_digits_clean`'s
    pre-training pool) corrupted at ``severity`` (1..5) with random draws from ``seed``.

    Images float32 (n, 8, 8) in [0, 1]; labels int64, those of the clean images.
    """
    clean = load_digits_clean("adapt")
    images = np.concatenate([clean.train.images, clean.val.images, clean.test.images])
    out = corrupt(images, corruption, severity=severity, seed=seed)
    index, lengths = _pool_index("adapt")
    _, labels = _raw()
    return _make("adapt", out, labels[index], index, lengths, corruption=corruption,
                 severity=int(severity), seed=int(seed))


# ---------------------------------------------------------------------------------------------
# Baseline: how much each corruption costs a classifier trained on clean digits
# ---------------------------------------------------------------------------------------------

def _fit_logistic(x, y, *, steps=400, lr=1.0, l2=1e-3):
    """Multinomial logistic regression on flattened images by full-batch gradient descent
    (float64, zero start, fixed steps: deterministic). Returns (weights (65, 10))."""
    x = np.concatenate([x.reshape(len(x), -1).astype(np.float64), np.ones((len(x), 1))], axis=1)
    onehot = np.eye(N_CLASSES)[y]
    w = np.zeros((x.shape[1], N_CLASSES))
    for _ in range(steps):
        z = x @ w
        p = np.exp(z - z.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        grad = x.T @ (p - onehot) / len(x) + l2 * w
        w -= lr * grad
    return w


def _predict_logistic(w, x):
    x = np.concatenate([x.reshape(len(x), -1).astype(np.float64), np.ones((len(x), 1))], axis=1)
    return np.argmax(x @ w, axis=1)


def _predict_centroid(centroids, x):
    d = ((x.reshape(len(x), 1, -1) - centroids[None]) ** 2).sum(axis=2)
    return np.argmin(d, axis=1)


def baseline(*, severity=DEFAULT_SEVERITY, seed=0):
    """Return the baseline accuracies: ``{"clean_pretrain_test": {...}, "clean": {...},
    name: {...}}``, each ``{"logistic": acc, "centroid": acc}``.

    Both classifiers are trained on the clean pre-training ``train`` split (logistic regression:
    :func:`_fit_logistic`; nearest centroid: the class means) and evaluated on the clean
    pre-training ``test`` split, the clean adaptation ``test`` split (``"clean"``, the
    reference of the per-corruption rows) and every corruption's ``test`` split.
    """
    severity = _check_severity(severity)
    seed = _check_seed(seed)
    pre = load_digits_clean("pretrain")
    w = _fit_logistic(pre.train.images, pre.train.labels)
    flat = pre.train.images.reshape(len(pre.train), -1).astype(np.float64)
    centroids = np.stack([flat[pre.train.labels == c].mean(axis=0) for c in range(N_CLASSES)])

    def score(split):
        x = split.images.astype(np.float64)
        return {"logistic": float(np.mean(_predict_logistic(w, x) == split.labels)),
                "centroid": float(np.mean(_predict_centroid(centroids, x.reshape(len(x), -1))
                                          == split.labels))}

    rows = {"clean_pretrain_test": score(pre.test),
            "clean": score(load_digits_clean("adapt").test)}
    for name in CORRUPTIONS:
        rows[name] = score(load_digits_c(name, severity=severity, seed=seed).test)
    return rows


def format_baseline(rows, *, severity=DEFAULT_SEVERITY):
    """Return the baseline table as Markdown (accuracies in percent)."""
    lines = [f"| test set (severity {severity}) | parameter | logistic % | centroid % |",
             "|---|---|---:|---:|"]
    for key, acc in rows.items():
        if key in SEVERITY_PARAMS:
            pname, values = SEVERITY_PARAMS[key]
            param = f"{pname} {values[severity - 1]}"
        else:
            param = "clean"
        label = {"clean_pretrain_test": "pre-training test (100)",
                 "clean": "adaptation test, clean (400)"}.get(key, key)
        lines.append(f"| {label} | {param} | {100 * acc['logistic']:.1f} | "
                     f"{100 * acc['centroid']:.1f} |")
    corrupted = [rows[k] for k in rows if k in CORRUPTIONS]
    mean = {m: np.mean([r[m] for r in corrupted]) for m in ("logistic", "centroid")}
    lines.append(f"| mean over {len(corrupted)} corruptions | | {100 * mean['logistic']:.1f} | "
                 f"{100 * mean['centroid']:.1f} |")
    return "\n".join(lines)


def main(argv=None):
    """Print the baseline table (``python -m ttrain.golden.digits [--severity S] [--seed N]``)."""
    parser = argparse.ArgumentParser(prog="python -m ttrain.golden.digits",
                                     description="digits-C baseline accuracies")
    parser.add_argument("--severity", type=int, default=DEFAULT_SEVERITY)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(format_baseline(baseline(severity=args.severity, seed=args.seed),
                          severity=args.severity))


if __name__ == "__main__":
    main()
