"""Quantized zeroth-order (ZO) training of int8 models: the golden rule.

One ZO step on a batch (``docs/quantized-training.md`` has the derivation and the chip's data
flow):

1. ``l0`` = per-sample FP32 losses of the unperturbed int8 model (:func:`qnn.sample_losses`),
   ``L0`` their mean.
2. For each query ``q < n``: draw Rademacher directions from the counter-based PRNG
   (:mod:`ttrain.golden.prng`, seed of the (step, query, stream), index = the element's
   position in its region), never stored:

   * **weight perturbation (WP)** of the trainable tensors: ``theta <- sat(theta + sigma u)``
     (``sigma`` integer LSBs: ``sigma_w`` for weights, ``sigma_b`` for biases), loss ``L_q``,
     restore; coefficient ``c_q = L_q - L0`` (antithetic: ``(L+ - L-) * 0.5``);
   * **node perturbation (NP)** of the int8 outputs of chosen layers: ``y <- sat(y + sigma_a
     u)`` per sample, per-sample coefficient ``c_qb = l_qb - l0_b`` (a sample's perturbation
     changes only its own loss, so each sample has its own difference).

   Both may run in the same query (the *mixed* mode: WP for early layers, NP for late ones).
   **Layerwise** queries (``layerwise=True``, the authors' layer-wise estimator): each
   trainable layer in network order gets its own ``n`` queries (query index ``layer * n +
   q``) that perturb that layer alone and re-run the net from it (earlier outputs cached), so
   each layer's estimate carries only its own ``d`` of noise.
   The estimate accumulates in FP32 from ``+0``: ``g <- fp32_add(g, fp32_mul(c, u))``, query
   by query. Because ``u`` is replayed from its seed, the chip needs no gradient buffer: the
   update pass regenerates each element's ``u_q`` and sums ``c_q u_q`` in the same order,
   bit-identical to the buffered sum (only the ``n`` coefficients are stored).
3. Scale by ``1 / (sigma n)`` and the "dim" factor ``n / (n + d - 1)`` (``d`` the perturbed
   entries of the query group: all trainable layers, or one layer when layerwise; NP with
   ``np_dim="batch"`` uses ``B n / (B n + d - 1)``, ``d`` per sample, as the authors' code:
   the B samples' perturbations are independent, so the layer's weight gradient averages B n
   one-sample estimates). NP then takes each layer's *local* gradient (no back-propagation across layers):
   ``dacc = G_y * k_c`` on the not-clamped outputs (``k_c`` folds the ZO scale, ``1/B`` and
   the rescale ``s_x s_w[c] / s_y``), ``dq_w = sum_m (x - z_x) dacc`` and ``dq_b = sum_m dacc``
   (FP32 contractions in index order of ``m = (sample, row, column)``).
4. Integer update with quantization-aware scaling (``algorithms.md`` §4): ``theta <- sat(theta
   + f2i(fp32_mul(g, k)))`` with the per-channel FP32 constant ``k = -lr * scale / s^2``
   (``s = s_w[c]`` for weights, ``s_x s_w[c]`` for biases): int8 weights, int32 biases;
   ``lr`` of a layer is ``lr`` times its factor in ``layer_lr`` (per-layer rates, data), and
   ``lr`` itself may decay over the run (``schedule``: a per-step rate, also data).

Options: sparse training (only the chosen layers; inside them a **random** element mask drawn
per step from the PRNG, or a **top-k** mask of the output channels with the largest mean
activation magnitude), and the **in-place** variant (each query applies its own antithetic
update at once; no coefficient list, memory equal to inference).

Every number of a step is defined here (the estimator, PRNG draws, FP32 sums in order, integer
rounding), so a fixed seed reproduces a run exactly, and the chip follows the same definition.
"""

from dataclasses import dataclass, replace

import numpy as np

from . import prng, qnn
from .numerics import as_f32, fp32_add, fp32_mul, fp32_dot, fp32_sub, fp32_sum
from .quant import f2i, i2f

__all__ = ["ZO_MODES", "SPARSE_MASKS", "SCHEDULES", "ZOSettings", "stream_seed",
           "estimate_gradient", "zo_step", "wp_scale", "np_scales", "np_local_grads", "evaluate",
           "train_zo", "train_ste", "train_float"]

