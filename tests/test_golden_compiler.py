"""Compiled TT-linear / dense training steps (golden/compiler.py) run by the interpreter.

References are independent of the compiler: the fast path ``golden/tt.py`` (BLAS matmuls, in
float64 unless said otherwise) plus NumPy for bias and loss, and float64 finite differences of
the squared-error loss through that fast path. The interpreter computes in float32 with its
own accumulation order, so agreement is within float32 tolerance, not bit-exact; bit-exact
relations (the UPDATE rule) are checked exactly.
"""

import time

import numpy as np
import pytest

from ttrain.golden.config import TTSpec, get_config
from ttrain.golden.compiler import compile_dense, compile_tt_linear
from ttrain.golden.interpreter import run
from ttrain.golden.isa import Contract, Update, assemble, decode_program
from ttrain.golden.planner import bidirectional_tree, order_plan, plan_layer
from ttrain.golden.tt import init_tt_cores, tt_linear_backward, tt_linear_forward

SPECS = [
    TTSpec((4,), (3,), (1, 2, 1)),
    TTSpec((2, 3), (3, 2), (1, 2, 3, 2, 1)),
    TTSpec((2, 2, 3), (3, 2, 2), (1, 2, 3, 4, 3, 2, 1)),
    TTSpec((3, 2, 2), (2, 4, 1), (1, 3, 2, 3, 2, 1, 1)),
    TTSpec((2, 2, 2, 2), (2, 2, 2, 2), (1, 2, 2, 3, 2, 3, 2, 2, 1)),
]


def problem(spec, batch, seed, std=0.7):
    rng = np.random.default_rng(seed)
    cores = init_tt_cores(spec, rng, std)
    bias = (0.1 * rng.standard_normal(spec.n_out)).astype(np.float32)
    x = rng.standard_normal((batch, spec.n_in)).astype(np.float32)
    t = rng.standard_normal((batch, spec.n_out)).astype(np.float32)
    return cores, bias, x, t


def fast_step(spec, cores, bias, x, t, scale=1.0, dtype=np.float64):
    """Forward/backward of the same loss through the fast path."""
    cs = [c.astype(dtype) for c in cores]
    y, cache = tt_linear_forward(spec, cs, x.astype(dtype))
    y = y + bias.astype(dtype)
    dy = (y - t.astype(dtype)) * scale
    dx, dcores = tt_linear_backward(spec, cs, cache, dy)
    return y, dy, dx, dcores + [dy.sum(axis=0)]


def loss64(spec, params, x, t, scale=1.0):
    y, _ = tt_linear_forward(spec, params[:-1], x.astype(np.float64))
    r = y + params[-1] - t
    return 0.5 * scale * float(np.sum(r * r))


def close(got, want, rtol=2e-5):
    want = np.asarray(want, np.float64)
    tol = rtol * max(1.0, float(np.abs(want).max()))
    return float(np.abs(np.asarray(got, np.float64) - want).max()) <= tol


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.in_modes}x{s.out_modes}")
@pytest.mark.parametrize("scale, order", [(1.0, "bidirectional"), (0.25, "bidirectional"),
                                          (1.0, "left_to_right"), (0.5, "dp_best")])
def test_interpreter_matches_fast_path(spec, scale, order):
    B = 5
    cores, bias, x, t = problem(spec, B, seed=len(spec.ranks))
    cl = compile_tt_linear(spec, B, lr=0.1, loss_scale=scale, update=False, order=order)
    assert cl.order == order
    out, st = run(cl.program, cl.initial_image(cores + [bias], x, t))
    assert st.ok, st.message
    y, dy, dx, grads = fast_step(spec, cores, bias, x, t, scale)
    assert close(cl.read(out, "y"), y)
    assert close(cl.read(out, "dy"), dy)
    assert close(cl.read(out, "dx"), dx)
    for g, w in zip(cl.grads(out), grads):
        assert g.shape == w.shape
        assert close(g, w)
    # the contraction work is exactly the planner's for that order
    assert st.macs == plan_layer(spec, B).orders[order].macs
    # parameters are untouched without UPDATE
    for p, w in zip(cl.params(out), cores + [bias]):
        assert np.array_equal(p, w)


