"""One drawn panel of the Explore page: a computation graph (pyvis) or a molecule (RDKit), with
its SVG and PNG downloads, and how a molecule is drawn there (hydrogens, toxicophore halos)."""
from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from components import graph_static, graph_view, molecule_view, network_view
from gem_core.api import GemDataset, Instance

PANEL_HEIGHT = 330


@dataclass(frozen=True)
class MoleculeLook:
    """How the page draws a molecule instance: the RDKit molecule (one 2D layout), whether
    hydrogens are hidden, and the toxicophore bonds whose atoms get a halo (none when off)."""

    mol: object
    hide_h: bool
    outline: tuple[tuple[int, int], ...] = ()


def molecule_look(ds: GemDataset, inst: Instance) -> MoleculeLook | None:
    """The molecule of ``inst`` with the page's toggles (None for a graph that is not a
    molecule); its SMILES is said under the toggles, as on the Molecule page."""
    if ds.atom_symbols is None:
        return None
    from gem_core.api import (ensure_depiction, instance_to_mol, molecule_smiles,
                              toxicophore_bond_mask)

    mol = ensure_depiction(instance_to_mol(inst, ds.atom_symbols))  # one 2D layout
    c1, c2 = st.columns(2)
    hide_h = c1.toggle("Hide hydrogens in the drawings", key="ex_hide_h",
                       persist_state="session")
    outline: tuple[tuple[int, int], ...] = ()
    if ds.spec.mutagen_label is not None:  # toxicophores are mutagenicity chemistry
        if c2.toggle("Show toxicophores (pale teal halos)", value=True, key="ex_toxicophores",
                     persist_state="session",
                     help="Known mutagenicity toxicophores (Kazius et al. 2005): their atoms "
                          "get a pale teal halo; the explanation keeps its bond colour."):
            mask = toxicophore_bond_mask(mol, inst.pairs)
            pairs = inst.pairs.t().tolist()
            outline = tuple((int(pairs[j][0]), int(pairs[j][1]))
                            for j in range(len(pairs)) if mask[j])
    st.caption("SMILES (RDKit, hydrogens implicit):")
    st.code(molecule_smiles(mol), language=None)
    return MoleculeLook(mol, hide_h, outline)


def draw_panel(pic: graph_view.GraphPicture, look: MoleculeLook | None, ranked: list[int],
               scores: list[float] | None, key: str, title: str, slot: str,
               close: list[int] | None = None) -> None:
    """Show one picture (pyvis or RDKit) and its SVG/PNG download buttons.

    ``slot`` names the panel ("original" or a method): its live network view keeps that key, so
    a K or instance change updates the drawn network in place instead of rebuilding it.
    ``close``: draw only these nodes (the close-up of a large computation graph).
    """
    if close is not None and look is None:
        pic = pic.restricted(close)
    if look is not None:
        top = [pic.pairs[j] for j in ranked]
        top_scores = None if scores is None else [scores[j] for j in ranked]
        svg = molecule_view.molecule_svg(look.mol, top, top_scores, size=(420, 330),
                                         hide_hydrogens=look.hide_h, outline=look.outline)
        st.image(svg, width="stretch")

        def png() -> bytes:
            return molecule_view.molecule_png(look.mol, top, top_scores,
                                              hide_hydrogens=look.hide_h, legend=title,
                                              outline=look.outline)
    else:
        network_view.show(pic, PANEL_HEIGHT, key=f"ex_net_{slot}", step=key)

        def svg() -> str:
            return graph_static.to_svg(pic, title=title)

        def png() -> bytes:
            return graph_static.to_png(pic, title=title)
    # one horizontal row (a single block) rather than two columns (three): fewer elements for
    # every rerun of every session to send
    row = st.container(horizontal=True, gap="small")
    row.download_button("SVG", svg, file_name=f"{key}.svg", mime="image/svg+xml",
                       key=f"ex_svg_{key}", icon=":material/download:", width="stretch")
    row.download_button("PNG", png, file_name=f"{key}.png", mime="image/png",
                       key=f"ex_png_{key}", icon=":material/download:", width="stretch")
