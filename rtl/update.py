"""Parameter-update pipeline: SGD on streamed (parameter, gradient) pairs, and a region sweeper.

Golden: :mod:`ttrain.golden.update` (``theta' = fp32_sub(theta, fp32_mul(lr, g))``, ``g' = +0``).

:class:`UpdatePipeline` takes one ``(theta, grad)`` pair per cycle on a valid/ready stream and
returns ``(theta', +0)`` on a valid/ready stream, in order, at full throughput. The FP32 units
(:mod:`ttrain.rtl.fp32`) have no back-pressure, so the pipeline never stops them: a credit
counter admits a pair only while the output FIFO is sure to have room for it when it comes out.

:class:`RegionSweeper` reads a region of a parameter store and the same region of a gradient
store through synchronous memory ports (:class:`amaranth.lib.memory.ReadPort` /
:class:`~amaranth.lib.memory.WritePort` signatures), runs the pairs through an
:class:`UpdatePipeline` and writes the new parameters and zeroed gradients back.

:class:`IntUpdatePipeline` is the integer mode (int8 weights): ``theta' = saturate(theta -
round_shift(lr_mult * g, shift, mode), bits)``, golden :func:`ttrain.golden.update.int_sgd_update`.
"""

from amaranth.hdl import Const, Module, Mux, Signal, signed
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ..golden.numerics import Rounding
from .fp32 import FP32Add, FP32Mul, latency_of

__all__ = ["UpdateOperands", "UpdateResult", "UpdatePipeline", "RegionSweeper",
           "IntUpdatePipeline"]

#: Input pair of the pipeline; ``theta`` is the least significant field (bits 0-31).
UpdateOperands = data.StructLayout({"theta": 32, "grad": 32})
#: Output pair: new parameter (bits 0-31) and the cleared gradient (bits 32-63, always ``+0``).
UpdateResult = data.StructLayout({"theta": 32, "grad": 32})

_SIGN_BIT = 31


def _positive_int(value, what):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TypeError(f"{what} must be a positive integer, not {value!r}")
    return value


