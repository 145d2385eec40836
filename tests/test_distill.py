"""Batched distillation vs. the plain reference implementation, edge cases, cache and CLI."""
from __future__ import annotations

import json

import pytest
import torch

from gem_core.gem.distill import (ACCURACY_TOPK_POLICY, DEFAULT_TOPK_POLICY, TIE_TOL,
                                  TOPK_POLICIES, Distillation, distill, distill_dataset,
                                  distillation_path, load_distillation, topk_accuracy)
from gem_core.gem.distill.reference import (ReferenceResult, keep_component, reference_distill,
                                            reference_distill_one, reference_refine,
                                            reference_topk, reference_topk_all)
from gem_core.data.instances import Instance, to_pairs
from gem_core.runtime.store import load_torch
from gem_core.models.targets import GNNBlackBox, GraphGCN, NodeGCN

FEATURES, CLASSES = 4, 3
KS = (1, 2, 3, 5, 40)
# the policies that need no forward pass ("refine" has its own tests)
# the rules without forward passes (refine and sufficient run the target)
STATIC_POLICIES = tuple(p for p in TOPK_POLICIES if p not in ("refine", "sufficient"))


# ----------------------------------------------------------------------------- fixtures

def _black_box(task: str, seed: int = 1) -> GNNBlackBox:
    torch.manual_seed(seed)
    cls = NodeGCN if task == "node" else GraphGCN
    return GNNBlackBox(cls(FEATURES, CLASSES, hidden=8), task, CLASSES, "cpu")


def _instance(edges: list[tuple[int, int]], n: int, task: str, gen: torch.Generator,
              x: torch.Tensor | None = None, target: int = 0) -> Instance:
    ei = torch.tensor(edges, dtype=torch.long).t() if edges else torch.zeros(2, 0, dtype=torch.long)
    pairs, _ = to_pairs(ei, n)
    x = torch.randn(n, FEATURES, generator=gen) if x is None else x
    y = int(torch.randint(0, CLASSES, (1,), generator=gen))
    return Instance(x=x, pairs=pairs, y=y, target=target if task == "node" else None)


def _random_instance(task: str, gen: torch.Generator) -> Instance:
    n = int(torch.randint(2, 11, (1,), generator=gen))
    adj = torch.rand(n, n, generator=gen) < 0.3
    return _instance(adj.nonzero().tolist(), n, task, gen)


def _cycle(n: int) -> list[tuple[int, int]]:
    return [(i, (i + 1) % n) for i in range(n)]


def _instances(task: str, seed: int = 0) -> list[Instance]:
    """Random small graphs plus the edge cases."""
    gen = torch.Generator().manual_seed(seed)
    out = [_random_instance(task, gen) for _ in range(14)]
    out += [
        _instance([], 1, task, gen),                                   # zero pairs, one node
        _instance([], 4, task, gen),                                   # zero pairs, isolated nodes
        _instance([(1, 2), (2, 3), (1, 3)], 4, task, gen),             # isolated target (node 0)
        _instance([(0, 1), (1, 2)], 3, task, gen),                     # fewer than K edges
        _instance([(0, 1), (1, 2), (3, 4), (4, 5), (5, 3), (6, 7)], 8, task, gen),  # disconnected
        _instance(_cycle(6), 6, task, gen, x=torch.ones(6, FEATURES)),  # symmetric: ties in Δ
        _instance([(0, i) for i in range(1, 6)], 6, task, gen, x=torch.ones(6, FEATURES)),  # star
    ]
    return out


def _assert_same(dist: Distillation, instances, black_box, connected: bool, label_source: str):
    ref = reference_distill(instances, black_box, connected, label_source)
    assert len(dist) == len(ref)
    for i, r in enumerate(ref):
        mine = dist.instance(i)
        assert mine.label == r.label
        assert torch.allclose(mine.delta, r.delta, atol=1e-5), i
        assert torch.equal(mine.kept, r.kept), i
        assert torch.allclose(mine.weights, r.weights, atol=1e-5), i
        assert abs(mine.full_loss - r.full_loss) < 1e-5 and abs(mine.greedy_loss - r.greedy_loss) < 1e-5
    _assert_same_topk(dist, instances, connected)
    return ref


def _as_reference(dist: Distillation) -> list[ReferenceResult]:
    """The batched distillation's per-instance results in the reference's format."""
    out = []
    for i in range(len(dist)):
        d = dist.instance(i)
        out.append(ReferenceResult(d.delta, d.weights, d.kept, d.label, d.full_loss, d.greedy_loss))
    return out


