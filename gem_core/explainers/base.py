"""The explainer contract: one abstract base, one result type, and what an explainer may know.

Every explainer of the engine (Gem, the distilled teacher, GNNExplainer, PGExplainer, random, …)
follows the scikit-learn contract in the style of PyG's ``torch_geometric/explain/algorithm``:

* the constructor takes settings only and does no work;
* ``fit(train, val=None, progress=None)`` learns from training instances, using the target
  model's outputs only where the method is model-agnostic, and returns ``self``; learned state
  ends in ``_`` (``fit_seconds_`` is always set). Methods with nothing to learn inherit a no-op;
* ``explain(instances, progress=None, predicted=None)`` scores every undirected pair of every
  instance and returns one :class:`Explanation` (timed). ``predicted`` is the target's predicted
  class per instance when the caller already has it (a screening run predicts every molecule
  anyway); an explainer that reads the prediction (:attr:`Explainer.reads_prediction`) then uses
  it instead of running the target again, the others ignore it.

A subclass implements :meth:`Explainer._explain` (and :meth:`Explainer._fit` when it learns).
Scores are one float per pair of ``instance.pairs`` (same order), higher = more important, on
the CPU. The :class:`Explanation` carries the instances with their scores (checked against
their pairs) and gives the top-K views of :mod:`gem_core.data.ranking`;
:mod:`gem_core.evaluation.metrics` measures them.
"""

from __future__ import annotations

import hashlib
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Optional, Union, overload

import torch
from torch import Tensor

from gem_core.data import ranking
from gem_core.data.config import DatasetSpec, check_k
from gem_core.data.instances import Instance
from gem_core.gem.settings import GemSettings
from gem_core.runtime.errors import NotFittedError
from gem_core.runtime.progress import ProgressFn

if TYPE_CHECKING:
    from gem_core.gem.distill import Distillation
    from gem_core.models.targets import GNNBlackBox, TrainedTarget


# ----------------------------------------------------------------------------- the result


