"""Compiled ZO steps on the simulated accelerator, checked against the golden interpreter.

:class:`ChipZO` is the ``stepper`` of :func:`ttrain.golden.zo.train_zo` behind ``ttrain train
--rule zo --engine rtl``: the numbers come from the compiled step on the interpreter
(:class:`~ttrain.golden.zo_compiler.InterpretedZO`); every step is also played on a Verilator
build of the accelerator top sized for the program, which receives only the batch and the
seed words per step. The chip's parameters and ``L0`` are compared after every step and every
store word after the last step of each session of ``per_session`` steps; a mismatch raises.
"""

import tempfile
import time
from pathlib import Path

from ...golden.zo_compiler import InterpretedZO
from ..hw import hw_config
from ..sim.top import TopSession, build_top, pad_image, run_top

__all__ = ["ChipZO"]


class ChipZO(InterpretedZO):
    """The compiled ZO step, run by the golden interpreter and verified on the chip."""

    def __init__(self, settings, *, lanes=4, per_session=10, workdir=None, progress=None,
                 **compile_options):
        super().__init__(settings, **compile_options)
        if isinstance(per_session, bool) or not isinstance(per_session, int) or per_session < 1:
            raise ValueError(f"per_session must be a positive integer, not {per_session!r}")
        self.lanes, self.per_session = lanes, per_session
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="zo-chip-"))
        self.say = progress or (lambda m: None)
        self.build = self.sess = None
        self.pending = 0
        self.verified = 0
        self.sim_seconds = 0.0

    def prepare(self, image):
        """Size the build for the compiled program and pad the first image to its stores."""
        hw = hw_config({"zo_step": self.cz.program}, config="zo-step", lanes=self.lanes)
        self.hw, self.sizes = hw, hw.stores
        return pad_image(image, self.sizes)

    def _build(self, image):
        hw = self.hw
        mm = self.cz.memory_map
        step_words = sum(mm[r].size for r in ("in.x", "in.onehot", "zo.seeds"))
        params = sum(r.size for n, r in mm.items() if n.endswith((".w", ".b")))
        need = 3 * hw.total_words + self.per_session * (step_words + params + 64) + \
            16 * len(self.cz.program.instructions) + 4096
        self.say(f"building the accelerator for the ZO step ({len(self.cz.program.instructions)}"
                 f" instructions, {self.lanes} lanes)")
        self.build = build_top(hw, f"ttrain_zo_chip_l{self.lanes}_{hw.total_words}",
                               rom_depth=1 << need.bit_length())
        self._new_session(image)

    def _new_session(self, image):
        self.sess = TopSession()
        self.sess.write_image(image)
        self.sess.program(self.cz.program.words())
        self.pending = 0

    def _flush(self, image):
        if not self.pending:
            return
        t0 = time.time()
        # run_top raises SimulationError for any run whose status or words differ
        run_top(self.build, self.sess, test_dir=self.workdir, timeout=4 * 3600)
        self.sim_seconds += time.time() - t0
        self.verified += self.pending
        self.say(f"chip: {self.verified} ZO steps bit-exact (parameters and L0 after every "
                 "step, every store word after the last)")
        self._new_session(image)

    def after(self, step, image_in, image_out):
        if self.build is None:
            self._build(image_in)
        else:       # the host link carries the batch and the seeds (and the update
            # constants of a schedule's rate or of random masks' counts)
            for region in self.cz.step_regions():
                r = self.cz.memory_map[region]
                self.sess.write(r.store, r.base, image_in[r.store][r.base:r.base + r.size])
        checks = [(r.store, r.base, image_out[r.store][r.base:r.base + r.size])
                  for n, r in self.cz.memory_map.items()
                  if n.endswith((".w", ".b")) or n == "zo.L0"]
        last = self.pending + 1 == self.per_session
        self.sess.run(f"zo{step}", expect=image_out if last else None, expect_at=checks)
        self.pending += 1
        if last:
            self._flush(image_out)

    def close(self):
        """Verify the steps still queued (call once after the last step)."""
        if self.build is not None and self.pending:
            # every store word: one more run of the last step's program, its whole image
            # compared (the run depends on every word; the training does not use it)
            self.sess.run("final", expect=self._run(self.image))
            self._flush(self.image)
