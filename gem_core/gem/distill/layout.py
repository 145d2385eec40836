"""Instances flattened into one layout (nodes, pairs, segment pointers) and the batches built
from it for the black box, in forward passes of at most ``max_edges`` directed edges.

Many graphs (single-pair-removed copies in the Δ phase, prefixes of a chunk in the greedy phase,
chosen pair subsets in ``refine`` and for the accuracy) form one disconnected graph, evaluated in
one forward pass per chunk.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch
from torch import Tensor

from gem_core.data.instances import Instance, InstanceBatch
from gem_core.gem.distill.segments import (_exclusive_cumsum, _gather_segments, segment_arange,
                                           segment_ptr)


# Directed edges per forward pass. On a CPU, chunks that stay cache-resident are fastest
# (measured on the 2-core dev machine: ~65k edges beat 1M by ~1.6x); a GPU prefers big batches.
CPU_MAX_EDGES = 65_536
CUDA_MAX_EDGES = 2_000_000


def _rows(edge_attr: Tensor) -> Tensor:
    """Per-pair edge features as a float matrix ``[P, a]`` (one-dimensional labels: ``a = 1``)."""
    return (edge_attr if edge_attr.dim() == 2 else edge_attr.reshape(-1, 1)).float()


def _edge_budget(max_edges: Optional[int], device: torch.device) -> int:
    """The chunk size: as given, else the device's default."""
    if max_edges is None:
        return CUDA_MAX_EDGES if device.type == "cuda" else CPU_MAX_EDGES
    if isinstance(max_edges, bool) or not isinstance(max_edges, int) or max_edges < 1:
        raise ValueError(f"max_edges_per_forward must be a positive integer, got {max_edges!r}.")
    return max_edges


@dataclass
class _Layout:
    """Instances flattened: nodes, pairs (global node ids) and segment pointers."""

    x: Tensor            # [Nn, d]
    pairs: Tensor        # [2, Q] global node ids
    local_pairs: Tensor  # [2, Q] local node ids
    node_ptr: Tensor     # [N + 1]
    pair_ptr: Tensor     # [N + 1]
    num_nodes: Tensor    # [N]
    num_pairs: Tensor    # [N]
    targets: Tensor      # [N] local target or -1
    labels: Tensor       # [N] true labels
    pair_owner: Tensor   # [Q]
    edge_attr: Optional[Tensor] = None  # [Q, a] per-pair features, for targets that read them

    @classmethod
    def build(cls, instances: Sequence[Instance], edge_attr: bool = False) -> "_Layout":
        """The layout of ``instances``; ``edge_attr``: keep their edge features too."""
        if len(instances) == 0:
            raise ValueError("cannot distill an empty list of instances")
        tasks = {inst.task for inst in instances}
        if len(tasks) != 1:
            raise ValueError("cannot distill node and graph instances together")
        num_nodes = torch.tensor([inst.num_nodes for inst in instances], dtype=torch.long)
        num_pairs = torch.tensor([inst.num_pairs for inst in instances], dtype=torch.long)
        node_ptr, pair_ptr = segment_ptr(num_nodes), segment_ptr(num_pairs)
        local = torch.cat([inst.pairs.long() for inst in instances], dim=1)
        owner = torch.repeat_interleave(torch.arange(len(instances)), num_pairs)
        pairs = local + node_ptr[:-1][owner]
        targets = torch.tensor([-1 if inst.target is None else int(inst.target) for inst in instances])
        labels = torch.tensor([int(inst.y) for inst in instances], dtype=torch.long)
        x = torch.cat([inst.x for inst in instances], dim=0)
        attr = None
        if edge_attr:
            if any(inst.edge_attr is None for inst in instances):
                raise ValueError("the target reads edge features, but some instances have none")
            attr = torch.cat([_rows(inst.edge_attr) for inst in instances], dim=0)
        return cls(x, pairs, local, node_ptr, pair_ptr, num_nodes, num_pairs, targets, labels,
                   owner, attr)

    @property
    def size(self) -> int:
        return int(self.num_nodes.numel())

    @property
    def is_node_task(self) -> bool:
        return bool((self.targets >= 0).any())


