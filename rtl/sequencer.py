"""Sequencer of the training accelerator and its instruction decoder.

:class:`InstructionDecoder` is the combinational decoder of one 512-bit instruction
(``golden/isa.py``): it splits the fixed fields and computes the error code that
:func:`ttrain.golden.isa.decode` raises for a malformed word (0 for a legal one), with the
golden's priority order when several fields are wrong (the first rule that fails wins). The
rules are not restated here: the decoder evaluates the golden's own ``OpSpec.rules`` on the
word's bits (``golden.isa.Fields`` over Amaranth values). They amount to:

* everywhere: reserved bits ``w0[31:22]``, ``w1[31:24]`` -> ``ERR_FIELD``; unassigned opcode ->
  ``ERR_OPCODE``;
* END/BARRIER/ENDLOOP: any non-zero flag/step/store/word 2..15 -> ``ERR_FIELD``;
* LOOP: non-zero flags/steps/stores/word 3/words 7..15 -> ``ERR_FIELD``; count 0 -> ``ERR_LOOP``;
* CONTRACT: flags > 1 -> ``ERR_FIELD``; a zero m/n/k/batch -> ``ERR_DIM``; then slots 1, 2, 0:
  store id > 3 -> ``ERR_STORE``;
* elementwise: flags, unused slot store/step/view words, an immediate on a non-immediate op ->
  ``ERR_FIELD``; then per used slot (0, 1, 2): store id -> ``ERR_STORE``, batch stride ->
  ``ERR_FIELD``; then zero rows/cols -> ``ERR_DIM``;
  the special functions ``exp recip rsqrt tanh tanh_grad gelu gelu_grad log`` (opcodes 0x40..0x47,
  :data:`ttrain.golden.isa.SPECIAL_OPS`) are unary elementwise ops with ``copy``'s checks and
  class ``elementwise`` (the sequencer sends them to the vector unit, which needs
  ``WideVectorUnit(special=True)``); 0x48..0x7F stay ``ERR_OPCODE``. A decoder built with
  ``special=False`` (an accelerator without the special-function unit) treats 0x40..0x47 as
  unassigned too (``ERR_OPCODE`` in the static pass: the program is rejected before any store
  word changes, instead of the instruction being skipped);
* reduce: flags > 1, slot 2 fields, word 3 -> ``ERR_FIELD``; slots 0, 1 store/batch; zero
  rows/cols -> ``ERR_DIM``; ``d`` column stride -> ``ERR_FIELD``;
* gather/scatter_add: flags -> ``ERR_FIELD``; slots 0, 1, 2 store/batch; zero rows/cols/
  table_rows -> ``ERR_DIM``; index column stride -> ``ERR_FIELD``;
* UPDATE: flags > 15, slot 2 fields, stride words 5, 7, 9, 11, column strides != 1 ->
  ``ERR_FIELD``; slots 0, 1 store; count 0 -> ``ERR_DIM``; mode != 0 -> ``ERR_MODE``.
"""

from functools import reduce
import operator

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..golden.isa import (CLASS_NAMES, ERR_A_RANGE, ERR_B_RANGE, ERR_C_RANGE, ERR_DIM,
                          ERR_FIELD, ERR_LOOP, ERR_NO_END, ERR_OPCODE, GATHER_OPS, OPS,
                          STORE_IDS, STORE_NAMES, WORDS, Fields)
from .command import VectorCommand
from .engine import descriptor_layout

__all__ = ["InstructionDecoder", "CLASS_NAMES", "Sequencer"]

# Instruction classes reported by :class:`InstructionDecoder` (one-hot ``cls`` bits):
# golden.isa.CLASS_NAMES (each OpSpec's kind.CLASS).


def _any(conds):
    out = 0
    for c in conds:
        out = out | c
    return out


def _first(m, out, checks):
    """Drive ``out`` with the code of the first true ``(condition, code)`` (else leave 0)."""
    for i, (cond, code) in enumerate(checks):
        ctx = m.If(cond) if i == 0 else m.Elif(cond)
        with ctx:
            m.d.comb += out.eq(code)


