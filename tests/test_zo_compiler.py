"""The compiled ZO step (golden/zo_compiler.py) on the golden interpreter leaves every int8
weight and int32 bias exactly as the golden rule's ``zo.zo_step`` does, step after step, for
the weight-perturbation, node-perturbation and mixed variants it compiles (forward or
antithetic differences); and what it does not compile is named."""

import numpy as np
import pytest

from ttrain.golden import interpreter, qnn, zo
from ttrain.golden.cnn_compiler import UNPACK_WORDS
from ttrain.golden.zo_compiler import GRAD_CHUNK, compile_zo_step, figures_model, zo_memory

from shared_top import cnn_models

VARIANTS = {
    "joint": dict(queries=3, lr=0.3, seed=5),
    "layerwise-nearest": dict(queries=2, lr=0.3, layerwise=True, rounding="nearest", seed=1),
    "last-layer": dict(queries=4, lr=0.3, layers=("fc4",)),
    "two-layers-rates": dict(queries=2, lr=0.2, layers=("conv0", "conv2"),
                             layer_lr=(("conv0", 4.0),), sigma_w=2, sigma_b=200, seed=9),
    # node perturbation (the digits table's zo-np and zo-mixed settings, fewer queries)
    "np-layerwise": dict(mode="np", queries=2, lr=0.05, sigma_a=4, layerwise=True,
                         np_dim="batch", seed=3),
    "np-joint-nearest": dict(mode="np", queries=3, lr=3.0, sigma_a=6, rounding="nearest",
                             seed=4),
    "mixed-layerwise": dict(mode="mixed", queries=2, lr=0.05, np_layers=3, layerwise=True,
                            np_dim="batch", layer_lr=(("conv0", 4.0),), seed=6),
    "mixed-joint": dict(mode="mixed", queries=2, lr=0.05, np_layers=2, np_dim="queries",
                        seed=8),
    # sparse training: NP of the top-k output channels by mean |y - z| (the table's zo-sparse)
    "sparse-topk": dict(mode="np", sparse="topk", density=0.5, queries=2, lr=0.05,
                        layerwise=True, np_dim="batch", seed=10),
    "sparse-topk-nearest": dict(mode="np", sparse="topk", density=0.3, queries=2, lr=0.5,
                                rounding="nearest", seed=11),
    # antithetic queries (theta + sigma u, then theta - sigma u: perturb8n / perturb32n)
    "wp-antithetic": dict(queries=2, lr=0.3, antithetic=True, seed=12),
    "mixed-antithetic": dict(mode="mixed", queries=2, lr=0.05, np_layers=2, layerwise=True,
                             np_dim="batch", antithetic=True, seed=13),
    "sparse-topk-antithetic": dict(mode="np", sparse="topk", density=0.5, queries=2, lr=0.05,
                                   antithetic=True, seed=14),
    # random element masks (rmask: a new mask each step, its kept counts in the constants)
    "wp-random": dict(sparse="random", density=0.5, queries=2, lr=0.3, seed=15),
    "mixed-random": dict(mode="mixed", sparse="random", density=0.3, queries=2, lr=0.05,
                         np_layers=2, layerwise=True, np_dim="batch", seed=16),
    # top-k channel masks with weight perturbation (the mask from each layer's outputs)
    "wp-topk": dict(sparse="topk", density=0.5, queries=2, lr=0.3, seed=20),
    "wp-topk-inplace": dict(mode="wp", sparse="topk", density=0.4, inplace=True, queries=2,
                               lr=0.3, layers=("conv2", "fc4"), seed=21),
    # the in-place variant: each (antithetic) query updates at once, its own rounding seed
    "wp-inplace": dict(inplace=True, queries=3, lr=0.3, seed=18),
    "wp-inplace-random": dict(inplace=True, sparse="random", density=0.5, queries=2, lr=0.3,
                              layers=("conv2", "fc4"), seed=19),
    "np-random-antithetic": dict(mode="np", sparse="random", density=0.6, queries=2, lr=1.0,
                                 antithetic=True, rounding="nearest", seed=17),
}
NP_VARIANTS = [v for v in VARIANTS if VARIANTS[v].get("mode", "wp") != "wp"]