class _PrefixBatcher:
    """Builds the batch of the first ``m`` instances of a layout with a subset of their pairs.

    Everything is precomputed once (both edge directions interleaved, the batch vector, the
    targets, all on the device), so a step only slices and applies one boolean mask.
    """

    def __init__(self, layout: _Layout, device: torch.device):
        self.device = device
        self.node_ptr = layout.node_ptr.tolist()
        self.pair_ptr = layout.pair_ptr.tolist()
        pairs = layout.pairs
        # columns (u0, v0), (v0, u0), (u1, v1), ...: pair j owns directed edges 2j and 2j + 1
        self.edges = torch.stack([pairs, pairs.flip(0)], dim=2).reshape(2, -1).to(device)
        self.x = layout.x.to(device)
        self.batch = torch.repeat_interleave(torch.arange(layout.size), layout.num_nodes).to(device)
        self.targets = None
        if layout.is_node_task:
            self.targets = (layout.node_ptr[:-1] + layout.targets).to(device)
        self.attr = (None if layout.edge_attr is None
                     else layout.edge_attr.repeat_interleave(2, dim=0).to(device))

    def __call__(self, m: int, pair_mask: Optional[np.ndarray] = None) -> InstanceBatch:
        """Instances ``[0, m)`` keeping the pairs where ``pair_mask`` (over their pairs) is set."""
        n_nodes, n_pairs = self.node_ptr[m], self.pair_ptr[m]
        edges = self.edges[:, : 2 * n_pairs]
        attr = None if self.attr is None else self.attr[: 2 * n_pairs]
        if pair_mask is not None:
            keep = torch.from_numpy(np.repeat(pair_mask, 2)).to(self.device, non_blocking=True)
            edges = edges[:, keep]
            attr = None if attr is None else attr[keep]
        target = None if self.targets is None else self.targets[:m]
        return InstanceBatch(self.x[:n_nodes], edges, self.batch[:n_nodes], target, m, attr)


def _build_from(layout: _Layout, ids: Tensor) -> _Layout:
    """The sub-layout of instances ``ids`` (in that order), without a Python loop."""
    nodes, npairs = layout.num_nodes[ids], layout.num_pairs[ids]
    node_ptr, pair_ptr = segment_ptr(nodes), segment_ptr(npairs)
    node_src = torch.repeat_interleave(layout.node_ptr[:-1][ids], nodes) + segment_arange(nodes)
    local = _gather_segments(layout.local_pairs.t(), layout.pair_ptr, ids).t()
    owner = torch.repeat_interleave(torch.arange(ids.numel()), npairs)
    pairs = local + node_ptr[:-1][owner]
    attr = (None if layout.edge_attr is None
            else _gather_segments(layout.edge_attr, layout.pair_ptr, ids))
    return _Layout(layout.x[node_src], pairs.contiguous(), local.contiguous(), node_ptr, pair_ptr,
                   nodes, npairs, layout.targets[ids], layout.labels[ids], owner, attr)


def _subsets_batch(layout: _Layout, inst: Tensor, flat: Tensor, pair_copy: Tensor) -> InstanceBatch:
    """One graph holding copy ``c`` = instance ``inst[c]`` keeping only its pairs ``flat`` (layout
    pair ids) where ``pair_copy == c``."""
    n_copies = int(inst.numel())
    nodes = layout.num_nodes[inst]
    node_off = _exclusive_cumsum(nodes)
    node_src = torch.repeat_interleave(layout.node_ptr[:-1][inst], nodes) + segment_arange(nodes)
    x = layout.x[node_src]
    batch = torch.repeat_interleave(torch.arange(n_copies), nodes)
    pairs = layout.local_pairs[:, flat] + node_off[pair_copy]
    edge_index = torch.cat([pairs, pairs.flip(0)], dim=1)
    target = None
    if layout.is_node_task:
        target = node_off + layout.targets[inst]
    attr = None
    if layout.edge_attr is not None:
        attr = layout.edge_attr[flat]
        attr = torch.cat([attr, attr], dim=0)
    return InstanceBatch(x, edge_index, batch, target, n_copies, attr)
