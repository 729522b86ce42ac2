"""Special functions as fixed sequences of FP32 operations (the golden definition).

exp, reciprocal, rsqrt, tanh, GELU and their derivatives and the natural logarithm, each defined as **one fixed sequence**
of the FP32 operations of :mod:`ttrain.golden.numerics` (RNE multiply, add, subtract, IEEE
``maximum``/``minimum``, ``<``), plus a handful of exact integer and bit operations on the IEEE
fields that hardware does with a few LUTs (exponent insertion for ``2**n``, splitting a float
into exponent and significand, a magic-constant seed, sign copy, a 2:1 select). No rounding
happens anywhere else, so the results are bit-exactly reproducible: the RTL special-function
unit (``rtl/special.py``) runs the same sequences on its FP32 units and must match these
functions bit for bit. ``docs/special-functions.md`` lists each sequence with its operation
count, latency and measured accuracy against float64.

How a sequence is written
-------------------------
Each function is written once, as a Python function of an *op set* ``o`` and its input(s)
(:func:`exp_sequence`, :func:`recip_sequence`, ...). The op set is the small interface below;
:class:`NumpyOps` evaluates it on float32 arrays (every FP32 operation is the corresponding
:mod:`~ttrain.golden.numerics` function), the RTL builds one pipeline stage per operation from
the same sequence functions. The public ``fp32_*`` functions are these sequences evaluated with
:class:`NumpyOps`.

Op set (``o``), all elementwise:

==========================  ================================================================
``const(v)``                binary32 constant ``v`` (must be exactly representable)
``mul, add, sub(a, b)``     FP32 operations, :func:`~ttrain.golden.numerics.fp32_mul` ...
``max, min(a, b)``          IEEE ``maximum``/``minimum`` (NaN propagates)
``lt(a, b)``                IEEE ``a < b`` (bool; false for NaN)
``is_nan, is_zero,          classification of the bit pattern (bool); ``sign`` is bit 31
is_inf, sign(a)``
``and_, or_, not_``         bool logic
``select(c, a, b)``         ``a`` where ``c`` else ``b`` (bits, no rounding)
``abs(a)``                  bit 31 cleared (a NaN stays a NaN, possibly not canonical)
``with_sign(a, s)``         bit 31 replaced by the bool ``s``
``split(a)``                ``(m, e)``: for ``a`` finite, positive and nonzero, ``a = m * 2**e``
                            with ``m`` in ``[1, 2)`` (subnormals normalized: leading-zero count
                            and shift); see :meth:`NumpyOps.split` for the other classes
``pow2(n)``                 ``2**n`` by exponent insertion: bits ``((n + 127) & 0xFF) << 23``
                            (exact for ``n`` in ``[-126, 127]``)
``scale_exp(a, n)``         bits of ``a`` plus ``n << 23`` (``a * 2**n`` while that stays normal)
``int_from_magic(k)``       bits of ``k`` minus ``0x4B400000`` (``k - 1.5*2**23`` as an integer
                            when ``k`` is an integer-valued float in ``[2**23, 2**24)``)
``magic_from_int(n)``       the float with bits ``0x4B400000 + n``, i.e. ``1.5*2**23 + n``
                            exactly (for ``|n| < 2**22``); ``magic_from_int(n) - 1.5*2**23``
                            is ``n`` as a float, exactly (the inverse of ``int_from_magic``)
``rsqrt_seed(a)``           bits ``0x5F3759DF - (bits(a) >> 1)`` (the classic magic-constant seed)
``iadd, isub(a, b)``,       integer add, subtract, arithmetic right shift by a constant, AND
``ishr(a, k), iand(a, k)``  with a constant
==========================  ================================================================

Integers (exponents) are 10-bit two's complement: every integer result wraps to
``[-512, 511]``. Every exponent of a finite input stays inside ``[-151, 150]``; only the
ignored intermediates of special inputs (NaN, infinity, zero) could wrap, and they do so
identically in golden and RTL.

Special values
--------------
Every NaN result is the canonical NaN ``0x7FC00000``. Per function:

=============  =======================================================================
exp            ``exp(NaN) = NaN``, ``exp(+inf) = +inf``, ``exp(-inf) = +0``; overflow gives
               ``+inf`` (from ``x`` about 88.72), underflow gives subnormals then ``+0``
               (below about -103.97); ``exp(±0) = 1``
recip          ``1/±0 = ±inf``, ``1/±inf = ±0``, subnormal ``x`` gives ``±inf`` when
               ``1/x`` overflows; results below ``2**-126`` are subnormal (correctly
               rounded from the significand's reciprocal)
rsqrt          ``rsqrt(+0) = +inf``, ``rsqrt(-0) = -inf``, ``rsqrt(+inf) = +0``,
               ``rsqrt(x < 0) = NaN`` (including ``-inf``); subnormal inputs are fine
tanh           odd: ``tanh(-x) = -tanh(x)`` bit for bit, ``tanh(±0) = ±0``,
               ``tanh(±inf) = ±1``
tanh_grad      ``1 - t*t`` of the tanh *output* ``t`` (plain IEEE on any input)
gelu           ``gelu(+inf) = +inf``, ``gelu(-inf) = -0``, ``gelu(±0) = ±0``
gelu_grad      ``gelu_grad(+inf) = 1``, ``gelu_grad(-inf) = +0``
log            ``log(±0) = -inf``, ``log(+inf) = +inf``, ``log(1) = +0``, ``log(x < 0) = NaN``
               (including ``-inf``); subnormal inputs are fine
=============  =======================================================================
"""

