"""What Gem's auto-encoder reads: instances packed into one graph, with their label columns.

Node tasks: one-hot hop distance to the target (``num_hops + 2`` columns). Graph tasks: one
active Weisfeiler-Lehman colour column per round (:class:`~gem_core.gem.labeling.WLLabeler`).
Optionally one more column per node, its degree bucket within the instance; optionally the
edge types (bond orders) counted per node beside the original node features. Packing and
labelling is the cacheable input side of an explanation (:class:`PreparedInstances`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from gem_core.data.packed import PackedGraphs
from gem_core.gem.labeling import WLLabeler, hop_columns, hop_distances

DEGREE_BUCKETS = 12  # degree one-hot: 0 … 7 exactly, then 8-15, 16-31, 32-63, 64+


def degree_columns(pairs: Tensor, num_nodes: int) -> Tensor:
    """Degree bucket (0 … ``DEGREE_BUCKETS - 1``) of every node of a packed graph.

    Degrees are counted within each instance (its undirected pairs): exact up to 7, then one
    bucket per power of two up to 64+.
    """
    deg = torch.bincount(pairs.reshape(-1).cpu(), minlength=int(num_nodes)).long()
    big = 5 + torch.floor(torch.log2(deg.clamp(min=1).double())).long()  # 8 -> 8, 16 -> 9, ...
    return torch.where(deg < 8, deg, big).clamp(max=DEGREE_BUCKETS - 1)


def label_columns(
    packed: PackedGraphs,
    num_hops: int,
    labeler: Optional[WLLabeler],
    degree_features: bool,
    label_dim: int,
    hops: Optional[Tensor] = None,
) -> Tensor:
    """Active label column(s) of every node ``[N, R]``: hop distance (node tasks; ``hops``: the
    distances when the caller has them, else a search finds them) or WL colours (graph tasks,
    ``labeler``), then with ``degree_features`` the degree bucket, which takes the last
    :data:`DEGREE_BUCKETS` of the ``label_dim`` columns."""
    if packed.targets is not None:  # a node task (a pack of graphs has no targets)
        dist = (
            hops
            if hops is not None
            else hop_distances(packed.pairs, packed.num_nodes, packed.targets, num_hops)
        )
        cols = hop_columns(dist, num_hops).unsqueeze(1)
    else:
        assert labeler is not None, "a graph task is labelled by its WL labeler"
        cols = labeler.columns(packed)
    if not degree_features:
        return cols
    base = label_dim - DEGREE_BUCKETS  # degree buckets are the last label columns
    deg = base + degree_columns(packed.pairs, packed.num_nodes).to(cols.device, cols.dtype)
    return torch.cat([cols, deg.unsqueeze(1)], dim=1)


def node_inputs(packed: PackedGraphs, edge_dim: int) -> Tensor:
    """The original node features, with ``edge_dim > 0`` each node's edge-type counts after
    them (for molecules: how many single, double and triple bonds it has)."""
    if not edge_dim:
        return packed.x
    counts = torch.zeros(packed.num_nodes, edge_dim)
    assert packed.edge_attr is not None  # edge_dim > 0: the pack carries the edge features
    attr = packed.edge_attr.float()
    counts.index_add_(0, packed.pairs[0], attr)
    counts.index_add_(0, packed.pairs[1], attr)
    return torch.cat([packed.x, counts], dim=1)


@dataclass
class PreparedInstances:
    """Explainer inputs of many instances, packed and labelled (the cacheable part of ``explain``).

    Attributes:
        packed: the instances as one disconnected graph.
        cols: active label column(s) of every node ``[N, R]`` (R = 1 for hop labels).
    """

    packed: PackedGraphs
    cols: Tensor

    @property
    def num_instances(self) -> int:
        return self.packed.num_instances

    def subset(self, index: Tensor) -> "PreparedInstances":
        """The prepared inputs of instances ``index`` (vectorised gather, no re-labelling)."""
        return PreparedInstances(
            self.packed.select(index), self.cols[self.packed.node_positions(index)]
        )