class UpdatePipeline(wiring.Component):
    """SGD update of a stream of FP32 (parameter, gradient) pairs.

    Golden: :func:`ttrain.golden.update.sgd_update_bits`. Each accepted pair ``(theta, grad)``
    becomes ``(fp32_sub(theta, fp32_mul(lr, grad)), +0)``, where ``lr`` is the value of the
    ``lr`` port *in the cycle the pair is accepted* (so ``lr`` may change between commands
    while earlier pairs are still in flight; hold it for the pairs of one command).

    Latency :attr:`latency` = 13 cycles from an accepted input to the matching ``o.valid``
    (multiply 6, subtract 6, output FIFO 1) when ``o`` is not stalled; one pair per cycle at
    full throughput as long as ``fifo_depth >= latency + 1`` (the default), otherwise at most
    ``fifo_depth`` pairs per ``latency + 1`` cycles. Order is kept.

    Back-pressure: the FP units cannot stall, so every accepted pair must find a FIFO slot
    ``latency`` cycles later whatever ``o.ready`` does meanwhile. A credit counter holds the
    number of pairs accepted but not yet delivered on ``o`` (in the units or in the FIFO);
    ``i.ready`` is high while it is below ``fifo_depth``. ``i.ready`` depends only on that
    register (not on ``i.valid`` or ``o.ready`` in the same cycle); ``o.valid`` is the FIFO's
    non-empty flag.

    Parameters
    ----------
    fifo_depth : int, optional
        Output FIFO entries (default ``latency + 1`` = 14, the least for full throughput).

    Members
    -------
    i : ``In(stream.Signature(UpdateOperands))``
        Parameter/gradient pairs (``theta`` in bits 0-31).
    lr : ``In(32)``
        Learning rate (FP32 bits), sampled with every accepted pair.
    o : ``Out(stream.Signature(UpdateResult))``
        New parameter (bits 0-31) and ``+0`` for the gradient (bits 32-63).
    """

    def __init__(self, *, fifo_depth=None):
        self._mul_latency = latency_of(FP32Mul)
        latency = self._mul_latency + latency_of(FP32Add) + 1
        if fifo_depth is None:
            fifo_depth = latency + 1
        self._fifo_depth = _positive_int(fifo_depth, "UpdatePipeline fifo_depth")
        self._latency = latency
        super().__init__({
            "i": In(stream.Signature(UpdateOperands)),
            "lr": In(32),
            "o": Out(stream.Signature(UpdateResult)),
        })

    @property
    def latency(self):
        """Cycles from an accepted pair to its result on ``o`` (no stall on ``o``)."""
        return self._latency

    @property
    def fifo_depth(self):
        """Output FIFO entries, which is also the most pairs in flight."""
        return self._fifo_depth

    def elaborate(self, platform):
        # i --(accept)--> FP32Mul(lr, grad) --6--> FP32Add(theta, -product) --6--> SyncFIFO --> o
        #                   theta delayed 6 cycles ------^
        # credits = pairs accepted and not yet delivered on o; accept only while credits <
        # fifo_depth, so the FIFO can always absorb what the (unstallable) units deliver.
        m = Module()
        m.submodules.mul = mul = FP32Mul()
        m.submodules.add = add = FP32Add()
        m.submodules.fifo = out_fifo = fifo.SyncFIFO(width=32, depth=self._fifo_depth)

        credits = Signal(range(self._fifo_depth + 1))
        accept = Signal()
        deliver = Signal()
        m.d.comb += [
            self.i.ready.eq(credits < self._fifo_depth),
            accept.eq(self.i.valid & self.i.ready),
            deliver.eq(self.o.valid & self.o.ready),
        ]
        with m.If(accept & ~deliver):
            m.d.sync += credits.eq(credits + 1)
        with m.Elif(deliver & ~accept):
            m.d.sync += credits.eq(credits - 1)

        # Stage s0 -> multiplier: lr * grad.
        m.d.comb += [
            mul.i.valid.eq(accept),
            mul.i.payload.a.eq(self.lr),
            mul.i.payload.b.eq(self.i.payload.grad),
        ]
        # theta rides alongside the multiplier (data registers need no reset).
        theta = self.i.payload.theta
        for k in range(1, mul.latency + 1):
            nxt = Signal(32, name=f"m{k}_theta", reset_less=True)
            m.d.sync += nxt.eq(theta)
            theta = nxt

        # Subtract = add with the product's sign flipped (exact; a NaN stays a NaN and the
        # adder canonicalizes it).
        product = mul.o.payload
        m.d.comb += [
            add.i.valid.eq(mul.o.valid),
            add.i.payload.a.eq(theta),
            add.i.payload.b.eq(product ^ (1 << _SIGN_BIT)),
        ]

        m.d.comb += [
            out_fifo.w_en.eq(add.o.valid),
            out_fifo.w_data.eq(add.o.payload),
            self.o.valid.eq(out_fifo.r_rdy),
            self.o.payload.theta.eq(out_fifo.r_data),
            self.o.payload.grad.eq(0),
            out_fifo.r_en.eq(self.o.ready),
        ]
        return m