@dataclass
class Explanation(Sequence):
    """Scores of one method for a batch of instances, the instances, and what they cost.

    A sequence of per-instance score tensors (``explanation[i]`` is instance ``i``'s ``[P_i]``
    scores), so it can be used wherever a list of scores is expected. When it carries its
    ``instances`` (every :meth:`Explainer.explain` result does), each score tensor is checked
    against its instance's pairs at construction, and the instance-level views work: the top-K
    masks, the ranked pairs, the ties at the cut, the explanation and complement subgraphs and
    :meth:`to_pyg`. All of them read :mod:`gem_core.data.ranking`, the one top-K ranking.

    Attributes:
        method: the registry name of the method that made it.
        scores: one float tensor ``[P_i]`` per instance, higher = more important.
        ms_per_instance: wall-clock milliseconds per instance of the call that made it.
        instances: the explained instances (same order as ``scores``), or None.

    Raises:
        ValueError: ``instances`` given, and their number or a score length does not match.
    """

    method: str
    scores: list[Tensor]
    ms_per_instance: float = 0.0
    instances: Optional[list[Instance]] = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.instances is None:
            return
        self.instances = list(self.instances)
        if len(self.instances) != len(self.scores):
            raise ValueError(
                f"{self.method}: {len(self.scores)} score tensors for "
                f"{len(self.instances)} instances"
            )
        for i, (inst, s) in enumerate(zip(self.instances, self.scores)):
            n = int(torch.as_tensor(s).numel())
            if n != inst.num_pairs:
                raise ValueError(
                    f"{self.method}: got {n} scores for instance {i}, which has "
                    f"{inst.num_pairs} pairs"
                )

    def __len__(self) -> int:
        return len(self.scores)

    @overload
    def __getitem__(self, i: int) -> Tensor: ...

    @overload
    def __getitem__(self, i: slice) -> list[Tensor]: ...

    def __getitem__(self, i: Union[int, slice]) -> Union[Tensor, list[Tensor]]:
        return self.scores[i]

    def __iter__(self) -> Iterator[Tensor]:
        return iter(self.scores)

    def instance(self, i: int) -> Instance:
        """The ``i``-th explained instance (a clear ValueError when none are carried)."""
        if self.instances is None:
            raise ValueError(f"this {self.method} explanation carries no instances")
        return self.instances[i]

    # -- the top-K views (gem_core.data.ranking)
    def topk_mask(self, i: int, k: int) -> Tensor:
        """Boolean mask ``[P_i]`` of instance ``i``'s ``k`` best pairs (see :func:`ranking.topk_mask`)."""
        return ranking.topk_mask(self.scores[i], check_k(k))

    def topk(self, k: int) -> list[Tensor]:
        """:meth:`topk_mask` of every instance."""
        return [self.topk_mask(i, k) for i in range(len(self))]

    def ranked(self, i: int, k: int) -> list[int]:
        """Instance ``i``'s top-``k`` pair indices, best first (ties: lower pair index first)."""
        return ranking.ranked_pairs(self.scores[i], check_k(k))

    def ranked_pairs(self, i: int, k: int) -> list[tuple[int, int]]:
        """Instance ``i``'s top-``k`` pairs ``(u, v)``, best first (the order of :meth:`ranked`)."""
        pairs = self.instance(i).pairs
        return [(int(pairs[0, j]), int(pairs[1, j])) for j in self.ranked(i, k)]

    def tied_at_cut(self, i: int, k: int) -> Tensor:
        """Mask of instance ``i``'s pairs tied with the K-th best score across the cut (see
        :func:`ranking.tied_at_cut`; all False when no tie crosses it)."""
        return ranking.tied_at_cut(self.scores[i], check_k(k))

    def explanation_subgraph(self, i: int, k: int) -> Instance:
        """Instance ``i`` with only its top-``k`` pairs (all nodes kept, other edges deleted)."""
        return ranking.explanation_subgraph(self.instance(i), self.scores[i], k)

    def complement_subgraph(self, i: int, k: int) -> Instance:
        """Instance ``i`` with its top-``k`` pairs deleted (all nodes and other edges kept)."""
        return ranking.complement_subgraph(self.instance(i), self.scores[i], k)

    # -- PyG
    def to_pyg(self, k: Optional[int] = None, target: Optional[Sequence[int]] = None) -> list[Any]:
        """One ``torch_geometric.explain.Explanation`` per instance, for PyG's metrics.

        Each holds ``x``, the directed ``edge_index`` (the pairs, then the same pairs reversed:
        :meth:`Instance.edge_index`), and ``edge_mask`` on those edges: the pair scores in both
        directions, or with ``k`` the hard top-K mask (1.0 kept, 0.0 not), which is what
        ``fidelity`` needs (it multiplies messages by the mask, and by ``1 - mask`` for the
        complement). ``target`` is the class each instance is explained for (the target's
        prediction for ``fidelity`` of model explanations); default the instance's label. Node
        tasks also get ``index`` (the explained node; ``target`` then holds its class at that
        node, -1 elsewhere). When an instance has a motif, ``gt_edge_mask`` holds it per directed
        edge, for ``groundtruth_metrics(explanation.edge_mask, explanation.gt_edge_mask)``.
        """
        from torch_geometric.explain import Explanation as PyGExplanation

        out = []
        for i in range(len(self)):
            inst = self.instance(i)
            if k is None:
                mask = torch.as_tensor(self.scores[i]).detach().cpu().float().reshape(-1)
            else:
                mask = self.topk_mask(i, k).float()
            cls = int(inst.y) if target is None else int(target[i])
            pyg = PyGExplanation(
                x=inst.x, edge_index=inst.edge_index(), edge_mask=torch.cat([mask, mask])
            )
            if inst.target is None:
                pyg.target = torch.tensor([cls])
            else:
                pyg.target = torch.full((inst.num_nodes,), -1, dtype=torch.long)
                pyg.target[int(inst.target)] = cls
                pyg.index = int(inst.target)
            if inst.motif_mask is not None:
                motif = inst.motif_mask.float().reshape(-1)
                pyg.gt_edge_mask = torch.cat([motif, motif])
            pyg._model_args = []
            out.append(pyg)
        return out


