"""GNNExplainer (Ying et al., 2019) through PyG, run once per instance on its computation graph."""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn

from gem_core.runtime.device import resolve_device
from gem_core.data.instances import Instance
from gem_core.runtime.progress import ProgressFn, report
from gem_core.explainers._pyg import (Reduce, check_task, directed_to_pairs, frozen_copy,
                                      model_config, run_on_instance, takes_edge_attr,
                                      takes_num_graphs)
from gem_core.explainers.base import Explainer, instance_seed


class GNNExplainerBaseline(Explainer):
    """PyG ``GNNExplainer`` on each instance's computation graph (nothing to fit).

    ``explanation_type='model'`` (explains the model's own prediction), ``edge_mask_type=
    'object'``, no node-feature mask. Node task: ``index=instance.target``; graph task:
    ``batch`` of zeros. Each instance is seeded with :func:`instance_seed` inside a forked RNG,
    so results are reproducible and independent of the list order.

    Args:
        model: the target's ``nn.Module`` (deep-copied, frozen).
        task: ``"node"`` or ``"graph"``.
        epochs, lr: GNNExplainer optimisation (PyG defaults 100 / 0.01).
        coeffs: overrides of GNNExplainer's regularisation coefficients (instance-level in PyG).
        reduce: pair score from the two directed mask values (``"max"`` or ``"mean"``).
    """

    name = "gnnexplainer"

    def __init__(self, model: nn.Module, task: str, epochs: int = 100, lr: float = 0.01,
                 seed: int = 0, reduce: Reduce = "max", coeffs: Optional[dict] = None,
                 device: str = "cpu"):
        self.task = check_task(task)
        self.device = resolve_device(device)
        self.model = frozen_copy(model, self.device)
        self.epochs, self.lr, self.seed, self.reduce = int(epochs), float(lr), int(seed), reduce
        self.coeffs = dict(coeffs or {})
        self.fit_seconds_ = 0.0
        self.explain_seconds_ = 0.0
        self._takes_num_graphs = takes_num_graphs(self.model)
        self._takes_edge_attr = takes_edge_attr(self.model)

    def _explainer(self):
        from torch_geometric.explain import Explainer as PyGExplainer, GNNExplainer

        return PyGExplainer(
            model=self.model,
            algorithm=GNNExplainer(epochs=self.epochs, lr=self.lr, **self.coeffs),
            explanation_type="model",
            model_config=model_config(self.task),
            edge_mask_type="object",
            node_mask_type=None,
        )

    def explain_one(self, inst: Instance) -> Tensor:
        """Scores of one instance (one GNNExplainer optimisation)."""
        if inst.num_pairs == 0:
            return torch.zeros(0)
        explainer = self._explainer()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(instance_seed(self.seed, inst))
            expl = run_on_instance(explainer, inst, self.task, self.device,
                                   self._takes_num_graphs, self._takes_edge_attr)
        return directed_to_pairs(expl.edge_mask, inst.num_pairs, self.reduce)

    def _explain(self, instances: list[Instance], progress: Optional[ProgressFn]) -> list[Tensor]:
        out = []
        for i, inst in enumerate(instances):
            out.append(self.explain_one(inst))
            report(progress, (i + 1) / max(len(instances), 1), f"instance {i + 1}/{len(instances)}")
        return out
