"""A cheap element screen ahead of a SMARTS match: skip a query a molecule cannot match.

A substructure match maps distinct query atoms to distinct molecule atoms, so a query whose
atoms must be, say, one N and two O cannot match a molecule with fewer. RDKit's
``HasSubstructMatch`` costs a few microseconds even when nothing can match; screening a
molecule's element counts (one ``CalcMolFormula`` call) first saves most of that when a library
is screened against many patterns (the toxicophores: 22 SMARTS per molecule).

The screen is derived from each query atom's own query tree (``Atom.DescribeQuery()``) and is
conservative: an atom whose tree is not understood, or that is negated, may be any element, so
a screen never rejects a molecule the query matches (``tests/test_toxicophores.py`` checks the
screened and unscreened results agree on real molecules).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Optional

from rdkit import Chem
from rdkit.Chem.rdMolDescriptors import CalcMolFormula

__all__ = ["ElementScreen", "query_element_screen", "element_counts", "may_match"]

#: One condition per distinct element set: at least ``count`` atoms with an element in ``set``.
ElementScreen = tuple[tuple[frozenset[int], int], ...]

_ATOMIC_NUM = re.compile(r"AtomAtomicNum (\d+) = val")
_ATOM_TYPE = re.compile(r"AtomType (\d+) = val")  # atomic number + 1000 when aromatic
_FORMULA_TERM = re.compile(r"([A-Z][a-z]?)(\d*)")
_PERIODIC = Chem.GetPeriodicTable()


def _tree(description: str) -> list[tuple[int, str]]:
    """``(indent, text)`` per line of a ``DescribeQuery`` string."""
    return [
        (len(line) - len(line.lstrip(" ")), line.strip())
        for line in description.splitlines()
        if line.strip()
    ]


def _allowed(lines: list[tuple[int, str]], i: int) -> tuple[Optional[frozenset[int]], int]:
    """Elements node ``i`` can match (None: any) and the index after its subtree."""
    indent, text = lines[i]
    children: list[Optional[frozenset[int]]] = []
    j = i + 1
    while j < len(lines) and lines[j][0] > indent:
        child, j = _allowed(lines, j)
        children.append(child)
    if not children:
        for pattern, to_element in ((_ATOMIC_NUM, int), (_ATOM_TYPE, lambda v: int(v) % 1000)):
            m = pattern.fullmatch(text)
            if m:
                return frozenset({to_element(m.group(1))}), j
        return None, j  # degree, charge, ring, recursive SMARTS, negations: any element
    known = [c for c in children if c is not None]
    if text == "AtomAnd":
        return (frozenset.intersection(*known) if known else None), j
    if text == "AtomOr" and len(known) == len(children):
        return frozenset.union(*known), j
    return None, j


def query_element_screen(query: Chem.Mol) -> ElementScreen:
    """The element conditions a molecule must meet for ``query`` (a SMARTS molecule) to match.

    For each distinct element set ``S`` that some query atom is limited to, the molecule needs
    at least as many atoms with an element in ``S`` as the query has atoms limited to a subset
    of ``S`` (the atoms of a match are distinct).
    """
    sets = [_allowed(_tree(atom.DescribeQuery()), 0)[0] for atom in query.GetAtoms()]
    known = [s for s in sets if s is not None]
    return tuple((s, sum(1 for t in known if t <= s)) for s in sorted(set(known), key=sorted))


def element_counts(mol: Chem.Mol) -> Optional[dict[int, int]]:
    """Atomic number -> number of atoms in ``mol`` (implicit hydrogens included; dummy atoms,
    which no element-limited query atom matches, not counted), or None when the formula read
    does not account for every heavy atom: then nothing is screened out."""
    counts: dict[int, int] = {}
    for symbol, number in _FORMULA_TERM.findall(CalcMolFormula(mol)):
        z = _PERIODIC.GetAtomicNumber(symbol)
        counts[z] = counts.get(z, 0) + (int(number) if number else 1)
    if sum(n for z, n in counts.items() if z > 1) != mol.GetNumHeavyAtoms():
        return None
    return counts


def may_match(screen: ElementScreen, counts: Optional[Mapping[int, int]]) -> bool:
    """False only when ``counts`` (from :func:`element_counts`) rule the query out."""
    if counts is None:
        return True
    return all(sum(counts.get(z, 0) for z in elements) >= need for elements, need in screen)
