"""Random scores: the floor every explainer must beat."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from gem_core.data.instances import Instance
from gem_core.explainers.base import Explainer, instance_seed
from gem_core.runtime.progress import ProgressFn, report


class RandomExplainer(Explainer):
    """Uniform random scores in [0, 1).

    Deterministic: the same seed and instance give the same scores, whatever the list order.

    Args:
        seed: the scores' seed (mixed with each instance's identity).
        task: ``"node"`` / ``"graph"`` to refuse instances of the other level (None: any).
    """

    name = "random"

    def __init__(self, seed: int = 0, task: Optional[str] = None):
        self.seed = int(seed)
        self.task = task
        self.fit_seconds_ = 0.0
        self.explain_seconds_ = 0.0

    def _explain(self, instances: list[Instance], progress: Optional[ProgressFn]) -> list[Tensor]:
        out = []
        for inst in instances:
            gen = torch.Generator().manual_seed(instance_seed(self.seed, inst))
            out.append(torch.rand(inst.num_pairs, generator=gen))
        report(progress, 1.0, "done")
        return out


class CheckedRandomExplainer(RandomExplainer):
    """Random + check: uniform random scores put through the same explain-time search as Gem +
    check (the settings' check of the target, :func:`gem_core.gem.explain.apply_check`).

    The control of every table that reports the search: what the search reaches from a ranking
    that knows nothing. Where Gem + check is not above it, the generator does not help the search.

    Args:
        context: the target (its outputs only), the dataset's K grid and Gem's settings, whose
            check (rule, width, lead, …) is the one applied.
        seed: the random scores' seed.
    """

    name = "random_check"

    def __init__(self, context, seed: int = 0):
        super().__init__(seed=seed, task=context.spec.task)
        self.context = context

    @property
    def reads_prediction(self) -> bool:
        return True

    def _explain(self, instances: list[Instance], progress: Optional[ProgressFn]) -> list[Tensor]:
        return self._explain_predicted(instances, progress, None)

    def _explain_predicted(
        self, instances: list[Instance], progress: Optional[ProgressFn], predicted: Optional[Tensor]
    ) -> list[Tensor]:
        from gem_core.data.packed import PackedGraphs
        from gem_core.gem.explain import apply_check
        from gem_core.gem.presets import dataset_settings

        scores = super()._explain(instances, None)
        if not instances:
            return scores
        ctx = self.context
        settings = ctx.gem_settings or dataset_settings(ctx.spec)
        packed = PackedGraphs.from_instances(instances)
        checked = apply_check(
            settings, ctx.spec.k_grid, ctx.black_box, packed, torch.cat(scores), predicted
        )
        report(progress, 1.0, "done")
        return list(packed.split_pairs(checked))
