"""Seeded constrained-random programs, store images and FP32 operands (OpenTitan-style).

The verification gaps of issue 11 (planted one-line RTL defects that no test caught) came from
directed tests that never produced some situations: a write-after-read between two units, an
out-of-range second source reaching the sequencer's own check, an all −0 product column, a
multiplier sticky bit that matters on the subnormal path, subnormal inputs to the special
functions. This module draws programs and images that produce them on purpose and says (in
:func:`hazards` and :func:`rounding_class`) which ones a draw produced, so a test can assert
its coverage instead of hoping for it. Expected values always come from the golden interpreter
(:func:`ttrain.golden.interpreter.run`); nothing here computes a result.

* :class:`ProgramGen` — random instruction mixes over the contraction engine (CONTRACT), the
  vector unit (elementwise incl. special functions, reduce, gather/scatter_add) and the update
  unit (UPDATE), with LOOPs (stepped bases) and BARRIERs. Operand placement is biased so that
  consecutive instructions on *different* units overlap: RAW (read what the other wrote), WAR
  (write what the other reads) and WAW, which is what the sequencer's scoreboard must order.
  Every instruction is legal for the golden checker on a *window* of each store (the first
  ``window[s]`` words), so programs touch few words and overlap often; the image outside the
  window must stay as it was (a test that checks whole stores sees a stray write).
  Some instructions are *numeric*: their operand words in the initial image are replaced by
  crafted values (rounding cases, an all −0 product column, subnormals for the special
  functions), as long as no earlier instruction of the program wrote those words.
* :func:`rich_words` — words rich in ±0, subnormals, ±inf, NaNs, extreme normals.
* :func:`mul_pairs`, :func:`add_pairs` — FP32 operand pairs aimed at guard/round/sticky:
  ties, "tie + sticky", "just below half", sticky-only, on the normal and the subnormal path,
  at the overflow and underflow boundaries, with cancellation for the adder.
* :func:`issue_war_program` — the issue's case: a 64-word copy reading ``scratch[0:64]``,
  then a contraction writing ``scratch[60:64]``; with its RAW and WAW analogues.
* :func:`illegal_variants` — every illegal field of every slot of every instruction class
  (as instruction words), with the golden's code and pc.
"""

from dataclasses import replace
from fractions import Fraction

import numpy as np

from ttrain.golden.contract import Descriptor, View, view_addresses
from ttrain.golden.interpreter import check_program, dynamic_stream
from ttrain.golden.isa import (ELEMENTWISE_OPS, ERR_A_RANGE, ERR_B_RANGE, ERR_C_RANGE,
                               ERR_DIM, ERR_FIELD, ERR_LOOP, ERR_MODE, ERR_NO_END, ERR_OPCODE,
                               ERR_STORE, MNEMONICS, SPECIAL_OPS, Barrier, Contract,
                               Elementwise, End, EndLoop, Gather, Loop, RANDOM_OPS, Random,
                               OPS, Reduce, Update, encode, encode_program)

try:                            # the table-driven ISA (issue 11 item 5) says how many sources
    from ttrain.golden.isa import SPEC as _SPEC
    _SOURCES = {name: _SPEC[name].sources for name in ELEMENTWISE_OPS}
    _IMM = {name for name in ELEMENTWISE_OPS if _SPEC[name].imm}
except ImportError:
    _SOURCES = {name: 1 for name in ELEMENTWISE_OPS}
    _SOURCES.update(add=2, sub=2, mul=2, fill=0)
    _IMM = {"scale", "addi", "fill"}
#: Non-special elementwise ops (every one the table has: a new opcode is drawn too).
PLAIN_OPS = sorted(n for n in ELEMENTWISE_OPS if n not in SPECIAL_OPS)
#: Opcodes that must be illegal: candidates minus whatever the table assigns today.
ILLEGAL_OPCODES = [op for op in (0x00, 0x05, 0x09, 0x0F, 0x17, 0x1F, 0x22, 0x2A, 0x31, 0x3F,
                                 0x48, 0x7F, 0x80, 0xFF) if op not in MNEMONICS]

def _requant_imm(rng):
    lo = int(rng.integers(-300, 1))
    hi = int(rng.integers(-1, 300)) if rng.random() < 0.8 else 32767
    return (lo & 0xFFFF) | (hi & 0xFFFF) << 16


#: Integer ops' legal immediates: rounding mode, saturation width, requant clamp bounds, byte.
_INT_IMM = {"f2i": lambda rng: int(rng.integers(0, 2)),
            "iadd": lambda rng: int(rng.choice([8, 9, 16, 32, int(rng.integers(1, 33))])),
            "requant": _requant_imm,
            "ext8": lambda rng: int(rng.integers(0, 4)),
            "ins8": lambda rng: int(rng.integers(0, 4)),
            "ext16": lambda rng: int(rng.integers(0, 2)),
            "ins16": lambda rng: int(rng.integers(0, 2)),
            "fcmp": lambda rng: int(rng.integers(0, 3)),
            "bitop": lambda rng: int(rng.integers(0, 4))}
# every op whose immediate has a legality rule needs a generator of legal immediates here
assert {sp.mnemonic for sp in OPS if sp.imm_rule is not None} <= set(_INT_IMM), \
    "give the new op's legal immediates in tests/random_programs.py: _INT_IMM"

__all__ = ["STORES", "ProgramGen", "rich_words", "mul_pairs", "add_pairs", "subnormal_words",
           "rounding_class", "hazards", "unit_of", "issue_war_program", "illegal_variants",
           "check_legal", "neg_zero_cells"]

STORES = ("param", "grad", "act", "scratch")
UNITS = ("engine", "vector", "update")
NEG_ZERO = 0x80000000

#: Special bit patterns every image gets plenty of.
EDGE_WORDS = np.array([
    0x00000000, 0x80000000,                      # +0, -0
    0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00400000, 0x00000003,   # subnormals
    0x00800000, 0x80800000, 0x00800001,          # smallest normals
    0x7F7FFFFF, 0xFF7FFFFF, 0x7F7FFFFE,          # largest normals
    0x7F800000, 0xFF800000,                      # infinities
    0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FBFFFFF, 0xFFFFFFFF, 0x7FC12345,  # NaNs (q, s)
    0x3F800000, 0xBF800000, 0x3F800001, 0x3F7FFFFF, 0x33800000, 0x4B000000,  # near 1, ulps
], dtype=np.uint32)


