"""Molecule: a chemist's SMILES (or a file of them) → mutagenicity prediction and explanation.

Always the Mutagenicity target model, whatever dataset the sidebar shows. The SMILES becomes a
dataset-like graph (explicit hydrogens, Kekulé bond orders, the 14 training elements); the
explainers chosen in the sidebar mark the K bonds that matter most. Scores are kept per
molecule and method, so changing K only re-thresholds them.
"""
from __future__ import annotations

import hashlib
import io
import itertools
import json
import shlex
import string

import pandas as pd
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import streamlit as st

from components import molecule_view, whatif_view
from gem_core.chemistry.convert import fragment_smiles
from gem_core.chemistry.smiles import EXAMPLE_SMILES, MoleculeError, smiles_to_instance
from gem_core.data.config import get_spec
from gem_core.service.molecules import (CLASS_NAMES, DATASET, ModelUnavailableError,
                                        explain_molecules, molecule_model, suggested_k,
                                        target_checkpoint_available)
from gem_core.explainers import DEFAULT_TEACHER, METHODS, method_spec
from gem_core.service.screening import ScreenSettings, Summary, csv_table, explain_rows, iter_rows
from gem_core.service.screening.runner import check_settings
from gem_core.service.session import Workbench
from theme import fmt_ms, method_title
from state import (DATA_HELP, device_label, explainer_token, explanation_reading, fit_offer,
                   molecule_target, progress_bar, run_page, selection, show_error, show_reading,
                   what_if_evaluator)

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
        st.error(_literal(exc), icon=":material/error:")
        return
    for w in mol.warnings:
        st.warning(_literal(w), icon=":material/warning:")
    model = _model(sel.device)
    if model is None:
        return
    methods = list(sel.methods) or ["gem"]
    try:
        ready, waiting = _ready_methods(model, tuple(methods))
        # the teachers of the chosen methods (and the reading's), to say how far a fast
        # explainer departs from them
        teachers = {method_spec(m).teacher for m in ready} | {DEFAULT_TEACHER}
        extra = sorted(t for t in teachers - {None} if t not in ready)
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
    if shown:
        with st.expander("Bond scores", key="mol_bond_table"):
            _bond_table(res, shown, k)
        st.download_button("Download explanation (JSON)",
                           json.dumps(payload[shown[0]] if len(shown) == 1 else
                                      {"smiles": mol.input_smiles, "k": k, "methods": payload},
                                      indent=2),
                           file_name="gem-molecule.json", mime="application/json",
                           key="mol_download_json", icon=":material/download:")
    with st.container(border=True, key="mol_whatif"):
        _what_if(model, sel, res, shown, waiting, k, opts)


def _what_if(model: Workbench, sel, res, shown: list[str], waiting: list[str], k: int,
             opts: dict) -> None:
    """Delete bonds or atoms and see the prediction and the explanations of what is left."""
    mol = res.molecule
    pairs = [tuple(p) for p in mol.pairs]
    key = ("molecule", mol.input_smiles, opts["largest"], molecule_target(), sel.device)
    edge_labels, node_labels = whatif_view.bond_labels(mol.mol, pairs)
    edge_order, node_order = whatif_view.heavy_first(mol.mol, pairs)

    def draw(removed, atoms, ranked, shown_scores, method, slot) -> None:
        svg = molecule_view.edited_molecule_svg(
            mol.mol, [pairs[j] for j in removed], atoms, [pairs[j] for j in ranked],
            None if shown_scores is None else [shown_scores[j] for j in ranked],
            size=(440, 360), hide_hydrogens=opts["hide_h"], atom_indices=opts["numbers"])
        st.image(svg, width="stretch")

    notes = [f"{method_title(m)} is not fitted yet (fit it above) and is left out here."
             for m in waiting]
    whatif_view.render(whatif_view.WhatIf(
        prefix="mol_whatif", ident=whatif_view.ident_of(*key), pairs=pairs,
        num_nodes=mol.instance.num_nodes, edge="bond", node="atom", thing="molecule",
        edge_labels=edge_labels, node_labels=node_labels, edge_order=edge_order,
        node_order=node_order, class_names=[_display(c) for c in CLASS_NAMES], focus=MUTAGEN,
        original=list(res.probabilities), k=k, methods=list(shown),
        scores={m: [float(v) for v in res.scores[m]] for m in shown},
        evaluate=what_if_evaluator(key, model, mol.instance, "bond"), draw=draw,
        titles=method_title, notes=notes, ms=dict(res.ms_per_instance),
        hint="Atoms are numbered as in the bond table ('Show atom numbers' above draws them); "
             "hydrogens count as atoms."))


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
    from gem_core.chemistry.toxicophores import (TOXICOPHORES, match_toxicophores,
                                                 toxicophore_bond_mask)

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
    reading = _reading(model, res, method, k, opts)
    try:
        fragment = fragment_smiles(res.molecule.mol, pairs)
    except Exception:  # drawing aid only
        fragment = ""
    st.caption(f"The explanation as a fragment (heavy atoms) · explain time "
               f"{fmt_ms(res.ms_per_instance.get(method, 0.0))} on {device_label(model.device.type)}")
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
    out["reading"] = reading
    return out


