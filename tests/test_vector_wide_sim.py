# amaranth: UnusedElaboratable=no
"""WideVectorUnit (``rtl/vector_wide.py``) in the Amaranth simulator against the golden interpreter.

A Python model of the store port (:class:`PortModel`: four stores of uint32 words, random
``ready`` stalls on ``rd``/``wr``, random delays before each ``rd_data`` beat, writes landing
after a random delay with ``wr_idle`` low while any is pending, and reads that see only the
writes landed when they were accepted) serves the unit. Every command is a random instruction
(random shapes, strides, bases, layouts) on a fresh random image; after ``done`` every store
word is compared with :func:`ttrain.golden.interpreter.run` on the one-instruction program
(+ END), as are ``error`` and the ``elements`` counter.
"""

import numpy as np
import pytest
from amaranth.sim import Simulator

from random_programs import _INT_IMM
from test_fp32_sim import random_pairs
from ttrain.golden.contract import View
from ttrain.golden.interpreter import check_program, run
from ttrain.golden.isa import (ERR_INDEX, ERR_OVERLAP, OPS, SPEC, STORE_IDS, Elementwise, End,
                               Gather, Reduce, Update, f32_bits)
from ttrain.rtl.command import VectorCommand, vector_command
from ttrain.rtl.fp32 import FP32Mul, latency_of
from ttrain.rtl.vector_wide import WideVectorUnit
from ttrain.platforms.sim.verilator import lint_verilator

SIZES = {"param": 256, "grad": 256, "act": 512, "scratch": 512}
ADDR_BITS = 9
NAMES = {v: k for k, v in STORE_IDS.items()}


# -- the store port model ----------------------------------------------------------------------

class PortModel:
    """Cycle model of a store port (see ``rtl/port.py``) with random timing.

    It also checks the stream rules on the unit's side: a read or write request offered and
    not taken stays offered, unchanged, and no lane addresses a word outside its store.

    Parameters
    ----------
    dut : WideVectorUnit
    rng : numpy.random.Generator
    p_rd, p_wr : float
        Probability that ``rd.ready`` / ``wr.ready`` is high in a cycle.
    rd_delay : (int, int)
        Range of extra cycles (inclusive) before a read's data beat is offered (the first
        possible beat is the cycle after acceptance).
    wr_delay : (int, int)
        Range of cycles (inclusive) after acceptance before a write lands; writes land in
        acceptance order.
    buffer : int
        Read beats the port holds (accepted, data not yet taken); it stops accepting reads
        while full.
    """

    def __init__(self, dut, rng, *, p_rd=1.0, p_wr=1.0, rd_delay=(0, 0), wr_delay=(0, 0),
                 buffer=8):
        self.dut, self.rng = dut, rng
        self.p_rd, self.p_wr, self.rd_delay, self.wr_delay = p_rd, p_wr, rd_delay, wr_delay
        self.buffer = buffer
        self.width = dut.width
        self.vectors = dut.reads              # 2: a second vector in each read request
        self.mem = {STORE_IDS[k]: np.zeros(v, np.uint32) for k, v in SIZES.items()}
        self.rd_queue = []          # [time data is offered, lane words]
        self.pending = []           # [land time, store, addr, mask, words]
        self.now = 0
        self.reads = self.writes = 0
        self._rd_held = self._wr_held = None
        sb, ab, w = dut.store_bits, dut.addr_bits, self.width
        self._fields = (sb, ab, w)          # store, addr, mask widths (LSB first)

    def _lanes(self, store, addr, mask, what):
        out = []
        for w in range(self.width):
            if mask >> w & 1:
                a = addr + w
                if store not in self.mem or a >= self.mem[store].size:
                    raise AssertionError(f"{what} lane {w} at store {store} word {a} is "
                                         f"outside the store")
                out.append(a)
        return out

    def land(self, all_=False):
        while self.pending and (all_ or self.pending[0][0] < self.now):
            _, store, addr, mask, words = self.pending.pop(0)
            for w in range(self.width):
                if mask >> w & 1:
                    self.mem[store][addr + w] = words[w]

    def cycle_inputs(self, ctx):
        """Land due writes, then drive this cycle's port inputs; return the sampled outputs."""
        dut = self.dut.mem
        self.land()
        ctx.set(dut.wr_idle, int(not self.pending))
        rd_ready = int(self.rng.random() < self.p_rd and len(self.rd_queue) < self.buffer)
        ctx.set(dut.rd.ready, rd_ready)
        head = self.rd_queue[0] if self.rd_queue and self.rd_queue[0][0] <= self.now else None
        ctx.set(dut.rd_data.valid, int(head is not None))
        if head is not None:
            ctx.set(dut.rd_data.payload.as_value(),
                    sum(int(x) << (32 * w) for w, x in enumerate(head[1])))
        wr_ready = int(self.rng.random() < self.p_wr)
        ctx.set(dut.wr.ready, wr_ready)
        rd_valid, rd_p = ctx.get(dut.rd.valid), ctx.get(dut.rd.payload.as_value())
        wr_valid, wr_p = ctx.get(dut.wr.valid), ctx.get(dut.wr.payload.as_value())
        # stream rules: a request offered and not taken stays offered, unchanged
        for name, held, valid, p in (("rd", self._rd_held, rd_valid, rd_p),
                                     ("wr", self._wr_held, wr_valid, wr_p)):
            if held is not None and (not valid or p != held):
                raise AssertionError(f"{name} request withdrawn or changed before it was taken")
        self._rd_held = rd_p if rd_valid and not rd_ready else None
        self._wr_held = wr_p if wr_valid and not wr_ready else None
        return (rd_ready and rd_valid, rd_p, head is not None and ctx.get(dut.rd_data.ready),
                wr_ready and wr_valid, wr_p)

    def after_edge(self, sampled):
        """Apply the transfers of the cycle that just ended."""
        rd_go, rd_p, rdd_go, wr_go, wr_p = sampled
        sb, ab, w = self._fields
        if rdd_go:
            self.rd_queue.pop(0)
        if rd_go:
            words = []
            for v in range(self.vectors):       # the request's vectors, their fields in turn
                p = rd_p >> (v * (sb + ab + w))
                store, addr, mask = (p & (1 << sb) - 1, p >> sb & (1 << ab) - 1,
                                     p >> (sb + ab) & (1 << w) - 1)
                vec = [0] * w
                for lane, a in zip([k for k in range(w) if mask >> k & 1],
                                   self._lanes(store, addr, mask, "read")):
                    vec[lane] = int(self.mem[store][a])
                words += vec
            t = self.now + 1 + int(self.rng.integers(self.rd_delay[0], self.rd_delay[1] + 1))
            if self.rd_queue:
                t = max(t, self.rd_queue[-1][0])
            self.rd_queue.append([t, words])
            self.reads += 1
        if wr_go:
            store, addr, mask = (wr_p & (1 << sb) - 1, wr_p >> sb & (1 << ab) - 1,
                                 wr_p >> (sb + ab) & (1 << w) - 1)
            d = wr_p >> (sb + ab + w)
            words = [d >> (32 * k) & 0xFFFFFFFF for k in range(w)]
            self._lanes(store, addr, mask, "write")
            t = self.now + int(self.rng.integers(self.wr_delay[0], self.wr_delay[1] + 1))
            if self.pending:
                t = max(t, self.pending[-1][0])
            self.pending.append([t, store, addr, mask, words])
            self.writes += 1
        self.now += 1


