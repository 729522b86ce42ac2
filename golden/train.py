"""SGD training of the tensorized transformer on an intent (+ slot) data set.

:func:`train` runs plain mini-batch SGD (no momentum, no Adam: the update the accelerator
implements, ``p -= lr * g`` via :func:`ttrain.golden.model.sgd_update`) with an optional
learning-rate schedule:

``"constant"``
    ``lr`` at every step.
``"linear"``
    linear warm-up over the first ``warmup`` fraction of the steps (0 = none), then linear decay
    from ``lr`` towards 0 (``lr / n`` at the last of ``n`` decay steps).

After each epoch it evaluates intent accuracy (first-listed-intent rule and exact label string)
and, with the slot head, conlleval-style slot span F1 on dev and test, keeps the parameters of
the best dev epoch (intent accuracy, ties to the lower dev loss) and returns them. With
``out_dir`` it writes ``best.npz`` (see :func:`save_checkpoint`), ``history.json`` and
``curves.png`` (loss and accuracy per epoch).

The model's own training aids (``cfg.dropout``, ``cfg.label_smoothing``,
``cfg.logit_adjustment``; see :mod:`ttrain.golden.model`) are switched on by the config: the
dropout masks come from their own generator ``default_rng([seed, 3])`` and the logit-adjustment
offsets from the train split's intent counts.

Optional, all outside the update rule: gradient clipping (``clip``, by the global norm, per
tensor or by the previous step's global norm: ``clip_mode``), word dropout to ``[UNK]`` on
training batches (``word_dropout``), class-rebalanced epochs (``balance``) and tail averaging of
the iterates (``average``). Defaults for ``epochs``, ``lr``, ``batch_size`` and these come from
the config (``cfg.epochs``, ``cfg.lr``, ``cfg.batch``, ``cfg.extra``).

Every run reports which of its settings the compiled training step (the chip) cannot run
(:func:`not_chip_runnable`): ``result["not_chip_runnable"]`` and ``result["chip_runnable"]``.
"""

import dataclasses
import json
import math
import os
import sys
import tempfile
import time
import zipfile
import zlib

import numpy as np

from .config import ModelConfig, TTMSpec, TTSpec
from .data import UNK, Dataset

__all__ = ["train", "evaluate", "lr_at", "epoch_order", "conll_spans", "slot_f1", "save_checkpoint",
           "load_checkpoint", "config_to_dict", "config_from_dict", "plot_history",
           "unk_probabilities", "SCHEDULES", "check_config_fits", "check_out_dir",
           "write_atomically", "initial_params", "CLIP_MODES", "clip_per_tensor",
           "not_chip_runnable"]

SCHEDULES = ("constant", "linear")
#: ``clip_mode`` values: ``"global"`` scales all gradients of a step by ``min(1, clip / |g|)``
#: with ``|g|`` the L2 norm over every gradient of the step; ``"tensor"`` scales each parameter
#: array's gradient by ``min(1, clip / |g_k|)`` with its own norm; ``"lagged"`` scales step
#: ``t``'s gradients by ``min(1, clip / |g_{t-1}|)``, the global norm of the *previous* step's
#: (unclipped) gradients (step 0 unscaled) -- a scalar known before the step, folded into its
#: learning rate.
CLIP_MODES = ("global", "tensor", "lagged")
CHECKPOINT_FORMAT = 1
# Fields that describe hyperparameters, not the shapes of the parameters.
_NON_SHAPE_FIELDS = ("lr", "epochs", "description", "extra", "batch", "dropout",
                     "label_smoothing", "logit_adjustment")


# --------------------------------------------------------------------------------------------
# Config (de)serialization


def config_to_dict(cfg):
    """Return ``cfg`` as a JSON-serializable dict (inverse: :func:`config_from_dict`)."""
    d = dataclasses.asdict(cfg)
    return json.loads(json.dumps(d, default=list))


def config_from_dict(d):
    """Rebuild a :class:`ModelConfig` from :func:`config_to_dict` output (validated)."""
    d = dict(d)
    d["embedding"] = TTMSpec(**d["embedding"])
    for name in ("attention", "ffn1", "ffn2", "pooler"):
        d[name] = TTSpec(**d[name])
    return ModelConfig(**d)


# --------------------------------------------------------------------------------------------
# Metrics


def conll_spans(tags):
    """Return the set of ``(type, start, end)`` chunks (end exclusive) in a BIO tag sequence.

    conlleval rules: a chunk starts at ``B-x``, or at ``I-x`` not continuing a chunk of type
    ``x``; it ends before ``O``, ``B-*``, an ``I-`` of another type or the end. Tags without a
    ``B-``/``I-`` prefix (``O``, ``PAD``, ``UNK``) are outside.
    """
    spans = set()
    start, kind = None, None
    for i, tag in enumerate(list(tags) + ["O"]):
        prefix, _, t = tag.partition("-") if tag[:2] in ("B-", "I-") else ("O", "", None)
        continues = prefix == "I" and kind is not None and t == kind
        if start is not None and not continues:
            spans.add((kind, start, i))
            start, kind = None, None
        if prefix in ("B", "I") and start is None:
            start, kind = i, t
    return spans


