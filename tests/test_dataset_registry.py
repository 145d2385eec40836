"""The dataset registry: a dataset is one row, and nothing outside the registry knows its name.

Rows registered here under new names (a small synthetic graph built by PyG's
``ExplainerDataset``, and a copy of Mutagenicity) load, split, give instances, class names, atom
symbols, a mutagen label, a K grid and the app's hints through their rows alone.
"""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import gem_core.data.config as config
from gem_core.data.config import DatasetSpec, SyntheticSource, get_spec, molecule_spec
from gem_core.data.datasets import load_dataset
from gem_core.data.instances import split_instances

from .conftest import requires_mutagenicity

TOY = DatasetSpec(
    name="toy_cycles", title="Toy-cycles", task="node", num_classes=2, k_grid=(3, 4, 5),
    connected=True, gem={"training.lr": 0.003},
    source=SyntheticSource("BAGraph", (("num_nodes", 40), ("num_edges", 2)), "CycleMotif",
                           (("num_nodes", 4),), num_motifs=10, num_features=3),
    class_names=("base", "cycle"), prediction_phrase="a cycle node apart from a base node")


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(config.DATASETS, TOY.name, TOY)
    return TOY


def test_a_synthetic_row_loads_splits_and_gives_instances(toy):
    assert get_spec("Toy-Cycles") is toy and toy.k_tick == 1 and toy.default_k == 4
    ds = load_dataset("toy_cycles")
    g = ds.graph
    assert g.num_nodes == 40 + 10 * 4 and g.x.shape == (80, 3) and ds.num_classes == 2
    assert ds.class_names == ("base", "cycle") and ds.atom_symbols is None
    assert int(g.motif_edge_mask.sum()) == 10 * 4 * 2  # 10 four-cycles, both directions
    assert sum(ds.split.sizes()) == 80 and sum(ds.explain_split.sizes()) == 40
    test = split_instances(ds, "test")
    assert test and all(inst.dataset == "toy_cycles" and inst.y == 1 for inst in test)
    again = load_dataset("toy_cycles")
    assert torch.equal(again.graph.edge_index, g.edge_index)  # seeded


def test_a_row_without_a_loadable_source_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(config.DATASETS, "nowhere", replace(TOY, name="nowhere", source=None))
    with pytest.raises(ValueError, match="no source this engine can load"):
        load_dataset("nowhere")


def test_the_report_of_a_dataset_without_paper_numbers(toy):
    from gem_core.evaluation.reproduce import format_tables

    result = {"dataset": "toy_cycles", "k_grid": [3, 4, 5], "test_instances": 2,
              "target": {"name": "paper", "test_accuracy": 0.9},
              "distillation": {"accuracy_at_k": {"3": 0.5}, "policy": "paper",
                               "ms_per_instance": 1.0},
              "methods": {"random": {"accuracy_at_k": {"3": 0.25, "4": 0.5, "5": 0.75},
                                     "ms_per_instance": 0.1, "fit_seconds": 0.0,
                                     "log_odds": [0.0]}}}
    text = format_tables(result)
    assert text.startswith("Toy-cycles: explanation accuracy") and "(paper – %)" in text
    assert "mutagen test graphs only" not in text


@requires_mutagenicity
def test_a_copy_of_a_molecule_row_brings_its_atoms_classes_and_mutagen_label(monkeypatch):
    mut = get_spec("mutagenicity")
    monkeypatch.setitem(config.DATASETS, "mutagens_copy", replace(mut, name="mutagens_copy"))
    ds = load_dataset("mutagens_copy")
    assert ds.class_names == ("mutagen", "nonmutagen") and ds.atom_symbols[3] == "H"
    assert ds.spec.mutagen_label == 0 and len(ds) == 4337 and ds.num_features == 14
    assert molecule_spec() is mut  # the first molecule row stays the Molecule page's


def test_the_rows_state_what_used_to_be_decided_by_name():
    ba, tc, mut, nci1 = (get_spec(n) for n in ("ba_shapes", "tree_cycles", "mutagenicity", "nci1"))
    assert ba.class_names == ("base", "top", "middle", "bottom")
    assert tc.class_names == ("tree", "cycle")
    assert mut.mutagen_label == 0 and nci1.mutagen_label is None and ba.mutagen_label is None
    assert mut.atom_symbols[:4] == ("C", "O", "Cl", "H") and nci1.atom_symbols is None
    assert [s.k_tick for s in (ba, tc, mut, nci1)] == [1, 1, 5, 5]
    assert molecule_spec() is mut
    for name, spec in config.DATASETS.items():
        assert spec.name == name and spec.source is not None
        assert len(spec.class_names) == spec.num_classes
