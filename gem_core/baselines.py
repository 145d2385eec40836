"""Baseline explainers behind one interface: random scores, GNNExplainer and PGExplainer (PyG).

The common interface (:class:`EdgeExplainer`) is the one Gem's explainer follows too:

* ``fit(train_instances, progress=None) -> self`` for methods that learn (PGExplainer, Gem);
  a no-op returning ``self`` otherwise. Sets ``fit_seconds_`` (wall clock of the last fit).
* ``explain(instances) -> list[Tensor]``: one float tensor of length ``P_i`` per instance
  (one score per undirected pair, in the order of ``instance.pairs``), higher = more important,
  on the CPU. Sets ``explain_seconds_`` (wall clock of the last call). Implementations may take
  an optional ``progress=`` keyword.

Scores are turned into explanations and measured by :mod:`gem_core.evaluate`.

PyG's explainers give one mask value per *directed* edge of ``instance.edge_index()``, which is
``[pairs, pairs.flip(0)]``: directed edges ``e`` and ``e + P`` are the two directions of pair
``e``. A pair's score is the **max** of its two directions by default (``reduce="max"``: a pair
matters when either direction carries an important message, and deleting a pair deletes both
directions); ``reduce="mean"`` is available.

The two PyG baselines are white-box gradient methods: they need the target's ``nn.Module``
(a deep copy is kept, parameters frozen, so the black box the evaluation uses is untouched).
Node models are called as ``model(x, edge_index)``, graph models as
``model(x, edge_index, batch=..., num_graphs=...)`` (``num_graphs`` only when accepted).
"""
from __future__ import annotations

import copy
import hashlib
import inspect
import time
import warnings
from collections.abc import Sequence
from typing import Literal, Optional, Protocol, runtime_checkable

import torch
from torch import Tensor, nn

from .device import resolve_device
from .instances import Instance, collate
from .progress import ProgressFn, report

Reduce = Literal["max", "mean"]


@runtime_checkable
class EdgeExplainer(Protocol):
    """What the evaluation needs of an explainer (Gem, baselines).

    ``explain(instances)`` returns one score tensor ``[P_i]`` per instance, one score per
    undirected pair of ``instance.pairs`` (same order), higher = more important.
    Learning methods also provide ``fit(train_instances) -> self``; every explainer exposes
    ``fit_seconds_`` (0 when nothing is learned) and ``explain_seconds_`` (last call).
    """

    name: str
    fit_seconds_: float
    explain_seconds_: float

    def explain(self, instances: Sequence[Instance]) -> list[Tensor]:
        ...


@runtime_checkable
class FittableExplainer(EdgeExplainer, Protocol):
    """An :class:`EdgeExplainer` that must be fitted on training instances first."""

    def fit(self, train_instances: Sequence[Instance]) -> "FittableExplainer":
        ...


# ----------------------------------------------------------------------------- helpers

def instance_seed(seed: int, instance: Instance) -> int:
    """A seed that depends only on ``seed`` and the instance (not on its position in a list)."""
    key = (f"{int(seed)}|{instance.dataset}|{instance.index}|{instance.target}|"
           f"{instance.num_nodes}|{instance.num_pairs}")
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little") >> 1


def directed_to_pairs(edge_mask: Tensor, num_pairs: int, reduce: Reduce = "max",
                      dtype: torch.dtype = torch.float32) -> Tensor:
    """Per-pair scores ``[P]`` from a mask ``[2P]`` over ``[pairs, pairs.flip(0)]``."""
    m = edge_mask.detach().reshape(-1).to("cpu", dtype)
    if m.numel() != 2 * num_pairs:
        raise ValueError(f"edge mask of {m.numel()} values for {num_pairs} pairs")
    a, b = m[:num_pairs], m[num_pairs:]
    if reduce == "max":
        return torch.maximum(a, b)
    if reduce == "mean":
        return (a + b) / 2
    raise ValueError(f"reduce must be 'max' or 'mean', not {reduce!r}")


def _check_task(task: str) -> str:
    if task not in ("node", "graph"):
        raise ValueError(f"task must be 'node' or 'graph', not {task!r}")
    return task


