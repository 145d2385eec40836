"""Explore: one test instance, its computation graph and each explainer's top-K explanation.

The paper's Figure 6 layout: the original computation graph, then one panel per explainer with
its top-K edges drawn strong inside the faded original, and under each panel the target model's
probability on that explanation subgraph and the method's explain time. Scores are cached per
(instance, method), so changing K only re-thresholds them.
"""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st
import torch
from components import graph_view, molecule_view, network_view, whatif_view
from components.instance_panels import PANEL_HEIGHT, draw_panel, molecule_look
from messages import DATA_HELP, device_label, fit_offer, progress_bar, show_error, show_reading
from state.engine_cache import (
    contrast_teacher,
    explain_test_instance,
    explainer_token,
    explanation_reading,
    get_workbench,
    method_ready,
    prefetch_contrast,
    probabilities_with,
    ranked_test_instance,
    spinner_on_first,
    test_predictions,
    what_if_evaluator,
)
from state.runtime import run_page
from state.selection import Selection, selection
from state.session import random_pick, session_value, set_session_value
from state.view_cache import graph_layout, hop_distances
from theme import class_title, fmt_ms, method_color, method_title

from gem_core.api import (
    DEFAULT_TEACHER,
    DataUnavailableError,
    GemDataset,
    Instance,
    Workbench,
    method_spec,
)

CLOSE_UP_NODES = 60  # larger computation graphs get the close-up view by default
CLOSE_UP_HOPS = 2
# A close-up larger than this (a BA-shapes hub's 2 hops hold up to 186 nodes: a hairball) shows
# the explained node's neighbours and the endpoints of every shown explanation's edges instead
CLOSE_UP_MAX = 40
PER_ROW = 3
MODES = ("Index", "Class", "Model right / wrong", "Random")


# ----------------------------------------------------------------------------- helpers


def _load_target(wb: Workbench):
    from gem_core.api import cached_target_path, shipped_target_path

    name, target = wb.name, wb.target_name  # the selected target's checkpoint, not the paper's
    if cached_target_path(name, target).exists() or shipped_target_path(name, target).exists():
        with spinner_on_first(("target", name, target, str(wb.device)), "Loading the model…"):
            return wb.target()
    with st.status(f"Training the {wb.spec.title} model (first use)…", expanded=True):
        with progress_bar("training") as progress:
            return wb.target(progress)


def _cls(ds: GemDataset, c: int) -> str:
    """Class ``c`` as people read it ("non-mutagen")."""
    return class_title(ds.class_names[c])


def _titles(ds: GemDataset) -> list[str]:
    return [class_title(c) for c in ds.class_names]


def _describe(ds: GemDataset, inst: Instance, pos: int, pred: int) -> str:
    kind = "node" if ds.task == "node" else "graph"
    mark = "" if pred == inst.y else " · model wrong"
    return f"#{pos} · {kind} {inst.index} · {_cls(ds, inst.y)}{mark}"


def _contrast_note(ds: GemDataset, inst: Instance, pos: int, explained: int) -> None:
    """Say when the picked node is not one of the explainers' test instances (a base node)."""
    if pos >= explained:
        st.caption(
            f"Not a motif node: the paper explains and scores only the {explained} motif "
            f"nodes of the test split (#0 – #{explained - 1}); this "
            f"{_cls(ds, inst.y)} node is shown for contrast, explained the same "
            f"way.",
            help="Test instances from #" + str(explained) + " on are the test "
            "split's other nodes, so every class can be picked.",
        )


#: an instance shows a contrast when its explanation leaves out a good part of it: at least this
#: many edges per edge of K (Tree-cycles #0 has 8 edges for K = 6: even Random covers the motif)
CONTRAST = 1.5


def first_informative(instances: list[Instance], preds: list[int], explained: int, k: int) -> int:
    """The first explained test instance the model gets right with at least ``CONTRAST`` × K
    edges (0 when there is none): the page's first view, so that K edges are a real choice."""
    for p in range(min(explained, len(instances))):
        if preds[p] == instances[p].y and instances[p].num_pairs >= CONTRAST * k:
            return p
    return 0


