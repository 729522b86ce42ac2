"""Bit-exact golden interpreter of the sequencer's instruction set (``golden/isa.py``).

``run(program, image) -> (image, stats)`` executes a :class:`~ttrain.golden.isa.Program` (or a
list of instructions, or the flat instruction words) on a memory image (store name -> 1-d
``uint32`` array of FP32 words) exactly as the hardware must:

* CONTRACT calls :func:`ttrain.golden.contract.contract` (its accumulation order);
* elementwise ops use ``fp32_add/sub/mul`` (one rounding each, canonical NaN); the special
  functions (``exp recip rsqrt tanh tanh_grad gelu gelu_grad log``) use
  :func:`ttrain.golden.special.fp32_special` (fixed FP32 sequences, bit-exact);
* ``rsum`` adds sequentially from ``-0.0`` (or the old value), ``rmax`` takes ``fp32_max``
  sequentially from the first element (or the old value);
* ``copy``, ``fill`` and ``gather`` move words without arithmetic;
* ``scatter_add`` adds rows in index-list order with ``fp32_add``;
* UPDATE is ``theta = fp32_sub(theta, fp32_mul(lr, g))`` and then ``g = +0.0``.

Instructions run in program order; every read of an instruction sees the writes of all earlier
instructions (the hardware's dependency tracking must preserve this).

**Errors are found before anything is written.** Before the first instruction executes, a check
pass walks the whole dynamic instruction stream (LOOP bodies once per iteration, with their
address increments) and validates program structure (END present, LOOP/ENDLOOP pairing, no
nesting), store ids, dimensions and the address range of every operand, and the golden-only
overlap rules. A program that fails the check executes nothing: the returned image equals the
input. The only error that depends on data, a GATHER/SCATTER index outside its table
(:data:`~ttrain.golden.isa.ERR_INDEX`), is detected when that instruction starts, before it
writes; the instructions before it have executed. ``stats.error`` holds the code (0: none),
``stats.error_pc`` the instruction index, ``stats.message`` the explanation; pass
``raise_errors=True`` to get an :class:`~ttrain.golden.isa.ISAError` instead.

Everything is vectorized over the elements of an instruction; the only Python loops are over
``k`` in a contraction, over columns of a ``rmax``, over repeated indices of a scatter, and over
instructions.
"""

from dataclasses import dataclass, field

import numpy as np

from .isa import (ERR_LOOP, ERR_NO_END, ERR_NONE, End, EndLoop, Instruction, ISAError, Loop,
                  Program, decode_program)

__all__ = ["run", "Stats", "check_program", "dynamic_stream"]



@dataclass
class Stats:
    """What one :func:`run` did.

    Attributes
    ----------
    error : int
        Error code (:data:`ttrain.golden.isa.ERROR_CODES`), 0 when the program completed.
    error_pc : int or None
        Index of the instruction that failed.
    message : str
        Explanation of the error ("" when none).
    instructions : int
        Dynamic instructions executed (END included, LOOP/ENDLOOP counted once per pass).
    by_op : dict
        Mnemonic -> dynamic count.
    macs : int
        Multiply-accumulates of the CONTRACTs.
    elementwise : int
        Elements produced by elementwise, reduce (elements read), gather/scatter ops.
    updated : int
        Parameter words updated.
    """
    error: int = ERR_NONE
    error_pc: int = None
    message: str = ""
    instructions: int = 0
    by_op: dict = field(default_factory=dict)
    macs: int = 0
    elementwise: int = 0
    updated: int = 0

    @property
    def ok(self):
        """True when the program ran to END without error."""
        return self.error == ERR_NONE

    def raise_for_error(self):
        """Raise :class:`ISAError` if the run failed."""
        if self.error:
            raise ISAError(self.error, self.message, self.error_pc)


def _instructions(program):
    if isinstance(program, Program):
        return program.instructions
    if isinstance(program, (list, tuple)) and program and isinstance(program[0], (int,
                                                                                   np.integer)):
        return decode_program(program)
    if isinstance(program, np.ndarray):
        return decode_program(program)
    if isinstance(program, (list, tuple)):
        return list(program)
    raise TypeError(f"program must be a Program, a list of instructions or a flat list of "
                    f"instruction words, not {type(program).__name__}")


def dynamic_stream(instructions):
    """Yield ``(pc, instr)`` in execution order (loop bodies repeated, bases stepped).

    Raises :class:`ISAError` for a structural error (:data:`ERR_LOOP`, :data:`ERR_NO_END`).
    Stops after the first END.
    """
    instrs = list(instructions)
    # structure first, so nothing is yielded for a broken program
    open_loop = None
    end_pc = None
    for pc, ins in enumerate(instrs):
        if isinstance(ins, Loop):
            if open_loop is not None:
                raise ISAError(ERR_LOOP, f"LOOP inside the LOOP at instruction {open_loop}: "
                                         "loops do not nest; unroll the inner one", pc)
            open_loop = pc
        elif isinstance(ins, EndLoop):
            if open_loop is None:
                raise ISAError(ERR_LOOP, "ENDLOOP without a LOOP: remove it or add the LOOP",
                               pc)
            open_loop = None
        elif isinstance(ins, End):
            if open_loop is not None:
                raise ISAError(ERR_LOOP, f"END inside the LOOP at instruction {open_loop}: "
                                         "close the loop with ENDLOOP first", pc)
            end_pc = pc
            break
        elif not isinstance(ins, Instruction):
            raise TypeError(f"instruction {pc} is not an instruction dataclass: {ins!r}")
    if end_pc is None:
        raise ISAError(ERR_NO_END, "the program has no END: append End()",
                       len(instrs))
    pc = 0
    while pc <= end_pc:
        ins = instrs[pc]
        if isinstance(ins, Loop):
            stop = next(q for q in range(pc + 1, end_pc) if isinstance(instrs[q], EndLoop))
            yield pc, ins
            for t in range(ins.count):
                for q in range(pc + 1, stop):
                    yield q, instrs[q].stepped(ins.increments, t)
            yield stop, instrs[stop]
            pc = stop + 1
            continue
        yield pc, ins
        pc += 1


