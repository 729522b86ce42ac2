"""Bad input to the command line: one line on stderr naming the flag, file or line and what to
change, exit code 2, no traceback, nothing (half-)written. Also ``ttrain eval`` and
``train --init``, the checkpoint loader's messages and ``bench fp32 --json``'s total."""

import json
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import numpy as np
import pytest

from ttrain.golden.config import get_config
from ttrain.golden.data import generate_dataset, load_dataset
from ttrain.golden.train import load_checkpoint, train, write_atomically
from ttrain.main import main

ROOT = Path(__file__).resolve().parent.parent


def error_line(capsys, argv, *needles):
    """Run ``ttrain argv``; it must fail with exit 2 and one ``error:`` line holding needles."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"ttrain {argv[0]}: error: "), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def files_under(path):
    return sorted(str(p.relative_to(path)) for p in Path(path).rglob("*"))


# ------------------------------------------------------------------------- train: flag values


@pytest.mark.parametrize("argv, needle", [
    (["--lr", "inf"], "--lr must be positive (a finite number > 0), got inf"),
    (["--lr", "nan"], "--lr must be positive (a finite number > 0), got nan"),
    (["--lr=-inf"], "--lr must be positive"),
    (["--lr", "inf", "--clip", "1"], "--lr must be positive (a finite number > 0), got inf"),
    (["--lr", "0.1", "--clip", "inf"], "--clip must be a positive gradient norm"),
    (["--clip", "nan"], "--clip must be a positive gradient norm (a finite number > 0), got nan"),
    (["--seed=-1"], "--seed must be a non-negative integer, got -1"),
    (["--epochs=-2"], "--epochs must be at least 1, got -2"),
    (["--batch-size=-1"], "--batch-size must be at least 1"),
    (["--lanes", "8"], "--lanes applies to --engine rtl only"),
])
def test_train_rejects_bad_values_before_any_work(argv, needle, tmp_path, capsys):
    out = tmp_path / "run"
    error_line(capsys, ["train", "--config", "tiny", "--no-progress", "--out", str(out), *argv],
               needle)
    assert not out.exists()


def test_lr_inf_through_the_installed_entry_point_has_no_traceback():
    proc = subprocess.run([sys.executable, "-m", "ttrain", "train", "--config", "tiny", "--lr",
                           "inf", "--clip", "1"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr == ("ttrain train: error: --lr must be positive (a finite number > 0), "
                           "got inf\n")


def test_diverging_run_is_one_line_naming_the_learning_rate(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "ttrain", "train", "--config", "tiny",
                           "--train-sentences", "48", "--batch-size", "16", "--epochs", "1",
                           "--lr", "1e30", "--no-progress", "--out", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ttrain train: error: training diverged")
    assert "lower the learning rate (now 1e+30)" in lines[0]
    assert not out.exists()


# --------------------------------------------------------------------------- output paths


def test_train_out_existing_file_is_rejected_before_training(tmp_path, capsys):
    target = tmp_path / "results"
    target.write_text("keep me")
    error_line(capsys, ["train", "--config", "tiny", "--no-progress", "--out", str(target)],
               f"--out {target} is an existing file, not a directory")
    assert target.read_text() == "keep me"
    # nothing of the run was started: no epoch line was printed
    assert "epoch" not in capsys.readouterr().out
    error_line(capsys, ["train", "--config", "tiny", "--out", str(target / "sub")],
               f"{target} is a file, so no directory can be made there")


def test_write_atomically_keeps_the_old_file_when_the_writer_fails(tmp_path):
    path = tmp_path / "best.npz"
    path.write_bytes(b"old")

    def broken(f):
        f.write(b"half of the new")
        raise RuntimeError("disk on fire")
    with pytest.raises(RuntimeError):
        write_atomically(path, broken)
    assert path.read_bytes() == b"old" and files_under(tmp_path) == ["best.npz"]
    write_atomically(path, lambda f: f.write(b"new"))
    assert path.read_bytes() == b"new" and files_under(tmp_path) == ["best.npz"]
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~_umask()


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


# -------------------------------------------------------------------------------- verilog


@pytest.mark.parametrize("argv, needle", [
    (["--unit", "store", "--lanes", "3"], "--lanes must be a positive power of two"),
    (["--unit", "engine", "--lanes", "6"], "--lanes must be a positive power of two"),
    (["--unit", "fp32_mul", "--lanes", "3"],
     "--lanes does not apply to --unit fp32_mul (it takes no sizing flags): drop --lanes"),
    (["--unit", "update", "--depth", "64"], "--depth does not apply to --unit update"),
    (["--unit", "sweeper", "--lanes", "4"], "--lanes does not apply to --unit sweeper (it takes "
                                            "--depth)"),
    (["--unit", "engine", "--style", "ultra"], "--style does not apply to --unit engine"),
    (["--unit", "store", "--depth", "100", "--lanes", "8"],
     "--depth 100 is not a multiple of banks = --lanes 8: use --depth 104"),
    (["--unit", "store", "--depth", "0"], "--depth must be a positive integer"),
])
def test_verilog_rejects_flags_and_values(argv, needle, tmp_path, capsys):
    out = tmp_path / "v"
    error_line(capsys, ["verilog", *argv, "--out", str(out)], needle)
    assert not out.exists()


def test_verilog_out_existing_file(tmp_path, capsys):
    target = tmp_path / "v.txt"
    target.write_text("x")
    error_line(capsys, ["verilog", "--unit", "fp32_mul", "--out", str(target)],
               f"--out {target} is an existing file, not a directory")
    assert target.read_text() == "x" and files_under(tmp_path) == ["v.txt"]


def test_verilog_flags_that_apply_are_used(tmp_path, capsys):
    assert main(["verilog", "--unit", "sweeper", "--depth", "64", "--out", str(tmp_path)]) == 0
    assert files_under(tmp_path) == ["ttrain_sweeper_d64.ports.json", "ttrain_sweeper_d64.v"]


# ----------------------------------------------------------------------- other int flags


@pytest.mark.parametrize("argv, needle", [
    (["demo", "--seed=-1"], "--seed must be a non-negative integer, got -1"),
    (["plan", "--config", "tiny", "--batch", "0"], "--batch must be at least 1"),
    (["eval", "--checkpoint", "/nonexistent/best.npz"],
     "--checkpoint /nonexistent/best.npz does not exist"),
])
def test_int_flags_and_paths_are_named(argv, needle, capsys):
    error_line(capsys, argv, needle)


def test_demo_json_directory_is_rejected_before_the_build(tmp_path, capsys):
    error_line(capsys, ["demo", "--json", str(tmp_path)], f"--json {tmp_path} is a directory")


# ------------------------------------------------------------------------------ data sets


@pytest.fixture
def data_dir(tmp_path):
    d = tmp_path / "data"
    generate_dataset(seed=5, n_train=40, n_dev=10, n_test=10).save(d)
    return d


def _rewrite(path, change):
    lines = path.read_text(encoding="utf-8").splitlines()
    path.write_text("\n".join(change(lines)) + "\n", encoding="utf-8")


def test_unknown_labels_are_counted_in_warnings(data_dir):
    _rewrite(data_dir / "dev.label", lambda ls: ["bogus_a", "bogus_a", "bogus_b"] + ls[3:])
    _rewrite(data_dir / "test.seq.out",
             lambda ls: [" ".join(["B-weird"] * len(ls[0].split()))] + ls[1:])
    ds = load_dataset(data_dir, seq_len=8, vocab_size=128)
    assert len(ds.warnings) == 2
    dev, test = ds.warnings
    assert dev.startswith(f"{data_dir / 'dev.label'}: 3 of 10 dev sentences have an intent not "
                          f"in {data_dir / 'intent_label.txt'}, scored as UNK")
    assert "'bogus_a' x2, 'bogus_b' x1" in dev
    assert test.startswith(f"{data_dir / 'test.seq.out'}: ")
    assert "test slot tag(s) not in" in test and "'B-weird' x" in test
    assert ds.batch("dev")["intent"][:3].tolist() == [0, 0, 0]


def test_cli_prints_label_warnings(data_dir, capsys):
    _rewrite(data_dir / "dev.label", lambda ls: ["bogus_a"] + ls[1:])
    assert main(["train", "--config", "tiny", "--data", str(data_dir), "--epochs", "1",
                 "--batch-size", "20", "--no-progress"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"ttrain train: warning: {data_dir / 'dev.label'}"
                                               f": 1 of 10 dev sentences")


def test_split_with_no_known_intent_is_an_error(data_dir, capsys):
    _rewrite(data_dir / "test.label", lambda ls: ["renamed_" + x for x in ls])
    line = error_line(capsys, ["train", "--config", "tiny", "--data", str(data_dir),
                               "--no-progress"],
                      f"{data_dir / 'test.label'}: none of the 10 test intents is listed in "
                      f"{data_dir / 'intent_label.txt'}", "could only score 0%")
    assert "renamed_" in line


def test_empty_split_is_an_error(data_dir):
    for ext in ("seq.in", "seq.out", "label"):
        (data_dir / f"dev.{ext}").write_text("")
    with pytest.raises(ValueError, match="dev.seq.in: the dev split is empty"):
        load_dataset(data_dir, seq_len=8, vocab_size=128)


def test_non_utf8_data_names_file_and_line(data_dir, capsys):
    path = data_dir / "train.seq.in"
    lines = path.read_bytes().split(b"\n")
    lines[3] = b"flights to m\xfcnchen"                # Latin-1, not UTF-8
    path.write_bytes(b"\n".join(lines))
    error_line(capsys, ["train", "--config", "tiny", "--data", str(data_dir)],
               f"{path} line 4 is not UTF-8 (byte 0xfc at column 13): save the file as UTF-8")


def test_byte_order_mark_is_ignored(data_dir):
    path = data_dir / "intent_label.txt"
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert load_dataset(data_dir, seq_len=8, vocab_size=128).intent_labels[0] == "UNK"


# ---------------------------------------------------------------------- checkpoints, eval


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A small data directory and the checkpoint of one epoch of ``tiny`` on it."""
    root = tmp_path_factory.mktemp("trained")
    generate_dataset(seed=7, n_train=64, n_dev=16, n_test=16).save(root / "data")
    assert main(["train", "--config", "tiny", "--data", str(root / "data"), "--epochs", "1",
                 "--batch-size", "16", "--lr", "0.2", "--no-progress",
                 "--out", str(root / "run")]) == 0
    return root


