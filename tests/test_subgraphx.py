"""SubgraphX: its Shapley estimate, its tree search, its seeds and its time budget.

A hand-made black box (the class-1 logit is a weighted count of chosen edges, so the game is
non-additive through the softmax) on small graphs keeps every test at a fraction of a second.
"""
from __future__ import annotations

import itertools
import json
import math
import time

import pytest
import torch

from gem_core.data.instances import Instance, collate, to_pairs
from gem_core.evaluation.metrics import evaluate_scores
from gem_core.evaluation.reproduce import subsample_indices
from gem_core.explainers.shapley import (NodeSetGame, adjacency, connected_components,
                                         exact_shapley, neighbourhood, repeated_batch,
                                         shapley_values)
from gem_core.explainers.subgraphx import SubgraphXExplainer

torch.set_num_threads(1)


class EdgeWeightBox:
    """Class-1 logit = Σ weight(u, v) over the kept pairs of each instance (both directions
    counted once; nodes known by their feature, their id), plus a tenth of the target's id on
    node tasks; class-0 logit = 0."""

    num_classes = 2

    def __init__(self, n: int, task: str = "graph", seed: int = 0, delay_s: float = 0.0):
        gen = torch.Generator().manual_seed(seed)
        self.weights = torch.randn(n, n, generator=gen)
        self.task = task
        self.delay_s = delay_s
        self.calls = 0

    def __call__(self, batch) -> torch.Tensor:
        self.calls += 1
        if self.delay_s:
            time.sleep(self.delay_s)
        src, dst = batch.edge_index
        graph = batch.batch[src]
        ids = batch.x[:, 0].long()  # a node's feature is its id: relabelling changes nothing
        u, v = ids[src], ids[dst]
        w = self.weights[u, v] * (u < v)
        logit = torch.zeros(batch.num_instances).index_add_(0, graph, w)
        if batch.target_index is not None:
            logit = logit + 0.1 * batch.x[batch.target_index, 0]
        return torch.stack([torch.zeros_like(logit), logit], dim=1)


def graph(n: int, edges, target=None) -> Instance:
    pairs, _ = to_pairs(torch.tensor(edges).t(), n)
    return Instance(x=torch.arange(n, dtype=torch.float).view(-1, 1), pairs=pairs, y=0,
                    target=target, dataset="toy", index=n)


# a 6-node graph: a path 0-1-2-3-4-5 with chords 1-4 and 0-2
SIX = graph(6, [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (1, 4), (0, 2)])


def test_exact_shapley_matches_the_definition_over_every_order():
    """The exhaustive weighted sum equals the mean marginal contribution over all (m+1)! orders."""
    game = NodeSetGame(SIX, EdgeWeightBox(6), cls=1)
    subset, players = {2, 3}, [0, 1, 4, 5]
    by_orders = []
    for order in itertools.permutations(players + ["S"]):
        before = set(order[:order.index("S")])
        masks = torch.zeros(2, 6, dtype=torch.bool)
        masks[0, list(before | subset)] = True
        if before:
            masks[1, list(before)] = True
        v = game.values(masks)
        by_orders.append(float(v[0] - v[1]))
    assert len(by_orders) == math.factorial(5)
    assert exact_shapley(game, subset, players) == pytest.approx(sum(by_orders) / len(by_orders),
                                                                  abs=1e-12)


@pytest.mark.parametrize("subset", [{2, 3}, {1}, {0, 1, 2}])
def test_sampled_shapley_is_within_sampling_tolerance_of_the_exhaustive_value(subset):
    """Each sampled marginal contribution lies in [-1, 1] (a difference of probabilities), so
    Hoeffding's bound gives P(|mean - value| >= t) <= 2 exp(-n t^2 / 2): with n = 2000 samples,
    t = 0.087 fails with probability below 1e-3 (and the seed fixes the draw)."""
    box = EdgeWeightBox(6, seed=1)
    game = NodeSetGame(SIX, box, cls=1)
    adj = adjacency(SIX)
    hops = 1
    players = sorted(neighbourhood(adj, subset, hops) - subset)
    exact = exact_shapley(game, subset, players)
    n = 2000
    tolerance = math.sqrt(2 * math.log(2 / 1e-3) / n)
    gen = torch.Generator().manual_seed(0)
    sampled, = shapley_values(game, [subset], adj, hops, n, gen)
    assert abs(sampled - exact) < tolerance


