"""How it works: Granger causality on graphs, with a live BA-shapes node as the example.

The example shows the node's computation graph, each edge's Δ loss, the greedy distillation step
by step (a slider) and, when Gem is fitted, what Gem predicts for the same edges.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import streamlit as st
import torch
from components import charts, graph_view, network_view
from messages import show_error
from state.engine_cache import (
    distillation_trace,
    distilled_topk_and_targets,
    explain_test_instance,
    explainer_token,
    get_workbench,
    method_ready,
)
from state.runtime import run_page
from state.selection import selection
from state.view_cache import graph_layout
from teaching import describe_gem, fmt_change, fmt_small
from theme import method_color

from gem_core.api import TIE_TOL, GemDataset, topk_mask

EXAMPLE_DATASET = "ba_shapes"
MAX_EXAMPLE_EDGES = 30
DELTA_COLOR = "#1f77b4"

INTRO = r"""
A graph neural network predicts a node's class (or a whole graph's) from a **computation graph**:
with 3 message-passing layers, a node's prediction depends only on the nodes at most 3 hops
away and the edges between them. An *explanation* is a small part of that graph (K edges) that
still accounts for the prediction.

Gem borrows **Granger causality**: a cause is something whose removal makes the effect harder
to predict. Treating the trained GNN as a black box, the causal contribution of an edge $e$ is
how much the model's loss against the label $y$ grows when that single edge is deleted:
"""

DISTILL = r"""
Edges with $\Delta(e) > 0$ help the prediction; $\Delta(e) \le 0$ means the model does as well
or better without them. One-edge-at-a-time effects ignore interactions, so Gem **distils** a
ground truth greedily (paper, Appendix C): walk the edges in ascending $\Delta$, try to delete
each one (keeping only the connected part around the explained node), keep the deletion if the
loss does not rise, otherwise put the edge back and give it the weight *new loss − current
loss*. The K heaviest remaining edges are the **distilled explanation**.

