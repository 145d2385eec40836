"""Check what the PyG adapter assumes of a node-level model: that its prediction for a node depends
only on the node's ``num_hops``-hop computation graph.

The adapter counts the model's ``MessagePassing`` modules to get ``num_hops``. A model that applies
one layer several times (shared weights, ``for _ in range(3): x = conv(x, edge_index)``) has one
such module but a 3-hop receptive field, so Gem would distil subgraphs whose predictions differ
from the whole graph's. :func:`check_receptive_field` runs the model on a few training nodes'
cut computation graphs and on the whole graph, and refuses (a ``ValueError`` naming the smallest
``num_hops`` that does reproduce the outputs, when one up to ``hops + 4`` does) when they differ
and ``num_hops`` was counted; when the user gave ``num_hops``, it is their choice: a warning says
the same and the fit goes on.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

#: nodes checked (evenly spaced over the training nodes) and the tolerance on the class
#: probabilities (a regressor's values: relative to the largest of them). Not exact equality: a
#: normalised layer (GCN's 1/sqrt(deg u · deg v)) sees the
#: degree of a boundary node shrink in the cut, which moves a 2-layer GCN's probabilities by a
#: few hundredths without changing what it depends on or what it predicts (the paper's
#: computation graphs are these cuts); a missed hop moves them far more.
CHECKED_NODES = 5
PROB_TOL = 0.1


def _outputs(black_box, data: Any, nodes: Sequence[int], hops: int) -> tuple[Tensor, Tensor]:
    """(logits on the nodes' ``hops``-hop computation graphs, logits on the whole graph)."""
    from gem_core.data.instances import collate
    from gem_core.pyg.computation_graphs import GraphStructure, node_computation_graphs

    edge_inputs = getattr(black_box, "edge_inputs", None)
    tensors = {} if edge_inputs is None else {n: getattr(data, n) for n in edge_inputs.names}
    st = GraphStructure(data.edge_index, int(data.x.size(0)))
    pair_attr = (
        None if edge_inputs is None else edge_inputs.pair_rows(tensors, st.edge_pair, st.num_pairs)
    )
    graphs = node_computation_graphs(
        data.x, data.edge_index, list(nodes), hops, structure=st, pair_attr=pair_attr
    )
    cut = black_box(collate(graphs.instances)).cpu()
    with torch.no_grad():
        full = black_box.model(data.x, data.edge_index, **black_box.kwargs, **tensors)
    full = black_box.convert(full[torch.as_tensor(list(nodes), device=full.device)]).cpu()
    return cut, full


def _reproduces(black_box, data: Any, nodes: Sequence[int], hops: int) -> tuple[bool, float]:
    cut, full = _outputs(black_box, data, nodes, hops)
    if not cut.numel():
        return True, 0.0
    if getattr(black_box, "regression", False):  # values: the gap relative to their size
        scale = max(float(full.abs().max()), float(full.std()) if full.numel() > 1 else 0.0)
        gap = float((cut - full).abs().max()) / max(scale, 1e-8)
    else:
        gap = float((cut.softmax(-1) - full.softmax(-1)).abs().max())
    return gap <= PROB_TOL, gap  # a class flip within the tolerance is a near tie


def check_receptive_field(
    black_box, data: Any, nodes: Sequence[int], hops: int, counted: bool
) -> None:
    """Raise a ``ValueError`` (``counted``: ``hops`` was counted from the model's modules) or
    warn (``hops`` was given) when the model's outputs on a few of ``nodes`` differ between
    their ``hops``-hop computation graphs and the whole graph."""
    from torch_geometric.utils import is_undirected

    nodes = list(nodes)
    if not nodes or not is_undirected(data.edge_index, num_nodes=int(data.x.size(0))):
        return  # a directed graph is flagged already (warn_if_directed): Gem reads it undirected
    step = max(len(nodes) // CHECKED_NODES, 1)
    sample = nodes[::step][:CHECKED_NODES]
    ok, gap = _reproduces(black_box, data, sample, hops)
    if ok:
        return
    better = next(
        (h for h in range(hops + 1, hops + 5) if _reproduces(black_box, data, sample, h)[0]), None
    )
    source = (
        f"counted {hops} MessagePassing module{'s' * (hops != 1)} in the model"
        if counted
        else f"num_hops={hops} was given"
    )
    hint = (
        f"its outputs match on {better}-hop computation graphs: pass "
        f"GemExplainer(num_hops={better})"
        if better is not None
        else f"no cut up to {hops + 4} hops reproduces them (does the model read more than the "
        f"graph's structure, e.g. global state or random noise in eval mode?)"
    )
    message = (
        f"the model's outputs on the {hops}-hop computation graphs of nodes {sample} differ "
        f"from its outputs on the whole graph (largest difference {gap:.3g}): Gem {source}, but "
        f"the model's prediction depends on more (a layer applied several times, with shared "
        f"weights, counts once); {hint}."
    )
    if not counted:
        warnings.warn(message, UserWarning, stacklevel=3)
        return
    raise ValueError(message)
