"""Logic depth of the sequencer: every register-to-register path at most 12 logic levels.

The Yosys ``synth_xilinx -family xcup`` estimate (:func:`ttrain.platforms.resources.
synth_component`; LUT, MUXF, CARRY4 one level each) of the smallest sequencer that still has
the full-width address arithmetic: a 2**32-word store (every range compare is full width),
``max_dim`` and ``max_split`` checks, 16 instructions. About 40 s. The other units and the
preset-sized sequencers are measured by ``python -m ttrain.testbench.timing`` (figures in
docs/u50.md, "Logic depth per unit").
"""

import pytest

from ttrain.platforms.units import MAX_LEVELS, build_unit
from ttrain.platforms.resources import synth_component


def test_sequencer_paths_fit_the_level_budget(tmp_path):
    res = synth_component(build_unit("sequencer-min"), tmp_path / "sequencer", timeout=600)
    assert res["logic_levels"] <= MAX_LEVELS, (res["logic_levels"], res["critical_path"],
                                               res["critical_nets"])
    assert res["dsp48e2"] == 18              # 9 terms x two 16x16 partial products


def test_black_boxes_are_counted_not_synthesized(tmp_path):
    """``synth_component(blackbox=, libs=)``: a submodule left a black box and a module of
    ``libs`` are counted by instance, not synthesized (how ``engine-core-256`` leaves its
    Omega ports and FP32 units to their own runs)."""
    from amaranth.hdl import Instance, Module, Signal
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out

    class Inner(wiring.Component):
        a: In(8)
        y: Out(16)

        def elaborate(self, platform):
            m = Module()
            m.d.sync += self.y.eq(self.a * self.a)
            return m

    class Outer(wiring.Component):
        a: In(8)
        y: Out(16)
        z: Out(8)

        def elaborate(self, platform):
            m = Module()
            m.submodules.inner = inner = Inner()
            ext = Signal(8)
            m.submodules.ext = Instance("ext_unit", i_a=self.a, o_y=ext)
            m.d.comb += [inner.a.eq(self.a), self.y.eq(inner.y)]
            m.d.sync += self.z.eq(ext + 1)
            return m

    lib = "module ext_unit(input [7:0] a, output [7:0] y);\n  assign y = a;\nendmodule\n"
    res = synth_component(Outer(), tmp_path / "outer", timeout=600, blackbox=("inner",),
                          libs=(lib,))
    assert res["cells"].get("top.inner") == 1 and res["cells"].get("ext_unit") == 1
    assert res["dsp48e2"] == 0                      # the black box's multiplier is not here
    assert res["ff"] == 8                           # z


def _unit(name, lut, ff, dsp, levels, cells=None):
    """A fake :func:`ttrain.platforms.units.measure` result (RAMs counted from ``cells``)."""
    return {"unit": name, "lut": lut, "ff": ff, "dsp48e2": dsp, "carry": 0,
            "logic_levels": levels, "critical_path": [f"path{levels}"],
            "critical_nets": [], "deep": [], "seconds": 1.0,
            **({"cells": cells} if cells else {})}


def test_composed_unit_fits_its_core_and_adds_its_parts_per_instance():
    from ttrain.platforms.units import COMPOSED, compose
    unit = _unit
    spec = COMPOSED["engine-256"]
    measured = {}
    for P, name in spec["core"].items():           # a core exactly 500 + 10 P (its terms)
        cells = {"top.unit.fr_omega": 1, "top.unit.wc_omega": 1, "ttrain_fp32mul": P,
                 "ttrain_fp32add": 31 * P // 16}
        lut = 500 + 10 * P
        measured[name] = unit(name, lut, 2 * lut, P, 11, cells)
    measured.update({"omega-shared-256": unit("omega-shared-256", 150, 70, 0, 10),
                     "omega-write-256": unit("omega-write-256", 140, 60, 0, 10),
                     "fp32-mul": unit("fp32-mul", 5, 3, 2, 10),
                     "fp32-add": unit("fp32-add", 4, 2, 0, 13)})
    r = compose("engine-256", measured)
    core = 500 + 10 * 256
    assert r["lut"] == core + 150 + 140 + 256 * 5 + 496 * 4
    assert r["ff"] == 2 * core + 70 + 60 + 256 * 3 + 496 * 2
    assert r["dsp48e2"] == 256 + 256 * 2
    assert (r["logic_levels"], r["deepest_part"]) == (13, "fp32-add")
    assert {u: n for u, n in r["parts"].items() if u != "core"} == {
        "omega-shared-256": 1, "omega-write-256": 1, "fp32-mul": 256, "fp32-add": 496}
    assert r["estimate"] and all(abs(v) < 1e-6 for v in r["fit_residuals"]["lut"])
    for name in spec["core"].values():              # a part the cores do not instantiate
        measured[name]["cells"].pop("ttrain_fp32add")
    with pytest.raises(ValueError, match="ttrain_fp32add"):
        compose("engine-256", measured)


def test_the_machine_is_its_parts_summed_with_their_counts():
    """``machine-256`` = engine-256 + the 64-lane vector unit + the 64-lane update unit
    (UPDATE only) + 16 special-function units (4 whole, 12 with GELU and its gradient only)
    + the sequencer; a part's RAMs count (the sequencer's instruction memory); the deepest
    part names the path."""
    from ttrain.platforms.units import COMPOSED, WIDE_SPECIAL_FULL, WIDE_SPECIAL_LANES, compose
    spec = COMPOSED["machine-256"]
    assert (WIDE_SPECIAL_LANES, WIDE_SPECIAL_FULL) == (16, 4)
    assert spec["sum"] == {"engine-256": 1, "vector-64": 1, "update-64": 1, "special": 4,
                           "special-gelu": 12, "sequencer-l1": 1}
    measured = {u: _unit(u, 1000 * (i + 1), 10 * (i + 1), i, 10 + i,
                         cells={"RAMB36E2": 2} if u == "sequencer-l1" else None)
                for i, u in enumerate(spec["sum"])}
    measured["engine-256"]["estimate"] = True
    r = compose("machine-256", measured)
    assert r["lut"] == 1000 + 2000 + 3000 + 4 * 4000 + 12 * 5000 + 6000
    assert r["dsp48e2"] == 0 + 1 + 2 + 4 * 3 + 12 * 4 + 5 and r["ramb36"] == 2
    assert r["by_part"]["special-gelu"]["lut"] == 12 * 5000 and r["parts"]["update-64"] == 1
    assert (r["logic_levels"], r["deepest_part"]) == (15, "sequencer-l1") and r["estimate"]