def _reading(model: Workbench, res, method: str, k: int, opts: dict) -> dict | None:
    """The engine's plain-language reading of the panel (prediction on the explanation and
    without it, toxicophores touched, the distilled teacher's agreement); JSON-ready."""
    mol = res.molecule
    teacher = res.scores.get(DEFAULT_TEACHER) if method != DEFAULT_TEACHER else None
    try:
        facts, text = explanation_reading(
            ("molecule", mol.input_smiles, opts["largest"], molecule_target(),
             str(model.device), explainer_token(model, method)),
            method, k, tuple(float(v) for v in res.scores[method]),
            None if teacher is None else tuple(float(v) for v in teacher),
            tuple(_display(c) for c in CLASS_NAMES), "bond", model, mol.instance, mol.mol)
    except Exception as exc:  # words are an aid: never stop the panel
        show_error(exc, "The reading failed")
        return None
    show_reading(text, key=f"mol_reading_{method}")
    return {"text": text, "facts": facts}


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
#
# The "File of molecules" tab runs the engine path of `python -m gem_core screen`: the rows of
# gem_core.service.screening.iter_rows, computed by explain_rows into the screen's Arrow table. The page
# only reads, sorts, filters and draws that table.

BATCH_ROW_CAP = 1000
CLI_COMMAND = "python -m gem_core screen library.smi --out hits.parquet"
SHOW_OPTIONS = {"all": "All rows", "mutagen": "Flagged (predicted mutagen)",
                "nonmutagen": "Predicted non-mutagen", "rejected": "Rejected"}
BATCH_COLUMNS = ["row", "id", "status", "prediction", "result", "p_mutagen", "toxicophores",
                 "smiles", "fragment", "reason", "message"]
# What each view shows, in order: rejected rows need their reason and message, not empty
# prediction columns.
SHOWN_COLUMNS = {
    "all": ["row", "id", "result", "p_mutagen", "toxicophores", "smiles", "fragment", "message",
            "reason"],
    "mutagen": ["row", "id", "result", "p_mutagen", "toxicophores", "smiles", "fragment",
                "message"],
    "rejected": ["row", "id", "smiles", "reason", "message"],
}


def _literal(text: str) -> str:
    """``text`` for a Markdown element, shown as typed (every ASCII punctuation escaped)."""
    return "".join("\\" + c if c in string.punctuation else c for c in str(text))


def _batch_methods() -> list[str]:
    """The explainers a screen can use: the batched ones, in the registry's order."""
    return [m for m in METHODS if method_spec(m).batched]


def _read_rows(data: bytes) -> tuple[str, list, int]:
    """The upload's content hash, its first :data:`BATCH_ROW_CAP` rows (the CLI's reader) and
    its row count; kept in the session per file content."""
    digest = hashlib.sha256(data).hexdigest()
    cached = st.session_state.get("mol_batch_rows")
    if cached is None or cached[0] != digest:
        it = iter_rows(io.BytesIO(data))
        rows = list(itertools.islice(it, BATCH_ROW_CAP))
        total = len(rows) + sum(1 for _ in it)  # the rest is only counted
        cached = st.session_state["mol_batch_rows"] = (digest, rows, total)
    return cached