ZO_MODES = ("wp", "np", "mixed")
SPARSE_MASKS = ("none", "random", "topk")

ROUNDINGS = ("nearest", "stochastic")
#: Learning-rate schedules over a run of ``T`` steps: the rate of step ``k`` is ``lr`` times
#: 1 (constant), ``0.5 (1 + cos(pi k / T))`` (cosine), ``1 - k / T`` (linear), or, with a
#: warm-up over the first ``W = warmup T`` steps, ``min(1, (k + 1) / W)`` for ``k < W`` and
#: ``(T - k) / (T - W)`` after (warmup_linear: rises from ``1 / W`` to 1, then decays linearly
#: to ``1 / (T - W)`` at the last step; ``warmup = 0`` is linear).
SCHEDULES = ("constant", "cosine", "linear", "warmup_linear")
NP_DIMS = ("queries", "batch")

_STREAM_WP, _STREAM_NP, _STREAM_MASK, _STREAM_ROUND = 0, 1, 2, 3


def _round_update(v, s, seed, offset):
    """Integer step of the FP32 update ``v``: nearest-even (:func:`f2i`), or stochastic
    ``floor(fp32_add(v, r))`` with ``r = (draw >> 8) * 2**-24`` in [0, 1) from the PRNG stream
    ``seed`` at indices ``offset ..`` (so small steps are kept in expectation)."""
    if s.rounding == "nearest":
        return f2i(v)
    idx = np.uint64(offset) + np.arange(v.size, dtype=np.uint64)
    r = fp32_mul(i2f((prng.draw(seed, idx) >> np.uint32(8)).astype(np.int64)),
                 np.float32(2.0 ** -24)).reshape(v.shape)
    t = fp32_add(v, r)
    return f2i(np.floor(t))  # floor of a binary32 value is exact