def check_program(program, store_sizes, *, max_dim=None, max_split=None):
    """Run the check pass only; return ``(code, pc, message)`` (code 0 when legal).

    Parameters
    ----------
    program : Program, list of instructions or flat word list
    store_sizes : dict
        Store name -> words.
    max_dim : int or None
        The contraction engine's limit on m, n, k and batch (``2**dim_bits - 1``); a CONTRACT
        above it is error 2. ``None``: only the 16-bit fields limit them.
    max_split : int or None
        The engine's largest CONTRACT ``split`` (its lane groups); above it is error 2.
        ``None``: only the ISA field (up to 256) limits it.
    """
    try:
        instrs = _instructions(program)
        for pc, ins in dynamic_stream(instrs):
            try:
                ins.check(store_sizes, max_dim, max_split)
            except ISAError as e:
                e.pc = pc
                raise
    except ISAError as e:
        return e.code, e.pc, str(e)
    return ERR_NONE, None, ""


_CHECKED = {}


def _check_cached(instrs, sizes, max_dim, max_split):
    """:func:`check_program`, remembered per program and store sizes: a host that runs one
    program per sample repeats the same check pass (its result depends on nothing else)."""
    try:
        key = (tuple(instrs), tuple(sorted(sizes.items())), max_dim, max_split)
        hash(key)
    except TypeError:                               # an unhashable field: check every time
        return check_program(instrs, sizes, max_dim=max_dim, max_split=max_split)
    if key not in _CHECKED:
        if len(_CHECKED) >= 64:
            _CHECKED.pop(next(iter(_CHECKED)))
        _CHECKED[key] = check_program(instrs, sizes, max_dim=max_dim, max_split=max_split)
    return _CHECKED[key]


def run(program, image, *, raise_errors=False, trace=None, max_dim=None, max_split=None):
    """Run a program on a memory image, bit-exactly.

    Parameters
    ----------
    program : Program, list of instructions, or flat list of instruction words
    image : dict
        Store name -> 1-d ``uint32`` array. Not modified.
    raise_errors : bool
        Raise :class:`ISAError` on an error instead of reporting it in ``stats``.
    trace : callable or None
        Called as ``trace(pc, instr, image)`` after every executed instruction (``instr`` with
        its loop-stepped bases; ``image`` is the live working image: copy what you keep). For
        comparing a simulator against the interpreter instruction by instruction.
    max_dim, max_split : int or None
        The engine's dimension and split limits, as in :func:`check_program`.

    Returns
    -------
    (dict, Stats)
        The new image (copies) and what happened. On a check-pass error the image equals the
        input; on a run-time index error it holds the effects of the instructions before it.
    """
    if not isinstance(image, dict):
        raise TypeError(f"image must be a dict store name -> uint32 array, not "
                        f"{type(image).__name__}")
    if trace is not None and not callable(trace):
        raise TypeError(f"trace must be a callable(pc, instr, image) or None, not {trace!r}")
    sizes = {}
    for name, words in image.items():
        words = np.asarray(words)
        if words.ndim != 1 or words.dtype != np.uint32:
            raise TypeError(f"store {name!r} must be a 1-d uint32 array, got {words.dtype} "
                            f"{words.shape}")
        sizes[name] = words.size
    work = {name: np.array(words, dtype=np.uint32, copy=True) for name, words in image.items()}
    stats = Stats()
    try:
        instrs = _instructions(program)
    except ISAError as e:
        stats.error, stats.error_pc, stats.message = e.code, e.pc, str(e)
        if raise_errors:
            raise
        return work, stats
    code, pc, msg = _check_cached(instrs, sizes, max_dim, max_split)
    if code:
        stats.error, stats.error_pc, stats.message = code, pc, msg
        if raise_errors:
            raise ISAError(code, msg, pc)
        return work, stats
    for pc, ins in dynamic_stream(instrs):
        try:
            ins.execute(work, stats)
        except ISAError as e:
            stats.error, stats.error_pc, stats.message = e.code, pc, str(e)
            if raise_errors:
                e.pc = pc
                raise
            return work, stats
        stats.instructions += 1
        key = ins.mnemonic
        stats.by_op[key] = stats.by_op.get(key, 0) + 1
        if trace is not None:
            trace(pc, ins, work)
    return work, stats


