"""What runs one SGD step in :func:`ttrain.golden.train.train`: the step interface.

The training loop (data order, seeds, learning-rate schedule, word dropout, evaluation, best
epoch, checkpoints, history and curves) is written once, in :func:`ttrain.golden.train.train`.
What computes a step is a *stepper*:

:class:`FastStepper` (``--engine golden``, the default)
    the float32 fast path (:func:`ttrain.golden.model.forward_backward` + ``sgd_update``),
    with hidden-unit dropout, logit adjustment and gradient clipping.
:class:`InterpreterStepper` (``--engine interpreter``)
    the compiled training step (:func:`ttrain.golden.model_compiler.compile_model`) on the
    bit-exact interpreter (:func:`ttrain.golden.interpreter.run`): the numbers the chip
    computes, without a chip.
:class:`ttrain.platforms.host.chip.ChipStepper` (``--engine rtl``)
    the same program on the simulated accelerator, every step checked against the interpreter;
    a card stepper will be the same over :class:`ttrain.platforms.host.driver.KernelDriver`.

A stepper has these members (:class:`Stepper` documents them):

``name``
    what the history and the result record as ``engine``.
``chunk``
    how many steps it takes at once (1, or a simulation session's worth).
``configure(cfg, dataset) -> (cfg, notes)``
    the config as this stepper trains it (a compiled step has no dropout masks, clipping,
    averaging or rebalancing: :func:`ttrain.golden.model_compiler.chip_model_config`) and a
    note per change; called before anything else.
``start(ctx)``
    called once with a :class:`StepContext` (final config, initial parameters, seed, ...);
    raise ValueError for a setting it cannot train.
``steps(batches, rates) -> [(loss, intent_logits), ...]``
    one SGD step per batch, in order, at the given learning rates. A non-finite loss ends
    the list early (the loop then stops with a FloatingPointError); the parameters are not
    updated by that step.
``params()``
    the current parameters (may be live arrays: the loop copies what it keeps).
``epoch_note(steps)``, ``report()``
    a suffix for the epoch's log line and extra result entries (cycles, simulation time).
"""

import abc
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Stepper", "StepContext", "FastStepper", "InterpreterStepper", "ENGINES"]

#: Engine names of ``ttrain train --engine`` (``rtl`` lives in ttrain.platforms.host.chip).
ENGINES = ("golden", "interpreter", "rtl")


@dataclass
class StepContext:
    """What :func:`~ttrain.golden.train.train` tells a stepper before the first step."""
    cfg: object                 # ModelConfig, after configure() and the data set's label counts
    dataset: object             # Dataset
    params: dict                # initial parameters (seeded or --init)
    seed: int
    lr: float                   # peak learning rate (the schedule's rates come per step)
    batch_size: int
    clip: object = None         # global-norm clip or None
    total_steps: int = 0
    log: object = None          # callable(str) or None
    extra: dict = field(default_factory=dict)


class Stepper(abc.ABC):
    """Base class of the steppers (the interface of the module docstring): a subclass must
    define ``start``, ``steps`` and ``params``; the rest have defaults."""
    name = "stepper"
    chunk = 1

    def configure(self, cfg, dataset):
        return cfg, []

    @abc.abstractmethod
    def start(self, ctx):
        """Take the run's initial parameters and settings (:class:`StepContext`)."""

    @abc.abstractmethod
    def steps(self, batches, rates):
        """Run one SGD step per batch at its rate; return ``[(loss, intent_logits), ...]``."""

    @abc.abstractmethod
    def params(self):
        """Return the current parameters (name -> float32 array)."""

    def epoch_note(self, steps):
        return ""

    def report(self):
        return {}


def _model_batch(batch, slot_head):
    keys = ("tokens", "segments", "mask", "intent") + (("slots",) if slot_head else ())
    return {k: batch[k] for k in keys}


