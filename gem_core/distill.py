"""Granger-causal distillation (paper §3.1 and Appendix C), batched across edges and instances.

For every instance (a computation graph) the distillation computes

1. the causal contribution of every undirected edge (pair) ``e``:
   ``Δ(e) = loss(f(G \\ {e}), y) − loss(f(G), y)``, removing one pair (both directions) at a time
   from the full graph; ``loss`` is the cross-entropy of the black box's logits against ``y``
   (the true label, or the model's own prediction on ``G``);
2. a greedy pruning: walk the pairs in ascending Δ (ties: lower pair index first), tentatively
   remove each one, apply the connectivity rule (see below), keep the removal when the loss does
   not rise, otherwise restore the pair and give it the weight ``new_loss − current_loss > 0``;
   pairs already dropped together with a component are skipped;
3. top-K (a cheap post-step, :meth:`Distillation.topk`): while more than K pairs remain, remove the
   remaining pair of lowest weight (ties: lower index), applying the connectivity rule again.

Connectivity rule (``DatasetSpec.connected``): after a removal only the edges of one connected
component are kept: the component holding the target node (node tasks) or the largest component
by number of nodes (graph tasks; ties: the component holding the lowest node id). Nodes are never
removed, only edges.

Floating-point noise: a batched forward pass and a one-graph forward pass may differ in the last
bits, so two numbers closer than ``tol`` (default :data:`TIE_TOL` = 1e-6) count as equal: Δ and
weights are ordered by ``round(value / tol)`` then pair index, and a loss rise of at most ``tol``
counts as "no rise". :mod:`gem_core.distill_reference` follows the same conventions.

Batched execution: all single-pair-removed copies of many instances form one disconnected graph
evaluated in one forward pass per chunk; the greedy phase runs all instances of a chunk in
lockstep (step ``t`` handles every instance's ``t``-th pair in Δ order), one forward pass per step,
with connected components for the whole chunk computed at once by
``scipy.sparse.csgraph.connected_components`` on the block-diagonal graph. Instances are sorted
by size so the instances still busy at step ``t`` are a prefix of the chunk and each step's batch
is a slice.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Optional, Union

import numpy as np
import torch
import torch.nn.functional as F
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components
from torch import Tensor

from .config import check_k
from .device import resolve_device
from .instances import Instance, InstanceBatch
from .progress import ProgressFn, report, scaled
from .store import cache_dir, config_key, load_torch, save_torch

if TYPE_CHECKING:  # pragma: no cover
    from .datasets import GemDataset
    from .targets import BlackBox, TrainedTarget

LabelSource = Literal["true", "predicted"]
LABEL_SOURCES: tuple[str, ...] = ("true", "predicted")
TIE_TOL = 1e-6
# Directed edges per forward pass. On a CPU, chunks that stay cache-resident are fastest
# (measured on the 2-core dev machine: ~65k edges beat 1M by ~1.6x); a GPU prefers big batches.
CPU_MAX_EDGES = 65_536
CUDA_MAX_EDGES = 2_000_000
DISTILL_KIND = "gem-distillation"
DISTILL_VERSION = 1

__all__ = [
    "Distillation", "InstanceDistillation", "distill", "distill_dataset", "load_distillation",
    "distillation_path", "topk_accuracy", "cross_entropy", "order_key", "check_label_source",
    "TIE_TOL",
]


# ----------------------------------------------------------------------------- shared helpers

def check_label_source(label_source: str) -> str:
    """Validate ``label_source`` (``"true"`` or ``"predicted"``)."""
    if label_source not in LABEL_SOURCES:
        raise ValueError(f"label_source must be 'true' or 'predicted', got {label_source!r}.")
    return label_source


def cross_entropy(logits: Tensor, labels: Tensor) -> Tensor:
    """Per-row cross-entropy in float64 (the loss Δ and the greedy phase compare)."""
    return F.cross_entropy(logits.double(), labels.to(logits.device), reduction="none")


def order_key(values: Tensor, tol: float = TIE_TOL) -> Tensor:
    """Integer sort key: values closer than about ``tol`` fall into the same bucket (a tie)."""
    if tol <= 0:
        raise ValueError(f"tol must be positive, got {tol}.")
    return torch.round(values.double() / tol).to(torch.int64)


def segment_arange(counts: Tensor) -> Tensor:
    """``cat([arange(c) for c in counts])`` without a Python loop."""
    total = int(counts.sum())
    if total == 0:
        return torch.zeros(0, dtype=torch.long, device=counts.device)
    starts = torch.cumsum(counts, 0) - counts
    return torch.arange(total, device=counts.device) - torch.repeat_interleave(starts, counts)


def _exclusive_cumsum(counts: Tensor) -> Tensor:
    return torch.cumsum(counts, 0) - counts


def _ptr(counts: Tensor) -> Tensor:
    return torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])


def _segment_order(keys: Tensor, owner: Tensor) -> Tensor:
    """Permutation sorting pairs by (owner, key, position) — a per-instance stable sort."""
    by_key = torch.sort(keys, stable=True).indices
    by_owner = torch.sort(owner[by_key], stable=True).indices
    return by_key[by_owner]


# ----------------------------------------------------------------------------- results

@dataclass
class InstanceDistillation:
    """The distillation of one instance.

    Attributes:
        delta: Δ of every pair ``[P]``.
        weights: greedy weight of the pairs kept by the greedy phase, 0 otherwise ``[P]``.
        kept: pairs left after the greedy phase ``[P]`` (bool).
        topk_mask: the top-K pairs ``[P]`` (bool), or None when no K was asked for.
        label: the label the losses were computed against.
        full_loss: loss on the whole computation graph.
        greedy_loss: loss on the graph left after the greedy phase.
    """

    delta: Tensor
    weights: Tensor
    kept: Tensor
    topk_mask: Optional[Tensor]
    label: int
    full_loss: float
    greedy_loss: float


@dataclass
class Distillation:
    """The K-independent distillation of many instances, stored flat (one segment per instance).

    Pair ``j`` of instance ``i`` is entry ``pair_ptr[i] + j`` of the flat tensors. Top-K for any K
    is a cheap post-step (:meth:`topk`): it needs the graph structure kept here, no forward pass.

    Attributes:
        pairs: local endpoints of every pair ``[2, Q]`` (u < v within the instance).
        pair_ptr: segment pointer over pairs ``[N + 1]``.
        num_nodes: nodes per instance ``[N]``.
        targets: target node position per instance (node tasks) or -1 ``[N]``.
        indices: ``Instance.index`` of every instance ``[N]``.
        labels: label the losses were computed against ``[N]``.
        full_loss: loss on the full computation graph ``[N]`` (float64).
        greedy_loss: loss after the greedy phase ``[N]`` (float64).
        delta: Δ of every pair ``[Q]`` (float64).
        weights: greedy weights ``[Q]`` (float64; 0 for pairs removed by the greedy phase).
        kept: pairs left after the greedy phase ``[Q]`` (bool).
        connected: whether the connectivity rule was applied.
        label_source: ``"true"`` or ``"predicted"``.
        tol: tie tolerance used for ordering and loss comparison.
        dataset: dataset name ("" when unknown).
        seconds: wall-clock time of the computation.
    """

    pairs: Tensor
    pair_ptr: Tensor
    num_nodes: Tensor
    targets: Tensor
    indices: Tensor
    labels: Tensor
    full_loss: Tensor
    greedy_loss: Tensor
    delta: Tensor
    weights: Tensor
    kept: Tensor
    connected: bool
    label_source: str
    tol: float = TIE_TOL
    dataset: str = ""
    seconds: float = 0.0

    # ---- shape helpers
    def __len__(self) -> int:
        return int(self.num_nodes.numel())

    @property
    def num_pairs(self) -> Tensor:
        """Pairs per instance ``[N]``."""
        return self.pair_ptr[1:] - self.pair_ptr[:-1]

    def _split(self, flat: Tensor) -> list[Tensor]:
        return list(torch.split(flat, self.num_pairs.tolist()))

    @property
    def task(self) -> str:
        return "node" if bool((self.targets >= 0).any()) else "graph"

    # ---- per-instance views
    def deltas(self) -> list[Tensor]:
        """Δ per instance."""
        return self._split(self.delta)

    def weight_list(self) -> list[Tensor]:
        """Greedy weights per instance (0 for pairs the greedy phase removed)."""
        return self._split(self.weights)

    def kept_masks(self) -> list[Tensor]:
        """Pairs kept by the greedy phase, per instance."""
        return self._split(self.kept)

    def normalized_weights(self) -> list[Tensor]:
        """Training targets for an explainer: weights divided by the instance's maximum, in [0, 1].

        An instance whose weights are all zero gets all zeros. Returned as float32.
        """
        w = self.weights.clone()
        owner = torch.repeat_interleave(torch.arange(len(self)), self.num_pairs)
        peak = torch.zeros(len(self), dtype=w.dtype).scatter_reduce_(0, owner, w, reduce="amax")
        scale = peak[owner]
        out = torch.where(scale > 0, w / scale.clamp_min(1e-300), torch.zeros_like(w))
        return self._split(out.float())

    def instance(self, i: int, k: Optional[int] = None) -> InstanceDistillation:
        """The distillation of instance ``i`` (with its top-K mask when ``k`` is given)."""
        lo, hi = int(self.pair_ptr[i]), int(self.pair_ptr[i + 1])
        topk = None if k is None else self.subset([i]).topk(k)[0]
        return InstanceDistillation(
            delta=self.delta[lo:hi], weights=self.weights[lo:hi], kept=self.kept[lo:hi],
            topk_mask=topk, label=int(self.labels[i]), full_loss=float(self.full_loss[i]),
            greedy_loss=float(self.greedy_loss[i]))

    def subset(self, ids: Sequence[int]) -> "Distillation":
        """The distillation of the instances ``ids`` only (in that order)."""
        ids_t = torch.as_tensor(list(ids), dtype=torch.long)
        counts = self.num_pairs[ids_t]
        flat = torch.repeat_interleave(self.pair_ptr[ids_t], counts) + segment_arange(counts)
        per_inst = dict(num_nodes=self.num_nodes[ids_t], targets=self.targets[ids_t],
                        indices=self.indices[ids_t], labels=self.labels[ids_t],
                        full_loss=self.full_loss[ids_t], greedy_loss=self.greedy_loss[ids_t])
        return Distillation(
            pairs=self.pairs[:, flat], pair_ptr=_ptr(counts), delta=self.delta[flat],
            weights=self.weights[flat], kept=self.kept[flat], connected=self.connected,
            label_source=self.label_source, tol=self.tol, dataset=self.dataset,
            seconds=self.seconds, **per_inst)

    # ---- top-K
    def topk(self, k: int) -> list[Tensor]:
        """Top-K pair masks (bool ``[P]`` per instance); no forward pass.

        Starting from the pairs kept by the greedy phase, while more than ``k`` remain, remove the
        remaining pair of lowest weight (ties: lower index) and apply the connectivity rule. An
        instance with at most ``k`` kept pairs keeps all of them. With the connectivity rule a
        removal may split off a component, so fewer than ``k`` pairs can remain.

        Raises:
            ValueError: if ``k`` is not an integer in [1, 1000].
        """
        check_k(k)
        return self._split(_topk_flat(self, k))

    # ---- persistence
    def to_state(self) -> dict:
        """A ``torch.save``-able dict (tensors and plain values only)."""
        state = {f.name: getattr(self, f.name) for f in fields(self)}
        state.update(kind=DISTILL_KIND, version=DISTILL_VERSION)
        return state

    @classmethod
    def from_state(cls, state: dict) -> "Distillation":
        return cls(**{f.name: state[f.name] for f in fields(cls)})


# ----------------------------------------------------------------------------- flat layout

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

    @classmethod
    def build(cls, instances: Sequence[Instance]) -> "_Layout":
        if len(instances) == 0:
            raise ValueError("cannot distill an empty list of instances")
        tasks = {inst.task for inst in instances}
        if len(tasks) != 1:
            raise ValueError("cannot distill node and graph instances together")
        num_nodes = torch.tensor([inst.num_nodes for inst in instances], dtype=torch.long)
        num_pairs = torch.tensor([inst.num_pairs for inst in instances], dtype=torch.long)
        node_ptr, pair_ptr = _ptr(num_nodes), _ptr(num_pairs)
        local = torch.cat([inst.pairs.long() for inst in instances], dim=1)
        owner = torch.repeat_interleave(torch.arange(len(instances)), num_pairs)
        pairs = local + node_ptr[:-1][owner]
        targets = torch.tensor([-1 if inst.target is None else int(inst.target) for inst in instances])
        labels = torch.tensor([int(inst.y) for inst in instances], dtype=torch.long)
        x = torch.cat([inst.x for inst in instances], dim=0)
        return cls(x, pairs, local, node_ptr, pair_ptr, num_nodes, num_pairs, targets, labels, owner)

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

    def __call__(self, m: int, pair_mask: Optional[np.ndarray] = None) -> InstanceBatch:
        """Instances ``[0, m)`` keeping the pairs where ``pair_mask`` (over their pairs) is set."""
        n_nodes, n_pairs = self.node_ptr[m], self.pair_ptr[m]
        edges = self.edges[:, : 2 * n_pairs]
        if pair_mask is not None:
            keep = torch.from_numpy(np.repeat(pair_mask, 2))
            edges = edges[:, keep.to(self.device, non_blocking=True)]
        target = None if self.targets is None else self.targets[:m]
        return InstanceBatch(self.x[:n_nodes], edges, self.batch[:n_nodes], target, m)


# ----------------------------------------------------------------------------- connectivity

class _Components:
    """Connectivity rule for many instances at once (block-diagonal graph, one scipy call).

    Works on a prefix of a layout: instances ``[0, m)``, their nodes and pairs.
    """

    def __init__(self, layout: _Layout):
        self.u = layout.pairs[0].numpy()
        self.v = layout.pairs[1].numpy()
        self.owner = layout.pair_owner.numpy()
        self.node_ptr = layout.node_ptr.numpy()
        self.pair_ptr = layout.pair_ptr.numpy()
        self.targets = None
        if layout.is_node_task:
            self.targets = (layout.node_ptr[:-1] + layout.targets).numpy()
        # pairs sorted by their first endpoint: the CSR matrix can be built without a sort
        self.sorted = bool(np.all(self.u[1:] >= self.u[:-1]))

    def apply(self, mask: np.ndarray, m: int) -> np.ndarray:
        """Keep only pairs of the selected component of each of the first ``m`` instances.

        Args:
            mask: bool mask over the pairs of the first ``m`` instances (their edge sets).
        Returns:
            the pruned mask (a new array).
        """
        n = int(self.node_ptr[m])
        q = mask.shape[0]
        u, v = self.u[:q], self.v[:q]
        uu, vv = u[mask], v[mask]
        ones = np.ones(uu.shape[0], dtype=np.int8)
        if self.sorted:
            indptr = np.zeros(n + 1, dtype=np.int32)
            np.cumsum(np.bincount(uu, minlength=n), out=indptr[1:])
            graph = csr_matrix((ones, vv.astype(np.int32), indptr), shape=(n, n))
        else:
            graph = csr_matrix((ones, (uu, vv)), shape=(n, n))
        _, labels = connected_components(graph, directed=True, connection="weak")
        keep = self._chosen_labels(labels, m)
        return mask & (labels[u] == keep[self.owner[:q]])

    def _chosen_labels(self, labels: np.ndarray, m: int) -> np.ndarray:
        if self.targets is not None:
            return labels[self.targets[:m]]
        # Largest component by nodes; ties: the one holding the lowest node id. Each node scores
        # its component's size; the first maximal node of an instance picks the component.
        size = np.bincount(labels)
        score = size[labels]
        starts = self.node_ptr[:m]
        seg_max = np.maximum.reduceat(score, starts)
        n = labels.shape[0]
        seg_of_node = np.repeat(np.arange(m), np.diff(self.node_ptr[: m + 1]))
        pos = np.where(score == seg_max[seg_of_node], np.arange(n), n)
        first = np.minimum.reduceat(pos, starts)
        return labels[first]


# ----------------------------------------------------------------------------- Δ phase

def _removal_logits(layout: _Layout, black_box: "BlackBox", device: torch.device,
                    max_edges: int, progress: Optional[ProgressFn]) -> tuple[Tensor, Tensor]:
    """Logits of every instance on its full graph ``[N, C]`` and without each pair ``[Q, C]``.

    The copies (per instance: the full graph, then one copy per removed pair) are evaluated in
    chunks of at most ``max_edges`` directed edges (at least one copy per chunk).
    """
    n_inst = layout.size
    copies_per = layout.num_pairs + 1
    copy_inst = torch.repeat_interleave(torch.arange(n_inst), copies_per)
    copy_removed = segment_arange(copies_per) - 1  # -1: the full graph
    copy_edges = 2 * (layout.num_pairs[copy_inst] - (copy_removed >= 0).long())
    ends = torch.cumsum(copy_edges, 0).numpy()
    out: list[Tensor] = []
    total, start = int(copy_inst.numel()), 0
    while start < total:
        base = ends[start - 1] if start > 0 else 0
        stop = int(np.searchsorted(ends, base + max_edges, side="right"))
        stop = max(stop, start + 1)
        batch = _copies_batch(layout, copy_inst[start:stop], copy_removed[start:stop])
        out.append(black_box(batch if device.type == "cpu" else batch.to(device)).detach().cpu())
        report(progress, stop / total, f"Δ: {stop:,}/{total:,} graphs")
        start = stop
    logits = torch.cat(out, dim=0)
    is_full = copy_removed < 0
    return logits[is_full], logits[~is_full]


def _copies_batch(layout: _Layout, inst: Tensor, removed: Tensor) -> InstanceBatch:
    """One graph holding copy ``c`` = instance ``inst[c]`` without its pair ``removed[c]``."""
    n_copies = int(inst.numel())
    nodes = layout.num_nodes[inst]
    node_off = _exclusive_cumsum(nodes)
    node_src = torch.repeat_interleave(layout.node_ptr[:-1][inst], nodes) + segment_arange(nodes)
    x = layout.x[node_src]
    batch = torch.repeat_interleave(torch.arange(n_copies), nodes)

    npairs = layout.num_pairs[inst]
    pair_copy = torch.repeat_interleave(torch.arange(n_copies), npairs)
    pair_local = segment_arange(npairs)
    keep = pair_local != removed[pair_copy]
    pair_copy, pair_local = pair_copy[keep], pair_local[keep]
    flat = layout.pair_ptr[:-1][inst[pair_copy]] + pair_local
    pairs = layout.local_pairs[:, flat] + node_off[pair_copy]
    edge_index = torch.cat([pairs, pairs.flip(0)], dim=1)
    target = None
    if layout.is_node_task:
        target = node_off + layout.targets[inst]
    return InstanceBatch(x, edge_index, batch, target, n_copies)


# ----------------------------------------------------------------------------- greedy phase

def _greedy_chunks(num_pairs: Tensor, max_edges: int) -> list[Tensor]:
    """Instance ids sorted by pair count (descending), cut into chunks of ≤ ``max_edges`` edges."""
    order = torch.sort(num_pairs, descending=True, stable=True).indices
    order = order[num_pairs[order] > 0]
    chunks, start = [], 0
    ends = torch.cumsum(2 * num_pairs[order], 0).numpy()
    while start < order.numel():
        base = ends[start - 1] if start > 0 else 0
        stop = max(int(np.searchsorted(ends, base + max_edges, side="right")), start + 1)
        chunks.append(order[start:stop])
        start = stop
    return chunks


def _gather_segments(values: Tensor, ptr: Tensor, ids: Tensor) -> Tensor:
    """Concatenate the segments ``ids`` of a flat per-pair tensor."""
    counts = ptr[1:][ids] - ptr[:-1][ids]
    return values[torch.repeat_interleave(ptr[:-1][ids], counts) + segment_arange(counts)]


def _greedy_chunk(sub: _Layout, order_local: Tensor, labels: Tensor, full_loss: Tensor,
                  black_box: "BlackBox", device: torch.device, connected: bool, tol: float,
                  progress: Optional[ProgressFn]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Greedy pruning of one chunk (instances sorted by pair count, descending) in lockstep.

    Args:
        order_local: per instance, its local pair indices in ascending-Δ order (flat, per segment).
    Returns:
        ``(kept [Q] bool, weights [Q] float64, loss [N] float64)`` of the chunk.
    """
    pair_start = sub.pair_ptr[:-1].numpy()
    order = order_local.numpy() + np.repeat(pair_start, sub.num_pairs.numpy())  # chunk pair ids
    owner = sub.pair_owner.numpy()
    counts = sub.num_pairs.numpy()
    steps = int(counts[0]) if counts.size else 0
    # active[t] = number of instances with more than t pairs (a prefix: counts are descending)
    active = np.searchsorted(-counts, -np.arange(steps), side="left")
    kept = np.ones(int(sub.pair_ptr[-1]), dtype=bool)
    weights = np.zeros(kept.shape[0], dtype=np.float64)
    loss = full_loss.numpy().astype(np.float64).copy()
    comps = _Components(sub) if connected else None
    make_batch = _PrefixBatcher(sub, device)
    labels_dev = labels.to(device)
    done_work, total_work = 0, int(counts.sum())
    for t in range(steps):
        m = int(active[t])
        q = int(sub.pair_ptr[m])
        cand = order[pair_start[:m] + t]
        alive = kept[cand]
        if not alive.any():
            continue
        tent = kept[:q].copy()
        tent[cand[alive]] = False
        if comps is not None:
            tent = comps.apply(tent, m)
        edges = tent & alive[owner[:q]]  # idle instances contribute their nodes only
        logits = black_box(make_batch(m, edges))
        new = cross_entropy(logits, labels_dev[:m]).cpu().numpy()
        accept = alive & (new <= loss[:m] + tol)
        reject = alive & ~accept
        weights[cand[reject]] = new[reject] - loss[:m][reject]
        acc_pairs = accept[owner[:q]]
        kept[:q] = np.where(acc_pairs, tent, kept[:q])
        loss[:m] = np.where(accept, new, loss[:m])
        done_work += m
        if progress is not None and (t % 8 == 0 or t == steps - 1):
            report(progress, done_work / max(total_work, 1), f"greedy step {t + 1}/{steps}")
    weights[~kept] = 0.0
    return kept, weights, loss