def slot_f1(gold, pred, slot_labels):
    """Return ``(precision, recall, f1)`` of slot chunks, conlleval style, over a data split.

    Parameters
    ----------
    gold : ndarray of int, shape (n, S)
        Tag ids, ``-1`` where ignored ([CLS], padding).
    pred : ndarray of int, shape (n, S)
        Predicted tag ids (read where ``gold >= 0``).
    slot_labels : list of str
        Tag names.
    """
    gold, pred = np.asarray(gold), np.asarray(pred)
    if gold.shape != pred.shape:
        raise ValueError(f"gold {gold.shape} and predicted {pred.shape} slot arrays differ")
    n_gold = n_pred = n_ok = 0
    for g_row, p_row in zip(gold, pred):
        keep = g_row >= 0
        g = conll_spans([slot_labels[i] for i in g_row[keep]])
        p = conll_spans([slot_labels[i] for i in p_row[keep]])
        n_gold += len(g)
        n_pred += len(p)
        n_ok += len(g & p)
    precision = n_ok / n_pred if n_pred else 0.0
    recall = n_ok / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def _model_batch(batch, slot_head):
    keys = ("tokens", "segments", "mask", "intent") + (("slots",) if slot_head else ())
    return {k: batch[k] for k in keys}


def evaluate(cfg, params, dataset, split, *, batch_size=256):
    """Evaluate ``params`` on one split of ``dataset``.

    Returns
    -------
    dict
        ``loss`` (mean per sentence), ``intent_acc`` (first-listed-intent rule),
        ``intent_exact_acc`` (full label string), ``n``; with the slot head also ``slot_p``,
        ``slot_r``, ``slot_f1``.
    """
    from . import model
    data = dataset.batch(split)
    n = len(data["intent"])
    loss_sum, intent_pred, slot_pred = 0.0, [], []
    for start in range(0, n, batch_size):
        b = {k: v[start:start + batch_size] for k, v in data.items()}
        loss, _, out = model.forward_backward(cfg, params, _model_batch(b, cfg.slot_head),
                                              need_grads=False)
        loss_sum += float(loss) * len(b["intent"])
        intent_pred.append(np.argmax(out["intent_logits"], axis=-1))
        if cfg.slot_head:
            slot_pred.append(np.argmax(out["slot_logits"], axis=-1))
    intent_pred = np.concatenate(intent_pred)
    result = {"n": n, "loss": loss_sum / n,
              "intent_acc": float(np.mean(intent_pred == data["intent"])),
              "intent_exact_acc": float(np.mean(intent_pred == data["intent_exact"]))}
    if cfg.slot_head:
        p, r, f = slot_f1(data["slots"], np.concatenate(slot_pred), dataset.slot_labels)
        result.update(slot_p=p, slot_r=r, slot_f1=f)
    return result


# --------------------------------------------------------------------------------------------
# Checkpoints


def write_atomically(path, write):
    """Create or replace the file ``path`` atomically: ``write(f)`` fills a temporary file in the
    same directory (binary mode), which then replaces ``path`` (``os.replace``). A reader, or an
    interrupted run, sees the old file or the new one, never a part of one."""
    path = os.fspath(path)
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)                   # as open() would have made it
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def check_out_dir(path):
    """Raise ValueError unless ``path`` is a directory or can be created as one (call it before
    a long run, so the results are not lost at the end)."""
    path = os.path.abspath(os.fspath(path))
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"output directory {path} is an existing file: pass a directory")
    base = path
    while not os.path.exists(base):
        base = os.path.dirname(base)
    if not os.path.isdir(base):
        raise ValueError(f"output directory {path} cannot be created: {base} is a file")
    if not os.access(base, os.W_OK | os.X_OK):
        raise ValueError(f"output directory {path} cannot be written: {base} is not writable")


def save_checkpoint(path, cfg, params, *, vocab, intent_labels, slot_labels, meta=None):
    """Write ``params`` and what is needed to use them to an ``.npz`` file (atomically).

    Stored: every parameter array (key ``param/<name>``), the config (name and full JSON),
    the word vocabulary, intent and slot label lists and ``meta`` (a JSON-serializable dict).
    """
    arrays = {f"param/{k}": np.asarray(v) for k, v in params.items()}
    arrays["format"] = np.array(CHECKPOINT_FORMAT)
    arrays["config_name"] = np.array(cfg.name)
    arrays["config_json"] = np.array(json.dumps(config_to_dict(cfg)))
    arrays["vocab"] = np.array(list(vocab), dtype=str)
    arrays["intent_labels"] = np.array(list(intent_labels), dtype=str)
    arrays["slot_labels"] = np.array(list(slot_labels), dtype=str)
    arrays["meta_json"] = np.array(json.dumps(meta or {}))
    return write_atomically(path, lambda f: np.savez(f, **arrays))


_CHECKPOINT_KEYS = ("format", "config_json", "vocab", "intent_labels", "slot_labels",
                    "meta_json")
_NOT_A_CHECKPOINT = "pass a best.npz written by `ttrain train --out DIR`"


class _NotACheckpoint(ValueError):
    """Why a file is not a checkpoint (the text goes into the message's parentheses)."""


def _sniff(path):
    """Raise :class:`_NotACheckpoint` unless ``path`` starts like a zip (.npz) archive."""
    with open(path, "rb") as f:
        head = f.read(512)
    if not head:
        raise _NotACheckpoint("the file is empty")
    if head.startswith(b"\x93NUMPY"):
        raise _NotACheckpoint("a single NumPy .npy array, not an .npz archive")
    if not head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        try:
            head.decode("utf-8")
            kind = "a text file"
        except UnicodeDecodeError:
            kind = "binary data"
        raise _NotACheckpoint(f"{kind}, not an .npz archive")


def _read_checkpoint(path):
    """Return ``(stored config dict, rest)`` of a checkpoint file; raise on anything else."""
    _sniff(path)
    with np.load(path, allow_pickle=False) as z:
        missing = [k for k in _CHECKPOINT_KEYS if k not in z.files]
        if missing:
            raise _NotACheckpoint(f"a zip archive without the checkpoint entries "
                                  f"{', '.join(missing)}")
        if int(z["format"]) != CHECKPOINT_FORMAT:
            raise _FormatError(f"{path} has checkpoint format {int(z['format'])}, this ttrain "
                               f"reads format {CHECKPOINT_FORMAT}")
        # through ModelConfig, so fields added later get their defaults
        stored = config_to_dict(config_from_dict(json.loads(str(z["config_json"]))))
        params = {k[len("param/"):]: z[k] for k in z.files if k.startswith("param/")}
        out = {"params": params, "vocab": [str(w) for w in z["vocab"]],
               "intent_labels": [str(w) for w in z["intent_labels"]],
               "slot_labels": [str(w) for w in z["slot_labels"]],
               "meta": json.loads(str(z["meta_json"]))}
    if not params:
        raise _NotACheckpoint("no parameter arrays")
    return stored, out


