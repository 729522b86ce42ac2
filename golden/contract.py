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

Starting a fresh sum from ``-0.0`` is what the hardware does (the adder's second operand is a
constant instead of the accumulator) and is exactly "start from the first product": ``x + (-0)``
is ``x`` for every ``x`` under round-to-nearest-even, ``+0`` and ``-0`` included, and NaNs are
canonical either way. Multiply and add are rounded separately (no fused multiply-add); the
order per output does not depend on the engine's tiling or lane count.

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

try:  # the numerics contract lives in golden/numerics.py
    from .numerics import fp32_add as _fp32_add, fp32_mul as _fp32_mul
except ImportError:  # pragma: no cover - only before numerics.py exists
    _CANONICAL_NAN = np.uint32(0x7FC00000)

    def _canon(x):
        x = np.asarray(x, dtype=np.float32)
        bits = x.view(np.uint32).copy()
        bits[np.isnan(x)] = _CANONICAL_NAN
        return bits.view(np.float32)

    def _fp32_mul(a, b):
        with np.errstate(all="ignore"):
            return _canon(np.multiply(a, b, dtype=np.float32))

    def _fp32_add(a, b):
        with np.errstate(all="ignore"):
            return _canon(np.add(a, b, dtype=np.float32))

__all__ = [
    "View", "Descriptor", "ERROR_CODES", "ERROR_NONE", "ERROR_STORE", "ERROR_DIM",
    "ERROR_A_RANGE", "ERROR_B_RANGE", "ERROR_C_RANGE",
    "contract", "check_descriptor", "validate", "view_addresses", "macs",
    "random_descriptor",
]

#: Error codes the engine reports (``error_code`` port) and :func:`check_descriptor` returns.
ERROR_NONE = 0
ERROR_STORE = 1      #: a view names a store the engine does not have
ERROR_DIM = 2        #: m, n, k or batch is zero or above the engine's limit
ERROR_A_RANGE = 3    #: A reaches past the end of its store
ERROR_B_RANGE = 4    #: B reaches past the end of its store
ERROR_C_RANGE = 5    #: C reaches past the end of its store

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
    """
    m: int
    n: int
    k: int
    a: View
    b: View
    c: View
    accumulate: bool = False
    batch: int = 1

    def __post_init__(self):
        for name in ("m", "n", "k", "batch"):
            object.__setattr__(self, name, _check_int(f"Descriptor.{name}", getattr(self, name)))
        for name in ("a", "b", "c"):
            if not isinstance(getattr(self, name), View):
                raise TypeError(f"Descriptor.{name} must be a View, not {getattr(self, name)!r}")
        if not isinstance(self.accumulate, (bool, np.bool_)):
            raise TypeError(f"Descriptor.accumulate must be a bool, not {self.accumulate!r}")
        object.__setattr__(self, "accumulate", bool(self.accumulate))

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
                          self.accumulate, self.batch)

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


def check_descriptor(desc, store_sizes, *, max_dim=None):
    """Return the engine's error code for ``desc`` (:data:`ERROR_NONE` when it is legal).

    Parameters
    ----------
    desc : Descriptor
    store_sizes : dict
        Store name -> size in words.
    max_dim : int or None
        Largest m, n, k and batch the engine accepts (``None``: no limit).

    Checks in the engine's order: stores, dimensions, then A, B and C ranges.
    """
    if not isinstance(desc, Descriptor):
        raise TypeError(f"desc must be a Descriptor, not {desc!r}")
    for view in (desc.a, desc.b, desc.c):
        if view.store not in store_sizes:
            return ERROR_STORE
    for dim in (desc.m, desc.n, desc.k, desc.batch):
        if dim == 0 or (max_dim is not None and dim > max_dim):
            return ERROR_DIM
    for code, (name, shape) in zip((ERROR_A_RANGE, ERROR_B_RANGE, ERROR_C_RANGE),
                                   desc.shapes().items()):
        view = getattr(desc, name)
        if view.last_address(*shape) >= store_sizes[view.store]:
            return code
    return ERROR_NONE


def contract(desc, image, *, max_dim=None):
    """Run one contraction on a memory image, in the engine's exact accumulation order.

    Parameters
    ----------
    desc : Descriptor
        The contraction.
    image : dict
        Store name -> one-dimensional ``uint32`` array of FP32 words. Not modified.
    max_dim : int or None
        Engine limit on m, n, k and batch (``None``: no limit).

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
    addr = validate(desc, sizes, max_dim=max_dim)
    shapes = desc.shapes()

    out = {name: np.array(words, dtype=np.uint32, copy=True) for name, words in image.items()}
    a = image[desc.a.store][addr["a"]].view(np.float32)        # batch x m x k
    b = image[desc.b.store][addr["b"]].view(np.float32)        # batch x k x n
    if desc.accumulate:
        acc = image[desc.c.store][addr["c"]].view(np.float32)
    else:
        acc = np.full(shapes["c"], -0.0, dtype=np.float32)
    for kk in range(desc.k):
        acc = _fp32_add(acc, _fp32_mul(a[:, :, kk, None], b[:, None, kk, :]))
    out[desc.c.store][addr["c"]] = np.asarray(acc, dtype=np.float32).view(np.uint32)
    return out


def validate(desc, store_sizes, *, max_dim=None):
    """Raise :class:`ValueError` if ``desc`` is illegal on stores of ``store_sizes`` words.

    Returns the address arrays ``{"a": ..., "b": ..., "c": ...}`` (see :func:`view_addresses`)
    of a legal descriptor.
    """
    code = check_descriptor(desc, store_sizes, max_dim=max_dim)
    if code != ERROR_NONE:
        raise ValueError(_describe_error(code, desc, store_sizes, max_dim))
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
                      tries=200):
    """Draw a random legal descriptor (seeded ``numpy.random.Generator``) for tests.

    Shapes up to ``max_mn`` x ``max_mn`` x ``max_k``, up to ``max_batch`` matrices, random
    stores, transposes, padded leading dimensions, column strides of 1 or 2, zero or padded
    batch strides for A and B, random bases and ``accumulate``. C never overlaps A or B.
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
        desc = Descriptor(m, n, k, views["a"], views["b"], views["c"],
                          accumulate=bool(rng.integers(2)), batch=batch)
        try:
            validate(desc, store_sizes, max_dim=max_dim)
        except ValueError:
            continue
        return desc
    raise ValueError(f"no legal random descriptor found in {tries} tries: use larger stores "
                     f"than {store_sizes} or smaller max_mn/max_k/max_batch")


def _describe_error(code, desc, sizes, max_dim):
    for view in (desc.a, desc.b, desc.c):
        if view.store not in sizes:
            return (f"view {view} names store {view.store!r}, which is not one of "
                    f"{sorted(sizes)}: use an existing store")
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
