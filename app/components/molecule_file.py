"""The "File of molecules" tab of the Molecule page: screen up to a thousand rows of a file.

It runs the engine path of ``python -m gem_core screen``: the rows of
``gem_core.service.screening.iter_rows``, computed by ``explain_rows`` into the screen's Arrow
table. This tab only reads, sorts, filters and draws that table. With a user's model chosen in
the sidebar it screens with that model (``screen --model NAME``): its classes and the probability
of its first class (``p_<first class>``), or a regressor's value (``value_<outcome>``).
"""
from __future__ import annotations

import hashlib
import io
import itertools
import json
import shlex

import pandas as pd
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import streamlit as st
import torch

from components import molecule_view
from components.molecule_common import (SPEC, class_names, display, first_class, focus_words,
                                        is_user_model, literal, load_model, model_key,
                                        offer_fits, on_explanation_alone, regression,
                                        toxicophores)
from gem_core.api import (METHODS, REJECTION_WORDS, MoleculeError, ScreenSettings,
                          Summary, Workbench, bond_labels, check_settings, csv_table,
                          explain_rows, iter_rows, method_spec, smiles_to_instance)
from messages import show_error
from state.engine_cache import explainer_token
from state.selection import molecule_target, molecule_user_model
from state.session import session_cache, session_value, set_session_value
from theme import method_title

BATCH_ROW_CAP = 1000
CLI_COMMAND = "python -m gem_core screen library.smi --out hits.parquet"
SHOW_OPTIONS = {"all": "All rows", "mutagen": "Flagged (predicted mutagen)",
                "nonmutagen": "Predicted non-mutagen", "rejected": "Rejected"}
BATCH_COLUMNS = ["row", "id", "status", "prediction", "result", "p_mutagen", "closest_training",
                 "toxicophores", "smiles", "k", "fragment", "reason", "message"]
# What each view shows, in order: rejected rows need their reason and message, not empty
# prediction columns.
SHOWN_COLUMNS = {
    "all": ["row", "id", "result", "p_mutagen", "closest_training", "toxicophores", "smiles",
            "k", "fragment", "message", "reason"],
    "mutagen": ["row", "id", "result", "p_mutagen", "closest_training", "toxicophores",
                "smiles", "k", "fragment", "message"],
    "rejected": ["row", "id", "smiles", "reason", "message"],
}


def _model_column(table) -> str:
    """The screen's number column: ``p_mutagen``, ``p_<a user model's first class>`` or a
    regressor's ``value_<outcome>``."""
    return next(n for n in table.column_names if n.startswith(("p_", "value_")))


def _with_column(columns: list[str], pcol: str) -> list[str]:
    """``columns`` with the model's number column in place of ``p_mutagen``."""
    return [pcol if c == "p_mutagen" else c for c in columns]


def _show_options(model: Workbench) -> dict[str, str]:
    """The rows a user may show: Mutagenicity's flagged / non-mutagen; a user classifier's
    rows per predicted class (``class:<name>``); a regressor's all or rejected."""
    if not is_user_model(model):
        return SHOW_OPTIONS
    classes = {} if regression(model) else {
        f"class:{c}": f"Predicted {display(c)}" for c in class_names(model)}
    return {"all": "All rows", **classes, "rejected": "Rejected"}


def _batch_methods() -> list[str]:
    """The explainers a screen can use: the batched ones, in the registry's order."""
    return [m for m in METHODS if method_spec(m).batched]


