"""Molecule: a chemist's SMILES (or a file of them) → mutagenicity prediction and explanation.

Always the Mutagenicity target model, whatever dataset the sidebar shows. The SMILES becomes a
dataset-like graph (explicit hydrogens, Kekulé bond orders, the 14 training elements); the
explainers chosen in the sidebar mark the K bonds that matter most. Scores are kept per
molecule and method, so changing K only re-thresholds them.
"""
from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from components import molecule_view
from gem_core.chem import (EXAMPLE_SMILES, MoleculeError, fragment_smiles, parse_smiles_file,
                           smiles_to_instance)
from gem_core.config import get_spec
from gem_core.molecules import (CLASS_NAMES, DATASET, ModelUnavailableError, explain_molecules,
                                molecule_model, suggested_k, target_checkpoint_available)
from gem_core.evaluate import topk_overlap
from gem_core.explainers import method_spec
from gem_core.session import Workbench
from theme import method_title
from state import (DATA_HELP, device_label, fit_offer, molecule_target, progress_bar, run_page,
                   selection, show_error)

SPEC = get_spec(DATASET)
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
BATCH_LIMIT_NOTE = "Up to 1,000 molecules per file."
MUTAGEN = CLASS_NAMES.index("mutagen")
DISPLAY_NAMES = {"mutagen": "mutagen", "nonmutagen": "non-mutagen"}


def _set_example(smiles: str) -> None:
    st.session_state["mol_smiles"] = smiles
    st.session_state["mol_submitted"] = smiles


def _submit() -> None:
    st.session_state["mol_submitted"] = st.session_state.get("mol_smiles", "")


def _model(device: str) -> Workbench | None:
    try:
        if target_checkpoint_available(molecule_target()):
            with st.spinner("Loading the Mutagenicity target model…"):
                return molecule_model(device, target=molecule_target())
        with st.status("Training the Mutagenicity target model (first use, minutes)…",
                       expanded=True):
            with progress_bar("training") as progress:
                return molecule_model(device, progress, target=molecule_target())
    except ModelUnavailableError as exc:
        st.error(str(exc), icon=":material/error:")
        st.caption(DATA_HELP)
    except Exception as exc:
        show_error(exc, "Cannot load the Mutagenicity model")
    return None


def _ready_methods(model: Workbench, methods: tuple[str, ...]) -> tuple[list[str], list[str]]:
    ready, waiting = [], []
    for m in methods:
        (ready if model.is_fitted(m) else waiting).append(m)
    return ready, waiting


def _fit_offer(model: Workbench, waiting: list[str]) -> None:
    for m in waiting:
        fit_offer(model, m, f"{method_title(m)} is not fitted for the Mutagenicity model yet (a "
                            f"one-off fit on the training molecules, cached afterwards).",
                  key=f"mol_fit_{m}")


def _explained(model: Workbench, mol, methods: list[str]):
    """Prediction + scores for the molecule, kept in the session (K-independent)."""
    cache = st.session_state.setdefault("mol_results", {})
    key = (mol.input_smiles, tuple(methods), id(model))
    if key not in cache:
        with st.spinner("Predicting and explaining…"):
            cache.clear()
            cache[key] = explain_molecules([mol], methods, model=model, strict=False)[0]
    return cache[key]


# ----------------------------------------------------------------------------- single molecule

def _display(label: str) -> str:
    """A class as a chemist reads it ("non-mutagen"; the engine's JSON keeps "nonmutagen")."""
    return DISPLAY_NAMES.get(label, label)


def _k_slider(mol) -> int:
    """One K for this molecule: a quarter of its bonds by default, never more than it has."""
    bonds = mol.instance.num_pairs
    if st.session_state.get("mol_k_molecule") != mol.input_smiles:  # a new molecule
        st.session_state["mol_k"] = suggested_k(bonds)
        st.session_state["mol_k_molecule"] = mol.input_smiles
    st.session_state["mol_k"] = min(max(1, int(st.session_state.get("mol_k", 1))), max(1, bonds))
    return int(st.slider(
        "K (explanation bonds)", min_value=1, max_value=max(1, bonds), key="mol_k",
        disabled=bonds <= 1,
        help=f"How many bonds each explanation keeps; this molecule has {bonds} (hydrogens "
             f"included). The default is a quarter of them; the paper's grid for its test "
             f"molecules is {', '.join(map(str, SPEC.k_grid))}."))


