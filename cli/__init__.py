"""ttrain: an FPGA accelerator that trains tensor-compressed transformers from on-chip memory.

Sub-packages: :mod:`ttrain.golden` (NumPy numerics contract and reference model),
:mod:`ttrain.rtl` (Amaranth hardware), :mod:`ttrain.platforms` (hardware configuration,
Alveo U50 flow, the Verilator simulation as a platform in ``platforms.sim``, the host runtime
in ``platforms.host``), :mod:`ttrain.testbench` (cocotb benches and benchmarks; only
``ttrain bench`` uses it).
"""

import os as _os
import platform as _platform

__version__ = "0.1.0"

# The float references (pre-training, float back-propagation) go through numpy's OpenBLAS,
# whose kernels differ per CPU family (AVX2 against AVX-512 sum in other orders): the same
# seed gave tables up to ~3 points apart per corruption on two machines (docs/zo-results.md,
# fifth round). Pinning the kernel family makes a seeded run the same on every x86-64 machine
# with AVX2; it must be set before numpy is first imported (ttrain is, when run as `ttrain`).
# The chip's numerics never depend on it: golden defines those sums in a fixed order.
if _platform.machine().lower() in ("x86_64", "amd64"):
    _os.environ.setdefault("OPENBLAS_CORETYPE", "Haswell")
