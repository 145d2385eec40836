"""Training targets for Gem, derived from a distillation.

The paper trains the explainer on the distilled explanation's weighted adjacency. The evaluation,
however, ranks *all* pairs and keeps the top K, so Gem must also learn an order for pairs outside
the distilled explanation (when K exceeds it). We give those pairs a second Granger-style score:
the *addition effect* ``loss(G^s ∪ {e}) − loss(G^s)`` — how much adding ``e`` back to the
explanation ``G^s`` disturbs the prediction. Pairs whose addition disturbs least rank first.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from gem_core.data.instances import Instance, collate
from gem_core.gem.distill.conventions import granger_loss
from gem_core.gem.settings import GemSettings


@torch.no_grad()
def addition_effects(
    instances: Sequence[Instance],
    kept: Sequence[Tensor],
    labels: Tensor,
    black_box,
    max_copies: int = 4096,
) -> list[Tensor]:
    """For each pair outside ``kept``: loss with the pair added to the kept subgraph minus without.

    Pairs inside ``kept`` get 0. All copies of all instances are evaluated in batched forward
    passes of at most ``max_copies`` graphs.
    """
    jobs: list[tuple[int, int]] = []  # (instance, pair) for every pair outside the explanation
    for i, mask in enumerate(kept):
        for j in torch.nonzero(~mask.bool()).view(-1).tolist():
            jobs.append((i, j))
    base = _losses(instances, list(kept), labels, black_box, max_copies)
    out = [torch.zeros(inst.num_pairs) for inst in instances]
    for start in range(0, len(jobs), max_copies):
        chunk = jobs[start : start + max_copies]
        insts, masks = [], []
        for i, j in chunk:
            m = kept[i].bool().clone()
            m[j] = True
            insts.append(instances[i])
            masks.append(m)
        idx = torch.tensor([i for i, _ in chunk])
        losses = _losses(insts, masks, labels[idx], black_box, max_copies)
        for (i, j), loss in zip(chunk, (losses - base[idx]).tolist()):
            out[i][j] = loss
    return out


def _losses(
    instances: Sequence[Instance],
    masks: Sequence[Tensor],
    labels: Tensor,
    black_box,
    max_copies: int,
) -> Tensor:
    parts = []
    for s in range(0, len(instances), max_copies):
        logits = black_box(collate(instances[s : s + max_copies], masks[s : s + max_copies])).cpu()
        part = labels[s : s + max_copies]
        if part.is_floating_point():  # a regression: the squared error
            parts.append(granger_loss(logits, part).float())
        else:  # float32, as the shipped fits were made
            parts.append(F.cross_entropy(logits.float(), part, reduction="none"))
    return torch.cat(parts) if parts else torch.zeros(0)


def _rank01(values: Tensor) -> Tensor:
    """Ranks of ``values`` scaled to (0, 1]: the smallest value gets the largest rank."""
    if values.numel() == 0:
        return values.float()
    order = torch.argsort(torch.argsort(-values.double(), stable=True), stable=True)
    return (order.float() + 1) / values.numel()


def parse_ks(text: str) -> tuple[int, ...]:
    """``"1-30"`` (a range) or ``"5/10/15"`` (a list) as sorted distinct budgets K."""
    from gem_core.data.config import check_k

    text = text.strip()
    try:
        if "-" in text:
            lo, hi = (int(w) for w in text.split("-", 1))
            ks = list(range(lo, hi + 1))
        else:
            ks = [int(w) for w in text.replace(",", "/").split("/") if w.strip()]
    except ValueError:
        raise ValueError(f"budgets look like 1-30 or 5/10/15, got {text!r}") from None
    out = tuple(sorted({check_k(k) for k in ks}))
    if not out:
        raise ValueError(f"no budget K in {text!r}")
    return out


def format_ks(ks: Sequence[int]) -> str:
    """Budgets as :func:`parse_ks` reads them: ``1-30`` for a run of three or more, else ``5/10``."""
    ks = [int(k) for k in ks]
    if len(ks) > 2 and ks == list(range(ks[0], ks[-1] + 1)):
        return f"{ks[0]}-{ks[-1]}"
    return "/".join(map(str, ks))


def _graded(
    dist,
    settings: GemSettings,
    ks: Sequence[int],
    policy: str,
    instances: Optional[Sequence[Instance]],
    black_box,
) -> list[Tensor]:
    """Per instance, the mean over ``ks`` of the distilled top-K masks under ``policy`` ("refine"
    and "sufficient" need the instances and the black box; "sufficient" reads the settings'
    protocol and necessity weight)."""
    grid = dist.topk_grid(
        ks,
        policy,
        instances=instances,
        black_box=black_box,
        protocol=settings.teacher.protocol.value,
        necessity_weight=settings.teacher.necessity_weight,
    )
    return [torch.stack(per_k).float().mean(0) for per_k in zip(*(grid[k] for k in ks))]


def explainer_targets(
    dist,
    settings: GemSettings,
    k_grid: Sequence[int],
    instances: Optional[Sequence[Instance]] = None,
    black_box=None,
) -> list[Tensor]:
    """Per-pair training targets in [0, 1] for Gem (:func:`base_targets`), with
    ``settings.teacher.necessity_lead`` pairs of each ranked first by greedy necessity within its top-K
    set at the smallest K of ``k_grid`` (:mod:`gem_core.gem.necessity_order`)."""
    targets = base_targets(dist, settings, k_grid, instances, black_box)
    if not settings.teacher.necessity_lead:
        return targets
    if instances is None or black_box is None:
        raise ValueError("necessity_lead needs the instances and the black box (forward passes)")
    if dist.labels.is_floating_point():
        raise ValueError(
            "teacher.necessity_lead ranks pairs by how soon their deletion flips the predicted "
            "class: it applies to classifiers; set it to 0 for a regression model"
        )
    from gem_core.gem.necessity_order import candidate_sets, lead_with, necessity_order
    from gem_core.models.predict import predict_proba

    predicted = predict_proba(black_box, list(instances)).argmax(-1)
    leads = necessity_order(
        instances,
        candidate_sets(targets, min(k_grid)),
        predicted,
        black_box,
        settings.teacher.necessity_lead,
        drop_isolated=settings.teacher.protocol.value == "drop_isolated",
    )
    return lead_with(targets, leads)


def base_targets(
    dist,
    settings: GemSettings,
    k_grid: Sequence[int],
    instances: Optional[Sequence[Instance]] = None,
    black_box=None,
) -> list[Tensor]:
    """Per-pair training targets in [0, 1] for Gem, distilled from a :class:`Distillation`.

    The kind is ``settings.teacher.kind``:

    * ``weights``: the normalised greedy weights (the paper's distilled adjacency);
    * ``graded``: the mean over the budgets ``settings.budgets(k_grid)`` (the K grid unless
      ``teacher.ks`` is set) of the distilled top-K masks (``teacher.topk_policy``), so a pair
      in every top-K set gets 1 and Gem learns the ranking the evaluation uses;
    * ``mix``: the average of ``graded`` and ``weights``;
    * ``blend``: the average of ``graded`` and the same under the ``sufficient`` rule (its
      ``protocol`` and ``necessity_weight``);
    * ``graded+add``: ``graded`` mapped into [0.5, 1] for the pairs of any distilled top-K set;
      the other pairs get (0, 0.45], ranked by their addition effect, least disturbing highest
      (needs ``instances`` and ``black_box``);
    * ``signed`` (a regressor's): each pair's rank in (0, 1] by its signed effect on the value,
      ``f(G) − f(G \\ {e})``: the pair that raises the value most gets 1, the one that lowers
      it most the least (the reading of an attribution: what pushes the value up).
    """
    kind = settings.teacher.kind.value
    if kind == "weights":
        return dist.normalized_weights()
    if kind == "signed":
        if dist.effect is None:
            raise ValueError(
                "teacher.kind 'signed' ranks pairs by their effect on a regressor's value: it "
                "applies to regression models (a classifier's effects are its loss's)"
            )
        return [_rank01(-e).float() for e in torch.split(dist.effect, dist.num_pairs.tolist())]
    ks = settings.budgets(tuple(k_grid))
    graded = _graded(dist, settings, ks, settings.teacher.topk_policy.value, instances, black_box)
    if kind == "graded":
        return graded
    if kind == "mix":
        return [0.5 * g + 0.5 * w for g, w in zip(graded, dist.normalized_weights())]
    if kind == "blend":
        grown = _graded(dist, settings, ks, "sufficient", instances, black_box)
        return [0.5 * g + 0.5 * s for g, s in zip(graded, grown)]
    if instances is None or black_box is None:
        raise ValueError("the 'graded+add' target needs the instances and the black box")
    kept = [g > 0 for g in graded]
    effects = addition_effects(instances, kept, dist.labels, black_box)
    out = []
    for g, k, e in zip(graded, kept, effects):
        t = torch.zeros_like(g)
        t[k] = 0.5 + 0.5 * g[k]
        rest = ~k
        if bool(rest.any()):
            t[rest] = 0.45 * _rank01(e[rest])
        out.append(t)
    return out
