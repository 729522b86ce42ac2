"""The fixed-point digits MLP that low-rank training adapts online (the paper's FC experiments).

Model ``digits-mlp``: the 8x8 digit (64 pixels, row-major) -> dense 64 (ReLU) -> dense 10
logits. It is registered nowhere in :mod:`ttrain.golden.qnn`; :data:`MLP_CONFIG` writes it as a
:class:`~ttrain.golden.qnn.CNNConfig` (an 8x8 convolution without padding is a dense layer on
the 64 pixels; the global pool of the 1x1 map is the identity), so the float pre-training of
:func:`ttrain.golden.adapt.pretrain` trains it unchanged.

Formats (the paper's uniform power-of-two quantization, clipping ranges fixed before training;
``algorithms.md`` §5). Every number is an integer times a fixed power-of-two LSB:

===========  ========  ===============  ========  =========================================
quantity     bits      range            LSB       stored as
===========  ========  ===============  ========  =========================================
weights      8 signed  [-1, 1)          2**-7     ``w`` int in [-128, 127]
biases       16 signed [-8, 8)          2**-12    ``b`` int in [-32768, 32767]
activations  8 unsig.  [0, 2)           2**-7     ``a`` int in [0, 255] (input pixels too)
gradients    8 signed  [-1, 1)          2**-7     ``g`` int in [-128, 127]
===========  ========  ===============  ========  =========================================

Forward (:meth:`FixedMLP.forward`), exact integers: ``acc = W a + 4 b`` (units 2**-14; the
bias moved from 2**-12); a hidden layer outputs ``a' = clip(round_shift(acc, 7, HALF_UP), 0,
255)`` (ReLU and the [0, 2) clip in one saturation); the last layer's logits are the FP32
``i2f(acc) * 2**-14`` (exact: ``|acc| < 2**24``).

Backward (:meth:`FixedMLP.backward`): ``p = softmax(logits)`` in FP32 with the special unit's
``exp`` and ``recip`` (max subtracted, sums in index order), ``dz = p - onehot(y)``, quantized
to the gradient format by ``f2i(dz * 128)`` (nearest even, saturating at [-128, 127]); a
hidden layer's gradient is ``round_shift(W^T g, 7, HALF_UP)`` (exact integers, units 2**-14 to
2**-7) saturated to int8 and masked by the straight-through estimator of the ReLU/clip
(``0 < a' < 255``). The per-layer weight gradient is ``dz (x) a`` with ``dz = g * 2**-7`` and
``a = a_in * 2**-7`` (both exact in FP32).

Quantization of the pre-trained float model (:func:`quantize_mlp`): ReLU is positively
homogeneous, so ``(W0 * 2**s, b0 * 2**s, W1 * 2**-s)`` computes the same float function; the
shift ``s`` in -3..3 is chosen by the clean pre-training validation accuracy of the quantized
model (it trades clipping of hidden activations at 2 against their resolution), then weights
and biases are rounded to their LSB (nearest even) and saturated.
"""

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .numerics import Rounding, round_shift, saturate
from .qnn import CNNConfig, Conv, GlobalPool, Linear
from .quant import f2i, i2f
from .special import fp32_special
from .svd import fp32_recip_fast

__all__ = ["W_FRAC", "B_FRAC", "A_FRAC", "G_FRAC", "MLP_CONFIG", "MLP_PRESETS", "FixedMLP",
           "quantize_input", "quantize_mlp", "pretrained_mlp", "mlp_from_float"]

W_FRAC, B_FRAC, A_FRAC, G_FRAC = 7, 12, 7, 7
_ACC_FRAC = W_FRAC + A_FRAC            # 14
_F32 = np.float32

MLP_CONFIG = CNNConfig(
    name="digits-mlp", input_shape=(8, 8, 1), classes=10,
    layers=(Conv(64, k=8, stride=1, pad=0), GlobalPool(), Linear(10)),
    note="fixed-point MLP 64-64-10 for the 8x8 digits (low-rank training, the paper's FC "
         "experiments: power-of-two 8-bit weights/activations/gradients, 16-bit biases)")
MLP_PRESETS = {MLP_CONFIG.name: MLP_CONFIG}


def quantize_input(images):
    """Quantize images in [0, 1] (n, 8, 8) to the activation format: ``f2i(p * 128)``."""
    x = np.asarray(images, dtype=_F32).reshape(len(images), -1)
    return np.clip(f2i(np.multiply(x, _F32(128.0))), 0, 255)


