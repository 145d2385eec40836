"""Many instances as one disjoint graph whose edge mask is the concatenation of per-instance masks.

The batched baselines (GNNExplainer, Integrated Gradients) optimise or differentiate one edge
mask per instance. Packing the instances into one graph lets one forward/backward pass serve all
of them: the graphs are disjoint, so an instance's output depends on its own mask entries only,
and a sum of per-instance objectives has, for each mask entry, exactly the gradient that
instance's objective alone gives.

Nodes, the ``batch`` vector and the global target positions come from the engine's one packed
type, :class:`gem_core.data.packed.PackedGraphs`; its ``blocked_order`` lays the directed edges
out *instance by instance*,
each in the order PyG sees when it explains the instance alone (``instance.edge_index()``:
its pairs, then the same pairs reversed). So instance ``i``'s mask is the contiguous slice
``edge_ptr[i]:edge_ptr[i + 1]`` of the packed mask, every node aggregates its messages in the
same order as in the single-instance run, and a per-instance mask (PyG's shape and order) is
read back with :meth:`PackedInstances.split`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor, nn

from gem_core.data.instances import Instance
from gem_core.data.packed import PackedGraphs, directed_edges, directed_rows
from gem_core.explainers._pyg import graph_kwargs, node_kwargs


@dataclass
class PackedInstances:
    """A disjoint union of instances, edges grouped per instance in PyG's single-instance order.

    Attributes:
        x: stacked node features ``[N, d]``.
        edge_index: directed edges ``[2, E]``, instance ``i``'s at ``edge_ptr[i]:edge_ptr[i+1]``.
        edge_attr: features of every directed edge (bond-aware targets), else None.
        batch: instance id of every node ``[N]``.
        target_index: global position of each instance's explained node (node task), else None.
        edge_ptr: ``[B + 1]`` offsets of each instance's directed edges.
        num_nodes: nodes of each instance ``[B]`` (PyG's ``N`` in its mask initialisation).
        edge_owner: instance id of every directed edge ``[E]``.
    """

    x: Tensor
    edge_index: Tensor
    edge_attr: Optional[Tensor]
    batch: Tensor
    target_index: Optional[Tensor]
    edge_ptr: Tensor
    num_nodes: Tensor
    edge_owner: Tensor

    @property
    def num_instances(self) -> int:
        return int(self.num_nodes.numel())

    def split(self, values: Tensor) -> list[Tensor]:
        """Per-instance slices of a ``[E]`` (or ``[E, ...]``) tensor over the packed edges."""
        sizes = (self.edge_ptr[1:] - self.edge_ptr[:-1]).tolist()
        return list(torch.split(values, sizes, dim=0))

    def replicate(self, copies: int) -> "PackedInstances":
        """``copies`` disjoint copies of the whole pack (copy ``c``'s instances are numbered
        ``c * B + i``): one forward pass evaluates the pack at ``copies`` mask values."""
        if copies == 1:
            return self
        n, e, b = self.x.size(0), self.edge_index.size(1), self.num_instances
        dev = self.x.device
        node_shift = torch.arange(copies, device=dev).repeat_interleave(n) if n else None
        edge_shift = torch.arange(copies, device=dev).repeat_interleave(e)
        ei = self.edge_index.repeat(1, copies) + (edge_shift * n).unsqueeze(0)
        batch = self.batch.repeat(copies) + (node_shift * b if node_shift is not None else 0)
        target = None
        if self.target_index is not None:
            target = (
                self.target_index.repeat(copies)
                + torch.arange(copies, device=dev).repeat_interleave(b) * n
            )
        attr = (
            None
            if self.edge_attr is None
            else self.edge_attr.repeat(copies, *([1] * (self.edge_attr.dim() - 1)))
        )
        ptr = torch.cat([self.edge_ptr[:1]] + [self.edge_ptr[1:] + c * e for c in range(copies)])
        owner = self.edge_owner.repeat(copies) + edge_shift * b
        return PackedInstances(
            self.x.repeat(copies, 1),
            ei,
            attr,
            batch,
            target,
            ptr,
            self.num_nodes.repeat(copies),
            owner,
        )

    def forward(self, model: nn.Module, task: str, takes_num_graphs: bool) -> Tensor:
        """The model's raw output of every instance ``[B, C]`` (graph: pooled rows; node: the
        rows of the explained nodes), with whatever edge mask is set on the model."""
        if task == "node":
            out = model(self.x, self.edge_index, **node_kwargs(self.edge_attr))
            return out[self.target_index]
        kwargs = graph_kwargs(takes_num_graphs, self.batch, self.num_instances, self.edge_attr)
        return model(self.x, self.edge_index, **kwargs)


def release_masks(model: nn.Module) -> None:
    """PyG's ``clear_masks``, and the mask slot of every layer back to a plain attribute.

    A layer that once held an ``nn.Parameter`` mask keeps ``_edge_mask`` registered as a
    parameter, and PyG's ``set_masks`` then wraps any later plain mask in a *new* Parameter, cut
    from the tensor the caller differentiates (Captum's inputs, our path masks). Dropping the
    slot keeps every later explainer on the model working."""
    from torch_geometric.explain.algorithm.utils import clear_masks
    from torch_geometric.nn import MessagePassing

    clear_masks(model)
    for module in model.modules():
        if isinstance(module, MessagePassing) and "_edge_mask" in module._parameters:
            del module._parameters["_edge_mask"]
            module._edge_mask = None


def pack(instances: list[Instance], takes_edge_attr: bool, device: torch.device) -> PackedInstances:
    """Pack ``instances`` (all of one task level) into one :class:`PackedInstances`: the
    engine's packed graphs, with the directed edges in their instance-blocked order."""
    if takes_edge_attr and any(inst.edge_attr is None for inst in instances):
        raise ValueError("this target reads edge features (bond types); the instance has none")
    packed = PackedGraphs.from_instances(instances, edge_attr=takes_edge_attr)
    batch = packed.forward_batch(edge_attr=False)
    order = packed.blocked_order()
    edge_index = directed_edges(packed.pairs)[:, order]
    attr = None
    if takes_edge_attr:
        # every instance has edge features (checked above), and so has the pack
        assert packed.edge_attr is not None and instances[0].edge_attr is not None
        attr = directed_rows(packed.edge_attr.float())[order]
        attr = attr.reshape(-1, *instances[0].edge_attr.shape[1:])  # the instances' own shape
    counts = 2 * packed.pair_counts()
    return PackedInstances(
        x=batch.x.to(device),
        edge_index=edge_index.to(device),
        edge_attr=None if attr is None else attr.to(device),
        batch=batch.batch.to(device),
        target_index=None if batch.target_index is None else batch.target_index.to(device),
        edge_ptr=(2 * packed.pair_ptr).to(device),
        num_nodes=packed.node_counts().to(device),
        edge_owner=torch.repeat_interleave(torch.arange(len(instances)), counts).to(device),
    )


def chunks(instances: list[Instance], max_nodes: int) -> list[list[int]]:
    """Positions of ``instances`` cut into consecutive groups of at most ``max_nodes`` nodes
    (an instance larger than that is a group of its own): bounds the memory of one pack."""
    groups: list[list[int]] = []
    current: list[int] = []
    nodes = 0
    for i, inst in enumerate(instances):
        if current and nodes + inst.num_nodes > max_nodes:
            groups.append(current)
            current, nodes = [], 0
        current.append(i)
        nodes += inst.num_nodes
    if current:
        groups.append(current)
    return groups