def _pick_instance(
    sel: Selection, ds: GemDataset, instances: list[Instance], preds: list[int], first: int = 0
) -> int:
    """The instance picker, opening on ``first``; returns a position in the test list."""
    n = len(instances)
    kind = "node" if ds.task == "node" else "molecule" if ds.atom_symbols else "graph"
    c1, c2 = st.columns([2, 3])
    with c1:
        mode = st.radio(
            f"Pick a test {kind} by", MODES, horizontal=True, key="ex_mode", persist_state="session"
        )
    describe = {p: _describe(ds, instances[p], p, preds[p]) for p in range(n)}
    with c2:
        if mode == "Index":
            return int(
                st.number_input(
                    f"Test {kind} (0 – {n - 1})",
                    min_value=0,
                    max_value=n - 1,
                    value=first,
                    step=1,
                    key=f"ex_index_{sel.dataset}",
                )
            )
        if mode == "Class":
            present = sorted({inst.y for inst in instances})
            cls = st.selectbox(
                "True class",
                present,
                format_func=lambda c: _cls(ds, c),
                key=f"ex_class_{sel.dataset}",
            )
            cands = [p for p in range(n) if instances[p].y == cls]
        elif mode == "Model right / wrong":
            outcome = st.radio(
                "The model is", ("right", "wrong"), horizontal=True, key=f"ex_outcome_{sel.dataset}"
            )
            want = outcome == "right"
            cands = [p for p in range(n) if (preds[p] == instances[p].y) == want]
            if not cands:
                st.info(f"The model is never {outcome} on the test {kind}s; showing #0.")
                return 0
        else:
            key = f"ex_random_{sel.dataset}"
            pos = random_pick(
                key,
                n,
                st.button(
                    "Pick another at random", key="ex_random_button", icon=":material/casino:"
                ),
            )
            st.markdown(f"Random pick: **{describe[pos]}**")
            return pos
        # open on the first candidate with a contrast between K and its size, as the Index
        # mode does (first_informative)
        roomy = [i for i, p in enumerate(cands) if instances[p].num_pairs >= CONTRAST * sel.k]
        return int(
            st.selectbox(
                f"Test {kind}",
                cands,
                format_func=describe.get,
                index=roomy[0] if roomy else 0,
                key=f"ex_pick_{sel.dataset}_{mode}",
            )
        )


def _base_picture(ds: GemDataset, inst: Instance, positions) -> graph_view.GraphPicture:
    import numpy as np

    pairs = [tuple(p) for p in inst.pairs.t().tolist()]
    pos = np.asarray(positions)
    if ds.task == "node":
        node_ids = inst.node_ids.tolist()
        classes = ds.graph.y[inst.node_ids].tolist()
        motif = None if inst.motif_mask is None else inst.motif_mask.tolist()
        return graph_view.node_task_picture(
            pairs, node_ids, classes, _titles(ds), int(inst.target), pos, motif
        )
    types = inst.x.argmax(1).tolist()
    names = (
        list(ds.atom_symbols)
        if ds.atom_symbols
        else [f"atom type {t}" for t in range(inst.x.size(1))]
    )
    return graph_view.graph_task_picture(pairs, types, names, pos)


def _edge_names(ds: GemDataset, inst: Instance) -> list[str]:
    pairs = inst.pairs.t().tolist()
    if ds.task == "node":
        ids = inst.node_ids.tolist()
        return [f"{ids[u]}–{ids[v]}" for u, v in pairs]
    if ds.atom_symbols:
        sym = [ds.atom_symbols[t] for t in inst.x.argmax(1).tolist()]
        return [f"{sym[u]}{u}–{sym[v]}{v}" for u, v in pairs]
    return [f"{u}–{v}" for u, v in pairs]


def _fit_button(wb: Workbench, method: str) -> None:
    fit_offer(
        wb,
        method,
        f"{method_title(method)} has not been fitted for {wb.spec.title} yet. "
        f"It is fitted once on the training instances; the result is cached.",
        key=f"ex_fit_{method}",
    )


# ----------------------------------------------------------------------------- page


