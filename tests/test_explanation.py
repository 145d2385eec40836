"""Tests of gem_core.explainers.base.Explanation: scores that carry their instances.

Hand-made instances: validation, the top-K views (masks, ranked pairs, ties at the cut,
explanation and complement subgraphs) and ``to_pyg``, whose objects PyG's own metrics
(``fidelity``, ``characterization_score``, ``groundtruth_metrics``) read directly; fidelity is
checked against a hand computation on the explanation and complement subgraphs.
"""
from __future__ import annotations

from typing import Optional

import pytest
import torch
from torch import nn
from torch_geometric.explain import Explainer as PyGExplainer
from torch_geometric.explain.algorithm import DummyExplainer
from torch_geometric.explain.metric import characterization_score, fidelity, groundtruth_metrics
from torch_geometric.nn import GINConv, global_add_pool

from gem_core.data.instances import Instance
from gem_core.data.ranking import ranked_pairs
from gem_core.explainers import Explainer, Explanation

torch.set_num_threads(1)


def path_instance(n: int = 5, target: Optional[int] = None, motif: bool = False) -> Instance:
    """A path 0-1-...-(n-1) plus the chord (0, 2): pairs sorted, ``u < v``."""
    pairs = sorted([(i, i + 1) for i in range(n - 1)] + [(0, 2)])
    t = torch.tensor(pairs, dtype=torch.long).t().contiguous()
    x = torch.eye(n)
    motif_mask = (t[0] == 0) if motif else None
    return Instance(x=x, pairs=t, y=1, target=target, dataset="hand", index=0,
                    motif_mask=motif_mask)


# ----------------------------------------------------------------------------- validation

def test_wrong_score_length_is_a_clear_error():
    inst = path_instance()  # 5 pairs
    with pytest.raises(ValueError, match="got 4 scores for instance 0, which has 5 pairs"):
        Explanation("m", [torch.zeros(4)], 0.0, [inst])
    with pytest.raises(ValueError, match="2 score tensors for 1 instances"):
        Explanation("m", [torch.zeros(5), torch.zeros(5)], 0.0, [inst])
    Explanation("m", [torch.zeros(5)], 0.0, [inst])  # the right length is accepted


def test_still_a_sequence_of_score_tensors():
    s = [torch.tensor([0.1, 0.9]), torch.tensor([0.5])]
    out = Explanation("random", s, 1.5)
    assert len(out) == 2 and out[1] is s[1] and list(out) == s and out[:1] == s[:1]
    assert out.method == "random" and out.ms_per_instance == 1.5 and out.instances is None
    with pytest.raises(ValueError, match="carries no instances"):
        out.explanation_subgraph(0, 1)


class _Fixed(Explainer):
    """Scores given in advance (one tensor per call), to see what ``explain`` makes of them."""

    name = "fixed"

    def __init__(self, scores):
        self.scores = scores

    def _explain(self, instances, progress):
        return self.scores


def test_explain_results_carry_and_check_their_instances():
    inst = path_instance()
    out = _Fixed([torch.arange(5.0)]).explain([inst])
    assert out.instances == [inst] and out.method == "fixed" and out.ranked(0, 2) == [4, 3]
    assert out.explanation_subgraph(0, 1).pairs.t().tolist() == [[3, 4]]
    with pytest.raises(ValueError, match="got 3 scores for instance 0, which has 5 pairs"):
        _Fixed([torch.zeros(3)]).explain([inst])


# ----------------------------------------------------------------------------- the top-K views

