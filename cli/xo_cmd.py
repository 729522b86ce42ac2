"""``ttrain xo`` / ``ttrain bitstream``: a preset as a Vitis RTL kernel for the Alveo U50.

``ttrain xo --config NAME`` writes the packaging tree of :class:`ttrain.rtl.kernel.VitisKernel`
(:func:`ttrain.platforms.vitis.write_kernel_tree`: Verilog, ``ttrain_ram.v``, ``kernel.xml``,
``package_xo.tcl``, ``kernel.xdc``, ``link.cfg``, ``build.sh``, ``kernel.json``) and runs
``vivado`` on ``package_xo.tcl`` when it is on ``PATH``; ``ttrain bitstream`` also links the
``.xclbin`` with ``v++`` when that is on ``PATH``. Without the tools the tree is left ready and
the exact commands are printed.

The stores are sized by :func:`kernel_config` from the whole-model compiler's memory map (the
same sizes as ``ttrain resources``), with the per-store BRAM/URAM mapping that fits the U50; the
instruction memory holds the compiled training-step program.
"""

import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["kernel_config", "build_tree", "register"]


def kernel_config(config, *, lanes=8, banks=None, imem_depth=None):
    """Return ``(kwargs, fits)``: the :class:`~ttrain.rtl.top.Accelerator` arguments of
    preset ``config`` and whether its stores fit the U50 by the memory map.

    Store sizes: :func:`ttrain.resources_cmd.store_sizes_from_compiler` (the compiled
    training step's memory map, rounded to rows of ``banks`` words); ``imem_depth`` (default:
    the smallest power of two holding that program, at least 256; a smaller value than the
    program is rejected); store mapping: the BRAM/URAM assignment
    of :func:`ttrain.resources_cmd.fit_memory` that fits the U50 (the default one if it fits);
    the vector unit gets the special-function unit the compiled step needs.
    Stores are the ``ttrain_ram.v`` templates (``store_impl="verilog"``) so Vivado infers the
    RAMs exactly as planned.
    """
    from .golden.config import preset_names
    from .golden.config import get_config
    from .golden.model_compiler import compile_model
    from .resources_cmd import fit_memory
    from .rtl.top import store_sizes_for
    from .testbench.model import chip_config
    if config not in preset_names():
        raise ValueError(f"unknown preset {config!r}; choose one of {', '.join(preset_names())}")
    for name, v in (("lanes", lanes), ("imem_depth", imem_depth)):
        if v is None and name == "imem_depth":
            continue
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, not {v!r}")
    banks = lanes if banks is None else banks
    program = compile_model(chip_config(get_config(config))[0]).program
    n = len(program.instructions)
    if imem_depth is None:
        imem_depth = max(256, 1 << (n - 1).bit_length())
    elif imem_depth < n:
        raise ValueError(f"--imem-depth {imem_depth} cannot hold the {n}-instruction training "
                         f"step of {config}; use at least {1 << (n - 1).bit_length()}")
    sizes = store_sizes_for(program.store_sizes, banks)
    fit = fit_memory(sizes, banks)
    entry = fit["best"] or fit["auto"]
    return {"store_sizes": sizes, "lanes": lanes, "banks": banks, "imem_depth": imem_depth,
            "store_impl": "verilog", "store_style": entry["styles"],
            # the training step uses exp/recip/rsqrt/tanh/GELU/log (opcodes 0x40-0x47); the
            # Amaranth FP32 units keep the tree self-contained (no extra Verilog files)
            "special": True, "special_impl": "amaranth"}, fit["fits"]


def build_tree(config, out_dir, *, link, clock_mhz=300, lanes=8, banks=None, imem_depth=None,
               hbm_bank=0, platform=None, run_tools=True, log=print):
    """Write the kernel tree of preset ``config`` and run the tools that are on ``PATH``.

    Returns the :func:`~ttrain.platforms.vitis.write_kernel_tree` result plus ``ran`` (the
    commands run) and ``pending`` (the commands left to run, with the reason).
    """
    from .platforms.vitis import U50_VITIS_PLATFORM, write_kernel_tree
    from .rtl.kernel import VitisKernel
    acc_cfg, fits = kernel_config(config, lanes=lanes, banks=banks, imem_depth=imem_depth)
    if not fits:
        log(f"warning: preset {config!r} does not fit the U50 by the memory map "
            f"(`ttrain resources --config {config}`); generating it anyway")
    kernel = VitisKernel(**acc_cfg)
    tree = write_kernel_tree(kernel, out_dir, clock_mhz=clock_mhz, hbm_bank=hbm_bank,
                             platform=platform or U50_VITIS_PLATFORM, link=link,
                             meta={"config": config})
    out = Path(out_dir)
    tree["ran"], tree["pending"] = [], []
    for cmd in tree["commands"]:
        tool = cmd.split()[0]
        if tree["pending"] or not run_tools or shutil.which(tool) is None:
            why = ("an earlier step did not run" if tree["pending"] else
                   "--no-run" if not run_tools else f"{tool} is not on PATH")
            tree["pending"].append((cmd, why))
            continue
        log(f"running in {out}: {cmd}")
        proc = subprocess.run(cmd, shell=True, cwd=out)
        if proc.returncode != 0:
            raise RuntimeError(f"`{cmd}` failed with exit code {proc.returncode} (in {out})")
        tree["ran"].append(cmd)
    return tree


def _run(args, link):
    name = "bitstream" if link else "xo"
    out = Path(args.out or Path("build") / "u50" / args.config / name)
    log = (lambda msg: print(msg, file=sys.stderr, flush=True))
    tree = build_tree(args.config, out, link=link, clock_mhz=args.clock_mhz, lanes=args.lanes,
                      banks=args.banks, imem_depth=args.imem_depth, hbm_bank=args.hbm_bank,
                      platform=args.platform, run_tools=not args.no_run, log=log)
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
                        "program rounded up to a power of two, at least 256)")
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
