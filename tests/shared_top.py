"""One Verilator build of the accelerator top shared by the top-level test files.

``tests/test_top_verilator.py`` (compiled layer programs, illegal programs, special functions)
, ``tests/test_model_verilator.py`` (whole-model training steps), ``tests/test_cnn_verilator.py``
(the int8 CNN forward pass and ZO steps) and ``tests/test_lrt_verilator.py`` (low-rank
training's per-sample and read-out programs) run on the same 4-lane build
(lane groups up to 4: CONTRACT splits; rows skewed across the banks) with the special-function
unit, stores and instruction memory sized for every program below;
one build instead of two saves several CPU minutes of the suite (the build lock in
``platforms/sim/verilator.py`` lets both pytest-xdist workers ask for it).
"""

import functools

import numpy as np

from ttrain.golden import config as C
from ttrain.golden import qnn, zo
from ttrain.golden.cnn_compiler import compile_cnn_forward
from ttrain.golden.compiler import compile_dense, compile_tt_linear
from ttrain.golden.config import TTSpec
from ttrain.golden.model_compiler import compile_model
from ttrain.golden.zo_compiler import compile_zo_step
from ttrain.platforms.hw import hw_config
from ttrain.platforms.sim.top import build_top

LANES = 4
SLOTS = 8
SPEC = TTSpec((2, 3), (3, 2), (1, 2, 3, 2, 1))


def layer_programs():
    return {
        "tt_bidir": compile_tt_linear(SPEC, 3, lr=0.05),
        "tt_l2r": compile_tt_linear(SPEC, 3, lr=0.05, order="left_to_right"),
        "tt_loop": compile_tt_linear(TTSpec((4, 2), (2, 4), (1, 2, 3, 2, 1)), 5, lr=0.1,
                                     sample_loop=True, loss_scale=0.5),
        "dense": compile_dense(5, 7, 3, lr=0.05),
    }


def model_programs():
    from dataclasses import replace

    from ttrain.golden.schedule import interleave_model
    tiny = C.get_config("tiny")
    cm = compile_model(tiny)
    split = replace(cm, program=cm.program.for_engine(LANES, SLOTS, LANES))
    # the scheduling pass with this build's cycle model (the same lanes, banks, skew and
    # units as shared_top's configuration): tiny2's and tiny_split's instructions run in
    # its order (tiny2's forward-only runs check that its sections held)
    cost = hw_config({"tiny": split}, config="tiny", lanes=LANES, slots=SLOTS,
                     max_split=LANES, bank_skew=True, vector_reads=2).cycle_model()
    return {"tiny": cm,
            "tiny2": interleave_model(compile_model(tiny.with_(batch=2, n_layers=2), lr=0.1),
                                      cost),
            # the same step mapped for the build's lane groups (orientation and k split per
            # CONTRACT by the cycle model): a new accumulation order the interpreter follows
            "tiny_split": interleave_model(split, cost)}


#: A CNN with every node kind (padded and strided convolution, grouped, depthwise, residual
#: add, pooling, linear) for the integer datapath's chip tests.
CNN_PARTS = qnn.CNNConfig("cnn-parts", (5, 5, 2), 3, (
    qnn.Conv(4, 3, 1), qnn.InvertedResidual(2, 4, 1), qnn.Conv(4, 3, 2, groups=2),
    qnn.GlobalPool(), qnn.Linear(3)))
CNN_BATCH = 2


@functools.lru_cache(maxsize=None)
def cnn_models():
    """int8 models of ``digits-cnn`` and :data:`CNN_PARTS` (seeded float weights and biases,
    calibrated on seeded random images: the numbers exercised, no training needed)."""
    out = {}
    for name, cfg in (("digits", qnn.get_cnn_config("digits-cnn")), ("parts", CNN_PARTS)):
        rng = np.random.default_rng(3)
        model = qnn.FloatCNN(cfg, seed=3)
        for p in model.params.values():
            p[1][:] = rng.normal(0, 0.1, p[1].shape)
        calib = rng.uniform(0, 1, (16, *cfg.input_shape)).astype(np.float32)
        out[name] = qnn.quantize(model, calib)
    return out


def cnn_programs():
    return {f"cnn_{name}": compile_cnn_forward(q, CNN_BATCH) for name, q in cnn_models().items()}


#: The ZO steps run on the top: weight perturbation of every layer (stochastic rounding), and
#: layer-wise queries with nearest rounding; a high rate so that every step moves weights.
ZO_CHIP = {"zo_digits": zo.ZOSettings(mode="wp", queries=2, lr=0.3, seed=5),
           "zo_digits_lw": zo.ZOSettings(mode="wp", queries=2, lr=1.0, layerwise=True,
                                         rounding="nearest", seed=2),
           # node perturbation of every layer (the digits table's zo-np, 2 queries per layer)
           # and the mixed mode with WP and NP in one joint group, with antithetic queries
           # (each query's second pass perturbs by -sigma u: perturb8n / perturb32n) and
           # random element masks (rmask: a new mask per step, its counts in the constants)
           "zo_digits_np": zo.ZOSettings(mode="np", queries=2, lr=0.05, layerwise=True,
                                         np_dim="batch", seed=3),
           "zo_digits_mixed": zo.ZOSettings(mode="mixed", queries=2, lr=0.3, np_layers=2,
                                            antithetic=True, sparse="random", density=0.5,
                                            seed=6),
           # the in-place variant (each antithetic query updates conv2 and fc4 at once) with
           # top-k channel masks on the WP layers (each layer's half of its output channels
           # with the largest mean |y - z|, ranked on chip)
           "zo_digits_inplace": zo.ZOSettings(mode="wp", inplace=True, queries=2, lr=0.3,
                                              layers=("conv2", "fc4"), sparse="topk",
                                              density=0.5, seed=7),
           # sparse training: NP of the top-half output channels (the table's zo-sparse)
           "zo_digits_sparse": zo.ZOSettings(mode="np", sparse="topk", density=0.5, queries=2,
                                             lr=0.05, layerwise=True, np_dim="batch", seed=9)}


