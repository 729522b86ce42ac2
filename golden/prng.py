"""Golden definition of the on-chip random numbers: a counter-based generator keyed by
``(seed, index)``.

Quantized zeroth-order training perturbs every element of a region by ``+-sigma * u`` with a
Rademacher ``u``, later restores it and accumulates ``g += c * u``, each time *regenerating*
``u`` instead of storing it. A counter-based generator makes that trivial and parallel: the
word for element ``i`` of a region is ``draw(seed, i)``, a pure function, so ``P`` lanes draw
``base .. base + P - 1`` in one cycle and any pass over the region (perturb, restore,
accumulate; forwards, backwards or in pieces) sees the same ``u``.

The generator
-------------
``mix32`` is Chris Wellons' *lowbias32* integer hash (hash-prospector, the improved
constants ``16, 0x21f0aaad, 15, 0x735a2d97, 15``), a bijection of 32-bit words::

    mix32(x):  x ^= x >> 16;  x *= 0x21f0aaad;  x ^= x >> 15;  x *= 0x735a2d97;  x ^= x >> 15

All arithmetic is modulo ``2**32``. Per seed, two key words (computed once per command in
hardware, shared by every lane)::

    k0 = mix32(seed + 0x9e3779b9)          k1 = rotl(k0, 16)

and per element::

    x = index + k0
    x ^= x >> 16;  x *= 0x21f0aaad;  x ^= x >> 15        (first half of mix32)
    x ^= k1                                               (key injected between the multiplies)
    x *= 0x735a2d97;  x ^= x >> 15                        (second half)
    draw(seed, index) = x

``index + k0`` alone would make the streams of two seeds shifted copies of each other
(``draw(s', i - d) == draw(s, i)`` for ``d = k0' - k0``); the second key word between the two
multiplies breaks that. For a fixed seed, ``draw`` is a bijection of the index, so a stream
never repeats a word within its ``2**32`` indices.

Why ``index`` is uint32: an index is an element's position in an on-chip region (the stores
hold far fewer than ``2**32`` words), so 32 bits always suffice; a 64-bit counter would need
a wider first adder and another multiply per lane to fold the high word in, for indices that
never occur. Streams that must differ (ZO queries, steps, tensors, masks versus signs) differ
by their ``seed``: consecutive integers are fine as seeds (the key derivation decorrelates
them; ``tests/test_golden_prng.py`` measures it), and distinct seeds give distinct ``k0``
(``mix32`` is a bijection). ``docs/prng.md`` has the figures behind the choice (Yosys cost per
lane against an ARX cipher, statistical tests).

Derived draws
-------------
- :func:`rademacher`: ``+1`` if bit 31 of the word is 0, else ``-1`` (int8). Bit 31 is the
  best-mixed bit of a multiply-based hash.
- :func:`uniform_u32`: the word itself.
- :func:`bernoulli`: ``draw < threshold`` for an integer ``threshold`` in ``[0, 2**32]``
  (probability ``threshold / 2**32``); :func:`threshold_of` turns a probability into one
  (``floor(p * 2**32)``). Random sparse masks and dropout masks use it. Note that with the
  same ``(seed, index)``, ``bernoulli(..., 2**31)`` is exactly ``rademacher == -1`` negated:
  give masks and signs different seeds.
- :func:`stream_beats`: what the hardware unit (:class:`ttrain.rtl.prng.PRNGUnit`) emits for
  one command ``(seed, base, count)``: ``count`` beats of ``lanes`` words, lane ``i`` of beat
  ``k`` being ``draw(seed, (base + k * lanes + i) mod 2**32)``.

The authors' generator
----------------------
:func:`xorshift32` is the authors' sequential XORShift32 (``x ^= x << 13; x ^= x >> 17;
x ^= x << 5``, sign ``1 - 2 * (x & 1)``; ``docs/algorithms.md`` section 4), kept as the
reference sequence for comparison only: it is linear over GF(2) (``xorshift32(a ^ b) ==
xorshift32(a) ^ xorshift32(b)``), its state must be stepped element by element, and it cannot
give lane ``i`` its element without stepping through the ones before.
"""