def _assert_same_topk(dist: Distillation, instances, connected: bool, ks=KS, ref=None,
                      fills=(False, True)):
    """Batched top-K == reference top-K for every K, policy and fill-up setting.

    Top-K is a function of the structure, the kept pairs, the weights and Δ only, so both get
    the same inputs (by default the batched ones): weights that agree up to float noise could
    still fall on two sides of a ``round(value / tol)`` tie bucket and order differently.
    """
    ref = _as_reference(dist) if ref is None else ref
    for policy in STATIC_POLICIES:
        for fill in fills:
            for k in ks:
                mine = dist.topk(k, policy=policy, fill=fill)
                theirs = reference_topk_all(instances, ref, k, connected, policy=policy, fill=fill)
                for i, (a, b) in enumerate(zip(mine, theirs)):
                    assert torch.equal(a, b), (policy, fill, k, i)


# ----------------------------------------------------------------------------- batched == reference

@pytest.mark.parametrize("task", ["graph", "node"])
@pytest.mark.parametrize("connected", [True, False])
def test_batched_matches_reference(task, connected):
    bb = _black_box(task)
    instances = _instances(task)
    # a tiny edge budget forces many chunks (and splits one instance's copies across chunks)
    dist = distill(instances, bb, connected=connected, device="cpu", max_edges_per_forward=64)
    _assert_same(dist, instances, bb, connected, "true")
    assert dist.connected is connected and dist.label_source == "true"


@pytest.mark.parametrize("task", ["graph", "node"])
def test_predicted_label_source(task):
    bb = _black_box(task, seed=3)
    instances = _instances(task, seed=5)
    dist = distill(instances, bb, connected=True, label_source="predicted", device="cpu")
    ref = _assert_same(dist, instances, bb, True, "predicted")
    predicted = [int(bb(_collate1(inst)).argmax(-1)[0]) for inst in instances]
    assert dist.labels.tolist() == predicted == [r.label for r in ref]


@pytest.mark.parametrize("task", ["graph", "node"])
@pytest.mark.parametrize("connected", [True, False])
def test_reference_trace_hook_records_the_greedy_steps(task, connected):
    """``on_step`` sees every pair the greedy phase tries; its records replay to the result."""
    from gem_core.data.instances import collate
    from gem_core.gem.distill import cross_entropy
    from gem_core.gem.distill.reference import GreedyStep, remove_pair

    bb = _black_box(task, seed=2)
    for inst in _instances(task, seed=4):
        steps: list[GreedyStep] = []
        traced = reference_distill_one(inst, bb, connected, on_step=steps.append)
        plain = reference_distill_one(inst, bb, connected)
        assert torch.equal(traced.delta, plain.delta) and torch.equal(traced.kept, plain.kept)
        assert torch.equal(traced.weights, plain.weights)
        assert traced.greedy_loss == plain.greedy_loss
        # replay: the steps go in ascending (Δ, index), each from the previous step's graph
        mask, loss = torch.ones(inst.num_pairs, dtype=torch.bool), traced.full_loss
        weights = torch.zeros(inst.num_pairs, dtype=torch.float64)
        tried = []
        for n, s in enumerate(steps, 1):
            assert s.number == n and mask[s.pair] and s.loss_before == loss
            tentative = remove_pair(inst, mask, s.pair, connected)
            logits = bb(collate([inst], [tentative]))
            after = float(cross_entropy(logits, torch.tensor([traced.label]))[0])
            assert s.loss_after == after
            assert s.accepted == (after <= loss + TIE_TOL)
            if s.accepted:
                assert s.weight == 0.0
                assert s.dropped_with == [i for i in range(inst.num_pairs)
                                          if i != s.pair and mask[i] and not tentative[i]]
                mask, loss = tentative, after
            else:
                assert s.weight == after - loss and s.dropped_with == []
                weights[s.pair] = s.weight
            assert torch.equal(s.mask, mask)
            tried.append(s.pair)
        weights[~mask] = 0.0
        assert torch.equal(mask, traced.kept) and loss == traced.greedy_loss
        assert torch.equal(weights, traced.weights)
        order = sorted(range(inst.num_pairs),
                       key=lambda j: (round(float(traced.delta[j]) / TIE_TOL), j))
        assert tried == [j for j in order if j in tried]


def _collate1(inst: Instance):
    from gem_core.data.instances import collate
    return collate([inst])


def test_result_invariants():
    bb = _black_box("graph")
    instances = _instances("graph")
    dist = distill(instances, bb, connected=True, device="cpu")
    for inst, w, kept, d, nw in zip(instances, dist.weight_list(), dist.kept_masks(), dist.deltas(),
                                    dist.normalized_weights()):
        assert w.shape == kept.shape == d.shape == nw.shape == (inst.num_pairs,)
        assert bool((w[kept] > 0).all()) and bool((w[~kept] == 0).all())
        assert bool((nw >= 0).all()) and bool((nw <= 1).all())
        if inst.num_pairs and bool(kept.any()):
            assert float(nw.max()) == pytest.approx(1.0)
    # the greedy phase never raises the loss (up to the tie tolerance per accepted step)
    assert bool((dist.greedy_loss <= dist.full_loss + 1e-4).all())
    for k in KS:
        for kept, mask in zip(dist.kept_masks(), dist.topk(k)):
            assert int(mask.sum()) <= max(k, 0) or torch.equal(mask, kept)
            assert bool((mask <= kept).all())


