"""The batched GNNExplainer and Integrated Gradients against PyG's own per-instance explainers.

Same seed per instance. On the CPU a GNNExplainer pack runs each instance's shape-dependent kernels
as the instance alone runs them (``gem_core/explainers/_alone.py``: the vectorised sigmoid's scalar
tail, linear layers on 1-3 rows), so where ``exact_packs`` holds (every toy model here, on the
machines we run on) its masks equal PyG's to the last bit, whatever the pack. Integrated Gradients
sums 50 gradients whose kernels may round a few ulps apart (1e-6 absolute on attributions of order
0.1-1). Rank check: the top-K pairs agree (mean Jaccard over instances >= 0.99).
"""
from __future__ import annotations

import pytest
import torch

from gem_core.data import ranking
from gem_core.data.instances import Instance, to_pairs
from gem_core.explainers._packed import chunks, pack
from gem_core.explainers.gnnexplainer import GNNExplainerBaseline
from gem_core.explainers.integrated_gradients import IntegratedGradientsExplainer
from gem_core.models.strong_target import GINETarget
from gem_core.models.targets import GraphGCN, NodeGCN

torch.set_num_threads(1)
K = 3


def toy_instance(n: int, p: float, seed: int, node: bool, bonds: bool = False) -> Instance:
    gen = torch.Generator().manual_seed(seed)
    iu = torch.triu_indices(n, n, 1)
    pairs, _ = to_pairs(iu[:, torch.rand(iu.size(1), generator=gen) < p], n)
    attr = torch.randint(3, (pairs.size(1),), generator=gen) if bonds else None
    return Instance(x=torch.randn(n, 4, generator=gen), pairs=pairs, edge_attr=attr,
                    y=int(torch.randint(2, (1,), generator=gen)),
                    target=0 if node else None, index=seed, dataset="toy")


def _cases():
    torch.manual_seed(0)
    node = NodeGCN(4, 3, hidden=8).eval()
    torch.manual_seed(1)
    graph = GraphGCN(4, 2, hidden=8).eval()
    torch.manual_seed(2)
    gine = GINETarget(4, 2, hidden=8, num_layers=2).eval()
    return {
        "node": (node, "node", [toy_instance(6 + i % 5, 0.4, i, True) for i in range(6)]),
        "graph": (graph, "graph", [toy_instance(8 + i % 6, 0.3, 50 + i, False)
                                   for i in range(6)]),
        "bonds": (gine, "graph", [toy_instance(7 + i % 4, 0.35, 90 + i, False, bonds=True)
                                  for i in range(5)]),
    }


CASES = _cases()


def jaccard_topk(a: list[torch.Tensor], b: list[torch.Tensor], k: int) -> float:
    """Mean Jaccard of the top-k pair sets of two score lists (instances with pairs)."""
    out = []
    for x, y in zip(a, b):
        if x.numel():
            mx, my = ranking.topk_mask(x, k), ranking.topk_mask(y, k)
            out.append(float((mx & my).sum()) / float((mx | my).sum()))
    return sum(out) / len(out)


def test_pack_keeps_each_instance_edges_in_pyg_order():
    _, _, insts = CASES["bonds"]
    packed = pack(insts, True, torch.device("cpu"))
    offset = 0
    for inst, ei, attr in zip(insts, packed.split(packed.edge_index.t()),
                              packed.split(packed.edge_attr)):
        assert torch.equal(ei.t() - offset, inst.edge_index())
        assert torch.equal(attr, torch.cat([inst.edge_attr, inst.edge_attr]).float())
        offset += inst.num_nodes
    twice = packed.replicate(2)
    assert twice.num_instances == 2 * len(insts)
    assert torch.equal(twice.split(twice.edge_index.t())[len(insts)].t(),
                       packed.split(packed.edge_index.t())[0].t() + packed.x.size(0))
    limit = insts[0].num_nodes + insts[1].num_nodes
    groups = chunks(insts, limit)
    assert groups[0] == [0, 1] and sum(groups, []) == list(range(len(insts)))
    assert all(len(g) == 1 or sum(insts[i].num_nodes for i in g) <= limit for g in groups)


