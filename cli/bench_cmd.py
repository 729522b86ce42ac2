"""``ttrain bench``: cycle-accurate benchmarks under Verilator (speed is measured, not asserted).

``ttrain bench engine``: every contraction of one TT-linear training step of the paper's
768x768 layer ([12,8,8 | 8,8,12], B = 32, ranks all 10 and [1,12,20,20,20,12,1]) on the
contraction engine, bit-exact against the golden model, with cycles measured in simulation,
ideal cycles (MACs / lanes) and utilization. ``ttrain bench fp32``: random operand pairs
through each FP32 unit (one million by default), compared bit for bit with the golden numerics.

The first engine run builds a paper-size Verilator model (about 10 minutes on 2 cores);
later runs reuse it.
"""

import json


def _print_report(report, as_json):
    if as_json:
        print(json.dumps(report, indent=1))
        return
    for e in report["entries"]:
        print(f"{e['name']:32s} macs {e['macs']:>11,} cycles {e['cycles']:>10,} "
              f"ideal {e['ideal_cycles']:>10,} utilization {e['utilization']:7.2%}")


def _upto_lanes(args, name, optional=True):
    """Flag ``--name`` (attribute ``name``), checked: a power of two up to ``--lanes`` (or
    None when ``optional`` and not given)."""
    v = getattr(args, name)
    if v is None and optional:
        return None
    if v < 1 or v & (v - 1) or v > args.lanes:
        raise ValueError(f"--{name.replace('_', '-')} must be a power of two up to --lanes "
                         f"({args.lanes}), not {v}")
    return v


def _max_split(args):
    """``--max-split``: the lane groups."""
    return _upto_lanes(args, "max_split", optional=False)


def _fetch_words(args):
    """``--fetch-words``: the engine's operand beats (None: whole vectors)."""
    return _upto_lanes(args, "fetch_words")


def _vector_width(args):
    """``--vector-width``: the vector and update units' lanes (None: the banks = lanes)."""
    return _upto_lanes(args, "vector_width")


def _ttm_group(args):
    """``--ttm-group``: ``auto``, ``fastest`` or a positive int (the TTM embedding's rows per
    group)."""
    v = args.ttm_group
    if v is None or v == "auto":
        return "auto"
    if v == "fastest":
        return v
    try:
        g = int(v)
        if g < 1:
            raise ValueError
    except ValueError:
        raise ValueError(f"--ttm-group takes auto, fastest or a positive number of rows, "
                         f"not {v!r}") \
            from None
    return g


def _special_lanes(args):
    """``--special-lanes``: special-function units side by side (None: one), a power of two
    up to the vector unit's lanes."""
    v = args.special_lanes
    if v is None:
        return None
    width = args.vector_width or args.lanes
    if isinstance(v, bool) or v < 1 or v & (v - 1) or v > width:
        raise ValueError(f"--special-lanes must be a power of two up to the vector unit's "
                         f"{width} lanes (--vector-width, else --lanes), not {v}")
    return v


def _special_full(args):
    """``--special-full``: how many of the special-function units have every function (None:
    all), a power of two up to ``--special-lanes``."""
    v, lanes = args.special_full, args.special_lanes or 1
    if v is None:
        return None
    if isinstance(v, bool) or v < 1 or v & (v - 1) or v > lanes:
        raise ValueError(f"--special-full must be a power of two up to --special-lanes "
                         f"({lanes}), not {v}")
    return v


def _engine(args):
    from ttrain.testbench.bench_engine import PAPER_RANKS, bench_engine
    ranks = tuple(args.ranks.split(","))
    bad = [r for r in ranks if r not in PAPER_RANKS]
    if bad:
        raise ValueError(f"unknown rank set(s) {bad}; choose from {', '.join(PAPER_RANKS)}")
    if args.lanes < 1 or args.lanes & (args.lanes - 1):
        raise ValueError(f"--lanes must be a positive power of two, not {args.lanes}")
    fw, nb = _fetch_words(args), args.banks
    if nb is not None and (nb < 1 or nb & (nb - 1)):
        raise ValueError(f"--banks must be a positive power of two, not {nb}")
    report = bench_engine(args.out, lanes=args.lanes, slots=args.slots, rank_sets=ranks,
                          max_split=_max_split(args), fetch_words=fw, banks=nb,
                          bank_skew=args.bank_skew, row_operands=args.row_operands)
    _print_report(report, args.json)
    return 0


