"""The int8 CNN forward pass and its FP32 losses on the simulated chip (Verilator, the shared
4-lane top): integer CONTRACTs over shifted views, requant, i2f and the loss ops; every store
word after each run equals the golden interpreter, whose result equals the integer model
(tests/test_cnn_compiler.py). Two batches per model, parameters updated between them as a ZO
step would (the program and constants stay, the words change)."""

import numpy as np
import pytest

from ttrain.golden import interpreter
from ttrain.platforms.sim.top import TopSession, pad_image, run_top

from shared_top import ZO_CHIP, CNN_BATCH, cnn_models, cnn_programs, shared_top, zo_programs


@pytest.fixture(scope="module")
def top():
    return shared_top()


@pytest.mark.parametrize("name", ["cnn_digits", "cnn_parts"])
def test_cnn_forward_bit_exact_on_the_chip(top, tmp_path, name):
    cc = cnn_programs()[name]
    q = cnn_models()[name[4:]]
    sizes = top.config["store_sizes"]
    rng = np.random.default_rng(11)
    sess = TopSession()
    sess.program(cc.program.words())
    image = None
    for run in range(2):
        x = rng.integers(-128, 128, (CNN_BATCH, *q.cfg.input_shape))
        y = rng.integers(0, q.cfg.classes, CNN_BATCH)
        if image is None:
            image = pad_image(cc.initial_image(x, y), sizes)
        else:                                      # a changed parameter set and a new batch
            q2 = q.copy()
            first = q.cfg.conv_names[0]
            q2.w[first] = np.clip(q2.w[first] + rng.integers(-1, 2, q2.w[first].shape), -128, 127)
            cc.set_params(image, q2)
            cc.set_batch(image, x, y)
        sess.write_image(image)
        want, st = interpreter.run(cc.program, image)
        assert st.error == 0, st.message
        sess.run(f"{name}{run}", expect=want)
        image = want
    res = run_top(top, sess, test_dir=tmp_path, timeout=600)
    assert [r["error_code"] for r in res] == [0, 0]
    assert all(r["executed"] > 0 for r in res)


def test_prng_instructions_bit_exact_on_the_chip(top, tmp_path):
    """A ZO query's PRNG work on the top: perturb a weight copy (int8 and int32), accumulate
    g += c * u with a broadcast coefficient, add uniform draws; seeds from store words; every
    store word equal to the golden interpreter."""
    from ttrain.golden.contract import View
    from ttrain.golden.isa import End, Program, Random
    cc = cnn_programs()["cnn_digits"]
    sizes = top.config["store_sizes"]
    rng = np.random.default_rng(5)
    w = cc.memory_map["conv0.w"]                        # 3 x 3 x 1 x 16
    b = cc.memory_map["conv0.b"]
    spare = sizes["scratch"] - 3000                     # a weight copy and a gradient
    prog = [
        Random("perturb8", w.size // 16, 16, View("scratch", spare, 16, 1),
               View("param", w.base, 16, 1), View("act", sizes["act"] - 1, 1, 1), 0, 1),
        Random("perturb32", 1, b.size, View("scratch", spare + w.size, b.size, 1),
               View("param", b.base, b.size, 1), View("act", sizes["act"] - 1, 1, 1),
               w.size, 64),
        Random("raccum", 8, 40, View("scratch", spare + 2000, 40, 1),
               View("act", sizes["act"] - 2, 0, 0), View("act", sizes["act"] - 3, 1, 1), 77),
        Random("runif", 40, 8, View("scratch", spare + 2400, 1, 40),
               View("scratch", spare + 2000, 1, 40), View("act", sizes["act"] - 3, 1, 1), 5),
        End(),
    ]
    q = cnn_models()["digits"]
    x = rng.integers(-128, 128, (CNN_BATCH, *q.cfg.input_shape))
    image = pad_image(cc.initial_image(x, rng.integers(0, 10, CNN_BATCH)), sizes)
    image["act"][-3:] = [0xDEADBEEF, np.float32(-0.375).view(np.uint32), 12345]
    image["scratch"][spare + 2000:spare + 2320] = np.float32(rng.normal(size=320)).view(np.uint32)
    program = Program(prog, sizes)
    want, st = interpreter.run(program, image)
    assert st.error == 0, st.message
    assert not np.array_equal(want["scratch"][spare:spare + w.size], image["param"][w.base:w.base
                                                                                   + w.size])
    sess = TopSession()
    sess.write_image(image)
    sess.program(program.words())
    sess.run("prng", expect=want)
    res = run_top(top, sess, test_dir=tmp_path, timeout=600)
    assert [r["error_code"] for r in res] == [0]


