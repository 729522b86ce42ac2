"""Sentence-length buckets: one compiled training step per bucket, the host picks one per batch.

A step compiled for ``P < seq_len`` grid positions (:func:`~ttrain.golden.model_compiler.
compile_model` with ``positions=P``) computes only the first ``P`` positions of every
sentence. Padding past the last real token only ever contributes exact zeros, so on a batch
whose real tokens all lie in the first ``P`` positions it computes the same words as the full
step, in fewer instructions, MACs and cycles. :class:`Buckets` holds the programs of a set of
lengths and picks, per batch, the shortest one that holds it.

Why the programs can share one memory image between steps:

* the param store has the same layout in every program (checked here: every parameter
  region is the same words);
* between steps the grad store is all +0.0 (each gradient is filled with +0.0 before it
  accumulates and cleared by its fused UPDATE), whatever program ran last;
* everything else a step reads (activations, scratch, the sample's words) it writes first.

Every program also has to fit the hardware's stores; they are checked against the full
step's store sizes (a shorter grid never needs more words). The tests run mixed-bucket
training against the full program and compare every parameter word.

Buckets are given as lengths (``seq_len`` is always added), or chosen from a length
distribution by :func:`auto_buckets`.
"""

import numpy as np

__all__ = ["Buckets", "auto_buckets", "parse_buckets", "resolve_buckets", "batch_positions",
           "train_lengths"]

#: Quantiles of the train split's sentence lengths that :func:`auto_buckets` takes as buckets.
AUTO_QUANTILES = (0.5, 0.9)


def batch_positions(batch):
    """Grid positions a batch needs: one past its last real token (at least 1)."""
    mask = np.asarray(batch["mask"], bool)
    cols = np.flatnonzero(mask.any(axis=0))
    return int(cols[-1]) + 1 if len(cols) else 1


def auto_buckets(cfg, lengths, quantiles=AUTO_QUANTILES):
    """Buckets from sentence ``lengths`` (tokens including [CLS]): the ``quantiles`` rounded up
    to a multiple of 4, then ``cfg.seq_len``; duplicates dropped."""
    lengths = np.asarray(lengths)
    if lengths.size == 0:
        return (cfg.seq_len,)
    out = set()
    for q in quantiles:
        v = int(np.ceil(np.quantile(lengths, q)))
        out.add(min(cfg.seq_len, max(4, -(-v // 4) * 4)))
    out.add(cfg.seq_len)
    return tuple(sorted(out))


def parse_buckets(text, cfg, lengths=None):
    """``--buckets``: ``"auto"`` (:func:`auto_buckets` of ``lengths``) or comma-separated grid
    lengths in 1..seq_len; returns the sorted tuple with ``seq_len``. ValueError names what is
    wrong."""
    if text == "auto":
        if lengths is None:
            raise ValueError("--buckets auto needs the train split's sentence lengths")
        return auto_buckets(cfg, lengths)
    vals = []
    for part in str(text).split(","):
        try:
            v = int(part)
        except ValueError:
            raise ValueError(f"--buckets takes 'auto' or comma-separated lengths, not "
                             f"{text!r}") from None
        if not 1 <= v <= cfg.seq_len:
            raise ValueError(f"--buckets length {v} is outside 1..seq_len = {cfg.seq_len} of "
                             f"{cfg.name}")
        vals.append(v)
    return tuple(sorted(set(vals) | {cfg.seq_len}))


def train_lengths(dataset):
    """Sentence lengths (tokens including [CLS]) of ``dataset``'s train split."""
    return np.asarray(dataset.splits["train"]["mask"]).sum(axis=1)


def resolve_buckets(spec, ctx):
    """A stepper's ``buckets``: ``"auto"`` from the run's train split (``ctx`` a
    :class:`~ttrain.golden.stepper.StepContext`), else the lengths as given."""
    if isinstance(spec, str):
        return parse_buckets(spec, ctx.cfg, train_lengths(ctx.dataset))
    return tuple(spec)


class Buckets:
    """The compiled steps of ``cfg`` for each length of ``lengths`` (``seq_len`` added).

    ``programs[P]`` is the :class:`~ttrain.golden.model_compiler.CompiledModel` for ``P``
    positions; ``full`` the ``seq_len`` one (its store sizes are the image's). ``compile``
    (default :func:`~ttrain.golden.model_compiler.compile_model`) is called as
    ``compile(cfg, positions=P, **kw)``; ``map_program`` (optional) maps each program for the
    engine (e.g. :meth:`~ttrain.golden.isa.Program.for_engine`). Raises ValueError when a
    program's parameter layout differs from the full step's or it needs more store words.
    """

    def __init__(self, cfg, lengths, *, compile=None, map_program=None, **kw):
        from dataclasses import replace

        from .model_compiler import compile_model
        compile = compile or compile_model
        lengths = tuple(sorted(set(int(v) for v in lengths) | {cfg.seq_len}))
        if lengths[0] < 1:
            raise ValueError(f"bucket lengths must be at least 1, not {lengths[0]}")
        if lengths[-1] > cfg.seq_len:
            raise ValueError(f"bucket length {lengths[-1]} exceeds seq_len = {cfg.seq_len}")
        full = compile(cfg, **kw)
        order = full.order
        self.programs = {}
        for p in lengths:
            cm = full if p == cfg.seq_len else compile(cfg, positions=p, **{**kw, "order": order})
            if map_program is not None:
                cm = replace(cm, program=map_program(cm.program))
            self.programs[p] = cm
        self.full = self.programs[cfg.seq_len]
        self.cfg = cfg
        self._check()

    @property
    def lengths(self):
        return tuple(self.programs)

    def map_models(self, fn):
        """Replace every bucket's compiled step ``cm`` by ``fn(cm)`` (e.g. the scheduling pass
        :func:`ttrain.golden.schedule.interleave_model`; layouts and sizes are checked again)."""
        self.programs = {p: fn(cm) for p, cm in self.programs.items()}
        self.full = self.programs[self.cfg.seq_len]
        self._check()

    def _check(self):
        full = self.full
        params = {k: r for k, r in full.memory_map.items() if r.store == "param"}
        for p, cm in self.programs.items():
            mine = {k: r for k, r in cm.memory_map.items() if r.store == "param"}
            if mine != params:
                bad = sorted(set(mine.items()) ^ set(params.items()), key=str)[0]
                raise ValueError(f"the {p}-position step lays out the parameters differently "
                                 f"from the full step ({bad[0]}); it cannot share the image")
            for store, words in cm.store_sizes.items():
                if words > full.store_sizes.get(store, 0):
                    raise ValueError(f"the {p}-position step needs {words} words of the "
                                     f"{store} store, more than the full step's "
                                     f"{full.store_sizes.get(store, 0)}")

    def pick(self, batch):
        """``(P, compiled step)``: the shortest bucket that holds ``batch``."""
        need = batch_positions(batch)
        for p, cm in self.programs.items():
            if p >= need:
                return p, cm
        raise ValueError(f"the batch has real tokens up to position {need}, past seq_len = "
                         f"{self.cfg.seq_len}")

    def histogram(self, lengths):
        """``{P: sentences}`` of sentence ``lengths`` (batch 1: one step each)."""
        lengths = np.asarray(lengths)
        out, lo = {}, 0
        for p in self.programs:
            out[p] = int(np.sum((lengths > lo) & (lengths <= p)))
            lo = p
        return out
