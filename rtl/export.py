"""Verilog export of any ttrain component (the library function every generator uses).

``convert_component(component, name)`` is ``amaranth.back.verilog.convert(component,
name=name, emit_src=False, strip_internal_attrs=True)`` with the ports of
:func:`component_ports`: Amaranth's own port naming (``i__payload``, ``o__valid``, ...,
plus ``clk`` and ``rst``), but members tied to constants (``always_ready``/``always_valid``
streams) left out instead of rejected. Used by ``ttrain verilog``, the FuseSoC generator, the
Vitis tree, the resource estimate and the Verilator builds of the testbench.
"""

import os

__all__ = ["component_ports", "convert_component", "check_name", "shared_unit", "shared_sources",
           "shared_verilog"]


def component_ports(component):
    """Return the ``ports=`` mapping of ``component`` for :func:`amaranth.back.verilog.convert`.

    Same naming as Amaranth's default (``i__payload``, ``o__valid``, ...) but members tied to
    constants (``always_ready``/``always_valid`` streams) are left out instead of rejected.
    """
    from amaranth.hdl import Const, Value, ValueCastable
    from amaranth.hdl import _ir
    from amaranth.lib import wiring

    if not isinstance(getattr(component, "signature", None), wiring.Signature):
        raise TypeError(f"component must be an amaranth.lib.wiring.Component, not "
                        f"{component!r}")
    ports = {}
    for path, member, value in component.signature.flatten(component):
        if isinstance(value, ValueCastable):
            value = value.as_value()
        if not isinstance(value, Value) or isinstance(value, Const):
            continue
        direction = (_ir.PortDirection.Input if member.flow == wiring.In
                     else _ir.PortDirection.Output)
        ports["__".join(map(str, path))] = (value, direction)
    return ports


def convert_component(component, name):
    """Return the Verilog of ``component`` as a module called ``name`` (str)."""
    from amaranth.back import verilog

    check_name(name)
    os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")
    return verilog.convert(component, name=name, ports=component_ports(component),
                           emit_src=False, strip_internal_attrs=True)


def check_name(name):
    """Raise ValueError unless ``name`` is a Verilog identifier."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"name must be a Verilog identifier such as 'fp32_mul', not {name!r}")


# ---- shared units: one Verilog module, many instances ----------------------------------------

_SHARED = {}


def shared_unit(unit_class, module=None):
    """Return a component class that elaborates ``unit_class`` (a component class or a
    no-argument factory) as an ``Instance`` of one Verilog module (``module``, default
    ``ttrain_<class name>``) instead of inlining it.

    Amaranth elaborates and emits every instance of a component separately, so a 256-lane
    engine carries 256 copies of its FP32 multiplier through conversion and Verilator's C++
    compile. With the wrapper the unit is converted once (:func:`shared_sources`) and
    instantiated per lane: the same netlist for Yosys and Verilator (the wrapped unit's own
    Verilog), a fraction of the conversion and compile time. The wrapper has the unit's
    signature and ``latency``; it runs only where the module's Verilog is given to the tool
    (not in the Amaranth simulator). Classes are cached: one wrapper per ``(unit_class,
    module)``.
    """
    from amaranth.hdl import ClockSignal, Instance, Module, ResetSignal
    from amaranth.hdl import _ir
    from amaranth.lib import wiring

    label = getattr(unit_class, "__name__", None) or unit_class.func.__name__   # partial
    module = module or f"ttrain_{label.lower()}"
    check_name(module)
    key = (unit_class, module)
    if key in _SHARED:
        return _SHARED[key]
    probe = unit_class()
    probe._MustUse__silence = True
    signature, latency = probe.signature, getattr(probe, "latency", None)

    class Shared(wiring.Component):
        def __init__(self):
            super().__init__(signature)

        def elaborate(self, platform):
            m = Module()
            kwargs = {}
            for name, (value, direction) in component_ports(self).items():
                prefix = "i_" if direction == _ir.PortDirection.Input else "o_"
                kwargs[prefix + name] = value
            m.submodules.unit = Instance(module, i_clk=ClockSignal(), i_rst=ResetSignal(),
                                         **kwargs)
            return m

    Shared.__name__ = Shared.__qualname__ = f"Shared{label}"
    Shared.unit_class = unit_class
    Shared.module = module
    if latency is not None:
        Shared.latency = property(lambda self: latency,
                                  doc=f"The wrapped unit's latency ({latency} cycles).")
    _SHARED[key] = Shared
    return Shared


def shared_sources(units, out_dir):
    """Write the Verilog module of every :func:`shared_unit` class in ``units`` into
    ``out_dir`` (once per module: a file whose text is unchanged is left alone, so builds
    keyed by their sources stay cached) and return the paths. Name the folder ``amaranth``:
    the Verilator waivers for Amaranth-generated Verilog match ``*/amaranth/*.v``, and
    ``build_verilator`` copies such sources into its own ``amaranth/`` folder."""
    from pathlib import Path

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for cls in dict.fromkeys(units):
        text = convert_component(cls.unit_class(), cls.module)
        path = out / f"{cls.module}.v"
        if not path.is_file() or path.read_text() != text:
            tmp = path.with_suffix(f".{os.getpid()}.tmp")     # parallel builds: atomic
            tmp.write_text(text)
            os.replace(tmp, path)
        paths.append(path)
    return paths


def shared_verilog(units):
    """Return the Verilog of every :func:`shared_unit` class in ``units`` (once per module),
    one text: appended to a design's own Verilog it makes the file self-contained (the
    FuseSoC generator and the Vitis tree write one file per design)."""
    return "".join(convert_component(cls.unit_class(), cls.module)
                   for cls in dict.fromkeys(units))
