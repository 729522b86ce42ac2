"""The ZO rule's learning-rate schedule (``ZOSettings.schedule``): the rate of each step,
``train_zo`` applying it step by step, a fixed seed reproducing a scheduled run, and the rate
being data of the compiled step (same program, other update constants)."""

import copy
from dataclasses import replace

import numpy as np
import pytest

from ttrain.golden import digits, interpreter, qnn, zo
from ttrain.golden.zo_compiler import compile_zo_step

from shared_top import cnn_models


def test_rate_factors_of_the_schedules():
    T = 100
    const = zo.ZOSettings(lr=0.2)
    cos = zo.ZOSettings(lr=0.2, schedule="cosine")
    lin = zo.ZOSettings(lr=0.2, schedule="linear")
    assert [const.rate_factor(k, T) for k in (0, 50, 99)] == [1.0, 1.0, 1.0]
    assert cos.rate_factor(0, T) == 1.0 and lin.rate_factor(0, T) == 1.0
    assert cos.rate_factor(50, T) == pytest.approx(0.5) and lin.rate_factor(50, T) == 0.5
    assert lin.rate_factor(99, T) == pytest.approx(0.01)
    assert 0 < cos.rate_factor(99, T) < 1e-3
    f = [cos.rate_factor(k, T) for k in range(T)]
    assert all(a > b for a, b in zip(f, f[1:]))          # strictly decaying, never 0
    assert const.at_step(7, T) is const
    s7 = cos.at_step(7, T)
    assert s7.schedule == "constant" and s7.lr == pytest.approx(0.2 * cos.rate_factor(7, T))
    assert replace(s7, lr=0.2, schedule="cosine") == cos  # nothing else changes
    with pytest.raises(ValueError, match="outside the run"):
        cos.rate_factor(T, T)
    with pytest.raises(ValueError, match="learning-rate schedule must be one of"):
        zo.ZOSettings(schedule="step")


def test_warmup_linear_rises_to_the_peak_then_decays_linearly():
    T = 100
    wl = zo.ZOSettings(lr=0.2, schedule="warmup_linear", warmup=0.1)
    assert zo.ZOSettings().warmup == 0.1
    f = [wl.rate_factor(k, T) for k in range(T)]
    assert f[0] == pytest.approx(0.1) and f[4] == pytest.approx(0.5)
    assert f[9] == 1.0 and f[10] == 1.0                  # the peak at the end of the warm-up
    assert f[55] == pytest.approx(0.5) and f[99] == pytest.approx(1 / 90)
    assert all(a < b for a, b in zip(f[:10], f[1:10]))   # rising over the warm-up
    assert all(a > b for a, b in zip(f[10:], f[11:]))    # then decaying, never 0
    assert max(f) == 1.0 and min(f) > 0
    assert wl.at_step(5, T).lr == pytest.approx(0.2 * 0.6)
    assert wl.at_step(5, T).schedule == "constant"
    # no warm-up is the linear schedule; a fractional warm-up length still caps at 1
    lin = zo.ZOSettings(schedule="linear")
    w0 = zo.ZOSettings(schedule="warmup_linear", warmup=0)
    assert [w0.rate_factor(k, T) for k in range(T)] == pytest.approx(
        [lin.rate_factor(k, T) for k in range(T)])
    g = [zo.ZOSettings(schedule="warmup_linear", warmup=0.25).rate_factor(k, 10)
         for k in range(10)]
    assert g[:3] == [pytest.approx(0.4), pytest.approx(0.8), 1.0] and max(g) == 1.0
    assert g[3] == pytest.approx(7 / 7.5)
    with pytest.raises(ValueError, match="outside the run"):
        wl.rate_factor(T, T)
    for bad in (-0.1, 1, 1.5, True, "0.1"):
        with pytest.raises(ValueError, match=r"warm-up fraction of the run must be in \[0, 1\)"):
            zo.ZOSettings(schedule="warmup_linear", warmup=bad)


def _small(name, n=100):
    full = digits.load_digits_c(name)
    small = copy.copy(full)
    object.__setattr__(small, "train", digits.Split(full.train.images[:n],
                                                    full.train.labels[:n],
                                                    full.train.index[:n]))
    return small


@pytest.fixture(scope="module")
def digits_q():
    return cnn_models()["digits"]


