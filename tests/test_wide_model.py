# amaranth: UnusedElaboratable=no
"""The wide-engine design model (testbench/wide_model.py): its ``current`` mapping is the
engine's own analytical model (rtl/engine.py issue_cycles, better orientation), every mapping is
at least the ideal, and the study runs on a compiled step."""

import numpy as np
import pytest

from ttrain.golden.contract import Descriptor, View
from ttrain.rtl.engine import ContractionEngine, StoreSpec
from ttrain.testbench import wide_model


@pytest.mark.parametrize("lanes", [8, 64])
def test_current_mapping_is_the_engines_issue_model(lanes):
    eng = ContractionEngine(lanes=lanes, slots=16, stores=[StoreSpec("s", 1 << 16)])
    rng = np.random.default_rng(lanes)
    v = View("s", 0, 1, 1)
    for _ in range(200):
        m, n, k = (int(x) for x in rng.integers(1, 300, 3))
        b = int(rng.integers(1, 5))
        d = Descriptor(m, n, k, v, v, v, batch=b)
        want = min(eng.issue_cycles(d), eng.issue_cycles(d.transposed()))
        assert wide_model.cycles((m, n, k, b), lanes, "current") == want


def test_no_mapping_beats_the_ideal():
    rng = np.random.default_rng(1)
    for _ in range(300):
        d = tuple(int(x) for x in rng.integers(1, 200, 3)) + (int(rng.integers(1, 40)),)
        macs = d[0] * d[1] * d[2] * d[3]
        for P in (8, 256):
            for mp in wide_model.MAPPINGS + ("best",):
                assert wide_model.cycles(d, P, mp, overlap=True) >= -(-macs // P), (d, P, mp)


def test_study_of_the_tiny_step():
    rep = wide_model.study("tiny", lanes=(8, 256))
    assert rep["contracts"] > 0 and rep["macs"] > 0 and "model" in rep["label"]
    for e in rep["lanes"]:
        u = {k: v["utilization"] for k, v in e["mappings"].items()}
        assert all(0 < x <= 1 for x in u.values())
        assert u["best +overlap"] >= u["best"] >= max(u["split-k"], u["array"], u["batch"]) - 1e-12
