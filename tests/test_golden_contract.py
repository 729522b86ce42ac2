"""Golden contraction: order of accumulation, views, signed zeros, NaN and errors."""

import numpy as np
import pytest

from ttrain.golden import numerics
from ttrain.golden.config import TTSpec
from ttrain.golden.contract import (
    BATCH_DEPENDENT, ERROR_A_RANGE, ERROR_B_RANGE, ERROR_C_RANGE, ERROR_DIM, ERROR_NONE,
    ERROR_STORE, Descriptor, View, check_descriptor, contract, random_descriptor,
    tt_linear_step, validate, view_addresses)
from ttrain.golden.tt import tt_linear_backward, tt_linear_forward


def _image(rng, sizes, specials=False):
    img = {}
    for name, size in sizes.items():
        x = rng.standard_normal(size).astype(np.float32)
        if specials:
            pick = rng.integers(0, 12, size)
            x[pick == 0] = 0.0
            x[pick == 1] = -0.0
            x[pick == 2] = np.float32(1e-40) * rng.standard_normal((pick == 2).sum())
            x[pick == 3] *= np.float32(1e30)
        img[name] = x.view(np.uint32).copy()
    return img


def _reference(desc, image):
    """Scalar loop with the scalar golden ops: one output at a time, k increasing."""
    out = {k: v.copy() for k, v in image.items()}
    word = lambda store, addr: np.uint32(image[store][addr]).view(np.float32)  # noqa: E731
    for bb in range(desc.batch):
        for i in range(desc.m):
            for j in range(desc.n):
                ca = (desc.c.base + bb * desc.c.batch_stride + i * desc.c.row_stride
                      + j * desc.c.col_stride)
                parts = []
                for g in range(desc.split):          # consecutive k ranges of ceil(k/s) terms
                    acc = None
                    if desc.accumulate and g == 0:
                        acc = word(desc.c.store, ca)
                    for kk in range(g * desc.kc, min(desc.k, (g + 1) * desc.kc)):
                        aa = (desc.a.base + bb * desc.a.batch_stride + i * desc.a.row_stride
                              + kk * desc.a.col_stride)
                        ba = (desc.b.base + bb * desc.b.batch_stride + kk * desc.b.row_stride
                              + j * desc.b.col_stride)
                        p = numerics.fp32_mul(word(desc.a.store, aa), word(desc.b.store, ba))
                        # fresh sums start from the first product (the docstring's equivalence)
                        acc = p if acc is None else numerics.fp32_add(acc, p)
                    parts.append(acc)
                while len(parts) > 1:                # fold in halves; an empty part is skipped
                    h = len(parts) // 2
                    parts = [x if y is None else y if x is None else numerics.fp32_add(x, y)
                             for x, y in zip(parts[:h], parts[h:])]
                out[desc.c.store][ca] = numerics.f32_to_bits(np.float32(parts[0]))
    return out


SIZES = {"f": 900, "s": 700}


@pytest.mark.parametrize("seed", range(12))
def test_random_descriptors_match_scalar_reference(seed):
    rng = np.random.default_rng(seed)
    img = _image(rng, SIZES, specials=seed % 2 == 1)
    desc = random_descriptor(rng, SIZES, max_mn=9, max_k=9)
    got = contract(desc, img)
    want = _reference(desc, img)
    for name in SIZES:
        np.testing.assert_array_equal(got[name], want[name])
    # the input image is not modified
    assert all(got[n] is not img[n] for n in SIZES)


@pytest.mark.parametrize("seed", range(8))
def test_split_descriptors_match_scalar_reference(seed):
    """Split reductions: consecutive k parts, each in order, folded in halves; parts past k
    are empty (the fold skips them in the reference: adding -0.0 is the identity)."""
    rng = np.random.default_rng(100 + seed)
    img = _image(rng, SIZES, specials=seed % 2 == 1)
    desc = random_descriptor(rng, SIZES, max_mn=6, max_k=13, max_split=16)
    got = contract(desc, img)
    want = _reference(desc, img)
    for name in SIZES:
        np.testing.assert_array_equal(got[name], want[name])


