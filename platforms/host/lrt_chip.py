"""Low-rank training's compiled programs on the simulated accelerator, checked against the
golden interpreter.

:class:`ChipLRT` is the ``stepper`` of :func:`ttrain.golden.lrt_online.run_online` behind
``ttrain train --config digits-mlp --rule lrt --engine rtl``: the numbers come from the
compiled programs on the interpreter (:class:`~ttrain.golden.lrt_compiler.InterpretedLRT`);
every run (one per sample, one per read-out) is also played on a Verilator build of the
accelerator top sized for the two programs. Between runs the host writes only the sample (its
pixels, one-hot label and sign seeds) and swaps the program for a read-out. The whole
parameter store (weights, biases, write counters, the low-rank accumulators) is compared after
every run, every store word after the last run of each session of ``per_session`` samples; a
mismatch raises.
"""

import re
import tempfile
import time
from pathlib import Path

from ...golden.interpreter import run as run_program
from ...golden.lrt_compiler import InterpretedLRT
from ..hw import hw_config
from ..sim.top import TopSession, build_top, pad_image, run_top

__all__ = ["ChipLRT"]

_SAMPLE_REGIONS = ("x", "onehot", "seeds")


class ChipLRT(InterpretedLRT):
    """The compiled LRT programs, run by the golden interpreter and verified on the chip."""

    def __init__(self, model, settings, *, lanes=4, per_session=25, workdir=None,
                 progress=None):
        super().__init__(model, settings)
        if isinstance(per_session, bool) or not isinstance(per_session, int) or per_session < 1:
            raise ValueError(f"per_session must be a positive integer, not {per_session!r}")
        self.lanes, self.per_session = lanes, per_session
        self.hw = hw_config(self.cl.programs, config="lrt-online", lanes=lanes)
        self.image = pad_image(self.image, self.hw.stores)
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="lrt-chip-"))
        self.say = progress or (lambda m: None)
        self.build = self.sess = self.loaded = None
        self.pending = 0
        self.verified = dict.fromkeys(self.cl.programs, 0)
        self.queued = dict.fromkeys(self.cl.programs, 0)
        self.cycles = {name: [] for name in self.cl.programs}
        self.sim_seconds = 0.0
        self._words = {name: p.words() for name, p in self.cl.programs.items()}

    def _build(self):
        hw = self.hw
        params = hw.stores["param"]
        per_run = params + sum(self.cl.memory_map[r].size for r in _SAMPLE_REGIONS) + 64
        need = 3 * hw.total_words + 2 * self.per_session * per_run + \
            4 * sum(len(w) for w in self._words.values()) + 4096
        n = {k: len(p.instructions) for k, p in self.cl.programs.items()}
        self.say(f"building the accelerator for the LRT programs ("
                 + " + ".join(str(v) for v in n.values()) + f" instructions, {self.lanes} lanes)")
        self.build = build_top(hw, f"ttrain_lrt_chip_l{self.lanes}_{hw.total_words}",
                               rom_depth=1 << need.bit_length())

    def _new_session(self, image):
        self.sess = TopSession()
        self.sess.write_image(image)
        self.loaded = None
        self.pending = 0
        self.queued = dict.fromkeys(self.cl.programs, 0)

    def run(self, name):
        image_in = self.image
        st = super().run(name)
        if self.build is None:
            self._build()
        if self.sess is None:
            self._new_session(image_in)
        elif name == "sample":                  # the host link carries the sample only
            for region in _SAMPLE_REGIONS:
                r = self.cl.memory_map[region]
                self.sess.write(r.store, r.base, image_in[r.store][r.base:r.base + r.size])
        if self.loaded != name:
            self.sess.program(self._words[name])
            self.loaded = name
        out = self.image
        last = name == "sample" and self.queued["sample"] + 1 == self.per_session
        self.sess.run(f"{name}{self.runs[name]}", expect=out if last else None,
                      expect_at=[("param", 0, out["param"])])
        self.queued[name] += 1
        self.pending += 1
        if last:
            self._flush()
        return st

    def _flush(self):
        if not self.pending:
            return
        t0 = time.time()
        # run_top raises SimulationError for any run whose status or words differ
        res = run_top(self.build, self.sess, test_dir=self.workdir, timeout=4 * 3600)
        self.sim_seconds += time.time() - t0
        for r in res:
            name = re.sub(r"\d+$", "", r["name"])
            if name in self.cycles:
                self.cycles[name].append(int(r["cycles"]))
        for k in self.verified:
            self.verified[k] += self.queued[k]
        reads = sum(v for k, v in self.verified.items() if k != "sample")
        self.say(f"chip: {self.verified['sample']} samples and {reads} read-outs bit-exact (the "
                 "parameter store after every run, every store word at the end of each "
                 "session)")
        self.sess = None

    def close(self):
        """Verify the runs still queued (call once after the last sample)."""
        if self.sess is not None and self.pending:
            # every store word: one more run of the sample program from the current image
            # compared whole (it depends on every word it reads; the training ignores it)
            if self.loaded != "sample":
                self.sess.program(self._words["sample"])
            want, st = run_program(self.cl.sample, self.image)
            st.raise_for_error()
            self.sess.run("final", expect=want)
            self._flush()
