# amaranth: UnusedElaboratable=no
"""The accelerator top (``rtl/top.py``) under Verilator, bit-exact against the interpreter.

One build (``tests/shared_top.py``: 4 lanes, stores sized for these programs and the whole-model
ones of ``test_model_verilator.py``) runs, through the Verilog host
driver ``platforms/sim/top_driver_tb.v``: three consecutive training steps of TT-linear layers
(bi-directional and left-to-right orders, batched and sample-loop programs) and of a dense
layer, every word of every store compared after every step; illegal programs (opcode, address
range) that must change no word, followed by a valid run; a gather whose index is out of the
table (run-time error after the earlier instructions completed); a program that uses every
special function (softmax rows, tanh/tanh_grad, gelu/gelu_grad, rsqrt, recip on edge values)
on the build's special-function unit (``special=True``); and a corrupted expectation that the
driver must report. The paper's 768x768 layer runs in ``ttrain bench layer``.
"""

import dataclasses

import numpy as np
import pytest

from ttrain.golden.contract import View
from ttrain.golden.interpreter import run as interpret
from ttrain.golden.isa import (ERR_A_RANGE, ERR_INDEX, ERR_OPCODE, SPECIAL_OPS, Elementwise,
                               End, Gather, Program, Reduce, decode_program, f32_bits)
from ttrain.rtl.sequencer import Sequencer
from ttrain.rtl.top import Accelerator
from ttrain.testbench.vector_ref import VectorUnit
from ttrain.platforms.sim.top import TopSession, layer_session, pad_image, run_top
from ttrain.platforms.sim.verilator import SimulationError, lint_verilator
from shared_top import layer_programs, shared_top



@pytest.fixture(scope="module")
def programs():
    return layer_programs()


@pytest.fixture(scope="module")
def top():
    return shared_top()


def test_training_steps_bit_exact(top, programs, tmp_path):
    sizes = top.config["store_sizes"]
    sess = TopSession()
    names = []
    for i, (name, cl) in enumerate(programs.items()):
        layer_session(cl, sizes, steps=3, seed=i, session=sess)
        names += [f"{name}.step{s}" for s in range(3)]
    res = run_top(top, sess, test_dir=tmp_path, timeout=600)
    assert len(res) == len(names)
    for r, name in zip(res, names):
        assert r["error"] == 0 and r["status_ok"] == 1, (name, r)
        assert 0 < r["engine_cycles"] <= r["busy_engine"] <= r["cycles"], (name, r)
        assert r["busy_vector"] > 0 and r["busy_update"] > 0, (name, r)


def _image_and_words(cl, sizes, seed=0):
    rng = np.random.default_rng(seed)
    mm = cl.memory_map
    params = [rng.standard_normal(mm[n].shape).astype(np.float32) for n in cl.param_names]
    x = rng.standard_normal(mm["x"].shape).astype(np.float32)
    t = rng.standard_normal(mm["target"].shape).astype(np.float32)
    return pad_image(cl.initial_image(params, x, t), sizes), cl.program.words()


def test_illegal_programs_change_nothing_then_valid_runs(top, programs, tmp_path):
    sizes = top.config["store_sizes"]
    cl = programs["tt_bidir"]
    image, words = _image_and_words(cl, sizes)
    bad_op = list(words)
    k = 5
    bad_op[16 * k] = (bad_op[16 * k] & ~0xFF) | 0x7F             # reserved opcode
    instrs = decode_program(words)
    j = next(i for i, ins in enumerate(instrs) if isinstance(ins, Elementwise))
    over = dataclasses.replace(instrs[j].a, base=sizes[instrs[j].a.store] - 1)
    bad_range = Program(instrs[:j] + [dataclasses.replace(instrs[j], a=over)] + instrs[j + 1:],
                        sizes).words()
    sess = TopSession()
    sess.write_image(image)
    for prog, code, pc in ((bad_op, ERR_OPCODE, k), (bad_range, ERR_A_RANGE, j)):
        after, st = interpret(prog, image)
        assert (st.error, st.error_pc) == (code, pc)           # the golden agrees
        for store in image:
            assert np.array_equal(after[store], image[store])
        sess.program(prog)
        sess.run(f"code{code}", expect=image, error=1, code=code, pc=pc)
    want, st = interpret(words, image)
    assert st.error == 0
    sess.program(words)
    sess.run("valid", expect=want)
    res = run_top(top, sess, test_dir=tmp_path, timeout=300)
    assert [r["error_code"] for r in res] == [ERR_OPCODE, ERR_A_RANGE, 0]
    assert res[0]["executed"] == 0 and res[1]["executed"] == 0


