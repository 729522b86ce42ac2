"""cocotb side of the Vitis kernel tests (run by ``tests/test_kernel_verilator.py``).

``$KERNEL_JOBS`` names a pickle of ``{"store_sizes", "calls": [prepared invocations]}`` made
by :meth:`ttrain.platforms.host.driver.KernelDriver.prepare`. Every call is played through
:class:`~ttrain.platforms.host.driver.KernelDriver` with the cocotbext-axi backend
(:class:`~ttrain.testbench.kernel.CocotbBackend`: ``AxiRam`` + ``AxiLiteMaster``), one after
the other on the same kernel (the stores keep their words between calls). The raw results
buffers and the control-register observations go to ``$KERNEL_OUT`` (pickle); the pytest side
parses and compares them with the golden interpreter.
"""

import os
import pickle

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles

from ttrain.platforms.host.driver import KernelDriver
from ttrain.testbench.kernel import CocotbBackend


@cocotb.test()
async def kernel_calls(dut):
    """Reset, then every prepared call through AXI; dump results and register readings."""
    with open(os.environ["KERNEL_JOBS"], "rb") as f:
        job = pickle.load(f)
    Clock(dut.ap_clk, 10, unit="ns").start()
    dut.ap_rst_n.value = 0
    backend = CocotbBackend(dut, mem_bytes=job.get("mem_bytes", 1 << 22))
    await ClockCycles(dut.ap_clk, 8)
    dut.ap_rst_n.value = 1
    await ClockCycles(dut.ap_clk, 4)
    assert int(dut.interrupt.value) == 0
    drv = KernelDriver(backend, job["store_sizes"])
    out = []
    for call in job["calls"]:
        _, words = await drv.run_call_async(call)
        out.append(words)
        dut._log.info(f"call {len(out)}: {backend.calls[-1]['cycles_to_interrupt']} cycles")
    with open(os.environ["KERNEL_OUT"], "wb") as f:
        pickle.dump({"results": out, "calls": backend.calls}, f)
