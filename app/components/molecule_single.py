"""The "One molecule" tab of the Molecule page: one SMILES, its prediction, each explainer's
bonds (drawn, tabled, read in words, downloadable) and the What-if section.

Scores are kept per molecule and method for the server process (every session shares them), so
changing K only re-thresholds them.
"""
from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from components import molecule_view, whatif_view
from components.molecule_domain import render_neighbours
from components.molecule_common import (MUTAGEN, SPEC, class_names, display, first_class,
                                        focus_words, literal, load_model, model_key, offer_fits,
                                        on_explanation_alone, regression, toxicophores)
from gem_core.api import (DEFAULT_TEACHER, EXAMPLE_SMILES, MoleculeError, Workbench,
                          fragment_smiles, method_spec, smiles_to_instance,
                          ensure_depiction, rank_scores, suggested_k, toxicophore_groups)
from messages import device_label, show_error, show_reading
from state.engine_cache import (explained_molecule, explainer_token, explanation_reading,
                                spinner_on_first, what_if_evaluator)
from state.session import (prepare_molecule_k, prepare_smiles_box, set_molecule_example,
                           submit_molecule, submitted_molecule)
from state.view_cache import kept_with
from teaching import describe_gem
from theme import fmt_ms, method_title

# A few examples as buttons: nitro- and amino-aromatics and a non-mutagen.
EXAMPLES = {
    "Nitrobenzene": EXAMPLE_SMILES.get("Nitrobenzene (nitro-aromatic)", "O=[N+]([O-])c1ccccc1"),
    "2-Nitrofluorene": EXAMPLE_SMILES.get("2-Nitrofluorene (nitro-aromatic)",
                                          "O=[N+]([O-])c1ccc2c(c1)Cc1ccccc1-2"),
    "2-Aminoanthracene": EXAMPLE_SMILES.get("2-Aminoanthracene (aromatic amine)",
                                            "Nc1ccc2cc3ccccc3cc2c1"),
    "Benzoic acid (non-mutagen)": EXAMPLE_SMILES.get("Benzoic acid (non-mutagen)",
                                                     "OC(=O)c1ccccc1"),
}