def test_split_order_and_limits():
    a = View("f", 0, 4, 1)
    b = View("f", 4, 1, 1)
    c = View("s", 0, 1, 1)
    img = {"f": np.zeros(8, np.uint32), "s": np.zeros(2, np.uint32)}
    big, one = np.float32(2.0 ** 24), np.float32(1.0)
    img["f"][:4] = np.array([big, one, -big, one], np.float32).view(np.uint32)
    img["f"][4:8] = np.array([1, 1, 1, 1], np.float32).view(np.uint32)
    val = lambda d: contract(d, img)["s"][0:1].view(np.float32)[0]  # noqa: E731
    # sequential: ((2^24 + 1) - 2^24) + 1 = 1 (2^24 + 1 rounds to 2^24)
    assert val(Descriptor(1, 1, 4, a, b, c)) == 1.0
    # split 2: (2^24 + 1) + (-2^24 + 1) = 2^24 + (-2^24 + 1) = 1
    assert val(Descriptor(1, 1, 4, a, b, c, split=2)) == 1.0
    # split 4: (2^24 + -2^24) + (1 + 1) = 2: the fold pairs part g with part g + 2
    assert val(Descriptor(1, 1, 4, a, b, c, split=4)) == 2.0
    assert Descriptor(1, 1, 10, a, b, c, split=4).kc == 3
    assert Descriptor(1, 1, 10, a, b, c, split=4).transposed().split == 4
    for bad in (0, 3, 512):
        with pytest.raises(ValueError, match="split must be"):
            Descriptor(1, 1, 4, a, b, c, split=bad)
    d8 = Descriptor(1, 1, 4, a, b, c, split=8)
    sizes = {"f": 8, "s": 2}
    assert check_descriptor(d8, sizes, max_split=8) == ERROR_NONE
    assert check_descriptor(d8, sizes, max_split=4) == ERROR_DIM
    with pytest.raises(ValueError, match="split = 8 is above the engine's limit 4"):
        validate(d8, sizes, max_split=4)
    # integer sums are associative: split changes nothing
    rng = np.random.default_rng(3)
    for _ in range(5):
        d = random_descriptor(rng, SIZES, max_mn=6, max_k=13, integer=True, max_split=16)
        im = {n: rng.integers(0, 1 << 32, SIZES[n], dtype=np.uint32) for n in SIZES}
        ref = contract(Descriptor(d.m, d.n, d.k, d.a, d.b, d.c, d.accumulate, d.batch,
                                  d.integer), im)
        np.testing.assert_array_equal(contract(d, im)[d.c.store], ref[d.c.store])


def test_dense_matmul_close_and_views():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((7, 13)).astype(np.float32)
    b = rng.standard_normal((13, 5)).astype(np.float32)
    img = {"s": np.zeros(400, np.uint32)}
    img["s"][0:91] = a.ravel().view(np.uint32)
    img["s"][100:165] = b.T.ravel().view(np.uint32)            # B stored transposed
    desc = Descriptor(7, 5, 13, View.matrix("s", 0, 7, 13),
                      View.matrix("s", 100, 5, 13, transpose=True), View.matrix("s", 200, 7, 5))
    out = contract(desc, img)
    c = out["s"][200:235].view(np.float32).reshape(7, 5)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    # C^T = B^T A^T gives the very same words
    out_t = contract(desc.transposed(), img)
    np.testing.assert_array_equal(out_t["s"], out["s"])
    # untouched words stay
    np.testing.assert_array_equal(out["s"][:200], img["s"][:200])
    np.testing.assert_array_equal(out["s"][235:], img["s"][235:])


def test_signed_zero_and_accumulate_semantics():
    img = {"s": np.zeros(16, np.uint32)}
    neg0, pos0, one = (numerics.f32_to_bits(np.float32(v)) for v in (-0.0, 0.0, 1.0))
    img["s"][0:2] = [neg0, neg0]        # A = [-0, -0]
    img["s"][2:4] = [one, one]          # B = [1, 1]
    img["s"][4] = pos0                  # old C = +0
    desc = Descriptor(1, 1, 2, View("s", 0, 2, 1), View("s", 2, 1, 1), View("s", 4, 1, 1))
    # fresh: -0 * 1 + -0 * 1 = -0 (a sum started from +0 would give +0)
    assert contract(desc, img)["s"][4] == neg0
    # accumulate onto +0: +0 + -0 = +0
    acc = Descriptor(1, 1, 2, desc.a, desc.b, desc.c, accumulate=True)
    assert contract(acc, img)["s"][4] == pos0


