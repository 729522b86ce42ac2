# amaranth: UnusedElaboratable=no
"""Amaranth-simulator tests of the vector unit (elementwise / reduce / gather) against the
golden interpreter, bit-exact, on random strided views and special FP32 values."""

import numpy as np
import pytest
from amaranth.hdl import Elaboratable, Module, Mux, Signal
from amaranth.lib import memory
from amaranth.sim import Simulator

from ttrain.golden.contract import View
from ttrain.golden.interpreter import check_program, run
from ttrain.golden.isa import (ERR_INDEX, STORE_IDS, Elementwise, End, Gather, Reduce, Update,
                               f32_bits)
from ttrain.rtl.vector import VectorCommand, VectorUnit, vector_command

SIZE = 64
STORES = ("param", "grad", "act", "scratch")
SPECIAL = [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001,
           0x00000001, 0x807FFFFF, 0x7F7FFFFF, 0x3F800000, 0xBF800000]


class _Harness(Elaboratable):
    """The vector unit on four ``SIZE``-word memories (one read, one write port each)."""

    def __init__(self):
        self.dut = VectorUnit(addr_bits=6)
        self.mems = [memory.Memory(shape=32, depth=SIZE, init=[]) for _ in STORES]

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        rdata = []
        for s, mem in enumerate(self.mems):
            m.submodules[f"mem{s}"] = mem
            rp = mem.read_port(transparent_for=())
            wp = mem.write_port()
            m.d.comb += [rp.en.eq(dut.rd_en & (dut.rd_store == s)), rp.addr.eq(dut.rd_addr),
                         wp.en.eq(dut.wr_en & (dut.wr_store == s)), wp.addr.eq(dut.wr_addr),
                         wp.data.eq(dut.wr_data)]
            rdata.append(rp.data)
        sel = self.dut.rd_store
        last = Signal(2)
        with m.If(dut.rd_en):
            m.d.sync += last.eq(sel)
        m.d.comb += dut.rd_data.eq(Mux(last[1], Mux(last[0], rdata[3], rdata[2]),
                                       Mux(last[0], rdata[1], rdata[0])))
        return m


def _random_image(rng):
    img = {}
    for s in STORES:
        w = rng.standard_normal(SIZE).astype(np.float32).view(np.uint32)
        k = rng.integers(0, SIZE, 8)
        w[k] = rng.choice(SPECIAL, 8)
        img[s] = w.astype(np.uint32)
    return img


def simulate(instrs, image):
    """Run the vector instructions in turn on the harness; return (image, errors, cycles)."""
    h = _Harness()
    dut = h.dut
    out = {}
    errors = []
    cycles = []

    async def tb(ctx):
        for s, mem in enumerate(h.mems):
            for a, wd in enumerate(image[STORES[s]]):
                ctx.set(mem.data[a], int(wd))
        for ins in instrs:
            ctx.set(dut.cmd.payload, VectorCommand.const(vector_command(ins)))
            ctx.set(dut.cmd.valid, 1)
            await ctx.tick().until(dut.cmd.ready)
            ctx.set(dut.cmd.valid, 0)
            n = 0
            while not ctx.get(dut.done):
                await ctx.tick()
                n += 1
            errors.append(ctx.get(dut.error))
            cycles.append(n)
        for s, mem in enumerate(h.mems):
            out[STORES[s]] = np.array([ctx.get(mem.data[a]) for a in range(SIZE)],
                                      dtype=np.uint32)

    sim = Simulator(h)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return out, errors, cycles


def _view(rng, rows, cols, store=None):
    store = store or STORES[int(rng.integers(0, 4))]
    rs, cs = (cols, 1) if rng.random() < 0.5 else (1, rows)
    if rng.random() < 0.3:
        rs, cs = rs * 2 if rs > 1 else rs, cs * 2 if cs > 1 else cs
    span = (rows - 1) * rs + (cols - 1) * cs + 1
    return View(store, int(rng.integers(0, SIZE - span + 1)), rs, cs)


