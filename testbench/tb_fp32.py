"""cocotb test for ``testbench/fp32_stream_tb.v``: start the stream, await ``done``.

Python is off the per-cycle path: the wrapper reads the operands (``+OPERANDS=``), feeds one
pair per cycle, checks ``o.valid`` against ``i.valid`` delayed by ``+LATENCY=`` every cycle and
dumps the results (``+RESULTS=``). This test only drives reset and ``start``, waits for
``done`` and checks the wrapper's counters; the caller compares the results file with the
golden functions. Environment: ``FP32_PAIRS`` (expected result count), ``FP32_TIMEOUT_CYCLES``.
Started by :func:`ttrain.testbench.bench_fp32.stream_unit` (``ttrain bench fp32``,
``tests/test_fp32_verilator.py``) and ``tests/test_special_verilator.py``.
"""

import os

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import Timer

from ttrain.testbench.stream_run import CLOCK_NS, reset_start_until_done


@cocotb.test()
async def stream_pairs(dut):
    """Stream every operand pair through the unit and check the handshake counters."""
    pairs = int(os.environ["FP32_PAIRS"])
    timeout_cycles = int(os.environ["FP32_TIMEOUT_CYCLES"])
    await reset_start_until_done(dut, timeout_cycles)
    valid_errors = int(dut.valid_errors.value)
    seen = int(dut.results_seen.value)
    cycles = int(dut.cycles.value)
    dut._log.info("%d results in %d cycles, %d valid mismatches", seen, cycles, valid_errors)
    assert seen == pairs, f"expected {pairs} results, the unit produced {seen}"
    assert valid_errors == 0, (
        f"o.valid disagreed {valid_errors} times with i.valid delayed by the declared latency")


@cocotb.test()
async def never_finishes(dut):
    """Run the clock for ~10^8 cycles: a stand-in for a hung design (watchdog test only).

    Selected explicitly (``testcase="never_finishes"``) by the test of ``run_cocotb``'s
    wall-clock ``timeout``; normal runs select ``stream_pairs``.
    """
    Clock(dut.clk, CLOCK_NS, unit="ns").start()
    await Timer(10 ** 9, "ns")
