"""Molecule: a chemist's SMILES (or a file of them) → mutagenicity prediction and explanation.

The Mutagenicity target model, whatever dataset the sidebar shows, or a model the user trained
on a table of their own (the Your data page), chosen in the sidebar. The SMILES becomes a
dataset-like graph (explicit hydrogens, Kekulé bond orders, the 14 training elements); the
explainers chosen in the sidebar mark the K bonds that matter most. Scores are kept per
molecule and method, so changing K only re-thresholds them.
"""

from __future__ import annotations

import streamlit as st
from components.molecule_file import render_file
from components.molecule_single import render_single
from messages import SALT_CHOICES, SALT_HELP, molecule_default_reason
from state.runtime import run_page
from state.selection import molecule_user_model, selection
from state.session import follow_model_salts

from gem_core.api import SALT_RULES

# ----------------------------------------------------------------------------- page


def _mutagenicity_caption() -> None:
    st.caption(
        "The Mutagenicity model (the graph neural network being explained) says whether "
        "a molecule is a mutagen (the Ames test "
        "data of Kazius et al. 2005); the explainers chosen in the sidebar mark the bonds "
        "its prediction rests on. Hydrogens are added explicitly and aromatic rings "
        "written with alternating bonds, as in the training data."
    )
    reason = molecule_default_reason()
    if reason:
        st.caption(
            reason,
            help="The sidebar's 'Model being explained' switches between the models; "
            "the figures are those of the shipped benchmark results "
            "(assets/results).",
        )


def _user_salts(name: str) -> str | None:
    """How the user's model ``name`` read salts in its table (None: not recorded, or the model
    cannot be read)."""
    from gem_core.api import user_model

    try:
        return user_model(name).salts
    except ValueError:
        return None


def _user_regression(name: str) -> bool:
    """Whether the user's model ``name`` predicts a number (False where it cannot be read: the
    page then reports the model's own error where it loads it)."""
    from gem_core.api import user_model

    try:
        return user_model(name).regression
    except ValueError:
        return False


def render() -> None:
    sel = selection()
    st.header("Explain a molecule", anchor="molecule")
    user = molecule_user_model()
    if user is not None:
        st.caption(
            f"The model **{user}** (the graph neural network being explained, trained on a "
            "table on the Your data page) predicts each molecule; the explainers chosen in the "
            "sidebar mark the bonds its prediction rests on. Hydrogens are added explicitly "
            "and aromatic rings written with alternating bonds, as in its training data. The "
            "sidebar's 'Model being explained' switches back to the Mutagenicity models."
        )
    else:
        _mutagenicity_caption()
    # a model of a number (logP, pIC50) has no class the mutagenicity alerts could be about
    alerts = user is None or not _user_regression(user)
    # a model trained on a table reads molecules as its table did, until the user says otherwise
    follow_model_salts(user, lambda: _user_salts(user) if user is not None else None,
                       SALT_RULES[0])
    c1, c2, c3 = st.columns(3)
    opts = {
        "hide_h": c1.toggle(
            "Hide hydrogens in the drawing",
            key="mol_hide_h",
            persist_state="session",
            help="Hydrogens on an explanation bond stay drawn.",
        ),
        "numbers": c1.toggle(
            "Show atom numbers",
            key="mol_numbers",
            persist_state="session",
            help="The numbering of the bond table and of the JSON: RDKit's "
            "Chem.AddHs(Chem.MolFromSmiles(SMILES)).",
        ),
        "outline": alerts
        and c2.toggle(
            "Show toxicophores",
            key="mol_tox_outline",
            value=True,
            persist_state="session",
            help="Atoms of known mutagenicity toxicophores (Kazius et al. 2005) "
            "get a pale teal halo, under the explanation's orange bonds, "
            "to see at a glance whether the two agree.",
        ),
        "alerts": alerts,
        "salts": c3.selectbox(
            "Salts and mixtures",
            SALT_RULES,
            format_func=SALT_CHOICES.get,
            key="mol_salts",
            persist_state="session",
            help=SALT_HELP + " Applies to single molecules and files alike.",
        ),
    }
    single, batch = st.tabs(["One molecule", "File of molecules"], key="mol_tabs")
    with single:
        render_single(sel, opts)
    with batch:
        render_file(sel, opts)


run_page(render)
