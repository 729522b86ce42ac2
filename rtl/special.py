"""Pipelined special-function unit: exp, recip, rsqrt, tanh, tanh', GELU, GELU', log on FP32.

Golden: :func:`ttrain.golden.special.fp32_special` (``docs/special-functions.md``). The unit
takes one ``(func, x)`` per cycle and returns ``y = fp32_special(func, x)`` bit for bit after a
fixed :attr:`SpecialFunctionUnit.latency`, whatever the mix of functions, or (``latency=
"per_function"``, one function in flight at a time) after that function's own latency.

How it is built: every function of :mod:`ttrain.golden.special` is a straight-line sequence
over a small op set (``exp_sequence(o, x)``, ...). :class:`_PipelineOps` implements that op set
in hardware: each FP32 multiply/add/subtract becomes an :class:`~ttrain.rtl.fp32.FP32Mul` /
:class:`~ttrain.rtl.fp32.FP32Add` instance, max/min/``<`` an
:class:`~ttrain.rtl.fp32.FP32Compare`, and the exact bit/integer ops (exponent split with a
leading-zero count, exponent insertion, seeds, selects) small combinational logic. Every value
carries the pipeline stage at which it is valid; an operation whose inputs arrive at different
stages takes the earlier ones from a delay line (one wide reset-less shift register per value,
tapped by every user), so each function becomes a fully pipelined datapath scheduled as soon as
possible. One exp and one reciprocal datapath are shared by the functions that use them (the
function code selects their inputs); every result is delayed to the slowest one and the output
multiplexer selects by ``func``. So the hardware runs exactly the golden sequences; it computes
no expected values.

Integer/bit ops that do arithmetic (``split``, ``pow2``, ``scale_exp``, ``int_from_magic``,
``magic_from_int``, ``rsqrt_seed``, ``iadd``/``isub``/``ishr``/``iand``) end in a register (1 cycle); selects,
sign and classification logic are combinational (0 cycles) in front of the next register.
"""

from amaranth.hdl import Cat, ClockSignal, Const, Instance, Module, Mux, ResetSignal, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..golden import numerics
from ..golden import special as S
from ..golden.special import FUNCTION_CODES, FUNCTIONS, INT_BITS
from .fp32 import CANONICAL_NAN, FP32Add, FP32Compare, FP32Mul, leading_zeros

__all__ = ["SpecialOperand", "SpecialFunctionUnit", "FUNC_BITS", "FP_UNIT_MODULES",
           "LATENCY_MODES", "special_fp_units"]

#: Verilog module names the unit instantiates with ``impl="verilog"``, and the
#: :mod:`ttrain.rtl.fp32` component each must be (convert it under that name, e.g. with
#: ``platforms.sim.verilator.convert_component(FP32Mul(), "ttrain_sf_fp32_mul")``).
FP_UNIT_MODULES = {"ttrain_sf_fp32_mul": "FP32Mul", "ttrain_sf_fp32_add": "FP32Add",
                   "ttrain_sf_fp32_compare": "FP32Compare(latency=1)"}


def special_fp_units():
    """The :func:`~ttrain.rtl.export.shared_unit` classes of :data:`FP_UNIT_MODULES` (what an
    ``impl="verilog"`` unit instantiates; a build supplies their modules)."""
    from functools import partial

    from .export import shared_unit
    return [shared_unit(FP32Mul, "ttrain_sf_fp32_mul"),
            shared_unit(FP32Add, "ttrain_sf_fp32_add"),
            shared_unit(partial(FP32Compare, latency=1), "ttrain_sf_fp32_compare")]


_MODULE = {"mul": "ttrain_sf_fp32_mul", "add": "ttrain_sf_fp32_add",
           "compare": "ttrain_sf_fp32_compare"}

#: ``latency=`` of :class:`SpecialFunctionUnit`: every result after the slowest function's
#: latency, or each after its own (one function in flight at a time).
LATENCY_MODES = ("fixed", "per_function")

