"""Interactive renderers of a :class:`~components.graph_view.GraphPicture`: pyvis.

:func:`network_data` is what the live network view (:mod:`components.network_view`) draws;
:func:`pyvis_html` a self-contained page, rendered fully offline (``cdn_resources="in_line"``
and the template's Bootstrap links stripped, :func:`strip_cdn`).
"""
from __future__ import annotations

import html
import json
import os
import re
import shutil
from pathlib import Path

from .graph_view import DASH, DELETED_EDGE, DELETED_NODE, GraphPicture, edge_style

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
#: the published files' modification time (2022-01-01, about vis-network 9.1.2's release): served
#: as their Last-Modified (app static serving), it lets a browser keep them for a tenth of their
#: age (heuristic freshness) instead of fetching 690 kB for every drawn view; the install time
#: (pip sets it) would be minutes old on a machine set up just before class
VIS_MTIME = 1640995200


def _vis_dir() -> Path:
    import pyvis

    return Path(pyvis.__file__).resolve().parent / "templates" / "lib" / "vis-9.1.2"


def publish_vis_assets(target_dir: Path) -> bool:
    """Copy pyvis' own vis-network script and stylesheet into ``target_dir`` (atomically).

    The live network view (:mod:`components.network_view`) loads them once per panel and keeps
    them loaded across reruns. Returns False when the folder cannot be written
    (the app then falls back on self-contained :func:`pyvis_html` pages).
    """
    try:
        target_dir.mkdir(parents=True, exist_ok=True)
        for name in VIS_FILES:
            src, dst = _vis_dir() / name, target_dir / name
            if dst.exists() and (dst.stat().st_size, int(dst.stat().st_mtime)) == (
                    src.stat().st_size, VIS_MTIME):
                continue
            tmp = dst.with_suffix(dst.suffix + f".{os.getpid()}.tmp")
            shutil.copyfile(src, tmp)
            os.utime(tmp, (VIS_MTIME, VIS_MTIME))
            os.replace(tmp, dst)
        return True
    except OSError:
        return False


NETWORK_OPTIONS = {
    "physics": {"enabled": False},
    "edges": {"smooth": False, "color": {"inherit": False}},
    # the wheel scrolls the page; the live view zooms on Ctrl + wheel and its + / − buttons
    "interaction": {"hover": True, "dragNodes": True, "zoomView": False},
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
                  # the explained node's label larger, legible when a big graph is fitted
                  **({"vadjust": -68, "size": 24, "strokeWidth": 5} if is_target else {})})
    # pyvis' own edge records, appended directly: Network.add_edge scans every earlier edge for
    # a duplicate (O(E²): 50 ms for an 873-edge BA-shapes hub node), and our pairs are unique.
    for j, (u, v) in enumerate(pic.pairs):
        colour, width, _ = edge_style(pic, j)
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