# ----------------------------------------------------------------------------- edge cases

def test_zero_pairs_and_fewer_than_k():
    bb = _black_box("node")
    gen = torch.Generator().manual_seed(0)
    lonely = _instance([], 1, "node", gen)
    small = _instance([(0, 1), (1, 2)], 3, "node", gen)
    dist = distill([lonely, small], bb, connected=True, device="cpu")
    assert dist.deltas()[0].numel() == 0 and dist.topk(5)[0].numel() == 0
    assert dist.normalized_weights()[0].numel() == 0
    assert torch.equal(dist.topk(5)[1], dist.kept_masks()[1])  # at most K pairs: keep them all
    only = distill([lonely], bb, connected=False, device="cpu")
    assert len(only) == 1 and only.topk(1)[0].numel() == 0


def test_ties_are_deterministic_and_batch_independent():
    bb = _black_box("graph")
    gen = torch.Generator().manual_seed(0)
    ring = _instance(_cycle(8), 8, "graph", gen, x=torch.ones(8, FEATURES))
    alone = distill([ring], bb, connected=True, device="cpu")
    deltas = alone.deltas()[0]
    assert float(deltas.max() - deltas.min()) < 1e-6  # all removals are isomorphic
    others = _instances("graph", seed=9)[:6]
    mixed = distill(others + [ring] + others, bb, connected=True, device="cpu")
    j = len(others)
    assert torch.equal(mixed.kept_masks()[j], alone.kept_masks()[0])
    assert torch.equal(mixed.topk(3)[j], alone.topk(3)[0])
    _assert_same(alone, [ring], bb, True, "true")


def test_connectivity_rule_keeps_target_or_largest_component():
    gen = torch.Generator().manual_seed(0)
    g = _instance([(0, 1), (2, 3), (3, 4)], 5, "graph", gen)
    assert keep_component(g, torch.ones(3, dtype=torch.bool)).tolist() == [False, True, True]
    tie = _instance([(0, 1), (2, 3)], 4, "graph", gen)  # equal sizes: the lowest node id wins
    assert keep_component(tie, torch.ones(2, dtype=torch.bool)).tolist() == [True, False]
    node = _instance([(0, 1), (2, 3), (3, 4)], 5, "node", gen)
    assert keep_component(node, torch.ones(3, dtype=torch.bool)).tolist() == [True, False, False]


def test_k_validation():
    bb = _black_box("graph")
    gen = torch.Generator().manual_seed(0)
    inst = _instance(_cycle(4), 4, "graph", gen)
    dist = distill([inst], bb, connected=True, device="cpu")
    with pytest.raises(ValueError, match="K must be at least 1"):
        dist.topk(0)
    with pytest.raises(ValueError, match="K must be at least 1"):
        reference_topk(inst, reference_distill([inst], bb, True)[0], -3, True)
    with pytest.raises(ValueError, match="label_source"):
        distill([inst], bb, connected=True, label_source="guess", device="cpu")
    with pytest.raises(ValueError, match="max_edges_per_forward"):
        distill([inst], bb, connected=True, device="cpu", max_edges_per_forward=0)


def test_topk_accuracy_deletes_edges():
    bb = _black_box("graph")
    instances = _instances("graph")
    full = [torch.ones(i.num_pairs, dtype=torch.bool) for i in instances]
    none = [torch.zeros(i.num_pairs, dtype=torch.bool) for i in instances]
    from gem_core.data.instances import collate
    y = torch.tensor([i.y for i in instances])
    expect_full = float((bb(collate(instances)).argmax(-1) == y).float().mean())
    expect_none = float((bb(collate(instances, none)).argmax(-1) == y).float().mean())
    assert topk_accuracy(instances, full, bb, "cpu", max_edges_per_forward=16) == pytest.approx(expect_full)
    assert topk_accuracy(instances, none, bb, "cpu") == pytest.approx(expect_none)


# ----------------------------------------------------------------------------- top-K policies

