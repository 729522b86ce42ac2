"""Quantized CNNs: model family, float training, int8 quantization and the integer forward pass.

The integer training rules (zeroth-order, ``golden/zo.py``) train the int8 models defined here.
A :class:`CNNConfig` is a sequence of layers — :class:`Conv` (any kernel, stride, padding and
group count, ReLU fused), :class:`InvertedResidual` (MobileNetV2/MCUNet block: 1x1 expand,
depthwise kxk, 1x1 project, residual add when the shape allows), :class:`GlobalPool` and
:class:`Linear` — flattened into primitive **nodes** (``conv``, ``add``, ``pool``) that every
path below shares:

* :class:`FloatCNN`: float32 forward and back-propagation (pre-training on clean digits, and the
  float fine-tuning reference);
* :func:`quantize`: post-training quantization to a :class:`QuantCNN` (int8 per-channel
  weights, int32 biases, int8 activations with calibrated scales and zero points; there is no
  batch norm in these models, so there is nothing to fold — documented in
  ``docs/quantized-training.md``);
* :func:`int_forward`: the exact integer forward pass (:mod:`ttrain.golden.quant` numerics),
  with optional additive perturbations of node outputs (node perturbation);
* :func:`sample_losses`: the per-sample FP32 cross-entropy of the dequantized logits, defined
  as the chip computes it (the special-function unit's ``exp``/``log`` sequences, sums in index
  order);
* :func:`ste_backward`: back-propagation through the int8 model with the straight-through
  estimator (the int8 BP reference).

Convolutions are contractions over shifted views: for every kernel offset ``(ky, kx)`` the
padded input's strided view times that offset's weight slice is added to the output, which is
how the chip runs them (no im2col buffer).
"""

from dataclasses import dataclass, field

import numpy as np

from .numerics import as_f32, fp32_max, fp32_mul, fp32_sub, fp32_sum
from .quant import acc_bound, f2i, i2f, quantize_multiplier, requant
from .special import fp32_special

__all__ = ["Conv", "InvertedResidual", "GlobalPool", "Linear", "CNNConfig", "Node",
           "CNN_PRESETS", "get_cnn_config", "cnn_preset_names", "FloatCNN", "QuantCNN",
           "quantize", "quantize_input", "int_forward", "dequantize_logits", "sample_losses",
           "mean_loss", "ste_backward", "accuracy"]


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Conv:
    """Convolution ``cout`` x ``k`` x ``k``, ``stride``, ``pad`` (default ``k // 2``),
    ``groups`` (``groups == cin == cout`` is depthwise), ReLU fused when ``relu``."""
    cout: int
    k: int = 3
    stride: int = 1
    pad: int = None
    groups: int = 1
    relu: bool = True


@dataclass(frozen=True)
class InvertedResidual:
    """MobileNetV2 / MCUNet block: 1x1 expand by ``expand`` (ReLU; skipped when 1), depthwise
    ``k`` x ``k`` with ``stride`` (ReLU), 1x1 project to ``cout`` (linear), plus the input when
    ``stride == 1`` and the channel count is kept."""
    expand: int
    cout: int
    stride: int = 1
    k: int = 3


@dataclass(frozen=True)
class GlobalPool:
    """Average over the spatial axes."""


@dataclass(frozen=True)
class Linear:
    """Fully connected layer (a 1x1 convolution on the pooled 1x1 map)."""
    cout: int
    relu: bool = False


