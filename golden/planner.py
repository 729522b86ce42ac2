"""Contraction planner for TT-linear layers and the TTM embedding (``docs/planner.md``).

A TT layer's training step is modelled as one closed tensor network with ``2d + 2`` leaves:
the input ``X`` (indices ``b, i_1..i_d``), the cores ``G_1..G_2d`` (``r_{k-1}, s_k, r_k``) and
the output gradient ``dY`` (``b, j_1..j_d``). Every index joins exactly two leaves, so every
tensor the step can ever build is the contraction of a subset of leaves, and its indices are
the edges that leave the subset. Two kinds are named:

``F(S)``
    the product of the leaves in ``S`` (``S`` never holds ``dY``): forward intermediates,
    ``F({X}) = X``, ``F({G_k}) = G_k`` and ``F(all) = Y``.
``G(S)``
    the product of every leaf *not* in ``S`` (``dY`` included): the gradient of ``F(S)``, so
    ``G(all) = dY``, ``G({X}) = dX`` and ``G({G_k}) = dG_k``.

Contracting two tensors costs the product of the sizes of all indices either one carries
(one multiply-accumulate per output element and per summed index combination).

A *training order* is a contraction tree for ``Y`` whose internal nodes say how the gradients
of their children are obtained:

``Pair(A, B)``
    forward ``F(A|B) = F(A)·F(B)``; backward by reverse mode, ``G(A) = G(A|B)·F(B)`` and
    ``G(B) = F(A)·G(A|B)``. Each of the three contractions costs the same MACs.
``Chain(a, b, style)``
    the run of cores ``G_a..G_b`` built as a chain (``"prefix"``: left to right, keeping the
    prefix products; ``"suffix"``: right to left, keeping the suffix products) with the core
    gradients taken from *environments* as in the authors' HLS code (``algorithms.md`` §2
    step 5): ``dG_k`` = (left environment with the gradient of the run) then with the right
    environment; the kept products serve as one side, the other side is built in the backward.

Named orders: ``bidirectional`` (the paper's flow, ``Pair(Pair(X, Chain(1..d, prefix)),
Chain(d+1..2d, suffix))``: merges, ``x_l``, ``z_r``, ``dz``, ``dr``, ``dx``, ``dl``, core
gradients), ``left_to_right`` (``X`` absorbs ``G_1``, ``G_2``, … in turn, reverse-mode
backward) and ``dp_best``: the minimum-MAC tree over *all* binary trees of the ``2d + 1``
forward leaves (every subset split, outer products included, as opt_einsum's ``"dp"`` over
subsets) with the ``Chain`` option at every contiguous run of cores. The DP is exact over that
space because a subtree's forward-plus-backward cost does not depend on the rest of the tree.
The best order is chosen by minimum training-step MACs, ties broken by peak live words, then
by the order of :data:`ORDER_NAMES`.

Liveness rule (``peak_live_words``): steps run in the listed order; an *intermediate* (every
tensor except the inputs ``X``, cores, ``dY`` and the results ``Y``, ``dX``, ``dG_k``, which live
in the activation, parameter and gradient stores) is live from the step that writes it through
the last step that reads it, both included. ``peak_live_words`` is the largest sum of live
intermediate sizes at any step; ``saved_words`` is the size of the intermediates written in
the forward and read in the backward (kept between the phases); ``temp_peak_words`` is the
peak over the other intermediates only (scratch).
"""

import re
from dataclasses import dataclass, field
from math import prod

from .config import ModelConfig, TTMSpec, TTSpec

__all__ = [
    "ORDER_NAMES", "Step", "OrderPlan", "LayerPlan", "TTNetwork", "Leaf", "Pair", "Chain",
    "merge_left_macs", "merge_right_macs", "bidirectional_tree", "left_to_right_tree",
    "dp_best_tree", "order_plan", "plan_layer", "dense_plan", "ttm_cost", "model_macs",
    "layer_tokens",
]

#: Named TT orders, in tie-break order.
ORDER_NAMES = ("bidirectional", "left_to_right", "dp_best")

#: Largest ``2d + 1`` the exact subset DP accepts (3^13 split evaluations, a few seconds).
MAX_DP_LEAVES = 13


