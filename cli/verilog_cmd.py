"""``ttrain verilog``: export a reusable RTL unit as standalone Verilog with a port map.

Each unit is written as ``<out>/<module>.v`` (one module per configuration; Amaranth emits no
HDL parameters, so the configuration is in the module name) plus ``<out>/<module>.ports.json``
(every port: name, direction, width; the component's signature metadata) and, for units that
instantiate the project's RAM template, a copy of ``ttrain_ram.v``. ``--lint`` runs
``verilator --lint-only -Wall`` with the project's waiver file.
"""

import json
from pathlib import Path


def _engine(lanes, stores):
    from .rtl.engine import ContractionEngine, StoreSpec
    return ContractionEngine(lanes=lanes, stores=[StoreSpec(*s) for s in stores])


def _units():
    """Return ``{unit: (description, factory(args) -> (component, module name, extra files))}``."""
    from .rtl.fp32 import FP32Add, FP32Compare, FP32Mul
    from .rtl.store import BankedStore, ram_verilog_path
    from .rtl.prng import PRNGUnit
    from .rtl.update import IntUpdatePipeline, RegionSweeper, UpdatePipeline

    def depth(args):
        return args.depth

    return {
        "fp32_mul": ("pipelined FP32 multiplier (latency 6)",
                     lambda a: (FP32Mul(), "ttrain_fp32_mul", [])),
        "fp32_add": ("pipelined FP32 adder (latency 6)",
                     lambda a: (FP32Add(), "ttrain_fp32_add", [])),
        "fp32_compare": ("FP32 compare / max / min (latency 1)",
                         lambda a: (FP32Compare(), "ttrain_fp32_compare", [])),
        "store": ("banked on-chip store (--depth words, --lanes banks, --style)",
                  lambda a: (BankedStore(depth=depth(a), banks=a.lanes, style=a.style,
                                         impl="verilog"),
                             f"ttrain_store_d{depth(a)}_b{a.lanes}_{a.style}",
                             [ram_verilog_path()])),
        "engine": ("contraction engine (--lanes lanes; stores f/a/s of --depth words)",
                   lambda a: (_engine(a.lanes, [["f", depth(a), "block", "memory"],
                                                ["a", depth(a), "ultra", "verilog"],
                                                ["s", depth(a), "block", "memory"]]),
                              f"ttrain_engine_l{a.lanes}_d{depth(a)}", [ram_verilog_path()])),
        "update": ("SGD update pipeline (theta - lr*g, latency 13)",
                   lambda a: (UpdatePipeline(), "ttrain_update", [])),
        "update_int": ("integer SGD update (round + saturate, int8)",
                       lambda a: (IntUpdatePipeline(), "ttrain_update_int", [])),
        "sweeper": ("region sweeper: SGD over a parameter/gradient region (--depth words)",
                    lambda a: (RegionSweeper(param_depth=depth(a)),
                               f"ttrain_sweeper_d{depth(a)}", [])),
        "prng": ("counter-based PRNG unit, draw(seed, index) on --lanes lanes (latency 15)",
                 lambda a: (PRNGUnit(lanes=a.lanes), f"ttrain_prng_l{a.lanes}", [])),
    }


UNIT_NAMES = ["fp32_mul", "fp32_add", "fp32_compare", "store", "engine", "update", "update_int",
              "sweeper", "prng"]

# The sizing flags each unit takes (the others are rejected, not silently ignored).
UNIT_FLAGS = {"fp32_mul": (), "fp32_add": (), "fp32_compare": (),
              "store": ("lanes", "depth", "style"), "engine": ("lanes", "depth"), "update": (),
              "update_int": (), "sweeper": ("depth",), "prng": ("lanes",)}
DEFAULTS = {"lanes": 8, "depth": 4096, "style": "block"}


def check_flags(units, given):
    """Raise ValueError if a flag in ``given`` ({name: value}) applies to none of ``units``,
    or its value does not suit them; return ``{name: value}`` with the defaults filled in."""
    for name, value in given.items():
        if value is not None and not any(name in UNIT_FLAGS[u] for u in units):
            takes = sorted({f"--{f}" for u in units for f in UNIT_FLAGS[u]})
            raise ValueError(f"--{name} does not apply to --unit {'/'.join(units)} (it takes "
                             f"{', '.join(takes) or 'no sizing flags'}): drop --{name}")
    values = {k: DEFAULTS[k] if given.get(k) is None else given[k] for k in DEFAULTS}
    _check_sizes(units, values["lanes"], values["depth"])
    return values


