"""Class probabilities of a target model (seen as a black box) on instances, optionally with only
some of each instance's pairs kept: the one forward-pass helper every layer above uses."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

import torch
from torch import Tensor

from gem_core.data.instances import Instance, collate

#: Nodes per forward where a caller bounds them (``max_nodes``: the screen; the check of Gem's
#: ranking). A forward's activations then stay in the CPU's caches: the strong Mutagenicity
#: target ran 2.5x faster per molecule in forwards of 250 molecules (about 7k nodes) than in one
#: forward of a 2,000-molecule screening chunk (55k nodes). The probabilities are the same up to
#: float rounding (5 of 100,000 screened molecules differed in the 9th digit: matrix kernels are
#: chosen by size), which is why the default stays one forward.
NODES_PER_FORWARD = 4096


def node_bounded_slices(num_nodes: Sequence[int], budget: int = NODES_PER_FORWARD) -> list[slice]:
    """Consecutive slices of instances with at most ``budget`` nodes each (an instance larger
    than the budget gets a slice of its own)."""
    slices, start, nodes = [], 0, 0
    for i, n in enumerate(num_nodes):
        if i > start and nodes + n > budget:
            slices.append(slice(start, i))
            start, nodes = i, 0
        nodes += int(n)
    if len(num_nodes):
        slices.append(slice(start, len(num_nodes)))
    return slices


def forward_slices(
    black_box, node_counts: Sequence[int], budget: Optional[int] = None
) -> list[slice]:
    """The runs of instances the target goes through: :func:`node_bounded_slices` of at most
    ``budget`` nodes (default :data:`NODES_PER_FORWARD`) on the CPU, where forwards that fit
    the caches are faster; one run on a GPU."""
    device = getattr(black_box, "device", None)
    if device is not None and torch.device(device).type != "cpu":
        return [slice(0, len(node_counts))]
    return node_bounded_slices(node_counts, NODES_PER_FORWARD if budget is None else budget)


@torch.no_grad()
def predict_proba(
    black_box,
    instances: Sequence[Instance],
    pair_masks: Optional[Sequence[Tensor]] = None,
    batch_size: Optional[int] = None,
    max_nodes: Optional[int] = None,
) -> Tensor:
    """Class probabilities ``[N, C]`` (CPU, float64) of the black box on the instances.

    ``pair_masks`` keeps only the selected pairs of each instance (others deleted).
    One forward pass, or one per chunk of ``batch_size`` instances, or one per run of
    instances with at most ``max_nodes`` nodes.
    """
    n = len(instances)
    if n == 0:
        raise ValueError("no instances to predict")
    if batch_size and max_nodes:
        raise ValueError("give batch_size or max_nodes, not both")
    if max_nodes:
        slices = node_bounded_slices([inst.num_nodes for inst in instances], int(max_nodes))
    else:
        step = int(batch_size) if batch_size else n
        slices = [slice(start, start + step) for start in range(0, n, step)]
    raw = _raw_outputs(black_box, instances, pair_masks, slices)
    return torch.cat([torch.softmax(part, dim=-1) for part in raw], dim=0)


def _raw_outputs(
    black_box,
    instances: Sequence[Instance],
    pair_masks: Optional[Sequence[Tensor]],
    slices: Sequence[slice],
) -> list[Tensor]:
    """The black box's outputs (CPU, float64) on each slice of the instances."""
    out = []
    for part in slices:
        masks = None if pair_masks is None else pair_masks[part]
        out.append(black_box(collate(instances[part], masks)).detach().to("cpu", torch.float64))
    return out


@torch.no_grad()
def predict_values(
    black_box,
    instances: Sequence[Instance],
    pair_masks: Optional[Sequence[Tensor]] = None,
    batch_size: Optional[int] = None,
) -> Tensor:
    """A regressor's values ``[N]`` (CPU, float64) on the instances (its one output column;
    ``pair_masks`` and ``batch_size`` as in :func:`predict_proba`)."""
    n = len(instances)
    if n == 0:
        raise ValueError("no instances to predict")
    step = int(batch_size) if batch_size else n
    slices = [slice(start, start + step) for start in range(0, n, step)]
    raw = _raw_outputs(black_box, instances, pair_masks, slices)
    return torch.cat([part.reshape(part.size(0), -1)[:, 0] for part in raw])
