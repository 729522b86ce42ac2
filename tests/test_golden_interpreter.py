"""The bit-exact golden interpreter (golden/interpreter.py).

Expected values come from independent references: plain NumPy float32 arithmetic (which the
FP32 contract equals bit for bit: one rounding per operation), explicit Python loops for the
accumulation orders, and ``golden.contract.contract`` for CONTRACT.
"""

import numpy as np
import pytest

from ttrain.golden.contract import Descriptor, View, contract, random_descriptor
from ttrain.golden.interpreter import check_program, run
from ttrain.golden.isa import (
    ERR_A_RANGE, ERR_B_RANGE, ERR_C_RANGE, ERR_DIM, ERR_INDEX, ERR_LOOP, ERR_NO_END, ERR_OPCODE,
    ERR_OVERLAP, ERR_STORE, WORDS, Barrier, Contract, Elementwise, End, EndLoop, Gather,
    ISAError, Loop, Program, Reduce, Update, encode_program, f32_bits)
from ttrain.golden.special import FUNCTIONS, fp32_special

SIZES = {"param": 96, "grad": 96, "act": 128, "scratch": 128}


def image(rng, sizes=SIZES, special=True):
    img = {}
    for s, n in sizes.items():
        v = rng.standard_normal(n).astype(np.float32)
        if special:  # a few signed zeros, infinities, NaNs, subnormals
            pick = rng.integers(0, n, 6)
            v[pick] = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40], dtype=np.float32)
        img[s] = v.view(np.uint32)
    return img


def f32(img, store, start, count):
    return img[store][start:start + count].view(np.float32)


def prog(*instrs):
    return Program(list(instrs) + [End()], SIZES)


def test_contract_matches_golden_contract():
    rng = np.random.default_rng(1)
    for _ in range(20):
        img = image(rng, special=False)
        desc = random_descriptor(rng, SIZES, max_mn=6, max_k=6, max_batch=2)
        out, st = run(prog(Contract(desc)), img)
        assert st.ok and st.macs == desc.macs
        want = contract(desc, img)
        for s in SIZES:
            assert np.array_equal(out[s], want[s])
        # the input image is untouched
        assert not any(out[s] is img[s] for s in SIZES)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "scale", "addi", "copy", "fill"])
def test_elementwise_ops_bit_exact(op):
    rng = np.random.default_rng(2)
    img = image(rng)
    rows, cols = 3, 5
    d = View("scratch", 10, 7, 1)
    a = View("act", 3, 1, 4)          # transposed-style strides
    b = View("param", 0, 0, 2)        # broadcast row (zero row stride)
    imm = f32_bits(-1.75)
    nsrc = {"add": 2, "sub": 2, "mul": 2, "scale": 1, "addi": 1, "copy": 1, "fill": 0}[op]
    ins = Elementwise(op, rows, cols, d, a if nsrc else None, b if nsrc == 2 else None,
                      imm if op in ("scale", "addi", "fill") else 0)
    out, st = run(prog(ins), img)
    assert st.ok
    ii, jj = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    av = img["act"][3 + ii * 1 + jj * 4]
    bv = img["param"][0 + jj * 2]
    A, B = av.view(np.float32), bv.view(np.float32)
    with np.errstate(all="ignore"):
        want = {"add": lambda: A + B, "sub": lambda: A - B, "mul": lambda: A * B,
                "scale": lambda: A * np.float32(-1.75), "addi": lambda: A + np.float32(-1.75),
                "copy": lambda: av.view(np.float32),
                "fill": lambda: np.full((rows, cols), -1.75, np.float32)}[op]()
    got = out["scratch"][10 + ii * 7 + jj].view(np.float32)
    wb = want.view(np.uint32).copy()
    wb[np.isnan(want)] = 0x7FC00000 if op != "copy" else wb[np.isnan(want)]
    assert np.array_equal(got.view(np.uint32), wb)
    # every other word unchanged
    mask = np.ones(SIZES["scratch"], bool)
    mask[10 + ii * 7 + jj] = False
    assert np.array_equal(out["scratch"][mask], img["scratch"][mask])
    for s in ("param", "grad", "act"):
        assert np.array_equal(out[s], img[s])


_EDGES = np.array([0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001,
                   0x00000001, 0x80000001, 0x007FFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF,
                   0x3F800000, 0xBF800000, 0x42B20000, 0xC2D00000, 0x3F200000, 0xC1A00000],
                  dtype=np.uint32)