class _FormatError(ValueError):
    pass


def load_checkpoint(path, cfg=None):
    """Read a checkpoint written by :func:`save_checkpoint`.

    Parameters
    ----------
    path : str or os.PathLike
        The ``.npz`` file.
    cfg : ModelConfig, optional
        If given, the checkpoint must have been written for this config (same name and shapes;
        ``lr``, ``epochs``, ``batch`` and ``description`` may differ), else ValueError (see
        :func:`check_config_fits`).

    Returns
    -------
    dict
        ``cfg`` (the stored :class:`ModelConfig`), ``params``, ``vocab``, ``intent_labels``,
        ``slot_labels``, ``meta``.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If it is not a readable checkpoint (empty, truncated, corrupted, another file type or
        another format), with a one-line message naming the file.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    try:
        stored, out = _read_checkpoint(path)
    except _FormatError:
        raise
    except _NotACheckpoint as exc:
        raise ValueError(f"{path} is not a ttrain checkpoint ({exc}): {_NOT_A_CHECKPOINT}") \
            from None
    except zipfile.BadZipFile as exc:
        raise ValueError(f"{path} is not a readable ttrain checkpoint (a truncated or corrupted "
                         f".npz archive: {exc}): {_NOT_A_CHECKPOINT}") from None
    except (ValueError, TypeError, KeyError, EOFError, OSError, zlib.error) as exc:
        raise ValueError(f"{path} is not a readable ttrain checkpoint (corrupted: "
                         f"{type(exc).__name__}: {' '.join(str(exc).split())}): "
                         f"{_NOT_A_CHECKPOINT}") from None
    if cfg is not None:
        check_config_fits(stored, cfg, path)
    out["cfg"] = config_from_dict(stored)
    return out


def check_config_fits(stored, cfg, path):
    """Raise ValueError unless the checkpoint config ``stored`` (a ModelConfig or its dict) has
    the name and parameter shapes of ``cfg`` (hyperparameters may differ)."""
    if isinstance(stored, ModelConfig):
        stored = config_to_dict(stored)
    want = config_to_dict(cfg)
    if stored["name"] != want["name"]:
        raise ValueError(f"checkpoint {path} was written for config {stored['name']!r}, not "
                         f"{cfg.name!r}: use --config {stored['name']} (`ttrain eval "
                         f"--checkpoint {path}` takes the config from the checkpoint)")
    diff = [k for k in want if k not in _NON_SHAPE_FIELDS and stored.get(k) != want[k]]
    if diff:
        detail = ", ".join(f"{k}: checkpoint {stored.get(k)!r} vs config {want[k]!r}"
                           for k in diff)
        raise ValueError(f"checkpoint {path} does not fit config {cfg.name!r} ({detail})")


# --------------------------------------------------------------------------------------------
# Plotting


def plot_history(history, path, title=""):
    """Save loss and accuracy curves (per epoch) of a :func:`train` history as a PNG."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    epochs = [h["epoch"] for h in history]
    fig = Figure(figsize=(10, 4))
    FigureCanvasAgg(fig)
    ax_loss, ax_acc = fig.subplots(1, 2)
    ax_loss.plot(epochs, [h["train_loss"] for h in history], "o-", label="train")
    ax_loss.plot(epochs, [h["dev_loss"] for h in history], "s-", label="dev")
    ax_loss.set_xlabel("epoch")
    ax_loss.set_ylabel("loss (mean per sentence)")
    ax_loss.set_yscale("log")
    ax_loss.legend()
    ax_loss.grid(alpha=0.3)
    for key, label, style in (("train_acc", "train (running)", "o-"), ("dev_acc", "dev", "s-"),
                              ("test_acc", "test", "^-"), ("dev_slot_f1", "dev slot F1", "s--"),
                              ("test_slot_f1", "test slot F1", "^--")):
        if key in history[0]:
            ax_acc.plot(epochs, [100 * h[key] for h in history], style, label=label)
    ax_acc.set_xlabel("epoch")
    ax_acc.set_ylabel("intent accuracy / slot F1 (%)")
    ax_acc.legend()
    ax_acc.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return write_atomically(path, lambda f: fig.savefig(f, format="png", dpi=100))


# --------------------------------------------------------------------------------------------
# Training


def lr_at(step, total, lr, schedule="constant", warmup=0.0):
    """Return the learning rate of 0-based ``step`` out of ``total`` (see the module doc)."""
    if schedule == "constant":
        return lr
    if schedule == "linear":
        n_warm = int(round(warmup * total))
        if step < n_warm:
            return lr * (step + 1) / n_warm
        return lr * (total - step) / max(1, total - n_warm)
    raise ValueError(f"unknown schedule {schedule!r}; choose one of {list(SCHEDULES)}")


def unk_probabilities(dataset, alpha):
    """Return, per token id, the extra ``[UNK]`` probability ``alpha / (alpha + c)``.

    ``c`` is the number of times the token occurs as a word in the train split (``[CLS]`` and
    padding excluded). Specials and ``[UNK]`` itself get 0; so do vocabulary words never seen
    as train words (none, when the vocabulary comes from the train split).
    """
    if not alpha > 0:
        raise ValueError(f"alpha must be positive, got {alpha!r}")
    data = dataset.batch("train")
    words = data["mask"].copy()
    words[:, 0] = False
    counts = np.bincount(data["tokens"][words], minlength=dataset.vocab_size)
    p = np.where(counts > 0, alpha / (alpha + np.maximum(counts, 1)), 0.0)
    p[:3] = 0.0                                         # [PAD], [UNK], [CLS]
    return p