def render() -> None:
    sel = selection()
    spec = sel.spec
    st.header("Explore explanations", anchor="explore")
    st.caption(
        f"{spec.title} · K = {sel.k} · the model is a black box; each explainer "
        f"keeps its K most important edges and the model is run again on that subgraph "
        f"alone."
    )
    try:
        wb = get_workbench(sel.dataset, sel.device, sel.target)
        ds = wb.dataset
    except DataUnavailableError as exc:
        st.warning(
            f"The {spec.title} data is not available on this machine. {DATA_HELP}",
            icon=":material/folder_off:",
        )
        st.caption(str(exc))
        st.info("The Molecule page still works: it uses the shipped Mutagenicity model.")
        return
    except Exception as exc:
        show_error(exc, f"Cannot load {spec.title}")
        return
    try:
        target = _load_target(wb)
        instances = wb.browse_instances("test")  # every class: motif nodes, then the others
        explained = len(wb.instances("test"))
        probs = test_predictions(sel.dataset, sel.device, target.digest, sel.target)
    except Exception as exc:
        show_error(exc, "Cannot load the model")
        return
    preds = [max(range(len(p)), key=p.__getitem__) for p in probs]

    pos = _pick_instance(
        sel, ds, instances, preds, first_informative(instances, preds, explained, sel.k)
    )
    inst = instances[pos]
    # Whatever an instance adds above the panels goes into fixed slots (containers that are
    # always there, empty or not): an element that comes and goes would shift the panels in the
    # page's tree, and the browser would then rebuild every drawn view from scratch
    # (BA-shapes: 0.9 s instead of 0.4 s to change instance).
    with st.container():
        _contrast_note(ds, inst, pos, explained)
    pred, p_full = preds[pos], probs[pos]
    kind = "node" if ds.task == "node" else "graph"
    verdict = "✓ right" if pred == inst.y else "✗ wrong"
    st.markdown(
        f"**Test instance #{pos}** — {kind} {inst.index}, true class **{_cls(ds, inst.y)}**; "
        f"the model predicts **{_cls(ds, pred)}** with p = {p_full[pred]:.3f} ({verdict}). "
        f"Computation graph: {inst.num_nodes} nodes, {inst.num_pairs} edges."
    )
    look = molecule_look(ds, inst)
    mol, hide_h = (None, False) if look is None else (look.mol, look.hide_h)
    pairs = tuple(tuple(p) for p in inst.pairs.t().tolist())
    close = None  # nodes of the close-up view (None: the whole computation graph)
    with st.container():  # the fixed slot for this instance's notes and close-up switch
        if inst.num_pairs <= sel.k:
            st.info(
                f"K = {sel.k} ≥ the {inst.num_pairs} edges of this computation graph: every "
                f"explanation is the whole graph."
            )
        if ds.task == "node" and inst.num_nodes > CLOSE_UP_NODES:
            if st.toggle(
                "Close-up: the explained node's neighbourhood and the explanations only",
                value=True,
                key="ex_closeup",
                persist_state="session",
                help=f"This computation graph has {inst.num_nodes} nodes; the close-up "
                f"keeps the nodes within {CLOSE_UP_HOPS} hops of the explained node "
                f"(a house motif lies within 2) when they are at most "
                f"{CLOSE_UP_MAX}, else its neighbours and the nodes of every "
                f"explanation shown, so labels stay readable.",
            ):
                close = _close_up(inst, _explained_nodes(sel, wb, inst, pos))
        if not sel.methods:
            st.info("Pick one or more explainers in the sidebar to compare their explanations.")
    # a close-up lays its own nodes out (GraphPicture.restricted): the whole graph's layout,
    # a fifth of a second on BA-shapes, is only computed when the whole graph is drawn
    positions = (
        graph_layout(sel.dataset, pos, inst.num_nodes, pairs)
        if close is None
        else [[0.5, 0.5]] * inst.num_nodes
    )
    base = _base_picture(ds, inst, positions)

    results: dict[str, dict] = {}
    panels = ["original", *sel.methods]
    for start in range(0, len(panels), PER_ROW):
        cols = st.columns(PER_ROW)
        for col, panel in zip(cols, panels[start : start + PER_ROW]):
            with col, st.container(border=True, key=f"panel_{panel}"):
                if panel == "original":
                    _original_panel(ds, inst, base, look, pred, p_full, pos, close)
                else:
                    out = _method_panel(sel, wb, ds, inst, pos, base, look, panel, pred, close)
                    if out is not None:
                        results[panel] = out

    names = _edge_names(ds, inst)
    # drawn on request: the grid is the slowest element of the page to draw in the browser
    # (0.15-0.3 s of every instance change), and most views do not need it
    with st.container():  # the fixed slot of a contrast node's teacher comparison
        if pos >= explained:
            _teacher_offer(sel, wb, inst, pos, results)
    show_table = st.toggle(
        "Show the edge scores table",
        key="ex_edge_table",
        persist_state="session",
        help="Every edge's score per method on one scale, with its top-K and "
        "ties at the cut marked; off, moving between instances is "
        "quicker.",
    )
    if show_table:
        _edge_table(names, results)

    def payload() -> str:
        """The JSON download, written when the button is clicked (a 1,500-edge node's scores,
        written out on every rerun, were a fifth of its server time)."""
        return json.dumps(
            _payload(sel, ds, inst, pos, pairs, names, pred, p_full, results), indent=2
        )

    st.download_button(
        "Download explanation (JSON)",
        payload,
        file_name=f"gem-{sel.dataset}-{pos}-k{sel.k}.json",
        mime="application/json",
        key="ex_download_json",
        icon=":material/download:",
    )
    with st.container(border=True, key="ex_whatif"):
        _what_if(sel, wb, ds, inst, pos, base, mol, hide_h, pred, p_full, results, close)
    # once the page is drawn: the contrast nodes explained in the background, once per process
    prefetch_contrast(sel.dataset, sel.device, sel.target, sel.methods)


