"""The sequencer's issue model and the compiler's scheduling pass (``golden/schedule.py``).

* the walk on hand-made programs: independent instructions of two units overlap, conflicting
  ones wait for each other, nothing issues after a gather until it is done, BARRIER and END
  wait for every unit, one instruction per unit at a time;
* ``interleave``: on compiled whole-model steps every store word after the step (and after
  the forward section alone) equals the compiled order's, each instruction appears once, each
  conflicting pair keeps its order, no instruction leaves its section or a loop body, and the
  modelled step is no slower (and on ``tiny`` at 8 lanes clearly faster).

The walk's cycle accuracy against the chip is checked on the chip's own instruction trace in
``tests/test_seeing_inside.py``.
"""

import numpy as np
import pytest

from ttrain.golden import config as C
from ttrain.golden import model as M
from ttrain.golden.contract import Descriptor, View
from ttrain.golden.data import generate_dataset
from ttrain.golden.interpreter import dynamic_stream, run
from ttrain.golden.isa import (Barrier, Contract, Elementwise, End, EndLoop, Gather, Loop,
                               f32_bits)
from ttrain.golden.model_compiler import compile_model
from ttrain.golden.schedule import (CONTROL_GAP, ISSUE_GAP, conflicts, extents, interleave,
                                    interleave_model, schedule)
from ttrain.platforms.hw import hw_config


def _con(c_base, a_base=0, store="scratch"):
    return Contract(Descriptor(2, 2, 2, View("param", a_base, 2, 1), View("param", 8, 2, 1),
                               View(store, c_base, 2, 1)))


def _fill(base, store="act"):
    return Elementwise("fill", 1, 4, View(store, base, 4, 1), imm=f32_bits(1.0))


def _copy(dst, src, store="scratch"):
    return Elementwise("copy", 1, 4, View("act", dst, 4, 1), View(store, src, 4, 1))


def _cost(table):
    return lambda ins: table[type(ins).__name__]


def test_walk_overlaps_independent_units_and_orders_conflicts():
    cost = _cost({"Contract": 100, "Elementwise": 30, "Gather": 50})
    g = ISSUE_GAP
    # a CONTRACT then an independent fill: the fill issues one gap later, beside it
    total, t = schedule([_con(0), _fill(0), End()], cost)
    assert t[0] == (g, g + 100) and t[1] == (2 * g, 2 * g + 30)
    assert total == g + 100 + 1                      # END waits for the engine
    # the copy reads what the CONTRACT writes: it waits for the done pulse
    total, t = schedule([_con(0), _copy(0, 0), End()], cost)
    assert t[1][0] == g + 100 + 1
    # two fills: the vector unit takes one at a time
    total, t = schedule([_fill(0), _fill(8), End()], cost)
    assert t[1][0] == t[0][1] + 1
    # nothing issues after a gather until it is done; the gather itself waits only for its
    # unit and for conflicts, so it runs beside the earlier CONTRACT
    gather = Gather("gather", 2, 2, 4, View("act", 16, 2, 1), View("grad", 0, 2, 1),
                    View("act", 40, 1, 0))
    later = _fill(32, "scratch")                      # independent of both
    assert not conflicts(extents(later), extents(gather) + extents(_con(0)))
    total, t = schedule([_con(0), gather, later, End()], cost)
    assert t[1][0] == 2 * g and t[2][0] == t[1][1] + g
    # a BARRIER waits for every unit
    total, t = schedule([_con(0), Barrier(), _fill(0), End()], cost)
    assert t[1][0] == g + 100 + 1 and t[2][0] == t[1][0] + g
    # control instructions pass in CONTROL_GAP cycles
    total, t = schedule([Loop(1, (0, 0, 0)), EndLoop(), End()], cost)
    assert [x[0] for x in t] == [CONTROL_GAP, 2 * CONTROL_GAP, 3 * CONTROL_GAP]