@dataclass(frozen=True)
class ZOSettings:
    """Settings of the ZO rule (the digits table's runs are :data:`ttrain.golden.adapt.ZO_RUNS`).

    ``layers``: trainable convolution node names (None: all). ``np_layers``: in ``mixed``
    mode, how many of the last trainable layers use NP (the others WP); in ``np`` mode every
    trainable layer uses NP. ``layerwise``: ``queries`` queries per trainable layer, each
    perturbing that layer alone (else every query perturbs all of them). ``np_dim``: the NP
    dim factor over ``queries`` (``n / (n + d - 1)``) or ``batch`` x queries. ``layer_lr``:
    ``(layer name, factor)`` pairs multiplying ``lr`` for those layers. ``schedule``: the
    learning rate over the run (:data:`SCHEDULES`; ``lr`` is the peak, at step 0, or at the end
    of the warm-up, the fraction ``warmup`` of the run, for ``warmup_linear``):
    :func:`train_zo` steps with :meth:`at_step`, the settings with that step's constant rate.
    The rate only enters the per-channel update constants (:func:`wp_scale`, the NP ``kw`` /
    ``kb``), which the chip holds as data, so a schedule is host data: the host rewrites those
    constants before a step; the step's program does not change.
    """
    mode: str = "wp"
    queries: int = 20
    sigma_w: int = 1
    sigma_b: int = 64
    sigma_a: int = 4
    antithetic: bool = False
    lr: float = 0.01
    layers: tuple = None
    np_layers: int = 1
    sparse: str = "none"
    density: float = 1.0
    inplace: bool = False
    rounding: str = "stochastic"
    layerwise: bool = False
    np_dim: str = "queries"
    layer_lr: tuple = ()
    schedule: str = "constant"
    warmup: float = 0.1
    seed: int = 0

    def rate_factor(self, step, total):
        """Factor of ``lr`` at step ``step`` of a run of ``total`` steps (:data:`SCHEDULES`)."""
        if self.schedule == "constant":
            return 1.0
        if not 0 <= step < total:
            raise ValueError(f"step {step} is outside the run's {total} steps")
        if self.schedule == "cosine":
            return 0.5 * (1.0 + float(np.cos(np.pi * step / total)))
        if self.schedule == "warmup_linear":
            w = self.warmup * total
            if step < w:
                return min(1.0, (step + 1) / w)
            return (total - step) / (total - w)
        return 1.0 - step / total

    def at_step(self, step, total):
        """The settings of step ``step`` of ``total``: ``lr`` scaled by :meth:`rate_factor`,
        schedule constant (itself when the schedule is constant)."""
        if self.schedule == "constant":
            return self
        return replace(self, lr=self.lr * self.rate_factor(step, total), schedule="constant")

    def layer_rate(self, name):
        """Learning rate of layer ``name``: ``lr`` times its factor in ``layer_lr``."""
        return self.lr * dict(self.layer_lr).get(name, 1.0)

    def __post_init__(self):
        if self.mode not in ZO_MODES:
            raise ValueError(f"ZO mode must be one of {', '.join(ZO_MODES)}, not {self.mode!r}")
        if self.sparse not in SPARSE_MASKS:
            raise ValueError(f"sparse mask must be one of {', '.join(SPARSE_MASKS)}, not "
                             f"{self.sparse!r}")
        for name in ("queries", "sigma_w", "sigma_b", "sigma_a", "np_layers"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"ZO {name} must be a positive integer, not {v!r}")
        if not 0 < self.density <= 1:
            raise ValueError(f"ZO density must be in (0, 1], not {self.density!r}")
        if self.sparse == "none" and self.density != 1:
            raise ValueError("a density below 1 needs a sparse mask (random or topk)")
        if not self.lr > 0:
            raise ValueError(f"learning rate must be positive, not {self.lr!r}")
        if self.inplace and self.mode != "wp":
            raise ValueError("the in-place variant is defined for weight perturbation (wp) only")
        try:
            factors = dict(self.layer_lr)
        except (TypeError, ValueError):
            factors = None
        if factors is None or not all(isinstance(k, str) and isinstance(v, (int, float))
                                      and not isinstance(v, bool) and v >= 0
                                      for k, v in factors.items()):
            raise ValueError("layer_lr must be (layer name, non-negative factor) pairs, not "
                             f"{self.layer_lr!r}")
        if self.np_dim not in NP_DIMS:
            raise ValueError(f"NP dim scaling must be one of {', '.join(NP_DIMS)}, not "
                             f"{self.np_dim!r}")
        if self.layerwise and self.inplace:
            raise ValueError("the in-place variant perturbs every trainable layer at once; it "
                             "is not defined with layerwise queries")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"learning-rate schedule must be one of {', '.join(SCHEDULES)}, "
                             f"not {self.schedule!r}")
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, (int, float)) or \
                not 0 <= self.warmup < 1:
            raise ValueError(f"warm-up fraction of the run must be in [0, 1), not "
                             f"{self.warmup!r}")
        if self.rounding not in ROUNDINGS:
            raise ValueError(f"update rounding must be one of {', '.join(ROUNDINGS)}, not "
                             f"{self.rounding!r}")
        if not 0 <= int(self.seed) < 1 << 32:
            raise ValueError(f"seed must be in [0, 2**32), not {self.seed!r}")


def stream_seed(seed, step, query, stream):
    """PRNG seed of one (step, query, stream): ``prng.draw(seed, ((step * 4096 + query) * 4 +
    stream) mod 2**32)`` — the host computes it and passes it to the chip as data."""
    idx = ((int(step) * 4096 + int(query)) * 4 + int(stream)) % (1 << 32)
    return int(prng.draw(int(seed), idx))


