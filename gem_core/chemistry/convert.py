"""Graphs and atom pairs back to RDKit: a dataset graph as a molecule, bond indices of atom pairs,
and the explanation fragment (selected bonds and their atoms) as SMILES or SMARTS.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Iterable, Sequence
from typing import Optional, Union

from rdkit import Chem, rdBase

from gem_core.chemistry.smiles import MoleculeInstance
from gem_core.data.datasets import BOND_ORDERS, MUTAGENICITY_ATOMS
from gem_core.data.instances import Instance

__all__ = [
    "instance_to_mol",
    "bond_index_of_pair",
    "as_pair_list",
    "bond_indices",
    "fragment_smarts",
    "fragment_smiles",
    "without_hydrogens",
    "molecule_smiles",
]

_LABEL_BOND = {0: Chem.BondType.SINGLE, 1: Chem.BondType.DOUBLE, 2: Chem.BondType.TRIPLE}
assert len(_LABEL_BOND) == len(BOND_ORDERS)


# ----------------------------------------------------------------------------- dataset graphs


@functools.lru_cache(maxsize=8)
def _atom_templates(symbols: tuple[str, ...]) -> tuple[Chem.Atom, ...]:
    """One no-implicit-H atom per type; ``AddAtom`` copies it (3x faster than a new Atom per node)."""
    out = []
    for sym in symbols:
        atom = Chem.Atom(sym)
        atom.SetNoImplicit(True)
        out.append(atom)
    return tuple(out)


def _restore_group_charges(
    rw: Chem.RWMol,
    columns: list[int],
    symbols: list[str],
    pairs: list[list[int]],
    labels: list[int],
) -> None:
    """Charge the dataset's neutral nitro (N=O + N–O), azide (N=N=N) and diazo (C=N=N) groups.

    The graph is unchanged (same elements and bond orders; the net charge stays 0), but RDKit
    then sees valid valences instead of a 4-valent N and a radical O / N.
    """
    n_col = symbols.index("N")
    o_col = symbols.index("O") if "O" in symbols else -1
    nitrogens = {a for a, col in enumerate(columns) if col == n_col}
    if not nitrogens:
        return
    degree = [0] * len(columns)
    nbrs: dict[int, list[tuple[int, int]]] = {a: [] for a in nitrogens}
    for (u, v), lab in zip(pairs, labels):
        degree[u] += 1
        degree[v] += 1
        if u in nitrogens:
            nbrs[u].append((v, lab))
        if v in nitrogens:
            nbrs[v].append((u, lab))
    for a, around in nbrs.items():
        if len(around) == 3:  # nitro: exactly one terminal =O and one terminal -O on the N
            double_o = [
                b for b, lab in around if columns[b] == o_col and lab == 1 and degree[b] == 1
            ]
            single_o = [
                b for b, lab in around if columns[b] == o_col and lab == 0 and degree[b] == 1
            ]
            if len(double_o) == 1 and len(single_o) == 1:
                rw.GetAtomWithIdx(a).SetFormalCharge(1)
                rw.GetAtomWithIdx(single_o[0]).SetFormalCharge(-1)
        elif len(around) == 2 and all(lab == 1 for _, lab in around):
            # azide R-N=N=N / diazo R2C=N=N: the middle N, exactly one terminal =N
            ends = [b for b, _ in around if columns[b] == n_col and degree[b] == 1]
            if len(ends) == 1 and all(degree[b] > 1 for b, _ in around if b != ends[0]):
                rw.GetAtomWithIdx(a).SetFormalCharge(1)
                rw.GetAtomWithIdx(ends[0]).SetFormalCharge(-1)


def instance_to_mol(
    instance: Union[Instance, MoleculeInstance],
    atom_symbols: Sequence[str] = MUTAGENICITY_ATOMS,
    restore_charges: bool = True,
) -> Chem.Mol:
    """An RDKit molecule of a Mutagenicity graph: atom ``k`` = node ``k``, bond ``p`` = pair ``p``.

    Hydrogens stay explicit atoms (``SetNoImplicit(True)``, so RDKit adds none), bond orders come
    from ``edge_attr`` (single when absent). Dataset conventions such as a neutral nitro N=O + N–O
    break full sanitisation, so only partial sanitisation is applied
    (``UpdatePropertyCache(strict=False)``, then every step but PROPERTIES and KEKULIZE with
    ``catchErrors=True``); aromaticity is perceived where possible. Never raises for a graph of
    the dataset; a failed step is recorded in the int property ``gem_sanitize_failed``.

    With ``restore_charges`` (default) the dataset's neutral nitro N=O + N–O and azide N=N=N
    (diazo C=N=N) get the usual formal charges (``[N+](=O)[O-]``, ``N=[N+]=[N-]``): same graph,
    net charge 0, but drawn and written as chemists expect (no 4-valent N, no radical O). Other
    oddities of the data stay as they are: 83 graphs keep a 4-valent neutral N or 3-valent O
    (charged by :func:`gem_core.chemistry.dataset_table.restore_dropped_charges` where a dataset
    is written as SMILES), and some atoms lack hydrogens (RDKit marks them as radicals).
    """
    inst = instance.instance if isinstance(instance, MoleculeInstance) else instance
    x = inst.x
    if x.dim() != 2 or x.size(1) != len(atom_symbols):
        raise ValueError(
            f"node features must be one-hot over {len(atom_symbols)} atom types, "
            f"got shape {tuple(x.shape)}"
        )
    if x.size(0) and bool((x.abs().sum(1) == 0).any()):
        raise ValueError("some node has an all-zero feature row: no atom type to rebuild")
    columns = x.argmax(1).tolist()
    labels = (
        [0] * inst.num_pairs
        if inst.edge_attr is None
        else inst.edge_attr.reshape(inst.num_pairs, -1).argmax(1).tolist()
    )

    templates = _atom_templates(tuple(atom_symbols))
    rw = Chem.RWMol()
    for col in columns:
        rw.AddAtom(templates[col])
    pair_list = inst.pairs.t().tolist()
    for (u, v), lab in zip(pair_list, labels):
        rw.AddBond(int(u), int(v), _LABEL_BOND.get(int(lab), Chem.BondType.SINGLE))
    if restore_charges and "N" in atom_symbols:
        _restore_group_charges(rw, columns, list(atom_symbols), pair_list, labels)
    mol = rw.GetMol()
    with rdBase.BlockLogs():
        mol.UpdatePropertyCache(strict=False)
        failed = Chem.SanitizeMol(
            mol,
            sanitizeOps=Chem.SanitizeFlags.SANITIZE_ALL
            ^ Chem.SanitizeFlags.SANITIZE_PROPERTIES
            ^ Chem.SanitizeFlags.SANITIZE_KEKULIZE,
            catchErrors=True,
        )
    mol.SetIntProp("gem_sanitize_failed", int(failed))
    return mol


# ----------------------------------------------------------------------------- pairs and bonds


def bond_index_of_pair(mol: Chem.Mol) -> dict[tuple[int, int], int]:
    """``{(i, j): bond index}`` for every bond, keyed with ``i < j``."""
    out = {}
    for b in mol.GetBonds():
        i, j = b.GetBeginAtomIdx(), b.GetEndAtomIdx()
        out[(min(i, j), max(i, j))] = b.GetIdx()
    return out


def as_pair_list(pairs) -> list[tuple[int, int]]:
    """Pairs as ``[(i, j), ...]`` from a list of pairs or a ``[2, P]`` (or ``[P, 2]``) array."""
    if pairs is None:
        return []
    if hasattr(pairs, "shape") and hasattr(pairs, "tolist"):
        arr = pairs.tolist()
        shape = tuple(pairs.shape)
        if len(shape) == 1 and shape[0] == 0:
            return []
        if len(shape) != 2 or 2 not in shape:
            raise ValueError(f"pairs must be [2, P] or [P, 2], got shape {shape}")
        rows = list(zip(*arr)) if shape[0] == 2 else arr
        return [(int(i), int(j)) for i, j in rows]
    out = []
    for p in pairs:
        i, j = p
        out.append((int(i), int(j)))
    return out


def bond_indices(mol: Chem.Mol, pairs: Iterable[tuple[int, int]]) -> list[int]:
    """RDKit bond index of each pair ``(i, j)``; ``ValueError`` when two atoms are not bonded."""
    out = []
    num_atoms = mol.GetNumAtoms()
    between = mol.GetBondBetweenAtoms
    for i, j in pairs:
        inside = 0 <= min(i, j) and max(i, j) < num_atoms
        bond = between(int(i), int(j)) if inside else None
        if bond is None:
            raise ValueError(f"atoms {i} and {j} are not bonded in this molecule")
        out.append(bond.GetIdx())
    return out


def fragment_smarts(mol: Chem.Mol, pairs, kind: str = "smarts") -> str:
    """The explanation fragment (the explained bonds and their atoms) as SMARTS (or SMILES).

    Disconnected selections come out dot-separated; an empty selection gives ``""``. On a
    molecule from :func:`~gem_core.chemistry.smiles.smiles_to_instance` a nitro selection reads
    ``[#8]=[#7+]-[#8-]``; on a dataset molecule (no charges) ``[#8]=[#7]-[#8]``. ``kind="smiles"``
    writes the fragment as SMILES instead (e.g. ``O=[N+][O-]``), which is easier to read but not a
    query.
    """
    pair_list = as_pair_list(pairs)
    if not pair_list:
        return ""
    bonds = sorted(set(bond_indices(mol, pair_list)))
    atoms = sorted({a for i, j in pair_list for a in (int(i), int(j))})
    with rdBase.BlockLogs():
        if kind == "smarts":
            return Chem.MolFragmentToSmarts(mol, atomsToUse=atoms, bondsToUse=bonds)
        if kind == "smiles":
            return Chem.MolFragmentToSmiles(mol, atomsToUse=atoms, bondsToUse=bonds, canonical=True)
    raise ValueError(f"kind must be 'smarts' or 'smiles', not {kind!r}")


def fragment_smiles(mol: Chem.Mol, pairs) -> str:
    """The explanation fragment as a chemist reads it: part of the molecule, not a list of
    separate molecules.

    The heavy atoms the selected bonds touch, with every bond between them (a selected C-H bond
    highlights its carbon; the carbons of a chain of such bonds read as the chain, not as
    methanes), and ``*`` where the rest of the molecule attaches (a heavy neighbour outside the
    fragment). Hydrogens are the atoms' H counts. Pieces far apart in the molecule stay
    dot-separated. Numbering is ``mol``'s (explicit hydrogens included).
    """
    pair_list = as_pair_list(pairs)
    if not pair_list:
        return ""
    bond_indices(mol, pair_list)  # validates the pairs
    heavy, gone = _heavy_atom_mol(mol)  # a new molecule: _induced_smiles may change it
    atoms: set[int] = set()
    for i, j in pair_list:
        atoms.update(
            k
            for k in (_index_after_removal(int(i), gone), _index_after_removal(int(j), gone))
            if k is not None
        )
    if not atoms:
        raise ValueError("the selected bonds touch no heavy atom (only hydrogens, as in H2)")
    return _induced_smiles(heavy, atoms)


def _induced_smiles(rw: Chem.RWMol, atoms: set[int]) -> str:
    """SMILES of ``atoms`` of ``rw`` with all bonds between them and a ``*`` on each bond to
    an atom outside them. ``rw`` is changed (its attachment atoms become dummies): a molecule
    of the caller's own, not copied again (a copy costs as much as the SMILES)."""
    use, bonds, outside = set(atoms), set(), set()
    # only the bonds of the fragment's own atoms: never a bond between two attachment points
    for atom in map(rw.GetAtomWithIdx, atoms):
        for bond in atom.GetBonds():
            bonds.add(bond.GetIdx())
            other = bond.GetOtherAtomIdx(atom.GetIdx())
            if other not in atoms:  # the neighbour outside becomes an attachment point
                outside.add(other)
    for out in outside:
        use.add(out)
        dummy = rw.GetAtomWithIdx(out)
        dummy.SetAtomicNum(0)
        dummy.SetFormalCharge(0)
        dummy.SetNumExplicitHs(0)
        dummy.SetNoImplicit(True)
        dummy.SetIsotope(0)
    with rdBase.BlockLogs():
        return Chem.MolFragmentToSmiles(
            rw, atomsToUse=sorted(use), bondsToUse=sorted(bonds) or None, canonical=True
        )


_TERMINAL_H = Chem.MolFromSmarts("[#1;D1]~*")  # (hydrogen, its neighbour)
_ISOLATED_H = Chem.MolFromSmarts("[#1;D0]")


def _heavy_atom_mol(mol: Chem.Mol) -> tuple[Chem.Mol, list[int]]:
    """``(without_hydrogens(mol, keep=set()), sorted indices of the removed hydrogens)``.

    The same molecule, built without per-atom Python loops: the hydrogens with at most one
    neighbour are found by SMARTS (``D`` is the atom degree), each neighbour's explicit H count
    grows by its removed hydrogens, and the hydrogens are removed in one batch (the kept atoms
    and bonds keep their relative order, as with one-by-one removal).
    """
    rw = Chem.RWMol(mol)
    size = rw.GetNumAtoms() + 1
    terminal = rw.GetSubstructMatches(_TERMINAL_H, uniquify=False, maxMatches=size)
    gone = sorted(
        [h for h, _ in terminal]
        + [h for (h,) in rw.GetSubstructMatches(_ISOLATED_H, maxMatches=size)]
    )
    if gone:
        added: dict[int, int] = {}
        for _, nb in terminal:
            added[nb] = added.get(nb, 0) + 1
        for nb, count in added.items():
            atom = rw.GetAtomWithIdx(nb)
            atom.SetNumExplicitHs(atom.GetNumExplicitHs() + count)
        rw.BeginBatchEdit()
        for idx in gone:
            rw.RemoveAtom(idx)
        rw.CommitBatchEdit()
    with rdBase.BlockLogs():
        rw.UpdatePropertyCache(strict=False)
    return rw, gone  # the RWMol itself: GetMol() would copy it once more


def _index_after_removal(idx: int, gone: list[int]) -> Optional[int]:
    """Index of atom ``idx`` once the sorted atoms ``gone`` are removed (None if removed)."""
    pos = bisect.bisect_left(gone, idx)
    if pos < len(gone) and gone[pos] == idx:
        return None
    return idx - pos


def without_hydrogens(mol: Chem.Mol, keep: set[int]) -> Chem.Mol:
    """``mol`` without its hydrogen atoms (those in ``keep`` stay): each removed hydrogen
    becomes an explicit H count of its neighbour, so labels read NH2, OH."""
    rw = Chem.RWMol(mol)
    gone = [
        a.GetIdx()
        for a in rw.GetAtoms()
        if a.GetAtomicNum() == 1 and a.GetIdx() not in keep and a.GetDegree() <= 1
    ]
    for idx in sorted(gone, reverse=True):
        for nb in rw.GetAtomWithIdx(idx).GetNeighbors():
            nb.SetNumExplicitHs(nb.GetNumExplicitHs() + 1)
        rw.RemoveAtom(idx)
    out = rw.GetMol()
    with rdBase.BlockLogs():
        out.UpdatePropertyCache(strict=False)
    return out


def molecule_smiles(mol: Chem.Mol) -> str:
    """Canonical SMILES of ``mol`` (a molecule with explicit hydrogens, e.g. from
    :func:`instance_to_mol`) as a chemist writes it: hydrogens implicit, aromatic where RDKit
    perceives it (Kekulé when the molecule does not sanitize)."""
    with rdBase.BlockLogs():
        heavy = Chem.RemoveHs(mol, sanitize=False)
        try:
            copy = Chem.Mol(heavy)
            Chem.SanitizeMol(copy)
            heavy = copy
        except Exception:  # a dataset graph RDKit cannot sanitise: its Kekulé form
            pass
        return Chem.MolToSmiles(heavy)
