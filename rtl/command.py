"""The command the sequencer hands a vector or update unit: one decoded instruction.

:data:`VectorCommand` is the payload of the sequencer's ``vec`` and ``upd`` streams
(:class:`~ttrain.rtl.sequencer.Sequencer`) and of :class:`~ttrain.rtl.vector_wide.
WideVectorUnit`'s ``cmd`` stream. Its fields are the instruction's (``golden/isa.py``) with the
loop-stepped bases applied: ``op`` (the opcode of :data:`ttrain.golden.isa.OPS`), ``flags``
(the instruction's flags byte: bit 0 = ``accumulate`` of a reduction, bits [3:0] = the UPDATE
mode of :data:`ttrain.golden.isa.UPDATE_MODES`), ``rows``/``cols`` (UPDATE: 1 / count),
``imm`` (immediate, UPDATE's ``lr``, gather/scatter's ``table_rows``) and the three slots
(0 = written, 1, 2 = read). The first field is the least significant.
"""

from amaranth.lib import data

from ..golden.isa import OPS, STORE_IDS, Instruction

__all__ = ["VectorView", "VectorCommand", "VECTOR_OPCODES", "vector_command"]

#: Opcodes a vector or update unit executes (every :data:`~ttrain.golden.isa.OPS` entry of
#: unit ``"vector"`` or ``"update"``).
VECTOR_OPCODES = tuple(s.opcode for s in OPS if s.unit in ("vector", "update"))

#: One operand slot: store id and the strided view (addresses are 32-bit words).
VectorView = data.StructLayout({"store": 2, "base": 32, "row": 32, "col": 32})

#: A decoded vector/update instruction (see the module docstring).
VectorCommand = data.StructLayout({
    "op": 8, "flags": 8, "rows": 16, "cols": 32, "imm": 32,
    "v0": VectorView, "v1": VectorView, "v2": VectorView,
})


def _view_fields(view):
    if view is None:
        return {"store": 0, "base": 0, "row": 0, "col": 0}
    return {"store": STORE_IDS[view.store], "base": view.base, "row": view.row_stride,
            "col": view.col_stride}


def vector_command(instr):
    """Return the :data:`VectorCommand` field dict of a golden vector or update instruction
    (its loop-stepped bases already applied), from its own encoding (``encode_fields``)."""
    if not isinstance(instr, Instruction) or instr.spec.unit not in ("vector", "update"):
        raise TypeError(f"vector_command takes an Elementwise, Reduce, Gather or Update "
                        f"instruction, not {type(instr).__name__}; CONTRACT goes to the engine")
    w = [0] * 16
    flags = instr.encode_fields(w)
    if instr.spec.unit == "update":
        rows, cols = 1, w[2]
    else:
        rows, cols = w[2] & 0xFFFF, w[2] >> 16
    v0, v1, v2 = instr.views
    return {"op": instr.spec.opcode, "flags": flags, "rows": rows, "cols": cols, "imm": w[3],
            "v0": _view_fields(v0), "v1": _view_fields(v1), "v2": _view_fields(v2)}