def _manual(instances, weights, kept, delta, connected: bool) -> Distillation:
    """A distillation with chosen weights / kept pairs / Δ (no forward pass needed)."""
    counts = torch.tensor([i.num_pairs for i in instances], dtype=torch.long)
    n = len(instances)
    return Distillation(
        pairs=torch.cat([i.pairs.long() for i in instances], dim=1),
        pair_ptr=torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(counts, 0)]),
        num_nodes=torch.tensor([i.num_nodes for i in instances]),
        targets=torch.tensor([-1 if i.target is None else i.target for i in instances]),
        indices=torch.arange(n), labels=torch.zeros(n, dtype=torch.long),
        full_loss=torch.zeros(n, dtype=torch.float64),
        greedy_loss=torch.zeros(n, dtype=torch.float64),
        delta=torch.cat(delta), weights=torch.cat(weights), kept=torch.cat(kept),
        connected=connected, label_source="true")


def _references(weights, kept, delta):
    return [ReferenceResult(d, w, m, 0, 0.0, 0.0) for w, m, d in zip(weights, kept, delta)]


def _random_structures(task: str, seed: int, count: int = 160):
    """Random graphs (up to 16 nodes, some disconnected) with random kept sets and weights.

    Weights and Δ are drawn from a few levels so that ties are common.
    """
    gen = torch.Generator().manual_seed(seed)
    instances, weights, kept, delta = [], [], [], []
    for _ in range(count):
        n = int(torch.randint(1, 17, (1,), generator=gen))
        density = float(torch.rand(1, generator=gen)) * 0.4 + 0.05
        adj = torch.rand(n, n, generator=gen) < density
        target = int(torch.randint(0, n, (1,), generator=gen))
        inst = _instance(adj.nonzero().tolist(), n, task, gen, x=torch.zeros(n, FEATURES),
                         target=target)
        p = inst.num_pairs
        mask = torch.rand(p, generator=gen) < 0.85
        if task == "node" or bool(torch.rand(1, generator=gen) < 0.7):
            mask = keep_component(inst, mask)  # what the greedy phase leaves: one component
        levels = torch.randint(1, 6, (p,), generator=gen).double() * 0.25
        instances.append(inst)
        weights.append(torch.where(mask, levels, torch.zeros_like(levels)))
        kept.append(mask)
        delta.append(torch.randint(-3, 4, (p,), generator=gen).double() * 0.1)
    return instances, weights, kept, delta


def _component_count(inst: Instance, mask: torch.Tensor) -> int:
    """Connected components with at least one pair among the pairs in ``mask``."""
    import networkx as nx

    g = nx.Graph()
    g.add_edges_from(inst.pairs[:, mask].t().tolist())
    return nx.number_connected_components(g)


@pytest.mark.parametrize("task", ["graph", "node"])
@pytest.mark.parametrize("connected", [True, False])
def test_topk_policies_match_reference_on_random_structures(task, connected):
    instances, weights, kept, delta = _random_structures(task, seed=11 if connected else 12,
                                                         count=50)
    dist = _manual(instances, weights, kept, delta, connected)
    _assert_same_topk(dist, instances, connected, ks=(1, 3, 6, 12),
                      ref=_references(weights, kept, delta))


@pytest.mark.parametrize("task", ["graph", "node"])
def test_topk_invariants(task):
    instances, weights, kept, delta = _random_structures(task, seed=21)
    dist = _manual(instances, weights, kept, delta, True)
    for k in (1, 3, 6, 10):
        for policy in STATIC_POLICIES:
            for fill in (False, True):
                masks = dist.topk(k, policy=policy, fill=fill)
                for inst, m, kp in zip(instances, masks, kept):
                    n_kept, n = int(kp.sum()), int(m.sum())
                    assert n <= k, (policy, fill, k)
                    if not fill:
                        assert bool((m <= kp).all())  # top-K only removes pairs
                        if n_kept <= k:
                            assert torch.equal(m, kp)  # at most K pairs: all kept
                    if n_kept > k or (fill and n_kept < k):
                        # something was removed (the rule was applied) or added next to it
                        if n_kept > k or _component_count(inst, kp) <= 1:
                            assert _component_count(inst, m) <= 1, (policy, fill, k)
                        if task == "node" and n:
                            touching = (inst.pairs[:, m] == inst.target).any()
                            assert bool(touching), "the explanation must hold the target"
                    if (n_kept > k and policy != "paper" and _component_count(inst, kp) == 1
                            and torch.equal(keep_component(inst, kp), kp)):
                        assert n == k, (policy, k)  # a connected explanation uses its budget


