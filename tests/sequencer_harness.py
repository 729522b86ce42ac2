"""Pieces shared by the sequencer's Amaranth-simulator tests (tests/test_sequencer_sim.py and
tests/test_random_sequencer_sim.py): the command wiring of the sequencer to its vector and
update units, the stand-in engine's view of a CONTRACT, reading the memories back, and loading
and running one program."""

import numpy as np

from ttrain.golden.contract import Descriptor, View

STORES = ("param", "grad", "act", "scratch")


def connect_units(m, seq, vec, upd):
    """Wire the sequencer's ``vec``/``upd`` command streams and completions to the units."""
    m.d.comb += [vec.cmd.payload.eq(seq.vec.payload), vec.cmd.valid.eq(seq.vec.valid),
                 seq.vec.ready.eq(vec.cmd.ready), seq.vec_done.eq(vec.done),
                 seq.vec_error.eq(vec.error),
                 upd.cmd.payload.eq(seq.upd.payload), upd.cmd.valid.eq(seq.upd.valid),
                 seq.upd.ready.eq(upd.cmd.ready), seq.upd_done.eq(upd.done)]


def descriptor_of(p):
    """The golden :class:`Descriptor` of a sampled ``seq.eng`` payload (the engine's layout)."""
    def view(v):
        return View(STORES[int(v.store)], int(v.base), int(v.row_stride), int(v.col_stride),
                    int(v.batch_stride))
    return Descriptor(int(p.m), int(p.n), int(p.k), view(p.a), view(p.b), view(p.c),
                      bool(p.accumulate), int(p.batch), bool(p.integer), 1 << int(p.split))


def read_image(ctx, mems, sizes):
    """Every word of the four memories, as an image."""
    return {STORES[s]: np.array([ctx.get(mem.data[a]) for a in range(sizes[STORES[s]])],
                                dtype=np.uint32) for s, mem in enumerate(mems)}


async def load_and_run(ctx, seq, words, on_start=None, *, load=None, length=None):
    """Load the flat program ``words`` from instruction 0, start it and wait for the end;
    ``on_start()`` is called as it starts (to reset the caller's counters). ``load``: the
    word addresses to write (default all; ``()`` runs what the memory holds), ``length``:
    the run's instruction count (default ``len(words) // 16``)."""
    for a in range(len(words)) if load is None else load:
        ctx.set(seq.imem_we, 1)
        ctx.set(seq.imem_addr, a)
        ctx.set(seq.imem_data, int(words[a]))
        await ctx.tick()
    ctx.set(seq.imem_we, 0)
    ctx.set(seq.length, len(words) // 16 if length is None else length)
    ctx.set(seq.start, 1)
    await ctx.tick()
    ctx.set(seq.start, 0)
    if on_start is not None:
        on_start()
    await ctx.tick().until(seq.done & ~seq.busy)