# ----------------------------------------------------------------------------- what an explainer knows


@dataclass
class ExplainerContext:
    """The model an explainer explains and the dataset settings it may use.

    Model-agnostic methods (Gem, the distilled teacher) use :attr:`black_box` only, the target's
    outputs; white-box baselines (GNNExplainer, PGExplainer, gradients) read ``target.model``.

    Attributes:
        target: the trained target GNN.
        spec: the dataset's settings (task, K grid, connectivity rule).
        device: where the explainer runs.
        distiller: optional ``(instances, label_source, progress) -> Distillation`` reusing a
            session's cache; the plain batched distillation otherwise.
        gem_settings: Gem's settings for this target (None: the dataset's for its paper target,
            :meth:`GemSettings.for_dataset`).
    """

    target: "TrainedTarget"
    spec: DatasetSpec
    device: torch.device
    distiller: Optional[Callable[..., "Distillation"]] = field(default=None, repr=False)
    gem_settings: Optional[GemSettings] = None

    @property
    def task(self) -> str:
        return self.spec.task

    @cached_property
    def black_box(self) -> "GNNBlackBox":
        """The target as a black box: a batch of instances in, logits per instance out."""
        return self.target.black_box(self.device)

    def distill(
        self,
        instances: Sequence[Instance],
        label_source: str = "true",
        progress: Optional[ProgressFn] = None,
    ) -> "Distillation":
        """The Granger-causal distillation of ``instances`` (paper §3.1) against the black box."""
        if self.distiller is not None:
            return self.distiller(instances, label_source, progress)
        from gem_core.gem.distill import distill

        return distill(
            list(instances),
            self.black_box,
            connected=self.spec.connected,
            label_source=label_source,
            device=self.device,
            progress=progress,
        )


# ----------------------------------------------------------------------------- the base class


def check_predicted(predicted: Any, n: int, regression: bool = False) -> Tensor:
    """``predicted`` as a ``[n]`` long tensor of class indices (a regressor's: a float64
    tensor of values), or a clear ValueError."""
    out = torch.as_tensor(predicted)
    if out.dim() != 1 or out.numel() != n:
        raise ValueError(
            f"predicted must hold one class per instance: got shape "
            f"{tuple(out.shape)} for {n} instances"
        )
    if regression:
        if not out.is_floating_point():
            raise ValueError(f"a regressor's predicted values must be numbers, got {out.dtype}")
        return out.double().cpu()
    if out.is_floating_point() or out.dtype == torch.bool:
        raise ValueError(f"predicted must hold integer class indices, got {out.dtype}")
    if n and int(out.min()) < 0:
        raise ValueError("predicted class indices must be non-negative")
    return out.long().cpu()