def _check_instances(instances: Sequence[Instance], task: str) -> list[Instance]:
    instances = list(instances)
    for inst in instances:
        if inst.task != task:
            raise ValueError(f"a {task}-level explainer got a {inst.task}-level instance")
    return instances


def _frozen_copy(model: nn.Module, device: torch.device) -> nn.Module:
    m = copy.deepcopy(model).to(device).eval()
    for p in m.parameters():
        p.requires_grad_(False)
    return m


def _model_config(task: str) -> dict:
    return dict(mode="multiclass_classification", task_level=task, return_type="raw")


class _Timed:
    name = "explainer"
    fit_seconds_: float = 0.0
    explain_seconds_: float = 0.0

    def ms_per_instance(self, n: int) -> float:
        """Milliseconds per instance of the last ``explain`` call over ``n`` instances."""
        return 1000.0 * self.explain_seconds_ / max(n, 1)


# ----------------------------------------------------------------------------- random

class RandomExplainer(_Timed):
    """Uniform random scores (the floor baseline).

    Deterministic: the same seed and instance give the same scores, whatever the list order.
    """

    name = "random"

    def __init__(self, seed: int = 0):
        self.seed = int(seed)
        self.fit_seconds_ = 0.0
        self.explain_seconds_ = 0.0

    def fit(self, train_instances: Sequence[Instance] = (), progress: Optional[ProgressFn] = None,
            ) -> "RandomExplainer":
        self.fit_seconds_ = 0.0
        return self

    def explain(self, instances: Sequence[Instance], progress: Optional[ProgressFn] = None,
                ) -> list[Tensor]:
        start = time.perf_counter()
        out = []
        for inst in instances:
            gen = torch.Generator().manual_seed(instance_seed(self.seed, inst))
            out.append(torch.rand(inst.num_pairs, generator=gen))
        self.explain_seconds_ = time.perf_counter() - start
        report(progress, 1.0, "done")
        return out


# ----------------------------------------------------------------------------- GNNExplainer

