# amaranth: UnusedElaboratable=no
"""Verilator checks of the sequencer and the vector unit.

The accelerator top (stores + engine + vector + update + sequencer) is not built yet (see
``docs/sequencer.md``); until then this file lints the sequencer's units under
``verilator --lint-only -Wall`` with the project waivers (a lint warning raises ``LintError``).
"""

from ttrain.rtl.sequencer import Sequencer
from ttrain.rtl.vector import VectorUnit
from ttrain.testbench.verilator import lint_verilator

SIZES = {"param": 1024, "grad": 1024, "act": 2048, "scratch": 4096}


def test_vector_unit_lint_clean():
    for hs in (False, True):
        assert lint_verilator(VectorUnit(addr_bits=12, handshake=hs),
                              name=f"ttrain_vector_hs{int(hs)}") == ""


def test_sequencer_lint_clean():
    for max_dim in (None, 255):
        assert lint_verilator(Sequencer(store_sizes=SIZES, imem_depth=64, max_dim=max_dim),
                              name=f"ttrain_sequencer_{max_dim or 0}") == ""