def _steps_equal_golden(q0, s, *, batch, steps, seed, **compile_options):
    """Run ``steps`` compiled steps on the interpreter beside ``zo.zo_step``, comparing every
    parameter and ``L0`` after each; returns the compiled step, the golden model and the
    number of weight entries that moved."""
    rng = np.random.default_rng(seed)
    cz = compile_zo_step(q0, batch, s, **compile_options)
    golden, image, changed = q0.copy(), None, 0
    for step in range(steps):
        x = rng.integers(-128, 128, (batch, *q0.cfg.input_shape))
        y = rng.integers(0, q0.cfg.classes, batch)
        if image is None:
            image = cz.initial_image(x, y, step)
        else:
            cz.set_step(image, x, y, step)
        image, st = interpreter.run(cz.program, image)
        assert st.error == 0, st.message
        rec = zo.zo_step(golden, x, y, s, step)
        chip = cz.params(image)
        for n in golden.w:
            assert np.array_equal(chip.w[n], golden.w[n]), (step, n)
            assert np.array_equal(chip.b[n], golden.b[n]), (step, n)
        assert cz.loss(image).view(np.uint32) == np.float32(rec["loss"]).view(np.uint32)
        changed += sum(int((golden.w[n] != q0.w[n]).sum()) for n in golden.w)
    return cz, golden, changed


@pytest.mark.parametrize("name, variant, query_loop, packed",
                         [("digits", v, None, True) for v in VARIANTS]
                         + [("digits", "joint", True, False),
                            ("digits", "layerwise-nearest", False, True),
                            ("digits", "two-layers-rates", None, False),
                            ("parts", "joint", False, True),
                            ("parts", "layerwise-nearest", True, False)]
                         + [("digits", v, loop, packed)
                            for v in NP_VARIANTS[:2] + NP_VARIANTS[-2:]
                            for loop, packed in ((True, False), (False, True))]
                         + [("digits", "wp-topk", True, False),
                            ("parts", "wp-topk", False, True),
                            ("digits", "wp-inplace", True, False),
                            ("parts", "wp-inplace", False, True),
                            ("digits", "wp-random", True, False),
                            ("parts", "wp-random", False, True),
                            ("digits", "mixed-random", False, False),
                            ("digits", "wp-antithetic", True, False),
                            ("digits", "mixed-antithetic", True, False),
                            ("parts", "wp-antithetic", False, True)])
def test_compiled_zo_steps_equal_the_golden_rule(name, variant, query_loop, packed):
    """Two consecutive steps; ``query_loop`` True runs each group's queries as one LOOP
    (the convolutions' sample loops unrolled), False unrolls the queries, None picks the
    shorter program; ``packed`` stores the int8 weights four to a word."""
    q0 = cnn_models()[name]
    opts = dict(VARIANTS[variant])
    if name == "parts" and "layers" in opts:
        opts.pop("layers")
    s = zo.ZOSettings(**{"mode": "wp", **opts})
    cz, golden, changed = _steps_equal_golden(q0, s, batch=3, steps=2, seed=len(variant),
                                              query_loop=query_loop, packed=packed)
    assert changed > 0                      # the steps really moved the weights
    ops = [i.mnemonic for i in cz.program.instructions]
    wp_nodes, np_nodes = zo._plan(q0, s)
    rnd = s.sparse != "none" and bool(wp_nodes)   # masked WP: sigma u (perturb32), and, iadd
    if query_loop and not packed and not rnd:  # one perturbation per layer, not per query
        assert ops.count("perturb8") == len(wp_nodes) and "loop" in ops
    assert ({"ext8", "ins8"} <= set(ops)) == packed
    assert {"perturb32", "raccum", "f2i", "iadd"} <= set(ops)
    assert ("perturb8" in ops) == (bool(wp_nodes) and not rnd)
    # the antithetic pass (the in-place variant's too): every perturbation again with -sigma
    anti = s.antithetic or s.inplace
    assert ("perturb8n" in ops) == (bool(wp_nodes) and anti and not rnd)
    assert ("perturb32n" in ops) == anti
    if s.inplace:                  # every query updates: f2i once per tensor chunk and query
        assert ops.count("f2i") >= 2 * len(wp_nodes) * (1 if "loop" in ops else s.queries)
    assert ("rmask" in ops) == (s.sparse == "random")
    assert ({"fcmp", "bitop", "contract"} <= set(ops)) or not np_nodes
    assert ("runif" in ops) == (s.rounding == "stochastic")
    assert cz.np_nodes == tuple(np_nodes)


