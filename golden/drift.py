"""digits-drift: a seeded online stream of digits-C samples whose corruption drifts.

The online benchmark of low-rank training (``docs/lrt.md``) feeds a model pre-trained on clean
digits one sample at a time; the distribution moves through a sequence of corruptions.

Definition (:func:`make_stream`, all draws from ``default_rng([seed, DRIFT_KEY])``):

1. ``corruptions``: the first ``segments`` names of a random permutation of the 16 digits-C
   corruptions (:data:`ttrain.golden.digits.CORRUPTIONS`, in their listed order before the
   permutation), all at ``severity`` (default 5), images of :func:`ttrain.golden.digits.
   load_digits_c` with the same ``seed``.
2. The stream is ``segments`` segments of ``segment_len`` samples. Segment ``k`` *ramps* in:
   its ``t``-th sample (``t = 0 ..``) comes from corruption ``k`` with probability
   ``min(1, (t + 1) / ramp)``, otherwise from the previous segment's distribution (segment 0
   ramps in from the clean images), one uniform draw per sample in stream order; so the
   distribution switches gradually over ``ramp`` samples, then stays.
3. Each sample is a uniform draw, with replacement, of one of the 500 images of the
   adaptation ``train`` split (the same index into the clean and every corrupted version).
4. Held out: the ``test`` split (400 images, never in the stream) of the last corruption; the
   ``val`` split (100) of the last corruption is for choosing settings.

Draw order: for every sample in stream order, first the mixing uniform, then the image index
(both from the one generator, as ``rng.random()`` and ``rng.integers(500)``), so the stream
depends on (seed, segments, segment_len, ramp, severity) only.
"""

from dataclasses import dataclass

import numpy as np

from . import digits

__all__ = ["DRIFT_KEY", "DEFAULTS", "DriftStream", "make_stream"]

#: Second word of the stream generator's seed.
DRIFT_KEY = 0x6472_6966   # "drif"
#: The benchmark stream: 4 corruptions of 750 samples (3,000 in all), 250-sample ramps.
DEFAULTS = {"segments": 4, "segment_len": 750, "ramp": 250, "severity": 5}


@dataclass(frozen=True)
class DriftStream:
    """``images`` float32 (n, 8, 8) in [0, 1] and ``labels`` (n,) in stream order; ``source``
    (n,) the corruption index of each sample (-1 clean); ``corruptions`` the segment names;
    ``test_*``/``val_*`` the held-out splits of the last corruption."""
    images: np.ndarray
    labels: np.ndarray
    source: np.ndarray
    corruptions: tuple
    test_images: np.ndarray
    test_labels: np.ndarray
    val_images: np.ndarray
    val_labels: np.ndarray
    seed: int

    def __len__(self):
        return len(self.labels)


def _positive(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"digits-drift {name} must be a positive integer, not {value!r}")
    return int(value)


def make_stream(seed=0, *, segments=DEFAULTS["segments"], segment_len=DEFAULTS["segment_len"],
                ramp=DEFAULTS["ramp"], severity=DEFAULTS["severity"]):
    """Return the :class:`DriftStream` of the module notes."""
    segments = _positive("segments", segments)
    segment_len = _positive("segment_len", segment_len)
    ramp = _positive("ramp", ramp)
    if segments > len(digits.CORRUPTIONS):
        raise ValueError(f"digits-drift has at most {len(digits.CORRUPTIONS)} segments (one per "
                         f"corruption), not {segments}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"digits-drift seed must be a non-negative integer, not {seed!r}")
    rng = np.random.default_rng([int(seed), DRIFT_KEY])
    names = list(digits.CORRUPTIONS)
    order = rng.permutation(len(names))[:segments]
    chosen = tuple(names[i] for i in order)
    clean = digits.load_digits_clean("adapt").train
    data = [digits.load_digits_c(c, severity=severity, seed=int(seed)) for c in chosen]
    pools = [d.train.images for d in data]
    n = segments * segment_len
    source = np.empty(n, dtype=np.int64)
    pick = np.empty(n, dtype=np.int64)
    for i in range(n):
        k, t = divmod(i, segment_len)
        u = rng.random()
        source[i] = k if u < min(1.0, (t + 1) / ramp) else k - 1
        pick[i] = rng.integers(len(clean.labels))
    images = np.empty((n, digits.SIDE, digits.SIDE), dtype=np.float32)
    for k in range(-1, segments):
        sel = source == k
        images[sel] = (clean.images if k < 0 else pools[k])[pick[sel]]
    last = data[-1]
    return DriftStream(images, clean.labels[pick].copy(), source, chosen, last.test.images,
                       last.test.labels, last.val.images, last.val.labels, int(seed))
