"""``ttrain train`` for the int8 CNN presets: float pre-training (checkpoint out, --init in),
the ZO adaptation table (--json), and bad input named in one line with exit code 2."""

import json

import pytest

from ttrain.main import main

from test_cli_errors import error_line


@pytest.mark.parametrize("argv, needle", [
    (["--rule", "zo", "--data", "digits-c", "--corruption", "fog"],
     "--corruption 'fog' is not a digits-C corruption; choose one of gaussian_noise"),
    (["--rule", "zo", "--data", "digits"], "--rule zo with digits-cnn takes --data digits-c"),
    (["--data", "digits", "--corruption", "contrast"], "--corruption applies to --rule zo only"),
    (["--rule", "zo", "--data", "digits-c", "--runs", "zo-wp,adam"], "unknown run(s) adam"),
    (["--data", "digits", "--engine", "rtl"],
     "--engine does not apply to the CNN preset digits-cnn with --rule sgd"),
    (["--rule", "zo", "--data", "digits-c", "--engine", "interpreter", "--lanes", "4"],
     "--lanes does not apply to the CNN preset digits-cnn with --rule zo"),
    (["--rule", "zo", "--data", "digits-c", "--engine", "rtl", "--lanes", "6"],
     "--lanes must be a power of two >= 4, not 6"),
    (["--rule", "zo", "--data", "digits-c", "--init", "/nonexistent/best.npz"],
     "--init /nonexistent/best.npz does not exist"),
])
def test_cnn_train_rejects_bad_input(argv, needle, capsys):
    error_line(capsys, ["train", "--config", "digits-cnn", *argv], needle)


def test_transformer_presets_reject_the_online_flags(capsys):
    error_line(capsys, ["train", "--config", "tiny", "--variant", "biased"],
               "--variant applies to the online runs of digits-mlp")
    error_line(capsys, ["train", "--config", "tiny", "--bias-only"],
               "--bias-only applies to the online runs of digits-mlp")


def test_transformer_presets_reject_the_cnn_flags(capsys):
    error_line(capsys, ["train", "--config", "tiny", "--rule", "zo"],
               "--rule zo trains the int8 CNN presets")
    error_line(capsys, ["train", "--config", "tiny", "--corruption", "contrast"],
               "--corruption applies to the CNN presets")
    error_line(capsys, ["train", "--config", "tiny", "--zo-schedule", "cosine"],
               "--zo-schedule applies to the CNN presets with --rule zo only")


def test_pretrain_checkpoint_then_zo_table(tmp_path, capsys):
    out = tmp_path / "pre"
    assert main(["train", "--config", "digits-cnn", "--data", "digits", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "int8 model" in text and (out / "best.npz").exists()
    table = tmp_path / "zo.json"
    assert main(["train", "--config", "digits-cnn", "--rule", "zo", "--data", "digits-c",
                 "--corruption", "contrast", "--runs", "bp-int8,zo-np", "--epochs", "1",
                 "--init", str(out / "best.npz"), "--json", str(table)]) == 0
    text = capsys.readouterr().out
    assert "contrast" in text and "from " in text
    rec = json.loads(table.read_text())
    row = rec["per_corruption"]["contrast"]
    assert set(row) == {"bp-int8", "zo-np"}
    for r in row.values():
        assert 0.1 < r["before"] <= 1 and r["after"] >= r["before"]    # best-val epoch >= epoch 0
        assert len(r["history"]) == 2
    assert rec["mean"]["zo-np"]["n"] == 1


def test_mcunet_preset_is_refused_for_training(capsys):
    error_line(capsys, ["train", "--config", "mcunet-s", "--data", "digits"],
               "cannot train on the digits")


def test_transformer_commands_name_the_cnn_presets(capsys):
    error_line(capsys, ["plan", "--config", "mcunet-s"], "is an int8 CNN preset",
               "this command takes a transformer preset")
    error_line(capsys, ["hw", "--config", "digits-cnn"], "is an int8 CNN preset")


def test_zo_on_the_interpreter_equals_the_golden_rule(capsys):
    """``--engine interpreter``: the zo-wp run executes the compiled ZO step on the golden
    interpreter, step after step, and reaches exactly the golden rule's accuracies (same
    parameters after every step; tests/test_zo_compiler.py compares them word for word)."""
    argv = ["train", "--config", "digits-cnn", "--rule", "zo", "--data", "digits-c",
            "--corruption", "contrast", "--runs", "zo-wp", "--epochs", "1"]
    assert main(argv) == 0
    golden = capsys.readouterr().out.strip().splitlines()[-1]
    assert main(argv + ["--engine", "interpreter"]) == 0
    out = capsys.readouterr().out
    assert "compiled step" in out and out.strip().splitlines()[-1] == golden
