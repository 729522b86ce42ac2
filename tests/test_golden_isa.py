"""Encoding, decoding, assembly and validation of the sequencer ISA (golden/isa.py)."""

import numpy as np
import pytest

from ttrain.golden.contract import Descriptor, View
from ttrain.golden.isa import (
    ERR_DIM, ERR_FIELD, ERR_LOOP, ERR_MODE, ERR_OPCODE, ERR_STORE, ELEMENTWISE_OPS,
    GATHER_OPS, MNEMONICS, OPCODES, SPEC, SPECIAL_OPS, STORE_IDS, WORDS, Barrier, Contract,
    Elementwise, End, EndLoop, Gather, ISAError, Loop, Program, Reduce, Region, Update,
    ALL_UNITS, RANDOM_OPS, Random, assemble, bits_f32, decode, decode_program, disassemble, encode, encode_program, f32_bits)

STORES = sorted(STORE_IDS)


def rview(rng, batch=False, cs=None, rs=None):
    return View(STORES[rng.integers(len(STORES))], int(rng.integers(0, 2**32)),
                int(rng.integers(0, 2**32)) if rs is None else rs,
                int(rng.integers(0, 2**32)) if cs is None else cs,
                int(rng.integers(0, 2**32)) if batch else 0)


def rdim(rng):
    return int(rng.integers(1, 2**16))


def rstep(rng):
    return tuple(int(s) for s in rng.integers(0, 4, 3))


def random_instr(rng, kind):
    if kind == "end":
        return End()
    if kind == "barrier":
        return Barrier()
    if kind == "endloop":
        return EndLoop()
    if kind == "loop":
        return Loop(int(rng.integers(1, 2**32)), tuple(int(v) for v in rng.integers(0, 2**32, 3)))
    if kind == "contract":
        d = Descriptor(rdim(rng), rdim(rng), rdim(rng), rview(rng, True), rview(rng, True),
                       rview(rng, True), bool(rng.integers(2)), rdim(rng),
                       bool(rng.integers(2)), 1 << int(rng.integers(0, 9)))
        return Contract(d, rstep(rng))
    if kind in ELEMENTWISE_OPS:
        nsrc = SPEC[kind].sources                 # from the ISA table
        st = rstep(rng)
        st = tuple(s if i <= nsrc else 0 for i, s in enumerate(st))
        imm = int(rng.integers(0, 2**32)) if SPEC[kind].imm else 0
        while SPEC[kind].imm_rule is not None and SPEC[kind].imm_rule[1](imm):
            imm = int(rng.integers(0, 40))             # a legal immediate of a checked op
        return Elementwise(kind, rdim(rng), rdim(rng), rview(rng),
                           rview(rng) if nsrc >= 1 else None, rview(rng) if nsrc >= 2 else None,
                           imm, st)
    if kind in ("rsum", "rmax"):
        st = rstep(rng)[:2] + (0,)
        return Reduce(kind[1:], rdim(rng), rdim(rng), rview(rng, cs=0), rview(rng),
                      bool(rng.integers(2)), st)
    if kind in GATHER_OPS:
        return Gather(kind, rdim(rng), rdim(rng), int(rng.integers(1, 2**32)), rview(rng),
                      rview(rng), rview(rng, cs=0), rstep(rng))
    if kind in RANDOM_OPS:
        sigma = int(rng.integers(1, 256)) if kind.startswith("perturb") else 0
        return Random(kind, rdim(rng), rdim(rng), rview(rng), rview(rng), rview(rng),
                      int(rng.integers(0, 2**32)), sigma, rstep(rng))
    if kind == "update":
        st = rstep(rng)[:2] + (0,)
        return Update(rview(rng, cs=1, rs=0), rview(rng, cs=1, rs=0),
                      int(rng.integers(1, 2**32)), int(rng.integers(0, 2**32)), 0, st)
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", sorted(OPCODES))
def test_round_trip_every_opcode(kind):
    rng = np.random.default_rng(sum(map(ord, kind)))
    for _ in range(25):
        ins = random_instr(rng, kind)
        words = encode(ins)
        assert len(words) == WORDS
        assert all(0 <= w < 2**32 for w in words)
        assert words[0] & 0xFF == OPCODES[kind]
        assert decode(words, units=ALL_UNITS) == ins
        text = disassemble(words)
        assert text.split()[0] == kind
        assert assemble(text) == words


