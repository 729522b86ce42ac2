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

from ttrain.testbench.stream_run import reset_start_until_done


@cocotb.test()
async def stream(dut):
    """Play every command, take every beat under back-pressure; check the counters."""
    await reset_start_until_done(dut, os.environ["PRNG_TIMEOUT_CYCLES"])
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
