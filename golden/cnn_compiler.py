"""Compile the int8 CNNs' forward pass and per-sample losses into one accelerator program.

The quantized rules' building block (``docs/quantized-training.md``): :func:`compile_cnn_forward`
turns a :class:`~ttrain.golden.qnn.QuantCNN` and a batch size into a
:class:`~ttrain.golden.isa.Program` of the shared instruction table whose result, run by the
golden interpreter or the chip, equals :func:`ttrain.golden.qnn.int_forward` (every node's int8
output) and :func:`ttrain.golden.qnn.sample_losses` / :func:`~ttrain.golden.qnn.mean_loss` bit
for bit. :class:`ForwardBuilder` is the building block the ZO step compiler
(:mod:`ttrain.golden.zo_compiler`) reuses: several passes over one set of regions, node outputs
packed by liveness, int8 weights packed four to a word and unpacked (``ext8``) per contraction.

Representation: activations are stored *zero-point free*, ``x~ = q - z`` (one int32 word per
value; the input image is ``q + 128`` in [0, 255]), so padding is 0 and the contraction needs no
zero-point term; ``requant`` writes the next ``x~`` with the clamp bounds ``lo - z``,
``127 - z`` (the fused ReLU included). Layouts are dense (sample, row, column, channel).

* convolution: the accumulator starts as the broadcast bias (``copy``); per kernel offset one
  integer CONTRACT with ``accumulate`` over the *valid* output rectangle of that offset
  (padding contributes 0, and integer sums are exact and order-free, so skipping it is
  bit-exact), batched over output rows, looped over the samples; 1x1 stride-1 convolutions
  are one CONTRACT over every position; grouped convolutions one per group;
* residual add: two integer CONTRACTs (``x~_a * m_a``, then ``+= x~_b * m_b``) and a requant
  with ``m = 1``;
* global pooling: a CONTRACT of a row of ones with each sample's map, then requant;
* logits: ``i2f`` and ``scale`` by the output scale; loss: ``rmax``, ``sub``, ``exp``,
  ``rsum``, ``log``, the label's term by ``mul`` with a one-hot row and ``rsum``, ``sub``; the
  batch mean by ``rsum`` and ``scale`` by ``1/B``.
"""

from dataclasses import dataclass, replace

import numpy as np

from .contract import Descriptor, View
from .isa import (Contract, Elementwise, End, EndLoop, Loop, Program, Reduce, Region,
                  f32_bits, MAX_DIM)
from .quant import check_int8

__all__ = ["CompiledCNN", "ForwardBuilder", "compile_cnn_forward", "pack_int8", "unpack_int8",
           "UNPACK_WORDS"]


def _pack_rq(m, s):
    return (np.asarray(m, np.int64) | (np.asarray(s, np.int64) << 15)).astype(np.uint32)


def _bounds(lo, hi):
    return (int(lo) & 0xFFFF) | (int(hi) & 0xFFFF) << 16


def _w32(v):
    return (np.asarray(v, dtype=np.int64) & 0xFFFFFFFF).astype(np.uint32)


def pack_int8(values):
    """int8 values packed four to a little-endian word (byte ``k`` of word ``w`` = element
    ``4w + k``, the ISA's ``ext8``/``ins8`` numbering), zero-padded to whole words."""
    v = check_int8(np.asarray(values).ravel(), "values").astype(np.int8)
    v = np.concatenate([v, np.zeros(-v.size % 4, np.int8)])
    return v.view(np.uint32).copy()


def unpack_int8(words, n):
    """The first ``n`` int8 values of packed ``words`` (inverse of :func:`pack_int8`)."""
    return np.asarray(words, dtype=np.uint32).view(np.int8)[:n].astype(np.int64)


#: Words of the unpack buffer of packed weights: a convolution's weights are unpacked whole when
#: they fit, else per kernel offset (k x k) or per block of input channels (1 x 1).
UNPACK_WORDS = 4096


