"""The greedy phase: walk the pairs in ascending Δ (ties: lower pair index first), tentatively
remove each one, apply the connectivity rule, keep the removal when the loss does not rise,
otherwise restore the pair and give it the weight ``new_loss − current_loss > 0``; pairs already
dropped together with a component are skipped.

Batched: the instances of a chunk run in lockstep (step ``t`` handles every instance's ``t``-th
pair in Δ order), one forward pass per step, with the components of the whole chunk computed at
once (:mod:`.components`). Instances are sorted by size so the instances still busy at step ``t``
are a prefix of the chunk and each step's batch is a slice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import numpy as np
import torch
from torch import Tensor

from gem_core.gem.distill.components import _Components
from gem_core.gem.distill.conventions import granger_loss, order_key
from gem_core.gem.distill.layout import _Layout
from gem_core.gem.distill.segments import _gather_segments, _segment_order
from gem_core.runtime.progress import ProgressFn, report, scaled

if TYPE_CHECKING:  # pragma: no cover
    from gem_core.models.targets import BlackBox


def _greedy_chunks(num_pairs: Tensor, max_edges: int) -> list[Tensor]:
    """Instance ids sorted by pair count (descending), cut into chunks of ≤ ``max_edges`` edges."""
    order = torch.sort(num_pairs, descending=True, stable=True).indices
    order = order[num_pairs[order] > 0]
    chunks, start = [], 0
    ends = torch.cumsum(2 * num_pairs[order], 0).numpy()
    while start < order.numel():
        base = ends[start - 1] if start > 0 else 0
        stop = max(int(np.searchsorted(ends, base + max_edges, side="right")), start + 1)
        chunks.append(order[start:stop])
        start = stop
    return chunks


def _greedy_chunk(
    sub: _Layout,
    order_local: Tensor,
    labels: Tensor,
    full_loss: Tensor,
    black_box: "BlackBox",
    device: torch.device,
    connected: bool,
    tol: float,
    progress: Optional[ProgressFn],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Greedy pruning of one chunk (instances sorted by pair count, descending) in lockstep.

    Args:
        order_local: per instance, its local pair indices in ascending-Δ order (flat, per segment).
    Returns:
        ``(kept [Q] bool, weights [Q] float64, loss [N] float64)`` of the chunk.
    """
    pair_start = sub.pair_ptr[:-1].numpy()
    order = order_local.numpy() + np.repeat(pair_start, sub.num_pairs.numpy())  # chunk pair ids
    owner = sub.pair_owner.numpy()
    counts = sub.num_pairs.numpy()
    steps = int(counts[0]) if counts.size else 0
    # active[t] = number of instances with more than t pairs (a prefix: counts are descending)
    active = np.searchsorted(-counts, -np.arange(steps), side="left")
    kept = np.ones(int(sub.pair_ptr[-1]), dtype=bool)
    weights = np.zeros(kept.shape[0], dtype=np.float64)
    loss = full_loss.numpy().astype(np.float64).copy()
    comps = _Components(sub.packed) if connected else None
    make_batch = sub.packed.prefix_batches(device)
    labels_dev = labels.to(device)
    done_work, total_work = 0, int(counts.sum())
    for t in range(steps):
        m = int(active[t])
        q = int(sub.pair_ptr[m])
        cand = order[pair_start[:m] + t]
        alive = kept[cand]
        if not alive.any():
            continue
        tent = kept[:q].copy()
        tent[cand[alive]] = False
        if comps is not None:
            tent = comps.apply(tent, m)
        edges = tent & alive[owner[:q]]  # idle instances contribute their nodes only
        logits = black_box(make_batch(m, edges))
        new = granger_loss(logits, labels_dev[:m]).cpu().numpy()
        accept = alive & (new <= loss[:m] + tol)
        reject = alive & ~accept
        weights[cand[reject]] = new[reject] - loss[:m][reject]
        acc_pairs = accept[owner[:q]]
        kept[:q] = np.where(acc_pairs, tent, kept[:q])
        loss[:m] = np.where(accept, new, loss[:m])
        done_work += m
        if progress is not None and (t % 8 == 0 or t == steps - 1):
            report(progress, done_work / max(total_work, 1), f"greedy step {t + 1}/{steps}")
    weights[~kept] = 0.0
    return kept, weights, loss


def _greedy(
    layout: _Layout,
    delta: Tensor,
    labels: Tensor,
    full_loss: Tensor,
    black_box: "BlackBox",
    device: torch.device,
    connected: bool,
    tol: float,
    max_edges: int,
    progress: Optional[ProgressFn],
) -> tuple[Tensor, Tensor, Tensor]:
    """The greedy phase for all instances, chunk by chunk; results in the layout's order."""
    order_flat = _segment_order(order_key(delta, tol), layout.pair_owner)
    order_local = order_flat - layout.pair_ptr[:-1][layout.pair_owner]  # per segment, Δ order
    kept = torch.ones(int(layout.pair_ptr[-1]), dtype=torch.bool)
    weights = torch.zeros(kept.numel(), dtype=torch.float64)
    loss = full_loss.clone().double()
    chunks = _greedy_chunks(layout.num_pairs, max_edges)
    total = max(int(layout.num_pairs.sum()), 1)
    done = 0
    for ids in chunks:
        sub = layout.select(ids)
        work = int(layout.num_pairs[ids].sum())
        part = scaled(progress, done / total, (done + work) / total)
        k, w, chunk_loss = _greedy_chunk(
            sub,
            _gather_segments(order_local, layout.pair_ptr, ids),
            labels[ids],
            full_loss[ids],
            black_box,
            device,
            connected,
            tol,
            part,
        )
        flat = _gather_segments(torch.arange(kept.numel()), layout.pair_ptr, ids)
        kept[flat] = torch.from_numpy(k)
        weights[flat] = torch.from_numpy(w)
        loss[ids] = torch.from_numpy(chunk_loss)
        done += work
    return kept, weights, loss
