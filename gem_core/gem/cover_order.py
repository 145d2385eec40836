"""Cover-first order: Gem's ranking read so that each next pair brings a node the explanation
lacks, while one does.

Under ``drop_isolated`` (the field's protocol) the model reads only the nodes an explanation's
pairs touch. A model whose output is a sum over nodes (a regressor of Crippen logP: every atom
adds its contribution) keeps its value when most nodes are kept, so k pairs that touch many nodes
keep it more often than k neighbouring ones: on the zoo's AttentiveFP logP regressor, random
scores (which spread) were more sufficient than Gem's ranking (decisions/008). This order keeps
Gem's preference and spreads it: going down Gem's ranking, a pair that touches a node not yet
touched comes next; a pair whose two nodes are touched already waits, and the waiting pairs
follow in Gem's order once no pair brings a new node. It reads Gem's scores and the graph only:
no query of the target, so it is part of Gem's one pass (``network.order = "cover"``).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from gem_core.data.packed import PackedGraphs, segment_arange
from gem_core.data.ranking import as_scores, pair_order
from gem_core.gem.checked_ranking import values_along_rows

__all__ = ["cover_first", "cover_first_scores"]


def cover_first(pairs: Tensor, scores: Tensor) -> list[int]:
    """The pair indices of one instance (``pairs`` ``[2, P]``, ``scores`` ``[P]``) in cover-first
    order: Gem's order (:func:`~gem_core.data.ranking.pair_order`), a pair that touches a new
    node first, the others after, each group in Gem's order. (Going down Gem's order once is
    the greedy rule: a pair passed over has both nodes touched, and stays so.)"""
    ends = pairs.tolist()
    touched: set[int] = set()
    first: list[int] = []
    later: list[int] = []
    for j in pair_order(scores):
        u, v = ends[0][j], ends[1][j]
        if u in touched and v in touched:
            later.append(j)
        else:
            first.append(j)
            touched.update((u, v))
    return first + later


def cover_first_scores(packed: PackedGraphs, scores: Tensor) -> Tensor:
    """Gem's flat pair ``scores`` of the ``packed`` instances with each instance's ranking in
    cover-first order (:func:`cover_first`): the same values, given out along the new order
    (:func:`~gem_core.gem.checked_ranking.reassign_scores`'s rule). All instances go down their
    rankings together, one position per step (their nodes are disjoint), so a batch costs one
    step per pair of its largest instance, not a Python loop over every pair."""
    scores = torch.as_tensor(scores, dtype=torch.float32).reshape(-1).cpu()
    n, total = packed.num_instances, packed.num_pairs
    if n == 0 or total == 0:
        return scores.clone()
    counts = packed.pair_counts()
    owner = torch.repeat_interleave(torch.arange(n), counts)
    # Gem's order inside each instance (pair_order's: best first, ties to the lower index)
    by_score = torch.sort(as_scores(scores), descending=True, stable=True).indices
    gem = by_score[torch.sort(owner[by_score], stable=True).indices]  # instance by instance
    width = int(counts.max())
    table = np.full((n, width), -1, dtype=np.int64)  # [instance, rank] -> packed pair
    table[owner.numpy(), segment_arange(counts).numpy()] = gem.numpy()
    ends = packed.pairs.cpu().numpy()
    touched = np.zeros(packed.num_nodes, dtype=bool)
    first = np.zeros((n, width), dtype=bool)
    for t in range(width):
        rows = np.nonzero(table[:, t] >= 0)[0]
        pair = table[rows, t]
        u, v = ends[0, pair], ends[1, pair]
        new = ~(touched[u] & touched[v])
        touched[u[new]] = True
        touched[v[new]] = True
        first[rows[new], t] = True
    rank = np.arange(width)[None, :]
    key = np.where(first, rank, width + rank)
    key[table < 0] = 2 * width  # padding last
    ranked = np.take_along_axis(table, np.argsort(key, axis=1, kind="stable"), axis=1)
    values = scores[torch.from_numpy(np.maximum(table, 0))]  # Gem's values, best first
    out = scores.clone()
    kept = torch.from_numpy(ranked >= 0)
    new_pairs = torch.from_numpy(ranked)
    out[new_pairs[kept]] = values[kept]
    # equal values keep topk's tie rule (the lower index first) only where the new order has
    # them in index order; elsewhere reassign_scores's rule
    local = new_pairs - packed.pair_ptr[:-1][:, None]
    tied = (values[:, 1:] == values[:, :-1]) & kept[:, 1:] & (local[:, 1:] < local[:, :-1])
    tied_rows = torch.nonzero(tied.any(1)).view(-1)
    if tied_rows.numel():  # those instances at once (each row's padding trails its pairs)
        along = values_along_rows(values[tied_rows], local[tied_rows])
        out[new_pairs[tied_rows][kept[tied_rows]]] = along[kept[tied_rows]]
    return out
