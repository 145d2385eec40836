"""Your data: a chemist's own table → what was read → a trained model → why it predicts what it does.

Upload a CSV / TSV / SMI of SMILES and outcome classes; the page shows what it read (valid
molecules, rows refused and why, duplicates, class balance), trains the bond-aware recipe on a
seeded random or scaffold split in the background (progress, cancel, a time budget), shows the
held-out figures, fits Gem, then explains any molecule and screens the uploaded file with the
new model. Models are private to the browser session that trained them (its token is in the
URL) unless shared by name; they can be downloaded as one file and uploaded again elsewhere.
Nothing uploaded is executed or unpickled: tables are parsed as text, models loaded with
``weights_only=True``.
"""

from __future__ import annotations

import hashlib

import pandas as pd
import streamlit as st
from components.charts import outcome_histogram
from components.molecule_common import literal
from components.molecule_view import molecule_svg
from messages import SALT_CHOICES, SALT_HELP, show_error
from state.runtime import run_page
from state.selection import selection
from state.session import session_cache, session_value, set_session_value
from state.training_jobs import MAX_RUNNING, forget_job, job_of, owner_token, start_training
from theme import method_title

from gem_core.api import (
    DEFAULT_TIME_BUDGET_S,
    MAX_ROWS,
    MAX_UPLOAD_BYTES,
    SALT_RULES,
    SPLIT_KINDS,
    USER_RECIPES,
    MoleculeError,
    TableError,
    check_model_name,
    delete_user_model,
    domain_record,
    evaluate_user_model,
    explain_molecules,
    export_user_model,
    fragment_smiles,
    guess_columns,
    import_user_model,
    list_user_models,
    molecule_model,
    read_molecules,
    read_table,
    share_user_model,
    smiles_to_instance,
    suggested_k,
    undetermined_classes,
    user_model,
)

MAX_SCREEN = 2000  # molecules of the uploaded file screened on the page
RECIPE_HELP = {
    "default": "the shipped strong Mutagenicity model's recipe (GINE on bond types, 4 layers "
    "of 64, early stopping): best figures, minutes on 4,000 molecules",
    "small": "3 layers of 32, at most 60 epochs: a first look in a minute",
}


# ----------------------------------------------------------------------------- reading


def _uploaded_table():
    """The uploaded file read as a table (None before an upload); refusals shown."""
    up = st.file_uploader(
        f"Your table: CSV, TSV, SMI or SDF, at most {MAX_UPLOAD_BYTES // 2**20} MB and "
        f"{MAX_ROWS:,} rows",
        type=["csv", "tsv", "txt", "smi", "sdf", "sd"],
        key="yd_upload",
        max_upload_size=MAX_UPLOAD_BYTES // 2**20,
        help="One molecule per row: a SMILES column and an outcome column (classes such as "
        "active / inactive, or 0 / 1); an optional id column. An SD file's records become "
        "rows: a SMILES written from each molfile, its name and its data items as columns. "
        "The file is read as text, on this server, and kept only in your session.",
    )
    if up is None:
        return None, None
    data = up.getvalue()
    digest = hashlib.sha256(data).hexdigest()[:16]
    cache = session_cache("yd_tables")
    if digest not in cache:
        try:
            cache.clear()  # one table per session: the last one uploaded
            cache[digest] = read_table(data, up.name)
        except TableError as exc:
            st.error(str(exc), icon=":material/error:")
            return None, None
    return cache[digest], (up.name, digest)


def _columns(table) -> tuple[str, str, str | None, str, bool] | None:
    """The user's choice of columns (guessed first) and reading options."""
    guess = guess_columns(table)
    cols = list(table.columns)

    def at(name):
        return cols.index(name) if name in cols else 0

    c1, c2, c3 = st.columns(3)
    smiles = c1.selectbox("SMILES column", cols, index=at(guess.smiles), key="yd_smiles_col")
    outcome = c2.selectbox("Outcome column", cols, index=at(guess.outcome or cols[-1]),
                           key="yd_outcome_col")
    id_options = ["(none)", *cols]
    ident = c3.selectbox("ID column (optional)", id_options,
                         index=id_options.index(guess.id) if guess.id in cols else 0,
                         key="yd_id_col")
    c4, c5 = st.columns(2)
    kind = c4.radio("The outcome is", ["auto", "class", "number"], horizontal=True,
                    key="yd_kind", help="auto: text or a few whole numbers are classes, other "
                    "numbers a measurement.")
    salts = c5.selectbox("Salts and mixtures", SALT_RULES, format_func=SALT_CHOICES.get,
                         key="yd_salts", help=SALT_HELP)
    return smiles, outcome, None if ident == "(none)" else ident, kind, salts