def test_nan_is_canonical_and_order_matters():
    img = {"s": np.zeros(16, np.uint32)}
    img["s"][0] = 0x7FA00001                                   # a signalling NaN payload
    img["s"][1] = numerics.f32_to_bits(np.float32(1.0))
    desc = Descriptor(1, 1, 1, View("s", 0, 1, 1), View("s", 1, 1, 1), View("s", 2, 1, 1))
    assert contract(desc, img)["s"][2] == 0x7FC00000
    # 1e8 + 1 - 1e8 depends on the order: k increasing means (1e8 + 1) first
    vals = np.array([1e8, 1.0, -1e8], np.float32)
    img = {"s": np.zeros(16, np.uint32)}
    img["s"][0:3] = vals.view(np.uint32)
    img["s"][3:6] = np.ones(3, np.float32).view(np.uint32)
    desc = Descriptor(1, 1, 3, View("s", 0, 3, 1), View("s", 3, 1, 1), View("s", 8, 1, 1))
    c = np.uint32(contract(desc, img)["s"][8]).view(np.float32)
    expect = np.float32(np.float32(np.float32(1e8) + np.float32(1)) + np.float32(-1e8))
    assert c == expect


def test_error_codes_and_messages():
    sizes = {"f": 64, "s": 32}
    img = {k: np.zeros(v, np.uint32) for k, v in sizes.items()}
    good = Descriptor(2, 3, 4, View("f", 0, 4, 1), View("f", 8, 3, 1), View("s", 0, 3, 1))
    assert check_descriptor(good, sizes) == ERROR_NONE
    cases = [
        (Descriptor(2, 3, 4, View("x", 0, 4, 1), good.b, good.c), ERROR_STORE, "not one of"),
        (Descriptor(0, 3, 4, good.a, good.b, good.c), ERROR_DIM, "split the contraction"),
        (Descriptor(2, 3, 4, View("f", 60, 4, 1), good.b, good.c), ERROR_A_RANGE, "past the end"),
        (Descriptor(2, 3, 4, good.a, View("f", 8, 30, 1), good.c), ERROR_B_RANGE, "past the end"),
        (Descriptor(2, 3, 4, good.a, good.b, View("s", 0, 3, 1, 30), batch=2), ERROR_C_RANGE,
         "past the end"),
    ]
    for desc, code, msg in cases:
        assert check_descriptor(desc, sizes) == code
        with pytest.raises(ValueError, match=msg):
            contract(desc, img)
    with pytest.raises(ValueError, match="engine limit|split"):
        contract(Descriptor(70, 1, 1, View("f", 0, 1, 1), View("f", 0, 1, 1),
                            View("s", 0, 0, 1)), img, max_dim=64)
    assert check_descriptor(good, sizes, max_dim=3) == ERROR_DIM
    with pytest.raises(ValueError, match="more than once"):
        contract(Descriptor(2, 3, 4, good.a, good.b, View("s", 0, 1, 1)), img)
    with pytest.raises(ValueError, match="overlaps the A view"):
        contract(Descriptor(2, 3, 4, good.a, good.b, View("f", 4, 3, 1)), img)


def test_parameter_validation():
    with pytest.raises(TypeError, match="store name"):
        View("", 0)
    with pytest.raises(ValueError, match="base must be >= 0"):
        View("s", -1)
    with pytest.raises(TypeError, match="integer"):
        View("s", 1.5)
    with pytest.raises(TypeError, match="must be a View"):
        Descriptor(1, 1, 1, "a", View("s"), View("s"))
    with pytest.raises(TypeError, match="accumulate must be a bool"):
        Descriptor(1, 1, 1, View("s"), View("s"), View("s"), accumulate=1)
    with pytest.raises(TypeError, match="uint32"):
        contract(Descriptor(1, 1, 1, View("s"), View("s"), View("s", 1)),
                 {"s": np.zeros(4, np.float32)})


def test_view_addresses_and_transpose():
    v = View("s", 5, 10, 1, 100)
    addr = view_addresses(v, 2, 3, 4)
    assert addr[1, 2, 3] == 5 + 100 + 20 + 3
    assert view_addresses(v.T, 2, 4, 3)[1, 3, 2] == addr[1, 2, 3]
    assert v.last_address(2, 3, 4) == addr.max()


def _apply_f64(desc, img):
    """Float64 reference of one descriptor (plain matmul) on a float64 image."""
    shapes = desc.shapes()
    addr = {n: view_addresses(getattr(desc, n), *shapes[n]) for n in "abc"}
    c = img[desc.a.store][addr["a"]] @ img[desc.b.store][addr["b"]]
    if desc.accumulate:
        c = c + img[desc.c.store][addr["c"]]
    img[desc.c.store][addr["c"]] = c


