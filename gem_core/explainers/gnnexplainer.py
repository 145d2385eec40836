"""GNNExplainer (Ying et al., 2019): PyG's objective, all instances of a call optimised at once.

PyG's ``GNNExplainer`` (``explanation_type='model'``, ``edge_mask_type='object'``, no node mask)
explains one instance per call: an edge-mask logit per directed edge, drawn
``randn(E) * gain('relu') * sqrt(2 / (2 N))``, ``epochs`` Adam steps (``lr``) on

    cross_entropy(prediction, model's class)                          (every epoch)
    + edge_size * reduce(sigmoid(mask)[hard]) + edge_ent * mean(entropy(sigmoid(mask)[hard]))

where ``hard`` (the edges whose mask got a non-zero gradient in the first epoch, i.e. the edges
the prediction depends on) exists from the second epoch on; the answer is ``sigmoid(mask)`` with
the non-``hard`` edges set to 0.

:class:`GNNExplainerBaseline` packs the instances into one disjoint graph
(:mod:`gem_core.explainers._packed`) and optimises the concatenated mask with ONE Adam: the loss
is the *sum over instances* of each instance's loss above, with its own ``reduce`` and its own
entropy mean, so each mask entry gets the gradient it gets alone, and Adam, element-wise, makes
the same step. Each instance's initial mask is drawn from its own generator seeded with
:func:`instance_seed`, with PyG's shape and scale, and does not depend on the other instances of
the call. :meth:`GNNExplainerBaseline.explain_reference` runs PyG's own explainer per instance.

On the CPU a pack equals PyG's per-instance masks to the last bit: the regulariser's terms are
added in PyG's order (so autograd sums each entry's gradient terms in the same order), and the
kernels that round by tensor shape (the vectorised sigmoid's scalar tail, linear layers on 1-3
rows, e.g. a graph classifier's one-row head) run as each instance alone runs them
(:mod:`gem_core.explainers._alone`). Mutagenicity (both targets), NCI1 and Tree-cycles: every
test instance bit for bit (``python -m gem_core bench baselines``). Where a model has a layer
whose product rounds a row by its position (BA-shapes' first layer; :attr:`exact_packs` is then
False), or on CUDA, a pack agrees with PyG up to float32 rounding, which 100 Adam steps can
amplify: PyG's own masks, with the initial mask scaled by ``1 + 1e-6``, keep the same top-25
pairs on 53-61% of Mutagenicity's molecules.
"""

from __future__ import annotations

from math import sqrt
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gem_core.data.instances import Instance
from gem_core.explainers._alone import PackAsAlone, packs_exactly
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
from gem_core.explainers.base import Explainer, instance_seed
from gem_core.runtime.device import resolve_device
from gem_core.runtime.progress import ProgressFn, report

#: nodes of one packed optimisation (larger calls are cut into packs of at most this many)
MAX_PACK_NODES = 60_000


