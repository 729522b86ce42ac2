"""Self-tests of ``ttrain.golden.numerics``: the FP32 contract and the integer helpers.

The FP32 operations are checked three ways:

* hand-made edge cases whose expected bit patterns are worked out in the comments (ties both
  ways, subnormals in and out, the round-up from the largest subnormal to the smallest normal,
  underflow, overflow, invalid operations, NaN canonicalization, signed zeros);
* an independent reference: exact arithmetic on the decoded operands (Python integers, and
  ``fractions.Fraction`` for a cross-check), rounded to binary32 by a from-scratch
  round-to-nearest-even routine that never touches NumPy float32 (``_round_to_binary32``);
  100,000 operand pairs per operation drawn from every class plus engineered cancellations,
  ties and subnormal/overflow results, compared bit for bit;
* the reference routine itself is pinned by hand-made cases, so it is not trusted blindly.

The integer helpers are checked against exact ``Fraction`` rounding written from the mode
definitions, over exhaustive small ranges and the int64 extremes.
"""

import math
from fractions import Fraction

import numpy as np
import pytest

from ttrain.golden import numerics as nm
from ttrain.golden.numerics import Rounding

SEED = 20261129
N_RANDOM_PAIRS = 100_000          # per operation (mul, add); sub gets a third of that

# --------------------------------------------------------------------------------------------
# Independent reference: exact arithmetic + from-scratch RNE rounding to binary32
# --------------------------------------------------------------------------------------------

NAN = 0x7FC00000
POS_INF, NEG_INF = 0x7F800000, 0xFF800000
POS_ZERO, NEG_ZERO = 0x00000000, 0x80000000
MIN_SUB = 0x00000001            # 2**-149
MAX_SUB = 0x007FFFFF            # (2**23 - 1) * 2**-149
MIN_NORMAL = 0x00800000         # 2**-126
MAX_FINITE = 0x7F7FFFFF         # (2**24 - 1) * 2**104
ONE = 0x3F800000

_FINITE, _INF, _NAN = 0, 1, 2


def _decode(bits):
    """Split a bit pattern into (class, sign, M, E) with value (-1)**sign * M * 2**E."""
    sign = bits >> 31
    exp = (bits >> 23) & 0xFF
    frac = bits & 0x7FFFFF
    if exp == 0xFF:
        return (_NAN if frac else _INF), sign, 0, 0
    if exp == 0:
        return _FINITE, sign, frac, -149              # zero (M == 0) or subnormal
    return _FINITE, sign, frac | (1 << 23), exp - 150


def _round_to_binary32(sign, n, d):
    """Round the exact positive rational n/d (times (-1)**sign) to binary32 bits, RNE.

    Written from the IEEE-754 definition only: find the binade, take the quantum of that
    binade (2**-149 in the subnormal range), divide exactly, round the remainder to nearest
    with ties to an even quotient, then encode (carry into the next binade, subnormal/normal
    boundary, overflow to infinity).
    """
    assert n > 0 and d > 0
    e = n.bit_length() - d.bit_length()                # 2**e <= n/d < 2**(e+1) after fix-up
    if (n << max(-e, 0)) < (d << max(e, 0)):
        e -= 1
    qe = max(e - 23, -149)                             # exponent of the quantum (ulp)
    num, den = n << max(-qe, 0), d << max(qe, 0)
    q, r = divmod(num, den)                            # n/d = (q + r/den) * 2**qe
    if 2 * r > den or (2 * r == den and q & 1):
        q += 1
    if q == 1 << 24:                                   # carried into the next binade
        q, qe = q >> 1, qe + 1
    s = sign << 31
    if q < 1 << 23:                                    # subnormal or zero (then qe == -149)
        assert qe == -149
        return s | q
    biased = qe + 150
    if biased >= 0xFF:
        return s | POS_INF
    return s | (biased << 23) | (q - (1 << 23))


def _round_fraction(value):
    """Round a non-zero Fraction to binary32 bits."""
    return _round_to_binary32(int(value < 0), abs(value.numerator), value.denominator)


def _to_fraction(m, e):
    return Fraction(m) * (Fraction(2) ** e)


def _ratio(sign_m, e):
    """Signed integer * 2**e as (sign, n, d) for _round_to_binary32."""
    sign = int(sign_m < 0)
    mag = abs(sign_m)
    return sign, mag << max(e, 0), 1 << max(-e, 0)


def ref_mul(a, b, exact="int"):
    """Reference binary32 product of two bit patterns."""
    ca, sa, ma, ea = _decode(a)
    cb, sb, mb, eb = _decode(b)
    sign = sa ^ sb
    if ca == _NAN or cb == _NAN:
        return NAN
    if ca == _INF or cb == _INF:
        if (ca == _FINITE and ma == 0) or (cb == _FINITE and mb == 0):
            return NAN                                 # inf * 0
        return (sign << 31) | POS_INF
    if ma == 0 or mb == 0:
        return sign << 31
    if exact == "int":
        e = ea + eb
        return _round_to_binary32(sign, (ma * mb) << max(e, 0), 1 << max(-e, 0))
    value = _to_fraction(ma, ea) * _to_fraction(mb, eb)
    return _round_fraction(-value if sign else value)


def ref_add(a, b, exact="int"):
    """Reference binary32 sum of two bit patterns."""
    ca, sa, ma, ea = _decode(a)
    cb, sb, mb, eb = _decode(b)
    if ca == _NAN or cb == _NAN:
        return NAN
    if ca == _INF and cb == _INF:
        return NAN if sa != sb else (sa << 31) | POS_INF
    if ca == _INF:
        return (sa << 31) | POS_INF
    if cb == _INF:
        return (sb << 31) | POS_INF
    if exact == "int":
        e = min(ea, eb)
        total = (-1) ** sa * (ma << (ea - e)) + (-1) ** sb * (mb << (eb - e))
        if total == 0:
            return NEG_ZERO if (sa and sb) else POS_ZERO   # exact zero: -0 only for -0 + -0
        return _round_to_binary32(*_ratio(total, e))
    value = (-1) ** sa * _to_fraction(ma, ea) + (-1) ** sb * _to_fraction(mb, eb)
    if value == 0:
        return NEG_ZERO if (sa and sb) else POS_ZERO
    return _round_fraction(value)


def ref_sub(a, b, exact="int"):
    return ref_add(a, b ^ 0x80000000, exact)


def _value(bits):
    """Exact value of a non-NaN pattern as a Fraction (infinities as +-inf floats)."""
    c, s, m, e = _decode(bits)
    assert c != _NAN
    if c == _INF:
        return -math.inf if s else math.inf
    v = _to_fraction(m, e)
    return -v if s else v


def _is_nan(bits):
    return (bits & 0x7FFFFFFF) > 0x7F800000


# --------------------------------------------------------------------------------------------
# Operand generators (bit patterns, every class)
# --------------------------------------------------------------------------------------------

def _mantissas(rng, n):
    """23-bit fractions: full random, sparse (few significant bits), near all-ones, zero."""
    style = rng.integers(0, 4, n)
    full = rng.integers(0, 1 << 23, n, dtype=np.int64)
    keep = rng.integers(0, 24, n)
    sparse = (full >> (23 - keep)) << (23 - keep)
    ones = (1 << 23) - 1 - rng.integers(0, 8, n)
    return np.select([style == 0, style == 1, style == 2], [full, sparse, ones], 0)