def estimate_gradient(f, theta, *, queries, sigma, seed=0, step=0, antithetic=False,
                      directions=None):
    """The ZO estimator on a real function (float64), with the rule's directions.

    ``g = 1/(sigma n) sum_q (f(theta + sigma u_q) - f(theta)) u_q`` (antithetic: ``(f(theta +
    sigma u_q) - f(theta - sigma u_q)) / 2`` in place of the difference), ``u_q`` the
    Rademacher draws of :func:`stream_seed` ``(seed, step, q, WP stream)`` at indices ``0 ..
    d-1``: the same directions as :func:`zo_step`. Unbiased for quadratics; the bias of a
    smooth ``f`` is ``O(sigma**2)`` and the variance falls as ``1/n``. ``directions`` (an
    ``(n, d)`` array of +-1) replaces the PRNG draws, e.g. all ``2**d`` sign vectors to get the
    estimator's exact expectation.
    """
    theta = np.asarray(theta, dtype=np.float64)
    f0 = f(theta)
    g = np.zeros_like(theta)
    idx = np.arange(theta.size, dtype=np.uint64)
    if directions is not None:
        queries = len(directions)
    for qi in range(queries):
        if directions is not None:
            u = np.asarray(directions[qi], dtype=np.float64).reshape(theta.shape)
        else:
            u = prng.rademacher(stream_seed(seed, step, qi, _STREAM_WP), idx)
            u = u.reshape(theta.shape).astype(np.float64)
        if antithetic:
            c = (f(theta + sigma * u) - f(theta - sigma * u)) / 2
        else:
            c = f(theta + sigma * u) - f0
        g += c * u
    return g / (sigma * queries)


# --------------------------------------------------------------------------------------------

def _plan(q, s):
    """Trainable conv node indices split into WP and NP sets."""
    convs = [i for i, n in enumerate(q.cfg.nodes) if n.kind == "conv"]
    names = {q.cfg.nodes[i].name: i for i in convs}
    if s.layers is None:
        train = convs
    else:
        unknown = [n for n in s.layers if n not in names]
        if unknown:
            raise ValueError(f"unknown layer(s) {', '.join(unknown)}; the convolution layers are "
                             f"{', '.join(names)}")
        train = sorted(names[n] for n in s.layers)
    if s.mode == "wp":
        return train, []
    if s.mode == "np":
        return [], train
    k = min(s.np_layers, len(train) - 1) if len(train) > 1 else 0
    if k < 1:
        raise ValueError("mixed mode needs at least two trainable layers (WP early, NP late)")
    return train[:-k], train[-k:]


def _channel_topk(q, acts, i, density):
    """Output-channel mask of node ``i``: the top ``ceil(density C)`` by mean |y - z|."""
    a = np.abs(acts[i] - q.zp[i]).mean(axis=(0, 1, 2))
    k = max(1, int(np.ceil(density * len(a))))
    keep = np.zeros(len(a), bool)
    keep[np.argsort(-a, kind="stable")[:k]] = True
    return keep


def _losses(q, acts, labels):
    return qnn.sample_losses(qnn.dequantize_logits(q, acts[-1]), labels)


def _pm(c, u):
    """``fp32_mul(c, u)`` for int ``u`` in {-1, 0, 1} (c broadcast)."""
    return fp32_mul(as_f32(c), i2f(u))


def _groups(s, wp_nodes, np_nodes):
    """The perturbation groups of a step: one group of every trainable layer (joint), or one
    group per layer in network order (layerwise)."""
    if not s.layerwise:
        return [(list(wp_nodes), list(np_nodes))]
    return [([i], []) if i in wp_nodes else ([], [i]) for i in sorted(wp_nodes + np_nodes)]


