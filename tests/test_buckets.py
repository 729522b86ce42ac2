"""Sentence-length buckets (golden/buckets.py): one compiled step per length, the host picks
the shortest that holds each batch; mixed-bucket training on the interpreter equals the full
step's word for word; lengths, histograms and bad input."""

import numpy as np
import pytest

from ttrain.golden import buckets as B
from ttrain.golden.config import get_config
from ttrain.golden.data import generate_dataset
from ttrain.golden.model_compiler import compile_model
from ttrain.golden.stepper import InterpreterStepper
from ttrain.golden.train import train

from test_cli_errors import error_line

TINY = get_config("tiny")


def test_mixed_bucket_training_equals_the_full_step_word_for_word():
    ds = generate_dataset(seed=0, n_train=14, n_dev=6, n_test=6, seq_len=TINY.seq_len,
                          vocab_size=TINY.vocab)
    kw = dict(epochs=1, seed=0, progress=False)
    full = InterpreterStepper()
    ref = train(TINY, ds, stepper=full, **kw)
    bucketed = InterpreterStepper(buckets=(5, 6, 7))
    got = train(TINY, ds, stepper=bucketed, **kw)
    counts = got["steps_per_bucket"]
    assert sum(counts.values()) == 14 and sum(n > 0 for n in counts.values()) >= 2
    for k, v in ref["params"].items():
        np.testing.assert_array_equal(v.view(np.uint32), got["params"][k].view(np.uint32))
    strip = lambda h: [{k: v for k, v in r.items() if k != "seconds"} for r in h]  # noqa: E731
    assert strip(got["history"]) == strip(ref["history"])
    # the same batch on the 5-position step and the full step: the same loss, fewer MACs
    from ttrain.golden import model as M
    from ttrain.golden.interpreter import run
    progs = bucketed.buckets.programs
    rows = np.flatnonzero(ds.splits["train"]["mask"].sum(axis=1) <= 5)
    batch = ds.batch("train", rows[:1])
    params = M.init_params(progs[8].cfg, np.random.default_rng(0))
    out = {}
    for p in (5, 8):
        image = progs[8].initial_image(params)
        progs[p].set_batch(image, batch, 0.05)
        image, st = run(progs[p].program, image)
        out[p] = (progs[p].loss(image), st.macs)
    assert out[5][0] == out[8][0] and out[5][1] < out[8][1]


def test_pick_takes_the_shortest_bucket_that_holds_the_batch():
    bk = B.Buckets(TINY, (4, 6))
    assert bk.lengths == (4, 6, 8) and bk.full.positions == 8
    mask = np.zeros((1, 8), bool)
    for last, want in ((1, 4), (4, 4), (5, 6), (6, 6), (7, 8), (8, 8)):
        mask[:] = False
        mask[0, :last] = True
        p, cm = bk.pick({"mask": mask})
        assert p == want and cm.positions == want
    assert bk.histogram([2, 4, 5, 6, 7, 8, 8]) == {4: 2, 6: 2, 8: 3}


def test_auto_and_parsed_buckets():
    lengths = np.array([3] * 40 + [7] * 30 + [12] * 30)
    cfg = get_config("paper-l1")
    assert B.auto_buckets(cfg, lengths) == (8, 12, 32)
    assert B.parse_buckets("auto", cfg, lengths) == (8, 12, 32)
    assert B.parse_buckets("16,8,16", cfg) == (8, 16, 32)
    with pytest.raises(ValueError, match="outside 1..seq_len = 32"):
        B.parse_buckets("40", cfg)
    with pytest.raises(ValueError, match="'auto' or comma-separated lengths"):
        B.parse_buckets("8;16", cfg)


def test_a_program_with_another_parameter_layout_is_refused():
    def compile(cfg, positions=None, **kw):
        other = cfg if positions is None else cfg.with_(n_layers=2)
        return compile_model(other, **({} if positions is None else {"positions": positions}),
                             **kw)
    with pytest.raises(ValueError, match="lays out the parameters differently"):
        B.Buckets(TINY, (4,), compile=compile)


@pytest.mark.parametrize("argv, needle", [
    (["--buckets", "4"], "--buckets applies to --engine interpreter or rtl"),
    (["--engine", "interpreter", "--buckets", "3,x"], "--buckets takes 'auto' or "
                                                       "comma-separated lengths"),
    (["--engine", "interpreter", "--buckets", "9"], "--buckets length 9 is outside 1..seq_len"),
])
def test_cli_rejects_bad_buckets(argv, needle, capsys):
    error_line(capsys, ["train", "--config", "tiny", "--train-sentences", "4", *argv], needle)