import numpy as np

__all__ = ["GAMMA", "MIX_MULTIPLIERS", "MIX_SHIFTS", "mix32", "seed_keys", "draw",
           "uniform_u32", "rademacher", "bernoulli", "threshold_of", "stream_beats",
           "stream_checksum", "CHECKSUM_MULTIPLIER", "xorshift32", "xorshift32_signs"]

#: Added to the seed before hashing it into ``k0`` (2**32 / golden ratio; ``mix32(0) == 0``).
GAMMA = 0x9E3779B9
#: The two odd multipliers of lowbias32 (hash-prospector, improved constants).
MIX_MULTIPLIERS = (0x21F0AAAD, 0x735A2D97)
#: Its three xor-shift distances.
MIX_SHIFTS = (16, 15, 15)
#: Multiplier of :func:`stream_checksum` (odd: every single-word change alters the checksum).
CHECKSUM_MULTIPLIER = 0x9E3779B97F4A7C15

_M32 = (1 << 32) - 1
_U32 = np.uint32


def _words(value, what):
    """Return ``value`` as a uint32 array; ValueError unless every element is an integer in
    ``[0, 2**32)``."""
    arr = np.asarray(value)
    if arr.dtype == object:                      # Python ints beyond int64, or mixed types
        flat = arr.ravel().tolist()
        if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                   and 0 <= v <= _M32 for v in flat):
            raise ValueError(f"{what} must be integers in [0, 2**32); pass uint32 values")
        arr = np.array(flat, dtype=np.int64).reshape(arr.shape)
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{what} must be integers in [0, 2**32), not {arr.dtype} values; "
                         f"pass an integer array")
    if arr.size and arr.dtype != np.uint32:
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi > _M32:
            raise ValueError(f"{what} must lie in [0, 2**32), got values in [{lo}, {hi}]; "
                             f"reduce them modulo 2**32 if wrapping is meant")
    return arr.astype(np.uint32)


_wrap = np.errstate(over="ignore")              # uint32 arithmetic is meant to wrap


@_wrap
def mix32(x):
    """Return lowbias32 of the uint32 words ``x`` (a bijection of 32-bit words)."""
    x = _words(x, "mix32 input").copy()
    a, b = (_U32(m) for m in MIX_MULTIPLIERS)
    s0, s1, s2 = (_U32(s) for s in MIX_SHIFTS)
    x ^= x >> s0
    x *= a
    x ^= x >> s1
    x *= b
    x ^= x >> s2
    return x


@_wrap
def seed_keys(seed):
    """Return the key words ``(k0, k1)`` of ``seed`` (uint32 arrays shaped like ``seed``)."""
    s = _words(seed, "seed")
    k0 = mix32(s + _U32(GAMMA))
    k1 = (k0 << _U32(16)) | (k0 >> _U32(16))
    return k0, k1


@_wrap
def draw(seed, index):
    """Return the 32-bit word of element ``index`` of the stream ``seed``.

    Parameters
    ----------
    seed : int or array_like of int
        Stream key(s) in ``[0, 2**32)``, broadcast against ``index``.
    index : int or array_like of int
        Element indices in ``[0, 2**32)`` (any integer dtype; NumPy arrays are the fast path).

    Returns
    -------
    numpy.ndarray of uint32
        Shaped like the broadcast of ``seed`` and ``index``.
    """
    k0, k1 = seed_keys(seed)
    x = _words(index, "index") + k0
    a, b = (_U32(m) for m in MIX_MULTIPLIERS)
    s0, s1, s2 = (_U32(s) for s in MIX_SHIFTS)
    x ^= x >> s0
    x *= a
    x ^= x >> s1
    x ^= k1
    x *= b
    x ^= x >> s2
    return x


def uniform_u32(seed, index):
    """Return uniform uint32 words: :func:`draw` itself."""
    return draw(seed, index)


def rademacher(seed, index):
    """Return ``+1`` / ``-1`` (int8): ``1 - 2 * (draw(seed, index) >> 31)``."""
    return (1 - 2 * (draw(seed, index) >> _U32(31)).astype(np.int8)).astype(np.int8)


