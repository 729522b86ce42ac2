"""FP32 numerics contract and integer rounding helpers (the golden definition of every number).

FP32 contract
-------------
Every floating-point value in ttrain is an IEEE-754 binary32 number, and every operation is

* correctly rounded with **round-to-nearest, ties-to-even** (RNE);
* computed with **full subnormal support**: subnormal inputs are used as they are and subnormal
  results are produced as they are (no flush-to-zero, no denormals-are-zero);
* **separately rounded**: a multiply-add is a rounded multiply followed by a rounded add, never a
  fused multiply-add;
* **NaN-canonical**: every NaN result is the single quiet NaN with bit pattern
  :data:`CANONICAL_NAN` (``0x7FC00000``), whatever the payloads or signs of the NaN operands.

Under these rules each operation equals the NumPy ``float32`` operation followed by NaN
canonicalization, so the functions below are thin vectorized NumPy wrappers. Their tests check
them against an exact rational reference with a from-scratch rounding routine
(``tests/test_golden_numerics.py``, see ``docs/numerics.md``).

Operands of the ``fp32_*`` functions must already be binary32 values: float32 arrays are taken
as they are; other array-likes (Python numbers, lists, float64 or integer arrays) are accepted
only when every value is exactly representable in binary32, otherwise a :class:`ValueError`
asks for an explicit :func:`as_f32` (which rounds). This keeps double rounding out of golden
code. Results are always ``numpy.ndarray`` (0-d for scalar operands) of dtype ``float32``
(``bool`` for comparisons).

Accumulation order
------------------
:func:`fp32_dot` and :func:`fp32_sum` define the reference order: start from ``-0.0`` (which
is exactly "start from the first term", since ``x + (-0) == x`` for every ``x``; or from a
given ``init``) and add the (separately rounded) terms one by one, from index 0 upwards. An
empty reduction is the start value.

Integer helpers
---------------
For the quantized modes: :class:`Rounding`, :func:`round_shift`, :func:`saturate`,
:func:`wrap` and :func:`requantize`. They compute in ``int64`` with overflow-free integer
formulas (no ``np.round``, no floats) and return ``int64`` arrays.
"""

import enum
import math
import operator

import numpy as np

__all__ = [
    "CANONICAL_NAN", "NEG_ZERO",
    "as_f32", "f32_to_bits", "bits_to_f32", "canonicalize", "check_environment",
    "fp32_mul", "fp32_add", "fp32_sub", "fp32_neg", "fp32_abs",
    "fp32_eq", "fp32_lt", "fp32_le", "fp32_gt", "fp32_ge", "fp32_max", "fp32_min",
    "fp32_dot", "fp32_sum",
    "Rounding", "round_shift", "saturate", "wrap", "requantize",
]

#: Bit pattern of the one NaN every FP32 operation returns (quiet, positive, zero payload).
CANONICAL_NAN = 0x7FC00000
#: Bits of -0.0: the start of every fresh FP32 sum (:func:`fp32_sum`, :func:`fp32_dot`).
NEG_ZERO = 0x80000000

_SIGN = np.uint32(0x80000000)
_MAGNITUDE = np.uint32(0x7FFFFFFF)
_INF_BITS = np.uint32(0x7F800000)
_NAN_BITS = np.uint32(CANONICAL_NAN)

_DOT_ORDERS = ("sequential",)
_BLOCK_ELEMENTS = 1 << 20       # working-set bound of the blocked reductions (values)
_LOOP_MIN_LEAD = 256            # from this many outputs on, reductions loop over the axis


# --------------------------------------------------------------------------------------------
# Conversion and bit views
# --------------------------------------------------------------------------------------------

def _numeric_array(x, what):
    with np.errstate(all="ignore"):          # a signalling NaN raises 'invalid' when converted
        arr = np.asarray(x)
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{what} must be real numbers (bool, integer or float array-like), "
                        f"not an array of dtype {arr.dtype}")
    return arr