def _payload(
    sel: Selection,
    ds: GemDataset,
    inst: Instance,
    pos: int,
    pairs,
    names: list[str],
    pred: int,
    p_full: list[float],
    results: dict[str, dict],
) -> dict:
    """What the JSON download holds: the instance, the prediction and each panel's scores."""
    return {
        "dataset": sel.dataset,
        "split": "test",
        "position": pos,
        "index": inst.index,
        "task": ds.task,
        "k": sel.k,
        "target_node": None if inst.target is None else int(inst.node_ids[inst.target]),
        "label": ds.class_names[inst.y],
        "prediction": {"label": ds.class_names[pred], "probabilities": list(p_full)},
        "edges": [
            [int(a), int(b)]
            for a, b in (
                [(inst.node_ids[u], inst.node_ids[v]) for u, v in pairs]
                if ds.task == "node"
                else pairs
            )
        ],
        "edge_names": names,
        "device": device_label(sel.device),
        "methods": {
            m: {
                "scores": r["scores"],
                "rank_scores": r["shown"],
                "top_k": r["ranked"],
                "top_k_edges": [names[j] for j in r["ranked"]],
                "tied_at_cut": [j for j, t in enumerate(r["tied"]) if t],
                "probability": r["probability"],
                "prediction": r["prediction"],
                "ms_per_instance": r["ms"],
                "reading": r.get("reading"),
            }
            for m, r in results.items()
        },
    }


def _edge_table(names: list[str], results: dict[str, dict]) -> None:
    """Every edge's score per method on one scale (rank within the instance), top-K and ties."""
    if not results:
        st.caption("No explanation yet.")
        return
    st.caption(
        "Scores on one scale: each edge's rank within this instance, from 0 to 1 "
        "(1 = the most important edge), since methods score differently "
        "(probabilities, logits, attributions). The raw scores are in the JSON download."
    )
    table = {"edge": names}
    for m, r in results.items():
        chosen = set(r["ranked"])
        table[f"{method_title(m)} score"] = [round(v, 4) for v in r["shown"]]
        table[f"{method_title(m)} top-K"] = [j in chosen for j in range(len(names))]
        if any(r["tied"]):
            table[f"{method_title(m)} tied at the cut"] = r["tied"]
    df = pd.DataFrame(table)
    first = f"{method_title(next(iter(results)))} score"
    st.dataframe(df.sort_values(first, ascending=False), hide_index=True, key="ex_edge_df")


