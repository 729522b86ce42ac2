"""cocotb bench of a free-running counter (``tests/test_seeing_inside.py``: waveform dumps)."""

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles


@cocotb.test()
async def count(dut):
    """Clock the counter out of reset for 20 cycles; it must have counted."""
    Clock(dut.clk, 10, unit="ns").start()
    dut.rst.value = 1
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 20)
    assert int(dut.count.value) != 0
