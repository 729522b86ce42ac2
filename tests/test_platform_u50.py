"""The Alveo U50 platform writes a Vivado build tree (no Vivado needed)."""

import gc
import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

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


# ---- FuseSoC core --------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent


def test_core_file_parses():
    import yaml
    text = (ROOT / "ttrain.core").read_text()
    assert text.startswith("CAPI=2:\n")
    core = yaml.safe_load(text)
    assert core["name"].startswith("ttrain:ttrain:accelerator:")
    for f in core["filesets"]["ram"]["files"]:
        assert (ROOT / f).is_file(), f
    gen = core["generators"]["ttrain_accelerator"]
    assert (ROOT / gen["command"]).is_file()
    for target, t in core["targets"].items():
        for g in t.get("generate", []):
            params = core["generate"][g]["parameters"]
            assert core["generate"][g]["generator"] == "ttrain_accelerator"
            module = "ttrain_accelerator_" + params["config"].replace("-", "_")
            assert t["toplevel"] == module, target


def test_generator_under_fusesoc_protocol(tmp_path):
    """Run the generator as FuseSoC does (one YAML argument, output in the cwd)."""
    import yaml
    core = yaml.safe_load((ROOT / "ttrain.core").read_text())
    script = ROOT / core["generators"]["ttrain_accelerator"]["command"]
    gapi = {"gapi": "1.0", "files_root": str(ROOT), "vlnv": "::ttrain_gen_tiny:0",
            "parameters": {"config": "tiny", "lanes": 1}}
    (tmp_path / "gen.yml").write_text(yaml.safe_dump(gapi))
    res = subprocess.run([sys.executable, str(script), "gen.yml"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    gen_core = yaml.safe_load((tmp_path / "ttrain_gen_tiny.core").read_text())
    files = gen_core["filesets"]["rtl"]["files"]
    assert files == ["ttrain_accelerator_tiny.v"]
    assert gen_core["targets"]["default"]["toplevel"] == "ttrain_accelerator_tiny"
    verilog = (tmp_path / files[0]).read_text()
    assert re.search(r"^module ttrain_accelerator_tiny\(", verilog, re.M)
    # The stores are instances of the RAM template of the core's `ram` fileset, 4 stores x 1 bank.
    ram_v = (ROOT / core["filesets"]["ram"]["files"][0]).read_text()
    kinds = re.findall(r"^\s*(ttrain_ram_(?:block|ultra))\s+#\(", verilog, re.M)
    assert len(kinds) == 4
    for k in set(kinds):
        assert f"module {k}" in ram_v
    ports = json.loads((tmp_path / "ttrain_accelerator_tiny.ports.json").read_text())
    names = {p["name"] for p in ports["ports"]}
    for p in ports["ports"]:
        assert re.search(rf"\b(input|output)\s+(\[\d+:0\]\s+)?{re.escape(p['name'])}\b",
                         verilog), p
    assert {"clk", "rst", "start", "busy", "done", "error"} <= names
    # The target runs its preset's compiled training step: stores >= the memory map, an imem
    # that holds the program, the special-function unit it uses; hw.json is the one
    # configuration (`ttrain hw --config tiny --lanes 1`).
    from ttrain.golden.config import get_config
    from ttrain.golden.model_compiler import chip_model_config, compile_model
    from ttrain.platforms.hw import preset_hw_config, program_needs_special, read_hw_json
    program = compile_model(chip_model_config(get_config("tiny"))[0]).program
    hw = read_hw_json(tmp_path / "hw.json")
    assert hw == preset_hw_config("tiny", lanes=1)
    assert all(hw.stores[s] >= w for s, w in program.store_sizes.items())
    assert ports["store_words"] == hw.stores
    assert ports["imem_depth"] == hw.imem_depth >= len(program.instructions)
    assert program_needs_special(program) and hw.special
    assert re.search(r"^module \\ttrain_accelerator_tiny\.vector\.sfu\b", verilog, re.M)