def test_interleave_moves_independent_work_beside_a_long_contract():
    # compiled order: CONTRACT, a copy of its result, then an unrelated fill; the fill can
    # run while the CONTRACT does, so the pass moves it ahead of the dependent copy
    prog_ins = [_con(0), _copy(0, 0), _fill(32), End()]
    from ttrain.golden.isa import Program
    prog = Program(prog_ins, {"param": 64, "act": 64, "scratch": 64})
    cost = _cost({"Contract": 100, "Elementwise": 30})
    new, order = interleave(prog, cost)
    assert order == [0, 2, 1, 3]
    before = schedule(prog.instructions, cost)[0]
    after = schedule(new.instructions, cost)[0]
    assert after < before


def _step_image(cm, seed=0):
    params = M.init_params(cm.cfg, np.random.default_rng(seed))
    ds = generate_dataset(seed=0, seq_len=cm.cfg.seq_len, vocab_size=min(cm.cfg.vocab, 128))
    batch = next(ds.batches("train", cm.cfg.batch, seed=np.random.default_rng([seed, 1])))
    image = cm.initial_image(params)
    for name, words in cm.sample_words(batch).items():
        r = cm.memory_map[name]
        image[r.store][r.base:r.base + r.size] = words
    return image


def _check_order(cm, new, order):
    old, ins = cm.program.instructions, new.program.instructions
    assert sorted(order) == list(range(len(old)))
    assert all(ins[i] == old[o] for i, o in enumerate(order))
    where = {o: i for i, o in enumerate(order)}
    ext = [extents(x) for x in old]
    for i in range(len(old)):
        for j in range(i):
            if conflicts(ext[i], ext[j]):
                assert where[j] < where[i], (j, i)
    for lo, hi in cm.sections.values():                  # nothing leaves its section
        assert sorted(order[lo:hi]) == list(range(lo, hi))
    for pc, x in enumerate(old):                          # loops and gathers stay put
        if isinstance(x, (Loop, EndLoop, Gather, End, Barrier)):
            assert order[pc] == pc
    in_loop = False
    for pc, x in enumerate(old):
        if isinstance(x, Loop):
            in_loop = True
        elif isinstance(x, EndLoop):
            in_loop = False
        elif in_loop:
            assert order[pc] == pc


@pytest.mark.parametrize("name,lanes,kw,loops", [
    ("tiny", 8, {}, False), ("tiny", 4, {"max_split": 4}, False), ("tiny2", 8, {}, False),
    ("tiny2", 8, {}, True), ("demo", 8, {}, True)])
def test_interleaved_step_writes_the_same_words(name, lanes, kw, loops):
    """The scheduling pass on compiled steps: the same words after the step and after its
    forward section, never a slower walk. Without the loop passes every instruction stays
    once and in its section and loop; with them (the default) ``tiny2``'s loops are
    software-pipelined (checked to happen), which changes the instructions, not the
    words."""
    cfg = C.get_config("demo" if name == "demo" else "tiny")
    if name == "tiny2":
        cfg = cfg.with_(batch=2, n_layers=2)
    cm = compile_model(cfg)
    if kw:
        from dataclasses import replace
        cm = replace(cm, program=cm.program.for_engine(lanes, 16, kw["max_split"]))
    hw = hw_config({cfg.name: cm}, config=cfg.name, lanes=lanes, slots=16, **kw)
    cost = hw.cycle_model()
    new = interleave_model(cm, cost, loops=loops)
    if not loops:
        _check_order(cm, new, _order_of(cm, new))
    elif name == "tiny2":
        from ttrain.golden.schedule import pipeline_loops
        assert len(pipeline_loops(cm.program, cost)[0].instructions) > len(
            cm.program.instructions)
    image = _step_image(cm)
    want, st = run(cm.program, image)
    got, st2 = run(new.program, image)
    assert st.ok and st2.ok and (loops or st.instructions == st2.instructions)
    for s in want:
        np.testing.assert_array_equal(got[s], want[s], err_msg=s)
    assert new.loss(got) == cm.loss(want)
    # the forward section alone (ChipRun's forward-only runs) ends in the same words too
    from ttrain.golden.isa import Program
    fw = [Program(p.instructions[:c.sections["forward"][1]] + [End()], p.store_sizes,
                  p.memory_map) for p, c in ((cm.program, cm), (new.program, new))]
    a, _ = run(fw[0], image)
    b, _ = run(fw[1], image)
    for s in a:
        np.testing.assert_array_equal(a[s], b[s], err_msg=f"forward {s}")
    before = schedule([x for _, x in dynamic_stream(cm.program.instructions)], cost)[0]
    after = schedule([x for _, x in dynamic_stream(new.program.instructions)], cost)[0]
    assert after <= before
    if name == "tiny" and not kw:
        assert after < 0.97 * before, (before, after)


