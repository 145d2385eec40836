"""The Δ phase: the causal contribution of every undirected edge (pair) ``e``,
``Δ(e) = loss(f(G \\ {e}), y) − loss(f(G), y)``, removing one pair (both directions) at a time
from the full graph; ``loss`` is the cross-entropy of the black box's logits against ``y`` (the
true label, or the model's own prediction on ``G``).

This module computes the logits: every instance's full graph and all its single-pair-removed
copies, the copies of many instances forming one disconnected graph per forward pass (chunked);
:func:`gem_core.gem.distill.engine.distill` turns them into Δ.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import numpy as np
import torch
from torch import Tensor

from gem_core.data.packed import InstanceBatch, segment_arange
from gem_core.gem.distill.layout import _Layout
from gem_core.runtime.progress import ProgressFn, report

if TYPE_CHECKING:  # pragma: no cover
    from gem_core.models.targets import BlackBox


def _removal_logits(
    layout: _Layout,
    black_box: "BlackBox",
    device: torch.device,
    max_edges: int,
    progress: Optional[ProgressFn],
) -> tuple[Tensor, Tensor]:
    """Logits of every instance on its full graph ``[N, C]`` and without each pair ``[Q, C]``.

    The copies (per instance: the full graph, then one copy per removed pair) are evaluated in
    chunks of at most ``max_edges`` directed edges (at least one copy per chunk).
    """
    n_inst = layout.size
    copies_per = layout.num_pairs + 1
    copy_inst = torch.repeat_interleave(torch.arange(n_inst), copies_per)
    copy_removed = segment_arange(copies_per) - 1  # -1: the full graph
    copy_edges = 2 * (layout.num_pairs[copy_inst] - (copy_removed >= 0).long())
    ends = torch.cumsum(copy_edges, 0).numpy()
    out: list[Tensor] = []
    total, start = int(copy_inst.numel()), 0
    while start < total:
        base = ends[start - 1] if start > 0 else 0
        stop = int(np.searchsorted(ends, base + max_edges, side="right"))
        stop = max(stop, start + 1)
        batch = _copies_batch(layout, copy_inst[start:stop], copy_removed[start:stop])
        out.append(black_box(batch if device.type == "cpu" else batch.to(device)).detach().cpu())
        report(progress, stop / total, f"Δ: {stop:,}/{total:,} graphs")
        start = stop
    logits = torch.cat(out, dim=0)
    is_full = copy_removed < 0
    return logits[is_full], logits[~is_full]


def _copies_batch(layout: _Layout, inst: Tensor, removed: Tensor) -> InstanceBatch:
    """One graph holding copy ``c`` = instance ``inst[c]`` without its pair ``removed[c]``."""
    n_copies = int(inst.numel())
    npairs = layout.num_pairs[inst]
    pair_copy = torch.repeat_interleave(torch.arange(n_copies), npairs)
    pair_local = segment_arange(npairs)
    keep = pair_local != removed[pair_copy]
    pair_copy, pair_local = pair_copy[keep], pair_local[keep]
    flat = layout.pair_ptr[:-1][inst[pair_copy]] + pair_local
    return layout.packed.copies_batch(inst, flat, pair_copy)
