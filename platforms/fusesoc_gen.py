"""FuseSoC generator: the accelerator top of a preset as Verilog, plus the RAM template.

``ttrain.core`` (repository root) declares this script as the generator
``ttrain_accelerator``. FuseSoC calls it with one argument, a YAML file holding
``gapi``, ``files_root``, ``vlnv`` and ``parameters``; it writes, into the current folder:

* ``<module>.v`` — :class:`~ttrain.rtl.top.Accelerator` of the preset's hardware configuration
  (:func:`ttrain.platforms.hw.preset_hw_config`: stores from the compiled training step's
  memory map with the BRAM/URAM mapping that fits the U50, instruction memory for the program,
  the special-function unit); every store an instance of the RAM template;
* ``hw.json`` — that configuration (the same file a Verilator build or ``ttrain xo`` tree of
  the same preset and parameters records);
* ``ttrain_ram.v`` — a copy of the RAM template (``ttrain_ram_block`` / ``ttrain_ram_ultra``),
  when run by hand (under FuseSoC the core's own ``rtl/ram.v`` fileset provides it);
* ``<module>.ports.json`` — every top-level port (name, direction, width);
* ``<core name>.core`` — the generated core listing those files (CAPI=2).

Parameters (all optional): ``config`` (preset, default ``tiny``), ``lanes`` (default 8),
``banks`` (default = lanes), ``imem_depth`` (default: the program's), ``module`` (default
``ttrain_accelerator_<config>``, with ``-`` replaced by ``_``).

It can also be run by hand: ``python platforms/fusesoc_gen.py --config tiny --out DIR``.
"""

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

__all__ = ["generate_accelerator", "main"]

_PARAMS = {"config", "lanes", "banks", "imem_depth", "module"}


def _yaml():
    try:
        import yaml
    except ImportError:                         # pragma: no cover - PyYAML is a test dependency
        raise SystemExit("the FuseSoC generator needs PyYAML: pip install pyyaml") from None
    return yaml


def generate_accelerator(config="tiny", out_dir=".", *, lanes=None, banks=None, imem_depth=None,
                         module=None, ram=True):
    """Write the accelerator top of preset ``config`` as Verilog into ``out_dir``.

    The hardware is :func:`ttrain.platforms.hw.preset_hw_config` (the preset's compiled
    training step: store sizes from its memory map, the U50 BRAM/URAM mapping that fits,
    instruction memory for the program, the special-function unit it needs), built in the
    ``"synth"`` flavor (every store a RAM-template instance), so the target runs its own
    training step; ``hw.json`` records it.

    Parameters
    ----------
    config : str
        Preset name.
    out_dir : str or Path
        Output folder (created).
    lanes, banks, imem_depth : int or None
        Overrides of :func:`~ttrain.platforms.hw.hw_config` (``None``: its defaults).
    module : str or None
        Verilog module name (default ``ttrain_accelerator_<config>``).
    ram : bool
        Also copy the RAM template as ``ttrain_ram.v``.

    Returns
    -------
    dict
        ``module``, ``files`` (paths written: Verilog, RAM template, port map, ``hw.json``),
        ``hw`` (the :class:`~ttrain.platforms.hw.HwConfig`), ``store_words`` and
        ``store_style`` (per store).
    """
    os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")
    from ttrain.platforms.hw import preset_hw_config, write_hw_json
    from ttrain.rtl.export import component_ports, convert_component, shared_verilog
    from ttrain.rtl.store import ram_verilog_path
    from ttrain.rtl.top import Accelerator

    module = module or "ttrain_accelerator_" + str(config).replace("-", "_")
    if not module.isidentifier():
        raise ValueError(f"module must be a Verilog identifier, not {module!r}")
    hw = preset_hw_config(config, lanes=lanes, banks=banks, imem_depth=imem_depth)
    if not hw.fits_u50:
        print(f"warning: preset {config!r} does not fit the U50 by the memory map "
              f"(`ttrain resources --config {config}`); generating it anyway", file=sys.stderr)
    top = Accelerator(**hw.accelerator_kwargs("synth"))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ports = [{"name": n, "direction": d.name.lower(), "width": len(v)}
             for n, (v, d) in component_ports(top).items()]
    vfile = out / f"{module}.v"
    vfile.write_text(convert_component(top, module) + shared_verilog(top.instanced_units))
    written = [vfile]
    if ram:
        written.append(out / "ttrain_ram.v")
        shutil.copyfile(ram_verilog_path(), written[-1])
    pfile = out / f"{module}.ports.json"
    pfile.write_text(json.dumps({
        "module": module, "config": config, "lanes": hw.lanes, "banks": hw.banks,
        "imem_depth": hw.imem_depth, "store_words": hw.stores, "store_style": hw.styles,
        "ports": [{"name": "clk", "direction": "input", "width": 1},
                  {"name": "rst", "direction": "input", "width": 1}] + ports},
        indent=1) + "\n")
    written += [pfile, write_hw_json(hw, out)]
    return {"module": module, "files": written, "hw": hw, "store_words": hw.stores,
            "store_style": hw.styles}


def _core_text(name, module, files):
    yaml = _yaml()
    doc = {"name": name,
           "description": f"ttrain accelerator top ({module}), generated",
           "filesets": {"rtl": {"files": [Path(f).name for f in files if str(f).endswith(".v")],
                                "file_type": "verilogSource"}},
           "targets": {"default": {"filesets": ["rtl"], "toplevel": module}}}
    return "CAPI=2:\n" + yaml.safe_dump(doc, sort_keys=False)


def _opt_int(params, key):
    return None if params.get(key) is None else int(params[key])


def _from_fusesoc(config_file):
    yaml = _yaml()
    data = yaml.safe_load(Path(config_file).read_text())
    params = dict(data.get("parameters") or {})
    unknown = set(params) - _PARAMS
    if unknown:
        raise SystemExit(f"unknown generator parameter(s) {sorted(unknown)}; "
                         f"use {sorted(_PARAMS)}")
    res = generate_accelerator(params.get("config", "tiny"), ".",
                               lanes=_opt_int(params, "lanes"), banks=_opt_int(params, "banks"),
                               imem_depth=_opt_int(params, "imem_depth"),
                               module=params.get("module"), ram=False)
    vlnv = data.get("vlnv") or f"ttrain:ttrain:{res['module']}:0"
    core_name = vlnv.split(":")[2] if vlnv.count(":") >= 2 else res["module"]
    Path(f"{core_name}.core").write_text(_core_text(vlnv, res["module"], res["files"]))
    return 0


def main(argv=None):
    """Entry point: FuseSoC's ``<config>.yml`` argument, or ``--config/--out`` by hand."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 1 and not argv[0].startswith("-"):
        return _from_fusesoc(argv[0])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="tiny")
    p.add_argument("--out", default="build/fusesoc")
    p.add_argument("--lanes", type=int, default=None)
    p.add_argument("--banks", type=int, default=None)
    p.add_argument("--imem-depth", type=int, default=None)
    p.add_argument("--module", default=None)
    a = p.parse_args(argv)
    res = generate_accelerator(a.config, a.out, lanes=a.lanes, banks=a.banks,
                               imem_depth=a.imem_depth, module=a.module)
    for f in res["files"]:
        print(f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
