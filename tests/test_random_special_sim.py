# amaranth: UnusedElaboratable=no
"""Special-function datapaths on random subnormal inputs in the Amaranth simulator.

``test_special_sim.py`` builds recip and tanh' and feeds them mostly normal values; the
functions whose sequences take a subnormal input apart with ``split`` (its leading-zero count
and exponent ``-127 - lz``) are rsqrt, log and recip. Here single-function units of rsqrt and
log (the two smallest builds that use ``split``: a few seconds each) get
:func:`random_programs.subnormal_words` — random subnormals of every fraction width, both
signs, signed zeros and the smallest normals — bit for bit against
:func:`ttrain.golden.special.fp32_special`. The accelerator-top random programs send the same
words through every special function on the full unit (``test_random_programs_verilator.py``).
"""

import numpy as np
import pytest

from ttrain.golden import numerics as nx
from ttrain.golden import special as S
from ttrain.rtl.special import SpecialFunctionUnit
from random_programs import subnormal_words
from test_special_sim import _run


@pytest.mark.parametrize("func", ["rsqrt", "log"])
def test_subnormal_inputs_bit_exact(func):
    xs = subnormal_words(np.random.default_rng(S.FUNCTION_CODES[func]), 160)
    sub = (xs & 0x7F800000) == 0
    assert np.count_nonzero(sub & ((xs & 0x7FFFFF) != 0)) >= 100       # mostly subnormals
    widths = {int(x & 0x7FFFFF).bit_length() for x in xs[sub]}
    assert len(widths) >= 15                                            # many lz values
    code = S.FUNCTION_CODES[func]
    out = _run(SpecialFunctionUnit(functions=(func,)), [(code, int(x)) for x in xs])
    want = [int(nx.f32_to_bits(S.fp32_special(code, nx.bits_to_f32(np.uint32(x)))))
            for x in xs]
    got = [v for _, v in out]
    bad = [(hex(int(x)), hex(g), hex(w)) for x, g, w in zip(xs, got, want) if g != w]
    assert len(got) == len(want) and not bad, bad[:8]