def _random_instr(rng, kind):
    sizes = {s: SIZE for s in STORES}
    for _ in range(500):
        rows, cols = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        imm = int(rng.choice(SPECIAL + [f32_bits(rng.standard_normal())]))
        if kind in ("add", "sub", "mul"):
            ins = Elementwise(kind, rows, cols, _view(rng, rows, cols), _view(rng, rows, cols),
                              _view(rng, rows, cols))
        elif kind in ("scale", "addi", "copy"):
            a = _view(rng, rows, cols)
            d = a if rng.random() < 0.3 else _view(rng, rows, cols)
            ins = Elementwise(kind, rows, cols, d, a, None, imm if kind != "copy" else 0)
        elif kind == "fill":
            ins = Elementwise(kind, rows, cols, _view(rng, rows, cols), imm=imm)
        elif kind in ("sum", "max"):
            d = _view(rng, rows, 1)
            d = View(d.store, d.base, d.row_stride if d.row_stride else 1, 0)
            ins = Reduce(kind, rows, cols, d, _view(rng, rows, cols),
                         accumulate=bool(rng.random() < 0.5))
        elif kind == "update":
            n = int(rng.integers(1, 9))
            th, g = STORES[int(rng.integers(0, 2))], STORES[int(rng.integers(0, 4))]
            ins = Update(View(th, int(rng.integers(0, SIZE - n + 1))),
                         View(g, int(rng.integers(0, SIZE - n + 1))), n, imm)
        else:
            tr = int(rng.integers(1, 6))
            idx = _view(rng, rows, 1)
            idx = View(idx.store, idx.base, idx.row_stride if idx.row_stride else 1, 0)
            if kind == "gather":
                ins = Gather(kind, rows, cols, tr, _view(rng, rows, cols),
                             _view(rng, tr, cols), idx)
            else:
                ins = Gather(kind, rows, cols, tr, _view(rng, tr, cols), _view(rng, rows, cols),
                             idx)
        if check_program([ins, End()], sizes)[0] == 0:
            return ins
    raise AssertionError(f"no legal random {kind} found")


def _set_indices(rng, ins, image, valid=True):
    """Write index data for a gather/scatter (repeats likely; one bad entry if not valid)."""
    addr = ins.index.base + ins.index.row_stride * np.arange(ins.rows)
    idx = rng.integers(0, ins.table_rows, ins.rows)
    if not valid:
        idx[int(rng.integers(0, ins.rows))] = ins.table_rows + int(rng.integers(0, 3))
    image[ins.index.store][addr] = idx.astype(np.uint32)


KINDS = ["add", "sub", "mul", "scale", "addi", "copy", "fill", "sum", "max", "gather",
         "scatter_add", "update"]


@pytest.mark.parametrize("kind", KINDS)
def test_vector_op_matches_interpreter(kind):
    rng = np.random.default_rng(KINDS.index(kind) + 100)
    image = _random_image(rng)
    instrs = []
    for _ in range(3):
        ins = _random_instr(rng, kind)
        if isinstance(ins, Gather):
            _set_indices(rng, ins, image)
            # keep later instructions from overwriting this one's index list
            if any(isinstance(p, Gather) and p.index.store == ins.index.store for p in instrs):
                continue
        instrs.append(ins)
    want, stats = run(instrs + [End()], image)
    assert stats.ok, stats.message
    got, errors, _ = simulate(instrs, image)
    assert errors == [0] * len(instrs)
    for s in STORES:
        bad = np.nonzero(got[s] != want[s])[0]
        assert bad.size == 0, (s, bad, got[s][bad], want[s][bad], instrs)
    # the instructions really changed words (not a vacuous comparison)
    assert any(not np.array_equal(want[s], image[s]) for s in STORES) or kind == "copy"


def test_vector_reduce_special_rows():
    """rsum from -0.0 (all -0 row stays -0), rmax with NaN and +-0, accumulate."""
    image = {s: np.zeros(SIZE, dtype=np.uint32) for s in STORES}
    rows = [[0x80000000, 0x80000000, 0x80000000],       # -0 sum stays -0
            [0x80000000, 0x00000000, 0x80000000],       # max(-0, +0) = +0
            [0x3F800000, 0x7FC00001 & 0x7FFFFFFF, 0x40000000],   # NaN -> canonical
            [0x7F800000, 0xFF800000, 0x3F800000]]      # inf - inf = NaN
    image["act"][:12] = np.array(rows, dtype=np.uint32).ravel()
    image["grad"][:4] = [0x80000000, 0x00000000, 0xBF800000, 0x7F7FFFFF]
    instrs = [Reduce("sum", 4, 3, View("scratch", 0, 1, 0), View("act", 0, 3, 1)),
              Reduce("max", 4, 3, View("scratch", 8, 1, 0), View("act", 0, 3, 1)),
              Reduce("sum", 4, 3, View("grad", 0, 1, 0), View("act", 0, 3, 1), True),
              Reduce("max", 4, 3, View("grad", 8, 2, 0), View("act", 0, 3, 1), True)]
    want, stats = run(instrs + [End()], image)
    assert stats.ok
    got, errors, _ = simulate(instrs, image)
    assert errors == [0] * 4
    for s in STORES:
        np.testing.assert_array_equal(got[s], want[s])
    assert want["scratch"][0] == 0x80000000 and want["scratch"][9] == 0x00000000


