"""Instruction set of the training sequencer: instructions, binary encoding, assembly, programs.

Every instruction is one fixed-width word of :data:`WORDS` = 16 little-endian 32-bit words
(512 bits; word 0 first). The layout is the same for every opcode so the hardware decodes it
with fixed wiring (``docs/isa.md`` has the tables):

=======  ==================================================================================
word     contents
=======  ==================================================================================
0        ``opcode[7:0]``, ``flags[15:8]``, ``step[21:16]`` (2 bits per slot), ``[31:22]`` 0
1        store id of slot 0 ``[7:0]``, slot 1 ``[15:8]``, slot 2 ``[23:16]``, ``[31:24]`` 0
2        ``m`` / rows ``[15:0]``, ``n`` / cols ``[31:16]`` (UPDATE: count, LOOP: count, 32 bits)
3        ``k [15:0]``, ``batch [31:16]`` (CONTRACT) or a 32-bit immediate (FP32 bits / rows)
4..7     slot 0 view: base, row stride, column stride, batch stride (LOOP: increments 0..2)
8..11    slot 1 view (same fields)
12..15   slot 2 view (same fields)
=======  ==================================================================================

Slot 0 is always the operand that is written (C, D, theta); slots 1 and 2 are read (A, B;
UPDATE's gradient region in slot 1 is read *and* cleared). Unused fields must be zero: a
non-zero unused field is a malformed instruction (:data:`ERR_FIELD`).

Instructions are frozen dataclasses that hold store *names*; the encoding uses the fixed store
table :data:`STORE_IDS` (``param`` 0, ``grad`` 1, ``act`` 2, ``scratch`` 3). :func:`encode` /
:func:`decode` convert one instruction, :func:`assemble` / :func:`disassemble` convert between
a readable text form and words, and :class:`Program` bundles instructions, store sizes and a
memory map (named regions).

Errors carry a numeric code (:data:`ERROR_CODES`); the interpreter and the sequencer report the
same codes. :class:`ISAError` (a ``ValueError``) carries ``.code`` and, where known, ``.pc``.
"""

import re
from dataclasses import dataclass, field, replace

import numpy as np

from .contract import (Descriptor, View, ERROR_NONE, ERROR_STORE, ERROR_DIM, ERROR_A_RANGE,
                       ERROR_B_RANGE, ERROR_C_RANGE, check_descriptor, contract, validate,
                       view_addresses)
from .numerics import fp32_add, fp32_eq, fp32_le, fp32_lt, fp32_max, fp32_mul, fp32_sub, fp32_sum
from .special import FUNCTION_CODES, fp32_special
from . import quant as _quant

__all__ = [
    "WORDS", "STORE_IDS", "STORE_NAMES", "OPCODES", "MNEMONICS", "ERROR_CODES", "ISAError",
    "ERR_NONE", "ERR_STORE", "ERR_DIM", "ERR_A_RANGE", "ERR_B_RANGE", "ERR_C_RANGE",
    "ERR_OPCODE", "ERR_FIELD", "ERR_MODE", "ERR_LOOP", "ERR_NO_END", "ERR_INDEX", "ERR_OVERLAP",
    "End", "Barrier", "Loop", "EndLoop", "Contract", "Elementwise", "Reduce", "Gather",
    "Update", "Region", "Program", "encode", "decode", "encode_program", "decode_program",
    "assemble", "disassemble", "f32_bits", "bits_f32", "ELEMENTWISE_OPS", "REDUCE_OPS",
    "GATHER_OPS", "UPDATE_SGD", "MAX_DIM", "MAX_LOOP_DEPTH", "SPECIAL_OPS",
    "SPECIAL_EVERY_LANE",
    "engine_cycles", "best_split", "map_contract", "MUL_LATENCY", "ADD_LATENCY",
    "bank_of", "omega_pass", "omega_passes", "omega_read_schedule",
    "vector_cycles", "VECTOR_FIXED", "REDUCE_SLOTS",
    "OpSpec", "OPS", "SPEC", "SPEC_BY_OPCODE", "UpdateMode", "UPDATE_MODES", "Instruction",
    "Fields", "CLASS_NAMES", "OP_END", "OP_BARRIER", "OP_LOOP", "OP_ENDLOOP", "OP_CONTRACT",
    "OP_UPDATE", "Random", "RANDOM_OPS", "PERTURB_OPS", "ALL_UNITS",
]

#: 32-bit words per instruction (512 bits).
WORDS = 16

#: Fixed store table: name -> id (the hardware's stores).
STORE_IDS = {"param": 0, "grad": 1, "act": 2, "scratch": 3}
#: id -> name.
STORE_NAMES = {v: k for k, v in STORE_IDS.items()}

#: Largest m, n, k, batch, rows and cols (16-bit fields).
MAX_DIM = 0xFFFF
#: LOOPs do not nest.
MAX_LOOP_DEPTH = 1

# --------------------------------------------------------------------------------------------
# error codes (1..5 are the contraction engine's, golden.contract)

ERR_NONE = ERROR_NONE          #: 0 no error
ERR_STORE = ERROR_STORE        #: 1 a slot names a store that does not exist
ERR_DIM = ERROR_DIM            #: 2 a dimension/count is zero (or above its field)
ERR_A_RANGE = ERROR_A_RANGE    #: 3 slot 1 (A, source, gradient) reaches past its store
ERR_B_RANGE = ERROR_B_RANGE    #: 4 slot 2 (B, second source, index list) past its store
ERR_C_RANGE = ERROR_C_RANGE    #: 5 slot 0 (C, destination, theta) past its store
ERR_OPCODE = 6                 #: illegal (unassigned or reserved) opcode
ERR_FIELD = 7                  #: malformed field: reserved bits set, bad step/flag bits
ERR_MODE = 8                   #: UPDATE mode not implemented (reserved for ZO/LRT rules)
ERR_LOOP = 9                   #: LOOP nesting/pairing wrong, or a zero loop count
ERR_NO_END = 10                #: the program has no END (would run off its end)
ERR_INDEX = 11                 #: GATHER/SCATTER index (data) outside the table (run time)
ERR_OVERLAP = 12               #: a write view writes a word twice or partly overlaps a read
                               #: view (golden-only check; the compiler never emits it)

ERROR_CODES = {
    ERR_NONE: "no error",
    ERR_STORE: "unknown store",
    ERR_DIM: "dimension or count zero or too large",
    ERR_A_RANGE: "slot 1 (A/source/gradient) outside its store",
    ERR_B_RANGE: "slot 2 (B/second source/index list) outside its store",
    ERR_C_RANGE: "slot 0 (C/destination/parameters) outside its store",
    ERR_OPCODE: "illegal opcode",
    ERR_FIELD: "malformed instruction field",
    ERR_MODE: "update mode not implemented",
    ERR_LOOP: "bad LOOP/ENDLOOP structure or zero loop count",
    ERR_NO_END: "program has no END",
    ERR_INDEX: "gather/scatter index outside the table",
    ERR_OVERLAP: "write view overlaps a read view or writes a word twice",
}


class ISAError(ValueError):
    """An illegal instruction or program; ``code`` is one of :data:`ERROR_CODES`."""

    def __init__(self, code, message, pc=None):
        self.code = int(code)
        self.pc = pc
        where = f" (instruction {pc})" if pc is not None else ""
        super().__init__(f"error {code} [{ERROR_CODES.get(code, '?')}]{where}: {message}")




def f32_bits(value):
    """Return the 32-bit pattern of ``value`` rounded to binary32 (RNE)."""
    return int(np.array(value, dtype=np.float32).view(np.uint32))


def bits_f32(bits):
    """Return the binary32 value (as a Python float) of a 32-bit pattern."""
    return float(np.array(bits, dtype=np.uint32).view(np.float32))


def _int(name, value, lo=0, hi=0xFFFFFFFF, code=ERR_FIELD):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    value = int(value)
    if not lo <= value <= hi:
        raise ISAError(code, f"{name} = {value} must be in [{lo}, {hi}]; change it to fit "
                             f"its field")
    return value


def _store(name, store):
    if store not in STORE_IDS:
        raise ISAError(ERR_STORE, f"{name} names store {store!r}; use one of "
                                  f"{sorted(STORE_IDS, key=STORE_IDS.get)}")


def _check_view(name, view, batch=False):
    if not isinstance(view, View):
        raise TypeError(f"{name} must be a golden.contract.View, not {view!r}")
    _store(name, view.store)
    for f in ("base", "row_stride", "col_stride", "batch_stride"):
        _int(f"{name}.{f}", getattr(view, f))
    if not batch and view.batch_stride:
        raise ISAError(ERR_FIELD, f"{name} has batch_stride {view.batch_stride}, but this "
                                  "instruction has no batch: set it to 0")


def _steps(steps, n=3, used=3):
    steps = tuple(steps)
    if len(steps) != n:
        raise ValueError(f"step must have {n} entries (one per operand slot), got {steps}")
    for s in steps:
        _int("step", s, 0, 3)
    if any(steps[used:]):
        raise ISAError(ERR_FIELD, f"step {steps} selects an increment for an unused operand "
                                  f"slot; only the first {used} slot(s) are used: set the "
                                  f"others to 0")
    return tuple(int(s) for s in steps)


#: UPDATE mode 0: plain SGD (:data:`UPDATE_MODES`).
UPDATE_SGD = 0


# --------------------------------------------------------------------------------------------
# fields of one instruction word, over Python ints (golden decode) or Amaranth values (the RTL
# decoder): the legality rules below are written once against this interface and evaluated by
# both, so the golden decoder and the hardware decoder cannot disagree.

def _int_bits(value, lo, hi):
    return (value >> lo) & ((1 << (hi - lo)) - 1)


class Fields:
    """The fixed fields of an instruction's :data:`WORDS` words.

    ``words`` are 16 Python ints (golden) or 16 32-bit Amaranth values (RTL); ``bits(x, lo,
    hi)`` extracts bits ``[lo, hi)`` of one of them. Comparisons and ``|`` work the same on
    both, so a rule ``lambda f: (f.flags > 1) | (f.rows == 0)`` is a ``bool`` in golden and a
    1-bit value in the RTL.
    """

    def __init__(self, words, bits=_int_bits):
        self.w = list(words)
        self._bits = bits
        w0, w1 = self.w[0], self.w[1]
        self.op = bits(w0, 0, 8)
        self.flags = bits(w0, 8, 16)
        self.stepw = bits(w0, 16, 22)
        self.step = [bits(w0, 16 + 2 * s, 18 + 2 * s) for s in range(3)]
        self.store = [bits(w1, 8 * s, 8 * s + 8) for s in range(3)]
        self.reserved = (bits(w0, 22, 32) != 0) | (bits(w1, 24, 32) != 0)
        self.rows, self.cols = bits(self.w[2], 0, 16), bits(self.w[2], 16, 32)
        self.lo3, self.hi3 = bits(self.w[3], 0, 16), bits(self.w[3], 16, 32)

    def nz(self, indices):
        """Any of words ``indices`` is non-zero."""
        out = False
        for i in indices:
            out = out | (self.w[i] != 0)
        return out

    def bad_store(self, s):
        """Slot ``s`` names a store id that does not exist."""
        return self.store[s] >= len(STORE_NAMES)

    def batch_nz(self, s):
        """Slot ``s`` has a non-zero batch stride."""
        return self.w[7 + 4 * s] != 0

    def slot_used_badly(self, s):
        """Unused slot ``s`` has a store id, a step or view words."""
        return (self.store[s] != 0) | (self.step[s] != 0) | self.nz(range(4 + 4 * s, 8 + 4 * s))

    def view(self, s):
        """The :class:`View` of slot ``s`` (golden only)."""
        base, rs, cs, bs = self.w[4 + 4 * s: 8 + 4 * s]
        return View(STORE_NAMES[self.store[s]], base, rs, cs, bs)


def _slot_rules(slots, batch=False):
    """Store-id (and, without a batch, batch-stride) rules of the used ``slots``, in order."""
    rules = []
    for s in slots:
        rules.append((ERR_STORE, f"slot {s} names a store id outside {STORE_NAMES}",
                      lambda f, s=s: f.bad_store(s)))
        if not batch:
            rules.append((ERR_FIELD, f"slot {s} batch stride must be zero",
                          lambda f, s=s: f.batch_nz(s)))
    return rules


def _unused_rules(slots):
    return [(ERR_FIELD, f"slot {s} is unused: its store id, step and view words must be zero",
             lambda f, s=s: f.slot_used_badly(s)) for s in slots]


# --------------------------------------------------------------------------------------------
# instructions: each class defines its fields and encoding, its legality rules (with their
# error codes), its golden semantics (check + execute), its assembly text and its parser; the
# opcode table OPS below binds mnemonics and opcodes to them.

def _shift(view, step, inc, t):
    if view is None or not step or not t:
        return view
    return replace(view, base=view.base + t * inc[step - 1])


def _addresses(view, rows, cols):
    return view_addresses(view, 1, rows, cols)[0]


_SLOT_RANGE = (ERR_C_RANGE, ERR_A_RANGE, ERR_B_RANGE)


