"""The browser session's own values: what one user picked and computed, behind named functions.

Streamlit keeps ``st.session_state`` per browser session and forgets a widget's value after a run
that does not draw the widget; these helpers name each value a page keeps (and, on the Molecule
page, carry the SMILES box and K across such runs) so that pages never index the session directly.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, Optional

import streamlit as st


def session_value(key: str, default: Any = None) -> Any:
    """The session's value under ``key`` (a widget's state or a page's own), else ``default``."""
    return st.session_state.get(key, default)


def set_session_value(key: str, value: Any) -> None:
    """Set the session's value under ``key`` (a widget's state only before the widget draws)."""
    st.session_state[key] = value


def drop_session_value(key: str) -> None:
    """Forget the session's value under ``key`` (nothing when there is none)."""
    st.session_state.pop(key, None)


def session_cache(name: str) -> dict:
    """A dict kept for this browser session under ``name``: results a page keeps per session."""
    return st.session_state.setdefault(name, {})


def random_pick(key: str, n: int, again: bool) -> int:
    """A random position below ``n``, kept in the session under ``key`` until ``again``."""
    if again or key not in st.session_state:
        st.session_state[key] = random.randrange(n)
    return int(st.session_state[key])


def remember_pipeline_summary(dataset: str, summary: Any) -> None:
    """Keep the Pipeline page's last summary of ``dataset`` for this session."""
    st.session_state[f"pl_summary_{dataset}"] = summary


def pipeline_summary(dataset: str) -> Any:
    """The Pipeline page's last summary of ``dataset`` in this session (None before a run)."""
    return st.session_state.get(f"pl_summary_{dataset}")


def set_molecule_example(smiles: str) -> None:
    """An example button's callback: put ``smiles`` in the SMILES box and submit it."""
    st.session_state["mol_smiles"] = smiles
    st.session_state["mol_submitted"] = smiles


def submit_molecule() -> None:
    """The SMILES box's (and the Explain button's) callback: submit what the box holds."""
    st.session_state["mol_submitted"] = st.session_state.get("mol_smiles", "")


def submitted_molecule() -> Optional[str]:
    """The SMILES last submitted on the Molecule page (None before the first)."""
    return st.session_state.get("mol_submitted")


def prepare_smiles_box() -> None:
    """Before the SMILES box draws: a box Streamlit forgot (the page was left, so the widget was
    not drawn) shows the molecule the page's results belong to, the one last submitted."""
    if "mol_smiles" not in st.session_state and "mol_submitted" in st.session_state:
        st.session_state["mol_smiles"] = st.session_state["mol_submitted"]


def prepare_molecule_k(smiles: str, bonds: int, suggested: int) -> None:
    """Set the Molecule page's K slider before it draws: ``suggested`` for a new molecule, else
    the K chosen before, clipped to 1 … ``bonds``.

    The chosen K is kept under a key of its own: Streamlit forgets a widget's value after a run
    that does not draw it (a SMILES with a typo, another page), and K must survive those.
    """
    if st.session_state.get("mol_k_molecule") != smiles:  # a new molecule
        st.session_state["mol_k_kept"] = int(suggested)
        st.session_state["mol_k_molecule"] = smiles
    elif "mol_k" in st.session_state:  # the slider's value, drawn in the last run
        st.session_state["mol_k_kept"] = int(st.session_state["mol_k"])
    kept = int(st.session_state.get("mol_k_kept", suggested))
    st.session_state["mol_k"] = min(max(1, kept), max(1, bonds))


def follow_model_salts(
    model: Optional[str], rule_of: Callable[[], Optional[str]], default: str
) -> None:
    """Set the Molecule page's salts rule (``mol_salts``) to ``rule_of()``, the one the chosen
    user model's table was read with (asked only when the model changes: it reads the model's
    file), when the page's model changes to it (the rule the user had is
    put back when the page returns to the Mutagenicity models, ``model`` None); a rule the user
    picks afterwards stays until the model changes again. ``default``: the selectbox's first
    value (what it shows before anyone picks). Call before the selectbox is drawn."""
    if st.session_state.get("mol_salts_model") == model:
        return
    st.session_state["mol_salts_model"] = model
    if model is None:
        before = st.session_state.pop("mol_salts_before", None)
        if before is not None:
            st.session_state["mol_salts"] = before
    elif (rule := rule_of()) is not None:
        st.session_state.setdefault("mol_salts_before", st.session_state.get("mol_salts", default))
        st.session_state["mol_salts"] = rule
