"""Evaluation of edge explanations: accuracy at K, log-odds, fidelity, edge AUC and timing.

Every explainer (Gem, the baselines) hands over one score per undirected pair of each instance
(higher = more important). This module turns scores into explanation subgraphs and measures them
with the target GNN seen as a black box, the way the paper does (§4 and Appendix B):

* **Top-K** (:func:`gem_core.data.ranking.topk_mask`): the K highest-scoring pairs, ties broken by the lower pair
  index, never more than K pairs, all pairs when K ≥ P.
* **Explanation subgraph** (:func:`explanation_subgraph`): the instance with only its top-K
  pairs. All nodes and their features are kept; every other edge is *deleted* from the graph
  (not masked: a PyG edge mask still counts the edge in GCN normalisation).
* **Complement subgraph** (:func:`complement_subgraph`): the instance with its top-K pairs
  deleted and all other pairs kept.
* **Accuracy at K**: fraction of instances whose prediction on the explanation subgraph equals
  the ground-truth label ``y`` (paper Tables 1-2). ``accuracy_at_k_mutagen`` is the same over the
  instances whose label is ``mutagen_label`` only (Mutagenicity "-0" rows: label 0).
* **Log-odds difference** at one K: ``logit(p_c(G^c)) - logit(p_c(G^s))`` per instance, where
  ``c`` is the class the target predicts on the full computation graph ``G^c``, ``G^s`` the
  explanation subgraph and ``logit(p) = log(p / (1 - p))``; probabilities are clipped to
  ``[1e-6, 1 - 1e-6]`` so the value is always finite (|value| ≤ 2·log(1e6 - 1) ≈ 27.6).
  Closer to 0 is better; positive = the subgraph supports the prediction less than the full graph.
* **Agreement at K** (``agreement_at_k``): fraction of instances whose predicted class on the
  explanation subgraph equals the predicted class on the full computation graph. It measures
  whether the explanation explains the *model* (faithfulness), where accuracy measures it
  against the true label and so leans on the model being right.
* **Fidelity at K** (``fidelity_at_k``): fraction of instances whose predicted class on the
  complement subgraph (top-K pairs deleted, everything else kept) differs from the predicted class
  on the full computation graph. Higher = removing the explanation matters more to the model
  (this is PyG's "fidelity+" with hard edge deletion and predicted-class agreement, not the
  probability-difference variant).
* **Edge AUC** (``edge_auc``): ROC-AUC of the scores against ``Instance.motif_mask`` (synthetic
  datasets), computed *globally* over all pairs of all instances that carry a motif mask
  (rank-based Mann-Whitney statistic with tied scores counted half); absent when no instance
  has a motif mask or when only one class of pairs exists.

Batched: one forward pass of the black box per K (and one for the full graphs) over all
instances, optionally chunked with ``batch_size``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch import Tensor

from gem_core.data.config import check_k
from gem_core.data.instances import Instance
from gem_core.data.ranking import as_scores, check_score_length, roc_auc
from gem_core.explainers.base import Explanation
from gem_core.models.predict import predict_proba
from gem_core.runtime.progress import ProgressFn, report

PROB_CLIP = 1e-6


def log_odds(p: Tensor) -> Tensor:
    """``log(p / (1 - p))`` with ``p`` clipped to ``[1e-6, 1 - 1e-6]`` (always finite)."""
    p = p.to(torch.float64).clamp(PROB_CLIP, 1.0 - PROB_CLIP)
    return torch.log(p) - torch.log1p(-p)


def log_odds_difference(p_full: Tensor, p_sub: Tensor, cls: Tensor) -> Tensor:
    """``logit(p_full[cls]) - logit(p_sub[cls])`` per row (``p_*`` are ``[N, C]``)."""
    idx = cls.view(-1, 1).long()
    return log_odds(p_full.gather(1, idx).view(-1)) - log_odds(p_sub.gather(1, idx).view(-1))


def edge_auc(instances: Sequence[Instance], scores: Sequence[Tensor]) -> Optional[float]:
    """Global edge ROC-AUC against ``motif_mask`` over all pairs of the instances that have one."""
    s, y = [], []
    for inst, sc in zip(instances, scores):
        if inst.motif_mask is None:
            continue
        check_score_length(inst, sc)
        s.append(as_scores(sc))
        y.append(inst.motif_mask.reshape(-1).bool().cpu())
    if not s:
        return None
    return roc_auc(torch.cat(s), torch.cat(y))


# ----------------------------------------------------------------------------- timing


def explain_timed(explainer, instances: Sequence[Instance]) -> tuple[list[Tensor], float]:
    """Run ``explainer.explain(instances)`` once; return the scores and ms per instance.

    One wall-clock measurement around one call, so batch-capable methods are timed batched.
    """
    instances = list(instances)
    if not instances:
        raise ValueError("no instances to explain")
    start = time.perf_counter()
    scores = explainer.explain(instances)
    elapsed = time.perf_counter() - start
    return list(scores), 1000.0 * elapsed / len(instances)


def time_explain(explainer, instances: Sequence[Instance]) -> float:
    """Milliseconds per instance of one (batched) ``explainer.explain(instances)`` call."""
    return explain_timed(explainer, instances)[1]


# ----------------------------------------------------------------------------- results


def _kdict(d: dict) -> dict[str, float]:
    return {str(int(k)): float(v) for k, v in sorted(d.items(), key=lambda kv: int(kv[0]))}


@dataclass
class MethodResult:
    """Scores of one explainer on one set of instances (see the module docstring).

    ``to_dict()`` gives the JSON form with string keys for K; the optional entries
    (``accuracy_at_k_mutagen``, ``edge_auc``, ``agreement_at_k``) are left out when None. ``log_odds_k`` and
    ``num_instances`` describe the run and are not part of the JSON form.
    """

    accuracy_at_k: dict[int, float]
    log_odds: list[float]
    fidelity_at_k: dict[int, float]
    ms_per_instance: float = 0.0
    fit_seconds: float = 0.0
    accuracy_at_k_mutagen: Optional[dict[int, float]] = None
    edge_auc: Optional[float] = None
    agreement_at_k: Optional[dict[int, float]] = None
    log_odds_k: Optional[int] = field(default=None, compare=False)
    num_instances: int = field(default=0, compare=False)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"accuracy_at_k": _kdict(self.accuracy_at_k)}
        if self.accuracy_at_k_mutagen is not None:
            out["accuracy_at_k_mutagen"] = _kdict(self.accuracy_at_k_mutagen)
        if self.agreement_at_k is not None:
            out["agreement_at_k"] = _kdict(self.agreement_at_k)
        out["log_odds"] = [float(v) for v in self.log_odds]
        out["fidelity_at_k"] = _kdict(self.fidelity_at_k)
        if self.edge_auc is not None:
            out["edge_auc"] = float(self.edge_auc)
        out["ms_per_instance"] = float(self.ms_per_instance)
        out["fit_seconds"] = float(self.fit_seconds)
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "MethodResult":
        def keys(x):
            return None if x is None else {int(k): float(v) for k, v in x.items()}

        return cls(
            accuracy_at_k=keys(d["accuracy_at_k"]),
            log_odds=[float(v) for v in d["log_odds"]],
            fidelity_at_k=keys(d["fidelity_at_k"]),
            ms_per_instance=float(d.get("ms_per_instance", 0.0)),
            fit_seconds=float(d.get("fit_seconds", 0.0)),
            accuracy_at_k_mutagen=keys(d.get("accuracy_at_k_mutagen")),
            edge_auc=None if d.get("edge_auc") is None else float(d["edge_auc"]),
            agreement_at_k=keys(d.get("agreement_at_k")),
            num_instances=len(d["log_odds"]),
        )


def evaluate_scores(
    black_box,
    instances: Sequence[Instance],
    scores: Sequence[Tensor],
    k_grid: Sequence[int],
    *,
    log_odds_k: Optional[int] = None,
    mutagen_label: Optional[int] = None,
    fidelity: bool = True,
    ms_per_instance: float = 0.0,
    fit_seconds: float = 0.0,
    batch_size: Optional[int] = None,
    progress: Optional[ProgressFn] = None,
) -> MethodResult:
    """Measure explanations ``scores`` (one ``[P_i]`` tensor per instance) with the black box.

    Args:
        black_box: callable ``InstanceBatch -> logits [N, C]`` (a ``GNNBlackBox``).
        instances: the explained instances (labels ``y`` are the ground truth).
        scores: one score per pair of each instance, higher = more important.
        k_grid: the K values of accuracy and fidelity.
        log_odds_k: K of the log-odds difference (default: the middle of ``k_grid``,
            ``k_grid[len // 2]``, like ``DatasetSpec.default_k``).
        mutagen_label: when given, also report accuracy over instances with this label only
            (``accuracy_at_k_mutagen``; 0 for Mutagenicity).
        fidelity: compute ``fidelity_at_k`` (one more forward pass per K).
        ms_per_instance, fit_seconds: timing figures copied into the result.
        batch_size: instances per forward pass (default: all at once).
    """
    instances = list(instances)
    if not instances:
        raise ValueError("no instances to evaluate")
    # carrying the instances checks one score per pair of each; its top-K is the one ranking
    explanation = Explanation(
        getattr(scores, "method", "scores"), list(scores), float(ms_per_instance), instances
    )
    ks = sorted({check_k(k) for k in k_grid})
    if not ks:
        raise ValueError("k_grid is empty")
    lo_k = check_k(log_odds_k) if log_odds_k is not None else list(k_grid)[len(k_grid) // 2]
    lo_k = check_k(lo_k)
    all_ks = sorted(set(ks) | {lo_k})

    scores = [as_scores(s) for s in explanation]
    y = torch.tensor([int(inst.y) for inst in instances])
    subset = None if mutagen_label is None else (y == int(mutagen_label))
    steps = 1 + len(all_ks) * (2 if fidelity else 1)
    done = 0

    p_full = predict_proba(black_box, instances, batch_size=batch_size)
    pred_full = p_full.argmax(-1)
    done += 1
    report(progress, done / steps, "full graphs")

    acc, acc_sub, agree, fid = {}, {}, {}, {}
    lo_values: list[float] = []
    for k in all_ks:
        masks = explanation.topk(k)
        p_sub = predict_proba(black_box, instances, masks, batch_size=batch_size)
        pred_sub = p_sub.argmax(-1)
        correct = pred_sub == y
        done += 1
        report(progress, done / steps, f"K={k} explanation subgraphs")
        if k in ks:
            acc[k] = float(correct.double().mean())
            agree[k] = float((pred_sub == pred_full).double().mean())
            if subset is not None and bool(subset.any()):  # left empty when no such instance
                acc_sub[k] = float(correct[subset].double().mean())
        if k == lo_k:
            lo_values = log_odds_difference(p_full, p_sub, pred_full).tolist()
        if fidelity and k in ks:
            comp = [~m for m in masks]
            p_comp = predict_proba(black_box, instances, comp, batch_size=batch_size)
            fid[k] = float((p_comp.argmax(-1) != pred_full).double().mean())
            done += 1
            report(progress, done / steps, f"K={k} complement subgraphs")

    return MethodResult(
        accuracy_at_k=acc,
        log_odds=lo_values,
        fidelity_at_k=fid,
        ms_per_instance=float(ms_per_instance),
        fit_seconds=float(fit_seconds),
        accuracy_at_k_mutagen=acc_sub if subset is not None else None,
        edge_auc=edge_auc(instances, scores),
        agreement_at_k=agree,
        log_odds_k=lo_k,
        num_instances=len(instances),
    )


def evaluate_explainer(
    explainer, black_box, instances: Sequence[Instance], k_grid: Sequence[int], **kwargs
) -> tuple[MethodResult, list[Tensor]]:
    """Explain ``instances`` once (timed), then :func:`evaluate_scores`.

    ``fit_seconds`` is read from the explainer's ``fit_seconds_`` attribute (0 when absent).
    Returns the result and the scores.
    """
    scores, ms = explain_timed(explainer, instances)
    kwargs.setdefault("fit_seconds", float(getattr(explainer, "fit_seconds_", 0.0) or 0.0))
    result = evaluate_scores(black_box, instances, scores, k_grid, ms_per_instance=ms, **kwargs)
    return result, scores
