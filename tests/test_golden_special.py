"""Tests of golden/special.py: accuracy against float64, special values, monotonicity, and an
independent pure-Python reimplementation of every sequence that pins it operation by operation.

The scalar reference below uses ``test_golden_numerics``' from-scratch binary32 multiply and add
(exact integer arithmetic and a hand-written round-to-nearest-even), ``struct`` for bit views and
plain integers for the exponent and bit operations: it shares no code with the NumPy path.
The accuracy bounds are the ones documented in ``docs/special-functions.md``.
"""

import math
import struct

import numpy as np
import pytest

from test_golden_numerics import ref_add, ref_mul, ref_sub

from ttrain.golden import numerics as nx
from ttrain.golden import special as S

NAN = 0x7FC00000
INF = 0x7F800000


def bits(x):
    return nx.f32_to_bits(np.asarray(x, dtype=np.float32))


def f32(b):
    return nx.bits_to_f32(np.asarray(b, dtype=np.uint32))


# --------------------------------------------------------------------------------------------
# Error measures against float64
# --------------------------------------------------------------------------------------------

def ulp_error(y, ref):
    """|y - ref| in units of the binary32 ulp at ``ref`` (2**-149 below 2**-126).

    ``ref`` is the float64 value. An infinite ``y`` counts as 2**128 (the next value after
    FLT_MAX) and ``ref`` is clipped to +-2**128, so a correctly overflowed result has error 0.
    """
    y64 = y.astype(np.float64)
    inf = np.isinf(y64)
    y64[inf] = np.copysign(2.0 ** 128, y64[inf])
    ref = np.clip(ref, -2.0 ** 128, 2.0 ** 128)
    mag = np.maximum(np.abs(ref), 2.0 ** -126)
    ulp = np.exp2(np.floor(np.log2(mag)) - 23)
    return np.abs(y64 - ref) / ulp


def rel_error(y, ref):
    return np.abs(y.astype(np.float64) - ref) / np.abs(ref)


def sweep(lo, hi, n=1 << 18):
    return np.linspace(lo, hi, n).astype(np.float32)


def random_bits(n, seed):
    rng = np.random.default_rng(seed)
    return f32(rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32))


def gelu64(x):
    x = x.astype(np.float64)
    u = math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)
    return x / (1 + np.exp(-2 * u))         # = 0.5 x (1 + tanh u), without cancellation


def gelu_grad64(x):
    x = x.astype(np.float64)
    c = math.sqrt(2 / math.pi)
    u = c * (x + 0.044715 * x ** 3)
    s = 1 / (1 + np.exp(-2 * u))
    return s + x * 2 * c * (1 + 3 * 0.044715 * x ** 2) * s * (1 - s)


#: GELU_ROOT: the zero of gelu' (the minimum of gelu), where gelu_grad has no relative accuracy.
GELU_ROOT = -0.7517916


# --------------------------------------------------------------------------------------------
# Accuracy (bounds = docs/special-functions.md)
# --------------------------------------------------------------------------------------------

def test_exp_accuracy_whole_range():
    # Every result, normal and subnormal, within 1 ulp (the whole non-trivial input range).
    x = np.concatenate([sweep(-104, 89), sweep(-1, 1), sweep(-104, -87, 1 << 16)])
    with np.errstate(over="ignore"):
        ref = np.exp(x.astype(np.float64))
    y = S.fp32_exp(x)
    assert ulp_error(y, ref).max() <= 1.0
    normal = (ref >= 2.0 ** -126) & (ref < 2.0 ** 128)
    assert rel_error(y[normal], ref[normal]).max() <= 1.2e-7


def test_exp_accuracy_random_bits():
    x = random_bits(1 << 18, seed=1)
    x = x[(x >= -104) & (x <= 89)]
    assert len(x) > 100_000
    assert ulp_error(S.fp32_exp(x), np.exp(x.astype(np.float64))).max() <= 1.0


def test_exp_overflow_and_underflow_boundaries():
    # Overflow exactly where exp(x) rounds past FLT_MAX (the float64 reference decides), and
    # every x below the last one giving 2**-149 is +0.
    x = f32(np.arange(bits(88.5), bits(89.0), dtype=np.uint32))
    y = S.fp32_exp(x)
    ref = np.exp(x.astype(np.float64))
    assert ulp_error(y, ref).max() <= 1.0
    assert np.isinf(y).any() and np.isfinite(y).any()
    assert np.all(np.diff(np.isinf(y).astype(int)) >= 0)      # finite, then inf, no way back
    x = f32(np.arange(bits(-103.0), bits(-104.0), dtype=np.uint32))  # -103 down to -104
    y = S.fp32_exp(x)
    assert np.all(bits(y) <= 1) and (bits(y) == 0).any() and (bits(y) == 1).any()
    assert ulp_error(y, np.exp(x.astype(np.float64))).max() <= 1.0


