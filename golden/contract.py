"""Golden model of the contraction engine: ``C (+)= op(A) · op(B)`` over strided store views.

A contraction is described by a :class:`Descriptor`: the dimensions ``m``, ``n``, ``k``, a batch
count, three :class:`View` s (A is ``batch x m x k``, B is ``batch x k x n``, C is
``batch x m x n``) and an ``accumulate`` flag. A view is a store name, a base word address and
three word strides (row, column, batch); a transpose is a view with its row and column strides
swapped, so ``op(A)`` and ``op(B)`` need no flag of their own. Element ``[b, i, j]`` of a view
lives at word ``base + b * batch_stride + i * row_stride + j * col_stride`` of its store. All
strides are non-negative (a zero stride broadcasts).

Accumulation order (the engine's, reproduced bit for bit by :func:`contract`)::

    acc = C_old[b, i, j] if accumulate else -0.0
    for kk in 0, 1, ..., k-1:                         # increasing k, one rounding per step
        acc = fp32_add(acc, fp32_mul(A[b, i, kk], B[b, kk, j]))
    C[b, i, j] = acc

Split reduction (``split = s > 1``, a power of two; the wide engine's lane groups): the k
range is cut into ``s`` consecutive parts of ``kc`` terms, ``ceil(k / s)`` rounded up to an odd
number (part ``g`` covers ``g * kc .. min(k, (g + 1) * kc) - 1``; trailing parts may be short
or empty; odd, so that the groups' first words ``g * kc * stride`` fall in different banks of
a power-of-two banked store whenever the stride is odd), each summed in
increasing k as above, part 0 from C's old word (``accumulate``) or ``-0.0`` and every other
part from ``-0.0``; then the parts are folded in halves::

    while s > 1:                                      # fold: part g += part g + s/2
        s //= 2
        for g in range(s):
            part[g] = fp32_add(part[g], part[g + s])
    C[b, i, j] = part[0]

so ``s = 4`` gives ``(p0 + p2) + (p1 + p3)``. An empty part is ``-0.0`` and adding it changes
nothing (every part is an adder result, so ``x + (-0) == x`` bit for bit). ``split = 1`` is the
sequential order above. The order is part of the program: the compiler picks ``split`` per
descriptor for the machine's lanes and the golden model follows it.

Starting a fresh sum from ``-0.0`` is what the hardware does (the adder's second operand is a
constant instead of the accumulator) and is exactly "start from the first product": ``x + (-0)``
is ``x`` for every ``x`` under round-to-nearest-even, ``+0`` and ``-0`` included, and NaNs are
canonical either way. Multiply and add are rounded separately (no fused multiply-add); the
order per output does not depend on the engine's tiling or lane count.

Integer mode (``integer=True``, the quantized rules' datapath): every word's low 16 bits are a
signed 16-bit integer (int8 weights, zero-point-free int9 activations ``q - z`` and int16 values
all fit), products are exact and the sum is a two's complement int32 that wraps::

    acc = C_old[b, i, j] (as int32) if accumulate else 0
    C[b, i, j] = (acc + sum_kk sext16(A[b, i, kk]) * sext16(B[b, kk, j])) mod 2**32

Integer addition is associative, so the order of the sum does not matter in this mode (the
compiler keeps a legal program below ``2**31``, :func:`ttrain.golden.quant.acc_bound`). The
high 16 bits of an operand word are ignored.

A memory image is a ``dict`` mapping store name to a one-dimensional ``uint32`` array (the raw
FP32 words). :func:`contract` returns a new image; only C's words change.

Illegal descriptors raise :class:`ValueError` with a message that says what to change: a view
that reaches outside its store, a dimension that is zero or above the engine's limit, an unknown
store, a C view that writes one word twice, or a C view that overlaps A or B (the engine reads A
and B while it writes C, so such a descriptor has no single defined result). The engine flags
the first three in hardware (:data:`ERROR_CODES`); the last two are the caller's duty (the
compiler never emits them) and are only checked here.
"""

from dataclasses import dataclass

import numpy as np

from .numerics import fp32_add as _fp32_add, fp32_mul as _fp32_mul

