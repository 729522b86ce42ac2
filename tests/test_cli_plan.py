"""``ttrain plan`` through ``ttrain.main.main``."""

import contextlib
import io
import json

import pytest

from ttrain.golden.config import get_config, preset_names
from ttrain.main import main

PAPER = ("paper-l1", "paper-l2", "paper-l3", "paper-l1-r10", "paper-l2-r10", "paper-l3-r10")
ORDERS = ("bidirectional", "left_to_right", "dp_best")


@pytest.fixture(scope="module")
def reports():
    """JSON reports of the paper presets (run once, the CLI is deterministic)."""
    out = {}
    for name in PAPER:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert main(["plan", "--config", name, "--json"]) == 0
        out[name] = json.loads(buf.getvalue())
    return out


@pytest.mark.parametrize("name", PAPER)
def test_json_keys_and_consistency(reports, name):
    rep = reports[name]
    cfg = get_config(name)
    assert rep["config"] == name
    assert rep["tokens"] == cfg.batch * cfg.seq_len
    on = rep["onchip_bytes"]
    assert set(on) == {"parameters", "gradients", "activations", "scratch", "total"}
    assert on["total"] == on["parameters"] + on["gradients"] + on["activations"] + on["scratch"]
    assert on["gradients"] == on["parameters"]          # gradient store mirrors the factors
    assert rep["memory_ratio"] == pytest.approx(rep["dense_training_bytes"] / on["total"])
    assert rep["dense_training_bytes"] == rep["dense_bytes"]["total"]
    for o in ORDERS + ("dense", "best"):
        assert rep["macs"][o] > 0
    assert rep["macs"]["dp_best"] <= min(rep["macs"][o] for o in ORDERS)
    assert len(rep["layers"]) == len(cfg.tt_layers())
    for lay, (lname, spec) in zip(rep["layers"], cfg.tt_layers()):
        assert lay["name"] == lname
        assert lay["shape"] == [spec.n_in, spec.n_out]
        assert lay["ranks"] == list(spec.ranks)
        assert set(lay["macs"]) == set(ORDERS) | {"dense"}
        assert lay["macs"]["dense"] == 3 * lay["tokens"] * spec.n_in * spec.n_out
        assert lay["macs"]["dp_best"] <= min(lay["macs"][o] for o in ORDERS)
        assert set(lay["bytes"]) >= {"parameters", "gradients", "activations", "scratch",
                                     "total"}
    # architecture.md's report shape: entries that add up to the total of the chosen order
    assert rep["order"] == "bidirectional"
    assert rep["total"]["macs"] == sum(e["macs"] for e in rep["entries"])
    assert rep["total"]["macs"] == rep["macs"]["bidirectional"]
    names = {e["name"] for e in rep["entries"]}
    assert {"enc0.q.x_l", "enc0.q.z_r", "enc0.q.merge_left", "enc0.q.dz", "enc0.q.dl",
            "enc0.q.core_grad", "embedding.ttm"} <= names


def test_paper_attention_layer_figures(reports):
    q = reports["paper-l1"]["layers"][0]
    assert q["forward_macs"]["bidirectional"] == 1_643_520
    q10 = reports["paper-l1-r10"]["layers"][0]
    assert q10["forward_macs"]["bidirectional"] == 664_320


def test_ratios_follow_the_model(reports):
    for ranks in ("", "-r10"):
        l1, l2, l3 = (reports[f"paper-l{n}{ranks}"] for n in (1, 2, 3))
        for a, b in ((l1, l2), (l2, l3)):
            assert b["dense_training_bytes"] > a["dense_training_bytes"]
            assert b["onchip_bytes"]["total"] > a["onchip_bytes"]["total"]
            # each extra encoder layer costs dense training more, relative to its on-chip
            # cost, than the average of the model so far (embedding table and heads are
            # small in both), so the ratio grows with depth
            d_dense = b["dense_training_bytes"] - a["dense_training_bytes"]
            d_chip = b["onchip_bytes"]["total"] - a["onchip_bytes"]["total"]
            assert d_dense / d_chip > a["memory_ratio"]
            assert b["memory_ratio"] > a["memory_ratio"]
    for n in (1, 2, 3):
        gpu, r10 = reports[f"paper-l{n}"], reports[f"paper-l{n}-r10"]
        # same dense model; lower TT ranks only shrink the on-chip side
        assert r10["dense_training_bytes"] == gpu["dense_training_bytes"]
        assert r10["onchip_bytes"]["total"] < gpu["onchip_bytes"]["total"]
        assert r10["memory_ratio"] > gpu["memory_ratio"] > 1
        # compressed parameters are a small fraction of the dense ones
        assert gpu["onchip_bytes"]["parameters"] * 10 < gpu["dense_bytes"]["parameters"]


def test_human_output_and_batch(capsys):
    assert main(["plan", "--config", "tiny"]) == 0
    text = capsys.readouterr().out
    for word in ("bidirectional", "left_to_right", "dp_best", "enc0.ffn1", "pooler",
                 "memory ratio", "parameters", "scratch"):
        assert word in text
    assert main(["plan", "--config", "tiny", "--json", "--batch", "3", "--steps",
                 "--order", "dp_best"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["batch"] == 3 and rep["tokens"] == 3 * get_config("tiny").seq_len
    assert rep["total"]["macs"] == rep["macs"]["dp_best"]
    steps = rep["layers"][0]["orders"]["bidirectional"]["steps"]
    assert steps[0]["name"] == "merge_left_2" and steps[0]["macs"] > 0
    assert sum(s["macs"] for s in steps) == rep["layers"][0]["macs"]["bidirectional"]


def test_unknown_config_and_bad_batch(capsys):
    assert main(["plan", "--config", "huge"]) == 2
    err = capsys.readouterr().err
    assert "unknown config 'huge'" in err
    for name in preset_names():
        assert name in err
    assert main(["plan", "--config", "tiny", "--batch", "0"]) == 2
    assert "--batch must be at least 1" in capsys.readouterr().err