def _reading(table, key, choice, classes=None):
    """The molecules read with the chosen columns (and, of a class outcome, the classes chosen
    to train on); kept for the session per choice, with and without a choice of classes."""
    smiles, outcome, ident, kind, salts = choice
    cache = session_cache("yd_readings")
    base = (key, smiles, outcome, ident, kind, salts)
    k = (*base, classes)
    if k not in cache:
        bar = st.progress(0.0, text="Reading molecules…")
        try:
            for old in [c for c in cache if c[:-1] != base]:
                del cache[old]
            cache[k] = read_molecules(
                table, smiles, outcome, ident, outcome=kind, salts=salts,
                progress=lambda f, m="": bar.progress(min(1.0, f), text=m or "Reading…"),
                classes=classes,
            )
        except TableError as exc:
            bar.empty()
            st.error(str(exc), icon=":material/error:")
            return None
        bar.empty()
    return cache[k]


def _class_choice(reading) -> tuple[str, ...] | None:
    """The classes to train on when a class outcome has more than two (None: all of them)."""
    if reading.outcome_kind != "class" or len(reading.classes) <= 2:
        return None
    no_outcome = undetermined_classes(reading.classes)  # PubChem's Inconclusive, say
    default = [c for c in reading.classes if c not in no_outcome]
    chosen = st.multiselect(
        "Classes to train on", list(reading.classes),
        default=default if len(default) >= 2 else list(reading.classes),
        key=f"yd_classes_{reading.outcome_column}",
        help="Leave out a class you do not want the model to predict: its rows are left out "
        "of training. Labels that record no outcome (a PubChem assay's Inconclusive, an Ames "
        "test's equivocal) start left out.")
    return None if set(chosen) == set(reading.classes) else tuple(chosen)


def _summary(reading) -> bool:
    """What was read, before training; True when the table can train a model."""
    with st.container(key="yd_summary"):
        m = st.columns(5)
        m[0].metric("Rows", f"{reading.rows_read:,}")
        m[1].metric("Valid molecules", f"{reading.valid:,}")
        m[2].metric("To train on", f"{len(reading.molecules):,}",
                    help="One per molecule: duplicates once, conflicting duplicates left out.")
        m[3].metric("Duplicates", f"{reading.duplicates:,}")
        m[4].metric("Conflicting", f"{reading.conflicting:,}",
                    help="Molecules listed with different outcomes: left out of training.")
        refused = reading.refused_by_reason()
        if refused:
            st.markdown("**Rows refused or left out**" if reading.left_out else "**Rows refused**")
            st.dataframe(pd.DataFrame(
                [{"reason": r, "rows": n, "first one": msg} for r, (n, msg) in refused.items()]),
                hide_index=True, width="stretch")
        if reading.outcome_kind == "class":
            counts = reading.class_counts()
            st.markdown(f"**Classes of {reading.outcome_column}**")
            st.bar_chart(pd.Series(counts, name="molecules"), height=180)
        else:
            st.markdown(f"**{reading.outcome_column}** (a number: the model will be a "
                        f"regressor): " + ", ".join(
                            f"{k} {v:.3g}" for k, v in reading.outcome_summary().items()))
            st.plotly_chart(outcome_histogram([float(v) for v in reading.outcomes],
                                              reading.outcome_column),
                            key="yd_outcome_histogram", theme=None)
        for w in reading.warnings:
            st.warning(w, icon=":material/warning:")
    problem = reading.problem()
    if problem is not None:
        st.error(str(problem), icon=":material/error:")
        return False
    return True


# ----------------------------------------------------------------------------- training