@pytest.mark.parametrize("spec", SPECS[1:3], ids=lambda s: f"{s.in_modes}x{s.out_modes}")
def test_update_is_bit_exact_sgd_and_clears_gradients(spec):
    B = 4
    cores, bias, x, t = problem(spec, B, seed=3)
    lr = {"cores": 0.05, "bias": 0.2}
    keep = compile_tt_linear(spec, B, lr=lr, update=False)
    upd = compile_tt_linear(spec, B, lr=lr)
    img = keep.initial_image(cores + [bias], x, t)
    out_g, _ = run(keep.program, img)
    out_u, st = run(upd.program, img)
    assert st.ok and st.updated == spec.num_params + spec.n_out
    for name, p, g, new in zip(upd.param_names, cores + [bias], keep.grads(out_g),
                               upd.params(out_u)):
        rate = np.float32(0.2 if name == "bias" else 0.05)
        assert np.array_equal(new, p - rate * g), name     # numpy float32: one rounding each
    assert all(not g.any() for g in upd.grads(out_u))
    # everything else identical between the two programs
    assert np.array_equal(out_g["act"], out_u["act"])
    assert np.array_equal(out_g["scratch"], out_u["scratch"])


@pytest.mark.parametrize("spec", [SPECS[1], SPECS[2]], ids=lambda s: f"{s.in_modes}")
def test_backward_matches_finite_differences(spec):
    """Float64 central differences of the loss through the fast path vs the compiled
    (float32) gradients. FD on the float32 interpreter itself would be dominated by rounding
    (the loss is O(10) and a useful step O(1e-3)); the float64 fast path is an independent
    implementation of the same function, and the first test ties it to the interpreter."""
    B = 3
    cores, bias, x, t = problem(spec, B, seed=11)
    cl = compile_tt_linear(spec, B, update=False, loss_scale=0.5)
    out, st = run(cl.program, cl.initial_image(cores + [bias], x, t))
    assert st.ok
    params = [p.astype(np.float64) for p in cores + [bias]]
    h = 1e-6
    for k, g in enumerate(cl.grads(out)):
        fd = np.zeros(params[k].size)
        for i in range(params[k].size):
            plus = [p.copy() for p in params]
            minus = [p.copy() for p in params]
            plus[k].flat[i] += h
            minus[k].flat[i] -= h
            fd[i] = (loss64(spec, plus, x, t, 0.5) - loss64(spec, minus, x, t, 0.5)) / (2 * h)
        assert close(g.ravel(), fd, rtol=1e-4), k
    # dX too (X is an input of the loss)
    fdx = np.zeros(x.size)
    for i in range(x.size):
        xp, xm = x.astype(np.float64).copy(), x.astype(np.float64).copy()
        xp.flat[i] += h
        xm.flat[i] -= h
        fdx[i] = (loss64(spec, params, xp, t, 0.5) - loss64(spec, params, xm, t, 0.5)) / (2 * h)
    assert close(cl.read(out, "dx").ravel(), fdx, rtol=1e-4)


def test_several_steps_train_and_track_fast_path():
    spec = SPECS[2]
    B, lr, steps = 6, 0.02, 4
    cores, bias, x, t = problem(spec, B, seed=21)
    cl = compile_tt_linear(spec, B, lr=lr)
    img = cl.initial_image(cores + [bias], x, t)
    ref = [p.astype(np.float64) for p in cores + [bias]]
    losses = []
    for step in range(steps):
        out, st = run(cl.program, img)
        assert st.ok
        y = cl.read(out, "y")
        losses.append(0.5 * float(np.sum((y.astype(np.float64) - t) ** 2)))
        _, _, _, grads = fast_step(spec, ref[:-1], ref[-1], x, t)
        ref = [p - lr * g for p, g in zip(ref, grads)]
        for p, w in zip(cl.params(out), ref):
            assert close(p, w, rtol=1e-4), step
        img = out
    assert losses[-1] < losses[0]
    # new inputs between steps
    x2 = np.ones_like(x)
    img2 = cl.set_inputs(img, x2, t)
    assert np.array_equal(cl.read(img2, "x"), x2)
    assert np.array_equal(img2["param"], img["param"])


def test_dense_layer_step():
    n_in, n_out, B, lr = 6, 5, 4, 0.1
    rng = np.random.default_rng(4)
    w = rng.standard_normal((n_in, n_out)).astype(np.float32)
    b = rng.standard_normal(n_out).astype(np.float32)
    x = rng.standard_normal((B, n_in)).astype(np.float32)
    t = rng.standard_normal((B, n_out)).astype(np.float32)
    keep = compile_dense(n_in, n_out, B, update=False)
    out, st = run(keep.program, keep.initial_image([w, b], x, t))
    assert st.ok and st.macs == 3 * B * n_in * n_out
    y = x.astype(np.float64) @ w + b
    dy = y - t
    assert close(keep.read(out, "y"), y)
    assert close(keep.read(out, "dx"), dy @ w.T.astype(np.float64))
    gw, gb = keep.grads(out)
    assert close(gw, x.T.astype(np.float64) @ dy) and close(gb, dy.sum(0))
    upd = compile_dense(n_in, n_out, B, lr=lr)
    out2, st2 = run(upd.program, upd.initial_image([w, b], x, t))
    nw, nb = upd.params(out2)
    assert np.array_equal(nw, w - np.float32(lr) * gw)
    assert np.array_equal(nb, b - np.float32(lr) * gb)


