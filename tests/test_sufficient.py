"""The protocol shared by distillation and metrics, dropped-node copies and the "sufficient" top-K
rule against a plain one-candidate-at-a-time reference."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from gem_core.data.instances import Instance, collate
from gem_core.data.packed import PackedGraphs
from gem_core.data.protocol import PROTOCOLS, check_protocol, drop_isolated
from gem_core.gem.distill import distill
from gem_core.gem.settings import GemSettings
from gem_core.gem.training_targets import explainer_targets
from tests.test_distill import _black_box, _instances

# the loss quantum of the growth's tie rule is far below these random targets' loss gaps


def _reference_growth(inst: Instance, label: int, black_box, kmax: int, drop: bool,
                      connected: bool, necessity_weight: float = 0.0) -> list[int]:
    """The pairs of one instance in the order the "sufficient" rule adds them, each candidate
    evaluated alone (one forward per candidate copy, subgraphs built by ``Instance.subgraph``)."""
    order: list[int] = []
    y = torch.tensor([label])

    def loss(mask: torch.Tensor) -> float:
        sub = inst.subgraph(mask)
        sub = drop_isolated(sub) if drop else sub
        return float(F.cross_entropy(black_box(collate([sub])).float(), y))

    limit = min(inst.num_pairs, kmax)
    while len(order) < limit:
        kept = torch.zeros(inst.num_pairs, dtype=torch.bool)
        kept[order] = True
        nodes = set(inst.pairs[:, kept].reshape(-1).tolist())
        if inst.target is not None:
            nodes.add(int(inst.target))
        cand = [j for j in range(inst.num_pairs) if j not in order]
        if connected:
            touching = [j for j in cand if set(inst.pairs[:, j].tolist()) & nodes]
            cand = touching or cand
        best, best_loss = None, None
        for j in cand:
            mask = kept.clone()
            mask[j] = True
            value = loss(mask)
            if necessity_weight:
                p = torch.exp(-torch.tensor(loss(~mask))).clamp(max=1 - 1e-6)
                value += necessity_weight * float(-torch.log1p(-p))
            if best_loss is None or value < best_loss - 1e-6:
                best, best_loss = j, value
        order.append(best)
    return order


@pytest.mark.parametrize("task", ["graph", "node"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("connected", [True, False])
def test_sufficient_growth_matches_the_reference(task, protocol, connected):
    bb = _black_box(task)
    instances = [i for i in _instances(task, seed=3) if i.num_pairs > 0]
    dist = distill(instances, bb, connected=connected, label_source="predicted", device="cpu")
    ks = (1, 2, 3, 5, 8)
    grid = dist.topk_grid(ks, "sufficient", instances=instances, black_box=bb, protocol=protocol)
    drop = protocol == "drop_isolated"
    for i, inst in enumerate(instances):
        order = _reference_growth(inst, int(dist.labels[i]), bb, max(ks), drop, connected)
        for k in ks:
            expected = torch.zeros(inst.num_pairs, dtype=torch.bool)
            expected[order[:k]] = True
            assert torch.equal(grid[k][i], expected), (i, k, order)


def test_sufficient_growth_with_necessity_weight_matches_the_reference():
    bb = _black_box("graph", seed=4)
    instances = [i for i in _instances("graph", seed=5) if i.num_pairs > 1]
    dist = distill(instances, bb, connected=False, label_source="predicted", device="cpu")
    ks = (1, 2, 4)
    grid = dist.topk_grid(ks, "sufficient", instances=instances, black_box=bb,
                          protocol="drop_isolated", necessity_weight=1.0)
    plain = dist.topk_grid(ks, "sufficient", instances=instances, black_box=bb,
                           protocol="drop_isolated")
    for i, inst in enumerate(instances):
        order = _reference_growth(inst, int(dist.labels[i]), bb, 4, True, False, 1.0)
        for k in ks:
            assert sorted(torch.nonzero(grid[k][i]).view(-1).tolist()) == sorted(order[:k])
    # the complement's term changes what is chosen somewhere (else it would be dead weight)
    assert any(not torch.equal(a, b) for k in ks for a, b in zip(grid[k], plain[k]))


def test_sufficient_masks_are_nested_and_sized():
    bb = _black_box("graph")
    instances = _instances("graph", seed=1)
    dist = distill(instances, bb, connected=True, device="cpu")
    grid = dist.topk_grid((1, 3, 6), "sufficient", instances=instances, black_box=bb,
                          protocol="drop_isolated")
    for i, inst in enumerate(instances):
        assert int(grid[1][i].sum()) == min(1, inst.num_pairs)
        assert int(grid[6][i].sum()) == min(6, inst.num_pairs)
        assert bool((grid[1][i] <= grid[3][i]).all()) and bool((grid[3][i] <= grid[6][i]).all())
    assert torch.equal(dist.topk(3, "sufficient", instances=instances, black_box=bb,
                                 protocol="drop_isolated")[2], grid[3][2])
    with pytest.raises(ValueError, match="needs the instances"):
        dist.topk(3, "sufficient")
    with pytest.raises(ValueError, match="protocol"):
        dist.topk(3, "sufficient", instances=instances, black_box=bb, protocol="drop_all")


@pytest.mark.parametrize("task", ["graph", "node"])
def test_dropped_copies_equal_drop_isolated_subgraphs(task):
    """A copies batch under drop_isolated gives the model the same graphs as building each
    subgraph and dropping its isolated nodes one by one (a mean-pooling target notices any
    extra node)."""
    bb = _black_box(task, seed=2)
    instances = _instances(task, seed=7)
    gen = torch.Generator().manual_seed(0)
    packed = PackedGraphs.from_instances(instances)
    inst_ids, flat, copy_of, subs = [], [], [], []
    for c in range(40):
        i = int(torch.randint(len(instances), (1,), generator=gen))
        inst = instances[i]
        mask = torch.rand(inst.num_pairs, generator=gen) < 0.4
        if c % 7 == 0:
            mask[:] = False  # a copy without any pair keeps every node
        inst_ids.append(i)
        local = torch.nonzero(mask).view(-1)
        flat.append(int(packed.pair_ptr[i]) + local)
        copy_of.append(torch.full((local.numel(),), c))
        subs.append(drop_isolated(inst.subgraph(mask)))
    batch = packed.copies_batch(torch.tensor(inst_ids), torch.cat(flat), torch.cat(copy_of),
                                drop_isolated=True)
    assert batch.x.size(0) == sum(s.num_nodes for s in subs)
    assert torch.allclose(bb(batch), bb(collate(subs)), atol=1e-5)


def test_protocol_is_one_concept_for_settings_and_metrics():
    from gem_core.evaluation import faithfulness

    assert faithfulness.Protocol is check_protocol("keep_nodes").__class__
    assert GemSettings().with_overrides(
        {"teacher.protocol": "drop_isolated"}).teacher.protocol == "drop_isolated"
    assert GemSettings().with_overrides({"teacher.protocol": "drop_isolated"}).key_parts()["protocol"] == "drop_isolated"
    assert "protocol" not in GemSettings().key_parts()  # saved Gems keep their keys
    with pytest.raises(ValueError, match="GemSettings.teacher.protocol: 'both' is not one of"):
        GemSettings().with_overrides({"teacher.protocol": "both"})
    with pytest.raises(ValueError, match="GemSettings.teacher.necessity_weight"):
        GemSettings().with_overrides({"teacher.necessity_weight": -1.0})


def test_training_targets_follow_the_protocol():
    """Gem taught for drop_isolated learns other targets than for keep_nodes (on a mean-pooling
    target, dropping nodes changes the prediction of a fragment)."""
    bb = _black_box("graph", seed=6)
    instances = [i for i in _instances("graph", seed=8) if i.num_pairs > 2]
    dist = distill(instances, bb, connected=False, label_source="predicted", device="cpu")
    targets = {}
    for protocol in PROTOCOLS:
        settings = GemSettings().with_overrides({"teacher.topk_policy": "sufficient", "teacher.protocol": protocol, "teacher.label_source": "predicted", "teacher.ks": (1, 2, 3)})
        targets[protocol] = explainer_targets(dist, settings, (1, 2, 3), instances=instances,
                                              black_box=bb)
    assert any(not torch.equal(a, b) for a, b in zip(*targets.values()))


def test_blend_target_averages_the_removal_and_the_growth_rankings():
    bb = _black_box("graph", seed=6)
    instances = [i for i in _instances("graph", seed=8) if i.num_pairs > 2]
    dist = distill(instances, bb, connected=True, label_source="predicted", device="cpu")
    common = GemSettings().with_overrides({
        "teacher.protocol": "drop_isolated", "teacher.label_source": "predicted",
        "teacher.ks": (1, 2, 3), "teacher.necessity_weight": 1.0})
    kw = dict(instances=instances, black_box=bb)

    def targets(kind, policy):
        settings = common.with_overrides({"teacher.kind": kind, "teacher.topk_policy": policy})
        return explainer_targets(dist, settings, (1, 2, 3), **kw)

    graded, grown = targets("graded", "nosplit"), targets("graded", "sufficient")
    blend = targets("blend", "nosplit")
    for g, s, b in zip(graded, grown, blend):
        assert torch.allclose(b, 0.5 * g + 0.5 * s)
    assert any(not torch.equal(g, s) for g, s in zip(graded, grown))