import math

import numpy as np

from . import numerics as nx

__all__ = [
    "FUNCTIONS", "FUNCTION_CODES", "NumpyOps",
    "exp_sequence", "recip_sequence", "rsqrt_sequence", "tanh_sequence", "tanh_grad_sequence",
    "gelu_sequence", "gelu_grad_sequence", "log_sequence", "SEQUENCES",
    "logistic_exp_input", "logistic_recip_input", "logistic_core", "tanh_head", "tanh_tail",
    "gelu_head", "gelu_logistic", "gelu_tail", "gelu_grad_tail",
    "fp32_exp", "fp32_recip", "fp32_div", "fp32_rsqrt", "fp32_tanh", "fp32_tanh_grad",
    "fp32_gelu", "fp32_gelu_grad", "fp32_log", "fp32_special",
    "EXP_CLAMP", "GELU_CLAMP", "TANH_POLY_BELOW", "INT_BITS",
]

#: One-input special functions, in the order of their unit function codes (``FUNCTION_CODES``).
FUNCTIONS = ("exp", "recip", "rsqrt", "tanh", "tanh_grad", "gelu", "gelu_grad", "log")
#: Function code of each name (the ``func`` field of the RTL unit's input).
FUNCTION_CODES = {name: code for code, name in enumerate(FUNCTIONS)}

#: Width of the sequences' integers (exponents), two's complement.
INT_BITS = 10

_f32 = np.float32

#: exp clamps its argument to this interval first (below, the result is +0; above, +inf).
EXP_CLAMP = (-104.0, 89.0)
_LOG2E = _f32(1.4426950408889634)           # 0x3FB8AA3B
_MAGIC = 12582912.0                         # 1.5 * 2**23: x + MAGIC rounds x to an integer
_MAGIC_BITS = 0x4B400000
_LN2_HI = 0.693359375                       # 355/512 (9 bits): n * LN2_HI is exact
_LN2_LO = _f32(-2.12194440e-4)              # LN2_HI + LN2_LO = ln 2 to about 2**-33
#: exp(r) - 1 - r = r**2 * P(r) on |r| <= ln(2)/2 (Cephes expf, minimax in float32).
_EXP_P = tuple(_f32(c) for c in (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3,
                                 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1))

#: Linear reciprocal seed on [1, 2): 24/17 - 8/17 m (relative error at most 1/17).
_RECIP_SEED = (_f32(24.0 / 17.0), _f32(8.0 / 17.0))
_RSQRT_MAGIC = 0x5F3759DF

#: tanh uses its odd polynomial below this |x|, the exp/reciprocal form from it on.
TANH_POLY_BELOW = 0.625
#: tanh(x) = x + x**3 P(x**2) on |x| < 0.625 (Cephes tanhf).
_TANH_P = tuple(_f32(c) for c in (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2,
                                  1.33314422036e-1, -3.33332819422e-1))

#: GELU constants: GELU_A as in golden/layers.py and 2*sqrt(2/pi) (twice layers.GELU_C).
_GELU_A = _f32(0.044715)
_GELU_3A = _f32(3 * 0.044715)
_GELU_2C = _f32(2.0 * math.sqrt(2.0 / math.pi))
#: gelu and gelu_grad work on x clamped to this interval (beyond it, the logistic factor is
#: exactly 0 or 1 in FP32); gelu's final multiply uses max(x, -20) so large x pass through.
GELU_CLAMP = (-20.0, 20.0)

