"""The store port: how a unit other than the contraction engine reads and writes the stores.

The stores of the accelerator live behind the contraction engine's per-bank arbiters
(:class:`~ttrain.rtl.engine.ContractionEngine`); the vector and update units reach them through
*store ports*, each a client of those arbiters at a lower priority than the engine's own operand
fetchers and result writer. A store port moves *beats* of ``width`` words (``width`` = the
stores' bank count): lane ``w`` of a beat addresses word ``addr + w`` of store ``store``, and
``mask`` bit ``w`` enables the lane. Word ``a`` lives in bank ``a % width`` (or, with the
engine's ``bank_skew``, ``(a + a // width) % width``): unskewed, the lanes of a beat always hit
distinct banks, whatever ``addr`` is; skewed, a beat that is not row-aligned can put two lanes
in one bank and then takes two cycles. Unaligned beats are correct either way.

Seen from the unit (the signature below, ``Out`` = driven by the unit):

``rd`` : ``Out(stream.Signature(read_request_layout(...)))``
    Read requests, one beat per transfer.
``rd_data`` : ``In(stream.Signature(data.ArrayLayout(32, width)))``
    Read data, one beat per read request, in request order; masked-out lanes read 0. The unit
    may hold ``ready`` low (the port buffers a few beats and stops accepting reads meanwhile).
``wr`` : ``Out(stream.Signature(write_request_layout(...)))``
    Write requests (masked lanes are not written).
``wr_idle`` : ``In(1)``
    High when every accepted write has landed. A read request *accepted* in a cycle where
    ``wr_idle`` is high sees every earlier write; a read accepted while a write is still
    pending may or may not see it. A unit that reads a word it wrote earlier (reduction
    accumulators in memory, repeated scatter indices) waits for ``wr_idle`` first.

With ``reads=2`` (the vector unit's port on a build with ``HwConfig.vector_reads = 2``) a
read request carries a second vector, ``store2``/``addr2``/``mask2`` (lanes ``addr2 + w``,
``mask2`` all zero when unused), and its read-data beat holds ``2 x width`` words: the first
vector's lanes, then the second's. The engine serves the two vectors through two arbiter
entries in the same cycle, so a two-source element beat reads both of its sources at once
(both are read before any write of the beat, as with two beats; a bank both vectors need
serves one of them a cycle later).

Requests enter a 2-beat FIFO per stream inside the engine (``ready`` is that FIFO's, a
registered level: no combinational path from the arbiter into the unit), so a beat reaches the
arbiter one cycle after it is accepted. Reads and writes are independent streams: one read beat
and one write beat can be accepted in the same cycle. Words of different beats land in acceptance order per stream; a port serves
one beat at a time per stream, so a full-rate unit sustains one read and one write beat per
cycle when no engine fetcher competes for the same banks.
"""

from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["read_request_layout", "write_request_layout", "StorePortSignature"]


def read_request_layout(store_bits, addr_bits, width, reads=1):
    """Return the layout of a read request beat (``store`` is the least significant field;
    ``reads=2``: a second vector's ``store2``, ``addr2``, ``mask2`` after them)."""
    fields = {"store": store_bits, "addr": addr_bits, "mask": width}
    if reads == 2:
        fields.update({"store2": store_bits, "addr2": addr_bits, "mask2": width})
    return data.StructLayout(fields)


def write_request_layout(store_bits, addr_bits, width):
    """Return the layout of a write request beat (``store`` is the least significant field)."""
    return data.StructLayout({"store": store_bits, "addr": addr_bits, "mask": width,
                              "data": data.ArrayLayout(32, width)})


class StorePortSignature(wiring.Signature):
    """Signature of a store port, seen from the unit that uses it (see the module docstring).

    Parameters
    ----------
    store_bits : int
        Width of the store id (>= 1).
    addr_bits : int
        Width of a word address (>= 1).
    width : int
        Words per beat = banks per store (a power of two).
    reads : int
        Vectors per read request: 1, or 2 (a second vector beside the first; see the module
        docstring).
    """

    def __init__(self, *, store_bits, addr_bits, width, reads=1):
        for name, v in (("store_bits", store_bits), ("addr_bits", addr_bits),
                        ("width", width)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"StorePortSignature {name} must be a positive int, not {v!r}")
        if width & (width - 1):
            raise ValueError(f"StorePortSignature width must be a power of two (the stores' "
                             f"bank count), not {width}")
        if reads not in (1, 2) or isinstance(reads, bool):
            raise ValueError(f"StorePortSignature reads must be 1 or 2 vectors per read "
                             f"request, not {reads!r}")
        self.store_bits, self.addr_bits, self.width = store_bits, addr_bits, width
        self.reads = reads
        super().__init__({
            "rd": Out(stream.Signature(read_request_layout(store_bits, addr_bits, width,
                                                           reads))),
            "rd_data": In(stream.Signature(data.ArrayLayout(32, reads * width))),
            "wr": Out(stream.Signature(write_request_layout(store_bits, addr_bits, width))),
            "wr_idle": In(1),
        })

    def __eq__(self, other):
        return (isinstance(other, StorePortSignature) and self.store_bits == other.store_bits
                and self.addr_bits == other.addr_bits and self.width == other.width
                and self.reads == other.reads)

    def __hash__(self):
        return hash((StorePortSignature, self.store_bits, self.addr_bits, self.width,
                     self.reads))

    def __repr__(self):
        extra = f", reads={self.reads}" if self.reads != 1 else ""
        return (f"StorePortSignature(store_bits={self.store_bits}, "
                f"addr_bits={self.addr_bits}, width={self.width}{extra})")