def as_f32(x):
    """Convert an array-like to binary32, rounding to nearest even where needed.

    This is the one place where a value that is not already binary32 gets rounded: float64 and
    large integers are rounded with RNE (values beyond the binary32 range become ``±inf``, tiny
    ones become subnormals or signed zeros). float32 input is returned unchanged (NaN payloads
    included; only operations canonicalize NaNs).

    Parameters
    ----------
    x : array_like
        Real numbers (bool, integer or floating point).

    Returns
    -------
    numpy.ndarray
        ``float32`` array with the shape of ``x`` (0-d for a scalar).

    Raises
    ------
    TypeError
        If ``x`` is not real-valued (complex, strings, objects, or integers too large for
        ``int64``).
    """
    arr = _numeric_array(x, "as_f32 input")
    if arr.dtype == np.float32:
        return arr
    with np.errstate(all="ignore"):
        return arr.astype(np.float32)


def _operand(x, name):
    """Return ``x`` as a float32 array, refusing values that would need rounding."""
    with np.errstate(all="ignore"):          # a signalling NaN raises 'invalid' when converted
        arr = np.asarray(x)
    if arr.dtype == np.float32:
        return arr
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be binary32 values (float32 array or exactly "
                        f"representable real numbers), not an array of dtype {arr.dtype}")
    with np.errstate(all="ignore"):
        f32 = arr.astype(np.float32)
        if arr.dtype.kind == "f":
            same = (f32 == arr) | (np.isnan(f32) & np.isnan(arr))
        elif arr.dtype.itemsize >= 4:
            # Wide integers: the float32 value, widened exactly to float64, must lie in the
            # integer type's range and convert back to the same integer.
            info = np.iinfo(arr.dtype)
            back = f32.astype(np.float64)
            inside = (back >= float(info.min)) & (back < float(info.max) + 1.0)
            same = inside & (np.where(inside, back, 0).astype(arr.dtype) == arr)
        else:
            same = np.ones(arr.shape, dtype=bool)  # bool, int8/16, uint8/16 all fit exactly
    if not np.all(same):
        example = arr.reshape(-1)[~np.reshape(same, -1)][0].item()
        raise ValueError(f"{name} holds {example!r}, which is not exactly representable in "
                         f"binary32; round it explicitly with as_f32(...) first")
    return f32


def _contiguous(arr):
    """Return ``arr`` C-contiguous (copying if needed), keeping 0-d arrays 0-d."""
    return arr if arr.flags.c_contiguous else np.array(arr, order="C")


def f32_to_bits(x):
    """Return the IEEE-754 bit patterns of binary32 values.

    Parameters
    ----------
    x : array_like
        Binary32 values (see the module notes on operands).

    Returns
    -------
    numpy.ndarray
        ``uint32`` array, same shape; NaN payloads are kept as they are.
    """
    return _contiguous(_operand(x, "f32_to_bits input")).view(np.uint32)


def bits_to_f32(u):
    """Return the binary32 values with the given IEEE-754 bit patterns.

    Parameters
    ----------
    u : array_like of int
        Bit patterns in ``[0, 2**32)``.

    Returns
    -------
    numpy.ndarray
        ``float32`` array, same shape, with exactly these bits (NaN payloads kept).

    Raises
    ------
    TypeError
        If ``u`` is not an integer array-like.
    ValueError
        If a pattern is negative or does not fit in 32 bits.
    """
    arr = np.asarray(u)
    if arr.dtype == np.uint32:
        return _contiguous(arr).view(np.float32)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"bits_to_f32 needs integer bit patterns, not an array of dtype "
                        f"{arr.dtype}; use as_f32 to convert numbers")
    if arr.size and (arr.min() < 0 or arr.max() > 0xFFFFFFFF):
        raise ValueError("bits_to_f32 bit patterns must lie in [0, 2**32); "
                         "mask them with & 0xFFFFFFFF if they are sign-extended")
    return arr.astype(np.uint32).view(np.float32)


def canonicalize(x):
    """Replace every NaN with the canonical quiet NaN (:data:`CANONICAL_NAN`).

    Parameters
    ----------
    x : array_like
        Binary32 values.

    Returns
    -------
    numpy.ndarray
        ``float32`` array, same shape; non-NaN values keep their exact bits.
    """
    bits = f32_to_bits(x)
    is_nan = (bits & _MAGNITUDE) > _INF_BITS
    return np.where(is_nan, _NAN_BITS, bits).astype(np.uint32).view(np.float32)


def _finish(result):
    """Canonicalize the NaNs of a freshly computed float32 result (in place when possible)."""
    result = np.asarray(result, dtype=np.float32)
    if result.ndim == 0 or not result.flags.writeable or not result.flags.c_contiguous:
        return canonicalize(result)
    bits = result.view(np.uint32)
    bits[(bits & _MAGNITUDE) > _INF_BITS] = _NAN_BITS
    return result


