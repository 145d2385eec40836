"""The distillation's instances as one layout (their :class:`~gem_core.data.packed.PackedGraphs`
and labels) and the chunk size of its forward passes (at most ``max_edges`` directed edges).

Many graphs (single-pair-removed copies in the Δ phase, prefixes of a chunk in the greedy phase,
chosen pair subsets in ``refine`` and for the accuracy) form one disconnected graph, evaluated in
one forward pass per chunk; the packing builds those batches
(:meth:`~gem_core.data.packed.PackedGraphs.copies_batch`,
:meth:`~gem_core.data.packed.PackedGraphs.prefix_batches`,
:meth:`~gem_core.data.packed.PackedGraphs.forward_batch`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from gem_core.data.instances import Instance
from gem_core.data.packed import PackedGraphs

# Directed edges per forward pass. On a CPU, chunks that stay cache-resident are fastest
# (measured on the 2-core dev machine: ~65k edges beat 1M by ~1.6x); a GPU prefers big batches.
CPU_MAX_EDGES = 65_536
CUDA_MAX_EDGES = 2_000_000


def _edge_budget(max_edges: Optional[int], device: torch.device) -> int:
    """The chunk size: as given, else the device's default."""
    if max_edges is None:
        return CUDA_MAX_EDGES if device.type == "cuda" else CPU_MAX_EDGES
    if isinstance(max_edges, bool) or not isinstance(max_edges, int) or max_edges < 1:
        raise ValueError(f"max_edges_per_forward must be a positive integer, got {max_edges!r}.")
    return max_edges


@dataclass
class _Layout:
    """The distillation's view of its instances: their packing plus what only it needs.

    Attributes:
        packed: the instances as one :class:`~gem_core.data.packed.PackedGraphs` (edge features
            only when the target reads them).
        labels: ``[N]`` true labels (classes, or float64 values of a regression).
        num_nodes, num_pairs: ``[N]`` nodes and pairs of every instance.
        pair_owner: ``[Q]`` instance of every pair.
        targets: ``[N]`` target position within each instance, -1 for graph tasks.
    """

    packed: PackedGraphs
    labels: Tensor

    def __post_init__(self) -> None:
        self.num_nodes = self.packed.node_counts()
        self.num_pairs = self.packed.pair_counts()
        self.pair_owner = self.packed.pair_owner()
        local = self.packed.local_targets()
        self.targets = torch.full((self.size,), -1, dtype=torch.long) if local is None else local

    @classmethod
    def build(
        cls, instances: Sequence[Instance], edge_attr: bool = False, regression: bool = False
    ) -> "_Layout":
        """The layout of ``instances``; ``edge_attr``: keep their edge features too;
        ``regression``: their labels are values (float64), not classes."""
        if len(instances) == 0:
            raise ValueError("cannot distill an empty list of instances")
        if edge_attr and any(inst.edge_attr is None for inst in instances):
            raise ValueError("the target reads edge features, but some instances have none")
        if regression:
            labels = torch.tensor([float(inst.y) for inst in instances], dtype=torch.float64)
        else:
            labels = torch.tensor([int(inst.y) for inst in instances], dtype=torch.long)
        return cls(PackedGraphs.from_instances(instances, edge_attr=bool(edge_attr)), labels)

    def select(self, ids: Tensor) -> "_Layout":
        """The layout of the instances ``ids`` (in that order), without a Python loop."""
        return _Layout(self.packed.select(ids), self.labels[ids])

    @property
    def size(self) -> int:
        return self.packed.num_instances

    @property
    def pair_ptr(self) -> Tensor:
        return self.packed.pair_ptr

    @property
    def local_pairs(self) -> Tensor:
        """``[2, Q]`` the pairs in each instance's own node numbering."""
        return self.packed.local_pairs()
