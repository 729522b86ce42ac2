"""Logic depth of the sequencer: every register-to-register path at most 12 logic levels.

The Yosys ``synth_xilinx -family xcup`` estimate (:func:`ttrain.platforms.resources.
synth_component`; LUT, MUXF, CARRY4 one level each) of the smallest sequencer that still has
the full-width address arithmetic: a 2**32-word store (every range compare is full width),
``max_dim`` and ``max_split`` checks, 16 instructions. About 40 s. The other units and the
preset-sized sequencers are measured by ``python -m ttrain.testbench.timing`` (figures in
docs/u50.md, "Logic depth per unit").
"""

from ttrain.testbench.timing import MAX_LEVELS, build_unit
from ttrain.platforms.resources import synth_component


def test_sequencer_paths_fit_the_level_budget(tmp_path):
    res = synth_component(build_unit("sequencer-min"), tmp_path / "sequencer", timeout=600)
    assert res["logic_levels"] <= MAX_LEVELS, (res["logic_levels"], res["critical_path"],
                                               res["critical_nets"])
    assert res["dsp48e2"] == 18              # 9 terms x two 16x16 partial products