def test_nosplit_and_exact_use_the_budget_where_paper_does_not():
    gen = torch.Generator().manual_seed(0)
    # path 0-1-2-3-4-5 (pairs in order); the middle pair has the lowest weight
    path = _instance([(i, i + 1) for i in range(5)], 6, "graph", gen)
    w = [torch.tensor([0.5, 0.6, 0.1, 0.7, 0.4], dtype=torch.float64)]
    kept = [torch.ones(5, dtype=torch.bool)]
    delta = [torch.zeros(5, dtype=torch.float64)]
    dist = _manual([path], w, kept, delta, True)
    # paper: removing (2, 3) splits the path in two halves of 3 nodes; the lowest ids win
    assert dist.topk(4, policy="paper")[0].tolist() == [True, True, False, False, False]
    # nosplit: remove the lowest-weight pendant pair (4, 5)
    assert dist.topk(4, policy="nosplit")[0].tolist() == [True, True, True, True, False]
    # exact: (2, 3) would leave 2 < 4 pairs, so it is kept; (4, 5) goes next
    assert dist.topk(4, policy="exact")[0].tolist() == [True, True, True, True, False]
    # K = 2: exact accepts the split (exactly 2 left); nosplit peels pendant pairs (4, 5), (0, 1)
    # and (1, 2), never the bridge (2, 3) in the middle
    assert dist.topk(2, policy="exact")[0].tolist() == [True, True, False, False, False]
    assert dist.topk(2, policy="nosplit")[0].tolist() == [False, False, True, True, False]
    assert DEFAULT_TOPK_POLICY == "nosplit"
    assert torch.equal(dist.topk(4)[0], dist.topk(4, policy="nosplit")[0])


def test_fill_up():
    gen = torch.Generator().manual_seed(0)
    # node task, target 0: 0-1, 1-2, 2-3, 0-4, 5-6 (5-6 never touches the explanation)
    inst = _instance([(0, 1), (1, 2), (2, 3), (0, 4), (5, 6)], 7, "node", gen, target=0)
    pairs = inst.pairs.t().tolist()
    order = {tuple(p): j for j, p in enumerate(pairs)}
    kept = torch.zeros(5, dtype=torch.bool)
    delta = torch.zeros(5, dtype=torch.float64)
    delta[order[(5, 6)]] = 9.0   # highest Δ but disconnected from the target
    delta[order[(2, 3)]] = 5.0   # reachable only after (1, 2)
    delta[order[(1, 2)]] = 1.0
    delta[order[(0, 1)]] = 0.5
    delta[order[(0, 4)]] = 0.7
    w = torch.zeros(5, dtype=torch.float64)
    dist = _manual([inst], [w], [kept], [delta], True)
    picked = lambda m: {tuple(pairs[j]) for j in range(5) if m[j]}  # noqa: E731
    assert picked(dist.topk(1, fill=True)[0]) == {(0, 4)}
    assert picked(dist.topk(3, fill=True)[0]) == {(0, 4), (0, 1), (1, 2)}
    assert picked(dist.topk(4, fill=True)[0]) == {(0, 4), (0, 1), (1, 2), (2, 3)}
    assert picked(dist.topk(9, fill=True)[0]) == {(0, 4), (0, 1), (1, 2), (2, 3)}  # (5, 6) never
    assert int(dist.topk(3)[0].sum()) == 0  # no fill-up: the empty greedy result stays
    # without the connectivity rule: simply the highest Δ
    free = _manual([inst], [w], [kept], [delta], False)
    assert picked(free.topk(2, fill=True)[0]) == {(5, 6), (2, 3)}
    # graph task with an empty explanation: start from the highest-Δ pair
    g = _instance([(0, 1), (1, 2), (2, 3), (0, 4), (5, 6)], 7, "graph", gen)
    gd = _manual([g], [w], [kept], [delta], True)
    assert picked(gd.topk(1, fill=True)[0]) == {(5, 6)}
    assert picked(gd.topk(3, fill=True)[0]) == {(5, 6)}  # nothing else touches (5, 6)


def test_topk_policy_validation_and_edge_cases():
    bb = _black_box("graph")
    gen = torch.Generator().manual_seed(0)
    lonely, small = _instance([], 3, "graph", gen), _instance([(0, 1), (1, 2)], 3, "graph", gen)
    dist = distill([lonely, small], bb, connected=True, device="cpu")
    for policy in STATIC_POLICIES + ("refine",):  # the greedy-based rules
        for fill in (False, True):
            masks = dist.topk(5, policy=policy, fill=fill, instances=[lonely, small], black_box=bb)
            assert masks[0].numel() == 0  # zero pairs
            assert int(masks[1].sum()) == (2 if fill else int(dist.kept_masks()[1].sum()))
    with pytest.raises(ValueError, match="policy"):
        dist.topk(3, policy="greedy")
    with pytest.raises(ValueError, match="policy"):
        reference_topk(small, reference_distill([small], bb, True)[0], 3, True, policy="x")
    assert dist.instance(1, k=1, policy="paper").topk_mask.numel() == 2


# ----------------------------------------------------------------------------- top-K "refine"

