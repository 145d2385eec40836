"""The sidebar shared by every page: the dataset, target model, device, K and explainers, and the
server-time debug expander. Only the entry point (``streamlit_app.py``) draws it, before the page.

The sidebar hands its choice to the pages through :func:`state.selection.remember_selection`; pages
read :func:`state.selection.selection` and never touch these widgets.
"""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st
import torch
from messages import device_label
from state.runtime import recent_reruns, session_id
from state.selection import (
    DEFAULT_METHODS,
    Selection,
    molecule_target,
    remember_selection,
    set_molecule_target,
    set_molecule_user_model,
)
from state.session import session_value
from state.training_jobs import known_owner, session_models
from theme import method_title

from gem_core.api import (
    DATASETS,
    DEFAULT_TARGET,
    METHODS,
    DatasetSpec,
    get_spec,
    method_spec,
    molecule_default_target,
    molecule_spec,
    target_names,
    target_spec,
)


def device_options() -> list[str]:
    """The devices offered: auto, CPU and, where torch sees one, CUDA."""
    opts = ["auto", "cpu"]
    if torch.cuda.is_available():
        opts.append("cuda")
    return opts


DEVICE_TITLES = {"auto": "auto (the faster one, measured)", "cpu": "CPU", "cuda": "CUDA"}


#: the Molecule page's model selector names a user's model ``user:<name>`` (no target row has a
#: colon in its name)
USER_OPTION = "user:"


def _target_selector(
    spec: DatasetSpec, key: str, default: str = DEFAULT_TARGET, extra: dict[str, str] | None = None
) -> str:
    """Which target model to explain, where the dataset has more than the paper's (``default``
    unless the user picks another); ``extra``: more options after the targets (option -> title:
    the Molecule page's user models)."""
    names = target_names(spec)
    extra = extra or {}
    if len(names) == 1 and not extra:
        return names[0]
    options = [*names, *extra]
    chosen = st.selectbox(
        "Model being explained",
        options,
        format_func=lambda n: extra[n] if n in extra else target_spec(n).title,
        index=options.index(default) if default in options else 0,
        key=key,
        persist_state="session",
        help="The graph neural network whose predictions are explained (the "
        "paper's 'target model'): the paper's architecture, or a "
        "stronger one that reads bond types. Explainers are fitted per "
        "model."
        + (
            " Below them, the models trained on your own tables (the Your data page): "
            "yours, and those shared with you by name."
            if extra
            else ""
        ),
    )
    comparison = "" if chosen in extra else _target_comparison(spec, names)
    if comparison:
        st.caption(comparison)
    return chosen


def _target_comparison(spec: DatasetSpec, names: tuple[str, ...]) -> str:
    """The targets side by side, from the shipped results: test accuracy and how well Gem's
    explanations find the toxicophores (molecules), so a chemist picks with figures."""
    from gem_core.api import recorded_target_summary

    parts = []
    for name in names:
        rec = recorded_target_summary(spec.name, name)
        if rec is None:
            return ""
        text = f"{name}: {100 * rec['test_accuracy']:.1f} % accurate"
        if "toxicophore_auc" in rec:
            text += f", Gem's toxicophore AUC {rec['toxicophore_auc']:.2f}"
        parts.append(text)
    return (
        "Test split — " + "; ".join(parts) + ". The toxicophore AUC says how well the "
        "explanations point at known mutagenic groups (0.5 = chance)."
        if parts
        else ""
    )


def _user_model_title(model, owner: str | None) -> str:
    """A user model as the selector names it (short: the sidebar is narrow; the line above the
    selector says what it predicts): its name and whose it is."""
    return f"{model.name} ({'yours' if owner is not None and model.owner == owner else 'shared'})"