def epoch_order(labels, balance, rng):
    """Return the sentence indices of one class-rebalanced epoch (``len(labels)`` draws).

    Sentence ``i`` is drawn with replacement with probability proportional to
    ``count(labels[i]) ** -balance``: 0 = uniform, 1 = every class equally often.
    """
    labels = np.asarray(labels)
    weight = np.maximum(np.bincount(labels), 1).astype(np.float64) ** -balance
    p = weight[labels] / weight[labels].sum()
    return rng.choice(len(labels), size=len(labels), replace=True, p=p)


def clip_per_tensor(grads, max_norm):
    """Scale each gradient array of ``grads`` in place so its own L2 norm is at most ``max_norm``.

    Per tensor: ``g_k *= min(1, max_norm / |g_k|)`` for every parameter array ``k`` (each TT
    core, bias, LayerNorm vector and head matrix on its own), so a tensor's scale depends only on
    its own gradient -- what a fused update could apply right before that tensor's ``UPDATE``.
    Returns ``{name: norm before clipping}``.
    """
    max_norm = float(max_norm)
    if not max_norm > 0:
        raise ValueError(f"max_norm must be positive, got {max_norm!r}")
    norms = {}
    for name, g in grads.items():
        norm = math.sqrt(float(np.vdot(g, g)))
        norms[name] = norm
        if norm > max_norm:
            g *= g.dtype.type(max_norm / norm)
    return norms


def _global_norm(grads):
    return math.sqrt(sum(float(np.vdot(g, g)) for g in grads.values()))


def _make_clip_stepper(mode, clip):
    """A :class:`~ttrain.golden.stepper.FastStepper` that clips per tensor or by the lagged norm."""
    from .stepper import FastStepper, _model_batch as batch_of

    class ClipStepper(FastStepper):
        def start(self, ctx):
            super().start(ctx)
            self.clip = None                 # the base class's global clip stays off
            self.prev_norm = None            # global gradient norm of the previous step

        def steps(self, batches, rates):
            model, cfg, out = self._model, self.cfg, []
            for batch, rate in zip(batches, rates):
                loss, grads, res = model.forward_backward(cfg, self._params,
                                                          batch_of(batch, cfg.slot_head),
                                                          rng=self.hidden_rng,
                                                          intent_offset=self.intent_offset)
                out.append((loss, res["intent_logits"]))
                if not np.isfinite(loss):
                    break
                if mode == "tensor":
                    clip_per_tensor(grads, clip)
                else:                        # "lagged": the scale is known before the step
                    scale = 1.0 if self.prev_norm is None or self.prev_norm <= clip \
                        else clip / self.prev_norm
                    self.prev_norm = _global_norm(grads)
                    rate = rate * scale
                model.sgd_update(self._params, grads, rate)
            return out

    return ClipStepper()


# Why a setting is not part of the compiled training step (golden/model_compiler.py), today.
_CLIP_WHY = {
    "global": "the compiled step fuses each tensor's SGD UPDATE into the backward pass, so no "
              "norm over all gradients exists before the first update (needs the unfused step "
              "with every gradient kept, plus a norm and a scale pass: not compiled)",
    "tensor": "needs each tensor's gradient sum of squares, a sqrt and a scale before its fused "
              "UPDATE: not compiled",
    "lagged": "needs the step's gradient sum of squares as an output word (the host would fold "
              "min(1, clip/norm) into the next step's rate, which is sample data): not compiled",
}


def not_chip_runnable(cfg, *, batch_size=None, clip=None, clip_mode="global", average=0.0,
                      balance=0.0, unk_alpha=0.0):
    """Return ``[(option, why), ...]``: the settings of a run the chip cannot run today.

    The chip runs the step of :func:`ttrain.golden.model_compiler.compile_model` at
    ``cfg.batch``: plain SGD with the learning rate as per-step sample data, so a schedule
    (warm-up, decay), the initialization (``init_scale``), word dropout (the host sends the
    sample with ``[UNK]`` in place of dropped words), epochs and the seed are chip-runnable.
    Listed here: gradient clipping (any ``clip_mode``), hidden dropout, label smoothing, logit
    adjustment, mean pooling and the slot head (not compiled), a batch other than
    ``cfg.batch``, tail averaging, and class rebalancing / frequency word dropout (host-side,
    but dropped by ``chip_model_config`` today). An empty list = the whole run is chip-runnable.
    """
    out = []
    if clip is not None:
        out.append((f"clip {clip:g} ({clip_mode})", _CLIP_WHY[clip_mode]))
    if cfg.dropout:
        out.append((f"dropout {cfg.dropout:g}", "hidden-dropout masks are neither sample data "
                    "nor generated on chip (chip_model_config sets dropout 0)"))
    if cfg.label_smoothing:
        out.append((f"label_smoothing {cfg.label_smoothing:g}", "not compiled "
                    "(model_compiler.model_unsupported)"))
    if cfg.logit_adjustment:
        out.append((f"logit_adjustment {cfg.logit_adjustment:g}", "not compiled "
                    "(model_compiler.model_unsupported)"))
    if cfg.pooling != "cls":
        out.append((f"pooling {cfg.pooling}", "only [CLS] pooling is compiled"))
    if cfg.slot_head:
        out.append(("slot_head", "the slot head is not compiled"))
    if batch_size is not None and batch_size != cfg.batch:
        out.append((f"batch_size {batch_size}", f"the compiled step of this config trains "
                    f"batch {cfg.batch}"))
    if average:
        out.append((f"average {average:g}", "tail averaging reads the parameters after every "
                    "step on the host; chip_model_config drops it"))
    if balance:
        out.append((f"balance {balance:g}", "host-side data order, but chip_model_config drops "
                    "it, so the compiled engines do not use it"))
    if unk_alpha:
        out.append((f"unk_alpha {unk_alpha:g}", "host-side word replacement, but "
                    "chip_model_config drops it, so the compiled engines do not use it"))
    return out