def _check_tokens(tokens):
    if isinstance(tokens, bool) or not isinstance(tokens, int):
        raise TypeError(f"tokens (B) must be an int, not {type(tokens).__name__}")
    if tokens < 1:
        raise ValueError(f"tokens (B) must be at least 1, got {tokens}: pass batch x seq_len")


def _check_spec(spec, cls=TTSpec):
    if not isinstance(spec, cls):
        raise TypeError(f"spec must be a {cls.__name__} (ttrain.golden.config), "
                        f"not {type(spec).__name__}")


# --------------------------------------------------------------------------------------------
# closed-form merge costs (algorithms.md §2)

def merge_left_macs(spec):
    """Return the MACs of the left merge ``L = G_1 * ... * G_d``.

    ``sum_{k=2..d} (m_1...m_{k-1}) r_{k-1} m_k r_k`` (``algorithms.md`` §2).
    """
    _check_spec(spec)
    m, r = spec.in_modes, spec.ranks
    return sum(prod(m[:k - 1]) * r[k - 1] * m[k - 1] * r[k] for k in range(2, spec.d + 1))


def merge_right_macs(spec):
    """Return the MACs of the right merge ``R = G_{d+1} * ... * G_2d``, built from the right.

    Mirror of :func:`merge_left_macs`:
    ``sum_{k=1..d-1} r_{d+k-1} n_k r_{d+k} (n_{k+1}...n_d)``.
    """
    _check_spec(spec)
    n, r, d = spec.out_modes, spec.ranks, spec.d
    return sum(r[d + k - 1] * n[k - 1] * r[d + k] * prod(n[k:]) for k in range(1, d))


# --------------------------------------------------------------------------------------------
# the tensor network

class TTNetwork:
    """The closed tensor network of one TT layer's training step.

    Parameters
    ----------
    spec : TTSpec
        Layer shape.
    tokens : int
        Rows of ``X`` (B = batch x sequence length), at least 1.

    Leaves are numbered ``0`` (``X``), ``1..2d`` (``G_k``) and ``2d + 1`` (``dY``); subsets are
    bit masks over the *forward* leaves ``0..2d``.
    """

    def __init__(self, spec, tokens):
        _check_spec(spec)
        _check_tokens(tokens)
        self.spec = spec
        self.tokens = tokens
        d = self.d = spec.d
        # Edge order follows the chain, so core k's indices read (r_{k-1}, s_k, r_k).
        names, dims = ["b"], [tokens]
        for k in range(1, 2 * d + 1):
            names.append(f"i{k}" if k <= d else f"j{k - d}")
            dims.append(spec.modes[k - 1])
            if k < 2 * d:
                names.append(f"r{k}")
                dims.append(spec.ranks[k])
        self.edge_names, self.edge_dims = names, dims
        eid = {n: e for e, n in enumerate(names)}
        leaf_edges = [[eid["b"]] + [eid[f"i{k}"] for k in range(1, d + 1)]]
        for k in range(1, 2 * d + 1):
            es = [] if k == 1 else [eid[f"r{k - 1}"]]
            es.append(eid[f"i{k}"] if k <= d else eid[f"j{k - d}"])
            if k < 2 * d:
                es.append(eid[f"r{k}"])
            leaf_edges.append(es)
        leaf_edges.append([eid["b"]] + [eid[f"j{k}"] for k in range(1, d + 1)])
        self._leaf_mask = [sum(1 << e for e in es) for es in leaf_edges]
        self.n_forward = 2 * d + 1
        self.full = (1 << self.n_forward) - 1
        self.x_mask = 1
        self.left_mask = sum(1 << k for k in range(1, d + 1))
        self.right_mask = sum(1 << k for k in range(d + 1, 2 * d + 1))

    # -- index sets --------------------------------------------------------------------------
    def edges(self, mask):
        """Return the edge bit mask of ``F(mask)`` (equally ``G(mask)``): edges leaving it."""
        out = 0
        for leaf in range(self.n_forward):
            if mask >> leaf & 1:
                out ^= self._leaf_mask[leaf]   # each edge joins two leaves: XOR keeps cut edges
        return out

    def size(self, emask):
        """Return the number of words of a tensor with edge mask ``emask``."""
        return prod(self.edge_dims[e] for e in range(len(self.edge_dims)) if emask >> e & 1)

    def shape(self, mask):
        """Return the shape of ``F(mask)`` / ``G(mask)`` in chain index order."""
        em = self.edges(mask)
        return tuple(self.edge_dims[e] for e in range(len(self.edge_dims)) if em >> e & 1)

    def pair_macs(self, a, b):
        """Return the MACs of contracting ``F(a)`` or ``G(a)`` with ``F(b)`` or ``G(b)``."""
        return self.size(self.edges(a) | self.edges(b))

    def label(self, mask):
        """Return a readable name of the leaf set ``mask`` (``X.G1.G2``)."""
        parts = ["X"] if mask & 1 else []
        parts += [f"G{k}" for k in range(1, 2 * self.d + 1) if mask >> k & 1]
        return ".".join(parts)

    def cores(self, a, b):
        """Return the mask of the core run ``G_a..G_b``."""
        return sum(1 << k for k in range(a, b + 1))

    def run_of(self, mask):
        """Return ``(a, b)`` if ``mask`` is a run of at least two cores ``G_a..G_b``, else None."""
        if mask & 1 or mask & (mask - 1) == 0:
            return None
        a = (mask & -mask).bit_length() - 1
        b = mask.bit_length() - 1
        return (a, b) if mask == self.cores(a, b) else None


