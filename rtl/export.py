"""Verilog export of any ttrain component (the library function every generator uses).

``convert_component(component, name)`` is ``amaranth.back.verilog.convert(component,
name=name, emit_src=False, strip_internal_attrs=True)`` with the ports of
:func:`component_ports`: Amaranth's own port naming (``i__payload``, ``o__valid``, ...,
plus ``clk`` and ``rst``), but members tied to constants (``always_ready``/``always_valid``
streams) left out instead of rejected. Used by ``ttrain verilog``, the FuseSoC generator, the
Vitis tree, the resource estimate and the Verilator builds of the testbench.
"""

import os

__all__ = ["component_ports", "convert_component", "check_name"]


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
