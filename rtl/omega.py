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

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

__all__ = ["OmegaNetwork", "OmegaReadPort", "OmegaWritePort", "omega_message",
           "omega_request_layout"]


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


def omega_request_layout(lanes, addr_bits, write=False, tag_bits=0):
    """A vector request of :class:`OmegaReadPort` (one word address per lane and the lanes'
    mask) or, with ``write``, of :class:`OmegaWritePort` (a word per lane too); with
    ``tag_bits``, a tag the request's messages carry to the banks (``bank[b].tag``: e.g. the
    store, when one port serves several)."""
    fields = {"addr": data.ArrayLayout(addr_bits, lanes), "mask": lanes}
    if write:
        fields["data"] = data.ArrayLayout(32, lanes)
    if tag_bits:
        fields["tag"] = tag_bits
    return data.StructLayout(fields)


class _OmegaPort(wiring.Component):
    """The slots and the two networks of :class:`OmegaReadPort` and :class:`OmegaWritePort`
    (their docstrings say how they work)."""

    def __init__(self, lanes, addr_bits, *, write, banks=None, skew=False, register_every=2,
                 latency=1, tag_bits=0, tickets=None):
        kind = type(self).__name__
        if isinstance(tag_bits, bool) or not isinstance(tag_bits, int) or tag_bits < 0:
            raise ValueError(f"{kind}: tag_bits must be an int >= 0, not {tag_bits!r}")
        self._tag_bits = tag_bits
        banks = lanes if banks is None else banks
        for what, v in (("lanes", lanes), ("banks", banks)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 2 or v & (v - 1):
                raise ValueError(f"{kind}: {what} must be a power of two >= 2, not {v!r}")
        nb = exact_log2(banks)
        if isinstance(addr_bits, bool) or not isinstance(addr_bits, int) or addr_bits <= nb:
            raise ValueError(f"{kind}: addr_bits must be an int above log2 banks = {nb}, not "
                             f"{addr_bits!r}")
        if skew not in (False, True, "xor"):
            raise ValueError(f"{kind}: skew must be False, True or 'xor', not {skew!r}")
        if isinstance(latency, bool) or not isinstance(latency, int) or latency < 1:
            raise ValueError(f"{kind}: latency must be an int >= 1 (cycles from a grant to the "
                             f"bank's word), not {latency!r}")
        self._latency = latency
        if tickets is not None and (isinstance(tickets, bool) or not isinstance(tickets, int)
                                    or tickets < 1):
            raise ValueError(f"{kind}: tickets must be an int >= 1, not {tickets!r}")
        self._tickets = tickets
        N = max(lanes, banks)                    # the networks' ports
        self._lanes, self._banks, self._N = lanes, banks, N
        self._nb, self._n = nb, exact_log2(N)
        self._abits, self._skew = addr_bits, skew
        self._write = bool(write)
        # requests carry the row, the lane (and a write's word); the return network a read's
        # word, or a write's acknowledgement
        self._fwd = OmegaNetwork(N, addr_bits - nb + self._n + (32 if write else 0) + tag_bits,
                                 register_every=register_every)
        self._inv = OmegaNetwork(N, 1 if write else 32, inverse=True,
                                 register_every=register_every)
        bank = {"valid": 1, "row": addr_bits - nb}
        members = {"i": In(stream.Signature(omega_request_layout(lanes, addr_bits, write,
                                                                 tag_bits)))}
        if tag_bits:
            bank["tag"] = tag_bits
        if write:
            bank["data"] = 32
            members["o"] = Out(stream.Signature(unsigned(1)))
        else:
            members["o"] = Out(stream.Signature(data.ArrayLayout(32, lanes)))
        members["bank"] = Out(data.ArrayLayout(data.StructLayout(bank), banks))
        members["grant"] = In(banks)
        if not write:
            members["rdata"] = In(data.ArrayLayout(32, banks))
        super().__init__(members)

    lanes = property(lambda self: self._lanes, doc="Lanes (words per request).")
    banks = property(lambda self: self._banks, doc="Banks of the store.")
    tickets = property(lambda self: self._tickets or 2 * self.round_trip,
                       doc="Vectors accepted and not yet out, at most (default two round "
                           "trips): a complete vector waits in its ticket, not in a slot.")
    round_trip = property(lambda self: 1 + self._fwd.latency + self._latency
                          + self._inv.latency,
                          doc="Cycles from a lane's message sent to its answer back (the "
                              "input register, the request network, the bank, the return "
                              "network); also the number of slots.")

    def _bank_row(self, addr):
        """Word ``addr``'s bank and row (:func:`ttrain.golden.isa.bank_of`)."""
        nb = self._nb
        low = addr[:nb]
        if self._skew == "xor":
            bank = low ^ addr[nb:2 * nb]
        elif self._skew:
            bank = (low + addr[nb:2 * nb])[:nb]
        else:
            bank = low
        return bank, addr[nb:]

    def elaborate(self, platform):
        m = Module()
        L, NB, n, nb = self._lanes, self._banks, self._n, self._nb
        A, R, W, T = self._abits, self.round_trip, self._write, self._tag_bits
        RB = A - nb                              # row bits
        m.submodules.fwd = fwd = self._fwd
        m.submodules.inv = inv = self._inv
        K = self.tickets
        # per slot: the lanes' addresses (and a write's words, the tag)
        m.submodules.addrs = addrs = memory.Memory(shape=unsigned(L * (A + 32 * W) + T),
                                                   depth=R, init=[])
        a_wr = addrs.write_port()
        a_rd = addrs.read_port(domain="comb")

        cur = Signal(range(R), name="slot")
        nxt = Signal(range(R), name="next_slot")
        m.d.comb += nxt.eq(Mux(cur == R - 1, 0, cur + 1))
        m.d.sync += cur.eq(nxt)
        busy = Signal(R, name="busy")
        pend = [Signal(L, name=f"pending{s}") for s in range(R)]
        tk = [Signal(range(K), name=f"ticket{s}") for s in range(R)]

        # tickets: the vectors accepted and not yet out, in order (head .. tail)
        head = Signal(range(K), name="head")
        tail = Signal(range(K), name="tail")
        count = Signal(range(K + 1), name="count")
        tdone = Signal(K, name="tdone")         # the ticket's vector is complete

        # this cycle's slot: the answers coming home, what it still waits for
        back = Signal(L, name="back")
        m.d.comb += back.eq(Cat(*[inv.o[x].valid for x in range(L)]))
        slot_busy = Signal(name="slot_busy")
        slot_pend = Signal(L, name="slot_pend")
        slot_tk = Signal(range(K), name="slot_ticket")
        # the next slot's pending mask, selected a cycle ahead (only a slot's own turn changes
        # it): the select is off the path through the completion into the ticket count
        m.d.sync += slot_pend.eq(Array(pend)[nxt])
        m.d.comb += [slot_busy.eq(busy.bit_select(cur, 1)), slot_tk.eq(Array(tk)[cur])]
        left = Signal(L, name="left")
        m.d.comb += left.eq(slot_pend & ~back)
        # the slot's last pass returns now: its vector waits in its ticket and the slot is
        # free for the next vector in this same turn
        complete = Signal(name="complete")
        sending = Signal(name="sending")        # the slot sends its waiting lanes again
        m.d.comb += [complete.eq(slot_busy & (left == 0)), sending.eq(slot_busy & ~complete)]
        accept = Signal(name="accept")
        m.d.comb += [self.i.ready.eq(~sending & (count != K)),
                     accept.eq(self.i.valid & self.i.ready)]
        req = self.i.payload
        incoming = Cat(req.addr.as_value(), *([req.data.as_value()] if W else []),
                       *([req.tag] if T else []))
        m.d.comb += [a_rd.addr.eq(cur), a_wr.addr.eq(cur), a_wr.en.eq(accept),
                     a_wr.data.eq(incoming)]

        # the pass of this cycle: the slot's lanes still waiting, or the request accepted now
        send = Signal(L, name="send")
        src = Signal(len(incoming), name="send_req")
        m.d.comb += [send.eq(Mux(sending, left, Mux(accept, req.mask, 0))),
                     src.eq(Mux(sending, a_rd.data, incoming))]
        for x in range(L):
            bank, row = self._bank_row(src[x * A:(x + 1) * A])
            word = [src[L * A + 32 * x:L * A + 32 * (x + 1)]] if W else []
            # registered into the network: the slot's completion (a reduction over the lanes)
            # and the send select end here, not in the network's first stages (13 logic
            # levels at 256 lanes without it; docs/wide-engine.md)
            m.d.sync += [fwd.i[x].valid.eq(send[x]), fwd.i[x].tag.eq(bank),
                         fwd.i[x].data.eq(Cat(row, Const(x, n), *word,
                                              *([src[L * (A + 32 * W):]] if T else [])))]

        # the banks: a granted request is answered ``latency`` cycles on, tagged with its lane
        for b in range(NB):
            m.d.comb += [self.bank[b].valid.eq(fwd.o[b].valid),
                         self.bank[b].row.eq(fwd.o[b].data[:RB])]
            if W:
                m.d.comb += self.bank[b].data.eq(fwd.o[b].data[RB + n:RB + n + 32])
            if T:
                m.d.comb += self.bank[b].tag.eq(fwd.o[b].data[RB + n + 32 * W:])
            ret_valid, ret_lane = fwd.o[b].valid & self.grant[b], fwd.o[b].data[RB:RB + n]
            for j in range(self._latency):       # the bank's latency: the lane waits beside
                v = Signal(name=f"ret_valid{b}_{j}")
                lane = Signal(n, name=f"ret_lane{b}_{j}")
                m.d.sync += [v.eq(ret_valid), lane.eq(ret_lane)]
                ret_valid, ret_lane = v, lane
            m.d.comb += [inv.i[b].valid.eq(ret_valid), inv.i[b].tag.eq(ret_lane),
                         inv.i[b].data.eq(1 if W else self.rdata[b])]

        # out in order: the head ticket once complete
        leave = Signal(name="leave")
        m.d.comb += [self.o.valid.eq((count != 0) & tdone.bit_select(head, 1)),
                     leave.eq(self.o.valid & self.o.ready)]

        def wrap(x):
            return Mux(x == K - 1, 0, x + 1)
        with m.If(accept):
            m.d.sync += tail.eq(wrap(tail))
        with m.If(leave):
            m.d.sync += head.eq(wrap(head))
        m.d.sync += count.eq(count + accept - leave)
        for k in range(K):
            with m.If(accept & (tail == k)):
                m.d.sync += tdone[k].eq(req.mask == 0)
            with m.Elif(complete & (slot_tk == k)):
                m.d.sync += tdone[k].eq(1)
            with m.Elif(leave & (head == k)):
                m.d.sync += tdone[k].eq(0)
        if not W:
            # a read's words, per ticket: written as they come home; the lanes not asked for
            # read 0 (the ticket's mask)
            m.submodules.words = words = memory.Memory(shape=unsigned(L * 32), depth=K,
                                                       init=[])
            w_wr = words.write_port(granularity=32)
            w_rd = words.read_port(domain="comb")
            m.submodules.masks = masks = memory.Memory(shape=unsigned(L), depth=K, init=[])
            k_wr = masks.write_port()
            k_rd = masks.read_port(domain="comb")
            m.d.comb += [w_wr.addr.eq(slot_tk), w_wr.en.eq(Mux(slot_busy, back, 0)),
                         w_wr.data.eq(Cat(*[inv.o[x].data for x in range(L)])),
                         w_rd.addr.eq(head),
                         k_wr.addr.eq(tail), k_wr.en.eq(accept), k_wr.data.eq(req.mask),
                         k_rd.addr.eq(head)]
            m.d.comb += [self.o.payload[x].eq(Mux(k_rd.data[x],
                                                  w_rd.data[32 * x:32 * (x + 1)], 0))
                         for x in range(L)]
        for s in range(R):
            with m.If(cur == s):
                with m.If(sending):
                    m.d.sync += pend[s].eq(left)
                with m.Elif(accept):
                    m.d.sync += [pend[s].eq(req.mask), busy[s].eq(req.mask != 0),
                                 tk[s].eq(tail)]
                with m.Elif(complete):
                    m.d.sync += busy[s].eq(0)
        return m


class OmegaReadPort(_OmegaPort):
    """A vector read port of ``lanes`` lanes over ``banks`` banks (default ``lanes``) of one
    store through a request :class:`OmegaNetwork` and its inverse for the data, both of
    ``max(lanes, banks)`` ports: the route a wide engine's operand fetchers take to the banks
    (issue 15; docs/wide-engine.md, ninth session).

    Word ``a`` is row ``a >> log2 banks`` of bank ``a % banks`` (``skew=True``: bank ``(a +
    (a >> log2 banks)) % banks``, the engine's skew; ``skew="xor"``: ``(a ^ (a >> log2
    banks)) % banks``; :func:`ttrain.golden.isa.bank_of`). A request (a vector of
    addresses and a mask) enters one of ``round_trip`` slots; every cycle the slot whose turn
    it is (slot ``t % round_trip``) sends the lanes it still waits for through the request
    network, each message tagged with its bank and carrying its row and its lane. A message
    that reaches its bank and is granted there (``grant``: other clients of the bank may hold
    it) reads the bank; the word goes home through the inverse network, tagged with the lane,
    and arrives :attr:`round_trip` cycles after it was sent, exactly when the slot's turn comes
    again. A lane whose word did not arrive (dropped in the network or not granted) is sent
    again then. So, with every bank granted, a vector takes its
    :func:`~ttrain.golden.isa.omega_passes` turns of ``round_trip`` cycles, and up to
    ``round_trip`` vectors are in flight, one turn each per ``round_trip`` cycles: the network
    carries one pass a cycle. A slot is free in the turn its vector's last pass returns; the
    vector then waits in one of :attr:`tickets` entries and vectors leave in the order they
    came (masked lanes read 0); :func:`ttrain.golden.isa.omega_read_schedule` is the
    cycle-exact model.

    The slots' addresses (``round_trip`` deep) and the tickets' words and masks
    (:attr:`tickets` deep) are small memories (asynchronous reads: LUT RAM on the U50), the
    pending masks registers.

    Ports
    -----
    i : ``In(stream.Signature(omega_request_layout(lanes, addr_bits, tag_bits=...)))``
        Read requests.
    o : ``Out(stream.Signature(ArrayLayout(32, lanes)))``
        The words, in request order.
    bank : ``Out(ArrayLayout(StructLayout({"valid": 1, "row": row bits}), banks))``
        Bank ``b``'s read request this cycle (registered: the request network's outputs;
        with ``tag_bits``, its request's ``tag`` too).
    grant : ``In(banks)``
        Bank ``b`` takes the request this cycle (combinational from the owner's arbiter).
    rdata : ``In(ArrayLayout(32, banks))``
        Bank ``b``'s word, ``latency`` cycles (default 1: a synchronous RAM read) after a
        granted request; :attr:`round_trip` counts them.
    """

    def __init__(self, lanes, addr_bits, *, banks=None, skew=False, register_every=2,
                 latency=1, tag_bits=0, tickets=None):
        super().__init__(lanes, addr_bits, write=False, banks=banks, skew=skew,
                         register_every=register_every, latency=latency, tag_bits=tag_bits,
                         tickets=tickets)


class OmegaWritePort(_OmegaPort):
    """A vector write port of ``lanes`` lanes over ``banks`` banks of one store: the slots and
    networks of :class:`OmegaReadPort`, the request messages carrying each lane's word too
    (``bank[b].data``). A granted request is the bank's write that cycle; its
    acknowledgement comes home through the inverse network, and a lane not acknowledged is
    sent again in the slot's next turn. ``o`` has one transfer per request, in order, when
    all its lanes are written (:func:`ttrain.golden.isa.omega_read_schedule` is the cycle
    model here too).

    Requests in flight at once are not ordered against each other: two of them must not write
    the same word (the engine's C writer never does: a CONTRACT writes each C word once, and
    the next one waits for this one's last acknowledgement). Within a request, lanes write
    distinct words.

    Ports
    -----
    i : ``In(stream.Signature(omega_request_layout(lanes, addr_bits, write=True)))``
        Write requests.
    o : ``Out(stream.Signature(1))``
        A request's lanes all written (in request order; the payload is always 1).
    bank : ``Out(ArrayLayout(StructLayout({"valid": 1, "row": row bits, "data": 32}), banks))``
        Bank ``b``'s write request this cycle (with ``tag_bits``, its request's ``tag`` too).
    grant : ``In(banks)``
        Bank ``b`` writes it this cycle.
    """

    def __init__(self, lanes, addr_bits, *, banks=None, skew=False, register_every=2,
                 latency=1, tag_bits=0, tickets=None):
        super().__init__(lanes, addr_bits, write=True, banks=banks, skew=skew,
                         register_every=register_every, latency=latency, tag_bits=tag_bits,
                         tickets=tickets)
