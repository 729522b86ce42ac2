"""The counter-based generator of :mod:`ttrain.golden.prng`: known answers from a scalar
pure-Python implementation, the derived draws, and statistical quality over ~10^6 draws.

Every statistical bound is about 5 standard deviations (or a chi-square p-value of 1e-6) of
the ideal generator; the inputs are fixed, so the tests are deterministic.
"""

import numpy as np
import pytest
from scipy import stats

from ttrain.golden import prng

M32 = (1 << 32) - 1
N = 1 << 20                      # draws per statistical test


# ---- an independent scalar implementation (Python ints, written from the docstring) -------

def _mul(a, b):
    return (a * b) & M32


def _lowbias32(x):
    x ^= x >> 16
    x = _mul(x, 0x21F0AAAD)
    x ^= x >> 15
    x = _mul(x, 0x735A2D97)
    x ^= x >> 15
    return x


def _draw_scalar(seed, index):
    k0 = _lowbias32((seed + 0x9E3779B9) & M32)
    k1 = ((k0 << 16) | (k0 >> 16)) & M32
    x = (index + k0) & M32
    x ^= x >> 16
    x = _mul(x, 0x21F0AAAD)
    x ^= x >> 15
    x ^= k1
    x = _mul(x, 0x735A2D97)
    x ^= x >> 15
    return x


def _xorshift32_scalar(x, count):
    out = []
    for _ in range(count):
        x ^= (x << 13) & M32
        x ^= x >> 17
        x ^= (x << 5) & M32
        out.append(x)
    return out


# ---- known answers ------------------------------------------------------------------------

EDGE = [0, 1, 2, 0x7FFFFFFF, 0x80000000, 0x9E3779B9, 0x61C88647, M32 - 1, M32]


def test_draw_matches_scalar_on_edges_and_random_keys():
    rng = np.random.default_rng(13)
    pairs = [(s, i) for s in EDGE for i in EDGE]
    pairs += [(int(s), int(i)) for s, i in rng.integers(0, 1 << 32, (2000, 2))]
    seeds = np.array([s for s, _ in pairs], dtype=np.uint32)
    index = np.array([i for _, i in pairs], dtype=np.uint32)
    got = prng.draw(seeds, index)
    assert got.dtype == np.uint32 and got.shape == (len(pairs),)
    assert [int(v) for v in got] == [_draw_scalar(s, i) for s, i in pairs]


def test_scalar_and_broadcast_forms_agree():
    assert int(prng.draw(5, 7)) == _draw_scalar(5, 7)
    idx = np.arange(64, dtype=np.uint32).reshape(8, 8)
    assert np.array_equal(prng.draw(9, idx), [[_draw_scalar(9, int(i)) for i in row]
                                              for row in idx])
    seeds = np.arange(4, dtype=np.uint64)[:, None]
    grid = prng.draw(seeds, np.arange(3, dtype=np.int64)[None, :])
    assert grid.shape == (4, 3)
    assert grid[3, 2] == _draw_scalar(3, 2)
    assert np.array_equal(prng.mix32(np.array(EDGE, np.uint32)), [_lowbias32(x) for x in EDGE])


