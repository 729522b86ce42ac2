"""cocotb test for ``testbench/prng_stream_tb.v`` (the PRNG unit's Verilator bench).

Python is off the per-cycle path: the Verilog bench plays its command file, stalls the
output, checks the handshake every cycle, checksums every command's words and dumps them. This
test only drives reset and ``start``, awaits ``done`` and checks the bench's counters; the
pytest side (``tests/test_prng_verilator.py``) compares the dumps with
:mod:`ttrain.golden.prng`.

Environment: ``PRNG_EXPECT`` (beats expected), ``PRNG_TIMEOUT_CYCLES``, optionally
``PRNG_MAX_CYCLES`` (the most cycles the run may take).
"""

import os

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge, with_timeout

CLOCK_NS = 10


@cocotb.test()
async def stream(dut):
    """Play every command, take every beat under back-pressure; check the counters."""
    Clock(dut.clk, CLOCK_NS, unit="ns").start()
    dut.rst.value = 1
    dut.start.value = 0
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    dut.start.value = 1
    await with_timeout(RisingEdge(dut.done), int(os.environ["PRNG_TIMEOUT_CYCLES"]) * CLOCK_NS,
                       "ns")
    expect = int(os.environ["PRNG_EXPECT"])
    seen = int(dut.results_seen.value)
    errors = int(dut.protocol_errors.value)
    cycles = int(dut.cycles.value)
    dut._log.info("%d beats in %d cycles, %d protocol errors", seen, cycles, errors)
    assert seen == expect, f"expected {expect} beats, the unit delivered {seen}"
    assert errors == 0, f"a stalled beat changed or vanished {errors} times"
    max_cycles = os.environ.get("PRNG_MAX_CYCLES")
    if max_cycles is not None:
        assert cycles <= int(max_cycles), (
            f"{seen} beats took {cycles} cycles, more than the {max_cycles} of full throughput")