def test_topk_ranked_ties_and_subgraphs():
    inst = path_instance()  # pairs (0,1) (0,2) (1,2) (2,3) (3,4)
    assert inst.pairs.t().tolist() == [[0, 1], [0, 2], [1, 2], [2, 3], [3, 4]]
    scores = torch.tensor([0.2, 0.9, 0.5, 0.5, 0.1])
    ex = Explanation("m", [scores], 0.0, [inst])

    assert ex.topk(2)[0].tolist() == [False, True, True, False, False]  # tie: lower index kept
    assert ex.topk_mask(0, 9).all()  # K >= P keeps every pair
    assert ex.ranked(0, 3) == [1, 2, 3]
    assert ex.ranked(0, 3) == ranked_pairs(scores, 3)
    assert ex.ranked_pairs(0, 2) == [(0, 2), (1, 2)]
    assert ex.tied_at_cut(0, 2).tolist() == [False, False, True, True, False]
    assert not ex.tied_at_cut(0, 3).any()  # both tied pairs kept: no tie crosses the cut

    sub = ex.explanation_subgraph(0, 2)
    assert sub.pairs.t().tolist() == [[0, 2], [1, 2]] and sub.num_nodes == 5
    comp = ex.complement_subgraph(0, 2)
    assert comp.pairs.t().tolist() == [[0, 1], [2, 3], [3, 4]] and comp.num_nodes == 5
    with pytest.raises(ValueError):
        ex.topk(0)


def test_ranked_puts_nan_last():
    assert ranked_pairs(torch.tensor([float("nan"), 0.3, 0.7]), 3) == [2, 1, 0]


def test_ranking_many_instances_at_once_is_ranking_each():
    import numpy as np

    from gem_core.data.ranking import ranked_flat

    gen = torch.Generator().manual_seed(0)
    scores, ks = [], []
    for i in range(200):
        p = 1 + i % 13
        s = torch.randint(0, 4, (p,), generator=gen).float() / 4  # many ties
        s[torch.rand(p, generator=gen) < 0.1] = float("nan")
        s[torch.rand(p, generator=gen) < 0.05] = float("-inf")
        s[torch.rand(p, generator=gen) < 0.1] = -0.0
        scores.append(s)
        ks.append(1 + i % 17)  # K below, at and above the pair count
    sizes = [s.numel() for s in scores]
    chosen, counts = ranked_flat(torch.cat(scores).numpy(), sizes, ks)
    starts = np.cumsum([0] + sizes[:-1])
    ends = np.cumsum(counts)
    got = [(chosen[e - n:e] - st).tolist() for e, n, st in zip(ends, counts, starts)]
    assert got == [ranked_pairs(s, k) for s, k in zip(scores, ks)]
    assert counts.tolist() == [min(k, n) for k, n in zip(ks, sizes)]
    with pytest.raises(ValueError):
        ranked_flat(torch.cat(scores[:2]).numpy(), sizes[:2], [3])
    with pytest.raises(ValueError):
        ranked_flat(scores[0].numpy(), sizes[:1], [0])
    with pytest.raises(ValueError):
        ranked_flat(scores[0].numpy(), [sizes[0] + 1], [1])
    none, no_counts = ranked_flat(np.zeros(0), [], [])
    assert none.size == 0 and no_counts.size == 0


# ----------------------------------------------------------------------------- PyG

class GraphGIN(nn.Module):
    """Sum aggregation: a message multiplied by edge mask 0 is an edge deleted."""

    def __init__(self, d: int, classes: int = 2, hidden: int = 8):
        super().__init__()
        self.c1 = GINConv(nn.Sequential(nn.Linear(d, hidden), nn.Tanh()))
        self.c2 = GINConv(nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh()))
        self.head = nn.Linear(hidden, classes)

    def forward(self, x, edge_index, batch=None):
        h = self.c2(self.c1(x, edge_index), edge_index)
        if batch is None:
            batch = torch.zeros(x.size(0), dtype=torch.long)
        return self.head(global_add_pool(h, batch))


class NodeGIN(GraphGIN):
    def forward(self, x, edge_index):
        return self.head(self.c2(self.c1(x, edge_index), edge_index))


def _explainer(model: nn.Module, level: str) -> PyGExplainer:
    return PyGExplainer(model, algorithm=DummyExplainer(), explanation_type="model",
                     edge_mask_type="object",
                     model_config=dict(mode="multiclass_classification", task_level=level,
                                       return_type="raw"))