def unit_of(instr):
    """The unit an instruction runs on (``engine``, ``vector``, ``update``) or ``None``."""
    if isinstance(instr, Contract):
        return "engine"
    if isinstance(instr, (Elementwise, Reduce, Gather, Random)):
        return "vector"
    if isinstance(instr, Update):
        return "update"
    return None


# ---- FP32 words -----------------------------------------------------------------------------

def _bits(sign, exp, man):
    return ((int(sign) & 1) << 31) | ((int(exp) & 0xFF) << 23) | (int(man) & 0x7FFFFF)


def subnormal_words(rng, n):
    """``n`` words: random subnormals of both signs (every magnitude class of the fraction),
    with some smallest normals and signed zeros among them."""
    width = rng.integers(1, 24, n)
    man = rng.integers(0, 1 << 23, n, dtype=np.int64) & ((1 << width) - 1)
    man = np.maximum(man, 1)
    out = (rng.integers(0, 2, n).astype(np.uint32) << 31) | man.astype(np.uint32)
    k = rng.random(n)
    out[k < 0.08] = 0x80000000
    out[(k >= 0.08) & (k < 0.12)] = 0x00000000
    tiny = (k >= 0.12) & (k < 0.22)                   # normals just above the boundary
    out[tiny] = (out[tiny] & 0x80000000) | (np.uint32(1 << 23) + (out[tiny] & 0xFFFF))
    return out


def rich_words(rng, n, *, special=0.35):
    """``n`` FP32 words: normals over a wide exponent range, and with probability ``special``
    an edge value (:data:`EDGE_WORDS`), a random subnormal or a random NaN payload."""
    sign = rng.integers(0, 2, n)
    exp = np.clip(np.round(rng.normal(127, 12, n)), 1, 254).astype(np.int64)
    man = rng.integers(0, 1 << 23, n)
    out = np.array([_bits(s, e, m) for s, e, m in zip(sign, exp, man)], dtype=np.uint32)
    pick = rng.random(n)
    edge = pick < special * 0.55
    out[edge] = rng.choice(EDGE_WORDS, int(edge.sum()))
    sub = (pick >= special * 0.55) & (pick < special * 0.9)
    out[sub] = subnormal_words(rng, int(sub.sum()))
    nan = (pick >= special * 0.9) & (pick < special)
    out[nan] = (rng.integers(0, 2, int(nan.sum())).astype(np.uint32) << 31) | 0x7F800000 | \
        rng.integers(1, 1 << 23, int(nan.sum())).astype(np.uint32)
    return out


#: Low-bit patterns of the bits shifted out by rounding: (name, pattern for j bits).
def _tail(rng, kind, j):
    """A ``j``-bit tail (the bits below the kept mantissa) of rounding class ``kind``."""
    half = 1 << (j - 1)
    if kind == "tie":
        return half                                   # G = 1, R = S = 0
    if kind == "tie_sticky":
        return half | 1                               # G = 1, only the last bit sticky
    if kind == "below":
        return half - 1                               # G = 0, R..S all ones
    if kind == "sticky":
        return 1                                      # only the lowest bit
    return int(rng.integers(0, 1 << j))


_KINDS = ("tie", "tie_sticky", "below", "sticky", "any")


def mul_pairs(rng, n):
    """``n`` operand pairs ``(a, b)`` (uint32 arrays) for ``a * b`` aimed at rounding.

    Families: ``b = ±2**e * (1 + 2**-j)`` with ``a``'s low ``j`` bits set to a tie, tie plus a
    sticky bit, just below half or a lone sticky bit (normal results); ``a`` times a power of
    two that lands the product ``s`` bits into the subnormal range with the same tail classes
    (the multiplier's sticky on the subnormal path); products at the overflow boundary and at
    the subnormal/normal boundary; and a few random pairs of :func:`rich_words`."""
    a = np.zeros(n, np.uint32)
    b = np.zeros(n, np.uint32)
    for i in range(n):
        fam = rng.random()
        kind = _KINDS[int(rng.integers(0, len(_KINDS)))]
        sa, sb = int(rng.integers(0, 2)), int(rng.integers(0, 2))
        if fam < 0.4:                                   # normal path, tail = a's low j bits
            j = int(rng.integers(1, 23))
            man = (int(rng.integers(0, 1 << 23)) & ~((1 << j) - 1)) | _tail(rng, kind, j)
            ea = int(rng.integers(100, 150))
            eb = int(rng.integers(100, 150))
            a[i] = _bits(sa, ea, man)
            b[i] = _bits(sb, eb, 1 << (23 - j))         # 1 + 2**-j
        elif fam < 0.72:                                # subnormal result, s bits shifted out
            s = int(rng.integers(1, 24))
            man = (int(rng.integers(0, 1 << 23)) & ~((1 << s) - 1)) | _tail(rng, kind, s) \
                if s <= 23 else int(rng.integers(0, 1 << 23))
            ea = int(rng.integers(60, 120))
            eb = 127 - ea - s + 1                      # product exponent 1 - s (biased)
            if eb < 1:                                 # b itself would be subnormal: shift a
                ea, eb = ea + (1 - eb), 1
            a[i] = _bits(sa, ea, man & 0x7FFFFF)
            b[i] = _bits(sb, eb, 0 if rng.random() < 0.7 else 1 << int(rng.integers(18, 23)))
        elif fam < 0.78:                                # sticky only below the product
            # (1 + 2**-23) * (1 + (2**t - 1) * 2**-23) = 2**46 + 2**(23 + t) + 2**t - 1 (in
            # 2**-46 units): shifted right by t on the subnormal path, the guard bit is set,
            # the 23 bits under it are zero and the only sticky bits are the ones shifted out
            # of the 48-bit product: a lost sticky turns "above half" into a tie (even).
            t = int(rng.integers(1, 22))                # t = 22 would keep an odd LSB
            ea = int(rng.integers(40, 88))
            a[i] = _bits(sa, ea, 1)
            b[i] = _bits(sb, 127 - t - ea, (1 << t) - 1)   # G = bit 23 + t of the product
        elif fam < 0.86:                                # overflow boundary
            a[i] = _bits(sa, 254, 0x7FFFFF - int(rng.integers(0, 4)))
            b[i] = _bits(sb, 127, int(rng.integers(0, 4)))
        elif fam < 0.93:                                # subnormal -> smallest normal boundary
            a[i] = _bits(sa, 0, 0x7FFFFF - int(rng.integers(0, 3)))
            b[i] = _bits(sb, 127, int(rng.integers(0, 1 << 4)))
        else:
            a[i], b[i] = rich_words(rng, 2, special=0.6)
    swap = rng.random(n) < 0.5
    a[swap], b[swap] = b[swap].copy(), a[swap].copy()
    return a, b


