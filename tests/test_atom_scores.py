"""Atom scores (gem_core.evaluation.atom_scores) and ``bench atoms``: an atom's score from its
bonds, the Granger effect of deleting an atom, the alert atoms, and the benchmark's table."""

from __future__ import annotations

import pytest
import torch

from gem_core.chemistry.smiles import smiles_to_instance
from gem_core.data.instances import Instance
from gem_core.data.protocol import drop_isolated
from gem_core.evaluation.atom_scores import (
    atom_deletion_effects,
    atom_toxicophore_auc,
    atom_toxicophore_mask,
    atoms_from_bonds,
)
from gem_core.models.predict import predict_proba


def _path(n_nodes: int, pairs: list[tuple[int, int]]) -> Instance:
    return Instance(
        x=torch.eye(n_nodes), pairs=torch.tensor(pairs, dtype=torch.long).t(), y=0, target=None
    )


def test_an_atom_scores_as_its_best_bond_and_a_bare_atom_as_the_floor():
    inst = _path(4, [(0, 1), (1, 2)])  # atom 3 has no bond
    scores = atoms_from_bonds(inst, torch.tensor([0.2, 0.9]))
    assert scores.tolist() == pytest.approx([0.2, 0.9, 0.9, 0.2])
    assert atoms_from_bonds(inst, torch.tensor([0.5, 0.1]))[0] == 0.5


def test_alert_atoms_of_nitrobenzene_are_the_aromatic_nitro_group():
    mol = smiles_to_instance("O=[N+]([O-])c1ccccc1").mol
    mask = atom_toxicophore_mask(mol)
    assert torch.nonzero(mask).view(-1).tolist() == [0, 1, 2, 3]  # O, N, O and the ring carbon
    assert [mol.GetAtomWithIdx(i).GetSymbol() for i in range(4)] == ["O", "N", "O", "C"]


@pytest.fixture(scope="module")
def strong():
    from gem_core.service.session import workbench

    wb = workbench("mutagenicity", "cpu", "strong")
    wb.target()
    return wb


def test_deleting_an_atom_is_the_loss_rise_of_the_molecule_without_it(strong):
    mol = smiles_to_instance("O=[N+]([O-])c1ccc(N)cc1")
    inst = mol.instance
    pred = predict_proba(strong.black_box, [inst]).argmax(-1)
    (effects,) = atom_deletion_effects(strong.black_box, [inst], pred)
    assert effects.shape == (inst.num_nodes,)
    whole = predict_proba(strong.black_box, [inst])[0, int(pred)]
    for atom in (0, 1, 5):  # O, N of the nitro group, a ring carbon
        keep = (inst.pairs[0] != atom) & (inst.pairs[1] != atom)
        without = drop_isolated(inst.subgraph(keep))
        assert without.num_nodes < inst.num_nodes  # the atom is gone, not left bare
        p = predict_proba(strong.black_box, [without])[0, int(pred)]
        assert float(effects[atom]) == pytest.approx(float(-p.log() + whole.log()), abs=1e-6)


def test_the_auc_is_taken_over_molecules_with_alert_atoms_and_bonds(strong):
    mols = [smiles_to_instance(s) for s in ("O=[N+]([O-])c1ccccc1", "CCO")]
    atom_mask = atom_toxicophore_mask(mols[0].mol).double()
    perfect = [atom_mask, torch.zeros(mols[1].instance.num_nodes)]
    worst = [-atom_mask, torch.zeros(mols[1].instance.num_nodes)]
    bonds = [torch.zeros(m.instance.num_pairs) for m in mols]
    out = atom_toxicophore_auc(
        [m.mol for m in mols],
        {"perfect": perfect, "worst": worst},
        {"flat": bonds},
        [m.instance.pairs for m in mols],
    )
    assert out["molecules"] == 1  # ethanol holds no alert
    assert out["atoms"] == {"perfect": 1.0, "worst": 0.0} and out["bonds"] == {"flat": 0.5}


@pytest.mark.slow
def test_bench_atoms_prints_every_method_and_its_checks(capsys, tmp_path):
    import json

    from gem_core.cli import main

    out = tmp_path / "atoms.json"
    assert main(["bench", "atoms", "--limit", "30", "--no-progress", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())
    assert result["molecules"] > 5
    for method in ("gem", "gem_check", "atom_deletion", "ig", "ig_magnitude", "random"):
        assert 0.0 <= result["atoms"][method] <= 1.0 and method in printed
    assert result["bonds"]["gem"] is not None and "Gem's atom AUC" in printed


def test_the_json_of_an_explanation_names_its_atoms(strong):
    from gem_core.service.molecules import explain_smiles

    out = explain_smiles("O=[N+]([O-])c1ccc(N)cc1", k=4, read=False, device="cpu")
    bonds, atoms = out["explanation"]["bonds"], out["explanation"]["atoms"]
    assert sorted(atoms) == sorted({a for b in bonds for a in b})
    scores = out["explanation"]["atom_scores"]
    assert scores == sorted(scores, reverse=True) and len(scores) == len(atoms)
    # an atom's score is its best bond's, so the first atom belongs to the best bond
    assert atoms[0] in bonds[0] and scores[0] == pytest.approx(out["explanation"]["scores"][0])
