"""The sequencer's issue model and the compiler pass that interleaves a program for it.

The chip's sequencer (``rtl/sequencer.py``, execute pass) walks the dynamic instruction stream
in program order and issues each instruction to its unit (CONTRACT -> engine, elementwise /
reduce / gather -> vector, UPDATE -> update) once that unit is idle and the instruction's
operand hulls do not conflict (RAW, WAR, WAW on one store) with the instruction in flight on
another unit; nothing is issued after a gather until it is done; BARRIER and END wait for
every unit. So work on different units overlaps only where consecutive instructions are
independent.

:func:`schedule` is the cycle model of that walk, given each instruction's unit time (the
engine's :func:`~ttrain.golden.isa.engine_cycles`, the vector unit's
:func:`~ttrain.golden.isa.vector_cycles`, or the chip's own trace). :func:`interleave` is the
compiler pass that reorders the straight-line stretches of a program (never across a LOOP,
ENDLOOP, BARRIER, END, gather or a given fence such as a section's end; loop bodies stay as
compiled) into an order this walk runs in no more cycles: every pair of
conflicting instructions keeps its order, so every store word after each stretch, and so
after the program, is bit-identical (``tests/test_golden_schedule.py``).
"""

from .isa import (Barrier, Contract, Elementwise, End, EndLoop, Gather, Loop, Program, Random,
                  Reduce, Update)

__all__ = ["ISSUE_GAP", "CONTROL_GAP", "POLICIES", "unit_of", "extents", "conflicts",
           "schedule", "busy_cycles", "interleave", "hoist_invariants", "pipeline_loops",
           "interleave_model",
           "ttm_group_walks", "fastest_ttm_group"]

#: Cycles from one instruction's issue (the sequencer's ACT state) to the next one's ACT at
#: the earliest: FETCH, DECODE and the six WAIT cycles of the operand pipeline (``SETTLE``).
ISSUE_GAP = 9
#: Cycles of a LOOP, ENDLOOP or BARRIER with nothing to wait for (FETCH, DECODE, ACT).
CONTROL_GAP = 3

ENGINE, VECTOR, UPDATE = 0, 1, 2


def unit_of(ins):
    """The unit an instruction runs on (0 engine, 1 vector, 2 update), None for control."""
    if isinstance(ins, Contract):
        return ENGINE
    if isinstance(ins, Update):
        return UPDATE
    if isinstance(ins, (Elementwise, Reduce, Gather, Random)):
        return VECTOR
    return None


def extents(ins):
    """``[(store, lo, hi, writes)]``: each operand's address hull as the scoreboard sees it
    (slot 0 written; UPDATE's gradient slot too)."""
    if isinstance(ins, Contract):
        d = ins.desc
        ops = [(d.c, d.batch, d.m, d.n, True), (d.a, d.batch, d.m, d.k, False),
               (d.b, d.batch, d.k, d.n, False)]
    elif isinstance(ins, Elementwise):
        ops = [(ins.d, 1, ins.rows, ins.cols, True)] + [
            (v, 1, ins.rows, ins.cols, False) for v in (ins.a, ins.b) if v is not None]
    elif isinstance(ins, Reduce):
        ops = [(ins.d, 1, ins.rows, 1, True), (ins.a, 1, ins.rows, ins.cols, False)]
    elif isinstance(ins, Gather):
        r, c, tr = ins.rows, ins.cols, ins.table_rows
        dshape, sshape = ((r, c), (tr, c)) if ins.op == "gather" else ((tr, c), (r, c))
        ops = [(ins.dst, 1, *dshape, True), (ins.src, 1, *sshape, False),
               (ins.index, 1, r, 1, False)]
    elif isinstance(ins, Update):
        ops = [(ins.theta, 1, 1, ins.count, True), (ins.grad, 1, 1, ins.count, True)]
    elif isinstance(ins, Random):
        ops = [(ins.d, 1, ins.rows, ins.cols, True), (ins.a, 1, ins.rows, ins.cols, False),
               (ins.seed, 1, 1, 1, False)]
    else:
        return []
    return [(v.store, v.base, v.last_address(b, r, c), w) for v, b, r, c, w in ops]