@pytest.mark.parametrize("func", FUNCTIONS)
def test_special_functions_bit_exact(func):
    """Every special op equals golden.special.fp32_special on random words, wide-range values
    and edge patterns, through strided views (transposed source), in place, and in a LOOP."""
    rng = np.random.default_rng(sum(map(ord, func)))
    sizes = {"param": 64, "grad": 64, "act": 256, "scratch": 256}
    img = image(rng, sizes)
    vals = np.concatenate([_EDGES, rng.integers(0, 2**32, 40, dtype=np.uint32),
                           (rng.standard_normal(62) * 8).astype(np.float32).view(np.uint32)])
    img["act"][:120] = vals
    rows, cols = 10, 12
    a = View("act", 0, 1, 10)                    # column j of the source is words 10j..10j+9
    d = View("scratch", 3, 13, 1)
    out, st = run(prog(Elementwise(func, rows, cols, d, a)), img)
    assert st.ok and st.elementwise == rows * cols and st.by_op[func] == 1
    ii, jj = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    src = img["act"][ii + 10 * jj]
    want = np.asarray(fp32_special(func, src.view(np.float32)), np.float32).view(np.uint32)
    assert np.array_equal(out["scratch"][3 + 13 * ii + jj], want)
    mask = np.ones(sizes["scratch"], bool)
    mask[3 + 13 * ii + jj] = False
    assert np.array_equal(out["scratch"][mask], img["scratch"][mask])
    for s in ("param", "grad", "act"):
        assert np.array_equal(out[s], img[s])
    # in place, 12 x 10 over the same words
    v = View("act", 0, 10, 1)
    out, st = run(prog(Elementwise(func, 12, 10, v, v)), img)
    assert st.ok
    assert np.array_equal(out["act"][:120], np.asarray(
        fp32_special(func, vals.view(np.float32)), np.float32).view(np.uint32))
    assert np.array_equal(out["act"][120:], img["act"][120:])
    # a LOOP stepping both bases: row t of act -> row t of scratch
    out, st = run(prog(Loop(12, (10, 20, 0)),
                       Elementwise(func, 1, 10, View("scratch", 0), View("act", 0),
                                   step=(2, 1, 0)), EndLoop()), img)
    assert st.ok and st.by_op[func] == 12 and st.elementwise == 120
    got = out["scratch"][(20 * np.arange(12)[:, None] + np.arange(10)).ravel()]
    assert np.array_equal(got, np.asarray(fp32_special(func, vals.view(np.float32)),
                                          np.float32).view(np.uint32))


def test_log_opcode_runs_fp32_log():
    """``log`` (opcode 0x47, the loss's log-sum-exp) is golden.special.fp32_log word for word,
    on the positive sums a softmax produces and on the edge patterns."""
    from ttrain.golden.special import fp32_log
    rng = np.random.default_rng(47)
    img = image(rng, {"param": 64, "grad": 64, "act": 256, "scratch": 256}, special=False)
    vals = np.concatenate([_EDGES, rng.uniform(1, 64, 46).astype(np.float32).view(np.uint32)])
    img["act"][:64] = vals
    words = encode_program([Elementwise("log", 8, 8, View("scratch", 0, 8, 1),
                                       View("act", 0, 8, 1)), End()])
    assert words[0] & 0xFF == 0x47
    out, st = run(words, img)
    assert st.ok and st.by_op["log"] == 1 and st.elementwise == 64
    want = np.asarray(fp32_log(vals.view(np.float32)), np.float32).view(np.uint32)
    assert np.array_equal(out["scratch"][:64], want)


def test_special_function_overlap_and_range_checked():
    rng = np.random.default_rng(4)
    img = image(rng)
    v = View("act", 0, 4, 1)
    out, st = run(prog(Elementwise("exp", 2, 4, View("act", 1, 4, 1), v)), img)
    assert st.error == ERR_OVERLAP and all(np.array_equal(out[s], img[s]) for s in SIZES)
    out, st = run(prog(Elementwise("tanh", 2, 4, v, View("act", SIZES["act"] - 4, 4, 1))), img)
    assert st.error == ERR_A_RANGE and all(np.array_equal(out[s], img[s]) for s in SIZES)


