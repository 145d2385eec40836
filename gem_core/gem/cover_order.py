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

import torch
from torch import Tensor

from gem_core.data.packed import PackedGraphs
from gem_core.data.ranking import pair_order
from gem_core.gem.checked_ranking import reassign_scores

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
    cover-first order (:func:`cover_first`): the same values, given out along the new order."""
    scores = torch.as_tensor(scores, dtype=torch.float32).reshape(-1).cpu()
    counts = packed.pair_counts()
    n = packed.num_instances
    ranking = torch.full((n, max(int(counts.max()), 1) if n else 1), -1, dtype=torch.long)
    ptr = packed.pair_ptr.tolist()
    pairs = packed.pairs.cpu()
    for i in range(n):
        lo, hi = ptr[i], ptr[i + 1]
        if hi > lo:
            ranking[i, : hi - lo] = torch.tensor(cover_first(pairs[:, lo:hi], scores[lo:hi]))
    return reassign_scores(packed, scores, ranking, counts)