def _order_of(cm, new):
    """``order[new pc] = old pc`` recovered by matching instructions in sequence (the pass
    keeps identical instructions in their relative order: every instruction writes, so two
    identical ones conflict)."""
    used, order = set(), []
    old = cm.program.instructions
    for x in new.program.instructions:
        i = next(i for i, y in enumerate(old) if i not in used and y == x)
        used.add(i)
        order.append(i)
    return order


def test_prng_ops_run_on_the_vector_unit_with_the_sequencers_hulls():
    from ttrain.golden.isa import Random
    from ttrain.golden.schedule import VECTOR, unit_of
    r = Random("perturb8", 2, 3, View("act", 10, 3, 1), View("param", 0, 3, 1),
               View("scratch", 7, 1, 0), sigma=1)
    assert unit_of(r) == VECTOR
    # slots 0 and 1 rows x cols, slot 2 the one seed word (rtl/sequencer.py's extents)
    assert extents(r) == [("act", 10, 15, True), ("param", 0, 5, False),
                          ("scratch", 7, 7, False)]
    total, t = schedule([_con(0), r, End()], _cost({"Contract": 100, "Random": 20}))
    assert t[1][0] == 2 * ISSUE_GAP                   # independent: beside the CONTRACT
    hw = hw_config({"tiny": compile_model(C.get_config("tiny"))}, config="tiny", lanes=4,
                   slots=8)
    with pytest.raises(ValueError, match="no cycle model of the PRNG op perturb8"):
        hw.cycle_model()(r)


def test_bench_steps_model_is_the_walk_of_the_step():
    """``ttrain bench step``'s model row: the walk's cycles and the units' busy sums."""
    from ttrain.golden.schedule import busy_cycles
    from ttrain.testbench.bench_step import _walk_model
    cm = compile_model(C.get_config("tiny"))
    hw = hw_config({"tiny": cm}, config="tiny", lanes=8, slots=16)
    got = _walk_model({cm.positions: cm}, hw)[cm.positions]
    dyn = [x for _, x in dynamic_stream(cm.program.instructions)]
    cost = hw.cycle_model()
    assert got["cycles"] == schedule(dyn, cost)[0]
    assert [got[k] for k in ("engine", "vector", "update")] == busy_cycles(dyn, cost)
    assert max(got["engine"], got["vector"]) < got["cycles"] < sum(busy_cycles(dyn, cost)) + \
        ISSUE_GAP * len(dyn)


def test_the_machine_chooses_the_ttm_group_from_the_walk_of_each_group():
    """``ttm_group_walks`` lists every distinct group's words and walked cycles on the machine
    (the groups up to the grid's rows, each walk that of the interleaved program, as bench
    step runs it); ``fastest_ttm_group`` takes the fewest words within the tolerance of the
    fewest cycles, and a memory bound cuts the list at the first group that does not fit."""
    from ttrain.golden.schedule import fastest_ttm_group, ttm_group_walks
    cfg = C.get_config("tiny")
    auto = compile_model(cfg)
    cost = hw_config({"tiny": auto}, config="tiny", lanes=8, slots=16).cycle_model()
    walks = ttm_group_walks(cfg, cost, order=dict(auto.order))
    rows = cfg.batch * cfg.seq_len
    assert [w["group"] for w in walks] == [1 << i for i in range(rows.bit_length())]
    assert all(w["cycles"] is not None for w in walks)
    words = [w["words"] for w in walks]
    assert words == sorted(words) and words[0] == sum(
        compile_model(cfg, ttm_group=1, order=dict(auto.order)).store_sizes.values())
    # the figure of one group is the walk of its interleaved program
    g = walks[1]["group"]
    cm = interleave_model(compile_model(cfg, ttm_group=g, order=dict(auto.order)), cost)
    assert walks[1]["cycles"] == schedule(
        [x for _, x in dynamic_stream(cm.program.instructions)], cost)[0]
    # the choice: exact fastest at tolerance 0, the fewest words near it otherwise
    fastest = min(walks, key=lambda w: (w["cycles"], w["words"]))
    assert fastest_ttm_group(walks, tolerance=0) == fastest["group"]
    near = [w for w in walks if w["cycles"] <= fastest["cycles"] * 1.01]
    chosen = fastest_ttm_group(walks)
    assert chosen == min(near, key=lambda w: (w["words"], w["group"]))["group"]
    assert len({w["cycles"] for w in walks}) > 1       # the groups do differ in cycles
    # a memory bound: the list stops at the first group over it
    cut = ttm_group_walks(cfg, cost, max_words=words[-1] - 1, order=dict(auto.order))
    assert cut[-1] == {**walks[-1], "cycles": None} and cut[:-1] == walks[:-1]
    with pytest.raises(ValueError, match="no TTM group fits the memory"):
        fastest_ttm_group(ttm_group_walks(cfg, cost, max_words=words[0] - 1))
    with pytest.raises(ValueError, match="ttm_group is what it varies"):
        ttm_group_walks(cfg, cost, ttm_group=2)
    # a mapped machine: the walks are of the mapped programs
    mapped = ttm_group_walks(cfg, cost, order=dict(auto.order),
                             map_program=lambda p: p.for_engine(8, 16, 8))
    assert [w["words"] for w in mapped] == words


