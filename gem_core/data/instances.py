"""Instances: the computation graph of one prediction, and batching many into one graph.

An :class:`Instance` is the L-hop subgraph around a target node (node tasks) or a whole graph
(graph tasks). Its edges are kept as undirected *pairs* ``(u, v)`` with ``u < v``; the directed
``edge_index`` a GNN consumes is built from them, both directions, so an explanation is always
symmetric and every K counts undirected edges. Everything downstream works on lists of
instances and on their packings (:mod:`gem_core.data.packed`: :class:`PackedGraphs`, and the
:class:`InstanceBatch` a target reads) and never asks "node or graph?" again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional, Union

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.utils import k_hop_subgraph

from gem_core.data.datasets import GemDataset
from gem_core.data.packed import InstanceBatch, PackedGraphs, directed_edges

__all__ = [
    "Instance",
    "InstanceBatch",
    "to_pairs",
    "node_instance",
    "graph_instance",
    "dataset_instances",
    "split_instances",
    "collate",
]


@dataclass
class Instance:
    """The computation graph of one prediction.

    Attributes:
        x: node features ``[n, d]``.
        pairs: undirected edges ``[2, P]`` with ``pairs[0] < pairs[1]``, sorted.
        y: ground-truth label of the prediction (a class; a float for a regression target).
        target: position of the explained node inside this graph, or None for a graph task.
        edge_attr: optional per-pair edge features ``[P, a]`` (bond types for molecules).
        dataset: dataset name the instance came from ("" for user-made graphs).
        index: node id (node task) or graph id (graph task) in the dataset.
        node_ids: node ids of the original graph (node tasks), for drawing.
        motif_mask: optional ground-truth explanation per pair (synthetic datasets).
    """

    x: Tensor
    pairs: Tensor
    y: Union[int, float]
    target: Optional[int] = None
    edge_attr: Optional[Tensor] = None
    dataset: str = ""
    index: int = -1
    node_ids: Optional[Tensor] = None
    motif_mask: Optional[Tensor] = None

    @property
    def num_nodes(self) -> int:
        return int(self.x.size(0))

    @property
    def num_pairs(self) -> int:
        """Number of undirected edges (what K counts)."""
        return int(self.pairs.size(1))

    @property
    def task(self) -> str:
        return "graph" if self.target is None else "node"

    def edge_index(self, pair_mask: Optional[Tensor] = None) -> Tensor:
        """Directed ``[2, 2P']`` edge index of the kept pairs, both directions."""
        return directed_edges(self.pairs if pair_mask is None else self.pairs[:, pair_mask])

    def subgraph(self, pair_mask: Tensor) -> "Instance":
        """The same instance with only the pairs in ``pair_mask`` (all nodes and features kept)."""
        mask = pair_mask.bool()
        return Instance(
            x=self.x,
            pairs=self.pairs[:, mask],
            y=self.y,
            target=self.target,
            edge_attr=None if self.edge_attr is None else self.edge_attr[mask],
            dataset=self.dataset,
            index=self.index,
            node_ids=self.node_ids,
            motif_mask=None if self.motif_mask is None else self.motif_mask[mask],
        )


def to_pairs(
    edge_index: Tensor,
    num_nodes: int,
    edge_values: Optional[Tensor] = None,
) -> tuple[Tensor, Optional[Tensor]]:
    """Undirected, sorted, self-loop-free pairs ``u < v`` of a (possibly one-directional) edge index.

    ``edge_values`` (per directed edge, ``[E]`` or ``[E, a]``) are carried to the pairs; where
    both directions exist the value of the first occurrence is kept.
    """
    u, v = edge_index[0], edge_index[1]
    lo, hi = torch.minimum(u, v), torch.maximum(u, v)
    keep = lo != hi
    lo, hi = lo[keep], hi[keep]
    key = lo * num_nodes + hi
    uniq, inverse = torch.unique(key, sorted=True, return_inverse=True)
    pairs = (
        torch.stack([uniq // num_nodes, uniq % num_nodes])
        if uniq.numel()
        else torch.zeros(2, 0, dtype=torch.long)
    )
    values = None
    if edge_values is not None:
        vals = edge_values[keep]
        first = torch.full((uniq.numel(),), inverse.numel(), dtype=torch.long).scatter_reduce_(
            0, inverse, torch.arange(inverse.numel()), reduce="amin"
        )
        values = vals[first]
    return pairs, values


def node_instance(data: Data, node: int, num_hops: int = 3, dataset: str = "") -> Instance:
    """The ``num_hops``-hop computation graph of ``node`` in ``data``, relabelled."""
    subset, sub_ei, mapping, edge_sel = k_hop_subgraph(
        int(node), num_hops, data.edge_index, relabel_nodes=True, num_nodes=data.num_nodes
    )
    motif = getattr(data, "motif_edge_mask", None)
    pairs, motif_pairs = to_pairs(
        sub_ei, subset.numel(), None if motif is None else motif[edge_sel].float()
    )
    return Instance(
        x=data.x[subset],
        pairs=pairs,
        y=int(data.y[node]),
        target=int(mapping[0]),
        dataset=dataset,
        index=int(node),
        node_ids=subset,
        motif_mask=None if motif_pairs is None else motif_pairs > 0,
    )


def _label(value: Tensor) -> Union[int, float]:
    """A label tensor's value: a float for a regression target, else a class."""
    return float(value) if value.is_floating_point() else int(value)


def graph_instance(data: Data, index: int, dataset: str = "") -> Instance:
    """A whole graph as an instance (graph classification)."""
    edge_attr = getattr(data, "edge_attr", None)
    pairs, pair_attr = to_pairs(data.edge_index, data.num_nodes, edge_attr)
    return Instance(
        x=data.x,
        pairs=pairs,
        y=_label(data.y.view(-1)[0]),
        target=None,
        edge_attr=pair_attr,
        dataset=dataset,
        index=int(index),
    )


def dataset_instances(ds: GemDataset, indices: Union[Tensor, Sequence[int]]) -> list[Instance]:
    """Instances of ``ds`` for node ids (node task) or graph ids (graph task)."""
    idx = [int(i) for i in indices]
    if ds.task == "node":
        return [node_instance(ds.graph, i, ds.spec.num_hops, ds.name) for i in idx]
    assert ds.graphs is not None  # a graph task's dataset holds its graphs
    return [graph_instance(ds.graphs[i], i, ds.name) for i in idx]


def split_instances(ds: GemDataset, split: str) -> list[Instance]:
    """The explainer instances of one split (``train`` / ``val`` / ``test``)."""
    return dataset_instances(ds, ds.explain_split[split])


def collate(
    instances: Sequence[Instance],
    pair_masks: Optional[Sequence[Tensor]] = None,
    device: Union[str, torch.device, None] = None,
    edge_attr: Optional[bool] = None,
) -> InstanceBatch:
    """Batch instances (optionally keeping only the pairs in ``pair_masks``) into one graph.

    ``edge_attr``: carry the instances' edge features (both directions of every kept pair, like
    ``edge_index``); default: when every instance has them. The batch is
    :meth:`PackedGraphs.forward_batch <gem_core.data.packed.PackedGraphs.forward_batch>` of the
    packed instances.
    """
    packed = PackedGraphs.from_instances(instances, edge_attr=edge_attr)
    mask = None
    if pair_masks is not None:
        if len(pair_masks) != len(instances):
            raise ValueError("need one pair mask per instance")
        for i, (inst, m) in enumerate(zip(instances, pair_masks)):
            if m.numel() != inst.num_pairs:
                raise ValueError(
                    f"instance {i}: a pair mask of {m.numel()} entries for {inst.num_pairs} pairs"
                )
        mask = torch.cat([m.reshape(-1).bool() for m in pair_masks])
    return packed.forward_batch(mask, device=device)