@functools.lru_cache(maxsize=None)
def zo_programs():
    return {name: compile_zo_step(cnn_models()["digits"], CNN_BATCH, s)
            for name, s in ZO_CHIP.items()}


#: Low-rank training on the chip: the unbiased reduction with max-norm (every op the rule has:
#: random signs, the Householder mixing, the max-norm state) and the biased one without; rates
#: and an effective batch of 3 such that every read-out writes the weights.
LRT_CHIP = {"lrt_unbiased_max": ("lrt unbiased/max", 0.01), "lrt_biased": ("lrt biased/none", 0.03)}
LRT_BATCH = 3


@functools.lru_cache(maxsize=None)
def lrt_models():
    """The pre-trained fixed-point digits-mlp and the compiled programs of :data:`LRT_CHIP`."""
    from dataclasses import replace
    from ttrain.golden import lrt_model, lrt_online
    from ttrain.golden.lrt_compiler import compile_lrt
    model = lrt_model.pretrained_mlp(0)[0]
    out = {}
    for name, (label, lr) in LRT_CHIP.items():
        st = replace(lrt_online.BENCHMARK_RUNS[label], lr=lr, batch=LRT_BATCH)
        out[name] = (st, compile_lrt(model.shapes, st))
    return model, out


#: LRT of a small convolutional model on the chip: two 4-pixel conv layers in one pixel LOOP (a
#: strided, padded 3x3 and a 1x1 that still gathers its patches), a whole-map conv and the
#: dense read-out; random weights (seed 0) and a rate such that after two samples both
#: read-out programs write every layer and the condition check skips pixels of both conv
#: layers.
LRT_CNN_LAYERS = (("conv", 4, 3, 4, 1), ("conv", 4, 1, 1, 0), ("conv", 8, 2, 1, 0))
LRT_CNN_BATCH = 2


@functools.lru_cache(maxsize=None)
def lrt_cnn():
    """(model, settings, compiled programs) of the small convolutional LRT model."""
    from dataclasses import replace
    from ttrain.golden import lrt_model, lrt_online
    from ttrain.golden.lrt_compiler import compile_lrt
    from ttrain.golden.qnn import CNNConfig, Conv, GlobalPool, Linear
    cfg = CNNConfig(name="lrt-cnn-chip", input_shape=(8, 8, 1), classes=10, note="chip test",
                    layers=tuple(Conv(c, k=k, stride=st, pad=pd) for _, c, k, st, pd
                                 in LRT_CNN_LAYERS) + (GlobalPool(), Linear(10)))
    model = lrt_model.random_fixed_cnn(cfg, 0, weight_range=40)
    st = replace(lrt_online.BENCHMARK_RUNS["lrt unbiased/max"], lr=0.03,
                 conv_batch=LRT_CNN_BATCH, batch=LRT_CNN_BATCH)
    return model, st, compile_lrt(model.shapes, st, model.geometry)


#: The Jacobi SVD program alone: this many 5 x 5 matrices (random, ill-conditioned, rank
#: deficient; tests/test_lrt_verilator.py).
SVD_COUNT = 8


@functools.lru_cache(maxsize=None)
def svd_program():
    from ttrain.golden.lrt_compiler import compile_svd
    return compile_svd(SVD_COUNT, 5)


#: Streaming batch norm alone: samples of this many pixels x channels, effective batch
#: (tests/test_lrt_verilator.py).
SBN_SHAPE, SBN_BATCH = (8, 6), 4


@functools.lru_cache(maxsize=None)
def sbn_program():
    from ttrain.golden.lrt_compiler import compile_streaming_bn
    return compile_streaming_bn(*SBN_SHAPE, SBN_BATCH)


def lrt_programs():
    return {**{f"{name}_{kind}": prog for name, (_, cl) in lrt_models()[1].items()
               for kind, prog in cl.programs.items()},
            **{f"lrt_cnn_{kind}": prog for kind, prog in lrt_cnn()[2].programs.items()},
            "lrt_svd": svd_program().program,
            "lrt_sbn": sbn_program().program}


@functools.lru_cache(maxsize=None)
def shared_top():
    """The shared build (converted and looked up once per process: the conversion of the top
    alone takes ~16 s, and every Verilator test module asks for it)."""
    programs = {**layer_programs(), **model_programs(), **cnn_programs(), **zo_programs(),
                **lrt_programs()}
    # rows skewed across the banks (HwConfig.bank_skew): every top-level test then also
    # checks that the host, the vector and update units' ports and the engine agree on each
    # word's bank, including the full beats that straddle two rows; the vector unit reads
    # both sources of an element beat in one request (HwConfig.vector_reads = 2; the Vitis
    # kernel test's build keeps one vector a request)
    hw = hw_config(programs, config="shared-tests", lanes=LANES, slots=SLOTS, max_split=LANES,
                   bank_skew=True, vector_reads=2)
    return build_top(hw, "ttrain_top_l4", rom_depth=1 << 20, res_depth=1 << 10)
