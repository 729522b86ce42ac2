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
           "quantize_input", "quantize_mlp", "pretrained_mlp", "mlp_from_float", "CNN_CONFIG",
           "LRT_PRESETS", "FixedCNN", "cnn_from_float", "quantize_cnn", "pretrained",
           "quantize_fixed", "random_fixed_cnn", "geometry_of"]

W_FRAC, B_FRAC, A_FRAC, G_FRAC = 7, 12, 7, 7
_ACC_FRAC = W_FRAC + A_FRAC            # 14
_F32 = np.float32

MLP_CONFIG = CNNConfig(
    name="digits-mlp", input_shape=(8, 8, 1), classes=10,
    layers=(Conv(64, k=8, stride=1, pad=0), GlobalPool(), Linear(10)),
    note="fixed-point MLP 64-64-10 for the 8x8 digits (low-rank training, the paper's FC "
         "experiments: power-of-two 8-bit weights/activations/gradients, 16-bit biases)")
MLP_PRESETS = {MLP_CONFIG.name: MLP_CONFIG}

#: ``digits-lrt-cnn``: the convolutional model of the paper's conv experiments, in the same
#: formats. Three convolutions (the last one, 4x4 without padding on the 4x4 map, is a dense
#: layer on the flattened map; a global pool of 16 pixels would divide the 8-bit gradients by 16
#: and round most of them to zero), then the dense read-out. Layer shapes (n_o x n_i, output
#: pixels): conv0 8x9 (16), conv1 16x72 (16), conv2 32x256 (1), fc4 10x32 (1).
CNN_CONFIG = CNNConfig(
    name="digits-lrt-cnn", input_shape=(8, 8, 1), classes=10,
    layers=(Conv(8, k=3, stride=2, pad=1), Conv(16, k=3, stride=1, pad=1),
            Conv(32, k=4, stride=1, pad=0), GlobalPool(), Linear(10)),
    note="fixed-point CNN for the 8x8 digits (low-rank training, the paper's conv experiments: "
         "one rankReduce per output pixel, effective batch 10 images for the conv layers)")
#: Every model of the online runs (``--rule lrt`` / ``sgd`` on digits-drift); the compiled chip
#: programs (``golden/lrt_compiler.py``) cover all of them.
LRT_PRESETS = {**MLP_PRESETS, CNN_CONFIG.name: CNN_CONFIG}


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

    @property
    def pixels(self):
        """Output pixels of every layer: 1 (dense layers)."""
        return [1] * len(self.w)

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


# --------------------------------------------------------------------------------------------
# The convolutional model (digits-lrt-cnn)
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Geometry:
    """One layer of :class:`FixedCNN`: a ``k`` x ``k`` convolution with ``stride`` and zero
    ``pad`` from an ``hin`` x ``win`` x ``cin`` map to ``hout`` x ``wout`` x ``cout``."""
    hin: int
    win: int
    cin: int
    k: int
    stride: int
    pad: int
    hout: int
    wout: int
    cout: int

    @property
    def pixels(self):
        return self.hout * self.wout

    def patches(self, maps):
        """im2col of ``maps`` (n, hin, win, cin) ints: (n, pixels, k*k*cin), pixels in raster
        order, a patch in (ky, kx, c) order (the order of :class:`FixedCNN` weight columns)."""
        n = len(maps)
        xp = np.pad(maps, ((0, 0), (self.pad, self.pad), (self.pad, self.pad), (0, 0)))
        out = np.empty((n, self.hout, self.wout, self.k, self.k, self.cin), np.int64)
        s = self.stride
        for ky in range(self.k):
            for kx in range(self.k):
                out[:, :, :, ky, kx, :] = xp[:, ky:ky + s * (self.hout - 1) + 1:s,
                                             kx:kx + s * (self.wout - 1) + 1:s, :]
        return out.reshape(n, self.pixels, -1)

    def fold(self, cols):
        """col2im: the sum (exact integers) of patch gradients ``cols`` (n, pixels,
        k*k*cin) onto the unpadded input map (n, hin, win, cin)."""
        n, s, p = len(cols), self.stride, self.pad
        c = cols.reshape(n, self.hout, self.wout, self.k, self.k, self.cin)
        xp = np.zeros((n, self.hin + 2 * p, self.win + 2 * p, self.cin), np.int64)
        for ky in range(self.k):
            for kx in range(self.k):
                xp[:, ky:ky + s * (self.hout - 1) + 1:s,
                   kx:kx + s * (self.wout - 1) + 1:s, :] += c[:, :, :, ky, kx, :]
        return xp[:, p:p + self.hin, p:p + self.win, :]


