"""The one recipe that fits Gem: distil → training targets → auto-encoder fit.

:class:`GemPipeline` is how every front-end builds a Gem: the registry's explainer
(:mod:`gem_core.explainers.gem`), the PyTorch Geometric adapter (:mod:`gem_core.pyg`) and the
validation sweeps of ``tune`` (:mod:`gem_core.evaluation.tuning`). Each brings a
:class:`~gem_core.gem.settings.GemSettings`, the target's black box (outputs only) and a way to
distil; the pipeline does the rest the same way for all of them.

1. *distil* the fit instances against the settings' ``teacher.label_source`` (the front-end's
   distiller: a session's cache, or the plain batched distillation);
2. turn each distillation into per-pair *training targets*
   (:func:`~gem_core.gem.training_targets.explainer_targets`: the ``teacher`` settings and the
   K grid);
3. *fit* the graph auto-encoder (:class:`~gem_core.gem.autoencoder.GemAutoEncoder`) on what it
   reads, the instances with, under ``inputs.condition_on_prediction``, the target's predicted class
   appended to every node (:func:`with_predicted_class`), early-stopped on the validation targets.

At explain time, :meth:`GemPipeline.explain` goes through the one explain path,
:func:`gem_core.gem.explain.explain_packed` (the auto-encoder's pass, then the settings' check).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Callable, Optional, Union

import torch
from torch import Tensor

from gem_core.data.instances import Instance
from gem_core.data.packed import PackedGraphs
from gem_core.gem.autoencoder import GemAutoEncoder
from gem_core.gem.distill import Distillation
from gem_core.gem.explain import apply_check, explain_packed
from gem_core.gem.settings import GemSettings
from gem_core.gem.training_targets import explainer_targets
from gem_core.runtime.device import deterministic_algorithms
from gem_core.runtime.progress import ProgressFn, report, scaled

#: ``(instances, label_source, progress) -> Distillation``
Distiller = Callable[[Sequence[Instance], str, Optional[ProgressFn]], Distillation]


def with_predicted_class(
    instances: Sequence[Instance], black_box, num_classes: int, predicted: Optional[Tensor] = None
) -> list[Instance]:
    """The instances with the black box's predicted class (one-hot) appended to every node.

    ``predicted``: the classes when the caller has them already (else one batched forward of the
    black box computes them).
    """
    if predicted is None:
        from gem_core.models.predict import predict_proba

        predicted = predict_proba(black_box, instances).argmax(-1)
    elif len(predicted) and int(predicted.max()) >= num_classes:
        raise ValueError(
            f"predicted class {int(predicted.max())} is out of range: the target "
            f"has {num_classes} classes"
        )
    if not instances:
        return []
    # one concatenation for all instances, then views per instance (half the time of one
    # concatenation per instance on a 2,000-molecule screening chunk)
    sizes = [inst.num_nodes for inst in instances]
    rows = torch.repeat_interleave(torch.as_tensor(predicted).long().cpu(), torch.tensor(sizes))
    x = torch.cat([torch.cat([inst.x for inst in instances]), torch.eye(num_classes)[rows]], 1)
    return [replace(inst, x=part) for inst, part in zip(instances, x.split(sizes))]


class GemPipeline:
    """Distil, derive the training targets and fit Gem's auto-encoder with one set of settings.

    Args:
        settings: everything Gem is (what it learns from, how its auto-encoder is built).
        k_grid: the budgets K the ``graded`` targets average unless ``settings.teacher.ks`` is set.
        black_box: the target, ``InstanceBatch -> logits`` (its outputs only).
        num_classes: classes of the target (the one-hot width under ``condition_on_prediction``;
            None: the black box's ``num_classes``, known once it has been called).
        device: where the auto-encoder is fitted.
        distiller: how instances are distilled (step 1); None: only precomputed distillations
            may be given to :meth:`fit`.

    Attributes (after :meth:`fit`):
        distill_seconds_: seconds the distillation and the training targets took.
        fit_seconds_: seconds the auto-encoder's training took.
    """

    def __init__(
        self,
        settings: GemSettings,
        k_grid: Sequence[int],
        black_box,
        num_classes: Optional[int] = None,
        device: Union[str, torch.device] = "auto",
        distiller: Optional[Distiller] = None,
    ):
        self.settings = settings
        self.k_grid = tuple(int(k) for k in k_grid)
        self.black_box = black_box
        self.num_classes = num_classes
        self.device = device
        self.distiller = distiller
        self.distill_seconds_ = 0.0
        self.fit_seconds_ = 0.0

    # ------------------------------------------------------------------ the steps
    def distill(
        self, instances: Sequence[Instance], progress: Optional[ProgressFn] = None
    ) -> Distillation:
        """Step 1: the distillation of ``instances`` against ``settings.teacher.label_source``."""
        if self.distiller is None:
            raise ValueError("this pipeline has no distiller: give the distillations to fit")
        return self.distiller(instances, self.settings.teacher.label_source.value, progress)

    def targets(self, dist: Distillation, instances: Sequence[Instance]) -> list[Tensor]:
        """Step 2: per-pair training targets in [0, 1] of the distilled ``instances``."""
        return explainer_targets(
            dist, self.settings, self.k_grid, instances=instances, black_box=self.black_box
        )

    def inputs(
        self, instances: Sequence[Instance], predicted: Optional[Tensor] = None
    ) -> list[Instance]:
        """What the auto-encoder reads: the instances, with ``condition_on_prediction`` their
        predicted class (one-hot; given, or the target's) appended to every node's features."""
        if not self.settings.inputs.condition_on_prediction or not instances:
            return list(instances)
        num_classes = self.black_box.num_classes if self.num_classes is None else self.num_classes
        return with_predicted_class(instances, self.black_box, int(num_classes), predicted)

    def explain(
        self,
        autoencoder: GemAutoEncoder,
        instances: Sequence[Instance],
        predicted: Optional[Tensor] = None,
    ) -> list[Tensor]:
        """Gem's scores of ``instances`` through the one explain path
        (:func:`gem_core.gem.explain.explain_packed`: the auto-encoder's pass on what it reads,
        then the settings' check). ``predicted``: the target's classes, when the caller has
        them (else the target predicts on the instances as packed once for both)."""
        instances = list(instances)
        if not instances:
            return []
        packed = PackedGraphs.from_instances(instances)
        scores = explain_packed(
            autoencoder,
            self.settings,
            self.k_grid,
            packed,
            self.black_box,
            predicted,
            self.num_classes,
        )
        return list(packed.split_pairs(scores))

    def check(
        self, packed: PackedGraphs, scores: Tensor, predicted: Optional[Tensor] = None
    ) -> Tensor:
        """Gem's flat pair ``scores`` of the ``packed`` instances with the settings' check
        (:func:`gem_core.gem.explain.apply_check`), e.g. for random scores put through it."""
        return apply_check(self.settings, self.k_grid, self.black_box, packed, scores, predicted)

    def autoencoder(self) -> GemAutoEncoder:
        """A new, unfitted auto-encoder with the settings' hyperparameters."""
        return GemAutoEncoder.from_settings(self.settings, device=self.device)

    def fit_autoencoder(
        self,
        train: Sequence[Instance],
        train_targets: Sequence[Tensor],
        val: Optional[Sequence[Instance]] = None,
        val_targets: Optional[Sequence[Tensor]] = None,
        progress: Optional[ProgressFn] = None,
    ) -> GemAutoEncoder:
        """Step 3: the auto-encoder fitted on the inputs (:meth:`inputs`) of the instances;
        with ``training.fidelity``, then adjusted to the target (:meth:`adjust`)."""
        model = self.autoencoder()
        fidelity = self.settings.training.fidelity
        predicted = None
        if fidelity:  # the target's classes: read by the fidelity term (and the inputs)
            from gem_core.gem.fidelity import fidelity_model
            from gem_core.models.predict import predict_proba

            fidelity_model(self.black_box)  # a target the term cannot read fails before the fit
            predicted = predict_proba(self.black_box, list(train)).argmax(-1)
        fit_progress = scaled(progress, 0.0, 0.8 if fidelity else 1.0)
        train_inputs = self.inputs(train, predicted)  # read by the fit and the adjustment
        model.fit(
            train_inputs,
            train_targets,
            None if val is None else self.inputs(val),
            val_targets,
            progress=fit_progress,
        )
        if fidelity:
            assert predicted is not None
            self.adjust(
                model, train, train_targets, predicted, scaled(progress, 0.8, 1.0), train_inputs
            )
        return model

    def adjust(
        self,
        model: GemAutoEncoder,
        train: Sequence[Instance],
        train_targets: Sequence[Tensor],
        predicted: Tensor,
        progress: Optional[ProgressFn] = None,
        inputs: Optional[Sequence[Instance]] = None,
    ) -> None:
        """Step 4 (``training.fidelity`` above 0): every network of the fitted ``model`` trained
        on with the fidelity term (:func:`gem_core.gem.fidelity.adjust_to_target`) over the
        budgets of the K grid; its per-epoch losses go to ``model.history_["fidelity"]``.
        ``inputs``: what the auto-encoder reads of ``train`` (:meth:`inputs`), when the caller
        built them for the fit (else built here from ``predicted``)."""
        from gem_core.gem.fidelity import adjust_to_target
        from gem_core.gem.training import check_weights

        with deterministic_algorithms(model.device_):
            histories = adjust_to_target(
                model.models_,
                model.prepare(self.inputs(train, predicted) if inputs is None else inputs),
                PackedGraphs.from_instances(train),
                check_weights(train, train_targets, "training"),
                predicted,
                self.black_box,
                self.k_grid,
                float(self.settings.training.fidelity),
                edge_dim=model.edge_dim_,
                batch_size=self.settings.training.batch_size,
                seed=self.settings.seed,
                device=model.device_,
                progress=progress,
            )
        model.history_["fidelity"] = histories

    # ------------------------------------------------------------------ the recipe
    def fit(
        self,
        train: Sequence[Instance],
        val: Optional[Sequence[Instance]] = None,
        train_dist: Optional[Distillation] = None,
        val_dist: Optional[Distillation] = None,
        progress: Optional[ProgressFn] = None,
    ) -> GemAutoEncoder:
        """Distil ``train`` (and ``val``, for early stopping) unless their distillations are
        given, derive the training targets and fit the auto-encoder on them."""
        if not train:
            raise ValueError("Gem needs at least one training instance to fit")
        start = time.perf_counter()
        if train_dist is None:
            train_dist = self.distill(train, scaled(progress, 0.0, 0.45))
        if val and val_dist is None:
            val_dist = self.distill(val, scaled(progress, 0.45, 0.5))
        train_targets = self.targets(train_dist, train)
        val_targets = None if not val or val_dist is None else self.targets(val_dist, val)
        self.distill_seconds_ = time.perf_counter() - start  # the training targets included
        report(progress, 0.5, "training Gem")
        fit_start = time.perf_counter()
        model = self.fit_autoencoder(
            train, train_targets, val or None, val_targets, scaled(progress, 0.5, 1.0)
        )
        self.fit_seconds_ = time.perf_counter() - fit_start
        return model
