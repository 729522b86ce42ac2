# amaranth: UnusedElaboratable=no
"""Vitis packaging of the kernel (``platforms/vitis.py``) and ``ttrain xo`` / ``bitstream``.

The generated kernel.xml, package_xo TCL, v++ link config and XDC are parsed and checked
against the register map of ``platforms/kernel.py`` (the table the RTL decodes and the driver
programs), the U50 part and the kernel's Verilog ports; ``ttrain bitstream --config tiny`` must write
the whole tree on a machine without Vivado (one tree, one test: the
Verilog conversion is the slow part; ``xo`` differs only in ``build.sh``).
"""

import json
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from ttrain.platforms.u50 import U50_PART
from ttrain.platforms.vitis import (kernel_xdc, kernel_xml, package_xo_tcl, vpp_link_command,
                                    vpp_link_config)
from ttrain.platforms.kernel import (CONTROL_ADDR_BITS, CONTROL_REGISTERS, GMEM_DATA_BITS,
                               KERNEL_ARGS, KERNEL_NAME, REGISTER_MAP, axi_lite_ports,
                               axi_master_ports, register)


def test_register_map_is_the_vitis_layout():
    assert [(r.name, r.offset) for r in CONTROL_REGISTERS] == [
        ("CTRL", 0x00), ("GIE", 0x04), ("IER", 0x08), ("ISR", 0x0C)]
    assert KERNEL_ARGS[0].offset == 0x10
    spans = sorted((r.offset, r.offset + r.size) for r in REGISTER_MAP)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), "registers overlap"
    assert all(r.offset % 4 == 0 and r.width in (32, 64) for r in REGISTER_MAP)
    assert all(r.offset % 8 == 0 for r in KERNEL_ARGS if r.width == 64)
    assert spans[-1][1] <= 1 << CONTROL_ADDR_BITS
    assert register("results").kind == "pointer"
    with pytest.raises(ValueError, match="no register 'nope'"):
        register("nope")


def test_kernel_xml_matches_the_register_map():
    root = ET.fromstring(kernel_xml())
    assert root.tag == "root" and root.get("versionMajor") == "1"
    (k,) = root.findall("kernel")
    assert k.get("name") == KERNEL_NAME and k.get("hwControlProtocol") == "ap_ctrl_hs"
    assert k.get("interrupt") == "true" and k.get("language") == "ip_c"
    ports = {p.get("name"): p.attrib for p in k.find("ports")}
    assert ports["s_axi_control"]["mode"] == "slave"
    assert int(ports["s_axi_control"]["range"], 16) == 1 << CONTROL_ADDR_BITS
    assert ports["m_axi_gmem"]["mode"] == "master"
    assert int(ports["m_axi_gmem"]["dataWidth"]) == GMEM_DATA_BITS
    args = list(k.find("args"))
    assert [a.get("name") for a in args] == [r.name for r in KERNEL_ARGS]
    for i, (a, r) in enumerate(zip(args, KERNEL_ARGS)):
        assert int(a.get("id")) == i
        assert int(a.get("offset"), 16) == r.offset and int(a.get("size"), 16) == r.size
        pointer = r.kind == "pointer"
        assert a.get("addressQualifier") == ("1" if pointer else "0")
        assert a.get("port") == ("m_axi_gmem" if pointer else "s_axi_control")
        assert a.get("type").endswith("*") == pointer


def test_package_xo_tcl_registers_part_and_interfaces():
    tcl = package_xo_tcl([f"{KERNEL_NAME}.v", "ttrain_ram.v"])
    assert f"create_project -force kernel_pack $here/kernel_pack -part $part" in tcl
    assert f"set part {U50_PART}" in tcl and f"set kernel {KERNEL_NAME}" in tcl
    assert f"$here/{KERNEL_NAME}.v $here/ttrain_ram.v" in tcl
    regs = re.findall(r"^\s+\{(\w+) (0x[0-9a-f]+) (\d+) (\w+)\}$", tcl, re.M)
    assert [(n, int(o, 16), int(w), kd) for n, o, w, kd in regs] == \
        [(r.name, r.offset, r.width, r.kind) for r in REGISTER_MAP]
    for busif in ("s_axi_control", "m_axi_gmem"):
        assert f"ipx::associate_bus_interfaces -busif {busif} -clock ap_clk $core" in tcl
    assert "ipx::associate_bus_interfaces -clock ap_clk -reset ap_rst_n $core" in tcl
    assert "ACTIVE_LOW" in tcl and "interrupt_rtl" in tcl
    assert "set_property sdx_kernel true $core" in tcl
    assert "ctrl_protocol ap_ctrl_hs" in tcl and "ipx::check_integrity -kernel $core" in tcl
    assert re.search(r"package_xo -force -xo_path \$here/ttrain_kernel\.xo -kernel_name "
                     r"\$kernel .*-kernel_xml \$here/kernel\.xml", tcl.replace("\\\n", ""))
    assert tcl.count("{") == tcl.count("}")


def test_link_config_and_xdc():
    cfg = vpp_link_config(hbm_bank=3, compute_units=2, clock_mhz=250)
    lines = [ln for ln in cfg.splitlines() if ln and not ln.startswith("#")]
    assert lines[0] == "[connectivity]"
    assert f"nk={KERNEL_NAME}:2:{KERNEL_NAME}_1.{KERNEL_NAME}_2" in lines
    assert f"sp={KERNEL_NAME}_1.m_axi_gmem:HBM[3]" in lines
    assert f"sp={KERNEL_NAME}_2.m_axi_gmem:HBM[4]" in lines
    assert f"freqHz=250000000:{KERNEL_NAME}_1.ap_clk" in lines
    with pytest.raises(ValueError, match="hbm_bank must be"):
        vpp_link_config(hbm_bank=32)
    m = re.search(r"create_clock -period ([\d.]+) -name ap_clk \[get_ports ap_clk\]",
                  kernel_xdc(300))
    assert m and abs(float(m.group(1)) - 1000 / 300) < 1e-3
    with pytest.raises(ValueError, match="clock_mhz must be"):
        kernel_xdc(0)
    assert "--platform xilinx_u50" in vpp_link_command()