def _greedy(layout: _Layout, delta: Tensor, labels: Tensor, full_loss: Tensor,
            black_box: "BlackBox", device: torch.device, connected: bool, tol: float,
            max_edges: int, progress: Optional[ProgressFn]) -> tuple[Tensor, Tensor, Tensor]:
    """The greedy phase for all instances, chunk by chunk; results in the layout's order."""
    order_flat = _segment_order(order_key(delta, tol), layout.pair_owner)
    order_local = order_flat - layout.pair_ptr[:-1][layout.pair_owner]  # per segment, Δ order
    kept = torch.ones(int(layout.pair_ptr[-1]), dtype=torch.bool)
    weights = torch.zeros(kept.numel(), dtype=torch.float64)
    loss = full_loss.clone().double()
    chunks = _greedy_chunks(layout.num_pairs, max_edges)
    total = max(int(layout.num_pairs.sum()), 1)
    done = 0
    for ids in chunks:
        sub = _build_from(layout, ids)
        work = int(layout.num_pairs[ids].sum())
        part = scaled(progress, done / total, (done + work) / total)
        k, w, l = _greedy_chunk(sub, _gather_segments(order_local, layout.pair_ptr, ids),
                                labels[ids], full_loss[ids], black_box, device, connected, tol, part)
        flat = _gather_segments(torch.arange(kept.numel()), layout.pair_ptr, ids)
        kept[flat] = torch.from_numpy(k)
        weights[flat] = torch.from_numpy(w)
        loss[ids] = torch.from_numpy(l)
        done += work
    return kept, weights, loss


