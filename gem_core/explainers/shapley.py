"""Shapley values of node sets (subgraphs) of one instance, as SubgraphX scores them.

Yuan et al. (ICML 2021, §3.3) score a connected subgraph ``S`` of an instance by its Shapley value
for the explained class: ``S`` is one player, the other players are the nodes within ``L`` hops
of ``S`` (``L`` = the target's message-passing layers; nodes further away cannot change what the
target computes on ``S``), and ``S``'s value is its mean marginal contribution
``p_class(C ∪ S) − p_class(C)`` over the coalitions ``C`` a uniformly random order of the players
puts before ``S`` (Monte-Carlo sampling of those orders).

A node set ``T`` is shown to the black box as the instance with only the pairs *among* ``T``'s
nodes: every other pair is deleted and every node keeps its features (the engine's pair masks,
:func:`gem_core.data.instances.collate`, as Gem's distillation and the top-K evaluation delete
edges). This is the "edge-deletion" variant of the paper's removal; nodes outside ``T`` stay as
isolated nodes rather than being zero-filled. On node tasks that is the same as removing them
(an isolated node cannot reach the target); on graph tasks they still reach the readout alone.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from typing import Optional, Union

import torch
from torch import Tensor

from gem_core.data.instances import Instance, InstanceBatch
from gem_core.models.targets import uses_edge_attr

#: node sets per forward pass of the black box (bounds the batch's memory)
CHUNK = 4096


def adjacency(instance: Instance) -> list[set[int]]:
    """Neighbour sets of the instance's nodes (undirected)."""
    adj: list[set[int]] = [set() for _ in range(instance.num_nodes)]
    for u, v in instance.pairs.t().tolist():
        adj[u].add(v)
        adj[v].add(u)
    return adj


def neighbourhood(adj: Sequence[set[int]], nodes: Iterable[int], hops: int) -> set[int]:
    """The nodes within ``hops`` hops of ``nodes`` (``nodes`` included)."""
    seen = set(nodes)
    frontier = set(seen)
    for _ in range(int(hops)):
        frontier = {w for u in frontier for w in adj[u]} - seen
        if not frontier:
            break
        seen |= frontier
    return seen


class NodeSetGame:
    """The black box's probability of one class on node sets of one instance.

    Args:
        instance: the explained instance.
        black_box: the target (``InstanceBatch -> logits``); its softmax gives the value.
        cls: the class whose probability is the game's value.
    """

    def __init__(self, instance: Instance, black_box, cls: int):
        self.instance = instance
        self.black_box = black_box
        self.cls = int(cls)
        self.forward_passes = 0

    def pair_masks(self, node_masks: Tensor) -> Tensor:
        """``[B, P]`` masks of the pairs with both ends in each ``[B, n]`` node mask."""
        u, v = self.instance.pairs
        return node_masks[:, u] & node_masks[:, v]

    @torch.no_grad()
    def values(self, node_masks: Tensor) -> Tensor:
        """``p_cls`` (float64, ``[B]``) of the instance keeping only the pairs among each node set.

        Identical node sets are evaluated once; the rest in chunks of :data:`CHUNK` copies of
        the instance, each one forward pass.
        """
        if node_masks.size(0) == 0:
            return torch.zeros(0, dtype=torch.float64)
        unique, inverse = torch.unique(node_masks.bool(), dim=0, return_inverse=True)
        instance, unique = self._restricted(unique)
        u, v = instance.pairs
        masks = unique[:, u] & unique[:, v]
        out = []
        for start in range(0, masks.size(0), CHUNK):
            logits = self.black_box(
                repeated_batch(
                    instance, masks[start : start + CHUNK], uses_edge_attr(self.black_box)
                )
            )
            out.append(torch.softmax(logits.detach().to("cpu", torch.float64), -1)[:, self.cls])
            self.forward_passes += 1
        return torch.cat(out)[inverse]

    def _restricted(self, node_masks: Tensor) -> tuple[Instance, Tensor]:
        """Node tasks: the instance cut to the nodes some set holds (and the masks to match).

        Every other node is isolated in every copy, and an isolated node cannot reach the
        target through message passing, so the target's output is the same; graph tasks keep
        every node (an isolated node still reaches the readout).
        """
        inst = self.instance
        keep = node_masks.any(dim=0)
        if inst.target is None or bool(keep.all()):
            return inst, node_masks
        keep[int(inst.target)] = True
        new_id = torch.cumsum(keep.long(), 0) - 1
        pair_kept = keep[inst.pairs[0]] & keep[inst.pairs[1]]
        sub = Instance(
            x=inst.x[keep],
            pairs=new_id[inst.pairs[:, pair_kept]],
            y=inst.y,
            target=int(new_id[int(inst.target)]),
            edge_attr=None if inst.edge_attr is None else inst.edge_attr[pair_kept],
        )
        return sub, node_masks[:, keep]


