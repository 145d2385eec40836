"""Drawing molecules with an explanation: RDKit 2-D depictions: SVG to show, PNG to download.

Every picture of a molecule uses its one depiction (the engine's :func:`depiction`: 2D
coordinates computed once on the whole molecule and kept when hydrogens are hidden or bonds
deleted), so panels, what-if pictures and exports line up."""
from __future__ import annotations

from typing import Sequence

from rdkit import Chem, rdBase

from gem_core.api import (HIGHLIGHT_HEX, depiction, draw_molecule_png, draw_molecule_svg,
                          molecule_drawer, without_hydrogens)


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


def molecule_png(mol: Chem.Mol, pairs: Sequence[tuple[int, int]] = (), scores=None,
                 size: tuple[int, int] = (840, 680), hide_hydrogens: bool = False,
                 atom_indices: bool = False, legend: str = "",
                 outline: Sequence[tuple[int, int]] = ()) -> bytes:
    """PNG of the picture :func:`molecule_svg` draws: the same coordinates, highlights and
    hydrogens."""
    return draw_molecule_png(mol, list(pairs), scores=scores, size=size,
                             hide_hydrogens=hide_hydrogens, atom_indices=atom_indices,
                             legend=legend, outline_pairs=list(outline))


# ----------------------------------------------------------------------------- what-if edits

#: deleted bonds and atoms of a what-if edit (the network views' colour for deleted edges)
DELETED_HEX = "#e377c2"


def _shaded(intensity: float) -> tuple[float, float, float]:
    """The explanation colour at ``intensity`` (as :func:`gem_core.chemistry.drawing.draw_molecule_svg`)."""
    a = min(max(float(intensity), 0.0), 1.0)
    return tuple(1.0 - a * (1.0 - c) for c in _rgb(HIGHLIGHT_HEX))


def edited_molecule_svg(mol: Chem.Mol, removed_pairs: Sequence[tuple[int, int]] = (),
                        removed_atoms: Sequence[int] = (),
                        pairs: Sequence[tuple[int, int]] = (), scores=None,
                        size: tuple[int, int] = (420, 340), hide_hydrogens: bool = False,
                        atom_indices: bool = False) -> str:
    """SVG of ``mol`` after a what-if edit, laid out as the unedited molecule.

    Deleted bonds stay where they were, drawn dashed on a pink band; deleted atoms get a pink
    disc (their bonds are deleted too). ``pairs`` (with ``scores``) are an explanation of the
    edited molecule, shaded like :func:`molecule_svg`. Atom numbers are ``mol``'s.
    """
    removed_atoms = {int(a) for a in removed_atoms}
    gone = {tuple(sorted((int(u), int(v)))) for u, v in removed_pairs}
    gone |= {tuple(sorted((b.GetBeginAtomIdx(), b.GetEndAtomIdx()))) for b in mol.GetBonds()
             if b.GetBeginAtomIdx() in removed_atoms or b.GetEndAtomIdx() in removed_atoms}
    top = [tuple(sorted((int(u), int(v)))) for u, v in pairs]
    vals = [1.0] * len(top) if scores is None else [
        float(s) if float(s) == float(s) and float(s) > 0 else 0.0 for s in scores]
    best = max(vals, default=0.0)
    shades = [_shaded(0.3 + 0.7 * v / best if best > 0 else 0.3) for v in vals]

    m = Chem.Mol(depiction(mol))  # the molecule's one layout: the edit moves nothing
    for atom in m.GetAtoms():
        atom.SetIntProp("gem_orig_idx", atom.GetIdx())
    if hide_hydrogens:
        keep = {a for p in [*top, *gone] for a in p} | removed_atoms
        m = without_hydrogens(m, keep)
    new = {a.GetIntProp("gem_orig_idx"): a.GetIdx() for a in m.GetAtoms()}
    if atom_indices:
        for atom in m.GetAtoms():
            atom.SetProp("atomNote", str(atom.GetIntProp("gem_orig_idx")))
    rw = Chem.RWMol(m)
    try:  # explicit single/double bonds: a ring cut open stays drawn as it was (never dashed)
        with rdBase.BlockLogs():
            Chem.Kekulize(rw, clearAromaticFlags=True)
    except Exception:  # noqa: BLE001 - a drawing aid: draw the aromatic form instead
        pass
    for atom in rw.GetAtoms():  # labels as before the edit (no H filled in on a cut valence)
        atom.SetNumExplicitHs(atom.GetTotalNumHs())
        atom.SetNoImplicit(True)
    pink = _rgb(DELETED_HEX)
    atom_map: dict[int, list] = {}
    bond_map: dict[int, list] = {}
    for u, v in sorted(gone):
        a, b = new.get(u), new.get(v)
        if a is None or b is None:
            continue
        bond = rw.GetBondBetweenAtoms(a, b)
        if bond is None:
            continue
        bond.SetBondType(Chem.BondType.ZERO)  # RDKit draws zero-order bonds dashed
        bond.SetIsAromatic(False)
        bond_map[bond.GetIdx()] = [pink]
    for i in removed_atoms:
        if i in new:
            atom_map[new[i]] = [pink]
    for (u, v), colour in zip(top, shades):
        a, b = new.get(u), new.get(v)
        if a is None or b is None:
            continue
        bond = rw.GetBondBetweenAtoms(a, b)
        if bond is not None:
            bond_map.setdefault(bond.GetIdx(), []).append(colour)
        for k in (a, b):
            if colour not in atom_map.setdefault(k, []) and not any(
                    c != pink and sum(c) <= sum(colour) for c in atom_map[k]):
                atom_map[k] = [c for c in atom_map[k] if c == pink] + [colour]
    out = rw.GetMol()
    with rdBase.BlockLogs():
        out.UpdatePropertyCache(strict=False)
    drawer = molecule_drawer(size)
    with rdBase.BlockLogs():
        drawer.DrawMoleculeWithHighlights(out, "", atom_map, bond_map, {}, {})
    drawer.FinishDrawing()
    return drawer.GetDrawingText()
