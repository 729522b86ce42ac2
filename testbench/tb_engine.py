"""cocotb tests of the contraction engine under Verilator.

Run by :mod:`ttrain.testbench.bench_engine` (``ttrain bench engine``) and
``tests/test_engine_verilator.py``.

The engine's parameters come from ``$ENGINE_CONFIG`` (JSON: ``lanes``, ``stores`` as
``[[name, depth, style, impl], ...]``, ``seed``, ``n_random``, ``max_mn``, ``max_k``); the
testbench rebuilds the same :class:`~ttrain.rtl.engine.ContractionEngine` object (no
elaboration) only to encode descriptors and host beats. Expected values come from
:func:`ttrain.golden.contract.contract`; every word of every store is read back through the
host port after every descriptor, with random stalls on both host streams.

The ``bench`` test (run it alone, ``testcase="bench"``) reads ``$ENGINE_BENCH`` (JSON:
``{"out": path, "sizes": {store: words}, "jobs": [{"name", "desc": {...}}, ...]}``) and runs
the listed descriptors in order on a random image, checks C after each and every word at the
end, and writes the measured cycles to ``out``.
"""

import json
import os

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, RisingEdge

from ttrain.golden.contract import (
    ERROR_A_RANGE, ERROR_B_RANGE, ERROR_C_RANGE, ERROR_DIM, ERROR_NONE, ERROR_STORE,
    Descriptor, View, check_descriptor, contract, random_descriptor)
from ttrain.testbench.bench_engine import make_engine


def engine_from_env():
    cfg = json.loads(os.environ["ENGINE_CONFIG"])
    return make_engine(cfg), cfg


