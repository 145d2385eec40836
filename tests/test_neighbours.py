"""A molecule against the model's training molecules: nearest neighbours by Tanimoto of Morgan
fingerprints, the applicability-domain line, the model's held-out record on each side, and how
the explain command and its JSON say it."""

from __future__ import annotations

import json

import pytest
import torch
from rdkit import Chem, DataStructs

from gem_core.chemistry.convert import instance_to_mol
from gem_core.chemistry.dataset_table import restore_dropped_charges
from gem_core.chemistry.neighbours import DOMAIN_SIMILARITY, TrainingIndex, fingerprint
from gem_core.chemistry.smiles import smiles_to_instance
from gem_core.data.datasets import DataUnavailableError
from gem_core.service.neighbours import domain_record, nearest_training

from .conftest import requires_mutagenicity

SMILES = ["O=[N+]([O-])c1ccccc1", "O=[N+]([O-])c1ccc(Cl)cc1", "Nc1ccccc1", "OC(=O)c1ccccc1",
          "CCO", "CCCCCCO"]
FAR = "CC(C)(C)c1ccc(cc1)C(=O)N2CCN(CC2)C3CCCCC3"  # a drug-like amide, unlike Mutagenicity's


def test_a_graph_with_hydrogen_atoms_and_its_smiles_have_the_same_fingerprint():
    for smiles in SMILES:
        parsed = Chem.MolFromSmiles(smiles)
        read = smiles_to_instance(smiles)
        graph = instance_to_mol(read.instance)  # hydrogens as atoms
        assert graph.GetNumAtoms() > parsed.GetNumAtoms()
        assert fingerprint(graph) == fingerprint(parsed), smiles
        # the Kekulé form the model reads, aromatic flags cleared: the same molecule
        assert not any(a.GetIsAromatic() for a in read.mol.GetAtoms())
        assert fingerprint(read.mol) == fingerprint(parsed), smiles


def test_nearest_are_sorted_and_a_training_molecule_finds_itself():
    index = TrainingIndex.of_molecules([Chem.MolFromSmiles(s) for s in SMILES],
                                       [f"y{i}" for i in range(6)])
    near = index.nearest(Chem.MolFromSmiles("O=[N+]([O-])c1ccc(Cl)cc1"), n=3)
    assert [n.index for n in near][0] == 1 and near[0].similarity == 1.0
    assert near[0].label == "y1" and near[0].smiles == "O=[N+]([O-])c1ccc(Cl)cc1"
    sims = [n.similarity for n in near]
    assert sims == sorted(sims, reverse=True) and len(near) == 3
    # the similarities are RDKit's Tanimoto, not something of our own
    expected = DataStructs.TanimotoSimilarity(fingerprint(Chem.MolFromSmiles(SMILES[0])),
                                              fingerprint(Chem.MolFromSmiles(SMILES[1])))
    assert index.similarities(Chem.MolFromSmiles(SMILES[0]))[1] == pytest.approx(expected)
    assert index.closest(Chem.MolFromSmiles("CCCCCCCCCCCCCCCCCCCC")) < 1.0
    with pytest.raises(ValueError, match="2 labels for 6 molecules"):
        TrainingIndex.of_molecules([Chem.MolFromSmiles(s) for s in SMILES], ["a", "b"])


class _NoData:
    """A workbench opened from checkpoints only: no training molecules to compare with."""

    regression = False
    name = "no_data_here"

    def instances(self, split):
        raise DataUnavailableError("no raw files here")


def test_without_the_training_data_there_is_nothing_to_say():
    wb = _NoData()
    assert nearest_training(wb, Chem.MolFromSmiles("CCO")) is None
    assert domain_record(wb) is None


@pytest.fixture(scope="module")
def strong():
    from gem_core.service.molecules import molecule_model

    return molecule_model("cpu")


@requires_mutagenicity
def test_a_training_molecule_is_its_own_nearest_with_its_measured_label(strong):
    train = strong.instances("train")
    for inst in (train[0], train[123], train[-1]):
        # as a chemist would write it: the charges the data set's file dropped put back
        mol = restore_dropped_charges(instance_to_mol(inst, strong.dataset.atom_symbols))
        near = nearest_training(strong, mol)
        assert near.inside and near.training == len(train)
        assert near.neighbours[0].similarity == pytest.approx(1.0)
        same = [n for n in near.neighbours if n.similarity == pytest.approx(1.0)]
        assert strong.spec.class_names[int(inst.y)] in {n.label for n in same}


