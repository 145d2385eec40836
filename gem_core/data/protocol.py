"""The evaluation protocol: what happens to the nodes of deleted edges.

One concept shared by the distillation (Gem is taught to be sufficient under the rule it will be
judged by: :class:`~gem_core.gem.settings.GemSettings.protocol`), the faithfulness metrics
(:mod:`gem_core.evaluation.faithfulness`) and the batches both build
(:meth:`gem_core.data.packed.PackedGraphs.copies_batch`).

* ``keep_nodes``: every node and its features stay, only edges are deleted (like
  :func:`~gem_core.data.ranking.explanation_subgraph`; the protocol of this project's tables);
* ``drop_isolated`` (GNNX-Bench, Kosan et al., ICLR 2024): the nodes left without an edge are
  dropped before the forward pass. A node task's target node is never dropped; a graph-task
  instance left without any edge keeps its nodes (an empty graph has no prediction).

A regressor's prediction is a value, so "the same prediction" under either protocol is a value
within a tolerance of the whole instance's (:func:`regression_tolerance`), shared by the
faithfulness metrics and the explain-time check.
"""

from __future__ import annotations

from enum import Enum
from typing import Union

import torch

from gem_core.data.instances import Instance

__all__ = [
    "Protocol",
    "PROTOCOLS",
    "REGRESSION_REL_TOL",
    "check_protocol",
    "drop_isolated",
    "regression_tolerance",
]

#: a regressor's prediction "holds" within this share of the spread of its outputs
REGRESSION_REL_TOL = 0.1


def regression_tolerance(values: torch.Tensor, rel_tol: float = REGRESSION_REL_TOL) -> float:
    """The absolute tolerance within which a regressor's prediction counts as kept: ``rel_tol``
    times the standard deviation of ``values`` (the model's outputs on the whole instances;
    1.0 in place of a zero or undefined spread)."""
    if not rel_tol > 0:
        raise ValueError(f"rel_tol must be positive, got {rel_tol!r}")
    spread = float(values.double().std()) if values.numel() > 1 else 0.0
    return float(rel_tol) * (spread if spread > 0 else 1.0)


class Protocol(str, Enum):
    """What happens to the nodes of deleted edges (see the module docstring)."""

    KEEP_NODES = "keep_nodes"
    DROP_ISOLATED = "drop_isolated"

    def __str__(self) -> str:
        return self.value


PROTOCOLS: tuple[str, ...] = tuple(p.value for p in Protocol)


def check_protocol(protocol: Union[str, Protocol]) -> Protocol:
    """``protocol`` as a :class:`Protocol` (strings accepted); a clear ValueError otherwise."""
    if isinstance(protocol, Protocol):
        return protocol
    key = str(protocol).strip().lower()
    for p in Protocol:
        if p.value == key:
            return p
    raise ValueError(f"Unknown protocol {protocol!r}. Choose one of: {', '.join(PROTOCOLS)}.")


def drop_isolated(instance: Instance) -> Instance:
    """``instance`` without the nodes no pair touches (the target node always stays; a graph-task
    instance with no pair left keeps its nodes). Node features, ids and the target are relabelled."""
    n = instance.num_nodes
    keep = torch.zeros(n, dtype=torch.bool)
    keep[instance.pairs.reshape(-1)] = True
    if instance.target is not None:
        keep[int(instance.target)] = True
    if bool(keep.all()) or not bool(keep.any()):
        return instance
    new_id = torch.full((n,), -1, dtype=torch.long)
    new_id[keep] = torch.arange(int(keep.sum()))
    return Instance(
        x=instance.x[keep],
        pairs=new_id[instance.pairs],
        y=instance.y,
        target=None if instance.target is None else int(new_id[int(instance.target)]),
        edge_attr=instance.edge_attr,
        dataset=instance.dataset,
        index=instance.index,
        node_ids=None if instance.node_ids is None else instance.node_ids[keep],
        motif_mask=instance.motif_mask,
    )
