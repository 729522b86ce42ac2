"""Vitis RTL-kernel packaging of :class:`ttrain.platforms.kernel.VitisKernel` for the Alveo U50.

Everything here is generated from :data:`ttrain.platforms.kernel.REGISTER_MAP` (the same table the
RTL decodes and :mod:`ttrain.platforms.host.driver` programs), the kernel's port lists
(:func:`~ttrain.platforms.kernel.axi_lite_ports`, :func:`~ttrain.platforms.kernel.axi_master_ports`) and
:data:`ttrain.platforms.u50.U50_PART`:

``kernel.xml``           :func:`kernel_xml` — ports, arguments (offsets, sizes, address
                         qualifiers), ``hwControlProtocol="ap_ctrl_hs"``, interrupt.
``package_xo.tcl``       :func:`package_xo_tcl` — Vivado ``ipx::`` packaging of the Verilog as
                         a Vitis kernel IP, then ``package_xo``.
``<kernel>.xdc``         :func:`kernel_xdc` — ``ap_clk`` at the chosen frequency (out-of-context
                         synthesis of the kernel; on the card v++ sets the clock).
``link.cfg``             :func:`vpp_link_config` — ``[connectivity] nk=`` / ``sp=`` (HBM bank)
                         and ``[clock]``.
``build.sh``             :func:`build_script` — ``vivado -mode batch -source package_xo.tcl``,
                         then ``v++ --link`` (the second step only for ``ttrain bitstream``).

:func:`write_kernel_tree` writes all of them plus the kernel's Verilog, ``ttrain_ram.v`` and
``kernel.json`` (the build's parameters and store sizes, read by
:meth:`ttrain.platforms.host.driver.KernelDriver.from_tree`).
"""

import json
import shutil
from pathlib import Path
from xml.sax.saxutils import quoteattr

from .hw import HW_JSON, preset_hw_config, write_hw_json
from .u50 import U50_PART

__all__ = ["kernel_xml", "package_xo_tcl", "kernel_xdc", "vpp_link_config", "vpp_link_command",
           "package_command", "build_script", "write_kernel_tree", "U50_VITIS_PLATFORM",
           "KERNEL_VENDOR", "HBM_BANKS", "check_hbm_bank", "kernel_tree"]

#: The U50 Vitis platform (shell) the link step targets by default.
U50_VITIS_PLATFORM = "xilinx_u50_gen3x16_xdma_5_202210_1"
#: Vendor of the packaged kernel IP (its VLNV is ``<vendor>:kernel:<name>:1.0``).
KERNEL_VENDOR = "ttrain.dev"
#: HBM pseudo-channels of the U50 (``HBM[0]`` .. ``HBM[31]``).
HBM_BANKS = 32


def _kernel_modules():
    from . import kernel
    return kernel


def _check_clock(clock_mhz):
    if isinstance(clock_mhz, bool) or not isinstance(clock_mhz, (int, float)) \
            or not 10 <= clock_mhz <= 500:
        raise ValueError(f"clock_mhz must be a number in 10..500 (MHz), not {clock_mhz!r}")


def check_hbm_bank(hbm_bank):
    """Raise ValueError unless ``hbm_bank`` is an HBM pseudo-channel of the U50."""
    if isinstance(hbm_bank, bool) or not isinstance(hbm_bank, int) \
            or not 0 <= hbm_bank < HBM_BANKS:
        raise ValueError(f"hbm_bank must be an HBM pseudo-channel 0..{HBM_BANKS - 1}, not "
                         f"{hbm_bank!r}")


def _check_name(name):
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"the kernel name must be a Verilog identifier, not {name!r}")


