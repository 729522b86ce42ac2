# amaranth: UnusedElaboratable=no
"""Constrained-random programs through the RTL sequencer in the Amaranth simulator, with random
unit latencies and stalls, every store word against the golden interpreter.

The harness: :class:`ttrain.rtl.sequencer.Sequencer`, a vector unit and an update unit (two
``VectorUnit(handshake=True)`` whose read requests, read answers and writes are stalled at
random by an LFSR in the design, so no Python runs per cycle for them) on four memories, and a
contraction engine played by the testbench that — unlike ``test_sequencer_sim.py``'s stand-in,
which reads its operands at once — waits a random number of cycles after accepting a
descriptor before it reads A, B (and C when accumulating), waits again, then writes C in two
parts, and is not ready for a random time after each one. So a missing write-after-read check
(the engine overwriting words the vector unit has not read yet), a missing read-after-write
check (the engine reading before the vector unit's writes) and a missing write-after-write
check show as wrong words. Programs: the issue's case (64-word copy reading ``scratch[0:64]``,
then a contraction writing ``scratch[60:64]``) and its analogues, and seeded random programs
of :class:`random_programs.ProgramGen` (no special functions: this vector unit has none); the
out-of-range codes of every slot (``ERR_C/A/B_RANGE``, the edge and far cases) at the
sequencer's check pass. ``TTRAIN_RANDOM_SIM_SEEDS=N`` runs N seeds of random programs (3).
"""

import os

import numpy as np
from amaranth.hdl import Elaboratable, Module, Mux, Signal
from amaranth.lib import memory
from amaranth.sim import Simulator

from ttrain.golden.contract import contract, view_addresses
from ttrain.golden.interpreter import run
from ttrain.golden.isa import OPS, Elementwise, Program, encode_program
from ttrain.rtl.sequencer import Sequencer
from ttrain.testbench.vector_ref import VectorUnit
from sequencer_harness import connect_units, descriptor_of, load_and_run, read_image
from random_programs import STORES, ProgramGen, hazards, illegal_variants, issue_war_program

#: The elementwise ops the one-element reference vector unit implements: every plain one of
#: the ISA table (it refuses the special functions with ERR_OPCODE).
REFERENCE_OPS = tuple(s.mnemonic for s in OPS if s.kind is Elementwise and not s.requires)
SIZE = 256          # words per store
WINDOW = 128        # words the random operands use (the rest must stay unchanged)


class _Lfsr(Elaboratable):
    """A 16-bit Galois LFSR per stall signal: ``go`` is high with probability ~``p``."""

    def __init__(self, seed, p):
        self.seed = seed & 0xFFFF or 1
        self.threshold = int(p * 65536)
        self.go = Signal()

    def elaborate(self, platform):
        m = Module()
        s = Signal(16, init=self.seed)
        m.d.sync += s.eq(Mux(s[0], (s >> 1) ^ 0xB400, s >> 1))
        m.d.comb += self.go.eq(s < self.threshold)
        return m


class _Harness(Elaboratable):
    def __init__(self, sizes, imem_depth, stall_seed, p_go):
        self.seq = Sequencer(store_sizes=sizes, imem_depth=imem_depth)
        ab = max(1, (max(sizes.values()) - 1).bit_length())
        self.vec = VectorUnit(addr_bits=ab, handshake=True)
        self.upd = VectorUnit(addr_bits=ab, handshake=True)
        self.mems = [memory.Memory(shape=32, depth=sizes[s], init=[]) for s in STORES]
        self.lfsrs = [[_Lfsr(stall_seed * 7 + 3 * u + k + 1, p_go) for k in range(3)]
                      for u in range(2)]

    def elaborate(self, platform):
        m = Module()
        m.submodules.seq = seq = self.seq
        m.submodules.vec = vec = self.vec
        m.submodules.upd = upd = self.upd
        connect_units(m, seq, vec, upd)
        for s, mem in enumerate(self.mems):
            m.submodules[f"mem{s}"] = mem
        for u, unit in enumerate((vec, upd)):
            go_r, go_v, go_w = (l.go for l in self.lfsrs[u])
            for k, l in enumerate(self.lfsrs[u]):
                m.submodules[f"lfsr{u}_{k}"] = l
            rd_acc = unit.rd_en & go_r
            wr_acc = unit.wr_en & go_w
            pending = Signal(name=f"pending{u}")
            with m.If(rd_acc):
                m.d.sync += pending.eq(1)
            with m.Elif(pending & go_v):
                m.d.sync += pending.eq(0)
            m.d.comb += [unit.rd_ready.eq(go_r), unit.wr_ready.eq(go_w),
                         unit.rd_valid.eq(pending & go_v)]
            rdata = []
            for s, mem in enumerate(self.mems):
                rp = mem.read_port(transparent_for=())
                wp = mem.write_port()
                m.d.comb += [rp.en.eq(rd_acc & (unit.rd_store == s)), rp.addr.eq(unit.rd_addr),
                             wp.en.eq(wr_acc & (unit.wr_store == s)), wp.addr.eq(unit.wr_addr),
                             wp.data.eq(unit.wr_data)]
                rdata.append(rp.data)
            last = Signal(2, name=f"last{u}")
            with m.If(rd_acc):
                m.d.sync += last.eq(unit.rd_store)
            word = Mux(last[1], Mux(last[0], rdata[3], rdata[2]),
                       Mux(last[0], rdata[1], rdata[0]))
            m.d.comb += unit.rd_data.eq(Mux(unit.rd_valid, word, 0x7F80DEAD))
        return m