#: Width of the function code (codes: :data:`ttrain.golden.special.FUNCTION_CODES`).
FUNC_BITS = 3

#: Input of the unit: ``x`` in bits 0-31, the function code in bits 32-34.
SpecialOperand = data.StructLayout({"x": 32, "func": FUNC_BITS})

#: Functions with their own operators only, started late (from the ``x`` delay line) so that
#: their results reach the output multiplexer without a delay line of their own.
_INDEPENDENT = ("rsqrt", "tanh_grad", "log")

_FP_LATENCY = {"mul": 6, "add": 6}   # FP32Mul / FP32Add (checked against the units below)
_CMP_LATENCY = 1


class _Val:
    """A value of the pipeline: an Amaranth value valid ``t`` cycles after the input.

    ``t is None`` marks a constant (valid at every stage). ``kind`` is ``"f"`` (32-bit float
    bits), ``"b"`` (1-bit bool) or ``"i"`` (INT_BITS-bit signed integer).
    """

    def __init__(self, value, t, kind):
        self.value, self.t, self.kind = value, t, kind


class _PipelineOps:
    """The op set of :mod:`ttrain.golden.special`, building pipeline hardware in module ``m``.

    Each call returns a :class:`_Val`; see the module docstring for the latencies. ``stats``
    counts the FP32 units instantiated.
    """

    def __init__(self, m, prefix, *, trace_only=False, impl="amaranth", plan=None):
        self._m = m
        self._trace_only = trace_only
        self._impl = impl
        self._given_plan = plan
        self.plan = []
        self._prefix = prefix
        self._delays = {}
        self._n = 0
        self.stats = {"mul": 0, "add": 0, "compare": 0}

    # -- plumbing ----------------------------------------------------------------------------
    def _name(self, what):
        self._n += 1
        return f"{self._prefix}_{what}{self._n}"

    def _lift(self, v, kind):
        if isinstance(v, _Val):
            if v.kind != kind:
                raise TypeError(f"special-function sequence passed a {v.kind!r} value where a "
                                f"{kind!r} value is needed")
            return v
        if kind == "b":
            return _Val(Const(int(bool(v)), 1), None, "b")
        if kind == "i":
            return _Val(Const(int(v), signed(INT_BITS)), None, "i")
        return self.const(v)

    def at(self, v, t):
        """Return the value of ``v`` delayed to stage ``t`` (constants as they are).

        Every value gets at most one delay line: one wide reset-less register shifted by the
        value's width each cycle, tapped at each needed delay. Its depth comes from the plan
        recorded by a previous identical build (``plan=``); without a plan (recording), the
        depths are recorded in :attr:`plan` and ``v`` itself is returned.
        """
        if v.t is None or v.t == t:
            return v.value
        if v.t > t:
            raise AssertionError(f"value needed at stage {t} is only valid at stage {v.t}")
        d = t - v.t
        entry = self._delays.get(id(v))
        if entry is None:
            index = len(self._delays)
            line = None
            if self._given_plan is not None:
                depth = self._given_plan[index]
                width = len(v.value)
                line = Signal(width * depth, name=self._name("dl"), reset_less=True)
                self._m.d.sync += line.eq(Cat(v.value, line[0:width * (depth - 1)])
                                          if depth > 1 else v.value)
            entry = self._delays[id(v)] = [v, index, line]
            self.plan.append(0)
        _, index, line = entry
        if line is None:
            self.plan[index] = max(self.plan[index], d)
            return v.value
        width = len(v.value)
        if d > self._given_plan[index]:
            raise AssertionError(f"delay {d} beyond the planned depth {self._given_plan[index]}")
        tap = line[(d - 1) * width:d * width]
        return tap.as_signed() if v.value.shape().signed else tap

    @property
    def delay_bits(self):
        """Bits of all delay lines (of the plan recorded or given)."""
        plan = self._given_plan if self._given_plan is not None else self.plan
        return sum(len(v.value) * depth for (v, index, _), depth
                   in zip(self._delays.values(), plan))

    def _align(self, *vals):
        ts = [v.t for v in vals if v.t is not None]
        t = max(ts) if ts else None
        return t, [self.at(v, t) if t is not None else v.value for v in vals]

    def _comb(self, kind, value, t, shape):
        sig = Signal(shape, name=self._name("c"))
        self._m.d.comb += sig.eq(value)
        return _Val(sig, t, kind)

    def _reg(self, kind, value, t, shape):
        sig = Signal(shape, name=self._name("r"), reset_less=True)
        self._m.d.sync += sig.eq(value)
        return _Val(sig, None if t is None else t + 1, kind)

    def _int(self, value, t):
        """Register an integer result, wrapped to INT_BITS bits two's complement."""
        wide = Signal(signed(48), name=self._name("w"))
        self._m.d.comb += wide.eq(value)            # sign- or zero-extends by value's shape
        return self._reg("i", wide[0:INT_BITS].as_signed(), t, signed(INT_BITS))

    # -- FP32 operations ---------------------------------------------------------------------
    def const(self, value):
        bits = int(numerics.f32_to_bits(value))
        return _Val(Const(bits, 32), None, "f")

    def _instance(self, kind, av, bv, width):
        """Instantiate the Verilog module of an FP32 unit; return its payload output."""
        out = Signal(width, name=self._name(f"{kind}_o"))
        unused_valid = Signal(name=self._name(f"{kind}_v"))
        self._m.submodules[self._name(kind)] = Instance(
            _MODULE[kind], i_clk=ClockSignal(), i_rst=ResetSignal(),
            i_i__payload=Cat(av, bv), i_i__valid=Const(1, 1),
            o_o__payload=out, o_o__valid=unused_valid)
        return out

    def _fp(self, unit_class, kind, a, b, negate_b=False):
        a, b = self._lift(a, "f"), self._lift(b, "f")
        t, (av, bv) = self._align(a, b)
        self.stats[kind] += 1
        if negate_b:
            bv = Cat(bv[0:31], ~bv[31])
        if self._impl == "verilog":
            return _Val(self._instance(kind, av, bv, 32), (t or 0) + _FP_LATENCY[kind], "f")
        unit = unit_class()
        unit._MustUse__silence = self._trace_only
        self._m.submodules[self._name(kind)] = unit
        self._m.d.comb += [unit.i.payload.a.eq(av), unit.i.payload.b.eq(bv), unit.i.valid.eq(1)]
        if unit.latency != _FP_LATENCY[kind]:
            raise AssertionError(f"{unit_class.__name__} latency changed to {unit.latency}")
        return _Val(unit.o.payload, (t or 0) + unit.latency, "f")

    def mul(self, a, b):
        return self._fp(FP32Mul, "mul", a, b)

    def add(self, a, b):
        return self._fp(FP32Add, "add", a, b)

    def sub(self, a, b):
        return self._fp(FP32Add, "add", a, b, negate_b=True)

    def _compare(self, a, b):
        """Return ``(max, min, is_lt)`` of an FP32Compare and the stage they are valid."""
        a, b = self._lift(a, "f"), self._lift(b, "f")
        t, (av, bv) = self._align(a, b)
        self.stats["compare"] += 1
        t_out = (t or 0) + _CMP_LATENCY
        if self._impl == "verilog":
            out = self._instance("compare", av, bv, 67)      # FP32CompareResult layout
            return (out[0:32], out[32:64], out[64]), t_out
        unit = FP32Compare(latency=_CMP_LATENCY)
        unit._MustUse__silence = self._trace_only
        self._m.submodules[self._name("cmp")] = unit
        self._m.d.comb += [unit.i.payload.a.eq(av), unit.i.payload.b.eq(bv), unit.i.valid.eq(1)]
        p = unit.o.payload
        return (p.max, p.min, p.is_lt), t_out

    def max(self, a, b):
        out, t = self._compare(a, b)
        return _Val(out[0], t, "f")

    def min(self, a, b):
        out, t = self._compare(a, b)
        return _Val(out[1], t, "f")

    def lt(self, a, b):
        out, t = self._compare(a, b)
        return _Val(out[2], t, "b")

    # -- classification, bool logic, bit operations (combinational) --------------------------
    def _unary(self, kind, a, fn, shape, in_kind="f"):
        a = self._lift(a, in_kind)
        return self._comb(kind, fn(a.value), a.t, shape)

    def is_nan(self, a):
        return self._unary("b", a, lambda v: v[0:31] > 0x7F800000, 1)

    def is_inf(self, a):
        return self._unary("b", a, lambda v: v[0:31] == 0x7F800000, 1)

    def is_zero(self, a):
        return self._unary("b", a, lambda v: v[0:31] == 0, 1)

    def sign(self, a):
        return self._unary("b", a, lambda v: v[31], 1)

    def _bool2(self, a, b, fn):
        a, b = self._lift(a, "b"), self._lift(b, "b")
        t, (av, bv) = self._align(a, b)
        return self._comb("b", fn(av, bv), t, 1)

    def and_(self, a, b):
        return self._bool2(a, b, lambda x, y: x & y)

    def or_(self, a, b):
        return self._bool2(a, b, lambda x, y: x | y)

    def not_(self, a):
        return self._unary("b", a, lambda v: ~v, 1, in_kind="b")

    def select(self, c, a, b):
        c, a, b = self._lift(c, "b"), self._lift(a, "f"), self._lift(b, "f")
        t, (cv, av, bv) = self._align(c, a, b)
        return self._comb("f", Mux(cv, av, bv), t, 32)

    def abs(self, a):
        return self._unary("f", a, lambda v: Cat(v[0:31], Const(0, 1)), 32)

    def with_sign(self, a, s):
        a, s = self._lift(a, "f"), self._lift(s, "b")
        t, (av, sv) = self._align(a, s)
        return self._comb("f", Cat(av[0:31], sv), t, 32)

    # -- exact bit/integer arithmetic (registered) -------------------------------------------
    def split(self, a):
        a = self._lift(a, "f")
        v = a.value
        field, frac = v[23:31], v[0:23]
        lz = Signal(6, name=self._name("lz"))
        self._m.d.comb += lz.eq(Mux(frac == 0, 23, leading_zeros(frac)))
        sub_frac = Signal(23, name=self._name("subfrac"))
        self._m.d.comb += sub_frac.eq((frac << (lz + 1))[0:23])
        normal = field != 0
        m = self._reg("f", Cat(Mux(normal, frac, sub_frac), Const(127, 8), Const(0, 1)),
                      a.t, 32)
        e = self._int(Mux(normal, field - 127, -127 - lz), a.t)
        return m, e

    def pow2(self, n):
        n = self._lift(n, "i")
        return self._reg("f", Cat(Const(0, 23), (n.value + 127)[0:8], Const(0, 1)), n.t, 32)

    def scale_exp(self, a, n):
        a, n = self._lift(a, "f"), self._lift(n, "i")
        t, (av, nv) = self._align(a, n)
        return self._reg("f", (av + (nv << 23))[0:32], t, 32)

    def int_from_magic(self, k):
        k = self._lift(k, "f")
        return self._int(k.value - 0x4B400000, k.t)

    def magic_from_int(self, n):
        n = self._lift(n, "i")
        return self._reg("f", (Const(0x4B400000, 32) + n.value)[0:32], n.t, 32)

    def rsqrt_seed(self, a):
        a = self._lift(a, "f")
        return self._reg("f", (0x5F3759DF - (a.value >> 1))[0:32], a.t, 32)

    def _int2(self, a, b, fn):
        a, b = self._lift(a, "i"), self._lift(b, "i")
        t, (av, bv) = self._align(a, b)
        return self._int(fn(av, bv), t)

    def iadd(self, a, b):
        return self._int2(a, b, lambda x, y: x + y)

    def isub(self, a, b):
        return self._int2(a, b, lambda x, y: x - y)

    def ishr(self, a, k):
        a = self._lift(a, "i")
        return self._int(a.value >> int(k), a.t)

    def iand(self, a, k):
        a = self._lift(a, "i")
        return self._int(a.value & int(k), a.t)


