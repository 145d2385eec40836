"""Conventions shared by the batched engine and the reference: the label a loss is computed
against, the loss itself, and how nearly equal numbers are ordered.

Classifiers and regressors. A classifier's labels are class indices (an integer tensor) and its
loss is the cross-entropy of its logits; a regressor's labels are numbers (a floating tensor:
the value to explain, the model's own output on the whole graph under ``label_source=
"predicted"``) and its loss is the squared error of its one output column. The label tensor's
dtype says which (:func:`granger_loss`), so every phase that compares losses serves both; a
black box says it is a regressor with ``regression = True`` (:func:`is_regression`).

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


def granger_loss(outputs: Tensor, labels: Tensor) -> Tensor:
    """Per-row loss in float64: cross-entropy for class labels (integer), squared error of the
    one output column for regression labels (floating)."""
    if labels.is_floating_point():
        out = outputs.double()
        if out.dim() == 2:
            if out.size(1) != 1:
                raise ValueError(
                    f"a regression target has one output per prediction, got {out.size(1)}"
                )
            out = out[:, 0]
        return (out - labels.to(out.device, torch.float64)) ** 2
    return cross_entropy(outputs, labels)


def is_regression(black_box) -> bool:
    """Whether a black box is a regressor (its outputs are values, not class logits)."""
    return bool(getattr(black_box, "regression", False))


def predicted_labels(outputs: Tensor, regression: bool) -> Tensor:
    """The labels a model's own outputs give: the argmax class, or the value (float64)."""
    if regression:
        out = outputs.double()
        return out[:, 0] if out.dim() == 2 else out
    return outputs.argmax(-1)


def order_key(values: Tensor, tol: float = TIE_TOL) -> Tensor:
    """Integer sort key: values closer than about ``tol`` fall into the same bucket (a tie)."""
    if tol <= 0:
        raise ValueError(f"tol must be positive, got {tol}.")
    return torch.round(values.double() / tol).to(torch.int64)