class InstructionDecoder(wiring.Component):
    """Combinational decoder and legality check of one instruction word.

    Golden: :func:`ttrain.golden.isa.decode` (the error code of the :class:`ISAError` it raises,
    0 when it returns an instruction).

    Members
    -------
    word : ``In(512)``
        The instruction, word 0 in bits 0..31.
    error : ``Out(4)``
        Error code (0: legal).
    cls : ``Out(len(CLASS_NAMES))``
        One-hot instruction class (valid when ``error`` is 0), order of :data:`CLASS_NAMES`.
    op, flags : ``Out(8)``
        Opcode and flag byte.
    step : ``Out(2).array(3)``
        Loop increment select per slot.
    store : ``Out(8).array(3)``
        Store id per slot.

    Parameters
    ----------
    special : bool
        Whether the special-function opcodes (:data:`ttrain.golden.isa.SPECIAL_OPS`) are
        legal (the accelerator has a special-function unit); if not they are ``ERR_OPCODE``.
    """

    def __init__(self, *, special=True):
        if not isinstance(special, bool):
            raise TypeError(f"special must be a bool, not {special!r}")
        self._special = special
        super().__init__({
            "word": In(32 * WORDS), "error": Out(4), "cls": Out(len(CLASS_NAMES)),
            "op": Out(8), "flags": Out(8), "step": Out(2).array(3), "store": Out(8).array(3),
        })

    def elaborate(self, platform):
        # The legality rules are the golden's own (golden.isa: OpSpec.rules, decode_error),
        # evaluated here on the word's bits instead of on Python ints: one definition.
        m = Module()
        w = [self.word[32 * i: 32 * (i + 1)] for i in range(WORDS)]
        f = Fields(w, bits=lambda value, lo, hi: value[lo:hi])
        m.d.comb += [self.op.eq(f.op), self.flags.eq(f.flags)]
        m.d.comb += [self.step[s].eq(f.step[s]) for s in range(3)]
        m.d.comb += [self.store[s].eq(f.store[s]) for s in range(3)]
        # the vector unit always carries the PRNG (golden.isa.Random ops)
        units = ("special", "prng") if self._special else ("prng",)
        legal = [spec for spec in OPS if not spec.requires or spec.requires in units]
        is_op = {spec.opcode: Signal(name=f"is_{spec.mnemonic}") for spec in legal}
        for code, sig in is_op.items():
            m.d.comb += sig.eq(f.op == code)
        m.d.comb += self.cls.eq(Cat(*[_any(is_op[spec.opcode] for spec in legal
                                           if spec.kind.CLASS == name)
                                      for name in CLASS_NAMES]))
        with m.If(f.reserved):
            m.d.comb += self.error.eq(ERR_FIELD)
        with m.Elif(~_any(is_op.values())):
            m.d.comb += self.error.eq(ERR_OPCODE)
        for spec in legal:
            with m.Elif(is_op[spec.opcode]):
                _first(m, self.error, [(rule(f), code) for code, _, rule in spec.rules])
        return m


# ============================================================================================
# the sequencer

_UNITS = ("engine", "vector", "update")


