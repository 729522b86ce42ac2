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
