"""Golden compiler: one training step of a TT-linear or dense layer as a sequencer program.

:func:`compile_tt_linear` follows the contraction planner's step list (``golden/planner.py``)
for the chosen order (``"bidirectional"`` by default; ``"left_to_right"``, ``"dp_best"`` and
``"best"`` = the planner's choice are accepted when every step maps onto one engine descriptor,
see below). The program is

1. the forward steps of the order (for the bi-directional flow: the left and right merges,
   ``Z = X·L``, ``Y = Z·R``), then ``Y += bias`` (``add``, bias row broadcast by a zero row
   stride);
2. the loss gradient of ``loss = 0.5 * sum((Y - T)**2) * loss_scale``:
   ``dY = fp32_sub(Y, T)`` and, when ``loss_scale != 1``, ``dY = fp32_mul(dY, loss_scale)``;
3. the backward steps of the order (``dZ``, ``dR``, ``dX``, ``dL``, environments and core
   gradients for the bi-directional flow), then the bias gradient ``db[j] = sum_b dY[b, j]``
   (``rsum``, sequential over ``b`` from ``-0.0``);
4. ``barrier``, one UPDATE per core and one for the bias (per-region learning rates), ``end``.

**Step -> descriptor mapping.** Every planner tensor (``F(S)`` or ``G(S)``) carries the network
edges leaving ``S``; it is stored with those edges in the planner's chain order
(``b, i_1, r_1, ..., r_{2d-1}, j_d``), row-major, except ``X``, ``T``, ``Y``, ``dY``, ``dX``
whose batch row is padded to an odd leading dimension (bank-conflict-free columns, as in
``golden.contract.tt_linear_step``). A pairwise step contracts the edges its operands share
(``K``) and keeps the others (``M`` from the first operand, ``N`` from the second). A group is
addressable with one stride in a tensor when its edges are adjacent in storage; then the step
is one ``CONTRACT`` with ``m = |M|``, ``n = |N|``, ``k = |K|`` and views whose strides are the
groups' innermost strides. When a free group (``M`` or ``N``) is not, it is split into a batch
part and a matrix part (the descriptor's ``batch``); when ``K`` is not, C is first filled with
``-0.0`` and a ``LOOP`` over the outer part of ``K`` runs an accumulating ``CONTRACT`` whose A
and B bases step by the outer stride: per output the sum then runs outer-major over ``k`` from
``-0.0``, i.e. exactly the order of one longer contraction. The bi-directional flow needs
neither; ``left_to_right`` and ``dp_best`` use both. The descriptor is oriented so that the
longer of ``m``/``n`` is ``n`` (C's columns, the engine's lanes); per output the products and
their order over ``k`` do not depend on the orientation, so the words are the same.

With ``sample_loop=True`` the steps that carry the sample index ``b`` (plus bias and loss) run
as one ``LOOP`` over the ``B`` samples, one row per iteration (the LOOP's increments are the
rows' strides); batch-independent steps run before it (merges, environments) or after it (core
gradients). Sums over ``b`` (``dR``, ``dL``, the bias gradient) accumulate across iterations
after a ``-0.0`` fill, so every word equals the batched program's.

Memory map: store ``param`` holds the cores (``core1`` .. ``core{2d}``, shapes
``spec.core_shapes``) then ``bias``; ``grad`` holds their gradients at the same offsets
(``grad_core1`` ..., ``grad_bias``); ``act`` holds ``x``, ``target``, ``y``, ``dy``, ``dx``;
``scratch`` holds every other planner tensor (named after it, e.g. ``F:G1.G2``).

:func:`compile_dense` does the same for a dense ``n_in x n_out`` layer (``Y = X·W + b``,
``dX = dY·W^T``, ``dW = X^T·dY``).
"""

from dataclasses import dataclass
from math import prod

import numpy as np

from .config import TTSpec
from .contract import Descriptor, View
from .isa import (Barrier, Contract, Elementwise, End, EndLoop, Loop, Program, Reduce, Region,
                  Update, f32_bits)
from .planner import TTNetwork, bidirectional_tree, left_to_right_tree, dp_best_tree, \
    order_plan, plan_layer