def _batch_method(sel, model: Workbench) -> str:
    options = _batch_methods()
    chosen = [m for m in options if m in sel.methods]
    ready = [m for m in chosen + options if model.is_fitted(m)]
    default = options.index(ready[0]) if ready else 0
    return st.selectbox("Explainer for the file", options, index=default,
                        format_func=method_title, key="mol_batch_method",
                        help="Explainers that explain a whole batch at once, as the command "
                             "line's screen does; the others explain one molecule at a time "
                             "(use the 'One molecule' tab).")


def _screened(digest: str, rows: list, settings: ScreenSettings, token: str):
    """The screen's table of ``rows`` (explain_rows), kept in the session per file and settings."""
    cache = st.session_state.setdefault("mol_batch", {})
    key = (digest, settings, token)
    if key not in cache:
        with st.spinner(f"Predicting and explaining {len(rows):,} rows…"):
            table = explain_rows(rows, settings)
        cache.clear()
        cache[key] = {"table": table}
    return cache[key]


def _download_bytes(entry: dict, settings: ScreenSettings, name: str) -> tuple[bytes, bytes]:
    """CSV and Parquet bytes of the whole result (input order), as the CLI writes them."""
    if "csv" not in entry:
        table = entry["table"]
        buf = io.BytesIO()
        pacsv.write_csv(csv_table(table), buf)
        entry["csv"] = buf.getvalue()
        meta = {**settings.as_dict(), "format": "parquet", "input": name, "source": "app"}
        buf = io.BytesIO()
        pq.write_table(table.replace_schema_metadata(
            {b"gem_screen": json.dumps(meta, sort_keys=True).encode()}), buf)
        entry["parquet"] = buf.getvalue()
    return entry["csv"], entry["parquet"]


def _result_frame(table) -> pd.DataFrame:
    """The screen's rows as shown: flagged (predicted mutagen) first, by P(mutagen) descending,
    then the other accepted molecules, rejected rows last (input order among equals)."""
    from gem_core.chemistry.toxicophores import TOXICOPHORES

    titles = {t.name: t.title for t in TOXICOPHORES}
    plain = [c for c in BATCH_COLUMNS if c not in ("toxicophores", "result")]
    df = pd.DataFrame(table.select(plain).to_pydict())
    df["toxicophores"] = [None if t is None else [titles.get(c, c) for c in t]
                          for t in table.column("toxicophores").to_pylist()]
    df["prediction"] = [None if p is None else _display(p) for p in df["prediction"]]
    df["result"] = [p if status == "ok" else status
                    for p, status in zip(df["prediction"], df["status"])]
    order = sorted(range(len(df)), key=lambda i: (df["status"][i] != "ok",
                                                  -(df["p_mutagen"][i] if df["status"][i] == "ok"
                                                    else 0.0), df["row"][i]))
    return df.iloc[order][BATCH_COLUMNS].reset_index(drop=True)


def _filtered(df: pd.DataFrame, show: str, text: str) -> pd.DataFrame:
    """Rows of ``show`` (a :data:`SHOW_OPTIONS` key) whose id contains ``text`` (any case) or
    whose SMILES contains it (as typed: SMILES case is chemistry)."""
    keep = pd.Series(True, index=df.index)
    if show == "rejected":
        keep &= df["status"] != "ok"
    elif show != "all":
        keep &= df["prediction"] == _display(show)
    text = text.strip()
    if text:
        ids = df["id"].fillna("").str.lower().str.contains(text.lower(), regex=False)
        smiles = df["smiles"].fillna("").str.contains(text, regex=False)
        keep &= ids | smiles
    return df[keep].reset_index(drop=True)


def _column_config() -> dict:
    cc = st.column_config
    return {
        "row": cc.NumberColumn("Row", format="%d", width="small",
                               help="Row number in the file (header and # comments not "
                                    "counted), as in the command line's output."),
        "id": cc.TextColumn("ID", help="The file's id column, or the text after the SMILES."),
        "result": cc.TextColumn("Result", help="The predicted class of the whole molecule, or "
                                               "'rejected' (the message says why)."),
        "p_mutagen": cc.ProgressColumn("P(mutagen)", format="%.3f", min_value=0.0,
                                       max_value=1.0, width="medium",
                                       help="The model's probability of 'mutagen'; flagged from "
                                            "0.5 up."),
        "toxicophores": cc.ListColumn("Toxicophores",
                                      help="Known mutagenicity toxicophores (Kazius et al. "
                                           "2005) in the molecule."),
        "smiles": cc.TextColumn("SMILES (as in the file)"),
        "fragment": cc.TextColumn("Explanation (fragment)",
                                  help="The K explanation bonds as a heavy-atom SMILES fragment."),
        "reason": cc.TextColumn("Reason", width="small", help="Why a row was rejected."),
        "message": cc.TextColumn("Message", width="large",
                                 help="Why a row was rejected, or the parser's notes (kept "
                                      "largest fragment, charges)."),
    }