def test_gather_index_error_stops_at_that_instruction(top, tmp_path):
    sizes = top.config["store_sizes"]
    rng = np.random.default_rng(3)
    image = {s: rng.standard_normal(n).astype(np.float32).view(np.uint32) for s, n in
             sizes.items()}
    image["act"][:2] = [1, 5]                                   # index 5 >= table_rows 3
    prog = [
        Elementwise("add", 2, 4, View("scratch", 32, 4, 1), View("param", 0, 4, 1),
                    View("param", 16, 4, 1)),
        Gather("gather", 2, 4, 3, View("scratch", 0, 4, 1), View("param", 0, 4, 1),
               View("act", 0, 1, 0)),
        Elementwise("fill", 2, 4, View("scratch", 64, 4, 1), imm=f32_bits(1.0)),
        End(),
    ]
    want, st = interpret(prog, image)
    assert (st.error, st.error_pc) == (ERR_INDEX, 1)
    assert not np.array_equal(want["scratch"], image["scratch"])    # the add did run
    sess = TopSession()
    sess.write_image(image)
    sess.program(Program(prog, sizes).words())
    sess.run("gather_error", expect=want, error=1, code=ERR_INDEX, pc=1)
    res = run_top(top, sess, test_dir=tmp_path, timeout=300)
    assert res[0]["error_code"] == ERR_INDEX


def test_special_functions_program_bit_exact(top, tmp_path):
    """Every special op on the top's vector unit (full SpecialFunctionUnit, Verilog FP units):
    a softmax over the rows of a 4 x 12 matrix (rmax, sub with a broadcast column, exp in
    place, rsum, recip, mul), log of the row sums (the loss's log-sum-exp), tanh then
    tanh_grad of its output, gelu on a transposed view, gelu_grad, rsqrt and recip in place
    on random values with edge patterns, log of those reciprocals in place (signs, zeros,
    infinities, NaNs); every store word compared with the interpreter, twice (the second run
    starts from the first's result)."""
    sizes = top.config["store_sizes"]
    assert top.config.get("special") and top.config.get("special_impl") == "verilog"
    rng = np.random.default_rng(8)
    image = {s: (4 * rng.standard_normal(n)).astype(np.float32).view(np.uint32)
             for s, n in sizes.items()}
    edges = np.array([0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x00000001,
                      0x807FFFFF, 0x7F7FFFFF, 0x3F800000, 0xC2D00000, 0x42B20000, 0x00800000],
                     np.uint32)
    for store, base in (("param", 0), ("grad", 12), ("act", 160)):
        image[store][base:base + edges.size] = edges
    image["act"][:48] = (8 * rng.standard_normal(48)).astype(np.float32).view(np.uint32)
    X, Y = View("act", 0, 12, 1), View("act", 48, 12, 1)
    E, mx, sm, rc = (View("scratch", 0, 12, 1), View("scratch", 48, 1, 0),
                     View("scratch", 52, 1, 0), View("scratch", 56, 1, 1))
    th = View("scratch", 64, 8, 1)
    prog = [
        Reduce("max", 4, 12, mx, X),
        Elementwise("sub", 4, 12, E, X, mx),                 # b: one word per row, broadcast
        Elementwise("exp", 4, 12, E, E),
        Reduce("sum", 4, 12, sm, E),
        Elementwise("recip", 4, 1, rc, View("scratch", 52, 1, 1)),
        Elementwise("mul", 4, 12, Y, E, View("scratch", 56, 1, 0)),
        Elementwise("log", 4, 1, View("scratch", 60, 1, 1), View("scratch", 52, 1, 1)),
        Elementwise("tanh", 4, 8, th, View("act", 96, 8, 1)),
        Elementwise("tanh_grad", 4, 8, th, th),
        Elementwise("gelu", 8, 4, View("scratch", 96, 4, 1), View("act", 128, 1, 8)),
        Elementwise("gelu_grad", 4, 8, View("act", 192, 8, 1), View("act", 160, 8, 1)),
        Elementwise("rsqrt", 4, 12, View("param", 0, 12, 1), View("param", 0, 12, 1)),
        Elementwise("recip", 4, 12, View("grad", 0, 12, 1), View("grad", 0, 12, 1)),
        Elementwise("log", 4, 12, View("grad", 0, 12, 1), View("grad", 0, 12, 1)),
        End(),
    ]
    words = Program(prog, sizes).words()
    used = {ins.op for ins in prog if isinstance(ins, Elementwise)}
    assert set(SPECIAL_OPS) <= used                    # every special function, log included
    sess = TopSession()
    sess.write_image(image)
    sess.program(words)
    cur = image
    for step in range(2):
        want, st = interpret(words, cur)
        assert st.ok, st.message
        sess.run(f"special{step}", expect=want)
        cur = want
    # the softmax rows sum to about 1 (a sanity check of the golden program itself)
    y = cur["act"][48:96].view(np.float32).reshape(4, 12)
    assert np.all(np.isfinite(y))
    lse = cur["scratch"][60:64].view(np.float32)       # log of sums >= 1 (the max's exp is 1)
    assert np.all(np.isfinite(lse)) and np.all(lse >= 0)
    res = run_top(top, sess, test_dir=tmp_path, timeout=600)
    assert [r["error"] for r in res] == [0, 0]
    assert all(r["status_ok"] == 1 and r["busy_vector"] > 0 for r in res), res


