"""Toxicophore classes (Kazius et al. 2005) on SMILES and TU graphs, bond masks, the benchmark."""
from __future__ import annotations

import pytest
import torch
from rdkit import Chem

from gem_core.chemistry.convert import instance_to_mol
from gem_core.chemistry.smiles import smiles_to_instance
from gem_core.chemistry.toxicophores import (TOXICOPHORE_NAMES, TOXICOPHORES, ToxMolecule,
                                             as_tox_molecules, match_toxicophores, prepare_mol,
                                             toxicophore_benchmark, toxicophore_bond_mask,
                                             toxicophore_classes, toxicophore_prevalence)

from .conftest import requires_mutagenicity

torch.set_num_threads(1)

#: One hand-checked molecule per class (every class of the table must appear here).
POSITIVES: dict[str, list[str]] = {
    "aromatic_nitro": ["Cc1ccc(cc1)[N+](=O)[O-]",               # 4-nitrotoluene
                       "O=[N+]([O-])c1ccc2c(c1)Cc1ccccc1-2"],   # 2-nitrofluorene
    "aromatic_amine": ["Nc1ccccc1",                             # aniline
                       "Nc1ccc2cc3ccccc3cc2c1",                 # 2-aminoanthracene
                       "c1ccccc1Nc1ccccc1"],                    # diphenylamine (secondary)
    "aromatic_nitroso": ["O=Nc1ccccc1"],                        # nitrosobenzene
    "alkyl_nitrite": ["CCCCON=O"],                              # butyl nitrite
    "n_nitroso": ["CN(C)N=O"],                                  # N-nitrosodimethylamine
    "epoxide": ["CC1CO1", "C1OC1c1ccccc1"],                     # propylene / styrene oxide
    "aziridine": ["C1CN1"],
    "azide": ["[N-]=[N+]=Nc1ccccc1", "N#[N+][N-]c1ccccc1"],     # phenyl azide, both forms
    "diazo": ["C=[N+]=[N-]", "CCOC(=O)C=[N+]=[N-]"],            # diazomethane, ethyl diazoacetate
    "triazene": ["CN(C)N=Nc1ccccc1"],                           # 1-phenyl-3,3-dimethyltriazene
    "aromatic_azo": ["c1ccccc1N=Nc1ccccc1"],                    # azobenzene
    "heteroatom_heteroatom": ["NNc1ccccc1", "NC(=O)NO"],        # phenylhydrazine, hydroxyurea
    "aromatic_hydroxylamine": ["ONc1ccccc1"],                   # N-phenylhydroxylamine
    "aliphatic_halide": ["CCCCCl", "CCBr"],                     # 1-chlorobutane, bromoethane
    "acid_halide": ["CC(=O)Cl", "ClC(=O)c1ccccc1"],             # acetyl / benzoyl chloride
    "mustard": ["CN(CCCl)CCCl", "ClCCSCCCl"],                   # mechlorethamine, sulphur mustard
    "polycyclic_aromatic": ["c1ccc2cc3ccccc3cc2c1",             # anthracene
                            "c1ccc2c(c1)ccc1ccccc12",           # phenanthrene
                            "c1ccc2c(c1)cc1ccc3cccc4ccc2c1c34"],  # benzo[a]pyrene
    "unsaturated_aldehyde": ["C=CC=O", "O=CC=Cc1ccccc1"],       # acrolein, cinnamaldehyde
    "alkyl_sulfonate": ["COS(C)(=O)=O", "CCOS(C)(=O)=O"],       # MMS, EMS
    "alkyl_phosphonate": ["COP(C)(=O)OC"],                      # dimethyl methylphosphonate
    "aliphatic_n_nitro": ["CN(C)[N+](=O)[O-]"],                 # N-nitrodimethylamine
    "diazonium": ["N#[N+]c1ccccc1"],                            # benzenediazonium
    "propiolactone": ["O=C1CCO1"],                              # beta-propiolactone
}

NEGATIVES = {
    "benzene": "c1ccccc1", "ethanol": "CCO", "benzoic acid": "OC(=O)c1ccccc1",
    "toluene": "Cc1ccccc1", "chlorobenzene": "Clc1ccccc1", "naphthalene": "c1ccc2ccccc2c1",
    "fluorene": "c1ccc2c(c1)Cc1ccccc1-2", "biphenyl": "c1ccccc1-c1ccccc1",
    "acetanilide": "CC(=O)Nc1ccccc1", "N,N-dimethylaniline": "CN(C)c1ccccc1",
    "benzaldehyde": "O=Cc1ccccc1", "fluoroethane": "CCF", "nitromethane": "C[N+](=O)[O-]",
    "acetone oxime": "CC(C)=NO", "indole": "c1ccc2[nH]ccc2c1",
}


