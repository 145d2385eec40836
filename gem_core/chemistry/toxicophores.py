"""Mutagenicity toxicophores: which bonds of a molecule lie in one, and how well scores find them.

The TU Mutagenicity data set comes from Kazius, McGuire & Bursi, "Derivation and validation of
toxicophores for mutagenicity prediction", J. Med. Chem. 48 (2005) 312-320. That paper lists
substructures that are enriched in Ames mutagens (aromatic nitro, aromatic amine, N-nitroso,
epoxide, ...). Their bonds give a chemistry-grounded reference for a Mutagenicity explanation:
a good explainer of a model that predicts "mutagen" should rank the toxicophore bonds high.
(An explanation explains the *model*; a toxicophore the model ignores is not the explainer's
fault, which is why the benchmark is meant to be read beside the distilled teacher.)

The SMARTS below are written for this project. They are the general forms of Kazius' classes:
the paper's detoxifying exceptions of its "specific" aromatic nitro / amine classes are not
encoded. They work on the molecules of this project, which carry hydrogens as explicit atoms:

* molecules rebuilt from TU graphs by :func:`gem_core.chemistry.convert.instance_to_mol` (Kekulé bonds, no
  charges in the data; ``instance_to_mol`` restores ``[N+](=O)[O-]`` on nitro groups by default,
  ``restore_charges=False`` keeps the neutral N(=O)-O), and
* molecules from :func:`gem_core.chemistry.smiles.smiles_to_instance` (explicit H atoms, Kekulé bonds with
  aromatic flags cleared, charges as typed, e.g. ``[N+](=O)[O-]``).

Design choices:

* **Charge-agnostic.** No pattern tests a formal charge: groups are recognised by element,
  connectivity (``X``, total connections, hydrogen atoms included) and bond order. A nitro group
  is an N with three connections and two one-connection oxygens joined by any bond
  (``[#7X3](~[#8X1])~[#8X1]``), so ``[N+](=O)[O-]``, neutral N(=O)-O and N(=O)=O all match; an
  azide is ``N~N~N`` with connection counts 2-2-1, whether written N=N=N or N-N#N.
* **Hydrogens.** Hydrogen counts are never read with the SMARTS ``H`` primitive (its meaning on
  explicit-H molecules has changed between RDKit versions); a needed hydrogen is a ``[#1]``
  neighbour, e.g. ``$([#7]-[#1])``. Molecules with implicit hydrogens get them added (on a copy;
  the added atoms never appear in results).
* **Which bonds count.** A bond belongs to a toxicophore when both of its atoms lie in the same
  match. A match is the SMARTS match plus the hydrogens on its heteroatoms (N, O, S, P): these
  hydrogens are part of the functional group as a chemist writes it (the N-H bonds of an
  aromatic -NH2, the O-H of a hydroxylamine), and they decide primary vs tertiary. Hydrogens on
  carbon never count (an epoxide is its C-C-O ring, not the ring's C-H bonds; a polycyclic
  aromatic system is its ring bonds). The atom a group is defined by being attached to is part
  of its match (the ring carbon of an aromatic nitro, the sp3 carbon of an aliphatic halide),
  so the attachment bond counts; substituents that only qualify a group stay outside (in
  recursive ``$()`` SMARTS).
* **Aromaticity.** TU graphs are Kekulé-only and ``smiles_to_instance`` clears aromatic flags,
  so aromaticity is perceived on a copy (ring perception + RDKit's default aromaticity model,
  after a non-strict property update, which tolerates the data's neutral nitro groups). Atom
  numbering is unchanged. Patterns use ``c`` / ``a`` and ``=`` accordingly: a C=C written in a
  Kekulé benzene ring is aromatic on the copy and is not an alkene.
* **Polycyclic aromatic systems** have no single SMARTS: they are found by ring analysis, as
  three or more aromatic rings (smallest set of smallest rings, all bonds aromatic) connected by
  shared bonds (fused), hetero-aromatic rings included. Naphthalene (two rings) and fluorene or
  biphenyl (benzene rings not fused to each other) do not qualify.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union

import torch
from rdkit import Chem, rdBase
from rdkit.Chem.rdMolDescriptors import CalcNumAromaticRings
from torch import Tensor

from gem_core.chemistry.convert import as_pair_list, instance_to_mol
from gem_core.chemistry.element_screen import element_counts, may_match, query_element_screen
from gem_core.data.config import check_k
from gem_core.data.datasets import MUTAGENICITY_ATOMS
from gem_core.data.ranking import roc_auc, topk_mask

__all__ = [
    "Toxicophore",
    "TOXICOPHORES",
    "TOXICOPHORE_NAMES",
    "ToxMolecule",
    "prepare_mol",
    "match_toxicophores",
    "toxicophore_bond_mask",
    "toxicophore_classes",
    "as_tox_molecules",
    "toxicophore_prevalence",
    "toxicophore_benchmark",
]

_HALOGEN = "#17,#35,#53"  # Cl, Br, I (C-F bonds are not reactive alkylating / acylating groups)
_HETERO_H = (7, 8, 15, 16)  # hydrogens on these atoms join a match


@dataclass(frozen=True)
class Toxicophore:
    """One toxicophore class.

    Attributes:
        name: identifier (``aromatic_nitro``).
        title: short chemist-readable title.
        smarts: the SMARTS query, or None for a class found by ring analysis.
        rule: one line saying what is matched, in words.
        query: the compiled SMARTS (None when ``smarts`` is None).
    """

    name: str
    title: str
    smarts: Optional[str]
    rule: str
    query: Optional[Chem.Mol] = None


def _entry(name: str, title: str, smarts: Optional[str], rule: str) -> Toxicophore:
    query = None
    if smarts is not None:
        query = Chem.MolFromSmarts(smarts)
        if query is None:  # a typo in the table: fail at import, not silently later
            raise ValueError(f"invalid SMARTS for toxicophore {name!r}: {smarts}")
    return Toxicophore(name, title, smarts, rule, query)


#: The toxicophore classes, in Kazius' order where possible, compiled once at import.
TOXICOPHORES: tuple[Toxicophore, ...] = (
    _entry(
        "aromatic_nitro",
        "Aromatic nitro",
        "c-[#7X3](~[#8X1])~[#8X1]",
        "nitro group (N with two terminal O) on an aromatic carbon",
    ),
    _entry(
        "aromatic_amine",
        "Aromatic amine (primary/secondary)",
        "c-[#7X3;!a;$([#7]-[#1]);!$([#7]=*);!$([#7]-[!#1;!#6]);!$([#7]-[#6]=[!#6])]",
        "N-H amine on an aromatic carbon; other substituent H or carbon, not an amide, urea "
        "or amidine carbon, and no N-heteroatom bond",
    ),
    _entry("aromatic_nitroso", "Aromatic nitroso", "c-[#7X2]=[#8X1]", "N=O on an aromatic carbon"),
    _entry(
        "alkyl_nitrite", "Alkyl nitrite", "[#6X4]-[#8X2]-[#7X2]=[#8X1]", "O=N-O on an sp3 carbon"
    ),
    _entry("n_nitroso", "N-Nitroso (nitrosamine)", "[#7]-[#7X2]=[#8X1]", "N=O on a nitrogen"),
    _entry("epoxide", "Epoxide", "[#6]1-[#8]-[#6]-1", "three-membered C-C-O ring"),
    _entry("aziridine", "Aziridine", "[#6]1-[#7]-[#6]-1", "three-membered C-C-N ring"),
    _entry(
        "azide",
        "Azide",
        "[#7X2]~[#7X2]~[#7X1]",
        "N~N~N with 2, 2 and 1 connections (R-N=N=N in any charge form)",
    ),
    _entry(
        "diazo",
        "Diazo",
        "[#6;$([#6]=[#7X2]=[#7X1]),$([#6;v3]-[#7X2]#[#7X1])]~[#7X2]~[#7X1]",
        "C=N=N (or the carbanion form C-N#N) on a carbon",
    ),
    _entry("triazene", "Triazene", "[#7X2]=[#7X2]-[#7X3]", "N=N-N with a three-connected end N"),
    _entry("aromatic_azo", "Aromatic azo", "c-[#7X2]=[#7X2]-c", "N=N between two aromatic carbons"),
    _entry(
        "heteroatom_heteroatom",
        "Unsubstituted heteroatom-bonded heteroatom",
        "[$([#8X2]-[#1]),$([#7X3](-[#1])-[#1])]-[#7,#8;!$([#7]=*)]",
        "OH or NH2 on an N or O (hydrazine, hydroxylamine, hydroperoxide); not on N=X",
    ),
    _entry(
        "aromatic_hydroxylamine",
        "Aromatic hydroxylamine",
        "c-[#7X3;!a;!$([#7]=*)]-[#8X2]",
        "N-O (O with two connections: OH, O-acyl, O-alkyl) on an aromatic carbon",
    ),
    _entry(
        "aliphatic_halide",
        "Aliphatic halide",
        f"[#6X4]-[{_HALOGEN}]",
        "Cl, Br or I on an sp3 carbon",
    ),
    _entry(
        "acid_halide",
        "Carboxylic acid halide",
        f"[#6X3](=[#8X1])-[{_HALOGEN}]",
        "C(=O) with Cl, Br or I",
    ),
    _entry(
        "mustard",
        "Nitrogen or sulphur mustard",
        f"[#7X3,#16X2;!$(*=*)]-[#6X4]-[#6X4]-[{_HALOGEN}]",
        "N or S carrying a 2-haloethyl group (N/S-C-C-X)",
    ),
    _entry(
        "polycyclic_aromatic",
        "Polycyclic aromatic system",
        None,
        "three or more fused aromatic rings (ring analysis, no SMARTS)",
    ),
    _entry(
        "unsaturated_aldehyde",
        "α,β-Unsaturated aldehyde",
        "[#6;!a]=[#6;!a]-[#6X3;$([#6]-[#1])]=[#8X1]",
        "non-aromatic C=C conjugated with an aldehyde C(=O)H",
    ),
    _entry(
        "alkyl_sulfonate",
        "Alkyl ester of a sulphonic acid",
        "[#6X4]-[#8X2]-[#16X4;$([#16]-[#6])](=[#8X1])=[#8X1]",
        "sp3 carbon on the O of a C-SO2-O ester",
    ),
    _entry(
        "alkyl_phosphonate",
        "Alkyl ester of a phosphonic acid",
        "[#6X4]-[#8X2]-[#15X4;$([#15]-[#6])]=[#8X1]",
        "sp3 carbon on an O of a C-P(=O)-O ester",
    ),
    _entry(
        "aliphatic_n_nitro",
        "Aliphatic N-nitro",
        "[#7;!a]-[#7X3](~[#8X1])~[#8X1]",
        "nitro group on a non-aromatic nitrogen",
    ),
    _entry(
        "diazonium", "Diazonium", "[#6;v4]-[#7X2]#[#7X1]", "C-N#N on a carbon with full valence"
    ),
    _entry(
        "propiolactone",
        "β-Propiolactone",
        "[#8X1]=[#6]1-[#6X4]-[#6X4]-[#8]-1",
        "four-membered lactone ring",
    ),
)

TOXICOPHORE_NAMES: tuple[str, ...] = tuple(t.name for t in TOXICOPHORES)
#: Each SMARTS class's element screen: a molecule without the elements it needs is not matched.
_SCREENS = {t.name: query_element_screen(t.query) for t in TOXICOPHORES if t.query is not None}
_BY_NAME = {t.name: t for t in TOXICOPHORES}
_MIN_FUSED_RINGS = 3


# ----------------------------------------------------------------------------- molecules


def prepare_mol(mol: Chem.Mol) -> Chem.Mol:
    """A copy of ``mol`` ready for matching: explicit hydrogens, rings and aromaticity perceived.

    Atom ``k`` of the copy is atom ``k`` of ``mol``; hydrogens that were implicit are appended
    after the existing atoms. Never raises for a molecule rebuilt from the data set (partial
    sanitisation, errors caught).
    """
    m = Chem.Mol(mol)
    with rdBase.BlockLogs():
        m.UpdatePropertyCache(strict=False)
        # implicit or H-count hydrogens: GetNumAtoms(onlyExplicit=False) adds every atom's
        # GetTotalNumHs() to the atom count (one C++ call instead of a loop over the atoms)
        if m.GetNumAtoms(onlyExplicit=False) > m.GetNumAtoms():
            m = Chem.AddHs(m)
            m.UpdatePropertyCache(strict=False)
        Chem.SanitizeMol(
            m,
            sanitizeOps=Chem.SanitizeFlags.SANITIZE_SYMMRINGS
            | Chem.SanitizeFlags.SANITIZE_SETAROMATICITY,
            catchErrors=True,
        )
    return m


def _fused_aromatic_systems(m: Chem.Mol) -> list[tuple[int, ...]]:
    """Atoms of each system of ≥ 3 aromatic rings fused through shared bonds (sorted tuples)."""
    # Quick exit (one C++ call): CalcNumAromaticRings counts the rings of BondRings() whose
    # bonds are all aromatic, i.e. the rings kept below (0 when no ring information is set, as
    # BondRings() is then empty); fewer than _MIN_FUSED_RINGS of them make no system.
    if CalcNumAromaticRings(m) < _MIN_FUSED_RINGS:
        return []
    info = m.GetRingInfo()
    bond_rings = info.BondRings()
    kept = [
        k
        for k, bonds in enumerate(bond_rings)
        if all(m.GetBondWithIdx(b).GetIsAromatic() for b in bonds)
    ]
    rings = [frozenset(bond_rings[k]) for k in kept]
    parent = list(range(len(rings)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(len(rings)):
        for j in range(i + 1, len(rings)):
            if rings[i] & rings[j]:
                parent[find(i)] = find(j)
    groups: dict[int, list[int]] = {}
    for i in range(len(rings)):
        groups.setdefault(find(i), []).append(i)
    out = []
    atom_rings = None
    for members in groups.values():
        if len(members) >= _MIN_FUSED_RINGS:
            if atom_rings is None:
                atom_rings = info.AtomRings()  # ring k's atoms: the atoms of its bonds
            atoms = set()
            for i in members:
                atoms.update(atom_rings[kept[i]])
            out.append(tuple(sorted(atoms)))
    return sorted(out)


def _with_hetero_hydrogens(m: Chem.Mol, match: tuple[int, ...]) -> tuple[int, ...]:
    extra: list[int] = []
    for idx in match:
        atom = m.GetAtomWithIdx(idx)
        if atom.GetAtomicNum() in _HETERO_H:
            extra.extend(
                nb.GetIdx()
                for nb in atom.GetNeighbors()
                if nb.GetAtomicNum() == 1 and nb.GetIdx() not in match
            )
    return tuple(match) + tuple(sorted(set(extra)))


def match_toxicophores(mol: Chem.Mol) -> dict[str, list[tuple[int, ...]]]:
    """Toxicophore class -> matched atom tuples, in ``mol``'s own atom numbering (hydrogens incl.).

    Each tuple is the SMARTS match (pattern atom order) followed by the hydrogens on its
    heteroatoms; a polycyclic aromatic system is the sorted atoms of its fused rings. Classes
    without a match are absent; classes come in :data:`TOXICOPHORES` order.
    """
    n = mol.GetNumAtoms()
    m = prepare_mol(mol)
    counts = element_counts(m)
    out: dict[str, list[tuple[int, ...]]] = {}
    for tox in TOXICOPHORES:
        if tox.query is None:
            found = _fused_aromatic_systems(m)
        elif not may_match(_SCREENS[tox.name], counts):
            continue
        else:
            found = [
                _with_hetero_hydrogens(m, t)
                for t in m.GetSubstructMatches(tox.query, maxMatches=10000)
            ]
        found = [tuple(a for a in t if a < n) for t in found]  # drop H added by prepare_mol
        if found:
            out[tox.name] = found
    return out


def toxicophore_classes(mol: Chem.Mol) -> list[str]:
    """Names of the toxicophore classes present in ``mol``, in :data:`TOXICOPHORES` order.

    The classes of :func:`match_toxicophores` (a class is present when its SMARTS matches at
    all, or some fused system exists), without collecting the matches.
    """
    m = prepare_mol(mol)
    counts = element_counts(m)
    return [
        tox.name
        for tox in TOXICOPHORES
        if (
            may_match(_SCREENS[tox.name], counts) and m.HasSubstructMatch(tox.query)
            if tox.query is not None
            else _fused_aromatic_systems(m)
        )
    ]


def _mask_from_matches(
    mol: Chem.Mol,
    pair_list: list[tuple[int, int]],
    matches: Mapping[str, list[tuple[int, ...]]],
    classes: Optional[Sequence[str]] = None,
) -> Tensor:
    n = mol.GetNumAtoms()
    for i, j in pair_list:
        inside = 0 <= min(i, j) and max(i, j) < n
        if not inside or mol.GetBondBetweenAtoms(int(i), int(j)) is None:
            raise ValueError(f"atoms {i} and {j} are not bonded in this molecule")
    atom_sets = [
        set(t) for name, ts in matches.items() if classes is None or name in classes for t in ts
    ]
    return torch.tensor(
        [any(i in s and j in s for s in atom_sets) for i, j in pair_list], dtype=torch.bool
    )


def toxicophore_bond_mask(
    mol: Chem.Mol, pairs: Any, classes: Optional[Sequence[str]] = None
) -> Tensor:
    """Bool mask ``[P]``: True where pair ``(u, v)`` is a bond inside one toxicophore match.

    Args:
        mol: the molecule (atom ``k`` = node ``k``, hydrogens as atoms).
        pairs: the instance's undirected pairs, ``[2, P]`` tensor or list of ``(u, v)``.
        classes: only these classes (default: all).

    Raises:
        ValueError: a pair is not a bond of ``mol`` (numbering mismatch).
    """
    if classes is not None:
        unknown = [c for c in classes if c not in _BY_NAME]
        if unknown:
            raise ValueError(f"unknown toxicophore classes: {unknown}")
    return _mask_from_matches(mol, as_pair_list(pairs), match_toxicophores(mol), classes)


# ----------------------------------------------------------------------------- benchmark


@dataclass
class ToxMolecule:
    """A molecule of the benchmark: its RDKit molecule and the instance's pairs (``u < v``)."""

    mol: Chem.Mol
    pairs: list[tuple[int, int]]

    @classmethod
    def from_instance(
        cls, instance: Any, atom_symbols: Sequence[str] = MUTAGENICITY_ATOMS
    ) -> "ToxMolecule":
        """From a TU :class:`~gem_core.data.instances.Instance` (rebuilt with ``instance_to_mol``)."""
        return cls(instance_to_mol(instance, atom_symbols), as_pair_list(instance.pairs))


