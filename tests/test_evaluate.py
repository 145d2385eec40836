"""Tests of gem_core.evaluation.metrics: top-K, edge deletion, log-odds, accuracy, fidelity, AUC, results."""
from __future__ import annotations

import itertools
import json
import math

import pytest
import torch

from gem_core.evaluation.metrics import (MethodResult, edge_auc, evaluate_explainer,
                                         evaluate_scores, log_odds, log_odds_difference,
                                         time_explain)
from gem_core.data.ranking import complement_subgraph, explanation_subgraph, roc_auc, topk_mask
from gem_core.models.predict import predict_proba
from gem_core.data.config import check_k
from gem_core.data.instances import Instance, collate, to_pairs
from gem_core.models.targets import GNNBlackBox, GraphGCN, NodeGCN

torch.set_num_threads(1)


def random_instance(n: int, p: float, seed: int, node: bool, num_features: int = 4,
                    num_classes: int = 3, motif: bool = False) -> Instance:
    gen = torch.Generator().manual_seed(seed)
    iu = torch.triu_indices(n, n, 1)
    keep = torch.rand(iu.size(1), generator=gen) < p
    pairs, _ = to_pairs(iu[:, keep], n)
    x = torch.randn(n, num_features, generator=gen)
    y = int(torch.randint(num_classes, (1,), generator=gen))
    motif_mask = (torch.rand(pairs.size(1), generator=gen) < 0.3) if motif else None
    return Instance(x=x, pairs=pairs, y=y, target=0 if node else None, index=seed,
                    motif_mask=motif_mask)


@pytest.fixture(scope="module")
def node_setup():
    torch.manual_seed(0)
    model = NodeGCN(4, 3, hidden=8).eval()
    insts = [random_instance(8 + i % 5, 0.35, i, node=True, motif=True) for i in range(12)]
    return GNNBlackBox(model, "node", 3, "cpu"), model, insts


@pytest.fixture(scope="module")
def graph_setup():
    torch.manual_seed(1)
    model = GraphGCN(4, 2, hidden=8).eval()
    insts = [random_instance(10 + i % 4, 0.3, 100 + i, node=False, num_classes=2)
             for i in range(12)]
    return GNNBlackBox(model, "graph", 2, "cpu"), model, insts


# ----------------------------------------------------------------------------- top-K

def test_topk_never_more_than_k_and_all_when_k_ge_p():
    gen = torch.Generator().manual_seed(0)
    for p in (0, 1, 5, 17):
        s = torch.rand(p, generator=gen)
        for k in (1, 2, 5, 16, 17, 100):
            m = topk_mask(s, k)
            assert m.dtype == torch.bool and m.shape == (p,)
            assert int(m.sum()) == min(k, p)
            if 0 < k < p:  # the kept scores are the k largest
                assert s[m].min() >= s[~m].max()


def test_topk_ties_are_deterministic_lower_index_first():
    s = torch.tensor([0.5, 0.9, 0.5, 0.5, 0.1, 0.5])
    assert topk_mask(s, 2).nonzero().view(-1).tolist() == [0, 1]
    assert topk_mask(s, 3).nonzero().view(-1).tolist() == [0, 1, 2]
    flat = torch.zeros(10)
    assert topk_mask(flat, 4).nonzero().view(-1).tolist() == [0, 1, 2, 3]
    # NaN never outranks a real score
    nan = torch.tensor([float("nan"), 0.2, 0.1])
    assert topk_mask(nan, 2).tolist() == [False, True, True]


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "3", None])
def test_invalid_k_raises(bad):
    with pytest.raises(ValueError):
        topk_mask(torch.rand(5), bad)
    with pytest.raises(ValueError):
        check_k(bad)


# ----------------------------------------------------------------------------- deletion