def geometry_of(cfg):
    """The layer geometries of a fixed-point LRT model config (a dense layer is a 1x1 map's
    1x1 convolution; ``digits-mlp``'s two layers are that)."""
    return _geometries(cfg)


def _geometries(cfg):
    geo, h, w, c = [], *cfg.input_shape
    for n in cfg.nodes:
        if n.kind == "pool":
            if (h, w) != (1, 1):
                raise ValueError(f"{cfg.name}: a global pool of a {h}x{w} map has no fixed-point "
                                 "definition here (it would divide the 8-bit gradients); use a "
                                 "convolution that covers the map")
            continue
        if n.kind != "conv" or n.groups != 1:
            raise ValueError(f"{cfg.name}: node {n.name} ({n.kind}, groups {n.groups}) is not a "
                             "plain convolution; the fixed-point LRT models have only those")
        geo.append(_Geometry(h, w, c, n.k, n.stride, n.pad, *n.shape))
        h, w, c = n.shape
    return tuple(geo)


@dataclass
class FixedCNN:
    """Integer parameters of a plain convolutional model in the formats of :class:`FixedMLP`:
    ``w[l]`` (cout, k*k*cin) int8 range, columns in (ky, kx, c) order, ``b[l]`` (cout,) int16
    range; ``geometry[l]`` the layer's shape. Every layer but the last has the ReLU/clip.

    Forward: a layer's input map becomes its patches (im2col, zero padding), ``acc = patches
    W^T + 4 b`` per output pixel (exact integers), the output map ``clip(round_shift(acc, 7,
    HALF_UP), 0, 255)``; the last layer (1x1 output) gives the FP32 logits as in
    :class:`FixedMLP`. Backward: the softmax gradient as in :class:`FixedMLP`; a layer's patch
    gradient ``g W`` (exact) is folded back onto its input map (col2im, the sum of every patch
    that reads a pixel, exact), then ``round_shift(., 7, HALF_UP)``, saturated to int8 and
    masked by the previous layer's straight-through estimator (``0 < a < 255``). A model whose
    layers all have one output pixel computes exactly :class:`FixedMLP`'s numbers."""
    w: list
    b: list
    geometry: tuple

    def copy(self):
        return FixedCNN([x.copy() for x in self.w], [x.copy() for x in self.b], self.geometry)

    @property
    def shapes(self):
        return [x.shape for x in self.w]

    @property
    def pixels(self):
        """Output pixels of every layer (one rankReduce each per sample under LRT)."""
        return [g.pixels for g in self.geometry]

    def forward(self, x):
        """Return ``(acts, logits)``: every layer's int patches (n, pixels, n_i) and the FP32
        logits (n, classes) of int activations ``x`` (n, 64)."""
        g0 = self.geometry[0]
        maps = np.asarray(x, dtype=np.int64).reshape(len(x), g0.hin, g0.win, g0.cin)
        acts = []
        for layer, (w, b, geo) in enumerate(zip(self.w, self.b, self.geometry)):
            cols = geo.patches(maps)
            acts.append(cols)
            acc = np.einsum("npi,oi->npo", cols, w) + 4 * b
            if layer == len(self.w) - 1:
                return acts, np.multiply(i2f(acc[:, 0, :]), _F32(2.0 ** -_ACC_FRAC))
            maps = np.clip(round_shift(acc, A_FRAC, Rounding.HALF_UP), 0, 255).reshape(
                len(x), geo.hout, geo.wout, geo.cout)

    def predict(self, x):
        return np.argmax(self.forward(x)[1], axis=1)

    def backward(self, acts, logits, labels):
        """Return the int8 output gradients ``g[l]`` (n, pixels, n_o) of every layer."""
        n = len(labels)
        last = FixedMLP([self.w[-1]], [self.b[-1]]).backward([acts[-1][:, 0, :]], logits, labels)
        g = [last[0].reshape(n, 1, -1)]
        for layer in range(len(self.w) - 1, 0, -1):
            geo, prev = self.geometry[layer], self.geometry[layer - 1]
            back = geo.fold(np.einsum("npo,oi->npi", g[0], self.w[layer]))
            back = saturate(round_shift(back, W_FRAC, Rounding.HALF_UP), 8)
            # layer - 1's output map, recomputed from its patches (forward keeps patches only)
            acc = np.einsum("npi,oi->npo", acts[layer - 1], self.w[layer - 1]) \
                + 4 * self.b[layer - 1]
            a = np.clip(round_shift(acc, A_FRAC, Rounding.HALF_UP), 0, 255)
            back = back.reshape(n, prev.pixels, prev.cout)
            g.insert(0, np.where((a > 0) & (a < 255), back, 0))
        return g