def kernel_xml(kernel_name=None, *, vendor=KERNEL_VENDOR):
    """Return the ``kernel.xml`` text of the kernel (Vitis RTL kernel description, v1.6).

    Ports: ``s_axi_control`` (slave, ``range`` = the 12-bit control window, 32-bit data) and
    ``m_axi_gmem`` (master, 64-bit address range, 32-bit data). Arguments: one per
    :data:`~ttrain.platforms.kernel.KERNEL_ARGS` entry, ``id`` in order, pointers with
    ``addressQualifier="1"`` on ``m_axi_gmem``, scalars ``addressQualifier="0"`` on
    ``s_axi_control``.
    """
    k = _kernel_modules()
    kernel_name = kernel_name or k.KERNEL_NAME
    _check_name(kernel_name)
    lines = ['<?xml version="1.0" encoding="UTF-8"?>',
             '<root versionMajor="1" versionMinor="6">',
             f'  <kernel name="{kernel_name}" language="ip_c" '
             f'vlnv="{vendor}:kernel:{kernel_name}:1.0" attributes="" '
             f'preferredWorkGroupSizeMultiple="0" workGroupSize="1" interrupt="true" '
             f'hwControlProtocol="ap_ctrl_hs">',
             '    <ports>',
             f'      <port name="s_axi_control" mode="slave" '
             f'range="{1 << k.CONTROL_ADDR_BITS:#x}" dataWidth="32" portType="addressable" '
             f'base="0x0"/>',
             f'      <port name="m_axi_gmem" mode="master" range="0xFFFFFFFFFFFFFFFF" '
             f'dataWidth="{k.GMEM_DATA_BITS}" portType="addressable" base="0x0"/>',
             '    </ports>',
             '    <args>']
    for i, a in enumerate(k.KERNEL_ARGS):
        pointer = a.kind == "pointer"
        lines.append(
            f'      <arg name="{a.name}" addressQualifier="{1 if pointer else 0}" id="{i}" '
            f'port="{"m_axi_gmem" if pointer else "s_axi_control"}" size="{a.size:#x}" '
            f'offset="{a.offset:#x}" type={quoteattr("uint*" if pointer else "uint")} '
            f'hostOffset="0x0" hostSize="{a.size:#x}"/>')
    lines += ['    </args>', '  </kernel>', '</root>', '']
    return "\n".join(lines)


def kernel_xdc(clock_mhz, kernel_name=None):
    """Return the kernel's XDC: ``ap_clk`` at ``clock_mhz`` (out-of-context synthesis)."""
    _check_clock(clock_mhz)
    k = _kernel_modules()
    period = 1000.0 / clock_mhz
    return (f"# {kernel_name or k.KERNEL_NAME}: kernel clock for out-of-context synthesis "
            f"(v++ --link sets the clock on the card, see link.cfg)\n"
            f"create_clock -period {period:.3f} -name ap_clk [get_ports ap_clk]\n")


