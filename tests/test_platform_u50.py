"""The Alveo U50 platform writes a Vivado build tree (no Vivado needed)."""

import gc
import re
import warnings

import pytest
from amaranth.hdl import Elaboratable, Module, Signal
from amaranth.hdl._ir import UnusedElaboratable
from amaranth.lib import io

from ttrain.platforms.u50 import U50_PART, AlveoU50Platform


class _Counter(Elaboratable):
    """A tiny design in the default ``sync`` domain (clocked by the platform's clk100)."""

    def __init__(self):
        self.count = Signal(8)

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.count.eq(self.count + 1)
        return m


@pytest.fixture(scope="module")
def build_tree(tmp_path_factory):
    out = tmp_path_factory.mktemp("u50")
    plan = AlveoU50Platform().build(_Counter(), name="top", do_build=False)
    plan.extract(str(out))
    return out


def test_build_tree_files(build_tree):
    for name in ("top.tcl", "top.xdc", "top.v", "build_top.sh"):
        assert (build_tree / name).is_file(), name


def test_tcl_targets_the_u50_part(build_tree):
    tcl = (build_tree / "top.tcl").read_text()
    assert U50_PART == "xcu50-fsvh2104-2-e"
    assert re.search(r"create_project .*-part xcu50-fsvh2104-2-e\b", tcl)
    assert "synth_design -top top" in tcl
    assert "write_bitstream" in tcl
    assert AlveoU50Platform().part == U50_PART


def test_xdc_reference_clock(build_tree):
    xdc = (build_tree / "top.xdc").read_text()
    assert 'set_property LOC BB18 [get_ports "clk100_0__p"]' in xdc
    assert 'set_property LOC BC18 [get_ports "clk100_0__n"]' in xdc
    assert 'set_property IOSTANDARD "LVDS" [get_ports "clk100_0__p"]' in xdc
    # 100 MHz -> 10 ns period on the clock net.
    m = re.search(r"create_clock -name clk100_0__p -period ([0-9.]+)", xdc)
    assert m and float(m.group(1)) == pytest.approx(10.0)


def test_xdc_and_netlist_hbm_cattrip_low(build_tree):
    xdc = (build_tree / "top.xdc").read_text()
    assert 'set_property LOC J18 [get_ports "hbm_cattrip_0__io"]' in xdc
    assert 'set_property IOSTANDARD "LVCMOS18" [get_ports "hbm_cattrip_0__io"]' in xdc
    assert 'set_property PULLDOWN "TRUE" [get_ports "hbm_cattrip_0__io"]' in xdc
    top_v = (build_tree / "top.v").read_text()
    assert re.search(r"output\s+hbm_cattrip_0__io", top_v)
    # The pin's output buffer is enabled (T = 0) and driven by a constant 0.
    buf = re.search(r"\\top\.hbm_cattrip\.buf\s+\\buf\s+\((.*?)\);", top_v, re.S)
    assert buf, "no output buffer instance for hbm_cattrip"
    assert ".o(1'h0)" in buf.group(1) and ".t(1'h0)" in buf.group(1)
    assert "OBUFT" in top_v


def test_cattrip_left_to_the_design():
    class Drives(Elaboratable):
        def elaborate(self, platform):
            pin = platform.request("hbm_cattrip", 0, dir="-")
            m = Module()
            m.submodules.buf = buf = io.Buffer("o", pin)
            flag = Signal()
            m.d.sync += flag.eq(~flag)
            m.d.comb += buf.o.eq(flag)
            return m
    plan = AlveoU50Platform(drive_cattrip=False).prepare(Drives(), name="top")
    assert "hbm_cattrip_0__io" in plan.files["top.xdc"]
    # With the default, requesting the pin a second time is an error (the platform owns it).
    from amaranth.build.res import ResourceError
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)   # the aborted elaboration's buffer
        with pytest.raises(ResourceError):
            AlveoU50Platform().prepare(Drives(), name="top")
        gc.collect()


def test_bad_argument():
    with pytest.raises(TypeError, match="drive_cattrip"):
        AlveoU50Platform(drive_cattrip="yes")
