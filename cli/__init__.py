"""ttrain: an FPGA accelerator that trains tensor-compressed transformers from on-chip memory.

Sub-packages: :mod:`ttrain.golden` (NumPy numerics contract and reference model),
:mod:`ttrain.rtl` (Amaranth hardware), :mod:`ttrain.platforms` (Alveo U50 flow),
:mod:`ttrain.testbench` (cocotb/Verilator helpers).
"""

__version__ = "0.1.0"
