"""Low-rank training on the simulated chip (Verilator, the shared 4-lane top): the compiled
per-sample and read-out programs (golden/lrt_compiler.py) of the pre-trained digits-mlp on a
digits-drift stream, every store word after every program equal to the golden interpreter
(whose numbers equal golden.lrt_online's, tests/test_lrt_compiler.py); and an illegal mask
instruction raising the error flag with nothing changed."""

import numpy as np
import pytest

from ttrain.golden import drift, interpreter
from ttrain.golden.lrt_model import quantize_input
from ttrain.platforms.sim.top import TopSession, pad_image, run_top

from shared_top import LRT_BATCH, lrt_models, shared_top

SAMPLES = 6


@pytest.fixture(scope="module")
def top():
    return shared_top()


@pytest.mark.parametrize("name", ["lrt_unbiased_max", "lrt_biased"])
def test_online_samples_and_readouts_bit_exact_on_the_chip(top, tmp_path, name):
    """Six samples with a read-out after every third: the host writes only the sample (pixels,
    one-hot label, sign seeds) between runs and swaps the program for each read-out; every
    read-out writes the weights (so the write rule, the saturated write, the counters and the
    reset all run), and every store word after every run is the interpreter's."""
    model, compiled = lrt_models()
    st, cl = compiled[name]
    sizes = top.config["store_sizes"]
    stream = drift.make_stream(2, segments=1, segment_len=12, ramp=4)
    xs = quantize_input(stream.images)
    image = pad_image(cl.initial_image(model), sizes)
    sess = TopSession()
    sess.write_image(image)
    sample_words, readout_words = cl.sample.words(), cl.readout.words()
    sess.program(sample_words)
    runs, written = [], []
    for i in range(SAMPLES):
        cl.set_sample(image, xs[i], int(stream.labels[i]), i)
        for region in ("x", "onehot", "seeds"):
            r = cl.memory_map[region]
            sess.write(r.store, r.base, image[r.store][r.base:r.base + r.size])
        image, res = interpreter.run(cl.sample, image)
        assert res.error == 0, res.message
        sess.run(f"{name}_sample{i}", expect=image)
        runs.append("sample")
        if (i + 1) % LRT_BATCH == 0:
            sess.program(readout_words)
            image, res = interpreter.run(cl.readout, image)
            assert res.error == 0, res.message
            sess.run(f"{name}_readout{i}", expect=image)
            runs.append("readout")
            written.append([int(cl.get_f32(image, f"written{l}")[0]) for l in range(2)])
            sess.program(sample_words)
    assert written == [[1, 1]] * (SAMPLES // LRT_BATCH)
    assert any(np.any(c > 0) for c in cl.counters(image))
    res = run_top(top, sess, test_dir=tmp_path, timeout=900)
    assert [r["error_code"] for r in res] == [0] * len(runs)
    cyc = {k: [r["cycles"] for r, kind in zip(res, runs) if kind == k] for k in set(runs)}
    print(f"{name}: cycles per sample {cyc['sample']}, per read-out {cyc['readout']}")


def test_illegal_mask_instruction_raises_the_error_flag_and_changes_nothing(top, tmp_path):
    """The sample program with one fcmp's predicate set to the undefined 3: the chip stops at
    it with ERR_FIELD at the golden's pc before anything runs; then the valid program runs
    bit-exact."""
    from ttrain.golden.isa import ERR_FIELD, decode_program
    model, compiled = lrt_models()
    st, cl = compiled["lrt_biased"]
    sizes = top.config["store_sizes"]
    stream = drift.make_stream(2, segments=1, segment_len=12, ramp=4)
    image = pad_image(cl.initial_image(model), sizes)
    cl.set_sample(image, quantize_input(stream.images)[0], int(stream.labels[0]), 0)
    words = cl.sample.words()
    instrs = decode_program(words)
    k = next(i for i, ins in enumerate(instrs) if ins.mnemonic == "fcmp")
    bad = np.array(words, dtype=np.uint32)
    bad[16 * k + 3] = 3
    after, res = interpreter.run(bad, image)
    assert res.error == ERR_FIELD and res.error_pc == k
    assert all(np.array_equal(after[s], image[s]) for s in image)
    sess = TopSession()
    sess.write_image(image)
    sess.program(bad)
    sess.run("bad_fcmp", expect=image, error=1, code=ERR_FIELD, pc=k)
    want, res = interpreter.run(cl.sample, image)
    assert res.error == 0
    sess.program(words)
    sess.run("valid", expect=want)
    out = run_top(top, sess, test_dir=tmp_path, timeout=600)
    assert [r["error_code"] for r in out] == [ERR_FIELD, 0]
    assert out[0]["executed"] == 0