def _build_from(layout: _Layout, ids: Tensor) -> _Layout:
    """The sub-layout of instances ``ids`` (in that order), without a Python loop."""
    nodes, npairs = layout.num_nodes[ids], layout.num_pairs[ids]
    node_ptr, pair_ptr = _ptr(nodes), _ptr(npairs)
    node_src = torch.repeat_interleave(layout.node_ptr[:-1][ids], nodes) + segment_arange(nodes)
    local = _gather_segments(layout.local_pairs.t(), layout.pair_ptr, ids).t()
    owner = torch.repeat_interleave(torch.arange(ids.numel()), npairs)
    pairs = local + node_ptr[:-1][owner]
    return _Layout(layout.x[node_src], pairs.contiguous(), local.contiguous(), node_ptr, pair_ptr,
                   nodes, npairs, layout.targets[ids], layout.labels[ids], owner)


# ----------------------------------------------------------------------------- top-K

def _topk_flat(dist: Distillation, k: int) -> Tensor:
    """Flat top-K mask over all pairs of ``dist`` (see :meth:`Distillation.topk`)."""
    kept = dist.kept.clone()
    owner = torch.repeat_interleave(torch.arange(len(dist)), dist.num_pairs)
    count = torch.zeros(len(dist), dtype=torch.long).scatter_add_(0, owner, kept.long())
    over = count > k
    if not bool(over.any()):
        return kept
    # remaining pairs of the instances over budget, in ascending (weight, index) per instance
    cand = torch.nonzero(kept & over[owner]).view(-1)
    cand = cand[_segment_order(order_key(dist.weights[cand], dist.tol), owner[cand])]
    if not dist.connected:
        # removals never cascade: drop the first count − k candidates of each instance
        cand_owner = owner[cand]
        rank = segment_arange(torch.bincount(cand_owner, minlength=len(dist))[over])
        drop = rank < (count[cand_owner] - k)
        kept[cand[drop]] = False
        return kept
    return _topk_connected(dist, kept, cand, owner, k)