@requires_mutagenicity
def test_the_domain_record_counts_every_test_molecule_on_one_side(strong):
    record = domain_record(strong)
    test = strong.instances("test")
    assert record.threshold == DOMAIN_SIMILARITY
    assert record.n_inside + record.n_outside == len(test) and record.n_outside > 0
    overall = strong.predicted(test) == torch.tensor([int(i.y) for i in test])
    right = record.right_inside * record.n_inside + record.right_outside * record.n_outside
    assert right == pytest.approx(float(overall.sum()))
    assert domain_record(strong) is record  # built once


@requires_mutagenicity
def test_explain_says_when_a_molecule_is_outside_what_the_model_learned(strong, capsys):
    from gem_core.cli import main

    assert main(["explain", "--smiles", FAR, "--method", "random", "--no-progress",
                 "--json", "-"]) == 0
    data = json.loads(capsys.readouterr().out)
    near = data["nearest_training"]
    assert near["inside_domain"] is False and near["threshold"] == DOMAIN_SIMILARITY
    assert len(near["neighbours"]) == 3
    sims = [n["similarity"] for n in near["neighbours"]]
    assert sims == sorted(sims, reverse=True) and sims[0] < DOMAIN_SIMILARITY
    assert main(["explain", "--smiles", FAR, "--method", "random", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "closest training molecules (Tanimoto)" in out and "caution:" in out
    assert main(["explain", "--smiles", "O=[N+]([O-])c1ccccc1[N+](=O)[O-]", "--method",
                 "random", "--no-progress"]) == 0
    assert "caution:" not in capsys.readouterr().out  # a training molecule itself


@requires_mutagenicity
def test_bench_domain_bins_every_molecule_of_the_split(strong, tmp_path, capsys):
    from gem_core.cli import main

    path = tmp_path / "domain.json"
    assert main(["bench", "domain", "--targets", "mutagenicity:strong", "--splits", "val",
                 "--no-progress", "--json", str(path)]) == 0
    data = json.loads(path.read_text())
    (result,) = data["results"]
    assert result["split"] == "val" and data["threshold"] == DOMAIN_SIMILARITY
    bins = result["bins"]
    assert sum(b["molecules"] for b in bins) == len(strong.instances("val"))
    assert all(b["right"] is None or 0 <= b["right"] <= 1 for b in bins)
    assert [b["low"] for b in bins][:3] == [0.0, 0.2, 0.3]
    assert "val   [0.0,0.2)" in capsys.readouterr().out
    assert main(["bench", "domain", "--splits", "train"]) == 2  # the index's own molecules


def test_the_batched_closest_is_rdkits_tanimoto_exactly():
    """A screen's batched similarities (a sparse product) equal RDKit's per-molecule Tanimoto,
    over real molecules and across blocks."""
    from rdkit import RDConfig

    from gem_core.chemistry import neighbours

    lines = open(f"{RDConfig.RDDataDir}/NCI/first_5K.smi").read().splitlines()
    mols = [m for m in (Chem.MolFromSmiles(line.split()[0]) for line in lines[:700]) if m]
    index = TrainingIndex.of_molecules(mols[:400], ["x"] * 400)
    queries = mols[400:] + mols[:3]  # three that are training molecules themselves
    old = neighbours._BLOCK
    try:
        neighbours._BLOCK = 100  # several blocks
        batched = index.closest_many(queries)
    finally:
        neighbours._BLOCK = old
    assert batched == [index.closest(m) for m in queries]
    assert batched[-3:] == [1.0, 1.0, 1.0]
    assert index.closest_many([]) == []
    assert TrainingIndex.of_molecules([], []).closest_many(queries[:2]) == [0.0, 0.0]


def test_an_index_kept_in_a_file_reads_back_the_same():
    mols = [Chem.MolFromSmiles(s) for s in SMILES]
    index = TrainingIndex.of_molecules(mols, [f"y{i}" for i in range(6)])
    again = TrainingIndex.from_state(index.state())
    query = Chem.MolFromSmiles("O=[N+]([O-])c1ccc(O)cc1")
    assert again.nearest(query, 6) == index.nearest(query, 6)
    assert again.closest_many(mols) == index.closest_many(mols) == [1.0] * 6


@requires_mutagenicity
def test_a_cold_process_without_the_data_reads_the_index_from_the_cache(strong):
    """Built once where the data is, the training index serves a workbench that cannot load the
    data set (a cold ``explain`` then reads a file, not the raw TU files)."""
    mol = Chem.MolFromSmiles("O=[N+]([O-])c1ccccc1")
    first = nearest_training(strong, mol)

    class _FromCheckpointsOnly(_NoData):
        name = strong.name

    again = nearest_training(_FromCheckpointsOnly(), mol)
    assert again is not None and again == first
