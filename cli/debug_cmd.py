"""``ttrain debug``: look inside the simulated chip.

``ttrain debug diverge --config NAME [--steps N]`` runs training steps on the simulated
accelerator and reports the first instruction after which the chip's stores differ from the
golden interpreter's (:func:`ttrain.platforms.host.diverge.find_divergence`): pc, mnemonic,
the first differing store word and its memory-map region.

Also the ``--waves FILE.fst`` / ``--trace FILE.jsonl`` flags that ``demo``, ``train --engine
rtl`` and ``bench`` share (:func:`add_sim_debug_flags`, :func:`with_sim_debug`).
"""

import json
import sys


def add_sim_debug_flags(p, *, trace=True):
    """Add ``--waves`` (and ``--trace``) to a sub-parser of a command that runs Verilator."""
    p.add_argument("--waves", metavar="FILE.fst",
                   help="dump FST waveforms of the Verilator run (FILE-1.fst, ... for further "
                        "simulation sessions); uses a separate cached waves build")
    if trace:
        p.add_argument("--trace", metavar="FILE.jsonl",
                       help="write the RTL instruction trace (pc, op, unit, start/end cycle of "
                            "every dynamic instruction) here, and the golden interpreter's "
                            "trace of the same runs beside it (FILE.golden.jsonl)")


def with_sim_debug(func, *, check=None):
    """Wrap a command's ``func`` so that its ``--waves``/``--trace`` capture every simulation
    run (:func:`ttrain.platforms.sim.debug.capture`); ``check(args)`` may reject the flags
    (ValueError) before any work."""
    def wrapped(args):
        from .commands import check_output_file
        from .platforms.sim import debug
        waves, trace = getattr(args, "waves", None), getattr(args, "trace", None)
        if not waves and not trace:
            return func(args)
        if check is not None:
            check(args)
        if waves is not None and not waves.endswith(".fst"):
            raise ValueError(f"--waves {waves}: give a file name ending in .fst (FST "
                             f"waveforms)")
        check_output_file("--waves", waves)
        check_output_file("--trace", trace)
        with debug.capture(waves=waves, trace=trace):
            rc = func(args)
            files = debug.written_waves()
        if waves:
            shown = ", ".join(str(f) for f in files) or "none (no Verilator run)"
            print(f"waves: {shown}", file=sys.stderr)
        if trace:
            n, bad = debug.compare_traces(trace)
            golden = debug.golden_trace_file(trace)
            same = ("the same (pc, op) stream" if bad is None
                    else f"DIFFERENT from line {bad}")
            print(f"instruction trace: {trace} ({n:,} instructions); golden interpreter's: "
                  f"{golden}: {same}", file=sys.stderr)
        return rc
    return wrapped


def register(sub):
    p = sub.add_parser("debug", help="look inside the simulated chip (divergence finder)",
                       description="Debugging aids for the simulated accelerator.")
    dsub = p.add_subparsers(dest="debug", required=True, metavar="WHAT")
    d = dsub.add_parser(
        "diverge", help="first instruction where the chip's stores differ from the golden",
        description="Run training steps of a preset on the simulated accelerator (Verilator) "
                    "and report the first instruction after which any store word differs "
                    "from the golden interpreter's: the first diverging step, then a search "
                    "over prefixes of its dynamic instruction stream, each run from the same "
                    "start image and compared word for word.")
    d.add_argument("--config", default="tiny", metavar="NAME", help="preset (default tiny)")
    d.add_argument("--steps", type=int, default=1, metavar="N",
                   help="training steps to look through (default 1)")
    d.add_argument("--lanes", type=int, default=4, metavar="P",
                   help="engine lanes = store banks, a power of two >= 4 (default 4)")
    d.add_argument("--seed", type=int, default=0, metavar="S",
                   help="initialization and data-order seed (default 0)")
    d.add_argument("--fanout", type=int, default=8, metavar="F",
                   help="prefixes tried per simulation session (default 8)")
    d.add_argument("--plant", metavar="PC,STORE,ADDR",
                   help="testbench only: plant a divergence (the host driver flips bit 0 of "
                        "STORE[ADDR] after every run that executed instruction PC) to see the "
                        "report; the RTL and the build are unchanged")
    d.add_argument("--json", metavar="FILE", help="also write the report as JSON here")
    d.set_defaults(func=_diverge)


def _plant(text):
    from .golden.isa import STORE_IDS
    parts = text.split(",")
    if len(parts) != 3 or parts[1] not in STORE_IDS or not parts[0].isdigit() \
            or not parts[2].isdigit():
        raise ValueError(f"--plant {text!r}: give PC,STORE,ADDR, e.g. 40,act,100 (STORE one "
                         f"of {', '.join(STORE_IDS)})")
    return int(parts[0]), parts[1], int(parts[2])


def _diverge(args):
    import tempfile
    from dataclasses import asdict

    import numpy as np

    from .commands import check_int, check_output_file, check_seed
    from .golden import model as M
    from .golden.config import get_config
    from .golden.data import generate_dataset
    from .golden.model_compiler import compile_model
    from .platforms.host.chip import build_model_top, chip_config
    from .platforms.host.diverge import find_divergence

    check_int("--steps", args.steps, 1, 200)
    check_int("--fanout", args.fanout, 1, 32)
    check_seed("--seed", args.seed)
    if args.lanes < 4 or args.lanes & (args.lanes - 1):
        raise ValueError(f"--lanes must be a power of two >= 4, got {args.lanes}")
    check_output_file("--json", args.json)
    plant = _plant(args.plant) if args.plant else None
    base = get_config(args.config)
    dataset = generate_dataset(seed=0, seq_len=base.seq_len, vocab_size=base.vocab)
    cfg, notes = chip_config(base, dataset)
    for note in notes:
        print(f"note: {note}")
    cm = compile_model(cfg)
    if plant and plant[0] >= len(cm.program.instructions):
        raise ValueError(f"--plant pc {plant[0]}: the program has "
                         f"{len(cm.program.instructions)} instructions")
    build = build_model_top(cm, lanes=args.lanes)
    if plant and plant[2] >= build.config["store_sizes"][plant[1]]:
        raise ValueError(f"--plant addr {plant[2]}: store {plant[1]} holds "
                         f"{build.config['store_sizes'][plant[1]]} words")
    params = M.init_params(cfg, np.random.default_rng(args.seed))
    batches = []
    for b in dataset.batches("train", cfg.batch, seed=np.random.default_rng([args.seed, 1])):
        batches.append(b)
        if len(batches) == args.steps:
            break
    print(f"{cfg.name}: {len(cm.program.instructions)} instructions per step; looking "
          f"through {len(batches)} step(s) on the simulated chip"
          + (f" with a planted divergence at pc {plant[0]} ({plant[1]}[{plant[2]}])"
             if plant else ""), flush=True)
    res = find_divergence(cm, build, params, batches, fanout=args.fanout,
                          workdir=tempfile.mkdtemp(prefix="ttrain-diverge-"),
                          debug_corrupt=plant, log=lambda m: print(f"  {m}", flush=True))
    for line in res.lines():
        print(line)
    if args.json:
        from .golden.train import write_atomically
        text = json.dumps({"config": cfg.name, **asdict(res)}, indent=1).encode()
        write_atomically(args.json, lambda f: f.write(text))
    return 1 if res.found else 0
