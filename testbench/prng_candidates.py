# amaranth: UnusedElaboratable=no
"""Benchmark behind the choice of the PRNG (``docs/prng.md``): cost per lane and quality of
counter-based generators keyed by ``(seed, index)``.

Candidates, each as a NumPy function ``f(seed, index) -> uint32`` (checked against its
published known-answer vectors where it has them) and as an Amaranth lane datapath,
one round (or one multiply) per pipeline stage:

``lowbias32-keyed``
    the chosen generator, :func:`ttrain.golden.prng.draw`; hardware :class:`ttrain.rtl.prng.
    PRNGUnit` itself.
``speck32-R``
    Speck32/64 (Beaulieu et al., 2013) with ``R`` rounds: key ``(seed_lo, seed_hi, 0, 0)``,
    block = index; LUT-only ARX, 16-bit words. ``R = 22`` is the full cipher.
``threefry2x32-R``
    Threefry-2x32 (Salmon et al., SC'11, Random123): counter ``(index, 0)``, key ``(seed, 0)``,
    word 0; LUT-only ARX, 32-bit words.
``philox2x32-10``
    Philox-2x32-10 (same paper): counter ``(index, 0)``, key ``seed``, word 0; one 32x32->64
    multiply per round (DSP48E2).

Cost: Yosys ``synth_xilinx -family xcup`` (:func:`ttrain.platforms.resources.synth_component`)
of the datapath at 1 and 2 lanes; per lane = the difference (what is shared, such as a key
schedule, cancels), shared = the 1-lane count minus one lane. Quality: worst avalanche bias
(flip one index or seed bit: every output bit should flip with probability 1/2) and the
statistics of ``tests/test_golden_prng.py`` as z-scores / p-values.

Run (about two minutes on two cores)::

    .venv/bin/python -m ttrain.testbench.prng_candidates [--no-synth] [--json FILE]
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from amaranth import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..golden import prng

__all__ = ["speck32", "threefry2x32", "philox2x32", "CANDIDATES", "quality", "lane_cost",
           "main"]

_U32 = np.uint32
_M16 = np.uint32(0xFFFF)


# ---- NumPy definitions --------------------------------------------------------------------

def _ror16(v, r):
    return ((v >> _U32(r)) | (v << _U32(16 - r))) & _M16


def _rol16(v, r):
    return ((v << _U32(r)) | (v >> _U32(16 - r))) & _M16


def _rol32(v, r):
    return (v << _U32(r)) | (v >> _U32(32 - r))


def speck32_round_keys(key, rounds):
    """Round keys of Speck32/64 from the key words ``(k0, l0, l1, l2)`` (uint32 arrays)."""
    k, *ls = (np.asarray(w, np.uint32) & _M16 for w in key)
    keys = [k]
    for i in range(rounds - 1):
        nl = ((k + _ror16(ls[i], 7)) & _M16) ^ _U32(i)
        ls.append(nl)
        k = _rol16(k, 2) ^ nl
        keys.append(k)
    return keys


@np.errstate(over="ignore")
def speck32_encrypt(x, y, keys):
    """Encrypt the 16-bit word pair ``(x, y)`` under the round keys (uint32 arrays)."""
    for k in keys:
        x = ((_ror16(x, 7) + y) & _M16) ^ k
        y = _rol16(y, 2) ^ x
    return x, y


def speck32(rounds):
    def f(seed, index):
        seed, index = np.asarray(seed, np.uint32), np.asarray(index, np.uint32)
        keys = speck32_round_keys((seed, seed >> _U32(16), 0, 0), rounds)
        x, y = speck32_encrypt(index >> _U32(16), index & _M16, keys)
        return (x << _U32(16)) | y
    return f


_THREEFRY_ROT = (13, 15, 26, 6, 17, 29, 16, 24)
_THREEFRY_PARITY = 0x1BD11BDA


@np.errstate(over="ignore")
def threefry2x32_block(ctr, key, rounds):
    """Threefry-2x32 of counter words ``ctr`` under key words ``key`` (Random123)."""
    k0, k1 = (np.asarray(w, np.uint32) for w in key)
    ks = (k0, k1, _U32(_THREEFRY_PARITY) ^ k0 ^ k1)
    x0 = np.asarray(ctr[0], np.uint32) + ks[0]
    x1 = np.asarray(ctr[1], np.uint32) + ks[1]
    for r in range(rounds):
        x0 = x0 + x1
        x1 = _rol32(x1, _THREEFRY_ROT[r % 8]) ^ x0
        if r % 4 == 3:
            n = (r + 1) // 4
            x0 = x0 + ks[n % 3]
            x1 = x1 + ks[(n + 1) % 3] + _U32(n)
    return x0, x1


def threefry2x32(rounds):
    return lambda seed, index: threefry2x32_block((index, 0), (seed, 0), rounds)[0]


_PHILOX_M, _PHILOX_W = 0xD256D193, 0x9E3779B9


@np.errstate(over="ignore")
def philox2x32_block(ctr, key, rounds):
    """Philox-2x32 of counter words ``ctr`` under the key word ``key`` (Random123)."""
    x0 = np.asarray(ctr[0], np.uint64)
    x1 = np.asarray(ctr[1], np.uint64)
    k = np.asarray(key, np.uint64)
    for r in range(rounds):
        p = x0 * np.uint64(_PHILOX_M)
        x0, x1 = ((p >> np.uint64(32)) ^ k ^ x1) & np.uint64(0xFFFFFFFF), \
            p & np.uint64(0xFFFFFFFF)
        k = (k + np.uint64(_PHILOX_W)) & np.uint64(0xFFFFFFFF)
    return x0.astype(np.uint32), x1.astype(np.uint32)


def philox2x32(rounds):
    return lambda seed, index: philox2x32_block((index, 0), seed, rounds)[0]


# ---- Amaranth lane datapaths (cost only; PRNGUnit is the real unit) ------------------------

class _Lanes(wiring.Component):
    """``lanes`` copies of a candidate's per-lane datapath behind shared key ports; index of
    lane ``i`` = ``index + i``; outputs registered, every round registered."""

    def __init__(self, lanes, key_bits):
        self._lanes = lanes
        super().__init__({"index": In(32), "key": In(key_bits), "o": Out(32 * lanes)})

    def elaborate(self, platform):
        m = Module()
        outs = []
        for i in range(self._lanes):
            x = Signal(32, name=f"idx{i}")
            m.d.sync += x.eq(self.index + i)
            outs.append(self.lane(m, x, i))
        m.d.comb += self.o.eq(Cat(*outs))
        return m

    @staticmethod
    def reg(m, value, name):
        r = Signal(len(value), name=name)
        m.d.sync += r.eq(value)
        return r


class SpeckLanes(_Lanes):
    def __init__(self, lanes, rounds):
        self._rounds = rounds
        super().__init__(lanes, 16 * rounds)

    def lane(self, m, index, i):
        x, y = index[16:], index[:16]
        for r in range(self._rounds):
            k = self.key[16 * r:16 * r + 16]
            nx = (Cat(x[7:], x[:7]) + y)[:16] ^ k
            ny = Cat(y[14:], y[:14]) ^ nx
            x, y = self.reg(m, nx, f"x{i}_{r}"), self.reg(m, ny, f"y{i}_{r}")
        return Cat(y, x)


class ThreefryLanes(_Lanes):
    def __init__(self, lanes, rounds):
        self._rounds = rounds
        super().__init__(lanes, 3 * 32)

    def lane(self, m, index, i):
        ks = [self.key[32 * j:32 * j + 32] for j in range(3)]
        x0, x1 = self.reg(m, (index + ks[0])[:32], f"a{i}"), ks[1]
        for r in range(self._rounds):
            s = _THREEFRY_ROT[r % 8]
            n0 = (x0 + x1)[:32]
            n1 = Cat(x1[32 - s:], x1[:32 - s]) ^ n0
            if r % 4 == 3:
                n = (r + 1) // 4
                n0 = (n0 + ks[n % 3])[:32]
                n1 = (n1 + ks[(n + 1) % 3] + n)[:32]
            x0, x1 = self.reg(m, n0, f"x{i}_{r}"), self.reg(m, n1, f"y{i}_{r}")
        return x0


class PhiloxLanes(_Lanes):
    def __init__(self, lanes, rounds):
        self._rounds = rounds
        super().__init__(lanes, 32 * rounds)

    def lane(self, m, index, i):
        x0, x1 = index, Signal(32)
        for r in range(self._rounds):
            p = self.reg(m, self.reg(m, x0 * _PHILOX_M, f"m{i}_{r}"), f"p{i}_{r}")
            x1d = self.reg(m, self.reg(m, x1, f"d{i}_{r}"), f"e{i}_{r}")
            x0 = self.reg(m, p[32:] ^ self.key[32 * r:32 * r + 32] ^ x1d, f"x{i}_{r}")
            x1 = self.reg(m, p[:32], f"y{i}_{r}")
        return x0


def _chosen(lanes):
    from ..rtl.prng import PRNGUnit
    return PRNGUnit(lanes=lanes)


#: name -> (numpy f(seed, index), hardware factory(lanes)).
CANDIDATES = {
    "lowbias32-keyed": (prng.draw, _chosen),
    "speck32-8": (speck32(8), lambda n: SpeckLanes(n, 8)),
    "speck32-12": (speck32(12), lambda n: SpeckLanes(n, 12)),
    "speck32-22": (speck32(22), lambda n: SpeckLanes(n, 22)),
    "threefry2x32-13": (threefry2x32(13), lambda n: ThreefryLanes(n, 13)),
    "philox2x32-10": (philox2x32(10), lambda n: PhiloxLanes(n, 10)),
}


# ---- measurements -------------------------------------------------------------------------

def _bits(words):
    return ((words[:, None] >> np.arange(32, dtype=np.uint32)) & 1).astype(np.int64)


def quality(f, *, n=1 << 20, n_avalanche=1 << 16):
    """Return the quality figures of ``f(seed, index)``: worst avalanche bias over the 32 x 32
    (input bit, output bit) pairs for index flips and for seed flips (pure noise gives about
    ``1.75 / sqrt(n_avalanche)``), and the z-scores / p-values of the bit balance, lag-1 and
    adjacent-seed sign correlations and the byte chi-square over ``n`` draws."""
    from scipy import stats
    rng = np.random.default_rng(5)
    seeds = rng.integers(0, 1 << 32, n_avalanche, dtype=np.uint64).astype(np.uint32)
    index = rng.integers(0, 1 << 32, n_avalanche, dtype=np.uint64).astype(np.uint32)
    base = f(seeds, index)
    worst = {"index": 0.0, "seed": 0.0}
    for b in range(32):
        flip = np.uint32(1 << b)
        for what, (s, i) in (("index", (seeds, index ^ flip)), ("seed", (seeds ^ flip, index))):
            p = _bits(base ^ f(s, i)).mean(axis=0)
            worst[what] = max(worst[what], float(np.abs(p - 0.5).max()))
    idx = np.arange(n, dtype=np.uint32)
    words = f(np.uint32(2024), idx)
    ones = _bits(words).sum(axis=0)
    signs = 1 - 2 * (words >> np.uint32(31)).astype(np.int64)
    grid = f(np.arange(1024, dtype=np.uint32)[:, None], np.arange(n // 1024, dtype=np.uint32))
    gs = 1 - 2 * (grid >> np.uint32(31)).astype(np.int64)
    return {
        "avalanche_index": round(worst["index"], 4),
        "avalanche_seed": round(worst["seed"], 4),
        "bit_balance_max_z": round(float(np.abs(ones - n / 2).max() / np.sqrt(n / 4)), 2),
        "lag1_sign_z": round(float(np.dot(signs[:-1], signs[1:]) / np.sqrt(n)), 2),
        "adjacent_seed_sign_z": round(float((gs[:-1] * gs[1:]).sum() / np.sqrt(gs[1:].size)),
                                      2),
        "byte_chi2_p": _p(stats.chisquare(np.bincount(words.view(np.uint8), minlength=256)).pvalue),
    }


def _p(value):
    return float(f"{value:.3g}")


def lane_cost(factory, work_dir, *, lanes=(1, 2)):
    """Return ``{"per_lane": ..., "shared": ..., "at": {lanes: counts}}`` from Yosys."""
    from ..platforms.resources import synth_component
    at = {}
    for n in lanes:
        r = synth_component(factory(n), Path(work_dir) / f"l{n}")
        at[n] = {k: r[k] for k in ("lut", "ff", "dsp48e2", "carry", "logic_levels")}
    a, b = at[lanes[0]], at[lanes[1]]
    per = {k: (b[k] - a[k]) / (lanes[1] - lanes[0]) for k in ("lut", "ff", "dsp48e2", "carry")}
    shared = {k: a[k] - lanes[0] * per[k] for k in per}
    return {"per_lane": per, "shared": shared, "logic_levels": max(a["logic_levels"],
                                                                  b["logic_levels"]),
            "at": at}


def check_known_answers():
    """Raise AssertionError unless the candidates reproduce their published vectors."""
    keys = speck32_round_keys((0x0100, 0x0908, 0x1110, 0x1918), 22)     # Speck paper, 32/64
    assert [int(v) for v in speck32_encrypt(np.uint32(0x6574), np.uint32(0x694C), keys)] \
        == [0xA868, 0x42F2]
    for ctr, key, want in (((0, 0), (0, 0), (0x9D1C5EC6, 0x8BD50731)),       # Random123 KAT
                           ((0xFFFFFFFF,) * 2, (0xFFFFFFFF,) * 2, (0xFD36D048, 0x2D17272C)),
                           ((0x243F6A88, 0x85A308D3), (0x13198A2E, 0x03707344),
                            (0xBA3E4725, 0xF27D669E))):
        assert [int(v) for v in threefry2x32_block(ctr, key, 13)] == list(want)
    for ctr, key, want in (((0, 0), 0, (0xFF1DAE59, 0x6CD10DF2)),
                           ((0xFFFFFFFF,) * 2, 0xFFFFFFFF, (0x2C3F628B, 0xAB4FD7AD)),
                           ((0x243F6A88, 0x85A308D3), 0x13198A2E, (0xDD7CE038, 0xF62A4C12))):
        assert [int(v) for v in philox2x32_block(ctr, key, 10)] == list(want)


def main(argv=None):
    parser = argparse.ArgumentParser(description="cost and quality of PRNG candidates")
    parser.add_argument("--no-synth", action="store_true", help="quality figures only")
    parser.add_argument("--work-dir", default="build/prng-candidates")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    check_known_answers()
    report = {}
    for name, (f, factory) in CANDIDATES.items():
        entry = {"quality": quality(f)}
        if not args.no_synth:
            entry["cost"] = lane_cost(factory, Path(args.work_dir) / name)
        report[name] = entry
        q = entry["quality"]
        line = (f"{name:17s} avalanche idx {q['avalanche_index']:.4f} seed "
                f"{q['avalanche_seed']:.4f}  bits z {q['bit_balance_max_z']:5.2f}  lag1 z "
                f"{q['lag1_sign_z']:6.2f}  adj-seed z {q['adjacent_seed_sign_z']:6.2f}  "
                f"bytes p {q['byte_chi2_p']:.3g}")
        if "cost" in entry:
            c = entry["cost"]
            p, s = c["per_lane"], c["shared"]
            line += (f"  | per lane {p['lut']:.0f} LUT {p['ff']:.0f} FF {p['dsp48e2']:.0f} DSP"
                     f"; shared {s['lut']:.0f} LUT {s['ff']:.0f} FF {s['dsp48e2']:.0f} DSP; "
                     f"{c['logic_levels']} levels")
        print(line, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
