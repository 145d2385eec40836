"""Conventions shared by the batched engine and the reference: the label a loss is computed
against, the loss itself, and how nearly equal numbers are ordered.

Floating-point noise: a batched forward pass and a one-graph forward pass may differ in the last
bits, so two numbers closer than ``tol`` (default :data:`TIE_TOL` = 1e-6) count as equal: Δ and
weights are ordered by ``round(value / tol)`` then pair index, and a loss rise of at most ``tol``
counts as "no rise". :mod:`gem_core.gem.distill.reference` follows the same conventions.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

LabelSource = Literal["true", "predicted"]
LABEL_SOURCES: tuple[str, ...] = ("true", "predicted")
TIE_TOL = 1e-6


def check_label_source(label_source: str) -> str:
    """Validate ``label_source`` (``"true"`` or ``"predicted"``)."""
    if label_source not in LABEL_SOURCES:
        raise ValueError(f"label_source must be 'true' or 'predicted', got {label_source!r}.")
    return label_source


def cross_entropy(logits: Tensor, labels: Tensor) -> Tensor:
    """Per-row cross-entropy in float64 (the loss Δ and the greedy phase compare)."""
    return F.cross_entropy(logits.double(), labels.to(logits.device), reduction="none")


def order_key(values: Tensor, tol: float = TIE_TOL) -> Tensor:
    """Integer sort key: values closer than about ``tol`` fall into the same bucket (a tie)."""
    if tol <= 0:
        raise ValueError(f"tol must be positive, got {tol}.")
    return torch.round(values.double() / tol).to(torch.int64)