def test_train_out_writes_no_temporary_files(trained):
    assert files_under(trained / "run") == ["best.npz", "curves.png", "history.json"]


def _bad_checkpoints(tmp_path, good):
    data = good.read_bytes()
    files = {"empty.npz": b"", "truncated.npz": data[:len(data) // 2],
             "tail-cut.npz": data[:-7], "notes.txt": b"not a checkpoint\n"}
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    with zipfile.ZipFile(tmp_path / "foreign.zip", "w") as z:
        z.writestr("readme.txt", "hello")
    np.save(tmp_path / "array.npy", np.zeros(3))
    corrupt = bytearray(data)
    corrupt[len(data) // 3:len(data) // 3 + 64] = bytes(64)
    (tmp_path / "corrupt.npz").write_bytes(bytes(corrupt))
    return {"empty.npz": "the file is empty", "truncated.npz": "truncated or corrupted",
            "tail-cut.npz": "truncated or corrupted", "notes.txt": "a text file",
            "foreign.zip": "a zip archive without the checkpoint entries",
            "array.npy": "a single NumPy .npy array", "corrupt.npz": "truncated or corrupted"}


def test_bad_checkpoint_files_get_one_line(trained, tmp_path, capsys):
    for name, reason in _bad_checkpoints(tmp_path, trained / "run" / "best.npz").items():
        path = tmp_path / name
        with pytest.raises(ValueError, match="not a (readable )?ttrain checkpoint"):
            load_checkpoint(path)
        for argv in (["eval", "--checkpoint", str(path)],
                     ["train", "--config", "tiny", "--init", str(path)]):
            line = error_line(capsys, argv, str(path), reason,
                              "pass a best.npz written by `ttrain train --out DIR`")
            assert "pickled" not in line and "BadZipFile" not in line


def test_eval_matches_the_accuracy_recorded_at_training(trained, capsys):
    ck = load_checkpoint(trained / "run" / "best.npz")
    # without --data: the data directory recorded in the checkpoint
    assert main(["eval", "--checkpoint", str(trained / "run" / "best.npz"), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["config"] == "tiny" and rep["data"] == str(trained / "data")
    for split in ("dev", "test"):
        assert rep[split]["intent_acc"] == ck["meta"][split]["intent_acc"]
        assert rep[split]["loss"] == pytest.approx(ck["meta"][split]["loss"])
        assert rep[split]["n"] == 16
    assert main(["eval", "--checkpoint", str(trained / "run" / "best.npz"), "--data",
                 str(trained / "data")]) == 0
    text = capsys.readouterr().out
    assert f"test: intent accuracy {100 * ck['meta']['test']['intent_acc']:.2f}%" in text


def test_eval_on_data_with_other_labels_warns(trained, tmp_path, capsys):
    other = tmp_path / "other"
    generate_dataset(seed=8, n_train=8, n_dev=4, n_test=4).save(other)
    _rewrite(other / "intent_label.txt", lambda ls: ls + ["new_intent"])
    _rewrite(other / "dev.label", lambda ls: ["new_intent"] + ls[1:])
    assert main(["eval", "--checkpoint", str(trained / "run" / "best.npz"), "--data",
                 str(other)]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "1 of 4 dev sentences have an intent not in the label lists of " \
                             "checkpoint" in err[0] and "'new_intent' x1" in err[0]


def test_eval_of_a_checkpoint_whose_data_is_gone(trained, tmp_path, capsys):
    ck = load_checkpoint(trained / "run" / "best.npz")
    from ttrain.golden.train import save_checkpoint
    moved = save_checkpoint(tmp_path / "c.npz", ck["cfg"], ck["params"], vocab=ck["vocab"],
                            intent_labels=ck["intent_labels"], slot_labels=ck["slot_labels"],
                            meta=dict(ck["meta"], dataset=str(tmp_path / "gone")))
    error_line(capsys, ["eval", "--checkpoint", moved],
               f"was trained on the data directory {tmp_path / 'gone'}, which does not exist "
               f"here: pass --data DIR")


def test_train_init_continues_from_the_checkpoint(trained, tmp_path, capsys):
    path = trained / "run" / "best.npz"
    assert main(["train", "--config", "tiny", "--data", str(trained / "data"), "--init",
                 str(path), "--epochs", "1", "--batch-size", "16", "--lr", "0.2",
                 "--no-progress", "--out", str(tmp_path / "more")]) == 0
    capsys.readouterr()
    assert load_checkpoint(tmp_path / "more" / "best.npz", get_config("tiny"))
    # the run really starts at the checkpoint: with a vanishing rate it stays there
    ck = load_checkpoint(path)
    ds = load_dataset(trained / "data", get_config("tiny")).reencode(
        ck["vocab"], ck["intent_labels"], ck["slot_labels"], labels_from="checkpoint")
    res = train(get_config("tiny"), ds, epochs=1, lr=1e-30, batch_size=16, progress=False,
                init=ck["params"], seed=3)
    for k, v in ck["params"].items():
        np.testing.assert_array_equal(res["params"][k], v)


def test_train_init_must_fit_the_config(trained, capsys):
    path = trained / "run" / "best.npz"
    error_line(capsys, ["train", "--config", "small", "--init", str(path)],
               f"--init: checkpoint {path} was written for config 'tiny', not 'small': use "
               f"--config tiny", f"`ttrain eval --checkpoint {path}`")
    error_line(capsys, ["train", "--config", "tiny", "--init", str(path), "--slot-head"],
               f"checkpoint {path} does not fit config 'tiny' (slot_head: checkpoint False vs "
               f"config True)")
    with pytest.raises(ValueError, match="initial parameters do not fit config 'tiny'"):
        ck = load_checkpoint(path)
        bad = dict(ck["params"])
        bad.pop(sorted(bad)[0])
        ds = generate_dataset(seed=0, n_train=16, n_dev=4, n_test=4)
        train(get_config("tiny"), ds, epochs=1, init=bad, progress=False)


# -------------------------------------------------------------------- bench and packaging


def test_bench_fp32_json_has_a_total(monkeypatch, capsys):
    from ttrain.testbench import bench_fp32

    def run_fp32_sweep(unit, pairs, seed):
        return {"unit": unit, "pairs": pairs, "mismatches": 0, "build_seconds": 1.0,
                "sim_seconds": 0.25, "golden_seconds": 0.5, "total_seconds": 2.0}
    monkeypatch.setattr(bench_fp32, "UNITS", ("mul", "add"))
    monkeypatch.setattr(bench_fp32, "run_fp32_sweep", run_fp32_sweep)
    assert main(["bench", "fp32", "--pairs", "10", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert sorted(rep) == ["config", "entries", "total"]
    assert rep["total"] == {"pairs": 20, "mismatches": 0, "build_seconds": 2.0,
                            "sim_seconds": 0.5, "golden_seconds": 1.0, "total_seconds": 4.0}


def test_pyproject_license_is_an_spdx_string():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert meta["project"]["license"] == "Apache-2.0"
    # setuptools reads the SPDX string form (and project.license-files) from version 77 on
    assert "setuptools>=77" in meta["build-system"]["requires"]
