"""Whole-model compiler: one training step of the tensorized transformer as one program.

:func:`compile_model` turns a :class:`~ttrain.golden.config.ModelConfig` into one sequencer
program (``golden/isa.py``) that runs a complete training step on chip — TTM embedding gather,
every encoder block, pooler, intent head, softmax cross-entropy, the whole backward pass with the
bi-directional TT flow, and one SGD UPDATE over every parameter — plus the memory map of the
four stores. Inside a step nothing leaves the chip except the sample in (token digits, segment
ids, key-mask bias, one-hot labels, row weights) and the loss and logits out.

Data layout and flow (``docs/model-compiler.md`` has the full table):

* the step works on a grid of ``R = batch * S`` rows (row ``b * S + i``), ``S = seq_len`` or
  the ``positions`` it was compiled for; padded keys get the additive bias ``MASK_VALUE`` so
  their attention weight is exactly 0, padded rows feed no loss, so their gradients are exactly
  zero and change no parameter (the fast path ``golden/model.py`` skips them; both define the
  same function, and a shorter grid gives the very same words);
* **TTM embedding**: the host writes the token's mixed-radix digits (most significant first)
  as one index list per core; core ``k`` lives in the param store as ``(v_k, r_k, e_k,
  r_{k+1})`` so each digit selects one contiguous slice, fetched by ``GATHER``; a chain of
  batched ``CONTRACT`` multiplies the slices, in a ``LOOP`` over groups of ``ttm_group`` rows;
  backward runs the chain again per group and back, and ``SCATTER_ADD`` accumulates the slice
  gradients into the core gradients (sparse, rows in order);
* position rows are added per sequence (``LOOP``), segment rows by ``GATHER``/``SCATTER_ADD``;
  with ``cfg.pos_embedding`` / ``cfg.seg_embedding`` they are TTM tables too (the same chain
  over the positions' / segment ids' digits);
* TT-linear layers are :func:`~ttrain.golden.compiler.compile_tt_linear` programs (the planner's
  order, bi-directional by default) relocated into the model's stores, one instance per use:
  forward (merges, ``Y``, bias) where the layer runs, backward (the merges again, ``dZ``, core
  gradients, ``dX``, bias gradient; scheduled for the lowest live peak) where its gradient
  arrives; only ``Z = X L`` is kept from the forward instance;
* every value has its own region; the act and scratch stores are allocated by liveness, and
  activations are recomputed per sub-layer or layer from kept LayerNorm ``x_hat``
  (``compile_model``'s ``allocate`` and ``recompute``; ``docs/model-compiler.md``);
* attention per sequence (``LOOP`` over ``b``): ``Q K^T`` and ``P V`` as ``CONTRACT`` batched
  over heads; scale, key mask, softmax (``rmax``, ``sub``, ``exp``, ``rsum``, ``recip``,
  ``mul``) on the whole score block;
* LayerNorm, GELU, tanh and the softmax cross-entropy from elementwise ops, reductions and the
  special functions; the per-row loss is ``log(sum exp(z - max)) - (z - max)[label]``,
  weighted by the host's row weight (``1/n`` for a real sentence, 0 for a padding row of a
  short last batch), so ``loss`` is the batch mean;
* parameters and their gradients share one layout (gradient ``g`` of ``p`` at the same offset
  of the grad store), so the update is one ``UPDATE`` over the whole param store; every
  gradient is written or accumulated from zero inside the step and UPDATE clears it again;
* the learning rate is data: the loss gradient is weighted by ``lr / n`` (``in.gweight``), so
  the grad store holds ``lr * g`` and UPDATE uses rate 1.0; schedules never touch the program.

The program is the numerical definition the RTL must match bit for bit (run it with
``golden.interpreter.run``); it agrees with the float32 fast path within rounding
(``tests/test_golden_model_compiler.py`` states the tolerance).
"""

import functools
from bisect import bisect_right
from dataclasses import dataclass, field, replace as dc_replace
from math import prod, sqrt

import numpy as np

from . import model as M
from .compiler import ORDERS, _Alloc, _descriptor, compile_tt_linear
from .planner import dp_best_tree, plan_layer
from .config import ModelConfig
from .contract import View
from .isa import (Barrier, Contract, Elementwise, End, EndLoop, Gather, Loop, Program, Reduce,
                  Update, f32_bits)
from .layers import MASK_VALUE
from .schedule import extents
from .tt import token_digits

__all__ = ["CompiledModel", "compile_model", "model_unsupported", "chip_model_config",
           "RECOMPUTE", "ALLOCATORS", "LAYER_KINDS", "AUTO_FFN_ORDER",
           "SEARCH_ORDERS", "ORDER_OBJECTIVES"]


def _is_ttm_core(name):
    """A TTM core (token, position or segment table): stored slice-major on chip."""
    return name.startswith(("emb.tok.core", "emb.pos.core", "emb.seg.core"))


def _check_lr(lr):
    if isinstance(lr, bool) or not isinstance(lr, (int, float, np.floating)) \
            or not np.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr must be a positive finite number, got {lr!r}")
    return float(lr)


def model_unsupported(cfg):
    """Return why ``cfg`` cannot be compiled to one on-chip step (``""`` when it can)."""
    why = []
    if cfg.slot_head:
        why.append("slot_head=True (the slot head is not compiled yet; use an intent-only "
                   "preset)")
    if cfg.dropout:
        why.append(f"dropout={cfg.dropout} (random masks are not generated on chip; set "
                   f"dropout=0, e.g. cfg.with_(dropout=0.0))")
    if cfg.label_smoothing:
        why.append("label_smoothing != 0 (set it to 0)")
    if cfg.logit_adjustment:
        why.append("logit_adjustment != 0 (set it to 0)")
    if cfg.pooling != "cls":
        why.append(f"pooling={cfg.pooling!r} (only \"cls\" is compiled)")
    return "; ".join(why)


class _Builder:
    """Instruction list + allocator with small helpers for views and ops."""

    def __init__(self, engine_sums=None):
        self.alloc = _Alloc()
        self.ins = []
        self.engine_sums = engine_sums      # lanes of the machine row sums are weighed on
        self.in_loop = False
        self.ones = {}                      # words -> region of +1.0 words (filled once)

    def region(self, name, store, shape):
        if name in self.alloc.regions:
            raise AssertionError(f"region {name!r} allocated twice")
        return self.alloc.region(name, store, shape)

    def tmp(self, name, store, shape):
        """Register a fresh region ``name`` (``name~2``, ``name~3`` ... when it is taken) and
        return its name: one region per value, the liveness allocator shares the words."""
        n, k = name, 1
        while n in self.alloc.regions:
            k += 1
            n = f"{name}~{k}"
        self.alloc.region(n, store, shape)
        return n

    def r(self, name):
        return self.alloc.regions[name]

    def mat(self, name, rs=None, cs=1, bs=0):
        """Row-major view of region ``name`` (rows of its last dimension)."""
        r = self.r(name)
        if rs is None:
            rs = r.shape[-1] if len(r.shape) > 1 else 1
        return View(r.store, r.base, rs, cs, bs)

    def col(self, name):
        """A region of one word per row, broadcast over columns (``col_stride`` 0)."""
        r = self.r(name)
        return View(r.store, r.base, 1, 0)

    def rowvec(self, name):
        """A vector broadcast over rows (``row_stride`` 0)."""
        r = self.r(name)
        return View(r.store, r.base, 0, 1)

    def ew(self, op, rows, cols, d, a=None, b=None, imm=None, step=(0, 0, 0)):
        bits = 0 if imm is None else (imm if isinstance(imm, int) else f32_bits(imm))
        self.ins.append(Elementwise(op, rows, cols, d, a, b, bits, step))

    def rsum(self, rows, cols, d, a, step=(0, 0, 0)):
        """``d[i] = sum_j a[i, j]`` in column order. With ``engine_sums`` (a machine of that
        many lanes) a sum the cycle models give to the engine is emitted as the CONTRACT
        ``d = a . ones`` instead: with split 1 it adds the same words (``fp32_mul(x, 1.0) ==
        x``) in the same order from the same -0.0, so it is the same sum bit for bit; a split
        that ``Program.for_engine`` picks later is another order, as for any contraction."""
        red = Reduce("sum", rows, cols, d, a, step=step)
        if self.engine_sums and step == (0, 0, 0) and not self.in_loop \
                and _sum_goes_to_engine(red, self.engine_sums):
            ones = self.ones_vector(cols)
            self.contract(rows, 1, cols, a, ones, View(d.store, d.base, d.row_stride, 1))
            return
        self.ins.append(red)

    def ones_vector(self, cols):
        """A column of ``cols`` +1.0 words (``cols x 1``): a region of the act store filled
        right here the first time, live to its last reader (the liveness allocator)."""
        have = [k for k in self.ones if k >= cols]
        if not have:
            name = self.tmp("const.ones", "act", (cols,))
            r = self.r(name)
            self.ew("fill", 1, cols, View(r.store, r.base, cols, 1), imm=1.0)
            self.ones[cols] = name
            have = [cols]
        r = self.r(self.ones[min(have)])
        return View(r.store, r.base, 1, 0)

    def rmax(self, rows, cols, d, a):
        self.ins.append(Reduce("max", rows, cols, d, a))

    def contract(self, m, n, k, a, b, c, batch=1, step=(0, 0, 0)):
        desc = _descriptor(m, n, k, a, b, c, batch)
        sc, sa, sb = step
        self.ins.append(Contract(desc, (sc, sb, sa) if m > n else (sc, sa, sb)))

    def loop(self, count, incs, body):
        """Run ``body()`` (which appends instructions) ``count`` times; no LOOP when 1."""
        if count == 1:
            n = len(self.ins)
            body()
            # a single iteration: drop the step selects (t = 0 adds nothing)
            for i in range(n, len(self.ins)):
                self.ins[i] = dc_replace(self.ins[i], step=(0, 0, 0))
            return
        incs = tuple(incs) + (0,) * (3 - len(incs))
        self.ins.append(Loop(count, incs))
        self.in_loop = True
        body()
        self.in_loop = False
        self.ins.append(EndLoop())


def _sum_goes_to_engine(red, lanes):
    """Whether row sum ``red`` is faster as a CONTRACT with a ones vector on an engine of
    ``lanes`` lanes (16 slots, lane groups up to ``lanes``, best orientation and split) than
    on a vector unit of ``lanes`` lanes, by golden's two cycle models."""
    from .isa import engine_cycles, map_contract, vector_cycles
    ones = View(red.a.store, 0, 1, 0)
    desc = _descriptor(red.rows, 1, red.cols, red.a, ones,
                       View(red.d.store, red.d.base, red.d.row_stride, 1))
    mapped, _ = map_contract(desc, (0, 0, 0), lanes, 16, lanes)
    return engine_cycles(mapped, lanes, 16) < vector_cycles(red, lanes)[1]


def _relocate(instrs, layer_map, target):
    """Move a compiled layer's instructions onto the model's regions.

    ``layer_map``: the layer program's regions; ``target``: layer region name -> model Region
    (same shape and layout). Every view base is translated from its region to the target.
    """
    by_store = {}
    for name, r in layer_map.items():
        by_store.setdefault(r.store, []).append((r.base, r.size, name))
    for lst in by_store.values():
        lst.sort()
    starts = {s: [b for b, _, _ in lst] for s, lst in by_store.items()}

    def move(v):
        if v is None:
            return None
        lst = by_store[v.store]
        i = bisect_right(starts[v.store], v.base) - 1
        base, size, name = lst[i]
        if not base <= v.base < base + size:
            raise AssertionError(f"view at {v.store}@{v.base} is in no region")
        t = target[name]
        return View(t.store, t.base + v.base - base, v.row_stride, v.col_stride, v.batch_stride)

    out = []
    for ins in instrs:
        if isinstance(ins, Contract):
            d = ins.desc
            out.append(dc_replace(ins, desc=dc_replace(d, a=move(d.a), b=move(d.b),
                                                          c=move(d.c))))
        elif isinstance(ins, Elementwise):
            out.append(dc_replace(ins, d=move(ins.d), a=move(ins.a), b=move(ins.b)))
        elif isinstance(ins, Reduce):
            out.append(dc_replace(ins, d=move(ins.d), a=move(ins.a)))
        elif isinstance(ins, (Loop, EndLoop)):
            out.append(ins)
        else:
            raise AssertionError(f"unexpected instruction in a TT layer: {ins}")
    return out