# --------------------------------------------------------------------------------------------
# order trees

@dataclass(frozen=True)
class Leaf:
    """A leaf of the forward network: 0 is ``X``, ``k`` is core ``G_k``."""
    index: int

    @property
    def mask(self):
        return 1 << self.index

    def describe(self, net):
        return net.label(self.mask)


@dataclass(frozen=True)
class Pair:
    """Pairwise contraction with a reverse-mode backward."""
    left: object
    right: object

    @property
    def mask(self):
        return self.left.mask | self.right.mask

    def describe(self, net):
        return f"({self.left.describe(net)} * {self.right.describe(net)})"


@dataclass(frozen=True)
class Chain:
    """Core run ``G_a..G_b`` built as a prefix or suffix chain, environment-style backward."""
    a: int
    b: int
    style: str

    def __post_init__(self):
        if self.style not in ("prefix", "suffix"):
            raise ValueError(f"Chain style must be 'prefix' or 'suffix', not {self.style!r}")
        if not 1 <= self.a < self.b:
            raise ValueError(f"Chain needs 1 <= a < b, got a={self.a}, b={self.b}")

    @property
    def mask(self):
        return sum(1 << k for k in range(self.a, self.b + 1))

    def describe(self, net):
        return f"{self.style}[G{self.a}..G{self.b}]"


def bidirectional_tree(d):
    """Return the paper's bi-directional order for ``d`` input modes."""
    left = Leaf(1) if d == 1 else Chain(1, d, "prefix")
    right = Leaf(2) if d == 1 else Chain(d + 1, 2 * d, "suffix")
    return Pair(Pair(Leaf(0), left), right)


def left_to_right_tree(d):
    """Return the classic order: ``X`` absorbs ``G_1``, ``G_2``, ... ``G_2d`` in turn."""
    t = Leaf(0)
    for k in range(1, 2 * d + 1):
        t = Pair(t, Leaf(k))
    return t


# --------------------------------------------------------------------------------------------
# steps

@dataclass(frozen=True)
class Step:
    """One pairwise contraction of an order.

    ``operands``/``output`` are tensor names (``F:X.G1`` is a forward product, ``G:G2.G3`` the
    gradient of that product, i.e. the contraction of everything else); shapes follow the
    chain index order ``b, i_1, r_1, ..., i_d, r_d, j_1, ..., j_d``.
    """
    name: str
    group: str
    phase: str
    operands: tuple
    operand_shapes: tuple
    output: str
    output_shape: tuple
    macs: int

    def to_dict(self):
        return {"name": self.name, "group": self.group, "phase": self.phase,
                "operands": list(self.operands),
                "operand_shapes": [list(s) for s in self.operand_shapes],
                "output": self.output, "output_shape": list(self.output_shape),
                "macs": self.macs}


def _group_of(name):
    """Return the report group of a step name (``merge_left_3`` -> ``merge_left``)."""
    for prefix in ("fwd_", "grad_", "env_"):
        if name.startswith(prefix):
            return prefix[:-1]
    if name.startswith("merge_") and not name.startswith(("merge_left", "merge_right")):
        return "merge"
    return re.sub(r"(_\d+)+(_partial)?$", "", name)