def _train_form(owner: str, reading, source_file: str) -> None:
    st.subheader("2 · Train a model", anchor="train")
    c1, c2, c3 = st.columns(3)
    name = c1.text_input("Model name", key="yd_name", placeholder="e.g. ames_2024",
                         help="1-40 lower-case letters, digits or _; one namespace per server: "
                         "a name in use is refused.")
    recipe = c2.radio("Recipe", USER_RECIPES, horizontal=True, key="yd_recipe",
                      help=" · ".join(f"{k}: {v}" for k, v in RECIPE_HELP.items()))
    split = c3.radio("Split", SPLIT_KINDS, horizontal=True, key="yd_split",
                     help="random: 80/10/10 at random; scaffold: molecules of one Bemis-Murcko "
                     "scaffold stay in one split, so the test set holds chemotypes the model "
                     "has not seen.")
    c4, c5 = st.columns(2)
    budget = c4.slider("Time budget (seconds)", 30, int(DEFAULT_TIME_BUDGET_S),
                       int(DEFAULT_TIME_BUDGET_S), step=30, key="yd_budget",
                       help="Training stops here and keeps its best checkpoint so far.")
    seed = int(c5.number_input("Seed", 0, 10_000, 0, key="yd_seed"))
    if st.button("Train", type="primary", key="yd_train", icon=":material/model_training:"):
        try:
            name = check_model_name(name)  # a bad or taken name is said at once
            start_training(owner, reading, name, recipe=recipe, split=split, seed=seed,
                           time_budget_s=float(budget), device=selection().device,
                           source_file=source_file)
            set_session_value("yd_open", name)
        except ValueError as exc:
            st.error(str(exc), icon=":material/error:")


@st.fragment(run_every=1.0)
def _job_panel(owner: str) -> None:
    """The owner's training: progress and a cancel button while it runs, its end after."""
    job = job_of(owner)
    if job is None:
        return
    with st.container(key="yd_job"):
        if job.running:
            st.progress(job.fraction, text=f"{job.name}: {job.message}")
            if st.button("Cancel", key="yd_cancel", icon=":material/cancel:"):
                job.cancel.set()
            return
        if job.state == "done":
            st.success(job.message, icon=":material/check_circle:")
        elif job.state == "cancelled":
            st.info(job.message, icon=":material/info:")
        else:
            st.error(job.error or "The training failed.", icon=":material/error:")
        if st.button("OK", key="yd_job_ok"):
            forget_job(owner)
            st.rerun()


# ----------------------------------------------------------------------------- models


def _models_panel(owner: str):
    """The owner's models (and shared ones): pick one; download, share, delete; import."""
    st.subheader("Your models", anchor="models")
    models = list_user_models(owner)
    names = [m.name for m in models]
    opened = session_value("yd_open")
    c1, c2 = st.columns([3, 2])
    if names:
        index = names.index(opened) if opened in names else 0
        pick = c1.selectbox("Model", names, index=index, key="yd_model",
                            format_func=lambda n: f"{n}{'' if _mine(models, n, owner) else ' (shared)'}")
    else:
        pick = None
        c1.caption("No model yet: upload a table below and train one.")
    other = c2.text_input("Open a shared model by name", key="yd_shared_name")
    if other:
        try:
            pick = user_model(other, owner).name
        except ValueError as exc:
            c2.error(str(exc), icon=":material/error:")
    with st.expander("Upload a model file (from another machine)"):
        up = st.file_uploader("Model file", type=["pt"], key="yd_import", max_upload_size=200)
        if up is not None and st.button("Add it", key="yd_import_go"):
            try:
                pick = import_user_model(up.getvalue(), owner=owner).name
                set_session_value("yd_open", pick)
                st.success(f"Added {pick}.")
            except Exception as exc:  # noqa: BLE001 - any bad upload is one message
                show_error(exc, "Not added")
    return user_model(pick, owner) if pick else None


def _regression_figures(m, test: dict, outcome: str) -> None:
    """A regressor's held-out figures: R², RMSE (MAE in its help) and predicted against
    measured on the test molecules."""
    def fmt(value, spec: str) -> str:
        return "n/a" if value is None else format(value, spec)

    m[0].metric("Test R²", fmt(test.get("r2"), ".3f"))
    m[1].metric("Test RMSE", fmt(test.get("rmse"), ".3g"),
                help=f"Mean absolute error {fmt(test.get('mae'), '.3g')} (units of {outcome}).")
    if test.get("points"):
        st.markdown(f"**Predicted against measured {outcome}, test split**")
        st.scatter_chart(pd.DataFrame(test["points"], columns=["measured", "predicted"]),
                         x="measured", y="predicted", height=280)


def _salts_words(model) -> str:
    """How the model's table read salts, as the page offered it (models trained before the
    rule was recorded refused them or kept the largest fragment: not known)."""
    return SALT_CHOICES.get(model.salts or "", "as chosen then")