#: log reduces the significand m in [1, 2) to m/2 when m is above this (binary32 sqrt 2,
#: 0x3FB504F3), so that log works on m in [0.7071, 1.4142] and f = m - 1 in [-0.293, 0.415].
_SQRT2 = _f32(math.sqrt(2.0))
#: log(1 + f) = f - f**2/2 + f**3 P(f) on that interval (Cephes logf, minimax in float32).
_LOG_P = tuple(_f32(c) for c in (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1,
                                 -1.2420140846e-1, 1.4249322787e-1, -1.6668057665e-1,
                                 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1))


# --------------------------------------------------------------------------------------------
# The op set, evaluated with NumPy
# --------------------------------------------------------------------------------------------

def _wrap_int(n):
    """Wrap int64 values to INT_BITS-bit two's complement."""
    half = 1 << (INT_BITS - 1)
    return ((np.asarray(n, dtype=np.int64) + half) & ((1 << INT_BITS) - 1)) - half


def _bits(a):
    return nx.f32_to_bits(a).astype(np.int64)


def _from_bits(b):
    return nx.bits_to_f32(np.asarray(b, dtype=np.int64) & 0xFFFFFFFF)


class NumpyOps:
    """The op set of the sequences, on float32 (FP values), bool and int64 arrays.

    FP32 operations are the :mod:`~ttrain.golden.numerics` functions; the bit and integer
    operations are exact. See the module notes for the list; :meth:`split` documents its
    behaviour on every class of input, since the RTL reproduces it bit for bit.
    """

    # bits <-> binary32 of the bit operations below (a subclass may swap in faster views)
    _bits = staticmethod(_bits)
    _float = staticmethod(_from_bits)

    # -- FP32 operations ------------------------------------------------------------------
    @staticmethod
    def const(value):
        """Return the binary32 constant ``value`` (exactly representable, else ValueError)."""
        return nx.f32_to_bits(value).view(np.float32)

    mul = staticmethod(nx.fp32_mul)
    add = staticmethod(nx.fp32_add)
    sub = staticmethod(nx.fp32_sub)
    max = staticmethod(nx.fp32_max)
    min = staticmethod(nx.fp32_min)
    lt = staticmethod(nx.fp32_lt)

    # -- classification and bool logic ---------------------------------------------------
    @classmethod
    def is_nan(cls, a):
        """Return whether ``a`` is a NaN."""
        return (cls._bits(a) & 0x7FFFFFFF) > 0x7F800000

    @classmethod
    def is_inf(cls, a):
        """Return whether ``a`` is an infinity."""
        return (cls._bits(a) & 0x7FFFFFFF) == 0x7F800000

    @classmethod
    def is_zero(cls, a):
        """Return whether ``a`` is ``+0`` or ``-0``."""
        return (cls._bits(a) & 0x7FFFFFFF) == 0

    @classmethod
    def sign(cls, a):
        """Return bit 31 of ``a``."""
        return (cls._bits(a) >> 31) == 1

    and_ = staticmethod(np.logical_and)
    or_ = staticmethod(np.logical_or)
    not_ = staticmethod(np.logical_not)

    # -- bit operations -------------------------------------------------------------------
    @classmethod
    def select(cls, c, a, b):
        """Return ``a`` where ``c`` else ``b``, bit for bit."""
        a, b = np.broadcast_arrays(cls._bits(a), cls._bits(b))
        return cls._float(np.where(c, a, b))

    @classmethod
    def abs(cls, a):
        """Return ``a`` with bit 31 cleared."""
        return cls._float(cls._bits(a) & 0x7FFFFFFF)

    @classmethod
    def with_sign(cls, a, s):
        """Return ``a`` with bit 31 set to the bool ``s``."""
        return cls._float((cls._bits(a) & 0x7FFFFFFF) | (np.asarray(s, dtype=np.int64) << 31))

    @classmethod
    def split(cls, a):
        """Split ``a`` (bit 31 ignored) into significand ``m`` and exponent ``e``.

        With exponent field ``E`` and fraction ``F`` of ``a``:

        * ``E != 0`` (normal, infinity, NaN): ``m`` has bits ``0x3F800000 | F`` and
          ``e = E - 127`` (so ``e = 128`` for infinities and NaNs);
        * ``E == 0``: with ``z`` the number of leading zeros of ``F`` as a 23-bit field
          (``z = 23`` for ``F == 0``), ``m`` has the fraction ``(F << (z + 1)) & 0x7FFFFF``
          and exponent field 127, and ``e = -127 - z`` (``-150`` for zero).

        For a finite nonzero ``a``, ``|a| = m * 2**e`` exactly with ``m`` in ``[1, 2)``.
        """
        bits = cls._bits(a) & 0x7FFFFFFF
        field = bits >> 23
        frac = bits & 0x7FFFFF
        # Bit length of the 23-bit fraction, exactly (integers below 2**53 convert exactly).
        length = np.where(frac > 0, np.frexp(frac.astype(np.float64))[1], 0)
        z = 23 - length
        sub_frac = (frac << (z + 1)) & 0x7FFFFF
        normal = field != 0
        m = cls._float(0x3F800000 | np.where(normal, frac, sub_frac))
        e = np.where(normal, field - 127, -127 - z)
        return m, _wrap_int(e)

    @classmethod
    def pow2(cls, n):
        """Return ``2**n`` by exponent insertion: bits ``((n + 127) & 0xFF) << 23``."""
        return cls._float(((np.asarray(n, dtype=np.int64) + 127) & 0xFF) << 23)

    @classmethod
    def scale_exp(cls, a, n):
        """Return the float with bits ``bits(a) + (n << 23)`` (32-bit wrap)."""
        return cls._float(cls._bits(a) + (np.asarray(n, dtype=np.int64) << 23))

    @classmethod
    def int_from_magic(cls, k):
        """Return ``bits(k) - 0x4B400000`` as an integer."""
        return _wrap_int(cls._bits(k) - _MAGIC_BITS)

    @classmethod
    def magic_from_int(cls, n):
        """Return the float with bits ``0x4B400000 + n`` (``1.5*2**23 + n`` for ``|n| < 2**22``)."""
        return cls._float(_MAGIC_BITS + np.asarray(n, dtype=np.int64))

    @classmethod
    def rsqrt_seed(cls, a):
        """Return the float with bits ``0x5F3759DF - (bits(a) >> 1)`` (``a`` positive)."""
        return cls._float(_RSQRT_MAGIC - (cls._bits(a) >> 1))

    # -- integers -------------------------------------------------------------------------
    @staticmethod
    def iadd(a, b):
        """Return ``a + b`` (wrapped)."""
        return _wrap_int(np.asarray(a, dtype=np.int64) + b)

    @staticmethod
    def isub(a, b):
        """Return ``a - b`` (wrapped)."""
        return _wrap_int(np.asarray(a, dtype=np.int64) - b)

    @staticmethod
    def ishr(a, k):
        """Return ``a >> k`` (arithmetic, ``k`` a constant)."""
        return np.right_shift(np.asarray(a, dtype=np.int64), k)

    @staticmethod
    def iand(a, k):
        """Return ``a & k`` (``k`` a non-negative constant)."""
        return np.bitwise_and(np.asarray(a, dtype=np.int64), k)


