"""Gem (Lin, Lan & Li, ICML 2021): distil Granger-causal explanations, then learn to generate them.

``fit(train, val)`` distils the training (and validation) instances against the target's
outputs only (paper §3.1: Δ loss of every edge, greedy connectivity-aware pruning), turns the
distillations into per-edge training targets (:mod:`gem_core.gem_targets`) and trains the graph
auto-encoder of :mod:`gem_core.explainers.gem_autoencoder` on them, with early stopping on the
validation targets. ``explain`` is then one forward pass of the auto-encoder for the whole batch:
the target model is never called again.
"""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Optional

from torch import Tensor

from ..instances import Instance
from ..progress import ProgressFn, scaled
from ..store import config_key
from .base import Explainer, ExplainerContext
from .gem_autoencoder import EXPLAINER_KIND, GemAutoEncoder, autoencoder_settings

# part of every saved Gem's key: bump when a change makes earlier fits unusable
GEM_VERSION = 1


class GemExplainer(Explainer):
    """Gem behind the engine's explainer interface.

    Args:
        context: the target (outputs only), the dataset's settings and the session's cache.
        target_kind: what the auto-encoder learns (see :data:`gem_core.gem_targets.TARGET_KINDS`);
            default: the dataset's ``explainer_target``.
        topk_policy: top-K rule of the distilled masks behind ``graded`` targets; default: the
            dataset's ``explainer_topk_policy``.
        label_source: distil against the ``"true"`` label (the paper) or the target's
            ``"predicted"`` class; default: the dataset's ``explainer_label_source``.
        **settings: overrides of the auto-encoder's hyperparameters (default: the dataset's,
            :func:`~gem_core.explainers.gem_autoencoder.autoencoder_settings`).

    Attributes (after :meth:`fit` or loading):
        autoencoder_: the trained :class:`GemAutoEncoder`.
        fit_seconds_: seconds the auto-encoder's training took (the distillation excluded).
        distill_seconds_: seconds the distillation of the fit instances took.
    """

    name = "gem"
    state_kind = EXPLAINER_KIND
    asset_stem = "{dataset}"  # assets/explainers/<dataset>.pt

    def __init__(self, context: ExplainerContext, target_kind: Optional[str] = None,
                 topk_policy: Optional[str] = None, label_source: Optional[str] = None,
                 **settings: Any):
        self.context = context
        self.target_kind = target_kind or context.spec.explainer_target
        self.topk_policy = topk_policy or context.spec.explainer_topk_policy
        self.label_source = label_source or context.spec.explainer_label_source
        self.settings = {**autoencoder_settings(context.spec), **settings}
        self.autoencoder_: Optional[GemAutoEncoder] = None
        self.fit_seconds_ = 0.0
        self.distill_seconds_ = 0.0
        self.explain_seconds_ = 0.0

    @property
    def task(self) -> str:  # type: ignore[override]
        return self.context.spec.task

    @property
    def is_fitted(self) -> bool:
        return self.autoencoder_ is not None

    @property
    def history_(self) -> dict[str, Any]:
        """The auto-encoder's training history (losses per epoch, best epoch)."""
        return {} if self.autoencoder_ is None else self.autoencoder_.history_

    # ------------------------------------------------------------------ fit
    def fit(self, train=(), val=None, progress: Optional[ProgressFn] = None) -> "GemExplainer":
        """Distil ``train`` (and ``val``), then train the auto-encoder on the distillations."""
        train = self._check_instances(train)
        val = None if val is None else self._check_instances(val)
        if not train:
            raise ValueError("Gem needs at least one training instance to fit")
        ctx = self.context
        start = time.perf_counter()
        train_dist = ctx.distill(train, self.label_source, scaled(progress, 0.0, 0.45))
        val_dist = (None if not val else
                    ctx.distill(val, self.label_source, scaled(progress, 0.45, 0.5)))
        self.distill_seconds_ = time.perf_counter() - start
        spec = replace(ctx.spec, explainer_target=self.target_kind,
                       explainer_topk_policy=self.topk_policy)
        model = GemAutoEncoder(**self.settings, device=ctx.device)
        fit_start = time.perf_counter()
        model.fit(train, self._targets(train_dist, spec, train),
                  val or None, None if not val else self._targets(val_dist, spec, val),
                  progress=scaled(progress, 0.5, 1.0))
        self.fit_seconds_ = time.perf_counter() - fit_start
        self.autoencoder_ = model
        return self

    def _targets(self, dist, spec, instances: list[Instance]) -> list[Tensor]:
        from ..gem_targets import explainer_targets

        return explainer_targets(dist, spec, instances=instances, black_box=self.context.black_box)

    # ------------------------------------------------------------------ explain
    def _explain(self, instances: list[Instance], progress: Optional[ProgressFn]) -> list[Tensor]:
        assert self.autoencoder_ is not None
        return self.autoencoder_.explain(instances)

    # ------------------------------------------------------------------ persistence
    def state_key(self, context: ExplainerContext) -> Optional[str]:
        parts: dict[str, Any] = dict(dataset=context.spec.name, target=context.target.digest,
                                     params=self.settings, train_target=self.target_kind,
                                     topk_policy=self.topk_policy, version=GEM_VERSION)
        if self.label_source != "true":  # later settings enter the key only when not default
            parts["label_source"] = self.label_source
        return config_key(**parts)

    def to_state(self) -> dict[str, Any]:
        assert self.autoencoder_ is not None, "fit before saving"
        state = self.autoencoder_.to_state()
        state["meta"] = {"fit_seconds": self.fit_seconds_, "distill_seconds": self.distill_seconds_}
        return state

    def load_state(self, state: dict[str, Any]) -> "GemExplainer":
        meta = state.get("meta", {})
        self.autoencoder_ = GemAutoEncoder.from_state(state, device=self.context.device)
        # the time its fit took, so a loaded explainer reports what fitting it costs
        self.fit_seconds_ = float(meta.get("fit_seconds", 0.0))
        self.distill_seconds_ = float(meta.get("distill_seconds", 0.0))
        return self