def _top_args(args):
    """Accelerator-top benchmark arguments shared by ``bench layer`` and ``bench step``."""
    if args.lanes < 4 or args.lanes & (args.lanes - 1):
        raise ValueError(f"--lanes must be a power of two >= 4, not {args.lanes}")
    return {"lanes": args.lanes, "slots": args.slots,
            "progress": None if args.json else lambda m: print(m, flush=True)}


def _layer(args):
    from ttrain.testbench.bench_layer import bench_layer
    ranks = tuple(r for r in args.ranks.split(",") if r)
    report = bench_layer(args.out, rank_sets=ranks, steps=args.steps, **_top_args(args))
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    for e in report["entries"]:
        print(f"{e['name']:12s} cycles {e['cycles']:>9,} engine {e['engine_cycles']:>9,} "
              f"ideal {e['ideal_cycles']:>9,} utilization {e['utilization']:7.2%} "
              f"sequencing overhead {e['overhead']:6.2%} (vector {e['busy_vector']:,}, "
              f"update {e['busy_update']:,} busy cycles) bit-exact")
    return 0


def _zo_step(args):
    from ttrain.golden import qnn
    from ttrain.testbench.bench_zo import bench_zo
    config = args.config or "digits-cnn"
    if config not in qnn.cnn_preset_names():
        raise ValueError(f"--rule zo benchmarks the int8 CNN presets "
                         f"({', '.join(qnn.cnn_preset_names())}), not {config}")
    for flag in ("positions", "buckets", "lengths_from"):
        if getattr(args, flag) is not None:
            raise ValueError(f"--{flag.replace('_', '-')} applies to the transformer presets "
                             "(--rule sgd) only")
    for flag in ("variant", "norm"):
        if getattr(args, flag) is not None:
            raise ValueError(f"--{flag} applies to --rule lrt only")
    rep = bench_zo(config, run=args.zo_run or "zo-wp",
                   batch=50 if args.batch is None else args.batch, queries=args.queries,
                   steps=args.steps, out_json=args.out, **_top_args(args))
    if args.json:
        print(json.dumps(rep, indent=1))
        return 0
    print(f"{rep['config']} ({rep['model']}), ZO run {rep['run']}: batch {rep['batch']}, "
          f"{rep['queries']} queries, {rep['instructions']} instructions, "
          f"{rep['lanes']} lanes")
    for e in rep["entries"]:
        print(f"step {e['step']}: {e['cycles']:,} cycles = unperturbed pass "
              f"{e['forward_cycles']:,} + queries {e['query_cycles']:,} "
              f"({e['cycles_per_query']:,.0f} per query) + update {e['update_cycles']:,}; "
              f"{e['macs']:,} MACs, utilization {e['utilization']:.1%}; bit-exact")
    cyc = rep["entries"][-1]["cycles"]
    print(f"{cyc / 250e3:.2f} ms per step at 250 MHz, {cyc / 300e3:.2f} ms at 300 MHz")
    return 0