def test_program_text_round_trip_and_structure():
    spec = SPECS[2]
    cl = compile_tt_linear(spec, 4)
    words = cl.program.words()
    assert assemble(cl.program.text()) == words
    instrs = decode_program(words)
    assert instrs == cl.program.instructions
    n_steps = len(order_plan(spec, 4, bidirectional_tree(3)).steps)
    assert sum(isinstance(i, Contract) for i in instrs) == n_steps
    assert sum(isinstance(i, Update) for i in instrs) == 2 * spec.d + 1
    # the lane dimension (C's columns) is the longer one
    for i in instrs:
        if isinstance(i, Contract):
            assert i.desc.n >= i.desc.m


def test_compiler_rejects_bad_arguments():
    spec = SPECS[1]
    with pytest.raises(TypeError, match="TTSpec"):
        compile_tt_linear((2, 3), 4)
    with pytest.raises(ValueError, match="batch must be >= 1"):
        compile_tt_linear(spec, 0)
    with pytest.raises(ValueError, match="order must be one of"):
        compile_tt_linear(spec, 4, order="random")
    with pytest.raises(ValueError, match="no entry for region"):
        compile_tt_linear(spec, 4, lr={"cores": 0.1})
    with pytest.raises(ValueError, match="finite"):
        compile_tt_linear(spec, 4, loss_scale=float("inf"))
    cl = compile_tt_linear(spec, 4)
    with pytest.raises(ValueError, match="needs 5 arrays"):
        cl.initial_image([np.zeros(3)], np.zeros((4, 6)), np.zeros((4, 6)))
    with pytest.raises(ValueError, match="shape"):
        cl.initial_image(init_tt_cores(spec, np.random.default_rng(0), 1.0)
                         + [np.zeros(6, np.float32)], np.zeros((3, 6)), np.zeros((4, 6)))


@pytest.mark.parametrize("name, order", [("paper-l1", "bidirectional"),
                                         ("paper-l1-r10", "bidirectional"),
                                         ("paper-l1", "best")])
def test_paper_layer_one_step(name, order):
    """The paper's 768x768 attention layer, B = 32: compile and interpret one step
    (timing recorded in docs/isa.md, not asserted)."""
    spec = get_config(name).attention
    B = 32
    rng = np.random.default_rng(0)
    cores = init_tt_cores(spec, rng, 0.5)
    bias = np.zeros(spec.n_out, np.float32)
    x = rng.standard_normal((B, spec.n_in)).astype(np.float32)
    t = rng.standard_normal((B, spec.n_out)).astype(np.float32)
    t0 = time.perf_counter()
    cl = compile_tt_linear(spec, B, lr=1e-3, update=False, order=order)
    out, st = run(cl.program, cl.initial_image(cores + [bias], x, t))
    elapsed = time.perf_counter() - t0
    assert st.ok
    plan = plan_layer(spec, B)
    assert st.macs == plan.orders[cl.order].macs
    if order == "best":
        assert cl.order == plan.best
    print(f"{name} {cl.order}: compile + interpret one step {elapsed:.2f} s, {st.macs} MACs, "
          f"{st.instructions} instructions")
    y, dy, dx, grads = fast_step(spec, cores, bias, x, t)
    assert close(cl.read(out, "y"), y, 1e-4)
    assert close(cl.read(out, "dx"), dx, 1e-4)
    for g, w in zip(cl.grads(out), grads):
        assert close(g, w, 1e-4)


