# amaranth: UnusedElaboratable=no
"""Contraction engine under Verilator: random descriptors and error cases, bit-exact vs golden.

Two builds, each with three stores (a Memory-based one, one from the ``ttrain_ram`` Verilog
template and a small scratch): 4 lanes in up to 4 split groups, shared by the cocotb tests in
``testbench/tb_engine.py``, and a wide one (32 lanes, ``WIDE``). The
engine helpers and the paper-layer benchmark (``ttrain bench engine``) are library code in
:mod:`ttrain.testbench.bench_engine`.
"""

import json

import pytest

from ttrain.rtl.store import BankedStore, ram_verilog_path
from ttrain.testbench.bench_engine import build_engine, make_engine, run_step
from ttrain.platforms.sim.verilator import lint_verilator, run_cocotb
from ttrain.testbench import TESTBENCH_DIR

CONFIG = {
    "lanes": 4,
    "max_split": 4,
    "stores": [["f", 2048, "block", "memory"], ["a", 2048, "ultra", "verilog"],
               ["s", 1024, "block", "memory"]],
    "seed": 2026,
    "n_random": 24,
    "max_mn": 40,
    "max_k": 40,
}


@pytest.fixture(scope="module")
def engine_build():
    return build_engine(CONFIG, "ttrain_engine_l4")


def test_engine_verilator_random_and_errors(engine_build, tmp_path):
    run_cocotb(engine_build, "tb_engine", test_dir=tmp_path, module_dirs=[TESTBENCH_DIR],
               testcase=["random_descriptors", "error_descriptors"],
               extra_env={"ENGINE_CONFIG": json.dumps(CONFIG)})


#: A wide engine: 32 lanes in up to 8 lane groups over 16 skewed banks, its operands on the
#: route chosen for 256 lanes (``route="omega-shared"``: A, B and old C in turns through one
#: Omega read port, the C writer through an Omega write port; docs/wide-engine.md), the FP32
#: units as instances of one Verilog module each (``shared_units``). Its build is ~65 s here
#: (the 8-word-beat, row-operand configuration this test ran before took ~150 s; those
#: fetchers stay tested in the Amaranth simulator, tests/test_engine_sim.py).
WIDE = {
    "lanes": 32, "max_split": 8, "banks": 16, "slots": 8, "bank_skew": True,
    "route": "omega-shared", "shared_units": True,
    "stores": [["f", 4096, "block", "memory"], ["a", 2048, "ultra", "verilog"],
               ["s", 2048, "block", "memory"]],
    "seed": 2027,
    "n_random": 16,
    "max_mn": 70,
    "max_k": 48,
}


def test_engine_verilator_wide_random_and_errors(tmp_path):
    """Random descriptors (splits 1-8, FP32 and integer, strides, accumulate, batches) with
    random host stalls on the 32-lane engine (16 skewed banks, the shared Omega read port
    and the Omega write port), every store word against golden after each; illegal
    descriptors change nothing."""
    build = build_engine(WIDE, "ttrain_engine_l32_wide")
    run_cocotb(build, "tb_engine", test_dir=tmp_path, module_dirs=[TESTBENCH_DIR],
               testcase=["random_descriptors", "error_descriptors"],
               extra_env={"ENGINE_CONFIG": json.dumps(WIDE)})


# ---- TT-linear training steps ------------------------------------------------------------

def test_engine_verilator_tt_step_tiny(engine_build, tmp_path):
    """Every contraction of a TT-linear training step (tiny preset's attention layer, B = 8),
    bit-exact, on the shared 4-lane build; cycles never below MACs / lanes."""
    from ttrain.golden.config import get_config
    from ttrain.golden.contract import tt_linear_step

    eng = make_engine(CONFIG)
    _, jobs = tt_linear_step(get_config("tiny").attention, 8,
                             stores={"param": "s", "act": "f", "scratch": "a"})
    jobs = [(n, eng.best_orientation(d)) for n, d in jobs]
    cycles = run_step(engine_build, eng, CONFIG, jobs, tmp_path, eng.store_sizes)
    assert set(cycles) == {n for n, _ in jobs}
    for name, desc in jobs:
        assert eng.ideal_cycles(desc) <= cycles[name], name


def test_engine_and_stores_lint_clean():
    """``verilator --lint-only -Wall`` with the project waivers: both store implementations and
    the engine (with its FP units, stores and FIFOs) are clean."""
    for impl in ("verilog", "memory"):
        lint_verilator(BankedStore(depth=64, banks=2, impl=impl), name=f"store_{impl}",
                       extra_sources=[ram_verilog_path()])
    lint_verilator(make_engine(CONFIG), name="ttrain_engine_l4",
                   extra_sources=[ram_verilog_path()])
