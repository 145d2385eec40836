"""Granger-causal distillation (paper §3.1 and Appendix C), batched across edges and instances.

For every instance (a computation graph):

1. Δ phase: ``Δ(e) = loss(f(G \\ {e}), y) − loss(f(G), y)`` for every undirected edge (pair) ``e``;
2. greedy phase: in ascending Δ, remove each pair (with the connectivity rule) unless the loss
   rises; a pair whose removal raises it stays, weighted by the rise;
3. top-K (:meth:`Distillation.topk`): cut what the greedy phase kept down to K pairs, by weight
   (``nosplit``, ``exact``, ``paper``: no forward pass) or by loss (``refine``: forward passes).

Modules, each importing at run time only those above it:

- ``conventions``: label sources, the loss, the tie tolerance and the ordering key;
- ``segments``: per-instance stable sorts and segment gathers on flat tensors (segment pointers
  and the packing itself: :mod:`gem_core.data.packed`);
- ``layout``: the instances' packing with their labels, chunk sizes;
- ``components``: the connectivity rule for many instances at once;
- ``delta``: the Δ phase; ``greedy``: the greedy phase;
- ``walk``: the remaining pairs of many instances during a top-K walk, trial copies;
- ``topk``: the policy names, the forward-free rules (nosplit, exact, paper) and the fill-up;
- ``refine``: the loss-driven rule;
- ``result``: :class:`Distillation` (views, subsets, :meth:`~Distillation.topk`, saved state);
- ``engine``: :func:`distill` (layout, Δ phase, greedy phase);
- ``accuracy``: :func:`topk_accuracy`;
- ``cache``: the cached distillation of a dataset split (:func:`distill_dataset`);
- ``reference``: the plain one-edge-at-a-time oracle of all of it (tests, ``bench distill``;
  not imported here).
"""

from gem_core.gem.distill.accuracy import topk_accuracy
from gem_core.gem.distill.cache import distill_dataset, distillation_path, load_distillation
from gem_core.gem.distill.conventions import (
    LABEL_SOURCES,
    TIE_TOL,
    LabelSource,
    check_label_source,
    cross_entropy,
    order_key,
)
from gem_core.gem.distill.engine import distill
from gem_core.gem.distill.layout import CPU_MAX_EDGES, CUDA_MAX_EDGES
from gem_core.gem.distill.result import (
    DISTILL_KIND,
    DISTILL_VERSION,
    Distillation,
    InstanceDistillation,
)
from gem_core.gem.distill.topk import (
    ACCURACY_TOPK_POLICY,
    DEFAULT_TOPK_POLICY,
    TOPK_POLICIES,
    check_topk_policy,
)

__all__ = [
    "Distillation",
    "InstanceDistillation",
    "distill",
    "distill_dataset",
    "load_distillation",
    "distillation_path",
    "topk_accuracy",
    "cross_entropy",
    "order_key",
    "check_label_source",
    "TIE_TOL",
    "TOPK_POLICIES",
    "DEFAULT_TOPK_POLICY",
    "ACCURACY_TOPK_POLICY",
    "check_topk_policy",
    "LabelSource",
    "LABEL_SOURCES",
    "DISTILL_KIND",
    "DISTILL_VERSION",
    "CPU_MAX_EDGES",
    "CUDA_MAX_EDGES",
]
