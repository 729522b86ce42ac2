"""Integer numerics of the quantized rules (golden/quant.py) against exact Python integers and
fractions: multipliers, requantization (half-up ties, saturation, zero points), the int8
contraction, and the FP32 <-> integer conversions."""

from fractions import Fraction
import math

import numpy as np
import pytest

from ttrain.golden.quant import (MULT_BITS, acc_bound, f2i, i2f, int_contract,
                                 quantize_multiplier, requant)


def test_quantize_multiplier_is_the_nearest_normalized_fixed_point():
    rng = np.random.default_rng(1)
    reals = np.concatenate([np.exp(rng.uniform(-20, 3, 500)), [1.0, 0.5, 2.0 ** -30, 3.0]])
    m, s = quantize_multiplier(reals)
    for r, mi, si in zip(reals, m, s):
        assert 1 << (MULT_BITS - 1) <= mi < 1 << MULT_BITS
        exact = Fraction(float(r)) * (1 << int(si))
        assert abs(Fraction(int(mi)) - exact) <= Fraction(1, 2)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf"), float("nan"), 1e30, 1e-30])
def test_quantize_multiplier_rejects(bad):
    with pytest.raises(ValueError, match="quantize_multiplier"):
        quantize_multiplier(bad)


def _requant_ref(acc, m, s, z, lo=-128, hi=127):
    v = math.floor(Fraction(acc * m, 1 << s) + Fraction(1, 2)) + z    # half up
    return min(max(v, lo), hi)


def test_requant_matches_exact_integers_on_random_and_edge_inputs():
    rng = np.random.default_rng(2)
    acc = np.concatenate([rng.integers(-(1 << 31), 1 << 31, 2000),
                          [0, 1, -1, (1 << 31) - 1, -(1 << 31)]]).astype(np.int64)
    m = rng.integers(1 << 14, 1 << 15, acc.size)
    s = rng.integers(10, 47, acc.size)
    z = rng.integers(-128, 128, acc.size)
    got = requant(acc, m, s, z)
    want = [_requant_ref(int(a), int(mi), int(si), int(zi)) for a, mi, si, zi in zip(acc, m, s, z)]
    assert got.tolist() == want
    assert got.min() == -128 and got.max() == 127     # saturation was exercised


def test_requant_ties_round_up_and_the_relu_floor():
    # acc * m / 2**s = k + 1/2 exactly: ties go toward +inf (half up), negative ones too.
    acc = np.array([1, 3, -1, -3, 5])
    assert requant(acc, 1, 1, 0).tolist() == [1, 2, 0, -1, 3]
    assert requant(np.array([-1000, 1000]), 1, 0, -128, lo=-128).tolist() == [-128, 127]
    assert requant(np.array([-5, 5]), 1 << 14, 14, -100, lo=-100).tolist() == [-100, -95]


def test_int_contract_is_exact_with_zero_points_and_extremes():
    rng = np.random.default_rng(3)
    for zp in (-128, 0, 17, 127):
        a = rng.integers(-128, 128, (7, 300))
        b = rng.integers(-128, 128, (300, 5))
        a[0], b[:, 0] = -128, -128                        # extreme products
        bias = rng.integers(-(1 << 20), 1 << 20, 5)
        got = int_contract(a, b, zp, bias)
        want = [[sum((int(a[i, k]) - zp) * int(b[k, j]) for k in range(300)) + int(bias[j])
                 for j in range(5)] for i in range(7)]
        assert got.tolist() == want
        assert max(abs(v) for row in want for v in row) < acc_bound(300, zp, 1 << 20)


def test_int_contract_rejects_non_int8_operands_and_shapes():
    with pytest.raises(ValueError, match="outside int8"):
        int_contract(np.array([[128]]), np.array([[1]]))
    with pytest.raises(ValueError, match="must equal b's rows"):
        int_contract(np.zeros((2, 3), int), np.zeros((4, 1), int))


def test_f2i_rounds_half_even_saturates_and_zeroes_nan():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 0.49999997, 1e10, -1e10, np.inf, -np.inf, np.nan],
                 dtype=np.float32)
    assert f2i(x).tolist() == [0, 2, 2, 0, -2, 0, 2 ** 31 - 1, -2 ** 31, 2 ** 31 - 1, -2 ** 31, 0]
    assert f2i(np.float32([127.5, 128.0, -129.0]), bits=8).tolist() == [127, 127, -128]


def test_i2f_is_exact_below_2_24_and_rounds_half_even_above():
    v = np.array([0, 1, -7, (1 << 24), (1 << 24) + 1, (1 << 24) + 3, -(1 << 31)])
    got = i2f(v)
    assert got.dtype == np.float32
    assert got.astype(np.float64).tolist() == [0, 1, -7, 1 << 24, 1 << 24, (1 << 24) + 4,
                                               -(1 << 31)]


def test_isa_integer_ops_are_the_quant_definitions():
    """The ISA table's i2f/f2i/iadd/requant words equal golden.quant and exact integers."""
    from ttrain.golden.isa import SPEC, ISAError, Elementwise
    from ttrain.golden.contract import View
    rng = np.random.default_rng(8)
    ints = rng.integers(-2 ** 31, 2 ** 31, 400)
    words = (ints & 0xFFFFFFFF).astype(np.uint32)
    sem = {k: SPEC[k].semantics for k in ("i2f", "f2i", "iadd", "requant")}
    assert np.array_equal(sem["i2f"](words, None, 0).view(np.float32), i2f(ints))
    fl = rng.normal(0, 1e5, 400).astype(np.float32)
    for mode, imm in (("nearest", 0), ("floor", 1)):
        got = sem["f2i"](fl.view(np.uint32), None, imm).view(np.int32)
        assert got.tolist() == f2i(fl, mode=mode).tolist()
    b = rng.permutation(ints)
    for bits in (8, 32):
        got = sem["iadd"](words, (b & 0xFFFFFFFF).astype(np.uint32), bits).view(np.int32)
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        assert got.tolist() == [min(max(int(x) + int(y), lo), hi) for x, y in zip(ints, b)]
    m, s = rng.integers(1 << 14, 1 << 15, 400), rng.integers(0, 40, 400)
    got = sem["requant"](words, (m | s << 15).astype(np.uint32),
                         (-77 & 0xFFFF) | 90 << 16).view(np.int32)
    want = [min(max(math.floor(Fraction(int(x) * int(mm), 1 << int(ss)) + Fraction(1, 2)), -77),
                90) for x, mm, ss in zip(ints, m, s)]
    assert got.tolist() == want
    with pytest.raises(ISAError, match="saturation width"):
        Elementwise("iadd", 1, 1, View("act", 0, 1, 1), View("act", 0, 1, 1),
                    View("act", 1, 1, 1), imm=0)