def _lrt_step(args):
    from ttrain.testbench.bench_lrt import bench_lrt
    for flag in ("zo_run", "batch", "queries", "positions", "buckets", "lengths_from"):
        if getattr(args, flag) is not None:
            raise ValueError(f"--{flag.replace('_', '-')} does not apply to --rule lrt")
    rep = bench_lrt(args.config or "digits-mlp", variant=args.variant or "unbiased",
                    norm=args.norm or "max", samples=args.steps, out_json=args.out,
                    **_top_args(args))
    if args.json:
        print(json.dumps(rep, indent=1))
        return 0
    print(f"{rep['config']}, {rep['run']} (rank {rep['settings']['rank']}): "
          + " + ".join(f"{v} ({k.replace('_', ' ')})" for k, v in rep["instructions"].items())
          + f" instructions, {rep['lanes']} lanes")
    for e in rep["entries"]:
        if "phase_cycles" in e:
            how = ", ".join(f"{k} {v:,}" for k, v in e["phase_cycles"].items())
            how += "; the program's static and check passes included"
        else:
            how = "verified rerun: the passes skipped"
        print(f"sample {e['sample']}: {e['cycles']:,} cycles ({how}); {e['macs']:,} MACs, "
              f"utilization {e['utilization']:.1%}; bit-exact")
    for name, r in rep["readouts"].items():
        print(f"{name.replace('_', ' ')} of layers {', '.join(map(str, r['layers']))} (every "
              f"{r['every_samples']} samples): {r['cycles']:,} cycles, {r['macs']:,} MACs; "
              "bit-exact")
    sm = rep["stream"]
    steady = ("" if len(rep["entries"]) > 1
              else " (one sample: its passes counted; --steps 2 gives the verified rerun)")
    reads = ", ".join(f"{v} {k.replace('_', ' ')}s" for k, v in sm["readouts"].items())
    print(f"{rep['us_per_sample_at_300MHz']:.0f} us per sample at 300 MHz{steady}; the "
          f"digits-drift stream ({sm['samples']:,} samples, {reads}, the sample program "
          f"reloaded after each): {sm['seconds_at_300MHz']:.2f} s at 300 MHz")
    return 0


def _print_model(rep):
    """The text form of ``bench step --model-only``."""
    print(f"{rep['config']}: the compiler's model of the step on this machine, not a "
          f"simulation ({rep['hw']['lanes']} lanes, route {rep['hw']['route']}, "
          f"{rep['store_words']:,} store words, TTM group {rep['ttm_group']}, "
          f"{rep['schedule']} order)")
    for w in rep.get("ttm_group_walks", []):
        fit = f"{w['cycles']:,} cycles" if w["cycles"] is not None else "over the U50's RAM"
        print(f"  TTM group {w['group']}: {w['words']:,} words, {fit}"
              + ("  <- chosen" if w["group"] == rep["ttm_group"] else ""))
    for e in rep["entries"]:
        print(f"positions {e['positions']}: {e['cycles']:,} cycles ({e['ms_at_300MHz']:.2f} ms "
              f"at 300 MHz; forward {e['forward_cycles']:,}, backward "
              f"{e['backward_cycles']:,}), ideal {e['ideal_cycles']:,} ({e['macs']:,} MACs): "
              f"utilization {e['utilization']:.1%}; busy engine {e['engine_busy']:,}, vector "
              f"{e['vector_busy']:,}, update {e['update_busy']:,}")
    ep = rep.get("buckets") or rep["epoch"]
    print(f"ATIS epoch{' on length buckets' if 'buckets' in rep else ''}: "
          f"{ep['seconds_at_300MHz']:.1f} s at 300 MHz")
    return 0