def test_elementwise_in_place_allowed_partial_overlap_rejected():
    rng = np.random.default_rng(3)
    img = image(rng, special=False)
    v = View("act", 0, 4, 1)
    out, st = run(prog(Elementwise("scale", 2, 4, v, v, imm=f32_bits(2.0))), img)
    assert st.ok
    assert np.array_equal(f32(out, "act", 0, 8), f32(img, "act", 0, 8) * np.float32(2))
    out, st = run(prog(Elementwise("copy", 2, 4, View("act", 1, 4, 1), v)), img)
    assert st.error == ERR_OVERLAP
    assert all(np.array_equal(out[s], img[s]) for s in SIZES)


@pytest.mark.parametrize("acc", [False, True])
def test_reductions_sequential_order(acc):
    rng = np.random.default_rng(4)
    img = image(rng, special=False)
    # values chosen so that the summation order matters
    vals = (rng.standard_normal(40) * 10.0 ** rng.integers(-6, 7, 40)).astype(np.float32)
    img["act"][:40] = vals.view(np.uint32)
    rows, cols = 5, 8
    a = View("act", 0, 8, 1)
    for op in ("sum", "max"):
        d = View("scratch", 50, 3, 0)
        out, st = run(prog(Reduce(op, rows, cols, d, a, acc)), img)
        assert st.ok
        x = vals.reshape(rows, cols)
        old = img["scratch"][50 + 3 * np.arange(rows)].view(np.float32)
        for i in range(rows):
            if op == "sum":
                s = old[i] if acc else np.float32(-0.0)
                for j in range(cols):
                    s = np.float32(s + x[i, j])
            else:
                s = max(old[i], x[i, 0]) if acc else x[i, 0]
                for j in range(1, cols):
                    s = max(s, x[i, j])
            assert out["scratch"][50 + 3 * i] == np.float32(s).view(np.uint32), (op, i)


def test_reduce_sum_of_negative_zeros_is_negative_zero():
    img = {s: np.zeros(n, np.uint32) for s, n in SIZES.items()}
    img["act"][:4] = np.array([-0.0] * 4, np.float32).view(np.uint32)
    out, st = run(prog(Reduce("sum", 1, 4, View("scratch", 0, 1, 0), View("act", 0, 4, 1))),
                  img)
    assert st.ok and out["scratch"][0] == 0x80000000


def test_gather_and_scatter_add_with_repeats():
    rng = np.random.default_rng(5)
    img = image(rng, special=False)
    idx = np.array([3, 1, 3, 0, 3, 1], np.uint32)
    img["grad"][80:86] = idx
    table = View("param", 0, 6, 1)           # 5 rows x 4 cols, ld 6
    rows = View("act", 0, 4, 1)
    out, st = run(prog(Gather("gather", 6, 4, 5, View("scratch", 0, 4, 1), table,
                              View("grad", 80, 1, 0))), img)
    assert st.ok
    for r, t in enumerate(idx):
        assert np.array_equal(out["scratch"][4 * r:4 * r + 4], img["param"][6 * t:6 * t + 4])
    out, st = run(prog(Gather("scatter_add", 6, 4, 5, table, rows,
                              View("grad", 80, 1, 0))), img)
    assert st.ok
    want = img["param"].view(np.float32).copy()
    src = img["act"].view(np.float32)
    for r, t in enumerate(idx):          # sequential, list order
        for c in range(4):
            want[6 * t + c] = np.float32(want[6 * t + c] + src[4 * r + c])
    assert np.array_equal(out["param"], want.view(np.uint32))


def test_gather_index_out_of_range_is_runtime_error_before_writes():
    rng = np.random.default_rng(6)
    img = image(rng, special=False)
    img["grad"][80:82] = np.array([1, 9], np.uint32)
    first = Elementwise("fill", 1, 2, View("scratch", 100, 0, 1), imm=f32_bits(3.0))
    g = Gather("gather", 2, 4, 5, View("scratch", 0, 4, 1), View("param", 0, 6, 1),
               View("grad", 80, 1, 0))
    out, st = run(prog(first, g), img)
    assert st.error == ERR_INDEX and st.error_pc == 1
    # the instruction before ran, the gather wrote nothing
    assert np.array_equal(f32(out, "scratch", 100, 2), [3.0, 3.0])
    assert np.array_equal(out["scratch"][:8], img["scratch"][:8])
    with pytest.raises(ISAError, match="outside the 5-row table"):
        run(prog(first, g), img, raise_errors=True)


