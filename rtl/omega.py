"""A self-routing Omega network: the candidate route between a wide engine's lanes and its
store banks (issue 15; docs/wide-engine.md, eighth session: "the route from the banks to
the lanes").

``ports = 2**n`` inputs and outputs, ``n`` stages. Each stage is a perfect shuffle (position
``x`` moves to ``x`` rotated left by one bit) and a column of ``ports/2`` 2x2 switches; the
switch at positions ``2j, 2j+1`` sends each message to output ``2j + b``, ``b`` the bit of the
message's tag that the stage reads. The forward network reads the tag's bits most significant
first, so a message with tag ``d`` leaves at output ``d`` (destination-tag routing: a lane's
request reaches the bank it names). The inverse network (``inverse=True``) is the forward
network's stages in reverse order, each a switch reading the tag's bits least significant first
and then the inverse shuffle: a message with tag ``s`` entering at the output a forward message
from input ``s`` reached travels the same links back and leaves at ``s`` (the read data's way
home; a set of messages that passed the forward network passes the inverse one whole).

When both inputs of a switch want the same output, the upper input (the even position) gets
it and the lower message is dropped (its earlier links stay used this cycle); the sender learns
it from what arrives. :func:`ttrain.golden.isa.omega_passes` is the same rule: a set of
messages sent again and again, dropped ones only, takes that many passes.

A register follows every ``register_every`` stages (and the last): a stage is one LUT6 per
bit (a 2:1 select on four control bits), so the default, 2, gives two LUT levels between
registers; the latency is ``ceil(n / register_every)`` cycles. Lawrie (1975): a vector of any
odd stride over interleaved banks, or any cyclic shift, passes in one cycle.
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

__all__ = ["OmegaNetwork", "omega_message"]


def omega_message(ports, width):
    """The layout of one port's message: ``valid``, ``tag`` (``log2 ports`` bits) and ``data``
    (``width`` bits)."""
    return data.StructLayout({"valid": 1, "tag": max(1, exact_log2(ports)), "data": width})


class OmegaNetwork(wiring.Component):
    """An Omega network of ``ports`` (a power of two, >= 2) ports carrying ``width``-bit
    messages.

    Ports
    -----
    i : ``In(ArrayLayout(omega_message(ports, width), ports))``
        One message per input.
    o : ``Out(ArrayLayout(omega_message(ports, width), ports))``
        The messages that got through, each at the output its tag names (forward) or at the
        input its tag names (inverse), :attr:`latency` cycles later; the others are dropped.
    """

    def __init__(self, ports, width, *, inverse=False, register_every=2):
        n = ports.bit_length() - 1 if isinstance(ports, int) and ports >= 2 else None
        if n is None or (1 << n) != ports:
            raise ValueError(f"OmegaNetwork: ports must be a power of two >= 2, not {ports!r}")
        if not isinstance(width, int) or width < 1:
            raise ValueError(f"OmegaNetwork: width must be a positive int, not {width!r}")
        if not isinstance(register_every, int) or register_every < 1:
            raise ValueError(f"OmegaNetwork: register_every must be a positive int, not "
                             f"{register_every!r}")
        self._ports, self._n, self._width = ports, n, width
        self._inverse, self._every = bool(inverse), register_every
        msg = data.ArrayLayout(omega_message(ports, width), ports)
        super().__init__({"i": In(msg), "o": Out(msg)})

    ports = property(lambda self: self._ports, doc="Inputs = outputs.")
    latency = property(lambda self: -(-self._n // self._every),
                       doc="Cycles from a message in to the message out.")

    def _rotl(self, x):
        n = self._n
        return ((x << 1) | (x >> (n - 1))) & (self._ports - 1)

    def _switch(self, m, upper, lower, bit, name):
        """The 2x2 switch: ``(out0, out1)`` of messages ``upper`` and ``lower`` routed by
        their tag bit ``bit``; the upper input wins a contested output."""
        outs = []
        for b in (0, 1):
            o = Signal(omega_message(self._ports, self._width), name=f"{name}_out{b}")
            u_wants = upper.valid & (upper.tag[bit] == b)
            l_wants = lower.valid & (lower.tag[bit] == b)
            with m.If(u_wants):
                m.d.comb += o.eq(upper)
            with m.Elif(l_wants):
                m.d.comb += o.eq(lower)
            with m.Else():
                m.d.comb += o.valid.eq(0)
            outs.append(o)
        return outs

    def elaborate(self, platform):
        m = Module()
        N, n = self._ports, self._n
        cur = [self.i[x] for x in range(N)]
        stages = range(n - 1, -1, -1) if self._inverse else range(n)
        for done, i in enumerate(stages, 1):
            bit = n - 1 - i
            pos = cur                                       # inverse: the switches first
            if not self._inverse:                           # forward: shuffle, then switches
                pos = [None] * N
                for x in range(N):
                    pos[self._rotl(x)] = cur[x]
            nxt = [None] * N
            for j in range(N // 2):
                nxt[2 * j], nxt[2 * j + 1] = self._switch(m, pos[2 * j], pos[2 * j + 1], bit,
                                                          f"omega_st{done}_sw{j}")
            if self._inverse:
                un = [None] * N
                for x in range(N):
                    un[x] = nxt[self._rotl(x)]              # position rotl(x) came from x
                nxt = un
            if done == n:                                   # the last register: the outputs
                for x in range(N):
                    m.d.sync += self.o[x].eq(nxt[x])
                break
            if done % self._every == 0:
                regs = []
                for x in range(N):
                    r = Signal(omega_message(N, self._width), name=f"omega_st{done}_reg{x}")
                    m.d.sync += r.eq(nxt[x])
                    regs.append(r)
                nxt = regs
            cur = nxt
        return m
