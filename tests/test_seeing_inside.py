"""Seeing inside the simulated chip (issue 11, item 8).

* the RTL instruction trace (the sequencer's trace port, written by the Verilog driver under
  ``+TRACE=``) equals the golden interpreter's dynamic stream (pc, mnemonic) for a whole
  ``tiny`` training step and for a LOOP program, with start <= end and monotone starts;
* the divergence finder reports exactly the instruction after which the driver flips a store
  word (``debug_corrupt``), and no divergence without one;
* waveforms on demand: ``TTRAIN_WAVES=DIR`` makes a separate (cached) FST build and dumps
  ``DIR/<test name>.fst``; ``debug.capture(waves=FILE)`` names the files; a build that is not
  reused prints progress lines.

All but the waves test run on the shared 4-lane build of ``tests/shared_top.py``.
"""

import json
import os

import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import Out

from ttrain.golden import model as M
from ttrain.golden.data import generate_dataset
from ttrain.golden.interpreter import run as interpret
from ttrain.platforms.host.chip import ChipRun
from ttrain.platforms.host.diverge import find_divergence, unrolled
from ttrain.platforms.sim import debug
from ttrain.platforms.sim.top import layer_session, parse_trace, run_top
from ttrain.platforms.sim.verilator import build_root, build_verilator, run_cocotb
from shared_top import LANES, layer_programs, model_programs, shared_top


@pytest.fixture(scope="module")
def top():
    return shared_top()


@pytest.fixture(scope="module")
def tiny():
    return model_programs()["tiny"]


def _batches(cm, n):
    ds = generate_dataset(seed=0, seq_len=cm.cfg.seq_len, vocab_size=cm.cfg.vocab)
    it = ds.batches("train", cm.cfg.batch, seed=np.random.default_rng([0, 1]))
    return [next(it) for _ in range(n)]


def _golden_stream(program, image):
    out = []
    _, st = interpret(program, image, trace=lambda pc, ins, w: out.append((pc, ins.mnemonic)))
    assert not st.error
    return out


def _check_timing(records):
    assert all(r["end"] is not None and r["start"] <= r["end"] for r in records)
    starts = [r["start"] for r in records]
    assert starts == sorted(starts)
    assert [r["i"] for r in records] == list(range(len(records)))


def test_trace_of_a_tiny_step_is_the_interpreters_stream(top, tiny, tmp_path):
    params = M.init_params(tiny.cfg, np.random.default_rng(0))
    trace = tmp_path / "t.jsonl"
    with debug.capture(trace=trace):
        chip = ChipRun(tiny, top, params, tmp_path / "work", check="all")
        image = {k: v.copy() for k, v in chip.image.items()}
        batch = _batches(tiny, 1)
        for name, words in tiny.sample_words(batch[0]).items():
            r = tiny.memory_map[name]
            image[r.store][r.base:r.base + r.size] = words
        res = chip.run_steps(batch)
    chip_recs = [json.loads(x) for x in trace.read_text().splitlines()]
    golden = [json.loads(x) for x in debug.golden_trace_file(trace).read_text().splitlines()]
    want = _golden_stream(tiny.program, image)
    assert [(r["pc"], r["op"]) for r in chip_recs] == want
    assert [(r["pc"], r["op"]) for r in golden] == want
    assert debug.compare_traces(trace) == (len(want), None)
    assert len(want) == res[0].instructions
    _check_timing(chip_recs)
    units = {r["op"]: r["unit"] for r in chip_recs}
    assert units["contract"] == "engine" and units["update"] == "update"
    assert units["gather"] == "vector" and units["end"] == "seq"
    assert chip_recs[-1]["end"] <= res[0].cycles
    _vector_model_follows_the_trace(tiny, chip_recs)
    _walk_follows_the_trace(tiny, chip_recs)


def _walk_follows_the_trace(cm, recs):
    """The sequencer's issue model (``golden/schedule.py``), given each instruction's unit
    cycles as the chip took them, issues every instruction of the step within 4 cycles of
    the chip's trace (the whole step is ~90 k cycles)."""
    from ttrain.golden.interpreter import dynamic_stream
    from ttrain.golden.schedule import schedule
    dyn = [ins for _, ins in dynamic_stream(cm.program.instructions)]
    _, times = schedule(dyn, [r["end"] - r["start"] for r in recs])
    shift = recs[0]["start"] - times[0][0]
    off = [t[0] + shift - r["start"] for t, r in zip(times, recs)]
    assert max(map(abs, off)) <= 4, sorted(set(off))