class SpecialFunctionUnit(wiring.Component):
    """Pipelined FP32 special functions, ``o = fp32_special(i.func, i.x)`` bit for bit.

    Golden: :func:`ttrain.golden.special.fp32_special` (sequences in
    :mod:`ttrain.golden.special`, accuracy in ``docs/special-functions.md``). Function codes:
    :data:`ttrain.golden.special.FUNCTION_CODES` (0 exp, 1 recip, 2 rsqrt, 3 tanh,
    4 tanh_grad, 5 gelu, 6 gelu_grad, 7 log: the 3-bit code space is full). A code without a
    datapath in this instance (a function left out with ``functions=``) returns the canonical
    NaN ``0x7FC00000``.

    One input per cycle on an ``always_ready`` stream, one result per cycle after the fixed
    :attr:`latency`, in order, whatever the function mix; ``o.valid`` is ``i.valid`` delayed
    by :attr:`latency`. No back-pressure (like the FP32 units). With ``latency="per_function"``
    each result comes after its function's own latency (:attr:`latencies`), provided a beat of
    one function enters only when no beat of another is in flight (``clash`` rises if not).

    Datapaths: one exp and one reciprocal datapath are shared. The exp datapath takes ``x``
    (function exp) or the logistic-core argument ``-|t|`` of the tanh or gelu head
    (:func:`~ttrain.golden.special.tanh_head`, :func:`~ttrain.golden.special.gelu_head`); the
    reciprocal takes ``x`` (function recip) or ``1 + E``. The function code selects the source
    at each of the two inputs; heads and tails (and rsqrt, tanh_grad) have their own
    operators, and so does log (its own 14 FP32Mul / 13 FP32Add / 1 compare, started late from
    the ``x`` delay line like rsqrt so that it ends at the output multiplexer). Every function
    therefore runs exactly its golden sequence.

    Parameters
    ----------
    functions : iterable of str, optional
        Functions to build (default: all of :data:`ttrain.golden.special.FUNCTIONS`). Leaving
        some out saves their operators (gelu and gelu_grad share their head).
    impl : {"amaranth", "verilog"}, optional
        ``"amaranth"`` (default): the FP32 units are :mod:`ttrain.rtl.fp32` submodules (any
        simulator; the converted Verilog repeats each unit's module once per instance).
        ``"verilog"``: they are instances of the modules :data:`FP_UNIT_MODULES`, which the
        build must supply (converted once each from :mod:`ttrain.rtl.fp32`). Same hardware;
        the Verilog is over ten times smaller and Verilator compiles each FP32 unit once
        instead of once per instance. Not for the Amaranth simulator.
    latency : {"fixed", "per_function"}, optional
        ``"fixed"`` (default): every result after :attr:`latency`, any function mix.
        ``"per_function"``: rsqrt, tanh_grad and log start at stage 0, an exp or recip beat
        enters its shared datapath in the cycle it arrives (time-multiplexed with the tanh/gelu
        inputs, which reach it later), and each function leaves from its own stage (exp 129,
        recip 86, rsqrt 89 cycles on the full unit instead of 276). The caller must not mix
        functions in flight (the vector unit runs one instruction at a time).

    Members
    -------
    i : ``In(stream.Signature(SpecialOperand, always_ready=True))``
        ``x`` (bits 0-31) and ``func`` (bits 32-34).
    o : ``Out(stream.Signature(32, always_ready=True))``
        Results, :attr:`latency` (per function: :attr:`latencies`) cycles after the matching
        ``i`` beat.
    clash : ``Out(1)``, ``latency="per_function"`` only
        Sticky (until reset): a beat of another function arrived while beats were in flight;
        the results are then undefined.
    """

    def __init__(self, *, functions=FUNCTIONS, impl="amaranth", latency="fixed"):
        self._MustUse__silence = True      # no "never used" warning if the checks below raise
        if impl not in ("amaranth", "verilog"):
            raise ValueError(f"impl must be 'amaranth' (FP32 units as Amaranth submodules) or "
                             f"'verilog' (instances of FP_UNIT_MODULES), not {impl!r}")
        if latency not in LATENCY_MODES:
            raise ValueError(f"latency must be 'fixed' (every result after the slowest "
                             f"function) or 'per_function' (each function's own; one function "
                             f"in flight at a time), not {latency!r}")
        self._impl = impl
        self._mode = latency
        if isinstance(functions, str):
            raise TypeError(f"functions must be an iterable of function names, not the string "
                            f"{functions!r}; write functions=({functions!r},)")
        functions = tuple(functions)
        unknown = [f for f in functions if f not in FUNCTION_CODES]
        if unknown:
            raise ValueError(f"unknown special function(s) {unknown}; choose from {FUNCTIONS}")
        if not functions:
            raise ValueError(f"functions must name at least one of {FUNCTIONS}")
        if len(set(functions)) != len(functions):
            raise ValueError(f"functions lists a function twice: {functions}")
        # Keep the code order, whatever order was given.
        self._functions = tuple(f for f in FUNCTIONS if f in functions)
        # Trace once for the result stages (the latency), then build the whole unit once more
        # in a scratch module for the operator statistics.
        self._entry = {}
        results = self._datapaths(self._tracer(), Signal(32, name="x"),
                                  Signal(FUNC_BITS, name="func"), valid=Signal(name="valid"))
        self._stage = {f: v.t for f, v in results.items()}
        self._latency = max(self._stage.values()) + 1
        if latency == "fixed":
            self._latencies = {f: self._latency for f in self._functions}
        else:          # a beat of exp or recip enters its (shared) datapath at once
            self._latencies = {f: t - self._entry.get(f, 0) + 1
                               for f, t in self._stage.items()}
        ops = self._tracer()
        self._build(ops.module, ops, Signal(32, name="x"), Signal(FUNC_BITS, name="func"),
                    Signal(name="valid"))
        self._plan = tuple(ops.plan)
        self._stats = dict(ops.stats, delay_bits=ops.delay_bits, result_stage=dict(self._stage))
        members = {
            "i": In(stream.Signature(SpecialOperand, always_ready=True)),
            "o": Out(stream.Signature(32, always_ready=True)),
        }
        if latency == "per_function":
            members["clash"] = Out(1)
        super().__init__(members)
        self._MustUse__silence = False

    def _datapaths(self, o, x_bits, func_bits, late=None, valid=None):
        """Build every datapath with the op set ``o``; return ``{func: result _Val}``.

        ``late`` maps the independent functions (rsqrt, tanh_grad, log) to the stage at which they
        take ``x``: started late (from the shared ``x`` delay line), their results need no
        delay line of their own to reach the output multiplexer.

        With ``latency="per_function"``, a valid exp or recip beat (``valid``) puts its ``x``
        into the entry of the shared datapath in the cycle it arrives, ahead of the other
        functions' inputs (which reach that entry at a later stage): the same operators, time-
        multiplexed, so the beat is ``self._entry[func]`` stages ahead of its label. Records
        those entry stages in ``self._entry``.
        """
        fs = self._functions
        x = _Val(x_bits, 0, "f")
        late = late or {}
        direct = self._mode == "per_function"

        def x_at(func):
            t = late.get(func, 0)
            return x if t == 0 else _Val(o.at(x, t), t, "f")

        def code_is(*names):
            cond = func_bits == FUNCTION_CODES[names[0]]
            for name in names[1:]:
                cond = cond | (func_bits == FUNCTION_CODES[name])
            return o._comb("b", cond, 0, 1)

        def source(options):
            """Select among ``(names, value)`` options by function code; the last is default."""
            value = options[-1][1]
            for names, v in reversed(options[:-1]):
                value = o.select(code_is(*names), v, value)
            return value

        def entry(func, options):
            """The input of the datapath shared by ``func`` (whose option is ``x``, first) and
            the functions of the other options; records ``func``'s entry stage."""
            if not direct or len(options) == 1 or options[0][0] != (func,):
                return source(options)
            rest = source(options[1:])
            now = o._comb("b", valid & (func_bits == FUNCTION_CODES[func]), rest.t, 1)
            self._entry[func] = rest.t
            return o.select(now, _Val(x_bits, rest.t, "f"), rest)

        out = {}
        gelus = tuple(f for f in ("gelu", "gelu_grad") if f in fs)
        exp_in = [(("exp",), x)] if "exp" in fs else []
        if "tanh" in fs:
            a, ps, t_tanh = S.tanh_head(o, x)
            exp_in.append((("tanh",), S.logistic_exp_input(o, t_tanh)))
        if gelus:
            xl, xc, xx, t_gelu = S.gelu_head(o, x)
            exp_in.append((gelus, S.logistic_exp_input(o, t_gelu)))
        if exp_in:
            e = S.exp_sequence(o, entry("exp", exp_in))
            if "exp" in fs:
                out["exp"] = e
        recip_in = [(("recip",), x)] if "recip" in fs else []
        if "tanh" in fs or gelus:
            recip_in.append(((), S.logistic_recip_input(o, e)))
        if recip_in:
            r = S.recip_sequence(o, entry("recip", recip_in))
            if "recip" in fs:
                out["recip"] = r
        if "rsqrt" in fs:
            out["rsqrt"] = S.rsqrt_sequence(o, x_at("rsqrt"))
        if "tanh" in fs:
            out["tanh"] = S.tanh_tail(o, x, a, ps, e, r)
        if "tanh_grad" in fs:
            out["tanh_grad"] = S.tanh_grad_sequence(o, x_at("tanh_grad"))
        if "log" in fs:
            out["log"] = S.log_sequence(o, x_at("log"))
        if gelus:
            er, sig = S.gelu_logistic(o, t_gelu, e, r)
            if "gelu" in fs:
                out["gelu"] = S.gelu_tail(o, xl, sig)
            if "gelu_grad" in fs:
                out["gelu_grad"] = S.gelu_grad_tail(o, xc, xx, r, er, sig)
        return out

    @property
    def impl(self):
        """How the FP32 units are instantiated: ``"amaranth"`` or ``"verilog"``."""
        return self._impl

    @property
    def functions(self):
        """Functions with a datapath in this instance, in code order."""
        return self._functions

    @property
    def latency(self):
        """Cycles from ``i.valid`` to the matching ``o.valid``: the same for every function
        with ``latency="fixed"``, the largest of :attr:`latencies` with ``"per_function"``."""
        return self._latency

    @property
    def latencies(self):
        """Per built function, cycles from its ``i.valid`` to the matching ``o.valid`` (a code
        without a datapath: 1 cycle with ``"per_function"``, :attr:`latency` with ``"fixed"``)."""
        return dict(self._latencies)

    @property
    def latency_mode(self):
        """``"fixed"`` or ``"per_function"`` (:data:`LATENCY_MODES`)."""
        return self._mode

    @property
    def stats(self):
        """Operator counts of this instance: FP32 units (``mul``, ``add``, ``compare``),
        ``delay_bits`` (alignment shift-register bits, the function code's included) and
        ``result_stage`` (per function, the stage its result is ready when it starts at stage
        0; rsqrt, tanh_grad and log are started late in the unit so that they end at the output
        multiplexer)."""
        return dict(self._stats, result_stage=dict(self._stats["result_stage"]))

    def _tracer(self):
        scratch = Module()
        scratch._MustUse__silence = True
        ops = _PipelineOps(scratch, "trace", trace_only=True, impl=self._impl)
        ops.module = scratch
        return ops

    def _build(self, m, ops, x_bits, func_bits, valid_in):
        """Build the datapaths, the output multiplexer and the valid chain into ``m``; return
        ``(out, valid, clash)`` (the registered result, its valid and, per function, the sticky
        flag of a broken one-function rule; else ``None``)."""
        if self._mode == "per_function":
            return self._build_per_function(m, ops, x_bits, func_bits, valid_in)
        last = self._latency - 1          # stage of the output multiplexer's inputs
        late = {f: last - self._stage[f] for f in _INDEPENDENT if f in self._stage}
        results = self._datapaths(ops, x_bits, func_bits, late, valid=valid_in)
        code = ops.at(_Val(func_bits, 0, "i"), last)
        # Delay chains are built outside the Switch (their registers must always shift).
        aligned = {func: ops.at(value, last) for func, value in results.items()}

        out = Signal(32, name="out", reset_less=True)
        with m.Switch(code):
            for func, value in aligned.items():
                with m.Case(FUNCTION_CODES[func]):
                    m.d.sync += out.eq(value)
            with m.Default():
                m.d.sync += out.eq(CANONICAL_NAN)
        return out, self._valid_chain(m, valid_in, self._latency)[-1], None

    @staticmethod
    def _valid_chain(m, valid_in, depth):
        """``[valid_in, valid_s1, ..., valid_s<depth>]``: ``valid_in`` delayed 0..depth cycles
        (registers with reset: no beat comes out of reset)."""
        chain = [valid_in]
        for k in range(1, depth + 1):
            nxt = Signal(name=f"valid_s{k}")
            m.d.sync += nxt.eq(chain[-1])
            chain.append(nxt)
        return chain

    def _build_per_function(self, m, ops, x_bits, func_bits, valid_in):
        """Each function's result leaves from its own stage: the beat ``latencies[f] - 1``
        cycles old whose code is ``f`` selects its datapath's output into the output register
        (a code without a datapath gives the canonical NaN one cycle after it arrives)."""
        results = self._datapaths(ops, x_bits, func_bits, valid=valid_in)
        code = _Val(func_bits, 0, "i")
        valid = self._valid_chain(m, valid_in, self._latency - 1)
        exits = []
        for func, value in results.items():
            d = self._latencies[func] - 1
            hit = Signal(name=f"exit_{func}")
            m.d.comb += hit.eq(valid[d] & (ops.at(code, d) == FUNCTION_CODES[func]))
            exits.append((hit, value.value))
        built = [FUNCTION_CODES[f] for f in self._functions]
        unknown = Signal(name="exit_nan")
        m.d.comb += unknown.eq(valid_in & ~func_bits.matches(*built))
        exits.append((unknown, Const(CANONICAL_NAN, 32)))

        out = Signal(32, name="out", reset_less=True)
        out_valid = Signal(name="out_valid")
        m.d.sync += out_valid.eq(0)
        for hit, value in exits:
            with m.If(hit):
                m.d.sync += [out.eq(value), out_valid.eq(1)]

        # The rule: a beat of one function enters only when no beat of another is in flight.
        inflight = Signal(range(self._latency + 2))
        current = Signal(FUNC_BITS)
        m.d.sync += inflight.eq(inflight + valid_in - out_valid)
        with m.If(valid_in):
            m.d.sync += current.eq(func_bits)
        clash = Signal(name="clash")
        others = Signal.like(inflight)               # in flight, the one leaving now excepted
        m.d.comb += others.eq(inflight - out_valid)
        with m.If(valid_in & (others != 0) & (func_bits != current)):
            m.d.sync += clash.eq(1)
        return out, out_valid, clash

    def elaborate(self, platform):
        m = Module()
        func_code = Signal(FUNC_BITS, name="func_s0")
        m.d.comb += func_code.eq(self.i.payload.func)
        ops = _PipelineOps(m, "sf", impl=self._impl, plan=self._plan)
        out, valid, clash = self._build(m, ops, self.i.payload.x, func_code, self.i.valid)
        m.d.comb += [self.o.payload.eq(out), self.o.valid.eq(valid)]
        if clash is not None:
            m.d.comb += self.clash.eq(clash)
        return m