# --------------------------------------------------------------------------------------------
# The sequences
# --------------------------------------------------------------------------------------------

def _horner(o, coeffs, z):
    """``(((c0 z + c1) z + c2) ...)``: one multiply and one add per further coefficient."""
    p = o.const(coeffs[0])
    for c in coeffs[1:]:
        p = o.add(o.mul(p, z), o.const(c))
    return p


def exp_sequence(o, x):
    """Sequence of :func:`fp32_exp`.

    ::

        xc = min(max(x, -104), 89)            # NaN stays NaN; +-inf become the bounds
        k  = xc * LOG2E + MAGIC               # MAGIC = 1.5*2**23: k - MAGIC = round(xc/ln 2)
        nf = k - MAGIC                        # exact; n = bits(k) - 0x4B400000 in [-150, 128]
        r  = (xc - nf * LN2_HI) - nf * LN2_LO # Cody-Waite; nf * LN2_HI and the first - exact
        z  = r * r
        p  = ((((P0 r + P1) r + P2) r + P3) r + P4) r + P5
        q  = (p * z + r) + 1                  # exp(r), r in [-0.347, 0.347]
        n1 = n >> 1; n2 = n - n1              # both in [-75, 64]: 2**n1, 2**n2 are normal
        y  = (q * 2**n1) * 2**n2              # first multiply exact, second rounds once

    12 multiplies, 11 adds/subtracts, 2 max/min.
    """
    xc = o.min(o.max(x, o.const(EXP_CLAMP[0])), o.const(EXP_CLAMP[1]))
    k = o.add(o.mul(xc, o.const(_LOG2E)), o.const(_MAGIC))
    nf = o.sub(k, o.const(_MAGIC))
    n = o.int_from_magic(k)
    r = o.sub(o.sub(xc, o.mul(nf, o.const(_LN2_HI))), o.mul(nf, o.const(_LN2_LO)))
    z = o.mul(r, r)
    p = _horner(o, _EXP_P, r)
    q = o.add(o.add(o.mul(p, z), r), o.const(1.0))
    n1 = o.ishr(n, 1)
    n2 = o.isub(n, n1)
    return o.mul(o.mul(q, o.pow2(n1)), o.pow2(n2))


