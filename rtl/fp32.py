"""IEEE-754 binary32 arithmetic units: multiplier, adder, compare/max/min.

Every unit is bit-exact with the golden numerics contract (``docs/architecture.md``): IEEE-754
binary32, round-to-nearest-even, full subnormal support on inputs and outputs (no flush to
zero), multiply and add rounded separately, and every NaN result is the canonical quiet NaN
``0x7FC00000``. Golden functions: :func:`ttrain.golden.numerics.fp32_mul`,
:func:`~ttrain.golden.numerics.fp32_add`, :func:`~ttrain.golden.numerics.fp32_max`,
:func:`~ttrain.golden.numerics.fp32_min`, :func:`~ttrain.golden.numerics.fp32_lt`,
:func:`~ttrain.golden.numerics.fp32_le`, :func:`~ttrain.golden.numerics.fp32_eq`.

All units take one operand pair per cycle on an ``always_ready`` stream and produce one result
per cycle after a fixed latency (fully pipelined, no back-pressure). ``o.valid`` is ``i.valid``
delayed by :attr:`latency` cycles; the payload is meaningful only while ``o.valid`` is high.

Operand layout (:data:`FP32Operands`): ``a`` is bits 0-31, ``b`` bits 32-63 of the payload.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["latency_of", 
    "FP32Operands", "FP32CompareResult", "CANONICAL_NAN",
    "FP32Mul", "FP32Add", "FP32Compare",
    "leading_zeros",
]

#: Operand pair of a two-input unit; ``a`` is the least significant field.
FP32Operands = data.StructLayout({"a": 32, "b": 32})

#: Result of :class:`FP32Compare`; ``max`` is the least significant field.
FP32CompareResult = data.StructLayout({
    "max": 32, "min": 32, "is_lt": 1, "is_le": 1, "is_eq": 1,
})

#: The one NaN every unit produces.
CANONICAL_NAN = 0x7FC00000

_EXP_ALL_ONES = 0xFF
_INF_MAGNITUDE = 0x7F800000


def leading_zeros(value):
    """Count the leading zeros of ``value`` with a balanced tree (combinational).

    Parameters
    ----------
    value : Value
        Unsigned bit vector of any positive width.

    Returns
    -------
    Value
        Number of zero bits above the most significant one. For an all-zero input the count
        is ``len(value)`` rounded up to a power of two (the result is wide enough for that);
        callers that care detect zero separately.
    """
    width = len(value)
    if width < 1:
        raise ValueError(f"leading_zeros needs a value at least 1 bit wide, not {width} bits")
    size = 1
    while size < width:
        size *= 2
    # Pad at the least significant end so the count of a nonzero value is unchanged.
    padded = Cat(Const(0, size - width), value) if size > width else value

    def tree(bits):
        # Returns (all_zero, count) where count has log2(len(bits)) bits.
        if len(bits) == 1:
            return ~bits[0], Const(0, 0)
        half = len(bits) // 2
        lo_zero, lo_count = tree(bits[:half])
        hi_zero, hi_count = tree(bits[half:])
        count = Cat(Mux(hi_zero, lo_count, hi_count), hi_zero) if len(lo_count) else hi_zero
        return hi_zero & lo_zero, count

    all_zero, count = tree(padded)
    if size == 1:
        return all_zero
    # All-zero input: every level selected the low half, giving size - 1; report size.
    return Mux(all_zero, size, count)


class _Unpacked:
    """Field decoding of one binary32 operand (combinational helper)."""

    def __init__(self, bits):
        self.sign = bits[31]
        self.exp = bits[23:31]
        self.frac = bits[0:23]
        self.exp_zero = self.exp == 0
        self.exp_max = self.exp == _EXP_ALL_ONES
        self.frac_zero = self.frac == 0
        self.is_zero = self.exp_zero & self.frac_zero
        self.is_inf = self.exp_max & self.frac_zero
        self.is_nan = self.exp_max & ~self.frac_zero
        # Significand with the hidden bit (0 for subnormals), and the effective exponent:
        # subnormals share exponent 1 with the smallest normals.
        self.sig = Cat(self.frac, ~self.exp_zero)
        self.exp_eff = Mux(self.exp_zero, 1, self.exp)


def _round_and_pack(m, sign, exp, sig, guard, sticky, nan, inf, zero, zero_sign):
    """Round to nearest even and assemble the result word (combinational).

    ``exp`` is the biased exponent (>= 1) of ``sig``'s bit 23; a subnormal result has
    ``exp == 1`` and ``sig[23] == 0``. Packing ``(exp - 1) << 23`` plus the 24-bit significand
    makes the rounding carry ripple into the exponent field for free (subnormal to smallest
    normal, significand overflow to the next binade, largest finite to infinity).
    """
    round_up = guard & (sticky | sig[0])
    # The packed sum ((exp - 1) << 23) + sig + round_up in two short pieces (one carry chain
    # of 33 bits plus a compare would be 14 logic levels): the 23-bit fraction incremented,
    # and the exponent field exp - 1 + sig[23] plus the fraction's carry, chosen from both
    # precomputed values by that carry (an AND of the fraction bits, not the chain's end).
    frac = Signal(23, name="s5_frac")
    m.d.comb += frac.eq(sig[0:23] + round_up)
    carry = round_up & sig[0:23].all()
    exp0 = Signal(10, name="s5_exp0")
    m.d.comb += exp0.eq(exp - 1 + sig[23])
    exp1 = Signal(10, name="s5_exp1")
    m.d.comb += exp1.eq(exp0 + 1)
    packed = Signal(unsigned(31), name="s5_packed")
    m.d.comb += packed.eq(Cat(frac, Mux(carry, exp1, exp0)[0:8]))
    overflow = Mux(carry, exp1 >= 255, exp0 >= 255)     # exponent field of infinity or more
    result = Signal(32, name="s5_result")
    with m.If(nan):
        m.d.comb += result.eq(CANONICAL_NAN)
    with m.Elif(inf | overflow):
        m.d.comb += result.eq(Cat(Const(_INF_MAGNITUDE, 31), sign))
    with m.Elif(zero):
        m.d.comb += result.eq(Cat(Const(0, 31), zero_sign))
    with m.Else():
        m.d.comb += result.eq(Cat(packed[0:31], sign))
    return result


def _delay(m, value, name, from_stage, to_stage, *, reset_less=True):
    """Return ``value`` (the stage ``from_stage`` register) delayed to stage ``to_stage``.

    The registers are named ``s<k>_<name>``; data registers are reset-less (they need no
    reset: ``valid`` qualifies them), valid bits are not.
    """
    for k in range(from_stage + 1, to_stage + 1):
        nxt = Signal.like(value, name=f"s{k}_{name}", reset_less=reset_less)
        m.d.sync += nxt.eq(value)
        value = nxt
    return value


def _reg(m, shape, name, value):
    """Add a reset-less pipeline register ``name`` loaded with ``value`` every cycle."""
    reg = Signal(shape, name=name, reset_less=True)
    m.d.sync += reg.eq(value)
    return reg


def _reg_valid(m, valid):
    """Add the stage-1 ``valid`` register (reset to 0)."""
    reg = Signal(name="s1_valid")
    m.d.sync += reg.eq(valid)
    return reg


class FP32Mul(wiring.Component):
    """Pipelined binary32 multiplier, ``o = a * b``.

    Golden: :func:`ttrain.golden.numerics.fp32_mul` (NumPy ``float32`` multiply with canonical
    NaN). Round to nearest even, subnormal inputs and outputs, ``inf * 0`` and every NaN input
    give ``0x7FC00000``, overflow gives a signed infinity, zeros carry the XOR of the signs.

    Latency :attr:`latency` = 6 cycles, one result per cycle, no back-pressure.

    Pipeline (``s<k>_`` signals are the registers at the end of stage ``k``):

    1. unpack, classify, exponent sum;
    2. two partial products ``a_sig * b_sig[0:17]`` (24 x 17) and ``a_sig * b_sig[17:24]``
       (24 x 7), each fitting one DSP48E2 (27 x 18 signed);
    3. the 48-bit product as their shifted sum (the second DSP's cascade adder on a device);
    4. leading-zero count, normalization shift amount/direction and result exponent;
    5. normalization (left) or denormalization (right, with sticky) shift;
    6. round to nearest even, overflow to infinity, special values.

    Members
    -------
    i : ``In(stream.Signature(FP32Operands, always_ready=True))``
        Operand pairs.
    o : ``Out(stream.Signature(32, always_ready=True))``
        Products, :attr:`latency` cycles after the matching ``i`` beat.
    """

    i: In(stream.Signature(FP32Operands, always_ready=True))
    o: Out(stream.Signature(32, always_ready=True))

    @property
    def latency(self):
        """Cycles from ``i.valid`` to the matching ``o.valid`` (6)."""
        return 6

    def elaborate(self, platform):
        m = Module()
        a = _Unpacked(self.i.payload.a)
        b = _Unpacked(self.i.payload.b)

        # Stage 1. A finite nonzero product is never zero before rounding, so a zero result
        # (before underflow) comes from a zero operand only.
        nan = a.is_nan | b.is_nan | (a.is_inf & b.is_zero) | (b.is_inf & a.is_zero)
        inf = (a.is_inf | b.is_inf) & ~nan
        zero = (a.is_zero | b.is_zero) & ~nan & ~inf
        s1_sign = _reg(m, 1, "s1_sign", a.sign ^ b.sign)
        s1_nan = _reg(m, 1, "s1_nan", nan)
        s1_inf = _reg(m, 1, "s1_inf", inf)
        s1_zero = _reg(m, 1, "s1_zero", zero)
        s1_a_sig = _reg(m, 24, "s1_a_sig", a.sig)
        s1_b_sig = _reg(m, 24, "s1_b_sig", b.sig)
        s1_exp_sum = _reg(m, 9, "s1_exp_sum", a.exp_eff + b.exp_eff)   # 2 .. 508

        # Stage 2: partial products, one DSP48E2 each.
        s2_pp_lo = _reg(m, 41, "s2_pp_lo", s1_a_sig * s1_b_sig[0:17])
        s2_pp_hi = _reg(m, 31, "s2_pp_hi", s1_a_sig * s1_b_sig[17:24])

        # Stage 3: the exact 48-bit product P; a * b = P * 2^(exp_sum - 254 - 46).
        s3_prod = _reg(m, 48, "s3_prod", s2_pp_lo + (s2_pp_hi << 17))

        # Stage 4: with lz leading zeros (of 48), the normalized biased exponent would be
        # exp_sum - 126 - lz. Shift left by shl = min(lz, exp_sum - 127) so the exponent never
        # drops below 1; shl < 0 is a right (denormalizing) shift. The result exponent is
        # exp_sum - 126 - shl, i.e. 1 whenever shl < lz (subnormal or exactly smallest normal).
        # Everything that depends on the exponent alone (room = exp_sum - 127, its sign, its
        # value capped at 127, the right shift) is registered in stage 3, beside the product,
        # so after the leading-zero count only a 7-bit compare and a select remain
        # (docs/u50.md, logic depth).
        s2_exp_sum = _delay(m, s1_exp_sum, "exp_sum", 1, 2)
        room = Signal(signed(10), name="s2_room")
        m.d.comb += room.eq(s2_exp_sum - 127)
        s3_room1 = _reg(m, signed(10), "s3_room1", room + 1)
        s3_room_neg = _reg(m, 1, "s3_room_neg", room < 0)
        s3_room_cap = _reg(m, 7, "s3_room_cap", Mux(room > 127, 127, room[:7]))
        # A right shift of 49 or more leaves only sticky bits; 63 stands for all of them.
        s3_rshift = _reg(m, 6, "s3_rshift", Mux(room < -63, 63, -room))
        s3_lz = Signal(7, name="s3_lz")
        m.d.comb += s3_lz.eq(leading_zeros(s3_prod))
        s3_fits = Signal(name="s3_fits")                  # room >= lz: a normal result
        m.d.comb += s3_fits.eq(~s3_room_neg & (s3_room_cap >= s3_lz))
        s4_right = _reg(m, 1, "s4_right", ~s3_fits & s3_room_neg)
        s4_shamt = _reg(m, 6, "s4_shamt", Mux(s3_fits, s3_lz,
                                               Mux(s3_room_neg, s3_rshift, s3_room_cap)))
        # the exponent room + 1 - lz of a normal result is formed in stage 5, from the
        # registered count (after the count, a subtraction and a select were 13 levels)
        s4_lz = _reg(m, 7, "s4_lz", s3_lz)
        s4_fits = _reg(m, 1, "s4_fits", s3_fits)
        s4_room1 = _delay(m, s3_room1, "room1", 3, 4)
        s4_prod = _delay(m, s3_prod, "prod", 3, 4)

        # Stage 5: shift. The right path keeps 64 bits below the product to form the sticky.
        s4_left = Signal(48, name="s4_left")
        s4_right_ext = Signal(112, name="s4_right_ext")
        m.d.comb += [
            s4_left.eq(s4_prod << s4_shamt),
            s4_right_ext.eq(Cat(Const(0, 64), s4_prod) >> s4_shamt),
        ]
        s4_norm = Signal(48, name="s4_norm")
        m.d.comb += s4_norm.eq(Mux(s4_right, s4_right_ext[64:112], s4_left))
        s5_sig = _reg(m, 24, "s5_sig", s4_norm[24:48])
        s5_guard = _reg(m, 1, "s5_guard", s4_norm[23])
        s5_sticky = _reg(m, 1, "s5_sticky",
                         s4_norm[0:23].any() | (s4_right & s4_right_ext[0:64].any()))
        s4_e = Signal(signed(11), name="s4_e")
        m.d.comb += s4_e.eq(s4_room1 - s4_lz)
        s5_exp = _reg(m, 9, "s5_exp", Mux(s4_fits, s4_e, 1))

        # Stage 6: round to nearest even and assemble.
        s5_sign = _delay(m, s1_sign, "sign", 1, 5)
        result = _round_and_pack(
            m, sign=s5_sign, exp=s5_exp, sig=s5_sig, guard=s5_guard, sticky=s5_sticky,
            nan=_delay(m, s1_nan, "nan", 1, 5), inf=_delay(m, s1_inf, "inf", 1, 5),
            zero=_delay(m, s1_zero, "zero", 1, 5), zero_sign=s5_sign)
        s6_result = _reg(m, 32, "s6_result", result)

        s1_valid = _reg_valid(m, self.i.valid)
        m.d.comb += [
            self.o.payload.eq(s6_result),
            self.o.valid.eq(_delay(m, s1_valid, "valid", 1, self.latency, reset_less=False)),
        ]
        return m


class FP32Add(wiring.Component):
    """Pipelined binary32 adder, ``o = a + b``; subtract by flipping bit 31 of ``b``.

    Golden: :func:`ttrain.golden.numerics.fp32_add` (NumPy ``float32`` add with canonical
    NaN). Round to nearest even, subnormal inputs and outputs, ``inf - inf`` and every NaN input
    give ``0x7FC00000``, overflow gives a signed infinity, exact cancellation gives ``+0``
    (``-0 + -0`` stays ``-0``).

    Latency :attr:`latency` = 6 cycles, one result per cycle, no back-pressure.

    Pipeline (``s<k>_`` signals are the registers at the end of stage ``k``):

    1. unpack, classify, order the operands by magnitude, exponent difference;
    2. align the smaller significand (3 extra low bits: guard, round, sticky);
    3. add or subtract the significands;
    4. leading-zero count, normalization shift amount and result exponent;
    5. normalization shift;
    6. round to nearest even, overflow to infinity, special values.

    Members
    -------
    i : ``In(stream.Signature(FP32Operands, always_ready=True))``
        Operand pairs.
    o : ``Out(stream.Signature(32, always_ready=True))``
        Sums, :attr:`latency` cycles after the matching ``i`` beat.
    """

    i: In(stream.Signature(FP32Operands, always_ready=True))
    o: Out(stream.Signature(32, always_ready=True))

    @property
    def latency(self):
        """Cycles from ``i.valid`` to the matching ``o.valid`` (6)."""
        return 6

    def elaborate(self, platform):
        m = Module()
        a = _Unpacked(self.i.payload.a)
        b = _Unpacked(self.i.payload.b)

        # Stage 1. Comparing the 31-bit magnitudes orders finite values and infinities; the
        # larger operand ("big") gives the result's sign and exponent reference.
        swap = _split_lt(self.i.payload.a[0:31], self.i.payload.b[0:31])    # |b| > |a|
        nan = a.is_nan | b.is_nan | (a.is_inf & b.is_inf & (a.sign != b.sign))
        inf = (a.is_inf | b.is_inf) & ~nan
        s1_nan = _reg(m, 1, "s1_nan", nan)
        s1_inf = _reg(m, 1, "s1_inf", inf)
        s1_sign = _reg(m, 1, "s1_sign", Mux(swap, b.sign, a.sign))
        s1_sub = _reg(m, 1, "s1_sub", a.sign ^ b.sign)
        s1_big_sig = _reg(m, 24, "s1_big_sig", Mux(swap, b.sig, a.sig))
        s1_small_sig = _reg(m, 24, "s1_small_sig", Mux(swap, a.sig, b.sig))
        s1_big_exp = _reg(m, 8, "s1_big_exp", Mux(swap, b.exp_eff, a.exp_eff))
        s1_diff = _reg(m, 8, "s1_diff",
                       Mux(swap, b.exp_eff - a.exp_eff, a.exp_eff - b.exp_eff))

        # Stage 2: align. Significands get 3 low bits (guard, round, sticky); the smaller one
        # is shifted right by the exponent difference, shifted-out bits OR into the sticky.
        # Differences of 27 or more leave only sticky bits; 31 stands for all of them.
        s1_shamt = Signal(5, name="s1_shamt")
        m.d.comb += s1_shamt.eq(Mux(s1_diff > 31, 31, s1_diff))
        s1_small_ext = Signal(59, name="s1_small_ext")
        m.d.comb += s1_small_ext.eq(Cat(Const(0, 35), s1_small_sig) >> s1_shamt)
        s2_big = _reg(m, 27, "s2_big", Cat(Const(0, 3), s1_big_sig))
        s2_small = _reg(m, 27, "s2_small",
                        s1_small_ext[32:59] | s1_small_ext[0:32].any())

        # Stage 3: |big| >= |small| after alignment, so the difference is never negative.
        s2_sub = _delay(m, s1_sub, "sub", 1, 2)
        s3_sum = _reg(m, 28, "s3_sum", Mux(s2_sub, s2_big - s2_small, s2_big + s2_small))

        # Stage 4: bit 27 of the sum has weight 2^(big_exp + 1 - 127). Shift left by
        # shl = min(lz, big_exp) so the result exponent big_exp + 1 - shl stays >= 1.
        s2_big_exp = _delay(m, s1_big_exp, "big_exp", 1, 2)
        s3_big_exp = _delay(m, s2_big_exp, "big_exp", 2, 3)
        s3_lz = Signal(6, name="s3_lz")
        m.d.comb += s3_lz.eq(leading_zeros(s3_sum))
        # lz > big_exp without waiting for the count (docs/u50.md, logic depth): the top
        # big_exp + 1 bits of the sum are zero, a mask made from big_exp in stage 2 (bit i
        # set when i + big_exp >= 27) and one wide NOR. A zero sum counts 32 leading zeros,
        # so it is "under" only when big_exp < 32 (also registered).
        s3_mask = _reg(m, 28, "s3_mask", Cat(*[s2_big_exp >= 27 - i for i in range(27)],
                                             Const(1, 1)))
        s3_bexp_lt32 = _reg(m, 1, "s3_bexp_lt32", s2_big_exp < 32)
        s3_e = Signal(signed(10), name="s3_e")
        m.d.comb += s3_e.eq(s3_big_exp + 1 - s3_lz)
        s3_under = Signal(name="s3_under")                  # lz > big_exp
        m.d.comb += s3_under.eq(((s3_sum & s3_mask) == 0) & s3_bexp_lt32)
        s3_shamt = Signal(6, name="s3_shamt")
        m.d.comb += s3_shamt.eq(Mux(s3_under, s3_big_exp, s3_lz))
        s4_shamt = _reg(m, 6, "s4_shamt", s3_shamt)
        s4_exp = _reg(m, 9, "s4_exp", Mux(s3_under, 1, s3_e))
        s4_sum = _delay(m, s3_sum, "sum", 3, 4)
        s4_exact_zero = _reg(m, 1, "s4_exact_zero", s3_sum == 0)

        # Stage 5: normalize.
        s4_norm = Signal(28, name="s4_norm")
        m.d.comb += s4_norm.eq(s4_sum << s4_shamt)
        s5_sig = _reg(m, 24, "s5_sig", s4_norm[4:28])
        s5_guard = _reg(m, 1, "s5_guard", s4_norm[3])
        s5_sticky = _reg(m, 1, "s5_sticky", s4_norm[0:3].any())
        s5_exp = _delay(m, s4_exp, "exp", 4, 5)
        s5_zero = _delay(m, s4_exact_zero, "exact_zero", 4, 5)

        # Stage 6: round and assemble. Exact cancellation is +0 under round-to-nearest; an
        # effective addition gives zero only for two zeros of the same sign.
        s5_sign = _delay(m, s1_sign, "sign", 1, 5)
        s5_sub = _delay(m, s2_sub, "sub", 2, 5)
        result = _round_and_pack(
            m, sign=s5_sign, exp=s5_exp, sig=s5_sig, guard=s5_guard, sticky=s5_sticky,
            nan=_delay(m, s1_nan, "nan", 1, 5), inf=_delay(m, s1_inf, "inf", 1, 5),
            zero=s5_zero, zero_sign=s5_sign & ~s5_sub)
        s6_result = _reg(m, 32, "s6_result", result)

        s1_valid = _reg_valid(m, self.i.valid)
        m.d.comb += [
            self.o.payload.eq(s6_result),
            self.o.valid.eq(_delay(m, s1_valid, "valid", 1, self.latency, reset_less=False)),
        ]
        return m


def _split_lt(x, y):
    """``x < y`` (unsigned, equal widths) as two half-width compares: two short carry chains
    side by side instead of one long one."""
    h = len(x) // 2
    return (x[h:] < y[h:]) | ((x[h:] == y[h:]) & (x[:h] < y[:h]))


class FP32Compare(wiring.Component):
    """binary32 maximum, minimum and ordered comparisons of ``a`` and ``b``.

    Golden: :func:`ttrain.golden.numerics.fp32_max`, :func:`~ttrain.golden.numerics.fp32_min`
    (IEEE 754-2019 ``maximum``/``minimum``: canonical NaN if either operand is NaN,
    ``max(-0, +0) = +0``, ``min(-0, +0) = -0``), :func:`~ttrain.golden.numerics.fp32_lt`,
    :func:`~ttrain.golden.numerics.fp32_le`, :func:`~ttrain.golden.numerics.fp32_eq` (false
    when either operand is NaN, ``-0 == +0``).

    Parameters
    ----------
    latency : int
        0 (combinational, ``o`` follows ``i`` in the same cycle) or 1 (registered, default).

    Members
    -------
    i : ``In(stream.Signature(FP32Operands, always_ready=True))``
        Operand pairs.
    o : ``Out(stream.Signature(FP32CompareResult, always_ready=True))``
        ``max``, ``min``, ``is_lt`` (a < b), ``is_le`` (a <= b), ``is_eq`` (a == b),
        :attr:`latency` cycles after the matching ``i`` beat.
    """

    def __init__(self, *, latency=1):
        if isinstance(latency, bool) or latency not in (0, 1):
            raise ValueError(
                f"FP32Compare latency must be 0 (combinational) or 1 (registered), "
                f"not {latency!r}")
        self._latency = latency
        super().__init__({
            "i": In(stream.Signature(FP32Operands, always_ready=True)),
            "o": Out(stream.Signature(FP32CompareResult, always_ready=True)),
        })

    @property
    def latency(self):
        """Cycles from ``i.valid`` to the matching ``o.valid`` (0 or 1)."""
        return self._latency

    def elaborate(self, platform):
        m = Module()
        a_bits = self.i.payload.a
        b_bits = self.i.payload.b
        a = _Unpacked(a_bits)
        b = _Unpacked(b_bits)

        # Sign-magnitude order: both negative compares magnitudes reversed; -0 == +0.
        unordered = a.is_nan | b.is_nan
        both_zero = (a_bits[0:31] == 0) & (b_bits[0:31] == 0)
        # one magnitude compare (two that are used exclusively get merged by Yosys's share
        # pass into one behind an operand multiplexer: a longer path)
        mag_lt = _split_lt(a_bits[0:31], b_bits[0:31])
        diff = a_bits ^ b_bits              # equality as XOR-OR (alumacc leaves it alone)
        mag_gt = ~mag_lt & diff[0:31].any()
        less = Mux(a.sign != b.sign, a.sign & ~both_zero,
                   Mux(a.sign, mag_gt, mag_lt))
        equal = ~diff.any() | both_zero
        lt = ~unordered & less
        eq = ~unordered & equal
        le = lt | eq
        # For two zeros, max takes +0 if either is +0 (AND of signs), min takes -0 if either
        # is -0 (OR of signs).
        zero_max = Cat(Const(0, 31), a.sign & b.sign)
        zero_min = Cat(Const(0, 31), a.sign | b.sign)
        result = Signal(FP32CompareResult, name="c_result")
        with m.If(unordered):
            m.d.comb += [result.max.eq(CANONICAL_NAN), result.min.eq(CANONICAL_NAN)]
        with m.Elif(both_zero):
            m.d.comb += [result.max.eq(zero_max), result.min.eq(zero_min)]
        with m.Elif(less):
            m.d.comb += [result.max.eq(b_bits), result.min.eq(a_bits)]
        with m.Else():
            m.d.comb += [result.max.eq(a_bits), result.min.eq(b_bits)]
        m.d.comb += [result.is_lt.eq(lt), result.is_le.eq(le), result.is_eq.eq(eq)]

        if self._latency == 0:
            m.d.comb += [self.o.payload.eq(result), self.o.valid.eq(self.i.valid)]
        else:
            s1_result = Signal(FP32CompareResult, name="s1_result", reset_less=True)
            s1_valid = _reg_valid(m, self.i.valid)
            m.d.sync += s1_result.eq(result)
            m.d.comb += [self.o.payload.eq(s1_result), self.o.valid.eq(s1_valid)]
        return m


def latency_of(unit_class):
    """Return the latency in cycles of a unit class (or a no-argument factory), built only to
    read it."""
    probe = unit_class()
    probe._MustUse__silence = True
    return probe.latency