__all__ = ["CompiledLayer", "compile_tt_linear", "compile_dense", "ORDERS"]

#: Orders accepted by :func:`compile_tt_linear`.
ORDERS = ("bidirectional", "left_to_right", "dp_best", "best")


def _ld(cols, pad):
    return cols + 1 if pad and cols % 2 == 0 else cols


def _check_pos_int(name, v):
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, not {v!r}")
    if v < 1:
        raise ValueError(f"{name} must be >= 1, got {v}")
    return int(v)


def _check_float(name, v):
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.floating,
                                                              np.integer)):
        raise TypeError(f"{name} must be a real number, not {v!r}")
    v = float(v)
    if not np.isfinite(v):
        raise ValueError(f"{name} must be finite, got {v}")
    return v


class _Alloc:
    """Bump allocator per store; with ``reuse`` the scratch store keeps a first-fit free list."""

    def __init__(self, reuse=False):
        self.top = {"param": 0, "grad": 0, "act": 0, "scratch": 0}
        self.high = dict(self.top)     # high-water marks = store sizes
        self.regions = {}
        self.reuse = reuse
        self.holes = []            # free scratch (base, size), sorted, coalesced

    def region(self, name, store, shape, ld=None):
        shape = tuple(int(s) for s in shape)
        if ld is None:
            size, rs = prod(shape), 0
        else:
            size, rs = shape[0] * ld, ld
        size = max(size, 1)
        base = None
        if store == "scratch" and self.reuse:
            for h, (hb, hs) in enumerate(self.holes):
                if hs >= size:
                    base = hb
                    self.holes[h] = (hb + size, hs - size)
                    if hs == size:
                        del self.holes[h]
                    break
        if base is None:
            base = self.top[store]
            self.top[store] += size
            self.high[store] = max(self.high[store], self.top[store])
        r = Region(store, base, size, shape, rs)
        self.regions[name] = r
        return r

    def free(self, name):
        """Return a scratch region's words to the free list (its map entry stays)."""
        r = self.regions[name]
        holes = sorted(self.holes + [(r.base, r.size)])
        merged = []
        for b, n in holes:
            if merged and merged[-1][0] + merged[-1][1] == b:
                merged[-1] = (merged[-1][0], merged[-1][1] + n)
            else:
                merged.append((b, n))
        if merged and merged[-1][0] + merged[-1][1] == self.top["scratch"]:
            self.top["scratch"] = merged.pop()[0]
        self.holes = merged


@dataclass
class CompiledLayer:
    """A compiled training step: the :class:`~ttrain.golden.isa.Program` and its I/O helpers.

    Attributes
    ----------
    program : Program
    kind : str
        ``"tt"`` or ``"dense"``.
    spec : TTSpec or None
    n_in, n_out, batch : int
    order : str
        Planner order followed (``"dense"`` for a dense layer).
    param_names : list of str
        Parameter regions in the param store (``core1``.. then ``bias``; ``w``, ``bias``).
    """
    program: Program
    kind: str
    spec: object
    n_in: int
    n_out: int
    batch: int
    order: str
    param_names: list

    @property
    def memory_map(self):
        return self.program.memory_map

    def _put(self, image, name, values):
        r = self.memory_map[name]
        v = np.asarray(values)
        if v.shape != r.shape:
            raise ValueError(f"{name} must have shape {r.shape}, got {v.shape}")
        if v.dtype.kind != "f":
            raise TypeError(f"{name} must be a float array, got dtype {v.dtype}")
        bits = np.ascontiguousarray(v, dtype=np.float32).view(np.uint32)
        store = image[r.store]
        if r.row_stride:
            rows = r.base + np.arange(r.shape[0])[:, None] * r.row_stride
            store[rows + np.arange(r.shape[1])[None, :]] = bits
        else:
            store[r.base:r.base + bits.size] = bits.ravel()

    def read(self, image, name):
        """Return region ``name`` of ``image`` as a float32 array of its logical shape."""
        if name not in self.memory_map:
            raise KeyError(f"no region {name!r}; regions are {sorted(self.memory_map)}")
        r = self.memory_map[name]
        store = np.asarray(image[r.store])
        if r.row_stride:
            rows = r.base + np.arange(r.shape[0])[:, None] * r.row_stride
            words = store[rows + np.arange(r.shape[1])[None, :]]
        else:
            words = store[r.base:r.base + prod(r.shape)].reshape(r.shape)
        return words.view(np.float32).copy()

    def initial_image(self, params, x, target):
        """Return a memory image (all other words zero) holding parameters, input and target.

        Parameters
        ----------
        params : list of ndarray
            TT: the ``2d`` cores (``spec.core_shapes``) followed by the bias ``(n_out,)``;
            dense: ``[W (n_in, n_out), bias (n_out,)]``.
        x : ndarray ``(batch, n_in)``
        target : ndarray ``(batch, n_out)``
        """
        if len(params) != len(self.param_names):
            raise ValueError(f"params needs {len(self.param_names)} arrays "
                             f"({', '.join(self.param_names)}), got {len(params)}")
        image = self.program.empty_image()
        for name, p in zip(self.param_names, params):
            self._put(image, name, p)
        self._put(image, "x", x)
        self._put(image, "target", target)
        return image

    def set_inputs(self, image, x, target):
        """Return a copy of ``image`` with a new input and target (for the next step)."""
        image = {k: np.array(v, copy=True) for k, v in image.items()}
        self._put(image, "x", x)
        self._put(image, "target", target)
        return image

    def params(self, image):
        """Return the parameter arrays (same order as :meth:`initial_image`)."""
        return [self.read(image, n) for n in self.param_names]

    def grads(self, image):
        """Return the gradient arrays (zero after an UPDATE; see ``update=False``)."""
        return [self.read(image, "grad_" + n) for n in self.param_names]