class _TTLayers:
    """Compiled TT layers (one compile per (spec, rows)), split into merges, forward, backward.

    ``compile_tt_linear`` (update=False, no padding, loss scale 1) emits: forward steps,
    ``add`` (Y += bias), ``sub`` (dY = Y - target), backward steps, ``rsum`` (bias gradient),
    ``barrier``, ``end``. The loss ``sub`` is cut. Forward steps that read only cores and other
    merges are the **merges** (e.g. the bi-directional flow's left and right halves); the
    others touch the tokens. What the token steps write (``Z = X L``) is the layer's
    *private* state, kept from a forward instance to its backward part (:func:`_tt_forward`,
    :func:`_tt_backward`); the merges are **recomputed** right before the backward part
    (they depend on the cores only, so the words are the same).
    """

    def __init__(self, order, plan_rows=None):
        self.order = order
        self.plan_rows = plan_rows or {}
        self.cache = {}

    def get(self, spec, rows, kind="attention"):
        order = self.order.get(kind, "bidirectional") if isinstance(self.order, dict) \
            else self.order
        key = (spec, rows, order)
        if key not in self.cache:
            # a rows-dependent order (dp_best, best) is planned for the full grid's rows, so
            # the programs for fewer positions follow the same tree (the same sums)
            plan = self.plan_rows.get(kind, rows)
            tree = None
            if order == "best":
                order = plan_layer(spec, plan).best
            if order == "dp_best":
                tree = dp_best_tree(spec, plan)[0]
            layer = compile_tt_linear(spec, rows, order=order, update=False, pad=False,
                                      tree=tree)
            prog = layer.program
            ins, mm = prog.instructions, prog.memory_map
            yb = mm["y"].base
            cut = [i for i, s in enumerate(ins) if isinstance(s, Elementwise) and s.op == "sub"
                   and s.a.store == "act" and s.a.base == yb]
            if len(cut) != 1 or not isinstance(ins[-1], End) \
                    or not isinstance(ins[-2], Barrier):
                raise AssertionError(f"unexpected structure of the compiled TT layer {spec}")
            i = cut[0]

            # a merge reads cores (param store) and other merges only
            scratch = {n: r for n, r in mm.items() if r.store == "scratch"}

            def region_of(v):
                return next(r for r in scratch.values() if r.base <= v.base < r.base + r.size)
            token_regions, merges = set(), []
            for n, st in enumerate(ins[:i]):
                if isinstance(st, (Loop, EndLoop)):
                    raise ValueError(f"order {order!r} needs a LOOP in the forward part of "
                                     f"the TT layer {spec}; the model compiler cannot split it "
                                     f"into merges and token steps: use order='bidirectional'")
                reads = [v for v in st.views[1:] if v is not None]
                if isinstance(st, Contract) and st.desc.accumulate:
                    reads.append(st.desc.c)
                token = any(v.store == "act" or (v.store == "scratch" and
                                                 region_of(v).base in token_regions)
                            for v in reads)
                out = st.views[0]
                if token:
                    if out.store == "scratch":
                        token_regions.add(region_of(out).base)
                else:
                    merges.append(n)
            private = [name for name, r in scratch.items() if r.base in token_regions]
            self.cache[key] = (prog, merges, i, private)
        return self.cache[key]


def _layer_regions(instrs, mm):
    """Names of the layer program's regions that ``instrs`` touch (by view base)."""
    spans = sorted((r.store, r.base, r.base + r.size, n) for n, r in mm.items())
    out = set()
    for ins in instrs:
        views = list(ins.views)
        if isinstance(ins, Contract):
            views = [ins.desc.a, ins.desc.b, ins.desc.c]
        for v in views:
            if v is None:
                continue
            out.update(n for s, lo, hi, n in spans if s == v.store and lo <= v.base < hi)
    return out


def _tt_forward(bld, layers, name, inst, spec, rows, x, y):
    """Relocate the forward part of TT layer ``name`` (its parameters) onto ``x`` -> ``y``.

    ``inst`` names this instance's own regions: every scratch region of the layer program
    gets a fresh ``{inst}.f.{region}`` (the liveness allocator decides which words they
    share). Returns the state :func:`_tt_backward` needs, with the instructions under
    ``"forward"`` (not yet emitted).
    """
    kind = "pooler" if name == "pooler" else name.rsplit(".", 1)[-1]
    kind = kind if kind in ("ffn1", "ffn2", "pooler") else "attention"
    prog, merge_at, i, private = layers.get(spec, rows, kind)
    mm = prog.memory_map
    part = prog.instructions[:i]
    if y is None:
        # Z only (for a backward pass that needs Z, not Y): drop what writes Y
        ry = mm["y"]
        part = [s for s in part if not (s.views[0].store == ry.store
                                        and ry.base <= s.views[0].base < ry.base + ry.size)]
        target = {"x": bld.r(x)}
    else:
        target = {"x": bld.r(x), "y": bld.r(y)}
    for k in range(2 * spec.d):
        target[f"core{k + 1}"] = bld.r(f"{name}.core{k}")
        target[f"grad_core{k + 1}"] = bld.r(f"grad:{name}.core{k}")
    target["bias"] = bld.r(f"{name}.bias")
    target["grad_bias"] = bld.r(f"grad:{name}.bias")
    used = _layer_regions(part, mm)
    for rname, r in mm.items():
        if r.store == "scratch" and rname in used:
            target[rname] = bld.region(f"{inst}.f.{rname}", "scratch", r.shape)
    fwd = _relocate(part, mm, target)
    return {"prog": prog, "merge_at": merge_at, "cut": i, "private": set(private),
            "target": target, "inst": inst, "forward": fwd}


def _region_sets(ins, spans):
    """``(reads, writes)``: names of the layer regions ``ins`` reads and writes (by base)."""
    def name(v):
        for st_, lo, hi, n in spans:
            if st_ == v.store and lo <= v.base < hi:
                return n
        raise AssertionError(f"view {v} is in no region of the layer")
    views = ins.views
    reads = {name(v) for v in views[1:] if v is not None}
    out = name(views[0])
    acc = bool(getattr(getattr(ins, "desc", None), "accumulate", False)
               or getattr(ins, "accumulate", False))
    if acc:
        reads.add(out)
    return reads, {out}


def _schedule(part, mm, free):
    """Reorder the TT layer part ``part`` (layer-program views) so that fewer words
    are live at once: a list schedule that, among the instructions whose inputs are ready,
    runs the one that allocates the fewest words net of those it frees (its inputs read for
    the last time; ``free`` names the inputs the rest of the model no longer needs: scratch
    is always freed, parameters, gradients and ``dx`` never); ties keep the original order.

    Only data dependencies (read after write, write after read, write after write on a
    region) constrain the order, so every instruction reads the very words it read before:
    the result is the same bit for bit. A LOOP .. ENDLOOP block moves as one unit.
    """
    # units: one instruction, or a LOOP .. ENDLOOP block (moved as a whole)
    units, cur = [], None
    for ins in part:
        if isinstance(ins, Loop):
            cur = [ins]
        elif cur is not None:
            cur.append(ins)
            if isinstance(ins, EndLoop):
                units.append(cur)
                cur = None
        else:
            units.append([ins])
    spans = sorted((r.store, r.base, r.base + r.size, n) for n, r in mm.items())
    rw = []
    for u in units:
        r, w = set(), set()
        for ins in u:
            if not isinstance(ins, (Loop, EndLoop)):
                r_, w_ = _region_sets(ins, spans)
                r |= r_
                w |= w_
        rw.append((r, w))
    n = len(units)
    deps = [set() for _ in range(n)]
    for j in range(n):
        rj, wj = rw[j]
        for i in range(j):
            ri, wi = rw[i]
            if wi & (rj | wj) or ri & wj:
                deps[j].add(i)
    size = {k: (r.size if (r.store == "scratch" or k in free) else 0) for k, r in mm.items()}
    size["dx"] = mm["dx"].size
    readers = {}
    for i, (r, _) in enumerate(rw):
        for k in r:
            readers[k] = readers.get(k, 0) + 1
    def freeable(k):
        return k != "dx" and k in size and (mm[k].store == "scratch" or k in free)

    inputs = set()
    for r, _ in rw:
        inputs |= r
    inputs = {k for k in inputs if not any(k in w for _, w in rw)}

    def peak_of(order):
        left = dict(readers)
        live, top = set(inputs), 0
        for j in order:
            r, w = rw[j]
            live |= w
            top = max(top, sum(size.get(k, 0) for k in live))
            for k in r:
                left[k] -= 1
                if left[k] == 0 and freeable(k):
                    live.discard(k)
        return top

    def greedy():
        left = dict(readers)
        live, done, order = set(inputs), set(), []
        while len(order) < n:
            best = None
            for j in range(n):
                if j in done or not deps[j] <= done:
                    continue
                r, w = rw[j]
                alloc = sum(size[k] for k in w if k not in live)
                freed = sum(size[k] for k in r if left[k] == 1 and freeable(k))
                if best is None or (alloc - freed, j) < best[0]:
                    best = ((alloc - freed, j), j)
            j = best[1]
            done.add(j)
            order.append(j)
            r, w = rw[j]
            live |= w
            for k in r:
                left[k] -= 1
        return order

    def lazy(sinks):
        # each result's dependencies right before it (depth first): short lifetimes
        seen, order = set(), []

        def visit(j):
            if j in seen:
                return
            seen.add(j)
            for i in sorted(deps[j]):
                visit(i)
            order.append(j)
        for j in sinks:
            visit(j)
        return order

    read_later = [any(rw[j][1] & rw[k][0] for k in range(j + 1, n)) for j in range(n)]
    sinks = [j for j in range(n) if not read_later[j]]
    candidates = [list(range(n)), greedy(), lazy(sinks), lazy(sinks[::-1])]
    order = min(candidates, key=peak_of)          # the first of the lowest peak
    return [ins for j in order for ins in units[j]]


def _tt_backward(bld, st, dy, dx, free=(), x=None):
    """Return the backward instructions of a TT layer instance from :func:`_tt_forward`.

    They start with the merges again (recomputed into fresh ``{inst}.b.*`` regions: they
    depend on the cores only, so the words are the same), read the token regions the
    forward part kept (``Z = X L``) and write the gradients, ``dX`` into ``dx``.
    """
    prog, mm = st["prog"], st["prog"].memory_map
    target = dict(st["target"])
    target.update({"dy": bld.r(dy), "dx": bld.r(dx), "target": bld.r(dy)})
    if x is not None:
        target["x"] = bld.r(x)              # the same input words, computed again
    ins = prog.instructions
    part = _schedule([ins[n] for n in st["merge_at"]] + ins[st["cut"] + 1:-2], mm,
                     set(free))
    used = _layer_regions(part, mm)
    for rname, r in mm.items():
        if r.store == "scratch" and rname not in st["private"] and rname in used:
            target[rname] = bld.region(f"{st['inst']}.b.{rname}", "scratch", r.shape)
    bwd = _relocate(part, mm, target)
    return bwd


# ---- liveness allocation of the act and scratch stores -------------------------------------

def _static_positions(instrs):
    """``(first_at, last_at)``: per instruction, the first and last static position it runs
    at (an instruction inside a LOOP runs from the LOOP to the ENDLOOP)."""
    first_at, last_at, loop = [], [], None
    for i, ins in enumerate(instrs):
        if isinstance(ins, Loop):
            loop = i
            end = next(j for j in range(i + 1, len(instrs)) if isinstance(instrs[j], EndLoop))
        if loop is not None:
            first_at.append(loop)
            last_at.append(end)
        else:
            first_at.append(i)
            last_at.append(i)
        if isinstance(ins, EndLoop):
            loop = None
    return first_at, last_at


def _operand_hulls(instrs):
    """Yield ``(i, slot, store, lo, hi, reads)`` for every operand of every instruction: the
    address hull over all iterations of its LOOP; ``reads``: the instruction reads these
    words (a source, an accumulating destination, SCATTER_ADD's table)."""
    cur = None
    for i, ins in enumerate(instrs):
        if isinstance(ins, Loop):
            cur = ins
            continue
        if isinstance(ins, EndLoop):
            cur = None
            continue
        versions = [ins] if cur is None else [ins.stepped(cur.increments, 0),
                                              ins.stepped(cur.increments, cur.count - 1)]
        acc = bool(getattr(getattr(ins, "desc", None), "accumulate", False)
                   or getattr(ins, "accumulate", False)
                   or getattr(ins, "op", "") == "scatter_add" or isinstance(ins, Update))
        hulls = {}
        for v in versions:
            for j, (store, lo, hi, _) in enumerate(extents(v)):
                s0, a, b = hulls.get(j, (store, lo, hi))
                hulls[j] = (store, min(a, lo), max(b, hi))
        for j, (store, lo, hi) in hulls.items():
            yield i, j, store, lo, hi, j != 0 or acc


