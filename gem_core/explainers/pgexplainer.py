"""PGExplainer (Luo et al., 2020) through PyG: an MLP over edge embeddings, trained once, batched inference."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Optional

import torch
from torch import Tensor, nn

from gem_core.data.instances import Instance, collate
from gem_core.explainers._pyg import (
    Reduce,
    check_task,
    directed_edge_attr,
    directed_to_pairs,
    frozen_copy,
    graph_kwargs,
    model_config,
    node_kwargs,
    run_on_instance,
    takes_edge_attr,
    takes_num_graphs,
)
from gem_core.explainers.base import Explainer, ExplainerContext
from gem_core.runtime.device import deterministic_algorithms, resolve_device
from gem_core.runtime.errors import NotFittedError
from gem_core.runtime.progress import ProgressFn, report

if TYPE_CHECKING:
    from torch_geometric.explain import Explainer as PyGExplainer


class PGExplainerBaseline(Explainer):
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
    task: str  # one task level, set by __init__
    #: the ``kind`` tag of a saved fit (its edge MLP's weights)
    state_kind: ClassVar[Optional[str]] = "pgexplainer-fit"

    def __init__(
        self,
        model: nn.Module,
        task: str,
        epochs: int = 30,
        lr: float = 0.003,
        edge_size: float = 0.05,
        edge_ent: float = 1.0,
        temp: tuple[float, float] = (5.0, 2.0),
        bias: float = 0.01,
        batch_size: int = 32,
        seed: int = 0,
        reduce: Reduce = "max",
        max_fit_instances: Optional[int] = None,
        score: Literal["logit", "prob"] = "logit",
        infer_batch_size: Optional[int] = None,
        device: str = "cpu",
    ):
        self.task = check_task(task)
        self.device = resolve_device(device)
        self.model = frozen_copy(model, self.device)
        self.epochs, self.lr = int(epochs), float(lr)
        if self.epochs < 1:
            raise ValueError("epochs must be >= 1")
        self.coeffs = {
            "edge_size": float(edge_size),
            "edge_ent": float(edge_ent),
            "temp": [float(temp[0]), float(temp[1])],
            "bias": float(bias),
        }
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
        self.explainer_: Optional[PyGExplainer] = None
        self._takes_num_graphs = takes_num_graphs(self.model)
        self._takes_edge_attr = takes_edge_attr(self.model)

    # -- helpers

    def _graph_kwargs(
        self, batch: Tensor, num_graphs: int, edge_attr: Optional[Tensor] = None
    ) -> dict:
        return graph_kwargs(
            self._takes_num_graphs, batch, num_graphs, edge_attr if self._takes_edge_attr else None
        )

    def _node_kwargs(self, edge_attr: Optional[Tensor]) -> dict:
        return node_kwargs(edge_attr if self._takes_edge_attr else None)

    @torch.no_grad()
    def predict(self, instances: Sequence[Instance]) -> Tensor:
        """The model's predicted class on each full computation graph (CPU, ``[N]``)."""
        b = collate(list(instances), device=self.device)
        if self.task == "node":
            out = self.model(b.x, b.edge_index, **self._node_kwargs(b.edge_attr))[b.target_index]
        else:
            out = self.model(
                b.x, b.edge_index, **self._graph_kwargs(b.batch, b.num_instances, b.edge_attr)
            )
        return out.argmax(-1).cpu()

    def _new_explainer(self) -> PyGExplainer:
        from torch_geometric.explain import Explainer as PyGExplainer
        from torch_geometric.explain import PGExplainer

        algo = PGExplainer(epochs=self.epochs, lr=self.lr)  # no kwargs: keep the class dict intact
        algo.coeffs = copy.deepcopy(self.coeffs)  # instance-level, every coefficient explicit
        algo.to(self.device)  # PyG builds its edge MLP on the CPU and never moves it
        return PyGExplainer(
            model=self.model,
            algorithm=algo,
            explanation_type="phenomenon",
            model_config=model_config(self.task),
            edge_mask_type="object",
        )

    # -- fit

    @property
    def is_fitted(self) -> bool:
        return self.explainer_ is not None

    def _fit(
        self, train: list[Instance], val: Optional[list[Instance]], progress: Optional[ProgressFn]
    ) -> None:
        insts = self._check_instances(train)
        insts = [i for i in insts if i.num_pairs > 0]
        if not insts:
            raise ValueError("PGExplainer needs training instances with at least one edge")
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
            with deterministic_algorithms(self.device):
                if self.task == "node":
                    self._fit_nodes(algo, insts, targets, gen, progress)
                else:
                    self._fit_graphs(algo, insts, targets, gen, progress)

    def _fit_nodes(self, algo, insts, targets, gen, progress) -> None:
        data = []
        for inst, t in zip(insts, targets):
            y = torch.zeros(inst.num_nodes, dtype=torch.long)
            y[inst.target] = t
            attr = directed_edge_attr(inst, self._takes_edge_attr)
            data.append(
                (
                    inst.x.to(self.device),
                    inst.edge_index().to(self.device),
                    y.to(self.device),
                    int(inst.target),
                    self._node_kwargs(None if attr is None else attr.to(self.device)),
                )
            )
        for epoch in range(self.epochs):
            total = 0.0
            for j in torch.randperm(len(data), generator=gen).tolist():
                x, ei, y, idx, extra = data[j]
                total += algo.train(epoch, self.model, x, ei, target=y, index=idx, **extra)
            self.losses_.append(total / len(data))
            report(
                progress,
                (epoch + 1) / self.epochs,
                f"epoch {epoch + 1}/{self.epochs} loss {self.losses_[-1]:.4f}",
            )

    def _fit_graphs(self, algo, insts, targets, gen, progress) -> None:
        for epoch in range(self.epochs):
            order = torch.randperm(len(insts), generator=gen).tolist()
            total, steps = 0.0, 0
            for s in range(0, len(order), self.batch_size):
                idx = order[s : s + self.batch_size]
                b = collate([insts[i] for i in idx], device=self.device)
                total += algo.train(
                    epoch,
                    self.model,
                    b.x,
                    b.edge_index,
                    target=targets[idx].to(self.device),
                    **self._graph_kwargs(b.batch, b.num_instances, b.edge_attr),
                )
                steps += 1
            self.losses_.append(total / max(steps, 1))
            report(
                progress,
                (epoch + 1) / self.epochs,
                f"epoch {epoch + 1}/{self.epochs} loss {self.losses_[-1]:.4f}",
            )

    # -- explain

    def _explain(self, instances: list[Instance], progress: Optional[ProgressFn]) -> list[Tensor]:
        out: list[Tensor] = []
        step = self.infer_batch_size or max(len(instances), 1)
        for s in range(0, len(instances), step):
            chunk = instances[s : s + step]
            out.extend(self._explain_batch(chunk))
            report(progress, min(1.0, (s + len(chunk)) / len(instances)), "batch")
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
        assert self.explainer_ is not None  # explain() refuses an explainer not fitted
        algo = self.explainer_.algorithm
        b = collate(insts, device=self.device)
        src, dst = b.edge_index
        if self.task == "graph":
            emb = get_embeddings(
                self.model,
                b.x,
                b.edge_index,
                **self._graph_kwargs(b.batch, b.num_instances, b.edge_attr),
            )[-1]
            inputs = torch.cat([emb[src], emb[dst]], dim=-1)
        else:
            emb = get_embeddings(self.model, b.x, b.edge_index, **self._node_kwargs(b.edge_attr))[
                -1
            ]
            assert b.target_index is not None  # a batch of node-task instances
            owner_target = b.target_index[b.batch[src]]  # target node of each edge's instance
            inputs = torch.cat([emb[src], emb[dst], emb[owner_target]], dim=-1)
        logits = algo.mlp(inputs).view(-1).double()
        if self.task == "node":  # PyG's hard mask: only edges within L hops of the target
            _, _, _, hard = k_hop_subgraph(
                b.target_index,
                algo._num_hops(self.model),
                b.edge_index,
                num_nodes=b.x.size(0),
                flow=algo._flow(self.model),
            )
            logits = logits.masked_fill(~hard, float("-inf"))
        mask = logits.sigmoid() if self.score == "prob" else logits
        scores = directed_to_pairs(mask, total, self.reduce, dtype=torch.float64)
        if self.score == "logit":  # finite floor for edges PyG's hard mask removes
            finite = scores[torch.isfinite(scores)]
            floor = (float(finite.min()) if finite.numel() else 0.0) - 1.0
            scores = torch.nan_to_num(scores, neginf=floor)
        return [c.float() if self.score == "prob" else c for c in scores.split(counts)]

    # -- persistence: a fit is the edge MLP's weights, cached like Gem's (a fit takes 20-60 s)

    def state_key(self, context: ExplainerContext) -> Optional[str]:
        from gem_core.runtime.store import config_key

        return config_key(
            dataset=context.spec.name,
            target=context.target.digest,
            method=self.name,
            epochs=self.epochs,
            lr=self.lr,
            coeffs=self.coeffs,
            batch_size=self.batch_size,
            seed=self.seed,
            max_fit_instances=self.max_fit_instances,
        )

    def to_state(self) -> dict[str, Any]:
        assert self.explainer_ is not None, "fit before saving"
        mlp = self.explainer_.algorithm.mlp
        return {
            "kind": self.state_kind,
            "mlp": {k: v.detach().cpu() for k, v in mlp.state_dict().items()},
            "losses": [float(v) for v in self.losses_],
            "meta": {"fit_seconds": self.fit_seconds_},
        }

    def load_state(self, state: dict[str, Any]) -> "PGExplainerBaseline":
        explainer = self._new_explainer()
        algo = explainer.algorithm
        algo.mlp.load_state_dict(state["mlp"])
        algo.mlp.to(self.device)
        algo._curr_epoch = self.epochs - 1  # trained: PyG's own explain checks this
        self.explainer_ = explainer
        self.losses_ = [float(v) for v in state.get("losses", [])]
        self.fit_seconds_ = float(state.get("meta", {}).get("fit_seconds", 0.0))
        return self

    def explain_reference(self, instances: Sequence[Instance]) -> list[Tensor]:
        """PyG's own path, one ``Explainer`` call per instance: per-pair sigmoid mask values.

        Slow; for checking :meth:`explain` (``sigmoid`` of its logits equals this).
        """
        if not self.is_fitted:
            raise NotFittedError("PGExplainerBaseline must be fitted before explaining")
        out = []
        for inst in self._check_instances(instances):
            if inst.num_pairs == 0:
                out.append(torch.zeros(0))
                continue
            with torch.no_grad():
                target = self.predict([inst]).to(self.device)
            if self.task == "node":
                y = torch.zeros(inst.num_nodes, dtype=torch.long, device=self.device)
                y[inst.target] = target[0]
                target = y
            expl = run_on_instance(
                self.explainer_,
                inst,
                self.task,
                self.device,
                self._takes_num_graphs,
                self._takes_edge_attr,
                target=target,
            )
            out.append(directed_to_pairs(expl.edge_mask, inst.num_pairs, self.reduce))
        return out