# --------------------------------------------------------------------------------------------
# Elementwise operations
# --------------------------------------------------------------------------------------------

def fp32_mul(a, b):
    """Multiply binary32 values elementwise (RNE, subnormals kept, canonical NaN).

    Parameters
    ----------
    a, b : array_like
        Binary32 operands; they broadcast against each other.

    Returns
    -------
    numpy.ndarray
        ``float32`` products. ``inf * 0`` and any NaN operand give :data:`CANONICAL_NAN`; the
        sign of a zero or infinite product is the XOR of the operand signs; overflow gives
        ``±inf``.
    """
    a, b = _operand(a, "fp32_mul operand a"), _operand(b, "fp32_mul operand b")
    with np.errstate(all="ignore"):
        return _finish(np.multiply(a, b))


def fp32_add(a, b):
    """Add binary32 values elementwise (RNE, subnormals kept, canonical NaN).

    Parameters
    ----------
    a, b : array_like
        Binary32 operands; they broadcast against each other.

    Returns
    -------
    numpy.ndarray
        ``float32`` sums. ``inf + -inf`` and any NaN operand give :data:`CANONICAL_NAN`. An
        exact zero sum is ``-0`` only when both operands are ``-0``; otherwise ``+0`` (so
        ``x + (-x) == +0``).
    """
    a, b = _operand(a, "fp32_add operand a"), _operand(b, "fp32_add operand b")
    with np.errstate(all="ignore"):
        return _finish(np.add(a, b))


def fp32_sub(a, b):
    """Subtract binary32 values elementwise: ``a - b``, identical to ``fp32_add(a, fp32_neg(b))``.

    Parameters
    ----------
    a, b : array_like
        Binary32 operands; they broadcast against each other.

    Returns
    -------
    numpy.ndarray
        ``float32`` differences (RNE). ``x - x == +0``; ``-0 - +0 == -0``; ``inf - inf`` and any
        NaN operand give :data:`CANONICAL_NAN`.
    """
    a, b = _operand(a, "fp32_sub operand a"), _operand(b, "fp32_sub operand b")
    with np.errstate(all="ignore"):
        return _finish(np.subtract(a, b))


def fp32_neg(a):
    """Flip the sign bit of binary32 values (exact); a NaN becomes :data:`CANONICAL_NAN`.

    Parameters
    ----------
    a : array_like
        Binary32 values.

    Returns
    -------
    numpy.ndarray
        ``float32`` array: ``-0`` for ``+0``, ``+inf`` for ``-inf``, and so on.
    """
    bits = f32_to_bits(a)
    return _finish((bits ^ _SIGN).view(np.float32))


def fp32_abs(a):
    """Clear the sign bit of binary32 values (exact); a NaN becomes :data:`CANONICAL_NAN`.

    Parameters
    ----------
    a : array_like
        Binary32 values.

    Returns
    -------
    numpy.ndarray
        ``float32`` array; ``fp32_abs(-0) == +0`` (bits ``0x00000000``).
    """
    bits = f32_to_bits(a)
    return _finish((bits & _MAGNITUDE).view(np.float32))


def _compare(ufunc, name):
    def compare(a, b):
        a, b = _operand(a, f"{name} operand a"), _operand(b, f"{name} operand b")
        with np.errstate(all="ignore"):
            return np.asarray(ufunc(a, b))
    compare.__name__ = compare.__qualname__ = name
    return compare


