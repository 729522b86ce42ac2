# amaranth: UnusedElaboratable=no
"""Constrained-random programs on the accelerator top under Verilator (the shared build of
``tests/shared_top.py``), every store word against the golden interpreter.

* the issue's write-after-read between units (a 64-word copy reading ``scratch[0:64]``, then a
  contraction writing ``scratch[60:64]``) and its RAW/WAW analogues, at several copy lengths;
* seeded random programs (:class:`random_programs.ProgramGen`): CONTRACT (split up to the
  build's lane groups), elementwise (special
  functions included), reduce, gather/scatter_add, UPDATE, LOOP and BARRIER mixes whose
  operands overlap between units (RAW, WAR, WAW — counted, and the count asserted), on images
  rich in signed zeros, subnormals, infinities and NaNs, with crafted rounding pairs (ties,
  sticky-only, subnormal path), all −0 product columns and subnormal special-function inputs;
  occasional bad gather indices (ERR_INDEX after the earlier instructions completed);
* every illegal field of every slot of every instruction class (:func:`random_programs.
  illegal_variants`) through the RTL sequencer: error flag, code and pc equal to the
  interpreter's, no store word changed.

Each program's windows (the words random operands use) are compared after every run, whole
stores after the last run of each session (a stray write anywhere shows there). Sizes: the
``make test`` part runs :data:`DEFAULT_PROGRAMS` random programs; ``TTRAIN_RANDOM_PROGRAMS=N``
runs N and ``TTRAIN_RANDOM_SEED=S`` starts from other seeds (``docs/verification.md``).
"""

import os

import numpy as np
import pytest

from ttrain.golden.interpreter import run as interpret
from ttrain.golden.isa import ERR_B_RANGE, ERR_INDEX, Program, encode_program
try:                                    # the simulated chip's host side (issue 11 item 3)
    from ttrain.platforms.sim.top import TopSession, run_top
except ImportError:                     # before it moved out of testbench/
    from ttrain.testbench.top import TopSession, run_top
from random_programs import (EXPECTED_CODES, STORES, ProgramGen, hazards, illegal_variants,
                             issue_war_program, rich_words)
from shared_top import LANES, shared_top

#: Random programs in ``make test`` (one session); ``TTRAIN_RANDOM_PROGRAMS=N`` runs N.
DEFAULT_PROGRAMS = 48
#: Seed of the first session (one seed per session); ``TTRAIN_RANDOM_SEED`` overrides.
DEFAULT_SEED = 1000
#: Runs per driver session (the shared build's result memory holds 60).
PER_SESSION = 56
WINDOW = 256


@pytest.fixture(scope="module")
def top():
    return shared_top()


class Player:
    """Runs on the top with the interpreter's expectations: writes, programs, windows."""

    def __init__(self, top, image, window):
        self.top = top
        self.sizes = top.config["store_sizes"]
        self.window = window
        self.cur = {s: np.array(image[s], dtype=np.uint32) for s in STORES}
        self.max_split = top.hw.max_split   # the interpreter checks the engine's limit too
        self.sess = TopSession()
        self.sess.write_image(self.cur)
        self.runs = []                     # (name, stats)

    def write(self, writes):
        for store, base, words in writes:
            self.cur[store][base:base + len(words)] = words
            self.sess.write(store, base, words)

    def run(self, name, words, *, full=False):
        want, st = interpret(words, self.cur, max_split=self.max_split)
        self.sess.program(words)
        if full:
            check = {"expect": want}
        else:
            check = {"expect_at": [(s, 0, want[s][:self.window[s]]) for s in STORES]}
        self.sess.run(name, error=int(st.error != 0), code=st.error,
                      pc=st.error_pc if st.error else None, max_cycles=2_000_000, **check)
        self.runs.append((name, st))
        self.cur = want
        return st

    def play(self, tmp_path):
        res = run_top(self.top, self.sess, test_dir=tmp_path, timeout=900)
        assert [r["name"] for r in res] == [n for n, _ in self.runs]
        for r, (name, st) in zip(res, self.runs):
            assert r["status_ok"] == 1 and r["error_code"] == st.error, (name, r)
            if st.error and st.error != ERR_INDEX:
                assert r["executed"] == 0, (name, r)        # check-pass errors issue nothing
            else:
                assert r["executed"] == st.instructions, (name, r, st.instructions)
        return res


def _sizes_window(top):
    sizes = top.config["store_sizes"]
    return sizes, {s: min(WINDOW, sizes[s]) for s in STORES}