def conflicts(ext_a, ext_b):
    """Do two instructions' hulls meet on one store with at least one of them writing?"""
    for s, lo, hi, w in ext_a:
        for s2, lo2, hi2, w2 in ext_b:
            if s == s2 and lo <= hi2 and lo2 <= hi and (w or w2):
                return True
    return False


class _Walk:
    """The sequencer's execute walk, one instruction at a time (see :func:`schedule`)."""

    def __init__(self):
        self.t = 0                    # the earliest ACT of the next instruction
        self.free = [0, 0, 0]         # the cycle each unit is idle again
        self.rec = [[], [], []]       # the hulls of the instruction last issued to each unit

    def issue_time(self, ins, ext=None):
        """Cycle the next instruction would issue in (its unit's cycles not yet counted)."""
        u = unit_of(ins)
        at = max(self.t + ISSUE_GAP, self.free[u])
        ext = extents(ins) if ext is None else ext
        for v in range(3):
            if v != u and self.free[v] > at and conflicts(ext, self.rec[v]):
                at = max(at, self.free[v])
        return at

    def step(self, ins, cycles, ext=None):
        """Walk past ``ins`` taking ``cycles`` on its unit; return ``(issue, done)``."""
        u = unit_of(ins)
        if u is None:
            if isinstance(ins, (Barrier, End)):
                self.t = max(self.t + CONTROL_GAP, *self.free)
            else:
                self.t += CONTROL_GAP
            return self.t, self.t
        at = self.issue_time(ins, ext)
        done = at + cycles
        self.free[u] = done + 1           # the done pulse clears the unit's record next cycle
        self.rec[u] = extents(ins) if ext is None else ext
        self.t = done if isinstance(ins, Gather) else at
        return at, done


def schedule(stream, cost):
    """The cycle model of the sequencer's execute pass over ``stream`` (the dynamic
    instructions in order, e.g. :func:`ttrain.golden.interpreter.dynamic_stream`'s without
    the pcs): ``cost(ins)`` gives an instruction's cycles on its unit, from issue to its done
    pulse (or ``cost`` is a sequence, one entry per instruction of ``stream``, e.g. the
    chip's trace). Returns ``(total, [(issue, done), ...])``, one pair per instruction
    (control instructions: the cycle they are passed)."""
    walk = _Walk()
    stream = list(stream)
    cycles = list(cost) if not callable(cost) else [
        cost(ins) if unit_of(ins) is not None else 0 for ins in stream]
    times = [walk.step(ins, c) for ins, c in zip(stream, cycles, strict=True)]
    return max([walk.t] + walk.free), times


def busy_cycles(stream, cost):
    """``[engine, vector, update]``: the cycles each unit is busy over ``stream`` (as in
    :func:`schedule`), the sums the walk overlaps."""
    busy = [0, 0, 0]
    for ins in stream:
        u = unit_of(ins)
        if u is not None:
            busy[u] += cost(ins)
    return busy


def _stretches(instructions, fences=()):
    """``[(first, end)]`` index ranges of the reorderable stretches: runs of engine, vector
    (not gather) and update instructions outside the loop bodies, also cut before every pc
    of ``fences``."""
    out, start, in_loop = [], None, False
    fences = set(fences)
    for pc, ins in enumerate(instructions):
        movable = (not in_loop and unit_of(ins) is not None and not isinstance(ins, Gather))
        if start is not None and (not movable or pc in fences):
            out.append((start, pc))
            start = None
        if movable and start is None:
            start = pc
        if isinstance(ins, Loop):
            in_loop = True
        elif isinstance(ins, EndLoop):
            in_loop = False
    if start is not None:
        out.append((start, len(instructions)))
    return out


def _loop_stream(ins, pc):
    """The dynamic instructions of the LOOP at ``pc`` (the LOOP, its body once per iteration
    with the bases stepped, the ENDLOOP) and the pc after its ENDLOOP."""
    from .interpreter import dynamic_stream
    end = next(j for j in range(pc, len(ins)) if isinstance(ins[j], EndLoop))
    return [x for _, x in dynamic_stream(ins[pc:end + 1] + [End()])][:-1], end + 1