def test_repeated_batch_is_what_collate_builds():
    inst = Instance(x=SIX.x, pairs=SIX.pairs, y=0, target=2,
                    edge_attr=torch.eye(3)[torch.arange(SIX.num_pairs) % 3])
    masks = torch.rand(5, inst.num_pairs, generator=torch.Generator().manual_seed(0)) < 0.5
    ours = repeated_batch(inst, masks, edge_attr=True)
    theirs = collate([inst] * 5, list(masks))
    for name in ("x", "edge_index", "batch", "target_index", "edge_attr"):
        assert torch.equal(getattr(ours, name), getattr(theirs, name)), name
    assert ours.num_instances == theirs.num_instances == 5


def test_node_task_values_ignore_nodes_no_coalition_holds():
    """Cutting a node task's copies to the nodes some set holds changes no value."""
    inst = graph(6, [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (1, 4), (0, 2)], target=2)
    box = EdgeWeightBox(6, task="node")
    game = NodeSetGame(inst, box, cls=1)
    masks = torch.zeros(3, 6, dtype=torch.bool)
    masks[0, [1, 2]] = True
    masks[1, [2, 3]] = True
    masks[2, [2]] = True  # nodes 0, 4, 5 in no set: dropped before the forward pass
    u, v = inst.pairs
    full = torch.softmax(box(collate([inst] * 3, list(masks[:, u] & masks[:, v]))), -1)[:, 1]
    assert torch.allclose(game.values(masks), full.double(), atol=1e-6)


def ring_with_tail(n: int = 12) -> Instance:
    edges = [(i, (i + 1) % 8) for i in range(8)] + [(i, i + 1) for i in range(7, n - 1)] + [(0, 4)]
    return graph(n, edges)


@pytest.mark.parametrize("target", [None, 9])
@pytest.mark.parametrize("max_nodes", [3, 5])
def test_search_returns_a_connected_subgraph_within_the_node_budget(target, max_nodes):
    inst = ring_with_tail()
    inst = Instance(x=inst.x, pairs=inst.pairs, y=0, target=target, dataset="toy", index=1)
    box = EdgeWeightBox(inst.num_nodes, task="graph" if target is None else "node", seed=2)
    exp = SubgraphXExplainer(box, num_hops=2, max_nodes=max_nodes, rollout=6, sample_num=20,
                             time_budget_s=None)
    scores = exp.explain([inst])[0]
    result = exp.last_results_[0]
    best = set(result.best)
    assert 1 <= len(best) <= max_nodes
    assert len(connected_components(adjacency(inst), best)) == 1
    if target is not None:
        assert target in best
    assert result.rollouts == 6 and not result.timed_out
    # every state the tree holds is connected (and holds the target on node tasks)
    for nodes in result.states:
        assert len(connected_components(adjacency(inst), set(nodes))) == 1
        assert target is None or target in nodes
    # the chosen subgraph's pairs rank above every other pair
    u, v = inst.pairs
    inside = torch.tensor([a in best and b in best for a, b in zip(u.tolist(), v.tolist())])
    if bool(inside.any()):
        assert float(scores[inside].min()) > float(scores[~inside].max())
    assert bool((scores >= 0).all()) and bool(torch.isfinite(scores).all())


def test_pair_scores_follow_the_best_reward_of_a_state_holding_the_pair():
    inst = ring_with_tail()
    exp = SubgraphXExplainer(EdgeWeightBox(12, seed=3), num_hops=2, max_nodes=4, rollout=4,
                             sample_num=10, time_budget_s=None)
    scores = exp.explain([inst])[0]
    result = exp.last_results_[0]
    for j, (a, b) in enumerate(inst.pairs.t().tolist()):
        held = [s.reward for nodes, s in result.states.items()
                if s.reward is not None and a in nodes and b in nodes]
        expected = 0.5 * (1 + max(held)) if held else 0.0
        expected += 2.0 if a in result.best and b in result.best else 0.0
        assert float(scores[j]) == pytest.approx(expected, abs=1e-6)


def test_same_seed_same_scores_another_seed_other_scores():
    inst = ring_with_tail()
    box = EdgeWeightBox(12, seed=4)

    def run(seed: int) -> torch.Tensor:
        return SubgraphXExplainer(box, num_hops=2, max_nodes=4, rollout=5, sample_num=15,
                                  time_budget_s=None, seed=seed).explain([inst])[0]

    assert torch.equal(run(0), run(0))
    assert not torch.equal(run(0), run(1))
    # the scores depend on the instance, not on its position in the batch
    other = graph(7, [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6)])
    exp = SubgraphXExplainer(box, num_hops=2, max_nodes=4, rollout=5, sample_num=15,
                             time_budget_s=None)
    assert torch.equal(exp.explain([other, inst])[1], run(0))