def test_driver_reports_a_wrong_word(top, programs, tmp_path):
    sizes = top.config["store_sizes"]
    cl = programs["dense"]
    image, words = _image_and_words(cl, sizes, seed=9)
    want, _ = interpret(words, image)
    wrong = {s: w.copy() for s, w in want.items()}
    r = cl.memory_map["w"]
    wrong[r.store][r.base + 3] ^= 1                             # one bit of one weight
    sess = TopSession()
    sess.write_image(image)
    sess.program(words)
    sess.run("wrong", expect=wrong)
    with pytest.raises(SimulationError, match=rf"param\[{r.base + 3}\]"):
        run_top(top, sess, test_dir=tmp_path, timeout=300)


def test_session_rejects_bad_input():
    sess = TopSession()
    with pytest.raises(ValueError, match="store must be one of"):
        sess.write("weights", 0, [1, 2])
    with pytest.raises(ValueError, match="multiple of 16"):
        sess.program([1, 2, 3])
    with pytest.raises(ValueError, match="load a program"):
        sess.run("x")
    with pytest.raises(ValueError, match="vector must be one of"):
        Accelerator(store_sizes={"param": 8, "grad": 8, "act": 8, "scratch": 8}, vector="simd")
    with pytest.raises(ValueError, match="store_sizes must give"):
        Accelerator(store_sizes={"param": 8})


SIZES = {"param": 1024, "grad": 1024, "act": 2048, "scratch": 4096}


def test_units_lint_clean():
    for hs in (False, True):
        assert lint_verilator(VectorUnit(addr_bits=12, handshake=hs),
                              name=f"ttrain_vector_hs{int(hs)}") == ""
    for max_dim in (None, 255):
        assert lint_verilator(Sequencer(store_sizes=SIZES, imem_depth=64, max_dim=max_dim),
                              name=f"ttrain_sequencer_{max_dim or 0}") == ""


def test_top_lint_clean(top):
    """``verilator --lint-only -Wall`` of the Verilog the shared top was built from (the top,
    its unit modules and the RAM; not the host driver): the configuration the other tests
    run, linted without converting a second top."""
    from pathlib import Path
    build = top.build
    sources = [Path(p) for p in build.sources if Path(p).suffix == ".v"
               and Path(p).name != "top_driver_tb.v"]
    assert f"{build.name}.v" in {p.name for p in sources} and "ram.v" in {p.name for p in sources}
    assert lint_verilator(None, name=build.name, extra_sources=sources, top=build.name) == ""
