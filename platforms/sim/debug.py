"""Seeing inside the simulated chip: waveforms and instruction traces on demand.

Two switches, read by :func:`~ttrain.platforms.sim.verilator.build_verilator`,
:func:`~ttrain.platforms.sim.verilator.run_cocotb` and :func:`~ttrain.platforms.sim.top.run_top`,
so every command and test that runs a Verilator build honours them without passing flags down:

* :func:`capture` (what ``--waves FILE.fst`` / ``--trace FILE.jsonl`` of the CLI use) for a
  ``with`` block: waveforms of the first Verilator run go to ``FILE.fst``, of later runs (a
  command may run several simulation sessions) to ``FILE-1.fst``, ``FILE-2.fst``, ...; the
  instruction trace of every accelerator-top run is appended to ``FILE.jsonl`` and the golden
  interpreter's trace of the same runs to ``FILE.golden.jsonl``.
* the environment variable ``TTRAIN_WAVES=DIR`` (for pytest): every Verilator build is a
  waves build and every run dumps ``DIR/<test name>.fst`` (``<test name>-1.fst`` for a second
  run in the same test; the name comes from ``PYTEST_CURRENT_TEST``, else ``run``).

Waves builds are separate cached builds (the flag is part of the build hash), so the normal
builds stay fast; waveforms are FST (Verilator ``--trace-fst``).
"""

import contextlib
import os
import re
from pathlib import Path

__all__ = ["capture", "waves_requested", "next_waves_file", "written_waves", "trace_file",
           "golden_trace_file", "next_session", "compare_traces"]

_state = {"waves": None, "trace": None, "runs": 0, "session": 0, "env_counts": {},
          "written": []}


@contextlib.contextmanager
def capture(*, waves=None, trace=None):
    """Dump waveforms (``waves``: an ``.fst`` path) and/or the instruction trace (``trace``: a
    ``.jsonl`` path) of every simulation run inside the ``with`` block. Existing trace files
    are replaced."""
    saved = dict(_state)
    if waves is not None:
        waves = Path(waves).resolve()
        if waves.suffix != ".fst":
            raise ValueError(f"--waves {waves}: give a file name ending in .fst (FST waveforms)")
        waves.parent.mkdir(parents=True, exist_ok=True)
    if trace is not None:
        trace = Path(trace).resolve()
        trace.parent.mkdir(parents=True, exist_ok=True)
        for path in (trace, golden_trace_file(trace)):
            path.write_text("")
    _state.update(waves=waves, trace=trace, runs=0, session=0, written=[])
    try:
        yield
    finally:
        _state.clear()
        _state.update(saved)


def waves_requested():
    """True if waveforms were asked for (:func:`capture` or ``TTRAIN_WAVES``)."""
    return _state["waves"] is not None or bool(os.environ.get("TTRAIN_WAVES"))


def _test_name():
    current = os.environ.get("PYTEST_CURRENT_TEST", "")
    name = current.split(" ")[0].split("::")[-1] if current else "run"
    name = re.sub(r"@[A-Za-z0-9_]+$", "", name)    # pytest-xdist loadgroup's "@group" suffix
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "run"


def next_waves_file():
    """The FST file of the next Verilator run (None if no waveforms were asked for)."""
    if _state["waves"] is not None:
        n = _state["runs"]
        _state["runs"] += 1
        w = _state["waves"]
        path = w if n == 0 else w.with_name(f"{w.stem}-{n}{w.suffix}")
        _state["written"].append(path)
        return path
    folder = os.environ.get("TTRAIN_WAVES")
    if not folder:
        return None
    folder = Path(folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    name = _test_name()
    n = _state["env_counts"].get(name, 0)
    _state["env_counts"][name] = n + 1
    return folder / (f"{name}.fst" if n == 0 else f"{name}-{n}.fst")


def written_waves():
    """The waveform files of the runs so far inside :func:`capture`."""
    return list(_state["written"])


def trace_file():
    """The JSONL file instruction traces are appended to (None: no trace asked for)."""
    return _state["trace"]


def golden_trace_file(trace=None):
    """The golden interpreter's trace beside ``trace`` (``X.jsonl`` -> ``X.golden.jsonl``)."""
    trace = Path(trace) if trace is not None else _state["trace"]
    if trace is None:
        return None
    stem = trace.name[:-len(".jsonl")] if trace.name.endswith(".jsonl") else trace.name
    return trace.with_name(stem + ".golden.jsonl")


def next_session():
    """Number of the next traced simulation session (0, 1, ...)."""
    n = _state["session"]
    _state["session"] += 1
    return n


def compare_traces(trace, golden=None):
    """Compare the chip's instruction trace (JSONL) with the golden interpreter's beside it:
    return ``(instructions, None)`` when the ``(session, run, pc, op)`` streams are equal, else
    ``(instructions, first differing line index)``."""
    import json
    golden = golden or golden_trace_file(trace)

    def keys(path):
        with open(path) as f:
            return [(r["session"], r["run"], r["pc"], r["op"]) for r in map(json.loads, f)]
    chip, gold = keys(trace), keys(golden)
    if chip == gold:
        return len(chip), None
    first = next((i for i, (a, b) in enumerate(zip(chip, gold)) if a != b),
                 min(len(chip), len(gold)))
    return len(chip), first