def _bonds(mol: Chem.Mol, mask: torch.Tensor, pairs) -> set[tuple[int, int]]:
    return {p for p, m in zip(pairs, mask.tolist()) if m}


def _all_forms(smiles: str):
    """The SMILES molecule, its TU round trip with restored charges, and the neutral TU form."""
    res = smiles_to_instance(smiles)
    return res, [res.mol, instance_to_mol(res.instance),
                 instance_to_mol(res.instance, restore_charges=False)]


# ----------------------------------------------------------------------------- the table

def test_table_names_titles_and_queries():
    names = [t.name for t in TOXICOPHORES]
    assert len(set(names)) == len(names) == len(TOXICOPHORE_NAMES)
    assert len({t.title for t in TOXICOPHORES}) == len(names)
    for t in TOXICOPHORES:
        assert t.title and t.rule
        assert (t.query is None) == (t.smarts is None)
        if t.smarts is not None:  # charge-agnostic: no charge primitives
            assert "+" not in t.smarts and "-]" not in t.smarts
    assert [t.name for t in TOXICOPHORES if t.smarts is None] == ["polycyclic_aromatic"]
    assert set(POSITIVES) == set(names), "every class needs a hand-checked positive molecule"
    required = {"aromatic_nitro", "aromatic_amine", "aromatic_nitroso", "n_nitroso", "aromatic_azo",
                "azide", "epoxide", "aziridine", "aliphatic_halide", "polycyclic_aromatic"}
    assert required <= set(names)


# ----------------------------------------------------------------------------- matching

@pytest.mark.parametrize("cls,smiles", [(c, s) for c, ss in POSITIVES.items() for s in ss])
def test_each_class_matches_its_molecule_in_every_form(cls, smiles):
    res, forms = _all_forms(smiles)
    found = [match_toxicophores(m) for m in forms]
    assert cls in found[0], f"{cls} not found in {smiles}: {list(found[0])}"
    # same matches on the SMILES molecule (charged, Kekulé, no aromatic flags) and both TU forms
    assert found[0] == found[1] == found[2]
    assert cls in toxicophore_classes(res.mol)
    mask = toxicophore_bond_mask(res.mol, res.instance.pairs)
    assert mask.dtype == torch.bool and mask.shape == (res.instance.num_pairs,)
    assert bool(mask.any())
    # a bond is in the mask only when both of its atoms are in one match
    atom_sets = [set(t) for ts in found[0].values() for t in ts]
    for (u, v), m in zip(res.pairs, mask.tolist()):
        assert m == any(u in s and v in s for s in atom_sets)


@pytest.mark.parametrize("name", list(NEGATIVES))
def test_nothing_matches_plain_molecules(name):
    res, forms = _all_forms(NEGATIVES[name])
    for m in forms:
        assert match_toxicophores(m) == {}
        assert toxicophore_classes(m) == []
    assert not bool(toxicophore_bond_mask(res.mol, res.instance.pairs).any())


def test_nitro_exact_bonds_charged_and_neutral():
    # 4-nitrotoluene: C0 c1 c2 c3 c4 c5 c6 N7 O8 O9, then hydrogens
    res, forms = _all_forms("Cc1ccc(cc1)[N+](=O)[O-]")
    assert [res.mol.GetAtomWithIdx(i).GetSymbol() for i in (4, 7, 8, 9)] == ["C", "N", "O", "O"]
    neutral = forms[2]
    assert all(a.GetFormalCharge() == 0 for a in neutral.GetAtoms())  # the TU convention
    assert {b.GetBondType() for b in neutral.GetAtomWithIdx(7).GetBonds()} == {
        Chem.BondType.SINGLE, Chem.BondType.DOUBLE}
    for m in forms:
        assert match_toxicophores(m) == {"aromatic_nitro": [(4, 7, 8, 9)]}
        mask = toxicophore_bond_mask(m, res.instance.pairs)
        assert _bonds(m, mask, res.pairs) == {(4, 7), (7, 8), (7, 9)}


