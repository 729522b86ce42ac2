"""Online training on a drifting stream: low-rank training and its baselines, one sample at a
time, with writes per weight cell counted.

Every rule runs the same loop on the same fixed-point model (:mod:`ttrain.golden.lrt_model`)
and stream (:mod:`ttrain.golden.drift`): for each sample, **predict first** (online accuracy),
then forward/backward once and train on it:

* biases (16-bit, every rule, every sample): ``b -= f2i(bias_lr * dz * 2**12)``, saturated;
* ``lrt``: every layer's ``dz (x) a`` goes through one rankReduce (:mod:`ttrain.golden.lrt`;
  the cores of all layers are factored in one batched call, each on its own); after every
  ``B`` samples since the last write (``B`` = 100 for dense layers, 10 for convolutions) the
  read-out ``G = lr * L R^T`` (``norm="none"``) or ``G = lr * sqrt(B_eff) * MN(L) MN(R)^T``
  (``norm="max"``, one :class:`~ttrain.golden.lrt.MaxNorm` per factor and layer) is quantized
  to the weights' LSB, ``delta = f2i(G * 2**7)``, and written when at least 1% of its entries
  are non-zero (:func:`~ttrain.golden.lrt.write_weights`); then the accumulator restarts;
  otherwise it keeps accumulating and the rule is tried again ``B`` samples later (the
  effective batch ``B_eff`` grows);
* ``sgd``: 8-bit SGD at batch 1, ``delta = f2i(lr * (dz (x) a) * 2**7)`` applied every sample
  (a cell is written when its value changes); with ``rounding="stochastic"`` the step is
  ``f2i_floor(lr * (dz (x) a) * 2**7 + u)``, ``u = (draw(seed, i * cells + cell) >> 8) * 2**-24``
  uniform in [0, 1) (:mod:`ttrain.golden.prng`; ``cells`` counts every layer's weights, in
  layer order, row-major): an unbiased quantized step, so updates below one LSB still move the
  weights in expectation (the low-precision SGD that keeps learning, and writes);
* ``sgd-accum``: the same gradient summed in an FP32 accumulator of the weights' size (the
  auxiliary memory LRT avoids), read out with the LRT write rule every ``B`` samples;
* ``bias``: biases only, weights never written.

A write of a cell is counted when its stored value changes (:class:`~ttrain.golden.lrt.
WriteCounter`); saturated cells that keep their value are not written. Every result also has
``writes_paper_count``, the count of the authors' code (``docs/lrt.md``): for the ``sgd`` rule a
convolution cell counts once per output pixel of a sample where its input and its output
gradient are both non-zero (the per-pixel update of an in-memory array), whether or not the
summed quantized step is; every other cell and rule counts as above.
"""

import time
from dataclasses import asdict, dataclass

import numpy as np

from . import lrt, prng
from .lrt_model import A_FRAC, B_FRAC, G_FRAC, W_FRAC, quantize_input
from .numerics import saturate
from .quant import f2i, i2f
from .svd import fp32_sqrt, jacobi_svd

__all__ = ["RULES", "NORMS", "OnlineSettings", "run_online", "BENCHMARK_RUNS", "benchmark"]

RULES = ("lrt", "sgd", "sgd-accum", "bias")
NORMS = ("none", "max")
ROUNDINGS = ("nearest", "stochastic")
_F32 = np.float32