def _what_if(
    sel: Selection,
    wb: Workbench,
    ds: GemDataset,
    inst: Instance,
    pos: int,
    base: graph_view.GraphPicture,
    mol,
    hide_h: bool,
    pred: int,
    p_full: list[float],
    results: dict[str, dict],
    close: list[int] | None,
) -> None:
    """Delete edges or nodes of this instance and see the prediction and explanations after."""
    pairs = [tuple(p) for p in inst.pairs.t().tolist()]
    key = ("explore", sel.dataset, sel.device, sel.target, pos)
    if mol is not None:
        edge_labels, node_labels = whatif_view.bond_labels(mol, pairs)
        edge_order, node_order = whatif_view.heavy_first(mol, pairs)
    else:
        edge_labels = _edge_names(ds, inst)
        if ds.task == "node":
            ids = inst.node_ids.tolist()
            node_labels = [
                f"{ids[i]}" + (" (the explained node)" if i == inst.target else "")
                for i in range(inst.num_nodes)
            ]
            hops = _hop_distances(inst)  # nearest the explained node first
            edge_order = sorted(
                range(len(pairs)),
                key=lambda j: (
                    min(hops[pairs[j][0]], hops[pairs[j][1]]),
                    max(hops[pairs[j][0]], hops[pairs[j][1]]),
                    j,
                ),
            )
            node_order = sorted(range(inst.num_nodes), key=lambda i: (hops[i], i))
        else:
            types = inst.x.argmax(1).tolist()
            node_labels = [f"{i} (type {types[i]})" for i in range(inst.num_nodes)]
            edge_order, node_order = list(range(len(pairs))), list(range(inst.num_nodes))
    thing = (
        "molecule" if mol is not None else ("computation graph" if ds.task == "node" else "graph")
    )

    ident = whatif_view.ident_of(*key)
    index_of = {(int(u), int(v)): j for j, (u, v) in enumerate(pairs)}
    index_of.update({(v, u): j for (u, v), j in list(index_of.items())})
    shown_nodes = sorted(set(close)) if close is not None else None

    def clicked(a: int, b: int) -> None:
        """An edge clicked in the what-if drawing (picture numbering): delete or restore it."""
        if shown_nodes is not None:
            a, b = shown_nodes[a], shown_nodes[b]
        if (a, b) in index_of:
            whatif_view.toggle_edge("ex_whatif", ident, index_of[(a, b)])

    def draw(removed, nodes, ranked, shown, method, slot) -> None:
        if mol is not None:
            svg = molecule_view.edited_molecule_svg(
                mol,
                [pairs[j] for j in removed],
                nodes,
                [pairs[j] for j in ranked],
                None if shown is None else [shown[j] for j in ranked],
                size=(420, 330),
                hide_hydrogens=hide_h,
            )
            st.image(svg, width="stretch")
            return
        pic = base
        if method is not None:
            chosen = set(ranked)
            pic = pic.with_explanation(
                [j in chosen for j in range(len(pairs))], shown, method_color(method)
            )
        gone = set(removed)
        node_gone = set(nodes)
        pic = pic.with_deletions(
            [j in gone for j in range(len(pairs))], [i in node_gone for i in range(inst.num_nodes)]
        )
        if close is not None:
            pic = pic.restricted(close)
        step = f"{ds.name}-{pos}-{slot}-k{sel.k}-" + whatif_view.edit_token(removed, nodes)
        network_view.show(
            pic,
            PANEL_HEIGHT,
            key=f"ex_net_{slot}",
            step=step,
            on_edge_click=clicked if slot == "whatif_edited" else None,
        )

    waiting = [m for m in sel.methods if m not in results]
    notes = (
        [
            f"{', '.join(method_title(m) for m in waiting)}: no explanation of the original "
            f"above (not fitted yet, or failed), so left out here."
        ]
        if waiting
        else []
    )
    whatif_view.render(
        whatif_view.WhatIf(
            prefix="ex_whatif",
            ident=ident,
            pairs=pairs,
            num_nodes=inst.num_nodes,
            edge="bond" if mol is not None else "edge",
            node="atom" if mol is not None else "node",
            thing=thing,
            edge_labels=edge_labels,
            node_labels=node_labels,
            edge_order=edge_order,
            node_order=node_order,
            class_names=_titles(ds),
            focus=pred,
            original=list(p_full),
            k=sel.k,
            methods=[m for m in sel.methods if m in results],
            scores={m: r["scores"] for m, r in results.items()},
            evaluate=what_if_evaluator(key, wb, inst, "bond" if mol is not None else "edge"),
            draw=draw,
            titles=method_title,
            notes=notes,
            ms={m: r["ms"] for m, r in results.items()},
            clickable=mol is None and network_view.live(),
            reads_detached=inst.target is None,
            groups=[] if mol is None else _groups(mol),
        )
    )