def test_recip_accuracy():
    # Significands on a fine grid, then every class of input through random bit patterns.
    m = f32(np.arange(0x3F800000, 0x40000000, 7, dtype=np.uint32))
    assert ulp_error(S.fp32_recip(m), 1 / m.astype(np.float64)).max() <= 1.5
    x = random_bits(1 << 18, seed=2)
    x = x[np.isfinite(x) & (x != 0)]
    with np.errstate(over="ignore"):
        ref = 1 / x.astype(np.float64)
    y = S.fp32_recip(x)
    assert ulp_error(y, ref).max() <= 1.5
    normal = (np.abs(ref) >= 2.0 ** -126) & (np.abs(ref) < 2.0 ** 128)
    assert rel_error(y[normal], ref[normal]).max() <= 1.8e-7


def test_recip_subnormal_inputs_and_outputs():
    # Every subnormal exponent, both directions: x subnormal (1/x huge or inf) and x huge
    # (1/x subnormal, rounded once).
    rng = np.random.default_rng(3)
    sub = f32(rng.integers(1, 1 << 23, 50_000, dtype=np.uint32))
    big = f32(rng.integers(0x7E800000, 0x7F800000, 50_000, dtype=np.uint32))
    for x in (sub, -sub, big, -big):
        with np.errstate(over="ignore"):
            ref = 1 / x.astype(np.float64)
        assert ulp_error(S.fp32_recip(x), ref).max() <= 1.5
    assert np.isinf(S.fp32_recip(sub)).any() and np.isfinite(S.fp32_recip(sub)).any()


def test_rsqrt_accuracy():
    m = f32(np.arange(0x3F800000, 0x40800000, 13, dtype=np.uint32))   # [1, 4): every seed
    assert ulp_error(S.fp32_rsqrt(m), 1 / np.sqrt(m.astype(np.float64))).max() <= 1.5
    x = np.abs(random_bits(1 << 18, seed=4))
    x = x[np.isfinite(x) & (x != 0)]
    ref = 1 / np.sqrt(x.astype(np.float64))
    y = S.fp32_rsqrt(x)
    assert ulp_error(y, ref).max() <= 1.5
    assert rel_error(y, ref).max() <= 1.8e-7
    sub = f32(np.arange(1, 1 << 23, 97, dtype=np.uint32))
    assert ulp_error(S.fp32_rsqrt(sub), 1 / np.sqrt(sub.astype(np.float64))).max() <= 1.5


def test_tanh_accuracy():
    x = np.concatenate([sweep(-10, 10), sweep(-1, 1), sweep(0.6, 0.65, 1 << 14)])
    r = random_bits(1 << 18, seed=5)
    x = np.concatenate([x, r[np.isfinite(r)]])
    ref = np.tanh(x.astype(np.float64))
    y = S.fp32_tanh(x)
    assert ulp_error(y, ref).max() <= 2.5
    nonzero = ref != 0
    assert rel_error(y[nonzero], ref[nonzero]).max() <= 3e-7


@pytest.mark.parametrize("lo, hi, max_rel", [
    (-1.0, 10.0, 5e-7), (-3.0, -1.0, 2e-6), (-6.0, -3.0, 6e-6), (-10.0, -6.0, 2e-5)])
def test_gelu_accuracy(lo, hi, max_rel):
    # Relative error grows for negative x: exp(-|2u|) amplifies the rounding of u by |2u|
    # (the function's condition number); docs/special-functions.md has the table.
    x = sweep(lo, hi)
    assert rel_error(S.fp32_gelu(x), gelu64(x)).max() <= max_rel


def test_gelu_large_inputs():
    x = np.concatenate([sweep(10, 1e6), random_bits(1 << 16, seed=6)])
    x = x[np.isfinite(x) & (x > 10)]
    np.testing.assert_array_equal(bits(S.fp32_gelu(x)), bits(x))          # logistic = 1
    y = S.fp32_gelu(sweep(-20, -10))
    assert np.abs(y).max() < 1e-36 and np.all(y <= 0)
    assert np.abs(y.astype(np.float64) - gelu64(sweep(-20, -10))).max() < 2.0 ** -126