def test_the_step_keeps_no_gradient_or_perturbation_copy_of_the_model():
    """The only per-element buffers beyond inference are one layer's perturbed copy (one
    kernel offset's unpacked weights when packed) and a GRAD_CHUNK-word estimate chunk; packed
    weights take a quarter of the words."""
    q = cnn_models()["digits"]
    convs = [n for n in q.cfg.nodes if n.kind == "conv"]
    m = compile_zo_step(q, 2, zo.ZOSettings(mode="wp", queries=4), packed=False).memory_map
    assert m["zo.wq"].size == max(int(np.prod(n.weight_shape)) for n in convs)
    assert m["zo.g"].size <= GRAD_CHUNK
    assert m["zo.coef"].size == 4 and m["zo.seeds"].size == 5
    mp = compile_zo_step(q, 2, zo.ZOSettings(mode="wp", queries=4)).memory_map
    assert "zo.wq" not in mp
    assert mp["wunpack"].size <= max(int(np.prod(n.weight_shape[2:])) for n in convs
                                     if n.k > 1 and np.prod(n.weight_shape) > UNPACK_WORDS)
    for n in convs:
        assert mp[f"{n.name}.w"].size == -(-int(np.prod(n.weight_shape)) // 4)


def test_node_perturbation_keeps_outputs_and_buffers_as_the_golden_rule():
    """The NP step's extra memory: each NP layer's FP32 output-gradient accumulator (B x its
    outputs, as golden's ``gy``), one masked-gradient temporary, the FP32 input copy and the
    local weight gradient of the largest NP layer; Q NP seed words after the WP/rounding ones."""
    q = cnn_models()["digits"]
    s = zo.ZOSettings(mode="np", queries=2, layerwise=True)
    cz = compile_zo_step(q, 3, s)
    m = cz.memory_map
    convs = [i for i, n in enumerate(q.cfg.nodes) if n.kind == "conv"]
    for i in convs:
        n = q.cfg.nodes[i]
        assert m[f"zo.gy.{n.name}"].size == 3 * int(np.prod(n.shape))
    assert m["zo.np.dw"].size == max(int(np.prod(q.cfg.nodes[i].weight_shape)) for i in convs)
    assert m["zo.seeds"].size == 2 * cz.queries + 1 and cz.queries == 2 * len(convs)
    words = cz.seeds(0)
    assert words[cz.queries + 1] == zo.stream_seed(s.seed, 0, 0, zo._STREAM_NP)


@pytest.mark.parametrize("grouped", [False, True])
def test_node_perturbation_through_a_residual_block(grouped):
    """NP of the parts model's layers (a residual add after the perturbed output, a strided
    and a padded convolution; with ``grouped`` also the grouped and the depthwise ones, whose
    local gradients are CONTRACTs batched over the groups): equal to the golden rule over two
    steps."""
    q0 = cnn_models()["parts"]
    layers = tuple(n.name for n in q0.cfg.nodes if n.kind == "conv"
                   and (grouped or n.groups == 1))
    assert grouped == any(n.groups > 1 for n in q0.cfg.nodes if n.name in layers)
    s = zo.ZOSettings(mode="np", queries=2, lr=0.1, layers=layers, layerwise=True,
                      np_dim="batch", seed=2)
    cz, golden, _ = _steps_equal_golden(q0, s, batch=2, steps=2, seed=5)
    assert any(not np.array_equal(golden.w[n], q0.w[n]) for n in layers)
    if grouped:
        assert any(i.desc.batch > 1 for i in cz.program.instructions
                   if i.mnemonic == "contract")


@pytest.mark.parametrize("opts, match", [
    (dict(sparse="random", density=1.0), "random mask of density 1"),
    (dict(sigma_b=300), "sigma above 255"),
])
def test_what_is_not_compiled_is_named(opts, match):
    model = "parts" if opts.get("mode") == "np" else "digits"
    with pytest.raises(ValueError, match=match):
        compile_zo_step(cnn_models()[model], 2, zo.ZOSettings(**opts))


def test_bad_arguments_are_named():
    q = cnn_models()["digits"]
    with pytest.raises(TypeError, match="settings must be a ZOSettings"):
        compile_zo_step(q, 2, {"mode": "wp"})
    with pytest.raises(ValueError, match="batch must be a positive integer"):
        compile_zo_step(q, 0, zo.ZOSettings())
    with pytest.raises(ValueError, match="unknown layer"):
        compile_zo_step(q, 2, zo.ZOSettings(layers=("conv9",)))


@pytest.mark.parametrize("layers", [("b5.dw", "b9.project"), ("b5.dw", "b5.project", "b9.expand")])
def test_mcunet_scale_layerwise_step_with_residual_skips_is_exact(layers):
    """The MCUNet-scale preset (figures only): layer-wise queries starting inside residual
    blocks, whose skip inputs come from before the start (kept by the liveness packing), and
    the restore pass between groups; the parameters equal ``zo.zo_step``."""
    cfg = qnn.get_cnn_config("mcunet-s")
    q = figures_model(cfg)
    s = zo.ZOSettings(mode="wp", queries=1, lr=0.5, layers=layers, layerwise=True, sigma_b=200)
    cz = compile_zo_step(q, 1, s)
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (1, *cfg.input_shape))
    out, st = interpreter.run(cz.program, cz.initial_image(x, np.array([3]), 0))
    assert st.error == 0, st.message
    golden = q.copy()
    zo.zo_step(golden, x, np.array([3]), s, 0)
    chip = cz.params(out)
    assert all(np.array_equal(chip.w[n], golden.w[n]) and np.array_equal(chip.b[n], golden.b[n])
               for n in golden.w)
    assert any(not np.array_equal(golden.w[n], q.w[n]) for n in layers)
    # the node outputs share the act store: far fewer words than one region per node
    y = sum(r.size for k, r in cz.memory_map.items() if k.endswith(".y"))
    assert zo_memory(cz)["words"]["activations"] < y / 2


