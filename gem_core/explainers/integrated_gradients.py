"""Integrated Gradients (Sundararajan et al., 2017) on the edge mask, PyG's CaptumExplainer batched.

A gradient attribution common in the GNN-explanation literature: every edge carries a mask value,
and the attribution of an edge is the path integral of the gradient of the explained class's
logit along the straight line from the empty mask (all edges off) to the full one. Positive = the
edge supports the model's prediction. White box (gradients of the target's ``nn.Module``),
nothing to fit.

PyG's ``CaptumExplainer("IntegratedGradients")`` (``edge_mask_type='object'``, raw logits, the
model's own class) computes, per instance, with Captum's defaults (baseline 0, input 1,
``method='gausslegendre'``, ``n_steps``; PyG forces ``internal_batch_size=1``: one
forward/backward per step)::

    attribution = sum_s  step_s * d logit_class / d mask  at  mask = alpha_s   (in step order)

with the messages of every edge multiplied by its mask value (no sigmoid). Here all instances of
a call are packed into one disjoint graph (:mod:`gem_core.explainers._packed`) and the pack is
replicated once per step of a group of steps, each copy's mask set to its ``alpha_s``: one
forward/backward gives the gradients of every instance at every step of the group (the copies
and instances are disjoint, so each gradient is the one the instance gets alone). The weighted
sum then runs over the steps in Captum's order. :meth:`IntegratedGradientsExplainer.
explain_reference` runs PyG's explainer per instance (``tests/test_batched_baselines.py``
checks both agree).

Attributions are additive, so a pair's score is the mean of its two directed edges' attributions
(the same ranking as their sum).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn

from gem_core.data.instances import Instance
from gem_core.explainers._packed import PackedInstances, chunks, pack, release_masks
from gem_core.explainers._pyg import (
    Reduce,
    check_task,
    directed_to_pairs,
    frozen_copy,
    model_config,
    run_on_instance,
    takes_edge_attr,
    takes_num_graphs,
)
from gem_core.explainers.base import Explainer
from gem_core.runtime.device import resolve_device
from gem_core.runtime.progress import ProgressFn, report

#: node rows of one forward pass (instances x steps); bounds the memory, not the result
MAX_PASS_NODES = 50_000


class IntegratedGradientsExplainer(Explainer):
    """PyG's ``CaptumExplainer("IntegratedGradients")`` on the edge mask, batched.

    Args:
        model: the target's ``nn.Module`` (deep-copied, frozen).
        task: ``"node"`` or ``"graph"``.
        n_steps: steps of the path integral (Captum's default 50).
        method: Captum's integral approximation (its default ``"gausslegendre"``).
        reduce: pair score from the two directed attributions (``"mean"`` or ``"max"``).
        max_pass_nodes: node rows of one forward pass (memory bound; same results).
    """

    name = "integrated_gradients"
    task: str  # one task level, set by __init__

    def __init__(
        self,
        model: nn.Module,
        task: str,
        n_steps: int = 50,
        reduce: Reduce = "mean",
        device: str = "cpu",
        method: str = "gausslegendre",
        max_pass_nodes: int = MAX_PASS_NODES,
    ):
        self.task = check_task(task)
        self.device = resolve_device(device)
        self.model = frozen_copy(model, self.device)
        self.n_steps, self.reduce, self.method = int(n_steps), reduce, str(method)
        self.max_pass_nodes = int(max_pass_nodes)
        self.fit_seconds_ = 0.0
        self.explain_seconds_ = 0.0
        self._takes_num_graphs = takes_num_graphs(self.model)
        self._takes_edge_attr = takes_edge_attr(self.model)

    # -- the batched path integral
    def _steps(self) -> tuple[list[float], Tensor]:
        """Captum's ``alphas`` and float32 step weights for ``n_steps`` and ``method``."""
        from captum.attr._utils.approximation_methods import approximation_parameters

        step_sizes, alphas = approximation_parameters(self.method)
        return list(alphas(self.n_steps)), torch.tensor(step_sizes(self.n_steps)).float()

    def _integrate(self, packed: PackedInstances) -> Tensor:
        """Attributions of every directed edge of a pack, ``[E]``."""
        from torch_geometric.explain.algorithm.utils import set_masks

        alphas, weights = self._steps()
        weights = weights.to(self.device)
        with torch.no_grad():
            target = packed.forward(self.model, self.task, self._takes_num_graphs).argmax(-1)
        n_edges = packed.edge_index.size(1)
        per_pass = max(1, min(self.n_steps, self.max_pass_nodes // max(packed.x.size(0), 1)))
        total: Optional[Tensor] = None
        for start in range(0, self.n_steps, per_pass):
            group = alphas[start : start + per_pass]
            copies = packed.replicate(len(group))
            mask = torch.cat([torch.full((n_edges,), a, device=self.device) for a in group])
            mask.requires_grad_(True)
            release_masks(self.model)  # no Parameter slot left to wrap the mask in
            set_masks(self.model, mask, copies.edge_index, apply_sigmoid=False)
            try:
                out = copies.forward(self.model, self.task, self._takes_num_graphs)
                picked = out.gather(1, target.repeat(len(group)).unsqueeze(1)).sum()
                (grad,) = torch.autograd.grad(picked, mask)
            finally:
                release_masks(self.model)
            scaled = grad.view(len(group), n_edges) * weights[start : start + len(group)].view(
                -1, 1
            )
            for row in scaled:  # Captum adds the steps one by one, in order
                total = row if total is None else total + row
        assert total is not None
        return total

    def _explain(self, instances: list[Instance], progress: Optional[ProgressFn]) -> list[Tensor]:
        out: list[Tensor] = [torch.zeros(0) for _ in instances]
        todo = [i for i, inst in enumerate(instances) if inst.num_pairs > 0]
        max_nodes = max(1, self.max_pass_nodes // max(self.n_steps, 1))
        groups = chunks([instances[i] for i in todo], max_nodes)
        done = 0
        for group in groups:
            members = [instances[todo[j]] for j in group]
            packed = pack(members, self._takes_edge_attr, self.device)
            for j, inst, a in zip(group, members, packed.split(self._integrate(packed))):
                out[todo[j]] = directed_to_pairs(a, inst.num_pairs, self.reduce)
            done += len(group)
            report(progress, done / max(len(todo), 1), f"instance {done}/{len(todo)}")
        return out

    # -- PyG's own explainer, one instance per call (the reference)
    def _explainer(self):
        from torch_geometric.explain import Explainer as PyGExplainer
        from torch_geometric.explain.algorithm import CaptumExplainer

        return PyGExplainer(
            model=self.model,
            algorithm=CaptumExplainer(
                "IntegratedGradients", n_steps=self.n_steps, method=self.method
            ),
            explanation_type="model",
            model_config=model_config(self.task),
            edge_mask_type="object",
            node_mask_type=None,
        )

    def explain_one(self, inst: Instance, explainer=None) -> Tensor:
        """Attributions of one instance's pairs by PyG's CaptumExplainer itself (the reference)."""
        if inst.num_pairs == 0:
            return torch.zeros(0)
        expl = run_on_instance(
            explainer or self._explainer(),
            inst,
            self.task,
            self.device,
            self._takes_num_graphs,
            self._takes_edge_attr,
        )
        return directed_to_pairs(expl.edge_mask, inst.num_pairs, self.reduce)

    def explain_reference(self, instances: list[Instance]) -> list[Tensor]:
        """:meth:`explain_one` of every instance (PyG + Captum, one call per instance)."""
        explainer = self._explainer()
        return [self.explain_one(inst, explainer) for inst in instances]