def test_gelu_grad_accuracy():
    x = sweep(-10, 10)
    ref = gelu_grad64(x)
    y = S.fp32_gelu_grad(x)
    assert np.abs(y - ref).max() <= 3e-7                       # absolute, everywhere
    away = np.abs(x - GELU_ROOT) > 0.05                        # relative, off the root
    assert rel_error(y[away], ref[away]).max() <= 2e-5
    near = (x > -3) & away
    assert rel_error(y[near], ref[near]).max() <= 4e-6


def test_log_accuracy():
    # Random bit patterns of every positive finite binade, subnormals on a grid, and a dense
    # window on each side of 1 and of the reduction switch at sqrt 2 (0x3FB504F3).
    x = np.abs(random_bits(1 << 18, seed=11))
    x = x[np.isfinite(x) & (x != 0)]
    x = np.concatenate([
        x, f32(np.arange(1, 1 << 23, 61, dtype=np.uint32)),
        f32(np.arange(0x3F700000, 0x3F880000, 5, dtype=np.uint32)),
        f32(np.arange(0x3FB504F3 - (1 << 16), 0x3FB504F3 + (1 << 16), 3, dtype=np.uint32))])
    ref = np.log(x.astype(np.float64))
    y = S.fp32_log(x)
    assert ulp_error(y, ref).max() <= 1.0
    nonzero = ref != 0
    assert rel_error(y[nonzero], ref[nonzero]).max() <= 1.2e-7


def test_log_of_powers_of_two_and_exact_one():
    # log(2**k) = k ln 2 for every binade (subnormal ones too), correctly rounded here.
    k = np.arange(-149, 128)
    y = S.fp32_log(np.exp2(k).astype(np.float32))
    np.testing.assert_array_equal(bits(y), bits((k * math.log(2)).astype(np.float32)))
    assert bits(S.fp32_log(np.float32(1.0))) == 0                      # +0, not -0


def test_tanh_grad_is_two_roundings():
    t = np.concatenate([sweep(-1, 1), random_bits(1 << 14, seed=7)])
    y = S.fp32_tanh_grad(t)
    np.testing.assert_array_equal(bits(y), bits(nx.fp32_sub(1.0, nx.fp32_mul(t, t))))


def test_div_is_a_times_recip():
    a, b = random_bits(1 << 14, seed=8), random_bits(1 << 14, seed=9)
    np.testing.assert_array_equal(bits(S.fp32_div(a, b)),
                                  bits(nx.fp32_mul(a, S.fp32_recip(b))))
    a, b = sweep(-100, 100, 4096), sweep(0.5, 1000, 4096)
    assert rel_error(S.fp32_div(a, b), a.astype(np.float64) / b)[a != 0].max() <= 2.5e-7


# --------------------------------------------------------------------------------------------
# Special values and symmetries
# --------------------------------------------------------------------------------------------

_MIN_SUB, _NEG = 0x00000001, 0x80000000

