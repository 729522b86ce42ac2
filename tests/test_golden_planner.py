"""Contraction planner and memory accounting (golden/planner.py, golden/memory.py)."""

import itertools
from math import prod

import numpy as np
import pytest

from ttrain.golden.config import ModelConfig, TTMSpec, TTSpec, get_config
from ttrain.golden.memory import memory_report
from ttrain.golden.planner import (
    Chain, Leaf, Pair, TTNetwork, bidirectional_tree, dense_plan, dp_best_tree,
    left_to_right_tree, merge_left_macs, merge_right_macs, model_macs, order_plan, plan_layer,
    ttm_cost)

ATT = ((12, 8, 8), (8, 8, 12))


# ------------------------------------------------------------------------------------------
# the published figures (algorithms.md §2)

@pytest.mark.parametrize("ranks, forward", [
    ((1, 10, 10, 10, 10, 10, 1), 664_320),
    ((1, 12, 20, 20, 20, 12, 1), 1_643_520),
])
def test_bidirectional_forward_matches_paper(ranks, forward):
    spec = TTSpec(*ATT, ranks)
    plan = plan_layer(spec, 32)
    bi = plan.orders["bidirectional"]
    assert bi.forward_macs == forward
    # forward = both merges + X.L + Z.R, with the closed-form merges
    rd = ranks[3]
    assert merge_left_macs(spec) + merge_right_macs(spec) + 32 * rd * (768 + 768) == forward
    groups = bi.macs_by_group()
    assert groups["merge_left"] == merge_left_macs(spec)
    assert groups["merge_right"] == merge_right_macs(spec)
    assert groups["x_l"] == groups["z_r"] == 32 * rd * 768
    # batch-dependent backward: dz, dr, dx, dl = 2 B r_d (N_in + N_out)
    assert sum(groups[g] for g in ("dz", "dr", "dx", "dl")) == 2 * 32 * rd * 1536
    # dense: 18,874,368 forward MACs, 3x that for forward + backward
    assert plan.dense.forward_macs == 18_874_368
    assert plan.dense.macs == 3 * 18_874_368


def test_named_step_names_follow_the_paper():
    bi = plan_layer(TTSpec(*ATT, (1, 10, 10, 10, 10, 10, 1)), 32).orders["bidirectional"]
    names = [s.name for s in bi.steps]
    assert names[:6] == ["merge_left_2", "merge_left_3", "x_l", "merge_right_5",
                         "merge_right_4", "z_r"]
    assert names[6:10] == ["dz", "dr", "dx", "dl"]
    for k in range(1, 7):
        assert f"core_grad_{k}" in names
    # the HLS order for 3+3: dG_2 = (G_1 with dL) then with G_3
    i = names.index("core_grad_2_partial")
    assert bi.steps[i].operands == ("F:G1", "G:G1.G2.G3")
    assert bi.steps[i + 1].operands == ("G:G2.G3", "F:G3")
    assert all(s.phase == "forward" for s in bi.steps[:6])
    assert all(s.phase == "backward" for s in bi.steps[6:])
    # the named trees are what plan_layer reports
    spec = TTSpec(*ATT, (1, 10, 10, 10, 10, 10, 1))
    plan = plan_layer(spec, 32)
    assert order_plan(spec, 32, bidirectional_tree(3)).steps == plan.orders["bidirectional"].steps
    assert order_plan(spec, 32, left_to_right_tree(3)).macs == plan.orders["left_to_right"].macs
    l2r = [s.name for s in plan.orders["left_to_right"].steps]
    assert l2r[:6] == ["fwd_X.G1", "fwd_X.G1.G2", "fwd_X.G1.G2.G3", "fwd_X.G1.G2.G3.G4",
                       "fwd_X.G1.G2.G3.G4.G5", "y"]


# ------------------------------------------------------------------------------------------
# brute-force merge counts