def _lr_for(lr, name):
    if isinstance(lr, dict):
        key = "bias" if name == "bias" else ("cores" if name.startswith("core") else name)
        for k in (name, key):
            if k in lr:
                return _check_float(f"lr[{k!r}]", lr[k])
        raise ValueError(f"lr dict has no entry for region {name!r} (nor {key!r}); give one")
    return _check_float("lr", lr)


def _tail(instrs, alloc, pnames, lr, update, n_out, batch, dy_region, bias_grad=True):
    """Bias gradient, barrier, updates, end."""
    dy = dy_region
    gb = alloc.regions["grad_bias"]
    if bias_grad:
        instrs.append(Reduce("sum", n_out, batch, View("grad", gb.base, 1, 0),
                             View("act", dy.base, 1, dy.row_stride)))
    instrs.append(Barrier())
    if update:
        for name in pnames:
            r, g = alloc.regions[name], alloc.regions["grad_" + name]
            instrs.append(Update(View("param", r.base), View("grad", g.base), r.size,
                                 f32_bits(_lr_for(lr, name))))
    instrs.append(End())


def _head(instrs, alloc, n_out, batch, loss_scale, sel=None):
    """Bias add and loss gradient; with ``sel`` (a LOOP step select for the activations' row
    stride) one row per loop iteration, plus the bias gradient ``db = fp32_add(db, dy_row)``."""
    y, t, dy = alloc.regions["y"], alloc.regions["target"], alloc.regions["dy"]
    b = alloc.regions["bias"]
    rows = batch if sel is None else 1
    s = 0 if sel is None else sel
    yv = View("act", y.base, y.row_stride, 1)
    bias = View("param", b.base, 0, 1)
    instrs.append(Elementwise("add", rows, n_out, yv, yv, bias, step=(s, s, 0)))
    dyv = View("act", dy.base, dy.row_stride, 1)
    instrs.append(Elementwise("sub", rows, n_out, dyv, yv, View("act", t.base, t.row_stride, 1),
                              step=(s, s, s)))
    if loss_scale != 1.0:
        instrs.append(Elementwise("scale", rows, n_out, dyv, dyv, imm=f32_bits(loss_scale),
                                  step=(s, s, 0)))
    if sel is not None:
        gb = View("grad", alloc.regions["grad_bias"].base, 0, 1)
        instrs.append(Elementwise("add", 1, n_out, gb, gb, dyv, step=(0, 0, s)))


