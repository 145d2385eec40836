"""Gem's greedy necessity order (``GemSettings.necessity_lead``) against a plain one-copy-at-a-time
reference and on a hand-computed case; the leading pairs change the order of the training
targets inside the smallest top-K set, not the set."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from gem_core.data.instances import Instance, collate
from gem_core.data.protocol import PROTOCOLS, drop_isolated
from gem_core.data.ranking import topk_mask
from gem_core.gem.distill import distill
from gem_core.gem.necessity_order import LEAD_SPAN, lead_with, necessity_order
from gem_core.gem.settings import GemSettings
from gem_core.gem.training_targets import explainer_targets
from gem_core.models.predict import predict_proba
from tests.test_distill import _black_box, _instances


def _reference_order(inst: Instance, label: int, black_box, candidates: torch.Tensor,
                     steps: int, drop: bool) -> list[int]:
    """Delete, one candidate at a time, the one whose deletion gives the highest loss."""
    y = torch.tensor([label])
    deleted: list[int] = []

    def loss(mask: torch.Tensor) -> float:
        sub = inst.subgraph(mask)
        sub = drop_isolated(sub) if drop else sub
        return float(F.cross_entropy(black_box(collate([sub])).double(), y))

    cand = [j for j in range(inst.num_pairs) if bool(candidates[j])]
    while cand and len(deleted) < steps:
        best, best_loss = None, None
        for j in cand:
            mask = torch.ones(inst.num_pairs, dtype=torch.bool)
            mask[deleted + [j]] = False
            value = loss(mask)
            if best_loss is None or value > best_loss + 1e-5:
                best, best_loss = j, value
        deleted.append(best)
        cand.remove(best)
    return deleted


@pytest.mark.parametrize("task", ["graph", "node"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_necessity_order_matches_the_reference(task, protocol):
    bb = _black_box(task, seed=2)
    instances = [i for i in _instances(task, seed=7) if i.num_pairs > 0]
    gen = torch.Generator().manual_seed(0)
    candidates = [torch.rand(i.num_pairs, generator=gen) < 0.7 for i in instances]
    labels = predict_proba(bb, instances).argmax(-1)
    drop = protocol == "drop_isolated"
    # small forward chunks: the copies of one step span several passes
    got = necessity_order(instances, candidates, labels, bb, steps=3, drop_isolated=drop,
                          max_edges=40)
    for i, inst in enumerate(instances):
        expected = _reference_order(inst, int(labels[i]), bb, candidates[i], 3, drop)
        assert got[i] == expected, (i, got[i], expected)


class _CountsBondType:
    """A black box whose class-1 logit is 2 × (edges between two nodes of feature 1) − 1:
    class 1 needs at least one such edge."""

    uses_edge_attr = False

    def __call__(self, batch) -> torch.Tensor:
        u, v = batch.edge_index
        hot = (batch.x[u, 0] == 1) & (batch.x[v, 0] == 1)
        counts = torch.zeros(batch.num_instances).index_add_(0, batch.batch[u], hot.float()) / 2
        return torch.stack([torch.zeros_like(counts), 2 * counts - 1], 1)


def test_a_hand_computed_order_deletes_the_evidence_of_the_prediction_first():
    # a path 0-1-2-3-4: nodes 1, 2, 3 have feature 1, so pairs (1,2) and (2,3) carry class 1
    x = torch.tensor([[0.0], [1.0], [1.0], [1.0], [0.0]])
    pairs = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])
    inst = Instance(x=x, pairs=pairs, y=1)
    bb = _CountsBondType()
    assert int(predict_proba(bb, [inst]).argmax()) == 1
    every = [torch.ones(4, dtype=torch.bool)]
    # deleting (1,2) or (2,3) lowers the class-1 logit (a tie, to the lower index), then the other
    assert necessity_order([inst], every, torch.tensor([1]), bb, steps=2) == [[1, 2]]
    # candidates outside the evidence are taken in index order (every loss is the same)
    only_ends = [torch.tensor([True, False, False, True])]
    assert necessity_order([inst], only_ends, torch.tensor([1]), bb, steps=5) == [[0, 3]]


def test_leading_pairs_come_first_and_the_rest_keep_their_order():
    t = torch.tensor([1.0, 1.0, 1.0, 0.5, 0.0, 0.25])
    (out,) = lead_with([t], [[2, 0]])
    assert out[2] == 1.0 and out[0] == pytest.approx(1 - LEAD_SPAN / 2)
    assert out[0] > out[1] > out[5] > out[3] * 0 and out[1] == pytest.approx(1 - LEAD_SPAN)
    assert torch.equal(torch.argsort(out[[1, 3, 4, 5]], descending=True), torch.tensor([0, 1, 3, 2]))
    with pytest.raises(ValueError, match="span"):
        lead_with([t], [[0]], span=1.0)


def test_necessity_lead_keeps_the_smallest_top_k_set_of_the_training_targets():
    bb = _black_box("graph", seed=3)
    instances = [i for i in _instances("graph", seed=4) if i.num_pairs > 2]
    dist = distill(instances, bb, connected=False, label_source="predicted", device="cpu")
    base = GemSettings().with_overrides({"teacher.kind": "graded", "teacher.topk_policy": "nosplit", "teacher.label_source": "predicted"})
    plain = explainer_targets(dist, base, (2, 4), instances, bb)
    led = explainer_targets(dist, base.with_overrides({"teacher.necessity_lead": 2}), (2, 4), instances, bb)
    labels = predict_proba(bb, instances).argmax(-1)
    leads = necessity_order(instances, [topk_mask(t, 2) for t in plain], labels, bb, steps=2)
    for inst, p, q, lead in zip(instances, plain, led, leads):
        assert torch.equal(topk_mask(p, 2), topk_mask(q, 2))
        assert topk_mask(q, len(lead)).nonzero().view(-1).tolist() == sorted(lead)
        assert int(torch.argmax(q)) == lead[0]
    with pytest.raises(ValueError, match="instances and the black box"):
        explainer_targets(dist, base.with_overrides({"teacher.necessity_lead": 2}), (2, 4))
    with pytest.raises(ValueError, match="necessity_lead: -1 is not a non-negative integer"):
        GemSettings().with_overrides({"teacher.necessity_lead": -1})
