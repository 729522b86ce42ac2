"""The first instruction where the simulated chip's stores diverge from the interpreter's.

:func:`find_divergence` runs training steps of a compiled model on a Verilator build of the
accelerator and, for the first step whose stores differ from
:func:`ttrain.golden.interpreter.run`'s, searches the instruction: the step's program is
unrolled into its dynamic stream (LOOP bodies repeated with stepped bases; LOOP/ENDLOOP/END
dropped), and *prefixes* of it (the first ``k`` dynamic instructions + END) are run from the
same start image, every store word compared with the interpreter's image after the same
prefix. The smallest diverging prefix ``k`` names instruction ``k - 1``. The search is
``fanout``-ary: each simulation session (one Verilator run) tries ``fanout`` prefixes of the
remaining interval in increasing order, so the driver's first recorded mismatch belongs to
the earliest diverging prefix; a 330-instruction step takes three sessions with the default
fanout of 8.

Prefix runs start from the golden image (the chip's own state is rewritten every run), so the
report isolates one instruction: the first whose result on the chip differs.
"""

from dataclasses import dataclass, field

import numpy as np

from ...golden.interpreter import dynamic_stream, run as interpret
from ...golden.isa import Barrier, End, EndLoop, Loop, Program
from ..sim.top import TopSession, pad_image, play_top

__all__ = ["Divergence", "find_divergence", "unrolled", "region_of"]


@dataclass
class Divergence:
    """Where the chip's stores first differ from the interpreter's (``found`` False: nowhere
    in the steps run).

    ``step``: training step (0-based); ``index``: dynamic instruction index in the step;
    ``pc``: its address in the step's program; ``op``: mnemonic; ``text``: its assembly (loop
    bases stepped); ``store``/``addr``/``got``/``want``: the first differing word (in store
    order ``param, grad, act, scratch``); ``region``: the memory-map region holding it;
    ``mismatches``: the differing words the driver recorded (at most 16); ``sessions``:
    simulation sessions used."""
    found: bool
    steps: int
    step: int = None
    index: int = None
    pc: int = None
    op: str = None
    text: str = None
    store: str = None
    addr: int = None
    got: int = None
    want: int = None
    region: str = None
    mismatches: list = field(default_factory=list)
    sessions: int = 0

    def lines(self):
        """Human-readable report lines."""
        if not self.found:
            return [f"no divergence: every store word equals the interpreter's after each of "
                    f"{self.steps} steps ({self.sessions} simulation sessions)"]
        where = f"{self.store}[{self.addr}]" + (f" ({self.region})" if self.region else "")
        first = ("before the first instruction (the stores differ after an empty program)"
                 if self.index is None else
                 f"first diverging instruction: step {self.step}, pc {self.pc} "
                 f"(dynamic #{self.index}): {self.op}")
        out = [first]
        if self.text:
            out.append(f"  {self.text}")
        out.append(f"  first differing word: {where} got {self.got:08x} want {self.want:08x}")
        more = len(self.mismatches) - 1
        if more > 0:
            out.append(f"  {more} more differing word(s) recorded: " + ", ".join(
                f"{m['store']}[{m['addr']}]" for m in self.mismatches[1:]))
        out.append(f"  ({self.sessions} simulation sessions)")
        return out


def unrolled(program):
    """``[(pc, instruction)]`` of ``program``'s dynamic stream without LOOP/ENDLOOP/END (loop
    bodies repeated, bases stepped): every prefix of it plus END is a valid program."""
    return [(pc, ins) for pc, ins in dynamic_stream(program.instructions)
            if not isinstance(ins, (Loop, EndLoop, End))]


def region_of(memory_map, store, addr):
    """Name of the memory-map region of ``store`` holding word ``addr`` (None if none)."""
    best = None
    for name, r in memory_map.items():
        if r.store != store:
            continue
        if r.row_stride and r.shape:
            end = r.base + (r.shape[0] - 1) * r.row_stride + r.size // r.shape[0]
        else:
            end = r.base + r.size
        if r.base <= addr < end and (best is None or r.size < best[1]):
            best = (name, r.size)
    return None if best is None else best[0]


def _prefix_program(stream, k, store_sizes):
    return Program([ins for _, ins in stream[:k]] + [End()], store_sizes)


def _golden_after(stream, ks, image, store_sizes):
    """The interpreter's image after each prefix length of ``ks`` (one run)."""
    want = set(ks)
    snaps = {}
    if 0 in want:
        snaps[0] = {n: np.array(w, copy=True) for n, w in image.items()}

    def cb(pc, ins, work):
        done = cb.count = cb.count + 1
        if done in want:
            snaps[done] = {n: np.array(w, copy=True) for n, w in work.items()}
    cb.count = 0
    _, st = interpret(_prefix_program(stream, max(ks), store_sizes), image, trace=cb)
    if st.error:
        raise RuntimeError(f"the interpreter stopped the unrolled step with error {st.error}: "
                           f"{st.message}")
    return snaps