class RegionSweeper(wiring.Component):
    """Update one region of a parameter store and clear the same region of a gradient store.

    Golden: :func:`ttrain.golden.update.sweep_region`. On ``start`` (while not ``busy``) it
    latches ``base``, ``length`` and ``lr``; if ``base + length`` exceeds either store it
    pulses ``done`` with ``error`` high and writes nothing; if ``length`` is 0 it pulses
    ``done`` at once; otherwise it raises ``busy``, reads words ``base .. base + length - 1``
    of both stores in order, writes ``sgd_update(theta, g, lr)`` back to the parameter store
    and ``+0`` to the gradient store at the same addresses, then drops ``busy`` and pulses
    ``done`` for one cycle. ``error`` holds until the next ``start``.

    Timing: one word per cycle; a region of ``n`` words takes ``n + latency + 2`` cycles from
    the ``start`` cycle to ``done`` (``latency`` of :class:`UpdatePipeline`, plus the memory
    read cycle and the start cycle). Reads run ahead of writes and addresses only increase,
    so no word is read after it has been written.

    The stores are attached through ports with the signatures of
    :class:`amaranth.lib.memory.ReadPort` (synchronous: ``data`` shows the word addressed in
    the last cycle with ``en`` high, and holds while ``en`` is low) and
    :class:`~amaranth.lib.memory.WritePort` (``en`` is one bit: whole-word writes), so a
    parent connects them with ``wiring.connect(m, mem.read_port(), sweeper.param_r)`` etc.
    The sweeper holds ``en`` low on a read port while the pipeline stalls, so the read data
    stays put (a one-entry skid in the memory's own output register).

    Parameters
    ----------
    param_depth : int
        Words in the parameter store.
    grad_depth : int, optional
        Words in the gradient store (default: ``param_depth``).
    fifo_depth : int, optional
        Passed to :class:`UpdatePipeline`.

    Members
    -------
    start : ``In(1)``
        Begin a sweep (ignored while ``busy``).
    base, length : ``In(range(max_depth + 1))`` each
        Region, sampled with ``start``.
    lr : ``In(32)``
        Learning rate (FP32 bits), sampled with ``start``.
    busy, done, error : ``Out(1)``
        ``busy`` while sweeping; ``done`` one-cycle pulse at the end; ``error`` region out of
        range (held until the next ``start``).
    param_r, grad_r : ``In(memory.ReadPort.Signature(addr_width=..., shape=32))``
        Read ports of the stores (driven by the sweeper: ``addr``, ``en``).
    param_w, grad_w : ``In(memory.WritePort.Signature(addr_width=..., shape=32))``
        Write ports of the stores.
    """

    def __init__(self, *, param_depth, grad_depth=None, fifo_depth=None):
        self._param_depth = _positive_int(param_depth, "RegionSweeper param_depth")
        self._grad_depth = (self._param_depth if grad_depth is None
                            else _positive_int(grad_depth, "RegionSweeper grad_depth"))
        self._pipe = UpdatePipeline(fifo_depth=fifo_depth)
        self._pipe._MustUse__silence = True     # parameters only; elaborate() builds its own
        region = range(max(self._param_depth, self._grad_depth) + 1)
        pa, ga = ceil_log2(self._param_depth), ceil_log2(self._grad_depth)
        super().__init__({
            "start": In(1), "base": In(region), "length": In(region), "lr": In(32),
            "busy": Out(1), "done": Out(1), "error": Out(1),
            "param_r": In(memory.ReadPort.Signature(addr_width=pa, shape=32)),
            "param_w": In(memory.WritePort.Signature(addr_width=pa, shape=32)),
            "grad_r": In(memory.ReadPort.Signature(addr_width=ga, shape=32)),
            "grad_w": In(memory.WritePort.Signature(addr_width=ga, shape=32)),
        })

    param_depth = property(lambda self: self._param_depth, doc="Words in the parameter store.")
    grad_depth = property(lambda self: self._grad_depth, doc="Words in the gradient store.")

    @property
    def latency(self):
        """Latency of the inner :class:`UpdatePipeline`."""
        return self._pipe.latency

    def cycles(self, length):
        """Return the cycles from ``start`` to ``done`` for a valid region of ``length`` words."""
        if isinstance(length, bool) or not isinstance(length, int) or length < 0:
            raise ValueError(f"length must be a non-negative integer, not {length!r}")
        return 1 if length == 0 else length + self.latency + 2

    def elaborate(self, platform):
        # Three cursors: r_* issues reads (one per cycle while the pipeline takes pairs),
        # s1_valid marks the memory output register as holding a pair not yet accepted, w_*
        # writes results as they come out (the pipeline output is never stalled here).
        m = Module()
        m.submodules.pipe = pipe = UpdatePipeline(fifo_depth=self._pipe.fifo_depth)
        limit = min(self._param_depth, self._grad_depth)
        width = len(self.base)

        lr = Signal(32)
        r_addr = Signal(width)
        r_left = Signal(width)
        w_addr = Signal(width)
        w_left = Signal(width)
        s1_valid = Signal()
        end = Signal(width + 1)
        m.d.comb += end.eq(self.base + self.length)

        m.d.sync += self.done.eq(0)
        with m.If(self.start & ~self.busy):
            m.d.sync += [self.error.eq(0), lr.eq(self.lr), r_addr.eq(self.base),
                         w_addr.eq(self.base), r_left.eq(self.length),
                         w_left.eq(self.length)]
            with m.If(end > limit):
                m.d.sync += [self.error.eq(1), self.done.eq(1)]
            with m.Elif(self.length == 0):
                m.d.sync += self.done.eq(1)
            with m.Else():
                m.d.sync += self.busy.eq(1)

        # Read side: advance the memory output register when it is empty or being accepted.
        advance = Signal()
        issue = Signal()
        m.d.comb += [
            advance.eq(~s1_valid | pipe.i.ready),
            issue.eq(self.busy & (r_left != 0) & advance),
            self.param_r.en.eq(advance),
            self.grad_r.en.eq(advance),
            self.param_r.addr.eq(r_addr),
            self.grad_r.addr.eq(r_addr),
            pipe.i.valid.eq(s1_valid),
            pipe.i.payload.theta.eq(self.param_r.data),
            pipe.i.payload.grad.eq(self.grad_r.data),
            pipe.lr.eq(lr),
        ]
        with m.If(advance):
            m.d.sync += s1_valid.eq(issue)
        with m.If(issue):
            m.d.sync += [r_addr.eq(r_addr + 1), r_left.eq(r_left - 1)]

        # Write side.
        m.d.comb += [
            pipe.o.ready.eq(1),
            self.param_w.en.eq(pipe.o.valid),
            self.param_w.addr.eq(w_addr),
            self.param_w.data.eq(pipe.o.payload.theta),
            self.grad_w.en.eq(pipe.o.valid),
            self.grad_w.addr.eq(w_addr),
            self.grad_w.data.eq(pipe.o.payload.grad),
        ]
        with m.If(pipe.o.valid):
            m.d.sync += [w_addr.eq(w_addr + 1), w_left.eq(w_left - 1)]
            with m.If(w_left == 1):
                m.d.sync += [self.busy.eq(0), self.done.eq(1)]
        return m


