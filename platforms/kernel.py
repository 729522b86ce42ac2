"""A Vitis RTL kernel around the accelerator: ``s_axi_control`` + one AXI4 master ``m_axi_gmem``.

Golden: the kernel adds no arithmetic. A command buffer played through it leaves every store
word equal to :func:`ttrain.golden.interpreter.run` of the same program on the same image, and
the words it writes back are store words or the accelerator's status counters.

One invocation (host writes the arguments, then ``ap_start``)::

    program buffer ──(16 words per instruction)──► instruction memory     (if program_length)
    command buffer ──► WRITE store words ──► stores (engine host port)
                   ──► READ  store range ──► results buffer
                   ──► RUN   start, wait ──► results buffer (16-word status record)
    trailer (8 words: magic, kernel error, ...) ──► results buffer; then ap_done (+ interrupt)

The stores and the instruction memory keep their contents between invocations, so the
parameters stay on chip: the first call loads the program and the whole image, later calls
write only the new inputs, run and read back what they need.

Register map (:data:`REGISTER_MAP`, the single source for the RTL, ``platforms/vitis.py``'s
``kernel.xml``/``package_xo`` script and ``platforms/host/driver.py``): the Vitis ``ap_ctrl_hs``
block (``CTRL`` 0x00: ``ap_start`` bit 0, ``ap_done`` bit 1 (clear on read), ``ap_idle`` bit
2, ``ap_ready`` bit 3 (clear on read), ``auto_restart`` bit 7; ``GIE`` 0x04; ``IER`` 0x08;
``ISR`` 0x0C, toggle on write), then the arguments of :data:`KERNEL_ARGS` from 0x10.

Command buffer (the host protocol of :mod:`ttrain.platforms.protocol`: 32-bit words,
:data:`HEADER_WORDS`-word headers ``op, store, addr, count``):

``CMD_WRITE`` (1)
    ``count`` words follow; they go to store id ``store`` from word ``addr``.
``CMD_READ`` (2)
    Append store words ``addr .. addr + count - 1`` to the results buffer.
``CMD_RUN`` (3)
    Start the loaded program (``store``, ``addr``, ``count`` ignored); when it ends append a
    :data:`RUN_FIELDS` record of :data:`RUN_RECORD_WORDS` words.

A malformed command (unknown opcode, store id, a range past the store, a block longer than
the buffer, results past ``result_words``) stops the invocation with a :data:`KERNEL_ERRORS`
code in the trailer (:data:`TRAILER_FIELDS`); the stores keep what the commands before it wrote.

``m_axi_gmem`` is 32 bits wide: every buffer is a stream of 32-bit words at any word address,
bursts of up to 256 beats never cross a 1 KiB boundary (so never a 4 KiB one); up to two read
bursts and one write burst in flight. See ``docs/vitis-kernel.md`` for the choice and its cost.
"""

from dataclasses import dataclass

from amaranth.hdl import Array, Cat, ClockDomain, Const, Module, Mux, Signal
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ..golden.isa import STORE_IDS, STORE_NAMES
from ..rtl.top import Accelerator
from .protocol import (CMD_READ, CMD_RUN, CMD_WRITE, HEADER_WORDS, KERNEL_ERRORS, KERR_AXI,
                       KERR_NO_PROGRAM, KERR_NONE, KERR_OPCODE, KERR_PROGRAM, KERR_RANGE,
                       KERR_RESULTS, KERR_STORE, KERR_TRUNCATED, RUN_FIELDS, RUN_RECORD_WORDS,
                       RUN_TAG, TRAILER_FIELDS, TRAILER_MAGIC, TRAILER_WORDS)

__all__ = ["VitisKernel", "Register", "CONTROL_REGISTERS", "KERNEL_ARGS", "REGISTER_MAP",
           "register", "KERNEL_NAME", "CONTROL_ADDR_BITS", "GMEM_ADDR_BITS", "GMEM_DATA_BITS",
           "CMD_WRITE", "CMD_READ", "CMD_RUN", "HEADER_WORDS", "RUN_RECORD_WORDS", "RUN_TAG",
           "RUN_FIELDS", "TRAILER_WORDS", "TRAILER_MAGIC", "TRAILER_FIELDS", "KERNEL_ERRORS",
           "KERR_NONE", "KERR_OPCODE", "KERR_STORE", "KERR_TRUNCATED", "KERR_RANGE",
           "KERR_RESULTS", "KERR_PROGRAM", "KERR_NO_PROGRAM", "KERR_AXI",
           "axi_lite_ports", "axi_master_ports"]