def _recip_significand(o, m):
    """1/m for m in [1, 2): linear seed, two Newton steps, one refined Newton step."""
    y = o.sub(o.const(_RECIP_SEED[0]), o.mul(o.const(_RECIP_SEED[1]), m))
    for _ in range(2):
        y = o.mul(y, o.sub(o.const(2.0), o.mul(m, y)))
    return o.add(y, o.mul(y, o.sub(o.const(1.0), o.mul(m, y))))


def recip_sequence(o, x):
    """Sequence of :func:`fp32_recip` (table-free: linear seed and Newton steps).

    ::

        (m, e) = split(|x|)                   # |x| = m * 2**e, m in [1, 2), subnormals too
        y = 24/17 - (8/17) * m                 # seed, relative error <= 1/17
        y = y * (2 - m * y)                   # twice: error 1/17 -> 3.5e-3 -> 1.2e-5
        y = y + y * (1 - m * y)               # refined last step (1 - m*y is exact)
        s = -e; s1 = s >> 1; s2 = s - s1      # 2**s1, 2**s2 normal
        r = (y * 2**s1) * 2**s2               # one rounding (subnormal results, overflow)
        r = 0 if |x| = inf; inf if x = +-0; then the sign of x; NaN -> NaN

    9 multiplies (7, plus 2 for the scaling), 5 adds/subtracts.
    """
    a = o.abs(x)
    m, e = o.split(a)
    y = _recip_significand(o, m)
    s = o.isub(0, e)
    s1 = o.ishr(s, 1)
    s2 = o.isub(s, s1)
    r = o.mul(o.mul(y, o.pow2(s1)), o.pow2(s2))
    r = o.select(o.is_inf(a), o.const(0.0), r)
    r = o.select(o.is_zero(a), o.const(np.float32(np.inf)), r)
    r = o.with_sign(r, o.sign(x))
    return o.select(o.is_nan(x), o.const(np.float32(np.nan)), r)


def rsqrt_sequence(o, x):
    """Sequence of :func:`fp32_rsqrt` (table-free: magic-constant seed and Newton steps).

    ::

        (m, e) = split(|x|)
        p  = e & 1; m4 = m * 2**p (exponent field + p); e2 = e - p   # m4 in [1, 4), e2 even
        h  = m4 * 0.5                         # exact
        y  = bits 0x5F3759DF - (bits(m4) >> 1)  # seed, relative error <= 3.5%
        y  = y * (1.5 - h * (y * y))          # twice
        y  = y + y * (0.5 - h * (y * y))      # refined last step
        r  = y * 2**(-(e2 >> 1))              # exact (result always normal)
        r  = 0 if |x| = inf; inf if x = +-0; then the sign of x;
        NaN if x is NaN or x < 0 (x != -0)

    11 multiplies, 4 adds/subtracts.
    """
    a = o.abs(x)
    m, e = o.split(a)
    p = o.iand(e, 1)
    m4 = o.scale_exp(m, p)
    e2 = o.isub(e, p)
    q = o.isub(0, o.ishr(e2, 1))
    h = o.mul(m4, o.const(0.5))
    y = o.rsqrt_seed(m4)
    for _ in range(2):
        y = o.mul(y, o.sub(o.const(1.5), o.mul(h, o.mul(y, y))))
    y = o.add(y, o.mul(y, o.sub(o.const(0.5), o.mul(h, o.mul(y, y)))))
    r = o.mul(y, o.pow2(q))
    r = o.select(o.is_inf(a), o.const(0.0), r)
    r = o.select(o.is_zero(a), o.const(np.float32(np.inf)), r)
    r = o.with_sign(r, o.sign(x))
    bad = o.or_(o.is_nan(x), o.and_(o.sign(x), o.not_(o.is_zero(a))))
    return o.select(bad, o.const(np.float32(np.nan)), r)


