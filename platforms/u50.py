"""AMD Alveo U50 (xcu50-fsvh2104-2-e) as an Amaranth platform, and the U50's capacity.

Pins, from AMD's U50 constraints as published in public designs (see ``docs/u50.md`` for the
sources and what could not be confirmed):

``clk100`` (0)
    100 MHz LVDS reference clock on the global-clock pair BB18 (P) / BC18 (N), bank 64, VCCO
    1.8 V, ``DQS_BIAS TRUE`` (AC-coupled input). The platform's ``default_clk``: a design with
    a ``sync`` domain and no clock of its own runs from it (through the STARTUPE3 EOS gate that
    :class:`~amaranth.vendor.XilinxPlatform` adds).
``hbm_cattrip`` (0)
    J18, LVCMOS18, ``PULLDOWN TRUE``: the HBM catastrophic over-temperature flag to the card's
    satellite controller. Driving it high makes the controller cut the FPGA's power rails, so
    every design built with this platform drives it low (:meth:`AlveoU50Platform.prepare` wraps
    the design; pass ``drive_cattrip=False`` to the constructor if the design drives the pin
    itself, e.g. from the HBM IP's temperature outputs).

The second 100 MHz clock, the QSFP28 cage and the PCIe lanes are left out: the PCIe edge and
the HBM are reached through the Vitis shell (an RTL kernel), not from a bare-metal top.

:data:`U50_CAPACITY` holds the device's resources (AMD's U50 data sheet DS965 / the VU35P
column of DS890's UltraScale+ table) for :mod:`ttrain.resources_cmd`.
"""

from amaranth.build import Attrs, Clock, DiffPairs, Pins, Resource
from amaranth.hdl import Elaboratable, Module
from amaranth.lib import io
from amaranth.vendor import XilinxPlatform

__all__ = ["AlveoU50Platform", "U50_CAPACITY", "U50_PART", "U50_STORE_WORDS"]

#: The U50's FPGA part string as Vivado spells it.
U50_PART = "xcu50-fsvh2104-2-e"

#: Resources of the xcu50 (whole device; the Vitis shell takes part of SLR0/SLR1 on a card).
#: ``ramb18`` is the same silicon as ``ramb36`` (one RAMB36 = two RAMB18).
U50_CAPACITY = {
    "lut": 872_000,
    "ff": 1_743_000,
    "dsp48e2": 5952,
    "ramb36": 1344,
    "ramb18": 2688,
    "uram288": 640,
}

#: The U50's UltraRAM and block RAM as 32-bit store words (a URAM288 is 4K x 72 bits: two
#: words a row, 8,192 words; a RAMB36 1K x 36: 1,024): 6,619,136 words, 25.2 MiB. An upper
#: bound of what the stores can hold (the rest of the design and the Vitis shell take some);
#: the compiler's memory choices (``bench step --ttm-group fastest``) stay below it.
U50_STORE_WORDS = U50_CAPACITY["uram288"] * 8192 + U50_CAPACITY["ramb36"] * 1024


class _CattripLow(Elaboratable):
    """Wrap a design and drive ``hbm_cattrip`` low beside it."""

    def __init__(self, design):
        self.design = design

    def elaborate(self, platform):
        m = Module()
        m.submodules.design = self.design
        pin = platform.request("hbm_cattrip", 0, dir="-")
        m.submodules.hbm_cattrip = buf = io.Buffer("o", pin)
        m.d.comb += buf.o.eq(0)
        return m


class AlveoU50Platform(XilinxPlatform):
    """The Alveo U50 card for a Vivado build of a bare design (no Vitis shell).

    Parameters
    ----------
    drive_cattrip : bool
        Drive the HBM catastrophic-trip pin low in every built design (default ``True``);
        ``False`` leaves the pin to the design (it must then request and drive it).
    toolchain : str
        Passed to :class:`~amaranth.vendor.XilinxPlatform` (``"Vivado"``).

    Examples
    --------
    Write the Vivado build tree (``top.tcl``, ``top.xdc``, ``top.v``, ``build_top.sh``) of a
    design without running Vivado::

        AlveoU50Platform().build(design, build_dir="build/u50", do_build=False)
    """

    device = "xcu50"
    package = "fsvh2104"
    speed = "2-e"
    default_clk = "clk100"
    resources = [
        Resource("clk100", 0, DiffPairs("BB18", "BC18", dir="i"), Clock(100e6),
                 Attrs(IOSTANDARD="LVDS", DQS_BIAS="TRUE")),
        Resource("hbm_cattrip", 0, Pins("J18", dir="o"),
                 Attrs(IOSTANDARD="LVCMOS18", PULLDOWN="TRUE")),
    ]
    connectors = []

    def __init__(self, *, drive_cattrip=True, toolchain="Vivado"):
        if not isinstance(drive_cattrip, bool):
            raise TypeError(f"drive_cattrip must be True or False, not {drive_cattrip!r}")
        super().__init__(toolchain=toolchain)
        self._drive_cattrip = drive_cattrip

    @property
    def part(self):
        """The Vivado part string (``xcu50-fsvh2104-2-e``)."""
        return self._part

    def prepare(self, elaboratable, name="top", **kwargs):
        """Prepare the build plan (see :meth:`amaranth.build.TemplatedPlatform.prepare`).

        With ``drive_cattrip`` (the default) the design is wrapped so ``hbm_cattrip`` is
        driven low.
        """
        if self._drive_cattrip:
            elaboratable = _CattripLow(elaboratable)
        return super().prepare(elaboratable, name, **kwargs)