def test_aromatic_amine_exact_bonds_include_n_h():
    # aniline: N0, ring c1..c6, H7 and H8 on N
    res = smiles_to_instance("Nc1ccccc1")
    assert [a.GetSymbol() for a in res.mol.GetAtomWithIdx(0).GetNeighbors()] == ["C", "H", "H"]
    assert match_toxicophores(res.mol) == {"aromatic_amine": [(1, 0, 7, 8)]}
    mask = toxicophore_bond_mask(res.mol, res.pairs)
    assert _bonds(res.mol, mask, res.pairs) == {(0, 1), (0, 7), (0, 8)}


def test_epoxide_exact_bonds_exclude_c_h():
    # propylene oxide: C0 C1 C2 O3 (ring 1-2-3)
    res = smiles_to_instance("CC1CO1")
    mask = toxicophore_bond_mask(res.mol, res.instance.pairs)
    assert _bonds(res.mol, mask, res.pairs) == {(1, 2), (1, 3), (2, 3)}


def test_polycyclic_aromatic_is_ring_bonds_only():
    res = smiles_to_instance("c1ccc2cc3ccccc3cc2c1")  # anthracene: 16 ring C-C bonds
    mask = toxicophore_bond_mask(res.mol, res.pairs)
    picked = _bonds(res.mol, mask, res.pairs)
    assert len(picked) == 16
    assert all(res.mol.GetAtomWithIdx(u).GetSymbol() == res.mol.GetAtomWithIdx(v).GetSymbol() == "C"
               for u, v in picked)
    # 2-aminoanthracene holds both classes; its mask is the union (16 ring + C-N + 2 N-H)
    res = smiles_to_instance("Nc1ccc2cc3ccccc3cc2c1")
    assert toxicophore_classes(res.mol) == ["aromatic_amine", "polycyclic_aromatic"]
    assert int(toxicophore_bond_mask(res.mol, res.pairs).sum()) == 19
    only = toxicophore_bond_mask(res.mol, res.pairs, classes=["aromatic_amine"])
    assert int(only.sum()) == 3


def test_implicit_hydrogen_molecule_reports_own_numbering():
    mol = Chem.MolFromSmiles("Nc1ccccc1")  # no hydrogen atoms
    assert match_toxicophores(mol) == {"aromatic_amine": [(1, 0)]}
    mask = toxicophore_bond_mask(mol, [(0, 1), (1, 2)])
    assert mask.tolist() == [True, False]


@pytest.mark.parametrize("smiles", [s for group in POSITIVES.values() for s in group]
                         + list(NEGATIVES.values()) + ["CN(CCCl)Cc1ccc2c(c1)ccc1c3ccccc3ccc21"])
def test_classes_are_the_classes_of_the_matches(smiles):
    # toxicophore_classes only asks whether each class matches; match_toxicophores collects
    _, forms = _all_forms(smiles)
    for m in forms + [Chem.MolFromSmiles(smiles)]:
        assert toxicophore_classes(m) == list(match_toxicophores(m))


def test_prepare_mol_adds_hydrogens_only_when_some_are_implicit():
    implicit = Chem.MolFromSmiles("Nc1ccccc1")
    assert prepare_mol(implicit).GetNumAtoms() == 14  # 7 heavy atoms + 7 hydrogens appended
    explicit = smiles_to_instance("Nc1ccccc1").mol
    prepared = prepare_mol(explicit)
    assert prepared.GetNumAtoms() == explicit.GetNumAtoms() == 14
    assert prepared.GetAtomWithIdx(1).GetIsAromatic() and not explicit.GetAtomWithIdx(1).GetIsAromatic()
    radical = Chem.MolFromSmiles("[CH2]C")  # H counts on atoms, one radical
    assert prepare_mol(radical).GetNumAtoms() == 7


def test_mask_rejects_pairs_that_are_not_bonds():
    res = smiles_to_instance("Nc1ccccc1")
    with pytest.raises(ValueError, match="not bonded"):
        toxicophore_bond_mask(res.mol, [(0, 2)])
    with pytest.raises(ValueError, match="not bonded"):
        toxicophore_bond_mask(res.mol, [(0, 99)])
    with pytest.raises(ValueError, match="unknown toxicophore"):
        toxicophore_bond_mask(res.mol, res.pairs, classes=["nitro"])


# ----------------------------------------------------------------------------- benchmark

def _nitrobenzene(smiles: str = "O=[N+]([O-])c1ccccc1"):
    res = smiles_to_instance(smiles)
    mask = toxicophore_bond_mask(res.mol, res.pairs)
    assert int(mask.sum()) == 3 and mask.numel() == 14
    return res, mask.float()


