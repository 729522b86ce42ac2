"""The accelerator top: sequencer, contraction engine, vector unit, update unit and stores.

Golden: :func:`ttrain.golden.interpreter.run` — a program loaded into the instruction memory
and started leaves every store word equal to the interpreter's image.

Data flow::

    host ──host_i/host_o──►┐                       ┌── port0 ◄── vector unit ◄─┐
                           │  ContractionEngine     │                           │ vec
    host ──imem/start────► │  (stores param, grad,  ├── port1 ◄── update unit ◄─┤ upd
                           │   act, scratch; per-   │                           │
                           │   bank arbiters)  ◄────┼────── desc/start ◄────────┤ eng
                           └────────────────────────┘                  Sequencer┘

The four stores of :data:`ttrain.golden.isa.STORE_IDS` (in that id order) sit behind the
engine's per-bank arbiters; the engine's operand fetchers and result writer have priority,
then the two store ports (:mod:`ttrain.rtl.port`) of the vector and update units, so the
sequencer can overlap a contraction with vector work on other words (its scoreboard keeps the
units' address intervals apart). The host loads and reads the stores through the engine's
host port and writes the instruction memory, both only while the sequencer is idle.

Host protocol (the cocotb testbench and the driver follow it):

1. while ``busy`` is low: write stores (``host_i`` write beats) and instructions (``imem_*``),
   set ``length``;
2. pulse ``start``; wait for ``done`` (``busy`` falls);
3. read ``error``/``error_code``/``error_pc`` and the counters; read stores back.

A program with an error found before execution (malformed instruction, address out of range,
bad loop structure, dimension above the engine's limit) changes no store word; a gather or
scatter index error stops the run at that instruction.
"""

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import Out, connect

from ..golden.isa import STORE_IDS, STORE_NAMES
from .engine import ContractionEngine, StoreSpec
from .sequencer import Sequencer
from .vector_wide import WideVectorUnit

__all__ = ["Accelerator", "VECTOR_KINDS"]

#: Vector / update unit implementations: ``"wide"`` (:class:`~ttrain.rtl.vector_wide.
#: WideVectorUnit`, ``banks`` lanes per beat, pipelined). The one-element-at-a-time
#: reference unit (``testbench/vector_ref.py``) is a test model of the sequencer's tests only.
VECTOR_KINDS = ("wide",)


