"""What drawing needs, cached once per server process for every browser session.

Layouts, hop distances, results files, Plotly figures and the network view's script files cost a
rerun real time to rebuild yet depend only on their inputs, so every session shares them. The
engine's own results are cached in :mod:`state.engine_cache`.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import streamlit as st
from components import graph_pyvis, graph_view

# ----------------------------------------------------------------------------- shared results


@st.cache_resource(show_spinner=False)
def _kept() -> dict[int, dict]:
    """id of a shared result (kept alive by another cache) -> what pages derived from it."""
    return {}


def kept_with(owner: object, key: tuple, compute: Callable[[], Any]) -> Any:
    """``compute()`` once per ``key`` for as long as ``owner`` lives, for every session.

    For what a page derives from a result that every session already shares (a molecule's
    explanation: its pictures, its bond labels), where a Streamlit cache key would have to hash
    the result: RDKit drew each of the Molecule page's pictures again on every rerun (8 % of
    it). The entries go with their owner (a weak reference), so a new result at the same
    address never meets an old one's."""
    store = _kept()
    mine = store.get(id(owner))
    if mine is None:
        mine = store.setdefault(id(owner), {})
        weakref.finalize(owner, store.pop, id(owner), None)
    if key not in mine:
        mine[key] = compute()
    return mine[key]


# ----------------------------------------------------------------------------- graphs


@st.cache_data(show_spinner=False, max_entries=512)
def graph_layout(
    dataset: str, position: int, num_nodes: int, pairs: tuple[tuple[int, int], ...]
) -> list[list[float]]:
    """The layout of one instance's computation graph, shared by all its panels."""
    return graph_view.layout(num_nodes, pairs).tolist()


@st.cache_resource(show_spinner=False, max_entries=512)
def hop_distances(
    dataset: str, index: int, num_nodes: int, num_pairs: int, _instance
) -> tuple[int, ...]:
    """Hops from a node instance's explained node to each of its nodes (``num_nodes + 1``: not
    reachable), once per instance and server process: the What-if section orders its 1,500
    edges by them on every rerun of a BA-shapes base node."""
    import networkx as nx

    g = nx.Graph(_instance.pairs.t().tolist())
    g.add_nodes_from(range(num_nodes))
    dist = nx.single_source_shortest_path_length(g, int(_instance.target))
    return tuple(dist.get(i, num_nodes + 1) for i in range(num_nodes))


# ----------------------------------------------------------------------------- Benchmarks


@st.cache_resource(show_spinner=False, max_entries=128)
def benchmark_chart(
    chart: str,
    source: tuple[str, float],
    methods: tuple[str, ...],
    option: bool,
    _build: Callable[[], Any],
) -> Any:
    """A Benchmarks chart (``chart``: its name) of one results file (``source``: path and
    modification time) for ``methods`` and the page's ``option``, built by ``_build`` once per
    server process: building the Plotly figures (templates copied, values validated) was most
    of the page's server time on every rerun of every session. Streamlit only reads the figure."""
    return _build()


# ----------------------------------------------------------------------------- network view


@st.cache_resource(show_spinner=False)
def vis_assets_published(folder: str, static_folder: str = "") -> bool:
    """Publish vis-network into ``folder`` (the component's own copy: the live network view's
    fallback) and ``static_folder`` (served by the app's static serving, the copy browsers keep)
    once per process; whether ``folder`` has them."""
    if static_folder:
        graph_pyvis.publish_vis_assets(Path(static_folder))  # the view falls back without it
    return graph_pyvis.publish_vis_assets(Path(folder))


@st.cache_data(show_spinner=False, max_entries=2000)
def smiles_drawing(smiles: str, size: tuple[int, int]) -> str | None:
    """An SVG of a molecule as RDKit reads its SMILES (a training neighbour's small picture),
    once per server process; None when RDKit cannot read it."""
    from rdkit import Chem, rdBase

    from gem_core.api import draw_molecule_svg

    with rdBase.BlockLogs():
        mol = Chem.MolFromSmiles(smiles)
    return None if mol is None else draw_molecule_svg(mol, [], size=size)
