"""The simulated chip: the accelerator top under Verilator, driven by the host driver.

:func:`build_top` builds :class:`ttrain.rtl.top.Accelerator` of a hardware configuration under
the Verilog host driver ``top_driver_tb.v`` (this folder), which speaks the one host protocol
(:mod:`ttrain.platforms.protocol`). :class:`TopSession` collects host jobs (store writes, a
program load, runs with the expected store images) and :func:`run_top` plays them on the build
(``tb_top.py`` only clocks it).
:func:`layer_session` prepares consecutive training steps of a compiled layer
(:mod:`ttrain.golden.compiler`), every store's expected words computed by
:func:`ttrain.golden.interpreter.run`.
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...golden.interpreter import run as interpret
from ...golden.isa import STORE_IDS
from ...rtl.export import shared_sources
from ...rtl.store import ram_verilog_path
from ..hw import HwConfig, write_hw_json
from ..protocol import (ANY_PC, CMD_CHECK, CMD_END, CMD_IMEM, CMD_RUN_EXPECT,
                                  CMD_WRITE, RUN_RECORD_WORDS, RUN_TAG, header,
                                  parse_record)
from ...rtl.top import Accelerator
from .verilator import (SIM_DIR, SimulationError, build_root, build_verilator,
                        component_ports, run_cocotb)

__all__ = ["TopSession", "TopBuild", "build_top", "run_top", "play_top", "TopResult",
           "layer_session", "pad_image", "special_fp_sources", "unit_sources", "parse_trace", "UNIT_NAMES",
           "golden_tracer", "interpret_traced"]

#: Units of the trace port's ``trace_unit`` code (``rtl/sequencer.py``).
UNIT_NAMES = ("engine", "vector", "update", "seq")


DRIVER = SIM_DIR / "top_driver_tb.v"
#: Words of the result file of the driver (16 per run, the last 64 for mismatches).
RES_DEPTH = 1024
# Commands and run records: the one host protocol (ttrain.platforms.protocol), with its
# simulation-driver commands CHECK / RUN_EXPECT / IMEM / END.


@dataclass(frozen=True)
class TopBuild:
    """A Verilator build of the accelerator under the host driver."""
    build: object          # VerilatorBuild
    config: dict           # Accelerator keyword arguments
    rom_depth: int         # command words the driver holds
    res_depth: int = 1024  # result words (16 per run + 64 for mismatches)
    hw: object = None      # the HwConfig it was built from


def special_fp_sources():
    """Write the Verilog of the FP32 units an ``impl="verilog"`` special-function unit
    instantiates (:data:`ttrain.rtl.special.FP_UNIT_MODULES`, converted from
    :mod:`ttrain.rtl.fp32` by :func:`ttrain.rtl.export.shared_sources` into an ``amaranth/``
    folder, which the Amaranth waivers cover) and return the paths."""
    from ...rtl.special import FP_UNIT_MODULES, special_fp_units
    units = special_fp_units()
    if {u.module for u in units} != set(FP_UNIT_MODULES):
        raise AssertionError(f"FP_UNIT_MODULES changed to {sorted(FP_UNIT_MODULES)}: update "
                             f"special_fp_sources")
    return shared_sources(units, build_root() / "shared" / "amaranth")


def unit_sources(acc):
    """The separately converted FP32 modules an :class:`~ttrain.rtl.top.Accelerator`
    instantiates (:attr:`~ttrain.rtl.top.Accelerator.instanced_units`: the special unit's and
    the shared units of the engine and the vector/update units), written into an
    ``amaranth/`` folder; a build must list them."""
    from ...rtl.export import shared_sources
    return shared_sources(acc.instanced_units, build_root() / "shared" / "amaranth")


def build_top(hw, name, *, rom_depth=1 << 20, res_depth=RES_DEPTH):
    """Build (or reuse) the accelerator of ``hw`` (a :class:`~ttrain.platforms.hw.HwConfig`,
    ``"sim"`` flavor; Verilog module ``name``) under the host driver ``top_driver_tb.v``, whose
    command memory holds ``rom_depth`` words and whose result memory ``res_depth`` words
    (``(res_depth - 64) // 16`` runs per session). The build gets the FP32 unit modules the
    special unit and the engine instantiate (:func:`unit_sources`). The build folder records
    ``hw`` as ``hw.json``."""
    if not isinstance(hw, HwConfig):
        raise TypeError(f"hw must be a ttrain.platforms.hw.HwConfig (from hw_config), not "
                        f"{type(hw).__name__}")
    for what, depth in (("rom_depth", rom_depth), ("res_depth", res_depth)):
        if depth < 1 or depth & (depth - 1) or (what == "res_depth" and depth < 128):
            raise ValueError(f"{what} must be a power of two (res_depth >= 128), not {depth}")
    config = hw.accelerator_kwargs("sim")
    acc = Accelerator(**config)
    extra = unit_sources(acc) + [DRIVER, ram_verilog_path()]
    widths = {p: len(v) for p, (v, _) in component_ports(acc).items()}
    params = {"NB": acc.banks, "SB": acc.engine.port_signature.store_bits,
              "AB": acc.engine.addr_bits, "IA": widths["imem_addr"], "LW": widths["length"],
              "ROM_DEPTH": rom_depth, "RES_DEPTH": res_depth,
              "CMD_WRITE": CMD_WRITE, "CMD_CHECK": CMD_CHECK, "CMD_RUN_EXPECT": CMD_RUN_EXPECT,
              "CMD_IMEM": CMD_IMEM, "RUN_TAG": RUN_TAG}
    build = build_verilator(acc, name=name, toplevel="top_driver_tb",
                            extra_sources=extra,
                            defines={"DUT": name}, parameters=params, public="top",
                            convert_key={"accelerator": config})
    write_hw_json(hw, build.build_dir)
    return TopBuild(build, config, rom_depth, res_depth, hw)


def pad_image(image, sizes):
    """Return ``image`` with every store zero-padded to ``sizes`` words."""
    out = {}
    for name in STORE_IDS:
        words = np.zeros(sizes[name], dtype=np.uint32)
        src = np.asarray(image.get(name, ()), dtype=np.uint32)
        if src.size > sizes[name]:
            raise ValueError(f"store {name!r} holds {src.size} words; the accelerator's has "
                             f"{sizes[name]}: build it with larger store_sizes")
        words[:src.size] = src
        out[name] = words
    return out


class TopSession:
    """Host jobs for one simulation run (``top_driver_tb.v`` plays them)."""

    def __init__(self):
        self.arrays = {}
        self.jobs = []
        self.length = None
        self.check_spans = []     # (run index, store, addr, first rom word, end), set by rom()

    def _key(self, prefix, words):
        key = f"{prefix}{len(self.arrays)}"
        self.arrays[key] = np.array(words, dtype=np.uint32, copy=True)   # callers reuse buffers
        return key

    def write(self, store, addr, words):
        """Write ``words`` into ``store`` from word ``addr``."""
        if store not in STORE_IDS:
            raise ValueError(f"store must be one of {sorted(STORE_IDS)}, not {store!r}")
        self.jobs.append({"kind": "write", "store": store, "addr": int(addr),
                          "key": self._key("w", words)})

    def write_image(self, image):
        """Write every store of ``image`` whole."""
        for name, words in image.items():
            self.write(name, 0, words)

    def program(self, words):
        """Load a program (flat instruction words)."""
        words = np.asarray(words, dtype=np.uint32)
        if words.size == 0 or words.size % 16:
            raise ValueError(f"a program is a positive multiple of 16 words, got {words.size}")
        self.jobs.append({"kind": "program", "key": self._key("p", words)})
        self.length = words.size // 16

    def rom(self):
        """Return the driver's command words (uint32 array), ``END`` included."""
        out = []
        pos = 0
        runs = 0
        spans = []

        def size(x):
            return np.asarray(x).size if not np.isscalar(x) else 1
        for job in self.jobs:
            before = len(out)
            if job["kind"] == "write":
                words = self.arrays[job["key"]]
                out += header(CMD_WRITE, STORE_IDS[job["store"]], job["addr"], len(words))
                out.append(words)
            elif job["kind"] == "program":
                words = self.arrays[job["key"]]
                out += header(CMD_IMEM, count=len(words))
                out.append(words)
            else:
                out += header(CMD_RUN_EXPECT, count=job["length"])
                out += [job["error"], job["code"], ANY_PC if job["pc"] is None else job["pc"],
                        job["max_cycles"]]
                pos += sum(size(x) for x in out[before:])
                for store, addr, key in job["check"]:
                    words = self.arrays[key]
                    out += header(CMD_CHECK, STORE_IDS[store], addr, len(words))
                    out.append(words)
                    pos += 4
                    spans.append((runs, store, addr, pos, pos + len(words)))
                    pos += len(words)
                runs += 1
                continue
            pos += sum(size(x) for x in out[before:])
        self.check_spans = spans
        out += header(CMD_END)
        return np.concatenate([np.atleast_1d(np.asarray(x, dtype=np.uint32)) for x in out])

    def rom_depth(self, minimum=1 << 20):
        """The command memory a build needs for this session: the smallest power of two
        holding :meth:`rom`'s words, at least ``minimum``."""
        return max(minimum, 1 << (self.rom().size - 1).bit_length())

    def run(self, name, *, expect=None, expect_at=(), error=0, code=0, pc=None,
            max_cycles=50_000_000, golden=None):
        """Start the loaded program; after it, compare every store of ``expect`` whole and
        every ``(store, addr, words)`` of ``expect_at``.

        The run fails if the accelerator is still busy after ``max_cycles``. ``golden``: the
        golden interpreter's ``(pc, mnemonic)`` stream of the same run (:func:`golden_tracer`),
        written beside the chip's instruction trace when one is asked for."""
        if self.length is None:
            raise ValueError("load a program before a run")
        check = [(s, 0, self._key("e", w)) for s, w in (expect or {}).items()]
        for store, addr, words in expect_at:
            if store not in STORE_IDS:
                raise ValueError(f"store must be one of {sorted(STORE_IDS)}, not {store!r}")
            check.append((store, int(addr), self._key("e", words)))
        self.jobs.append({"kind": "run", "name": name, "error": int(error), "code": int(code),
                          "pc": pc, "check": check, "max_cycles": int(max_cycles),
                          "length": self.length, "golden": golden})


@dataclass
class TopResult:
    """What :func:`play_top` saw: one dict per run (``rows``), the mismatched words
    (``mismatches``: dicts with ``run``, ``store``, ``addr``, ``got``, ``want``, in the order
    the driver compared them; at most 16 per session) and the problems ``run_top`` raises
    for (``problems``). With an instruction trace, each row has ``trace``: a list of records
    (:func:`parse_trace`)."""
    rows: list
    mismatches: list
    problems: list


def play_top(build, session, *, test_dir, timeout=None, trace=None, debug_corrupt=None):
    """Play ``session`` on a :func:`build_top` build and return a :class:`TopResult` (no
    exception for wrong words: the caller decides).

    ``trace``: also record the instruction trace of every run (the driver's ``+TRACE=``
    file, parsed into ``row["trace"]``); on by default when a trace was asked for through
    :func:`ttrain.platforms.sim.debug.capture`, which also appends it (and the golden
    interpreter's stream given to :meth:`TopSession.run`) to the ``--trace`` files.
    ``debug_corrupt=(pc, store, addr)``: the driver flips bit 0 of that store word after every
    run that dispatched instruction ``pc`` (a planted divergence, for testing the divergence
    finder; the RTL is unchanged, and so is the build).
    """
    from . import debug
    test_dir = Path(test_dir)
    test_dir.mkdir(parents=True, exist_ok=True)
    rom = session.rom()
    if rom.size > build.rom_depth:
        need = 1 << (rom.size - 1).bit_length()
        raise ValueError(f"the session needs {rom.size} command words; the build holds "
                         f"{build.rom_depth}: build_top(..., rom_depth={need})")
    runs = [j for j in session.jobs if j["kind"] == "run"]
    depth = build.res_depth
    if len(runs) > (depth - 64) // RUN_RECORD_WORDS:
        raise ValueError(f"at most {(depth - 64) // RUN_RECORD_WORDS} runs per session with this build "
                         f"(build_top(..., res_depth=...) holds more), got {len(runs)}")
    rom_file, res_file = test_dir / "commands.hex", test_dir / "results.hex"
    np.savetxt(rom_file, rom, fmt="%08x")
    if res_file.exists():
        res_file.unlink()
    plusargs = [f"+ROM={rom_file}", f"+RESULTS={res_file}"]
    sink = debug.trace_file()
    if trace is None:
        trace = sink is not None
    trace_txt = test_dir / "trace.txt"
    if trace:
        plusargs.append(f"+TRACE={trace_txt}")
    if debug_corrupt is not None:
        pc, store, addr = debug_corrupt
        if store not in STORE_IDS:
            raise ValueError(f"debug_corrupt store must be one of {sorted(STORE_IDS)}, not "
                             f"{store!r}")
        plusargs += [f"+CORRUPT_PC={int(pc)}", f"+CORRUPT_STORE={STORE_IDS[store]}",
                     f"+CORRUPT_ADDR={int(addr)}"]
    run_cocotb(build.build, "tb_top", test_dir=test_dir, module_dirs=[SIM_DIR],
               plusargs=plusargs, timeout=timeout)
    res = np.array([int(x, 16) for x in res_file.read_text().split()
                    if not x.startswith("//")], dtype=np.uint64)
    out = []
    problems = []
    for r, job in enumerate(runs):
        row = parse_record(res[RUN_RECORD_WORDS * r:RUN_RECORD_WORDS * (r + 1)])
        row["name"] = job["name"]
        out.append(row)
        if row["timed_out"]:
            problems.append(f"{job['name']}: still busy after {job['max_cycles']} cycles")
            break
        if not row["status_ok"]:
            problems.append(f"{job['name']}: error/code/pc {row['error']}/{row['error_code']}/"
                            f"{row['error_pc']} (expected {job['error']}/{job['code']}/"
                            f"{job['pc']}), engine_error {row['engine_error']}")
    if trace:
        per_run = parse_trace(trace_txt.read_text() if trace_txt.is_file() else "")
        for r, row in enumerate(out):
            row["trace"] = per_run.get(r, [])
        if sink is not None:
            _append_traces(sink, debug.golden_trace_file(), debug.next_session(), runs, out)
    mm = res[depth - 64:].reshape(16, 4)
    names = {v: k for k, v in STORE_IDS.items()}
    mismatches = []
    for m in mm:
        if not (m[0] or m[2] or m[3]):
            continue
        rom_index = int(m[0])
        run = next((sp[0] for sp in session.check_spans if sp[3] <= rom_index < sp[4]), None)
        mismatches.append({"run": run, "store": names[int(m[1]) >> 28],
                           "addr": int(m[1]) & 0xFFFFFFF, "got": int(m[2]), "want": int(m[3])})
    if mismatches:
        problems.append("mismatched words (first 16): " + "; ".join(
            f"{x['store']}[{x['addr']}] got {x['got']:08x} want {x['want']:08x}"
            for x in mismatches))
    return TopResult(out, mismatches, problems)


def run_top(build, session, *, test_dir, timeout=None, trace=None, debug_corrupt=None):
    """Play ``session`` on a :func:`build_top` build; return one dict per run.

    Each dict has the run record's :data:`~ttrain.platforms.protocol.RECORD_FIELDS` and
    ``name`` (and ``trace`` when traced, see :func:`play_top`). Raises
    :class:`SimulationError` when a run's status differs from the expected one, it timed out,
    or any compared word differs (the message lists the first mismatches).
    """
    result = play_top(build, session, test_dir=test_dir, timeout=timeout, trace=trace,
                      debug_corrupt=debug_corrupt)
    if result.problems:
        raise SimulationError(f"accelerator run in {test_dir}: " + " | ".join(result.problems))
    return result.rows


def parse_trace(text):
    """Turn the driver's trace lines (``D``/``C``, see ``top_driver_tb.v``) into one list of
    instruction records per run index: ``{"i", "pc", "opcode", "op", "unit", "start",
    "end"}`` in dispatch order (``start`` is the dispatch cycle, ``end`` the cycle the unit
    signalled completion; both in the sequencer's cycle count of the run; LOOP, ENDLOOP,
    BARRIER and END are the sequencer's own, ``end = start``)."""
    from ...golden.isa import OPS
    mnemonic = {spec.opcode: spec.mnemonic for spec in OPS}
    runs = {}
    open_ = {}
    for line in text.splitlines():
        f = line.split()
        if not f:
            continue
        if f[0] == "D" and len(f) == 6:
            run, cyc, pc, opcode, unit = (int(x) for x in f[1:])
            rec = {"i": len(runs.setdefault(run, [])), "pc": pc, "opcode": opcode,
                   "op": mnemonic.get(opcode, f"0x{opcode:02x}"), "unit": UNIT_NAMES[unit],
                   "start": cyc, "end": cyc if unit == 3 else None}
            runs[run].append(rec)
            if unit != 3:
                open_[(run, unit)] = rec
        elif f[0] == "C" and len(f) == 4:
            run, cyc, mask = (int(x) for x in f[1:])
            for u in range(3):
                if mask >> u & 1 and (run, u) in open_:
                    open_.pop((run, u))["end"] = cyc
    return runs


def golden_tracer():
    """``(callback, stream)``: pass ``callback`` as ``trace=`` to
    :func:`ttrain.golden.interpreter.run`; ``stream`` collects ``(pc, mnemonic)`` of every
    executed instruction (for :meth:`TopSession.run`'s ``golden``)."""
    stream = []
    return (lambda pc, ins, image: stream.append((int(pc), ins.mnemonic))), stream


def interpret_traced(program, image):
    """Run ``program`` on ``image`` in the golden interpreter; return ``(image, stats,
    golden)``, ``golden`` its ``(pc, mnemonic)`` stream for :meth:`TopSession.run` when an
    instruction trace was asked for (``--trace``: :mod:`~ttrain.platforms.sim.debug`), else
    ``None``."""
    from . import debug
    if debug.trace_file() is None:
        return (*interpret(program, image), None)
    tracer, golden = golden_tracer()
    return (*interpret(program, image, trace=tracer), golden)


def _append_traces(sink, golden_sink, session_no, jobs, rows):
    import json
    with open(sink, "a") as f:
        for r, row in enumerate(rows):
            for rec in row.get("trace", []):
                f.write(json.dumps({"session": session_no, "run": r, "name": row["name"],
                                    **rec}) + "\n")
    with open(golden_sink, "a") as f:
        for r, job in enumerate(jobs):
            for i, (pc, op) in enumerate(job.get("golden") or ()):
                f.write(json.dumps({"session": session_no, "run": r, "name": job["name"],
                                    "i": i, "pc": pc, "op": op}) + "\n")


def layer_session(compiled, sizes, *, steps, seed=0, scale=0.5, session=None):
    """Consecutive training steps of a compiled layer, checked after every step.

    Parameters
    ----------
    compiled : golden.compiler.CompiledLayer
    sizes : dict
        The accelerator's store sizes (>= the program's).
    steps : int
        Training steps; each gets a fresh random input and target written into the ``x`` and
        ``target`` regions (the parameters and everything else stay on chip).
    seed : int
    scale : float
        Standard deviation of the random parameters, inputs and targets.
    session : TopSession or None
        Append to this session (a new one if ``None``).

    Returns
    -------
    (TopSession, list of golden.interpreter.Stats)
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive int, not {steps!r}")
    rng = np.random.default_rng(seed)
    mm = compiled.memory_map

    def rand(shape):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    params = [rand(mm[n].shape) for n in compiled.param_names]
    x, t = rand(mm["x"].shape), rand(mm["target"].shape)
    image = pad_image(compiled.initial_image(params, x, t), sizes)
    sess = TopSession() if session is None else session
    sess.write_image(image)
    sess.program(compiled.program.words())
    stats = []
    for s in range(steps):
        if s:
            x, t = rand(mm["x"].shape), rand(mm["target"].shape)
            image = compiled.set_inputs(image, x, t)
            for region in ("x", "target"):
                r = mm[region]
                words = image[r.store]
                rows = r.shape[0] if r.row_stride else 1
                width = r.shape[1] if r.row_stride else r.size
                for i in range(rows):
                    lo = r.base + i * r.row_stride
                    sess.write(r.store, lo, words[lo:lo + width])
        image, st, golden = interpret_traced(compiled.program, image)
        if st.error:
            raise RuntimeError(f"the interpreter stopped step {s} with error {st.error}: "
                               f"{st.message}")
        stats.append(st)
        sess.run(f"step{s}", expect=image, golden=golden)
    return sess, stats
