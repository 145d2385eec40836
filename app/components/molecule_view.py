"""Drawing molecules with an explanation: RDKit 2-D depictions: SVG to show, PNG to download."""
from __future__ import annotations

from typing import Sequence

from rdkit import Chem, rdBase
from rdkit.Chem import rdDepictor
from rdkit.Chem.Draw import rdMolDraw2D

from gem_core.chem import HIGHLIGHT_HEX, draw_molecule_svg


def molecule_svg(mol: Chem.Mol, pairs: Sequence[tuple[int, int]] = (), scores=None,
                 size: tuple[int, int] = (420, 340), hide_hydrogens: bool = False,
                 atom_indices: bool = False, legend: str = "",
                 outline: Sequence[tuple[int, int]] = ()) -> str:
    """SVG of ``mol`` with the explanation bonds ``pairs`` highlighted (shade by score) and the
    ``outline`` bonds (toxicophores) in a second colour."""
    return draw_molecule_svg(mol, list(pairs), scores=scores, size=size,
                             hide_hydrogens=hide_hydrogens, atom_indices=atom_indices,
                             legend=legend, outline_pairs=list(outline))


def _rgb(hex_colour: str) -> tuple[float, float, float]:
    c = hex_colour.lstrip("#")
    return tuple(int(c[i:i + 2], 16) / 255 for i in (0, 2, 4))


def molecule_png(mol: Chem.Mol, pairs: Sequence[tuple[int, int]] = (),
                 size: tuple[int, int] = (840, 680), legend: str = "") -> bytes:
    """PNG of ``mol`` (all atoms drawn) with the explanation bonds and their atoms highlighted."""
    m = Chem.Mol(mol)
    colour = _rgb(HIGHLIGHT_HEX)
    bonds, atoms = {}, {}
    for i, j in pairs:
        bond = m.GetBondBetweenAtoms(int(i), int(j))
        if bond is None:
            continue
        bonds[bond.GetIdx()] = colour
        atoms[int(i)] = colour
        atoms[int(j)] = colour
    rdDepictor.Compute2DCoords(m)
    drawer = rdMolDraw2D.MolDraw2DCairo(int(size[0]), int(size[1]))
    with rdBase.BlockLogs():
        rdMolDraw2D.PrepareAndDrawMolecule(
            drawer, m, legend=legend, highlightAtoms=list(atoms), highlightAtomColors=atoms,
            highlightBonds=list(bonds), highlightBondColors=bonds)
    drawer.FinishDrawing()
    return drawer.GetDrawingText()
