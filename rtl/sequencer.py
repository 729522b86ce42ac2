"""Sequencer of the training accelerator: instruction decode (this module, step 1 of issue 4).

:class:`InstructionDecoder` is the combinational decoder of one 512-bit instruction
(``golden/isa.py``): it splits the fixed fields and computes the error code that
:func:`ttrain.golden.isa.decode` raises for a malformed word (0 for a legal one), with the
golden's priority order when several fields are wrong (the first check the golden makes wins):

* everywhere: reserved bits ``w0[31:22]``, ``w1[31:24]`` -> ``ERR_FIELD``; unassigned opcode ->
  ``ERR_OPCODE``;
* END/BARRIER/ENDLOOP: any non-zero flag/step/store/word 2..15 -> ``ERR_FIELD``;
* LOOP: non-zero flags/steps/stores/word 3/words 7..15 -> ``ERR_FIELD``; count 0 -> ``ERR_LOOP``;
* CONTRACT: flags > 1 -> ``ERR_FIELD``; a zero m/n/k/batch -> ``ERR_DIM``; then slots 1, 2, 0:
  store id > 3 -> ``ERR_STORE``;
* elementwise: flags, unused slot store/step/view words, an immediate on a non-immediate op ->
  ``ERR_FIELD``; then per used slot (0, 1, 2): store id -> ``ERR_STORE``, batch stride ->
  ``ERR_FIELD``; then zero rows/cols -> ``ERR_DIM``;
* reduce: flags > 1, slot 2 fields, word 3 -> ``ERR_FIELD``; slots 0, 1 store/batch; zero
  rows/cols -> ``ERR_DIM``; ``d`` column stride -> ``ERR_FIELD``;
* gather/scatter_add: flags -> ``ERR_FIELD``; slots 0, 1, 2 store/batch; zero rows/cols/
  table_rows -> ``ERR_DIM``; index column stride -> ``ERR_FIELD``;
* UPDATE: flags > 15, slot 2 fields, stride words 5, 7, 9, 11, column strides != 1 ->
  ``ERR_FIELD``; slots 0, 1 store; count 0 -> ``ERR_DIM``; mode != 0 -> ``ERR_MODE``.
"""

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..golden.isa import (ELEMENTWISE_OPS, ERR_DIM, ERR_FIELD, ERR_LOOP, ERR_MODE, ERR_OPCODE,
                          ERR_STORE, GATHER_OPS, MNEMONICS, OP_BARRIER, OP_CONTRACT, OP_END,
                          OP_ENDLOOP, OP_LOOP, OP_UPDATE, REDUCE_OPS, STORE_NAMES, WORDS)
from ..golden.isa import _EW_IMM, _EW_SOURCES

__all__ = ["InstructionDecoder", "CLASS_NAMES"]