#: The orders :func:`interleave` tries on each stretch (see there).
POLICIES = ("program", "earliest", "earliest-window", "longest-chain")


def _order(idx, ins, exts, cyc, preds, succs, chain, walk, policy, window):
    """One list-scheduled order of the stretch ``idx`` from the walk state ``walk`` (changed
    in place: it ends after the stretch)."""
    if policy == "program":
        for i in idx:
            walk.step(ins[i], cyc[i], exts[i])
        return list(idx)
    left = {i: len(preds[i]) for i in idx}
    todo = list(idx)                                  # unemitted, in program order
    new = []
    while todo:
        lim = todo[0] + (window if policy == "earliest-window" else len(ins))
        best = None
        for i in todo:
            if i >= lim:
                break
            if left[i]:
                continue
            at = walk.issue_time(ins[i], exts[i])
            key = (-chain[i], at, i) if policy == "longest-chain" else (at, -chain[i], i)
            if best is None or key < best[0]:
                best = (key, i)
        i = best[1]
        walk.step(ins[i], cyc[i], exts[i])
        new.append(i)
        todo.remove(i)
        for s in succs[i]:
            left[s] -= 1
    return new


def interleave(program, cost, *, window=64, fences=()):
    """Return ``(program', order)``: ``program`` with each straight-line stretch reordered
    for the sequencer (:func:`schedule`), and ``order[new pc] = old pc``.

    Each stretch's dependence graph has an edge for every pair whose hulls conflict (in
    program order); any order that keeps those edges writes the same words. The pass walks
    the sequencer model (:func:`schedule`, loop bodies once per iteration) and, per stretch,
    tries the orders of :data:`POLICIES` from the walk's state at the stretch's start: the
    compiled order, and list schedules that emit among the ready instructions (every earlier
    conflicting one emitted) the one that issues first (``earliest``; ``earliest-window``:
    only within ``window`` of the first unemitted instruction), ties to the longer remaining
    chain of unit cycles, or the one with the longest remaining chain (``longest-chain``),
    ties to the earliest issue; ties then go to program order. It keeps the order whose walk
    has every unit idle first (ties: the earlier policy), so the modelled program is never
    slower than compiled, stretch by stretch. ``fences``: pcs no instruction moves across (a
    stretch ends before each)."""
    import copy
    ins = list(program.instructions)
    order = list(range(len(ins)))
    walk = _Walk()
    exts = [extents(i) for i in ins]
    stretches = {a: b for a, b in _stretches(ins, fences)}
    pc = 0
    while pc < len(ins):
        if isinstance(ins[pc], Loop):
            body, pc = _loop_stream(ins, pc)          # LOOP, the iterations, ENDLOOP
            for x in body:
                walk.step(x, cost(x) if unit_of(x) is not None else 0)
            continue
        if pc not in stretches:
            walk.step(ins[pc], cost(ins[pc]) if unit_of(ins[pc]) is not None else 0,
                      exts[pc])
            pc += 1
            continue
        end = stretches[pc]
        idx = list(range(pc, end))
        cyc = {i: cost(ins[i]) for i in idx}
        preds = {i: [j for j in idx if j < i and conflicts(exts[i], exts[j])] for i in idx}
        succs = {i: [] for i in idx}
        for i in idx:
            for j in preds[i]:
                succs[j].append(i)
        chain = {}
        for i in reversed(idx):
            chain[i] = cyc[i] + max((chain[s] for s in succs[i]), default=0)
        best = None
        for policy in POLICIES:
            w = copy.deepcopy(walk)
            new = _order(idx, ins, exts, cyc, preds, succs, chain, w, policy, window)
            key = (max([w.t] + w.free), sum(w.free))
            if best is None or key < best[0]:
                best = (key, new, w)
        order[pc:end] = best[1]
        walk = best[2]
        pc = end
    out = Program([ins[i] for i in order], dict(program.store_sizes), dict(program.memory_map))
    return out, order