class GNNExplainerBaseline(_Timed):
    """PyG ``GNNExplainer`` run once per instance on the instance's computation graph.

    ``explanation_type='model'`` (explains the model's own prediction), ``edge_mask_type=
    'object'``, no node-feature mask. Node task: ``index=instance.target``; graph task:
    ``batch`` of zeros. Each instance is seeded with :func:`instance_seed` inside a forked RNG,
    so results are reproducible and independent of the list order. Nothing to fit.

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
        self.task = _check_task(task)
        self.device = resolve_device(device)
        self.model = _frozen_copy(model, self.device)
        self.epochs, self.lr, self.seed, self.reduce = int(epochs), float(lr), int(seed), reduce
        self.coeffs = dict(coeffs or {})
        self.fit_seconds_ = 0.0
        self.explain_seconds_ = 0.0
        self._takes_num_graphs = "num_graphs" in inspect.signature(self.model.forward).parameters

    def fit(self, train_instances: Sequence[Instance] = (), progress: Optional[ProgressFn] = None,
            ) -> "GNNExplainerBaseline":
        self.fit_seconds_ = 0.0
        return self

    def _explainer(self):
        from torch_geometric.explain import Explainer, GNNExplainer

        return Explainer(
            model=self.model,
            algorithm=GNNExplainer(epochs=self.epochs, lr=self.lr, **self.coeffs),
            explanation_type="model",
            model_config=_model_config(self.task),
            edge_mask_type="object",
            node_mask_type=None,
        )

    def explain_one(self, inst: Instance) -> Tensor:
        if inst.num_pairs == 0:
            return torch.zeros(0)
        explainer = self._explainer()
        x = inst.x.to(self.device)
        ei = inst.edge_index().to(self.device)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(instance_seed(self.seed, inst))
            if self.task == "node":
                expl = explainer(x, ei, index=int(inst.target))
            else:
                batch = torch.zeros(inst.num_nodes, dtype=torch.long, device=self.device)
                kwargs: dict = {"batch": batch}
                if self._takes_num_graphs:
                    kwargs["num_graphs"] = 1
                expl = explainer(x, ei, **kwargs)
        return directed_to_pairs(expl.edge_mask, inst.num_pairs, self.reduce)

    def explain(self, instances: Sequence[Instance], progress: Optional[ProgressFn] = None,
                ) -> list[Tensor]:
        instances = _check_instances(instances, self.task)
        start = time.perf_counter()
        out = []
        for i, inst in enumerate(instances):
            out.append(self.explain_one(inst))
            report(progress, (i + 1) / max(len(instances), 1), f"instance {i + 1}/{len(instances)}")
        self.explain_seconds_ = time.perf_counter() - start
        return out


# ----------------------------------------------------------------------------- PGExplainer

class PGExplainerBaseline(_Timed):
    """PyG ``PGExplainer`` trained on the train instances, explaining the model's prediction.

    ``explanation_type='phenomenon'`` with the target set to the class the model predicts on
    the full computation graph (so, like Gem, it explains the prediction, not the label).

    * Node task: PyG's per-node training step (``PGExplainer.train``) on each instance's
      computation graph (``index=instance.target``), instances shuffled each epoch.
    * Graph task: mini-batched training (``batch_size`` graphs per step, ``batch=`` passed to the
      model), shuffled each epoch.

    Inference is batched for both tasks: all instances are collated into one disjoint graph, the
    model's last message-passing embeddings are read once (``get_embeddings``) and the trained MLP
    scores every directed edge from ``[z_src, z_dst]`` (graph) or ``[z_src, z_dst, z_target]``
    (node; the target of the edge's own instance). Because the instances are disconnected this is
    exactly PyG's per-instance computation (checked against :meth:`explain_reference`, which calls
    PyG's ``Explainer`` once per instance). Node task: edges outside the target's L-hop
    neighbourhood get the lowest score, as PyG's hard mask zeroes them.

    Scores (``score="logit"``, default) are the MLP's edge *logits*: PyG's mask is their sigmoid,
    so the ranking is the same, but a trained PGExplainer often saturates (logits of -50 and
    below) and float32 sigmoids then underflow to exact ties at 0. ``score="prob"`` returns the
    sigmoid (PyG's mask values). Pair score: max of the two directions (or ``reduce="mean"``).

    PyG keeps ``PGExplainer.coeffs`` as a *class-level* dict that its constructor mutates; here
    the class dict is left alone and every coefficient is set explicitly on the instance.
    (``PGExplainer.train`` shadows ``nn.Module.train``: never call ``.eval()``/``.train()`` on it.)
    PyG's size regulariser sums over all edges of a step while the prediction loss is a mean, so
    larger graph batches (and larger computation graphs) regularise more strongly.
    """

    name = "pgexplainer"

    def __init__(self, model: nn.Module, task: str, epochs: int = 30, lr: float = 0.003,
                 edge_size: float = 0.05, edge_ent: float = 1.0,
                 temp: tuple[float, float] = (5.0, 2.0), bias: float = 0.01,
                 batch_size: int = 32, seed: int = 0, reduce: Reduce = "max",
                 max_fit_instances: Optional[int] = None,
                 score: Literal["logit", "prob"] = "logit",
                 infer_batch_size: Optional[int] = None, device: str = "cpu"):
        self.task = _check_task(task)
        self.device = resolve_device(device)
        self.model = _frozen_copy(model, self.device)
        self.epochs, self.lr = int(epochs), float(lr)
        if self.epochs < 1:
            raise ValueError("epochs must be >= 1")
        self.coeffs = {"edge_size": float(edge_size), "edge_ent": float(edge_ent),
                       "temp": [float(temp[0]), float(temp[1])], "bias": float(bias)}
        self.batch_size = int(batch_size)
        self.seed, self.reduce = int(seed), reduce
        if score not in ("logit", "prob"):
            raise ValueError(f"score must be 'logit' or 'prob', not {score!r}")
        self.score = score
        self.max_fit_instances = max_fit_instances
        self.infer_batch_size = infer_batch_size
        self.fit_seconds_ = 0.0
        self.explain_seconds_ = 0.0
        self.losses_: list[float] = []
        self.explainer_ = None
        self._takes_num_graphs = "num_graphs" in inspect.signature(self.model.forward).parameters

    # -- helpers

    def _graph_kwargs(self, batch: Tensor, num_graphs: int) -> dict:
        kwargs = {"batch": batch}
        if self._takes_num_graphs:
            kwargs["num_graphs"] = num_graphs
        return kwargs

    @torch.no_grad()
    def predict(self, instances: Sequence[Instance]) -> Tensor:
        """The model's predicted class on each full computation graph (CPU, ``[N]``)."""
        b = collate(list(instances), device=self.device)
        if self.task == "node":
            out = self.model(b.x, b.edge_index)[b.target_index]
        else:
            out = self.model(b.x, b.edge_index, **self._graph_kwargs(b.batch, b.num_instances))
        return out.argmax(-1).cpu()

    def _new_explainer(self):
        from torch_geometric.explain import Explainer, PGExplainer

        algo = PGExplainer(epochs=self.epochs, lr=self.lr)  # no kwargs: keep the class dict intact
        algo.coeffs = copy.deepcopy(self.coeffs)  # instance-level, every coefficient explicit
        return Explainer(model=self.model, algorithm=algo, explanation_type="phenomenon",
                         model_config=_model_config(self.task), edge_mask_type="object")

    # -- fit

    def fit(self, train_instances: Sequence[Instance], progress: Optional[ProgressFn] = None,
            ) -> "PGExplainerBaseline":
        insts = _check_instances(train_instances, self.task)
        insts = [i for i in insts if i.num_pairs > 0]
        if not insts:
            raise ValueError("PGExplainer needs training instances with at least one edge")
        start = time.perf_counter()
        self.losses_ = []
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            # PyG's PGExplainer.train returns float(loss) of a graph-attached tensor.
            warnings.filterwarnings("ignore", message="Converting a tensor with requires_grad")
            torch.manual_seed(self.seed)
            gen = torch.Generator().manual_seed(self.seed)
            if self.max_fit_instances is not None and len(insts) > self.max_fit_instances:
                keep = torch.randperm(len(insts), generator=gen)[: self.max_fit_instances]
                insts = [insts[int(i)] for i in keep.sort().values]
            targets = self.predict(insts)
            self.explainer_ = self._new_explainer()
            algo = self.explainer_.algorithm
            if self.task == "node":
                self._fit_nodes(algo, insts, targets, gen, progress)
            else:
                self._fit_graphs(algo, insts, targets, gen, progress)
        self.fit_seconds_ = time.perf_counter() - start
        return self

    def _fit_nodes(self, algo, insts, targets, gen, progress) -> None:
        data = []
        for inst, t in zip(insts, targets):
            y = torch.zeros(inst.num_nodes, dtype=torch.long)
            y[inst.target] = t
            data.append((inst.x.to(self.device), inst.edge_index().to(self.device),
                         y.to(self.device), int(inst.target)))
        for epoch in range(self.epochs):
            total = 0.0
            for j in torch.randperm(len(data), generator=gen).tolist():
                x, ei, y, idx = data[j]
                total += algo.train(epoch, self.model, x, ei, target=y, index=idx)
            self.losses_.append(total / len(data))
            report(progress, (epoch + 1) / self.epochs,
                   f"epoch {epoch + 1}/{self.epochs} loss {self.losses_[-1]:.4f}")

    def _fit_graphs(self, algo, insts, targets, gen, progress) -> None:
        for epoch in range(self.epochs):
            order = torch.randperm(len(insts), generator=gen).tolist()
            total, steps = 0.0, 0
            for s in range(0, len(order), self.batch_size):
                idx = order[s:s + self.batch_size]
                b = collate([insts[i] for i in idx], device=self.device)
                total += algo.train(epoch, self.model, b.x, b.edge_index,
                                    target=targets[idx].to(self.device),
                                    **self._graph_kwargs(b.batch, b.num_instances))
                steps += 1
            self.losses_.append(total / max(steps, 1))
            report(progress, (epoch + 1) / self.epochs,
                   f"epoch {epoch + 1}/{self.epochs} loss {self.losses_[-1]:.4f}")

    # -- explain

    def _require_fit(self) -> None:
        if self.explainer_ is None:
            raise RuntimeError("PGExplainerBaseline must be fitted before explaining")

    def explain(self, instances: Sequence[Instance], progress: Optional[ProgressFn] = None,
                ) -> list[Tensor]:
        self._require_fit()
        instances = _check_instances(instances, self.task)
        start = time.perf_counter()
        out: list[Tensor] = []
        step = self.infer_batch_size or max(len(instances), 1)
        for s in range(0, len(instances), step):
            chunk = instances[s:s + step]
            out.extend(self._explain_batch(chunk))
            report(progress, min(1.0, (s + len(chunk)) / len(instances)), "batch")
        self.explain_seconds_ = time.perf_counter() - start
        return out

    @torch.no_grad()
    def _explain_batch(self, insts: list[Instance]) -> list[Tensor]:
        from torch_geometric.utils import get_embeddings, k_hop_subgraph

        if not insts:
            return []
        counts = [inst.num_pairs for inst in insts]
        total = sum(counts)
        if total == 0:
            return [torch.zeros(0) for _ in insts]
        algo = self.explainer_.algorithm
        b = collate(insts, device=self.device)
        src, dst = b.edge_index
        if self.task == "graph":
            emb = get_embeddings(self.model, b.x, b.edge_index,
                                 **self._graph_kwargs(b.batch, b.num_instances))[-1]
            inputs = torch.cat([emb[src], emb[dst]], dim=-1)
        else:
            emb = get_embeddings(self.model, b.x, b.edge_index)[-1]
            owner_target = b.target_index[b.batch[src]]  # target node of each edge's instance
            inputs = torch.cat([emb[src], emb[dst], emb[owner_target]], dim=-1)
        logits = algo.mlp(inputs).view(-1).double()
        if self.task == "node":  # PyG's hard mask: only edges within L hops of the target
            _, _, _, hard = k_hop_subgraph(b.target_index, algo._num_hops(self.model),
                                           b.edge_index, num_nodes=b.x.size(0),
                                           flow=algo._flow(self.model))
            logits = logits.masked_fill(~hard, float("-inf"))
        mask = logits.sigmoid() if self.score == "prob" else logits
        scores = directed_to_pairs(mask, total, self.reduce, dtype=torch.float64)
        if self.score == "logit":  # finite floor for edges PyG's hard mask removes
            finite = scores[torch.isfinite(scores)]
            floor = (float(finite.min()) if finite.numel() else 0.0) - 1.0
            scores = torch.nan_to_num(scores, neginf=floor)
        return [c.float() if self.score == "prob" else c for c in scores.split(counts)]

    def explain_reference(self, instances: Sequence[Instance]) -> list[Tensor]:
        """PyG's own path, one ``Explainer`` call per instance: per-pair sigmoid mask values.

        Slow; for checking :meth:`explain` (``sigmoid`` of its logits equals this).
        """
        self._require_fit()
        out = []
        for inst in _check_instances(instances, self.task):
            if inst.num_pairs == 0:
                out.append(torch.zeros(0))
                continue
            with torch.no_grad():
                target = self.predict([inst]).to(self.device)
            x, ei = inst.x.to(self.device), inst.edge_index().to(self.device)
            if self.task == "node":
                y = torch.zeros(inst.num_nodes, dtype=torch.long, device=self.device)
                y[inst.target] = target[0]
                expl = self.explainer_(x, ei, target=y, index=int(inst.target))
            else:
                batch = torch.zeros(inst.num_nodes, dtype=torch.long, device=self.device)
                expl = self.explainer_(x, ei, target=target, **self._graph_kwargs(batch, 1))
            out.append(directed_to_pairs(expl.edge_mask, inst.num_pairs, self.reduce))
        return out
