"""Integer element-wise datapath of the vector units (the quantized rules' ops).

Combinational expression builders for the integer elementwise ops of the ISA table
(:data:`ttrain.golden.isa.OPS`: ``i2f``, ``f2i``, ``iadd``, ``requant``, ``ext8``, ``ins8``,
``fcmp``, ``bitop``), shared by
:class:`~ttrain.rtl.vector_wide.WideVectorUnit` (one per lane) and the one-element reference
unit of the sequencer tests. Golden: the ops' ``semantics`` in :mod:`ttrain.golden.isa`, built
on :mod:`ttrain.golden.quant`:

``i2f(a)``
    two's complement int32 -> binary32, round to nearest even (leading-zero count, normalize,
    guard/sticky rounding; the carry of the rounding may step the exponent).
``f2i(a, floor)``
    binary32 -> int32, round to nearest even (``floor = 0``) or toward -inf (``floor = 1``),
    saturating; NaN -> 0. Computed on a 62-bit fixed-point value with 31 fraction bits.
``iadd(a, b, bits)``
    ``clamp(a + b, -2**(bits-1), 2**(bits-1) - 1)`` for ``bits`` in 1..32 (a 33-bit sum).
``requant(a, b, imm)``
    ``clamp((a * m + 2**(s-1)) >> s, lo, hi)`` (``s = 0``: ``a * m``) with ``m = b[14:0]``,
    ``s = b[20:15]``, ``lo = imm[15:0]``, ``hi = imm[31:16]`` (signed): a 32 x 15 multiply
    (one DSP48E2), a 64-bit rounding add and arithmetic shift, two compares.

``ext8(a, k)`` / ``ins8(a, b, k)``
    packed int8 storage: the sign-extended byte ``k`` (``imm[1:0]``) of ``a``; ``a`` with its
    byte ``k`` replaced by the low byte of ``b``.

``fcmp(a, b, pred)`` / ``bitop(a, b, fn)``
    masks: all ones when the binary32 comparison ``a < b`` / ``a <= b`` / ``a == b``
    (``pred = imm[1:0]`` 0 / 1 / 2; a combinational
    :class:`~ttrain.rtl.fp32.FP32Compare`) holds, else 0; ``a & b``, ``a & ~b``, ``a | b``,
    ``a ^ b`` (``fn = imm[1:0]``).

They are combinational, or, given ``stage`` (a function returning a pipeline register of its
argument), pipelined with :data:`STAGES` registers so that no path is longer than 12 logic
levels (Yosys xcup estimate); the vector unit computes them after its multiply stage, in the
add stage's cycles (latency unchanged). See ``docs/vector-unit.md``.
"""

from amaranth.hdl import Cat, Const, Mux, Signal, signed

from .fp32 import FP32Compare

__all__ = ["i2f", "f2i", "iadd", "requant", "ext8", "ins8", "ext16", "ins16", "fcmp", "bitop",
           "STAGES"]


def _lzc32(m, v, name):
    """Leading zeros of the 32-bit unsigned ``v`` (32 for zero), a 6-bit signal."""
    lz = Signal(6, name=f"{name}_lz")
    expr = Const(32, 6)
    for i in range(32):
        expr = Mux(v[i], 31 - i, expr)
    m.d.comb += lz.eq(expr)
    return lz


def _st(stage, value, name):
    """``value`` through one pipeline register of ``stage`` (combinational when None)."""
    return value if stage is None else stage(value, name)


#: Pipeline registers on the way through each op when built with a ``stage`` function (the
#: ops not listed have none); the output is combinational after the last of them.
STAGES = {"i2f": 3, "f2i": 2, "iadd": 1, "requant": 4}