def _domain_line(model) -> None:
    """How the model did on its test molecules unlike its training molecules (the line the
    Molecule page cautions under), in a caption; nothing if it cannot be computed."""
    try:
        record = domain_record(molecule_model(selection().device, model=model.name))
    except Exception:  # noqa: BLE001 - an extra fact, never a reason for an error here
        return
    if record is None:
        return
    total = record.n_inside + record.n_outside
    line = (f"Test molecules unlike the training molecules (no training molecule "
            f"{record.threshold:.1f} or more similar, Tanimoto): {record.n_outside} of {total}")
    if record.n_outside and record.n_inside:
        if model.regression:
            line += (f"; RMSE {record.rmse_outside:.3g} on them, {record.rmse_inside:.3g} on "
                     f"the others")
        else:
            line += (f"; right on {record.right_outside:.0%} of them, {record.right_inside:.0%} "
                     f"of the others")
    st.caption(line + ". The Molecule page cautions for such a molecule.")


def _mine(models, name: str, owner: str) -> bool:
    return any(m.name == name and m.owner == owner for m in models)


def _model_facts(model, owner: str) -> None:
    """Held-out figures, training facts and the model's buttons."""
    test, training = model.metrics.get("test", {}), model.meta.get("training", {})
    with st.container(key="yd_metrics"):
        m = st.columns(4)
        if model.regression:
            _regression_figures(m, test, model.meta.get("outcome_column", "value"))
        else:
            acc, auc = test.get("accuracy"), test.get("roc_auc")
            m[0].metric("Test accuracy", "n/a" if acc is None else f"{acc:.1%}")
            m[1].metric("Test ROC-AUC", "n/a" if auc is None else f"{auc:.3f}")
        m[2].metric("Test molecules", test.get("n", 0))
        m[3].metric("Training", f"{training.get('seconds', 0):.0f} s",
                    help=f"{training.get('epochs')} epochs, stopped by {training.get('stopped')}; "
                    f"{model.meta.get('split')} split, seed {model.meta.get('seed')}, recipe "
                    f"{model.meta.get('recipe')}, salts {_salts_words(model)}.")
        if test.get("confusion"):
            st.markdown("**Confusion on the test split** (rows: measured, columns: predicted)")
            st.dataframe(pd.DataFrame(test["confusion"], index=list(model.classes),
                                      columns=list(model.classes)), width="content")
        _domain_line(model)
    c1, c2, c3 = st.columns(3)
    c1.download_button("Download the model", data=lambda: export_user_model(model.name, owner),
                       file_name=f"{model.name}.gem.pt", key="yd_download",
                       icon=":material/download:")
    if model.owner == owner:
        shared = c2.toggle("Shared by name", value=model.shared, key=f"yd_share_{model.name}",
                           help="Anyone who types the name can open it (never delete it).")
        if shared != model.shared:
            share_user_model(model.name, owner, shared)
        if c3.button("Delete", key="yd_delete", icon=":material/delete:"):
            delete_user_model(model.name, owner)
            set_session_value("yd_open", None)
            st.rerun()


# ----------------------------------------------------------------------------- explaining


def _ask_why(model) -> None:
    st.subheader("3 · Ask why", anchor="ask-why")
    smiles = st.text_input("SMILES", key="yd_ask", placeholder="e.g. O=[N+]([O-])c1ccccc1")
    if not smiles:
        return
    try:  # a salt as the model's table read them
        mol = smiles_to_instance(smiles, salts=model.salts or "refuse")
    except MoleculeError as exc:
        st.error(str(exc), icon=":material/error:")
        return
    for warning in mol.warnings:
        st.warning(literal(warning), icon=":material/warning:")
    try:
        with st.spinner("Predicting and explaining…"):
            wb = molecule_model(selection().device, model=model.name)
            res = explain_molecules([mol], ["gem"], model=wb)[0]
    except Exception as exc:  # noqa: BLE001
        show_error(exc, "Explaining failed")
        return
    k = st.slider("K (explanation bonds)", 1, max(2, mol.instance.num_pairs),
                  suggested_k(mol.instance.num_pairs), key="yd_k")
    bonds, scores = res.bonds("gem", k)
    with st.container(key="yd_answer"):
        said = (f"**{model.name} predicts {res.label_name}**" if res.regression else
                f"**{model.name} predicts {res.label_name}** (p = {res.probability:.3f})")
        st.markdown(f"{said}; Gem's {len(bonds)} bonds that the prediction rests on, best "
                    f"first:")
        st.image(molecule_svg(mol.mol, [tuple(b) for b in bonds], scores=scores))
        st.dataframe(pd.DataFrame({"bond": [f"{i}-{j}" for i, j in bonds], "score": scores}),
                     hide_index=True, width="content")


