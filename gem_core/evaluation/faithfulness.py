"""The field's faithfulness yardstick (GNNX-Bench, Kosan et al., ICLR 2024): sufficiency@k,
necessity@k and stability of edge explanations, measured with the target as a black box.

* **Sufficiency@k** (:func:`sufficiency_at_k`): keep each instance's top-k undirected pairs
  (:func:`gem_core.data.ranking.topk_mask`: ties to the lower pair index, never more than k),
  delete every other edge and run the target: the share of instances whose predicted class
  equals the prediction on the whole instance. GNNX-Bench keeps *every* edge tied with the k-th
  score, so with tied scores theirs keeps more edges; ours is at most as generous.
* **Necessity@k** (:func:`necessity_at_k`): delete the top-k pairs (keep the rest): the share of
  instances whose predicted class changes.
* **Protocol** (:class:`~gem_core.data.protocol.Protocol`, shared with the distillation):
  ``keep_nodes`` keeps every node and its features, only edges are deleted; ``drop_isolated``
  (GNNX-Bench) drops the nodes left without an edge before the forward pass (a node task's target
  stays; a graph-task instance left without any edge keeps its nodes).
* **Per class**: every figure also per class predicted on the whole instance (a majority class
  would hide the other: REFERENCE §9); classes with no instance are left out.
* **Regressors** (a black box with ``regression = True``): a prediction is a value, so "the same
  prediction" is a value within a tolerance of the whole instance's: ``rel_tol`` (default
  :data:`REGRESSION_REL_TOL` = 0.1) times the spread of the model's outputs, their standard
  deviation over the evaluated instances on the whole instances (1.0 when they do not vary),
  as in GraphFramEx-style regression fidelity; a figure per class does not apply (empty).
* **Stability** (:func:`stability`): mean Jaccard similarity of the top-k pair sets of the same
  instances explained with different seeds (every pair of seeds, per instance, then averaged):
  1.0 for a method without randomness.

Batched: one forward pass of the target per k over all instances (chunked by ``batch_size``),
plus one on the whole instances unless their predictions are given.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union

import torch
from torch import Tensor

from gem_core.data.config import check_k
from gem_core.data.instances import Instance
from gem_core.data.protocol import PROTOCOLS as PROTOCOLS  # re-exported: the protocols judged here
from gem_core.data.protocol import (  # re-exported: a regressor's yardstick
    REGRESSION_REL_TOL as REGRESSION_REL_TOL,
)
from gem_core.data.protocol import Protocol, check_protocol, drop_isolated
from gem_core.data.protocol import regression_tolerance as regression_tolerance
from gem_core.data.ranking import as_scores, check_score_length, topk_mask
from gem_core.models.predict import predict_proba, predict_values

#: instances per forward pass unless told otherwise (bounds memory on large splits)
DEFAULT_BATCH_SIZE = 1024
#: the fine K grid of the field's curves, per task level (GNNX-Bench plots graph tasks to 25)
FINE_K = {"graph": tuple(range(1, 26)), "node": tuple(range(1, 11))}


@dataclass
class FaithfulnessCurve:
    """One metric over K: ``at_k[k]`` over all instances, ``per_class[c][k]`` over the instances
    the target assigns class ``c`` on the whole instance (classes without one left out)."""

    at_k: dict[int, float]
    per_class: dict[int, dict[int, float]]

    def to_dict(self) -> dict[str, Any]:
        """JSON form: ``{"at_k": {"1": v, ...}, "per_class": {"0": {"1": v, ...}, ...}}``."""
        return {
            "at_k": _kdict(self.at_k),
            "per_class": {str(c): _kdict(v) for c, v in sorted(self.per_class.items())},
        }


def _kdict(d: dict[int, float]) -> dict[str, float]:
    return {str(int(k)): float(v) for k, v in sorted(d.items())}


# ----------------------------------------------------------------------------- subgraphs


def _unpack(explanation: Any) -> tuple[list[Instance], list[Tensor]]:
    """(instances, scores) of an ``Explanation`` carrying its instances or of a pair."""
    instances = getattr(explanation, "instances", None)
    if instances is not None:
        scores = list(explanation)
    else:
        try:
            instances, scores = explanation
        except (TypeError, ValueError):
            raise ValueError(
                "give an Explanation that carries its instances, or a pair (instances, scores)"
            ) from None
    instances, scores = list(instances), [as_scores(s) for s in scores]
    if not instances:
        raise ValueError("no instances to evaluate")
    if len(instances) != len(scores):
        raise ValueError(f"{len(scores)} score tensors for {len(instances)} instances")
    for inst, s in zip(instances, scores):
        check_score_length(inst, s)
    return instances, scores


def _regression(black_box) -> bool:
    return bool(getattr(black_box, "regression", False))


def _predict(
    black_box,
    instances: list[Instance],
    masks: Optional[list[Tensor]],
    protocol: Protocol,
    batch_size: Optional[int],
) -> Tensor:
    """Predicted classes (a regressor: values, float64) with only ``masks``' pairs of each
    instance (None: all of them), under ``protocol``."""
    if protocol is Protocol.DROP_ISOLATED and masks is not None:
        instances = [drop_isolated(inst.subgraph(m)) for inst, m in zip(instances, masks)]
        masks = None
    if _regression(black_box):
        return predict_values(black_box, instances, masks, batch_size=batch_size)
    return predict_proba(black_box, instances, masks, batch_size=batch_size).argmax(-1)


def _curve(
    black_box,
    explanation: Any,
    ks: Sequence[int],
    protocol: Union[str, Protocol],
    keep_top: bool,
    predicted: Optional[Tensor],
    batch_size: Optional[int],
    rel_tol: float = REGRESSION_REL_TOL,
) -> FaithfulnessCurve:
    protocol = check_protocol(protocol)
    instances, scores = _unpack(explanation)
    ks = sorted({check_k(k) for k in ks})
    if not ks:
        raise ValueError("ks is empty")
    regression = _regression(black_box)
    if predicted is None:
        full = _predict(black_box, instances, None, protocol, batch_size)
    else:
        full = torch.as_tensor(predicted).reshape(-1).cpu()
        full = full.double() if regression else full.long()
        if full.numel() != len(instances):
            raise ValueError(f"{full.numel()} predictions for {len(instances)} instances")
    tol = regression_tolerance(full, rel_tol) if regression else 0.0
    classes = [] if regression else sorted(int(c) for c in torch.unique(full))
    at_k: dict[int, float] = {}
    per_class: dict[int, dict[int, float]] = {c: {} for c in classes}
    for k in ks:
        top = [topk_mask(s, k) for s in scores]
        masks = top if keep_top else [~m for m in top]
        now = _predict(black_box, instances, masks, protocol, batch_size)
        same = (now - full).abs() <= tol if regression else now == full
        hit = (same if keep_top else ~same).double()
        at_k[k] = float(hit.mean())
        for c in classes:
            per_class[c][k] = float(hit[full == c].mean())
    return FaithfulnessCurve(at_k, per_class)


def sufficiency_at_k(
    black_box,
    explanation: Any,
    ks: Sequence[int],
    protocol: Union[str, Protocol] = Protocol.KEEP_NODES,
    *,
    predicted: Optional[Tensor] = None,
    batch_size: Optional[int] = DEFAULT_BATCH_SIZE,
    rel_tol: float = REGRESSION_REL_TOL,
) -> FaithfulnessCurve:
    """Share of instances whose prediction on their top-k pairs alone equals the prediction on
    the whole instance, for every k of ``ks``, overall and per predicted class (a regressor:
    within ``rel_tol`` times the spread of its outputs, see the module docstring).

    Args:
        black_box: callable ``InstanceBatch -> logits [N, C]`` (a ``GNNBlackBox``).
        explanation: an ``Explanation`` carrying its instances, or ``(instances, scores)``.
        ks: the K values (each an integer ≥ 1; k ≥ P keeps every pair).
        protocol: ``keep_nodes`` or ``drop_isolated`` (:class:`Protocol`).
        predicted: the target's classes (a regressor: values) on the whole instances, when
            known (spares a pass).
        batch_size: instances per forward pass (None: all at once).
        rel_tol: a regressor's tolerance, in units of the spread of its outputs.

    Our top-k never keeps more than k pairs (ties to the lower pair index); GNNX-Bench keeps
    every pair tied with the k-th score, so our sufficiency is at most as generous.
    """
    return _curve(black_box, explanation, ks, protocol, True, predicted, batch_size, rel_tol)


def necessity_at_k(
    black_box,
    explanation: Any,
    ks: Sequence[int],
    protocol: Union[str, Protocol] = Protocol.KEEP_NODES,
    *,
    predicted: Optional[Tensor] = None,
    batch_size: Optional[int] = DEFAULT_BATCH_SIZE,
    rel_tol: float = REGRESSION_REL_TOL,
) -> FaithfulnessCurve:
    """Share of instances whose prediction changes when their top-k pairs are deleted, for every
    k of ``ks``, overall and per predicted class (a regressor: moves by more than ``rel_tol``
    times the spread of its outputs; arguments as :func:`sufficiency_at_k`)."""
    return _curve(black_box, explanation, ks, protocol, False, predicted, batch_size, rel_tol)


# ----------------------------------------------------------------------------- stability


def jaccard(a: Tensor, b: Tensor) -> float:
    """Jaccard similarity of two boolean masks (1.0 when both are empty)."""
    union = int((a | b).sum())
    return 1.0 if union == 0 else int((a & b).sum()) / union


def stability(explanations_by_seed: Sequence[Sequence[Tensor]], k: int) -> float:
    """Mean Jaccard similarity of the top-``k`` pair sets across seeds.

    ``explanations_by_seed[s][i]``: the scores of instance ``i`` under seed ``s`` (an
    ``Explanation`` or a list of tensors per seed, the same instances in the same order). For
    every instance, the mean over every pair of seeds; then the mean over instances.
    """
    k = check_k(k)
    runs = [[as_scores(s) for s in run] for run in explanations_by_seed]
    if len(runs) < 2:
        raise ValueError(f"stability needs the explanations of at least 2 seeds, got {len(runs)}")
    n = len(runs[0])
    if n == 0:
        raise ValueError("no instances to compare")
    if any(len(run) != n for run in runs):
        raise ValueError(
            "every seed must explain the same instances: got "
            f"{', '.join(str(len(run)) for run in runs)} score tensors"
        )
    per_instance = []
    for i in range(n):
        sizes = {run[i].numel() for run in runs}
        if len(sizes) != 1:
            raise ValueError(
                f"instance {i} has a different number of scores across seeds: {sorted(sizes)}"
            )
        masks = [topk_mask(run[i], k) for run in runs]
        pairs = list(itertools.combinations(masks, 2))
        per_instance.append(sum(jaccard(a, b) for a, b in pairs) / len(pairs))
    return float(sum(per_instance) / n)