MoleculeLike = Union[ToxMolecule, tuple, Any]


def as_tox_molecules(
    molecules: Sequence[MoleculeLike], atom_symbols: Sequence[str] = MUTAGENICITY_ATOMS
) -> list[ToxMolecule]:
    """Normalise benchmark input: ``(mol, pairs)`` tuples, objects with ``.mol`` and ``.pairs``
    (:class:`ToxMolecule`, :class:`~gem_core.chemistry.smiles.MoleculeInstance`) or TU instances (rebuilt
    with :func:`~gem_core.chemistry.convert.instance_to_mol` over ``atom_symbols``, e.g.
    ``GemDataset.atom_symbols``)."""
    out = []
    for item in molecules:
        if isinstance(item, ToxMolecule):
            out.append(item)
        elif isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], Chem.Mol):
            out.append(ToxMolecule(item[0], as_pair_list(item[1])))
        elif hasattr(item, "mol") and hasattr(item, "pairs"):
            out.append(ToxMolecule(item.mol, as_pair_list(item.pairs)))
        elif hasattr(item, "x") and hasattr(item, "pairs"):
            out.append(ToxMolecule.from_instance(item, atom_symbols))
        else:
            raise TypeError(f"cannot read a molecule from {type(item).__name__}")
    return out


def _group_key(group: Any) -> str:
    if isinstance(group, Tensor):
        group = group.item()
    if isinstance(group, float) and group.is_integer():
        group = int(group)
    return str(int(group)) if isinstance(group, numbers.Integral) else str(group)


