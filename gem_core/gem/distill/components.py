"""The connectivity rule (``DatasetSpec.connected``), for many instances at once.

After a removal only the edges of one connected component are kept: the component holding the
target node (node tasks) or the largest component by number of nodes (graph tasks; ties: the
component holding the lowest node id). Nodes are never removed, only edges. The components of
many instances are computed in one ``scipy.sparse.csgraph.connected_components`` call on their
block-diagonal graph.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from gem_core.data.packed import PackedGraphs


def _component_labels(u: np.ndarray, v: np.ndarray, n: int) -> np.ndarray:
    """Connected-component label of each of ``n`` nodes of the undirected graph ``(u, v)``."""
    # scipy.sparse loads here, on a distillation's first removal: a screen imports this
    # package (Gem's settings name its policies) but removes nothing (0.1 s of its start).
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    if u.shape[0] and not bool(np.all(u[1:] >= u[:-1])):
        order = np.argsort(u, kind="stable")
        u, v = u[order], v[order]
    indptr = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(u, minlength=n), out=indptr[1:])
    # CSR built directly from the pairs sorted by first endpoint; float64 data is the dtype
    # connected_components works in (no conversion copy)
    graph = csr_matrix((np.ones(u.shape[0]), v.astype(np.int32), indptr), shape=(n, n))
    return connected_components(graph, directed=True, connection="weak")[1]


def _chosen_labels(
    labels: np.ndarray, node_ptr: np.ndarray, m: int, targets: Optional[np.ndarray]
) -> np.ndarray:
    """The component the connectivity rule keeps in each of the first ``m`` instances.

    ``targets`` (global node ids) for node tasks: the target's component. Graph tasks (None): the
    largest component by nodes; ties: the one holding the lowest node id. Every instance must
    have at least one node.
    """
    if targets is not None:
        return labels[targets[:m]]
    # Each node scores its component's size; the first maximal node of an instance picks it.
    n = int(node_ptr[m])
    labels = labels[:n]
    score = np.bincount(labels)[labels]
    starts = node_ptr[:m]
    seg_max = np.maximum.reduceat(score, starts)
    seg_of_node = np.repeat(np.arange(m), np.diff(node_ptr[: m + 1]))
    pos = np.where(score == seg_max[seg_of_node], np.arange(n), n)
    first = np.minimum.reduceat(pos, starts)
    return labels[first]


class _Components:
    """Connectivity rule for many instances at once (block-diagonal graph, one scipy call).

    Works on a prefix of packed graphs: instances ``[0, m)``, their nodes and pairs.
    """

    def __init__(self, packed: PackedGraphs):
        self.u = packed.pairs[0].numpy()
        self.v = packed.pairs[1].numpy()
        self.owner = packed.pair_owner().numpy()
        self.node_ptr = packed.node_ptr.numpy()
        self.targets = None if packed.targets is None else packed.targets.numpy()

    def apply(self, mask: np.ndarray, m: int) -> np.ndarray:
        """Keep only pairs of the selected component of each of the first ``m`` instances.

        Args:
            mask: bool mask over the pairs of the first ``m`` instances (their edge sets).
        Returns:
            the pruned mask (a new array).
        """
        q = mask.shape[0]
        u = self.u[:q]
        labels = _component_labels(u[mask], self.v[:q][mask], int(self.node_ptr[m]))
        keep = _chosen_labels(labels, self.node_ptr, m, self.targets)
        return mask & (labels[u] == keep[self.owner[:q]])