def run_programs(programs, image, *, seed=0, p_go=0.6, max_read_delay=24, max_write_delay=24):
    """Run each flat program of ``programs`` in turn; return ``[(image, code, pc, executed,
    concurrent)]`` where ``concurrent`` counts cycles in which the engine held a descriptor
    while the vector or update unit was busy. The engine's delays are drawn from ``seed``."""
    sizes = {s: len(image[s]) for s in STORES}
    depth = max(len(p[1] if isinstance(p, tuple) else p) // 16 for p in programs) + 1
    h = _Harness(sizes, depth, seed, p_go)
    seq = h.seq
    rng = np.random.default_rng(seed)
    results = []
    conc = [0]

    async def wait(ctx, n):
        for _ in range(n):
            await ctx.tick()
            if ctx.get(h.vec.busy) or ctx.get(h.upd.busy):
                conc[0] += 1

    async def engine(ctx):
        while True:
            ctx.set(seq.eng.ready, 0)
            await wait(ctx, int(rng.integers(0, 4)))
            ctx.set(seq.eng.ready, 1)
            while True:
                _, _, valid, p = await ctx.tick().sample(seq.eng.valid, seq.eng.payload)
                if valid:
                    break
            ctx.set(seq.eng.ready, 0)
            desc = descriptor_of(p)
            await wait(ctx, int(rng.integers(0, max_read_delay + 1)))
            out = contract(desc, read_image(ctx, h.mems, sizes))      # operands read now
            await wait(ctx, int(rng.integers(0, max_write_delay + 1)))
            mem = h.mems[STORES.index(desc.c.store)]
            addrs = np.unique(view_addresses(desc.c, desc.batch, desc.m, desc.n))
            half = len(addrs) // 2
            for part in (addrs[:half], addrs[half:]):         # C lands in two parts
                for a in part:
                    ctx.set(mem.data[int(a)], int(out[desc.c.store][a]))
                await wait(ctx, int(rng.integers(1, 4)))
            ctx.set(seq.eng_done, 1)
            await ctx.tick()
            ctx.set(seq.eng_done, 0)

    async def host(ctx):
        for s, mem in enumerate(h.mems):
            for a, wd in enumerate(image[STORES[s]]):
                ctx.set(mem.data[a], int(wd))
        for words in programs:
            if isinstance(words, tuple):                      # (writes, words)
                writes, words = words
                for store, base, vals in writes:
                    mem = h.mems[STORES.index(store)]
                    for i, wd in enumerate(vals):
                        ctx.set(mem.data[base + i], int(wd))
            await load_and_run(ctx, seq, words, on_start=lambda: conc.__setitem__(0, 0))
            results.append((read_image(ctx, h.mems, sizes), ctx.get(seq.error_code),
                            ctx.get(seq.error_pc),
                            ctx.get(seq.executed), conc[0]))

    sim = Simulator(h)
    sim.add_clock(1e-8)
    sim.add_testbench(engine, background=True)
    sim.add_testbench(host)
    sim.run()
    return results


def _compare(got, want, what):
    for s in STORES:
        bad = np.nonzero(got[s] != want[s])[0]
        assert bad.size == 0, (what, s, bad[:8].tolist(),
                               [hex(int(x)) for x in got[s][bad[:4]]],
                               [hex(int(x)) for x in want[s][bad[:4]]])


def _image(rng):
    return {s: (rng.standard_normal(SIZE) * 3).astype(np.float32).view(np.uint32).copy()
            for s in STORES}


def test_issue_war_case_and_analogues_with_late_operand_reads():
    """The issue's copy-then-contraction WAR case and its RAW/WAW/engine-first analogues on an
    engine that reads its operands late; each pair overlaps and (apart from the dependency)
    the units really run concurrently in some of them."""
    rng = np.random.default_rng(11)
    image = _image(rng)
    kinds = ("WAR", "RAW", "WAW", "RAW_E", "WAR_E")
    progs = [Program(issue_war_program(k), {s: SIZE for s in STORES}).words() for k in kinds]
    for k, p in zip(kinds, progs):
        assert hazards(issue_war_program(k)).get(k.split("_")[0], 0) >= 1
    for seed in (1, 2):
        res = run_programs(progs, image, seed=seed, max_read_delay=4, max_write_delay=4)
        cur = image
        for k, words, (got, code, pc, executed, _) in zip(kinds, progs, res):
            want, st = run(words, cur)
            assert st.ok and code == 0, (k, code, pc)
            assert executed == st.instructions
            _compare(got, want, (seed, k))
            cur = want


def test_random_programs_with_random_latencies_bit_exact():
    """Seeded random programs (RAW/WAR/WAW between the engine, vector and update units,
    LOOPs, BARRIERs, gathers, crafted FP32 operands) with random stalls and engine delays:
    every word of every store after every program equals the interpreter's, and the hazards
    and the overlap really happened."""
    sizes = {s: SIZE for s in STORES}
    window = {s: WINDOW for s in STORES}
    total, conc = {}, 0
    seeds = int(os.environ.get("TTRAIN_RANDOM_SIM_SEEDS", "") or 3)
    for seed in range(1, seeds + 1):
        gen = ProgramGen(seed, sizes, window, special=False, max_elems=24, index_words=16,
                         max_mn=4, max_k=4, plain_ops=REFERENCE_OPS)
        image = gen.image()
        items, cur = [], {s: w.copy() for s, w in image.items()}
        for i in range(4):
            if i:
                gen.refresh(cur)                  # fresh rich words in the windows
            prog = gen.program(cur, n=12)         # (writes crafted operands into cur)
            for k, v in hazards(prog).items():
                total[k] = total.get(k, 0) + v
            # the host writes the windows before the program (the generator's last state of
            # cur; cur itself is the image as the program finds it only in the windows)
            items.append(([(s, 0, cur[s][:WINDOW].copy()) for s in STORES],
                          encode_program(prog)))
        res = run_programs(items, image, seed=seed)
        cur = image
        for i, ((writes, words), (got, code, pc, executed, c)) in enumerate(zip(items, res)):
            for store, base, vals in writes:
                cur = {s: w.copy() for s, w in cur.items()}
                cur[store][base:base + len(vals)] = vals
            want, st = run(words, cur)
            assert (code, pc if code else None) == (st.error, st.error_pc), (seed, i, code, pc,
                                                                             st.message)
            assert executed == st.instructions, (seed, i)
            _compare(got, want, (seed, i))
            conc += c
            cur = want
    for kind in ("RAW", "WAR", "WAW"):
        assert total.get(kind, 0) >= 2 * seeds, total
    assert conc > 0


def test_range_errors_of_every_slot_at_the_sequencer():
    """Every slot's out-of-range base (the first illegal base, and far past the end) of every
    instruction class, CONTRACT batches and LOOP-stepped bases included: the sequencer reports
    the interpreter's code (ERR_C/A/B_RANGE) and pc and writes nothing."""
    sizes = {s: SIZE for s in STORES}
    cases = [(n, w) for n, w in illegal_variants(sizes, special=False)
             if "range" in n and "range_far" not in n]
    rng = np.random.default_rng(5)
    image = _image(rng)
    res = run_programs([w for _, w in cases], image, seed=4)
    codes = set()
    for (name, words), (got, code, pc, executed, _) in zip(cases, res):
        _, st = run(words, image)
        assert st.error, name
        assert (code, pc) == (st.error, st.error_pc), (name, code, pc, st.error, st.error_pc)
        assert executed == 0, name
        _compare(got, image, name)
        codes.add(code)
    assert codes == {3, 4, 5}