def random_bits(rng, n):
    """Bit patterns from every class with random signs (as int64 holding uint32 values)."""
    cls = rng.integers(0, 12, n)
    mant = _mantissas(rng, n)
    exp = np.select(
        [cls == 0, cls == 1, cls == 2, cls == 3, cls == 4, cls == 5, cls == 6, cls == 7,
         cls == 8, cls == 9],
        [0,                                   # zero
         0,                                   # subnormal (random fraction)
         0,                                   # tiny subnormal
         rng.integers(120, 135, n),           # near 1
         rng.integers(1, 255, n),             # any normal
         rng.integers(240, 255, n),           # huge
         rng.integers(1, 13, n),              # tiny normal
         254,                                 # top binade
         1,                                   # bottom normal binade
         255],                                # infinity
        255)                                  # NaN (classes 10, 11)
    frac = np.select(
        [cls == 0, cls == 1, cls == 2, cls == 9, cls >= 10],
        [0,
         np.maximum(mant, 1),
         rng.integers(1, 16, n),
         0,
         rng.integers(1, 1 << 23, n)],        # any payload, quiet or signalling
        mant)
    sign = rng.integers(0, 2, n)
    return (sign << 31) | (exp.astype(np.int64) << 23) | frac.astype(np.int64)


def _bit_length(m):
    """Bit lengths of positive int64 values below 2**53 (frexp is exact there)."""
    return np.frexp(m.astype(np.float64))[1].astype(np.int64)


def _encode(sign, m, e):
    """Patterns of (-1)**sign * m * 2**e for 0 < m < 2**24 that are representable."""
    length = _bit_length(m)
    lead = e + length - 1                                  # exponent of the leading bit
    normal = sign << 31 | (lead + 127).clip(1, 254) << 23 | ((m << (24 - length)) & 0x7FFFFF)
    subnormal = sign << 31 | (m << (e + 149).clip(0, 23))
    return np.where(lead >= -126, normal, subnormal)


def engineered_mul_pairs(rng, n):
    """Products that are exact ties (normal and subnormal range), underflow or overflow.

    Each pair is built as A * 2**ta times B * 2**tb with integer significands A, B < 2**24:
    kind 0: odd A, B whose product has exactly 25 bits -- a tie between two 24-bit
    neighbours -- anywhere in the normal range; kind 1: odd product with its last bit at
    2**-150, half the subnormal quantum -- a tie in the subnormal range (or at the boundary);
    kind 2: random A, B with the product's leading bit in [-175, -121] (subnormal results and
    underflow to zero); kind 3: leading bit in [124, 130] (around the overflow threshold).
    """
    m = 4 * n
    kind = rng.integers(0, 4, m)
    la = rng.integers(1, 25, m)
    a_tie = rng.integers(0, 1 << 24, m) % (1 << (la - 1)) + (1 << (la - 1)) | 1
    lb = np.where(kind == 0, np.maximum(25 - la, 1), rng.integers(0, 1 << 30, m) % (25 - la) + 1)
    b_tie = rng.integers(0, 1 << 24, m) % (1 << (lb - 1)) + (1 << (lb - 1)) | 1
    a_rand = rng.integers(1, 1 << 24, m)
    b_rand = rng.integers(1, 1 << 24, m)
    tie = kind <= 1
    a_int = np.where(tie, a_tie, a_rand)
    b_int = np.where(tie, b_tie, b_rand)
    prod_len = _bit_length(a_int * b_int)
    lead = np.where(kind == 2, rng.integers(-175, -120, m), rng.integers(124, 131, m))
    t = np.select([kind == 0, kind == 1], [rng.integers(-149, 100, m), -150],
                  lead - prod_len + 1)                     # exponent of the product's last bit
    len_a, len_b = _bit_length(a_int), _bit_length(b_int)
    lo = np.maximum(-149, t - 128 + len_b)                 # keep both operands representable
    hi = np.minimum(128 - len_a, t + 149)
    ok = (lo <= hi) & (lb <= 24) & ((kind != 0) | (prod_len == 25))
    ta = lo + (rng.random(m) * (hi - lo + 1)).astype(np.int64)
    tb = t - ta
    a = _encode(rng.integers(0, 2, m), a_int, ta)[ok]
    b = _encode(rng.integers(0, 2, m), b_int, tb)[ok]
    assert len(a) >= n
    return np.stack([a[:n], b[:n]], axis=1)


def engineered_add_pairs(rng, n):
    """Sums that cancel, tie, land in the subnormal range or overflow."""
    a = random_bits(rng, n)
    finite = ((a >> 23) & 0xFF) != 0xFF
    a = np.where(finite, a, ONE)
    kind = rng.integers(0, 5, n)
    sign_b = rng.integers(0, 2, n) << 31
    exp_a = (a >> 23) & 0xFF
    # 0: -a nudged by a few ulps (massive cancellation; exactly -a gives +0).
    opposite_sign = (a ^ (1 << 31)) & (1 << 31)
    nudged = opposite_sign | ((a & 0x7FFFFFFF) + rng.integers(-3, 4, n)).clip(0, MAX_FINITE)
    # 1: close exponents, random mantissa and sign (alignment and rounding of every kind).
    close_exp = (exp_a + rng.integers(-26, 27, n)).clip(0, 254)
    close = sign_b | (close_exp << 23) | _mantissas(rng, n)
    # 2: exactly (2k+1)/2 ulps of a: a tie unless the sum changes binade.
    ulp_exp = np.maximum(exp_a, 1) - 150                 # ulp of a is 2**ulp_exp
    k_odd = 2 * rng.integers(0, 4, n) + 1                # 1, 3, 5, 7 half-ulps
    half_exp = ulp_exp - 1                               # value k_odd * 2**half_exp
    lead = half_exp + np.floor(np.log2(k_odd)).astype(np.int64)
    biased = lead + 127
    frac = ((k_odd << 23) >> np.floor(np.log2(k_odd)).astype(np.int64)) & 0x7FFFFF
    tie = np.where(biased >= 1, sign_b | (biased.clip(0, 254) << 23) | frac, ONE)
    # 3: subnormal / tiny operands (results in or near the subnormal range).
    tiny = sign_b | (rng.integers(0, 3, n) << 23) | _mantissas(rng, n)
    a = np.where(kind == 3, (a & (1 << 31)) | (rng.integers(0, 3, n) << 23) | _mantissas(rng, n),
                 a)
    # 4: huge operands (overflow or not).
    huge = sign_b | (rng.integers(250, 255, n) << 23) | _mantissas(rng, n)
    a = np.where(kind == 4, (a & (1 << 31)) | (rng.integers(250, 255, n) << 23)
                 | _mantissas(rng, n), a)
    b = np.select([kind == 0, kind == 1, kind == 2, kind == 3], [nudged, close, tie, tiny], huge)
    return np.stack([a, b], axis=1)


def operand_pairs(op, n, seed):
    rng = np.random.default_rng(seed)
    n_eng = n // 2
    rand = np.stack([random_bits(rng, n - n_eng), random_bits(rng, n - n_eng)], axis=1)
    eng = engineered_mul_pairs(rng, n_eng) if op == "mul" else engineered_add_pairs(rng, n_eng)
    pairs = np.concatenate([rand, eng])
    # Swap half the pairs so operand order is exercised too.
    swap = rng.integers(0, 2, len(pairs)).astype(bool)
    pairs[swap] = pairs[swap][:, ::-1]
    return pairs.astype(np.uint32)


