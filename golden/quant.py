"""Integer numerics of the quantized training rules (the golden definition of every int8 number).

The integer rules (quantized zeroth-order training, ``golden/zo.py``; low-rank training later)
share one datapath. Its numbers are defined here, on top of the exact integer helpers of
:mod:`ttrain.golden.numerics` (:func:`~ttrain.golden.numerics.round_shift`,
:func:`~ttrain.golden.numerics.saturate`, :func:`~ttrain.golden.numerics.requantize`):

Formats
    * weights: int8, symmetric, one scale per output channel (``w = s_w[c] * q``);
    * biases: int32 with scale ``s_x * s_w[c]``;
    * activations: int8 with scale ``s`` and zero point ``z`` (``x = s * (q - z)``); ReLU
      outputs use ``z = -128`` so the lower saturation bound *is* the ReLU.

Contraction (:func:`int_contract`)
    ``acc = sum_k (a_k - z_a) * b_k (+ bias)`` with int8 ``a``, ``b``: every product and sum is
    exact. The hardware accumulates in int32 (two's complement, wrapping), the golden value
    is the same wrapped sum; because integer addition is associative the order of the
    accumulation does not matter (unlike FP32, where the order is part of the program). The
    model compiler rejects layers whose worst-case ``|acc|`` could reach ``2**31``
    (:func:`acc_bound`), so the wrap never happens in a compiled program.

Requantization
    ``q_y = saturate(round_shift(acc * m, shift, HALF_UP) + z_y, 8)`` with the real rescale
    ``s_x * s_w[c] / s_y`` as the fixed-point ``m / 2**shift``, ``m`` a 15-bit unsigned
    integer in ``[2**14, 2**15)`` (:func:`quantize_multiplier`). Rounding is **half up**
    (add ``2**(shift-1)``, arithmetic shift right): nearest, ties toward +inf, the cheapest
    correct rounding in hardware (one adder, no sticky logic); its tie bias is at most half an
    LSB on exact ties, which integer accumulators of many products rarely hit.

Conversions between the integer and the FP32 domain (the loss, the zeroth-order estimate and
the gradient are FP32, see ``docs/quantized-training.md``)
    * :func:`i2f`: int32 → binary32, round to nearest even (exact below ``2**24``);
    * :func:`f2i`: binary32 → int of ``bits`` bits, round to nearest even, saturating, NaN → 0.
"""

import math

import numpy as np

from .numerics import Rounding, as_f32, requantize, round_shift, wrap

__all__ = ["MULT_BITS", "REQUANT_ROUNDING", "round_shift", "quantize_multiplier", "multiplier_value",
           "int_contract", "acc_bound", "requant", "i2f", "f2i", "check_int8"]

#: Width of the unsigned requantization multiplier (fits a DSP48E2 18-bit port with sign).
MULT_BITS = 15
#: Rounding of every requantization shift.
REQUANT_ROUNDING = Rounding.HALF_UP


def quantize_multiplier(real, bits=MULT_BITS):
    """Return ``(m, shift)`` with ``m / 2**shift`` the nearest such number to ``real``.

    ``m`` is normalized to ``[2**(bits-1), 2**bits)`` (full precision) and ``shift`` lies in
    ``[0, 63]``; the rounding of ``real * 2**shift`` is to nearest, ties to even.

    Parameters
    ----------
    real : float or array_like of float
        Positive, finite scale factors (e.g. ``s_x * s_w / s_y`` per channel).
    bits : int
        Width of ``m``.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        ``int64`` multipliers and shifts of the shape of ``real``.

    Raises
    ------
    ValueError
        If a value is not positive and finite, or needs a shift outside ``[0, 63]`` (too large
        or too small a scale for this fixed-point format).
    """
    r = np.asarray(real, dtype=np.float64)
    if not np.all(np.isfinite(r)) or np.any(r <= 0):
        raise ValueError("quantize_multiplier: scales must be positive and finite; check the "
                         "quantization scales (a zero scale means an all-zero tensor)")
    m = np.empty(r.shape, dtype=np.int64)
    s = np.empty(r.shape, dtype=np.int64)
    for i, v in np.ndenumerate(r):
        frac, exp = math.frexp(float(v))         # v = frac * 2**exp, frac in [0.5, 1)
        shift = bits - exp
        mi = round(frac * (1 << bits))            # in [2**(bits-1), 2**bits]
        if mi == 1 << bits:                       # rounded up to the next power of two
            mi >>= 1
            shift -= 1
        if not 0 <= shift <= 63:
            raise ValueError(f"quantize_multiplier: scale {v:g} needs shift {shift}, outside "
                             "[0, 63]; rescale the layer (its activation or weight scales are "
                             "out of proportion)")
        m[i], s[i] = mi, shift
    return m, s