def _summary_line(table, method: str, k: int) -> str:
    s = Summary()
    s.add(table)
    reasons = ", ".join(f"{n} {r}" for r, n in sorted(s.rejected.items()))
    rejected = sum(s.rejected.values())
    return (f"**{s.ok:,} of {s.rows:,} rows screened** with {method_title(method)} (K = {k}): "
            f"**{s.mutagens:,} flagged** as predicted mutagens, {s.ok - s.mutagens:,} predicted "
            f"non-mutagens, {rejected:,} rejected" + (f" ({reasons})." if reasons else "."))


def _batch(sel, opts: dict) -> None:
    st.caption(f"Predicts and explains up to {BATCH_ROW_CAP:,} rows of a file here, with the "
               f"engine of the command-line screen; rows that cannot be molecules stay in the "
               f"table with the reason. Larger libraries belong to the command line (all cores, "
               f"resumable, Parquet or CSV out):")
    st.code(CLI_COMMAND, language="bash")
    up = st.file_uploader("SMI file (SMILES [id] per line) or CSV/TSV table with a 'smiles' "
                          "column (an 'id' or 'name' column is kept)",
                          type=["csv", "smi", "txt", "tsv"], key="mol_file")
    if up is None:
        return
    data = up.getvalue()
    try:
        digest, rows, total = _read_rows(data)
    except MoleculeError as exc:  # a table without a SMILES column, ...
        st.error(str(exc), icon=":material/error:")
        return
    except Exception as exc:
        show_error(exc, "Cannot read the file")
        return
    if not rows:
        st.error("The file is empty: it has no SMILES rows (blank lines and # comments are "
                 "skipped before the first row).", icon=":material/error:")
        return
    if total > len(rows):
        st.warning(f"The file has {total:,} rows; the first {len(rows):,} were read and are "
                   f"screened here. Screen the whole file with the command line:",
                   icon=":material/warning:")
        st.code(f"python -m gem_core screen {shlex.quote(up.name)} --out hits.parquet",
                language="bash")
    model = _model(sel.device)
    if model is None:
        return
    c1, c2 = st.columns(2)
    with c1:
        method = _batch_method(sel, model)
    k = int(c2.number_input("K (explanation bonds per molecule)", min_value=1, max_value=1000,
                            value=8, step=1, key="mol_batch_k",
                            help="As the command line's --k. A molecule with fewer bonds keeps "
                                 "all of them."))
    if not model.is_fitted(method):
        _fit_offer(model, [method])
        return
    try:
        settings = check_settings(ScreenSettings(method=method, k=k, target=molecule_target(),
                                                 device=sel.device,
                                                 largest_fragment=opts["largest"]))
        entry = _screened(digest, rows, settings, explainer_token(model, method))
    except Exception as exc:
        show_error(exc, "Screening the file failed")
        return
    table = entry["table"]
    st.markdown(_summary_line(table, method, k))

    df = _result_frame(table)
    f1, f2 = st.columns([3, 2], vertical_alignment="bottom")
    show = f1.radio("Show", list(SHOW_OPTIONS), format_func=SHOW_OPTIONS.get, horizontal=True,
                    key="mol_batch_show")
    text = f2.text_input("Find (ID or SMILES contains)", key="mol_batch_search",
                         placeholder="e.g. nitro, or N(=O)")
    view = _filtered(df, show, text)
    # One selection per result and view: a row number stays the row it was when picked.
    token = hashlib.sha256(repr((digest, settings, show, text)).encode()).hexdigest()[:12]
    with st.container(key="mol_batch_table"):
        if view.empty:
            st.info("No row matches the filters.", icon=":material/filter_alt_off:")
            event = None
        else:
            st.caption(f"{len(view):,} rows shown · click a row's checkbox to see the molecule "
                       f"and its explanation below · click a column title to sort.")
            event = st.dataframe(view, hide_index=True,
                                 column_order=SHOWN_COLUMNS.get(show, SHOWN_COLUMNS["mutagen"]),
                                 column_config=_column_config(), key=f"mol_batch_df_{token}",
                                 on_select="rerun", selection_mode="single-row", placeholder="")
    csv_bytes, parquet_bytes = _download_bytes(entry, settings, up.name)
    d1, d2, _ = st.columns([1, 1, 2])
    d1.download_button("Download all rows (CSV)", csv_bytes, file_name="gem-screen.csv",
                       mime="text/csv", key="mol_batch_csv", icon=":material/download:",
                       width="stretch")
    d2.download_button("Download all rows (Parquet)", parquet_bytes,
                       file_name="gem-screen.parquet", mime="application/vnd.apache.parquet",
                       key="mol_batch_parquet", icon=":material/download:", width="stretch")
    picked = list(event.selection.rows) if event is not None else []
    if picked and 0 <= picked[0] < len(view):
        _batch_detail(view.iloc[picked[0]], table, settings, opts)


