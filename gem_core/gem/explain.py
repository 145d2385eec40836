"""Gem's one explain path: the auto-encoder's pass, then (Gem + check) the explain-time check.

Every front-end explains through :func:`explain_packed`: the registry's Gem (through
:meth:`gem_core.gem.pipeline.GemPipeline.explain`), the PyG adapter, ``tune`` and the screens. It
reads the instances as the fitted auto-encoder does (the target's predicted class appended to every
node under ``inputs.condition_on_prediction``), scores every pair in one forward pass, and where
the settings' check asks the target, hands the scores to :func:`apply_check`. :func:`check_plan`
says where and how the check runs for a K grid; the app's How-it-works page tells it from there.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional

import torch
from torch import Tensor

from gem_core.data.packed import PackedGraphs
from gem_core.data.protocol import PROTOCOLS
from gem_core.gem.autoencoder import GemAutoEncoder
from gem_core.gem.check_rules import CheckRule
from gem_core.gem.checked_ranking import checked_scores, deletion_lead
from gem_core.gem.cover_order import cover_first_scores
from gem_core.gem.settings import CheckProtocol, GemSettings, PairOrder


@dataclass(frozen=True)
class CheckPlan:
    """Where and how the check runs, for one set of settings and a K grid.

    Attributes:
        rule: the rule from :attr:`start` on (:class:`~gem_core.gem.check_rules.CheckRule`).
        width: how many of Gem's next pairs are compared at a position.
        lead: how many pairs the target orders by deletion first (0: none), within the top
            :attr:`lead_within` (the grid's smallest K).
        lead_within: the budget the lead is drawn from.
        start: the first position the check decides (after Gem's and the target's lead).
        stop: the position it stops at (the largest budget, never before ``start``).
        late: ``(position, rule)``: the rule from that position on (None: :attr:`rule`
            throughout).
        backward: the ``(previous K, K)`` spans searched backwards where a top-K fails.
        protocols: the protocols under which a prediction must hold (``check.protocol``).
    """

    rule: CheckRule
    width: int
    lead: int
    lead_within: int
    start: int
    stop: int
    late: Optional[tuple[int, CheckRule]]
    backward: tuple[tuple[int, int], ...]
    protocols: tuple[str, ...] = PROTOCOLS


def check_plan(settings: GemSettings, k_grid: tuple[int, ...]) -> CheckPlan:
    """The check of ``settings`` on the K grid ``k_grid``: it starts after the necessity lead
    (Gem's, learned) and the check's own lead (the target's), stops at the largest budget, and
    a late rule takes over at the grid's smallest K; a prediction must hold under both
    protocols, or under the one Gem is taught for (``check.protocol = "taught"``)."""
    check = settings.check
    ks = tuple(int(k) for k in k_grid)
    start = max(settings.teacher.necessity_lead, check.lead)
    stop = max(max(settings.budgets(ks), default=start), start)
    late = None
    if check.late is not None:
        late = (max(min(ks, default=start), start), check.late)
    return CheckPlan(
        rule=check.rule,
        width=check.width,
        lead=check.lead,
        lead_within=min(ks) if ks else 0,
        start=start,
        stop=stop,
        late=late,
        backward=check.backward.spans(ks),
        protocols=PROTOCOLS
        if check.protocol == CheckProtocol.both
        else (settings.teacher.protocol.value,),
    )


def apply_check(
    settings: GemSettings,
    k_grid: tuple[int, ...],
    black_box: Any,
    packed: PackedGraphs,
    scores: Tensor,
    predicted: Optional[Tensor] = None,
) -> Tensor:
    """Gem's flat pair ``scores`` of the ``packed`` instances (their own features) with the
    settings' check (:func:`check_plan`); unchanged when it does not ask the target.
    ``predicted``: the target's classes on the whole instances (else one batched forward)."""
    if not settings.asks_target or packed.num_instances == 0:
        return scores
    if predicted is None:
        predicted = predict_packed(black_box, packed)
    plan = check_plan(settings, k_grid)
    if plan.lead:  # the target orders the lead; the check grows from after it
        scores = deletion_lead(
            black_box,
            packed,
            scores,
            predicted,
            lead=plan.lead,
            within=plan.lead_within,
            device=getattr(black_box, "device", None),
        )
    return checked_scores(
        black_box,
        packed,
        scores,
        predicted,
        start=plan.start,
        stop=plan.stop,
        width=plan.width,
        rule=plan.rule,
        late=plan.late,
        backward=plan.backward,
        protocols=plan.protocols,
    )


def predict_packed(black_box: Any, packed: PackedGraphs) -> Tensor:
    """The target's class on every whole packed instance; a regressor's value (float64).

    On the CPU the instances go through the target in runs of at most
    :data:`~gem_core.models.predict.NODES_PER_FORWARD` nodes, whose activations stay in the
    caches (the strong Mutagenicity target's forward on its 434 test molecules: 0.099 ms per
    molecule in one forward, 0.06-0.08 in such runs); one forward on a GPU."""
    from gem_core.gem.distill.conventions import is_regression, predicted_labels
    from gem_core.models.predict import forward_slices

    parts = forward_slices(black_box, packed.node_counts().tolist())
    with torch.no_grad():
        if len(parts) == 1:
            out = black_box(packed.forward_batch())
        else:
            out = torch.cat(
                [
                    black_box(packed.select(torch.arange(p.start, p.stop)).forward_batch())
                    for p in parts
                ]
            )
    return predicted_labels(out, is_regression(black_box)).cpu()


def explain_packed(
    autoencoder: GemAutoEncoder,
    settings: GemSettings,
    k_grid: tuple[int, ...],
    packed: PackedGraphs,
    black_box: Any = None,
    predicted: Optional[Tensor] = None,
    num_classes: Optional[int] = None,
    hops: Optional[Tensor] = None,
) -> Tensor:
    """Gem's score of every pair of the ``packed`` instances (their own features), flat.

    One forward pass of the fitted ``autoencoder`` on what it reads, then the settings' check
    (:func:`apply_check`) where it asks the target. ``black_box`` (the target, outputs only) is
    needed when Gem reads the predicted class or the check runs; ``predicted``: the target's
    classes when the caller has them; ``num_classes``: the one-hot's width (default: the black
    box's); ``hops``: node tasks, every node's hop distance to its target when the caller has
    them (the PyG adapter's, from the search that cut the computation graphs).
    """
    if packed.num_instances == 0 or packed.num_pairs == 0:
        return torch.zeros(packed.num_pairs)
    reads_prediction = settings.inputs.condition_on_prediction
    if predicted is None and (reads_prediction or settings.asks_target):
        if black_box is None:
            raise ValueError(
                "this Gem reads the target's prediction (inputs.condition_on_prediction or "
                "the check): give the target"
            )
        predicted = predict_packed(black_box, packed)
    reads = packed.float_features()
    if reads_prediction:
        assert predicted is not None  # computed above where not given
        width = int(num_classes if num_classes is not None else black_box.num_classes)
        if len(predicted) and int(predicted.max()) >= width:
            raise ValueError(
                f"predicted class {int(predicted.max())} is out of range: the target "
                f"has {width} classes"
            )
        classes = torch.eye(width)[torch.as_tensor(predicted).long().cpu()]
        onehot = classes.repeat_interleave(reads.node_counts(), dim=0)  # one row per node
        reads = replace(reads, x=torch.cat([reads.x, onehot.to(reads.x.device)], 1))
    scores = autoencoder.score_pairs(autoencoder.prepare_packed(reads, hops)).float()
    if settings.network.order is PairOrder.cover:  # still Gem's one pass: no target query
        scores = cover_first_scores(packed, scores)
    if settings.asks_target:
        scores = apply_check(settings, k_grid, black_box, packed, scores, predicted)
    return scores


__all__ = ["CheckPlan", "apply_check", "check_plan", "explain_packed", "predict_packed"]