def test_update_exact_and_clears_gradient():
    rng = np.random.default_rng(7)
    img = image(rng)
    lr = f32_bits(0.0125)
    out, st = run(prog(Update(View("param", 4), View("grad", 10), 50, lr)), img)
    assert st.ok and st.updated == 50
    th, g = f32(img, "param", 4, 50), f32(img, "grad", 10, 50)
    with np.errstate(all="ignore"):
        want = th - np.float32(0.0125) * g      # two roundings: mul then sub
    wb = want.view(np.uint32).copy()
    wb[np.isnan(want)] = 0x7FC00000
    assert np.array_equal(out["param"][4:54], wb)
    assert not out["grad"][10:60].any()
    assert np.array_equal(out["grad"][:10], img["grad"][:10])
    assert np.array_equal(out["param"][:4], img["param"][:4])


def test_loop_equals_unrolled_program():
    rng = np.random.default_rng(8)
    img = image(rng, special=False)
    # per sample: y_t = x_t . W (1 x 4 times 4 x 3), then y_t *= 0.5; x rows at act@0 step 4
    body = [Contract(Descriptor(1, 3, 4, View("act", 0, 4, 1), View("param", 0, 3, 1),
                                View("scratch", 0, 3, 1)), step=(2, 1, 0)),
            Elementwise("scale", 1, 3, View("scratch", 0, 3, 1), View("scratch", 0, 3, 1),
                        imm=f32_bits(0.5), step=(2, 2, 0))]
    looped = prog(Loop(6, (4, 3, 0)), *body, EndLoop(), Barrier())
    out, st = run(looped, img)
    assert st.ok and st.by_op["contract"] == 6 and st.macs == 6 * 12
    unrolled = []
    for t in range(6):
        unrolled += [Contract(Descriptor(1, 3, 4, View("act", 4 * t, 4, 1),
                                         View("param", 0, 3, 1),
                                         View("scratch", 3 * t, 3, 1))),
                     Elementwise("scale", 1, 3, View("scratch", 3 * t, 3, 1),
                                 View("scratch", 3 * t, 3, 1), imm=f32_bits(0.5))]
    out2, st2 = run(prog(*unrolled), img)
    for s in SIZES:
        assert np.array_equal(out[s], out2[s])
    # and equal to the batched contraction scaled
    x = f32(img, "act", 0, 24).reshape(6, 4)
    w = f32(img, "param", 0, 12).reshape(4, 3)
    y = f32(out, "scratch", 0, 18).reshape(6, 3)
    assert np.allclose(y, 0.5 * (x @ w), rtol=1e-5, atol=1e-6)


def test_runs_from_words_and_program_text():
    rng = np.random.default_rng(9)
    img = image(rng, special=False)
    ins = [Elementwise("addi", 2, 2, View("act", 0, 2, 1), View("act", 0, 2, 1),
                       imm=f32_bits(1.0)), End()]
    a, _ = run(ins, img)
    b, _ = run(encode_program(ins), img)
    assert all(np.array_equal(a[s], b[s]) for s in SIZES)


def _unchanged(out, img):
    return all(np.array_equal(out[s], img[s]) for s in img)


