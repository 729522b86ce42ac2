# amaranth: UnusedElaboratable=no
"""The Vitis kernel (``platforms/kernel.py``) under Verilator, driven entirely through its AXI ports.

One build (2 lanes, the engine's vectors on the shared Omega route, vector and update units
of one lane, the special-function unit, stores
and instruction memory sized for both a compiled TT-linear layer and the whole ``tiny`` model
step of ``compile_model``), one cocotb run of several kernel invocations on the same kernel
(the stores keep their words between calls), through cocotbext-axi (``AxiLiteMaster`` on
``s_axi_control``, ``AxiRam`` on ``m_axi_gmem``) and
:class:`ttrain.platforms.host.driver.KernelDriver`:

1. program + whole image + RUN + every store read back: bit-exact with the interpreter;
2. four more steps without reloading the program or parameters (new inputs/targets only),
   the last two streamed in one call (write, RUN, read back, write, RUN, read back);
3. a program with an illegal opcode: the RUN record has the golden's error code and pc, and
   every store word is unchanged;
4. malformed command buffers (unknown opcode, range past a store, results buffer too small):
   the trailer reports the kernel error and the commands before it took effect;
5. ap_ctrl_hs: ap_idle / ap_start / ap_done (clear on read) / ISR / interrupt around every call;
6. ``verilator --lint-only -Wall`` of the kernel's Verilog (the build's own copy);
7. whole-model training: the ``tiny`` program and initial image loaded in one call, then three
   consecutive training steps on the built-in data set, each call writing only the step's
   sample words, RUN, and reading back the loss and logits (and every store after the last
   step): every word bit-exact with the golden interpreter, the loss equal to
   ``CompiledModel.loss`` of the interpreter's image.
"""

import numpy as np
import pytest

from ttrain.golden import model as M
from ttrain.golden.compiler import compile_tt_linear
from ttrain.golden.config import TTSpec, get_config
from ttrain.golden.data import generate_dataset
from ttrain.golden.interpreter import run as interpret
from ttrain.golden.isa import ERR_OPCODE, STORE_IDS
from ttrain.golden.model_compiler import compile_model
from ttrain.platforms.kernel import (CMD_WRITE, KERR_OPCODE, KERR_RANGE, KERR_RESULTS, RUN_TAG,
                               TRAILER_MAGIC, VitisKernel)
from ttrain.rtl.store import ram_verilog_path
from ttrain.platforms.host.driver import CommandList, KernelDriver, KernelError
from ttrain.testbench.kernel import build_kernel, run_kernel_calls
from ttrain.platforms.hw import hw_config
from ttrain.platforms.sim.top import layer_session, pad_image, unit_sources
from ttrain.platforms.sim.verilator import lint_verilator

SPEC = TTSpec((2, 3), (3, 2), (1, 2, 3, 2, 1))
STEPS = 5
SINGLE = 3          # calls 0..2 run one step each; call 3 streams steps 3 and 4
LAYER_CALLS = SINGLE + 5    # 4 training calls, the illegal program, 3 malformed buffers
MODEL_STEPS = 3     # whole-model calls after the layer's: one load, then one per step


@pytest.fixture(scope="module")
def layer():
    return compile_tt_linear(SPEC, 3, lr=0.05)


@pytest.fixture(scope="module")
def model():
    return compile_model(get_config("tiny"))


@pytest.fixture(scope="module")
def config(layer, model):
    # one build for both scenarios: stores = the larger of both programs', imem a power of two
    # holding the longer program, the special-function unit the model step needs; vector and
    # update units one lane wide on the 2 banks (HwConfig.vector_width: units narrower than
    # the banks, checked here through the whole kernel); the engine's operands through one
    # shared Omega read port and its results through an Omega write port (HwConfig.route, the
    # 256-lane design; the shared top of the other chip tests runs the arbiter route)
    return hw_config({"tt": layer, "tiny": model}, config="kernel-test", lanes=2, slots=8,
                     vector_width=1, route="omega-shared")