def random_fixed_cnn(cfg, seed=0, weight_range=16, bias_range=256):
    """A :class:`FixedCNN` of ``cfg``'s layers (plain convolutions, a global pool of a 1x1 map,
    dense layers) with seeded uniform random int8 weights in ``[-weight_range,
    weight_range]`` and int16 biases in ``[-bias_range, bias_range]``: shapes other than the
    presets' for the compiled programs' tests."""
    geo = _geometries(cfg)
    rng = np.random.default_rng([int(seed), 0x1C7])
    return FixedCNN([rng.integers(-weight_range, weight_range + 1, (g.cout, g.k * g.k * g.cin))
                     for g in geo],
                    [rng.integers(-bias_range, bias_range + 1, g.cout) for g in geo], geo)


def cnn_from_float(model, shifts):
    """Fixed-point :class:`FixedCNN` of a float :class:`~ttrain.golden.qnn.FloatCNN`; hidden
    layer ``l``'s outputs are scaled by ``2**shifts[l]`` (ReLU is homogeneous: layer ``l``'s
    weights by ``2**(shifts[l] - shifts[l-1])``, its bias by ``2**shifts[l]``, the last layer's
    weights by ``2**-shifts[-1]``), then rounded to their LSB (nearest even) and saturated."""
    cfg = model.cfg
    geo = _geometries(cfg)
    names = [n.name for n in cfg.nodes if n.kind == "conv"]
    if len(shifts) != len(names) - 1:
        raise ValueError(f"{cfg.name} has {len(names) - 1} hidden layers; pass as many shifts, "
                         f"not {len(shifts)}")
    ws, bs, prev = [], [], 0
    for layer, name in enumerate(names):
        w, b = model.params[name]
        w = w.reshape(-1, w.shape[-1]).T.astype(_F32)
        s = shifts[layer] if layer < len(shifts) else 0
        ws.append(np.multiply(w, _F32(2.0 ** (s - prev))))
        bs.append(np.multiply(b.astype(_F32), _F32(2.0 ** s)))
        prev = s
    fixed = _to_fixed(ws, bs)
    return FixedCNN(fixed.w, fixed.b, geo)


def quantize_cnn(model, x_val, y_val, shifts=range(-2, 3)):
    """Return ``(fixed model, shifts, validation accuracy)``: the best per-hidden-layer shifts
    on the grid ``shifts``^(hidden layers) (ties: the first in grid order)."""
    import itertools
    xq = quantize_input(x_val)
    hidden = sum(n.kind == "conv" for n in model.cfg.nodes) - 1
    best = None
    for ss in itertools.product(shifts, repeat=hidden):
        q = cnn_from_float(model, ss)
        acc = float(np.mean(q.predict(xq) == y_val))
        if best is None or acc > best[2]:
            best = (q, ss, acc)
    return best


def quantize_fixed(model, x_val, y_val):
    """:func:`quantize_mlp` for ``digits-mlp``, :func:`quantize_cnn` for the other presets;
    returns ``(fixed model, shift(s), validation accuracy)``."""
    if model.cfg.name == MLP_CONFIG.name:
        return quantize_mlp(model, x_val, y_val)
    return quantize_cnn(model, x_val, y_val)


@lru_cache(maxsize=4)
def _pretrained_any(name, seed):
    if name == MLP_CONFIG.name:
        return _pretrained(seed)
    from . import adapt, digits
    model, rec = adapt.pretrain(LRT_PRESETS[name], seed=seed)
    d = digits.load_digits_clean("pretrain")
    q, shift, val = quantize_cnn(model, d.val.images, d.val.labels)
    test = float(np.mean(q.predict(quantize_input(d.test.images)) == d.test.labels))
    return q, {"float_test": rec["test"], "shift": list(shift), "fixed_val": val,
               "fixed_test": test}


def pretrained(name, seed=0):
    """:func:`pretrained_mlp` for any of :data:`LRT_PRESETS` (a fresh copy and the record)."""
    if name not in LRT_PRESETS:
        raise ValueError(f"unknown fixed-point LRT preset {name!r}; choose one of "
                         f"{', '.join(LRT_PRESETS)}")
    q, rec = _pretrained_any(name, int(seed))
    return q.copy(), dict(rec)