class _Emitter:
    def __init__(self, net):
        self.net = net
        self.steps = []
        self.made = set()

    def tname(self, kind, mask):
        return f"{kind}:{self.net.label(mask)}"

    def emit(self, phase, a, b, out, name=None):
        """Contract tensors ``a`` and ``b`` (``(kind, mask)``) into ``out``."""
        net = self.net
        if out in self.made:
            raise AssertionError(f"order computes {self.tname(*out)} twice")
        self.made.add(out)
        if name is None:
            name = self.default_name(phase, a, b, out)
        group = _group_of(name)
        self.steps.append(Step(
            name=name, group=group, phase=phase,
            operands=(self.tname(*a), self.tname(*b)),
            operand_shapes=(net.shape(a[1]), net.shape(b[1])),
            output=self.tname(*out), output_shape=net.shape(out[1]),
            macs=net.pair_macs(a[1], b[1])))

    def default_name(self, phase, a, b, out):
        net, d = self.net, self.net.d
        kind, mask = out
        lm, rm, xm = net.left_mask, net.right_mask, net.x_mask
        if kind == "F":
            if mask == net.full:
                return "z_r" if {a, b} == {("F", xm | lm), ("F", rm)} else "y"
            if mask == xm | lm and {a, b} == {("F", xm), ("F", lm)}:
                return "x_l"
            run = net.run_of(mask)
            if run is not None:
                lo, hi = run
                if phase == "backward":
                    return f"env_{lo}_{hi}"
                if lo == 1 and hi <= d:
                    return f"merge_left_{hi}"
                if hi == 2 * d and lo >= d + 1:
                    return f"merge_right_{lo}"
                return f"merge_{lo}_{hi}"
            return f"fwd_{net.label(mask)}"
        special = {xm | lm: "dz", rm: "dr", xm: "dx", lm: "dl"}
        if mask in special:
            return special[mask]
        if mask & (mask - 1) == 0:
            return f"core_grad_{mask.bit_length() - 1}"
        return f"grad_{net.label(mask)}"

    # -- forward ---------------------------------------------------------------------------
    def forward(self, node):
        if isinstance(node, Leaf):
            return
        if isinstance(node, Pair):
            self.forward(node.left)
            self.forward(node.right)
            self.emit("forward", ("F", node.left.mask), ("F", node.right.mask), ("F", node.mask))
            return
        if node.style == "prefix":
            acc = 1 << node.a
            for k in range(node.a + 1, node.b + 1):
                self.emit("forward", ("F", acc), ("F", 1 << k), ("F", acc | 1 << k))
                acc |= 1 << k
        else:
            acc = 1 << node.b
            for k in range(node.b - 1, node.a - 1, -1):
                self.emit("forward", ("F", 1 << k), ("F", acc), ("F", acc | 1 << k))
                acc |= 1 << k

    # -- backward (the gradient G(node.mask) exists) ---------------------------------------
    def backward(self, node):
        if isinstance(node, Leaf):
            return
        if isinstance(node, Pair):
            A, B, C = node.left.mask, node.right.mask, node.mask
            self.emit("backward", ("G", C), ("F", B), ("G", A))
            self.emit("backward", ("F", A), ("G", C), ("G", B))
            self.backward(node.left)
            self.backward(node.right)
            return
        a, b, S = node.a, node.b, node.mask
        cores = self.net.cores
        if node.style == "prefix":
            # Kept: prefixes F(a..k). Build the suffix environments F(k..b) now, right to left.
            for k in range(b - 1, a, -1):
                self.emit("backward", ("F", 1 << k), ("F", cores(k + 1, b)), ("F", cores(k, b)))
            for k in range(b, a - 1, -1):
                if k == b:
                    self.emit("backward", ("F", cores(a, b - 1)), ("G", S), ("G", 1 << b))
                elif k == a:
                    self.emit("backward", ("G", S), ("F", cores(a + 1, b)), ("G", 1 << a))
                else:
                    part = cores(k, b)
                    self.emit("backward", ("F", cores(a, k - 1)), ("G", S), ("G", part),
                              name=f"core_grad_{k}_partial")
                    self.emit("backward", ("G", part), ("F", cores(k + 1, b)), ("G", 1 << k))
        else:
            # Kept: suffixes F(k..b). Build the prefix environments F(a..k) now, left to right.
            for k in range(a + 1, b):
                self.emit("backward", ("F", cores(a, k - 1)), ("F", 1 << k), ("F", cores(a, k)))
            for k in range(a, b + 1):
                if k == a:
                    self.emit("backward", ("G", S), ("F", cores(a + 1, b)), ("G", 1 << a))
                elif k == b:
                    self.emit("backward", ("F", cores(a, b - 1)), ("G", S), ("G", 1 << b))
                else:
                    part = cores(k, b)
                    self.emit("backward", ("F", cores(a, k - 1)), ("G", S), ("G", part),
                              name=f"core_grad_{k}_partial")
                    self.emit("backward", ("G", part), ("F", cores(k + 1, b)), ("G", 1 << k))