def test_train_zo_applies_the_schedule_step_by_step_and_a_seed_reproduces_it(digits_q):
    q = digits_q
    data = _small("solarize")
    s = zo.ZOSettings(mode="np", queries=2, lr=0.1, layerwise=True, np_dim="batch",
                      sparse="topk", density=0.5, schedule="cosine", seed=3)
    seen = []

    def recording(qq, x, labels, st, step):
        seen.append((step, st))
        return zo.zo_step(qq, x, labels, st, step)

    epochs, batch = 2, 25
    _, via_stepper = zo.train_zo(q, data, s, epochs=epochs, batch=batch, stepper=recording)
    total = epochs * (100 // batch)
    assert [k for k, _ in seen] == list(range(total))
    assert all(st == s.at_step(k, total) for k, st in seen)
    assert [st.lr for _, st in seen] == sorted((st.lr for _, st in seen), reverse=True)
    assert seen[0][1].lr == 0.1 and seen[-1][1].lr < 0.01

    _, again = zo.train_zo(q, data, s, epochs=epochs, batch=batch)
    _, const = zo.train_zo(q, data, replace(s, schedule="constant"), epochs=epochs,
                           batch=batch)
    for k in q.w:
        assert np.array_equal(again.w[k], via_stepper.w[k])
        assert np.array_equal(again.b[k], via_stepper.b[k])
    assert any(not np.array_equal(const.w[k], again.w[k]) for k in q.w)
    assert any(not np.array_equal(again.w[k], q.w[k]) for k in q.w)


@pytest.mark.parametrize("schedule", ["linear", "warmup_linear"])
def test_a_scheduled_rate_is_data_of_the_compiled_step(digits_q, schedule):
    """Two steps' rates compile to the same program; rewriting the update constants (host
    data) before step 1 gives the golden scheduled step exactly. The compiler itself refuses
    scheduled settings (its stepper writes the constants once)."""
    q0 = digits_q
    s = zo.ZOSettings(mode="wp", queries=2, lr=0.3, layers=("fc4",), schedule=schedule,
                      warmup=0.5, seed=2)
    total, batch = 4, 3
    assert s.rate_factor(0, total) != s.rate_factor(1, total)
    with pytest.raises(ValueError, match="learning-rate schedule"):
        compile_zo_step(q0, batch, s)
    cz = [compile_zo_step(q0, batch, s.at_step(k, total)) for k in range(2)]
    assert cz[0].program.instructions == cz[1].program.instructions
    assert cz[0].memory_map.keys() == cz[1].memory_map.keys()
    rng = np.random.default_rng(0)
    golden, image = q0.copy(), None
    for step in range(2):
        x = rng.integers(-128, 128, (batch, *q0.cfg.input_shape))
        y = rng.integers(0, q0.cfg.classes, batch)
        if image is None:
            image = cz[step].initial_image(x, y, step)
        else:
            cz[step].set_constants(image)
            cz[step].set_step(image, x, y, step)
        image, st = interpreter.run(cz[0].program, image)
        assert st.error == 0, st.message
        zo.zo_step(golden, x, y, s.at_step(step, total), step)
        chip = cz[step].params(image)
        for n in golden.w:
            assert np.array_equal(chip.w[n], golden.w[n]), (step, n)
            assert np.array_equal(chip.b[n], golden.b[n]), (step, n)
    assert any(not np.array_equal(golden.w[n], q0.w[n]) for n in golden.w)


@pytest.mark.parametrize("argv, needle", [
    (["--zo-warmup", "0.2"], "--zo-warmup goes with --zo-schedule warmup_linear"),
    (["--zo-schedule", "step"], "--zo-schedule 'step' is not a schedule; choose constant"),
    (["--zo-schedule", "warmup_linear", "--zo-warmup", "1"],
     "--zo-warmup: warm-up fraction of the run must be in [0, 1), not 1.0"),
    (["--zo-lr", "0"], "--zo-lr: learning rate must be positive"),
    (["--runs", "bp-float", "--zo-lr", "0.1"], "change the ZO runs; --runs bp-float has none"),
])
def test_the_cli_schedule_flags_reject_bad_input(argv, needle, capsys):
    from test_cli_errors import error_line
    error_line(capsys, ["train", "--config", "digits-cnn", "--rule", "zo", "--data", "digits-c",
                        *argv], needle)


def test_the_cli_schedule_flags_are_rule_zo_only(capsys):
    from test_cli_errors import error_line
    error_line(capsys, ["train", "--config", "digits-cnn", "--data", "digits", "--zo-lr", "0.1"],
               "--zo-lr, --zo-schedule and --zo-warmup apply to --rule zo only")
