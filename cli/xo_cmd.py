"""``ttrain xo`` / ``ttrain bitstream``: a preset as a Vitis RTL kernel for the Alveo U50.

``ttrain xo --config NAME`` writes the packaging tree of :class:`ttrain.platforms.kernel.VitisKernel`
(:func:`ttrain.platforms.vitis.write_kernel_tree`: Verilog, ``ttrain_ram.v``, ``kernel.xml``,
``package_xo.tcl``, ``kernel.xdc``, ``link.cfg``, ``build.sh``, ``kernel.json``, ``hw.json``)
and runs
``vivado`` on ``package_xo.tcl`` when it is on ``PATH``; ``ttrain bitstream`` also links the
``.xclbin`` with ``v++`` when that is on ``PATH``. Without the tools the tree is left ready and
the exact commands are printed.

The hardware is :func:`ttrain.platforms.hw.preset_hw_config` of the preset (stores from the
compiled training step's memory map with the BRAM/URAM mapping that fits the U50, instruction
memory for the program, the special-function unit it needs), as for every other build; the
tree is :func:`ttrain.platforms.vitis.kernel_tree`. This module only parses and prints.
"""

import sys
from pathlib import Path

from .commands import check_int, check_output_dir, check_positive_float

__all__ = ["register"]


def _check_args(args):
    """Every flag before the (minute-long) Verilog conversion; messages name the flag."""
    from .platforms.vitis import HBM_BANKS
    for flag, value in (("--lanes", args.lanes), ("--banks", args.banks)):
        if value is not None and (value < 1 or value & (value - 1)):
            raise ValueError(f"{flag} must be a positive power of two (1, 2, 4, 8, ...), "
                             f"got {value}")
    if args.imem_depth is not None and (args.imem_depth < 1
                                        or args.imem_depth & (args.imem_depth - 1)):
        raise ValueError(f"--imem-depth must be a positive power of two, got {args.imem_depth}")
    check_int("--hbm-bank", args.hbm_bank, 0, HBM_BANKS - 1)
    check_positive_float("--clock-mhz", args.clock_mhz)
    check_int("--clock-mhz", args.clock_mhz, 10, 500)
    check_output_dir("--out", args.out)


def _run(args, link):
    from .platforms.vitis import kernel_tree
    name = "bitstream" if link else "xo"
    _check_args(args)
    out = Path(args.out or Path("build") / "u50" / args.config / name)
    log = (lambda msg: print(msg, file=sys.stderr, flush=True))
    try:
        tree = kernel_tree(args.config, out, link=link, clock_mhz=args.clock_mhz,
                           lanes=args.lanes, banks=args.banks, imem_depth=args.imem_depth,
                           hbm_bank=args.hbm_bank, platform=args.platform,
                           run_tools=not args.no_run, log=log)
    except ValueError as e:               # name the flag the hardware configuration rejected
        msg = str(e)
        for field in ("lanes", "banks", "imem_depth"):
            if msg.startswith(field + " "):
                msg = "--" + field.replace("_", "-") + msg[len(field):]
        raise ValueError(msg) from None
    print(f"kernel tree for {args.config!r} in {out}:")
    for fname in tree["files"]:
        print(f"  {fname}")
    if tree["pending"]:
        print(f"tree ready; {tree['pending'][0][1]}. Run in {out}:")
        for cmd, _ in tree["pending"]:
            print(f"  {cmd}")
    else:
        print("done: " + ("ttrain_kernel.xclbin" if link else "ttrain_kernel.xo") + " built")
    return 0


def _add_common(p):
    from .golden.config import preset_names
    p.add_argument("--config", required=True, metavar="NAME",
                   help="preset name (" + ", ".join(preset_names()) + ")")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="build tree (default build/u50/<config>/<command>)")
    p.add_argument("--clock-mhz", type=float, default=300.0, metavar="MHZ",
                   help="kernel clock ap_clk in MHz (default 300)")
    p.add_argument("--lanes", type=int, default=8, metavar="P",
                   help="contraction-engine lanes (power of two; default 8)")
    p.add_argument("--banks", type=int, default=None, metavar="B",
                   help="banks per store (default = lanes)")
    p.add_argument("--imem-depth", type=int, default=None, metavar="N",
                   help="instruction memory depth (default: the compiled training step's "
                        "program rounded up to a power of two, at least 64)")
    p.add_argument("--hbm-bank", type=int, default=0, metavar="K",
                   help="HBM pseudo-channel of m_axi_gmem (default 0)")
    p.add_argument("--platform", default=None, metavar="XPFM",
                   help="Vitis platform for the link (default the U50 gen3x16 XDMA shell)")
    p.add_argument("--no-run", action="store_true",
                   help="only write the tree, even if vivado / v++ are on PATH")


def register(sub):
    p = sub.add_parser(
        "xo", help="Vitis RTL kernel (.xo) tree of a preset for the Alveo U50",
        description="Write the Vitis RTL-kernel packaging tree of a preset (Verilog, "
                    "kernel.xml, package_xo.tcl, XDC, v++ link.cfg) and run Vivado's "
                    "package_xo when vivado is on PATH; otherwise print the command.")
    _add_common(p)
    p.set_defaults(func=lambda a: _run(a, link=False))
    p = sub.add_parser(
        "bitstream", help="U50 .xclbin of a preset (package_xo, then v++ --link)",
        description="As `ttrain xo`, then link the kernel into an .xclbin for the U50 shell "
                    "with v++ (HBM bank mapping and clock from link.cfg) when vivado and v++ "
                    "are on PATH; otherwise leave the ready tree and print the commands.")
    _add_common(p)
    p.set_defaults(func=lambda a: _run(a, link=True))
