"""Random scores: the floor every explainer must beat."""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from gem_core.data.instances import Instance
from gem_core.runtime.progress import ProgressFn, report
from gem_core.explainers.base import Explainer, instance_seed


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