fp32_eq = _compare(np.equal, "fp32_eq")
fp32_eq.__doc__ = """Compare binary32 values for IEEE equality, elementwise.

Parameters
----------
a, b : array_like
    Binary32 operands; they broadcast against each other.

Returns
-------
numpy.ndarray
    ``bool`` array: ``False`` where either operand is NaN (even NaN vs itself); ``-0 == +0`` is
    ``True``.
"""
fp32_lt = _compare(np.less, "fp32_lt")
fp32_lt.__doc__ = """Compare binary32 values with IEEE ``a < b``, elementwise.

Parameters
----------
a, b : array_like
    Binary32 operands; they broadcast against each other.

Returns
-------
numpy.ndarray
    ``bool`` array: ``False`` where either operand is NaN; ``-0 < +0`` is ``False``.
"""
fp32_le = _compare(np.less_equal, "fp32_le")
fp32_le.__doc__ = """Compare binary32 values with IEEE ``a <= b``, elementwise.

Parameters
----------
a, b : array_like
    Binary32 operands; they broadcast against each other.

Returns
-------
numpy.ndarray
    ``bool`` array: ``False`` where either operand is NaN; ``+0 <= -0`` is ``True``.
"""
fp32_gt = _compare(np.greater, "fp32_gt")
fp32_gt.__doc__ = """Compare binary32 values with IEEE ``a > b``, elementwise.

Parameters
----------
a, b : array_like
    Binary32 operands; they broadcast against each other.

Returns
-------
numpy.ndarray
    ``bool`` array: ``False`` where either operand is NaN; ``+0 > -0`` is ``False``.
"""
fp32_ge = _compare(np.greater_equal, "fp32_ge")
fp32_ge.__doc__ = """Compare binary32 values with IEEE ``a >= b``, elementwise.

Parameters
----------
a, b : array_like
    Binary32 operands; they broadcast against each other.

Returns
-------
numpy.ndarray
    ``bool`` array: ``False`` where either operand is NaN; ``-0 >= +0`` is ``True``.
"""


def _extremum(a, b, name, take_max):
    a, b = _operand(a, f"{name} operand a"), _operand(b, f"{name} operand b")
    a, b = np.broadcast_arrays(a, b)
    with np.errstate(all="ignore"):
        a_bits = _contiguous(a).view(np.uint32)
        b_bits = _contiguous(b).view(np.uint32)
        pick_a = (a > b) if take_max else (a < b)
        # Equal operands differ in bits only for {-0, +0}: AND clears the sign (max -> +0),
        # OR sets it (min -> -0); for equal non-zero values both leave the bits unchanged.
        tie = (a_bits & b_bits) if take_max else (a_bits | b_bits)
        bits = np.where(pick_a, a_bits, np.where(a == b, tie, b_bits))
        bits = np.where(np.isnan(a) | np.isnan(b), _NAN_BITS, bits)
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def fp32_max(a, b):
    """Return the IEEE 754-2019 ``maximum`` of binary32 values, elementwise.

    Parameters
    ----------
    a, b : array_like
        Binary32 operands; they broadcast against each other.

    Returns
    -------
    numpy.ndarray
        ``float32`` array: :data:`CANONICAL_NAN` if either operand is NaN (NaN propagates, unlike
        ``maximumNumber``/``fmax``); ``max(-0, +0) == max(+0, -0) == +0``; otherwise the larger
        operand, bit for bit.
    """
    return _extremum(a, b, "fp32_max", take_max=True)


def fp32_min(a, b):
    """Return the IEEE 754-2019 ``minimum`` of binary32 values, elementwise.

    Parameters
    ----------
    a, b : array_like
        Binary32 operands; they broadcast against each other.

    Returns
    -------
    numpy.ndarray
        ``float32`` array: :data:`CANONICAL_NAN` if either operand is NaN;
        ``min(-0, +0) == min(+0, -0) == -0``; otherwise the smaller operand, bit for bit.
    """
    return _extremum(a, b, "fp32_min", take_max=False)


# --------------------------------------------------------------------------------------------
# Reductions (the reference accumulation order)
# --------------------------------------------------------------------------------------------

