"""A PyG model seen as the engine's black box: only called, its outputs turned into logits.

Return types. Distillation compares cross-entropy losses, so outputs are turned into
cross-entropy-compatible logits: ``raw`` as is, ``log_probs`` as is (``log_softmax`` of
log-probabilities is the identity), ``probs`` through ``log``; ``binary_classification`` with one
output column becomes the two-class logits ``[0, z]`` (``raw``) or ``[log(1 - p), log p]``
(``probs``).

Regression (``mode="regression"``): the outputs are values, one column per prediction; the black
box returns them as they are, ``[instances, 1]``, and says ``regression = True``, so the
distillation compares squared errors (:mod:`gem_core.gem.distill.conventions`).

Several tasks: a model with one output column per task (a multi-task model, e.g. one logit per
assay) is explained for one of them, ``task_index``: that column is taken before anything
else, so each task is a single-output binary classifier or regressor of its own.
"""

from __future__ import annotations

from typing import Any, Optional, Union

import torch
from torch import Tensor, nn
from torch_geometric.explain.algorithm import ExplainerAlgorithm
from torch_geometric.explain.config import ModelMode, ModelReturnType

from gem_core.data.instances import InstanceBatch
from gem_core.pyg.edge_inputs import EdgeInputs

PROB_FLOOR = 1e-12  # probabilities are clipped to [1e-12, 1] before the log


def count_hops(model: nn.Module) -> int:
    """Number of ``MessagePassing`` submodules of ``model`` (module structure only, no weights)."""
    return ExplainerAlgorithm._num_hops(model)


def _task_column(out: Tensor, task_index: Optional[int]) -> Tensor:
    """The outputs of task ``task_index`` (one column of ``[rows, tasks]``), as ``[rows, 1]``."""
    if task_index is None:
        return out
    flat = out.reshape(out.size(0), -1)
    if not -flat.size(1) <= task_index < flat.size(1):
        raise ValueError(
            f"target_task={task_index} is out of range: the model returns {flat.size(1)} "
            f"output column{'s' * (flat.size(1) != 1)} per prediction"
        )
    return flat[:, task_index : task_index + 1 if task_index != -1 else None]


def model_outputs(
    out: Tensor, mode: ModelMode, return_type: ModelReturnType, task_index: Optional[int] = None
) -> Tensor:
    """Raw model outputs as the engine reads them: the task's column, then logits for a
    classifier (:func:`_logits`) or values ``[rows, 1]`` for a regressor."""
    out = _task_column(out, task_index)
    if mode == ModelMode.regression:
        values = out.float().reshape(out.size(0), -1)
        if values.size(1) != 1:
            raise ValueError(
                f"a regression model with {values.size(1)} outputs per prediction: name the one "
                f"to explain with fit(..., target_task=...)"
            )
        return values
    return _logits(out, mode, return_type)


def _logits(out: Tensor, mode: ModelMode, return_type: ModelReturnType) -> Tensor:
    """Model outputs as logits whose softmax is the model's class distribution."""
    out = out.float()
    if mode == ModelMode.binary_classification:
        if out.dim() > 1 and out.size(-1) != 1:
            raise ValueError(
                "binary_classification expects one output column per prediction (the logit or "
                f"probability of class 1), got outputs of shape {tuple(out.shape)}; use "
                "mode='multiclass_classification' for two-column outputs"
            )
        z = out.reshape(-1, 1)
        if return_type == ModelReturnType.probs:
            p = z.clamp(PROB_FLOOR, 1.0 - PROB_FLOOR)
            return torch.cat([torch.log1p(-p), torch.log(p)], dim=-1)
        return torch.cat([torch.zeros_like(z), z], dim=-1)
    if out.dim() != 2:
        raise ValueError(
            f"a classification model must return [rows, classes], got {tuple(out.shape)}"
        )
    if return_type == ModelReturnType.probs:
        return torch.log(out.clamp_min(PROB_FLOOR))
    return out  # raw logits, or log-probabilities (log_softmax is the identity on them)


class PyGBlackBox:
    """A PyG model seen only through its outputs: ``InstanceBatch -> logits [instances, C]``.

    Node level: ``model(x, edge_index, **kwargs)`` read at the target rows. Graph level:
    ``model(x, edge_index, batch=batch, **kwargs)``, one row per graph. Outputs are converted to
    cross-entropy-compatible logits (see the module docstring).

    Args:
        model: any ``nn.Module`` with PyG's ``forward(x, edge_index, ...)`` convention.
        task: ``"node"`` or ``"graph"``.
        mode, return_type: from the explainer's model config.
        device: where batches are evaluated (the device of the user's data).
        model_kwargs: extra non-tensor keyword arguments passed on every call.
        edge_inputs: the model's per-edge tensors (bond features, edge weights), which every
            batch then carries as rows and the model gets under their own names.
        task_index: the output column explained, for a model with one column per task.
    """

    def __init__(
        self,
        model: nn.Module,
        task: str,
        mode: Union[ModelMode, str],
        return_type: Union[ModelReturnType, str],
        device: Union[str, torch.device] = "cpu",
        model_kwargs: Optional[dict[str, Any]] = None,
        edge_inputs: Optional[EdgeInputs] = None,
        task_index: Optional[int] = None,
    ):
        self.model = model
        self.task = task
        self.mode = ModelMode(mode)
        self.return_type = ModelReturnType(return_type)
        self.device = torch.device(device)
        self.kwargs = dict(model_kwargs or {})
        self.edge_inputs = edge_inputs
        self.task_index = task_index
        #: a regressor: outputs are values, the distillation's loss the squared error
        self.regression = self.mode == ModelMode.regression
        #: a regressor's tolerance for the explain-time check (set by the fitted explainer)
        self.tolerance: Optional[float] = None
        #: batches built for this black box carry the per-edge rows (the engine's convention)
        self.uses_edge_attr = edge_inputs is not None
        self.num_classes = 0  # set by the first call (1 for a regressor: its one value)

    @torch.no_grad()
    def __call__(self, batch: InstanceBatch) -> Tensor:
        return self.forward(batch)

    def forward(self, batch: InstanceBatch) -> Tensor:
        """:meth:`__call__` with autograd on (the fidelity term reads the target on soft edge
        weights, :mod:`gem_core.gem.fidelity`)."""
        b = batch.to(self.device)
        kwargs = self.kwargs
        if self.edge_inputs is not None:
            kwargs = {**kwargs, **self.edge_inputs.model_kwargs(b.edge_attr, self.device)}
        if self.task == "node":
            out = self.model(b.x, b.edge_index, **kwargs)
            if out.size(0) != b.x.size(0):
                raise ValueError(
                    f"a node-level model must return one row per node: got "
                    f"{out.size(0)} rows for {b.x.size(0)} nodes"
                )
            out = out[b.target_index]
        else:
            out = self.model(b.x, b.edge_index, batch=b.batch, **kwargs)
            if out.size(0) != b.num_instances:
                raise ValueError(
                    f"a graph-level model must return one row per graph of `batch`: got "
                    f"{out.size(0)} rows for {b.num_instances} graphs"
                )
        logits = self.convert(out)
        self.num_classes = int(logits.size(-1))
        return logits

    def convert(self, out: Tensor) -> Tensor:
        """The model's raw output rows as the engine reads them (:func:`model_outputs`)."""
        return model_outputs(out, self.mode, self.return_type, self.task_index)
