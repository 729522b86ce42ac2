"""``ttrain hw``: print the hardware configuration of a preset (the one every build uses).

Argument parsing and printing only; the configuration is
:func:`ttrain.platforms.hw.preset_hw_config`.
"""

__all__ = ["register", "format_hw"]


def format_hw(hw):
    """Return the human-readable text of a :class:`~ttrain.platforms.hw.HwConfig`."""
    src = hw.to_dict()["source"]
    progs = ", ".join(f"{p['name']} ({p['instructions']} instructions)" for p in src["programs"])
    lines = [f"hardware configuration of {src['config']!r} (hw.json digest {hw.digest()})",
             f"  runs        {progs}",
             f"  engine      {hw.lanes} lanes, {hw.slots} slots, {hw.dim_bits}-bit dims"
             + (f", {hw.max_split} lane groups (split)" if hw.max_split > 1 else "")
             + (f", operand beats of {hw.fetch_words} words" if hw.fetch_words else "")
             + (", row operands" if hw.row_operands else "")
             + {"arbiter": "", "omega": ", operands through an Omega port each",
                "omega-shared": ", operands through one shared Omega read port"}[hw.route],
             f"  vector      {hw.vector_lanes} lanes (vector and update units)"
             + (f", {hw.special_lanes} special-function units side by side"
                if hw.special_lanes > 1 else "")
             + (f" ({hw.special_full} with every function, the others GELU/GELU' only)"
                if 0 < hw.special_full < hw.special_lanes else "")
             + (", two read vectors a request" if hw.vector_reads == 2 else ""),
             f"  stores      {hw.banks} banks each"
             + (", rows skewed (word a in bank (a + a // banks) % banks)" if hw.bank_skew
                else ""),
             *(f"    {s:8s} {w:>10,} words  {hw.styles[s]:5s} ({'URAM' if hw.styles[s] == 'ultra' else 'BRAM'})"
               for s, w in hw.stores.items()),
             f"    total    {hw.total_words:>10,} words = {4 * hw.total_words / 1e6:.2f} MB; "
             f"fits the U50: {'yes' if hw.fits_u50 else 'NO'}",
             f"  imem        {hw.imem_depth} instructions",
             f"  units       {', '.join(hw.units)}",
             f"  clock       {hw.clock_mhz:g} MHz (target)"]
    return "\n".join(lines)


def _run(args):
    from .commands import check_int
    from .platforms.hw import preset_hw_config
    for flag, v in (("--lanes", args.lanes), ("--banks", args.banks),
                    ("--imem-depth", args.imem_depth), ("--vector-width", args.vector_width),
                    ("--special-lanes", args.special_lanes),
                    ("--special-full", args.special_full)):
        if v is not None and (v < 1 or v & (v - 1)):
            raise ValueError(f"{flag} must be a positive power of two, got {v}")
    check_int("--slots", args.slots, 2, 256)
    hw = preset_hw_config(args.config, lanes=args.lanes, banks=args.banks, slots=args.slots,
                          imem_depth=args.imem_depth, bank_skew=args.bank_skew,
                          vector_width=args.vector_width, row_operands=args.row_operands,
                          special_lanes=args.special_lanes, route=args.route,
                          vector_reads=args.vector_reads, special_full=args.special_full)
    print(hw.to_json() if args.json else format_hw(hw), end="\n" if not args.json else "")
    return 0


def register(sub):
    from .golden.config import preset_names
    from .platforms.hw import ROUTES
    p = sub.add_parser(
        "hw", help="the hardware configuration of a preset (stores, imem, units, lanes)",
        description="Print the one hardware configuration of a preset: store sizes from its "
                    "compiled training step's memory map, the U50 BRAM/URAM mapping, "
                    "instruction-memory depth, units, lanes and banks. Every Verilator build, "
                    "`ttrain xo` tree and FuseSoC target of the same preset and flags records "
                    "the same configuration as hw.json. Presets: " + ", ".join(preset_names()))
    p.add_argument("--config", required=True, metavar="NAME", help="preset name")
    p.add_argument("--lanes", type=int, default=None, metavar="P",
                   help="engine lanes (power of two; default 8)")
    p.add_argument("--banks", type=int, default=None, metavar="B",
                   help="banks per store (power of two; default = lanes)")
    p.add_argument("--slots", type=int, default=None, metavar="S",
                   help="output rows interleaved per lane (default 16)")
    p.add_argument("--imem-depth", type=int, default=None, metavar="N",
                   help="instruction memory depth (power of two; default: the program's)")
    p.add_argument("--bank-skew", action="store_true",
                   help="word a of every store in bank (a + a // banks) %% banks (rows skewed "
                        "across the banks: strides that are multiples of the banks stop "
                        "conflicting)")
    p.add_argument("--vector-width", type=int, default=None, metavar="W",
                   help="lanes of the vector and update units (power of two up to the banks; "
                        "default the banks)")
    p.add_argument("--row-operands", action="store_true",
                   help="the engine's unit-stride B/C vectors as row entries (one per lane "
                        "group) instead of through the operand ports")
    p.add_argument("--special-lanes", type=int, default=None, metavar="S",
                   help="special-function units side by side in the vector unit (power of "
                        "two up to its lanes; default 1): special ops stream S elements per "
                        "cycle")
    p.add_argument("--special-full", type=int, default=None, metavar="F",
                   help="how many of the --special-lanes units have every special function "
                        "(power of two; default all); the others hold only GELU and its "
                        "gradient, which stream S elements a cycle, the other functions F")
    p.add_argument("--vector-reads", type=int, choices=(1, 2), default=None, metavar="R",
                   help="vectors per read request of the vector unit's port (1, the default, "
                        "or 2: both sources of an element beat in one request)")
    p.add_argument("--route", choices=ROUTES, default="arbiter",
                   help="how the engine's operand and result vectors reach the banks: "
                        "arbiter (default), omega (an Omega port per fetcher and the C "
                        "writer) or omega-shared (A, B and old C through one Omega read port)")
    p.add_argument("--json", action="store_true", help="print hw.json")
    p.set_defaults(func=_run)