def test_mix32_is_a_bijection_with_zero_fixed_point():
    # invert lowbias32 by hand (xor-shift inverse; multiplicative inverse mod 2**32)
    def unxorshift(x, s):
        y = x
        for _ in range(32 // s + 1):
            y = x ^ (y >> s)
        return y

    inv_a, inv_b = pow(0x21F0AAAD, -1, 1 << 32), pow(0x735A2D97, -1, 1 << 32)
    for x in EDGE + [12345, 0xDEADBEEF]:
        y = _lowbias32(x)
        back = unxorshift(_mul(unxorshift(_mul(unxorshift(y, 15), inv_b), 15), inv_a), 16)
        assert back == x
    assert int(prng.mix32(0)) == 0            # why the seed gets GAMMA added first
    assert int(prng.seed_keys(0)[0]) != 0


def test_stream_is_a_permutation_of_its_indices():
    words = np.sort(prng.draw(77, np.arange(N // 4, dtype=np.uint32)))
    assert np.all(words[1:] != words[:-1])


def test_rademacher_uniform_and_bernoulli_are_the_documented_functions_of_draw():
    rng = np.random.default_rng(4)
    seed, idx = 0xC0FFEE, rng.integers(0, 1 << 32, 5000, dtype=np.uint64)
    words = [_draw_scalar(seed, int(i)) for i in idx]
    signs = prng.rademacher(seed, idx)
    assert signs.dtype == np.int8
    assert signs.tolist() == [1 if w >> 31 == 0 else -1 for w in words]
    assert prng.uniform_u32(seed, idx).tolist() == words
    for t in (0, 1, 1 << 31, 0xABCDEF01, M32, 1 << 32):
        got = prng.bernoulli(seed, idx, t)
        assert got.dtype == bool and got.tolist() == [w < t for w in words]


def test_threshold_of():
    assert prng.threshold_of(0) == 0
    assert prng.threshold_of(1) == 1 << 32
    assert prng.threshold_of(0.5) == 1 << 31
    assert prng.threshold_of(0.1) == int(0.1 * 2 ** 32)        # floor of the exact product
    assert prng.threshold_of(2.0 ** -32) == 1


@pytest.mark.parametrize("p", [0.01, 0.1, 0.5, 0.9])
def test_bernoulli_frequency(p):
    hits = prng.bernoulli(3, np.arange(N, dtype=np.uint32), prng.threshold_of(p))
    assert abs(hits.mean() - p) < 5 * np.sqrt(p * (1 - p) / N)


def test_stream_beats_lane_order_and_wraparound():
    base, count, lanes = M32 - 4, 3, 3                          # wraps past 2**32 - 1
    beats = prng.stream_beats(11, base, count, lanes)
    assert beats.shape == (3, 3) and beats.dtype == np.uint32
    assert [[int(w) for w in row] for row in beats] == [
        [_draw_scalar(11, (base + k * lanes + i) & M32) for i in range(lanes)]
        for k in range(count)]
    assert prng.stream_beats(11, 0, 0, 8).shape == (0, 8)


def test_stream_checksum_matches_the_sequential_definition():
    rng = np.random.default_rng(8)
    for n in (0, 1, 2, 1000):
        words = rng.integers(0, 1 << 32, n, dtype=np.uint64)
        h = 0
        for w in words:
            h = (h * 0x9E3779B97F4A7C15 + int(w)) & ((1 << 64) - 1)
        assert prng.stream_checksum(words) == h
    words = prng.draw(1, np.arange(4096, dtype=np.uint32))
    changed = words.copy()
    changed[1234] ^= 1
    swapped = words.copy()
    swapped[[10, 11]] = swapped[[11, 10]]
    assert len({prng.stream_checksum(w) for w in (words, changed, swapped)}) == 3


def test_xorshift32_matches_the_authors_recurrence_and_is_linear():
    for x in (1, 2463534242, M32):
        assert prng.xorshift32(x, 50).tolist() == _xorshift32_scalar(x, 50)
    assert prng.xorshift32(1, 1).tolist() == [270369]           # 1 ^ 1<<13, then ^ <<5
    states = np.array([5, 9, 0xFFFF0000], np.uint32)
    assert prng.xorshift32(states, 7).shape == (3, 7)
    assert prng.xorshift32_signs(states, 7).tolist() == [
        [1 - 2 * (v & 1) for v in _xorshift32_scalar(int(s), 7)] for s in states]
    a, b = 0x12345678, 0x0F0F0F0F
    assert np.array_equal(prng.xorshift32(a ^ b, 20),
                          prng.xorshift32(a, 20) ^ prng.xorshift32(b, 20))
    # the counter-based generator has no such structure across seeds
    i = np.arange(20, dtype=np.uint32)
    assert not np.array_equal(prng.draw(a ^ b, i), prng.draw(a, i) ^ prng.draw(b, i))


def test_bad_inputs_raise_one_line_value_errors():
    cases = [lambda: prng.draw(-1, 0), lambda: prng.draw(0, 1 << 32),
             lambda: prng.draw(0, np.array([0.5])), lambda: prng.draw(True, 0),
             lambda: prng.draw(1 << 70, 0), lambda: prng.draw("3", 0),
             lambda: prng.bernoulli(0, 0, (1 << 32) + 1), lambda: prng.bernoulli(0, 0, 0.5),
             lambda: prng.threshold_of(1.5), lambda: prng.threshold_of(-0.1),
             lambda: prng.stream_beats(0, 0, -1, 8), lambda: prng.stream_beats(0, 0, 4, 0),
             lambda: prng.xorshift32(0, 4), lambda: prng.xorshift32(1, -2)]
    for case in cases:
        with pytest.raises(ValueError) as info:
            case()
        assert "\n" not in str(info.value)


# ---- statistical quality (about 10^6 draws each) ------------------------------------------

def _bits(words):
    return ((words[:, None] >> np.arange(32, dtype=np.uint32)) & 1).astype(np.int8)


def test_bit_balance_and_sign_balance():
    words = prng.draw(2024, np.arange(N, dtype=np.uint32))
    ones = _bits(words).sum(axis=0, dtype=np.int64)
    assert np.all(np.abs(ones - N / 2) < 5 * np.sqrt(N / 4)), ones
    signs = prng.rademacher(2024, np.arange(N, dtype=np.uint32)).astype(np.int64)
    assert abs(signs.sum()) < 5 * np.sqrt(N)
    # every lane of an 8-lane unit (indices = lane mod 8) is balanced as well
    lane_sums = signs.reshape(-1, 8).sum(axis=0)
    assert np.all(np.abs(lane_sums) < 5 * np.sqrt(N / 8))


@pytest.mark.parametrize("lag", [1, 2, 3, 8, 256])
def test_lag_correlation_of_signs_and_words(lag):
    idx = np.arange(N + lag, dtype=np.uint32)
    signs = prng.rademacher(99, idx).astype(np.int64)
    assert abs(np.dot(signs[:-lag], signs[lag:])) < 5 * np.sqrt(N)
    u = prng.draw(99, idx) / 2.0 ** 32 - 0.5
    r = np.corrcoef(u[:-lag], u[lag:])[0, 1]
    assert abs(r) < 5 / np.sqrt(N)


def test_adjacent_seed_correlation():
    seeds = np.arange(1024, dtype=np.uint32)[:, None]          # consecutive seeds
    idx = np.arange(N // 1024, dtype=np.uint32)[None, :]
    words = prng.draw(seeds, idx)
    signs = 1 - 2 * (words >> np.uint32(31)).astype(np.int64)
    agree = (signs[:-1] * signs[1:]).sum()                     # seed s against s + 1
    assert abs(agree) < 5 * np.sqrt(signs[1:].size)
    # every bit: seed s and s + 1 agree on half the draws
    diff = _bits((words[:-1] ^ words[1:]).ravel()).sum(axis=0, dtype=np.int64)
    m = words[1:].size
    assert np.all(np.abs(diff - m / 2) < 5 * np.sqrt(m / 4)), diff
    # a seed against its neighbour one index later (no shifted copies of streams)
    shifted = (signs[:-1, 1:] * signs[1:, :-1]).sum()
    assert abs(shifted) < 5 * np.sqrt(signs[1:, 1:].size)


def test_chi_square_on_bytes_and_sign_pairs():
    words = prng.draw(31337, np.arange(N, dtype=np.uint32))
    counts = np.bincount(words.view(np.uint8), minlength=256)
    assert stats.chisquare(counts).pvalue > 1e-6
    # serial test: pairs of consecutive signs, and 8-bit patterns of 8 consecutive signs
    bits = (words >> np.uint32(31)).astype(np.int64)
    pairs = np.bincount(2 * bits[:-1] + bits[1:], minlength=4)
    assert stats.chisquare(pairs).pvalue > 1e-6
    octets = np.bincount(bits.reshape(-1, 8) @ (1 << np.arange(8)), minlength=256)
    assert stats.chisquare(octets).pvalue > 1e-6


def test_avalanche_over_index_and_seed_bits():
    """Flipping any one input bit (index or seed) flips every output bit half the time."""
    rng = np.random.default_rng(5)
    n = 1 << 14
    seeds = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    index = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    base = prng.draw(seeds, index)
    bound = 5 * np.sqrt(n / 4)
    for b in range(32):
        flip = np.uint32(1 << b)
        for s, i in ((seeds, index ^ flip), (seeds ^ flip, index)):
            flips = _bits(base ^ prng.draw(s, i)).sum(axis=0, dtype=np.int64)
            assert np.all(np.abs(flips - n / 2) < bound), (b, flips)


def test_statistics_do_catch_a_weak_generator():
    """The same checks fail on the keyed counter without its hash (sanity of the tests)."""
    idx = np.arange(N, dtype=np.uint32)
    weak = idx + prng.seed_keys(2024)[0]                       # index + k0, no mixing
    signs = 1 - 2 * (weak >> np.uint32(31)).astype(np.int64)
    assert abs(np.dot(signs[:-1], signs[1:])) > 5 * np.sqrt(N)
    counts = np.bincount(((weak >> np.uint32(31)) & 1).reshape(-1, 8)
                         @ (1 << np.arange(8)), minlength=256)
    assert stats.chisquare(counts).pvalue < 1e-6


def test_the_compared_candidates_reproduce_their_published_vectors():
    """The generators ``docs/prng.md`` compares against (Speck32/64, Threefry-2x32-13,
    Philox-2x32-10 of ``ttrain.testbench.prng_candidates``) are the published ones."""
    from ttrain.testbench.prng_candidates import CANDIDATES, check_known_answers
    check_known_answers()
    assert CANDIDATES["lowbias32-keyed"][0] is prng.draw