@pytest.fixture(scope="module")
def build(config):
    return build_kernel(config)


@pytest.fixture(scope="module")
def scenario(layer, model, config, build, tmp_path_factory):
    """Every invocation of the module, run once in one simulation; returns the calls, their
    parsed results, the register observations and the expected images."""
    sizes = config.stores
    drv = KernelDriver(None, sizes, imem_depth=config.imem_depth)
    sess, _ = layer_session(layer, sizes, steps=STEPS, seed=7)
    calls, expect = [], []
    cmds, program = drv.commands(), None
    for job in sess.jobs:
        if job["kind"] == "write":
            cmds.write(job["store"], job["addr"], sess.arrays[job["key"]])
        elif job["kind"] == "program":
            program = sess.arrays[job["key"]]
        else:
            cmds.run().read_image()
            expect.append({s: sess.arrays[k] for s, a, k in job["check"] if a == 0})
            if len(expect) <= SINGLE or len(expect) == STEPS:
                calls.append(drv.prepare(cmds, program))
                cmds, program = drv.commands(), None
    assert len(calls) == SINGLE + 1
    # an illegal opcode at instruction 5: no store word may change
    bad = np.array(layer.program.words(), dtype=np.uint32)
    bad[16 * 5] = (int(bad[16 * 5]) & ~0xFF) | 0x7F
    _, st = interpret(bad, expect[-1])
    assert (st.error, st.error_pc) == (ERR_OPCODE, 5)
    calls.append(drv.prepare(drv.commands().run().read_image(), bad))
    expect.append(expect[-1])
    # malformed command buffers after a valid write (which must take effect)
    probe = np.arange(1, 5, dtype=np.uint32) * 0x01010101
    calls.append(drv.prepare(drv.commands().write("scratch", 0, probe).raw([9, 0, 0, 0])
                             .read("scratch", 0, 4)))
    over = sizes["act"] - 1
    calls.append(drv.prepare(drv.commands().raw([CMD_WRITE, STORE_IDS["act"], over, 2, 1, 2])
                             .read("scratch", 0, 4)))
    calls.append(drv.prepare(drv.commands().read("scratch", 0, 4).run(), result_words=20))
    assert len(calls) == LAYER_CALLS
    model_calls, model_expect = model_scenario(model, drv)
    results, obs = run_kernel_calls(build, sizes, calls + model_calls,
                                    test_dir=tmp_path_factory.mktemp("kernel"), timeout=900)
    return {"calls": calls + model_calls, "results": results, "obs": obs, "expect": expect,
            "probe": probe, "sizes": sizes, "model": model_expect}


def model_scenario(cm, drv):
    """The whole-model calls: program + initial image, then one call per training step that
    writes only the sample words, runs, and reads loss and logits (every store after the
    last step). Returns the prepared calls and, per step, the interpreter's image."""
    params = M.init_params(cm.cfg, np.random.default_rng(0))
    image = pad_image(cm.initial_image(params), drv.store_sizes)
    batches = list(generate_dataset(seed=0).batches("train", 1, seed=0))[:MODEL_STEPS]
    assert len(batches) == MODEL_STEPS
    calls = [drv.prepare(drv.commands().write_image(image), cm.program.words())]
    outs = [cm.memory_map[n] for n in ("loss", "logits")]
    images, samples = [image], []
    for s, batch in enumerate(batches):
        cmds = drv.commands()
        words = cm.sample_words(batch)
        image = {k: v.copy() for k, v in image.items()}
        for name, w in words.items():
            r = cm.memory_map[name]
            cmds.write(r.store, r.base, w)
            image[r.store][r.base:r.base + r.size] = w
        cmds.run()
        for r in outs:
            cmds.read(r.store, r.base, r.size)
        if s == MODEL_STEPS - 1:
            cmds.read_image()
        image, st = interpret(cm.program, image)
        assert st.error == 0, f"the interpreter stopped step {s}: {st.message}"
        calls.append(drv.prepare(cmds))
        images.append(image)
        samples.append(words)
    return calls, {"cm": cm, "params": params, "images": images, "samples": samples,
                   "outs": outs}