def _check_positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _fmt(value):
    return f"{100 * value:.2f}%"


def train(cfg, dataset, *, epochs=None, lr=None, seed=0, batch_size=None, slot_head=None,
          out_dir=None, progress=True, schedule=None, warmup=None, clip=None, word_dropout=None,
          average=None, balance=None, log=None, blas_threads=1, unk_alpha=None, init=None,
          stepper=None, max_steps=None, clip_mode=None):
    """Train a model of ``cfg`` on ``dataset`` with plain SGD and return the result.

    This is the one training loop: ``stepper`` (:mod:`ttrain.golden.stepper`) says what runs
    each step (the float32 fast path by default, the bit-exact interpreter, the simulated
    chip); data order, seeds, schedule, evaluation, checkpoints and curves are the same for
    all of them.

    Parameters
    ----------
    cfg : ModelConfig
        Shapes; ``n_intents``/``n_slots`` are replaced by the data set's when they differ.
    dataset : Dataset
        Encoded with ``cfg.seq_len`` and at most ``cfg.vocab`` words.
    epochs : int, optional
        Passes over the train split (default ``cfg.epochs``).
    lr : float, optional
        Peak learning rate (default ``cfg.lr``).
    seed : int
        Seeds initialization and shuffling; the same seed gives the same result.
    batch_size : int, optional
        Sentences per SGD step (default ``cfg.batch``; 1 is the paper's setting).
    slot_head : bool, optional
        Train the slot head too (default ``cfg.slot_head``).
    out_dir : str or os.PathLike, optional
        Where to write ``best.npz``, ``history.json`` and ``curves.png``.
    progress : bool
        Show a tqdm bar per epoch (only when stderr is a terminal).
    schedule : {"constant", "linear"}, optional
        Learning-rate schedule (default ``cfg.extra.get("schedule", "constant")``).
    warmup : float, optional
        Warm-up fraction of all steps for ``"linear"`` (default ``cfg.extra.get("warmup", 0)``).
    clip : float, optional
        Scale the gradient down to this global L2 norm when it is larger (default
        ``cfg.extra.get("clip")``, None = never). Still plain SGD: one scalar per step.
        Not chip-runnable (the compiled step fuses each tensor's update into the backward pass).
    clip_mode : {"global", "tensor", "lagged"}, optional
        How ``clip`` applies (default ``cfg.extra.get("clip_mode", "global")``; see
        :data:`CLIP_MODES`): ``"tensor"`` clips each parameter array's gradient to norm ``clip``
        on its own (:func:`clip_per_tensor`), ``"lagged"`` scales the step's rate by
        ``min(1, clip / |g_{t-1}|)`` with the previous step's global gradient norm. Both only on
        the default (golden) stepper; none is chip-runnable today (:func:`not_chip_runnable`).
    word_dropout : float, optional
        Probability that a training word (not ``[CLS]`` or padding) is replaced by ``[UNK]`` in
        a step (default ``cfg.extra.get("word_dropout", 0)``): teaches the model to use the
        context of words it has never seen, as happens on the test split. Evaluation never
        drops words.
    unk_alpha : float, optional
        Frequency-dependent word dropout on top of ``word_dropout``: a training word seen
        ``c`` times in the train split is also replaced by ``[UNK]`` with probability
        ``unk_alpha / (unk_alpha + c)`` (rare words, which look most like unseen test words,
        are dropped most; default ``cfg.extra.get("unk_alpha", 0)`` = off).
    average : float, optional
        Tail averaging (Polyak–Ruppert): over the last ``average`` fraction of the steps keep
        the running mean of the SGD iterates, and from then on evaluate, select and return the
        mean instead of the last iterate (default ``cfg.extra.get("average", 0)`` = off). The
        SGD updates themselves are unchanged.
    balance : float, optional
        Class rebalancing of the training stream (default ``cfg.extra.get("balance", 0)``): 0
        shuffles the train split once per epoch (every sentence once); ``b > 0`` instead draws
        the epoch's sentences with replacement, sentence ``i`` with probability proportional to
        ``count(intent_i) ** -b`` (1 = every intent equally often). Rare intents are then seen
        more often without touching the loss or the update rule.
    log : callable, optional
        Called with one line of text per epoch (for example ``print``).
    init : dict of str to ndarray, optional
        Start from these parameters (for example a checkpoint's ``params``) instead of a seeded
        initialization; they must have the names and shapes of ``cfg``'s (after the
        ``n_intents``/``n_slots``/``slot_head`` changes), else ValueError before any step.
    blas_threads : int or None
        BLAS threads while training (None = leave as is). The matrices are small: one thread
        is fastest, and several threads on a shared 2-core machine are up to 14x slower
        (``docs/training.md``).
    stepper : ttrain.golden.stepper.Stepper, optional
        What runs the steps (default :class:`~ttrain.golden.stepper.FastStepper`). Its
        ``configure`` adapts ``cfg`` first (a compiled step: no hidden dropout, clipping,
        averaging or rebalancing; each change is logged as ``note: ...``).
    max_steps : int, optional
        Stop after this many steps (the schedule still spans all ``epochs``); the epoch in
        progress is evaluated as usual.

    Returns
    -------
    dict
        ``cfg`` (the config trained), ``params`` (best-dev parameters), ``history`` (one dict
        per epoch: lr, train loss and running accuracy, dev/test loss and accuracies, seconds),
        ``best_epoch``, ``dev`` and ``test`` (evaluation of the best parameters), ``seconds``,
        ``steps``, ``engine`` (the stepper's name), ``notes`` (its config changes),
        ``checkpoint`` / ``curves`` / ``history_file`` (paths or None), ``not_chip_runnable``
        (``[(option, why), ...]`` from :func:`not_chip_runnable`, empty when the chip can run
        every setting of the run) and ``chip_runnable`` (bool), and the stepper's ``report()``
        entries (the chip's cycles and simulation times).
    """
    args = (cfg, dataset, epochs, lr, seed, batch_size, slot_head, out_dir, progress, schedule,
            warmup, clip, word_dropout, average, balance, log, unk_alpha, init, stepper,
            max_steps, clip_mode)
    if blas_threads is None:
        return _train(*args)
    _check_positive_int("blas_threads", blas_threads)
    from threadpoolctl import threadpool_limits
    with threadpool_limits(limits=int(blas_threads), user_api="blas"):
        return _train(*args)