SPECIAL = {
    # input bits -> expected bits, derived from the definitions in the module notes
    "exp": {0x00000000: 0x3F800000, _NEG: 0x3F800000, INF: INF, _NEG | INF: 0,
            NAN: NAN, 0xFFC00001: NAN, 0x7F7FFFFF: INF, 0xFF7FFFFF: 0,
            _MIN_SUB: 0x3F800000, 0x42B20000: INF,               # exp(89) overflows
            0xC2D00000: 0},                                     # exp(-104) < 2**-150
    "recip": {0: INF, _NEG: _NEG | INF, INF: 0, _NEG | INF: _NEG, NAN: NAN, 0xFF812345: NAN,
              0x3F800000: 0x3F800000, 0xBF800000: 0xBF800000, 0x40000000: 0x3F000000,
              _MIN_SUB: INF, 0x00200000: INF,                  # 2**-128: 1/x = 2**128
              0x00400000: 0x7F000000,                          # 2**-127 -> 2**127
              0x7F000000: 0x00400000,                          # 2**127 -> 2**-127 subnormal
              0x7F7FFFFF: 0x00200000},                         # FLT_MAX -> 2**-128 (RNE)
    "rsqrt": {0: INF, _NEG: _NEG | INF, INF: 0, _NEG | INF: NAN, NAN: NAN,
              0xBF800000: NAN, 0x80000001: NAN, 0x3F800000: 0x3F800000,
              0x40800000: 0x3F000000,                          # rsqrt(4) = 0.5
              _MIN_SUB: 0x64800000 | 0x3504F3,                 # 2**74.5 = sqrt2 * 2**74
              0x00800000: 0x5F000000},                         # 2**-126 -> 2**63
    "tanh": {0: 0, _NEG: _NEG, INF: 0x3F800000, _NEG | INF: 0xBF800000, NAN: NAN,
             0x7FFFFFFF: NAN, _MIN_SUB: _MIN_SUB, _NEG | _MIN_SUB: _NEG | _MIN_SUB,
             0x41200000: 0x3F800000},                          # tanh(10) rounds to 1
    "tanh_grad": {0: 0x3F800000, 0x3F800000: 0, 0xBF800000: 0, NAN: NAN,
                  INF: _NEG | INF},
    "gelu": {0: 0, _NEG: _NEG, INF: INF, _NEG | INF: _NEG, NAN: NAN,
             0x7F7FFFFF: 0x7F7FFFFF, 0xFF7FFFFF: _NEG, 0xC1A00000: _NEG},   # gelu(-20) = -0
    "gelu_grad": {0: 0x3F000000, _NEG: 0x3F000000, INF: 0x3F800000, _NEG | INF: 0,
                  NAN: NAN, 0x7F7FFFFF: 0x3F800000, 0xFF7FFFFF: 0},
    "log": {0: _NEG | INF, _NEG: _NEG | INF, INF: INF, _NEG | INF: NAN, NAN: NAN,
            0xFFC00001: NAN, 0xBF800000: NAN, 0x80000001: NAN, 0xFF7FFFFF: NAN,
            0x3F800000: 0,                                       # log(1) = +0
            # correctly rounded (binary32 of the float64 log), checked in a test below
            0x40000000: 0x3F317218, 0x3F000000: 0xBF317218,      # +-ln 2
            0x7F7FFFFF: 0x42B17218, _MIN_SUB: 0xC2CE8ED0,        # log(FLT_MAX), log(2**-149)
            0x00800000: 0xC2AEAC50, 0x41200000: 0x40135D8E},     # log(2**-126), log(10)
}


@pytest.mark.parametrize("func", S.FUNCTIONS)
def test_special_values(func):
    cases = SPECIAL[func]
    got = bits(S.fp32_special(func, f32(list(cases))))
    for (x, want), y in zip(cases.items(), got.tolist()):
        assert y == want, f"{func}({x:#010x}) = {y:#010x}, expected {want:#010x}"


def test_log_table_values_are_the_float64_log_rounded():
    # The finite expected patterns of SPECIAL["log"], from math.log and struct.
    for x, want in SPECIAL["log"].items():
        xv = struct.unpack("<f", struct.pack("<I", x))[0]
        if 0 < xv < math.inf:
            assert c32(math.log(xv)) == want, f"log({xv})"


def test_rsqrt_of_min_subnormal_is_sqrt2_times_2_pow_74():
    # The expected pattern above, checked from its definition.
    assert f32(SPECIAL["rsqrt"][_MIN_SUB]) == np.float32(math.sqrt(2) * 2.0 ** 74)


@pytest.mark.parametrize("func", ["recip", "tanh"])
def test_odd_functions_are_odd_bit_for_bit(func):
    x = random_bits(1 << 16, seed=10)
    x = x[~np.isnan(x)]
    pos = bits(S.fp32_special(func, x))
    neg = bits(S.fp32_special(func, -x))
    np.testing.assert_array_equal(neg, pos ^ 0x80000000)


def test_every_nan_is_canonical():
    nans = f32([0x7F800001, 0x7FFFFFFF, 0xFF800001, 0xFFC00000, 0x7FC00001])
    for func in S.FUNCTIONS:
        assert np.all(bits(S.fp32_special(func, nans)) == NAN), func
    assert np.all(bits(S.fp32_div(nans, 1.0)) == NAN)
    assert np.all(bits(S.fp32_div(1.0, nans)) == NAN)
    assert bits(S.fp32_div(0.0, 0.0)) == NAN and bits(S.fp32_div(np.inf, np.inf)) == NAN


# --------------------------------------------------------------------------------------------
# Monotonicity on consecutive binary32 inputs
# --------------------------------------------------------------------------------------------

def _order(b):
    """Map bit patterns to integers that sort like the floats they encode."""
    b = b.astype(np.int64)
    return np.where(b >= 1 << 31, (1 << 31) - b, b)


def _steps(func, start, count):
    x = f32(np.arange(start, start + count, dtype=np.uint32))
    return np.diff(_order(bits(S.fp32_special(func, x))))


