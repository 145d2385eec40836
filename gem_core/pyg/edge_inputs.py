"""Per-edge tensors a PyG model reads besides ``edge_index`` (bond features, edge weights).

Molecule models read bond features (``GINEConv``, ``AttentiveFP``, ``NNConv``, ``GATv2Conv`` or
``TransformerConv`` with ``edge_dim``, ``PNAConv``), others an ``edge_weight``. Gem distils the
model on subgraphs, so these tensors must follow the edges: deleting an edge deletes its row.
The engine carries one float matrix of per-pair features through every cut, deletion, copy and
protocol (:class:`~gem_core.data.packed.PackedGraphs` ``edge_attr``); :class:`EdgeInputs` packs
the model's per-edge tensors into that matrix (one row per undirected pair, read from the first
of its directed edges) and unpacks a batch's rows into the keyword arguments the model takes,
with their own shapes and dtypes (integer bond types stay integers).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import Tensor

#: the keyword arguments of a model's forward that hold one row per directed edge
EDGE_INPUT_NAMES = ("edge_attr", "edge_weight")


@dataclass(frozen=True)
class EdgeInput:
    """One per-edge tensor: its keyword, its shape after the edge dimension and its dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def width(self) -> int:
        """Columns it takes in the packed float matrix."""
        return int(torch.Size(self.shape).numel())


@dataclass(frozen=True)
class EdgeInputs:
    """The per-edge tensors of a model, in a fixed order."""

    inputs: tuple[EdgeInput, ...]

    @classmethod
    def of(cls, tensors: Mapping[str, Any], num_edges: int) -> Optional["EdgeInputs"]:
        """The per-edge tensors among ``tensors`` (keywords of :data:`EDGE_INPUT_NAMES`), or
        None when there are none; a clear error when one has not one row per edge."""
        found = []
        for name in EDGE_INPUT_NAMES:
            value = tensors.get(name)
            if value is None:
                continue
            if not isinstance(value, Tensor):
                raise ValueError(f"{name} must be a tensor with one row per edge")
            if value.dim() == 0 or value.size(0) != num_edges:
                raise ValueError(
                    f"{name} has shape {tuple(value.shape)}: it needs one row per edge of "
                    f"edge_index ({num_edges})"
                )
            found.append(EdgeInput(name, tuple(int(s) for s in value.shape[1:]), value.dtype))
        return cls(tuple(found)) if found else None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.inputs)

    def describe(self) -> str:
        return ", ".join(
            f"{i.name} {list(i.shape)} {str(i.dtype).replace('torch.', '')}" for i in self.inputs
        )

    def check_same(self, other: Optional["EdgeInputs"]) -> None:
        """A clear error when the tensors given now are not the ones Gem was fitted with."""
        if other != self:
            got = "none" if other is None else other.describe()
            raise ValueError(
                f"Gem was fitted on a model that reads {self.describe()}; this call gives "
                f"{got}. Pass the same per-edge tensors when explaining, e.g. "
                f"explainer(x, edge_index, {self.inputs[0].name}=...)"
            )

    def pair_rows(self, tensors: Mapping[str, Tensor], edge_pair: Tensor, num_pairs: int) -> Tensor:
        """``[num_pairs, width]`` float: each undirected pair's features, from the first of
        its directed edges (``edge_pair``: pair id of every directed edge, -1 for self-loops).
        Warns when the two directions of a pair carry different features (Gem treats graphs
        as undirected)."""
        flat = torch.cat(
            [
                tensors[i.name].detach().reshape(edge_pair.numel(), -1).float().cpu()
                for i in self.inputs
            ],
            1,
        )
        edge_pair = edge_pair.cpu()
        real = edge_pair >= 0
        order = torch.argsort(edge_pair[real], stable=True)
        ids = edge_pair[real][order]
        rows = flat[real][order]
        out = torch.zeros(num_pairs, flat.size(1))
        first = torch.ones(ids.numel(), dtype=torch.bool)
        first[1:] = ids[1:] != ids[:-1]
        out[ids[first]] = rows[first]
        if bool((out[ids] != rows).any()):
            warnings.warn(
                "the two directions of an edge carry different edge features: Gem treats graphs "
                "as undirected and reads the first direction's",
                stacklevel=3,
            )
        return out

    def model_kwargs(self, rows: Optional[Tensor], device: torch.device) -> dict[str, Tensor]:
        """A batch's per-edge rows ``[E, width]`` as the model's keyword arguments, each with
        its own shape and dtype."""
        if rows is None:
            raise ValueError("the batch lacks the edge features this model reads")
        out, at = {}, 0
        for i in self.inputs:
            part = rows[:, at : at + i.width]
            at += i.width
            if not i.dtype.is_floating_point:
                part = part.round()
            out[i.name] = part.reshape(rows.size(0), *i.shape).to(device=device, dtype=i.dtype)
        return out


def model_reads(model: Any, name: str) -> bool:
    """Whether ``model.forward`` takes the keyword ``name`` (by name, or through ``**kwargs``)."""
    import inspect

    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind == p.VAR_KEYWORD for p in params.values())


def fit_edge_inputs(model: Any, data: Any, level: str) -> Optional[EdgeInputs]:
    """The per-edge tensors a fit carries: those of :data:`EDGE_INPUT_NAMES` that the graphs
    given to ``fit`` hold (the first graph at graph level) and the model's forward takes."""
    from torch_geometric.data import Data

    if isinstance(data, Data):
        sample = data
    else:
        try:
            sample = data[0]
        except (TypeError, IndexError, KeyError):
            return None
    if not isinstance(sample, Data) or sample.edge_index is None:
        return None  # fit's own checks say what is wrong
    tensors = {n: getattr(sample, n, None) for n in EDGE_INPUT_NAMES if model_reads(model, n)}
    return EdgeInputs.of(tensors, int(sample.edge_index.size(1)))