def test_training_steps_through_axi_bit_exact(scenario):
    step = 0
    for c in range(SINGLE + 1):
        res = scenario["results"][c]
        res.raise_for_errors()
        n = 1 if c < SINGLE else STEPS - SINGLE
        assert res.trailer["kernel_error"] == 0 and res.trailer["runs"] == n
        assert [r["index"] for r in res.runs] == list(range(n))
        assert len(res.reads) == n * len(STORE_IDS)
        for i, run in enumerate(res.runs):
            assert run["tag"] == RUN_TAG | i, run
            assert 0 < run["engine_cycles"] <= run["busy_engine"] <= run["cycles"], run
            assert run["executed"] > 0 and run["busy_vector"] > 0 and run["busy_update"] > 0
            got = {s: w for s, _, w in res.reads[i * len(STORE_IDS):(i + 1) * len(STORE_IDS)]}
            for store, want in scenario["expect"][step].items():
                bad = np.flatnonzero(got[store] != want)
                assert bad.size == 0, (f"step {step}: {store} words {bad[:8].tolist()} got "
                                       f"{got[store][bad[:8]]} want {want[bad[:8]]}")
            step += 1
        # only the first call loads the program; the later ones keep it and the parameters
        assert (scenario["calls"][c].program.size > 0) == (c == 0)
        assert res.trailer["command_words_read"] == scenario["calls"][c].commands.size
    assert step == STEPS


def test_error_program_sets_the_error_status_and_changes_nothing(scenario):
    res = scenario["results"][SINGLE + 1]
    assert res.trailer["kernel_error"] == 0
    run = res.runs[0]
    assert (run["error"], run["error_code"], run["error_pc"], run["executed"]) == \
        (1, ERR_OPCODE, 5, 0)
    got = res.image()
    for store, want in scenario["expect"][-1].items():
        assert np.array_equal(got[store], want), store
    with pytest.raises(KernelError, match="accelerator error code 6 at pc 5"):
        res.raise_for_errors()


def test_malformed_commands_stop_with_a_kernel_error(scenario):
    opcode, rng, small = scenario["results"][SINGLE + 2:SINGLE + 5]
    assert (opcode.trailer["kernel_error"], opcode.trailer["error_at"]) == (KERR_OPCODE, 8)
    assert opcode.reads == [] and opcode.trailer["result_words_written"] == 0
    assert (rng.trailer["kernel_error"], rng.trailer["error_at"]) == (KERR_RANGE, 0)
    # the read after the range error never ran; the one before the RUN did, the RUN did not
    assert rng.reads == []
    assert small.trailer["kernel_error"] == KERR_RESULTS and small.trailer["runs"] == 0
    assert len(small.reads) == 1 and np.array_equal(small.reads[0][2], scenario["probe"])
    assert small.raw[4] == TRAILER_MAGIC
    with pytest.raises(KernelError, match="kernel error 1"):
        opcode.raise_for_errors()


def test_ap_ctrl_hs_and_interrupt(scenario):
    for i, ob in enumerate(scenario["obs"]):
        assert ob["ctrl_before"]["ap_idle"] and not ob["ctrl_before"]["ap_start"], (i, ob)
        assert ob["ctrl_running"]["ap_start"] or ob["ctrl_running"]["ap_done"], (i, ob)
        assert ob["isr"] == 1, (i, ob)                    # IER = 1: ap_done only
        assert ob["ctrl_done"]["ap_done"] and ob["ctrl_done"]["ap_idle"], (i, ob)
        assert ob["ctrl_done"]["ap_ready"] and not ob["ctrl_done"]["ap_start"], (i, ob)
        assert not ob["ctrl_after_read"]["ap_done"], (i, ob)     # clear on read
        assert ob["interrupt_after_ack"] == 0 and ob["isr_after_ack"] == 0, (i, ob)
    # a training step keeps the kernel busy long enough to see it running
    assert not scenario["obs"][0]["ctrl_running"]["ap_idle"]