def repeated_batch(
    instance: Instance, pair_masks: Tensor, edge_attr: bool = False
) -> InstanceBatch:
    """``B`` copies of one instance, copy ``b`` keeping the pairs of ``pair_masks[b]``, as one batch.

    The same batch :func:`gem_core.data.instances.collate` builds from ``[instance] * B`` and
    those masks, built with tensor operations instead of one slice per copy.
    """
    n, count = instance.num_nodes, int(pair_masks.size(0))
    copy, pair = pair_masks.nonzero(as_tuple=True)  # row-major: copies in order, pairs sorted
    kept = instance.pairs[:, pair] + copy * n
    offsets = torch.arange(count) * n
    attr = None
    if edge_attr:
        if instance.edge_attr is None:
            raise ValueError("this target reads edge features; the instance has none")
        a = instance.edge_attr
        a = (a if a.dim() == 2 else a.reshape(-1, 1)).float()[pair]
        attr = torch.cat([a, a], dim=0)
    return InstanceBatch(
        x=instance.x.repeat(count, 1),
        edge_index=torch.cat([kept, kept.flip(0)], dim=1),
        batch=torch.arange(count).repeat_interleave(n),
        target_index=None if instance.target is None else offsets + int(instance.target),
        num_instances=count,
        edge_attr=attr,
    )


def _mask(n: int, nodes: Iterable[int]) -> Tensor:
    m = torch.zeros(n, dtype=torch.bool)
    idx = list(nodes)
    if idx:
        m[torch.tensor(idx, dtype=torch.long)] = True
    return m


def sampled_coalitions(
    num_nodes: int,
    subset: Iterable[int],
    players: Sequence[int],
    sample_num: int,
    generator: torch.Generator,
) -> Tensor:
    """``[sample_num, n]`` node masks of the coalitions that random player orders put before ``S``.

    Each sample draws one uniform random order of the players and ``S`` (i.i.d. uniform keys,
    sorted) and keeps the players whose key is below ``S``'s: a coalition of a size uniform in
    ``0..m``, then uniform among the coalitions of that size, the Shapley weighting.
    """
    players = list(players)
    keys = torch.rand(int(sample_num), len(players) + 1, generator=generator, dtype=torch.float64)
    before = keys[:, :-1] < keys[:, -1:]
    masks = torch.zeros(int(sample_num), num_nodes, dtype=torch.bool)
    if players:
        masks[:, torch.tensor(players, dtype=torch.long)] = before
    return masks


def shapley_values(
    game: NodeSetGame,
    subsets: Sequence[Iterable[int]],
    adj: Sequence[set[int]],
    hops: int,
    sample_num: int,
    generator: torch.Generator,
) -> list[float]:
    """Monte-Carlo Shapley value of each node set (one batch of forward passes for all of them).

    For each set ``S``: the players are the nodes within ``hops`` of ``S`` but not in it;
    ``sample_num`` coalitions ``C`` are drawn (:func:`sampled_coalitions`) and the value is the
    mean of ``p(C ∪ S) − p(C)``, in ``[-1, 1]``.
    """
    n = game.instance.num_nodes
    with_s, without_s = [], []
    for subset in subsets:
        nodes = set(subset)
        players = sorted(neighbourhood(adj, nodes, hops) - nodes)
        coal = sampled_coalitions(n, nodes, players, sample_num, generator)
        without_s.append(coal)
        with_s.append(coal | _mask(n, nodes))
    if not with_s:
        return []
    values = game.values(torch.cat(with_s + without_s))
    half = values.numel() // 2
    diff = (values[:half] - values[half:]).view(len(with_s), int(sample_num))
    return diff.mean(dim=1).tolist()


def exact_shapley(game: NodeSetGame, subset: Iterable[int], players: Sequence[int]) -> float:
    """The exhaustive Shapley value of ``S`` among ``players`` (``2^m`` coalitions; tests, small m).

    ``Σ_C |C|! (m − |C|)! / (m + 1)! · (p(C ∪ S) − p(C))`` over every coalition ``C`` of players.
    """
    n = game.instance.num_nodes
    nodes = set(subset)
    players = list(players)
    m = len(players)
    coalitions = [c for r in range(m + 1) for c in itertools.combinations(players, r)]
    without = torch.stack([_mask(n, c) for c in coalitions])
    values = game.values(torch.cat([without | _mask(n, nodes), without]))
    gain = values[: len(coalitions)] - values[len(coalitions) :]
    weights = torch.tensor(
        [
            math.factorial(len(c)) * math.factorial(m - len(c)) / math.factorial(m + 1)
            for c in coalitions
        ],
        dtype=torch.float64,
    )
    return float((weights * gain).sum())


def connected_components(
    adj: Sequence[set[int]],
    nodes: Union[set[int], frozenset[int]],
) -> list[set[int]]:
    """The connected components of the subgraph induced by ``nodes``."""
    left = set(nodes)
    parts = []
    while left:
        start = min(left)
        part, stack = {start}, [start]
        while stack:
            u = stack.pop()
            for w in adj[u]:
                if w in left and w not in part:
                    part.add(w)
                    stack.append(w)
        left -= part
        parts.append(part)
    return parts


def kept_component(adj: Sequence[set[int]], nodes: set[int], target: Optional[int]) -> set[int]:
    """The component SubgraphX keeps after a prune: the target's (node tasks), else the largest
    (ties: the one holding the smallest node id)."""
    parts = connected_components(adj, nodes)
    if not parts:
        return set()
    if target is not None:
        return next((p for p in parts if target in p), set())
    return max(parts, key=lambda p: (len(p), -min(p)))