def _or_of(terms):
    out = Const(0, 1)
    for t in terms:
        out = out | t
    return out


class IntUpdatePipeline(wiring.Component):
    """Integer SGD update: ``theta' = saturate(theta - round_shift(lr_mult * g, shift), bits)``.

    Golden: :func:`ttrain.golden.update.int_sgd_update` with the same ``bits`` and ``mode``.
    The learning rate is the fixed-point value ``lr_mult / 2**shift``; both ports are sampled
    with every accepted pair. The cleared gradient comes out as 0.

    Latency :attr:`latency` = 6 cycles, one pair per cycle. Back-pressure stalls the whole
    pipeline (no FP units inside): ``i.ready = ~o.valid | o.ready``.

    Stages: ``s1`` product ``g * lr_mult`` (``grad_bits + mult_bits`` bits, signed); ``s2``
    ``q = product >> shift`` (floor) and the remainder ``r``'s top bit and the OR of the bits
    below it; ``s3`` the rounding increment (``2r`` against ``2**shift``, as in
    :func:`~ttrain.golden.numerics.round_shift`) and ``q`` saturated to ``bits + 2`` signed
    bits; ``s4`` ``q + inc``; ``s5`` ``theta - (q + inc)``; ``s6`` that clamped to ``bits``
    signed bits.

    Parameters
    ----------
    bits : int
        Signed parameter width (2..32; 8 for int8).
    grad_bits : int
        Signed gradient width (2..48).
    mult_bits : int
        Signed ``lr_mult`` width (2..32).
    mode : Rounding or str
        Rounding mode (a :class:`~ttrain.golden.numerics.Rounding` member or its name).

    Members
    -------
    i : ``In(stream.Signature(StructLayout({"theta": signed(bits), "grad": signed(grad_bits)})))``
        ``theta`` is the least significant field.
    lr_mult : ``In(signed(mult_bits))``
    shift : ``In(range(grad_bits + mult_bits))``
    o : ``Out(stream.Signature(<same layout as i>))``
        New parameter and a zero gradient.
    """

    def __init__(self, *, bits=8, grad_bits=32, mult_bits=16, mode=Rounding.HALF_EVEN):
        for name, value, lo, hi in (("bits", bits, 2, 32), ("grad_bits", grad_bits, 2, 48),
                                    ("mult_bits", mult_bits, 2, 32)):
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise TypeError(f"IntUpdatePipeline {name} must be an integer in [{lo}, {hi}], "
                                f"not {value!r}")
        if isinstance(mode, str) and mode.upper() in Rounding.__members__:
            mode = Rounding[mode.upper()]
        if not isinstance(mode, Rounding):
            raise ValueError(f"IntUpdatePipeline mode must be a Rounding member or one of "
                             f"{', '.join(Rounding.__members__)}, not {mode!r}")
        self._bits, self._grad_bits, self._mult_bits, self._mode = bits, grad_bits, mult_bits, mode
        layout = data.StructLayout({"theta": signed(bits), "grad": signed(grad_bits)})
        super().__init__({
            "i": In(stream.Signature(layout)),
            "lr_mult": In(signed(mult_bits)),
            "shift": In(range(grad_bits + mult_bits)),
            "o": Out(stream.Signature(layout)),
        })

    bits = property(lambda self: self._bits, doc="Signed parameter width.")
    mode = property(lambda self: self._mode, doc="Rounding mode.")
    latency = property(lambda self: 6, doc="Cycles from an accepted pair to its result.")

    def elaborate(self, platform):
        # Every stage is one short carry chain or less (at most 12 logic levels in the Yosys
        # xcup estimate): the remainder is the product's low bits (no subtraction), q is
        # saturated to bits + 2 signed bits (a larger |q| clamps theta all the same), and the
        # clamp to ``bits`` is a sign-extension check instead of two compares.
        m = Module()
        pw = self._grad_bits + self._mult_bits
        bits = self._bits
        qw = min(pw, bits + 2)                     # q saturated to qw signed bits
        dw = max(bits, qw + 1) + 1                 # theta - (q + inc)
        en = Signal()
        m.d.comb += [en.eq(~self.o.valid | self.o.ready), self.i.ready.eq(en)]
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

        def reg(shape, name):
            return Signal(shape, name=name, reset_less=True)

        valid = [Signal(name=f"s{k}_valid") for k in range(1, 6)]
        s1_product, s1_shift = reg(signed(pw), "s1_product"), reg(range(pw), "s1_shift")
        theta = [reg(signed(bits), f"s{k}_theta") for k in range(1, 5)]
        s2_q = reg(signed(pw), "s2_q")
        s2_half, s2_low, s2_neg = reg(1, "s2_half"), reg(1, "s2_low"), reg(1, "s2_neg")
        s3_q, s3_inc = reg(signed(qw), "s3_q"), reg(1, "s3_inc")
        s4_qi = reg(signed(qw + 1), "s4_qi")
        s5_diff = reg(signed(dw), "s5_diff")

        # s2: q = floor(product / 2**shift); of the remainder r (the low ``shift`` bits):
        # its top bit (2r >= 2**shift) and whether any bit below it is set.
        sh = s1_shift
        half = _or_of(s1_product[i] & (sh == i + 1) for i in range(pw))
        low = _or_of(s1_product[i] & (sh > i + 1) for i in range(pw))
        # s3: the rounding increment, with 2r > 2**shift = half & low, 2r == 2**shift = half
        # & ~low, r != 0 = half | low.
        above, tie, nonzero = s2_half & s2_low, s2_half & ~s2_low, s2_half | s2_low
        inc = {
            Rounding.FLOOR: Const(0, 1),
            Rounding.CEIL: nonzero,
            Rounding.TRUNC: nonzero & s2_neg,
            Rounding.HALF_UP: above | tie,
            Rounding.HALF_AWAY: above | (tie & ~s2_neg),
            Rounding.HALF_EVEN: above | (tie & s2_q[0]),
        }[self._mode]
        if qw < pw:
            fits = (s2_q[qw - 1:pw] == 0) | (s2_q[qw - 1:pw] == (1 << (pw - qw + 1)) - 1)
            q_sat = Mux(fits, s2_q[0:qw], Mux(s2_neg, 1 << (qw - 1), (1 << (qw - 1)) - 1))
        else:
            q_sat = s2_q
        # s6: theta - (q + inc) clamped to ``bits`` signed bits (it fits when its bits from
        # bits - 1 up are all equal).
        top = s5_diff[bits - 1:dw]
        in_bits = (top == 0) | (top == (1 << (dw - bits + 1)) - 1)

        with m.If(en):
            m.d.sync += [
                valid[0].eq(self.i.valid), *[valid[k].eq(valid[k - 1]) for k in range(1, 5)],
                self.o.valid.eq(valid[4]),
                s1_product.eq(self.i.payload.grad * self.lr_mult), s1_shift.eq(self.shift),
                theta[0].eq(self.i.payload.theta),
                *[theta[k].eq(theta[k - 1]) for k in range(1, 4)],
                s2_q.eq(s1_product >> s1_shift), s2_half.eq(half), s2_low.eq(low),
                s2_neg.eq(s1_product[pw - 1]),
                s3_q.eq(q_sat), s3_inc.eq(inc),
                s4_qi.eq(s3_q + s3_inc),
                s5_diff.eq(theta[3] - s4_qi),
                self.o.payload.theta.eq(Mux(in_bits, s5_diff[0:bits],
                                            Mux(s5_diff[dw - 1], lo, hi))),
            ]
        m.d.comb += self.o.payload.grad.eq(0)
        return m