def _structure_layout(dist: Distillation) -> _Layout:
    """A featureless layout of the graphs in ``dist`` (enough for the connectivity rule)."""
    owner = torch.repeat_interleave(torch.arange(len(dist)), dist.num_pairs)
    node_ptr = _ptr(dist.num_nodes)
    return _Layout(
        x=torch.zeros(int(node_ptr[-1]), 0), pairs=dist.pairs + node_ptr[:-1][owner],
        local_pairs=dist.pairs, node_ptr=node_ptr, pair_ptr=dist.pair_ptr,
        num_nodes=dist.num_nodes, num_pairs=dist.num_pairs, targets=dist.targets,
        labels=dist.labels, pair_owner=owner)


def _topk_connected(dist: Distillation, kept: Tensor, cand: Tensor, owner: Tensor,
                    k: int) -> Tensor:
    """Top-K with the connectivity rule: all over-budget instances in lockstep, no forward."""
    ids = torch.unique(owner[cand])  # instances over budget
    per = torch.bincount(owner[cand], minlength=len(dist))[ids]
    sort = torch.sort(per, descending=True, stable=True).indices
    ids, per = ids[sort], per[sort]
    layout = _build_from(_structure_layout(dist), ids)
    sub_ptr = layout.pair_ptr
    flat = _gather_segments(torch.arange(kept.numel()), dist.pair_ptr, ids)
    sub_kept = kept[flat].numpy().copy()
    # candidates (ascending weight) as chunk pair ids, one segment per instance of ids
    inv = torch.full((len(dist),), -1, dtype=torch.long)
    inv[ids] = torch.arange(ids.numel())
    cand_owner = inv[owner[cand]]
    cand_sub = cand - dist.pair_ptr[:-1][owner[cand]] + sub_ptr[:-1][cand_owner]
    cand_order = torch.sort(cand_owner, stable=True).indices  # group by sub owner, keep order
    cand_sub = cand_sub[cand_order].numpy()
    cand_ptr = _ptr(per).numpy()
    counts_np = per.numpy()
    owner_np = layout.pair_owner.numpy()
    comps = _Components(layout)
    n_sub = int(ids.numel())
    count = np.bincount(owner_np, weights=sub_kept, minlength=n_sub).astype(np.int64)
    active = np.searchsorted(-counts_np, -np.arange(int(counts_np[0])), side="left")
    for s in range(int(counts_np[0])):
        m = int(active[s])
        c = cand_sub[cand_ptr[:m] + s]
        act = (count[:m] > k) & sub_kept[c]
        if not act.any():
            if not (count[:m] > k).any():
                break
            continue
        q = int(sub_ptr[m])
        tent = sub_kept[:q].copy()
        tent[c[act]] = False
        tent = comps.apply(tent, m)
        upd = act[owner_np[:q]]
        sub_kept[:q] = np.where(upd, tent, sub_kept[:q])
        count[:m] = np.bincount(owner_np[:q], weights=sub_kept[:q], minlength=m).astype(np.int64)
    kept[flat] = torch.from_numpy(sub_kept)
    return kept


