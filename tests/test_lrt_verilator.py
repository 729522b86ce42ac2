"""Low-rank training on the simulated chip (Verilator, the shared 4-lane top): the compiled
per-sample and read-out programs (golden/lrt_compiler.py) of the pre-trained digits-mlp on a
digits-drift stream equal to the golden interpreter (whose numbers equal golden.lrt_online's,
tests/test_lrt_compiler.py); the Jacobi SVD program alone on random and ill-conditioned
matrices; an illegal mask instruction raising the error flag with nothing changed."""

import numpy as np
import pytest

from ttrain.golden import drift, interpreter
from ttrain.golden.lrt_model import quantize_input
from ttrain.platforms.sim.top import TopSession, pad_image, run_top

from shared_top import (LRT_BATCH, LRT_CNN_BATCH, SBN_BATCH, SVD_COUNT, lrt_cnn, lrt_models,
                        sbn_program, shared_top, svd_program)


@pytest.fixture(scope="module")
def top():
    return shared_top()


def _play(top, tmp_path, name, samples, readout_every, compiled=None):
    """Stream ``samples`` samples, a read-out after every ``readout_every``-th (``compiled``:
    ``(model, programs)``, default the digits-mlp programs ``name``; a convolutional model's
    two read-out programs run by their schedule): the host writes only the sample (pixels,
    one-hot label, sign seeds) between runs and swaps the program for each read-out. The
    logits of every sample (the prediction) and the parameter store (weights, biases,
    counters, accumulators) after every run, and every store word after every read-out and the
    last sample, are compared with the interpreter's."""
    if compiled is None:
        model, programs = lrt_models()
        cl = programs[name][1]
        schedule = [("readout", readout_every, list(range(len(cl.shapes))))]
    else:
        model, cl = compiled
        schedule = cl.readout_schedule
    sizes = top.config["store_sizes"]
    stream = drift.make_stream(2, segments=2, segment_len=samples // 2,
                               ramp=max(1, samples // 4))
    xs = quantize_input(stream.images)
    image = pad_image(cl.initial_image(model), sizes)
    sess = TopSession()
    sess.write_image(image)
    words = {k: p.words() for k, p in cl.programs.items()}
    sample_words = words["sample"]
    sess.program(sample_words)
    lg = cl.memory_map["logits"]
    runs, written = [], []
    for i in range(samples):
        cl.set_sample(image, xs[i], int(stream.labels[i]), i)
        for region in ("x", "onehot", "seeds"):
            r = cl.memory_map[region]
            sess.write(r.store, r.base, image[r.store][r.base:r.base + r.size])
        image, res = interpreter.run(cl.sample, image)
        assert res.error == 0, res.message
        sess.run(f"{name}_sample{i}", expect=image if i == samples - 1 else None,
                 expect_at=[("param", 0, image["param"]),
                            (lg.store, lg.base, image[lg.store][lg.base:lg.base + lg.size])])
        runs.append("sample")
        done = False
        for prog, every, layers in schedule:
            if (i + 1) % every:
                continue
            sess.program(words[prog])
            image, res = interpreter.run(cl.programs[prog], image)
            assert res.error == 0, res.message
            sess.run(f"{name}_{prog}{i}", expect=image)
            runs.append("readout")
            written.append([int(cl.get_f32(image, f"written{l}")[0]) for l in layers])
            done = True
        if done:
            sess.program(sample_words)
    res = run_top(top, sess, test_dir=tmp_path, timeout=1200)
    assert [r["error_code"] for r in res] == [0] * len(runs)
    cyc = {k: sorted({r["cycles"] for r, kind in zip(res, runs) if kind == k})
           for k in set(runs)}
    print(f"{name}: cycles per sample {cyc['sample']}, per read-out {cyc['readout']}")
    skipped = [int(cl.get_f32(image, f"skipped{l}")[0]) for l in range(len(cl.shapes))]
    return cl, image, written, skipped


def test_thirty_streamed_samples_with_readouts_that_write_bit_exact_on_the_chip(top, tmp_path):
    """The unbiased reduction with max-norm (random signs, Householder mixing, max-norm state)
    over 30 samples of a drifting stream, read out after samples 15 and 30 (the shortest
    stream of this shape on which both read-outs write and the check skips; 50 samples took
    86 s of the suite); both read-outs
    write both layers' weights (the write rule, the saturated write, the counters and the
    reset run), and the condition check skips samples (the skip path keeps the old state)."""
    cl, image, written, skipped = _play(top, tmp_path, "lrt_unbiased_max", 30, 15)
    assert written == [[1, 1], [1, 1]]
    assert all(np.any(c > 0) for c in cl.counters(image))
    assert all(k > 0 for k in skipped), skipped


def test_biased_reduction_bit_exact_on_the_chip(top, tmp_path):
    """The biased (top-r) reduction without norm, read out every third sample."""
    cl, image, written, skipped = _play(top, tmp_path, "lrt_biased", 6, LRT_BATCH)
    assert written == [[1, 1], [1, 1]]


def test_convolutional_model_samples_and_both_readouts_bit_exact_on_the_chip(top, tmp_path):
    """A small CNN (tests/shared_top.py: two 4-pixel conv layers, one pixel LOOP of their
    rankReduces): im2col and col2im LOOPs, per-pixel sign seeds and skips, the conv and the
    dense read-out programs, both writing every layer; every store word compared after each
    read-out and the last sample."""
    model, _, cl = lrt_cnn()
    assert cl.pixels == [4, 4, 1, 1]
    assert [(n, p) for n, p, _ in cl.readout_schedule] == [("readout_conv", LRT_CNN_BATCH),
                                                          ("readout", LRT_CNN_BATCH)]
    cl, image, written, skipped = _play(top, tmp_path, "lrt_cnn", LRT_CNN_BATCH, None,
                                        compiled=(model, cl))
    assert written == [[1, 1], [1, 1]]
    assert skipped[0] > 0 and skipped[1] > 0, skipped


def test_jacobi_svd_program_on_random_and_ill_conditioned_matrices(top, tmp_path):
    """The fixed-sequence Jacobi SVD alone (the emitted code of the per-sample program) on
    random normal, condition-1e6, rank-deficient and zero matrices: U, sigma and V on the chip
    equal golden.svd.jacobi_svd bit for bit."""
    from ttrain.golden.svd import jacobi_svd
    cs = svd_program()
    q = cs.q
    rng = np.random.default_rng(11)
    m = rng.standard_normal((SVD_COUNT, q, q)).astype(np.float32)
    for i, lo in ((1, -6), (2, -3)):
        q1, q2 = (np.linalg.qr(rng.standard_normal((q, q)))[0] for _ in range(2))
        m[i] = (q1 @ (np.logspace(0, lo, q)[:, None] * q2)).astype(np.float32)
    m[3][:, 2] = 0                                             # rank deficient
    m[4] = 0
    m[4][0, 0] = 3.0
    m[5] = 0                                                   # all zero
    m[6] = np.diag([4, 3, 2, 1, 0]) + np.outer(rng.standard_normal(q), rng.standard_normal(q))
    image = pad_image(cs.image(m), top.config["store_sizes"])
    want, res = interpreter.run(cs.program, image)
    assert res.error == 0
    U, s, V = cs.result(want)
    for a, b in zip((U, s, V), jacobi_svd(m)):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    sess = TopSession()
    sess.write_image(image)
    sess.program(cs.program.words())
    sess.run("svd", expect=want)
    out = run_top(top, sess, test_dir=tmp_path, timeout=600)
    assert out[0]["error_code"] == 0
    print(f"Jacobi SVD of {SVD_COUNT} 5x5 matrices: {out[0]['cycles']} cycles")


def test_streaming_batch_norm_program_over_a_stream(top, tmp_path):
    """Streaming batch norm alone (``compile_streaming_bn``): 12 samples through one loaded
    program, the host writing only each sample's input; the output and the 16-bit stream
    statistics after every sample equal ``golden.lrt.StreamingBatchNorm`` (the last samples'
    means beyond the 16-bit range [-8, 8) saturate), every store word after the last."""
    from ttrain.golden import lrt
    cs = sbn_program()
    ref = lrt.StreamingBatchNorm(cs.channels, SBN_BATCH)
    rng = np.random.default_rng(12)
    image = pad_image(cs.initial_image(), top.config["store_sizes"])
    sess = TopSession()
    sess.program(cs.program.words())
    xr = cs.program.memory_map["sbn.x"]
    saturated = False
    for t in range(12):
        x = rng.normal(1.0 * t, 1.0 + 0.3 * t, (cs.pixels, cs.channels)).astype(np.float32)
        cs.set_sample(image, x)
        if t == 0:
            sess.write_image(image)
        else:
            sess.write(xr.store, xr.base, image[xr.store][xr.base:xr.base + xr.size])
        want, st = interpreter.run(cs.program, image)
        assert st.error == 0
        y = ref.update(x)
        assert np.array_equal(cs.output(want).view(np.uint32), np.float32(y).view(np.uint32))
        assert np.array_equal(cs.get(want, "sbn.mu_s").view(np.uint32), ref.mu_s.view(np.uint32))
        saturated |= bool(np.any(ref.mu_s >= 8 - 2.0 ** -12))
        checks = [(r.store, r.base, want[r.store][r.base:r.base + r.size])
                  for n, r in cs.program.memory_map.items() if n.startswith("sbn.")]
        sess.run(f"sbn{t}", expect=want if t == 11 else None, expect_at=checks)
        image = want
    assert saturated
    out = run_top(top, sess, test_dir=tmp_path, timeout=600)
    assert [r["error_code"] for r in out] == [0] * 12
    print(f"streaming batch norm, {cs.pixels} x {cs.channels}: cycles per sample "
          f"{[r['cycles'] for r in out]}")


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