# Building blocks of tanh, gelu and gelu_grad. Each of these functions is head -> shared
# logistic core -> tail; the RTL unit builds the core (an exp and a reciprocal datapath) once
# and feeds it from whichever head the function code selects, so the pieces are public.

def logistic_exp_input(o, t):
    """Return ``-|t|``, the exp argument of the logistic core (a NaN stays a NaN)."""
    return o.with_sign(t, True)


def logistic_recip_input(o, e):
    """Return ``1 + E``, the reciprocal argument of the logistic core (in [1, 2])."""
    return o.add(o.const(1.0), e)


def logistic_core(o, t):
    """Return ``(E, R)`` with ``E = exp(-|t|)``, ``R = 1/(1 + E)`` (the shared core)."""
    e = exp_sequence(o, logistic_exp_input(o, t))
    return e, recip_sequence(o, logistic_recip_input(o, e))


def tanh_head(o, x):
    """Return ``(a, ps, t)``: ``|x|``, the small-|x| polynomial and the core argument ``2a``."""
    a = o.abs(x)
    z = o.mul(a, a)
    ps = o.add(o.mul(o.mul(_horner(o, _TANH_P, z), z), a), a)
    return a, ps, o.mul(a, o.const(2.0))


def tanh_tail(o, x, a, ps, e, r):
    """Return tanh from the head's values and the core's ``E``, ``R``."""
    pb = o.mul(o.sub(o.const(1.0), e), r)
    y = o.select(o.lt(a, o.const(TANH_POLY_BELOW)), ps, pb)
    y = o.with_sign(y, o.sign(x))
    return o.select(o.is_nan(x), o.const(np.float32(np.nan)), y)


def tanh_sequence(o, x):
    """Sequence of :func:`fp32_tanh`: :func:`tanh_head`, :func:`logistic_core`, :func:`tanh_tail`.

    ::

        a  = |x|
        z  = a * a                            # small |x|: odd polynomial (Cephes)
        ps = ((((T0 z + T1) z + T2) z + T3) z + T4) * z * a + a
        E  = exp(-2a); R = recip(1 + E)       # large |x|: tanh a = (1 - E) / (1 + E)
        pb = (1 - E) * R
        y  = ps if a < 0.625 else pb; then the sign of x; NaN -> NaN

    Both branches are computed (a pipeline computes everything): 30 multiplies,
    23 adds/subtracts, 2 max/min, 1 compare.
    """
    a, ps, t = tanh_head(o, x)
    e, r = logistic_core(o, t)
    return tanh_tail(o, x, a, ps, e, r)


def tanh_grad_sequence(o, t):
    """Sequence of :func:`fp32_tanh_grad`: ``1 - t * t`` (1 multiply, 1 subtract)."""
    return o.sub(o.const(1.0), o.mul(t, t))


def gelu_head(o, x):
    """Return ``(xl, xc, xx, t)`` of gelu and gelu_grad: clamped inputs, ``xc*xc``, ``t = 2u``."""
    xl = o.max(x, o.const(GELU_CLAMP[0]))
    xc = o.min(xl, o.const(GELU_CLAMP[1]))
    xx = o.mul(xc, xc)
    # t = 2u = 2C * (x + A x^3), in golden/layers.py's operation order (with 2C for C).
    t = o.mul(o.mul(o.add(o.mul(xx, o.const(_GELU_A)), o.const(1.0)), xc), o.const(_GELU_2C))
    return xl, xc, xx, t


def gelu_logistic(o, t, e, r):
    """Return ``(E*R, s)`` with ``s = logistic(t) = 0.5 (1 + tanh(t/2))``."""
    er = o.mul(e, r)
    return er, o.select(o.lt(t, o.const(0.0)), er, r)


def gelu_tail(o, xl, sig):
    """Return gelu: ``xl * s``."""
    return o.mul(xl, sig)


def gelu_grad_tail(o, xc, xx, r, er, sig):
    """Return gelu': ``s + (xc * d2) * (E*R*R)``, ``d2 = (xx * 3A + 1) * 2C``."""
    d2 = o.mul(o.add(o.mul(xx, o.const(_GELU_3A)), o.const(1.0)), o.const(_GELU_2C))
    return o.add(sig, o.mul(o.mul(xc, d2), o.mul(er, r)))