class Explainer(ABC):
    """Abstract explainer: ``fit`` on training instances, ``explain`` a batch into an :class:`Explanation`.

    Class attributes:
        name: the method's registry name (also :attr:`Explanation.method`).
        task: ``"node"`` / ``"graph"`` when the explainer handles one task level only (then
            instances of the other level are refused), else None.
    """

    name: ClassVar[str] = "explainer"
    fit_seconds_: float = 0.0
    explain_seconds_: float = 0.0
    task: Optional[str] = None
    #: the checkpoint a saved fit was loaded from (None: fitted in this process, or no fit)
    loaded_from_: Optional[str] = None

    # -- fitting
    def fit(
        self,
        train: Sequence[Instance] = (),
        val: Optional[Sequence[Instance]] = None,
        progress: Optional[ProgressFn] = None,
    ) -> "Explainer":
        """Learn from ``train`` (and ``val`` for early stopping where used); returns self."""
        if type(self)._fit is Explainer._fit:  # nothing to learn: nothing to time either
            self.fit_seconds_ = 0.0
            return self
        start = time.perf_counter()
        self._fit(list(train), None if val is None else list(val), progress)
        self.fit_seconds_ = time.perf_counter() - start
        return self

    def _fit(  # noqa: B027 - a hook with a default: most explainers learn nothing
        self, train: list[Instance], val: Optional[list[Instance]], progress: Optional[ProgressFn]
    ) -> None:
        """What ``fit`` learns; nothing by default."""

    @property
    def is_fitted(self) -> bool:
        """Whether :meth:`explain` can run (always, for methods with nothing to learn)."""
        return True

    # -- explaining
    @property
    def reads_prediction(self) -> bool:
        """Whether ``explain`` runs the target for its predicted classes (then a caller that has
        them can pass ``predicted`` and spare that forward pass)."""
        return False

    def explain(
        self,
        instances: Sequence[Instance],
        progress: Optional[ProgressFn] = None,
        predicted: Optional[Tensor] = None,
    ) -> Explanation:
        """Scores of every pair of every instance, as one timed :class:`Explanation`.

        ``predicted``: optional target's predicted class per instance (``[N]`` integers), used
        by explainers that read the prediction instead of running the target again.
        """
        if not self.is_fitted:
            raise NotFittedError(
                f"{type(self).__name__} must be fitted before explaining: call "
                f"fit(train_instances) first."
            )
        instances = self._check_instances(instances)
        if predicted is not None:
            # values (a regressor's) are accepted by an explainer that knows its target is one,
            # and by one that never reads them
            values = self._regression or (
                not self.reads_prediction and torch.as_tensor(predicted).is_floating_point()
            )
            predicted = check_predicted(predicted, len(instances), values)
        start = time.perf_counter()
        if predicted is not None and self.reads_prediction:
            scores = self._explain_predicted(instances, progress, predicted)
        else:
            scores = self._explain(instances, progress)
        self.explain_seconds_ = time.perf_counter() - start
        ms = 1000.0 * self.explain_seconds_ / max(len(instances), 1)
        return Explanation(self.name, list(scores), ms, instances)

    @property
    def _regression(self) -> bool:
        """Whether the target explained is a regressor (its predictions are values): the
        dataset row of its context says so, or the white-box model it holds does."""
        context = getattr(self, "context", None)
        if context is not None:
            return bool(getattr(context.spec, "regression", False))
        return bool(getattr(getattr(self, "model", None), "regression", False))

    @abstractmethod
    def _explain(self, instances: list[Instance], progress: Optional[ProgressFn]) -> list[Tensor]:
        """One score tensor ``[P_i]`` per instance (CPU), higher = more important."""

    def _explain_predicted(
        self, instances: list[Instance], progress: Optional[ProgressFn], predicted: Tensor
    ) -> list[Tensor]:
        """``_explain`` with the target's predicted classes given (explainers that read them)."""
        return self._explain(instances, progress)

    def _check_instances(self, instances: Sequence[Instance]) -> list[Instance]:
        instances = list(instances)
        if self.task is not None:
            for inst in instances:
                if inst.task != self.task:
                    raise ValueError(
                        f"a {self.task}-level explainer got a {inst.task}-level instance"
                    )
        return instances

    # -- persistence (explainers worth saving override these)
    #: file name (without .pt) of a fit shipped in assets/explainers/
    asset_stem: ClassVar[str] = "{dataset}-{method}"
    #: the ``kind`` tag of a saved state (checked on loading)
    state_kind: ClassVar[Optional[str]] = None

    def state_key(self, context: ExplainerContext) -> Optional[str]:
        """A key of everything that determines the fitted state (None: never saved to disk)."""
        return None

    def to_state(self) -> dict[str, Any]:
        raise NotImplementedError(f"{type(self).__name__} cannot be saved")

    def load_state(self, state: dict[str, Any]) -> "Explainer":
        """Restore a state saved with :meth:`to_state` into this (unfitted) explainer."""
        raise NotImplementedError(f"{type(self).__name__} cannot be loaded")


def instance_seed(seed: int, instance: Instance) -> int:
    """A seed that depends only on ``seed`` and the instance (not on its position in a list)."""
    key = (
        f"{int(seed)}|{instance.dataset}|{instance.index}|{instance.target}|"
        f"{instance.num_nodes}|{instance.num_pairs}"
    )
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little") >> 1