def _check_range(view, rows, cols, sizes, slot, name):
    if view.store not in sizes:
        raise ISAError(ERR_STORE, f"{name} uses store {view.store!r}, which the image does not "
                                  f"have ({sorted(sizes)}); add it to the image")
    last = view.last_address(1, rows, cols)
    if last >= sizes[view.store]:
        raise ISAError(_SLOT_RANGE[slot], f"{name} view {view} ({rows} x {cols}) reaches word "
                                          f"{last}, past the end of store {view.store!r} "
                                          f"({sizes[view.store]} words)")


def _check_write(dst, drows, dcols, reads, name):
    """Write view must address each word once and not partly overlap a read view."""
    da = _addresses(dst, drows, dcols).ravel()
    if np.unique(da).size != da.size:
        raise ISAError(ERR_OVERLAP, f"{name}: destination {dst} writes some word twice; give "
                                    "it strides that address each element once")
    for view, rows, cols, same_ok in reads:
        if view is None or view.store != dst.store:
            continue
        if same_ok and view == dst and (rows, cols) == (drows, dcols):
            continue
        ra = _addresses(view, rows, cols).ravel()
        if np.intersect1d(ra, da).size:
            raise ISAError(ERR_OVERLAP, f"{name}: destination {dst} overlaps source {view}; "
                                        "use the identical view (in place) or disjoint words")


def _words_f32(words):
    return np.asarray(words, dtype=np.uint32).view(np.float32)


def _f32_words(values):
    return np.asarray(values, dtype=np.float32).view(np.uint32)


class Instruction:
    """Base of the instruction dataclasses: the table-driven behaviour every one shares.

    A subclass sets ``CLASS`` (the decoder's instruction class, :data:`CLASS_NAMES`) and
    defines ``encode_fields``, ``from_fields``, ``rules``, ``text``, ``parse`` and, for those
    that touch data, ``stepped``, ``check`` and ``execute``.
    """
    CLASS = None
    step = (0, 0, 0)

    @property
    def mnemonic(self):
        """The assembly mnemonic (the :data:`OPS` entry's)."""
        return type(self).__name__.lower()

    @property
    def spec(self):
        """The :class:`OpSpec` of this instruction."""
        return SPEC[self.mnemonic]

    @property
    def views(self):
        """The views of slots 0, 1, 2 (None where unused)."""
        return (None, None, None)

    def encode_fields(self, w):
        """Fill words 2..15 of ``w`` (views excepted); return the flags byte."""
        return 0

    @classmethod
    def from_fields(cls, spec, f):
        """Build the instruction from decoded fields ``f`` (rules already passed)."""
        return cls()

    @classmethod
    def rules(cls, spec):
        """Return the ordered legality rules ``[(error code, text, rule(f))]`` of ``spec``:
        the first rule whose ``rule(f)`` is true gives the decode error."""
        return [(ERR_FIELD, "flags, steps and stores must be zero",
                 lambda f: (f.flags != 0) | (f.stepw != 0) | (f.w[1] != 0) | f.nz(range(2, WORDS)))]

    def text(self):
        """Return the assembly text of the instruction."""
        return self.mnemonic

    @classmethod
    def parse(cls, spec, p):
        """Build the instruction from the assembler's fields (``p``: :class:`_Line`)."""
        return cls()

    def stepped(self, inc, t):
        """Return the instruction with its stepped bases advanced for loop iteration ``t``."""
        return self

    def check(self, sizes, max_dim=None, max_split=None):
        """Raise :class:`ISAError` if the (effective) instruction is illegal on ``sizes``."""

    def execute(self, image, stats):
        """Apply the instruction's golden semantics to ``image`` in place; count in ``stats``."""


@dataclass(frozen=True)
class End(Instruction):
    """END: stop; the sequencer raises ``done``."""
    CLASS = "end"


@dataclass(frozen=True)
class Barrier(Instruction):
    """BARRIER: wait until every unit is idle and every earlier write has landed."""
    CLASS = "barrier"


@dataclass(frozen=True)
class EndLoop(Instruction):
    """ENDLOOP: end of the innermost LOOP body."""
    CLASS = "endloop"


@dataclass(frozen=True)
class Loop(Instruction):
    """LOOP: run the instructions up to the matching ENDLOOP ``count`` times.

    In iteration ``t`` (0-based) an operand slot whose ``step`` select is ``s`` (1..3) has its
    base address raised by ``t * increments[s - 1]``. Loops do not nest.

    Parameters
    ----------
    count : int
        Iterations, 1..2**32-1.
    increments : tuple of 3 int
        Word increments selected by the operands' ``step`` fields (non-negative).
    """
    CLASS = "loop"
    count: int
    increments: tuple = (0, 0, 0)

    def __post_init__(self):
        _int("Loop.count", self.count, 1, 0xFFFFFFFF, ERR_LOOP)
        inc = tuple(self.increments)
        if len(inc) != 3:
            raise ValueError(f"Loop.increments needs 3 entries, got {inc}")
        for v in inc:
            _int("Loop.increments", v)
        object.__setattr__(self, "increments", tuple(int(v) for v in inc))

    def encode_fields(self, w):
        w[2] = self.count
        w[4:7] = list(self.increments)
        return 0

    @classmethod
    def from_fields(cls, spec, f):
        return cls(f.w[2], tuple(f.w[4:7]))

    @classmethod
    def rules(cls, spec):
        return [(ERR_FIELD, "flags, steps, stores and words 3, 7..15 must be zero",
                 lambda f: (f.flags != 0) | (f.stepw != 0) | (f.w[1] != 0)
                 | f.nz([3] + list(range(7, WORDS)))),
                (ERR_LOOP, "the loop count is zero", lambda f: f.w[2] == 0)]

    def text(self):
        return f"loop count={self.count} inc={','.join(map(str, self.increments))}"

    @classmethod
    def parse(cls, spec, p):
        count = p.take("count")
        inc = tuple(int(x) for x in p.take("inc", str, "0,0,0").split(","))
        if len(inc) != 3:
            raise ValueError(f"line {p.lineno}: loop inc= takes three increments a,b,c")
        return cls(count, inc)


@dataclass(frozen=True)
class Contract(Instruction):
    """CONTRACT: one contraction-engine descriptor (``golden.contract.Descriptor``).

    Slots: 0 = C (written; read too when ``accumulate``), 1 = A, 2 = B. Flag bit 0 =
    ``accumulate``, bit 1 = integer mode (sign-extended 16-bit operands, wrapping int32
    sums), bits [5:2] = log2 of ``split`` (0..8: the reduction cut into 1..256 parts folded in
    halves; the assembler's ``split=S``), bits [7:6] zero. Golden:
    :func:`ttrain.golden.contract.contract` (its accumulation order).
    """
    CLASS = "contract"
    desc: Descriptor
    step: tuple = (0, 0, 0)

    def __post_init__(self):
        if not isinstance(self.desc, Descriptor):
            raise TypeError(f"Contract.desc must be a Descriptor, not {self.desc!r}")
        d = self.desc
        for name in ("m", "n", "k", "batch"):
            _int(f"Contract.{name}", getattr(d, name), 1, MAX_DIM, ERR_DIM)
        for name in ("c", "a", "b"):
            _check_view(f"Contract.{name}", getattr(d, name), batch=True)
        object.__setattr__(self, "step", _steps(self.step))

    @property
    def views(self):
        return (self.desc.c, self.desc.a, self.desc.b)

    def encode_fields(self, w):
        d = self.desc
        w[2] = d.m | d.n << 16
        w[3] = d.k | d.batch << 16
        return int(d.accumulate) | int(d.integer) << 1 | (d.split.bit_length() - 1) << 2

    @classmethod
    def from_fields(cls, spec, f):
        desc = Descriptor(f.rows, f.cols, f.lo3, f.view(1), f.view(2), f.view(0),
                          accumulate=bool(f.flags & 1), batch=f.hi3, integer=bool(f.flags & 2),
                          split=1 << (f.flags >> 2))
        return cls(desc, tuple(f.step))

    @classmethod
    def rules(cls, spec):
        return [(ERR_FIELD, "flag bits 0 (accumulate), 1 (integer) and [5:2] (log2 split, "
                 "0..8) are defined", lambda f: (f.flags > 63) | ((f.flags >> 2) > 8)),
                (ERR_DIM, "m, n, k and batch must be non-zero",
                 lambda f: (f.rows == 0) | (f.cols == 0) | (f.lo3 == 0) | (f.hi3 == 0)),
                *_slot_rules((1, 2, 0), batch=True)]

    def text(self):
        d, st = self.desc, self.step
        s = (f"contract m={d.m} n={d.n} k={d.k} batch={d.batch} c={_fmt_view(d.c, st[0], 1)} "
             f"a={_fmt_view(d.a, st[1], 1)} b={_fmt_view(d.b, st[2], 1)}")
        s += f" split={d.split}" if d.split > 1 else ""
        return s + (" acc" if d.accumulate else "") + (" int" if d.integer else "")

    @classmethod
    def parse(cls, spec, p):
        m, n, k, batch = p.take("m"), p.take("n"), p.take("k"), p.take("batch", int, 1)
        (c, s0), (a, s1), (b, s2) = p.view("c", 1), p.view("a", 1), p.view("b", 1)
        split = p.take("split", int, 1)
        return cls(Descriptor(m, n, k, a, b, c, "acc" in p.flags, batch, "int" in p.flags,
                              split), (s0, s1, s2))

    def stepped(self, inc, t):
        st, d = self.step, self.desc
        if not any(st) or t == 0:
            return self
        return Contract(replace(d, c=_shift(d.c, st[0], inc, t), a=_shift(d.a, st[1], inc, t),
                                b=_shift(d.b, st[2], inc, t)), st)

    def check(self, sizes, max_dim=None, max_split=None):
        code = check_descriptor(self.desc, sizes, max_dim=max_dim, max_split=max_split)
        try:
            validate(self.desc, sizes, max_dim=max_dim, max_split=max_split)
        except ValueError as e:
            raise ISAError(code or ERR_OVERLAP, str(e)) from None

    def execute(self, image, stats):
        d = self.desc
        out = contract(d, {s: image[s] for s in {d.a.store, d.b.store, d.c.store}})
        image[d.c.store] = out[d.c.store]
        stats.macs += d.macs


@dataclass(frozen=True)
class Elementwise(Instruction):
    """Elementwise op over a ``rows x cols`` strided range (one :data:`OPS` entry per op).

    ``d = semantics(a, b, imm)`` with the op's :attr:`OpSpec.semantics` on the words of the
    ``sources`` source views (``add``/``sub``/``mul``: ``d = fp32_op(a, b)``; ``scale``:
    ``d = fp32_mul(a, imm)``; ``addi``: ``d = fp32_add(a, imm)``; ``copy``: ``d = a`` (the
    words, unchanged); ``fill``: ``d = imm`` (bits unchanged); the special functions of
    :data:`SPECIAL_OPS`: ``d = fp32_special(op, a)``). All reads happen before the writes;
    ``d`` may be the very same view as a source (in place) but must not otherwise overlap one.

    Slots: 0 = d, 1 = a, 2 = b. ``imm`` is the FP32 bit pattern of the scalar.
    """
    CLASS = "elementwise"
    op: str
    rows: int
    cols: int
    d: View
    a: View = None
    b: View = None
    imm: int = 0
    step: tuple = (0, 0, 0)

    def __post_init__(self):
        spec = SPEC.get(self.op)
        if spec is None or spec.kind is not Elementwise:
            raise ValueError(f"Elementwise.op must be one of {sorted(ELEMENTWISE_OPS)}, "
                             f"not {self.op!r}")
        _int("Elementwise.rows", self.rows, 1, MAX_DIM, ERR_DIM)
        _int("Elementwise.cols", self.cols, 1, MAX_DIM, ERR_DIM)
        _check_view("Elementwise.d", self.d)
        nsrc = spec.sources
        for i, name in enumerate(("a", "b")):
            v = getattr(self, name)
            if i < nsrc:
                _check_view(f"Elementwise.{name}", v)
            elif v is not None:
                raise ValueError(f"Elementwise {self.op} takes {nsrc} source view(s); "
                                 f"leave {name} as None")
        _int("Elementwise.imm", self.imm)
        if not spec.imm and self.imm:
            raise ValueError(f"Elementwise {self.op} takes no immediate; leave imm at 0")
        if spec.imm_rule is not None and spec.imm_rule[1](self.imm):
            raise ISAError(ERR_FIELD, f"Elementwise {self.op}: {spec.imm_rule[0]}, not "
                                      f"{self.imm}")
        object.__setattr__(self, "step", _steps(self.step, used=nsrc + 1))

    @property
    def mnemonic(self):
        return self.op

    @property
    def views(self):
        return (self.d, self.a, self.b)

    def encode_fields(self, w):
        w[2] = self.rows | self.cols << 16
        w[3] = self.imm
        return 0

    @classmethod
    def from_fields(cls, spec, f):
        srcs = [f.view(s) for s in range(1, spec.sources + 1)] + [None] * (2 - spec.sources)
        return cls(spec.mnemonic, f.rows, f.cols, f.view(0), srcs[0], srcs[1], f.w[3],
                   tuple(f.step))

    @classmethod
    def rules(cls, spec):
        used = range(spec.sources + 1)
        rules = [(ERR_FIELD, "flags must be zero", lambda f: f.flags != 0),
                 *_unused_rules(range(spec.sources + 1, 3))]
        if not spec.imm:
            rules.append((ERR_FIELD, "word 3 (immediate) must be zero", lambda f: f.w[3] != 0))
        elif spec.imm_rule is not None:
            msg, pred = spec.imm_rule
            rules.append((ERR_FIELD, msg, lambda f: pred(f.w[3])))
        return rules + _slot_rules(used) + [
            (ERR_DIM, "rows and cols must be non-zero", lambda f: (f.rows == 0) | (f.cols == 0))]

    def text(self):
        st = self.step
        s = f"{self.op} rows={self.rows} cols={self.cols} d={_fmt_view(self.d, st[0])}"
        if self.a is not None:
            s += f" a={_fmt_view(self.a, st[1])}"
        if self.b is not None:
            s += f" b={_fmt_view(self.b, st[2])}"
        if self.spec.imm and self.spec.int_imm:
            s += f" imm={_fmt_imm(self.imm)}"
        elif self.spec.imm:
            s += f" imm={_fmt_imm(self.imm)}  # {bits_f32(self.imm)!r}"
        return s

    @classmethod
    def parse(cls, spec, p):
        rows, cols = p.take("rows"), p.take("cols")
        d, s0 = p.view("d")
        a, s1 = p.view("a") if spec.sources >= 1 else (None, 0)
        b, s2 = p.view("b") if spec.sources >= 2 else (None, 0)
        imm = p.imm("imm") if spec.imm else 0
        return cls(spec.mnemonic, rows, cols, d, a, b, imm, (s0, s1, s2))

    def stepped(self, inc, t):
        st = self.step
        if not any(st) or t == 0:
            return self
        return replace(self, d=_shift(self.d, st[0], inc, t), a=_shift(self.a, st[1], inc, t),
                       b=_shift(self.b, st[2], inc, t))

    def check(self, sizes, max_dim=None, max_split=None):
        r, c = self.rows, self.cols
        for slot, v in enumerate(self.views):
            if v is not None:
                _check_range(v, r, c, sizes, slot, self.op)
        _check_write(self.d, r, c, [(self.a, r, c, True), (self.b, r, c, True)], self.op)

    def execute(self, image, stats):
        r, c = self.rows, self.cols
        a, b = (None if v is None else image[v.store][_addresses(v, r, c)]
                for v in (self.a, self.b))
        out = self.spec.semantics(a, b, self.imm)
        image[self.d.store][_addresses(self.d, r, c)] = np.asarray(out, dtype=np.uint32)
        stats.elementwise += r * c


