"""The Vitis kernel under cocotb/Verilator: the test-only side of the host driver.

:class:`~ttrain.platforms.host.driver.KernelDriver` (the host runtime) talks to a *backend*;
:class:`CocotbBackend` is the one the kernel tests use (``tests/cocotb/tb_kernel.py``), and
:func:`build_kernel` / :func:`run_kernel_calls` build the kernel under Verilator and play
prepared invocations on it. The card's backend, :class:`~ttrain.platforms.host.driver.
XrtBackend`, is library code beside the driver.
"""

import numpy as np

from ..platforms.host.driver import KernelDriver, KernelError, ctrl_bits
from ..platforms.kernel import KERNEL_ARGS, KERNEL_NAME, register

__all__ = ["CocotbBackend", "build_kernel", "run_kernel_calls"]


class CocotbBackend:
    """The kernel under cocotb: ``AxiRam`` on ``m_axi_gmem``, ``AxiLiteMaster`` on
    ``s_axi_control`` (cocotbext-axi).

    Parameters
    ----------
    dut : cocotb handle
        The kernel top (ports named as :func:`ttrain.platforms.kernel.axi_lite_ports` /
        :func:`~ttrain.platforms.kernel.axi_master_ports`).
    mem_bytes : int
        Size of the simulated global memory.
    timeout_cycles : int
        A call still running after this many ``ap_clk`` cycles raises :class:`KernelError`.
    """

    def __init__(self, dut, mem_bytes=1 << 22, timeout_cycles=5_000_000):
        from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiRam
        self.dut = dut
        self.ram = AxiRam(AxiBus.from_prefix(dut, "m_axi_gmem"), dut.ap_clk, dut.ap_rst_n,
                          reset_active_level=False, size=mem_bytes)
        self.ctrl = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axi_control"), dut.ap_clk,
                                  dut.ap_rst_n, reset_active_level=False)
        self.mem_bytes = mem_bytes
        self.timeout_cycles = timeout_cycles
        self._next = 0x1000
        self.calls = []            # per call: {"cycles": ap_start to interrupt, "ctrl": ...}

    def _take(self, nbytes):
        addr = self._next
        self._next = (addr + nbytes + 0xFFF) & ~0xFFF      # 4 KiB aligned, like XRT BOs
        if self._next > self.mem_bytes:
            raise ValueError(f"simulated memory of {self.mem_bytes} bytes is full: give "
                             f"CocotbBackend(mem_bytes=...) more")
        return addr

    def buffer(self, words):
        """Allocate a buffer holding ``words``; return its byte address."""
        words = np.ascontiguousarray(words, dtype="<u4")
        addr = self._take(words.nbytes)
        self.ram.write(addr, words.tobytes())
        return addr

    def alloc(self, n):
        """Allocate ``n`` words (filled with a pattern, so stale words are visible)."""
        addr = self._take(4 * n)
        self.ram.write(addr, np.full(n, 0xDEADBEEF, dtype="<u4").tobytes())
        return addr

    def read(self, addr, n):
        """``n`` words from byte address ``addr``."""
        return np.frombuffer(self.ram.read(addr, 4 * n), dtype="<u4").copy()

    async def read_reg(self, name):
        return int.from_bytes(await self.ctrl.read(register(name).offset, 4), "little")

    async def write_reg(self, name, value, half=0):
        reg = register(name)
        await self.ctrl.write(reg.offset + 4 * half,
                              int(value >> (32 * half) & 0xFFFFFFFF).to_bytes(4, "little"))

    async def call(self, args):
        """Write the arguments, start, wait for the interrupt, acknowledge (as XRT does)."""
        from cocotb.triggers import ClockCycles, RisingEdge
        dut = self.dut
        info = {"ctrl_before": ctrl_bits(await self.read_reg("CTRL"))}
        for a in KERNEL_ARGS:
            for half in range(a.width // 32):
                await self.write_reg(a.name, int(args[a.name]), half)
        await self.write_reg("GIE", 1)
        await self.write_reg("IER", 1)
        await self.write_reg("CTRL", 1)
        start = 0
        info["ctrl_running"] = ctrl_bits(await self.read_reg("CTRL"))
        while not int(dut.interrupt.value):
            await ClockCycles(dut.ap_clk, 64)
            start += 64
            if start > self.timeout_cycles:
                raise KernelError(f"no interrupt after {self.timeout_cycles} cycles")
        await RisingEdge(dut.ap_clk)
        info["cycles_to_interrupt"] = start
        info["isr"] = await self.read_reg("ISR")
        info["ctrl_done"] = ctrl_bits(await self.read_reg("CTRL"))
        info["ctrl_after_read"] = ctrl_bits(await self.read_reg("CTRL"))
        await self.write_reg("ISR", info["isr"])          # toggle on write: clears it
        info["interrupt_after_ack"] = int(dut.interrupt.value)
        await ClockCycles(dut.ap_clk, 2)
        info["interrupt_after_ack"] = int(dut.interrupt.value)
        info["isr_after_ack"] = await self.read_reg("ISR")
        self.calls.append(info)



def build_kernel(hw, name=KERNEL_NAME):
    """Build (or reuse) the ``VitisKernel`` of ``hw`` (a :class:`~ttrain.platforms.hw.
    HwConfig`, ``"sim"`` flavor) under Verilator as the cocotb top level; the build folder
    records ``hw.json``.

    The kernel's own module is the top (its ports are exactly the Vitis ones); only its ports
    are VPI-visible (``public="top"``). ``interrupt`` is a C++ keyword-like name Vitis
    requires, so Verilator's ``SYMRSVDWORD`` warning is waived. Returns the
    :class:`~ttrain.platforms.sim.verilator.VerilatorBuild`. The build gets the FP32 unit
    modules the special unit and the engine instantiate
    (:func:`ttrain.platforms.sim.top.unit_sources`), as
    :func:`~ttrain.platforms.sim.top.build_top` does.
    """
    from ..platforms.hw import write_hw_json
    from ..platforms.kernel import VitisKernel
    from ..platforms.sim.verilator import build_verilator
    from ..rtl.store import ram_verilog_path
    config = hw.accelerator_kwargs("sim")
    kernel = VitisKernel(**config)
    from ..platforms.sim.top import unit_sources
    extra = unit_sources(kernel.accelerator) + [ram_verilog_path()]
    build = build_verilator(kernel, name=name, extra_sources=extra,
                            public="top", build_args=["-Wno-SYMRSVDWORD"],
                            convert_key={"kernel": config})
    write_hw_json(hw, build.build_dir)
    return build


def run_kernel_calls(build, store_sizes, calls, *, test_dir, timeout=None, mem_bytes=1 << 22):
    """Play prepared invocations (:meth:`KernelDriver.prepare`) on a :func:`build_kernel`
    build through ``tests/cocotb/tb_kernel.py``; return ``(results, observations)``: one
    :class:`KernelResult` and one control-register observation dict
    (:attr:`CocotbBackend.calls`) per call."""
    import pickle
    from pathlib import Path

    from ..platforms.sim.verilator import run_cocotb
    from . import TESTBENCH_DIR
    test_dir = Path(test_dir)
    test_dir.mkdir(parents=True, exist_ok=True)
    jobs, out = test_dir / "kernel_jobs.pkl", test_dir / "kernel_out.pkl"
    with open(jobs, "wb") as f:
        pickle.dump({"store_sizes": dict(store_sizes), "calls": list(calls),
                     "mem_bytes": mem_bytes}, f)
    if out.exists():
        out.unlink()
    cocotb_dir = TESTBENCH_DIR.parent / "tests" / "cocotb"
    run_cocotb(build, "tb_kernel", test_dir=test_dir, timeout=timeout,
               module_dirs=[cocotb_dir] if cocotb_dir.is_dir() else [],
               extra_env={"KERNEL_JOBS": str(jobs), "KERNEL_OUT": str(out)})
    with open(out, "rb") as f:
        got = pickle.load(f)
    return ([KernelDriver.parse(c, w) for c, w in zip(calls, got["results"])], got["calls"])