@dataclass(frozen=True)
class OnlineSettings:
    """One online run: ``rule`` of :data:`RULES`; LRT ``variant``/``norm``/``rank``/``kappa``;
    ``batch`` the effective batch (samples) of dense layers, ``conv_batch`` (images) of layers
    with more than one output pixel; ``lr`` of the weights, ``bias_lr`` of the
    biases (the same for every rule); ``seed`` of the unbiased reduction's random signs and of
    the stochastic rounding; ``rounding`` of the sgd rule's weight step (:data:`ROUNDINGS`)."""
    rule: str = "lrt"
    variant: str = "biased"
    norm: str = "none"
    rank: int = 4
    batch: int = 100
    conv_batch: int = 10
    lr: float = 0.01
    bias_lr: float = 0.01
    kappa: float = lrt.KAPPA_TH
    seed: int = 0
    rounding: str = "nearest"

    def check(self):
        if self.rule not in RULES:
            raise ValueError(f"unknown online rule {self.rule!r}; choose one of {', '.join(RULES)}")
        if self.variant not in lrt.VARIANTS:
            raise ValueError(f"unknown LRT variant {self.variant!r}; choose biased or unbiased")
        if self.norm not in NORMS:
            raise ValueError(f"unknown norm {self.norm!r}; choose none or max")
        for name, v, lo in (("rank", self.rank, 1), ("batch", self.batch, 1),
                            ("conv_batch", self.conv_batch, 1)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
                raise ValueError(f"{name} must be an integer >= {lo}, not {v!r}")
        for name in ("lr", "bias_lr"):
            v = getattr(self, name)
            if not (np.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be positive and finite, not {v!r}")
        if self.rounding not in ROUNDINGS:
            raise ValueError(f"unknown rounding {self.rounding!r}; choose nearest or stochastic")
        if self.rounding == "stochastic" and self.rule != "sgd":
            raise ValueError(f"stochastic rounding is a variant of the sgd baseline, not of "
                             f"{self.rule!r}")
        if self.seed < 0 or self.seed >= 1 << 32:
            raise ValueError(f"seed must lie in [0, 2**32), not {self.seed}")
        return self


def _readout(lr, B_eff, L, R, norms):
    if norms is None:
        G = lrt._matmul(L, np.swapaxes(R, -1, -2))
        return np.multiply(G, _F32(lr))
    Ln, Rn = norms[0](L), norms[1](R)
    G = lrt._matmul(Ln, np.swapaxes(Rn, -1, -2))
    return np.multiply(G, np.multiply(_F32(lr), fp32_sqrt(_F32(B_eff))))


def run_online(model, stream, settings, *, progress=None, stepper=None):
    """Train ``model`` (a :class:`~ttrain.golden.lrt_model.FixedMLP` or
    :class:`~ttrain.golden.lrt_model.FixedCNN`, modified in place) on ``stream``
    (:class:`~ttrain.golden.drift.DriftStream`) by ``settings``; returns the result dict
    (online and final accuracy, writes per cell, auxiliary memory, counters).

    A layer with ``P`` output pixels (``model.pixels``; 1 for a dense layer) has ``P`` outer
    products per sample, ``dz_p (x) a_p`` in raster order. LRT feeds each to its own rankReduce
    (the cores of the layers' p-th pixels are factored in one batched call; the random signs of
    pixel ``p`` of sample ``i`` are :func:`~ttrain.golden.lrt.sign_seed` ``(seed, layer, i P +
    p)``) and reads a conv layer out every ``conv_batch`` images; SGD and the accumulator take
    their sum, ``sum_p g_p (x) a_p`` in exact integers times ``2**-14``; the biases ``sum_p g_p``.
    For ``P = 1`` this is the dense rule above, bit for bit.

    ``stepper`` (``rule="lrt"`` only): ``stepper(model, settings)`` returns an object that
    trains on the compiled programs instead of this module's NumPy
    (:class:`ttrain.golden.lrt_compiler.InterpretedLRT`, or the chip's
    :class:`ttrain.platforms.host.lrt_chip.ChipLRT`): ``sample(x, label, index) -> logits``,
    ``readout_schedule`` (``(name, period, layers)``: after every ``period``-th sample
    ``readout(name)`` gives the written flags of ``layers``), ``weights()``, ``biases()``,
    ``counters()``, ``skipped()``, ``close()``. The loop is the same; the numbers are
    bit-identical, for the dense and the convolutional models."""
    s = settings.check()
    pix = list(model.pixels)
    if stepper is not None:
        if s.rule != "lrt":
            raise ValueError(f"the compiled online programs run the lrt rule, not {s.rule!r}")
        return _run_stepper(model, stream, s, stepper(model.copy(), s), progress)
    t0 = time.process_time()
    x_test = quantize_input(stream.test_images)
    before = float(np.mean(model.predict(x_test) == stream.test_labels))
    n_layers = len(model.w)
    batch = [s.batch if p == 1 else s.conv_batch for p in pix]
    counters = [lrt.WriteCounter.of_shape(w.shape) for w in model.w]
    # The authors' count of SGD writes (lr/layers.py, count_version=2): a conv cell once per
    # output pixel whose input and gradient are both non-zero, whatever the summed step.
    per_pixel = [np.zeros(w.shape, np.int64) for w in model.w]
    bias_counters = [lrt.WriteCounter.of_shape(b.shape) for b in model.b]
    states = [lrt.new_state(w.shape[0], w.shape[1], s.rank) for w in model.w]
    accum = [np.zeros(w.shape, _F32) for w in model.w]
    norms = [(lrt.MaxNorm(), lrt.MaxNorm()) if s.norm == "max" else None for _ in model.w]
    since = [0] * n_layers
    writes = [0] * n_layers
    attempts = [0] * n_layers
    skipped = [0] * n_layers
    lr, blr = _F32(s.lr), _F32(s.bias_lr)
    cells = sum(w.size for w in model.w)
    correct = 0
    xs = quantize_input(stream.images)
    for i in range(len(stream)):
        y = int(stream.labels[i])
        acts, logits = model.forward(xs[i:i + 1])
        correct += int(np.argmax(logits[0]) == y)
        g = model.backward(acts, logits, [y])
        gs = [g[l][0].reshape(pix[l], -1) for l in range(n_layers)]
        ais = [acts[l][0].reshape(pix[l], -1) for l in range(n_layers)]
        for l in range(n_layers):
            dzsum = np.multiply(i2f(gs[l].sum(axis=0)), _F32(2.0 ** -G_FRAC))
            db = f2i(np.multiply(np.multiply(blr, dzsum), _F32(2.0 ** B_FRAC)))
            new_b = saturate(model.b[l] - db, 16)
            bias_counters[l].record(model.b[l], new_b)
            model.b[l] = new_b
        if s.rule == "bias":
            pass
        elif s.rule == "sgd":
            off = 0
            for l in range(n_layers):
                G = np.multiply(np.multiply(lr, _grad(gs[l], ais[l])), _F32(2.0 ** W_FRAC))
                if s.rounding == "stochastic":
                    idx = (np.uint64(i) * np.uint64(cells) + np.uint64(off)
                           + np.arange(G.size, dtype=np.uint64)).reshape(G.shape)
                    u = np.multiply((prng.draw(np.uint32(s.seed), idx) >> np.uint32(8))
                                    .astype(_F32), _F32(2.0 ** -24))
                    delta = f2i(np.add(G, u), mode="floor")
                else:
                    delta = f2i(G)
                off += G.size
                if pix[l] > 1:
                    per_pixel[l] += (gs[l] != 0).T.astype(np.int64) @ (ais[l] != 0)
                model.w[l], written = lrt.write_weights(model.w[l], delta, counters[l],
                                                        min_fraction=0.0)
                writes[l] += int(written and np.any(delta))
        else:
            if s.rule == "lrt":
                dzs = [np.multiply(i2f(gs[l]), _F32(2.0 ** -G_FRAC)) for l in range(n_layers)]
                avs = [np.multiply(i2f(ais[l]), _F32(2.0 ** -A_FRAC)) for l in range(n_layers)]
                for p in range(max(pix)):
                    group = [l for l in range(n_layers) if pix[l] > p]
                    projs = {l: lrt.project(states[l], dzs[l][p], avs[l][p], s.kappa)
                             for l in group}
                    cores = np.stack([lrt.core(states[l], projs[l]) for l in group])
                    U, sig, V = jacobi_svd(cores)
                    for k, l in enumerate(group):
                        seeds = lrt.sign_seed(s.seed, l, i * pix[l] + p)
                        states[l] = lrt.reduce_rotate(states[l], projs[l], U[k], sig[k], V[k],
                                                      s.variant, seeds)
                        skipped[l] += int(projs[l].skip)
            else:
                for l in range(n_layers):
                    accum[l] = np.add(accum[l], _grad(gs[l], ais[l]))
            for l in range(n_layers):
                since[l] += 1
                if since[l] % batch[l]:
                    continue
                attempts[l] += 1
                if s.rule == "lrt":
                    L, R = lrt.factors(states[l])
                    G = _readout(s.lr, since[l], L, R, norms[l])
                else:
                    G = np.multiply(accum[l], lr)
                delta = f2i(np.multiply(G, _F32(2.0 ** W_FRAC)))
                model.w[l], written = lrt.write_weights(model.w[l], delta, counters[l])
                if written:
                    writes[l] += 1
                    since[l] = 0
                    states[l] = lrt.new_state(*model.w[l].shape, s.rank)
                    accum[l][:] = 0
        if progress is not None and (i + 1) % 500 == 0:
            progress(i + 1, correct / (i + 1))
    paper = [per_pixel[l] if pix[l] > 1 and s.rule == "sgd" else counters[l].counts
             for l in range(n_layers)]
    return _result(model, stream, s, x_test, before, correct, counters, bias_counters, writes,
                   attempts, skipped, t0, paper=paper)


def _grad(g, a):
    """``sum_p dz_p (x) a_p`` of int8 gradients ``g`` (P, n_o) and int activations ``a`` (P,
    n_i): the exact integer sum times ``2**-14`` in FP32 (exact: ``|sum| < 2**24``)."""
    acc = g.T.astype(np.int64) @ a.astype(np.int64)
    return np.multiply(i2f(acc), _F32(2.0 ** -(G_FRAC + A_FRAC)))


def _result(model, stream, s, x_test, before, correct, counters, bias_counters, writes,
            attempts, skipped, t0, paper=None):
    n_layers = len(model.w)
    pix = list(model.pixels)
    paper = [c.counts for c in counters] if paper is None else paper
    flat = np.concatenate([np.asarray(c).ravel() for c in paper])
    final = float(np.mean(model.predict(x_test) == stream.test_labels))
    allc = lrt.WriteCounter(np.concatenate([c.counts.ravel() for c in counters]))
    aux = {"lrt": [s.rank * (w.shape[0] + w.shape[1]) for w in model.w],
           "sgd-accum": [w.size for w in model.w]}.get(s.rule, [0] * n_layers)
    return {"settings": asdict(s), "samples": len(stream), "online_acc": correct / len(stream),
            "final_acc": final, "before_acc": before, "writes": allc.summary(),
            "writes_paper_count": {"max": int(flat.max()), "mean": float(flat.mean())},
            "layers": [{"shape": list(model.w[l].shape), "pixels": pix[l],
                        "batch": s.batch if pix[l] == 1 else s.conv_batch,
                        "writes": counters[l].summary(),
                        "writes_paper_count": {"max": int(np.max(paper[l])),
                                               "mean": float(np.mean(paper[l]))},
                        "weight_writes": writes[l], "readouts": attempts[l],
                        "skipped": skipped[l], "aux_words": aux[l],
                        "bias_writes_max": bias_counters[l].summary()["max"]}
                       for l in range(n_layers)],
            "cpu_s": time.process_time() - t0}


def _run_stepper(model, stream, s, chip, progress):
    """:func:`run_online`'s loop on compiled programs: the host writes each sample, reads the
    logits (the prediction before training), and runs the read-out every ``B`` samples."""
    t0 = time.process_time()
    x_test = quantize_input(stream.test_images)
    before = float(np.mean(model.predict(x_test) == stream.test_labels))
    n_layers = len(model.w)
    bias_counters = [lrt.WriteCounter.of_shape(b.shape) for b in model.b]
    writes, attempts = [0] * n_layers, [0] * n_layers
    correct = 0
    xs = quantize_input(stream.images)
    old_b = chip.biases()
    for i in range(len(stream)):
        y = int(stream.labels[i])
        logits = chip.sample(xs[i], y, i)
        correct += int(np.argmax(logits) == y)
        new_b = chip.biases()
        for l in range(n_layers):
            bias_counters[l].record(old_b[l], new_b[l])
        old_b = new_b
        for name, period, layers in chip.readout_schedule:
            if (i + 1) % period == 0:
                for l, written in zip(layers, chip.readout(name)):
                    attempts[l] += 1
                    writes[l] += int(written)
        if progress is not None and (i + 1) % 500 == 0:
            progress(i + 1, correct / (i + 1))
    chip.close()
    model.w[:] = chip.weights()
    model.b[:] = chip.biases()
    counters = [lrt.WriteCounter(c) for c in chip.counters()]
    return _result(model, stream, s, x_test, before, correct, counters, bias_counters, writes,
                   attempts, chip.skipped(), t0)


#: The benchmark table: label -> settings (rank 4, effective batch 100 for the dense layers).
BENCHMARK_RUNS = {
    "lrt biased/none": OnlineSettings("lrt", "biased", "none"),
    "lrt biased/max": OnlineSettings("lrt", "biased", "max"),
    "lrt unbiased/none": OnlineSettings("lrt", "unbiased", "none"),
    "lrt unbiased/max": OnlineSettings("lrt", "unbiased", "max"),
    "sgd batch 1": OnlineSettings("sgd"),
    "sgd stochastic": OnlineSettings("sgd", rounding="stochastic"),
    "sgd accumulator": OnlineSettings("sgd-accum"),
    "bias only": OnlineSettings("bias"),
}


def benchmark(model_factory, stream, runs=None, *, lr=None, progress=None):
    """Run the labelled settings of :data:`BENCHMARK_RUNS` (or ``runs``: label -> settings) on
    fresh copies of the model; ``lr`` (label -> float) overrides learning rates."""
    from dataclasses import replace
    runs = BENCHMARK_RUNS if runs is None else runs
    out = {}
    for label, st in runs.items():
        if lr and label in lr:
            st = replace(st, lr=lr[label])
        out[label] = run_online(model_factory(), stream, st)
        if progress:
            progress(label, out[label])
    return out


#: Learning-rate grid of :func:`tune` (weights; biases keep ``bias_lr`` = 0.01).
TUNE_GRID = {
    "lrt biased/none": (3e-4, 1e-3, 3e-3), "lrt biased/max": (1e-4, 3e-4, 1e-3),
    "lrt unbiased/none": (3e-4, 1e-3, 3e-3), "lrt unbiased/max": (1e-4, 3e-4, 1e-3),
    "sgd batch 1": (3e-3, 1e-2, 3e-2), "sgd stochastic": (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2),
    "sgd accumulator": (3e-4, 1e-3, 3e-3),
}
#: The grid of ``digits-lrt-cnn``: :data:`TUNE_GRID` with the max-norm rows one step longer
#: (on the conv model their best rate was the grid's largest, 1e-3).
TUNE_GRID_CONV = {**TUNE_GRID, "lrt biased/max": (1e-4, 3e-4, 1e-3, 3e-3),
                  "lrt unbiased/max": (1e-4, 3e-4, 1e-3, 3e-3)}
#: The tuning stream: digits-drift seed 1 (another corruption sequence than the benchmark's
#: seed 0), 4 segments of 500 samples.
TUNE_STREAM = {"seed": 1, "segments": 4, "segment_len": 500, "ramp": 250}
#: The tuning stream of the convolutional preset: the same corruptions at half the length (one
#: LRT run of ``digits-lrt-cnn`` feeds 32 rankReduces per sample, ~0.27 s of golden CPU).
TUNE_STREAM_CONV = {"seed": 1, "segments": 4, "segment_len": 250, "ramp": 125}


def tune(model_factory, stream, grid=None, *, progress=None):
    """Run every (label, lr) of ``grid`` (default :data:`TUNE_GRID`) on ``stream``; returns
    ``{label: {lr: result}}`` and, per label, the lr of the best final accuracy (ties: the
    better online accuracy, then the smaller lr)."""
    from dataclasses import replace
    grid = TUNE_GRID if grid is None else grid
    table, best = {}, {}
    for label, lrs in grid.items():
        table[label] = {}
        for lr in lrs:
            r = run_online(model_factory(), stream, replace(BENCHMARK_RUNS[label], lr=lr))
            table[label][lr] = r
            if progress:
                progress(label, lr, r)
        best[label] = max(lrs, key=lambda v: (table[label][v]["final_acc"],
                                              table[label][v]["online_acc"], -v))
    return table, best


#: Default weight learning rates of the CLI and the benchmark: the best of :data:`TUNE_GRID` on
#: the tuning stream :data:`TUNE_STREAM` (``docs/lrt.md`` has the grid); ``bias only`` has no
#: weight rate (its entry is unused).
DEFAULT_LR = {
    "lrt biased/none": 3e-3, "lrt biased/max": 1e-3, "lrt unbiased/none": 3e-3,
    "lrt unbiased/max": 3e-4, "sgd batch 1": 3e-3, "sgd stochastic": 3e-3,
    "sgd accumulator": 3e-3, "bias only": 1e-2,
}


#: Default weight learning rates of ``digits-lrt-cnn``: the best of :data:`TUNE_GRID_CONV` on
#: :data:`TUNE_STREAM_CONV` (``python -m ttrain.golden.lrt_online --config digits-lrt-cnn
#: --tune``; ``docs/lrt.md`` has the grid).
DEFAULT_LR_CONV = {
    "lrt biased/none": 3e-4, "lrt biased/max": 1e-3, "lrt unbiased/none": 3e-4,
    "lrt unbiased/max": 1e-3, "sgd batch 1": 1e-2, "sgd stochastic": 3e-3,
    "sgd accumulator": 3e-4, "bias only": 1e-2,
}


def default_lr(config):
    """The tuned weight learning rates of the preset ``config`` (label -> rate)."""
    return DEFAULT_LR if config == "digits-mlp" else DEFAULT_LR_CONV


def format_table(results):
    """Return the benchmark table (one line per run) as text."""
    lines = [f"{'run':20s} {'lr':>7s} {'online %':>9s} {'final %':>8s} {'writes/cell max':>16s} "
             f"{'mean':>7s} {'weight writes':>14s} {'skipped %':>10s} {'aux words':>10s}"]
    for label, r in results.items():
        layers = r["layers"]
        ww = "/".join(str(L["weight_writes"]) for L in layers)
        sk = sum(L["skipped"] for L in layers) / sum(L.get("pixels", 1) * r["samples"]
                                                      for L in layers)
        aux = sum(L["aux_words"] for L in layers)
        lines.append(f"{label:20s} {r['settings']['lr']:7g} {100 * r['online_acc']:9.1f} "
                     f"{100 * r['final_acc']:8.1f} {r['writes']['max']:16d} "
                     f"{r['writes']['mean']:7.3f} {ww:>14s} {100 * sk:10.1f} {aux:10,d}")
    return "\n".join(lines)


def _positive_float(text):
    """argparse type: a finite float > 0."""
    import argparse
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (np.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"must be positive and finite, not {text!r}")
    return v


def main(argv=None):
    """``python -m ttrain.golden.lrt_online [--config NAME] [--tune] [--seed S] [--lr LR] [--json
    FILE]``: the benchmark table of ``NAME`` (default ``digits-mlp``) on digits-drift (seed 0: the stream of ``docs/lrt.md``), or the
    learning-rate grid on the tuning stream. The benchmark's weight learning rates are
    :data:`DEFAULT_LR` (tuned per run), or with ``--lr`` one rate for every run (the paper's
    protocol is 0.01); biases keep ``bias_lr`` = 0.01 either way."""
    import argparse
    import json
    from . import drift, lrt_model
    p = argparse.ArgumentParser(prog="python -m ttrain.golden.lrt_online")
    p.add_argument("--config", choices=tuple(lrt_model.LRT_PRESETS), default="digits-mlp",
                   help="the fixed-point model (default digits-mlp)")
    p.add_argument("--tune", action="store_true", help="run the learning-rate grid instead")
    p.add_argument("--seed", type=int, default=0, help="digits-drift seed (default 0)")
    p.add_argument("--lr", type=_positive_float, metavar="LR",
                   help="one weight learning rate for every benchmark run (default: the tuned "
                        "DEFAULT_LR per run)")
    p.add_argument("--runs", metavar="LABELS",
                   help="comma-separated subset of the runs (default all: "
                        f"{', '.join(BENCHMARK_RUNS)})")
    p.add_argument("--json", metavar="FILE", help="write every run's result as JSON")
    args = p.parse_args(argv)
    labels = list(BENCHMARK_RUNS) if args.runs is None else args.runs.split(",")
    unknown = [x for x in labels if x not in BENCHMARK_RUNS]
    if unknown:
        p.error(f"unknown run {unknown[0]!r} in --runs; choose from {', '.join(BENCHMARK_RUNS)}")
    if args.tune and args.lr is not None:
        p.error("--lr sets the benchmark's rate; --tune runs its own grid")

    def factory():
        return lrt_model.pretrained(args.config, 0)[0]

    if args.tune:
        spec = TUNE_STREAM if args.config == "digits-mlp" else TUNE_STREAM_CONV
        stream = drift.make_stream(**spec)
        print(f"tuning stream {spec}: {' -> '.join(stream.corruptions)}")
        full_grid = TUNE_GRID if args.config == "digits-mlp" else TUNE_GRID_CONV
        grid = {k: v for k, v in full_grid.items() if k in labels}
        table, best = tune(factory, stream, grid, progress=lambda label, lr, r: print(
            f"{label:20s} lr {lr:<7g} online {100 * r['online_acc']:.1f} final "
            f"{100 * r['final_acc']:.1f} writes max {r['writes']['max']} mean "
            f"{r['writes']['mean']:.3f}", flush=True))
        print("best:", best)
        out = {label: {str(lr): r for lr, r in rows.items()} for label, rows in table.items()}
    else:
        stream = drift.make_stream(args.seed)
        print(f"digits-drift seed {args.seed}: {' -> '.join(stream.corruptions)}, "
              f"{len(stream)} samples; test: {stream.corruptions[-1]}")
        lr = default_lr(args.config) if args.lr is None else dict.fromkeys(BENCHMARK_RUNS,
                                                                            args.lr)
        runs = {k: BENCHMARK_RUNS[k] for k in labels}
        out = benchmark(factory, stream, runs, lr=lr, progress=lambda label, r: print(
            f"  {label}: {r['cpu_s']:.0f} s CPU", flush=True))
        print(f"before training: final {100 * next(iter(out.values()))['before_acc']:.1f}%")
        print(format_table(out))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