@dataclass
class CompiledCNN:
    """A compiled forward pass: the program, its model and batch, and image helpers."""
    program: Program
    q: object
    batch: int
    packed: bool = False         # int8 weights packed four to a word (golden/zo_compiler.py)

    @property
    def memory_map(self):
        return self.program.memory_map

    def _put(self, image, name, words):
        r = self.memory_map[name]
        words = np.asarray(words, dtype=np.uint32).ravel()
        if words.size != r.size:
            raise ValueError(f"region {name} holds {r.size} words, got {words.size}")
        image[r.store][r.base:r.base + r.size] = words

    def _get(self, image, name):
        r = self.memory_map[name]
        return image[r.store][r.base:r.base + r.size]

    def initial_image(self, x, labels):
        """The memory image: parameters, constants and the batch (int8 images ``x`` (B, H, W,
        C) from :func:`~ttrain.golden.qnn.quantize_input`, integer ``labels``)."""
        image = self.program.empty_image()
        self.set_params(image)
        self._put(image, "const.ones", np.ones(self.memory_map["const.ones"].size, np.uint32))
        self.set_batch(image, x, labels)
        return image

    def set_params(self, image, q=None):
        """Write the integer parameters and requantization constants of ``q`` (default the
        compiled model; the scales must be the compiled ones)."""
        q = self.q if q is None else q
        for i, n in enumerate(q.cfg.nodes):
            if n.kind == "conv":
                self._put(image, f"{n.name}.w", pack_int8(q.w[n.name]) if self.packed
                          else _w32(q.w[n.name]))
                self._put(image, f"{n.name}.b", _w32(q.b[n.name]))
                self._put(image, f"{n.name}.rq", _pack_rq(q.mult[i], q.shift[i]))
            elif n.kind == "add":
                ma, mb = (int(v) for v in q.mult[i])
                self._put(image, f"{n.name}.mab", np.array([ma, mb], np.uint32))
                self._put(image, f"{n.name}.rq", _pack_rq(1, q.shift[i]))
            else:
                self._put(image, f"{n.name}.rq", _pack_rq(q.mult[i], q.shift[i]))

    def set_batch(self, image, x, labels):
        x = check_int8(x, "x")
        want = (self.batch, *self.q.cfg.input_shape)
        if x.shape != want:
            raise ValueError(f"x must have shape {want}, got {x.shape}")
        labels = np.asarray(labels)
        if labels.shape != (self.batch,) or labels.min() < 0 or \
                labels.max() >= self.q.cfg.classes:
            raise ValueError(f"labels must be {self.batch} integers in [0, {self.q.cfg.classes})")
        self._put(image, "in.x", _w32(x - self.q.zp[-1]))
        onehot = np.zeros((self.batch, self.q.cfg.classes), np.float32)
        onehot[np.arange(self.batch), labels] = 1
        self._put(image, "in.onehot", onehot.view(np.uint32))

    def node_output(self, image, i):
        """Node ``i``'s int8 output ``q = x~ + z`` (B, H, W, C)."""
        n = self.q.cfg.nodes[i]
        w = self._get(image, f"{n.name}.y").astype(np.int64)
        w = w - ((w & 0x80000000) << 1)
        return (w + self.q.zp[i]).reshape(self.batch, *n.shape)

    def losses(self, image):
        return self._get(image, "loss").view(np.float32).copy()

    def mean_loss(self, image):
        return self._get(image, "loss.mean").view(np.float32)[0]


class _Alloc:
    def __init__(self):
        self.top = {"param": 0, "act": 0, "scratch": 0}
        self.map = {}

    def region(self, name, store, size, shape=()):
        self.map[name] = Region(store, self.top[store], int(size), tuple(shape))
        self.top[store] += int(size)
        return self.map[name].base

    def program(self, instructions):
        sizes = {s: max(1, n) for s, n in self.top.items()}
        sizes.setdefault("grad", 1)
        return Program(instructions, sizes, self.map)


def _rows_split(total):
    """Chunks of at most MAX_DIM rows."""
    for lo in range(0, total, MAX_DIM):
        yield lo, min(MAX_DIM, total - lo)


