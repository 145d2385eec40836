"""Drawing a computation graph with an explanation: pyvis (interactive), SVG and PNG (static).

Every panel of one instance shares one layout (:func:`layout`), so the original graph and the
explanations of several methods can be compared side by side. pyvis is rendered fully offline:
``cdn_resources="in_line"`` and the template's Bootstrap links stripped (:func:`strip_cdn`).
"""
from __future__ import annotations

import html
import io
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
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
        pos = self.positions[keep]
        lo, hi = pos.min(0), pos.max(0)
        pos = (pos - lo) / np.where(hi - lo > 1e-9, hi - lo, 1.0)

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


def _edge_style(pic: GraphPicture, j: int) -> tuple[str, float, bool]:
    """(colour, width, on_top) of pair ``j``."""
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


# ----------------------------------------------------------------------------- pyvis

_CDN_TAG = re.compile(
    r"<(?:link|script)\b[^>]*(?:href|src)\s*=\s*[\"']https?://[^\"']*[\"'][^>]*>(?:\s*</script>)?",
    re.IGNORECASE)


def strip_cdn(page: str) -> str:
    """Remove every ``<link>`` / ``<script src>`` that points to the network (pyvis' Bootstrap)."""
    return _CDN_TAG.sub("", page)


# Legend swatches of the fallback pyvis pages, per kind: the CSS after "display:inline-block;"
# ({c} = the colour) and the swatch's text; the live view draws the same in vis_network/index.html.
_SWATCHES: dict[str, tuple[str, str]] = {
    "edge": ("width:18px;height:0;border-top:3px solid {c};vertical-align:middle", ""),
    "deleted": ("width:18px;height:0;border-top:3px dashed {c};vertical-align:middle", ""),
    "hollow": ("width:8px;height:8px;border-radius:50%;border:2px dashed {c};"
               "vertical-align:middle", ""),
    "target": ("color:{c}", "&#9733;"),
    "node": ("width:10px;height:10px;border-radius:50%;background:{c};vertical-align:middle", ""),
}


def _legend_html(pic: GraphPicture) -> str:
    items = []
    for text, colour, kind in pic.legend:
        style, mark = _SWATCHES.get(kind, _SWATCHES["node"])
        swatch = (f"<span style='display:inline-block;{style.format(c=html.escape(colour))};"
                  f"margin-right:4px'>{mark}</span>")
        items.append(f"<span style='margin-right:10px;white-space:nowrap'>{swatch}"
                     f"{html.escape(text)}</span>")
    return ("<div class='gem-legend' style='font:12px sans-serif;color:#333;padding:2px 4px;"
            "line-height:1.6'>" + "".join(items) + "</div>")


_TEMPLATE_ENVS: dict[str, object] = {}


def _shared_template_env(template_dir: str):
    """One Jinja environment per pyvis template folder, so the templates compile once.

    pyvis makes a new environment per ``Network``, which re-lexes its ~600 kB inline vis.js
    template on every call (~0.15 s per panel). Jinja environments are thread-safe.
    """
    env = _TEMPLATE_ENVS.get(template_dir)
    if env is None:
        from jinja2 import Environment, FileSystemLoader

        env = _TEMPLATE_ENVS.setdefault(template_dir,
                                        Environment(loader=FileSystemLoader(template_dir)))
    return env


VIS_FILES = ("vis-network.min.js", "vis-network.css")


def _vis_dir() -> Path:
    import pyvis

    return Path(pyvis.__file__).resolve().parent / "templates" / "lib" / "vis-9.1.2"


def publish_vis_assets(target_dir: Path) -> bool:
    """Copy pyvis' own vis-network script and stylesheet into ``target_dir`` (atomically).

    The live network view (:mod:`components.network_view`) loads them from its folder once per
    panel and keeps them loaded across reruns. Returns False when the folder cannot be written
    (the app then falls back on self-contained :func:`pyvis_html` pages).
    """
    try:
        target_dir.mkdir(parents=True, exist_ok=True)
        for name in VIS_FILES:
            src, dst = _vis_dir() / name, target_dir / name
            if dst.exists() and dst.stat().st_size == src.stat().st_size:
                continue
            tmp = dst.with_suffix(dst.suffix + f".{os.getpid()}.tmp")
            shutil.copyfile(src, tmp)
            os.replace(tmp, dst)
        return True
    except OSError:
        return False


NETWORK_OPTIONS = {
    "physics": {"enabled": False},
    "edges": {"smooth": False, "color": {"inherit": False}},
    "interaction": {"hover": True, "dragNodes": True, "zoomView": True},
}