def test_program_round_trip_and_text():
    rng = np.random.default_rng(5)
    instrs = [random_instr(rng, k) for k in sorted(OPCODES) for _ in range(3)]
    words = encode_program(instrs)
    assert decode_program(words, units=ALL_UNITS) == instrs
    assert assemble(disassemble(words)) == words


def test_field_positions():
    """The documented layout: dims in word 2/3, views in words 4..15, stores in word 1."""
    c = View("scratch", 7, 8, 9, 10)
    a = View("act", 11, 12, 13, 14)
    b = View("param", 15, 16, 17, 18)
    w = encode(Contract(Descriptor(3, 4, 5, a, b, c, True, 6), (1, 2, 3)))
    assert w[0] == 0x08 | 1 << 8 | (1 | 2 << 2 | 3 << 4) << 16
    assert w[1] == STORE_IDS["scratch"] | STORE_IDS["act"] << 8 | STORE_IDS["param"] << 16
    assert w[2] == 3 | 4 << 16 and w[3] == 5 | 6 << 16
    assert w[4:16] == list(range(7, 19))
    w = encode(Contract(Descriptor(3, 4, 5, a, b, c, False, 6, True, 32)))
    assert (w[0] >> 8) & 0xFF == 2 | 5 << 2                 # integer, log2 split = 5
    assert "split=32 int" in disassemble(w)


def test_assembly_syntax_features():
    text = """
    # comment line
    loop count=4 inc=10,0,0
      scale rows=2 cols=3 d=act@0:3,1+i0 a=act@0:3,1+i0 imm=0.5   # trailing comment
    endloop
    update count=8 theta=param@0 grad=grad@0 lr=0.01
    contract m=2 n=3 k=4 c=scratch@0:3,1,0 a=act@0:4,1 b=param@0:3,1 acc
    end
    """
    ins = decode_program(assemble(text))
    assert ins[0] == Loop(4, (10, 0, 0))
    assert ins[1].step == (1, 1, 0) and ins[1].imm == f32_bits(0.5)
    assert isinstance(ins[2], EndLoop)
    assert ins[3].lr == f32_bits(0.01) and bits_f32(ins[3].lr) == np.float32(0.01)
    assert ins[4].desc.accumulate and ins[4].desc.batch == 1
    assert isinstance(ins[5], End)


@pytest.mark.parametrize("text, match", [
    ("frob x=1", "unknown mnemonic"),
    ("contract m=1 n=1 k=1 c=act@0:1,1 a=act@0:1,1", "needs field b="),
    ("contract m=1 n=1 k=1 c=nope@0:1,1 a=act@0:1,1 b=act@0:1,1", "unknown store"),
    ("copy rows=1 cols=1 d=act@0:1,1 a=act@x", "cannot parse view"),
    ("end now", "unexpected word"),
    ("fill rows=1 cols=1 d=act@0:1,1 imm=abc", "neither"),
    ("barrier count=3", "unknown field"),
    ("update count=2 theta=param@0:4,1 grad=grad@0 lr=0.1", "contiguous region"),
    ("update count=2 theta=param@0 grad=grad@0", "needs lr="),
    ("scale rows=1 cols=1 d=act@0:1,1 a=act@0:1,1", "needs imm="),
])
def test_assembler_rejects(text, match):
    with pytest.raises((ValueError, TypeError), match=match):
        assemble(text)


def _words(ins):
    return list(encode(ins))


