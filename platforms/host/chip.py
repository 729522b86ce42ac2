"""Whole-model training steps on the simulated accelerator, checked against the interpreter.

The chip runs the program of :func:`ttrain.golden.model_compiler.compile_model`; the host
(the Verilog driver of :mod:`ttrain.platforms.sim.top`) writes each step's sample words, starts the
step and compares what the chip holds afterwards with :func:`ttrain.golden.interpreter.run`:
every store word (``check="all"``) or the loss and logits after every step and every store
word after the last step of a session (``check="outputs"``; a wrong word anywhere changes
the following losses and the final image, so nothing can hide).

:class:`ChipRun` is the host session shared by ``make demo``, ``ttrain train --engine rtl``,
``ttrain bench step`` and the tests; :class:`ChipStepper` is the chip's step for the one
training loop, :func:`ttrain.golden.train.train` (``train_on_chip`` is that loop with it).
"""

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...golden.isa import Barrier, End, Program
from ...golden.model_compiler import chip_model_config as chip_config
from ...golden.stepper import Stepper, check_compiled_step
from ..hw import hw_config
from ..sim.top import TopSession, build_top, interpret_traced, pad_image, run_top

__all__ = ["build_model_top", "ChipRun", "StepResult", "section_program", "chip_config",
           "ChipStepper", "train_on_chip", "model_hw", "scheduled"]


def model_hw(compiled, *, lanes=4, slots=8):
    """The :class:`~ttrain.platforms.hw.HwConfig` :func:`build_model_top` builds for
    ``compiled`` with ``lanes`` and ``slots``."""
    return hw_config({compiled.cfg.name: compiled}, config=compiled.cfg.name, lanes=lanes,
                     slots=slots)


def scheduled(compiled, hw, buckets=None):
    """``compiled`` reordered by the compiler's scheduling pass for the chip of ``hw``
    (:func:`ttrain.golden.schedule.interleave_model` with ``hw.cycle_model()``: the same
    words, the engine and the vector unit side by side where the sequencer can overlap
    them), the chip's default order. ``buckets`` (a :class:`~ttrain.golden.buckets.Buckets`):
    every bucket's program reordered in place too; returns its full program's model."""
    from ...golden.schedule import interleave_model
    cost = hw.cycle_model()
    if buckets is not None:
        buckets.map_models(lambda c: interleave_model(c, cost))
        return buckets.full
    return interleave_model(compiled, cost)


def build_model_top(compiled, *, lanes=4, slots=8, name=None, rom_depth=None, res_depth=1 << 14,
                    hw=None):
    """Build (or reuse) the accelerator for ``compiled`` under the host driver.

    ``hw`` (a :class:`~ttrain.platforms.hw.HwConfig`) defaults to :func:`~ttrain.platforms.hw.
    hw_config` of ``compiled`` with ``lanes`` and ``slots``. ``rom_depth`` defaults to room for
    the image written and checked whole twice, three program loads and 256 steps of sample
    words and outputs, or ten steps checked whole (``run_top`` says when a session needs
    more)."""
    if hw is None:
        hw = model_hw(compiled, lanes=lanes, slots=slots)
    words = hw.total_words
    if rom_depth is None:
        prog = 16 * len(compiled.program.instructions)
        c = compiled.cfg          # sample words in, loss and logits checked, command headers
        per_step = (compiled.rows * (c.embedding.d + 1) + c.batch * (c.seq_len + 2)
                    + 2 * c.batch * c.n_intents + 128)
        need = max(2 * words + 256 * per_step, 12 * words) + 3 * prog + 4096
        rom_depth = 1 << need.bit_length()
    name = name or f"ttrain_top_{compiled.cfg.name.replace('-', '_')}_l{hw.lanes}"
    return build_top(hw, name, rom_depth=rom_depth, res_depth=res_depth)


def section_program(compiled, section):
    """The instructions of ``section`` alone (``"forward"``, ``"update"``), ended by a
    barrier and END: for the per-section cycle breakdown."""
    lo, hi = compiled.sections[section]
    ins = [i for i in compiled.program.instructions[lo:hi] if not isinstance(i, End)]
    return ins + [Barrier(), End()]


