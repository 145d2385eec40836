"""The "What if…" section shared by the Molecule and Explore pages.

The user deletes edges (bonds) or nodes (atoms, with their bonds) of the instance on the page;
the engine (:func:`gem_core.service.whatif.evaluate_edits`, through the page's cached ``evaluate``)
predicts the edited graph and re-runs the fast explainers on it. This module draws the picker,
the numbers (prediction and probability before → after, the engine's change in loss) and one
panel per explainer, through the page's own ``draw`` callback (RDKit or the network view), and
the one-click comparison "remove the explanation's K edges" vs "remove K random edges".

Nothing is recomputed here: every number comes from the engine's :class:`EditOutcome`.
"""
from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import streamlit as st
import torch

from gem_core.api import (Edit, EditError, method_spec, rank_scores, ranked_pairs)
from state.session import drop_session_value, session_cache, session_value, set_session_value

# (removed pair positions, removed nodes, ranked pair positions, per-pair shown scores or None,
#  method or None, slot) -> draws one picture
DrawFn = Callable[[list[int], list[int], list[int], Optional[list[float]], Optional[str], str],
                  None]
# (edits, methods) -> (original, outcomes), the engine's evaluate_edits behind the app's cache
EvaluateFn = Callable[[tuple[Edit, ...], tuple[str, ...]], tuple[Any, list[Any]]]


def live_methods(methods: Sequence[str]) -> list[str]:
    """The explainers that re-explain on every edit: the batched ones (one forward pass each).

    The others (GNNExplainer, Integrated Gradients, the teacher …) optimise or search per
    instance and re-explain on a click. A fixed rule, not a measured time: the panels an edit
    shows never depend on how busy the machine was when the page first explained (a time limit
    near GNNExplainer's ~0.25 s let its panel come and go, doubling an edit's time when it came).
    """
    return [m for m in methods if method_spec(m).batched]


@dataclass
class WhatIf:
    """What the section needs from its page.

    Attributes:
        prefix: widget-key prefix (``mol_whatif`` / ``ex_whatif``).
        ident: identifies the instance (a new one starts with an empty edit).
        pairs: the instance's pairs ``(u, v)``, in its numbering.
        num_nodes: nodes of the instance.
        edge, node: the words ("bond" / "atom", "edge" / "node").
        thing: what the instance is ("molecule", "computation graph").
        edge_labels, node_labels: what the pickers show, per pair / per node.
        edge_order, node_order: the pickers' order (pair / node positions).
        class_names: the classes as people read them.
        focus: the class whose probability is shown (mutagen; or the original prediction).
        original: the page's class probabilities of the unedited instance.
        k: the page's K.
        methods: the chosen explainers that explain right now (fitted or fit-free).
        scores: each shown explainer's scores on the unedited instance (one per pair).
        evaluate: the engine call (cached by the page's state).
        draw: draws one picture with the page's drawing components.
        titles: method -> title.
        ms: each shown explainer's explain time on this instance (ms), as the page measured it
            (said beside the buttons of those that re-explain on a click, :func:`live_methods`).
        clickable: the page's ``whatif_edited`` drawing reports clicked edges
            (:func:`toggle_edge`); it is then drawn before any edit too.
        groups: groups offered for deletion in one click, ``(title, nodes)`` (a molecule's
            toxicophores, :func:`gem_core.chemistry.labels.toxicophore_groups`).
        reads_detached: whether the model still reads a part an edit cuts off (a graph-level
            model does; a node's prediction only sees the explained node's part).
        value_name: a regressor's outcome ("logp"): the section then shows its value before →
            after (``original_value``, the engine's :attr:`EditOutcome.value`) instead of a
            class probability, and Δ loss is the squared change of the value. None: classes.
        original_value: a regressor's value on the whole instance.
    """

    prefix: str
    ident: str
    pairs: list[tuple[int, int]]
    num_nodes: int
    edge: str
    node: str
    thing: str
    edge_labels: list[str]
    node_labels: list[str]
    edge_order: list[int]
    node_order: list[int]
    class_names: list[str]
    focus: int
    original: list[float]
    k: int
    methods: list[str]
    scores: dict[str, list[float]]
    evaluate: EvaluateFn
    draw: DrawFn
    titles: Callable[[str], str]
    notes: list[str] = field(default_factory=list)
    hint: str = ""
    ms: dict[str, float] = field(default_factory=dict)
    clickable: bool = False
    groups: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)
    reads_detached: bool = True
    value_name: Optional[str] = None
    original_value: Optional[float] = None

    def key(self, name: str) -> str:
        return f"{self.prefix}_{name}_{self.ident}"

    @property
    def regression(self) -> bool:
        """Whether the model predicts a number (:attr:`value_name`), not classes."""
        return self.value_name is not None


