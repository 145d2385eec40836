"""The distillation of one instance, step by step, for the "How it works" page.

The engine's :mod:`gem_core.distill` is batched and returns only the outcome; teaching needs every
intermediate graph. This replays the same algorithm (paper Appendix C, the conventions of
:mod:`gem_core.distill.reference`: ascending Δ with ties by pair index, a rise of at most ``tol``
counts as no rise, connectivity rule after each removal) and records each step. Its final
weights equal :func:`gem_core.distill.reference.reference_distill_one` (tested).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from gem_core.distill import TIE_TOL, cross_entropy
from gem_core.distill.reference import remove_pair
from gem_core.instances import Instance, collate


@dataclass
class Step:
    """One greedy step: edge ``pair`` was tried; ``accepted`` = its removal was kept."""

    number: int
    pair: int
    loss_before: float
    loss_after: float
    accepted: bool
    weight: float
    mask: Tensor          # pairs present after the step
    dropped_with: list[int]  # other pairs removed by the connectivity rule


@dataclass
class Trace:
    """Δ of every edge, the full-graph loss, the label, and the greedy steps in order."""

    delta: Tensor
    full_loss: float
    label: int
    steps: list[Step]
    weights: Tensor
    kept: Tensor


def _loss(black_box, instance: Instance, mask: Tensor, label: int) -> float:
    logits = black_box(collate([instance], [mask]))
    return float(cross_entropy(logits, torch.tensor([label]))[0])


def greedy_trace(instance: Instance, black_box, connected: bool, tol: float = TIE_TOL) -> Trace:
    """Δ of each edge, then the greedy pruning with every step recorded."""
    p = instance.num_pairs
    full = torch.ones(p, dtype=torch.bool)
    label = int(instance.y)
    full_loss = _loss(black_box, instance, full, label)
    delta = torch.zeros(p, dtype=torch.float64)
    for j in range(p):
        mask = full.clone()
        mask[j] = False
        delta[j] = _loss(black_box, instance, mask, label) - full_loss

    def key(j: int) -> tuple[int, int]:
        return int(round(float(delta[j]) / tol)), j

    current, current_loss = full.clone(), full_loss
    weights = torch.zeros(p, dtype=torch.float64)
    steps: list[Step] = []
    for j in sorted(range(p), key=key):
        if not current[j]:
            continue  # already dropped together with a component
        tentative = remove_pair(instance, current, j, connected)
        new_loss = _loss(black_box, instance, tentative, label)
        accepted = new_loss <= current_loss + tol
        dropped = [i for i in range(p) if i != j and current[i] and not tentative[i]]
        before = current_loss
        if accepted:
            current, current_loss = tentative, new_loss
        else:
            weights[j] = new_loss - current_loss
        steps.append(Step(len(steps) + 1, j, before, new_loss, accepted, float(weights[j]),
                          current.clone(), dropped if accepted else []))
    weights[~current] = 0.0
    return Trace(delta, full_loss, label, steps, weights, current)
