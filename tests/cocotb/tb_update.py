"""cocotb tests for ``testbench/update_stream_tb.v`` and ``testbench/update_sweep_tb.v``.

Python is off the per-cycle path: the wrappers read their input files, drive the DUT (random
idle cycles and back-pressure in the stream wrapper, a command list in the sweep wrapper),
check the handshake rules every cycle and dump the results. These tests only drive reset and
``start``, await ``done`` and check the wrappers' counters; the pytest side
(``tests/test_update_verilator.py``) compares the dumps with :mod:`ttrain.golden.update`.

Environment: ``UPDATE_EXPECT`` (results or commands expected), ``UPDATE_TIMEOUT_CYCLES``,
optionally ``UPDATE_MAX_CYCLES`` (stream: the most cycles the run may take).
"""

import os

import cocotb

from ttrain.testbench.stream_run import reset_start_until_done


async def _run(dut):
    await reset_start_until_done(dut, os.environ["UPDATE_TIMEOUT_CYCLES"])


@cocotb.test()
async def stream(dut):
    """Stream every triple through the pipeline under back-pressure; check the counters."""
    await _run(dut)
    expect = int(os.environ["UPDATE_EXPECT"])
    seen = int(dut.results_seen.value)
    errors = int(dut.protocol_errors.value)
    dut._log.info("%d results in %d cycles, %d protocol errors", seen,
                  int(dut.cycles.value), errors)
    assert seen == expect, f"expected {expect} results, the pipeline delivered {seen}"
    assert errors == 0, f"a stalled output beat changed or vanished {errors} times"
    max_cycles = os.environ.get("UPDATE_MAX_CYCLES")
    if max_cycles is not None:
        cycles = int(dut.cycles.value)
        assert cycles <= int(max_cycles), (
            f"{seen} pairs took {cycles} cycles, more than the {max_cycles} of full throughput")


@cocotb.test()
async def sweep(dut):
    """Run the command list through the region sweeper; check the counters."""
    await _run(dut)
    expect = int(os.environ["UPDATE_EXPECT"])
    ran = int(dut.commands_run.value)
    errors = int(dut.protocol_errors.value)
    dut._log.info("%d commands, %d protocol errors", ran, errors)
    assert ran == expect, f"expected {expect} commands to finish, {ran} did"
    assert errors == 0, f"{errors} writes outside a store or starts while busy"