def i2f(m, a, name="i2f", stage=None):
    """Return the binary32 bits (32-bit signal) of the signed 32-bit ``a``, nearest even."""
    sign = a[31]
    mag = Signal(32, name=f"{name}_mag")
    m.d.comb += mag.eq((a ^ sign.replicate(32)) + sign)      # |a|: one adder, no mux after
    mag1, sign1 = _st(stage, mag, f"{name}_s1_mag"), _st(stage, sign, f"{name}_s1_sign")
    lz = _lzc32(m, mag1, name)
    lz2, mag2 = _st(stage, lz, f"{name}_s2_lz"), _st(stage, mag1, f"{name}_s2_mag")
    sign2 = _st(stage, sign1, f"{name}_s2_sign")
    norm = Signal(32, name=f"{name}_norm")
    m.d.comb += norm.eq(mag2 << lz2)
    frac = norm[8:31]
    guard = norm[7]
    sticky = norm[0:7] != 0
    up = guard & (sticky | frac[0])
    exp = Signal(8, name=f"{name}_exp")
    m.d.comb += exp.eq(158 - lz2)
    word = _st(stage, Cat(frac, exp, sign2), f"{name}_s3_word")
    up3 = _st(stage, up, f"{name}_s3_up")
    zero3 = _st(stage, mag2 == 0, f"{name}_s3_zero")
    out = Signal(32, name=f"{name}_out")
    m.d.comb += out.eq(Mux(zero3, 0, word + up3))
    return out


def f2i(m, x, floor, name="f2i", stage=None):
    """Return the saturating int32 (32-bit signal) of the binary32 bits ``x``."""
    sign = x[31]
    e_field = x[23:31]
    f_field = x[0:23]
    is_nan = (e_field == 255) & (f_field != 0)
    big = e_field >= 158                         # |x| >= 2**31 (inf included)
    small = e_field < 127                        # |x| < 1
    mant = Cat(f_field, Const(1, 1))             # 24 bits
    e = Signal(5, name=f"{name}_e")              # unbiased exponent 0..30 when in range
    m.d.comb += e.eq(e_field - 127)
    v = Signal(62, name=f"{name}_v")             # |x| * 2**31 (exact for e <= 30)
    m.d.comb += v.eq(mant << (e + 8))
    ip = Signal(32, name=f"{name}_ip")
    fr = Signal(31, name=f"{name}_fr")
    nonzero_x = (e_field != 0) | (f_field != 0)
    # |x| < 1: integer part 0, the fraction decides (0.5 exactly is e_field 126, f 0)
    with m.If(small):
        m.d.comb += [ip.eq(0),
                     fr.eq(Mux(e_field == 126, Cat(Const(0, 7), f_field, Const(1, 1)),
                               Mux(nonzero_x, 1, 0)))]
    with m.Else():
        m.d.comb += [ip.eq(v[31:62]), fr.eq(v[0:31])]
    # the fraction against one half: its top bit and whether any bit below it is set
    ip, half = _st(stage, ip, f"{name}_s1_ip"), _st(stage, fr[30], f"{name}_s1_half")
    low = _st(stage, fr[0:30] != 0, f"{name}_s1_low")
    sign, floor = _st(stage, sign, f"{name}_s1_sign"), _st(stage, floor, f"{name}_s1_floor")
    is_nan, big = _st(stage, is_nan, f"{name}_s1_nan"), _st(stage, big, f"{name}_s1_big")
    above = half & low                           # fr > 2**30
    tie = half & ~low                            # fr == 2**30
    nz = half | low                              # fr != 0
    inc = Mux(floor, sign & nz, above | (tie & ip[0]))
    mag = Signal(33, name=f"{name}_magn")
    m.d.comb += mag.eq(ip + inc)
    nmag = Signal(32, name=f"{name}_nmag")          # -mag mod 2**32 = ~ip + (1 - inc)
    m.d.comb += nmag.eq(~ip + ~inc)
    mag, nmag = _st(stage, mag, f"{name}_s2_mag"), _st(stage, nmag, f"{name}_s2_nmag")
    sign = _st(stage, sign, f"{name}_s2_sign")
    is_nan, big = _st(stage, is_nan, f"{name}_s2_nan"), _st(stage, big, f"{name}_s2_big")
    ovf = mag[31] | mag[32]                      # mag > 0x7FFFFFFF
    pos = Signal(32, name=f"{name}_pos")
    m.d.comb += pos.eq(Mux(ovf, 0x7FFFFFFF, mag))
    neg = Signal(32, name=f"{name}_neg")
    m.d.comb += neg.eq(Mux(ovf, 0x80000000, nmag))
    out = Signal(32, name=f"{name}_out")
    m.d.comb += out.eq(Mux(is_nan, 0,
                           Mux(big, Mux(sign, 0x80000000, 0x7FFFFFFF),
                               Mux(sign, neg, pos))))
    return out