def _brute_left_merge(cores, modes):
    """Contract G_1..G_d with explicit loops; return (result, multiply count)."""
    count = 0
    p = cores[0][0]                                # (m_1, r_1)
    for k in range(1, len(modes)):
        g = cores[k]                               # (r_{k-1}, m_k, r_k)
        rows = p.shape[0]
        out = np.zeros((rows, g.shape[1], g.shape[2]))
        for a in range(rows):
            for i in range(g.shape[1]):
                for c in range(g.shape[2]):
                    acc = 0.0
                    for b in range(g.shape[0]):
                        acc += p[a, b] * g[b, i, c]
                        count += 1
                    out[a, i, c] = acc
        p = out.reshape(rows * g.shape[1], g.shape[2])
    return p, count


@pytest.mark.parametrize("in_modes, out_modes, ranks", [
    ((3, 2), (2, 3), (1, 2, 3, 2, 1)),
    ((2, 3, 2), (2, 2, 3), (1, 2, 3, 4, 3, 2, 1)),
    ((4, 2, 3), (3, 2, 2), (1, 3, 2, 4, 2, 2, 1)),
])
def test_merge_formula_against_brute_force(in_modes, out_modes, ranks):
    spec = TTSpec(in_modes, out_modes, ranks)
    rng = np.random.default_rng(0)
    cores = [rng.standard_normal(s) for s in spec.core_shapes]
    d = spec.d
    left, n_left = _brute_left_merge(cores[:d], in_modes)
    ref = cores[0][0]
    for g in cores[1:d]:
        ref = np.einsum("ab,bic->aic", ref, g).reshape(-1, g.shape[2])
    np.testing.assert_allclose(left, ref)
    assert n_left == merge_left_macs(spec)
    # the right merge, built from the right, is the left merge of the mirrored chain
    mirrored = [np.transpose(c, (2, 1, 0)) for c in reversed(cores[d:])]
    _, n_right = _brute_left_merge(mirrored, tuple(reversed(out_modes)))
    assert n_right == merge_right_macs(spec)
    bi = plan_layer(spec, 5).orders["bidirectional"].macs_by_group()
    assert bi["merge_left"] == n_left and bi["merge_right"] == n_right


# ------------------------------------------------------------------------------------------
# every order is a correct program

def _tensor(net, name):
    kind, label = name.split(":")
    mask = 0
    for part in label.split("."):
        mask |= 1 if part == "X" else 1 << int(part[1:])
    return kind, mask


def _letters(net, mask):
    em = net.edges(mask)
    return "".join(chr(ord("a") + e) for e in range(len(net.edge_dims)) if em >> e & 1)


def _run(net, steps, values):
    """Execute ``steps`` with einsum; check each step's MACs and shapes on the way."""
    for s in steps:
        ops = [_tensor(net, o) for o in s.operands]
        out = _tensor(net, s.output)
        sub = [_letters(net, m) for _, m in ops]
        osub = _letters(net, out[1])
        union = set(sub[0]) | set(sub[1])
        assert set(osub) <= union
        assert s.macs == prod(net.edge_dims[ord(c) - ord("a")] for c in union)
        a, b = (values[o] for o in ops)
        assert a.shape == s.operand_shapes[0] and b.shape == s.operand_shapes[1]
        values[out] = np.einsum(f"{sub[0]},{sub[1]}->{osub}", a, b)
        assert values[out].shape == s.output_shape
    return values