class GNNExplainerBaseline(Explainer):
    """PyG's ``GNNExplainer`` objective on each instance's computation graph, batched.

    Node task: the explained node is ``instance.target``; graph task: the instance is one graph.
    Results are reproducible and independent of the list order (per-instance seeds).

    Args:
        model: the target's ``nn.Module`` (deep-copied, frozen).
        task: ``"node"`` or ``"graph"``.
        epochs, lr: GNNExplainer optimisation (PyG defaults 100 / 0.01).
        coeffs: overrides of PyG's ``GNNExplainer.default_coeffs`` (instance-level).
        reduce: pair score from the two directed mask values (``"max"`` or ``"mean"``).
        max_pack_nodes: memory bound of one packed optimisation (the masks do not depend on it;
            with 1, each instance is optimised alone, PyG's arithmetic on any device).
        init_scale: factor on PyG's initial mask (1.0, PyG's). ``bench baselines`` sets 1 + 1e-6
            to measure how far a rounding-sized change moves PyG's own optimisation.
    """

    name = "gnnexplainer"
    task: str  # one task level, set by __init__

    def __init__(
        self,
        model: nn.Module,
        task: str,
        epochs: int = 100,
        lr: float = 0.01,
        seed: int = 0,
        reduce: Reduce = "max",
        coeffs: Optional[dict] = None,
        device: str = "cpu",
        max_pack_nodes: int = MAX_PACK_NODES,
        init_scale: float = 1.0,
    ):
        self.task = check_task(task)
        self.device = resolve_device(device)
        self.model = frozen_copy(model, self.device)
        self.epochs, self.lr, self.seed, self.reduce = int(epochs), float(lr), int(seed), reduce
        self.coeffs = dict(coeffs or {})
        self.max_pack_nodes = int(max_pack_nodes)
        self.init_scale = float(init_scale)
        self.fit_seconds_ = 0.0
        self.explain_seconds_ = 0.0
        self._takes_num_graphs = takes_num_graphs(self.model)
        self._takes_edge_attr = takes_edge_attr(self.model)

    @property
    def exact_packs(self) -> bool:
        """Whether a pack's masks equal PyG's per-instance masks to the last bit here (see
        :func:`gem_core.explainers._alone.packs_exactly`); else they agree up to rounding."""
        return packs_exactly(self.model, self.device)

    # -- the batched optimisation
    def _all_coeffs(self) -> dict:
        from torch_geometric.explain import GNNExplainer

        return {**GNNExplainer.default_coeffs, **self.coeffs}

    def initial_mask(self, inst: Instance) -> Tensor:
        """PyG's initial edge-mask logits of ``inst`` under its :func:`instance_seed`:
        ``randn(2P) * gain('relu') * sqrt(2 / (2 N))`` from a generator of its own."""
        gen = torch.Generator(device=self.device).manual_seed(instance_seed(self.seed, inst))
        std = torch.nn.init.calculate_gain("relu") * sqrt(2.0 / (2 * inst.num_nodes))
        mask = torch.randn(2 * inst.num_pairs, generator=gen, device=self.device) * std
        return mask if self.init_scale == 1.0 else mask * self.init_scale

    def _optimise(self, packed: PackedInstances, init: Tensor) -> Tensor:
        """The final directed masks of a pack (``sigmoid``, 0 off the hard mask), ``[E]``."""
        coeffs = self._all_coeffs()
        size_reduce = coeffs["edge_reduction"]
        if size_reduce not in ("sum", "mean"):
            raise ValueError(f"edge_reduction must be 'sum' or 'mean', not {size_reduce!r}")
        eps = coeffs["EPS"]
        release_masks(self.model)  # a mask PyG's own explainer left would apply to the target
        edge_lengths = packed.edge_ptr[1:] - packed.edge_ptr[:-1]
        levels = (
            [packed.num_nodes]
            + ([torch.ones_like(packed.num_nodes)] if self.task == "graph" else [])
            + [edge_lengths]
        )
        with PackAsAlone(self.model, levels, edge_lengths, self.device) as alone:
            with torch.no_grad():
                target = packed.forward(self.model, self.task, self._takes_num_graphs).argmax(-1)
            mask = nn.Parameter(init.clone())
            optimizer = torch.optim.Adam([mask], lr=self.lr)
            hard: Optional[Tensor] = None
            size_w = ent_w = hard_tail = None
            alone.mask_layers(mask, packed.edge_index)
            for epoch in range(self.epochs):
                optimizer.zero_grad()
                y_hat = packed.forward(self.model, self.task, self._takes_num_graphs)
                loss = F.cross_entropy(y_hat, target, reduction="sum")
                if hard is not None:
                    assert size_w is not None and ent_w is not None  # set with ``hard``
                    # PyG's order (size term, then entropy): autograd then sums each mask
                    # entry's gradient terms in the same order, to the last bit
                    m = alone.sigmoid(mask[hard], hard_tail)
                    loss = loss + (size_w * m).sum()
                    ent = -m * torch.log(m + eps) - (1 - m) * torch.log(1 - m + eps)
                    loss = loss + (ent_w * ent).sum()
                loss.backward()
                optimizer.step()
                if epoch == 0:
                    assert mask.grad is not None  # the target's message passing reads the mask
                    hard = mask.grad != 0.0
                    owner = packed.edge_owner[hard]
                    # each instance's mean over its own hard edges (PyG's per-instance reduce)
                    hard_lengths = torch.bincount(owner, minlength=packed.num_instances)
                    hard_tail = alone.tail(hard_lengths)
                    count = hard_lengths.clamp(min=1)
                    ent_w = coeffs["edge_ent"] / count[owner].to(mask.dtype)
                    size_w = (
                        torch.full_like(ent_w, coeffs["edge_size"])
                        if size_reduce == "sum"
                        else coeffs["edge_size"] / count[owner].to(mask.dtype)
                    )
            out = alone.sigmoid(mask.detach())
        if hard is not None:
            out[~hard] = 0.0
        return out

    def _explain(self, instances: list[Instance], progress: Optional[ProgressFn]) -> list[Tensor]:
        out: list[Tensor] = [torch.zeros(0) for _ in instances]
        todo = [i for i, inst in enumerate(instances) if inst.num_pairs > 0]
        groups = chunks([instances[i] for i in todo], self.max_pack_nodes)
        done = 0
        for group in groups:
            members = [instances[todo[j]] for j in group]
            packed = pack(members, self._takes_edge_attr, self.device)
            init = torch.cat([self.initial_mask(inst) for inst in members])
            masks = packed.split(self._optimise(packed, init))
            for j, inst, m in zip(group, members, masks):
                out[todo[j]] = directed_to_pairs(m, inst.num_pairs, self.reduce)
            done += len(group)
            report(progress, done / max(len(todo), 1), f"instance {done}/{len(todo)}")
        return out

    # -- PyG's own explainer, one instance per call (the reference)
    def _explainer(self):
        from torch_geometric.explain import Explainer as PyGExplainer
        from torch_geometric.explain import GNNExplainer

        return PyGExplainer(
            model=self.model,
            algorithm=GNNExplainer(epochs=self.epochs, lr=self.lr, **self.coeffs),
            explanation_type="model",
            model_config=model_config(self.task),
            edge_mask_type="object",
            node_mask_type=None,
        )

    def explain_one(self, inst: Instance) -> Tensor:
        """Scores of one instance by PyG's ``GNNExplainer`` itself, seeded with
        :func:`instance_seed` inside a forked RNG (the reference of the batched path)."""
        if inst.num_pairs == 0:
            return torch.zeros(0)
        explainer = self._explainer()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(instance_seed(self.seed, inst))
            expl = run_on_instance(
                explainer,
                inst,
                self.task,
                self.device,
                self._takes_num_graphs,
                self._takes_edge_attr,
            )
        return directed_to_pairs(expl.edge_mask, inst.num_pairs, self.reduce)

    def explain_reference(self, instances: list[Instance]) -> list[Tensor]:
        """:meth:`explain_one` of every instance (PyG, one optimisation per instance)."""
        return [self.explain_one(inst) for inst in instances]