def test_special_opcodes():
    """The special functions are unary elementwise ops 0x40 + golden.special function code;
    log (appended last) is 0x47; the rest of the reserved range 0x48..0x7F stays unassigned."""
    from ttrain.golden.special import FUNCTION_CODES
    assert set(SPECIAL_OPS) == set(FUNCTION_CODES) == {
        "exp", "recip", "rsqrt", "tanh", "tanh_grad", "gelu", "gelu_grad", "log"}
    assert OPCODES["log"] == 0x47 and MNEMONICS[0x47] == "log"
    for name, code in FUNCTION_CODES.items():
        assert OPCODES[name] == SPECIAL_OPS[name] == ELEMENTWISE_OPS[name] == 0x40 + code
    assert not any(0x48 <= op <= 0x7F for op in MNEMONICS)
    ins = decode_program(assemble("exp rows=2 cols=3 d=act@0:3,1 a=scratch@5:1,4+i2\n"
                                  "gelu_grad rows=1 cols=1 d=act@9 a=act@9\n"
                                  "log rows=3 cols=2 d=scratch@0:1,3 a=act@2:2,1\n"))
    assert ins[0] == Elementwise("exp", 2, 3, View("act", 0, 3, 1), View("scratch", 5, 1, 4),
                                 step=(0, 3, 0))
    assert ins[1] == Elementwise("gelu_grad", 1, 1, View("act", 9), View("act", 9))
    assert disassemble(encode(ins[0])) == "exp rows=2 cols=3 d=act@0:3,1 a=scratch@5:1,4+i2\n"
    assert ins[2] == Elementwise("log", 3, 2, View("scratch", 0, 1, 3), View("act", 2, 2, 1))
    assert encode(ins[2])[0] & 0xFF == 0x47
    assert decode(encode(ins[2])) == ins[2]
    assert disassemble(encode(ins[2])) == "log rows=3 cols=2 d=scratch@0:1,3 a=act@2:2,1\n"
    # field legality exactly as copy (one source, no immediate, slot 2 unused)
    for name in SPECIAL_OPS:
        with pytest.raises(ValueError, match="takes no immediate"):
            Elementwise(name, 1, 1, View("act", 0), View("act", 0), imm=1)
        with pytest.raises(ValueError, match="leave b as None"):
            Elementwise(name, 1, 1, View("act", 0), View("act", 0), View("act", 1))
        with pytest.raises(TypeError):
            Elementwise(name, 1, 1, View("act", 0))
        with pytest.raises(ISAError, match="unused operand"):
            Elementwise(name, 1, 1, View("act", 0), View("act", 0), step=(0, 0, 1))
        good = _words(Elementwise(name, 2, 2, View("act", 0, 2, 1), View("grad", 4, 2, 1)))
        for i, v in ((3, 1), (12, 5), (7, 1), (11, 2)):   # imm, slot 2 view, batch strides
            w = list(good)
            w[i] = v
            with pytest.raises(ISAError) as e:
                decode(w)
            assert e.value.code == ERR_FIELD, (name, i)
        w = list(good)
        w[1] |= 2 << 16                                  # slot 2 store id
        with pytest.raises(ISAError) as e:
            decode(w)
        assert e.value.code == ERR_FIELD
        w = list(good)
        w[1] |= 7 << 8                                   # slot 1 store id 7
        with pytest.raises(ISAError) as e:
            decode(w)
        assert e.value.code == ERR_STORE
        w = list(good)
        w[2] &= 0xFFFF0000                               # rows = 0
        with pytest.raises(ISAError) as e:
            decode(w)
        assert e.value.code == ERR_DIM


def test_decode_illegal_opcode():
    for op in (0x00, 0x05, 0x48, 0x4F, 0x50, 0x7F, 0xFF):
        w = [op] + [0] * (WORDS - 1)
        with pytest.raises(ISAError) as e:
            decode(w)
        assert e.value.code == ERR_OPCODE
    assert set(MNEMONICS) == set(OPCODES.values())


@pytest.mark.parametrize("mutate, code", [
    (lambda w: w.__setitem__(0, w[0] | 1 << 24), ERR_FIELD),           # reserved bits word 0
    (lambda w: w.__setitem__(0, w[0] | 1 << 22), ERR_FIELD),           # reserved step bits
    (lambda w: w.__setitem__(1, w[1] | 1 << 24), ERR_FIELD),           # reserved bits word 1
    (lambda w: w.__setitem__(0, w[0] | 0x40 << 8), ERR_FIELD),         # undefined flag (bit 6)
    (lambda w: w.__setitem__(0, w[0] | 9 << 10), ERR_FIELD),           # log2 split 9 (> 256)
    (lambda w: w.__setitem__(1, w[1] | 9), ERR_STORE),                 # store id 9
    (lambda w: w.__setitem__(2, w[2] & 0xFFFF0000), ERR_DIM),          # m = 0
    (lambda w: w.__setitem__(3, w[3] & 0x0000FFFF), ERR_DIM),          # batch = 0
])
def test_decode_malformed_contract(mutate, code):
    ins = Contract(Descriptor(2, 3, 4, View("act", 0, 4, 1), View("param", 0, 3, 1),
                              View("scratch", 0, 3, 1)))
    w = _words(ins)
    mutate(w)
    with pytest.raises(ISAError) as e:
        decode(w, pc=7)
    assert e.value.code == code and e.value.pc == 7