def _batch_detail(shown: pd.Series, table, settings: ScreenSettings, opts: dict) -> None:
    """The selected row: its molecule drawn with the explanation bonds, prediction, fragment and
    toxicophores (or why it was rejected)."""
    i = table.column("row").to_pylist().index(int(shown["row"]))
    rec = table.slice(i, 1).to_pylist()[0]
    with st.container(border=True, key="mol_batch_detail"):
        st.subheader(f"Row {rec['row']}" + (f" · {_literal(rec['id'])}" if rec["id"] else ""),
                     anchor=False)
        if rec["status"] != "ok":
            st.error(f"Rejected ({rec['reason']}): {_literal(rec['message'] or '')}",
                     icon=":material/block:")
            st.caption("The row as read from the file:")
            st.code(rec["smiles"] or "(empty)", language=None)
            return
        try:  # the molecule whose atom numbering the bonds use
            mol = smiles_to_instance(rec["smiles"],
                                     keep_largest_fragment=settings.largest_fragment)
        except MoleculeError as exc:
            st.error(str(exc), icon=":material/error:")
            return
        pairs = [tuple(b) for b in rec["bonds"]]
        tox = _toxicophores(mol)
        left, right = st.columns([3, 2])
        svg = molecule_view.molecule_svg(mol.mol, pairs, rec["scores"], size=(520, 400),
                                         hide_hydrogens=opts["hide_h"],
                                         atom_indices=opts["numbers"],
                                         outline=tox["pairs"] if opts["outline"] else [])
        left.image(svg, width="stretch")
        left.caption(f"Orange: the {len(pairs)} explanation bonds of "
                     f"{method_title(settings.method)} (of the molecule's "
                     f"{mol.instance.num_pairs}, hydrogens included; darker = higher score)"
                     + (", teal outline: toxicophore bonds." if opts["outline"] and tox["pairs"]
                        else "."))
        with right:
            m1, m2 = st.columns(2)
            m1.metric("Prediction", _display(rec["prediction"]))
            m2.metric("P(mutagen)", f"{rec['p_mutagen']:.3f}")
            if rec["message"]:
                st.warning(_literal(rec["message"]), icon=":material/warning:")
            st.caption("Canonical SMILES (RDKit):")
            st.code(rec["canonical_smiles"], language=None)
            st.caption(f"Explanation as a fragment (heavy atoms of the {len(pairs)} bonds):")
            st.code(rec["fragment"] or "(no bond)", language=None)
            if tox["classes"]:
                st.markdown("**Toxicophores** (Kazius et al. 2005): " + ", ".join(tox["classes"])
                            + f" — {len(set(pairs) & set(tox['pairs']))} of their "
                              f"{len(tox['pairs'])} bonds are in the explanation.")
            else:
                st.caption("None of the encoded mutagenicity toxicophores (Kazius et al. 2005) "
                           "is in this molecule.")
            st.caption("Explanation bonds, best first (atom pairs numbered as "
                       "Chem.AddHs(Chem.MolFromSmiles(SMILES)); 'Show atom numbers' above draws "
                       "them):")
            st.code(" ".join(f"{a}-{b}" for a, b in pairs) or "(none)", language=None)


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
        _batch(sel, opts)


run_page(render)