def test_subgraph_deletes_edges_not_masks(node_setup):
    bb, model, insts = node_setup
    inst = max(insts, key=lambda i: i.num_pairs)
    scores = torch.rand(inst.num_pairs, generator=torch.Generator().manual_seed(3))
    k = 3
    sub = explanation_subgraph(inst, scores, k)
    comp = complement_subgraph(inst, scores, k)
    assert sub.num_pairs == k and comp.num_pairs == inst.num_pairs - k
    assert sub.num_nodes == inst.num_nodes and torch.equal(sub.x, inst.x)
    assert collate([sub]).edge_index.size(1) == 2 * k
    assert collate([inst], [topk_mask(scores, k)]).edge_index.size(1) == 2 * k

    # Deleting edges is not the same as PyG's message mask when the convolution normalises by
    # degree (GCNConv still counts masked edges), which is why evaluation deletes.
    from torch_geometric.explain.algorithm.utils import clear_masks, set_masks
    from torch_geometric.nn import GCNConv

    torch.manual_seed(0)

    class _GCN(torch.nn.Module):
        def __init__(self, d):
            super().__init__()
            self.conv1, self.conv2 = GCNConv(d, 8), GCNConv(8, 3)

        def forward(self, x, edge_index):
            return self.conv2(torch.relu(self.conv1(x, edge_index)), edge_index)

    gcn = _GCN(inst.x.size(1)).eval()
    with torch.no_grad():
        deleted = gcn(sub.x, sub.edge_index())[inst.target]
    hard = topk_mask(scores, k).float()
    set_masks(gcn, torch.cat([hard, hard]), inst.edge_index(), apply_sigmoid=False)
    try:
        with torch.no_grad():
            masked = gcn(inst.x, inst.edge_index())[inst.target]
    finally:
        clear_masks(gcn)
    assert not torch.allclose(deleted, masked)


# ----------------------------------------------------------------------------- log-odds

def test_log_odds_finite_for_saturated_probabilities():
    p_full = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
    p_sub = torch.tensor([[0.0, 1.0], [0.0, 1.0], [1.0, 0.0]])
    d = log_odds_difference(p_full, p_sub, torch.tensor([0, 1, 0]))
    assert torch.isfinite(d).all()
    bound = 2 * math.log((1 - 1e-6) / 1e-6)
    assert d[0].item() == pytest.approx(bound)
    assert d[1].item() == pytest.approx(0.0)
    assert torch.isfinite(log_odds(torch.tensor([0.0, 1.0]))).all()


def test_evaluate_log_odds_finite_with_saturating_model(node_setup):
    _, model, insts = node_setup
    big = NodeGCN(4, 3, hidden=8)
    big.load_state_dict(model.state_dict())
    with torch.no_grad():
        big.lin.weight.mul_(1e4)
        big.lin.bias.mul_(1e4)
    bb = GNNBlackBox(big.eval(), "node", 3, "cpu")
    scores = [torch.rand(i.num_pairs) for i in insts]
    res = evaluate_scores(bb, insts, scores, [1, 2])
    assert len(res.log_odds) == len(insts)
    assert all(math.isfinite(v) for v in res.log_odds)
    json.dumps(res.to_dict(), allow_nan=False)


def test_node_bounded_forwards_give_the_one_forward_probabilities(graph_setup):
    from gem_core.models.predict import node_bounded_slices

    bb, _, insts = graph_setup
    sizes = [inst.num_nodes for inst in insts]
    slices = node_bounded_slices(sizes, budget=20)
    assert [i for part in slices for i in range(len(insts))[part]] == list(range(len(insts)))
    assert all(sum(sizes[part]) <= 20 or part.stop - part.start == 1 for part in slices)
    assert len(slices) > 1
    assert node_bounded_slices([50, 3], budget=20) == [slice(0, 1), slice(1, 2)]
    assert node_bounded_slices([], budget=20) == []
    masks = [torch.rand(inst.num_pairs) < 0.5 for inst in insts]
    # the same probabilities up to float rounding (matrix kernels may differ by batch size)
    assert torch.allclose(predict_proba(bb, insts, max_nodes=20), predict_proba(bb, insts),
                          rtol=0, atol=1e-6)
    assert torch.allclose(predict_proba(bb, insts, masks, max_nodes=20),
                          predict_proba(bb, insts, masks), rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="not both"):
        predict_proba(bb, insts, batch_size=2, max_nodes=20)


@pytest.mark.parametrize("setup", ["node_setup", "graph_setup"])
def test_predict_packed_in_node_bounded_runs_gives_the_one_forward_classes(
    setup, request, monkeypatch
):
    """Gem reads the predicted class from forwards of at most NODES_PER_FORWARD nodes on the
    CPU: the classes are those of one forward over all instances, in the instances' order."""
    import gem_core.models.predict as predict_module
    from gem_core.data.packed import PackedGraphs
    from gem_core.gem.explain import predict_packed

    bb, _, insts = request.getfixturevalue(setup)
    packed = PackedGraphs.from_instances(insts)
    whole = predict_proba(bb, insts).argmax(-1)
    monkeypatch.setattr(predict_module, "NODES_PER_FORWARD", 20)
    assert len(predict_module.node_bounded_slices(packed.node_counts().tolist(), 20)) > 1
    assert torch.equal(predict_packed(bb, packed), whole)


