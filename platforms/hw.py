"""The one hardware configuration: (model config, compiled programs, overrides) -> the chip.

Every build, test, generator and report of ttrain turns a preset into hardware through
:func:`hw_config`, and every generated artefact (Verilator build folder, ``ttrain xo`` tree,
FuseSoC target output) records the result beside it as ``hw.json`` (:func:`write_hw_json`).
``ttrain hw --config NAME [--lanes P] [--json]`` prints it.

What the configuration decides
------------------------------
``store_words``
    Words of each store (``param grad act scratch``): the largest need of the programs the
    hardware must run (their compiled memory maps, :attr:`Program.store_sizes`), rounded up to
    whole rows of ``banks`` words, at least ``min_store_words``.
``imem_depth``
    Instructions the instruction memory holds: the smallest power of two >= the longest
    program, at least :data:`MIN_IMEM_DEPTH` (an explicit smaller value is rejected).
``special``
    The vector unit gets the special-function unit when any program uses a special op
    (``exp recip rsqrt tanh tanh_grad gelu gelu_grad log``), or when asked.
``lanes``, ``banks``, ``slots``, ``dim_bits``, ``overlap``, ``clock_mhz``, ``vector_width``
    The engine's MAC lanes, banks per store (default ``lanes``; the vector/update units'
    lanes too unless ``vector_width`` is narrower), the
    output rows interleaved per lane (must exceed the adder latency), the descriptor width,
    whether the sequencer overlaps instructions on different units, and the target clock.
``store_style``
    ``"block"`` (BRAM) or ``"ultra"`` (URAM) per store: the U50 mapping that fits
    (:func:`ttrain.platforms.memory.fit_memory`; the default mapping when it fits). Simulation
    ignores it; Vivado and the resource report use it.

The implementation choices of a build (Amaranth ``Memory`` or the Verilog RAM template per
store, Amaranth or Verilog FP32 units inside the special-function unit) change neither what the
chip computes nor what it holds; they are a *flavor* of :meth:`HwConfig.accelerator_kwargs`
(``"sim"``: fast Verilator builds, ``"synth"``: the self-contained tree Vivado infers RAMs
from), not part of the configuration, so a Verilator build, an ``xo`` tree and a FuseSoC target
of the same preset and overrides record the same ``hw.json``.
"""

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..golden.isa import SPECIAL_OPS, STORE_IDS, Elementwise

__all__ = ["HwConfig", "hw_config", "preset_hw_config", "write_hw_json", "read_hw_json",
           "program_needs_special", "round_store_words", "MIN_IMEM_DEPTH", "DEFAULT_LANES",
           "DEFAULT_SLOTS", "FLAVORS", "HW_JSON", "ROUTES"]

#: Smallest instruction memory a configuration gets.
MIN_IMEM_DEPTH = 64
#: Engine lanes when none are asked for.
DEFAULT_LANES = 8
#: Output rows interleaved per lane when none are asked for (> the FP32 adder's latency).
DEFAULT_SLOTS = 16
#: Build flavors of :meth:`HwConfig.accelerator_kwargs`.
FLAVORS = ("sim", "synth")
#: The engine's operand routes (:attr:`HwConfig.route`).
ROUTES = ("arbiter", "omega", "omega-shared")
#: File name every artefact records its configuration in.
HW_JSON = "hw.json"
#: Stores above this many words use the Verilog RAM template in ``"sim"`` builds (Amaranth
#: writes every word's initial value, which is slow to elaborate; toolchain.md).
_SIM_TEMPLATE_WORDS = 65536
_FORMAT = 1

_STORES = tuple(sorted(STORE_IDS, key=STORE_IDS.get))      # param grad act scratch


def _pos_int(name, value, *, power_of_two=False):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 \
            or (power_of_two and value & (value - 1)):
        kind = "a positive power of two" if power_of_two else "a positive integer"
        raise ValueError(f"{name} must be {kind}, not {value!r}")
    return value