# --------------------------------------------------------------------------------------------
# plans

@dataclass
class OrderPlan:
    """One training order of one layer: its steps and the figures derived from them."""
    name: str
    tree: str
    steps: list
    forward_macs: int
    backward_macs: int
    peak_live_words: int
    saved_words: int
    temp_peak_words: int

    @property
    def macs(self):
        """Training-step MACs (forward + backward, no parameter update)."""
        return self.forward_macs + self.backward_macs

    def macs_by_group(self):
        """Return ``{group: MACs}`` in first-appearance order."""
        out = {}
        for s in self.steps:
            out[s.group] = out.get(s.group, 0) + s.macs
        return out

    def to_dict(self, steps=True):
        d = {"name": self.name, "tree": self.tree, "macs": self.macs,
             "forward_macs": self.forward_macs, "backward_macs": self.backward_macs,
             "peak_live_words": self.peak_live_words, "saved_words": self.saved_words,
             "temp_peak_words": self.temp_peak_words, "macs_by_group": self.macs_by_group()}
        if steps:
            d["steps"] = [s.to_dict() for s in self.steps]
        return d


def _liveness(net, steps):
    """Return ``(peak, saved, temp_peak)`` words per the module's liveness rule."""
    external = {f"F:{net.label(1 << k)}" for k in range(net.n_forward)}
    external |= {f"G:{net.label(1 << k)}" for k in range(net.n_forward)}
    external |= {f"F:{net.label(net.full)}", f"G:{net.label(net.full)}"}
    born, last, size, phase = {}, {}, {}, {}
    for t, s in enumerate(steps):
        for op in s.operands:
            if op not in external:
                last[op] = t
        if s.output not in external:
            born[s.output] = t
            last.setdefault(s.output, t)
            size[s.output] = prod(s.output_shape)
            phase[s.output] = s.phase
    saved = set()
    for name, t0 in born.items():
        if phase[name] == "forward" and steps[last[name]].phase == "backward":
            saved.add(name)
    peak = temp = 0
    for t in range(len(steps)):
        live = [n for n in born if born[n] <= t <= last[n]]
        peak = max(peak, sum(size[n] for n in live))
        temp = max(temp, sum(size[n] for n in live if n not in saved))
    return peak, sum(size[n] for n in saved), temp


def order_plan(spec, tokens, tree, name="custom"):
    """Return the :class:`OrderPlan` of ``tree`` for layer ``spec`` and ``tokens`` rows.

    Parameters
    ----------
    spec : TTSpec
    tokens : int
        B, at least 1.
    tree : Leaf | Pair | Chain
        Must cover every forward leaf (``X`` and all ``2d`` cores) exactly once.
    name : str
        Label of the order.
    """
    net = TTNetwork(spec, tokens)
    return _order_plan(net, tree, name)


def _check_tree(net, tree):
    seen = []

    def walk(t):
        if isinstance(t, Leaf):
            if not 0 <= t.index < net.n_forward:
                raise ValueError(f"leaf {t.index} out of range 0..{net.n_forward - 1}")
            seen.append(t.index)
        elif isinstance(t, Pair):
            walk(t.left)
            walk(t.right)
        elif isinstance(t, Chain):
            if t.b > 2 * net.d:
                raise ValueError(f"chain G{t.a}..G{t.b} runs past G{2 * net.d}")
            seen.extend(range(t.a, t.b + 1))
        else:
            raise TypeError(f"order tree nodes are Leaf, Pair or Chain, not {type(t).__name__}")
    walk(tree)
    if sorted(seen) != list(range(net.n_forward)):
        raise ValueError(f"order tree must use X and G1..G{2 * net.d} exactly once, "
                         f"got leaves {sorted(seen)}")