def _pyvis_network(pic: GraphPicture, height: int):
    """The picture as a pyvis ``Network`` (fixed positions, no physics; labels escaped)."""
    from pyvis.edge import Edge
    from pyvis.network import Network

    if len(set(pic.pairs)) != len(pic.pairs):
        raise ValueError("a picture's pairs must be unique")
    net = Network(height=f"{height}px", width="100%", directed=False, cdn_resources="in_line")
    net.templateEnv = _shared_template_env(net.template_dir)
    scale = 420.0
    for i in range(pic.num_nodes):
        x, y = pic.positions[i]
        is_target = pic.target is not None and i == pic.target
        gone = pic.node_removed(i)
        extra = {"shapeProperties": {"borderDashes": list(DASH)}} if gone else {}
        net.add_node(
            i, label=html.escape(pic.node_labels[i]),
            title=html.escape(pic.node_titles[i] + (" · deleted" if gone else "")),
            color={"background": DELETED_NODE if gone else pic.node_colors[i],
                   "border": DELETED_EDGE if gone else "#111111" if is_target else "#ffffff"},
            shape="star" if is_target else "dot", size=22 if is_target else 11,
            borderWidth=3 if is_target or gone else 1, x=float(x * scale), y=float(y * scale),
            physics=False, **extra,
            # a white halo keeps labels readable over edges; the target's label sits above its
            # star instead of under it
            font={"size": 14, "strokeWidth": 3, "strokeColor": "#ffffff",
                  **({"vadjust": -40} if is_target else {})})
    # pyvis' own edge records, appended directly: Network.add_edge scans every earlier edge for
    # a duplicate (O(E²): 50 ms for an 873-edge BA-shapes hub node), and our pairs are unique.
    for j, (u, v) in enumerate(pic.pairs):
        colour, width, _ = _edge_style(pic, j)
        title = f"{pic.node_labels[u]} – {pic.node_labels[v]}"
        if pic.is_removed(j):
            title += ": deleted"
        elif pic.scores is not None and pic.scores[j] == pic.scores[j]:  # not NaN
            title += f": score {pic.scores[j]:.4f}"
        extra = {"dashes": list(DASH)} if pic.is_removed(j) else {}
        net.edges.append(Edge(int(u), int(v), directed=False, color=colour, width=width,
                              title=html.escape(title), **extra).options)
    net.set_options(json.dumps(NETWORK_OPTIONS))
    return net


def network_data(pic: GraphPicture) -> dict:
    """What the live network view draws: pyvis' node and edge records, the vis-network options
    and the legend (plain text; the view escapes it), all JSON-serialisable."""
    net = _pyvis_network(pic, 0)
    return {"nodes": net.nodes, "edges": net.edges, "options": NETWORK_OPTIONS,
            "legend": [list(entry) for entry in pic.legend]}


def pyvis_html(pic: GraphPicture, height: int = 340) -> str:
    """A self-contained interactive HTML page of the picture (vis-network in-lined, CDN links
    stripped): the app's fallback when the live view cannot publish its vis-network files."""
    page = strip_cdn(_pyvis_network(pic, height).generate_html())
    return page.replace("<body>", "<body style='margin:0'>" + _legend_html(pic), 1)


# ----------------------------------------------------------------------------- static pictures

def _canvas_coords(pic: GraphPicture, width: float, height: float, legend_h: float,
                   scale: float = 1.0) -> np.ndarray:
    """Node centres on the canvas below the legend, leaving room for node labels."""
    left, right, top, bottom = 18 * scale, 36 * scale, 22 * scale, 16 * scale
    w, h = width - left - right, height - legend_h - top - bottom
    pos = pic.positions if len(pic.positions) else np.zeros((0, 2))
    if not len(pos):
        return pos
    return np.stack([left + pos[:, 0] * w, top + pos[:, 1] * h], axis=1)


def _legend_rows(pic: GraphPicture, width: int) -> list[list[tuple[str, str, str]]]:
    rows, row, used = [], [], 0
    for entry in pic.legend:
        need = 26 + 6.5 * len(entry[0])
        if row and used + need > width - 10:
            rows.append(row)
            row, used = [], 0
        row.append(entry)
        used += need
    if row:
        rows.append(row)
    return rows