@dataclass(frozen=True)
class Node:
    """One primitive operation of a flattened :class:`CNNConfig`.

    ``kind`` is ``"conv"``, ``"add"`` or ``"pool"``; ``inputs`` are node indices (``-1`` is the
    image); ``shape`` is the output (H, W, C). Convolution fields as :class:`Conv`.
    """
    name: str
    kind: str
    inputs: tuple
    shape: tuple
    cin: int = 0
    k: int = 1
    stride: int = 1
    pad: int = 0
    groups: int = 1
    relu: bool = False

    @property
    def weight_shape(self):
        return (self.k, self.k, self.cin // self.groups, self.shape[2])

    @property
    def n_weights(self):
        return int(np.prod(self.weight_shape)) if self.kind == "conv" else 0

    @property
    def macs(self):
        """Multiply-accumulates of one image."""
        if self.kind != "conv":
            return 0
        h, w, c = self.shape
        return h * w * c * self.k * self.k * (self.cin // self.groups)


@dataclass(frozen=True)
class CNNConfig:
    """An image classifier: ``input_shape`` (H, W, C), ``classes``, ``layers``."""
    name: str
    input_shape: tuple
    classes: int
    layers: tuple
    note: str = ""
    nodes: tuple = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "input_shape", tuple(int(v) for v in self.input_shape))
        object.__setattr__(self, "layers", tuple(self.layers))
        object.__setattr__(self, "nodes", tuple(_flatten(self)))

    @property
    def n_params(self):
        """Weights plus biases."""
        return sum(n.n_weights + n.shape[2] for n in self.nodes if n.kind == "conv")

    @property
    def macs(self):
        """Multiply-accumulates of one image's forward pass."""
        return sum(n.macs for n in self.nodes)

    @property
    def conv_names(self):
        return tuple(n.name for n in self.nodes if n.kind == "conv")


def _flatten(cfg):
    h, w, c = cfg.input_shape
    if min(h, w, c) < 1 or cfg.classes < 2:
        raise ValueError(f"CNN {cfg.name!r}: input shape {cfg.input_shape} must be positive and "
                         f"classes ({cfg.classes}) at least 2")
    nodes, cur, pooled = [], -1, False

    def conv(name, cin, spec_cout, k, stride, pad, groups, relu, src):
        nonlocal h, w
        if pad is None:
            pad = k // 2
        for what, v in (("cout", spec_cout), ("k", k), ("stride", stride), ("groups", groups)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"CNN {cfg.name!r} layer {name}: {what} must be a positive "
                                 f"integer, not {v!r}")
        if cin % groups or spec_cout % groups:
            raise ValueError(f"CNN {cfg.name!r} layer {name}: groups {groups} must divide the "
                             f"input ({cin}) and output ({spec_cout}) channels")
        ho, wo = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
        if ho < 1 or wo < 1:
            raise ValueError(f"CNN {cfg.name!r} layer {name}: a {k}x{k} kernel with stride "
                             f"{stride}, pad {pad} does not fit the {h}x{w} input; use a smaller "
                             "kernel or stride, or more padding")
        h, w = ho, wo
        nodes.append(Node(name, "conv", (src,), (ho, wo, spec_cout), cin, k, stride, pad, groups,
                          relu))
        return len(nodes) - 1

    for i, layer in enumerate(cfg.layers):
        if pooled and not isinstance(layer, Linear):
            raise ValueError(f"CNN {cfg.name!r}: only Linear layers may follow GlobalPool "
                             f"(layer {i} is {type(layer).__name__})")
        if isinstance(layer, Conv):
            cur = conv(f"conv{i}", c, layer.cout, layer.k, layer.stride, layer.pad,
                       layer.groups, layer.relu, cur)
            c = layer.cout
        elif isinstance(layer, InvertedResidual):
            src, cin = cur, c
            mid = cin * layer.expand
            if layer.expand != 1:
                cur = conv(f"b{i}.expand", cin, mid, 1, 1, 0, 1, True, cur)
            cur = conv(f"b{i}.dw", mid, mid, layer.k, layer.stride, None, mid, True, cur)
            cur = conv(f"b{i}.project", mid, layer.cout, 1, 1, 0, 1, False, cur)
            c = layer.cout
            if layer.stride == 1 and cin == layer.cout:
                nodes.append(Node(f"b{i}.add", "add", (cur, src), (h, w, c)))
                cur = len(nodes) - 1
        elif isinstance(layer, GlobalPool):
            nodes.append(Node(f"pool{i}", "pool", (cur,), (1, 1, c)))
            cur, h, w, pooled = len(nodes) - 1, 1, 1, True
        elif isinstance(layer, Linear):
            if (h, w) != (1, 1):
                raise ValueError(f"CNN {cfg.name!r}: Linear layer {i} needs a 1x1 input; put a "
                                 "GlobalPool before it")
            cur = conv(f"fc{i}", c, layer.cout, 1, 1, 0, 1, layer.relu, cur)
            c = layer.cout
        else:
            raise ValueError(f"CNN {cfg.name!r}: unknown layer {layer!r}")
    if not nodes or nodes[-1].shape != (1, 1, cfg.classes):
        raise ValueError(f"CNN {cfg.name!r} must end in a 1x1 map of {cfg.classes} classes "
                         "(GlobalPool then Linear(classes))")
    return nodes


def _mcunet():
    blocks = [InvertedResidual(1, 16, 1), InvertedResidual(4, 24, 2), InvertedResidual(4, 24, 1),
              InvertedResidual(4, 40, 2), InvertedResidual(4, 40, 1), InvertedResidual(4, 40, 1),
              InvertedResidual(4, 80, 2), InvertedResidual(4, 80, 1), InvertedResidual(6, 96, 1),
              InvertedResidual(6, 96, 1), InvertedResidual(6, 160, 1)]
    return (Conv(16, 3, 2), *blocks, Conv(320, 1, 1, 0), GlobalPool(), Linear(10))


CNN_PRESETS = {
    "digits-cnn": CNNConfig(
        name="digits-cnn", input_shape=(8, 8, 1), classes=10,
        layers=(Conv(16, 3, 1), Conv(32, 3, 2), Conv(32, 3, 2), GlobalPool(), Linear(10)),
        note="int8 CNN for the 8x8 scikit-learn digits and digits-C (trained and measured)"),
    "mcunet-s": CNNConfig(
        name="mcunet-s", input_shape=(32, 32, 3), classes=10, layers=_mcunet(),
        note="MCUNet-scale int8 model (32x32x3, inverted residual blocks); used for memory "
             "and cycle figures only, never trained here"),
}


def cnn_preset_names():
    return tuple(CNN_PRESETS)


def get_cnn_config(name):
    """Return the CNN preset ``name`` (ValueError naming the presets otherwise)."""
    try:
        return CNN_PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown CNN preset {name!r}; choose one of "
                         f"{', '.join(CNN_PRESETS)}") from None