# ----------------------------------------------------------------------------- accuracy

@pytest.mark.parametrize("setup", ["node_setup", "graph_setup"])
def test_oracle_scores_give_full_graph_accuracy(setup, request):
    bb, _, insts = request.getfixturevalue(setup)
    kmax = max(i.num_pairs for i in insts)
    scores = [torch.ones(i.num_pairs) for i in insts]
    full_pred = predict_proba(bb, insts).argmax(-1)
    y = torch.tensor([i.y for i in insts])
    full_acc = float((full_pred == y).double().mean())
    res = evaluate_scores(bb, insts, scores, [kmax, kmax + 5], mutagen_label=0)
    assert res.accuracy_at_k[kmax] == pytest.approx(full_acc)
    assert res.accuracy_at_k[kmax + 5] == pytest.approx(full_acc)
    sub = y == 0
    assert res.accuracy_at_k_mutagen[kmax] == pytest.approx(
        float((full_pred[sub] == y[sub]).double().mean()))
    assert res.log_odds_k == kmax + 5 and all(v == pytest.approx(0.0) for v in res.log_odds)
    # per-instance reference: prediction on each top-K subgraph separately
    k = 2
    ref = [int(bb(collate([explanation_subgraph(i, s, k)])).argmax(-1)) == i.y
           for i, s in zip(insts, scores)]
    assert evaluate_scores(bb, insts, scores, [k]).accuracy_at_k[k] == pytest.approx(
        sum(ref) / len(ref))


def test_fidelity_counts_prediction_changes(graph_setup):
    bb, _, insts = graph_setup
    gen = torch.Generator().manual_seed(5)
    scores = [torch.rand(i.num_pairs, generator=gen) for i in insts]
    k = 4
    res = evaluate_scores(bb, insts, scores, [k])
    full = predict_proba(bb, insts).argmax(-1)
    comp = torch.stack([bb(collate([complement_subgraph(i, s, k)]))[0] for i, s in
                        zip(insts, scores)]).argmax(-1)
    assert res.fidelity_at_k[k] == pytest.approx(float((comp != full).double().mean()))


def test_chunked_evaluation_matches_one_batch(node_setup):
    bb, _, insts = node_setup
    scores = [torch.rand(i.num_pairs, generator=torch.Generator().manual_seed(i.index))
              for i in insts]
    a = evaluate_scores(bb, insts, scores, [2, 3, 4])
    b = evaluate_scores(bb, insts, scores, [2, 3, 4], batch_size=5)
    assert a.accuracy_at_k == b.accuracy_at_k and a.fidelity_at_k == b.fidelity_at_k
    assert a.log_odds == pytest.approx(b.log_odds)
    assert a.log_odds_k == 3


def test_score_length_mismatch_raises(node_setup):
    bb, _, insts = node_setup
    bad = [torch.rand(i.num_pairs + 1) for i in insts]
    with pytest.raises(ValueError):
        evaluate_scores(bb, insts, bad, [3])
    with pytest.raises(ValueError):
        evaluate_scores(bb, insts, bad[:-1], [3])
    with pytest.raises(ValueError):
        evaluate_scores(bb, insts, [torch.rand(i.num_pairs) for i in insts], [0])


# ----------------------------------------------------------------------------- AUC

def test_roc_auc_toy_cases():
    labels = torch.tensor([0, 0, 1, 1, 0, 1])
    assert roc_auc(labels.float(), labels) == pytest.approx(1.0)
    assert roc_auc(-labels.float(), labels) == pytest.approx(0.0)
    assert roc_auc(torch.zeros(6), labels) == pytest.approx(0.5)
    assert roc_auc(torch.rand(4), torch.ones(4)) is None


def test_roc_auc_matches_pairwise_definition():
    gen = torch.Generator().manual_seed(0)
    s = torch.randint(0, 5, (40,), generator=gen).float()  # many ties
    y = torch.rand(40, generator=gen) < 0.4
    pos, neg = s[y], s[~y]
    wins = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a, b in itertools.product(pos, neg))
    assert roc_auc(s, y) == pytest.approx(wins / (len(pos) * len(neg)))


