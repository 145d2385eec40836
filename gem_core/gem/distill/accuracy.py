"""Distillation accuracy: the target's accuracy on subgraphs keeping only chosen pairs
(:func:`topk_accuracy`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Optional, Union

import numpy as np
import torch
from torch import Tensor

from gem_core.data.instances import Instance
from gem_core.gem.distill.layout import _edge_budget, _Layout
from gem_core.models.targets import uses_edge_attr
from gem_core.runtime.device import resolve_device

if TYPE_CHECKING:  # pragma: no cover
    from gem_core.models.targets import BlackBox


def topk_accuracy(
    instances: Sequence[Instance],
    masks: Sequence[Tensor],
    black_box: "BlackBox",
    device: Union[str, torch.device, None] = "auto",
    max_edges_per_forward: Optional[int] = None,
) -> float:
    """Accuracy (vs. the true label) of the target on the subgraphs keeping only ``masks``.

    All nodes and features of each instance are kept; every other edge is deleted.
    """
    if len(instances) != len(masks):
        raise ValueError("need one mask per instance")
    if len(instances) == 0:
        return float("nan")
    dev = resolve_device(device)
    max_edges_per_forward = _edge_budget(max_edges_per_forward, dev)
    subs = [inst.subgraph(mask) for inst, mask in zip(instances, masks)]
    layout = _Layout.build(subs, edge_attr=uses_edge_attr(black_box))
    correct, start = 0, 0
    ends = torch.cumsum(2 * layout.num_pairs, 0).numpy()
    while start < layout.size:
        base = ends[start - 1] if start > 0 else 0
        stop = max(
            int(np.searchsorted(ends, base + max_edges_per_forward, side="right")), start + 1
        )
        part = layout.select(torch.arange(start, stop))
        logits = black_box(part.packed.forward_batch(interleaved=True, device=dev))
        correct += int((logits.argmax(-1).cpu() == part.labels).sum())
        start = stop
    return correct / layout.size