# ----------------------------------------------------------------------------- entry points

def _edge_budget(max_edges: Optional[int], device: torch.device) -> int:
    """The chunk size: as given, else the device's default."""
    if max_edges is None:
        return CUDA_MAX_EDGES if device.type == "cuda" else CPU_MAX_EDGES
    if isinstance(max_edges, bool) or not isinstance(max_edges, int) or max_edges < 1:
        raise ValueError(f"max_edges_per_forward must be a positive integer, got {max_edges!r}.")
    return max_edges


def distill(instances: Sequence[Instance], black_box: "BlackBox", *, connected: bool,
            label_source: LabelSource = "true", device: Union[str, torch.device, None] = "auto",
            max_edges_per_forward: Optional[int] = None, tol: float = TIE_TOL,
            progress: Optional[ProgressFn] = None) -> Distillation:
    """Distil every instance: Δ of every pair, then the greedy pruning (Appendix C).

    Args:
        instances: computation graphs (all node or all graph instances).
        black_box: the target, ``black_box(InstanceBatch) -> logits [num_instances, C]``.
        connected: apply the connectivity rule (``DatasetSpec.connected``).
        label_source: losses against the true label (``"true"``) or the target's own prediction
            on the full graph (``"predicted"``).
        device: where batches are built (``"auto"``: CUDA when available).
        max_edges_per_forward: memory bound, directed edges per forward pass (default: 65,536
            on a CPU, where cache-sized chunks are fastest; 2,000,000 on CUDA).
        tol: tie tolerance (see the module docstring).
        progress: optional ``progress(fraction, message)`` callback.
    Returns:
        the K-independent :class:`Distillation`; call :meth:`Distillation.topk` for any K.
    """
    check_label_source(label_source)
    if not tol > 0:
        raise ValueError(f"tol must be positive, got {tol}.")
    dev = resolve_device(device)
    max_edges_per_forward = _edge_budget(max_edges_per_forward, dev)
    start = time.perf_counter()
    layout = _Layout.build(instances)
    n_delta = int((layout.num_pairs * (layout.num_pairs + 1)).sum())
    n_greedy = int((layout.num_pairs * layout.num_nodes).sum())
    split = n_delta / max(n_delta + n_greedy, 1)
    full_logits, removed_logits = _removal_logits(layout, black_box, dev, max_edges_per_forward,
                                                  scaled(progress, 0.0, split))
    labels = layout.labels if label_source == "true" else full_logits.argmax(-1)
    full_loss = cross_entropy(full_logits, labels)
    removed_loss = cross_entropy(removed_logits, labels[layout.pair_owner])
    delta = removed_loss - full_loss[layout.pair_owner]
    kept, weights, greedy_loss = _greedy(layout, delta, labels, full_loss, black_box, dev,
                                         connected, tol, max_edges_per_forward,
                                         scaled(progress, split, 1.0))
    report(progress, 1.0, "done")
    dataset = instances[0].dataset if instances else ""
    return Distillation(
        pairs=layout.local_pairs, pair_ptr=layout.pair_ptr, num_nodes=layout.num_nodes,
        targets=layout.targets, indices=torch.tensor([inst.index for inst in instances]),
        labels=labels.long(), full_loss=full_loss, greedy_loss=greedy_loss, delta=delta,
        weights=weights, kept=kept, connected=bool(connected), label_source=label_source,
        tol=float(tol), dataset=dataset, seconds=time.perf_counter() - start)


