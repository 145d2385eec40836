"""Gem as a PyTorch Geometric explainer: explain any PyG model, treated as a black box.

:class:`GemExplainer` is a :class:`torch_geometric.explain.algorithm.ExplainerAlgorithm`, used the
way PyG users use ``PGExplainer``::

    explainer = Explainer(model, algorithm=GemExplainer(epochs=300, k=6),
                          explanation_type="model", edge_mask_type="object",
                          model_config=dict(mode="multiclass_classification",
                                            task_level="node", return_type="log_probs"),
                          threshold_config=dict(threshold_type="topk", value=2 * 6))
    explainer.algorithm.fit(model, data, index=train_nodes)     # graph level: fit(model, graphs)
    explanation = explainer(data.x, data.edge_index, index=node)  # graph level: batch=batch
    explanation.edge_mask                                          # one score per edge, in [0, 1]

``fit`` only *calls* the model, ``model(x, edge_index[, batch=batch])``; it never reads weights,
layers or embeddings (it does count the model's ``MessagePassing`` submodules to know how many
hops a node's prediction depends on, unless ``num_hops`` is given). It wraps the model as an
engine black box (:class:`~gem_core.pyg.black_box.PyGBlackBox`), cuts the computation graphs (the
``num_hops``-hop subgraph of every training node, or every whole graph,
:mod:`gem_core.pyg.computation_graphs`) and fits Gem through the engine's one recipe,
:class:`gem_core.gem.pipeline.GemPipeline`: it distils them with
:func:`gem_core.gem.distill.distill` (against the model's own prediction for ``"model"``
explanations, the data's ``y`` or a given ``target`` for ``"phenomenon"``), derives the training
targets (:func:`gem_core.gem.training_targets.explainer_targets`) and fits the graph
auto-encoder, :class:`gem_core.gem.autoencoder.GemAutoEncoder`. ``forward`` then never calls the model:
it cuts the computation graphs of the requested nodes (or the graphs of the batch) and scores all
of them in one forward pass of the auto-encoder.

Edge masks. The engine scores undirected pairs ``{u, v}``; each pair's score is written to every
directed edge of the user's ``edge_index`` joining ``u`` and ``v`` (both directions get the same
value). Edges outside the explained computation graphs, and self-loops, get 0. Several nodes in
one call (a tensor ``index``) give one joint mask, the maximum over the nodes; the per-node masks
are in ``explanation.edge_masks``, a sparse ``[len(index), num_edges]`` tensor. A graph-level
call with a ``batch`` of several graphs explains every graph (each edge belongs to one graph).

Top-K policy. Gem's budget ``k`` counts *undirected* edges. PyG's ``topk`` threshold counts
*entries* of ``edge_mask``, i.e. directed edges. With a coalesced symmetric ``edge_index`` (PyG's
``to_undirected`` convention: every undirected edge stored once per direction), pass
``value=2 * K`` to keep exactly ``K`` undirected edges, both directions of each: scores of
different pairs are made pairwise distinct (ties are broken by nudging scores down by a few
ulps, the lower pair index ranking first, as in :func:`gem_core.data.ranking.topk_mask`) and every
in-graph score is positive, so the thresholded mask has exactly ``2 * min(K, P)`` non-zero entries for a
computation graph of ``P`` pairs. :func:`topk_config` builds that threshold config.

Return types. Distillation compares cross-entropy losses, so outputs are turned into
cross-entropy-compatible logits: ``raw`` as is, ``log_probs`` as is (``log_softmax`` of
log-probabilities is the identity), ``probs`` through ``log``; ``binary_classification`` with one
output column becomes the two-class logits ``[0, z]`` (``raw``) or ``[log(1 - p), log p]``
(``probs``). Node-feature masks are not supported.

Regression (``mode="regression"``). The model's output is a value; Gem's Granger effect of an
edge is then the rise of the squared error when it goes (against the model's own output on the
whole graph for ``"model"`` explanations, which makes it the squared change of the prediction;
against ``y`` or the given ``target`` for ``"phenomenon"``), and the distillation, the training
targets and the ``"sufficient"`` growth compare squared errors where a classifier's compare
cross-entropies. What reads a predicted *class* does not apply and is off for a regressor:
``inputs.condition_on_prediction``, ``teacher.necessity_weight``, ``teacher.necessity_lead``
and ``check.lead`` (asking for one of them says so). With the level's preset, Gem's ranking is
read cover-first (``network.order="cover"``, :mod:`gem_core.gem.cover_order`; no model query):
under ``drop_isolated`` a value that sums over atoms is kept when most atoms are, and on the
zoo's regressors this put Gem above random edge scores (decisions/008). Sufficiency of a
regressor's explanation is judged with a tolerance, 0.1 times the spread of its outputs
(:mod:`gem_core.evaluation.faithfulness`); the explain-time check (Gem + check) holds a value
within 0.1 times the spread of the model's outputs on the fit instances
(``regression_tolerance_``).

Several tasks. A model with one output column per task is explained for one task,
``fit(..., target_task=j)`` (its column; PyG's ``index`` names nodes or graphs, not tasks): fit
one ``GemExplainer`` per task of interest.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any, Optional, Union

import numpy as np
import torch
from torch import Tensor, nn
from torch_geometric.explain import Explanation
from torch_geometric.explain.algorithm import ExplainerAlgorithm
from torch_geometric.explain.config import (
    ExplainerConfig,
    ExplanationType,
    MaskType,
    ModelConfig,
    ModelMode,
    ModelTaskLevel,
)

from gem_core.gem.autoencoder import GemAutoEncoder
from gem_core.gem.distill import Distillation, distill
from gem_core.gem.explain import explain_packed
from gem_core.gem.pipeline import GemPipeline
from gem_core.gem.presets import preset
from gem_core.gem.settings import GemSettings, TargetKind, TopKPolicy
from gem_core.pyg.black_box import PyGBlackBox, count_hops
from gem_core.pyg.computation_graphs import (
    ComputationGraphs,
    GraphStructure,
    as_node_list,
    graph_computation_graphs,
    graph_fit_instances,
    node_computation_graphs,
    node_fit_instances,
)
from gem_core.pyg.edge_inputs import EDGE_INPUT_NAMES, EdgeInputs, fit_edge_inputs
from gem_core.pyg.edge_masks import edge_masks, node_mask_from_edges
from gem_core.pyg.receptive_field import check_receptive_field
from gem_core.runtime.device import resolve_device
from gem_core.runtime.errors import NotFittedError
from gem_core.runtime.progress import ProgressFn, report, scaled

__all__ = ["GemExplainer"]


class GemExplainer(ExplainerAlgorithm):
    r"""Gem (Lin et al., ICML 2021) as a PyG explainer algorithm, model-agnostic.

    Call :meth:`fit` once (through ``explainer.algorithm.fit``) before explaining. Hyperparameters
    only are set here.

    Args:
        epochs: maximum training epochs of the Gem auto-encoder (early stopping on a held-out
            part of the fit instances); default: the preset's (300).
        k: explanation budget in *undirected* edges the distilled ground truth is cut to, or a
            sequence of budgets (Gem then learns the ranking shared by all of them: its target
            is the mean of the distilled top-K masks). PyG's ``topk`` counts directed edges: use
            ``threshold_config=topk_config(K)`` (``value=2*K``) on a symmetric ``edge_index``.
        num_hops: hops of a node's computation graph; default: the number of ``MessagePassing``
            modules of the model.
        seed: seeds the split, the auto-encoder's initialisation and its training noise
            (default: the settings', 0).
        device: where Gem runs (default: the device of the data given to :meth:`fit`).
        check: an explain-time search on top of Gem (a separate method, "Gem + check", that
            asks the model: batched forwards per checked position, see
            :mod:`gem_core.gem.checked_ranking`): ``"off"`` (Gem's one-pass ranking, the model
            not asked), ``"repair"``, ``"best"``, ``"search"``, ``"sustain"`` or ``"climb"``;
            default: the preset's (off). Read when explaining: change it after the fit freely.
            With the level's preset a prediction must hold under the protocol Gem is taught for
            (``check.protocol = "taught"``: the one it is judged by), not both.
        preset: a named set of settings (:mod:`gem_core.gem.presets`); default ``"node"`` or
            ``"graph"`` by the task level, chosen on validation for models Gem knows nothing of
            (``docs/decisions/007-pyg-adapter-defaults.md``); ``"paper"`` is the paper's Gem.
        settings: everything else, by setting path over the preset
            (``{"network.ensemble": 3, "teacher.necessity_lead": 5, "check.width": 5}``; the
            paths are listed in ``docs/settings.md``), or a whole
            :class:`~gem_core.gem.settings.GemSettings` instead of a preset.

    What a fit decides itself: distilled against the model's prediction for ``"model"``
    explanations (the labels for ``"phenomenon"``, which then do not read the prediction
    unless ``inputs.condition_on_prediction`` is set), the model's hops, whether Gem reads the
    graphs' per-edge tensors (when the model does), distilled explanations connected at node
    level only (unless ``teacher.connected`` is set), under the ``"sufficient"`` top-K rule
    (the graph preset's) targets over every budget 1 … max(``k``) (unless ``teacher.ks`` is
    set), and for a regressor with the level's preset, Gem's ranking read cover-first
    (``network.order="cover"``, unless set, or taught the ``signed`` effect, an attribution: a
    value such as logP is kept when most atoms are).

    Attributes (after :meth:`fit`):
        gem_: the fitted :class:`gem_core.gem.autoencoder.GemAutoEncoder`.
        distillation_: the :class:`gem_core.gem.distill.Distillation` of the fit instances.
        settings_: the :class:`~gem_core.gem.settings.GemSettings` it was fitted with.
        num_hops_, num_classes_, task_level_, explanation_type_, fit_seconds_, distill_seconds_,
        target_task_ (the output column explained, None: the only one), regression_tolerance_ (a
        regressor's: 0.1 x the spread of the values it was fitted on).
    """

    def __init__(
        self,
        epochs: Optional[int] = None,
        k: Union[int, Sequence[int]] = 6,
        num_hops: Optional[int] = None,
        seed: Optional[int] = None,
        device: Union[str, torch.device, None] = None,
        check: Optional[str] = None,
        preset: Optional[str] = None,
        settings: Union[GemSettings, Mapping[str, Any], None] = None,
    ):
        super().__init__()
        self.epochs = None if epochs is None else int(epochs)
        self.k_grid = _k_grid(k)
        self.k = k
        if num_hops is not None and (isinstance(num_hops, bool) or int(num_hops) < 1):
            raise ValueError(f"num_hops must be a positive integer, got {num_hops!r}")
        self.num_hops = None if num_hops is None else int(num_hops)
        self.seed = None if seed is None else int(seed)
        self.device = device
        self.check = check
        if preset is not None and isinstance(settings, GemSettings):
            raise ValueError("give a preset or a whole GemSettings, not both")
        self.preset = preset
        self.settings = settings
        self.gem_settings("node", 1, phenomenon=False)  # bad options fail here, one line each
        self.gem_settings("graph", 1, phenomenon=False)

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}(epochs={self.epochs}, k={self.k!r}, "
            f"num_hops={self.num_hops}, check={self.check!r}, preset={self.preset!r})"
        )

    # ------------------------------------------------------------------ configuration
    @staticmethod
    def _unsupported(explainer_config: ExplainerConfig, model_config: ModelConfig) -> Optional[str]:
        supported = (
            "Gem supports edge_mask_type='object', node_mask_type=None or 'object', "
            "mode='multiclass_classification', 'binary_classification' or 'regression', "
            "task_level='node' or 'graph', explanation_type='model' or 'phenomenon'."
        )
        if explainer_config.node_mask_type not in (None, MaskType.object):
            return (
                f"Gem scores nodes as objects (each node's best edge): node_mask_type="
                f"'{explainer_config.node_mask_type.value}' is not supported (use 'object' or "
                f"None). " + supported
            )
        if explainer_config.edge_mask_type != MaskType.object:
            got = getattr(explainer_config.edge_mask_type, "value", None)
            return f"Gem needs edge_mask_type='object' (got {got!r}). " + supported
        if model_config.task_level not in (ModelTaskLevel.node, ModelTaskLevel.graph):
            return (
                f"Gem explains node or graph predictions: task_level="
                f"'{model_config.task_level.value}' is not supported. " + supported
            )
        return None

    def supports(self) -> bool:
        """False (reason logged) for node masks, non-object edge masks, edge level."""
        reason = self._unsupported(self.explainer_config, self.model_config)
        if reason is not None:
            logging.error(reason)
            return False
        return True

    def connect(self, explainer_config: ExplainerConfig, model_config: ModelConfig):
        """Connect to an ``Explainer``'s configs; unsupported settings raise a ``ValueError``
        that says what is supported."""
        reason = self._unsupported(
            ExplainerConfig.cast(explainer_config), ModelConfig.cast(model_config)
        )
        if reason is not None:
            raise ValueError(reason)
        super().connect(explainer_config, model_config)

    def _require_connected(self) -> None:
        if not hasattr(self, "_explainer_config") or not hasattr(self, "_model_config"):
            raise ValueError(
                "GemExplainer is not connected to an Explainer yet: create "
                "Explainer(model, algorithm=GemExplainer(...), explanation_type=..., "
                "model_config=..., edge_mask_type='object') first, then call "
                "explainer.algorithm.fit(model, data, ...)."
            )

    @property
    def task_level(self) -> str:
        return self.model_config.task_level.value

    # ------------------------------------------------------------------ fit
    def fit(
        self,
        model: nn.Module,
        data: Any,
        index: Optional[Union[int, Sequence[int], Tensor]] = None,
        *,
        target: Optional[Tensor] = None,
        target_task: Optional[int] = None,
        progress: Optional[ProgressFn] = None,
        **kwargs: Any,
    ) -> "GemExplainer":
        """Distil the model's behaviour on the training instances and train Gem on it.

        Args:
            model: the model to explain; only called, ``model(x, edge_index[, batch=batch])``.
            data: node level: one ``Data`` (``x``, ``edge_index``); graph level: a list or
                ``Dataset`` of ``Data`` (one graph each).
            index: node level: the training nodes (ids or a boolean mask; default all nodes).
                Not used at graph level.
            target: ``"phenomenon"`` only: the labels to explain (node level: one per node of
                ``data`` or one per ``index`` entry; graph level: one per graph). Default: ``y``.
            target_task: for a model with one output column per task (multi-task), the column
                explained, read as a single-output model of its own (fit one explainer per task);
                default: the model's only output. Explaining uses the fitted task.
            progress: optional ``progress(fraction, message)`` callback (the engine convention).
            **kwargs: extra non-tensor keyword arguments for the model.
        Returns:
            self.
        """
        self._require_connected()
        if target_task is not None and (
            isinstance(target_task, bool) or not isinstance(target_task, (int, np.integer))
        ):
            raise ValueError(f"target_task must be an output column index, got {target_task!r}")
        self.target_task_ = None if target_task is None else int(target_task)
        for key, value in kwargs.items():
            if isinstance(value, Tensor):
                where = (
                    f" Per-edge tensors travel with the graphs: give them as data.{key}."
                    if key in EDGE_INPUT_NAMES
                    else ""
                )
                raise ValueError(
                    f"Gem distils the model on subgraphs, so tensor inputs besides x, edge_index, "
                    f"batch and the graphs' own per-edge tensors (edge_attr, edge_weight) cannot "
                    f"be carried over: got {key}=<tensor>.{where}"
                )
        start = time.perf_counter()
        level = self.task_level
        phenomenon = self.explainer_config.explanation_type == ExplanationType.phenomenon
        hops = self.num_hops if self.num_hops is not None else count_hops(model)
        if level == "graph" and not _accepts_batch(model):
            raise ValueError(
                "graph-level models are called as model(x, edge_index, batch=batch), one output row "
                "per graph; this model's forward takes no `batch` argument"
            )
        if level == "node" and hops < 1:
            raise ValueError(
                "could not find any MessagePassing layer in the model to count the hops of a "
                "node's computation graph: pass GemExplainer(num_hops=...)"
            )
        edge_inputs = fit_edge_inputs(model, data, level)
        settings = self.gem_settings(level, hops, phenomenon, edge_features=edge_inputs is not None)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(settings.seed)
            if level == "node":
                instances, dev = node_fit_instances(
                    data, index, hops, target, phenomenon, edge_inputs, self._label_reader()
                )
            else:
                instances, dev = graph_fit_instances(
                    data, index, target, phenomenon, edge_inputs, self._label_reader()
                )
            black_box = PyGBlackBox(
                model,
                level,
                self.model_config.mode,
                self.model_config.return_type,
                dev,
                kwargs,
                edge_inputs,
                self.target_task_,
            )
            gem_device = resolve_device(self.device if self.device is not None else dev)
            was_training = model.training
            model.eval()
            if level == "node":
                try:
                    check_receptive_field(
                        black_box,
                        data,
                        as_node_list(index, int(data.x.size(0)))
                        if index is not None
                        else range(int(data.x.size(0))),
                        hops,
                        counted=self.num_hops is None,
                    )
                except ValueError:
                    model.train(was_training)
                    raise

            def distiller(insts, label_source: str, prog: Optional[ProgressFn]) -> Distillation:
                return distill(
                    insts,
                    black_box,
                    connected=bool(settings.teacher.connected),
                    label_source=label_source,
                    device=dev,
                    progress=prog,
                )

            # the engine's one Gem recipe: distil all fit instances once, split them, then
            # training targets and the auto-encoder's fit (early-stopped on the held-out part)
            pipeline = GemPipeline(
                settings, self.k_grid, black_box, device=gem_device, distiller=distiller
            )
            try:
                report(progress, 0.0, f"distilling {len(instances)} {level} instances")
                t0 = time.perf_counter()
                dist = pipeline.distill(instances, scaled(progress, 0.0, 0.5))
                self.distill_seconds_ = time.perf_counter() - t0
                train_ids, val_ids = self._split(len(instances), settings)
                report(progress, 0.5, "training targets")
                gem = pipeline.fit(
                    [instances[i] for i in train_ids],
                    [instances[i] for i in val_ids] if val_ids else None,
                    train_dist=dist.subset(train_ids),
                    val_dist=dist.subset(val_ids) if val_ids else None,
                    progress=scaled(progress, 0.5, 1.0),
                )
            finally:
                model.train(was_training)
        self.gem_: GemAutoEncoder = gem
        self.settings_ = settings
        self.distillation_: Distillation = dist
        self.num_hops_ = int(hops)
        self.edge_inputs_: Optional[EdgeInputs] = edge_inputs
        self.num_classes_ = int(black_box.num_classes)
        #: a regressor's tolerance (the check's "holds"): 0.1 x the spread of what it explained
        self.regression_tolerance_: Optional[float] = None
        if self.regression:
            from gem_core.data.protocol import regression_tolerance

            self.regression_tolerance_ = regression_tolerance(dist.labels)
        self.num_features_ = int(instances[0].x.size(1))
        self.task_level_ = level
        self.explanation_type_ = self.explainer_config.explanation_type.value
        self.fit_seconds_ = time.perf_counter() - start
        report(progress, 1.0, f"Gem fitted on {len(instances)} instances")
        return self

    def gem_settings(
        self, level: str, hops: int, phenomenon: bool, edge_features: bool = False
    ) -> GemSettings:
        """The :class:`~gem_core.gem.settings.GemSettings` of a fit at ``level`` (``"node"`` or
        ``"graph"``) with ``hops``-hop computation graphs: the preset (the level's unless
        named) or the given settings, the user's setting paths over it, then what the fit
        decides itself (the class docstring), then ``epochs``, ``seed`` and ``check``.
        ``edge_features``: the model reads per-edge tensors, and so does Gem's auto-encoder."""
        if isinstance(self.settings, GemSettings):
            base, given = self.settings, {}
        else:
            base, given = preset(self.preset or level), dict(self.settings or {})
        chosen = base.with_overrides(given)
        fit: dict[str, Any] = {
            "teacher.label_source": "true" if phenomenon else "predicted",
            "inputs.num_hops": max(int(hops), 1),
            "inputs.edge_features": bool(edge_features),
        }
        if phenomenon and "inputs.condition_on_prediction" not in given:
            fit["inputs.condition_on_prediction"] = False  # the labels are explained
        if self.regression:
            fit.update(
                self._regression_settings(chosen, given, isinstance(self.settings, GemSettings))
            )
        if chosen.teacher.connected is None:
            fit["teacher.connected"] = level == "node"
        if chosen.teacher.topk_policy == TopKPolicy.sufficient and not chosen.teacher.ks:
            # the "sufficient" growth ranks every budget up to the largest K
            fit["teacher.ks"] = tuple(range(1, max(self.k_grid) + 1))
        explicit = {
            "training.max_epochs": self.epochs,
            "seed": self.seed,
            "check.rule": self.check,
        }
        fit.update({path: value for path, value in explicit.items() if value is not None})
        return chosen.with_overrides(fit)

    @property
    def regression(self) -> bool:
        """Whether the connected model is a regressor (``mode="regression"``)."""
        config = getattr(self, "_model_config", None)
        return config is not None and config.mode == ModelMode.regression

    def _label_reader(self):
        """How a phenomenon's labels are read: values for a regressor, classes otherwise
        (with ``target_task``: that task's column of ``y``)."""
        task = self.target_task_

        def read(value: Any) -> Union[int, float]:
            t = torch.as_tensor(value).reshape(-1)
            v = t[0 if task is None else task] if t.numel() > 1 else t[0]
            return float(v) if self.regression else int(v)

        return read

    def _regression_settings(
        self, chosen: GemSettings, given: Mapping[str, Any], given_whole: bool = False
    ) -> dict:
        """The settings a regressor cannot use turned off, or a one-line refusal where the
        user asked for one: each reads a predicted class."""
        refused = {  # the check itself judges a regressor's value within its tolerance
            "inputs.condition_on_prediction": bool(chosen.inputs.condition_on_prediction),
            "teacher.necessity_weight": chosen.teacher.necessity_weight > 0,
            "teacher.necessity_lead": chosen.teacher.necessity_lead > 0,
        }
        for path, on in refused.items():
            if on and path in given:
                raise ValueError(
                    f"{path} reads the model's predicted class: it applies to classifiers, "
                    f"not to a regression model (leave it unset)"
                )
        if chosen.check.lead > 0 and "check.lead" in given:
            raise ValueError(
                "check.lead reads the model's predicted class: it applies to classifiers, not "
                "to a regression model (leave it unset)"
            )
        out: dict[str, Any] = {
            "inputs.condition_on_prediction": False,
            "teacher.necessity_weight": 0.0,
            "teacher.necessity_lead": 0,
            "check.lead": 0,
        }
        signed = chosen.teacher.kind == TargetKind.signed  # an attribution: its order stays
        if self.preset is None and "network.order" not in given and not given_whole and not signed:
            # a value kept when most nodes are (a sum over atoms, such as logP): Gem's ranking
            # read cover-first, chosen on validation across the zoo's regressors (decisions/008)
            out["network.order"] = "cover"
        return out

    def connects(self, level: str) -> bool:
        """The connectivity rule of a fit at ``level``: ``teacher.connected`` where set, else
        on for node level (the paper's) and off for graph level, where the ``sufficient``
        growth may pick edges of several fragments (decisions/007)."""
        return bool(self.gem_settings(level, 1, phenomenon=False).teacher.connected)

    def _split(self, n: int, settings: GemSettings) -> tuple[list[int], list[int]]:
        share = settings.training.val_fraction
        n_val = int(round(share * n)) if n >= 10 else 0
        if n_val == 0:
            return list(range(n)), []
        generator = torch.Generator().manual_seed(settings.seed)
        perm = torch.randperm(n, generator=generator).tolist()
        return sorted(perm[n_val:]), sorted(perm[:n_val])

    # ------------------------------------------------------------------ explain
    def _check_fitted(self) -> None:
        if not hasattr(self, "gem_"):
            raise NotFittedError(
                "GemExplainer is not fitted yet: call explainer.algorithm.fit(model, data, "
                "index=train_nodes) (node level) or explainer.algorithm.fit(model, graphs) (graph "
                "level) before explaining."
            )

    def forward(
        self,
        model: nn.Module,
        x: Tensor,
        edge_index: Tensor,
        *,
        target: Tensor,
        index: Optional[Union[int, Tensor]] = None,
        **kwargs: Any,
    ) -> Explanation:
        """Edge mask of the requested nodes' (or the batch's graphs') computation graphs.

        The model is not called: Gem scores the computation graphs with its auto-encoder, all
        instances in one forward pass. ``target`` is not used (Gem explains what it was fitted
        to explain: the model's predictions, or the labels given at fit time).
        """
        self._check_fitted()
        if isinstance(x, dict) or isinstance(edge_index, dict):
            raise ValueError("Gem explains homogeneous graphs only (got a heterogeneous graph)")
        level = self.task_level
        if level != self.task_level_:
            raise ValueError(
                f"this GemExplainer was fitted for task_level='{self.task_level_}', "
                f"the Explainer asks for '{level}'"
            )
        if x.size(1) != self.num_features_:
            raise ValueError(
                f"x has {x.size(1)} node features, Gem was fitted with {self.num_features_}"
            )
        edge_inputs = self._explain_edge_inputs(kwargs, int(edge_index.size(1)))
        if level == "node":
            if index is None:
                raise ValueError("node-level explanations need the node(s) to explain: index=...")
            nodes = as_node_list(index, int(x.size(0)))
            structure = self._structure(edge_index, int(x.size(0)))
            pair_attr = None
            if edge_inputs is not None:
                pair_attr = self._pair_rows(edge_inputs, kwargs, structure)
            graphs = node_computation_graphs(
                x, edge_index, nodes, self.num_hops_, structure=structure, pair_attr=pair_attr
            )
            keep = None
        else:
            graphs = graph_computation_graphs(
                x, edge_index, kwargs.get("batch"), edge_tensors=kwargs, edge_inputs=edge_inputs
            )
            keep = None if index is None else as_node_list(index, len(graphs))
        predicted = None
        if self.explainer_config.explanation_type == ExplanationType.model:
            # PyG's Explainer has run the model on this input already: ``target`` is its
            # predicted class per node (or per graph), so Gem need not run it again
            predicted = self._given_prediction(target, graphs, level)
        scores = self._scores(graphs, model, kwargs, predicted)
        edge_mask, per_node = edge_masks(
            graphs, scores, keep, x.device, per_node=level == "node" and len(graphs) > 1
        )
        out = Explanation(edge_mask=edge_mask)
        if self.explainer_config.node_mask_type == MaskType.object:
            out.node_mask = node_mask_from_edges(edge_mask, edge_index, int(x.size(0)))
        if per_node is not None:
            out.edge_masks = per_node
        return out

    def _explain_edge_inputs(self, kwargs: dict[str, Any], num_edges: int) -> Optional[EdgeInputs]:
        """The per-edge tensors of this call, checked against those Gem was fitted with."""
        fitted = getattr(self, "edge_inputs_", None)
        given = EdgeInputs.of(kwargs, num_edges)
        if fitted is None:
            if given is not None:
                raise ValueError(
                    f"this call gives {given.describe()}, but Gem was fitted without per-edge "
                    f"tensors: fit on graphs that carry them (data.{given.inputs[0].name}) so "
                    f"that the model reads them while Gem is distilled"
                )
            return None
        fitted.check_same(given)
        return fitted

    def _pair_rows(
        self, edge_inputs: EdgeInputs, tensors: dict[str, Any], structure: GraphStructure
    ) -> Tensor:
        """The graph's per-pair edge rows, reused while the same graph and the same per-edge
        tensors (same objects, unchanged) are explained again, as :meth:`_structure` is: a
        node explained per call on a large graph does not pay a pass over all its edges."""
        parts = tuple((id(tensors[n]), tensors[n]._version) for n in edge_inputs.names)
        cached = self.__dict__.get("_pair_rows_cache")
        if cached is not None and cached[0] is structure and cached[1] == parts:
            return cached[2]
        rows = edge_inputs.pair_rows(tensors, structure.edge_pair, structure.num_pairs)
        # the tensors are held too, so that their ids cannot be reused by new ones
        held = tuple(tensors[n] for n in edge_inputs.names)
        self.__dict__["_pair_rows_cache"] = (structure, parts, rows, held)
        return rows

    def _structure(self, edge_index: Tensor, num_nodes: int) -> GraphStructure:
        """The :class:`GraphStructure` of ``edge_index``, reused while the same tensor, unchanged
        (same object, same in-place version counter), is explained again."""
        cached = self.__dict__.get("_structure_cache")
        if (
            cached is not None
            and cached[0] is edge_index
            and cached[1] == edge_index._version
            and cached[2].num_nodes == num_nodes
        ):
            return cached[2]
        structure = GraphStructure(edge_index, num_nodes)
        self.__dict__["_structure_cache"] = (edge_index, edge_index._version, structure)
        return structure

    def _explain_settings(self) -> GemSettings:
        """The fitted settings with the check as it is now (``check``, and the ``check.*``
        paths of ``settings``): the check is read when explaining, so changing it after the fit
        needs no refit (resolved once per change, not on every call)."""
        key = (self.check, self.preset, repr(self.settings))
        cached = self.__dict__.get("_explain_settings_cache")
        if cached is None or cached[0] != key or cached[1] is not self.settings_:
            now = self.gem_settings(self.task_level_, self.num_hops_, phenomenon=False)
            cached = (key, self.settings_, dataclasses.replace(self.settings_, check=now.check))
            self.__dict__["_explain_settings_cache"] = cached
        return cached[2]

    def _given_prediction(
        self, target: Optional[Tensor], graphs: ComputationGraphs, level: str
    ) -> Optional[Tensor]:
        """The model's class on each explained instance from PyG's ``target`` (node level:
        indexed by the explained nodes), or None where it does not fit (then Gem predicts)."""
        if target is None or not isinstance(target, Tensor) or target.dtype.is_floating_point:
            return None
        if target.dim() == 2 and target.size(1) > 1:  # one column per task: the fitted one's
            task = getattr(self, "target_task_", None)
            if task is None:
                return None
            target = target[:, task]
        flat = target.reshape(-1)
        if level == "node":  # one class per node of the user's graph
            nodes = torch.as_tensor(list(graphs.indices), dtype=torch.long)
            if nodes.numel() == 0 or flat.numel() <= int(nodes.max()):
                return None
            return flat.cpu()[nodes].long()
        return flat.long().cpu() if flat.numel() == len(graphs) else None

    def _scores(
        self,
        graphs: ComputationGraphs,
        model: Optional[nn.Module] = None,
        model_kwargs: Optional[dict[str, Any]] = None,
        predicted: Optional[Tensor] = None,
    ) -> Tensor:
        """Gem's score of every stacked pair through the engine's one explain path
        (:func:`gem_core.gem.explain.explain_packed`): all computation graphs in one forward
        pass, plus, where Gem reads the prediction and PyG gave none, or with the check, batched
        forwards of ``model`` (in eval mode meanwhile)."""
        if len(graphs) == 0 or graphs.local_pairs.size(1) == 0:
            return torch.zeros(graphs.local_pairs.size(1))
        packed = graphs.packed()
        settings = self._explain_settings()
        black_box = None
        was_training = model is not None and model.training
        if settings.asks_target or (settings.inputs.condition_on_prediction and predicted is None):
            black_box = self._black_box(model, model_kwargs or {}, packed.x.device)
            if was_training and model is not None:  # called: in eval mode (walks every module)
                model.eval()
        try:
            return explain_packed(
                self.gem_,
                settings,
                self.k_grid,
                packed,
                black_box,
                predicted,
                self.num_classes_,
                hops=graphs.hops,
            )
        finally:
            if was_training and model is not None and black_box is not None:
                model.train(True)

    def _black_box(
        self, model: Optional[nn.Module], model_kwargs: dict[str, Any], device
    ) -> PyGBlackBox:
        """The model as the engine's black box, for its predicted classes and the check."""
        if model is None:
            raise ValueError(
                "this Gem reads the model's prediction (condition_on_prediction or "
                "check): explain through the Explainer, which passes the model"
            )
        kwargs = {k: v for k, v in model_kwargs.items() if not isinstance(v, Tensor)}
        black_box = PyGBlackBox(
            model,
            self.task_level_,
            self.model_config.mode,
            self.model_config.return_type,
            device,
            kwargs,
            getattr(self, "edge_inputs_", None),
            getattr(self, "target_task_", None),
        )
        black_box.tolerance = getattr(self, "regression_tolerance_", None)
        return black_box


def _accepts_batch(model: nn.Module) -> bool:
    import inspect

    try:
        params = inspect.signature(model.forward).parameters.values()
    except (TypeError, ValueError):  # no introspectable signature: let the call decide
        return True
    return any(p.name == "batch" or p.kind == p.VAR_KEYWORD for p in params)


def _k_grid(k: Union[int, Sequence[int]]) -> tuple[int, ...]:
    values = [k] if isinstance(k, (int, np.integer)) else list(k)  # bool: refused below
    if not values:
        raise ValueError("k must be a positive integer or a non-empty sequence of them")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= int(v) <= 1000:
            raise ValueError(f"k must be a positive integer (at most 1000), got {v!r}")
    return tuple(sorted({int(v) for v in values}))