def _ready_methods(model: Workbench, methods: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """Methods to explain with now, and methods waiting for a fit; a classifier's method
    (its objective reads class probabilities) is in neither for a regressor (see
    :func:`_left_out`)."""
    ready, waiting = [], []
    for m in methods:
        if not (model.regression and method_spec(m).classifiers_only):
            (ready if model.is_fitted(m) else waiting).append(m)
    return ready, waiting


def _left_out(model: Workbench, methods: list[str]) -> None:
    """One caption naming the chosen methods a regressor cannot be explained with."""
    out = [m for m in methods if model.regression and method_spec(m).classifiers_only]
    if out:
        st.caption(f"{', '.join(method_title(m) for m in out)}: left out for this model, "
                   f"which predicts a number (their objectives read class probabilities).")


def _explained(model: Workbench, mol, methods: list[str], salts: str):
    """Prediction + scores for the molecule (K-independent), computed once per server process
    for every session that asks for the same molecule, methods and model."""
    tokens = tuple(explainer_token(model, m) for m in methods)
    key = (mol.input_smiles, salts, tuple(methods), model_key(model), str(model.device), tokens)
    with spinner_on_first(("molecule", *key), "Predicting and explaining…"):
        return explained_molecule(*key, model, mol)


def _k_slider(mol) -> int:
    """One K for this molecule: a quarter of its bonds by default, never more than it has."""
    bonds = mol.instance.num_pairs
    prepare_molecule_k(mol.input_smiles, bonds, suggested_k(bonds))
    return int(st.slider(
        "K (explanation bonds)", min_value=1, max_value=max(1, bonds), key="mol_k",
        disabled=bonds <= 1,
        help=f"How many bonds each explanation keeps; this molecule has {bonds} (hydrogens "
             f"included). The default is a quarter of them; the paper's grid for its test "
             f"molecules is {', '.join(map(str, SPEC.k_grid))}."))


def render_single(sel, opts: dict) -> None:
    """The "One molecule" tab: a SMILES in, its prediction and each explainer's panel out."""
    st.markdown("**Examples**")
    cols = st.columns(len(EXAMPLES))
    for col, (name, smi) in zip(cols, EXAMPLES.items()):
        col.button(name, key=f"mol_example_{name.split()[0].lower()}",
                   on_click=set_molecule_example, args=(smi,), width="stretch")
    c1, c2 = st.columns([5, 1], vertical_alignment="bottom")
    prepare_smiles_box()
    c1.text_input("SMILES", key="mol_smiles", placeholder="e.g. O=[N+]([O-])c1ccccc1",
                  on_change=submit_molecule)
    c2.button("Explain", key="mol_explain", type="primary", on_click=submit_molecule,
              width="stretch", icon=":material/search:")
    submitted = submitted_molecule()
    if submitted is None:
        st.caption("Type or paste a SMILES and press Explain, or pick an example.")
        return
    try:
        mol = smiles_to_instance(submitted, salts=opts["salts"])
    except MoleculeError as exc:
        st.error(literal(exc), icon=":material/error:")
        return
    for w in mol.warnings:
        st.warning(literal(w), icon=":material/warning:")
    model = load_model(sel.device)
    if model is None:
        return
    methods = list(sel.methods) or ["gem"]
    try:
        ready, waiting = _ready_methods(model, tuple(methods))
        # the teachers of the chosen methods (and the reading's), to say how far a fast
        # explainer departs from them
        teachers = {method_spec(m).teacher for m in ready} | {DEFAULT_TEACHER}
        extra = sorted(t for t in teachers - {None} if t not in ready)
        res = _explained(model, mol, ready + extra if ready else [], opts["salts"])
    except Exception as exc:
        show_error(exc, "Prediction failed")
        return

    ensure_depiction(res.molecule.mol)  # one 2D layout, shared by every picture below
    with st.container(key="mol_prediction"):
        c1, c2, c3 = st.columns(3)
        if regression(model):
            c1.metric(f"Predicted {first_class(model)}", f"{res.value:.4g}")
            _test_figures(c2, model)
        else:
            c1.metric("Prediction", display(res.label_name))
            c2.metric(focus_words(model), f"{res.probabilities[MUTAGEN]:.3f}")
        c3.metric("Atoms (with H) / bonds", f"{mol.num_atoms} / {mol.instance.num_pairs}")
        st.caption(f"{mol.formula}" + (f" · {mol.name}" if mol.name else "")
                   + " · canonical SMILES (RDKit), copy it from the box:")
        st.code(mol.smiles, language=None)
    render_neighbours(model, mol)
    k = _k_slider(mol)
    # a model of a number: the mutagenicity alerts are not its question (nothing said of them)
    tox = toxicophores(mol) if opts["alerts"] else {"classes": [], "pairs": []}
    if opts["alerts"] and tox["classes"]:
        st.markdown("**Toxicophores** (Kazius et al. 2005; when shown, their atoms get a pale "
                    "teal halo, while the explanation colours bonds in orange): "
                    + ", ".join(tox["classes"]) + f" — {len(tox['pairs'])} bonds.")
    elif opts["alerts"]:
        st.caption("None of the encoded mutagenicity toxicophores (Kazius et al. 2005) is in "
                   "this molecule.")
    if mol.instance.num_pairs <= k:
        st.info(f"K = {k} keeps all {mol.instance.num_pairs} bonds of this molecule: every "
                f"explanation is the whole molecule; the shading still ranks the bonds.")
    offer_fits(model, waiting)
    _left_out(model, methods)

    shown = [m for m in ready if m in res.scores]
    for m in ready:
        if m in res.errors:
            st.error(f"{method_title(m)}: {res.errors[m]}", icon=":material/error:")
    outline = tox["pairs"] if opts["outline"] else []
    panels = ["molecule", *shown]
    cols = st.columns(min(3, len(panels)))
    payload = {}
    for i, m in enumerate(panels):
        with cols[i % len(cols)], st.container(border=True, key=f"mol_panel_{m}"):
            if m == "molecule":
                _molecule_panel(model, res, opts, outline)
            else:
                payload[m] = _panel(model, res, m, k, opts, outline, tox["pairs"])
    if shown:
        with st.expander("Bond scores", key="mol_bond_table"):
            _bond_table(res, shown, k)
        with st.expander("Atom scores", key="mol_atom_table"):
            _atom_table(res, shown, k)
        for method, checked in (("gem", False), ("gem_check", True)):
            if method in shown:
                with st.expander(f"How {method_title(method)} chose these bonds",
                                 key=f"mol_{method}_how"):
                    st.markdown(describe_gem(model.spec, model.target_name, molecule_words=True,
                                             checked=checked))
        st.download_button("Download explanation (JSON)",
                           lambda: json.dumps(payload[shown[0]] if len(shown) == 1 else
                                              {"smiles": mol.input_smiles, "k": k,
                                               "methods": payload}, indent=2),
                           file_name="gem-molecule.json", mime="application/json",
                           key="mol_download_json", icon=":material/download:")
    with st.container(border=True, key="mol_whatif"):
        _what_if(model, sel, res, shown, waiting, k, opts)


def _test_figures(col, model: Workbench) -> None:
    """A regressor's held-out R² (RMSE and MAE in its help), as the Your data page gives them:
    how far to trust the value."""
    from gem_core.api import user_model

    test = user_model(model.name).metrics.get("test", {})

    def fmt(value, spec: str) -> str:
        return "n/a" if value is None else format(value, spec)

    col.metric("Test R² of the model", fmt(test.get("r2"), ".3f"),
               help=f"On its {test.get('n', 0)} test molecules: RMSE {fmt(test.get('rmse'), '.3g')}, "
                    f"mean absolute error {fmt(test.get('mae'), '.3g')} (units of "
                    f"{first_class(model)}).")


def _what_if(model: Workbench, sel, res, shown: list[str], waiting: list[str], k: int,
             opts: dict) -> None:
    """Delete bonds or atoms and see the prediction and the explanations of what is left."""
    mol = res.molecule
    pairs = [tuple(p) for p in mol.pairs]
    key = ("molecule", mol.input_smiles, opts["salts"], model_key(model), sel.device)
    edge_labels, node_labels = kept_with(res, ("bond labels",),
                                         lambda: whatif_view.bond_labels(mol.mol, pairs))
    edge_order, node_order = kept_with(res, ("heavy first",),
                                       lambda: whatif_view.heavy_first(mol.mol, pairs))

    def draw(removed, atoms, ranked, shown_scores, method, slot) -> None:
        top = [pairs[j] for j in ranked]
        shades = None if shown_scores is None else [shown_scores[j] for j in ranked]
        key = ("edited", tuple(removed), tuple(atoms), tuple(top),
               None if shades is None else tuple(shades), opts["hide_h"], opts["numbers"])
        svg = kept_with(res, key, lambda: molecule_view.edited_molecule_svg(
            mol.mol, [pairs[j] for j in removed], atoms, top, shades, size=(440, 360),
            hide_hydrogens=opts["hide_h"], atom_indices=opts["numbers"]))
        st.image(svg, width="stretch")

    notes = [f"{method_title(m)} is not fitted yet (fit it above) and is left out here."
             for m in waiting]
    whatif_view.render(whatif_view.WhatIf(
        prefix="mol_whatif", ident=whatif_view.ident_of(*key), pairs=pairs,
        num_nodes=mol.instance.num_nodes, edge="bond", node="atom", thing="molecule",
        edge_labels=edge_labels, node_labels=node_labels, edge_order=edge_order,
        node_order=node_order, class_names=[display(c) for c in class_names(model)],
        focus=MUTAGEN, original=list(res.probabilities), k=k, methods=list(shown),
        scores={m: [float(v) for v in res.scores[m]] for m in shown},
        evaluate=what_if_evaluator(key, model, mol.instance, "bond"), draw=draw,
        titles=method_title, notes=notes, ms=dict(res.ms_per_instance),
        groups=toxicophore_groups(mol.mol),
        hint="Atoms are numbered as in the bond table ('Show atom numbers' above draws them); "
             "hydrogens count as atoms.",
        value_name=first_class(model) if regression(model) else None, original_value=res.value))


def _molecule_panel(model: Workbench, res, opts: dict, outline: list[tuple[int, int]]) -> None:
    """The molecule alone, before any explanation (its toxicophores outlined when asked)."""
    st.subheader("Molecule", anchor=False)
    svg = kept_with(res, ("molecule", opts["hide_h"], opts["numbers"], tuple(outline)),
                    lambda: molecule_view.molecule_svg(
                        res.molecule.mol, [], size=(440, 360), hide_hydrogens=opts["hide_h"],
                        atom_indices=opts["numbers"], outline=outline))
    st.image(svg, width="stretch")
    said = (f"{res.value:.4g}" if regression(model) else f"{res.probabilities[MUTAGEN]:.3f}")
    st.markdown(f"{focus_words(model)} = **{said}** on the whole molecule")


def _panel(model: Workbench, res, method: str, k: int, opts: dict,
           outline: list[tuple[int, int]], tox_pairs: list[tuple[int, int]]) -> dict:
    title = method_title(method)
    st.subheader(title, anchor=False)
    bonds, scores = res.bonds(method, k)
    pairs = [tuple(b) for b in bonds]
    svg = kept_with(res, ("panel", method, k, opts["hide_h"], opts["numbers"], tuple(outline)),
                    lambda: molecule_view.molecule_svg(
                        res.molecule.mol, pairs, scores, size=(440, 360),
                        hide_hydrogens=opts["hide_h"], atom_indices=opts["numbers"],
                        outline=outline))
    st.image(svg, width="stretch")
    alone, p_alone = on_explanation_alone(
        model, res.molecule.instance, res.mask(method, k), res.label,
        ("molecule", res.molecule.input_smiles, opts["salts"], model_key(model),
         str(model.device)))
    st.markdown(alone)
    _tie_note(res, method, k)
    # the reading speaks of classes; a regressor's numbers are in the sentence above
    reading = None if regression(model) else _reading(model, res, method, k, opts)
    try:
        fragment = fragment_smiles(res.molecule.mol, pairs)
    except Exception:  # drawing aid only
        fragment = ""
    st.caption(f"The explanation as part of the molecule: the heavy atoms its bonds touch, "
               f"with the bonds between them; * marks where the rest of the molecule attaches · "
               f"explain time "
               f"{fmt_ms(res.ms_per_instance.get(method, 0.0))} on {device_label(model.device.type)}")
    st.code(fragment or "(no bond)", language=None)
    row = st.container(horizontal=True, gap="small")  # one block, not three (two columns)
    row.download_button("SVG", svg, file_name=f"molecule-{method}-k{k}.svg",
                       mime="image/svg+xml", key=f"mol_svg_{method}", width="stretch",
                       icon=":material/download:")
    mol = res.molecule.mol
    row.download_button("PNG", lambda: molecule_view.molecule_png(
        mol, pairs, scores, hide_hydrogens=opts["hide_h"], atom_indices=opts["numbers"],
        legend=title, outline=outline),
                       file_name=f"molecule-{method}-k{k}.png", mime="image/png",
                       key=f"mol_png_{method}", width="stretch", icon=":material/download:")
    out = res.to_json(method, k)
    out["explanation"]["fragment"] = fragment
    out["explanation"]["value_on_explanation" if regression(model)
                       else "probability_on_explanation"] = p_alone
    out["toxicophore_bonds"] = [list(p) for p in tox_pairs]
    out["reading"] = reading
    return out


def _reading(model: Workbench, res, method: str, k: int, opts: dict) -> dict | None:
    """The engine's plain-language reading of the panel (prediction on the explanation and
    without it, toxicophores touched, the distilled teacher's agreement); JSON-ready."""
    mol = res.molecule
    teacher = res.scores.get(DEFAULT_TEACHER) if method != DEFAULT_TEACHER else None
    try:
        facts, text = explanation_reading(
            ("molecule", mol.input_smiles, opts["salts"], model_key(model),
             str(model.device), explainer_token(model, method)),
            method, k, tuple(display(c) for c in class_names(model)), "bond", res.scores[method],
            teacher, model, mol.instance, mol.mol)
    except Exception as exc:  # words are an aid: never stop the panel
        show_error(exc, "The reading failed")
        return None
    show_reading(text, key=f"mol_reading_{method}")
    return {"text": text, "facts": facts}


def _bond_table(res, methods: list[str], k: int) -> None:
    """Every bond with each method's score on one comparable scale (its rank within the
    molecule, 0 to 1) and its top-K, ties at the K cut marked."""
    mol = res.molecule.mol
    pairs = res.molecule.pairs
    edge_labels, _ = whatif_view.bond_labels(mol, pairs)
    st.caption("Scores on one scale: each bond's rank within this molecule, from 0 to 1 (1 = the "
               "most important bond), since methods score differently (probabilities, logits, "
               "attributions). The raw scores are in the JSON download.")
    rows = {"bond": edge_labels,
            "order": [str(mol.GetBondBetweenAtoms(u, v).GetBondType()).lower() for u, v in pairs]}
    for m in methods:
        chosen = set(int(j) for j in res.mask(m, k).nonzero().view(-1).tolist())
        rows[f"{method_title(m)} score"] = [round(float(v), 4)
                                            for v in rank_scores(res.scores[m]).tolist()]
        rows[f"{method_title(m)} top-K"] = [j in chosen for j in range(len(pairs))]
        tied = res.explanations[m].tied_at_cut(0, k).tolist()
        if any(tied):
            rows[f"{method_title(m)} tied at the cut"] = tied
    df = pd.DataFrame(rows).sort_values(f"{method_title(methods[0])} score", ascending=False)
    st.dataframe(df, hide_index=True, key="mol_bond_df")


def _atom_table(res, methods: list[str], k: int) -> None:
    """Every atom with each method's atom score (its best bond's score, on the same rank scale
    as the bonds) and whether the top-K bonds touch it: the atoms a chemist reads."""
    _, node_labels = whatif_view.bond_labels(res.molecule.mol, res.molecule.pairs)
    st.caption("An atom scores as its best bond (an atom matters when one of its bonds does): "
               "on the shipped Mutagenicity model's test mutagens these atom scores find the "
               "Kazius alert atoms better than its bond scores find the alert bonds (python -m gem_core "
               "bench atoms). The drawing shades each atom so.")
    rows: dict[str, list] = {"atom": list(node_labels)}
    for m in methods:
        touched = set(res.atoms(m, k)[0])
        rows[f"{method_title(m)} score"] = [round(float(v), 4)
                                            for v in rank_scores(res.atom_scores(m)).tolist()]
        rows[f"{method_title(m)} in top-K bonds"] = [a in touched for a in range(len(node_labels))]
    df = pd.DataFrame(rows).sort_values(f"{method_title(methods[0])} score", ascending=False)
    st.dataframe(df, hide_index=True, key="mol_atom_df")


def _tie_note(res, method: str, k: int) -> None:
    """Say when bonds tie at the K cut (the engine keeps those with the lowest bond index)."""
    tied = res.explanations[method].tied_at_cut(0, k)
    if bool(tied.any()):
        kept = int((tied & res.mask(method, k)).sum())
        score = float(res.scores[method][int(tied.nonzero()[0])])
        st.caption(f"⚖ {int(tied.sum())} bonds tie at the K cut (score {score:.4g}); the {kept} "
                   f"with the lowest bond index {'was' if kept == 1 else 'were'} kept. Marked "
                   f"in the bond table.")