def _assert_refine_matches(dist: Distillation, instances, bb, connected: bool, ks):
    """Batched "refine" (one grid descent, tiny forward chunks) == the reference, per K."""
    grid = dist.topk_grid(ks, "refine", instances=instances, black_box=bb,
                          max_edges_per_forward=64)
    ref = _as_reference(dist)
    for i, (inst, r) in enumerate(zip(instances, ref)):
        theirs = reference_refine(inst, r, ks, connected, bb)
        for k in ks:
            assert torch.equal(grid[k][i], theirs[k]), (k, i)
    return grid


@pytest.mark.parametrize("task", ["graph", "node"])
@pytest.mark.parametrize("connected", [True, False])
def test_refine_matches_reference(task, connected):
    bb = _black_box(task, seed=4)
    gen = torch.Generator().manual_seed(17)
    instances = _instances(task, seed=2) + [_random_instance(task, gen) for _ in range(10)]
    dist = distill(instances, bb, connected=connected, device="cpu")
    ks = (1, 2, 4, 7, 40)
    grid = _assert_refine_matches(dist, instances, bb, connected, ks)
    for k in (2, 7):  # a single K gives the same as the grid (the descent does not depend on K)
        assert all(torch.equal(a, b) for a, b in zip(
            dist.topk(k, "refine", instances=instances, black_box=bb), grid[k]))
    # and the reference's single-K entry point agrees too
    ref = _as_reference(dist)
    single = reference_topk_all(instances, ref, 4, connected, policy="refine", black_box=bb)
    assert all(torch.equal(a, b) for a, b in zip(single, grid[4]))
    for k in ks:
        for inst, kept, m in zip(instances, dist.kept_masks(), grid[k]):
            n_kept, n = int(kept.sum()), int(m.sum())
            assert n <= k
            if n_kept > k:
                assert bool((m <= kept).all())  # the descent only removes pairs
                if connected and _component_count(inst, kept) == 1:
                    assert n == k and _component_count(inst, m) == 1
            else:
                assert bool((m >= kept).all())  # the grow-back only adds pairs


def test_refine_grow_back_and_validation():
    bb = _black_box("graph", seed=6)
    gen = torch.Generator().manual_seed(3)
    instances = [_instance(_cycle(7), 7, "graph", gen), _instance([(0, 1), (1, 2), (2, 3)], 5,
                                                                  "graph", gen)]
    # a chosen distillation: nothing kept, so "refine" can only grow (never past a loss rise)
    n_pairs = [i.num_pairs for i in instances]
    zeros = [torch.zeros(p, dtype=torch.float64) for p in n_pairs]
    empty = [torch.zeros(p, dtype=torch.bool) for p in n_pairs]
    dist = _manual(instances, zeros, empty, zeros, True)
    dist.labels = torch.tensor([i.y for i in instances])
    from gem_core.data.instances import collate
    dist.greedy_loss = torch.nn.functional.cross_entropy(
        bb(collate(instances, empty)).double(), dist.labels, reduction="none")
    grid = _assert_refine_matches(dist, instances, bb, True, (2, 5))
    for inst, m2, m5 in zip(instances, grid[2], grid[5]):
        assert bool((m2 <= m5).all()) and _component_count(inst, m5) <= 1  # grown connected
    with pytest.raises(ValueError, match="refine"):
        dist.topk(3, "refine")
    with pytest.raises(ValueError, match="match"):
        dist.topk(3, "refine", instances=instances[::-1], black_box=bb)
    with pytest.raises(ValueError, match="refine"):
        reference_topk(instances[0], _as_reference(dist)[0], 3, True, policy="refine")


def test_topk_compaction_many_instances():
    """Hundreds of instances over budget (the walk compacts itself) still match the oracle."""
    instances, weights, kept, delta = _random_structures("graph", seed=31, count=200)
    dist = _manual(instances, weights, kept, delta, True)
    over = sum(int(m.sum()) > 2 for m in kept)
    assert over > 2 * 64  # enough instances over budget for the walk to compact itself
    _assert_same_topk(dist, instances, True, ks=(2,), ref=_references(weights, kept, delta),
                      fills=(False,))


# ----------------------------------------------------------------------------- real data, cache, CLI

@pytest.fixture(scope="module")
def ba_shapes():
    from gem_core.data.datasets import load_dataset
    from gem_core.models.targets import get_target

    ds = load_dataset("ba_shapes")
    return ds, get_target(ds, device="cpu")


def test_ba_shapes_batched_matches_reference(ba_shapes):
    from gem_core.data.instances import split_instances

    ds, target = ba_shapes
    bb = target.black_box("cpu")
    instances = sorted(split_instances(ds, "test"), key=lambda i: i.num_pairs)[:6]
    dist = distill(instances, bb, connected=ds.spec.connected, device="cpu")
    ref = reference_distill(instances, bb, ds.spec.connected)
    for i, r in enumerate(ref):
        assert torch.allclose(dist.deltas()[i], r.delta, atol=1e-5)
        assert torch.equal(dist.kept_masks()[i], r.kept)
    _assert_same_topk(dist, instances, ds.spec.connected, ks=ds.spec.k_grid)