def topk_accuracy(instances: Sequence[Instance], masks: Sequence[Tensor], black_box: "BlackBox",
                  device: Union[str, torch.device, None] = "auto",
                  max_edges_per_forward: Optional[int] = None) -> float:
    """Accuracy (vs. the true label) of the target on the subgraphs keeping only ``masks``.

    All nodes and features of each instance are kept; every other edge is deleted.
    """
    if len(instances) != len(masks):
        raise ValueError("need one mask per instance")
    if len(instances) == 0:
        return float("nan")
    dev = resolve_device(device)
    max_edges_per_forward = _edge_budget(max_edges_per_forward, dev)
    subs = [inst.subgraph(mask) for inst, mask in zip(instances, masks)]
    layout = _Layout.build(subs)
    correct, start = 0, 0
    ends = torch.cumsum(2 * layout.num_pairs, 0).numpy()
    while start < layout.size:
        base = ends[start - 1] if start > 0 else 0
        stop = max(int(np.searchsorted(ends, base + max_edges_per_forward, side="right")), start + 1)
        part = _build_from(layout, torch.arange(start, stop))
        logits = black_box(_PrefixBatcher(part, dev)(stop - start))
        correct += int((logits.argmax(-1).cpu() == part.labels).sum())
        start = stop
    return correct / layout.size