def test_edge_auc_over_instances(node_setup):
    _, _, insts = node_setup
    perfect = [i.motif_mask.float() for i in insts]
    assert edge_auc(insts, perfect) == pytest.approx(1.0)
    assert edge_auc(insts, [1 - s for s in perfect]) == pytest.approx(0.0)
    no_motif = [Instance(x=i.x, pairs=i.pairs, y=i.y, target=i.target) for i in insts]
    assert edge_auc(no_motif, perfect) is None


# ----------------------------------------------------------------------------- results

class _Ones:
    name = "ones"
    fit_seconds_ = 1.5

    def explain(self, instances):
        return [torch.ones(i.num_pairs) for i in instances]


def test_method_result_dict_shape(node_setup, graph_setup):
    bb, _, insts = node_setup
    res, scores = evaluate_explainer(_Ones(), bb, insts, [5, 6])
    d = res.to_dict()
    assert list(d) == ["accuracy_at_k", "agreement_at_k", "log_odds", "fidelity_at_k", "edge_auc",
                       "ms_per_instance", "fit_seconds"]
    assert set(d["accuracy_at_k"]) == {"5", "6"} and set(d["fidelity_at_k"]) == {"5", "6"}
    assert set(d["agreement_at_k"]) == {"5", "6"}
    assert d["fit_seconds"] == 1.5 and d["ms_per_instance"] > 0
    json.dumps(d, allow_nan=False)
    back = MethodResult.from_dict(json.loads(json.dumps(d)))
    assert back.to_dict() == d

    gbb, _, ginsts = graph_setup
    gres = evaluate_scores(gbb, ginsts, [torch.rand(i.num_pairs) for i in ginsts], [3],
                           mutagen_label=0)
    gd = gres.to_dict()
    assert list(gd) == ["accuracy_at_k", "accuracy_at_k_mutagen", "agreement_at_k", "log_odds",
                        "fidelity_at_k", "ms_per_instance", "fit_seconds"]
    assert time_explain(_Ones(), ginsts) >= 0.0


class _AtLeastTwoEdges:
    """A black box with a known rule: class 1 when an instance keeps at least two pairs, else 0."""

    def __call__(self, batch):
        pairs = torch.bincount(batch.batch[batch.edge_index[0]], minlength=batch.num_instances) // 2
        high = torch.where(pairs >= 2, 5.0, -5.0)
        return torch.stack([torch.zeros_like(high), high], dim=1)


def test_agreement_counts_predictions_kept_on_the_explanation_not_labels():
    """Agreement@K compares with the model's own prediction on the whole instance, not with y."""
    path = torch.tensor([[0, 1, 2], [1, 2, 3]])  # 3 pairs: the full graph is class 1
    single = torch.tensor([[0], [1]])  # 1 pair: class 0 whatever the explanation
    x = torch.ones(4, 1)
    insts = [Instance(x=x, pairs=path, y=1), Instance(x=x, pairs=path, y=0),
             Instance(x=x[:2], pairs=single, y=1)]
    scores = [torch.tensor([0.9, 0.5, 0.1])] * 2 + [torch.tensor([1.0])]
    res = evaluate_scores(_AtLeastTwoEdges(), insts, scores, [1, 2, 3], fidelity=False)
    # K = 1 keeps one pair: the path instances flip to class 0, the single-pair one stays 0
    assert res.agreement_at_k == {1: pytest.approx(1 / 3), 2: 1.0, 3: 1.0}
    # accuracy reads the labels instead: the mislabelled path and the single pair are wrong
    assert res.accuracy_at_k == {1: pytest.approx(1 / 3), 2: pytest.approx(1 / 3),
                                 3: pytest.approx(1 / 3)}


def test_rank_scores_and_ties_at_the_cut():
    from gem_core.data.ranking import rank_scores, tied_at_cut

    raw = torch.tensor([-245.5, 3.0, 0.5, 0.5, 0.5, 7.0])  # logits, say: any scale
    ranks = rank_scores(raw)
    assert ranks.tolist() == pytest.approx([1 / 6, 5 / 6, 3 / 6, 3 / 6, 3 / 6, 1.0])
    assert torch.equal(torch.argsort(ranks, stable=True), torch.argsort(raw, stable=True))
    # K = 3 keeps 7.0, 3.0 and the first 0.5: the three 0.5 tie across the cut
    assert tied_at_cut(raw, 3).tolist() == [False, False, True, True, True, False]
    # no tie across the cut at K = 2 or K = 5, nor when K keeps everything
    assert not tied_at_cut(raw, 2).any() and not tied_at_cut(raw, 5).any()
    assert not tied_at_cut(raw, 6).any() and not tied_at_cut(raw, 100).any()
