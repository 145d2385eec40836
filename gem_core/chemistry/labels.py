"""Atoms and bonds as a chemist reads them: ``N5``, ``H10 (on C0)``, ``C4–N5 (aromatic nitro)``.

The one labelling of a molecule's atoms and bonds, shared by the app's pickers and tables and
by ``python -m gem_core explain``: the element and the atom's index (the numbering of
``Chem.AddHs(Chem.MolFromSmiles(SMILES))``, as in the JSON's bonds), the bond order as a symbol,
and the toxicophore classes (Kazius et al. 2005) an atom or a bond lies in.
"""

from __future__ import annotations

from collections.abc import Sequence

from rdkit import Chem

from gem_core.chemistry.toxicophores import TOXICOPHORES, match_toxicophores

__all__ = ["BOND_SYMBOL", "bond_labels", "heavy_first", "toxicophore_groups"]

BOND_SYMBOL = {"SINGLE": "–", "DOUBLE": "=", "TRIPLE": "≡", "AROMATIC": "–"}


def bond_labels(mol: Chem.Mol, pairs: Sequence[Sequence[int]]) -> tuple[list[str], list[str]]:
    """Readable labels of ``mol``'s bonds ``pairs`` ("C4–N5 (aromatic nitro)") and of its atoms
    ("N5", "H10 (on C0)"), with the toxicophore each bond or atom belongs to."""
    titles = {t.name: t.title for t in TOXICOPHORES}
    groups = [
        (titles.get(name, name), set(atoms))
        for name, found in match_toxicophores(mol).items()
        for atoms in found
    ]
    sym = [a.GetSymbol() for a in mol.GetAtoms()]

    def tag(atoms: set[int], aromatic: bool = False) -> str:
        names = []
        for title, members in groups:
            if atoms <= members and title not in names:
                names.append(title[0].lower() + title[1:])
        if aromatic and not any("aromatic" in n for n in names):
            names.insert(0, "aromatic")
        return f" ({', '.join(names)})" if names else ""

    edges = []
    for u, v in pairs:
        u, v = int(u), int(v)
        bond = mol.GetBondBetweenAtoms(u, v)
        kind = str(bond.GetBondType()).split(".")[-1] if bond else "SINGLE"
        edges.append(
            f"{sym[u]}{u}{BOND_SYMBOL.get(kind, '–')}{sym[v]}{v}" + tag({u, v}, kind == "AROMATIC")
        )
    nodes = []
    for atom in mol.GetAtoms():
        i = atom.GetIdx()
        if atom.GetAtomicNum() == 1 and atom.GetDegree() == 1:
            nb = atom.GetNeighbors()[0]
            nodes.append(f"H{i} (on {nb.GetSymbol()}{nb.GetIdx()})")
        else:
            nodes.append(f"{sym[i]}{i}" + tag({i}))
    return edges, nodes


def heavy_first(mol: Chem.Mol, pairs: Sequence[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """Orders for pickers: bonds between heavy atoms first, then bonds to hydrogen; heavy atoms
    first, then hydrogens (each in numbering order)."""
    heavy = [a.GetAtomicNum() != 1 for a in mol.GetAtoms()]
    edges = sorted(
        range(len(pairs)), key=lambda j: (not (heavy[pairs[j][0]] and heavy[pairs[j][1]]), j)
    )
    return edges, sorted(range(len(heavy)), key=lambda i: (not heavy[i], i))


def toxicophore_groups(mol: Chem.Mol) -> list[tuple[str, tuple[int, ...]]]:
    """Each toxicophore match of ``mol`` as a group a chemist can delete: ``(title, atoms)``
    with the match's atoms other than carbon (the N, O and halogens of the group and the
    hydrogens on them), so the carbon skeleton it sits on stays: the aromatic nitro of
    4-nitrotoluene is N5, O6, O7, not its ring carbon C4. Matches of carbon only (a polycyclic
    aromatic system) are left out; the same atoms are offered once."""
    titles = {t.name: t.title for t in TOXICOPHORES}
    out: list[tuple[str, tuple[int, ...]]] = []
    seen: set[tuple[int, ...]] = set()
    for name, found in match_toxicophores(mol).items():
        for atoms in found:
            group = tuple(
                sorted(
                    int(a)
                    for a in atoms
                    if a < mol.GetNumAtoms() and mol.GetAtomWithIdx(int(a)).GetAtomicNum() != 6
                )
            )
            if group and group not in seen:
                seen.add(group)
                out.append((titles.get(name, name), group))
    return out