@dataclass(frozen=True)
class Register:
    """One register or kernel argument of ``s_axi_control``.

    Attributes
    ----------
    name : str
        Register name (``CTRL``...) or kernel argument name.
    offset : int
        Byte offset of the (low) word.
    width : int
        Bits: 32, or 64 for a buffer address (low word at ``offset``, high at ``offset + 4``).
    kind : str
        ``"control"`` (ap_ctrl_hs block), ``"pointer"`` (a global-memory buffer on
        ``m_axi_gmem``) or ``"scalar"`` (a 32-bit unsigned value).
    doc : str
        Meaning.
    """
    name: str
    offset: int
    width: int
    kind: str
    doc: str

    @property
    def size(self):
        """Bytes."""
        return self.width // 8


#: The Vitis ``ap_ctrl_hs`` block.
CONTROL_REGISTERS = (
    Register("CTRL", 0x00, 32, "control",
             "bit 0 ap_start (write 1; cleared by ap_ready unless auto_restart), bit 1 "
             "ap_done (clear on read), bit 2 ap_idle, bit 3 ap_ready (clear on read), bit 7 "
             "auto_restart"),
    Register("GIE", 0x04, 32, "control", "bit 0: global interrupt enable"),
    Register("IER", 0x08, 32, "control", "bit 0: ap_done interrupt, bit 1: ap_ready interrupt"),
    Register("ISR", 0x0C, 32, "control",
             "bit 0: ap_done, bit 1: ap_ready interrupt pending (write 1 to toggle)"),
)

#: Kernel arguments, in argument order (the XRT ``set_arg`` index is the position).
KERNEL_ARGS = (
    Register("program", 0x10, 64, "pointer",
             "program buffer: program_length instructions of 16 words"),
    Register("commands", 0x18, 64, "pointer", "command buffer of command_words words"),
    Register("results", 0x20, 64, "pointer", "results buffer of result_words words"),
    Register("program_length", 0x28, 32, "scalar",
             "instructions to load into the instruction memory; 0 keeps the loaded program"),
    Register("command_words", 0x2C, 32, "scalar", "words in the command buffer"),
    Register("result_words", 0x30, 32, "scalar",
             "capacity of the results buffer in words (records + 8-word trailer)"),
)

#: Every register of ``s_axi_control``: (control block, then the arguments).
REGISTER_MAP = CONTROL_REGISTERS + KERNEL_ARGS


def register(name):
    """Return the :class:`Register` called ``name`` from :data:`REGISTER_MAP`."""
    for reg in REGISTER_MAP:
        if reg.name == name:
            return reg
    raise ValueError(f"no register {name!r}; registers are "
                     f"{', '.join(r.name for r in REGISTER_MAP)}")


#: Verilog module name of the kernel top and the Vitis kernel name.
KERNEL_NAME = "ttrain_kernel"
#: ``s_axi_control`` address bits (a 4 KiB window, ``range="0x1000"`` in kernel.xml).
CONTROL_ADDR_BITS = 12
#: ``m_axi_gmem`` address and data bits.
GMEM_ADDR_BITS = 64
GMEM_DATA_BITS = 32

def axi_lite_ports(prefix="s_axi_control", addr_bits=CONTROL_ADDR_BITS):
    """``[(name, direction, width)]`` of an AXI4-Lite slave (direction as seen by the kernel)."""
    return [(f"{prefix}_{n}", d, w) for n, d, w in (
        ("awvalid", "in", 1), ("awready", "out", 1), ("awaddr", "in", addr_bits),
        ("wvalid", "in", 1), ("wready", "out", 1), ("wdata", "in", 32), ("wstrb", "in", 4),
        ("bvalid", "out", 1), ("bready", "in", 1), ("bresp", "out", 2),
        ("arvalid", "in", 1), ("arready", "out", 1), ("araddr", "in", addr_bits),
        ("rvalid", "out", 1), ("rready", "in", 1), ("rdata", "out", 32), ("rresp", "out", 2))]


