"""The compiled int8 CNN forward pass (golden/cnn_compiler.py) on the golden interpreter equals
the golden integer model node for node and its FP32 losses bit for bit."""

import numpy as np
import pytest

from ttrain.golden import interpreter, qnn
from ttrain.golden.cnn_compiler import compile_cnn_forward

from shared_top import CNN_BATCH, cnn_models


@pytest.mark.parametrize("name, batch", [("parts", CNN_BATCH), ("parts", 1), ("digits", 3)])
def test_compiled_forward_equals_the_integer_model(name, batch):
    q = cnn_models()[name]
    rng = np.random.default_rng(batch)
    x = rng.integers(-128, 128, (batch, *q.cfg.input_shape))
    y = rng.integers(0, q.cfg.classes, batch)
    cc = compile_cnn_forward(q, batch)
    out, st = interpreter.run(cc.program, cc.initial_image(x, y))
    assert st.error == 0, st.message
    acts = qnn.int_forward(q, x)
    for i, n in enumerate(q.cfg.nodes):
        assert np.array_equal(cc.node_output(out, i), acts[i]), n.name
    losses = qnn.sample_losses(qnn.dequantize_logits(q, acts[-1]), y)
    assert np.array_equal(cc.losses(out).view(np.uint32), losses.view(np.uint32))
    assert cc.mean_loss(out).view(np.uint32) == qnn.mean_loss(losses).view(np.uint32)
    # the integer path really ran: integer CONTRACTs and requant instructions
    ops = [i.mnemonic for i in cc.program.instructions]
    assert "requant" in ops and "i2f" in ops
    assert any(getattr(i, "desc", None) is not None and i.desc.integer
               for i in cc.program.instructions)


def test_bad_batch_and_inputs_are_named():
    q = cnn_models()["parts"]
    with pytest.raises(ValueError, match="batch must be a positive integer"):
        compile_cnn_forward(q, 0)
    cc = compile_cnn_forward(q, 2)
    with pytest.raises(ValueError, match="x must have shape"):
        cc.initial_image(np.zeros((3, 5, 5, 2), int), np.zeros(3, int))
    with pytest.raises(ValueError, match="labels must be 2 integers"):
        cc.initial_image(np.zeros((2, 5, 5, 2), int), np.array([0, 7]))


def test_mcunet_scale_forward_is_exact_on_the_interpreter():
    """The MCUNet-scale preset (depthwise convolutions, residual adds, 42 nodes) compiles and its
    interpreted forward pass equals the integer model (memory and cycle figures only: never
    trained)."""
    cfg = qnn.get_cnn_config("mcunet-s")
    rng = np.random.default_rng(0)
    q = qnn.quantize(qnn.FloatCNN(cfg, seed=0),
                     rng.uniform(0, 1, (4, *cfg.input_shape)).astype(np.float32))
    cc = compile_cnn_forward(q, 1)
    x = rng.integers(-128, 128, (1, *cfg.input_shape))
    out, st = interpreter.run(cc.program, cc.initial_image(x, np.array([3])))
    # padded positions are skipped (they add 0); adds and pooling add a few contraction MACs
    assert st.error == 0 and 0.9 * cfg.macs < st.macs < 1.05 * cfg.macs
    acts = qnn.int_forward(q, x)
    assert all(np.array_equal(cc.node_output(out, i), acts[i]) for i in range(len(cfg.nodes)))