def toxicophore_prevalence(
    molecules: Sequence[MoleculeLike],
    groups: Sequence[Any],
    atom_symbols: Sequence[str] = MUTAGENICITY_ATOMS,
) -> dict[str, Any]:
    """Share of molecules holding each class, per group (e.g. label or predicted class).

    Returns ``{"n": {group: count}, "any": {group: share with any toxicophore},
    "classes": {class: {group: share}}}``; group keys are ``str(group)``.
    """
    mols = as_tox_molecules(molecules, atom_symbols)
    if len(groups) != len(mols):
        raise ValueError(f"{len(groups)} groups for {len(mols)} molecules")
    keys = [_group_key(g) for g in groups]
    order = sorted(set(keys))
    n = {g: keys.count(g) for g in order}
    counts = {name: {g: 0 for g in order} for name in TOXICOPHORE_NAMES}
    any_count = {g: 0 for g in order}
    for mol, g in zip(mols, keys):
        present = toxicophore_classes(mol.mol)
        any_count[g] += bool(present)
        for name in present:
            counts[name][g] += 1
    return {
        "n": n,
        "any": {g: any_count[g] / n[g] for g in order},
        "classes": {name: {g: c[g] / n[g] for g in order} for name, c in counts.items()},
    }


def _expected_random_recall(num_pairs: int, num_tox: int, k: int) -> float:
    """Mean recall@k of uniformly random scores: top-k is a uniform k-subset of the pairs."""
    picked = min(k, num_pairs)
    return picked * num_tox / num_pairs / min(k, num_tox)