@dataclass(frozen=True)
class Reduce(Instruction):
    """Row reduction: ``d[i] = reduce_j a[i, j]`` for ``i < rows``, ``j < cols``.

    Sequential order ``j = 0, 1, ...``: ``sum`` starts from ``-0.0`` (``d``'s old value with
    ``accumulate``) and adds with ``fp32_add``; ``max`` starts from ``a[i, 0]`` (from ``d``'s
    old value with ``accumulate``) and takes ``fp32_max``. ``d[i]`` is word
    ``d.base + i * d.row_stride`` (``d.col_stride`` must be 0). Mnemonics ``rsum``, ``rmax``.

    Slots: 0 = d, 1 = a. Flag bit 0 = ``accumulate``.
    """
    CLASS = "reduce"
    op: str
    rows: int
    cols: int
    d: View
    a: View
    accumulate: bool = False
    step: tuple = (0, 0, 0)

    def __post_init__(self):
        if self.op not in REDUCE_OPS:
            raise ValueError(f"Reduce.op must be one of {sorted(REDUCE_OPS)}, not {self.op!r}")
        _int("Reduce.rows", self.rows, 1, MAX_DIM, ERR_DIM)
        _int("Reduce.cols", self.cols, 1, MAX_DIM, ERR_DIM)
        _check_view("Reduce.d", self.d)
        if self.d.col_stride:
            raise ISAError(ERR_FIELD, "Reduce.d has one word per row: set its col_stride to 0")
        _check_view("Reduce.a", self.a)
        if not isinstance(self.accumulate, (bool, np.bool_)):
            raise TypeError(f"Reduce.accumulate must be a bool, not {self.accumulate!r}")
        object.__setattr__(self, "accumulate", bool(self.accumulate))
        object.__setattr__(self, "step", _steps(self.step, used=2))

    @property
    def mnemonic(self):
        return "r" + self.op

    @property
    def views(self):
        return (self.d, self.a, None)

    def encode_fields(self, w):
        w[2] = self.rows | self.cols << 16
        return int(self.accumulate)

    @classmethod
    def from_fields(cls, spec, f):
        return cls(spec.mnemonic[1:], f.rows, f.cols, f.view(0), f.view(1), bool(f.flags),
                   tuple(f.step))

    @classmethod
    def rules(cls, spec):
        return [(ERR_FIELD, "only flag bit 0 (accumulate) is defined", lambda f: f.flags > 1),
                *_unused_rules((2,)),
                (ERR_FIELD, "word 3 must be zero", lambda f: f.w[3] != 0),
                *_slot_rules((0, 1)),
                (ERR_DIM, "rows and cols must be non-zero", lambda f: (f.rows == 0) | (f.cols == 0)),
                (ERR_FIELD, "d has one word per row: its column stride (word 6) must be zero",
                 lambda f: f.w[6] != 0)]

    def text(self):
        st = self.step
        s = (f"r{self.op} rows={self.rows} cols={self.cols} d={_fmt_view(self.d, st[0])} "
             f"a={_fmt_view(self.a, st[1])}")
        return s + (" acc" if self.accumulate else "")

    @classmethod
    def parse(cls, spec, p):
        rows, cols = p.take("rows"), p.take("cols")
        (d, s0), (a, s1) = p.view("d"), p.view("a")
        return cls(spec.mnemonic[1:], rows, cols, d, a, "acc" in p.flags, (s0, s1, 0))

    def stepped(self, inc, t):
        st = self.step
        if not any(st) or t == 0:
            return self
        return replace(self, d=_shift(self.d, st[0], inc, t), a=_shift(self.a, st[1], inc, t))

    def check(self, sizes, max_dim=None, max_split=None):
        name = self.mnemonic
        _check_range(self.d, self.rows, 1, sizes, 0, name)
        _check_range(self.a, self.rows, self.cols, sizes, 1, name)
        _check_write(self.d, self.rows, 1, [(self.a, self.rows, self.cols, False)], name)

    def execute(self, image, stats):
        r, c = self.rows, self.cols
        dst = _addresses(self.d, r, 1)[:, 0]
        a = _words_f32(image[self.a.store][_addresses(self.a, r, c)])
        old = _words_f32(image[self.d.store][dst]) if self.accumulate else None
        if self.op == "sum":
            res = fp32_sum(a, axis=1, init=old if self.accumulate else np.float32(-0.0))
        else:
            acc = a[:, 0] if old is None else fp32_max(old, a[:, 0])
            for j in range(1, c):
                acc = fp32_max(acc, a[:, j])
            res = acc
        image[self.d.store][dst] = _f32_words(res).reshape(r)
        stats.elementwise += r * c


@dataclass(frozen=True)
class Gather(Instruction):
    """Indexed row copy (``gather``) or scatter-add of rows (``scatter_add``).

    The index list is ``rows`` unsigned 32-bit words at ``index.base + r * index.row_stride``
    (``index.col_stride`` must be 0). The table has ``table_rows`` rows.

    * ``gather``: ``d[r, c] = table[idx[r], c]`` (slot 0 = d, slot 1 = table).
    * ``scatter_add``: ``table[idx[r], c] = fp32_add(table[idx[r], c], a[r, c])`` for
      ``r = 0, 1, ...`` in order (repeated indices accumulate in that order); slot 0 = table,
      slot 1 = a.

    Slot 2 = the index list. An index ``>= table_rows`` is :data:`ERR_INDEX` (found at run time,
    before this instruction writes anything).
    """
    CLASS = "gather"
    op: str
    rows: int
    cols: int
    table_rows: int
    dst: View
    src: View
    index: View
    step: tuple = (0, 0, 0)

    def __post_init__(self):
        if self.op not in GATHER_OPS:
            raise ValueError(f"Gather.op must be one of {sorted(GATHER_OPS)}, not {self.op!r}")
        _int("Gather.rows", self.rows, 1, MAX_DIM, ERR_DIM)
        _int("Gather.cols", self.cols, 1, MAX_DIM, ERR_DIM)
        _int("Gather.table_rows", self.table_rows, 1, 0xFFFFFFFF, ERR_DIM)
        for name in ("dst", "src", "index"):
            _check_view(f"Gather.{name}", getattr(self, name))
        if self.index.col_stride:
            raise ISAError(ERR_FIELD, "Gather.index is one word per row: set its col_stride "
                                      "to 0")
        object.__setattr__(self, "step", _steps(self.step))

    @property
    def mnemonic(self):
        return self.op

    @property
    def views(self):
        return (self.dst, self.src, self.index)

    def encode_fields(self, w):
        w[2] = self.rows | self.cols << 16
        w[3] = self.table_rows
        return 0

    @classmethod
    def from_fields(cls, spec, f):
        return cls(spec.mnemonic, f.rows, f.cols, f.w[3], f.view(0), f.view(1), f.view(2),
                   tuple(f.step))

    @classmethod
    def rules(cls, spec):
        return [(ERR_FIELD, "flags must be zero", lambda f: f.flags != 0),
                *_slot_rules((0, 1, 2)),
                (ERR_DIM, "rows, cols and table_rows must be non-zero",
                 lambda f: (f.rows == 0) | (f.cols == 0) | (f.w[3] == 0)),
                (ERR_FIELD, "the index list is one word per row: its column stride (word 14) "
                            "must be zero", lambda f: f.w[14] != 0)]

    def text(self):
        st = self.step
        return (f"{self.op} rows={self.rows} cols={self.cols} table_rows={self.table_rows} "
                f"dst={_fmt_view(self.dst, st[0])} src={_fmt_view(self.src, st[1])} "
                f"index={_fmt_view(self.index, st[2])}")

    @classmethod
    def parse(cls, spec, p):
        rows, cols, tr = p.take("rows"), p.take("cols"), p.take("table_rows")
        (d, s0), (s, s1), (ix, s2) = p.view("dst"), p.view("src"), p.view("index")
        return cls(spec.mnemonic, rows, cols, tr, d, s, ix, (s0, s1, s2))

    def stepped(self, inc, t):
        st = self.step
        if not any(st) or t == 0:
            return self
        return replace(self, dst=_shift(self.dst, st[0], inc, t),
                       src=_shift(self.src, st[1], inc, t),
                       index=_shift(self.index, st[2], inc, t))

    def _shapes(self):
        r, c, tr = self.rows, self.cols, self.table_rows
        return ((r, c), (tr, c)) if self.op == "gather" else ((tr, c), (r, c))

    def check(self, sizes, max_dim=None, max_split=None):
        (dshape, sshape), name = self._shapes(), self.op
        _check_range(self.dst, *dshape, sizes, 0, name)
        _check_range(self.src, *sshape, sizes, 1, name)
        _check_range(self.index, self.rows, 1, sizes, 2, name)
        _check_write(self.dst, *dshape, [(self.src, *sshape, False),
                                         (self.index, self.rows, 1, False)], name)

    def execute(self, image, stats):
        r, c, tr = self.rows, self.cols, self.table_rows
        idx = image[self.index.store][_addresses(self.index, r, 1)[:, 0]].astype(np.int64)
        bad = np.nonzero(idx >= tr)[0]
        if bad.size:
            raise ISAError(ERR_INDEX, f"{self.op}: index list entry {bad[0]} is {idx[bad[0]]}, "
                                      f"outside the {tr}-row table; fix the index data")
        cols = np.arange(c, dtype=np.int64)
        if self.op == "gather":
            t = self.src
            src = t.base + idx[:, None] * t.row_stride + cols[None, :] * t.col_stride
            image[self.dst.store][_addresses(self.dst, r, c)] = image[t.store][src]
        else:
            t = self.dst
            tgt = t.base + idx[:, None] * t.row_stride + cols[None, :] * t.col_stride
            vals = _words_f32(image[self.src.store][_addresses(self.src, r, c)])
            # occurrence rank of each row among rows with the same index: round q adds the
            # q-th occurrence of every index, so repeated indices accumulate in list order
            order = np.argsort(idx, kind="stable")
            sorted_idx = idx[order]
            first = np.searchsorted(sorted_idx, sorted_idx, side="left")
            rank = np.empty(r, dtype=np.int64)
            rank[order] = np.arange(r) - first
            store = image[t.store]
            for q in range(int(rank.max()) + 1):
                rows = np.nonzero(rank == q)[0]
                addr = tgt[rows]
                store[addr] = _f32_words(fp32_add(store[addr].view(np.float32), vals[rows]))
        stats.elementwise += r * c