def package_xo_tcl(verilog_files, *, kernel_name=None, part=U50_PART, xdc="kernel.xdc",
                   xo_name=None, vendor=KERNEL_VENDOR):
    """Return the Vivado TCL that packages the Verilog as a Vitis kernel and writes the ``.xo``.

    Paths are relative to the script's folder. Steps: ``create_project -part``, add the
    sources and the XDC (out of context), ``ipx::package_project``; bus interfaces
    ``s_axi_control`` / ``m_axi_gmem`` associated with ``ap_clk``, ``ap_rst_n`` an active-low
    reset, ``interrupt`` an interrupt; the ``s_axi_control`` memory map with every register
    of :data:`~ttrain.platforms.kernel.REGISTER_MAP` (pointer arguments tagged
    ``ASSOCIATED_BUSIF m_axi_gmem``); the Vitis kernel properties (``sdx_kernel``,
    ``ctrl_protocol ap_ctrl_hs``); ``ipx::check_integrity -kernel``; then
    ``package_xo -kernel_xml kernel.xml``.
    """
    k = _kernel_modules()
    kernel_name = kernel_name or k.KERNEL_NAME
    _check_name(kernel_name)
    xo_name = xo_name or f"{kernel_name}.xo"
    files = " ".join(f"$here/{Path(f).name}" for f in verilog_files)
    if not files:
        raise ValueError("give the kernel's Verilog files (the kernel module first)")
    regs = "\n".join(f"    {{{r.name} {r.offset:#04x} {r.width} {r.kind}}}"
                     for r in k.REGISTER_MAP)
    return f"""# Package {kernel_name} as a Vitis RTL kernel (generated by ttrain; do not edit).
# Run: vivado -mode batch -source package_xo.tcl   (in this folder)
set here [file dirname [file normalize [info script]]]
set kernel {kernel_name}
set part {part}
set ip_dir $here/ip

create_project -force kernel_pack $here/kernel_pack -part $part
add_files -norecurse [list {files}]
set_property top $kernel [current_fileset]
add_files -fileset constrs_1 -norecurse $here/{xdc}
set_property USED_IN {{out_of_context synthesis implementation}} [get_files $here/{xdc}]
update_compile_order -fileset sources_1

ipx::package_project -root_dir $ip_dir -vendor {vendor} -library kernel -taxonomy /KernelIP \\
    -import_files -set_current false
ipx::unload_core $ip_dir/component.xml
ipx::edit_ip_in_project -upgrade true -name tmp_edit_project -directory $ip_dir \\
    $ip_dir/component.xml
set core [ipx::current_core]
set_property core_revision 1 $core
foreach up [ipx::get_user_parameters -of_objects $core] {{
    ipx::remove_user_parameter [get_property NAME $up] $core
}}

# clock, active-low reset, interrupt, and the two AXI interfaces on ap_clk
ipx::infer_bus_interface ap_clk xilinx.com:signal:clock_rtl:1.0 $core
ipx::infer_bus_interface ap_rst_n xilinx.com:signal:reset_rtl:1.0 $core
ipx::infer_bus_interface interrupt xilinx.com:signal:interrupt_rtl:1.0 $core
set_property value ACTIVE_LOW [ipx::add_bus_parameter POLARITY \\
    [ipx::get_bus_interfaces ap_rst_n -of_objects $core]]
set_property value LEVEL_HIGH [ipx::add_bus_parameter SENSITIVITY \\
    [ipx::get_bus_interfaces interrupt -of_objects $core]]
ipx::associate_bus_interfaces -busif s_axi_control -clock ap_clk $core
ipx::associate_bus_interfaces -busif m_axi_gmem -clock ap_clk $core
ipx::associate_bus_interfaces -clock ap_clk -reset ap_rst_n $core

# s_axi_control register map (ttrain.platforms.kernel.REGISTER_MAP: name, offset, bits, kind)
set mem_map [ipx::add_memory_map -quiet s_axi_control $core]
set addr_block [ipx::add_address_block -quiet reg0 $mem_map]
set_property range {1 << k.CONTROL_ADDR_BITS:#x} $addr_block
set_property width 32 $addr_block
foreach r {{
{regs}
}} {{
    lassign $r name offset bits kind
    set reg [ipx::add_register -quiet $name $addr_block]
    set_property address_offset $offset $reg
    set_property size $bits $reg
    if {{$kind eq "pointer"}} {{
        set_property value m_axi_gmem [ipx::add_register_parameter -quiet ASSOCIATED_BUSIF $reg]
    }}
}}
set_property slave_memory_map_ref s_axi_control \\
    [ipx::get_bus_interfaces s_axi_control -of_objects $core]

# a Vitis kernel with the ap_ctrl_hs protocol
set_property xpm_libraries {{XPM_CDC XPM_MEMORY XPM_FIFO}} $core
set_property sdx_kernel true $core
set_property sdx_kernel_type rtl $core
set_property ipi_drc {{ignore_freq_hz true}} $core
set_property vitis_drc {{ctrl_protocol ap_ctrl_hs}} $core
set_property supported_families {{ }} $core
set_property auto_family_support_level level_2 $core
ipx::create_xgui_files $core
ipx::update_checksums $core
ipx::check_integrity -kernel $core
ipx::save_core $core
close_project -delete

package_xo -force -xo_path $here/{xo_name} -kernel_name $kernel -ip_directory $ip_dir \\
    -kernel_xml $here/kernel.xml -ctrl_protocol ap_ctrl_hs
"""