def find_divergence(compiled, build, params, batches, *, workdir, fanout=8,
                    debug_corrupt=None, log=None):
    """Run one training step per batch of ``batches`` on ``build`` (a
    :func:`~ttrain.platforms.host.chip.build_model_top` build) from ``params`` and return the
    first :class:`Divergence` (module docstring). ``debug_corrupt=(pc, store, addr)`` plants
    one (see :func:`ttrain.platforms.sim.top.play_top`). ``log``: progress lines."""
    from pathlib import Path
    if fanout < 1:
        raise ValueError(f"fanout must be >= 1, not {fanout}")
    workdir = Path(workdir)
    cm = compiled
    sizes = build.config["store_sizes"]
    limit = (build.res_depth - 64) // 16
    per_run = 2 * sum(sizes.values()) + 16 * len(cm.program.instructions) + 64
    room = max(1, (build.rom_depth - 4096) // per_run)    # each run rewrites and checks all
    limit = min(limit, room)
    fanout = min(fanout, limit)
    image = pad_image(cm.initial_image(params), sizes)
    sessions = 0

    def play(sess):
        nonlocal sessions
        res = play_top(build, sess, test_dir=workdir / f"session{sessions}",
                       debug_corrupt=debug_corrupt)
        sessions += 1
        bad = [p for p in res.problems if not p.startswith("mismatched words")]
        if bad:
            raise RuntimeError("the chip's run failed: " + " | ".join(bad))
        return res

    # 1. which step: each step's whole program from the interpreter's image before it
    starts = []
    batches = list(batches)
    for lo in range(0, len(batches), limit):
        sess = TopSession()
        chunk = []
        for s in range(lo, min(lo + limit, len(batches))):
            for name, words in cm.sample_words(batches[s]).items():
                r = cm.memory_map[name]
                image[r.store][r.base:r.base + r.size] = words
            start = {n: np.array(w, copy=True) for n, w in image.items()}
            image, st = interpret(cm.program, image)
            if st.error:
                raise RuntimeError(f"the interpreter stopped step {s} with error {st.error}: "
                                   f"{st.message}")
            starts.append(start)
            chunk.append(s)
            sess.write_image(start)
            sess.program(cm.program.words())
            sess.run(f"step{s}", expect=image)
        if log:
            log(f"checking steps {chunk[0]}..{chunk[-1]} on the chip")
        res = play(sess)
        if res.mismatches:
            step = chunk[min(m["run"] for m in res.mismatches)]
            break
    else:
        return Divergence(False, len(batches), sessions=sessions)

    # 2. which instruction of that step: fanout-ary search over prefixes
    stream = unrolled(cm.program)
    if len(stream) + 1 > build.config["imem_depth"]:
        raise ValueError(f"the unrolled step has {len(stream)} instructions; the build's "
                         f"instruction memory holds {build.config['imem_depth']}")
    start = starts[step]
    lo, hi = -1, len(stream)            # prefix lo is clean (-1: unknown), prefix hi diverges
    first = None
    while hi - lo > 1:
        span = hi - lo - 1
        n = min(fanout, span)
        if lo < 0:                      # the empty prefix first, then evenly spaced
            ks = sorted({(span * i) // n for i in range(n)} - {hi})
        else:
            ks = sorted({lo + 1 + (span * (i + 1)) // (n + 1) for i in range(n)} - {hi})
        if not ks:
            ks = [lo + 1]
        if log:
            log(f"step {step}: prefixes {ks} of {len(stream)} instructions")
        snaps = _golden_after(stream, ks, start, cm.program.store_sizes)
        sess = TopSession()
        for k in ks:
            sess.write_image(start)
            sess.program(_prefix_program(stream, k, cm.program.store_sizes).words())
            sess.run(f"prefix{k}", expect=snaps[k])
        res = play(sess)
        if res.mismatches:
            r = min(m["run"] for m in res.mismatches)
            hi = ks[r]
            first = [m for m in res.mismatches if m["run"] == r]
            lo = max([lo] + ks[:r]) if r else lo
        else:
            lo = ks[-1]
        if lo == -1 and hi == 0:
            break
    if first is None:          # only the whole step was seen to diverge: run prefix hi once
        snaps = _golden_after(stream, [hi], start, cm.program.store_sizes)
        sess = TopSession()
        sess.write_image(start)
        sess.program(_prefix_program(stream, hi, cm.program.store_sizes).words())
        sess.run(f"prefix{hi}", expect=snaps[hi])
        first = play(sess).mismatches
    m0 = first[0]
    out = Divergence(True, len(batches), step=step, store=m0["store"], addr=m0["addr"],
                     got=m0["got"], want=m0["want"], mismatches=first, sessions=sessions,
                     region=region_of(cm.memory_map, m0["store"], m0["addr"]))
    if hi > 0:
        pc, ins = stream[hi - 1]
        out.index, out.pc, out.op, out.text = hi - 1, pc, ins.mnemonic, ins.text()
    return out