class EngineTB:
    """Clock, host-port driver/monitor with random stalls, and a descriptor runner."""

    def __init__(self, dut, eng, seed, stall=True):
        self.dut = dut
        self.eng = eng
        self.nb = eng.banks
        self.rng = np.random.default_rng(seed)
        self.stall = stall

    async def start(self):
        dut = self.dut
        Clock(dut.clk, 10, unit="ns").start()
        dut.rst.value = 1
        dut.desc__valid.value = 0
        dut.host_i__valid.value = 0
        dut.host_o__ready.value = 0
        dut.desc__payload.value = 0
        for _ in range(3):
            await RisingEdge(dut.clk)
        dut.rst.value = 0
        await FallingEdge(dut.clk)

    def _pause(self):
        return self.stall and self.rng.random() < 0.3

    async def put(self, payload):
        """Send one host beat (called at a falling edge; returns at a falling edge).

        ``ready`` does not depend on ``valid``, so its settled value at the falling edge tells
        whether the beat transfers at the next rising edge.
        """
        dut = self.dut
        while self._pause():
            await FallingEdge(dut.clk)
        dut.host_i__payload.value = payload
        dut.host_i__valid.value = 1
        while not int(dut.host_i__ready.value):
            await FallingEdge(dut.clk)
        await RisingEdge(dut.clk)
        dut.host_i__valid.value = 0
        await FallingEdge(dut.clk)

    async def load(self, image):
        full = (1 << self.nb) - 1
        for name, words in image.items():
            for a in range(0, len(words), self.nb):
                await self.put(self.eng.encode_host_beat(
                    write=1, store=name, addr=a, mask=full,
                    words=[int(w) for w in words[a:a + self.nb]]))

    async def read(self, name, size):
        """Read words ``0 .. size-1`` of store ``name``."""
        return await self.read_range(name, 0, size)

    async def read_range(self, name, lo, hi):
        """Read words ``lo .. hi-1`` (``lo`` a multiple of the beat width): beats sent and
        answers taken concurrently."""
        dut = self.dut
        nb = self.nb
        size = hi - lo
        beats = -(-size // nb)
        got = []

        async def monitor():
            while len(got) < beats:
                await FallingEdge(dut.clk)
                ready = 0 if self._pause() else 1
                dut.host_o__ready.value = ready
                if ready and int(dut.host_o__valid.value):
                    got.append(int(dut.host_o__payload.value))
            await FallingEdge(dut.clk)
            dut.host_o__ready.value = 0

        mon = cocotb.start_soon(monitor())
        full = (1 << nb) - 1
        for a in range(lo, lo + beats * nb, nb):
            await self.put(self.eng.encode_host_beat(write=0, store=name, addr=a, mask=full))
        await mon
        words = [(beat >> (32 * i)) & 0xFFFFFFFF for beat in got for i in range(nb)]
        return np.array(words[:size], dtype=np.uint32)

    async def read_all(self, sizes):
        return {name: await self.read(name, size) for name, size in sizes.items()}

    async def run(self, desc_value):
        """Run one descriptor (encoded int); return ``(error, error_code, cycles)``."""
        dut = self.dut
        dut.desc__payload.value = desc_value
        dut.desc__valid.value = 1
        # idle: the descriptor is taken once the host beats already accepted have landed
        # (the host port's 2-beat FIFO), within 3 cycles
        for _ in range(3):
            if int(dut.desc__ready.value):
                break
            await RisingEdge(dut.clk)
            await FallingEdge(dut.clk)
        assert int(dut.desc__ready.value) == 1
        await RisingEdge(dut.clk)
        await FallingEdge(dut.clk)
        dut.desc__valid.value = 0
        assert int(dut.busy.value) == 1 and int(dut.done.value) == 0
        await RisingEdge(dut.done)
        await FallingEdge(dut.clk)
        assert int(dut.busy.value) == 0
        return int(dut.error.value), int(dut.error_code.value), int(dut.cycles.value)


def random_image(rng, sizes):
    img = {}
    for name, size in sizes.items():
        x = rng.standard_normal(size).astype(np.float32)
        pick = rng.integers(0, 40, size)
        x[pick == 0] = -0.0
        x[pick == 1] = 0.0
        x[pick == 2] = np.float32(3e-39)            # subnormal
        x[pick == 3] = np.inf
        img[name] = x.view(np.uint32).copy()
    return img


def compare(got, want, what):
    for name in want:
        bad = np.nonzero(got[name] != want[name])[0]
        assert bad.size == 0, (f"{what}: store {name} differs at {bad.size} words, first "
                               f"{bad[:5].tolist()}: got {[hex(v) for v in got[name][bad[:5]]]} "
                               f"want {[hex(v) for v in want[name][bad[:5]]]}")


@cocotb.test()
async def random_descriptors(dut):
    """Random shapes, strides, transposes, batches, accumulate, FP32/integer mode and splits
    up to the engine's ``max_split``; every store word checked."""
    eng, cfg = engine_from_env()
    tb = EngineTB(dut, eng, cfg["seed"])
    await tb.start()
    sizes = eng.store_sizes
    rng = np.random.default_rng(cfg["seed"])
    image = random_image(rng, sizes)
    await tb.load(image)
    compare(await tb.read_all(sizes), image, "after load")
    total_cycles = total_ideal = total_model = 0
    for i in range(cfg["n_random"]):
        desc = random_descriptor(rng, sizes, max_mn=cfg["max_mn"], max_k=cfg["max_k"],
                                 max_batch=3, integer="random", max_split=eng.max_split)
        err, code, cycles = await tb.run(eng.encode_descriptor(desc))
        assert (err, code) == (0, ERROR_NONE), f"descriptor {i} {desc}: error code {code}"
        image = contract(desc, image)
        compare(await tb.read_all(sizes), image, f"descriptor {i} {desc}")
        assert cycles >= eng.ideal_cycles(desc)
        total_cycles += cycles
        total_ideal += eng.ideal_cycles(desc)
        total_model += eng.issue_cycles(desc)
        dut._log.info(f"descriptor {i}: {desc.batch}x{desc.m}x{desc.n}x{desc.k} "
                      f"acc={desc.accumulate} int={desc.integer} split={desc.split} "
                      f"cycles {cycles} model {eng.issue_cycles(desc)} "
                      f"ideal {eng.ideal_cycles(desc)}")
    dut._log.info(f"random sweep: {total_cycles} cycles, model {total_model}, "
                  f"ideal {total_ideal}")


@cocotb.test()
async def error_descriptors(dut):
    """Illegal descriptors raise the error code, change no word; the next one runs."""
    eng, cfg = engine_from_env()
    tb = EngineTB(dut, eng, cfg["seed"] + 1)
    await tb.start()
    sizes = eng.store_sizes
    names = list(sizes)
    rng = np.random.default_rng(cfg["seed"] + 1)
    image = random_image(rng, sizes)
    await tb.load(image)
    s0, s1 = names[0], names[1]
    good = Descriptor(5, 9, 7, View(s0, 0, 7, 1), View(s0, 100, 9, 1), View(s1, 3, 9, 1),
                      accumulate=True)
    big = sizes[s0]
    cases = [
        (Descriptor(5, 9, 7, View(s0, big - 20, 7, 1), good.b, good.c), ERROR_A_RANGE),
        (Descriptor(5, 9, 7, good.a, View(s0, 100, 9, 1, big - 100), good.c, batch=2),
         ERROR_B_RANGE),
        (Descriptor(5, 9, 7, good.a, good.b, View(s1, sizes[s1] - 9, 1, 1)), ERROR_C_RANGE),
    ]
    raw = eng.encode_descriptor(good)
    layout = eng.desc.payload.shape()
    zero_n = raw & ~(((1 << eng.dim_bits) - 1) << layout["n"].offset)
    values = [(eng.encode_descriptor(d), code) for d, code in cases] + [(zero_n, ERROR_DIM)]
    # a split above the engine's lane groups (log2 field = log2 max_split + 1)
    over = eng.max_split.bit_length() << layout["split"].offset
    values.append(((raw & ~(15 << layout["split"].offset)) | over, ERROR_DIM))
    if len(names) < (1 << (len(names) - 1).bit_length()):
        off = layout["c"].offset + layout["c"].shape["store"].offset
        values.append((raw | (((1 << (len(names) - 1).bit_length()) - 1) << off), ERROR_STORE))
    for d, code in cases:
        assert check_descriptor(d, sizes) == code
    for value, code in values:
        err, got_code, cycles = await tb.run(value)
        assert (err, got_code) == (1, code), f"expected error {code}, got {err}/{got_code}"
        assert cycles <= 8
    compare(await tb.read_all(sizes), image, "after illegal descriptors")
    err, code, _ = await tb.run(raw)
    assert (err, code) == (0, ERROR_NONE)
    compare(await tb.read_all(sizes), contract(good, image), "valid descriptor after errors")


@cocotb.test()
async def bench(dut):
    """Run the descriptors of $ENGINE_BENCH in order, check C's words after each and every
    word of every store at the end, and record the measured cycles."""
    spec = json.loads(os.environ["ENGINE_BENCH"])
    eng, cfg = engine_from_env()
    tb = EngineTB(dut, eng, cfg["seed"], stall=False)
    await tb.start()
    sizes = {n: s for n, s in spec["sizes"].items()}
    rng = np.random.default_rng(cfg["seed"])
    image = {n: (rng.standard_normal(s).astype(np.float32) * np.float32(0.5)).view(np.uint32)
             for n, s in sizes.items()}
    await tb.load(image)
    results = []
    for job in spec["jobs"]:
        desc = Descriptor(**{k: (View(**v) if isinstance(v, dict) else v)
                             for k, v in job["desc"].items()})
        err, code, cycles = await tb.run(eng.encode_descriptor(desc))
        assert (err, code) == (0, ERROR_NONE), f"{job['name']}: error code {code}"
        image = contract(desc, image)
        c = desc.c
        lo = c.base - c.base % tb.nb
        hi = c.last_address(desc.batch, desc.m, desc.n) + 1
        got = await tb.read_range(c.store, lo, hi)
        want = image[c.store][lo:hi]
        bad = np.nonzero(got != want)[0]
        assert bad.size == 0, f"{job['name']}: C differs at {bad.size} words, first {bad[:5]}"
        results.append({"name": job["name"], "cycles": cycles})
        dut._log.info(f"{job['name']}: {cycles} cycles")
    compare(await tb.read_all(sizes), image, "end of step")
    with open(spec["out"], "w") as f:
        json.dump(results, f)
