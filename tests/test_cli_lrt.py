"""``ttrain train --config digits-mlp``: online low-rank training and its baselines on small
digits-drift streams (accuracies and writes per cell printed and in --json), pre-training with
a checkpoint, the compiled programs on the interpreter (--engine interpreter), ``ttrain plan
--rule lrt``, and bad input named in one line with exit code 2."""

import json

import pytest

from ttrain.main import main

from test_cli_errors import error_line

SMALL = ["--segments", "1", "--segment-len", "120"]
BASE = ["train", "--config", "digits-mlp", "--data", "digits-drift", *SMALL]


def test_lrt_prints_accuracies_and_writes_and_writes_json(tmp_path, capsys):
    out = tmp_path / "lrt.json"
    assert main([*BASE, "--rule", "lrt", "--variant", "unbiased", "--norm", "max",
                 "--eff-batch", "40", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "lrt unbiased/max, rank 4, effective batch 40" in text
    assert "online accuracy" in text and "final accuracy" in text
    assert "writes per weight cell: max" in text and "mean" in text
    assert "cells by number of writes: 0: " in text
    rec = json.loads(out.read_text())
    assert rec["label"] == "lrt unbiased/max" and rec["samples"] == 120
    assert rec["settings"]["batch"] == 40 and rec["settings"]["variant"] == "unbiased"
    assert rec["writes"]["cells"] == 64 * 64 + 10 * 64
    assert sum(rec["writes"]["histogram"]) == rec["writes"]["cells"]
    for layer in rec["layers"]:
        assert layer["readouts"] == 3 and layer["writes"]["max"] <= 3
    assert 0 <= rec["online_acc"] <= 1 and 0 <= rec["final_acc"] <= 1


@pytest.mark.parametrize("extra, label", [
    ([], "sgd batch 1"), (["--rounding", "stochastic"], "sgd stochastic"), (["--accumulate", "--eff-batch", "50"], "sgd accumulator"),
    (["--bias-only"], "bias only")])
def test_baselines_on_the_same_stream(extra, label, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main([*BASE, "--rule", "sgd", *extra, "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert label in text and "online accuracy" in text and "writes per weight cell" in text
    rec = json.loads(out.read_text())
    assert rec["label"] == label
    if label == "bias only":
        assert rec["writes"]["max"] == 0
    if label == "sgd accumulator":
        assert rec["layers"][0]["aux_words"] == 64 * 64


def test_pretrain_checkpoint_then_online_run(tmp_path, capsys):
    d = tmp_path / "pre"
    assert main(["train", "--config", "digits-mlp", "--data", "digits", "--out", str(d)]) == 0
    assert (d / "best.npz").exists() and "fixed-point model" in capsys.readouterr().out
    assert main([*BASE, "--rule", "lrt", "--init", str(d / "best.npz")]) == 0
    assert "from " in capsys.readouterr().out


@pytest.mark.parametrize("argv, needle", [
    (["--rule", "lrt", "--variant", "exact"], "--variant 'exact' is not a low-rank variant"),
    (["--rule", "lrt", "--norm", "l2"], "--norm 'l2' is not a gradient norm"),
    (["--rule", "lrt", "--rank", "0"], "--rank must be at least 1"),
    (["--rule", "lrt", "--accumulate"], "--accumulate applies to --rule sgd"),
    (["--rule", "sgd", "--variant", "biased"], "--variant applies to --rule lrt only"),
    (["--rule", "sgd", "--accumulate", "--bias-only"], "two different baselines"),
    (["--rule", "sgd", "--eff-batch", "10"], "--eff-batch applies to --rule lrt and"),
    (["--rule", "lrt", "--epochs", "3"], "--epochs does not apply to the online runs"),
    (["--rule", "lrt", "--segments", "17"], "--segments must be at most 16"),
    (["--rule", "zo"], "--rule zo trains the int8 CNN preset digits-cnn"),
    (["--rule", "lrt", "--init", "/nonexistent/best.npz"], "does not exist"),
    (["--rule", "sgd", "--rounding", "up"], "--rounding 'up' is not a rounding"),
    (["--rule", "lrt", "--rounding", "stochastic"], "--rounding applies to the 8-bit SGD "
                                                    "baseline at batch 1"),
    (["--rule", "sgd", "--accumulate", "--rounding", "stochastic"], "--rounding applies to"),
    (["--rule", "sgd", "--engine", "interpreter"], "the sgd batch 1 baseline runs on --engine "
                                                   "golden only"),
    (["--rule", "lrt", "--engine", "interpreter", "--lanes", "8"], "--lanes goes with --engine "
                                                                    "rtl"),
])
def test_online_runs_reject_bad_input(argv, needle, capsys):
    error_line(capsys, [*BASE, *argv], needle)


def test_wrong_data_or_config_for_the_rule(tmp_path, capsys):
    error_line(capsys, ["train", "--config", "digits-mlp", "--rule", "lrt", "--data", "digits"],
               "--rule lrt with digits-mlp takes --data digits-drift")
    error_line(capsys, ["train", "--config", "digits-mlp", "--rule", "sgd", "--data",
                        "digits-c"], "takes --data digits-drift (the online stream) or digits")
    error_line(capsys, ["train", "--config", "digits-cnn", "--rule", "lrt", "--data",
                        "digits-drift"], "(digits-mlp, digits-lrt-cnn); use one of them")
    error_line(capsys, ["train", "--config", "digits-cnn", "--data", "digits", "--variant",
                        "biased"], "--variant applies to the online runs")
    error_line(capsys, ["train", "--config", "digits-mlp", "--data", "digits", "--norm", "max"],
               "--norm applies to the online runs")
    error_line(capsys, [*BASE, "--rule", "lrt", "--json", str(tmp_path)], "is a directory")


CONV = ["train", "--config", "digits-lrt-cnn", "--data", "digits-drift", "--segments", "1",
        "--segment-len", "10"]


def test_conv_preset_online_lrt_and_sgd_print_per_layer_pixels_and_the_authors_count(
        tmp_path, capsys):
    out = tmp_path / "cnn.json"
    assert main([*CONV, "--rule", "lrt", "--variant", "biased", "--norm", "max",
                 "--conv-batch", "5", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "effective batch 100 (dense), 5 images (conv)" in text
    assert "conv0 8x9 (16 output pixels)" in text and "pixel-samples skipped" in text
    rec = json.loads(out.read_text())
    assert rec["config"] == "digits-lrt-cnn" and rec["settings"]["conv_batch"] == 5
    assert [L["readouts"] for L in rec["layers"]] == [2, 2, 0, 0]
    assert main([*CONV, "--rule", "sgd", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "as the authors' code counts" in text
    rec = json.loads(out.read_text())
    assert rec["writes_paper_count"]["max"] >= rec["writes"]["max"]


@pytest.mark.parametrize("argv, needle", [
    ([*BASE, "--rule", "lrt", "--conv-batch", "5"], "--conv-batch sets the read-out of "
                                                    "convolutions; digits-mlp has dense layers"),
    ([*CONV, "--rule", "lrt", "--conv-batch", "0"], "--conv-batch must be"),
    ([*CONV, "--rule", "sgd", "--conv-batch", "5"], "--conv-batch applies to --rule lrt and"),
])
def test_conv_preset_rejects_bad_input(argv, needle, capsys):
    error_line(capsys, argv, needle)


def test_compiled_programs_on_the_interpreter_print_the_golden_numbers(tmp_path, capsys):
    """``--engine interpreter``: the same run on the compiled per-sample and read-out programs
    (golden/lrt_compiler.py) gives the golden loop's result word for word."""
    argv = ["train", "--config", "digits-mlp", "--data", "digits-drift", "--segments", "1",
            "--segment-len", "24", "--rule", "lrt", "--variant", "unbiased", "--norm", "max",
            "--eff-batch", "8", "--lr", "0.01"]
    recs = []
    for engine in ("golden", "interpreter"):
        out = tmp_path / f"{engine}.json"
        assert main([*argv, "--engine", engine, "--json", str(out)]) == 0
        text = capsys.readouterr().out
        assert ("golden/lrt_compiler.py" in text) == (engine == "interpreter")
        rec = json.loads(out.read_text())
        rec.pop("cpu_s")
        recs.append(rec)
    assert recs[0] == recs[1]
    assert sum(L["weight_writes"] for L in recs[0]["layers"]) > 0


def test_conv_preset_on_the_compiled_programs_prints_the_golden_numbers(tmp_path, capsys):
    """``--engine interpreter`` with digits-lrt-cnn: the compiled programs (pixel LOOPs, the
    conv read-out every --conv-batch images) give the golden loop's record."""
    argv = [*CONV[:-1], "2", "--rule", "lrt", "--conv-batch", "2"]
    recs = []
    for engine in ("golden", "interpreter"):
        out = tmp_path / f"{engine}.json"
        assert main([*argv, "--engine", engine, "--json", str(out)]) == 0
        rec = json.loads(out.read_text())
        rec.pop("cpu_s")
        recs.append(rec)
    assert "golden/lrt_compiler.py" in capsys.readouterr().out
    assert recs[0] == recs[1] and [L["readouts"] for L in recs[0]["layers"]] == [1, 1, 0, 0]


def test_plan_lrt_conv_preset_reports_every_layer_against_the_bound(capsys):
    assert main(["plan", "--config", "digits-lrt-cnn", "--rule", "lrt", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert set(rep["instructions"]) == {"sample", "readout_conv", "readout"}
    assert [L["shape"] for L in rep["layers"]] == [[8, 9], [16, 72], [32, 256], [10, 32]]
    for L in rep["layers"]:
        assert 2 * L["bases_words"] >= L["bound_16bit_words"]
        assert L["aux_bytes_as_compiled"] < L["sgd_accumulator_bytes"]


def test_plan_lrt_json_reports_weights_and_auxiliary_memory_against_the_bound(capsys):
    """``ttrain plan --rule lrt``: the compiled programs' memory map by class; each layer's
    accumulator against the r (n_i + n_o) 16-bit-word bound (as compiled: two 16-bit entries
    per word, so the bound's bases plus the FP32 scalars) and the accumulator baseline."""
    assert main(["plan", "--config", "digits-mlp", "--rule", "lrt", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["rank"] == 4 and rep["words"]["weights"] == 64 * 64 + 10 * 64
    assert rep["words"]["bases"] == (4 * (64 + 64) + 4 * (64 + 10)) // 2
    for L, (n_o, n_i) in zip(rep["layers"], ((64, 64), (10, 64))):
        # 16-bit entries two to a word: the bases take exactly the paper's bound in bytes
        assert L["bound_16bit_words"] == 4 * (n_i + n_o) == 2 * L["bases_words"]
        assert 4 * L["bases_words"] == L["bound_bytes"]
        assert L["aux_bytes_as_compiled"] == 4 * (L["bases_words"] + L["scalar_words"])
        assert L["aux_bytes_as_compiled"] < L["sgd_accumulator_bytes"]
    assert rep["total_bytes"] == 4 * sum(rep["store_words"].values())
    assert rep["words"]["scratch_peak"] < rep["words"]["weights"]     # no weight-sized G
    assert main(["plan", "--config", "digits-mlp", "--rule", "lrt", "--rank", "2",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["words"]["bases"] == 128 + 74   # rank 2: 1 word a row


@pytest.mark.parametrize("argv, needle", [
    (["plan", "--config", "digits-cnn", "--rule", "lrt"], "--rule lrt plans the compiled "
                                                          "programs of the fixed-point LRT"),
    (["plan", "--config", "digits-mlp", "--rule", "lrt", "--rank", "0"], "--rank must be at "
                                                                         "least 1"),
    (["plan", "--config", "paper-l1", "--rank", "2"], "--rank does not apply to --rule sgd"),
    (["plan", "--config", "digits-mlp", "--rule", "lrt", "--batch", "3"], "--batch does not "
                                                                          "apply to --rule lrt"),
    (["plan", "--config", "digits-mlp", "--rule", "lrt", "--sparse-layers", "1"],
     "--sparse-layers does not apply to --rule lrt"),
    (["plan", "--config", "digits-cnn", "--rule", "zo", "--order", "best"], "--order does not "
                                                                            "apply to --rule zo"),
    (["plan", "--config", "digits-cnn", "--rule", "zo", "--recompute", "none"],
     "--recompute does not apply to --rule zo"),
    (["plan", "--config", "paper-l1", "--sparse-layers", "1"], "--sparse-layers does not apply "
                                                               "to --rule sgd"),
    (["bench", "step", "--config", "digits-cnn", "--rule", "lrt"], "--rule lrt benchmarks the "
                                                                   "compiled programs of the "
                                                                   "fixed-point LRT presets"),
    (["bench", "step", "--rule", "lrt", "--queries", "3"], "--queries does not apply to --rule "
                                                           "lrt"),
    (["bench", "step", "--rule", "zo", "--variant", "biased"], "--variant applies to --rule "
                                                               "lrt only"),
    (["bench", "step", "--rule", "lrt", "--steps", "0"], "samples must be an int in 1..20"),
])
def test_bad_lrt_plan_and_bench_arguments_are_named(argv, needle, capsys):
    error_line(capsys, argv, needle)
