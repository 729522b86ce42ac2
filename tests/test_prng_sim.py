# amaranth: UnusedElaboratable=no
"""PRNGUnit (``rtl/prng.py``) in the Amaranth simulator against :mod:`ttrain.golden.prng`.

Random commands (zero counts, bases that wrap past ``2**32 - 1``) with random idle cycles on
``cmd`` and random ``o.ready`` stalls; every beat and ``last`` flag is compared with
:func:`~ttrain.golden.prng.stream_beats`, and the stream rules are checked every cycle (an
offered beat stays offered, unchanged, until taken). Also the documented latency, full
throughput across back-to-back commands, and the constructor's checks. Millions of draws run
under Verilator (``tests/test_prng_verilator.py``).
"""

import numpy as np
import pytest
from amaranth.lib import wiring
from amaranth.sim import Simulator

from ttrain.golden.prng import stream_beats
from ttrain.rtl.prng import MAX_LANES, PRNGUnit

M32 = (1 << 32) - 1


def _play(dut, commands, *, p_cmd, p_ready, rng, max_cycles=20000):
    """Run ``commands`` through ``dut``; return (beats, lasts, accept cycles, beat cycles)."""
    out = {"beats": [], "last": [], "accepted": [], "beat_cycles": []}

    async def tb(ctx):
        pending = list(commands)
        offered = None
        held = None                      # (payload, last) of a beat offered and not taken
        for cycle in range(max_cycles):
            if offered is None and pending and rng.random() < p_cmd:
                offered = pending.pop(0)
            ctx.set(dut.cmd.valid, offered is not None)
            if offered is not None:
                seed, base, count = offered
                ctx.set(dut.cmd.p.seed, seed)
                ctx.set(dut.cmd.p.base, base)
                ctx.set(dut.cmd.p.count, count)
            ready = bool(rng.random() < p_ready)
            ctx.set(dut.o.ready, ready)
            valid = ctx.get(dut.o.valid)
            words = ctx.get(dut.o.p.data.as_value())
            last = ctx.get(dut.o.p.last)
            if held is not None:
                assert valid, f"cycle {cycle}: a stalled beat was withdrawn"
                assert (words, last) == held, f"cycle {cycle}: a stalled beat changed"
            held = (words, last) if valid and not ready else None
            if valid and ready:
                out["beats"].append([(words >> (32 * i)) & M32 for i in range(dut.lanes)])
                out["last"].append(bool(last))
                out["beat_cycles"].append(cycle)
            if offered is not None and ctx.get(dut.cmd.ready):
                out["accepted"].append(cycle)
                offered = None
            await ctx.tick()
            if not pending and offered is None and len(out["beats"]) == expected:
                break
        else:
            raise AssertionError(f"{len(out['beats'])} of {expected} beats after {max_cycles} "
                                 f"cycles")

    expected = sum(c for _, _, c in commands)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return out


def _expected(commands, lanes):
    beats, lasts = [], []
    for seed, base, count in commands:
        words = stream_beats(seed, base, count, lanes)
        beats += [[int(w) for w in row] for row in words]
        lasts += [k == count - 1 for k in range(count)]
    return beats, lasts


@pytest.mark.parametrize("lanes", [1, 3, 8])
def test_random_commands_under_random_stalls(lanes):
    rng = np.random.default_rng(lanes)
    commands = []
    for j in range(40):
        seed = int(rng.integers(0, 1 << 32)) if j % 3 else j          # small seeds too
        base = int(rng.integers(0, 1 << 32)) if j % 4 else M32 - int(rng.integers(0, 2 * lanes))
        commands.append((seed, base, int(rng.integers(0, 7)) if j != 5 else 0))
    dut = PRNGUnit(lanes=lanes)
    got = _play(dut, commands, p_cmd=0.6, p_ready=0.6, rng=rng)
    beats, lasts = _expected(commands, lanes)
    assert len(got["beats"]) == len(beats) > 0
    assert got["beats"] == beats
    assert got["last"] == lasts


def test_latency_and_back_to_back_throughput():
    commands = [(7, 100, 3), (8, 0, 1), (9, M32, 4), (10, 5, 0), (11, 6, 2)]
    dut = PRNGUnit(lanes=2)
    got = _play(dut, commands, p_cmd=1.0, p_ready=1.0, rng=np.random.default_rng(0))
    assert got["beat_cycles"][0] - got["accepted"][0] == dut.latency == 15
    # one beat per cycle across every command boundary; the empty command takes one cycle
    first = got["beat_cycles"][0]
    assert got["beat_cycles"] == list(range(first, first + 8)) + [first + 9, first + 10]
    # the next command is taken in the cycle the current one's last beat descriptor leaves
    a0 = got["accepted"][0]
    assert got["accepted"] == [a0, a0 + 3, a0 + 4, a0 + 8, a0 + 9]
    assert got["beats"] == _expected(commands, 2)[0]


def test_constructor_checks_and_signature():
    for bad in (0, MAX_LANES + 1, True, 2.0, "8"):
        with pytest.raises(ValueError, match="lanes must be an integer in"):
            PRNGUnit(lanes=bad)
    dut = PRNGUnit(lanes=4)
    assert dut.lanes == 4
    members = dut.signature.members
    assert members["cmd"].flow == wiring.In and members["o"].flow == wiring.Out
    assert len(dut.cmd.payload.as_value()) == 96
    assert len(dut.o.payload.as_value()) == 4 * 32 + 1
