"""The worked example of docs/adding-an-instruction.md: the elementwise ``max`` opcode (0x17).

It was added by one table entry in golden/isa.py (with its golden semantics, ``fp32_max``) and
its datapath in rtl/vector_wide.py; nothing else changed. These tests show that the rest of the
toolchain picked it up from the table: the assembler and disassembler, the interpreter, the
RTL decoder's legality rules, the sequencer's slot use and the vector unit, bit-exact on
signed zeros, NaNs, infinities and subnormals.
"""

import numpy as np
from amaranth.sim import Simulator

from test_vector_wide_sim import simulate

from ttrain.golden.contract import View
from ttrain.golden.interpreter import run
from ttrain.golden.isa import (ERR_FIELD, OPCODES, SPEC, WORDS, Elementwise, End, Fields,
                               ISAError, assemble, decode, decode_error, disassemble, encode)
from ttrain.golden.numerics import fp32_max
from ttrain.rtl.sequencer import InstructionDecoder

EDGES = np.array([0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007FFFFF, 0x3F800000,
                  0xBF800000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001, 0x7F800001,
                  0x7F7FFFFF, 0xFF7FFFFF, 0x00800000, 0x40490FDB], dtype=np.uint32)


def _pairs():
    a = np.repeat(EDGES, EDGES.size)
    b = np.tile(EDGES, EDGES.size)
    return a, b


def test_table_entry():
    spec = SPEC["max"]
    assert (spec.opcode, spec.unit, spec.sources, spec.imm) == (0x17, "vector", 2, False)
    assert OPCODES["max"] == 0x17


def test_assembler_disassembler_and_interpreter():
    a, b = _pairs()
    n = a.size
    text = f"max rows=1 cols={n} d=act@{2 * n}:0,1 a=act@0:0,1 b=act@{n}:0,1\nend\n"
    words = assemble(text)
    assert disassemble(words).splitlines()[0] == text.splitlines()[0]
    image = {"act": np.concatenate([a, b, np.zeros(n, np.uint32)])}
    out, stats = run(words, image)
    assert stats.error == 0
    want = np.asarray(fp32_max(a.view(np.float32), b.view(np.float32)),
                      np.float32).view(np.uint32)
    np.testing.assert_array_equal(out["act"][2 * n:], want)
    # +0 beats -0 and NaN propagates, whatever the order (IEEE 754-2019 maximum)
    res = dict(zip(zip(a.tolist(), b.tolist()), out["act"][2 * n:].tolist()))
    assert res[(0x80000000, 0x00000000)] == res[(0x00000000, 0x80000000)] == 0
    assert res[(0x7FC00000, 0xFF800000)] == 0x7FC00000


def test_golden_rules_reject_an_immediate():
    w = encode(Elementwise("max", 1, 4, View("act", 0), View("act", 4), View("act", 8)))
    w[3] = 5                                    # max takes no immediate
    assert decode_error(Fields(w))[0] == ERR_FIELD
    try:
        decode(w)
    except ISAError as e:
        assert e.code == ERR_FIELD
    else:
        raise AssertionError("decode accepted an immediate on max")


def test_rtl_decoder_follows_the_table():
    """The hardware decoder's error for legal and broken ``max`` words equals golden's."""
    legal = encode(Elementwise("max", 3, 4, View("act", 0), View("grad", 4), View("act", 8)))
    cases = [legal]
    # immediate, flags, slot-0 store id 4, slot-1 batch stride, reserved bit, opcode 0x37
    for word, bit in ((3, 0), (0, 8), (1, 2), (11, 0), (0, 25), (0, 5)):
        w = list(legal)
        w[word] ^= 1 << bit
        cases.append(w)
    w = list(legal)
    w[2] = 0                                                  # rows = cols = 0: ERR_DIM
    cases.append(w)
    dut = InstructionDecoder(special=False)
    got = []

    async def tb(ctx):
        for w in cases:
            ctx.set(dut.word, sum(int(x) << (32 * i) for i, x in enumerate(w)))
            await ctx.delay(1e-9)
            got.append(ctx.get(dut.error))

    sim = Simulator(dut)
    sim.add_testbench(tb)
    sim.run()
    want = [decode_error(Fields(w))[0] for w in cases]
    assert got == want and want[0] == 0 and all(want[1:])


def test_vector_unit_bit_exact_on_edge_values():
    a, b = _pairs()
    n = a.size
    rng = np.random.default_rng(5)
    sizes = {"param": 16, "grad": 16, "act": 3 * n + 8, "scratch": 16}
    image = {s: np.zeros(k, np.uint32) for s, k in sizes.items()}
    image["act"][:n], image["act"][n:2 * n] = a, b
    image["act"][3 * n:] = rng.choice(EDGES, 8)
    instrs = [Elementwise("max", 16, 16, View("act", 2 * n, 16, 1), View("act", 0, 16, 1),
                          View("act", n, 16, 1)),
              # in place, one row broadcast (b's row stride 0), columns as rows
              Elementwise("max", 8, 1, View("act", 0, 1, 0), View("act", 0, 1, 0),
                          View("act", 3 * n, 0, 0))]
    images = [image]
    want = [run([instrs[0], End()], image)[0]]
    images.append(want[0])
    want.append(run([instrs[1], End()], want[0])[0])
    results = simulate(4, instrs, seed=3, images=images,
                       addr_bits=int(3 * n + 8).bit_length() + 1)
    for (cycles, error, count, got), exp in zip(results, want):
        assert error == 0
        for name in exp:
            np.testing.assert_array_equal(got[name][:exp[name].size], exp[name])


def test_update_mode_reaches_the_update_unit():
    """The UPDATE mode (flags byte) travels in the command to the unit, which runs SGD for
    mode 0 and stops with ERR_MODE, writing nothing, for a rule it does not have."""
    from ttrain.golden.isa import ERR_MODE, Update, f32_bits
    from ttrain.rtl.command import vector_command
    sizes = {"param": 16, "grad": 16, "act": 16, "scratch": 16}
    rng = np.random.default_rng(9)
    image = {s: rng.choice(EDGES, k).astype(np.uint32) for s, k in sizes.items()}
    sgd = Update(View("param", 0), View("grad", 0), 16, f32_bits(0.5))
    other = Update(View("param", 0), View("grad", 0), 16, f32_bits(0.5))
    object.__setattr__(other, "mode", 3)        # a reserved rule the decoder would reject
    assert vector_command(sgd)["flags"] == 0 and vector_command(other)["flags"] == 3
    want = run([sgd, End()], image)[0]
    results = simulate(4, [other, sgd], seed=1, images=[image, image], addr_bits=8)
    (_, err_other, _, after_other), (_, err_sgd, _, after_sgd) = results
    assert err_other == ERR_MODE and err_sgd == 0
    for name in image:
        np.testing.assert_array_equal(after_other[name][:sizes[name]], image[name])
        np.testing.assert_array_equal(after_sgd[name][:sizes[name]], want[name])