def _read_rows(data: bytes) -> tuple[str, list, int]:
    """The upload's content hash, its first :data:`BATCH_ROW_CAP` rows (the CLI's reader) and
    its row count; kept in the session per file content."""
    digest = hashlib.sha256(data).hexdigest()
    cached = session_value("mol_batch_rows")
    if cached is None or cached[0] != digest:
        it = iter_rows(io.BytesIO(data))
        rows = list(itertools.islice(it, BATCH_ROW_CAP))
        total = len(rows) + sum(1 for _ in it)  # the rest is only counted
        cached = (digest, rows, total)
        set_session_value("mol_batch_rows", cached)
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
    cache = session_cache("mol_batch")
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
    then the other accepted molecules, rejected rows last (input order among equals). A user
    model's rows by the probability of its first class, or a regressor's by value, highest
    first."""
    from gem_core.api import TOXICOPHORES

    pcol = _model_column(table)
    columns = _with_column(BATCH_COLUMNS, pcol)
    titles = {t.name: t.title for t in TOXICOPHORES}
    plain = [c for c in columns if c not in ("toxicophores", "result", "k")]
    df = pd.DataFrame(table.select(plain).to_pydict())
    df["k"] = [None if b is None else len(b) for b in table.column("bonds").to_pylist()]
    df["toxicophores"] = [None if t is None else [titles.get(c, c) for c in t]
                          for t in table.column("toxicophores").to_pylist()]
    df["prediction"] = [None if p is None else display(p) for p in df["prediction"]]
    df["result"] = [p if status == "ok" else status
                    for p, status in zip(df["prediction"], df["status"])]
    order = sorted(range(len(df)), key=lambda i: (df["status"][i] != "ok",
                                                  -(df[pcol][i] if df["status"][i] == "ok"
                                                    else 0.0), df["row"][i]))
    return df.iloc[order][columns].reset_index(drop=True)


def _filtered(df: pd.DataFrame, show: str, text: str) -> pd.DataFrame:
    """Rows of ``show`` (a :data:`SHOW_OPTIONS` key) whose id contains ``text`` (any case) or
    whose SMILES contains it (as typed: SMILES case is chemistry)."""
    keep = pd.Series(True, index=df.index)
    if show == "rejected":
        keep &= df["status"] != "ok"
    elif show != "all":
        keep &= df["prediction"] == display(show.removeprefix("class:"))
    text = text.strip()
    if text:
        ids = df["id"].fillna("").str.lower().str.contains(text.lower(), regex=False)
        smiles = df["smiles"].fillna("").str.contains(text, regex=False)
        keep &= ids | smiles
    return df[keep].reset_index(drop=True)


def _column_config(model: Workbench, pcol: str = "p_mutagen") -> dict:
    cc = st.column_config
    if not is_user_model(model):
        return _mutagenicity_columns(cc)
    out = _mutagenicity_columns(cc)
    del out["p_mutagen"]
    if regression(model):
        out[pcol] = cc.NumberColumn(first_class(model), format="%.3f", width="medium",
                                    help=f"The model's predicted {first_class(model)}.")
        out["result"] = cc.TextColumn("Result", help="The predicted value, or 'rejected' (the "
                                                     "message says why).")
    else:
        out[pcol] = cc.ProgressColumn(focus_words(model), format="%.3f", min_value=0.0,
                                      max_value=1.0, width="medium",
                                      help=f"The model's probability of '{first_class(model)}'.")
    out["toxicophores"] = cc.ListColumn("Toxicophores",
                                        help="Known mutagenicity toxicophores (Kazius et al. "
                                             "2005) in the molecule: its chemistry, whatever "
                                             "the model.")
    return out


def _mutagenicity_columns(cc) -> dict:
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
        "closest_training": cc.NumberColumn(
            "Like training", format="%.2f", width="small",
            help="Tanimoto similarity (Morgan fingerprints) of the model's closest training "
                 "molecule: under 0.3 the molecule is unlike what the model learned from, and "
                 "its prediction less reliable (empty where the training data is not here)."),
        "smiles": cc.TextColumn("SMILES (as in the file)"),
        "k": cc.NumberColumn("K", format="%d", width="small",
                             help="Explanation bonds of this molecule: a quarter of its bonds "
                                  "(hydrogens included) unless 'Same K for every molecule' is "
                                  "on, as in the 'One molecule' tab."),
        "fragment": cc.TextColumn("Explanation (fragment)",
                                  help="The K explanation bonds as a heavy-atom SMILES fragment."),
        "reason": cc.TextColumn("Reason", width="small", help="Why a row was rejected."),
        "message": cc.TextColumn("Message", width="large",
                                 help="Why a row was rejected, or the parser's notes (kept "
                                      "largest fragment, charges)."),
    }


def _summary_line(table, method: str, k: int | None, model: Workbench) -> str:
    user = is_user_model(model)
    s = Summary() if not user else Summary(
        first_class=None if regression(model) else class_names(model)[0])
    s.add(table)
    reasons = ", ".join(f"{n:,} {REJECTION_WORDS.get(r, r)}" for r, n in sorted(s.rejected.items()))
    rejected = sum(s.rejected.values())
    rule = f"K = {k}" if k is not None else "K = a quarter of each molecule's bonds"
    if user:
        names = class_names(model)
        other = display(names[1]) if len(names) == 2 else "another class"
        said = ("" if regression(model) else
                f": **{s.mutagens:,} predicted {first_class(model)}**, "
                f"{s.ok - s.mutagens:,} predicted {other}")
        return (f"**{s.ok:,} of {s.rows:,} rows screened** by {model.name} with "
                f"{method_title(method)} ({rule}){said}, {rejected:,} rejected"
                + (f" ({reasons})." if reasons else "."))
    others = s.ok - s.mutagens
    return (f"**{s.ok:,} of {s.rows:,} rows screened** with {method_title(method)} ({rule}): "
            f"**{s.mutagens:,} flagged** as predicted mutagen{'s' if s.mutagens != 1 else ''}, "
            f"{others:,} predicted non-mutagen{'s' if others != 1 else ''}, {rejected:,} "
            f"rejected" + (f" ({reasons})." if reasons else "."))


def render_file(sel, opts: dict) -> None:
    """The "File of molecules" tab: screen an uploaded file, filter its rows, open one."""
    st.caption(f"Predicts and explains up to {BATCH_ROW_CAP:,} rows of a file here, with the "
               f"engine of the command-line screen; rows that cannot be molecules stay in the "
               f"table with the reason. Larger libraries belong to the command line (all cores, "
               f"resumable, Parquet or CSV out):")
    user = molecule_user_model()
    model_arg = f" --model {user}" if user else ""
    st.code(CLI_COMMAND + model_arg, language="bash")
    up = st.file_uploader("SMI file (SMILES [id] per line), CSV/TSV table with a 'smiles' "
                          "column (an 'id' or 'name' column is kept), or SD file (each "
                          "record's title is its id)",
                          type=["csv", "smi", "txt", "tsv", "sdf", "sd"], key="mol_file")
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
        st.code(f"python -m gem_core screen {shlex.quote(up.name)} --out hits.parquet"
                + model_arg, language="bash")
    model = load_model(sel.device)
    if model is None:
        return
    c1, c2 = st.columns(2)
    with c1:
        method = _batch_method(sel, model)
    with c2:
        k = _k_choice()
    if not model.is_fitted(method):
        offer_fits(model, [method])
        return
    try:
        settings = check_settings(ScreenSettings(method=method, k=k, target=molecule_target(),
                                                 device=sel.device,
                                                 salts=opts["salts"],
                                                 model=model.name if is_user_model(model)
                                                 else None))
        entry = _screened(digest, rows, settings, explainer_token(model, method))
    except Exception as exc:
        show_error(exc, "Screening the file failed")
        return
    table = entry["table"]
    st.markdown(_summary_line(table, method, k, model))

    df = _result_frame(table)
    pcol = _model_column(table)
    f1, f2 = st.columns([3, 2], vertical_alignment="bottom")
    options = _show_options(model)
    show = f1.radio("Show", list(options), format_func=options.get, horizontal=True,
                    key="mol_batch_show" if not is_user_model(model)
                    else f"mol_batch_show_{model.name}")
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
                                 column_order=_with_column(
                                     SHOWN_COLUMNS.get(show, SHOWN_COLUMNS["mutagen"]), pcol),
                                 column_config=_column_config(model, pcol),
                                 key=f"mol_batch_df_{token}",
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
        _batch_detail(view.iloc[picked[0]], table, settings, opts, model)


def _k_choice() -> int | None:
    """K of the file: each molecule's own (a quarter of its bonds, the rule of the 'One
    molecule' tab and of ``screen``; None) unless the user asks for one K for all."""
    same = st.toggle("Same K for every molecule", key="mol_batch_same_k",
                     help="Off: each molecule gets the K the 'One molecule' tab starts with, a "
                          "quarter of its bonds (hydrogens included), at most "
                          f"{SPEC.default_k}, as the command line's screen does by default. On: "
                          "one K for all, as `screen --k K`; a molecule with fewer bonds keeps "
                          "all of them.")
    if not same:
        return None
    return int(st.number_input("K (explanation bonds per molecule)", min_value=1,
                               max_value=1000, value=8, step=1, key="mol_batch_k"))