def _accumulate(init, lead_shape, terms_first=None, a_first=None, b_first=None):
    """Sequential RNE accumulation over axis 0 of ``terms_first`` (or of ``a_first * b_first``).

    ``np.add.accumulate`` is defined as ``r[i] = r[i-1] + x[i]`` (strictly left to right, one
    rounding per step; only ``reduce``/``sum`` use pairwise summation), so for few outputs
    blocks of the reduction axis run in C while the order stays the reference order (blocks
    hold about ``_BLOCK_ELEMENTS`` values). For ``_LOOP_MIN_LEAD`` outputs or more, a Python
    loop over the reduction axis with one vectorized add per step is faster (accumulate walks
    the reduction axis element by element there).
    """
    if init is None:
        acc = np.full(lead_shape, -0.0, dtype=np.float32)   # -0.0 = "from the first term"
    else:
        lead_shape = np.broadcast_shapes(lead_shape, init.shape)
        acc = np.array(np.broadcast_to(init, lead_shape), dtype=np.float32, order="C")

    def align(first):  # (K,) + shape  ->  (K,) + ones + shape, so it broadcasts under lead
        return first.reshape(first.shape[:1] + (1,) * (acc.ndim - first.ndim + 1)
                             + first.shape[1:])

    if terms_first is not None:
        terms_first = align(terms_first)
    else:
        a_first, b_first = align(a_first), align(b_first)
    k_total = (terms_first if terms_first is not None else a_first).shape[0]
    lead_size = math.prod(lead_shape)
    with np.errstate(all="ignore"):
        if lead_size >= _LOOP_MIN_LEAD:
            # Many outputs: one vectorized multiply and add per step of the reduction axis.
            product = np.empty(lead_shape, dtype=np.float32)
            for k in range(k_total):
                if terms_first is not None:
                    np.add(acc, terms_first[k], out=acc)
                else:
                    np.multiply(a_first[k], b_first[k], out=product)
                    np.add(acc, product, out=acc)
        else:
            # Few outputs: blocks of the reduction axis through np.add.accumulate.
            block = max(1, _BLOCK_ELEMENTS // max(1, lead_size))
            for k0 in range(0, k_total, block):
                k1 = min(k_total, k0 + block)
                buf = np.empty((k1 - k0 + 1,) + lead_shape, dtype=np.float32)
                buf[0] = acc
                if terms_first is not None:
                    buf[1:] = terms_first[k0:k1]
                else:
                    np.multiply(a_first[k0:k1], b_first[k0:k1], out=buf[1:])
                acc = np.add.accumulate(buf, axis=0, dtype=np.float32)[-1]
    # A NaN never turns back into a number under add, so canonicalizing once at the end equals
    # canonicalizing after every step.
    return _finish(np.array(acc, dtype=np.float32, order="C"))


def fp32_dot(a, b, order="sequential", *, init=None):
    """Return dot products over the last axis, accumulated in the reference order.

    For each position of the (broadcast) leading axes the result is ``s_K`` with
    ``s_0 = init`` (``-0.0`` by default) and
    ``s_{k+1} = fp32_add(s_k, fp32_mul(a[..., k], b[..., k]))``: every product and every
    partial sum is rounded separately (no FMA, no pairwise or tree summation), index 0 first.

    The default ``-0.0`` start is exactly "start from the first product" (``x + (-0) == x``
    for every ``x``, so a result is ``-0`` only when every product is ``-0``); this is what
    the contraction engine does for a fresh sum (:func:`ttrain.golden.contract.contract`).
    Passing the old outputs as ``init`` gives its ``accumulate`` mode (``C += A @ B``).

    Parameters
    ----------
    a, b : array_like
        Binary32 operands with at least one axis and the same last-axis length ``K``; their
        leading axes broadcast against each other.
    order : str, optional
        Accumulation order; only ``"sequential"`` (the default, described above) is defined.
    init : array_like, optional
        Binary32 start value(s) of the accumulator, broadcast against the leading axes.
        ``None`` (default) means ``+0.0``.

    Returns
    -------
    numpy.ndarray
        ``float32`` array of shape ``broadcast(a.shape[:-1], b.shape[:-1], init.shape)``.
        ``K == 0`` gives ``init``. NaNs are canonical.

    Raises
    ------
    ValueError
        For an unknown ``order``, 0-d operands, different last-axis lengths or shapes that do
        not broadcast.
    """
    if order not in _DOT_ORDERS:
        raise ValueError(f"fp32_dot order must be one of {_DOT_ORDERS}, not {order!r}")
    a, b = _operand(a, "fp32_dot operand a"), _operand(b, "fp32_dot operand b")
    if init is not None:
        init = _operand(init, "fp32_dot init")
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("fp32_dot operands need at least one axis (the reduction axis is the "
                         f"last one); got shapes {a.shape} and {b.shape}")
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(f"fp32_dot operands must have the same last-axis length, got shapes "
                         f"{a.shape} and {b.shape}; transpose or slice them first")
    lead = np.broadcast_shapes(a.shape[:-1], b.shape[:-1])
    # Reduction axis first and contiguous, so each step is one fast vectorized ufunc call.
    a_first = np.ascontiguousarray(np.moveaxis(a, -1, 0))
    b_first = np.ascontiguousarray(np.moveaxis(b, -1, 0))
    return _accumulate(init, lead, a_first=a_first, b_first=b_first)


def fp32_sum(x, axis=-1, *, init=None):
    """Sum binary32 values along an axis in the reference (sequential) order.

    ``s_0 = init`` (``-0.0`` by default, i.e. from the first term), ``s_{k+1} = fp32_add(s_k, x[k])`` along ``axis``,
    index 0 first.

    Parameters
    ----------
    x : array_like
        Binary32 values.
    axis : int or None, optional
        Axis to reduce (default the last one). ``None`` sums the flattened array in C order.
    init : array_like, optional
        Binary32 start value(s), broadcast against the result. ``None`` (default) is ``+0.0``;
        ``-0.0`` means "start from the first term".

    Returns
    -------
    numpy.ndarray
        ``float32`` array with ``axis`` removed (0-d for ``axis=None`` or 1-d input). An empty
        axis gives ``init``. NaNs are canonical.

    Raises
    ------
    ValueError
        If ``x`` is 0-d and ``axis`` is not ``None``, or ``axis`` is out of range.
    """
    x = _operand(x, "fp32_sum input")
    if init is not None:
        init = _operand(init, "fp32_sum init")
    if axis is None:
        x = x.reshape(-1)
        axis = 0
    if x.ndim == 0:
        raise ValueError("fp32_sum of a 0-d value needs axis=None")
    axis = operator.index(axis)
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"fp32_sum axis {axis} is out of range for an array with {x.ndim} "
                         f"axes; use an axis in [{-x.ndim}, {x.ndim})")
    terms = np.ascontiguousarray(np.moveaxis(x, axis, 0))
    return _accumulate(init, terms.shape[1:], terms_first=terms)