def test_cli_cnn_preset_rejects_buckets(capsys):
    error_line(capsys, ["train", "--config", "digits-cnn", "--buckets", "4"],
               "--buckets applies to the transformer presets only")


def test_epoch_on_buckets_weights_each_bucket_by_its_sentences():
    from ttrain.testbench.bench_step import _bucket_epoch
    bk = B.Buckets(get_config("tiny"), (4, 6))
    tiny = get_config("tiny")
    entries = [{"positions": 4, "cycles": 100}, {"positions": 6, "cycles": 150},
               {"positions": 8, "cycles": 200}]
    rep = _bucket_epoch(tiny, bk, entries, np.array([2, 3, 5, 8, 9]), "test lengths")
    assert rep["sentences_per_bucket"] == {"4": 2, "6": 1, "8": 2}      # 9 is cut at seq_len
    assert rep["epoch_cycles"] == 2 * 100 + 150 + 2 * 200
    assert rep["full_grid_epoch_cycles"] == 5 * 200
    assert rep["speedup"] == pytest.approx(1000 / 750)
    assert rep["seconds_at_300MHz"] == pytest.approx(750 / 300e6)


def test_epoch_lengths_come_from_atis_when_it_is_there():
    from conftest import shared_data
    from ttrain.testbench.bench_step import ATIS_TRAIN_SENTENCES, epoch_lengths
    cfg = get_config("paper-l1")
    lengths, source = epoch_lengths(cfg, shared_data("atis"))
    assert len(lengths) == ATIS_TRAIN_SENTENCES and source.endswith("atis")
    assert 2 <= lengths.min() and lengths.max() <= cfg.seq_len
    auto = B.auto_buckets(cfg, lengths)
    assert auto[-1] == 32 and len(auto) == 3 and auto[0] < auto[1] < 32
    with pytest.raises(ValueError, match="holds no train.seq.in"):
        epoch_lengths(cfg, "/nonexistent")


def test_bench_step_prints_the_bucket_epoch(monkeypatch, capsys):
    from ttrain.main import main
    from ttrain.testbench import bench_step
    seen = {}

    def fake(config, **kw):
        seen.update(kw)
        return {"config": "tiny", "lanes": 4, "batch": 1, "seq_len": 8, "positions": 8,
                "entries": [{"step": 0, "cycles": 80, "forward_cycles": 30,
                             "backward_cycles": 50, "update_busy_cycles": 5,
                             "engine_cycles": 40, "ideal_cycles": 20, "macs": 80,
                             "utilization": 0.25, "loss": 1.0, "positions": 6}],
                "epoch": {"sentences": 10, "steps": 10, "seconds_at_250MHz": 1.0,
                          "seconds_at_300MHz": 0.8},
                "buckets": {"lengths": [6, 8], "lengths_from": "x", "sentences": 10,
                            "sentences_per_bucket": {"6": 7, "8": 3},
                            "cycles_per_step": {"6": 80, "8": 100}, "epoch_cycles": 860,
                            "full_grid_epoch_cycles": 1000, "speedup": 1000 / 860,
                            "seconds_at_250MHz": 0.5, "seconds_at_300MHz": 0.4}}
    monkeypatch.setattr(bench_step, "bench_step", fake)
    assert main(["bench", "step", "--config", "tiny", "--buckets", "6"]) == 0
    out = capsys.readouterr().out
    assert seen["buckets"] == "6" and "6: 7 sentences x 80 cycles" in out and "1.16x" in out


@pytest.mark.parametrize("argv, needle", [
    (["--buckets", "6", "--positions", "6"], "--buckets runs them all: pass one"),
    (["--buckets", "6", "--steps", "2"], "--buckets runs one step per bucket: drop --steps"),
    (["--buckets", "12"], "--buckets length 12 is outside 1..seq_len = 8"),
    (["--lengths-from", "/tmp"], "--lengths-from gives the length distribution of --buckets"),
])
def test_bench_step_rejects_bad_buckets(argv, needle, capsys):
    error_line(capsys, ["bench", "step", "--config", "tiny", *argv], needle)


def test_bench_step_zo_rejects_buckets(capsys):
    error_line(capsys, ["bench", "step", "--rule", "zo", "--buckets", "6"],
               "--buckets applies to the transformer presets (--rule sgd) only")