def _groups(mol) -> list[tuple[str, tuple[int, ...]]]:
    """The molecule's toxicophore groups to delete in one click (RDKit loads on first use)."""
    from gem_core.api import toxicophore_groups

    return toxicophore_groups(mol)


def _hop_distances(inst: Instance) -> list[int]:
    """Hops from the explained node to every node of the instance (made once per instance and
    server process: :func:`state.view_cache.hop_distances`)."""
    return list(
        hop_distances(inst.dataset, inst.index, inst.num_nodes, int(inst.pairs.shape[1]), inst)
    )


def _within_hops(inst: Instance, hops: int) -> list[int]:
    """Local nodes at most ``hops`` edges from the instance's target node."""
    return [i for i, d in enumerate(_hop_distances(inst)) if d <= hops]


def _close_up(inst: Instance, explained: set[int]) -> list[int]:
    """The close-up's nodes: the explained node's :data:`CLOSE_UP_HOPS`-hop neighbourhood when
    it has at most :data:`CLOSE_UP_MAX` nodes; otherwise (a hub) its neighbours and the
    ``explained`` nodes (the endpoints of every shown explanation's top K), so each panel still
    shows its whole explanation next to the node it explains."""
    near = _within_hops(inst, CLOSE_UP_HOPS)
    if len(near) <= CLOSE_UP_MAX:
        return near
    return sorted(set(_within_hops(inst, 1)) | explained)


def _explained_nodes(sel: Selection, wb: Workbench, inst: Instance, pos: int) -> set[int]:
    """The endpoints of the top-K edges of every chosen method that can explain now (the page's
    cached scores: the panels below read the same cache entries)."""
    nodes: set[int] = set()
    for method in sel.methods:
        try:  # a method that makes people wait (SubgraphX) explains under its panel's spinner
            if method_spec(method).wait_note or not method_ready(wb, method):
                continue
            ranking = ranked_test_instance(
                sel.dataset,
                sel.device,
                method,
                pos,
                explainer_token(wb, method),
                sel.target,
                sel.k,
                inst,
            )
        except Exception:  # the panel below says what went wrong
            continue
        for j in ranking.ranked:
            nodes.update(int(v) for v in inst.pairs[:, j])
    return nodes


def _original_panel(ds, inst, base, look, pred, p_full, pos, close=None) -> None:
    st.subheader("Original", anchor=False)
    draw_panel(base, look, [], None, f"{ds.name}-{pos}-original", "original", "original", close)
    if close is not None:
        st.caption(f"Close-up: {len(close)} of {inst.num_nodes} nodes.")
    st.markdown(f"P({_cls(ds, pred)}) = **{p_full[pred]:.3f}** on the whole computation graph")


def _method_panel(sel, wb, ds, inst, pos, base, look, method, pred, close=None):
    title = method_title(method)
    st.subheader(title, anchor=False)
    try:
        if not method_ready(wb, method):
            _fit_button(wb, method)
            return None
        token = explainer_token(wb, method)
        key = (sel.dataset, sel.device, method, pos, token, sel.target)
        with spinner_on_first(key, f"{title} is explaining…"):
            ranking = ranked_test_instance(*key, sel.k, inst)
        scores, ms, ranked, mask = ranking.scores, ranking.ms, ranking.ranked, ranking.mask
        scores_t = ranking.tensor
        p_sub = probabilities_with(
            ("test", sel.dataset, sel.target, sel.device, pos), wb, inst, mask
        )
    except Exception as exc:
        show_error(exc, f"{title} failed")
        return None
    # widths from the rank within the instance: raw scores are on each method's own scale
    shown = ranking.shown
    pic = base.with_explanation(mask.tolist(), shown, method_color(method))
    draw_panel(
        pic,
        look,
        ranked,
        shown,
        f"{ds.name}-{pos}-{method}-k{sel.k}",
        f"{title}, K = {sel.k}",
        method,
        close,
    )
    if close is not None:
        inside = set(close)
        outside = sum(
            1 for j in ranked if not (pic.pairs[j][0] in inside and pic.pairs[j][1] in inside)
        )
        if outside:
            st.caption(
                f"{outside} of its {len(ranked)} edges lie outside the close-up (turn it "
                f"off to see them)."
            )
    sub_pred = max(range(len(p_sub)), key=p_sub.__getitem__)
    same = "same as on the whole graph" if sub_pred == pred else "differs from the whole graph"
    st.markdown(f"P({_cls(ds, pred)}) = **{p_sub[pred]:.3f}** on the explanation")
    st.caption(
        f"Prediction on the explanation: {_cls(ds, sub_pred)} ({same}) · "
        f"{len(ranked)} edges · explain time {fmt_ms(ms)} on {device_label(sel.device)}"
    )
    tied = ranking.tied
    if bool(tied.any()):
        kept = int((tied & mask).sum())
        st.caption(
            f"⚖ {int(tied.sum())} edges tie at the K cut (score "
            f"{scores[int(tied.nonzero()[0])]:.4g}); "
            + (
                "the one with the lowest edge index was kept"
                if kept == 1
                else f"the {kept} with the lowest edge indices were kept"
            )
            + ". Marked in the edge table."
        )
    out = {
        "scores": scores,
        "shown": shown,
        "ranked": ranked,
        "probability": p_sub[pred],
        "prediction": ds.class_names[sub_pred],
        "ms": ms,
        "tied": tied.tolist(),
    }
    out["reading"] = _reading(
        sel, wb, ds, inst, pos, None if look is None else look.mol, method, scores_t
    )
    return out