def _move_views(ins, move):
    """Return ``ins`` with every view passed through ``move`` (which may return it as is)."""
    def mv(v):
        return None if v is None else move(v)
    if isinstance(ins, Contract):
        d = ins.desc
        return dc_replace(ins, desc=dc_replace(d, a=mv(d.a), b=mv(d.b), c=mv(d.c)))
    if isinstance(ins, Elementwise):
        return dc_replace(ins, d=mv(ins.d), a=mv(ins.a), b=mv(ins.b))
    if isinstance(ins, Reduce):
        return dc_replace(ins, d=mv(ins.d), a=mv(ins.a))
    if isinstance(ins, Gather):
        return dc_replace(ins, dst=mv(ins.dst), src=mv(ins.src), index=mv(ins.index))
    if isinstance(ins, Update):
        return dc_replace(ins, theta=mv(ins.theta), grad=mv(ins.grad))
    return ins


#: Region names the host writes before a step or reads after it (live for the whole step).
HOST_REGIONS = ("in.", "loss", "logits")


def _live_intervals(instrs, regions, stores=("act", "scratch")):
    """Return ``{region: (first, last)}`` for the regions of ``stores``: the static positions
    of the first and last instruction that touches it (an instruction in a LOOP counts from
    the LOOP to the ENDLOOP, so every iteration is inside). Regions the host writes or reads
    (:data:`HOST_REGIONS`), regions whose first touch reads them (a value from before the
    step) and regions nothing touches are live for the whole step ``(0, len(instrs))``.
    Raises AssertionError when an operand is not inside one region."""
    first_at, last_at = _static_positions(instrs)
    end = len(instrs)
    spans = {s: sorted((r.base, r.base + r.size - 1, n) for n, r in regions.items()
                       if r.store == s) for s in stores}
    starts = {s: [lo for lo, _, _ in lst] for s, lst in spans.items()}
    first, first_ins, last, pinned = {}, {}, {}, set()
    for i, j, store, lo, hi, reads in _operand_hulls(instrs):
        if store not in spans:
            continue
        lst = spans[store]
        k = bisect_right(starts[store], lo) - 1
        if k < 0 or not lst[k][0] <= lo <= hi <= lst[k][1]:
            raise AssertionError(f"operand {j} of instruction {i} ({store}@{lo}..{hi}) is not "
                                 f"inside one region: {instrs[i]}")
        n = lst[k][2]
        if n not in first:
            first[n], first_ins[n] = first_at[i], i
        if reads and first_ins[n] == i:
            pinned.add(n)
        last[n] = max(last.get(n, -1), last_at[i])
    live = {}
    for s in stores:
        for _, _, n in spans[s]:
            if n.startswith(HOST_REGIONS) or n in pinned or n not in first:
                live[n] = (0, end)
            else:
                live[n] = (first[n], last[n])
    return live


def _peak(names, regions, live, end):
    """``(words, position)``: the largest sum of live region sizes and where it is."""
    delta = [0] * (end + 2)
    for n in names:
        a, b = live[n]
        delta[a] += regions[n].size
        delta[b + 1] -= regions[n].size
    acc, best, at = 0, 0, 0
    for p in range(end + 1):
        acc += delta[p]
        if acc > best:
            best, at = acc, p
    return best, at


def _allocate(instrs, regions, allocate, stores=("act", "scratch")):
    """Give the regions of ``stores`` their words (``compile_model(allocate=...)``).

    ``"liveness"``: by the live intervals of :func:`_live_intervals`. Two regions share
    words only if their intervals are disjoint, so a region's words are reused once its
    last reader has run and every instruction reads exactly the words the one-region-per-
    word layout gives it. Placement: largest region first, each at the lowest address free
    of every placed region it overlaps in time. ``"bump"``: the builder's layout, every
    region its own words.

    Returns ``(instructions, regions, sizes, liveness)``: ``liveness[store]`` has ``peak``
    (the store's words), ``live_sum`` and ``at`` (the largest sum of live region sizes, a
    lower bound of any allocation, and the instruction where it occurs) and ``intervals``.
    """
    live = _live_intervals(instrs, regions, stores)
    end = len(instrs)
    new_base, sizes, info = {}, {}, {}
    for s in stores:
        names = sorted((n for n, r in regions.items() if r.store == s),
                       key=lambda n: (-regions[n].size, live[n][0], n))
        if allocate == "liveness":
            placed = []                                   # (first, last, base, size)
            top = 0
            for n in names:
                a, b = live[n]
                size = regions[n].size
                busy = sorted((pb, pb + ps) for pa, pz, pb, ps in placed
                              if pa <= b and a <= pz)
                base = 0
                for lo, hi in busy:
                    if lo - base >= size:
                        break
                    base = max(base, hi)
                new_base[n] = base
                placed.append((a, b, base, size))
                top = max(top, base + size)
        else:
            top = max((regions[n].base + regions[n].size for n in names), default=0)
        best, at = _peak(names, regions, live, end)
        sizes[s] = top
        info[s] = {"peak": top, "live_sum": best, "at": at,
                   "intervals": {n: live[n] for n in names}}
    if allocate != "liveness":
        return list(instrs), dict(regions), sizes, info
    spans = {s: sorted((r.base, r.base + r.size - 1, n) for n, r in regions.items()
                       if r.store == s) for s in stores}
    starts = {s: [lo for lo, _, _ in lst] for s, lst in spans.items()}

    def move(v):
        if v.store not in spans:
            return v
        k = bisect_right(starts[v.store], v.base) - 1
        lo, hi, n = spans[v.store][k]
        if not lo <= v.base <= hi:
            raise AssertionError(f"view at {v.store}@{v.base} is in no region")
        return dc_replace(v, base=new_base[n] + v.base - lo)

    out = [_move_views(ins, move) for ins in instrs]
    out_regions = {n: (dc_replace(r, base=new_base[n]) if n in new_base else r)
                   for n, r in regions.items()}
    return out, out_regions, sizes, info


# ---- fused SGD update ----------------------------------------------------------------------

def _map_grad_views(ins, move):
    """Return ``ins`` with every grad-store view passed through ``move``."""
    def mv(v):
        return move(v) if v is not None and v.store == "grad" else v
    if isinstance(ins, Contract):
        d = ins.desc
        return dc_replace(ins, desc=dc_replace(d, a=mv(d.a), b=mv(d.b), c=mv(d.c)))
    if isinstance(ins, Elementwise):
        return dc_replace(ins, d=mv(ins.d), a=mv(ins.a), b=mv(ins.b))
    if isinstance(ins, Reduce):
        return dc_replace(ins, d=mv(ins.d), a=mv(ins.a))
    if isinstance(ins, Gather):
        return dc_replace(ins, dst=mv(ins.dst), src=mv(ins.src), index=mv(ins.index))
    return ins


def _fuse_updates(instrs, regions, names):
    """Fuse the SGD update into the backward pass (``compile_model(fused_update=True)``).

    ``instrs``: forward + backward (no update yet); ``regions``: the memory map with every
    parameter ``p`` in the param store and ``grad:p`` in the grad store at the same offset;
    ``names``: the parameter names. Returns ``(instructions, regions, grad_words)``.

    For each parameter its *last touch* is the last instruction that reads its param words or
    reads or writes its grad words (an instruction inside a LOOP counts at the ENDLOOP: every
    iteration runs first). Its UPDATE goes right after that: its gradient is final (no later
    instruction adds to it) and no later instruction reads the old value, so every word the
    rest of the step computes is the unfused program's and the new value is
    ``fp32_sub(theta, fp32_mul(1.0, g))`` of the same ``g``: exactly SGD. A gradient's grad
    words are live from its first touch to its UPDATE; the grad store is allocated by these
    intervals (first fit, in order of first touch), so it holds only the gradients in flight.
    A reused word was cleared to +0.0 by the UPDATE of its previous owner, so gradients that
    accumulate (SCATTER_ADD of the TTM cores and segment rows, the position-row LOOP) still
    start from +0.0 as in the unfused program. Parameters updated at the same point whose
    param and grad words are both contiguous share one UPDATE.
    """
    # static position of each instruction (loop bodies at their LOOP / ENDLOOP)
    first_at, last_at = _static_positions(instrs)
    # a gradient outside the grad store (compile_model(ttm_grads_in_act=True)) is in the
    # act store: it gets its UPDATE here, its words from the act store's allocation
    spans = {"param": [], "grad": []}
    grad_spans = {}
    for n in names:
        r = regions[n]
        spans["param"].append((r.base, r.base + r.size - 1, n))
        g = regions["grad:" + n]
        grad_spans.setdefault(g.store, []).append((g.base, g.base + g.size - 1, n))
    for st_, lst in grad_spans.items():
        spans.setdefault(st_, []).extend(lst)
    is_grad = {(st_, n) for st_, lst in grad_spans.items() for _, _, n in lst}
    in_grad = [n for n in names if regions["grad:" + n].store == "grad"]
    for lst in spans.values():
        lst.sort()
    starts = {s: [lo for lo, _, _ in lst] for s, lst in spans.items()}

    def touched(store, lo, hi):
        lst = spans[store]
        i = max(bisect_right(starts[store], lo) - 1, 0)
        while i < len(lst) and lst[i][0] <= hi:
            if lst[i][1] >= lo:
                yield lst[i][2]
            i += 1

    first, last = {}, {}
    cur_loop = None
    for i, ins in enumerate(instrs):
        if isinstance(ins, Loop):
            cur_loop = ins
            continue
        if isinstance(ins, EndLoop):
            cur_loop = None
            continue
        versions = [ins] if cur_loop is None else \
            [ins.stepped(cur_loop.increments, 0), ins.stepped(cur_loop.increments,
                                                               cur_loop.count - 1)]
        hulls = {}                  # operand slot -> (store, lo, hi) over the iterations
        for v in versions:
            for j, (store, lo, hi, _) in enumerate(extents(v)):
                s0, a, b = hulls.get(j, (store, lo, hi))
                hulls[j] = (store, min(a, lo), max(b, hi))
        for store, lo, hi in hulls.values():
            if store not in spans:
                continue
            for n in touched(store, lo, hi):
                if store == "param" or (store, n) in is_grad:
                    last[n] = max(last.get(n, -1), last_at[i])
                if (store, n) in is_grad:
                    first[n] = min(first.get(n, len(instrs)), first_at[i])
    missing = [n for n in names if n not in first]
    if missing:
        raise AssertionError(f"parameters without a gradient in the step: {missing}")

    # liveness allocation of the grad store: [first touch, UPDATE after the last touch]
    order = sorted(in_grad, key=lambda n: (first[n], regions[n].base))
    holes, top, live, new_base = [], 0, [], {}

    def release(upto):
        nonlocal holes, top
        keep = []
        for end, base, size in live:
            if end < upto:
                holes.append((base, size))
            else:
                keep.append((end, base, size))
        live[:] = keep
        holes.sort()
        merged = []
        for b, s in holes:
            if merged and merged[-1][0] + merged[-1][1] == b:
                merged[-1] = (merged[-1][0], merged[-1][1] + s)
            else:
                merged.append((b, s))
        if merged and merged[-1][0] + merged[-1][1] == top:
            top = merged.pop()[0]
        holes = merged

    high = 0
    for n in order:
        release(first[n])
        size = regions[n].size
        base = None
        for h, (hb, hs) in enumerate(holes):
            if hs >= size:
                base = hb
                holes[h] = (hb + size, hs - size)
                if hs == size:
                    del holes[h]
                break
        if base is None:
            base, top = top, top + size
            high = max(high, top)
        new_base[n] = base
        live.append((last[n], base, size))

    old = sorted((regions["grad:" + n].base, regions["grad:" + n].size, n) for n in in_grad)
    old_starts = [b for b, _, _ in old]

    def move(v):
        b, size, n = old[bisect_right(old_starts, v.base) - 1]
        if not b <= v.base < b + size:
            raise AssertionError(f"grad view at {v.base} is in no gradient region")
        return dc_replace(v, base=new_base[n] + v.base - b)

    out_regions = dict(regions)
    for n in in_grad:
        out_regions["grad:" + n] = dc_replace(regions["grad:" + n], base=new_base[n])

    # UPDATEs after each last touch; contiguous runs share one
    due = {}
    for n in names:
        due.setdefault(last[n], []).append(n)
    one = f32_bits(1.0)
    out = []
    for i, ins in enumerate(instrs):
        out.append(_map_grad_views(ins, move))
        for_now = sorted(due.get(i, ()), key=lambda n: regions[n].base)
        runs = []
        for n in for_now:
            p, gr = regions[n], regions["grad:" + n]
            if gr.store != "grad":
                # its own UPDATE: the act store's allocator moves the region by itself
                runs.append([p.base, gr.store, gr.base, p.size, False])
                continue
            g = new_base[n]
            if runs and runs[-1][4] and runs[-1][0] + runs[-1][3] == p.base \
                    and runs[-1][2] + runs[-1][3] == g:
                runs[-1][3] += p.size
            else:
                runs.append([p.base, "grad", g, p.size, True])
        for pb, gs, gb, count, _ in runs:
            out.append(Update(View("param", pb), View(gs, gb), count, one))
    return out, out_regions, high


