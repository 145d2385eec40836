"""Explanation methods behind one interface, and the registry that lists them.

* :mod:`~gem_core.explainers.base`: the abstract :class:`Explainer` (``fit`` → ``explain``), the
  one result type :class:`Explanation`, and :class:`ExplainerContext` (the model explained and
  the dataset's settings).
* :mod:`~gem_core.explainers.registry`: one row per method (name, title, constructor, needs a
  fit, batched, measured by ``reproduce``, settings).
* One module per method: :mod:`gem` (with its auto-encoder in :mod:`gem_autoencoder`),
  :mod:`distilled`, :mod:`gnnexplainer`, :mod:`pgexplainer`, :mod:`random_scores`.

To add a method: write its module (subclass :class:`Explainer`, implement ``_explain`` and, if
it learns, ``_fit``), add its row to :mod:`registry` and its colour to ``app/theme.py``.
"""
from .base import (EdgeExplainer, Explainer, ExplainerContext, Explanation, FittableExplainer,
                   NotFittedError, instance_seed)
from .registry import (BATCH_METHODS, DEFAULT_TEACHER, METHODS, REGISTRY, REPRODUCE_METHODS,
                       MethodSpec, UnknownMethodError, check_method, method_spec, title)

__all__ = [
    "Explainer", "Explanation", "ExplainerContext", "EdgeExplainer", "FittableExplainer",
    "NotFittedError", "instance_seed", "MethodSpec", "REGISTRY", "METHODS", "REPRODUCE_METHODS",
    "UnknownMethodError", "check_method", "method_spec", "title", "BATCH_METHODS", "DEFAULT_TEACHER",
]
