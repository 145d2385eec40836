"""Integrated Gradients (Sundararajan et al., 2017) on the edge mask, through PyG's CaptumExplainer.

A gradient attribution common in the GNN-explanation literature: every edge carries a mask value,
and the attribution of an edge is the path integral of the gradient of the explained class's
logit along the straight line from the empty mask (all edges off) to the full one (Captum's
``IntegratedGradients``, ``n_steps`` Riemann steps). Positive = the edge supports the model's
prediction. White box (gradients of the target's ``nn.Module``), nothing to fit; run once per
instance on its computation graph, like GNNExplainer.

Attributions are additive, so a pair's score is the mean of its two directed edges' attributions
(the same ranking as their sum).
"""
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
from gem_core.explainers.base import Explainer


class IntegratedGradientsExplainer(Explainer):
    """PyG ``CaptumExplainer("IntegratedGradients")`` on the edge mask, per instance.

    Args:
        model: the target's ``nn.Module`` (deep-copied, frozen).
        task: ``"node"`` or ``"graph"``.
        n_steps: Riemann steps of the path integral (Captum's default 50).
        reduce: pair score from the two directed attributions (``"mean"`` or ``"max"``).
    """

    name = "integrated_gradients"

    def __init__(self, model: nn.Module, task: str, n_steps: int = 50, reduce: Reduce = "mean",
                 device: str = "cpu"):
        self.task = check_task(task)
        self.device = resolve_device(device)
        self.model = frozen_copy(model, self.device)
        self.n_steps, self.reduce = int(n_steps), reduce
        self.fit_seconds_ = 0.0
        self.explain_seconds_ = 0.0
        self._takes_num_graphs = takes_num_graphs(self.model)
        self._takes_edge_attr = takes_edge_attr(self.model)

    def _explainer(self):
        from torch_geometric.explain import Explainer as PyGExplainer
        from torch_geometric.explain.algorithm import CaptumExplainer

        return PyGExplainer(model=self.model,
                            algorithm=CaptumExplainer("IntegratedGradients", n_steps=self.n_steps),
                            explanation_type="model", model_config=model_config(self.task),
                            edge_mask_type="object", node_mask_type=None)

    def explain_one(self, inst: Instance, explainer=None) -> Tensor:
        """Attributions of one instance's pairs."""
        if inst.num_pairs == 0:
            return torch.zeros(0)
        expl = run_on_instance(explainer or self._explainer(), inst, self.task, self.device,
                               self._takes_num_graphs, self._takes_edge_attr)
        return directed_to_pairs(expl.edge_mask, inst.num_pairs, self.reduce)

    def _explain(self, instances: list[Instance], progress: Optional[ProgressFn]) -> list[Tensor]:
        explainer = self._explainer()
        out = []
        for i, inst in enumerate(instances):
            out.append(self.explain_one(inst, explainer))
            report(progress, (i + 1) / max(len(instances), 1), f"instance {i + 1}/{len(instances)}")
        return out