def _step(args):
    if args.rule != "sgd" and (args.max_split != 1 or args.fetch_words is not None
                               or args.bank_skew or args.vector_width is not None
                               or args.row_operands or args.special_lanes is not None
                               or args.special_full is not None
                               or args.vector_reads is not None
                               or args.engine_sums or args.route != "arbiter"
                               or args.schedule is not None or args.ttm_group is not None):
        raise ValueError(f"--max-split, --fetch-words, --bank-skew, --row-operands, "
                         f"--vector-width, --special-lanes, --special-full, --vector-reads, "
                         f"--engine-sums, "
                         f"--route, "
                         f"--schedule and --ttm-group apply "
                         f"to --rule sgd "
                         f"only (the {args.rule} programs are not mapped for the wide engine "
                         f"yet): drop them")
    if args.rule != "sgd" and args.order != "auto":
        raise ValueError(f"--order applies to --rule sgd only (the {args.rule} programs have "
                         f"no TT layers): drop it")
    if args.route != "arbiter" and (args.lanes < 2 or args.fetch_words is not None
                                    or args.row_operands):
        raise ValueError(f"--route {args.route} moves whole vectors over at least 2 banks: "
                         f"drop --fetch-words and --row-operands and use --lanes 2 or more")
    if args.model_only and (args.rule != "sgd" or args.steps != 1):
        raise ValueError("--model-only walks one sgd step per program (no simulation): use "
                         "it with --rule sgd and without --steps")
    if args.rule == "zo":
        return _zo_step(args)
    if args.rule == "lrt":
        return _lrt_step(args)
    for flag in ("variant", "norm"):
        if getattr(args, flag) is not None:
            raise ValueError(f"--{flag} applies to --rule lrt only")
    if args.rule == "sgd" and args.order != "auto":
        from ttrain.golden.config import get_config
        from ttrain.golden.model_compiler import compile_model
        try:                      # an order the compiler cannot emit: a clear error up front
            compile_model(get_config(args.config or "paper-l1"), order=args.order)
        except ValueError as e:
            raise ValueError(f"--order {args.order}: {e}") from None
    for flag in ("zo_run", "batch", "queries"):
        if getattr(args, flag) is not None:
            raise ValueError(f"--{flag.replace('_', '-')} applies to --rule zo only")
    from ttrain.testbench.bench_step import bench_step
    if args.lengths_from is not None and args.buckets is None:
        raise ValueError("--lengths-from gives the length distribution of --buckets: add "
                         "--buckets")
    if args.buckets is not None:
        from ttrain.golden.buckets import parse_buckets
        from ttrain.golden.config import get_config
        if args.positions is not None:
            raise ValueError("--positions runs one shorter program; --buckets runs them all: "
                             "pass one")
        if args.buckets != "auto":
            parse_buckets(args.buckets, get_config(args.config or "paper-l1"))
        if args.steps != 1:
            raise ValueError("--buckets runs one step per bucket: drop --steps")
    rep = bench_step(args.config or "paper-l1", steps=args.steps, out_json=args.out,
                     positions=args.positions, buckets=args.buckets,
                     lengths_from=args.lengths_from, max_split=_max_split(args),
                     fetch_words=_fetch_words(args), bank_skew=args.bank_skew,
                     vector_width=_vector_width(args), order=args.order,
                     row_operands=args.row_operands, special_lanes=_special_lanes(args),
                     special_full=_special_full(args), engine_sums=args.engine_sums,
                     route=args.route,
                     vector_reads=args.vector_reads, schedule=args.schedule or "interleave",
                     ttm_group=_ttm_group(args), model_only=args.model_only,
                     **_top_args(args))
    if args.json:
        print(json.dumps(rep, indent=1))
        return 0
    if args.model_only:
        return _print_model(rep)
    if rep.get("order"):
        print("TT contraction orders: " + ", ".join(f"{k} {v}" for k, v in rep["order"].items()))
    for e in rep["entries"]:
        upd = (f"update {e['update_cycles']:,}" if "update_cycles" in e else
               f"the fused updates inside it, update unit busy {e['update_busy_cycles']:,}")
        print(f"step {e['step']}: {e['cycles']:,} cycles (forward {e['forward_cycles']:,}, "
              f"backward {e['backward_cycles']:,}, {upd}); engine "
              f"{e['engine_cycles']:,}, ideal {e['ideal_cycles']:,} ({e['macs']:,} MACs / "
              f"{rep['lanes']} lanes): utilization {e['utilization']:.1%}; loss {e['loss']:.6f}, "
              f"bit-exact")
        if "model" in e:
            mo = e["model"]
            print(f"  the compiler's model of the step (issue walk, {rep['schedule']} order): "
                  f"{mo['cycles']:,} cycles, engine {mo['engine']:,}, vector "
                  f"{mo['vector']:,}, update {mo['update']:,}")
    if "sim_cycles_per_second" in rep:
        print(f"Verilator: {rep['sim_cycles_per_second']:,.0f} simulated cycles per second "
              f"(session wall time, start-up included; build {rep['seconds']['build']:.0f} s)")
    ep = rep["epoch"]
    if "buckets" in rep:
        bk = rep["buckets"]
        per = ", ".join(f"{p}: {n:,} sentences x {bk['cycles_per_step'][p]:,} cycles"
                        for p, n in bk["sentences_per_bucket"].items())
        print(f"ATIS epoch on length buckets (lengths of {bk['lengths_from']}; each sentence "
              f"on the shortest bucket that holds it): {per}")
        print(f"  {bk['seconds_at_250MHz']:.1f} s at 250 MHz, {bk['seconds_at_300MHz']:.1f} s "
              f"at 300 MHz; {bk['speedup']:.2f}x faster than every step on the full grid")
        return 0
    if rep["positions"] != rep["seq_len"]:
        print(f"(program for {rep['positions']} of {rep['seq_len']} positions: the epoch figure "
              f"assumes every step has that length)")
    print(f"ATIS epoch ({ep['sentences']:,} sentences, {ep['steps']:,} steps of batch "
          f"{rep['batch']}): {ep['seconds_at_250MHz']:.1f} s at 250 MHz, "
          f"{ep['seconds_at_300MHz']:.1f} s at 300 MHz")
    return 0