def toxicophore_benchmark(
    molecules: Sequence[MoleculeLike],
    scores_by_method: Mapping[str, Sequence[Any]],
    predictions: Any,
    mutagen_label: int = 0,
    k: int = 8,
    atom_symbols: Sequence[str] = MUTAGENICITY_ATOMS,
) -> dict[str, Any]:
    """How well each method's bond scores find the toxicophore bonds of predicted mutagens.

    Kept molecules: predicted ``mutagen_label`` with at least one toxicophore bond and at least
    one other bond. Per kept molecule, ``auc`` is the rank ROC-AUC of the scores against the
    toxicophore-bond mask (:func:`gem_core.data.ranking.roc_auc`, ties one half) and
    ``recall_at_{k}`` is ``|top-k ∩ toxicophore| / min(k, |toxicophore|)`` with the engine's
    top-K rule (:func:`gem_core.data.ranking.topk_mask`); both are averaged over molecules (scores of
    different molecules are not comparable, so nothing is pooled).

    Args:
        molecules: see :func:`as_tox_molecules` (TU instances work directly).
        scores_by_method: method -> one score tensor per molecule (per pair, same order).
        predictions: the target's predicted class per molecule.
        mutagen_label: the "mutagen" class (0 for Mutagenicity).
        k: top-K of the recall.

    Returns:
        ``{"molecules": n, "methods": {name: {"auc": a, "recall_at_8": r}}, "k": k,
        "random_auc": 0.5, "random_recall_at_8": expected recall of uniformly random scores,
        "toxicophore_bonds": mean toxicophore bonds per kept molecule,
        "predicted_mutagens": m, "left_out": {"no_toxicophore": .., "all_toxicophore": ..},
        "by_class": {class: the same summary over the kept molecules holding that class}}``
        (``recall_at_{k}`` keys follow ``k``; method values are None when no molecule is kept).
        ``by_class`` stratifies molecules, not bonds: its masks still hold every class.
    """
    k = check_k(k)
    mols = as_tox_molecules(molecules, atom_symbols)
    preds = torch.as_tensor(predictions).reshape(-1).long().tolist()
    if len(preds) != len(mols):
        raise ValueError(f"{len(preds)} predictions for {len(mols)} molecules")
    for name, scores in scores_by_method.items():
        if len(scores) != len(mols):
            raise ValueError(
                f"method {name!r}: {len(scores)} score tensors for {len(mols)} molecules"
            )
    key = f"recall_at_{k}"

    kept: list[tuple[int, Tensor, list[str]]] = []
    left_out = {"no_toxicophore": 0, "all_toxicophore": 0}
    predicted = 0
    for i, (mol, pred) in enumerate(zip(mols, preds)):
        if pred != int(mutagen_label):
            continue
        predicted += 1
        matches = match_toxicophores(mol.mol)
        mask = _mask_from_matches(mol.mol, mol.pairs, matches)
        if not bool(mask.any()):
            left_out["no_toxicophore"] += 1
            continue
        if bool(mask.all()):
            left_out["all_toxicophore"] += 1
            continue
        kept.append((i, mask, list(matches)))

    # per method: one (auc, recall) per kept molecule
    per_molecule: dict[str, list[tuple[float, float]]] = {}
    for name, scores in scores_by_method.items():
        results: list[tuple[float, float]] = []
        for i, mask, _ in kept:
            s = torch.as_tensor(scores[i]).detach().reshape(-1).cpu()
            if s.numel() != mask.numel():
                raise ValueError(
                    f"method {name!r}: {s.numel()} scores for molecule {i} with "
                    f"{mask.numel()} pairs"
                )
            hits = int((topk_mask(s, k) & mask).sum())
            auc = roc_auc(s, mask)
            assert auc is not None  # a kept molecule has toxicophore bonds and other bonds
            results.append((auc, hits / min(k, int(mask.sum()))))
        per_molecule[name] = results
    random_recall = [
        _expected_random_recall(mask.numel(), int(mask.sum()), k) for _, mask, _ in kept
    ]

    def summary(rows: list[int]) -> dict[str, Any]:
        def mean(values: list[float]) -> Optional[float]:
            return sum(values) / len(values) if values else None

        return {
            "molecules": len(rows),
            "methods": {
                name: {
                    "auc": mean([per_molecule[name][r][0] for r in rows]),
                    key: mean([per_molecule[name][r][1] for r in rows]),
                }
                for name in scores_by_method
            },
            f"random_{key}": mean([random_recall[r] for r in rows]),
            "toxicophore_bonds": mean([float(kept[r][1].sum()) for r in rows]),
        }

    out = summary(list(range(len(kept))))
    by_class = {}
    for cls in TOXICOPHORE_NAMES:
        rows = [r for r, (_, _, present) in enumerate(kept) if cls in present]
        if rows:
            by_class[cls] = summary(rows)
    out.update(
        {
            "k": k,
            "random_auc": 0.5,
            "predicted_mutagens": predicted,
            "left_out": left_out,
            "by_class": by_class,
        }
    )
    return out