@pytest.mark.parametrize("func, start, increasing", [
    ("exp", 0x3E000000, True), ("exp", 0xBF000000, True), ("exp", 0x42A00000, True),
    ("recip", 0x3F800000, False), ("tanh", 0x3F000000, True), ("tanh", 0x3E800000, True),
    ("gelu", 0x3F000000, True), ("log", 0x3F780000, True),
    ("log", 0x3FB504F3 - (1 << 19), True), ("log", 0x00000001, True), ("log", 0x7F000000, True)])
def test_monotone_on_consecutive_inputs(func, start, increasing):
    # exp's softmax ordering, tanh across its branch switch at 0.625 (0x3F200000 lies inside
    # the 0x3F000000 window), recip on the first 2**20 significands of a binade, log across 1,
    # across its reduction switch at sqrt 2, on subnormals and near FLT_MAX. Negative
    # windows walk towards -inf as the bits grow, so the expected direction flips.
    steps = _steps(func, start, 1 << 20)
    grows = increasing != (start >= 1 << 31)
    assert np.all(steps >= 0) if grows else np.all(steps <= 0)


def test_rsqrt_is_monotone_within_one_ulp():
    # The Newton steps leave rare 1-ulp reversals (documented); never more.
    steps = _steps("rsqrt", 0x3F800000, 1 << 20)
    assert steps.max() <= 1
    assert (steps > 0).mean() < 2e-3


# --------------------------------------------------------------------------------------------
# Independent scalar reimplementation (pure Python ints, from-scratch RNE)
# --------------------------------------------------------------------------------------------

def fb(x):
    """Bits of a Python float that is exactly binary32."""
    b = struct.unpack("<I", struct.pack("<f", x))[0]
    assert struct.unpack("<f", struct.pack("<I", b))[0] == x or math.isnan(x)
    return b


def c32(x):
    """Bits of the binary32 rounding of a Python float (for the constants)."""
    return struct.unpack("<I", struct.pack("<f", x))[0]


def r_max(a, b):
    if _isnan(a) or _isnan(b):
        return NAN
    if (a | b) & 0x7FFFFFFF == 0:
        return a & b
    return a if _key(a) > _key(b) else b


def r_min(a, b):
    if _isnan(a) or _isnan(b):
        return NAN
    if (a | b) & 0x7FFFFFFF == 0:
        return a | b
    return a if _key(a) < _key(b) else b


def r_lt(a, b):
    if _isnan(a) or _isnan(b):
        return False
    if (a | b) & 0x7FFFFFFF == 0:
        return False
    return _key(a) < _key(b)


def _key(b):
    return -(b & 0x7FFFFFFF) if b >> 31 else b


def _isnan(b):
    return (b & 0x7FFFFFFF) > INF


def r_split(a):
    """(m bits, e) with |a| = m * 2**e for finite nonzero a; the documented fill otherwise."""
    a &= 0x7FFFFFFF
    field, frac = a >> 23, a & 0x7FFFFF
    if field:
        return 0x3F800000 | frac, field - 127
    z = 23 - frac.bit_length()
    return 0x3F800000 | ((frac << (z + 1)) & 0x7FFFFF), -127 - z


def r_pow2(n):
    assert -126 <= n <= 127
    return (n + 127) << 23


def r_horner(coeffs, z):
    p = c32(coeffs[0])
    for c in coeffs[1:]:
        p = ref_add(ref_mul(p, z), c32(c))
    return p


EXP_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
         1.6666665459e-1, 5.0000001201e-1)
TANH_P = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1,
          -3.33332819422e-1)
ONE = 0x3F800000


def r_exp(x):
    xc = r_min(r_max(x, fb(-104.0)), fb(89.0))
    if _isnan(xc):
        return NAN
    magic = fb(12582912.0)
    k = ref_add(ref_mul(xc, c32(1.4426950408889634)), magic)
    nf = ref_sub(k, magic)
    n = k - 0x4B400000
    assert -150 <= n <= 128
    r = ref_sub(ref_sub(xc, ref_mul(nf, fb(0.693359375))), ref_mul(nf, c32(-2.12194440e-4)))
    z = ref_mul(r, r)
    q = ref_add(ref_add(ref_mul(r_horner(EXP_P, r), z), r), ONE)
    n1 = n >> 1
    return ref_mul(ref_mul(q, r_pow2(n1)), r_pow2(n - n1))


