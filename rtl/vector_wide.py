"""Pipelined, multi-lane vector / update unit on a store port.

:class:`WideVectorUnit` executes the same decoded instructions as
:class:`~ttrain.testbench.vector_ref.VectorUnit` (:data:`~ttrain.rtl.command.VectorCommand`: elementwise
``add sub mul scale addi copy fill max`` and the integer ``i2f f2i iadd requant ext8 ins8``
(and the mask ops ``fcmp bitop``)
(:mod:`ttrain.rtl.intops`), reductions ``rsum``/``rmax`` with ``accumulate``,
``gather``/``scatter_add`` and UPDATE), bit-exactly as :func:`ttrain.golden.interpreter.run`,
but moves ``width`` words per beat through a :class:`~ttrain.rtl.port.StorePortSignature` and
keeps one read beat and one write beat in flight per cycle. With ``special=True`` it also runs
the special-function ops (``exp recip rsqrt tanh tanh_grad gelu gelu_grad log``) through one
:class:`~ttrain.rtl.special.SpecialFunctionUnit`. See ``docs/vector-unit.md`` for the figures
and for what the sequencer must guarantee.
"""

import functools

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from ..golden.prng import GAMMA, MIX_MULTIPLIERS, MIX_SHIFTS
from ..golden.isa import (ELEMENTWISE_OPS, ERR_INDEX, ERR_MODE, ERR_OPCODE, GATHER_OPS, OPS,
                          PERTURB_OPS, RANDOM_OPS, SPECIAL_EVERY_LANE,
                          OP_UPDATE, REDUCE_OPS, SPECIAL_OPS, UPDATE_SGD, Elementwise)
from ..golden.numerics import NEG_ZERO
from ..golden.special import FUNCTION_CODES, FUNCTIONS
from .fp32 import FP32Add, FP32Compare, FP32Mul, latency_of
from .port import StorePortSignature
from .special import SpecialFunctionUnit
from .command import VectorCommand
from . import intops

__all__ = ["WideVectorUnit"]

_SIGN = 0x80000000

# kinds of read beats (the tag that travels with each read request to its data)
_K_OPA = 0      # first operand of a two-read element beat: latch it
_K_FIRE = 1     # last operand of an element beat: start the arithmetic
_K_ACC = 2      # reduction: old d words (accumulate) -> accumulator slot
_K_RED = 3      # reduction: one column of a row group -> accumulator slot
_K_CHK = 4      # gather/scatter pre-pass: index words to check against table_rows
_K_IDX = 5      # gather/scatter: the index of the next row
_K_SEED = 6     # PRNG ops: the seed word (keys registered when it arrives)

_HISTORY = 4    # scatter_add: row indices remembered to skip the wait for wr_idle


def _mix_half(m, x, mult, s_in, s_out, name):
    """``x ^= x >> s_in; x *= mult; x ^= x >> s_out`` (mod 2**32), combinational."""
    a = Signal(32, name=f"{name}_a")
    m.d.comb += a.eq(x ^ (x >> s_in))
    b = Signal(32, name=f"{name}_b")
    m.d.comb += b.eq((a * mult)[:32])
    return b ^ (b >> s_out)


def _mix32(m, x, name):
    """lowbias32 (golden.prng.mix32) of a 32-bit value."""
    xs = Signal(32, name=f"{name}_in")
    m.d.comb += xs.eq(x)
    (a, b), (s0, s1, s2) = MIX_MULTIPLIERS, MIX_SHIFTS
    h = Signal(32, name=f"{name}_h")
    m.d.comb += h.eq(_mix_half(m, xs, a, s0, s1, f"{name}_1"))
    out = Signal(32, name=f"{name}_out")
    m.d.comb += out.eq(((h * b)[:32]) ^ (((h * b)[:32]) >> s2))
    return out


def _draw(m, index, k0, k1, name):
    """golden.prng.draw: the keyed lowbias32 of ``index`` (combinational)."""
    (a, b), (s0, s1, s2) = MIX_MULTIPLIERS, MIX_SHIFTS
    x = Signal(32, name=f"{name}_x")
    m.d.comb += x.eq(index + k0)
    h = Signal(32, name=f"{name}_h")
    m.d.comb += h.eq(_mix_half(m, x, a, s0, s1, f"{name}_1") ^ k1)
    p = Signal(32, name=f"{name}_p")
    m.d.comb += p.eq((h * b)[:32])
    return p ^ (p >> s2)


def _le_pow2(x, k):
    """``x <= 2**k`` for an unsigned ``x``, without a carry chain."""
    if k == 0:
        return x[1:] == 0
    return (x[k + 1:] == 0) & (~x[k] | (x[0:k] == 0))


def _gt_small(x, w, k):
    """``x > w`` for an unsigned ``x`` and a constant ``w < 2**k``, without a carry chain."""
    if k == 0 or w == (1 << k) - 1:              # no low part above w
        return x[k:] != 0
    return (x[k:] != 0) | (x[0:k] > w)


def _or(conds):
    out = Const(0, 1)
    for cnd in conds:
        out = out | cnd
    return out