def iadd(m, a, b, bits, name="iadd", stage=None):
    """Return ``clamp(a + b)`` to ``bits`` (a 6-bit value, 1..32) signed bits, as 32 bits."""
    s = Signal(signed(34), name=f"{name}_sum")
    m.d.comb += s.eq(a.as_signed() + b.as_signed())
    s = _st(stage, s, f"{name}_s1_sum")
    # the sum fits when its bits from bits - 1 up all equal its sign; the bounds as masks:
    # hi = 2**(bits-1) - 1 (ones below bit bits - 1), lo = -2**(bits-1) = ~hi
    # top = (bits - 1) mod 32 from bits' 5 low bits; i < top as a function of those 5 bits
    b5 = Signal(5, name=f"{name}_b5")
    m.d.comb += b5.eq(bits[0:5])
    fits = Signal(name=f"{name}_fits")
    below = [Mux(b5 == 0, 1, Const(i + 1, 5) < b5) for i in range(30)]      # i < top <= 31
    below += [b5 == 0, Const(0, 1), Const(0, 1)]                              # i = 30, 31, 32
    m.d.comb += fits.eq(_all(below[i] | (s[i] == s[33]) for i in range(33)))
    hi = Signal(32, name=f"{name}_hi")
    m.d.comb += hi.eq(Cat(*below[:32]))
    out = Signal(32, name=f"{name}_out")
    m.d.comb += out.eq(Mux(fits, s[0:32], Mux(s[33], ~hi, hi)))
    return out


def requant(m, a, b, imm, name="requant", stage=None):
    """Return ``clamp(round_half_up(a * m >> s), lo, hi)`` as a 32-bit word (see the module
    docstring for the fields of ``b`` and ``imm``)."""
    # (a * m + 2**(s-1)) >> s = (a * m >> s) + bit s - 1 of a * m; a result beyond 17 bits
    # clamps like the exact one (lo and hi are 16-bit), so q is saturated to 18 bits first.
    mult = b[0:15]
    sh = b[15:21]
    p_lo = _st(stage, a[0:16] * mult, f"{name}_s1_plo")           # 16 x 15, unsigned
    p_hi = _st(stage, a[16:32].as_signed() * mult, f"{name}_s1_phi")
    sh = _st(stage, sh, f"{name}_s1_sh")
    p = Signal(signed(48), name=f"{name}_p")
    m.d.comb += p.eq(Cat(p_lo[0:16], p_hi + p_lo[16:32]))
    p, sh = _st(stage, p, f"{name}_s2_p"), _st(stage, sh, f"{name}_s2_sh")
    t = Signal(signed(48), name=f"{name}_t")
    m.d.comb += t.eq(p >> (sh - 1)[:6])
    pq = Signal(signed(48), name=f"{name}_pq")
    m.d.comb += pq.eq(Mux(sh == 0, p, t >> 1))
    pq = _st(stage, pq, f"{name}_s3_pq")
    rb = _st(stage, (sh != 0) & t[0], f"{name}_s3_round")
    fits = (pq[17:48] == 0) | (pq[17:48] == (1 << 31) - 1)
    pqs = Signal(signed(18), name=f"{name}_pqs")
    m.d.comb += pqs.eq(Mux(fits, pq[0:18], Mux(pq[47], 1 << 17, (1 << 17) - 1)))
    q = Signal(signed(19), name=f"{name}_q")
    m.d.comb += q.eq(pqs + rb)
    q = _st(stage, q, f"{name}_s4_q")
    lo = imm[0:16].as_signed()
    hi = imm[16:32].as_signed()
    out = Signal(32, name=f"{name}_out")
    m.d.comb += out.eq(Mux(q < lo, Mux(lo > hi, hi, lo), Mux(q > hi, hi, q)))
    return out


