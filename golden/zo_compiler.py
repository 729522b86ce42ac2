"""Compile one quantized zeroth-order (ZO) step into one accelerator program.

:func:`compile_zo_step` turns an int8 CNN (:class:`~ttrain.golden.qnn.QuantCNN`), a batch size
and :class:`~ttrain.golden.zo.ZOSettings` into a program of the shared instruction table whose
run, on the golden interpreter or the chip, leaves the parameters exactly as
:func:`ttrain.golden.zo.zo_step` does (``docs/quantized-training.md`` has the data flow). The
host writes, per step, the batch and ``Q + 1`` seed words (``Q`` queries' weight-perturbation
seeds, then the rounding seed, all :func:`~ttrain.golden.zo.stream_seed`; in place ``Q``
rounding seeds; NP adds ``Q`` seeds, random masks one) and, with random masks or a schedule,
the update constants (:meth:`CompiledZO.step_regions`); nothing else crosses the host link.

The program, over the regions of one :class:`~ttrain.golden.cnn_compiler.ForwardBuilder`:

1. the unperturbed forward pass and losses; ``L0`` (the mean loss) is copied aside;
2. per query (``Q = n``, or ``n`` per trainable layer when ``layerwise``; one LOOP per group,
   or unrolled, whichever program is shorter): a forward pass from the group's first
   trainable node in which each trainable node regenerates its perturbed parameters
   (``perturb8`` on the int8 weights where the pass unpacks them — or, with ``packed=False``,
   into one shared scratch copy — and ``perturb32`` on the int32 bias; seed = the query's seed
   word, index = the element's offset in the step's stream), then ``c_q = L_q - L0``.
   Perturbations are never stored; the original parameters are never changed by a query.
   Layerwise groups start later in the network: before a group, the unperturbed pass of the
   nodes between the previous group's start and this one restores their outputs.
   **Antithetic** queries (``settings.antithetic``) run each query's pass twice, the second
   with ``-sigma u`` (``perturb8n`` / ``perturb32n``: the same draws, the other sign), and
   keep ``c_q = (L+ - L-) * 0.5`` (per sample for NP: ``L+`` in ``zo.lp``), as ``zo.zo_step``;
3. per trainable tensor, in chunks of whole rows (``grad_chunk`` words): ``g = +0`` in one
   scratch buffer of that size (not a gradient copy of the model), a LOOP of ``raccum`` of
   ``c_q u_q`` for ``q = 0 .. Q-1`` in query order (the PRNG regenerates ``u_q``: the same
   FP32 sum, in the same order, as the golden's), ``mul`` by the per-channel constant
   :func:`~ttrain.golden.zo.wp_scale`, ``runif`` (stochastic rounding) and ``f2i`` (floor; or
   ``f2i`` nearest), and ``iadd`` saturating to 8 bits (weights: on the chunk unpacked with
   ``ext8``, written back with ``ins8``) or 32 bits (biases).

Compiled today: weight perturbation (``mode="wp"``), node perturbation and the mixed mode,
joint or layerwise, any subset of trainable layers, per-layer learning rates, nearest or
stochastic rounding, forward or antithetic differences, random element masks (``rmask``),
top-k channel masks with node perturbation, the in-place variant (each query updates at once,
its own rounding seed), top-k masks with weight perturbation, NP of grouped and depthwise
convolutions (their local gradients batched over the groups). Refused with a clear error:
sigma above 255, a random mask of density 1 and a learning-rate schedule (compile
``settings.at_step(k, total)``; the steppers rewrite the update constants per step).
"""

from dataclasses import dataclass, replace

import numpy as np

from . import prng, zo
from .cnn_compiler import (UNPACK_WORDS, CompiledCNN, ForwardBuilder, _Alloc, _bounds,
                           _rows_split, unpack_int8)
from .contract import Descriptor, View
from .isa import Contract, Elementwise, End, EndLoop, Loop, MAX_DIM, Random, Reduce, f32_bits

__all__ = ["CompiledZO", "compile_zo_step", "zo_memory", "bp_memory_estimate", "figures_model",
           "InterpretedZO", "ZO_MEMORY_CLASSES", "GRAD_CHUNK"]