def _order_plan(net, tree, name):
    _check_tree(net, tree)
    em = _Emitter(net)
    em.forward(tree)
    em.backward(tree)
    steps = em.steps
    fwd = sum(s.macs for s in steps if s.phase == "forward")
    bwd = sum(s.macs for s in steps if s.phase == "backward")
    peak, saved, temp = _liveness(net, steps)
    return OrderPlan(name=name, tree=tree.describe(net), steps=steps, forward_macs=fwd,
                     backward_macs=bwd, peak_live_words=peak, saved_words=saved,
                     temp_peak_words=temp)


def _chain_cost(net, a, b, style):
    em = _Emitter(net)
    node = Chain(a, b, style)
    em.forward(node)
    em.backward(node)
    return sum(s.macs for s in em.steps)


def dp_best_tree(spec, tokens):
    """Return ``(tree, macs)``: the minimum training-step-MAC order (see module docstring).

    Dynamic programming over all subsets of the ``2d + 1`` forward leaves: for each subset the
    cheapest of every split into two subsets (reverse-mode ``Pair``, 3x the split's MACs plus
    both parts) and, for a run of cores, the two ``Chain`` styles.
    """
    net = TTNetwork(spec, tokens)
    return _dp(net)


def _dp(net):
    n = net.n_forward
    if n > MAX_DP_LEAVES:
        raise ValueError(f"the exact planner handles up to d = {(MAX_DP_LEAVES - 1) // 2} modes "
                         f"per side, got d = {net.d}: use fewer, larger modes")
    best = {}
    for leaf in range(n):
        best[1 << leaf] = (0, Leaf(leaf))
    for mask in range(1, net.full + 1):
        if mask & (mask - 1) == 0:
            continue
        low = mask & -mask
        cand = None
        run = net.run_of(mask)
        if run is not None:
            for style in ("prefix", "suffix"):
                c = _chain_cost(net, run[0], run[1], style)
                if cand is None or c < cand[0]:
                    cand = (c, Chain(run[0], run[1], style))
        sub = (mask - 1) & mask
        while sub:
            if sub & low:             # each unordered split once
                other = mask ^ sub
                c = 3 * net.pair_macs(sub, other) + best[sub][0] + best[other][0]
                if cand is None or c < cand[0]:
                    cand = (c, Pair(best[sub][1], best[other][1]))
            sub = (sub - 1) & mask
        best[mask] = cand
    cost, tree = best[net.full]
    return tree, cost