def test_decode_malformed_others():
    cases = []
    w = _words(End()); w[5] = 1; cases.append((w, ERR_FIELD))
    w = _words(Elementwise("scale", 1, 1, View("act", 0), View("act", 0), imm=1))
    w[12] = 3; cases.append((w, ERR_FIELD))                  # unused slot 2 view word
    w = _words(Elementwise("add", 1, 1, View("act", 0), View("act", 0), View("act", 0)))
    w[3] = 1; cases.append((w, ERR_FIELD))                   # immediate on add
    w = _words(Elementwise("add", 1, 1, View("act", 0), View("act", 0), View("act", 0)))
    w[7] = 1; cases.append((w, ERR_FIELD))                   # batch stride on elementwise
    w = _words(Update(View("param", 0), View("grad", 0), 4, f32_bits(0.1)))
    w[0] |= 3 << 8; cases.append((w, ERR_MODE))              # reserved update mode
    w = _words(Update(View("param", 0), View("grad", 0), 4, f32_bits(0.1)))
    w[2] = 0; cases.append((w, ERR_DIM))                     # zero count
    w = _words(Loop(3)); w[2] = 0; cases.append((w, ERR_LOOP))
    w = _words(Reduce("sum", 2, 2, View("act", 0, 1, 0), View("act", 9, 2, 1)))
    w[6] = 1; cases.append((w, ERR_FIELD))                   # reduce output col stride
    for words, code in cases:
        with pytest.raises(ISAError) as e:
            decode(words)
        assert e.value.code == code, (words, e.value)


def test_constructor_validation_messages():
    with pytest.raises(ISAError, match="reserved"):
        Update(View("param", 0), View("grad", 0), 4, f32_bits(0.1), mode=1)
    with pytest.raises(ISAError, match="unknown store|use one of"):
        Elementwise("copy", 1, 1, View("bogus", 0), View("act", 0))
    with pytest.raises(ValueError, match="leave b as None"):
        Elementwise("copy", 1, 1, View("act", 0), View("act", 0), View("act", 1))
    with pytest.raises(ValueError, match="takes no immediate"):
        Elementwise("add", 1, 1, View("act", 0), View("act", 0), View("act", 1), imm=5)
    with pytest.raises(ISAError) as e:
        Contract(Descriptor(0, 1, 1, View("act"), View("act"), View("act")))
    assert e.value.code == ERR_DIM
    with pytest.raises(ISAError, match="batch_stride"):
        Elementwise("copy", 1, 1, View("act", 0, 0, 1, 5), View("act", 0))
    with pytest.raises(ISAError, match="unused operand"):
        Elementwise("fill", 1, 1, View("act", 0), imm=0, step=(0, 1, 0))
    with pytest.raises(ISAError, match="unused operand"):
        Update(View("param", 0), View("grad", 0), 4, 0, step=(1, 1, 2))
    with pytest.raises(TypeError):
        encode("end")
    with pytest.raises(ValueError, match="multiple of"):
        decode_program([0] * (WORDS + 1))


def test_program_memory_map_checked():
    p = Program([End()], {"act": 10}, {"x": Region("act", 2, 8, (2, 4))})
    assert p.text() == "end\n"
    assert Program.from_words(p.words(), {"act": 10}).instructions == [End()]
    with pytest.raises(ValueError, match="does not fit"):
        Program([End()], {"act": 10}, {"x": Region("act", 4, 8)})