def initial_params(cfg, seed):
    """Return the initial parameters of a run: :func:`ttrain.golden.model.init_params` with
    ``default_rng(seed)``, then ``cfg.extra["init_scale"]`` applied.

    ``init_scale`` maps a parameter name, or the prefix of a TT/TTM tensor's cores
    (``"emb.pos"`` for ``emb.pos`` or ``emb.pos.core0 ...``), to a factor: a dense tensor is
    multiplied by it (0 allowed: e.g. position and segment tables that start at zero and are
    learnt), a tensor of ``k`` cores has each core multiplied by ``factor ** (1 / k)`` (so the
    dense equivalent scales by the factor; it must be positive, since all-zero cores get zero
    gradients and would never train). The chip trains whatever parameters the host writes
    into its param store, so this is initialization, not a change of the training step.
    """
    from . import model
    params = model.init_params(cfg, np.random.default_rng(seed))
    scales = cfg.extra.get("init_scale") or {}
    if not isinstance(scales, dict):
        raise ValueError(f"config {cfg.name!r}: extra['init_scale'] must be a dict of parameter "
                         f"name -> factor, got {type(scales).__name__}")
    for name, factor in scales.items():
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) \
                or not math.isfinite(factor) or factor < 0:
            raise ValueError(f"config {cfg.name!r}: init_scale[{name!r}] must be a finite "
                             f"number >= 0, got {factor!r}")
        if name in params:
            params[name] *= params[name].dtype.type(factor)
            continue
        cores = [k for k in params if k.startswith(f"{name}.core")]
        if not cores:
            raise ValueError(f"config {cfg.name!r}: init_scale names {name!r}, which is neither "
                             f"a parameter nor a tensor of cores of this model (e.g. "
                             f"{', '.join(sorted(params)[:3])})")
        if factor == 0:
            raise ValueError(f"config {cfg.name!r}: init_scale[{name!r}] = 0 would zero all "
                             f"{len(cores)} cores of a TT/TTM tensor, whose gradients are then "
                             f"0 forever: give a positive factor")
        per_core = float(factor) ** (1.0 / len(cores))
        for k in cores:
            params[k] *= params[k].dtype.type(per_core)
    return params


def _check_init(cfg, params, init):
    """Raise ValueError unless ``init`` has exactly the parameter names and shapes of ``params``."""
    missing = sorted(set(params) - set(init))
    extra = sorted(set(init) - set(params))
    shapes = [f"{k}: {tuple(np.shape(init[k]))} vs {params[k].shape}" for k in sorted(params)
              if k in init and tuple(np.shape(init[k])) != params[k].shape]
    if missing or extra or shapes:
        detail = "; ".join(x for x in (
            missing and f"missing {', '.join(missing[:4])}" + (" ..." if len(missing) > 4 else ""),
            extra and f"not in the config {', '.join(extra[:4])}" + (" ..." if len(extra) > 4
                                                                     else ""),
            shapes and "shapes (init vs config) " + ", ".join(shapes[:4])) if x)
        raise ValueError(f"the initial parameters do not fit config {cfg.name!r} ({detail})")


def _finite_positive(value):
    return (not isinstance(value, bool) and isinstance(value, (int, float, np.floating))
            and math.isfinite(value) and value > 0)


