"""The contraction engine: ``lanes`` FP32 multiply-accumulate lanes over banked stores.

Golden: :func:`ttrain.golden.contract.contract` (the descriptor semantics, the accumulation
order and the error codes are defined there). One run computes ``C (+)= A · B`` for one
:class:`~ttrain.golden.contract.Descriptor` whose A, B and C are strided views into the
engine's stores; transposes are swapped strides.

Micro-architecture
------------------
C is cut into tiles of ``slots`` rows x ``lanes`` columns (output-stationary). Lane ``p`` owns
column ``n0 + p`` of the tile; the ``slots`` rows are interleaved in time, so each lane's adder
sees a given output only every ``slots`` cycles, which hides the adder latency
(``slots >= add latency + 1``). For one tile::

    for kk in range(k):               # one "k-step": slots cycles
        for t in range(slots):        # one issue per cycle
            lane p: acc[t][p] = fp32_add(acc[t][p], fp32_mul(A[m0 + t, kk], B[kk, n0 + p]))

with ``acc[t][p]`` starting from C's old word (``accumulate``) or from ``-0.0`` (exactly the
first product, see the golden module). A k-step needs one A vector (``slots`` words down a
column of A, broadcast to every lane one word per cycle) and one B vector (``lanes`` words along
a row of B); independent fetchers read them ahead into small FIFOs (operand double buffering),
so a k-step issues back to back with the next as long as every fetcher delivers a vector per
``slots`` cycles. A tile's last k-step pushes ``slots`` result vectors into a write FIFO that a
write client drains while the next tile computes; with ``accumulate`` a fourth fetcher reads the
old C vectors of the next tile ahead.

Lane groups (``max_split`` > 1; a descriptor's ``split = s``): the lanes run as ``s`` groups of
``lanes / s`` columns over the same tile, group ``g`` summing the k range ``g * kc .. (g + 1) *
kc - 1`` (``kc = ceil(k / s)`` rounded up to odd) with its own A word per cycle (the A vector holds ``slots`` words
per group); a group whose k index passes ``k`` gets a ``-0.0`` product (``x + -0 == x``). A
pipelined fold tree between the lanes and the write FIFO adds the groups' partial sums in
golden's order (level ``l`` adds lane ``p + lanes / 2**l`` to lane ``p``); only group 0 starts
from the old C.

Stores are banked by address (word ``a`` in bank ``a % banks``). Every fetcher and writer is a
vector client: each lane requests one word; a per-store arbiter grants each bank to the first
requesting lane in fixed priority order (host, old C, B, A), and a vector completes when all of
its lanes have been granted. Strides whose lane addresses hit distinct banks (stride 1, any odd
stride) take one cycle per vector; a stride that is a multiple of ``banks`` takes ``lanes``
cycles. Since a vector serves ``slots`` cycles of compute, the engine sustains one issue per
cycle whenever ``slots`` >= the conflict degree of A's and B's strides and A and B live in
different stores (same store: the two share the banks' read ports).

Beats (``fetch_words = W``): the A, B and old-C fetchers and the C writer reach the arbiter
through ``W`` ports each instead of one per lane. A vector's lanes are cut into beats of ``W``
consecutive lanes; each cycle the lowest beat with a pending lane is presented (port ``j``
carries lane ``beat * W + j``), so empty beats cost nothing and a full vector takes at least
``lanes / W`` cycles. The arbiter (``ports x stores x banks`` grant terms) and the read-data
crossbar then grow with ``W``, not with ``lanes``; the lanes' registers and the beat muxes are
linear in ``lanes``. Since a B vector serves a whole k-step (``max(h, add latency + 1)``
cycles) and the C vectors of a tile a whole tile, ``W`` well below ``lanes`` costs little; the
golden cycle model (:func:`ttrain.golden.isa.engine_cycles` with ``fetch_words``) counts the
beats. ``W = None`` (the default) is one beat per vector: the engine as before.

Host port: ``host_i`` carries beats of ``banks`` consecutive words (``addr`` .. ``addr +
banks - 1``, a lane mask, ``write`` and the data); reads answer on ``host_o`` with one beat per
read beat, in order. Lanes past the end of the store, or beats naming a store that does not
exist, are dropped (read as 0). Beats enter a 2-beat FIFO (a read beat only when its
response has room) and are served while the engine is idle; until that FIFO is empty no
descriptor starts and the store ports take no new vector, so every accepted beat lands before
what follows it.

Control: the descriptor arrives on the ``desc`` stream (``amaranth.lib.stream``, like every
unit's command); ``desc.ready`` is high while the engine is idle and the host FIFO empty, and
a transfer starts a run.
The engine checks the descriptor (:data:`~ttrain.golden.contract.ERROR_CODES`): an illegal one
sets ``error`` and ``error_code`` and ends at once without touching any store; otherwise it
runs. ``done`` rises when the last C word is written and stays high until the next transfer;
``cycles`` counts the cycles from the transfer to ``done``.
"""

from dataclasses import dataclass
from functools import reduce
import operator

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, Value, signed
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from ..golden.isa import best_split, engine_cycles, omega_round_trip
from ..golden.numerics import NEG_ZERO       # -0.0: the initial value of a fresh sum
from .fp32 import latency_of
from .port import StorePortSignature
from .store import BankedStore

__all__ = ["StoreSpec", "ContractionEngine", "descriptor_layout", "host_request_layout"]


@dataclass(frozen=True)
class StoreSpec:
    """One store of the engine: name, size in words, Xilinx mapping and implementation.

    See :class:`~ttrain.rtl.store.BankedStore` for ``style`` and ``impl``.
    """
    name: str
    depth: int
    style: str = "auto"
    impl: str = "auto"


def view_layout(store_bits, addr_bits):
    """Return the layout of one view of a descriptor (``store`` is the least significant)."""
    return data.StructLayout({"store": store_bits, "base": addr_bits, "row_stride": addr_bits,
                              "col_stride": addr_bits, "batch_stride": addr_bits})


def descriptor_layout(store_bits, addr_bits, dim_bits):
    """Return the layout of the ``desc`` port (``m`` is the least significant field;
    ``split`` is log2 of the descriptor's ``split``)."""
    view = view_layout(store_bits, addr_bits)
    return data.StructLayout({"m": dim_bits, "n": dim_bits, "k": dim_bits, "batch": dim_bits,
                              "accumulate": 1, "integer": 1, "split": 4,
                              "a": view, "b": view, "c": view})


def host_request_layout(store_bits, addr_bits, width):
    """Return the layout of a ``host_i`` beat (``write`` is the least significant field)."""
    return data.StructLayout({"write": 1, "store": store_bits, "addr": addr_bits,
                              "mask": width, "data": data.ArrayLayout(32, width)})


def _pack(layout, value):
    """Pack a nested dict into an int following ``layout`` (first field = low bits)."""
    if isinstance(layout, data.StructLayout):
        out = 0
        for name, field in layout:
            out |= _pack(field.shape, value[name]) << field.offset
        return out
    if isinstance(layout, data.ArrayLayout):
        width = data.Layout.cast(layout.elem_shape).size if isinstance(
            layout.elem_shape, data.Layout) else len(Const(0, layout.elem_shape))
        return sum(_pack(layout.elem_shape, v) << (i * width) for i, v in enumerate(value))
    width = len(Const(0, layout))
    value = int(value)
    if not 0 <= value < (1 << width):
        raise ValueError(f"value {value} does not fit in {width} bits")
    return value


class _Loops:
    """Nested loop counters, outermost first, with an optional running address.

    ``addr`` is the address of the current iteration (sum of index x stride); ``rem[l]`` is
    ``extent - idx[l] * step`` for levels given an ``(extent, step)`` pair. ``advance`` steps to
    the next iteration; after the last one ``done`` goes high. ``restart`` loads the start.

    ``lasts`` are the last index of each level (count - 1), registers of the caller that hold
    still during a run: the end-of-level compare is then an equality of two registers, not a
    count derived from the descriptor (that derivation was the engine's deepest path).
    """

    def __init__(self, m, name, lasts, *, strides=None, base=None, addr_bits=1, rems=None):
        n = len(lasts)
        self.idx = [Signal(len(c), name=f"{name}_i{l}") for l, c in enumerate(lasts)]
        self.at_last = [Signal(name=f"{name}_last{l}") for l in range(n)]
        self.advance = Signal(name=f"{name}_advance")
        self.restart = Signal(name=f"{name}_restart")
        self.done = Signal(name=f"{name}_done", init=1)
        rems = rems or {}
        self.rem = {l: Signal(len(ext) + 1, name=f"{name}_rem{l}") for l, (ext, _) in rems.items()}
        for l in range(n):
            m.d.comb += self.at_last[l].eq(self.idx[l] == lasts[l])
        if strides is not None:
            self.level_addr = [Signal(addr_bits, name=f"{name}_a{l}") for l in range(n)]
            self.addr = self.level_addr[-1]
        with m.If(self.restart):
            m.d.sync += self.done.eq(0)
            for l in range(n):
                m.d.sync += self.idx[l].eq(0)
                if strides is not None:
                    m.d.sync += self.level_addr[l].eq(base)
            for l, (ext, _) in rems.items():
                m.d.sync += self.rem[l].eq(ext)
        with m.Elif(self.advance & ~self.done):
            for l in reversed(range(n)):
                cond = ~self.at_last[l]
                ctx = m.If(cond) if l == n - 1 else m.Elif(cond)
                with ctx:
                    m.d.sync += self.idx[l].eq(self.idx[l] + 1)
                    for inner in range(l + 1, n):
                        m.d.sync += self.idx[inner].eq(0)
                    if strides is not None:
                        nxt = self.level_addr[l] + strides[l]
                        for inner in range(l, n):
                            m.d.sync += self.level_addr[inner].eq(nxt)
                    for rl, (ext, step) in rems.items():
                        if rl == l:
                            m.d.sync += self.rem[rl].eq(self.rem[rl] - step)
                        elif rl > l:
                            m.d.sync += self.rem[rl].eq(ext)
            with m.Else():
                m.d.sync += self.done.eq(1)


def _bank_of(addr, nb_log2, skew):
    """The bank of word ``addr`` (``nb_log2`` bank bits): ``addr % banks``, or with ``skew``
    ``(addr + addr // banks) % banks`` (rows skewed by one bank each). The row is ``addr //
    banks`` either way."""
    if not nb_log2:
        return Const(0, 1)
    low = addr[:nb_log2]
    if not skew:
        return low
    return (low + addr[nb_log2:2 * nb_log2])[:nb_log2]


