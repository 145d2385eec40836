"""The live network view: a pyvis picture drawn by a Streamlit component that stays mounted.

``st.iframe(pyvis_html(...))`` rebuilds the whole page on every rerun: the browser creates a new
document and parses vis-network again for every panel, for every K or instance change. Here the
iframe (``vis_network/index.html``) is created once per panel; a rerun only posts the new nodes,
edges and legend, which the page swaps in place (≈ 10–50 ms for a 200-node graph). pyvis still
builds the network (:func:`graph_pyvis.network_data`); vis-network is pyvis' own copy, published
into ``vis_network/lib/`` at start-up. Without a writable app folder the view falls back on
self-contained pyvis pages.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Optional

import streamlit as st
import streamlit.components.v1 as components

from state.session import session_value
from state.view_cache import vis_assets_published

from . import graph_pyvis, graph_view

COMPONENT_DIR = Path(__file__).resolve().parent / "vis_network"
#: where Streamlit's static serving (``server.enableStaticServing``) serves vis-network from, at
#: ``/app/static/vis-network/``: with a Last-Modified header, so a browser fetches the 690 kB once.
#: The component's own folder (``lib/``) serves every request again, gzipped anew on the server:
#: six fetches per Explore view, each time a user comes back to the page.
STATIC_DIR = Path(__file__).resolve().parents[1] / "static" / "vis-network"
LEGEND_HEIGHT = 72  # room for up to three legend rows above the canvas

_network_component = components.declare_component("gem_vis_network", path=str(COMPONENT_DIR))


def _assets_ready() -> bool:
    """Publish vis-network where the app serves it statically and, as the view's fallback,
    next to the component (once per process, cached in :mod:`state.view_cache`)."""
    return vis_assets_published(str(COMPONENT_DIR / "lib"), str(STATIC_DIR))


def live() -> bool:
    """Whether the live view can draw (and report clicks) in this app process."""
    return _assets_ready()


def show(pic: graph_view.GraphPicture, height: int, key: str, step: str = "",
         on_edge_click: Optional[Callable[[int, int], None]] = None) -> bool:
    """Draw ``pic`` with a ``height``-pixel canvas; ``key`` keeps the view mounted across reruns.

    ``step`` names what is drawn (instance, K): a new step always re-renders the view (and sets
    ``window.__gemStep``), even when the picture did not change, e.g. a K step whose new edge
    lies outside a close-up. Browser tests wait on it. With ``on_edge_click``, a click on an
    edge calls it with the edge's two nodes (the picture's numbering) before the rerun.
    Returns whether the live view drew (clicks need it; the fallback page cannot report them).
    """
    if not _assets_ready():
        st.iframe(graph_pyvis.pyvis_html(pic, height), height=height + LEGEND_HEIGHT)
        return False

    def clicked() -> None:
        value = session_value(key)
        if on_edge_click is not None and isinstance(value, dict):
            on_edge_click(int(value["from"]), int(value["to"]))

    # one JSON string, not four lists and dicts: Streamlit tests every argument of a component
    # for being a data frame (0.3 ms for the node list alone) before it serialises them
    _network_component(view=json.dumps(graph_pyvis.network_data(pic)), canvas_height=height,
                       step=step,
                       height=height + LEGEND_HEIGHT, key=key, default=None,
                       clickable=on_edge_click is not None,
                       on_change=clicked if on_edge_click is not None else None)
    return True