@pytest.fixture
def private_cache(ba_shapes, tmp_path, monkeypatch):
    """A private cache folder holding a copy of the target (keeps the shared cache clean)."""
    import shutil

    from gem_core.models.targets import cached_target_path

    _, target = ba_shapes
    monkeypatch.setenv("GEM_CACHE_DIR", str(tmp_path / "cache"))
    dst = cached_target_path("ba_shapes")
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(target.path, dst)
    return tmp_path / "cache"


@pytest.fixture
def few_instances(monkeypatch):
    """``split_instances`` cut to the 5 smallest instances of a split (fast CLI runs)."""
    import gem_core.data.instances as instances_mod

    real = instances_mod.split_instances
    monkeypatch.setattr(instances_mod, "split_instances",
                        lambda d, s: sorted(real(d, s), key=lambda i: i.num_pairs)[:5])


def test_distill_dataset_cache_round_trip(ba_shapes, private_cache, few_instances):
    ds, target = ba_shapes
    assert load_distillation(ds, target, "val") is None
    first = distill_dataset(ds, target, split="val", device="cpu")
    path = distillation_path(ds.name, "val", target.digest, "true", ds.spec.connected)
    assert path.exists() and str(path).startswith(str(private_cache))
    assert load_torch(path, kind="gem-distillation")["dataset"] == "ba_shapes"
    again = load_distillation(ds, target, "val")
    assert again is not None and torch.equal(again.weights, first.weights)
    assert torch.equal(again.topk(5)[0], first.topk(5)[0])
    assert load_distillation(ds, target, "val", label_source="predicted") is None
    assert load_distillation(ds, target, "val", connected=not ds.spec.connected) is None
    path.write_bytes(b"not a checkpoint")  # corrupted: recomputed, never a crash
    assert load_distillation(ds, target, "val") is None
    assert torch.equal(distill_dataset(ds, target, split="val", device="cpu").kept, first.kept)