@pytest.mark.parametrize("ranks", [(1, 2, 3, 4, 3, 2, 1), (1, 2, 4, 3, 4, 2, 1)])
def test_tt_linear_step_descriptors_compute_the_tt_backward(ranks):
    spec = TTSpec((2, 3, 2), (3, 2, 2), ranks)
    batch = 5
    sizes, jobs = tt_linear_step(spec, batch)
    names = [n for n, _ in jobs]
    assert set(BATCH_DEPENDENT) <= set(names)
    rng = np.random.default_rng(0)
    cores = [rng.standard_normal(s) for s in spec.core_shapes]
    x = rng.standard_normal((batch, spec.n_in))
    dy = rng.standard_normal((batch, spec.n_out))
    img = {n: np.full(s, np.nan) for n, s in sizes.items()}
    core_views = {}
    # locate cores, X and dY through the descriptors that read them
    d = dict(jobs)
    g1, g2 = d["merge_left_2"].a, d["merge_left_2"].b
    g3 = d["merge_left_3"].b
    g5, g6 = d["merge_right_5"].a, d["merge_right_5"].b
    g4 = d["merge_right_4"].a
    for view, core in zip((g1, g2, g3, g4, g5, g6), cores):
        img[view.store][view.base:view.base + core.size] = core.ravel()
        core_views[view.base] = core
    xv, dyv = d["dl"].b, d["dr"].b
    img["act"][view_addresses(xv, 1, batch, spec.n_in)[0]] = x
    img["act"][view_addresses(dyv, 1, batch, spec.n_out)[0]] = dy
    for _, desc in jobs:
        _apply_f64(desc, img)
    y, cache = tt_linear_forward(spec, cores, x)
    dx, dcores = tt_linear_backward(spec, cores, cache, dy)
    got_y = img["act"][view_addresses(d["z_r"].c, 1, batch, spec.n_out)[0]]
    got_dx = img["act"][view_addresses(d["dx"].c, 1, batch, spec.n_in)[0]]
    np.testing.assert_allclose(got_y, y, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(got_dx, dx, rtol=1e-10, atol=1e-10)
    grad_jobs = ["core_grad_1", "core_grad_2_b", "core_grad_3", "core_grad_4", "core_grad_5_b",
                 "core_grad_6"]
    for k, name in enumerate(grad_jobs):
        c = d[name].c
        got = img[c.store][c.base:c.base + dcores[k].size].reshape(dcores[k].shape)
        np.testing.assert_allclose(got, dcores[k], rtol=1e-10, atol=1e-10, err_msg=name)
    with pytest.raises(ValueError, match="d = 3"):
        tt_linear_step(TTSpec((2, 2), (2, 2), (1, 2, 2, 2, 1)), 4)


def test_tt_linear_step_store_mapping():
    spec = TTSpec((2, 3, 2), (3, 2, 2), (1, 2, 3, 4, 3, 2, 1))
    sizes, jobs = tt_linear_step(spec, 4, stores={"param": "x", "act": "x", "scratch": "x"})
    assert list(sizes) == ["x"]
    for _, desc in jobs:                      # legal, and C never overlaps A or B
        assert {desc.a.store, desc.b.store, desc.c.store} == {"x"}
        validate(desc, sizes)
    with pytest.raises(ValueError, match="roles"):
        tt_linear_step(spec, 4, stores={"weights": "x"})


def test_integer_mode_is_exact_wrapping_int32_of_sign_extended_halves():
    rng = np.random.default_rng(21)
    sizes = {"x": 200, "y": 120}
    image = {n: rng.integers(0, 1 << 32, s, dtype=np.uint64).astype(np.uint32)
             for n, s in sizes.items()}
    for _ in range(20):
        d = random_descriptor(rng, sizes, max_mn=5, max_k=6, max_batch=2, integer=True)
        out = contract(d, image)

        def word(v, b, i, j):
            return int(image[v.store][v.base + b * v.batch_stride + i * v.row_stride
                                      + j * v.col_stride])

        def s16(w):
            w &= 0xFFFF
            return w - (1 << 16) if w & 0x8000 else w
        for b in range(d.batch):
            for i in range(d.m):
                for j in range(d.n):
                    acc = word(d.c, b, i, j) if d.accumulate else 0
                    acc += sum(s16(word(d.a, b, i, kk)) * s16(word(d.b, b, kk, j))
                               for kk in range(d.k))
                    assert int(out[d.c.store][d.c.base + b * d.c.batch_stride + i * d.c.row_stride
                                              + j * d.c.col_stride]) == acc % (1 << 32)
        image = out
    with pytest.raises(TypeError, match="integer must be a bool"):
        Descriptor(1, 1, 1, View("x", 0, 1, 1), View("x", 1, 1, 1), View("y", 0, 1, 1),
                   integer=1)
