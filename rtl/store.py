"""Banked on-chip word stores (factor, gradient, activation, scratch memories).

A :class:`BankedStore` holds ``depth`` 32-bit words in ``banks`` banks: word ``addr`` lives in
bank ``addr % banks`` at row ``addr // banks``, so ``banks`` consecutive words (or any words
whose addresses differ modulo ``banks``) are read or written in the same cycle. Every bank has
one synchronous read port and one write port, with the timing of
:class:`amaranth.lib.memory.Memory` (``transparent=False``): ``r_data`` shows the addressed row
one cycle after a cycle with ``r_en`` high and holds while ``r_en`` is low; a write lands at the
clock edge; reading the row being written returns the old word.

Two implementations behind one interface (``toolchain.md``, "Large memories"):

``"memory"``
    :class:`amaranth.lib.memory.Memory` per bank; simulates in the Amaranth simulator, but
    Amaranth emits an initial value per word, which is slow to elaborate for big banks.
``"verilog"``
    an ``Instance`` of the project's ``ttrain_ram_block`` / ``ttrain_ram_ultra`` templates
    (:func:`ram_verilog_path`, no initial block, ``ram_style`` attribute); Verilator and
    Vivado only.

``impl="auto"`` picks ``"memory"`` up to :data:`MEMORY_MAX_BANK_DEPTH` rows per bank.
``style`` marks the Xilinx mapping (``"block"`` = BRAM, ``"ultra"`` = URAM); ``"auto"`` picks
URAM for banks of at least :data:`URAM_MIN_BANK_DEPTH` rows. How many Xilinx primitives a store
takes is platform knowledge: :func:`ttrain.platforms.memory.store_primitives`.
"""

from pathlib import Path

from amaranth.hdl import ClockSignal, Instance, Module
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

__all__ = ["BankedStore", "ram_verilog_path", "MEMORY_MAX_BANK_DEPTH", "URAM_MIN_BANK_DEPTH"]

#: Largest bank (rows) that ``impl="auto"`` builds from :class:`~amaranth.lib.memory.Memory`.
MEMORY_MAX_BANK_DEPTH = 2048
#: Smallest bank (rows) that ``style="auto"`` maps to URAM.
URAM_MIN_BANK_DEPTH = 4096

WORD_BITS = 32


def ram_verilog_path():
    """Return the path of ``ram.v`` (``ttrain_ram_block``/``_ultra``), for ``impl="verilog"``."""
    return Path(__file__).with_name("ram.v")


class BankedStore(wiring.Component):
    """``depth`` FP32 words in ``banks`` banks, one read and one write port per bank.

    Golden: a one-dimensional ``uint32`` array (a store of the memory image in
    :mod:`ttrain.golden.contract`). Read latency 1 cycle, one read and one write per bank per
    cycle.

    Parameters
    ----------
    depth : int
        Words; a positive multiple of ``banks``.
    banks : int
        Number of banks, a power of two.
    style : str
        ``"block"``, ``"ultra"`` or ``"auto"``.
    impl : str
        ``"memory"``, ``"verilog"`` or ``"auto"``.
    name : str
        Used in reports and Verilog instance names.

    Members
    -------
    r_en, r_addr : ``In(1).array(banks)``, ``In(row_bits).array(banks)``
        Read request per bank (row address).
    r_data : ``Out(32).array(banks)``
        Read data per bank, one cycle after the request.
    w_en, w_addr, w_data : ``In(1).array(banks)``, ``In(row_bits).array(banks)``, ``In(32)...``
        Write per bank.
    """

    def __init__(self, *, depth, banks, style="auto", impl="auto", name="store"):
        self._MustUse__silence = True            # no "never used" warning if validation fails
        if not isinstance(banks, int) or isinstance(banks, bool) or banks < 1 \
                or banks & (banks - 1):
            raise TypeError(f"banks must be a positive power of two, not {banks!r}")
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < banks \
                or depth % banks:
            hint = max(banks, -(-depth // banks) * banks) if isinstance(depth, int) else banks
            raise ValueError(f"store {name!r}: depth must be a positive multiple of banks = "
                             f"{banks}, not {depth!r}; round it up to {hint}")
        if style not in ("auto", "block", "ultra"):
            raise ValueError(f"store {name!r}: style must be 'auto', 'block' or 'ultra', "
                             f"not {style!r}")
        if impl not in ("auto", "memory", "verilog"):
            raise ValueError(f"store {name!r}: impl must be 'auto', 'memory' or 'verilog', "
                             f"not {impl!r}")
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"store name must be an identifier, not {name!r}")
        self._depth = depth
        self._banks = banks
        self._name = name
        bank_depth = depth // banks
        if style == "auto":
            style = "ultra" if bank_depth >= URAM_MIN_BANK_DEPTH else "block"
        if impl == "auto":
            impl = "memory" if bank_depth <= MEMORY_MAX_BANK_DEPTH else "verilog"
        self._style = style
        self._impl = impl
        self._MustUse__silence = False
        rb = self.row_bits
        super().__init__({
            "r_en": In(1).array(banks), "r_addr": In(rb).array(banks),
            "r_data": Out(WORD_BITS).array(banks),
            "w_en": In(1).array(banks), "w_addr": In(rb).array(banks),
            "w_data": In(WORD_BITS).array(banks),
        })

    depth = property(lambda self: self._depth, doc="Words in the store.")
    banks = property(lambda self: self._banks, doc="Number of banks.")
    name = property(lambda self: self._name, doc="Store name.")
    style = property(lambda self: self._style, doc="Xilinx mapping, ``'block'`` or ``'ultra'``.")
    impl = property(lambda self: self._impl, doc="``'memory'`` or ``'verilog'``.")

    @property
    def bank_depth(self):
        """Rows per bank."""
        return self._depth // self._banks

    @property
    def row_bits(self):
        """Width of a row address (at least 1)."""
        return max(1, ceil_log2(self.bank_depth))

    def elaborate(self, platform):
        m = Module()
        for b in range(self._banks):
            if self._impl == "memory":
                mem = memory.Memory(shape=WORD_BITS, depth=self.bank_depth, init=[],
                                    attrs={"ram_style": self._style})
                m.submodules[f"bank{b}"] = mem
                rp = mem.read_port(transparent_for=())
                wp = mem.write_port()
                m.d.comb += [rp.en.eq(self.r_en[b]), rp.addr.eq(self.r_addr[b]),
                             self.r_data[b].eq(rp.data),
                             wp.en.eq(self.w_en[b]), wp.addr.eq(self.w_addr[b]),
                             wp.data.eq(self.w_data[b])]
            else:
                m.submodules[f"bank{b}"] = Instance(
                    f"ttrain_ram_{self._style}",
                    p_WIDTH=WORD_BITS, p_DEPTH=self.bank_depth, p_ABITS=self.row_bits,
                    i_clk=ClockSignal("sync"),
                    i_ren=self.r_en[b], i_raddr=self.r_addr[b], o_rdata=self.r_data[b],
                    i_we=self.w_en[b], i_waddr=self.w_addr[b], i_wdata=self.w_data[b])
        return m
