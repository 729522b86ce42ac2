"""Benchmark: cycles of whole training steps of a preset on the simulated accelerator.

Behind ``ttrain bench step`` / ``make bench-step``: each step runs forward-only and whole (the
SGD updates fused into backward) on the chip (:class:`ttrain.platforms.host.chip.ChipRun` with ``breakdown``),
checked against the interpreter.
"""

import time
from pathlib import Path

import numpy as np

from ..platforms.host.chip import ChipRun, build_model_top, chip_config
from ..platforms.hw import hw_config

__all__ = ["bench_step", "ATIS_TRAIN_SENTENCES"]


#: ATIS training sentences (``../shared/data/atis/train``), for the epoch-time estimate.
ATIS_TRAIN_SENTENCES = 4478


def bench_step(config="paper-l1", *, lanes=8, slots=16, steps=1, out_json=None, seed=0,
               progress=None, workdir=None, positions=None, max_split=1, fetch_words=None,
               bank_skew=False):
    """Cycles of whole training steps of ``config`` on the simulated accelerator.

    Each step runs as forward-only and whole step (see ``ChipRun.run_steps`` with
    ``breakdown``), checked against the interpreter: loss and logits after each run, every
    store word after the last. Returns a report with per-step cycles split into forward and
    backward (the fused SGD updates inside it; the update unit's busy cycles beside), the
    engine's cycles, ideal cycles (MACs / lanes), utilization, and
    the ATIS epoch time this implies at 250 and 300 MHz (batch ``cfg.batch``, the full grid
    of ``seq_len`` positions per sentence, so the cycles do not depend on the sentence).
    ``positions``: run the program compiled for that many positions instead (on the same
    build, sized for the full grid), on sentences that fit them; the epoch time is then what
    an epoch of steps of that length would take. ``max_split`` > 1: the engine has that many
    lane groups and every CONTRACT of the program is mapped for it
    (:meth:`~ttrain.golden.isa.Program.for_engine`: orientation and split by the cycle
    model); the interpreter runs the same mapped program, so the check stays bit-exact.
    ``fetch_words``: the engine's operand beats (``ContractionEngine(fetch_words=)``); the
    mapping's cycle model then counts them. ``bank_skew``: every store's rows skewed across
    the banks (``HwConfig.bank_skew``); the mapping's model counts that too.
    """
    from dataclasses import replace
    import json
    import tempfile

    from ..golden import model as M
    from ..golden.config import get_config
    from ..golden.data import generate_dataset
    from ..golden.model_compiler import compile_model
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= 20:
        raise ValueError(f"steps must be an int in 1..20, not {steps!r}")
    say = progress or (lambda m: None)
    cfg, notes = chip_config(get_config(config))
    full = compile_model(cfg)
    cm = full if positions is None else compile_model(cfg, positions=positions)
    if max_split > 1 or fetch_words or bank_skew:
        def mapped(c):
            return replace(c, program=c.program.for_engine(lanes, slots, max_split,
                                                           fetch_words=fetch_words,
                                                           banks=lanes, bank_skew=bank_skew))
        full = mapped(full)
        cm = full if positions is None else mapped(cm)
    t0 = time.time()
    say(f"{cfg.name}: {len(cm.program.instructions)} instructions, stores "
        f"{cm.store_sizes}; building the accelerator ({lanes} lanes, {slots} slots); a "
        f"paper-size first build takes 10-30 minutes")
    name = f"ttrain_top_{cfg.name.replace('-', '_')}_l{lanes}_s{slots}" + (
        f"_g{max_split}" if max_split > 1 else "") + (
        f"_f{fetch_words}" if fetch_words else "") + ("_k" if bank_skew else "")
    hw = hw_config({cfg.name: full}, config=cfg.name, lanes=lanes, slots=slots,
                   fetch_words=fetch_words,      # lane groups: the largest split mapped
                   bank_skew=bank_skew)
    build = build_model_top(full, lanes=lanes, slots=slots, name=name, hw=hw)
    build_s = time.time() - t0
    ds = generate_dataset(seed=0, n_train=max(8, steps * cfg.batch), n_dev=4, n_test=4,
                          seq_len=cfg.seq_len, vocab_size=min(cfg.vocab, 128))
    fits = np.flatnonzero(ds.splits["train"]["mask"].sum(axis=1) <= cm.positions)
    if len(fits) < steps * cfg.batch:
        raise ValueError(f"positions={cm.positions} is shorter than the benchmark's sentences; "
                         f"use at least 4")
    rows = np.random.default_rng(seed).permutation(fits)[:steps * cfg.batch]
    batches = [ds.batch("train", rows[i * cfg.batch:(i + 1) * cfg.batch]) for i in range(steps)]
    params = M.init_params(cfg, np.random.default_rng(seed))
    chip = ChipRun(cm, build, params, workdir or tempfile.mkdtemp(prefix="step-bench-"),
                   check="outputs")
    say(f"running {steps} step(s) (forward-only and whole-step runs each)")
    res = chip.run_steps(batches, breakdown=True, timeout=8 * 3600)
    steps_per_epoch = -(-ATIS_TRAIN_SENTENCES // cfg.batch)
    entries = []
    for s, r in enumerate(res):
        ideal = -(-r.macs // lanes)
        entries.append({
            "step": s, "loss": r.loss, "cycles": r.cycles, **{f"{k}_cycles": v for k, v in
                                                               r.breakdown.items()},
            "engine_cycles": r.engine_cycles, "ideal_cycles": ideal, "macs": r.macs,
            "utilization": ideal / r.cycles, "engine_utilization": ideal / r.engine_cycles,
            "busy_vector": r.busy_vector, "busy_update": r.busy_update,
            "instructions": r.instructions, "bit_exact": True})
    cyc = entries[-1]["cycles"]
    report = {"config": cfg.name, "notes": notes, "lanes": lanes, "slots": slots,
              "max_split": max_split, "fetch_words": fetch_words, "bank_skew": bank_skew,
              "batch": cfg.batch, "seq_len": cfg.seq_len, "positions": cm.positions,
              "store_sizes": build.config["store_sizes"], "entries": entries,
              "epoch": {"sentences": ATIS_TRAIN_SENTENCES, "steps": steps_per_epoch,
                        **{f"seconds_at_{f}MHz": steps_per_epoch * cyc / (f * 1e6)
                           for f in (250, 300)}},
              "seconds": {"build": round(build_s, 1), "simulation": round(chip.sim_seconds, 1),
                          "golden": round(chip.golden_seconds, 1)}}
    if out_json:
        Path(out_json).write_text(json.dumps(report, indent=1))
    return report
