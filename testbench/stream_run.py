"""The one control sequence of the Verilog stream benches (``testbench/*_stream_tb.v``,
``update_sweep_tb.v``): the bench does the per-cycle work itself, cocotb only resets it,
raises ``start`` and waits for ``done``."""

from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge, with_timeout

CLOCK_NS = 10


async def reset_start_until_done(dut, timeout_cycles, clock_ns=CLOCK_NS):
    """Start the clock, hold ``rst`` 4 cycles, raise ``start``, await ``done`` (at most
    ``timeout_cycles`` cycles, else cocotb's timeout error)."""
    Clock(dut.clk, clock_ns, unit="ns").start()
    dut.rst.value = 1
    dut.start.value = 0
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    dut.start.value = 1
    await with_timeout(RisingEdge(dut.done), int(timeout_cycles) * clock_ns, "ns")