@dataclass
class CompiledZO(CompiledCNN):
    """A compiled ZO step: the program, its model, batch and settings, and host helpers."""
    settings: zo.ZOSettings = None
    queries: int = 0
    tensors: tuple = ()          # (node index, "w"|"b", stream offset, group index)
    group_dims: tuple = ()       # WP dim factor of each group
    phase_ends: dict = None      # "forward" / "queries" -> index of the phase's last + 1
    np_nodes: tuple = ()         # node-perturbed node indices
    np_dims: dict = None         # NP node -> its group's NP dim factor
    groups: tuple = ()           # ((WP nodes), (NP nodes)) of each perturbation group
    step: int = 0                # the step whose seeds (and mask-dependent constants) are set

    def dims_at(self, step):
        """``(WP dim factor per group, NP dim factor per node)`` of step ``step``: fixed, or
        with random element masks counted on that step's masks (``zo.step_masks``: the kept
        entries; host data, rewritten with the seeds each step)."""
        s = self.settings
        if s.sparse != "random":
            return self.group_dims, self.np_dims
        wp_nodes, np_nodes = zo._plan(self.q, s)
        tensors, act_masks, _, _ = zo.step_masks(self.q, s, step, wp_nodes, np_nodes)
        kept = {(i, kind): int(mask.sum()) for i, kind, _, mask in tensors}
        n = s.queries
        gd = tuple(zo._dim_scale(n, sum(kept[(i, k)] for i in gw for k in "wb"))
                   for gw, _ in self.groups)
        nd = {}
        for _, gn in self.groups:
            d = sum(int(act_masks[i].sum()) for i in gn)
            for i in gn:
                nd[i] = zo._dim_scale(n * self.batch if s.np_dim == "batch" else n, d)
        return gd, nd

    def step_regions(self):
        """The regions the host writes before each step: the batch and the seeds, and the
        update constants when they change per step (a schedule's rate, random masks' dims)."""
        out = ["in.x", "in.onehot", "zo.seeds"]
        s = self.settings
        if s.schedule != "constant" or s.sparse == "random":
            keep = ("kw", "kb") if s.sparse != "random" else ("k", "kw", "kb")
            out += [n for n in self.memory_map if n.startswith("zo.k.") or (
                n.startswith("zo.np.") and n.rpartition(".")[2] in keep)]
        return out

    def initial_image(self, x, labels, step=0):
        """The memory image of step ``step``: parameters, constants, batch and seeds."""
        image = super().initial_image(x, labels)
        self.step = step
        self.set_constants(image)
        self.set_seeds(image, step)
        return image

    def set_constants(self, image):
        """The update constants (per-channel ``k``) and the zero word."""
        self._put(image, "const.zero", np.zeros(1, np.uint32))
        group_dims, np_dims = self.dims_at(self.step)
        if self.settings.sparse == "random":
            self._put(image, "const.thr",
                      np.array([prng.threshold_of(self.settings.density)], np.uint32))
        for i, kind, _, gi in self.tensors:
            k = zo.wp_scale(self.q, self.settings, i, kind, group_dims[gi])
            self._put(image, f"zo.k.{self.q.cfg.nodes[i].name}.{kind}",
                      np.asarray(k, np.float32).view(np.uint32))
        if self.np_nodes:
            from .cnn_compiler import _pack_rq
            self._put(image, "const.rq1", np.atleast_1d(_pack_rq(1, 0)))
        if "const.abs" in self.memory_map:
            self._put(image, "const.abs", np.array([0x7FFFFFFF, 0x3F800000], np.uint32))
        s = self.settings
        for i in sorted({t[0] for t in self.tensors}) if s.sparse == "topk" else ():
            nm, C = self.q.cfg.nodes[i].name, self.q.cfg.nodes[i].shape[2]
            self._put(image, f"zo.tk.{nm}.keep",
                      np.array([topk_count(s, C)], np.float32).view(np.uint32))
            self._put(image, f"zo.tk.{nm}.tri", np.where(np.tril(np.ones((C, C), bool), -1),
                                                         np.uint32(0xFFFFFFFF), np.uint32(0)))
        for i in self.np_nodes:
            for name, words in np_constants(self.q, self.settings, i, np_dims[i],
                                            self.batch).items():
                words = np.asarray(words, np.float32)
                if name == "tri":                      # a mask: all ones below the diagonal
                    words = np.where(words != 0, np.uint32(0xFFFFFFFF), np.uint32(0))
                self._put(image, f"zo.np.{self.q.cfg.nodes[i].name}.{name}",
                          words.view(np.uint32) if words.dtype == np.float32 else words)

    def seeds(self, step):
        """The ``Q + 1`` seed words of step ``step`` (the host computes them)."""
        s = self.settings
        words = [zo.stream_seed(s.seed, step, qi, zo._STREAM_WP) for qi in range(self.queries)]
        if s.inplace:                  # one rounding seed per query (each updates at once)
            words += [zo.stream_seed(s.seed, step, qi, zo._STREAM_ROUND)
                      for qi in range(self.queries)]
        else:
            words.append(zo.stream_seed(s.seed, step, self.queries, zo._STREAM_ROUND))
        if self.np_nodes:
            words += [zo.stream_seed(s.seed, step, qi, zo._STREAM_NP)
                      for qi in range(self.queries)]
        if s.sparse == "random":                         # the step's element masks
            words.append(zo.stream_seed(s.seed, step, 0, zo._STREAM_MASK))
        return np.array(words, np.uint32)

    def set_seeds(self, image, step):
        """Write step ``step``'s seed words (random element masks: and its constants)."""
        self._put(image, "zo.seeds", self.seeds(step))
        self.step = step
        if self.settings.sparse == "random":
            self.set_constants(image)

    def set_step(self, image, x, labels, step):
        """Write step ``step``'s batch and seeds (the parameters stay as the last step left
        them)."""
        self.set_batch(image, x, labels)
        self.set_seeds(image, step)

    def params(self, image):
        """The int8 model with the image's parameters (a copy of the compiled model's scales)."""
        q = self.q.copy()
        for i, n in enumerate(q.cfg.nodes):
            if n.kind == "conv":
                for kind, store in (("w", q.w), ("b", q.b)):
                    shape = store[n.name].shape
                    words = self._get(image, f"{n.name}.{kind}")
                    if kind == "w" and self.packed:
                        store[n.name] = unpack_int8(words, int(np.prod(shape))).reshape(shape)
                        continue
                    w = words.astype(np.int64)
                    store[n.name] = (w - ((w & 0x80000000) << 1)).reshape(shape)
        return q

    def loss(self, image):
        """``L0``, the unperturbed batch's mean loss (FP32)."""
        return self._get(image, "zo.L0").view(np.float32)[0]


def np_constants(q, s, i, dim, batch):
    """FP32 constants of node ``i``'s NP update (``golden.zo.np_scales``, the chip holds them
    as data): ``k`` (per output channel) scales the accumulated output
    gradient, ``kw`` / ``kb`` (per channel) the local weight and bias gradients; ``lo`` /
    ``hi`` bound the straight-through mask on the stored outputs ``y - z`` (live where
    ``lo < y - z < hi``)."""
    node = q.cfg.nodes[i]
    k, kw, kb = zo.np_scales(q, s, i, dim, batch)
    z = int(q.zp[i])
    lo = (z if node.relu else -128) - z
    C = node.shape[2]
    out = {"k": np.broadcast_to(k, (C,)), "kw": np.broadcast_to(kw, (C,)),
           "kb": np.broadcast_to(kb, (C,)),
           "bounds": np.array([lo, 127 - z], np.float32)}
    if s.sparse == "topk":       # golden.zo._channel_topk: keep the top ceil(density C)
        out["keep"] = np.array([topk_count(s, C)], np.float32)
        out["tri"] = np.tril(np.ones((C, C), bool), -1).astype(np.float32)
    return out


def topk_count(s, C):
    """Channels kept by the top-k mask (``golden.zo._channel_topk``)."""
    return max(1, int(np.ceil(s.density * C)))


def _check_settings(s):
    why = []
    if s.sparse == "random" and s.density >= 1:
        why.append("a random mask of density 1 (it keeps every entry: use sparse='none')")
    if s.sigma_b > 255 or s.sigma_w > 255 or s.sigma_a > 255:
        why.append("sigma above 255 (perturb8/32 hold sigma in 8 bits)")
    if s.schedule != "constant":
        why.append(f"a learning-rate schedule ({s.schedule!r}: the per-step rate is host data, "
                   "the update constants of zo.wp_scale; compile the step with "
                   "settings.at_step(k, total) and rewrite the constants per step, as "
                   "InterpretedZO and ChipZO do)")
    if why:
        raise ValueError("the ZO step compiler does not compile " + "; ".join(why) +
                         "; train it with the golden rule (ttrain train --rule zo)")


#: Words of the update's FP32 estimate buffer: tensors are updated in chunks of whole rows of
#: at most this many words (at least one row), so the buffer does not grow with the model.
GRAD_CHUNK = 4096


