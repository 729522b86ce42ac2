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
from dataclasses import dataclass, field

import numpy as np

from .contract import (Descriptor, View, ERROR_NONE, ERROR_STORE, ERROR_DIM, ERROR_A_RANGE,
                       ERROR_B_RANGE, ERROR_C_RANGE)
from .special import FUNCTION_CODES

__all__ = [
    "WORDS", "STORE_IDS", "STORE_NAMES", "OPCODES", "MNEMONICS", "ERROR_CODES", "ISAError",
    "ERR_NONE", "ERR_STORE", "ERR_DIM", "ERR_A_RANGE", "ERR_B_RANGE", "ERR_C_RANGE",
    "ERR_OPCODE", "ERR_FIELD", "ERR_MODE", "ERR_LOOP", "ERR_NO_END", "ERR_INDEX", "ERR_OVERLAP",
    "End", "Barrier", "Loop", "EndLoop", "Contract", "Elementwise", "Reduce", "Gather",
    "Update", "Region", "Program", "encode", "decode", "encode_program", "decode_program",
    "assemble", "disassemble", "f32_bits", "bits_f32", "ELEMENTWISE_OPS", "REDUCE_OPS",
    "GATHER_OPS", "UPDATE_SGD", "MAX_DIM", "MAX_LOOP_DEPTH", "SPECIAL_OPS",
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


# --------------------------------------------------------------------------------------------
# opcodes

OP_END, OP_BARRIER, OP_LOOP, OP_ENDLOOP = 0x01, 0x02, 0x03, 0x04
OP_CONTRACT = 0x08
#: Unary special-function elementwise ops (``golden.special``): opcode ``0x40`` + function code
#: (:data:`ttrain.golden.special.FUNCTION_CODES`), i.e. 0x40..0x47 (0x47 = ``log``); 0x48..0x7F
#: stay reserved.
SPECIAL_OPS = {name: 0x40 + code for name, code in FUNCTION_CODES.items()}
ELEMENTWISE_OPS = {"add": 0x10, "sub": 0x11, "mul": 0x12, "scale": 0x13, "addi": 0x14,
                   "copy": 0x15, "fill": 0x16}
ELEMENTWISE_OPS.update(SPECIAL_OPS)
REDUCE_OPS = {"sum": 0x20, "max": 0x21}
GATHER_OPS = {"gather": 0x28, "scatter_add": 0x29}
OP_UPDATE = 0x30
#: UPDATE mode 0: ``theta = fp32_sub(theta, fp32_mul(lr, g)); g = +0``. 1..15 reserved.
UPDATE_SGD = 0

OPCODES = {"end": OP_END, "barrier": OP_BARRIER, "loop": OP_LOOP, "endloop": OP_ENDLOOP,
           "contract": OP_CONTRACT, "update": OP_UPDATE}
OPCODES.update(ELEMENTWISE_OPS)
OPCODES.update({"r" + k: v for k, v in REDUCE_OPS.items()})
OPCODES.update(GATHER_OPS)
#: opcode -> mnemonic
MNEMONICS = {v: k for k, v in OPCODES.items()}

# elementwise ops: which source slots they read and whether they use the immediate
_EW_SOURCES = {"add": 2, "sub": 2, "mul": 2, "scale": 1, "addi": 1, "copy": 1, "fill": 0}
_EW_SOURCES.update({name: 1 for name in SPECIAL_OPS})
_EW_IMM = {"scale", "addi", "fill"}


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


# --------------------------------------------------------------------------------------------
# instructions

@dataclass(frozen=True)
class End:
    """END: stop; the sequencer raises ``done``."""


@dataclass(frozen=True)
class Barrier:
    """BARRIER: wait until every unit is idle and every earlier write has landed."""


@dataclass(frozen=True)
class Loop:
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


@dataclass(frozen=True)
class EndLoop:
    """ENDLOOP: end of the innermost LOOP body."""


@dataclass(frozen=True)
class Contract:
    """CONTRACT: one contraction-engine descriptor (``golden.contract.Descriptor``).

    Slots: 0 = C (written; read too when ``accumulate``), 1 = A, 2 = B.
    """
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


@dataclass(frozen=True)
class Elementwise:
    """Elementwise op over a ``rows x cols`` strided range (see :data:`ELEMENTWISE_OPS`).

    ``add``/``sub``/``mul``: ``d = fp32_op(a, b)``; ``scale``: ``d = fp32_mul(a, imm)``;
    ``addi``: ``d = fp32_add(a, imm)``; ``copy``: ``d = a`` (the words, unchanged);
    ``fill``: ``d = imm`` (bits unchanged); the special functions of :data:`SPECIAL_OPS`
    (``exp recip rsqrt tanh tanh_grad gelu gelu_grad log``): ``d = fp32_special(op, a)``
    (:func:`ttrain.golden.special.fp32_special`, bit-exact fixed FP32 sequences). All reads
    happen before the writes; ``d`` may be the very same view as a source (in place) but must
    not otherwise overlap one.

    Slots: 0 = d, 1 = a, 2 = b. ``imm`` is the FP32 bit pattern of the scalar.
    """
    op: str
    rows: int
    cols: int
    d: View
    a: View = None
    b: View = None
    imm: int = 0
    step: tuple = (0, 0, 0)

    def __post_init__(self):
        if self.op not in ELEMENTWISE_OPS:
            raise ValueError(f"Elementwise.op must be one of {sorted(ELEMENTWISE_OPS)}, "
                             f"not {self.op!r}")
        _int("Elementwise.rows", self.rows, 1, MAX_DIM, ERR_DIM)
        _int("Elementwise.cols", self.cols, 1, MAX_DIM, ERR_DIM)
        _check_view("Elementwise.d", self.d)
        nsrc = _EW_SOURCES[self.op]
        for i, name in enumerate(("a", "b")):
            v = getattr(self, name)
            if i < nsrc:
                _check_view(f"Elementwise.{name}", v)
            elif v is not None:
                raise ValueError(f"Elementwise {self.op} takes {nsrc} source view(s); "
                                 f"leave {name} as None")
        _int("Elementwise.imm", self.imm)
        if self.op not in _EW_IMM and self.imm:
            raise ValueError(f"Elementwise {self.op} takes no immediate; leave imm at 0")
        object.__setattr__(self, "step", _steps(self.step, used=nsrc + 1))

    @property
    def views(self):
        return (self.d, self.a, self.b)


@dataclass(frozen=True)
class Reduce:
    """Row reduction: ``d[i] = reduce_j a[i, j]`` for ``i < rows``, ``j < cols``.

    Sequential order ``j = 0, 1, ...``: ``sum`` starts from ``-0.0`` (``d``'s old value with
    ``accumulate``) and adds with ``fp32_add``; ``max`` starts from ``a[i, 0]`` (from ``d``'s
    old value with ``accumulate``) and takes ``fp32_max``. ``d[i]`` is word
    ``d.base + i * d.row_stride`` (``d.col_stride`` must be 0).

    Slots: 0 = d, 1 = a.
    """
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
    def views(self):
        return (self.d, self.a, None)


@dataclass(frozen=True)
class Gather:
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
    def views(self):
        return (self.dst, self.src, self.index)


@dataclass(frozen=True)
class Update:
    """UPDATE: ``theta = fp32_sub(theta, fp32_mul(lr, g))`` then ``g = +0.0`` over ``count``
    consecutive words (slot 0 = theta region, slot 1 = gradient region; only bases are used).

    ``lr`` is an FP32 bit pattern (:func:`f32_bits`). ``mode`` 0 is plain SGD; modes 1..15 are
    reserved for the integer round/clamp and max-norm rules of the ZO/LRT modes and are rejected
    with :data:`ERR_MODE`.
    """
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
        if self.mode != UPDATE_SGD:
            raise ISAError(ERR_MODE, f"Update.mode {self.mode} is reserved (integer round/"
                                     f"clamp and max-norm rules come later); use mode 0 (SGD)")
        object.__setattr__(self, "step", _steps(self.step, used=2))

    @property
    def views(self):
        return (self.theta, self.grad, None)


# --------------------------------------------------------------------------------------------
# encoding

def _view_words(view, with_batch=True):
    if view is None:
        return [0, 0, 0, 0]
    return [view.base, view.row_stride, view.col_stride, view.batch_stride if with_batch else 0]


def encode(instr):
    """Return the :data:`WORDS` 32-bit words (ints, word 0 first) of one instruction."""
    w = [0] * WORDS
    stores = [0, 0, 0]
    flags = 0
    step = (0, 0, 0)
    views = (None, None, None)
    if isinstance(instr, End):
        op = OP_END
    elif isinstance(instr, Barrier):
        op = OP_BARRIER
    elif isinstance(instr, EndLoop):
        op = OP_ENDLOOP
    elif isinstance(instr, Loop):
        op = OP_LOOP
        w[2] = instr.count
        w[4:7] = list(instr.increments)
    elif isinstance(instr, Contract):
        op = OP_CONTRACT
        d = instr.desc
        flags = int(d.accumulate)
        w[2] = d.m | d.n << 16
        w[3] = d.k | d.batch << 16
        views, step = instr.views, instr.step
    elif isinstance(instr, Elementwise):
        op = ELEMENTWISE_OPS[instr.op]
        w[2] = instr.rows | instr.cols << 16
        w[3] = instr.imm
        views, step = instr.views, instr.step
    elif isinstance(instr, Reduce):
        op = REDUCE_OPS[instr.op]
        flags = int(instr.accumulate)
        w[2] = instr.rows | instr.cols << 16
        views, step = instr.views, instr.step
    elif isinstance(instr, Gather):
        op = GATHER_OPS[instr.op]
        w[2] = instr.rows | instr.cols << 16
        w[3] = instr.table_rows
        views, step = instr.views, instr.step
    elif isinstance(instr, Update):
        op = OP_UPDATE
        flags = instr.mode
        w[2] = instr.count
        w[3] = instr.lr
        views, step = instr.views, instr.step
    else:
        raise TypeError(f"encode takes an instruction dataclass (End, Contract, ...), not "
                        f"{instr!r}")
    for s, v in enumerate(views):
        if v is not None:
            stores[s] = STORE_IDS[v.store]
            w[4 + 4 * s: 8 + 4 * s] = _view_words(v)
    w[0] = op | flags << 8 | (step[0] | step[1] << 2 | step[2] << 4) << 16
    w[1] = stores[0] | stores[1] << 8 | stores[2] << 16
    return w


def _as_words(words):
    arr = np.asarray(words)
    if arr.dtype.kind not in "iu" or arr.ndim != 1:
        raise TypeError(f"instruction words must be a 1-d sequence of integers, got {arr!r}")
    if arr.size and (arr.min() < 0 or arr.max() > 0xFFFFFFFF):
        raise ValueError("instruction words must be 32-bit unsigned integers")
    return [int(v) for v in arr]


def decode(words, pc=None):
    """Decode one instruction from :data:`WORDS` words.

    Raises :class:`ISAError` with :data:`ERR_OPCODE` for an unassigned opcode, :data:`ERR_FIELD`
    for reserved bits or unused fields that are not zero, :data:`ERR_STORE`, :data:`ERR_DIM`,
    :data:`ERR_MODE` or :data:`ERR_LOOP` for bad field values.
    """
    w = _as_words(words)
    if len(w) != WORDS:
        raise ValueError(f"an instruction is {WORDS} words, got {len(w)}")
    op = w[0] & 0xFF
    flags = w[0] >> 8 & 0xFF
    stepw = w[0] >> 16 & 0xFF
    step = (stepw & 3, stepw >> 2 & 3, stepw >> 4 & 3)
    try:
        if w[0] >> 22 or w[1] >> 24:
            raise ISAError(ERR_FIELD, "bits [31:22] of word 0 and [31:24] of word 1 are "
                                      "reserved: clear them")
        if op not in MNEMONICS:
            raise ISAError(ERR_OPCODE, f"opcode {op:#04x} is not assigned (0x48..0x7f are "
                                       f"reserved for more special functions)")
        name = MNEMONICS[op]
        stores = (w[1] & 0xFF, w[1] >> 8 & 0xFF, w[1] >> 16 & 0xFF)

        def need_zero(indices, what):
            if any(w[i] for i in indices):
                raise ISAError(ERR_FIELD, f"{name}: {what} must be zero")

        def view(slot, batch=False):
            sid = stores[slot]
            if sid not in STORE_NAMES:
                raise ISAError(ERR_STORE, f"{name}: slot {slot} names store id {sid}; ids are "
                                          f"{STORE_NAMES}")
            base, rs, cs, bs = w[4 + 4 * slot: 8 + 4 * slot]
            if bs and not batch:
                raise ISAError(ERR_FIELD, f"{name}: slot {slot} batch stride must be zero")
            return View(STORE_NAMES[sid], base, rs, cs, bs)

        def unused_slots(used):
            for s in range(3):
                if s not in used:
                    if stores[s] or step[s]:
                        raise ISAError(ERR_FIELD, f"{name}: slot {s} is unused, its store id "
                                                  f"and step must be zero")
                    need_zero(range(4 + 4 * s, 8 + 4 * s), f"slot {s} view words")

        def dims():
            return w[2] & 0xFFFF, w[2] >> 16

        if op in (OP_END, OP_BARRIER, OP_ENDLOOP):
            if flags or stepw or w[1]:
                raise ISAError(ERR_FIELD, f"{name}: flags, steps and stores must be zero")
            need_zero(range(2, WORDS), "words 2..15")
            return {OP_END: End, OP_BARRIER: Barrier, OP_ENDLOOP: EndLoop}[op]()
        if op == OP_LOOP:
            if flags or stepw or w[1]:
                raise ISAError(ERR_FIELD, "loop: flags, steps and stores must be zero")
            need_zero([3] + list(range(7, WORDS)), "words 3 and 7..15")
            return Loop(w[2], tuple(w[4:7]))
        if op == OP_CONTRACT:
            if flags > 1:
                raise ISAError(ERR_FIELD, "contract: only flag bit 0 (accumulate) is defined")
            m, n = dims()
            k, batch = w[3] & 0xFFFF, w[3] >> 16
            for nm, v in (("m", m), ("n", n), ("k", k), ("batch", batch)):
                if v == 0:
                    raise ISAError(ERR_DIM, f"contract: {nm} is zero")
            desc = Descriptor(m, n, k, view(1, True), view(2, True), view(0, True),
                              accumulate=bool(flags), batch=batch)
            return Contract(desc, step)
        if name in ELEMENTWISE_OPS:
            if flags:
                raise ISAError(ERR_FIELD, f"{name}: flags must be zero")
            nsrc = _EW_SOURCES[name]
            unused_slots(range(nsrc + 1))
            if name not in _EW_IMM and w[3]:
                raise ISAError(ERR_FIELD, f"{name}: word 3 (immediate) must be zero")
            rows, cols = dims()
            srcs = [view(s) for s in range(1, nsrc + 1)] + [None] * (2 - nsrc)
            return Elementwise(name, rows, cols, view(0), srcs[0], srcs[1], w[3], step)
        if op in (0x20, 0x21):
            if flags > 1:
                raise ISAError(ERR_FIELD, f"{name}: only flag bit 0 (accumulate) is defined")
            unused_slots((0, 1))
            need_zero([3], "word 3")
            rows, cols = dims()
            return Reduce(name[1:], rows, cols, view(0), view(1), bool(flags), step)
        if name in GATHER_OPS:
            if flags:
                raise ISAError(ERR_FIELD, f"{name}: flags must be zero")
            rows, cols = dims()
            return Gather(name, rows, cols, w[3], view(0), view(1), view(2), step)
        # UPDATE
        if flags > 15:
            raise ISAError(ERR_FIELD, "update: flag bits [7:4] are reserved")
        unused_slots((0, 1))
        need_zero([5, 7, 9, 11], "update: stride words")
        if w[6] != 1 or w[10] != 1:
            raise ISAError(ERR_FIELD, "update: column strides (words 6 and 10) must be 1")
        return Update(view(0), view(1), w[2], w[3], flags, step)
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


def decode_program(words):
    """Decode a flat word list (a multiple of :data:`WORDS` long) into instructions."""
    w = _as_words(words)
    if len(w) % WORDS:
        raise ValueError(f"a program is a multiple of {WORDS} words, got {len(w)}")
    return [decode(w[i:i + WORDS], pc=i // WORDS) for i in range(0, len(w), WORDS)]


# --------------------------------------------------------------------------------------------
# assembly

def _fmt_view(v, step, batch=False):
    s = f"{v.store}@{v.base}:{v.row_stride},{v.col_stride}"
    if batch:
        s += f",{v.batch_stride}"
    if step:
        s += f"+i{step - 1}"
    return s


def _fmt_imm(bits):
    return f"{bits:#010x}"


def _fmt(instr):
    if isinstance(instr, End):
        return "end"
    if isinstance(instr, Barrier):
        return "barrier"
    if isinstance(instr, EndLoop):
        return "endloop"
    if isinstance(instr, Loop):
        return f"loop count={instr.count} inc={','.join(map(str, instr.increments))}"
    if isinstance(instr, Contract):
        d, st = instr.desc, instr.step
        s = (f"contract m={d.m} n={d.n} k={d.k} batch={d.batch} c={_fmt_view(d.c, st[0], 1)} "
             f"a={_fmt_view(d.a, st[1], 1)} b={_fmt_view(d.b, st[2], 1)}")
        return s + (" acc" if d.accumulate else "")
    if isinstance(instr, Elementwise):
        st = instr.step
        s = f"{instr.op} rows={instr.rows} cols={instr.cols} d={_fmt_view(instr.d, st[0])}"
        if instr.a is not None:
            s += f" a={_fmt_view(instr.a, st[1])}"
        if instr.b is not None:
            s += f" b={_fmt_view(instr.b, st[2])}"
        if instr.op in _EW_IMM:
            s += f" imm={_fmt_imm(instr.imm)}  # {bits_f32(instr.imm)!r}"
        return s
    if isinstance(instr, Reduce):
        st = instr.step
        s = (f"r{instr.op} rows={instr.rows} cols={instr.cols} d={_fmt_view(instr.d, st[0])} "
             f"a={_fmt_view(instr.a, st[1])}")
        return s + (" acc" if instr.accumulate else "")
    if isinstance(instr, Gather):
        st = instr.step
        return (f"{instr.op} rows={instr.rows} cols={instr.cols} table_rows={instr.table_rows} "
                f"dst={_fmt_view(instr.dst, st[0])} src={_fmt_view(instr.src, st[1])} "
                f"index={_fmt_view(instr.index, st[2])}")
    if isinstance(instr, Update):
        st = instr.step
        s = (f"update count={instr.count} theta={instr.theta.store}@{instr.theta.base}"
             f"{'+i%d' % (st[0] - 1) if st[0] else ''} grad={instr.grad.store}@"
             f"{instr.grad.base}{'+i%d' % (st[1] - 1) if st[1] else ''} lr={_fmt_imm(instr.lr)}")
        s += f" mode={instr.mode}" if instr.mode else ""
        return s + f"  # lr = {bits_f32(instr.lr)!r}"
    raise TypeError(f"not an instruction: {instr!r}")


def disassemble(words):
    """Return the assembly text (one instruction per line) of a flat word list.

    Raises :class:`ISAError` if any instruction is malformed.
    """
    return "\n".join(_fmt(i) for i in decode_program(words)) + "\n"


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
        if mnem not in OPCODES:
            raise ISAError(ERR_OPCODE, f"line {lineno}: unknown mnemonic {mnem!r}; use one of "
                                       f"{sorted(OPCODES)}")
        allowed_flags = {"acc"} if mnem in ("contract", "rsum", "rmax") else set()
        if flags - allowed_flags:
            raise ValueError(f"line {lineno}: unexpected word(s) {sorted(flags - allowed_flags)}"
                             f" for {mnem}")

        def take(key, conv=int, default=None):
            if key not in fields:
                if default is not None:
                    return default
                raise ValueError(f"line {lineno}: {mnem} needs field {key}=")
            v = fields.pop(key)
            try:
                return conv(v)
            except ValueError:
                raise ValueError(f"line {lineno}: bad value {v!r} for {key}") from None

        def tview(key, batch=False):
            if key not in fields:
                raise ValueError(f"line {lineno}: {mnem} needs field {key}=")
            return _parse_view(fields.pop(key), lineno, batch)

        if mnem == "end":
            instr = End()
        elif mnem == "barrier":
            instr = Barrier()
        elif mnem == "endloop":
            instr = EndLoop()
        elif mnem == "loop":
            count = take("count")
            inc = tuple(int(x) for x in take("inc", str, "0,0,0").split(","))
            if len(inc) != 3:
                raise ValueError(f"line {lineno}: loop inc= takes three increments a,b,c")
            instr = Loop(count, inc)
        elif mnem == "contract":
            m, n, k, batch = take("m"), take("n"), take("k"), take("batch", int, 1)
            (c, s0), (a, s1), (b, s2) = tview("c", 1), tview("a", 1), tview("b", 1)
            instr = Contract(Descriptor(m, n, k, a, b, c, "acc" in flags, batch), (s0, s1, s2))
        elif mnem in ELEMENTWISE_OPS:
            rows, cols = take("rows"), take("cols")
            d, s0 = tview("d")
            nsrc = _EW_SOURCES[mnem]
            a, s1 = tview("a") if nsrc >= 1 else (None, 0)
            b, s2 = tview("b") if nsrc >= 2 else (None, 0)
            if mnem in _EW_IMM and "imm" not in fields:
                raise ValueError(f"line {lineno}: {mnem} needs imm=")
            imm = _parse_imm(fields.pop("imm"), lineno) if mnem in _EW_IMM else 0
            instr = Elementwise(mnem, rows, cols, d, a, b, imm, (s0, s1, s2))
        elif mnem in ("rsum", "rmax"):
            rows, cols = take("rows"), take("cols")
            (d, s0), (a, s1) = tview("d"), tview("a")
            instr = Reduce(mnem[1:], rows, cols, d, a, "acc" in flags, (s0, s1, 0))
        elif mnem in GATHER_OPS:
            rows, cols, tr = take("rows"), take("cols"), take("table_rows")
            (d, s0), (s, s1), (ix, s2) = tview("dst"), tview("src"), tview("index")
            instr = Gather(mnem, rows, cols, tr, d, s, ix, (s0, s1, s2))
        else:  # update
            count = take("count")
            (th, s0), (g, s1) = tview("theta"), tview("grad")
            lr = _parse_imm(fields.pop("lr"), lineno) if "lr" in fields else None
            if lr is None:
                raise ValueError(f"line {lineno}: update needs lr=")
            mode = take("mode", int, 0)
            for nm, v in (("theta", th), ("grad", g)):
                if (v.row_stride, v.col_stride, v.batch_stride) != (0, 1, 0):
                    raise ValueError(f"line {lineno}: update {nm} is a contiguous region; "
                                     f"write it as store@base without strides")
            instr = Update(th, g, count, lr, mode, (s0, s1, 0))
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