@dataclass
class CompiledModel:
    """A compiled whole-model training step.

    Attributes
    ----------
    cfg : ModelConfig
    program : Program
        Instructions, store sizes and memory map.
    lr : float
        Default learning rate of :meth:`sample_words` (the rate is data: ``in.gweight``).
    rows : int
        Grid rows per step, ``batch * positions``.
    sections : dict
        ``"forward"``, ``"backward"``, ``"update"``: (first, end) instruction indices. With
        ``fused_update`` the UPDATEs are part of ``"backward"`` and ``"update"`` is the END.
    fused_update : bool
        The UPDATEs run inside the backward pass and the grad store is allocated by liveness
        (``grad:*`` regions overlap: a gradient region is meaningful only while it is live).
    recompute, ttm_group, allocate : str, int, str
        The memory options it was compiled with (``ttm_group``: the token table's rows per
        group, the grid rows when all at once).
    order : dict
        ``{layer kind: order}`` of its TT layers.
    liveness : dict
        ``{store: {"peak", "live_sum", "at", "intervals"}}`` for the act and scratch stores
        (:func:`_allocate`): with ``allocate="liveness"`` act/scratch regions overlap in the
        memory map, and a region is meaningful only inside its interval.
    """
    cfg: ModelConfig
    program: Program
    lr: float
    rows: int
    sections: dict
    positions: int = 0
    fused_update: bool = False
    recompute: str = "none"
    ttm_group: int = 0
    allocate: str = "bump"
    liveness: dict = field(default_factory=dict)
    order: dict = field(default_factory=dict)

    def __post_init__(self):
        self.positions = self.positions or self.cfg.seq_len

    @property
    def memory_map(self):
        return self.program.memory_map

    @property
    def store_sizes(self):
        return dict(self.program.store_sizes)

    def region_at(self, store, addr, pc):
        """Name of the region holding word ``addr`` of ``store`` at instruction ``pc`` (the
        live one, where regions share words), or None."""
        iv = self.liveness.get(store, {}).get("intervals", {})
        for name, r in self.memory_map.items():
            if r.store == store and r.base <= addr < r.base + r.size:
                a, b = iv.get(name, (0, len(self.program.instructions)))
                if a <= pc <= b:
                    return name
        return None

    # ----------------------------------------------------------------------------------
    # host side: images in and out

    def _put(self, image, name, values, dtype=np.float32):
        r = self.memory_map[name]
        v = np.asarray(values)
        if v.size != r.size:
            raise ValueError(f"{name} needs {r.size} values (shape {r.shape}), got shape "
                             f"{v.shape}")
        words = np.ascontiguousarray(v, dtype=dtype).view(np.uint32).ravel()
        image[r.store][r.base:r.base + r.size] = words

    def _get(self, image, name):
        r = self.memory_map[name]
        return np.asarray(image[r.store][r.base:r.base + r.size], dtype=np.uint32) \
            .view(np.float32).reshape(r.shape).copy()

    def param_names(self):
        return list(M.param_shapes(self.cfg))

    def initial_image(self, params):
        """Return a memory image holding ``params`` (from ``model.init_params``), rest zero."""
        M.check_params(self.cfg, params)
        image = self.program.empty_image()
        self.set_params(image, params)
        return image

    def set_params(self, image, params):
        """Write ``params`` into ``image`` (in place; TTM cores permuted to slice-major)."""
        for name in self.param_names():
            p = np.asarray(params[name], dtype=np.float32)
            if _is_ttm_core(name):
                p = p.transpose(1, 0, 2, 3)
            self._put(image, name, p)

    def params(self, image):
        """Return the parameters of ``image`` as a dict like ``model.init_params``."""
        out = {}
        for name, shape in M.param_shapes(self.cfg).items():
            v = self._get(image, name)
            if _is_ttm_core(name):
                v = v.transpose(1, 0, 2, 3)
            out[name] = np.ascontiguousarray(v.reshape(shape))
        return out

    def grads(self, image):
        """Return the gradient store as a dict (zero after the step's UPDATE)."""
        out = {}
        for name, shape in M.param_shapes(self.cfg).items():
            v = self._get(image, "grad:" + name)
            if _is_ttm_core(name):
                v = v.transpose(1, 0, 2, 3)
            out[name] = np.ascontiguousarray(v.reshape(shape))
        return out

    def sample_words(self, batch, lr=None):
        """Return ``{region name: uint32 words}`` of the sample inputs for ``batch``.

        ``batch``: a labelled batch (``tokens``, ``segments``, ``mask``, ``intent``) of
        ``1 .. cfg.batch`` sentences; a short batch is padded with rows of weight 0 (they
        change nothing), so the loss is the mean over the given sentences. ``lr``: this
        step's learning rate (default the compiled one), folded into the gradient weights.
        """
        cfg = self.cfg
        lr = self.lr if lr is None else _check_lr(lr)
        M.validate_batch(cfg, batch, labels=True)
        tokens = np.asarray(batch["tokens"])
        n, s = tokens.shape
        if s != cfg.seq_len:
            raise ValueError(f"batch has sequence length {s}; the config has seq_len = "
                             f"{cfg.seq_len}: pad or cut the batch to {cfg.seq_len}")
        P = self.positions
        mask_in = np.asarray(batch["mask"], bool)
        if mask_in[:, P:].any():
            last = int(np.flatnonzero(mask_in.any(axis=0))[-1]) + 1
            raise ValueError(f"the batch has real tokens up to position {last}; this program "
                             f"was compiled for {P} positions: use compile_model(cfg, "
                             f"positions={last}) or more")
        if n > cfg.batch:
            raise ValueError(f"batch has {n} sentences; the program takes at most cfg.batch = "
                             f"{cfg.batch}: split it")
        B, S = cfg.batch, P
        tokens = tokens[:, :P]
        tok = np.zeros((B, S), np.int64)
        seg = np.zeros((B, S), np.int64)
        mask = np.zeros((B, S), bool)
        mask[:, 0] = True                                   # padding rows: [CLS] only
        label = np.zeros(B, np.int64)
        weight = np.zeros(B, np.float32)
        tok[:n], seg[:n] = tokens, np.asarray(batch["segments"])[:, :P]
        mask[:n] = mask_in[:, :P]
        label[:n] = np.asarray(batch["intent"])
        weight[:n] = np.float32(1.0) / np.float32(n)
        gweight = np.zeros(B, np.float32)
        gweight[:n] = np.float32(lr) / np.float32(n)
        digits = token_digits(cfg.embedding, tok.reshape(-1))     # (R, d)
        words = {}
        for k in range(cfg.embedding.d):
            words[f"in.digits{k}"] = digits[:, k].astype(np.uint32)
        if cfg.seg_embedding is not None:
            sd = token_digits(cfg.seg_embedding, seg.reshape(-1))
            for k in range(cfg.seg_embedding.d):
                words[f"in.seg.digits{k}"] = sd[:, k].astype(np.uint32)
        else:
            words["in.seg"] = seg.reshape(-1).astype(np.uint32)
        if cfg.pos_embedding is not None:
            pd = token_digits(cfg.pos_embedding, np.arange(S))
            for k in range(cfg.pos_embedding.d):
                words[f"in.pos.digits{k}"] = pd[:, k].astype(np.uint32)
        bias = np.where(mask, np.float32(0.0), np.float32(MASK_VALUE)).astype(np.float32)
        words["in.mask_bias"] = bias.reshape(-1).view(np.uint32)
        onehot = np.zeros((B, cfg.n_intents), np.float32)
        onehot[np.arange(B), label] = 1.0
        onehot[n:] = 0.0
        words["in.onehot"] = onehot.reshape(-1).view(np.uint32)
        words["in.weight"] = weight.view(np.uint32)
        words["in.gweight"] = gweight.view(np.uint32)
        return words

    def set_batch(self, image, batch, lr=None):
        """Write the sample inputs of ``batch`` (and the step's ``lr``) into ``image``."""
        for name, w in self.sample_words(batch, lr).items():
            r = self.memory_map[name]
            image[r.store][r.base:r.base + r.size] = w

    def loss(self, image):
        """The step's loss (mean cross-entropy over the batch's sentences)."""
        return float(self._get(image, "loss")[0])

    def logits(self, image, n=None):
        """Intent logits ``(n, n_intents)`` of the last step (its forward pass)."""
        v = self._get(image, "logits")
        return v if n is None else v[:n]



#: Activation recomputation granularities of :func:`compile_model`.
RECOMPUTE = ("none", "sublayer", "layer")
#: Act/scratch allocators of :func:`compile_model`.
ALLOCATORS = ("liveness", "bump")


def _check_choice(name, value, choices):
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got "
                         f"{value!r}")
    return value


#: TT layer kinds an ``order`` dict of :func:`compile_model` names.
LAYER_KINDS = ("attention", "ffn1", "ffn2", "pooler")
#: A starting point of the ``order="auto"``/``"fast"`` search besides the uniform orders: the
#: FFN layers in the planner's cheapest order, which materialises no ``N x r`` merge of their
#: 3072-wide side (the two FFN layers share the memory peak, so a search that changes one
#: kind at a time would not find it from the bi-directional flow).
AUTO_FFN_ORDER = {"ffn1": "dp_best", "ffn2": "dp_best"}
#: The per-layer-kind orders the search tries (``"best"`` is the planner's pick among them).
SEARCH_ORDERS = ("bidirectional", "dp_best", "left_to_right")
#: ``order`` values that ask the compiler to choose, and what each minimises first
#: (``words``: on-chip store words of the step; ``macs``: its multiply-accumulates, the
#: engine's work), the other breaking ties.
ORDER_OBJECTIVES = {"auto": ("words", "macs"), "fast": ("macs", "words")}


def _check_order(order):
    if isinstance(order, str):
        if order not in ORDERS + tuple(ORDER_OBJECTIVES):
            names = ", ".join(ORDERS + tuple(ORDER_OBJECTIVES))
            raise ValueError(f"order must be one of {names} or a dict "
                             f"{{layer kind: order}}, got {order!r}")
        return order
    if isinstance(order, dict):
        bad = [k for k in order if k not in LAYER_KINDS]
        if bad:
            raise ValueError(f"order dict keys must be layer kinds {', '.join(LAYER_KINDS)}, "
                             f"got {bad}")
        for v in order.values():
            if v not in ORDERS:
                raise ValueError(f"order dict values must be one of {', '.join(ORDERS)}, got "
                                 f"{v!r}")
        return dict(order)
    raise ValueError(f"order must be a string or a dict {{layer kind: order}}, got {order!r}")


def _freeze(order):
    """``order`` (a str or a ``{kind: order}`` dict) as a hashable value."""
    return tuple(sorted(order.items())) if isinstance(order, dict) else order


@functools.lru_cache(maxsize=256)
def _searched_group(cfg, kw_items):
    """:func:`_search_group` memoised (a process compiles the same preset often)."""
    kw = dict(kw_items)
    if isinstance(kw["order"], tuple):
        kw["order"] = dict(kw["order"])
    return _search_group(cfg, kw)


def _search_group(cfg, kw):
    """The ``ttm_group`` of ``ttm_group="auto"``: the largest of 1, 2, 4, ... grid rows whose
    compiled step needs no more store words than token by token (1), stopping at the first
    size that needs more (a larger group holds more prefix products at once, so the words
    do not fall again; checked on the presets in ``tests/test_golden_model_compiler.py``).
    Every group computes the same words bit for bit, so this only trades instructions for
    memory, never numbers."""
    def words(g):
        return sum(compile_model(cfg, ttm_group=g, **kw).store_sizes.values())
    rows = cfg.batch * (cfg.seq_len if kw.get("positions") is None else kw["positions"])
    best, floor, g = 1, words(1), 2
    while g <= rows:
        if words(g) > floor:
            break
        best, g = g, 2 * g
    return best


@functools.lru_cache(maxsize=256)
def _searched_order(cfg, order, kw_items):
    """The per-kind orders :func:`_search_order` picks for ``cfg`` (memoised: the search
    compiles the step 10-20 times, and a process compiles the same preset often)."""
    best = _search_order(cfg, ORDER_OBJECTIVES[order], dict(kw_items))
    return tuple(sorted(best.order.items()))