def _fp32(args):
    from ttrain.testbench import bench_fp32 as fp32
    units = fp32.UNITS if args.unit == "all" else (args.unit,)
    if args.pairs < 1:
        raise ValueError(f"--pairs must be a positive integer, not {args.pairs}")
    report = fp32.bench_fp32(units, args.pairs, args.seed)
    failed = sum(r["mismatches"] for r in report["entries"])
    if args.json:
        print(json.dumps(report, indent=1, default=str))
    else:
        for r in report["entries"]:
            print(f"{r['unit']:8s} pairs {r['pairs']:>10,} mismatches {r['mismatches']} "
                  f"sim {r['sim_seconds']:.1f} s total {r['total_seconds']:.1f} s")
    return 1 if failed else 0


def register(sub):
    from ttrain.platforms.hw import ROUTES
    p = sub.add_parser("bench", help="cycle-accurate benchmarks under Verilator",
                       description=__doc__.split("\n\n")[1])
    bsub = p.add_subparsers(dest="bench", required=True, metavar="WHAT")
    e = bsub.add_parser("engine", help="TT-linear training-step contractions on the engine")
    e.add_argument("--json", action="store_true", help="print the JSON report")
    e.add_argument("--out", default=None, metavar="FILE", help="also write the JSON report here")
    e.add_argument("--lanes", type=int, default=8, help="engine lanes (default 8)")
    e.add_argument("--slots", type=int, default=16,
                   help="interleaved output slots per lane (default 16)")
    e.add_argument("--ranks", default="r10,r20",
                   help="rank sets: r10 (all 10), r20 ([1,12,20,20,20,12,1]); default both")
    e.add_argument("--max-split", type=int, default=1, metavar="G",
                   help="lane groups: each contraction's k split up to G ways, chosen by the "
                        "cycle model (power of two up to --lanes; default 1 = none)")
    e.add_argument("--fetch-words", type=int, default=None, metavar="W",
                   help="operand fetchers and C writer in beats of W words per cycle (power of "
                        "two up to --lanes; default: a whole vector per beat)")
    e.add_argument("--banks", type=int, default=None, metavar="NB",
                   help="banks per store (power of two; default --lanes)")
    e.add_argument("--row-operands", action="store_true",
                   help="unit-stride B/C vectors as row entries (one per lane group), the "
                        "rest through the --fetch-words ports; the mapping's model counts it")
    e.add_argument("--bank-skew", action="store_true",
                   help="word a in bank (a + a // banks) %% banks: rows skewed across the banks")
    from .debug_cmd import add_sim_debug_flags, with_sim_debug
    add_sim_debug_flags(e, trace=False)      # the engine alone: no sequencer, no trace
    e.set_defaults(func=with_sim_debug(_engine))
    la = bsub.add_parser("layer", help="paper-layer training steps on the accelerator top")
    la.add_argument("--json", action="store_true", help="print the JSON report")
    la.add_argument("--out", default=None, metavar="FILE", help="also write the JSON report here")
    la.add_argument("--lanes", type=int, default=8, help="engine lanes = banks (default 8)")
    la.add_argument("--slots", type=int, default=16,
                    help="interleaved output slots per lane (default 16)")
    la.add_argument("--steps", type=int, default=3, help="consecutive training steps (default 3)")
    la.add_argument("--ranks", default="r10,r20",
                    help="rank sets: r10 (all 10), r20 ([1,12,20,20,20,12,1]); default both")
    add_sim_debug_flags(la)
    la.set_defaults(func=with_sim_debug(_layer))
    st = bsub.add_parser("step", help="whole-model training steps on the accelerator top")
    st.add_argument("--config", default=None, metavar="NAME",
                    help="preset (default paper-l1; digits-cnn with --rule zo, digits-mlp "
                         "with --rule lrt)")
    st.add_argument("--rule", choices=("sgd", "zo", "lrt"), default="sgd",
                    help="sgd: a transformer training step (default); zo: a compiled "
                         "zeroth-order step of an int8 CNN preset; lrt: low-rank training's "
                         "per-sample and read-out programs of digits-mlp (--steps = samples)")
    st.add_argument("--variant", default=None, choices=("biased", "unbiased"),
                    help="--rule lrt: the rank reduction (default unbiased)")
    st.add_argument("--norm", default=None, choices=("none", "max"),
                    help="--rule lrt: the read-out's gradient norm (default max)")
    st.add_argument("--zo-run", default=None, choices=("zo-wp", "wp-all", "zo-np", "zo-mixed"),
                    help="--rule zo: the digits table's WP run (zo-wp: last layer, default), "
                         "WP of every layer (wp-all), or its node-perturbation (zo-np) and mixed "
                         "(zo-mixed) runs")
    st.add_argument("--batch", type=int, default=None, metavar="B",
                    help="--rule zo: images per step (default 50)")
    st.add_argument("--queries", type=int, default=None, metavar="N",
                    help="--rule zo: queries per step (default the run's, 20)")
    st.add_argument("--json", action="store_true", help="print the JSON report")
    st.add_argument("--out", default=None, metavar="FILE", help="also write the JSON report here")
    st.add_argument("--lanes", type=int, default=8, help="engine lanes = banks (default 8)")
    st.add_argument("--slots", type=int, default=16,
                    help="scoreboard slots of the sequencer (default 16)")
    st.add_argument("--steps", type=int, default=1, help="training steps (default 1)")
    st.add_argument("--fetch-words", type=int, default=None, metavar="W",
                    help="the engine's operand fetchers and C writer in beats of W words per "
                         "cycle (power of two up to --lanes; default a whole vector)")
    st.add_argument("--vector-width", type=int, default=None, metavar="W",
                    help="--rule sgd: lanes of the vector and update units (power of two up "
                         "to --lanes; default --lanes, one word per bank)")
    st.add_argument("--schedule", choices=("interleave", "program"), default=None,
                    help="--rule sgd: interleave (default) runs the program reordered by the "
                         "compiler's scheduling pass for this chip (independent work of the "
                         "engine and the vector unit side by side; the same words), program "
                         "the compiled order")
    st.add_argument("--ttm-group", default=None, metavar="auto|fastest|G",
                    help="--rule sgd: the TTM embedding's grid rows per LOOP iteration (auto, "
                         "the default: the largest group that needs no more words than one "
                         "row; larger groups trade on-chip words for fewer, larger "
                         "contractions; fastest: the compiler walks the step for each group "
                         "on this machine and takes the fewest words within 1%% of the "
                         "fewest cycles that fit the U50's RAM)")
    st.add_argument("--model-only", action="store_true",
                    help="--rule sgd: no build and no simulation: the compiler's model of the "
                         "step on this machine (the issue walk of each program with the "
                         "build's cycle model), e.g. for a width whose build takes hours")
    st.add_argument("--engine-sums", action="store_true",
                    help="--rule sgd: compile the step with the row sums this engine (--lanes) "
                         "does faster as contractions with a ones vector (the same words)")
    st.add_argument("--special-lanes", type=int, default=None, metavar="S",
                    help="--rule sgd: special-function units side by side in the vector unit "
                         "(power of two up to its lanes; default 1)")
    st.add_argument("--special-full", type=int, default=None, metavar="F",
                    help="--rule sgd: how many of the --special-lanes units have every special "
                         "function (power of two; default all); the others only GELU and its "
                         "gradient, which then stream S elements a cycle, the rest F")
    st.add_argument("--vector-reads", type=int, choices=(1, 2), default=None, metavar="R",
                    help="--rule sgd: vectors per read request of the vector unit's port (1, "
                         "the default, or 2: both sources of an element beat at once)")
    st.add_argument("--max-split", type=int, default=1, metavar="G",
                    help="--rule sgd: lane groups; every contraction mapped for them "
                         "(orientation and k split by the cycle model; default 1 = none)")
    st.add_argument("--row-operands", action="store_true",
                    help="--rule sgd: the engine's unit-stride B/C vectors as row entries "
                         "(HwConfig.row_operands); the mapping's model counts it")
    st.add_argument("--bank-skew", action="store_true",
                    help="--rule sgd: word a in bank (a + a // banks) %% banks in every store "
                         "(rows skewed across the banks); the mapping's cycle model counts it")
    st.add_argument("--route", choices=ROUTES, default="arbiter",
                    help="--rule sgd: how the engine's operand and result vectors reach the "
                         "banks: arbiter (default, a request per lane), omega (an Omega "
                         "port per fetcher and the C writer) or omega-shared (A, B and old "
                         "C through one Omega read port, the 256-lane design); needs whole "
                         "vectors (no --fetch-words, --row-operands) and at least 2 lanes")
    st.add_argument("--positions", type=int, default=None, metavar="P",
                    help="run the program compiled for the first P positions (padding past P "
                         "skipped) on the full-size build (default: the full grid)")
    st.add_argument("--buckets", metavar="auto|P,P,...",
                    help="--rule sgd: one step of every sentence-length bucket's program (grid "
                         "positions; seq_len added; auto: the train split's median and 90th "
                         "percentile lengths) and the epoch time with each sentence on the "
                         "shortest bucket that holds it")
    st.add_argument("--lengths-from", metavar="DIR",
                    help="--buckets: the data directory whose train lengths give the epoch "
                         "(default ../shared/data/atis when present, else the generated set)")
    st.add_argument("--order", default="auto",
                    choices=("auto", "fast", "bidirectional", "left_to_right", "dp_best",
                             "best"),
                    help="--rule sgd: the TT layers' contraction order of the compiled step "
                         "(default auto: the compiler's choice per layer kind, fewest on-chip "
                         "words then fewest MACs; fast: fewest MACs then fewest words; "
                         "dp_best: the planner's fewest-MAC order in every TT layer)")
    add_sim_debug_flags(st)
    st.set_defaults(func=with_sim_debug(_step))
    f = bsub.add_parser("fp32", help="random operand pairs through the FP32 units")
    f.add_argument("--unit", default="all", choices=["mul", "add", "compare", "all"])
    f.add_argument("--pairs", type=int, default=1_000_000, help="pairs per unit (default 1M)")
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--json", action="store_true", help="print the JSON report")
    f.set_defaults(func=_fp32)
