"""Top-K ranking of edge scores: the one place that decides which pairs an explanation keeps.

Every explainer hands over one score per undirected pair of an instance (higher = more
important). :func:`topk_mask` keeps the K highest (ties broken by the lower pair index, never
more than K pairs, all pairs when K >= P; NaN ranks lowest, tied with -inf); :func:`ranked_pairs`,
:func:`rank_scores`, :func:`tied_at_cut` and :func:`topk_overlap` read the same order; :func:`roc_auc` is the
rank statistic of scores against a 0/1 labelling. The explanation subgraph keeps the top-K pairs
(all nodes kept, other edges deleted, not masked: a PyG edge mask still counts the edge in GCN
normalisation); the complement subgraph deletes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import numpy as np
import torch
from torch import Tensor

from gem_core.data.config import check_k
from gem_core.data.instances import Instance


def as_scores(scores: Any) -> Tensor:
    s = torch.as_tensor(scores).detach().cpu()
    if s.dim() != 1:
        s = s.reshape(-1)
    s = s.to(torch.float64)
    # NaN counts as the least important score so it never displaces a real one (tied with
    # -inf; the map is idempotent, so every reader of these scores ranks them alike).
    return torch.nan_to_num(s, nan=float("-inf"), neginf=float("-inf"))


def topk_mask(scores: Tensor, k: int) -> Tensor:
    """Boolean mask ``[P]`` of the ``k`` highest scores.

    Ties are broken deterministically: among equal scores the lower pair index wins (stable
    sort). Never selects more than ``k`` pairs; selects all pairs when ``k >= P``.

    Raises:
        ValueError: ``k`` is not an integer ≥ 1.
    """
    k = check_k(k)
    s = as_scores(scores)
    p = s.numel()
    mask = torch.zeros(p, dtype=torch.bool)
    if k >= p:
        mask[:] = True
        return mask
    order = torch.sort(s, descending=True, stable=True).indices
    mask[order[:k]] = True
    return mask


def rank_scores(scores: Tensor) -> Tensor:
    """Scores on one scale for every method: each pair's rank within its instance mapped to
    (0, 1], the most important pair 1 (ties share their mean rank). Raw scores differ by method
    (probabilities, logits, attributions); their ranking is what top-K reads."""
    s = as_scores(scores)
    n = s.numel()
    if n == 0:
        return s.float()
    ranks = torch.from_numpy(
        np.asarray(_average_ranks(s.numpy()), dtype=np.float64)
    )  # 1 = lowest score
    return (ranks / n).float()


def _average_ranks(values: np.ndarray) -> np.ndarray:
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    avg_rank = np.cumsum(counts) - (counts - 1) / 2.0
    return avg_rank[inverse.reshape(-1)]


def tied_at_cut(scores: Tensor, k: int) -> Tensor:
    """Pairs whose score equals the K-th best score when that tie crosses the top-K cut (some of
    them kept, some not: :func:`topk_mask` kept the lower pair indices). Empty otherwise."""
    s = as_scores(scores)
    mask = topk_mask(s, k)
    if bool(mask.all()) or not bool(mask.any()):
        return torch.zeros_like(mask)
    cut = s[mask].min()
    tied = s == cut
    return tied if bool((tied & ~mask).any()) else torch.zeros_like(mask)


def pair_order(scores: Tensor) -> list[int]:
    """Every pair index, best first, in :func:`topk_mask`'s order (ties: lower pair index first;
    NaN ranks lowest). A whole ranking has no budget K, so an instance of any size is ranked
    (a BA-shapes base node's close-up has 1,500 pairs, above the K guard of :func:`check_k`)."""
    return torch.sort(as_scores(scores), descending=True, stable=True).indices.tolist()


def ranked_pairs(scores: Tensor, k: int) -> list[int]:
    """The top-``k`` pair indices of :func:`topk_mask`, best first (ties: lower pair index first;
    NaN ranks lowest): the order every list of an explanation's pairs is shown in."""
    return pair_order(scores)[: check_k(k)]


def ranked_flat(
    flat_scores: Any, sizes: Sequence[int], ks: Sequence[int]
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`ranked_pairs` of many instances from one sort: the scores laid end to end
    (instance ``i`` owns the next ``sizes[i]`` values) give ``(chosen, counts)``, the flat
    positions of every instance's top ``ks[i]`` pairs, best first (ties: lower pair index first;
    NaN and -inf lowest), instance after instance, and how many each has. A screen ranks 2,000
    molecules a chunk this way instead of with a few tensor operations per molecule."""
    if len(sizes) != len(ks):
        raise ValueError(f"need one k per instance: got {len(ks)} for {len(sizes)}")
    ks_arr = np.array([check_k(k) for k in ks], dtype=np.int64)
    sizes_arr = np.asarray(sizes, dtype=np.int64)
    flat = as_scores(flat_scores).numpy()  # one NaN map for all
    if flat.size != int(sizes_arr.sum()):
        raise ValueError(f"{flat.size} scores for instances of {int(sizes_arr.sum())} pairs")
    if sizes_arr.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    owner = np.repeat(np.arange(sizes_arr.size), sizes_arr)
    # owner first, then the score descending (-(-inf) = inf sorts last), then the pair index
    order = np.lexsort((np.arange(flat.size), -flat, owner))
    starts = np.concatenate([[0], np.cumsum(sizes_arr)[:-1]]).astype(np.int64)
    rank = np.arange(flat.size) - np.repeat(starts, sizes_arr)  # position within its instance
    counts = np.minimum(ks_arr, sizes_arr)
    return order[rank < np.repeat(counts, sizes_arr)], counts


def topk_overlap(scores_a: Tensor, scores_b: Tensor, k: int) -> int:
    """How many pairs two explanations of one instance share in their top ``k``."""
    return int((topk_mask(scores_a, k) & topk_mask(scores_b, k)).sum())


def explanation_subgraph(instance: Instance, scores: Tensor, k: int) -> Instance:
    """The instance with only its top-``k`` pairs (all nodes kept, other edges deleted)."""
    check_score_length(instance, scores)
    return instance.subgraph(topk_mask(scores, k))


def complement_subgraph(instance: Instance, scores: Tensor, k: int) -> Instance:
    """The instance with its top-``k`` pairs deleted (all nodes and other edges kept)."""
    check_score_length(instance, scores)
    return instance.subgraph(~topk_mask(scores, k))


def check_score_length(instance: Instance, scores: Tensor) -> None:
    """A clear ValueError unless ``scores`` holds one score per pair of ``instance``."""
    n = int(torch.as_tensor(scores).numel())
    if n != instance.num_pairs:
        raise ValueError(f"got {n} scores for an instance with {instance.num_pairs} pairs")


def roc_auc(scores: Any, labels: Any) -> Optional[float]:
    """Rank-based ROC-AUC (Mann-Whitney U / (n_pos · n_neg)); ties count one half.

    Returns None when ``labels`` has only one class. NaN scores rank lowest.
    """
    s = np.nan_to_num(
        np.asarray(
            torch.as_tensor(scores).detach().cpu().double().numpy(), dtype=np.float64
        ).reshape(-1),
        nan=-np.inf,
    )
    y = np.asarray(torch.as_tensor(labels).detach().cpu().numpy()).reshape(-1).astype(bool)
    if s.shape != y.shape:
        raise ValueError(f"{s.size} scores but {y.size} labels")
    n_pos = int(y.sum())
    n_neg = int(y.size - n_pos)
    if n_pos == 0 or n_neg == 0:
        return None
    ranks = _average_ranks(s)  # 1-based average rank of each value
    u = ranks[y].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def atoms_from_bonds(instance: Instance, bond_scores: Tensor) -> Tensor:
    """``[num_nodes]`` atom scores: each atom's best bond score (an atom without a bond gets
    the lowest bond score of the molecule, or 0 without bonds)."""
    scores = torch.as_tensor(bond_scores).detach().double().reshape(-1)
    floor = float(scores.min()) if scores.numel() else 0.0
    out = torch.full((instance.num_nodes,), floor, dtype=torch.float64)
    if scores.numel():
        ends = instance.pairs.reshape(-1)
        out = out.scatter_reduce(0, ends, scores.repeat(2), reduce="amax", include_self=True)
    return out