def _all(conds):
    out = Const(1, 1)
    for cnd in conds:
        out = out & cnd
    return out


def ext8(m, a, k, name="ext8"):
    """Return byte ``k`` (the 2 low bits of ``k``) of ``a``, sign-extended to 32 bits."""
    out = Signal(32, name=f"{name}_out")
    m.d.comb += out.eq(a.word_select(k[:2], 8).as_signed())
    return out


def ins8(m, a, b, k, name="ins8"):
    """Return ``a`` with byte ``k`` (the 2 low bits of ``k``) replaced by ``b[7:0]``."""
    out = Signal(32, name=f"{name}_out")
    sh = Signal(5, name=f"{name}_sh")
    m.d.comb += sh.eq(Cat(Const(0, 3), k[:2]))
    mask = Signal(32, name=f"{name}_mask")
    m.d.comb += mask.eq(Const(0xFF, 32) << sh)
    m.d.comb += out.eq((a & ~mask) | ((b[0:8] << sh)[:32]))
    return out


def ext16(m, a, k, name="ext16"):
    """Return halfword ``k`` (bit 0 of ``k``) of ``a``, sign-extended to 32 bits."""
    out = Signal(32, name=f"{name}_out")
    m.d.comb += out.eq(a.word_select(k[0], 16).as_signed())
    return out


def ins16(m, a, b, k, name="ins16"):
    """Return ``a`` with halfword ``k`` (bit 0 of ``k``) replaced by ``b[15:0]``."""
    out = Signal(32, name=f"{name}_out")
    m.d.comb += out.eq(Mux(k[0], Cat(a[0:16], b[0:16]), Cat(b[0:16], a[16:32])))
    return out


def fcmp(m, a, b, pred, name="fcmp"):
    """Return all ones when ``a < b`` (``pred[1:0]`` 0), ``a <= b`` (1) or ``a == b`` (2) as
    binary32 values (IEEE: false on NaN, ``-0 == +0``), else 0."""
    cmp = FP32Compare(latency=0)
    m.submodules[f"{name}_cmp"] = cmp
    m.d.comb += [cmp.i.valid.eq(1), cmp.i.payload.a.eq(a), cmp.i.payload.b.eq(b)]
    hit = Signal(name=f"{name}_hit")
    r = cmp.o.payload
    m.d.comb += hit.eq(Mux(pred[:2] == 0, r.is_lt, Mux(pred[:2] == 1, r.is_le,
                                                        Mux(pred[:2] == 2, r.is_eq, 0))))
    out = Signal(32, name=f"{name}_out")
    m.d.comb += out.eq(Mux(hit, Const(0xFFFFFFFF, 32), 0))
    return out


def bitop(m, a, b, fn, name="bitop"):
    """Return ``a & b``, ``a & ~b``, ``a | b`` or ``a ^ b`` for ``fn[1:0]`` = 0, 1, 2, 3."""
    out = Signal(32, name=f"{name}_out")
    m.d.comb += out.eq(Mux(fn[:2] == 0, a & b, Mux(fn[:2] == 1, a & ~b,
                                                    Mux(fn[:2] == 2, a | b, a ^ b))))
    return out