Distillation needs many forward passes of the model per instance, so it is too slow to run for
every new question. Gem therefore trains a small **graph auto-encoder** to generate the distilled
explanations from the graph itself; after training, explaining a new instance is one forward
pass, with no per-instance optimisation. Then the model checks Gem's ranking: it is shown the
explanation so far plus each of Gem's next few edges, and the edge that keeps its prediction
goes next (a few batched calls of the model, milliseconds; a deviation from the paper that makes
explanations sufficient more often). What exactly it reads and learns is below, for the
example's dataset.
"""


def _picture(ds: GemDataset, inst, position: int) -> graph_view.GraphPicture:
    pairs = tuple(tuple(p) for p in inst.pairs.t().tolist())
    pos = np.asarray(graph_layout(EXAMPLE_DATASET, position, inst.num_nodes, pairs))
    motif = None if inst.motif_mask is None else inst.motif_mask.tolist()
    return graph_view.node_task_picture(
        pairs,
        inst.node_ids.tolist(),
        ds.graph.y[inst.node_ids].tolist(),
        ds.class_names,
        int(inst.target),
        pos,
        motif,
    )


def _tied_with(pair: int, delta) -> int:
    """How many other edges have the same Δ as ``pair`` (within the distillation's tolerance)."""
    d = float(delta[pair])
    return sum(1 for j, v in enumerate(delta) if j != pair and abs(float(v) - d) <= TIE_TOL)


def _ties_text(pair: int, delta) -> str:
    n = _tied_with(pair, delta)
    return "" if n == 0 else f"tied with {n} other edge{'s' * (n != 1)}"


def _surprise(s, delta, names) -> str:
    """A sentence where a step surprises: a tie decided by edge order, an edge that mattered alone
    but not any more (or the reverse)."""
    notes = []
    n = _tied_with(s.pair, delta)
    if n:
        notes.append(
            f"Its Δ ties with {n} other edge{'s' * (n != 1)}; tied edges are tried in "
            f"edge-index order."
        )
    d = float(delta[s.pair])
    if s.accepted and d > TIE_TOL:
        notes.append(
            f"Alone, removing {names[s.pair]} raised the loss (Δ = {fmt_small(d)}); "
            f"with the edges removed before it already gone, it no longer does, so it "
            f"goes."
        )
    elif not s.accepted and d <= TIE_TOL:
        notes.append(
            f"Alone, removing {names[s.pair]} did not raise the loss; with the edges "
            f"removed before it gone, it now does, so it stays."
        )
    return "" if not notes else " " + " ".join(notes)


def render() -> None:
    sel = selection()
    st.header("How Gem works", anchor="how-it-works")
    st.markdown(INTRO)
    st.latex(
        r"\Delta(e) \;=\; \mathcal{L}\big(f(G^c \setminus \{e\}),\, y\big)"
        r" \;-\; \mathcal{L}\big(f(G^c),\, y\big)"
    )
    st.markdown(DISTILL)

    st.subheader("A live example: one BA-shapes node", anchor="example")
    st.caption(
        "BA-shapes: a random Barabási–Albert graph with 80 five-node 'house' motifs "
        "attached; a node's class is its position in a house (top, middle, bottom) or "
        "base. The right explanation of a house node is its house. This example always "
        "uses BA-shapes, whatever the sidebar dataset."
    )
    try:
        wb = get_workbench(EXAMPLE_DATASET, sel.device)
        ds = wb.dataset
        with st.spinner("Loading the BA-shapes model…"):
            target = wb.target()
        instances = wb.instances("test")
    except Exception as exc:
        show_error(exc, "Cannot load the BA-shapes example")
        return
    small = [p for p, inst in enumerate(instances) if 4 <= inst.num_pairs <= MAX_EXAMPLE_EDGES]
    small = small or list(range(len(instances)))
    pos = st.selectbox(
        "Example node",
        small,
        key="hw_node",
        format_func=lambda p: (
            f"node {instances[p].index} · class "
            f"{ds.class_names[instances[p].y]} · "
            f"{instances[p].num_pairs} edges"
        ),
    )
    inst = instances[pos]
    try:
        with st.spinner("Computing Δ for every edge and the greedy distillation…"):
            trace = distillation_trace(EXAMPLE_DATASET, sel.device, pos, target.digest)
    except Exception as exc:
        show_error(exc, "The distillation failed")
        return
    base = _picture(ds, inst, pos)
    ids = inst.node_ids.tolist()
    names = [f"{ids[u]}–{ids[v]}" for u, v in inst.pairs.t().tolist()]
    delta = trace.delta.tolist()

    st.markdown(
        f"**1 · Δ loss of each edge.** Node {inst.index} (class "
        f"{ds.class_names[inst.y]}); loss on the whole computation graph "
        f"{trace.full_loss:.4f}. Wider coloured edges have a larger positive Δ."
    )
    left, right = st.columns(2)
    with left:
        pic = base.with_explanation(
            [d > 0 for d in delta], [max(d, 0.0) for d in delta], DELTA_COLOR
        )
        pic.legend = [e for e in pic.legend if e[2] != "edge"] + [
            ("Δ > 0 (width = Δ)", DELTA_COLOR, "edge"),
            ("Δ ≤ 0", graph_view.FADED_EDGE, "edge"),
        ]
        network_view.show(pic, 320, key="hw_net_delta")
    with right:
        order = sorted(range(len(delta)), key=lambda j: -delta[j])
        st.plotly_chart(
            charts.edge_bars(
                [names[j] for j in order],
                {"Δ loss": [delta[j] for j in order]},
                {"Δ loss": DELTA_COLOR},
                "Δ loss per edge",
                "Δ loss",
            ),
            key="hw_delta_chart",
            theme=None,
        )

    st.markdown(
        "**2 · The greedy distillation, step by step.** Edges are tried in ascending Δ; "
        "the orange edge is the one tried at this step."
    )
    n_steps = len(trace.steps)
    step = st.slider("Step", min_value=0, max_value=n_steps, value=0, key="hw_step")
    if step == 0:
        mask = torch.ones(inst.num_pairs, dtype=torch.bool)
        st.markdown(
            f"Step 0: the whole computation graph, loss {trace.full_loss:.4f}. "
            f"{n_steps} edges will be tried."
        )
        focus = None
    else:
        s = trace.steps[step - 1]
        mask = s.mask
        focus = s.pair
        before, after = fmt_change(s.loss_before, s.loss_after)
        if s.accepted:
            extra = (
                f" The connectivity rule also dropped {len(s.dropped_with)} edge(s) cut off "
                f"from the node."
                if s.dropped_with
                else ""
            )
            change = "the same loss" if before == after else "no rise"
            verdict = f"loss {before} → {after}: {change}, so the edge **stays removed**.{extra}"
        else:
            verdict = (
                f"loss {before} → {after}: the loss rises by {fmt_small(s.weight)}, so "
                f"the edge is **put back** with that weight."
            )
        st.markdown(
            f"Step {step} of {n_steps}: try removing edge {names[s.pair]} "
            f"(Δ = {fmt_small(delta[s.pair])}); {verdict}{_surprise(s, delta, names)}"
        )
    pic = base.with_explanation(mask.tolist(), [1.0] * inst.num_pairs, method_color("distilled"))
    pic = replace(pic, focus=focus)
    pic.legend = [e for e in pic.legend if e[2] != "edge"] + [
        ("edge still in the graph", method_color("distilled"), "edge"),
        ("removed", graph_view.FADED_EDGE, "edge"),
        ("edge being tried", graph_view.FOCUS_EDGE, "edge"),
    ]
    network_view.show(pic, 320, key="hw_net_step")
    with st.expander("All steps", key="hw_steps"):
        st.dataframe(
            pd.DataFrame(
                [
                    {
                        "step": s.number,
                        "edge": names[s.pair],
                        "Δ": fmt_small(delta[s.pair]),
                        "ties": _ties_text(s.pair, delta),
                        "loss": " → ".join(fmt_change(s.loss_before, s.loss_after)),
                        "removed": s.accepted,
                        "weight": fmt_small(s.weight),
                    }
                    for s in trace.steps
                ]
            ),
            hide_index=True,
            key="hw_steps_df",
            column_config={
                "ties": st.column_config.TextColumn(
                    "ties",
                    help="Other edges with the same Δ (within the distillation's tie "
                    "tolerance): tied edges are tried in edge-index order.",
                )
            },
        )

    k = sel.k if sel.dataset == EXAMPLE_DATASET else wb.spec.default_k
    kept = int(trace.kept.sum())
    weighted = int((trace.weights > 0).sum())
    distilled, learned = distilled_topk_and_targets(
        EXAMPLE_DATASET, sel.device, pos, target.digest, k
    )
    in_top = int(sum(distilled))
    st.markdown(
        f"**3 · The distilled explanation.** {kept} of the {inst.num_pairs} edges survive "
        f"the greedy pass ({weighted} with a weight above 0: their removal raised the "
        f"loss). Cut to K = {k} by the distillation's top-K rule (connected around the "
        f"node), {in_top} edges form the distilled explanation, drawn here."
    )
    pic = base.with_explanation(distilled, [1.0] * inst.num_pairs, method_color("distilled"))
    pic.legend = [e for e in pic.legend if e[2] != "edge"] + [
        (f"distilled top-{k}", method_color("distilled"), "edge"),
        ("other edge", graph_view.FADED_EDGE, "edge"),
    ]
    network_view.show(pic, 320, key="hw_net_distilled")

    st.markdown("**4 · What Gem learned.** " + describe_gem(wb.spec, wb.target_name))
    if not method_ready(wb, "gem"):
        st.info(
            "Gem is not fitted for BA-shapes yet: run the Pipeline page (or pick Gem on "
            "the Explore page) to fit it, then come back.",
            icon=":material/hourglass_empty:",
        )
        return
    try:
        with st.spinner("Gem is explaining…"):
            gem_scores, _ = explain_test_instance(
                EXAMPLE_DATASET, sel.device, "gem", pos, explainer_token(wb, "gem")
            )
    except Exception as exc:
        show_error(exc, "Gem failed")
        return
    order = sorted(range(len(names)), key=lambda j: (-learned[j], j))
    st.plotly_chart(
        charts.edge_bars(
            [names[j] for j in order],
            {
                "what Gem learns (its training target)": [learned[j] for j in order],
                "Gem's score": [float(gem_scores[j]) for j in order],
            },
            {
                "what Gem learns (its training target)": method_color("distilled"),
                "Gem's score": method_color("gem"),
            },
            "What Gem learns for this node vs what it predicts",
            "target / score",
        ),
        key="hw_gem_chart",
        theme=None,
    )
    gem_top = topk_mask(torch.tensor(gem_scores), k)
    shared = int((gem_top & torch.tensor(distilled)).sum())
    st.markdown(
        f"At K = {k}, Gem's top edges and the distilled explanation share "
        f"**{shared} of {in_top}** edges."
    )


run_page(render)