def _search_order(cfg, objective, kw):
    """The compiled step of ``cfg`` whose per-kind orders minimise ``objective``.

    ``objective``: a pair of ``"words"`` (the step's store words, its on-chip memory) and
    ``"macs"`` (:func:`ttrain.golden.memory.program_macs`), compared in that order. The
    search starts from the best of the uniform orders of :data:`SEARCH_ORDERS` and
    :data:`AUTO_FFN_ORDER`, then changes one layer kind at a time to each other order of
    :data:`SEARCH_ORDERS`, keeping a change that is strictly better, until a whole pass over
    the kinds changes nothing (a coordinate search: 10-20 compiles where all 81 combinations
    would take seconds; on paper-l1 and paper-l3 it finds the optimum of all 81 for both
    objectives, ``tests/test_golden_model_compiler.py``). An order the compiler cannot emit
    for ``cfg`` (a ``ValueError``) is skipped; ties keep the earlier candidate, so the
    bi-directional flow wins a tie against everything."""
    from .memory import program_macs

    def score(cm):
        vals = {"words": sum(cm.store_sizes.values()), "macs": program_macs(cm.program)}
        return tuple(vals[o] for o in objective)

    seen = {}

    def compiled(o):
        key = tuple(sorted(o.items()))
        if key not in seen:
            try:
                cm = compile_model(cfg, order=dict(o), **kw)
                seen[key] = (score(cm), cm)
            except ValueError:
                seen[key] = None
        return seen[key]

    starts = [{k: o for k in LAYER_KINDS} for o in SEARCH_ORDERS]
    starts.insert(1, {k: AUTO_FFN_ORDER.get(k, "bidirectional") for k in LAYER_KINDS})
    best = None
    for o in starts:
        got = compiled(o)
        if got is not None and (best is None or got[0] < best[0]):
            best, cur = got, dict(o)
    if best is None:        # no order compiles: the error of the bi-directional flow
        return compile_model(cfg, order="bidirectional", **kw)
    changed = True
    while changed:
        changed = False
        for kind in LAYER_KINDS:
            for o in SEARCH_ORDERS:
                if o == cur[kind]:
                    continue
                got = compiled({**cur, kind: o})
                if got is not None and got[0] < best[0]:
                    best, cur, changed = got, {**cur, kind: o}, True
    return best[1]


