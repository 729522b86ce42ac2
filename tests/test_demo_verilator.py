"""`ttrain demo`'s training loop on the simulated chip (the shared Verilator build of
``tests/shared_top.py``, with ``tiny``'s compiled step): three steps in two sessions. The
losses it reports are recomputed here with the golden interpreter alone (same initial
parameters, data order and learning rates), the accuracy column from the interpreter's final
parameters, and the PNG and report are checked."""

import json

import numpy as np

from ttrain.demo_cmd import train_demo
from ttrain.golden.data import generate_dataset
from ttrain.golden.interpreter import run as interpret
from ttrain.golden.train import evaluate, initial_params
from shared_top import model_programs, shared_top


def test_demo_loop_on_the_chip_equals_the_interpreter(tmp_path):
    cm = model_programs()["tiny"]
    ds = generate_dataset(seed=0, seq_len=cm.cfg.seq_len, vocab_size=cm.cfg.vocab)
    lines = []
    report = train_demo(cm, shared_top(), ds, steps=3, lr=0.07, seed=2, per_session=2,
                        plot=str(tmp_path / "loss.png"), log=lines.append)
    # the golden interpreter alone, with the documented order and rates (constant: tiny has
    # no schedule)
    image = cm.initial_image(initial_params(cm.cfg, 2))
    order = np.random.default_rng([2, 1])
    batches = list(ds.batches("train", 1, seed=order))[:3]
    losses = []
    for b in batches:
        cm.set_batch(image, b, 0.07)
        image, st = interpret(cm.program, image)
        assert not st.error
        losses.append(cm.loss(image))
    assert [r["loss_chip"] for r in report["steps"]] == losses
    assert [r["lr"] for r in report["steps"]] == [0.07] * 3
    assert [s["step"] for s in report["sessions"]] == [0, 2, 3]
    final = evaluate(cm.cfg, cm.params(image), ds, "test")["intent_acc"]
    assert report["test_acc_after"] == report["sessions"][-1]["test_acc"] == final
    assert any(line.startswith("after 3 steps on the chip: test accuracy") for line in lines)
    assert sum("bit-exact" in line for line in lines) == 2              # one line per session
    assert open(tmp_path / "loss.png", "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    json.dumps(report)                                                   # the --json report