def test_vector_index_error_writes_nothing():
    rng = np.random.default_rng(7)
    for kind in ("gather", "scatter_add"):
        image = _random_image(rng)
        ins = _random_instr(rng, kind)
        _set_indices(rng, ins, image, valid=False)
        want, stats = run([ins, End()], image)
        assert stats.error == ERR_INDEX
        got, errors, _ = simulate([ins], image)
        assert errors == [ERR_INDEX]
        for s in STORES:
            np.testing.assert_array_equal(got[s], image[s])


def test_vector_unit_parameters_rejected():
    with pytest.raises(ValueError, match="addr_bits"):
        VectorUnit(addr_bits=0)
    with pytest.raises(ValueError, match="addr_bits"):
        VectorUnit(addr_bits=40)
    with pytest.raises(TypeError, match="Elementwise, Reduce, Gather or Update"):
        vector_command(End())
    assert STORE_IDS == {s: i for i, s in enumerate(STORES)}


# ---- instruction decoder ----------------------------------------------------------------

def _golden_code(words):
    from ttrain.golden.isa import ISAError, decode
    try:
        decode(words)
    except ISAError as e:
        return e.code
    return 0


def _legal_words(rng):
    """Encoded random legal instructions of every opcode."""
    from ttrain.golden.contract import random_descriptor
    from ttrain.golden.isa import (Barrier, Contract, EndLoop, Loop, encode)
    sizes = {s: SIZE for s in STORES}
    out = [encode(End()), encode(Barrier()), encode(EndLoop()),
           encode(Loop(int(rng.integers(1, 9)), (1, 2, 3))),
           encode(Update(View("param", 3), View("grad", 5), 7, f32_bits(0.01))),
           encode(Contract(random_descriptor(rng, sizes), (1, 0, 2)))]
    for kind in KINDS:
        out.append(encode(_random_instr(rng, kind)))
    return out


def _decoder_cases(rng):
    words = []
    for w in _legal_words(rng):
        words.append(list(w))
        for _ in range(24):                    # single flipped bits anywhere
            v = list(w)
            b = int(rng.integers(0, 512))
            v[b // 32] ^= 1 << (b % 32)
            words.append(v)
        for _ in range(6):                     # a whole word randomized or cleared
            v = list(w)
            v[int(rng.integers(0, 16))] = int(rng.choice([0, 1, int(rng.integers(0, 2**32))]))
            words.append(v)
        for op in (0x00, 0x05, 0x17, 0x22, 0x2A, 0x31, 0x40, 0xFF):  # unassigned opcodes
            v = list(w)
            v[0] = (v[0] & ~0xFF) | op
            words.append(v)
        v = list(w)                            # bad store id in each slot
        v[1] |= int(rng.integers(4, 256)) << (8 * int(rng.integers(0, 3)))
        words.append(v)
    loop = _legal_words(rng)[3]
    words.append([loop[0], loop[1], 0] + list(loop[3:]))          # zero loop count
    upd = _legal_words(rng)[4]
    for mode in (1, 7, 15, 16):                                   # reserved update modes
        words.append([upd[0] | mode << 8] + list(upd[1:]))
    words.append(list(upd[:2]) + [0] + list(upd[3:]))             # zero update count
    return words


def test_decoder_error_codes_match_golden():
    from ttrain.rtl.sequencer import InstructionDecoder
    rng = np.random.default_rng(11)
    cases = _decoder_cases(rng)
    want = [_golden_code(w) for w in cases]
    dut = InstructionDecoder()
    got = []

    async def tb(ctx):
        for w in cases:
            ctx.set(dut.word, sum(int(x) << (32 * i) for i, x in enumerate(w)))
            got.append(ctx.get(dut.error))

    sim = Simulator(dut)
    sim.add_testbench(tb)
    sim.run()
    mism = [(i, hex(cases[i][0]), want[i], got[i]) for i in range(len(cases))
            if want[i] != got[i]]
    assert not mism, mism[:10]
    # every error code the decoder can raise appears among the cases
    assert {0, 1, 2, 6, 7, 8, 9}.issubset(set(want)), sorted(set(want))