@dataclass(frozen=True)
class Update(Instruction):
    """UPDATE over ``count`` consecutive words (slot 0 = theta region, slot 1 = gradient
    region; only bases are used), by the training rule ``mode`` (:data:`UPDATE_MODES`; the
    flags byte carries it to the update unit):

    * mode 0, ``sgd``: ``theta = fp32_sub(theta, fp32_mul(lr, g))`` then ``g = +0.0``.

    ``lr`` is an FP32 bit pattern (:func:`f32_bits`). Modes not in :data:`UPDATE_MODES`
    (1..15) are reserved for the integer round/clamp and max-norm rules of the ZO/LRT modes and
    are rejected with :data:`ERR_MODE`.
    """
    CLASS = "update"
    theta: View
    grad: View
    count: int
    lr: int
    mode: int = UPDATE_SGD
    step: tuple = (0, 0, 0)

    def __post_init__(self):
        _check_view("Update.theta", self.theta)
        _check_view("Update.grad", self.grad)
        for name in ("theta", "grad"):
            v = getattr(self, name)
            if v.row_stride or v.col_stride != 1:
                raise ISAError(ERR_FIELD, f"Update.{name} is a contiguous region: give it "
                                          f"row_stride 0 and col_stride 1 (View(store, base))")
        _int("Update.count", self.count, 1, 0xFFFFFFFF, ERR_DIM)
        _int("Update.lr", self.lr)
        _int("Update.mode", self.mode, 0, 15)
        if self.mode not in UPDATE_MODES:
            raise ISAError(ERR_MODE, f"Update.mode {self.mode} is reserved (integer round/"
                                     f"clamp and max-norm rules come later); use one of "
                                     f"{dict(sorted(UPDATE_MODES.items()))}")
        object.__setattr__(self, "step", _steps(self.step, used=2))

    @property
    def views(self):
        return (self.theta, self.grad, None)

    def encode_fields(self, w):
        w[2] = self.count
        w[3] = self.lr
        return self.mode

    @classmethod
    def from_fields(cls, spec, f):
        return cls(f.view(0), f.view(1), f.w[2], f.w[3], f.flags, tuple(f.step))

    @classmethod
    def rules(cls, spec):
        return [(ERR_FIELD, "flag bits [7:4] are reserved", lambda f: f.flags > 15),
                *_unused_rules((2,)),
                (ERR_FIELD, "stride words 5, 7, 9, 11 must be zero", lambda f: f.nz([5, 7, 9, 11])),
                (ERR_FIELD, "column strides (words 6 and 10) must be 1",
                 lambda f: (f.w[6] != 1) | (f.w[10] != 1)),
                *_slot_rules((0, 1), batch=True),
                (ERR_DIM, "count is zero", lambda f: f.w[2] == 0),
                (ERR_MODE, f"the mode is not one of {sorted(UPDATE_MODES)}",
                 lambda f: _none_of(f.flags, UPDATE_MODES))]

    def text(self):
        st = self.step
        s = (f"update count={self.count} theta={self.theta.store}@{self.theta.base}"
             f"{'+i%d' % (st[0] - 1) if st[0] else ''} grad={self.grad.store}@"
             f"{self.grad.base}{'+i%d' % (st[1] - 1) if st[1] else ''} lr={_fmt_imm(self.lr)}")
        s += f" mode={self.mode}" if self.mode else ""
        return s + f"  # lr = {bits_f32(self.lr)!r}"

    @classmethod
    def parse(cls, spec, p):
        count = p.take("count")
        (th, s0), (g, s1) = p.view("theta"), p.view("grad")
        lr = p.imm("lr")
        mode = p.take("mode", int, 0)
        for nm, v in (("theta", th), ("grad", g)):
            if (v.row_stride, v.col_stride, v.batch_stride) != (0, 1, 0):
                raise ValueError(f"line {p.lineno}: update {nm} is a contiguous region; "
                                 f"write it as store@base without strides")
        return cls(th, g, count, lr, mode, (s0, s1, 0))

    def stepped(self, inc, t):
        st = self.step
        if not any(st) or t == 0:
            return self
        return replace(self, theta=_shift(self.theta, st[0], inc, t),
                       grad=_shift(self.grad, st[1], inc, t))

    def check(self, sizes, max_dim=None, max_split=None):
        n, th, g = self.count, self.theta, self.grad
        _check_range(th, 1, n, sizes, 0, "update")
        _check_range(g, 1, n, sizes, 1, "update")
        if th.store == g.store and not (th.base + n <= g.base or g.base + n <= th.base):
            raise ISAError(ERR_OVERLAP, f"update: parameter region {th.store}@{th.base} and "
                                        f"gradient region @{g.base} ({n} words) overlap")

    def execute(self, image, stats):
        n = self.count
        th, g = image[self.theta.store], image[self.grad.store]
        ts = slice(self.theta.base, self.theta.base + n)
        gs = slice(self.grad.base, self.grad.base + n)
        th[ts], g[gs] = UPDATE_MODES[self.mode].semantics(th[ts], g[gs], self.lr)
        stats.updated += n


@dataclass(frozen=True)
class Random(Instruction):
    """PRNG ops: regenerate a Rademacher or uniform stream over a ``rows x cols`` range.

    ``u[r, c] = prng.rademacher(seed, imm + r * cols + c)`` (and ``w = prng.draw(...)``) with
    ``seed`` the word at slot 2 (a one-word view, read once) and the element index counted
    densely over the instruction's range from the immediate (the region's offset in its
    stream). Perturbations are regenerated, never stored (``docs/quantized-training.md``):

    * ``perturb8``  ``d = clamp(a + sigma * u, -128, 127)`` (int32 words; ``sigma`` = flags,
      1..255): a weight copy perturbed for one ZO query (the original ``a`` is kept);
    * ``perturb32`` the same, saturating to int32 (biases);
    * ``perturb8n`` / ``perturb32n`` the same with ``-sigma * u``: the second pass of an
      antithetic query (``theta - sigma u``; ``u`` is the same draw);
    * ``rmask``     ``d = 0xFFFFFFFF if draw(seed, index) < a else 0`` (``a`` an unsigned
      threshold word, e.g. ``prng.threshold_of(density)``: ``prng.bernoulli`` as a mask for
      ``bitop``): a sparse-training random element mask, regenerated where it is needed;
    * ``raccum``    ``d = fp32_add(d, fp32_mul(a, i2f(u)))``: the ZO estimate ``g += c u``
      (``a`` usually a broadcast coefficient; ``d`` is read and written);
    * ``runif``     ``d = fp32_add(a, fp32_mul(i2f(w >> 8), 2**-24))``: adds a uniform draw in
      [0, 1) (stochastic rounding before ``f2i`` floor).

    Slots: 0 = d, 1 = a, 2 = the seed word. They need the PRNG unit (``requires="prng"``),
    which :class:`~ttrain.rtl.vector_wide.WideVectorUnit` carries; hardware without it
    answers ``ERR_OPCODE`` (``decode_error(units=...)``).
    """
    CLASS = "random"
    op: str
    rows: int
    cols: int
    d: View
    a: View
    seed: View
    imm: int = 0
    sigma: int = 0
    step: tuple = (0, 0, 0)

    def __post_init__(self):
        spec = SPEC.get(self.op)
        if spec is None or spec.kind is not Random:
            raise ValueError(f"Random.op must be one of {sorted(RANDOM_OPS)}, not {self.op!r}")
        _int("Random.rows", self.rows, 1, MAX_DIM, ERR_DIM)
        _int("Random.cols", self.cols, 1, MAX_DIM, ERR_DIM)
        for name in ("d", "a", "seed"):
            _check_view(f"Random.{name}", getattr(self, name))
        _int("Random.imm", self.imm)
        if self.op.startswith("perturb"):
            _int("Random.sigma", self.sigma, 1, 255, ERR_FIELD)
        elif self.sigma:
            raise ValueError(f"Random {self.op} takes no sigma; leave it at 0")
        object.__setattr__(self, "step", _steps(self.step))

    @property
    def mnemonic(self):
        return self.op

    @property
    def views(self):
        return (self.d, self.a, self.seed)

    def encode_fields(self, w):
        w[2] = self.rows | self.cols << 16
        w[3] = self.imm
        return self.sigma

    @classmethod
    def from_fields(cls, spec, f):
        return cls(spec.mnemonic, f.rows, f.cols, f.view(0), f.view(1), f.view(2), f.w[3],
                   f.flags, tuple(f.step))

    @classmethod
    def rules(cls, spec):
        if spec.mnemonic.startswith("perturb"):
            flag = [(ERR_FIELD, "flags hold sigma, 1..255", lambda f: f.flags == 0)]
        else:
            flag = [(ERR_FIELD, "flags must be zero", lambda f: f.flags != 0)]
        return flag + _slot_rules(range(3)) + [
            (ERR_DIM, "rows and cols must be non-zero", lambda f: (f.rows == 0) | (f.cols == 0))]

    def text(self):
        st = self.step
        s = (f"{self.op} rows={self.rows} cols={self.cols} d={_fmt_view(self.d, st[0])} "
             f"a={_fmt_view(self.a, st[1])} seed={_fmt_view(self.seed, st[2])} "
             f"imm={_fmt_imm(self.imm)}")
        return s + (f" sigma={self.sigma}" if self.sigma else "")

    @classmethod
    def parse(cls, spec, p):
        rows, cols = p.take("rows"), p.take("cols")
        (d, s0), (a, s1), (sd, s2) = p.view("d"), p.view("a"), p.view("seed")
        imm = p.imm("imm")
        sigma = p.take("sigma") if spec.mnemonic.startswith("perturb") else 0
        return cls(spec.mnemonic, rows, cols, d, a, sd, imm, sigma, (s0, s1, s2))

    def stepped(self, inc, t):
        st = self.step
        if not any(st) or t == 0:
            return self
        return replace(self, d=_shift(self.d, st[0], inc, t), a=_shift(self.a, st[1], inc, t),
                       seed=_shift(self.seed, st[2], inc, t))

    def check(self, sizes, max_dim=None, max_split=None):
        r, c = self.rows, self.cols
        _check_range(self.d, r, c, sizes, 0, self.op)
        _check_range(self.a, r, c, sizes, 1, self.op)
        _check_range(self.seed, 1, 1, sizes, 2, self.op)
        _check_write(self.d, r, c, [(self.a, r, c, True), (self.seed, 1, 1, False)], self.op)

    def execute(self, image, stats):
        from . import prng
        r, c = self.rows, self.cols
        seed = int(image[self.seed.store][self.seed.base])
        idx = (np.uint64(self.imm) + np.arange(r * c, dtype=np.uint64)) % np.uint64(1 << 32)
        a = image[self.a.store][_addresses(self.a, r, c)]
        dst = _addresses(self.d, r, c)
        if self.op in PERTURB_OPS:
            u = prng.rademacher(seed, idx).reshape(r, c).astype(np.int64)
            bits, sign = PERTURB_OPS[self.op]
            sigma = sign * self.sigma
            out = _w32(np.clip(_s32(a) + sigma * u, -(1 << (bits - 1)),
                               (1 << (bits - 1)) - 1))
        elif self.op == "rmask":
            keep = prng.draw(seed, idx).reshape(r, c) < np.asarray(a, np.uint32).reshape(r, c)
            out = np.where(keep, np.uint32(0xFFFFFFFF), np.uint32(0))
        elif self.op == "raccum":
            u = prng.rademacher(seed, idx).reshape(r, c)
            old = image[self.d.store][dst]
            out = _f32_words(fp32_add(_words_f32(old),
                                      fp32_mul(_words_f32(a), _quant.i2f(u.astype(np.int64)))))
        else:
            w = (prng.draw(seed, idx) >> np.uint32(8)).reshape(r, c).astype(np.int64)
            out = _f32_words(fp32_add(_words_f32(a),
                                      fp32_mul(_quant.i2f(w), np.float32(2.0 ** -24))))
        image[self.d.store][dst] = np.asarray(out, dtype=np.uint32)
        stats.elementwise += r * c


def _none_of(value, codes):
    """``value`` equals none of ``codes`` (a bool in golden, a 1-bit value in the RTL)."""
    out = True
    for c in codes:
        out = out & (value != c)
    return out


# --------------------------------------------------------------------------------------------
# the opcode table: every instruction of the ISA, defined once

@dataclass(frozen=True)
class OpSpec:
    """One opcode of the ISA.

    Attributes
    ----------
    mnemonic : str
        Assembly name.
    opcode : int
        Word 0 bits [7:0].
    kind : type
        The instruction class (:class:`Elementwise`, :class:`Contract`, ...): fields,
        encoding, legality rules, golden semantics, disassembly and parsing.
    unit : str
        The unit that executes it: ``"control"`` (the sequencer), ``"engine"``, ``"vector"``
        or ``"update"``.
    sources : int
        Source slots an elementwise op reads (0..2).
    imm : bool
        An elementwise op takes word 3 as an immediate.
    accumulate : bool
        Flag bit 0 means ``accumulate`` (the assembler's ``acc``).
    integer : bool
        Flag bit 1 selects the integer mode (the assembler's ``int``).
    imm_rule : tuple or None
        ``(message, predicate)``: the immediate of an elementwise op is illegal
        (``ERR_FIELD``) where ``predicate(word3)`` holds (it must work on ints and Amaranth
        values, like every rule).
    int_imm : bool
        The immediate is an integer (disassembled as hex only), not FP32 bits.
    requires : str or None
        A unit the hardware must have for the opcode to be legal (``"special"``: the
        special-function unit; without it the opcode is ``ERR_OPCODE``).
    semantics : callable or None
        Elementwise ops: ``semantics(a, b, imm) -> d`` on ``uint32`` word arrays (``a``/``b``
        None when not read) and the immediate's bits; the golden definition of the op.
    """
    mnemonic: str
    opcode: int
    kind: type
    unit: str
    sources: int = 0
    imm: bool = False
    accumulate: bool = False
    integer: bool = False
    requires: str = None
    semantics: object = None
    imm_rule: tuple = None
    int_imm: bool = False

    @property
    def rules(self):
        """The ordered legality rules (see :meth:`Instruction.rules`)."""
        return self.kind.rules(self)