def _unstepped(ins):
    """``ins`` with its operand slots' step selects cleared (a copy outside a loop)."""
    from dataclasses import fields, replace
    if any(f.name == "step" for f in fields(ins)) and any(ins.step):
        return replace(ins, step=(0, 0, 0))
    return ins


def _pipelined(ins, lo, hi, p):
    """The LOOP at ``lo`` (its ENDLOOP at ``hi``) software-pipelined at body split ``p``, as
    ``(instructions, origin)`` replacing ``ins[lo:hi + 1]`` (``origin``: each one's old pc),
    or None where the rotation would swap a conflicting pair (or the loop cannot rotate).

    With body ``X = body[:p]``, ``Y = body[p:]`` and ``N`` iterations the program order
    ``X0 Y0 X1 Y1 ... X(N-1) Y(N-1)`` becomes ``X0; LOOP N-1 {X(t+1) Y(t)}; Y(N-1)``: every
    ``X(t+1)`` moves before ``Y(t)`` and nothing else moves, so the words are the same when
    no ``X(t+1)`` conflicts with any ``Y(t)`` (checked for every ``t`` on the stepped
    hulls). The copies outside the loop are the iterations' instructions with their step
    selects cleared; ``X(t+1)`` in the body is ``X`` advanced by one iteration."""
    loop, body, end = ins[lo], ins[lo + 1:hi], ins[hi]
    n, inc = loop.count, loop.increments
    if n < 2 or not 0 < p < len(body) or any(unit_of(x) is None for x in body):
        return None
    xs, ys = body[:p], body[p:]
    for t in range(n - 1):
        ex = [extents(x.stepped(inc, t + 1)) for x in xs]
        ey = [extents(y.stepped(inc, t)) for y in ys]
        if any(conflicts(a, b) for a in ex for b in ey):
            return None
    out = ([_unstepped(x.stepped(inc, 0)) for x in xs] + [_with_count(loop, n - 1)]
           + [x.stepped(inc, 1) for x in xs] + list(ys) + [end]
           + [_unstepped(y.stepped(inc, n - 1)) for y in ys])
    origin = ([lo + 1 + i for i in range(p)] + [lo] + [lo + 1 + i for i in range(len(body))]
              + [hi] + [lo + 1 + p + i for i in range(len(ys))])
    return out, origin


def _with_count(loop, count):
    """``loop`` with ``count`` iterations."""
    from dataclasses import replace
    return replace(loop, count=count)


def pipeline_loops(program, cost):
    """Return ``(program', origin)``: ``program`` with each LOOP software-pipelined
    (:func:`_pipelined`: the body's first ``p`` instructions of the next iteration issued
    before the rest of the current one, so the engine runs iteration ``t + 1``'s CONTRACT
    while the vector unit finishes iteration ``t``) where that shortens the :func:`schedule`
    walk with ``cost``, the split ``p`` chosen by the walk, loop by loop; ``origin[new pc]``
    is the old pc of each instruction (the copies before and after a loop name their body
    instruction). Every conflicting pair keeps its order, so the words are the same; a loop
    none of whose splits is legal or faster stays as compiled."""
    from .interpreter import dynamic_stream
    ins = list(program.instructions)
    origin = list(range(len(ins)))

    def walk(instructions):
        return schedule([x for _, x in dynamic_stream(instructions)], cost)[0]
    best_t = walk(ins)
    pc = 0
    while pc < len(ins):
        if not isinstance(ins[pc], Loop):
            pc += 1
            continue
        hi = next(j for j in range(pc, len(ins)) if isinstance(ins[j], EndLoop))
        best = None
        for p in range(1, hi - pc - 1):
            cand = _pipelined(ins, pc, hi, p)
            if cand is None:
                continue
            new = ins[:pc] + cand[0] + ins[hi + 1:]
            t = walk(new)
            if t < best_t and (best is None or t < best[0]):
                best = (t, new, cand[1])
        if best is None:
            pc = hi + 1
            continue
        best_t, new, local = best
        origin = origin[:pc] + [origin[o] for o in local] + origin[hi + 1:]
        pc += len(local)
        ins = new
    return Program(ins, dict(program.store_sizes), dict(program.memory_map)), origin