def _descriptor(m, n, k, a, b, c, batch=1, accumulate=False):
    d = Descriptor(m, n, k, a, b, c, accumulate, batch)
    return d.transposed() if m > n else d


def compile_tt_linear(spec, batch, *, lr=0.01, order="bidirectional", loss_scale=1.0,
                      update=True, pad=True, reuse_scratch=False, sample_loop=False,
                      tree=None):
    """Compile one training step of a TT-linear layer with bias.

    Parameters
    ----------
    spec : TTSpec
    batch : int
        Tokens per step (rows of X), B.
    lr : float or dict
        SGD learning rate, or per region: keys ``"cores"``/``"bias"`` or region names
        (``"core3"``).
    order : str
        One of :data:`ORDERS`; ``"best"`` takes ``plan_layer(spec, batch).best``.
    loss_scale : float
        Constant factor of the squared-error loss (``dY = (Y - T) * loss_scale``).
    update : bool
        Emit the UPDATEs (with ``False`` the gradients stay in the grad store for inspection).
    pad : bool
        Odd leading dimensions for X, T, Y, dY, dX.
    reuse_scratch : bool
        Give a scratch tensor's words to later tensors after its last reader (first fit).
        Smaller scratch store (close to the planner's ``peak_live_words``), but later writes
        then depend on earlier reads (write-after-read) and the memory-map entries of dead
        tensors overlap live ones: read intermediates back only with ``False`` (the default).
    tree : planner tree, optional
        The contraction tree to follow instead of ``order``'s for ``batch`` (e.g.
        ``dp_best_tree(spec, other_batch)[0]``, so programs for several batch sizes follow
        one tree); ``order`` then only names it.
    sample_loop : bool
        Run the batch-dependent steps (those that carry the token index ``b``; for the
        bi-directional flow ``x_l``, ``z_r``, bias, loss, ``dz``, ``dr``, ``dx``, ``dl``) as one
        ``LOOP`` over the ``B`` samples, one row per iteration (bases stepped by the rows' strides),
        with the sums over ``b`` (``dR``, ``dL``, bias gradient) accumulated across iterations
        after a ``-0.0`` fill. Every word equals the batched program's (same per-output orders).

    Returns
    -------
    CompiledLayer

    Raises
    ------
    ValueError
        For bad arguments, or an order with a step that is not one descriptor (name given).
    """
    if not isinstance(spec, TTSpec):
        raise TypeError(f"spec must be a TTSpec, not {type(spec).__name__}")
    batch = _check_pos_int("batch", batch)
    loss_scale = _check_float("loss_scale", loss_scale)
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, not {order!r}")
    net = TTNetwork(spec, batch)
    d = spec.d
    if order == "best":
        order = plan_layer(spec, batch).best
    if tree is None:
        tree = {"bidirectional": lambda: bidirectional_tree(d),
                "left_to_right": lambda: left_to_right_tree(d),
                "dp_best": lambda: dp_best_tree(spec, batch)}[order]()
    if isinstance(tree, tuple):
        tree = tree[0]
    plan = order_plan(spec, batch, tree, order)

    alloc = _Alloc(reuse=bool(reuse_scratch))
    pnames = [f"core{k + 1}" for k in range(2 * d)] + ["bias"]
    for k, shape in enumerate(spec.core_shapes):
        alloc.region(f"core{k + 1}", "param", shape)
    alloc.region("bias", "param", (spec.n_out,))
    for k, shape in enumerate(spec.core_shapes):
        alloc.region(f"grad_core{k + 1}", "grad", shape)
    alloc.region("grad_bias", "grad", (spec.n_out,))
    ld_in, ld_out = _ld(spec.n_in, pad), _ld(spec.n_out, pad)
    for name, cols, ld in (("x", spec.n_in, ld_in), ("target", spec.n_out, ld_out),
                           ("y", spec.n_out, ld_out), ("dy", spec.n_out, ld_out),
                           ("dx", spec.n_in, ld_in)):
        alloc.region(name, "act", (batch, cols), ld)

    dims = net.edge_dims
    nedges = len(dims)

    def edges_of(mask):
        em = net.edges(mask)
        return [e for e in range(nedges) if em >> e & 1]

    full = net.full
    tensors = {}    # (kind, mask) -> (region name, {edge: stride})

    def strides_rowmajor(es, base_stride=1):
        st, s = {}, base_stride
        for e in reversed(es):
            st[e] = s
            s *= dims[e]
        return st

    def matrix_strides(es, ld):
        st = strides_rowmajor(es[1:])
        st[es[0]] = ld
        return st

    def fixed(kind, mask):
        es = edges_of(mask)
        if kind == "F" and mask == 1:
            return "x", matrix_strides(es, ld_in)
        if kind == "G" and mask == 1:
            return "dx", matrix_strides(es, ld_in)
        if mask == full:
            return ("y" if kind == "F" else "dy"), matrix_strides(es, ld_out)
        if mask & (mask - 1) == 0:
            k = mask.bit_length() - 1
            return (f"core{k}" if kind == "F" else f"grad_core{k}"), strides_rowmajor(es)
        return None

    def tensor(kind, mask, create):
        key = (kind, mask)
        if key in tensors:
            return tensors[key]
        f = fixed(kind, mask)
        if f is None:
            if not create:
                raise AssertionError(f"{kind}:{net.label(mask)} read before it is written")
            es = edges_of(mask)
            name = f"{kind}:{net.label(mask)}"
            alloc.region(name, "scratch", tuple(dims[e] for e in es))
            f = (name, strides_rowmajor(es))
        tensors[key] = f
        return f

    def parse(tname):
        kind, label = tname.split(":", 1)
        mask = 0
        for part in label.split("."):
            mask |= 1 if part == "X" else 1 << int(part[1:])
        return kind, mask

    def mergeable(st, es):
        return all(st[e] == st[f] * dims[f] for e, f in zip(es, es[1:]))

    def group(st, es):
        """(size, stride) of edge group ``es`` in a tensor with strides ``st`` (or None)."""
        es = [e for e in es if dims[e] > 1]
        if not es:
            return 1, 0
        if not mergeable(st, es):
            return None
        return prod(dims[e] for e in es), st[es[-1]]

    def split(es, st1, st2):
        """Split a free group into (batch part, matrix part), each one stride in both."""
        es = [e for e in es if dims[e] > 1]
        for p in range(1, len(es)):
            for outer, inner in ((es[:p], es[p:]), (es[p:], es[:p])):
                if all(mergeable(st, part) for st in (st1, st2) for part in (outer, inner)):
                    return outer, inner
        return None

    def fail(step, what):
        raise ValueError(
            f"order {order!r}, step {step.name}: {what}, so the step is not one contraction "
            f"descriptor; use order='bidirectional'")

    instrs = []
    incs = {}          # sample loop: row stride -> increment index

    def sel(stride):
        """LOOP step select (1..3) of a per-sample row stride; 0 for no stride."""
        if stride is None:
            return 0
        if stride not in incs:
            if len(incs) == 3:
                raise ValueError(f"sample_loop needs more than 3 distinct row strides "
                                 f"({sorted(incs)} and {stride}); use sample_loop=False")
            incs[stride] = len(incs)
        return incs[stride] + 1

    def emit(step, sample=False, out=None, fills=None):
        out = instrs if out is None else out
        (ka, ma), (kb, mb) = parse(step.operands[0]), parse(step.operands[1])
        kc, mc = parse(step.output)
        ra, sa = tensor(ka, ma, False)
        rb, sb = tensor(kb, mb, False)
        rc, sc = tensor(kc, mc, True)
        ea, eb = set(edges_of(ma)), set(edges_of(mb))
        M, N, K = sorted(ea - eb), sorted(eb - ea), sorted(ea & eb)
        if set(edges_of(mc)) != set(M) | set(N):
            raise AssertionError(f"step {step.name}: output edges do not match")
        summed_b = False
        if sample:          # one sample (row of edge b) per loop iteration
            summed_b = 0 in K
            M, N, K = ([e for e in g if e != 0] for g in (M, N, K))
        gk_a, gk_b = group(sa, K), group(sb, K)
        k_outer = None
        if gk_a is None or gk_b is None:
            # loop over the outer summed edges, accumulating (same per-output order)
            parts = split(K, sa, sb)
            if parts is None:
                fail(step, f"its summed edges {[net.edge_names[e] for e in K]} are not "
                           f"adjacent in storage")
            k_outer, inner = parts
            gk_a, gk_b = group(sa, inner), group(sb, inner)
        batch, bs = 1, {"a": 0, "b": 0, "c": 0}
        gm = [group(sa, M), group(sc, M)]
        gn = [group(sb, N), group(sc, N)]
        for free, g, (s1, n1), (s2, n2) in ((M, gm, (sa, "a"), (sc, "c")),
                                            (N, gn, (sb, "b"), (sc, "c"))):
            if None not in g:
                continue
            parts = split(free, s1, s2) if batch == 1 else None
            if parts is None:
                fail(step, f"its free edges {[net.edge_names[e] for e in free]} are not "
                           f"adjacent in storage")
            outer, inner = parts
            batch = prod(dims[e] for e in outer)
            bs[n1], bs[n2] = group(s1, outer)[1], group(s2, outer)[1]
            g[0], g[1] = group(s1, inner), group(s2, inner)
        (m, a_rs), (_, c_rs) = gm
        (n, b_cs), (_, c_cs) = gn
        k = gk_a[0]

        def at(region, rs, cs, bstride):
            r = alloc.regions[region]
            return View(r.store, r.base, rs, cs, bstride)

        a = at(ra, a_rs, gk_a[1], bs["a"])
        b = at(rb, gk_b[1], b_cs, bs["b"])
        c = at(rc, c_rs, c_cs, bs["c"])
        if sample:
            if k_outer is not None or batch != 1:
                fail(step, "without its sample index it still needs a batch or split sum")
            desc = _descriptor(m, n, k, a, b, c, 1, accumulate=summed_b)
            s_c, s_a, s_b = sel(sc.get(0)), sel(sa.get(0)), sel(sb.get(0))
            if summed_b:
                fills.append(Elementwise("fill", m, n, c, imm=f32_bits(-0.0)))
            out.append(Contract(desc, (s_c, s_b, s_a) if m > n else (s_c, s_a, s_b)))
            return
        if k_outer is None:
            instrs.append(Contract(_descriptor(m, n, k, a, b, c, batch)))
            return
        if batch != 1:
            fail(step, "it needs both a batch and a split sum")
        count = prod(dims[e] for e in k_outer)
        inc = (group(sa, k_outer)[1], group(sb, k_outer)[1], 0)
        desc = _descriptor(m, n, k, a, b, c, 1, accumulate=True)
        swapped = m > n                     # _descriptor put B in slot 1
        instrs.append(Elementwise("fill", m, n, c, imm=f32_bits(-0.0)))
        instrs.append(Loop(count, inc))
        instrs.append(Contract(desc, (0, 2, 1) if swapped else (0, 1, 2)))
        instrs.append(EndLoop())

    phases = [s.phase for s in plan.steps]
    if phases != sorted(phases, key=("forward", "backward").index):
        raise AssertionError("planner steps are not forward-then-backward")
    steps = plan.steps
    schedule = list(range(len(steps)))          # emission order (plan order)
    loop_steps = set()
    if sample_loop:
        # steps that carry the sample index b run in one loop; batch-independent steps run
        # before it (merges, environments) unless they read a loop result (core gradients)
        dep = [any(net.edges(parse(t)[1]) & 1 for t in st.operands + (st.output,))
               for st in steps]
        late, pre, loop, post = set(), [], [], []
        for i, st in enumerate(steps):
            if dep[i]:
                loop.append(i)
                late.add(st.output)
            elif any(op in late for op in st.operands):
                post.append(i)
                late.add(st.output)
            else:
                pre.append(i)
        post_out = {steps[i].output for i in post}
        if any(op in post_out for i in loop for op in steps[i].operands):
            raise ValueError(f"order {order!r}: a step inside the sample loop reads a result "
                             f"that needs the whole loop; use sample_loop=False")
        schedule = pre + loop + post
        loop_steps = set(loop)
    last_read = {}
    for pos, i in enumerate(schedule):
        for op in steps[i].operands:
            last_read[op] = pos

    # bias and loss go right before the first backward step that needs dY (inside the loop)
    head_at = next(i for i in schedule if steps[i].phase == "backward"
                   and (not sample_loop or i in loop_steps))
    body, fills, pending = [], [], []
    for pos, i in enumerate(schedule):
        step = steps[i]
        in_loop = i in loop_steps
        if i == head_at:
            if sample_loop and not in_loop:
                raise ValueError(f"order {order!r}: the loss is not inside the sample loop; use "
                                 f"sample_loop=False")
            _head(body if in_loop else instrs, alloc, spec.n_out, batch, loss_scale,
                  sel(ld_out) if in_loop else None)
        emit(step, in_loop, body, fills)
        for op in set(step.operands):
            name = tensors[parse(op)][0]
            if alloc.reuse and last_read[op] == pos and alloc.regions[name].store == "scratch":
                # inside the loop a region is rewritten every iteration: free after the loop
                (pending.append if in_loop else alloc.free)(name)
        if in_loop and (pos + 1 == len(schedule) or schedule[pos + 1] not in loop_steps):
            gb = alloc.regions["grad_bias"]
            fills.append(Elementwise("fill", 1, spec.n_out, View("grad", gb.base, 0, 1),
                                     imm=f32_bits(-0.0)))
            inc = sorted(incs, key=incs.get) + [0] * (3 - len(incs))
            instrs.extend(fills + [Loop(batch, tuple(inc))] + body + [EndLoop()])
            for name in pending:
                alloc.free(name)
    _tail(instrs, alloc, pnames, lr, update, spec.n_out, batch, alloc.regions["dy"],
          bias_grad=not sample_loop)
    program = Program(instrs, {k: v for k, v in alloc.high.items() if v}, dict(alloc.regions))
    return CompiledLayer(program, "tt", spec, spec.n_in, spec.n_out, batch, order, pnames)