def _check_sizes(units, lanes, depth):
    banked = any(u in ("store", "engine") for u in units)
    if banked and (isinstance(lanes, bool) or not isinstance(lanes, int) or lanes < 1
                   or lanes & (lanes - 1)):
        raise ValueError(f"--lanes must be a positive power of two (lanes = store banks), "
                         f"not {lanes!r}")
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"--depth must be a positive integer, not {depth!r}")
    if banked and depth % lanes:
        raise ValueError(f"--depth {depth} is not a multiple of banks = --lanes {lanes}: use "
                         f"--depth {-(-depth // lanes) * lanes}")
    if any(u == "engine" for u in units) and lanes > 256:
        raise ValueError(f"--lanes must be at most 256 for the engine, not {lanes}")


def export_unit(unit, out_dir, *, lanes=8, depth=4096, style="block", lint=False):
    """Write ``unit`` as Verilog + port-map JSON into ``out_dir``; return the written paths."""
    from .platforms.sim.verilator import lint_verilator
    from .rtl.export import component_ports, convert_component

    from ttrain.golden.train import write_atomically

    units = _units()
    if unit not in units:
        raise ValueError(f"unknown unit {unit!r}; choose one of: {', '.join(units)}")
    _check_sizes([unit], lanes, depth)

    class _Args:
        pass
    args = _Args()
    args.lanes, args.depth, args.style = lanes, depth, style
    component, name, extra = units[unit][1](args)

    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is an existing file, not a directory: pass a directory")
    out.mkdir(parents=True, exist_ok=True)
    ports = []
    for pname, (value, direction) in component_ports(component).items():
        ports.append({"name": pname, "direction": direction.name.lower(), "width": len(value)})
    ports = [{"name": "clk", "direction": "input", "width": 1},
             {"name": "rst", "direction": "input", "width": 1}] + ports
    # every file is replaced atomically: never a half-written module beside an old port map
    vfile = out / f"{name}.v"
    verilog = convert_component(component, name).encode("utf-8")
    write_atomically(vfile, lambda f: f.write(verilog))
    written = [vfile]
    for src in extra:
        dst = out / Path(src).name
        write_atomically(dst, lambda f, src=src: f.write(Path(src).read_bytes()))
        written.append(dst)
    meta = {"unit": unit, "module": name, "description": units[unit][0], "ports": ports,
            "signature": component.metadata.as_json(), "files": [p.name for p in written]}
    jfile = out / f"{name}.ports.json"
    text = (json.dumps(meta, indent=1) + "\n").encode("utf-8")
    write_atomically(jfile, lambda f: f.write(text))
    written.append(jfile)
    if lint:
        # Lint a fresh instance: an Amaranth component is elaborated once per conversion.
        component = units[unit][1](args)[0]
        lint_verilator(component, name=name, extra_sources=[Path(p) for p in extra])
    return written


def _run(args):
    from .commands import check_output_dir
    units = list(_units()) if args.unit == "all" else [args.unit]
    values = check_flags(units, {"lanes": args.lanes, "depth": args.depth, "style": args.style})
    check_output_dir("--out", args.out)
    for unit in units:
        written = export_unit(unit, args.out, lint=args.lint, **values)
        lint = ", lint clean (verilator -Wall + waivers)" if args.lint else ""
        print(f"{unit}: " + ", ".join(str(p) for p in written) + lint)
    return 0


def register(sub):
    p = sub.add_parser(
        "verilog", help="export a reusable RTL unit as Verilog with a port-map JSON",
        description=__doc__.split("\n\n")[1] if __doc__ else None)
    p.add_argument("--unit", required=True, choices=UNIT_NAMES + ["all"], metavar="NAME",
                   help="unit to export: " + ", ".join(UNIT_NAMES) + ", or all")
    p.add_argument("--out", default="build/verilog", metavar="DIR",
                   help="output directory (default build/verilog)")
    p.add_argument("--lanes", type=int, metavar="P",
                   help="engine lanes / store banks, a power of two (store, engine, prng; default 8)")
    p.add_argument("--depth", type=int, metavar="WORDS",
                   help="store depth in words (store, engine, sweeper; default 4096)")
    p.add_argument("--style", choices=["block", "ultra", "auto"],
                   help="store RAM style: block (BRAM), ultra (URAM) or auto (store; default "
                        "block)")
    p.add_argument("--lint", action="store_true",
                   help="also run verilator --lint-only -Wall with the project's waivers")
    p.set_defaults(func=_run)