def step_masks(q, s, step, wp_nodes, np_nodes, acts0=None):
    """The sparse-training masks of step ``step``: ``(tensors, act_masks, act_base, d_np)``.

    ``tensors``: ``(node, "w"|"b", offset, mask)`` per WP tensor in stream order (``offset``:
    its first element's index in the WP stream); ``act_masks``: NP node -> mask of its output
    shape (one per step, shared by the batch's samples); ``act_base``: NP node -> its first
    entry's index among one sample's NP entries; ``d_np``: one sample's NP entries.

    ``sparse="random"``: ``prng.bernoulli(mseed, index, threshold_of(density))``, ``mseed =
    stream_seed(seed, step, 0, MASK)``; WP indices are the tensors' stream indices, NP indices
    follow them node by node (node ``i``'s entry ``e`` is ``d_wp_total + act_base[i] + e``);
    ``"topk"`` needs ``acts0`` (the unperturbed pass's outputs); ``"none"``: all true."""
    nodes = q.cfg.nodes
    rnd = s.sparse == "random"
    if rnd:
        mseed = stream_seed(s.seed, step, 0, _STREAM_MASK)
        thr = prng.threshold_of(s.density)
    tensors, offset = [], 0
    for i in wp_nodes:
        nm = nodes[i].name
        for kind, arr in (("w", q.w[nm]), ("b", q.b[nm])):
            if rnd:
                mask = prng.bernoulli(mseed, offset + np.arange(arr.size, dtype=np.uint64),
                                      thr).reshape(arr.shape)
            elif s.sparse == "topk":
                mask = np.broadcast_to(_channel_topk(q, acts0, i, s.density), arr.shape)
            else:
                mask = np.ones(arr.shape, bool)
            tensors.append((i, kind, offset, mask))
            offset += arr.size
    act_masks, act_base, d_np = {}, {}, 0
    for i in np_nodes:
        shape = nodes[i].shape
        if s.sparse == "topk":
            act_masks[i] = np.broadcast_to(_channel_topk(q, acts0, i, s.density), shape)
        elif rnd:
            idx = np.uint64(offset + d_np) + np.arange(int(np.prod(shape)), dtype=np.uint64)
            act_masks[i] = prng.bernoulli(mseed, idx, thr).reshape(shape)
        else:
            act_masks[i] = np.ones(shape, bool)
        act_base[i] = d_np
        d_np += int(np.prod(shape))
    return tensors, act_masks, act_base, d_np


def zo_step(q, x, labels, s, step):
    """One ZO step of ``q`` (modified in place) on the int8 batch ``x``; returns a record
    (``loss`` = ``L0``, ``forwards`` = forward passes of the step including the unperturbed
    one, ``macs`` = multiply-accumulates of those passes, partial passes counted as run)."""
    wp_nodes, np_nodes = _plan(q, s)
    nodes = q.cfg.nodes
    n = s.queries
    acts0 = qnn.int_forward(q, x)
    l0 = _losses(q, acts0, labels)
    L0 = qnn.mean_loss(l0)
    batch = len(x)
    tensors, act_masks, act_base, d_np_total = step_masks(q, s, step, wp_nodes, np_nodes, acts0)
    offset = sum(t[3].size for t in tensors)
    g = {(t[0], t[1]): np.zeros(q.w[nodes[t[0]].name].shape if t[1] == "w"
                                else q.b[nodes[t[0]].name].shape, np.float32) for t in tensors}
    gy = {i: np.zeros((batch, *nodes[i].shape), np.float32) for i in np_nodes}

    def directions(qseed, group_tensors, group_np):
        sw = stream_seed(s.seed, step, qseed, _STREAM_WP)
        u = {}
        for i, kind, off, mask in group_tensors:
            arr = q.w[nodes[i].name] if kind == "w" else q.b[nodes[i].name]
            r = prng.rademacher(sw, off + np.arange(arr.size, dtype=np.uint64))
            u[(i, kind)] = np.where(mask, r.reshape(arr.shape).astype(np.int64), 0)
        sa = stream_seed(s.seed, step, qseed, _STREAM_NP)
        ua = {}
        for i in group_np:
            per = int(np.prod(nodes[i].shape))
            idx = (np.arange(batch, dtype=np.uint64)[:, None] * np.uint64(d_np_total)
                   + np.uint64(act_base[i]) + np.arange(per, dtype=np.uint64)[None, :])
            r = prng.rademacher(sa, idx).reshape(batch, *nodes[i].shape).astype(np.int64)
            ua[i] = np.where(act_masks[i], r, 0)
        return u, ua

    def run(u, ua, sign, start):
        w, b = dict(q.w), dict(q.b)
        for (i, kind), uu in u.items():
            nm = nodes[i].name
            sig = s.sigma_w if kind == "w" else s.sigma_b
            if kind == "w":
                w[nm] = np.clip(q.w[nm] + sign * sig * uu, -128, 127)
            else:
                b[nm] = np.clip(q.b[nm] + sign * sig * uu, -(1 << 31), (1 << 31) - 1)
        pert = {i: sign * s.sigma_a * uu for i, uu in ua.items()}
        acts = qnn.int_forward(q, x, perturb=pert or None, start=start, cache=acts0, w=w, b=b)
        return _losses(q, acts, labels)

    coeffs, forwards, macs = [], 1, batch * q.cfg.macs
    dims = {}   # node -> (WP dim scale, NP dim scale) of its group
    for gi, (g_wp, g_np) in enumerate(_groups(s, wp_nodes, np_nodes)):
        g_tensors = [t for t in tensors if t[0] in g_wp]
        d_wp = int(sum(t[3].sum() for t in g_tensors))
        d_np = int(sum(act_masks[i].sum() for i in g_np))
        dim_wp = _dim_scale(n, d_wp)
        dim_np = _dim_scale(n * batch if s.np_dim == "batch" else n, d_np)
        for i in g_wp + g_np:
            dims[i] = (dim_wp, dim_np)
        start = min(g_wp + g_np)
        part = batch * sum(nd.macs for nd in nodes[start:])
        for qi in range(n):
            u, ua = directions(gi * n + qi, g_tensors, g_np)
            lp = run(u, ua, +1, start)
            forwards, macs = forwards + 1, macs + part
            if s.antithetic or s.inplace:
                lm = run(u, ua, -1, start)
                forwards, macs = forwards + 1, macs + part
                c = fp32_mul(fp32_sub(qnn.mean_loss(lp), qnn.mean_loss(lm)), np.float32(0.5))
                cb = fp32_mul(fp32_sub(lp, lm), np.float32(0.5))
            else:
                c = fp32_sub(qnn.mean_loss(lp), L0)
                cb = fp32_sub(lp, l0)
            coeffs.append(float(c))
            if s.inplace:
                _apply_wp(q, g_tensors, {k: _pm(c, uu) for k, uu in u.items()}, s, dims, nodes,
                          stream_seed(s.seed, step, gi * n + qi, _STREAM_ROUND))
                continue
            for key, uu in u.items():
                g[key] = fp32_add(g[key], _pm(c, uu))
            for i, uu in ua.items():
                gy[i] = fp32_add(gy[i], fp32_mul(cb.reshape(-1, *([1] * 3)), i2f(uu)))
    if not s.inplace:
        rseed = stream_seed(s.seed, step, len(coeffs), _STREAM_ROUND)
        _apply_wp(q, tensors, g, s, dims, nodes, rseed)
        for i in np_nodes:
            _apply_np(q, i, acts0, x, gy[i], s, dims[i][1], batch, rseed,
                      offset + 2 * i * (1 << 20))
    return {"loss": float(L0), "coeff_rms": float(np.sqrt(np.mean(np.square(coeffs)))),
            "d_wp": int(sum(t[3].sum() for t in tensors)),
            "d_np": int(sum(m.sum() for m in act_masks.values())),
            "forwards": forwards, "macs": int(macs)}


