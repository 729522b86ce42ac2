"""Low-rank training compiled into the per-sample and read-out programs
(golden/lrt_compiler.py), run on the golden interpreter: every state word after every sample
equals golden.lrt's rankReduce, and whole online runs equal golden.lrt_online.run_online's
(accuracies, weights, biases, writes per cell, skipped samples) for the four variants, for the
dense digits-mlp and for convolutional models (one rankReduce per output pixel)."""

from dataclasses import replace

import numpy as np
import pytest

from ttrain.golden import drift, lrt, lrt_model, lrt_online
from ttrain.golden.interpreter import run
from ttrain.golden.isa import ERR_FIELD, Elementwise, End, encode_program
from ttrain.golden.contract import View
from ttrain.golden.lrt_compiler import InterpretedLRT, compile_lrt
from ttrain.golden.lrt_model import A_FRAC, G_FRAC, quantize_input
from ttrain.golden.qnn import CNNConfig, Conv, GlobalPool, Linear
from ttrain.golden.quant import i2f
from ttrain.golden.svd import jacobi_svd

F32 = np.float32


def _model():
    return lrt_model.pretrained_mlp(0)[0]


def _bits_equal(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind == "f" or b.dtype.kind == "f":
        return np.array_equal(a.astype(F32).view(np.uint32), b.astype(F32).view(np.uint32))
    return np.array_equal(a, b)


@pytest.mark.parametrize("variant", lrt.VARIANTS)
def test_every_state_word_equals_golden_rank_reduce_after_every_sample(variant):
    """The forward/backward pass of the sample program and its rankReduce of both layers
    against golden (logits, biases and the 16-bit bases, steps and c_x, bit for bit)."""
    model = _model()
    s = lrt_online.OnlineSettings("lrt", variant, "none", batch=1000, seed=7)
    chip = InterpretedLRT(model.copy(), s)
    stream = drift.make_stream(0, segments=1, segment_len=40, ramp=10)
    xs = quantize_input(stream.images)
    states = [lrt.new_state(*w.shape, s.rank) for w in model.w]
    skipped = 0
    for i in range(8):
        y = int(stream.labels[i])
        logits = chip.sample(xs[i], y, i)
        acts, ref = model.forward(xs[i:i + 1])
        assert _bits_equal(logits, ref[0])
        g = model.backward(acts, ref, [y])
        dzs = [np.multiply(i2f(g[l][0]), F32(2.0 ** -G_FRAC)) for l in range(2)]
        avs = [np.multiply(i2f(acts[l][0]), F32(2.0 ** -A_FRAC)) for l in range(2)]
        projs = [lrt.project(states[l], dzs[l], avs[l]) for l in range(2)]
        U, sig, V = jacobi_svd(np.stack([lrt.core(states[l], projs[l]) for l in range(2)]))
        for l in range(2):
            states[l] = lrt.reduce_rotate(states[l], projs[l], U[l], sig[l], V[l], variant,
                                          lrt.sign_seed(s.seed, l, i))
            skipped += int(projs[l].skip)
            got = chip.cl.state(chip.image, l)
            for f in ("ql", "sl", "qr", "sr", "cx"):
                assert _bits_equal(getattr(got, f), getattr(states[l], f)), (i, l, f)
        # the bias update is the golden rule's (run_online's, checked here once per sample)
        for l in range(2):
            db = lrt_model.f2i(np.multiply(np.multiply(F32(s.bias_lr), dzs[l]), F32(4096)))
            model.b[l] = lrt_model.saturate(model.b[l] - db, 16)
        assert all(np.array_equal(a, b) for a, b in zip(chip.biases(), model.b))
    assert np.any(states[0].cx > 0)
    assert sum(chip.skipped()) == skipped


@pytest.mark.parametrize("label, lr, rank", [("lrt biased/none", 0.03, 4),
                                             ("lrt biased/max", 0.003, 4),
                                             ("lrt unbiased/none", 0.03, 4),
                                             ("lrt unbiased/max", 0.003, 4),
                                             ("lrt unbiased/max", 0.003, 3)])
def test_online_runs_on_the_compiled_programs_equal_the_golden_loop(label, lr, rank):
    """Read-outs every 6 samples with rates high enough that weights are written: the write
    rule, the saturated write, max-norm, the write counters and the accumulator reset (rank
    3: the 16-bit bases' rows end in a half-used word)."""
    s = replace(lrt_online.BENCHMARK_RUNS[label], lr=lr, batch=6, rank=rank)
    stream = drift.make_stream(1, segments=2, segment_len=18, ramp=6)
    m_gold, m_chip = _model(), _model()
    a = lrt_online.run_online(m_gold, stream, s)
    b = lrt_online.run_online(m_chip, stream, s, stepper=InterpretedLRT)
    a.pop("cpu_s"), b.pop("cpu_s")
    assert a == b
    assert sum(L["weight_writes"] for L in a["layers"]) > 0          # weights were written
    assert all(L["readouts"] == 6 for L in a["layers"])
    for x, y in zip(m_gold.w + m_gold.b, m_chip.w + m_chip.b):
        assert np.array_equal(x, y)


#: Two pixel groups (9 and 4 output pixels, one LOOP each), a strided padded convolution, an
#: unpadded one that still gathers patches, one over the whole map and a dense read-out.
SMALL_CNN = CNNConfig(
    name="lrt-cnn-test", input_shape=(8, 8, 1), classes=10,
    layers=(Conv(4, k=3, stride=3, pad=1), Conv(4, k=2, stride=1, pad=0),
            Conv(8, k=2, stride=1, pad=0), GlobalPool(), Linear(10)), note="test")


def test_conv_online_runs_on_the_compiled_programs_equal_the_golden_loop():
    """im2col and col2im as LOOPs, the per-pixel rankReduce LOOPs with their per-pixel sign
    seeds (the unbiased reduction), the bias update from the pixels' sum, max-norm and the two
    read-out programs (conv layers every 2 images, dense every 4): the whole run equals the
    golden loop's, every read-out writing and the condition check skipping pixels."""
    s = replace(lrt_online.BENCHMARK_RUNS["lrt unbiased/max"], lr=0.01, conv_batch=2, batch=4)
    stream = drift.make_stream(1, segments=2, segment_len=4, ramp=2)
    model = lrt_model.random_fixed_cnn(SMALL_CNN, 0, weight_range=40)
    assert model.pixels == [9, 4, 1, 1]
    a = lrt_online.run_online(model.copy(), stream, s)
    b = lrt_online.run_online(model.copy(), stream, s, stepper=InterpretedLRT)
    a.pop("cpu_s"), b.pop("cpu_s")
    assert a == b
    assert [(L["readouts"], L["weight_writes"]) for L in a["layers"]] == [(4, 4), (4, 4),
                                                                           (2, 2), (2, 2)]
    assert a["layers"][0]["skipped"] > 0 and a["layers"][1]["skipped"] > 0


def test_conv_preset_samples_on_the_compiled_programs_equal_the_golden_loop():
    """The pre-trained digits-lrt-cnn (its two 16-pixel conv layers in one LOOP) over two
    samples and a conv read-out."""
    s = replace(lrt_online.BENCHMARK_RUNS["lrt unbiased/max"], lr=0.01, conv_batch=2)
    stream = drift.make_stream(0, segments=1, segment_len=2, ramp=1)
    model = lrt_model.pretrained("digits-lrt-cnn", 0)[0]
    a = lrt_online.run_online(model.copy(), stream, s)
    b = lrt_online.run_online(model.copy(), stream, s, stepper=InterpretedLRT)
    a.pop("cpu_s"), b.pop("cpu_s")
    assert a == b and [L["readouts"] for L in a["layers"]] == [1, 1, 0, 0]


def test_compile_rejects_other_rules_and_mismatched_layers():
    with pytest.raises(ValueError, match="compiles the lrt rule, not 'sgd'"):
        compile_lrt([(10, 64)], lrt_online.OnlineSettings("sgd"))
    with pytest.raises(ValueError, match="layer 1 takes 32 inputs but layer 0 gives 64"):
        compile_lrt([(64, 64), (10, 32)], lrt_online.OnlineSettings())
    geo = list(lrt_model.random_fixed_cnn(SMALL_CNN).geometry)
    shapes = [(g.cout, g.k * g.k * g.cin) for g in geo]
    with pytest.raises(ValueError, match=r"layer 1: shape \(4, 17\) is not its geometry's"):
        compile_lrt([shapes[0], (4, 17)] + shapes[2:], lrt_online.OnlineSettings(), geo)
    with pytest.raises(ValueError, match="layer 1 reads a 2x2x4 map but layer 0 gives 3x3x4"):
        compile_lrt(shapes[:1] + shapes[2:], lrt_online.OnlineSettings(), geo[:1] + geo[2:])
    with pytest.raises(ValueError, match="the last layer must have one output pixel"):
        compile_lrt(shapes[:2], lrt_online.OnlineSettings(), geo[:2])
    with pytest.raises(ValueError, match="compiled online programs run the lrt rule"):
        lrt_online.run_online(_model(), drift.make_stream(0, segments=1, segment_len=4, ramp=2),
                              lrt_online.OnlineSettings("sgd"), stepper=InterpretedLRT)


def test_programs_and_memory_map():
    """One map for both programs; the accumulator is r (n_o + n_i) 16-bit words per layer
    (two to a 32-bit word) plus r + 1 FP32 words and the counters."""
    cl = compile_lrt(_model().shapes, lrt_online.OnlineSettings("lrt", "unbiased", "max"))
    mm = cl.memory_map
    assert cl.sample.store_sizes == cl.readout.store_sizes
    assert mm["ql0"].size == 64 * 2 and mm["qr0"].size == 64 * 2 and mm["cx0"].size == 4
    assert mm["ql1"].size == 10 * 2 and mm["qr1"].size == 64 * 2
    assert mm["cnt0"].size == 64 * 64 and mm["cnt1"].size == 10 * 64
    ops = {type(i).__name__ for i in cl.sample.instructions}
    assert {"Contract", "Elementwise", "Reduce", "Random"} <= ops
    used = {i.op for i in cl.sample.instructions if isinstance(i, Elementwise)}
    assert {"fcmp", "bitop", "rsqrt", "recip", "requant", "iadd", "f2i", "i2f", "ext16",
            "ins16"} <= used


@pytest.mark.parametrize("op, imm", [("fcmp", 3), ("bitop", 4)])
def test_mask_ops_reject_bad_immediates(op, imm):
    """A program word with an undefined predicate/function is refused with ERR_FIELD at its pc
    before anything runs, so no word is written (the constructor refuses to build one)."""
    v = View("scratch", 0, 1, 1)
    with pytest.raises(ValueError, match=f"{op} immediate"):
        Elementwise(op, 1, 2, v, v, v, imm)
    words = encode_program([Elementwise("fill", 1, 4, v, imm=7),
                            Elementwise(op, 1, 2, v, v, v, 0), End()])
    words[16 + 3] = imm
    image = {"scratch": np.zeros(4, np.uint32)}
    out, st = run(words, image)
    assert st.error == ERR_FIELD and st.error_pc == 1
    assert out["scratch"].tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize("pixels, channels, batch", [(6, 5, 4), (1, 7, 10), (16, 3, 100)])
def test_streaming_batch_norm_program_equals_the_golden_rule(pixels, channels, batch):
    """``compile_streaming_bn`` on the interpreter: 12 samples (means drifting past the
    16-bit statistics' range, so the store saturates), the output and both statistics after
    each equal ``golden.lrt.StreamingBatchNorm`` bit for bit; a dense layer (one pixel) has
    zero sample variance."""
    from ttrain.golden import interpreter, lrt
    from ttrain.golden.lrt_compiler import compile_streaming_bn
    cs = compile_streaming_bn(pixels, channels, batch)
    ref = lrt.StreamingBatchNorm(channels, batch)
    image = cs.initial_image()
    rng = np.random.default_rng(pixels)
    for t in range(12):
        x = rng.normal(1.5 * t, 1.5, (pixels, channels)).astype(np.float32)
        cs.set_sample(image, x)
        image, st = interpreter.run(cs.program, image)
        assert st.error == 0, st.message
        y = np.asarray(ref.update(x), np.float32).reshape(pixels, channels)
        assert np.array_equal(cs.output(image).view(np.uint32), y.view(np.uint32)), t
        for name, want in (("sbn.mu_s", ref.mu_s), ("sbn.sq_s", ref.sq_s)):
            assert np.array_equal(cs.get(image, name).view(np.uint32), want.view(np.uint32))
    assert np.all(ref.sq_s == np.float32(32767 * 2.0 ** -12))          # saturated


def test_streaming_batch_norm_program_rejects_bad_shapes():
    from ttrain.golden.lrt_compiler import compile_streaming_bn
    with pytest.raises(ValueError, match="positive integer pixels"):
        compile_streaming_bn(0, 4, 10)
    cs = compile_streaming_bn(2, 3, 10)
    with pytest.raises(ValueError, match="normalizes 2 x 3 samples"):
        cs.set_sample(cs.initial_image(), np.zeros((3, 3)))
