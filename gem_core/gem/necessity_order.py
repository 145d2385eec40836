"""Greedy necessity order: which pairs of an explanation to delete first to change the prediction.

GNNX-Bench's necessity@k deletes an explainer's top-k pairs and asks whether the target's
prediction changes. Gem's graded training targets say which pairs belong to the distilled
explanation at each budget K, but not which of them matter most once deleted: over the paper's
Mutagenicity grid (K = 15 … 30) every pair of the 15-pair explanation gets the same grade, so the
order of Gem's first few pairs is left to chance, and a loss-driven descent (``refine`` over
K = 1 … 30) orders them by what *alone* keeps the prediction (sufficiency), not by what its
deletion destroys.

:func:`necessity_order` orders a candidate set (:func:`candidate_sets`: a target's own top-K set at
the smallest K, i.e. the teacher's explanation there) the
way a deletion experiment would: step by step it deletes the candidate whose deletion, together
with the pairs deleted before it, gives the highest loss of the target's predicted class (under
the evaluation protocol). :func:`lead_with` then puts those pairs first in a training target
without changing which pairs the target ranks in its top-K sets: the top-K sets of the teacher
(and so the accuracy it teaches) stay as they were, only their internal order changes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from gem_core.data.instances import Instance
from gem_core.data.packed import PackedGraphs
from gem_core.data.ranking import topk_mask
from gem_core.gem.distill.conventions import TIE_TOL, order_key
from gem_core.gem.distill.layout import CPU_MAX_EDGES, _Layout
from gem_core.gem.distill.refine import _subset_losses
from gem_core.models.targets import uses_edge_attr

CPU = torch.device("cpu")

#: the share of the [0, 1] target range the leading pairs take: the others are scaled into
#: [0, 1 − LEAD_SPAN] and the ``n`` leading pairs get 1, 1 − LEAD_SPAN / n, …
LEAD_SPAN = 0.2


@torch.no_grad()
def necessity_order(
    instances: Sequence[Instance],
    candidates: Sequence[Tensor],
    labels: Tensor,
    black_box,
    steps: int,
    drop_isolated: bool = False,
    max_edges: int = CPU_MAX_EDGES,
) -> list[list[int]]:
    """Per instance, up to ``steps`` pair indices of its ``candidates`` mask in greedy deletion
    order.

    Each step deletes, for every instance at once, the candidate whose deletion from the graph
    (with the pairs deleted at earlier steps) gives the highest cross-entropy of ``labels`` (the
    class the target predicts on the whole instance): the deletion most likely to change the
    prediction. Ties go to the lower pair index. ``drop_isolated``: copies lose the nodes the
    deletions leave without an edge (GNNX-Bench's protocol). Every copy of a step (one per
    remaining candidate of every instance) is evaluated in batched forward passes of at most
    ``max_edges`` directed edges. Losses closer than about ``TIE_TOL`` count as a tie.
    """
    if len(candidates) != len(instances) or labels.numel() != len(instances):
        raise ValueError("need one candidate mask and one label per instance")
    if steps < 0:
        raise ValueError(f"steps must be non-negative, got {steps}")
    if not instances or steps == 0:
        return [[] for _ in instances]
    layout = _Layout.build(instances, edge_attr=uses_edge_attr(black_box))
    return _greedy_order(
        layout,
        candidates,
        labels,
        black_box,
        steps,
        (drop_isolated,),
        max_edges,
        torch.device("cpu"),
    )


@torch.no_grad()
def necessity_order_packed(
    packed: PackedGraphs,
    candidates: Sequence[Tensor],
    labels: Tensor,
    black_box,
    steps: int,
    device: torch.device = CPU,
    max_edges: int = CPU_MAX_EDGES,
) -> list[list[int]]:
    """:func:`necessity_order` of already packed instances (their own features, edge features
    as the target reads them), judged under both protocols (the sum of the two losses), the
    target on ``device``. For the check at explain time, which holds the instances packed."""
    if len(candidates) != packed.num_instances or labels.numel() != packed.num_instances:
        raise ValueError("need one candidate mask and one label per instance")
    if packed.num_instances == 0 or steps <= 0:
        return [[] for _ in range(packed.num_instances)]
    layout = _Layout(packed, labels.reshape(-1).long().cpu())
    return _greedy_order(
        layout, candidates, labels.to(device), black_box, steps, (False, True), max_edges, device
    )


def _greedy_order(
    layout: _Layout,
    candidates: Sequence[Tensor],
    labels: Tensor,
    black_box,
    steps: int,
    drops: tuple[bool, ...],
    max_edges: int,
    device: torch.device,
) -> list[list[int]]:
    """The greedy deletion order of :func:`necessity_order` on a built layout; the loss of a copy
    is the sum of its losses over ``drops`` (isolated nodes dropped or kept)."""
    order: list[list[int]] = [[] for _ in range(layout.size)]
    packed = layout.packed
    start = packed.pair_ptr[:-1].numpy()
    counts = packed.pair_counts().numpy()
    alive = np.ones(packed.num_pairs, dtype=bool)
    remaining = [np.flatnonzero(c.reshape(-1).bool().cpu().numpy()) for c in candidates]
    for n_pairs, c in zip(counts, remaining):
        if c.size and c.max() >= n_pairs:
            raise ValueError("a candidate mask is longer than its instance's pairs")
    labels = labels.reshape(-1).long()
    for _ in range(steps):
        busy = [i for i, c in enumerate(remaining) if c.size]
        if not busy:
            break
        copy_inst: list[int] = []
        copy_pair, kept, kept_copy = [], [], []
        for i in busy:
            pos = start[i] + np.arange(counts[i])
            live = pos[alive[pos]]
            for j in remaining[i]:
                copy_id = len(copy_inst)
                copy_inst.append(i)
                copy_pair.append(j)
                keep = live[live != start[i] + j]
                kept.append(keep)
                kept_copy.append(np.full(keep.size, copy_id, dtype=np.int64))
        inst = np.array(copy_inst)
        kept_all, kept_copy_all = np.concatenate(kept), np.concatenate(kept_copy)
        losses = sum(
            _subset_losses(
                layout,
                inst,
                kept_all,
                kept_copy_all,
                labels,
                black_box,
                device,
                max_edges,
                drop_isolated=drop,
            )
            for drop in drops
        )
        pair_of = np.array(copy_pair)
        # losses within about TIE_TOL are a tie (batched float noise must not decide an order)
        key = order_key(torch.from_numpy(losses), TIE_TOL).numpy()
        bounds = np.append(np.searchsorted(inst, busy), len(copy_inst))
        # per instance: the highest loss, ties to the lower pair index (copies are in pair order)
        for n, i in enumerate(busy):
            lo, hi = bounds[n], bounds[n + 1]
            best = lo + int(np.argmax(key[lo:hi]))
            pair = int(pair_of[best])
            order[i].append(pair)
            alive[start[i] + pair] = False
            remaining[i] = remaining[i][remaining[i] != pair]
    return order


def lead_with(
    targets: Sequence[Tensor], leads: Sequence[Sequence[int]], span: float = LEAD_SPAN
) -> list[Tensor]:
    """The training ``targets`` with each instance's ``leads`` ranked first, in their order.

    Every other pair keeps its target scaled into ``[0, 1 − span]`` (so their order, and the
    top-K sets beyond the leading pairs, are unchanged); the ``n`` leading pairs get
    ``1, 1 − span / n, …, 1 − span (n − 1) / n``, above all of them.
    """
    if not 0 < span < 1:
        raise ValueError(f"span must be in (0, 1), got {span}")
    out = []
    for t, lead in zip(targets, leads):
        t = t.float() * (1 - span)
        n = len(lead)
        if n:
            t[torch.tensor(list(lead), dtype=torch.long)] = 1 - span * torch.arange(n).float() / n
        out.append(t)
    return out


def candidate_sets(targets: Sequence[Tensor], k: int) -> list[Tensor]:
    """Each target's top-``k`` pairs (:func:`~gem_core.data.ranking.topk_mask`): the teacher's
    explanation at the smallest budget; where it has fewer than ``k`` pairs, the set is filled
    with the next pairs by target, ties to the lower pair index, exactly as the top-K ranking
    of the targets fills it (so leading with them leaves every top-K set of the targets as it
    was)."""
    return [topk_mask(t, k) for t in targets]
