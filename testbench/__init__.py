"""ttrain.testbench: cocotb benches, benchmarks, scoreboards and test-only helpers.

Used by tests and benchmarks (and ``ttrain bench``), never by the library. The simulated chip
itself (Verilator runner, host driver of the top) is a platform: :mod:`ttrain.platforms.sim`;
the host runtime is :mod:`ttrain.platforms.host`.

``ttrain.testbench.bench_engine``, ``bench_fp32``, ``bench_layer``, ``bench_step``
    the Verilator benchmarks behind ``ttrain bench engine|fp32|layer|step`` (and the helpers
    their tests share); ``tb_engine.py`` / ``tb_fp32.py`` are the cocotb modules they run
    (``run_cocotb(..., module_dirs=[TESTBENCH_DIR])``).
``ttrain.testbench.timing``
    logic depth per unit (Yosys ``synth_xilinx -family xcup``): ``python -m
    ttrain.testbench.timing --unit sequencer`` (``docs/u50.md``, "Logic depth per unit").
``ttrain.testbench.kernel``
    the Vitis kernel under cocotb: the ``CocotbBackend`` of the host driver, ``build_kernel``,
    ``run_kernel_calls``.
``*.v``
    simulation-only Verilog wrappers, e.g. ``fp32_stream_tb.v`` (streams operand pairs from a
    ``$readmemh`` file through a unit and dumps the results), found via :data:`TESTBENCH_DIR`.
"""

from pathlib import Path

#: Folder of the testbench's cocotb modules and simulation-only Verilog wrappers.
TESTBENCH_DIR = Path(__file__).resolve().parent