def _molecule_model_selector() -> tuple[str, str | None]:
    """The Molecule page's model: a Mutagenicity target, or a model this browser session may
    open (trained on the Your data page, or shared by name). Returns the Mutagenicity target
    (the one chosen before while a user model is chosen) and the user model's name or None;
    the sidebar names the model above the selector."""
    named = st.empty()
    owner = known_owner()
    models = {f"{USER_OPTION}{m.name}": m for m in session_models()}
    chosen = _target_selector(
        molecule_spec(),
        "sb_target_molecule",
        molecule_default_target(),
        {option: _user_model_title(m, owner) for option, m in models.items()},
    )
    user = models.get(chosen)
    if user is None:
        named.markdown("**Model:** the Mutagenicity graph neural network (mutagen / non-mutagen)")
        return chosen, None
    what = (
        f"predicts {user.meta.get('outcome_column') or 'a number'}"
        if user.regression
        else " / ".join(user.classes)
    )
    named.markdown(f"**Model:** {user.name}, trained on a table on the Your data page ({what})")
    return molecule_target(), user.name


def draw_sidebar(page: str = "") -> Selection:
    """Draw the selectors shared by the pages and store the selection in the session.

    The Molecule page uses a Mutagenicity model (or one of the session's own models, trained on
    the Your data page) and its own K (one per molecule), so there the sidebar names the model
    instead of offering a dataset and a K.
    """
    molecule_page = page == "molecule"
    with st.sidebar:
        st.markdown("### Settings")
        names = list(DATASETS)
        user = None
        if molecule_page:
            dataset = session_value("sb_dataset", names[0])
        else:
            dataset = st.selectbox(
                "Dataset",
                names,
                format_func=lambda n: DATASETS[n].title,
                key="sb_dataset",
                persist_state="session",
            )
        spec = get_spec(dataset)
        if molecule_page:  # its own choice: the chemist's default, not the paper tables'
            target, user = _molecule_model_selector()
        else:
            target = _target_selector(spec, f"sb_target_{spec.name}")
        device = st.selectbox(
            "Device",
            device_options(),
            format_func=DEVICE_TITLES.get,
            key="sb_device",
            persist_state="session",
        )
        st.caption(f"Running on {device_label(device)}", help="The torch device the models use.")
        if molecule_page:
            k = session_value(f"sb_k_{dataset}", spec.default_k)
        else:
            k = st.slider(
                "K (explanation edges)",
                min_value=min(spec.k_grid),
                max_value=max(spec.k_grid),
                value=spec.default_k,
                step=1,
                key=f"sb_k_{dataset}",
                persist_state="session",
                help=f"The paper's grid for {spec.title}: {', '.join(map(str, spec.k_grid))}.",
            )
        methods = st.multiselect(
            "Explainers to compare",
            list(METHODS),
            default=list(DEFAULT_METHODS),
            format_func=method_title,
            key="sb_methods",
            persist_state="session",
        )
        for m in methods:
            if method_spec(m).wait_note:
                st.warning(method_spec(m).wait_note + ".", icon="⏱")
        fitted = [method_title(m) for m in METHODS if method_spec(m).needs_fit]
        learners = ", ".join(fitted[:-1]) + f" and {fitted[-1]}" if len(fitted) > 1 else fitted[0]
        where = (
            "its training molecules once, on this server, the first time they are asked for"
            if user is not None  # a user's model: no fit ships with the app
            else "the training split once per dataset (their fits ship with the app)"
        )
        st.caption(f"{learners} learn from {where}; the others explain each instance directly.")
    chosen = target if not molecule_page or dataset == molecule_spec().name else DEFAULT_TARGET
    sel = Selection(dataset, device, int(k), tuple(m for m in METHODS if m in methods), chosen)
    if molecule_page:  # the Molecule page's model: a Mutagenicity target, or a user's model
        set_molecule_target(target)
        set_molecule_user_model(user)
    remember_selection(sel)
    return sel


def rerun_debug(so_far: Callable[[], float]) -> None:
    """The sidebar's debug expander: this run's server time so far, the session's last runs."""
    recent = recent_reruns()
    with st.sidebar.expander("Server time (debug)", icon=":material/timer:"):
        with st.container(key="dbg_rerun"):
            st.caption(f"Session {session_id()[:8]} · this run {so_far():.0f} ms so far")
            if recent:
                st.caption(
                    "Last runs (page, ms): "
                    + ", ".join(f"{page} {ms:.0f}" for page, ms in reversed(recent))
                )