def round_store_words(program_sizes, banks, minimum=None):
    """Return ``{store: words}`` for every store: ``program_sizes`` rounded up to whole rows of
    ``banks`` words, at least two rows (a one-row store would have a zero-width row address)
    and at least ``minimum[store]``."""
    out = {}
    for name in _STORES:
        need = max(int(program_sizes.get(name, 0)), int((minimum or {}).get(name, 0)),
                   2 * banks)
        out[name] = -(-need // banks) * banks
    return out


def program_needs_special(program):
    """Return True if ``program`` (a :class:`~ttrain.golden.isa.Program` or instruction list)
    uses a special-function op."""
    instrs = getattr(program, "instructions", program)
    codes = set(SPECIAL_OPS)
    return any(isinstance(i, Elementwise) and i.op in codes for i in instrs)


@dataclass(frozen=True)
class HwConfig:
    """Everything the hardware needs, from :func:`hw_config`. Immutable; JSON round-trips.

    Attributes
    ----------
    lanes, banks, slots, dim_bits, imem_depth : int
    overlap, special : bool
    clock_mhz : float
    store_words : tuple of (store, words)
        In store-id order; :attr:`stores` is the dict view.
    store_style : tuple of (store, ``"block"`` | ``"ultra"``)
        The U50 mapping; :attr:`styles` is the dict view.
    fits_u50 : bool
        The stores fit the U50's BRAM and URAM with ``store_style``.
    max_split : int
        The engine's lane groups (largest CONTRACT ``split``; 1 = none).
    fetch_words : int
        Words per cycle of the engine's operand fetchers and C writer (beats; 0 = a whole
        vector per beat, the default).
    bank_skew : bool
        Word ``a`` of every store in bank ``(a + a // banks) % banks`` (rows skewed by one
        bank each, :class:`~ttrain.rtl.engine.ContractionEngine` ``bank_skew``); the default
        ``False`` is ``a % banks``. The row is ``a // banks`` either way.
    vector_width : int
        Lanes of the vector and update units (their store ports' beat width; 0 = ``banks``,
        the default). :attr:`vector_lanes` is the resolved value.
    row_operands : bool
        The engine's B, old-C and C vectors of consecutive words go to the arbiter as row
        entries (:class:`~ttrain.rtl.engine.ContractionEngine` ``row_operands``); the default
        ``False``: every operand vector through the fetchers' ports.
    special_lanes : int
        Special-function units side by side in the vector unit (words per cycle into them;
        :class:`~ttrain.rtl.vector_wide.WideVectorUnit` ``special_lanes``; default 1). Only
        with ``special``.
    special_full : int
        How many of the ``special_lanes`` units have every special function (0, the default:
        all); the others hold only :data:`~ttrain.golden.isa.SPECIAL_EVERY_LANE` (GELU and its
        gradient), which stream ``special_lanes`` elements a cycle, the other functions
        ``special_full`` (:class:`~ttrain.rtl.vector_wide.WideVectorUnit` ``special_full``).
    vector_reads : int
        Vectors per read request of the vector unit's store port (1, the default, or 2:
        both sources of an element beat in one request, :class:`~ttrain.rtl.vector_wide.
        WideVectorUnit` ``reads``; the update unit keeps 1).
    route : str
        How the engine's operand and result vectors reach the banks (one of :data:`ROUTES`;
        :class:`~ttrain.rtl.engine.ContractionEngine` ``route``): ``"arbiter"`` (default)
        one arbiter request per lane; ``"omega"`` an Omega port per fetcher and the C
        writer; ``"omega-shared"`` A, B and old C in turns through one Omega read port,
        the route chosen for 256 lanes (docs/wide-engine.md).
    source : str
        Provenance, as canonical JSON text (frozen and hashable): ``config`` (preset name or None) and ``programs`` (name, instructions and
        SHA-256 of the words of each program sized for). Two configurations of the same
        programs and fields are equal however their values were chosen (defaults or
        overrides), so their ``hw.json`` files are too.
    """
    lanes: int
    banks: int
    slots: int
    dim_bits: int
    imem_depth: int
    overlap: bool
    special: bool
    clock_mhz: float
    store_words: tuple
    store_style: tuple
    fits_u50: bool
    source: str = "{}"
    max_split: int = 1
    fetch_words: int = 0
    bank_skew: bool = False
    vector_width: int = 0
    row_operands: bool = False
    special_lanes: int = 1
    route: str = "arbiter"
    vector_reads: int = 1
    special_full: int = 0

    @property
    def vector_lanes(self):
        """Lanes of the vector and update units (``vector_width``, or ``banks`` when 0)."""
        return self.vector_width or self.banks

    @property
    def stores(self):
        """Store name -> words."""
        return dict(self.store_words)

    @property
    def styles(self):
        """Store name -> ``"block"`` or ``"ultra"``."""
        return dict(self.store_style)

    @property
    def total_words(self):
        """Words of all four stores."""
        return sum(w for _, w in self.store_words)

    @property
    def units(self):
        """Units of the chip, in dispatch order."""
        return ("engine", "vector", "update") + (("special",) if self.special else ())

    def cycle_model(self):
        """Return ``cost(ins)``: an instruction's cycles on this chip's unit, issue to done, as
        the compiler's models give them: a CONTRACT by :func:`ttrain.golden.isa.engine_cycles`
        with this build's lanes, slots, banks, skew, beats, row operands and route (the A port
        of ``slots x max_split`` lanes on an Omega route), a vector or update instruction by
        :func:`ttrain.golden.isa.vector_cycles` on :attr:`vector_lanes` lanes and
        ``special_lanes``, with the special-function unit's latencies read off the RTL; control
        instructions 0. Memoised per instruction. The compiler's scheduling pass
        (:func:`ttrain.golden.schedule.interleave`) weighs the program with it. The PRNG ops
        (ZO programs) have no cycle model yet: ValueError."""
        import functools

        from ..golden.isa import Contract, Random, engine_cycles, vector_cycles
        from ..golden.schedule import unit_of
        from ..rtl.special import SpecialFunctionUnit
        unit = SpecialFunctionUnit(latency="per_function")
        unit._MustUse__silence = True              # only asked for its latencies
        lat = dict(unit.latencies)
        machine = {"banks": self.banks, "bank_skew": self.bank_skew,
                   "fetch_words": self.fetch_words or None,
                   "row_operands": self.row_operands}
        if self.route != "arbiter":
            machine.update(route=self.route, omega_lanes=self.slots * self.max_split)

        @functools.lru_cache(maxsize=None)
        def cost(ins):
            if isinstance(ins, Contract):
                return engine_cycles(ins.desc, self.lanes, self.slots, **machine)
            if unit_of(ins) is None:
                return 0
            if isinstance(ins, Random):
                raise ValueError(f"HwConfig.cycle_model: no cycle model of the PRNG op "
                                 f"{ins.op} yet; schedule ZO programs in their compiled order")
            return vector_cycles(ins, self.vector_lanes, self.special_lanes, lat,
                                 self.vector_reads, self.banks, self.bank_skew,
                                 special_full=self.special_full or None)[1]
        return cost

    def accelerator_kwargs(self, flavor="sim"):
        """Return the keyword arguments of :class:`ttrain.rtl.top.Accelerator` (and of
        :class:`ttrain.platforms.kernel.VitisKernel`) for build ``flavor``.

        ``"sim"``: stores above 64 k words are Verilog RAM templates, the rest Amaranth
        memories; the special unit and the engine instantiate separately converted FP32
        modules (faster Verilator builds). ``"synth"``: every store a Verilog RAM template with its
        ``ram_style``; the FP32 units are separately converted modules too (the same hardware:
        a fraction of the conversion time), which the one-file exports append to the top's
        Verilog (:attr:`~ttrain.rtl.top.Accelerator.instanced_units`)."""
        if flavor not in FLAVORS:
            raise ValueError(f"flavor must be one of {FLAVORS}, not {flavor!r}")
        sizes = self.stores
        if flavor == "sim":
            impl = {s: ("verilog" if w > _SIM_TEMPLATE_WORDS else "auto")
                    for s, w in sizes.items()}
            special_impl = "verilog"
        else:
            impl, special_impl = "verilog", "verilog"
        kw = {"store_sizes": sizes, "lanes": self.lanes, "banks": self.banks,
              "slots": self.slots, "dim_bits": self.dim_bits, "imem_depth": self.imem_depth,
              "overlap": self.overlap, "store_impl": impl, "store_style": self.styles,
              "special": self.special}
        if self.max_split > 1:
            kw["max_split"] = self.max_split
        if self.fetch_words:
            kw["fetch_words"] = self.fetch_words
        if self.bank_skew:
            kw["bank_skew"] = True
        if self.vector_width:
            kw["vector_width"] = self.vector_width
        if self.row_operands:
            kw["row_operands"] = True
        if self.special_lanes > 1:
            kw["special_lanes"] = self.special_lanes
        if self.special_full and self.special_full != self.special_lanes:
            kw["special_full"] = self.special_full
        if self.route != "arbiter":
            kw["route"] = self.route
        if self.vector_reads != 1:
            kw["vector_reads"] = self.vector_reads
        if self.special:
            kw["special_impl"] = special_impl
        kw["engine_units"] = "verilog"
        return kw

    def to_dict(self):
        """Return the JSON form (``format``, every field, dicts for the per-store fields)."""
        d = dataclasses.asdict(self)
        d["store_words"] = self.stores
        d["store_style"] = self.styles
        d["source"] = json.loads(self.source)
        d["units"] = list(self.units)
        d["total_words"] = self.total_words
        return {"format": _FORMAT, **d}

    def to_json(self):
        """Return :meth:`to_dict` as indented JSON text (stable key order)."""
        return json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, d):
        """Inverse of :meth:`to_dict` (raises ValueError on a foreign or damaged dict)."""
        if not isinstance(d, dict) or d.get("format") != _FORMAT:
            raise ValueError(f"not a ttrain hw.json of format {_FORMAT}")
        names = {f.name for f in dataclasses.fields(cls)}
        missing = names - set(d) - {"max_split", "fetch_words", "bank_skew",  # older files
                                    "vector_width", "row_operands", "special_lanes",
                                    "route", "vector_reads", "special_full"}
        if missing:
            raise ValueError(f"hw.json lacks {sorted(missing)}")
        kw = {k: d[k] for k in names if k in d}
        kw["store_words"] = tuple((s, int(d["store_words"][s])) for s in _STORES)
        kw["store_style"] = tuple((s, d["store_style"][s]) for s in _STORES)
        kw["source"] = _canonical(d["source"])
        return cls(**kw)

    def digest(self):
        """Return a short SHA-256 of :meth:`to_json` (names builds)."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:12]


def _canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def hw_config(programs, *, config=None, lanes=None, banks=None, slots=None, dim_bits=16,
              imem_depth=None, overlap=True, special=None, clock_mhz=300.0,
              min_store_words=None, store_style=None, max_split=None, fetch_words=None,
              bank_skew=False, vector_width=None, row_operands=False, special_lanes=None,
              vector_reads=None,
              route=None, special_full=None):
    """Return the :class:`HwConfig` that runs every program of ``programs``.

    Parameters
    ----------
    programs : dict
        Name -> compiled program (a :class:`~ttrain.golden.isa.Program` or anything with a
        ``.program`` attribute, e.g. ``CompiledModel`` / ``CompiledLayer``).
    config : str or None
        Preset name, recorded in ``source``.
    lanes, banks, slots, dim_bits, imem_depth : int or None
        Overrides (``None``: :data:`DEFAULT_LANES`, ``lanes``, :data:`DEFAULT_SLOTS`, 16, the
        smallest power of two >= the longest program and >= :data:`MIN_IMEM_DEPTH`).
    overlap : bool
    special : bool or None
        ``None``: exactly when a program needs it; ``False`` with a program that needs it is
        rejected; ``True`` builds it anyway.
    clock_mhz : float
    min_store_words : dict or None
        Lower bounds per store (room for more than the programs).
    store_style : dict or None
        Per-store ``"block"``/``"ultra"`` instead of the U50 fit.
    max_split : int or None
        The engine's lane groups (power of two up to ``lanes``); ``None``: the largest
        CONTRACT ``split`` of the programs (1 when none splits). Smaller than a program's
        split is rejected.
    fetch_words : int or None
        The engine's operand beats (power of two up to ``lanes``); ``None``: a whole vector
        per beat.
    bank_skew : bool
        Rows skewed across the banks (:attr:`HwConfig.bank_skew`).
    vector_width : int or None
        Lanes of the vector and update units (power of two up to ``banks``); ``None``:
        ``banks``.
    row_operands : bool
        Row entries for the engine's unit-stride operand vectors
        (:attr:`HwConfig.row_operands`).
    special_lanes : int or None
        Special-function units side by side (power of two up to the vector unit's lanes;
        ``None``: 1), :attr:`HwConfig.special_lanes`.
    special_full : int or None
        How many of them have every special function (power of two up to ``special_lanes``;
        ``None``: all), :attr:`HwConfig.special_full`.
    vector_reads : int or None
        Vectors per read request of the vector unit's port (1 or 2; ``None``: 1),
        :attr:`HwConfig.vector_reads`.
    route : str or None
        The engine's operand route (:data:`ROUTES`; ``None``: ``"arbiter"``),
        :attr:`HwConfig.route`. The Omega routes need at least 2 banks, whole-vector
        fetches and no row operands.
    """
    from .memory import fit_memory

    if not isinstance(programs, dict) or not programs:
        raise ValueError("programs must be a non-empty dict of name -> compiled program")
    progs = {name: getattr(p, "program", p) for name, p in programs.items()}
    lanes = _pos_int("lanes", DEFAULT_LANES if lanes is None else lanes, power_of_two=True)
    banks = _pos_int("banks", lanes if banks is None else banks, power_of_two=True)
    slots = _pos_int("slots", DEFAULT_SLOTS if slots is None else slots)
    _pos_int("dim_bits", dim_bits)
    if isinstance(clock_mhz, bool) or not isinstance(clock_mhz, (int, float)) \
            or not 0 < clock_mhz < 2000:
        raise ValueError(f"clock_mhz must be a number of MHz in (0, 2000), not {clock_mhz!r}")
    longest = max(len(p.instructions) for p in progs.values())
    fit_depth = max(MIN_IMEM_DEPTH, 1 << (longest - 1).bit_length())
    if imem_depth is None:
        imem_depth = fit_depth
    else:
        _pos_int("imem_depth", imem_depth, power_of_two=True)
        if imem_depth < longest:
            raise ValueError(f"imem_depth {imem_depth} cannot hold the {longest}-instruction "
                             f"program; use at least {1 << (longest - 1).bit_length()}")
    used_split = max([1] + [ins.desc.split for p in progs.values() for ins in p.instructions
                            if getattr(ins, "CLASS", None) == "contract"])
    if max_split is None:
        max_split = used_split
    _pos_int("max_split", max_split, power_of_two=True)
    if max_split > lanes:
        raise ValueError(f"max_split {max_split} is above the {lanes} lanes: lane groups "
                         f"split the lanes, so use at most {lanes}")
    if max_split < used_split:
        raise ValueError(f"max_split {max_split} is below the split {used_split} a program's "
                         f"CONTRACT uses; use at least {used_split}")
    if fetch_words is not None:
        _pos_int("fetch_words", fetch_words, power_of_two=True)
        if fetch_words > lanes:
            raise ValueError(f"fetch_words {fetch_words} is above the {lanes} lanes; use at "
                             f"most {lanes}")
    if vector_width is not None:
        _pos_int("vector_width", vector_width, power_of_two=True)
        if vector_width > banks:
            raise ValueError(f"vector_width {vector_width} is above the {banks} banks: the "
                             f"vector units' beats are at most a row; use at most {banks}")
    if not isinstance(bank_skew, bool):
        raise ValueError(f"bank_skew must be True or False, not {bank_skew!r}")
    if vector_reads is not None and (isinstance(vector_reads, bool)
                                     or vector_reads not in (1, 2)):
        raise ValueError(f"vector_reads must be 1 or 2 (vectors per read request of the "
                         f"vector unit's port), not {vector_reads!r}")
    if special_lanes is not None:
        _pos_int("special_lanes", special_lanes, power_of_two=True)
        if special_lanes > (vector_width or banks):
            raise ValueError(f"special_lanes {special_lanes} is above the vector unit's "
                             f"{vector_width or banks} lanes; use at most "
                             f"{vector_width or banks}")
    if not isinstance(row_operands, bool):
        raise ValueError(f"row_operands must be True or False, not {row_operands!r}")
    if row_operands and banks < 2:
        raise ValueError("row_operands needs at least 2 banks (a row entry rotates a vector "
                         "across the banks); use more banks or drop it")
    route = "arbiter" if route is None else route
    if route not in ROUTES:
        raise ValueError(f"route must be one of {', '.join(ROUTES)}, not {route!r}")
    if route != "arbiter":
        clash = ([f"{banks} bank (it needs at least 2)"] if banks < 2 else []) + (
            [f"fetch_words {fetch_words} (it moves whole vectors)"]
            if fetch_words is not None else []) + (
            ["row_operands (its ports carry whole vectors)"] if row_operands else [])
        if clash:
            raise ValueError(f"route {route!r} cannot have {' or '.join(clash)}; change those "
                             f"or use route 'arbiter'")
    needs_special = any(program_needs_special(p) for p in progs.values())
    if special is None:
        special = needs_special
    elif not isinstance(special, bool):
        raise ValueError(f"special must be True, False or None, not {special!r}")
    elif needs_special and not special:
        raise ValueError("special=False, but a program uses special-function ops "
                         f"({', '.join(sorted(SPECIAL_OPS))}); leave special unset")
    if special_lanes is not None and special_lanes > 1 and not special:
        raise ValueError(f"special_lanes {special_lanes} needs the special-function unit, "
                         f"which no program here uses; drop special_lanes or set special=True")
    if special_full is not None:
        _pos_int("special_full", special_full, power_of_two=True)
        if special_full > (special_lanes or 1):
            raise ValueError(f"special_full {special_full} is above the {special_lanes or 1} "
                             f"special-function unit(s); use at most {special_lanes or 1}")
        if special_full == (special_lanes or 1):
            special_full = None                    # every unit full: the default
    need = {}
    for p in progs.values():
        for store, words in p.store_sizes.items():
            need[store] = max(need.get(store, 0), int(words))
    words = round_store_words(need, banks, min_store_words)
    fit = fit_memory(words, banks)
    if store_style is None:
        styles = (fit["best"] or fit["auto"])["styles"]
        fits = fit["fits"]
    else:
        if set(store_style) != set(_STORES) or \
                not set(store_style.values()) <= {"block", "ultra"}:
            raise ValueError(f"store_style must map every store {list(_STORES)} to 'block' "
                             f"or 'ultra', not {store_style!r}")
        from .memory import fits_u50
        styles, fits = dict(store_style), fits_u50(words, banks, store_style)
    source = {"config": config,
              "programs": [{"name": n, "instructions": len(p.instructions),
                            "sha256": _words_digest(p.words())}
                           for n, p in progs.items()]}
    return HwConfig(lanes=lanes, banks=banks, slots=slots, dim_bits=dim_bits,
                    imem_depth=imem_depth, overlap=bool(overlap), special=special,
                    clock_mhz=float(clock_mhz),
                    store_words=tuple((s, words[s]) for s in _STORES),
                    store_style=tuple((s, styles[s]) for s in _STORES),
                    fits_u50=bool(fits), source=_canonical(source), max_split=int(max_split),
                    fetch_words=int(fetch_words or 0), bank_skew=bank_skew,
                    vector_width=int(vector_width or 0), row_operands=row_operands,
                    special_lanes=int(special_lanes or 1), route=route,
                    vector_reads=int(vector_reads or 1), special_full=int(special_full or 0))


def preset_hw_config(config, **overrides):
    """Return the :class:`HwConfig` of preset ``config``: its whole-model training step as
    the chip runs it (:func:`ttrain.golden.model_compiler.chip_model_config`), with
    ``overrides`` as in :func:`hw_config`."""
    from ..golden.config import get_config, preset_names
    from ..golden.model_compiler import chip_model_config, compile_model
    if config not in preset_names():
        from ..golden.qnn import CNN_PRESETS
        if config in CNN_PRESETS:
            get_config(config)               # an int8 CNN preset: its own hint
        raise ValueError(f"unknown preset {config!r}; choose one of {', '.join(preset_names())}")
    cfg, _ = chip_model_config(get_config(config))
    return hw_config({config: compile_model(cfg)}, config=config, **overrides)


def write_hw_json(hw, folder):
    """Write ``hw`` as ``folder/hw.json`` atomically; return the path."""
    path = Path(folder) / HW_JSON
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{HW_JSON}.{os.getpid()}.tmp")
    tmp.write_text(hw.to_json())
    tmp.replace(path)
    return path


def read_hw_json(path):
    """Read a ``hw.json`` (or the one in folder ``path``) as a :class:`HwConfig`."""
    path = Path(path)
    if path.is_dir():
        path = path / HW_JSON
    try:
        d = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{path} does not exist") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path} is not JSON ({e})") from None
    try:
        return HwConfig.from_dict(d)
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: {e}") from None


def _words_digest(words):
    return hashlib.sha256(",".join(map(str, words)).encode()).hexdigest()[:16]
