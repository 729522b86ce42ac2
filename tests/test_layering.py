"""Dependencies point one way (issue 11, docs/architecture-decisions.md "Layering").

Reads every import of the library with :mod:`ast` (relative ones resolved, imports inside
functions included) and checks the rules below; a planted back-import in a copy of a package
must be caught, so the checker itself is tested.

    cli (the ``ttrain`` root: argparse + printing)
      -> platforms.host (host runtime: card driver, on-chip training session, chip stepper)
        -> platforms (hardware configuration, U50, Vitis, FuseSoC, memory fit, resources,
                      sim = the Verilator simulation as a platform)
          -> rtl (components) -> golden (isa, config, special op sequences, numerics)
            golden imports nothing of the others
    testbench (cocotb benches, benchmarks, scoreboards) -> platforms (host included), rtl,
        golden; the library never imports it, with one exception: ``cli/bench_cmd.py`` runs
        the benchmarks, which are testbench code (``ttrain bench`` is the benchmarks' front
        end; moving them into the library would put cocotb benches there).

``platforms.host`` may import the other platforms modules; no other platforms module imports
``platforms.host``. No library module imports ``tests``.
"""

import ast
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Folder -> package name (setuptools package-dir of pyproject.toml).
PACKAGES = {"cli": "ttrain", "golden": "ttrain.golden", "rtl": "ttrain.rtl",
            "platforms": "ttrain.platforms", "testbench": "ttrain.testbench"}
#: Layer of each package, and which other layers it may import.
ALLOWED = {
    "golden": set(),
    "rtl": {"golden"},
    "platforms": {"golden", "rtl"},
    "platforms.host": {"golden", "rtl", "platforms"},
    "testbench": {"golden", "rtl", "platforms", "platforms.host"},
    "cli": {"golden", "rtl", "platforms", "platforms.host"},
}
#: The one library -> testbench edge: ``ttrain bench`` runs the testbench's benchmarks.
CLI_TESTBENCH = {"cli/bench_cmd.py"}
#: The golden modules RTL may use: ISA encodings, configuration, the op sequences it is
#: generated from, the named numerics constants (rounding modes) and the PRNG's constants.
RTL_GOLDEN = {"ttrain.golden.isa", "ttrain.golden.config", "ttrain.golden.special",
              "ttrain.golden.numerics", "ttrain.golden.prng"}


def _layer_of(module):
    """Return the layer ('golden', ..., 'cli') of a ttrain module name, 'tests', or None."""
    parts = module.split(".")
    if parts[0] in ("tests", "test_", "shared_top") or module.startswith("test_"):
        return "tests"
    if parts[0] != "ttrain":
        return None
    if len(parts) > 2 and parts[1] == "platforms" and parts[2] == "host":
        return "platforms.host"
    if len(parts) > 1 and parts[1] in ("golden", "rtl", "platforms", "testbench"):
        return parts[1]
    return "cli"


def _imports(path, package):
    """Yield ``(lineno, absolute module name)`` of every import in ``path``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:                        # ``package`` holds the file: level 1
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod != "ttrain":                   # the root alone says nothing: its names do
                yield node.lineno, mod
            for alias in node.names:              # from ttrain import golden / from . import x
                yield node.lineno, f"{mod}.{alias.name}"


def violations(root):
    """Return the layering violations under ``root`` (a tree with the PACKAGES folders)."""
    found = {}                                    # one message per import statement
    for folder, package in PACKAGES.items():
        for path in sorted((Path(root) / folder).rglob("*.py")):
            rel = path.relative_to(Path(root) / folder)
            layer = "platforms.host" if folder == "platforms" and rel.parts[0] == "host" \
                else folder
            pkg = ".".join([package, *rel.parent.parts]) if rel.parent.parts else package
            for lineno, mod in _imports(path, pkg):
                target = _layer_of(mod)
                where = f"{folder}/{rel}:{lineno}"
                if target == "tests":
                    found.setdefault(where, f"{where}: imports {mod} (the library never "
                                            f"imports tests)")
                elif target is None or target == layer:
                    continue
                elif target == "testbench" and f"{folder}/{rel}" in CLI_TESTBENCH:
                    continue
                elif target not in ALLOWED[layer]:
                    found.setdefault(where, f"{where}: {layer} imports {mod} ({target})")
                elif layer == "rtl" and target == "golden" and mod.count(".") >= 2 \
                        and ".".join(mod.split(".")[:3]) not in RTL_GOLDEN:
                    found.setdefault(where, f"{where}: rtl imports {mod}; rtl may use only "
                                            f"{sorted(RTL_GOLDEN)} of golden")
    return list(found.values())


def test_library_layering_points_one_way():
    assert violations(ROOT) == []


def test_checker_catches_planted_back_imports(tmp_path):
    for folder in PACKAGES:
        shutil.copytree(ROOT / folder, tmp_path / folder,
                        ignore=shutil.ignore_patterns("__pycache__", "*.v", "*.vlt"))
    assert violations(tmp_path) == []
    plants = {
        "golden/planted.py": "from ..rtl import top\n",                  # relative, up
        "rtl/planted.py": "def f():\n    from ttrain.testbench import verilator\n",
        "platforms/planted.py": "from .. import testbench\n",
        "testbench/planted.py": "import ttrain.main\n",
        "rtl/planted2.py": "from ..golden.train import train\n",        # golden, not allowed
        "cli/planted.py": "import test_engine_verilator\n",              # a test file
        "platforms/sim/planted.py": "from ..host import chip\n",          # platform -> host
        "platforms/planted2.py": "from .host.driver import KernelDriver\n",
        "cli/planted2.py": "from .testbench import bench_fp32\n",         # not bench_cmd
        "platforms/host/planted.py": "from ...testbench import kernel\n", # runtime -> tests
    }
    for rel, text in plants.items():
        (tmp_path / rel).write_text(text)
    got = violations(tmp_path)
    assert len(got) == len(plants), got
    for rel in plants:
        assert any(g.startswith(rel) for g in got), (rel, got)