def multiplier_value(m, shift):
    """Return the real value ``m / 2**shift`` (float64) of a fixed-point multiplier."""
    return np.asarray(m, dtype=np.float64) / np.exp2(np.asarray(shift, dtype=np.float64))


def check_int8(x, name):
    """Return ``x`` as ``int64`` after checking every value is an int8; else ValueError."""
    arr = np.asarray(x)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integers, not dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if arr.size and (arr.min() < -128 or arr.max() > 127):
        raise ValueError(f"{name} holds values outside int8 [-128, 127] "
                         f"(range [{arr.min()}, {arr.max()}])")
    return arr


def acc_bound(k, zero_point, bias_max=0):
    """Return the worst-case ``|acc|`` of a ``k``-term contraction of int8 operands.

    ``|a - z_a| <= 128 + |z_a|`` and ``|b| <= 128``, so the bound is ``k * (128 + |z_a|) * 128
    + |bias_max|``; a layer is legal on the int32 accumulator when it is below ``2**31``.
    """
    return int(k) * (128 + abs(int(zero_point))) * 128 + abs(int(bias_max))


def int_contract(a, b, zero_point=0, bias=None):
    """Exact integer contraction ``sum_k (a[..., k] - zero_point) * b[k, n] (+ bias[n])``.

    Parameters
    ----------
    a : array_like of int8, shape (..., K)
    b : array_like of int8, shape (K, N)
    zero_point : int
        Zero point of ``a`` (``b`` is symmetric).
    bias : array_like of int, shape (N,), optional
        int32 bias added to every row.

    Returns
    -------
    numpy.ndarray
        ``int64`` accumulators of shape (..., N), wrapped to int32 like the hardware (a legal
        program never wraps: see :func:`acc_bound`).
    """
    a = check_int8(a, "int_contract a")
    b = check_int8(b, "int_contract b")
    if a.shape[-1] != b.shape[0] or b.ndim != 2:
        raise ValueError(f"int_contract: a's last axis ({a.shape[-1]}) must equal b's rows "
                         f"({b.shape[0]}) and b must be 2-D (got shape {b.shape})")
    # float64 products and sums are exact while |sum| < 2**53 (K * 2**15 here), and use BLAS.
    if a.shape[-1] * (128 + abs(int(zero_point))) * 128 >= 1 << 53:
        raise ValueError("int_contract: reduction too long for the exact float64 path")
    acc = np.rint((a - int(zero_point)).astype(np.float64) @ b.astype(np.float64))
    acc = acc.astype(np.int64)
    if bias is not None:
        acc = acc + np.asarray(bias, dtype=np.int64)
    return wrap(acc, 32)


def requant(acc, m, shift, zero_point, *, lo=-128, hi=127):
    """Requantize int32 accumulators to int8: ``clip(round_shift(acc*m, shift) + z, lo, hi)``.

    ``lo``/``hi`` narrow the int8 range (e.g. ``lo = z`` is a fused ReLU); rounding is
    :data:`REQUANT_ROUNDING`.
    """
    q = requantize(acc, m, shift, zero_point, 8, REQUANT_ROUNDING)
    return np.clip(q, lo, hi)


def i2f(x):
    """Convert integers (int32 range) to binary32, round to nearest even."""
    arr = np.asarray(x)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"i2f takes integers, not dtype {arr.dtype}")
    # int64 -> float64 is exact below 2**53; float64 -> float32 rounds to nearest even once.
    return np.asarray(arr.astype(np.int64).astype(np.float64).astype(np.float32))


def f2i(x, bits=32, mode="nearest"):
    """Convert binary32 values to ``bits``-bit signed integers, saturating.

    ``mode`` ``"nearest"`` rounds half to even, ``"floor"`` toward -inf. NaN converts to 0;
    ``±inf`` and out-of-range values saturate. Returns ``int64``.
    """
    if mode not in ("nearest", "floor"):
        raise ValueError(f"f2i mode must be 'nearest' or 'floor', not {mode!r}")
    with np.errstate(invalid="ignore"):      # a signalling NaN warns when widened
        f = as_f32(x).astype(np.float64)
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    f = np.where(np.isnan(f), 0.0, f)
    f = np.clip(f, lo, hi)                     # float64 holds every int32 bound exactly
    f = np.rint(f) if mode == "nearest" else np.floor(f)   # exact on float64
    return f.astype(np.int64)

