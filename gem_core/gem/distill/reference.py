"""Plain reference implementation of the distillation (paper Appendix C): the test oracle.

One instance at a time, one edge at a time, one forward pass per removal, networkx for the
connected components. Slow but obviously faithful; :mod:`gem_core.gem.distill` must agree with it.
It follows the same conventions as the batched engine (see
:mod:`gem_core.gem.distill.conventions`): Δ and weights are ordered by
``(round(value / tol), pair index)`` and a loss rise of at most ``tol`` counts as "no rise".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Union

import networkx as nx
import torch
from torch import Tensor

from gem_core.data.config import check_k
from gem_core.data.instances import Instance, collate
from gem_core.gem.distill.conventions import (
    TIE_TOL,
    check_label_source,
    granger_loss,
    is_regression,
    predicted_labels,
)
from gem_core.gem.distill.topk import DEFAULT_TOPK_POLICY, check_topk_policy

if TYPE_CHECKING:  # pragma: no cover
    from gem_core.models.targets import BlackBox


@dataclass
class ReferenceResult:
    """K-independent distillation of one instance (same meaning as in :mod:`gem_core.gem.distill`)."""

    delta: Tensor  # [P] float64
    weights: Tensor  # [P] float64
    kept: Tensor  # [P] bool
    label: Union[int, float]  # a class, or a regression value
    full_loss: float
    greedy_loss: float


@dataclass
class GreedyStep:
    """One step of the greedy phase, as :func:`reference_distill_one` hands it to ``on_step``.

    Pair ``pair`` was tried: its removal (with the connectivity rule) moved the loss from
    ``loss_before`` to ``loss_after``; ``accepted`` = the removal was kept, else the pair was put
    back with weight ``weight`` (0.0 when accepted). ``mask`` holds the pairs present after the
    step; ``dropped_with`` the other pairs the connectivity rule removed with it (accepted only).
    """

    number: int
    pair: int
    loss_before: float
    loss_after: float
    accepted: bool
    weight: float
    mask: Tensor
    dropped_with: list[int]


def _key(value: float, tol: float) -> int:
    return int(round(value / tol))


def _loss(
    instance: Instance, mask: Tensor, black_box: "BlackBox", label: Union[int, float]
) -> float:
    """Loss of the target on ``instance`` keeping only the pairs in ``mask`` (``label``: a class,
    or a regression value as a float)."""
    logits = black_box(collate([instance], [mask]))
    return float(granger_loss(logits, torch.tensor([label]))[0])


def keep_component(instance: Instance, mask: Tensor) -> Tensor:
    """Connectivity rule: keep only the pairs of one component of the graph ``mask``.

    Node task: the component of the target node. Graph task: the largest component by number
    of nodes; ties go to the component holding the lowest node id.
    """
    graph = nx.Graph()
    graph.add_nodes_from(range(instance.num_nodes))
    pairs = instance.pairs
    for j in range(instance.num_pairs):
        if mask[j]:
            graph.add_edge(int(pairs[0, j]), int(pairs[1, j]))
    if instance.target is not None:
        component = nx.node_connected_component(graph, instance.target)
    else:
        component = max(nx.connected_components(graph), key=lambda c: (len(c), -min(c)))
    out = mask.clone()
    for j in range(instance.num_pairs):
        if out[j] and int(pairs[0, j]) not in component:
            out[j] = False
    return out


def reference_distill_one(
    instance: Instance,
    black_box: "BlackBox",
    connected: bool,
    label_source: str = "true",
    tol: float = TIE_TOL,
    on_step: Callable[[GreedyStep], None] | None = None,
) -> ReferenceResult:
    """Δ of every pair and the greedy pruning of one instance.

    ``on_step`` (optional) receives a :class:`GreedyStep` for every pair the greedy phase tries,
    in order: the trace the "How it works" page steps through.
    """
    check_label_source(label_source)
    p = instance.num_pairs
    full = torch.ones(p, dtype=torch.bool)
    logits = black_box(collate([instance], [full]))
    regression = is_regression(black_box)
    label: Union[int, float]
    if label_source == "true":
        label = float(instance.y) if regression else int(instance.y)
    else:
        label = predicted_labels(logits, regression)[0].item()
    full_loss = float(granger_loss(logits, torch.tensor([label]))[0])

    delta = torch.zeros(p, dtype=torch.float64)
    for j in range(p):
        mask = full.clone()
        mask[j] = False
        delta[j] = _loss(instance, mask, black_box, label) - full_loss

    order = sorted(range(p), key=lambda j: (_key(float(delta[j]), tol), j))
    current, current_loss = full.clone(), full_loss
    weights = torch.zeros(p, dtype=torch.float64)
    number = 0
    for j in order:
        if not current[j]:
            continue  # already dropped together with a component
        tentative = current.clone()
        tentative[j] = False
        if connected:
            tentative = keep_component(instance, tentative)
        new_loss = _loss(instance, tentative, black_box, label)
        before, accepted = current_loss, new_loss <= current_loss + tol
        dropped = (
            [i for i in range(p) if i != j and current[i] and not tentative[i]]
            if accepted and on_step is not None
            else []
        )
        if accepted:
            current, current_loss = tentative, new_loss
        else:
            weights[j] = new_loss - current_loss
        if on_step is not None:
            number += 1
            on_step(
                GreedyStep(
                    number,
                    j,
                    before,
                    new_loss,
                    accepted,
                    float(weights[j]),
                    current.clone(),
                    dropped,
                )
            )
    weights[~current] = 0.0
    return ReferenceResult(delta, weights, current, label, full_loss, current_loss)


def reference_distill(
    instances: Sequence[Instance],
    black_box: "BlackBox",
    connected: bool,
    label_source: str = "true",
    tol: float = TIE_TOL,
) -> list[ReferenceResult]:
    """:func:`reference_distill_one` for every instance."""
    return [
        reference_distill_one(inst, black_box, connected, label_source, tol) for inst in instances
    ]


def _by_weight(mask: Tensor, result: ReferenceResult, tol: float) -> list[int]:
    """The pairs in ``mask``, ascending by (weight, index)."""
    pairs = [j for j in range(mask.numel()) if mask[j]]
    return sorted(pairs, key=lambda j: (_key(float(result.weights[j]), tol), j))


def remove_pair(instance: Instance, mask: Tensor, j: int, connected: bool) -> Tensor:
    """A copy of ``mask`` without pair ``j``, then the connectivity rule (when ``connected``)."""
    out = mask.clone()
    out[j] = False
    return keep_component(instance, out) if connected else out


def _paper(
    instance: Instance, result: ReferenceResult, mask: Tensor, k: int, connected: bool, tol: float
) -> Tensor:
    """Appendix C: while more than ``k`` remain, remove the lowest-weight pair (+ the rule)."""
    for j in _by_weight(mask, result, tol):
        if int(mask.sum()) <= k:
            break
        if mask[j]:
            mask = remove_pair(instance, mask, j, connected)
    return mask


def _exact(
    instance: Instance, result: ReferenceResult, mask: Tensor, k: int, connected: bool, tol: float
) -> Tensor:
    """Passes in ascending weight; accept a removal only if at least ``k`` pairs remain."""
    accepted = True
    while int(mask.sum()) > k and accepted:
        accepted = False
        for j in _by_weight(mask, result, tol):
            if int(mask.sum()) <= k:
                break
            if not mask[j]:
                continue
            tentative = remove_pair(instance, mask, j, connected)
            if int(tentative.sum()) >= k:
                mask, accepted = tentative, True
    return _paper(instance, result, mask, k, connected, tol)


def _nosplit(
    instance: Instance, result: ReferenceResult, mask: Tensor, k: int, connected: bool, tol: float
) -> Tensor:
    """Remove the lowest-weight pair whose removal drops no other pair, until ``k`` remain.

    An explanation that is not already the one component the rule keeps (a disconnected graph
    the greedy phase left untouched) is split already: it goes to :func:`_exact` directly.
    """
    if connected and not torch.equal(keep_component(instance, mask), mask):
        return _exact(instance, result, mask, k, connected, tol)
    while int(mask.sum()) > k:
        for j in _by_weight(mask, result, tol):
            tentative = remove_pair(instance, mask, j, connected)
            if int(tentative.sum()) == int(mask.sum()) - 1:
                mask = tentative
                break
        else:
            break  # every removal splits something off
    return _exact(instance, result, mask, k, connected, tol)


_POLICIES = {"paper": _paper, "exact": _exact, "nosplit": _nosplit}


def reference_refine(
    instance: Instance,
    result: ReferenceResult,
    ks: Sequence[int],
    connected: bool,
    black_box: "BlackBox",
    tol: float = TIE_TOL,
) -> dict[int, Tensor]:
    """The ``"refine"`` top-K policy for every K of ``ks`` (one descent, one grow-back).

    Descent, from the greedy phase's pairs while more than ``min(ks)`` remain: try every removal
    (with the connectivity rule) and take the one of lowest loss, among the removals dropping no
    other pair when the explanation is one component (all removals otherwise, or when none
    qualifies); ties: lower weight, then lower index. The explanation is recorded at every K
    the count reaches. Grow-back, from the greedy phase's pairs while fewer than ``max(ks)``:
    the missing pair of lowest loss (ties: lower index) among those touching the explanation
    or the target (any pair without the rule, or for an empty graph-task explanation) is added
    if it lowers the loss by more than ``tol``, else the grow-back stops; the explanation is
    recorded at every K it fits.
    """
    ks = sorted({int(k) for k in ks})
    for k in ks:
        check_k(k)
    out = {k: result.kept.clone() for k in ks}
    label = result.label
    mask = result.kept.clone()
    while int(mask.sum()) > ks[0]:
        count = int(mask.sum())
        ruled = not connected or torch.equal(keep_component(instance, mask), mask)
        trials = []
        for j in _by_weight(mask, result, tol):
            tentative = remove_pair(instance, mask, j, connected)
            valid = not ruled or int(tentative.sum()) == count - 1
            loss = _loss(instance, tentative, black_box, label)
            trials.append((valid, _key(loss, tol), tentative))
        if not any(valid for valid, _, _ in trials):
            trials = [(True, key, t) for _, key, t in trials]
        # the lowest loss among the valid trials; ties: the first in (weight, index) order
        pick = min(range(len(trials)), key=lambda i: (not trials[i][0], trials[i][1], i))
        mask = trials[pick][2]
        for k in ks:
            if count > k >= int(mask.sum()):
                out[k] = mask.clone()
    mask, current = result.kept.clone(), result.greedy_loss
    pairs = instance.pairs
    while int(mask.sum()) < ks[-1]:
        nodes = {int(x) for j in range(instance.num_pairs) if mask[j] for x in pairs[:, j]}
        if instance.target is not None:
            nodes.add(int(instance.target))
        best = None
        for j in range(instance.num_pairs):
            u, v = int(pairs[0, j]), int(pairs[1, j])
            if mask[j] or (connected and nodes and u not in nodes and v not in nodes):
                continue
            tentative = mask.clone()
            tentative[j] = True
            loss = _loss(instance, tentative, black_box, label)
            if best is None or _key(loss, tol) < best[0]:
                best = (_key(loss, tol), loss, tentative)
        if best is None or not best[1] < current - tol:
            break
        mask, current = best[2], best[1]
        for k in ks:
            if int(mask.sum()) <= k:
                out[k] = mask.clone()
    return out


def reference_fill(
    instance: Instance,
    result: ReferenceResult,
    mask: Tensor,
    k: int,
    connected: bool,
    tol: float = TIE_TOL,
) -> Tensor:
    """Fill-up: add missing pairs in descending (Δ, then ascending index) while fewer than ``k``.

    With the connectivity rule a pair is added only if it touches the explanation (an endpoint
    of one of its pairs, or the target node); an empty graph-task explanation takes any pair.
    """
    mask = mask.clone()
    order = sorted(
        (j for j in range(instance.num_pairs) if not mask[j]),
        key=lambda j: (-_key(float(result.delta[j]), tol), j),
    )
    pairs = instance.pairs
    nodes = {int(x) for j in range(instance.num_pairs) if mask[j] for x in pairs[:, j]}
    if instance.target is not None:
        nodes.add(int(instance.target))
    while int(mask.sum()) < k:
        for j in order:
            u, v = int(pairs[0, j]), int(pairs[1, j])
            if mask[j]:
                continue
            if not connected or not nodes or u in nodes or v in nodes:
                mask[j] = True
                nodes.update((u, v))
                break
        else:
            break  # nothing left that can be added
    return mask


def reference_topk(
    instance: Instance,
    result: ReferenceResult,
    k: int,
    connected: bool,
    tol: float = TIE_TOL,
    policy: str = DEFAULT_TOPK_POLICY,
    fill: bool = False,
    black_box: "BlackBox | None" = None,
) -> Tensor:
    """Top-K mask of one instance (policies as in :meth:`gem_core.gem.distill.Distillation.topk`).

    Starting from the greedy phase's pairs: with at most ``k`` of them, keep them all; else
    remove pairs by ``policy`` (falling back ``"nosplit"`` -> ``"exact"`` -> ``"paper"`` while
    more than ``k`` remain), applying the connectivity rule after every removal. Then, with
    ``fill``, :func:`reference_fill`. ``"refine"`` (:func:`reference_refine`) needs the
    ``black_box``.
    """
    check_k(k)
    check_topk_policy(policy)
    mask = result.kept.clone()
    if policy == "refine":
        if black_box is None:
            raise ValueError("policy 'refine' needs the black box")
        mask = reference_refine(instance, result, [k], connected, black_box, tol)[k]
    elif int(mask.sum()) > k:
        mask = _POLICIES[policy](instance, result, mask, k, connected, tol)
    if fill:
        mask = reference_fill(instance, result, mask, k, connected, tol)
    return mask


def reference_topk_all(
    instances: Sequence[Instance],
    results: Sequence[ReferenceResult],
    k: int,
    connected: bool,
    tol: float = TIE_TOL,
    policy: str = DEFAULT_TOPK_POLICY,
    fill: bool = False,
    black_box: "BlackBox | None" = None,
) -> list[Tensor]:
    """:func:`reference_topk` for every instance."""
    return [
        reference_topk(inst, res, k, connected, tol, policy, fill, black_box)
        for inst, res in zip(instances, results)
    ]


__all__ = [
    "GreedyStep",
    "ReferenceResult",
    "keep_component",
    "reference_distill",
    "reference_distill_one",
    "reference_fill",
    "reference_refine",
    "reference_topk",
    "reference_topk_all",
    "remove_pair",
]