def f32(bits):
    return nm.bits_to_f32(np.asarray(bits, dtype=np.uint32))


def bits_of(x):
    return nm.f32_to_bits(x)


# --------------------------------------------------------------------------------------------
# The reference itself, pinned by hand
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, expected", [
    (Fraction(1), ONE),
    (Fraction(-3, 2), 0xBFC00000),
    (Fraction(1, 3), 0x3EAAAAAB),                   # 0.0101.. rounds up at the 24th bit
    (Fraction(2) ** -149, MIN_SUB),
    (Fraction(2) ** -150, POS_ZERO),                # tie between 0 and 2**-149: even is 0
    (Fraction(3) * Fraction(2) ** -151, MIN_SUB),   # 0.75 quantum rounds up
    (Fraction(3) * Fraction(2) ** -150, 0x00000002),  # 1.5 quanta: tie, even quotient 2
    ((2 ** 24 - 1) * Fraction(2) ** -150, MIN_NORMAL),  # half-way above max subnormal -> 2**-126
    (-(2 ** 24 - 1) * Fraction(2) ** -150, 0x80800000),
    ((2 ** 24 - 3) * Fraction(2) ** -150, 0x007FFFFE),  # tie, even quotient 2**23 - 2
    (Fraction(2) ** 128 * (1 - Fraction(2) ** -25), POS_INF),  # overflow threshold itself
    (Fraction(2) ** 128 * (1 - Fraction(2) ** -25) - Fraction(1, 10 ** 9), MAX_FINITE),
    (-Fraction(2) ** 128, NEG_INF),
    (Fraction(2) ** 127, 0x7F000000),
])
def test_reference_rounding_is_pinned(value, expected):
    assert _round_fraction(value) == expected


def test_reference_int_and_fraction_paths_agree():
    # The fast integer path used for the large random runs and the Fraction path compute the
    # same exact value; check them against each other on a mixed sample.
    for op in ("mul", "add"):
        ref = ref_mul if op == "mul" else ref_add
        pairs = operand_pairs(op, 4000, SEED + 7)
        for a, b in pairs.tolist():
            assert ref(a, b, "int") == ref(a, b, "fraction"), (op, hex(a), hex(b))


# --------------------------------------------------------------------------------------------
# Hand-made edge cases (expected bits derived in the comments, not produced by the code)
# --------------------------------------------------------------------------------------------

MUL_CASES = [
    # ties in the normal range
    (0x3F800800, 0x3F800800, 0x3F801000),  # (1+2**-12)**2 = 1+2**-11+2**-24: tie, even -> down
    (0x3F800001, 0x3FC00000, 0x3FC00002),  # (1+2**-23)*1.5 = 1.5+2**-23+2**-24: tie, odd -> up
    (0xBF800001, 0x3FC00000, 0xBFC00002),  # same, negative: ties are symmetric
    (0x3F800001, 0x3F800001, 0x3F800002),  # (1+2**-23)**2 = 1+2**-22+2**-46: above 1+2**-22
    # subnormal inputs and outputs
    (MIN_SUB, 0x3F000000, POS_ZERO),       # 2**-150: tie between 0 and 2**-149 -> 0 (even)
    (MIN_SUB, 0x3F400000, MIN_SUB),        # 0.75 * 2**-149 -> 2**-149
    (0x00000003, 0x3F000000, 0x00000002),  # 1.5 * 2**-149: tie -> 2 * 2**-149 (even)
    (MIN_SUB, 0x4B000000, MIN_NORMAL),     # 2**-149 * 2**23 = 2**-126, the smallest normal
    (MAX_SUB, 0x40000000, 0x00FFFFFE),     # 2 * max subnormal = (2**24-2)*2**-149, normal, exact
    (MIN_NORMAL, 0x3F000000, 0x00400000),  # 2**-126 / 2 = subnormal 2**-127
    (MIN_NORMAL, 0xBF000000, 0x80400000),
    # largest subnormal rounds up to the smallest normal: 4095*2**-75 * 4097*2**-75
    # = (2**24-1)*2**-150, half-way between (2**23-1)*2**-149 and 2**-126 -> 2**-126
    (0x1FFFF000, 0x20000800, MIN_NORMAL),
    # normal * normal underflowing to a subnormal / to zero
    (0x20000000, 0x1C800000, 0x00010000),  # 2**-63 * 2**-70 = 2**-133 = 2**16 * 2**-149
    (0x1A000000, 0x1A000000, POS_ZERO),    # 2**-75 * 2**-75 = 2**-150: tie -> +0
    (0x1A000000, 0x9A000000, NEG_ZERO),    # ... with a negative operand -> -0
    (0x1A400000, 0x1A000000, MIN_SUB),     # 1.5*2**-150 -> 2**-149
    (0x00800000, 0x00800000, POS_ZERO),    # 2**-252 -> +0
    # overflow to +-inf
    (MAX_FINITE, 0x40000000, POS_INF),
    (MAX_FINITE, 0xC0000000, NEG_INF),
    (0x7F000000, 0x40000000, POS_INF),     # 2**127 * 2 = 2**128
    (MAX_FINITE, ONE, MAX_FINITE),
    # infinities, invalid, NaN propagation (always the canonical bits)
    (POS_INF, POS_ZERO, NAN),
    (NEG_ZERO, NEG_INF, NAN),
    (POS_INF, 0xBF800000, NEG_INF),
    (NEG_INF, MIN_SUB, NEG_INF),
    (0x7F800001, ONE, NAN),                # signalling NaN
    (0xFFC00000, ONE, NAN),                # negative quiet NaN
    (0x7FFFFFFF, POS_INF, NAN),
    (ONE, 0xFF812345, NAN),
    # signed zeros
    (NEG_ZERO, ONE, NEG_ZERO),             # (-0) * (+1) = -0
    (NEG_ZERO, NEG_ZERO, POS_ZERO),
    (POS_ZERO, MAX_FINITE, POS_ZERO),
    (NEG_ZERO, MAX_SUB, NEG_ZERO),
]