@pytest.mark.parametrize("case, code", [
    ("opcode", ERR_OPCODE), ("c_range", ERR_C_RANGE), ("a_range", ERR_A_RANGE),
    ("b_range", ERR_B_RANGE), ("loop_range", ERR_C_RANGE), ("store", ERR_STORE),
    ("no_end", ERR_NO_END), ("nested", ERR_LOOP), ("endloop", ERR_LOOP),
    ("update_range", ERR_A_RANGE), ("overlap", ERR_OVERLAP),
])
def test_errors_leave_image_unchanged_and_next_program_runs(case, code):
    rng = np.random.default_rng(10)
    img = image(rng, special=False)
    good = Elementwise("scale", 2, 2, View("act", 0, 2, 1), View("act", 0, 2, 1),
                       imm=f32_bits(3.0))
    bad_tail = {
        "c_range": [Contract(Descriptor(2, 2, 2, View("act", 0, 2, 1), View("act", 4, 2, 1),
                                        View("scratch", 127, 2, 1)))],
        "a_range": [Contract(Descriptor(2, 2, 2, View("act", 120, 9, 1),
                                        View("act", 4, 2, 1), View("scratch", 0, 2, 1)))],
        "b_range": [Elementwise("add", 1, 4, View("act", 0, 0, 1), View("act", 0, 0, 1),
                                View("param", 94, 0, 1))],
        "loop_range": [Loop(40, (4, 0, 0)),
                       Elementwise("fill", 1, 3, View("scratch", 0, 0, 1), imm=0,
                                   step=(1, 0, 0)), EndLoop()],
        "store": [Elementwise("fill", 1, 1, View("act", 0), imm=0)],
        "nested": [Loop(2), Loop(2), EndLoop(), EndLoop()],
        "endloop": [EndLoop()],
        "update_range": [Update(View("param", 0), View("grad", 50), 47, f32_bits(0.1))],
        "overlap": [Update(View("param", 0), View("param", 10), 20, f32_bits(0.1))],
    }
    if case == "opcode":
        words = encode_program([good, End()])
        words[WORDS] = 0x48        # a reserved special-function opcode as the 2nd instruction
        program = words
    elif case == "no_end":
        program = [good]
    else:
        program = [good] + bad_tail[case] + [End()]
    use = dict(img)
    if case == "store":
        use = {s: v for s, v in img.items() if s != "act"}
        program = [Elementwise("fill", 1, 1, View("act", 0), imm=0), End()]
    out, st = run(program, use)
    assert st.error == code, st.message
    assert st.message
    assert _unchanged(out, use)
    if case not in ("opcode",):
        assert check_program(program, {s: v.size for s, v in use.items()})[0] == code
    # the next valid program runs normally on the same image
    out2, st2 = run([good, End()], img)
    assert st2.ok
    assert np.array_equal(f32(out2, "act", 0, 4), f32(img, "act", 0, 4) * np.float32(3))


def test_trace_sees_every_dynamic_instruction():
    rng = np.random.default_rng(12)
    img = image(rng, special=False)
    body = Elementwise("addi", 1, 2, View("act", 0, 0, 1), View("act", 0, 0, 1),
                       imm=f32_bits(1.0), step=(1, 1, 0))
    program = prog(Loop(3, (2, 0, 0)), body, EndLoop())
    seen = []

    def trace(pc, ins, work):
        seen.append((pc, getattr(ins, "d", None), work["act"][:6].copy()))

    out, st = run(program, img, trace=trace)
    assert st.ok and len(seen) == st.instructions == 6
    assert [pc for pc, _, _ in seen] == [0, 1, 1, 1, 2, 3]
    assert [v.base for _, v, _ in seen[1:4]] == [0, 2, 4]
    # after the second body iteration words 0..3 are done, 4..5 not yet
    assert np.array_equal(seen[2][2][:4], out["act"][:4])
    assert np.array_equal(seen[2][2][4:6], img["act"][4:6])
    with pytest.raises(TypeError, match="callable"):
        run(program, img, trace=3)


def test_update_agrees_with_the_update_pipeline_golden():
    """UPDATE equals golden.update.sgd_update_bits (the update pipeline's reference) on raw
    random bit patterns: NaNs with payloads, infinities, zeros, subnormals included."""
    from ttrain.golden.update import sgd_update_bits

    rng = np.random.default_rng(13)
    n = 90
    for lr_bits in (f32_bits(0.01), f32_bits(-3.0), 0x00000001, 0x7F800000, 0x7FA00001, 0):
        img = {s: rng.integers(0, 2**32, size, dtype=np.uint64).astype(np.uint32)
               for s, size in SIZES.items()}
        out, st = run(prog(Update(View("param", 3), View("grad", 2), n, lr_bits)), img)
        assert st.ok
        want_t, want_g = sgd_update_bits(img["param"][3:3 + n], img["grad"][2:2 + n], lr_bits)
        assert np.array_equal(out["param"][3:3 + n], want_t)
        assert np.array_equal(out["grad"][2:2 + n], want_g)


def test_engine_dimension_limit():
    rng = np.random.default_rng(14)
    img = image(rng, special=False)
    c = Contract(Descriptor(2, 3, 9, View("act", 0, 9, 1), View("param", 0, 3, 1),
                            View("scratch", 0, 3, 1)))
    assert run(prog(c), img, max_dim=9)[1].ok
    out, st = run(prog(c), img, max_dim=8)
    assert st.error == ERR_DIM and _unchanged(out, img)
