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

from dataclasses import dataclass, field, replace

import numpy as np

from .contract import check_descriptor, contract, validate, view_addresses
from .isa import (ERR_A_RANGE, ERR_B_RANGE, ERR_C_RANGE, ERR_INDEX, ERR_LOOP,
                  ERR_NO_END, ERR_NONE, ERR_OVERLAP, ERR_STORE, SPECIAL_OPS, Barrier,
                  Contract, Elementwise, End, EndLoop, Gather, ISAError, Loop, Program, Reduce,
                  Update, bits_f32, decode_program)
from .numerics import fp32_add, fp32_max, fp32_mul, fp32_sub, fp32_sum
from .special import fp32_special

__all__ = ["run", "Stats", "check_program", "dynamic_stream"]

_SLOT_RANGE = (ERR_C_RANGE, ERR_A_RANGE, ERR_B_RANGE)


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


def _mnemonic(instr):
    if isinstance(instr, Contract):
        return "contract"
    if isinstance(instr, Elementwise):
        return instr.op
    if isinstance(instr, Reduce):
        return "r" + instr.op
    if isinstance(instr, Gather):
        return instr.op
    return type(instr).__name__.lower()


def _shift(view, step, inc, t):
    if view is None or not step or not t:
        return view
    return replace(view, base=view.base + t * inc[step - 1])


def _effective(instr, inc, t):
    """Return ``instr`` with its stepped bases advanced for loop iteration ``t``."""
    step = getattr(instr, "step", (0, 0, 0))
    if not any(step) or t == 0:
        return instr
    if isinstance(instr, Contract):
        d = instr.desc
        desc = replace(d, c=_shift(d.c, step[0], inc, t), a=_shift(d.a, step[1], inc, t),
                       b=_shift(d.b, step[2], inc, t))
        return Contract(desc, instr.step)
    if isinstance(instr, Elementwise):
        return replace(instr, d=_shift(instr.d, step[0], inc, t),
                       a=_shift(instr.a, step[1], inc, t), b=_shift(instr.b, step[2], inc, t))
    if isinstance(instr, Reduce):
        return replace(instr, d=_shift(instr.d, step[0], inc, t),
                       a=_shift(instr.a, step[1], inc, t))
    if isinstance(instr, Gather):
        return replace(instr, dst=_shift(instr.dst, step[0], inc, t),
                       src=_shift(instr.src, step[1], inc, t),
                       index=_shift(instr.index, step[2], inc, t))
    if isinstance(instr, Update):
        return replace(instr, theta=_shift(instr.theta, step[0], inc, t),
                       grad=_shift(instr.grad, step[1], inc, t))
    return instr


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
        elif not isinstance(ins, (Barrier, Contract, Elementwise, Reduce, Gather, Update)):
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
                    yield q, _effective(instrs[q], ins.increments, t)
            yield stop, instrs[stop]
            pc = stop + 1
            continue
        yield pc, ins
        pc += 1


def _addresses(view, rows, cols):
    return view_addresses(view, 1, rows, cols)[0]


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


def _check(instr, sizes, max_dim=None):
    """Raise :class:`ISAError` if ``instr`` (effective addresses) is illegal on ``sizes``."""
    name = _mnemonic(instr)
    if isinstance(instr, Contract):
        code = check_descriptor(instr.desc, sizes, max_dim=max_dim)
        if code:
            try:
                validate(instr.desc, sizes, max_dim=max_dim)
            except ValueError as e:
                raise ISAError(code, str(e)) from None
        try:
            validate(instr.desc, sizes, max_dim=max_dim)
        except ValueError as e:
            raise ISAError(ERR_OVERLAP, str(e)) from None
    elif isinstance(instr, Elementwise):
        r, c = instr.rows, instr.cols
        for slot, v in enumerate(instr.views):
            if v is not None:
                _check_range(v, r, c, sizes, slot, name)
        _check_write(instr.d, r, c, [(instr.a, r, c, True), (instr.b, r, c, True)], name)
    elif isinstance(instr, Reduce):
        _check_range(instr.d, instr.rows, 1, sizes, 0, name)
        _check_range(instr.a, instr.rows, instr.cols, sizes, 1, name)
        _check_write(instr.d, instr.rows, 1, [(instr.a, instr.rows, instr.cols, False)], name)
    elif isinstance(instr, Gather):
        r, c, tr = instr.rows, instr.cols, instr.table_rows
        dshape = (r, c) if instr.op == "gather" else (tr, c)
        sshape = (tr, c) if instr.op == "gather" else (r, c)
        _check_range(instr.dst, *dshape, sizes, 0, name)
        _check_range(instr.src, *sshape, sizes, 1, name)
        _check_range(instr.index, r, 1, sizes, 2, name)
        _check_write(instr.dst, *dshape, [(instr.src, *sshape, False),
                                          (instr.index, r, 1, False)], name)
    elif isinstance(instr, Update):
        n = instr.count
        _check_range(instr.theta, 1, n, sizes, 0, name)
        _check_range(instr.grad, 1, n, sizes, 1, name)
        if instr.theta.store == instr.grad.store and not (
                instr.theta.base + n <= instr.grad.base or instr.grad.base + n <= instr.theta.base):
            raise ISAError(ERR_OVERLAP, f"update: parameter region {instr.theta.store}@"
                                        f"{instr.theta.base} and gradient region @"
                                        f"{instr.grad.base} ({n} words) overlap")