def _contains(outer, inner):
    """Does hull ``outer`` (store, lo, hi, _) hold all of hull ``inner``?"""
    return outer[0] == inner[0] and outer[1] <= inner[1] and inner[2] <= outer[2]


def _invariant_prefix(loop, body, limit):
    """How many of ``body``'s first instructions (at most ``limit``) may run once before
    ``loop`` instead of in every iteration: the longest prefix ``P`` with no step selects
    whose every read either misses what ``P`` writes or lies inside one earlier write of
    ``P`` (so ``P`` computes the same words each time it runs: a function of words it does
    not write), and which no later body instruction writes over (in any iteration: its
    writes meet neither ``P``'s reads nor its writes). Running ``P`` once then leaves every
    word as ``count`` times did."""
    n, inc = loop.count, loop.increments
    rest_w = {}
    for p in range(limit, 0, -1):                # the longest legal prefix
        pre = body[:p]
        if any(unit_of(x) is None or any(x.step) for x in pre):
            continue
        every = [e for x in pre for e in extents(x) if e[3]]
        writes, ok = [], True                     # writes: those of the earlier ones
        for x in pre:
            ext = extents(x)
            for r in (e for e in ext if not e[3]):
                if any(conflicts([(*r[:3], True)], [w]) for w in every) and not any(
                        _contains(w, r) for w in writes):
                    ok = False
            writes += [e for e in ext if e[3]]
        if not ok:
            continue
        mine = [(*e[:3], True) for x in pre for e in extents(x)]
        if p not in rest_w:
            rest_w[p] = [e for y in body[p:] for t in range(n)
                         for e in extents(y.stepped(inc, t)) if e[3]]
        if any(conflicts(mine, [w]) for w in rest_w[p]):
            continue
        return p
    return 0


def hoist_invariants(program):
    """Return ``(program', origin)``: ``program`` with each LOOP's loop-invariant prefix
    (:func:`_invariant_prefix`, e.g. a LayerNorm output recomputed in every iteration of a
    loop that reads it row by row) run once before the LOOP; ``origin[new pc]`` is each
    instruction's old pc. The words after the program are the same."""
    ins = list(program.instructions)
    out, origin, pc = [], [], 0
    while pc < len(ins):
        if not isinstance(ins[pc], Loop):
            out.append(ins[pc])
            origin.append(pc)
            pc += 1
            continue
        hi = next(j for j in range(pc, len(ins)) if isinstance(ins[j], EndLoop))
        # (at least one instruction stays in the body: a LOOP is never left empty)
        p = _invariant_prefix(ins[pc], ins[pc + 1:hi], hi - pc - 2)
        out += ins[pc + 1:pc + 1 + p] + [ins[pc]] + ins[pc + 1 + p:hi + 1]
        origin += list(range(pc + 1, pc + 1 + p)) + [pc] + list(range(pc + 1 + p, hi + 1))
        pc = hi + 1
    return Program(out, dict(program.store_sizes), dict(program.memory_map)), origin


