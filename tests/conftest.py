import os
from pathlib import Path

import pytest

os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")
import ttrain  # noqa: E402,F401  -- pins the float references' OpenBLAS kernels before the
#                  tests import numpy (cli/__init__.py), the one place that rule lives

_REPO = Path(__file__).resolve().parents[1]


def shared_data(name):
    """Return the directory of the shared data set ``name`` (``atis`` or ``snips``).

    The data sets are never part of the repository. They are looked up in ``$TTRAIN_SHARED_DATA``,
    then ``<repository>/../shared/data`` (the layout of the development machines), then
    ``/work/shared/data`` (where CI's clean clones find them on this machine).
    """
    candidates = [Path(p) for p in os.environ.get("TTRAIN_SHARED_DATA", "").split(os.pathsep) if p]
    candidates += [_REPO.parent / "shared" / "data", Path("/work/shared/data")]
    for root in candidates:
        if (root / name / "train.seq.in").is_file():
            return root / name
    raise FileNotFoundError(
        f"data set {name!r} not found in {', '.join(map(str, candidates))}: set "
        f"TTRAIN_SHARED_DATA to the folder holding {name}/")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the marks
def pytest_collection_modifyitems(config, items):
    """Keep the tests that share one expensive module fixture on one pytest-xdist worker
    (``make test`` runs ``--dist loadgroup``): the Vitis kernel test (its fixture runs every
    kernel call in one Verilator simulation, ~110 s), the MCUNet-scale ZO plan (one
    compile, ~20 s), the paper presets' plans (six compiles with their order searches, ~25 s)
    and the engine's 4-lane build (~20 s, two tests). Spread over both workers, each worker
    ran the fixture once (a build: one worker waited for the other's). (The shared
    top's modules in a group of their own gained nothing measurable, docs/verification.md.)

    The items are then sorted into the order the workers should take them (:func:`_run_rank`).

    Grouping needs pytest < 9 (``pyproject.toml``): pytest-xdist 3.8 puts the group into
    ``item._nodeid``, which pytest 9 no longer reads, so the groups silently vanished."""
    groups = {"test_kernel_verilator.py": "kernel", "test_cli_zo_plan.py": "mcunet_plan",
              "test_cli_plan.py": "paper_plans", "test_engine_verilator.py": "engine_builds"}
    for item in items:
        group = groups.get(item.path.name)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=_run_rank)       # stable: collection order within a rank


#: The order ``make test`` hands tests to its two workers (``--no-loadscope-reorder`` keeps
#: it). First the test whose setup builds the shared 4-lane top (tests/shared_top.py, ~75 s),
#: beside it the Vitis kernel's build and run on the other worker, then the engine's builds:
#: the other worker reaches the shared top's tests after its build, instead of waiting ~70 s
#: on its build lock as when both workers came to the CNN tests together. Then the other
#: expensive files (Verilator builds, Amaranth simulations, Yosys, whole-model compiles),
#: the many quick tests last so that the two workers finish together. A wrong rank costs
#: only time.
_FIRST = ("test_cnn_verilator.py::test_zo_steps_bit_exact_on_the_chip[zo_digits-5]",
          "test_kernel_verilator.py", "test_engine_verilator.py")
_EXPENSIVE = ("_verilator.py", "_sim.py", "test_timing.py", "test_vitis.py",
              "test_seeing_inside.py", "test_golden_model_compiler.py", "test_lrt_compiler.py",
              "test_cli_plan.py", "test_cli_zo_plan.py", "test_cli_lrt.py", "test_zo_compiler.py")


def _run_rank(item):
    name = item.nodeid.rsplit("/", 1)[-1]
    for rank, head in enumerate(_FIRST):
        if name == head or name.split("::")[0] == head:
            return rank
    return len(_FIRST) + (not item.path.name.endswith(_EXPENSIVE))
