"""Contraction engine under Verilator: random descriptors and error cases, bit-exact vs golden.

One build (8 lanes, three stores: a Memory-based one, one from the ``ttrain_ram`` Verilog
template and a small scratch) shared by the cocotb tests in ``tests/cocotb/tb_engine.py``.
"""

import json

import pytest

from ttrain.rtl.engine import ContractionEngine, StoreSpec
from ttrain.rtl.store import ram_verilog_path
from ttrain.testbench.verilator import build_verilator, run_cocotb

CONFIG = {
    "lanes": 8,
    "stores": [["f", 2048, "block", "memory"], ["a", 2048, "ultra", "verilog"],
               ["s", 1024, "block", "memory"]],
    "seed": 2026,
    "n_random": 24,
    "max_mn": 40,
    "max_k": 40,
}


def make_engine(cfg):
    return ContractionEngine(lanes=cfg["lanes"], stores=[StoreSpec(*s) for s in cfg["stores"]],
                             **({"slots": cfg["slots"]} if cfg.get("slots") else {}))


@pytest.fixture(scope="module")
def engine_build():
    return build_verilator(make_engine(CONFIG), name="ttrain_engine_l8",
                           extra_sources=[ram_verilog_path()])


def test_engine_verilator_random_and_errors(engine_build, tmp_path):
    run_cocotb(engine_build, "tb_engine", test_dir=tmp_path,
               extra_env={"ENGINE_CONFIG": json.dumps(CONFIG)})
