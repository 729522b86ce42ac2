"""FP32 units under Verilator, hundreds of thousands of pairs, bit for bit against golden.

The streaming run (``testbench/fp32_stream_tb.v`` + cocotb ``testbench/tb_fp32.py``), the
operand sets and the sweep are library code in :mod:`ttrain.testbench.bench_fp32` (also behind
``ttrain bench fp32`` and ``python -m ttrain.testbench.bench_fp32``); this module tests them.
"""

import sys
from pathlib import Path

import pytest

from test_fp32_sim import assert_bits_equal

from ttrain.testbench.bench_fp32 import (OUT_WIDTH, UNITS, WRAPPER, build_unit, make_unit,
                                         random_pairs, stream_unit, sweep_pairs,
                                         write_operands)
from ttrain.platforms.sim.verilator import (LintError, SimulationError, build_verilator,
                                            component_ports, lint_verilator, run_cocotb,
                                            toolchain_env)
from ttrain.testbench import TESTBENCH_DIR

#: Pairs per unit in ``make test``, and how many of them come with random idle cycles.
TEST_PAIRS = 200_000
GAP_BEATS = 5_000


# -- pytest ----------------------------------------------------------------------------------

@pytest.mark.parametrize("unit", UNITS)
def test_stream_matches_golden(unit, tmp_path):
    # The first GAP_BEATS beats come with random idle cycles (the wrapper checks o.valid
    # against i.valid delayed by the latency on every cycle), the rest back to back.
    a, b = sweep_pairs(unit, TEST_PAIRS, seed=100 + UNITS.index(unit))
    got = stream_unit(unit, a, b, work_dir=tmp_path, gaps=GAP_BEATS)
    assert_bits_equal(unit, got, a, b)


def test_wrong_latency_is_reported(tmp_path):
    # The wrapper checks o.valid against i.valid delayed by the declared latency; a wrong
    # declaration must fail the cocotb test and surface as SimulationError.
    a, b = random_pairs(500, seed=3)
    with pytest.raises(SimulationError, match="1 of 1 cocotb tests failed"):
        stream_unit("mul", a, b, work_dir=tmp_path, latency=5, gaps=500)
    assert "valid disagreed" in (tmp_path / "sim.log").read_text()


def test_hung_simulation_times_out(tmp_path):
    # `never_finishes` keeps the simulator busy for ~10^8 cycles, like a hung design; the
    # wall-clock watchdog must stop it and report it.
    operands = tmp_path / "operands.hex"
    write_operands(operands, *random_pairs(4, seed=5))
    with pytest.raises(SimulationError, match="still running after 2 s and was terminated"):
        run_cocotb(build_unit("compare"), "tb_fp32", testcase="never_finishes",
                   test_dir=tmp_path, module_dirs=[TESTBENCH_DIR], timeout=2,
                   plusargs=[f"+OPERANDS={operands}", f"+RESULTS={tmp_path / 'results.hex'}",
                             "+PAIRS=4", "+LATENCY=1"])


@pytest.mark.parametrize("unit", UNITS)
def test_lint_wall(unit):
    assert lint_verilator(make_unit(unit), name=f"fp32_{unit}", flags=("-Wall",)) == ""


def test_lint_wall_compare_combinational():
    assert lint_verilator(make_unit("compare", latency=0), name="fp32_compare_comb") == ""


def test_lint_wall_stream_wrapper():
    # Hand-written Verilog has no waivers at all.
    assert lint_verilator(make_unit("compare"), name="fp32_compare", extra_sources=[WRAPPER],
                          top="fp32_stream_tb", defines={"DUT": "fp32_compare"},
                          parameters={"OUT_W": OUT_WIDTH["compare"]}) == ""


def test_lint_reports_unwaived_warnings(tmp_path):
    # Hand-written Verilog gets no waivers: an unused input must be reported.
    bad = tmp_path / "unused_input.v"
    bad.write_text("module unused_input(input wire a, input wire b, output wire y);\n"
                   "  assign y = a;\nendmodule\n")
    with pytest.raises(LintError, match="UNUSEDSIGNAL"):
        lint_verilator(None, name="unused_input", extra_sources=[bad])


def test_build_is_reused():
    first = build_unit("add")
    again = build_unit("add")
    assert again.reused and again.build_dir == first.build_dir
    assert (first.build_dir / "amaranth" / "fp32_add.v").is_file()


def test_conversion_cache_is_keyed_by_the_arguments_and_the_sources(tmp_path, monkeypatch):
    """``build_verilator(convert_key=...)``: the same name, key and package sources reuse the
    stored Verilog (no conversion); another key or another source digest converts again; a
    key that is not JSON is rejected by name."""
    from ttrain.platforms.sim import verilator as V
    calls = []
    real = V.convert_component

    def counted(component, name):
        calls.append(name)
        return real(component, name)
    monkeypatch.setattr(V, "convert_component", counted)
    text = V._cached_conversion(make_unit("add"), "fp32_add", {"unit": "add"}, tmp_path)
    assert calls == ["fp32_add"] and "module fp32_add" in text
    assert V._cached_conversion(make_unit("add"), "fp32_add", {"unit": "add"}, tmp_path) == text
    assert calls == ["fp32_add"]                              # read, not converted
    V._cached_conversion(make_unit("add"), "fp32_add", {"unit": "add", "x": 1}, tmp_path)
    assert len(calls) == 2                                    # another key
    monkeypatch.setattr(V, "package_digest", lambda: "another source tree")
    assert V._cached_conversion(make_unit("add"), "fp32_add", {"unit": "add"}, tmp_path) == text
    assert len(calls) == 3                                    # other sources: converted again
    assert len(list((tmp_path / "convert").glob("*.v"))) == 3
    with pytest.raises(ValueError, match="convert_key must be JSON"):
        V._cached_conversion(make_unit("add"), "fp32_add", {"unit": object()}, tmp_path)


def test_build_failure_is_reported(tmp_path):
    broken = tmp_path / "broken.v"
    broken.write_text("module broken(input wire a);\n  assign b = ;\nendmodule\n")
    with pytest.raises(SimulationError, match="Verilator build of 'broken' failed"):
        build_verilator(None, name="broken", extra_sources=[broken], root=tmp_path / "sim")


def test_build_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="Verilog identifier"):
        build_verilator(make_unit("mul"), name="fp32-mul")
    with pytest.raises(ValueError, match="does not exist"):
        build_verilator(None, name="x", extra_sources=[tmp_path / "missing.v"])
    with pytest.raises(ValueError, match="nothing to build"):
        build_verilator(None, name="x")
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    for sub in ("one", "two"):
        (tmp_path / sub / "same.v").write_text("module same; endmodule\n")
    with pytest.raises(ValueError, match="two extra sources are called 'same.v'"):
        build_verilator(None, name="x", extra_sources=[tmp_path / "one" / "same.v",
                                                       tmp_path / "two" / "same.v"])


def test_toolchain_env_applies_and_restores_the_wheel_fixes():
    import os
    import shutil
    before = dict(os.environ)
    with toolchain_env():
        verilator = Path(shutil.which("verilator"))
        assert verilator.parent.name == "bin" and verilator.parent.parent.name == "verilator"
        assert "CFG_CXXFLAGS_PCH_I=-include" in os.environ["MAKEFLAGS"]
        assert Path(shutil.which("python")).parent == Path(sys.executable).parent
    assert dict(os.environ) == before


def test_component_ports_skip_constants():
    ports = component_ports(make_unit("mul"))
    assert sorted(ports) == ["i__payload", "i__valid", "o__payload", "o__valid"]
