"""ttrain.testbench: simulation helpers shared by every RTL test.

``ttrain.testbench.verilator``
    build Amaranth components into Verilator simulations (hash-keyed, reused, xdist-safe),
    run cocotb test modules on them, lint with ``-Wall`` and the project waivers
    (``waivers.vlt``). See ``docs/fp32-units.md``.
``ttrain.testbench.bench_engine``, ``ttrain.testbench.bench_fp32``
    the Verilator benchmarks behind ``ttrain bench engine`` / ``ttrain bench fp32`` (and the
    helpers their tests share); ``tb_*.py`` are the cocotb modules they and the top run.
``*.v``
    simulation-only Verilog wrappers, e.g. ``fp32_stream_tb.v`` (streams operand pairs from a
    ``$readmemh`` file through a unit and dumps the results), found via
    :data:`ttrain.testbench.verilator.TESTBENCH_DIR`.
"""