def compile_dense(n_in, n_out, batch, *, lr=0.01, loss_scale=1.0, update=True, pad=True):
    """Compile one training step of a dense layer ``Y = X·W + b`` (same loss as TT).

    ``W`` is ``n_in x n_out`` (region ``w``), ``dW = X^T·dY``, ``dX = dY·W^T``; parameters
    ``w``, ``bias`` (``lr`` may be a dict with those keys). See :func:`compile_tt_linear`.
    """
    n_in, n_out = _check_pos_int("n_in", n_in), _check_pos_int("n_out", n_out)
    batch = _check_pos_int("batch", batch)
    loss_scale = _check_float("loss_scale", loss_scale)
    alloc = _Alloc()
    pnames = ["w", "bias"]
    w = alloc.region("w", "param", (n_in, n_out))
    alloc.region("bias", "param", (n_out,))
    gw = alloc.region("grad_w", "grad", (n_in, n_out))
    alloc.region("grad_bias", "grad", (n_out,))
    ld_in, ld_out = _ld(n_in, pad), _ld(n_out, pad)
    regs = {}
    for name, cols, ld in (("x", n_in, ld_in), ("target", n_out, ld_out), ("y", n_out, ld_out),
                           ("dy", n_out, ld_out), ("dx", n_in, ld_in)):
        regs[name] = alloc.region(name, "act", (batch, cols), ld)

    def mat(name):
        r = regs[name]
        return View("act", r.base, r.row_stride, 1)

    W = View("param", w.base, n_out, 1)
    instrs = [Contract(_descriptor(batch, n_out, n_in, mat("x"), W, mat("y")))]
    _head(instrs, alloc, n_out, batch, loss_scale)
    instrs.append(Contract(_descriptor(batch, n_in, n_out, mat("dy"), W.T, mat("dx"))))
    instrs.append(Contract(_descriptor(n_in, n_out, batch, mat("x").T, mat("dy"),
                                       View("grad", gw.base, n_out, 1))))
    _tail(instrs, alloc, pnames, lr, update, n_out, batch, regs["dy"])
    program = Program(instrs, {k: v for k, v in alloc.high.items() if v}, dict(alloc.regions))
    return CompiledLayer(program, "dense", None, n_in, n_out, batch, "dense", pnames)