def _value(outcome: Any) -> float:
    return float("nan") if outcome.value is None else float(outcome.value)


def _value_numbers(w: WhatIf, container_key: str, original: Any, outcome: Any) -> None:
    """A regressor's value before → after, its change and the engine's Δ loss (the squared
    change)."""
    name = w.value_name
    before, after = _value(original), _value(outcome)
    with st.container(key=container_key):
        c1, c2, c3 = st.columns([1, 1.3, 1])
        c1.metric(str(name), f"{before:.4g} → {after:.4g}",
                  help=f"The model's {name} on the whole {w.thing} → on the edited one.")
        c2.metric("Change", f"{after - before:+.4g}")
        c3.metric("How much worse the model does", f"{outcome.delta_loss:+.3g}",
                  help=f"Δ loss: the squared change of {name} that the edit causes (the "
                       f"model's own value on the whole {w.thing} is the reference). For one "
                       f"deleted {w.edge} it is exactly the Granger Δ of that {w.edge}, the "
                       f"number Gem's teacher (the distillation) ranks {w.edge}s by.")
        st.markdown(f"{name} {before:.4g} → **{after:.4g}**: {_moves(before, after)}.")


def _moves(before: float, after: float) -> str:
    change = after - before
    return "the value stays the same" if change == 0 else \
        f"the value {'rises' if change > 0 else 'falls'} by {abs(change):.3g}"


def toggle_edge(prefix: str, ident: str, j: int) -> None:
    """Delete pair ``j``, or restore it when it is deleted: a click in the drawing. Runs as a
    widget callback, before the rerun, so it may set the edge picker's state."""
    key = f"{prefix}_edges_{ident}"
    chosen = list(session_value(key, []))
    set_session_value(key, [x for x in chosen if x != j] if j in chosen else [*chosen, j])


def ident_of(*parts: Any) -> str:
    """A short, stable widget-key suffix for an instance."""
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:10]


def edit_token(edges: Sequence[int], nodes: Sequence[int]) -> str:
    """The edit in a CSS-class-safe word (browser tests and the bench wait for it)."""
    return ("e" + "_".join(map(str, sorted(edges))) if edges else "") + \
        ("n" + "_".join(map(str, sorted(nodes))) if nodes else "") or "none"


def bond_labels(mol, pairs: Sequence[tuple[int, int]]) -> tuple[list[str], list[str]]:
    """The engine's readable labels of a molecule's bonds ("C4–N5 (aromatic nitro)") and atoms
    ("N5", "H10 (on C0)"); loaded on first use (RDKit)."""
    from gem_core.api import bond_labels as labels

    return labels(mol, pairs)