def test_memory_report_classes_add_up():
    q = cnn_models()["digits"]
    convs = q.cfg.conv_names
    dense = zo_memory(compile_zo_step(q, 2, zo.ZOSettings(mode="wp")))
    sparse = zo_memory(compile_zo_step(q, 2, zo.ZOSettings(mode="wp", layers=convs[-2:])))
    n_params = sum(-(-q.w[n].size // 4) + q.b[n].size for n in convs)   # packed weights
    assert dense["words"]["trainable"] == n_params and dense["words"]["frozen"] == 0
    assert sparse["words"]["trainable"] + sparse["words"]["frozen"] == n_params
    for m in (dense, sparse):
        assert m["total_bytes"] == m["writable_bytes"] + m["read_only_bytes"]
        assert m["total_bytes"] == 4 * sum(m["words"].values()) + m["program_bytes"]
        assert m["packed_int8_projection"]["total_bytes"] < m["total_bytes"]
    assert sparse["writable_bytes"] < dense["writable_bytes"]


def test_the_stepper_runs_a_schedule_by_rewriting_the_update_constants():
    """``InterpretedZO`` given each step's settings of a scheduled run (``at_step``, as
    ``train_zo`` passes them) keeps one program and rewrites the WP and NP update constants:
    equal to the golden scheduled steps."""
    from ttrain.golden.zo_compiler import InterpretedZO
    q0 = cnn_models()["digits"]
    s = zo.ZOSettings(mode="np", queries=2, lr=0.2, layerwise=True, np_dim="batch",
                      schedule="linear", seed=4)
    total, batch = 3, 2
    stepper, qc, golden = InterpretedZO(s), q0.copy(), q0.copy()
    rng = np.random.default_rng(2)
    for k in range(total):
        x = rng.integers(-128, 128, (batch, *q0.cfg.input_shape))
        y = rng.integers(0, q0.cfg.classes, batch)
        stepper(qc, x, y, s.at_step(k, total), k)
        zo.zo_step(golden, x, y, s.at_step(k, total), k)
        for n in golden.w:
            assert np.array_equal(qc.w[n], golden.w[n]) and np.array_equal(qc.b[n], golden.b[n])
    assert any(not np.array_equal(golden.w[n], q0.w[n]) for n in golden.w)
    with pytest.raises(ValueError, match="built for other ZO settings"):
        stepper(qc, x, y, zo.ZOSettings(mode="wp"), total)