ADD_CASES = [
    # ties in the normal range
    (ONE, 0x33800000, ONE),                # 1 + 2**-24: tie, 1 is even -> 1
    (0x3F800001, 0x33800000, 0x3F800002),  # (1+2**-23) + 2**-24: tie, odd -> up
    (0xBF800001, 0xB3800000, 0xBF800002),  # negative mirror
    (ONE, 0x33C00000, 0x3F800001),         # 1 + 1.5*2**-24: above half -> up
    (ONE, 0x33000000, ONE),                # 1 + 2**-25: below half -> down
    (0x4B7FFFFF, 0x3F000000, 0x4B800000),  # (2**24-1) + 0.5: tie, odd -> up to 2**24
    (0x4B800000, 0x3F800000, 0x4B800000),  # 2**24 + 1: tie, even 2**24 stays
    (0x4B800001, 0x3F800000, 0x4B800002),  # (2**24+2) + 1: tie, odd -> 2**24+4
    (ONE, 0xB3800000, 0x3F7FFFFF),         # 1 - 2**-24 is exact (next binade down)
    (ONE, 0xB3000000, ONE),                # 1 - 2**-25: tie between 1-2**-24 and 1 -> 1 (even)
    # subnormal inputs and outputs (add of subnormals is always exact)
    (MIN_SUB, MIN_SUB, 0x00000002),
    (MAX_SUB, MIN_SUB, MIN_NORMAL),        # (2**23-1 + 1) * 2**-149 = 2**-126
    (MIN_NORMAL, 0x80000001, MAX_SUB),     # 2**-126 - 2**-149 = max subnormal
    (0x00800001, 0x80800000, MIN_SUB),     # normal - normal = subnormal
    (MIN_SUB, 0x80000001, POS_ZERO),
    (MIN_SUB, ONE, ONE),                   # far below half an ulp
    # overflow to +-inf
    (MAX_FINITE, 0x73800000, POS_INF),     # max + 2**104 (one ulp) = 2**128
    (MAX_FINITE, 0x73000000, POS_INF),     # max + 2**103 = the threshold 2**128*(1-2**-25): tie
    (MAX_FINITE, 0x72800000, MAX_FINITE),  # max + 2**102: below the threshold
    (0xFF7FFFFF, 0xFF7FFFFF, NEG_INF),
    # infinities and NaN
    (POS_INF, NEG_INF, NAN),               # inf - inf
    (NEG_INF, NEG_INF, NEG_INF),
    (POS_INF, MAX_FINITE, POS_INF),
    (0xFFC00001, ONE, NAN),
    (0x7F800001, POS_INF, NAN),
    # signed zeros
    (NEG_ZERO, NEG_ZERO, NEG_ZERO),        # -0 + -0 = -0
    (NEG_ZERO, POS_ZERO, POS_ZERO),        # -0 + +0 = +0 under RNE
    (POS_ZERO, NEG_ZERO, POS_ZERO),
    (0x40490FDB, 0xC0490FDB, POS_ZERO),    # x + (-x) = +0
    (0xC0490FDB, 0x40490FDB, POS_ZERO),
    (NEG_ZERO, 0x80000001, 0x80000001),    # -0 + y = y
    (POS_ZERO, 0x80000001, 0x80000001),
]

SUB_CASES = [
    (0x40490FDB, 0x40490FDB, POS_ZERO),    # x - x = +0
    (0xC0490FDB, 0xC0490FDB, POS_ZERO),
    (NEG_ZERO, POS_ZERO, NEG_ZERO),        # -0 - +0 = -0
    (POS_ZERO, POS_ZERO, POS_ZERO),
    (NEG_ZERO, NEG_ZERO, POS_ZERO),        # -0 - -0 = -0 + +0 = +0
    (POS_INF, POS_INF, NAN),               # inf - inf
    (NEG_INF, POS_INF, NEG_INF),
    (ONE, 0x33800000, 0x3F7FFFFF),         # 1 - 2**-24 exact
    (ONE, 0x33000000, ONE),                # 1 - 2**-25: tie -> 1
    (MIN_NORMAL, MIN_SUB, MAX_SUB),
    (0xFF7FFFFF, 0x73000000, NEG_INF),     # -max - 2**103: tie at the threshold -> -inf
    (0x7FC00000, 0x7FC00000, NAN),
]


def _check_cases(func, ref, cases):
    a = np.array([c[0] for c in cases], dtype=np.uint32)
    b = np.array([c[1] for c in cases], dtype=np.uint32)
    got = bits_of(func(f32(a), f32(b)))
    for i, (x, y, w) in enumerate(cases):
        assert got[i] == w, (f"{func.__name__}({x:#010x}, {y:#010x}) = {got[i]:#010x}, "
                             f"want {w:#010x}")
        # The hand cases also pin both paths of the reference used for the random runs.
        for exact in ("int", "fraction"):
            assert ref(x, y, exact) == w, f"{exact} reference disagrees on ({x:#010x}, {y:#010x})"
    # Scalar operands give the same bits as the vectorized call.
    for x, y, w in cases[:4]:
        assert int(bits_of(func(f32(x), f32(y)))) == w


def test_mul_edge_cases():
    _check_cases(nm.fp32_mul, ref_mul, MUL_CASES)


def test_add_edge_cases():
    _check_cases(nm.fp32_add, ref_add, ADD_CASES)


def test_sub_edge_cases():
    _check_cases(nm.fp32_sub, ref_sub, SUB_CASES)


def test_ops_commute_on_edge_cases():
    for func, cases in ((nm.fp32_mul, MUL_CASES), (nm.fp32_add, ADD_CASES)):
        a = f32([c[0] for c in cases])
        b = f32([c[1] for c in cases])
        np.testing.assert_array_equal(bits_of(func(a, b)), bits_of(func(b, a)))


# --------------------------------------------------------------------------------------------
# Random pairs against the independent reference
# --------------------------------------------------------------------------------------------

def _compare_with_reference(func, ref, pairs):
    got = bits_of(func(f32(pairs[:, 0]), f32(pairs[:, 1]))).tolist()
    want = [ref(a, b, "fraction") for a, b in pairs.tolist()]
    bad = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
    assert not bad, (f"{len(bad)} of {len(pairs)} differ, first: "
                     f"{pairs[bad[0], 0]:#010x}, {pairs[bad[0], 1]:#010x} -> {got[bad[0]]:#010x}, "
                     f"reference {want[bad[0]]:#010x}")
    return want


def _class_counts(results):
    r = np.asarray(results, dtype=np.uint32)
    exp = (r >> 23) & 0xFF
    frac = r & 0x7FFFFF
    return {
        "zero": int(np.sum((exp == 0) & (frac == 0))),
        "subnormal": int(np.sum((exp == 0) & (frac != 0))),
        "normal": int(np.sum((exp > 0) & (exp < 255))),
        "inf": int(np.sum((exp == 255) & (frac == 0))),
        "nan": int(np.sum(r == NAN)),
    }


def _count_ties(ref_exact_fn, pairs):
    """Number of pairs whose exact result lies exactly half-way between two binary32 values."""
    return sum(ref_exact_fn(a, b) for a, b in pairs.tolist())


def _mul_is_tie(a, b):
    ca, _, ma, ea = _decode(a)
    cb, _, mb, eb = _decode(b)
    if ca or cb or not ma or not mb:
        return False
    p, e = ma * mb, ea + eb
    lead = e + p.bit_length() - 1
    qe = max(lead - 23, -149)
    return qe - 1 >= e and (p & ((1 << (qe - e)) - 1)) == 1 << (qe - e - 1) and lead < 128


