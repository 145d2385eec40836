"""Explanation methods behind one interface, and the registry that lists them.

* :mod:`~gem_core.explainers.base`: the abstract :class:`Explainer` (``fit`` → ``explain``), the
  one result type :class:`Explanation`, and :class:`ExplainerContext` (the model explained and
  the dataset's settings).
* :mod:`~gem_core.explainers.registry`: one row per method (name, title, constructor, needs a
  fit, batched, measured by ``reproduce``, settings).
* One module per method: :mod:`gem` (its auto-encoder and fit live in :mod:`gem_core.gem`),
  :mod:`distilled`, :mod:`gnnexplainer`, :mod:`pgexplainer`, :mod:`random_scores`.

To add a method: write its module (subclass :class:`Explainer`, implement ``_explain`` and, if
it learns, ``_fit``), add its row to :mod:`registry` and its colour to ``app/theme.py``.
"""

from gem_core.runtime.lazy import lazy_exports

# Loaded on first use, so the registry's names come without torch: the CLI's ``--method``
# choices and ``--help`` do not pay for importing the engine.
__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "base": ("Explainer", "Explanation", "ExplainerContext", "NotFittedError", "instance_seed"),
        "registry": (
            "MethodSpec",
            "REGISTRY",
            "METHODS",
            "REPRODUCE_METHODS",
            "UnknownMethodError",
            "check_method",
            "method_spec",
            "title",
            "BATCH_METHODS",
            "DEFAULT_TEACHER",
        ),
    },
)
