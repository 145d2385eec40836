"""What the sidebar selected, kept in the browser session for every page to read.

The entry point's sidebar (:mod:`sidebar`) stores the selection before the page runs; pages only
read it (:func:`selection`, :func:`molecule_target`), so they never draw or re-read the sidebar's
widgets themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from gem_core.api import DATASETS, DatasetSpec, get_spec, molecule_default_target

# The explainers compared when a session starts: Gem and the paper's baselines (PGExplainer
# offers its one-off fit), and random scores as the floor.
DEFAULT_METHODS: tuple[str, ...] = ("gem", "gnnexplainer", "pgexplainer", "random")


@dataclass(frozen=True)
class Selection:
    """What the sidebar selected; read by every page."""

    dataset: str
    device: str
    k: int
    methods: tuple[str, ...]
    target: str = "paper"

    @property
    def spec(self) -> DatasetSpec:
        return get_spec(self.dataset)


def remember_selection(sel: Selection) -> None:
    """Keep the sidebar's selection for the page about to run (and this session's next run)."""
    st.session_state["selection"] = sel


def selection() -> Selection:
    """The current sidebar selection (set by the router before the page runs)."""
    sel = st.session_state.get("selection")
    if sel is None:  # a page run on its own (tests): defaults
        spec = get_spec(list(DATASETS)[0])
        sel = Selection(spec.name, "auto", spec.default_k, DEFAULT_METHODS)
    return sel


def set_molecule_target(target: str) -> None:
    """Keep the target the sidebar chose for the Molecule page (a Mutagenicity model)."""
    st.session_state["molecule_target"] = target


def set_molecule_user_model(name: str | None) -> None:
    """Keep the user's model the sidebar chose for the Molecule page (None: a Mutagenicity
    target, :func:`molecule_target`, explains)."""
    st.session_state["molecule_user_model"] = name


def molecule_user_model() -> str | None:
    """The name of the model trained on a user's table that the Molecule page explains with,
    or None for the Mutagenicity target (set by the sidebar, per browser session)."""
    return st.session_state.get("molecule_user_model")


def molecule_target() -> str:
    """The Mutagenicity target the Molecule page uses (set by the sidebar; the target registry's
    molecule default until the user picks another)."""
    return st.session_state.get("molecule_target", molecule_default_target())
