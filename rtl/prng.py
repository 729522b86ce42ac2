"""PRNG unit: ``P`` lanes of the counter-based generator of :mod:`ttrain.golden.prng`.

A command ``(seed, base, count)`` asks for ``count`` beats; lane ``i`` of beat ``k`` is
``draw(seed, (base + k*P + i) mod 2**32)``, exactly :func:`ttrain.golden.prng.stream_beats`.
Consumers (perturb/restore a region by ``+-sigma*u``, accumulate ``g += c*u``, sparse and
dropout masks, random signs) take the words and derive their draw (bit 31 for a Rademacher
sign, ``word < threshold`` for a Bernoulli draw) as the golden does.

Micro-architecture::

    cmd ──► generator ──► key pipeline (shared, 7 stages) ──► P lane pipelines (7 stages) ──► o
            seed, index     k0 = mix32(seed + GAMMA)          x = c + i; x ^= x>>16; x *= A;
            left, active    c  = index + k0, k1 = rotl(k0,16) x ^= x>>15 ^ k1; x *= B; x ^= x>>15

The generator holds the current command and emits one beat descriptor ``(seed, index, last)``
per cycle, ``index`` stepping by ``P``; it takes the next command in the cycle its last beat
leaves, so commands run back to back. The seed's key words are computed once per beat in a
shared pipeline (two multipliers, whatever ``P``); each lane then needs one 32-bit adder with
its constant lane number, two constant multipliers (DSP48E2) and three xor-shift layers. Every
multiplier is followed by two registers (the DSP48E2's M and P registers, for Vivado to fold).

Back-pressure stalls the whole pipeline: ``en = ~o.valid | o.ready`` enables every register
(there is no skid buffer, so a stalled beat keeps its payload and ``o.valid`` never depends
on ``o.ready``). ``cmd.ready = en & (idle | last beat of the current command)``.

Latency :attr:`latency` = 15 cycles from the cycle a command is accepted to the cycle its first
beat is valid on ``o`` (no stalls); then one beat per cycle, also across back-to-back
commands. A command with ``count = 0`` is accepted and emits nothing (it costs one cycle).
"""

from amaranth import Cat, Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..golden.prng import GAMMA, MIX_MULTIPLIERS, MIX_SHIFTS

__all__ = ["PRNGUnit", "CommandLayout", "MAX_LANES"]

#: Most lanes a unit may have (the widest datapath planned).
MAX_LANES = 256


class CommandLayout(data.Struct):
    """One PRNG command: ``count`` beats from element ``base`` of stream ``seed``.

    ``seed`` is the least significant field (bits 0..31), then ``base`` (32..63), then
    ``count`` (64..95).
    """
    seed: 32
    base: 32
    count: 32


def beat_layout(lanes):
    """Return the output payload layout: ``data`` (``lanes`` uint32 words, lane 0 in the
    least significant bits) and ``last`` (the command's final beat)."""
    return data.StructLayout({"data": data.ArrayLayout(32, lanes), "last": 1})