async def execute(ctx, dut, model, instr, *, max_cycles=20000):
    """Issue one instruction and serve the port until ``done``; return ``(cycles, error)``.

    ``cycles`` counts from the cycle the command is accepted to the ``done`` pulse.
    """
    ctx.set(dut.cmd.payload, VectorCommand.const(vector_command(instr)))
    ctx.set(dut.cmd.valid, 1)
    start = None
    for n in range(max_cycles):
        accepted = ctx.get(dut.cmd.ready) and start is None
        if start is not None:
            assert ctx.get(dut.busy) and not ctx.get(dut.cmd.ready), "idle before done"
        elif not accepted:
            assert ctx.get(dut.busy), "not ready for a command while not busy"
        sampled = model.cycle_inputs(ctx)
        await ctx.tick()
        model.after_edge(sampled)
        if accepted:
            start = n
            ctx.set(dut.cmd.valid, 0)
        if ctx.get(dut.done):
            if model.pending:
                raise AssertionError("done while writes are still pending (wr_idle ignored)")
            cycles, error = n - start, ctx.get(dut.error)
            await ctx.tick()
            assert not ctx.get(dut.done) and not ctx.get(dut.busy), "done is not one pulse"
            assert ctx.get(dut.error) == error, "error not held after done"
            return cycles, error
    raise AssertionError(f"no done within {max_cycles} cycles for {instr}")


def simulate(width, instrs, *, seed, groups=None, timing=None, images=None,
             addr_bits=ADDR_BITS, **unit_kw):
    """Run ``instrs`` through one WideVectorUnit; return per-instruction results.

    ``images``: one image (name -> uint32 array) per instruction, loaded into the port model
    before it. Returns a list of ``(cycles, error, elements, image_after)``. ``unit_kw``: more
    WideVectorUnit parameters (``special=True`` ...).
    """
    dut = WideVectorUnit(width=width, addr_bits=addr_bits, groups=groups, **unit_kw)
    rng = np.random.default_rng(seed)
    out = []

    async def tb(ctx):
        model = PortModel(dut, rng, **(timing or {}))
        for k, ins in enumerate(instrs):
            for name, words in images[k].items():
                model.mem[STORE_IDS[name]] = np.array(words, np.uint32)
            cycles, error = await execute(ctx, dut, model, ins)
            out.append((cycles, error, ctx.get(dut.elements),
                        {NAMES[s]: w.copy() for s, w in model.mem.items()}))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return out


# -- random instructions -----------------------------------------------------------------------