def test_time_budget_stops_the_search_and_returns_the_best_so_far():
    """A black box of 50 ms per call and a 0.2 s budget: the search stops after a few
    expansions (at most one forward pass past the deadline) with a valid explanation."""
    inst = ring_with_tail(16)
    box = EdgeWeightBox(16, seed=5, delay_s=0.05)
    exp = SubgraphXExplainer(box, num_hops=2, max_nodes=3, rollout=20, sample_num=10,
                             time_budget_s=0.2)
    start = time.perf_counter()
    scores = exp.explain([inst])[0]
    elapsed = time.perf_counter() - start
    result = exp.last_results_[0]
    assert result.timed_out and result.rollouts < 20
    summary = exp.search_summary_
    assert summary["instances"] == 1 and summary["timed_out_share"] == 1.0
    assert summary["mean_rollouts"] == result.rollouts
    assert elapsed < 0.2 + 0.05 * 3 + 0.3  # the prediction, one expansion past it, slack
    assert scores.shape == (inst.num_pairs,) and len(result.best) >= 1


def test_bad_settings_are_refused_with_a_clear_message():
    with pytest.raises(ValueError, match="max_nodes must be at least 1"):
        SubgraphXExplainer(EdgeWeightBox(3), max_nodes=0)


def test_reproduce_subsample_is_seeded_sorted_and_bounded():
    a, b = subsample_indices(250, 100), subsample_indices(250, 100)
    assert a == b and len(a) == 100 and a == sorted(a) and a != list(range(100))
    assert subsample_indices(250, None) == list(range(250))
    assert subsample_indices(35, 100) == list(range(35))


def test_reproduce_measures_a_row_with_max_test_instances_on_its_seeded_subsample(monkeypatch):
    """A row's ``max_test_instances`` (not its name) makes reproduce measure it on the subsample,
    while the other methods keep every test instance."""
    import dataclasses

    from gem_core.evaluation import reproduce
    from gem_core.service.session import Workbench

    real = reproduce.method_spec

    def small(method):
        row = real(method)
        return dataclasses.replace(row, max_test_instances=3) if row.name == "random" else row

    monkeypatch.setattr(reproduce, "method_spec", small)
    out = reproduce.run_reproduce("tree_cycles", methods=["random", "gnnexplainer"], limit=6,
                                  write_assets=False, bench=Workbench("tree_cycles", "cpu"))
    assert out["test_instances"] == 6
    assert out["methods"]["random"]["test_instances"] == 3
    assert len(out["methods"]["random"]["log_odds"]) == 3
    assert "test_instances" not in out["methods"]["gnnexplainer"]
    assert len(out["methods"]["gnnexplainer"]["log_odds"]) == 6
    table = reproduce.format_tables(out)
    assert "Random: on a seeded subsample of 3" in table
    # every fully measured method is also scored on the slow method's own instances
    same = out["same_subsample"]["random"]
    picked = reproduce.subsample_indices(6, 3)
    assert same["test_instances"] == 3 and same["indices"] == picked
    assert set(same["methods"]) == {"gnnexplainer", "random"}
    own = out["methods"]["random"]
    assert same["methods"]["random"]["agreement_at_k"] == own["agreement_at_k"]
    assert same["methods"]["random"]["necessity_at_k"] == own["necessity_at_k"]
    wb = Workbench("tree_cycles", "cpu")
    insts = [wb.instances("test")[j] for j in picked]
    alone = evaluate_scores(wb.black_box, insts, wb.explain("gnnexplainer", insts).scores,
                            wb.spec.k_grid, fidelity=False).to_dict()
    assert same["methods"]["gnnexplainer"]["agreement_at_k"] == alone["agreement_at_k"]
    assert same["methods"]["gnnexplainer"]["accuracy_at_k"] == alone["accuracy_at_k"]
    assert set(same["methods"]["gnnexplainer"]["necessity_at_k"]) == {"keep_nodes", "drop_isolated"}
    assert "every method on Random's seeded subsample of 3 test instances" in table
    # the typed reader holds the subsample block as written
    from gem_core.evaluation.result_file import load_result

    typed = load_result(json.loads(json.dumps(out)))
    assert typed.methods["random"].test_instances == 3
    assert typed.same_subsample["random"].indices == tuple(picked)
    assert set(typed.same_subsample["random"].methods) == {"gnnexplainer", "random"}