def _chunks(rows, cols, limit=MAX_DIM, align=1):
    """Row chunks of at most ``limit`` words (at least one row); with ``align``, each chunk's
    first element is a multiple of ``align`` (whole packed words)."""
    step = max(1, min(MAX_DIM, limit // cols))
    while step > 1 and (step * cols) % align:
        step -= 1
    if (step * cols) % align and rows > step:
        raise ValueError(f"rows of {cols} elements cannot be chunked on {align}-element "
                         "boundaries")
    for lo in range(0, rows, step):
        yield lo, min(step, rows - lo)


def compile_zo_step(q, batch, settings, *, query_loop=None, packed=True, grad_chunk=GRAD_CHUNK,
                    unpack_words=UNPACK_WORDS):
    """Compile one ZO step of ``q`` on ``batch`` images with ``settings`` (see the module).

    ``query_loop``: run each group's queries as one LOOP (the passes' per-sample convolution
    loops unrolled: loops do not nest) or unrolled; default the shorter program.
    ``packed``: int8 weights stored four to a word (default), unpacked (``ext8``) into one
    buffer per kernel offset or channel block before their contraction, perturbed there, and
    written back by the update with ``ins8``; ``False``: one weight per word.
    ``grad_chunk`` / ``unpack_words``: words of the estimate chunk and of the unpack buffer
    (smaller: less writable memory, more instructions).
    """
    for name, v in (("grad_chunk", grad_chunk), ("unpack_words", unpack_words)):
        if isinstance(v, bool) or not isinstance(v, int) or not 4 <= v <= MAX_DIM:
            raise ValueError(f"{name} must be an int in 4..{MAX_DIM}, not {v!r}")
    s = settings
    if not isinstance(s, zo.ZOSettings):
        raise TypeError(f"settings must be a ZOSettings, not {type(s).__name__}")
    _check_settings(s)
    wp_nodes, np_nodes = zo._plan(q, s)
    nodes = q.cfg.nodes
    groups = zo._groups(s, wp_nodes, np_nodes)              # [(WP nodes, NP nodes)]
    starts = {min(gw + gn) for gw, gn in groups}
    # outputs kept for the NP update (the local gradient reads node i's input and output)
    topk = s.sparse == "topk"
    # ... and for a WP node's top-k channel mask (computed from its unperturbed output)
    share = starts | {j for i in np_nodes for j in (i, i + 1)} | \
        ({i + 1 for i in wp_nodes} if topk else set())
    al = _Alloc()
    fb = ForwardBuilder(q, batch, al, share=share, packed=packed, unpack_words=unpack_words)
    n = s.queries
    Q = n * len(groups)
    N = batch

    tensors, offset, size_of = [], 0, {}
    group_of = {i: gi for gi, (gw, gn) in enumerate(groups) for i in gw + gn}
    for i in wp_nodes:
        nd = nodes[i]
        for kind, size in (("w", int(np.prod(nd.weight_shape))), ("b", nd.shape[2])):
            tensors.append((i, kind, offset, group_of[i]))
            size_of[(i, kind)] = size
            offset += size
    def kept(i, kind):         # entries a top-k mask keeps: whole output channels
        C = nodes[i].shape[2]
        return size_of[(i, kind)] // C * topk_count(s, C) if topk else size_of[(i, kind)]

    dims = tuple(zo._dim_scale(n, sum(kept(i, k) for i in gw for k in "wb"))
                 for gw, _ in groups)
    # NP regions of the PRNG stream: sample b's entries of node i start at b d_np + base[i]
    np_base, d_np = {}, 0
    for i in np_nodes:
        np_base[i] = d_np
        d_np += int(np.prod(nodes[i].shape))
    np_dims = {}

    def np_count(i):
        H, W, C = nodes[i].shape
        return H * W * (topk_count(s, C) if topk else C)

    for gw, gn in groups:
        d = sum(np_count(i) for i in gn)
        for i in gn:
            np_dims[i] = zo._dim_scale(n * N if s.np_dim == "batch" else n, d)
    for i in np_nodes:             # the NP updates use the WP update's chunks and constants
        nd = nodes[i]
        for kind, size in (("w", int(np.prod(nd.weight_shape))), ("b", nd.shape[2])):
            size_of[(i, kind)] = size

    rnd = s.sparse == "random"
    R = Q if s.inplace else 1            # rounding seeds: one per query in place, else one
    seeds = al.region("zo.seeds", "act", Q + R + (Q if np_nodes else 0) + rnd)
    np_seeds = seeds + Q + R
    # random element masks: one seed word per step (after the others), the threshold word,
    # and two buffers of the longest masked range: the mask and the masked perturbation
    mseed = View("act", seeds + Q + R + (Q if np_nodes else 0), 0, 0)
    zero = al.region("const.zero", "param", 1)
    rq1 = al.region("const.rq1", "param", 1) if np_nodes else None
    l0 = al.region("zo.L0", "scratch", 1)
    coef = al.region("zo.coef", "scratch", Q)
    wq = None if packed or not wp_nodes else al.region(
        "zo.wq", "scratch", max(size_of[(i, "w")] for i in wp_nodes))
    bq = al.region("zo.bq", "scratch", max(size_of[(i, "b")] for i in wp_nodes)) \
        if wp_nodes else None
    gwords = max(min(size, max(grad_chunk // nodes[i].shape[2], 1) * nodes[i].shape[2])
                 for (i, _), size in size_of.items())
    gbuf = al.region("zo.g", "scratch", gwords)
    # masked perturbations (random masks; top-k masks on WP layers): sigma u into zo.rpert,
    # a random mask into zo.rmask (regenerated per range), both of the longest masked range
    if rnd or (topk and wp_nodes):
        ranges = [nodes[i].shape[2] for i in wp_nodes]                     # the biases
        if wp_nodes:                  # the weights: unpack units or unpacked row chunks
            ranges.append(al.map["wunpack"].size if packed else max(
                cnt * nodes[i].shape[2] for i in wp_nodes
                for _, cnt in _chunks(size_of[(i, "w")] // nodes[i].shape[2],
                                      nodes[i].shape[2])))
        if rnd:                       # the estimate chunks and the NP outputs
            ranges += [gwords] + [int(np.prod(nodes[i].shape)) for i in np_nodes]
            thr = al.region("const.thr", "param", 1)
            rm = al.region("zo.rmask", "scratch", max(ranges))
        rt = al.region("zo.rpert", "scratch", max(ranges))
    kreg = {(i, kind): al.region(f"zo.k.{nodes[i].name}.{kind}", "param", nodes[i].shape[2])
            for i, kind, _, _ in tensors}
    offs = {(i, kind): off for i, kind, off, _ in tensors}
    npr = {}
    if np_nodes:
        l0v = al.region("zo.l0", "scratch", N)
        cb = al.region("zo.cb", "scratch", N)
        lp = al.region("zo.lp", "scratch", N) if s.antithetic else None
        for i in np_nodes:
            nm, C = nodes[i].name, nodes[i].shape[2]
            npr[i] = {"gy": al.region(f"zo.gy.{nm}", "scratch", N * int(np.prod(nodes[i].shape))),
                      **{k: al.region(f"zo.np.{nm}.{k}", "param", C) for k in ("k", "kw", "kb")},
                      "bounds": al.region(f"zo.np.{nm}.bounds", "param", 2)}
            if topk:
                npr[i].update(keep=al.region(f"zo.np.{nm}.keep", "param", 1),
                              tri=al.region(f"zo.np.{nm}.tri", "param", C * C),
                              mask=al.region(f"zo.np.{nm}.mask", "scratch", C))
            kreg[(i, "w")], kreg[(i, "b")] = npr[i]["kw"], npr[i]["kb"]
            offs[(i, "w")] = offset + 2 * i * (1 << 20)
            offs[(i, "b")] = offset + 2 * i * (1 << 20) + (1 << 20)
        tmp_words = max(N * int(np.prod(nodes[i].shape)) for i in np_nodes)
        npt = al.region("zo.np.tmp", "scratch", tmp_words)
        npm = al.region("zo.np.mask", "scratch", tmp_words)
        xf = al.region("zo.np.xf", "scratch", max(
            N * int(np.prod(fb.shapes[nodes[i].inputs[0]])) for i in np_nodes))
        dwb = al.region("zo.np.dw", "scratch", max(size_of[(i, "w")] for i in np_nodes))
        dbb = al.region("zo.np.db", "scratch", max(nodes[i].shape[2] for i in np_nodes))
        if topk:
            cabs = al.region("const.abs", "param", 2)          # 0x7FFFFFFF, 1.0
            cmax = max(nodes[i].shape[2] for i in np_nodes)
            rk1 = al.region("zo.np.rank1", "scratch", cmax * cmax)
            rk2 = al.region("zo.np.rank2", "scratch", cmax * cmax)
    tkw = {}                   # WP nodes' top-k channel masks (constants as NP's)
    if topk and wp_nodes:
        for i in wp_nodes:
            nm, C = nodes[i].name, nodes[i].shape[2]
            tkw[i] = {"keep": al.region(f"zo.tk.{nm}.keep", "param", 1),
                      "tri": al.region(f"zo.tk.{nm}.tri", "param", C * C),
                      "mask": al.region(f"zo.tk.{nm}.mask", "scratch", C)}
        tk_words = max(N * int(np.prod(nodes[i].shape)) for i in wp_nodes)
        if not np_nodes or tk_words > tmp_words:
            npt = al.region("zo.tk.tmp", "scratch", tk_words)
        if not np_nodes:
            cabs = al.region("const.abs", "param", 2)
        cmax = max(nodes[i].shape[2] for i in wp_nodes + np_nodes)
        if not np_nodes or cmax > max(nodes[i].shape[2] for i in np_nodes):
            rk1 = al.region("zo.tk.rank1", "scratch", cmax * cmax)
            rk2 = al.region("zo.tk.rank2", "scratch", cmax * cmax)
    lmean = fb.ce["loss.mean"]
    lvec = fb.ce["loss"]
    p8, p32 = ("perturb8", "perturb8n"), ("perturb32", "perturb32n")   # by neg
    zero_v = View("param", zero, 0, 0)

    def tk_view(i):
        """WP node ``i``'s top-k channel mask broadcast over rows (None without top-k)."""
        return View("scratch", tkw[i]["mask"], 0, 1) if topk else None

    def mask(rows, cols, imm):
        """The step's random element mask of stream indices ``imm ..`` into ``zo.rmask``."""
        return Random("rmask", rows, cols, View("scratch", rm, cols, 1),
                      View("param", thr, 0, 0), mseed, imm=imm)

    def masked(rows, cols, d, a, seed, imm, sigma, neg, bits, step, with_mask=True,
               mview=None):
        """``d = sat(a + sigma u m)`` (``zo.zo_step``'s masked direction): the mask (unless
        ``zo.rmask`` holds it already, or ``mview``: a top-k channel mask), ``sigma u`` from
        +0 into ``zo.rpert``, ``and`` the mask, the saturating ``iadd``."""
        t = View("scratch", rt, cols, 1)
        if mview is not None:
            with_mask = False
        return ([mask(rows, cols, imm)] if with_mask else []) + [
                Random(p32[neg], rows, cols, t, zero_v, seed, imm=imm, sigma=sigma,
                       step=(0, 0, step)),
                Elementwise("bitop", rows, cols, t, t,
                            View("scratch", rm, cols, 1) if mview is None else mview, imm=0),
                Elementwise("iadd", rows, cols, d, a, t, imm=bits)]

    def perturb(i, qi, step, neg):
        """Regenerate node ``i``'s perturbed weights and bias for query ``qi`` (the seed
        view stepped by ``step``: the query LOOP's select 1; ``neg``: the antithetic pass's
        ``-sigma u``)."""
        nd, r = nodes[i], fb.regions[i]
        C = nd.shape[2]
        seed = View("act", seeds + qi, 0, 0)
        st = (0, 0, step)
        out = []
        for lo, cnt in ([] if packed else _chunks(size_of[(i, "w")] // C, C)):
            d, a = View("scratch", wq + lo * C, C, 1), View("param", r["w"] + lo * C, C, 1)
            imm = offs[(i, "w")] + lo * C
            out += masked(cnt, C, d, a, seed, imm, s.sigma_w, neg, 8, step,
                          mview=tk_view(i)) if rnd or topk else [
                Random(p8[neg], cnt, C, d, a, seed, imm=imm, sigma=s.sigma_w, step=st)]
        d, a = View("scratch", bq, C, 1), View("param", r["b"], C, 1)
        out += masked(1, C, d, a, seed, offs[(i, "b")], s.sigma_b, neg, 32, step,
                      mview=tk_view(i)) if rnd or topk else [
            Random(p32[neg], 1, C, d, a, seed, imm=offs[(i, "b")], sigma=s.sigma_b, step=st)]
        return out

    def unit_perturb(g, qi, step, neg):
        """Packed weights: perturb each unpacked unit of a node of ``g`` in the buffer."""
        seed = View("act", seeds + qi, 0, 0)

        def hook(i, e0, n_el, buf):
            if i not in g:
                return []
            v = View("scratch", buf, 0, 1)
            if rnd:
                return masked(1, n_el, v, v, seed, offs[(i, "w")] + e0, s.sigma_w, neg, 8, step)
            if topk:               # units are whole rows of C (cnn_compiler._units)
                C = nodes[i].shape[2]
                v = View("scratch", buf, C, 1)
                return masked(n_el // C, C, v, v, seed, offs[(i, "w")] + e0, s.sigma_w, neg, 8,
                              step, mview=tk_view(i))
            return [Random(p8[neg], 1, n_el, v, v, seed, imm=offs[(i, "w")] + e0,
                           sigma=s.sigma_w, step=(0, 0, step))]
        return hook

    def node_perturb(i, qi, step, neg):
        """NP: node ``i``'s stored outputs ``y - z`` + sigma_a u, then clamped so that ``y``
        saturates to int8 (``perturb32`` per sample: sample b's stream indices start at
        ``b d_np + base``, then one ``requant`` clamp)."""
        nd, y = nodes[i], fb.regions[i]["y"]
        per = int(np.prod(nd.shape))
        z = int(q.zp[i])
        seed = View("act", np_seeds + qi, 0, 0)
        if rnd:                    # the node's mask (one per step), then each sample's range
            out = [mask(1, per, offset + np_base[i])] + [x for b in range(N) for x in masked(
                1, per, View("act", y + b * per, 0, 1), View("act", y + b * per, 0, 1), seed,
                b * d_np + np_base[i], s.sigma_a, neg, 32, step, with_mask=False)]
        else:
            out = [Random(p32[neg], 1, per, View("act", y + b * per, 0, 1),
                          View("act", y + b * per, 0, 1), seed, imm=b * d_np + np_base[i],
                          sigma=s.sigma_a, step=(0, 0, step)) for b in range(N)]
        C = nd.shape[2]
        if topk:                   # keep the unperturbed outputs of the masked-off channels
            out = [Elementwise("copy", cnt, C, View("scratch", npt + lo * C, C, 1),
                               View("act", y + lo * C, C, 1))
                   for lo, cnt in _chunks(N * per // C, C)] + out
        for lo, cnt in _chunks(N * per // C, C):
            yv = View("act", y + lo * C, C, 1)
            out.append(Elementwise("requant", cnt, C, yv, yv, View("param", rq1, 0, 0),
                                   _bounds(-128 - z, 127 - z)))
            if topk:
                m = View("scratch", npr[i]["mask"], 0, 1)
                tv = View("scratch", npm + lo * C, C, 1)
                out += [Elementwise("bitop", cnt, C, tv, View("scratch", npt + lo * C, C, 1), m,
                                    imm=1),
                        Elementwise("bitop", cnt, C, yv, yv, m, imm=0),
                        Elementwise("bitop", cnt, C, yv, yv, tv, imm=2)]
        return out

    def node_accumulate(gn, qi, step):
        """NP: ``c_b = L_q[b] - L0[b]`` (antithetic: ``(L+[b] - L-[b]) * 0.5``, ``L+`` kept
        in ``zo.lp``), then ``gy += c_b u`` per sample (``raccum``)."""
        cbv = View("scratch", cb, 0, 1)
        if s.antithetic:
            out = [Elementwise("sub", 1, N, cbv, View("scratch", lp, 0, 1),
                               View("act", lvec, 0, 1)),
                   Elementwise("scale", 1, N, cbv, cbv, imm=f32_bits(0.5))]
        else:
            out = [Elementwise("sub", 1, N, cbv, View("act", lvec, 0, 1),
                               View("scratch", l0v, 0, 1))]
        seed = View("act", np_seeds + qi, 0, 0)
        for i in gn:
            per = int(np.prod(nodes[i].shape))
            gy = npr[i]["gy"]
            out += [Random("raccum", 1, per, View("scratch", gy + b * per, 0, 1),
                           View("scratch", cb + b, 0, 0), seed, imm=b * d_np + np_base[i],
                           step=(0, 0, step)) for b in range(N)]
            if rnd:                # masked-off entries stay +0 (golden adds c * 0 to +0)
                out.append(mask(1, per, offset + np_base[i]))
                out += [Elementwise("bitop", 1, per, View("scratch", gy + b * per, 0, 1),
                                    View("scratch", gy + b * per, 0, 1),
                                    View("scratch", rm, 0, 1), imm=0) for b in range(N)]
            if topk:               # masked-off entries stay +0, as golden's (c * 0 added to +0)
                C = nodes[i].shape[2]
                out += [Elementwise("bitop", cnt, C, View("scratch", gy + lo * C, C, 1),
                                    View("scratch", gy + lo * C, C, 1),
                                    View("scratch", npr[i]["mask"], 0, 1), imm=0)
                        for lo, cnt in _chunks(N * per // C, C)]
        return out

    def estimate_mask(i, cnt, C, gv, imm):
        """Masked-off estimate entries to +0, as golden's sum of ``c * 0`` from +0."""
        if rnd:
            return [mask(cnt, C, imm),
                    Elementwise("bitop", cnt, C, gv, gv, View("scratch", rm, C, 1), imm=0)]
        if topk:
            return [Elementwise("bitop", cnt, C, gv, gv, tk_view(i), imm=0)]
        return []

    def inplace_fill(i, off, C, qi, st):
        """The in-place variant's estimate of one query: ``g = c_q u_q`` (from +0; golden's
        ``fp32_mul(c, u)``, the same integer step)."""
        def fill(lo, cnt, gv):
            out = [Elementwise("copy", cnt, C, gv, View("param", zero, 0, 0)),
                   Random("raccum", cnt, C, gv, View("scratch", coef + qi, 0, 0),
                          View("act", seeds + qi, 0, 0), imm=off + lo * C, step=(0, st, st))]
            out += estimate_mask(i, cnt, C, gv, off + lo * C)
            return out
        return fill

    def queries(gw, gn, gi, start, looped):
        """The ``n`` query passes of group ``(gw, gn)``: one LOOP body (the conv sample loops
        unrolled) or ``n`` unrolled passes."""
        src = {i: ("scratch", wq, "scratch", bq) for i in gw}
        st = 1 if looped else 0

        def one_pass(qi, neg):
            return fb.emit(start, sources=src, before={i: perturb(i, qi, st, neg) for i in gw},
                           after={i: node_perturb(i, qi, st, neg) for i in gn},
                           sample_loop=not looped, unit_hook=unit_perturb(gw, qi, st, neg))

        def one(qi):
            cq, lm = View("scratch", coef + qi, 1, 1), View("act", lmean, 1, 1)
            body = one_pass(qi, False)
            if not (s.antithetic or s.inplace):
                body.append(Elementwise("sub", 1, 1, cq, lm, View("scratch", l0, 1, 1),
                                        step=(st, 0, 0)))
            else:       # c_q = (L+ - L-) * 0.5: L+ kept in c_q (and per sample in zo.lp)
                # (the in-place variant is antithetic by definition, zo.zo_step)
                body.append(Elementwise("copy", 1, 1, cq, lm, step=(st, 0, 0)))
                if gn:
                    body.append(Elementwise("copy", 1, N, View("scratch", lp, 0, 1),
                                            View("act", lvec, 0, 1)))
                body += one_pass(qi, True)
                body += [Elementwise("sub", 1, 1, cq, cq, lm, step=(st, st, 0)),
                         Elementwise("scale", 1, 1, cq, cq, imm=f32_bits(0.5),
                                     step=(st, st, 0))]
            if s.inplace:      # this query's update at once: g = c_q u_q, its own rounding seed
                for i, kind, off, _ in tensors:
                    body += update(i, kind, inplace_fill(i, off, nodes[i].shape[2], qi, st),
                                   rseed=View("act", seeds + Q + qi, 0, 0), rstep=st)
            return body + (node_accumulate(gn, qi, st) if gn else [])

        if looped:
            return [Loop(n, (1, 0, 0)), *one(gi * n), EndLoop()]
        return [x for k in range(n) for x in one(gi * n + k)]

    stochastic = s.rounding == "stochastic"
    rseed = View("act", seeds + Q, 0, 0)

    def update(i, kind, fill, rseed=rseed, rstep=0):
        """Add the integer step of ``i``'s ``kind`` in row chunks: ``fill(lo, cnt, gv)`` puts
        the chunk's FP32 estimate in ``gv``; then ``mul`` by the constants, the rounding and
        the saturating add (packed weights: unpack, add, insert the bytes back)."""
        out = []
        C = nodes[i].shape[2]
        rows = size_of[(i, kind)] // C
        param = fb.regions[i][kind]
        packed_w = packed and kind == "w"
        off = offs[(i, kind)]
        limit = min(grad_chunk, al.map["wunpack"].size) if packed_w else grad_chunk
        for lo, cnt in _chunks(rows, C, limit, align=4 if packed_w else 1):
            gv = View("scratch", gbuf, C, 1)
            pv = View("param", param + lo * C, C, 1)
            out += fill(lo, cnt, gv)
            out.append(Elementwise("mul", cnt, C, gv, gv, View("param", kreg[(i, kind)], 0, 1)))
            if stochastic:
                out.append(Random("runif", cnt, C, gv, gv, rseed, imm=off + lo * C,
                                  step=(0, 0, rstep)))
            out.append(Elementwise("f2i", cnt, C, gv, gv, imm=1 if stochastic else 0))
            if not packed_w:
                out.append(Elementwise("iadd", cnt, C, pv, pv, gv, imm=8 if kind == "w" else 32))
                continue
            # packed weights: unpack the chunk, add the steps saturating, insert the bytes back
            e0, n_el = lo * C, cnt * C
            out += fb.unpack(i, e0, n_el)
            buf = al.map["wunpack"].base
            out.append(Elementwise("iadd", cnt, C, View("scratch", buf, C, 1),
                                   View("scratch", buf, C, 1), gv, imm=8))
            words, w0 = -(-n_el // 4), param + e0 // 4
            for k in range(4):
                out.append(Elementwise("ins8", 1, words, View("param", w0, 0, 1),
                                       View("param", w0, 0, 1),
                                       View("scratch", buf + k, 0, 4), imm=k))
        return out

    ins = fb.emit()
    ins.append(Elementwise("copy", 1, 1, View("scratch", l0, 1, 1), View("act", lmean, 1, 1)))
    for i in tkw:              # WP top-k: each node's channel mask from its unperturbed output
        ins += _topk_mask(fb, q, N, i, tkw[i], npt, cabs, rk1, rk2)
    if np_nodes:
        ins.append(Elementwise("copy", 1, N, View("scratch", l0v, 0, 1), View("act", lvec, 0, 1)))
        if topk:
            for i in np_nodes:
                ins += _topk_mask(fb, q, N, i, npr[i], npt, cabs, rk1, rk2)
        for i in np_nodes:
            ins += _fill_chunks(npr[i]["gy"], N * int(np.prod(nodes[i].shape)), zero)
    ends = {"forward": len(ins)}
    done = len(nodes)          # node outputs from here on hold a perturbed pass
    for gi, (gw, gn) in enumerate(groups):
        start = min(gw + gn)
        if done < start:       # restore the unperturbed outputs up to this group's start
            ins += fb.emit(done, stop=start)
        if query_loop is None:
            a, b = queries(gw, gn, gi, start, True), queries(gw, gn, gi, start, False)
            ins += a if len(a) <= len(b) else b
        else:
            ins += queries(gw, gn, gi, start, bool(query_loop) and n > 1)
        done = start
    if np_nodes and done < len(nodes):   # the NP update reads the unperturbed outputs
        ins += fb.emit(done)

    ends["queries"] = len(ins)
    for i, kind, off, gi in ([] if s.inplace else tensors):
        C = nodes[i].shape[2]

        def wp_fill(lo, cnt, gv, off=off, gi=gi, C=C, i=i):
            out = [Elementwise("copy", cnt, C, gv, View("param", zero, 0, 0))]
            acc = Random("raccum", cnt, C, gv, View("scratch", coef + gi * n, 0, 0),
                         View("act", seeds + gi * n, 0, 0), imm=off + lo * C)
            if n > 1:                 # g += c_q u_q, q = 0 .. n-1 in order
                out += [Loop(n, (1, 0, 0)), replace(acc, step=(0, 1, 1)), EndLoop()]
            else:
                out.append(acc)
            return out + estimate_mask(i, cnt, C, gv, off + lo * C)
        ins += update(i, kind, wp_fill)
    for i in np_nodes:
        ins += _np_local_grads(fb, q, N, i, npr[i], npt, npm, xf, dwb, dbb)
        C = nodes[i].shape[2]
        for kind, src in (("w", dwb), ("b", dbb)):
            def np_fill(lo, cnt, gv, src=src, C=C):
                return [Elementwise("copy", cnt, C, gv, View("scratch", src + lo * C, C, 1))]
            ins += update(i, kind, np_fill)
    ins.append(End())
    return CompiledZO(al.program(ins), q, batch, packed=bool(packed), settings=s, queries=Q,
                      tensors=tuple(tensors), group_dims=dims, phase_ends=ends,
                      np_nodes=tuple(np_nodes), np_dims=np_dims,
                      groups=tuple((tuple(gw), tuple(gn)) for gw, gn in groups))


def _topk_mask(fb, q, N, i, r, npt, cabs, rk1, rk2):
    """Node ``i``'s top-k channel mask from the unperturbed outputs
    (``golden.zo._channel_topk``): the per-channel sums of ``|y - z|`` (exact FP32 integer
    sums), each channel's rank ``#{c': a[c'] > a[c]} + #{c' < c: a[c'] == a[c]}`` (the stable
    descending order) from a C x C ``fcmp`` matrix, then ``rank < keep``: all ones or 0 per
    channel."""
    nd = q.cfg.nodes[i]
    H, W, C = nd.shape
    P = N * H * W
    y = fb.regions[i]["y"]
    out = []
    for lo, cnt in _rows_split(P):
        v = View("scratch", npt + lo * C, C, 1)
        out += [Elementwise("i2f", cnt, C, v, View("act", y + lo * C, C, 1)),
                Elementwise("bitop", cnt, C, v, v, View("param", cabs, 0, 0), imm=0)]
    mask = r["mask"]
    for lo, cnt in _rows_split(P):            # a[c] = sum over every position (exact)
        out.append(Reduce("sum", C, cnt, View("scratch", mask, 1, 0),
                          View("scratch", npt + lo * C, 1, C), accumulate=lo > 0))
    a_row, a_col = View("scratch", mask, 1, 0), View("scratch", mask, 0, 1)
    m1, m2 = View("scratch", rk1, C, 1), View("scratch", rk2, C, 1)
    out += [Elementwise("fcmp", C, C, m1, a_row, a_col, imm=0),           # a[c] < a[c']
            Elementwise("fcmp", C, C, m2, a_row, a_col, imm=2),           # a[c] == a[c']
            Elementwise("bitop", C, C, m2, m2, View("param", r["tri"], C, 1), imm=0),
            Elementwise("bitop", C, C, m1, m1, m2, imm=2),
            Elementwise("bitop", C, C, m1, m1, View("param", cabs + 1, 0, 0), imm=0),
            Reduce("sum", C, C, View("scratch", mask, 1, 0), m1),
            Elementwise("fcmp", 1, C, View("scratch", mask, 0, 1), View("scratch", mask, 0, 1),
                        View("param", r["keep"], 0, 0), imm=0)]
    return out


def _fill_chunks(base, words, zero):
    """``+0`` into ``words`` scratch words from ``base`` (rows of at most MAX_DIM)."""
    out = []
    for lo in range(0, words, MAX_DIM):
        out.append(Elementwise("copy", 1, min(MAX_DIM, words - lo),
                               View("scratch", base + lo, 0, 1), View("param", zero, 0, 0)))
    return out


def _np_local_grads(fb, q, N, i, r, npt, npm, xf, dwb, dbb):
    """NP update of node ``i``, first half (``golden.zo._apply_np`` / ``np_local_grads``):
    ``dacc = live ? gy k : 0`` in place on ``gy``; the FP32 input ``x - z``; ``dw[ky, kx]``
    by one accumulating CONTRACT per (sample, output row) and kernel offset (products in the
    golden's order over (sample, row, column); the padded positions, zero products in the
    golden's sum, are skipped, which can change only the sign of an exactly zero gradient and
    so never the integer step); ``db`` by one ``rsum`` over every position."""
    nd = q.cfg.nodes[i]
    H, W, C = nd.shape
    j = nd.inputs[0]
    Hi, Wi, Ci = fb.shapes[j]
    per = H * W * C
    P = N * H * W
    y, gy = fb.regions[i]["y"], r["gy"]
    out = []
    for lo, cnt in _rows_split(P):
        sl = lambda base: View("scratch", base + lo * C, C, 1)   # noqa: E731
        out += [Elementwise("mul", cnt, C, sl(gy), sl(gy), View("param", r["k"], 0, 1)),
                Elementwise("i2f", cnt, C, sl(npt), View("act", y + lo * C, C, 1)),
                Elementwise("fcmp", cnt, C, sl(npm), View("param", r["bounds"], 0, 0), sl(npt),
                            imm=0),
                Elementwise("fcmp", cnt, C, sl(npt), sl(npt),
                            View("param", r["bounds"] + 1, 0, 0), imm=0),
                Elementwise("bitop", cnt, C, sl(npm), sl(npm), sl(npt), imm=0),
                Elementwise("bitop", cnt, C, sl(gy), sl(gy), sl(npm), imm=0)]
    E = N * Hi * Wi * Ci
    xin = fb.x_base[j]
    for lo in range(0, E, MAX_DIM):
        cnt = min(MAX_DIM, E - lo)
        out.append(Elementwise("i2f", 1, cnt, View("scratch", xf + lo, 0, 1),
                               View("act", xin + lo, 0, 1)))
    n_w = int(np.prod(nd.weight_shape))
    for lo in range(0, n_w, MAX_DIM):
        out.append(Elementwise("fill", 1, min(MAX_DIM, n_w - lo),
                               View("scratch", dwb + lo, 0, 1), imm=0x80000000))
    # grouped convolutions: one batched CONTRACT over the groups (group g pairs input
    # channels g ci .. with output channels g co_g ..; golden.zo.np_local_grads)
    G = nd.groups
    ci, co_g = Ci // G, C // G
    if nd.k == 1 and nd.stride == 1 and nd.pad == 0:
        for lo, cnt in _rows_split(P):       # dw += X^T dacc over the positions, in order
            out.append(Contract(Descriptor(ci, co_g, cnt,
                                           View("scratch", xf + lo * Ci, 1, Ci, ci),
                                           View("scratch", gy + lo * C, C, 1, co_g),
                                           View("scratch", dwb, C, 1, co_g), accumulate=True,
                                           batch=G)))
    else:
        s_, p, k = nd.stride, nd.pad, nd.k
        body = []
        for ky in range(k):
            for kx in range(k):
                wlo = max(0, -(-(p - kx) // s_))
                whi = min(W - 1, (Wi - 1 + p - kx) // s_)
                if whi < wlo:
                    continue
                for oy in range(H):
                    iy = s_ * oy + ky - p
                    if not 0 <= iy < Hi:
                        continue
                    a = View("scratch", xf + (iy * Wi + s_ * wlo + kx - p) * Ci, 1, s_ * Ci,
                             ci)
                    b = View("scratch", gy + (oy * W + wlo) * C, C, 1, co_g)
                    c = View("scratch", dwb + (ky * k + kx) * ci * C, C, 1, co_g)
                    body.append(Contract(Descriptor(ci, co_g, whi - wlo + 1, a, b, c,
                                                    accumulate=True, batch=G), (0, 1, 2)))
        if N > 1:                            # samples in order: the chain over (b, row, col)
            out += [Loop(N, (Hi * Wi * Ci, per, 0)), *body, EndLoop()]
        else:
            out += [replace(x, step=(0, 0, 0)) for x in body]
    for lo, cnt in _rows_split(P):           # db = the sum over every position, in order
        out.append(Reduce("sum", C, cnt, View("scratch", dbb, 1, 0),
                          View("scratch", gy + lo * C, 1, C), accumulate=lo > 0))
    return out


#: Memory classes of a compiled ZO step's regions (:func:`zo_memory`).
ZO_MEMORY_CLASSES = ("trainable", "frozen", "activations", "accumulators", "zo_buffers",
                     "constants", "batch")


def _region_class(name, trainable):
    node, _, kind = name.rpartition(".")
    if name.startswith(("zo.k.", "const.")) or (name.startswith("zo.np.")
                                                 and kind in ("k", "kw", "kb", "bounds")) or (
            name.startswith("zo.tk.") and kind in ("keep", "tri")):
        return "constants"
    if kind in ("w", "b"):
        return "trainable" if node in trainable else "frozen"
    if kind == "y":
        return "activations"
    if name == "acc" or name.startswith("ce.") or name in ("loss.sum",):
        return "accumulators"
    if name.startswith("zo.k.") or name.startswith("const.") or kind in ("rq", "mab"):
        return "constants"
    if name.startswith("zo.") or name == "wunpack":
        return "zo_buffers"
    return "batch"                      # in.x, in.onehot, logits, loss, loss.mean


def zo_memory(cz):
    """On-chip memory of a compiled ZO step, from its memory map, per class.

    Returns words per class (one value per 32-bit word, as the chip stores them today), the
    program's instruction words, the bytes that must be writable (everything but the frozen
    parameters, the constants and the program: the MCU's SRAM) and read-only, and a
    *projection* (not built) of the bytes with int8 values packed four to a word.
    """
    nodes = cz.q.cfg.nodes
    trainable = ({nodes[i].name for i, _, _, _ in cz.tensors}
                 | {nodes[i].name for i in cz.np_nodes})
    spans = {}                             # (class, store, int8) -> set of word addresses
    for name, r in cz.memory_map.items():
        int8 = (name.endswith(".y") or name in ("in.x", "zo.wq")
                or name.endswith(".w") and not name.startswith("zo.k.") and not cz.packed)
        key = (_region_class(name, trainable), r.store, int8)
        spans.setdefault(key, []).append((r.base, r.base + r.size))
    words = dict.fromkeys(ZO_MEMORY_CLASSES, 0)
    packed = dict.fromkeys(ZO_MEMORY_CLASSES, 0)
    for (c, _, int8), iv in spans.items():     # regions may share words (liveness): union
        n, end = 0, -1
        for lo, hi in sorted(iv):
            n += max(0, hi - max(lo, end))
            end = max(end, hi)
        words[c] += n
        packed[c] += 4 * -(-n // 4) if int8 else 4 * n
    program_words = 16 * len(cz.program.instructions)
    read_only = ("frozen", "constants")
    out = {"words": words, "program_words": program_words,
           "bytes": {c: 4 * w for c, w in words.items()},
           "program_bytes": 4 * program_words}
    out["writable_bytes"] = sum(v for c, v in out["bytes"].items() if c not in read_only)
    out["read_only_bytes"] = (sum(out["bytes"][c] for c in read_only) + out["program_bytes"])
    out["total_bytes"] = out["writable_bytes"] + out["read_only_bytes"]
    out["packed_int8_projection"] = {
        "bytes": packed,
        "writable_bytes": sum(v for c, v in packed.items() if c not in read_only),
        "total_bytes": sum(packed.values()) + out["program_bytes"]}
    return out


def figures_model(cfg, seed=0):
    """An int8 model of ``cfg`` with seeded random weights, calibrated on seeded random images:
    enough for memory maps and program shapes, which do not depend on the weights' values."""
    from . import qnn
    rng = np.random.default_rng(seed)
    calib = rng.uniform(0, 1, (4, *cfg.input_shape)).astype(np.float32)
    return qnn.quantize(qnn.FloatCNN(cfg, seed=seed), calib)


def bp_memory_estimate(q, batch):
    """An *estimate* (the int8 back-propagation step is not compiled) of the on-chip bytes of
    int8 BP training of ``q``: parameters, an FP32 gradient per parameter, every node output
    kept for the backward pass, two FP32 node-gradient buffers of the largest output and one
    int32 accumulator; 32-bit words as the chip stores them, and int8 values packed."""
    nodes = q.cfg.nodes
    w = sum(int(np.prod(n.weight_shape)) for n in nodes if n.kind == "conv")
    b = sum(n.shape[2] for n in nodes if n.kind == "conv")
    outs = [batch * int(np.prod(n.shape)) for n in nodes]
    x = batch * int(np.prod(q.cfg.input_shape))
    words = {"parameters": w + b, "gradients": w + b, "activations": sum(outs) + x,
             "backward_buffers": 2 * max(outs), "accumulators": max(outs)}
    packed = {"parameters": w + 4 * b, "gradients": 4 * (w + b),
              "activations": sum(outs) + x, "backward_buffers": 8 * max(outs),
              "accumulators": 4 * max(outs)}
    return {"words": words, "bytes": {k: 4 * v for k, v in words.items()},
            "total_bytes": 4 * sum(words.values()),
            "packed_int8_projection": {"bytes": packed, "total_bytes": sum(packed.values())}}


class InterpretedZO:
    """The compiled ZO step as a ``stepper`` of :func:`ttrain.golden.zo.train_zo`: each step
    writes the batch and seeds into one memory image kept across steps, runs the program on
    the golden interpreter (the chip's numbers) and copies the image's parameters back into
    the model. The first call compiles for the model's scales and the batch size."""

    def __init__(self, settings, **compile_options):
        self.settings = settings
        self.options = compile_options
        self.cz = self.image = None
        self.steps = 0

    def _run(self, image):
        from . import interpreter
        out, st = interpreter.run(self.cz.program, image)
        if st.error:
            raise RuntimeError(f"the compiled ZO step stopped: {st.message}")
        return out

    def prepare(self, image):
        """The image the first step starts from (a subclass may pad it)."""
        return image

    def after(self, step, image_in, image_out):
        """Called after each step with the image before and after it (a subclass checks)."""

    def __call__(self, q, x, labels, s, step):
        base = self.settings
        # train_zo passes each step's settings (a schedule's rate of that step, ``at_step``):
        # the program is the same for every rate; the host rewrites the update constants
        if replace(s, lr=base.lr, schedule=base.schedule) != base:
            raise ValueError("this stepper was built for other ZO settings")
        if self.cz is None:
            self.cz = compile_zo_step(q, len(x), s, **self.options)
            image_in = self.prepare(self.cz.initial_image(x, labels, step))
        else:
            if len(x) != self.cz.batch:
                raise ValueError(f"the compiled step takes batches of {self.cz.batch}, got "
                                 f"{len(x)}")
            image_in = self.image
            self.cz.set_step(image_in, x, labels, step)
            if s != self.cz.settings:          # this step's rate: new update constants
                self.cz.settings = s
                self.cz.set_constants(image_in)
        self.image = self._run(image_in)
        self.after(step, image_in, self.image)
        self.steps += 1
        got = self.cz.params(self.image)
        for n in q.cfg.conv_names:
            q.w[n], q.b[n] = got.w[n], got.b[n]
        return {"loss": float(self.cz.loss(self.image))}