class PRNGUnit(wiring.Component):
    """``lanes`` draws per cycle of :func:`ttrain.golden.prng.draw`, fully pipelined.

    Golden: :func:`ttrain.golden.prng.stream_beats` ``(seed, base, count, lanes)`` per
    command. Latency :attr:`latency` cycles from the accepted command to its first beat, one
    beat per cycle after that and across commands; back-pressure on ``o`` stalls the unit.

    Parameters
    ----------
    lanes : int
        Words per beat, 1 .. :data:`MAX_LANES`.

    Members
    -------
    cmd : ``In(stream.Signature(CommandLayout))``
        Commands ``(seed, base, count)``; ``count`` in beats (0: none).
    o : ``Out(stream.Signature(beat_layout(lanes)))``
        ``data[i]`` of beat ``k`` is ``draw(seed, (base + k * lanes + i) mod 2**32)``;
        ``last`` marks the final beat of a command.
    """

    def __init__(self, *, lanes=8):
        if isinstance(lanes, bool) or not isinstance(lanes, int) \
                or not 1 <= lanes <= MAX_LANES:
            raise ValueError(f"PRNGUnit lanes must be an integer in [1, {MAX_LANES}], not "
                             f"{lanes!r}")
        self._lanes = lanes
        super().__init__({
            "cmd": In(stream.Signature(CommandLayout)),
            "o": Out(stream.Signature(beat_layout(lanes))),
        })

    lanes = property(lambda self: self._lanes, doc="Words per beat.")
    latency = property(lambda self: 15,
                       doc="Cycles from an accepted command to its first valid beat.")

    def elaborate(self, platform):
        m = Module()
        lanes = self._lanes
        mul_a, mul_b = MIX_MULTIPLIERS
        sh0, sh1, sh2 = MIX_SHIFTS

        en = Signal()
        m.d.comb += en.eq(~self.o.valid | self.o.ready)

        def reg(value, name):
            """A register of the pipeline: loads ``value`` whenever ``en``."""
            r = Signal(len(value), name=name, reset_less=True)
            with m.If(en):
                m.d.sync += r.eq(value)
            return r

        def xorshift(x, s):
            return x ^ (x >> s)

        def mul(x, c, name):
            """``x * c mod 2**32`` followed by two registers (DSP48E2 M and P)."""
            return reg(reg((x * c)[:32], f"{name}_m"), f"{name}_p")

        # ---- generator: the current command, one beat descriptor per cycle ----------------
        active = Signal()
        seed = Signal(32, reset_less=True)
        index = Signal(32, reset_less=True)
        left = Signal(32, reset_less=True)
        final = Signal()                         # the beat leaving now is the command's last
        m.d.comb += [
            final.eq(left == 1),
            self.cmd.ready.eq(en & (~active | final)),
        ]
        with m.If(en & active):
            m.d.sync += [index.eq(index + lanes), left.eq(left - 1)]
            with m.If(final):
                m.d.sync += active.eq(0)
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += [seed.eq(self.cmd.p.seed), index.eq(self.cmd.p.base),
                         left.eq(self.cmd.p.count), active.eq(self.cmd.p.count != 0)]

        # ---- valid bits of the 14 stages after the generator --------------------------------
        stages = 14
        valid = Signal(stages)
        with m.If(en):
            m.d.sync += valid.eq(Cat(active, valid[:-1]))
        m.d.comb += self.o.valid.eq(valid[-1])

        # ---- key pipeline (shared): k0 = mix32(seed + GAMMA); c = index + k0 ---------------
        def carry(value, last, tag):
            return reg(value, f"{tag}_index"), reg(last, f"{tag}_last")

        t = reg(xorshift((seed + GAMMA)[:32], sh0), "k1_t")
        idx, last = carry(index, final, "k1")
        t = mul(t, mul_a, "k2")                              # k2, k3
        for tag in ("k2", "k3"):
            idx, last = carry(idx, last, tag)
        t = reg(xorshift(t, sh1), "k4_t")
        idx, last = carry(idx, last, "k4")
        t = mul(t, mul_b, "k5")                              # k5, k6
        for tag in ("k5", "k6"):
            idx, last = carry(idx, last, tag)
        k0 = xorshift(t, sh2)
        c = reg((idx + k0)[:32], "k7_c")
        k1 = reg(Cat(k0[16:], k0[:16]), "k7_k1")             # rotl(k0, 16)
        last = reg(last, "k7_last")

        # ---- lanes: x = c + i, then the keyed lowbias32 --------------------------------------
        kk = k1                                             # k1 is xored in at stage l4,
        for tag in ("l1", "l2", "l3"):                      # beside the x of stage l3
            kk = reg(kk, f"{tag}_k1")
        for tag in ("l1", "l2", "l3", "l4", "l5", "l6", "l7"):
            last = reg(last, f"{tag}_last")
        words = []
        for i in range(lanes):
            x = reg(xorshift((c + i)[:32], sh0), f"l1_x{i}")
            x = mul(x, mul_a, f"l2_x{i}")                    # l2, l3
            x = reg(xorshift(x, sh1) ^ kk, f"l4_x{i}")
            x = mul(x, mul_b, f"l5_x{i}")                    # l5, l6
            x = reg(xorshift(x, sh2), f"l7_x{i}")
            words.append(x)
        m.d.comb += [self.o.p.data.as_value().eq(Cat(*words)), self.o.p.last.eq(last)]
        return m
