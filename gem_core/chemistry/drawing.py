"""Molecules drawn with RDKit: explanation bonds highlighted in shades of one colour, a pale halo
of a second colour on the atoms of other bonds (the toxicophores on the Molecule page).

Everything here is local: drawing produces SVG (or PNG) with RDKit and never reaches a network.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rdkit import Chem, rdBase
from rdkit.Chem import rdDepictor
from rdkit.Chem.Draw import rdMolDraw2D

from gem_core.chemistry.convert import as_pair_list, bond_indices, without_hydrogens

__all__ = [
    "HIGHLIGHT_HEX",
    "HIGHLIGHT_RGB",
    "OUTLINE_HEX",
    "OUTLINE_RGB",
    "MAX_BOND_LENGTH",
    "molecule_drawer",
    "draw_molecule_svg",
    "draw_molecule_png",
    "depiction",
    "ensure_depiction",
]


def _rgb(hex_colour: str, offset: float = 0.0) -> tuple[float, float, float]:
    """The RGB triple in [0, 1] of ``"#RRGGBB"``, each byte raised by ``offset`` first."""
    r, g, b = ((int(hex_colour[i : i + 2], 16) + offset) / 255 for i in (1, 3, 5))
    return (r, g, b)


#: Colour of the most important explanation bond; weaker bonds are lighter shades of it.
HIGHLIGHT_HEX = "#E8590C"
HIGHLIGHT_RGB = _rgb(HIGHLIGHT_HEX)
#: Colour of outlined parts (the molecule's toxicophores on the Molecule page).
OUTLINE_HEX = "#1A9E8F"
OUTLINE_RGB = _rgb(OUTLINE_HEX)
#: The toxicophore layer as drawn: a pale halo of :data:`OUTLINE_HEX` around each outlined atom,
#: never a bond colour, so on a polycyclic molecule whose rings are all "toxicophore" the
#: explanation's bond colour stays the most visible layer
HALO_HEX = "#97D3CC"  # OUTLINE_HEX blended 55 % towards white
# half a step above each byte: RDKit writes colours back truncated, so the SVG says HALO_HEX
HALO_RGB = _rgb(HALO_HEX, offset=0.5)
_MIN_SHADE = 0.3  # intensity of the weakest highlighted bond when scores are given


def _shade(intensity: float) -> tuple[float, float, float]:
    """The highlight colour at ``intensity`` in [0, 1] (0: white, 1: :data:`HIGHLIGHT_RGB`)."""
    a = min(max(float(intensity), 0.0), 1.0)
    r, g, b = (1.0 - a * (1.0 - c) for c in HIGHLIGHT_RGB)
    return (r, g, b)


def _intensities(pairs: list[tuple[int, int]], scores) -> list[float]:
    """Shade intensity per pair: 1 without scores, else scaled to the top score (at least 30 %)."""
    if scores is None:
        return [1.0] * len(pairs)
    if isinstance(scores, Mapping):
        vals = [float(scores.get((i, j), scores.get((j, i), 0.0))) for i, j in pairs]
    else:
        vals = [float(s) for s in (scores.tolist() if hasattr(scores, "tolist") else scores)]
        if len(vals) != len(pairs):
            raise ValueError(f"got {len(vals)} scores for {len(pairs)} highlighted pairs")
    vals = [v if v == v and v > 0 else 0.0 for v in vals]  # NaN and negatives -> weakest shade
    top = max(vals, default=0.0)
    if top <= 0:
        return [_MIN_SHADE] * len(pairs)
    return [_MIN_SHADE + (1 - _MIN_SHADE) * v / top for v in vals]


#: RDKit's cap on a drawn bond's length (its ``fixedBondLength``): a small molecule is drawn at the
#: scale of a mid-sized one instead of being blown up to fill the panel (ethane's one bond and its
#: highlight were a blot)
MAX_BOND_LENGTH = 40


def _has_2d(mol: Chem.Mol) -> bool:
    return mol.GetNumConformers() > 0 and not mol.GetConformer().Is3D()


def ensure_depiction(mol: Chem.Mol) -> Chem.Mol:
    """Give ``mol`` (in place) its one 2D depiction, unless it has one: computed once on the
    whole molecule, hydrogens included, so that every picture of it (any hydrogens hidden, any
    bond deleted) keeps the same coordinates. Returns ``mol``."""
    if not _has_2d(mol):
        rdDepictor.Compute2DCoords(mol)
    return mol


def depiction(mol: Chem.Mol) -> Chem.Mol:
    """``mol`` with its 2D depiction: ``mol`` itself when it carries one
    (:func:`ensure_depiction`), else a copy with it (same molecule, same coordinates)."""
    return mol if _has_2d(mol) else ensure_depiction(Chem.Mol(mol))


def molecule_drawer(size: tuple[int, int], kind: str = "svg"):
    """An RDKit drawer of ``size`` pixels (``"svg"`` or ``"png"``), small molecules kept small."""
    cls = rdMolDraw2D.MolDraw2DSVG if kind == "svg" else rdMolDraw2D.MolDraw2DCairo
    drawer = cls(int(size[0]), int(size[1]))
    # rdkit-stubs type the option from its untyped (*args) property getter as MolDrawOptions
    drawer.drawOptions().fixedBondLength = MAX_BOND_LENGTH  # type: ignore[assignment]
    return drawer


def draw_molecule_svg(
    mol: Chem.Mol,
    highlight_pairs: Sequence[tuple[int, int]] = (),
    scores=None,
    size: tuple[int, int] = (450, 350),
    hide_hydrogens: bool = False,
    atom_indices: bool = False,
    legend: str = "",
    outline_pairs: Sequence[tuple[int, int]] = (),
) -> str:
    """SVG of ``mol`` with the explanation bonds highlighted.

    Args:
        mol: molecule (atom numbering = graph node numbering, e.g. ``MoleculeInstance.mol`` or
            :func:`~gem_core.chemistry.convert.instance_to_mol`); not modified.
        highlight_pairs: explained bonds as atom pairs ``(i, j)`` (either order) or a ``[2, P]``
            tensor. Bonds and their end atoms are drawn in :data:`HIGHLIGHT_HEX`.
        scores: optional importance per highlighted pair (sequence aligned with
            ``highlight_pairs``, or a ``{(i, j): score}`` mapping). The highest score gets the full
            colour, the others lighter shades proportional to score (never below 30 %).
        size: ``(width, height)`` in pixels.
        hide_hydrogens: draw without the hydrogen atoms, except those on a highlighted (or
            outlined) bond, which stay drawn so every explanation bond is seen; the others become
            the H counts of their heavy atoms (NH2, CH3). Atoms are renumbered for drawing and
            mapped back, so highlights land on the right bonds.
        atom_indices: label each atom with its index in ``mol`` (also when hydrogens are hidden).
        legend: optional caption under the molecule.
        outline_pairs: bonds whose atoms get a pale halo of a second colour (:data:`HALO_HEX`),
            e.g. the molecule's toxicophores; bonds keep the explanation's colour only, so the
            explanation stays the most visible layer.

    The 2D coordinates are the molecule's one depiction (:func:`depiction`: computed on the
    whole molecule, hydrogens included, and kept when hydrogens are hidden), so every picture
    of a molecule lines up.
    """
    return _draw(
        mol,
        highlight_pairs,
        scores,
        size,
        hide_hydrogens,
        atom_indices,
        legend,
        outline_pairs,
        "svg",
    )


def draw_molecule_png(
    mol: Chem.Mol,
    highlight_pairs: Sequence[tuple[int, int]] = (),
    scores=None,
    size: tuple[int, int] = (900, 700),
    hide_hydrogens: bool = False,
    atom_indices: bool = False,
    legend: str = "",
    outline_pairs: Sequence[tuple[int, int]] = (),
) -> bytes:
    """PNG of the picture :func:`draw_molecule_svg` draws (same coordinates and colours)."""
    return _draw(
        mol,
        highlight_pairs,
        scores,
        size,
        hide_hydrogens,
        atom_indices,
        legend,
        outline_pairs,
        "png",
    )


def _draw(
    mol, highlight_pairs, scores, size, hide_hydrogens, atom_indices, legend, outline_pairs, kind
):
    pair_list = as_pair_list(highlight_pairs)
    shades = [_shade(a) for a in _intensities(pair_list, scores)]
    bond_indices(mol, pair_list)  # validates the pairs against the original numbering

    m = Chem.Mol(depiction(mol))
    for atom in m.GetAtoms():
        atom.SetIntProp("gem_orig_idx", atom.GetIdx())
    if hide_hydrogens:
        shown = {int(a) for pair in list(pair_list) + as_pair_list(outline_pairs) for a in pair}
        m = without_hydrogens(m, keep=shown)
    new_of_orig = {a.GetIntProp("gem_orig_idx"): a.GetIdx() for a in m.GetAtoms()}

    atom_colours: dict[int, tuple[float, float, float]] = {}
    bond_colours: dict[int, tuple[float, float, float]] = {}

    def _stronger(old, new):  # the darker (more important) shade wins
        return new if old is None or sum(new) < sum(old) else old

    for (i, j), colour in zip(pair_list, shades):
        a, b = new_of_orig.get(int(i)), new_of_orig.get(int(j))
        if a is not None and b is not None:
            bond = m.GetBondBetweenAtoms(a, b)
            bond_colours[bond.GetIdx()] = _stronger(bond_colours.get(bond.GetIdx()), colour)
        for k in (a, b):
            if k is not None:
                atom_colours[k] = _stronger(atom_colours.get(k), colour)

    if atom_indices:
        for atom in m.GetAtoms():
            atom.SetProp("atomNote", str(atom.GetIntProp("gem_orig_idx")))

    drawer = molecule_drawer(size, kind)
    outline = as_pair_list(outline_pairs)
    if outline:
        # two layers that read at once: the explanation colours its bonds (and the atoms that
        # are no toxicophore's), the toxicophores put a pale halo on their atoms only
        bond_indices(mol, outline)
        for i, j in outline:
            for k in (new_of_orig.get(int(i)), new_of_orig.get(int(j))):
                if k is not None:
                    atom_colours[k] = HALO_RGB
    with rdBase.BlockLogs():
        rdMolDraw2D.PrepareAndDrawMolecule(
            drawer,
            m,
            legend=legend,
            highlightAtoms=list(atom_colours),
            highlightAtomColors=atom_colours,
            highlightBonds=list(bond_colours),
            highlightBondColors=bond_colours,
        )
    drawer.FinishDrawing()
    return drawer.GetDrawingText()