def random_image(rng, sizes=SIZES):
    words = np.concatenate(random_pairs(sum(sizes.values()) // 2 + 1, int(rng.integers(1 << 30))))
    rng.shuffle(words)
    # a sprinkle of small exact values, so sums sometimes cancel exactly
    small = np.array([f32_bits(v) for v in (0.0, -0.0, 1.0, -1.0, 0.5, 3.0)], np.uint32)
    pick = rng.random(words.size) < 0.1
    words[pick] = rng.choice(small, pick.sum())
    image, k = {}, 0
    for name, n in sizes.items():
        image[name] = words[k:k + n].astype(np.uint32)
        k += n
    return image


def _store(rng):
    return str(rng.choice(list(SIZES)))


def _matrix_view(rng, rows, cols, style, *, store=None, source=False):
    """A view of a ``rows x cols`` operand laid out as ``style``."""
    store = store or _store(rng)
    pad = int(rng.integers(0, 3))
    if style == "rows":              # row-major, contiguous columns
        r, c = cols + pad, 1
    elif style == "cols":            # column-major (transposed), contiguous rows
        r, c = 1, rows + pad
    elif style == "strided":
        c = int(rng.integers(2, 4))
        r = cols * c + pad
    elif style == "bcast_row" and source:   # one row for every row (bias)
        r, c = 0, 1
    elif style == "bcast_col" and source:   # one word per row, broadcast along the columns
        r, c = 1, 0
    else:                            # scalar broadcast (sources) / dense otherwise
        r, c = (0, 0) if source else (cols, 1)
    span = (rows - 1) * r + (cols - 1) * c + 1
    base = int(rng.integers(0, SIZES[store] - span + 1)) if span <= SIZES[store] else None
    return None if base is None else View(store, base, r, c)


# every plain elementwise op of the ISA table (the special functions have their own tests)
EW_OPS = [spec.mnemonic for spec in OPS if spec.kind is Elementwise and not spec.requires]
_NSRC = {op: SPEC[op].sources for op in EW_OPS}
_IMMS = [f32_bits(v) for v in (1.5, -0.25, 0.0, -0.0, 3.0e38, 1e-40)] + [0x7FC00000, 0x7F800000]


def random_elementwise(rng):
    op = str(rng.choice(EW_OPS))
    rows, cols = int(rng.integers(1, 9)), int(rng.integers(1, 24))
    styles = ["rows", "cols", "strided", "dense", "bcast_row", "bcast_col", "scalar"]
    common = str(rng.choice(["rows", "rows", "cols", "dense", "strided", None]))

    def style(source):
        if common and rng.random() < 0.8:
            if source and rng.random() < 0.25:
                return "bcast_row" if common in ("rows", "dense") else "bcast_col"
            return common
        return str(rng.choice(styles))

    d = _matrix_view(rng, rows, cols, style(False))
    srcs = [_matrix_view(rng, rows, cols, style(True), source=True) for _ in range(_NSRC[op])]
    if d is None or any(s is None for s in srcs):
        return None
    if srcs and rng.random() < 0.3:          # in place
        srcs[int(rng.integers(len(srcs)))] = d
    imm = int(rng.choice(_IMMS)) if SPEC[op].imm else 0
    if op in _INT_IMM:
        imm = _INT_IMM[op](rng)
    if op == "fill" and rng.random() < 0.5:
        imm = int(rng.integers(1 << 32))
    a, b = (srcs + [None, None])[:2]
    return Elementwise(op, rows, cols, d, a, b, imm)


def random_reduce(rng):
    op = str(rng.choice(["sum", "max"]))
    rows, cols = int(rng.integers(1, 40)), int(rng.integers(1, 10))
    style = str(rng.choice(["rows", "cols", "cols", "strided"]))
    a = _matrix_view(rng, rows, cols, style)
    dstore = _store(rng)
    dr = 1 if rng.random() < 0.7 else int(rng.integers(2, 4))
    if (rows - 1) * dr + 1 > SIZES[dstore] or a is None:
        return None
    d = View(dstore, int(rng.integers(0, SIZES[dstore] - (rows - 1) * dr)), dr, 0)
    return Reduce(op, rows, cols, d, a, accumulate=bool(rng.random() < 0.4))


def random_gather(rng):
    op = str(rng.choice(["gather", "scatter_add"]))
    rows, cols, tr = int(rng.integers(1, 12)), int(rng.integers(1, 14)), int(rng.integers(1, 8))
    tstyle = str(rng.choice(["rows", "rows", "strided"]))
    ostyle = str(rng.choice(["rows", "rows", "strided"]))
    table = _matrix_view(rng, tr, cols, tstyle)
    other = _matrix_view(rng, rows, cols, ostyle)
    istore = _store(rng)
    ir = 1 if rng.random() < 0.6 else int(rng.integers(2, 4))
    if table is None or other is None or (rows - 1) * ir + 1 > SIZES[istore]:
        return None
    index = View(istore, int(rng.integers(0, SIZES[istore] - (rows - 1) * ir)), ir, 0)
    if op == "gather":
        return Gather(op, rows, cols, tr, other, table, index)
    return Gather(op, rows, cols, tr, table, other, index)


def random_update(rng):
    n = int(rng.integers(1, 70))
    st, sg = _store(rng), _store(rng)
    theta = View(st, int(rng.integers(0, SIZES[st] - n + 1)))
    grad = View(sg, int(rng.integers(0, SIZES[sg] - n + 1)))
    lr = int(rng.choice([f32_bits(v) for v in (1e-3, 0.1, -0.5, 0.0, 2.0)]))
    return Update(theta, grad, n, lr)


GENERATORS = {"elementwise": random_elementwise, "reduce": random_reduce,
              "gather": random_gather, "update": random_update}


def make_case(kind, rng):
    """Return a legal random instruction of ``kind`` and its image (indices filled in)."""
    while True:
        ins = GENERATORS[kind](rng)
        if ins is None:
            continue
        image = random_image(rng)
        if isinstance(ins, Gather):
            idx = rng.integers(0, ins.table_rows, ins.rows)
            if rng.random() < 0.5 and ins.rows > 1:       # repeated indices
                idx[rng.integers(ins.rows)] = idx[0]
            if rng.random() < 0.12:                        # an index outside the table
                idx[rng.integers(ins.rows)] = ins.table_rows + int(rng.integers(0, 3)) * 1000
            v = ins.index
            image[v.store][v.base + np.arange(ins.rows) * v.row_stride] = idx
        if check_program([ins, End()], SIZES)[0] == 0:
            return ins, image


def check_against_golden(instrs, images, results):
    elements = 0
    for ins, image, (cycles, error, count, got) in zip(instrs, images, results):
        want, stats = run([ins, End()], image)
        assert error == stats.error, f"{ins}: error {error}, golden {stats.error}"
        if not stats.error:
            elements += ins.count if isinstance(ins, Update) else ins.rows * ins.cols
        assert count == elements % (1 << 32), f"{ins}: elements {count}, want {elements}"
        for name in want:
            bad = np.flatnonzero(got[name] != want[name])
            if bad.size:
                rows = ", ".join(f"{name}[{a}]={got[name][a]:08x} want {want[name][a]:08x}"
                                 for a in bad[:6])
                raise AssertionError(f"{ins}: {bad.size} words differ: {rows}")


STALLY = {"p_rd": 0.7, "p_wr": 0.6, "rd_delay": (0, 4), "wr_delay": (0, 5), "buffer": 3}


@pytest.mark.parametrize("mix,seed", [({"elementwise": 30, "update": 6}, 1),
                                      ({"reduce": 15, "gather": 15}, 2)])
def test_random_instructions_match_golden(mix, seed):
    """Random instructions of the given kinds, shuffled, through one unit (width 4)."""
    rng = np.random.default_rng(seed)
    kinds = [k for k, n in mix.items() for _ in range(n)]
    rng.shuffle(kinds)
    cases = [make_case(kind, rng) for kind in kinds]
    instrs, images = [c[0] for c in cases], [c[1] for c in cases]
    results = simulate(4, instrs, seed=seed, timing=STALLY, images=images)
    check_against_golden(instrs, images, results)
    if "gather" in mix:
        assert any(r[1] == ERR_INDEX for r in results) and any(r[1] == 0 for r in results)


# -- throughput ----------------------------------------------------------------------------------

BENCH_SIZES = {name: 4096 for name in SIZES}
FAST = {"p_rd": 1.0, "p_wr": 1.0, "rd_delay": (0, 0), "wr_delay": (0, 0), "buffer": 8}


def benchmark_cases(rows=8, cols=64):
    """Named instructions for the cycle table (``rows x cols`` operands, dense unless noted)."""
    n = rows * cols
    dense = dict(rows=rows, cols=cols)
    a, b, d = View("act", 0, cols, 1), View("scratch", 0, cols, 1), View("act", 1024, cols, 1)
    idx_rows = 8
    return {
        "add (dense)": Elementwise("add", d=d, a=a, b=b, **dense),
        "add (row stride cols+1)": Elementwise("add", rows, cols - 1, View("act", 1024, cols, 1),
                                               View("act", 0, cols, 1),
                                               View("scratch", 0, cols, 1)),
        "add + bias (row stride 0)": Elementwise("add", d=d, a=a, b=View("param", 0, 0, 1),
                                                 **dense),
        "add (transposed)": Elementwise("add", cols, rows, View("act", 1024, 1, cols),
                                        View("act", 0, 1, cols), View("scratch", 0, 1, cols)),
        "add (col stride 2)": Elementwise("add", rows, cols // 2, View("act", 1024, cols, 2),
                                          View("act", 0, cols, 2), View("scratch", 0, cols, 2)),
        "scale": Elementwise("scale", d=d, a=a, imm=f32_bits(0.5), **dense),
        "copy": Elementwise("copy", d=d, a=a, **dense),
        "fill": Elementwise("fill", d=d, imm=f32_bits(1.0), **dense),
        "update": Update(View("param", 0), View("grad", 0), n, f32_bits(1e-3)),
        "rsum (rows in lanes, a.row 1)": Reduce("sum", cols, rows, View("scratch", 2048, 1, 0),
                                                View("act", 0, 1, cols)),
        "rsum (a.col 1, rows interleaved)": Reduce("sum", rows * 4, cols // 4,
                                                   View("scratch", 2048, 1, 0),
                                                   View("act", 0, cols // 4, 1)),
        "rmax (rows in lanes)": Reduce("max", cols, rows, View("scratch", 2048, 1, 0),
                                       View("act", 0, 1, cols)),
        "gather (8 rows x 64)": Gather("gather", idx_rows, cols, 4, View("act", 0, cols, 1),
                                       View("scratch", 0, cols, 1), View("param", 0, 1, 0)),
        "scatter_add (8 rows x 64)": Gather("scatter_add", idx_rows, cols, 4,
                                            View("act", 0, cols, 1),
                                            View("scratch", 0, cols, 1),
                                            View("param", 0, 1, 0)),
        # fixed cost: one element (the LRT/SVD programs are chains of these)
        "copy, 1 element": Elementwise("copy", 1, 1, View("act", 1024, 1, 1),
                                       View("act", 0, 1, 1)),
        "add, 1 element": Elementwise("add", 1, 1, View("act", 1024, 1, 1),
                                      View("act", 0, 1, 1), View("scratch", 0, 1, 1)),
        "mul, 1 element": Elementwise("mul", 1, 1, View("act", 1024, 1, 1),
                                      View("act", 0, 1, 1), View("scratch", 0, 1, 1)),
    }


def measure(width, cases, *, timing=FAST, seed=0, **unit_kw):
    """Return {name: (cycles, elements)} for ``cases`` (name -> instruction) on one unit."""
    rng = np.random.default_rng(seed)
    names = list(cases)
    images = []
    for name in names:
        image = random_image(rng, BENCH_SIZES)
        ins = cases[name]
        if isinstance(ins, Gather):
            v = ins.index
            image[v.store][v.base + np.arange(ins.rows) * v.row_stride] = \
                np.arange(ins.rows) % ins.table_rows
        images.append(image)
    instrs = [cases[k] for k in names]
    results = simulate(width, instrs, seed=seed, timing=timing, images=images, addr_bits=12,
                       **unit_kw)
    check_against_golden(instrs, images, results)
    return {k: (r[0], (ins.count if isinstance(ins, Update) else ins.rows * ins.cols))
            for k, r, ins in zip(names, results, instrs)}


def test_throughput_contiguous():
    """8 lanes, always-ready port: contiguous ops within 1.25x ideal + 24 cycles.

    Ideal = elements / (width / read beats per element beat) cycles (one read beat per cycle):
    8 x 64 add and 512-word UPDATE (two reads) width/2 elements per cycle, fill (one zero-mask
    read) and a 64-row x 8-column column-sum with the rows in the lanes (a.row 1) width per
    cycle. The 24 fixed cycles cover decode, the read round trip, the 12-cycle FP lanes, the
    result FIFO, the write and ``wr_idle`` (docs/vector-unit.md).
    """
    width = 8
    cases = benchmark_cases()
    reads = {"add (dense)": 2, "update": 2, "fill": 1, "rsum (rows in lanes, a.row 1)": 1}
    got = measure(width, {k: cases[k] for k in reads})
    for name, (cycles, n) in got.items():
        ideal = n / (width / reads[name])
        assert cycles <= 1.25 * ideal + 24, (name, cycles, ideal)


def test_two_read_vectors_per_request():
    """``reads=2``: an element beat's two sources in one read request (the port's second
    vector). Random elementwise ops (broadcast sources, transposed and flattened walks),
    UPDATE, raccum, gathers and scatter_add (which keeps its two beats) equal golden with
    random stalls; on an always-ready port a dense add takes half the read beats, a copy
    and a scatter_add the same as with one vector a request."""
    rng = np.random.default_rng(31)
    kinds = ["elementwise"] * 14 + ["update"] * 3 + ["gather"] * 5
    rng.shuffle(kinds)
    cases = [make_case(kind, rng) for kind in kinds]
    while len(cases) < len(kinds) + 3:
        ins = random_prng(rng)
        if ins is not None and ins.op == "raccum":
            cases.append((ins, random_image(rng)))
    instrs, images = [c[0] for c in cases], [c[1] for c in cases]
    check_against_golden(instrs, images, simulate(4, instrs, seed=31, timing=STALLY,
                                                  images=images, reads=2))
    width = 8
    bench = benchmark_cases()
    two = measure(width, {k: bench[k] for k in ("add (dense)", "update", "fill")}, reads=2)
    n = two["add (dense)"][1]
    # one read request per element beat (with one vector a request: 2 n / width + 11, 139)
    assert two["add (dense)"][0] <= n / width + 12, two
    assert two["fill"][0] <= n / width + 12, two          # one-read ops as before (75)
    assert two["update"][0] >= 2 * n / width, two        # the writer's two beats bound it
    with pytest.raises(ValueError, match="reads"):
        WideVectorUnit(width=4, addr_bits=8, reads=3)


def test_ops_without_the_multiplier_skip_its_stage():
    """An add or copy (no multiply, no PRNG draw) enters the adder stage one cycle after it
    fires: 5 cycles (the multiplier's latency less that register) fewer than a mul with the
    same reads, bit-exact (``measure`` checks every result); mul keeps the 12-cycle lanes."""
    cases = benchmark_cases()
    names = ("copy, 1 element", "add, 1 element", "mul, 1 element")
    got = {k: c for k, (c, _) in measure(8, {k: cases[k] for k in names}).items()}
    assert got["add, 1 element"] == got["mul, 1 element"] - (latency_of(FP32Mul) - 1), got
    assert got["copy, 1 element"] <= got["add, 1 element"], got


if __name__ == "__main__":                                   # the table of docs/vector-unit.md
    for width in (4, 8):
        for name, (cyc, n) in measure(width, benchmark_cases()).items():
            print(f"width {width:2d}  {name:34s} {n:5d} elements {cyc:6d} cycles "
                  f"{n / cyc:6.2f} elements/cycle")


# -- corner cases, contract, parameters, lint --------------------------------------------------

def test_one_lane_and_one_slot_match_golden():
    """width 1 (every beat one word) and groups 1 (each reduction step waits for the adder)."""
    rng = np.random.default_rng(11)
    cases = [make_case(kind, rng) for kind in ("elementwise", "reduce", "gather", "update",
                                               "reduce", "elementwise", "reduce")]
    instrs, images = [c[0] for c in cases], [c[1] for c in cases]
    check_against_golden(instrs, images,
                         simulate(1, instrs, seed=11, groups=1, timing=STALLY, images=images))


def test_in_place_and_repeated_scatter_indices_match_golden():
    """d == a / d == b in place for every elementwise op, and a scatter onto one table row."""
    rng = np.random.default_rng(5)
    v = View("act", 3, 9, 1)
    vt = View("act", 100, 1, 9)                           # the same words, transposed
    instrs = [Elementwise(op, 4, 9, v, v, View("scratch", 7, 9, 1) if _NSRC[op] == 2 else None,
                          f32_bits(-1.5) if op in ("scale", "addi")
                          else _INT_IMM[op](rng) if op in _INT_IMM else 0)
              for op in EW_OPS if _NSRC[op]]
    instrs += [Elementwise("sub", 9, 4, vt, View("scratch", 0, 1, 9), vt),
               Elementwise("mul", 4, 9, v, v, v),
               Reduce("sum", 6, 5, View("act", 300, 1, 0), View("act", 310, 5, 1),
                      accumulate=True),
               Gather("scatter_add", 6, 7, 3, View("act", 0, 7, 1), View("scratch", 0, 7, 1),
                      View("param", 0, 1, 0))]
    images = [random_image(rng) for _ in instrs]
    images[-1]["param"][:6] = [2, 2, 0, 2, 2, 2]
    for ins in instrs:
        assert check_program([ins, End()], SIZES)[0] == 0, ins
    check_against_golden(instrs, images,
                         simulate(4, instrs, seed=5, timing=STALLY, images=images))


def test_partial_overlaps_are_illegal_programs():
    """What the unit relies on: a written view is the identical view of a source or disjoint.

    Reads run ahead of writes (by up to the read tags, the FP lanes and the result FIFO), so a
    written word that a *later* element reads would be read stale or fresh depending on
    timing. The golden check pass rejects every such program (``ERR_OVERLAP``); the
    Sequencer does not repeat that check, so the compiler must never emit one.
    """
    a = View("act", 0, 8, 1)
    illegal = [
        Elementwise("add", 4, 8, View("act", 1, 8, 1), a, View("scratch", 0, 8, 1)),
        Elementwise("copy", 4, 8, View("act", 8, 8, 1), a),
        Elementwise("scale", 4, 8, View("act", 0, 1, 4), a, imm=0),
        Reduce("sum", 4, 8, View("act", 31, 1, 0), a),
        Gather("gather", 4, 8, 2, View("act", 4, 8, 1), View("act", 20, 8, 1),
               View("param", 0, 1, 0)),
        Gather("scatter_add", 4, 8, 2, View("act", 0, 8, 1), View("scratch", 0, 8, 1),
               View("act", 10, 1, 0)),
        Update(View("param", 0), View("param", 10), 16, f32_bits(0.1)),
    ]
    for ins in illegal:
        assert check_program([ins, End()], SIZES)[0] == ERR_OVERLAP, ins


def _fp32_compare_0():
    from ttrain.rtl.fp32 import FP32Compare
    return FP32Compare(latency=0)


@pytest.mark.parametrize("kwargs,match", [
    ({"width": 3, "addr_bits": 8}, "power of two"),
    ({"width": 0, "addr_bits": 8}, "width must be an int"),
    ({"width": 4, "addr_bits": 33}, "addr_bits must be an int in 1..32"),
    ({"width": 4, "addr_bits": 8, "store_bits": 1}, "store_bits"),
    ({"width": 4, "addr_bits": 8, "groups": 0}, "groups"),
    ({"width": 4, "addr_bits": 8, "max_reads": 1}, "max_reads"),
    ({"width": True, "addr_bits": 8}, "width"),
    ({"width": 4, "addr_bits": 8, "special": True, "special_impl": "vhdl"}, "special_impl"),
    ({"width": 4, "addr_bits": 8, "special_functions": ("exp",)}, "needs special=True"),
    ({"width": 4, "addr_bits": 8, "special": True, "special_functions": ("sigmoid",)}, "unknown"),
    ({"width": 4, "addr_bits": 8, "special": True, "special_lanes": 3}, "special_lanes"),
    ({"width": 4, "addr_bits": 8, "special": True, "special_lanes": 8}, "special_lanes"),
    ({"width": 4, "addr_bits": 8, "special_lanes": 2}, "needs special=True"),
    ({"width": 4, "addr_bits": 8, "units": {"div": object}}, "units names roles"),
    ({"width": 4, "addr_bits": 8, "units": {"cmp": _fp32_compare_0}},
     r"units\['cmp'\] has latency 0, not the 1 of its role"),
])
def test_bad_parameters_are_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        WideVectorUnit(**kwargs)
    with pytest.raises(TypeError, match="special must be a bool"):
        WideVectorUnit(width=4, addr_bits=8, special=1)


def test_shared_units_of_a_simulation_top():
    # the sim flavor's top instances one module per FP32 unit type in the engine and in both
    # vector units; the build must be given exactly those
    from ttrain.platforms.hw import preset_hw_config
    from ttrain.rtl.top import Accelerator
    acc = Accelerator(**preset_hw_config("tiny", lanes=4).accelerator_kwargs("sim"))
    assert [u.module for u in acc.shared_units] == ["ttrain_fp32mul", "ttrain_fp32add",
                                                    "ttrain_fp32compare_l1"]
    # the synth flavor instances the same modules (the one-file export appends them), and the
    # special unit's FP32 units besides
    synth = Accelerator(**preset_hw_config("tiny", lanes=4).accelerator_kwargs("synth"))
    names = [u.module for u in acc.shared_units]
    assert [u.module for u in synth.shared_units] == names
    assert set(names) <= {u.module for u in synth.instanced_units}
    # only an all-Amaranth engine instances none
    kw = preset_hw_config("tiny", lanes=4).accelerator_kwargs("synth")
    kw["engine_units"] = "amaranth"
    assert Accelerator(**kw).shared_units == []


def test_signature():
    dut = WideVectorUnit(width=8, addr_bits=12, store_bits=3, groups=5)
    assert (dut.width, dut.addr_bits, dut.store_bits, dut.groups) == (8, 12, 3, 5)
    assert dut.groups == WideVectorUnit(width=8, addr_bits=12).groups - 3
    assert dut.latency == 12
    port = dut.signature.members["mem"].signature
    assert (port.width, port.addr_bits, port.store_bits) == (8, 12, 3)
    assert dut.cmd.payload.shape() == VectorCommand


def test_lint_clean():
    # the unit alone at two widths; with its special-function unit it is linted inside the
    # shared top (tests/test_top_verilator.py::test_top_lint_clean: every function, -Wall)
    for width, groups in ((4, None), (1, 1)):
        assert lint_verilator(WideVectorUnit(width=width, addr_bits=12, groups=groups),
                              name=f"ttrain_vector_wide_w{width}") == ""
    # the update unit, and special units of two kinds (the serializer's two group sizes)
    assert lint_verilator(WideVectorUnit(width=4, addr_bits=12, ops="update"),
                          name="ttrain_update_wide_w4") == ""
    from ttrain.platforms.sim.top import special_fp_sources
    assert lint_verilator(WideVectorUnit(width=4, addr_bits=12, special=True,
                                         special_impl="verilog", special_functions=SP_FUNCS,
                                         special_lanes=4, special_full=2,
                                         every_lane=("tanh_grad",)),
                          name="ttrain_vector_wide_sf",
                          extra_sources=special_fp_sources()) == ""


# -- special functions ---------------------------------------------------------------------------

# a small special-function unit for the Amaranth simulator (the full one is ~90 FP32 units;
# tests/test_top_verilator.py runs every function on the full unit under Verilator)
SP_FUNCS = ("recip", "tanh_grad")
SP_EDGES = np.array([0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFF800001,
                     0x00000001, 0x807FFFFF, 0x7F7FFFFF, 0x3F800000, 0xBF800000, 0x00800000,
                     0x7E800000, 0x3F000000], np.uint32)


def _special_image(rng):
    image = random_image(rng)
    for name in image:                        # edge patterns scattered over every store
        pick = rng.choice(image[name].size, SP_EDGES.size, replace=False)
        image[name][pick] = SP_EDGES
    return image


@pytest.mark.parametrize("special_lanes", [1, 2])
def test_special_functions_match_golden(special_lanes):
    """Special ops (a recip + tanh_grad unit; with ``special_lanes`` units side by side)
    through every beat shape: wide rows, transposed, dense, strided (one element per beat),
    broadcast row / column, in place; random port stalls; edge patterns (zeros, infinities,
    NaNs, subnormals) in every store."""
    rng = np.random.default_rng(23)
    v = View("act", 3, 9, 1)
    instrs = [
        Elementwise("recip", 5, 13, View("scratch", 1, 13, 1), View("act", 40, 13, 1)),   # dense
        Elementwise("tanh_grad", 3, 10, View("scratch", 0, 12, 1), View("grad", 7, 11, 1)),
        Elementwise("recip", 7, 3, View("param", 0, 1, 9), View("act", 5, 1, 8)),   # transposed
        Elementwise("tanh_grad", 3, 4, View("act", 0, 9, 2), View("grad", 1, 5, 1)),  # strided
        Elementwise("recip", 4, 9, v, v),                                           # in place
        Elementwise("tanh_grad", 4, 6, View("scratch", 100, 6, 1), View("param", 9, 0, 1)),
        Elementwise("recip", 2, 5, View("grad", 30, 5, 1), View("act", 77, 1, 0)),   # bcast col
    ]
    images = [_special_image(rng) for _ in instrs]
    for ins in instrs:
        assert check_program([ins, End()], SIZES)[0] == 0, ins
    results = simulate(4, instrs, seed=23, timing=STALLY, images=images, special=True,
                       special_functions=SP_FUNCS, special_lanes=special_lanes)
    check_against_golden(instrs, images, results)


def test_log_opcode_is_routed_to_the_unit():
    """``log`` (opcode 0x47, function code 7) reaches the unit's log datapath: a log-only unit
    (the others are covered above and on the full unit in test_top_verilator.py), a transposed
    and an in-place log op over edge patterns and positive values, bit-exact against the
    interpreter (which runs golden.special.fp32_log)."""
    from ttrain.golden.isa import SPECIAL_OPS
    assert SPECIAL_OPS["log"] == 0x47
    rng = np.random.default_rng(47)
    v = View("act", 3, 4, 1)
    instrs = [Elementwise("log", 3, 4, View("scratch", 0, 1, 3), View("act", 40, 4, 1)),
              Elementwise("log", 2, 4, v, v)]
    images = [_special_image(rng) for _ in instrs]
    images[0]["act"][40:52] = np.abs(rng.standard_normal(12) * 9).astype(np.float32).view(
        np.uint32)
    results = simulate(4, instrs, seed=47, images=images, special=True,
                       special_functions=("log",))
    check_against_golden(instrs, images, results)


def test_special_throughput_and_missing_unit():
    """8 lanes, always-ready port: a dense 4 x 48 special op streams one element per cycle
    (<= elements + latency + 40 cycles); a strided one (one element per beat) is bounded by the
    result FIFO credits. Without ``special`` the unit ends a special op with ERR_OPCODE and
    writes nothing."""
    from ttrain.golden.isa import ERR_OPCODE
    dense = Elementwise("tanh_grad", 4, 48, View("act", 1024, 48, 1), View("act", 0, 48, 1))
    strided = Elementwise("recip", 8, 6, View("scratch", 0, 8, 1), View("act", 0, 6, 9))
    unit = WideVectorUnit(width=8, addr_bits=12, special=True, special_functions=SP_FUNCS)
    lat, depth = unit.special_latency, unit.result_depth
    assert depth * 8 >= lat + 16                  # credits cover the latency for full beats
    got = measure(8, {"dense": dense, "strided": strided}, special=True,
                  special_functions=SP_FUNCS)
    cycles, n = dense_cycles, dense_n = got["dense"]
    assert n <= cycles <= n + lat + 40, (cycles, n, lat)
    cycles, n = got["strided"]
    assert cycles <= (n / depth + 1) * (lat + 12), (cycles, n, depth, lat)
    # four (tanh_grad-only) units side by side: the dense op streams four elements a cycle
    wide = WideVectorUnit(width=8, addr_bits=12, special=True, special_functions=SP_FUNCS,
                          special_lanes=4)
    assert wide.result_depth * 8 >= 4 * lat + 16
    c4, n4 = measure(8, {"dense": dense}, special=True, special_functions=("tanh_grad",),
                     special_lanes=4)["dense"]
    assert n4 == dense_n and dense_n / 4 <= c4 <= dense_n / 4 + lat + 40 < dense_cycles, \
        (c4, dense_cycles, dense_n, lat)
    # per-function latency: a short tanh_grad op takes its own 13 cycles, not recip's
    own = unit.special_latencies
    assert own["tanh_grad"] == 13 < own["recip"] == lat
    short = Elementwise("tanh_grad", 1, 2, View("act", 0, 2, 1), View("act", 64, 2, 1))
    cycles, n = measure(8, {"short": short}, special=True, special_functions=SP_FUNCS)["short"]
    assert cycles <= own["tanh_grad"] + 20 < lat, (cycles, own)
    rng = np.random.default_rng(3)
    image = random_image(rng)
    res = simulate(4, [Elementwise("exp", 2, 3, View("act", 0, 3, 1), View("grad", 0, 3, 1))],
                   seed=3, images=[image])
    cycles, error, elements, after = res[0]
    assert error == ERR_OPCODE and elements == 0
    assert all(np.array_equal(after[k], image[k]) for k in image)


def random_prng(rng):
    """A random PRNG instruction (golden.isa.Random) with its layouts, a seed word in scratch
    and a d that does not overlap a or the seed."""
    from ttrain.golden.isa import RANDOM_OPS, Random
    op = str(rng.choice(sorted(RANDOM_OPS)))
    rows, cols = int(rng.integers(1, 7)), int(rng.integers(1, 20))
    styles = ["rows", "cols", "strided", "dense"]
    common = str(rng.choice(styles))
    d = _matrix_view(rng, rows, cols, common, store="act")
    if op == "raccum" and rng.random() < 0.5:
        a = View("param", int(rng.integers(0, 200)), 0, 0)          # broadcast coefficient
    else:
        a = _matrix_view(rng, rows, cols, common, store="param", source=True)
    seed = View("scratch", int(rng.integers(0, 500)), 1, 1)
    if d is None or a is None:
        return None
    sigma = int(rng.integers(1, 256)) if op.startswith("perturb") else 0
    return Random(op, rows, cols, d, a, seed, int(rng.integers(0, 1 << 32)), sigma)


def test_prng_instructions_match_golden():
    """perturb8/perturb32 (and the -sigma forms)/raccum/runif on the wide unit (seed pre-read, per-lane indices over
    wide, transposed, flattened and single beats) equal golden.isa.Random, random stalls."""
    from ttrain.golden.isa import RANDOM_OPS
    rng = np.random.default_rng(23)
    instrs, images = [], []
    while len(instrs) < 30:
        ins = random_prng(rng)
        if ins is None:
            continue
        image = random_image(rng)
        if ins.op.startswith("perturb"):               # small integers as in a weight copy
            image["param"] = (rng.integers(-200, 200, SIZES["param"]) & 0xFFFFFFFF).astype(
                np.uint32)
        instrs.append(ins)
        images.append(image)
    assert {i.op for i in instrs} == set(RANDOM_OPS)
    check_against_golden(instrs, images, simulate(4, instrs, seed=23, timing=STALLY,
                                                  images=images))


def test_update_unit_runs_update_alone():
    """``ops="update"`` (the top's update unit, to which the sequencer sends UPDATE only):
    random UPDATEs with random stalls equal golden, the same cycles as the full unit's; every
    other kind of op (elementwise, integer, reduce, gather, PRNG) ends with ERR_OPCODE,
    changes no word and counts no element; the unit has no comparators and no special
    unit."""
    from ttrain.golden.isa import ERR_OPCODE
    rng = np.random.default_rng(29)
    updates = [make_case("update", rng) for _ in range(8)]
    others = [make_case(kind, rng) for kind in ("elementwise", "elementwise", "reduce",
                                                "gather")]
    prng = None
    while prng is None:
        prng = random_prng(rng)
    others.append((prng, random_image(rng)))
    cases = updates[:3] + others[:2] + updates[3:6] + others[2:] + updates[6:]
    instrs, images = [c[0] for c in cases], [c[1] for c in cases]
    got = simulate(4, instrs, seed=29, timing=STALLY, images=images, ops="update")
    ups = [k for k, ins in enumerate(instrs) if isinstance(ins, Update)]
    check_against_golden([instrs[k] for k in ups], [images[k] for k in ups],
                         [got[k] for k in ups])
    elements = 0
    for ins, image, (cycles, error, count, after) in zip(instrs, images, got):
        if isinstance(ins, Update):
            elements += ins.count
            continue
        assert error == ERR_OPCODE, ins
        assert count == elements, ins
        assert all(np.array_equal(after[k], image[k]) for k in image), ins
    full = simulate(4, [instrs[k] for k in ups], seed=29, timing=FAST,
                    images=[images[k] for k in ups])
    fast = simulate(4, [instrs[k] for k in ups], seed=29, timing=FAST,
                    images=[images[k] for k in ups], ops="update")
    assert [r[0] for r in fast] == [r[0] for r in full]
    from amaranth.hdl import Fragment
    unit = WideVectorUnit(width=4, addr_bits=ADDR_BITS, ops="update")
    assert unit.ops == "update" and not unit.special
    parts = sorted(sub[1] for sub in Fragment.get(unit, None).subfragments)
    assert parts == ["add0", "add1", "add2", "add3", "mul0", "mul1", "mul2", "mul3", "res",
                     "tags"]
    with pytest.raises(ValueError, match="ops must be 'all'"):
        WideVectorUnit(width=4, addr_bits=ADDR_BITS, ops="vector")
    with pytest.raises(ValueError, match="runs no special functions"):
        WideVectorUnit(width=4, addr_bits=ADDR_BITS, ops="update", special=True)


def test_special_units_with_fewer_functions():
    """``special_full`` < ``special_lanes``: 4 units side by side, of which 2 have every
    function and the other 2 only the every-lane set (here ``tanh_grad``, in the machine
    GELU and its gradient: small units for the Amaranth simulator). Every beat shape and
    random stalls bit-exact for both kinds of function; a dense every-lane op streams 4
    elements a cycle, a dense op of the other function 2."""
    kw = dict(special=True, special_functions=SP_FUNCS, special_lanes=4, special_full=2,
              every_lane=("tanh_grad",))
    unit = WideVectorUnit(width=8, addr_bits=12, **kw)
    assert unit.special_full == 2 and unit.special_lanes == 4
    rng = np.random.default_rng(31)
    v = View("act", 3, 9, 1)
    instrs = [
        Elementwise("recip", 5, 13, View("scratch", 1, 13, 1), View("act", 40, 13, 1)),
        Elementwise("tanh_grad", 3, 10, View("scratch", 0, 12, 1), View("grad", 7, 11, 1)),
        Elementwise("tanh_grad", 7, 3, View("param", 0, 1, 9), View("act", 5, 1, 8)),
        Elementwise("recip", 3, 4, View("act", 0, 9, 2), View("grad", 1, 5, 1)),
        Elementwise("tanh_grad", 4, 9, v, v),
        Elementwise("recip", 2, 5, View("grad", 30, 5, 1), View("act", 77, 1, 0)),
    ]
    images = [_special_image(rng) for _ in instrs]
    results = simulate(8, instrs, seed=31, timing=STALLY, images=images, **kw)
    check_against_golden(instrs, images, results)
    lat = unit.special_latencies
    every = Elementwise("tanh_grad", 2, 48, View("act", 1024, 48, 1), View("act", 0, 48, 1))
    other = Elementwise("recip", 2, 48, View("act", 1024, 48, 1), View("act", 0, 48, 1))
    got = measure(8, {"every": every, "other": other}, **kw)
    (c4, n), (c2, _) = got["every"], got["other"]
    assert n / 4 <= c4 <= n / 4 + lat["tanh_grad"] + 40, (c4, n)
    assert n / 2 <= c2 <= n / 2 + lat["recip"] + 40 and c2 > c4 + n / 8, (c2, c4, n)
    for bad, match in (({"special_full": 3}, "special_full must be a power of two"),
                       ({"special_full": 8}, "special_full must be a power of two"),
                       ({"every_lane": ("gelu",)}, "which special_functions leaves out")):
        with pytest.raises(ValueError, match=match):
            WideVectorUnit(width=8, addr_bits=12, **{**kw, **bad})