class _Beats:
    """The ``width`` ports through which a client of ``lanes`` lanes reaches the arbiter.

    The lanes are cut into ``lanes / width`` beats of ``width`` consecutive lanes; each cycle
    the lowest beat that still has a pending lane is presented (port ``j`` carries lane
    ``beat * width + j``), so a vector of ``n`` pending beats takes at least ``n`` cycles and the
    arbiter's and the data return's cost grows with ``width``, not with ``lanes``. With
    ``width == lanes`` (one beat) the ports are the lanes.
    """

    def __init__(self, m, name, lanes, width, pending, addr, bank):
        self.width = width
        self.nbeats = lanes // width
        W = width
        self.port_grant = Signal(W, name=f"{name}_pgrant")
        self.grant = Signal(lanes, name=f"{name}_grant")
        if self.nbeats == 1:
            self.sel = None
            self.port_req = [pending[j] for j in range(W)]
            self.port_addr = list(addr)
            self.port_bank = list(bank)
            m.d.comb += self.grant.eq(self.port_grant)
            return
        any_b = [pending[b * W:(b + 1) * W].any() for b in range(self.nbeats)]
        self.sel = Signal(self.nbeats, name=f"{name}_beat")      # one-hot: the lowest beat
        earlier = Const(0, 1)
        for b in range(self.nbeats):
            m.d.comb += self.sel[b].eq(any_b[b] & ~earlier)
            nxt = Signal(name=f"{name}_before{b + 1}")
            m.d.comb += nxt.eq(earlier | any_b[b])
            earlier = nxt
        self.port_req, self.port_addr = [], []
        for j in range(W):
            req = Signal(name=f"{name}_preq{j}")
            pa = Signal(len(addr[0]), name=f"{name}_paddr{j}")
            m.d.comb += [req.eq((Cat(*[pending[b * W + j] for b in range(self.nbeats)])
                                 & self.sel).any()),
                         pa.eq(_or_mux([(self.sel[b], addr[b * W + j])
                                        for b in range(self.nbeats)], len(pa)))]
            self.port_req.append(req)
            self.port_addr.append(pa)
        m.d.comb += self.grant.eq(Cat(*[self.port_grant[p % W] & self.sel[p // W]
                                        for p in range(lanes)]))
        self.port_bank = [_or_mux([(self.sel[b], bank[b * W + j]) for b in range(self.nbeats)],
                                  len(bank[0])) for j in range(W)]

    def ports(self, store):
        """``(req, store, bank, addr, grant)`` of every port, for :func:`_arbitrate`."""
        return [(self.port_req[j], store, self.port_bank[j], self.port_addr[j],
                 self.port_grant[j]) for j in range(self.width)]

    def port_values(self, values, width):
        """Per port, the value of the presented beat's lane out of ``values`` (one per lane)."""
        if self.sel is None:
            return list(values)
        W = self.width
        return [_or_mux([(self.sel[b], values[b * W + j]) for b in range(self.nbeats)], width)
                for j in range(W)]


def _rotate(m, name, values, amount, up):
    """``values`` (a list, one per bank or position) rotated by the signal ``amount``: with
    ``up``, element ``i`` moves to ``(i + amount) % n``, else to ``(i - amount) % n``. A
    logarithmic shifter: one 2:1 select per element and bit of ``amount``.

    Every stage's outputs are signals (``<name>_r<k>_<i>``): Amaranth emits an expression
    once per use, so a stage left as an expression is copied into each of its two readers,
    and the last stage's outputs would carry ``2 ** stages`` copies of the first (at 32
    banks the host write port's rotator was emitted 193 times over, most of a 32-lane
    engine's Verilog; docs/wide-engine.md)."""
    n = len(values)
    out = list(values)
    width = max(len(Value.cast(v)) for v in values) if values else 1
    for k in range(len(amount)):
        sh = (1 << k) % n
        if not sh:
            continue
        src = [(i - sh) % n if up else (i + sh) % n for i in range(n)]
        stage = [Signal(width, name=f"{name}_r{k}_{i}") for i in range(n)]
        m.d.comb += [stage[i].eq(Mux(amount[k], out[src[i]], out[i])) for i in range(n)]
        out = stage
    return out


def _row_fields(base, nb_log2, skew, rbits):
    """``(row0, row1, rot, cross)`` of a row vector from word ``base`` (:class:`_RowPorts`):
    the base's row and the next, the bank of its first lane, the first lane in the next
    row."""
    NB = 1 << nb_log2
    low, hi = base[:nb_log2], base[nb_log2:][:rbits]
    return [hi, (hi + 1)[:rbits], (low + hi[:nb_log2])[:nb_log2] if skew else low,
            (NB - low)[:nb_log2 + 1]]


def row_pre_width(addr_bits, nb_log2):
    """Bits of :func:`row_pre`."""
    return 2 * (addr_bits - nb_log2) + 2 * nb_log2 + 1


def row_pre(base, addr_bits, nb_log2, skew):
    """:func:`_row_fields` packed (``row_pre_width`` bits): computed where a row client's
    request enters its FIFO, so the load that takes it starts at a register."""
    rbits = addr_bits - nb_log2
    widths = (rbits, rbits, nb_log2, nb_log2 + 1)
    # (each field zero-extended or cut to its width: a base narrower than addr_bits gives
    # narrower values)
    return Cat(*[Cat(v, Const(0, w))[:w] for v, w in zip(_row_fields(base, nb_log2, skew, rbits),
                                                          widths)])


class _RowPorts:
    """The arbiter entry of a row client: ``lanes <= banks`` consecutive words ``base ..
    base + lanes - 1`` of one store (the host port, the vector and update units' ports).

    Such a vector touches each bank at most once (with ``skew``, a full ``banks``-word beat
    that crosses a row puts its first and last lanes in one bank; the first is served first),
    so it needs no per-lane bank decode or address: its claim on the banks is the pending
    lanes rotated by the base's bank, each bank's row is the base's row or the next one, and
    its write data and read data are rotated the same way. One entry per client instead of
    ``lanes`` entries each decoding a bank and joining the arbiter's prefix OR (the quadratic
    part of the arbiter, docs/wide-engine.md). It is granted exactly what its lanes would be
    as separate entries in lane order, so no cycle count changes.

    Positions: lane ``w`` sits at position ``w`` (unskewed) or ``w + [w >= c]`` (skewed), ``c
    = banks - base % banks`` being the first lane in the next row; position ``j`` is bank
    ``(j + rot) % banks`` with ``rot = base % banks`` (+ the row's skew). A skewed full beat's
    last lane lands on position ``banks``, i.e. position 0, behind lane 0 (the *wrapped*
    lane).

    ``bank_order`` (the row clients): the client holds its pending lanes in bank order
    (:meth:`bank_mask`, rotated once when a vector is loaded; a second ``banks`` bits mark the
    wrapped lane's bank), so its claim is that register and its grant the register less the
    banks taken: the request -> grant -> pending loop has no rotator (it had two, claim and
    free, the engine's deepest path: docs/wide-engine.md). Else (the row-operand segments,
    whose lanes share a pending mask with the client's beats) the pending lanes are in lane
    order and rotated to the banks and back each cycle.

    A narrow entry (``lanes`` below ``banks``; the vector and update units' ports) has at
    most ``lanes + 1`` positions, so its rotators are ``W`` positions wide (the next power of
    two, ``W < banks``): position ``j`` is rotated to slot ``(j + rot) % W``, and bank ``b``
    is slot ``b % W`` when ``(b - rot) % banks < W`` (the window), else unclaimed; a slot
    reads the bank of its residue in the window (the rotation's group or the next). The
    same claims, rows, words and grants as a ``banks``-wide rotation, with ``log2(W)``
    stages of ``W`` selects instead of ``log2(banks)`` stages of ``banks`` (at 256 banks and
    64-lane ports, 7 x 128 instead of 8 x 256 per rotated bit; docs/wide-engine.md).
    """

    def __init__(self, m, name, lanes, addr_bits, nb_log2, skew, load_base, bank_order=False,
                 load_pre=None):
        NB = 1 << nb_log2
        self.name, self.lanes, self.nb_log2, self.skew = name, lanes, nb_log2, skew
        self.bank_order = bank_order
        rbits = addr_bits - nb_log2
        self.row0 = Signal(rbits, name=f"{name}_row0")
        self.row1 = Signal(rbits, name=f"{name}_row1")
        self.rot = Signal(nb_log2, name=f"{name}_rot")
        self.cross = Signal(nb_log2 + 1, name=f"{name}_cross")
        if load_pre is None:           # from the base (the row-operand segments)
            new = _row_fields(load_base, nb_log2, skew, rbits)
        else:                          # precomputed (row_pre): the row clients
            new, at = [], 0
            for w in (rbits, rbits, nb_log2, nb_log2 + 1):
                new.append(load_pre[at:at + w])
                at += w
        self.fields = []
        for reg, value in zip((self.row0, self.row1, self.rot, self.cross), new):
            wait = Signal.like(reg, name=f"{name}_next_{reg.name[len(name) + 1:]}")
            loaded = Signal.like(reg, name=f"{name}_load_{reg.name[len(name) + 1:]}")
            m.d.comb += loaded.eq(value)
            self.fields.append((reg, wait, loaded))
        # the rotation and crossing lane a load brings
        (*_, self.load_rot), (*_, self.load_cross) = self.fields[2:4]
        # a skewed full beat can cross a row: its last lane then wraps onto lane 0's bank
        self.wrap_on = bool(skew and lanes == NB)
        # pending lanes: per lane (lane order), or per bank (+ the wrapped lane's bank)
        self.pwidth = (2 * NB if self.wrap_on else NB) if bank_order else lanes
        self.grant = Signal(self.pwidth, name=f"{name}_grant")
        # the positions' rotators: W of them (a power of two >= lanes + skew, at most banks)
        npos = lanes + 1 if skew and lanes < NB else lanes
        self.W = min(NB, 1 << (npos - 1).bit_length())
        self.lw = exact_log2(self.W)
        if bank_order:
            # each slot's row bit (slot b % W is bank b), rotated when the vector is loaded:
            # the banks' row selects then start at a register
            rows = _rotate(m, f"{name}_lrow", self._rowbits(m, f"{name}_lprow", self.load_cross),
                           self.load_rot[:self.lw], up=True)
            self.brow = self._held(m, f"{name}_brow", Cat(*rows), self.W)

    def _held(self, m, name, value, width):
        """A register of the served vector (and its copy in the waiting slot) that takes
        ``value`` when a vector is loaded (a :attr:`fields` entry)."""
        cur = Signal(width, name=name)
        wait = Signal(width, name=f"{name}_next")
        loaded = Signal(width, name=f"{name}_load")
        m.d.comb += loaded.eq(value)
        self.fields.append((cur, wait, loaded))
        return cur

    def hold_data(self, m, load_data):
        """``bank_order``: hold a writer's words per slot (rotated when loaded, so the
        banks' write words start at a register) and, for a wrapped lane, the last lane's."""
        name = self.name
        pos = self._positions(m, f"{name}_ldata", load_data, self.load_cross, Const(0, 32), 32)
        slots = _rotate(m, f"{name}_lwdata", pos, self.load_rot[:self.lw], up=True)
        self.bdata = [self._held(m, f"{name}_bdata{q}", slots[q], 32) for q in range(self.W)]
        self.dlast = (self._held(m, f"{name}_dlast", load_data[self.lanes - 1], 32)
                      if self.wrap_on else None)

    def _window(self, m, name, rot):
        """``rot``'s group and residue (``rot // W``, ``rot % W``) as signals."""
        g = Signal(self.nb_log2 - self.lw, name=f"{name}_g")
        r = Signal(max(1, self.lw), name=f"{name}_r")
        m.d.comb += [g.eq(rot[self.lw:]), r.eq(rot[:self.lw] if self.lw else 0)]
        return g, r

    def _slot_banks(self, m, name, values, rot, width):
        """Per slot ``q`` of a narrow entry, ``values[b]`` (one per bank) of the bank ``b``
        of residue ``q`` in the window of ``rot``."""
        W, NG = self.W, (1 << self.nb_log2) // self.W
        g, r = self._window(m, name, rot)
        out = []
        for q in range(W):
            grp = Signal(len(g), name=f"{name}_grp{q}")
            m.d.comb += grp.eq(Mux(q >= r, g, g + 1))
            v = Signal(width, name=f"{name}_slot{q}")
            m.d.comb += v.eq(Array([values[k * W + q] for k in range(NG)])[grp])
            out.append(v)
        return out

    def _to_banks(self, m, name, pos, rot, window):
        """``pos`` (one value per position, ``W`` of them) rotated to the banks by ``rot``:
        one value per bank; with ``window``, banks outside the window read 0 (else slot ``b %
        W``, whatever the window: for values read only where the bank is claimed)."""
        NB, W = 1 << self.nb_log2, self.W
        rotated = _rotate(m, name, pos, rot[:self.lw], up=True)
        if W == NB or not window:
            return [rotated[b % W] for b in range(NB)]
        g, r = self._window(m, f"{name}_w", rot)
        NG = NB // W
        g_is = [Signal(name=f"{name}_w_is{k}") for k in range(NG)]
        m.d.comb += [g_is[k].eq(g == k) for k in range(NG)]
        out = []
        for b in range(NB):
            k, q = divmod(b, W)
            # in the window: the rotation's group at or past r, or the next group below r
            win = (g_is[k] & (q >= r)) | (g_is[(k - 1) % NG] & (q < r))
            v = Signal(name=f"{name}_b{b}")
            m.d.comb += v.eq(rotated[q] & win)
            out.append(v)
        return out

    def _from_banks(self, m, name, values, rot, width):
        """Per position (``W`` of them), its bank's value out of ``values`` (one per bank)."""
        if self.W < (1 << self.nb_log2):
            values = self._slot_banks(m, f"{name}_sb", values, rot, width)
        return _rotate(m, name, values, rot[:self.lw], up=False)

    def _lane_at(self, j, cross):
        """The lane at position ``j`` as ``[(condition, lane)]`` (first true wins; none: no
        lane)."""
        L = self.lanes
        if not self.skew:
            return [(Const(1, 1), j)] if j < L else []
        out = []
        if j < L:
            out.append((j < cross, j) if j else (Const(1, 1), 0))
        if 0 < j <= L:
            out.append((j > cross, j - 1))
        return out

    def _positions(self, m, name, values, cross, zero, width):
        """Per position (``W``), the value of the lane there out of ``values`` (per lane;
        ``zero`` where no lane is)."""
        out = []
        for j in range(self.W):
            v = zero
            for cond, lane in reversed(self._lane_at(j, cross)):
                v = Mux(cond, values[lane], v)
            sig = Signal(width, name=f"{name}{j}")
            m.d.comb += sig.eq(v)
            out.append(sig)
        return out

    def bank_mask(self, m, mask):
        """``bank_order``: the pending value of a vector loaded with lane mask ``mask`` (its
        lanes at their banks for the loaded base, and the wrapped lane's bank)."""
        name, NB, L = self.name, 1 << self.nb_log2, self.lanes
        pv = self._positions(m, f"{name}_lpv", mask, self.load_cross, 0, 1)
        banks = self._to_banks(m, f"{name}_lmask", pv, self.load_rot, window=True)
        if not self.wrap_on:
            return Cat(*banks)
        wrap = Signal(name=f"{name}_lwrap")
        m.d.comb += wrap.eq((self.load_cross != NB) & mask[L - 1])
        return Cat(*banks, *[wrap & (self.load_rot == b) for b in range(NB)])

    def connect(self, m, pending, store, data):
        """Build the claim, the per-bank rows and write data, and the lane grants' inputs.

        ``pending``: lane order, or with ``bank_order`` a value of :meth:`bank_mask`'s form
        (the held register). ``data``: ``None`` for a reader; a writer's words per lane, or
        with ``bank_order`` any true value (the words are those :meth:`hold_data` holds)."""
        name, NB, L = self.name, 1 << self.nb_log2, self.lanes
        self.pending, self.store = pending, store
        if self.bank_order:
            self._connect_banks(m, pending, data)
            return
        # a skewed full beat crossing a row: the last lane waits for lane 0's bank
        self.wrap = Signal(name=f"{name}_wrap")
        m.d.comb += self.wrap.eq((self.cross != NB) if self.wrap_on else 0)
        wrap_sel = self.wrap & ~pending[0] & pending[L - 1]
        pv = self._positions(m, f"{name}_pv", pending, self.cross, 0, 1)
        rowbit = self._rowbits(m, f"{name}_prow", self.cross)
        if self.wrap_on:
            pv[0] = pv[0] | wrap_sel
            rowbit[0] = wrap_sel
        self.bank_claim = self._to_banks(m, f"{name}_claim", pv, self.rot, window=True)
        self.bank_rowbit = self._to_banks(m, f"{name}_rowbit", rowbit, self.rot, window=False)
        self.bank_data = None
        if data is not None:
            pdata = self._positions(m, f"{name}_pdata", data, self.cross, Const(0, 32), 32)
            if self.wrap_on:
                pdata[0] = Mux(wrap_sel, data[L - 1], pdata[0])
            self.bank_data = self._to_banks(m, f"{name}_wdata", pdata, self.rot, window=False)

    def _rowbits(self, m, name, cross):
        """Per position, whether its lane is in the next row (position 0 never is)."""
        out = [Const(0, 1)]
        for j in range(1, self.W):
            rb = Signal(name=f"{name}{j}")
            m.d.comb += rb.eq(j > cross if self.skew else j >= cross)
            out.append(rb)
        return out

    def _connect_banks(self, m, pending, data):
        name, NB, L = self.name, 1 << self.nb_log2, self.lanes
        bp = [pending[b] for b in range(NB)]
        # the wrapped lane is served at its bank once lane 0 is (it reads and writes the
        # next row there, with the last lane's word)
        wsel = []
        if self.wrap_on:
            for b in range(NB):
                ws = Signal(name=f"{name}_wsel{b}")
                m.d.comb += ws.eq(pending[NB + b] & ~bp[b])
                wsel.append(ws)
        self.bank_claim = [Signal(name=f"{name}_claim{b}") for b in range(NB)]
        m.d.comb += [self.bank_claim[b].eq(bp[b] | (wsel[b] if wsel else 0))
                     for b in range(NB)]
        W = self.W
        rows = [self.brow[b % W] for b in range(NB)]
        self.bank_rowbit = [rows[b] | wsel[b] for b in range(NB)] if wsel else rows
        self.bank_data = None
        if data is not None:
            words = [self.bdata[b % W] for b in range(NB)]
            self.bank_data = ([Mux(wsel[b], self.dlast, words[b]) for b in range(NB)]
                              if wsel else words)

    def hot(self, m, n_stores):
        """The (store, bank) pairs this entry claims (``n_stores x banks`` bits)."""
        hot = Signal(n_stores * (1 << self.nb_log2), name=f"{self.name}_hot")
        m.d.comb += hot.eq(Cat(*[b & (self.store == s) for s in range(n_stores)
                                 for b in self.bank_claim]))
        return hot

    def drive_grant(self, m, taken, n_stores):
        """Grant the pending lanes whose bank ``taken`` (the higher-priority entries'
        claims, ``n_stores x banks`` bits, or ``None``) leaves free."""
        name, NB, L = self.name, 1 << self.nb_log2, self.lanes
        blocked = Signal(NB, name=f"{name}_blocked")
        if taken is not None:
            sel = Const(0, NB)
            for s in reversed(range(n_stores)):
                sel = Mux(self.store == s, taken[s * NB:(s + 1) * NB], sel)
            m.d.comb += blocked.eq(sel)
        if self.bank_order:
            bp = self.pending[:NB]
            g = bp & ~blocked
            if self.wrap_on:
                g = Cat(g, self.pending[NB:] & ~bp & ~blocked)
            m.d.comb += self.grant.eq(g)
            return
        free_pos = [~v for v in self._from_banks(m, f"{name}_free",
                                                 [blocked[b] for b in range(NB)], self.rot, 1)]
        grants = []
        for w in range(L):
            if self.skew and w:
                nxt = free_pos[(w + 1) % NB]
                g = self.pending[w] & Mux(w >= self.cross, nxt, free_pos[w])
                if w == L - 1 and L == NB:
                    g = g & ~(self.wrap & self.pending[0])
            else:
                g = self.pending[w] & free_pos[w]
            grants.append(g)
        m.d.comb += self.grant.eq(Cat(*grants))

    def lane_grants(self, m, grant, rot, cross):
        """``bank_order``: per lane, whether ``grant`` (a value of :attr:`grant`, with that
        cycle's ``rot`` / ``cross``) granted it."""
        NB, L = 1 << self.nb_log2, self.lanes
        pos = self._from_banks(m, f"{self.name}_lgrant", [grant[b] for b in range(NB)], rot, 1)
        wrapped = grant[NB:].any() if self.wrap_on else None
        out = []
        for w in range(L):
            if self.skew and w:
                nxt = wrapped if (self.wrap_on and w == L - 1) else pos[(w + 1) % NB]
                out.append(Mux(w >= cross, nxt, pos[w]))
            else:
                out.append(pos[w])
        return out

    def bank_value(self, b, rbits_total, nb_log2):
        """The word address (its row bits; the bank bits zero) of this entry at bank ``b``."""
        row = Mux(self.bank_rowbit[b], self.row1, self.row0)
        return Cat(Const(0, nb_log2), row)

    def lane_words(self, m, words, rot_d, cross_d):
        """Per lane, its word out of ``words`` (one per bank, as read two cycles after the
        grant with that cycle's ``rot_d`` / ``cross_d``)."""
        NB, L = 1 << self.nb_log2, self.lanes
        pos = self._from_banks(m, f"{self.name}_rdata", words, rot_d, 32)
        out = []
        for w in range(L):
            if self.skew and w:
                out.append(Mux(w >= cross_d, pos[(w + 1) % NB], pos[w]))
            else:
                out.append(pos[w])
        return out


class _VectorClient:
    """A vector of ``lanes`` word accesses to one store, completed over one or more cycles
    (the common part of :class:`_ReadClient` and :class:`_WriteClient`).

    ``load`` (when ``can_load``) takes ``load_base``/``load_mask``/``load_store`` (and a
    writer's ``load_data``); lane ``p`` accesses word ``load_base + offsets[p]``. The lanes
    reach the arbiter through ``width`` ports (:class:`_Beats`; default one port per lane).

    The client holds the vector being served (``pending``, ``addr``, ``bank``, ``store``,
    ``active``, a writer's ``data``) and one waiting behind it (``_next_*``). ``can_load`` is a
    register (the waiting slot is empty), so a ``load`` does not wait for this cycle's grants:
    the grant -> ``finishing`` -> ``load`` -> address generators path was the engine's deepest
    (14-15 levels; docs/u50.md, logic depth). A load goes straight into the served slot when
    that is idle or finishing (as with one slot: the vector is presented the next cycle), else
    into the waiting slot, which moves up when the served vector finishes. So every vector
    reaches the arbiter in the same cycle as with one slot, and one more waits, already
    loaded. ``idle``: no vector served or waiting.
    """

    def __init__(self, m, name, lanes, addr_bits, store_bits, nb_log2, width, skew, data,
                 row=False, segments=0):
        width = lanes if width is None else min(width, lanes)
        row = bool(row) and nb_log2 > 0 and lanes <= (1 << nb_log2)
        segments = 0 if row or not nb_log2 else segments
        self.name = name
        self.lanes = lanes
        self.row = row
        self.want = Signal(name=f"{name}_want")            # (unused by these clients)
        self.load = Signal(name=f"{name}_load")
        self.load_base = Signal(addr_bits, name=f"{name}_load_base")
        self.load_mask = Signal(lanes, name=f"{name}_load_mask")
        self.load_store = Signal(store_bits, name=f"{name}_load_store")
        bank_bits = max(1, nb_log2)
        self.store = Signal(store_bits, name=f"{name}_store")
        self.active = Signal(name=f"{name}_active")
        if row:
            # a row client: lane w is word base + w; only the base's row, the next row, the
            # rotation and the crossing lane are held, and the pending lanes in bank order
            # (_RowPorts). ``load_pre``: row_pre(load_base), computed before the request's
            # FIFO (the load's rotation of the mask then starts at a register)
            self.load_pre = Signal(row_pre_width(addr_bits, nb_log2), name=f"{name}_load_pre")
            self.rowports = _RowPorts(m, name, lanes, addr_bits, nb_log2, skew,
                                      self.load_base, bank_order=True, load_pre=self.load_pre)
        pwidth = self.rowports.pwidth if row else lanes
        self.pending = Signal(pwidth, name=f"{name}_pending")
        nv = Signal(name=f"{name}_next_valid")
        n_mask = Signal(pwidth, name=f"{name}_next_mask")
        n_store = Signal(store_bits, name=f"{name}_next_store")
        # (what the served slot holds, what the waiting one holds, what a load brings)
        fields = [(self.store, n_store, self.load_store)]
        if row:
            self.offsets = None
        else:
            self.offsets = [Signal(addr_bits, name=f"{name}_off{p}") for p in range(lanes)]
            self.addr = [Signal(addr_bits, name=f"{name}_addr{p}") for p in range(lanes)]
            # each lane's bank, registered with its address: the skew's add is then off the
            # request -> grant -> pending loop (docs/u50.md, logic depth)
            self.bank = [Signal(bank_bits, name=f"{name}_bank{p}") for p in range(lanes)]
            n_addr = [Signal(addr_bits, name=f"{name}_next_addr{p}") for p in range(lanes)]
            n_bank = [Signal(bank_bits, name=f"{name}_next_bank{p}") for p in range(lanes)]
            lane_addr = [Signal(addr_bits, name=f"{name}_lane_addr{p}") for p in range(lanes)]
            m.d.comb += [lane_addr[p].eq(self.load_base + self.offsets[p])
                         for p in range(lanes)]
            lane_bank = [_bank_of(a, nb_log2, skew) for a in lane_addr]
            fields += list(zip(self.addr, n_addr, lane_addr))
            fields += list(zip(self.bank, n_bank, lane_bank))
        # row operands: with ``rowmode`` (a vector of consecutive words), the lanes go to
        # the arbiter as ``segments`` row entries of ``lanes / segments`` lanes each (base:
        # the segment's first lane's address), else through the beats
        self.segs = []
        self.rowmode = Signal(name=f"{name}_rowmode")
        if segments:
            ls = lanes // segments
            for f in range(segments):
                rp = _RowPorts(m, f"{name}_s{f}", ls, addr_bits, nb_log2, skew,
                               lane_addr[f * ls])
                fields += rp.fields
                self.segs.append(rp)
        if data:
            self.load_data = [Signal(32, name=f"{name}_load_data{p}") for p in range(lanes)]
        if data and row:                  # the words held per slot (_RowPorts.hold_data)
            self.rowports.hold_data(m, self.load_data)
            self.data = None
        elif data:
            self.data = [Signal(32, name=f"{name}_data{p}") for p in range(lanes)]
            n_data = [Signal(32, name=f"{name}_next_data{p}") for p in range(lanes)]
            fields += list(zip(self.data, n_data, self.load_data))

        if row:
            fields += self.rowports.fields
            self.beats = None
            self.rowports.connect(m, self.pending, self.store, True if data else None)
            self.grant = self.rowports.grant
        elif self.segs:
            ls = lanes // len(self.segs)
            pend_b = Signal(lanes, name=f"{name}_pending_beats")
            pend_r = Signal(lanes, name=f"{name}_pending_rows")
            m.d.comb += [pend_b.eq(Mux(self.rowmode, 0, self.pending)),
                         pend_r.eq(Mux(self.rowmode, self.pending, 0))]
            self.beats = _Beats(m, name, lanes, width, pend_b, self.addr, self.bank)
            for f, rp in enumerate(self.segs):
                rp.connect(m, pend_r[f * ls:(f + 1) * ls], self.store,
                           self.data[f * ls:(f + 1) * ls] if data else None)
            self.grant = Signal(lanes, name=f"{name}_grant_all")
            m.d.comb += self.grant.eq(self.beats.grant | Cat(*[rp.grant for rp in self.segs]))
        else:
            self.beats = _Beats(m, name, lanes, width, self.pending, self.addr, self.bank)
            self.grant = self.beats.grant
        self.finishing = Signal(name=f"{name}_finishing")
        self.can_load = Signal(name=f"{name}_can_load")
        self.idle = Signal(name=f"{name}_idle")
        # The served slot takes a vector when it is idle or finishing (``free``): the load of
        # this cycle if any, else the waiting one (``load`` implies an empty waiting slot).
        # What it takes is selected from registers and ``load`` alone; the grants reach these
        # registers only through ``free``, one 2:1 select (and ``pending & ~grant``).
        free = Signal(name=f"{name}_free")
        m.d.comb += [
            self.finishing.eq(self.active & ((self.pending & ~self.grant) == 0)),
            self.can_load.eq(~nv),
            self.idle.eq(~self.active & ~nv),
            free.eq(~self.active | self.finishing),
        ]
        load_mask = self.rowports.bank_mask(m, self.load_mask) if row else self.load_mask
        take_mask = Mux(self.load, load_mask, Mux(nv, n_mask, 0))
        m.d.sync += [self.pending.eq(Mux(free, take_mask, self.pending & ~self.grant)),
                     self.active.eq(~free | self.load | nv),
                     nv.eq(~free & (nv | self.load))]
        with m.If(free):
            m.d.sync += [cur.eq(Mux(self.load, new, wait)) for cur, wait, new in fields]
        # the waiting slot copies every load (when the served slot takes it, ``next_valid``
        # stays low and the copy is never used)
        with m.If(self.load):
            m.d.sync += [n_mask.eq(load_mask)]
            m.d.sync += [wait.eq(new) for _, wait, new in fields]

    def ports(self):
        """The arbiter entries of this client, for :func:`_arbitrate`: ``(req, store, bank,
        addr, grant)`` of every port, or the one :class:`_RowPorts` of a row client."""
        if self.row:
            return [self.rowports]
        return list(self.segs) + self.beats.ports(self.store)

    def entry_data(self):
        """A writer's write word per arbiter entry of :meth:`ports` (``None``: a row entry,
        whose words are per bank)."""
        if self.row:
            return [None]
        return [None] * len(self.segs) + list(self.port_data)


class _ReadClient(_VectorClient):
    """A :class:`_VectorClient` that reads: when every masked-in lane has been granted,
    ``out_valid`` pulses two cycles later with ``out_data`` (masked lanes read 0)."""

    def __init__(self, m, name, lanes, addr_bits, store_bits, nb_log2, width=None, skew=False,
                 row=False, segments=0):
        super().__init__(m, name, lanes, addr_bits, store_bits, nb_log2, width, skew, False,
                         row, segments)
        width = 0 if self.row else self.beats.width

        # Data return, two cycles after the grant (the stores' inputs are registered, then
        # the RAM's read register): port j's bank, the lanes granted.
        grant_1 = Signal(len(self.grant), name=f"{name}_grant_1")
        valid_1 = Signal(name=f"{name}_valid_1")
        store_1 = Signal(store_bits, name=f"{name}_store_1")
        bank_1 = [Signal(max(1, nb_log2), name=f"{name}_bank_1_{j}") for j in range(width)]
        self.grant_d = Signal(lanes, name=f"{name}_grant_d")
        self.out_valid = Signal(name=f"{name}_out_valid")
        self.store_d = Signal(store_bits, name=f"{name}_store_d")
        self.bank_d = [Signal(max(1, nb_log2), name=f"{name}_bank_d{j}") for j in range(width)]
        self.assembled = [Signal(32, name=f"{name}_asm{p}") for p in range(lanes)]
        self.out_data = [Signal(32, name=f"{name}_out{p}") for p in range(lanes)]
        m.d.sync += [grant_1.eq(self.grant), valid_1.eq(self.finishing),
                     store_1.eq(self.store), self.out_valid.eq(valid_1),
                     self.store_d.eq(store_1)]
        if self.row:                 # the rotation of the granted beat, two cycles on
            rp = self.rowports
            rot_1, cross_1 = Signal.like(rp.rot), Signal.like(rp.cross)
            self.rot_d, self.cross_d = Signal.like(rp.rot), Signal.like(rp.cross)
            m.d.sync += [rot_1.eq(rp.rot), cross_1.eq(rp.cross),
                         self.rot_d.eq(rot_1), self.cross_d.eq(cross_1)]
            # the grants (in bank order) back to the lanes, off the arbitration loop
            m.d.sync += self.grant_d.eq(Cat(*rp.lane_grants(m, grant_1, rot_1, cross_1)))
        else:
            m.d.sync += self.grant_d.eq(grant_1)
            m.d.sync += [bank_1[j].eq(bank) for j, bank in enumerate(self.beats.port_bank)]
            m.d.sync += [self.bank_d[j].eq(bank_1[j]) for j in range(width)]
        self.seg_d = []
        for rp in self.segs:             # each row entry's rotation, two cycles on
            r1, c1 = Signal.like(rp.rot), Signal.like(rp.cross)
            rd, cd = Signal.like(rp.rot), Signal.like(rp.cross)
            m.d.sync += [r1.eq(rp.rot), c1.eq(rp.cross), rd.eq(r1), cd.eq(c1)]
            self.seg_d.append((rd, cd))

    def connect_data(self, m, store_rdata):
        """Wire the read data: ``store_rdata[s][b]`` is bank ``b`` of store ``s``."""
        flat = Array([Array(banks) for banks in store_rdata])
        if self.row:
            # each bank's word of the store read, rotated back to the lanes
            nb = len(store_rdata[0])
            bank_words = []
            for b in range(nb):
                word = Signal(32, name=f"{self.name}_rd{b}")
                m.d.comb += word.eq(Array([banks[b] for banks in store_rdata])[self.store_d])
                bank_words.append(word)
            lane_words = self.rowports.lane_words(m, bank_words, self.rot_d, self.cross_d)
        else:
            W = self.beats.width
            words = []
            for j in range(W):
                word = Signal(32, name=f"{self.name}_rd{j}")
                m.d.comb += word.eq(flat[self.store_d][self.bank_d[j]])
                words.append(word)
            lane_words = [words[p % W] for p in range(self.lanes)]
            if self.segs:                # row entries: the store's banks, rotated per entry
                nb = len(store_rdata[0])
                bank_words = []
                for b in range(nb):
                    word = Signal(32, name=f"{self.name}_rdb{b}")
                    m.d.comb += word.eq(Array([banks[b] for banks in store_rdata])[self.store_d])
                    bank_words.append(word)
                rows = []
                for rp, (rd, cd) in zip(self.segs, self.seg_d):
                    rows += rp.lane_words(m, bank_words, rd, cd)
                lane_words = [Mux(self.rowmode, r, w) for r, w in zip(rows, lane_words)]
        for p in range(self.lanes):
            m.d.comb += self.out_data[p].eq(Mux(self.grant_d[p], lane_words[p],
                                                self.assembled[p]))
            with m.If(self.out_valid):
                m.d.sync += self.assembled[p].eq(0)
            with m.Else():
                m.d.sync += self.assembled[p].eq(self.out_data[p])


class _WriteClient(_VectorClient):
    """A :class:`_VectorClient` that writes ``load_data``; ``port_data`` is each port's word."""

    def __init__(self, m, name, lanes, addr_bits, store_bits, nb_log2, width=None, skew=False,
                 row=False, segments=0):
        super().__init__(m, name, lanes, addr_bits, store_bits, nb_log2, width, skew, True, row,
                         segments)
        self.port_data = None if self.row else self.beats.port_values(self.data, 32)


class _OmegaView:
    """One vector client (A, B, old C or the C writer) of an :class:`_OmegaClient`: the
    interface of :class:`_ReadClient` / :class:`_WriteClient` to the engine. ``load`` (when
    ``can_load``) takes ``load_base``/``load_mask``/``load_store`` (a writer's
    ``load_data``), lane ``p`` accessing word ``load_base + offsets[p]``; a read's vector
    comes out on ``out_valid``/``out_data`` in load order, a write's completion pulses
    ``finishing``."""

    def __init__(self, name, lanes, addr_bits, store_bits, write):
        self.name, self.lanes = name, lanes
        self.rowmode = Signal(name=f"{name}_rowmode")      # (no row entries on this route)
        self.want = Signal(name=f"{name}_want")            # a vector waits to load
        self.urgent = Signal(name=f"{name}_urgent")        # goes before the others' wants
        self.load = Signal(name=f"{name}_load")
        self.load_base = Signal(addr_bits, name=f"{name}_load_base")
        self.load_mask = Signal(lanes, name=f"{name}_load_mask")
        self.load_store = Signal(store_bits, name=f"{name}_load_store")
        self.offsets = [Signal(addr_bits, name=f"{name}_off{p}") for p in range(lanes)]
        self.can_load = Signal(name=f"{name}_can_load")
        if write:
            self.load_data = [Signal(32, name=f"{name}_load_data{p}") for p in range(lanes)]
            self.finishing = Signal(name=f"{name}_finishing")
        else:
            self.out_valid = Signal(name=f"{name}_out_valid")
            self.out_data = [Signal(32, name=f"{name}_out{p}") for p in range(lanes)]


class _OmegaClient:
    """Vector clients of the engine through one Omega port (``route="omega"``: the A, B and
    old-C fetchers each through an :class:`~ttrain.rtl.omega.OmegaReadPort` and the C writer
    through an :class:`~ttrain.rtl.omega.OmegaWritePort`; ``route="omega-shared"``: A, B and
    old C in turns through one read port), docs/wide-engine.md (ninth session).

    ``views``: ``[(name, lanes), ...]``, each an :class:`_OmegaView` (``self.views``) the
    engine drives like a :class:`_ReadClient` / :class:`_WriteClient` (a writer has one).
    The port is as wide as the widest; the views take turns (round robin among those that
    ``want`` to load: a fixed order let one operand fill every slot before the next could
    start), and a view whose ``urgent`` is high goes before the others while it wants (the
    engine makes old C urgent once A and B each have a vector loaded: a tile's first
    k-step waits for its old-C rows, docs/wide-engine.md, tenth session). Unlike the per-lane
    clients, up to the port's ``tickets`` vectors are in flight at once (the engine's credits
    bound them), and a vector's latency is its
    passes through the request network times ``round_trip``
    (:func:`ttrain.golden.isa.omega_read_schedule`). Each request carries its store as the
    port's tag to the banks, so vectors of different stores may be in flight together; the
    vectors leave in load order and a small FIFO of view numbers says whose each one is.

    To the arbiter it is one entry that claims, per bank, the request the port's network
    delivered there this cycle (:meth:`hot`); a bank taken by a higher-priority entry refuses
    it and the port sends that lane again in its slot's next turn.
    """

    def __init__(self, m, name, views, addr_bits, store_bits, nb_log2, skew, *, write,
                 latency):
        from .omega import OmegaReadPort, OmegaWritePort
        if write and len(views) != 1:
            raise ValueError("_OmegaClient: a write port has one view")
        self.name, self.nb_log2, self.store_bits = name, nb_log2, store_bits
        self.write = bool(write)
        self.views = [_OmegaView(n, lanes, addr_bits, store_bits, write) for n, lanes in views]
        L = max(v.lanes for v in self.views)
        cls = OmegaWritePort if write else OmegaReadPort
        self.port = port = cls(L, addr_bits, banks=1 << nb_log2, skew=skew,
                               latency=1 if write else latency, tag_bits=store_bits)
        self.latency = 1 if write else latency
        m.submodules[f"{name}_omega"] = port
        nv = len(self.views)
        who = None
        if nv > 1:                               # whose vector leaves next (load order)
            who = m.submodules[f"{name}_who"] = fifo.SyncFIFO(width=ceil_log2(nv),
                                                              depth=port.tickets)
        room = port.i.ready if who is None else port.i.ready & who.w_rdy
        if nv == 1:
            m.d.comb += self.views[0].can_load.eq(room)
        else:
            # round robin among the views that want to load (the one served last goes
            # last), among the urgent ones while any urgent view wants
            last = Signal(range(nv), name=f"{name}_last")
            rush = Signal(name=f"{name}_rush")
            m.d.comb += rush.eq(Cat(*[v.urgent & v.want for v in self.views]).any())
            eligible = [v.urgent | ~rush for v in self.views]
            for k, v in enumerate(self.views):
                ahead = []                       # per rotation: an eligible view before k wants
                for r in range(nv):
                    order = [(r + 1 + i) % nv for i in range(nv)]
                    ahead.append(Cat(*[self.views[j].want & eligible[j]
                                       for j in order[:order.index(k)]]).any())
                m.d.comb += v.can_load.eq(room & eligible[k] & ~Array(ahead)[last])
            with m.If(port.i.valid & port.i.ready):
                m.d.sync += last.eq(_first_index([v.load for v in self.views], len(last)))
        sel = [v.load for v in self.views]
        taken = Cat(*sel).any()
        req = port.i.payload
        m.d.comb += [port.i.valid.eq(taken), port.o.ready.eq(1)]
        addr = [Const(0, addr_bits)] * L
        mask, store = Const(0, L), Const(0, store_bits)
        words = [Const(0, 32)] * L
        for k, v in reversed(list(enumerate(self.views))):
            go = sel[k]
            addr = [Mux(go, v.load_base + v.offsets[p], addr[p]) if p < v.lanes else addr[p]
                    for p in range(L)]
            mask = Mux(go, v.load_mask, mask)
            store = Mux(go, v.load_store, store)
            if write:
                words = [Mux(go, v.load_data[p], words[p]) if p < v.lanes else words[p]
                         for p in range(L)]
        m.d.comb += [req.addr[p].eq(addr[p]) for p in range(L)]
        m.d.comb += [req.mask.eq(mask), req.tag.eq(store)]
        if write:
            m.d.comb += [req.data[p].eq(words[p]) for p in range(L)]
            m.d.comb += self.views[0].finishing.eq(port.o.valid)
            self.bank_data = [port.bank[b].data for b in range(1 << nb_log2)]
        else:
            if who is not None:
                m.d.comb += [who.w_en.eq(port.i.valid & port.i.ready),
                             who.w_data.eq(_first_index(sel, len(who.w_data))),
                             who.r_en.eq(port.o.valid)]
            for k, v in enumerate(self.views):
                mine = port.o.valid if who is None else port.o.valid & (who.r_data == k)
                m.d.comb += [v.out_valid.eq(mine)]
                m.d.comb += [v.out_data[p].eq(port.o.payload[p]) for p in range(v.lanes)]
        self.grant = port.grant

    def ports(self):
        """The one arbiter entry of this client (for :func:`_arbitrate`)."""
        return [self]

    def entry_data(self):
        """A writer's word per arbiter entry: ``None``, the words are per bank."""
        return [None]

    def hot(self, m, n_stores):
        """The (store, bank) pairs this entry claims (``n_stores x banks`` bits)."""
        NB = 1 << self.nb_log2
        hot = Signal(n_stores * NB, name=f"{self.name}_hot")
        m.d.comb += hot.eq(Cat(*[self.port.bank[b].valid & (self.port.bank[b].tag == s)
                                 for s in range(n_stores) for b in range(NB)]))
        return hot

    def drive_grant(self, m, taken, n_stores):
        """Grant each bank's request unless ``taken`` (the higher-priority entries' claims,
        ``n_stores x banks`` bits, or ``None``) holds that bank of the request's store."""
        NB = 1 << self.nb_log2
        if taken is None:
            m.d.comb += self.grant.eq(Cat(*[self.port.bank[b].valid for b in range(NB)]))
            return
        blocked = Signal(NB, name=f"{self.name}_blocked")
        for b in range(NB):
            col = Cat(*[taken[s * NB + b] for s in range(n_stores)])
            m.d.comb += blocked[b].eq(col.bit_select(self.port.bank[b].tag, 1))
        m.d.comb += self.grant.eq(Cat(*[self.port.bank[b].valid & ~blocked[b]
                                        for b in range(NB)]))

    def bank_value(self, b, rbits_total, nb_log2):
        """The word address at bank ``b`` (its row; the bank bits zero)."""
        return Cat(Const(0, nb_log2), self.port.bank[b].row)

    def connect_data(self, m, store_rdata):
        """Wire the read data: ``store_rdata[s][b]`` is bank ``b`` of store ``s``, selected by
        the store of the request granted there ``latency`` cycles ago."""
        for b in range(1 << self.nb_log2):
            tag = self.port.bank[b].tag
            for j in range(self.latency):
                nxt = Signal(self.store_bits, name=f"{self.name}_tag{b}_{j}")
                m.d.sync += nxt.eq(tag)
                tag = nxt
            m.d.comb += self.port.rdata[b].eq(Array([banks[b] for banks in store_rdata])[tag])


def _first_index(hits, width):
    """The index of the first high bit of ``hits`` (0 if none), ``width`` bits."""
    out = Const(0, width)
    for k in reversed(range(len(hits))):
        out = Mux(hits[k], k, out)
    return out


def _arbitrate(m, name, lanes, n_stores, nb_log2, data=None):
    """Grant each (store, bank) to the first requesting lane of ``lanes``.

    ``lanes`` is a list of arbiter entries in priority order: ``(req, store, bank, addr,
    grant)`` of one port (``grant`` is driven here), or a :class:`_RowPorts` (a row client's
    lanes, granted here as if they were separate entries in lane order) or an
    :class:`_OmegaClient` (the requests its network delivers to the banks this cycle).
    ``data``: per entry,
    its write word (a port) or ``None`` (a row entry, whose words are per bank). Returns
    ``sel[s][b]``: per entry in priority order a ``(hit, addr)`` pair, or with ``data`` a
    ``(hit, addr, word)`` triple, ``hit`` high when the entry requests (s, b); the first
    entry with ``hit`` high is the one granted there (:func:`_first` selects it without the
    grants). A row entry's ``addr`` has the row of its word at that bank and zero bank bits.
    """
    nb = 1 << nb_log2
    n_sb = n_stores * nb
    sel = [[[] for _ in range(nb)] for _ in range(n_stores)]
    hots = []
    for i, entry in enumerate(lanes):
        if not isinstance(entry, tuple):             # a _RowPorts or an _OmegaClient
            hots.append(entry.hot(m, n_stores))
            continue
        req, store, bank, addr, grant = entry
        hot = Signal(n_sb, name=f"{name}_hot{i}")
        key = Cat(bank, store) if nb_log2 else store
        # a decoder, not a shift of 1 by the key: Yosys maps the shift as a 5-stage barrel
        # shifter whose stages ABC kept (docs/u50.md). A Switch rather than one compare per
        # (store, bank): the same LUT5 per bit in Yosys, but one dispatch per lane in the
        # simulators (the compares made the Amaranth simulation of a skewed engine 4x slower)
        with m.If(req):
            with m.Switch(key):
                for k in range(n_sb):
                    with m.Case(k):
                        m.d.comb += hot.eq(1 << k)
        hots.append(hot)
    # (store, bank) pairs taken by the higher-priority lanes: a parallel prefix OR
    # (log levels, blocked; see _prefix_or), not a chain through every lane (docs/u50.md)
    incl = _prefix_or(m, f"{name}_prefix", hots)
    for i, entry in enumerate(lanes):
        hot = hots[i]
        if not isinstance(entry, tuple):
            entry.drive_grant(m, incl[i - 1] if i else None, n_stores)
            for s in range(n_stores):
                for b in range(nb):
                    pair = (hot[s * nb + b], entry.bank_value(b, None, nb_log2))
                    if data is not None:
                        pair += (entry.bank_data[b],)
                    sel[s][b].append(pair)
            continue
        req, store, bank, addr, grant = entry
        if i:
            m.d.comb += grant.eq(req & ((hot & incl[i - 1]) == 0))
        else:
            m.d.comb += grant.eq(req)
        for s in range(n_stores):
            for b in range(nb):
                pair = (hot[s * nb + b], addr)
                if data is not None:
                    pair += (data[i],)
                sel[s][b].append(pair)
    return sel


def _first(pairs, width):
    """``(any, value)`` of ``(hit, value)`` pairs in priority order: whether any ``hit`` is
    high, and the ``value`` of the first pair whose ``hit`` is (unspecified if none).

    A balanced tree of 3-way priority selects (``h0 ? v0 : h1 ? v1 : v2``, one LUT5 per
    bit: ``log3(n)`` levels). It needs no grants: a store's address and write data no
    longer wait for the arbiter's prefix OR. Selecting with the grants (an OR of
    ``grant & value``) made the prefix OR and the select one path, and ABC mapped it as a
    chain through every port (28 levels at 8 lanes; docs/u50.md, 2026-12-02).
    """
    nodes = [(Value.cast(h), Value.cast(v)) for h, v in pairs]
    if not nodes:
        return Const(0, 1), Const(0, width)
    while len(nodes) > 1:
        nxt = []
        for i in range(0, len(nodes), 3):
            group = nodes[i:i + 3]
            hit, value = group[-1]
            for h, v in reversed(group[:-1]):
                hit, value = h | hit, Mux(h, v, value)
            nxt.append((hit, value))
        nodes = nxt
    return nodes[0]


#: Values per block of :func:`_prefix_or`.
_PREFIX_BLOCK = 8


def _prefix_or(m, name, values):
    """Inclusive prefix ORs ``[v0, v0 | v1, ...]`` of ``values`` in ``O(log n)`` levels.

    Up to :data:`_PREFIX_BLOCK` values: Sklansky (each half's prefixes, the right half's ORed
    with the left half's total). More: blocks of that many values, each block's own prefixes
    ORed with the prefix of the earlier blocks' totals (this function over the totals). The
    block totals are ``keep`` wires. Without them Yosys's ABC9 (its ``&dc2`` rewriting) turns
    any prefix network into the chain ``incl[i] = incl[i - 1] | v[i]``, the fewest gates and
    one LUT level per ~5 values: a Sklansky prefix of 104 one-bit values mapped to 11-13
    levels, blocked with kept totals to 5, at the same LUT count (docs/u50.md, 2026-12-02).
    """
    if len(values) > _PREFIX_BLOCK:
        n, w = len(values), len(Value.cast(values[0]))
        blocks = [values[lo:lo + _PREFIX_BLOCK] for lo in range(0, n, _PREFIX_BLOCK)]
        totals = []
        for j, blk in enumerate(blocks):
            t = Signal(w, name=f"{name}_total{j}_{n}", attrs={"keep": 1})
            m.d.comb += t.eq(_or_tree(blk, w))
            totals.append(t)
        before = _prefix_or(m, f"{name}_blocks{n}_", totals)
        out = []
        for j, blk in enumerate(blocks):
            own = _sklansky_or(m, f"{name}_b{j}_{n}_", blk)
            if j == 0:
                out += own
                continue
            for i, v in enumerate(own):
                sig = Signal(w, name=f"{name}{j * _PREFIX_BLOCK + i}_{n}")
                m.d.comb += sig.eq(v | before[j - 1])
                out.append(sig)
        return out
    return _sklansky_or(m, name, values)


def _sklansky_or(m, name, values):
    """Inclusive prefix ORs of ``values`` in ``ceil(log2(n))`` levels (Sklansky)."""
    def build(vals, lo):
        if len(vals) == 1:
            return list(vals)
        h = (len(vals) + 1) // 2
        left, right = build(vals[:h], lo), build(vals[h:], lo + h)
        out = []
        for j, r in enumerate(right):
            sig = Signal(len(r), name=f"{name}{lo + h + j}_{len(vals)}")
            m.d.comb += sig.eq(r | left[-1])
            out.append(sig)
        return left + out
    return build(values, 0)


def _or_tree(values, width):
    """The OR of ``values`` as a balanced tree (``log2(n)`` levels) instead of a left-deep
    ``reduce`` (a chain of ``n`` ORs in the RTL). The 8-lane top measured the same 28 levels
    either way (ABC balances the chain itself; docs/u50.md), so this is structure, not the
    fix of that path."""
    values = list(values)
    if not values:
        return Const(0, width)
    while len(values) > 1:
        values = [values[i] | values[i + 1] if i + 1 < len(values) else values[i]
                  for i in range(0, len(values), 2)]
    return values[0]


def _or_mux(pairs, width):
    """Return the OR of ``value`` over ``(select, value)`` pairs (selects are one-hot)."""
    return _or_tree([Mux(s, v, 0) for s, v in pairs], width)


class ContractionEngine(wiring.Component):
    """``lanes`` FP32 multiply-accumulate lanes computing one descriptor over banked stores.

    Golden: :func:`ttrain.golden.contract.contract`. One issue per cycle at full rate
    (``lanes`` MACs); see the module docstring for the micro-architecture, the host port and
    the control protocol.

    Parameters
    ----------
    lanes : int
        MAC lanes (power of two, 1..256); also the width of a tile.
    stores : list of StoreSpec
        The stores, in store-id order.
    banks : int or None
        Banks per store (power of two); default ``lanes``. Also the host beat width.
    slots : int or None
        Interleaved output rows per tile (power of two, at least the adder latency + 1);
        default ``max(lanes, adder latency + 1)`` rounded up to a power of two.
    dim_bits : int
        Width of ``m``, ``n``, ``k`` and ``batch`` (limit ``2**dim_bits - 1``).
    fetch_depth : int or None
        A and B vectors fetched ahead (at least 2 = double buffering); default 4, or with an
        Omega ``route`` at least the A port's round trip (its vectors in flight at once:
        fewer throttle a many-pass vector stream, :func:`ttrain.golden.isa.omega_round_trip`).
    mul_unit, add_unit : class or None
        FP32 multiplier / adder components (default :class:`~ttrain.rtl.fp32.FP32Mul` /
        :class:`~ttrain.rtl.fp32.FP32Add`): ``i``/``o`` streams as those and a ``latency``
        property; the latencies set the pipeline and the minimum ``slots``.
    ports : int
        Store ports for other units (``port0`` ..), served at all times, busy or not, at a
        lower priority than the engine's own fetchers and writer (see :mod:`ttrain.rtl.port`).
    integer : bool
        Build the integer mode (default). Without it an integer descriptor runs as FP32: only
        for reuse in FP32-only designs and for measuring the mode's cost.
    max_split : int
        Largest descriptor ``split`` (power of two, 1..lanes; default 1 = no lane groups):
        the lanes run in ``split`` groups of ``lanes / split`` columns, each group a part of
        the k range, and a fold tree of ``lanes - lanes / max_split`` adders sums the parts
        (module docstring). A larger ``split`` is :data:`~ttrain.golden.contract.ERROR_DIM`.
    fetch_words : int or None
        Ports of each operand fetcher (A, B, old C) and of the C writer to the stores' arbiter
        (power of two, 1..lanes): a vector moves in beats of at most ``fetch_words`` words per
        cycle, so the arbiter and the read-data crossbar grow with ``fetch_words x banks``
        instead of ``lanes x banks`` (module docstring, "Beats"). Default ``None``: one port
        per lane, every vector in one beat.
    bank_skew : bool
        Word ``a`` in bank ``(a + a // banks) % banks`` instead of ``a % banks`` (row ``a //
        banks`` either way): each row of the stores rotated by one bank more than the last, so
        a vector whose stride is an odd multiple of ``banks`` (a k-contiguous operand with a
        leading dimension of 96 on 32 banks) hits every bank once instead of one bank
        ``lanes`` times. A beat of fewer than ``banks`` consecutive words stays conflict-free;
        a full ``banks``-word beat that is not row-aligned takes two cycles.
    port_width : int or None
        Words per beat of the store ports (power of two, 1..banks; default ``banks``): the
        width of the units behind them (the vector and update units), which need not grow
        with the engine (docs/wide-engine.md: at 256 lanes their lanes would be most of the
        chip's DSPs). Lane ``w`` of a beat is word ``addr + w`` as before.
    port_reads : sequence of int or None
        Vectors per read request of each store port (1 or 2; default 1 each): a port with 2
        serves a request's second vector (``addr2``, ``mask2``; :mod:`ttrain.rtl.port`)
        through a second read client beside the first, loaded in the same cycle, and
        returns both in one beat, so the vector unit reads both sources of an element beat
        at once. The second client is an arbiter entry after every other.
    row_ports : bool
        Serve the host port and the store ports as row clients (default): one arbiter entry
        per client whose bank claims, rows and data are the beat rotated by its base's bank,
        instead of one entry per lane each decoding its bank. The same grants and cycles; the
        arbiter's entries no longer grow with those clients' widths. ``False`` builds the
        per-lane entries (kept to measure the difference).

    Members
    -------
    desc : ``In(stream.Signature(descriptor_layout(...)))``
        The descriptor stream; ready while idle, a transfer starts a run.
    busy, done, error : ``Out(1)``
        Status; ``done`` and ``error`` stay set until the next transfer.
    error_code : ``Out(3)``
        :data:`ttrain.golden.contract.ERROR_CODES` of the last run.
    cycles : ``Out(32)``
        Cycles of the last (or current) run.
    host_i : ``In(stream.Signature(host_request_layout(...)))``
        Host load / read-back beats.
    host_o : ``Out(stream.Signature(data.ArrayLayout(32, banks)))``
        Read-back data, one beat per read beat.
    port0, port1, ... : ``In(StorePortSignature(...))``
        The store ports (``ports`` of them), see :mod:`ttrain.rtl.port`. The engine does not
        order a port's accesses against its own: the sequencer's scoreboard keeps a unit off
        the words a running contraction reads or writes.
    """

    def __init__(self, *, lanes, stores, banks=None, slots=None, dim_bits=16, fetch_depth=None,
                 mul_unit=None, add_unit=None, ports=0, integer=True, max_split=1,
                 fetch_words=None, bank_skew=False, port_width=None, row_ports=True,
                 row_operands=False, route=None, port_reads=None):
        from .fp32 import FP32Add, FP32Mul
        if not isinstance(lanes, int) or isinstance(lanes, bool) or not 1 <= lanes <= 256 \
                or lanes & (lanes - 1):
            raise ValueError(f"lanes must be a power of two in 1..256, not {lanes!r}")
        banks = lanes if banks is None else banks
        if not isinstance(banks, int) or isinstance(banks, bool) or banks < 1 \
                or banks & (banks - 1):
            raise ValueError(f"banks must be a power of two, not {banks!r}")
        if not isinstance(stores, (list, tuple)) or not stores \
                or not all(isinstance(s, StoreSpec) for s in stores):
            raise TypeError(f"stores must be a non-empty list of StoreSpec, not {stores!r}")
        names = [s.name for s in stores]
        if len(set(names)) != len(names):
            raise ValueError(f"store names must be unique, got {names}")
        if not isinstance(dim_bits, int) or not 2 <= dim_bits <= 24:
            raise ValueError(f"dim_bits must be an integer in 2..24, not {dim_bits!r}")
        if fetch_depth is not None and (not isinstance(fetch_depth, int) or fetch_depth < 2):
            raise ValueError(f"fetch_depth must be an integer >= 2 (double buffering), "
                             f"not {fetch_depth!r}")
        if isinstance(ports, bool) or not isinstance(ports, int) or not 0 <= ports <= 8:
            raise ValueError(f"ports must be an integer in 0..8 (store ports for the vector "
                             f"and update units), not {ports!r}")
        if isinstance(max_split, bool) or not isinstance(max_split, int) or max_split < 1 \
                or max_split & (max_split - 1) or max_split > lanes:
            raise ValueError(f"max_split must be a power of two in 1..lanes ({lanes}), not "
                             f"{max_split!r}")
        if fetch_words is not None and (
                isinstance(fetch_words, bool) or not isinstance(fetch_words, int)
                or fetch_words < 1 or fetch_words & (fetch_words - 1) or fetch_words > lanes):
            raise ValueError(f"fetch_words must be a power of two in 1..lanes ({lanes}), not "
                             f"{fetch_words!r}")
        port_width = banks if port_width is None else port_width
        if isinstance(port_width, bool) or not isinstance(port_width, int) or port_width < 1 \
                or port_width & (port_width - 1) or port_width > banks:
            raise ValueError(f"port_width must be a power of two in 1..banks ({banks}), not "
                             f"{port_width!r}")
        if route not in (None, "omega", "omega-shared"):
            raise ValueError(f"route must be None (the arbiter's per-lane requests), \"omega\" "
                             f"(an Omega port per fetcher and the C writer) or "
                             f"\"omega-shared\" (A, B and old C through one), not {route!r}")
        if route is not None and (banks < 2 or fetch_words is not None or row_operands):
            raise ValueError(f"route={route!r} needs banks >= 2 (got {banks}), whole-vector "
                             f"fetches (fetch_words=None, got {fetch_words!r}) and "
                             f"row_operands=False (got {row_operands!r}): its ports carry "
                             f"whole vectors through the network")
        port_reads = (1,) * ports if port_reads is None else tuple(port_reads)
        if len(port_reads) != ports or any(isinstance(r, bool) or r not in (1, 2)
                                           for r in port_reads):
            raise ValueError(f"port_reads must give 1 or 2 read vectors for each of the "
                             f"{ports} store ports, not {port_reads!r}")
        self._port_reads = port_reads
        self._route = route
        self._port_width = port_width
        self._row_ports = bool(row_ports)
        self._row_operands = bool(row_operands) and banks > 1
        self._fetch_words = fetch_words
        self._bank_skew = bool(bank_skew)
        self._max_split = max_split
        self._ports = ports
        self._integer = bool(integer)
        self._mul_unit = mul_unit or FP32Mul
        self._add_unit = add_unit or FP32Add
        self._mul_latency = latency_of(self._mul_unit)
        self._add_latency = latency_of(self._add_unit)
        min_slots = self._add_latency + 1
        if slots is None:
            slots = 1 << ceil_log2(max(lanes, min_slots))
        if not isinstance(slots, int) or isinstance(slots, bool) or slots < 1 \
                or slots & (slots - 1):
            raise ValueError(f"slots must be a power of two, not {slots!r}")
        if slots < min_slots:
            raise ValueError(
                f"slots = {slots} cannot hide the adder latency ({self._add_latency} cycles): "
                f"use slots >= {min_slots} (a power of two, e.g. {1 << ceil_log2(min_slots)})")
        self._lanes = lanes
        self._banks = banks
        self._slots = slots
        self._dim_bits = dim_bits
        if fetch_depth is None:                 # the A port's vectors in flight (omega)
            fetch_depth = 4 if route is None else \
                max(4, omega_round_trip(max(lanes, slots * max_split, banks)))
        self._fetch_depth = fetch_depth
        self._stores = []
        for spec in stores:                     # built here to validate and report early;
            st = BankedStore(depth=spec.depth, banks=banks, style=spec.style,
                             impl=spec.impl, name=spec.name)
            st._MustUse__silence = True          # an engine used only to encode is fine
            self._stores.append(st)
        self._store_names = names
        self._store_bits = max(1, ceil_log2(len(stores)))
        self._addr_bits = max(1, max(ceil_log2(s.depth) for s in stores))
        self._desc_layout = descriptor_layout(self._store_bits, self._addr_bits, dim_bits)
        self._host_layout = host_request_layout(self._store_bits, self._addr_bits, banks)
        self._port_sig = StorePortSignature(store_bits=self._store_bits,
                                            addr_bits=self._addr_bits, width=port_width)
        self._port_sigs = [StorePortSignature(store_bits=self._store_bits,
                                              addr_bits=self._addr_bits, width=port_width,
                                              reads=r) for r in port_reads]
        members = {f"port{i}": In(sig) for i, sig in enumerate(self._port_sigs)}
        super().__init__({**members,
            "desc": In(stream.Signature(self._desc_layout)),
            "busy": Out(1), "done": Out(1), "error": Out(1), "error_code": Out(3),
            "cycles": Out(32),
            "host_i": In(stream.Signature(self._host_layout)),
            "host_o": Out(stream.Signature(data.ArrayLayout(32, banks))),
        })

    lanes = property(lambda self: self._lanes, doc="MAC lanes.")
    mul_unit = property(lambda self: self._mul_unit, doc="FP32 multiplier class of the lanes.")
    add_unit = property(lambda self: self._add_unit,
                        doc="FP32 adder class of the lanes and the fold tree.")
    bank_skew = property(lambda self: self._bank_skew, doc="Rows skewed across the banks.")
    route = property(lambda self: self._route,
                     doc="How the A, B, old-C and C vectors reach the banks: ``None`` (each "
                         "lane a request to the arbiter), ``\"omega\"`` (an Omega port "
                         "each) or ``\"omega-shared\"`` (A, B and old C in turns through "
                         "one read port; :class:`_OmegaClient`, docs/wide-engine.md).")
    row_operands = property(lambda self: self._row_operands,
                            doc="B, old-C and C vectors of consecutive words go to the "
                                "arbiter as row entries (one per lane group).")
    fetch_words = property(lambda self: self._fetch_words,
                           doc="Words per cycle each operand fetcher and the C writer move "
                               "(``None``: a whole vector).")
    max_split = property(lambda self: self._max_split,
                         doc="Largest descriptor ``split`` (lane groups).")
    ports = property(lambda self: self._ports, doc="Store ports for other units.")
    port_width = property(lambda self: self._port_width,
                          doc="Words per beat of the store ports (at most ``banks``).")
    port_signature = property(lambda self: self._port_sig,
                              doc="The :class:`~ttrain.rtl.port.StorePortSignature` of a port "
                                  "with one read vector.")
    port_reads = property(lambda self: self._port_reads,
                          doc="Read vectors per request of each store port (1 or 2).")
    banks = property(lambda self: self._banks, doc="Banks per store (= host beat width).")
    slots = property(lambda self: self._slots, doc="Interleaved output rows per tile.")
    dim_bits = property(lambda self: self._dim_bits, doc="Width of the dimension fields.")
    addr_bits = property(lambda self: self._addr_bits, doc="Width of addresses and strides.")
    store_names = property(lambda self: list(self._store_names), doc="Store names by id.")
    mul_latency = property(lambda self: self._mul_latency, doc="Multiplier latency (cycles).")
    add_latency = property(lambda self: self._add_latency, doc="Adder latency (cycles).")

    @property
    def max_dim(self):
        """Largest ``m``, ``n``, ``k`` and ``batch``."""
        return (1 << self._dim_bits) - 1

    @property
    def store_sizes(self):
        """``{name: words}`` of every store."""
        return {s.name: s.depth for s in self._stores}

    @property
    def stores(self):
        """The :class:`~ttrain.rtl.store.BankedStore` of every store (elaborated inside)."""
        return tuple(self._stores)

    def encode_descriptor(self, desc):
        """Return the ``desc`` port value (int) for a golden ``Descriptor``.

        Raises :class:`ValueError` if a store is unknown or a field does not fit the port (the
        engine could not even be told about it).
        """
        def view(v):
            if v.store not in self._store_names:
                raise ValueError(f"store {v.store!r} is not one of {self._store_names}")
            fields = {"store": self._store_names.index(v.store)}
            for name in ("base", "row_stride", "col_stride", "batch_stride"):
                value = getattr(v, name)
                if value >= 1 << self._addr_bits:
                    raise ValueError(f"{name} = {value} does not fit the engine's "
                                     f"{self._addr_bits}-bit addresses: use a larger store "
                                     f"or a smaller {name}")
                fields[name] = value
            return fields
        for name in ("m", "n", "k", "batch"):
            if getattr(desc, name) > self.max_dim:
                raise ValueError(f"{name} = {getattr(desc, name)} exceeds the engine limit "
                                 f"{self.max_dim} (dim_bits = {self._dim_bits}): split it")
        return _pack(self._desc_layout, {
            "m": desc.m, "n": desc.n, "k": desc.k, "batch": desc.batch,
            "accumulate": int(desc.accumulate), "integer": int(desc.integer),
            "split": desc.split.bit_length() - 1,
            "a": view(desc.a), "b": view(desc.b),
            "c": view(desc.c)})

    def encode_host_beat(self, *, write, store, addr, mask, words=()):
        """Return the ``host_i.payload`` value (int) of one host beat."""
        words = list(words) + [0] * (self._banks - len(words))
        return _pack(self._host_layout, {"write": int(write),
                                          "store": self._store_names.index(store),
                                          "addr": addr, "mask": mask, "data": words})

    def issue_cycles(self, desc):
        """Return the analytical cycle count of ``desc``: the golden cycle model
        :func:`ttrain.golden.isa.engine_cycles` at this engine's lanes, slots, banks, beats
        and FP32 latencies (issue cycles, the fixed fill and drain of :attr:`overhead_cycles`,
        the fold tree's adder latencies of a split, the first k-step's bank conflicts)."""
        return engine_cycles(desc, self._lanes, self._slots, mul_latency=self._mul_latency,
                             add_latency=self._add_latency, fetch_words=self._fetch_words,
                             banks=self._banks, bank_skew=self._bank_skew,
                             row_operands=self._row_operands, route=self._route,
                             omega_lanes=self._slots * self._max_split)

    def best_orientation(self, desc):
        """Return ``desc`` or ``desc.transposed()``, whichever :meth:`issue_cycles` says is
        faster on this engine (ties keep ``desc``). Both give the same words bit for bit."""
        flipped = desc.transposed()
        return flipped if self.issue_cycles(flipped) < self.issue_cycles(desc) else desc

    def best_split(self, desc):
        """Return ``desc`` with the ``split`` (1 .. :attr:`max_split`) of the fewest
        :meth:`issue_cycles` (:func:`ttrain.golden.isa.best_split`)."""
        return best_split(desc, self._lanes, self._slots, self._max_split,
                          mul_latency=self._mul_latency, add_latency=self._add_latency,
                          fetch_words=self._fetch_words, banks=self._banks,
                          bank_skew=self._bank_skew, row_operands=self._row_operands,
                          route=self._route, omega_lanes=self._slots * self._max_split)

    @property
    def overhead_cycles(self):
        """Fixed cycles per descriptor: 4 check, 5 first fetch, 1 issue register, the multiply
        and add latencies, 3 write-back and 2 to raise ``done``."""
        return 4 + 5 + 1 + self._mul_latency + self._add_latency + 3 + 2

    def ideal_cycles(self, desc):
        """Return ``ceil(MACs / lanes)`` for a descriptor."""
        return -(-desc.macs // self._lanes)

    def elaborate(self, platform):
        m = Module()
        P, S, NB = self._lanes, self._slots, self._banks
        lp, ls, lnb = exact_log2(P), exact_log2(S), exact_log2(NB)
        AB, DB, SB = self._addr_bits, self._dim_bits, self._store_bits
        n_stores = len(self._stores)
        AW = AB + max(lp, ls, lnb) + 2          # lane addresses of masked lanes may overflow AB
        G = self._max_split                       # lane groups (split parts) at most
        SL = exact_log2(G)

        for st in self._stores:
            m.submodules[f"store_{st.name}"] = st

        # ---- control -------------------------------------------------------------------
        d = Signal(self._desc_layout, name="d")           # latched descriptor
        running = Signal()
        checking = Signal()
        m.d.comb += self.busy.eq(running | checking)
        start = Signal()                                  # a descriptor transfer: a new run
        # (a descriptor waits for the host beats already accepted: they land first)
        host_empty = Signal()
        m.d.comb += [self.desc.ready.eq(~self.busy & host_empty),
                     start.eq(self.desc.valid & ~self.busy & host_empty)]
        with m.If(self.busy):
            m.d.sync += self.cycles.eq(self.cycles + 1)

        # ---- clients -------------------------------------------------------------------
        FW = self._fetch_words
        SK = self._bank_skew
        ra = _ReadClient(m, "fa", S * G, AW, SB, lnb, FW, SK)  # A vectors (S words down a column
                                                        # per lane group)
        omega = []                              # the _OmegaClients (arbiter entries)
        if self._route is not None:
            # the stores answer a read two cycles after its grant (registered address, RAM)
            def client(name, views, write=False):
                cl = _OmegaClient(m, name, views, AW, SB, lnb, SK, write=write, latency=2)
                omega.append(cl)
                return cl.views
        else:
            client = None
        # row operands: B in one row entry per lane group (at most ``banks`` lanes each),
        # old C and the C results in entries of ``banks`` lanes
        seg_b = max(G, P // NB) if self._row_operands else 0
        seg_c = max(1, P // NB) if self._row_operands else 0
        rb = _ReadClient(m, "fb", P, AW, SB, lnb, FW, SK, segments=seg_b)  # B vectors (P words
                                                                            # along a row)
        rc = _ReadClient(m, "fc", P, AW, SB, lnb, FW, SK, segments=seg_c)  # old C (accumulate)
        if self._route == "omega":
            (ra,), (rb,), (rc,) = (client("fa", [("fa", S * G)]), client("fb", [("fb", P)]),
                                   client("fc", [("fc", P)]))
        elif self._route == "omega-shared":     # A, B and old C take turns
            ra, rb, rc = client("fr", [("fa", S * G), ("fb", P), ("fc", P)])
        RW = self._row_ports
        rh = _ReadClient(m, "hr", NB, AW, SB, lnb, None, SK, RW)    # host read
        wc = _WriteClient(m, "wc", P, AW, SB, lnb, FW, SK, segments=seg_c)  # C results
        if client is not None:
            (wc,) = client("wc", [("wc", P)], write=True)
        wh = _WriteClient(m, "hw", NB, AW, SB, lnb, None, SK, RW)   # host write

        PW = self._port_width
        prs = [_ReadClient(m, f"p{i}r", PW, AW, SB, lnb, None, SK, RW)
               for i in range(self._ports)]
        # a port's second read vector (port_reads 2): its own client, after every other
        prs2 = {i: _ReadClient(m, f"p{i}q", PW, AW, SB, lnb, None, SK, RW)
                for i in range(self._ports) if self._port_reads[i] == 2}
        pws = [_WriteClient(m, f"p{i}w", PW, AW, SB, lnb, None, SK, RW)
               for i in range(self._ports)]

        if omega:                               # the fetchers' and the writer's ports
            reads = [cl for cl in omega if not cl.write]
            rsel = _arbitrate(m, "rarb", sum((c.ports() for c in [rh] + reads + prs
                                              + list(prs2.values())), []), n_stores, lnb)
            wclients = [wh, next(cl for cl in omega if cl.write)] + pws
        else:
            rsel = _arbitrate(m, "rarb", sum((c.ports() for c in [rh, rc, rb, ra] + prs
                                              + list(prs2.values())), []), n_stores, lnb)
            wclients = [wh, wc] + pws
        wdata = sum((cl.entry_data() for cl in wclients), [])
        wsel = _arbitrate(m, "warb", sum((c.ports() for c in wclients), []), n_stores, lnb,
                          data=wdata)
        # The stores' inputs are registered: the arbitration and the address select end in
        # a register, not in the RAMs' address pins (docs/u50.md, logic depth). Reads and
        # writes are both one cycle later, so a read granted after a write still sees it.
        # The address (and write data) of the lane granted a bank is the first requesting
        # lane's, selected by a priority tree beside the arbiter, not by its grants.
        for s, st in enumerate(self._stores):
            rbits = st.row_bits
            for b in range(NB):
                r_any, r_row = _first([(h, a[lnb:][:rbits]) for h, a in rsel[s][b]], rbits)
                m.d.sync += [st.r_en[b].eq(r_any), st.r_addr[b].eq(r_row)]
                w_any, w_word = _first([(h, Cat(a[lnb:][:rbits], dd))
                                        for h, a, dd in wsel[s][b]], rbits + 32)
                m.d.sync += [st.w_en[b].eq(w_any), st.w_addr[b].eq(w_word[:rbits]),
                             st.w_data[b].eq(w_word[rbits:])]
        rdata = [[st.r_data[b] for b in range(NB)] for st in self._stores]
        for cl in (reads if omega else [ra, rb, rc]) + [rh] + prs + list(prs2.values()):
            cl.connect_data(m, rdata)

        # ---- host port -----------------------------------------------------------------
        resp = m.submodules.host_resp = fifo.SyncFIFO(width=32 * NB, depth=4)
        resp_credit = Signal(range(5), init=4)
        h_ok = Signal()
        depth_of = Array([Const(st.depth, AB + 1) for st in self._stores]
                         + [Const(0, AB + 1)] * ((1 << SB) - n_stores))
        PRE = row_pre_width(AW, lnb)

        def in_store(req, second=False):
            """A beat's lane mask without the lanes past the end of its store (``second``: of
            a request's second vector)."""
            mask, addr, store = ((req.mask2, req.addr2, req.store2) if second
                                 else (req.mask, req.addr, req.store))
            return Cat(*[mask[w] & ((addr + w) < depth_of[store]) for w in range(len(mask))])

        def queued(name, stream_in, vectors, depth=2):
            """A 2-beat FIFO for a row client's requests: each entry is the request, and per
            vector (``(mask, addr)`` of the request) the mask without the lanes past the
            store's end and the vector's row fields (:func:`row_pre`), both computed as the
            request enters, so the clients' loads start at registers (docs/wide-engine.md,
            logic depth). Returns the FIFO, the request as read and per vector ``(mask,
            pre)``."""
            layout = stream_in.payload.shape()
            pw_ = Value.cast(stream_in.payload).shape().width
            extra = [(len(mk), PRE) for mk, _ in vectors(stream_in.payload)]
            q = m.submodules[name] = fifo.SyncFIFO(
                width=pw_ + sum(a + b for a, b in extra), depth=depth)
            m.d.comb += q.w_data.eq(Cat(stream_in.payload, *[
                Cat(mk, row_pre(addr, AW, lnb, SK)) for mk, addr in vectors(stream_in.payload)]))
            out, at = [], pw_
            for a, b in extra:
                out.append((q.r_data[at:at + a], q.r_data[at + a:at + a + b]))
                at += a + b
            return q, layout(q.r_data[:pw_]), out

        def feed(cl, addr, mask, pre, store):
            m.d.comb += [cl.load_base.eq(addr), cl.load_mask.eq(mask),
                         cl.load_store.eq(store)]
            if cl.row:
                m.d.comb += cl.load_pre.eq(pre)
            if cl.offsets is not None:
                m.d.comb += [cl.offsets[w].eq(w) for w in range(cl.lanes)]

        # Host beats enter a 2-beat FIFO (their masks and row fields computed on the way in)
        # and are taken while the engine is idle; a descriptor waits until the FIFO is empty
        # and the store ports take no vector meanwhile, so every accepted host beat lands
        # before anything that follows it.
        hq, hreq, ((h_mask, h_pre),) = queued(
            "host_q", self.host_i, lambda r: [(in_store(r), r.addr)])
        # (a read beat takes its response's credit as it enters: one in the FIFO is never
        # held up by responses the host has not taken)
        h_take = Signal()
        m.d.comb += [
            self.host_i.ready.eq(hq.w_rdy & (resp_credit != 0)),
            h_take.eq(self.host_i.valid & self.host_i.ready),
            hq.w_en.eq(h_take),
            host_empty.eq(~hq.r_rdy),
            h_ok.eq(hq.r_rdy & ~self.busy & ~start & rh.can_load & wh.can_load),
            hq.r_en.eq(h_ok),
        ]
        for cl in (rh, wh):
            feed(cl, hreq.addr, h_mask, h_pre, hreq.store)
        m.d.comb += [wh.load_data[w].eq(hreq.data[w]) for w in range(NB)]
        m.d.comb += [rh.load.eq(h_ok & ~hreq.write), wh.load.eq(h_ok & hreq.write)]
        m.d.comb += [resp.w_en.eq(rh.out_valid), resp.w_data.eq(Cat(*rh.out_data)),
                     self.host_o.valid.eq(resp.r_rdy), self.host_o.payload.eq(resp.r_data),
                     resp.r_en.eq(self.host_o.ready)]
        m.d.sync += resp_credit.eq(resp_credit - (h_take & ~self.host_i.payload.write)
                                   + (resp.r_rdy & self.host_o.ready))

        # ---- store ports (vector / update units), served busy or not ----------------------
        # Each port's read and write requests pass through a 2-beat FIFO: the unit sees the
        # FIFO's ready (a registered level), not the arbiter's grants of this cycle, so no
        # path runs from the engine's arbitration into a unit's issue logic or back
        # (docs/u50.md, logic depth). One cycle of latency; a beat per cycle still.
        for i, (pr, pw) in enumerate(zip(prs, pws)):
            port = getattr(self, f"port{i}")
            # 8 beats of response buffer: one read beat per cycle is sustained with a
            # consumer that is always ready (the credit loop is 5 cycles long)
            presp = m.submodules[f"port{i}_resp"] = fifo.SyncFIFO(width=32 * PW, depth=8)
            pcredit = Signal(range(9), init=8, name=f"port{i}_credit")
            pq = prs2.get(i)
            rfifo, rq, rvec = queued(
                f"port{i}_rq", port.rd,
                lambda r: [(in_store(r), r.addr)] + ([(in_store(r, second=True), r.addr2)]
                                                     if pq is not None else []))
            wfifo, wq, ((w_mask, w_pre),) = queued(f"port{i}_wq", port.wr,
                                                   lambda r: [(in_store(r), r.addr)])
            r_take = Signal(name=f"port{i}_rtake")
            both = pr.can_load & (pq.can_load if pq is not None else 1)
            feed(pr, rq.addr, *rvec[0], rq.store)
            feed(pw, wq.addr, w_mask, w_pre, wq.store)
            m.d.comb += [
                port.rd.ready.eq(rfifo.w_rdy & (pcredit != 0)),
                rfifo.w_en.eq(port.rd.valid & port.rd.ready),
                pr.load.eq(rfifo.r_rdy & both & host_empty), rfifo.r_en.eq(pr.load),
                port.wr.ready.eq(wfifo.w_rdy),
                wfifo.w_en.eq(port.wr.valid),
                pw.load.eq(wfifo.r_rdy & pw.can_load & host_empty), wfifo.r_en.eq(pw.load),
                port.wr_idle.eq(pw.idle & (wfifo.level == 0)),
                presp.w_en.eq(pr.out_valid), presp.w_data.eq(Cat(*pr.out_data)),
                r_take.eq(port.rd.valid & port.rd.ready),
            ]
            if pq is None:
                m.d.comb += [port.rd_data.valid.eq(presp.r_rdy),
                             port.rd_data.payload.eq(presp.r_data),
                             presp.r_en.eq(port.rd_data.ready)]
                r_give = presp.r_rdy & port.rd_data.ready
            else:
                # the second vector: loaded with the first (an all-zero mask when unused,
                # which completes at once), its data in a FIFO of its own; a beat leaves
                # when both halves are there
                presp2 = m.submodules[f"port{i}_resp2"] = fifo.SyncFIFO(width=32 * PW,
                                                                        depth=8)
                r_give = Signal(name=f"port{i}_rgive")
                feed(pq, rq.addr2, *rvec[1], rq.store2)
                m.d.comb += [
                    pq.load.eq(pr.load),
                    presp2.w_en.eq(pq.out_valid), presp2.w_data.eq(Cat(*pq.out_data)),
                    port.rd_data.valid.eq(presp.r_rdy & presp2.r_rdy),
                    port.rd_data.payload.eq(Cat(presp.r_data, presp2.r_data)),
                    r_give.eq(presp.r_rdy & presp2.r_rdy & port.rd_data.ready),
                    presp.r_en.eq(r_give), presp2.r_en.eq(r_give),
                ]
            m.d.comb += [pw.load_data[w].eq(wq.data[w]) for w in range(PW)]
            m.d.sync += pcredit.eq(pcredit - r_take + r_give)

        # ---- descriptor check ------------------------------------------------------------
        # Pipelined over the check cycles so no path is deeper than one add or compare of
        # about the address width (docs/u50.md, logic depth): step 0 registers each view's
        # three products (dims - 1) x stride; step 1 saturates them at 2**AB (every store is
        # smaller, so a larger term is out of range whatever the rest); step 2 sums base and
        # the three terms (AB + 3 bits, no overflow); step 3 compares the last address with
        # the store's depth (the bits above AB, then AB bits) and ends the check.
        check_code = Signal(3)
        dims = [d.m, d.n, d.k, d.batch]
        cap = 1 << AB
        lasts = []
        for name, (rows, cols) in (("a", (d.m, d.k)), ("b", (d.k, d.n)), ("c", (d.m, d.n))):
            v = getattr(d, name)
            terms = []
            for tn, (cnt, stride) in (("b", (d.batch, v.batch_stride)),
                                      ("r", (rows, v.row_stride)), ("c", (cols, v.col_stride))):
                prod = Signal(AB + DB + 1, name=f"chk_{name}{tn}_prod")
                sat = Signal(AB + 1, name=f"chk_{name}{tn}")
                m.d.sync += [prod.eq((cnt - 1) * stride),
                             sat.eq(Mux(prod[AB:] != 0, cap, prod[:AB]))]
                terms.append(sat)
            last = Signal(AB + 3, name=f"last_{name}")
            m.d.sync += last.eq(v.base + terms[0] + terms[1] + terms[2])
            lasts.append((v, last))
        bad_store = reduce(operator.or_, [v.store >= n_stores for v, _ in lasts])
        bad_dim = reduce(operator.or_, [x == 0 for x in dims]) | (d.split > SL)
        with m.If(bad_store):
            m.d.comb += check_code.eq(1)
        with m.Elif(bad_dim):
            m.d.comb += check_code.eq(2)
        for code, (v, last) in zip((3, 4, 5), lasts):
            with m.Elif((last[AB:] != 0) | (last[:AB] >= depth_of[v.store])):
                m.d.comb += check_code.eq(code)

        # ---- loop nests --------------------------------------------------------------------
        # Tile height: the m rows are cut into ceil(m / slots) tiles of equal height
        # h = ceil(m / tiles) (balanced, so m = 20 runs as 2 x 10, not 16 + 4); a k-step
        # issues hp = max(h, add latency + 1) slots, the padding slots being bubbles.
        def by_split(options, name, width):
            """The entry ``d.split`` of ``options`` (one per log2 split 0..SL; constant
            during a run)."""
            out = Signal(width, name=name)
            m.d.comb += out.eq(options[0])
            for v in range(1, SL + 1):
                with m.If(split_is[v]):
                    m.d.comb += out.eq(options[v])
            return out

        # the split's decode, once (a compare per use was most of a 256-lane engine's
        # anonymous logic: by_split runs per lane)
        split_is = [Signal(name=f"split_is{v}") for v in range(SL + 1)]
        m.d.comb += [split_is[v].eq(d.split == v) for v in range(SL + 1)]

        # Lane groups (split s = 2**d.split): lane p is column p % (P/s) of group p // (P/s);
        # group g sums the k range g*kc .. (g+1)*kc - 1 (kc = ceil(k / s), odd) of the tile's
        # P/s columns, and a fold tree adds the groups' partial sums (golden's order).
        mtiles = Signal(DB, name="mtiles")
        m.d.comb += mtiles.eq((d.m + S - 1) >> ls)
        ntiles = by_split([(d.n + (P >> v) - 1) >> (lp - v) for v in range(SL + 1)],
                          "ntiles", DB)
        kc = by_split([((d.k + (1 << v) - 1) >> v) | (1 if v else 0) for v in range(SL + 1)],
                      "kc", DB)                # odd when split: groups start in other banks
        pg = by_split([Const(P >> v, lp + 1) for v in range(SL + 1)], "pg", lp + 1)
        b_nstride = by_split([d.b.col_stride << (lp - v) for v in range(SL + 1)], "b_nstride",
                             AW)
        c_nstride = by_split([d.c.col_stride << (lp - v) for v in range(SL + 1)], "c_nstride",
                             AW)
        # per group: first k index g*kc and the k offsets of A's and B's parts (registered
        # while checking; A's and B's lane offsets are ready when the run starts)
        kst = [Signal(DB + SL, name=f"kst{g}") for g in range(G)]
        kca = Signal(AW, name="kca")
        kcb = Signal(AW, name="kcb")
        gk_a = [Signal(AW, name=f"gk_a{g}") for g in range(G)]
        gk_b = [Signal(AW, name=f"gk_b{g}") for g in range(G)]
        m.d.sync += [kst[g].eq(kc * g) for g in range(G)]
        m.d.sync += [gk_a[g].eq(kca * g) for g in range(G)]
        m.d.sync += [gk_b[g].eq(kcb * g) for g in range(G)]

        # per group: how many of its part's k indices are inside the k range (k - g*kc,
        # 0 if negative), registered (kst settles at check step 0, this at step 1), so the
        # per-k-step test is one compare
        kleft = [Signal(DB + SL, name=f"kleft{g}") for g in range(G)]
        m.d.sync += [kleft[g].eq(Mux(kst[g] >= d.k, 0, d.k - kst[g])) for g in range(G)]

        def k_valid(kk, name):
            """Per group: is its k index ``g*kc + kk`` inside the k range?"""
            bits = Signal(G, name=name)
            m.d.comb += bits.eq(Cat(*[kk < kleft[g] for g in range(G)]))
            return bits

        def group_of(p, bits, name):
            """Bit ``group(p)`` of the per-group ``bits`` for lane ``p``."""
            return by_split([bits[p >> (lp - v)] for v in range(SL + 1)], name, 1)

        in_g0 = [by_split([Const(int(p < (P >> v)), 1) for v in range(SL + 1)], f"in_g0_{p}", 1)
                 for p in range(P)]
        tile_h = Signal(ls + 1, name="tile_h")
        tile_hp = Signal(ls + 1, name="tile_hp")
        h_next = Signal(ls + 1)
        # the tile count registered, the height taken at check step 1 and the m strides at
        # step 2: d.m -> tiles -> products -> compares -> select was one 13-level path
        mtiles_r = Signal(DB, name="mtiles_r")
        m.d.sync += mtiles_r.eq(mtiles)
        for h in reversed(range(1, S + 1)):
            with m.If(mtiles_r * h >= d.m):
                m.d.comb += h_next.eq(h)
        min_slots = self._add_latency + 1
        a_mstride = Signal(AW, name="a_mstride")
        c_mstride = Signal(AW, name="c_mstride")
        check_step = Signal(2)
        with m.If(checking & (check_step == 1)):
            m.d.sync += [tile_h.eq(h_next),
                         tile_hp.eq(Mux(h_next < min_slots, min_slots, h_next))]
        with m.If(checking & (check_step == 2)):
            m.d.sync += [a_mstride.eq(d.a.row_stride * tile_h),
                         c_mstride.eq(d.c.row_stride * tile_h)]
        with m.If(checking & (check_step == 0)):
            m.d.sync += [kca.eq(kc * d.a.col_stride), kcb.eq(kc * d.b.row_stride)]
        # The loop nests' last indices and the split-selected strides, registered: they are
        # functions of the latched descriptor (and of tile_hp, set at check step 1), so they
        # settle during the check cycles and hold still while running. Without them every
        # loop's end-of-level compare ran through the descriptor's add/shift/select (16
        # logic levels to the address generators' remainders, docs/u50.md).
        def held(value, width, name):
            r = Signal(width, name=name)
            m.d.sync += r.eq(value)
            return r
        m.d.comb += [rb.rowmode.eq(held(d.b.col_stride == 1, 1, "fb_rowmode_r")),
                     rc.rowmode.eq(held(d.c.col_stride == 1, 1, "fc_rowmode_r")),
                     wc.rowmode.eq(rc.rowmode)]
        batch_l = held(d.batch - 1, DB, "batch_last")
        mtiles_l = held(mtiles - 1, DB, "mtiles_last")
        ntiles_l = held(ntiles - 1, DB, "ntiles_last")
        kc_l = held(kc - 1, DB, "kc_last")
        hp_l = held(tile_hp - 1, ls + 1, "tile_hp_last")
        pg_r = held(pg, lp + 1, "pg_r")
        b_nstride_r = held(b_nstride, AW, "b_nstride_r")
        c_nstride_r = held(c_nstride, AW, "c_nstride_r")
        restart = Signal()
        g_a = _Loops(m, "ga", [batch_l, mtiles_l, ntiles_l, kc_l], addr_bits=AW, base=d.a.base,
                     strides=[d.a.batch_stride, a_mstride, 0, d.a.col_stride],
                     rems={1: (d.m, tile_h)})
        g_b = _Loops(m, "gb", [batch_l, mtiles_l, ntiles_l, kc_l], addr_bits=AW, base=d.b.base,
                     strides=[d.b.batch_stride, 0, b_nstride_r, d.b.row_stride],
                     rems={2: (d.n, pg_r)})
        cstrides = [d.c.batch_stride, c_mstride, c_nstride_r, d.c.row_stride]
        g_c = _Loops(m, "gc", [batch_l, mtiles_l, ntiles_l, hp_l],
                     addr_bits=AW, base=d.c.base, strides=cstrides,
                     rems={1: (d.m, tile_h), 2: (d.n, pg_r)})
        g_w = _Loops(m, "gw", [batch_l, mtiles_l, ntiles_l, hp_l],
                     addr_bits=AW, base=d.c.base, strides=cstrides,
                     rems={1: (d.m, tile_h), 2: (d.n, pg_r)})
        g_i = _Loops(m, "gi", [batch_l, mtiles_l, ntiles_l, kc_l, hp_l])
        for g in (g_a, g_b, g_c, g_w, g_i):
            m.d.comb += g.restart.eq(restart)

        def thermo(n, rem):
            # a signal, not an expression: indexing an expression re-emits all of it
            t = Signal(n)
            m.d.comb += t.eq(Cat(*[rem > i for i in range(n)]))
            return t

        # lane offsets (registered while checking; constant during a run)
        for cl, stride in ((rc, d.c.col_stride), (wc, d.c.col_stride)):
            for p in range(cl.lanes):
                m.d.sync += cl.offsets[p].eq(stride * p)
        for j in range(S * G):                  # A: row t of group g's column
            g, t = divmod(j, S)
            m.d.sync += ra.offsets[j].eq(d.a.row_stride * t + (gk_a[g] if g else 0))
        if G == 1:
            m.d.sync += [rb.offsets[p].eq(d.b.col_stride * p) for p in range(P)]
        else:                                   # B: column p % (P/s) of group p // (P/s)'s row
            colb = [Signal(AW, name=f"colb{j}") for j in range(P)]
            # registered: settled at check step 1, the offsets at step 2 (gk_b's); the
            # descriptor -> constant product -> split select -> add path was 15 levels
            m.d.sync += [colb[j].eq(d.b.col_stride * j) for j in range(P)]
            # the split-selected column and row registered, then added: the split's select
            # and the add were one 15-level path (settled by check step 3, gk_b's + 1)
            for p in range(P):
                col = by_split([colb[p % (P >> v)] for v in range(SL + 1)], f"fb_col{p}", AW)
                row = by_split([gk_b[p >> (lp - v)] for v in range(SL + 1)], f"fb_row{p}", AW)
                col_r = Signal(AW, name=f"fb_col{p}_r")
                row_r = Signal(AW, name=f"fb_row{p}_r")
                m.d.sync += [col_r.eq(col), row_r.eq(row), rb.offsets[p].eq(col_r + row_r)]

        # ---- fetchers ----------------------------------------------------------------------
        FD = self._fetch_depth
        fa = m.submodules.fifo_a = fifo.SyncFIFO(width=32 * S * G, depth=FD)
        fb = m.submodules.fifo_b = fifo.SyncFIFO(width=32 * P, depth=FD)
        fc = m.submodules.fifo_c = fifo.SyncFIFO(width=32 * P, depth=S)
        cred_a = Signal(range(FD + 1), init=FD)
        cred_b = Signal(range(FD + 1), init=FD)
        cred_c = Signal(range(S + 1), init=S)
        # mode bits of the latched descriptor, registered (they settle while checking): the
        # integer accumulators' adders start at a register, not behind the descriptor's
        # field selects (15 levels at 4 lanes, docs/u50.md)
        acc_on = held(d.accumulate, 1, "acc_on")
        a_rows = thermo(S, g_a.rem[1]) & thermo(S, tile_h)
        kv_a = k_valid(g_a.idx[3], "kv_a")
        if G == 1:
            b_mask = thermo(P, g_b.rem[2])
        else:
            kv_b = k_valid(g_b.idx[3], "kv_b")
            b_cols = thermo(P, g_b.rem[2])
            b_mask = Cat(*[by_split([b_cols[p % (P >> v)] for v in range(SL + 1)],
                                    f"fb_colok{p}", 1) & group_of(p, kv_b, f"fb_kok{p}")
                           for p in range(P)])
        g0_mask = held(Cat(*in_g0), P, "g0_mask")
        m.d.comb += [
            ra.want.eq(running & ~g_a.done & (cred_a != 0)), ra.load.eq(ra.want & ra.can_load),
            ra.load_base.eq(g_a.addr),
            ra.load_mask.eq(Cat(*[Mux(kv_a[g], a_rows, 0) for g in range(G)])),
            ra.load_store.eq(d.a.store), g_a.advance.eq(ra.load),
            rb.want.eq(running & ~g_b.done & (cred_b != 0)), rb.load.eq(rb.want & rb.can_load),
            rb.load_base.eq(g_b.addr), rb.load_mask.eq(b_mask),
            rb.load_store.eq(d.b.store), g_b.advance.eq(rb.load),
            rc.want.eq(running & acc_on & ~g_c.done & (cred_c != 0)),
            rc.load.eq(rc.want & rc.can_load),
            rc.load_base.eq(g_c.addr),
            rc.load_mask.eq(Mux((g_c.idx[3] < g_c.rem[1]) & (g_c.idx[3] < tile_h),
                                thermo(P, g_c.rem[2]) & g0_mask, 0)),
            rc.load_store.eq(d.c.store), g_c.advance.eq(rc.load),
            # through a shared port a tile's first k-step waits for its old-C rows: they go
            # before further A and B vectors once each has one loaded (docs/wide-engine.md)
            *([rc.urgent.eq((cred_a != FD) & (cred_b != FD))]
              if self._route == "omega-shared" else []),
            fa.w_en.eq(ra.out_valid), fa.w_data.eq(Cat(*ra.out_data)),
            fb.w_en.eq(rb.out_valid), fb.w_data.eq(Cat(*rb.out_data)),
            fc.w_en.eq(rc.out_valid), fc.w_data.eq(Cat(*rc.out_data)),
        ]

        # ---- issue -------------------------------------------------------------------------
        fw = m.submodules.fifo_w = fifo.SyncFIFO(width=32 * P + P + AW, depth=2 * S)
        cred_w = Signal(range(2 * S + 1), init=2 * S)
        cold_inflight = Signal(range(S + 2))
        t_i = g_i.idx[4]
        k_first = g_i.idx[3] == 0
        k_last = g_i.at_last[3]
        issue = Signal()
        m.d.comb += issue.eq(running & ~g_i.done & fa.r_rdy & fb.r_rdy
                             & (~k_first | ~acc_on | (fc.r_level > cold_inflight))
                             & (~k_last | (cred_w != 0)))
        m.d.comb += [g_i.advance.eq(issue)]
        pop_ab = issue & g_i.at_last[4]
        m.d.comb += [fa.r_en.eq(pop_ab), fb.r_en.eq(pop_ab)]
        m.d.sync += [cred_a.eq(cred_a - ra.load + pop_ab), cred_b.eq(cred_b - rb.load + pop_ab)]

        s1_valid = Signal()
        s1_t = Signal(ls + 1)
        s1_first = Signal()
        s1_last = Signal()
        s1_ag = [Signal(32, name=f"s1_a{g}") for g in range(G)]     # A word of each group
        s1_b = Signal(32 * P)
        s1_kv = Signal(P)                        # per lane: its group's k index is inside k
        kv_i = k_valid(g_i.idx[3], "kv_i")
        m.d.sync += [s1_valid.eq(issue), s1_t.eq(t_i), s1_first.eq(k_first),
                     s1_last.eq(k_last), s1_b.eq(fb.r_data)]
        for g in range(G):
            a_words = Array([fa.r_data[32 * (g * S + t):32 * (g * S + t + 1)] for t in range(S)])
            m.d.sync += s1_ag[g].eq(a_words[t_i])

        # tag pipeline alongside the multipliers
        def delay(sig, n, name):
            for i in range(n):
                nxt = Signal.like(sig, name=f"{name}_{i}")
                m.d.sync += nxt.eq(sig)
                sig = nxt
            return sig
        tag1 = Cat(s1_valid, s1_first, s1_last, s1_t)
        tagx = delay(tag1, self._mul_latency, "tagx")
        x_valid, x_first, x_t = tagx[0], tagx[1], tagx[3:]
        tagy = delay(tagx, self._add_latency, "tagy")
        y_valid, y_last, y_t = tagy[0], tagy[2], tagy[3:]
        # each lane's k-valid bit is selected from its group's at issue and delayed with
        # the product: at the accumulator it is a register, not a split-select (the integer
        # accumulators' adders sat behind it, 13 levels at 4 lanes)
        if G > 1:
            m.d.sync += s1_kv.eq(Cat(*[group_of(p, kv_i, f"kv_l{p}") for p in range(P)]))
        x_kv = delay(s1_kv, self._mul_latency, "x_kv")

        m.d.comb += fc.r_en.eq(x_valid & x_first & acc_on)
        took_cold = issue & k_first & acc_on
        m.d.sync += cold_inflight.eq(cold_inflight + took_cold - fc.r_en)
        m.d.sync += cred_c.eq(cred_c - rc.load + fc.r_en)

        # Integer mode (d.integer): beside each lane's FP32 multiplier and adder runs a signed
        # 16 x 16 multiplier and a 32-bit adder, delayed to the same latencies, so the tag
        # pipeline, the interleaved accumulator slots and the write-back are shared; the mode
        # only selects which sum is written to the accumulator. One extra DSP48E2 per lane
        # (the product), the adder in carry logic (docs/contraction-engine.md).
        int_on = held(d.integer, 1, "int_on") if self._integer else Const(0, 1)
        zero = held(Mux(d.integer, 0, NEG_ZERO) if self._integer else NEG_ZERO, 32, "acc_zero")
        results = []
        for p in range(P):
            mul = m.submodules[f"mul{p}"] = self._mul_unit()
            add = m.submodules[f"add{p}"] = self._add_unit()
            accm = m.submodules[f"acc{p}"] = memory.Memory(shape=32, depth=S, init=[])
            acc_rd = accm.read_port(domain="comb")
            acc_wr = accm.write_port()
            # group 0 starts from the old C (accumulate); every other group from -0 / 0
            from_c = held(acc_on & in_g0[p], 1, f"from_c{p}")
            init = Mux(from_c, fc.r_data[32 * p:32 * (p + 1)], zero)
            acc_in = Mux(x_first, init, acc_rd.data)
            b_word = s1_b[32 * p:32 * (p + 1)]
            if G == 1:
                s1_a, kv_p, prod = s1_ag[0], None, mul.o.payload
            else:
                s1_a = by_split([s1_ag[p >> (lp - v)] for v in range(SL + 1)], f"s1_a_l{p}", 32)
                # a group's k index past k (its part is short): the product is -0, which
                # leaves the sum as it is (x + -0 == x for an adder output)
                kv_p = x_kv[p]
                prod = Mux(kv_p, mul.o.payload, NEG_ZERO)
            result = Signal(32, name=f"result{p}")
            if self._integer:
                iprod = Signal(signed(32), name=f"iprod{p}")
                m.d.comb += iprod.eq(s1_a[:16].as_signed() * b_word[:16].as_signed())
                iprod_x = delay(iprod, self._mul_latency, f"iprodx{p}")
                if kv_p is not None:
                    iprod_x = Mux(kv_p, iprod_x, 0)
                isum = Signal(32, name=f"isum{p}")
                m.d.comb += isum.eq(iprod_x + acc_in)
                isum_y = delay(isum, self._add_latency, f"isumy{p}")
                m.d.comb += result.eq(Mux(int_on, isum_y, add.o.payload))
            else:
                m.d.comb += result.eq(add.o.payload)
            m.d.comb += [
                mul.i.valid.eq(s1_valid), mul.i.payload.a.eq(s1_a),
                mul.i.payload.b.eq(b_word),
                acc_rd.addr.eq(x_t),
                add.i.valid.eq(x_valid), add.i.payload.a.eq(prod),
                add.i.payload.b.eq(acc_in),
                acc_wr.addr.eq(y_t), acc_wr.data.eq(result),
                acc_wr.en.eq(y_valid & ~y_last),
            ]
            results.append(result)

        # ---- fold tree: level l adds lane p + P/2**l to lane p (p < P/2**l) ---------------
        push = y_valid & y_last
        levels, valids = [results], [push]
        for lv in range(1, SL + 1):
            width, prev = P >> lv, levels[-1]
            outs = []
            for p in range(width):
                fadd = m.submodules[f"fold{lv}_{p}"] = self._add_unit()
                m.d.comb += [fadd.i.valid.eq(valids[-1]), fadd.i.payload.a.eq(prev[p]),
                             fadd.i.payload.b.eq(prev[p + width])]
                out = Signal(32, name=f"fold{lv}_{p}")
                if self._integer:
                    fisum = Signal(32, name=f"fold{lv}_isum{p}")
                    m.d.comb += fisum.eq(prev[p] + prev[p + width])
                    m.d.comb += out.eq(Mux(int_on, delay(fisum, self._add_latency,
                                                         f"fold{lv}_isumy{p}"),
                                           fadd.o.payload))
                else:
                    m.d.comb += out.eq(fadd.o.payload)
                outs.append(out)
            levels.append(outs)
            # a level past the descriptor's split carries nothing: an earlier descriptor's
            # vectors must not reach a later one's output level
            valids.append(delay(valids[-1] & (d.split >= lv), self._add_latency,
                                f"fold{lv}_valid"))
        if G == 1:
            folded, push_out = results, push
        else:                                    # the level of this descriptor's split
            push_out = by_split(valids, "fold_valid", 1)
            folded = [by_split([levels[v][q] if q < (P >> v) else Const(0, 32)
                                for v in range(SL + 1)], f"folded{q}", 32) for q in range(P)]

        # ---- write-back ------------------------------------------------------------------
        wmask = Mux((g_w.idx[3] < g_w.rem[1]) & (g_w.idx[3] < tile_h),
                    thermo(P, g_w.rem[2]) & g0_mask, 0)
        m.d.comb += [fw.w_en.eq(push_out), fw.w_data.eq(Cat(*folded, wmask, g_w.addr)),
                     g_w.advance.eq(push_out)]
        m.d.comb += [
            wc.load.eq(fw.r_rdy & wc.can_load), fw.r_en.eq(wc.load),
            wc.load_base.eq(fw.r_data[32 * P + P:]), wc.load_mask.eq(fw.r_data[32 * P:32 * P + P]),
            wc.load_store.eq(d.c.store),
        ]
        m.d.comb += [wc.load_data[p].eq(fw.r_data[32 * p:32 * (p + 1)]) for p in range(P)]
        m.d.sync += cred_w.eq(cred_w - (issue & k_last) + wc.finishing)

        # ---- sequencing ------------------------------------------------------------------
        with m.If(~self.busy):
            with m.If(start):
                m.d.sync += [d.eq(self.desc.payload), checking.eq(1), self.done.eq(0),
                             self.error.eq(0), self.error_code.eq(0), self.cycles.eq(0)]
        with m.Elif(checking):
            m.d.sync += check_step.eq(check_step + 1)
            with m.If((check_step == 3) & wh.idle):
                # the loops restart whatever the check says (they are idle unless running),
                # so the check's compares reach only these three registers
                m.d.comb += restart.eq(1)
                m.d.sync += [checking.eq(0), check_step.eq(0)]
                with m.If(check_code != 0):
                    m.d.sync += [self.error.eq(1), self.error_code.eq(check_code),
                                 self.done.eq(1)]
                with m.Else():
                    m.d.sync += running.eq(1)
            with m.Elif(check_step == 3):
                m.d.sync += check_step.eq(3)
        with m.Elif(running):
            with m.If(g_i.done & (cred_w == 2 * S) & ~push & ~push_out & ~fw.r_rdy):
                m.d.sync += [running.eq(0), self.done.eq(1)]
        return m