def test_benchmark_perfect_reversed_constant():
    res, mask = _nitrobenzene()  # nitro bonds are pairs 0, 1, 2
    out = toxicophore_benchmark([res], {"perfect": [mask], "reversed": [-mask],
                                        "constant": [torch.zeros(14)]}, [0])
    assert out["molecules"] == 1
    assert set(out["methods"]) == {"perfect", "reversed", "constant"}
    assert out["methods"]["perfect"] == {"auc": 1.0, "recall_at_8": 1.0}
    assert out["methods"]["reversed"] == {"auc": 0.0, "recall_at_8": 0.0}
    assert out["methods"]["constant"]["auc"] == 0.5
    # ties go to the lower pair index: the first 8 pairs hold all three nitro bonds ...
    assert out["methods"]["constant"]["recall_at_8"] == 1.0
    assert out["random_recall_at_8"] == pytest.approx(8 * 3 / 14 / 3)
    assert out["by_class"]["aromatic_nitro"]["molecules"] == 1
    # ... and when the nitro group is written last, none of them
    res2, _ = _nitrobenzene("c1ccccc1[N+](=O)[O-]")
    out = toxicophore_benchmark([res2], {"constant": [torch.zeros(14)]}, [0])
    assert out["methods"]["constant"] == {"auc": 0.5, "recall_at_8": 0.0}


def test_benchmark_averages_per_molecule_and_k_names_the_key():
    res, mask = _nitrobenzene()
    epo = smiles_to_instance("C1OC1c1ccccc1")  # styrene oxide
    epo_mask = toxicophore_bond_mask(epo.mol, epo.pairs).float()
    # right on the nitro molecule at a tiny scale, reversed on the epoxide at a huge one:
    # pooling the scores would not give the per-molecule mean
    scores = {"mixed": [mask * 1e-3, -epo_mask * 1e3]}
    out = toxicophore_benchmark([res, epo], scores, torch.tensor([0, 0]), k=2)
    assert out["molecules"] == 2 and out["k"] == 2
    assert out["methods"]["mixed"] == {"auc": 0.5, "recall_at_2": 0.5}
    assert "recall_at_8" not in out["methods"]["mixed"] and "random_recall_at_2" in out
    assert set(out["by_class"]) == {"aromatic_nitro", "epoxide"}
    assert out["by_class"]["epoxide"]["methods"]["mixed"] == {"auc": 0.0, "recall_at_2": 0.0}


def test_benchmark_leaves_out_nonmutagens_and_molecules_without_contrast():
    res, mask = _nitrobenzene()
    benzene = smiles_to_instance("c1ccccc1")
    hydrazine = smiles_to_instance("NN")  # every bond is a toxicophore bond
    mols = [res, res, benzene, hydrazine]
    scores = {"m": [mask, -mask, torch.rand(benzene.instance.num_pairs),
                    torch.rand(hydrazine.instance.num_pairs)]}
    out = toxicophore_benchmark(mols, scores, [0, 1, 0, 0])
    assert out["molecules"] == 1
    assert out["predicted_mutagens"] == 3
    assert out["left_out"] == {"no_toxicophore": 1, "all_toxicophore": 1}
    assert out["methods"]["m"]["auc"] == 1.0  # the reversed copy was predicted non-mutagen
    # another mutagen label flips which copy is kept
    out = toxicophore_benchmark(mols, scores, [0, 1, 0, 0], mutagen_label=1)
    assert out["molecules"] == 1 and out["methods"]["m"]["auc"] == 0.0
    # nothing kept: values are None, not an error
    out = toxicophore_benchmark([benzene], {"m": [torch.rand(12)]}, [0])
    assert out["molecules"] == 0 and out["methods"]["m"]["auc"] is None


def test_benchmark_random_expectation_matches_random_scores():
    res, _ = _nitrobenzene()
    gen = torch.Generator().manual_seed(0)
    n = 400
    out = toxicophore_benchmark([res] * n, {"r": [torch.rand(14, generator=gen) for _ in range(n)]},
                                [0] * n)
    assert out["methods"]["r"]["recall_at_8"] == pytest.approx(out["random_recall_at_8"], abs=0.05)
    assert out["methods"]["r"]["auc"] == pytest.approx(0.5, abs=0.05)