def _screen(model, reading) -> None:
    st.subheader("4 · Screen the file", anchor="screen")
    if reading is None:
        st.caption("Upload a table above to screen its molecules with this model.")
        return
    n = min(len(reading.molecules), MAX_SCREEN)
    if not st.button(f"Screen {n:,} molecules of the file", key="yd_screen_go"):
        return
    try:
        with st.spinner("Screening…"):
            wb = molecule_model(selection().device, model=model.name)
            results = explain_molecules(list(reading.molecules[:n]), ["gem"], model=wb)
    except Exception as exc:  # noqa: BLE001
        show_error(exc, "Screening failed")
        return
    rows = []
    for res, measured in zip(results, reading.outcomes[:n]):
        k = suggested_k(res.molecule.instance.num_pairs)
        said = ({"measured": float(measured), "predicted": round(float(res.value), 4)}
                if res.value is not None else
                {"measured": str(measured), "predicted": res.label_name,
                 "probability": round(res.probability, 4)})
        rows.append({"smiles": res.molecule.input_smiles, **said,
                     "explanation": fragment_smiles(res.molecule.mol,
                                                    [tuple(b) for b in res.bonds("gem", k)[0]])})
    df = pd.DataFrame(rows)
    with st.container(key="yd_screen"):
        st.caption(f"{len(df):,} molecules; {_agreement(df, model.regression)} "
                   f"(training molecules included).")
        st.dataframe(df, hide_index=True, width="stretch", height=320)
        st.download_button("Download CSV", df.to_csv(index=False), f"{model.name}-screen.csv",
                           key="yd_screen_csv", icon=":material/download:")


def _agreement(df: pd.DataFrame, regression: bool) -> str:
    """How the screened predictions compare with the table's outcomes, in words."""
    if not len(df):
        return "nothing to compare"
    if regression:
        err = (df["predicted"] - df["measured"]).abs()
        return f"mean absolute error {err.mean():.3g} against the table"
    agree = float((df["measured"] == df["predicted"]).mean())
    return f"the model agrees with the table on {agree:.1%}"


def _benchmark(model) -> None:
    st.subheader("5 · How faithful, how fast", anchor="benchmark")
    st.caption(
        "Each explainer on the model's test molecules: sufficiency (the prediction on the top-k "
        "bonds alone is the same, mean over k = 5..25), necessity (deleting them changes it, "
        "k = 2..10), both with the field's drop_isolated protocol, and the time per molecule. "
        "Gem + check asks the model at explain time; random scores are the floor."
        + (" For a model of a number, 'the same' means within 0.1 × the spread of its test "
           "predictions." if model.regression else "")
    )
    if not st.button("Measure on the test split", key="yd_bench_go"):
        return
    alert = "mutagen" if "mutagen" in model.classes else None
    try:
        with st.spinner("Explaining the test split with each method…"):
            result = evaluate_user_model(model.name, device=selection().device,
                                         alert_class=alert, owner=None)
    except Exception as exc:  # noqa: BLE001
        show_error(exc, "Measuring failed")
        return
    rows = [{"method": method_title(m), "ms per molecule": round(r["ms_per_molecule"], 3),
             "sufficiency": round(r["sufficiency"], 3), "necessity": round(r["necessity"], 3),
             **({"toxicophore AUC": r["toxicophore_auc"]} if alert else {})}
            for m, r in result["methods"].items()]
    with st.container(key="yd_bench"):
        st.caption(f"{result['molecules']} test molecules.")
        st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")


# ----------------------------------------------------------------------------- page


def render() -> None:
    owner = owner_token()
    st.header("Your data", anchor="your-data")
    st.caption(
        "Bring a table of molecules and outcomes; train a graph neural network on it; ask it why. "
        f"Models are private to this browser session (its link holds your token) unless you "
        f"share one by name. At most {MAX_RUNNING} trainings run on this server at once."
    )
    model = _models_panel(owner)
    if model is not None:
        _model_facts(model, owner)
    st.subheader("1 · Upload a table", anchor="upload")
    table, key = _uploaded_table()
    reading = None
    if table is not None:
        choice = _columns(table)
        if choice is not None:
            reading = _reading(table, key, choice)
            classes = _class_choice(reading) if reading is not None else None
            if classes is not None:
                reading = _reading(table, key, choice, classes)
    if reading is not None and _summary(reading):
        _train_form(owner, reading, key[0])
    _job_panel(owner)
    if model is not None:
        _ask_why(model)
        _screen(model, reading)
        _benchmark(model)


run_page(render)