__all__ = [
    "View", "Descriptor", "ERROR_CODES", "ERROR_NONE", "ERROR_STORE", "ERROR_DIM",
    "ERROR_A_RANGE", "ERROR_B_RANGE", "ERROR_C_RANGE",
    "contract", "check_descriptor", "validate", "view_addresses", "macs",
    "random_descriptor", "tt_linear_step", "BATCH_DEPENDENT", "MAX_SPLIT",
]

#: Error codes the engine reports (``error_code`` port) and :func:`check_descriptor` returns.
ERROR_NONE = 0
ERROR_STORE = 1      #: a view names a store the engine does not have
ERROR_DIM = 2        #: m, n, k or batch is zero or above the engine's limit
ERROR_A_RANGE = 3    #: A reaches past the end of its store
ERROR_B_RANGE = 4    #: B reaches past the end of its store
ERROR_C_RANGE = 5    #: C reaches past the end of its store

#: Largest ``split`` a descriptor can carry (the ISA's 4-bit log2 field holds 0..8).
MAX_SPLIT = 256

ERROR_CODES = {
    ERROR_NONE: "no error",
    ERROR_STORE: "unknown store",
    ERROR_DIM: "dimension zero or above the engine limit",
    ERROR_A_RANGE: "A outside its store",
    ERROR_B_RANGE: "B outside its store",
    ERROR_C_RANGE: "C outside its store",
}


def _check_int(name, value, minimum=0):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


@dataclass(frozen=True)
class View:
    """A strided matrix view into one store (a stack of ``batch`` matrices).

    Parameters
    ----------
    store : str
        Name of the store (key of the memory image).
    base : int
        Word address of element ``[0, 0, 0]``.
    row_stride, col_stride : int
        Word distance between consecutive rows / columns. Swap them to transpose.
    batch_stride : int
        Word distance between consecutive matrices of a batched contraction.
    """
    store: str
    base: int = 0
    row_stride: int = 0
    col_stride: int = 1
    batch_stride: int = 0

    def __post_init__(self):
        if not isinstance(self.store, str) or not self.store:
            raise TypeError(f"View.store must be a non-empty store name, not {self.store!r}")
        for name in ("base", "row_stride", "col_stride", "batch_stride"):
            object.__setattr__(self, name, _check_int(f"View.{name}", getattr(self, name)))

    @property
    def T(self):
        """The transposed view (row and column strides swapped)."""
        return View(self.store, self.base, self.col_stride, self.row_stride, self.batch_stride)

    def last_address(self, batch, rows, cols):
        """Return the highest word address touched by a ``batch x rows x cols`` view."""
        return (self.base + (batch - 1) * self.batch_stride + (rows - 1) * self.row_stride
                + (cols - 1) * self.col_stride)

    @classmethod
    def matrix(cls, store, base, rows, cols, *, transpose=False, batch_stride=0):
        """Return the view of a row-major ``rows x cols`` matrix stored at ``base``.

        With ``transpose=True`` the view is of its transpose (``cols x rows``).
        """
        view = cls(store, base, cols, 1, batch_stride)
        return view.T if transpose else view