def r_recip(x):
    if _isnan(x):
        return NAN
    sign = x & 0x80000000
    a = x & 0x7FFFFFFF
    if a == INF:
        return sign
    if a == 0:
        return sign | INF
    m, e = r_split(a)
    y = ref_sub(c32(24 / 17), ref_mul(c32(8 / 17), m))
    for _ in range(2):
        y = ref_mul(y, ref_sub(fb(2.0), ref_mul(m, y)))
    y = ref_add(y, ref_mul(y, ref_sub(ONE, ref_mul(m, y))))
    s1 = (-e) >> 1
    r = ref_mul(ref_mul(y, r_pow2(s1)), r_pow2(-e - s1))
    return sign | r


def r_rsqrt(x):
    a = x & 0x7FFFFFFF
    if _isnan(x) or (x >> 31 and a):
        return NAN
    if a == 0:
        return x | INF
    if a == INF:
        return 0
    m, e = r_split(a)
    p = e & 1
    m4 = m + (p << 23)
    e2 = e - p
    h = ref_mul(m4, fb(0.5))
    y = 0x5F3759DF - (m4 >> 1)
    for _ in range(2):
        y = ref_mul(y, ref_sub(fb(1.5), ref_mul(h, ref_mul(y, y))))
    y = ref_add(y, ref_mul(y, ref_sub(fb(0.5), ref_mul(h, ref_mul(y, y)))))
    return ref_mul(y, r_pow2(-(e2 >> 1)))


def r_logistic(t):
    e = r_exp(t | 0x80000000)
    return e, r_recip(ref_add(ONE, e))


def r_tanh(x):
    if _isnan(x):
        return NAN
    a = x & 0x7FFFFFFF
    if r_lt(a, fb(0.625)):
        z = ref_mul(a, a)
        y = ref_add(ref_mul(ref_mul(r_horner(TANH_P, z), z), a), a)
    else:
        e, r = r_logistic(ref_mul(a, fb(2.0)))
        y = ref_mul(ref_sub(ONE, e), r)
    return (x & 0x80000000) | y


def r_gelu_parts(x):
    xl = r_max(x, fb(-20.0))
    xc = r_min(xl, fb(20.0))
    c2 = c32(2 * math.sqrt(2 / math.pi))
    t = ref_mul(ref_mul(ref_add(ref_mul(ref_mul(xc, xc), c32(0.044715)), ONE), xc), c2)
    e, r = r_logistic(t)
    er = ref_mul(e, r)
    s = er if r_lt(t, 0) else r
    return xl, xc, r, er, s, c2


def r_gelu(x):
    xl, _, _, _, s, _ = r_gelu_parts(x)
    return ref_mul(xl, s)


def r_gelu_grad(x):
    _, xc, r, er, s, c2 = r_gelu_parts(x)
    d2 = ref_mul(ref_add(ref_mul(ref_mul(xc, xc), c32(3 * 0.044715)), ONE), c2)
    return ref_add(s, ref_mul(ref_mul(xc, d2), ref_mul(er, r)))


def r_tanh_grad(t):
    return ref_sub(ONE, ref_mul(t, t))


LOG_P = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
         1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
         3.3333331174e-1)


def r_log(x):
    a = x & 0x7FFFFFFF
    if _isnan(x) or (x >> 31 and a):
        return NAN
    if a == 0:
        return _NEG | INF
    if a == INF:
        return INF
    m, e = r_split(a)
    if r_lt(c32(math.sqrt(2)), m):
        m, e = m - (1 << 23), e + 1                      # m / 2, exactly
    assert -149 <= e <= 128
    fe = fb(float(e))
    f = ref_sub(m, ONE)
    z = ref_mul(f, f)
    y = ref_mul(ref_mul(r_horner(LOG_P, f), f), z)
    y = ref_sub(ref_add(y, ref_mul(fe, c32(-2.12194440e-4))), ref_mul(z, fb(0.5)))
    return ref_add(ref_add(f, y), ref_mul(fe, fb(0.693359375)))


SCALAR = {"exp": r_exp, "recip": r_recip, "rsqrt": r_rsqrt, "tanh": r_tanh,
          "tanh_grad": r_tanh_grad, "gelu": r_gelu, "gelu_grad": r_gelu_grad, "log": r_log}

#: Inputs per function for the scalar cross-check (pure Python, about 0.25 ms per gelu input).
SCALAR_INPUTS = dict.fromkeys(S.FUNCTIONS, 4000)