def add_pairs(rng, n):
    """``n`` operand pairs for ``a + b`` aimed at rounding: exponent difference ``d`` with
    ``b``'s low ``d`` bits (the ones shifted out) a tie, tie plus sticky, just below half or a
    lone sticky bit; differences past the mantissa (everything sticky); opposite signs near
    cancellation (``d`` = 0, 1); subnormal operands; sums at the overflow boundary; ``x + -x``
    and signed-zero pairs."""
    a = np.zeros(n, np.uint32)
    b = np.zeros(n, np.uint32)
    for i in range(n):
        fam = rng.random()
        kind = _KINDS[int(rng.integers(0, len(_KINDS)))]
        sa = int(rng.integers(0, 2))
        sb = sa if rng.random() < 0.5 else 1 - sa
        if fam < 0.45:
            d = int(rng.integers(1, 27))
            ea = int(rng.integers(30, 220))
            j = min(d, 23)
            man = (int(rng.integers(0, 1 << 23)) & ~((1 << j) - 1)) | _tail(rng, kind, j)
            a[i] = _bits(sa, ea, int(rng.integers(0, 1 << 23)))
            b[i] = _bits(sb, ea - d, man)
        elif fam < 0.6:                                  # near cancellation
            ea = int(rng.integers(2, 250))
            man = int(rng.integers(0, 1 << 23))
            a[i] = _bits(sa, ea, man)
            b[i] = _bits(1 - sa, ea - int(rng.integers(0, 2)),
                         man ^ (1 << int(rng.integers(0, 23))) if rng.random() < 0.7 else man)
        elif fam < 0.72:                                 # subnormal operands / results
            a[i] = subnormal_words(rng, 1)[0]
            b[i] = subnormal_words(rng, 1)[0] if rng.random() < 0.6 else \
                _bits(sb, 1, int(rng.integers(0, 1 << 23)))
        elif fam < 0.8:                                  # overflow boundary
            a[i] = _bits(sa, 254, 0x7FFFFF - int(rng.integers(0, 2)))
            b[i] = _bits(sa, int(rng.integers(229, 232)), int(rng.integers(0, 1 << 23)))
        elif fam < 0.88:                                 # x + -x, signed zeros
            x = int(rich_words(rng, 1)[0])
            a[i], b[i] = x, x ^ 0x80000000
            if rng.random() < 0.4:
                a[i], b[i] = (0x80000000, 0x80000000) if rng.random() < 0.5 else (0x80000000, 0)
        else:
            a[i], b[i] = rich_words(rng, 2, special=0.6)
    swap = rng.random(n) < 0.5
    a[swap], b[swap] = b[swap].copy(), a[swap].copy()
    return a, b


def _exact(bits):
    """The exact rational value of a finite FP32 pattern (None for inf/NaN)."""
    bits = int(bits)
    e, man, s = (bits >> 23) & 0xFF, bits & 0x7FFFFF, -1 if bits >> 31 else 1
    if e == 0xFF:
        return None
    if e == 0:
        return s * Fraction(man, 1 << 149)
    return s * Fraction((1 << 23) | man) * Fraction(2) ** (e - 150)