@dataclass(frozen=True)
class Descriptor:
    """One contraction ``C (+)= A · B`` (see the module docstring for the exact semantics).

    Parameters
    ----------
    m, n, k : int
        C is ``m x n``; the sum runs over ``k``.
    a, b, c : View
        A (``m x k``), B (``k x n``) and C (``m x n``) views.
    accumulate : bool
        Add to C's old value instead of overwriting it.
    batch : int
        Number of independent contractions; each view advances by its ``batch_stride``.
    integer : bool
        Integer mode: sign-extended 16-bit operands, wrapping int32 sums (module docstring).
    split : int
        Reduction parts, a power of two (module docstring); 1 = the sequential order.
    """
    m: int
    n: int
    k: int
    a: View
    b: View
    c: View
    accumulate: bool = False
    batch: int = 1
    integer: bool = False
    split: int = 1

    def __post_init__(self):
        for name in ("m", "n", "k", "batch"):
            object.__setattr__(self, name, _check_int(f"Descriptor.{name}", getattr(self, name)))
        for name in ("a", "b", "c"):
            if not isinstance(getattr(self, name), View):
                raise TypeError(f"Descriptor.{name} must be a View, not {getattr(self, name)!r}")
        if not isinstance(self.accumulate, (bool, np.bool_)):
            raise TypeError(f"Descriptor.accumulate must be a bool, not {self.accumulate!r}")
        object.__setattr__(self, "accumulate", bool(self.accumulate))
        if not isinstance(self.integer, (bool, np.bool_)):
            raise TypeError(f"Descriptor.integer must be a bool, not {self.integer!r}")
        object.__setattr__(self, "integer", bool(self.integer))
        split = _check_int("Descriptor.split", self.split, 1)
        if split & (split - 1) or split > MAX_SPLIT:
            raise ValueError(f"Descriptor.split must be a power of two in 1..{MAX_SPLIT}, not "
                             f"{split}")
        object.__setattr__(self, "split", split)

    @property
    def kc(self):
        """Terms per reduction part: ``ceil(k / split)``, rounded up to odd when split > 1."""
        kc = -(-self.k // self.split)
        return kc | 1 if self.split > 1 else kc

    @property
    def macs(self):
        """Multiply-accumulates of this contraction (``batch * m * n * k``)."""
        return self.batch * self.m * self.n * self.k

    def transposed(self):
        """Return the equivalent descriptor for ``C^T (+)= B^T · A^T``.

        Same words, same per-output order; the engine maps its lanes to C's columns, so this
        changes which dimension is spread over the lanes.
        """
        return Descriptor(self.n, self.m, self.k, self.b.T, self.a.T, self.c.T,
                          self.accumulate, self.batch, self.integer, self.split)

    def shapes(self):
        """Return ``{"a": (batch, rows, cols), ...}`` for the three views."""
        return {"a": (self.batch, self.m, self.k), "b": (self.batch, self.k, self.n),
                "c": (self.batch, self.m, self.n)}


def macs(desc):
    """Return the multiply-accumulate count of ``desc``."""
    return desc.macs


def view_addresses(view, batch, rows, cols):
    """Return the ``batch x rows x cols`` array (int64) of word addresses of ``view``."""
    b = np.arange(batch, dtype=np.int64)[:, None, None] * view.batch_stride
    i = np.arange(rows, dtype=np.int64)[None, :, None] * view.row_stride
    j = np.arange(cols, dtype=np.int64)[None, None, :] * view.col_stride
    return view.base + b + i + j


def check_descriptor(desc, store_sizes, *, max_dim=None, max_split=None):
    """Return the engine's error code for ``desc`` (:data:`ERROR_NONE` when it is legal).

    Parameters
    ----------
    desc : Descriptor
    store_sizes : dict
        Store name -> size in words.
    max_dim : int or None
        Largest m, n, k and batch the engine accepts (``None``: no limit).
    max_split : int or None
        Largest ``split`` the engine accepts (``None``: no limit); above it is
        :data:`ERROR_DIM`.

    Checks in the engine's order: stores, dimensions (and split), then A, B and C ranges.
    """
    if not isinstance(desc, Descriptor):
        raise TypeError(f"desc must be a Descriptor, not {desc!r}")
    for view in (desc.a, desc.b, desc.c):
        if view.store not in store_sizes:
            return ERROR_STORE
    for dim in (desc.m, desc.n, desc.k, desc.batch):
        if dim == 0 or (max_dim is not None and dim > max_dim):
            return ERROR_DIM
    if max_split is not None and desc.split > max_split:
        return ERROR_DIM
    for code, (name, shape) in zip((ERROR_A_RANGE, ERROR_B_RANGE, ERROR_C_RANGE),
                                   desc.shapes().items()):
        view = getattr(desc, name)
        if view.last_address(*shape) >= store_sizes[view.store]:
            return code
    return ERROR_NONE


def contract(desc, image, *, max_dim=None, max_split=None):
    """Run one contraction on a memory image, in the engine's exact accumulation order.

    Parameters
    ----------
    desc : Descriptor
        The contraction.
    image : dict
        Store name -> one-dimensional ``uint32`` array of FP32 words. Not modified.
    max_dim : int or None
        Engine limit on m, n, k and batch (``None``: no limit).
    max_split : int or None
        Engine limit on ``split`` (``None``: no limit).

    Returns
    -------
    dict
        A new image (every array copied) with C's words replaced.

    Raises
    ------
    ValueError
        If the descriptor is illegal (see the module docstring); the message names the cause.
    """
    if not isinstance(image, dict):
        raise TypeError(f"image must be a dict of store name -> uint32 array, not {type(image)}")
    sizes = {}
    for name, words in image.items():
        words = np.asarray(words)
        if words.ndim != 1 or words.dtype != np.uint32:
            raise TypeError(f"store {name!r} must be a one-dimensional uint32 array, got "
                            f"{words.dtype} with shape {words.shape}")
        sizes[name] = words.size
    addr = validate(desc, sizes, max_dim=max_dim, max_split=max_split)
    shapes = desc.shapes()

    out = {name: np.array(words, dtype=np.uint32, copy=True) for name, words in image.items()}
    if desc.integer:
        out[desc.c.store][addr["c"]] = _int_contract(desc, image, addr)
        return out
    a = image[desc.a.store][addr["a"]].view(np.float32)        # batch x m x k
    b = image[desc.b.store][addr["b"]].view(np.float32)        # batch x k x n
    fresh = np.full(shapes["c"], -0.0, dtype=np.float32)
    parts = []
    for g in range(desc.split):                 # part g: terms g*kc .. (g+1)*kc - 1, in order
        acc = image[desc.c.store][addr["c"]].view(np.float32) if (
            g == 0 and desc.accumulate) else fresh
        for kk in range(g * desc.kc, min(desc.k, (g + 1) * desc.kc)):
            acc = _fp32_add(acc, _fp32_mul(a[:, :, kk, None], b[:, None, kk, :]))
        parts.append(acc)
    s = desc.split
    while s > 1:                                # fold in halves: part g += part g + s/2
        s //= 2
        parts = [_fp32_add(parts[g], parts[g + s]) for g in range(s)]
    out[desc.c.store][addr["c"]] = np.asarray(parts[0], dtype=np.float32).view(np.uint32)
    return out


def _sext16(words):
    return (words.astype(np.int64) & 0xFFFF) - ((words.astype(np.int64) & 0x8000) << 1)


def _int_contract(desc, image, addr):
    """Integer-mode C words (uint32): wrapping int32 sums of sign-extended 16-bit products."""
    a = _sext16(image[desc.a.store][addr["a"]])                # batch x m x k
    b = _sext16(image[desc.b.store][addr["b"]])                # batch x k x n
    # float64 matmul is exact here (|products| < 2**30, k < 2**16 terms: |sum| < 2**46).
    acc = np.rint(np.matmul(a.astype(np.float64), b.astype(np.float64))).astype(np.int64)
    if desc.accumulate:
        acc = acc + image[desc.c.store][addr["c"]].astype(np.int64)
    return (acc & 0xFFFFFFFF).astype(np.uint32)


def validate(desc, store_sizes, *, max_dim=None, max_split=None):
    """Raise :class:`ValueError` if ``desc`` is illegal on stores of ``store_sizes`` words.

    Returns the address arrays ``{"a": ..., "b": ..., "c": ...}`` (see :func:`view_addresses`)
    of a legal descriptor.
    """
    code = check_descriptor(desc, store_sizes, max_dim=max_dim, max_split=max_split)
    if code != ERROR_NONE:
        raise ValueError(_describe_error(code, desc, store_sizes, max_dim, max_split))
    shapes = desc.shapes()
    addr = {name: view_addresses(getattr(desc, name), *shapes[name]) for name in "abc"}
    c_flat = addr["c"].ravel()
    if np.unique(c_flat).size != c_flat.size:
        raise ValueError(
            f"C view {desc.c} writes some word more than once for batch={desc.batch}, m={desc.m}, "
            f"n={desc.n}: give C strides that address each element separately")
    for name in "ab":
        view = getattr(desc, name)
        if view.store == desc.c.store and np.intersect1d(addr[name].ravel(), c_flat).size:
            raise ValueError(
                f"C view {desc.c} overlaps the {name.upper()} view {view}: the engine reads "
                f"{name.upper()} while it writes C, so put C in words {name.upper()} does not use")
    return addr


def random_descriptor(rng, store_sizes, *, max_mn=24, max_k=24, max_batch=3, max_dim=None,
                      tries=200, integer=False, max_split=1):
    """Draw a random legal descriptor (seeded ``numpy.random.Generator``) for tests.

    Shapes up to ``max_mn`` x ``max_mn`` x ``max_k``, up to ``max_batch`` matrices, random
    stores, transposes, padded leading dimensions, column strides of 1 or 2, zero or padded
    batch strides for A and B, random bases and ``accumulate``. C never overlaps A or B.
    ``integer``: False (FP32), True (integer mode) or ``"random"`` (either, one more draw).
    ``max_split`` > 1: ``split`` is a random power of two up to it (one more draw; parts may
    be empty when ``split`` > ``k``).
    """
    names = sorted(store_sizes)
    for _ in range(tries):
        m, n, k = (int(rng.integers(1, hi + 1)) for hi in (max_mn, max_mn, max_k))
        batch = int(rng.integers(1, max_batch + 1))
        views = {}
        used = {name: [] for name in names}
        ok = True
        for name, (rows, cols) in (("a", (m, k)), ("b", (k, n)), ("c", (m, n))):
            store = names[int(rng.integers(len(names)))]
            transpose = bool(rng.integers(2))
            r, c = (cols, rows) if transpose else (rows, cols)       # stored orientation
            cs = int(rng.choice([1, 1, 1, 2]))
            ld = c * cs + int(rng.integers(0, 3))
            span = (r - 1) * ld + (c - 1) * cs + 1
            bs = 0 if (name != "c" and rng.integers(3) == 0) else span + int(rng.integers(0, 4))
            total = (batch - 1) * bs + span
            free = store_sizes[store] - total
            if free < 0:
                ok = False
                break
            base = int(rng.integers(0, free + 1))
            view = View(store, base, ld, cs, bs)
            views[name] = view.T if transpose else view
        if not ok:
            continue
        is_int = bool(rng.integers(2)) if integer == "random" else bool(integer)
        split = 1 << int(rng.integers(0, max_split.bit_length())) if max_split > 1 else 1
        desc = Descriptor(m, n, k, views["a"], views["b"], views["c"],
                          accumulate=bool(rng.integers(2)), batch=batch, integer=is_int,
                          split=split)
        try:
            validate(desc, store_sizes, max_dim=max_dim)
        except ValueError:
            continue
        return desc
    raise ValueError(f"no legal random descriptor found in {tries} tries: use larger stores "
                     f"than {store_sizes} or smaller max_mn/max_k/max_batch")


def _describe_error(code, desc, sizes, max_dim, max_split=None):
    for view in (desc.a, desc.b, desc.c):
        if view.store not in sizes:
            return (f"view {view} names store {view.store!r}, which is not one of "
                    f"{sorted(sizes)}: use an existing store")
    if code == ERROR_DIM and max_split is not None and desc.split > max_split and all(
            0 < x <= (max_dim or x) for x in (desc.m, desc.n, desc.k, desc.batch)):
        return (f"split = {desc.split} is above the engine's limit {max_split}: use a smaller "
                f"split")
    if code == ERROR_DIM:
        limit = f"1..{max_dim}" if max_dim is not None else ">= 1"
        return (f"dimensions m={desc.m}, n={desc.n}, k={desc.k}, batch={desc.batch} must each be "
                f"in {limit}: split the contraction or fix the zero dimension")
    name = {ERROR_A_RANGE: "a", ERROR_B_RANGE: "b", ERROR_C_RANGE: "c"}[code]
    view = getattr(desc, name)
    last = view.last_address(*desc.shapes()[name])
    return (f"{name.upper()} view {view} of shape {desc.shapes()[name]} reaches word {last}, "
            f"past the end of store {view.store!r} ({sizes[view.store]} words): lower its base "
            f"or strides, or use a larger store")


def _ld(cols, pad):
    """Leading dimension of a row-major matrix: ``cols``, made odd when ``pad`` (so that a
    column of it hits every bank of a power-of-two banked store once)."""
    return cols + 1 if pad and cols % 2 == 0 else cols


def tt_linear_step(spec, batch, *, pad=True, stores=None):
    """Return the engine descriptors of one TT-linear training step (``algorithms.md`` §2).

    Forward (left and right merges, ``x_l``, ``z_r``), backward (``dz``, ``dx``, ``dr``, ``dl``)
    and the core gradients of a TT layer with ``d`` = 3 input and 3 output modes, on three
    stores: ``param`` (cores and their gradients), ``act`` (X, dY, dX, Z, dZ) and ``scratch``
    (merged L and R, partial merges, temporaries). Matrices are row-major; with ``pad`` the
    activations get odd leading dimensions so that strided columns are bank-conflict free.
    Descriptors are oriented so the long dimension runs over the engine's lanes (C's columns).

    Parameters
    ----------
    spec : ttrain.golden.config.TTSpec
        A TT shape with ``d == 3`` (e.g. the paper's ``[12, 8, 8 | 8, 8, 12]``).
    batch : int
        Rows of X (tokens per step, B).
    pad : bool
        Odd leading dimensions for the activations.
    stores : dict or None
        Store names to use for the roles ``"param"``, ``"act"`` and ``"scratch"`` (default:
        the role names). Two roles may share a store.

    Returns
    -------
    (dict, list)
        ``{store: words}`` and ``[(name, Descriptor), ...]`` in execution order (later
        descriptors read what earlier ones wrote). Names: ``merge_left_2``, ``merge_left_3``,
        ``merge_right_5``, ``merge_right_4``, ``x_l``, ``z_r``, ``dz``, ``dx``, ``dr``, ``dl``,
        ``merge_45``, ``merge_23``, ``core_grad_1`` .. ``core_grad_6`` (with ``_a``/``_b`` steps
        where a gradient takes two contractions).
    """
    if spec.d != 3:
        raise ValueError(f"tt_linear_step handles d = 3 TT shapes, got d = {spec.d} "
                         f"({list(spec.in_modes)} | {list(spec.out_modes)})")
    batch = _check_int("batch", batch, 1)
    s1, s2, s3, s4, s5, s6 = spec.modes
    _, r1, r2, r3, r4, r5, _ = spec.ranks
    n_in, n_out = spec.n_in, spec.n_out
    names = {"param": "param", "act": "act", "scratch": "scratch", **(stores or {})}
    if set(names) != {"param", "act", "scratch"}:
        raise ValueError(f"stores maps the roles 'param', 'act' and 'scratch', got "
                         f"{sorted(stores)}")
    alloc = {name: 0 for name in names.values()}

    def mat(role, rows, cols, padded=False):
        """Allocate a rows x cols row-major matrix; return its View."""
        store = names[role]
        ld = _ld(cols, padded and pad)
        view = View(store, alloc[store], ld, 1)
        alloc[store] += rows * ld
        return view

    # parameters: cores G_k as (r_{k-1} s_k) x r_k matrices, then their gradients
    cores = [mat("param", spec.ranks[k] * s, spec.ranks[k + 1])
             for k, s in enumerate(spec.modes)]
    grads = [mat("param", spec.ranks[k] * s, spec.ranks[k + 1])
             for k, s in enumerate(spec.modes)]
    x = mat("act", batch, n_in, True)
    dy = mat("act", batch, n_out, True)
    dx = mat("act", batch, n_in, True)
    z = mat("act", batch, r3, True)
    dz = mat("act", batch, r3, True)
    y = mat("act", batch, n_out, True)
    l2 = mat("scratch", s1 * s2, r2)           # G1*G2 as (s1 s2) x r2
    ll = mat("scratch", n_in, r3)              # L = G1*G2*G3 as N_in x r3
    s56 = mat("scratch", r4 * s5, s6)          # G5*G6 as (r4 s5) x s6 = r4 x (s5 s6)
    rr = mat("scratch", r3 * s4, s5 * s6)      # R as (r3 s4) x (s5 s6) = r3 x N_out
    dl = mat("scratch", n_in, r3)
    dr = mat("scratch", r3, n_out)
    p45 = mat("scratch", r3 * s4 * s5, r5)     # G4*G5 as (r3 s4 s5) x r5
    q23 = mat("scratch", r1 * s2, s3 * r3)     # G2*G3 as r1 x (s2 s3 r3)
    t5 = mat("scratch", r4, s5 * s6)           # G4^T . dR
    u2 = mat("scratch", r1, s2 * s3 * r3)      # G1^T . dL

    def re(view, cols):
        """The same words viewed with ``cols`` columns (unpadded row-major reshape)."""
        return View(view.store, view.base, cols, 1)

    g1, g2, g3, g4, g5, g6 = cores
    d1, d2, d3, d4, d5, d6 = grads
    D = Descriptor
    jobs = [
        # forward merges (batch-independent)
        ("merge_left_2", D(s1, s2 * r2, r1, g1, re(g2, s2 * r2), re(l2, s2 * r2))),
        ("merge_left_3", D(s1 * s2, s3 * r3, r2, l2, re(g3, s3 * r3), re(ll, s3 * r3))),
        ("merge_right_5", D(r4 * s5, s6, r5, g5, re(g6, s6), s56)),
        ("merge_right_4", D(r3 * s4, s5 * s6, r4, g4, re(s56, s5 * s6), rr)),
        # Z^T = L^T X^T (lanes over the batch), Y is not stored: the step starts from dY
        ("x_l", D(r3, batch, n_in, ll.T, x.T, z.T)),
        ("z_r", D(batch, n_out, r3, z, re(rr, n_out), y)),
        # backward
        ("dz", D(r3, batch, n_out, re(rr, n_out), dy.T, dz.T)),
        ("dx", D(batch, n_in, r3, dz, ll.T, dx)),
        ("dr", D(r3, n_out, batch, z.T, dy, dr)),
        ("dl", D(r3, n_in, batch, dz.T, x, dl.T)),
        # core gradients, right half (dR viewed as (r3 s4 s5) x s6 and (r3 s4) x (s5 s6))
        ("merge_45", D(r3 * s4, s5 * r5, r4, g4, re(g5, s5 * r5), re(p45, s5 * r5))),
        ("core_grad_6", D(r5, s6, r3 * s4 * s5, p45.T, re(dr, s6), re(d6, s6))),
        ("core_grad_4", D(r3 * s4, r4, s5 * s6, re(dr, s5 * s6), re(s56, s5 * s6).T, d4)),
        ("core_grad_5_a", D(r4, s5 * s6, r3 * s4, g4.T, re(dr, s5 * s6), t5)),
        ("core_grad_5_b", D(r4 * s5, r5, s6, re(t5, s6), re(g6, s6).T, d5)),
        # left half (dL viewed as (s1 s2) x (s3 r3) and s1 x (s2 s3 r3))
        ("merge_23", D(r1 * s2, s3 * r3, r2, g2, re(g3, s3 * r3), re(q23, s3 * r3))),
        ("core_grad_3", D(r2, s3 * r3, s1 * s2, l2.T, re(dl, s3 * r3), re(d3, s3 * r3))),
        ("core_grad_1", D(s1, r1, s2 * s3 * r3, re(dl, s2 * s3 * r3),
                          re(q23, s2 * s3 * r3).T, d1)),
        ("core_grad_2_a", D(r1, s2 * s3 * r3, s1, g1.T, re(dl, s2 * s3 * r3), u2)),
        ("core_grad_2_b", D(r1 * s2, r2, s3 * r3, re(u2, s3 * r3), re(g3, s3 * r3).T, d2)),
    ]
    sizes = dict(alloc)
    return sizes, jobs


#: Names of the batch-dependent contractions of :func:`tt_linear_step`.
BATCH_DEPENDENT = ("x_l", "z_r", "dz", "dx", "dr", "dl")