class Sequencer(wiring.Component):
    """Instruction memory, check pass, fetch/loop/dispatch and scoreboard of the trainer.

    Golden: :func:`ttrain.golden.interpreter.run` (what the program does, in which order, and
    which error code and pc a bad program reports), except for the golden-only overlap check
    (``ERR_OVERLAP``), which the sequencer does not make (the compiler never emits it).

    A run (``start`` pulse) has three passes over the instruction memory:

    1. *static*: decode every one of the ``length`` instructions (first malformed word ->
       its :class:`InstructionDecoder` code), then the LOOP/ENDLOOP/END structure up to the
       first END (``ERR_LOOP``, ``ERR_NO_END`` with pc = ``length``);
    2. *check*: walk the dynamic stream (loop bodies once per iteration, bases stepped by the
       loop increments) and check every operand's last address against its store
       (``ERR_A_RANGE``/``ERR_B_RANGE``/``ERR_C_RANGE``) and CONTRACT dimensions against
       ``max_dim`` and their ``split`` against ``max_split`` (``ERR_DIM``), in the golden's
       order;
    3. *execute*: walk again and issue each instruction to its unit (CONTRACT -> engine,
       elementwise/reduce/gather -> vector, UPDATE -> update) as soon as that unit is idle and
       the instruction's address intervals do not conflict (RAW, WAR, WAW) with the instruction
       in flight on another unit; BARRIER and END wait for every unit; nothing issues after
       a gather/scatter until it is done (its index error must stop everything after it). A
       unit error (``ERR_INDEX``) stops the run with that instruction's pc once the earlier
       instructions still in flight are done (``done`` and ``error`` rise with everything
       idle). :mod:`ttrain.golden.schedule` is the cycle model of this pass.

    An error in pass 1 or 2 means no instruction was issued, so no store word changed.

    Passes 1 and 2 read only the program words, the run's ``length`` and the build's
    constants, so their outcome cannot change between runs of one loaded program: after they
    end clean the program is *verified*, and a later run with the same ``length`` (and no
    instruction-memory write since, nor in the ``start`` cycle) starts at pass 3. A host that
    runs one program per sample or step then pays the two passes once per load
    (``cycles`` counts every busy cycle, so a verified run reports fewer).

    Parameters
    ----------
    store_sizes : dict
        Words of each store of :data:`ttrain.golden.isa.STORE_IDS` (all four).
    imem_depth : int
        Instructions the instruction memory holds (power of two not required).
    max_dim : int or None
        The engine's limit on m, n, k and batch (``None``: the 16-bit fields only).
    max_split : int or None
        The engine's largest CONTRACT ``split`` (its lane groups; ``None``: the ISA field's
        256 only).
    overlap : bool
        Allow instructions on different units to run concurrently (else strictly one at a
        time, e.g. when the units share one memory port).
    special : bool
        The vector unit has a special-function unit; if not, special-function opcodes are
        rejected as ``ERR_OPCODE`` in the static pass (see :class:`InstructionDecoder`).
    desc_layout : Layout or None
        The contraction engine's descriptor layout (:attr:`ContractionEngine.desc`'s payload,
        :func:`~ttrain.rtl.engine.descriptor_layout`) for the ``eng`` stream; default 2-bit
        store ids, 32-bit addresses and strides, 16-bit dimensions. Values are checked against
        the stores before issue, so narrower fields lose nothing.

    Members
    -------
    imem_we, imem_addr, imem_data : ``In(1)``, ``In(range(16 * imem_depth))``, ``In(32)``
        Host write of instruction word ``imem_addr`` (instruction ``imem_addr // 16``, word
        ``imem_addr % 16``); only while idle.
    length : ``In(range(imem_depth + 1))``
        Instructions in the program, sampled at ``start``.
    start : ``In(1)``
        Start pulse (ignored while busy).
    busy, done, error : ``Out(1)``
        ``done`` and ``error`` hold until the next ``start``.
    error_code : ``Out(4)``, error_pc : ``Out(32)``
        Code and instruction index of the error.
    cycles, executed : ``Out(32)``
        Cycles of the last run; dynamic instructions executed (as ``Stats.instructions``).
    busy_engine, busy_vector, busy_update : ``Out(32)``
        Cycles each unit had an instruction in flight during the last run.
    eng : ``Out(stream.Signature(desc_layout))``, eng_done : ``In(1)``
        CONTRACTs, in the contraction engine's own descriptor layout (connected to its ``desc``
        stream as is).
    vec : ``Out(stream.Signature(VectorCommand))``, vec_done : ``In(1)``, vec_error : ``In(4)``
    upd : ``Out(stream.Signature(VectorCommand))``, upd_done : ``In(1)``
        Unit command streams; ``*_done`` pulses once per finished command.
    trace_valid : ``Out(1)``; trace_pc : ``Out(32)``; trace_op : ``Out(8)``;
    trace_unit : ``Out(2)``
        Debug/trace port: ``trace_valid`` is high for one cycle per dynamic instruction of the
        execute pass, exactly where ``executed`` counts it (so the stream of ``trace_pc`` equals
        :func:`ttrain.golden.interpreter.dynamic_stream`: LOOP once, the body per iteration,
        ENDLOOP once, END), with its pc, opcode and unit (0 engine, 1 vector, 2 update, 3 the
        sequencer itself: LOOP, ENDLOOP, BARRIER, END). Completion is the unit's ``*_done``.
        The port is wires of existing state (``pc``, the decoder's opcode, the issue strobes):
        left unconnected (the Vitis kernel) it is optimised away.
    """

    def __init__(self, *, store_sizes, imem_depth=256, max_dim=None, max_split=None,
                 overlap=True, special=True, desc_layout=None):
        if not isinstance(store_sizes, dict) or set(store_sizes) != set(STORE_IDS):
            raise ValueError(f"store_sizes must give the words of every store "
                             f"{sorted(STORE_IDS)}, not {store_sizes!r}")
        for k, v in store_sizes.items():
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 1 << 32:
                raise ValueError(f"store_sizes[{k!r}] = {v!r}: give a positive word count "
                                 f"up to 2**32")
        if isinstance(imem_depth, bool) or not isinstance(imem_depth, int) or imem_depth < 1:
            raise ValueError(f"imem_depth must be a positive int (instructions), not "
                             f"{imem_depth!r}")
        if max_dim is not None and (isinstance(max_dim, bool) or not isinstance(max_dim, int)
                                    or not 1 <= max_dim <= 0xFFFF):
            raise ValueError(f"max_dim must be None or an int in 1..65535, not {max_dim!r}")
        self._sizes = dict(store_sizes)
        self._depth = imem_depth
        if max_split is not None and (isinstance(max_split, bool)
                                      or not isinstance(max_split, int) or max_split < 1
                                      or max_split & (max_split - 1) or max_split > 256):
            raise ValueError(f"max_split must be None or a power of two in 1..256, not "
                             f"{max_split!r}")
        self._max_dim = max_dim
        # 256 is the ISA field's own limit (the decoder's ERR_FIELD): no check pass needed
        self._max_split = None if max_split == 256 else max_split
        self._overlap = bool(overlap)
        if not isinstance(special, bool):
            raise TypeError(f"special must be a bool, not {special!r}")
        self._special = special
        self._desc_layout = descriptor_layout(2, 32, 16) if desc_layout is None else desc_layout
        super().__init__({
            "imem_we": In(1), "imem_addr": In(range(16 * imem_depth)), "imem_data": In(32),
            "length": In(range(imem_depth + 1)), "start": In(1),
            "busy": Out(1), "done": Out(1), "error": Out(1), "error_code": Out(4),
            "error_pc": Out(32), "cycles": Out(32), "executed": Out(32),
            "busy_engine": Out(32), "busy_vector": Out(32), "busy_update": Out(32),
            "eng": Out(stream.Signature(self._desc_layout)), "eng_done": In(1),
            "vec": Out(stream.Signature(VectorCommand)), "vec_done": In(1), "vec_error": In(4),
            "upd": Out(stream.Signature(VectorCommand)), "upd_done": In(1),
            "trace_valid": Out(1), "trace_pc": Out(32), "trace_op": Out(8),
            "trace_unit": Out(2),
        })

    imem_depth = property(lambda self: self._depth, doc="Instruction memory depth.")

    def elaborate(self, platform):
        m = Module()
        m.submodules.dec = dec = InstructionDecoder(special=self._special)

        # ---- instruction memory: 16 word columns, one instruction per row ----------------
        pc = Signal(range(self._depth + 1))
        rdata = []
        for i in range(WORDS):
            mem = memory.Memory(shape=32, depth=self._depth, init=[])
            m.submodules[f"imem{i}"] = mem
            wp = mem.write_port()
            rp = mem.read_port(transparent_for=())
            m.d.comb += [wp.en.eq(self.imem_we & (self.imem_addr % WORDS == i) & ~self.busy),
                         wp.addr.eq(self.imem_addr // WORDS), wp.data.eq(self.imem_data),
                         rp.addr.eq(pc)]
            rdata.append(rp)
        # set when the static and check passes end clean, cleared by any instruction write
        # (the class docstring says why a rerun may skip them)
        verified = Signal()
        verified_len = Signal(range(self._depth + 1))
        with m.If(self.imem_we & ~self.busy):
            m.d.sync += verified.eq(0)
        fetch = Signal()
        for rp in rdata:
            m.d.comb += rp.en.eq(fetch)
        m.d.comb += dec.word.eq(Cat(*[rp.data for rp in rdata]))
        w = [rp.data for rp in rdata]
        cls = {name: dec.cls[i] for i, name in enumerate(CLASS_NAMES)}
        op = dec.op
        step = dec.step

        # The per-instruction datapath is a free-running pipeline of registered stages (prefix
        # sN_: latched every cycle from stage N-1). Its inputs (the fetched word ``w``, the
        # loop offsets, the scoreboard records) hold still while one instruction is handled,
        # so stage N is valid N cycles after the word is: FETCH reads the word, DECODE is the
        # cycle stage 1 latches, WAIT lets stages 2..7 settle, ACT checks or issues it
        # (LOOP/ENDLOOP/BARRIER/END and the static pass need stage 1 only: no WAIT). Every
        # stage is a short path (at most 12 logic levels in the Yosys xcup estimate,
        # tests/test_timing.py):
        #   s1  decoder outputs; base = field + loop offset (32 bits + carry); fields - 1
        #   s2  per slot and extent: the 16x32 multiplier operands of (extent - 1) * stride
        #   s3  two 16x16 partial products each (DSP48E2)
        #   s4  their sum (the product's upper half)
        #   s5  base + term, term + term
        #   s6  last address = the two sums
        #   s7  last < store size; scoreboard interval tests against the records
        # The address arithmetic is saturating instead of 72 bits wide: a store has at most
        # 2**32 words, so an address is only needed exactly below 2**32 and a flag ("big")
        # says "2**32 or more" (such an operand is out of range; the check pass stops there,
        # so the execute pass only sees exact 32-bit intervals).
        SETTLE = 7                     # stages: ACT reads s7 SETTLE cycles after DECODE

        # ---- loop state ------------------------------------------------------------------
        in_loop = Signal()
        loop_pc = Signal(range(self._depth + 1))
        loop_left = Signal(32)         # back jumps left: count - 1 at LOOP
        inc = [Signal(32, name=f"inc{i}") for i in range(3)]
        off = [Signal(32, name=f"off{i}") for i in range(3)]        # exact below 2**32 ...
        off_big = [Signal(name=f"off{i}_big") for i in range(3)]    # ... else this flag

        # ---- s1: decoder, bases, fields - 1 ----------------------------------------------
        s1_err = Signal(4)
        s1_cls = Signal(len(CLASS_NAMES))
        m.d.sync += [s1_err.eq(dec.error), s1_cls.eq(dec.cls)]
        cls = {name: s1_cls[i] for i, name in enumerate(CLASS_NAMES)}
        s1_base = [Signal(33, name=f"s1_base{s}") for s in range(3)]
        s1_obig = [Signal(name=f"s1_obig{s}") for s in range(3)]
        for s in range(3):
            sel = step[s]
            m.d.sync += [
                s1_base[s].eq(w[4 + 4 * s] + Mux(sel == 0, 0, Mux(sel == 1, off[0],
                                                             Mux(sel == 2, off[1], off[2])))),
                s1_obig[s].eq(Mux(sel == 0, 0, Mux(sel == 1, off_big[0],
                                                   Mux(sel == 2, off_big[1], off_big[2])))),
            ]
        base = [b[0:32] for b in s1_base]          # exact whenever the operand is in range
        rows, cols = w[2][0:16], w[2][16:32]
        k, batch = w[3][0:16], w[3][16:32]
        m1 = {}                                    # field - 1 (legal fields are >= 1)
        for name, field, width in (("rows", rows, 16), ("cols", cols, 16), ("k", k, 16),
                                   ("batch", batch, 16), ("w2", w[2], 32), ("w3", w[3], 32)):
            m1[name] = Signal(width, name=f"s1_{name}_m1")
            m.d.sync += m1[name].eq(field - 1)
        s1_dims_big = Signal()
        dims_big = []
        if self._max_dim is not None:
            dims_big += [d > self._max_dim for d in (rows, cols, k, batch)]
        if self._max_split is not None:
            dims_big.append(dec.flags[2:6] > exact_log2(self._max_split))
        if dims_big:
            m.d.sync += s1_dims_big.eq(reduce(operator.or_, dims_big))

        # ---- s2: per-slot extents - 1 (batch, rows, cols), roles, multiplier operands -----
        ext = [[Signal(32, name=f"ext{s}_{d}_m1") for d in "brc"] for s in range(3)]
        used = [Signal(name=f"s2_used{s}") for s in range(3)]
        write = [Signal(name=f"s2_write{s}") for s in range(3)]
        s_used = [Signal(name=f"used{s}") for s in range(3)]
        s_write = [Signal(name=f"write{s}") for s in range(3)]
        is_scatter = op == GATHER_OPS["scatter_add"]
        ONE = 0                                    # an extent of 1, minus 1

        def set_ext(s, b, r, c):
            m.d.comb += [ext[s][0].eq(b), ext[s][1].eq(r), ext[s][2].eq(c)]

        m.d.comb += s_write[0].eq(1)
        with m.If(cls["contract"]):
            set_ext(0, m1["batch"], m1["rows"], m1["cols"])     # C: m x n
            set_ext(1, m1["batch"], m1["rows"], m1["k"])        # A: m x k
            set_ext(2, m1["batch"], m1["k"], m1["cols"])        # B: k x n
            m.d.comb += [u.eq(1) for u in s_used]
        with m.Elif(cls["elementwise"]):
            for s in range(3):
                set_ext(s, ONE, m1["rows"], m1["cols"])
            nsrc_ge1 = 0
            nsrc_ge2 = 0
            for spec in OPS:                 # the table says which slots each op reads
                if spec.kind.CLASS == "elementwise" and spec.sources >= 1:
                    nsrc_ge1 = nsrc_ge1 | (op == spec.opcode)
                if spec.kind.CLASS == "elementwise" and spec.sources >= 2:
                    nsrc_ge2 = nsrc_ge2 | (op == spec.opcode)
            m.d.comb += [s_used[0].eq(1), s_used[1].eq(nsrc_ge1), s_used[2].eq(nsrc_ge2)]
        with m.Elif(cls["reduce"]):
            set_ext(0, ONE, m1["rows"], ONE)
            set_ext(1, ONE, m1["rows"], m1["cols"])
            m.d.comb += [s_used[0].eq(1), s_used[1].eq(1)]
        with m.Elif(cls["gather"]):
            set_ext(0, ONE, Mux(is_scatter, m1["w3"], m1["rows"]), m1["cols"])
            set_ext(1, ONE, Mux(is_scatter, m1["rows"], m1["w3"]), m1["cols"])
            set_ext(2, ONE, m1["rows"], ONE)
            m.d.comb += [u.eq(1) for u in s_used]
        with m.Elif(cls["update"]):
            set_ext(0, ONE, ONE, m1["w2"])
            set_ext(1, ONE, ONE, m1["w2"])
            m.d.comb += [s_used[0].eq(1), s_used[1].eq(1), s_write[1].eq(1)]
        with m.Elif(cls["random"]):           # d and a: rows x cols; slot 2: the seed word
            set_ext(0, ONE, m1["rows"], m1["cols"])
            set_ext(1, ONE, m1["rows"], m1["cols"])
            set_ext(2, ONE, ONE, ONE)
            m.d.comb += [u.eq(1) for u in s_used]
        m.d.sync += [used[s].eq(s_used[s]) for s in range(3)]
        m.d.sync += [write[s].eq(s_write[s]) for s in range(3)]
        # (extent - 1) * stride as a 16x32 product: a has 16 significant bits or b has
        # (else the product is >= 2**32: "both"); the 16-bit one is the multiplier.
        s2_u = [[Signal(16, name=f"s2_u{s}_{d}") for d in "brc"] for s in range(3)]
        s2_v = [[Signal(32, name=f"s2_v{s}_{d}") for d in "brc"] for s in range(3)]
        s2_both = [[Signal(name=f"s2_both{s}_{d}") for d in "brc"] for s in range(3)]
        for s in range(3):
            for d, stride in enumerate((w[7 + 4 * s], w[5 + 4 * s], w[6 + 4 * s])):
                a = ext[s][d]
                a_small = a[16:32] == 0
                m.d.sync += [s2_u[s][d].eq(Mux(a_small, a[0:16], stride[0:16])),
                             s2_v[s][d].eq(Mux(a_small, stride, a)),
                             s2_both[s][d].eq(~a_small & stride[16:32].any())]

        # ---- s3: partial products; s4: the product's upper half ---------------------------
        s3_lo = [[Signal(32, name=f"s3_lo{s}_{d}") for d in "brc"] for s in range(3)]
        s3_hi = [[Signal(32, name=f"s3_hi{s}_{d}") for d in "brc"] for s in range(3)]
        s3_both = [[Signal(name=f"s3_both{s}_{d}") for d in "brc"] for s in range(3)]
        s4_p = [[Signal(32, name=f"s4_p{s}_{d}") for d in "brc"] for s in range(3)]
        s4_top = [[Signal(17, name=f"s4_top{s}_{d}") for d in "brc"] for s in range(3)]
        s4_both = [[Signal(name=f"s4_both{s}_{d}") for d in "brc"] for s in range(3)]
        for s in range(3):
            for d in range(3):
                u, v = s2_u[s][d], s2_v[s][d]
                m.d.sync += [s3_lo[s][d].eq(u * v[0:16]), s3_hi[s][d].eq(u * v[16:32]),
                             s3_both[s][d].eq(s2_both[s][d])]
                hi = s3_hi[s][d] + s3_lo[s][d][16:32]
                m.d.sync += [s4_p[s][d].eq(Cat(s3_lo[s][d][0:16], hi[0:16])),
                             s4_top[s][d].eq(hi[16:33]), s4_both[s][d].eq(s3_both[s][d])]

        # ---- s5, s6: last = base + the three terms; s7: range and scoreboard tests --------
        s5_a = [Signal(33, name=f"s5_a{s}") for s in range(3)]
        s5_b = [Signal(33, name=f"s5_b{s}") for s in range(3)]
        s5_big = [Signal(name=f"s5_big{s}") for s in range(3)]
        last = [Signal(34, name=f"s6_last{s}") for s in range(3)]
        s6_big = [Signal(name=f"s6_big{s}") for s in range(3)]
        in_range = [Signal(name=f"s7_in_range{s}") for s in range(3)]
        for s in range(3):
            p = s4_p[s]
            m.d.sync += [s5_a[s].eq(base[s] + p[0]), s5_b[s].eq(p[1] + p[2]),
                         s5_big[s].eq(s1_base[s][32] | s1_obig[s]
                                      | _any(s4_top[s][d].any() | s4_both[s][d]
                                             for d in range(3))),
                         last[s].eq(s5_a[s] + s5_b[s]), s6_big[s].eq(s5_big[s])]
            st = dec.store[s][0:2]
            lt = [last[s][0:32] < self._sizes[STORE_NAMES[i]] for i in range(len(STORE_IDS))]
            m.d.sync += in_range[s].eq(~s6_big[s] & ~last[s][32:34].any()
                                       & Mux(st[1], Mux(st[0], lt[3], lt[2]),
                                             Mux(st[0], lt[1], lt[0])))
        range_code = Signal(4)
        with m.If(cls["contract"]):
            dim_check = [(s1_dims_big, ERR_DIM)] if dims_big else []
            _first(m, range_code, dim_check + [(~in_range[1], ERR_A_RANGE),
                                               (~in_range[2], ERR_B_RANGE),
                                               (~in_range[0], ERR_C_RANGE)])
        with m.Else():
            _first(m, range_code, [(used[0] & ~in_range[0], ERR_C_RANGE),
                                   (used[1] & ~in_range[1], ERR_A_RANGE),
                                   (used[2] & ~in_range[2], ERR_B_RANGE)])

        # ---- scoreboard ------------------------------------------------------------------
        unit_of = Signal(2)      # 0 engine, 1 vector, 2 update
        m.d.comb += unit_of.eq(Mux(cls["contract"], 0, Mux(cls["update"], 2, 1)))
        inflight = [Signal(name=f"inflight_{u}") for u in _UNITS]
        rec = [[{"valid": Signal(name=f"r{u}_{s}_v"), "write": Signal(name=f"r{u}_{s}_w"),
                 "store": Signal(2, name=f"r{u}_{s}_st"), "lo": Signal(32, name=f"r{u}_{s}_lo"),
                 "hi": Signal(32, name=f"r{u}_{s}_hi")} for s in range(3)] for u in range(3)]
        # s7: slot s of this instruction meets slot t of unit u's record (valid only while
        # u is in flight; the records change only when this sequencer issues)
        meets = [[[Signal(name=f"s7_meets{u}_{s}_{t}") for t in range(3)] for s in range(3)]
                 for u in range(3)]
        conflict = [Signal(name=f"conflict_{u}") for u in _UNITS]   # with unit u's record
        for u in range(3):
            for s in range(3):
                for t in range(3):
                    r = rec[u][t]
                    m.d.sync += meets[u][s][t].eq(
                        used[s] & r["valid"] & (dec.store[s][0:2] == r["store"])
                        & (write[s] | r["write"]) & (base[s] <= r["hi"])
                        & (r["lo"] <= last[s][0:32]))
            m.d.comb += conflict[u].eq(inflight[u] & _any(meets[u][s][t] for s in range(3)
                                                          for t in range(3)))
        any_inflight = inflight[0] | inflight[1] | inflight[2]
        can_issue = Signal()
        others_ok = []
        for u in range(3):
            ok = ~inflight[u]
            for v in range(3):
                if v != u:
                    ok = ok & ~conflict[v] & (~inflight[v] if not self._overlap else 1)
            others_ok.append(ok)
        # a gather waits like any vector instruction (its unit idle, no conflict with the
        # others' instructions in flight); nothing after it issues until it is done
        m.d.comb += can_issue.eq(Mux(unit_of == 0, others_ok[0],
                                     Mux(unit_of == 1, others_ok[1], others_ok[2])))

        dones = [self.eng_done, self.vec_done, self.upd_done]
        issued = [Signal(name=f"issued_{u}") for u in _UNITS]
        for u in range(3):
            with m.If(issued[u]):
                m.d.sync += inflight[u].eq(1)
                for s in range(3):
                    m.d.sync += [rec[u][s]["valid"].eq(used[s]), rec[u][s]["write"].eq(write[s]),
                                 rec[u][s]["store"].eq(dec.store[s][0:2]),
                                 rec[u][s]["lo"].eq(base[s]), rec[u][s]["hi"].eq(last[s])]
            with m.Elif(dones[u]):
                m.d.sync += inflight[u].eq(0)

        # ---- unit commands (payloads are valid from ACT on) -------------------------------
        def cview(layout_view, s):
            return [layout_view.store.eq(dec.store[s][0:2]), layout_view.base.eq(base[s]),
                    layout_view.row.eq(w[5 + 4 * s]), layout_view.col.eq(w[6 + 4 * s])]

        ep = self.eng.payload
        m.d.comb += [ep.m.eq(rows), ep.n.eq(cols), ep.k.eq(k), ep.batch.eq(batch),
                     ep.accumulate.eq(dec.flags[0]), ep.integer.eq(dec.flags[1]),
                     ep.split.eq(dec.flags[2:6])]
        for lv, s in ((ep.c, 0), (ep.a, 1), (ep.b, 2)):
            m.d.comb += [lv.store.eq(dec.store[s]), lv.base.eq(base[s]),
                         lv.row_stride.eq(w[5 + 4 * s]), lv.col_stride.eq(w[6 + 4 * s]),
                         lv.batch_stride.eq(w[7 + 4 * s])]
        for port in (self.vec, self.upd):
            p = port.payload
            m.d.comb += [p.op.eq(op), p.flags.eq(dec.flags), p.imm.eq(w[3])]
            with m.If(cls["update"]):
                m.d.comb += [p.rows.eq(1), p.cols.eq(w[2])]
            with m.Else():
                m.d.comb += [p.rows.eq(rows), p.cols.eq(cols)]
            for lv, s in ((p.v0, 0), (p.v1, 1), (p.v2, 2)):
                m.d.comb += cview(lv, s)

        # ---- control ----------------------------------------------------------------------
        MODE_STATIC, MODE_CHECK, MODE_EXEC = 0, 1, 2
        mode = Signal(2)
        length = Signal(range(self._depth + 1))
        seen_end = Signal()
        struct_err = Signal()
        struct_pc = Signal(range(self._depth + 1))
        settle = Signal(range(SETTLE))

        def fail(code, at):
            m.d.sync += [self.error.eq(1), self.error_code.eq(code), self.error_pc.eq(at),
                         self.done.eq(1)]

        def advance():
            m.d.sync += pc.eq(pc + 1)
            m.next = "FETCH"

        def reset_offsets():
            m.d.sync += [o.eq(0) for o in off] + [o.eq(0) for o in off_big]

        # ---- debug/trace port: one strobe per counted dynamic instruction ----------------
        m.d.comb += [self.trace_pc.eq(pc), self.trace_op.eq(op)]

        def traced(unit):
            m.d.comb += [self.trace_valid.eq(1), self.trace_unit.eq(unit)]

        with m.If(self.busy):
            m.d.sync += self.cycles.eq(self.cycles + 1)
            m.d.sync += [cnt.eq(cnt + f) for cnt, f in
                         zip((self.busy_engine, self.busy_vector, self.busy_update), inflight)]

        gather_err = Signal(4)                # a gather's index error, reported once idle
        control = _any(dec.cls[CLASS_NAMES.index(n)] for n in ("loop", "endloop", "barrier",
                                                               "end"))
        with m.FSM(name="seq"):
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += [self.busy.eq(1), self.done.eq(0), self.error.eq(0),
                                 self.error_code.eq(0), self.error_pc.eq(0), pc.eq(0),
                                 mode.eq(MODE_STATIC), length.eq(self.length),
                                 seen_end.eq(0), struct_err.eq(0), in_loop.eq(0),
                                 self.cycles.eq(0), self.executed.eq(0),
                                 self.busy_engine.eq(0), self.busy_vector.eq(0),
                                 self.busy_update.eq(0)]
                    with m.If(verified & (self.length == verified_len) & ~self.imem_we):
                        m.d.sync += mode.eq(MODE_EXEC)
                        reset_offsets()       # a run stopped inside a loop left them set
                        m.next = "FETCH"
                    with m.Elif(self.length == 0):
                        m.next = "STATIC_DONE"
                    with m.Else():
                        m.next = "FETCH"
            with m.State("FETCH"):
                m.d.comb += fetch.eq(1)
                m.next = "DECODE"
            with m.State("DECODE"):           # the word is read: stage 1 latches it
                with m.If((mode == MODE_STATIC) | control):
                    m.next = "ACT"
                with m.Else():
                    m.d.sync += settle.eq(SETTLE - 2)
                    m.next = "WAIT"
            with m.State("WAIT"):             # stages 2..SETTLE settle
                m.d.sync += settle.eq(settle - 1)
                with m.If(settle == 0):
                    m.next = "ACT"
            with m.State("ACT"):
                with m.If(mode == MODE_STATIC):
                    with m.If(s1_err != 0):
                        fail(s1_err, pc)
                        m.next = "STOP"
                    with m.Else():
                        with m.If(~seen_end & ~struct_err):
                            with m.If(cls["loop"]):
                                with m.If(in_loop):
                                    m.d.sync += [struct_err.eq(1), struct_pc.eq(pc)]
                                m.d.sync += in_loop.eq(1)
                            with m.Elif(cls["endloop"]):
                                with m.If(~in_loop):
                                    m.d.sync += [struct_err.eq(1), struct_pc.eq(pc)]
                                m.d.sync += in_loop.eq(0)
                            with m.Elif(cls["end"]):
                                with m.If(in_loop):
                                    m.d.sync += [struct_err.eq(1), struct_pc.eq(pc)]
                                with m.Else():
                                    m.d.sync += seen_end.eq(1)
                        with m.If(pc + 1 == length):
                            m.next = "STATIC_DONE"
                        with m.Else():
                            advance()
                with m.Else():
                    exec_mode = mode == MODE_EXEC
                    with m.If(cls["loop"]):
                        m.d.sync += [loop_pc.eq(pc), loop_left.eq(m1["w2"]), in_loop.eq(1)]
                        m.d.sync += [inc[i].eq(w[4 + i]) for i in range(3)]
                        reset_offsets()
                        with m.If(exec_mode):
                            m.d.sync += self.executed.eq(self.executed + 1)
                            traced(3)
                        advance()
                    with m.Elif(cls["endloop"]):
                        with m.If(loop_left != 0):
                            m.d.sync += [loop_left.eq(loop_left - 1), pc.eq(loop_pc + 1)]
                            for i in range(3):
                                nxt = off[i] + inc[i]
                                m.d.sync += [off[i].eq(nxt[0:32]),
                                             off_big[i].eq(off_big[i] | nxt[32])]
                            m.next = "FETCH"
                        with m.Else():
                            reset_offsets()
                            m.d.sync += in_loop.eq(0)
                            with m.If(exec_mode):
                                m.d.sync += self.executed.eq(self.executed + 1)
                                traced(3)
                            advance()
                    with m.Elif(cls["barrier"] | cls["end"]):
                        with m.If(~exec_mode):
                            with m.If(cls["end"]):
                                m.d.sync += [mode.eq(MODE_EXEC), pc.eq(0), in_loop.eq(0),
                                             verified.eq(1), verified_len.eq(length)]
                                reset_offsets()
                                m.next = "FETCH"
                            with m.Else():
                                advance()
                        with m.Elif(~any_inflight):
                            m.d.sync += self.executed.eq(self.executed + 1)
                            traced(3)
                            with m.If(cls["end"]):
                                m.d.sync += [self.done.eq(1), self.busy.eq(0)]
                                m.next = "IDLE"
                            with m.Else():
                                advance()
                    with m.Elif(~exec_mode):
                        with m.If(range_code != 0):
                            fail(range_code, pc)
                            m.next = "STOP"
                        with m.Else():
                            advance()
                    with m.Elif(can_issue):
                        with m.If(unit_of == 0):
                            m.d.comb += self.eng.valid.eq(1)
                            m.d.comb += issued[0].eq(self.eng.ready)
                        with m.Elif(unit_of == 1):
                            m.d.comb += self.vec.valid.eq(1)
                            m.d.comb += issued[1].eq(self.vec.ready)
                        with m.Else():
                            m.d.comb += self.upd.valid.eq(1)
                            m.d.comb += issued[2].eq(self.upd.ready)
                        with m.If(issued[0] | issued[1] | issued[2]):
                            m.d.sync += self.executed.eq(self.executed + 1)
                            traced(unit_of)
                            with m.If(cls["gather"]):
                                m.next = "GATHER_WAIT"
                            with m.Else():
                                advance()
            with m.State("GATHER_WAIT"):
                with m.If(self.vec_done):
                    with m.If(self.vec_error != 0):
                        m.d.sync += [self.executed.eq(self.executed - 1),
                                     gather_err.eq(self.vec_error)]
                        m.next = "GATHER_FAIL"
                    with m.Else():
                        advance()
            with m.State("GATHER_FAIL"):      # the earlier instructions still in flight end
                with m.If(~any_inflight):
                    fail(gather_err, pc)
                    m.d.sync += self.busy.eq(0)
                    m.next = "IDLE"
            with m.State("STATIC_DONE"):
                with m.If(struct_err):
                    fail(ERR_LOOP, struct_pc)
                    m.next = "STOP"
                with m.Elif(~seen_end):
                    fail(ERR_NO_END, length)
                    m.next = "STOP"
                with m.Else():
                    m.d.sync += [mode.eq(MODE_CHECK), pc.eq(0), in_loop.eq(0)]
                    reset_offsets()
                    m.next = "FETCH"
            with m.State("STOP"):
                with m.If(~any_inflight):
                    m.d.sync += self.busy.eq(0)
                    m.next = "IDLE"
        return m
