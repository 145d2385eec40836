"""The result of a distillation: :class:`Distillation` (K-independent, every instance a segment
of flat tensors; per-instance views, subsets, the top-K entry points, a saveable state) and
:class:`InstanceDistillation` (one instance)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Optional, Union

import torch
from torch import Tensor

from gem_core.data.config import check_k
from gem_core.data.instances import Instance
from gem_core.data.packed import segment_arange, segment_ptr
from gem_core.gem.distill.conventions import TIE_TOL
from gem_core.gem.distill.refine import _refine_flat
from gem_core.gem.distill.sufficient import _sufficient_flat
from gem_core.gem.distill.topk import DEFAULT_TOPK_POLICY, _fill_flat, _topk_flat, check_topk_policy
from gem_core.gem.distill.walk import _pair_owner

if TYPE_CHECKING:  # pragma: no cover
    from gem_core.models.targets import BlackBox


DISTILL_KIND = "gem-distillation"
DISTILL_VERSION = 1


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
    label: Union[int, float]  # a class, or a regression value
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
        effect: a regressor's signed Granger effect of every pair, ``f(G) − f(G \\ {e})``
            ``[Q]`` (float64: how much the pair raises the value); None for a classifier.
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
    effect: Optional[Tensor] = None

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

    def instance(
        self, i: int, k: Optional[int] = None, policy: str = DEFAULT_TOPK_POLICY, fill: bool = False
    ) -> InstanceDistillation:
        """The distillation of instance ``i`` (with its top-K mask when ``k`` is given)."""
        lo, hi = int(self.pair_ptr[i]), int(self.pair_ptr[i + 1])
        topk = None if k is None else self.subset([i]).topk(k, policy, fill)[0]
        return InstanceDistillation(
            delta=self.delta[lo:hi],
            weights=self.weights[lo:hi],
            kept=self.kept[lo:hi],
            topk_mask=topk,
            label=self.labels[i].item(),
            full_loss=float(self.full_loss[i]),
            greedy_loss=float(self.greedy_loss[i]),
        )

    def subset(self, ids: Sequence[int]) -> "Distillation":
        """The distillation of the instances ``ids`` only (in that order)."""
        ids_t = torch.as_tensor(list(ids), dtype=torch.long)
        counts = self.num_pairs[ids_t]
        flat = torch.repeat_interleave(self.pair_ptr[ids_t], counts) + segment_arange(counts)
        per_inst = dict(
            num_nodes=self.num_nodes[ids_t],
            targets=self.targets[ids_t],
            indices=self.indices[ids_t],
            labels=self.labels[ids_t],
            full_loss=self.full_loss[ids_t],
            greedy_loss=self.greedy_loss[ids_t],
        )
        return Distillation(
            pairs=self.pairs[:, flat],
            pair_ptr=segment_ptr(counts),
            delta=self.delta[flat],
            weights=self.weights[flat],
            kept=self.kept[flat],
            connected=self.connected,
            label_source=self.label_source,
            tol=self.tol,
            dataset=self.dataset,
            seconds=self.seconds,
            effect=None if self.effect is None else self.effect[flat],
            **per_inst,
        )

    # ---- top-K
    def topk(
        self,
        k: int,
        policy: str = DEFAULT_TOPK_POLICY,
        fill: bool = False,
        *,
        instances: Optional[Sequence[Instance]] = None,
        black_box: Optional["BlackBox"] = None,
        device: Union[str, torch.device, None] = "cpu",
        max_edges_per_forward: Optional[int] = None,
        protocol: str = "keep_nodes",
        necessity_weight: float = 0.0,
        connected_growth: bool = True,
    ) -> list[Tensor]:
        """Top-K pair masks (bool ``[P]`` per instance); no forward pass except for ``"refine"``.

        Starts from the pairs kept by the greedy phase; an instance with at most ``k`` of them
        keeps them all. Otherwise pairs are removed in ascending (weight, index) order until at
        most ``k`` remain, applying the connectivity rule after every removal (when it is on):

        - ``"nosplit"`` (default): each removal takes the lowest-weight pair whose removal drops
          no other pair (a cycle edge, or a pendant edge not holding the target), so the
          explanation stays connected and ends with exactly ``k`` pairs. An explanation that is
          not one component (a disconnected graph the greedy phase left untouched) is handled
          as ``"exact"``.
        - ``"exact"``: walks the pairs in ascending weight and accepts a removal only if at
          least ``k`` pairs remain after the connectivity rule, otherwise skips (keeps) that
          pair; repeats passes until ``k`` remain or a pass accepts nothing. If more than ``k``
          still remain, it continues as ``"paper"``.
        - ``"paper"``: Appendix C literally: while more than ``k`` remain, remove the lowest-weight
          pair and apply the connectivity rule; a removal that splits off a component can leave
          fewer than ``k`` pairs.
        - ``"refine"``: loss-driven, with forward passes (needs ``instances`` and ``black_box``).
          Descent: while more than ``k`` remain, try every removal (connectivity rule applied)
          and take the one giving the lowest loss against the label, among the removals that
          drop no other pair when the explanation is one component (else among all); ties:
          lower weight, then lower index. Grow-back, for fewer than ``k`` greedy pairs: add the
          missing pair of lowest loss (touching the explanation or the target under the
          connectivity rule; ties: lower index) while that lowers the loss by more than
          ``tol``. Both sequences do not depend on ``k``; :meth:`topk_grid` runs them once for
          many K. Costs about (pairs − k) batched steps of (pairs) copies per instance.
        - ``"sufficient"``: loss-driven growth from nothing under ``protocol``
          (:mod:`.sufficient`): add, one at a time, the pair whose addition gives the lowest
          loss against the label, judged with the nodes the protocol keeps; the first ``k``
          pairs added. Ignores the greedy phase; nested over K.

        Without the connectivity rule all policies are the same: drop the lowest-weight pairs
        beyond ``k``. The result never has more than ``k`` pairs.

        Args:
            k: the edge budget.
            policy: one of :data:`TOPK_POLICIES`.
            instances, black_box, device, max_edges_per_forward: for ``"refine"`` and
                ``"sufficient"`` only: the
                distillation's instances (in its order), the target and where / in what
                chunks (directed edges per forward) to evaluate it.
            protocol: ``"sufficient"`` only: ``keep_nodes`` or ``drop_isolated``
                (:mod:`gem_core.data.protocol`), the node rule of its copies.
            necessity_weight: ``"sufficient"`` only: weight λ of the complement's term (a
                candidate is also judged by how little its removal leaves of the prediction).
            connected_growth: ``"sufficient"`` only: False lifts the connectivity rule from
                the growth (pairs anywhere), True follows the distillation's.
            fill: afterwards, top explanations with fewer than ``k`` pairs up with the highest-Δ
                missing pairs (with the connectivity rule: only pairs touching the explanation or
                the target, one at a time). Off by default: it lowers distillation accuracy.
        Raises:
            ValueError: if ``k`` is not an integer in [1, 1000] or ``policy`` is unknown.
        """
        check_k(k)
        check_topk_policy(policy)
        if policy in ("refine", "sufficient"):
            return self.topk_grid(
                [k],
                policy,
                fill,
                instances=instances,
                black_box=black_box,
                device=device,
                max_edges_per_forward=max_edges_per_forward,
                protocol=protocol,
                necessity_weight=necessity_weight,
                connected_growth=connected_growth,
            )[k]
        return self._split(_topk_flat(self, k, policy, bool(fill)))

    def topk_grid(
        self,
        ks: Sequence[int],
        policy: str = DEFAULT_TOPK_POLICY,
        fill: bool = False,
        *,
        instances: Optional[Sequence[Instance]] = None,
        black_box: Optional["BlackBox"] = None,
        device: Union[str, torch.device, None] = "cpu",
        max_edges_per_forward: Optional[int] = None,
        protocol: str = "keep_nodes",
        necessity_weight: float = 0.0,
        connected_growth: bool = True,
    ) -> dict[int, list[Tensor]]:
        """:meth:`topk` for every K of ``ks`` (``{k: masks}``); ``"refine"`` does one descent
        and ``"sufficient"`` one growth for all of them (the result at each K is the same as
        :meth:`topk` at that K)."""
        for k in ks:
            check_k(k)
        check_topk_policy(policy)
        if policy == "sufficient":
            flat = _sufficient_flat(
                self,
                instances,
                black_box,
                ks,
                protocol,
                device,
                max_edges_per_forward,
                necessity_weight,
                self.connected and connected_growth,
            )
        elif policy == "refine":
            flat = _refine_flat(self, instances, black_box, ks, device, max_edges_per_forward)
        else:
            return {int(k): self.topk(k, policy, fill) for k in ks}
        owner = _pair_owner(self)
        return {
            k: self._split(_fill_flat(self, m, owner, k) if fill else m) for k, m in flat.items()
        }

    # ---- persistence
    def to_state(self) -> dict:
        """A ``torch.save``-able dict (tensors and plain values only)."""
        state = {f.name: getattr(self, f.name) for f in fields(self)}
        state.update(kind=DISTILL_KIND, version=DISTILL_VERSION)
        return state

    @classmethod
    def from_state(cls, state: dict) -> "Distillation":
        """The distillation of a saved state (fields added since it was saved: their default)."""
        return cls(**{f.name: state[f.name] for f in fields(cls) if f.name in state})