def to_svg(pic: GraphPicture, width: int = 480, height: int = 400, title: str = "") -> str:
    """A static SVG of the picture (same layout and styles as the interactive view)."""
    rows = _legend_rows(pic, width)
    legend_h = 18 * len(rows) + (22 if title else 0) + 6
    xy = _canvas_coords(pic, width, height, legend_h)
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
           f"viewBox='0 0 {width} {height}' font-family='sans-serif'>",
           f"<rect width='{width}' height='{height}' fill='white'/>"]
    y0 = 6
    if title:
        out.append(f"<text x='8' y='{y0 + 14}' font-size='14' font-weight='bold'>"
                   f"{html.escape(title)}</text>")
        y0 += 22
    for r, row in enumerate(rows):
        x = 8
        y = y0 + 12 + 18 * r
        for text, colour, kind in row:
            c = html.escape(colour)
            if kind == "edge":
                out.append(f"<line x1='{x}' y1='{y - 4}' x2='{x + 18}' y2='{y - 4}' stroke='{c}' "
                           f"stroke-width='3'/>")
            elif kind == "target":
                out.append(f"<circle cx='{x + 7}' cy='{y - 4}' r='6' fill='white' stroke='{c}' "
                           f"stroke-width='3'/>")
            elif kind == "deleted":
                out.append(f"<line x1='{x}' y1='{y - 4}' x2='{x + 18}' y2='{y - 4}' stroke='{c}' "
                           f"stroke-width='3' stroke-dasharray='4 3'/>")
            elif kind == "hollow":
                out.append(f"<circle cx='{x + 7}' cy='{y - 4}' r='5' fill='white' stroke='{c}' "
                           f"stroke-width='2' stroke-dasharray='3 2'/>")
            else:
                out.append(f"<circle cx='{x + 7}' cy='{y - 4}' r='5' fill='{c}'/>")
            out.append(f"<text x='{x + 22}' y='{y}' font-size='11' fill='#333'>"
                       f"{html.escape(text)}</text>")
            x += 26 + int(6.5 * len(text))
    order = sorted(range(len(pic.pairs)), key=lambda j: _edge_style(pic, j)[2])
    for j in order:
        u, v = pic.pairs[j]
        colour, width_, _ = _edge_style(pic, j)
        stroke, opacity = _svg_colour(colour)
        dash = f" stroke-dasharray='{DASH[0]} {DASH[1]}'" if pic.is_removed(j) else ""
        out.append(f"<line x1='{xy[u, 0]:.1f}' y1='{legend_h + xy[u, 1]:.1f}' "
                   f"x2='{xy[v, 0]:.1f}' y2='{legend_h + xy[v, 1]:.1f}' stroke='{stroke}' "
                   f"stroke-opacity='{opacity}' stroke-width='{width_:.1f}' "
                   f"stroke-linecap='round'{dash}/>")
    for i in range(pic.num_nodes):
        is_target = pic.target is not None and i == pic.target
        r = 10 if is_target else 6
        cx, cy = xy[i, 0], legend_h + xy[i, 1]
        gone = pic.node_removed(i)
        fill = DELETED_NODE if gone else pic.node_colors[i]
        stroke = DELETED_EDGE if gone else "#111" if is_target else "white"
        dash = " stroke-dasharray='3 2'" if gone else ""
        out.append(f"<circle cx='{cx:.1f}' cy='{cy:.1f}' r='{r}' "
                   f"fill='{html.escape(fill)}' stroke='{stroke}' "
                   f"stroke-width='{3 if is_target or gone else 1}'{dash}><title>"
                   f"{html.escape(pic.node_titles[i] + (' · deleted' if gone else ''))}"
                   f"</title></circle>")
        if pic.num_nodes <= 60 or is_target:
            out.append(f"<text x='{cx + r + 1:.1f}' y='{cy - r:.1f}' font-size='9' fill='#222'>"
                       f"{html.escape(pic.node_labels[i])}</text>")
    out.append("</svg>")
    return "\n".join(out)


def _svg_colour(colour: str) -> tuple[str, float]:
    m = re.fullmatch(r"rgba\((\d+),(\d+),(\d+),([\d.]+)\)", colour.replace(" ", ""))
    if m:
        r, g, b, a = m.groups()
        return f"rgb({r},{g},{b})", float(a)
    return colour, 1.0


def _rgb(colour: str) -> tuple[int, int, int, int]:
    m = re.fullmatch(r"rgba\((\d+),(\d+),(\d+),([\d.]+)\)", colour.replace(" ", ""))
    if m:
        r, g, b, a = m.groups()
        return int(r), int(g), int(b), int(round(float(a) * 255))
    c = colour.lstrip("#")
    if len(c) == 3:
        c = "".join(ch * 2 for ch in c)
    return int(c[0:2], 16), int(c[2:4], 16), int(c[4:6], 16), 255