def scalar_inputs(func, n, seed):
    """Inputs for the scalar check: the special-value table, the function's working range on
    a random grid, and random bit patterns (every class)."""
    rng = np.random.default_rng(seed)
    ranges = {"exp": (-105, 90), "recip": (-8, 8), "rsqrt": (0, 8), "tanh": (-6, 6),
              "tanh_grad": (-1.5, 1.5), "gelu": (-12, 12), "gelu_grad": (-12, 12),
              "log": (0, 3)}
    lo, hi = ranges[func]
    grid = rng.uniform(lo, hi, n // 2).astype(np.float32)
    rand = rng.integers(0, 1 << 32, n - n // 2 - len(SPECIAL[func]), dtype=np.uint64)
    return np.concatenate([np.array(list(SPECIAL[func]), dtype=np.uint32), bits(grid),
                           rand.astype(np.uint32)])


@pytest.mark.parametrize("func", S.FUNCTIONS)
def test_matches_independent_scalar_reimplementation(func):
    xb = scalar_inputs(func, SCALAR_INPUTS[func], seed=20 + S.FUNCTION_CODES[func])
    got = bits(S.fp32_special(func, f32(xb))).tolist()
    ref = SCALAR[func]
    bad = [(x, y, ref(x)) for x, y in zip(xb.tolist(), got) if y != ref(x)]
    assert not bad, "first mismatches (x, golden, scalar): " + ", ".join(
        f"({x:#010x}, {y:#010x}, {r:#010x})" for x, y, r in bad[:5])


def test_scalar_reference_agrees_with_float64_on_a_few_values():
    # Sanity of the reference itself, independent of golden: within the documented bounds.
    for x in (0.5, 1.0, 2.0, 10.0, -3.25):
        assert abs(struct.unpack("<f", struct.pack("<I", r_exp(fb(x))))[0] / math.exp(x) - 1) \
            < 2e-7
        assert abs(struct.unpack("<f", struct.pack("<I", r_recip(fb(x))))[0] * x - 1) < 2e-7


# --------------------------------------------------------------------------------------------
# Interface
# --------------------------------------------------------------------------------------------

def test_function_codes_and_dispatch():
    assert S.FUNCTIONS == ("exp", "recip", "rsqrt", "tanh", "tanh_grad", "gelu", "gelu_grad",
                           "log")
    x = sweep(-3, 3, 64)
    for code, name in enumerate(S.FUNCTIONS):
        np.testing.assert_array_equal(bits(S.fp32_special(code, x)),
                                      bits(S.fp32_special(name, x)))
    np.testing.assert_array_equal(bits(S.fp32_special("exp", x)), bits(S.fp32_exp(x)))
    np.testing.assert_array_equal(bits(S.fp32_special("log", x)), bits(S.fp32_log(x)))
    assert "fp32_log" in S.__all__ and "log_sequence" in S.__all__


def test_results_are_float32_arrays_of_the_input_shape():
    assert S.fp32_exp(1.0).shape == () and S.fp32_exp(1.0).dtype == np.float32
    y = S.fp32_gelu(np.zeros((3, 4), dtype=np.float32))
    assert y.shape == (3, 4) and y.dtype == np.float32


def test_bad_inputs_are_rejected_with_a_hint():
    with pytest.raises(ValueError, match="function code must be in \\[0, 7\\]"):
        S.fp32_special(8, 1.0)
    with pytest.raises(ValueError, match="unknown special function 'sigmoid'; choose one of"):
        S.fp32_special("sigmoid", 1.0)
    with pytest.raises(ValueError, match="fp32_exp input.*as_f32"):
        S.fp32_exp(0.1)                       # float64 0.1 is not a binary32 value
    with pytest.raises(TypeError, match="fp32_tanh input"):
        S.fp32_tanh(np.array(["1"]))
    with pytest.raises(ValueError, match="fp32_log input.*as_f32"):
        S.fp32_log(0.1)
    with pytest.raises(ValueError, match="fp32_div operand b"):
        S.fp32_div(1.0, 0.1)


# --------------------------------------------------------------------------------------------
# The accuracy table of docs/special-functions.md
# --------------------------------------------------------------------------------------------

def accuracy_table(n=1 << 22, seed=0):
    """Return the rows ``(function, input set, count, max ulp, max rel err)`` of the doc table.

    Dense sweeps of ``n`` points per interval plus ``n`` random bit patterns where the whole
    line is the domain. Relative errors only where the float64 result is a normal binary32
    value; the gelu_grad row near its root reports the absolute error instead.
    """
    rng = np.random.default_rng(seed)
    rand = f32(rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32))
    rand = rand[np.isfinite(rand)]
    with np.errstate(over="ignore", divide="ignore"):
        cases = [
            ("exp", "sweep [-104, 89]", sweep(-104, 89, n), np.exp),
            ("exp", "random bits in [-104, 89]", rand[(rand >= -104) & (rand <= 89)], np.exp),
            ("recip", "random bits (all finite, nonzero)", rand[rand != 0],
             lambda x: 1 / x),
            ("recip", "every 2nd significand in [1, 2)",
             f32(np.arange(0x3F800000, 0x40000000, 2, dtype=np.uint32)), lambda x: 1 / x),
            ("rsqrt", "random bits (all positive finite)", np.abs(rand[rand != 0]),
             lambda x: 1 / np.sqrt(x)),
            ("rsqrt", "every 4th value in [1, 4)",
             f32(np.arange(0x3F800000, 0x40800000, 4, dtype=np.uint32)),
             lambda x: 1 / np.sqrt(x)),
            ("tanh", "sweep [-10, 10]", sweep(-10, 10, n), np.tanh),
            ("tanh", "random bits (all finite)", rand, np.tanh),
            ("gelu", "sweep [-1, 10]", sweep(-1, 10, n), gelu64),
            ("gelu", "sweep [-3, -1]", sweep(-3, -1, n), gelu64),
            ("gelu", "sweep [-6, -3]", sweep(-6, -3, n), gelu64),
            ("gelu", "sweep [-10, -6]", sweep(-10, -6, n), gelu64),
            ("gelu_grad", "sweep [-0.7, 10]", sweep(-0.7, 10, n), gelu_grad64),
            ("gelu_grad", "sweep [-3, -0.8]", sweep(-3, -0.8, n), gelu_grad64),
            ("gelu_grad", "sweep [-10, -3]", sweep(-10, -3, n), gelu_grad64),
            ("log", "random bits (all positive finite)", np.abs(rand[rand != 0]), np.log),
            ("log", "every 2nd significand in [1, 2)",
             f32(np.arange(0x3F800000, 0x40000000, 2, dtype=np.uint32)), np.log),
            ("log", "every 2nd value in [0.5, 1)",
             f32(np.arange(0x3F000000, 0x3F800000, 2, dtype=np.uint32)), np.log),
        ]
        rows = []
        for func, what, x, ref64 in cases:
            ref = ref64(x.astype(np.float64))
            y = S.fp32_special(func, x)
            normal = (np.abs(ref) >= 2.0 ** -126) & (np.abs(ref) < 2.0 ** 128)
            rows.append((func, what, len(x), float(ulp_error(y, ref).max()),
                         float(rel_error(y[normal], ref[normal]).max())))
        x = sweep(-10, 10, n)
        rows.append(("gelu_grad", "sweep [-10, 10], max absolute error", n,
                     float("nan"), float(np.abs(S.fp32_gelu_grad(x) - gelu_grad64(x)).max())))
    return rows


def log_sweep(step=1, chunk=1 << 22):
    """Return ``(count, max ulp, worst input bits, max rel err)`` of fp32_log over every
    ``step``-th bit pattern of the positive finite floats (subnormals included, from 0x1)."""
    count, worst, worst_bits, worst_rel = 0, -1.0, 0, 0.0
    for lo in range(1, 0x7F800000, chunk * step):
        xb = np.arange(lo, min(lo + chunk * step, 0x7F800000), step, dtype=np.uint32)
        x = f32(xb)
        ref = np.log(x.astype(np.float64))
        y = S.fp32_log(x)
        err = ulp_error(y, ref)
        k = int(err.argmax())
        if err[k] > worst:
            worst, worst_bits = float(err[k]), int(xb[k])
        nonzero = ref != 0
        if nonzero.any():
            worst_rel = max(worst_rel, float(rel_error(y[nonzero], ref[nonzero]).max()))
        count += len(xb)
    return count, worst, worst_bits, worst_rel


if __name__ == "__main__":
    import sys
    if len(sys.argv) == 3 and sys.argv[1] == "--log-sweep":
        n, ulp, at, rel = log_sweep(int(sys.argv[2]))
        print(f"log: {n:,} inputs (every {sys.argv[2]}th positive finite pattern), max ulp "
              f"{ulp:.4f} at {at:#010x}, max rel err {rel:.3e}")
        sys.exit(0)
    print("| function | inputs | count | max ulp | max rel err |")
    print("|---|---|---|---|---|")
    for func, what, count, ulp, rel in accuracy_table():
        print(f"| {func} | {what} | {count:,} | {ulp:.2f} | {rel:.2e} |")