class Accelerator(wiring.Component):
    """The programmable trainer: one program run = one (or more) training steps on chip.

    Parameters
    ----------
    store_sizes : dict
        Words of each store of :data:`~ttrain.golden.isa.STORE_IDS` (multiples of ``banks``;
        :func:`ttrain.platforms.hw.round_store_words` rounds a program's sizes).
    lanes : int
        Contraction engine MAC lanes (power of two).
    banks, slots, dim_bits : int or None
        Passed to :class:`~ttrain.rtl.engine.ContractionEngine` (``banks`` is also the host
        beat width and, by default, the vector and update units' lanes).
    imem_depth : int
        Instructions the instruction memory holds.
    overlap : bool
        Let the sequencer overlap instructions on different units.
    vector : str
        One of :data:`VECTOR_KINDS`.
    store_impl, store_style : str or dict
        :class:`~ttrain.rtl.store.BankedStore` ``impl`` / ``style``, for all stores or per
        store name.
    special : bool
        Give the vector unit (not the update unit) a special-function unit
        (``WideVectorUnit(special=True)``): the ISA's ``exp recip rsqrt tanh tanh_grad gelu
        gelu_grad log``. Without it the sequencer rejects a program that uses them with
        ``ERR_OPCODE`` (static pass: no store word changes).
    special_impl : {"amaranth", "verilog"}
        The special unit's ``impl``; ``"verilog"`` needs the modules of
        :data:`ttrain.rtl.special.FP_UNIT_MODULES` in the build
        (``platforms.sim.top.build_top`` adds them).
    max_split : int
        The engine's lane groups (:class:`~ttrain.rtl.engine.ContractionEngine`
        ``max_split``); the sequencer rejects a CONTRACT with a larger ``split`` as
        ``ERR_DIM`` in its check pass.
    fetch_words : int or None
        The engine's operand beats (:class:`~ttrain.rtl.engine.ContractionEngine`
        ``fetch_words``; ``None``: a whole vector per beat).
    bank_skew : bool
        Rows skewed across the banks (:class:`~ttrain.rtl.engine.ContractionEngine`
        ``bank_skew``): every client of the stores (engine, host, vector and update units)
        goes through the engine's arbiter, so one switch moves every word's bank.
    engine_units : {"amaranth", "verilog"}
        The FP32 multipliers, adders and comparators of the engine's lanes and of the vector
        and update units inline (``"amaranth"``) or as instances of one Verilog module each
        (:func:`ttrain.rtl.export.shared_unit`; the build must supply them,
        :func:`ttrain.rtl.export.shared_sources` of :attr:`shared_units`;
        ``platforms.sim.top.build_top`` does). Same hardware; a wide top converts and
        compiles in a fraction of the time. Not for the Amaranth simulator.
    vector_width : int or None
        Lanes of the vector and update units and the beat width of their store ports (power of
        two, at most ``banks``; ``None``: ``banks``). Narrower units cost fewer DSPs and LUTs
        and take ``banks / vector_width`` times the beats per row of an elementwise op; they
        compute the same words.
    special_lanes : int
        Special-function units side by side in the vector unit (power of two, at most its
        lanes; :class:`~ttrain.rtl.vector_wide.WideVectorUnit` ``special_lanes``): special
        ops stream that many elements per cycle. Default 1.
    special_full : int or None
        How many of them have every special function (``None``: all; the others only
        :data:`~ttrain.golden.isa.SPECIAL_EVERY_LANE`, GELU and its gradient, so the other
        functions stream ``special_full`` elements per cycle;
        :class:`~ttrain.rtl.vector_wide.WideVectorUnit` ``special_full``).
    vector_reads : int
        Vectors per read request of the vector unit's store port (1 or 2; the engine's
        ``port_reads`` of port 0, the unit's ``reads``): with 2 a two-source elementwise op
        or UPDATE reads both sources of a beat at once. The update unit keeps 1. Default 1.
    row_ports : bool
        The engine's host and store ports as row clients (default) or as per-lane arbiter
        entries (:class:`~ttrain.rtl.engine.ContractionEngine` ``row_ports``; the same
        cycles, kept to measure the arbiter's cost).
    row_operands : bool
        The engine's unit-stride B, old-C and C vectors as row entries
        (:class:`~ttrain.rtl.engine.ContractionEngine` ``row_operands``; default off).
    route : None, "omega" or "omega-shared"
        How the engine's A, B, old-C and C vectors reach the banks
        (:class:`~ttrain.rtl.engine.ContractionEngine` ``route``): ``None`` (default) one
        arbiter request per lane; ``"omega"`` an Omega port per fetcher and the C writer;
        ``"omega-shared"`` A, B and old C in turns through one Omega read port (the route
        chosen for 256 lanes, docs/wide-engine.md). The host, vector and update units keep
        their arbiter entries.

    Members
    -------
    host_i, host_o : the engine's host port (store beats), served while ``busy`` is low.
    imem_we, imem_addr, imem_data, length, start : instruction load and start (see
        :class:`~ttrain.rtl.sequencer.Sequencer`).
    busy, done, error : ``Out(1)``; error_code : ``Out(4)``; error_pc : ``Out(32)``
    cycles, executed, busy_engine, busy_vector, busy_update : ``Out(32)``
        The sequencer's counters of the last run.
    engine_cycles : ``Out(32)``
        Sum over the last run of the engine's own cycle count per CONTRACT (start to done).
    engine_error : ``Out(1)``
        The engine rejected a descriptor the sequencer had passed (a hardware fault; never
        expected, latched until the next ``start``).
    trace_valid, trace_pc, trace_op, trace_unit
        The sequencer's debug/trace port (one strobe per dynamic instruction, see
        :class:`~ttrain.rtl.sequencer.Sequencer`).
    trace_done : ``Out(3)``
        Per-unit completion strobes (bit 0 engine, 1 vector, 2 update): the end of the
        instruction that unit was running. Debug only: the simulation driver
        (``platforms/sim/top_driver_tb.v``) writes them to the instruction trace; the Vitis
        kernel leaves the trace port unconnected, so synthesis removes it.
    """

    def __init__(self, *, store_sizes, lanes=8, banks=None, slots=None, dim_bits=16,
                 imem_depth=256, overlap=True, vector="wide", store_impl="auto",
                 store_style="auto", special=False, special_impl="amaranth", max_split=1,
                 fetch_words=None, bank_skew=False, engine_units="amaranth", vector_width=None,
                 row_ports=True, row_operands=False, special_lanes=1, route=None,
                 vector_reads=1, special_full=None):
        if not isinstance(special, bool):
            raise TypeError(f"special must be a bool (build the special-function unit), not "
                            f"{special!r}")
        if special_impl not in ("amaranth", "verilog"):
            raise ValueError(f"special_impl must be 'amaranth' or 'verilog', not "
                             f"{special_impl!r}")
        if engine_units not in ("amaranth", "verilog"):
            raise ValueError(f"engine_units must be 'amaranth' or 'verilog', not "
                             f"{engine_units!r}")
        self._special = special
        self._special_impl = special_impl
        if isinstance(special_lanes, bool) or not isinstance(special_lanes, int) \
                or special_lanes < 1 or special_lanes & (special_lanes - 1):
            raise ValueError(f"special_lanes must be a power of two >= 1, not "
                             f"{special_lanes!r}")
        if special_lanes > 1 and not special:
            raise ValueError("special_lanes > 1 needs special=True (the special-function "
                             "unit)")
        self._special_lanes = special_lanes
        if special_full is not None and (isinstance(special_full, bool)
                                         or not isinstance(special_full, int)
                                         or special_full < 1
                                         or special_full & (special_full - 1)
                                         or special_full > special_lanes):
            raise ValueError(f"special_full must be a power of two in 1..special_lanes "
                             f"({special_lanes}), not {special_full!r}")
        self._special_full = special_full
        if isinstance(vector_reads, bool) or vector_reads not in (1, 2):
            raise ValueError(f"vector_reads must be 1 or 2 (vectors per read request of the "
                             f"vector unit's port), not {vector_reads!r}")
        self._vector_reads = vector_reads
        units, self._vector_units = {}, {}
        if engine_units == "verilog":
            import functools

            from .export import shared_unit
            from .fp32 import FP32Add, FP32Compare, FP32Mul
            units = {"mul_unit": shared_unit(FP32Mul), "add_unit": shared_unit(FP32Add)}
            # the vector and update units' lanes use the same modules (and one comparator)
            self._vector_units = {
                "mul": units["mul_unit"], "add": units["add_unit"],
                "cmp": shared_unit(functools.partial(FP32Compare, latency=1),
                                   "ttrain_fp32compare_l1")}
        if not isinstance(store_sizes, dict) or set(store_sizes) != set(STORE_IDS):
            raise ValueError(f"store_sizes must give the words of every store "
                             f"{sorted(STORE_IDS)}, not {store_sizes!r}")
        if vector not in VECTOR_KINDS:
            raise ValueError(f"vector must be one of {VECTOR_KINDS}, not {vector!r}")

        def per_store(value, what):
            if isinstance(value, dict):
                if set(value) != set(STORE_IDS):
                    raise ValueError(f"{what} as a dict must name every store "
                                     f"{sorted(STORE_IDS)}, not {sorted(value)}")
                return value
            return {name: value for name in STORE_IDS}
        impls = per_store(store_impl, "store_impl")
        styles = per_store(store_style, "store_style")
        specs = [StoreSpec(STORE_NAMES[i], store_sizes[STORE_NAMES[i]],
                           style=styles[STORE_NAMES[i]], impl=impls[STORE_NAMES[i]])
                 for i in range(len(STORE_IDS))]
        self._engine = ContractionEngine(lanes=lanes, stores=specs, banks=banks, slots=slots,
                                         dim_bits=dim_bits, ports=2, max_split=max_split,
                                         fetch_words=fetch_words, bank_skew=bank_skew,
                                         port_width=vector_width, row_ports=row_ports,
                                         row_operands=row_operands, route=route,
                                         port_reads=(vector_reads, 1), **units)
        self._sizes = dict(store_sizes)
        self._imem_depth = imem_depth
        self._overlap = bool(overlap)
        self._vector = vector
        self._seq = Sequencer(store_sizes=self._sizes, imem_depth=imem_depth,
                              max_dim=self._engine.max_dim if dim_bits < 16 else None,
                              max_split=max_split,
                              overlap=overlap, special=special,
                              desc_layout=self._engine.desc.payload.shape())
        host_sig = self._engine.signature.members
        seq_sig = self._seq.signature.members
        super().__init__({
            "host_i": host_sig["host_i"], "host_o": host_sig["host_o"],
            **{k: seq_sig[k] for k in ("imem_we", "imem_addr", "imem_data", "length",
                                       "start", "busy", "done", "error", "error_code",
                                       "error_pc", "cycles", "executed", "busy_engine",
                                       "busy_vector", "busy_update", "trace_valid",
                                       "trace_pc", "trace_op", "trace_unit")},
            "engine_cycles": Out(32), "engine_error": Out(1), "trace_done": Out(3),
        })

    engine = property(lambda self: self._engine, doc="The contraction engine (for encoders "
                                                     "and figures; elaborated inside).")
    sequencer = property(lambda self: self._seq, doc="The sequencer.")
    store_sizes = property(lambda self: dict(self._sizes), doc="Words per store.")
    imem_depth = property(lambda self: self._imem_depth, doc="Instruction memory depth.")
    banks = property(lambda self: self._engine.banks, doc="Banks per store = host beat width.")
    vector_width = property(lambda self: self._engine.port_width,
                            doc="Lanes of the vector and update units (= their store ports' "
                                "beat width; at most ``banks``).")

    special = property(lambda self: self._special, doc="The vector unit has the special unit.")

    @property
    def shared_units(self):
        """The :func:`~ttrain.rtl.export.shared_unit` classes the top instantiates (engine
        lanes, fold tree, vector and update units; empty with ``engine_units="amaranth"``):
        a build must supply their modules (:func:`~ttrain.rtl.export.shared_sources`)."""
        units = [self._engine.mul_unit, self._engine.add_unit, *self._vector_units.values()]
        return list(dict.fromkeys(u for u in units if hasattr(u, "unit_class")))

    @property
    def instanced_units(self):
        """Every :func:`~ttrain.rtl.export.shared_unit` class whose module the top instantiates:
        the special unit's FP32 units (``special_impl="verilog"``) and :attr:`shared_units`.
        A one-file export appends their modules (:func:`~ttrain.rtl.export.shared_verilog`);
        a simulation build lists their files."""
        from .special import special_fp_units
        fp = special_fp_units() if self._special and self._special_impl == "verilog" else []
        return list(dict.fromkeys([*fp, *self.shared_units]))

    special_lanes = property(lambda self: self._special_lanes,
                             doc="Special-function units side by side in the vector unit.")
    special_impl = property(lambda self: self._special_impl,
                            doc="The special unit's ``impl`` (``\"amaranth\"`` or "
                                "``\"verilog\"``).")

    vector_reads = property(lambda self: self._vector_reads,
                            doc="Vectors per read request of the vector unit's port (1 or 2).")

    def make_vector_unit(self, kind):
        """A new :class:`~ttrain.rtl.vector_wide.WideVectorUnit` as this top builds its
        ``kind`` (``"vector"`` or ``"update"``: UPDATE only, ``ops="update"``) unit; for
        syntheses of the parts (``platforms/units.py``)."""
        if kind not in ("vector", "update"):
            raise ValueError(f"kind must be 'vector' or 'update', not {kind!r}")
        eng = self._engine
        vec = kind == "vector"
        special = self._special and vec
        return WideVectorUnit(width=eng.port_width, addr_bits=eng.addr_bits,
                              store_bits=eng.port_signature.store_bits, special=special,
                              special_impl=self._special_impl, units=self._vector_units,
                              special_lanes=self._special_lanes if special else 1,
                              special_full=self._special_full if special else None,
                              reads=self._vector_reads if vec else 1,
                              ops="all" if vec else "update")

    def _vector_unit(self, m, name, port):
        unit = self.make_vector_unit(name)
        m.submodules[name] = unit
        connect(m, unit.mem, port)
        return unit

    def elaborate(self, platform):
        m = Module()
        m.submodules.engine = eng = self._engine
        m.submodules.sequencer = seq = self._seq
        vec = self._vector_unit(m, "vector", eng.port0)
        upd = self._vector_unit(m, "update", eng.port1)      # UPDATE only

        # ---- host -------------------------------------------------------------------------
        m.d.comb += [
            eng.host_i.payload.eq(self.host_i.payload),
            eng.host_i.valid.eq(self.host_i.valid & ~seq.busy),
            self.host_i.ready.eq(eng.host_i.ready & ~seq.busy),
        ]
        connect(m, wiring.flipped(self.host_o), eng.host_o)
        for k in ("imem_we", "imem_addr", "imem_data", "length", "start"):
            m.d.comb += getattr(seq, k).eq(getattr(self, k))
        for k in ("busy", "done", "error", "error_code", "error_pc", "cycles", "executed",
                  "busy_engine", "busy_vector", "busy_update", "trace_valid", "trace_pc",
                  "trace_op", "trace_unit"):
            m.d.comb += getattr(self, k).eq(getattr(seq, k))

        # ---- sequencer -> engine: one descriptor layout, one stream ---------------------
        # (held off while a finished run's completion is being reported: one cycle)
        eng_running = Signal()
        m.d.comb += [eng.desc.payload.eq(seq.eng.payload),
                     eng.desc.valid.eq(seq.eng.valid & ~eng_running),
                     seq.eng.ready.eq(eng.desc.ready & ~eng_running)]
        finished = Signal()
        m.d.comb += [finished.eq(eng_running & ~eng.busy), seq.eng_done.eq(finished)]
        with m.If(eng.desc.valid & eng.desc.ready):
            m.d.sync += eng_running.eq(1)
        with m.Elif(finished):
            m.d.sync += [eng_running.eq(0), self.engine_cycles.eq(self.engine_cycles
                                                                  + eng.cycles)]
            with m.If(eng.error):
                m.d.sync += self.engine_error.eq(1)
        with m.If(self.start & ~seq.busy):
            m.d.sync += [self.engine_cycles.eq(0), self.engine_error.eq(0)]

        # ---- sequencer -> vector / update units -------------------------------------------
        connect(m, seq.vec, vec.cmd)
        connect(m, seq.upd, upd.cmd)
        m.d.comb += [seq.vec_done.eq(vec.done), seq.vec_error.eq(vec.error),
                     seq.upd_done.eq(upd.done)]
        m.d.comb += self.trace_done.eq(Cat(finished, vec.done, upd.done))
        return m