def _single(sel, opts: dict) -> None:
    st.markdown("**Examples**")
    cols = st.columns(len(EXAMPLES))
    for col, (name, smi) in zip(cols, EXAMPLES.items()):
        col.button(name, key=f"mol_example_{name.split()[0].lower()}", on_click=_set_example,
                   args=(smi,), width="stretch")
    c1, c2 = st.columns([5, 1], vertical_alignment="bottom")
    c1.text_input("SMILES", key="mol_smiles", placeholder="e.g. O=[N+]([O-])c1ccccc1",
                  on_change=_submit)
    c2.button("Explain", key="mol_explain", type="primary", on_click=_submit, width="stretch",
              icon=":material/search:")
    submitted = st.session_state.get("mol_submitted")
    if submitted is None:
        st.caption("Type or paste a SMILES and press Explain, or pick an example.")
        return
    try:
        mol = smiles_to_instance(submitted, keep_largest_fragment=opts["largest"])
    except MoleculeError as exc:
        st.error(str(exc), icon=":material/error:")
        return
    for w in mol.warnings:
        st.warning(w, icon=":material/warning:")
    model = _model(sel.device)
    if model is None:
        return
    methods = list(sel.methods) or ["gem"]
    try:
        ready, waiting = _ready_methods(model, tuple(methods))
        # the teachers of the chosen methods, to say how far a fast explainer departs from them
        extra = [t for t in {method_spec(m).teacher for m in ready} - {None} if t not in ready]
        res = _explained(model, mol, ready + extra) if ready else explain_molecules(
            [mol], [], model=model)[0]
    except Exception as exc:
        show_error(exc, "Prediction failed")
        return

    p_mutagen = res.probabilities[MUTAGEN]
    with st.container(key="mol_prediction"):
        c1, c2, c3 = st.columns(3)
        c1.metric("Prediction", _display(res.label_name))
        c2.metric("P(mutagen)", f"{p_mutagen:.3f}")
        c3.metric("Atoms (with H) / bonds", f"{mol.num_atoms} / {mol.instance.num_pairs}")
        st.caption(f"{mol.formula}" + (f" · {mol.name}" if mol.name else "")
                   + " · canonical SMILES (RDKit), copy it from the box:")
        st.code(mol.smiles, language=None)
    k = _k_slider(mol)
    tox = _toxicophores(mol)
    if tox["classes"]:
        st.markdown("**Toxicophores** (Kazius et al. 2005, outlined in teal when shown): "
                    + ", ".join(tox["classes"]) + f" — {len(tox['pairs'])} bonds.")
    else:
        st.caption("None of the encoded mutagenicity toxicophores (Kazius et al. 2005) is in "
                   "this molecule.")
    if mol.instance.num_pairs <= k:
        st.info(f"K = {k} keeps all {mol.instance.num_pairs} bonds of this molecule: every "
                f"explanation is the whole molecule; the shading still ranks the bonds.")
    _fit_offer(model, waiting)

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
                _molecule_panel(res, opts, outline)
            else:
                payload[m] = _panel(model, res, m, k, opts, outline, tox["pairs"])
    if not shown:
        return
    with st.expander("Bond scores", key="mol_bond_table"):
        _bond_table(res, shown, k)
    st.download_button("Download explanation (JSON)",
                       json.dumps(payload[shown[0]] if len(shown) == 1 else
                                  {"smiles": mol.input_smiles, "k": k, "methods": payload},
                                  indent=2),
                       file_name="gem-molecule.json", mime="application/json",
                       key="mol_download_json", icon=":material/download:")


def _molecule_panel(res, opts: dict, outline: list[tuple[int, int]]) -> None:
    """The molecule alone, before any explanation (its toxicophores outlined when asked)."""
    st.subheader("Molecule", anchor=False)
    svg = molecule_view.molecule_svg(res.molecule.mol, [], size=(440, 360),
                                     hide_hydrogens=opts["hide_h"],
                                     atom_indices=opts["numbers"], outline=outline)
    st.image(svg, width="stretch")
    st.markdown(f"P(mutagen) = **{res.probabilities[MUTAGEN]:.3f}** on the whole molecule")


def _toxicophores(mol) -> dict:
    """The molecule's toxicophore classes (titles) and bonds (atom pairs), from the engine."""
    from gem_core.toxicophores import TOXICOPHORES, match_toxicophores, toxicophore_bond_mask

    titles = {t.name: t.title for t in TOXICOPHORES}
    pairs = mol.instance.pairs
    mask = toxicophore_bond_mask(mol.mol, pairs)
    return {"classes": [titles[c] for c in match_toxicophores(mol.mol)],
            "pairs": [tuple(pairs[:, j].tolist()) for j in range(pairs.size(1)) if mask[j]]}


