"""Computation graphs cut out of a user's PyG graph(s), with the way back to its directed edges.

Node level: the ``num_hops``-hop subgraph of every explained (or training) node, cut for all
nodes at once by a multi-source BFS (:func:`node_computation_graphs`); graph level: every graph
of a batch (:func:`graph_computation_graphs`). Both give a :class:`ComputationGraphs`, which
holds the instances packed (a :class:`~gem_core.data.packed.PackedGraphs`, what Gem's
auto-encoder reads in one pass) and, for every stacked pair, its id among the user's distinct
undirected pairs, so scores can be written back to ``edge_index``. :func:`node_fit_instances`
and :func:`graph_fit_instances` check what a user gives ``fit`` and cut the training instances.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any, Callable, Optional, Union

import numpy as np
import torch
from scipy.sparse import csr_matrix
from torch import Tensor
from torch_geometric.data import Data

from gem_core.data.instances import Instance
from gem_core.data.packed import PackedGraphs, np_segment_arange
from gem_core.pyg.edge_inputs import EdgeInputs

DENSE_LOOKUP_LIMIT = 4_000_000  # (explained nodes × graph nodes) up to which lookups use a table


class ComputationGraphs:
    """Many computation graphs cut out of one user graph, packed, with the way back to its edges.

    Instance ``i`` owns nodes ``node_ptr[i]:node_ptr[i+1]`` and pairs ``pair_ptr[i]:pair_ptr[i+1]``
    of the packed tensors; nodes are in increasing id of the user's graph, pairs sorted (the
    order of :func:`gem_core.data.instances.node_instance` / ``to_pairs``).

    Args:
        x: node features of all instances, stacked ``[Nn, d]`` (CPU).
        local_pairs: pairs ``[2, Q]`` in each instance's own node numbering (``u < v``).
        node_counts, pair_counts: ``[B]`` nodes and pairs of every instance.
        targets: position of each instance's target node in its own numbering, or None (graphs).
        edge_attr: per stacked pair, the model's per-edge inputs as rows ``[Q, a]``
            (:class:`~gem_core.pyg.edge_inputs.EdgeInputs`), or None.

    Attributes:
        graphs: the computation graphs packed (:class:`~gem_core.data.packed.PackedGraphs`, the
            user's feature dtype); ``x``, ``node_ptr``, ``pair_ptr`` are its tensors.
        local_pairs, targets: as given.
        node_ids: node id in the user's graph of every stacked node ``[Nn]``.
        pair_ids: id of every stacked pair among the user's distinct pairs ``[Q]``.
        edge_pair: pair id of every directed edge of the user's ``edge_index`` (-1: self-loop).
        num_pairs: number of distinct undirected pairs of the user's graph.
        labels, indices: per instance, the label (-1: none) and the node / graph id.
        hops: node level, the hop distance of every stacked node to its instance's target.
        structure: the :class:`GraphStructure` of the user's graph, when built.
    """

    def __init__(
        self,
        x: Tensor,
        local_pairs: Tensor,
        node_counts: Tensor,
        pair_counts: Tensor,
        targets: Optional[Tensor],
        node_ids: Tensor,
        pair_ids: Tensor,
        edge_pair: Tensor,
        num_pairs: int,
        labels: Optional[Sequence[Union[int, float]]],
        indices: Sequence[int],
        edge_attr: Optional[Tensor] = None,
    ):
        self.graphs = PackedGraphs.from_segments(
            x, local_pairs, node_counts, pair_counts, targets, edge_attr
        )
        self.local_pairs, self.targets = local_pairs, targets
        self.node_ids, self.pair_ids, self.edge_pair = node_ids, pair_ids, edge_pair
        self.num_pairs = int(num_pairs)
        # classes stay ints, a regression's values floats
        self.labels = [-1] * len(indices) if labels is None else [_label(v) for v in labels]
        self.indices = [int(v) for v in indices]
        self.hops: Optional[Tensor] = None  # node level: hop distance of every stacked node
        self.structure: Optional[GraphStructure] = None
        self._instances: Optional[list[Instance]] = None

    def __len__(self) -> int:
        return self.graphs.num_instances

    @property
    def x(self) -> Tensor:
        return self.graphs.x

    @property
    def node_ptr(self) -> Tensor:
        return self.graphs.node_ptr

    @property
    def pair_ptr(self) -> Tensor:
        return self.graphs.pair_ptr

    @property
    def pair_owner(self) -> Tensor:
        """Instance of every stacked pair ``[Q]``."""
        return self.graphs.pair_owner()

    @property
    def instances(self) -> list[Instance]:
        """One engine :class:`~gem_core.data.instances.Instance` per computation graph."""
        if self._instances is None:
            g = self.graphs
            node_task = self.targets is not None
            xs, pairs = g.split_nodes(g.x), g.split_pairs(self.local_pairs, dim=1)
            ids = g.split_nodes(self.node_ids) if node_task else [None] * len(self)
            targets = self.targets.tolist() if self.targets is not None else [None] * len(self)
            attrs = g.split_pairs(g.edge_attr) if g.edge_attr is not None else [None] * len(self)
            self._instances = [
                Instance(x=x, pairs=p, y=y, target=t, index=index, node_ids=n, edge_attr=a)
                for x, p, y, t, index, n, a in zip(
                    xs, pairs, self.labels, targets, self.indices, ids, attrs
                )
            ]
        return self._instances

    def packed(self) -> PackedGraphs:
        """All computation graphs as one disconnected graph with float32 features (what Gem's
        auto-encoder reads)."""
        return self.graphs.float_features()


def _global_pairs(edge_index: Tensor, num_nodes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sorted distinct undirected pairs (lo, hi) of a directed edge index and each edge's pair."""
    ei = edge_index.detach().cpu().numpy().astype(np.int64, copy=False)
    lo, hi = np.minimum(ei[0], ei[1]), np.maximum(ei[0], ei[1])
    loop = lo == hi
    keys = lo * num_nodes + hi
    uniq, inverse = np.unique(keys[~loop], return_inverse=True)
    edge_pair = np.full(ei.shape[1], -1, dtype=np.int64)
    edge_pair[~loop] = inverse.reshape(-1)
    return uniq // max(num_nodes, 1), uniq % max(num_nodes, 1), edge_pair


class GraphStructure:
    """Graph-wide lookups of one ``edge_index``, computed once and reused across explain calls.

    Attributes:
        num_nodes: nodes of the graph.
        lo, hi: its distinct undirected pairs, sorted (numpy).
        edge_pair: pair id of every directed edge (-1: self-loop), a tensor.
        adj: symmetric adjacency (scipy CSR).
        lo_ptr: CSR pointer of the pairs by lower endpoint.
        edge_order, edge_ptr: the directed edges grouped by pair (edges of pair ``p`` are
            ``edge_order[edge_ptr[p]:edge_ptr[p + 1]]``).
    """

    def __init__(self, edge_index: Tensor, num_nodes: int):
        n = int(num_nodes)
        self.num_nodes = n
        self.lo, self.hi, edge_pair = _global_pairs(edge_index, n)
        q = self.lo.size
        self.edge_pair = torch.from_numpy(edge_pair)
        self.adj = csr_matrix(
            (
                np.ones(2 * q, dtype=np.float32),
                (np.concatenate([self.lo, self.hi]), np.concatenate([self.hi, self.lo])),
            ),
            shape=(n, n),
        )
        self.lo_ptr = np.searchsorted(self.lo, np.arange(n + 1))
        self.edge_order = torch.argsort(self.edge_pair, stable=True)
        self.edge_ptr = torch.searchsorted(self.edge_pair[self.edge_order], torch.arange(q + 1))

    @property
    def num_pairs(self) -> int:
        return int(self.lo.size)


def node_computation_graphs(
    x: Tensor,
    edge_index: Tensor,
    nodes: Sequence[int],
    num_hops: int,
    labels: Optional[Sequence[Union[int, float]]] = None,
    structure: Optional[GraphStructure] = None,
    pair_attr: Optional[Tensor] = None,
) -> ComputationGraphs:
    """The ``num_hops``-hop computation graph of every node in ``nodes``, vectorised.

    The same subgraphs as ``k_hop_subgraph(node, num_hops, edge_index, relabel_nodes=True)`` on
    the symmetrised graph (all edges among the nodes within ``num_hops`` hops), relabelled in
    increasing node id, pairs sorted: the instances ``gem_core.data.instances.node_instance`` cuts.
    The hop distance of every node to its target comes along (``ComputationGraphs.hops``).
    ``pair_attr``: per distinct pair of the graph, the model's per-edge inputs (rows), cut along.
    """
    n = int(x.size(0))
    nodes_np = np.asarray([int(v) for v in nodes], dtype=np.int64)
    if nodes_np.size and (nodes_np.min() < 0 or nodes_np.max() >= n):
        raise ValueError(f"node index out of range for a graph of {n} nodes")
    st = structure if structure is not None else GraphStructure(edge_index, n)
    if st.num_nodes != n:
        raise ValueError(f"graph structure of {st.num_nodes} nodes for x of {n} nodes")
    hi, lo_ptr = st.hi, st.lo_ptr
    b = nodes_np.size
    # multi-source BFS, one row per target; `level` counts the rounds a node has been reached in,
    # so its hop distance is num_hops - level + 1
    reach = csr_matrix((np.ones(b, dtype=np.float32), (np.arange(b), nodes_np)), shape=(b, n))
    level = reach
    for _ in range(num_hops):
        reach = reach + reach @ st.adj
        reach.data[:] = 1.0
        level = level + reach
    level.sort_indices()
    row_ptr = level.indptr.astype(np.int64)
    cols = level.indices.astype(np.int64)
    hops = (num_hops + 1 - level.data).astype(np.int64)
    rows = np.repeat(np.arange(b), np.diff(row_ptr))
    keys = rows * n + cols  # sorted: rows ascending, columns ascending within a row
    # candidate pairs: for every (row, u) the pairs whose lower endpoint is u; kept when the
    # upper endpoint was reached from the same row too
    counts = lo_ptr[cols + 1] - lo_ptr[cols]
    cand = np.repeat(lo_ptr[cols], counts) + np_segment_arange(counts)
    cand_row = np.repeat(rows, counts)
    cand_lo_pos = np.repeat(np.arange(cols.size), counts)
    if b * n <= DENSE_LOOKUP_LIMIT:  # position of (row, node) by a dense table lookup
        table = np.full((b, n), -1, dtype=np.int64)
        table[rows, cols] = np.arange(cols.size)
        hi_pos = table[cand_row, hi[cand]]
        ok = hi_pos >= 0
        target_pos = table[np.arange(b), nodes_np] - row_ptr[:-1]
    else:  # by binary search in the sorted (row, node) keys
        hi_key = cand_row * n + hi[cand]
        hi_pos = np.searchsorted(keys, hi_key)
        ok = hi_pos < keys.size
        ok[ok] = keys[hi_pos[ok]] == hi_key[ok]
        target_pos = np.searchsorted(keys, np.arange(b) * n + nodes_np) - row_ptr[:-1]
    cand, cand_row, cand_lo_pos, hi_pos = cand[ok], cand_row[ok], cand_lo_pos[ok], hi_pos[ok]
    start = row_ptr[cand_row]
    local = np.stack([cand_lo_pos - start, hi_pos - start])
    pair_counts = np.bincount(cand_row, minlength=b)
    cols_t = torch.from_numpy(cols)
    x_sub = x.detach()[cols_t.to(x.device)].cpu()
    out = ComputationGraphs(
        x_sub,
        torch.from_numpy(local),
        torch.from_numpy(np.diff(row_ptr)),
        torch.from_numpy(pair_counts),
        torch.from_numpy(target_pos),
        cols_t,
        torch.from_numpy(cand),
        st.edge_pair,
        st.num_pairs,
        labels,
        nodes_np.tolist(),
        None if pair_attr is None else pair_attr[torch.from_numpy(cand)],
    )
    out.hops = torch.from_numpy(hops)
    out.structure = st
    return out


def graph_computation_graphs(
    x: Tensor,
    edge_index: Tensor,
    batch: Optional[Tensor] = None,
    labels: Optional[Sequence[Union[int, float]]] = None,
    indices: Optional[Sequence[int]] = None,
    edge_tensors: Optional[dict[str, Tensor]] = None,
    edge_inputs: Optional[EdgeInputs] = None,
) -> ComputationGraphs:
    """Every graph of a (possibly batched) graph as one instance, with the way back to its edges
    (and, with ``edge_inputs``, the model's per-edge ``edge_tensors`` as per-pair rows)."""
    n = int(x.size(0))
    bvec = (
        np.zeros(n, dtype=np.int64)
        if batch is None
        else batch.detach().cpu().numpy().astype(np.int64, copy=False)
    )
    if bvec.size != n:
        raise ValueError(f"batch has {bvec.size} entries for {n} nodes")
    if n and bvec.min() < 0:
        raise ValueError("batch holds negative graph ids")
    num_graphs = int(bvec.max()) + 1 if n else 0
    lo, hi, edge_pair = _global_pairs(edge_index, n)
    if lo.size and bool((bvec[lo] != bvec[hi]).any()):
        raise ValueError("edge_index joins nodes of different graphs of `batch`")
    node_order, pair_order = _graph_orders(bvec, lo, hi)
    node_counts = np.bincount(bvec, minlength=num_graphs)
    local_of = np.empty(n, dtype=np.int64)
    local_of[node_order] = np_segment_arange(node_counts)
    pair_counts = np.bincount(bvec[lo], minlength=num_graphs)
    local = np.stack([local_of[lo[pair_order]], local_of[hi[pair_order]]])
    order_t = torch.from_numpy(node_order)
    x_sorted = x.detach()[order_t.to(x.device)].cpu()
    return ComputationGraphs(
        x_sorted,
        torch.from_numpy(local),
        torch.from_numpy(node_counts),
        torch.from_numpy(pair_counts),
        None,
        order_t,
        torch.from_numpy(pair_order),
        torch.from_numpy(edge_pair),
        int(lo.size),
        labels,
        list(range(num_graphs)) if indices is None else indices,
        None
        if edge_inputs is None
        else edge_inputs.pair_rows(edge_tensors or {}, torch.from_numpy(edge_pair), int(lo.size))[
            torch.from_numpy(pair_order)
        ],
    )


def _graph_orders(
    bvec: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The nodes in (graph, id) order and the sorted pairs ``(lo, hi)`` in (graph, lo, hi)
    order. A batch whose graphs hold consecutive node ids (PyG's, and one graph alone) is in
    that order already: no sort then."""
    if bvec.size < 2 or bool((bvec[1:] >= bvec[:-1]).all()):
        return np.arange(bvec.size, dtype=np.int64), np.arange(lo.size, dtype=np.int64)
    return np.lexsort((np.arange(bvec.size), bvec)), np.lexsort((hi, lo, bvec[lo]))


def _label(value: Any) -> Union[int, float]:
    """A label as given: a float stays a float (a regression value), the rest is a class."""
    if isinstance(value, float) or (isinstance(value, Tensor) and value.is_floating_point()):
        return float(value)
    return int(value)


def _first_column(row: Tensor) -> int:
    """The default label reader: a class, the first entry of a label row."""
    return int(row.reshape(-1)[0])


def _label_rows(y: Any) -> Tensor:
    """Labels as ``[rows, columns]`` (one column per task; a flat tensor has one column)."""
    t = torch.as_tensor(y)
    return t.reshape(1, 1) if t.dim() == 0 else t.reshape(t.size(0), -1)


def node_fit_instances(
    data: Any,
    index,
    hops: int,
    target: Optional[Tensor],
    phenomenon: bool,
    edge_inputs: Optional[EdgeInputs] = None,
    read_label: Callable[[Tensor], Union[int, float]] = _first_column,
) -> tuple[list[Instance], torch.device]:
    """Node level: the training nodes' computation graphs (labels only for ``phenomenon``, each
    row of ``y`` read by ``read_label``; with ``edge_inputs``, the model's per-edge tensors of
    ``data`` cut along) and the device of the user's data."""
    if not isinstance(data, Data):
        what = (
            f"a list of {len(data)} graphs"
            if isinstance(data, (list, tuple))
            else type(data).__name__
        )
        raise ValueError(
            f"task_level='node': fit expects one Data object (x, edge_index) and the training "
            f"node indices, fit(model, data, index=train_nodes); got {what}. For graph "
            f"classification use model_config task_level='graph'."
        )
    if data.x is None or data.edge_index is None:
        raise ValueError("fit needs data.x and data.edge_index")
    n = int(data.x.size(0))
    nodes = as_node_list(index, n)
    if not nodes:
        raise ValueError("fit needs at least one training node (index is empty)")
    labels = None
    if phenomenon:
        y = target if target is not None else getattr(data, "y", None)
        if y is None:
            raise ValueError(
                "'phenomenon' explanations are fitted against labels: give "
                "data.y or fit(..., target=labels)"
            )
        rows = _label_rows(y)
        if rows.size(0) == n:
            labels = [read_label(rows[i]) for i in nodes]
        elif rows.size(0) == len(nodes):
            labels = [read_label(row) for row in rows]
        else:
            raise ValueError(
                f"target has {rows.size(0)} rows: need one per node ({n}) or "
                f"one per index entry ({len(nodes)})"
            )
    warn_if_directed(data.edge_index, n)
    st = GraphStructure(data.edge_index, n)
    pair_attr = None
    if edge_inputs is not None:
        tensors = {name: getattr(data, name) for name in edge_inputs.names}
        pair_attr = edge_inputs.pair_rows(tensors, st.edge_pair, st.num_pairs)
    graphs = node_computation_graphs(
        data.x, data.edge_index, nodes, hops, labels, structure=st, pair_attr=pair_attr
    )
    return graphs.instances, data.x.device


def graph_fit_instances(
    data: Any,
    index,
    target: Optional[Tensor],
    phenomenon: bool,
    edge_inputs: Optional[EdgeInputs] = None,
    read_label: Callable[[Tensor], Union[int, float]] = _first_column,
) -> tuple[list[Instance], torch.device]:
    """Graph level: every training graph as one instance (labels only for ``phenomenon``, each
    graph's row of labels read by ``read_label``; with ``edge_inputs``, each graph's per-edge
    tensors along) and the device of the user's data."""
    if isinstance(data, Data):
        raise ValueError(
            "task_level='graph': fit expects a list or Dataset of graphs (one Data each), "
            "fit(model, graphs); got a single Data object. Wrap one graph as [data]; for node "
            "classification use model_config task_level='node'."
        )
    if index is not None:
        raise ValueError(
            "task_level='graph': fit takes no index (pass the training graphs "
            "themselves, e.g. dataset[train_idx])"
        )
    graphs = list(data)
    if not graphs:
        raise ValueError("fit needs at least one graph: got an empty list")
    labels_t = None
    if phenomenon:
        if target is not None:
            labels_t = _label_rows(target)
            if labels_t.size(0) != len(graphs):
                raise ValueError(f"target has {labels_t.size(0)} rows for {len(graphs)} graphs")
        elif any(getattr(g, "y", None) is None for g in graphs):
            raise ValueError(
                "'phenomenon' explanations are fitted against labels: every graph "
                "needs y, or pass fit(..., target=labels)"
            )
    instances = []
    for i, g in enumerate(graphs):
        if not isinstance(g, Data) or g.x is None or g.edge_index is None:
            raise ValueError(f"graph {i} is not a Data object with x and edge_index")
        label: Union[int, float] = -1
        if phenomenon:
            label = read_label(labels_t[i] if labels_t is not None else torch.as_tensor(g.y))
        if i < 100:  # a sample is enough to notice a directed dataset
            warn_if_directed(g.edge_index, int(g.x.size(0)))
        tensors: Optional[dict[str, Tensor]] = None
        if edge_inputs is not None:
            # a graph without one of them has fewer edge inputs: check_same refuses it
            tensors = {
                name: value
                for name in edge_inputs.names
                if (value := getattr(g, name, None)) is not None
            }
            edge_inputs.check_same(EdgeInputs.of(tensors, int(g.edge_index.size(1))))
        inst = graph_computation_graphs(
            g.x, g.edge_index, None, [label], [i], edge_tensors=tensors, edge_inputs=edge_inputs
        ).instances[0]
        instances.append(inst)
    return instances, graphs[0].x.device


def warn_if_directed(edge_index: Tensor, num_nodes: int) -> None:
    from torch_geometric.utils import is_undirected

    if edge_index.numel() and not is_undirected(edge_index, num_nodes=num_nodes):
        warnings.warn(
            "edge_index is not symmetric: Gem treats graphs as undirected, so the model is "
            "distilled on the symmetrised graph (both directions of every edge); explanations of "
            "a directed model may be off. Use torch_geometric.utils.to_undirected if that is "
            "what the model expects.",
            stacklevel=3,
        )


def as_node_list(index: Any, n: int) -> list[int]:
    """Node ids from an int, a sequence, an index tensor or a boolean mask (None: all)."""
    if index is None:
        return list(range(n))
    t = torch.as_tensor(index).detach().cpu()
    if t.dtype == torch.bool:
        if t.numel() != n:
            raise ValueError(f"a boolean index needs {n} entries, got {t.numel()}")
        return torch.nonzero(t).view(-1).tolist()
    ids = t.view(-1).long()
    if ids.numel() and (int(ids.min()) < -n or int(ids.max()) >= n):
        raise ValueError(f"index out of range for {n} entries")
    return [int(i) % n for i in ids.tolist()]