def _loop_program(body, count=4, increments=(4, 0, 0)):
    from ttrain.golden.isa import Program
    ins = [Elementwise("fill", 1, 4, View("act", 0, 4, 1), imm=f32_bits(1.5)),
           Elementwise("fill", 1, 8, View("param", 0, 8, 1), imm=f32_bits(0.75)),
           Loop(count, increments), *body, EndLoop(), End()]
    return Program(ins, {"param": 64, "act": 64, "scratch": 64})


def test_hoisting_runs_a_loops_invariant_prefix_once_and_keeps_the_words():
    """``hoist_invariants``: a body that begins by recomputing the same words every iteration
    (x * g + b into one buffer, then a CONTRACT reading it, its output stepped) runs that
    prefix once before the LOOP, the same words after; a prefix that reads what it writes
    (an accumulation), whose input a later body instruction overwrites, or that is the whole
    body stays."""
    from ttrain.golden.schedule import hoist_invariants
    mul = Elementwise("mul", 1, 4, View("act", 8, 4, 1), View("act", 0, 4, 1),
                      View("param", 0, 4, 1))
    add = Elementwise("add", 1, 4, View("act", 8, 4, 1), View("act", 8, 4, 1),
                      View("param", 4, 4, 1))
    con = Contract(Descriptor(2, 2, 2, View("act", 8, 2, 1), View("param", 0, 2, 1),
                              View("act", 16, 2, 1)), (1, 0, 0))
    cases = {"invariant": ([mul, add, con], 2),
             "accumulates": ([add, con], 0),               # d = d + b: not the same words
             # a LOOP keeps a body: hoisting the mul alone would let the add overwrite it
             "all invariant": ([mul, add], 0),
             "input overwritten": ([mul, add, con, Elementwise(
                 "fill", 1, 4, View("act", 0, 4, 1), imm=f32_bits(2.0))], 0)}
    for name, (body, want) in cases.items():
        prog = _loop_program(body)
        new, origin = hoist_invariants(prog)
        lo = 2                                             # the LOOP's pc
        hoisted = list(range(lo + 1, lo + 1 + want))
        assert origin == [0, 1, *hoisted, lo] + [
            pc for pc in range(lo + 1, len(prog.instructions)) if pc not in hoisted], name
        assert new.instructions[lo + want] == prog.instructions[lo], name
        a, st = run(prog, {k: np.zeros(v, np.uint32) for k, v in prog.store_sizes.items()})
        b, st2 = run(new, {k: np.zeros(v, np.uint32) for k, v in prog.store_sizes.items()})
        assert st.ok and st2.ok and st2.instructions == st.instructions - 3 * want, name
        for s_ in a:
            np.testing.assert_array_equal(a[s_], b[s_], err_msg=f"{name}: {s_}")
