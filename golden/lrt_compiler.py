"""Low-rank training (LRT) compiled into accelerator programs: one per sample, one per read-out.

:func:`compile_lrt` turns the fixed-point MLP of :mod:`ttrain.golden.lrt_model` (its layer
shapes) and :class:`~ttrain.golden.lrt_online.OnlineSettings` (``rule="lrt"``) into two programs
of the shared instruction table over one memory map (:class:`CompiledLRT`):

* **sample** (run once per sample): the integer forward pass (integer CONTRACT on ``4 b``,
  ``requant`` for the hidden ReLU/clip), the FP32 logits; the backward pass (softmax with
  ``rmax``/``exp``/``rsum``/``recip``, ``dz = p - onehot`` quantized by ``f2i``/``iadd``, the
  hidden gradient by an integer CONTRACT with ``W^T``, ``requant`` and the ReLU's
  straight-through mask from ``fcmp``/``bitop``); the 16-bit bias update; then one
  **rankReduce** per layer (:mod:`ttrain.golden.lrt`): modified Gram-Schmidt of ``dz`` and
  ``a`` against the dequantized 16-bit bases (CONTRACT dot products), the condition check, the
  core, the **fixed-sequence Jacobi SVD** of :mod:`ttrain.golden.svd` for every layer's core at
  once (CONTRACT Gram matrices and 2x2 rotations batched over layers, the rotation angles as
  vector ops over all layers and disjoint pairs of a round, the sort as masked selects), the
  biased or unbiased (optimal Kronecker sum; random signs by ``raccum`` from the sample's seed
  word) reduction, the basis rotation (CONTRACT) and the 16-bit re-quantization, every choice a
  ``fcmp`` mask and a branch-free select (``bitop``); a skipped sample keeps the old state.
* **readout** (run after every ``B``-th sample): per layer the factors ``Q diag(sqrt c_x)``,
  max-norm (its FP32 state on chip) or none, ``G = lr (sqrt B_eff) L R^T`` (CONTRACT),
  ``delta = f2i(G 2^7)``, the 1% write rule as a count of non-zero entries and a flag, the
  saturated write ``w - delta`` selected by the flag, the **per-cell write counters** (``+1``
  where the stored value changed), the flag word for the host, and the accumulator reset.

The host writes, per sample, the input pixels (int words), the one-hot label (FP32 words) and
one random-sign seed word per layer (:func:`ttrain.golden.lrt.sign_seed`), and reads back the
logits (the prediction before training: the online accuracy). Every number equals the golden
:func:`ttrain.golden.lrt_online.run_online` bit for bit (``tests/test_lrt_compiler.py``); the
stepper :class:`InterpretedLRT` runs the programs on the golden interpreter, and
``platforms/host/lrt_chip.py`` on the Verilator top.
"""

import math
from dataclasses import dataclass

import numpy as np

from . import lrt
from .contract import Descriptor, View
from .interpreter import run
from .isa import (BITOP_FUNCTIONS, FCMP_PREDICATES, Contract, Elementwise, End, EndLoop, Loop,
                  Program, Random, Reduce, Region, f32_bits)
from .lrt_model import A_FRAC, B_FRAC, G_FRAC, W_FRAC, _Geometry
from .svd import SWEEPS, pivot_schedule

__all__ = ["CompiledLRT", "compile_lrt", "InterpretedLRT", "CompiledSVD", "compile_svd",
           "CompiledSBN", "compile_streaming_bn", "lrt_memory"]

_ONES = 0xFFFFFFFF
_ABS = 0x7FFFFFFF
_NEG0 = 0x80000000
_F32 = np.float32


def _rq(m, s):
    """requant's per-element word: multiplier m, shift s."""
    return (m & 0x7FFF) | (s & 0x3F) << 15


def _bounds(lo, hi):
    return (lo & 0xFFFF) | (hi & 0xFFFF) << 16


@dataclass(frozen=True)
class _A:
    """A strided 2-D array in one store: ``rows x cols`` words from ``base``."""
    store: str
    base: int
    rows: int
    cols: int
    rs: int
    cs: int = 1

    def view(self, bs=0):
        return View(self.store, self.base, self.rs, self.cs, bs)

    def at(self, i, j, rows=1, cols=1):
        return _A(self.store, self.base + i * self.rs + j * self.cs, rows, cols, self.rs, self.cs)

    def col(self, j, n=1):
        return self.at(0, j, self.rows, n)

    def row(self, i, n=1):
        return self.at(i, 0, n, self.cols)

    @property
    def T(self):
        return _A(self.store, self.base, self.cols, self.rows, self.cs, self.rs)

    def bcast(self, rows, cols):
        """This array broadcast to ``rows x cols`` (a 1-row or 1-column array, or one word)."""
        rs = 0 if self.rows == 1 else self.rs
        cs = 0 if self.cols == 1 else self.cs
        if (self.rows != 1 and self.rows != rows) or (self.cols != 1 and self.cols != cols):
            raise ValueError(f"cannot broadcast {self.rows}x{self.cols} to {rows}x{cols}")
        return _A(self.store, self.base, rows, cols, rs, cs)