def test_benchmark_accepts_instances_tuples_and_checks_lengths():
    res, mask = _nitrobenzene()
    for item in (res, res.instance, (res.mol, res.instance.pairs), ToxMolecule(res.mol, res.pairs)):
        out = toxicophore_benchmark([item], {"p": [mask]}, [0])
        assert out["molecules"] == 1 and out["methods"]["p"]["auc"] == 1.0
    with pytest.raises(ValueError, match="predictions"):
        toxicophore_benchmark([res], {"p": [mask]}, [0, 0])
    with pytest.raises(ValueError, match="score tensors"):
        toxicophore_benchmark([res], {"p": [mask, mask]}, [0])
    with pytest.raises(ValueError, match="14 pairs"):
        toxicophore_benchmark([res], {"p": [mask[:5]]}, [0])
    with pytest.raises(TypeError):
        as_tox_molecules(["CCO"])


def test_prevalence_shares_per_group():
    mols = [smiles_to_instance(s) for s in ("Nc1ccccc1", "c1ccccc1", "CC1CO1", "Nc1ccccc1")]
    prev = toxicophore_prevalence(mols, torch.tensor([0, 0, 1, 1]))
    assert prev["n"] == {"0": 2, "1": 2}
    assert prev["any"] == {"0": 0.5, "1": 1.0}
    assert prev["classes"]["aromatic_amine"] == {"0": 0.5, "1": 0.5}
    assert prev["classes"]["epoxide"] == {"0": 0.0, "1": 0.5}


# ----------------------------------------------------------------------------- real TU graphs

@pytest.fixture(scope="module")
def tu_molecules():
    from gem_core.data.datasets import load_dataset
    from gem_core.data.instances import graph_instance

    ds = load_dataset("mutagenicity")
    insts = [graph_instance(g, i) for i, g in enumerate(ds.graphs)]
    return ds, insts, as_tox_molecules(insts, ds.atom_symbols)


@requires_mutagenicity
def test_real_mutagens_hold_toxicophores_more_often(tu_molecules):
    ds, insts, mols = tu_molecules
    assert ds.class_names[0] == "mutagen"
    prev = toxicophore_prevalence(mols, [inst.y for inst in insts])
    mut, non = prev["any"]["0"], prev["any"]["1"]
    # measured: 78.8 % of the 2,401 mutagens, 25.1 % of the 1,936 non-mutagens
    assert mut > 0.7
    assert non < 0.35
    assert mut > 2.5 * non
    for cls in ("aromatic_nitro", "aromatic_amine", "n_nitroso", "epoxide", "aliphatic_halide",
                "polycyclic_aromatic"):
        share = prev["classes"][cls]
        assert share["0"] > 0.01 and share["0"] > 1.5 * share["1"], (cls, share)


@requires_mutagenicity
def test_real_nitro_groups_match_neutral_and_charged(tu_molecules):
    ds, insts, mols = tu_molecules
    nitro = 0
    for inst, mol in zip(insts, mols):
        if "aromatic_nitro" not in toxicophore_classes(mol.mol):
            continue
        nitro += 1
        neutral = instance_to_mol(inst, ds.atom_symbols, restore_charges=False)
        assert all(a.GetFormalCharge() == 0 for a in neutral.GetAtoms())
        assert match_toxicophores(neutral)["aromatic_nitro"] == \
            match_toxicophores(mol.mol)["aromatic_nitro"]
        if nitro >= 200:
            break
    assert nitro >= 200


@requires_mutagenicity
def test_real_classes_are_the_classes_of_the_matches(tu_molecules):
    ds, insts, mols = tu_molecules
    for inst, mol in zip(insts[::4], mols[::4]):
        assert toxicophore_classes(mol.mol) == list(match_toxicophores(mol.mol))
        neutral = instance_to_mol(inst, ds.atom_symbols, restore_charges=False)
        assert toxicophore_classes(neutral) == list(match_toxicophores(neutral))


@requires_mutagenicity
def test_the_element_screen_never_skips_a_class_that_matches(tu_molecules):
    from gem_core.chemistry.element_screen import element_counts, may_match, query_element_screen
    from gem_core.chemistry.toxicophores import prepare_mol

    ds, insts, mols = tu_molecules
    screens = {t.name: query_element_screen(t.query) for t in TOXICOPHORES if t.query is not None}
    skipped = 0
    for mol in mols[::2]:
        m = prepare_mol(mol.mol)
        counts = element_counts(m)
        assert counts is not None
        for tox in TOXICOPHORES:
            if tox.query is None:
                continue
            if not may_match(screens[tox.name], counts):
                skipped += 1
                assert not m.HasSubstructMatch(tox.query), (tox.name, Chem.MolToSmiles(m))
    assert skipped > len(mols[::2])  # the screen does skip queries (more than one per molecule)
