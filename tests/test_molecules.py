"""The molecule flow (gem_core.service.molecules) and the ``explain`` CLI command."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from rdkit import Chem

from gem_core.chemistry.smiles import MoleculeError, smiles_to_instance
from gem_core.cli import main
from .conftest import requires_mutagenicity

NITROBENZENE = "O=[N+]([O-])c1ccccc1"

BAD_INPUTS = {
    "empty": "",
    "parse": "C1CC(",
    "element": "C[Se]C",
    "fragments": "CC(=O)[O-].[Na+]",
    "too_large": "C" * 80,
}


@pytest.fixture(scope="module")
def target_available():
    """The molecule default Mutagenicity target must load from a checkpoint (training it takes
    minutes)."""
    from gem_core.data.config import molecule_default_target
    from gem_core.models.targets import load_saved_target

    if load_saved_target("mutagenicity", molecule_default_target()) is None:
        pytest.skip("no Mutagenicity target checkpoint (cache or assets/targets/)")


def _run_cli(args, capsys):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("kind", sorted(BAD_INPUTS))
def test_bad_input_exits_2_with_the_app_message(kind, capsys):
    smiles = BAD_INPUTS[kind]
    with pytest.raises(MoleculeError) as info:
        smiles_to_instance(smiles)
    assert info.value.kind == kind
    code, out, err = _run_cli(["explain", "--smiles", smiles, "--no-progress"], capsys)
    assert code == 2
    assert str(info.value) in err
    assert "Traceback" not in err
    assert out == ""


def test_bad_k_exits_2(capsys):
    code, _, err = _run_cli(["explain", "--smiles", NITROBENZENE, "--k", "0", "--no-progress"],
                            capsys)
    assert code == 2
    assert "K must be at least 1" in err


def test_explain_is_a_cli_command():
    proc = subprocess.run([sys.executable, "-m", "gem_core", "explain", "--help"],
                          capture_output=True, text=True, timeout=120, env=os.environ.copy())
    assert proc.returncode == 0
    assert "--smiles" in proc.stdout and "--method" in proc.stdout


def test_cli_json_shape_and_numbering(target_available, tmp_path, capsys):
    path = tmp_path / "out.json"
    code, _, _ = _run_cli(["explain", "--smiles", NITROBENZENE, "--k", "5", "--method", "random",
                           "--no-progress", "--json", str(path)], capsys)
    assert code == 0
    data = json.loads(path.read_text())
    # the closest training molecules where the data set is here (none to compare with if not)
    assert set(data) - {"nearest_training"} == {"smiles", "target", "prediction", "explanation",
                                                "reading", "toxicophores"}
    assert data["smiles"] == NITROBENZENE
    assert data["prediction"]["label"] in ("mutagen", "nonmutagen")
    assert 0.5 <= data["prediction"]["probability"] <= 1.0
    bonds, scores = data["explanation"]["bonds"], data["explanation"]["scores"]
    assert len(bonds) == len(scores) == 5
    assert scores == sorted(scores, reverse=True)
    mol = Chem.AddHs(Chem.MolFromSmiles(NITROBENZENE))
    for i, j in bonds:
        assert i < j
        assert mol.GetBondBetweenAtoms(i, j) is not None


def test_explain_opens_on_the_strong_target_and_names_the_nitro_group(target_available, capsys):
    """The acceptance test of issue 27 (item 11): the chemist's default is the target row marked
    ``molecule_default`` (the strong one), and the JSON says which model answered, what the
    explanation reads as and which toxicophores it touches."""
    from gem_core.data.config import DEFAULT_TARGET, TARGETS, molecule_default_target

    assert molecule_default_target() == "strong" != DEFAULT_TARGET  # the paper tables keep theirs
    assert [n for n, row in TARGETS.items() if row.molecule_default] == ["strong"]
    code, out, _ = _run_cli(["explain", "--smiles", "c1ccc(cc1)[N+](=O)[O-]", "--json", "-"],
                            capsys)
    assert code == 0
    data = json.loads(out)
    assert data["target"] == "strong"
    touched = [t["class"] for t in data["toxicophores"]["touched"]]
    assert "aromatic_nitro" in touched and data["toxicophores"]["present"] == ["aromatic_nitro"]
    assert "aromatic nitro" in data["reading"]["text"]
    assert data["reading"]["facts"]["toxicophores"] == data["toxicophores"]
    labels = data["explanation"]["labels"]
    assert len(labels) == len(data["explanation"]["bonds"])
    assert any("(aromatic nitro)" in x for x in labels)
    # --target paper keeps the paper's model
    code, out, _ = _run_cli(["explain", "--smiles", "c1ccc(cc1)[N+](=O)[O-]", "--method",
                             "random", "--target", "paper", "--json", "-"], capsys)
    assert code == 0 and json.loads(out)["target"] == "paper"


def test_explain_text_names_the_model_and_each_bond_as_a_chemist_reads_it(target_available,
                                                                           capsys):
    """Text output: the target that answered, each bond with its atoms and toxicophore
    ("N6=O7 (aromatic nitro)", not "6 - 7"), and the reading."""
    code, out, _ = _run_cli(["explain", "--smiles", NITROBENZENE, "--k", "14", "--method",
                             "random", "--no-progress"], capsys)
    assert code == 0
    lines = out.splitlines()
    assert "strong target" in lines[0]
    mol = Chem.AddHs(Chem.MolFromSmiles(NITROBENZENE))  # O0 N1 O2 c3 ...
    bond_lines = [x.strip() for x in lines[2:16]]
    assert any(x.startswith("O0=N1 (aromatic nitro)") for x in bond_lines), bond_lines
    assert any(x.startswith("N1–c3 (aromatic nitro)") or x.startswith("N1–C3 (aromatic nitro)")
               for x in bond_lines), bond_lines
    assert not any(" - " in x for x in bond_lines)
    assert len(bond_lines) == mol.GetNumBonds()
    assert lines[16].startswith("The model predicts")


def test_json_to_stdout(target_available, capsys):
    code, out, _ = _run_cli(["explain", "--smiles", "Nc1ccccc1", "--k", "3", "--method", "random",
                             "--json", "-"], capsys)
    assert code == 0
    data = json.loads(out)
    assert len(data["explanation"]["bonds"]) == 3


def test_a_salt_is_explained_as_the_salts_option_says(target_available, capsys):
    """Refused by default (exit 2, the message names both ways); ``--salts largest`` explains
    the acid, ``--salts whole`` the salt with its ion as an atom, each noting what it did."""
    salt = "OC(=O)c1ccccc1.[Na+]"
    code, _, err = _run_cli(["explain", "--smiles", salt, "--method", "random"], capsys)
    assert code == 2 and "largest fragment" in err and "whole" in err
    results = {}
    for rule in ("largest", "whole"):
        code, out, _ = _run_cli(["explain", "--smiles", salt, "--method", "random", "--salts",
                                 rule, "--json", "-"], capsys)
        assert code == 0
        results[rule] = json.loads(out)
    assert results["largest"]["smiles"] == "O=C(O)c1ccccc1"
    assert results["whole"]["smiles"] == salt
    assert any(w.startswith("Kept the largest") for w in results["largest"]["warnings"])
    assert any(w.startswith("Read whole") for w in results["whole"]["warnings"])
    # the ion has no bond: both explain the acid's 15 bonds
    assert len(results["whole"]["explanation"]["labels"]) == len(
        results["largest"]["explanation"]["labels"])


def test_all_bonds_when_k_exceeds_bond_count(target_available):
    from gem_core.service.molecules import explain_smiles

    smiles = "OC(=O)c1ccccc1"  # benzoic acid
    result = explain_smiles(smiles, k=1000, method="random", device="cpu")
    mol = Chem.AddHs(Chem.MolFromSmiles(smiles))
    expected = {tuple(sorted((b.GetBeginAtomIdx(), b.GetEndAtomIdx()))) for b in mol.GetBonds()}
    got = [tuple(b) for b in result["explanation"]["bonds"]]
    assert len(got) == len(expected) == mol.GetNumBonds()
    assert set(got) == expected


def test_probability_is_that_of_the_predicted_label(target_available):
    from gem_core.service.molecules import CLASS_NAMES, explain_molecules

    mol = smiles_to_instance(NITROBENZENE)
    res = explain_molecules([mol], ["random"], device="cpu")[0]
    assert abs(sum(res.probabilities) - 1.0) < 1e-5
    assert res.probability == max(res.probabilities)
    assert res.label_name == CLASS_NAMES[res.probabilities.index(res.probability)]
    out = res.to_json("random", 4)
    assert out["prediction"] == {"label": res.label_name, "probability": res.probability}
    frag = res.fragment("random", 4)
    assert isinstance(frag, str) and frag


def test_gem_explanation_when_fitted(target_available):
    from gem_core.service.molecules import explain_smiles, molecule_model

    if not molecule_model("cpu").is_fitted("gem"):
        pytest.skip("Gem is not fitted for the Mutagenicity target (no checkpoint)")
    result = explain_smiles(NITROBENZENE, k=3, method="gem", device="cpu")
    assert len(result["explanation"]["bonds"]) == 3


def test_molecules_are_predicted_once_and_gem_reads_that_prediction(target_available, monkeypatch):
    """``explain_molecules`` runs the target once and hands its classes to Gem: the same scores
    as Gem running the target itself, without the second forward pass."""
    import torch


    import gem_core.models.predict as predict_module
    from gem_core.service.molecules import explain_molecules, molecule_model

    model = molecule_model("cpu")
    if not model.is_fitted("gem"):
        pytest.skip("Gem is not fitted for the Mutagenicity target (no checkpoint)")
    mols = [smiles_to_instance(s) for s in (NITROBENZENE, "Nc1ccc2ccccc2c1", "CCO")]
    own = model.explain("gem", [m.instance for m in mols])  # Gem predicts for itself
    forward = predict_module.predict_proba
    calls = []
    monkeypatch.setattr(predict_module, "predict_proba",
                        lambda *a, **kw: calls.append(1) or forward(*a, **kw))
    results = explain_molecules(mols, ["gem"], model=model)
    assert calls == [1]
    assert all(torch.equal(r.scores["gem"], s.float()) for r, s in zip(results, own))


@requires_mutagenicity
def test_checkpoint_model_equals_the_workbench_target(target_available):
    """Without data the target is rebuilt from its checkpoint alone: same file, same outputs."""
    import torch

    from gem_core.data.instances import collate
    from gem_core.service.session import workbench
    from gem_core.models.targets import load_saved_target

    alone = load_saved_target("mutagenicity")
    full = workbench("mutagenicity", "cpu").target()
    assert alone.digest == full.digest
    batch = collate([smiles_to_instance(NITROBENZENE).instance])
    assert torch.allclose(alone.black_box("cpu")(batch), full.black_box("cpu")(batch))


@requires_mutagenicity
def test_the_size_warning_counts_the_training_split():
    """Issue 27, item 9: the large-molecule warning's figures are those of the training split
    (27 of 3,469 molecules above the threshold), not of the whole data set (4,337)."""
    from gem_core.chemistry.smiles import (LARGE_MOLECULE_ATOMS, LARGE_TRAINING_MOLECULES,
                                           TRAINING_MOLECULES)
    from gem_core.data.datasets import load_dataset

    ds = load_dataset("mutagenicity")
    train = [ds.graphs[i].num_nodes for i in ds.split["train"].tolist()]
    assert len(train) == TRAINING_MOLECULES
    assert sum(n > LARGE_MOLECULE_ATOMS for n in train) == LARGE_TRAINING_MOLECULES