def _dim_scale(n, d):
    return n / (n + d - 1) if d else 0.0


def wp_scale(q, s, i, kind, dim):
    """Per-output-channel FP32 constant ``k = -lr * dim / (sigma n s**2)`` of the WP update of
    node ``i``'s ``kind`` (``"w"``: ``s = s_w``; ``"b"``: ``s = s_x s_w``), ``dim`` the group's
    dim factor: the step is ``round(fp32_mul(g, k))`` (the chip holds ``k`` as data)."""
    nm = q.cfg.nodes[i].name
    sc, sig = (q.s_w[nm], s.sigma_w) if kind == "w" else (q.bias_scale(i), s.sigma_b)
    return as_f32((-s.layer_rate(nm) * dim / (sig * s.queries * sc ** 2)).astype(np.float32))


def _apply_wp(q, tensors, g, s, dims, nodes, rseed):
    for i, kind, off, _ in tensors:
        nm = nodes[i].name
        k = wp_scale(q, s, i, kind, dims[i][0])
        step = _round_update(fp32_mul(g[(i, kind)], k), s, rseed, off)
        if kind == "w":
            q.w[nm] = np.clip(q.w[nm] + step, -128, 127)
        else:
            q.b[nm] = np.clip(q.b[nm] + step, -(1 << 31), (1 << 31) - 1)