def vpp_link_config(*, kernel_name=None, hbm_bank=0, compute_units=1, clock_mhz=None):
    """Return the ``v++ --link`` configuration: ``nk=`` (compute units), one ``sp=`` per unit
    mapping ``m_axi_gmem`` to ``HBM[hbm_bank + i]``, and the kernel clock (``[clock]
    freqHz``) when ``clock_mhz`` is given."""
    k = _kernel_modules()
    kernel_name = kernel_name or k.KERNEL_NAME
    _check_name(kernel_name)
    if isinstance(compute_units, bool) or not isinstance(compute_units, int) \
            or not 1 <= compute_units <= HBM_BANKS:
        raise ValueError(f"compute_units must be an int in 1..{HBM_BANKS}, not "
                         f"{compute_units!r}")
    if isinstance(hbm_bank, bool) or not isinstance(hbm_bank, int) \
            or not 0 <= hbm_bank <= HBM_BANKS - compute_units:
        raise ValueError(f"hbm_bank must be an int in 0..{HBM_BANKS - compute_units} (the U50 "
                         f"has HBM[0]..HBM[{HBM_BANKS - 1}], one per compute unit), not "
                         f"{hbm_bank!r}")
    cus = [f"{kernel_name}_{i + 1}" for i in range(compute_units)]
    out = ["# v++ --link configuration (generated by ttrain)", "[connectivity]",
           f"nk={kernel_name}:{compute_units}:{'.'.join(cus)}"]
    out += [f"sp={cu}.m_axi_gmem:HBM[{hbm_bank + i}]" for i, cu in enumerate(cus)]
    if clock_mhz is not None:
        _check_clock(clock_mhz)
        out += ["", "[clock]"] + [f"freqHz={int(round(clock_mhz * 1e6))}:{cu}.ap_clk"
                                  for cu in cus]
    return "\n".join(out) + "\n"


def package_command():
    """The shell command that packages the ``.xo`` (run in the tree)."""
    return "vivado -mode batch -nojournal -nolog -source package_xo.tcl"


def vpp_link_command(*, kernel_name=None, platform=U50_VITIS_PLATFORM, xclbin=None):
    """The ``v++ --link`` command (run in the tree)."""
    k = _kernel_modules()
    kernel_name = kernel_name or k.KERNEL_NAME
    xclbin = xclbin or f"{kernel_name}.xclbin"
    return (f"v++ --link --target hw --platform {platform} --config link.cfg "
            f"-o {xclbin} {kernel_name}.xo")


def build_script(*, link, kernel_name=None, platform=U50_VITIS_PLATFORM):
    """``build.sh``: package the ``.xo``; with ``link`` also link the ``.xclbin``."""
    lines = ["#!/bin/sh", "# generated by ttrain: package the kernel"
             + (" and link the xclbin" if link else ""), "set -e", 'cd "$(dirname "$0")"',
             package_command()]
    if link:
        lines.append(vpp_link_command(kernel_name=kernel_name, platform=platform))
    return "\n".join(lines) + "\n"


def write_kernel_tree(kernel, out_dir, *, clock_mhz=300, hbm_bank=0,
                      platform=U50_VITIS_PLATFORM, link=False, meta=None, hw=None):
    """Write the packaging tree of a :class:`~ttrain.platforms.kernel.VitisKernel` into ``out_dir``.

    Parameters
    ----------
    kernel : ttrain.platforms.kernel.VitisKernel
    out_dir : path-like
    clock_mhz : float
        Kernel clock (XDC and ``link.cfg``).
    hbm_bank : int
        HBM pseudo-channel of ``m_axi_gmem``.
    platform : str
        Vitis platform of the link step.
    link : bool
        ``build.sh`` also links the ``.xclbin`` (``ttrain bitstream``).
    meta : dict or None
        Extra entries for ``kernel.json`` (e.g. the preset name).
    hw : HwConfig or None
        The configuration the kernel was built from, written as ``hw.json``.

    Returns
    -------
    dict
        ``files`` (name -> path) and ``commands`` (the shell commands to run in ``out_dir``).
    """
    from .kernel import KERNEL_NAME, REGISTER_MAP, VitisKernel
    from ..rtl.store import ram_verilog_path
    from ..rtl.export import convert_component, shared_verilog
    if not isinstance(kernel, VitisKernel):
        raise TypeError(f"kernel must be a VitisKernel, not {kernel!r}")
    _check_clock(clock_mhz)
    check_hbm_bank(hbm_bank)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {}

    def put(name, text):
        path = out / name
        path.write_text(text)
        files[name] = path
    put(f"{KERNEL_NAME}.v", convert_component(kernel, KERNEL_NAME)
        + shared_verilog(kernel.accelerator.instanced_units))
    files["ttrain_ram.v"] = out / "ttrain_ram.v"
    shutil.copyfile(ram_verilog_path(), files["ttrain_ram.v"])
    put("kernel.xml", kernel_xml())
    put("kernel.xdc", kernel_xdc(clock_mhz))
    put("package_xo.tcl", package_xo_tcl([f"{KERNEL_NAME}.v", "ttrain_ram.v"], xdc="kernel.xdc"))
    put("link.cfg", vpp_link_config(hbm_bank=hbm_bank, clock_mhz=clock_mhz))
    put("build.sh", build_script(link=link, platform=platform))
    files["build.sh"].chmod(0o755)
    cfg = kernel.config
    acc = kernel.accelerator
    put("kernel.json", json.dumps({
        **(meta or {}), "kernel": KERNEL_NAME, "part": U50_PART, "platform": platform,
        "clock_mhz": clock_mhz, "hbm_bank": hbm_bank,
        "store_sizes": acc.store_sizes, "lanes": cfg.get("lanes", 8), "banks": acc.banks,
        "imem_depth": acc.imem_depth,
        "registers": [{"name": r.name, "offset": r.offset, "width": r.width, "kind": r.kind}
                      for r in REGISTER_MAP]}, indent=1) + "\n")
    if hw is not None:
        files[HW_JSON] = write_hw_json(hw, out)
    commands = [package_command()]
    if link:
        commands.append(vpp_link_command(platform=platform))
    return {"files": files, "commands": commands}