def test_forward_words_follow_the_documented_orders():
    """Bit-exact: the compiled bi-directional forward of a d = 2 layer equals an independent
    reference written from the documented orders with ``numerics.fp32_dot`` (sequential from
    -0.0, summed edges flattened row-major in chain order) and ``fp32_add``/``fp32_sub``."""
    from ttrain.golden.numerics import fp32_add, fp32_dot, fp32_sub, fp32_sum

    spec = SPECS[1]                                  # (2, 3) x (3, 2), ranks 1 2 3 2 1
    B = 4
    cores, bias, x, t = problem(spec, B, seed=5)
    cl = compile_tt_linear(spec, B, update=False)
    out, st = run(cl.program, cl.initial_image(cores + [bias], x, t))
    assert st.ok
    g1, g2, g3, g4 = (c for c in cores)
    (m1, m2), (n1, n2), r = spec.in_modes, spec.out_modes, spec.ranks

    def mm(a, b):                                    # (m, k) x (k, n), sequential over k
        return fp32_dot(a[:, None, :], b.T[None, :, :])

    left = mm(g1.reshape(m1, r[1]), g2.reshape(r[1], m2 * r[2]))          # P2, k = r1
    left = left.reshape(m1 * m2, r[2])                                      # L
    right = mm(g3.reshape(r[2] * n1, r[3]), g4.reshape(r[3], n2))           # S3, k = r3
    right = right.reshape(r[2], n1 * n2)                                    # R
    z = mm(x, left)                                                         # k = (i1, i2)
    y = fp32_add(mm(z, right), bias[None, :])                               # k = r2
    dy = fp32_sub(y, t)
    assert np.array_equal(cl.read(out, "y").view(np.uint32), y.view(np.uint32))
    assert np.array_equal(cl.read(out, "dy").view(np.uint32), dy.view(np.uint32))
    assert np.array_equal(cl.read(out, "F:G1.G2").reshape(-1).view(np.uint32),
                          left.reshape(-1).view(np.uint32))
    # bias gradient: sequential over the batch from -0.0
    db = fp32_sum(dy, axis=0, init=np.float32(-0.0))
    assert np.array_equal(cl.grads(out)[-1].view(np.uint32), db.view(np.uint32))
    # dX = dZ L^T with dZ = dY R^T (k = (j1, j2), then k = r2)
    dz = mm(dy, right.T)
    dx = mm(dz, left.T)
    assert np.array_equal(cl.read(out, "dx").view(np.uint32), dx.view(np.uint32))


@pytest.mark.parametrize("order", ["bidirectional", "left_to_right", "dp_best"])
def test_scratch_reuse_same_results_smaller_store(order):
    spec = SPECS[2]
    B = 5
    cores, bias, x, t = problem(spec, B, seed=8)
    plain = compile_tt_linear(spec, B, order=order, lr=0.05)
    reuse = compile_tt_linear(spec, B, order=order, lr=0.05, reuse_scratch=True)
    peak = plan_layer(spec, B).orders[order].peak_live_words
    assert peak <= reuse.program.store_sizes["scratch"] < plain.program.store_sizes["scratch"]
    img_a = plain.initial_image(cores + [bias], x, t)
    img_b = reuse.initial_image(cores + [bias], x, t)
    for _ in range(2):
        img_a, st_a = run(plain.program, img_a)
        img_b, st_b = run(reuse.program, img_b)
        assert st_a.ok and st_b.ok
        for store in ("param", "grad", "act"):
            assert np.array_equal(img_a[store], img_b[store])


@pytest.mark.parametrize("spec, order", [(SPECS[1], "bidirectional"), (SPECS[2], "bidirectional"),
                                         (SPECS[3], "bidirectional"), (SPECS[4], "bidirectional"),
                                         (SPECS[2], "dp_best")],
                         ids=lambda v: getattr(v, "in_modes", v))
def test_sample_loop_is_bit_identical_to_batched(spec, order):
    """One LOOP over the samples (a row per iteration, sums over b accumulated across
    iterations after a -0.0 fill) gives every param/grad/act word of the batched program."""
    from ttrain.golden.isa import EndLoop, Loop

    B = 5
    cores, bias, x, t = problem(spec, B, seed=9)
    batched = compile_tt_linear(spec, B, order=order, lr=0.03, loss_scale=0.5)
    looped = compile_tt_linear(spec, B, order=order, lr=0.03, loss_scale=0.5, sample_loop=True)
    loops = [i for i in looped.program.instructions if isinstance(i, Loop)]
    assert len(loops) == 1 and loops[0].count == B
    assert sum(isinstance(i, EndLoop) for i in looped.program.instructions) == 1
    img_a = batched.initial_image(cores + [bias], x, t)
    img_b = looped.initial_image(cores + [bias], x, t)
    for _ in range(2):
        img_a, st_a = run(batched.program, img_a)
        img_b, st_b = run(looped.program, img_b)
        assert st_a.ok and st_b.ok
        assert st_a.macs == st_b.macs
        for store in ("param", "grad", "act"):
            assert np.array_equal(img_a[store], img_b[store]), store


def test_sample_loop_rejected_when_it_does_not_fit():
    with pytest.raises(ValueError, match="distinct row strides"):
        compile_tt_linear(SPECS[2], 5, order="left_to_right", sample_loop=True)