def axi_master_ports(prefix="m_axi_gmem", addr_bits=GMEM_ADDR_BITS, data_bits=GMEM_DATA_BITS):
    """``[(name, direction, width)]`` of an AXI4 master (direction as seen by the kernel).

    One-bit IDs (always 0, so responses return in order; their IDs are ignored) are included
    because AXI verification IP such as cocotbext-axi requires them; Vitis accepts them on an
    ``m_axi`` interface."""
    return [(f"{prefix}_{n}", d, w) for n, d, w in (
        ("awvalid", "out", 1), ("awready", "in", 1), ("awid", "out", 1),
        ("awaddr", "out", addr_bits),
        ("awlen", "out", 8), ("awsize", "out", 3), ("awburst", "out", 2),
        ("wvalid", "out", 1), ("wready", "in", 1), ("wdata", "out", data_bits),
        ("wstrb", "out", data_bits // 8), ("wlast", "out", 1),
        ("bvalid", "in", 1), ("bready", "out", 1), ("bid", "in", 1), ("bresp", "in", 2),
        ("arvalid", "out", 1), ("arready", "in", 1), ("arid", "out", 1),
        ("araddr", "out", addr_bits),
        ("arlen", "out", 8), ("arsize", "out", 3), ("arburst", "out", 2),
        ("rvalid", "in", 1), ("rready", "out", 1), ("rid", "in", 1), ("rdata", "in", data_bits),
        ("rlast", "in", 1), ("rresp", "in", 2))]


class _BurstReader(wiring.Component):
    """Stream ``words`` 32-bit words from byte address ``base`` (AR/R channels).

    Bursts of up to 256 beats that stop at 1 KiB boundaries, up to :attr:`OUTSTANDING` of
    them in flight (the next address goes out while the previous burst's data arrives, which
    hides the memory latency between bursts). ``abort`` (a pulse or level) stops issuing
    addresses and drops the data of the bursts in flight; ``busy`` falls when none is left.
    ``error`` latches an R response other than OKAY.
    """

    OUTSTANDING = 2

    def __init__(self):
        super().__init__({
            "start": In(1), "base": In(64), "words": In(32), "abort": In(1),
            "busy": Out(1), "error": Out(1), "o": Out(stream.Signature(32)),
            "arvalid": Out(1), "arready": In(1), "araddr": Out(64), "arlen": Out(8),
            "rvalid": In(1), "rready": Out(1), "rdata": In(32), "rlast": In(1),
            "rresp": In(2),
        })

    def elaborate(self, platform):
        m = Module()
        req_addr = Signal(64)
        req_left = Signal(32)           # words not yet asked for
        n = Signal(9)                   # beats of the next burst
        room = Signal(9)
        inflight = Signal(range(self.OUTSTANDING + 1))
        active = Signal()
        stopping = Signal()
        ar_valid = Signal()
        ar_len = Signal(8)
        m.d.comb += [room.eq(256 - req_addr[2:10]),
                     n.eq(Mux(req_left < room, req_left, room)),
                     self.arvalid.eq(ar_valid), self.araddr.eq(req_addr),
                     self.arlen.eq(ar_len)]
        issued = Signal()
        finished = Signal()
        m.d.comb += [issued.eq(ar_valid & self.arready),
                     finished.eq(self.rvalid & self.rready & self.rlast)]
        m.d.sync += inflight.eq(inflight + issued - finished)
        stop = stopping | self.abort
        m.d.comb += [self.o.payload.eq(self.rdata),
                     self.o.valid.eq(self.rvalid & ~stop),
                     self.rready.eq(self.o.ready | stop),
                     self.busy.eq(active)]
        with m.If(issued):
            m.d.sync += [ar_valid.eq(0), req_addr.eq(req_addr + (ar_len + 1) * 4),
                         req_left.eq(req_left - (ar_len + 1))]
        with m.Elif(~ar_valid & active & ~stop & (req_left != 0)
                    & (inflight < self.OUTSTANDING)):
            m.d.sync += [ar_valid.eq(1), ar_len.eq(n - 1)]    # held until arready
        with m.If(self.rvalid & self.rready & (self.rresp != 0)):
            m.d.sync += self.error.eq(1)
        with m.If(self.abort & active):
            m.d.sync += stopping.eq(1)
        with m.If(active & ~ar_valid & (inflight - finished == 0)
                  & ((req_left == 0) | stop)):
            m.d.sync += [active.eq(0), stopping.eq(0)]
        with m.If(self.start & ~active):
            m.d.sync += [req_addr.eq(self.base), req_left.eq(self.words), active.eq(1),
                         stopping.eq(0), self.error.eq(0)]
        return m


class _BurstWriter(wiring.Component):
    """Write a stream of 32-bit words to consecutive addresses from ``base`` (AW/W/B).

    Words collect in a 256-word FIFO; a burst goes out when the FIFO holds enough words to
    reach the next 1 KiB boundary (at most 256), or with ``flush`` whatever it holds. ``idle``:
    nothing buffered or in flight. ``start`` (while idle) sets the address. ``error`` latches a
    B response other than OKAY.
    """

    def __init__(self):
        super().__init__({
            "start": In(1), "base": In(64), "flush": In(1), "i": In(stream.Signature(32)),
            "idle": Out(1), "error": Out(1),
            "awvalid": Out(1), "awready": In(1), "awaddr": Out(64), "awlen": Out(8),
            "wvalid": Out(1), "wready": In(1), "wdata": Out(32), "wlast": Out(1),
            "bvalid": In(1), "bready": Out(1), "bresp": In(2),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.buf = buf = fifo.SyncFIFOBuffered(width=32, depth=256)
        m.d.comb += [buf.w_data.eq(self.i.payload), buf.w_en.eq(self.i.valid),
                     self.i.ready.eq(buf.w_rdy)]
        addr = Signal(64)
        beats = Signal(9)
        n = Signal(9)
        room = Signal(9)
        level = buf.level
        m.d.comb += [room.eq(256 - addr[2:10]), self.awaddr.eq(addr), self.awlen.eq(n - 1),
                     self.wdata.eq(buf.r_data), self.wlast.eq(beats == 1)]
        with m.FSM(name="wr"):
            with m.State("READY"):
                m.d.comb += self.idle.eq(level == 0)
                with m.If(self.start & (level == 0)):
                    m.d.sync += [addr.eq(self.base), self.error.eq(0)]
                with m.Elif((level >= room) | (self.flush & (level != 0))):
                    m.d.sync += n.eq(Mux(level < room, level, room))
                    m.next = "AW"
            with m.State("AW"):
                m.d.comb += self.awvalid.eq(1)
                with m.If(self.awready):
                    m.d.sync += beats.eq(n)
                    m.next = "W"
            with m.State("W"):
                m.d.comb += [self.wvalid.eq(buf.r_rdy), buf.r_en.eq(self.wready)]
                with m.If(self.wready & buf.r_rdy):
                    m.d.sync += [beats.eq(beats - 1), addr.eq(addr + 4)]
                    with m.If(beats == 1):
                        m.next = "B"
            with m.State("B"):
                m.d.comb += self.bready.eq(1)
                with m.If(self.bvalid):
                    with m.If(self.bresp != 0):
                        m.d.sync += self.error.eq(1)
                    m.next = "READY"
        return m


class VitisKernel(wiring.Component):
    """The accelerator as a Vitis RTL kernel (``ap_ctrl_hs``, one AXI4 master).

    Parameters
    ----------
    **config
        Keyword arguments of :class:`~ttrain.rtl.top.Accelerator` (``store_sizes``, ``lanes``,
        ``imem_depth``, ...).

    Members
    -------
    ap_clk, ap_rst_n : ``In(1)``
        Kernel clock and synchronous active-low reset (the design's only clock domain).
    s_axi_control_* : AXI4-Lite slave, :func:`axi_lite_ports` (12-bit addresses).
    m_axi_gmem_* : AXI4 master, :func:`axi_master_ports` (64-bit addresses, 32-bit data).
    interrupt : ``Out(1)``
        ``GIE & (ISR[0] | ISR[1])``.
    """

    def __init__(self, **config):
        if "store_sizes" not in config:
            raise ValueError("give store_sizes (and the other Accelerator arguments) as "
                             "keyword arguments: VitisKernel(store_sizes={...}, lanes=...)")
        self._config = dict(config)
        self._acc = Accelerator(**config)
        # built here for its store sizes and widths; it is elaborated inside the kernel, so
        # only an unused kernel itself should warn, not its parts
        for part in (self._acc, self._acc.engine, self._acc.sequencer):
            part._MustUse__silence = True
        members = {"ap_clk": In(1), "ap_rst_n": In(1), "interrupt": Out(1)}
        for name, d, w in axi_lite_ports() + axi_master_ports():
            members[name] = (In if d == "in" else Out)(w)
        super().__init__(members)

    accelerator = property(lambda self: self._acc, doc="The wrapped Accelerator.")
    config = property(lambda self: dict(self._config), doc="The Accelerator arguments.")

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = cd = ClockDomain("sync", local=True)
        m.d.comb += [cd.clk.eq(self.ap_clk), cd.rst.eq(~self.ap_rst_n)]
        m.submodules.acc = acc = self._acc
        m.submodules.reader = rd = _BurstReader()
        m.submodules.writer = wr = _BurstWriter()

        def port(name):
            return getattr(self, name)

        # ---- m_axi_gmem --------------------------------------------------------------------
        g = "m_axi_gmem_"
        m.d.comb += [
            port(g + "arvalid").eq(rd.arvalid), rd.arready.eq(port(g + "arready")),
            port(g + "araddr").eq(rd.araddr), port(g + "arlen").eq(rd.arlen),
            port(g + "arsize").eq(2), port(g + "arburst").eq(1), port(g + "arid").eq(0),
            rd.rvalid.eq(port(g + "rvalid")), port(g + "rready").eq(rd.rready),
            rd.rdata.eq(port(g + "rdata")), rd.rresp.eq(port(g + "rresp")),
            rd.rlast.eq(port(g + "rlast")),
            port(g + "awvalid").eq(wr.awvalid), wr.awready.eq(port(g + "awready")),
            port(g + "awaddr").eq(wr.awaddr), port(g + "awlen").eq(wr.awlen),
            port(g + "awsize").eq(2), port(g + "awburst").eq(1), port(g + "awid").eq(0),
            port(g + "wvalid").eq(wr.wvalid), wr.wready.eq(port(g + "wready")),
            port(g + "wdata").eq(wr.wdata), port(g + "wstrb").eq(0xF),
            port(g + "wlast").eq(wr.wlast),
            wr.bvalid.eq(port(g + "bvalid")), port(g + "bready").eq(wr.bready),
            wr.bresp.eq(port(g + "bresp")),
        ]

        # ---- s_axi_control registers ---------------------------------------------------------
        ap_start = Signal()
        ap_done = Signal()                 # sticky CTRL bits (clear on read)
        ap_ready = Signal()
        auto_restart = Signal()
        gie = Signal()
        ier = Signal(2)
        isr = Signal(2)
        idle = Signal()
        done_pulse = Signal()              # from the sequencer FSM below
        args = {a.name: Signal(a.width, name=f"arg_{a.name}") for a in KERNEL_ARGS}

        s = "s_axi_control_"
        waddr = port(s + "awaddr")
        wdata = port(s + "wdata")
        wstrb = port(s + "wstrb")
        bmask = Cat(*[wstrb[i].replicate(8) for i in range(4)])
        with m.FSM(name="axil_w"):
            with m.State("IDLE"):
                take = Signal()
                m.d.comb += [take.eq(port(s + "awvalid") & port(s + "wvalid")),
                             port(s + "awready").eq(take), port(s + "wready").eq(take)]
                with m.If(take):
                    m.next = "RESP"
                    with m.Switch(waddr):
                        with m.Case(register("CTRL").offset):
                            with m.If(wstrb[0]):
                                with m.If(wdata[0]):
                                    m.d.sync += ap_start.eq(1)
                                m.d.sync += auto_restart.eq(wdata[7])
                        with m.Case(register("GIE").offset):
                            with m.If(wstrb[0]):
                                m.d.sync += gie.eq(wdata[0])
                        with m.Case(register("IER").offset):
                            with m.If(wstrb[0]):
                                m.d.sync += ier.eq(wdata[:2])
                        with m.Case(register("ISR").offset):
                            with m.If(wstrb[0]):
                                m.d.sync += isr.eq(isr ^ wdata[:2])
                        for a in KERNEL_ARGS:
                            for half in range(a.width // 32):
                                with m.Case(a.offset + 4 * half):
                                    field = args[a.name][32 * half:32 * half + 32]
                                    m.d.sync += field.eq((field & ~bmask) | (wdata & bmask))
            with m.State("RESP"):
                m.d.comb += port(s + "bvalid").eq(1)
                with m.If(port(s + "bready")):
                    m.next = "IDLE"
        m.d.comb += port(s + "bresp").eq(0)

        rdata = Signal(32)
        with m.FSM(name="axil_r"):
            with m.State("IDLE"):
                m.d.comb += port(s + "arready").eq(1)
                with m.If(port(s + "arvalid")):
                    m.next = "DATA"
                    m.d.sync += rdata.eq(0)
                    with m.Switch(port(s + "araddr")):
                        with m.Case(register("CTRL").offset):
                            m.d.sync += rdata.eq(Cat(ap_start, ap_done, idle, ap_ready,
                                                     Const(0, 3), auto_restart))
                            m.d.sync += [ap_done.eq(0), ap_ready.eq(0)]   # clear on read
                        with m.Case(register("GIE").offset):
                            m.d.sync += rdata.eq(gie)
                        with m.Case(register("IER").offset):
                            m.d.sync += rdata.eq(ier)
                        with m.Case(register("ISR").offset):
                            m.d.sync += rdata.eq(isr)
                        for a in KERNEL_ARGS:
                            for half in range(a.width // 32):
                                with m.Case(a.offset + 4 * half):
                                    m.d.sync += rdata.eq(args[a.name][32 * half:32 * half + 32])
            with m.State("DATA"):
                m.d.comb += [port(s + "rvalid").eq(1)]
                with m.If(port(s + "rready")):
                    m.next = "IDLE"
        m.d.comb += [port(s + "rdata").eq(rdata), port(s + "rresp").eq(0)]

        # ap_done / ap_ready: one pulse at the end of an invocation (the arguments are used
        # until then). Set after the read clear above so a completion is never lost.
        with m.If(done_pulse):
            m.d.sync += [ap_done.eq(1), ap_ready.eq(1), isr.eq(isr | ier)]
            with m.If(~auto_restart):
                m.d.sync += ap_start.eq(0)
        m.d.comb += self.interrupt.eq(gie & isr.any())

        # ---- the command sequencer ---------------------------------------------------------
        acc_sizes = acc.store_sizes
        depth = Array([Const(acc_sizes[STORE_NAMES[i]], 33) for i in range(len(STORE_IDS))])
        nb = acc.banks
        imem_depth = acc.imem_depth
        hdr = Array([Signal(32, name=f"hdr{i}") for i in range(HEADER_WORDS)])
        hidx = Signal(range(HEADER_WORDS))
        op, hstore, haddr, hcount = (hdr[i] for i in range(HEADER_WORDS))
        cmd_left = Signal(32)
        kerr = Signal(8)
        kerr_at = Signal(32)
        runs = Signal(32)
        kcycles = Signal(32)
        out_count = Signal(32)
        res_words = Signal(32)
        loaded_len = Signal(range(imem_depth + 1))
        cnt = Signal(32)
        bleft = Signal(32)
        baddr = Signal(32)
        fill = Signal(range(nb + 1))
        bufw = Array([Signal(32, name=f"wbuf{i}") for i in range(nb)])
        pending = Signal()                  # sbuf holds a beat for the host port
        sbuf = [Signal(32, name=f"sbuf{i}") for i in range(nb)]
        smask = Signal(nb)
        saddr = Signal(32)
        # read-back: host read beats in flight (credits = free slots of the response FIFO)
        m.submodules.rfifo = rfifo = fifo.SyncFIFOBuffered(width=32 * nb, depth=4)
        credits = Signal(range(5), init=4)
        took = Signal()
        popped = Signal()
        oleft = Signal(32)
        ridx = Signal(range(nb))
        resp_words = [rfifo.r_data[32 * w:32 * w + 32] for w in range(nb)]
        m.d.comb += [rfifo.w_data.eq(acc.host_o.payload.as_value()),
                     rfifo.w_en.eq(acc.host_o.valid), acc.host_o.ready.eq(rfifo.w_rdy)]
        m.d.sync += credits.eq(credits - took + popped)
        widx = Signal(range(RUN_RECORD_WORDS))
        st = {k: Signal(32, name=f"st_{k}") for k in RUN_FIELDS[1:11]}
        at_header = Signal(32)
        rec_words = Signal(32)

        m.d.comb += [wr.base.eq(args["results"]), at_header.eq(args["command_words"]
                                                               - cmd_left - HEADER_WORDS)]
        out_word = Signal(32)
        out_valid = Signal()
        m.d.comb += [wr.i.payload.eq(out_word), wr.i.valid.eq(out_valid)]
        with m.If(out_valid & wr.i.ready):
            m.d.sync += out_count.eq(out_count + 1)

        host = acc.host_i.payload
        m.d.comb += [host.store.eq(hstore), host.addr.eq(baddr)]     # WDATA: saddr

        def fail(code, at):
            m.d.sync += [kerr.eq(code), kerr_at.eq(at)]
            m.next = "ABORT"

        with m.If(~idle):
            m.d.sync += kcycles.eq(kcycles + 1)
        with m.If(rd.error & (kerr == 0)):
            m.d.sync += [kerr.eq(KERR_AXI), kerr_at.eq(args["command_words"] - cmd_left)]

        with m.FSM(name="kernel"):
            with m.State("IDLE"):
                m.d.comb += idle.eq(1)
                with m.If(ap_start):
                    m.d.sync += [kerr.eq(0), kerr_at.eq(0), runs.eq(0), kcycles.eq(0),
                                 out_count.eq(0), res_words.eq(args["result_words"]),
                                 cmd_left.eq(args["command_words"])]
                    m.d.comb += wr.start.eq(1)
                    m.next = "BEGIN"
            with m.State("BEGIN"):
                plen = args["program_length"]
                with m.If(plen > imem_depth):
                    fail(KERR_PROGRAM, 0)
                with m.Elif(plen != 0):
                    m.d.comb += [rd.start.eq(1), rd.base.eq(args["program"]),
                                 rd.words.eq(plen << 4)]
                    m.d.sync += [cnt.eq(0), loaded_len.eq(plen)]
                    m.next = "PROG"
                with m.Else():
                    m.next = "CMDS"
            with m.State("PROG"):
                m.d.comb += [rd.o.ready.eq(1), acc.imem_we.eq(rd.o.valid),
                             acc.imem_addr.eq(cnt), acc.imem_data.eq(rd.o.payload)]
                with m.If(rd.o.valid):
                    m.d.sync += cnt.eq(cnt + 1)
                with m.If(~rd.busy):
                    m.next = "CMDS"
            with m.State("CMDS"):
                with m.If(kerr != 0):
                    m.next = "FINISH"
                with m.Else():
                    m.d.comb += [rd.start.eq(1), rd.base.eq(args["commands"]),
                                 rd.words.eq(args["command_words"])]
                    m.d.sync += hidx.eq(0)
                    m.next = "HDR"
            with m.State("HDR"):
                with m.If(kerr != 0):
                    m.next = "ABORT"
                with m.Elif(cmd_left == 0):
                    with m.If(hidx == 0):
                        m.next = "FINISH"
                    with m.Else():
                        fail(KERR_TRUNCATED, args["command_words"] - hidx)
                with m.Else():
                    m.d.comb += rd.o.ready.eq(1)
                    with m.If(rd.o.valid):
                        m.d.sync += [hdr[hidx].eq(rd.o.payload), hidx.eq(hidx + 1),
                                     cmd_left.eq(cmd_left - 1)]
                        with m.If(hidx == HEADER_WORDS - 1):
                            m.d.sync += hidx.eq(0)
                            m.next = "DISPATCH"
            with m.State("DISPATCH"):
                in_store = (hstore < len(STORE_IDS))
                in_range = (haddr + hcount) <= depth[hstore[:2]]
                m.d.sync += [bleft.eq(hcount), baddr.eq(haddr), fill.eq(0), pending.eq(0)]
                with m.Switch(op):
                    with m.Case(CMD_WRITE):
                        with m.If(~in_store):
                            fail(KERR_STORE, at_header)
                        with m.Elif(hcount > cmd_left):
                            fail(KERR_TRUNCATED, at_header)
                        with m.Elif(~in_range):
                            fail(KERR_RANGE, at_header)
                        with m.Elif(hcount == 0):
                            m.next = "HDR"
                        with m.Else():
                            m.next = "WDATA"
                    with m.Case(CMD_READ):
                        with m.If(~in_store):
                            fail(KERR_STORE, at_header)
                        with m.Elif(~in_range):
                            fail(KERR_RANGE, at_header)
                        with m.Elif(out_count + hcount + TRAILER_WORDS > res_words):
                            fail(KERR_RESULTS, at_header)
                        with m.Elif(hcount == 0):
                            m.next = "HDR"
                        with m.Else():
                            m.d.sync += [oleft.eq(hcount), ridx.eq(0)]
                            m.next = "RREAD"
                    with m.Case(CMD_RUN):
                        with m.If(loaded_len == 0):
                            fail(KERR_NO_PROGRAM, at_header)
                        with m.Elif(out_count + (RUN_RECORD_WORDS + TRAILER_WORDS)
                                    > res_words):
                            fail(KERR_RESULTS, at_header)
                        with m.Else():
                            m.d.comb += [acc.start.eq(1), acc.length.eq(loaded_len)]
                            m.next = "RWAIT"
                    with m.Default():
                        fail(KERR_OPCODE, at_header)
            with m.State("WDATA"):
                # words fill `bufw`; a full beat (or the block's last words) moves to the send
                # buffer in the cycle its last word arrives, so filling goes on while it is sent
                completes = (fill == nb - 1) | (bleft == 1)
                sent = Signal()
                take = Signal()
                m.d.comb += [host.write.eq(1), host.addr.eq(saddr), host.mask.eq(smask),
                             acc.host_i.valid.eq(pending),
                             sent.eq(pending & acc.host_i.ready),
                             rd.o.ready.eq((bleft != 0) & (~completes | ~pending | sent)),
                             take.eq(rd.o.valid & rd.o.ready)]
                m.d.comb += [host.data[w].eq(sbuf[w]) for w in range(nb)]
                with m.If(sent):
                    m.d.sync += pending.eq(0)
                with m.If(take):
                    m.d.sync += [bleft.eq(bleft - 1), cmd_left.eq(cmd_left - 1)]
                    with m.If(completes):
                        lanes = [Const(1, 1)] + [fill > w - 1 for w in range(1, nb)]
                        m.d.sync += [pending.eq(1), saddr.eq(baddr), baddr.eq(baddr + nb),
                                     fill.eq(0), smask.eq(Cat(*lanes))]
                        m.d.sync += [sbuf[w].eq(Mux(fill == w, rd.o.payload, bufw[w]))
                                     for w in range(nb)]
                    with m.Else():
                        m.d.sync += [bufw[fill].eq(rd.o.payload), fill.eq(fill + 1)]
                with m.If((bleft == 0) & (~pending | sent)):
                    m.next = "HDR"
            with m.State("RREAD"):
                # requests: one beat of up to `banks` words whenever a response slot is free
                issue = Signal()
                m.d.comb += [issue.eq((bleft != 0) & (credits != 0)),
                             host.write.eq(0),
                             host.mask.eq(Cat(*[bleft > w for w in range(nb)])),
                             acc.host_i.valid.eq(issue)]
                with m.If(issue & acc.host_i.ready):
                    m.d.comb += took.eq(1)
                    m.d.sync += [baddr.eq(baddr + nb),
                                 bleft.eq(bleft - Mux(bleft < nb, bleft, nb))]
                # responses, in order, word by word to the results writer
                m.d.comb += [out_word.eq(Array(resp_words)[ridx]), out_valid.eq(rfifo.r_rdy)]
                with m.If(rfifo.r_rdy & wr.i.ready):
                    m.d.sync += [oleft.eq(oleft - 1), ridx.eq(ridx + 1)]
                    with m.If((ridx == nb - 1) | (oleft == 1)):     # the beat's last word
                        m.d.comb += [rfifo.r_en.eq(1), popped.eq(1)]
                        m.d.sync += ridx.eq(0)
                    with m.If(oleft == 1):
                        m.next = "HDR"
            with m.State("RWAIT"):
                with m.If(~acc.busy):
                    m.d.sync += [st["error"].eq(acc.error), st["error_code"].eq(acc.error_code),
                                 st["error_pc"].eq(acc.error_pc), st["cycles"].eq(acc.cycles),
                                 st["executed"].eq(acc.executed),
                                 st["busy_engine"].eq(acc.busy_engine),
                                 st["busy_vector"].eq(acc.busy_vector),
                                 st["busy_update"].eq(acc.busy_update),
                                 st["engine_cycles"].eq(acc.engine_cycles),
                                 st["engine_error"].eq(acc.engine_error), widx.eq(0)]
                    m.next = "RSTAT"
            with m.State("RSTAT"):
                words = [RUN_TAG | runs[:8]] + [st[k] for k in RUN_FIELDS[1:11]] + [runs]
                words += [Const(0, 32)] * (RUN_RECORD_WORDS - len(words))
                m.d.comb += [out_word.eq(Array(words)[widx]), out_valid.eq(1)]
                with m.If(wr.i.ready):
                    m.d.sync += widx.eq(widx + 1)
                    with m.If(widx == RUN_RECORD_WORDS - 1):
                        m.d.sync += runs.eq(runs + 1)
                        m.next = "HDR"
            with m.State("ABORT"):
                m.d.comb += rd.abort.eq(1)
                with m.If(~rd.busy):
                    m.next = "FINISH"
            with m.State("FINISH"):
                m.d.sync += [widx.eq(0), rec_words.eq(out_count)]
                with m.If(out_count + TRAILER_WORDS > res_words):
                    m.next = "FLUSH"                    # no room even for the trailer
                with m.Else():
                    m.next = "TRAILER"
            with m.State("TRAILER"):
                words = [Const(TRAILER_MAGIC, 32), kerr, kerr_at, runs, kcycles,
                         args["command_words"] - cmd_left, rec_words]
                words += [Const(0, 32)] * (TRAILER_WORDS - len(words))
                m.d.comb += [out_word.eq(Array(words)[widx[:3]]), out_valid.eq(1)]
                with m.If(wr.i.ready):
                    m.d.sync += widx.eq(widx + 1)
                    with m.If(widx == TRAILER_WORDS - 1):
                        m.next = "FLUSH"
            with m.State("FLUSH"):
                m.d.comb += wr.flush.eq(1)
                with m.If(wr.idle):
                    m.next = "DONE"
            with m.State("DONE"):
                m.d.comb += done_pulse.eq(1)
                m.next = "IDLE"
        return m
