"""The state of a top-K walk over many instances: their remaining pairs in walk order (ascending
weight, then index), compaction to the instances still busy, and trial copies (tentative removals
under the connectivity rule) as one block-diagonal graph. Shared by the forward-free rules
(:mod:`.topk`) and the loss-driven one (:mod:`.refine`)."""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch
from torch import Tensor

from gem_core.data.packed import np_segment_arange, segment_ptr
from gem_core.gem.distill.components import _chosen_labels, _component_labels
from gem_core.gem.distill.conventions import order_key
from gem_core.gem.distill.fields import DistillationFields
from gem_core.gem.distill.segments import _np_segment_order


def _pair_owner(dist: DistillationFields) -> Tensor:
    return torch.repeat_interleave(torch.arange(len(dist)), dist.num_pairs)


class _Walk:
    """The remaining pairs of some instances for the top-K walks (connectivity rule on).

    Pairs are grouped by instance and, within an instance, in ascending (weight, index) order:
    the walk order. ``pos`` maps them back to the distillation's flat pairs; ``alive`` is the
    current explanation. Node ids are local to the walk (instance ``i`` owns nodes
    ``node_ptr[i]:node_ptr[i + 1]``). :meth:`subset` compacts the walk to the instances still
    busy, so a step costs time proportional to the work left.
    """

    def __init__(
        self,
        pos: np.ndarray,
        u: np.ndarray,
        v: np.ndarray,
        owner: np.ndarray,
        node_counts: np.ndarray,
        targets: Optional[np.ndarray],
        alive: np.ndarray,
    ):
        self.pos, self.u, self.v, self.owner, self.alive = pos, u, v, owner, alive
        self.node_counts = node_counts
        self.n = int(node_counts.shape[0])
        self.pair_ptr = np.searchsorted(owner, np.arange(self.n + 1), side="left")
        self.node_ptr = np.concatenate([[0], np.cumsum(node_counts)]).astype(np.int64)
        self.targets = targets  # walk node id of each instance's target (node tasks)
        self.count = np.bincount(owner, weights=alive, minlength=self.n).astype(np.int64)
        # pairs by first endpoint (node ids are grouped by instance, so this groups by instance
        # too): copies built in this order give the components call pre-sorted edges
        self.by_u = np.argsort(u, kind="stable")

    @classmethod
    def build(
        cls,
        dist: DistillationFields,
        kept: Tensor,
        owner: Tensor,
        over: Tensor,
        all_pairs: bool = False,
    ) -> "_Walk":
        """The walk over the kept pairs of the instances ``over`` (bool ``[N]``); with
        ``all_pairs``, over all their pairs (``alive``: the kept ones)."""
        cand = torch.nonzero((over[owner] if all_pairs else kept & over[owner])).view(-1)
        cand = cand[_np_segment_order(order_key(dist.weights[cand], dist.tol), owner[cand])]
        ids = torch.nonzero(over).view(-1)
        nodes = dist.num_nodes[ids]
        node_ptr = segment_ptr(nodes)
        local_owner = torch.searchsorted(ids, owner[cand])
        shift = node_ptr[:-1][local_owner]
        u, v = dist.pairs[0, cand] + shift, dist.pairs[1, cand] + shift
        targets = None
        if bool((dist.targets >= 0).any()):
            targets = (node_ptr[:-1] + dist.targets[ids]).numpy()
        return cls(
            cand.numpy(),
            u.numpy(),
            v.numpy(),
            local_owner.numpy(),
            nodes.numpy(),
            targets,
            kept[cand].numpy().copy(),
        )

    def subset(self, keep: np.ndarray) -> "_Walk":
        """The walk restricted to the instances ``keep`` (bool ``[n]``), state included."""
        pk = keep[self.owner]
        node_map = np.cumsum(np.repeat(keep, self.node_counts)) - 1
        inst_map = np.cumsum(keep) - 1
        targets = None if self.targets is None else node_map[self.targets[keep]]
        return _Walk(
            self.pos[pk],
            node_map[self.u[pk]],
            node_map[self.v[pk]],
            inst_map[self.owner[pk]],
            self.node_counts[keep],
            targets,
            self.alive[pk],
        )

    def is_ruled(self) -> np.ndarray:
        """Per instance: its pairs already form the one component the rule keeps."""
        ids = self.by_u[self.alive[self.by_u]]
        labels = _component_labels(self.u[ids], self.v[ids], int(self.node_ptr[-1]))
        chosen = _chosen_labels(labels, self.node_ptr, self.n, self.targets)
        off = self.alive & (labels[self.u] != chosen[self.owner])
        return np.bincount(self.owner[off], minlength=self.n) == 0

    def next_alive(self) -> np.ndarray:
        """``[M + 1]``: for position q, the first alive position ≥ q (M when none)."""
        m = self.pos.shape[0]
        idx = np.where(self.alive, np.arange(m), m)
        return np.concatenate([np.minimum.accumulate(idx[::-1])[::-1], [m]])

    def trials(
        self, removed: np.ndarray, inst: np.ndarray, rule: bool = True
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Tentative removals: copy ``c`` is instance ``inst[c]`` without its pair ``removed[c]``.

        All copies form one block-diagonal graph; the connectivity rule is applied in each
        (unless ``rule`` is False). Returns ``(src, keep, copy_of)``: for every pair of every copy
        (grouped by copy) the walk pair it is, whether the rule keeps it, and its copy.
        """
        alive_ids = self.by_u[self.alive[self.by_u]]  # grouped by instance, by first endpoint
        alive_ptr = np.concatenate([[0], np.cumsum(self.count)])
        size = self.count[inst]
        copy_of = np.repeat(np.arange(inst.shape[0]), size)
        src = alive_ids[np.repeat(alive_ptr[inst], size) + np_segment_arange(size)]
        stay = src != removed[copy_of]
        src, copy_of = src[stay], copy_of[stay]
        if not rule:
            return src, np.ones(src.shape[0], dtype=bool), copy_of
        nodes = self.node_counts[inst]
        copy_ptr = np.concatenate([[0], np.cumsum(nodes)]).astype(np.int64)
        shift = copy_ptr[:-1] - self.node_ptr[inst]  # walk node id -> copy node id
        u, v = self.u[src] + shift[copy_of], self.v[src] + shift[copy_of]
        labels = _component_labels(u, v, int(copy_ptr[-1]))
        targets = None if self.targets is None else self.targets[inst] + shift
        chosen = _chosen_labels(labels, copy_ptr, inst.shape[0], targets)
        return src, labels[u] == chosen[copy_of], copy_of