# --------------------------------------------------------------------------------------------
# Shifted-view convolution (shared by the float, integer and STE paths)
# --------------------------------------------------------------------------------------------

def _views(node, hin, win):
    ho, wo, _ = node.shape
    s = node.stride
    for ky in range(node.k):
        for kx in range(node.k):
            yield ky, kx, (slice(None), slice(ky, ky + s * (ho - 1) + 1, s),
                           slice(kx, kx + s * (wo - 1) + 1, s))


def _pad(x, p, value=0):
    if not p:
        return x
    return np.pad(x, ((0, 0), (p, p), (p, p), (0, 0)), constant_values=value)


def _gmm(x, w, groups):
    """(..., cin) x (cin/g, cout) grouped product -> (..., cout)."""
    if groups == 1:
        return x @ w
    ci, co = w.shape
    xg = x.reshape(*x.shape[:-1], groups, ci)
    wg = w.reshape(ci, groups, co // groups)
    return np.einsum("...gi,igo->...go", xg, wg).reshape(*x.shape[:-1], co)


def _gmm_t(dy, w, groups):
    """Transpose of :func:`_gmm` for the input gradient."""
    if groups == 1:
        return dy @ w.T
    ci, co = w.shape
    dyg = dy.reshape(*dy.shape[:-1], groups, co // groups)
    wg = w.reshape(ci, groups, co // groups)
    return np.einsum("...go,igo->...gi", dyg, wg).reshape(*dy.shape[:-1], groups * ci)


def _gmm_w(x, dy, groups, ci):
    """Weight gradient of :func:`_gmm`: sum over rows of x^T dy, grouped."""
    xf = x.reshape(-1, x.shape[-1])
    df = dy.reshape(-1, dy.shape[-1])
    if groups == 1:
        return xf.T @ df
    co = df.shape[-1]
    xg = xf.reshape(-1, groups, ci)
    dg = df.reshape(-1, groups, co // groups)
    return np.einsum("mgi,mgo->igo", xg, dg).reshape(ci, co)


def _conv(node, x, w):
    """Convolution of ``x`` (N, H, W, Cin) by ``w`` (k, k, Cin/g, Cout), zero padding."""
    xp = _pad(x, node.pad)
    y = np.zeros((x.shape[0], *node.shape), dtype=np.result_type(x, w))
    for ky, kx, view in _views(node, *x.shape[1:3]):
        y += _gmm(xp[view], w[ky, kx], node.groups)
    return y


def _conv_backward(node, x, w, dy, need_dx=True):
    xp = _pad(x, node.pad)
    dxp = np.zeros_like(xp) if need_dx else None
    dw = np.zeros_like(w)
    ci = w.shape[2]
    for ky, kx, view in _views(node, *x.shape[1:3]):
        dw[ky, kx] = _gmm_w(xp[view], dy, node.groups, ci)
        if need_dx:
            dxp[view] += _gmm_t(dy, w[ky, kx], node.groups)
    dx = None
    if need_dx:
        p = node.pad
        dx = dxp[:, p:p + x.shape[1], p:p + x.shape[2], :] if p else dxp
    return dx, dw


# --------------------------------------------------------------------------------------------
# Float model
# --------------------------------------------------------------------------------------------

def _softmax_ce(logits, labels):
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    p = e / e.sum(axis=1, keepdims=True)
    loss = float(-np.log(p[np.arange(len(labels)), labels] + 1e-30).mean())
    d = p.copy()
    d[np.arange(len(labels)), labels] -= 1
    return loss, (d / len(labels)).astype(np.float32)


class FloatCNN:
    """float32 model of a :class:`CNNConfig` with back-propagation.

    ``params[name] = (w, b)`` per convolution node, He-initialized from ``seed``.
    """

    def __init__(self, cfg, seed=0):
        self.cfg = cfg
        rng = np.random.default_rng(seed)
        self.params = {}
        for n in cfg.nodes:
            if n.kind == "conv":
                fan_in = n.k * n.k * (n.cin // n.groups)
                std = np.sqrt(2.0 / fan_in) if n.relu else np.sqrt(1.0 / fan_in)
                w = (rng.standard_normal(n.weight_shape) * std).astype(np.float32)
                self.params[n.name] = [w, np.zeros(n.shape[2], np.float32)]

    def forward(self, x):
        """Return (logits (N, classes), activations of every node)."""
        acts = []
        for n in self.cfg.nodes:
            a = [x if i < 0 else acts[i] for i in n.inputs]
            if n.kind == "conv":
                w, b = self.params[n.name]
                y = _conv(n, a[0], w) + b
                if n.relu:
                    y = np.maximum(y, 0)
            elif n.kind == "add":
                y = a[0] + a[1]
            else:
                y = a[0].mean(axis=(1, 2), keepdims=True)
            acts.append(y.astype(np.float32))
        return acts[-1][:, 0, 0, :], acts

    def backward(self, x, acts, dlogits):
        """Return gradients ``{name: (dw, db)}`` of every convolution node."""
        return _backward(self.cfg, lambda n: self.params[n.name][0], x, acts,
                         lambda i, y: (y > 0) if self.cfg.nodes[i].relu else None, dlogits)

    def sgd_step(self, x, labels, lr):
        logits, acts = self.forward(x)
        loss, d = _softmax_ce(logits, labels)
        for name, (dw, db) in self.backward(x, acts, d).items():
            self.params[name][0] -= np.float32(lr) * dw
            self.params[name][1] -= np.float32(lr) * db
        return loss

    def predict(self, x, batch=512):
        return np.concatenate([self.forward(x[i:i + batch])[0].argmax(1)
                               for i in range(0, len(x), batch)])

    def fit(self, x, y, *, epochs, lr, batch=32, seed=0, x_val=None, y_val=None):
        """Mini-batch SGD (learning rate cosine-decayed to 0); returns per-epoch records."""
        rng = np.random.default_rng(seed)
        steps, history, step = epochs * ((len(x) + batch - 1) // batch), [], 0
        for epoch in range(epochs):
            order = rng.permutation(len(x))
            losses = []
            for i in range(0, len(x), batch):
                idx = order[i:i + batch]
                cur = lr * 0.5 * (1 + np.cos(np.pi * step / steps))
                losses.append(self.sgd_step(x[idx], y[idx], cur))
                step += 1
            rec = {"epoch": epoch + 1, "loss": float(np.mean(losses))}
            if x_val is not None:
                rec["val_acc"] = accuracy(self.predict(x_val), y_val)
            history.append(rec)
        return history


def _backward(cfg, weight_of, x, acts, mask_of, dlogits):
    """Back-propagate ``dlogits`` through ``cfg``'s nodes (float32).

    ``acts[i]`` are the (float) node outputs, ``weight_of(node)`` its weights, ``mask_of(i,
    y)`` the output-gradient mask of node ``i`` (ReLU / saturation) or None.
    """
    nodes = cfg.nodes
    grads = [None] * len(nodes)
    grads[-1] = dlogits[:, None, None, :].astype(np.float32)
    out = {}
    for i in range(len(nodes) - 1, -1, -1):
        n, dy = nodes[i], grads[i]
        if dy is None:
            continue
        mask = mask_of(i, acts[i])
        if mask is not None:
            dy = dy * mask
        srcs = [x if j < 0 else acts[j] for j in n.inputs]
        if n.kind == "conv":
            need_dx = n.inputs[0] >= 0
            dx, dw = _conv_backward(n, srcs[0], weight_of(n), dy, need_dx)
            out[n.name] = (dw.astype(np.float32), dy.sum(axis=(0, 1, 2)).astype(np.float32))
            dxs = [dx]
        elif n.kind == "add":
            dxs = [dy, dy]
        else:
            h, w = srcs[0].shape[1:3]
            dxs = [np.broadcast_to(dy / (h * w), srcs[0].shape).astype(np.float32)]
        for j, d in zip(n.inputs, dxs):
            if j >= 0:
                grads[j] = d if grads[j] is None else grads[j] + d
    return out


def accuracy(pred, labels):
    return float(np.mean(np.asarray(pred) == np.asarray(labels)))


# --------------------------------------------------------------------------------------------
# Quantized model
# --------------------------------------------------------------------------------------------

#: Input quantization: pixel p in [0, 1] -> q = round(p * 255) - 128 (scale 1/255, zp -128).
INPUT_SCALE = 1.0 / 255.0
INPUT_ZP = -128


def quantize_input(images):
    """Quantize images in [0, 1] (N, H, W[, C]) to int8: ``f2i(p * 255) - 128`` (FP32)."""
    x = as_f32(np.asarray(images, dtype=np.float32))
    if x.ndim == 3:
        x = x[..., None]
    if x.size and (x.min() < 0 or x.max() > 1):
        raise ValueError("images must hold values in [0, 1]; scale them first")
    return f2i(fp32_mul(x, np.float32(255.0))) + INPUT_ZP


@dataclass
class QuantCNN:
    """int8 model: per node the integer parameters and the fixed-point rescales.

    ``w[name]`` int8 (k, k, Cin/g, Cout), ``b[name]`` int32 (Cout,), ``s_w[name]`` float64
    per-channel weight scales; ``scale[i]``/``zp[i]`` the output scale and zero point of node
    ``i`` (``-1`` the input); ``mult[i]``/``shift[i]`` the requantization multipliers (per
    channel for convolutions, a pair of per-input multipliers for an add).
    """
    cfg: CNNConfig
    w: dict
    b: dict
    s_w: dict
    scale: dict
    zp: dict
    mult: dict
    shift: dict

    def copy(self):
        return QuantCNN(self.cfg, {k: v.copy() for k, v in self.w.items()},
                        {k: v.copy() for k, v in self.b.items()}, dict(self.s_w),
                        dict(self.scale), dict(self.zp), dict(self.mult), dict(self.shift))

    def bias_scale(self, i):
        n = self.cfg.nodes[i]
        return self.scale[n.inputs[0]] * self.s_w[n.name]

    def set_rescale(self, i):
        """(Re)compute node ``i``'s requantization multipliers from the scales."""
        n = self.cfg.nodes[i]
        if n.kind == "conv":
            m, s = quantize_multiplier(self.scale[n.inputs[0]] * self.s_w[n.name] / self.scale[i])
            self.mult[i], self.shift[i] = m, s
            bound = acc_bound(n.k * n.k * (n.cin // n.groups), self.zp[n.inputs[0]],
                              np.abs(self.b[n.name]).max(initial=0))
            if bound >= 1 << 31:
                raise ValueError(f"layer {n.name}: worst-case accumulator {bound} overflows "
                                 "int32; split the reduction or use fewer input channels")
        elif n.kind == "add":
            # acc = (a - za) * ma + (b - zb) * mb at a common shift (both rescales < 2**15).
            ra = self.scale[n.inputs[0]] / self.scale[i]
            rb = self.scale[n.inputs[1]] / self.scale[i]
            m, s = quantize_multiplier(max(ra, rb))
            ma = int(round(ra * 2.0 ** int(s)))
            mb = int(round(rb * 2.0 ** int(s)))
            self.mult[i], self.shift[i] = np.array([ma, mb]), s
        else:
            h, w = self.cfg.nodes[n.inputs[0]].shape[:2] if n.inputs[0] >= 0 else \
                self.cfg.input_shape[:2]
            m, s = quantize_multiplier(self.scale[n.inputs[0]] / (h * w * self.scale[i]))
            self.mult[i], self.shift[i] = m, s


def quantize(model, calib):
    """Post-training quantization of a :class:`FloatCNN` calibrated on images ``calib``.

    Weights: symmetric int8 per output channel (``s_w = max|w| / 127``). Activations: ReLU
    outputs ``[0, max]`` with zero point -128; other outputs ``[min(lo, 0), max(hi, 0)]``
    affine; pooling keeps its input's scale; the logits of the last node likewise affine.
    """
    cfg = model.cfg
    _, acts = model.forward(np.asarray(calib, np.float32)[..., None]
                            if np.ndim(calib) == 3 else np.asarray(calib, np.float32))
    q = QuantCNN(cfg, {}, {}, {}, {-1: INPUT_SCALE}, {-1: INPUT_ZP}, {}, {})
    for i, n in enumerate(cfg.nodes):
        if n.kind == "pool":
            q.scale[i], q.zp[i] = q.scale[n.inputs[0]], q.zp[n.inputs[0]]
        else:
            lo, hi = float(min(acts[i].min(), 0.0)), float(max(acts[i].max(), 0.0))
            if n.kind == "conv" and n.relu:
                lo = 0.0
            s = max(hi - lo, 1e-6) / 255.0
            q.scale[i] = s
            q.zp[i] = int(np.clip(np.round(-128 - lo / s), -128, 127))
        if n.kind == "conv":
            w, b = model.params[n.name]
            s_w = np.maximum(np.abs(w).max(axis=(0, 1, 2)), 1e-8) / 127.0
            q.s_w[n.name] = s_w.astype(np.float64)
            q.w[n.name] = np.clip(np.rint(w / s_w), -127, 127).astype(np.int64)
            q.b[n.name] = np.clip(np.rint(b / (q.scale[n.inputs[0]] * s_w)),
                                  -(1 << 31), (1 << 31) - 1).astype(np.int64)
        q.set_rescale(i)
    return q


def int_forward(q, x, *, perturb=None, start=0, cache=None, w=None, b=None):
    """Exact integer forward pass; returns the int8 outputs of every node.

    Parameters
    ----------
    q : QuantCNN
    x : int8 array (N, H, W, C)
        Quantized images (:func:`quantize_input`).
    perturb : dict, optional
        ``{node index: int array of the node's output shape}`` added to that node's int8
        output, then saturated to int8 (node perturbation).
    start, cache : optional
        Recompute only nodes ``start..``, reading earlier outputs from ``cache`` (a previous
        result); the values are identical to a full pass.
    w, b : dict, optional
        Parameters to use instead of ``q.w``/``q.b`` (weight perturbation).
    """
    w = q.w if w is None else w
    b = q.b if b is None else b
    acts = list(cache[:start]) if start else []
    for i in range(start, len(q.cfg.nodes)):
        n = q.cfg.nodes[i]
        src = [x if j < 0 else acts[j] for j in n.inputs]
        zin = [q.zp[j] for j in n.inputs]
        if n.kind == "conv":
            xz = _pad((src[0] - zin[0]).astype(np.float64), n.pad)
            acc = np.zeros((x.shape[0], *n.shape), np.float64)
            wf = w[n.name].astype(np.float64)
            for ky, kx, view in _views(n, *src[0].shape[1:3]):
                acc += _gmm(xz[view], wf[ky, kx], n.groups)   # exact: integers below 2**53
            acc = np.rint(acc).astype(np.int64) + b[n.name]
            lo = q.zp[i] if n.relu else -128
            y = requant(acc, q.mult[i], q.shift[i], q.zp[i], lo=lo)
        elif n.kind == "add":
            ma, mb = (int(v) for v in q.mult[i])
            acc = (src[0] - zin[0]) * ma + (src[1] - zin[1]) * mb
            y = requant(acc, 1, q.shift[i], q.zp[i])
        else:
            acc = (src[0] - zin[0]).sum(axis=(1, 2), keepdims=True)
            y = requant(acc, q.mult[i], q.shift[i], q.zp[i])
        if perturb is not None and i in perturb:
            y = np.clip(y + perturb[i], -128, 127)
        acts.append(y)
    return acts


def dequantize_logits(q, logits_q):
    """FP32 logits ``i2f(q - z) * s`` of the last node's int8 output (N, classes)."""
    last = len(q.cfg.nodes) - 1
    return fp32_mul(i2f(logits_q.reshape(len(logits_q), -1) - q.zp[last]),
                    as_f32(np.float32(q.scale[last])))


def sample_losses(logits, labels):
    """Per-sample FP32 cross-entropy, in the chip's operation order.

    ``m = max_j x_j``; ``t = x - m``; ``s = sum_j exp(t_j)`` (index order from ``-0``);
    ``loss = log(s) - t_y``, with :func:`~ttrain.golden.special.fp32_special` ``exp``/``log``.
    """
    x = as_f32(logits)
    m = x[:, 0]
    for j in range(1, x.shape[1]):
        m = fp32_max(m, x[:, j])
    t = fp32_sub(x, m[:, None])
    s = fp32_sum(fp32_special("exp", t), axis=-1)
    ty = t[np.arange(len(t)), np.asarray(labels)]
    return fp32_sub(fp32_special("log", s), ty)


def mean_loss(losses):
    """Batch loss: sum in index order times the FP32 reciprocal of the batch size."""
    return fp32_mul(fp32_sum(as_f32(losses)), as_f32(np.float32(1.0 / len(losses))))


def ste_backward(q, x, acts, labels):
    """Gradients of the int8 model by back-propagation with the straight-through estimator.

    The float backward runs on the dequantized activations ``s (q - z)`` and weights
    ``s_w q``; a node's output gradient passes where its int8 output is not clamped (not at the
    ReLU floor, not saturated). Returns ``{name: (dL/dq_w, dL/dq_b)}``: derivatives with
    respect to the *integer* parameters (float64).
    """
    cfg = q.cfg
    deq = [(a - q.zp[i]).astype(np.float32) * np.float32(q.scale[i]) for i, a in enumerate(acts)]
    xf = (x - q.zp[-1]).astype(np.float32) * np.float32(q.scale[-1])
    logits = deq[-1][:, 0, 0, :]
    _, d = _softmax_ce(logits, np.asarray(labels))

    def mask(i, _):
        a = acts[i]
        return ((a > -128) & (a < 127)).astype(np.float32)

    def weight(n):
        return (q.w[n.name] * q.s_w[n.name]).astype(np.float32)

    grads = _backward(cfg, weight, xf, deq, mask, d)
    out = {}
    for i, n in enumerate(cfg.nodes):
        if n.kind == "conv":
            dw, db = grads[n.name]
            out[n.name] = (dw.astype(np.float64) * q.s_w[n.name],
                           db.astype(np.float64) * q.bias_scale(i))
    return out