def _panel(model: Workbench, res, method: str, k: int, opts: dict,
           outline: list[tuple[int, int]], tox_pairs: list[tuple[int, int]]) -> dict:
    title = method_title(method)
    st.subheader(title, anchor=False)
    bonds, scores = res.bonds(method, k)
    pairs = [tuple(b) for b in bonds]
    svg = molecule_view.molecule_svg(res.molecule.mol, pairs, scores, size=(440, 360),
                                     hide_hydrogens=opts["hide_h"], atom_indices=opts["numbers"],
                                     outline=outline)
    st.image(svg, width="stretch")
    p_sub = model.predict_proba([res.molecule.instance], [res.mask(method, k)])[0].tolist()
    sub_label = max(range(len(p_sub)), key=p_sub.__getitem__)
    verdict = (f"still {_display(CLASS_NAMES[sub_label])}" if sub_label == res.label else
               f"the prediction flips to **{_display(CLASS_NAMES[sub_label])}**")
    st.markdown(f"P(mutagen) = **{p_sub[MUTAGEN]:.3f}** on these {len(bonds)} bonds alone: "
                f"{verdict}.")
    notes = []
    if tox_pairs:
        hits = len(set(pairs) & set(tox_pairs))
        notes.append(f"{hits} of the {len(tox_pairs)} toxicophore bonds are in the explanation")
    teacher = method_spec(method).teacher
    if teacher in res.scores:
        shared = topk_overlap(res.scores[method], res.scores[teacher], k)
        notes.append(f"the {method_title(teacher)[0].lower()}{method_title(teacher)[1:]} shares "
                     f"{shared} of these {len(bonds)} bonds")
    if notes:
        st.markdown("; ".join(notes).capitalize() + ".")
    try:
        fragment = fragment_smiles(res.molecule.mol, pairs)
    except Exception:  # drawing aid only
        fragment = ""
    st.caption(f"The explanation as a fragment (heavy atoms) · explain time "
               f"{res.ms_per_instance.get(method, 0.0):.1f} ms on {device_label(model.device.type)}")
    st.code(fragment or "(no bond)", language=None)
    c1, c2 = st.columns(2)
    c1.download_button("SVG", svg, file_name=f"molecule-{method}-k{k}.svg",
                       mime="image/svg+xml", key=f"mol_svg_{method}", width="stretch",
                       icon=":material/download:")
    mol = res.molecule.mol
    c2.download_button("PNG", lambda: molecule_view.molecule_png(mol, pairs, legend=title),
                       file_name=f"molecule-{method}-k{k}.png", mime="image/png",
                       key=f"mol_png_{method}", width="stretch", icon=":material/download:")
    out = res.to_json(method, k)
    out["explanation"]["fragment"] = fragment
    out["explanation"]["probability_on_explanation"] = p_sub[res.label]
    out["toxicophore_bonds"] = [list(p) for p in tox_pairs]
    return out


def _bond_table(res, methods: list[str], k: int) -> None:
    mol = res.molecule.mol
    pairs = res.molecule.pairs
    rows = {"atoms": [f"{u}–{v}" for u, v in pairs],
            "elements": [f"{mol.GetAtomWithIdx(u).GetSymbol()}–{mol.GetAtomWithIdx(v).GetSymbol()}"
                         for u, v in pairs],
            "order": [str(mol.GetBondBetweenAtoms(u, v).GetBondType()).lower() for u, v in pairs]}
    for m in methods:
        chosen = set(int(j) for j in res.mask(m, k).nonzero().view(-1).tolist())
        rows[f"{method_title(m)} score"] = [float(s) for s in res.scores[m]]
        rows[f"{method_title(m)} top-K"] = [j in chosen for j in range(len(pairs))]
    df = pd.DataFrame(rows).sort_values(f"{method_title(methods[0])} score", ascending=False)
    st.dataframe(df, hide_index=True, key="mol_bond_df")


# ----------------------------------------------------------------------------- batch