@dataclass(frozen=True)
class UpdateMode:
    """One UPDATE training rule: ``semantics(theta, g, lr) -> (theta', g')`` on ``uint32``
    word arrays and the FP32 bits of ``lr``."""
    name: str
    semantics: object


def _sgd(theta, g, lr):
    new = fp32_sub(_words_f32(theta), fp32_mul(np.float32(bits_f32(lr)), _words_f32(g)))
    return _f32_words(new), np.zeros_like(g)


#: UPDATE mode -> rule. Mode 0 is plain SGD; 1..15 are reserved (ERR_MODE).
UPDATE_MODES = {UPDATE_SGD: UpdateMode("sgd", _sgd)}


def _fp2(fn):
    return lambda a, b, imm: _f32_words(fn(_words_f32(a), _words_f32(b)))


def _fp_imm(fn):
    return lambda a, b, imm: _f32_words(fn(_words_f32(a), np.float32(bits_f32(imm))))


def _special(name):
    return lambda a, b, imm: _f32_words(fp32_special(name, _words_f32(a)))


def _elementwise(mnemonic, opcode, sources, semantics, imm=False, requires=None,
                 imm_rule=None, int_imm=False):
    return OpSpec(mnemonic, opcode, Elementwise, "vector", sources=sources, imm=imm,
                  requires=requires, semantics=semantics, imm_rule=imm_rule, int_imm=int_imm)


# Integer elementwise ops (the quantized rules; golden.quant): words are two's complement
# int32 values.
def _s32(words):
    w = np.asarray(words, dtype=np.int64)
    return w - ((w & 0x80000000) << 1)


def _w32(values):
    return (np.asarray(values, dtype=np.int64) & 0xFFFFFFFF).astype(np.uint32)


def _i2f(a, b, imm):
    return _f32_words(_quant.i2f(_s32(a)))


def _f2i(a, b, imm):
    return _w32(_quant.f2i(_words_f32(a), 32, "floor" if imm else "nearest"))


def _iadd(a, b, imm):
    return _w32(np.clip(_s32(a) + _s32(b), -(1 << (imm - 1)), (1 << (imm - 1)) - 1))


def _ext(width):
    """``ext8`` / ``ext16``: field ``imm`` of ``width`` bits of ``a``, sign-extended."""
    mask, sign = (1 << width) - 1, 1 << (width - 1)

    def ext(a, b, imm):
        v = (np.asarray(a, dtype=np.int64) >> (width * int(imm))) & mask
        return _w32((v ^ sign) - sign)
    return ext


def _ins(width):
    """``ins8`` / ``ins16``: ``a`` with field ``imm`` of ``width`` bits replaced by ``b``'s low
    bits."""
    mask = (1 << width) - 1

    def ins(a, b, imm):
        sh = width * int(imm)
        keep = np.asarray(a, dtype=np.int64) & (0xFFFFFFFF ^ (mask << sh))
        return _w32(keep | ((np.asarray(b, dtype=np.int64) & mask) << sh))
    return ins


_ext8, _ins8, _ext16, _ins16 = _ext(8), _ins(8), _ext(16), _ins(16)


#: fcmp predicates (the immediate): d = all ones when ``a <pred> b`` holds, else 0 (IEEE:
#: false when either operand is NaN, ``-0 == +0``).
FCMP_PREDICATES = {"lt": 0, "le": 1, "eq": 2}
_FCMP = (fp32_lt, fp32_le, fp32_eq)
#: bitop functions (the immediate) on the 32-bit words.
BITOP_FUNCTIONS = {"and": 0, "andn": 1, "or": 2, "xor": 3}


def _fcmp(a, b, imm):
    hit = _FCMP[int(imm)](_words_f32(a), _words_f32(b))
    return np.where(hit, np.uint32(0xFFFFFFFF), np.uint32(0)).astype(np.uint32)


def _bitop(a, b, imm):
    a = np.asarray(a, dtype=np.uint32)
    b = np.asarray(b, dtype=np.uint32)
    return (a & b, a & ~b, a | b, a ^ b)[int(imm)].astype(np.uint32)


def _requant(a, b, imm):
    b = np.asarray(b, dtype=np.int64)
    m, shift = b & 0x7FFF, (b >> 15) & 0x3F
    lo = (imm & 0xFFFF) - ((imm & 0x8000) << 1)
    hi = (imm >> 16) - ((imm & 0x80000000) >> 15)
    q = _quant.round_shift(_s32(a) * m, shift, _quant.REQUANT_ROUNDING)
    return _w32(np.minimum(np.maximum(q, lo), hi))


#: Every opcode, in opcode order within each group. Unassigned opcodes are ``ERR_OPCODE``
#: (0x48..0x7F stay reserved for more special functions).
OPS = (
    OpSpec("end", 0x01, End, "control"),
    OpSpec("barrier", 0x02, Barrier, "control"),
    OpSpec("loop", 0x03, Loop, "control"),
    OpSpec("endloop", 0x04, EndLoop, "control"),
    OpSpec("contract", 0x08, Contract, "engine", accumulate=True, integer=True),
    _elementwise("add", 0x10, 2, _fp2(fp32_add)),
    _elementwise("sub", 0x11, 2, _fp2(fp32_sub)),
    _elementwise("mul", 0x12, 2, _fp2(fp32_mul)),
    _elementwise("scale", 0x13, 1, _fp_imm(fp32_mul), imm=True),
    _elementwise("addi", 0x14, 1, _fp_imm(fp32_add), imm=True),
    _elementwise("copy", 0x15, 1, lambda a, b, imm: a),
    _elementwise("fill", 0x16, 0, lambda a, b, imm: np.uint32(imm), imm=True),
    _elementwise("max", 0x17, 2, _fp2(fp32_max)),          # IEEE maximum: NaN wins, +0 > -0
    # integer ops (int32 words): conversions, saturating add, requantization
    _elementwise("i2f", 0x18, 1, _i2f),                      # int32 -> FP32, nearest even
    _elementwise("f2i", 0x19, 1, _f2i, imm=True, int_imm=True,   # FP32 -> int32, saturating
                 imm_rule=("f2i immediate must be 0 (nearest even) or 1 (floor)",
                           lambda v: v > 1)),
    _elementwise("iadd", 0x1A, 2, _iadd, imm=True, int_imm=True,  # saturate to imm bits
                 imm_rule=("iadd immediate (saturation width) must be in 1..32",
                           lambda v: (v == 0) | (v > 32))),
    # requant: d = clamp(round_half_up(a * m >> shift), lo, hi); b = m[14:0] | shift[20:15]
    # per element (a per-channel row broadcast), imm = lo[15:0] | hi[31:16] (signed)
    _elementwise("requant", 0x1B, 2, _requant, imm=True, int_imm=True),
    # packed int8 storage (four values to a word, byte k = element 4w + k):
    # ext8: d = sign-extended byte imm of a; ins8: d = a with byte imm replaced by b's low byte
    _elementwise("ext8", 0x1C, 1, _ext8, imm=True, int_imm=True,
                 imm_rule=("ext8 immediate (byte) must be in 0..3", lambda v: v > 3)),
    _elementwise("ins8", 0x1D, 2, _ins8, imm=True, int_imm=True,
                 imm_rule=("ins8 immediate (byte) must be in 0..3", lambda v: v > 3)),
    # predicates and masks (data-dependent choices without branches: low-rank training's
    # Jacobi SVD, sort and reductions): fcmp d = all ones if a <pred> b else 0 (imm: 0 lt,
    # 1 le, 2 eq; FP32 compare); bitop d = a & b, a & ~b, a | b, a ^ b (imm 0..3), so
    # select(m, a, b) = (a & m) | (b & ~m) and |a| = a & 0x7FFFFFFF
    _elementwise("fcmp", 0x1E, 2, _fcmp, imm=True, int_imm=True,
                 imm_rule=("fcmp immediate (predicate) must be 0 (lt), 1 (le) or 2 (eq)",
                           lambda v: v > 2)),
    _elementwise("bitop", 0x1F, 2, _bitop, imm=True, int_imm=True,
                 imm_rule=("bitop immediate (function) must be 0 (and), 1 (andn), 2 (or) or "
                           "3 (xor)", lambda v: v > 3)),
    OpSpec("rsum", 0x20, Reduce, "vector", accumulate=True),
    OpSpec("rmax", 0x21, Reduce, "vector", accumulate=True),
    # packed 16-bit storage (two values to a word, half k = element 2w + k; low-rank
    # training's bases): ext16 / ins16 as ext8 / ins8 on halfwords
    _elementwise("ext16", 0x22, 1, _ext16, imm=True, int_imm=True,
                 imm_rule=("ext16 immediate (half) must be 0 or 1", lambda v: v > 1)),
    _elementwise("ins16", 0x23, 2, _ins16, imm=True, int_imm=True,
                 imm_rule=("ins16 immediate (half) must be 0 or 1", lambda v: v > 1)),
    OpSpec("gather", 0x28, Gather, "vector"),
    OpSpec("scatter_add", 0x29, Gather, "vector"),
    OpSpec("update", 0x30, Update, "update"),
    # PRNG ops (need the PRNG unit on the instruction path; golden.prng)
    OpSpec("perturb8", 0x38, Random, "vector", requires="prng"),
    OpSpec("perturb32", 0x39, Random, "vector", requires="prng"),
    OpSpec("raccum", 0x3A, Random, "vector", requires="prng"),
    OpSpec("runif", 0x3B, Random, "vector", requires="prng"),
    # the antithetic pass: the same perturbations with -sigma
    OpSpec("perturb8n", 0x3C, Random, "vector", requires="prng"),
    OpSpec("perturb32n", 0x3D, Random, "vector", requires="prng"),
    # a random element mask (sparse training): all ones where draw < the threshold word a
    OpSpec("rmask", 0x3E, Random, "vector", requires="prng"),
    # unary special functions: 0x40 + golden.special's function code (0x47 = log)
    *(_elementwise(name, 0x40 + code, 1, _special(name), requires="special")
      for name, code in sorted(FUNCTION_CODES.items(), key=lambda kv: kv[1])),
)

#: mnemonic -> :class:`OpSpec`.
SPEC = {s.mnemonic: s for s in OPS}
#: opcode -> :class:`OpSpec`.
SPEC_BY_OPCODE = {s.opcode: s for s in OPS}
assert len(SPEC) == len(SPEC_BY_OPCODE) == len(OPS), "mnemonics and opcodes must be unique"

#: mnemonic -> opcode (every instruction).
OPCODES = {s.mnemonic: s.opcode for s in OPS}
#: opcode -> mnemonic
MNEMONICS = {v: k for k, v in OPCODES.items()}
#: Elementwise ops (mnemonic -> opcode).
ELEMENTWISE_OPS = {s.mnemonic: s.opcode for s in OPS if s.kind is Elementwise}
#: Special-function elementwise ops (mnemonic -> opcode), which need the special unit.
SPECIAL_OPS = {s.mnemonic: s.opcode for s in OPS if s.requires == "special"}

#: The special functions that every special-function unit of a vector unit has (the
#: hardware option ``special_full`` < ``special_lanes``: the other units hold only these).
#: GELU and its gradient are 92% of the special-function elements of a paper-size step
#: (the FFN), the rest (the softmax's exp, the LayerNorm's rsqrt, ...) runs on the
#: ``special_full`` units that have every function (docs/wide-engine.md, sixteenth session).
SPECIAL_EVERY_LANE = ("gelu", "gelu_grad")
#: Row reductions (``sum``, ``max`` -> opcode; mnemonics ``rsum``, ``rmax``).
REDUCE_OPS = {s.mnemonic[1:]: s.opcode for s in OPS if s.kind is Reduce}
#: Every optional unit an opcode can require (``OpSpec.requires``).
ALL_UNITS = ("special", "prng")
#: PRNG ops (mnemonic -> opcode), which need the PRNG unit.
RANDOM_OPS = {s.mnemonic: s.opcode for s in OPS if s.kind is Random}
#: The perturbation ops: mnemonic -> (saturation width, sign of sigma u).
PERTURB_OPS = {"perturb8": (8, 1), "perturb32": (32, 1), "perturb8n": (8, -1),
               "perturb32n": (32, -1)}
assert set(PERTURB_OPS) <= set(RANDOM_OPS)
#: Gather/scatter ops (mnemonic -> opcode).
GATHER_OPS = {s.mnemonic: s.opcode for s in OPS if s.kind is Gather}
OP_END, OP_BARRIER, OP_LOOP, OP_ENDLOOP = (OPCODES[k] for k in ("end", "barrier", "loop",
                                                                 "endloop"))