def test_no_bit_is_silently_ignored():
    """Flip any single bit of a legal word: decode either rejects it with an ISAError or gives
    an instruction that encodes back to exactly the flipped words (no bit is dropped)."""
    rng = np.random.default_rng(17)
    rejected = accepted = 0
    for kind in sorted(OPCODES):
        ins = random_instr(rng, kind)
        words = encode(ins)
        for bit in range(32 * WORDS):
            w = list(words)
            w[bit // 32] ^= 1 << (bit % 32)
            try:
                got = decode(w, units=ALL_UNITS)
            except ISAError:
                rejected += 1
                continue
            accepted += 1
            assert encode(got) == w, (kind, bit)
    assert rejected and accepted


def test_prng_ops_regenerate_the_golden_streams_and_need_the_unit():
    """perturb8/perturb32 (and their antithetic -sigma forms)/rmask/raccum/runif follow
    golden.prng at dense indices from imm; hardware without the PRNG unit answers ERR_OPCODE."""
    from ttrain.golden import prng
    from ttrain.golden.interpreter import Stats
    rng = np.random.default_rng(9)
    image = {s: rng.integers(0, 1 << 32, 64, dtype=np.uint64).astype(np.uint32) for s in STORES}
    image["param"][0] = seed = 12345
    image["act"][:12] = (rng.integers(-128, 128, 12) & 0xFFFFFFFF).astype(np.uint32)
    image["act"][20] = np.float32(0.25).view(np.uint32)
    image["grad"][:12] = np.float32(rng.normal(size=12)).view(np.uint32)
    idx = 1000 + np.arange(12, dtype=np.uint64)
    u = prng.rademacher(seed, idx).astype(np.int64)
    seed_v = View("param", 0, 1, 1)
    a = image["act"][:12].astype(np.int64)
    a = a - ((a & 0x80000000) << 1)
    cases = [
        (Random("perturb8", 3, 4, View("scratch", 0, 4, 1), View("act", 0, 4, 1), seed_v, 1000,
                5), np.clip(a + 5 * u, -128, 127)),
        (Random("perturb32", 3, 4, View("scratch", 0, 4, 1), View("act", 0, 4, 1), seed_v,
                1000, 200), a + 200 * u),
        # the antithetic pass: the same draws, the other sign
        (Random("perturb8n", 3, 4, View("scratch", 0, 4, 1), View("act", 0, 4, 1), seed_v,
                1000, 5), np.clip(a - 5 * u, -128, 127)),
        (Random("perturb32n", 3, 4, View("scratch", 0, 4, 1), View("act", 0, 4, 1), seed_v,
                1000, 200), a - 200 * u),
    ]
    for ins, want in cases:
        out = {k: v.copy() for k, v in image.items()}
        ins.execute(out, Stats())
        got = out["scratch"][:12].astype(np.int64)
        assert (got - ((got & 0x80000000) << 1)).tolist() == want.tolist()
        assert np.array_equal(out["act"], image["act"])            # the original is kept
    out = {k: v.copy() for k, v in image.items()}      # rmask: draw < the threshold word
    thr = prng.threshold_of(0.3)
    image_t = {k: v.copy() for k, v in image.items()}
    image_t["act"][30] = thr
    out = {k: v.copy() for k, v in image_t.items()}
    Random("rmask", 3, 4, View("grad", 0, 4, 1), View("act", 30, 0, 0), seed_v, 1000).execute(
        out, Stats())
    keep = prng.bernoulli(seed, idx, thr)
    assert out["grad"][:12].tolist() == [0xFFFFFFFF if k else 0 for k in keep]
    assert 0 < keep.sum() < 12
    out = {k: v.copy() for k, v in image.items()}
    Random("raccum", 3, 4, View("grad", 0, 4, 1), View("act", 20, 0, 0), seed_v, 1000).execute(
        out, Stats())
    want = image["grad"][:12].view(np.float32) + np.float32(0.25) * u.astype(np.float32)
    assert np.array_equal(out["grad"][:12].view(np.float32), want)
    out = {k: v.copy() for k, v in image.items()}
    Random("runif", 3, 4, View("grad", 0, 4, 1), View("grad", 0, 4, 1), seed_v, 1000).execute(
        out, Stats())
    r = (prng.draw(seed, idx) >> np.uint32(8)).astype(np.float32) * np.float32(2.0 ** -24)
    assert np.array_equal(out["grad"][:12].view(np.float32), image["grad"][:12].view(np.float32) + r)
    words = encode(cases[0][0])
    with pytest.raises(ISAError) as e:
        decode(words, units=("special",))
    assert e.value.code == ERR_OPCODE and "PRNG unit" in str(e.value)
    assert decode(words) == cases[0][0]
    with pytest.raises(ISAError) as e:                                # sigma 0 is malformed
        decode([words[0] & ~0xFF00] + list(words[1:]), units=ALL_UNITS)
    assert e.value.code == ERR_FIELD