def check_environment():
    """Check that NumPy float32 arithmetic on this machine follows the FP32 contract.

    Some native libraries set the CPU's flush-to-zero / denormals-are-zero flags or another
    rounding mode when loaded; then NumPy would silently break the contract. This runs a few
    operations whose results differ under those modes. It runs once when the module is imported
    and is cheap enough to call again after importing such a library.

    Raises
    ------
    RuntimeError
        If subnormals are flushed or rounding is not to nearest even.
    """
    checks = [
        # (a bits, b bits, op, expected bits, what it detects)
        (0x00000001, 0x00000001, np.add, 0x00000002, "subnormal inputs are flushed (DAZ)"),
        (0x00800000, 0x3F000000, np.multiply, 0x00400000, "subnormal results are flushed (FTZ)"),
        (0x3F800000, 0x33800000, np.add, 0x3F800000, "ties do not round to even"),
        (0x3F800001, 0x33800000, np.add, 0x3F800002, "ties do not round to even"),
        (0xBF800001, 0xB3800000, np.add, 0xBF800002, "ties do not round to even"),
        (0x3F800000, 0x33800001, np.add, 0x3F800001, "rounding is not to nearest"),
    ]
    for a_bits, b_bits, op, want, what in checks:
        a = np.array([a_bits], dtype=np.uint32).view(np.float32)
        b = np.array([b_bits], dtype=np.uint32).view(np.float32)
        got = int(op(a, b).view(np.uint32)[0])
        if got != want:
            raise RuntimeError(f"NumPy float32 arithmetic breaks the FP32 contract: {what} "
                               f"({a_bits:#010x} {op.__name__} {b_bits:#010x} gave {got:#010x}, "
                               f"expected {want:#010x}); a native library probably changed "
                               "the FPU mode (MXCSR FTZ/DAZ or rounding); import it later or "
                               "restore the mode")


check_environment()


# --------------------------------------------------------------------------------------------
# Integer helpers
# --------------------------------------------------------------------------------------------

class Rounding(enum.Enum):
    """How :func:`round_shift` rounds ``x / 2**shift`` to an integer.

    ``FLOOR`` (alias ``TRN``, the hls4ml/ap_fixed default) toward -inf; ``CEIL`` toward +inf;
    ``TRUNC`` toward zero (C / Verilog ``/``); ``HALF_UP`` nearest, ties toward +inf;
    ``HALF_AWAY`` nearest, ties away from zero; ``HALF_EVEN`` nearest, ties to even (like
    ``np.round``, but computed exactly on integers).
    """
    FLOOR = "floor"
    TRN = "floor"
    CEIL = "ceil"
    TRUNC = "trunc"
    HALF_UP = "half_up"
    HALF_AWAY = "half_away"
    HALF_EVEN = "half_even"