def np_local_grads(q, i, acts, x, dacc):
    """FP32 local gradients ``(dq_w, dq_b)`` of conv node ``i`` from ``dacc`` (B, H, W, C).

    ``dq_w[ky, kx, ci, co] = sum_m (x - z)[m, ci] * dacc[m, co]`` over ``m = (sample, row,
    column)`` in index order (:func:`fp32_dot`); grouped convolutions pair each output channel
    with its group's inputs. ``dq_b[co] = sum_m dacc[m, co]`` in the same order.
    """
    n = q.cfg.nodes[i]
    src = x if n.inputs[0] < 0 else acts[n.inputs[0]]
    xz = qnn._pad(src - q.zp[n.inputs[0]], n.pad)
    cout = n.shape[2]
    ci = n.cin // n.groups
    co_g = cout // n.groups
    d = dacc.reshape(-1, cout)
    dw = np.zeros(n.weight_shape, np.float32)
    for ky, kx, view in qnn._views(n, *src.shape[1:3]):
        a = i2f(xz[view].reshape(-1, n.cin))            # exact: |x - z| <= 255
        if n.groups == 1:
            dw[ky, kx] = fp32_dot(a.T[:, None, :], d.T[None, :, :])
        else:
            ag = a.reshape(-1, n.groups, ci)             # (M, g, ci)
            dg = d.reshape(-1, n.groups, co_g)           # (M, g, co_g)
            r = fp32_dot(np.moveaxis(ag, 0, -1)[:, :, None, :],     # (g, ci, 1, M)
                         np.moveaxis(dg, 0, -1)[:, None, :, :])     # (g, 1, co_g, M)
            dw[ky, kx] = np.transpose(r, (1, 0, 2)).reshape(ci, cout)
    db = fp32_sum(d.T, axis=-1)
    return dw, db


def np_scales(q, s, i, dim, batch):
    """FP32 constants of node ``i``'s NP update ``(k, kw, kb)``: ``k`` (per output channel)
    turns the accumulated output gradient into ``dacc``, ``kw`` / ``kb`` (per channel) scale
    the local weight and bias gradients into integer steps (the chip holds them as data:
    ``golden.zo_compiler.np_constants``)."""
    node = q.cfg.nodes[i]
    nm = node.name
    rescale = q.scale[node.inputs[0]] * q.s_w[nm] / q.scale[i]
    k = as_f32((dim / (s.sigma_a * s.queries * batch) * rescale).astype(np.float32))
    kw = as_f32((-s.layer_rate(nm) / q.s_w[nm] ** 2).astype(np.float32))
    kb = as_f32((-s.layer_rate(nm) / q.bias_scale(i) ** 2).astype(np.float32))
    return k, kw, kb


def _apply_np(q, i, acts0, x, gy, s, dim, batch, rseed, off):
    node = q.cfg.nodes[i]
    nm = node.name
    y = acts0[i]
    lo = q.zp[i] if node.relu else -128
    live = (y > lo) & (y < 127)
    k, kw, kb = np_scales(q, s, i, dim, batch)
    dacc = np.where(live, fp32_mul(gy, k), np.float32(0))
    dw, db = np_local_grads(q, i, acts0, x, dacc)
    q.w[nm] = np.clip(q.w[nm] + _round_update(fp32_mul(dw, kw), s, rseed, off), -128, 127)
    q.b[nm] = np.clip(q.b[nm] + _round_update(fp32_mul(db, kb), s, rseed, off + (1 << 20)),
                      -(1 << 31), (1 << 31) - 1)


# --------------------------------------------------------------------------------------------
# Training loops (ZO, and the back-propagation references)
# --------------------------------------------------------------------------------------------

def evaluate(q, images, labels, batch=500):
    """Accuracy of the int8 model on float images in [0, 1]."""
    xq = qnn.quantize_input(images)
    pred = np.concatenate([qnn.int_forward(q, xq[i:i + batch])[-1][:, 0, 0, :].argmax(1)
                           for i in range(0, len(xq), batch)])
    return qnn.accuracy(pred, labels)