class FastStepper(Stepper):
    """The float32 fast path: hidden dropout from ``default_rng([seed, 3])``, logit-adjustment
    offsets from the train split's intent counts, optional global-norm clipping."""
    name = "golden"

    def start(self, ctx):
        from . import model
        self._model = model
        self.cfg = ctx.cfg
        self.clip = ctx.clip
        self._params = ctx.params
        self.hidden_rng = np.random.default_rng([ctx.seed, 3])    # cfg.dropout masks (model)
        self.intent_offset = None
        if ctx.cfg.logit_adjustment:
            labels = ctx.dataset.batch("train")["intent"]
            self.intent_offset = model.intent_log_prior(labels, ctx.cfg.n_intents,
                                                        ctx.cfg.logit_adjustment)

    def steps(self, batches, rates):
        model, cfg, out = self._model, self.cfg, []
        for batch, rate in zip(batches, rates):
            loss, grads, res = model.forward_backward(cfg, self._params,
                                                      _model_batch(batch, cfg.slot_head),
                                                      rng=self.hidden_rng,
                                                      intent_offset=self.intent_offset)
            out.append((loss, res["intent_logits"]))
            if not np.isfinite(loss):
                break
            if self.clip is not None:
                model.clip_grads(grads, self.clip)
            model.sgd_update(self._params, grads, rate)
        return out

    def params(self):
        return self._params


def check_compiled_step(ctx, what):
    """Raise ValueError for a setting the compiled training step does not have."""
    cfg = ctx.cfg
    if ctx.clip is not None:
        raise ValueError(f"{what} has no gradient clipping (clip {ctx.clip:g}): drop it")
    if ctx.batch_size != cfg.batch:
        raise ValueError(f"{what} trains the config's batch of {cfg.batch}, not "
                         f"batch_size {ctx.batch_size}")
    if cfg.slot_head:
        raise ValueError(f"{what} trains the intent head only: drop the slot head")


class InterpreterStepper(Stepper):
    """The compiled training step on the bit-exact golden interpreter.

    ``compile_model(cfg)`` once; per step the sample words (and the step's learning rate,
    folded into the gradient weights) are written into the memory image and the program runs
    on it. Loss, logits and parameters are read from the image: the chip's numbers.

    ``buckets``: grid lengths or ``"auto"`` (:mod:`ttrain.golden.buckets`): one program per
    length, and each batch runs the shortest that holds it, on the same image (the same words as the full
    step). ``steps_per_bucket`` counts them."""
    name = "interpreter"

    def __init__(self, compiled=None, *, buckets=None):
        self.cm = compiled
        self.bucket_lengths = buckets
        self.buckets = None
        self.steps_per_bucket = {}

    def configure(self, cfg, dataset):
        from .model_compiler import chip_model_config
        return chip_model_config(cfg, dataset)

    def start(self, ctx):
        from .model_compiler import compile_model
        check_compiled_step(ctx, "the interpreter's compiled step")
        if self.bucket_lengths is not None:
            from .buckets import Buckets, resolve_buckets
            self.buckets = Buckets(ctx.cfg, resolve_buckets(self.bucket_lengths, ctx),
                                   lr=ctx.lr)
            self.cm = self.buckets.full
            self.steps_per_bucket = dict.fromkeys(self.buckets.lengths, 0)
        if self.cm is None:
            self.cm = compile_model(ctx.cfg, lr=ctx.lr)
        self.image = self.cm.initial_image(ctx.params)

    def steps(self, batches, rates):
        from .interpreter import run
        out = []
        for batch, rate in zip(batches, rates):
            cm = self.cm
            if self.buckets is not None:
                p, cm = self.buckets.pick(batch)
                self.steps_per_bucket[p] += 1
            cm.set_batch(self.image, batch, rate)
            image, st = run(cm.program, self.image)
            if st.error:
                raise RuntimeError(f"the interpreter stopped a training step with error "
                                   f"{st.error}: {st.message}")
            loss = cm.loss(image)
            out.append((loss, cm.logits(image, len(batch["intent"]))))
            if not np.isfinite(loss):
                break
            self.image = image
        return out

    def params(self):
        return self.cm.params(self.image)

    def report(self):
        if self.buckets is None:
            return {}
        return {"steps_per_bucket": {str(p): n for p, n in self.steps_per_bucket.items()}}