def gelu_sequence(o, x):
    """Sequence of :func:`fp32_gelu`: ``x * logistic(2u)``, ``u = C (x + A x^3)``.

    ``0.5 x (1 + tanh u) = x / (1 + exp(-2u))`` exactly, and the logistic form has no
    cancellation for negative ``x`` (``1 + tanh u`` loses every digit below about -3)::

        xl = max(x, -20); xc = min(xl, 20)    # logistic(2u) is exactly 0 / 1 beyond
        t  = (((xc * xc) * A + 1) * xc) * 2C  # = 2u; A = 0.044715, 2C = 2 sqrt(2/pi)
        E  = exp(-|t|); R = recip(1 + E)
        s  = E * R if t < 0 else R            # logistic(t)
        y  = xl * s                           # xl: +inf passes, -inf gives -0

    27 multiplies, 18 adds/subtracts, 4 max/min, 1 compare.
    """
    xl, _, _, t = gelu_head(o, x)
    e, r = logistic_core(o, t)
    _, sig = gelu_logistic(o, t, e, r)
    return gelu_tail(o, xl, sig)


def gelu_grad_sequence(o, x):
    """Sequence of :func:`fp32_gelu_grad`: ``s + x * 2u' * s (1 - s)``.

    With the names of :func:`gelu_sequence` (``s (1 - s) = E R R`` for either sign of ``t``)::

        d2 = ((xc * xc) * 3A + 1) * 2C        # 2 du/dx (xc * xc shared with t)
        g  = s + (xc * d2) * ((E * R) * R)

    31 multiplies, 20 adds/subtracts, 4 max/min, 1 compare.
    """
    _, xc, xx, t = gelu_head(o, x)
    e, r = logistic_core(o, t)
    er, sig = gelu_logistic(o, t, e, r)
    return gelu_grad_tail(o, xc, xx, r, er, sig)


def log_sequence(o, x):
    """Sequence of :func:`fp32_log` (Cephes logf: exponent, reduced significand, polynomial).

    ::

        (m, e) = split(|x|)                   # |x| = m * 2**e, m in [1, 2), subnormals too
        c  = sqrt2 < m                        # reduce to m in [sqrt(1/2), sqrt(2)]:
        mr = m * 2**-1 if c else m            #   exponent field - 1 (exact)
        fe = (magic(e + 1) if c else magic(e)) - 1.5*2**23    # the exponent as a float, exact
        f  = mr - 1                           # exact (Sterbenz), in [-0.293, 0.415]
        z  = f * f
        y  = (Horner(P0..P8, f) * f) * z      # f**3 P(f)
        y  = (y + fe * LN2_LO) - z * 0.5      # LN2_LO = -2.12194440e-4
        r  = (f + y) + fe * LN2_HI            # LN2_HI = 0.693359375: fe * LN2_HI exact
        r  = -inf if x = +-0; +inf if x = +inf; NaN if x is NaN or x < 0 (x != -0)

    ``magic(n)`` is :meth:`NumpyOps.magic_from_int`. 14 multiplies, 14 adds/subtracts,
    1 compare.
    """
    a = o.abs(x)
    m, e = o.split(a)
    c = o.lt(o.const(_SQRT2), m)
    mr = o.select(c, o.scale_exp(m, -1), m)
    fe = o.sub(o.select(c, o.magic_from_int(o.iadd(e, 1)), o.magic_from_int(e)),
               o.const(_MAGIC))
    f = o.sub(mr, o.const(1.0))
    z = o.mul(f, f)
    y = o.mul(o.mul(_horner(o, _LOG_P, f), f), z)
    y = o.sub(o.add(y, o.mul(fe, o.const(_LN2_LO))), o.mul(z, o.const(0.5)))
    r = o.add(o.add(f, y), o.mul(fe, o.const(_LN2_HI)))
    r = o.select(o.is_zero(a), o.const(np.float32(-np.inf)), r)
    r = o.select(o.is_inf(x), o.const(np.float32(np.inf)), r)
    bad = o.or_(o.is_nan(x), o.and_(o.sign(x), o.not_(o.is_zero(a))))
    return o.select(bad, o.const(np.float32(np.nan)), r)


#: Sequence function of each entry of :data:`FUNCTIONS`.
SEQUENCES = {
    "exp": exp_sequence, "recip": recip_sequence, "rsqrt": rsqrt_sequence,
    "tanh": tanh_sequence, "tanh_grad": tanh_grad_sequence,
    "gelu": gelu_sequence, "gelu_grad": gelu_grad_sequence, "log": log_sequence,
}

