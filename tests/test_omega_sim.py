# amaranth: UnusedElaboratable=no
"""OmegaNetwork (``rtl/omega.py``) in the Amaranth simulator against golden's routing rule
(:func:`ttrain.golden.isa.omega_pass`).

Every cycle a new random set of messages enters (random sources, destinations with repeats,
random payloads); :attr:`latency` cycles later the forward network's outputs must be exactly
the messages golden delivers, each at its destination. The delivered messages then go back
through the inverse network (tag = source), entering where they arrived, and every one of them
must come out at its source. Also Lawrie's strided vectors in one pass, and the constructor's
checks.
"""

import numpy as np
import pytest
from amaranth.sim import Simulator

from ttrain.golden.isa import omega_pass
from ttrain.rtl.omega import OmegaNetwork


def _run(dut, waves):
    """Drive one set of messages per cycle (``[(port, tag, data), ...]``); return, per set,
    the messages out ``latency`` cycles later as ``{port: (tag, data)}``."""
    out = []

    async def tb(ctx):
        for cycle in range(len(waves) + dut.latency):
            for x in range(dut.ports):
                ctx.set(dut.i[x].valid, 0)
            if cycle < len(waves):
                for port, tag, word in waves[cycle]:
                    ctx.set(dut.i[port].valid, 1)
                    ctx.set(dut.i[port].tag, tag)
                    ctx.set(dut.i[port].data, word)
            await ctx.delay(1e-9)
            if cycle >= dut.latency:
                out.append({x: (ctx.get(dut.o[x].tag), ctx.get(dut.o[x].data))
                            for x in range(dut.ports) if ctx.get(dut.o[x].valid)})
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    sim.run()
    return out


@pytest.mark.parametrize("ports, every", [(8, 1), (16, 2), (32, 3)])
def test_random_sets_follow_golden_and_come_back(ports, every):
    rng = np.random.default_rng(ports)
    width = 16
    waves, want = [], []
    for _ in range(40):
        k = int(rng.integers(0, ports + 1))
        src = rng.choice(ports, k, replace=False)
        if rng.random() < 0.5:                       # a strided vector from a random base
            dst = (int(rng.integers(0, ports)) + int(rng.integers(1, ports)) * src) % ports
        else:
            dst = rng.integers(0, ports, k)
        # the payload carries its source (low bits) for the way back, and random bits
        words = (rng.integers(0, 1 << (width - 5), k) << 5) | src
        waves.append([(int(s), int(d), int(w)) for s, d, w in zip(src, dst, words)])
        ok = omega_pass(src, dst, ports)
        want.append({int(d): (int(d), int(w)) for s, d, w, o in zip(src, dst, words, ok) if o})
    fwd = OmegaNetwork(ports, width, register_every=every)
    got = _run(fwd, waves)
    assert got == want
    # the way back: each delivered message enters the inverse network at the output it
    # reached, tagged with its source; all of them arrive, each at its source
    back_waves, back_want = [], []
    for wave, arrived in zip(waves, got):
        back_waves.append([(d, w & 31, w) for d, (_, w) in arrived.items()])
        back_want.append({w & 31: (w & 31, w) for d, (_, w) in arrived.items()})
    inv = OmegaNetwork(ports, width, inverse=True, register_every=every)
    assert _run(inv, back_waves) == back_want


def test_odd_strides_and_shifts_pass_whole():
    ports = 16
    lanes = np.arange(ports)
    waves = [[(int(s), int((base + stride * s) % ports), int(s)) for s in lanes]
             for stride in (1, 3, 5, 7, 9, 15) for base in (0, 5)]
    got = _run(OmegaNetwork(ports, 4), waves)
    assert all(len(g) == ports for g in got)
    assert all(omega_pass([s for s, _, _ in w], [d for _, d, _ in w], ports).all()
               for w in waves)


@pytest.mark.parametrize("kw, msg", [({"ports": 12, "width": 8}, "power of two"),
                                     ({"ports": 1, "width": 8}, "power of two"),
                                     ({"ports": 8, "width": 0}, "width"),
                                     ({"ports": 8, "width": 8, "register_every": 0},
                                      "register_every")])
def test_constructor_checks(kw, msg):
    with pytest.raises(ValueError, match=msg):
        OmegaNetwork(**kw)