def test_to_pyg_layout():
    inst = path_instance(motif=True)
    scores = torch.tensor([0.2, 0.9, 0.5, 0.5, 0.1])
    ex = Explanation("m", [scores], 0.0, [inst])
    (soft,), (hard,) = ex.to_pyg(), ex.to_pyg(k=2)
    assert torch.equal(soft.x, inst.x)
    assert torch.equal(soft.edge_index, torch.cat([inst.pairs, inst.pairs.flip(0)], 1))
    assert torch.equal(soft.edge_mask, torch.cat([scores, scores]))
    assert hard.edge_mask.tolist() == [0.0, 1.0, 1.0, 0.0, 0.0] * 2
    assert soft.target.tolist() == [1] and soft.get("index") is None
    assert soft.validate(raise_on_error=True)
    # the motif (pairs (0,1) and (0,2)) per directed edge, for groundtruth_metrics
    assert hard.gt_edge_mask.tolist() == [1.0, 1.0, 0.0, 0.0, 0.0] * 2
    acc, rec = groundtruth_metrics(hard.edge_mask, hard.gt_edge_mask, ["accuracy", "recall"])
    assert acc == pytest.approx(6 / 10) and rec == pytest.approx(1 / 2)


def test_pyg_fidelity_matches_a_hand_computation_graph_level():
    seen = []
    for seed in range(4):
        torch.manual_seed(seed)
        model = GraphGIN(7, classes=4).eval()
        insts = [Instance(x=torch.randn(n, 7), pairs=path_instance(n).pairs, y=0)
                 for n in (5, 6, 7)]
        scores = [torch.randn(i.num_pairs) for i in insts]
        ex = Explanation("m", scores, 0.0, insts)
        explainer = _explainer(model, "graph")
        k = 2
        with torch.no_grad():
            predicted = [int(model(i.x, i.edge_index()).argmax()) for i in insts]
            for i, (inst, pyg) in enumerate(zip(insts, ex.to_pyg(k=k, target=predicted))):
                sub, comp = ex.explanation_subgraph(i, k), ex.complement_subgraph(i, k)
                on_sub = model(inst.x, sub.edge_index())
                on_comp = model(inst.x, comp.edge_index())
                # PyG's masked prediction is the prediction on the subgraph (edges deleted)
                masked = explainer.get_masked_prediction(pyg.x, pyg.edge_index, None,
                                                         pyg.edge_mask)
                assert torch.allclose(masked, on_sub, atol=1e-6)
                fid_plus, fid_minus = fidelity(explainer, pyg)
                assert fid_plus == float(int(on_comp.argmax()) != predicted[i])
                assert fid_minus == float(int(on_sub.argmax()) != predicted[i])
                seen.append((fid_plus, fid_minus))
    # not vacuous: some explanations are necessary (fid+ 1), some not sufficient (fid- 1)
    assert {p for p, _ in seen} == {0.0, 1.0} and {m for _, m in seen} == {0.0, 1.0}
    plus, minus = torch.tensor([p for p, _ in seen]), torch.tensor([m for _, m in seen])
    char = characterization_score(plus, minus)
    expected = 2 / (1 / plus + 1 / (1 - minus))  # the harmonic mean of fid+ and 1 - fid-
    assert torch.allclose(char, expected, equal_nan=True)


def test_pyg_fidelity_matches_a_hand_computation_node_level():
    torch.manual_seed(0)
    base = path_instance(6, target=2)
    model = NodeGIN(6, classes=3).eval()
    inst = Instance(x=torch.randn(6, 6), pairs=base.pairs, y=0, target=2)
    ex = Explanation("m", [torch.randn(inst.num_pairs)], 0.0, [inst])
    explainer = _explainer(model, "node")
    with torch.no_grad():
        predicted = int(model(inst.x, inst.edge_index())[2].argmax())
        (pyg,) = ex.to_pyg(k=3, target=[predicted])
        assert pyg.index == 2 and int(pyg.target[2]) == predicted
        on_sub = model(inst.x, ex.explanation_subgraph(0, 3).edge_index())[2]
        on_comp = model(inst.x, ex.complement_subgraph(0, 3).edge_index())[2]
        assert fidelity(explainer, pyg) == (float(int(on_comp.argmax()) != predicted),
                                            float(int(on_sub.argmax()) != predicted))
