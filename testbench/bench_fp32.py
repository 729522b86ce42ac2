# amaranth: UnusedElaboratable=no
"""FP32 unit sweeps under Verilator: operand sets, golden bit patterns, the streaming run.

Library side of ``ttrain bench fp32`` and of ``tests/test_fp32_verilator.py`` (which, with
``tests/test_fp32_sim.py``, imports its helpers from here):

- :func:`golden_bits`: the golden numerics' results for operand bit patterns;
- :func:`edge_case_pairs` (hand-made corner cases per unit) and :func:`random_pairs` (operands
  drawn from every class: zeros, subnormals, normals, near-overflow, infinities, NaNs, and
  near-cancellation pairs), combined by :func:`sweep_pairs`;
- :func:`build_unit` / :func:`stream_unit`: the simulation-only wrapper
  ``testbench/fp32_stream_tb.v`` streams operand pairs from a ``$readmemh`` file into the unit
  at one pair per cycle and dumps the results with ``$writememh``; cocotb
  (``testbench/tb_fp32.py``) only starts it and awaits ``done``; :func:`decode_results` turns
  the dump into field arrays that are compared with :func:`golden_bits` in one vectorized call;
- :func:`run_fp32_sweep` (one unit, any number of pairs) and :func:`bench_fp32` (the
  ``{"config", "entries", "total"}`` report of ``ttrain bench fp32 --json``).

Also a command-line benchmark for the one-million-pairs-per-unit requirement::

    .venv/bin/python -m ttrain.testbench.bench_fp32 --pairs 1000000 --seed 1 [--uniform]

which calls :func:`run_fp32_sweep` for every unit and prints pairs, mismatches and seconds.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ..golden import numerics as gn
from ..rtl.fp32 import CANONICAL_NAN, FP32Add, FP32Compare, FP32Mul
from ..platforms.sim.verilator import build_verilator, run_cocotb
from . import TESTBENCH_DIR

UNITS = ("mul", "add", "compare")
WRAPPER = TESTBENCH_DIR / "fp32_stream_tb.v"
#: Result width of each unit (the compare unit packs max, min and three flags).
OUT_WIDTH = {"mul": 32, "add": 32, "compare": 67}
#: Operand memory depth of the wrapper: the most pairs one simulation run can take.
DEPTH = 1 << 20


# -- golden reference, as raw bit patterns ------------------------------------------------------

def golden_bits(unit, a_bits, b_bits):
    """Return the golden results of ``unit`` for operand bit patterns.

    Parameters
    ----------
    unit : {"mul", "add", "compare"}
    a_bits, b_bits : numpy.ndarray of uint32

    Returns
    -------
    dict of str to numpy.ndarray
        ``{"o": uint32}`` for mul/add; ``{"max", "min": uint32, "is_lt", "is_le", "is_eq":
        bool}`` for compare.
    """
    a = gn.bits_to_f32(np.asarray(a_bits, dtype=np.uint32))
    b = gn.bits_to_f32(np.asarray(b_bits, dtype=np.uint32))
    if unit == "mul":
        return {"o": gn.f32_to_bits(gn.fp32_mul(a, b))}
    if unit == "add":
        return {"o": gn.f32_to_bits(gn.fp32_add(a, b))}
    if unit == "compare":
        return {"max": gn.f32_to_bits(gn.fp32_max(a, b)),
                "min": gn.f32_to_bits(gn.fp32_min(a, b)),
                "is_lt": np.asarray(gn.fp32_lt(a, b), dtype=bool),
                "is_le": np.asarray(gn.fp32_le(a, b), dtype=bool),
                "is_eq": np.asarray(gn.fp32_eq(a, b), dtype=bool)}
    raise ValueError(f"unit must be one of {UNITS}, not {unit!r}")


# -- operand sets ------------------------------------------------------------------------------

def _f(x):
    return int(np.array(x, dtype=np.float32).view(np.uint32))


MAX_NORMAL = 0x7F7FFFFF
MIN_NORMAL = 0x00800000
MAX_SUBNORMAL = 0x007FFFFF
POS_INF, NEG_INF = 0x7F800000, 0xFF800000
NANS = (CANONICAL_NAN, 0xFFC00000, 0x7F800001, 0x7FBFFFFF, 0xFFFFFFFF, 0x7FC12345)
SIGN = 0x80000000

# Products that are exact ties (checked in test_edge_cases_are_what_they_claim): an odd
# significand times 1.5 is halfway between two floats; which neighbour is even alternates.
MUL_TIES = [(0x3F800001, _f(1.5)), (0x3F800003, _f(1.5)), (0x3F800005, _f(1.5)),
            (0x3F800007, _f(1.5)), (0xBF800001, _f(1.5)), (0x3F800003, _f(-1.5)),
            (0x00000003, _f(0.5)), (0x00000001, _f(0.5)), (0x00000005, _f(0.5)),
            (0x00000007, _f(0.5))]
# Sums that are exact ties: 1 + 2^-24 (round down to 1), (1 + 2^-23) + 2^-24 (round up).
ADD_TIES = [(_f(1.0), _f(2.0 ** -24)), (0x3F800001, _f(2.0 ** -24)),
            (_f(-1.0), _f(-(2.0 ** -24))), (0xBF800001, _f(-(2.0 ** -24))),
            (MAX_NORMAL, _f(2.0 ** 103)),            # tie at the top: rounds to even = inf
            (_f(3.0), _f(2.0 ** -23)), (_f(2.0 ** 24), _f(1.0)), (_f(2.0 ** 24 + 2), _f(1.0))]


def edge_case_pairs(unit):
    """Return hand-made corner-case operand pairs for ``unit`` as two uint32 arrays.

    Covers ties rounding both ways, subnormal inputs and outputs, rounding up into the smallest
    normal, overflow, infinities and NaNs, signed zeros and (near-)cancellation.
    """
    specials = [0, SIGN, _f(1.0), _f(-1.0), 1, SIGN | 1, MAX_SUBNORMAL, MIN_NORMAL, MAX_NORMAL,
                SIGN | MAX_NORMAL, POS_INF, NEG_INF, *NANS, _f(1.5), _f(-3.0), 0x00400000]
    pairs = [(x, y) for x in specials for y in specials]     # every class against every class
    pairs += MUL_TIES + ADD_TIES
    pairs += [
        # Subnormal results, with and without rounding.
        (_f(2.0 ** -70), _f(2.0 ** -70)), (0x1E3FFFFF, 0x1F3FFFFF), (0x20000001, 0x1E800003),
        (_f(2.0 ** -126), _f(0.5)), (_f(2.0 ** -126), _f(0.75)), (0x00000003, _f(0.25)),
        (0x00000001, _f(0.49)), (0x00000001, _f(0.5000001)), (0x00000001, _f(1.9999999)),
        (0x00123456, _f(3.14159)), (0x00654321, _f(-0.333)),
        # Round up into the smallest normal: largest subnormal times (1 + 2^-23).
        (MAX_SUBNORMAL, 0x3F800001), (0x3F7FFFFF, 0x00800001), (0x3F000000, 0x00FFFFFF),
        (0x00400000, 0x00400000), (MAX_SUBNORMAL, 1), (SIGN | MAX_SUBNORMAL, SIGN | 1),
        # Overflow and near-overflow.
        (MAX_NORMAL, _f(2.0)), (MAX_NORMAL, 0x3F800001), (MAX_NORMAL, MAX_NORMAL),
        (SIGN | MAX_NORMAL, SIGN | MAX_NORMAL), (_f(2.0 ** 64), _f(2.0 ** 64)),
        (_f(2.0 ** 63), _f(2.0 ** 64)), (MAX_NORMAL, _f(2.0 ** 102)),
        (MAX_NORMAL, 0x73000000), (0x5F800000, 0x5F7FFFFF),
        # Cancellation and near-cancellation.
        (_f(1.0), _f(-1.0)), (_f(-1.0), _f(1.0)), (0x3F800001, 0xBF800000),
        (0x3F800000, 0xBF7FFFFF), (0x00800000, 0x807FFFFF), (0x4B000001, 0xCB000000),
        (0x7F7FFFFF, 0xFF7FFFFE), (0x12345678, 0x92345678), (0x12345678, 0x92345679),
        (0x00000001, 0x80000001), (0x40000000, 0xBFFFFFFF),
        # Large exponent differences (everything becomes sticky).
        (_f(1.0), 1), (_f(1.0), SIGN | 1), (MAX_NORMAL, 1), (_f(2.0 ** 30), _f(-1.0)),
        (_f(1.0), _f(2.0 ** -25)), (_f(1.0), _f(-(2.0 ** -25))), (_f(1.0), _f(2.0 ** -24) | 1),
    ]
    both = pairs + [(y, x) for x, y in pairs]
    a = np.array([p[0] for p in both], dtype=np.uint32)
    b = np.array([p[1] for p in both], dtype=np.uint32)
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {UNITS}, not {unit!r}")
    return a, b


def random_pairs(count, seed):
    """Return ``count`` random operand pairs (two uint32 arrays) drawn from every class.

    Each operand is independently a zero, a subnormal, a normal of any exponent, a normal near
    1 (so products and sums land in common ranges), a near-overflow value, an infinity or a NaN
    (with random payload and sign). A quarter of the pairs are near-cancellation pairs: ``b`` is
    ``-a`` with a few low bits or the exponent's last bit perturbed. Another quarter have
    exponents whose sum is near the subnormal/overflow edges for products, and another quarter
    are tie-prone (``b`` has a short significand and an exponent a little or 23-26 below
    ``a``'s).
    """
    if not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be a positive integer, not {count!r}")
    rng = np.random.default_rng(seed)

    def operands(n):
        cls = rng.choice(7, size=n, p=[0.04, 0.12, 0.34, 0.3, 0.1, 0.04, 0.06])
        sign = rng.integers(0, 2, n, dtype=np.uint32) << 31
        frac = rng.integers(0, 1 << 23, n, dtype=np.uint32)
        exp = np.select(
            [cls == 0, cls == 1, cls == 2, cls == 3, cls == 4, cls == 5, cls == 6],
            [0, 0, rng.integers(1, 255, n), rng.integers(120, 135, n),
             rng.integers(250, 255, n), 255, 255]).astype(np.uint32)
        frac = np.where(cls == 0, 0, frac)
        frac = np.where(cls == 1, np.maximum(frac >> rng.integers(0, 23, n, dtype=np.uint32),
                                             1), frac)
        frac = np.where(cls == 5, 0, frac)
        frac = np.where(cls == 6, np.maximum(frac, 1), frac)
        return (sign | (exp << 23) | frac).astype(np.uint32)

    a = operands(count)
    b = operands(count)
    kind = rng.integers(0, 4, count)
    # Near-cancellation: b = -a perturbed in its low bits (or the exponent's last bit).
    delta = rng.integers(-4, 5, count).astype(np.int64)
    near = ((a.astype(np.int64) ^ SIGN) + delta) & 0xFFFFFFFF
    near = np.where(rng.random(count) < 0.2, near ^ (1 << 23), near)
    b = np.where(kind == 0, near.astype(np.uint32), b)
    # Product-range edges: biased exponents summing to about 127 - 24 .. 127 or 254 + 127.
    lo = rng.integers(1, 104, count)
    target = np.where(rng.random(count) < 0.5, rng.integers(80, 130, count),
                      rng.integers(375, 383, count))
    ea = np.clip(np.where(target > 300, rng.integers(130, 255, count), lo), 1, 254)
    eb = np.clip(target - ea, 0, 254)
    a_edge = (a & 0x807FFFFF) | (ea.astype(np.uint32) << 23)
    b_edge = (b & 0x807FFFFF) | (eb.astype(np.uint32) << 23)
    a = np.where(kind == 1, a_edge, a).astype(np.uint32)
    b = np.where(kind == 1, b_edge, b).astype(np.uint32)
    # Tie-prone: b has a short significand (1, 1.5, 1.25, 1.75, 1.125) and an exponent 0..26
    # below a's, so many products and sums land exactly halfway between two floats.
    a_exp = (a >> 23) & 0xFF
    b_frac = rng.choice(np.array([0, 1 << 22, 1 << 21, 3 << 21, 1 << 20], dtype=np.uint32),
                        count)
    b_exp = np.clip(a_exp.astype(np.int64) - rng.choice([0, 1, 2, 23, 24, 24, 24, 25, 26],
                                                        count), 1, 254).astype(np.uint32)
    b_tie = (b & SIGN) | (b_exp << 23) | b_frac
    b = np.where(kind == 2, b_tie, b).astype(np.uint32)
    return a, b


# -- the units under Verilator -----------------------------------------------------------------

def make_unit(unit, **kwargs):
    """Return a fresh component for ``unit``."""
    if unit == "mul":
        return FP32Mul(**kwargs)
    if unit == "add":
        return FP32Add(**kwargs)
    if unit == "compare":
        return FP32Compare(**kwargs)
    raise ValueError(f"unit must be one of {UNITS}, not {unit!r}")


def build_unit(unit):
    """Build (or reuse) the streaming simulation of ``unit``; return the VerilatorBuild."""
    name = f"fp32_{unit}"
    return build_verilator(make_unit(unit), name=name, extra_sources=[WRAPPER],
                           toplevel="fp32_stream_tb", defines={"DUT": name},
                           parameters={"OUT_W": OUT_WIDTH[unit], "DEPTH": DEPTH})


def write_operands(path, a_bits, b_bits):
    """Write the pairs as the wrapper's ``+OPERANDS=`` file (one ``{b, a}`` hex word a line)."""
    words = (np.asarray(b_bits, dtype=np.uint64) << np.uint64(32)) | np.asarray(a_bits,
                                                                                 np.uint64)
    path.write_text("\n".join(map("{:016x}".format, words.tolist())) + "\n")


_HEX = np.full(256, 255, dtype=np.uint8)
_HEX[np.frombuffer(b"0123456789", np.uint8)] = np.arange(10)
_HEX[np.frombuffer(b"abcdef", np.uint8)] = np.arange(10, 16)
_HEX[np.frombuffer(b"ABCDEF", np.uint8)] = np.arange(10, 16)


def _read_results(path, count, width):
    """Parse a ``$writememh`` dump of ``count`` words into an (count, digits) nibble array."""
    lines = [ln for ln in path.read_bytes().split(b"\n")
             if ln.strip() and not ln.startswith((b"//", b"@"))]
    if len(lines) != count:
        raise AssertionError(f"{path} holds {len(lines)} results, expected {count}")
    digits = (width + 3) // 4
    raw = np.frombuffer(b"".join(ln.strip().rjust(digits, b"0") for ln in lines), np.uint8)
    nibbles = _HEX[raw].reshape(count, digits)
    if (nibbles == 255).any():
        raise AssertionError(f"{path} holds non-hex digits (X or Z results?)")
    return nibbles


def _nibbles_to_uint32(nibbles):
    value = np.zeros(len(nibbles), dtype=np.uint32)
    for col in range(nibbles.shape[1]):
        value = (value << np.uint32(4)) | nibbles[:, col].astype(np.uint32)
    return value


def decode_results(unit, nibbles):
    """Turn result nibbles into the field arrays of :func:`golden_bits`."""
    if unit in ("mul", "add"):
        return {"o": _nibbles_to_uint32(nibbles)}
    # 67 bits = 17 digits: flags in the top digit (bit 0 is_lt, 1 is_le, 2 is_eq), then min,
    # then max (least significant).
    top = nibbles[:, 0]
    return {"max": _nibbles_to_uint32(nibbles[:, 9:17]),
            "min": _nibbles_to_uint32(nibbles[:, 1:9]),
            "is_lt": (top & 1).astype(bool), "is_le": (top & 2).astype(bool),
            "is_eq": (top & 4).astype(bool)}


def stream_unit(unit, a_bits, b_bits, *, work_dir, gaps=0, latency=None, build=None,
                timeout=600):
    """Run the pairs through ``unit`` under Verilator and return the decoded results.

    Parameters
    ----------
    unit : {"mul", "add", "compare"}
    a_bits, b_bits : numpy.ndarray of uint32
        At most :data:`DEPTH` pairs.
    work_dir : path-like
        Folder for the operand/result files and the cocotb results/log.
    gaps : int
        Insert pseudo-random idle cycles (about one in four) before each of the first ``gaps``
        beats; the rest stream back to back.
    latency : int, optional
        Latency the wrapper checks ``o.valid`` against (default: the unit's own).
    build : VerilatorBuild, optional
        Reuse a build (default: :func:`build_unit`).
    timeout : float
        Wall-clock limit of the simulation in seconds (a hung run fails instead of blocking).
    """
    count = len(a_bits)
    if not 1 <= count <= DEPTH:
        raise ValueError(f"stream between 1 and {DEPTH} pairs per run, not {count}")
    if not isinstance(gaps, int) or gaps < 0:
        raise ValueError(f"gaps must be a non-negative number of beats, not {gaps!r}")
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    build = build or build_unit(unit)
    latency = make_unit(unit).latency if latency is None else latency
    operands = work_dir / "operands.hex"
    write_operands(operands, a_bits, b_bits)
    results = play_stream(build, work_dir, operands, count, latency=latency, gaps=gaps,
                          timeout=timeout)
    return decode_results(unit, _read_results(results, count, OUT_WIDTH[unit]))


def play_stream(build, work_dir, operands, count, *, latency, gaps=0, timeout=600):
    """Play the ``count`` operand words of file ``operands`` through a unit built under
    ``fp32_stream_tb.v`` (``tb_fp32``'s ``stream_pairs``) and return the results file's path;
    ``latency`` is what the wrapper checks ``o.valid`` against."""
    results = Path(work_dir) / "results.hex"
    results.unlink(missing_ok=True)
    run_cocotb(build, "tb_fp32", testcase="stream_pairs", test_dir=work_dir,
               module_dirs=[TESTBENCH_DIR],
               plusargs=[f"+OPERANDS={operands}", f"+RESULTS={results}", f"+PAIRS={count}",
                         f"+LATENCY={latency}", f"+GAPS={int(gaps)}"],
               extra_env={"FP32_PAIRS": count, "FP32_TIMEOUT_CYCLES": 2 * count + 1000},
               timeout=timeout)
    return results


def count_mismatches(unit, got, a_bits, b_bits):
    """Return the number of pairs where any output field differs from golden."""
    want = golden_bits(unit, a_bits, b_bits)
    bad = np.zeros(len(a_bits), dtype=bool)
    for key, expected in want.items():
        bad |= got[key] != expected
    return int(bad.sum())


def sweep_pairs(unit, pairs, seed, uniform=False):
    """Return the operand set of a sweep: the unit's edge cases, then random pairs.

    With ``uniform``, only uniformly random 32-bit patterns instead (no edge cases, no class
    weighting): a cross-check that does not depend on :func:`random_pairs`' choices.
    """
    if uniform:
        rng = np.random.default_rng(seed)
        return (rng.integers(0, 1 << 32, pairs, dtype=np.uint64).astype(np.uint32),
                rng.integers(0, 1 << 32, pairs, dtype=np.uint64).astype(np.uint32))
    ea, eb = edge_case_pairs(unit)
    ra, rb = random_pairs(max(pairs - len(ea), 1), seed)
    return np.concatenate([ea, ra])[:pairs], np.concatenate([eb, rb])[:pairs]


def result_classes(bits):
    """Count golden results per class: zero, subnormal, normal, infinity, NaN."""
    bits = np.asarray(bits, dtype=np.uint32)
    exp, frac = (bits >> 23) & 0xFF, bits & 0x7FFFFF
    return {"zero": int(((exp == 0) & (frac == 0)).sum()),
            "subnormal": int(((exp == 0) & (frac != 0)).sum()),
            "normal": int(((exp > 0) & (exp < 255)).sum()),
            "inf": int(((exp == 255) & (frac == 0)).sum()),
            "nan": int(((exp == 255) & (frac != 0)).sum())}


def run_fp32_sweep(unit, pairs=1_000_000, seed=0, *, uniform=False, work_dir=None):
    """Stream ``pairs`` operand pairs through ``unit`` under Verilator; compare with golden.

    Parameters
    ----------
    unit : {"mul", "add", "compare"}
    pairs : int
        Number of pairs (edge cases first, then :func:`random_pairs`); runs of
        more than :data:`DEPTH` pairs are split into several simulations.
    seed : int
        Seed of the random pairs.
    uniform : bool
        Uniformly random bit patterns instead (see :func:`sweep_pairs`).
    work_dir : path-like, optional
        Folder for the files of each run (a temporary folder by default).

    Returns
    -------
    dict
        ``unit``, ``pairs``, ``mismatches``, ``build_seconds``, ``sim_seconds`` (cocotb runs,
        including file writing and reading), ``golden_seconds``, ``total_seconds`` and
        ``first_mismatches`` (up to 10 ``(a, b)`` hex pairs) and ``classes`` (golden results
        per class, see :func:`result_classes`; of ``max`` for the compare unit).
    """
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {UNITS}, not {unit!r}")
    if not isinstance(pairs, int) or pairs < 1:
        raise ValueError(f"pairs must be a positive integer, not {pairs!r}")
    t0 = time.perf_counter()
    a_all, b_all = sweep_pairs(unit, pairs, seed, uniform)
    build = build_unit(unit)
    t1 = time.perf_counter()
    sim_s = golden_s = 0.0
    mismatches, first = 0, []
    classes = dict.fromkeys(("zero", "subnormal", "normal", "inf", "nan"), 0)
    with tempfile.TemporaryDirectory(prefix=f"fp32-sweep-{unit}-") as tmp:
        root = Path(work_dir) if work_dir is not None else Path(tmp)
        for start in range(0, pairs, DEPTH):
            a, b = a_all[start:start + DEPTH], b_all[start:start + DEPTH]
            ts = time.perf_counter()
            got = stream_unit(unit, a, b, work_dir=root / f"run{start // DEPTH}", build=build)
            tg = time.perf_counter()
            want = golden_bits(unit, a, b)
            bad = np.zeros(len(a), dtype=bool)
            for key, expected in want.items():
                bad |= got[key] != expected
            mismatches += int(bad.sum())
            for key, n in result_classes(want["o" if "o" in want else "max"]).items():
                classes[key] += n
            first += [(f"{int(a[k]):08x}", f"{int(b[k]):08x}") for k in np.flatnonzero(bad)]
            te = time.perf_counter()
            sim_s += tg - ts
            golden_s += te - tg
    return {"unit": unit, "pairs": pairs, "uniform": uniform, "mismatches": mismatches,
            "build_seconds": round(t1 - t0, 2), "sim_seconds": round(sim_s, 2),
            "golden_seconds": round(golden_s, 2),
            "total_seconds": round(time.perf_counter() - t0, 2), "first_mismatches": first[:10],
            "classes": classes}




#: Fields of :func:`run_fp32_sweep`'s result that :func:`bench_fp32` sums into ``total``.
TOTAL_KEYS = ("pairs", "mismatches", "build_seconds", "sim_seconds", "golden_seconds",
              "total_seconds")


def bench_fp32(units=UNITS, pairs=1_000_000, seed=0):
    """Run :func:`run_fp32_sweep` for each of ``units``; return the benchmark report.

    ``{"config": {"pairs", "seed"}, "entries": [one sweep result per unit], "total": {...}}``
    where ``total`` sums :data:`TOTAL_KEYS` over the entries (rounded to 0.01; a key missing
    from any entry is left out).
    """
    if not isinstance(pairs, int) or pairs < 1:
        raise ValueError(f"pairs must be a positive integer, not {pairs!r}")
    results = [run_fp32_sweep(u, pairs, seed) for u in units]
    total = {k: round(sum(r[k] for r in results), 2) for k in TOTAL_KEYS
             if all(k in r for r in results)}
    return {"config": {"pairs": pairs, "seed": seed}, "entries": results, "total": total}


def main(argv=None):
    """Run :func:`run_fp32_sweep` for the chosen units and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--unit", choices=[*UNITS, "all"], default="all")
    parser.add_argument("--pairs", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--uniform", action="store_true",
                        help="uniformly random bit patterns instead of edge cases + classes")
    args = parser.parse_args(argv)
    failed = False
    for unit in (UNITS if args.unit == "all" else (args.unit,)):
        report = run_fp32_sweep(unit, args.pairs, args.seed, uniform=args.uniform)
        print(report, flush=True)
        failed |= report["mismatches"] > 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