@pytest.mark.parametrize("copy_words", [64, 256])
def test_issue_war_case_and_analogues(top, tmp_path, copy_words):
    """The issue's 3-instruction WAR case between the vector unit and the engine, and RAW/WAW
    and engine-first analogues; the overlap is really between consecutive instructions of
    different units (asserted), and every word equals the interpreter's."""
    sizes, window = _sizes_window(top)
    window = {s: min(sizes[s], max(w, copy_words + 16)) for s, w in window.items()}
    rng = np.random.default_rng(copy_words)
    image = {s: (rng.standard_normal(sizes[s]) * 3).astype(np.float32).view(np.uint32)
             for s in STORES}
    p = Player(top, image, window)
    kinds = ("WAR", "RAW", "WAW", "RAW_E", "WAR_E")
    for i, kind in enumerate(kinds):
        prog = issue_war_program(kind, copy_words=copy_words)
        h = hazards(prog)
        assert h.get(kind.split("_")[0], 0) >= 1, (kind, h)
        p.write([(s, 0, (rng.standard_normal(window[s]) * 3).astype(np.float32)
                  .view(np.uint32)) for s in STORES])
        st = p.run(kind, Program(prog, sizes).words(), full=i == len(kinds) - 1)
        assert st.ok, st.message
    p.play(tmp_path)


def _random_session(top, seed, count, tmp_path):
    sizes, window = _sizes_window(top)
    gen = ProgramGen(seed, sizes, window, special=True, max_split=LANES)
    p = Player(top, gen.image(), window)
    total = {}
    codes = []
    for i in range(count):
        if i:
            gen.refresh(p.cur)                   # fresh rich words in the windows
        prog = gen.program(p.cur, n=int(gen.rng.integers(8, 20)))
        for k, v in hazards(prog).items():
            total[k] = total.get(k, 0) + v
        # the windows as the generator left them (fresh words, crafted operands, indices)
        p.write([(s, 0, p.cur[s][:window[s]].copy()) for s in STORES])
        st = p.run(f"seed{seed}.{i}", encode_program(prog), full=i == count - 1)
        codes.append(st.error)
    p.play(tmp_path)
    return total, codes, gen.stats


def _env_int(name, default, lo):
    text = os.environ.get(name, "")
    if not text:
        return default
    if not text.isdigit() or int(text) < lo:
        raise ValueError(f"{name}={text!r}: give an integer >= {lo}")
    return int(text)


def _check_coverage(total, codes, stats, count):
    for kind in ("RAW", "WAR", "WAW"):
        assert total.get(kind, 0) >= count, (kind, total)
    for pair in ("WAR:vector->engine", "WAR:engine->vector", "RAW:engine->vector",
                 "RAW:vector->engine", "RAW:update->engine", "WAW:update->vector"):
        assert total.get(pair, 0) >= 1, (pair, total)
    assert codes.count(0) >= count * 3 // 4, codes
    assert stats["neg_zero_cells"] >= max(1, count // 8) and stats["numeric"] >= count, stats


def test_random_programs_bit_exact(top, tmp_path):
    """Seeded random programs (one session per :data:`PER_SESSION`), every window word after
    every program and every store word after each session's last, against the
    interpreter; RAW/WAR/WAW between units, −0 product columns and crafted operands appear."""
    count = _env_int("TTRAIN_RANDOM_PROGRAMS", DEFAULT_PROGRAMS, 8)
    seed = _env_int("TTRAIN_RANDOM_SEED", DEFAULT_SEED, 0)
    total, codes, stats = {}, [], {"neg_zero_cells": 0, "numeric": 0, "bad_index": 0}
    for s, start in enumerate(range(0, count, PER_SESSION)):
        n = min(PER_SESSION, count - start)
        t, c, st = _random_session(top, seed + s, n, tmp_path / f"s{s}")
        for k, v in t.items():
            total[k] = total.get(k, 0) + v
        codes += c
        for k, v in st.items():
            stats[k] += v
    _check_coverage(total, codes, stats, count)


def test_every_illegal_field_at_the_rtl_sequencer(top, tmp_path):
    """Every illegal field of every slot of every instruction class (ERR_B_RANGE of a second
    source included) reaches the sequencer's checks: error, code and pc as the interpreter's,
    no instruction issued, no store word changed; a legal program runs after each session."""
    sizes, window = _sizes_window(top)
    cases = illegal_variants(sizes, special=True, max_split=top.hw.max_split)
    rng = np.random.default_rng(77)
    image = {s: rich_words(rng, sizes[s], special=0.2) for s in STORES}
    codes = set()
    b_range = []
    for s, start in enumerate(range(0, len(cases), PER_SESSION - 1)):
        p = Player(top, image, window)
        chunk = cases[start:start + PER_SESSION - 1]
        for name, words in chunk:
            st = p.run(name, words)
            assert st.error != 0, f"{name} is legal for the interpreter"
            codes.add(st.error)
            if st.error == ERR_B_RANGE:
                b_range.append(name)
        # a legal program after the errors, whole stores compared (nothing changed before it)
        legal = encode_program(issue_war_program("WAR"))
        st = p.run("legal", legal, full=True)
        assert st.ok
        p.play(tmp_path / f"s{s}")
    assert EXPECTED_CODES <= codes, sorted(EXPECTED_CODES - codes)
    # slot 2 out of range for a CONTRACT's B, add's b and a gather's index list
    assert {"contract.slot2.range", "add.slot2.range", "gather.slot2.range",
            "loop.stepped_b_range"} <= set(b_range), b_range
