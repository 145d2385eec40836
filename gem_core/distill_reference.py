"""Plain reference implementation of the distillation (paper Appendix C): the test oracle.

One instance at a time, one edge at a time, one forward pass per removal, networkx for the
connected components. Slow but obviously faithful; :mod:`gem_core.distill` must agree with it.
It follows the same conventions as the batched engine (see :mod:`gem_core.distill`): Δ and
weights are ordered by ``(round(value / tol), pair index)`` and a loss rise of at most ``tol``
counts as "no rise".
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import networkx as nx
import torch
from torch import Tensor

from .config import check_k
from .distill import TIE_TOL, check_label_source, cross_entropy
from .instances import Instance, collate

if TYPE_CHECKING:  # pragma: no cover
    from .targets import BlackBox


@dataclass
class ReferenceResult:
    """K-independent distillation of one instance (same meaning as in :mod:`gem_core.distill`)."""

    delta: Tensor      # [P] float64
    weights: Tensor    # [P] float64
    kept: Tensor       # [P] bool
    label: int
    full_loss: float
    greedy_loss: float


def _key(value: float, tol: float) -> int:
    return int(round(value / tol))


def _loss(instance: Instance, mask: Tensor, black_box: "BlackBox", label: int) -> float:
    """Loss of the target on ``instance`` keeping only the pairs in ``mask``."""
    logits = black_box(collate([instance], [mask]))
    return float(cross_entropy(logits, torch.tensor([label]))[0])


def keep_component(instance: Instance, mask: Tensor) -> Tensor:
    """Connectivity rule: keep only the pairs of one component of the graph ``mask``.

    Node task: the component of the target node. Graph task: the largest component by number
    of nodes; ties go to the component holding the lowest node id.
    """
    graph = nx.Graph()
    graph.add_nodes_from(range(instance.num_nodes))
    pairs = instance.pairs
    for j in range(instance.num_pairs):
        if mask[j]:
            graph.add_edge(int(pairs[0, j]), int(pairs[1, j]))
    if instance.target is not None:
        component = nx.node_connected_component(graph, instance.target)
    else:
        component = max(nx.connected_components(graph), key=lambda c: (len(c), -min(c)))
    out = mask.clone()
    for j in range(instance.num_pairs):
        if out[j] and int(pairs[0, j]) not in component:
            out[j] = False
    return out


def reference_distill_one(instance: Instance, black_box: "BlackBox", connected: bool,
                          label_source: str = "true", tol: float = TIE_TOL) -> ReferenceResult:
    """Δ of every pair and the greedy pruning of one instance."""
    check_label_source(label_source)
    p = instance.num_pairs
    full = torch.ones(p, dtype=torch.bool)
    logits = black_box(collate([instance], [full]))
    label = int(instance.y) if label_source == "true" else int(logits.argmax(-1)[0])
    full_loss = float(cross_entropy(logits, torch.tensor([label]))[0])

    delta = torch.zeros(p, dtype=torch.float64)
    for j in range(p):
        mask = full.clone()
        mask[j] = False
        delta[j] = _loss(instance, mask, black_box, label) - full_loss

    order = sorted(range(p), key=lambda j: (_key(float(delta[j]), tol), j))
    current, current_loss = full.clone(), full_loss
    weights = torch.zeros(p, dtype=torch.float64)
    for j in order:
        if not current[j]:
            continue  # already dropped together with a component
        tentative = current.clone()
        tentative[j] = False
        if connected:
            tentative = keep_component(instance, tentative)
        new_loss = _loss(instance, tentative, black_box, label)
        if new_loss <= current_loss + tol:
            current, current_loss = tentative, new_loss
        else:
            weights[j] = new_loss - current_loss
    weights[~current] = 0.0
    return ReferenceResult(delta, weights, current, label, full_loss, current_loss)


def reference_distill(instances: Sequence[Instance], black_box: "BlackBox", connected: bool,
                      label_source: str = "true", tol: float = TIE_TOL) -> list[ReferenceResult]:
    """:func:`reference_distill_one` for every instance."""
    return [reference_distill_one(inst, black_box, connected, label_source, tol)
            for inst in instances]


def reference_topk(instance: Instance, result: ReferenceResult, k: int, connected: bool,
                   tol: float = TIE_TOL) -> Tensor:
    """Top-K mask of one instance: walk the kept pairs in ascending (weight, index) and remove
    while more than ``k`` remain, applying the connectivity rule after each removal."""
    check_k(k)
    mask = result.kept.clone()
    if int(mask.sum()) <= k:
        return mask
    remaining = [j for j in range(instance.num_pairs) if mask[j]]
    remaining.sort(key=lambda j: (_key(float(result.weights[j]), tol), j))
    for j in remaining:
        if int(mask.sum()) <= k:
            break
        if not mask[j]:
            continue
        mask[j] = False
        if connected:
            mask = keep_component(instance, mask)
    return mask


def reference_topk_all(instances: Sequence[Instance], results: Sequence[ReferenceResult], k: int,
                       connected: bool, tol: float = TIE_TOL) -> list[Tensor]:
    """:func:`reference_topk` for every instance."""
    return [reference_topk(inst, res, k, connected, tol) for inst, res in zip(instances, results)]


__all__ = ["ReferenceResult", "keep_component", "reference_distill", "reference_distill_one",
           "reference_topk", "reference_topk_all"]