def _mode(mode):
    if isinstance(mode, Rounding):
        return mode
    names = ", ".join(Rounding.__members__)
    if isinstance(mode, str):
        key = mode.upper()
        if key in Rounding.__members__:
            return Rounding[key]
        raise ValueError(f"unknown rounding mode {mode!r}; use a Rounding member or one of "
                         f"{names}")
    raise TypeError(f"rounding mode must be a Rounding member (or its name), not {mode!r}")


def _int_array(x, name):
    arr = np.asarray(x)
    if arr.dtype.kind == "b" or arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integers (int array-like), not dtype {arr.dtype}; "
                        "round floats explicitly before using the integer helpers")
    if arr.dtype == np.uint64 and arr.size and arr.max() > np.iinfo(np.int64).max:
        raise ValueError(f"{name} holds values above 2**63 - 1, which int64 cannot hold")
    return arr.astype(np.int64)


def _bits(bits, signed):
    if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)):
        raise TypeError(f"bits must be an integer, not {bits!r}")
    top = 64 if signed else 63
    if not 1 <= bits <= top:
        kind = "signed" if signed else "unsigned"
        raise ValueError(f"bits must be in [1, {top}] for {kind} int64 results, not {bits}")
    return int(bits)


def _range(bits, signed):
    if signed:
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def round_shift(x, shift, mode):
    """Divide integers by ``2**shift`` and round by ``mode``, exactly.

    With ``q = x >> shift`` (floor), remainder ``r = x - q * 2**shift`` in ``[0, 2**shift)``,
    ``above = 2*r > 2**shift`` and ``tie = 2*r == 2**shift``, the result is ``q`` plus:

    ===========  =====================================
    FLOOR        0
    CEIL         ``r != 0``
    TRUNC        ``r != 0 and x < 0``
    HALF_UP      ``above or tie``
    HALF_AWAY    ``above or (tie and x >= 0)``
    HALF_EVEN    ``above or (tie and q is odd)``
    ===========  =====================================

    No step can overflow ``int64``.

    Parameters
    ----------
    x : array_like of int
        Values (computed in ``int64``).
    shift : int or array_like of int
        Shift amounts in ``[0, 63]``; an array broadcasts against ``x`` (e.g. per channel).
    mode : Rounding or str
        Rounding mode (a :class:`Rounding` member or its name, case-insensitive).

    Returns
    -------
    numpy.ndarray
        ``int64`` array of the broadcast shape.

    Raises
    ------
    TypeError
        If ``x`` or ``shift`` are not integers, or ``mode`` is not a mode.
    ValueError
        If a shift is outside ``[0, 63]`` or ``mode`` is an unknown name.
    """
    mode = _mode(mode)
    x = _int_array(x, "round_shift x")
    shift = _int_array(shift, "round_shift shift")
    if shift.size and (shift.min() < 0 or shift.max() > 63):
        raise ValueError(f"round_shift shift must be in [0, 63], got values in "
                         f"[{shift.min()}, {shift.max()}]; a negative shift is a left shift, "
                         "do it explicitly")
    q = np.right_shift(x, shift)
    ushift = shift.astype(np.uint64)
    mask = (np.left_shift(np.uint64(1), ushift) - np.uint64(1))
    r = np.bitwise_and(x.astype(np.uint64), mask)  # two's complement bits: r = x mod 2**shift
    if mode is Rounding.FLOOR:
        inc = np.zeros(q.shape, dtype=bool)
    elif mode is Rounding.CEIL:
        inc = r != 0
    elif mode is Rounding.TRUNC:
        inc = (r != 0) & (x < 0)
    else:
        twice_r = np.left_shift(r, np.uint64(1))          # < 2**64, fits uint64
        unit = np.left_shift(np.uint64(1), ushift)        # 2**shift <= 2**63
        above, tie = twice_r > unit, twice_r == unit
        if mode is Rounding.HALF_UP:
            inc = above | tie
        elif mode is Rounding.HALF_AWAY:
            inc = above | (tie & (x >= 0))
        else:  # HALF_EVEN
            inc = above | (tie & ((q & 1) == 1))
    return np.asarray(q + inc.astype(np.int64), dtype=np.int64)