def interleave_model(cm, cost, *, window=64, loops=True):
    """Return the :class:`~ttrain.golden.model_compiler.CompiledModel` ``cm`` with its loops'
    invariant prefixes hoisted (:func:`hoist_invariants`), its loops software-pipelined
    where the walk gains (:func:`pipeline_loops`; ``loops=False`` skips both) and its
    program reordered by :func:`interleave`, no instruction moving out of its section
    (``cm.sections``: the forward-only runs end where they did; the sections' bounds follow
    the copies a pipelined loop adds), and the liveness intervals and peak pcs of its
    regions mapped to the new pcs (an interval becomes the hull of its old pcs' new
    places)."""
    from dataclasses import replace
    if loops:
        prog, hoisted = hoist_invariants(cm.program)
        prog, piped = pipeline_loops(prog, cost)
        origin = [hoisted[o] for o in piped]
    else:
        prog, origin = cm.program, list(range(len(cm.program.instructions)))

    def bound(b):                                 # a section bound: the new pcs before it
        return sum(1 for o in origin if o < b)
    sections = {k: (bound(lo), bound(hi)) for k, (lo, hi) in cm.sections.items()}
    fences = sorted({pc for lo, hi in sections.values() for pc in (lo, hi)})
    prog, order = interleave(prog, cost, window=window, fences=fences)
    where = {}
    for new, mid in enumerate(order):
        where.setdefault(origin[mid], []).append(new)
    liveness = {}
    for store, info in cm.liveness.items():
        info = dict(info)
        if "at" in info and info["at"] in where:
            info["at"] = min(where[info["at"]])
        if "intervals" in info:
            info["intervals"] = {
                name: (min(min(where[p]) for p in range(a, b + 1) if p in where),
                       max(max(where[p]) for p in range(a, b + 1) if p in where))
                for name, (a, b) in info["intervals"].items()}
        liveness[store] = info
    return replace(cm, program=prog, liveness=liveness, sections=sections)


def ttm_group_walks(cfg, cost, *, map_program=None, max_words=None, window=64, **compile_kw):
    """The walk of ``cfg``'s compiled training step for each TTM group: ``[{group, words,
    cycles}, ...]`` for ``ttm_group`` = 1, 2, 4, ... up to the grid's ``batch x seq_len``
    rows (a group is rounded down to a divisor of each table's rows, so groups that compile
    to the same program are listed once), ``words`` the step's store words (``sum
    store_sizes``), ``cycles`` the :func:`schedule` walk of its program mapped by
    ``map_program`` (e.g. :meth:`~ttrain.golden.isa.Program.for_engine`; default as compiled)
    and reordered by :func:`interleave_model`, both with the machine's ``cost`` (e.g.
    ``HwConfig.cycle_model()``). A group whose words exceed ``max_words`` is listed with
    ``cycles`` None and ends the list (larger groups need no fewer words). ``compile_kw``:
    :func:`~ttrain.golden.model_compiler.compile_model`'s other options. Every group
    computes the same words bit for bit: this trades memory for cycles only."""
    from dataclasses import replace

    from .interpreter import dynamic_stream
    from .model_compiler import compile_model
    if "ttm_group" in compile_kw:
        raise ValueError("ttm_group_walks: ttm_group is what it varies; drop it")
    rows = cfg.batch * (compile_kw.get("positions") or cfg.seq_len)
    out, g, seen = [], 1, set()
    while True:
        cm = compile_model(cfg, ttm_group=g, **compile_kw)
        words = sum(cm.store_sizes.values())
        key = repr(cm.program.instructions)          # the same program: listed once
        if key not in seen:
            seen.add(key)
            if max_words is not None and words > max_words:
                out.append({"group": g, "words": words, "cycles": None})
                return out
            if map_program is not None:
                cm = replace(cm, program=map_program(cm.program))
            cm = interleave_model(cm, cost, window=window)
            dyn = [x for _, x in dynamic_stream(cm.program.instructions)]
            out.append({"group": g, "words": words, "cycles": schedule(dyn, cost)[0]})
        if g >= rows:
            return out
        g *= 2


def fastest_ttm_group(walks, tolerance=0.01):
    """The ``ttm_group`` a machine runs fastest within its memory: of :func:`ttm_group_walks`'
    entries that fit (``cycles`` not None), the one with the fewest words among those within
    ``tolerance`` (a fraction) of the fewest cycles; ties to the smaller group. So the choice
    stops at the knee where a larger group holds more words for almost no cycles."""
    fits = [w for w in walks if w["cycles"] is not None]
    if not fits:
        raise ValueError(f"no TTM group fits the memory: the smallest step needs "
                         f"{walks[0]['words']:,} words; give the machine more words")
    if not 0 <= tolerance < 1:
        raise ValueError(f"tolerance must be a fraction in [0, 1), not {tolerance!r}")
    best = min(w["cycles"] for w in fits)
    near = [w for w in fits if w["cycles"] <= best * (1 + tolerance)]
    return min(near, key=lambda w: (w["words"], w["group"]))["group"]