class WideVectorUnit(wiring.Component):
    """Elementwise / reduce / gather / update unit, ``width`` lanes, on a store port.

    Golden: the Elementwise, Reduce, Gather and Update cases of
    :func:`ttrain.golden.interpreter.run` (the same semantics as
    :class:`~ttrain.testbench.vector_ref.VectorUnit`, whose docstring lists them).

    Every instruction is cut into *element beats* of up to ``width`` elements, each one or two
    read beats, one pass through the FP lanes and one write beat (two for UPDATE: the new
    parameters, then the zeroed gradient):

    * elementwise ops and UPDATE: ``width`` consecutive columns per beat when every view of the
      op has column stride 1 (a source may also have column stride 0: one word read and
      broadcast to the lanes); otherwise, when every view has row stride 1 (0 for a
      broadcast source), the op runs transposed with ``width`` consecutive rows per beat;
      otherwise one element per beat. Matrices stored densely (row stride = ``cols``) run as
      one long row, so no beat is cut short at a row end. Throughput (port always ready):
      ``width / reads`` elements per cycle, ``reads`` = 2 for add/sub/mul/UPDATE, 1 for
      scale/addi/copy and for fill (a zero-mask dummy read paces it);
    * ``rsum``/``rmax``: never tree-reduced (the golden sum is sequential over columns). The
      rows are cut into groups (``width`` consecutive rows when the source's and ``d``'s row
      stride are 1, else one row) and ``groups`` groups are interleaved column by column, so
      each group's accumulator is back from the adder before its next column arrives: about
      ``width`` (or 1) elements per cycle when there are at least ``groups`` groups;
    * ``gather``/``scatter_add``: a pre-pass reads every index (``width`` per beat when the
      index list is contiguous) and ends the instruction with :data:`ERR_INDEX` before any
      write if one is out of the table; then rows stream ``width`` columns per beat (when the
      table's and the other view's column stride are 1), each row first reading the next
      row's index. A scatter row whose index repeats one of the last 4 rows since the unit
      was last drained waits until every earlier write has landed (``wr_idle``) before it
      reads the table, so repeated indices accumulate in list order.

    * special functions (``special=True``): read beats exactly as ``copy`` (wide, transposed,
      flattened or single), but each :class:`~ttrain.rtl.special.SpecialFunctionUnit` (one,
      or ``special_lanes`` side by side) takes one word per cycle: a serializer feeds the
      beat's active lanes ``special_lanes`` at a time (the next beat loads as the last group
      of the previous one goes in), a collector puts the results, in order, back into lanes
      and pushes the whole beat (with the address/mask kept in a small FIFO) into the result
      FIFO. Throughput: ``special_lanes`` elements per cycle for full beats; a beat holds a
      result-FIFO credit from the moment it is taken until it is written, so about
      ``(special_latency * special_lanes + 2 * width) / width`` beats must be in flight: the
      result FIFO is sized for that (``width`` elements per beat). Single-element beats
      (views that allow neither wide nor transposed beats) therefore run at about ``depth / special_latency``
      elements per cycle. The unit runs with ``latency="per_function"``: an op's results come
      after its own function's latency (:attr:`special_latencies`: rsqrt 89, recip 86
      cycles instead of the slowest function's 276), which the one-instruction-at-a-time
      rule makes safe. With ``special=False`` a special op ends at once with error
      :data:`~ttrain.golden.isa.ERR_OPCODE` and writes nothing (the sequencer only checks the
      error of a gather/scatter: do not send special ops to such a unit).

    The arithmetic is ``width`` :class:`~ttrain.rtl.fp32.FP32Mul` followed by ``width``
    :class:`~ttrain.rtl.fp32.FP32Add` (12 cycles for mul, scale, UPDATE and the PRNG ops, which
    use the multiply stage; 7 for every other elementwise op, gather and scatter_add, whose
    registered operands enter the adder stage one cycle after firing), plus ``width``
    :class:`~ttrain.rtl.fp32.FP32Compare` for ``rmax``. The FP units cannot stall, so a credit
    counter admits an element beat only when the result FIFO is sure to have room for it.
    Reads run ahead of writes; each read carries a tag (what to do with the data) through a
    FIFO, which also bounds the reads in flight to ``max_reads``. ``done`` is raised only after
    every write of the instruction has landed (``wr_idle``), so the next instruction and the
    other units see them.

    The unit does not check address ranges, store ids, field legality or view overlaps: the
    sequencer/compiler guarantee the golden check pass (``golden.interpreter.check_program``);
    in particular a written view is either the identical view of a source (in place) or
    disjoint from every source.

    Parameters
    ----------
    width : int
        Lanes = words per port beat = the stores' bank count (a power of two).
    addr_bits : int
        Width of a word address at the port, 1..32. Addresses are computed in 32 bits and
        truncated.
    store_bits : int
        Width of the store id at the port (>= 2: the ISA has four stores).
    groups : int or None
        Accumulator slots of the reductions (row groups interleaved in time). ``None``: the
        adder latency + 2 (= 8), the least for full reduction throughput.
    max_reads : int
        Read beats in flight (tag FIFO depth, >= 2); it must cover the port's read round trip
        for full throughput.
    special : bool
        Build the special-function datapath (one :class:`~ttrain.rtl.special.SpecialFunctionUnit`,
        67 FP32Mul / 45 FP32Add; latency :attr:`special_latency`).
    special_impl : {"amaranth", "verilog"}
        The unit's ``impl``: ``"verilog"`` instantiates the FP32 units as the modules of
        :data:`ttrain.rtl.special.FP_UNIT_MODULES`, which the Verilog build must supply (fast
        Verilator builds); ``"amaranth"`` for the Amaranth simulator.
    special_functions : iterable of str or None
        Build only these functions (``None``: all of
        :data:`ttrain.golden.special.FUNCTIONS`); a left-out function gives the canonical NaN
        (for small simulation builds only).
    special_lanes : int
        Special-function units side by side (a power of two, 1..``width``; default 1): the
        serializer feeds ``special_lanes`` words per cycle, one to each unit, so a special op
        streams ``special_lanes`` elements per cycle on full beats. Each unit is a whole
        :class:`~ttrain.rtl.special.SpecialFunctionUnit` (the Yosys cost of one per lane;
        docs/wide-engine.md: the one-word-per-cycle unit is the wide engine's largest vector
        cost).
    special_full : int or None
        How many of the ``special_lanes`` units have every special function (a power of two,
        1..``special_lanes``; ``None``: all). The others are built with only
        :data:`~ttrain.golden.isa.SPECIAL_EVERY_LANE` (GELU and its gradient, most of a
        paper-size step's special elements): those functions stream ``special_lanes``
        elements per cycle, the others ``special_full`` (the serializer and collector take
        groups of that many lanes for them). Both kinds of unit give each function the same
        latency, so their results arrive together.
    every_lane : tuple of str or None
        The functions every unit has when ``special_full`` < ``special_lanes`` (``None``:
        :data:`~ttrain.golden.isa.SPECIAL_EVERY_LANE`, which the compiler's cycle model
        assumes; another set is for small simulation builds only).
    ops : {"all", "update"}
        The instructions the unit executes: ``"all"`` (the vector unit: every elementwise,
        reduce, gather, PRNG and UPDATE op) or ``"update"`` (the update unit, to which the
        sequencer sends UPDATE and nothing else): the lanes then have only the multiplier and
        adder UPDATE uses, no comparators, integer ops, PRNG draws, reduction slots or index
        logic, and any other op ends at once with :data:`~ttrain.golden.isa.ERR_OPCODE`,
        writing nothing. UPDATE runs the same beats and cycles in both.
    units : dict or None
        The lanes' FP32 unit classes by role, ``"mul"``, ``"add"``, ``"cmp"`` (a latency-1
        comparator); missing roles are the Amaranth units. Simulation builds pass
        :func:`~ttrain.rtl.export.shared_unit` wrappers (one Verilog module per unit type;
        :attr:`units` lists them for the build's sources), as the engine's lanes do.

    Members
    -------
    cmd : ``In(stream.Signature(VectorCommand))``
        Instructions; ``ready`` while idle.
    busy : ``Out(1)``
        High from the accepted command to ``done``.
    done : ``Out(1)``
        One-cycle pulse at the end of an instruction (all its writes landed); ``error`` is
        valid with it.
    error : ``Out(4)``
        0, or :data:`ttrain.golden.isa.ERR_INDEX` (nothing was written); held until the next
        command.
    elements : ``Out(32)``
        Elements processed so far (``rows * cols`` per completed instruction, as the
        interpreter's ``stats.elementwise``/``stats.updated``; wraps).
    mem : ``Out(StorePortSignature(store_bits=..., addr_bits=..., width=width))``
        The store port (reads, read data, writes, ``wr_idle``).
    """

    def __init__(self, *, width, addr_bits, store_bits=2, groups=None, max_reads=16,
                 special=False, special_impl="amaranth", special_functions=None, units=None,
                 special_lanes=1, reads=1, ops="all", special_full=None, every_lane=None):
        def _int(name, v, lo, hi, hint):
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise ValueError(f"WideVectorUnit {name} must be an int in {lo}..{hi}, not "
                                 f"{v!r}; {hint}")
            return v
        _int("width", width, 1, 1024, "use the stores' bank count")
        if width & (width - 1):
            raise ValueError(f"WideVectorUnit width must be a power of two (the stores' bank "
                             f"count), not {width}")
        _int("addr_bits", addr_bits, 1, 32, "use ceil(log2(largest store words))")
        _int("store_bits", store_bits, 2, 32, "the ISA's four stores need 2 bits")
        add_latency = latency_of(FP32Add)
        if groups is None:
            groups = add_latency + 2
        _int("groups", groups, 1, 256, f"{add_latency + 2} gives full reduction throughput")
        _int("max_reads", max_reads, 2, 4096, "cover the port's read round trip")
        _int("reads", reads, 1, 2, "vectors per read request of the store port (2: both "
             "sources of an element beat at once)")
        if not isinstance(special, bool):
            raise TypeError(f"WideVectorUnit special must be a bool (build the special-function "
                            f"unit), not {special!r}")
        if special_impl not in ("amaranth", "verilog"):
            raise ValueError(f"WideVectorUnit special_impl must be 'amaranth' (Amaranth "
                             f"simulator) or 'verilog' (FP_UNIT_MODULES instances), not "
                             f"{special_impl!r}")
        if special_functions is not None and not special:
            raise ValueError("WideVectorUnit special_functions needs special=True; leave it "
                             "None or set special=True")
        if isinstance(special_lanes, bool) or not isinstance(special_lanes, int) \
                or special_lanes < 1 or special_lanes & (special_lanes - 1) \
                or special_lanes > width:
            raise ValueError(f"WideVectorUnit special_lanes must be a power of two in "
                             f"1..width ({width}), not {special_lanes!r}")
        if special_lanes > 1 and not special:
            raise ValueError("WideVectorUnit special_lanes > 1 needs special=True")
        if special_full is None:
            special_full = special_lanes
        if isinstance(special_full, bool) or not isinstance(special_full, int) \
                or special_full < 1 or special_full & (special_full - 1) \
                or special_full > special_lanes:
            raise ValueError(f"WideVectorUnit special_full must be a power of two in "
                             f"1..special_lanes ({special_lanes}), not {special_full!r}")
        if ops not in ("all", "update"):
            raise ValueError(f"WideVectorUnit ops must be 'all' (the vector unit) or 'update' "
                             f"(UPDATE only), not {ops!r}")
        if ops == "update" and special:
            raise ValueError("WideVectorUnit ops='update' runs no special functions; leave "
                             "special=False")
        self._ops = ops
        given = dict(units or {})
        if set(given) - {"mul", "add", "cmp"}:
            raise ValueError(f"WideVectorUnit units names roles 'mul', 'add', 'cmp', not "
                             f"{sorted(set(given) - {'mul', 'add', 'cmp'})}")
        defaults = {"mul": FP32Mul, "add": FP32Add,
                    "cmp": functools.partial(FP32Compare, latency=1)}
        self._units = {**defaults, **given}
        for role, unit in given.items():
            if latency_of(unit) != latency_of(defaults[role]):
                raise ValueError(f"WideVectorUnit units[{role!r}] has latency "
                                 f"{latency_of(unit)}, not the {latency_of(defaults[role])} "
                                 f"of its role")
        self._sfu = None
        self._sfus = []
        if special:
            funcs = FUNCTIONS if special_functions is None else special_functions
            # One instruction at a time, ``done`` only after its last write: never two
            # functions in flight, so each function may leave after its own latency.
            every_lane = SPECIAL_EVERY_LANE if every_lane is None else tuple(every_lane)
            if set(every_lane) - set(FUNCTIONS):
                raise ValueError(f"WideVectorUnit every_lane names functions of "
                                 f"{FUNCTIONS}, not {sorted(set(every_lane) - set(FUNCTIONS))}")
            every = tuple(f for f in funcs if f in every_lane)
            if special_full < special_lanes and not every:
                raise ValueError(f"WideVectorUnit special_full < special_lanes: the other "
                                 f"units hold only {every_lane}, which special_functions "
                                 f"leaves out")
            self._sfus = [SpecialFunctionUnit(functions=funcs if q < special_full else every,
                                              impl=special_impl, latency="per_function")
                          for q in range(special_lanes)]
            full, part = self._sfus[0].latencies, self._sfus[-1].latencies
            assert all(full[f] == part[f] for f in part), (full, part)
            for u in self._sfus:
                u._MustUse__silence = True        # elaborated as submodules, if at all
            self._sfu = self._sfus[0]
        self._special_lanes = special_lanes
        self._special_full = special_full
        self._every_lane = every_lane if special else SPECIAL_EVERY_LANE
        self._width = width
        self._addr_bits = addr_bits
        self._store_bits = store_bits
        self._groups = groups
        self._max_reads = max_reads
        self._reads = reads
        super().__init__({
            "cmd": In(stream.Signature(VectorCommand)),
            "busy": Out(1), "done": Out(1), "error": Out(4), "elements": Out(32),
            "mem": Out(StorePortSignature(store_bits=store_bits, addr_bits=addr_bits,
                                          width=width, reads=reads)),
        })

    width = property(lambda self: self._width, doc="Lanes (words per beat).")
    addr_bits = property(lambda self: self._addr_bits, doc="Word address width at the port.")
    store_bits = property(lambda self: self._store_bits, doc="Store id width at the port.")
    groups = property(lambda self: self._groups, doc="Reduction accumulator slots.")
    max_reads = property(lambda self: self._max_reads, doc="Read beats in flight at most.")
    reads = property(lambda self: self._reads,
                     doc="Vectors per read request (2: an element beat's two sources in one "
                         "request, :mod:`ttrain.rtl.port`).")
    ops = property(lambda self: self._ops,
                   doc="The instructions the unit executes: ``\"all\"`` or ``\"update\"``.")
    special = property(lambda self: self._sfu is not None,
                       doc="True when the special-function unit is built.")
    special_lanes = property(lambda self: self._special_lanes,
                             doc="Special-function units side by side (words per cycle into "
                                 "them).")
    special_full = property(lambda self: self._special_full,
                            doc="How many of the special-function units have every function "
                                "(the others: golden.isa.SPECIAL_EVERY_LANE).")

    @property
    def special_latency(self):
        """Latency of the special-function unit, its slowest function's (``None`` without
        ``special``)."""
        return None if self._sfu is None else self._sfu.latency

    @property
    def special_latencies(self):
        """Per special function, its latency in the unit (``None`` without ``special``)."""
        return None if self._sfu is None else self._sfu.latencies

    units = property(lambda self: dict(self._units),
                     doc="The lanes' FP32 unit classes by role (``mul``, ``add``, ``cmp``).")

    @property
    def result_depth(self):
        """Result FIFO entries (= credits: element beats taken and not yet written)."""
        d = self.latency + 4
        if self._sfu is not None:
            W = self._width
            L = self._special_lanes
            d = max(d, -(-(self._sfu.latency * L + 2 * W + 4) // W) + 2)
            # (a function on special_full < L units: fewer words in flight, the same bound)
        return d

    @property
    def latency(self):
        """Cycles from an element beat's last read data to its result (mul + add: the ops
        that skip the multiply stage take add only)."""
        return latency_of(FP32Mul) + latency_of(FP32Add)

    def _special(self, m, c, take, dat, tg, res_in, ser_busy):
        """Serializer -> ``special_lanes`` SpecialFunctionUnits -> collector; return the
        result-FIFO push."""
        W = self._width
        L = self._special_lanes
        AB = self._addr_bits
        Lanes = data.ArrayLayout(32, W)
        sfus = self._sfus
        if L == 1:
            m.submodules.sfu = sfus[0]
        else:
            for q, u in enumerate(sfus):
                m.submodules[f"sfu{q}"] = u
        # function code of the op (0x40 + code today; mapped from the tables anyway)
        code = Signal(range(8))
        for name, opc in SPECIAL_OPS.items():
            with m.If(c.op == opc):
                m.d.comb += code.eq(FUNCTION_CODES[name])
        # Every function streams L words a cycle, or (special_full F < L) the functions not
        # in SPECIAL_EVERY_LANE F a cycle: ``every`` (registered command, steady during the
        # instruction) picks the group size of the serializer and the collector.
        F = self._special_full
        if F < L:
            every = Signal()
            m.d.comb += every.eq(c.op.matches(*[f"{SPECIAL_OPS[f]:08b}"
                                               for f in self._every_lane]))
        else:
            every = Const(1, 1)

        def by_size(f):
            """``f(L)``, or ``f(L)`` / ``f(F)`` by ``every`` (Python values pass through)."""
            if F == L:
                return f(L)
            return Mux(every, f(L), f(F))
        # serializer: lanes 0 .. n-1 go in each cycle (one to each of the first n units, n =
        # L or F), the rest shift down by n. Beat masks are prefixes, so a group is valid
        # when its lane 0 is; the units of a group's missing lanes compute on stale words
        # that are never written.
        ser = Signal(Lanes)
        ser_mask = Signal(W)
        for q, u in enumerate(sfus):
            m.d.comb += [u.i.valid.eq(ser_mask[0] & (every if q >= F else 1)),
                         u.i.payload.x.eq(ser[q]), u.i.payload.func.eq(code)]
        m.d.comb += ser_busy.eq(by_size(lambda n: ser_mask[n] if W > n else Const(0, 1)))
        with m.If(take):
            m.d.sync += [ser.eq(dat), ser_mask.eq(tg.mask)]
        with m.Else():
            m.d.sync += ser_mask.eq(by_size(lambda n: ser_mask >> n))
            for w in range(W - F):
                m.d.sync += ser[w].eq(by_size(lambda n: ser[w + n] if w + n < W else ser[w]))
        # write address and lane mask of each beat in the unit, in order
        Meta = data.StructLayout({"mask": W, "waddr": AB})
        m.submodules.sp_meta = meta = fifo.SyncFIFO(width=Meta.size, depth=self.result_depth)
        mw = Signal(Meta)
        m.d.comb += [mw.mask.eq(tg.mask), mw.waddr.eq(tg.waddr),
                     meta.w_data.eq(mw.as_value()), meta.w_en.eq(take)]
        head = Meta(meta.r_data)
        # collector: result group k (lanes k*n .. k*n + n - 1, unit q to lane k*n + q); the
        # beat is complete at its last valid group
        k = Signal(range(W // F + 1))
        col = Signal(Lanes)
        more = Signal(W // F)                     # a valid lane after group g (prefix masks)
        m.d.comb += more.eq(by_size(lambda n: Cat(*[
            head.mask[(g + 1) * n] if (g + 1) * n < W else Const(0, 1) for g in range(W // n)])))
        last = Signal()
        m.d.comb += last.eq(~more.bit_select(k, 1))
        push = Signal()
        o_valid = sfus[0].o.valid
        m.d.comb += [push.eq(o_valid & last), meta.r_en.eq(push)]
        mine = [Signal(name=f"sp_mine{w}") for w in range(W)]   # lane w's result is out now
        for w in range(W):
            m.d.comb += mine[w].eq(by_size(lambda n: k == w // n))
        with m.If(o_valid):
            m.d.sync += k.eq(Mux(last, 0, k + 1))
            for w in range(W):
                with m.If(mine[w]):
                    m.d.sync += col[w].eq(by_size(lambda n: sfus[w % n].o.payload))
        with m.If(c.op.matches(*[f"{v:08b}" for v in SPECIAL_OPS.values()])):
            for w in range(W):
                m.d.comb += res_in.data[w].eq(Mux(mine[w], by_size(lambda n: sfus[w % n].o.payload),
                                                  col[w]))
            m.d.comb += [res_in.mask.eq(head.mask), res_in.waddr.eq(head.waddr)]
        return push

    def elaborate(self, platform):
        # Three decoupled parts, connected by FIFOs:
        #
        #   issuer --rd--> port --rd_data--> assembler --(FP lanes)--> result FIFO --> writer
        #      \--------------- tag FIFO (what each read is for) ----/                 --wr-->
        #
        # * issuer: walks the instruction and emits read beats (one per cycle), each with a tag
        #   (kind, lanes, write address(es), reduction slot, first/last column);
        # * assembler: pairs read data with tags in order; latches the first operand of a
        #   two-read beat, fires the FP lanes on the last one (when the result FIFO has a
        #   credit), loads/updates reduction accumulator slots, checks / takes indices;
        # * writer: one write beat per result (two for UPDATE), in order.
        m = Module()
        W = self._width
        LW = exact_log2(W)
        AB = self._addr_bits
        G = self._groups
        GB = max(1, ceil_log2(G))
        port = self.mem
        LM = latency_of(FP32Mul)
        LA = latency_of(FP32Add)
        LEW = LM + LA
        DEPTH = self.result_depth             # result FIFO entries (credits)
        SP = self._sfu is not None
        # ops="update": UPDATE's walk, beats, lanes (multiplier and adder) and writer only;
        # the other ops' flags are constant 0, their states and datapaths not built
        FULL = self._ops == "all"
        Lanes = data.ArrayLayout(32, W)

        # ---- command ----------------------------------------------------------------------
        # The op's decoded flags are registers, latched with the command from the incoming
        # payload: every path that steers on them starts at a register, not behind the op's
        # compares and ORs (13-14 levels into the lanes' multipliers and the result FIFO,
        # docs/u50.md). The same cycle as the command, so nothing takes longer.
        c = Signal(VectorCommand)
        ew_specs = [spec for spec in OPS if spec.kind is Elementwise]

        def decode(cmd):
            """The op's flags, ``{name: value}``, from a command ``cmd``."""
            op = cmd.op
            f = {f"ew_{k}": op == v for k, v in ELEMENTWISE_OPS.items()}
            f.update({f"rnd_{k}": op == v for k, v in RANDOM_OPS.items()})
            ew = {k: f[f"ew_{k}"] for k in ELEMENTWISE_OPS}
            rnd = {k: f[f"rnd_{k}"] for k in RANDOM_OPS}
            f["is_sp"] = _or(ew[k] for k in SPECIAL_OPS)
            f["is_sum"] = op == REDUCE_OPS["sum"]
            f["is_max"] = op == REDUCE_OPS["max"]
            f["is_red"] = f["is_sum"] | f["is_max"]
            f["is_gather"] = op == GATHER_OPS["gather"]
            f["is_scatter"] = op == GATHER_OPS["scatter_add"]
            f["is_upd"] = op == OP_UPDATE
            # UPDATE's training rule (flags [3:0], golden.isa.UPDATE_MODES): this unit runs SGD
            f["upd_mode_ok"] = cmd.flags == UPDATE_SGD
            # which slots an elementwise op reads comes from the ISA table (golden.isa.OPS)
            f["two_src"] = _or(ew[spec.mnemonic] for spec in ew_specs if spec.sources == 2)
            f["no_src"] = _or(ew[spec.mnemonic] for spec in ew_specs if spec.sources == 0)
            f["mul_only"] = ew["mul"] | ew["scale"]
            f["is_rnd"] = _or(rnd.values())
            # the perturbation ops' width and sign (golden.isa.PERTURB_OPS; -sigma u:
            # antithetic)
            f["is_pert"] = _or(rnd[k] for k in PERTURB_OPS)
            f["pert_neg"] = _or(rnd[k] for k, (_, sign) in PERTURB_OPS.items() if sign < 0)
            f["pert8"] = _or(rnd[k] for k, (bits, _) in PERTURB_OPS.items() if bits == 8)
            f["rd_d"] = f["is_upd"] | rnd["raccum"]     # the FIRE read is slot 0 (theta / d)
            f["two_reads"] = (f["two_src"] | f["is_upd"] | f["is_scatter"] | rnd["raccum"])
            f["add_op"] = (ew["add"] | ew["sub"] | ew["addi"] | f["is_upd"] | f["is_scatter"]
                           | rnd["raccum"] | rnd["runif"])
            f["is_ewop"] = (_or(ew[spec.mnemonic] for spec in ew_specs if not spec.requires)
                            | (f["is_sp"] if SP else 0) | f["is_rnd"])
            if not FULL:            # UPDATE alone: its own flags, every other one 0
                keep = {"is_upd": f["is_upd"], "upd_mode_ok": f["upd_mode_ok"]}
                keep.update({k: f["is_upd"] for k in ("rd_d", "two_reads", "add_op")})
                return {k: keep.get(k, Const(0, 1)) for k in f}
            return f

        incoming = decode(self.cmd.payload)
        dec = {k: v if isinstance(v, Const) else Signal(name=f"dec_{k}")
               for k, v in incoming.items()}
        latch_cmd = [c.eq(self.cmd.payload)] + [dec[k].eq(v) for k, v in incoming.items()
                                                if not isinstance(v, Const)]
        ew = {k: dec[f"ew_{k}"] for k in ELEMENTWISE_OPS}
        rnd = {k: dec[f"rnd_{k}"] for k in RANDOM_OPS}
        is_sp = dec["is_sp"]                  # a special-function op
        sp_on = is_sp if SP else Const(0, 1)
        is_sum, is_max, is_red = dec["is_sum"], dec["is_max"], dec["is_red"]
        is_gather, is_scatter, is_upd = dec["is_gather"], dec["is_scatter"], dec["is_upd"]
        upd_mode_ok = dec["upd_mode_ok"]
        two_src, no_src = dec["two_src"], dec["no_src"]
        two_reads, mul_only, add_op = dec["two_reads"], dec["mul_only"], dec["add_op"]
        is_rnd, is_racc = dec["is_rnd"], rnd["raccum"]
        is_pert, pert_neg, pert8 = dec["is_pert"], dec["pert_neg"], dec["pert8"]
        rd_d = dec["rd_d"]
        views = [c.v0, c.v1, c.v2]

        # normalized walk (set in DECODE): dims, per-slot base/row stride/step, lanes
        rows = Signal(16)
        cols = Signal(32)
        base = [Signal(32, name=f"base{s}") for s in range(3)]
        rstr = [Signal(32, name=f"rstr{s}") for s in range(3)]
        step = [Signal(32, name=f"step{s}") for s in range(3)]   # address step per beat/group
        bcast = [Signal(name=f"bcast{s}") for s in range(3)]      # source word broadcast
        wide = Signal()           # W lanes per beat (else 1)
        iwide = Signal()          # gather/scatter: W index words per check beat
        count = Signal(32)        # elements of the instruction
        err = Signal(4)

        # ---- tag FIFO, result FIFO ----------------------------------------------------------
        Tag = data.StructLayout({"kind": 3, "g": GB, "first": 1, "last": 1, "bx": 1,
                                 "mask": W, "waddr": AB, "waddr2": AB,
                                 **({"idx": 32} if FULL else {}),
                                 **({"bx2": 1} if self._reads == 2 else {})})
        Res = data.StructLayout({"data": Lanes, "mask": W, "waddr": AB, "waddr2": AB})
        m.submodules.tags = tags = fifo.SyncFIFO(width=Tag.size, depth=self._max_reads)
        m.submodules.res = res = fifo.SyncFIFO(width=Res.size, depth=DEPTH)
        tag_in = Signal(Tag)
        tg = Tag(tags.r_data)
        m.d.comb += tags.w_data.eq(tag_in.as_value())

        credits = Signal(range(DEPTH + 1))
        busy = Signal(G)                       # reduction slot in the adder/compare
        acc = [Signal(Lanes, name=f"acc{g}") for g in range(G)]
        slot_addr = [Signal(AB, name=f"slot_addr{g}") for g in range(G)]
        slot_mask = [Signal(W, name=f"slot_mask{g}") for g in range(G)]
        slot_last = Signal(G)
        idx_val = Signal(32)      # the last index read (set by the assembler)
        idx_ok = Signal()
        idx_cur = Signal(32)      # the current row's index
        pre = Signal()            # the next row's index read is issued
        hist = [Signal(32, name=f"hist{k}") for k in range(_HISTORY)]    # scatter row indices
        hist_v = Signal(_HISTORY)                                          # since last drain

        m.d.comb += [self.error.eq(err)]
        m.d.sync += self.done.eq(0)

        def lane_mask(rem, is_wide):
            """Lanes w with rem > w (all W when wide, lane 0 only otherwise)."""
            bits = [_gt_small(rem, w, LW) & (is_wide if w else 1) for w in range(W)]
            out = Signal(W)
            for w, b in enumerate(bits):
                m.d.comb += out[w].eq(b)
            return out

        def beat(kind, store, addr, mask, *, g=0, first=0, last=0, bx=0, waddr=0, waddr2=0,
                 second=None):
            """Offer one read beat with its tag; return the accept condition. ``second``:
            ``(store, addr, mask, bx)`` of the request's second vector (``reads=2``)."""
            if second is not None:
                s_store, s_addr, s_mask, s_bx = second
                m.d.comb += [port.rd.payload.store2.eq(s_store),
                             port.rd.payload.addr2.eq(s_addr[:AB]),
                             port.rd.payload.mask2.eq(s_mask), tag_in.bx2.eq(s_bx)]
            m.d.comb += [
                port.rd.valid.eq(tags.w_rdy),
                port.rd.payload.store.eq(store), port.rd.payload.addr.eq(addr[:AB]),
                port.rd.payload.mask.eq(mask),
                tag_in.kind.eq(kind), tag_in.g.eq(g), tag_in.first.eq(first),
                tag_in.last.eq(last), tag_in.bx.eq(bx), tag_in.mask.eq(mask),
                tag_in.waddr.eq(waddr[:AB] if hasattr(waddr, "shape") else waddr),
                tag_in.waddr2.eq(waddr2[:AB] if hasattr(waddr2, "shape") else waddr2),
            ]
            return port.rd.ready & tags.w_rdy
        m.d.comb += tags.w_en.eq(port.rd.valid & port.rd.ready)

        # ---- issuer -------------------------------------------------------------------------
        # reads=2: an element beat's first operand (slot 1) rides in its FIRE request as the
        # second vector, so there is no OPA beat (scatter_add keeps its two beats)
        paired = self._reads == 2
        OPA = "EW_FIRE" if paired else "EW_OPA"
        i = Signal(16)            # row (EW, GS) / first row of the current group (RED)
        j = Signal(32)            # column
        ad = [Signal(32, name=f"ad{s}") for s in range(3)]      # current element addresses
        rb = [Signal(32, name=f"rb{s}") for s in range(3)]      # row / pass start addresses
        # PRNG ops: the element index as a fourth walk (base imm, row stride cols, col 1)
        iad = Signal(32)
        irb = Signal(32)
        irstr = Signal(32)
        istep = Signal(32)
        ilane = Signal(32)        # index distance between neighbouring lanes of a beat
        key0 = Signal(32)
        key1 = Signal(32)
        g = Signal(GB)            # RED: group slot in the pass
        prow = Signal(16)         # RED: first row of the pass
        coff = Signal(32)         # RED: j * a.col
        tab = Signal(32)          # GS: table element address
        # the table is slot 1 for gather, slot 0 for scatter_add
        t_base = Mux(is_gather, c.v1.base, c.v0.base)
        t_row = Mux(is_gather, c.v1.row, c.v0.row)
        t_col = Mux(is_gather, c.v1.col, c.v0.col)
        n_lanes = Mux(wide, W, 1)
        rem_c = Signal(32)        # cols - j, kept beside j (no subtraction on the beat path)
        row_end = Mux(wide, _le_pow2(rem_c, LW), _le_pow2(rem_c, 0))    # rem_c <= n_lanes
        mask_c = lane_mask(rem_c, wide)
        rrem = Signal(17)         # rows - i (mod 2**17), kept beside i like rem_c
        last_row = rrem == 1                                              # i == rows - 1
        prow_rem = Signal(17)     # rows - prow
        rrem_le_n = Mux(wide, _le_pow2(rrem, LW), _le_pow2(rrem, 0))       # rrem <= n_lanes
        mask_r = lane_mask(rrem, wide)
        last_group = (g == G - 1) | rrem_le_n
        mask_i = lane_mask(rrem, iwide)

        def src_mask(s):
            return Mux(bcast[s], 1, mask_c)

        drained = Signal()
        m.d.comb += drained.eq(~tags.r_rdy & (credits == 0) & (busy == 0) & port.wr_idle)

        with m.FSM(name="issue"):
            with m.State("IDLE"):
                m.d.comb += self.cmd.ready.eq(1)
                with m.If(self.cmd.valid):
                    m.d.sync += [*latch_cmd, err.eq(0)]
                    m.next = "DECODE"

            with m.State("DECODE"):
                # used views, transposition, flattening, lanes
                is_ewop = dec["is_ewop"]
                used = [Const(1), ~no_src, two_src]
                colok = [(v.col == 1) | ((v.col == 0) if s else 0) for s, v in enumerate(views)]
                rowok = [(v.row == 1) | ((v.row == 0) if s else 0) for s, v in enumerate(views)]
                wcol = Signal()
                wrow = Signal()
                m.d.comb += [wcol.eq(colok[0] & (~used[1] | colok[1]) & (~used[2] | colok[2])),
                             wrow.eq(rowok[0] & (~used[1] | rowok[1]) & (~used[2] | rowok[2]))]
                tr = Signal()
                m.d.comb += tr.eq(is_ewop & ~wcol & wrow)
                dense = Signal()
                m.d.comb += dense.eq(is_ewop & wcol & (c.rows > 1) & (c.v0.row == c.cols)
                                     & (~used[1] | ((c.v1.col == 1) & (c.v1.row == c.cols)))
                                     & (~used[2] | ((c.v2.col == 1) & (c.v2.row == c.cols))))
                total = Signal(32)
                m.d.comb += total.eq(c.rows * c.cols)
                m.d.sync += [count.eq(total), i.eq(0), j.eq(0), g.eq(0), prow.eq(0),
                             coff.eq(0), idx_ok.eq(0), hist_v.eq(0)]
                for s, v in enumerate(views):
                    m.d.sync += [base[s].eq(v.base), ad[s].eq(v.base), rb[s].eq(v.base)]
                # no special-function unit, or an op the update unit does not have
                with m.If((is_sp & ~sp_on) if FULL else ~is_upd):
                    m.d.sync += err.eq(ERR_OPCODE)
                    m.next = "FINISH"
                with m.Elif(is_upd & ~upd_mode_ok):     # a rule this unit does not have
                    m.d.sync += err.eq(ERR_MODE)
                    m.next = "FINISH"
                with m.Elif(is_upd):
                    m.d.sync += [rows.eq(1), cols.eq(c.cols), rem_c.eq(c.cols),
                                 rrem.eq(1), prow_rem.eq(1), wide.eq(W > 1)]
                    for s in range(3):
                        m.d.sync += [rstr[s].eq(0), bcast[s].eq(0), step[s].eq(W)]
                    m.next = OPA
                if FULL:   # (the update unit has UPDATE alone)
                    with m.Elif(is_ewop):
                        with m.If(dense):
                            m.d.sync += [rows.eq(1), cols.eq(total), rem_c.eq(total),
                                         rrem.eq(1), prow_rem.eq(1)]
                        with m.Elif(tr):
                            m.d.sync += [rows.eq(c.cols), cols.eq(c.rows), rem_c.eq(c.rows),
                                         rrem.eq(c.cols[:16]), prow_rem.eq(c.cols[:16])]
                        with m.Else():
                            m.d.sync += [rows.eq(c.rows), cols.eq(c.cols), rem_c.eq(c.cols),
                                         rrem.eq(c.rows), prow_rem.eq(c.rows)]
                        m.d.sync += wide.eq((wcol | wrow) & (W > 1))
                        for s, v in enumerate(views):
                            r_ = Mux(tr, v.col, v.row)
                            c_ = Mux(tr, v.row, v.col)
                            m.d.sync += [rstr[s].eq(r_),
                                         bcast[s].eq((c_ == 0) if s else 0),
                                         step[s].eq(Mux((wcol | wrow) & (W > 1), c_ << LW, c_))]
                        ir_ = Mux(tr, 1, c.cols)
                        ic_ = Mux(tr, c.cols, 1)
                        m.d.sync += [iad.eq(c.imm), irb.eq(c.imm), irstr.eq(ir_), ilane.eq(ic_),
                                     istep.eq(Mux((wcol | wrow) & (W > 1), ic_ << LW, ic_))]
                        with m.If(is_rnd):
                            m.next = "EW_SEED"
                        with m.Elif(two_src):
                            m.next = OPA
                        with m.Else():
                            m.next = "EW_FIRE"
                    with m.Elif(is_red):
                        rl = Signal()
                        m.d.comb += rl.eq((c.v1.row == 1) & (c.v0.row == 1) & (W > 1))
                        m.d.sync += [rows.eq(c.rows), cols.eq(c.cols), rem_c.eq(c.cols),
                                     rrem.eq(c.rows), prow_rem.eq(c.rows), wide.eq(rl)]
                        for s, v in enumerate(views):
                            m.d.sync += [rstr[s].eq(v.row), bcast[s].eq(0),
                                         step[s].eq(Mux(rl, v.row << LW, v.row))]
                        with m.If(c.flags[0]):
                            m.next = "RED_ACC"
                        with m.Else():
                            m.next = "RED_A"
                    with m.Else():                                  # gather / scatter_add
                        gw = Signal()
                        m.d.comb += gw.eq((c.v0.col == 1) & (c.v1.col == 1) & (W > 1))
                        m.d.sync += [rows.eq(c.rows), cols.eq(c.cols), rem_c.eq(c.cols),
                                     rrem.eq(c.rows), prow_rem.eq(c.rows), wide.eq(gw),
                                     iwide.eq((c.v2.row == 1) & (W > 1))]
                        for s, v in enumerate(views):
                            m.d.sync += [rstr[s].eq(v.row), bcast[s].eq(0),
                                         step[s].eq(Mux(gw, v.col << LW, v.col))]
                        m.d.sync += step[2].eq(Mux((c.v2.row == 1) & (W > 1), W, c.v2.row))
                        m.next = "GS_CHK"

            # ---- elementwise and UPDATE -----------------------------------------------------
            # two-read ops: OPA = slot 1 (a, or g for UPDATE), FIRE = slot 2 (b) or slot 0
            # (theta); one-read ops: FIRE = slot 1; fill: FIRE = a zero-mask read at slot 0.
            def ew_advance():
                with m.If(row_end):
                    with m.If(last_row):
                        m.next = "FINISH"
                    with m.Else():
                        m.d.sync += [i.eq(i + 1), rrem.eq(rrem - 1), j.eq(0), rem_c.eq(cols),
                                     irb.eq(irb + irstr),
                                     iad.eq(irb + irstr)]
                        for s in range(3):
                            m.d.sync += [rb[s].eq(rb[s] + rstr[s]), ad[s].eq(rb[s] + rstr[s])]
                        with m.If(two_reads):
                            m.next = OPA
                        with m.Else():
                            m.next = "EW_FIRE"
                with m.Else():
                    m.d.sync += [j.eq(j + n_lanes), rem_c.eq(rem_c - n_lanes),
                                 iad.eq(iad + istep)]
                    for s in range(3):
                        m.d.sync += ad[s].eq(ad[s] + step[s])
                    with m.If(two_reads):
                        m.next = OPA
                    with m.Else():
                        m.next = "EW_FIRE"

            if FULL:
                with m.State("EW_SEED"):           # PRNG ops: the seed word first
                    with m.If(beat(_K_SEED, c.v2.store, c.v2.base, 1, bx=1)):
                        with m.If(two_reads):
                            m.next = OPA
                        with m.Else():
                            m.next = "EW_FIRE"
            if not paired:
                with m.State("EW_OPA"):
                    with m.If(beat(_K_OPA, c.v1.store, ad[1], src_mask(1), bx=bcast[1])):
                        m.next = "EW_FIRE"
            with m.State("EW_FIRE"):
                f_store = Mux(rd_d | no_src, c.v0.store,
                              Mux(two_src, c.v2.store, c.v1.store))
                f_addr = Mux(rd_d | no_src, ad[0], Mux(two_src, ad[2], ad[1]))
                f_bx = Mux(two_src, bcast[2], Mux(rd_d | no_src, 0, bcast[1]))
                f_mask = Mux(no_src, 0, Mux(f_bx, 1, mask_c))
                second = (c.v1.store, ad[1], Mux(two_reads, src_mask(1), 0), bcast[1]) \
                    if paired else None
                with m.If(beat(_K_FIRE, f_store, f_addr, f_mask, bx=f_bx, waddr=ad[0],
                               waddr2=ad[1], second=second)):
                    ew_advance()
                # the write mask (the read mask may be a broadcast lane or zero)
                m.d.comb += tag_in.mask.eq(mask_c)
                if FULL:                            # (the PRNG ops' element index)
                    m.d.comb += tag_in.idx.eq(iad)

            # ---- reductions -------------------------------------------------------------------
            def red_next_group():
                m.d.sync += [g.eq(g + 1), i.eq(i + n_lanes), rrem.eq(rrem - n_lanes),
                             rb[0].eq(rb[0] + step[0]),
                             rb[1].eq(rb[1] + step[1])]

            def red_restart_pass():
                """Back to the first group of the pass."""
                m.d.sync += [g.eq(0), i.eq(prow), rrem.eq(prow_rem), rb[0].eq(ad[0]),
                             rb[1].eq(ad[1])]

            if FULL:
                with m.State("RED_ACC"):
                    # ad[0]/ad[1]: pass start addresses of d / a (row prow, column 0)
                    with m.If(beat(_K_ACC, c.v0.store, rb[0], mask_r, g=g)):
                        with m.If(last_group):
                            red_restart_pass()
                            m.next = "RED_A"
                        with m.Else():
                            red_next_group()
                with m.State("RED_A"):
                    last_col = rem_c == 1                                     # j == cols - 1
                    with m.If(beat(_K_RED, c.v1.store, rb[1] + coff, mask_r, g=g, first=j == 0,
                                   last=last_col, waddr=rb[0])):
                        with m.If(~last_group):
                            red_next_group()
                        with m.Elif(~last_col):
                            red_restart_pass()
                            m.d.sync += [j.eq(j + 1), rem_c.eq(rem_c - 1),
                                         coff.eq(coff + c.v1.col)]
                        with m.Elif(rrem_le_n):
                            m.next = "FINISH"
                        with m.Else():                  # next pass starts after this group
                            nxt = [rb[0] + step[0], rb[1] + step[1]]
                            m.d.sync += [g.eq(0), j.eq(0), rem_c.eq(cols), coff.eq(0),
                                         i.eq(i + n_lanes), rrem.eq(rrem - n_lanes),
                                         prow_rem.eq(rrem - n_lanes),
                                         prow.eq(i + n_lanes)]
                            for s in range(2):
                                m.d.sync += [rb[s].eq(nxt[s]), ad[s].eq(nxt[s])]
                            with m.If(c.flags[0]):
                                m.next = "RED_ACC"

            # ---- gather / scatter_add ---------------------------------------------------------
            if FULL:
                with m.State("GS_CHK"):
                    with m.If(beat(_K_CHK, c.v2.store, ad[2], mask_i)):
                        with m.If(Mux(iwide, _le_pow2(rrem, LW), _le_pow2(rrem, 0))):
                            m.next = "GS_CHKW"
                        with m.Else():
                            m.d.sync += [i.eq(i + Mux(iwide, W, 1)), rrem.eq(rrem - Mux(iwide, W, 1)),
                                         ad[2].eq(ad[2] + step[2])]
                with m.State("GS_CHKW"):
                    with m.If(~tags.r_rdy):
                        with m.If(err != 0):
                            m.next = "FINISH"
                        with m.Else():
                            m.d.sync += [i.eq(0), rrem.eq(rows), ad[2].eq(base[2])]
                            m.next = "GS_IDX"
                with m.State("GS_IDX"):
                    with m.If(beat(_K_IDX, c.v2.store, ad[2], 1)):
                        m.next = "GS_IDXW"
                with m.State("GS_IDXW"):
                    with m.If(idx_ok):
                        m.d.sync += [tab.eq(t_base + (idx_val * t_row)[:32]), idx_cur.eq(idx_val),
                                     idx_ok.eq(0), pre.eq(0)]
                        m.next = "GS_ROW"
                with m.State("GS_ROW"):
                    # first the next row's index read (it arrives while this row streams), then
                    # this row. Scatter: if an earlier row since the last drained moment had the
                    # same index (or the history is full), its writes may not have landed: read
                    # the table row only once every earlier write has (drained = wr_idle and
                    # nothing in flight).
                    hit = 0
                    for k in range(_HISTORY):
                        hit = hit | (hist_v[k] & (hist[k] == idx_cur))
                    idx_done = Signal()
                    with m.If(~last_row & ~pre):
                        issued = beat(_K_IDX, c.v2.store, ad[2] + rstr[2], 1)
                        m.d.comb += idx_done.eq(issued)
                        with m.If(issued):
                            m.d.sync += pre.eq(1)
                    with m.Else():
                        m.d.comb += idx_done.eq(1)
                    with m.If(idx_done & ~is_scatter):
                        m.next = "GS_T"
                    with m.Elif(idx_done & drained):
                        m.d.sync += [hist_v.eq(1), hist[0].eq(idx_cur)]
                        m.next = "GS_T"
                    with m.Elif(idx_done & ~hit & ~hist_v[_HISTORY - 1]):
                        m.d.sync += hist_v.eq((hist_v << 1) | 1)
                        for k in range(_HISTORY):
                            m.d.sync += hist[k].eq(idx_cur if k == 0 else hist[k - 1])
                        m.next = "GS_T"

                def gs_advance():
                    with m.If(row_end):
                        with m.If(last_row):
                            m.next = "FINISH"
                        with m.Else():
                            m.d.sync += [i.eq(i + 1), rrem.eq(rrem - 1), j.eq(0), rem_c.eq(cols),
                                         ad[2].eq(ad[2] + rstr[2])]
                            for s in range(2):
                                m.d.sync += [rb[s].eq(rb[s] + rstr[s]), ad[s].eq(rb[s] + rstr[s])]
                            with m.If(idx_ok):      # its index (read in GS_ROW) is here
                                m.d.sync += [tab.eq(t_base + (idx_val * t_row)[:32]),
                                             idx_cur.eq(idx_val), idx_ok.eq(0), pre.eq(0)]
                                m.next = "GS_ROW"
                            with m.Else():
                                m.next = "GS_IDXW"
                    with m.Else():
                        m.d.sync += [j.eq(j + n_lanes), rem_c.eq(rem_c - n_lanes),
                                     tab.eq(tab + Mux(wide, W, t_col))]
                        for s in range(2):
                            m.d.sync += ad[s].eq(ad[s] + step[s])
                        with m.If(is_scatter):
                            m.next = "GS_T"

                with m.State("GS_T"):
                    # gather: the table beat is the whole element; scatter: the table is operand 1
                    with m.If(is_gather):
                        with m.If(beat(_K_FIRE, c.v1.store, tab, mask_c, waddr=ad[0])):
                            gs_advance()
                    with m.Else():
                        with m.If(beat(_K_OPA, c.v0.store, tab, mask_c)):
                            m.next = "GS_S"
                with m.State("GS_S"):
                    with m.If(beat(_K_FIRE, c.v1.store, ad[1], mask_c, waddr=tab)):
                        gs_advance()

            with m.State("FINISH"):
                with m.If(drained):
                    m.d.sync += self.done.eq(1)
                    with m.If(err == 0):
                        m.d.sync += self.elements.eq(self.elements + count)
                    m.next = "IDLE"
        m.d.comb += self.busy.eq(~self.cmd.ready)

        # ---- assembler ------------------------------------------------------------------------
        raw = port.rd_data.payload
        dat = Signal(Lanes)
        for w in range(W):
            m.d.comb += dat[w].eq(Mux(tg.bx, raw[0], raw[w]))
        if paired:                        # reads=2: the request's second vector (slot 1)
            dat2 = Signal(Lanes)
            for w in range(W):
                m.d.comb += dat2[w].eq(Mux(tg.bx2, raw[W], raw[W + w]))
        space = credits < DEPTH
        ser_busy = Signal()       # special: the serializer still has lanes after this cycle
        slot_busy = Signal()
        m.d.comb += slot_busy.eq(busy.bit_select(tg.g, 1))
        ok = Signal()
        with m.Switch(tg.kind):
            with m.Case(_K_FIRE):
                # special: the serializer must be free by the end of this cycle
                m.d.comb += ok.eq(space & (~sp_on | ~ser_busy))
            with m.Case(_K_ACC):
                m.d.comb += ok.eq(~slot_busy)
            with m.Case(_K_RED):
                m.d.comb += ok.eq(~slot_busy & (~tg.last | space))
            with m.Default():
                m.d.comb += ok.eq(1)
        m.d.comb += port.rd_data.ready.eq(tags.r_rdy & ok)
        take = Signal()
        m.d.comb += [take.eq(port.rd_data.valid & port.rd_data.ready), tags.r_en.eq(take)]
        kind_is = {k: take & (tg.kind == k) for k in range(7)}

        x_reg = Signal(Lanes)
        with m.If(kind_is[_K_OPA]):
            m.d.sync += x_reg.eq(dat)
        if FULL:
            # PRNG keys of the seed word (golden.prng.seed_keys), registered as it arrives
            with m.If(kind_is[_K_SEED]):
                k0 = _mix32(m, dat[0] + GAMMA, "seedmix")
                m.d.sync += [key0.eq(k0), key1.eq(Cat(k0[16:32], k0[0:16]))]
            with m.If(kind_is[_K_IDX]):
                m.d.sync += [idx_val.eq(raw[0]), idx_ok.eq(1)]
            with m.If(kind_is[_K_CHK]):
                bad = 0
                for w in range(W):
                    bad = bad | (tg.mask[w] & (raw[w] >= c.imm))
                with m.If(bad):
                    m.d.sync += err.eq(ERR_INDEX)

        # ---- elementwise pipeline: multiply stage, add stage (12 cycles) ---------------------
        ew_fire = Signal()
        m.d.comb += ew_fire.eq(kind_is[_K_FIRE] & ~sp_on)
        s0_x = Signal(Lanes)
        s0_y = Signal(Lanes)
        for w in range(W):
            first = Mux(is_scatter, x_reg[w], dat2[w]) if paired else x_reg[w]
            m.d.comb += [s0_x[w].eq(Mux(ew["fill"], c.imm, Mux(two_reads, first, dat[w]))),
                         s0_y[w].eq(dat[w])]

        def delay(sig, n, name, shape=1):
            out = [sig]
            for k in range(1, n + 1):
                r = Signal(shape, name=f"{name}_d{k}")
                m.d.sync += r.eq(out[-1])
                out.append(r)
            return out

        meta = Signal(data.StructLayout({"mask": W, "waddr": AB, "waddr2": AB}))
        m.d.comb += [meta.mask.eq(tg.mask), meta.waddr.eq(tg.waddr), meta.waddr2.eq(tg.waddr2)]
        meta_line = delay(meta, LEW, "ew_meta", meta.shape())
        x_line = delay(s0_x, LM, "ew_x", Lanes)
        y_line = delay(s0_y, LM, "ew_y", Lanes)
        # Ops that use neither the multiplier's product nor the PRNG draw (everything but mul,
        # scale, UPDATE, the PRNG ops, special functions and reductions) skip the multiply
        # stage: their operands enter the adder stage one cycle after they fire (from the
        # first register of the operand delay line, so the adder's input stays a register and
        # a 2:1 mux) and the result leaves DL = 1 + LA cycles after firing instead of LM + LA.
        # The same registers, time-multiplexed: one instruction at a time, the next only after
        # the last write (``drained``), so beats of the two timings never share a stage. Each
        # timing has its own valid line, so that the beats of a direct instruction do not
        # reach the full-latency exit after the next (multiplying) instruction has begun.
        DL = 1 + LA
        direct = Signal()                    # registered: c holds still from DECODE on
        m.d.sync += direct.eq(~(mul_only | is_upd | is_rnd | is_sp | is_red))
        valid_long = delay(ew_fire & ~direct, LEW, "ew_valid")
        valid_short = delay(ew_fire & direct, DL, "ew_valid_direct")
        v6 = Signal()                        # a beat at the adder stage's input
        m.d.comb += v6.eq(valid_short[1] | valid_long[LM])
        ew_push = Signal()                   # its result at the result FIFO
        m.d.comb += ew_push.eq(valid_short[DL] | valid_long[LEW])
        ew_meta = Signal(meta.shape())
        m.d.comb += ew_meta.eq(Mux(valid_short[DL], meta_line[DL], meta_line[LEW]))
        # PRNG ops: each lane's 32-bit draw (golden.prng.draw of tg.idx + w * ilane), in the
        # multiply stage's cycles: d1 the index, d2 x = index + key0 + w * ilane, xorshift;
        # d3, d4 the two multiplies; d5 the draw r; d6 r and its uniform (runif: r[31:8] as
        # binary32 / 2**24, exact), both at the adder's input with x6.
        assert LM >= 6, "the draw pipeline fills the multiply stage's 6 cycles"
        (mix_a, mix_b), (mix_s0, mix_s1, mix_s2) = MIX_MULTIPLIERS, MIX_SHIFTS

        def rstage(value, name):
            r = Signal(32, name=name, reset_less=True)
            m.d.sync += r.eq(value)
            return r

        r6_lanes, unif6_lanes, sig6_lanes = [], [], []
        if FULL:                              # (no PRNG ops in the update unit)
            d1_idx = rstage(tg.idx, "draw_d1_idx")
            for w in range(W):
                lane_key = rstage(key0 + w * ilane, f"draw{w}_key")     # stable before the beats
                x = (d1_idx + lane_key)[:32]
                x = rstage(x ^ (x >> mix_s0), f"draw{w}_d2")
                x = rstage((x * mix_a)[:32], f"draw{w}_d3")
                x = rstage((((x ^ (x >> mix_s1)) ^ key1) * mix_b)[:32], f"draw{w}_d4")
                r5 = rstage(x ^ (x >> mix_s2), f"draw{w}_d5")
                r24 = Signal(32, name=f"r24_{w}")
                m.d.comb += r24.eq(r5[8:32])
                lz = intops._lzc32(m, r24, f"unif{w}")
                norm = Signal(32, name=f"unif{w}_norm")
                m.d.comb += norm.eq(r24 << lz)
                unif6_lanes.append(rstage(Mux(r24 == 0, 0, Cat(norm[8:31], (134 - lz)[:8])),
                                          f"unif{w}_d6"))
                r6_lanes.append(rstage(r5, f"draw{w}_d6"))
                # perturb: +-sigma (sigma = the flags byte), -sigma when bit 31 of the draw is set
                # (perturb8n/perturb32n: the other sign)
                sig6 = Signal(signed(10), name=f"sigma{w}_d6", reset_less=True)
                m.d.sync += sig6.eq(Mux(r5[31] ^ pert_neg, -c.flags.as_unsigned(), c.flags))
                sig6_lanes.append(sig6)
        ew_out = Signal(Lanes)

        def istage(value, name):
            r = Signal(Value.cast(value).shape(), name=name, reset_less=True)
            m.d.sync += r.eq(value)
            return r

        red_fire = kind_is[_K_RED]
        if FULL:
            # reduction operands / return path
            acc_g = Signal(Lanes)
            with m.Switch(tg.g):
                for k in range(G):
                    with m.Case(k):
                        m.d.comb += acc_g.eq(acc[k])
            fresh = tg.first & ~c.flags[0]            # first column without accumulate
            sum_v = delay(red_fire & is_sum, LA, "sum_valid")
            sum_g = delay(tg.g, LA, "sum_g", GB)
            max_v = delay(red_fire & is_max, 1, "max_valid")
            max_g = delay(tg.g, 1, "max_g", GB)
            max_bp = delay(fresh, 1, "max_bypass")
            max_x = delay(dat, 1, "max_x", Lanes)
            ret_val = Signal(Lanes)

        for w in range(W):
            mul = self._units["mul"]()
            add = self._units["add"]()
            m.submodules[f"mul{w}"] = mul
            m.submodules[f"add{w}"] = add
            x0, y0 = s0_x[w], s0_y[w]
            m.d.comb += [
                mul.i.valid.eq(ew_fire),
                mul.i.payload.a.eq(Mux(is_upd, c.imm, x0)),
                mul.i.payload.b.eq(Mux(is_upd, x0, Mux(ew["scale"], c.imm, y0))),
            ]
            x6, y6 = Signal(32, name=f"x6_{w}"), Signal(32, name=f"y6_{w}")
            m.d.comb += [x6.eq(Mux(direct, x_line[1][w], x_line[LM][w])),
                         y6.eq(Mux(direct, y_line[1][w], y_line[LM][w]))]
            p6 = mul.o.payload
            if not FULL:                         # UPDATE: theta + (-(lr g))
                m.d.comb += [add.i.valid.eq(v6), add.i.payload.a.eq(y6),
                             add.i.payload.b.eq(p6 ^ _SIGN), ew_out[w].eq(add.o.payload)]
                continue
            cmp = self._units["cmp"]()
            m.submodules[f"cmp{w}"] = cmp
            r6, unif = r6_lanes[w], unif6_lanes[w]
            u_neg = r6[31]                       # Rademacher: -1 when bit 31 is set
            sig = sig6_lanes[w]

            # Results that do not use the adder, in the adder's LA cycles: each op is
            # pipelined (intops.STAGES) and its registered result joins a running select
            # chain at its depth (sel[d]: the register at depth d after x6; the command
            # fields, which pick the op, hold still during an instruction).
            def lane_stage(value, name, w=w):
                return istage(value, f"l{w}_{name}")

            emax = self._units["cmp"]()                # elementwise max and fcmp (depth 1)
            m.submodules[f"emax{w}"] = emax
            m.d.comb += [emax.i.valid.eq(v6), emax.i.payload.a.eq(x6),
                         emax.i.payload.b.eq(y6)]
            ready = {d: [] for d in range(LA)}        # depth -> [(select, register)]
            ready[0].append((mul_only, p6))
            ready[1] += [(ew["max"], emax.o.payload.max),
                         (ew["ext8"], lane_stage(intops.ext8(m, x6, c.imm, name=f"ext8{w}"),
                                                 "ext8")),
                         (ew["ext16"], lane_stage(intops.ext16(m, x6, c.imm,
                                                               name=f"ext16{w}"), "ext16")),
                         (ew["ins16"], lane_stage(intops.ins16(m, x6, y6, c.imm,
                                                               name=f"ins16{w}"), "ins16")),
                         (ew["ins8"], lane_stage(intops.ins8(m, x6, y6, c.imm,
                                                             name=f"ins8{w}"), "ins8")),
                         (ew["bitop"], lane_stage(intops.bitop(m, x6, y6, c.imm,
                                                               name=f"bitop{w}"), "bitop"))]
            # rmask: all ones where the draw is below the threshold word a (unsigned)
            ready[1].append((rnd["rmask"], lane_stage(Mux(r6 < x6, Const(0xFFFFFFFF, 32), 0),
                                                      "rmask")))
            hit = Mux(c.imm[:2] == 0, emax.o.payload.is_lt,
                      Mux(c.imm[:2] == 1, emax.o.payload.is_le,
                          Mux(c.imm[:2] == 2, emax.o.payload.is_eq, 0)))
            ready[2].append((ew["fcmp"], lane_stage(Mux(hit, Const(0xFFFFFFFF, 32), 0),
                                                    "fcmp")))
            for op_name, build in (
                    ("iadd", lambda st: intops.iadd(m, x6, y6, c.imm, name=f"iadd{w}",
                                                    stage=st)),
                    ("pert", lambda st: intops.iadd(m, x6, sig, Mux(pert8, 8, 32),
                                                    name=f"pert{w}", stage=st)),
                    ("f2i", lambda st: intops.f2i(m, x6, c.imm[0], name=f"f2i{w}",
                                                  stage=st)),
                    ("i2f", lambda st: intops.i2f(m, x6, name=f"i2f{w}", stage=st)),
                    ("requant", lambda st: intops.requant(m, x6, y6, c.imm,
                                                          name=f"requant{w}", stage=st))):
                depth = intops.STAGES["iadd" if op_name == "pert" else op_name] + 1
                assert depth < LA, "an integer op longer than the adder"
                sel = is_pert if op_name == "pert" else ew[op_name]
                ready[depth].append((sel, lane_stage(build(lane_stage), op_name)))
            chain = x6                                 # the default: x passes through
            for d in range(LA):
                for sel, value in ready[d]:
                    chain = Mux(sel, value, chain)
                chain = lane_stage(chain, f"m_d{d + 1}")
            m6 = chain                                 # the result LA cycles after x6
            with m.If(is_red):
                m.d.comb += [add.i.valid.eq(red_fire & is_sum),
                             add.i.payload.a.eq(Mux(fresh, NEG_ZERO, acc_g[w])),
                             add.i.payload.b.eq(dat[w])]
            with m.Else():
                m.d.comb += [
                    add.i.valid.eq(v6),
                    add.i.payload.a.eq(Mux(rd_d, y6, x6)),
                    add.i.payload.b.eq(Mux(is_upd, p6 ^ _SIGN,
                                           Mux(is_racc, x6 ^ (u_neg << 31),
                                               Mux(rnd["runif"], unif,
                                                   Mux(ew["sub"], y6 ^ _SIGN,
                                                       Mux(ew["addi"], c.imm, y6)))))),
                ]
            m.d.comb += [cmp.i.valid.eq(red_fire & is_max),
                         cmp.i.payload.a.eq(acc_g[w]), cmp.i.payload.b.eq(dat[w])]
            m.d.comb += [ew_out[w].eq(Mux(add_op, add.o.payload, m6)),
                         ret_val[w].eq(Mux(is_max, Mux(max_bp[1], max_x[1][w],
                                                       cmp.o.payload.max),
                                           add.o.payload))]

        red_push = Const(0, 1)
        if FULL:
            ret_v = Mux(is_max, max_v[1], sum_v[LA])
            ret_g = Mux(is_max, max_g[1], sum_g[LA])

            # slots: fire marks busy and records where the row group's result goes; the return
            # updates the accumulator, frees the slot and, after the last column, emits the result
            ret_last = Signal()
            ret_addr = Signal(AB)
            ret_mask = Signal(W)
            with m.Switch(ret_g):
                for k in range(G):
                    with m.Case(k):
                        m.d.comb += [ret_last.eq(slot_last[k]), ret_addr.eq(slot_addr[k]),
                                     ret_mask.eq(slot_mask[k])]
            for k in range(G):
                with m.If(red_fire & (tg.g == k)):
                    m.d.sync += [busy[k].eq(1), slot_last[k].eq(tg.last),
                                 slot_addr[k].eq(tg.waddr), slot_mask[k].eq(tg.mask)]
                with m.Elif(ret_v & (ret_g == k)):
                    m.d.sync += [busy[k].eq(0), acc[k].eq(ret_val)]
                with m.If(kind_is[_K_ACC] & (tg.g == k)):
                    m.d.sync += acc[k].eq(dat)
            red_push = ret_v & ret_last

        # ---- result FIFO and writer -------------------------------------------------------------
        res_in = Signal(Res)
        with m.If(is_red):
            if FULL:
                m.d.comb += [res_in.data.eq(ret_val), res_in.mask.eq(ret_mask),
                             res_in.waddr.eq(ret_addr)]
        with m.Elif(sp_on):
            pass                  # driven by _special
        with m.Else():
            m.d.comb += [res_in.data.eq(ew_out), res_in.mask.eq(ew_meta.mask),
                         res_in.waddr.eq(ew_meta.waddr), res_in.waddr2.eq(ew_meta.waddr2)]
        sp_push = Const(0, 1)
        if SP:
            sp_push = self._special(m, c, kind_is[_K_FIRE] & sp_on, dat, tg, res_in, ser_busy)
        else:
            m.d.comb += ser_busy.eq(0)
        m.d.comb += [res.w_en.eq(Mux(is_red, red_push, Mux(sp_on, sp_push, ew_push))),
                     res.w_data.eq(res_in.as_value())]

        rq = Res(res.r_data)
        phase = Signal()          # UPDATE: 0 = theta beat, 1 = zeroed gradient beat
        m.d.comb += [
            port.wr.valid.eq(res.r_rdy),
            port.wr.payload.store.eq(Mux(phase, c.v1.store, c.v0.store)),
            port.wr.payload.addr.eq(Mux(phase, rq.waddr2, rq.waddr)),
            port.wr.payload.mask.eq(rq.mask),
            port.wr.payload.data.eq(Mux(phase, 0, rq.data.as_value())),
        ]
        wr_take = port.wr.valid & port.wr.ready
        pop = Signal()
        m.d.comb += [pop.eq(wr_take & (phase | ~is_upd)), res.r_en.eq(pop)]
        with m.If(wr_take):
            m.d.sync += phase.eq(is_upd & ~phase)

        inc = kind_is[_K_FIRE] | (red_fire & tg.last)
        with m.If(inc & ~pop):
            m.d.sync += credits.eq(credits + 1)
        with m.Elif(pop & ~inc):
            m.d.sync += credits.eq(credits - 1)
        return m
