# amaranth: UnusedElaboratable=no
"""The wide-engine design model (testbench/wide_model.py): its ``current`` mapping is the
engine's own analytical model (rtl/engine.py issue_cycles, better orientation), every mapping is
at least the ideal, and the study runs on a compiled step."""

import numpy as np
import pytest

from ttrain.golden.contract import Descriptor, View
from ttrain.rtl.engine import ContractionEngine, StoreSpec
from ttrain.testbench import wide_model


@pytest.mark.parametrize("lanes", [8, 64])
def test_current_mapping_is_the_engines_issue_model(lanes):
    eng = ContractionEngine(lanes=lanes, slots=16, stores=[StoreSpec("s", 1 << 16)])
    rng = np.random.default_rng(lanes)
    v = View("s", 0, 1, 1)
    for _ in range(200):
        m, n, k = (int(x) for x in rng.integers(1, 300, 3))
        b = int(rng.integers(1, 5))
        d = Descriptor(m, n, k, v, v, v, batch=b)
        want = min(eng.issue_cycles(d), eng.issue_cycles(d.transposed()))
        assert wide_model.cycles((m, n, k, b), lanes, "current") == want


def test_no_mapping_beats_the_ideal():
    rng = np.random.default_rng(1)
    for _ in range(300):
        d = tuple(int(x) for x in rng.integers(1, 200, 3)) + (int(rng.integers(1, 40)),)
        macs = d[0] * d[1] * d[2] * d[3]
        for P in (8, 256):
            for mp in wide_model.MAPPINGS + ("best",):
                assert wide_model.cycles(d, P, mp, overlap=True) >= -(-macs // P), (d, P, mp)


def test_study_of_the_tiny_step():
    rep = wide_model.study("tiny", lanes=(8, 256))
    assert rep["contracts"] > 0 and rep["macs"] > 0 and "model" in rep["label"]
    for e in rep["lanes"]:
        u = {k: v["utilization"] for k, v in e["mappings"].items()}
        assert all(0 < x <= 1 for x in u.values())
        assert u["best +overlap"] >= u["best"] >= max(u["split-k"], u["array"], u["batch"]) - 1e-12


def test_engine_cycle_model_is_one_definition():
    """rtl/engine.py's issue_cycles is golden's engine_cycles (with the units' latencies and
    the engine's banks), and best_split never loses to split 1."""
    from ttrain.golden.isa import ADD_LATENCY, MUL_LATENCY, best_split, engine_cycles
    eng = ContractionEngine(lanes=16, slots=16, stores=[StoreSpec("s", 1 << 12)], max_split=16)
    assert (eng.mul_latency, eng.add_latency) == (MUL_LATENCY, ADD_LATENCY)
    rng = np.random.default_rng(4)
    v = View("s", 0, 1, 1)
    for _ in range(100):
        m, n, k = (int(x) for x in rng.integers(1, 200, 3))
        d = Descriptor(m, n, k, v, v, v, batch=int(rng.integers(1, 4)))
        b = eng.best_split(d)
        assert b == best_split(d, 16, 16, 16, banks=16) and b.split <= min(16, k)
        assert eng.issue_cycles(b) == engine_cycles(b, 16, 16, banks=16) \
            <= engine_cycles(d, 16, 16, banks=16)
    # 12 x 12 outputs over k = 1280 on 16 lanes: groups of 4 lanes x 4 parts beat 16 lanes
    d = Descriptor(12, 12, 1280, v, v, v)
    assert best_split(d, 16, 16, 16).split > 1


def test_program_for_engine_keeps_the_words_or_follows_the_split():
    """Program.for_engine: orientation alone (max_split 1) leaves every word of a tiny training
    step as it was; with lane groups the splits change the rounding only, the cycle model
    drops, and the interpreter follows the new order."""
    from ttrain.golden import config as C, data as D, model as M
    from ttrain.golden.isa import engine_cycles
    from ttrain.golden.interpreter import dynamic_stream, run
    from ttrain.golden.isa import Contract
    from ttrain.golden.model_compiler import compile_model
    cfg = C.get_config("tiny")
    cm = compile_model(cfg)
    ds = D.generate_dataset(3, n_train=4, n_dev=2, n_test=2)
    batch = {k: v[:1] for k, v in ds.splits["train"].items()}
    image = cm.initial_image(M.init_params(cfg, np.random.default_rng(1)))
    cm.set_batch(image, batch, 0.05)
    want, st = run(cm.program, image, raise_errors=True)

    def total(prog, P):
        return sum(engine_cycles(i.desc, P, 16) for _, i in dynamic_stream(prog.instructions)
                   if isinstance(i, Contract))
    oriented = cm.program.for_engine(64, 16, 1)
    got, _ = run(oriented, image, raise_errors=True)
    for s in want:
        np.testing.assert_array_equal(got[s], want[s])
    assert total(oriented, 64) <= total(cm.program, 64)
    wide = cm.program.for_engine(256, 16, 256)
    splits = [i.desc.split for i in wide.instructions if isinstance(i, Contract)]
    assert max(splits) > 1
    assert total(wide, 256) < 0.7 * total(cm.program, 256)
    got, _ = run(wide, image, raise_errors=True)
    assert cm.loss(got) == pytest.approx(cm.loss(want), rel=1e-5)
    assert any(not np.array_equal(got[s], want[s]) for s in want)    # a new order


def test_machine_row_is_the_engine_row_without_beats_and_banks():
    """The machine row (real views, for_engine's rule) equals the engine row when neither
    beats nor banks are modeled, and only adds cycles with them; bad flags exit 2."""
    from ttrain.testbench.wide_model import cycles, machine_cycles, main, step_descriptors
    descs, _, _ = step_descriptors("tiny")
    plain, macs = machine_cycles("tiny", 8)
    assert plain == sum(cycles(d, 8, "engine") for d in descs)
    assert macs == sum(m * n * k * b for m, n, k, b in descs)
    assert machine_cycles("tiny", 8, fetch_words=2, banks=8)[0] >= plain
    with pytest.raises(SystemExit) as exc:
        main(["--config", "tiny", "--banks", "12"])
    assert exc.value.code == 2


def test_row_fetch_study_machine():
    """The row-path study machine (engine_cycles row_fetch/k_stage, not built): a vector that
    is unit-stride along every lane group costs what one whole beat of it costs; strided ones
    go through the F fallback ports (fewer ports, more cycles); staging along k buys back the
    strided core-gradient operands; C^T tiles written as columns; bad flags exit 2."""
    from ttrain.golden.isa import engine_cycles
    from ttrain.testbench.wide_model import main, machine_cycles
    s = "s"
    # unit stride everywhere: A is one row (h = 1), B and C rows contiguous
    d = Descriptor(1, 64, 40, View(s, 0, 40, 1), View(s, 4096, 64, 1), View(s, 8192, 64, 1))
    whole = engine_cycles(d, 64, 16, fetch_words=64, banks=64, bank_skew=True)
    for f in (1, 4):
        assert engine_cycles(d, 64, 16, banks=64, bank_skew=True, row_fetch=f) == whole
    # a core gradient: both operands k-contiguous (A row stride k, B column stride k)
    k = 96
    g = Descriptor(16, 64, k, View(s, 0, k, 1), View(s, 4096, 1, k), View(s, 16384, 64, 1))
    cyc = {f: engine_cycles(g, 64, 16, banks=64, bank_skew=True, row_fetch=f)
           for f in (1, 2, 4)}
    assert cyc[1] > cyc[2] > cyc[4]
    # staged along k, one port is as good as the 64 per-lane ports (the k-step bound)
    staged = engine_cycles(g, 64, 16, banks=64, bank_skew=True, row_fetch=1, k_stage=4)
    assert staged == engine_cycles(g, 64, 16, banks=64, bank_skew=True, fetch_words=64)
    assert staged < cyc[4]
    # C^T: the results strided along the lanes, unit stride down the rows
    t = Descriptor(16, 64, 8, View(s, 0, 8, 1), View(s, 4096, 64, 1), View(s, 16384, 1, 16))
    assert engine_cycles(t, 64, 16, banks=64, row_fetch=1, k_stage=4) \
        < engine_cycles(t, 64, 16, banks=64, row_fetch=1)
    with pytest.raises(ValueError, match="row_fetch needs banks"):
        engine_cycles(g, 64, 16, row_fetch=1)
    # the whole tiny step: staging never loses to the same fallback without it
    a = machine_cycles("tiny", 32, banks=32, bank_skew=True, row_fetch=1)[0]
    b = machine_cycles("tiny", 32, banks=32, bank_skew=True, row_fetch=1, k_stage=4)[0]
    assert b <= a
    for argv in (["--config", "tiny", "--row-fetch", "4"],
                 ["--config", "tiny", "--k-stage", "4"],
                 ["--config", "tiny", "--banks", "8", "--row-fetch", "3"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2


def _omega_reference(sources, dests, ports):
    """Passes through an Omega network with the switches arbitrating locally, written out
    with bit strings: in a pass the waiting messages advance stage by stage (perfect shuffle =
    rotate the position left, the switch = the low bit from the destination tag), a link
    wanted by both inputs of its switch goes to the upper input (low bit 0 before the
    switch), a message that loses is dropped for this pass (the links it won before stay
    used) and waits for the next."""
    n = ports.bit_length() - 1
    waiting = sorted(zip(sources, dests))
    passes = 0
    while waiting:
        passes += 1
        alive = {s: format(s, f"0{n}b") for s, _ in waiting}
        for i in range(n):
            links = {}
            for s, d in waiting:
                if s in alive:
                    pos = alive[s][1:] + alive[s][0]
                    alive[s] = pos[:-1] + format(d, f"0{n}b")[i]
                    links.setdefault(alive[s], []).append((pos[-1], s))
            for users in links.values():
                for _, s in sorted(users)[1:]:
                    del alive[s]
        waiting = [(s, d) for s, d in waiting if s not in alive]
    return passes


def test_omega_network_model():
    """golden.isa.omega_passes: Lawrie's theorem (any odd stride and any cyclic shift over
    interleaved banks passes in one), a bank wanted twice costs a pass each, random sets agree
    with a link-by-link reference router; engine_cycles(route='omega') costs a conflict-free
    descriptor as the whole-vector machine does; bad arguments raise."""
    from ttrain.golden.isa import (bank_of, engine_cycles, omega_fill, omega_passes,
                                   omega_round_trip)
    lanes = np.arange(64)
    for stride in (1, 3, 5, 7, 63, 65):
        for base in (0, 17):
            assert omega_passes(lanes, (base + stride * lanes) % 64, 64) == 1, (stride, base)
    assert omega_passes(lanes, (2 * lanes) % 64, 64) == 2
    assert omega_passes(lanes, np.zeros(64, int), 64) == 64
    rng = np.random.default_rng(5)
    for _ in range(60):
        ports = int(rng.choice([4, 8, 16, 32]))
        k = int(rng.integers(1, ports + 1))
        src = rng.choice(ports, k, replace=False)
        dst = rng.integers(0, ports, k)
        assert omega_passes(src, dst, ports) == \
            _omega_reference(src.tolist(), dst.tolist(), ports)
        assert omega_passes(src, dst, ports) >= np.bincount(dst).max()
    a = np.arange(1024)
    assert set(bank_of(a, 256, "xor")[:256]) == set(range(256))
    assert (bank_of(a, 256, True) == (a + a // 256) % 256).all()
    s = "s"
    d = Descriptor(16, 64, 40, View(s, 0, 41, 1), View(s, 4096, 64, 1), View(s, 8192, 64, 1))
    # one pass per vector: the whole-vector machine's cycles plus the networks' fill (64
    # ports, 3 register stages per network, 4 networks: the first read's and the last
    # write's, less 1 cycle) and, as A and B share store s and their first vectors meet at
    # a bank (2 cycles on the whole-vector machine), one more read round trip (9: the input
    # register, 3 + 3 stages, the bank's 2 cycles)
    assert omega_fill(64) == 11 and omega_round_trip(64) == 9
    assert engine_cycles(d, 64, 16, banks=64, route="omega") == \
        engine_cycles(d, 64, 16, banks=64, fetch_words=64) + 11 + 9
    with pytest.raises(ValueError, match="route"):
        engine_cycles(d, 64, 16, route="omega")
    with pytest.raises(ValueError, match="route"):
        engine_cycles(d, 64, 16, banks=64, route="benes")
    with pytest.raises(ValueError, match="power of two"):
        omega_passes([0], [0], 12)
    # the whole tiny step: the network never beats the crossbar it stands in for
    from ttrain.testbench.wide_model import machine_cycles, main
    cross = machine_cycles("tiny", 32, banks=32, bank_skew="xor", fetch_words=32)[0]
    assert machine_cycles("tiny", 32, banks=32, bank_skew="xor", route="omega")[0] >= cross
    for argv in (["--config", "tiny", "--route", "omega"],
                 ["--config", "tiny", "--banks", "8", "--route", "omega", "--row-fetch", "1"],
                 ["--config", "tiny", "--banks", "8", "--xor-skew", "--bank-skew"],
                 ["--config", "tiny", "--xor-skew"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2


def test_machine_row_of_a_bucket_and_an_order():
    """--positions and --order model the program the compiler emits for them: a shorter
    bucket has fewer MACs and cycles; a bad bucket or config exits 2."""
    from ttrain.testbench.wide_model import machine_cycles, main
    full, macs = machine_cycles("tiny", 8)
    short, smacs = machine_cycles("tiny", 8, compile_kw={"positions": 4})
    assert smacs < macs and short < full
    _, dmacs = machine_cycles("tiny", 8, compile_kw={"order": "dp_best"})
    assert dmacs > 0
    for argv in (["--config", "tiny", "--lanes", "8", "--positions", "99"],
                 ["--config", "nope", "--lanes", "8"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2


def test_vector_model_of_the_tiny_step():
    """The vector-unit model: every kind of vector work of the step is counted, more
    special-function lanes only shorten the special ops (to at least their latency), a wider
    unit never takes longer, and the CLI adds it (bad flags exit 2)."""
    one = wide_model.vector_study("tiny", 4)
    assert {"binary", "unary", "reduce", "gather", "special", "update"} <= set(one)
    four = wide_model.vector_study("tiny", 4, special_lanes=4)
    for kind in one:
        if kind == "special":
            assert four[kind]["cycles"] < one[kind]["cycles"]
        else:
            assert four[kind] == one[kind]
    wide = wide_model.vector_study("tiny", 16)
    assert all(wide[k]["cycles"] <= one[k]["cycles"] for k in one)
    assert wide_model.main(["--config", "tiny", "--lanes", "8", "--banks", "8",
                            "--vector-width", "4", "--special-lanes", "2", "--json"]) == 0
    with pytest.raises(SystemExit) as e:
        wide_model.main(["--config", "tiny", "--special-lanes", "2"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        wide_model.main(["--config", "tiny", "--vector-width", "3"])
    assert e.value.code == 2


def test_cycle_model_parts_and_the_overlap_study():
    """``engine_cycles(parts=True)``'s terms add up to its cycles on every machine the
    model knows, and the overlap study of tiny's step on the shared Omega route counts every
    CONTRACT, its per-descriptor terms within its cycles and hides them only for
    CONTRACTs independent of the one before (the step's chain makes that a minority)."""
    from ttrain.golden.isa import engine_cycles
    rng = np.random.default_rng(5)
    for _ in range(40):
        m, n, k = (int(v) for v in rng.integers(1, 40, 3))
        d = Descriptor(m, n, k, View("act", 0, k, 1), View("param", 0, n, 1),
                       View("scratch", 0, n, 1), accumulate=bool(rng.integers(2)),
                       split=int(2 ** rng.integers(0, 3)))
        for kw in ({}, {"banks": 8, "bank_skew": True}, {"fetch_words": 4, "banks": 8},
                   {"banks": 16, "route": "omega"}, {"banks": 16, "route": "omega-shared"}):
            p = engine_cycles(d, 8, 16, parts=True, **kw)
            assert set(p) == {"body", "fill", "fold", "edges"} and min(p.values()) >= 0
            assert sum(p.values()) == engine_cycles(d, 8, 16, **kw), (d, kw)
    r = wide_model.overlap_study("tiny", 8, banks=8, bank_skew=True, route="omega-shared")
    machine, macs = wide_model.machine_cycles("tiny", 8, banks=8, bank_skew=True,
                                              route="omega-shared")
    assert r["cycles"] == machine and r["macs"] == macs
    assert 0 < r["independent"] < r["contracts"] / 2
    assert 0 < r["hideable"] < r["overhead"] < r["cycles"]


def test_levers_of_the_tiny_step():
    """The design studies of ``walk_study(levers=True)``: a vector unit with two read
    streams reads a two-source beat in one cycle (add, sub, mul, scatter_add; not UPDATE,
    which also writes two beats, nor a one-source op), CONTRACTs without their
    per-descriptor cycles cost their ``body``; each lever only lowers the busy cycles, the
    in-order walk and the dependency bound, and both together the most."""
    from ttrain.golden.isa import Elementwise, Update, vector_cycles
    add = Elementwise("add", 3, 40, View("act", 0, 40, 1), View("act", 200, 40, 1),
                      View("scratch", 0, 40, 1))
    copy = Elementwise("copy", 3, 40, View("act", 0, 40, 1), View("scratch", 0, 40, 1))
    upd = Update(View("param", 0), View("grad", 0), 100, 0)
    one, two = vector_cycles(add, 8)[1], vector_cycles(add, 8, read_streams=2)[1]
    assert one - two == 3 * 5                     # 3 rows x 5 beats: one read beat fewer each
    assert vector_cycles(copy, 8) == vector_cycles(copy, 8, read_streams=2)
    assert vector_cycles(upd, 8) == vector_cycles(upd, 8, read_streams=2)
    with pytest.raises(ValueError, match="read_streams"):
        vector_cycles(add, 8, read_streams=3)
    w = wide_model.walk_study("tiny", 8, 4, banks=8, bank_skew=True, route="omega-shared",
                              levers=True)
    lv = w["levers"]
    assert set(lv) == {"no_descriptor_cost", "two_read_streams", "both"}
    nd, tr, both = lv["no_descriptor_cost"], lv["two_read_streams"], lv["both"]
    assert nd["busy"]["engine"] < w["busy"]["engine"] and nd["busy"]["vector"] == \
        w["busy"]["vector"]
    assert tr["busy"]["vector"] < w["busy"]["vector"] and tr["busy"]["engine"] == \
        w["busy"]["engine"]
    for key in ("program", "critical_path"):
        assert both[key] <= min(nd[key], tr[key]) and max(nd[key], tr[key]) < w[key], key
    assert wide_model.main(["--config", "tiny", "--lanes", "8", "--banks", "8",
                            "--vector-width", "4", "--levers", "--json"]) == 0
    with pytest.raises(SystemExit) as e:
        wide_model.main(["--config", "tiny", "--lanes", "8", "--levers"])
    assert e.value.code == 2