OP_CONTRACT, OP_UPDATE = OPCODES["contract"], OPCODES["update"]
#: Instruction classes, in the order of the RTL decoder's one-hot ``cls``.
CLASS_NAMES = ("end", "barrier", "loop", "endloop", "contract", "elementwise", "reduce",
               "gather", "update", "random")
assert {s.kind.CLASS for s in OPS} == set(CLASS_NAMES)


# --------------------------------------------------------------------------------------------
# encoding (driven by the table)

def _view_words(view):
    if view is None:
        return [0, 0, 0, 0]
    return [view.base, view.row_stride, view.col_stride, view.batch_stride]


def encode(instr):
    """Return the :data:`WORDS` 32-bit words (ints, word 0 first) of one instruction."""
    if not isinstance(instr, Instruction):
        raise TypeError(f"encode takes an instruction dataclass (End, Contract, ...), not "
                        f"{instr!r}")
    w = [0] * WORDS
    flags = instr.encode_fields(w)
    stores = [0, 0, 0]
    for s, v in enumerate(instr.views):
        if v is not None:
            stores[s] = STORE_IDS[v.store]
            w[4 + 4 * s: 8 + 4 * s] = _view_words(v)
    step = instr.step
    w[0] = instr.spec.opcode | flags << 8 | (step[0] | step[1] << 2 | step[2] << 4) << 16
    w[1] = stores[0] | stores[1] << 8 | stores[2] << 16
    return w


def _as_words(words):
    arr = np.asarray(words)
    if arr.dtype.kind not in "iu" or arr.ndim != 1:
        raise TypeError(f"instruction words must be a 1-d sequence of integers, got {arr!r}")
    if arr.size and (arr.min() < 0 or arr.max() > 0xFFFFFFFF):
        raise ValueError("instruction words must be 32-bit unsigned integers")
    return [int(v) for v in arr]


def decode_error(f, *, units=("special", "prng")):
    """Return ``(code, text)`` of the first rule an instruction's fields ``f`` break, or
    ``(ERR_NONE, "")``: reserved bits, an opcode not in :data:`OPS` (or needing a unit not in
    ``units``), then the opcode's own :attr:`OpSpec.rules` in order. Golden decode and the RTL
    decoder both use these rules (the RTL evaluates them on Amaranth values)."""
    if f.reserved:
        return ERR_FIELD, ("bits [31:22] of word 0 and [31:24] of word 1 are reserved: clear "
                           "them")
    spec = SPEC_BY_OPCODE.get(f.op)
    if spec is None or (spec.requires and spec.requires not in units):
        unit = {"special": "special-function unit", "prng": "PRNG unit"}[spec.requires] \
            if spec is not None else ""
        why = (f"needs the {unit}" if spec is not None else
               "is not assigned (0x48..0x7f are reserved for more special functions)")
        return ERR_OPCODE, f"opcode {f.op:#04x} {why}"
    for code, text, rule in spec.rules:
        if rule(f):
            return code, f"{spec.mnemonic}: {text}"
    return ERR_NONE, ""


def decode(words, pc=None, *, units=("special", "prng")):
    """Decode one instruction from :data:`WORDS` words (for hardware with ``units``).

    Raises :class:`ISAError` with the code of the first legality rule the word breaks
    (:func:`decode_error`): :data:`ERR_OPCODE` for an unassigned opcode, :data:`ERR_FIELD` for
    reserved bits or unused fields that are not zero, :data:`ERR_STORE`, :data:`ERR_DIM`,
    :data:`ERR_MODE` or :data:`ERR_LOOP` for bad field values.
    """
    w = _as_words(words)
    if len(w) != WORDS:
        raise ValueError(f"an instruction is {WORDS} words, got {len(w)}")
    f = Fields(w)
    code, text = decode_error(f, units=units)
    if code:
        raise ISAError(code, text, pc)
    spec = SPEC_BY_OPCODE[f.op]
    try:
        return spec.kind.from_fields(spec, f)
    except ISAError as e:
        if pc is not None and e.pc is None:
            e.pc = pc
            e.args = (f"{e.args[0]} (instruction {pc})",)
        raise
    except (TypeError, ValueError) as e:  # a dataclass check on decoded fields
        raise ISAError(ERR_FIELD, str(e), pc) from e


def encode_program(instrs):
    """Return the flat word list of a sequence of instructions."""
    out = []
    for instr in instrs:
        out.extend(encode(instr))
    return out


