"""``ttrain plan --rule zo`` (the compiled ZO step's memory, dense and sparse, beside an int8 BP
estimate) and the argument checks of ``ttrain bench step --rule zo``."""

import contextlib
import io
import json

import pytest

from ttrain.main import main

from test_cli_errors import error_line


@pytest.fixture(scope="module")
def mcunet_plan():
    """``ttrain plan --config mcunet-s --rule zo --json`` once per worker (it compiles the
    dense, sparse, in-place and NP steps of the MCUNet-scale preset: ~20 s; the two tests
    that read it share it when they run on the same worker)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["plan", "--config", "mcunet-s", "--rule", "zo", "--json"]) == 0
    return json.loads(out.getvalue())


def test_plan_zo_json_reports_the_compiled_steps(mcunet_plan):
    rep = mcunet_plan
    dense, sparse = rep["zo"]["dense"], rep["zo"]["sparse"]
    # packed int8 weights (4 to a word) and int32 biases
    assert rep["params"] / 4 < dense["words"]["trainable"] < rep["params"] / 3
    assert dense["words"]["frozen"] == 0
    assert sparse["layers"] == ["conv12", "fc14"]
    assert sparse["words"]["trainable"] + sparse["words"]["frozen"] == \
        dense["words"]["trainable"]
    # as compiled the int8 weights are packed four to a word (biases one per word); the
    # budgets (the paper's MCU SRAM) are met by the writable bytes; the projection is labelled
    assert dense["bytes"]["trainable"] < 1.1 * rep["params"]
    assert dense["writable_bytes"] <= rep["budgets_bytes"]["dense"]
    assert sparse["writable_bytes"] <= rep["budgets_bytes"]["sparse"]
    assert dense["total_bytes"] > dense["writable_bytes"] + dense["program_bytes"]
    assert "NOT BUILT" in rep["labels"]["packed_int8_projection"]
    assert "estimate" in rep["labels"]["bp_int8_estimate"]
    assert rep["bp_int8_estimate"]["total_bytes"] > dense["total_bytes"]
    assert dense["store_words"]["param"] >= dense["words"]["trainable"]
    # the in-place variant: the same buffers (no gradient copy in either), 2 passes per query
    ip = rep["zo_inplace"]
    assert ip["queries"] == dense["queries"] and ip["forwards_per_query"] == 2
    assert abs(ip["writable_bytes"] - dense["writable_bytes"]) <= 4 * (ip["queries"] + 8)
    assert ip["words"]["trainable"] == dense["words"]["trainable"]


def test_plan_zo_text(capsys):
    assert main(["plan", "--config", "digits-cnn", "--rule", "zo", "--sparse-layers", "1"]) == 0
    text = capsys.readouterr().out
    assert "dense" in text and "sparse" in text and "projection" in text
    assert "node perturbation (zo-np, every layer, 80 queries)" in text


def test_plan_zo_reports_the_node_perturbation_step_or_why_not(capsys, mcunet_plan):
    """digits-cnn: the NP step's memory from its compiled map (the FP32 output gradients of
    the perturbed layers among the ZO buffers); mcunet-s too (its depthwise layers' local
    gradients are CONTRACTs batched over the groups)."""
    assert main(["plan", "--config", "digits-cnn", "--rule", "zo", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    npst = rep["zo_np"]
    assert npst["queries"] == 80 and npst["words"]["zo_buffers"] > 1674
    assert npst["total_bytes"] > rep["zo"]["dense"]["total_bytes"]
    rep = mcunet_plan
    npst = rep["zo_np"]
    assert "not_compiled" not in npst and npst["instructions"] > rep["zo"]["dense"]["instructions"]


@pytest.mark.parametrize("argv, needle", [
    (["plan", "--config", "paper-l1", "--rule", "zo"], "--rule zo plans the int8 CNN presets"),
    (["plan", "--config", "mcunet-s", "--rule", "zo", "--sparse-layers", "0"],
     "--sparse-layers must be in 1..34 for mcunet-s"),
    (["bench", "step", "--config", "paper-l1", "--rule", "zo"],
     "--rule zo benchmarks the int8 CNN presets"),
    (["bench", "step", "--config", "tiny", "--queries", "3"], "--queries applies to --rule zo"),
    (["bench", "step", "--rule", "zo", "--positions", "4"], "--positions applies to the "
                                                            "transformer presets"),
    (["bench", "step", "--rule", "zo", "--batch", "0"], "batch must be an int in 1..4096"),
])
def test_bad_zo_plan_and_bench_arguments_are_named(argv, needle, capsys):
    error_line(capsys, argv, needle)
