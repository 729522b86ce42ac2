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

They are purely combinational; the vector unit computes them at the head of its multiply stage
and carries the result through the stage's registers (latency unchanged). See
``docs/vector-unit.md``.
"""

from amaranth.hdl import Cat, Const, Mux, Signal, signed

from .fp32 import FP32Compare

__all__ = ["i2f", "f2i", "iadd", "requant", "ext8", "ins8", "fcmp", "bitop"]


def _lzc32(m, v, name):
    """Leading zeros of the 32-bit unsigned ``v`` (32 for zero), a 6-bit signal."""
    lz = Signal(6, name=f"{name}_lz")
    expr = Const(32, 6)
    for i in range(32):
        expr = Mux(v[i], 31 - i, expr)
    m.d.comb += lz.eq(expr)
    return lz


def i2f(m, a, name="i2f"):
    """Return the binary32 bits (32-bit signal) of the signed 32-bit ``a``, nearest even."""
    sign = a[31]
    mag = Signal(32, name=f"{name}_mag")
    m.d.comb += mag.eq(Mux(sign, -a.as_signed(), a))
    lz = _lzc32(m, mag, name)
    norm = Signal(32, name=f"{name}_norm")
    m.d.comb += norm.eq(mag << lz)
    frac = norm[8:31]
    guard = norm[7]
    sticky = norm[0:7] != 0
    up = guard & (sticky | frac[0])
    exp = Signal(8, name=f"{name}_exp")
    m.d.comb += exp.eq(158 - lz)
    out = Signal(32, name=f"{name}_out")
    m.d.comb += out.eq(Mux(mag == 0, 0, Cat(frac, exp, sign) + up))
    return out


def f2i(m, x, floor, name="f2i"):
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
    half = 1 << 30
    above = fr > half
    tie = fr == half
    nz = fr != 0
    near = Signal(33, name=f"{name}_near")
    m.d.comb += near.eq(ip + (above | (tie & ip[0])))
    mag = Signal(33, name=f"{name}_magn")
    m.d.comb += mag.eq(Mux(floor, ip + (sign & nz), near))
    pos = Signal(32, name=f"{name}_pos")
    m.d.comb += pos.eq(Mux(mag > 0x7FFFFFFF, 0x7FFFFFFF, mag))
    neg = Signal(32, name=f"{name}_neg")
    m.d.comb += neg.eq(Mux(mag >= 0x80000000, 0x80000000, -mag.as_signed()))
    out = Signal(32, name=f"{name}_out")
    m.d.comb += out.eq(Mux(is_nan, 0,
                           Mux(big, Mux(sign, 0x80000000, 0x7FFFFFFF),
                               Mux(sign, neg, pos))))
    return out


def iadd(m, a, b, bits, name="iadd"):
    """Return ``clamp(a + b)`` to ``bits`` (a 6-bit value, 1..32) signed bits, as 32 bits."""
    s = Signal(signed(34), name=f"{name}_sum")
    m.d.comb += s.eq(a.as_signed() + b.as_signed())
    one = Signal(34, name=f"{name}_one")
    m.d.comb += one.eq(Const(1, 34) << (bits - 1)[:5])
    hi = Signal(signed(34), name=f"{name}_hi")
    lo = Signal(signed(34), name=f"{name}_lo")
    m.d.comb += [hi.eq(one.as_signed() - 1), lo.eq(-one.as_signed())]
    out = Signal(32, name=f"{name}_out")
    m.d.comb += out.eq(Mux(s > hi, hi, Mux(s < lo, lo, s))[:32])
    return out


def requant(m, a, b, imm, name="requant"):
    """Return ``clamp(round_half_up(a * m >> s), lo, hi)`` as a 32-bit word (see the module
    docstring for the fields of ``b`` and ``imm``)."""
    mult = b[0:15]
    sh = b[15:21]
    p = Signal(signed(48), name=f"{name}_p")
    m.d.comb += p.eq(a.as_signed() * mult)
    rnd = Signal(64, name=f"{name}_rnd")
    m.d.comb += rnd.eq(Mux(sh == 0, 0, Const(1, 64) << (sh - 1)[:6]))
    t = Signal(signed(65), name=f"{name}_t")
    m.d.comb += t.eq(p + rnd)
    q = Signal(signed(65), name=f"{name}_q")
    m.d.comb += q.eq(t >> sh)
    lo = imm[0:16].as_signed()
    hi = imm[16:32].as_signed()
    c1 = Signal(signed(65), name=f"{name}_c1")
    m.d.comb += c1.eq(Mux(q < lo, lo, q))
    out = Signal(32, name=f"{name}_out")
    m.d.comb += out.eq(Mux(c1 > hi, hi, c1)[:32])
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