#: Instruction classes reported by :class:`InstructionDecoder` (one-hot ``cls`` bits).
CLASS_NAMES = ("end", "barrier", "loop", "endloop", "contract", "elementwise", "reduce",
               "gather", "update")


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
    """

    def __init__(self):
        super().__init__({
            "word": In(32 * WORDS), "error": Out(4), "cls": Out(len(CLASS_NAMES)),
            "op": Out(8), "flags": Out(8), "step": Out(2).array(3), "store": Out(8).array(3),
        })

    def elaborate(self, platform):
        m = Module()
        w = [self.word[32 * i: 32 * (i + 1)] for i in range(WORDS)]
        op = w[0][0:8]
        flags = w[0][8:16]
        stepw = w[0][16:22]
        step = [stepw[0:2], stepw[2:4], stepw[4:6]]
        store = [w[1][0:8], w[1][8:16], w[1][16:24]]
        m.d.comb += [self.op.eq(op), self.flags.eq(flags)]
        m.d.comb += [self.step[s].eq(step[s]) for s in range(3)]
        m.d.comb += [self.store[s].eq(store[s]) for s in range(3)]
        rows, cols = w[2][0:16], w[2][16:32]
        nstores = len(STORE_NAMES)

        def bad_store(s):
            return store[s] >= nstores

        def batch(s):
            return w[7 + 4 * s] != 0

        def any_nz(idx):
            out = 0
            for i in idx:
                out = out | (w[i] != 0)
            return out

        def slot_unused_bad(s):
            return (store[s] != 0) | (step[s] != 0) | any_nz(range(4 + 4 * s, 8 + 4 * s))

        def slot_checks(s):
            return [(bad_store(s), ERR_STORE), (batch(s), ERR_FIELD)]

        is_op = {v: Signal(name=f"is_{k}") for k, v in
                 [("end", OP_END), ("barrier", OP_BARRIER), ("loop", OP_LOOP),
                  ("endloop", OP_ENDLOOP), ("contract", OP_CONTRACT), ("update", OP_UPDATE)]}
        for v, sig in is_op.items():
            m.d.comb += sig.eq(op == v)
        is_ew = Signal()
        is_red = Signal()
        is_gat = Signal()
        m.d.comb += [is_ew.eq(_any(op == v for v in ELEMENTWISE_OPS.values())),
                     is_red.eq(_any(op == v for v in REDUCE_OPS.values())),
                     is_gat.eq(_any(op == v for v in GATHER_OPS.values()))]
        m.d.comb += self.cls.eq(Cat(*[is_op[OP_END], is_op[OP_BARRIER], is_op[OP_LOOP],
                                          is_op[OP_ENDLOOP], is_op[OP_CONTRACT], is_ew, is_red,
                                          is_gat, is_op[OP_UPDATE]]))
        assigned = 0
        for v in MNEMONICS:
            assigned = assigned | (op == v)

        with m.If((w[0][22:32] != 0) | (w[1][24:32] != 0)):
            m.d.comb += self.error.eq(ERR_FIELD)
        with m.Elif(~assigned):
            m.d.comb += self.error.eq(ERR_OPCODE)
        with m.Elif(is_op[OP_END] | is_op[OP_BARRIER] | is_op[OP_ENDLOOP]):
            _first(m, self.error, [((flags != 0) | (stepw != 0) | (w[1] != 0)
                                    | any_nz(range(2, WORDS)), ERR_FIELD)])
        with m.Elif(is_op[OP_LOOP]):
            _first(m, self.error, [
                ((flags != 0) | (stepw != 0) | (w[1] != 0) | any_nz([3] + list(range(7, WORDS))),
                 ERR_FIELD),
                (w[2] == 0, ERR_LOOP)])
        with m.Elif(is_op[OP_CONTRACT]):
            _first(m, self.error, [
                (flags > 1, ERR_FIELD),
                ((rows == 0) | (cols == 0) | (w[3][0:16] == 0) | (w[3][16:32] == 0), ERR_DIM),
                (bad_store(1), ERR_STORE), (bad_store(2), ERR_STORE),
                (bad_store(0), ERR_STORE)])
        for name, code in ELEMENTWISE_OPS.items():
            nsrc = _EW_SOURCES[name]
            with m.Elif(op == code):
                checks = [(flags != 0, ERR_FIELD)]
                for s in range(nsrc + 1, 3):
                    checks.append((slot_unused_bad(s), ERR_FIELD))
                if name not in _EW_IMM:
                    checks.append((w[3] != 0, ERR_FIELD))
                for s in range(nsrc + 1):
                    checks += slot_checks(s)
                checks.append(((rows == 0) | (cols == 0), ERR_DIM))
                _first(m, self.error, checks)
        with m.Elif(is_red):
            _first(m, self.error, [
                (flags > 1, ERR_FIELD), (slot_unused_bad(2), ERR_FIELD), (w[3] != 0, ERR_FIELD),
                *slot_checks(0), *slot_checks(1),
                ((rows == 0) | (cols == 0), ERR_DIM),
                (w[6] != 0, ERR_FIELD)])
        with m.Elif(is_gat):
            _first(m, self.error, [
                (flags != 0, ERR_FIELD), *slot_checks(0), *slot_checks(1), *slot_checks(2),
                ((rows == 0) | (cols == 0) | (w[3] == 0), ERR_DIM),
                (w[14] != 0, ERR_FIELD)])
        with m.Elif(is_op[OP_UPDATE]):
            _first(m, self.error, [
                (flags > 15, ERR_FIELD), (slot_unused_bad(2), ERR_FIELD),
                (any_nz([5, 7, 9, 11]), ERR_FIELD),
                ((w[6] != 1) | (w[10] != 1), ERR_FIELD),
                (bad_store(0), ERR_STORE), (bad_store(1), ERR_STORE),
                (w[2] == 0, ERR_DIM),
                (flags != 0, ERR_MODE)])
        return m