@dataclass
class StepResult:
    """One training step on the chip: the golden loss and the measured counters."""
    loss: float
    logits: np.ndarray
    cycles: int = 0
    engine_cycles: int = 0
    busy_engine: int = 0
    busy_vector: int = 0
    busy_update: int = 0
    instructions: int = 0
    macs: int = 0
    breakdown: dict = field(default_factory=dict)
    positions: int = 0          # grid positions of the program that ran it


class ChipRun:
    """Host loop: training steps of a compiled model on a Verilator build of the accelerator.

    Parameters
    ----------
    compiled : CompiledModel
    build : TopBuild
        From :func:`build_model_top`.
    params : dict
        Initial parameters (``model.init_params``).
    workdir : path
        Where the sessions' command and result files go.
    check : {"all", "outputs"}
        What is compared after each step (module docstring).
    buckets : Buckets, optional
        One compiled step per sentence length (:class:`ttrain.golden.buckets.Buckets`, whose
        ``full`` is ``compiled``): each batch runs the shortest that holds it, on the same
        image; the session loads a program when the bucket changes. ``steps_per_bucket``
        counts them.
    """

    def __init__(self, compiled, build, params, workdir, *, check="all", buckets=None):
        if check not in ("all", "outputs"):
            raise ValueError(f"check must be 'all' or 'outputs', not {check!r}")
        if buckets is not None and buckets.full is not compiled:
            raise ValueError("buckets.full must be the compiled step the image is laid out by")
        self.cm, self.build, self.check = compiled, build, check
        self.buckets = buckets
        self.steps_per_bucket = dict.fromkeys(buckets.lengths, 0) if buckets else {}
        self.sizes = build.config["store_sizes"]
        self.image = pad_image(compiled.initial_image(params), self.sizes)
        self.workdir = Path(workdir)
        self.sessions = 0
        self.sim_seconds = 0.0
        self.golden_seconds = 0.0

    def params(self):
        """The parameters after the steps run so far (verified equal on chip and golden)."""
        return self.cm.params(self.image)

    def run_steps(self, batches, lrs=None, *, breakdown=False, timeout=None, positions=None):
        """Run one training step per batch in one simulation session; return StepResults.

        ``lrs``: learning rate per step (default the compiled one). It is sample data: the
        program is loaded once per session, unless ``breakdown`` interleaves others. With
        ``breakdown`` each step is preceded by a forward-only run, so the cycles split into
        forward and backward; the backward includes the fused SGD updates (the compiler's
        default), whose update-unit busy cycles are reported as ``update_busy``. An unfused
        program gets an update-only run after the step too (it changes nothing: the gradients
        are zero after the step) and an ``update`` share. ``positions`` (with ``buckets``):
        the bucket of each step instead of the shortest that holds it (a benchmark runs every
        bucket's program on sentences that fit them all).
        """
        cm = self.cm
        batches = list(batches)
        lrs = [cm.lr] * len(batches) if lrs is None else list(lrs)
        if len(lrs) != len(batches):
            raise ValueError(f"{len(lrs)} learning rates for {len(batches)} batches")
        if positions is not None:
            positions = list(positions)
            if self.buckets is None or len(positions) != len(batches) or \
                    any(p not in self.buckets.programs for p in positions):
                raise ValueError(f"positions= names one of the buckets "
                                 f"{self.buckets.lengths if self.buckets else '(none)'} per "
                                 f"batch")
        # with fused updates (the compiler's default) the UPDATEs run inside the backward
        # pass: no update-only run; the update unit's busy cycles say what they took
        parts = ("forward",) if cm.fused_update else ("forward", "update")
        runs_per_step = 1 + len(parts) if breakdown else 1
        limit = (self.build.res_depth - 64) // 16
        if len(batches) * runs_per_step > limit:
            raise ValueError(f"{len(batches)} steps need {len(batches) * runs_per_step} runs; "
                             f"a session of this build holds {limit}: split the batches")
        sess = TopSession()
        sess.write_image(self.image)
        t0 = time.time()
        image = self.image
        results = []
        programs = {}
        loaded = None

        def program(step_cm, part):
            key = (step_cm.positions, part)
            if key not in programs:
                programs[key] = step_cm.program if part == "step" else Program(
                    section_program(step_cm, part), step_cm.program.store_sizes)
            return key, programs[key]

        def play(step_cm, part, image, s, whole):
            """Interpret program ``part`` on ``image``, queue it on the chip with its check."""
            nonlocal loaded
            key, prog = program(step_cm, part)
            new, st, golden = interpret_traced(prog, image)
            _raise(st, s, part)
            if loaded != key:
                sess.program(prog.words())
                loaded = key
            name = f"step{s}" + ("" if part == "step" else f".{part}")
            outs = [step_cm.memory_map[n] for n in ("loss", "logits")]
            sess.run(name, expect_at=self._expect(new, outs, whole), golden=golden)
            return new, st

        for s, (batch, lr) in enumerate(zip(batches, lrs)):
            step_cm = cm
            if self.buckets is not None:
                p, step_cm = self.buckets.pick(batch)
                if positions is not None:
                    p = positions[s]
                    step_cm = self.buckets.programs[p]
                self.steps_per_bucket[p] += 1
            for name, words in step_cm.sample_words(batch, lr).items():
                r = step_cm.memory_map[name]
                image[r.store][r.base:r.base + r.size] = words
                sess.write(r.store, r.base, words)
            last = s == len(batches) - 1
            if breakdown:
                image, _ = play(step_cm, "forward", image, s, False)
            image, st = play(step_cm, "step", image, s,
                             last and not (breakdown and "update" in parts))
            if breakdown and "update" in parts:
                image, _ = play(step_cm, "update", image, s, last)
            results.append(StepResult(step_cm.loss(image), step_cm.logits(image), macs=st.macs,
                                      instructions=st.instructions,
                                      positions=step_cm.positions))
        self.golden_seconds += time.time() - t0
        t1 = time.time()
        rows = run_top(self.build, sess, test_dir=self.workdir / f"session{self.sessions}",
                       timeout=timeout)
        self.sim_seconds += time.time() - t1
        self.sessions += 1
        self.image = image
        for s, res in enumerate(results):
            per = rows[s * runs_per_step:(s + 1) * runs_per_step]
            main = per[1] if breakdown else per[0]
            for key in ("cycles", "engine_cycles", "busy_engine", "busy_vector", "busy_update"):
                setattr(res, key, main[key])
            if breakdown and cm.fused_update:
                res.breakdown = {"forward": per[0]["cycles"],
                                 "backward": main["cycles"] - per[0]["cycles"],
                                 "update_busy": main["busy_update"]}
            elif breakdown:
                res.breakdown = {"forward": per[0]["cycles"],
                                 "backward": main["cycles"] - per[0]["cycles"] - per[2]["cycles"],
                                 "update": per[2]["cycles"]}
        return results

    def _expect(self, image, outs, whole):
        """Expected words: every store when ``whole`` or check="all", else loss and logits."""
        if whole or self.check == "all":
            return [(s, 0, np.asarray(w, dtype=np.uint32)) for s, w in image.items()]
        return [(r.store, r.base, image[r.store][r.base:r.base + r.size]) for r in outs]