def test_verilog_ports_are_the_vitis_names():
    from ttrain.platforms.kernel import VitisKernel
    from ttrain.platforms.sim.verilator import component_ports
    k = VitisKernel(store_sizes={"param": 16, "grad": 16, "act": 16, "scratch": 16}, lanes=1,
                    slots=8, imem_depth=4)
    ports = {n: (len(v), d.name.lower()) for n, (v, d) in component_ports(k).items()}
    want = {"ap_clk": (1, "input"), "ap_rst_n": (1, "input"), "interrupt": (1, "output")}
    for name, d, w in axi_lite_ports() + axi_master_ports():
        want[name] = (w, "input" if d == "in" else "output")
    assert ports == want
    with pytest.raises(ValueError, match="give store_sizes"):
        VitisKernel(lanes=2)


def test_ttrain_bitstream_writes_the_tree_of_the_compiled_step(tmp_path):
    """``ttrain bitstream --config tiny`` writes the whole tree on a machine without Vivado
    (one Verilog conversion, the slow part, for every check here: pytest-xdist would build a
    shared fixture once per worker). The kernel holds the preset's compiled training step
    (stores from the compiler's memory map, the whole program in the instruction memory, the
    special-function unit) and its tree records the one hardware configuration as hw.json;
    bad flags are rejected before anything is written."""
    from ttrain.golden.config import get_config
    from ttrain.golden.model_compiler import compile_model
    from ttrain.platforms.hw import preset_hw_config, read_hw_json
    from ttrain.platforms.vitis import kernel_tree
    if shutil.which("vivado") or shutil.which("v++"):
        pytest.fail("vivado or v++ is on PATH: this test checks the tree-only path")
    out = tmp_path / "tree"
    proc = subprocess.run([sys.executable, "-m", "ttrain", "bitstream", "--config", "tiny",
                           "--out", str(out), "--lanes", "2", "--clock-mhz", "250"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    for name in (f"{KERNEL_NAME}.v", "ttrain_ram.v", "kernel.xml", "package_xo.tcl",
                 "kernel.xdc", "link.cfg", "build.sh", "kernel.json", "hw.json"):
        assert (out / name).is_file(), name
    assert "vivado is not on PATH" in proc.stdout
    assert "vivado -mode batch -nojournal -nolog -source package_xo.tcl" in proc.stdout
    verilog = (out / f"{KERNEL_NAME}.v").read_text()
    assert re.search(rf"^module {KERNEL_NAME}\(", verilog, re.M)
    assert "ttrain_ram_" in verilog                   # stores on the RAM templates
    # One self-contained file: the separately converted FP32 modules it instantiates are in it
    # (Verilator's lint fails on a missing module).
    assert re.search(r"^module ttrain_sf_fp32_mul\(", verilog, re.M)
    from ttrain.platforms.sim.verilator import lint_verilator
    lint_verilator(None, name=KERNEL_NAME, extra_sources=[out / f"{KERNEL_NAME}.v",
                                                          out / "ttrain_ram.v"],
                   flags=("-Wno-lint", "-Wno-style", "-Wno-SYMRSVDWORD"))
    meta = json.loads((out / "kernel.json").read_text())
    assert meta["config"] == "tiny" and meta["clock_mhz"] == 250 and meta["banks"] == 2
    assert "create_clock -period 4.000" in (out / "kernel.xdc").read_text()
    assert ET.fromstring((out / "kernel.xml").read_text()).find("kernel").get("name") \
        == KERNEL_NAME
    # bitstream = package_xo, then the v++ link step, in that order
    cmds = [ln for ln in (out / "build.sh").read_text().splitlines()
            if ln.startswith(("vivado ", "v++ "))]
    assert len(cmds) == 2 and cmds[0].startswith("vivado ") and cmds[1].startswith("v++ --link")
    assert "--config link.cfg" in cmds[1] and f"{KERNEL_NAME}.xo" in cmds[1]
    # the one hardware configuration, sized for the compiled step
    hw = read_hw_json(out)
    assert hw == preset_hw_config("tiny", lanes=2, clock_mhz=250.0)
    prog = compile_model(get_config("tiny")).program
    assert hw.fits_u50 and hw.special
    assert hw.imem_depth >= len(prog.instructions)
    assert all(hw.stores[s] >= w for s, w in prog.store_sizes.items())
    for kw, match in (({"imem_depth": 64}, "cannot hold"), ({"hbm_bank": 99}, "hbm_bank"),
                      ({"lanes": 3}, "lanes must be")):
        with pytest.raises(ValueError, match=match):
            kernel_tree("tiny", tmp_path / "bad", link=False, run_tools=False,
                        log=lambda m: None, **{"lanes": 2, **kw})
        assert not (tmp_path / "bad").exists()
    with pytest.raises(ValueError, match="unknown preset"):
        kernel_tree("nope", tmp_path / "bad", link=False, run_tools=False)
    assert not (tmp_path / "bad").exists()


def test_xo_build_script_packages_without_linking():
    from ttrain.platforms.vitis import build_script, package_command
    xo, linked = build_script(link=False), build_script(link=True)
    assert package_command() in xo and "v++" not in xo
    assert linked.startswith(xo.splitlines()[0]) and vpp_link_command() in linked
