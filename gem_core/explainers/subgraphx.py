"""SubgraphX (Yuan, Yu, Wang, Liu & Ji, ICML 2021): a Monte-Carlo tree search over connected
subgraphs, each scored by its Shapley value for the target's predicted class.

Written from the paper. The search tree's states are node sets of the instance: the root is the
whole instance (node tasks: the target's L-hop computation graph, its connected part holding the
target; graph tasks: the largest connected component). An action prunes one node and keeps one
connected component (the target's on node tasks, the largest otherwise); children are tried
``high2low`` (the highest-degree nodes of the state first), at most ``expand_atoms`` distinct
children per expansion. A state with at most ``max_nodes`` nodes is a leaf. Each of ``rollout``
rollouts walks from the root to a leaf, expanding states on its way, choosing the child with the
largest ``Q + c_puct · R · sqrt(1 + ΣN) / (1 + N)`` (``R`` the child's Shapley value, ``Q`` its
mean leaf reward, ``N`` its visits; the paper's ``sqrt(ΣN)`` plus one so the first visit already
follows the Shapley values instead of the first child), and adds the leaf's Shapley value to every
state on the walk. Shapley values: :mod:`gem_core.explainers.shapley` (``sample_num`` coalitions
among the nodes within ``num_hops`` hops, edges outside a node set deleted, one batch of forward
passes per expansion).

The explanation is the leaf with the largest Shapley value found (ties: fewer nodes; a leaf of
one node, which holds no pair, only when no larger leaf was found). For the
engine's one-score-per-pair interface, a pair scores ``2 + ½(1 + r)`` when both its ends are in
that subgraph and ``½(1 + r)`` otherwise, ``r`` being the largest Shapley value of any evaluated
state holding both its ends (0 for a pair in none). So a top-K holds the chosen subgraph's pairs
first (all of them when K is at least their number), then the pairs of the best other explored
subgraphs. Model-agnostic: only the black box's outputs are read. Seeded per instance; a time
budget per instance stops the search early (then the best so far is returned, and a rerun may
search further on a faster machine).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Optional

import torch
from torch import Tensor

from gem_core.data.instances import Instance
from gem_core.explainers.base import Explainer, instance_seed
from gem_core.explainers.shapley import NodeSetGame, adjacency, kept_component, shapley_values
from gem_core.models.predict import predict_proba
from gem_core.runtime.progress import ProgressFn, report


@dataclass
class State:
    """One search-tree state: a connected node set and its statistics."""

    nodes: frozenset
    reward: Optional[float] = None  # the Shapley value (None: not evaluated yet)
    visits: int = 0
    total: float = 0.0  # sum of the leaf rewards of the rollouts through it
    children: Optional[list["State"]] = field(default=None, repr=False)

    @property
    def value(self) -> float:
        """The Shapley value of an evaluated state (``reward``, known not to be None)."""
        assert self.reward is not None, "the state has not been evaluated"
        return self.reward


@dataclass
class SearchResult:
    """What one search found: the chosen node set and every evaluated state."""

    best: frozenset
    states: dict
    rollouts: int
    timed_out: bool


class SubgraphSearch:
    """The MCTS of one instance (see the module docstring).

    Args:
        instance: the explained instance.
        black_box: the target as a black box.
        cls: the explained class.
        hops: L, the target's message-passing layers (Shapley players within L hops).
        max_nodes / rollout / c_puct / expand_atoms / sample_num: the search's settings.
        generator: the Shapley sampling's random generator.
        deadline: ``time.perf_counter()`` after which the search stops (None: no limit).
    """

    def __init__(
        self,
        instance: Instance,
        black_box,
        cls: int,
        hops: int,
        max_nodes: int,
        rollout: int,
        c_puct: float,
        expand_atoms: int,
        sample_num: int,
        generator: torch.Generator,
        deadline: Optional[float] = None,
    ):
        self.instance = instance
        self.adj = adjacency(instance)
        self.game = NodeSetGame(instance, black_box, cls)
        self.target = instance.target
        self.hops, self.max_nodes = int(hops), int(max_nodes)
        self.rollout, self.c_puct = int(rollout), float(c_puct)
        self.expand_atoms, self.sample_num = int(expand_atoms), int(sample_num)
        self.generator = generator
        self.deadline = deadline
        self.states: dict[frozenset, State] = {}

    def _out_of_time(self) -> bool:
        return self.deadline is not None and time.perf_counter() >= self.deadline

    def root_nodes(self) -> frozenset:
        """The target's connected part (node tasks) or the largest connected component."""
        every = set(range(self.instance.num_nodes))
        return frozenset(kept_component(self.adj, every, self.target))

    def _state(self, nodes: frozenset) -> State:
        if nodes not in self.states:
            self.states[nodes] = State(nodes)
        return self.states[nodes]

    def _evaluate(self, states: list[State]) -> None:
        todo = [s for s in states if s.reward is None]
        for s, r in zip(
            todo,
            shapley_values(
                self.game,
                [s.nodes for s in todo],
                self.adj,
                self.hops,
                self.sample_num,
                self.generator,
            ),
        ):
            s.reward = float(r)

    def _expand(self, state: State) -> None:
        """At most ``expand_atoms`` children, pruning the highest-degree nodes first."""
        nodes = set(state.nodes)
        degree = {u: len(self.adj[u] & nodes) for u in nodes}
        order = sorted((u for u in nodes if u != self.target), key=lambda u: (-degree[u], u))
        children: list[State] = []
        seen: set[frozenset] = set()
        for u in order:
            kept = frozenset(kept_component(self.adj, nodes - {u}, self.target))
            if kept and kept not in seen:
                seen.add(kept)
                children.append(self._state(kept))
                if len(children) >= self.expand_atoms:
                    break
        self._evaluate(children)
        state.children = children

    def _select(self, state: State) -> State:
        children = state.children
        assert children, "only an expanded state with children is selected from"
        total = sum(c.visits for c in children)
        explore = self.c_puct * math.sqrt(1 + total)

        def score(c: State) -> float:
            q = c.total / c.visits if c.visits else 0.0
            return q + explore * float(c.value) / (1 + c.visits)  # children are evaluated

        return max(children, key=score)  # ties: the first (highest-degree prune)

    def _is_leaf(self, state: State) -> bool:
        return len(state.nodes) <= self.max_nodes

    def run(self) -> SearchResult:
        """Run the rollouts (until the deadline) and return the best leaf found."""
        root = self._state(self.root_nodes())
        done, timed_out = 0, False
        for _ in range(self.rollout):
            path, state = [root], root
            while not self._is_leaf(state) and not timed_out:
                if state.children is None:
                    timed_out = self._out_of_time()
                    if timed_out:
                        break
                    self._expand(state)
                if not state.children:
                    break
                state = self._select(state)
                path.append(state)
            if timed_out:  # an unfinished walk: no leaf reward to back up
                break
            if state.reward is None:
                self._evaluate([state])
            for s in path:
                s.visits += 1
                s.total += float(state.value)
            done += 1
        if not any(s.reward is not None for s in self.states.values()):
            self._evaluate([root])  # nothing measured yet (a zero budget): at least the root
        return SearchResult(self.best(), dict(self.states), done, timed_out)

    def best(self) -> frozenset:
        """The evaluated leaf of largest Shapley value (ties: fewer nodes, then smaller ids);
        leaves holding at least one pair first (a lone node explains no edge); when no leaf was
        reached, the smallest evaluated state (ties: larger value)."""
        scored = [s for s in self.states.values() if s.reward is not None]
        leaves = [s for s in scored if self._is_leaf(s)]
        leaves = [s for s in leaves if len(s.nodes) > 1] or leaves
        if leaves:
            pick = min(leaves, key=lambda s: (-s.value, len(s.nodes), sorted(s.nodes)))
        else:
            pick = min(scored, key=lambda s: (len(s.nodes), -s.value, sorted(s.nodes)))
        return pick.nodes


