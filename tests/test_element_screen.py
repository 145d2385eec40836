"""The element screen ahead of a SMARTS match (gem_core.chemistry.element_screen)."""
from __future__ import annotations

import pytest
from rdkit import Chem

from gem_core.chemistry.element_screen import element_counts, may_match, query_element_screen


def _screen(smarts: str) -> dict[tuple[int, ...], int]:
    return {tuple(sorted(s)): n for s, n in query_element_screen(Chem.MolFromSmarts(smarts))}


def test_screens_count_the_elements_each_query_atom_is_limited_to():
    assert _screen("c-[#7X3](~[#8X1])~[#8X1]") == {(6,): 1, (7,): 1, (8,): 2}
    # an OR of elements is a set; a single element inside it counts towards the set's need
    assert _screen("[#6X4]-[#17,#35,#53]") == {(6,): 1, (17, 35, 53): 1}
    assert _screen("[Cl]-C-[#17,#35]") == {(6,): 1, (17,): 1, (17, 35): 2}
    # AND with other primitives keeps the element; aromatic / aliphatic symbols are elements
    assert _screen("[#7;!a;X3]=O") == {(7,): 1, (8,): 1}


@pytest.mark.parametrize("smarts", ["[!#6]", "*", "[$([#7]-[#1])]", "[#6,$([#7]=*)]", "[!#7;!#8]"])
def test_atoms_not_limited_to_known_elements_are_not_screened(smarts):
    assert query_element_screen(Chem.MolFromSmarts(smarts)) == ()


def test_counts_include_implicit_hydrogens_and_rule_queries_out():
    nitrobenzene = Chem.MolFromSmiles("c1ccccc1[N+](=O)[O-]")
    assert element_counts(nitrobenzene) == {6: 6, 1: 5, 7: 1, 8: 2}
    assert element_counts(Chem.AddHs(nitrobenzene)) == element_counts(nitrobenzene)
    nitro = query_element_screen(Chem.MolFromSmarts("[#7X3](~[#8X1])~[#8X1]"))
    assert may_match(nitro, element_counts(nitrobenzene))
    assert not may_match(nitro, element_counts(Chem.MolFromSmiles("CCO")))  # one O, no N
    assert may_match(nitro, None)  # counts unknown: never screened out


def test_isotopes_and_dummy_atoms_count_as_their_element_or_not_at_all():
    assert element_counts(Chem.MolFromSmiles("[2H]C([13CH3])Cl")) == {6: 2, 1: 5, 17: 1}
    assert element_counts(Chem.MolFromSmiles("*CC")) == {6: 2, 1: 5}


def test_a_formula_that_misses_atoms_gives_no_counts(monkeypatch):
    from gem_core.chemistry import element_screen

    monkeypatch.setattr(element_screen, "CalcMolFormula", lambda mol: "CH3")  # ethane has two C
    assert element_counts(Chem.MolFromSmiles("CC")) is None