class ForwardBuilder:
    """The regions of an int8 CNN's forward pass and losses, and the instructions of a pass.

    The constructor allocates every region in ``al`` (parameters and constants in ``param``,
    node outputs, the batch and the losses in ``act``, accumulators in ``scratch``);
    :meth:`emit` returns the instructions of one pass. A ZO step
    (:mod:`ttrain.golden.zo_compiler`) emits several passes over the same regions: the
    unperturbed one, and per query one from the first trainable node with that node's
    parameters read from perturbed copies.
    """

    def __init__(self, q, batch, al, share=None, packed=False, unpack_words=UNPACK_WORDS):
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ValueError(f"batch must be a positive integer, not {batch!r}")
        self.q, self.N, self.al, self.packed = q, batch, al, bool(packed)
        cfg, N = q.cfg, batch
        H0, W0, C0 = cfg.input_shape
        L = len(cfg.nodes)
        if self.packed:
            self.units = {i: self._units(nd, unpack_words) for i, nd in enumerate(cfg.nodes)
                          if nd.kind == "conv"}
            unpack = max(4 * -(-u[1] // 4) for us in self.units.values() for u in us)
            self.wbuf = al.region("wunpack", "scratch", unpack)
        self.x_base = {-1: al.region("in.x", "act", N * H0 * W0 * C0, (N, H0, W0, C0))}
        self.shapes = {-1: cfg.input_shape}
        hw_max = max(max(n.shape[0] * n.shape[1] for n in cfg.nodes), H0 * W0)
        self.ones = al.region("const.ones", "param", hw_max)
        self.regions = {}
        y_base = self._share_outputs(share) if share is not None else None
        if share is not None:
            acc_words = max(N * int(np.prod(n.shape)) for n in cfg.nodes)
            shared_acc = al.region("acc", "scratch", acc_words)
        for i, nd in enumerate(cfg.nodes):
            H, W, C = nd.shape
            size = N * H * W * C
            if y_base is None:
                r = {"y": al.region(f"{nd.name}.y", "act", size, (N, H, W, C))}
            else:
                al.map[f"{nd.name}.y"] = Region("act", y_base[i], size, (N, H, W, C))
                r = {"y": y_base[i]}
            if nd.kind == "conv":
                n_w = int(np.prod(nd.weight_shape))
                r["w"] = al.region(f"{nd.name}.w", "param", -(-n_w // 4) if self.packed
                                   else n_w, () if self.packed else nd.weight_shape)
                r["b"] = al.region(f"{nd.name}.b", "param", C)
                r["rq"] = al.region(f"{nd.name}.rq", "param", C)
            elif nd.kind == "add":
                r["mab"] = al.region(f"{nd.name}.mab", "param", 2)
                r["rq"] = al.region(f"{nd.name}.rq", "param", 1)
            else:
                r["rq"] = al.region(f"{nd.name}.rq", "param", 1)
            acc = size if nd.kind != "pool" else N * C
            r["acc"] = (shared_acc if share is not None
                        else al.region(f"{nd.name}.acc", "scratch", acc))
            self.regions[i] = r
            self.x_base[i] = r["y"]
            self.shapes[i] = nd.shape
        assert len(self.regions) == L
        K = cfg.classes
        ce = {}
        for name, store, size in (("logits", "act", N * K), ("in.onehot", "act", N * K),
                                  ("ce.max", "scratch", N), ("ce.t", "scratch", N * K),
                                  ("ce.exp", "scratch", N * K), ("ce.sum", "scratch", N),
                                  ("ce.log", "scratch", N), ("ce.ty", "scratch", N * K),
                                  ("ce.tysum", "scratch", N), ("loss", "act", N),
                                  ("loss.sum", "scratch", 1), ("loss.mean", "act", 1)):
            shape = (N, K) if name in ("logits", "in.onehot") else ()
            ce[name] = al.region(name, store, size, shape)
        self.ce = ce

    @staticmethod
    def _units(nd, limit):
        """Unpack units of a conv's packed weights: ``(first element, elements, kind)`` with
        kind ``"all"`` (the whole tensor), ``"offset"`` (one kernel offset's cin/g x C slice) or
        ``"rows"`` (a block of input channels of a 1 x 1 convolution)."""
        n_w = int(np.prod(nd.weight_shape))
        if n_w <= limit:
            return [(0, n_w, "all")]
        C = nd.shape[2]
        if nd.k > 1:
            S = n_w // (nd.k * nd.k)
            if S % 4 or S > limit:
                raise ValueError(f"{nd.name}: a kernel offset's {S} weights must be a multiple "
                                 f"of 4 and at most {limit} to unpack packed int8 "
                                 "weights per offset")
            return [(o * S, S, "offset") for o in range(nd.k * nd.k)]
        if nd.stride != 1 or nd.pad != 0 or nd.groups != 1:
            raise ValueError(f"{nd.name}: packed weights of a strided, padded or grouped 1x1 "
                             "convolution above the unpack buffer are not supported")
        kb = limit // C
        while kb > 1 and (kb * C) % 4:
            kb -= 1
        if kb < 1 or (kb * C) % 4:
            raise ValueError(f"{nd.name}: {C} output channels cannot be unpacked in word-aligned "
                             "blocks of input channels")
        Ci = nd.cin
        return [(r * C, min(kb, Ci - r) * C, "rows") for r in range(0, Ci, kb)]

    def unpack(self, i, e0, n, hook=None):
        """Instructions unpacking elements ``e0 .. e0 + n`` of node ``i``'s packed weights into
        the unpack buffer (``e0`` a multiple of 4), then ``hook(i, e0, n, buffer view)``'s."""
        words = -(-n // 4)
        w = self.regions[i]["w"] + e0 // 4
        out = []
        for lo in range(0, words, MAX_DIM):
            cnt = min(MAX_DIM, words - lo)
            for k in range(4):
                out.append(Elementwise("ext8", 1, cnt, View("scratch", self.wbuf + 4 * lo + k,
                                                            0, 4),
                                       View("param", w + lo, 0, 1), imm=k))
        if hook is not None:
            out += list(hook(i, e0, n, self.wbuf))
        return out

    def _share_outputs(self, starts):
        """Act-store bases of the node outputs packed by liveness (first fit, in node order).

        Within a pass node ``i``'s output lives from ``i`` to its last consumer (the last node's
        to the losses). A pass may start at any node of ``starts``: an output read across a
        start (``i < s <= j`` for a consumer ``j``) is kept for the whole program (it is the
        cache the later-starting passes read), as is a node's output of a pass's first node's
        inputs. Returns ``{node: base}``; the act store's top moves past the packed block.
        """
        cfg, N, al = self.q.cfg, self.N, self.al
        L = len(cfg.nodes)
        last = {i: i for i in range(L)}
        last[L - 1] = L
        for j, nd in enumerate(cfg.nodes):
            for i in nd.inputs:
                if i >= 0:
                    last[i] = max(last[i], j)
        starts = {int(s) for s in starts if 0 < s < L}
        pinned = {i for i in range(L) for j, nd in enumerate(cfg.nodes) if i in nd.inputs
                  for s in starts if i < s <= j}
        base0 = al.top["act"]
        live, top, out = [], 0, {}            # live: (lo, hi, last use) in words from base0
        for i, nd in enumerate(cfg.nodes):
            live = [b for b in live if b[2] >= i]
            size = N * int(np.prod(nd.shape))
            lo = 0
            for a, b, _ in sorted(live):
                if a - lo >= size:
                    break
                lo = max(lo, b)
            end = L + 1 if i in pinned else last[i]
            live.append((lo, lo + size, end))
            out[i] = base0 + lo
            top = max(top, lo + size)
        al.top["act"] = base0 + top
        return out

    def emit(self, start=0, sources=None, before=None, stop=None, sample_loop=True,
             unit_hook=None, after=None):
        """Instructions of a pass over nodes ``start ..`` and the losses (no END); with
        ``stop``, over nodes ``start .. stop - 1`` only, without the losses.
        ``sample_loop=False`` unrolls the convolutions' LOOP over the samples, so that the
        pass can itself sit in a LOOP (loops do not nest). With packed weights,
        ``unit_hook(i, e0, n, buffer)`` adds instructions after each unpack of node ``i``'s
        weights ``e0 .. e0 + n`` (e.g. their perturbation in the buffer).

        ``sources`` maps a conv node index to ``(w_view_store, w_base, b_store, b_base)``
        (default its own parameter regions); ``before`` maps a node index to instructions
        emitted just before it (e.g. the perturbation of its parameters); ``after`` maps a node
        index to instructions emitted just after its output is written (e.g. the perturbation
        of that output: node perturbation).
        """
        q, N, cfg = self.q, self.N, self.q.cfg
        sources, before, after = sources or {}, before or {}, after or {}
        ins = []

        def contract(m, n_, k, a, b, c, acc, batch=1, step=(0, 0, 0)):
            ins.append(Contract(Descriptor(m, n_, k, a, b, c, accumulate=acc, batch=batch,
                                           integer=True), step))

        x_base, shapes = self.x_base, self.shapes
        for i in range(start, len(cfg.nodes) if stop is None else stop):
            nd = cfg.nodes[i]
            ins += list(before.get(i, ()))
            H, W, C = nd.shape
            reg = self.regions[i]
            out, z = reg["y"], q.zp[i]
            if nd.kind == "conv":
                j = nd.inputs[0]
                Hi, Wi, Ci = shapes[j]
                ws, wb, bs, bb = sources.get(i, ("param", reg["w"], "param", reg["b"]))
                rq, acc = reg["rq"], reg["acc"]
                units = self.units[i] if self.packed else [(0, 0, "none")]
                per_offset = units[0][2] == "offset"
                if self.packed:                   # the contractions read the unpack buffer
                    ws, wb = "scratch", self.wbuf
                P = N * H * W
                for lo, cnt in _rows_split(P):            # acc = bias, every position
                    ins.append(Elementwise("copy", cnt, C, View("scratch", acc + lo * C, C, 1),
                                           View(bs, bb, 0, 1)))
                if units[0][2] == "all":
                    ins += self.unpack(i, 0, units[0][1], unit_hook)
                cin_g, cout_g = Ci // nd.groups, C // nd.groups
                if units[0][2] == "rows":         # 1 x 1: blocks of input channels
                    for e0, n_el, _ in units:
                        ins += self.unpack(i, e0, n_el, unit_hook)
                        r0, kb = e0 // C, n_el // C
                        for lo, cnt in _rows_split(P):
                            contract(cnt, C, kb, View("act", x_base[j] + lo * Ci + r0, Ci, 1),
                                     View(ws, wb, C, 1), View("scratch", acc + lo * C, C, 1),
                                     True)
                elif nd.k == 1 and nd.stride == 1 and nd.pad == 0 and nd.groups == 1:
                    for lo, cnt in _rows_split(P):
                        contract(cnt, C, Ci, View("act", x_base[j] + lo * Ci, Ci, 1),
                                 View(ws, wb, C, 1), View("scratch", acc + lo * C, C, 1), True)
                else:
                    s, p, k = nd.stride, nd.pad, nd.k
                    body = []
                    for ky in range(k):
                        hlo = max(0, -(-(p - ky) // s))
                        hhi = min(H - 1, (Hi - 1 + p - ky) // s)
                        for kx in range(k):
                            wlo = max(0, -(-(p - kx) // s))
                            whi = min(W - 1, (Wi - 1 + p - kx) // s)
                            if hhi < hlo or whi < wlo:
                                continue
                            o_base = (ky * k + kx) * cin_g * C   # the offset's weight slice
                            if per_offset:        # unpacked alone: it starts the buffer
                                body.append(self.unpack(i, o_base, cin_g * C, unit_hook))
                                o_base = 0
                            rows = hhi - hlo + 1
                            if nd.groups > rows:  # batch over the groups, rows unrolled
                                for r in range(hlo, hhi + 1):
                                    a_base = x_base[j] + ((s * r + ky - p) * Wi
                                                          + (s * wlo + kx - p)) * Ci
                                    body.append((whi - wlo + 1, cout_g, cin_g,
                                                 View("act", a_base, s * Ci, 1, cin_g),
                                                 View(ws, wb + o_base, C, 1, cout_g),
                                                 View("scratch", acc + (r * W + wlo) * C, C, 1,
                                                      cout_g), nd.groups))
                                continue
                            for g in range(nd.groups):   # batch over the output rows
                                a_base = x_base[j] + ((s * hlo + ky - p) * Wi
                                                      + (s * wlo + kx - p)) * Ci + g * cin_g
                                b_base = wb + o_base + g * cout_g
                                c_base = acc + (hlo * W + wlo) * C + g * cout_g
                                body.append((whi - wlo + 1, cout_g, cin_g,
                                             View("act", a_base, s * Ci, 1, s * Wi * Ci),
                                             View(ws, b_base, C, 1, 0),
                                             View("scratch", c_base, C, 1, W * C), rows))
                    looped = N > 1 and sample_loop
                    loop = Loop(N, (H * W * C, Hi * Wi * Ci, 0))
                    if looped and not per_offset:
                        ins.append(loop)
                    for e in body:
                        if isinstance(e, list):   # an offset's unpack (and hook), then its
                            if looped and ins and isinstance(ins[-1], Contract):  # own loop
                                ins.append(EndLoop())
                            ins += e
                            if looped:
                                ins.append(loop)
                            continue
                        m_, n_, k_, a, b, c, bt = e
                        if looped:
                            contract(m_, n_, k_, a, b, c, True, batch=bt, step=(1, 2, 0))
                            continue
                        for t in range(N):                # unrolled: every sample in turn
                            contract(m_, n_, k_, replace(a, base=a.base + t * Hi * Wi * Ci),
                                     b, replace(c, base=c.base + t * H * W * C), True,
                                     batch=bt)
                    if looped:
                        ins.append(EndLoop())
                lo_b = (z if nd.relu else -128) - z
                for lo, cnt in _rows_split(P):
                    ins.append(Elementwise("requant", cnt, C, View("act", out + lo * C, C, 1),
                                           View("scratch", acc + lo * C, C, 1),
                                           View("param", rq, 0, 1), _bounds(lo_b, 127 - z)))
            elif nd.kind == "add":
                ja, jb = nd.inputs
                mab, rq, acc = reg["mab"], reg["rq"], reg["acc"]
                E = N * H * W * C
                for lo, cnt in _rows_split(E):
                    contract(cnt, 1, 1, View("act", x_base[ja] + lo, 1, 1),
                             View("param", mab, 1, 1), View("scratch", acc + lo, 1, 1), False)
                    contract(cnt, 1, 1, View("act", x_base[jb] + lo, 1, 1),
                             View("param", mab + 1, 1, 1), View("scratch", acc + lo, 1, 1), True)
                for lo, cnt in _rows_split(N * H * W):
                    ins.append(Elementwise("requant", cnt, C, View("act", out + lo * C, C, 1),
                                           View("scratch", acc + lo * C, C, 1),
                                           View("param", rq, 0, 0), _bounds(-128 - z, 127 - z)))
            else:                                         # global pool
                j = nd.inputs[0]
                Hi, Wi, Ci = shapes[j]
                rq, acc = reg["rq"], reg["acc"]
                contract(1, C, Hi * Wi, View("param", self.ones, Hi * Wi, 1, 0),
                         View("act", x_base[j], Ci, 1, Hi * Wi * Ci),
                         View("scratch", acc, C, 1, C), False, batch=N)
                ins.append(Elementwise("requant", N, C, View("act", out, C, 1),
                                       View("scratch", acc, C, 1), View("param", rq, 0, 0),
                                       _bounds(-128 - z, 127 - z)))
            ins += list(after.get(i, ()))
        return ins + (self._losses() if stop is None else [])

    def _losses(self):
        """Logits and per-sample cross-entropy (FP32, in the golden's operation order)."""
        q, N, ce = self.q, self.N, self.ce
        last = len(q.cfg.nodes) - 1
        K = q.cfg.classes
        lg, oh, mx, t, e = ce["logits"], ce["in.onehot"], ce["ce.max"], ce["ce.t"], ce["ce.exp"]
        se, ls, ty, tys = ce["ce.sum"], ce["ce.log"], ce["ce.ty"], ce["ce.tysum"]
        loss, lsum, lmean = ce["loss"], ce["loss.sum"], ce["loss.mean"]
        dense = dict(rows=N, cols=K)
        return [
            Elementwise("i2f", d=View("act", lg, K, 1), a=View("act", self.x_base[last], K, 1),
                        **dense),
            Elementwise("scale", d=View("act", lg, K, 1), a=View("act", lg, K, 1),
                        imm=f32_bits(np.float32(q.scale[last])), **dense),
            Reduce("max", N, K, View("scratch", mx, 1, 0), View("act", lg, K, 1)),
            Elementwise("sub", d=View("scratch", t, K, 1), a=View("act", lg, K, 1),
                        b=View("scratch", mx, 1, 0), **dense),
            Elementwise("exp", d=View("scratch", e, K, 1), a=View("scratch", t, K, 1), **dense),
            Reduce("sum", N, K, View("scratch", se, 1, 0), View("scratch", e, K, 1)),
            Elementwise("log", N, 1, View("scratch", ls, 1, 1), View("scratch", se, 1, 1)),
            Elementwise("mul", d=View("scratch", ty, K, 1), a=View("scratch", t, K, 1),
                        b=View("act", oh, K, 1), **dense),
            Reduce("sum", N, K, View("scratch", tys, 1, 0), View("scratch", ty, K, 1)),
            Elementwise("sub", N, 1, View("act", loss, 1, 1), View("scratch", ls, 1, 1),
                        View("scratch", tys, 1, 1)),
            Reduce("sum", 1, N, View("scratch", lsum, 1, 0), View("act", loss, N, 1)),
            Elementwise("scale", 1, 1, View("act", lmean, 1, 1), View("scratch", lsum, 1, 1),
                        imm=f32_bits(np.float32(1.0 / N))),
        ]


def compile_cnn_forward(q, batch):
    """Compile the forward pass and losses of ``q`` for ``batch`` images (see the module)."""
    al = _Alloc()
    fb = ForwardBuilder(q, batch, al)
    return CompiledCNN(al.program(fb.emit() + [End()]), q, batch)