@pytest.mark.parametrize("case", sorted(CASES))
def test_gnnexplainer_matches_pyg_per_instance(case):
    model, task, insts = CASES[case]
    ex = GNNExplainerBaseline(model, task, epochs=30)
    batched = ex.explain(insts)
    reference = ex.explain_reference(insts)  # PyG's GNNExplainer, one call per instance
    for a, b in zip(batched, reference):
        assert a.shape == b.shape
        assert torch.allclose(a, b, atol=1e-5, rtol=0)
    assert jaccard_topk(list(batched), reference, K) >= 0.99
    # one instance per pack: PyG's arithmetic, operation for operation, so equal to the last bit
    alone = [ex.explain([inst])[0] for inst in insts]
    assert all(torch.equal(a, b) for a, b in zip(alone, reference))
    if ex.exact_packs:  # a pack of many: each instance's kernels as alone, to the last bit too
        assert all(torch.equal(a, b) for a, b in zip(batched, reference))
    # one call or many, any order: an instance's scores are its own (own seed, own loss)
    backwards = ex.explain(insts[::-1])[::-1]
    assert all(torch.allclose(a, b, atol=1e-5, rtol=0) for a, b in zip(alone, batched))
    assert all(torch.allclose(a, b, atol=1e-5, rtol=0) for a, b in zip(backwards, batched))
    # small packs (one optimisation per few instances) give the same masks
    small = GNNExplainerBaseline(model, task, epochs=30, max_pack_nodes=10).explain(insts)
    assert all(torch.allclose(a, b, atol=1e-5, rtol=0) for a, b in zip(small, batched))


def test_gnnexplainer_coefficients_reach_the_objective():
    model, task, insts = CASES["graph"]
    for coeffs in ({"edge_size": 0.5, "edge_reduction": "mean"}, {"edge_ent": 0.0}):
        ex = GNNExplainerBaseline(model, task, epochs=20, coeffs=coeffs)
        batched, reference = ex.explain(insts[:3]), ex.explain_reference(insts[:3])
        assert all(torch.allclose(a, b, atol=1e-5, rtol=0) for a, b in zip(batched, reference))
    default = GNNExplainerBaseline(model, task, epochs=20).explain(insts[:3])
    assert not all(torch.allclose(a, b, atol=1e-3) for a, b in zip(default, batched))


@pytest.mark.parametrize("case", sorted(CASES))
def test_integrated_gradients_matches_captum_per_instance(case):
    model, task, insts = CASES[case]
    ex = IntegratedGradientsExplainer(model, task, n_steps=20)
    batched = ex.explain(insts)
    reference = ex.explain_reference(insts)  # PyG's CaptumExplainer, one call per instance
    for a, b in zip(batched, reference):
        assert a.shape == b.shape
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-5)
    assert jaccard_topk(list(batched), reference, K) >= 0.99
    # several passes (a few steps each) and several packs: the same attributions
    split = IntegratedGradientsExplainer(model, task, n_steps=20, max_pass_nodes=60).explain(insts)
    assert all(torch.allclose(a, b, atol=1e-6, rtol=1e-5) for a, b in zip(split, batched))


def test_instances_without_pairs_get_no_scores():
    model, task, insts = CASES["graph"]
    bare = Instance(x=torch.randn(3, 4), pairs=torch.zeros(2, 0, dtype=torch.long), y=0,
                    index=999, dataset="toy")
    for ex in (GNNExplainerBaseline(model, task, epochs=5),
               IntegratedGradientsExplainer(model, task, n_steps=5)):
        out = ex.explain([bare, insts[0], bare])
        assert out[0].numel() == 0 and out[2].numel() == 0
        assert out[1].shape == (insts[0].num_pairs,)
        assert ex.explain([bare])[0].numel() == 0