def compile_model(cfg, *, lr=None, order="auto", positions=None, fused_update=True,
                  recompute="layer", ttm_group="auto", allocate="liveness",
                  ttm_grads_in_act=True, engine_sums=None):
    """Compile one training step of ``cfg`` (forward, backward, SGD update).

    Every option below changes where words live and how often they are computed, never a
    word the step computes: loss, logits and the updated parameters are bit-identical for
    every combination (``tests/test_golden_model_compiler.py`` runs them side by side).

    Parameters
    ----------
    cfg : ModelConfig
        Intent-only model, ``pooling="cls"``, no dropout/label smoothing/logit adjustment
        (:func:`model_unsupported` says what to change otherwise).
    lr : float, optional
        Default learning rate (``cfg.lr``). The rate is sample data, not part of the program:
        the host writes ``lr / n`` per real sentence into ``in.gweight``, the loss gradient is
        scaled by it, so every gradient in the grad store is ``lr * g`` and the UPDATE
        subtracts it with rate 1.0 (``fp32_mul(1.0, x) = x``). A schedule changes one word
        per sentence per step, never the program.
    order : str or dict
        TT contraction order: one of :data:`ttrain.golden.compiler.ORDERS` for every TT layer,
        a dict ``{kind: order}`` over :data:`LAYER_KINDS` (missing kinds: bi-directional),
        or one the compiler chooses per layer kind (:func:`_search_order`; decided on the
        full grid whatever ``positions`` is, so all programs of ``cfg`` compute the same
        function): ``"auto"`` (default) the fewest on-chip words, then the fewest MACs
        (the paper's memory figures); ``"fast"`` the fewest MACs, then the fewest words
        (the engine's work: on the 8- and 256-lane cycle models the fewest-MAC orders are
        also the fewest-cycle ones, ``docs/planner.md``).
        ``CompiledModel.order`` is the dict used. The
        order changes the rounding of the TT layers' sums (another program), the other
        memory options below do not.
    positions : int, optional
        Grid positions per sentence (default ``cfg.seq_len``). A program for ``P <
        seq_len`` positions takes batches whose real tokens all lie in the first ``P``
        positions and computes only those rows: padding past ``P`` is never computed (the
        parameters, their layout and the update are the same; every padded position only
        ever contributes exact zeros). The host picks the program per batch.
    fused_update : bool
        ``True`` (default): each parameter tensor's UPDATE runs inside the backward pass right
        after the last instruction that touches its gradient or reads it, and the grad store
        is allocated by liveness, so it holds only the gradients in flight
        (:func:`_fuse_updates`). ``False``: gradients keep the parameters' layout and one
        UPDATE over the whole param store ends the step.
    recompute : str
        Activation recomputation (:data:`RECOMPUTE`); the checkpoint is a LayerNorm's
        ``x_hat`` and ``1/sigma`` (its output is its last two instructions on the kept
        ``x_hat``, the same words, and its backward pass needs nothing else). ``"none"``: the
        backward pass reads what the forward pass wrote. ``"sublayer"``: the embedding
        LayerNorm's and each block's LN1 and LN2 ``x_hat`` are kept; the backward pass of a
        block runs LN2 backward, the FFN half again (without FFN2's ``Y``), its backward,
        LN1 backward, the attention half again (without O's ``Y``), its backward.
        ``"layer"`` (default): only the LN2 ``x_hat`` (the block output) is kept, the
        attention half runs once more up to LN1 first (the last block keeps its LN1 ``x_hat``
        instead: its backward pass follows at once); for one block it is ``"sublayer"``.
        Recomputation runs the same instructions on the same words, so it yields the same
        words; it costs the recomputed forward MACs (``ttrain plan`` reports them).
    ttm_group : int, None or "auto"
        Tokens per group of the TTM embedding. The embedding's chain of core slices runs in
        a LOOP over groups of this many rows (the largest divisor of the grid rows not above
        it), and its backward pass runs the chain again per group before the group's
        gradients (SCATTER_ADD into the core gradients, in row order as before), so only one
        group's prefix products are ever held. 1: token by token, the fewest words. ``None``:
        all rows at once, the prefix products of every token kept for the backward pass.
        ``"auto"`` (default, :func:`_search_group`): the largest group, 1, 2, 4, ... rows,
        that needs no more on-chip words than token by token (fewer gathers, contractions and
        LOOP iterations for the same memory: paper-l1 2 rows, 720 gathers instead of 1,440).
        ``CompiledModel.ttm_group`` is the group used.
    ttm_grads_in_act : bool
        With the fused update (else ignored): the TTM tables' core gradients live in the act
        store instead of the grad store (default True). They accumulate over the whole
        token loop at the end of the backward pass, when the act store is nearly empty, so
        the act store's liveness allocation holds them in words it has anyway and the grad
        store only needs the other gradients in flight. Each is filled with +0.0 right
        before its accumulation (the grad store's words are +0.0 there), gets its own
        UPDATE (which clears it), and so holds the same words.
    allocate : str
        Act and scratch store allocation (:data:`ALLOCATORS`). ``"liveness"`` (default):
        :func:`_allocate`, regions share words when their live intervals do not
        overlap. ``"bump"``: every region its own words (the reference layout; the memory map
        then has no overlapping regions).
    engine_sums : int or None
        The lanes of the machine the step is compiled for, to weigh each row sum (``rsum``
        outside a LOOP) between the vector unit and the engine by golden's cycle models
        (:func:`_sum_goes_to_engine`): a sum that is faster on the engine becomes the
        CONTRACT ``d = a . ones`` (one ``fill`` of a ones vector in the act store first). The
        same words bit for bit (split 1, as compiled); on wide engines the LayerNorm and
        softmax sums, whose rows the vector unit walks one element a cycle, go to the engine
        (docs/wide-engine.md). ``None`` (default): every sum on the vector unit.

    Returns
    -------
    CompiledModel
    """
    if not isinstance(cfg, ModelConfig):
        raise TypeError(f"cfg must be a ModelConfig (golden.config.get_config), not "
                        f"{type(cfg).__name__}")
    order = _check_order(order)
    if isinstance(order, str) and order in ORDER_OBJECTIVES:
        # decided on the full grid, so every positions= program of cfg computes the same
        # function (the host picks them per batch)
        # (with ttm_group="auto" the orders are searched token by token: the group it then
        # picks needs the same words and MACs, so the search would choose the same orders)
        kw = dict(lr=lr, fused_update=fused_update, recompute=recompute,
                  ttm_group=ttm_group, allocate=allocate, ttm_grads_in_act=ttm_grads_in_act,
                  engine_sums=engine_sums)
        search_kw = {**kw, "ttm_group": 1 if ttm_group == "auto" else ttm_group}
        chosen = _searched_order(cfg, order, tuple(sorted(search_kw.items())))
        return compile_model(cfg, order=dict(chosen), positions=positions, **kw)
    if isinstance(ttm_group, str):
        if ttm_group != "auto":
            raise ValueError(f"ttm_group must be a positive int (tokens per TTM group), None "
                             f"(all rows at once) or 'auto', got {ttm_group!r}")
        # (the learning rate is sample data, not layout: the search ignores it)
        kw = dict(order=_freeze(order), positions=positions,
                  fused_update=fused_update, recompute=recompute, allocate=allocate,
                  ttm_grads_in_act=ttm_grads_in_act, engine_sums=engine_sums)
        group = _searched_group(cfg.with_(lr=0.1), tuple(sorted(kw.items())))
        kw["order"] = order
        return compile_model(cfg, lr=lr, ttm_group=group, **kw)
    if isinstance(order, str):
        order = {k: order for k in LAYER_KINDS}
    order = {k: order.get(k, "bidirectional") for k in LAYER_KINDS}
    why = model_unsupported(cfg)
    if why:
        raise ValueError(f"config {cfg.name!r} cannot be compiled to one on-chip step: {why}")
    lr = _check_lr(cfg.lr if lr is None else lr)
    _check_choice("recompute", recompute, RECOMPUTE)
    _check_choice("allocate", allocate, ALLOCATORS)
    if ttm_group is not None and (isinstance(ttm_group, bool)
                                  or not isinstance(ttm_group, (int, np.integer))
                                  or ttm_group < 1):
        raise ValueError(f"ttm_group must be a positive int (tokens per TTM group), None "
                         f"(all rows at once) or 'auto', got {ttm_group!r}")

    if positions is None:
        positions = cfg.seq_len
    if isinstance(positions, bool) or not isinstance(positions, (int, np.integer)) \
            or not 1 <= positions <= cfg.seq_len:
        raise ValueError(f"positions must be an int in 1..seq_len = {cfg.seq_len}, got "
                         f"{positions!r}")
    B, S, D, F, H = cfg.batch, int(positions), cfg.d_model, cfg.d_ffn, cfg.n_heads
    C, dh, R = cfg.n_intents, cfg.d_head, cfg.batch * S
    emb = cfg.embedding
    if engine_sums is not None and (isinstance(engine_sums, bool)
                                    or not isinstance(engine_sums, (int, np.integer))
                                    or engine_sums < 1 or engine_sums & (engine_sums - 1)):
        raise ValueError(f"engine_sums must be None or the machine's lanes (a power of two), "
                         f"got {engine_sums!r}")
    bld = _Builder(None if engine_sums is None else int(engine_sums))
    reg = bld.region
    tmp = bld.tmp

    # ---- parameters and gradients: identical layouts --------------------------------
    shapes = M.param_shapes(cfg)
    for name, shape in shapes.items():
        if _is_ttm_core(name):
            shape = (shape[1], shape[0], shape[2], shape[3])
        reg(name, "param", shape)
    act_grads = bool(ttm_grads_in_act and fused_update)
    for name, shape in shapes.items():
        store = "grad"
        if _is_ttm_core(name):
            shape = (shape[1], shape[0], shape[2], shape[3])
            store = "act" if act_grads else "grad"
        reg("grad:" + name, store, shape)
    n_params = sum(prod(s) for s in shapes.values())

    # ---- sample inputs and outputs --------------------------------------------------
    for k in range(emb.d):
        reg(f"in.digits{k}", "act", (R,))
    if cfg.pos_embedding is not None:
        for k in range(cfg.pos_embedding.d):
            reg(f"in.pos.digits{k}", "act", (S,))
    if cfg.seg_embedding is not None:
        for k in range(cfg.seg_embedding.d):
            reg(f"in.seg.digits{k}", "act", (R,))
    else:
        reg("in.seg", "act", (R,))
    reg("in.mask_bias", "act", (B, S))
    reg("in.onehot", "act", (B, C))
    reg("in.weight", "act", (B,))
    reg("in.gweight", "act", (B,))
    reg("loss", "act", (1,))
    reg("logits", "act", (B, C))

    scale = float(np.float32(1.0 / sqrt(dh)))       # 1/sqrt(d_head), rounded once
    inv = lambda n: float(np.float32(1.0) / np.float32(n))   # noqa: E731
    rows_s = B * H * S
    HS2 = H * S * S

    # ---- LayerNorm -------------------------------------------------------------------
    def ln_forward(ln, inst, x, rows, width):
        """y = LN(x) with parameters ``ln``; keeps ``{inst}.xhat``, ``{inst}.rstd``."""
        reg(f"{inst}.xhat", "act", (rows, width))
        reg(f"{inst}.rstd", "act", (rows,))
        reg(f"{inst}.y", "act", (rows, width))
        mu = bld.col(tmp(f"{inst}.t.mu", "act", (rows,)))
        xh, rstd, y = bld.mat(f"{inst}.xhat"), bld.col(f"{inst}.rstd"), bld.mat(f"{inst}.y")
        t = y                                  # the squares live in y until y is written
        bld.rsum(rows, width, mu, x)
        bld.ew("scale", rows, 1, mu, mu, imm=inv(width))
        bld.ew("sub", rows, width, xh, x, mu)                    # xc
        bld.ew("mul", rows, width, t, xh, xh)
        bld.rsum(rows, width, rstd, t)
        bld.ew("scale", rows, 1, rstd, rstd, imm=inv(width))     # var
        bld.ew("addi", rows, 1, rstd, rstd, imm=float(np.float32(cfg.ln_eps)))
        bld.ew("rsqrt", rows, 1, rstd, rstd)
        bld.ew("mul", rows, width, xh, xh, rstd)                 # xhat
        bld.ew("mul", rows, width, y, xh, bld.rowvec(f"{ln}.gamma"))
        bld.ew("add", rows, width, y, y, bld.rowvec(f"{ln}.beta"))
        return f"{inst}.y"

    def ln_backward(ln, inst, dy, dx, rows, width):
        """dx = LN'(dy); dgamma, dbeta written to the grad store."""
        # dx serves as the temporary until its value is written, x_hat's gradient holds
        # x_hat * m2 once it is used up: one row block of temporaries
        xh, rstd = bld.mat(f"{inst}.xhat"), bld.col(f"{inst}.rstd")
        dxh = bld.mat(tmp(f"{inst}.d.xhat", "act", (rows, width)))
        m1 = bld.col(tmp(f"{inst}.d.m1", "act", (rows,)))
        m2 = bld.col(tmp(f"{inst}.d.m2", "act", (rows,)))
        gg, gb = bld.r(f"grad:{ln}.gamma"), bld.r(f"grad:{ln}.beta")
        bld.ew("mul", rows, width, dx, dy, xh)
        bld.rsum(width, rows, View("grad", gg.base, 1, 0), View(dx.store, dx.base, 1, width))
        bld.rsum(width, rows, View("grad", gb.base, 1, 0),
                 View(dy.store, dy.base, 1, dy.row_stride))
        bld.ew("mul", rows, width, dxh, dy, bld.rowvec(f"{ln}.gamma"))
        bld.rsum(rows, width, m1, dxh)
        bld.ew("scale", rows, 1, m1, m1, imm=inv(width))
        bld.ew("mul", rows, width, dx, dxh, xh)
        bld.rsum(rows, width, m2, dx)
        bld.ew("scale", rows, 1, m2, m2, imm=inv(width))
        bld.ew("sub", rows, width, dx, dxh, m1)
        bld.ew("mul", rows, width, dxh, xh, m2)
        bld.ew("sub", rows, width, dx, dx, dxh)
        bld.ew("mul", rows, width, dx, dx, rstd)

    # ---- TT layers: one compile per shape, relocated per instance ---------------------
    full = cfg.batch * cfg.seq_len
    ttl = _TTLayers(order, {"attention": full, "ffn1": full, "ffn2": full, "pooler": B})

    def tt_fwd(name, inst, spec, rows, x, z_only=False):
        """Emit TT layer ``name``'s forward pass reading ``x`` into a new ``{inst}.y``
        (``z_only``: only what its backward pass reads, no ``Y``)."""
        y = None if z_only else tmp(f"{inst}.y", "act", (rows, spec.n_out))
        st = _tt_forward(bld, ttl, name, inst, spec, rows, x, y)
        bld.ins.extend(st["forward"])
        st["y"] = y
        return st

    def tt_bwd(st, dy, rows, n_in, free=(), x=None):
        """Emit the backward pass of a TT layer instance; return its new ``dX`` region.
        ``free``: layer inputs (``"x"``, ``"dy"``) nothing reads after it; ``x``: a region
        holding the layer's input again (default: the one its forward pass read)."""
        dx = tmp(f"{st['inst']}.dx", "act", (rows, n_in))
        bld.ins.extend(_tt_backward(bld, st, dy, dx, free, x))
        return dx

    def tt_bwd_x_again(st, dy, n_in, again):
        """:func:`tt_bwd` whose input ``X`` is LayerNorm output ``again = (LayerNorm,
        instance)``, computed from the kept x_hat right before the first backward
        instruction that reads it (not held through the steps before). Returns the ``dX``
        and the ``X`` regions."""
        x = tmp(f"{again[1]}.y.re", "act", (R, D))
        dx = tmp(f"{st['inst']}.dx", "act", (R, n_in))
        bwd = _tt_backward(bld, st, dy, dx, (), x)
        xr = bld.r(x)
        k = next((n for n, s_ in enumerate(bwd) for v in s_.views[1:]
                  if v is not None and v.store == xr.store
                  and xr.base <= v.base < xr.base + xr.size), len(bwd))
        # a first reader inside a LOOP body: X before the LOOP, once (not in every iteration)
        opened = [n for n in range(k) if isinstance(bwd[n], Loop)]
        if opened and not any(isinstance(bwd[n], EndLoop) for n in range(opened[-1], k)):
            k = opened[-1]
        bld.ins.extend(bwd[:k])
        ln_output(*again, y=x)
        bld.ins.extend(bwd[k:])
        return dx, x

    def tt_rows_again(st, rows, tag, consume):
        """Emit ``Y`` of TT layer instance ``st`` again, one row at a time, from its kept
        token intermediates: the merges ``Y``'s contraction reads (fresh ``{inst}.{tag}.*``
        regions), then one LOOP whose body computes a row of ``Y`` (+ bias) into a small
        region and hands it to ``consume(row view, 1)`` (which may use LOOP increment 2).
        The row's contraction is the layer's own restricted to the dimension that carries
        the row index (a contraction's outputs do not depend on how many others it
        computes, nor on its orientation), so every word is the same. Returns False,
        emitting nothing, when the layer's forward token part is not: steps writing kept
        (private) regions, then one contraction writing ``Y``, then ``Y += bias``."""
        prog, mm = st["prog"], st["prog"].memory_map
        ins, cut, merge_at = prog.instructions, st["cut"], st["merge_at"]
        tok = [n for n in range(cut) if n not in merge_at]
        if len(tok) < 2:
            return False
        yi, bi = ins[tok[-2]], ins[tok[-1]]
        y = mm["y"]
        n_out = y.shape[-1]
        spans = sorted((r.store, r.base, r.base + r.size, n) for n, r in mm.items())
        if not (isinstance(yi, Contract) and isinstance(bi, Elementwise) and bi.op == "add"
                and not yi.desc.accumulate
                and _region_sets(yi, spans)[1] == {"y"} == _region_sets(bi, spans)[1]
                and all(_region_sets(ins[n], spans)[1] <= st["private"] for n in tok[:-2])):
            return False
        d = yi.desc
        # the dimension of C that carries the row: index // q is the row
        dims = {"m": (d.m, d.c.row_stride), "n": (d.n, d.c.col_stride),
                "batch": (d.batch, d.c.batch_stride)}
        carry = None
        for name, (size, stride) in dims.items():
            if size % rows or stride * (size // rows) != n_out:
                continue
            others = sum((sz - 1) * st_ for nm, (sz, st_) in dims.items() if nm != name)
            if others + (size // rows - 1) * stride < n_out:
                carry = name
        if carry is None or d.c.base != y.base:
            return False
        q = dims[carry][0] // rows
        need = _region_sets(yi, spans)[0] - st["private"]
        keep = []
        for n in reversed(merge_at):
            r_, w_ = _region_sets(ins[n], spans)
            if w_ & need:
                keep.append(n)
                need |= {k for k in r_ if mm[k].store == "scratch"}
        keep.reverse()
        target = dict(st["target"])
        for n in keep:
            (w_,) = _region_sets(ins[n], spans)[1]
            target[w_] = bld.region(f"{st['inst']}.{tag}.{w_}", "scratch", mm[w_].shape)
        bld.ins.extend(_relocate([ins[n] for n in keep], mm, target))
        chunk = tmp(f"{st['inst']}.{tag}.row", "act", (1, n_out))
        target["y"] = bld.r(chunk)
        yc, bc = _relocate([yi, bi], mm, target)
        dc = yc.desc
        if carry == "m":
            dr = dc_replace(dc, m=q)
            inc, steps = q * dc.a.row_stride, (0, 1, 0)
        elif carry == "n":
            dr = dc_replace(dc, n=q)
            inc, steps = q * dc.b.col_stride, (0, 0, 1)
        else:
            if dc.a.batch_stride and dc.b.batch_stride:
                return False                     # both operands step: two increments
            dr = dc_replace(dc, batch=q)
            inc = q * (dc.a.batch_stride or dc.b.batch_stride)
            steps = (0, 1, 0) if dc.a.batch_stride else (0, 0, 1)
        if dr.m > dr.n:                          # the engine's orientation (same words)
            dr, steps = dr.transposed(), (steps[0], steps[2], steps[1])

        def body():
            bld.ins.append(Contract(dr, steps))
            bld.ins.append(dc_replace(bc, rows=1))
            consume(bld.mat(chunk), 1)
        bld.loop(rows, (inc, n_out), body)
        return True

    # ---- encoder block: attention half and FFN half ----------------------------------
    def ln_output(ln, inst, y=None):
        """LayerNorm ``ln``'s output again from its kept ``{inst}.xhat`` (its last two
        instructions on the same words): a kept x_hat stands for the output as well.
        ``y``: the region to write (default a new one)."""
        y = tmp(f"{inst}.y.re", "act", (R, D)) if y is None else y
        yv = bld.mat(y)
        bld.ew("mul", R, D, yv, bld.mat(f"{inst}.xhat"), bld.rowvec(f"{ln}.gamma"))
        bld.ew("add", R, D, yv, yv, bld.rowvec(f"{ln}.beta"))
        return y

    def attn_forward(i, x, tag, full=True):
        """The attention half of block ``i`` from input ``x`` (a region, or ``(LayerNorm,
        instance)`` whose output is computed from its kept x_hat, here and again before the
        Q/K/V backward passes): Q/K/V, softmax, context, O and, when ``full``, the residual
        and LN1 (without: O's Z only, what the backward pass needs)."""
        e = f"enc{i}"
        p = e + tag
        st = {}
        if isinstance(x, tuple):
            # (LayerNorm, instance): its output from the kept x_hat, now and again later
            st["x_again"] = x
            x = ln_output(*x)
        xv = bld.mat(x)
        st["x"] = x
        for p_ in ("q", "k", "v"):
            st[p_] = tt_fwd(f"{e}.{p_}", f"{p}.{p_}", cfg.attention, R, x)
        Pn = tmp(f"{p}.P", "act", (B, H, S, S))
        st["P"] = Pn
        q, k_ = (bld.r(st[p_]["y"]) for p_ in ("q", "k"))
        Pr = bld.r(Pn)

        def qk():
            # scores[h, i, j] = sum_d Q[i, h d] K[j, h d], scaled, + key-mask bias of row j
            Pb = View("act", Pr.base, S, 1)
            bld.contract(S, S, dh, View("act", q.base, D, 1, dh), View("act", k_.base, 1, D, dh),
                         View("act", Pr.base, S, 1, S * S), batch=H, step=(1, 2, 2))
            bld.ew("scale", H * S, S, Pb, Pb, imm=scale, step=(1, 1, 0))
            bld.ew("add", H * S, S, Pb, Pb, View("act", bld.r("in.mask_bias").base, 0, 1),
                   step=(1, 1, 3))
        # one LOOP over the sequences (increments: score block, Q/K rows, mask row)
        bld.loop(B, (HS2, S * D, S), qk)
        Pm = View("act", Pr.base, S, 1)
        mx = bld.col(tmp(f"{p}.t.max", "act", (rows_s,)))
        z = bld.col(tmp(f"{p}.t.z", "act", (rows_s,)))
        bld.rmax(rows_s, S, mx, Pm)
        bld.ew("sub", rows_s, S, Pm, Pm, mx)
        bld.ew("exp", rows_s, S, Pm, Pm)
        bld.rsum(rows_s, S, z, Pm)
        bld.ew("recip", rows_s, 1, z, z)
        bld.ew("mul", rows_s, S, Pm, Pm, z)
        st["ctx"] = tmp(f"{p}.ctx", "act", (R, D))
        ctx, vr = bld.r(st["ctx"]), bld.r(st["v"]["y"])

        def av():
            # ctx[i, h d] = sum_j P[h, i, j] V[j, h d]
            bld.contract(S, dh, S, View("act", Pr.base, S, 1, S * S),
                         View("act", vr.base, D, 1, dh), View("act", ctx.base, D, 1, dh),
                         batch=H, step=(2, 1, 2))
        bld.loop(B, (HS2, S * D), av)
        st["o"] = tt_fwd(f"{e}.o", f"{p}.o", cfg.attention, R, st["ctx"], z_only=not full)
        if not full:
            return st
        s1 = tmp(f"{p}.sum1", "act", (R, D))
        bld.ew("add", R, D, bld.mat(s1), xv, bld.mat(st["o"]["y"]))
        st["ln1"] = f"{p}.ln1"
        st["x1"] = ln_forward(f"{e}.ln1", f"{p}.ln1", bld.mat(s1), R, D)
        return st

    def ffn_forward(i, x1, tag, full=True):
        """The FFN half of block ``i`` from ``x1`` (a region, or ``(LayerNorm, instance)``
        whose output is computed from its kept x_hat, here and again right before FFN1's
        backward pass): FFN1, GELU, FFN2 and, when ``full``, the residual and LN2
        (without: FFN2's Z)."""
        e = f"enc{i}"
        p = e + tag
        st = {"p": p}
        if isinstance(x1, tuple):
            # (LayerNorm, instance): its output from the kept x_hat, now and again later
            st["x1_again"] = x1
            x1 = ln_output(*x1)
        st["x1"] = x1
        st["ffn1"] = tt_fwd(f"{e}.ffn1", f"{p}.ffn1", cfg.ffn1, R, x1)
        if recompute == "none":
            st["g"] = tmp(f"{p}.gelu", "act", (R, F))
        else:
            # G over H in place: the backward pass computes H again where it needs it
            st["g"] = st["ffn1"]["y"]
        bld.ew("gelu", R, F, bld.mat(st["g"]), bld.mat(st["ffn1"]["y"]))
        st["ffn2"] = tt_fwd(f"{e}.ffn2", f"{p}.ffn2", cfg.ffn2, R, st["g"], z_only=not full)
        if not full:
            return st
        s2 = tmp(f"{p}.sum2", "act", (R, D))
        bld.ew("add", R, D, bld.mat(s2), bld.mat(x1), bld.mat(st["ffn2"]["y"]))
        st["ln2"] = f"{p}.ln2"
        st["out"] = ln_forward(f"{e}.ln2", f"{p}.ln2", bld.mat(s2), R, D)
        return st

    def ffn_backward(i, st, dy2):
        """Backward of the FFN half from ``dy2`` (gradient of its residual sum, LN2's input);
        returns the gradient of its input ``x1`` (FFN path + residual)."""
        e, p = f"enc{i}", st["p"]
        # G (FFN2's input) is not read after FFN2's backward pass when H is computed again
        dg = tt_bwd(st["ffn2"], dy2, R, F, free=("x",) if recompute != "none" else ())
        dgv = bld.mat(dg)

        def dh(hv, rows):
            # dH = dG * gelu'(H): gelu' written over H (nothing reads H after this)
            bld.ew("gelu_grad", rows, F, hv, hv)
            bld.ew("mul", rows, F, dgv, dgv, hv, step=(2, 2, 0))
        if recompute == "none":
            dh(bld.mat(st["ffn1"]["y"]), R)
        elif not tt_rows_again(st["ffn1"], R, "h", dh):
            # H = FFN1(x1) again (merges, Z, Y) instead of holding it through FFN2's
            # backward pass beside its input G and dG
            st["ffn1"] = tt_fwd(f"{e}.ffn1", f"{p}.h.ffn1", cfg.ffn1, R, st["x1"])
            dh(bld.mat(st["ffn1"]["y"]), R)
        # FFN1's input again right before its backward pass when it comes from a kept
        # x_hat, instead of holding it through FFN2's backward pass
        if "x1_again" in st:
            dx1, _ = tt_bwd_x_again(st["ffn1"], dg, D, st["x1_again"])
        else:
            dx1 = tt_bwd(st["ffn1"], dg, R, D)
        bld.ew("add", R, D, bld.mat(dx1), bld.mat(dx1), bld.mat(dy2))
        return dx1

    def attn_backward(i, st, doy):
        """Backward of the attention half from ``doy`` (gradient of its residual sum, LN1's
        input); returns the gradient of the block input."""
        p = st["P"].rsplit(".", 1)[0]
        dctx = tt_bwd(st["o"], doy, R, D)
        q, k_, v = (bld.r(st[p_]["y"]) for p_ in ("q", "k", "v"))
        dys = {p_: tmp(f"{p}.{p_}.dy", "act", (R, D)) for p_ in ("q", "k", "v")}
        dq, dk, dv = (bld.r(dys[p_]) for p_ in ("q", "k", "v"))
        dPr = bld.r(tmp(f"{p}.dP", "act", (B, H, S, S)))
        Pr, dc = bld.r(st["P"]), bld.r(dctx)

        def att_back1():
            # dP[h,i,j] = sum_d dctx[i, h d] V[j, h d];  dV[j, h d] = sum_i P[h,i,j] dctx[i, h d]
            bld.contract(S, S, dh, View("act", dc.base, D, 1, dh),
                         View("act", v.base, 1, D, dh), View("act", dPr.base, S, 1, S * S),
                         batch=H, step=(1, 2, 2))
            bld.contract(S, dh, S, View("act", Pr.base, 1, S, S * S),
                         View("act", dc.base, D, 1, dh), View("act", dv.base, D, 1, dh),
                         batch=H, step=(2, 1, 2))
        bld.loop(B, (HS2, S * D), att_back1)
        # softmax backward dS = P * (dP - rowsum(dP * P)), then the score scale
        dPm, Pm = View("act", dPr.base, S, 1), View("act", Pr.base, S, 1)
        tP = bld.mat(tmp(f"{p}.t.dPP", "act", (B, H, S, S)), rs=S)
        r1 = bld.col(tmp(f"{p}.t.rs", "act", (rows_s,)))
        bld.ew("mul", rows_s, S, tP, dPm, Pm)
        bld.rsum(rows_s, S, r1, tP)
        bld.ew("sub", rows_s, S, dPm, dPm, r1)
        bld.ew("mul", rows_s, S, dPm, dPm, Pm)
        bld.ew("scale", rows_s, S, dPm, dPm, imm=scale)

        def att_back2():
            # dQ[i, h d] = sum_j dS[h,i,j] K[j, h d];  dK[j, h d] = sum_i dS[h,i,j] Q[i, h d]
            bld.contract(S, dh, S, View("act", dPr.base, S, 1, S * S),
                         View("act", k_.base, D, 1, dh), View("act", dq.base, D, 1, dh),
                         batch=H, step=(2, 1, 2))
            bld.contract(S, dh, S, View("act", dPr.base, 1, S, S * S),
                         View("act", q.base, D, 1, dh), View("act", dk.base, D, 1, dh),
                         batch=H, step=(2, 1, 2))
        bld.loop(B, (HS2, S * D), att_back2)
        # residual: dx = ((dxq + dxk) + dxv) + dS1, each sum as soon as its terms exist
        if "x_again" in st:
            dxq, xa = tt_bwd_x_again(st["q"], dys["q"], D, st["x_again"])
        else:
            dxq, xa = tt_bwd(st["q"], dys["q"], R, D), None
        d0 = bld.mat(dxq)
        bld.ew("add", R, D, d0, d0, bld.mat(tt_bwd(st["k"], dys["k"], R, D, x=xa)))
        bld.ew("add", R, D, d0, d0, bld.mat(tt_bwd(st["v"], dys["v"], R, D, x=xa)))
        bld.ew("add", R, D, d0, d0, bld.mat(doy))
        return dxq

    # ---- TTM tables: groups of rows through the chain of core slices ----------------
    # table -> (spec, rows it produces, the host's digit lists): the token rows of the grid,
    # the position rows of one sequence, the segment rows of the grid
    ttm = {"tok": (emb, R, "in.digits")}
    if cfg.pos_embedding is not None:
        ttm["pos"] = (cfg.pos_embedding, S, "in.pos.digits")
    if cfg.seg_embedding is not None:
        ttm["seg"] = (cfg.seg_embedding, R, "in.seg.digits")

    def group_of(rows):
        if ttm_group is None:
            return rows
        return max(d_ for d_ in range(1, min(int(ttm_group), rows) + 1) if rows % d_ == 0)

    def gather_slice(table, k, g, dst):
        # core k is stored (v_k, r_k, e_k, r_k+1): one contiguous slice per digit; the index
        # list steps by LOOP increment 1
        spec, _, digits = ttm[table]
        n = spec.core_shapes[k]
        sz = n[0] * n[2] * n[3]
        bld.ins.append(Gather("gather", g, sz, spec.vocab_modes[k], bld.mat(dst, rs=sz),
                              bld.mat(f"emb.{table}.core{k}", rs=sz),
                              View("act", bld.r(f"{digits}{k}").base, 1, 0), step=(0, 0, 1)))

    def chain(table, tag, g, out):
        """Gather a group's core slices and multiply them (a LOOP body). Forward (``out``
        given): ``P_{d-1}``, the table rows, goes to ``out`` stepped by increment 2.
        Backward (``out=None``): the slices and ``P_0 .. P_{d-2}`` are kept for the
        gradients. Returns the slice and prefix regions."""
        spec = ttm[table][0]
        sizes_ = [c[0] * c[2] * c[3] for c in spec.core_shapes]
        ranks, dims = spec.ranks, spec.dim_modes
        E = [prod(dims[:k + 1]) for k in range(spec.d)]
        sl = [tmp(f"emb.{table}.{tag}.A0", "act", (g, sizes_[0]))]
        gather_slice(table, 0, g, sl[0])
        Pn = [sl[0]]
        for k in range(1, spec.d):
            sl.append(tmp(f"emb.{table}.{tag}.slice{k}", "act", (g, sizes_[k])))
            gather_slice(table, k, g, sl[k])
            m, kk, n = E[k - 1], ranks[k], dims[k] * ranks[k + 1]
            if k == spec.d - 1:
                if out is None:
                    break                      # backward: P_{d-1} itself is not needed
                c, sc = bld.mat(out, rs=n, bs=m * n), 2
            else:
                Pn.append(tmp(f"emb.{table}.{tag}.P{k}", "act", (g, E[k] * ranks[k + 1])))
                c, sc = bld.mat(Pn[-1], rs=n, bs=m * n), 0
            bld.contract(m, n, kk, bld.mat(Pn[k - 1], rs=kk, bs=m * kk),
                         bld.mat(sl[k], rs=n, bs=kk * n), c, batch=g, step=(sc, 0, 0))
        return sl, Pn

    def ttm_forward(table):
        """Emit the rows of TTM table ``table`` (LOOP over groups); return their region."""
        spec, rows, _ = ttm[table]
        if spec.d < 2:
            raise ValueError(f"the {table} TTM table needs at least 2 cores, got "
                             f"{list(spec.vocab_modes)}")
        g = group_of(rows)
        out = tmp(f"emb.{table}.rows", "act", (rows, D))
        bld.loop(rows // g, (g, g * D), lambda: chain(table, "f", g, out))
        return out

    def ttm_backward(table, drows):
        """Emit the core gradients of ``table`` from ``drows`` (the rows' gradient): per
        group the chain again, then back through it, SCATTER_ADD into the core gradients
        (rows in order, as one SCATTER_ADD over all rows would add them)."""
        spec, rows, digits = ttm[table]
        g = group_of(rows)
        sizes_ = [c[0] * c[2] * c[3] for c in spec.core_shapes]
        ranks, dims = spec.ranks, spec.dim_modes
        E = [prod(dims[:k + 1]) for k in range(spec.d)]

        def scatter(k, src):
            bld.ins.append(Gather("scatter_add", g, sizes_[k], spec.vocab_modes[k],
                                  bld.mat(f"grad:emb.{table}.core{k}", rs=sizes_[k]),
                                  bld.mat(src, rs=sizes_[k]),
                                  View("act", bld.r(f"{digits}{k}").base, 1, 0),
                                  step=(0, 0, 1)))

        if act_grads:
            # the gradients start from +0.0 (in the grad store: the UPDATE's clearing)
            for k in range(spec.d):
                c = spec.core_shapes[k]
                bld.ew("fill", c[1], sizes_[k], bld.mat(f"grad:emb.{table}.core{k}",
                                                        rs=sizes_[k]), imm=0)

        def body():
            sl, Pn = chain(table, "b", g, None)
            dP, dstep = drows, 2                 # dP_{d-1}: the group's rows of drows
            for k in range(spec.d - 1, 0, -1):
                m, kk, n = E[k - 1], ranks[k], dims[k] * ranks[k + 1]
                dsl = tmp(f"emb.{table}.b.dslice{k}", "act", (g, kk * n))
                dprev = tmp(f"emb.{table}.b.dP{k - 1}", "act", (g, m * kk))
                # dA_k[b, r, n] = sum_E P_{k-1}[b, E, r] dP_k[b, E, n]  (the slice gradient)
                bld.contract(kk, n, m, bld.mat(Pn[k - 1], rs=1, cs=kk, bs=m * kk),
                             bld.mat(dP, rs=n, bs=m * n), bld.mat(dsl, rs=n, bs=kk * n),
                             batch=g, step=(0, 0, dstep))
                # dP_{k-1}[b, E, r] = sum_n dP_k[b, E, n] A_k[b, r, n]
                bld.contract(m, kk, n, bld.mat(dP, rs=n, bs=m * n),
                             bld.mat(sl[k], rs=1, cs=n, bs=kk * n),
                             bld.mat(dprev, rs=kk, bs=m * kk), batch=g, step=(0, dstep, 0))
                scatter(k, dsl)
                dP, dstep = dprev, 0
            scatter(0, dP)
        bld.loop(rows // g, (g, g * D), body)

    sections = {}
    # ================================ forward =========================================
    start_fwd = len(bld.ins)
    tok = ttm_forward("tok")
    # + position rows (per sequence) + segment rows
    esum = tmp("emb.sum", "act", (R, D))
    xs, xt = bld.mat(esum), bld.mat(tok)
    pos = bld.mat(ttm_forward("pos") if "pos" in ttm else "emb.pos")
    bld.loop(B, (S * D,), lambda: bld.ew("add", S, D, xs, xt, pos, step=(1, 1, 0)))
    if "seg" in ttm:
        segr = ttm_forward("seg")
    else:
        segr = tmp("emb.segrows", "act", (R, D))
        bld.ins.append(Gather("gather", R, D, cfg.n_segments, bld.mat(segr),
                              bld.mat("emb.seg"), View("act", bld.r("in.seg").base, 1, 0)))
    bld.ew("add", R, D, xs, xs, bld.mat(segr))
    x = ln_forward("emb.ln", "emb.ln", xs, R, D)

    kept = []                 # per layer: (input, attention state, FFN state)
    for i in range(cfg.n_layers):
        a = attn_forward(i, x, "")
        f = ffn_forward(i, a["x1"], "")
        kept.append((x, a, f))
        x = f["out"]

    # pooler on the [CLS] rows, tanh, intent head
    pin = tmp("pin", "act", (B, D))
    bld.ew("copy", B, D, bld.mat(pin), bld.mat(x, rs=S * D))
    pool = tt_fwd("pooler", "pooler", cfg.pooler, B, pin)
    pooled = tmp("pooled", "act", (B, D))
    bld.ew("tanh", B, D, bld.mat(pooled), bld.mat(pool["y"]))
    lg = bld.mat("logits")
    bld.contract(B, C, D, bld.mat(pooled), bld.mat("intent.weight"), lg)
    bld.ew("add", B, C, lg, lg, bld.rowvec("intent.bias"))
    # softmax cross-entropy: loss_b = log(sum exp(z - max)) - (z - max)[label]
    sh, tmpc = bld.mat(tmp("ce.shift", "act", (B, C))), bld.mat(tmp("ce.tmp", "act", (B, C)))
    pr = bld.mat(tmp("probs", "act", (B, C)))
    cmax, cz, clz, cpk = (bld.col(tmp(t, "act", (B,)))
                          for t in ("ce.max", "ce.z", "ce.logz", "ce.pick"))
    bld.rmax(B, C, cmax, lg)
    bld.ew("sub", B, C, sh, lg, cmax)
    bld.ew("exp", B, C, pr, sh)
    bld.rsum(B, C, cz, pr)
    bld.ew("log", B, 1, clz, cz)
    bld.ew("recip", B, 1, cz, cz)
    bld.ew("mul", B, C, pr, pr, cz)
    bld.ew("mul", B, C, tmpc, sh, bld.mat("in.onehot"))
    bld.rsum(B, C, cpk, tmpc)
    bld.ew("sub", B, 1, clz, clz, cpk)                          # per-sentence loss
    bld.ew("mul", B, 1, clz, clz, bld.col("in.weight"))
    bld.rsum(1, B, View("act", bld.r("loss").base, 1, 0), View("act", clz.base, 0, 1))
    sections["forward"] = (start_fwd, len(bld.ins))

    # ================================ backward ========================================
    start_bwd = len(bld.ins)
    dl = bld.mat(tmp("dlogits", "act", (B, C)))
    bld.ew("sub", B, C, dl, pr, bld.mat("in.onehot"))
    bld.ew("mul", B, C, dl, dl, bld.col("in.gweight"))        # lr / n: gradients are lr * g
    gw, gbias = bld.r("grad:intent.weight"), bld.r("grad:intent.bias")
    bld.contract(D, C, B, bld.mat(pooled, rs=1, cs=D), dl, View("grad", gw.base, C, 1))
    bld.rsum(C, B, View("grad", gbias.base, 1, 0), View(dl.store, dl.base, 1, C))
    dpooled = tmp("dpooled", "act", (B, D))
    bld.contract(B, D, C, dl, bld.mat("intent.weight", rs=1, cs=C), bld.mat(dpooled))
    pdy = tmp("pooler.dy", "act", (B, D))
    bld.ew("tanh_grad", B, D, bld.mat(pdy), bld.mat(pooled))
    bld.ew("mul", B, D, bld.mat(pdy), bld.mat(pdy), bld.mat(dpooled))
    pdx = tt_bwd(pool, pdy, B, D)
    def top_gradient():
        # gradient of the last hidden state: zero except the [CLS] rows (emitted right
        # before the last block's LN2 backward reads it)
        dtop = tmp("dtop", "act", (R, D))
        bld.ew("fill", R, D, bld.mat(dtop), imm=0)
        bld.ew("copy", B, D, bld.mat(dtop, rs=S * D), bld.mat(pdx))
        return dtop

    def ln_grad(ln, inst, dout):
        """LayerNorm backward of ``ln`` (instance ``inst``'s x_hat) into a new region."""
        d = tmp(f"{inst}.dx", "act", (R, D))
        ln_backward(ln, inst, bld.mat(dout), bld.mat(d), R, D)
        return d

    dx = None
    for i in reversed(range(cfg.n_layers)):
        e = f"enc{i}"
        x_in, a, f = kept[i]
        if recompute != "none":
            # the block input from the kept x_hat of the LayerNorm before it
            x_in = ("emb.ln", "emb.ln") if i == 0 else (f"enc{i - 1}.ln2",) * 2
        dout = top_gradient() if dx is None else dx
        # LN2 backward from its x_hat kept in the forward pass (recompute none, sub-layer
        # and layer all keep it: it is the block output)
        dy2 = ln_grad(f"{e}.ln2", f"{e}.ln2", dout)
        if recompute == "layer" and i < cfg.n_layers - 1:
            # the attention half once more, to LN1: only its x_hat stays (below). The last
            # block keeps its LN1 x_hat from the forward pass instead: its backward pass
            # follows at once, so that x_hat is live at its peak either way.
            a = attn_forward(i, x_in, ".ln1")
        if recompute != "none":
            ln1 = a["ln1"]
            f = ffn_forward(i, (f"{e}.ln1", ln1), ".re", full=False)
        dx1 = ffn_backward(i, f, dy2)
        doy = ln_grad(f"{e}.ln1", a["ln1"], dx1)
        if recompute != "none":
            a = attn_forward(i, x_in, ".re", full=False)
        dx = attn_backward(i, a, doy)
    # embedding LayerNorm, position, segment and TTM gradients
    dsn = tmp("emb.dsum", "act", (R, D))
    ds = bld.mat(dsn)
    ln_backward("emb.ln", "emb.ln", bld.mat(dx), ds, R, D)
    if "pos" in ttm:
        # the position rows' gradient: the sum over the sequences, from +0.0
        dpos = tmp("emb.pos.drows", "act", (S, D))
        gpos = bld.mat(dpos)
        bld.ew("fill", S, D, gpos, imm=0)
    else:
        gpos = bld.mat("grad:emb.pos")
    bld.loop(B, (S * D,), lambda: bld.ew("add", S, D, gpos, gpos, ds, step=(0, 0, 1)))
    if "pos" in ttm:
        ttm_backward("pos", dpos)
    if "seg" in ttm:
        ttm_backward("seg", dsn)
    else:
        bld.ins.append(Gather("scatter_add", R, D, cfg.n_segments, bld.mat("grad:emb.seg"), ds,
                              View("act", bld.r("in.seg").base, 1, 0)))
    ttm_backward("tok", dsn)
    sections["backward"] = (start_bwd, len(bld.ins))

    # ================================ update ==========================================
    sizes = {k: v for k, v in bld.alloc.high.items() if v}
    regions = dict(bld.alloc.regions)
    if fused_update:
        # every UPDATE inside the backward pass; nothing is left for an update section
        ins, regions, sizes["grad"] = _fuse_updates(bld.ins, regions, list(shapes))
        if any(isinstance(i, Update) for i in ins[:sections["forward"][1]]):
            raise AssertionError("a parameter's last touch is in the forward pass")
        sections["backward"] = (start_bwd, len(ins))
        bld.ins = ins
    start_upd = len(bld.ins)
    if not fused_update:
        bld.ins.append(Barrier())
        bld.ins.append(Update(View("param", 0), View("grad", 0), n_params, f32_bits(1.0)))
    bld.ins.append(End())
    sections["update"] = (start_upd, len(bld.ins))
    bld.ins, regions, packed, liveness = _allocate(bld.ins, regions, allocate)
    sizes.update({s: w for s, w in packed.items() if w})
    program = Program(bld.ins, sizes, regions)
    return CompiledModel(cfg, program, float(lr), R, sections, S, bool(fused_update),
                         recompute=recompute, ttm_group=group_of(R), allocate=allocate,
                         liveness=liveness, order=order)


def chip_model_config(cfg, dataset=None):
    """Return ``(cfg, notes)``: ``cfg`` as the chip trains it, and what was changed.

    The data set's label counts replace the preset's (as in ``golden.train``); hidden-unit
    dropout needs random masks the chip does not generate, so it is set to 0; gradient
    clipping, tail averaging and class rebalancing are host-side golden features the chip
    step does not have, so they are dropped from ``cfg.extra``. Anything else the compiler
    cannot do raises ValueError (``model_unsupported``).
    """
    notes, changes = [], {}
    if dataset is not None:
        if dataset.n_intents != cfg.n_intents:
            changes["n_intents"] = dataset.n_intents
        if dataset.n_slots != cfg.n_slots:
            changes["n_slots"] = dataset.n_slots
    if cfg.dropout:
        changes["dropout"] = 0.0
        notes.append(f"dropout {cfg.dropout:g} -> 0 (no random masks on chip)")
    extra = dict(cfg.extra)
    for key in ("clip", "average", "balance", "unk_alpha"):
        if extra.get(key):
            notes.append(f"{key} {extra[key]:g} dropped (not part of the on-chip step)")
            extra.pop(key)
    if extra != cfg.extra:
        changes["extra"] = extra
    if changes:
        cfg = cfg.with_(**changes)
    why = model_unsupported(cfg)
    if why:
        raise ValueError(f"config {cfg.name!r} cannot train on the chip: {why}")
    return cfg, notes
