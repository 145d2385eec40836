"""Gem for PyTorch Geometric users: a ``torch_geometric.explain`` algorithm over any PyG model.

Owns the adapter between a user's model and the engine: the model seen as a black box
(``black_box``), computation graphs cut from a PyG graph (``computation_graphs``), pair scores
mapped back to directed edges (``edge_masks``) and the explainer algorithm itself
(``explainer``), which fits through :class:`gem_core.gem.pipeline.GemPipeline`. It builds on
``gem_core.gem`` and the layers below it; nothing in the engine imports it.
"""

from gem_core.pyg.black_box import PyGBlackBox, count_hops
from gem_core.pyg.edge_masks import distinct_scores, topk_config
from gem_core.pyg.explainer import GemExplainer
from gem_core.runtime.errors import NotFittedError

__all__ = [
    "GemExplainer",
    "PyGBlackBox",
    "NotFittedError",
    "topk_config",
    "count_hops",
    "distinct_scores",
]