def kernel_tree(config, out_dir, *, link, clock_mhz=300.0, lanes=8, banks=None,
                imem_depth=None, hbm_bank=0, platform=None, run_tools=True, log=print):
    """Write the kernel tree of preset ``config`` and run the tools that are on ``PATH``.

    The hardware is :func:`~ttrain.platforms.hw.preset_hw_config` of the preset with the
    overrides (``"synth"`` flavor: every store a Verilog RAM template with the U50 mapping
    that fits, the special-function unit when the training step needs it); the tree records it
    as ``hw.json``. Every argument is checked before the (long) Verilog conversion and nothing
    is written when one is wrong. Returns the :func:`write_kernel_tree` result plus ``hw``,
    ``ran`` (the commands run) and ``pending`` (the commands left to run, with the reason).
    """
    import subprocess

    from .kernel import VitisKernel
    _check_clock(clock_mhz)
    check_hbm_bank(hbm_bank)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out} is a file, not a folder; give the tree a new or existing "
                         f"folder")
    hw = preset_hw_config(config, lanes=lanes, banks=banks, imem_depth=imem_depth,
                          clock_mhz=float(clock_mhz))
    if not hw.fits_u50:
        log(f"warning: preset {config!r} does not fit the U50 by the memory map "
            f"(`ttrain resources --config {config}`); generating it anyway")
    import time
    log(f"converting the kernel of {config!r} ({hw.lanes} lanes, {hw.total_words:,} store "
        f"words) to Verilog ...")
    t0 = time.monotonic()
    kernel = VitisKernel(**hw.accelerator_kwargs("synth"))
    tree = write_kernel_tree(kernel, out, clock_mhz=clock_mhz, hbm_bank=hbm_bank,
                             platform=platform or U50_VITIS_PLATFORM, link=link,
                             meta={"config": config}, hw=hw)
    log(f"  kernel tree written in {time.monotonic() - t0:.0f} s: {out} (Verilog, kernel.xml, "
        f"package_xo TCL, XDC, link.cfg, hw.json)")
    tree["hw"], tree["ran"], tree["pending"] = hw, [], []
    for cmd in tree["commands"]:
        tool = cmd.split()[0]
        if tree["pending"] or not run_tools or shutil.which(tool) is None:
            why = ("an earlier step did not run" if tree["pending"] else
                   "--no-run" if not run_tools else f"{tool} is not on PATH")
            tree["pending"].append((cmd, why))
            continue
        log(f"running in {out}: {cmd}")
        t1 = time.monotonic()
        proc = subprocess.run(cmd, shell=True, cwd=out)
        if proc.returncode != 0:
            raise RuntimeError(f"`{cmd}` failed with exit code {proc.returncode} (in {out})")
        log(f"  {tool} done in {time.monotonic() - t1:.0f} s")
        tree["ran"].append(cmd)
    if tree["pending"]:
        log(f"  {len(tree['pending'])} tool step(s) left to run by hand (printed below)")
    return tree