def test_cli_distill_json_and_bad_k(private_cache, few_instances, tmp_path, capsys):
    from gem_core.cli import main

    out = tmp_path / "d.json"
    assert main(["distill", "--dataset", "ba_shapes", "--k", "5", "6", "--split", "val",
                 "--no-progress", "--threads", "1", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    dist = result["distillation"]
    assert set(dist) == {"accuracy_at_k", "mean_pairs_at_k", "topk_seconds", "ms_per_instance",
                         "topk_ms_per_instance", "instances"}
    assert result["policy"] == ACCURACY_TOPK_POLICY and result["fill"] is False
    assert all(0 <= dist["mean_pairs_at_k"][k] <= int(k) for k in ("5", "6"))
    assert set(dist["accuracy_at_k"]) == {"5", "6"} and dist["instances"] == 5
    assert all(0.0 <= v <= 1.0 for v in dist["accuracy_at_k"].values())
    assert dist["ms_per_instance"] > 0 and result["cached"] is False
    assert "accuracy at K=  5" in capsys.readouterr().out
    assert main(["distill", "--dataset", "ba_shapes", "--k", "0", "--no-progress"]) == 2
    assert "K must be at least 1" in capsys.readouterr().err


def test_cli_distill_policy_and_fill(private_cache, few_instances, tmp_path, capsys):
    from gem_core.cli import main
    from gem_core.cli import distill as distill_command

    assert distill_command.POLICIES == TOPK_POLICIES
    assert distill_command.DEFAULT_POLICY == ACCURACY_TOPK_POLICY
    out = tmp_path / "p.json"
    assert main(["distill", "--dataset", "ba_shapes", "--k", "2", "--split", "val", "--policy",
                 "paper", "--fill", "--no-progress", "--threads", "1", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["policy"] == "paper" and result["fill"] is True
    assert "top-K policy paper + fill-up" in capsys.readouterr().out
    out = tmp_path / "r.json"
    assert main(["distill", "--dataset", "ba_shapes", "--k", "2", "6", "--split", "val",
                 "--policy", "refine", "--no-progress", "--threads", "1", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["policy"] == "refine" and result["distillation"]["topk_ms_per_instance"] > 0
    assert all(0 <= v <= int(k) for k, v in result["distillation"]["mean_pairs_at_k"].items())
    with pytest.raises(SystemExit):
        main(["distill", "--dataset", "ba_shapes", "--policy", "greedy", "--no-progress"])


def test_cli_bench_distill(private_cache, few_instances, tmp_path, capsys):
    from gem_core.cli import main

    out = tmp_path / "b.json"
    assert main(["bench", "distill", "--dataset", "ba_shapes", "--split", "val", "--limit", "4",
                 "--reference-limit", "2", "--no-progress", "--threads", "1",
                 "--json", str(out)]) == 0
    bench = json.loads(out.read_text())["bench"]["distill"]
    assert bench["batched"]["instances"] == 4 and bench["reference"]["instances"] == 2
    assert bench["reference"]["agree"] == 2 and bench["speedup"] > 0
    assert "speed-up" in capsys.readouterr().out


@pytest.mark.parametrize("task", ["graph", "node"])
@pytest.mark.parametrize("connected", [True, False])
def test_distilled_explainer_scores_rank_the_distilled_topk(task, connected):
    from gem_core.data.ranking import topk_mask
    from gem_core.explainers.distilled import survival_scores

    instances, weights, kept, delta = _random_structures(task, seed=31, count=60)
    dist = _manual(instances, weights, kept, delta, connected)
    scores = survival_scores(dist)
    most = max(int(m.sum()) for m in kept)
    masks = [dist.topk(k) for k in range(1, most + 1)]
    checked = 0
    for i, (s, m) in enumerate(zip(scores, kept)):
        assert s.shape == m.shape and bool(((s >= 0) & (s < 1)).all())
        if bool(m.any()) and bool((~m).any()):  # every kept pair above every other pair
            assert float(s[m].min()) > float(s[~m].max())
        sets = [mk[i] for mk in masks[:int(m.sum())]]
        nested = all(bool((a <= b).all()) for a, b in zip(sets, sets[1:]))
        if nested:  # pruning one pair at a time: the K best scores are the distilled top-K
            for k, expected in enumerate(sets, start=1):
                assert torch.equal(topk_mask(s, k), expected), (i, k)
            checked += 1
    assert checked >= len(instances) // 2


# ----------------------------------------------------------------------------- bond-aware targets

class _BondAwareGCN(torch.nn.Module):
    """A toy target that reads edge features (bond types): messages scaled by a bond weight."""

    def __init__(self, task: str):
        super().__init__()
        torch.manual_seed(11)
        self.task = task
        self.bond = torch.nn.Linear(3, 1)
        self.lin1 = torch.nn.Linear(FEATURES, 8)
        self.lin2 = torch.nn.Linear(8, CLASSES)

    def forward(self, x, edge_index, batch=None, num_graphs=None, edge_attr=None):
        w = torch.sigmoid(self.bond(edge_attr)).view(-1, 1)
        h = self.lin1(x)
        agg = torch.zeros_like(h).index_add_(0, edge_index[1], w * h[edge_index[0]])
        h = torch.relu(h + agg)
        if self.task == "node":
            return self.lin2(h)
        if batch is None:
            batch = torch.zeros(x.size(0), dtype=torch.long)
        size = num_graphs if num_graphs is not None else int(batch.max()) + 1
        pooled = torch.zeros(size, h.size(1)).index_reduce_(0, batch, h, "amax",
                                                             include_self=False)
        return self.lin2(pooled)


def _with_bonds(instances, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    out = []
    for inst in instances:
        bonds = torch.randint(0, 3, (inst.num_pairs,), generator=gen)
        out.append(Instance(x=inst.x, pairs=inst.pairs, y=inst.y, target=inst.target,
                            edge_attr=torch.nn.functional.one_hot(bonds, 3).float()))
    return out


@pytest.mark.parametrize("task", ["graph", "node"])
def test_bond_aware_target_gets_the_bonds_of_every_batch(task):
    """A target reading edge features: batched Δ, greedy and refine == the one-graph reference
    (which batches with collate), so every batch builder carries the bonds of the kept pairs."""
    bb = GNNBlackBox(_BondAwareGCN(task), task, CLASSES, "cpu")
    assert bb.uses_edge_attr
    instances = _with_bonds(_instances(task, seed=3))
    dist = distill(instances, bb, connected=True, device="cpu", max_edges_per_forward=64)
    _assert_same(dist, instances, bb, True, "true")
    _assert_refine_matches(dist, instances, bb, True, (1, 3, 6))
    # the bonds matter: other bond types give other Granger effects
    other = distill(_with_bonds(instances, seed=1), bb, connected=True, device="cpu")
    assert any(not torch.allclose(a, b) for a, b in zip(dist.deltas(), other.deltas()))
    masks = dist.topk(3)
    acc = topk_accuracy(instances, masks, bb, device="cpu", max_edges_per_forward=64)
    expected = sum(int(bb(_collate1(inst.subgraph(m))).argmax(-1)[0]) == inst.y
                   for inst, m in zip(instances, masks)) / len(instances)
    assert acc == pytest.approx(expected)
