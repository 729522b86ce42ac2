"""Reference vector unit: the ISA's vector instructions one element at a time (a test model).

Not part of the accelerator (the top uses :class:`ttrain.rtl.vector_wide.WideVectorUnit`): the
Amaranth-simulator tests of the sequencer use this simple unit, with random stalls
(``handshake=True``), as the vector and update units behind it.

Executes one decoded instruction at a time over strided store views, bit-exactly as
:func:`ttrain.golden.interpreter.run`:

* elementwise ``add``, ``sub``, ``mul``, ``scale``, ``addi`` (one :class:`~ttrain.rtl.fp32.FP32Add`
  or :class:`~ttrain.rtl.fp32.FP32Mul` rounding each; ``sub`` flips bit 31 of ``b``, which is
  :func:`ttrain.golden.numerics.fp32_sub` by definition), ``copy`` and ``fill`` (words moved
  unchanged);
* row reductions ``rsum`` (sequential ``fp32_add`` from ``-0.0``, or from the old ``d[i]`` with
  ``accumulate``) and ``rmax`` (sequential :class:`~ttrain.rtl.fp32.FP32Compare` maximum from
  ``a[i, 0]``, or from the old ``d[i]``);
* UPDATE (``theta = fp32_sub(theta, fp32_mul(lr, g))``, then ``g = +0``; ``rows`` 1, ``cols``
  = count, ``imm`` = lr), so a second instance serves as the sequencer's update unit;
* ``gather`` (``d[r, c] = table[idx[r], c]``) and ``scatter_add``
  (``table[idx[r], c] += a[r, c]`` in index-list order). Every index is checked against
  ``table_rows`` *before* anything is written; an index outside the table ends the instruction
  with error :data:`ttrain.golden.isa.ERR_INDEX` and no store word changed.

The unit does not check address ranges, store ids or field legality: the sequencer does that
before it issues an instruction (``golden.interpreter.check_program`` semantics).

**Not implemented here:** the special-function ops (``exp recip rsqrt tanh tanh_grad gelu
gelu_grad log``, :data:`ttrain.golden.isa.SPECIAL_OPS`): this one-element unit has no
special-function datapath and ends such a command at once with ``ERR_OPCODE``, writing nothing;
the accelerator top uses :class:`~ttrain.rtl.vector_wide.WideVectorUnit` with ``special=True``.
Elementwise ``max`` uses the compare unit, like ``rmax``.

Micro-architecture: one element at a time (read operand(s), one FP unit pass, write), which
keeps reads strictly after the previous element's write (in-place views, repeated scatter
indices and reduction accumulators are then trivially correct). Throughput is about
``latency + 4`` cycles per element for arithmetic ops and 3 for moves; see
``docs/sequencer.md``.

Memory interface: one read request per cycle (``rd_en``, ``rd_store``, ``rd_addr``) answered by
``rd_data`` exactly one cycle later (the banked stores' timing), and one write per cycle
(``wr_en``, ``wr_store``, ``wr_addr``, ``wr_data``). The unit never reads and writes in the same
cycle.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..golden.prng import GAMMA
from ..golden.isa import (PERTURB_OPS, RANDOM_OPS, ELEMENTWISE_OPS, ERR_INDEX, ERR_OPCODE,
                          GATHER_OPS, OP_UPDATE, REDUCE_OPS, SPECIAL_OPS)
from ..golden.numerics import NEG_ZERO
from ..rtl.command import VectorCommand, VectorView
from ..rtl.fp32 import FP32Add, FP32Compare, FP32Mul
from ..rtl import intops
from ..rtl.vector_wide import _draw, _mix32, _or

__all__ = ["VectorUnit"]

def _any(conds):
    out = 0
    for cnd in conds:
        out = out | cnd
    return out


class VectorUnit(wiring.Component):
    """Elementwise / reduce / gather unit (one instruction at a time).

    Golden: the Elementwise, Reduce and Gather cases of
    :func:`ttrain.golden.interpreter.run`.

    Parameters
    ----------
    addr_bits : int
        Width of ``rd_addr``/``wr_addr`` (word address inside a store), 1..32. Addresses are
        computed in 32 bits and truncated.
    handshake : bool
        False (default): fixed timing, a read is accepted at once and ``rd_data`` holds the
        word one cycle later; ``rd_ready``, ``rd_valid``, ``wr_ready`` are ignored. True: a
        read is accepted in a cycle with ``rd_en & rd_ready``, its word is taken in the first
        later cycle with ``rd_valid`` (one read outstanding at a time); a write lands in a
        cycle with ``wr_en & wr_ready`` (for a shared port behind an arbiter or FIFO).

    Members
    -------
    cmd : ``In(stream.Signature(VectorCommand))``
        Instructions; ``ready`` while idle.
    busy : ``Out(1)``
        High from the accepted command to ``done``.
    done : ``Out(1)``
        One-cycle pulse at the end of an instruction; ``error`` is valid with it.
    error : ``Out(4)``
        0, or :data:`ttrain.golden.isa.ERR_INDEX` (nothing was written).
    rd_en, rd_store, rd_addr : ``Out(1)``, ``Out(2)``, ``Out(addr_bits)``
        Read request; ``rd_data`` (``In(32)``) holds the word one cycle later (fixed timing)
        or while ``rd_valid`` (handshake). ``rd_ready``, ``rd_valid``, ``wr_ready``: ``In(1)``.
    wr_en, wr_store, wr_addr, wr_data : ``Out(1)``, ``Out(2)``, ``Out(addr_bits)``, ``Out(32)``
        Write request.
    elements : ``Out(32)``
        Elements processed so far (``rows * cols`` per instruction, as the interpreter's
        ``stats.elementwise``; wraps), for the host's counters.
    """

    def __init__(self, *, addr_bits=32, handshake=False):
        if isinstance(addr_bits, bool) or not isinstance(addr_bits, int) \
                or not 1 <= addr_bits <= 32:
            raise ValueError(f"VectorUnit addr_bits must be an int in 1..32, not {addr_bits!r};"
                             f" use ceil(log2(largest store words))")
        if not isinstance(handshake, bool):
            raise TypeError(f"VectorUnit handshake must be a bool, not {handshake!r}")
        self._addr_bits = addr_bits
        self._handshake = handshake
        super().__init__({
            "rd_ready": In(1), "rd_valid": In(1), "wr_ready": In(1),
            "cmd": In(stream.Signature(VectorCommand)),
            "busy": Out(1), "done": Out(1), "error": Out(4),
            "rd_en": Out(1), "rd_store": Out(2), "rd_addr": Out(addr_bits), "rd_data": In(32),
            "wr_en": Out(1), "wr_store": Out(2), "wr_addr": Out(addr_bits), "wr_data": Out(32),
            "elements": Out(32),
        })

    addr_bits = property(lambda self: self._addr_bits, doc="Word address width.")

    def elaborate(self, platform):
        m = Module()
        m.submodules.add = add = FP32Add()
        m.submodules.mul = mul = FP32Mul()
        m.submodules.cmp = cmp = FP32Compare(latency=1)

        c = Signal(VectorCommand)
        if self._handshake:
            rd_ok, wr_ok, rvalid = self.rd_ready, self.wr_ready, self.rd_valid
        else:
            rd_ok, wr_ok = Const(1, 1), Const(1, 1)
            rvalid = Signal()
            m.d.sync += rvalid.eq(self.rd_en)
        phase = Signal()          # UPDATE: 0 = lr * g, 1 = theta - that
        op = c.op
        ew = {k: op == v for k, v in ELEMENTWISE_OPS.items()}
        is_sum = op == REDUCE_OPS["sum"]
        is_max = op == REDUCE_OPS["max"]
        is_red = is_sum | is_max
        is_gather = op == GATHER_OPS["gather"]
        is_scatter = op == GATHER_OPS["scatter_add"]
        is_idx = is_gather | is_scatter
        two_src = (ew["add"] | ew["sub"] | ew["mul"] | ew["max"] | ew["iadd"] | ew["requant"]
                   | ew["ins8"] | ew["ins16"] | ew["fcmp"] | ew["bitop"])
        int_op = (ew["i2f"] | ew["f2i"] | ew["iadd"] | ew["requant"] | ew["ext8"] | ew["ins8"]
                  | ew["ext16"] | ew["ins16"]
                  | ew["fcmp"] | ew["bitop"])
        rnd = {k: op == v for k, v in RANDOM_OPS.items()}
        is_racc = rnd["raccum"]
        is_pert = _or(rnd[k] for k in PERTURB_OPS)          # golden.isa.PERTURB_OPS
        pert_neg = _or(rnd[k] for k, (_, sign) in PERTURB_OPS.items() if sign < 0)
        pert8 = _or(rnd[k] for k, (bits, _) in PERTURB_OPS.items() if bits == 8)
        two_src = two_src | is_racc            # raccum: a, then d's old word
        int_op = int_op | is_pert | rnd["rmask"]
        use_add = (ew["add"] | ew["sub"] | ew["addi"] | is_sum | is_scatter | is_racc
                   | rnd["runif"])
        use_mul = ew["mul"] | ew["scale"]
        use_cmp = is_max | ew["max"]                 # rmax, and elementwise max
        is_upd = op == OP_UPDATE
        arith = use_add | use_mul | use_cmp | is_upd
        mul_now = use_mul | (is_upd & ~phase)
        add_now = use_add | (is_upd & phase)

        i = Signal(16)            # row
        j = Signal(32)            # column
        rb = [Signal(32, name=f"rb{s}") for s in range(3)]     # row start addresses
        ad = [Signal(32, name=f"ad{s}") for s in range(3)]     # element addresses
        tab = Signal(32)          # gather/scatter table element address
        x = Signal(32)
        y = Signal(32)
        acc = Signal(32)
        res = Signal(32)
        err = Signal(4)
        views = [c.v0, c.v1, c.v2]

        # The table is slot 1 for gather, slot 0 for scatter_add.
        tview = Signal(VectorView)
        m.d.comb += tview.eq(Mux(is_gather, c.v1, c.v0))

        # first operand address: the table for gather ops, the accumulator's d for reduce
        # start, else slot 1
        x_store = Mux(is_idx, tview.store, c.v1.store)
        x_addr = Mux(is_idx, tab, ad[1])
        # second operand: slot 2 for two-source ops, slot 1 (a) for scatter_add
        # (UPDATE: x = g from slot 1, y = theta from slot 0)
        y_store = Mux(is_scatter, c.v1.store, Mux(is_upd | is_racc, c.v0.store, c.v2.store))
        y_addr = Mux(is_scatter, ad[1], Mux(is_upd | is_racc, ad[0], ad[2]))
        # PRNG ops: keys from the seed word (read first), the element's dense index
        key0 = Signal(32)
        key1 = Signal(32)
        r_idx = Signal(32)
        m.d.comb += r_idx.eq(c.imm + i * c.cols + j)
        r_draw = _draw(m, r_idx, key0, key1, "rdraw")
        r_neg = r_draw[31]
        r_sig = Signal(signed(10))
        m.d.comb += r_sig.eq(Mux(r_neg ^ pert_neg, -c.flags.as_unsigned(), c.flags))
        i_pert = intops.iadd(m, x, r_sig, Mux(pert8, 8, 32), name="pert")
        r_mask = Signal(32)                  # rmask: all ones where draw < a (unsigned)
        m.d.comb += r_mask.eq(Mux(r_draw < x, 0xFFFFFFFF, 0))
        r24 = Signal(32)
        m.d.comb += r24.eq(r_draw[8:32])
        r_ubits = intops.i2f(m, r24, name="unif")
        r_unif = Signal(32)
        m.d.comb += r_unif.eq(Mux(r_ubits == 0, 0, r_ubits - (24 << 23)))

        last_col = j == c.cols - 1
        last_row = i == c.rows - 1

        m.d.comb += [self.busy.eq(~self.cmd.ready), self.error.eq(err)]
        m.d.sync += [self.done.eq(0)]

        # FP unit inputs (driven in EXEC)
        unit_a = Signal(32)
        unit_b = Signal(32)
        m.d.comb += [
            add.i.payload.a.eq(unit_a), add.i.payload.b.eq(unit_b),
            mul.i.payload.a.eq(unit_a), mul.i.payload.b.eq(unit_b),
            cmp.i.payload.a.eq(unit_a), cmp.i.payload.b.eq(unit_b),
        ]
        with m.If(is_red):
            m.d.comb += [unit_a.eq(acc), unit_b.eq(x)]
        with m.Elif(is_upd & ~phase):
            m.d.comb += [unit_a.eq(c.imm), unit_b.eq(x)]
        with m.Elif(is_upd):
            m.d.comb += [unit_a.eq(y), unit_b.eq(res ^ NEG_ZERO)]
        with m.Elif(ew["sub"]):
            m.d.comb += [unit_a.eq(x), unit_b.eq(y ^ NEG_ZERO)]
        with m.Elif(is_racc):
            m.d.comb += [unit_a.eq(y), unit_b.eq(x ^ (r_neg << 31))]
        with m.Elif(rnd["runif"]):
            m.d.comb += [unit_a.eq(x), unit_b.eq(r_unif)]
        with m.Elif(ew["scale"] | ew["addi"]):
            m.d.comb += [unit_a.eq(x), unit_b.eq(c.imm)]
        with m.Else():
            m.d.comb += [unit_a.eq(x), unit_b.eq(y)]
        i_i2f = intops.i2f(m, x)
        i_f2i = intops.f2i(m, x, c.imm[0])
        i_add = intops.iadd(m, x, y, c.imm)
        i_rq = intops.requant(m, x, y, c.imm)
        i_ext = intops.ext8(m, x, c.imm)
        i_ins = intops.ins8(m, x, y, c.imm)
        i_ext16 = intops.ext16(m, x, c.imm)
        i_ins16 = intops.ins16(m, x, y, c.imm)
        i_cmp = intops.fcmp(m, x, y, c.imm)
        i_bit = intops.bitop(m, x, y, c.imm)
        unit_valid = Mux(use_cmp, cmp.o.valid, Mux(mul_now, mul.o.valid, add.o.valid))
        unit_out = Mux(use_cmp, cmp.o.payload.max, Mux(mul_now, mul.o.payload, add.o.payload))

        def start_row_addrs(next_rb):
            """Set ad[s] = rb[s] = next_rb[s]."""
            for s in range(3):
                m.d.sync += [rb[s].eq(next_rb[s]), ad[s].eq(next_rb[s])]

        with m.FSM(name="vec"):
            with m.State("IDLE"):
                m.d.comb += self.cmd.ready.eq(1)
                with m.If(self.cmd.valid):
                    m.d.sync += [c.eq(self.cmd.payload), i.eq(0), j.eq(0), err.eq(0),
                                 phase.eq(0)]
                    start_row_addrs([v.base for v in
                                     (self.cmd.payload.v0, self.cmd.payload.v1,
                                      self.cmd.payload.v2)])
                    p = self.cmd.payload
                    with m.If(_any(p.op == code for code in SPECIAL_OPS.values())):
                        # no special-function datapath here: refuse, never write wrong words
                        m.d.sync += [err.eq(ERR_OPCODE), self.done.eq(1)]
                    with m.Elif((p.op == GATHER_OPS["gather"])
                                | (p.op == GATHER_OPS["scatter_add"])):
                        m.next = "CHK_RD"
                    with m.Elif(_any(p.op == code for code in RANDOM_OPS.values())):
                        m.next = "SEED_RD"
                    with m.Else():
                        m.next = "ROW"

            # ---- PRNG ops: the seed word, then the keys ----------------------------------------
            with m.State("SEED_RD"):
                m.d.comb += [self.rd_en.eq(1), self.rd_store.eq(c.v2.store),
                             self.rd_addr.eq(c.v2.base)]
                with m.If(rd_ok):
                    m.next = "SEED_KEY"
            with m.State("SEED_KEY"):
                with m.If(rvalid):
                    k0 = _mix32(m, self.rd_data + GAMMA, "seedmix")
                    m.d.sync += [key0.eq(k0), key1.eq(Cat(k0[16:32], k0[0:16]))]
                    m.next = "ROW"

            # ---- index pre-pass: every idx < table_rows, before any write -----------------
            with m.State("CHK_RD"):
                m.d.comb += [self.rd_en.eq(1), self.rd_store.eq(c.v2.store),
                             self.rd_addr.eq(rb[2])]
                with m.If(rd_ok):
                    m.next = "CHK_CMP"
            with m.State("CHK_CMP"):
                with m.If(~rvalid):
                    pass
                with m.Elif(self.rd_data >= c.imm):
                    m.d.sync += [err.eq(ERR_INDEX), self.done.eq(1)]
                    m.next = "IDLE"
                with m.Elif(last_row):
                    m.d.sync += [i.eq(0), rb[2].eq(c.v2.base), ad[2].eq(c.v2.base)]
                    m.next = "ROW"
                with m.Else():
                    m.d.sync += [i.eq(i + 1), rb[2].eq(rb[2] + c.v2.row)]
                    m.next = "CHK_RD"

            # ---- row start --------------------------------------------------------------
            with m.State("ROW"):
                with m.If(is_idx):
                    m.d.comb += [self.rd_en.eq(1), self.rd_store.eq(c.v2.store),
                                 self.rd_addr.eq(rb[2])]
                    with m.If(rd_ok):
                        m.next = "ROW_IDX"
                with m.Elif(is_red & c.flags[0]):
                    m.d.comb += [self.rd_en.eq(1), self.rd_store.eq(c.v0.store),
                                 self.rd_addr.eq(rb[0])]
                    with m.If(rd_ok):
                        m.next = "ROW_ACC"
                with m.Else():
                    m.d.sync += acc.eq(NEG_ZERO)
                    m.next = "RD1"
            with m.State("ROW_IDX"):
                with m.If(rvalid):
                    m.d.sync += tab.eq(tview.base + (self.rd_data * tview.row)[:32])
                    m.next = "RD1"
            with m.State("ROW_ACC"):
                with m.If(rvalid):
                    m.d.sync += acc.eq(self.rd_data)
                    m.next = "RD1"

            # ---- one element ------------------------------------------------------------
            with m.State("RD1"):
                with m.If(ew["fill"]):
                    m.d.sync += res.eq(c.imm)
                    m.next = "WRITE"
                with m.Else():
                    m.d.comb += [self.rd_en.eq(1), self.rd_store.eq(x_store),
                                 self.rd_addr.eq(x_addr)]
                    with m.If(rd_ok):
                        m.next = "RD2"
            with m.State("RD2"):
                with m.If(rvalid):
                    m.d.sync += [x.eq(self.rd_data), res.eq(self.rd_data)]
                with m.If(~rvalid):
                    pass
                with m.Elif(two_src | is_scatter | is_upd):
                    m.next = "RDY"
                with m.Elif(int_op):
                    m.next = "INT"
                with m.Elif(is_max & (j == 0) & ~c.flags[0]):
                    # rmax starts from a[i, 0] itself
                    m.d.sync += acc.eq(self.rd_data)
                    m.next = "NEXT"
                with m.Elif(arith):
                    m.next = "EXEC"
                with m.Else():                   # copy, gather: the word unchanged
                    m.next = "WRITE"
            with m.State("RDY"):
                m.d.comb += [self.rd_en.eq(1), self.rd_store.eq(y_store),
                             self.rd_addr.eq(y_addr)]
                with m.If(rd_ok):
                    m.next = "RD3"
            with m.State("RD3"):
                with m.If(rvalid):
                    m.d.sync += y.eq(self.rd_data)
                    with m.If(int_op):
                        m.next = "INT"
                    with m.Else():
                        m.next = "EXEC"
            with m.State("INT"):                   # integer ops (rtl.intops), combinational
                m.d.sync += res.eq(Mux(is_pert, i_pert, Mux(rnd["rmask"], r_mask,
                                       Mux(ew["i2f"], i_i2f, Mux(ew["f2i"], i_f2i, Mux(
                                           ew["iadd"], i_add, Mux(ew["ext16"], i_ext16, Mux(
                                           ew["ins16"], i_ins16, Mux(ew["ext8"], i_ext, Mux(
                                               ew["ins8"], i_ins, Mux(ew["fcmp"], i_cmp, Mux(
                                                   ew["bitop"], i_bit, i_rq))))))))))))
                m.next = "WRITE"
            with m.State("EXEC"):
                m.d.comb += [add.i.valid.eq(add_now), mul.i.valid.eq(mul_now),
                             cmp.i.valid.eq(use_cmp)]
                m.next = "WAIT"
            with m.State("WAIT"):
                with m.If(unit_valid):
                    with m.If(is_red):
                        m.d.sync += acc.eq(unit_out)
                        m.next = "NEXT"
                    with m.Elif(is_upd & ~phase):
                        m.d.sync += [res.eq(unit_out), phase.eq(1)]
                        m.next = "EXEC"
                    with m.Else():
                        m.d.sync += res.eq(unit_out)
                        m.next = "WRITE"
            with m.State("WRITE"):
                m.d.comb += [self.wr_en.eq(1),
                             self.wr_store.eq(c.v0.store),
                             self.wr_addr.eq(Mux(is_scatter, tab, ad[0])),
                             self.wr_data.eq(res)]
                with m.If(~wr_ok):
                    pass
                with m.Elif(is_upd):
                    m.d.sync += phase.eq(0)
                    m.next = "WRITE_G"
                with m.Else():
                    m.d.sync += phase.eq(0)
                    m.next = "NEXT"
            with m.State("WRITE_G"):              # UPDATE clears the gradient word
                m.d.comb += [self.wr_en.eq(1), self.wr_store.eq(c.v1.store),
                             self.wr_addr.eq(ad[1]), self.wr_data.eq(0)]
                with m.If(wr_ok):
                    m.next = "NEXT"
            with m.State("NEXT"):
                m.d.sync += self.elements.eq(self.elements + 1)
                with m.If(~last_col):
                    m.d.sync += [j.eq(j + 1), tab.eq(tab + tview.col)]
                    for s in range(3):
                        m.d.sync += ad[s].eq(ad[s] + views[s].col)
                    m.next = "RD1"
                with m.Elif(is_red):
                    m.next = "RED_WRITE"
                with m.Else():
                    m.next = "ROW_END"
            with m.State("RED_WRITE"):
                m.d.comb += [self.wr_en.eq(1), self.wr_store.eq(c.v0.store),
                             self.wr_addr.eq(rb[0]), self.wr_data.eq(acc)]
                with m.If(wr_ok):
                    m.next = "ROW_END"
            with m.State("ROW_END"):
                with m.If(last_row):
                    m.d.sync += self.done.eq(1)
                    m.next = "IDLE"
                with m.Else():
                    m.d.sync += [i.eq(i + 1), j.eq(0)]
                    start_row_addrs([rb[s] + views[s].row for s in range(3)])
                    m.next = "ROW"
        return m