def saturate(x, bits, signed=True):
    """Clamp integers to the range of a ``bits``-wide integer.

    Parameters
    ----------
    x : array_like of int
        Values (computed in ``int64``).
    bits : int
        Width: ``[1, 64]`` when signed, ``[1, 63]`` when unsigned.
    signed : bool, optional
        Two's complement range ``[-2**(bits-1), 2**(bits-1) - 1]`` (default) or unsigned
        ``[0, 2**bits - 1]``.

    Returns
    -------
    numpy.ndarray
        ``int64`` array, same shape.

    Raises
    ------
    TypeError
        If ``x`` or ``bits`` are not integers.
    ValueError
        If ``bits`` is out of range.
    """
    bits = _bits(bits, signed)
    x = _int_array(x, "saturate x")
    lo, hi = _range(bits, signed)
    return np.asarray(np.clip(x, np.int64(lo), np.int64(hi)), dtype=np.int64)


def wrap(x, bits, signed=True):
    """Keep the low ``bits`` bits of integers (two's complement wrap-around, like hardware).

    Parameters
    ----------
    x : array_like of int
        Values (computed in ``int64``).
    bits : int
        Width: ``[1, 64]`` when signed, ``[1, 63]`` when unsigned.
    signed : bool, optional
        Read the kept bits as two's complement (default) or unsigned.

    Returns
    -------
    numpy.ndarray
        ``int64`` array, same shape: ``x`` modulo ``2**bits`` moved into the signed or unsigned
        range of that width.

    Raises
    ------
    TypeError
        If ``x`` or ``bits`` are not integers.
    ValueError
        If ``bits`` is out of range.
    """
    bits = _bits(bits, signed)
    x = _int_array(x, "wrap x")
    if bits == 64:
        return x
    low = np.bitwise_and(x, np.int64((1 << bits) - 1))
    if signed:
        negative = np.right_shift(low, np.int64(bits - 1)) & 1
        low = low - np.left_shift(negative, np.int64(bits))
    return np.asarray(low, dtype=np.int64)


def requantize(acc, multiplier, shift, zero_point, bits=8, mode=Rounding.HALF_EVEN, *,
               signed=True):
    """Rescale integer accumulators to a narrow integer format.

    ``saturate(round_shift(acc * multiplier, shift, mode) + zero_point, bits, signed)``: the
    real scale ``s_x * s_w / s_y`` is the fixed-point number ``multiplier / 2**shift``; the
    product is exact in ``int64``.

    Parameters
    ----------
    acc : array_like of int
        Accumulators (typically int32).
    multiplier : int or array_like of int
        Fixed-point multiplier(s); an array broadcasts against ``acc`` (e.g. per channel).
    shift : int or array_like of int
        Right shift(s) in ``[0, 63]``.
    zero_point : int or array_like of int
        Added after rounding.
    bits : int, optional
        Output width (default 8).
    mode : Rounding or str, optional
        Rounding of the shift (default ``HALF_EVEN``).
    signed : bool, optional
        Signed (default) or unsigned output range.

    Returns
    -------
    numpy.ndarray
        ``int64`` array of the broadcast shape, inside the output range.

    Raises
    ------
    TypeError
        For non-integer inputs or an invalid mode.
    ValueError
        For a bad ``shift``/``bits``/mode name, or if ``acc * multiplier`` (or adding the zero
        point) could overflow ``int64``.
    """
    bits = _bits(bits, signed)
    mode = _mode(mode)
    acc = _int_array(acc, "requantize acc")
    multiplier = _int_array(multiplier, "requantize multiplier")
    zero_point = _int_array(zero_point, "requantize zero_point")
    limit = 1 << 63

    def magnitude(a):
        return max(abs(int(a.min())), abs(int(a.max()))) if a.size else 0

    if magnitude(acc) * magnitude(multiplier) >= limit:
        raise ValueError("requantize: acc * multiplier could overflow int64 (|acc| * |multiplier| "
                         ">= 2**63); use a smaller multiplier with a smaller shift")
    scaled = round_shift(acc * multiplier, shift, mode)
    if magnitude(scaled) + magnitude(zero_point) >= limit:
        raise ValueError("requantize: adding zero_point could overflow int64; check zero_point")
    return saturate(scaled + zero_point, bits, signed)