def heavy_first(mol, pairs: Sequence[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """The pickers' order: heavy-atom bonds and heavy atoms first (the engine's)."""
    from gem_core.api import heavy_first as order

    return order(mol, pairs)


_TOKEN = re.compile(r"[A-Za-z]*\d+|[A-Za-z]+")


def _name(label: str) -> tuple[str, str, str]:
    """A node label's whole name ("C4" of "C4 (aromatic nitro)", "H10" of "H10 (on C0)", "325"),
    lower-cased, with its letters and its number."""
    found = _TOKEN.match(label.strip())
    name = found.group(0).lower() if found else label.strip().lower()
    letters = name.rstrip("0123456789")
    return name, letters, name[len(letters):]


def _node_matches(token: str, name: tuple[str, str, str]) -> bool:
    """Whether a search word names a node as a whole: "C4" is C4 (never C14 or C40), "4" is
    the node numbered 4, "N" every nitrogen."""
    full, letters, number = name
    if token == full:
        return True
    if token.isdigit():
        return number != "" and int(token) == int(number)
    return token.isalpha() and token == letters


def search(query: str, pairs: Sequence[tuple[int, int]], node_labels: Sequence[str],
           edge_labels: Sequence[str]) -> tuple[list[int], list[int]]:
    """The pair and node positions a picker's search finds: every word of ``query`` must name an
    end of the pair as a whole ("C4", "4", "N"; never a part of "C40" or of "3–25") or be a word of
    its label ("nitro"); a node must be named by one of the words. Empty query: everything."""
    tokens = [t.lower() for t in _TOKEN.findall(query)]
    if not tokens:
        return list(range(len(pairs))), list(range(len(node_labels)))
    names = [_name(x) for x in node_labels]
    edges = []
    for j, (u, v) in enumerate(pairs):
        words = set(re.findall(r"[a-z]+", edge_labels[j].lower()))
        if all(_node_matches(t, names[u]) or _node_matches(t, names[v])
               or (t.isalpha() and t in words) for t in tokens):
            edges.append(j)
    nodes = [i for i, n in enumerate(names) if any(_node_matches(t, n) for t in tokens)]
    return edges, nodes


def ranked_after(scores: torch.Tensor, k: int) -> tuple[list[int], list[float]]:
    """Top-``k`` pair positions of scores given per *original* pair (NaN where deleted), best
    first, ties to the lower position; and every pair's rank score (0 where deleted)."""
    s = torch.as_tensor(scores, dtype=torch.float64)
    kept = torch.nonzero(~s.isnan()).view(-1)
    if kept.numel() == 0:
        return [], [0.0] * s.numel()
    sub = s[kept]
    ranked = kept[ranked_pairs(sub, k)].tolist()
    shown = torch.zeros(s.numel(), dtype=torch.float64)
    shown[kept] = rank_scores(sub).double()
    return ranked, shown.tolist()


def random_positions(num_pairs: int, k: int, seed: int) -> list[int]:
    """``k`` pair positions drawn uniformly without replacement, reproducibly from ``seed``."""
    return sorted(random.Random(int(seed)).sample(range(num_pairs), min(k, num_pairs)))


def _flip(w: WhatIf, before: list[float], after: list[float]) -> tuple[int, int, str]:
    """(class before, class after, sentence) for before → after."""
    a = max(range(len(before)), key=before.__getitem__)
    b = max(range(len(after)), key=after.__getitem__)
    names = w.class_names
    if a == b:
        return a, b, f"the prediction stays **{names[b]}**"
    return a, b, f"the prediction **flips** from {names[a]} to **{names[b]}**"


def _numbers(w: WhatIf, container_key: str, original: list[float], outcome) -> None:
    """Prediction, P(focus class) before → after and the engine's Δ loss."""
    focus = w.class_names[w.focus]
    before, after = original[w.focus], outcome.probabilities[w.focus]
    with st.container(key=container_key):
        c1, c2, c3 = st.columns([1, 1.3, 1])
        c1.metric(f"P({focus})", f"{before:.3f} → {after:.3f}",
                  help=f"The model's probability of {focus} on the whole {w.thing} → on the "
                       f"edited one.")
        a, b, sentence = _flip(w, original, outcome.probabilities)
        c2.metric("Prediction", w.class_names[b],
                  delta=f"flipped (was {w.class_names[a]})" if a != b else "unchanged",
                  delta_color="off", delta_arrow="off")
        c3.metric("How much worse the model does", f"{outcome.delta_loss:+.3f}",
                  help=f"Δ loss: the change in loss (cross-entropy against the model's own prediction "
                       f"on the whole {w.thing}) that the edit causes. For one deleted "
                       f"{w.edge} it is exactly the Granger Δ of that {w.edge}, the number Gem's "
                       f"teacher (the distillation) ranks {w.edge}s by. Positive: what was "
                       f"deleted supported the prediction.")
        st.markdown(f"P({focus}) {before:.3f} → **{after:.3f}**: {sentence}.")


def _picked(w: WhatIf) -> tuple[list[int], list[int]]:
    edges = [int(j) for j in session_value(w.key("edges"), []) or []]
    nodes = [int(i) for i in session_value(w.key("nodes"), []) or []]
    return edges, nodes


def _undo(w: WhatIf) -> None:
    set_session_value(w.key("edges"), [])
    set_session_value(w.key("nodes"), [])
    drop_session_value(w.key("compare"))
    drop_session_value(w.key("slow"))


def _delete_nodes(w: WhatIf, nodes: Sequence[int]) -> None:
    """A button's callback: add ``nodes`` to the nodes to delete (before the rerun)."""
    picked = [int(i) for i in session_value(w.key("nodes"), []) or []]
    set_session_value(w.key("nodes"), picked + [int(i) for i in nodes if int(i) not in picked])


def _names(w: WhatIf, nodes: Sequence[int]) -> str:
    """Nodes by their short names: "N5, O6, O7"."""
    return ", ".join(w.node_labels[i].split(" (")[0] for i in nodes)


def _edit(w: WhatIf, edges: Sequence[int], nodes: Sequence[int]) -> Edit:
    return Edit.of([w.pairs[j] for j in edges], nodes)


def render(w: WhatIf) -> None:
    """The whole section, as a Streamlit fragment: an edit reruns this section alone (the
    panels above it, their readings and tables are neither recomputed nor re-sent), so the
    edited pictures repaint in about the time the model takes to answer."""
    _section(w)


@st.fragment
def _section(w: WhatIf) -> None:
    """The section's layout is the same before and after any edit: what an edit adds or drops
    (the search's count, the group buttons, the detached-part warning) goes into slots that are
    always there, so the drawn views below keep their place in the page's tree and are updated
    in place; a shifted view is rebuilt by the browser (0.9 s instead of 0.4 s per edit)."""
    st.subheader(f"What if these {w.edge}s were gone?", anchor=False)
    st.caption(f"Delete {w.edge}s, or {w.node}s with all their {w.edge}s, and see what the model "
               f"and the explainers say about the {w.thing} that is left. Deleted {w.edge}s "
               f"stay drawn where they were, dashed in pink, so before and after line up. "
               f"Nothing is retrained: the same model is asked again." + (
                   f" {w.hint}" if w.hint else ""))
    edge_options, node_options = _find(w)
    c1, c2, c3 = st.columns([3, 2, 1], vertical_alignment="bottom")
    # no "Select all matches" and no fuzzy typing: one click picks one item, and the search box
    # above finds whole labels
    c1.multiselect(f"{w.edge.capitalize()}s to delete", edge_options,
                   format_func=lambda j: w.edge_labels[j], key=w.key("edges"),
                   placeholder=f"Pick {w.edge}s", filter_mode=None, select_all=False)
    c2.multiselect(f"{w.node.capitalize()}s to delete (with their {w.edge}s)", node_options,
                   format_func=lambda i: w.node_labels[i], key=w.key("nodes"),
                   placeholder=f"Pick {w.node}s", filter_mode=None, select_all=False)
    edges, nodes = _picked(w)
    c3.button("Undo all", key=w.key("undo"), on_click=_undo, args=(w,),
              icon=":material/undo:", width="stretch",
              disabled=not (edges or nodes or session_value(w.key("compare"))))
    with st.container():  # slot: the one-click group deletions
        groups = [(t, g) for t, g in w.groups if not set(g) <= set(nodes)]
        if groups:
            cols = st.columns(min(3, len(groups)))
            for n, (title, group) in enumerate(groups):
                cols[n % len(cols)].button(
                    f"Remove the {title[0].lower() + title[1:]} group ({_names(w, group)})",
                    key=w.key(f"group_{'_'.join(map(str, group))}"), on_click=_delete_nodes,
                    args=(w, group), icon=":material/remove_circle_outline:",
                    help=f"Delete its {w.node}s other than carbon, with their {w.edge}s; the "
                         f"carbon skeleton it sits on stays.")
    result, detached = st.container(), st.container()  # slots: the numbers, a detached part
    # the panels' grid has as many columns before the first edit as after it: the edited
    # picture keeps its size and place
    cols = st.columns(min(3, 1 + len(w.methods)))
    if not edges and not nodes:
        focus = w.class_names[w.focus]
        with result, st.container(key=f"{w.prefix}_result_none"):
            if w.regression:
                st.metric(str(w.value_name), f"{float(w.original_value or 0.0):.4g}",
                          help=f"No edit: the whole {w.thing}, as above.")
            else:
                st.metric(f"P({focus})", f"{w.original[w.focus]:.3f}",
                          help=f"No edit: the whole {w.thing}, as above.")
            st.caption(f"No edit yet: the original {w.thing}. Pick {w.edge}s or {w.node}s above"
                       + (f", or click an {w.edge} in the drawing." if w.clickable else "."))
        if w.clickable:
            with cols[0], st.container(border=True, key=f"{w.prefix}_panel_edited"):
                st.markdown(f"**The {w.thing}**: click an {w.edge} to delete it")
                w.draw([], [], [], None, None, "whatif_edited")
    else:
        _edited(w, edges, nodes, result, detached, cols)
    _compare(w)


def _find(w: WhatIf) -> tuple[list[int], list[int]]:
    """The search box over the pickers: the options it finds (in the pickers' order), and the
    ones already picked."""
    example = (f" (e.g. {_name(w.node_labels[w.node_order[0]])[0].upper()})"
               if w.node_order else "")
    query = st.text_input(
        f"Find {w.edge}s and {w.node}s by {w.node}", key=w.key("find"),
        placeholder=f"{w.node.capitalize()} names or numbers{example}, or a group word",
        help=f"Each word must name a whole {w.node} ('C4' finds the {w.edge}s of C4, never "
             f"those of C14 or C40; '4' the {w.node} numbered 4; 'N' every nitrogen) or be a "
             f"word of the {w.edge}'s label ('nitro'). The pickers below then list only what it "
             f"finds; a click picks one item.")
    edges, nodes = search(query, w.pairs, w.node_labels, w.edge_labels)
    picked_edges, picked_nodes = _picked(w)
    found_e, found_n = set(edges) | set(picked_edges), set(nodes) | set(picked_nodes)
    words = " ".join(_TOKEN.findall(query))
    with st.container():  # slot: what the search found
        if words:
            st.caption(f"“{words}” finds {len(edges)} {w.edge}{'s' if len(edges) != 1 else ''} "
                       f"and {len(nodes)} {w.node}{'s' if len(nodes) != 1 else ''}.")
    return ([j for j in w.edge_order if j in found_e], [i for i in w.node_order if i in found_n])


def _edited(w: WhatIf, edges: list[int], nodes: list[int], result: Any, detached: Any,
            cols: Sequence[Any]) -> None:
    """The edit's numbers (into the ``result`` slot), a detached part's warning (``detached``)
    and the panels (into ``cols``: the edited instance, then each live explainer)."""
    token = edit_token(edges, nodes)
    live = live_methods(w.methods)
    slow = [m for m in w.methods if m not in live]
    try:
        original, (out,) = w.evaluate((_edit(w, edges, nodes),), tuple(live))
    except EditError as exc:
        result.warning(str(exc), icon=":material/warning:")
        return
    removed = [j for j in range(len(w.pairs)) if not bool(out.kept[j])]
    if out.error:
        with result, st.container(key=f"{w.prefix}_result_{token}"):
            st.warning(out.error, icon=":material/link_off:")
        with cols[0], st.container(border=True, key=f"{w.prefix}_panel_edited"):
            st.markdown(f"**The edited {w.thing}**")
            w.draw(removed, nodes, [], None, None, "whatif_edited")
        return
    with result:
        if w.regression:
            _value_numbers(w, f"{w.prefix}_result_{token}", original, out)
        else:
            _numbers(w, f"{w.prefix}_result_{token}", original.probabilities, out)
    if out.detached:
        with detached:
            _detached(w, out.detached)
    requested = session_value(w.key("slow"), {}).get(token, [])
    extra = {}
    for m in [m for m in slow if m in requested]:
        try:
            with st.spinner(f"{w.titles(m)} is explaining the edited {w.thing}…"):
                _, (o,) = w.evaluate((_edit(w, edges, nodes),), (m,))
            extra[m] = o.scores[m]
        except Exception as exc:  # a slow explainer failing never stops the section
            st.error(f"{w.titles(m)}: {exc}", icon=":material/error:")
    panels = ["edited", *live, *extra]
    for i, panel in enumerate(panels):
        with cols[i % len(cols)], st.container(border=True, key=f"{w.prefix}_panel_{panel}"):
            if panel == "edited":
                st.markdown(f"**The edited {w.thing}**")
                w.draw(removed, nodes, [], None, None, "whatif_edited")
                st.caption(f"{len(removed)} of {len(w.pairs)} {w.edge}s deleted"
                           + (f" with {len(nodes)} {w.node}{'s' if len(nodes) > 1 else ''}"
                              if nodes else "") + " (dashed pink)."
                           + (f" Click an {w.edge} to delete it, a dashed one to restore it."
                              if w.clickable else ""))
                continue
            scores = out.scores[panel] if panel in out.scores else extra[panel]
            ranked, shown = ranked_after(scores, w.k)
            st.markdown(f"**{w.titles(panel)}**, top {len(ranked)} after the edit")
            w.draw(removed, nodes, ranked, shown, panel, f"whatif_{panel}")
            before = w.scores.get(panel)
            if before is not None:
                was, _ = ranked_after(torch.tensor(before, dtype=torch.float64), w.k)
                gone = len(set(was) & set(removed))
                same = len(set(ranked) & set(was))
                st.caption((f"This {w.edge} was{'' if same else ' not'}" if len(ranked) == 1 else
                            f"{same} of these {len(ranked)} {w.edge}s "
                            f"{'was' if same == 1 else 'were'}")
                           + f" in its top {len(was)} before the edit"
                           + (f"; the edit deleted {gone} of that top {len(was)}."
                              if gone else "."))
    waiting = [m for m in slow if m not in extra]
    if waiting:
        took = "; ".join(f"{w.titles(m)} took {w.ms[m] / 1000:.1f} s on this {w.thing}"
                         for m in waiting if m in w.ms)
        st.caption("These explain one instance at a time: re-run on a click only, so that an edit "
                   "repaints at once"
                   + (f": {took}." if took else "."))
        bc = st.columns(max(3, len(waiting)))
        for col, m in zip(bc, waiting):
            if col.button(f"Re-explain with {w.titles(m)}", key=w.key(f"slow_{m}"),
                          icon=":material/play_arrow:"):
                session_cache(w.key("slow")).setdefault(token, []).append(m)
                st.rerun()
    for note in w.notes:
        st.caption(note)


def _detached(w: WhatIf, nodes: Sequence[int]) -> None:
    """Say that the edit cut a part off (still in the graph) and offer to delete it."""
    n = len(nodes)
    with st.container(key=f"{w.prefix}_detached"):
        read = (f"but still part of the graph the model reads. Remove it to ask about the "
                f"{w.thing} without it." if w.reads_detached else
                "which the explained node's prediction no longer sees.")
        st.warning(f"This edit leaves a detached fragment: {_names(w, nodes)} ({n} {w.node}"
                   f"{'s' if n != 1 else ''}) no longer connected to the rest of the {w.thing}, "
                   + read, icon=":material/link_off:")
        st.button(f"Remove the detached part ({_names(w, nodes)})", key=w.key("detached"),
                  on_click=_delete_nodes, args=(w, list(nodes)),
                  icon=":material/content_cut:")


def _compare(w: WhatIf) -> None:
    """One click: the explanation's K edges vs K random edges deleted, side by side."""
    shown = [m for m in w.methods if m in w.scores]
    if not shown or not w.pairs:
        return
    st.markdown(f"**The explanation vs chance.** Delete an explainer's top-{w.k} {w.edge}s "
                f"from the original {w.thing} (the edit above is not applied here), or {w.k} "
                f"{w.edge}s drawn at random, and compare what the model says: an explanation "
                f"that captures what the prediction rests on should change it more than chance "
                f"(the paper's fidelity, on one {w.thing}).")
    c1, c2, _ = st.columns([2, 1, 2], vertical_alignment="bottom")
    method = c1.selectbox("Explainer", shown, format_func=w.titles, key=w.key("cmp_method"))
    seed = int(c2.number_input("Random seed", min_value=0, max_value=10**6, value=0, step=1,
                               key=w.key("cmp_seed"),
                               help=f"The random {w.edge}s are drawn from this seed: the same "
                                    f"seed always draws the same {w.edge}s."))
    if st.button(f"Remove the explanation's {w.k} {w.edge}s vs {w.k} random {w.edge}s",
                 key=w.key("cmp_go"), icon=":material/compare_arrows:"):
        set_session_value(w.key("compare"), True)
    if not session_value(w.key("compare")):
        return
    ranked, _ = ranked_after(torch.tensor(w.scores[method], dtype=torch.float64), w.k)
    rand = random_positions(len(w.pairs), len(ranked), seed)
    edits = (Edit.of([w.pairs[j] for j in ranked]), Edit.of([w.pairs[j] for j in rand]))
    try:
        original, outs = w.evaluate(edits, ())
    except EditError as exc:
        st.warning(str(exc), icon=":material/warning:")
        return
    focus = w.class_names[w.focus]
    left, right = st.columns(2)
    for col, (name, picked, out) in zip(
            (left, right),
            ((f"Without {w.titles(method)}'s top {len(ranked)} {w.edge}s", ranked, outs[0]),
             (f"Without {len(rand)} random {w.edge}s (seed {seed})", rand, outs[1]))):
        slot = "explanation" if picked is ranked else "random"
        with col, st.container(border=True, key=f"{w.prefix}_cmp_{slot}"):
            st.markdown(f"**{name}**")
            w.draw(picked, [], [], None, None, f"whatif_cmp_{slot}")
            st.caption(", ".join(w.edge_labels[j] for j in picked) + " deleted.")
            if out.error:
                st.warning(out.error, icon=":material/link_off:")
                continue
            if w.regression:
                before, after = _value(original), _value(out)
                st.markdown(f"{w.value_name} {before:.4g} → **{after:.4g}**: "
                            f"{_moves(before, after)}. How much worse the model does: "
                            f"**{out.delta_loss:+.3g}**.")
                continue
            _, _, sentence = _flip(w, original.probabilities, out.probabilities)
            st.markdown(f"P({focus}) {original.probabilities[w.focus]:.3f} → "
                        f"**{out.probabilities[w.focus]:.3f}**: {sentence}. "
                        f"How much worse the model does: **{out.delta_loss:+.3f}**.")
    if w.regression:
        st.caption(f"How much worse the model does (Δ loss): the square of how far its "
                   f"{w.value_name} moves from its value on the whole {w.thing} "
                   f"({_value(original):.4g}) when these {w.edge}s are gone; the larger, the "
                   f"more the prediction rested on them.")
        return
    answer = w.class_names[max(range(len(original.probabilities)),
                               key=original.probabilities.__getitem__)]
    st.caption(f"How much worse the model does (Δ loss): how much its loss for its answer on "
               f"the whole {w.thing} ({answer}) rises when these {w.edge}s are gone; the "
               f"larger, the more the prediction rested on them.")