def dense_plan(n_in, n_out, tokens):
    """Return the dense reference ``OrderPlan`` for an ``n_in x n_out`` weight and B tokens.

    Steps ``y = X W``, ``dx = dY W^T``, ``dw = X^T dY``: ``3 B n_in n_out`` MACs; no
    intermediates (``W``/``dW`` live in the parameter/gradient stores).
    """
    for nm, v in (("n_in", n_in), ("n_out", n_out)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{nm} must be a positive integer, got {v!r}")
    _check_tokens(tokens)
    mk = tokens * n_in * n_out
    steps = [
        Step("y", "y", "forward", ("X", "W"), ((tokens, n_in), (n_in, n_out)), "Y",
             (tokens, n_out), mk),
        Step("dx", "dx", "backward", ("dY", "W"), ((tokens, n_out), (n_in, n_out)), "dX",
             (tokens, n_in), mk),
        Step("dw", "dw", "backward", ("X", "dY"), ((tokens, n_in), (tokens, n_out)), "dW",
             (n_in, n_out), mk),
    ]
    return OrderPlan(name="dense", tree="X * W", steps=steps, forward_macs=mk,
                     backward_macs=2 * mk, peak_live_words=0, saved_words=0, temp_peak_words=0)


@dataclass
class LayerPlan:
    """Every named order of one TT layer, the dense reference and the chosen best order."""
    spec: TTSpec
    tokens: int
    orders: dict
    dense: OrderPlan
    best: str
    objective: str = ("minimum training-step MACs (forward + backward), ties broken by peak "
                      "live words, then by the order bidirectional, left_to_right, dp_best")
    extra: dict = field(default_factory=dict)

    @property
    def update_macs(self):
        """SGD update MACs (one per TT parameter)."""
        return self.spec.num_params

    def to_dict(self, steps=True):
        return {"in_modes": list(self.spec.in_modes), "out_modes": list(self.spec.out_modes),
                "ranks": list(self.spec.ranks), "tokens": self.tokens, "best": self.best,
                "objective": self.objective,
                "orders": {k: v.to_dict(steps) for k, v in self.orders.items()},
                "dense": self.dense.to_dict(steps), "update_macs": self.update_macs,
                "dense_update_macs": self.spec.n_in * self.spec.n_out}


def plan_layer(spec, tokens):
    """Plan one TT layer: every named order, the dense reference and the best order.

    Parameters
    ----------
    spec : TTSpec
        Layer shape.
    tokens : int
        Rows of ``X`` (B), at least 1.

    Returns
    -------
    LayerPlan
    """
    net = TTNetwork(spec, tokens)
    tree, cost = _dp(net)
    orders = {
        "bidirectional": _order_plan(net, bidirectional_tree(net.d), "bidirectional"),
        "left_to_right": _order_plan(net, left_to_right_tree(net.d), "left_to_right"),
        "dp_best": _order_plan(net, tree, "dp_best"),
    }
    if orders["dp_best"].macs != cost:
        raise AssertionError("DP cost and emitted steps disagree")
    best = min(ORDER_NAMES, key=lambda k: (orders[k].macs, orders[k].peak_live_words,
                                           ORDER_NAMES.index(k)))
    return LayerPlan(spec=spec, tokens=tokens, orders=orders,
                     dense=dense_plan(spec.n_in, spec.n_out, tokens), best=best)


# --------------------------------------------------------------------------------------------
# TTM embedding

def _ttm_chain_dp(spec):
    """Return ``(cost, tree)`` of the cheapest per-token slice chain (interval DP).

    Slice k is ``r_{k-1} x e_k x r_k``; joining the products of slices ``i..m`` and ``m+1..j``
    costs ``r_{i-1} (e_i...e_j) r_m r_j``. ``tree`` is a nested ``(left, right)`` of slice
    numbers (1-based).
    """
    e, r, d = spec.dim_modes, spec.ranks, spec.d
    best = {(k, k): (0, k) for k in range(1, d + 1)}
    for length in range(2, d + 1):
        for i in range(1, d - length + 2):
            j = i + length - 1
            ej = prod(e[i - 1:j])
            cand = None
            for m in range(i, j):
                c = best[(i, m)][0] + best[(m + 1, j)][0] + r[i - 1] * ej * r[m] * r[j]
                if cand is None or c < cand[0]:
                    cand = (c, (best[(i, m)][1], best[(m + 1, j)][1]))
            best[(i, j)] = cand
    return best[(1, d)]


def _ttm_tree_words(spec, tree, top=True):
    """Return the summed sizes of the non-root products of ``tree``."""
    if isinstance(tree, int):
        return 0

    def span(t):
        return (t, t) if isinstance(t, int) else (span(t[0])[0], span(t[1])[1])
    i, j = span(tree)
    own = 0 if top else spec.ranks[i - 1] * prod(spec.dim_modes[i - 1:j]) * spec.ranks[j]
    return own + _ttm_tree_words(spec, tree[0], False) + _ttm_tree_words(spec, tree[1], False)


def ttm_cost(spec, tokens, order="dp"):
    """Return the MACs and scratch of the TTM embedding for ``tokens`` lookups.

    Per token the selected slices ``F_k[:, t_k, :, :]`` (``r_{k-1} x e_k x r_k``) are chain-
    contracted over the ranks: ``order="left_to_right"`` joins them one by one (step k costs
    ``(e_1...e_k) r_{k-1} r_k``), ``order="dp"`` (default) takes the cheapest bracketing
    (interval DP, as for a matrix chain). Backward per token: the chain is recomputed (nothing
    but the token ids is kept between forward and backward), then reverse mode gives every
    slice's gradient (2x the chain), accumulated into the slice gradients (sparse: only the
    ``d`` selected slices of each token are written).

    Parameters
    ----------
    spec : TTMSpec
    tokens : int
        Lookups per step (B), at least 1.
    order : str
        ``"dp"`` or ``"left_to_right"``.

    Returns
    -------
    dict
        ``forward``, ``recompute``, ``backward`` (recompute + reverse mode), ``total`` MACs for
        all tokens; ``per_token_forward``; ``tree`` (bracketing of slice numbers);
        ``scratch_words`` (one token's products and their gradients, live at once in the
        backward); ``saved_words`` (token ids, one word each); ``dense_macs`` (0: a dense
        table lookup and its scatter-add multiply nothing).
    """
    _check_spec(spec, TTMSpec)
    _check_tokens(tokens)
    if order == "left_to_right":
        tree = 1
        for k in range(2, spec.d + 1):
            tree = (tree, k)
        e, r = spec.dim_modes, spec.ranks
        per = sum(prod(e[:k]) * r[k - 1] * r[k] for k in range(2, spec.d + 1))
    elif order == "dp":
        per, tree = _ttm_chain_dp(spec)
    else:
        raise ValueError(f"TTM order must be 'dp' or 'left_to_right', not {order!r}")
    fwd = per * tokens
    return {"order": order, "forward": fwd, "recompute": fwd, "backward": 3 * fwd,
            "total": 4 * fwd, "per_token_forward": per, "tree": tree,
            "scratch_words": 2 * _ttm_tree_words(spec, tree), "saved_words": tokens,
            "dense_macs": 0}


# --------------------------------------------------------------------------------------------
# whole model

def layer_tokens(cfg, name, batch=None):
    """Return B for TT layer ``name``: batch x seq_len, but only the batch for the pooler."""
    batch = cfg.batch if batch is None else batch
    return batch if name == "pooler" else batch * cfg.seq_len


def model_macs(cfg, batch=None):
    """Return the training-step MACs of a whole model, per order.

    Parameters
    ----------
    cfg : ModelConfig
    batch : int, optional
        Sentences per step (default ``cfg.batch``); B = batch x seq_len tokens.

    Returns
    -------
    dict
        ``layers``: list of ``(name, LayerPlan)``; ``other``: ``{name: MACs}`` of the parts that
        do not depend on the order (attention scores and context, heads; TTM embedding for the
        TT orders); ``totals``: ``{order: MACs}`` for ``bidirectional``, ``left_to_right``,
        ``dp_best``, ``best`` and ``dense`` (dense W and a dense embedding table); ``update``:
        ``{"tt": ..., "dense": ...}`` SGD update MACs (one per parameter of the matrices).
    """
    if not isinstance(cfg, ModelConfig):
        raise TypeError(f"cfg must be a ModelConfig, not {type(cfg).__name__}")
    if batch is not None:
        cfg = cfg.with_(batch=batch)
    B = cfg.tokens
    D, S = cfg.d_model, cfg.seq_len
    cache, layers = {}, []
    for name, spec in cfg.tt_layers():
        key = (spec, layer_tokens(cfg, name))
        if key not in cache:
            cache[key] = plan_layer(*key)
        layers.append((name, cache[key]))
    other = {}
    for i in range(cfg.n_layers):
        # QK^T and P.V, each batch*H*S*S*d_head = batch*S*S*D, with two gradients each.
        other[f"enc{i}.attention"] = 3 * 2 * cfg.batch * S * S * D
    other["intent_head"] = 3 * cfg.batch * D * cfg.n_intents
    if cfg.slot_head:
        other["slot_head"] = 3 * B * D * cfg.n_slots
    ttm = ttm_cost(cfg.embedding, B)
    common = sum(other.values())
    totals = {}
    for o in ORDER_NAMES:
        totals[o] = sum(p.orders[o].macs for _, p in layers) + common + ttm["total"]
    totals["best"] = sum(p.orders[p.best].macs for _, p in layers) + common + ttm["total"]
    totals["dense"] = sum(p.dense.macs for _, p in layers) + common + ttm["dense_macs"]
    update = {"tt": sum(p.update_macs for _, p in layers),
              "dense": sum(p.spec.n_in * p.spec.n_out for _, p in layers)}
    return {"config": cfg.name, "tokens": B, "layers": layers, "other": other,
            "embedding": ttm, "totals": totals, "update": update}