def _batch_detail(shown: pd.Series, table, settings: ScreenSettings, opts: dict,
                  model: Workbench) -> None:
    """The selected row: its molecule drawn with the explanation bonds, prediction, fragment and
    toxicophores (or why it was rejected)."""
    i = table.column("row").to_pylist().index(int(shown["row"]))
    rec = table.slice(i, 1).to_pylist()[0]
    with st.container(border=True, key="mol_batch_detail"):
        st.subheader(f"Row {rec['row']}" + (f" · {literal(rec['id'])}" if rec["id"] else ""),
                     anchor=False)
        if rec["status"] != "ok":
            st.error(f"Rejected ({rec['reason']}): {literal(rec['message'] or '')}",
                     icon=":material/block:")
            st.caption("The row as read from the file:")
            st.code(rec["smiles"] or "(empty)", language=None)
            return
        try:  # the molecule whose atom numbering the bonds use
            mol = smiles_to_instance(rec["smiles"], salts=settings.salts)
        except MoleculeError as exc:
            st.error(str(exc), icon=":material/error:")
            return
        pairs = [tuple(b) for b in rec["bonds"]]
        tox = toxicophores(mol)
        left, right = st.columns([3, 2])
        svg = molecule_view.molecule_svg(mol.mol, pairs, rec["scores"], size=(520, 400),
                                         hide_hydrogens=opts["hide_h"],
                                         atom_indices=opts["numbers"],
                                         outline=tox["pairs"] if opts["outline"] else [])
        left.image(svg, width="stretch")
        if pairs:
            chosen = set(pairs)
            mask = torch.tensor([p in chosen for p in mol.pairs])
            label = 0 if regression(model) else class_names(model).index(rec["prediction"])
            left.markdown(on_explanation_alone(
                model, mol.instance, mask, label,
                ("molecule", rec["smiles"], settings.salts, model_key(model),
                 str(model.device)))[0])
        left.caption(f"Orange: the {len(pairs)} explanation bonds of "
                     f"{method_title(settings.method)} (of the molecule's "
                     f"{mol.instance.num_pairs}, hydrogens included; darker = higher score)"
                     + (", pale teal halo: toxicophore atoms." if opts["outline"] and tox["pairs"]
                        else "."))
        with right:
            m1, m2 = st.columns(2)
            pcol = _model_column(table)
            if regression(model):
                m1.metric(f"Predicted {first_class(model)}", f"{rec[pcol]:.4g}")
                m2.metric("Model", model.name)
            else:
                m1.metric("Prediction", display(rec["prediction"]))
                m2.metric(focus_words(model), f"{rec[pcol]:.3f}")
            if rec["message"]:
                st.warning(literal(rec["message"]), icon=":material/warning:")
            st.caption("Canonical SMILES (RDKit):")
            st.code(rec["canonical_smiles"], language=None)
            st.caption(f"The explanation as part of the molecule (the heavy atoms its "
                       f"{len(pairs)} bonds touch; * where the rest of the molecule attaches):")
            st.code(rec["fragment"] or "(no bond)", language=None)
            if tox["classes"]:
                st.markdown("**Toxicophores** (Kazius et al. 2005): " + ", ".join(tox["classes"])
                            + f" — {len(set(pairs) & set(tox['pairs']))} of their "
                              f"{len(tox['pairs'])} bonds are in the explanation.")
            else:
                st.caption("None of the encoded mutagenicity toxicophores (Kazius et al. 2005) "
                           "is in this molecule.")
            st.caption("Explanation bonds, best first, with their atoms numbered like the "
                       "drawing ('Show atom numbers' above draws the numbers):",
                       help="RDKit's numbering of the molecule with its hydrogens added: "
                            "Chem.AddHs(Chem.MolFromSmiles(SMILES)). The downloads hold the "
                            "same bonds as atom-index pairs.")
            st.code("\n".join(bond_labels(mol.mol, pairs)[0]) or "(none)", language=None)
