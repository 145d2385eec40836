"""Gem's pair scores written to a user's directed edges, and the top-K threshold that fits them.

Edge masks. The engine scores undirected pairs ``{u, v}``; each pair's score is written to every
directed edge of the user's ``edge_index`` joining ``u`` and ``v`` (both directions get the same
value). Edges outside the explained computation graphs, and self-loops, get 0. Several nodes in
one call give one joint mask, the maximum over the nodes, and one sparse row per node.

Top-K policy. Gem's budget ``k`` counts *undirected* edges. PyG's ``topk`` threshold counts
*entries* of ``edge_mask``, i.e. directed edges. With a coalesced symmetric ``edge_index`` (PyG's
``to_undirected`` convention: every undirected edge stored once per direction), pass
``value=2 * K`` to keep exactly ``K`` undirected edges, both directions of each: scores of
different pairs are made pairwise distinct (:func:`distinct_scores`) and every in-graph score is
positive. :func:`topk_config` builds that threshold config.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch
from torch import Tensor

from gem_core.data.packed import segment_arange
from gem_core.pyg.computation_graphs import ComputationGraphs

MIN_SCORE = 1e-30  # smallest in-graph score, so a thresholded mask keeps every selected edge


def topk_config(k: int) -> dict[str, Any]:
    """PyG ``threshold_config`` keeping the ``k`` best *undirected* edges of a symmetric graph."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    return dict(threshold_type="topk", value=2 * k)


def distinct_scores(scores: Tensor, segments: Optional[Tensor] = None) -> Tensor:
    """Positive float32 scores made pairwise distinct within each segment, order kept.

    Scores are ranked by (score descending, position ascending); a score tied with (or nudged
    onto) its predecessor is lowered by one unit in the last place, so the ranking is strict,
    ties go to the lower position, and values move by a few ulps at most. Scores are clipped to
    ``[MIN_SCORE, 1]`` first.
    """
    s = scores.detach().float().cpu().clamp(MIN_SCORE, 1.0).contiguous()
    if s.numel() <= 1:
        return s
    bits = s.view(torch.int32).numpy().astype(np.int64)  # positive floats: int order == float order
    seg = (
        np.zeros(s.numel(), dtype=np.int64)
        if segments is None
        else segments.detach().cpu().numpy().astype(np.int64)
    )
    # one stable sort on (segment, descending score); equal keys keep their position order
    order = np.argsort((seg << 32) | ((1 << 31) - 1 - bits), kind="stable")
    sb, sseg = bits[order], seg[order]
    i = np.arange(s.numel(), dtype=np.int64)
    big = np.int64(1) << 33  # beyond any bits + position: isolates segments in the running minimum
    run = np.minimum.accumulate(sb + i - sseg * big) + sseg * big - i
    out = np.empty_like(bits)
    out[order] = np.maximum(run, 1)
    return torch.from_numpy(out.astype(np.int32).view(np.float32))


def edge_masks(
    graphs: ComputationGraphs,
    scores: Tensor,
    keep: Optional[list[int]],
    device: torch.device,
    per_node: bool,
) -> tuple[Tensor, Optional[Tensor]]:
    """Pair scores written to the user's directed edges: the joint mask (max over the
    instances, or over the instances in ``keep``) and, on request, one row per instance."""
    owner, ids = graphs.pair_owner, graphs.pair_ids
    pair_score = torch.zeros(graphs.num_pairs + 1)  # last slot: self-loops (edge_pair -1)
    kept_ids, kept = ids, scores
    if keep is not None:  # the pairs of the kept instances only
        sel = torch.isin(owner, torch.tensor(keep, dtype=torch.long))
        kept_ids, kept = ids[sel], scores[sel]
    if kept_ids.numel():
        pair_score.scatter_reduce_(0, kept_ids, kept, reduce="amax", include_self=True)
        covered = torch.zeros(graphs.num_pairs + 1, dtype=torch.bool)
        covered[kept_ids] = True
        pair_score[covered] = distinct_scores(pair_score[covered])
    edge_mask = pair_score[graphs.edge_pair].to(device)
    per = None
    if per_node:
        # one sparse row per instance: its pair scores written to the pairs' directed edges
        st = graphs.structure
        assert st is not None  # per-node rows are asked of node-level graphs, which keep theirs
        num_edges = int(graphs.edge_pair.numel())
        counts = st.edge_ptr[ids + 1] - st.edge_ptr[ids]
        starts = torch.repeat_interleave(st.edge_ptr[ids], counts)
        edges = st.edge_order[starts + segment_arange(counts)]
        rows = torch.repeat_interleave(owner, counts)
        values = torch.repeat_interleave(distinct_scores(scores, owner), counts)
        # every (row, edge) entry occurs once; left uncoalesced (no sort): .coalesce() sorts
        per = torch.sparse_coo_tensor(
            torch.stack([rows, edges]), values, (len(graphs), num_edges), check_invariants=False
        ).to(device)
    return edge_mask, per


def node_mask_from_edges(edge_mask: Tensor, edge_index: Tensor, num_nodes: int) -> Tensor:
    """``[num_nodes, 1]``: each node's best edge score (PyG's ``node_mask_type="object"``
    shape), 0 for a node without an edge: an atom matters when one of its bonds does."""
    out = edge_mask.new_zeros(num_nodes)
    if edge_mask.numel():
        ends = torch.cat([edge_index[0], edge_index[1]])
        out = out.scatter_reduce(0, ends, edge_mask.repeat(2), reduce="amax", include_self=True)
    return out.view(-1, 1)