def _loop(step_fn, evaluate_fn, snapshot, data, *, epochs, batch, seed, progress=None):
    rng = np.random.default_rng([int(seed), 0x5a0])
    x, y = data.train.images, data.train.labels
    history = [{"epoch": 0, "val": evaluate_fn(data.val), "test": evaluate_fn(data.test)}]
    best = (history[0]["val"], 0, snapshot())
    step = 0
    for epoch in range(1, epochs + 1):
        order = rng.permutation(len(x))
        losses = []
        for i in range(0, len(x) - batch + 1, batch):
            idx = order[i:i + batch]
            losses.append(step_fn(x[idx], y[idx], step))
            step += 1
        rec = {"epoch": epoch, "loss": float(np.mean(losses)), "val": evaluate_fn(data.val),
               "test": evaluate_fn(data.test)}
        history.append(rec)
        if rec["val"] > best[0]:
            best = (rec["val"], epoch, snapshot())
        if progress:
            progress(rec)
    return history, best


def _result(history, best):
    return {"before": history[0]["test"], "after": history[best[1]]["test"],
            "best_epoch": best[1], "best_val": best[0], "history": history}


def train_zo(q, data, s, *, epochs=10, batch=50, progress=None, stepper=None):
    """Adapt the int8 model ``q`` (a copy is trained) with the ZO rule; returns the record and
    the trained model (parameters of the best validation epoch). ``stepper(q, x, labels, s,
    step)`` replaces :func:`zo_step` (e.g. the compiled step on the interpreter or the chip,
    :mod:`ttrain.golden.zo_compiler`); it must leave ``q`` as the step does. A schedule
    (``s.schedule``) runs over ``epochs`` x (train images // ``batch``) steps: step ``k`` gets
    ``s.at_step(k, total)``."""
    q = q.copy()
    stepper = zo_step if stepper is None else stepper
    total = epochs * (len(data.train.images) // batch)

    def step(xb, yb, k):
        return stepper(q, qnn.quantize_input(xb), yb, s.at_step(k, total), k)["loss"]

    history, best = _loop(step, lambda sp: evaluate(q, sp.images, sp.labels),
                          lambda: (q.copy()), data, epochs=epochs, batch=batch, seed=s.seed,
                          progress=progress)
    return _result(history, best), best[2]


def train_ste(q, data, *, lr, epochs=10, batch=50, seed=0, layers=None, progress=None):
    """int8 back-propagation reference: straight-through-estimator gradients of the integer
    model, the same quantization-aware integer update as ZO (host float arithmetic)."""
    q = q.copy()
    names = None if layers is None else set(layers)

    def step(xb, yb, k):
        xq = qnn.quantize_input(xb)
        acts = qnn.int_forward(q, xq)
        loss = float(qnn.mean_loss(_losses(q, acts, yb)))
        grads = qnn.ste_backward(q, xq, acts, yb)
        for i, nd in enumerate(q.cfg.nodes):
            if nd.kind != "conv" or (names is not None and nd.name not in names):
                continue
            gw, gb = grads[nd.name]
            q.w[nd.name] = np.clip(q.w[nd.name] + np.rint(-lr * gw / q.s_w[nd.name] ** 2)
                                   .astype(np.int64), -128, 127)
            q.b[nd.name] = np.clip(q.b[nd.name] + np.rint(-lr * gb / q.bias_scale(i) ** 2)
                                   .astype(np.int64), -(1 << 31), (1 << 31) - 1)
        return loss

    history, best = _loop(step, lambda sp: evaluate(q, sp.images, sp.labels),
                          lambda: q.copy(), data, epochs=epochs, batch=batch, seed=seed,
                          progress=progress)
    return _result(history, best), best[2]


def train_float(model, data, *, lr, epochs=10, batch=50, seed=0, progress=None):
    """float back-propagation reference: fine-tune a copy of the float model (float SGD)."""
    import copy
    model = copy.deepcopy(model)

    def ev(sp):
        return qnn.accuracy(model.predict(sp.images[..., None]), sp.labels)

    def step(xb, yb, k):
        return model.sgd_step(xb[..., None], yb, lr)

    history, best = _loop(step, ev, lambda: copy.deepcopy(model.params), data, epochs=epochs,
                          batch=batch, seed=seed, progress=progress)
    return _result(history, best), best[2]