def threshold_of(p):
    """Return the integer threshold ``floor(p * 2**32)`` of a probability ``p`` in [0, 1]."""
    if isinstance(p, bool) or not isinstance(p, (int, float, np.integer, np.floating)) \
            or not 0 <= p <= 1:
        raise ValueError(f"p must be a probability in [0, 1], not {p!r}")
    return int(np.floor(np.float64(p) * 4294967296.0))


def bernoulli(seed, index, threshold):
    """Return ``draw(seed, index) < threshold`` (bool): true with probability
    ``threshold / 2**32``.

    ``threshold`` is an integer in ``[0, 2**32]`` (``2**32``: always true), for example
    :func:`threshold_of` of a probability. A sparse or dropout mask keeps the elements where
    this is true (or false, by choice of the consumer).
    """
    if isinstance(threshold, bool) or not isinstance(threshold, (int, np.integer)) \
            or not 0 <= threshold <= 1 << 32:
        raise ValueError(f"threshold must be an integer in [0, 2**32], not {threshold!r}; "
                         f"use threshold_of(p) for a probability")
    return draw(seed, index).astype(np.uint64) < np.uint64(threshold)


def _check_count(value, what, low):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{what} must be an integer >= {low}, not {value!r}")
    return int(value)


def stream_beats(seed, base, count, lanes):
    """Return the ``(count, lanes)`` uint32 words the PRNG unit emits for one command.

    Lane ``i`` of beat ``k`` is ``draw(seed, (base + k * lanes + i) mod 2**32)``.
    ``count = 0`` gives an empty ``(0, lanes)`` array (the unit emits no beat).
    """
    seed = int(_words(seed, "seed"))
    base = int(_words(base, "base"))
    count = _check_count(count, "count", 0)
    if count > _M32:
        raise ValueError(f"count must be below 2**32 beats, not {count}")
    lanes = _check_count(lanes, "lanes", 1)
    index = (np.uint64(base) + np.arange(count * lanes, dtype=np.uint64)) & np.uint64(_M32)
    return draw(seed, index).reshape(count, lanes)


def stream_checksum(words):
    """Return the 64-bit polynomial checksum of a word sequence (as the Verilator bench
    computes it beside the unit).

    ``h = 0; for w in words: h = (h * CHECKSUM_MULTIPLIER + w) mod 2**64`` over the words in
    stream order (beat by beat, lane 0 first). The multiplier is odd, so changing any one word
    changes ``h``. Vectorized as ``sum(w[j] * M**(n-1-j)) mod 2**64``.
    """
    w = _words(words, "words").ravel().astype(np.uint64)
    if w.size == 0:
        return 0
    powers = np.empty(w.size, dtype=np.uint64)
    powers[0] = 1
    powers[1:] = np.uint64(CHECKSUM_MULTIPLIER)
    with np.errstate(over="ignore"):
        powers = np.cumprod(powers, dtype=np.uint64)[::-1]
        return int(np.sum(w * powers, dtype=np.uint64))


@_wrap
def xorshift32(state, count):
    """Return the next ``count`` states of the authors' XORShift32 from ``state`` (uint32).

    ``x ^= x << 13; x ^= x >> 17; x ^= x << 5`` per step; ``state`` may be an array (one
    sequence per element, result shaped ``state.shape + (count,)``). ``state = 0`` is the
    generator's fixed point and is refused. The authors' reference sequence, for comparison.
    """
    x = _words(state, "state").copy()
    if np.any(x == 0):
        raise ValueError("xorshift32 state must be nonzero (0 is its fixed point)")
    count = _check_count(count, "count", 0)
    out = np.empty(x.shape + (count,), dtype=np.uint32)
    for j in range(count):
        x ^= x << _U32(13)
        x ^= x >> _U32(17)
        x ^= x << _U32(5)
        out[..., j] = x
    return out


def xorshift32_signs(state, count):
    """Return the authors' Rademacher signs ``1 - 2 * (x & 1)`` (int8) of :func:`xorshift32`."""
    return (1 - 2 * (xorshift32(state, count) & _U32(1)).astype(np.int8)).astype(np.int8)