@pytest.mark.parametrize("in_modes, out_modes, ranks, tokens", [
    ((2, 3), (3, 2), (1, 2, 3, 2, 1), 4),
    ((2, 3, 2), (2, 2, 3), (1, 2, 3, 4, 3, 2, 1), 3),
    ((3, 2, 2, 2), (2, 2, 2, 3), (1, 2, 3, 2, 4, 2, 3, 2, 1), 2),
])
def test_orders_compute_output_and_all_gradients(in_modes, out_modes, ranks, tokens):
    spec = TTSpec(in_modes, out_modes, ranks)
    plan = plan_layer(spec, tokens)
    net = TTNetwork(spec, tokens)
    rng = np.random.default_rng(1)
    d = spec.d
    x = rng.standard_normal((tokens,) + tuple(in_modes))
    dy = rng.standard_normal((tokens,) + tuple(out_modes))
    cores = [rng.standard_normal(s) for s in spec.core_shapes]
    # independent reference: dense W, Y = X W, dX = dY W^T, dG_k by autodiff of <dY, Y>
    w = cores[0][0]
    for g in cores[1:]:
        w = np.tensordot(w, g, axes=([-1], [0]))
    w = w[..., 0].reshape(spec.n_in, spec.n_out)
    X, dY = x.reshape(tokens, -1), dy.reshape(tokens, -1)
    y_ref, dx_ref = X @ w, dY @ w.T
    eps = 1e-6
    for order in list(plan.orders.values()):
        values = {("F", 1): x, ("G", net.full): dy}
        for k in range(1, 2 * d + 1):
            values[("F", 1 << k)] = cores[k - 1].reshape(net.shape(1 << k))
        _run(net, order.steps, values)
        np.testing.assert_allclose(values[("F", net.full)].reshape(tokens, -1), y_ref,
                                   rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(values[("G", 1)].reshape(tokens, -1), dx_ref,
                                   rtol=1e-10, atol=1e-10)
        for k in range(1, 2 * d + 1):
            grad = values[("G", 1 << k)].reshape(spec.core_shapes[k - 1])
            # directional finite difference of <dY, Y> (exact for a multilinear form)
            v = rng.standard_normal(grad.shape)
            moved = [c + eps * v if j == k - 1 else c for j, c in enumerate(cores)]
            wm = moved[0][0]
            for g in moved[1:]:
                wm = np.tensordot(wm, g, axes=([-1], [0]))
            wm = wm[..., 0].reshape(spec.n_in, spec.n_out)
            fd = (np.sum(dY * (X @ wm)) - np.sum(dY * y_ref)) / eps
            assert np.isclose(np.sum(grad * v), fd, rtol=1e-5, atol=1e-6), (order.name, k)


# ------------------------------------------------------------------------------------------
# the DP

def _all_trees(net, leaves):
    leaves = tuple(leaves)
    if len(leaves) == 1:
        yield Leaf(leaves[0])
        return
    first, rest = leaves[0], leaves[1:]
    for n in range(0, len(rest)):
        for extra in itertools.combinations(rest, n):
            a = (first,) + extra
            b = tuple(x for x in rest if x not in extra)
            for ta in _all_trees(net, a):
                for tb in _all_trees(net, b):
                    yield Pair(ta, tb)
    if 0 not in leaves and leaves == tuple(range(leaves[0], leaves[-1] + 1)):
        yield Chain(leaves[0], leaves[-1], "prefix")
        yield Chain(leaves[0], leaves[-1], "suffix")


@pytest.mark.parametrize("in_modes, out_modes, ranks, tokens", [
    ((2, 3), (3, 2), (1, 2, 3, 2, 1), 1),
    ((2, 3), (3, 2), (1, 2, 3, 2, 1), 50),
    ((4, 2), (2, 4), (1, 4, 1, 3, 1), 7),
    ((3, 5), (4, 2), (1, 3, 8, 2, 1), 16),
])
def test_dp_equals_exhaustive_enumeration(in_modes, out_modes, ranks, tokens):
    spec = TTSpec(in_modes, out_modes, ranks)
    net = TTNetwork(spec, tokens)
    costs = [order_plan(spec, tokens, t).macs for t in _all_trees(net, range(net.n_forward))]
    assert len(costs) > 105            # every binary tree of 5 leaves plus the chain variants
    tree, cost = dp_best_tree(spec, tokens)
    assert cost == min(costs)
    assert order_plan(spec, tokens, tree).macs == cost


def test_dp_never_worse_than_named_orders():
    rng = np.random.default_rng(7)
    for _ in range(40):
        d = int(rng.integers(1, 4))
        in_modes = tuple(int(v) for v in rng.integers(2, 6, d))
        out_modes = tuple(int(v) for v in rng.integers(2, 6, d))
        s = in_modes + out_modes
        ranks = [1]
        for k in range(1, 2 * d):
            bound = min(prod(s[:k]), prod(s[k:]))
            ranks.append(int(rng.integers(1, min(bound, 12) + 1)))
        ranks.append(1)
        tokens = int(rng.integers(1, 80))
        plan = plan_layer(TTSpec(in_modes, out_modes, ranks), tokens)
        dp = plan.orders["dp_best"].macs
        assert dp <= plan.orders["bidirectional"].macs
        assert dp <= plan.orders["left_to_right"].macs
        best = plan.orders[plan.best]
        assert all(best.macs <= o.macs for o in plan.orders.values())


def test_order_preference_depends_on_batch():
    spec = TTSpec(*ATT, (1, 10, 10, 10, 10, 10, 1))
    one = plan_layer(spec, 1).orders
    many = plan_layer(spec, 32).orders
    # with one row the batch-independent merges dominate the bi-directional flow
    assert one["left_to_right"].macs < one["bidirectional"].macs
    assert many["bidirectional"].forward_macs < many["left_to_right"].forward_macs
    # the classic order keeps B x (remaining modes) x r intermediates for the backward
    assert many["left_to_right"].saved_words > many["bidirectional"].saved_words


def test_liveness_rule_on_d1():
    # d = 1: L = G_1 and R = G_2 are cores, so the only kept intermediate is Z (B x r_1)
    spec = TTSpec((4,), (3,), (1, 2, 1))
    bi = plan_layer(spec, 5).orders["bidirectional"]
    assert [s.name for s in bi.steps] == ["x_l", "z_r", "dz", "dr", "dx", "dl"]
    assert bi.saved_words == 5 * 2
    # dz (5x2) is live with dr ... dl; dr's output is dG_2 and dl's is dG_1 (results)
    assert bi.temp_peak_words == 5 * 2
    assert bi.peak_live_words == 5 * 2 + 5 * 2


# ------------------------------------------------------------------------------------------
# TTM embedding

def _bracketings(i, j):
    if i == j:
        yield i
        return
    for m in range(i, j):
        for a in _bracketings(i, m):
            for b in _bracketings(m + 1, j):
                yield (a, b)


def _tree_cost(spec, t):
    if isinstance(t, int):
        return 0, t, t
    ca, i, m = _tree_cost(spec, t[0])
    cb, _, j = _tree_cost(spec, t[1])
    e, r = spec.dim_modes, spec.ranks
    return ca + cb + r[i - 1] * prod(e[i - 1:j]) * r[m] * r[j], i, j


@pytest.mark.parametrize("spec", [
    TTMSpec((5, 5, 4, 4, 2), (3, 4, 4, 4, 4), (1, 30, 30, 30, 30, 1)),
    TTMSpec((4, 4, 8), (2, 4, 4), (1, 4, 4, 1)),
    TTMSpec((2, 3, 2, 2), (5, 1, 3, 2), (1, 3, 7, 2, 1)),
])
def test_ttm_cost_is_the_cheapest_bracketing(spec):
    tokens = 9
    brute = min(_tree_cost(spec, t)[0] for t in _bracketings(1, spec.d))
    got = ttm_cost(spec, tokens)
    assert got["per_token_forward"] == brute
    assert got["forward"] == brute * tokens
    assert got["total"] == 4 * brute * tokens        # forward, recompute, 2x reverse mode
    l2r = ttm_cost(spec, tokens, "left_to_right")
    e, r = spec.dim_modes, spec.ranks
    assert l2r["per_token_forward"] == sum(prod(e[:k]) * r[k - 1] * r[k]
                                           for k in range(2, spec.d + 1))
    assert got["per_token_forward"] <= l2r["per_token_forward"]


# ------------------------------------------------------------------------------------------
# bad input

def test_bad_inputs_are_rejected():
    spec = TTSpec(*ATT, (1, 10, 10, 10, 10, 10, 1))
    for tokens in (0, -3):
        with pytest.raises(ValueError, match="at least 1"):
            plan_layer(spec, tokens)
    for tokens in (2.5, True, "32"):
        with pytest.raises(TypeError, match="must be an int"):
            plan_layer(spec, tokens)
    with pytest.raises(TypeError, match="TTSpec"):
        plan_layer(TTMSpec((2, 2), (2, 2), (1, 2, 1)), 4)
    with pytest.raises(TypeError, match="TTSpec"):
        merge_left_macs((12, 8, 8))
    with pytest.raises(ValueError, match="exactly once"):
        order_plan(spec, 4, Pair(Leaf(0), Chain(1, 3, "prefix")))
    with pytest.raises(ValueError, match="prefix"):
        Chain(1, 3, "middle")
    with pytest.raises(TypeError, match="TTMSpec"):
        ttm_cost(spec, 4)
    with pytest.raises(ValueError, match="'dp' or 'left_to_right'"):
        ttm_cost(get_config("tiny").embedding, 4, "random")
    with pytest.raises(ValueError, match="positive integer"):
        dense_plan(0, 4, 4)
    with pytest.raises(ValueError, match="fewer, larger modes"):
        plan_layer(TTSpec((2,) * 7, (2,) * 7, (1,) + (2,) * 13 + (1,)), 2)
    with pytest.raises(TypeError, match="ModelConfig"):
        model_macs("tiny")
    with pytest.raises(TypeError, match="ModelConfig"):
        memory_report("tiny")
    with pytest.raises(ValueError, match="order must be one of"):
        memory_report(get_config("tiny"), order="fastest")
    with pytest.raises(ValueError, match="batch must be a positive integer"):
        memory_report(get_config("tiny"), batch=0)


# ------------------------------------------------------------------------------------------
# memory accounting on a hand-checkable model

def _hand_model():
    att = TTSpec((2, 2), (2, 2), (1, 2, 2, 2, 1))
    return ModelConfig(
        name="hand", d_model=4, n_heads=2, d_ffn=8, n_layers=1, seq_len=2, batch=1,
        n_intents=3, n_slots=3,
        embedding=TTMSpec((2, 2), (2, 2), (1, 2, 1)),
        attention=att, ffn1=TTSpec((2, 2), (2, 4), (1, 2, 2, 2, 1)),
        ffn2=TTSpec((2, 4), (2, 2), (1, 2, 2, 2, 1)), pooler=att)


def test_memory_of_a_hand_checkable_model():
    cfg = _hand_model()
    rep = memory_report(cfg)
    # B = 2 tokens, D = 4, F = 8, H = 2, S = 2, one sentence.
    # TT cores: attention/pooler 1*2*2 + 2*2*2 + 2*2*2 + 2*2*1 = 24 (x5: q k v o pooler);
    # ffn1 4 + 8 + 8 + 2*4*1 = 28; ffn2 4 + 2*4*2 + 8 + 4 = 32.
    cores = 5 * 24 + 28 + 32
    biases = 4 * 4 + 8 + 4 + 4                      # q k v o, ffn1, ffn2, pooler
    ttm = 1 * 2 * 2 * 2 + 2 * 2 * 2 * 1             # 16
    params = cores + biases + ttm + 2 * 4 + 2 * 4 + 2 * 4 * 3 + (4 * 3 + 3)
    assert rep.onchip["parameters"] == 4 * params
    assert rep.onchip["gradients"] == 4 * params
    # kept by the bi-directional flow at d = 2: L (N_in r_2), R (r_2 N_out), Z (B r_2)
    kept = {"att": 4 * 2 + 2 * 4 + 2 * 2, "ffn1": 8 + 16 + 4, "ffn2": 16 + 8 + 4,
            "pooler": 8 + 8 + 1 * 2}
    for name, key in (("enc0.q", "att"), ("enc0.ffn1", "ffn1"), ("enc0.ffn2", "ffn2"),
                      ("pooler", "pooler")):
        spec = dict(cfg.tt_layers())[name]
        tokens = 1 if name == "pooler" else 2
        assert plan_layer(spec, tokens).orders["bidirectional"].saved_words == kept[key]
    acts = (2 * 2 + 1                               # token + segment ids, intent label
            + 8 + 2                                 # embedding LN x_hat + 1/sigma
            + 3 * 8 + 1 * 2 * 2 * 2                 # Q, K, V; probabilities
            + 2 * (8 + 2) + 16                      # two LNs; GELU input
            + 4 + 3                                 # tanh output; intent softmax
            + (8 + 8 + 8 + 16 + 4)                  # TT inputs: qkv, o, ffn1, ffn2, pooler
            + 4 * kept["att"] + kept["ffn1"] + kept["ffn2"] + kept["pooler"])
    assert rep.onchip["activations"] == 4 * acts
    # scratch: the largest backward phase; temporaries dZ + dR + dL of each layer
    temp = {"att": 4 + 8 + 8, "ffn1": 4 + 16 + 8, "ffn2": 4 + 8 + 16, "pooler": 2 + 8 + 8}
    phases = {"ffn2": 8 + 16 + temp["ffn2"], "ffn1": 16 + 8 + 8 + temp["ffn1"],
              "o": 8 + 8 + temp["att"], "attention": 8 + 8 + 24 + 8,
              "qkv": 24 + 8 + 8 + temp["att"], "pooler": 8 + temp["pooler"], "embedding": 8}
    assert rep.onchip["scratch"] == 4 * max(phases.values())
    total = 4 * (2 * params + acts + max(phases.values()))
    assert rep.onchip["total"] == total
    # dense: W instead of cores, an 4x4 table instead of TTM cores, no kept intermediates
    dense_params = (5 * 16 + 32 + 32) + biases + 16 + 8 + 8 + 24 + 15
    dense_acts = acts - (4 * kept["att"] + kept["ffn1"] + kept["ffn2"] + kept["pooler"])
    dense_phases = {"ffn2": 24, "ffn1": 32, "o": 16, "attention": 48, "qkv": 40,
                    "pooler": 8, "embedding": 8}
    dense = 4 * (2 * dense_params + dense_acts + max(dense_phases.values()))
    assert rep.dense_training_bytes == dense
    assert rep.memory_ratio == dense / total
    # per-layer figures add up to the TT parts of the totals
    assert sum(lay["parameters"] for lay in rep.layers) == 4 * (cores + biases)


def test_memory_grows_with_batch_and_ratio_with_depth():
    l1 = get_config("paper-l1")
    one, two, four = (memory_report(l1, batch=n) for n in (1, 2, 4))
    assert four.tokens == 4 * one.tokens
    # saved activations are affine in the batch: the TT merges L, R and the prefix/suffix
    # products do not depend on it, everything else grows linearly
    a1, a2, a4 = (r.onchip["activations"] for r in (one, two, four))
    assert a4 - a1 == 3 * (a2 - a1) and a2 > a1
    assert a1 - (a2 - a1) > 0
    assert four.onchip["parameters"] == one.onchip["parameters"]
    # the order changes only the kept intermediates and scratch
    l2r = memory_report(l1, order="left_to_right")
    assert l2r.onchip["parameters"] == one.onchip["parameters"]
    assert l2r.onchip["activations"] > one.onchip["activations"]