def test_driver_rejects_bad_commands(config):
    sizes = config.stores
    cmds = CommandList(sizes)
    with pytest.raises(ValueError, match="reaches past"):
        cmds.write("act", sizes["act"] - 1, [1, 2])
    with pytest.raises(ValueError, match="store must be one of"):
        cmds.read("nope", 0, 1)
    with pytest.raises(ValueError, match="multiple of 16"):
        KernelDriver(None, sizes).prepare(cmds, np.zeros(5, dtype=np.uint32))


def test_kernel_verilog_lints_clean(build, config):
    # ``interrupt`` is the name Vitis requires; Verilator flags it as a C++ word
    kernel_v = next(p for p in build.sources if str(p).endswith(f"amaranth/{build.name}.v"))
    units = unit_sources(VitisKernel(**config.accelerator_kwargs("sim")).accelerator)
    assert lint_verilator(None, name=build.name,
                          extra_sources=[*units, kernel_v, ram_verilog_path()],
                          top=build.name, flags=("-Wall", "-Wno-SYMRSVDWORD")) == ""


def test_model_training_steps_through_axi_bit_exact(scenario):
    m = scenario["model"]
    cm, images, outs = m["cm"], m["images"], m["outs"]
    load, *steps = scenario["results"][LAYER_CALLS:]
    load_call, *step_calls = scenario["calls"][LAYER_CALLS:]
    assert len(steps) == MODEL_STEPS
    # the load call: program + every store word, no run, nothing read
    load.raise_for_errors()
    assert load_call.program.size == 16 * len(cm.program.instructions)
    assert load.trailer["runs"] == 0 and load.reads == []
    assert load.trailer["command_words_read"] == load_call.commands.size
    losses = []
    for s, (res, call) in enumerate(zip(steps, step_calls)):
        res.raise_for_errors()
        want = images[s + 1]
        # the step wrote only its sample words (header + words per region) and kept the program
        assert call.program.size == 0
        assert call.commands.size == sum(4 + w.size for w in m["samples"][s].values()) + 4 \
            + 4 * (len(outs) + (len(STORE_IDS) if s == MODEL_STEPS - 1 else 0))
        assert res.trailer["command_words_read"] == call.commands.size
        assert res.trailer["runs"] == 1 and res.trailer["kernel_error"] == 0
        run = res.runs[0]
        assert run["tag"] == RUN_TAG and run["index"] == 0
        assert 0 < run["engine_cycles"] <= run["busy_engine"] <= run["cycles"], run
        assert run["executed"] > 0 and run["busy_vector"] > 0 and run["busy_update"] > 0
        for (store, addr, got), r in zip(res.reads, outs):
            assert (store, addr) == (r.store, r.base)
            exp = want[r.store][r.base:r.base + r.size]
            bad = np.flatnonzero(got != exp)
            assert bad.size == 0, (f"step {s}: {r.store}[{r.base}:{r.base + r.size}] words "
                                   f"{bad[:8].tolist()} got {got[bad[:8]]} want {exp[bad[:8]]}")
        loss = float(res.reads[0][2][:1].view(np.float32)[0])
        assert loss == cm.loss(want), (s, loss, cm.loss(want))
        assert np.isfinite(loss) and loss > 0
        losses.append(loss)
        if s == MODEL_STEPS - 1:
            got_image = res.image()
            assert set(got_image) == set(STORE_IDS)
            for store, exp in want.items():
                bad = np.flatnonzero(got_image[store] != exp)
                assert bad.size == 0, (f"after step {s}: {store} words {bad[:8].tolist()} got "
                                       f"{got_image[store][bad[:8]]} want {exp[bad[:8]]}")
            # the chip trained: the parameters read back moved away from the initial ones
            after = cm.params(got_image)
            assert any(np.any(after[k] != m["params"][k]) for k in m["params"])
    assert len(set(losses)) == MODEL_STEPS           # three different samples and parameters
