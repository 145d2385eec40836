"""Gem for PyTorch Geometric users: a ``torch_geometric.explain`` algorithm over any PyG model.

Owns the adapter between a user's model and the engine (the model seen as a black box,
computation graphs cut from a PyG graph, pair scores mapped back to directed edges). It builds
on ``gem_core.gem`` and the layers below it; nothing in the engine imports it.
"""
from gem_core.pyg.adapter import (GemExplainer, NotFittedError, PyGBlackBox, count_hops,
                                  distinct_scores, topk_config)

__all__ = ["GemExplainer", "PyGBlackBox", "NotFittedError", "topk_config", "count_hops",
           "distinct_scores"]