def test_a_mask_parameter_left_on_the_model_does_not_cut_the_gradients():
    """PyG's GNNExplainer leaves its mask slot registered as a Parameter; IG still differentiates
    its own path masks afterwards (release_masks), batched or through Captum."""
    from torch_geometric.explain.algorithm.utils import clear_masks, set_masks

    model, task, insts = CASES["graph"]
    ex = IntegratedGradientsExplainer(model, task, n_steps=8)
    fresh = ex.explain(insts[:2])
    packed = pack(insts[:1], False, torch.device("cpu"))
    set_masks(ex.model, torch.nn.Parameter(torch.zeros(packed.edge_index.size(1))),
              packed.edge_index)
    clear_masks(ex.model)
    again = ex.explain(insts[:2])
    assert all(torch.equal(a, b) for a, b in zip(fresh, again))
    reference = ex.explain_reference(insts[:2])
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(again, reference))


def test_bench_reports_agreement_bit_identity_and_pyg_noise_floor():
    """``bench baselines`` on a toy split: PyG's reference is matched, one instance per
    optimisation to the last bit, and the 1 + 1e-6 nudge of PyG's initial mask is measured."""
    from gem_core.cli.bench_baselines import bench_method

    model, task, insts = CASES["graph"]
    ex = GNNExplainerBaseline(model, task, epochs=30)
    r = bench_method(ex, insts, [0, 2, 4], K, repeats=1)
    assert r["reference"]["instances"] == 3 and r["topk_jaccard"] >= 0.99
    assert r["max_abs_diff"] < 1e-5
    assert r["alone_bit_identical"] == 1.0
    assert set(r["noise_floor"]) == {"max_abs_diff", "same_topk", "topk_jaccard", "topk_share",
                                     "bit_identical"}
    if ex.exact_packs:
        assert r["bit_identical"] == 1.0
    assert r["topk_share"] >= r["topk_jaccard"]  # a share of one set is at least the Jaccard
    assert 0.0 < r["noise_floor"]["max_abs_diff"] < 1e-3  # nudged, so not the same masks
    assert ex.max_pack_nodes > 1 and ex.init_scale == 1.0  # the bench left the explainer as it was
    ig = bench_method(IntegratedGradientsExplainer(model, task, n_steps=8), insts, [1], K, 0)
    assert "noise_floor" not in ig and ig["max_abs_diff"] < 1e-5


def test_bench_agreement_on_a_hand_computed_case():
    """Top-2 of [3, 2, 1, 0] is pairs {0, 1}; of PyG's [3, 0, 1, 2] it is {0, 3}: one pair shared,
    so half of PyG's top-2 is kept, the Jaccard is 1/3 and the top-2 sets differ."""
    from gem_core.cli.bench_baselines import agreement

    mine, ref = torch.tensor([3.0, 2.0, 1.0, 0.0]), torch.tensor([3.0, 0.0, 1.0, 2.0])
    r = agreement([mine, ref], [ref, ref], 2)
    assert r["same_topk"] == 0.5  # the second instance is PyG's own scores
    assert r["bit_identical"] == 0.5
    assert r["topk_share"] == (0.5 + 1.0) / 2
    assert abs(r["topk_jaccard"] - (1 / 3 + 1.0) / 2) < 1e-12
    assert r["max_abs_diff"] == 2.0


def test_gnnexplainer_packs_run_on_one_thread_and_give_the_same_masks_at_any_thread_count():
    """A pack runs on one intra-op thread (a product split between threads rounds rows near the
    split differently), so its masks do not depend on the caller's thread count, which it
    restores afterwards."""
    model, task, insts = CASES["graph"]
    ex = GNNExplainerBaseline(model, task, epochs=20)
    one = ex.explain(insts)
    torch.set_num_threads(2)
    try:
        two = ex.explain(insts)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(1)
    assert all(torch.equal(a, b) for a, b in zip(one, two))
