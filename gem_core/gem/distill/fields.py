"""The flat fields of a distillation that the top-K rules read (:class:`DistillationFields`).

A typing protocol, so that ``topk``, ``walk`` and ``refine`` can name what they take without
importing :mod:`.result`, which imports them (no import cycle, not even for type checkers).
"""

from __future__ import annotations

from typing import Protocol

from torch import Tensor


class DistillationFields(Protocol):
    """What a top-K rule reads of a :class:`~gem_core.gem.distill.result.Distillation`."""

    pairs: Tensor
    pair_ptr: Tensor
    num_nodes: Tensor
    targets: Tensor
    labels: Tensor
    greedy_loss: Tensor
    delta: Tensor
    weights: Tensor
    kept: Tensor
    connected: bool
    tol: float

    def __len__(self) -> int: ...

    @property
    def num_pairs(self) -> Tensor: ...