def rounding_class(value):
    """Rounding class of an exact rational ``value`` rounded to FP32: ``exact``, ``tie``,
    ``above`` (more than half an ulp, decided by the round/sticky bits: the tail is in
    ``(half, half + ulp/4]`` — a lost sticky bit turns it into a tie), ``below`` (the tail is
    in ``[half - ulp/4, half)``), ``other``; with ``sub:`` prefixed when the result is in the
    subnormal range, or ``None`` for results beyond the largest finite value."""
    if value is None or value == 0:
        return None if value is None else "exact"
    mag = abs(value)
    if mag >= Fraction(2) ** 128:
        return None
    if mag < Fraction(2) ** -126:
        ulp = Fraction(2) ** -149
        prefix = "sub:"
    else:
        e = mag.numerator.bit_length() - mag.denominator.bit_length()
        while Fraction(2) ** e > mag:
            e -= 1
        while Fraction(2) ** (e + 1) <= mag:
            e += 1
        ulp = Fraction(2) ** (e - 23)
        prefix = ""
    tail = mag / ulp - (mag // ulp)
    if tail == 0:
        return prefix + "exact"
    if tail == Fraction(1, 2):
        return prefix + "tie"
    if Fraction(1, 2) < tail <= Fraction(3, 4):
        return prefix + "above"
    if Fraction(1, 4) <= tail < Fraction(1, 2):
        return prefix + "below"
    return prefix + "other"


# ---- views and legality ---------------------------------------------------------------------

def check_legal(instrs, window):
    """Golden legality of ``instrs + [End()]`` on stores of ``window`` words (0 if legal)."""
    return check_program(list(instrs) + [End()], window)[0]


def _operands(instr):
    """``[(slot, store, addresses, writes)]`` of a (loop-stepped) instruction."""
    out = []
    if isinstance(instr, Contract):
        d = instr.desc
        sh = d.shapes()
        for slot, name in ((0, "c"), (1, "a"), (2, "b")):
            v = getattr(d, name)
            out.append((slot, v.store, view_addresses(v, *sh[name]).ravel(), slot == 0))
        return out
    if isinstance(instr, Elementwise):
        for slot, v in enumerate(instr.views):
            if v is not None:
                out.append((slot, v.store, view_addresses(v, 1, instr.rows, instr.cols).ravel(),
                            slot == 0))
        return out
    if isinstance(instr, Reduce):
        return [(0, instr.d.store, view_addresses(instr.d, 1, instr.rows, 1).ravel(), True),
                (1, instr.a.store, view_addresses(instr.a, 1, instr.rows, instr.cols).ravel(),
                 False)]
    if isinstance(instr, Gather):
        r, c, tr = instr.rows, instr.cols, instr.table_rows
        ds, ss = ((r, c), (tr, c)) if instr.op == "gather" else ((tr, c), (r, c))
        return [(0, instr.dst.store, view_addresses(instr.dst, 1, *ds).ravel(), True),
                (1, instr.src.store, view_addresses(instr.src, 1, *ss).ravel(), False),
                (2, instr.index.store, view_addresses(instr.index, 1, r, 1).ravel(), False)]
    if isinstance(instr, Update):
        n = instr.count
        return [(0, instr.theta.store, instr.theta.base + np.arange(n), True),
                (1, instr.grad.store, instr.grad.base + np.arange(n), True)]
    if isinstance(instr, Random):
        r, c = instr.rows, instr.cols
        return [(0, instr.d.store, view_addresses(instr.d, 1, r, c).ravel(), True),
                (1, instr.a.store, view_addresses(instr.a, 1, r, c).ravel(), False),
                (2, instr.seed.store, np.array([instr.seed.base]), False)]
    return out


def hazards(instrs):
    """Count the inter-unit hazards of a program's dynamic stream: for each instruction and
    the latest earlier instruction of each *other* unit (no BARRIER between them), whether
    they share a word where the later one reads what the earlier writes (``RAW``), writes
    what it reads (``WAR``) or writes what it writes (``WAW``). Returns a dict of counts
    (keys also ``"<kind>:<earlier unit>-><later unit>"``)."""
    counts = {}
    last = {}
    for _, ins in dynamic_stream(list(instrs)):
        if isinstance(ins, (Barrier, End)):
            last = {}
            continue
        u = unit_of(ins)
        if u is None:
            continue
        ops = _operands(ins)
        for v, prev in last.items():
            if v == u:
                continue
            found = set()
            for _, st, addr, wr in ops:
                for _, pst, paddr, pwr in prev:
                    if st != pst or not (wr or pwr):
                        continue
                    if np.intersect1d(addr, paddr).size:
                        if wr and pwr:
                            found.add("WAW")
                        elif wr:
                            found.add("WAR")
                        else:
                            found.add("RAW")
            for kind in found:
                counts[kind] = counts.get(kind, 0) + 1
                key = f"{kind}:{v}->{u}"
                counts[key] = counts.get(key, 0) + 1
        last[u] = ops
    return counts


def neg_zero_cells(instr, image, dirty=None):
    """Output cells of a non-accumulating CONTRACT whose every product is ``-0.0`` on
    ``image`` (finite operands, a zero in each pair, signs differing): ``[(batch, i, j)]``.
    With ``dirty`` (store -> set of addresses written earlier in the program) cells whose
    operands an earlier instruction may have changed are left out."""
    d = instr.desc
    if d.accumulate:
        return []
    sh = d.shapes()
    aa, ba = view_addresses(d.a, *sh["a"]), view_addresses(d.b, *sh["b"])
    a, b = image[d.a.store][aa], image[d.b.store][ba]
    out = []
    for t in range(d.batch):
        for i in range(d.m):
            for j in range(d.n):
                if dirty is not None and (dirty[d.a.store].intersection(aa[t, i, :].tolist())
                                          or dirty[d.b.store].intersection(ba[t, :, j].tolist())):
                    continue
                x, y = a[t, i, :], b[t, :, j]
                finite = ((x & 0x7F800000) != 0x7F800000) & ((y & 0x7F800000) != 0x7F800000)
                zero = ((x & 0x7FFFFFFF) == 0) | ((y & 0x7FFFFFFF) == 0)
                neg = ((x ^ y) >> 31) == 1
                if np.all(finite & zero & neg):
                    out.append((t, i, j))
    return out


# ---- the program generator ------------------------------------------------------------------

class ProgramGen:
    """Random programs on a memory image (see the module docstring).

    Parameters
    ----------
    seed : int
    sizes : dict
        Full store sizes (the image's arrays have these sizes).
    window : dict
        Words of each store the random operands use (``<= sizes``); ``act``'s last
        ``index_words`` words of its window hold gather/scatter index lists that no other
        instruction writes.
    special : bool
        Draw special-function ops (the vector unit has the special-function unit).
    plain_ops : sequence of str or None
        Non-special elementwise ops to draw (default: every one of the ISA table).
    max_elems : int
        Largest rows x cols of a vector op (the copy of :func:`issue_war_program` is apart).
    hazard : float
        Probability that an operand is placed over an operand of the last instruction of
        another unit.
    numeric : float
        Probability that an instruction gets crafted operand words.
    """

    KINDS = {"contract": 0.30, "elementwise": 0.30, "special": 0.07, "reduce": 0.08,
             "gather": 0.05, "update": 0.14, "random": 0.05, "barrier": 0.03, "loop": 0.03}

    def __init__(self, seed, sizes, window, *, special=True, max_elems=48, hazard=0.7,
                 numeric=0.35, index_words=32, max_mn=6, max_k=6, plain_ops=None,
                 max_split=1):
        self.rng = np.random.default_rng(seed)
        self.sizes = dict(sizes)
        self.window = {s: min(int(window[s]), sizes[s]) for s in STORES}
        self.index_words = index_words
        self.limit = dict(self.window)
        self.limit["act"] -= index_words                # general operands stay below
        self.special = special
        self.plain_ops = sorted(plain_ops or PLAIN_OPS)
        self.max_elems = max_elems
        self.hazard = hazard
        self.numeric = numeric
        self.max_mn, self.max_k = max_mn, max_k
        self.max_split = max_split              # CONTRACT splits drawn up to it (1: none)
        self.stats = {"neg_zero_cells": 0, "numeric": 0, "bad_index": 0}

    # -- images --------------------------------------------------------------------------
    def image(self):
        """A full-size image: rich words in every window, ordinary normals elsewhere."""
        rng = self.rng
        img = {}
        for s in STORES:
            words = (rng.standard_normal(self.sizes[s]) * 2).astype(np.float32).view(np.uint32)
            words = words.copy()
            words[:self.window[s]] = rich_words(rng, self.window[s])
            img[s] = words
        return img

    def refresh(self, image):
        """Replace the windows of ``image`` (in place) with fresh rich words; return the
        ``(store, base, words)`` writes the host must make."""
        out = []
        for s in STORES:
            image[s][:self.window[s]] = rich_words(self.rng, self.window[s])
            out.append((s, 0, image[s][:self.window[s]].copy()))
        return out

    # -- views ---------------------------------------------------------------------------
    def _store(self, weights=None):
        return STORES[int(self.rng.choice(4, p=weights))] if weights else \
            STORES[int(self.rng.integers(0, 4))]

    def _matrix(self, store, rows, cols, target=None, batch=1, bcast=False):
        """A random ``rows x cols`` view (row-major, transposed, padded, column stride 2,
        batch stride span or 0 for a broadcast), placed over ``target`` = (lo, hi) if
        given."""
        rng = self.rng
        transpose = rng.random() < 0.35
        r, c = (cols, rows) if transpose else (rows, cols)
        cs = 2 if rng.random() < 0.15 else 1
        ld = c * cs + (int(rng.integers(0, 3)) if rng.random() < 0.3 else 0)
        if r == 1 and rng.random() < 0.5:
            ld = 0 if rng.random() < 0.5 else ld
        span = (r - 1) * ld + (c - 1) * cs + 1
        bs = 0 if (bcast and rng.random() < 0.4) else span + int(rng.integers(0, 3))
        total = (batch - 1) * bs + span
        free = self.limit[store] - total
        if free < 0:
            return None
        if target is not None:
            lo, hi = target
            base = int(rng.integers(max(0, lo - total + 1), min(free, hi) + 1)) \
                if max(0, lo - total + 1) <= min(free, hi) else int(rng.integers(0, free + 1))
        else:
            base = int(rng.integers(0, free + 1))
        v = View(store, base, ld, cs, bs if batch > 1 or bcast else 0)
        return v.T if transpose else v

    def _target(self, history, unit, want_write):
        """An operand interval (store, lo, hi) of the last instruction of another unit:
        its written slot (for RAW/WAW) or a read slot (WAR)."""
        cands = []
        for u, ops in history.items():
            if u == unit:
                continue
            for _, st, addr, wr in ops:
                if addr.size and (wr == want_write or (want_write is None)):
                    cands.append((st, int(addr.min()), int(addr.max())))
        if not cands or self.rng.random() >= self.hazard:
            return None
        return cands[int(self.rng.integers(0, len(cands)))]

    def _place(self, history, unit, write, rows, cols, store=None, batch=1, bcast=False):
        """A view for a slot that writes (``write``) or reads; biased to a hazard."""
        rng = self.rng
        if write:     # WAR or WAW against another unit
            tgt = self._target(history, unit, want_write=bool(rng.random() < 0.5))
        else:         # RAW
            tgt = self._target(history, unit, want_write=True)
        if tgt is not None and (store is None or store == tgt[0]):
            st, lo, hi = tgt
            if lo >= self.limit[st]:
                tgt = None
        else:
            tgt = None
        st = tgt[0] if tgt else (store or self._store())
        return self._matrix(st, rows, cols, None if tgt is None else tgt[1:], batch, bcast)

    # -- instructions ----------------------------------------------------------------------
    def _contract(self, h):
        rng = self.rng
        m, n, k = (int(rng.integers(1, x + 1)) for x in (self.max_mn, self.max_mn, self.max_k))
        batch = 1 if rng.random() < 0.75 else 2
        c = self._place(h, "engine", True, m, n, batch=batch)
        a = self._place(h, "engine", False, m, k, batch=batch, bcast=True)
        b = self._place(h, "engine", False, k, n, batch=batch, bcast=True)
        if None in (a, b, c):
            return None
        acc, integer = bool(rng.random() < 0.3), bool(rng.random() < 0.25)
        split = (1 << int(rng.integers(0, self.max_split.bit_length()))
                 if self.max_split > 1 else 1)
        return Contract(Descriptor(m, n, k, a, b, c, accumulate=acc, batch=batch,
                                   integer=integer, split=split))

    def _elementwise(self, h, special=False):
        rng = self.rng
        op = str(rng.choice(sorted(SPECIAL_OPS) if special else self.plain_ops))
        rows = int(rng.integers(1, 7))
        cols = int(rng.integers(1, max(2, self.max_elems // rows) + 1))
        nsrc = _SOURCES[op]
        srcs = [self._place(h, "vector", False, rows, cols) for _ in range(nsrc)]
        if nsrc and rng.random() < 0.2:
            d = srcs[0]                                   # in place
        else:
            d = self._place(h, "vector", True, rows, cols)
        if d is None or None in srcs:
            return None
        imm = 0
        if op in _INT_IMM:
            imm = _INT_IMM[op](rng)
        elif op in _IMM:
            imm = int(rich_words(rng, 1, special=0.5)[0])
        srcs += [None] * (2 - len(srcs))
        return Elementwise(op, rows, cols, d, srcs[0], srcs[1], imm)

    def _random(self, h):
        """A PRNG op (golden.isa.Random): d (in place on a sometimes), a (a broadcast
        coefficient sometimes for raccum), a one-word seed, a random index base and sigma."""
        rng = self.rng
        op = str(rng.choice(sorted(RANDOM_OPS)))
        rows, cols = int(rng.integers(1, 5)), int(rng.integers(1, 13))
        bcast = op == "raccum" and rng.random() < 0.5
        if bcast:                                   # one coefficient word for every element
            one = self._place(h, "vector", False, 1, 1)
            a = None if one is None else View(one.store, one.base, 0, 0)
        else:
            a = self._place(h, "vector", False, rows, cols)
        d = a if (a is not None and not bcast and rng.random() < 0.3) else \
            self._place(h, "vector", True, rows, cols)
        seed = self._place(h, "vector", False, 1, 1)
        if None in (a, d, seed):
            return None
        sigma = int(rng.integers(1, 256)) if op.startswith("perturb") else 0
        return Random(op, rows, cols, d, a, seed, int(rng.integers(0, 1 << 32)), sigma)

    def _reduce(self, h):
        rng = self.rng
        rows = int(rng.integers(1, 7))
        cols = int(rng.integers(1, 9))
        a = self._place(h, "vector", False, rows, cols)
        d = self._place(h, "vector", True, rows, 1)
        if a is None or d is None:
            return None
        d = View(d.store, d.base, max(d.row_stride, d.col_stride, 1), 0)
        return Reduce(str(rng.choice(["sum", "max"])), rows, cols, d, a,
                      accumulate=bool(rng.random() < 0.4))

    def _gather(self, h, image):
        rng = self.rng
        op = "gather" if rng.random() < 0.5 else "scatter_add"
        rows = int(rng.integers(1, 6))
        cols = int(rng.integers(1, 6))
        tr = int(rng.integers(1, 6))
        ds, ss = ((rows, cols), (tr, cols)) if op == "gather" else ((tr, cols), (rows, cols))
        dst = self._place(h, "vector", True, *ds)
        src = self._place(h, "vector", False, *ss)
        if dst is None or src is None:
            return None
        lo = self.limit["act"]
        base = lo + int(rng.integers(0, self.index_words - rows + 1))
        index = View("act", base, 1, 0)
        idx = rng.integers(0, tr, rows).astype(np.uint32)
        if rng.random() < 0.06:
            idx[int(rng.integers(0, rows))] = tr + int(rng.integers(0, 3))   # ERR_INDEX
            self.stats["bad_index"] += 1
        image["act"][base:base + rows] = idx
        return Gather(op, rows, cols, tr, dst, src, index)

    def _update(self, h):
        rng = self.rng
        n = int(rng.integers(1, 25))
        th = self._place(h, "update", True, 1, n, store=self._store([0.5, 0.2, 0.15, 0.15]))
        g = self._place(h, "update", True, 1, n)
        if th is None or g is None:
            return None
        lr = int(rng.choice([0x3C23D70A, 0x3F800000, 0xBD4CCCCD, 0x00000001, 0x80000000,
                             0x7F800000, 0x7FC00000, int(rich_words(rng, 1)[0])]))
        return Update(View(th.store, th.base), View(g.store, g.base), n, lr)

    # -- numeric operands --------------------------------------------------------------------
    def _craft(self, ins, image, dirty):
        """Write crafted operand words of ``ins`` into ``image`` where no earlier instruction
        of the program wrote (``dirty``): rounding pairs for mul/add/sub and k = 1 products,
        an all −0 product column for a contraction, subnormals for special functions."""
        rng = self.rng

        def put(view, rows, cols, words, batch=1):
            addr = view_addresses(view, batch, rows, cols).ravel()
            for a, w in zip(addr, words):
                if int(a) not in dirty[view.store]:
                    image[view.store][a] = w

        if isinstance(ins, Elementwise):
            r, c = ins.rows, ins.cols
            if ins.op in SPECIAL_OPS:
                put(ins.a, r, c, subnormal_words(rng, r * c))
            elif ins.op in ("mul", "add", "sub"):
                x, y = (mul_pairs if ins.op == "mul" else add_pairs)(rng, r * c)
                put(ins.a, r, c, x)
                put(ins.b, r, c, y)
            elif ins.op in ("scale", "addi"):
                x, _ = (mul_pairs if ins.op == "scale" else add_pairs)(rng, r * c)
                put(ins.a, r, c, x)
            return
        if isinstance(ins, Contract):
            d = ins.desc
            sh = d.shapes()
            if rng.random() < 0.5 and not d.accumulate:     # an all -0 product column
                i, j = int(rng.integers(0, d.m)), int(rng.integers(0, d.n))
                av = view_addresses(d.a, *sh["a"])[:, i, :].ravel()
                bv = view_addresses(d.b, *sh["b"])[:, :, j].ravel()
                # A row i negative normals, B column j zeros (+0), or A -0 row and B positive
                flip = rng.random() < 0.5
                for a in av:
                    if int(a) not in dirty[d.a.store]:
                        image[d.a.store][a] = (0x80000000 if flip else
                                               _bits(1, int(rng.integers(100, 150)),
                                                     int(rng.integers(0, 1 << 23))))
                for a in bv:
                    if int(a) not in dirty[d.b.store]:
                        image[d.b.store][a] = (_bits(0, int(rng.integers(100, 150)),
                                                     int(rng.integers(0, 1 << 23)))
                                               if flip else 0x00000000)
                return
            x, y = mul_pairs(rng, max(d.m, d.n) * d.k * d.batch)
            put(d.a, d.m, d.k, x, d.batch)
            put(d.b, d.k, d.n, y, d.batch)

    # -- programs ------------------------------------------------------------------------
    def program(self, image, n=14):
        """Draw about ``n`` legal instructions (+ END) for ``image`` (crafted operands are
        written into ``image`` in place). Returns the instruction list."""
        rng = self.rng
        kinds = dict(self.KINDS)
        if not self.special:
            kinds.pop("special")
        names = list(kinds)
        p = np.array([kinds[k] for k in names])
        p = p / p.sum()
        out = []
        history = {}
        dirty = {s: set() for s in STORES}
        while len(out) < n:
            kind = names[int(rng.choice(len(names), p=p))]
            if kind == "barrier":
                if out and not isinstance(out[-1], Barrier):
                    out.append(Barrier())
                    history = {}
                continue
            if kind == "loop":
                body = self._loop(history, image)
                if body:
                    out += body
                    history = {}
                continue
            ins = self._one(kind, history, image)
            if ins is None:
                continue
            if rng.random() < self.numeric:
                self._craft(ins, image, dirty)
                self.stats["numeric"] += 1
            if isinstance(ins, Contract):
                self.stats["neg_zero_cells"] += len(neg_zero_cells(ins, image, dirty))
            out.append(ins)
            ops = _operands(ins)
            history[unit_of(ins)] = ops
            for _, st, addr, wr in ops:
                if wr:
                    dirty[st].update(int(a) for a in addr)
        return out + [End()]

    def _one(self, kind, history, image, tries=40):
        for _ in range(tries):
            if kind == "contract":
                ins = self._contract(history)
            elif kind in ("elementwise", "special"):
                ins = self._elementwise(history, special=kind == "special")
            elif kind == "reduce":
                ins = self._reduce(history)
            elif kind == "random":
                ins = self._random(history)
            elif kind == "gather":
                ins = self._gather(history, image)
            else:
                ins = self._update(history)
            if ins is not None and check_legal([ins], self.window) == 0:
                return ins
        return None

    def _loop(self, history, image):
        """LOOP count 2..3 over 1..3 instructions with stepped bases (the body's operands
        move by the increments each iteration)."""
        rng = self.rng
        count = int(rng.integers(2, 4))
        inc = tuple(int(rng.choice([0, 1, 4, 8, int(rng.integers(1, 24))])) for _ in range(3))
        body = []
        for _ in range(int(rng.integers(1, 4))):
            kind = str(rng.choice(["contract", "elementwise", "update", "reduce"]))
            for _ in range(20):
                ins = self._one(kind, history, image, tries=10)
                if ins is None:
                    break
                used = 3 if isinstance(ins, Contract) else (
                    2 if isinstance(ins, (Reduce, Update)) else
                    1 + sum(v is not None for v in (ins.a, ins.b)))
                step = tuple(int(rng.integers(0, 4)) if s < used else 0 for s in range(3))
                ins = replace(ins, step=step)
                if check_legal([Loop(count, inc)] + body + [ins, EndLoop()], self.window) == 0:
                    body.append(ins)
                    break
        if not body:
            return None
        return [Loop(count, inc)] + body + [EndLoop()]


# ---- directed programs ----------------------------------------------------------------------

def issue_war_program(kind="WAR", copy_words=64):
    """The issue's case and its analogues (vector copy of ``scratch[0:64]`` then a CONTRACT
    on the engine):

    * ``WAR``: the copy reads ``scratch[0:64]`` (into ``act``), the contraction writes
      ``scratch[60:64]`` — the contraction must wait until the copy has read word 63;
    * ``RAW``: the copy writes ``scratch[0:64]``, the contraction reads ``scratch[60:64]``;
    * ``WAW``: the copy writes ``scratch[0:64]``, the contraction writes ``scratch[60:64]``
      (the contraction's words must be the final ones);
    * ``RAW_E``/``WAR_E``: the other direction (contraction first, then the copy reading /
      writing the words it writes / reads).
    """
    n = copy_words
    rows = n // 16
    mm_c = View("scratch", n - 4, 2, 1)                  # scratch[60:64] as 2 x 2
    if kind == "WAR":
        copy = Elementwise("copy", rows, 16, View("act", 0, 16, 1), View("scratch", 0, 16, 1))
        mm = Contract(Descriptor(2, 2, 3, View("param", 0, 3, 1), View("grad", 0, 2, 1), mm_c))
        return [copy, mm, End()]
    if kind == "RAW":
        copy = Elementwise("copy", rows, 16, View("scratch", 0, 16, 1), View("act", 0, 16, 1))
        mm = Contract(Descriptor(2, 2, 2, View("scratch", n - 4, 2, 1), View("grad", 0, 2, 1),
                                 View("param", 0, 2, 1)))
        return [copy, mm, End()]
    if kind == "WAW":
        copy = Elementwise("copy", rows, 16, View("scratch", 0, 16, 1), View("act", 0, 16, 1))
        mm = Contract(Descriptor(2, 2, 3, View("param", 0, 3, 1), View("grad", 0, 2, 1), mm_c))
        return [copy, mm, End()]
    big = Contract(Descriptor(4, 4, 16, View("param", 0, 16, 1), View("grad", 0, 4, 1),
                              View("scratch", n - 16, 4, 1)))
    if kind == "RAW_E":
        return [big, Elementwise("copy", 1, 16, View("act", 0, 1, 1),
                                 View("scratch", n - 16, 1, 1)), End()]
    if kind == "WAR_E":
        return [big, Elementwise("fill", 1, 16, View("param", 0, 1, 1), imm=0x3F800000),
                End()]
    raise ValueError(f"kind must be WAR, RAW, WAW, RAW_E or WAR_E, not {kind!r}")


def _base_instrs(sizes):
    """One legal instruction of every class (small, low addresses) for the illegal-field
    variants."""
    c = Contract(Descriptor(2, 3, 2, View("param", 0, 2, 1), View("grad", 0, 3, 1),
                            View("scratch", 0, 3, 1)))
    cb = Contract(Descriptor(2, 3, 2, View("param", 0, 2, 1, 4), View("grad", 0, 3, 1, 6),
                             View("scratch", 0, 3, 1, 6), batch=2))
    add = Elementwise("add", 2, 3, View("act", 0, 3, 1), View("param", 8, 3, 1),
                      View("grad", 8, 3, 1))
    scale = Elementwise("scale", 2, 3, View("act", 16, 3, 1), View("param", 8, 3, 1),
                        imm=0x3FC00000)
    fill = Elementwise("fill", 2, 3, View("act", 32, 3, 1), imm=0x40000000)
    exp = Elementwise("exp", 2, 3, View("act", 48, 3, 1), View("param", 16, 3, 1))
    red = Reduce("sum", 2, 3, View("act", 64, 1, 0), View("param", 24, 3, 1))
    gat = Gather("gather", 2, 3, 4, View("act", 72, 3, 1), View("param", 32, 3, 1),
                 View("grad", 40, 1, 0))
    sca = Gather("scatter_add", 2, 3, 4, View("act", 96, 3, 1), View("param", 48, 3, 1),
                 View("grad", 40, 1, 0))
    upd = Update(View("param", 64), View("grad", 64), 5, 0x3C23D70A)
    loop = Loop(2, (1, 2, 3))
    return {"contract": c, "contract_batch": cb, "add": add, "scale": scale, "fill": fill,
            "exp": exp, "rsum": red, "gather": gat, "scatter_add": sca, "update": upd,
            "loop": loop}


def _last(ins, slot):
    """Highest word address slot ``slot`` of ``ins`` touches."""
    return int(max(addr.max() for sl, _, addr, _ in _operands(ins) if sl == slot))


def illegal_variants(sizes, special=True, max_split=None):
    """Every illegal field of every slot of every instruction class, as programs.

    Each case is ``(name, words)``: a flat program (a short legal prefix, the bad
    instruction, a legal suffix, END); the expected code and pc are the interpreter's (the
    caller runs it). Cases: per used slot an
    unknown store id, a base past the store (``ERR_C/A/B_RANGE``, the second source in slot 2
    included, for CONTRACT, add, gather/scatter_add's index list), a batch stride where the
    class has no batch; per unused slot a store id, a step select and each view word; flags,
    reserved bits, an immediate on a non-immediate op, zero dims/counts/table rows, reduce's
    and the index list's column stride, UPDATE's strides and reserved modes; LOOP fields,
    zero count, nesting, stray ENDLOOP, END inside a LOOP, missing END; illegal opcodes;
    a CONTRACT batch reaching past its store (the batch stride counts); a split past the ISA's
    256 and, with ``max_split``, one past the engine's lane groups (``ERR_DIM``: the caller's
    interpreter must be given the same ``max_split``)."""
    base = _base_instrs(sizes)
    pre = [Elementwise("fill", 1, 4, View("scratch", 200, 4, 1), imm=0x3F800000)]
    post = [Update(View("param", 200), View("grad", 200), 3, 0x3C23D70A)]
    cases = []

    def prog(bad_words):
        return encode_program(pre) + list(bad_words) + encode_program(post + [End()])

    def add(name, words):
        cases.append((name, prog(words)))

    def mutate(ins, fn):
        w = list(encode(ins))
        fn(w)
        return w

    def set_store(slot, sid):
        def f(w):
            w[1] = (w[1] & ~(0xFF << (8 * slot))) | (sid << (8 * slot))
        return f

    def set_word(i, val):
        def f(w):
            w[i] = val
        return f

    def set_step(slot, val):
        def f(w):
            w[0] = (w[0] & ~(3 << (16 + 2 * slot))) | (val << (16 + 2 * slot))
        return f

    def set_flags(val):
        def f(w):
            w[0] = (w[0] & ~0xFF00) | (val << 8)
        return f

    used = {"contract": 3, "contract_batch": 3, "add": 3, "scale": 2, "fill": 1, "exp": 2,
            "rsum": 2, "gather": 3, "scatter_add": 3, "update": 2}
    for name, ins in base.items():
        if name == "loop":
            continue
        if name == "exp" and not special:
            continue
        nused = used[name]
        for slot in range(3):
            if slot < nused:
                add(f"{name}.slot{slot}.store", mutate(ins, set_store(slot, 4 + slot)))
                add(f"{name}.slot{slot}.store255", mutate(ins, set_store(slot, 255)))
                # base past the end of the store this slot names
                sid = (encode(ins)[1] >> (8 * slot)) & 0xFF
                store = STORES[sid]
                add(f"{name}.slot{slot}.range", mutate(ins, set_word(4 + 4 * slot,
                                                                     sizes[store] - 1)))
                add(f"{name}.slot{slot}.range_far", mutate(ins, set_word(4 + 4 * slot,
                                                                         0xFFFFFFF0)))
                # the first illegal base: the last word is exactly one past the store
                span = _last(ins, slot) - ins.views[slot].base
                add(f"{name}.slot{slot}.range_edge", mutate(ins, set_word(4 + 4 * slot,
                                                                          sizes[store] - span)))
                if not name.startswith("contract"):
                    add(f"{name}.slot{slot}.batch_stride", mutate(ins, set_word(7 + 4 * slot, 1)))
                else:
                    add(f"{name}.slot{slot}.batch_range",
                        mutate(base["contract_batch"], set_word(7 + 4 * slot,
                                                                sizes[store] - 1)))
            else:
                add(f"{name}.slot{slot}.unused_store", mutate(ins, set_store(slot, 1)))
                add(f"{name}.slot{slot}.unused_step", mutate(ins, set_step(slot, 1)))
                for f in range(4):
                    add(f"{name}.slot{slot}.unused_word{f}", mutate(ins, set_word(4 + 4 * slot + f,
                                                                                  1)))
        add(f"{name}.reserved_w0", mutate(ins, lambda w: w.__setitem__(0, w[0] | 1 << 25)))
        add(f"{name}.reserved_w1", mutate(ins, lambda w: w.__setitem__(1, w[1] | 1 << 28)))
        add(f"{name}.flags", mutate(ins, set_flags(0x80)))
        add(f"{name}.zero_rows", mutate(ins, lambda w: w.__setitem__(2, w[2] & 0xFFFF0000)))
        if name not in ("update",):
            add(f"{name}.zero_cols", mutate(ins, lambda w: w.__setitem__(2, w[2] & 0xFFFF)))
    # class-specific fields
    c = base["contract"]
    add("contract.zero_k", mutate(c, lambda w: w.__setitem__(3, w[3] & 0xFFFF0000)))
    add("contract.zero_batch", mutate(c, lambda w: w.__setitem__(3, w[3] & 0xFFFF)))
    add("contract.split512", mutate(c, set_flags(9 << 2)))       # log2 split 9: past the ISA
    add("contract.int.flags66", mutate(c, set_flags(0x42)))      # integer mode + undefined bit
    if max_split is not None and max_split < 256:                  # past the engine's groups
        add("contract.split_over_engine", mutate(c, set_flags(max_split.bit_length() << 2)))
    for name in ("add", "fill", "rsum") + (("exp",) if special else ()):
        add(f"{name}.imm_on_non_imm" if name != "fill" else "fill.step_unused",
            mutate(base[name], set_word(3, 1) if name != "fill" else set_step(1, 2)))
    add("rsum.d_col_stride", mutate(base["rsum"], set_word(6, 1)))
    add("rsum.flags2", mutate(base["rsum"], set_flags(2)))
    add("gather.index_col_stride", mutate(base["gather"], set_word(14, 1)))
    add("gather.zero_table", mutate(base["gather"], set_word(3, 0)))
    add("scatter_add.index_col_stride", mutate(base["scatter_add"], set_word(14, 1)))
    u = base["update"]
    for i in (5, 7, 9, 11):
        add(f"update.word{i}", mutate(u, set_word(i, 1)))
    add("update.theta_col_stride", mutate(u, set_word(6, 2)))
    add("update.grad_col_stride", mutate(u, set_word(10, 0)))
    add("update.zero_count", mutate(u, set_word(2, 0)))
    for mode in (1, 7, 15):
        add(f"update.mode{mode}", mutate(u, set_flags(mode)))
    add("update.flags16", mutate(u, set_flags(16)))
    for op in ILLEGAL_OPCODES:
        add(f"opcode_{op:02x}", mutate(base["add"], lambda w, op=op: w.__setitem__(
            0, (w[0] & ~0xFF) | op)))
    if not special:
        add("special_without_unit", encode(base["exp"]))
    # LOOP / structure
    lp = base["loop"]
    body = encode(base["add"])
    for name, fn in (("loop.zero_count", set_word(2, 0)), ("loop.flags", set_flags(1)),
                     ("loop.word3", set_word(3, 1)), ("loop.word8", set_word(8, 1)),
                     ("loop.store", set_store(0, 1)), ("loop.step", set_step(0, 1))):
        add(name, mutate(lp, fn) + body + encode(EndLoop()))
    add("loop.nested", encode(lp) + encode(lp) + body + encode(EndLoop()) + encode(EndLoop()))
    add("loop.stray_endloop", body + encode(EndLoop()))
    for name, ins in (("end", End()), ("barrier", Barrier()), ("endloop", EndLoop())):
        add(f"{name}.word5", mutate(ins, set_word(5, 1)))
        add(f"{name}.flags", mutate(ins, set_flags(1)))
    add("loop.stepped_range", mutate(Loop(3, (sizes["act"] // 2, 0, 0)), lambda w: None)
        + encode(replace(base["add"], step=(1, 0, 0))) + encode(EndLoop()))
    add("loop.stepped_b_range", mutate(Loop(3, (0, 0, sizes["grad"] // 2)), lambda w: None)
        + encode(replace(base["add"], step=(0, 0, 3))) + encode(EndLoop()))
    cases.append(("end_inside_loop", encode_program(pre) + encode(lp) + body + encode(End())))
    cases.append(("no_end", encode_program(pre + post)))
    return cases


#: Error codes the illegal variants must produce between them.
EXPECTED_CODES = {ERR_STORE, ERR_DIM, ERR_A_RANGE, ERR_B_RANGE, ERR_C_RANGE, ERR_OPCODE,
                  ERR_FIELD, ERR_MODE, ERR_LOOP, ERR_NO_END}
