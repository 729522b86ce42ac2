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

__all__ = ["bench_step", "ATIS_TRAIN_SENTENCES", "SCHEDULES"]

#: ``bench_step``'s ``schedule``: the scheduling pass's order, or the compiled one.
SCHEDULES = ("interleave", "program")


#: ATIS training sentences (``../shared/data/atis/train``), for the epoch-time estimate.
ATIS_TRAIN_SENTENCES = 4478


def atis_dir(path=None):
    """The ATIS directory: ``path``, else ``$TTRAIN_SHARED_DATA/atis``, ``../shared/data/atis``
    or ``/work/shared/data/atis`` when one holds ``train.seq.in``; None when none does."""
    import os
    if path is not None:
        if not (Path(path) / "train.seq.in").is_file():
            raise ValueError(f"--lengths-from {path} holds no train.seq.in: pass an ATIS/SNIPS "
                             "data directory")
        return Path(path)
    roots = [Path(p) for p in os.environ.get("TTRAIN_SHARED_DATA", "").split(os.pathsep) if p]
    roots += [Path("../shared/data"), Path("/work/shared/data")]
    for root in roots:
        if (root / "atis" / "train.seq.in").is_file():
            return root / "atis"
    return None


def epoch_lengths(cfg, path=None):
    """``(lengths, source)``: train sentence lengths (tokens with [CLS], cut at ``seq_len``) of
    ATIS (:func:`atis_dir`), else of the generated data set (``source`` says which)."""
    from ..golden.buckets import train_lengths
    from ..golden.data import generate_dataset, load_dataset
    d = atis_dir(path)
    if d is not None:
        return train_lengths(load_dataset(d, cfg)), str(d)
    ds = generate_dataset(seed=0, n_train=ATIS_TRAIN_SENTENCES, seq_len=cfg.seq_len,
                          vocab_size=min(cfg.vocab, 128))
    return train_lengths(ds), "the generated data set (ATIS not found)"