def _vector_model_follows_the_trace(cm, recs):
    """The wide-engine study's vector-unit model (testbench/wide_model.vector_cycles) against
    the chip's own per-instruction cycles: within 5% per kind of work over the instructions
    that ran while no other unit ran (the model has no competition for the store ports),
    and every kind at least as slow on the chip as modeled over all of them (the engine takes
    the ports first when a vector instruction overlaps a contraction; since gathers no longer
    wait for an idle engine, they overlap too)."""
    from collections import defaultdict

    from ttrain.golden.interpreter import dynamic_stream
    from ttrain.testbench.wide_model import vector_cycles
    dyn = [ins for _, ins in dynamic_stream(cm.program.instructions)]
    assert len(dyn) == len(recs)
    width = LANES                    # the shared top: vector units as wide as its banks
    others = {u: [(r["start"], r["end"]) for r in recs if r["unit"] != u]
              for u in ("vector", "update")}
    alone, tot = defaultdict(lambda: [0, 0]), defaultdict(lambda: [0, 0])
    for r, ins in zip(recs, dyn):
        if r["unit"] in ("vector", "update"):
            # the shared top's vector unit reads two vectors a request, the update unit one;
            # its banks (= LANES) are skewed
            kind, model = vector_cycles(ins, width,
                                        read_streams=2 if r["unit"] == "vector" else 1,
                                        banks=LANES, bank_skew=True)
            # another unit at the store ports meanwhile: the engine, or the vector and the
            # update unit beside each other (the vector unit's two read vectors a request
            # take more of the banks' cycles than one did)
            busy = any(a <= r["end"] and r["start"] <= b for a, b in others[r["unit"]]
                       if b > a)
            for acc in (tot,) if busy else (tot, alone):
                acc[kind][0] += r["end"] - r["start"]
                acc[kind][1] += model
    kinds = {"binary", "unary", "reduce", "gather", "special", "update"}
    assert kinds <= set(tot) and kinds - {"binary"} <= set(alone)
    for kind, (chip, model) in tot.items():
        assert model <= chip * 1.05, (kind, chip, model)
    for kind, (chip, model) in alone.items():
        if kind != "binary":         # a binary op's two reads still meet the engine's writes
            assert abs(model - chip) <= 0.05 * chip, (kind, chip, model)


def test_trace_of_a_loop_program(top, tmp_path):
    cl = layer_programs()["tt_loop"]
    sess, _ = layer_session(cl, top.config["store_sizes"], steps=1, seed=3)
    assert any(i.mnemonic == "loop" for i in cl.program.instructions)
    first = {}                                             # the image the session writes
    for job in sess.jobs:
        if job["kind"] == "write":
            first.setdefault(job["store"], sess.arrays[job["key"]])
    want = _golden_stream(cl.program, first)
    rows = run_top(top, sess, test_dir=tmp_path, trace=True)
    recs = rows[0]["trace"]
    assert [(r["pc"], r["op"]) for r in recs] == want
    assert len(recs) > len(cl.program.instructions)       # loop bodies repeated
    _check_timing(recs)


def test_parse_trace_pairs_dispatch_and_completion():
    runs = parse_trace("D 0 5 0 8 0\nD 0 6 1 16 1\nC 0 9 2\nC 0 12 1\nD 0 13 2 1 3\n"
                       "D 1 2 0 1 3\n")
    assert [(r["op"], r["unit"], r["start"], r["end"]) for r in runs[0]] == [
        ("contract", "engine", 5, 12), ("add", "vector", 6, 9), ("end", "seq", 13, 13)]
    assert runs[1][0]["pc"] == 0


def test_divergence_finder_reports_the_planted_instruction(top, tiny, tmp_path):
    params = M.init_params(tiny.cfg, np.random.default_rng(0))
    batches = _batches(tiny, 1)
    stream = unrolled(tiny.program)
    # index in the dynamic stream (loop bodies repeated) and the program pc it comes from
    pc = next(i for i, (_, ins) in enumerate(stream) if i >= 21 and ins.mnemonic != "barrier")
    addr = tiny.memory_map["logits"].base
    store = tiny.memory_map["logits"].store
    d = find_divergence(tiny, top, params, batches, workdir=tmp_path / "planted", fanout=8,
                        debug_corrupt=(pc, store, addr))
    assert d.found and d.step == 0 and d.index == pc and d.pc == stream[pc][0]
    assert d.op == stream[pc][1].mnemonic
    assert (d.store, d.addr, d.got ^ d.want) == (store, addr, 1)
    assert d.region == "logits"
    assert f"pc {d.pc}" in "\n".join(d.lines())
    clean = find_divergence(tiny, top, params, batches, workdir=tmp_path / "clean")
    assert not clean.found and clean.sessions == 1


