"""``ttrain train``: argument validation, a short run on built-in data and on a data directory."""

import re

import pytest

from ttrain.golden.data import generate_dataset
from ttrain.golden.train import load_checkpoint
from ttrain.main import main


@pytest.mark.parametrize("argv, message", [
    (["--config", "tiny", "--epochs", "0"], "--epochs must be at least 1"),
    (["--config", "tiny", "--lr", "0"], "--lr must be positive"),
    (["--config", "tiny", "--lr", "-0.1"], "--lr must be positive"),
    (["--config", "tiny", "--batch-size", "0"], "--batch-size must be at least 1"),
    (["--config", "tiny", "--clip", "0"], "--clip must be a positive gradient norm"),
    (["--config", "tiny", "--data", "/nonexistent/atis"], "is not a directory"),
    (["--config", "nope"], "unknown config 'nope'; choose one of: tiny"),
    (["--config", "tiny", "--lanes", "4"], "--lanes applies to --engine rtl only"),
    (["--config", "tiny", "--engine", "interpreter", "--lanes", "4"], "--lanes applies to "
                                                                       "--engine rtl only"),
    (["--config", "tiny", "--engine", "interpreter", "--clip", "1"], "--clip is not available "
                                                                     "with --engine interpreter"),
    (["--config", "tiny", "--train-sentences", "0"], "--train-sentences must be at least 1"),
    (["--config", "tiny", "--train-sentences", "9", "--data", "."], "cannot be used with --data"),
    (["--config", "tiny", "--compare"], "--compare applies to --engine interpreter or rtl only"),
    (["--config", "tiny", "--engine", "rtl", "--clip", "1"], "--clip is not available with "
                                                             "--engine rtl"),
    (["--config", "tiny", "--engine", "rtl", "--batch-size", "2"], "--batch-size is not"),
    (["--config", "tiny", "--engine", "rtl", "--slot-head"], "--slot-head is not available"),
    (["--config", "tiny", "--engine", "rtl", "--lanes", "3"], "--lanes must be a power of two"),
    (["--config", "tiny", "--engine", "rtl", "--max-steps", "0"], "--max-steps must be at "
                                                                  "least 1"),
])
def test_bad_arguments_exit_2(argv, message, capsys):
    assert main(["train", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ttrain train: error:") and message in err


def test_config_is_required(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["train"])
    assert exc.value.code == 2 and "--config" in capsys.readouterr().err


def test_short_run_on_built_in_data(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--config", "tiny", "--epochs", "2", "--batch-size", "16",
                 "--lr", "0.2", "--clip", "1", "--no-progress", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "generated(seed=0): 1200/200/200 train/dev/test sentences" in text
    assert len(re.findall(r"^epoch +\d+/2 ", text, re.M)) == 2
    m = re.search(r"dev intent accuracy (\d+\.\d\d)%, test intent accuracy (\d+\.\d\d)%", text)
    assert m and 0 <= float(m.group(2)) <= 100
    ck = load_checkpoint(out / "best.npz")
    assert ck["cfg"].name == "tiny" and ck["meta"]["batch_size"] == 16
    assert ck["meta"]["clip"] == 1.0 and "clip 1.0" in text
    assert f"{100 * ck['meta']['test']['intent_acc']:.2f}%" == m.group(2) + "%"
    assert (out / "curves.png").is_file() and (out / "history.json").is_file()


def test_run_on_data_directory_with_slot_head(tmp_path, capsys):
    generate_dataset(seed=9, n_train=64, n_dev=16, n_test=16).save(tmp_path)
    assert main(["train", "--config", "tiny", "--data", str(tmp_path), "--epochs", "1",
                 "--batch-size", "16", "--slot-head", "--schedule", "linear",
                 "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert f"{tmp_path}: 64/16/16 train/dev/test sentences" in text
    assert re.search(r"^slot F1: dev \d+\.\d\d%, test \d+\.\d\d%$", text, re.M)
    assert "(linear)" in text


@pytest.mark.parametrize("argv, message", [
    (["demo", "--steps", "0"], "--steps must be in 1..2000"),
    (["demo", "--lanes", "6"], "--lanes must be a power of two >= 4"),
    (["demo", "--per-session", "0"], "--per-session must be >= 1"),
    (["demo", "--config", "nope"], "unknown config 'nope'"),
    (["bench", "step", "--lanes", "2"], "--lanes must be a power of two >= 4"),
    (["bench", "step", "--steps", "0"], "steps must be an int in 1..20"),
])
def test_chip_commands_reject_bad_arguments(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err