def _raise(stats, step, what):
    if stats.error:
        raise RuntimeError(f"the interpreter stopped the {what} of step {step} with error "
                           f"{stats.error}: {stats.message}")


class ChipStepper(Stepper):
    """The steps of :func:`ttrain.golden.train.train` on the simulated accelerator.

    The config is the compiled step's (:func:`chip_config`); steps run in sessions of
    ``steps_per_session`` (one Verilator run each, from the verified image); each session
    checks loss and logits after every step and every store word after its last step
    (``ChipRun(check="outputs")``). ``build``: a :func:`build_model_top` build to reuse (else
    one is built, or reused from the build cache, for ``lanes``). ``buckets``: grid lengths
    or ``"auto"`` (:mod:`ttrain.golden.buckets`): one program per sentence length, each batch
    on the shortest that holds it."""
    name = "rtl"

    def __init__(self, *, lanes=4, build=None, workdir=None, steps_per_session=100,
                 buckets=None):
        if isinstance(steps_per_session, bool) or not isinstance(steps_per_session, int) \
                or steps_per_session < 1:
            raise ValueError(f"steps_per_session must be a positive int, not "
                             f"{steps_per_session!r}")
        self.lanes, self.build, self.workdir = lanes, build, workdir
        self.bucket_lengths = buckets
        self.chunk = steps_per_session
        self.chip = None
        self.cycles = []

    def configure(self, cfg, dataset):
        return chip_config(cfg, dataset)

    def start(self, ctx):
        import tempfile

        from ...golden.model_compiler import compile_model
        check_compiled_step(ctx, "the chip")
        buckets = None
        if self.bucket_lengths is not None:
            from ...golden.buckets import Buckets, resolve_buckets
            buckets = Buckets(ctx.cfg, resolve_buckets(self.bucket_lengths, ctx), lr=ctx.lr)
            cm = buckets.full
        else:
            cm = compile_model(ctx.cfg, lr=ctx.lr)
        # the compiler's scheduling pass for this chip (the given build's, or the one built
        # below): the same words in the order the chip runs fastest by its cycle model
        hw = getattr(self.build, "hw", None) or model_hw(cm, lanes=self.lanes)
        cm = scheduled(cm, hw, buckets)
        if self.build is None:
            if ctx.log is not None:
                ctx.log(f"building the accelerator for {ctx.cfg.name} ({self.lanes} lanes) "
                        f"under Verilator (first build: minutes)")
            self.build = build_model_top(cm, lanes=self.lanes)
        self.workdir = Path(self.workdir or tempfile.mkdtemp(prefix="ttrain-chip-"))
        self.chip = ChipRun(cm, self.build, ctx.params, self.workdir, check="outputs",
                            buckets=buckets)

    def steps(self, batches, rates):
        res = self.chip.run_steps(batches, rates)
        self.cycles += [r.cycles for r in res]
        return [(r.loss, r.logits) for r in res]

    def params(self):
        return self.chip.params()

    def epoch_note(self, steps):
        return f"  ({steps} steps bit-exact)"

    def report(self):
        chip = self.chip
        out = {"cycles": list(self.cycles), "sim_seconds": chip.sim_seconds if chip else 0.0,
               "golden_seconds": chip.golden_seconds if chip else 0.0,
               "workdir": str(self.workdir)}
        if chip is not None and chip.buckets is not None:
            out["steps_per_bucket"] = {str(p): n for p, n in chip.steps_per_bucket.items()}
        return out


def train_on_chip(cfg, dataset, *, epochs=None, lr=None, seed=0, lanes=4, max_steps=None,
                  steps_per_session=100, workdir=None, progress=True, log=print, build=None,
                  out_dir=None):
    """Train ``cfg`` on the simulated accelerator, every step checked against the interpreter.

    :func:`ttrain.golden.train.train` with a :class:`ChipStepper`: the data order,
    initialization, learning-rate schedule, host-side word dropout, per-epoch evaluation (on
    the chip's verified parameters, golden fast path), best-dev selection, checkpoints and
    curves are those of the golden run with the same seed, so the golden run of
    ``chip_config(cfg)`` is the reference.

    Returns :func:`~ttrain.golden.train.train`'s result plus ``cycles`` (per step),
    ``sim_seconds``, ``golden_seconds`` and ``workdir``.
    """
    from ...golden.train import train
    stepper = ChipStepper(lanes=lanes, build=build, workdir=workdir,
                          steps_per_session=steps_per_session)
    return train(cfg, dataset, epochs=epochs, lr=lr, seed=seed, max_steps=max_steps,
                 progress=progress, log=log, stepper=stepper, out_dir=out_dir)