def distillation_path(dataset: str, split: str, target_digest: str, label_source: str,
                      connected: bool, tol: float = TIE_TOL) -> Path:
    """Cache file of a distillation, keyed by everything that determines it."""
    key = config_key(dataset=dataset, split=split, target=target_digest, label_source=label_source,
                     connected=bool(connected), tol=tol, version=DISTILL_VERSION)
    return cache_dir() / "distillations" / f"{dataset}-{split}-{label_source}-{key}.pt"


def load_distillation(ds: "GemDataset", target: "TrainedTarget", split: str = "train",
                      label_source: LabelSource = "true",
                      connected: Optional[bool] = None) -> Optional[Distillation]:
    """The cached distillation of a split, or None when absent, corrupted or outdated."""
    from .store import ArtifactError

    check_label_source(label_source)
    conn = ds.spec.connected if connected is None else bool(connected)
    path = distillation_path(ds.name, split, target.digest, label_source, conn)
    if not path.exists():
        return None
    try:
        state = load_torch(path, kind=DISTILL_KIND)
        if state.get("version") != DISTILL_VERSION:
            return None
        return Distillation.from_state(state)
    except (ArtifactError, KeyError, TypeError):
        return None


def distill_dataset(ds: "GemDataset", target: "TrainedTarget", split: str = "train",
                    label_source: LabelSource = "true", connected: Optional[bool] = None,
                    device: Union[str, torch.device, None] = "auto",
                    max_edges_per_forward: Optional[int] = None, refresh: bool = False,
                    progress: Optional[ProgressFn] = None) -> Distillation:
    """Distil one split of a dataset, cached in the artifact store.

    The cache key holds the dataset, the target checkpoint digest, the split, the label source
    and the connectivity rule (default: ``ds.spec.connected``). A corrupted or foreign cache file
    is recomputed; ``refresh=True`` always recomputes.
    """
    from .instances import split_instances

    check_label_source(label_source)
    conn = ds.spec.connected if connected is None else bool(connected)
    if not refresh:
        found = load_distillation(ds, target, split, label_source, conn)
        if found is not None:
            report(progress, 1.0, "cached")
            return found
    instances = split_instances(ds, split)
    result = distill(instances, target.black_box(device), connected=conn, label_source=label_source,
                     device=device, max_edges_per_forward=max_edges_per_forward, progress=progress)
    result.dataset = ds.name
    save_torch(result.to_state(), distillation_path(ds.name, split, target.digest, label_source, conn))
    return result
