"""Many instances packed into one disconnected graph: :class:`PackedGraphs`, the one packing.

Every collection of instances the engine evaluates or labels is one of these: the batches of the
target model (:func:`gem_core.data.instances.collate`), the explainer's inputs (hop / WL labels,
:mod:`gem_core.gem.inputs`), the distillation's layout (:mod:`gem_core.gem.distill.layout`) and
the computation graphs cut from a user's PyG graph (:mod:`gem_core.pyg.computation_graphs`).
This module is the one place that offsets each instance's nodes, builds the segment pointers
and expands the undirected pairs to the directed edges a GNN reads.

Directed edges come in two orders, both kept because a GNN's sums run in edge order (another
order changes the floats):

* *blocked* (the default): every kept pair ``(u, v)`` in pair order, then every ``(v, u)``;
* *interleaved*: ``(u0, v0), (v0, u0), (u1, v1), …``, pair ``j`` owning directed edges ``2j``
  and ``2j + 1``, so the pairs of a prefix of instances are a prefix of the edges
  (:class:`PrefixBatches`, the distillation's greedy phase).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union

import numpy as np
import torch
from torch import Tensor

Device = Union[str, torch.device]


# ----------------------------------------------------------------------------- segments


def segment_ptr(counts: Tensor) -> Tensor:
    """Segment pointers ``[0, c0, c0 + c1, …]`` (``len(counts) + 1`` entries) of segment sizes:
    segment ``i`` is ``ptr[i]:ptr[i + 1]`` of the flat tensors."""
    return torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])


def segment_arange(counts: Tensor) -> Tensor:
    """``cat([arange(c) for c in counts])`` without a Python loop."""
    total = int(counts.sum())
    if total == 0:
        return torch.zeros(0, dtype=torch.long, device=counts.device)
    starts = torch.cumsum(counts, 0) - counts
    return torch.arange(total, device=counts.device) - torch.repeat_interleave(starts, counts)


def np_segment_arange(counts: np.ndarray) -> np.ndarray:
    """:func:`segment_arange` for numpy arrays."""
    total = int(counts.sum())
    return np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)


def segment_ranges(starts: Tensor, counts: Tensor) -> Tensor:
    """``cat([arange(s, s + c) for s, c in zip(starts, counts)])`` without a Python loop."""
    return torch.repeat_interleave(starts, counts) + segment_arange(counts)


# ----------------------------------------------------------------------------- directions


def directed_edges(pairs: Tensor, interleaved: bool = False) -> Tensor:
    """Both directions of every pair ``[2, P]``: ``[2, 2P]``, blocked or interleaved."""
    if interleaved:
        return torch.stack([pairs, pairs.flip(0)], dim=2).reshape(2, -1)
    return torch.cat([pairs, pairs.flip(0)], dim=1)


def directed_rows(values: Tensor, interleaved: bool = False) -> Tensor:
    """Per-pair rows ``[P, …]`` repeated for both directions, aligned with :func:`directed_edges`."""
    if interleaved:
        return values.repeat_interleave(2, dim=0)
    return torch.cat([values, values], dim=0)


def _feature_rows(edge_attr: Tensor) -> Tensor:
    """Per-pair edge features as a float matrix ``[P, a]`` (one-dimensional labels: ``a = 1``)."""
    return (edge_attr if edge_attr.dim() == 2 else edge_attr.reshape(-1, 1)).float()


# ----------------------------------------------------------------------------- the forward batch


@dataclass
class InstanceBatch:
    """Many instances as one disconnected graph, ready for one forward pass of the target.

    Attributes:
        x: stacked node features.
        edge_index: directed edges (both directions of every kept pair), offset per instance.
        batch: instance id of every node.
        target_index: global position of each instance's target node (node tasks) or None.
        num_instances: number of instances.
        edge_attr: features of every directed edge, aligned with ``edge_index`` (bond types),
            when the batch was built with them (for targets that read them), else None.
    """

    x: Tensor
    edge_index: Tensor
    batch: Tensor
    target_index: Optional[Tensor]
    num_instances: int
    edge_attr: Optional[Tensor] = None

    @staticmethod
    def concat(batches: Sequence["InstanceBatch"]) -> "InstanceBatch":
        """The batches as one (their instances in order): one forward of the target instead of
        several, whose outputs split back by ``num_instances``."""
        if len(batches) == 1:
            return batches[0]
        nodes = torch.tensor([0] + [b.x.size(0) for b in batches[:-1]]).cumsum(0).tolist()
        owners = torch.tensor([0] + [b.num_instances for b in batches[:-1]]).cumsum(0).tolist()
        nodes_only = [b.target_index is None for b in batches]
        attrs = [b.edge_attr is None for b in batches]
        if len(set(nodes_only)) > 1 or len(set(attrs)) > 1:
            raise ValueError("batches of different tasks or edge features cannot be joined")
        return InstanceBatch(
            torch.cat([b.x for b in batches]),
            torch.cat([b.edge_index + n for b, n in zip(batches, nodes)], 1),
            torch.cat([b.batch + o for b, o in zip(batches, owners)]),
            None
            if nodes_only[0]
            else torch.cat([b.target_index + n for b, n in zip(batches, nodes)]),
            sum(b.num_instances for b in batches),
            # all or none of the batches have edge features (checked above)
            None
            if attrs[0]
            else torch.cat([b.edge_attr for b in batches if b.edge_attr is not None]),
        )

    def to(self, device: Device) -> "InstanceBatch":
        return InstanceBatch(
            self.x.to(device),
            self.edge_index.to(device),
            self.batch.to(device),
            None if self.target_index is None else self.target_index.to(device),
            self.num_instances,
            None if self.edge_attr is None else self.edge_attr.to(device),
        )


# ----------------------------------------------------------------------------- packed graphs


@dataclass
class PackedGraphs:
    """Instances concatenated into one disconnected graph (nodes and pairs offset per instance).

    Instance ``i`` owns nodes ``node_ptr[i]:node_ptr[i + 1]`` and pairs
    ``pair_ptr[i]:pair_ptr[i + 1]``, in its own order.

    Attributes:
        x: stacked node features ``[N, d]`` (as the instances hold them; see
            :meth:`float_features`).
        pairs: undirected pairs ``[2, P]`` (u < v) with global node positions.
        node_ptr: ``[B + 1]`` start of each instance's nodes (CSR-style pointer).
        pair_ptr: ``[B + 1]`` start of each instance's pairs.
        targets: ``[B]`` global position of each instance's target node, or None (graph task).
        edge_attr: per-pair features ``[P, a]`` (bond types), or None.
    """

    x: Tensor
    pairs: Tensor
    node_ptr: Tensor
    pair_ptr: Tensor
    targets: Optional[Tensor]
    edge_attr: Optional[Tensor] = None

    # ------------------------------------------------------------------ building
    @classmethod
    def from_segments(
        cls,
        x: Tensor,
        local_pairs: Tensor,
        node_counts: Tensor,
        pair_counts: Tensor,
        local_targets: Optional[Tensor] = None,
        edge_attr: Optional[Tensor] = None,
    ) -> "PackedGraphs":
        """Packed graphs from flat per-instance segments in each instance's own node numbering.

        Args:
            x: stacked node features ``[N, d]``.
            local_pairs: stacked pairs ``[2, P]``, each in its instance's own node numbering.
            node_counts, pair_counts: ``[B]`` nodes and pairs of every instance.
            local_targets: ``[B]`` target position within each instance, or None (graph task).
            edge_attr: per-pair features ``[P, a]``, or None.
        """
        node_ptr, pair_ptr = segment_ptr(node_counts), segment_ptr(pair_counts)
        pairs = local_pairs if local_pairs.dtype == torch.long else local_pairs.long()
        if pairs.numel():
            pairs = pairs + torch.repeat_interleave(node_ptr[:-1], pair_counts)
        targets = None if local_targets is None else node_ptr[:-1] + local_targets
        return cls(x, pairs, node_ptr, pair_ptr, targets, edge_attr)

    @classmethod
    def from_instances(
        cls, instances: Sequence[Any], edge_attr: Optional[bool] = None
    ) -> "PackedGraphs":
        """Concatenate instances (:class:`~gem_core.data.instances.Instance`, all node task or
        all graph task), in their order.

        ``edge_attr``: carry the instances' per-pair edge features (as a float ``[P, a]``
        matrix): None (default) when every instance has them, True always (an error when one
        lacks them), False never.
        """
        if len(instances) == 0:
            raise ValueError("cannot pack an empty list of instances")
        graph_flags = [inst.target is None for inst in instances]
        if any(graph_flags) and not all(graph_flags):
            raise ValueError("cannot pack node-task and graph-task instances together")
        xs = [inst.x for inst in instances]
        widths = {x.size(1) for x in xs}
        if len(widths) != 1:
            raise ValueError(f"instances have different feature widths: {sorted(widths)}")
        pairs = [
            inst.pairs
            if inst.pairs.dim() == 2 and inst.pairs.size(0) == 2
            else inst.pairs.reshape(2, -1)
            for inst in instances
        ]
        node_counts = torch.tensor([x.size(0) for x in xs], dtype=torch.long)
        pair_counts = torch.tensor([p.size(1) for p in pairs], dtype=torch.long)
        local_targets = None
        if not graph_flags[0]:
            local_targets = torch.tensor([int(inst.target) for inst in instances], dtype=torch.long)
            if bool(((local_targets < 0) | (local_targets >= node_counts)).any()):
                raise ValueError("an instance's target position lies outside its nodes")
        has_attr = [inst.edge_attr is not None for inst in instances]
        if edge_attr and not all(has_attr):
            raise ValueError(
                "edge features (edge_attr) were asked for, but some instances have none"
            )
        attr = None
        if edge_attr or (edge_attr is None and all(has_attr)):
            attr = torch.cat([_feature_rows(inst.edge_attr) for inst in instances], dim=0)
        return cls.from_segments(
            torch.cat(xs, dim=0),
            torch.cat(pairs, dim=1),
            node_counts,
            pair_counts,
            local_targets,
            attr,
        )

    def float_features(self) -> "PackedGraphs":
        """These graphs with float32 node features (what Gem's explainer network reads); the
        same object when they already are."""
        if self.x.dtype == torch.float32:
            return self
        return PackedGraphs(
            self.x.float(), self.pairs, self.node_ptr, self.pair_ptr, self.targets, self.edge_attr
        )

    # ------------------------------------------------------------------ sizes and owners
    @property
    def num_instances(self) -> int:
        return int(self.node_ptr.numel()) - 1

    @property
    def num_nodes(self) -> int:
        return int(self.node_ptr[-1])

    @property
    def num_pairs(self) -> int:
        return int(self.pair_ptr[-1])

    @property
    def task(self) -> str:
        return "graph" if self.targets is None else "node"

    def node_counts(self) -> Tensor:
        return self.node_ptr[1:] - self.node_ptr[:-1]

    def pair_counts(self) -> Tensor:
        return self.pair_ptr[1:] - self.pair_ptr[:-1]

    def node_offsets(self) -> Tensor:
        """``[B]`` global position of each instance's first node."""
        return self.node_ptr[:-1]

    def node_owner(self) -> Tensor:
        """``[N]`` instance of every node (the ``batch`` vector of PyG)."""
        return torch.repeat_interleave(torch.arange(self.num_instances), self.node_counts())

    def pair_owner(self) -> Tensor:
        """``[P]`` instance of every pair."""
        return torch.repeat_interleave(torch.arange(self.num_instances), self.pair_counts())

    def local_pairs(self) -> Tensor:
        """The pairs ``[2, P]`` in each instance's own node numbering."""
        return self.pairs - torch.repeat_interleave(self.node_ptr[:-1], self.pair_counts())

    def local_targets(self) -> Optional[Tensor]:
        """``[B]`` position of each instance's target within its own nodes, or None."""
        return None if self.targets is None else self.targets - self.node_ptr[:-1]

    def split_nodes(self, values: Tensor) -> list[Tensor]:
        """A per-node tensor ``[N, …]`` cut into one part per instance."""
        return list(torch.split(values, self.node_counts().tolist()))

    def split_pairs(self, values: Tensor, dim: int = 0) -> list[Tensor]:
        """A per-pair tensor (pairs along ``dim``) cut into one part per instance."""
        return list(torch.split(values, self.pair_counts().tolist(), dim=dim))

    def edge_labels(self) -> Optional[Tensor]:
        """The edge type of every pair (argmax of ``edge_attr``), or None without edge features."""
        if self.edge_attr is None:
            return None
        if self.edge_attr.numel() == 0:
            return torch.zeros(self.num_pairs, dtype=torch.long)
        return self.edge_attr.argmax(dim=1)

    def edge_index(self, interleaved: bool = False) -> Tensor:
        """Directed edges, both directions of every pair ``[2, 2P]``."""
        return directed_edges(self.pairs, interleaved)

    # ------------------------------------------------------------------ subsets
    def node_positions(self, index: Tensor) -> Tensor:
        """Global node positions of instances ``index`` (in that order, matching :meth:`select`)."""
        index = index.long()
        return segment_ranges(self.node_ptr[:-1][index], self.node_counts()[index])

    def pair_positions(self, index: Tensor) -> Tensor:
        """Global pair positions of instances ``index`` (in that order, matching :meth:`select`)."""
        index = index.long()
        return segment_ranges(self.pair_ptr[:-1][index], self.pair_counts()[index])

    def select(self, index: Tensor) -> "PackedGraphs":
        """The packed sub-collection of instances ``index`` (in that order; repeats allowed),
        vectorised: equals packing those instances again. Use :meth:`node_positions` /
        :meth:`pair_positions` to gather per-node / per-pair extras."""
        index = index.long()
        p_counts = self.pair_counts()[index]
        nodes = self.node_positions(index)
        pair_idx = self.pair_positions(index)
        node_ptr = segment_ptr(self.node_counts()[index])
        shift = node_ptr[:-1] - self.node_ptr[:-1][index]
        pairs = self.pairs[:, pair_idx] + torch.repeat_interleave(shift, p_counts)
        targets = None if self.targets is None else self.targets[index] + shift
        edge_attr = None if self.edge_attr is None else self.edge_attr[pair_idx]
        return PackedGraphs(
            self.x[nodes], pairs, node_ptr, segment_ptr(p_counts), targets, edge_attr
        )

    # ------------------------------------------------------------------ forward batches
    def _batch_attr(self, edge_attr: Optional[bool]) -> Optional[Tensor]:
        if edge_attr and self.edge_attr is None:
            raise ValueError("the batch needs edge features (edge_attr), which these graphs lack")
        return self.edge_attr if edge_attr or edge_attr is None else None

    def forward_batch(
        self,
        pair_mask: Optional[Tensor] = None,
        *,
        edge_attr: Optional[bool] = None,
        interleaved: bool = False,
        device: Optional[Device] = None,
    ) -> InstanceBatch:
        """What the target model reads: all instances, keeping the pairs in ``pair_mask``.

        Args:
            pair_mask: bool ``[P]`` over the pairs (None: all of them).
            edge_attr: carry the edge features of the kept pairs (both directions, aligned with
                ``edge_index``): None when these graphs have them, True (they must), False never.
            interleaved: direction order of ``edge_index`` (see the module notes).
            device: where the batch goes (None: stays on the CPU).
        """
        pairs, attr = self.pairs, self._batch_attr(edge_attr)
        if pair_mask is not None:
            keep = pair_mask.bool()
            if keep.numel() != self.num_pairs:
                raise ValueError(
                    f"a pair mask of {keep.numel()} entries for {self.num_pairs} pairs"
                )
            pairs = pairs[:, keep]
            attr = None if attr is None else attr[keep]
        out = InstanceBatch(
            self.x,
            directed_edges(pairs, interleaved),
            self.node_owner(),
            self.targets,
            self.num_instances,
            None if attr is None else directed_rows(attr, interleaved),
        )
        return out if device is None else out.to(device)

    def copies_batch(
        self,
        inst: Tensor,
        pair_index: Tensor,
        pair_copy: Tensor,
        *,
        edge_attr: Optional[bool] = None,
        drop_isolated: bool = False,
    ) -> InstanceBatch:
        """One forward batch of copies: copy ``c`` is instance ``inst[c]`` (all its nodes)
        keeping its pairs ``pair_index[pair_copy == c]`` (global pair positions), in that order.
        Directed edges blocked.

        ``drop_isolated``: each copy keeps only the nodes its pairs touch, and its target (the
        ``drop_isolated`` protocol, :mod:`gem_core.data.protocol`); a graph-task copy without
        any pair keeps all its nodes. Nodes keep their instance's order."""
        if drop_isolated:
            return self._dropped_copies_batch(inst, pair_index, pair_copy, edge_attr)
        n_copies = int(inst.numel())
        nodes = self.node_counts()[inst]
        node_ptr = segment_ptr(nodes)
        shift = node_ptr[:-1] - self.node_ptr[:-1][inst]  # packed node position -> copy's
        pairs = self.pairs[:, pair_index] + shift[pair_copy]
        targets = None if self.targets is None else self.targets[inst] + shift
        attr = self._batch_attr(edge_attr)
        attr = None if attr is None else directed_rows(attr[pair_index])
        batch = torch.repeat_interleave(torch.arange(n_copies), nodes)
        return InstanceBatch(
            self.x[self.node_positions(inst)], directed_edges(pairs), batch, targets, n_copies, attr
        )

    def _dropped_copies_batch(
        self, inst: Tensor, pair_index: Tensor, pair_copy: Tensor, edge_attr: Optional[bool]
    ) -> InstanceBatch:
        """:meth:`copies_batch` under ``drop_isolated``: the kept nodes of every copy found with
        one ``unique`` over (copy, packed node) keys, no Python loop over copies."""
        n_copies = int(inst.numel())
        total = max(self.num_nodes, 1)
        ends = self.pairs[:, pair_index]  # packed node positions of each kept pair's ends
        keys = [pair_copy * total + ends[0], pair_copy * total + ends[1]]
        if self.targets is not None:
            keys.append(torch.arange(n_copies) * total + self.targets[inst])
        has_pair = torch.zeros(n_copies, dtype=torch.bool)
        has_pair[pair_copy] = True
        empty = torch.nonzero(~has_pair).view(-1)
        if empty.numel() and self.targets is None:  # a graph copy without pairs keeps its nodes
            counts = self.node_counts()[inst[empty]]
            nodes = self.node_positions(inst[empty])
            keys.append(torch.repeat_interleave(empty, counts) * total + nodes)
        uniq, inverse = torch.unique(torch.cat(keys), return_inverse=True)
        m = int(pair_copy.numel())
        pairs = torch.stack([inverse[:m], inverse[m : 2 * m]])
        targets = None
        if self.targets is not None:
            targets = inverse[2 * m : 2 * m + n_copies]
        attr = self._batch_attr(edge_attr)
        attr = None if attr is None else directed_rows(attr[pair_index])
        return InstanceBatch(
            self.x[uniq % total], directed_edges(pairs), uniq // total, targets, n_copies, attr
        )

    def blocked_order(self) -> Tensor:
        """The directed edges laid out instance by instance, each block as that instance alone
        gives them (its pairs, then the same pairs reversed: what PyG sees when it explains one
        instance), as positions into the default order of :func:`directed_edges` over all pairs
        (all forward, then all reversed). Instance ``i``'s block is ``2 * pair_ptr[i]`` to
        ``2 * pair_ptr[i + 1]``; apply the same positions to per-edge rows."""
        counts = self.pair_counts()
        owner = torch.repeat_interleave(torch.arange(self.num_instances), 2 * counts)
        local = segment_arange(2 * counts)
        size, base = counts[owner], self.pair_ptr[:-1][owner]
        return torch.where(local < size, base + local, self.num_pairs + base + local - size)

    def prefix_batches(self, device: Device, edge_attr: Optional[bool] = None) -> "PrefixBatches":
        """Batches of the first ``m`` instances with a subset of their pairs, prepared once on
        ``device`` (:class:`PrefixBatches`)."""
        return PrefixBatches(self, device, edge_attr)


class PrefixBatches:
    """Forward batches of the first ``m`` instances of packed graphs, keeping some of their pairs.

    Everything is prepared once on the device (directed edges interleaved, so the pairs of the
    first ``m`` instances are a prefix of the edges; the batch vector; the targets), so a batch
    only slices and applies one boolean mask. Calling it gives an :class:`InstanceBatch`.
    """

    def __init__(self, packed: PackedGraphs, device: Device, edge_attr: Optional[bool] = None):
        self.device = torch.device(device)
        self.node_ptr = packed.node_ptr.tolist()
        self.pair_ptr = packed.pair_ptr.tolist()
        self.edges = packed.edge_index(interleaved=True).to(self.device)
        self.x = packed.x.to(self.device)
        self.batch = packed.node_owner().to(self.device)
        self.targets = None if packed.targets is None else packed.targets.to(self.device)
        attr = packed._batch_attr(edge_attr)
        self.attr = None if attr is None else directed_rows(attr, interleaved=True).to(self.device)

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