@dataclass
class FixedMLP:
    """Integer parameters of the dense layers: ``w[l]`` (n_o, n_i) int64 in int8 range,
    ``b[l]`` (n_o,) int64 in int16 range; every layer but the last has a ReLU."""
    w: list
    b: list

    def copy(self):
        return FixedMLP([x.copy() for x in self.w], [x.copy() for x in self.b])

    @property
    def shapes(self):
        return [x.shape for x in self.w]

    def forward(self, x):
        """Return ``(acts, logits)``: the int inputs of every layer (``acts[0] = x``) and the
        FP32 logits (n, classes) of int activations ``x`` (n, 64)."""
        acts = [np.asarray(x, dtype=np.int64)]
        for layer, (w, b) in enumerate(zip(self.w, self.b)):
            # float64 products and sums of these integers are exact (|acc| < 2**24).
            acc = np.rint(acts[-1].astype(np.float64) @ w.T.astype(np.float64)).astype(np.int64)
            acc = acc + 4 * b
            if layer == len(self.w) - 1:
                return acts, np.multiply(i2f(acc), _F32(2.0 ** -_ACC_FRAC))
            acts.append(np.clip(round_shift(acc, A_FRAC, Rounding.HALF_UP), 0, 255))

    def predict(self, x):
        return np.argmax(self.forward(x)[1], axis=1)

    def backward(self, acts, logits, labels):
        """Return the int8 output gradients ``g[l]`` (n, n_o) of every layer."""
        z = np.asarray(logits, dtype=_F32)
        m = z[:, :1]
        for j in range(1, z.shape[1]):
            m = np.maximum(m, z[:, j:j + 1])
        e = fp32_special("exp", np.subtract(z, m))
        s = e[:, 0]
        for j in range(1, e.shape[1]):
            s = np.add(s, e[:, j])
        p = np.multiply(e, fp32_recip_fast(s)[:, None])
        p[np.arange(len(p)), np.asarray(labels)] -= _F32(1.0)
        g = [np.clip(f2i(np.multiply(p, _F32(2.0 ** G_FRAC))), -128, 127)]
        for layer in range(len(self.w) - 1, 0, -1):
            back = np.rint(g[0].astype(np.float64) @ self.w[layer].astype(np.float64))
            back = saturate(round_shift(back.astype(np.int64), W_FRAC, Rounding.HALF_UP), 8)
            a = acts[layer]
            g.insert(0, np.where((a > 0) & (a < 255), back, 0))
        return g


def _to_fixed(ws, bs):
    w = [saturate(f2i(np.multiply(x, _F32(2.0 ** W_FRAC))), 8) for x in ws]
    b = [saturate(f2i(np.multiply(x, _F32(2.0 ** B_FRAC))), 16) for x in bs]
    return FixedMLP(w, b)


def mlp_from_float(model, shift=0):
    """Fixed-point model of a float :class:`~ttrain.golden.qnn.FloatCNN` of :data:`MLP_CONFIG`
    with the hidden layer scaled by ``2**shift`` (see the module notes)."""
    w0, b0 = model.params["conv0"]
    w1, b1 = model.params["fc2"]
    w0 = w0.reshape(-1, w0.shape[-1]).T.astype(_F32)        # (64 out, 64 pixels)
    w1 = w1.reshape(-1, w1.shape[-1]).T.astype(_F32)        # (10, 64)
    k = _F32(2.0 ** shift)
    return _to_fixed([np.multiply(w0, k), np.multiply(w1, _F32(1.0) / k)],
                     [np.multiply(b0.astype(_F32), k), b1.astype(_F32)])


def quantize_mlp(model, x_val, y_val, shifts=range(-3, 4)):
    """Return ``(fixed model, shift, validation accuracy)`` with the best hidden-layer shift."""
    xq = quantize_input(x_val)
    best = None
    for s in shifts:
        q = mlp_from_float(model, s)
        acc = float(np.mean(q.predict(xq) == y_val))
        if best is None or acc > best[2]:
            best = (q, s, acc)
    return best


@lru_cache(maxsize=4)
def _pretrained(seed):
    from . import adapt, digits
    model, rec = adapt.pretrain(MLP_CONFIG, seed=seed)
    d = digits.load_digits_clean("pretrain")
    q, shift, val = quantize_mlp(model, d.val.images, d.val.labels)
    test = float(np.mean(q.predict(quantize_input(d.test.images)) == d.test.labels))
    return q, {"float_test": rec["test"], "shift": shift, "fixed_val": val, "fixed_test": test}


def pretrained_mlp(seed=0):
    """The fixed-point ``digits-mlp`` pre-trained on clean digits (float SGD of
    :func:`ttrain.golden.adapt.pretrain`, then :func:`quantize_mlp`); returns a fresh copy
    and the record (float and fixed-point clean test accuracy, the chosen shift). Deterministic
    and cached per seed (a few seconds)."""
    q, rec = _pretrained(int(seed))
    return q.copy(), dict(rec)