def _train(cfg, dataset, epochs, lr, seed, batch_size, slot_head, out_dir, progress, schedule,
           warmup, clip, word_dropout, average, balance, log, unk_alpha, init, stepper,
           max_steps, clip_mode):
    from . import model
    from .stepper import FastStepper, StepContext
    if not isinstance(cfg, ModelConfig):
        raise TypeError(f"cfg must be a ModelConfig, got {type(cfg).__name__}")
    if not isinstance(dataset, Dataset):
        raise TypeError(f"dataset must be a Dataset, got {type(dataset).__name__}")
    default_stepper = stepper is None
    stepper = FastStepper() if stepper is None else stepper
    cfg, notes = stepper.configure(cfg, dataset)
    for note in notes:
        if log is not None:
            log(f"note: {note}")
    epochs = cfg.epochs if epochs is None else epochs
    lr = cfg.lr if lr is None else lr
    batch_size = cfg.batch if batch_size is None else batch_size
    schedule = cfg.extra.get("schedule", "constant") if schedule is None else schedule
    warmup = cfg.extra.get("warmup", 0.0) if warmup is None else warmup
    clip = cfg.extra.get("clip") if clip is None else clip
    clip_mode = cfg.extra.get("clip_mode", "global") if clip_mode is None else clip_mode
    word_dropout = cfg.extra.get("word_dropout", 0.0) if word_dropout is None else word_dropout
    average = cfg.extra.get("average", 0.0) if average is None else average
    balance = cfg.extra.get("balance", 0.0) if balance is None else balance
    unk_alpha = cfg.extra.get("unk_alpha", 0.0) if unk_alpha is None else unk_alpha
    _check_positive_int("epochs", epochs)
    _check_positive_int("batch_size", batch_size)
    if max_steps is not None:
        _check_positive_int("max_steps", max_steps)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if not _finite_positive(lr):
        raise ValueError(f"lr must be a positive finite number, got {lr!r}")
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; choose one of {list(SCHEDULES)}")
    if not 0 <= warmup < 1:
        raise ValueError(f"warmup must be a fraction in [0, 1), got {warmup!r}")
    if clip is not None and not _finite_positive(clip):
        raise ValueError(f"clip must be a positive finite gradient norm or None, got {clip!r}")
    if clip_mode not in CLIP_MODES:
        raise ValueError(f"unknown clip_mode {clip_mode!r}; choose one of {list(CLIP_MODES)}")
    if clip is not None and clip_mode != "global":
        if not default_stepper:
            raise ValueError(f"clip_mode {clip_mode!r} runs on the golden fast path only, not "
                             f"on the {stepper.name} stepper")
        stepper = _make_clip_stepper(clip_mode, clip)
    if not 0 <= balance <= 1:
        raise ValueError(f"balance must be in [0, 1] (0 = plain shuffling), got {balance!r}")
    if not 0 <= average <= 1:
        raise ValueError(f"average must be a fraction of the steps in [0, 1], got {average!r}")
    if not 0 <= word_dropout < 1:
        raise ValueError(f"word_dropout must be a probability in [0, 1), got {word_dropout!r}")
    if isinstance(unk_alpha, bool) or not isinstance(unk_alpha, (int, float)) \
            or not 0 <= unk_alpha <= 100:
        raise ValueError(f"unk_alpha must be a number in [0, 100] (0 = off; a word seen c times "
                         f"is dropped with probability alpha / (alpha + c)), got {unk_alpha!r}")
    if dataset.seq_len != cfg.seq_len:
        raise ValueError(f"data set was encoded with seq_len {dataset.seq_len} but config "
                         f"{cfg.name!r} has seq_len {cfg.seq_len}: load it with this config")
    if dataset.vocab_size > cfg.vocab:
        raise ValueError(f"data set vocabulary has {dataset.vocab_size} words but config "
                         f"{cfg.name!r} has {cfg.vocab} TTM rows: load it with this config")
    changes = {}
    if dataset.n_intents != cfg.n_intents:
        changes["n_intents"] = dataset.n_intents
    if dataset.n_slots != cfg.n_slots:
        changes["n_slots"] = dataset.n_slots
    if slot_head is not None and bool(slot_head) != cfg.slot_head:
        changes["slot_head"] = bool(slot_head)
    if changes:
        cfg = cfg.with_(**changes)
    if average > 0 and stepper.chunk > 1:
        raise ValueError(f"average needs the parameters after every step; the {stepper.name} "
                         f"stepper runs {stepper.chunk} steps at a time: set average 0")
    if out_dir is not None:
        check_out_dir(out_dir)           # now, not after the whole run

    t0 = time.perf_counter()
    params = initial_params(cfg, seed)
    if init is not None:
        _check_init(cfg, params, init)
        params = {k: np.array(init[k], dtype=v.dtype) for k, v in params.items()}
    shuffle_rng = np.random.default_rng([seed, 1])
    dropout_rng = np.random.default_rng([seed, 2])
    n_train = dataset.size("train")
    steps_per_epoch = -(-n_train // batch_size)
    total_steps = epochs * steps_per_epoch
    last_step = total_steps if max_steps is None else min(total_steps, int(max_steps))
    stepper.start(StepContext(cfg=cfg, dataset=dataset, params=params, seed=seed, lr=lr,
                              batch_size=batch_size, clip=clip, total_steps=total_steps,
                              log=log))
    show_bar = bool(progress) and sys.stderr.isatty()
    if show_bar:
        from tqdm import tqdm

    history, best, best_key = [], None, None
    step = 0
    avg_start = total_steps - int(round(average * total_steps))  # first averaged step
    avg, n_avg = None, 0
    train_labels = dataset.batch("train")["intent"]
    p_unk = None
    if unk_alpha > 0:
        p_unk = unk_probabilities(dataset, unk_alpha)

    def epoch_batches():
        if balance == 0:
            yield from dataset.batches("train", batch_size, seed=shuffle_rng)
            return
        order = epoch_order(train_labels, balance, shuffle_rng)
        for start in range(0, n_train, batch_size):
            yield dataset.batch("train", order[start:start + batch_size])
    for epoch in range(1, epochs + 1):
        if step >= last_step:
            break
        t_epoch = time.perf_counter()
        loss_sum, correct, seen = 0.0, 0, 0
        bar = tqdm(total=min(steps_per_epoch, last_step - step), desc=f"epoch {epoch}/{epochs}",
                   leave=False, unit="step", file=sys.stderr) if show_bar else None
        pending, rates = [], []

        def flush():
            """Run the pending steps; account their losses, accuracy and averaging."""
            nonlocal loss_sum, correct, seen, step, avg, n_avg
            results = stepper.steps(pending, rates)
            for batch, rate, (loss, logits) in zip(pending, rates, results):
                if not np.isfinite(loss):
                    raise FloatingPointError(
                        f"training diverged at epoch {epoch}, step {step} (loss {loss}): lower "
                        f"the learning rate (now {rate:g}) or set a gradient clip")
                if step >= avg_start:
                    # running mean in float64, so the order of additions does not lose precision
                    n_avg += 1
                    current = stepper.params()
                    if avg is None:
                        avg = {k: v.astype(np.float64) for k, v in current.items()}
                    else:
                        for k, v in current.items():
                            avg[k] += (v - avg[k]) / n_avg
                n = len(batch["intent"])
                loss_sum += float(loss) * n
                correct += int(np.sum(np.argmax(logits[:n], -1) == batch["intent"]))
                seen += n
                step += 1
                if bar is not None:
                    bar.update(1)
                    if step % 20 == 0 or stepper.chunk > 1:
                        bar.set_postfix(loss=f"{loss_sum / seen:.4f}")
            if len(results) != len(pending):
                raise RuntimeError(f"the {stepper.name} stepper ran {len(results)} of "
                                   f"{len(pending)} steps")
            pending.clear()
            rates.clear()
        queued = step
        for batch in epoch_batches():
            if queued >= last_step:
                break
            rate = lr_at(queued, total_steps, lr, schedule, warmup)
            if p_unk is not None:
                words = batch["mask"].copy()
                words[:, 0] = False
                p = 1.0 - (1.0 - word_dropout) * (1.0 - p_unk[batch["tokens"]])
                drop = words & (dropout_rng.random(words.shape) < p)
                batch = dict(batch, tokens=np.where(drop, UNK, batch["tokens"]))
            elif word_dropout > 0:
                words = batch["mask"].copy()
                words[:, 0] = False
                drop = words & (dropout_rng.random(words.shape) < word_dropout)
                batch = dict(batch, tokens=np.where(drop, UNK, batch["tokens"]))
            pending.append(batch)
            rates.append(rate)
            queued += 1
            if len(pending) >= stepper.chunk:
                flush()
        if pending:
            flush()
        if bar is not None:
            bar.close()
        params = stepper.params()
        current = params if avg is None else {k: v.astype(params[k].dtype)
                                              for k, v in avg.items()}
        dev = evaluate(cfg, current, dataset, "dev")
        test = evaluate(cfg, current, dataset, "test")
        row = {"epoch": epoch, "lr": rate, "train_loss": loss_sum / seen,
               "train_acc": correct / seen, "dev_loss": dev["loss"], "dev_acc": dev["intent_acc"],
               "averaged": avg is not None,
               "dev_exact_acc": dev["intent_exact_acc"], "test_loss": test["loss"],
               "test_acc": test["intent_acc"], "test_exact_acc": test["intent_exact_acc"]}
        if cfg.slot_head:
            row.update(dev_slot_f1=dev["slot_f1"], test_slot_f1=test["slot_f1"])
        row["steps"] = step
        row["seconds"] = time.perf_counter() - t_epoch
        history.append(row)
        key = (dev["intent_acc"], -dev["loss"])
        if best_key is None or key > best_key:
            best_key = key
            best = {"epoch": epoch, "params": {k: v.copy() for k, v in current.items()},
                    "dev": dev, "test": test}
        if log is not None:
            line = (f"epoch {epoch:3d}/{epochs}  lr {rate:.4g}  train loss {row['train_loss']:.4f}"
                    f" acc {_fmt(row['train_acc'])}  dev loss {dev['loss']:.4f} intent "
                    f"{_fmt(dev['intent_acc'])}  test intent {_fmt(test['intent_acc'])}")
            if cfg.slot_head:
                line += f"  slot F1 dev {_fmt(dev['slot_f1'])} test {_fmt(test['slot_f1'])}"
            log(line + (" (averaged)" if avg is not None else "") + f"  ({row['seconds']:.1f} s)"
                + stepper.epoch_note(step))

    blocked = not_chip_runnable(cfg, batch_size=batch_size, clip=clip, clip_mode=clip_mode,
                                average=average, balance=balance, unk_alpha=unk_alpha)
    result = {"cfg": cfg, "params": best["params"], "history": history,
              "best_epoch": best["epoch"], "dev": best["dev"], "test": best["test"],
              "seconds": time.perf_counter() - t0, "seed": seed, "epochs": epochs, "lr": lr,
              "batch_size": batch_size, "schedule": schedule, "warmup": warmup, "clip": clip,
              "word_dropout": word_dropout, "average": average, "balance": balance,
              "unk_alpha": unk_alpha, "clip_mode": clip_mode, "steps": step,
              "engine": stepper.name, "notes": notes,
              "not_chip_runnable": blocked, "chip_runnable": not blocked,
              "checkpoint": None, "curves": None, "history_file": None, **stepper.report()}
    if out_dir is not None:
        out_dir = os.fspath(out_dir)
        os.makedirs(out_dir, exist_ok=True)
        meta = {k: result[k] for k in ("seed", "epochs", "lr", "batch_size", "schedule",
                                       "warmup", "clip", "clip_mode", "word_dropout",
                                       "average", "balance", "unk_alpha", "best_epoch",
                                       "steps", "engine", "chip_runnable")}
        meta["not_chip_runnable"] = [list(x) for x in blocked]
        meta.update(dataset=dataset.name, dev=best["dev"], test=best["test"])
        result["checkpoint"] = save_checkpoint(
            os.path.join(out_dir, "best.npz"), cfg, best["params"], vocab=dataset.vocab,
            intent_labels=dataset.intent_labels, slot_labels=dataset.slot_labels, meta=meta)
        result["history_file"] = os.path.join(out_dir, "history.json")
        text = json.dumps({"config": config_to_dict(cfg), **meta, "seconds": result["seconds"],
                           "history": history}, indent=1)
        write_atomically(result["history_file"], lambda f: f.write(text.encode("utf-8")))
        result["curves"] = plot_history(
            history, os.path.join(out_dir, "curves.png"),
            title=f"{cfg.name} on {dataset.name}: best dev epoch {best['epoch']}, test intent "
                  f"{_fmt(best['test']['intent_acc'])}")
    return result