def _bucket_epoch(cfg, bk, entries, lengths, source):
    """The epoch of ``lengths`` on the buckets (each sentence on the shortest that holds it;
    batches of ``cfg.batch`` sentences of one bucket) against every step on the full grid."""
    cycles = {e["positions"]: e["cycles"] for e in entries}
    hist = bk.histogram(np.minimum(lengths, cfg.seq_len))
    steps = {p: -(-n // cfg.batch) for p, n in hist.items()}
    total = sum(steps[p] * cycles[p] for p in steps)
    flat = -(-len(lengths) // cfg.batch) * cycles[cfg.seq_len]
    return {"lengths": list(bk.lengths), "lengths_from": source,
            "sentences": int(len(lengths)),
            "sentences_per_bucket": {str(p): n for p, n in hist.items()},
            "cycles_per_step": {str(p): c for p, c in cycles.items()},
            "epoch_cycles": int(total), "full_grid_epoch_cycles": int(flat),
            "speedup": flat / total,
            **{f"seconds_at_{f}MHz": total / (f * 1e6) for f in (250, 300)}}


def _walk_model(programs, hw, cost=None):
    """``{positions: {cycles, engine, vector, update}}``: the compiler's models of each step
    on ``hw`` (golden/schedule.py's issue walk with ``hw.cycle_model()``; the units' busy
    cycles), for the report beside the chip's measured cycles. The chip's second and later
    steps skip the static and check passes, so they compare with the verified reruns."""
    from ..golden.interpreter import dynamic_stream
    from ..golden.schedule import busy_cycles, schedule
    cost = cost or hw.cycle_model()
    out = {}
    for p, cm in programs.items():
        dyn = [x for _, x in dynamic_stream(cm.program.instructions)]
        out[p] = {"cycles": schedule(dyn, cost)[0],
                  **dict(zip(("engine", "vector", "update"), busy_cycles(dyn, cost)))}
    return out


def _model_report(cfg, notes, hw, programs, full, schedule, group_walks):
    """The report of ``bench_step(model_only=True)``: the compiler's walk of each program on
    ``hw`` (no build, no simulation); ``forward_cycles`` the walk of the forward section
    alone (as the chip's forward-only run), ``backward_cycles`` the rest (the fused updates
    inside it)."""
    from ..golden.interpreter import dynamic_stream
    from ..golden.memory import program_macs
    from ..golden.schedule import schedule as walk
    from ..platforms.host.chip import section_program
    cost = hw.cycle_model()                       # one memo for both walks
    model = _walk_model(programs, hw, cost)
    entries = []
    for p, cm in programs.items():
        macs = program_macs(cm.program)
        ideal = -(-macs // hw.lanes)
        cyc = model[p]["cycles"]
        fwd = walk([x for _, x in dynamic_stream(section_program(cm, "forward"))], cost)[0]
        entries.append({"positions": p, "macs": macs, "ideal_cycles": ideal,
                        "cycles": cyc, "forward_cycles": fwd, "backward_cycles": cyc - fwd,
                        "utilization": ideal / cyc,
                        "ms_at_300MHz": cyc / 300e3, **{f"{k}_busy": v for k, v in
                                                        model[p].items() if k != "cycles"}})
    return {"config": cfg.name, "notes": notes, "model_only": True,
            "label": "the compiler's model (golden/schedule.py's issue walk with the build's "
                     "cycle model), not a simulation: the engine and the vector unit do not "
                     "compete for the store ports in it",
            "hw": hw.to_dict(),
            "order": dict(full.order), "schedule": schedule, "ttm_group": full.ttm_group,
            **({} if group_walks is None else {"ttm_group_walks": group_walks}),
            "store_words": sum(full.store_sizes.values()), "entries": entries}


def bench_step(config="paper-l1", *, lanes=8, slots=16, steps=1, out_json=None, seed=0,
               progress=None, workdir=None, positions=None, max_split=1, fetch_words=None,
               vector_width=None,
               bank_skew=False, buckets=None, lengths_from=None, order="auto",
               row_operands=False, special_lanes=None, engine_sums=False, route=None,
               schedule="interleave", ttm_group="auto", vector_reads=None, model_only=False,
               special_full=None):
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
    ``row_operands``: the engine's unit-stride B/C vectors as row entries
    (``HwConfig.row_operands``), counted by the mapping's model. ``special_lanes``:
    special-function units side by side in the vector unit (``HwConfig.special_lanes``),
    ``special_full`` of them with every function (``HwConfig.special_full``; the others
    GELU and its gradient only).
    ``vector_reads``: 2 reads both sources of a vector beat in one request
    (``HwConfig.vector_reads``). ``engine_sums``: compile the step with the row sums that a ``lanes``-lane engine does
    faster as contractions (``compile_model(engine_sums=lanes)``). ``route``: the engine's
    operand route (``HwConfig.route``: ``"omega"`` or ``"omega-shared"``; ``None`` the
    arbiter), counted by the mapping's model. ``schedule``: ``"interleave"`` (default) runs
    each program reordered for the sequencer by the compiler's scheduling pass
    (:func:`ttrain.golden.schedule.interleave_model` with the build's
    :meth:`~ttrain.platforms.hw.HwConfig.cycle_model`: independent work of different units
    side by side, every conflicting pair in order, so the same words), ``"program"`` the
    compiled order. ``model_only``: stop before the build and return the compiler's walk
    of each program on this machine instead (``_model_report``: cycles, MACs, ideal,
    utilization, the units' busy cycles, the epoch; no simulation, nothing bit-exact about
    it). ``ttm_group``: the TTM embedding's rows per LOOP iteration
    (``compile_model``'s ``ttm_group``; ``"auto"`` by default: the largest group that needs no
    more words than token by token); a larger group holds more words and runs fewer, larger
    contractions (the same words after the step). ``"fastest"``: the machine's choice, the
    group with the fewest words within 1% of the fewest cycles by the compiler's walk of
    the step on this build (:func:`ttrain.golden.schedule.ttm_group_walks` with
    ``hw.cycle_model()``, the mapping and the scheduling pass) among the groups whose words
    fit the U50's RAM (:data:`ttrain.platforms.u50.U50_STORE_WORDS`); the report lists the
    walks (``ttm_group_walks``).

    ``buckets`` (``"auto"`` or grid lengths; :mod:`ttrain.golden.buckets`): one step of every
    bucket's program, in one session (``steps`` is then one per bucket), and the epoch time
    from a sentence-length distribution, each sentence on the shortest bucket that holds it:
    ATIS's train split (``lengths_from``, default ``../shared/data/atis`` when present;
    sentences cut at ``seq_len``), else the generated data set's (the report says which).

    ``order``: the TT layers' contraction order of the compiled step (``compile_model``'s
    ``order``: ``"auto"`` by default, or one of :data:`ttrain.golden.compiler.ORDERS` for
    every TT layer); another order is another program (its own rounding, stores and
    build), checked against the interpreter like any.
    """
    from dataclasses import replace
    import json
    import tempfile

    from ..golden import model as M
    from ..golden.config import get_config
    from ..golden.data import generate_dataset
    from ..golden.model_compiler import compile_model
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, not {schedule!r}")
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= 20:
        raise ValueError(f"steps must be an int in 1..20, not {steps!r}")
    if buckets is not None and positions is not None:
        raise ValueError("positions runs one shorter program; buckets runs them all: pass one")
    say = progress or (lambda m: None)
    cfg, notes = chip_config(get_config(config))
    route = None if route == "arbiter" else route
    mapping = max_split > 1 or fetch_words or bank_skew or row_operands or route
    engine_map = (lambda prog: prog.for_engine(lanes, slots, max_split, fetch_words=fetch_words,
                                               banks=lanes, bank_skew=bank_skew,
                                               row_operands=row_operands, route=route)) \
        if mapping else None
    # lane groups: the largest split mapped, but on an Omega route the A port is slots x
    # max_split lanes wide, which the mapping assumed, so the build keeps max_split
    machine = dict(lanes=lanes, slots=slots, fetch_words=fetch_words,
                   max_split=max_split if route else None, bank_skew=bank_skew,
                   vector_width=vector_width, row_operands=row_operands,
                   special_lanes=special_lanes, route=route, vector_reads=vector_reads,
                   special_full=special_full)
    ckw = {"engine_sums": lanes} if engine_sums else {}
    group_walks = None
    if ttm_group == "fastest":
        from ..golden.schedule import fastest_ttm_group, ttm_group_walks
        from ..platforms.u50 import U50_STORE_WORDS
        probe = compile_model(cfg, order=order, **ckw)        # its orders, the machine's
        if engine_map is not None:                             # cycle model
            probe = replace(probe, program=engine_map(probe.program))
        cost = hw_config({cfg.name: probe}, config=cfg.name, **machine).cycle_model()
        order = dict(probe.order)                  # every group with the same TT orders
        say(f"{cfg.name}: walking the step for each TTM group on this machine")
        group_walks = ttm_group_walks(cfg, cost, map_program=engine_map,
                                      max_words=U50_STORE_WORDS, order=order, **ckw)
        ttm_group = fastest_ttm_group(group_walks)
    if ttm_group != "auto":
        ckw["ttm_group"] = ttm_group
    bk = lengths = lengths_source = None
    if buckets is not None:
        from ..golden.buckets import Buckets, parse_buckets
        lengths, lengths_source = epoch_lengths(cfg, lengths_from)
        blist = parse_buckets(buckets, cfg, lengths) if isinstance(buckets, str) else buckets
        bk = Buckets(cfg, blist, map_program=engine_map, order=order, **ckw)
        full = cm = bk.full
    else:
        full = compile_model(cfg, order=order, **ckw)
        cm = full if positions is None else compile_model(cfg, positions=positions,
                                                          order=full.order, **ckw)
        if engine_map is not None:
            full = replace(full, program=engine_map(full.program))
            cm = full if positions is None else replace(cm, program=engine_map(cm.program))
    t0 = time.time()
    name = f"ttrain_top_{cfg.name.replace('-', '_')}_l{lanes}_s{slots}" + (
        f"_g{max_split}" if max_split > 1 else "") + (
        f"_f{fetch_words}" if fetch_words else "") + ("_k" if bank_skew else "") + (
        "_r" if row_operands else "") + (
        f"_v{vector_width}" if vector_width else "") + (
        f"_sp{special_lanes}" if special_lanes and special_lanes > 1 else "") + (
        f"f{special_full}" if special_full and special_full != special_lanes else "") + (
        {"omega": "_om", "omega-shared": "_os"}[route] if route else "") + (
        "_vr2" if vector_reads == 2 else "")
    hw = hw_config({cfg.name: full}, config=cfg.name, **machine)
    if schedule == "interleave":                # the same sizes and words: hw still holds
        from ..golden.schedule import interleave_model
        cost = hw.cycle_model()
        if bk is not None:
            bk.map_models(lambda c: interleave_model(c, cost))
            full = cm = bk.full
        else:
            same = cm is full
            full = interleave_model(full, cost)
            cm = full if same else interleave_model(cm, cost)
    if model_only:
        report = _model_report(cfg, notes, hw, bk.programs if bk is not None
                               else {cm.positions: cm}, full, schedule, group_walks)
        steps_per_epoch = -(-ATIS_TRAIN_SENTENCES // cfg.batch)
        cyc = report["entries"][-1]["cycles"]
        report["epoch"] = {"sentences": ATIS_TRAIN_SENTENCES, "steps": steps_per_epoch,
                           **{f"seconds_at_{f}MHz": steps_per_epoch * cyc / (f * 1e6)
                              for f in (250, 300)}}
        if bk is not None:
            report["buckets"] = _bucket_epoch(cfg, bk, report["entries"], lengths,
                                              lengths_source)
        if out_json:
            Path(out_json).write_text(json.dumps(report, indent=1))
        return report
    say(f"{cfg.name}: {len(cm.program.instructions)} instructions, stores "
        f"{cm.store_sizes}; building the accelerator ({lanes} lanes, {slots} slots); a "
        f"paper-size first build takes 10-30 minutes")
    build = build_model_top(full, lanes=lanes, slots=slots, name=name, hw=hw)
    build_s = time.time() - t0
    step_positions = list(bk.lengths) if bk is not None else None
    if bk is not None:
        steps = len(step_positions)
    ds = generate_dataset(seed=0, n_train=max(64, steps * cfg.batch), n_dev=4, n_test=4,
                          seq_len=cfg.seq_len, vocab_size=min(cfg.vocab, 128))
    shortest = bk.lengths[0] if bk is not None else cm.positions
    fits = np.flatnonzero(ds.splits["train"]["mask"].sum(axis=1) <= shortest)
    if len(fits) < steps * cfg.batch:
        what = f"bucket {shortest}" if bk is not None else f"positions={cm.positions}"
        raise ValueError(f"{what} is shorter than the benchmark's sentences; use at least 4")
    rows = np.random.default_rng(seed).permutation(fits)[:steps * cfg.batch]
    batches = [ds.batch("train", rows[i * cfg.batch:(i + 1) * cfg.batch]) for i in range(steps)]
    params = M.init_params(cfg, np.random.default_rng(seed))
    chip = ChipRun(cm, build, params, workdir or tempfile.mkdtemp(prefix="step-bench-"),
                   check="outputs", buckets=bk)
    say(f"running {steps} step(s) (forward-only and whole-step runs each)" + (
        f", one per bucket {', '.join(map(str, step_positions))}" if bk is not None else ""))
    res = chip.run_steps(batches, breakdown=True, timeout=8 * 3600, positions=step_positions)
    model = _walk_model(bk.programs if bk is not None else {cm.positions: cm}, hw)
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
            "instructions": r.instructions, "positions": r.positions, "bit_exact": True,
            "model": model[r.positions or cm.positions]})
    cyc = entries[-1]["cycles"]
    report = {"config": cfg.name, "notes": notes, "lanes": lanes, "slots": slots,
              "max_split": max_split, "fetch_words": fetch_words, "bank_skew": bank_skew,
              "row_operands": row_operands, "route": hw.route,
              "vector_width": hw.vector_lanes, "special_lanes": hw.special_lanes,
              "special_full": hw.special_full or hw.special_lanes,
              "vector_reads": hw.vector_reads,
              "batch": cfg.batch, "seq_len": cfg.seq_len, "positions": cm.positions,
              "order": dict(full.order), "schedule": schedule, "ttm_group": full.ttm_group,
              **({} if group_walks is None else {"ttm_group_walks": group_walks}),
              "store_sizes": build.config["store_sizes"], "entries": entries,
              "epoch": {"sentences": ATIS_TRAIN_SENTENCES, "steps": steps_per_epoch,
                        **{f"seconds_at_{f}MHz": steps_per_epoch * cyc / (f * 1e6)
                           for f in (250, 300)}},
              **({} if bk is None else {"buckets": _bucket_epoch(cfg, bk, entries, lengths,
                                                                 lengths_source)}),
              "seconds": {"build": round(build_s, 1), "simulation": round(chip.sim_seconds, 1),
                          "golden": round(chip.golden_seconds, 1)},
              # every simulated run (the forward-only ones too) over the session's wall time,
              # start-up and image transfer included
              "sim_cycles_per_second": sum(e["cycles"] + e.get("forward_cycles", 0)
                                           + e.get("update_cycles", 0) for e in entries)
              / max(chip.sim_seconds, 1e-9)}
    if out_json:
        Path(out_json).write_text(json.dumps(report, indent=1))
    return report