def _dashes(a: tuple[float, float], b: tuple[float, float], on: float, off: float
            ) -> list[tuple[tuple[float, float], tuple[float, float]]]:
    """The segments of a dashed line from ``a`` to ``b`` (Pillow draws solid lines only)."""
    (x0, y0), (x1, y1) = a, b
    length = float(np.hypot(x1 - x0, y1 - y0))
    if length < 1e-9:
        return [(a, b)]
    out, t = [], 0.0
    while t < length:
        e = min(length, t + on)
        out.append(((x0 + (x1 - x0) * t / length, y0 + (y1 - y0) * t / length),
                    (x0 + (x1 - x0) * e / length, y0 + (y1 - y0) * e / length)))
        t = e + off
    return out


def to_png(pic: GraphPicture, width: int = 960, height: int = 800, title: str = "") -> bytes:
    """A static PNG of the picture (Pillow; same layout and styles)."""
    from PIL import Image, ImageDraw, ImageFont

    scale = width / 480.0
    try:
        font = ImageFont.load_default(size=max(8, int(round(11 * scale))))
        small = ImageFont.load_default(size=max(7, int(round(9 * scale))))
    except TypeError:  # old Pillow: one fixed-size bitmap font
        font = small = ImageFont.load_default()
    img = Image.new("RGBA", (width, height), (255, 255, 255, 255))
    layer = Image.new("RGBA", (width, height), (255, 255, 255, 0))
    draw = ImageDraw.Draw(layer)
    rows = _legend_rows(pic, int(width / scale))
    legend_h = int((18 * len(rows) + (22 if title else 0) + 6) * scale)
    xy = _canvas_coords(pic, width, height, legend_h, scale)
    order = sorted(range(len(pic.pairs)), key=lambda j: _edge_style(pic, j)[2])
    for j in order:
        u, v = pic.pairs[j]
        colour, w, _ = _edge_style(pic, j)
        ends = [(xy[u, 0], legend_h + xy[u, 1]), (xy[v, 0], legend_h + xy[v, 1])]
        for a, b in (_dashes(*ends, DASH[0] * scale, DASH[1] * scale) if pic.is_removed(j)
                     else [ends]):
            draw.line([a, b], fill=_rgb(colour), width=max(1, int(round(w * scale))))
    img = Image.alpha_composite(img, layer)
    draw = ImageDraw.Draw(img)
    for i in range(pic.num_nodes):
        is_target = pic.target is not None and i == pic.target
        r = (10 if is_target else 6) * scale
        cx, cy = xy[i, 0], legend_h + xy[i, 1]
        gone = pic.node_removed(i)
        draw.ellipse([cx - r, cy - r, cx + r, cy + r],
                     fill=_rgb(DELETED_NODE if gone else pic.node_colors[i]),
                     outline=_rgb(DELETED_EDGE) if gone else
                     (17, 17, 17, 255) if is_target else (255, 255, 255, 255),
                     width=int(3 * scale) if is_target or gone else 1)
        if pic.num_nodes <= 60 or is_target:
            draw.text((cx + r + 1, cy - r - 10 * scale), pic.node_labels[i], fill=(34, 34, 34, 255),
                      font=small)
    y = 6 * scale
    if title:
        draw.text((8 * scale, y), title, fill=(0, 0, 0, 255), font=font)
        y += 22 * scale
    for r_i, row in enumerate(rows):
        x = 8 * scale
        yy = y + 18 * scale * r_i + 6 * scale
        for text, colour, kind in row:
            if kind in ("edge", "deleted"):
                ends = [(x, yy + 4), (x + 18 * scale, yy + 4)]
                for a, b in (_dashes(*ends, 4 * scale, 3 * scale) if kind == "deleted"
                             else [ends]):
                    draw.line([a, b], fill=_rgb(colour), width=int(3 * scale))
            elif kind == "hollow":
                draw.ellipse([x, yy - 2, x + 12 * scale, yy - 2 + 12 * scale],
                             fill=(255, 255, 255, 255), outline=_rgb(colour),
                             width=int(2 * scale))
            else:
                draw.ellipse([x, yy - 2, x + 12 * scale, yy - 2 + 12 * scale],
                             fill=_rgb(colour) if kind != "target" else (255, 255, 255, 255),
                             outline=_rgb(colour), width=int(2 * scale))
            draw.text((x + 22 * scale, yy - 2 * scale), text, fill=(51, 51, 51, 255), font=font)
            x += (26 + 6.5 * len(text)) * scale
    buf = io.BytesIO()
    img.convert("RGB").save(buf, format="PNG")
    return buf.getvalue()


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