def test_mul_matches_reference_on_random_pairs():
    pairs = operand_pairs("mul", N_RANDOM_PAIRS, SEED)
    want = _compare_with_reference(nm.fp32_mul, ref_mul, pairs)
    counts = _class_counts(want)
    # The draw really covers every result class, and many exact ties.
    assert min(counts.values()) > 1000, counts
    assert _count_ties(_mul_is_tie, pairs[len(pairs) // 2:]) > 5000


def _add_is_tie(a, b):
    ca, sa, ma, ea = _decode(a)
    cb, sb, mb, eb = _decode(b)
    if ca or cb:
        return False
    e = min(ea, eb)
    total = abs((-1) ** sa * (ma << (ea - e)) + (-1) ** sb * (mb << (eb - e)))
    if not total:
        return False
    lead = e + total.bit_length() - 1
    qe = max(lead - 23, -149)
    return qe - 1 >= e and (total & ((1 << (qe - e)) - 1)) == 1 << (qe - e - 1) and lead < 128


def test_add_matches_reference_on_random_pairs():
    pairs = operand_pairs("add", N_RANDOM_PAIRS, SEED + 1)
    want = _compare_with_reference(nm.fp32_add, ref_add, pairs)
    counts = _class_counts(want)
    assert min(counts.values()) > 1000, counts
    assert _count_ties(_add_is_tie, pairs) > 5000


def test_sub_matches_reference_on_random_pairs():
    pairs = operand_pairs("add", N_RANDOM_PAIRS // 3, SEED + 2)
    _compare_with_reference(nm.fp32_sub, ref_sub, pairs)


# --------------------------------------------------------------------------------------------
# Bit views, canonicalization, negation, abs, operand checks
# --------------------------------------------------------------------------------------------

def test_bits_round_trip_keeps_every_pattern():
    rng = np.random.default_rng(SEED + 3)
    bits = random_bits(rng, 5000).astype(np.uint32)
    np.testing.assert_array_equal(bits_of(f32(bits)), bits)
    assert bits_of(f32(0x7F800001)).dtype == np.uint32
    assert f32(0x7F800001).shape == ()
    assert int(bits_of(f32(0xFFFFFFFF))) == 0xFFFFFFFF


def test_canonicalize_rewrites_only_nans():
    pats = [0x7F800001, 0x7FC00000, 0xFFC00000, 0x7FFFFFFF, 0xFFFFFFFF, 0xFF800001,
            POS_INF, NEG_INF, POS_ZERO, NEG_ZERO, MIN_SUB, MAX_FINITE, ONE]
    got = bits_of(nm.canonicalize(f32(pats))).tolist()
    assert got == [NAN] * 6 + pats[6:]
    assert nm.CANONICAL_NAN == 0x7FC00000


def test_neg_and_abs():
    pats = [POS_ZERO, NEG_ZERO, ONE, 0xBF800000, MIN_SUB, 0x80000001, POS_INF, NEG_INF,
            0x7F800001, 0xFFC00000]
    neg = bits_of(nm.fp32_neg(f32(pats))).tolist()
    assert neg == [NEG_ZERO, POS_ZERO, 0xBF800000, ONE, 0x80000001, MIN_SUB, NEG_INF, POS_INF,
                   NAN, NAN]
    ab = bits_of(nm.fp32_abs(f32(pats))).tolist()
    assert ab == [POS_ZERO, POS_ZERO, ONE, ONE, MIN_SUB, MIN_SUB, POS_INF, POS_INF, NAN, NAN]


def test_results_are_float32_arrays():
    for func in (nm.fp32_mul, nm.fp32_add, nm.fp32_sub, nm.fp32_max, nm.fp32_min):
        r = func(1.5, 2)
        assert isinstance(r, np.ndarray) and r.dtype == np.float32 and r.shape == ()
        r = func([[1.0], [2.0]], [1.0, 2.0, 3.0])
        assert r.dtype == np.float32 and r.shape == (2, 3)
    for func in (nm.fp32_neg, nm.fp32_abs, nm.canonicalize, nm.as_f32):
        r = func(2.0)
        assert isinstance(r, np.ndarray) and r.dtype == np.float32 and r.shape == ()
    r = nm.fp32_lt(1.0, [0.0, 2.0])
    assert r.dtype == bool and r.tolist() == [False, True]


def test_operands_must_be_exact_binary32():
    with pytest.raises(ValueError, match=r"0\.1.*as_f32"):
        nm.fp32_add(0.1, 1.0)
    with pytest.raises(ValueError, match="as_f32"):
        nm.fp32_mul(np.array([1.0, 1e300]), 1.0)
    with pytest.raises(ValueError, match="16777217"):
        nm.fp32_mul(2 ** 24 + 1, 1)
    with pytest.raises(TypeError, match="dtype"):
        nm.fp32_add(1 + 2j, 1.0)
    with pytest.raises(TypeError, match="dtype"):
        nm.fp32_lt("a", 1.0)
    with pytest.raises(TypeError, match="as_f32"):
        nm.bits_to_f32(1.5)
    with pytest.raises(ValueError, match="2\\*\\*32"):
        nm.bits_to_f32(-1)
    with pytest.raises(ValueError, match="2\\*\\*32"):
        nm.bits_to_f32(1 << 32)
    # Exactly representable values of other dtypes are accepted as they are.
    assert int(bits_of(nm.fp32_add(2 ** 24, np.int64(-(2 ** 63))))) == 0xDF000000
    assert int(bits_of(nm.fp32_mul(np.float64(2.0 ** -149), 1))) == MIN_SUB
    assert int(bits_of(nm.fp32_add(np.uint64(2 ** 63), 0))) == 0x5F000000
    assert int(bits_of(nm.fp32_add(np.float16(0.5), True))) == 0x3FC00000
    assert np.isnan(nm.fp32_add(float("nan"), 1.0))


def test_as_f32_rounds_to_nearest_even():
    assert int(bits_of(nm.as_f32(0.1))) == 0x3DCCCCCD          # 0.1 rounds up at bit 24
    assert int(bits_of(nm.as_f32(1 + 2.0 ** -24))) == ONE       # tie -> even
    assert int(bits_of(nm.as_f32(1 + 3 * 2.0 ** -24))) == 0x3F800002
    assert int(bits_of(nm.as_f32(2 ** 24 + 1))) == 0x4B800000   # integer tie -> even
    assert int(bits_of(nm.as_f32(1e300))) == POS_INF
    assert int(bits_of(nm.as_f32(-1e-300))) == NEG_ZERO
    assert int(bits_of(nm.as_f32(2.0 ** -149 * 0.75))) == MIN_SUB
    x = f32([0x7F800001])
    assert nm.as_f32(x) is x                                   # float32 passes unchanged
    with pytest.raises(TypeError, match="dtype"):
        nm.as_f32(["x"])


def test_environment_follows_the_contract():
    nm.check_environment()


# --------------------------------------------------------------------------------------------
# Comparisons, max and min
# --------------------------------------------------------------------------------------------

def _ref_compare(a, b):
    if _is_nan(a) or _is_nan(b):
        return dict(eq=False, lt=False, le=False, gt=False, ge=False)
    x, y = _value(a), _value(b)
    return dict(eq=x == y, lt=x < y, le=x <= y, gt=x > y, ge=x >= y)


def _ref_extremum(a, b, take_max):
    if _is_nan(a) or _is_nan(b):
        return NAN
    x, y = _value(a), _value(b)
    if x == y:                       # only +-0 vs -+0 can differ in bits
        neg_a, neg_b = a >> 31, b >> 31
        if take_max:
            return a if not neg_a else b
        return a if neg_a else b
    return a if ((x > y) == take_max) else b


def test_comparisons_max_min_match_reference():
    rng = np.random.default_rng(SEED + 4)
    a = random_bits(rng, 6000)
    b = np.where(rng.integers(0, 4, 6000) == 0, a ^ (rng.integers(0, 2, 6000) << 31),
                 random_bits(rng, 6000))                     # many equal / opposite pairs
    a, b = a.astype(np.uint32), b.astype(np.uint32)
    fa, fb = f32(a), f32(b)
    got = {name: getattr(nm, f"fp32_{name}")(fa, fb).tolist()
           for name in ("eq", "lt", "le", "gt", "ge")}
    got_max = bits_of(nm.fp32_max(fa, fb)).tolist()
    got_min = bits_of(nm.fp32_min(fa, fb)).tolist()
    for i, (x, y) in enumerate(zip(a.tolist(), b.tolist())):
        want = _ref_compare(x, y)
        for name, value in want.items():
            assert got[name][i] == value, (name, hex(x), hex(y))
        assert got_max[i] == _ref_extremum(x, y, True), ("max", hex(x), hex(y))
        assert got_min[i] == _ref_extremum(x, y, False), ("min", hex(x), hex(y))


def test_comparison_and_extremum_edge_cases():
    z, nz, nan = f32(POS_ZERO), f32(NEG_ZERO), f32(0x7FC00001)
    assert nm.fp32_eq(nz, z) and nm.fp32_le(nz, z) and nm.fp32_ge(nz, z)
    assert not nm.fp32_lt(nz, z) and not nm.fp32_gt(z, nz)
    for cmp in (nm.fp32_eq, nm.fp32_lt, nm.fp32_le, nm.fp32_gt, nm.fp32_ge):
        assert not cmp(nan, nan) and not cmp(nan, z) and not cmp(f32(POS_INF), nan)
    assert int(bits_of(nm.fp32_max(nz, z))) == POS_ZERO
    assert int(bits_of(nm.fp32_max(z, nz))) == POS_ZERO
    assert int(bits_of(nm.fp32_min(nz, z))) == NEG_ZERO
    assert int(bits_of(nm.fp32_min(z, nz))) == NEG_ZERO
    assert int(bits_of(nm.fp32_max(nz, nz))) == NEG_ZERO
    for ext in (nm.fp32_max, nm.fp32_min):
        assert int(bits_of(ext(nan, 1.0))) == NAN
        assert int(bits_of(ext(f32(NEG_INF), f32(0xFFC00000)))) == NAN
    assert int(bits_of(nm.fp32_max(f32(NEG_INF), f32(MIN_SUB)))) == MIN_SUB
    assert int(bits_of(nm.fp32_min(f32(NEG_INF), f32(MIN_SUB)))) == NEG_INF


# --------------------------------------------------------------------------------------------
# Reductions: the sequential accumulation order
# --------------------------------------------------------------------------------------------

def _ref_dot(a_row, b_row, init=NEG_ZERO):
    acc = init
    for x, y in zip(a_row, b_row):
        acc = ref_add(acc, ref_mul(x, y))
    return acc


# The reductions run either blocks through np.add.accumulate (few outputs) or a loop with one
# vectorized add per step (many outputs); each path and block split must keep the order.
REDUCTION_PATHS = [("accumulate", None), ("accumulate", 1), ("accumulate", 7), ("loop", None)]


def _force_path(monkeypatch, path, block, lead_size):
    if path == "loop":
        monkeypatch.setattr(nm, "_LOOP_MIN_LEAD", 1)
    else:
        monkeypatch.setattr(nm, "_LOOP_MIN_LEAD", 1 << 40)
    if block is not None:
        monkeypatch.setattr(nm, "_BLOCK_ELEMENTS", block * lead_size)


@pytest.mark.parametrize("path, block", REDUCTION_PATHS)
def test_dot_matches_sequential_reference(path, block, monkeypatch):
    _force_path(monkeypatch, path, block, 30)
    rng = np.random.default_rng(SEED + 5)
    # Finite values of mixed magnitude, plus a few specials, so order and rounding matter.
    a = random_bits(rng, 30 * 17).reshape(30, 17)
    b = random_bits(rng, 30 * 17).reshape(30, 17)
    near_one = (rng.integers(0, 2, a.shape) << 31) | (rng.integers(118, 136, a.shape) << 23) \
        | rng.integers(0, 1 << 23, a.shape)
    mask = rng.integers(0, 10, a.shape) > 0
    a = np.where(mask, near_one, a).astype(np.uint32)
    b = np.where(rng.integers(0, 10, b.shape) > 0, near_one[::-1], b).astype(np.uint32)
    got = bits_of(nm.fp32_dot(f32(a), f32(b))).tolist()
    want = [_ref_dot(ra, rb) for ra, rb in zip(a.tolist(), b.tolist())]
    assert got == want


def test_dot_order_and_no_fma():
    eps24 = f32(0x33800000)                                   # 2**-24
    # 1 + 2**-24 rounds back to 1 (tie to even), twice: sequential order gives exactly 1 ...
    assert int(bits_of(nm.fp32_dot([1.0, eps24, eps24], [1.0, 1.0, 1.0]))) == ONE
    # ... while adding the small terms first gives 2**-23 + 1 = 1 + 2**-23.
    assert int(bits_of(nm.fp32_dot([eps24, eps24, 1.0], [1.0, 1.0, 1.0]))) == 0x3F800001
    # Separate rounding: x = 1 + 2**-12, x*x rounds to 1 + 2**-11 (tie to even), so
    # -(1 + 2**-11) + x*x is exactly +0; a fused multiply-add would give 2**-24.
    x = f32(0x3F800800)
    assert int(bits_of(nm.fp32_dot([1.0, x], [f32(0xBF801000), x]))) == POS_ZERO
    # The accumulator starts at -0 (= from the first product): a single -0 product gives -0,
    # a +0 product gives +0, an empty dot gives -0.
    assert int(bits_of(nm.fp32_dot([-0.0], [1.0]))) == NEG_ZERO
    assert int(bits_of(nm.fp32_dot([0.0], [1.0]))) == POS_ZERO
    assert int(bits_of(nm.fp32_dot(np.zeros((2, 0), np.float32), np.zeros(0, np.float32)))[0]) \
        == NEG_ZERO
    # Overflow and invalid in the chain; NaN results are canonical.
    big = f32(MAX_FINITE)
    assert int(bits_of(nm.fp32_dot([big, big], [2.0, -2.0]))) == NAN     # inf + -inf
    assert int(bits_of(nm.fp32_dot([f32(0xFF812345), 1.0], [1.0, 1.0]))) == NAN


@pytest.mark.parametrize("path", ["accumulate", "loop"])
def test_dot_and_sum_start_value(path, monkeypatch):
    _force_path(monkeypatch, path, None, 1)
    tiny, neg_tiny = f32(0x1A000000), f32(0x9A000000)          # 2**-75 and -2**-75
    # Every product is -0 (one of them by underflow): -0 from the default start, +0 from +0.
    a, b = [neg_tiny, -0.0], [tiny, 1.0]
    assert int(bits_of(nm.fp32_dot(a, b))) == NEG_ZERO
    assert int(bits_of(nm.fp32_dot(a, b, init=0.0))) == POS_ZERO
    assert int(bits_of(nm.fp32_dot(a, b, init=-0.0))) == NEG_ZERO
    assert int(bits_of(nm.fp32_sum([-0.0, -0.0], init=-0.0))) == NEG_ZERO
    assert int(bits_of(nm.fp32_sum(np.zeros(0, np.float32), init=f32(MIN_SUB)))) == MIN_SUB
    # init=-0 is "start from the first product"; an init array accumulates into it (C += A.B).
    rng = np.random.default_rng(SEED + 10)
    x = random_bits(rng, 40 * 6).reshape(40, 6).astype(np.uint32)
    y = random_bits(rng, 40 * 6).reshape(40, 6).astype(np.uint32)
    c = random_bits(rng, 40).astype(np.uint32)
    got = bits_of(nm.fp32_dot(f32(x), f32(y), init=-0.0)).tolist()
    assert got == [_ref_dot(r[1:], s[1:], ref_mul(r[0], s[0]))
                   for r, s in zip(x.tolist(), y.tolist())]
    got = bits_of(nm.fp32_dot(f32(x), f32(y), init=f32(c))).tolist()
    assert got == [_ref_dot(r, s, i) for r, s, i in zip(x.tolist(), y.tolist(), c.tolist())]
    assert nm.fp32_dot(np.ones((2, 1, 3), np.float32), [1.0, 2.0, 3.0],
                       init=np.zeros(4, np.float32)).shape == (2, 4)
    with pytest.raises(ValueError, match="as_f32"):
        nm.fp32_dot([1.0], [1.0], init=0.1)


def test_dot_broadcasts_leading_axes():
    rng = np.random.default_rng(SEED + 6)
    a = nm.as_f32(rng.standard_normal((3, 1, 5)))
    b = nm.as_f32(rng.standard_normal((4, 5)))
    got = nm.fp32_dot(a, b)
    assert got.shape == (3, 4) and got.dtype == np.float32
    for i in range(3):
        for j in range(4):
            assert int(bits_of(got[i, j])) == _ref_dot(bits_of(a[i, 0]).tolist(),
                                                         bits_of(b[j]).tolist())
    # A non-contiguous view is handled like its copy.
    at = np.asfortranarray(nm.as_f32(rng.standard_normal((6, 8))))
    np.testing.assert_array_equal(bits_of(nm.fp32_dot(at[:, ::2], at[:, 1::2])),
                                  bits_of(nm.fp32_dot(at[:, ::2].copy(), at[:, 1::2].copy())))


def test_dot_rejects_bad_arguments():
    with pytest.raises(ValueError, match="order"):
        nm.fp32_dot([1.0], [1.0], order="pairwise")
    with pytest.raises(ValueError, match="last-axis length"):
        nm.fp32_dot([1.0, 2.0], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="at least one axis"):
        nm.fp32_dot(1.0, [1.0])


@pytest.mark.parametrize("path, block", REDUCTION_PATHS)
def test_sum_is_sequential_along_any_axis(path, block, monkeypatch):
    _force_path(monkeypatch, path, block, 20)
    rng = np.random.default_rng(SEED + 8)
    x = ((rng.integers(0, 2, (5, 9, 4)) << 31) | (rng.integers(110, 140, (5, 9, 4)) << 23)
         | rng.integers(0, 1 << 23, (5, 9, 4))).astype(np.uint32)
    fx = f32(x)

    def ref_sum(seq):
        acc = NEG_ZERO
        for v in seq:
            acc = ref_add(acc, v)
        return acc

    for axis in (0, 1, 2, -1):
        got = bits_of(nm.fp32_sum(fx, axis=axis))
        moved = np.moveaxis(x, axis, -1)
        want = np.array([ref_sum(row) for row in moved.reshape(-1, moved.shape[-1]).tolist()],
                        dtype=np.uint32).reshape(moved.shape[:-1])
        np.testing.assert_array_equal(got, want)
    assert int(bits_of(nm.fp32_sum(fx, axis=None))) == ref_sum(x.reshape(-1).tolist())
    eps24 = f32(0x33800000)
    assert int(bits_of(nm.fp32_sum([1.0, eps24, eps24]))) == ONE
    assert int(bits_of(nm.fp32_sum([-0.0, -0.0]))) == NEG_ZERO      # starts from -0
    assert int(bits_of(nm.fp32_sum([-0.0, 0.0]))) == POS_ZERO
    assert int(bits_of(nm.fp32_sum(np.zeros(0, np.float32)))) == NEG_ZERO
    with pytest.raises(ValueError, match="out of range"):
        nm.fp32_sum(fx, axis=3)
    with pytest.raises(ValueError, match="axis=None"):
        nm.fp32_sum(1.0)


# --------------------------------------------------------------------------------------------
# Integer helpers
# --------------------------------------------------------------------------------------------

def _ref_round(value, mode):
    """Round a Fraction to an integer, written from each mode's definition."""
    half = Fraction(1, 2)
    if mode is Rounding.FLOOR:
        return math.floor(value)
    if mode is Rounding.CEIL:
        return math.ceil(value)
    if mode is Rounding.TRUNC:
        return math.trunc(value)
    if mode is Rounding.HALF_UP:
        return math.floor(value + half)
    if mode is Rounding.HALF_AWAY:
        magnitude = math.floor(abs(value) + half)
        return magnitude if value >= 0 else -magnitude
    if mode is Rounding.HALF_EVEN:
        return round(value)                     # Fraction.__round__ is exact half-to-even
    raise AssertionError(mode)


MODES = [Rounding.FLOOR, Rounding.CEIL, Rounding.TRUNC, Rounding.HALF_UP, Rounding.HALF_AWAY,
         Rounding.HALF_EVEN]

# x / 2 for x = -7, -5, -3, -1, 1, 3, 5, 7 (values -3.5 ... 3.5: all ties), by hand.
TIE_TABLE = {
    Rounding.FLOOR:     [-4, -3, -2, -1, 0, 1, 2, 3],
    Rounding.CEIL:      [-3, -2, -1, 0, 1, 2, 3, 4],
    Rounding.TRUNC:     [-3, -2, -1, 0, 0, 1, 2, 3],
    Rounding.HALF_UP:   [-3, -2, -1, 0, 1, 2, 3, 4],
    Rounding.HALF_AWAY: [-4, -3, -2, -1, 1, 2, 3, 4],
    Rounding.HALF_EVEN: [-4, -2, -2, 0, 0, 2, 2, 4],
}


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_round_shift_ties_by_hand(mode):
    x = [-7, -5, -3, -1, 1, 3, 5, 7]
    assert nm.round_shift(x, 1, mode).tolist() == TIE_TABLE[mode]
    # Same ties one binade up: x/4 with x = 4k + 2 is (2k+1)/2.
    assert nm.round_shift(np.array(x) * 2, 2, mode).tolist() == TIE_TABLE[mode]
    # The mode may also be given by name.
    assert nm.round_shift(x, 1, mode.name.lower()).tolist() == TIE_TABLE[mode]


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_round_shift_matches_exact_rounding(mode):
    x = np.arange(-260, 261)
    for shift in range(0, 10):
        got = nm.round_shift(x, shift, mode)
        assert got.dtype == np.int64
        want = [_ref_round(Fraction(v, 2 ** shift), mode) for v in x.tolist()]
        assert got.tolist() == want, shift
    # int64 extremes, big shifts, and per-element shifts.
    lo, hi = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    big = np.array([lo, lo + 1, -(2 ** 62) - 1, -(2 ** 62), -3, 0, 3, 2 ** 62, 2 ** 62 + 1,
                    hi - 1, hi], dtype=np.int64)
    for shift in (1, 31, 61, 62, 63):
        got = nm.round_shift(big, shift, mode).tolist()
        assert got == [_ref_round(Fraction(v, 2 ** shift), mode) for v in big.tolist()], shift
    shifts = np.arange(0, 64)
    vals = np.full(64, -(2 ** 40) - 12345, dtype=np.int64)
    got = nm.round_shift(vals, shifts, mode).tolist()
    assert got == [_ref_round(Fraction(int(v), 2 ** int(s)), mode)
                   for v, s in zip(vals.tolist(), shifts.tolist())]


def test_round_shift_rejects_bad_arguments():
    with pytest.raises(ValueError, match=r"shift must be in \[0, 63\]"):
        nm.round_shift([1, 2], -1, Rounding.FLOOR)
    with pytest.raises(ValueError, match=r"shift must be in \[0, 63\]"):
        nm.round_shift([1, 2], [1, 64], Rounding.FLOOR)
    with pytest.raises(ValueError, match="unknown rounding mode 'nearest'.*HALF_EVEN"):
        nm.round_shift(1, 1, "nearest")
    with pytest.raises(TypeError, match="Rounding member"):
        nm.round_shift(1, 1, 3)
    with pytest.raises(TypeError, match="integers"):
        nm.round_shift([1.5], 1, Rounding.FLOOR)
    with pytest.raises(TypeError, match="integers"):
        nm.round_shift([1], 1.0, Rounding.FLOOR)
    with pytest.raises(ValueError, match="2\\*\\*63"):
        nm.round_shift(np.array([2 ** 63], dtype=np.uint64), 1, Rounding.FLOOR)
    assert Rounding.TRN is Rounding.FLOOR


def test_saturate_bounds():
    x = np.array([-(2 ** 63), -129, -128, -127, -1, 0, 1, 126, 127, 128, 255, 256, 2 ** 63 - 1])
    assert nm.saturate(x, 8).tolist() == [-128, -128, -128, -127, -1, 0, 1, 126, 127, 127, 127,
                                          127, 127]
    assert nm.saturate(x, 8, signed=False).tolist() == [0, 0, 0, 0, 0, 0, 1, 126, 127, 128,
                                                        255, 255, 255]
    assert nm.saturate(x, 1).tolist() == [-1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0]
    assert nm.saturate(x, 1, signed=False).tolist() == [0] * 6 + [1] * 7
    assert nm.saturate(x, 64).tolist() == x.tolist()
    assert nm.saturate([-(2 ** 40), 2 ** 40], 32).tolist() == [-(2 ** 31), 2 ** 31 - 1]
    assert nm.saturate(np.int8(-5), 3).dtype == np.int64


def test_wrap_matches_modular_arithmetic():
    x = np.arange(-600, 601)
    for bits in (1, 2, 7, 8, 9, 16):
        for signed in (True, False):
            got = nm.wrap(x, bits, signed).tolist()
            mod = 1 << bits
            want = [((v + mod // 2) % mod) - mod // 2 if signed else v % mod for v in x.tolist()]
            assert got == want, (bits, signed)
    big = np.array([np.iinfo(np.int64).min, -1, 2 ** 40 + 5, np.iinfo(np.int64).max])
    assert nm.wrap(big, 64).tolist() == big.tolist()
    assert nm.wrap(big, 63, signed=False).tolist() == [0, 2 ** 63 - 1, 2 ** 40 + 5, 2 ** 63 - 1]
    assert nm.wrap(big, 32).tolist() == [0, -1, 5, -1]


def test_saturate_and_wrap_reject_bad_arguments():
    for func in (nm.saturate, nm.wrap):
        with pytest.raises(ValueError, match=r"bits must be in \[1, 64\]"):
            func([1], 0)
        with pytest.raises(ValueError, match=r"bits must be in \[1, 64\]"):
            func([1], 65)
        with pytest.raises(ValueError, match=r"bits must be in \[1, 63\] for unsigned"):
            func([1], 64, signed=False)
        with pytest.raises(TypeError, match="bits must be an integer"):
            func([1], 8.0)
        with pytest.raises(TypeError, match="bits must be an integer"):
            func([1], True)
        with pytest.raises(TypeError, match="integers"):
            func([1.0], 8)


def _ref_requantize(acc, mult, shift, zp, bits, mode, signed=True):
    v = _ref_round(Fraction(acc * mult, 2 ** shift), mode) + zp
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    return min(max(v, lo), hi)


def test_requantize_matches_exact_reference():
    rng = np.random.default_rng(SEED + 9)
    acc = rng.integers(-(2 ** 31), 2 ** 31, 3000)
    acc[:40] = np.arange(-20, 20)
    mult = rng.integers(1, 2 ** 31, 3000)
    shift = rng.integers(20, 50, 3000)
    zp = rng.integers(-20, 20, 3000)
    for mode in MODES:
        got = nm.requantize(acc, mult, shift, zp, bits=8, mode=mode).tolist()
        want = [_ref_requantize(*args, 8, mode) for args in
                zip(acc.tolist(), mult.tolist(), shift.tolist(), zp.tolist())]
        assert got == want, mode
    got = nm.requantize(acc, mult, shift, 128, bits=8, signed=False).tolist()
    assert got == [_ref_requantize(a, m, s, 128, 8, Rounding.HALF_EVEN, False)
                   for a, m, s in zip(acc.tolist(), mult.tolist(), shift.tolist())]


def test_requantize_by_hand():
    # multiplier/2**shift = 3/16: 1000*3/16 = 187.5 (tie) -> 188 (even), + 1 -> 189 -> 127.
    assert nm.requantize([1000], 3, 4, 1).tolist() == [127]
    # 40*3/16 = 7.5 -> 8 (half even), -40 -> -7.5 -> -8; + zero point -3.
    assert nm.requantize([40, -40], 3, 4, -3).tolist() == [5, -11]
    assert nm.requantize([40, -40], 3, 4, -3, mode=Rounding.HALF_UP).tolist() == [5, -10]
    assert nm.requantize([40, -40], 3, 4, -3, mode="floor").tolist() == [4, -11]
    # 56*3/16 = 10.5 -> 10 (even); per-channel multipliers broadcast.
    assert nm.requantize([[56], [56]], [[3], [5]], 4, 0).tolist() == [[10], [18]]
    # int32 accumulators stay exact: 2**31-1 times 2**31-1 needs 62 bits.
    assert nm.requantize([2 ** 31 - 1], 2 ** 31 - 1, 62, 0, bits=16).tolist() == [1]
    # 16-bit output saturation.
    assert nm.requantize([10 ** 6, -(10 ** 6)], 1, 0, 0, bits=16).tolist() == [32767, -32768]


def test_requantize_rejects_bad_arguments():
    with pytest.raises(ValueError, match="overflow int64"):
        nm.requantize([2 ** 40], 2 ** 30, 10, 0)
    with pytest.raises(ValueError, match="zero_point"):
        nm.requantize([2 ** 62], 1, 0, 2 ** 62)
    with pytest.raises(ValueError, match=r"shift must be in \[0, 63\]"):
        nm.requantize([1], 1, -2, 0)
    with pytest.raises(ValueError, match=r"bits must be in"):
        nm.requantize([1], 1, 2, 0, bits=0)
    with pytest.raises(ValueError, match="unknown rounding mode"):
        nm.requantize([1], 1, 2, 0, mode="stochastic")
    with pytest.raises(TypeError, match="integers"):
        nm.requantize([1.0], 1, 2, 0)
    with pytest.raises(TypeError, match="integers"):
        nm.requantize([1], 0.5, 2, 0)