# the multi-step protocol (only the batch, the seeds and any per-step constants change)
# runs 5 steps of joint WP and 2 of the mixed (random masks: per-step constants) and in-place
# programs; one step each of the layer-wise WP, NP and sparse NP programs, every word compared
@pytest.mark.parametrize("name, steps", [("zo_digits", 5), ("zo_digits_lw", 1),
                                         ("zo_digits_np", 1), ("zo_digits_mixed", 2),
                                         ("zo_digits_sparse", 1), ("zo_digits_inplace", 2)])
def test_zo_steps_bit_exact_on_the_chip(top, tmp_path, name, steps):
    """Whole compiled ZO steps (golden/zo_compiler.py) of the digits preset on the top: the
    unperturbed pass, the perturbed queries (weights, or with node perturbation the layers'
    outputs, regenerated from seed words by the PRNG ops), the regenerated estimate (NP: the
    output gradients, the straight-through mask and the local FP32 weight-gradient
    contractions) and the integer update; the host writes only a new batch and
    the step's seeds between steps. Every store word after every step equals the golden
    interpreter, whose parameters equal ``zo.zo_step`` (tests/test_zo_compiler.py)."""
    from ttrain.golden import zo
    cz = zo_programs()[name]
    q = cnn_models()["digits"]
    sizes = top.config["store_sizes"]
    rng = np.random.default_rng(21)
    sess = TopSession()
    sess.program(cz.program.words())
    image, golden = None, q.copy()
    for step in range(steps):
        x = rng.integers(-128, 128, (CNN_BATCH, *q.cfg.input_shape))
        y = rng.integers(0, q.cfg.classes, CNN_BATCH)
        if image is None:
            image = pad_image(cz.initial_image(x, y, step), sizes)
            sess.write_image(image)
        else:       # only the batch and seed regions change (random masks: the constants)
            cz.set_step(image, x, y, step)
            for region in cz.step_regions():
                r = cz.memory_map[region]
                sess.write(r.store, r.base, image[r.store][r.base:r.base + r.size])
        want, st = interpreter.run(cz.program, image)
        assert st.error == 0, st.message
        zo.zo_step(golden, x, y, ZO_CHIP[name], step)
        assert all(np.array_equal(cz.params(want).w[n], golden.w[n]) for n in golden.w)
        sess.run(f"{name}_{step}", expect=want)
        image = want
    assert any(not np.array_equal(golden.w[n], q.w[n]) for n in q.w)
    res = run_top(top, sess, test_dir=tmp_path, timeout=900)
    assert [r["error_code"] for r in res] == [0] * steps
    print(f"{name}: cycles per step {[r['cycles'] for r in res]}")


def test_illegal_integer_instructions_raise_the_error_flag_and_change_nothing(top, tmp_path):
    """A ZO step with one integer/PRNG instruction made illegal (iadd saturation width 0,
    perturb8 sigma 0, f2i reserved immediate bits): the chip stops at it with the golden's
    error code and pc, every store word unchanged (the decode check runs before the first
    instruction); then the valid step runs bit-exact."""
    from ttrain.golden.isa import ERR_FIELD, decode_program
    cz = zo_programs()["zo_digits"]
    q = cnn_models()["digits"]
    sizes = top.config["store_sizes"]
    rng = np.random.default_rng(4)
    x = rng.integers(-128, 128, (CNN_BATCH, *q.cfg.input_shape))
    image = pad_image(cz.initial_image(x, rng.integers(0, 10, CNN_BATCH)), sizes)
    words = cz.program.words()
    instrs = decode_program(words)
    sess = TopSession()
    sess.write_image(image)
    codes = []
    for op, word, value in (("iadd", 3, 0), ("perturb8", 0, None), ("f2i", 3, 2)):
        k = next(i for i, ins in enumerate(instrs) if ins.mnemonic == op)
        bad = np.array(words, dtype=np.uint32)
        if value is None:                         # flags (sigma) = 0
            bad[16 * k] &= np.uint32(~0xFF00 & 0xFFFFFFFF)
        else:
            bad[16 * k + word] = value
        after, st = interpreter.run(bad, image)
        assert st.error == ERR_FIELD and st.error_pc == k, (op, st.message)
        assert all(np.array_equal(after[s], image[s]) for s in image)
        codes.append(st.error)
        sess.program(bad)
        sess.run(f"bad_{op}", expect=image, error=1, code=st.error, pc=k)
    want, st = interpreter.run(cz.program, image)
    assert st.error == 0
    sess.program(words)
    sess.run("valid", expect=want)
    res = run_top(top, sess, test_dir=tmp_path, timeout=600)
    assert [r["error_code"] for r in res] == codes + [0]
    assert all(r["executed"] == 0 for r in res[:3])
