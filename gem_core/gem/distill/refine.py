"""The loss-driven top-K rule ``"refine"`` (forward passes: needs the instances and the black box).

Descent: from the greedy result, repeatedly remove the pair whose removal gives the lowest loss
(among those splitting nothing off), evaluating every candidate removal of every instance in one
batched forward per step, and record the explanation at every K on the way down (one descent
serves all K: :meth:`Distillation.topk_grid`). Grow-back: an explanation below K grows by the
missing pair of lowest loss while that lowers the loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Optional, Union

import numpy as np
import torch
from torch import Tensor

from gem_core.data.instances import Instance
from gem_core.data.packed import np_segment_arange
from gem_core.gem.distill.conventions import granger_loss, order_key
from gem_core.gem.distill.fields import DistillationFields
from gem_core.gem.distill.layout import _edge_budget, _Layout
from gem_core.gem.distill.walk import _pair_owner, _Walk
from gem_core.models.targets import uses_edge_attr
from gem_core.runtime.device import resolve_device

if TYPE_CHECKING:  # pragma: no cover
    from gem_core.models.targets import BlackBox


# Pairs (summed over all trial copies) one lockstep group of the "refine" descent holds at once;
# the copies are evaluated in forward passes of at most ``max_edges`` directed edges each.
REFINE_BUDGET = 262_144
# Loss placeholder of a trial the descent does not evaluate (never chosen: see _refine_down).
_NOT_EVALUATED = 1e6


def _check_refine_inputs(
    dist: DistillationFields,
    instances: Optional[Sequence[Instance]],
    black_box: Optional["BlackBox"],
) -> _Layout:
    if instances is None or black_box is None:
        raise ValueError("policy 'refine' needs the instances and the black box (forward passes).")
    if len(instances) != len(dist):
        raise ValueError("need the distillation's instances, in its order")
    layout = _Layout.build(instances, edge_attr=uses_edge_attr(black_box))
    if not torch.equal(layout.num_nodes, dist.num_nodes) or not torch.equal(
        layout.local_pairs, dist.pairs.long()
    ):
        raise ValueError("the instances do not match the distillation")
    return layout


def _subset_losses(
    layout: _Layout,
    inst: np.ndarray,
    flat: np.ndarray,
    copy_of: np.ndarray,
    labels: Tensor,
    black_box: "BlackBox",
    device: torch.device,
    max_edges: int,
    drop_isolated: bool = False,
) -> np.ndarray:
    """Loss of copy ``c`` = instance ``inst[c]`` keeping its layout pairs ``flat[copy_of == c]``
    (``copy_of`` non-decreasing), in forward passes of at most ``max_edges`` directed edges;
    ``drop_isolated``: each copy without the nodes its pairs leave isolated."""
    n = inst.shape[0]
    sizes = np.bincount(copy_of, minlength=n)
    ends = np.cumsum(2 * sizes)
    pptr = np.concatenate([[0], np.cumsum(sizes)])
    inst_t, flat_t, copy_t = (torch.from_numpy(a) for a in (inst, flat, copy_of))
    out, start = [], 0
    while start < n:
        base = ends[start - 1] if start > 0 else 0
        stop = max(int(np.searchsorted(ends, base + max_edges, side="right")), start + 1)
        lo, hi = int(pptr[start]), int(pptr[stop])
        batch = layout.packed.copies_batch(
            inst_t[start:stop], flat_t[lo:hi], copy_t[lo:hi] - start, drop_isolated=drop_isolated
        )
        logits = black_box(batch if device.type == "cpu" else batch.to(device))
        out.append(granger_loss(logits, labels[inst_t[start:stop]]).cpu())
        start = stop
    return torch.cat(out).numpy()


def _best_trial(inst: np.ndarray, loss: np.ndarray, valid: np.ndarray, tol: float) -> np.ndarray:
    """Per instance (``inst`` non-decreasing, trials in walk order): the valid trial of lowest
    loss (ties: the first in walk order), or the lowest-loss trial when none is valid."""
    key = order_key(torch.from_numpy(loss), tol).numpy()
    any_valid = np.zeros(int(inst.max()) + 1, dtype=bool)
    any_valid[inst[valid]] = True
    rank = np.where(valid | ~any_valid[inst], 0, 1)
    order = np.lexsort((np.arange(inst.shape[0]), key, rank, inst))
    _, first = np.unique(inst[order], return_index=True)
    return order[first]


def _refine_groups(ids: np.ndarray, cost: np.ndarray, budget: int) -> list[np.ndarray]:
    """Consecutive groups of ``ids`` whose summed ``cost`` stays within ``budget`` (≥ 1 id)."""
    ends = np.cumsum(cost)
    groups, start = [], 0
    while start < ids.shape[0]:
        base = ends[start - 1] if start > 0 else 0
        stop = max(int(np.searchsorted(ends, base + budget, side="right")), start + 1)
        groups.append(ids[start:stop])
        start = stop
    return groups


def _refine_down(
    dist: DistillationFields,
    layout: _Layout,
    kept: Tensor,
    owner: Tensor,
    ids: np.ndarray,
    ks: list[int],
    outs: dict[int, np.ndarray],
    black_box: "BlackBox",
    device: torch.device,
    max_edges: int,
) -> None:
    """The loss-driven descent of the instances ``ids`` (lockstep), recording into ``outs``.

    Each step tries every removal of every busy instance (one copy each, the connectivity rule
    applied) and takes the one of lowest loss among those dropping no other pair (when the
    explanation is one component); the state is recorded at every K the count reaches.
    """
    over = torch.zeros(len(dist), dtype=torch.bool)
    over[torch.from_numpy(ids)] = True
    w = _Walk.build(dist, kept, owner, over)
    dist_owner = owner.numpy()
    kmin = ks[0]
    while True:
        busy = w.count > kmin
        if not busy.any():
            break
        if w.n > 64 and 2 * int(busy.sum()) < w.n:
            w = w.subset(busy)
            busy = np.ones(w.n, dtype=bool)
        removed = np.flatnonzero(w.alive & busy[w.owner])
        inst = w.owner[removed]
        src, keep, copy_of = w.trials(removed, inst, rule=dist.connected)
        after = np.bincount(copy_of, weights=keep, minlength=removed.shape[0]).astype(np.int64)
        valid = after == w.count[inst] - 1
        if dist.connected:
            valid |= ~w.is_ruled()[inst]
        dist_inst = dist_owner[w.pos[w.pair_ptr[:-1]]]
        # A removal that drops other pairs is only a candidate for an instance without any
        # other: those trials are not evaluated (a third to a half of the copies on molecules).
        has_valid = np.zeros(w.n, dtype=bool)
        has_valid[inst[valid]] = True
        need = valid | ~has_valid[inst]
        idx = np.flatnonzero(need)
        renumber = np.cumsum(need) - 1
        sel = keep & need[copy_of]
        loss = np.full(inst.shape[0], _NOT_EVALUATED)
        loss[idx] = _subset_losses(
            layout,
            dist_inst[inst[idx]],
            w.pos[src[sel]],
            renumber[copy_of[sel]],
            dist.labels,
            black_box,
            device,
            max_edges,
        )
        chosen = _best_trial(inst, loss, valid, dist.tol)
        ci = inst[chosen]
        before = w.count.copy()
        win = np.zeros(removed.shape[0], dtype=bool)
        win[chosen] = True
        changed = np.zeros(w.n, dtype=bool)
        changed[ci] = True
        w.alive = np.where(changed[w.owner], False, w.alive)
        w.alive[src[keep & win[copy_of]]] = True
        w.count[ci] = after[chosen]
        for k in ks:
            hit = (before > k) & (w.count <= k)
            if hit.any():
                sel = hit[w.owner]
                outs[k][w.pos[sel]] = w.alive[sel]


def _refine_up(
    dist: DistillationFields,
    layout: _Layout,
    kept: Tensor,
    owner: Tensor,
    ids: np.ndarray,
    ks: list[int],
    outs: dict[int, np.ndarray],
    black_box: "BlackBox",
    device: torch.device,
    max_edges: int,
) -> None:
    """Grow-back of the instances ``ids`` (lockstep): while below the largest K, add the missing
    pair of lowest loss (with the connectivity rule: only pairs touching the explanation or the
    target; an empty graph-task explanation: any pair) if it lowers the loss by more than ``tol``,
    else stop. The state is recorded at every K (the last state with at most K pairs)."""
    over = torch.zeros(len(dist), dtype=torch.bool)
    over[torch.from_numpy(ids)] = True
    w = _Walk.build(dist, kept, owner, over, all_pairs=True)
    dist_owner = owner.numpy()
    kmax = ks[-1]
    node_task = w.targets is not None
    dist_inst = dist_owner[w.pos[w.pair_ptr[:-1]]]
    current = dist.greedy_loss.numpy()[dist_inst].copy()
    stuck = np.zeros(w.n, dtype=bool)
    while True:
        in_set = np.zeros(int(w.node_ptr[-1]), dtype=bool)
        in_set[w.u[w.alive]] = True
        in_set[w.v[w.alive]] = True
        if node_task:
            in_set[w.targets] = True
        free = np.full(w.n, not dist.connected) | ((w.count == 0) & (not node_task))
        cand = ~w.alive & ((w.count < kmax) & ~stuck)[w.owner]
        cand &= free[w.owner] | in_set[w.u] | in_set[w.v]
        added = np.flatnonzero(cand)
        if added.size == 0:
            break
        inst = w.owner[added]
        # copy c: the alive pairs of inst[c] plus the pair added[c]
        alive_ids = np.flatnonzero(w.alive)  # grouped by instance
        alive_ptr = np.concatenate([[0], np.cumsum(w.count)])
        size = w.count[inst]
        copy_of = np.repeat(np.arange(inst.shape[0]), size + 1)
        at = np_segment_arange(size + 1)
        is_added = at == np.repeat(size, size + 1)
        src = np.repeat(added, size + 1)
        src[~is_added] = alive_ids[(np.repeat(alive_ptr[inst], size + 1) + at)[~is_added]]
        loss = _subset_losses(
            layout, dist_inst[inst], w.pos[src], copy_of, dist.labels, black_box, device, max_edges
        )
        chosen = _best_trial(inst, loss, np.ones(inst.shape[0], dtype=bool), dist.tol)
        lower = loss[chosen] < current[inst[chosen]] - dist.tol
        stuck[inst[chosen[~lower]]] = True
        chosen = chosen[lower]
        ci = inst[chosen]
        current[ci] = loss[chosen]
        w.alive[added[chosen]] = True
        w.count[ci] += 1
        changed = np.zeros(w.n, dtype=bool)
        changed[ci] = True
        for k in ks:
            hit = changed & (w.count <= k)
            if hit.any():
                sel = hit[w.owner]
                outs[k][w.pos[sel]] = w.alive[sel]


def _refine_flat(
    dist: DistillationFields,
    instances: Optional[Sequence[Instance]],
    black_box: Optional["BlackBox"],
    ks: Sequence[int],
    device: Union[str, torch.device, None],
    max_edges: Optional[int],
) -> dict[int, Tensor]:
    """Flat top-K masks of the ``"refine"`` policy for every K of ``ks`` (one descent)."""
    layout = _check_refine_inputs(dist, instances, black_box)
    assert black_box is not None  # _check_refine_inputs refuses None
    dev = resolve_device(device)
    max_edges = _edge_budget(max_edges, dev)
    ks = sorted({int(k) for k in ks})
    owner = _pair_owner(dist)
    kept = dist.kept.clone()
    count = torch.zeros(len(dist), dtype=torch.long).scatter_add_(0, owner, kept.long()).numpy()
    outs = {k: kept.numpy().copy() for k in ks}
    down = np.flatnonzero(count > ks[0])
    down = down[np.argsort(count[down], kind="stable")]
    for ids in _refine_groups(down, count[down] ** 2, REFINE_BUDGET):
        _refine_down(dist, layout, kept, owner, ids, ks, outs, black_box, dev, max_edges)
    total = dist.num_pairs.numpy()
    up = np.flatnonzero((count < ks[-1]) & (total > count))
    cost = total[up] * np.minimum(total[up], ks[-1])
    for ids in _refine_groups(up, cost, REFINE_BUDGET):
        _refine_up(dist, layout, kept, owner, ids, ks, outs, black_box, dev, max_edges)
    return {k: torch.from_numpy(outs[k]) for k in ks}
