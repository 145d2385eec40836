"""Helpers shared by the explainers that wrap PyG's white-box algorithms.

PyG's explainers give one mask value per *directed* edge of ``instance.edge_index()``, which is
``[pairs, pairs.flip(0)]``: directed edges ``e`` and ``e + P`` are the two directions of pair
``e``. A pair's score is the **max** of its two directions by default (``reduce="max"``: a pair
matters when either direction carries an important message, and deleting a pair deletes both
directions); ``reduce="mean"`` is available.

These methods need the target's ``nn.Module``: a deep copy is kept with frozen parameters, so the
black box the evaluation uses is untouched. Node models are called as ``model(x, edge_index)``,
graph models as ``model(x, edge_index, batch=..., num_graphs=...)`` (``num_graphs`` only when
the model's ``forward`` accepts it).
"""

from __future__ import annotations

import copy
import inspect
from typing import Literal, Optional

import torch
from torch import Tensor, nn

Reduce = Literal["max", "mean"]


def directed_to_pairs(
    edge_mask: Tensor, num_pairs: int, reduce: Reduce = "max", dtype: torch.dtype = torch.float32
) -> Tensor:
    """Per-pair scores ``[P]`` from a mask ``[2P]`` over ``[pairs, pairs.flip(0)]``."""
    m = edge_mask.detach().reshape(-1).to("cpu", dtype)
    if m.numel() != 2 * num_pairs:
        raise ValueError(f"edge mask of {m.numel()} values for {num_pairs} pairs")
    a, b = m[:num_pairs], m[num_pairs:]
    if reduce == "max":
        return torch.maximum(a, b)
    if reduce == "mean":
        return (a + b) / 2
    raise ValueError(f"reduce must be 'max' or 'mean', not {reduce!r}")


def check_task(task: str) -> str:
    if task not in ("node", "graph"):
        raise ValueError(f"task must be 'node' or 'graph', not {task!r}")
    return task


def frozen_copy(model: nn.Module, device: torch.device) -> nn.Module:
    """A deep copy of ``model`` in eval mode with frozen parameters (the original is untouched)."""
    m = copy.deepcopy(model).to(device).eval()
    for p in m.parameters():
        p.requires_grad_(False)
    return m


def model_config(task: str) -> dict:
    """PyG's ``model_config`` of our targets: multiclass classification on raw logits."""
    return dict(mode="multiclass_classification", task_level=task, return_type="raw")


def takes_num_graphs(model: nn.Module) -> bool:
    return "num_graphs" in inspect.signature(model.forward).parameters


def takes_edge_attr(model: nn.Module) -> bool:
    """Whether the model reads edge features (a bond-aware target)."""
    return "edge_attr" in inspect.signature(model.forward).parameters


def directed_edge_attr(instance, wanted: bool) -> Optional[Tensor]:
    """The instance's edge features for both directions of ``instance.edge_index()`` (when the
    model reads them), else None."""
    if not wanted:
        return None
    if instance.edge_attr is None:
        raise ValueError("this target reads edge features (bond types); the instance has none")
    attr = instance.edge_attr.float()
    return torch.cat([attr, attr], dim=0)


def graph_kwargs(
    model_takes_num_graphs: bool, batch: Tensor, num_graphs: int, edge_attr: Optional[Tensor] = None
) -> dict:
    """Keyword arguments of a graph-level forward pass: ``batch`` (and ``num_graphs``, and the
    edge features of a bond-aware target), in the model's argument order."""
    kwargs: dict = {"batch": batch}
    if model_takes_num_graphs:
        kwargs["num_graphs"] = num_graphs
    if edge_attr is not None:
        kwargs["edge_attr"] = edge_attr
    return kwargs


def node_kwargs(edge_attr: Optional[Tensor]) -> dict:
    """Keyword arguments of a node-level forward pass (edge features of a bond-aware target)."""
    return {} if edge_attr is None else {"edge_attr": edge_attr}


def run_on_instance(
    explainer,
    instance,
    task: str,
    device: torch.device,
    model_takes_num_graphs: bool,
    model_takes_edge_attr: bool,
    **kwargs,
):
    """A PyG ``Explainer`` on one instance's computation graph: at its target node (node task)
    or on the whole graph as a batch of one (graph task), with the bonds of a bond-aware model.

    Captum's explainers pass the extra inputs to the model positionally, in this order."""
    x, ei = instance.x.to(device), instance.edge_index().to(device)
    attr = directed_edge_attr(instance, model_takes_edge_attr)
    attr = None if attr is None else attr.to(device)
    if task == "node":
        return explainer(x, ei, index=int(instance.target), **node_kwargs(attr), **kwargs)
    batch = torch.zeros(instance.num_nodes, dtype=torch.long, device=device)
    return explainer(x, ei, **graph_kwargs(model_takes_num_graphs, batch, 1, attr), **kwargs)