def pair_scores(instance: Instance, result: SearchResult) -> Tensor:
    """One score per pair: ``2 + ½(1 + r)`` inside the chosen subgraph, ``½(1 + r)`` outside, with
    ``r`` the best Shapley value of an evaluated state holding the pair (0 when none does)."""
    n, (u, v) = instance.num_nodes, instance.pairs
    scored = [s for s in result.states.values() if s.reward is not None]
    best = torch.zeros(instance.num_pairs, dtype=torch.float64)
    if scored:
        masks = torch.zeros(len(scored), n, dtype=torch.bool)
        for i, s in enumerate(scored):
            masks[i, list(s.nodes)] = True
        inside = masks[:, u] & masks[:, v]
        rewards = torch.tensor([s.reward for s in scored], dtype=torch.float64).clamp(-1.0, 1.0)
        top = torch.where(
            inside, rewards[:, None], torch.full_like(inside, -2.0, dtype=torch.float64)
        )
        top = top.max(dim=0).values
        best = torch.where(top > -2.0, 0.5 * (1.0 + top), best)
    chosen = torch.zeros(n, dtype=torch.bool)
    chosen[list(result.best)] = True
    return (best + 2.0 * (chosen[u] & chosen[v]).double()).float()


class SubgraphXExplainer(Explainer):
    """SubgraphX behind the engine's explainer interface (nothing to fit; one search per instance).

    Args:
        black_box: the target as a black box (logits per instance).
        num_hops: L, the target's message-passing layers.
        max_nodes: the node budget of the explanation subgraph (a leaf has at most this many).
        rollout: MCTS rollouts per instance.
        c_puct: exploration coefficient.
        expand_atoms: children tried per expansion.
        sample_num: Monte-Carlo coalitions per Shapley value.
        time_budget_s: wall-clock seconds per instance (the search stops and returns the best so
            far; None or 0: no limit).
        seed: the sampling's seed (mixed with each instance's identity).
        task: ``"node"`` / ``"graph"`` to refuse instances of the other level (None: any).
    """

    name = "subgraphx"

    def __init__(
        self,
        black_box,
        num_hops: int = 3,
        max_nodes: int = 5,
        rollout: int = 20,
        c_puct: float = 10.0,
        expand_atoms: int = 12,
        sample_num: int = 100,
        time_budget_s: Optional[float] = 10.0,
        seed: int = 0,
        task: Optional[str] = None,
    ):
        for label, value in (
            ("num_hops", num_hops),
            ("max_nodes", max_nodes),
            ("rollout", rollout),
            ("expand_atoms", expand_atoms),
            ("sample_num", sample_num),
        ):
            if int(value) < 1:
                raise ValueError(f"SubgraphX: {label} must be at least 1, got {value}")
        self.black_box = black_box
        self.num_hops, self.max_nodes, self.rollout = int(num_hops), int(max_nodes), int(rollout)
        self.c_puct, self.expand_atoms = float(c_puct), int(expand_atoms)
        self.sample_num = int(sample_num)
        self.time_budget_s = float(time_budget_s) if time_budget_s else None
        self.seed = int(seed)
        self.task = task
        self.fit_seconds_ = 0.0
        self.explain_seconds_ = 0.0
        self.last_results_: list[SearchResult] = []

    @property
    def reads_prediction(self) -> bool:
        return True

    def search(self, instance: Instance, cls: int) -> SearchResult:
        """The MCTS of one instance for class ``cls`` (seeded by the instance)."""
        gen = torch.Generator().manual_seed(instance_seed(self.seed, instance))
        deadline = None if self.time_budget_s is None else time.perf_counter() + self.time_budget_s
        return SubgraphSearch(
            instance,
            self.black_box,
            cls,
            self.num_hops,
            self.max_nodes,
            self.rollout,
            self.c_puct,
            self.expand_atoms,
            self.sample_num,
            gen,
            deadline,
        ).run()

    def _explain(self, instances: list[Instance], progress: Optional[ProgressFn]) -> list[Tensor]:
        predicted = (
            predict_proba(self.black_box, instances).argmax(-1)
            if instances
            else torch.zeros(0, dtype=torch.long)  # no instance: nothing to predict
        )
        return self._explain_predicted(instances, progress, predicted)

    def _explain_predicted(
        self, instances: list[Instance], progress: Optional[ProgressFn], predicted: Tensor
    ) -> list[Tensor]:
        out, self.last_results_ = [], []
        for i, inst in enumerate(instances):
            result = self.search(inst, int(predicted[i]))
            self.last_results_.append(result)
            out.append(pair_scores(inst, result))
            report(
                progress, (i + 1) / len(instances), f"SubgraphX: instance {i + 1}/{len(instances)}"
            )
        return out

    @property
    def search_summary_(self) -> dict[str, float]:
        """How the last ``explain`` searched: instances, the share stopped by the time budget,
        mean rollouts done and mean states evaluated per instance."""
        runs = self.last_results_
        n = max(len(runs), 1)
        return {
            "instances": len(runs),
            "timed_out_share": sum(r.timed_out for r in runs) / n,
            "mean_rollouts": sum(r.rollouts for r in runs) / n,
            "mean_states": sum(len(r.states) for r in runs) / n,
        }


__all__ = ["SubgraphXExplainer", "SubgraphSearch", "SearchResult", "pair_scores"]
