"""How like the model's training molecules the molecule on the Molecule page is.

The engine finds its closest training molecules (:func:`gem_core.api.nearest_training`, kept
per model and molecule for the server process) and the model's own held-out record inside and
outside its applicability domain (:func:`gem_core.api.domain_record`); this draws them, with a
caution outside. The drawings are kept per SMILES: a K change redraws nothing here.
"""
from __future__ import annotations

import streamlit as st

from components.molecule_common import display, literal, model_key, regression
from gem_core.api import Workbench, domain_record
from state.engine_cache import nearest_of
from state.view_cache import smiles_drawing


def _record_words(model: Workbench) -> str:
    """The model's test molecules on each side of the line, in a sentence (empty if unknown)."""
    record = domain_record(model)
    if record is None or not record.n_outside or not record.n_inside:
        return ""
    if regression(model):
        return (f" On its {record.n_outside} test molecules this far from training its "
                f"RMSE was {record.rmse_outside:.3g}, against {record.rmse_inside:.3g} on the "
                f"{record.n_inside} others.")
    return (f" On its {record.n_outside} test molecules this far from training it was right "
            f"{record.right_outside:.0%} of the time, against {record.right_inside:.0%} on the "
            f"{record.n_inside} others.")


def render_neighbours(model: Workbench, mol) -> None:
    """The closest training molecules of ``mol`` (a parsed molecule), expanded with a caution
    when none is similar enough; a caption when the training data is not on this server."""
    near = nearest_of((model_key(model), mol.smiles), model, mol.mol)
    if near is None:
        st.caption("The model's training molecules are not on this server, so how like them "
                   "this molecule is cannot be shown.")
        return
    if not near.inside:
        st.warning(f"Unlike the molecules the model learned from: the closest of its "
                   f"{near.training:,} training molecules is only {near.closest:.2f} similar "
                   f"(Tanimoto of Morgan fingerprints; under {near.threshold:.1f} counts as "
                   f"outside its domain). Its prediction and explanation are less reliable."
                   + _record_words(model), icon=":material/travel_explore:")
    with st.expander(f"Closest training molecules (similarity {near.closest:.2f})",
                     expanded=not near.inside, key="mol_neighbours"):
        cols = st.columns(len(near.neighbours) or 1)
        for col, n in zip(cols, near.neighbours):
            with col:
                svg = smiles_drawing(n.smiles, (260, 200))
                if svg is not None:
                    st.image(svg, width="stretch")
                label = n.label if regression(model) else display(n.label)
                st.markdown(f"**{label}** · similarity {n.similarity:.2f}")
                st.caption(literal(n.smiles))  # '[N+](' is no Markdown link
