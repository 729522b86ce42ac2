"""cocotb side of the accelerator-top runs (see ``platforms/sim/top_driver_tb.v``).

The Verilog driver plays the command file into the top and compares every word; this module
only drives the clock and waits for ``finished``, then logs the driver's totals. Python stays
off the per-cycle path. Started by :func:`ttrain.platforms.sim.top.run_top`, which parses and
checks the results file.
"""

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import RisingEdge


@cocotb.test()
async def run_commands(dut):
    """Clock the driver until it has played the whole command file."""
    Clock(dut.clk, 10, unit="ns").start()
    if not int(dut.finished.value):
        await RisingEdge(dut.finished)
    await RisingEdge(dut.clk)
    dut._log.info(f"runs {int(dut.runs.value)}, bad runs {int(dut.bad_runs.value)}, "
                  f"mismatched words {int(dut.mismatches.value)}")