def check_program(program, store_sizes, *, max_dim=None):
    """Run the check pass only; return ``(code, pc, message)`` (code 0 when legal).

    Parameters
    ----------
    program : Program, list of instructions or flat word list
    store_sizes : dict
        Store name -> words.
    max_dim : int or None
        The contraction engine's limit on m, n, k and batch (``2**dim_bits - 1``); a CONTRACT
        above it is error 2. ``None``: only the 16-bit fields limit them.
    """
    try:
        instrs = _instructions(program)
        for pc, ins in dynamic_stream(instrs):
            try:
                _check(ins, store_sizes, max_dim)
            except ISAError as e:
                e.pc = pc
                raise
    except ISAError as e:
        return e.code, e.pc, str(e)
    return ERR_NONE, None, ""


def _f32(store, addr):
    return store[addr].view(np.float32)


def _execute(instr, image, stats):
    """Execute one (checked) instruction in place on ``image``."""
    if isinstance(instr, Contract):
        d = instr.desc
        names = {d.a.store, d.b.store, d.c.store}
        out = contract(d, {s: image[s] for s in names})
        image[d.c.store] = out[d.c.store]
        stats.macs += d.macs
        return
    if isinstance(instr, Elementwise):
        r, c = instr.rows, instr.cols
        dst = _addresses(instr.d, r, c)
        op = instr.op
        imm = np.float32(bits_f32(instr.imm))
        if op == "fill":
            image[instr.d.store][dst] = np.uint32(instr.imm)
        elif op == "copy":
            image[instr.d.store][dst] = image[instr.a.store][_addresses(instr.a, r, c)]
        else:
            a = _f32(image[instr.a.store], _addresses(instr.a, r, c))
            if op in ("add", "sub", "mul"):
                b = _f32(image[instr.b.store], _addresses(instr.b, r, c))
                res = {"add": fp32_add, "sub": fp32_sub, "mul": fp32_mul}[op](a, b)
            elif op in SPECIAL_OPS:
                res = fp32_special(op, a)
            elif op == "scale":
                res = fp32_mul(a, imm)
            else:  # addi
                res = fp32_add(a, imm)
            image[instr.d.store][dst] = np.asarray(res, dtype=np.float32).view(np.uint32)
        stats.elementwise += r * c
        return
    if isinstance(instr, Reduce):
        r, c = instr.rows, instr.cols
        dst = _addresses(instr.d, r, 1)[:, 0]
        a = _f32(image[instr.a.store], _addresses(instr.a, r, c))
        old = _f32(image[instr.d.store], dst) if instr.accumulate else None
        if instr.op == "sum":
            init = old if instr.accumulate else np.float32(-0.0)
            res = fp32_sum(a, axis=1, init=init)
        else:
            acc = a[:, 0] if old is None else fp32_max(old, a[:, 0])
            for j in range(1, c):
                acc = fp32_max(acc, a[:, j])
            res = acc
        image[instr.d.store][dst] = np.asarray(res, dtype=np.float32).reshape(r).view(np.uint32)
        stats.elementwise += r * c
        return
    if isinstance(instr, Gather):
        r, c, tr = instr.rows, instr.cols, instr.table_rows
        idx = image[instr.index.store][_addresses(instr.index, r, 1)[:, 0]].astype(np.int64)
        bad = np.nonzero(idx >= tr)[0]
        if bad.size:
            raise ISAError(ERR_INDEX, f"{instr.op}: index list entry {bad[0]} is {idx[bad[0]]}, "
                                      f"outside the {tr}-row table; fix the index data")
        cols = np.arange(c, dtype=np.int64)
        if instr.op == "gather":
            t = instr.src
            src = t.base + idx[:, None] * t.row_stride + cols[None, :] * t.col_stride
            image[instr.dst.store][_addresses(instr.dst, r, c)] = image[t.store][src]
        else:
            t = instr.dst
            tgt = t.base + idx[:, None] * t.row_stride + cols[None, :] * t.col_stride
            vals = _f32(image[instr.src.store], _addresses(instr.src, r, c))
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
                cur = store[addr].view(np.float32)
                store[addr] = np.asarray(fp32_add(cur, vals[rows]),
                                         dtype=np.float32).view(np.uint32)
        stats.elementwise += r * c
        return
    if isinstance(instr, Update):
        n = instr.count
        th = image[instr.theta.store]
        g = image[instr.grad.store]
        ts = slice(instr.theta.base, instr.theta.base + n)
        gs = slice(instr.grad.base, instr.grad.base + n)
        lr = np.float32(bits_f32(instr.lr))
        new = fp32_sub(th[ts].view(np.float32), fp32_mul(lr, g[gs].view(np.float32)))
        th[ts] = np.asarray(new, dtype=np.float32).view(np.uint32)
        g[gs] = 0
        stats.updated += n
        return
    # End, Barrier, Loop, EndLoop: no data effect


def run(program, image, *, raise_errors=False, trace=None, max_dim=None):
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
    max_dim : int or None
        The engine's dimension limit, as in :func:`check_program`.

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
    code, pc, msg = check_program(instrs, sizes, max_dim=max_dim)
    if code:
        stats.error, stats.error_pc, stats.message = code, pc, msg
        if raise_errors:
            raise ISAError(code, msg, pc)
        return work, stats
    for pc, ins in dynamic_stream(instrs):
        try:
            _execute(ins, work, stats)
        except ISAError as e:
            stats.error, stats.error_pc, stats.message = e.code, pc, str(e)
            if raise_errors:
                e.pc = pc
                raise
            return work, stats
        stats.instructions += 1
        key = _mnemonic(ins)
        stats.by_op[key] = stats.by_op.get(key, 0) + 1
        if trace is not None:
            trace(pc, ins, work)
    return work, stats