def _teacher_scores(sel: Selection, wb: Workbench, pos: int):
    """The distilled teacher's scores of test instance ``pos`` for the readings, or None where
    they would take seconds and nobody asked (a contrast node not compared yet: the button
    under the panels asks, :func:`_teacher_offer`)."""
    token = explainer_token(wb, DEFAULT_TEACHER)
    if pos < len(wb.instances("test")):  # from the split's cached distillation
        return explain_test_instance(
            sel.dataset, sel.device, DEFAULT_TEACHER, pos, token, sel.target
        )[0]
    asked = session_value("ex_teacher_asked") == (sel.dataset, sel.target, pos)
    return contrast_teacher(sel.dataset, sel.device, sel.target, pos, token, compute=asked)


def _teacher_offer(
    sel: Selection, wb: Workbench, inst: Instance, pos: int, results: dict[str, dict]
) -> None:
    """Under the panels of a contrast node whose readings left the distilled teacher out: a
    button that distils the node (once per server process) and adds the comparison."""
    left_out = [
        m
        for m, r in results.items()
        if m != DEFAULT_TEACHER and r.get("reading") and "teacher" not in r["reading"]["facts"]
    ]
    if not left_out:
        return
    st.button(
        f"Compare with the distilled teacher ({inst.num_pairs} model calls)",
        key="ex_teacher_button",
        icon=":material/compare_arrows:",
        on_click=set_session_value,
        args=("ex_teacher_asked", (sel.dataset, sel.target, pos)),
        help=f"The readings can say how many of each explanation's edges the slow, exact "
        f"distillation Gem learns from keeps too. For this node it deletes each of "
        f"its {inst.num_pairs} edges in turn (a second or more), so it runs when "
        f"asked; the result is kept for every visitor of this server.",
    )


def _reading(
    sel: Selection,
    wb: Workbench,
    ds: GemDataset,
    inst: Instance,
    pos: int,
    mol,
    method: str,
    scores: torch.Tensor,
) -> dict | None:
    """The engine's plain-language reading under the panel; its facts go to the JSON export."""
    try:
        teacher = None
        if method != DEFAULT_TEACHER:  # the teacher's scores, from the page's own cache
            teacher = _teacher_scores(sel, wb, pos)
        facts, text = explanation_reading(
            ("test", sel.dataset, sel.target, sel.device, pos, explainer_token(wb, method)),
            method,
            sel.k,
            tuple(ds.class_names),
            "bond" if mol is not None else "edge",
            scores,
            teacher,
            wb,
            inst,
            mol,
            compare_teacher=method == DEFAULT_TEACHER or teacher is not None,
        )
    except Exception as exc:  # words are an aid: never stop the panel
        show_error(exc, "The reading failed")
        return None
    show_reading(text, key=f"ex_reading_{method}")
    return {"text": text, "facts": facts}


run_page(render)
