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
engine :class:`~gem_core.models.targets.BlackBox`, cuts the computation graphs (the ``num_hops``-hop
subgraph of every training node, or every whole graph), distils them with
:func:`gem_core.gem.distill.distill` (against the model's own prediction for ``"model"``
explanations, the data's ``y`` or a given ``target`` for ``"phenomenon"``), derives the training
targets with :func:`gem_core.gem.training_targets.explainer_targets` and fits the engine's graph
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
(``probs``). Regression and node-feature masks are not supported.
"""
from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Sequence
from typing import Any, Optional, Union

import numpy as np
import torch
from scipy.sparse import csr_matrix
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.explain import Explanation
from torch_geometric.explain.algorithm import ExplainerAlgorithm
from torch_geometric.explain.config import (
    ExplainerConfig, ExplanationType, MaskType, ModelConfig, ModelMode, ModelReturnType,
    ModelTaskLevel,
)

from gem_core.data.config import DatasetSpec
from gem_core.runtime.device import resolve_device
from gem_core.gem.distill import (DEFAULT_TOPK_POLICY, Distillation, distill, np_segment_arange,
                                  segment_arange)
from gem_core.gem.autoencoder import GemAutoEncoder, NotFittedError, PreparedInstances
from gem_core.gem.training_targets import TARGET_KINDS, explainer_targets
from gem_core.data.instances import Instance, InstanceBatch
from gem_core.gem.labeling import PackedGraphs, hop_columns
from gem_core.runtime.progress import ProgressFn, report, scaled

__all__ = ["GemExplainer", "PyGBlackBox", "NotFittedError", "topk_config", "count_hops",
           "ComputationGraphs", "node_computation_graphs", "graph_computation_graphs",
           "distinct_scores"]

PROB_FLOOR = 1e-12  # probabilities are clipped to [1e-12, 1] before the log
MIN_SCORE = 1e-30   # smallest in-graph score, so a thresholded mask keeps every selected edge
DENSE_LOOKUP_LIMIT = 4_000_000  # (explained nodes × graph nodes) up to which lookups use a table


def topk_config(k: int) -> dict[str, Any]:
    """PyG ``threshold_config`` keeping the ``k`` best *undirected* edges of a symmetric graph."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    return dict(threshold_type="topk", value=2 * k)


def count_hops(model: nn.Module) -> int:
    """Number of ``MessagePassing`` submodules of ``model`` (module structure only, no weights)."""
    return ExplainerAlgorithm._num_hops(model)


# ----------------------------------------------------------------------------- the black box

def _logits(out: Tensor, mode: ModelMode, return_type: ModelReturnType) -> Tensor:
    """Model outputs as logits whose softmax is the model's class distribution."""
    out = out.float()
    if mode == ModelMode.binary_classification:
        if out.dim() > 1 and out.size(-1) != 1:
            raise ValueError(
                "binary_classification expects one output column per prediction (the logit or "
                f"probability of class 1), got outputs of shape {tuple(out.shape)}; use "
                "mode='multiclass_classification' for two-column outputs")
        z = out.reshape(-1, 1)
        if return_type == ModelReturnType.probs:
            p = z.clamp(PROB_FLOOR, 1.0 - PROB_FLOOR)
            return torch.cat([torch.log1p(-p), torch.log(p)], dim=-1)
        return torch.cat([torch.zeros_like(z), z], dim=-1)
    if out.dim() != 2:
        raise ValueError(f"a classification model must return [rows, classes], got {tuple(out.shape)}")
    if return_type == ModelReturnType.probs:
        return torch.log(out.clamp_min(PROB_FLOOR))
    return out  # raw logits, or log-probabilities (log_softmax is the identity on them)


class PyGBlackBox:
    """A PyG model seen only through its outputs: ``InstanceBatch -> logits [instances, C]``.

    Node level: ``model(x, edge_index, **kwargs)`` read at the target rows. Graph level:
    ``model(x, edge_index, batch=batch, **kwargs)``, one row per graph. Outputs are converted to
    cross-entropy-compatible logits (see the module docstring).

    Args:
        model: any ``nn.Module`` with PyG's ``forward(x, edge_index, ...)`` convention.
        task: ``"node"`` or ``"graph"``.
        mode, return_type: from the explainer's model config.
        device: where batches are evaluated (the device of the user's data).
        model_kwargs: extra non-tensor keyword arguments passed on every call.
    """

    def __init__(self, model: nn.Module, task: str, mode: Union[ModelMode, str],
                 return_type: Union[ModelReturnType, str], device: Union[str, torch.device] = "cpu",
                 model_kwargs: Optional[dict[str, Any]] = None):
        self.model = model
        self.task = task
        self.mode = ModelMode(mode)
        self.return_type = ModelReturnType(return_type)
        self.device = torch.device(device)
        self.kwargs = dict(model_kwargs or {})
        self.num_classes = 0  # set by the first call

    @torch.no_grad()
    def __call__(self, batch: InstanceBatch) -> Tensor:
        b = batch.to(self.device)
        if self.task == "node":
            out = self.model(b.x, b.edge_index, **self.kwargs)
            if out.size(0) != b.x.size(0):
                raise ValueError(f"a node-level model must return one row per node: got "
                                 f"{out.size(0)} rows for {b.x.size(0)} nodes")
            out = out[b.target_index]
        else:
            out = self.model(b.x, b.edge_index, batch=b.batch, **self.kwargs)
            if out.size(0) != b.num_instances:
                raise ValueError(
                    f"a graph-level model must return one row per graph of `batch`: got "
                    f"{out.size(0)} rows for {b.num_instances} graphs")
        logits = _logits(out, self.mode, self.return_type)
        self.num_classes = int(logits.size(-1))
        return logits


# ----------------------------------------------------------------------------- computation graphs

class ComputationGraphs:
    """Many computation graphs cut out of one user graph, stored flat, with the way back to its edges.

    Instance ``i`` owns nodes ``node_ptr[i]:node_ptr[i+1]`` and pairs ``pair_ptr[i]:pair_ptr[i+1]``
    of the flat tensors; nodes are in increasing id of the user's graph, pairs sorted (the order
    of :func:`gem_core.data.instances.node_instance` / ``to_pairs``).

    Attributes:
        x: node features of all instances, stacked ``[Nn, d]`` (CPU).
        local_pairs: pairs ``[2, Q]`` in each instance's own node numbering (``u < v``).
        node_ptr, pair_ptr: segment pointers ``[B + 1]``.
        targets: position of each instance's target node in its own numbering, or None (graphs).
        node_ids: node id in the user's graph of every stacked node ``[Nn]``.
        pair_ids: id of every stacked pair among the user's distinct pairs ``[Q]``.
        edge_pair: pair id of every directed edge of the user's ``edge_index`` (-1: self-loop).
        num_pairs: number of distinct undirected pairs of the user's graph.
        labels, indices: per instance, the label (-1: none) and the node / graph id.
        hops: node level, the hop distance of every stacked node to its instance's target.
        structure: the :class:`GraphStructure` of the user's graph, when built.
    """

    def __init__(self, x: Tensor, local_pairs: Tensor, node_ptr: Tensor, pair_ptr: Tensor,
                 targets: Optional[Tensor], node_ids: Tensor, pair_ids: Tensor, edge_pair: Tensor,
                 num_pairs: int, labels: Optional[Sequence[int]], indices: Sequence[int]):
        self.x, self.local_pairs = x, local_pairs
        self.node_ptr, self.pair_ptr, self.targets = node_ptr, pair_ptr, targets
        self.node_ids, self.pair_ids, self.edge_pair = node_ids, pair_ids, edge_pair
        self.num_pairs = int(num_pairs)
        self.labels = [-1] * len(indices) if labels is None else [int(v) for v in labels]
        self.indices = [int(v) for v in indices]
        self.hops: Optional[Tensor] = None  # node level: hop distance of every stacked node
        self.structure: Optional[GraphStructure] = None
        self._instances: Optional[list[Instance]] = None

    def __len__(self) -> int:
        return int(self.node_ptr.numel()) - 1

    @property
    def pair_owner(self) -> Tensor:
        """Instance of every stacked pair ``[Q]``."""
        return torch.repeat_interleave(torch.arange(len(self)), self.pair_ptr[1:] - self.pair_ptr[:-1])

    @property
    def instances(self) -> list[Instance]:
        """One engine :class:`~gem_core.data.instances.Instance` per computation graph."""
        if self._instances is None:
            out = []
            nptr, pptr = self.node_ptr.tolist(), self.pair_ptr.tolist()
            for i in range(len(self)):
                out.append(Instance(
                    x=self.x[nptr[i]:nptr[i + 1]], pairs=self.local_pairs[:, pptr[i]:pptr[i + 1]],
                    y=self.labels[i], target=None if self.targets is None else int(self.targets[i]),
                    index=self.indices[i],
                    node_ids=self.node_ids[nptr[i]:nptr[i + 1]] if self.targets is not None else None))
            self._instances = out
        return self._instances

    def packed(self) -> PackedGraphs:
        """All computation graphs as one disconnected graph (what Gem's auto-encoder reads)."""
        shift = torch.repeat_interleave(self.node_ptr[:-1], self.pair_ptr[1:] - self.pair_ptr[:-1])
        targets = None if self.targets is None else self.node_ptr[:-1] + self.targets
        return PackedGraphs(self.x.float(), self.local_pairs + shift, self.node_ptr, self.pair_ptr,
                            targets)


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
        self.adj = csr_matrix((np.ones(2 * q, dtype=np.float32),
                               (np.concatenate([self.lo, self.hi]), np.concatenate([self.hi, self.lo]))),
                              shape=(n, n))
        self.lo_ptr = np.searchsorted(self.lo, np.arange(n + 1))
        self.edge_order = torch.argsort(self.edge_pair, stable=True)
        self.edge_ptr = torch.searchsorted(self.edge_pair[self.edge_order], torch.arange(q + 1))

    @property
    def num_pairs(self) -> int:
        return int(self.lo.size)


def _ptr(counts: np.ndarray) -> Tensor:
    return torch.from_numpy(np.concatenate([[0], np.cumsum(counts)]).astype(np.int64))


def node_computation_graphs(x: Tensor, edge_index: Tensor, nodes: Sequence[int], num_hops: int,
                            labels: Optional[Sequence[int]] = None,
                            structure: Optional[GraphStructure] = None) -> ComputationGraphs:
    """The ``num_hops``-hop computation graph of every node in ``nodes``, vectorised.

    The same subgraphs as ``k_hop_subgraph(node, num_hops, edge_index, relabel_nodes=True)`` on
    the symmetrised graph (all edges among the nodes within ``num_hops`` hops), relabelled in
    increasing node id, pairs sorted: the instances ``gem_core.data.instances.node_instance`` cuts.
    The hop distance of every node to its target comes along (``ComputationGraphs.hops``).
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
        x_sub, torch.from_numpy(local), torch.from_numpy(row_ptr), _ptr(pair_counts),
        torch.from_numpy(target_pos), cols_t, torch.from_numpy(cand), st.edge_pair,
        st.num_pairs, labels, nodes_np.tolist())
    out.hops = torch.from_numpy(hops)
    out.structure = st
    return out


def graph_computation_graphs(x: Tensor, edge_index: Tensor, batch: Optional[Tensor] = None,
                             labels: Optional[Sequence[int]] = None,
                             indices: Optional[Sequence[int]] = None) -> ComputationGraphs:
    """Every graph of a (possibly batched) graph as one instance, with the way back to its edges."""
    n = int(x.size(0))
    bvec = (np.zeros(n, dtype=np.int64) if batch is None
            else batch.detach().cpu().numpy().astype(np.int64, copy=False))
    if bvec.size != n:
        raise ValueError(f"batch has {bvec.size} entries for {n} nodes")
    if n and bvec.min() < 0:
        raise ValueError("batch holds negative graph ids")
    num_graphs = int(bvec.max()) + 1 if n else 0
    lo, hi, edge_pair = _global_pairs(edge_index, n)
    if lo.size and bool((bvec[lo] != bvec[hi]).any()):
        raise ValueError("edge_index joins nodes of different graphs of `batch`")
    node_order = np.lexsort((np.arange(n), bvec))
    node_counts = np.bincount(bvec, minlength=num_graphs)
    local_of = np.empty(n, dtype=np.int64)
    local_of[node_order] = np_segment_arange(node_counts)
    pair_order = np.lexsort((hi, lo, bvec[lo]))
    pair_counts = np.bincount(bvec[lo], minlength=num_graphs)
    local = np.stack([local_of[lo[pair_order]], local_of[hi[pair_order]]])
    order_t = torch.from_numpy(node_order)
    x_sorted = x.detach()[order_t.to(x.device)].cpu()
    return ComputationGraphs(
        x_sorted, torch.from_numpy(local), _ptr(node_counts), _ptr(pair_counts), None, order_t,
        torch.from_numpy(pair_order), torch.from_numpy(edge_pair), int(lo.size), labels,
        list(range(num_graphs)) if indices is None else indices)


def distinct_scores(scores: Tensor, segments: Optional[Tensor] = None) -> Tensor:
    """Positive float32 scores made pairwise distinct within each segment, order kept.

    Scores are ranked by (score descending, position ascending); a score tied with (or nudged
    onto) its predecessor is lowered by one unit in the last place, so the ranking is strict,
    ties go to the lower position, and values move by a few ulps at most. Scores are clipped to
    ``[MIN_SCORE, 1]`` first.
    """
    s = scores.detach().float().cpu().clamp(MIN_SCORE, 1.0).contiguous()
    if s.numel() <= 1:
        return s
    bits = s.view(torch.int32).numpy().astype(np.int64)  # positive floats: int order == float order
    seg = (np.zeros(s.numel(), dtype=np.int64) if segments is None
           else segments.detach().cpu().numpy().astype(np.int64))
    # one stable sort on (segment, descending score); equal keys keep their position order
    order = np.argsort((seg << 32) | ((1 << 31) - 1 - bits), kind="stable")
    sb, sseg = bits[order], seg[order]
    i = np.arange(s.numel(), dtype=np.int64)
    big = np.int64(1) << 33  # beyond any bits + position: isolates segments in the running minimum
    run = np.minimum.accumulate(sb + i - sseg * big) + sseg * big - i
    out = np.empty_like(bits)
    out[order] = np.maximum(run, 1)
    return torch.from_numpy(out.astype(np.int32).view(np.float32))


# ----------------------------------------------------------------------------- the explainer

class GemExplainer(ExplainerAlgorithm):
    r"""Gem (Lin et al., ICML 2021) as a PyG explainer algorithm, model-agnostic.

    Call :meth:`fit` once (through ``explainer.algorithm.fit``) before explaining. Hyperparameters
    only are set here.

    Args:
        epochs: maximum training epochs of the Gem auto-encoder (early stopping on a held-out
            part of the fit instances, ``patience`` epochs).
        k: explanation budget in *undirected* edges the distilled ground truth is cut to, or a
            sequence of budgets (Gem then learns the ranking shared by all of them: its target
            is the mean of the distilled top-K masks). PyG's ``topk`` counts directed edges: use
            ``threshold_config=topk_config(K)`` (``value=2*K``) on a symmetric ``edge_index``.
        num_hops: hops of a node's computation graph; default: the number of ``MessagePassing``
            modules of the model.
        connected: keep the distilled explanations connected (the component of the target node,
            or the largest component of a graph), as the paper does.
        target_kind: Gem's training target, one of :data:`gem_core.gem.training_targets.TARGET_KINDS`;
            default ``"mix"`` for node level (the mean of the distilled top-K masks over ``k``,
            averaged with the normalised distilled weights; on BA-Community's validation nodes it
            beat ``"graded"`` and ``"graded+add"`` in accuracy and edge AUC), ``"graded"`` for
            graph level (the engine's choice for Mutagenicity and NCI1).
        lr: Adam learning rate of the auto-encoder (default 0.003 node level, 0.01 graph level).
        hidden: GCN widths of the auto-encoder (paper: 32, 32, 16).
        batch_size: instances per optimisation step.
        patience: early-stopping patience in epochs.
        val_fraction: share of the fit instances held out for early stopping (when at least 10).
        seed: seeds the split, the auto-encoder's initialisation and its training noise.
        device: where Gem runs (default: the device of the data given to :meth:`fit`).

    Attributes (after :meth:`fit`):
        gem_: the fitted :class:`gem_core.gem.autoencoder.GemAutoEncoder`.
        distillation_: the :class:`gem_core.gem.distill.Distillation` of the fit instances.
        num_hops_, num_classes_, task_level_, explanation_type_, fit_seconds_, distill_seconds_.
    """

    def __init__(self, epochs: int = 300, k: Union[int, Sequence[int]] = 6,
                 num_hops: Optional[int] = None, connected: bool = True,
                 target_kind: Optional[str] = None, lr: Optional[float] = None,
                 hidden: Sequence[int] = (32, 32, 16), batch_size: int = 32, patience: int = 30,
                 val_fraction: float = 0.1, seed: int = 0,
                 device: Union[str, torch.device, None] = None):
        super().__init__()
        self.epochs = int(epochs)
        self.k_grid = _k_grid(k)
        self.k = k
        if num_hops is not None and (isinstance(num_hops, bool) or int(num_hops) < 1):
            raise ValueError(f"num_hops must be a positive integer, got {num_hops!r}")
        self.num_hops = None if num_hops is None else int(num_hops)
        self.connected = bool(connected)
        if target_kind is not None and target_kind not in TARGET_KINDS:
            raise ValueError(f"target_kind must be one of {', '.join(TARGET_KINDS)}, "
                             f"got {target_kind!r}")
        self.target_kind = target_kind
        self.lr = lr
        self.hidden = tuple(int(h) for h in hidden)
        self.batch_size = int(batch_size)
        self.patience = int(patience)
        if not 0.0 <= float(val_fraction) < 1.0:
            raise ValueError(f"val_fraction must lie in [0, 1), got {val_fraction!r}")
        self.val_fraction = float(val_fraction)
        self.seed = int(seed)
        self.device = device

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(epochs={self.epochs}, k={self.k!r}, "
                f"num_hops={self.num_hops}, connected={self.connected})")

    # ------------------------------------------------------------------ configuration
    @staticmethod
    def _unsupported(explainer_config: ExplainerConfig, model_config: ModelConfig) -> Optional[str]:
        supported = ("Gem supports edge_mask_type='object', node_mask_type=None, "
                     "mode='multiclass_classification' or 'binary_classification', "
                     "task_level='node' or 'graph', explanation_type='model' or 'phenomenon'.")
        if explainer_config.node_mask_type is not None:
            return (f"Gem explains edges only: node_mask_type="
                    f"'{explainer_config.node_mask_type.value}' is not supported (use None). "
                    + supported)
        if explainer_config.edge_mask_type != MaskType.object:
            got = getattr(explainer_config.edge_mask_type, "value", None)
            return f"Gem needs edge_mask_type='object' (got {got!r}). " + supported
        if model_config.mode == ModelMode.regression:
            return "Gem explains classifiers: mode='regression' is not supported. " + supported
        if model_config.task_level not in (ModelTaskLevel.node, ModelTaskLevel.graph):
            return (f"Gem explains node or graph predictions: task_level="
                    f"'{model_config.task_level.value}' is not supported. " + supported)
        return None

    def supports(self) -> bool:
        """False (reason logged) for node masks, non-object edge masks, regression, edge level."""
        reason = self._unsupported(self.explainer_config, self.model_config)
        if reason is not None:
            logging.error(reason)
            return False
        return True

    def connect(self, explainer_config: ExplainerConfig, model_config: ModelConfig):
        """Connect to an ``Explainer``'s configs; unsupported settings raise a ``ValueError``
        that says what is supported."""
        reason = self._unsupported(ExplainerConfig.cast(explainer_config),
                                   ModelConfig.cast(model_config))
        if reason is not None:
            raise ValueError(reason)
        super().connect(explainer_config, model_config)

    def _require_connected(self) -> None:
        if not hasattr(self, "_explainer_config") or not hasattr(self, "_model_config"):
            raise ValueError(
                "GemExplainer is not connected to an Explainer yet: create "
                "Explainer(model, algorithm=GemExplainer(...), explanation_type=..., "
                "model_config=..., edge_mask_type='object') first, then call "
                "explainer.algorithm.fit(model, data, ...).")

    @property
    def task_level(self) -> str:
        return self.model_config.task_level.value

    # ------------------------------------------------------------------ fit
    def fit(self, model: nn.Module, data: Any, index: Optional[Union[int, Sequence[int], Tensor]] = None,
            *, target: Optional[Tensor] = None, progress: Optional[ProgressFn] = None,
            **kwargs: Any) -> "GemExplainer":
        """Distil the model's behaviour on the training instances and train Gem on it.

        Args:
            model: the model to explain; only called, ``model(x, edge_index[, batch=batch])``.
            data: node level: one ``Data`` (``x``, ``edge_index``); graph level: a list or
                ``Dataset`` of ``Data`` (one graph each).
            index: node level: the training nodes (ids or a boolean mask; default all nodes).
                Not used at graph level.
            target: ``"phenomenon"`` only: the labels to explain (node level: one per node of
                ``data`` or one per ``index`` entry; graph level: one per graph). Default: ``y``.
            progress: optional ``progress(fraction, message)`` callback (the engine convention).
            **kwargs: extra non-tensor keyword arguments for the model.
        Returns:
            self.
        """
        self._require_connected()
        for key, value in kwargs.items():
            if isinstance(value, Tensor):
                raise ValueError(
                    f"Gem distils the model on subgraphs, so tensor inputs besides x, edge_index "
                    f"(and batch at graph level) cannot be carried over: got {key}=<tensor>.")
        start = time.perf_counter()
        level = self.task_level
        phenomenon = self.explainer_config.explanation_type == ExplanationType.phenomenon
        hops = self.num_hops if self.num_hops is not None else count_hops(model)
        if level == "graph" and not _accepts_batch(model):
            raise ValueError(
                "graph-level models are called as model(x, edge_index, batch=batch), one output row "
                "per graph; this model's forward takes no `batch` argument")
        if level == "node" and hops < 1:
            raise ValueError(
                "could not find any MessagePassing layer in the model to count the hops of a "
                "node's computation graph: pass GemExplainer(num_hops=...)")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            if level == "node":
                instances, dev = self._node_fit_instances(data, index, hops, target, phenomenon)
            else:
                instances, dev = self._graph_fit_instances(data, index, target, phenomenon)
            black_box = PyGBlackBox(model, level, self.model_config.mode,
                                    self.model_config.return_type, dev, kwargs)
            gem_device = resolve_device(self.device if self.device is not None else dev)
            was_training = model.training
            model.eval()
            try:
                report(progress, 0.0, f"distilling {len(instances)} {level} instances")
                t0 = time.perf_counter()
                dist = distill(instances, black_box, connected=self.connected,
                               label_source="true" if phenomenon else "predicted",
                               device=dev, progress=scaled(progress, 0.0, 0.5))
                self.distill_seconds_ = time.perf_counter() - t0
                kind = self.target_kind or ("mix" if level == "node" else "graded")
                spec = DatasetSpec(
                    name="pyg", title="PyG model", task=level, num_classes=black_box.num_classes,
                    k_grid=self.k_grid, connected=self.connected, explainer_lr=self._lr(level),
                    explainer_target=kind, explainer_topk_policy=DEFAULT_TOPK_POLICY,
                    num_hops=max(hops, 1))
                train_ids, val_ids = self._split(len(instances))
                report(progress, 0.5, "training targets")
                train_dist = dist.subset(train_ids)
                train_inst = [instances[i] for i in train_ids]
                train_w = explainer_targets(train_dist, spec, kind, train_inst, black_box)
                val_inst, val_w = None, None
                if val_ids:
                    val_inst = [instances[i] for i in val_ids]
                    val_w = explainer_targets(dist.subset(val_ids), spec, kind, val_inst, black_box)
                report(progress, 0.6, "training Gem")
                gem = GemAutoEncoder(
                    lr=self._lr(level), hidden=self.hidden, batch_size=self.batch_size,
                    max_epochs=self.epochs, patience=self.patience, num_hops=max(hops, 1),
                    seed=self.seed, device=gem_device)
                gem.fit(train_inst, train_w, val_inst, val_w, progress=scaled(progress, 0.6, 1.0))
            finally:
                model.train(was_training)
        self.gem_ = gem
        self.distillation_: Distillation = dist
        self.num_hops_ = int(hops)
        self.num_classes_ = int(black_box.num_classes)
        self.num_features_ = int(instances[0].x.size(1))
        self.task_level_ = level
        self.explanation_type_ = self.explainer_config.explanation_type.value
        self.fit_seconds_ = time.perf_counter() - start
        report(progress, 1.0, f"Gem fitted on {len(instances)} instances")
        return self

    def _lr(self, level: str) -> float:
        return float(self.lr) if self.lr is not None else (0.003 if level == "node" else 0.01)

    def _split(self, n: int) -> tuple[list[int], list[int]]:
        n_val = int(round(self.val_fraction * n)) if n >= 10 else 0
        if n_val == 0:
            return list(range(n)), []
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(self.seed)).tolist()
        return sorted(perm[n_val:]), sorted(perm[:n_val])

    def _node_fit_instances(self, data: Any, index, hops: int, target: Optional[Tensor],
                            phenomenon: bool) -> tuple[list[Instance], torch.device]:
        if not isinstance(data, Data):
            what = (f"a list of {len(data)} graphs" if isinstance(data, (list, tuple))
                    else type(data).__name__)
            raise ValueError(
                f"task_level='node': fit expects one Data object (x, edge_index) and the training "
                f"node indices, fit(model, data, index=train_nodes); got {what}. For graph "
                f"classification use model_config task_level='graph'.")
        if data.x is None or data.edge_index is None:
            raise ValueError("fit needs data.x and data.edge_index")
        n = int(data.x.size(0))
        nodes = _as_node_list(index, n)
        if not nodes:
            raise ValueError("fit needs at least one training node (index is empty)")
        labels = None
        if phenomenon:
            y = target if target is not None else getattr(data, "y", None)
            if y is None:
                raise ValueError("'phenomenon' explanations are fitted against labels: give "
                                 "data.y or fit(..., target=labels)")
            y = torch.as_tensor(y).view(-1)
            if y.numel() == n:
                labels = [int(y[i]) for i in nodes]
            elif y.numel() == len(nodes):
                labels = [int(v) for v in y.tolist()]
            else:
                raise ValueError(f"target has {y.numel()} entries: need one per node ({n}) or "
                                 f"one per index entry ({len(nodes)})")
        _warn_if_directed(data.edge_index, n)
        graphs = node_computation_graphs(data.x, data.edge_index, nodes, hops, labels)
        return graphs.instances, data.x.device

    def _graph_fit_instances(self, data: Any, index, target: Optional[Tensor],
                             phenomenon: bool) -> tuple[list[Instance], torch.device]:
        if isinstance(data, Data):
            raise ValueError(
                "task_level='graph': fit expects a list or Dataset of graphs (one Data each), "
                "fit(model, graphs); got a single Data object. Wrap one graph as [data]; for node "
                "classification use model_config task_level='node'.")
        if index is not None:
            raise ValueError("task_level='graph': fit takes no index (pass the training graphs "
                             "themselves, e.g. dataset[train_idx])")
        graphs = list(data)
        if not graphs:
            raise ValueError("fit needs at least one graph: got an empty list")
        labels_t = None
        if phenomenon:
            if target is not None:
                labels_t = torch.as_tensor(target).view(-1)
                if labels_t.numel() != len(graphs):
                    raise ValueError(f"target has {labels_t.numel()} entries for {len(graphs)} graphs")
            elif any(getattr(g, "y", None) is None for g in graphs):
                raise ValueError("'phenomenon' explanations are fitted against labels: every graph "
                                 "needs y, or pass fit(..., target=labels)")
        instances = []
        for i, g in enumerate(graphs):
            if not isinstance(g, Data) or g.x is None or g.edge_index is None:
                raise ValueError(f"graph {i} is not a Data object with x and edge_index")
            label = -1
            if phenomenon:
                label = (int(labels_t[i]) if labels_t is not None
                         else int(torch.as_tensor(g.y).view(-1)[0]))
            if i < 100:  # a sample is enough to notice a directed dataset
                _warn_if_directed(g.edge_index, int(g.x.size(0)))
            inst = graph_computation_graphs(g.x, g.edge_index, None, [label], [i]).instances[0]
            instances.append(inst)
        return instances, graphs[0].x.device

    # ------------------------------------------------------------------ explain
    def _check_fitted(self) -> None:
        if not hasattr(self, "gem_"):
            raise NotFittedError(
                "GemExplainer is not fitted yet: call explainer.algorithm.fit(model, data, "
                "index=train_nodes) (node level) or explainer.algorithm.fit(model, graphs) (graph "
                "level) before explaining.")

    def forward(self, model: nn.Module, x: Tensor, edge_index: Tensor, *, target: Tensor,
                index: Optional[Union[int, Tensor]] = None, **kwargs: Any) -> Explanation:
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
            raise ValueError(f"this GemExplainer was fitted for task_level='{self.task_level_}', "
                             f"the Explainer asks for '{level}'")
        if x.size(1) != self.num_features_:
            raise ValueError(f"x has {x.size(1)} node features, Gem was fitted with "
                             f"{self.num_features_}")
        if level == "node":
            if index is None:
                raise ValueError("node-level explanations need the node(s) to explain: index=...")
            nodes = _as_node_list(index, int(x.size(0)))
            graphs = node_computation_graphs(x, edge_index, nodes, self.num_hops_,
                                             structure=self._structure(edge_index, int(x.size(0))))
            keep = None
        else:
            graphs = graph_computation_graphs(x, edge_index, kwargs.get("batch"))
            keep = None if index is None else _as_node_list(index, len(graphs))
        scores = self._scores(graphs)
        edge_mask, per_node = self._edge_masks(graphs, scores, keep, x.device,
                                               per_node=level == "node" and len(graphs) > 1)
        out = Explanation(edge_mask=edge_mask)
        if per_node is not None:
            out.edge_masks = per_node
        return out

    def _structure(self, edge_index: Tensor, num_nodes: int) -> GraphStructure:
        """The :class:`GraphStructure` of ``edge_index``, reused while the same tensor, unchanged
        (same object, same in-place version counter), is explained again."""
        cached = self.__dict__.get("_structure_cache")
        if (cached is not None and cached[0] is edge_index and cached[1] == edge_index._version
                and cached[2].num_nodes == num_nodes):
            return cached[2]
        structure = GraphStructure(edge_index, num_nodes)
        self.__dict__["_structure_cache"] = (edge_index, edge_index._version, structure)
        return structure

    def _scores(self, graphs: ComputationGraphs) -> Tensor:
        """Gem's score of every stacked pair, all computation graphs in one forward pass."""
        if len(graphs) == 0 or graphs.local_pairs.size(1) == 0:
            return torch.zeros(graphs.local_pairs.size(1))
        packed = graphs.packed()
        gem = self.gem_
        gem._check_compatible(packed)
        # the packed input side of gem.explain(instances), built without per-instance objects;
        # node level: the hop-distance labels come from the BFS that cut the computation graphs
        if graphs.hops is not None:
            columns = hop_columns(graphs.hops, gem.num_hops).unsqueeze(1)
        else:
            columns = gem._label_columns(packed)
        prepared = PreparedInstances(packed, columns)
        return torch.cat(list(gem.explain(prepared))).float()

    @staticmethod
    def _edge_masks(graphs: ComputationGraphs, scores: Tensor, keep: Optional[list[int]],
                    device: torch.device, per_node: bool) -> tuple[Tensor, Optional[Tensor]]:
        """Pair scores written to the user's directed edges: the joint mask (max over the
        instances, or over the instances in ``keep``) and, on request, one row per instance."""
        owner, ids = graphs.pair_owner, graphs.pair_ids
        pair_score = torch.zeros(graphs.num_pairs + 1)  # last slot: self-loops (edge_pair -1)
        sel = torch.ones(ids.numel(), dtype=torch.bool) if keep is None else torch.isin(
            owner, torch.tensor(keep, dtype=torch.long))
        if bool(sel.any()):
            pair_score.scatter_reduce_(0, ids[sel], scores[sel], reduce="amax", include_self=True)
            covered = torch.zeros(graphs.num_pairs + 1, dtype=torch.bool)
            covered[ids[sel]] = True
            pair_score[covered] = distinct_scores(pair_score[covered])
        edge_mask = pair_score[graphs.edge_pair].to(device)
        per = None
        if per_node:
            # one sparse row per instance: its pair scores written to the pairs' directed edges
            st = graphs.structure
            num_edges = int(graphs.edge_pair.numel())
            counts = st.edge_ptr[ids + 1] - st.edge_ptr[ids]
            starts = torch.repeat_interleave(st.edge_ptr[ids], counts)
            edges = st.edge_order[starts + segment_arange(counts)]
            rows = torch.repeat_interleave(owner, counts)
            values = torch.repeat_interleave(distinct_scores(scores, owner), counts)
            # every (row, edge) entry occurs once; left uncoalesced (no sort): .coalesce() sorts
            per = torch.sparse_coo_tensor(torch.stack([rows, edges]), values,
                                          (len(graphs), num_edges), check_invariants=False).to(device)
        return edge_mask, per


def _accepts_batch(model: nn.Module) -> bool:
    import inspect

    try:
        params = inspect.signature(model.forward).parameters.values()
    except (TypeError, ValueError):  # no introspectable signature: let the call decide
        return True
    return any(p.name == "batch" or p.kind == p.VAR_KEYWORD for p in params)


def _warn_if_directed(edge_index: Tensor, num_nodes: int) -> None:
    from torch_geometric.utils import is_undirected

    if edge_index.numel() and not is_undirected(edge_index, num_nodes=num_nodes):
        warnings.warn(
            "edge_index is not symmetric: Gem treats graphs as undirected, so the model is "
            "distilled on the symmetrised graph (both directions of every edge); explanations of "
            "a directed model may be off. Use torch_geometric.utils.to_undirected if that is "
            "what the model expects.", stacklevel=3)


def _k_grid(k: Union[int, Sequence[int]]) -> tuple[int, ...]:
    values = [k] if isinstance(k, (int, np.integer)) and not isinstance(k, bool) else list(k)
    if not values:
        raise ValueError("k must be a positive integer or a non-empty sequence of them")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= int(v) <= 1000:
            raise ValueError(f"k must be a positive integer (at most 1000), got {v!r}")
    return tuple(sorted({int(v) for v in values}))


def _as_node_list(index: Any, n: int) -> list[int]:
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