def _fst_blocks(data):
    """(type, length, payload) of every FST block; the chain must end exactly at EOF."""
    pos, out = 0, []
    while pos < len(data):
        n = int.from_bytes(data[pos + 1:pos + 9], "big")
        out.append((data[pos], n, data[pos + 9:pos + 1 + n]))
        pos += 1 + n
    assert pos == len(data)
    return out


def _lz4_literals(block):
    """The literals of an LZ4 block's first sequence (the stand-in writes only literals)."""
    n, i = block[0] >> 4, 1
    if n == 15:
        while True:
            n += block[i]
            i += 1
            if block[i - 1] != 255:
                break
    return block[i:i + n]


class _Counter(wiring.Component):
    count: Out(8)

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.count.eq(self.count + 1)
        return m


def test_waves_on_demand_fst_and_build_progress(tmp_path, monkeypatch, capfd):
    root = tmp_path / "sim"                    # a fresh build (progress lines), with the
    root.mkdir()                               # shared runtime objects so it stays small
    shared = build_root() / "_runtime"
    if shared.is_dir():
        (root / "_runtime").symlink_to(shared)
    waves = tmp_path / "waves"
    monkeypatch.setenv("TTRAIN_WAVES", str(waves))
    build = build_verilator(_Counter(), name="waves_counter", root=root)
    err = capfd.readouterr().err
    assert build.waves and not build.reused
    for stage in ("building waves_counter (waves)", "verilated in", "compiling",
                  "done in"):
        assert stage in err, err
    run_cocotb(build, "tb_counter", test_dir=tmp_path / "run1")
    run_cocotb(build, "tb_counter", test_dir=tmp_path / "run2")
    name = "test_waves_on_demand_fst_and_build_progress"
    for f in (waves / f"{name}.fst", waves / f"{name}-1.fst"):
        blocks = _fst_blocks(f.read_bytes())
        assert blocks[0][:2] == (0, 329), f                     # the FST header block
        hier = [p for t, _, p in blocks if t == 6]              # hierarchy, LZ4 (stand-in)
        assert hier and b"count [7:0]" in _lz4_literals(hier[0][8:])
    monkeypatch.delenv("TTRAIN_WAVES")
    capfd.readouterr()
    again = build_verilator(_Counter(), name="waves_counter", root=root, waves=True)
    assert again.reused and again.build_dir == build.build_dir
    assert "building" not in capfd.readouterr().err           # reused: no progress lines
    with debug.capture(waves=tmp_path / "cli.fst"):
        run_cocotb(again, "tb_counter", test_dir=tmp_path / "run3")
        assert debug.written_waves() == [(tmp_path / "cli.fst").resolve()]
    assert (tmp_path / "cli.fst").stat().st_size > 0
    assert os.environ.get("TTRAIN_WAVES") is None


def test_debug_flags_are_checked_before_any_build(tmp_path, capsys):
    from ttrain.main import main
    assert main(["debug", "diverge", "--plant", "12,nowhere,3"]) == 2
    assert "--plant" in capsys.readouterr().err
    assert main(["train", "--config", "tiny", "--waves", str(tmp_path / "w.fst")]) == 2
    assert "--engine rtl" in capsys.readouterr().err
    assert main(["demo", "--waves", str(tmp_path / "w.vcd")]) == 2
    assert ".fst" in capsys.readouterr().err
    assert main(["bench", "engine", "--waves", str(tmp_path)]) == 2   # a directory
    assert not list(tmp_path.iterdir())


def test_interpret_traced_gives_the_stream_only_under_trace(tmp_path):
    # the LRT and ZO benches and the model loop interpret through it: with --trace their
    # sessions carry the golden stream that the .golden.jsonl file is written from
    from ttrain.golden.isa import Elementwise, End, Program, View
    from ttrain.platforms.sim.top import interpret_traced
    sizes = {"param": 16, "grad": 16, "act": 16, "scratch": 16}
    prog = Program([Elementwise("copy", 1, 4, View("act", 0, 4, 1), View("param", 0, 4, 1)),
                    End()], sizes)
    image = {s: np.arange(n, dtype=np.uint32) for s, n in sizes.items()}
    want, st, golden = interpret_traced(prog, image)
    assert golden is None and not st.error and np.array_equal(want["act"][:4], image["param"][:4])
    with debug.capture(trace=tmp_path / "t.jsonl"):
        again, st, golden = interpret_traced(prog, image)
    assert golden == [(0, "copy"), (1, "end")]
    assert all(np.array_equal(again[s], want[s]) for s in sizes)