def _halves(a, r):
    """The even and odd columns of an ``n x r`` array: halves 0 and 1 of its packed words."""
    return [_A(a.store, a.base + k * a.cs, a.rows, (r + 1 - k) // 2, a.rs, 2 * a.cs)
            for k in (0, 1) if (r + 1 - k) // 2]


def _unpack16(e, d, packed, r):
    """``d`` (``n x r``) = the sign-extended 16-bit entries of ``packed`` (``n x ceil(r/2)``
    words), as FP32 (``ext16`` per half, then ``i2f`` in place)."""
    for k, dk in enumerate(_halves(d, r)):
        e.ew("ext16", dk, packed.col(0, dk.cols), imm=k)
    e.ew("i2f", d, d)


def _pack16(e, d, ints, r):
    """The words of ``d`` (``n x ceil(r/2)``) with their halves replaced by ``ints``'s
    entries (``n x r`` int32 words, their low 16 bits; ``ins16`` per half)."""
    for k, ik in enumerate(_halves(ints, r)):
        e.ew("ins16", d.col(0, ik.cols), d.col(0, ik.cols), ik, imm=k)


class _Mem:
    """Bump allocator with marks (scratch temporaries die at the end of a phase)."""

    def __init__(self):
        self.top = {"param": 0, "act": 0, "scratch": 0}
        self.map = {}
        self.peak = 0

    def region(self, name, store, rows, cols=1):
        base = self.top[store]
        self.top[store] += rows * cols
        if name is not None:
            self.map[name] = Region(store, base, rows * cols, (rows, cols) if cols > 1 else (rows,))
        if store == "scratch":
            self.peak = max(self.peak, self.top["scratch"])
        return _A(store, base, rows, cols, cols)

    def tmp(self, rows, cols=1):
        return self.region(None, "scratch", rows, cols)

    def mark(self):
        return self.top["scratch"]

    def release(self, mark):
        self.top["scratch"] = mark

    def sizes(self):
        sizes = {s: max(1, n) for s, n in self.top.items()}
        sizes["scratch"] = max(1, self.peak)
        sizes.setdefault("grad", 1)
        return sizes


class _Emit:
    """Instruction builders over :class:`_A` arrays (every op is one instruction)."""

    def __init__(self, mem):
        self.mem = mem
        self.ins = []
        self.const = {}
        self.marks = {}

    def mark(self, name):
        """Record the end of a phase (instruction count so far)."""
        self.marks[name] = len(self.ins)

    # -- elementwise ------------------------------------------------------------------------
    def ew(self, op, d, a=None, b=None, imm=0, step=(0, 0, 0)):
        """One elementwise op; ``step`` the LOOP increment select of slots d, a, b."""
        a, b = ((None if x is None else x if (x.rows, x.cols) == (d.rows, d.cols)
                 else x.bcast(d.rows, d.cols)) for x in (a, b))
        used = 1 + (a is not None) + (b is not None)
        self.ins.append(Elementwise(op, d.rows, d.cols, d.view(),
                                    None if a is None else a.view(),
                                    None if b is None else b.view(), int(imm),
                                    tuple(step)[:used] + (0,) * (3 - used)))
        return d

    def loop(self, count, increments):
        """Open a LOOP of ``count`` iterations (close it with :meth:`endloop`)."""
        self.ins.append(Loop(int(count), tuple(increments) + (0,) * (3 - len(increments))))

    def endloop(self):
        self.ins.append(EndLoop())

    def fill(self, d, bits):
        return self.ew("fill", d, imm=bits)

    def load_constants(self, kreg, consts):
        """Fill ``kreg``'s first words with ``consts`` (FP32 values, or int bits as ``("bits",
        w)``) and make them :meth:`k`'s table."""
        self.const = {}
        for i, v in enumerate(consts):
            bits = v[1] if isinstance(v, tuple) else f32_bits(float(v))
            self.const[bits] = kreg.at(i, 0)
            self.fill(kreg.at(i, 0), bits)

    def k(self, value):
        """The one-word constant of FP32 ``value`` (or int bits with ``("bits", w)``)."""
        bits = value[1] if isinstance(value, tuple) else f32_bits(float(value))
        return self.const[bits]

    def cmp(self, pred, d, a, b):
        return self.ew("fcmp", d, a, b, FCMP_PREDICATES[pred])

    def bit(self, fn, d, a, b):
        return self.ew("bitop", d, a, b, BITOP_FUNCTIONS[fn])

    def sel(self, d, m, a, b):
        """``d = m ? a : b`` (``m`` a mask): ``(a & m) | (b & ~m)`` (d may be a or b)."""
        mark = self.mem.mark()
        t1 = self.mem.tmp(d.rows, d.cols)
        t2 = self.mem.tmp(d.rows, d.cols)
        self.bit("and", t1, a, m)
        self.bit("andn", t2, b, m)
        self.bit("or", d, t1, t2)
        self.mem.release(mark)
        return d

    def sqrt(self, d, x):
        """``golden.svd.fp32_sqrt``: ``x * rsqrt(x)``, ``+0`` where ``x == 0``."""
        mark = self.mem.mark()
        r = self.mem.tmp(d.rows, d.cols)
        z = self.mem.tmp(d.rows, d.cols)
        self.ew("rsqrt", r, x)
        self.ew("mul", r, x, r)
        self.cmp("eq", z, x, self.k(0.0))
        self.bit("andn", d, r, z)
        self.mem.release(mark)
        return d

    def red(self, op, d, a):
        """``d[i] = reduce_j a[i, j]`` (d: rows x 1)."""
        self.ins.append(Reduce(op, a.rows, a.cols, View(d.store, d.base, d.rs, 0), a.view()))
        return d

    # -- contractions -----------------------------------------------------------------------
    def mm(self, c, a, b, *, batch=1, bs=(0, 0, 0), acc=False, integer=False, step=(0, 0, 0)):
        """``c (+)= a @ b`` (products summed over a's columns in order), ``batch`` copies with
        batch strides ``bs`` = (c, a, b); ``step`` the LOOP increment select of c, a, b."""
        if a.cols != b.rows or (c.rows, c.cols) != (a.rows, b.cols):
            raise ValueError(f"contraction shapes {c.rows}x{c.cols} = {a.rows}x{a.cols} @ "
                             f"{b.rows}x{b.cols}")
        desc = Descriptor(a.rows, b.cols, a.cols, a.view(bs[1]), b.view(bs[2]), c.view(bs[0]),
                          accumulate=acc, batch=batch, integer=integer)
        self.ins.append(Contract(desc, tuple(step)))
        return c

    def dot(self, c, x, y):
        """``c = x . y`` for column arrays x, y (n x 1): products summed in index order."""
        return self.mm(c, x.T, y)


class CompiledLRT:
    """The programs and their shared memory map; reads and writes the host's data.

    ``programs``: ``sample`` (run once per sample) and the read-outs of
    ``readout_schedule`` (``(name, period, layers)``: run program ``name`` after every
    ``period``-th sample; ``readout`` for the one-pixel (dense) layers every ``batch``
    samples, ``readout_conv`` for the convolutional layers every ``conv_batch`` images)."""

    def __init__(self, shapes, settings, sample, readouts, memory_map, phase_ends, info,
                 geometry, seed_layout):
        self.shapes = [tuple(s) for s in shapes]
        self.settings = settings
        self.sample = sample
        self.readouts = {name: prog for name, (prog, _, _) in readouts.items()}
        self.readout_schedule = [(name, period, list(layers))
                                 for name, (_, period, layers) in readouts.items()]
        self.readout = self.readouts["readout"]
        self.memory_map = memory_map
        #: instruction index after each phase of the sample program: forward (logits),
        #: backward (gradients and the bias update), project (Gram-Schmidt, condition check,
        #: cores), svd (the Jacobi SVD of every core); then the reductions and rotations of the
        #: one-pixel layers ("dense"), then one LOOP over the output pixels per pixel count of
        #: the convolutional layers ("conv")
        self.phase_ends = dict(phase_ends)
        self.info = info
        self.geometry = tuple(geometry)
        #: (layer, pixel, word of the ``seeds`` region) of every random-sign seed
        self.seed_layout = list(seed_layout)

    @property
    def pixels(self):
        return [g.hout * g.wout for g in self.geometry]

    @property
    def programs(self):
        return {"sample": self.sample, **self.readouts}

    def _r(self, name):
        return self.memory_map[name]

    def put(self, image, name, words):
        r = self._r(name)
        w = np.asarray(words).ravel()
        if w.size != r.size:
            raise ValueError(f"region {name!r} holds {r.size} words, not {w.size}")
        image[r.store][r.base:r.base + r.size] = (w.astype(np.int64) & _ONES).astype(np.uint32) \
            if w.dtype.kind in "iu" else w.astype(np.float32).view(np.uint32)

    def get(self, image, name):
        r = self._r(name)
        return image[r.store][r.base:r.base + r.size].copy()

    def get_int(self, image, name):
        w = self.get(image, name).astype(np.int64)
        return w - ((w & 0x80000000) << 1)

    def get_basis(self, image, name, n):
        """A basis's ``n x r`` 16-bit entries (two to a word: entry ``2w + k`` of a row in
        half ``k`` of its word ``w``), sign-extended."""
        r = self.settings.rank
        w = self.get(image, name).astype(np.int64).reshape(n, -(-r // 2))
        h = np.stack([w & 0xFFFF, w >> 16], axis=-1).reshape(n, -1)[:, :r]
        return (h ^ 0x8000) - 0x8000

    def get_f32(self, image, name):
        return self.get(image, name).view(np.float32)

    def initial_image(self, model):
        """A memory image holding ``model``'s weights and biases and an empty accumulator."""
        sizes = self.sample.store_sizes
        image = {s: np.zeros(n, np.uint32) for s, n in sizes.items()}
        for l in range(len(self.shapes)):
            self.put(image, f"w{l}", model.w[l])
            self.put(image, f"b{l}", model.b[l])
            for f in ("L", "R"):
                self.put(image, f"mn{l}{f}.bk", np.float32([1.0]))
                self.put(image, f"mn{l}{f}.xmv", np.float32([lrt.MaxNorm().eps]))
        return image

    def set_sample(self, image, x, label, index):
        """Write one sample: int pixels ``x``, its label, and the layers' sign seeds."""
        classes = self.shapes[-1][0]
        self.put(image, "x", np.asarray(x, np.int64))
        onehot = np.zeros(classes, np.float32)
        onehot[int(label)] = 1.0
        self.put(image, "onehot", onehot)
        pix = self.pixels
        seeds = np.zeros(self._r("seeds").size, np.int64)
        for l, p, word in self.seed_layout:
            seeds[word] = int(lrt.sign_seed(self.settings.seed, l, index * pix[l] + p))
        self.put(image, "seeds", seeds)

    def weights(self, image):
        return [self.get_int(image, f"w{l}").reshape(s) for l, s in enumerate(self.shapes)]

    def biases(self, image):
        return [self.get_int(image, f"b{l}") for l in range(len(self.shapes))]

    def counters(self, image):
        return [self.get_int(image, f"cnt{l}").reshape(s) for l, s in enumerate(self.shapes)]

    def state(self, image, l):
        """Layer ``l``'s accumulator as a :class:`ttrain.golden.lrt.LowRank` (fed counts 0)."""
        n_o, n_i = self.shapes[l]
        z = np.zeros((), np.int64)
        return lrt.LowRank(self.get_basis(image, f"ql{l}", n_o),
                           self.get_f32(image, f"sl{l}")[0],
                           self.get_basis(image, f"qr{l}", n_i),
                           self.get_f32(image, f"sr{l}")[0],
                           self.get_f32(image, f"cx{l}").copy(), z,
                           np.int64(self.get_f32(image, f"skipped{l}")[0]))


def _dense(n_o, n_i):
    """A dense layer as the 1x1 convolution of a 1x1 map of ``n_i`` channels."""
    return _Geometry(1, 1, n_i, 1, 1, 0, 1, 1, n_o)


def _whole_patch(g):
    """The layer's only patch is its whole input map in (h, w, c) order: no im2col."""
    return g.pad == 0 and g.k == g.hin == g.win


def _check_geometry(shapes, geometry):
    if geometry is None:
        geo = [_dense(n_o, n_i) for n_o, n_i in shapes]
        for l in range(1, len(shapes)):
            if shapes[l][1] != shapes[l - 1][0]:
                raise ValueError(f"layer {l} takes {shapes[l][1]} inputs but layer {l - 1} "
                                 f"gives {shapes[l - 1][0]}")
        return geo
    geo = list(geometry)
    if len(geo) != len(shapes):
        raise ValueError(f"{len(shapes)} layer shapes but {len(geo)} geometries")
    for l, (g, sh) in enumerate(zip(geo, shapes)):
        if tuple(sh) != (g.cout, g.k * g.k * g.cin):
            raise ValueError(f"layer {l}: shape {tuple(sh)} is not its geometry's (cout, k*k*cin)"
                             f" = ({g.cout}, {g.k * g.k * g.cin})")
        if l and (g.hin, g.win, g.cin) != (geo[l - 1].hout, geo[l - 1].wout, geo[l - 1].cout):
            raise ValueError(f"layer {l} reads a {g.hin}x{g.win}x{g.cin} map but layer {l - 1} "
                             f"gives {geo[l - 1].hout}x{geo[l - 1].wout}x{geo[l - 1].cout}")
    if geo[-1].hout * geo[-1].wout != 1:
        raise ValueError("the last layer must have one output pixel (the logits)")
    return geo


def _groups(pix):
    """The layers by output-pixel count: the one-pixel layers first (their rankReduces unrolled
    as the dense MLP's), then one group per larger count (one LOOP over the pixels each)."""
    out = [(1, [l for l, p in enumerate(pix) if p == 1])]
    for p in dict.fromkeys(p for p in pix if p > 1):
        out.append((p, [l for l, q in enumerate(pix) if q == p]))
    return out


def compile_lrt(shapes, settings, geometry=None):
    """Compile the per-sample and read-out programs of ``settings`` (``rule="lrt"``) for the
    layers of ``shapes`` [(n_o, n_i), ...] (every layer but the last with the ReLU/clip):
    dense layers, or with ``geometry`` (a :class:`~ttrain.golden.lrt_model.FixedCNN`'s) the
    convolutions of a fixed-point CNN, one rankReduce per output pixel."""
    s = settings.check()
    if s.rule != "lrt":
        raise ValueError(f"compile_lrt compiles the lrt rule, not {s.rule!r}")
    shapes = [tuple(int(v) for v in sh) for sh in shapes]
    geo = _check_geometry(shapes, geometry)
    pix = [g.hout * g.wout for g in geo]
    groups = _groups(pix)
    r, q, nl = s.rank, s.rank + 1, len(shapes)
    mem = _Mem()
    P = {}
    for l, (n_o, n_i) in enumerate(shapes):
        P[f"w{l}"] = mem.region(f"w{l}", "param", n_o, n_i)
        P[f"b{l}"] = mem.region(f"b{l}", "param", n_o)
        P[f"cnt{l}"] = mem.region(f"cnt{l}", "param", n_o, n_i)
        # 16-bit basis entries two to a word: row i's entries 2w, 2w + 1 in word w of the row
        P[f"ql{l}"] = mem.region(f"ql{l}", "param", n_o, -(-r // 2))
        P[f"qr{l}"] = mem.region(f"qr{l}", "param", n_i, -(-r // 2))
        for name in ("sl", "sr", "since", "skipped", "written"):
            P[f"{name}{l}"] = mem.region(f"{name}{l}", "param", 1)
        P[f"cx{l}"] = mem.region(f"cx{l}", "param", 1, r)
        for f in ("L", "R"):
            for name in ("bk", "xmv"):
                P[f"mn{l}{f}.{name}"] = mem.region(f"mn{l}{f}.{name}", "param", 1)
    # the sign seeds: per group, pixel-major (word p * layers + j for the group's j-th layer)
    seed_layout, word = [], 0
    for p_count, layers in groups:
        for p in range(p_count):
            for l in layers:
                seed_layout.append((l, p, word))
                word += 1
    X = {"x": mem.region("x", "act", geo[0].hin * geo[0].win * geo[0].cin),
         "onehot": mem.region("onehot", "act", 1, shapes[-1][0]),
         "seeds": mem.region("seeds", "act", word),
         "logits": mem.region("logits", "act", 1, shapes[-1][0])}
    consts = [0.0, 1.0, -1.0, 255.0, ("bits", _ABS), ("bits", _NEG0), ("bits", 1),
              ("bits", _rq(1, A_FRAC)), ("bits", _rq(1, W_FRAC)), ("bits", _rq(1, 0))]
    kk = [float(q - 1 - j) for j in range(q)]           # the unbiased reduction's q - m
    kreg = mem.region("const", "scratch", len(consts) + q)
    base_scratch = mem.mark()

    def prologue(e):
        e.load_constants(kreg, consts)
        for j, v in enumerate(kk):
            e.fill(kreg.at(len(consts) + j, 0), f32_bits(v))
        e.kk = _A("scratch", kreg.base + len(consts), 1, q, 0, 1)
        e.seeds = X["seeds"]
        e.seed_word = {}
        for l, p, w in seed_layout:
            if p == 0:
                e.seed_word[l] = w

    sample = _Emit(mem)
    prologue(sample)
    _emit_sample(sample, mem, P, X, geo, s, groups)
    sample_peak = mem.peak
    readouts = {}
    for name, layers, period in (("readout_conv", [l for l in range(nl) if pix[l] > 1],
                                  s.conv_batch),
                                 ("readout", [l for l in range(nl) if pix[l] == 1], s.batch)):
        if layers:
            mem.release(base_scratch)
            e = _Emit(mem)
            prologue(e)
            _emit_readout(e, mem, P, shapes, s, layers)
            readouts[name] = (e, period, layers)
    sizes = mem.sizes()
    sample_prog = Program(sample.ins + [End()], sizes, dict(mem.map))
    readouts = {name: (Program(e.ins + [End()], sizes, dict(mem.map)), period, layers)
                for name, (e, period, layers) in readouts.items()}
    info = {"sample_instructions": len(sample_prog.instructions),
            **{f"{name}_instructions": len(prog.instructions)
               for name, (prog, _, _) in readouts.items()},
            "scratch_peak": mem.peak, "sample_scratch_peak": sample_peak}
    return CompiledLRT(shapes, s, sample_prog, readouts, dict(mem.map), sample.marks, info, geo,
                       seed_layout)


# ------------------------------------------------------------------------------------------
# the per-sample program


@dataclass(frozen=True)
class _Map:
    """A layer's int input map: ``inner`` its ``hin x (win cin)`` words (row stride ``wp
    cin``), ``whole`` the array from the padded map's first word, ``flat`` the map as one
    column when it is contiguous (no padding), else None."""
    inner: _A
    whole: _A
    wp: int
    flat: object


def _input_map(e, mem, l, g, x=None):
    """Layer ``l``'s input map: the host's ``x`` or a new region (``act{l}``; ``map{l}``
    zero-filled around the interior when the layer pads); ``x`` is copied into a padded map."""
    rowlen = g.win * g.cin
    if g.pad == 0:
        flat = x if x is not None else mem.region(f"act{l}", "scratch", g.hin * rowlen)
        inner = _A(flat.store, flat.base, g.hin, rowlen, rowlen)
        return _Map(inner, inner, g.win, flat)
    wp, hp = g.win + 2 * g.pad, g.hin + 2 * g.pad
    whole = mem.region(f"map{l}", "scratch", hp * wp * g.cin)
    e.fill(whole, 0)
    inner = _A(whole.store, whole.base + (g.pad * wp + g.pad) * g.cin, g.hin, rowlen, wp * g.cin)
    if x is not None:
        e.ew("copy", inner, _A(x.store, x.base, g.hin, rowlen, rowlen))
    return _Map(inner, whole, wp, None)


def _patch_loop(e, g, n_i, wp):
    """Open the LOOP over the output rows of an im2col or col2im: increment 0 steps the patch
    rows (one output row of patches), increment 1 the map (``stride`` input rows)."""
    e.loop(g.hout, (g.wout * n_i, g.stride * wp * g.cin))


def _im2col(e, mem, l, g, src):
    """The int patches (pixels x k k cin, raster order, (ky, kx, c) columns) of ``src``: per
    output row one copy per kernel offset (a LOOP over the rows)."""
    n_i = g.k * g.k * g.cin
    pat = mem.region(f"pat{l}", "scratch", g.hout * g.wout, n_i)
    _patch_loop(e, g, n_i, src.wp)
    for ky in range(g.k):
        for kx in range(g.k):
            d = _A(pat.store, pat.base + (ky * g.k + kx) * g.cin, g.wout, g.cin, n_i)
            a = _A(src.whole.store, src.whole.base + (ky * src.wp + kx) * g.cin, g.wout, g.cin,
                   g.stride * g.cin)
            e.ew("copy", d, a, step=(1, 2, 0))
    e.endloop()
    return pat


def _col2im(e, mem, l, g, pg):
    """The int gradient of layer ``l``'s input map: the exact sum of the patch gradients
    ``pg`` onto a zeroed, padded map (``iadd`` per output row and kernel offset, a LOOP over
    the rows); returns its interior (``hin x (win cin)``)."""
    n_i = g.k * g.k * g.cin
    wp, hp = g.win + 2 * g.pad, g.hin + 2 * g.pad
    gm = mem.region(f"gmap{l}", "scratch", hp * wp * g.cin)
    e.fill(gm, 0)
    _patch_loop(e, g, n_i, wp)
    for ky in range(g.k):
        for kx in range(g.k):
            d = _A(gm.store, gm.base + (ky * wp + kx) * g.cin, g.wout, g.cin, g.stride * g.cin)
            b = _A(pg.store, pg.base + (ky * g.k + kx) * g.cin, g.wout, g.cin, n_i)
            e.ew("iadd", d, d, b, 32, step=(2, 2, 1))
    e.endloop()
    return _A(gm.store, gm.base + (g.pad * wp + g.pad) * g.cin, g.hin, g.win * g.cin,
              wp * g.cin)


def _mat(a, rows, cols):
    """A contiguous region's words as a ``rows x cols`` array."""
    return _A(a.store, a.base, rows, cols, cols)


def _emit_sample(e, mem, P, X, geo, s, groups):
    nl = len(geo)
    k = e.k
    shapes = [(g.cout, g.k * g.k * g.cin) for g in geo]
    pix = [g.hout * g.wout for g in geo]
    # forward: acc = 4 b + W a (integer, per output pixel), hidden a' = clamp(round_half_up(acc
    # >> 7), 0, 255) into the next layer's input map
    inputs = [_input_map(e, mem, 0, geo[0], X["x"])]
    accs, pats = [], []
    for l, g in enumerate(geo):
        n_o, n_i = shapes[l]
        src = inputs[l]
        pat = None if _whole_patch(g) else _im2col(e, mem, l, g, src)
        pats.append(pat)
        if pix[l] == 1:
            acc = mem.region(f"acc{l}", "scratch", n_o)
            e.ew("iadd", acc, P[f"b{l}"], P[f"b{l}"], 32)
            e.ew("iadd", acc, acc, acc, 32)
            e.mm(acc, P[f"w{l}"], src.flat if pat is None else pat.T, acc=True, integer=True)
        else:
            acc = mem.region(f"acc{l}", "scratch", pix[l], n_o)
            e.ew("iadd", acc, P[f"b{l}"].T, P[f"b{l}"].T, 32)
            e.ew("iadd", acc, acc, acc, 32)
            e.mm(acc, pat, P[f"w{l}"].T, acc=True, integer=True)
        accs.append(acc)
        if l < nl - 1:
            nxt = _input_map(e, mem, l + 1, geo[l + 1])
            if nxt.flat is not None:
                dst, val = nxt.flat, _mat(acc, pix[l] * n_o, 1)
            else:
                dst, val = nxt.inner, _mat(acc, g.hout, g.wout * n_o)
            e.ew("requant", dst, val, k(("bits", _rq(1, A_FRAC))), _bounds(0, 255))
            inputs.append(nxt)
    classes = shapes[-1][0]
    z = X["logits"]
    e.ew("i2f", z, accs[-1].T)
    e.ew("scale", z, z, imm=f32_bits(2.0 ** -(W_FRAC + A_FRAC)))
    e.mark("forward")
    # backward: softmax, dz = p - onehot, int8 gradients
    mx = mem.tmp(1)
    e.red("max", mx, z)
    p = mem.tmp(1, classes)
    e.ew("sub", p, z, mx)
    e.ew("exp", p, p)
    sm = mem.tmp(1)
    e.red("sum", sm, p)
    e.ew("recip", sm, sm)
    e.ew("mul", p, p, sm)
    e.ew("sub", p, p, X["onehot"])
    gs = [None] * nl
    g = mem.region(f"g{nl - 1}", "scratch", classes)
    e.ew("scale", p, p, imm=f32_bits(2.0 ** G_FRAC))
    e.ew("f2i", g.T, p, imm=0)
    e.ew("iadd", g, g, k(0.0), 8)
    gs[-1] = g
    for l in range(nl - 1, 0, -1):
        n_o, n_i = shapes[l]
        gl = geo[l]
        n_in = gl.hin * gl.win * gl.cin
        if pats[l] is None:
            # the patch gradient is the input map's gradient
            back = mem.region(f"g{l - 1}", "scratch", n_in)
            e.mm(back, P[f"w{l}"].T, gs[l], integer=True)
            e.ew("requant", back, back, k(("bits", _rq(1, W_FRAC))), _bounds(-128, 127))
        else:
            pg = mem.region(f"pg{l}", "scratch", pix[l], n_i)
            if pix[l] == 1:
                e.mm(pg.T, P[f"w{l}"].T, gs[l], integer=True)
            else:
                e.mm(pg, _mat(gs[l], pix[l], n_o), P[f"w{l}"], integer=True)
            inner = _col2im(e, mem, l, gl, pg)
            back = mem.region(f"g{l - 1}", "scratch", n_in)
            e.ew("requant", _mat(back, gl.hin, gl.win * gl.cin), inner,
                 k(("bits", _rq(1, W_FRAC))), _bounds(-128, 127))
        # the straight-through mask of layer l - 1's output (0 < a < 255)
        prev = inputs[l]
        if prev.flat is not None:
            bv, act = back, prev.flat
        else:
            bv, act = _mat(back, gl.hin, gl.win * gl.cin), prev.inner
        af = mem.tmp(bv.rows, bv.cols)
        m1 = mem.tmp(bv.rows, bv.cols)
        e.ew("i2f", af, act)
        e.cmp("lt", m1, k(0.0), af)
        e.cmp("lt", af, af, k(255.0))
        e.bit("and", m1, m1, af)
        e.bit("and", bv, bv, m1)
        gs[l - 1] = back
    # the rankReduce inputs: dz and a as FP32, per layer the first pixel's as columns (a
    # convolutional group's pixels in one record array, ``rec`` words a pixel, so one LOOP
    # increment steps every layer of the group); the bias update from the pixels' sum of dz
    recs = {}
    for p_count, layers in groups[1:]:
        offs, rec = {}, 0
        for l in layers:
            offs[l] = rec
            rec += sum(shapes[l])
        recs[p_count] = (mem.region(f"pix{p_count}", "scratch", p_count, rec), offs, rec)
    dzs, avs = {}, {}
    for l, (n_o, n_i) in enumerate(shapes):
        if pix[l] == 1:
            dz = mem.region(f"dz{l}", "scratch", n_o)
            e.ew("i2f", dz, gs[l])
            e.ew("scale", dz, dz, imm=f32_bits(2.0 ** -G_FRAC))
            av = mem.region(f"a{l}", "scratch", n_i)
            e.ew("i2f", av, inputs[l].flat if pats[l] is None else pats[l].T)
            e.ew("scale", av, av, imm=f32_bits(2.0 ** -A_FRAC))
            dsum = dz
        else:
            R, offs, rec = recs[pix[l]]
            o = R.base + offs[l]
            dzv = _A(R.store, o, pix[l], n_o, rec)
            e.ew("i2f", dzv, _mat(gs[l], pix[l], n_o))
            e.ew("scale", dzv, dzv, imm=f32_bits(2.0 ** -G_FRAC))
            avv = _A(R.store, o + n_o, pix[l], n_i, rec)
            e.ew("i2f", avv, pats[l])
            e.ew("scale", avv, avv, imm=f32_bits(2.0 ** -A_FRAC))
            dz, av = _A(R.store, o, n_o, 1, 1), _A(R.store, o + n_o, n_i, 1, 1)
            dsum = mem.tmp(n_o)        # sum over pixels (exact: multiples of 2^-7 below 2^5)
            e.red("sum", dsum, dzv.T)
        dzs[l], avs[l] = dz, av
        # biases: b = sat16(b - f2i(bias_lr dz 2^12)), as b + f2i((-bias_lr dz) 2^12) (exact)
        db = mem.tmp(n_o)
        e.ew("scale", db, dsum, imm=f32_bits(-float(_F32(s.bias_lr))))
        e.ew("scale", db, db, imm=f32_bits(2.0 ** B_FRAC))
        e.ew("f2i", db, db, imm=0)
        e.ew("iadd", P[f"b{l}"], P[f"b{l}"], db, 16)
    e.mark("backward")
    for gi, (p_count, layers) in enumerate(groups):
        if not layers:
            continue
        if p_count == 1:
            _emit_rank_reduce(e, mem, P, layers, shapes, dzs, avs, s, "", 0, since=True)
            e.mark("dense")
            continue
        R, offs, rec = recs[p_count]
        e.loop(p_count, (rec, len(layers)))
        _emit_rank_reduce(e, mem, P, layers, shapes, dzs, avs, s, f".p{p_count}", 1,
                          since=False)
        e.endloop()
        for l in layers:
            e.ew("addi", P[f"since{l}"], P[f"since{l}"], imm=f32_bits(1.0))
        e.mark("conv")


def _emit_rank_reduce(e, mem, P, layers, shapes, dzs, avs, s, tag, step, since):
    """One rankReduce of each of ``layers`` (``golden.lrt.project``, ``core``, the Jacobi SVD
    of their cores at once, ``reduce_rotate``) on the columns ``dzs[l]``, ``avs[l]``; inside a
    pixel LOOP (``step`` 1) they and the sign seeds step with the pixel (increments 0, 1)."""
    r, q, nl = s.rank, s.rank + 1, len(layers)
    e.seed_step = 2 * step
    # rankReduce, part 1 per layer: Gram-Schmidt, condition check, core
    cb = mem.region(f"cores{tag}", "scratch", nl * 2 * q, q)    # per layer: A (q rows), V (q rows)
    LS = 2 * q * q
    proj = []
    for j, l in enumerate(layers):
        n_o, n_i = shapes[l]
        QL = mem.region(f"QL{l}", "scratch", n_o, q)
        QR = mem.region(f"QR{l}", "scratch", n_i, q)
        cl = mem.region(f"cl{l}", "scratch", q)
        cr = mem.region(f"cr{l}", "scratch", q)
        for Qf, qi, sc, v0, c in ((QL, P[f"ql{l}"], P[f"sl{l}"], dzs[l], cl),
                                  (QR, P[f"qr{l}"], P[f"sr{l}"], avs[l], cr)):
            head = Qf.col(0, r)
            _unpack16(e, head, qi, r)
            e.ew("mul", head, head, sc)
            v = Qf.col(r)                                   # the new direction, in place
            e.ew("copy", v, v0, step=(0, step, 0))
            for jj in range(r):
                e.dot(c.at(jj, 0), Qf.col(jj), v)
                t = mem.tmp(v.rows)
                e.ew("mul", t, c.at(jj, 0), Qf.col(jj))
                e.ew("sub", v, v, t)
            ss = mem.tmp(1)
            e.dot(ss, v, v)
            e.sqrt(c.at(r, 0), ss)
            e.ew("addi", c.at(r, 0), c.at(r, 0), imm=f32_bits(float(lrt.EPS_GS)))
            e.ew("recip", ss, c.at(r, 0))
            e.ew("mul", v, v, ss)
        skip = mem.region(f"skip{l}", "scratch", 1)
        t = mem.tmp(1)
        e.ew("mul", t, cl.at(r, 0), cr.at(r, 0))
        e.ew("scale", t, t, imm=f32_bits(float(_F32(s.kappa))))
        e.cmp("lt", skip, t, P[f"cx{l}"].at(0, 0))
        C = _A("scratch", cb.base + j * LS, q, q, q)
        e.mm(C, cl, cr.T)
        diag = _A("scratch", C.base, 1, r, 0, q + 1)
        e.ew("add", diag, diag, P[f"cx{l}"])
        Vm = _A("scratch", C.base + q * q, q, q, q)
        e.fill(Vm, 0)
        e.fill(_A("scratch", Vm.base, 1, q, 0, q + 1), f32_bits(1.0))
        proj.append((QL, QR, skip))
    if not tag:
        e.mark("project")
    U, sig, V = _emit_jacobi(e, mem, cb, nl, q, tag)
    if not tag:
        e.mark("svd")
    for j, l in enumerate(layers):
        n_o, n_i = shapes[l]
        QL, QR, skip = proj[j]
        _emit_reduce_rotate(e, mem, P, l, QL, QR, skip, U[j], sig.row(j), V[j], s, n_o, n_i)
        if since:
            e.ew("addi", P[f"since{l}"], P[f"since{l}"], imm=f32_bits(1.0))


def _emit_jacobi(e, mem, cb, nl, q, tag=""):
    """``golden.svd.jacobi_svd`` of every layer's core (``cb``: per layer A then V = I, q rows
    each). Returns per layer U (q x q) and V views, and sigma (nl x q)."""
    k = e.k
    LS = 2 * q * q
    rounds = pivot_schedule(q)
    npm = max(len(pr) for pr in rounds)
    G = mem.region("jac.gram" + tag, "scratch", nl * npm, 4)           # [layer][pair] 2x2
    R = mem.region("jac.rot" + tag, "scratch", nl * npm, 4)
    TX = mem.region("jac.tmp" + tag, "scratch", npm * nl * 2 * q, 2)  # [pair][layer][row] 2 words

    def sc(arr_base, off, npairs):
        """[layer][pair] scalar view into a 4-word-per-pair array."""
        return _A("scratch", arr_base + off, nl, npairs, 4 * npm, 4)

    for _ in range(SWEEPS):
        for pairs in rounds:
            npr = len(pairs)
            mark = mem.mark()
            for kk, (p, s_) in enumerate(pairs):
                Xa = _A("scratch", cb.base + p, 2, q, s_ - p, q)        # A cols p, s as rows
                Xb = _A("scratch", cb.base + p, q, 2, q, s_ - p)
                Gk = _A("scratch", G.base + 4 * kk, 2, 2, 2, 1)
                e.mm(Gk, Xa, Xb, batch=nl, bs=(4 * npm, LS, LS))
            alpha, gamma, beta = sc(G.base, 0, npr), sc(G.base, 1, npr), sc(G.base, 3, npr)

            def t():
                a = mem.tmp(nl, npr)
                return a

            d, g2, w, x = t(), t(), t(), t()
            e.ew("sub", d, beta, alpha)
            e.ew("add", g2, gamma, gamma)
            e.ew("mul", w, d, d)
            e.ew("mul", x, g2, g2)
            e.ew("add", w, w, x)
            root = t()
            e.sqrt(root, w)
            den = t()
            e.bit("and", den, d, k(("bits", _ABS)))
            e.ew("add", den, den, root)
            e.ew("recip", den, den)
            tt = t()
            e.ew("mul", tt, g2, den)
            # clamp to [-1, 1]: min(t, 1) = -max(-t, -1), then max(., -1)
            e.ew("scale", tt, tt, imm=f32_bits(-1.0))
            e.ew("max", tt, tt, k(-1.0))
            e.ew("scale", tt, tt, imm=f32_bits(-1.0))
            e.ew("max", tt, tt, k(-1.0))
            neg, tn = t(), t()
            e.cmp("lt", neg, d, k(0.0))
            e.ew("scale", tn, tt, imm=f32_bits(-1.0))
            e.sel(tt, neg, tn, tt)
            gz = t()
            e.cmp("eq", gz, gamma, k(0.0))
            e.bit("andn", tt, tt, gz)
            c = t()
            e.ew("mul", c, tt, tt)
            e.ew("addi", c, c, imm=f32_bits(1.0))
            e.ew("rsqrt", c, c)
            sn = t()
            e.ew("mul", sn, c, tt)
            e.ew("copy", sc(R.base, 0, npr), c)
            e.ew("copy", sc(R.base, 3, npr), c)
            e.ew("copy", sc(R.base, 1, npr), sn)
            e.ew("scale", sc(R.base, 2, npr), sn, imm=f32_bits(-1.0))
            for kk, (p, s_) in enumerate(pairs):
                X = _A("scratch", cb.base + p, 2 * q, 2, q, s_ - p)
                Rk = _A("scratch", R.base + 4 * kk, 2, 2, 2, 1)
                Tk = _A("scratch", TX.base + kk * nl * 4 * q, 2 * q, 2, 2, 1)
                e.mm(Tk, X, Rk, batch=nl, bs=(4 * q, LS, 4 * npm))
                e.ew("copy", _A("scratch", cb.base + p, nl * 2 * q, 2, q, s_ - p),
                     _A("scratch", Tk.base, nl * 2 * q, 2, 2, 1))
            mem.release(mark)
    # column norms, sort (odd-even transposition), sigma and U
    N = mem.region("jac.norms" + tag, "scratch", nl, q)
    for l in range(nl):
        col = _A("scratch", cb.base + l * LS, 1, q, 0, q)          # column j as a 1 x q row
        Al = _A("scratch", cb.base + l * LS, q, 1, q, 0)
        desc = Descriptor(1, 1, q, View("scratch", col.base, 0, q, 1),
                          View("scratch", Al.base, q, 0, 1), View("scratch", N.base + l * q, 0, 0, 1),
                          batch=q)
        e.ins.append(Contract(desc))
    SW = mem.region("jac.swap" + tag, "scratch", nl, q)
    for pas in range(q):
        lefts = list(range(pas % 2, q - 1, 2))
        if not lefts:
            continue
        npr = len(lefts)
        mark = mem.mark()
        Ln = _A("scratch", N.base + lefts[0], nl, npr, q, 2)
        Rn = _A("scratch", N.base + lefts[0] + 1, nl, npr, q, 2)
        m = _A("scratch", SW.base, nl, npr, q, 1)
        e.cmp("lt", m, Ln, Rn)
        _swap(e, mem, Ln, Rn, m)
        for l in range(nl):
            base = cb.base + l * LS + lefts[0]
            Lc = _A("scratch", base, 2 * q, npr, q, 2)
            Rc = _A("scratch", base + 1, 2 * q, npr, q, 2)
            ml = _A("scratch", SW.base + l * q, 2 * q, npr, 0, 1)
            _swap(e, mem, Lc, Rc, ml)
        mem.release(mark)
    kq = mem.tmp(nl, q)
    zq = mem.tmp(nl, q)
    sig = mem.region("jac.sigma" + tag, "scratch", nl, q)
    e.ew("rsqrt", kq, N)
    e.cmp("eq", zq, N, k(0.0))
    e.ew("mul", sig, N, kq)
    e.bit("andn", sig, sig, zq)
    Us, Vs = [], []
    for l in range(nl):
        Al = _A("scratch", cb.base + l * LS, q, q, q)
        e.ew("mul", Al, Al, kq.row(l).bcast(q, q))
        e.bit("andn", Al, Al, zq.row(l).bcast(q, q))
        Us.append(Al)
        Vs.append(_A("scratch", cb.base + l * LS + q * q, q, q, q))
    return Us, sig, Vs


def _swap(e, mem, a, b, m):
    """Swap ``a`` and ``b`` where mask ``m`` is set (views of equal shape)."""
    mark = mem.mark()
    t1, t2, t3, t4 = (mem.tmp(a.rows, a.cols) for _ in range(4))
    e.bit("and", t1, b, m)
    e.bit("andn", t2, a, m)
    e.bit("and", t3, a, m)
    e.bit("andn", t4, b, m)
    e.bit("or", a, t1, t2)
    e.bit("or", b, t3, t4)
    mem.release(mark)


def _emit_reduce_rotate(e, mem, P, l, QL, QR, skip, U, sig, V, s, n_o, n_i):
    """Steps 4-5 of ``golden.lrt.reduce_rotate`` for layer ``l`` (``sig``: 1 x q)."""
    k = e.k
    r, q = s.rank, s.rank + 1
    mark = mem.mark()
    cxn = mem.tmp(1, q)
    if s.variant == "biased":
        Ur, Vr = U, V
        e.ew("copy", cxn, sig)
        ge = None
    else:
        Ur, Vr, ge = _emit_okron(e, mem, sig, U, V, cxn, P, l, q)
    # delete column m0 (biased: the last): new column j = ge[j] ? col j+1 : col j
    Uk = mem.tmp(q, r)
    Vk = mem.tmp(q, r)
    cxk = mem.tmp(1, r)
    if ge is None:
        e.ew("copy", Uk, Ur.col(0, r))
        e.ew("copy", Vk, Vr.col(0, r))
        e.ew("copy", cxk, cxn.col(0, r))
    else:
        gm = ge.col(0, r)
        e.sel(Uk, gm.bcast(q, r), Ur.col(1, r), Ur.col(0, r))
        e.sel(Vk, gm.bcast(q, r), Vr.col(1, r), Vr.col(0, r))
        e.sel(cxk, gm, cxn.col(1, r), cxn.col(0, r))
    for Qf, Wk, qname, sname, n in ((QL, Uk, f"ql{l}", f"sl{l}", n_o),
                                    (QR, Vk, f"qr{l}", f"sr{l}", n_i)):
        Qn = mem.tmp(n, r)
        e.mm(Qn, Qf, Wk)
        # quantize_basis: step = max|Q| 2^-15, q16 = clamp(f2i(Q recip(step)), +-32767)
        ab = mem.tmp(n, r)
        e.bit("and", ab, Qn, k(("bits", _ABS)))
        rm = mem.tmp(n)
        e.red("max", rm, ab)
        step = mem.tmp(1)
        e.red("max", step, rm.T)
        e.ew("scale", step, step, imm=f32_bits(2.0 ** -15))
        inv, sz = mem.tmp(1), mem.tmp(1)
        e.ew("recip", inv, step)
        e.ew("mul", Qn, Qn, inv)
        e.cmp("eq", sz, step, k(0.0))
        e.bit("andn", Qn, Qn, sz)
        e.ew("f2i", Qn, Qn, imm=0)
        e.ew("requant", Qn, Qn, k(("bits", _rq(1, 0))), _bounds(-32767, 32767))
        pk = mem.tmp(n, -(-r // 2))             # the new entries two to a word
        e.ew("copy", pk, P[qname])
        _pack16(e, pk, Qn, r)
        e.sel(P[qname], skip, P[qname], pk)
        e.sel(P[sname], skip, P[sname], step)
    e.sel(P[f"cx{l}"], skip, P[f"cx{l}"], cxk)
    one = mem.tmp(1)
    e.bit("and", one, skip, k(1.0))
    e.ew("add", P[f"skipped{l}"], P[f"skipped{l}"], one)
    mem.release(mark)


def _emit_okron(e, mem, sig, U, V, cxn, P, l, q):
    """``golden.lrt._okron`` and the mixing: returns (U M, V M, tail mask ge (1 x q))."""
    k = e.k
    suf = mem.tmp(1, q)
    e.ew("copy", suf.at(0, q - 1), sig.at(0, q - 1))
    for j in range(q - 2, -1, -1):
        e.ew("add", suf.at(0, j), sig.at(0, j), suf.at(0, j + 1))
    kk = e.kk                                          # q-1, q-2, .., 0
    ok = mem.tmp(1, q)
    e.ew("mul", ok, kk, sig)
    e.cmp("le", ok, ok, suf)
    ge = mem.region(None, "scratch", 1, q)
    e.ew("copy", ge.at(0, 0), ok.at(0, 0))
    for j in range(1, q):
        e.bit("or", ge.at(0, j), ge.at(0, j - 1), ok.at(0, j))
    first = mem.tmp(1, q)
    e.ew("copy", first.at(0, 0), ge.at(0, 0))
    e.bit("andn", first.col(1, q - 1), ge.col(1, q - 1), ge.col(0, q - 1))

    def take(d, x):
        """d = x[m0] (the OR of x & first)."""
        t = mem.tmp(1, q)
        e.bit("and", t, x, first)
        e.ew("copy", d, t.at(0, 0))
        for j in range(1, q):
            e.bit("or", d, d, t.at(0, j))

    tv, kv = mem.tmp(1), mem.tmp(1)
    take(tv, suf)
    take(kv, kk)
    ratio = mem.tmp(1, q)
    rt = mem.tmp(1)
    e.ew("mul", ratio, sig, kv)
    e.ew("recip", rt, tv)
    e.ew("mul", ratio, ratio, rt)
    x0 = mem.tmp(1, q)
    e.ew("sub", x0, k(1.0), ratio)
    e.ew("max", x0, x0, k(0.0))
    e.sqrt(x0, x0)
    e.bit("and", x0, x0, ge)
    tz, f1 = mem.tmp(1), mem.tmp(1, q)
    e.cmp("eq", tz, tv, k(0.0))
    e.bit("and", f1, first, k(1.0))
    e.sel(x0, tz, f1, x0)
    v, v1 = mem.tmp(1, q), mem.tmp(1, q)
    e.ew("addi", v1, x0, imm=f32_bits(1.0))
    e.sel(v, first, v1, x0)
    x0m = mem.tmp(1)
    take(x0m, x0)
    e.ew("addi", x0m, x0m, imm=f32_bits(1.0))
    e.ew("recip", x0m, x0m)
    H = mem.tmp(q, q)
    e.mm(H, v.T, v)
    e.ew("mul", H, H, x0m)
    eye = mem.tmp(q, q)
    e.fill(eye, 0)
    e.fill(_A("scratch", eye.base, 1, q, 0, q + 1), f32_bits(1.0))
    e.ew("sub", H, eye, H)
    sg = mem.tmp(1, q)
    e.fill(sg, _NEG0)
    e.ins.append(Random("raccum", 1, q, sg.view(), k(1.0).bcast(1, q).view(),
                        _seed_view(e, l), step=(0, 0, e.seed_step)))
    e.sel(sg, ge, sg, k(1.0))
    e.ew("mul", H, H, sg.T.bcast(q, q))                       # D H: row i scaled by d_i
    share = mem.tmp(1)
    e.ew("recip", share, kv)
    e.ew("mul", share, tv, share)
    e.sel(cxn, ge, share, sig)
    Um, Vm = mem.tmp(q, q), mem.tmp(q, q)
    e.mm(Um, U, H)
    e.mm(Vm, V, H)
    return Um, Vm, ge


def _seed_view(e, l):
    """Layer ``l``'s sign seed word (its first pixel's; a pixel LOOP steps it by increment 1)."""
    r = e.seeds
    return View(r.store, r.base + e.seed_word[l], 0, 0)


# ------------------------------------------------------------------------------------------
# the read-out program


def _emit_readout(e, mem, P, shapes, s, layers, rows=8):
    """Per layer: the factors (and max-norm), then two passes over ``rows``-row chunks of
    ``G = L R^T``: the first counts the non-zero entries of delta (the 1% rule needs the whole
    count before any write), the second recomputes the chunk (the same contraction, the same
    bits) and writes it. Scratch holds the factors and one chunk, never a weight-sized G."""
    k = e.k
    r = s.rank
    for l in layers:
        n_o, n_i = shapes[l]
        mark = mem.mark()
        root = mem.tmp(1, r)
        e.sqrt(root, P[f"cx{l}"])
        fac = []
        for f, qname, sname, n in (("L", f"ql{l}", f"sl{l}", n_o), ("R", f"qr{l}", f"sr{l}", n_i)):
            F = mem.tmp(n, r)
            _unpack16(e, F, P[qname], r)
            e.ew("mul", F, F, P[sname])
            e.ew("mul", F, F, root)
            if s.norm == "max":
                _emit_maxnorm(e, mem, F, P[f"mn{l}{f}.bk"], P[f"mn{l}{f}.xmv"])
            fac.append(F)
        scl = None
        if s.norm == "max":
            scl = mem.tmp(1)
            e.sqrt(scl, P[f"since{l}"])
            e.ew("scale", scl, scl, imm=f32_bits(float(_F32(s.lr))))
        cnt = mem.tmp(1)
        e.fill(cnt, 0)
        flag = mem.tmp(1)
        ch_rows = min(rows, n_o)
        G = mem.tmp(ch_rows, n_i)
        nz = mem.tmp(ch_rows, n_i)
        Wn = mem.tmp(ch_rows, n_i)
        rsum = mem.tmp(ch_rows)

        def delta(r0, nr):
            """-delta of rows r0 .. r0+nr-1 into G (int words)."""
            Gc = G.row(0, nr)
            e.mm(Gc, fac[0].row(r0, nr), fac[1].T)
            if scl is not None:
                e.ew("mul", Gc, Gc, scl)
            else:
                e.ew("scale", Gc, Gc, imm=f32_bits(float(_F32(s.lr))))
            # -delta = f2i(G * -2^7) (f2i nearest is odd-symmetric: exactly -delta)
            e.ew("scale", Gc, Gc, imm=f32_bits(-(2.0 ** W_FRAC)))
            e.ew("f2i", Gc, Gc, imm=0)
            return Gc

        chunks = [(r0, min(ch_rows, n_o - r0)) for r0 in range(0, n_o, ch_rows)]
        for r0, nr in chunks:                  # pass 1: count the non-zero entries (exact)
            Gc = delta(r0, nr)
            z = nz.row(0, nr)
            e.ew("i2f", z, Gc)
            e.cmp("eq", z, z, k(0.0))
            e.bit("andn", z, k(1.0), z)
            e.red("sum", rsum.row(0, nr), z)
            e.ins.append(Reduce("sum", 1, nr, View(cnt.store, cnt.base, 0, 0),
                                rsum.row(0, nr).T.view(), accumulate=True))
        thr = math.ceil(lrt.MIN_WRITE_FRACTION * n_o * n_i)
        e.fill(flag, f32_bits(float(thr)))
        e.cmp("le", flag, flag, cnt)
        for r0, nr in chunks:                  # pass 2: write where the flag is set
            Gc = delta(r0, nr)
            W = P[f"w{l}"].row(r0, nr)
            Wc = Wn.row(0, nr)
            e.ew("iadd", Wc, W, Gc, 8)
            # counters: +1 where the flag is set and the stored value changes
            ch, ch2 = nz.row(0, nr), Gc
            e.ew("i2f", ch, W)
            e.ew("i2f", ch2, Wc)
            e.cmp("eq", ch, ch, ch2)
            e.bit("andn", ch, flag, ch)
            e.bit("and", ch, ch, k(("bits", 1)))
            C = P[f"cnt{l}"].row(r0, nr)
            e.ew("iadd", C, C, ch, 32)
            e.sel(W, flag, Wc, W)
        e.bit("and", P[f"written{l}"], flag, k(1.0))
        for name in (f"ql{l}", f"qr{l}", f"sl{l}", f"sr{l}", f"cx{l}", f"since{l}"):
            e.bit("andn", P[name], P[name], flag)
        mem.release(mark)


def _emit_maxnorm(e, mem, F, bk, xmv):
    """``golden.lrt.MaxNorm`` on F in place (state words bk = beta^k, xmv)."""
    k = e.k
    mn = lrt.MaxNorm()
    xm = mem.tmp(1)
    ab = mem.tmp(F.rows, F.cols)
    e.bit("and", ab, F, k(("bits", _ABS)))
    rm = mem.tmp(F.rows)
    e.red("max", rm, ab)
    e.red("max", xm, rm.T)
    e.ew("addi", xm, xm, imm=f32_bits(float(mn.eps)))
    e.ew("scale", bk, bk, imm=f32_bits(float(mn.beta)))
    t = mem.tmp(1)
    e.ew("scale", xmv, xmv, imm=f32_bits(float(mn.beta)))
    e.ew("scale", t, xm, imm=f32_bits(float(mn.one_minus_beta)))
    e.ew("add", xmv, xmv, t)
    xh = mem.tmp(1)
    e.ew("sub", xh, k(1.0), bk)
    e.ew("recip", xh, xh)
    e.ew("mul", xh, xmv, xh)
    e.ew("max", xh, xm, xh)
    e.ew("recip", xh, xh)
    e.ew("mul", F, F, xh)


# ------------------------------------------------------------------------------------------
# memory of the compiled programs


_CLASSES = (("weights", ("w",)), ("biases", ("b",)), ("write_counters", ("cnt",)),
            ("bases", ("ql", "qr")),
            ("lrt_scalars", ("sl", "sr", "cx", "since", "skipped", "written", "mn")),
            ("sample_io", ("x", "onehot", "seeds", "logits")))


def _class_of(name):
    for cls, prefixes in _CLASSES:
        for p in prefixes:
            rest = name[len(p):]
            if name.startswith(p) and (rest[:1].isdigit() or name in ("x", "onehot", "seeds",
                                                                       "logits")):
                return cls
    return None


def lrt_memory(cl):
    """On-chip memory of the compiled LRT programs by class, from the memory map (bytes: 4
    per word, as compiled: int8 weights and 16-bit biases each in one word, the 16-bit basis
    entries two to a word), the auxiliary memory per layer against the paper's ``r (n_i +
    n_o)`` 16-bit-word bound, and the SGD accumulator baseline's auxiliary memory (a weight-sized FP32 array)."""
    mm = cl.memory_map
    words = {cls: 0 for cls, _ in _CLASSES}
    for name, reg in mm.items():
        cls = _class_of(name)
        if cls is not None:
            words[cls] += reg.size
    sizes = cl.sample.store_sizes
    words["scratch_peak"] = sizes["scratch"]
    program_words = 16 * max(len(p.instructions) for p in cl.programs.values())
    r = cl.settings.rank
    layers = []
    for l, (n_o, n_i) in enumerate(cl.shapes):
        bases = mm[f"ql{l}"].size + mm[f"qr{l}"].size
        scal = sum(mm[n].size for n in (f"sl{l}", f"sr{l}", f"cx{l}", f"since{l}",
                                         f"skipped{l}", f"written{l}", f"mn{l}L.bk",
                                         f"mn{l}L.xmv", f"mn{l}R.bk", f"mn{l}R.xmv"))
        bound16 = r * (n_i + n_o)
        layers.append({"shape": [n_o, n_i], "bases_words": bases, "scalar_words": scal,
                       "aux_bytes_as_compiled": 4 * (bases + scal),
                       "bound_16bit_words": bound16, "bound_bytes": 2 * bound16,
                       "weight_cells": n_o * n_i,
                       "sgd_accumulator_bytes": 4 * n_o * n_i})
    total = 4 * sum(sizes.values())
    return {"words": words, "bytes": {k: 4 * v for k, v in words.items()},
            "store_words": dict(sizes), "total_bytes": total, "program_bytes": 4 * program_words,
            "layers": layers,
            "labels": {
                "bytes": "as compiled: 4 bytes per word (int8 weights and 16-bit biases each "
                         "held in one 32-bit word; 16-bit basis entries two to a word)",
                "aux_bytes_as_compiled": "the layer's low-rank accumulator: bases (16-bit "
                                         "values, two per word) + its FP32 scalars (steps, "
                                         "c_x, the sample counter, max-norm state, counters)",
                "scratch_peak": "transients of either program (activations, the projection "
                                "and core work, one read-out chunk), shared by the layers",
                "write_counters": "instrumentation: writes per weight cell, not part of the "
                                  "rule"}}


# ------------------------------------------------------------------------------------------
# the Jacobi SVD alone (its chip test on random and ill-conditioned matrices)


@dataclass
class CompiledSVD:
    """:func:`compile_svd`'s program: ``count`` q x q matrices in, U, sigma, V out."""
    program: Program
    count: int
    q: int

    def image(self, matrices):
        a = np.asarray(matrices, dtype=np.float32)
        if a.shape != (self.count, self.q, self.q):
            raise ValueError(f"the program factors {self.count} {self.q}x{self.q} matrices, "
                             f"not shape {a.shape}")
        img = {s: np.zeros(n, np.uint32) for s, n in self.program.store_sizes.items()}
        r = self.program.memory_map["svd.in"]
        img[r.store][r.base:r.base + r.size] = a.view(np.uint32).ravel()
        return img

    def result(self, image):
        """``(U, sigma, V)`` as float32 arrays from a run's image."""
        mm, n, q = self.program.memory_map, self.count, self.q
        cores = image["scratch"][mm["cores"].base:][:n * 2 * q * q].view(np.float32)
        cores = cores.reshape(n, 2 * q, q)
        sg = mm["jac.sigma"]
        sigma = image["scratch"][sg.base:sg.base + sg.size].view(np.float32).reshape(n, q)
        return cores[:, :q].copy(), sigma.copy(), cores[:, q:].copy()


def compile_svd(count, q):
    """``golden.svd.jacobi_svd`` of ``count`` q x q matrices (region ``svd.in``, act store) as
    one program: the same emitted sequence as the per-sample program's."""
    if count < 1 or q < 2:
        raise ValueError(f"compile_svd needs count >= 1 and q >= 2, not count={count}, q={q}")
    mem = _Mem()
    src = mem.region("svd.in", "act", count * q, q)
    consts = [0.0, 1.0, -1.0, ("bits", _ABS)]
    kreg = mem.region("const", "scratch", len(consts))
    e = _Emit(mem)
    e.load_constants(kreg, consts)
    cb = mem.region("cores", "scratch", count * 2 * q, q)
    for l in range(count):
        A = _A("scratch", cb.base + l * 2 * q * q, q, q, q)
        e.ew("copy", A, _A(src.store, src.base + l * q * q, q, q, q))
        Vm = _A("scratch", A.base + q * q, q, q, q)
        e.fill(Vm, 0)
        e.fill(_A("scratch", Vm.base, 1, q, 0, q + 1), f32_bits(1.0))
    _emit_jacobi(e, mem, cb, count, q)
    return CompiledSVD(Program(e.ins + [End()], mem.sizes(), dict(mem.map)), count, q)


# ------------------------------------------------------------------------------------------
# streaming batch norm alone (the rule's stream statistics on the chip)


@dataclass
class CompiledSBN:
    """:func:`compile_streaming_bn`'s program: one sample's ``pixels x channels`` FP32 input
    in ``sbn.x``, the statistics' state (``sbn.mu_s``, ``sbn.sq_s``: 16-bit values as FP32,
    ``sbn.eta_k``) kept across runs, the normalized output in ``sbn.y``."""
    program: Program
    pixels: int
    channels: int
    batch: int

    def _r(self, name):
        return self.program.memory_map[name]

    def initial_image(self):
        """Stores of the program with the state of a fresh ``StreamingBatchNorm``."""
        img = {s: np.zeros(n, np.uint32) for s, n in self.program.store_sizes.items()}
        r = self._r("sbn.eta_k")
        img[r.store][r.base] = np.float32(1.0).view(np.uint32)
        return img

    def set_sample(self, image, x):
        x = np.asarray(x, dtype=np.float32).reshape(-1, self.channels)
        if x.shape != (self.pixels, self.channels):
            raise ValueError(f"the program normalizes {self.pixels} x {self.channels} samples, "
                             f"not shape {x.shape}")
        r = self._r("sbn.x")
        image[r.store][r.base:r.base + r.size] = x.view(np.uint32).ravel()

    def get(self, image, name):
        r = self._r(name)
        return image[r.store][r.base:r.base + r.size].view(np.float32).copy()

    def output(self, image):
        return self.get(image, "sbn.y").reshape(self.pixels, self.channels)


def compile_streaming_bn(pixels, channels, batch, eps=1e-5):
    """One sample of ``golden.lrt.StreamingBatchNorm(channels, batch, eps)`` as a program of
    the shared instruction table: the per-channel mean and variance over the pixels (``rsum``
    in pixel order), the 16-bit stream statistics (``f2i`` nearest, ``requant`` clamp, ``i2f``),
    the bias correction by ``recip(1 - eta^step)`` and the output ``(x - mu) rsqrt(var +
    eps)``: the same FP32 operations in the same order as the golden class."""
    for name, v in (("pixels", pixels), ("channels", channels), ("batch", batch)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"compile_streaming_bn needs a positive integer {name}, not {v!r}")
    ref = lrt.StreamingBatchNorm(channels, batch, eps)
    P, C = pixels, channels
    mem = _Mem()
    x = mem.region("sbn.x", "act", P, C)
    y = mem.region("sbn.y", "act", P, C)
    mu_s = mem.region("sbn.mu_s", "param", 1, C)
    sq_s = mem.region("sbn.sq_s", "param", 1, C)
    eta_k = mem.region("sbn.eta_k", "param", 1)
    consts = [1.0, ("bits", _rq(1, 0))]
    kreg = mem.region("const", "scratch", len(consts))
    e = _Emit(mem)
    e.load_constants(kreg, consts)
    f32 = lambda v: f32_bits(float(v))                                      # noqa: E731
    inv_p = f32(np.float32(1.0 / P))
    mu_i, var_i = mem.tmp(1, C), mem.tmp(1, C)
    dev = mem.tmp(P, C)
    e.red("sum", mu_i.T, x.T)                              # sum over the pixels, in order
    e.ew("scale", mu_i, mu_i, imm=inv_p)
    e.ew("sub", dev, x, mu_i)
    e.ew("mul", dev, dev, dev)
    e.red("sum", var_i.T, dev.T)
    e.ew("scale", var_i, var_i, imm=inv_p)
    e.ew("scale", eta_k, eta_k, imm=f32(ref.eta))
    second = mem.tmp(1, C)
    e.ew("mul", second, mu_i, mu_i)
    e.ew("add", second, var_i, second)
    t1, t2 = mem.tmp(1, C), mem.tmp(1, C)
    for state, new in ((mu_s, mu_i), (sq_s, second)):     # eta s + (1 - eta) new, in 16 bits
        e.ew("scale", t1, state, imm=f32(ref.eta))
        e.ew("scale", t2, new, imm=f32(ref.one_minus_eta))
        e.ew("add", t1, t1, t2)
        e.ew("scale", t1, t1, imm=f32(2.0 ** ref.FRAC))
        e.ew("f2i", t1, t1, imm=0)
        e.ew("requant", state, t1, e.k(("bits", _rq(1, 0))), _bounds(-(1 << 15), (1 << 15) - 1))
        e.ew("i2f", state, state)
        e.ew("scale", state, state, imm=f32(2.0 ** -ref.FRAC))
    c = mem.tmp(1)                                        # the bias correction
    e.ew("sub", c, e.k(1.0), eta_k)
    e.ew("recip", c, c)
    mu, var = mem.tmp(1, C), mem.tmp(1, C)
    e.ew("mul", mu, mu_s, c)
    e.ew("mul", var, sq_s, c)
    e.ew("mul", t1, mu, mu)
    e.ew("sub", var, var, t1)
    e.fill(t2, 0)
    e.ew("max", var, var, t2)
    e.ew("addi", var, var, imm=f32(ref.eps))
    e.ew("rsqrt", var, var)
    e.ew("sub", y, x, mu)
    e.ew("mul", y, y, var)
    return CompiledSBN(Program(e.ins + [End()], mem.sizes(), dict(mem.map)), P, C, batch)


# ------------------------------------------------------------------------------------------
# a stepper on the golden interpreter


class InterpretedLRT:
    """Runs the compiled programs on the golden interpreter, sample by sample (the ``stepper``
    of :func:`ttrain.golden.lrt_online.run_online`)."""

    def __init__(self, model, settings):
        self.cl = compile_lrt(model.shapes, settings, getattr(model, "geometry", None))
        self.image = self.cl.initial_image(model)
        self.runs = dict.fromkeys(self.cl.programs, 0)

    def run(self, name):
        self.image, st = run(self.cl.programs[name], self.image)
        st.raise_for_error()
        self.runs[name] += 1
        return st

    def sample(self, x, label, index):
        """Train on one sample; returns the logits computed before training on it."""
        self.cl.set_sample(self.image, x, label, index)
        self.run("sample")
        return self.cl.get_f32(self.image, "logits").copy()

    @property
    def readout_schedule(self):
        """``(program, period, layers)`` of every read-out (``CompiledLRT.readout_schedule``)."""
        return self.cl.readout_schedule

    def readout(self, name="readout"):
        """Read-out program ``name``; returns the written flag of each of its layers."""
        self.run(name)
        layers = next(ls for n, _, ls in self.cl.readout_schedule if n == name)
        return [bool(self.cl.get_f32(self.image, f"written{l}")[0]) for l in layers]

    def weights(self):
        return self.cl.weights(self.image)

    def biases(self):
        return self.cl.biases(self.image)

    def counters(self):
        return self.cl.counters(self.image)

    def skipped(self):
        return [int(self.cl.get_f32(self.image, f"skipped{l}")[0])
                for l in range(len(self.cl.shapes))]

    def close(self):
        pass
