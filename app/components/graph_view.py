"""The picture of a computation graph with an explanation: nodes, edges, colours, labels.

The model only (no drawing library): :class:`GraphPicture` says what is drawn and in which
style (:func:`edge_style`); :mod:`components.graph_pyvis` draws it interactively (pyvis and the
live vis-network view) and :mod:`components.graph_static` as SVG or PNG. Every panel of one
instance shares one layout (:func:`layout`), so the original graph and the explanations of
several methods can be compared side by side.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Optional, Sequence

import networkx as nx
import numpy as np

# Categorical palette for node classes / atom types (colour-blind friendly first).
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac", "#86bcb6", "#d37295", "#8cd17d", "#b6992d",
           "#499894", "#fabfd2", "#a0cbe8", "#ffbe7d", "#f1ce63", "#d4a6c8")
FADED_EDGE = "rgba(150,150,150,0.28)"
PLAIN_EDGE = "#8a8f98"
MOTIF_EDGE = "#2b2b2b"
FOCUS_EDGE = "#ff7f0e"
# What-if edits: deleted edges stay drawn, dashed, where they were; deleted nodes are hollow.
DELETED_EDGE = "#e377c2"
DELETED_NODE = "#ffffff"
DASH = (6, 5)


def palette(i: int) -> str:
    return PALETTE[int(i) % len(PALETTE)]


@dataclass
class GraphPicture:
    """Everything needed to draw one panel.

    Attributes:
        positions: ``[n, 2]`` node coordinates in [0, 1] (shared by all panels of an instance).
        pairs: undirected edges ``(u, v)`` as local node indices.
        node_labels: short text on each node.
        node_colors: fill colour of each node.
        node_titles: hover text of each node (plain text; escaped when drawn).
        target: local index of the explained node, or None.
        selected: per pair, whether it belongs to the explanation (None = plain graph).
        scores: per pair importance (sets the width of selected edges).
        accent: colour of the explanation edges.
        emphasis: per pair, drawn dark in the plain graph (e.g. ground-truth motif edges).
        legend: ``(text, colour, kind)`` entries, kind ``node`` / ``edge`` / ``target`` /
            ``deleted`` (a dashed edge) / ``hollow`` (a deleted node).
        removed: per pair, deleted by a what-if edit (drawn dashed in :data:`DELETED_EDGE`).
        removed_nodes: per node, deleted by a what-if edit (drawn hollow, dashed border).
    """

    positions: np.ndarray
    pairs: list[tuple[int, int]]
    node_labels: list[str]
    node_colors: list[str]
    node_titles: list[str]
    target: Optional[int] = None
    selected: Optional[list[bool]] = None
    scores: Optional[list[float]] = None
    accent: str = "#d62728"
    emphasis: Optional[list[bool]] = None
    legend: list[tuple[str, str, str]] = field(default_factory=list)
    focus: Optional[int] = None  # one pair drawn in FOCUS_EDGE (the edge being tried)
    removed: Optional[list[bool]] = None
    removed_nodes: Optional[list[bool]] = None

    @property
    def num_nodes(self) -> int:
        return len(self.node_labels)

    def restricted(self, keep: Sequence[int]) -> "GraphPicture":
        """The picture of the nodes ``keep`` only (and the edges between them), laid out to fill
        the frame: a readable close-up of a large computation graph."""
        keep = sorted({int(i) for i in keep})
        new = {old: i for i, old in enumerate(keep)}
        edges = [j for j, (u, v) in enumerate(self.pairs) if u in new and v in new]
        # laid out anew: a cut of the whole graph's spring layout crowds its nodes (BA-shapes
        # house nodes drawn on top of each other); the cut alone is small enough for
        # Kamada-Kawai, and every panel of the instance gets the same positions
        pos = _layout_cached(len(keep), tuple((new[self.pairs[j][0]], new[self.pairs[j][1]])
                                              for j in edges))

        def pick(values):
            return None if values is None else [values[j] for j in edges]

        return GraphPicture(
            pos, [(new[self.pairs[j][0]], new[self.pairs[j][1]]) for j in edges],
            [self.node_labels[i] for i in keep], [self.node_colors[i] for i in keep],
            [self.node_titles[i] for i in keep],
            None if self.target is None else new.get(self.target),
            pick(self.selected), pick(self.scores), self.accent, pick(self.emphasis),
            list(self.legend), None if self.focus is None else
            (edges.index(self.focus) if self.focus in edges else None),
            pick(self.removed),
            None if self.removed_nodes is None else [self.removed_nodes[i] for i in keep])

    def with_explanation(self, selected: Sequence[bool], scores: Sequence[float],
                         accent: str) -> "GraphPicture":
        legend = [e for e in self.legend if e[2] != "edge"]
        legend += [("explanation edge (width = score)", accent, "edge"),
                   ("other edge", FADED_EDGE, "edge")]
        return GraphPicture(self.positions, self.pairs, self.node_labels, self.node_colors,
                            self.node_titles, self.target, [bool(s) for s in selected],
                            [float(s) for s in scores], accent, None, legend,
                            removed=self.removed, removed_nodes=self.removed_nodes)

    def with_deletions(self, removed: Sequence[bool],
                       removed_nodes: Optional[Sequence[bool]] = None) -> "GraphPicture":
        """The same picture with a what-if edit marked: deleted edges dashed in
        :data:`DELETED_EDGE` (never part of an explanation), deleted nodes hollow."""
        removed = [bool(r) for r in removed]
        gone = None if removed_nodes is None or not any(removed_nodes) else [
            bool(r) for r in removed_nodes]
        legend = [e for e in self.legend if e[2] not in ("deleted", "hollow")]
        if any(removed):
            legend.append(("deleted edge", DELETED_EDGE, "deleted"))
        if gone:
            legend.append(("deleted node", DELETED_EDGE, "hollow"))
        selected = None if self.selected is None else [
            s and not r for s, r in zip(self.selected, removed)]
        return GraphPicture(self.positions, self.pairs, self.node_labels, self.node_colors,
                            self.node_titles, self.target, selected, self.scores, self.accent,
                            self.emphasis, legend, self.focus, removed, gone)

    def is_removed(self, j: int) -> bool:
        return self.removed is not None and bool(self.removed[j])

    def node_removed(self, i: int) -> bool:
        return self.removed_nodes is not None and bool(self.removed_nodes[i])


# ----------------------------------------------------------------------------- layout

@functools.lru_cache(maxsize=64)
def _layout_cached(num_nodes: int, pairs: tuple[tuple[int, int], ...]) -> np.ndarray:
    return layout(num_nodes, pairs)


def layout(num_nodes: int, pairs: Sequence[tuple[int, int]], seed: int = 0) -> np.ndarray:
    """Deterministic 2-D positions in [0, 1]² (Kamada-Kawai up to 50 nodes, spring otherwise)."""
    g = nx.Graph()
    g.add_nodes_from(range(num_nodes))
    g.add_edges_from((int(u), int(v)) for u, v in pairs)
    if num_nodes == 0:
        return np.zeros((0, 2))
    if num_nodes == 1:
        return np.full((1, 2), 0.5)
    if num_nodes <= 50 and nx.is_connected(g):
        pos = nx.kamada_kawai_layout(g)
    else:  # from a spectral start 60 spring steps suffice (0.2 s for 217 nodes, not 0.7 s)
        init = nx.spectral_layout(g) if num_nodes > 2 else None
        pos = nx.spring_layout(g, pos=init, seed=seed, iterations=60)
    arr = np.array([pos[i] for i in range(num_nodes)], dtype=float)
    lo, hi = arr.min(0), arr.max(0)
    span = np.where(hi - lo > 1e-9, hi - lo, 1.0)
    return (arr - lo) / span


def edge_style(pic: GraphPicture, j: int) -> tuple[str, float, bool]:
    """(colour, width, on_top) of pair ``j``: the style every renderer draws it in."""
    if pic.is_removed(j):
        return DELETED_EDGE, 2.2, True
    if pic.focus is not None and j == pic.focus:
        return FOCUS_EDGE, 6.0, True
    if pic.selected is None:
        if pic.emphasis is not None and pic.emphasis[j]:
            return MOTIF_EDGE, 2.6, True
        return PLAIN_EDGE, 1.4, False
    if pic.selected[j]:
        s = pic.scores or [1.0] * len(pic.pairs)
        top = max((s[i] for i in range(len(s)) if pic.selected[i]), default=1.0) or 1.0
        rel = max(0.0, min(1.0, s[j] / top)) if top > 0 else 1.0
        return pic.accent, 2.0 + 5.0 * rel, True
    return FADED_EDGE, 1.0, False


# ----------------------------------------------------------------------------- from instances

def node_task_picture(pairs: Sequence[tuple[int, int]], node_ids: Sequence[int],
                      node_classes: Sequence[int], class_names: Sequence[str], target: int,
                      positions: np.ndarray, motif: Optional[Sequence[bool]] = None
                      ) -> GraphPicture:
    """A node-task computation graph: nodes coloured by true class, the target node starred."""
    labels = [str(int(n)) for n in node_ids]
    colors = [palette(c) for c in node_classes]
    titles = [f"node {int(n)} · class {class_names[int(c)]}" + (" · explained node" if i == target
                                                                 else "")
              for i, (n, c) in enumerate(zip(node_ids, node_classes))]
    present = sorted(set(int(c) for c in node_classes))
    legend = [("explained node", "#111111", "target")]
    legend += [(f"class {class_names[c]}", palette(c), "node") for c in present]
    if motif is not None and any(motif):
        legend.append(("motif edge (ground truth)", MOTIF_EDGE, "edge"))
    legend.append(("edge", PLAIN_EDGE, "edge"))
    return GraphPicture(positions, [(int(u), int(v)) for u, v in pairs], labels, colors, titles,
                        target=int(target), emphasis=None if motif is None else list(motif),
                        legend=legend)


def graph_task_picture(pairs: Sequence[tuple[int, int]], node_types: Sequence[int],
                       type_names: Sequence[str], positions: np.ndarray) -> GraphPicture:
    """A whole graph (e.g. an NCI1 molecule without atom symbols): nodes coloured by type."""
    labels = [str(i) for i in range(len(node_types))]
    colors = [palette(t) for t in node_types]
    titles = [f"node {i} · {type_names[int(t)]}" for i, t in enumerate(node_types)]
    present = sorted(set(int(t) for t in node_types))
    legend = [(type_names[t], palette(t), "node") for t in present]
    legend.append(("edge", PLAIN_EDGE, "edge"))
    return GraphPicture(positions, [(int(u), int(v)) for u, v in pairs], labels, colors, titles,
                        legend=legend)