def decode_program(words, *, units=("special", "prng")):
    """Decode a flat word list (a multiple of :data:`WORDS` long) into instructions."""
    w = _as_words(words)
    if len(w) % WORDS:
        raise ValueError(f"a program is a multiple of {WORDS} words, got {len(w)}")
    return [decode(w[i:i + WORDS], pc=i // WORDS, units=units) for i in range(0, len(w), WORDS)]


# --------------------------------------------------------------------------------------------
# assembly (driven by the table)

def _fmt_view(v, step, batch=False):
    s = f"{v.store}@{v.base}:{v.row_stride},{v.col_stride}"
    if batch:
        s += f",{v.batch_stride}"
    if step:
        s += f"+i{step - 1}"
    return s


def _fmt_imm(bits):
    return f"{bits:#010x}"



_VIEW_RE = re.compile(r"^(\w+)@(\d+)(?::(\d+),(\d+)(?:,(\d+))?)?(?:\+i([0-2]))?$")


def _parse_view(text, lineno, batch=False):
    m = _VIEW_RE.match(text)
    if not m:
        raise ValueError(f"line {lineno}: cannot parse view {text!r}; write "
                         f"store@base:row_stride,col_stride{',batch_stride' if batch else ''}"
                         f"[+i0|+i1|+i2]")
    store, base, rs, cs, bs, step = m.groups()
    if store not in STORE_IDS:
        raise ISAError(ERR_STORE, f"line {lineno}: unknown store {store!r}; use one of "
                                  f"{sorted(STORE_IDS)}")
    view = View(store, int(base), int(rs or 0), int(cs if cs is not None else 1), int(bs or 0))
    return view, (int(step) + 1 if step is not None else 0)


def _parse_imm(text, lineno):
    t = text.strip()
    try:
        if t.lower().startswith("0x"):
            return int(t, 16)
        return f32_bits(float(t))
    except ValueError:
        raise ValueError(f"line {lineno}: immediate {text!r} is neither 0x<hex bits> nor a "
                         f"float literal") from None



def disassemble(words, *, units=ALL_UNITS):
    """Return the assembly text (one instruction per line) of a flat word list.

    Raises :class:`ISAError` if any instruction is malformed (every optional unit's opcodes
    are known by default: the text of a word does not depend on the hardware).
    """
    return "\n".join(i.text() for i in decode_program(words, units=units)) + "\n"


class _Line:
    """The fields of one assembly line, taken by an instruction class's ``parse``."""

    def __init__(self, lineno, mnem, fields, flags):
        self.lineno, self.mnem, self.fields, self.flags = lineno, mnem, fields, flags

    def take(self, key, conv=int, default=None):
        if key not in self.fields:
            if default is not None:
                return default
            raise ValueError(f"line {self.lineno}: {self.mnem} needs field {key}=")
        v = self.fields.pop(key)
        try:
            return conv(v)
        except ValueError:
            raise ValueError(f"line {self.lineno}: bad value {v!r} for {key}") from None

    def view(self, key, batch=False):
        if key not in self.fields:
            raise ValueError(f"line {self.lineno}: {self.mnem} needs field {key}=")
        return _parse_view(self.fields.pop(key), self.lineno, batch)

    def imm(self, key):
        if key not in self.fields:
            raise ValueError(f"line {self.lineno}: {self.mnem} needs {key}=")
        return _parse_imm(self.fields.pop(key), self.lineno)


def assemble(text):
    """Assemble text (see ``docs/isa.md``) into a flat list of 32-bit words.

    One instruction per line: a mnemonic followed by ``key=value`` fields and optional flags
    (``acc``); ``#`` starts a comment; blank lines are ignored. Views are written
    ``store@base:row_stride,col_stride[,batch_stride][+iN]`` (``+iN``: the base steps by the
    enclosing LOOP's increment N). Immediates are ``0x`` bit patterns or float literals
    (rounded to binary32).
    """
    if not isinstance(text, str):
        raise TypeError(f"assemble takes the program text as a str, not {type(text).__name__}")
    words = []
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        mnem, fields, flags = parts[0].lower(), {}, set()
        for p in parts[1:]:
            if "=" in p:
                k, v = p.split("=", 1)
                if k in fields:
                    raise ValueError(f"line {lineno}: field {k!r} given twice")
                fields[k] = v
            else:
                flags.add(p)
        spec = SPEC.get(mnem)
        if spec is None:
            raise ISAError(ERR_OPCODE, f"line {lineno}: unknown mnemonic {mnem!r}; use one of "
                                       f"{sorted(OPCODES)}")
        allowed_flags = ({"acc"} if spec.accumulate else set()) | ({"int"} if spec.integer
                                                                   else set())
        if flags - allowed_flags:
            raise ValueError(f"line {lineno}: unexpected word(s) {sorted(flags - allowed_flags)}"
                             f" for {mnem}")
        line_fields = _Line(lineno, mnem, fields, flags)
        instr = spec.kind.parse(spec, line_fields)
        if fields:
            raise ValueError(f"line {lineno}: unknown field(s) {sorted(fields)} for {mnem}")
        words.extend(encode(instr))
    return words


# --------------------------------------------------------------------------------------------
# programs

@dataclass(frozen=True)
class Region:
    """A named memory region: ``size`` words at ``base`` of ``store`` (with a logical shape)."""
    store: str
    base: int
    size: int
    shape: tuple = ()
    row_stride: int = 0

    def __post_init__(self):
        _store("Region.store", self.store)
        _int("Region.base", self.base)
        _int("Region.size", self.size, 1)


#: FP32 multiplier and adder latencies of the engine's units (``rtl/fp32.py``), the cycle
#: model's defaults.
MUL_LATENCY = 6
ADD_LATENCY = 6


def bank_of(addrs, banks, skew=False):
    """The bank of each word address: ``a % banks``; with ``skew`` (``True``, the built
    engine's rows skewed by one bank each) ``(a + a // banks) % banks``; with ``skew = "xor"``
    (a design study, not built) ``(a ^ (a >> log2 banks)) % banks``."""
    addrs = np.asarray(addrs, dtype=np.int64)
    if skew == "xor":
        return (addrs ^ (addrs >> (int(banks).bit_length() - 1))) % banks
    return (addrs + (addrs // banks if skew else 0)) % banks


def omega_pass(sources, dests, ports):
    """One pass of messages ``sources[i] -> dests[i]`` through a ``ports``-port Omega network
    (``log2 ports`` stages, each a perfect shuffle and a column of 2x2 switches set by the
    destination's bits, most significant first; ``rtl/omega.py``): the messages advance stage
    by stage, a switch output wanted by both inputs goes to the upper one (the even position)
    and the other is dropped (the links it won before stay used). Returns the mask of the
    messages delivered; at least one is, when any was sent."""
    n = int(ports).bit_length() - 1
    if ports < 2 or ports != 1 << n:
        raise ValueError(f"omega: ports must be a power of two >= 2, not {ports}")
    x = np.array(sources, dtype=np.int64)
    d = np.asarray(dests, dtype=np.int64)
    if x.size and (x.min() < 0 or d.min() < 0 or x.max() >= ports or d.max() >= ports):
        raise ValueError(f"omega: a source or destination is outside 0..{ports - 1}")
    if np.unique(x).size != x.size:
        raise ValueError("omega: two messages from one source")
    alive = np.ones(x.size, dtype=bool)
    for i in range(n):
        x = ((x << 1) | (x >> (n - 1))) & (ports - 1)                     # perfect shuffle
        upper = x & 1                                                     # 0: the upper input
        x = (x & ~1) | ((d >> (n - 1 - i)) & 1)                           # the switch
        key = np.where(alive, x, ports + np.arange(x.size))
        order = np.lexsort((upper, key))
        lost = np.zeros(x.size, dtype=bool)
        lost[order[1:]] = key[order][1:] == key[order][:-1]
        alive &= ~lost
    return alive


def omega_passes(sources, dests, ports):
    """Passes a set of messages needs through the Omega network of :func:`omega_pass`: each
    pass sends the messages not yet delivered (a bank wanted twice costs a pass per word).
    Lawrie (1975): a vector of any odd stride over ``ports`` interleaved banks, or any cyclic
    shift, passes in one."""
    src = np.asarray(sources, dtype=np.int64)
    dst = np.asarray(dests, dtype=np.int64)
    waiting = np.ones(src.size, dtype=bool)
    passes = 0
    while waiting.any():
        passes += 1
        idx = np.nonzero(waiting)[0]
        waiting[idx[omega_pass(src[idx], dst[idx], ports)]] = False
    if not src.size:
        omega_pass(src, dst, ports)                  # the argument checks
    return passes


def omega_round_trip(ports, register_every=2, bank_latency=2):
    """Cycles from a lane's request into an Omega read port of ``ports`` ports to its word
    back: the input register, the request network, the bank, the return network (each
    network ``ceil(log2(ports) / register_every)`` register stages; rtl/omega.py
    ``round_trip``)."""
    stages = -(-(int(ports).bit_length() - 1) // register_every)
    return 1 + 2 * stages + bank_latency


def omega_fill(ports, register_every=2):
    """Cycles the Omega route adds to a descriptor's fill and drain for a one-pass first
    fetch: the input registers and the register stages of the first fetch's two networks and
    of the last C write's two (``2 + 4 x stages``) less 3 cycles the engine's pipeline hides
    (calibrated on the 8-lane engine, rtl/engine.py ``route="omega"``: -2 to +3 cycles per
    descriptor off it; docs/wide-engine.md, ninth session). A first fetch of ``p`` passes adds ``(p - 1)`` round trips
    more (:func:`engine_cycles`)."""
    stages = -(-(int(ports).bit_length() - 1) // register_every)
    return max(0, 4 * stages - 1)


def omega_read_schedule(passes, round_trip, *, ready=None, tickets=None):
    """The cycle-exact schedule of vector reads (or writes) through an Omega port
    (``rtl/omega.py: OmegaReadPort / OmegaWritePort``) with every bank granted: ``passes[v]``
    is vector ``v``'s :func:`omega_passes` (0: no lane masked in), the vectors offered back to
    back from cycle 0, ``ready(t)`` (default always) whether the consumer takes a vector in
    cycle ``t``, ``tickets`` (default ``2 x round_trip``) how many vectors may be accepted and
    not yet out.

    ``round_trip`` slots take turns, slot ``t % round_trip`` in cycle ``t``. A pass returns
    ``round_trip`` cycles after it was sent, in its slot's next turn, which sends the next
    pass if one is needed; in the turn its last pass returns the vector is complete (from the
    next cycle) and its slot free. A free slot accepts the next vector in its turn if fewer
    than ``tickets`` vectors (counted at the cycle's start) are accepted and not out, and
    sends its first pass (a vector with no pass takes no slot and is complete from the next
    cycle). Vectors leave in the order accepted, one a cycle, once complete and the consumer
    ready. So completed vectors wait for their turn to leave in their tickets, not in the
    slots, and the network carries a pass in every turn there is a vector to take.
    Returns ``[(accepted, left), ...]`` per vector."""
    R = int(round_trip)
    if R < 1:
        raise ValueError(f"omega_read_schedule: round_trip must be >= 1, not {round_trip}")
    K = 2 * R if tickets is None else int(tickets)
    if K < 1:
        raise ValueError(f"omega_read_schedule: tickets must be >= 1, not {tickets}")
    passes = [int(p) for p in passes]
    if any(p < 0 for p in passes):
        raise ValueError("omega_read_schedule: passes must be >= 0")
    ready = ready or (lambda t: True)
    busy, left = [None] * R, [0] * R
    done_at = [None] * len(passes)
    order, out, nxt, t = [], [None] * len(passes), 0, 0
    while nxt < len(passes) or order:
        s = t % R
        in_use = len(order)
        if busy[s] is not None:
            left[s] -= 1                               # a pass comes home
            if left[s] == 0:
                done_at[busy[s]] = t + 1
                busy[s] = None
        if busy[s] is None and nxt < len(passes) and in_use < K:
            out[nxt] = [t, None]
            order.append(nxt)
            if passes[nxt] == 0:
                done_at[nxt] = t + 1
            else:
                busy[s], left[s] = nxt, passes[nxt]
            nxt += 1
        if order and done_at[order[0]] is not None and done_at[order[0]] <= t and ready(t):
            out[order.pop(0)][1] = t
        t += 1
    return [tuple(o) for o in out]


def _vector_cycles(addrs, active, width, banks, skew=False, route=None, ports=None):
    """Cycles a vector client of the engine needs for one vector: its lanes in beats of
    ``width`` consecutive lanes, empty beats skipped, each beat as many cycles as its most
    requested bank (one per beat without ``banks``; the bank of :func:`bank_of`). With
    ``route = "omega"`` the whole vector goes at once through an Omega network from its lanes
    to the banks (:func:`omega_passes`; ``width`` ignored), a network of ``ports`` ports
    (default: the fewest that hold the lanes and the banks; a port wider than the vector
    routes it differently). Returns ``(cycles, words per bank)``."""
    addrs = np.asarray(addrs, dtype=np.int64)
    active = np.asarray(active, dtype=bool)
    if route == "omega":
        bank = bank_of(addrs[active], banks, skew)
        ports = 1 << max(int(banks) - 1, addrs.size - 1, int(ports or 0) - 1, 0).bit_length()
        return (omega_passes(np.nonzero(active)[0], bank, ports),
                np.bincount(bank, minlength=banks))
    beat = np.arange(addrs.size) // width
    if banks is None:
        return int(np.unique(beat[active]).size), None
    nb = -(-addrs.size // width)
    bank = bank_of(addrs[active], banks, skew)
    per = np.bincount(beat[active] * banks + bank, minlength=nb * banks).reshape(nb, banks)
    return int(per.max(axis=1).sum()), np.bincount(bank, minlength=banks)


def engine_cycles(desc, lanes, slots, *, mul_latency=MUL_LATENCY, add_latency=ADD_LATENCY,
                  fetch_words=None, banks=None, bank_skew=False, row_fetch=None,
                  k_stage=None, row_operands=False, route=None, omega_lanes=None,
                  parts=False):
    """The contraction engine's cycle model of CONTRACT descriptor ``desc``: the machine
    model the compiler maps programs with. ``parts=True`` returns its terms instead, a dict
    of ``body`` (the tiles' issue and fetch cycles), ``fill`` (the fixed fill and drain, the
    networks' registers), ``fold`` (the split's adder latencies) and ``edges`` (what the
    pipeline does not hide of the first fetch and the last tile's writes), which add up to
    the cycles: ``fill + fold + edges`` is what overlapping descriptors could hide.

    Without ``fetch_words`` and ``banks`` (every vector fetched in one beat, no bank
    conflicts): ``batch * ceil(m/h') * ceil(n/(lanes/split)) * ceil(k/split) * hp`` issue
    cycles (``h'`` the balanced tile height of at most ``slots`` rows, ``hp = max(h',
    add_latency + 1)``), the fixed fill and drain (4 check, 5 first fetch, 1 issue register,
    the two latencies, 3 write-back, 2 done) and ``log2(split)`` adder latencies of the fold
    tree.

    With ``fetch_words = W`` (the engine's operand fetchers and C writer move at most ``W``
    words per cycle, in beats of ``W`` consecutive lanes, empty beats skipped) and/or
    ``banks`` (the stores' banks; a bank serves one word per cycle, word ``a`` in bank
    ``a % banks``, or ``(a + a // banks) % banks`` with ``bank_skew``): each vector costs the cycles of its beats, a beat as many as its most
    requested bank, taken from the lane addresses of the first k-step of the first tile. A
    k-step takes ``max(hp, A cycles, B cycles)`` (A and B in one store share its banks), a tile
    at least its C rows' cycles (old C and the results move on separate ports), plus what the
    pipeline cannot hide: the first A and B vectors, the first tile's old C rows
    (``accumulate``) and the last tile's results past its last k-step. The engine
    (``rtl/engine.py: issue_cycles``) and :meth:`Program.for_engine` use this one definition;
    conflicts of other k-steps and tiles can add stalls on top.

    ``row_operands`` (the engine's ``row_operands``, built): the B and old-C fetchers and the
    C writer present a vector whose lanes are consecutive words (column stride 1) as row
    entries, the whole vector in one beat (its most requested bank), and any other vector
    through the ``fetch_words`` ports as before; A always goes through its ports.

    ``row_fetch = F`` (with ``banks``; a design-study machine, **not built**: the wide
    engine's row-path fetchers, docs/wide-engine.md): a vector whose lane groups each read
    consecutive words (unit stride along the group's lanes, or one lane per group) is
    presented whole, one row entry per group, and costs its most requested bank; any other
    vector goes through ``F`` per-lane ports in beats (``fetch_words`` is then ignored).
    With ``k_stage = K`` too, an A or B vector strided along its lanes but unit-stride along
    k is read ``K`` k-steps at a time, each lane's ``K`` consecutive words as one row entry
    into a per-lane buffer: a k-step costs ``1/K`` of that block's most requested bank; and
    a tile's C rows strided along the lanes but unit-stride down the rows (``C^T`` layouts)
    are buffered and written as the tile's columns, ``h`` consecutive words a lane.

    ``route = "omega"`` (with ``banks``; built, rtl/engine.py ``route="omega"``,
    docs/wide-engine.md, eighth and ninth sessions): every vector of the fetchers and the C
    writer goes whole through an Omega port from its lanes to the banks and costs its
    :func:`omega_passes` (``fetch_words`` ignored); ``bank_skew`` may also be ``"xor"``
    (:func:`bank_of`). The fill adds what the networks' registers cost the first fetch and
    the last write (:func:`omega_fill`), and a many-pass first fetch its round trips. The
    8-lane engine runs -2 to +3 cycles per descriptor off this model on clean descriptors; at 32
    lanes random descriptors run 12.5% over it (split 8 and accumulate the most), 5.6% with
    the shared port.

    ``route = "omega-shared"`` (rtl/engine.py ``route="omega-shared"``): the A, B and old-C
    vectors take turns through **one** read port (the C writer keeps its own): a k-step's A
    and B passes add instead of taking the larger, and a tile's old-C rows add to its
    k-steps' fetches (the engine sends old-C rows before further A and B vectors once each
    has one loaded, so a tile's first k-step does not wait for them: accumulating
    descriptors run 2-3 cycles over the non-accumulating ones at 8 lanes, which this model
    does not charge). ``omega_lanes``: the A port's lanes (the engine's ``slots x
    max_split``; default ``slots x split``); the shared port is as wide as A's and B's, and
    a vector's passes are those of the network it actually crosses.
    """
    if row_fetch is not None and banks is None:
        raise ValueError("engine_cycles: row_fetch needs banks")
    if route not in (None, "omega", "omega-shared"):
        raise ValueError(f"engine_cycles: route must be None, 'omega' or 'omega-shared', not "
                         f"{route!r}")
    if route is not None and (banks is None or row_fetch is not None):
        raise ValueError(f"engine_cycles: route={route!r} needs banks and no row_fetch")
    shared = route == "omega-shared"
    if route is not None:                        # the networks the vectors cross
        ports_a = max(omega_lanes or slots * desc.split, banks)
        ports_bc = max(ports_a, lanes) if shared else max(lanes, banks)
        ports_a = ports_bc if shared else ports_a
    mtiles = -(-desc.m // slots)
    h = -(-desc.m // mtiles)
    hp = max(h, add_latency + 1)
    pg = lanes // desc.split
    ntiles = -(-desc.n // pg)
    fill = 4 + 5 + 1 + mul_latency + add_latency + 3 + 2
    if route is not None:
        fill += omega_fill(max(ports_a, ports_bc))
    fold = (desc.split.bit_length() - 1) * add_latency
    if fetch_words is None and banks is None:
        body = desc.batch * mtiles * ntiles * desc.kc * hp
        if parts:
            return {"body": body, "fill": fill, "fold": fold, "edges": 0}
        return body + fill + fold
    a, b, c = desc.a, desc.b, desc.c
    kc = desc.kc
    s = min(desc.split, -(-desc.k // kc))        # lane groups with a part of k (the rest masked)
    w = fetch_words or lanes
    wa = slots * desc.split if fetch_words is None else min(w, slots * desc.split)
    if row_fetch is not None:
        w = wa = None                            # chosen per vector below
    stage = min(k_stage or 1, kc)

    def operand(addrs, active, lane_unit, k_unit, width_, row=False, ports=None):
        """(cycles, words per bank) of one k-step's vector of an operand (``row``: the
        vector's consecutive words go as row entries, ``row_operands``; ``ports``: its Omega
        network's)."""
        if route is not None:
            return _vector_cycles(addrs, active, None, banks, bank_skew, "omega",
                                  ports or ports_bc)
        if row_fetch is None:
            return _vector_cycles(addrs, active, addrs.size if row else width_, banks,
                                  bank_skew)
        if lane_unit:                            # one row entry per lane group
            return _vector_cycles(addrs, active, addrs.size, banks, bank_skew)
        if stage > 1 and k_unit:                 # ``stage`` k-steps along k, per-lane buffers
            seg = (addrs[:, None] + np.arange(stage)[None, :]).ravel()
            cyc, hits = _vector_cycles(seg, np.repeat(active, stage), seg.size, banks,
                                       bank_skew)
            return -(-cyc // stage), -(-hits // stage)
        return _vector_cycles(addrs, active, row_fetch, banks, bank_skew)
    j = np.arange(slots * desc.split)            # A lane j: row t of group g
    g_a, t_a = j // slots, j % slots
    cyc_a, hits_a = operand(a.base + t_a * a.row_stride + g_a * kc * a.col_stride,
                            (t_a < h) & (g_a < s), h == 1 or a.row_stride == 1,
                            a.col_stride == 1, wa, ports=ports_a if route else None)
    p = np.arange(lanes)                         # B lane p: column q of group g
    g_b, q_b = p // pg, p % pg

    def fetch(cols):                             # the A and B vectors of a k-step
        cyc_b, hits_b = operand(b.base + q_b * b.col_stride + g_b * kc * b.row_stride,
                                (q_b < cols) & (g_b < s), cols == 1 or b.col_stride == 1,
                                b.row_stride == 1, w, row_operands and b.col_stride == 1)
        if shared:                               # in turns through one port
            return cyc_a + cyc_b
        both = 0 if banks is None or a.store != b.store else int((hits_a + hits_b).max())
        return max(cyc_a, cyc_b, both)

    def rows(cols):                              # the C rows of a tile: h vectors
        lane_unit = cols == 1 or c.col_stride == 1
        if row_fetch is not None and k_stage and not lane_unit and c.row_stride == 1:
            # the tile's h rows buffered and written as columns: h consecutive words a lane
            seg = (c.base + p * c.col_stride)[:, None] + np.arange(h)[None, :]
            return _vector_cycles(seg.ravel(), np.repeat(p < cols, h), seg.size, banks,
                                  bank_skew)[0]
        return h * operand(c.base + p * c.col_stride, p < cols, lane_unit, False, w,
                           row_operands and c.col_stride == 1)[0]

    def tile(cols):
        if shared and desc.accumulate:           # the old-C rows through the same port
            f = fetch(cols)
            return max(kc * max(hp, f), rows(cols), kc * f + rows(cols))
        return max(kc * max(hp, fetch(cols)), rows(cols))
    last = desc.n - (ntiles - 1) * pg
    first = pg if ntiles > 1 else last
    edges = max(0, fetch(first) - 4) + max(0, rows(last) - hp)     # 4: in the fill
    if route is not None:                        # the first vector's passes each a round trip
        f1 = fetch(first)
        p1 = max(cyc_a, f1 - cyc_a) if shared else f1    # (shared: A and B side by side)
        edges += (p1 - 1) * omega_round_trip(max(ports_a, ports_bc))
    if desc.accumulate:
        edges += max(0, rows(first) - hp)
    body = ((ntiles - 1) * tile(pg) if ntiles > 1 else 0) + tile(last)
    if parts:
        return {"body": desc.batch * mtiles * body, "fill": fill, "fold": fold, "edges": edges}
    return desc.batch * mtiles * body + fill + fold + edges


def best_split(desc, lanes, slots, max_split, **machine):
    """Return ``desc`` with the ``split`` (a power of two up to ``max_split``, ``lanes`` and
    ``k``) of the fewest :func:`engine_cycles`; ties keep the smaller split, and ``desc``
    itself is returned when its own split is the choice. A different split is a different
    accumulation order: the program carries it and golden follows."""
    best, best_cyc = None, None
    s = 1
    while s <= min(max_split, lanes, desc.k):
        cand = desc if s == desc.split else replace(desc, split=s)
        cyc = engine_cycles(cand, lanes, slots, **machine)
        if best is None or cyc < best_cyc:
            best, best_cyc = cand, cyc
        s *= 2
    return best


def map_contract(desc, step, lanes, slots, max_split=1, *, orient=True, fetch_words=None,
                 banks=None, bank_skew=False, row_fetch=None, k_stage=None,
                 row_operands=False, route=None, omega_lanes=None):
    """Map one CONTRACT for an engine: return ``(desc', step')``, the orientation (``desc``
    or its transpose, whose A/B step selects swap) and :func:`best_split` of the fewest
    :func:`engine_cycles`; ties keep ``desc``'s orientation. ``route`` and ``omega_lanes``
    as in :func:`engine_cycles` (an engine's A port is ``slots x max_split`` lanes)."""
    c0, a0, b0 = step
    cands = [(desc, tuple(step))] + ([(desc.transposed(), (c0, b0, a0))] if orient else [])
    best = None
    for d, st in cands:
        machine = {"fetch_words": fetch_words, "banks": banks, "bank_skew": bank_skew}
        if row_fetch is not None:
            machine.update(row_fetch=row_fetch, k_stage=k_stage)
        if row_operands:
            machine["row_operands"] = True
        if route is not None:
            machine["route"] = route
            if omega_lanes is not None:
                machine["omega_lanes"] = omega_lanes
        d = best_split(d, lanes, slots, max_split, **machine)
        cyc = engine_cycles(d, lanes, slots, **machine)
        if best is None or cyc < best[0]:
            best = (cyc, d, st)
    return best[1], best[2]


@dataclass
class Program:
    """Instructions + store sizes + memory map.

    Parameters
    ----------
    instructions : list
        Instruction dataclasses, ending with :class:`End`.
    store_sizes : dict
        Store name -> words (every store of :data:`STORE_IDS` the program uses).
    memory_map : dict
        Region name -> :class:`Region`.
    """
    instructions: list
    store_sizes: dict
    memory_map: dict = field(default_factory=dict)

    def __post_init__(self):
        self.instructions = list(self.instructions)
        for s, n in self.store_sizes.items():
            _store("Program.store_sizes", s)
            _int(f"store_sizes[{s!r}]", n, 1)
        for name, r in self.memory_map.items():
            if not isinstance(r, Region):
                raise TypeError(f"memory_map[{name!r}] must be a Region, not {r!r}")
            if r.store not in self.store_sizes or r.base + r.size > self.store_sizes[r.store]:
                raise ValueError(f"region {name!r} ({r.store}@{r.base}, {r.size} words) does "
                                 f"not fit the store sizes {self.store_sizes}")

    def words(self):
        """Return the flat instruction words."""
        return encode_program(self.instructions)

    def for_engine(self, lanes, slots, max_split=1, *, orient=True, fetch_words=None,
                   banks=None, bank_skew=False, row_operands=False, route=None):
        """Return this program with every CONTRACT mapped for an engine of ``lanes`` lanes and
        ``slots`` slots: the orientation (``C`` or ``C^T``, the same words bit for bit) and the
        ``split`` (up to ``max_split``) of the fewest cycles of
        :func:`engine_cycles`, ties keeping the compiled choice. A
        new split is a new accumulation order, which golden follows (the program carries
        it); everything else is unchanged. ``route``: the engine's operand route
        (``"omega"`` / ``"omega-shared"``, its A port ``slots x max_split`` lanes, as the
        engine builds it; ``None`` the arbiter's)."""
        out = []
        extra = {} if route is None else {"route": route, "omega_lanes": slots * max_split}
        for ins in self.instructions:
            if isinstance(ins, Contract):
                d, st = map_contract(ins.desc, ins.step, lanes, slots, max_split,
                                     orient=orient, fetch_words=fetch_words, banks=banks,
                                     bank_skew=bank_skew, row_operands=row_operands, **extra)
                ins = ins if (d, st) == (ins.desc, ins.step) else Contract(d, st)
            out.append(ins)
        return Program(out, dict(self.store_sizes), dict(self.memory_map))

    def text(self):
        """Return the assembly text."""
        return disassemble(self.words())

    @classmethod
    def from_words(cls, words, store_sizes, memory_map=None):
        """Build a program by decoding words (raises :class:`ISAError` on malformed words)."""
        return cls(decode_program(words), store_sizes, memory_map or {})

    def empty_image(self):
        """Return ``{store: zeros(uint32)}`` sized by :attr:`store_sizes`."""
        return {s: np.zeros(n, dtype=np.uint32) for s, n in self.store_sizes.items()}


#: The vector unit's fixed cycles per instruction (issue, the read round trip, the FP lanes,
#: the last write landing), measured from the chip's instruction trace (docs/wide-engine.md,
#: "The vector unit at 256 lanes"): 18 with the adder stage only, 23 through the multiplier
#: (mul, scale), 24 for UPDATE, 17 for the reductions, 33 for gather/scatter (the index
#: pre-pass); a special-function op adds its function's latency to 12.
VECTOR_FIXED = {"add": 18, "mul": 23, "update": 24, "reduce": 17, "gather": 33, "special": 12}
#: Reduction slots interleaved per column (the adder latency + 2; 2 for ``rmax``): fewer row
#: groups wait.
REDUCE_SLOTS = 8
#: A gather row after the first takes at least this many cycles: the next row's index read
#: (issued as the row starts) must be back before the row after it can start.
GATHER_ROW_MIN = 6
#: A scatter_add row after the first waits about this long for the earlier rows' writes to
#: land (a repeated index, or the unit's 4-row history full): charged to every later row,
#: since the indices are data (TTM digits repeat often within a group).
SCATTER_WAIT = 10


def vector_cycles(ins, width, special_lanes=1, latencies=None, read_streams=1, banks=None,
                  bank_skew=False, special_full=None):
    """Model cycles of one vector or update instruction on a unit of ``width`` lanes (one
    store port: two read beats per element beat for two sources; ``special_lanes`` words per
    cycle into the special-function units, ``special_full`` (default all of them) for the
    functions not in :data:`SPECIAL_EVERY_LANE`; ``latencies``: each special function's
    latency in the unit, needed for special ops) with the engine not competing for the port: the
    compiler weighs the vector unit against the engine with it, as with :func:`engine_cycles`.
    ``read_streams=2``: the unit's store port carries two vectors per read request
    (``HwConfig.vector_reads``, ``WideVectorUnit(reads=2)``), so a two-source elementwise op
    reads both sources of a beat in one cycle, unless they are in one store and their first
    beats meet in a bank (``banks``, ``bank_skew``: then two cycles a beat, as the arbiter
    serves one of them a cycle later; without ``banks`` no beat meets). UPDATE stays two
    cycles a beat (it also writes two beats), scatter_add keeps its two read beats.
    ``(kind, cycles)``; ``kind`` is ``"binary"``, ``"unary"``, ``"special"``,
    ``"reduce"``, ``"gather"`` or ``"update"``. Within a few cycles of the chip's trace for
    most instructions of the tiny and demo steps (``tests/test_seeing_inside.py`` checks the
    tiny step's total)."""
    W = width
    if read_streams not in (1, 2):
        raise ValueError(f"vector_cycles: read_streams must be 1 (as built) or 2, not "
                         f"{read_streams!r}")

    def cdiv(a, b):
        return -(-a // b)
    if isinstance(ins, Update):
        return "update", 2 * cdiv(ins.count, W) + VECTOR_FIXED["update"]
    if isinstance(ins, Reduce):
        wide = ins.a.row_stride == 1 and ins.d.row_stride == 1 and W > 1
        groups = cdiv(ins.rows, W) if wide else ins.rows
        acc = groups if getattr(ins, "accumulate", False) else 0
        slots = 2 if ins.op == "max" else REDUCE_SLOTS     # the comparator's latency is 1
        return "reduce", ins.cols * max(groups, slots) + acc + VECTOR_FIXED["reduce"]
    if isinstance(ins, Gather):
        row_beats = cdiv(ins.cols, W) if ins.src.col_stride == 1 and ins.dst.col_stride == 1 \
            and W > 1 else ins.cols
        pre = cdiv(ins.rows, W) if ins.index.row_stride == 1 else ins.rows
        if ins.op == "gather":
            first = row_beats + 1
            later = max(first, GATHER_ROW_MIN)
        else:
            first = 2 * row_beats + 1
            later = first + SCATTER_WAIT
        return "gather", pre + first + (ins.rows - 1) * later + VECTOR_FIXED["gather"]
    if not isinstance(ins, Elementwise):
        raise TypeError(f"not a vector instruction: {ins!r}")
    views = [v for v in (ins.d, ins.a, ins.b) if v is not None]
    srcs = views[1:]
    n = ins.rows * ins.cols
    if ins.op in SPECIAL_OPS:
        if latencies is None:
            raise ValueError(f"{ins.op} is a special-function op: pass the unit's latencies "
                             f"(testbench.wide_model.vector_cycles reads them off the RTL)")
        lat = latencies[ins.op]
        lanes = special_lanes if special_full is None or ins.op in SPECIAL_EVERY_LANE \
            else special_full
        return "special", cdiv(n, lanes) + lat + VECTOR_FIXED["special"]
    wcol = ins.d.col_stride == 1 and all(v.col_stride in (0, 1) for v in srcs)
    wrow = ins.d.row_stride == 1 and all(v.row_stride in (0, 1) for v in srcs)
    dense = wcol and ins.rows > 1 and all(v.col_stride == 1 and v.row_stride == ins.cols
                                          for v in views)
    if W == 1 or not (wcol or wrow):
        beats = n
    elif dense:
        beats = cdiv(n, W)
    elif wcol:
        beats = ins.rows * cdiv(ins.cols, W)
    else:
        beats = ins.cols * cdiv(ins.rows, W)
    two = ins.b is not None
    fixed = VECTOR_FIXED["mul" if ins.op in ("mul", "scale") else "add"]
    per = 2 if two else 1
    if two and read_streams == 2:
        per = 1
        if banks is not None and ins.a.store == ins.b.store:
            # the first beat's words of each source: W consecutive words along the walk
            # (one when the unit runs a word a beat or the source is broadcast)
            along_cols = wcol and W > 1
            along_rows = not along_cols and wrow and W > 1

            def first_beat(v):
                stride = v.col_stride if along_cols else v.row_stride if along_rows else 1
                k = min(W, n if dense else ins.cols if along_cols else ins.rows) \
                    if (along_cols or along_rows) and stride else 1
                return set(bank_of(v.base + np.arange(k), banks, bank_skew).tolist())
            if first_beat(ins.a) & first_beat(ins.b):
                per = 2
    return ("binary" if two else "unary"), per * beats + fixed