def _batch(sel, largest: bool) -> None:
    up = st.file_uploader("CSV (with a 'smiles' column) or SMI file (one SMILES [name] per line)",
                          type=["csv", "smi", "txt", "tsv"], key="mol_file")
    st.caption(BATCH_LIMIT_NOTE + " Each molecule is predicted and explained; rows that cannot "
               "be read say why.")
    if up is None:
        return
    try:
        rows = parse_smiles_file(up.getvalue())
    except MoleculeError as exc:
        st.error(str(exc), icon=":material/error:")
        return
    model = _model(sel.device)
    if model is None:
        return
    options = list(sel.methods) or ["gem"]
    first_ready = next((i for i, m in enumerate(options) if model.is_fitted(m)), 0)
    method = st.selectbox("Explainer for the file", options, index=first_ready,
                          format_func=method_title, key="mol_batch_method")
    if not model.is_fitted(method):
        _fit_offer(model, [method])
        return
    k = int(st.number_input("K (explanation bonds per molecule)", min_value=1, max_value=1000,
                            value=8, step=1, key="mol_batch_k",
                            help="A molecule with fewer bonds keeps all of them."))
    cache = st.session_state.setdefault("mol_batch", {})
    key = (up.name, up.size, method, id(model), largest)
    if key not in cache:
        parsed, errors = [], {}
        for i, (name, smi) in enumerate(rows):
            try:  # the same parsing as one molecule, salts included
                parsed.append((i, smiles_to_instance(smi, keep_largest_fragment=largest)))
            except MoleculeError as exc:
                errors[i] = str(exc)
        try:
            with st.status(f"Explaining {len(parsed)} molecules…", expanded=False):
                with progress_bar("explaining") as progress:
                    results = explain_molecules([m for _, m in parsed], [method], model=model,
                                                progress=progress)
        except Exception as exc:
            show_error(exc, "Explaining the file failed")
            return
        cache.clear()
        cache[key] = (rows, dict(zip((i for i, _ in parsed), results)), errors)
    rows, results, errors = cache[key]
    table = []
    for i, (name, smi) in enumerate(rows):
        rec = {"name": name, "smiles": smi}
        if i in errors:
            rec.update(status="error", message=errors[i])
        else:
            r = results[i]
            bonds, _ = r.bonds(method, k)
            try:
                frag = fragment_smiles(r.molecule.mol, [tuple(b) for b in bonds])
            except Exception:
                frag = ""
            rec.update(status="ok", message="; ".join(r.molecule.warnings),
                       prediction=_display(r.label_name),
                       p_mutagen=round(r.probabilities[MUTAGEN], 4),
                       bonds=" ".join(f"{a}-{b}" for a, b in bonds), fragment=frag)
        table.append(rec)
    df = pd.DataFrame(table)
    n_ok = sum(1 for t in table if t["status"] == "ok")
    st.markdown(f"**{n_ok} of {len(table)} molecules explained** with {method_title(method)} "
                f"(K = {k}).")
    st.dataframe(df, hide_index=True, key="mol_batch_df")
    st.download_button("Download table (CSV)", df.to_csv(index=False), file_name="gem-batch.csv",
                       mime="text/csv", key="mol_batch_csv", icon=":material/download:")


# ----------------------------------------------------------------------------- page

def render() -> None:
    sel = selection()
    st.header("Explain a molecule", anchor="molecule")
    st.caption("The Mutagenicity target model says whether a molecule is a mutagen (the Ames test "
               "data of Kazius et al. 2005); the explainers chosen in the sidebar mark the bonds "
               "its prediction rests on. Hydrogens are added explicitly and aromatic rings "
               "written with alternating bonds, as in the training data.")
    c1, c2, c3 = st.columns(3)
    opts = {
        "hide_h": c1.toggle("Hide hydrogens in the drawing", key="mol_hide_h",
                            persist_state="session",
                            help="Hydrogens on an explanation bond stay drawn."),
        "numbers": c1.toggle("Show atom numbers", key="mol_numbers", persist_state="session",
                             help="The numbering of the bond table and of the JSON: RDKit's "
                                  "Chem.AddHs(Chem.MolFromSmiles(SMILES))."),
        "outline": c2.toggle("Outline toxicophores", key="mol_tox_outline", value=True,
                             persist_state="session",
                             help="Bonds of known mutagenicity toxicophores (Kazius et al. 2005) "
                                  "in teal, beside the explanation's orange, to see at a glance "
                                  "whether the two agree."),
        "largest": c3.toggle("Salts: keep the largest fragment", key="mol_largest",
                             persist_state="session",
                             help="Off: a SMILES with several fragments is refused with a "
                                  "message. Applies to single molecules and files alike."),
    }
    single, batch = st.tabs(["One molecule", "File of molecules"], key="mol_tabs")
    with single:
        _single(sel, opts)
    with batch:
        _batch(sel, opts["largest"])


run_page(render)
