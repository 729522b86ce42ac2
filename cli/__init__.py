"""ttrain: an FPGA accelerator that trains tensor-compressed transformers from on-chip memory.

Sub-packages: :mod:`ttrain.golden` (NumPy numerics contract and reference model),
:mod:`ttrain.rtl` (Amaranth hardware), :mod:`ttrain.platforms` (hardware configuration,
Alveo U50 flow, the Verilator simulation as a platform in ``platforms.sim``, the host runtime
in ``platforms.host``), :mod:`ttrain.testbench` (cocotb benches and benchmarks; only
``ttrain bench`` uses it).
"""

__version__ = "0.1.0"
