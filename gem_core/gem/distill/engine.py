"""The batched engine's entry point :func:`distill`: the layout, the Δ phase (:mod:`.delta`) and
the greedy phase (:mod:`.greedy`), into a :class:`~gem_core.gem.distill.result.Distillation`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Optional, Union

import torch

from gem_core.data.instances import Instance
from gem_core.gem.distill.conventions import (
    TIE_TOL,
    check_label_source,
    granger_loss,
    is_regression,
    predicted_labels,
)
from gem_core.gem.distill.delta import _removal_logits
from gem_core.gem.distill.greedy import _greedy
from gem_core.gem.distill.layout import _edge_budget, _Layout
from gem_core.gem.distill.result import Distillation
from gem_core.models.targets import uses_edge_attr
from gem_core.runtime.device import resolve_device
from gem_core.runtime.progress import ProgressFn, report, scaled

if TYPE_CHECKING:  # pragma: no cover
    from gem_core.models.targets import BlackBox


def distill(
    instances: Sequence[Instance],
    black_box: "BlackBox",
    *,
    connected: bool,
    label_source: str = "true",  # checked: "true" or "predicted"
    device: Union[str, torch.device, None] = "auto",
    max_edges_per_forward: Optional[int] = None,
    tol: float = TIE_TOL,
    progress: Optional[ProgressFn] = None,
) -> Distillation:
    """Distil every instance: Δ of every pair, then the greedy pruning (Appendix C).

    Args:
        instances: computation graphs (all node or all graph instances).
        black_box: the target, ``black_box(InstanceBatch) -> logits [num_instances, C]`` (a
            regressor, ``regression = True``: its values ``[num_instances, 1]``, the loss then the
            squared error, see :mod:`~gem_core.gem.distill.conventions`).
        connected: apply the connectivity rule (``DatasetSpec.connected``).
        label_source: losses against the true label (``"true"``) or the target's own prediction
            on the full graph (``"predicted"``).
        device: where batches are built (``"auto"``: CUDA when available).
        max_edges_per_forward: memory bound, directed edges per forward pass (default: 65,536
            on a CPU, where cache-sized chunks are fastest; 2,000,000 on CUDA).
        tol: tie tolerance (see :mod:`gem_core.gem.distill.conventions`).
        progress: optional ``progress(fraction, message)`` callback.
    Returns:
        the K-independent :class:`Distillation`; call :meth:`Distillation.topk` for any K.
    """
    check_label_source(label_source)
    if not tol > 0:
        raise ValueError(f"tol must be positive, got {tol}.")
    dev = resolve_device(device)
    max_edges_per_forward = _edge_budget(max_edges_per_forward, dev)
    start = time.perf_counter()
    regression = is_regression(black_box)
    layout = _Layout.build(instances, edge_attr=uses_edge_attr(black_box), regression=regression)
    n_delta = int((layout.num_pairs * (layout.num_pairs + 1)).sum())
    n_greedy = int((layout.num_pairs * layout.num_nodes).sum())
    split = n_delta / max(n_delta + n_greedy, 1)
    full_logits, removed_logits = _removal_logits(
        layout, black_box, dev, max_edges_per_forward, scaled(progress, 0.0, split)
    )
    labels = layout.labels if label_source == "true" else predicted_labels(full_logits, regression)
    full_loss = granger_loss(full_logits, labels)
    removed_loss = granger_loss(removed_logits, labels[layout.pair_owner])
    delta = removed_loss - full_loss[layout.pair_owner]
    effect = None
    if regression:  # the signed effect on the value itself: how much each pair raises it
        values = predicted_labels(full_logits, True).cpu()
        effect = values[layout.pair_owner] - predicted_labels(removed_logits, True).cpu()
    kept, weights, greedy_loss = _greedy(
        layout,
        delta,
        labels,
        full_loss,
        black_box,
        dev,
        connected,
        tol,
        max_edges_per_forward,
        scaled(progress, split, 1.0),
    )
    report(progress, 1.0, "done")
    dataset = instances[0].dataset if instances else ""
    return Distillation(
        pairs=layout.local_pairs,
        pair_ptr=layout.pair_ptr,
        num_nodes=layout.num_nodes,
        targets=layout.targets,
        indices=torch.tensor([inst.index for inst in instances]),
        labels=labels.cpu().double() if regression else labels.cpu().long(),
        full_loss=full_loss,
        greedy_loss=greedy_loss,
        delta=delta,
        weights=weights,
        kept=kept,
        connected=bool(connected),
        label_source=label_source,
        tol=float(tol),
        dataset=dataset,
        seconds=time.perf_counter() - start,
        effect=effect,
    )
