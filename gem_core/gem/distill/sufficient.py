"""The top-K rule ``"sufficient"``: grow each explanation by the pair that best keeps the
prediction, judged under an evaluation protocol (forward passes; needs the instances and the
black box).

From the empty explanation, every step tries every candidate pair of every instance still below
the largest K (one copy each: the explanation so far plus the pair, evaluated in batched forward
passes) and adds the one whose copy gives the lowest loss against the distillation's label (the
target's prediction under ``label_source="predicted"``); ties: the lower pair index. Under the
connectivity rule a candidate must touch the explanation (or, for a node task, the target); an
instance with no such pair (an empty graph-task explanation, or a component used up) may take
any. The copies are built under the ``protocol`` Gem will be judged by
(:mod:`gem_core.data.protocol`): with ``drop_isolated`` a copy holds only the nodes its pairs
touch, so a fragment is judged as the field's sufficiency@k judges it; with ``keep_nodes`` every
node stays.

The explanations are nested: the top-K mask is the first K pairs added, for every K at once
(:meth:`~gem_core.gem.distill.result.Distillation.topk_grid` runs one growth for a whole grid).
Unlike the removal-driven rules this one does not start from the greedy phase's result: it asks
directly which K pairs, alone, keep the prediction, which is what sufficiency@K measures and
what the removal rules miss when a small fragment of any instance "looks like" the other class
(REFERENCE §9). Cost: about K batched steps of (candidate pairs) small copies per instance.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Optional, Union

import numpy as np
import torch
from torch import Tensor

from gem_core.data.instances import Instance
from gem_core.data.packed import np_segment_arange
from gem_core.data.protocol import Protocol, check_protocol
from gem_core.gem.distill.fields import DistillationFields
from gem_core.gem.distill.layout import _edge_budget
from gem_core.gem.distill.refine import _best_trial, _check_refine_inputs, _subset_losses
from gem_core.runtime.device import resolve_device

if TYPE_CHECKING:  # pragma: no cover
    from gem_core.models.targets import BlackBox


def _sufficient_flat(
    dist: DistillationFields,
    instances: Optional[Sequence[Instance]],
    black_box: Optional["BlackBox"],
    ks: Sequence[int],
    protocol: Union[str, Protocol],
    device: Union[str, torch.device, None],
    max_edges: Optional[int],
    necessity_weight: float = 0.0,
    connected: Optional[bool] = None,
) -> dict[int, Tensor]:
    """Flat top-K masks of the ``"sufficient"`` rule for every K of ``ks`` (one growth);
    ``connected``: the connectivity rule of the growth (None: the distillation's)."""
    if instances is None or black_box is None:
        raise ValueError(
            "policy 'sufficient' needs the instances and the black box (forward passes)."
        )
    layout = _check_refine_inputs(dist, instances, black_box)
    drop = check_protocol(protocol) is Protocol.DROP_ISOLATED
    dev = resolve_device(device)
    max_edges = _edge_budget(max_edges, dev)
    ks = sorted({int(k) for k in ks})
    if not necessity_weight >= 0:
        raise ValueError(f"necessity_weight must be non-negative, got {necessity_weight!r}")
    if necessity_weight > 0 and dist.labels.is_floating_point():
        raise ValueError(
            "teacher.necessity_weight rewards a complement that loses the predicted class: it "
            "applies to classifiers; set it to 0 for a regression model"
        )
    rank = _growth_order(
        dist,
        layout,
        ks[-1],
        drop,
        black_box,
        dev,
        max_edges,
        float(necessity_weight),
        dist.connected if connected is None else bool(connected),
    )
    return {k: torch.from_numpy(rank < k) for k in ks}


def _growth_order(
    dist: DistillationFields,
    layout,
    kmax: int,
    drop: bool,
    black_box: "BlackBox",
    device: torch.device,
    max_edges: int,
    necessity_weight: float = 0.0,
    connected: bool = True,
) -> np.ndarray:
    r"""The step at which each flat pair joins its instance's explanation (a large value for
    pairs never added: those beyond ``kmax``). With ``necessity_weight`` λ > 0 a candidate's
    loss also rewards a complement (the instance without the explanation) that no longer
    predicts the label: ``CE(f(S), y) − λ · log(1 − p_y(f(G \ S)))``."""
    n = len(dist)
    num_pairs = dist.num_pairs.numpy().astype(np.int64)
    owner = np.repeat(np.arange(n), num_pairs)
    node_ptr = np.concatenate([[0], np.cumsum(dist.num_nodes.numpy())]).astype(np.int64)
    pairs = dist.pairs.long().numpy()
    gu, gv = pairs[0] + node_ptr[owner], pairs[1] + node_ptr[owner]
    targets = dist.targets.numpy()
    node_task = bool((targets >= 0).any())
    rank = np.full(owner.shape[0], np.iinfo(np.int64).max, dtype=np.int64)
    kept = np.zeros(owner.shape[0], dtype=bool)
    count = np.zeros(n, dtype=np.int64)
    limit = np.minimum(num_pairs, kmax)
    labels = dist.labels
    for step in range(kmax):
        active = count < limit
        if not active.any():
            break
        cand = ~kept & active[owner]
        if connected:
            in_set = np.zeros(int(node_ptr[-1]), dtype=bool)
            in_set[gu[kept]] = True
            in_set[gv[kept]] = True
            if node_task:
                in_set[(node_ptr[:-1] + targets)[targets >= 0]] = True
            touch = in_set[gu] | in_set[gv]
            has_touch = np.bincount(owner[cand & touch], minlength=n) > 0
            cand &= touch | ~has_touch[owner]
        added = np.flatnonzero(cand)
        inst = owner[added]
        # copy c: the explanation so far of inst[c], then the pair added[c]
        kept_ids = np.flatnonzero(kept)  # grouped by instance (flat pairs are)
        kept_ptr = np.concatenate([[0], np.cumsum(count)])
        size = count[inst]
        copy_of = np.repeat(np.arange(inst.shape[0]), size + 1)
        at = np_segment_arange(size + 1)
        is_added = at == np.repeat(size, size + 1)
        src = np.repeat(added, size + 1)
        src[~is_added] = kept_ids[(np.repeat(kept_ptr[inst], size + 1) + at)[~is_added]]
        loss = _subset_losses(
            layout, inst, src, copy_of, labels, black_box, device, max_edges, drop_isolated=drop
        )
        if necessity_weight > 0:
            loss = loss + necessity_weight * _complement_losses(
                layout,
                inst,
                added,
                kept,
                dist.pair_ptr.numpy(),
                num_pairs,
                labels,
                black_box,
                device,
                max_edges,
                drop,
            )
        chosen = _best_trial(inst, loss, np.ones(inst.shape[0], dtype=bool), dist.tol)
        kept[added[chosen]] = True
        rank[added[chosen]] = step
        count[inst[chosen]] += 1
    return rank


def _complement_losses(
    layout,
    inst: np.ndarray,
    added: np.ndarray,
    kept: np.ndarray,
    pair_ptr: np.ndarray,
    num_pairs: np.ndarray,
    labels: Tensor,
    black_box: "BlackBox",
    device: torch.device,
    max_edges: int,
    drop: bool,
) -> np.ndarray:
    """``−log(1 − p_y)`` of each candidate's complement: instance ``inst[c]`` without its
    explanation so far and without the pair ``added[c]``."""
    size = num_pairs[inst]
    copy_of = np.repeat(np.arange(inst.shape[0]), size)
    src = np.repeat(pair_ptr[:-1][inst], size) + np_segment_arange(size)
    keep = ~kept[src] & (src != np.repeat(added, size))
    ce = _subset_losses(
        layout,
        inst,
        src[keep],
        copy_of[keep],
        labels,
        black_box,
        device,
        max_edges,
        drop_isolated=drop,
    )
    p = np.exp(-ce)
    return -np.log1p(-np.minimum(p, 1.0 - 1e-6))