_NP = NumpyOps()


def _input(x, name):
    """Return ``x`` as a float32 array (ValueError if a value is not exactly binary32)."""
    try:
        return nx.f32_to_bits(x).view(np.float32)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{name}: {exc}") from None


def _public(sequence, name, summary, accuracy):
    def function(x):
        return sequence(_NP, _input(x, f"{name} input"))
    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"""{summary}

    The fixed FP32 sequence is :func:`{sequence.__name__}` (the RTL unit runs the same
    operations). {accuracy}

    Parameters
    ----------
    x : array_like
        Binary32 values (float32 arrays as they are; other array-likes only if every value is
        exactly representable, otherwise ValueError: round with ``numerics.as_f32`` first).

    Returns
    -------
    numpy.ndarray
        ``float32`` array of the shape of ``x`` (0-d for a scalar); NaN results are
        ``0x7FC00000``.
    """
    return function


fp32_exp = _public(exp_sequence, "fp32_exp", "Return ``exp(x)`` elementwise.",
                   "Accuracy: see ``docs/special-functions.md``.")
fp32_recip = _public(recip_sequence, "fp32_recip", "Return ``1 / x`` elementwise.",
                     "Accuracy: see ``docs/special-functions.md``.")
fp32_rsqrt = _public(rsqrt_sequence, "fp32_rsqrt", "Return ``1 / sqrt(x)`` elementwise.",
                     "Accuracy: see ``docs/special-functions.md``.")
fp32_tanh = _public(tanh_sequence, "fp32_tanh", "Return ``tanh(x)`` elementwise.",
                    "Accuracy: see ``docs/special-functions.md``.")
fp32_tanh_grad = _public(tanh_grad_sequence, "fp32_tanh_grad",
                         "Return ``1 - t**2``, the derivative of tanh from its output ``t``.",
                         "Two roundings (``t * t``, then ``1 - .``).")
fp32_gelu = _public(gelu_sequence, "fp32_gelu",
                    "Return GELU (tanh form) ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x**3)))``.",
                    "Accuracy: see ``docs/special-functions.md``.")
fp32_gelu_grad = _public(gelu_grad_sequence, "fp32_gelu_grad",
                         "Return ``d gelu / dx`` of :func:`fp32_gelu`'s function elementwise.",
                         "Accuracy: see ``docs/special-functions.md``.")

fp32_log = _public(log_sequence, "fp32_log", "Return the natural logarithm ``log(x)`` elementwise.",
                   "Accuracy: see ``docs/special-functions.md``.")


def fp32_div(a, b):
    """Return ``a / b`` as ``a * recip(b)`` (two roundings after the reciprocal's).

    Not correctly rounded: the error is the reciprocal's plus half an ulp. IEEE special cases
    follow from the two steps: ``x / ±0 = ±inf`` (``0 / 0`` and ``inf / inf`` are NaN),
    ``x / ±inf = ±0``.

    Parameters
    ----------
    a, b : array_like
        Binary32 values; they broadcast against each other.

    Returns
    -------
    numpy.ndarray
        ``float32`` quotients.
    """
    return nx.fp32_mul(_input(a, "fp32_div operand a"), fp32_recip(_input(b, "fp32_div operand b")))


def fp32_special(func, x):
    """Evaluate the special function ``func`` (a name or a code of :data:`FUNCTIONS`) on ``x``.

    This is what the RTL unit computes for the input ``(func, x)``.

    Parameters
    ----------
    func : str or int
        One of :data:`FUNCTIONS` or its index (:data:`FUNCTION_CODES`).
    x : array_like
        Binary32 values.

    Returns
    -------
    numpy.ndarray
        ``float32`` results.

    Raises
    ------
    ValueError
        If ``func`` is not a known function name or code.
    """
    if isinstance(func, (int, np.integer)) and not isinstance(func, bool):
        if not 0 <= func < len(FUNCTIONS):
            raise ValueError(f"function code must be in [0, {len(FUNCTIONS) - 1}] "
                             f"({', '.join(f'{c}={n}' for c, n in enumerate(FUNCTIONS))}), "
                             f"not {func}")
        func = FUNCTIONS[func]
    if func not in SEQUENCES:
        raise ValueError(f"unknown special function {func!r}; choose one of {FUNCTIONS}")
    return SEQUENCES[func](_NP, _input(x, f"fp32_special({func!r}) input"))
