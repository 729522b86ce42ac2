"""One training loop over a step interface (issue 11 item 4, ``golden/stepper.py``).

``train()`` owns data order, seeds, schedule, word dropout, evaluation, best epoch, checkpoints
and history; the stepper only runs steps. The fast path is the default stepper; the
interpreter stepper runs the compiled step bit-exactly and must track the fast path within
rounding on the same data order; ``max_steps`` stops any stepper early.
"""

import numpy as np
import pytest

from ttrain.golden.config import get_config
from ttrain.golden.data import generate_dataset
from ttrain.golden.model_compiler import chip_model_config
from ttrain.golden.stepper import FastStepper, InterpreterStepper, Stepper
from ttrain.golden.train import train


@pytest.fixture(scope="module")
def data():
    cfg = get_config("tiny")
    ds = generate_dataset(seed=0, n_train=48, n_dev=24, n_test=24, seq_len=cfg.seq_len,
                          vocab_size=cfg.vocab)
    return cfg, ds


def _same(a, b):
    return all(np.array_equal(a[k], b[k]) for k in a) and set(a) == set(b)


def test_default_stepper_is_the_fast_path(data):
    cfg, ds = data
    a = train(cfg, ds, epochs=2, seed=4, progress=False, word_dropout=0.1)
    b = train(cfg, ds, epochs=2, seed=4, progress=False, word_dropout=0.1,
              stepper=FastStepper())
    assert _same(a["params"], b["params"]) and a["engine"] == b["engine"] == "golden"
    strip = [{k: v for k, v in r.items() if k != "seconds"} for r in a["history"]]
    assert strip == [{k: v for k, v in r.items() if k != "seconds"} for r in b["history"]]
    assert a["steps"] == 2 * 48 and a["history"][-1]["steps"] == 96


def test_interpreter_stepper_tracks_the_fast_path(data, tmp_path):
    cfg, ds = data
    lines = []
    ccfg, _ = chip_model_config(cfg, ds)
    fast = train(ccfg, ds, epochs=1, seed=1, progress=False, word_dropout=0.1)
    interp = train(cfg, ds, epochs=1, seed=1, progress=False, word_dropout=0.1,
                   stepper=InterpreterStepper(), out_dir=tmp_path, log=lines.append)
    assert interp["engine"] == "interpreter" and interp["steps"] == 48
    # same data order, dropout draws, initialization and schedule: equal within rounding
    for k, v in fast["params"].items():
        np.testing.assert_allclose(interp["params"][k], v, rtol=0, atol=1e-4)
    f, i = fast["history"][0], interp["history"][0]
    assert abs(f["train_loss"] - i["train_loss"]) < 1e-4
    assert (tmp_path / "best.npz").is_file() and (tmp_path / "history.json").is_file()
    assert any(line.startswith("epoch   1/1") for line in lines)


def test_max_steps_stops_and_still_evaluates(data):
    cfg, ds = data
    r = train(cfg, ds, epochs=3, seed=0, progress=False, max_steps=50)
    assert r["steps"] == 50 and [h["steps"] for h in r["history"]] == [48, 50]
    with pytest.raises(ValueError, match="max_steps"):
        train(cfg, ds, epochs=1, progress=False, max_steps=0)


def test_compiled_steppers_refuse_what_the_step_lacks(data):
    cfg, ds = data
    with pytest.raises(ValueError, match="no gradient clipping"):
        train(cfg, ds, epochs=1, progress=False, clip=1.0, stepper=InterpreterStepper())
    with pytest.raises(ValueError, match="batch"):
        train(cfg, ds, epochs=1, progress=False, batch_size=2, stepper=InterpreterStepper())


class _Chunked(Stepper):
    """A fast path that takes 5 steps at a time (as a simulation session does)."""
    name = "chunked"
    chunk = 5

    def __init__(self):
        self.inner, self.calls = FastStepper(), []

    def start(self, ctx):
        self.inner.start(ctx)

    def steps(self, batches, rates):
        self.calls.append(len(batches))
        return self.inner.steps(batches, rates)

    def params(self):
        return self.inner.params()


def test_chunked_stepper_gives_the_same_run(data):
    cfg, ds = data
    a = train(cfg, ds, epochs=1, seed=2, progress=False, schedule="linear")
    st = _Chunked()
    b = train(cfg, ds, epochs=1, seed=2, progress=False, schedule="linear", stepper=st)
    assert _same(a["params"], b["params"]) and st.calls == [5] * 9 + [3]
    with pytest.raises(ValueError, match="average needs the parameters after every step"):
        train(cfg, ds, epochs=1, progress=False, average=0.5, stepper=_Chunked())
