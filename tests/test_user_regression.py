"""A model of a number trained on a user's table: Crippen logP of real molecules as the outcome.

One small regressor is trained once for the module (RDKit's NCI compounds, logP computed by
RDKit; a private cache folder) and Gem fitted for it. It must be a dataset of the engine like a
classifier is: its figures are a regressor's (RMSE, MAE, R²), every method explains every test
molecule, the distillation's effect is the squared change of the value, faithfulness keeps a
value within its tolerance, screening writes the values, the CLI trains / explains / lists it,
and an exported file carries its output scale.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch
from rdkit import Chem, RDConfig
from rdkit.Chem import Crippen

from gem_core.cli import main
from gem_core.data.config import get_spec

NCI_SMI = Path(RDConfig.RDDataDir) / "NCI" / "first_5K.smi"  # real compounds, shipped by RDKit
MODEL = "logp_model"
METHODS = ("gem", "gem_check", "integrated_gradients", "random")


def logp_table(start: int, n: int) -> str:
    """``n`` NCI compounds from line ``start`` with their Crippen logP, as CSV text."""
    rows = ["smiles,logp"]
    for line in NCI_SMI.read_bytes().splitlines()[start : start + n]:
        smiles = line.decode().split()[0]
        mol = Chem.MolFromSmiles(smiles)
        if mol is not None:
            rows.append(f"{smiles},{Crippen.MolLogP(mol):.4f}")
    return "\n".join(rows) + "\n"


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    old = os.environ.get("GEM_CACHE_DIR")
    os.environ["GEM_CACHE_DIR"] = str(tmp_path_factory.mktemp("regression-cache"))
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("GEM_CACHE_DIR", None)
        else:
            os.environ["GEM_CACHE_DIR"] = old


@pytest.fixture(scope="module")
def model(cache):
    from gem_core.chemistry.tables import read_molecules, read_table
    from gem_core.service.user_models import fit_gem, train_user_model

    table = read_table(logp_table(0, 160).encode(), "logp.csv")
    reading = read_molecules(table, "smiles", "logp")
    assert reading.outcome_kind == "number"
    trained = train_user_model(reading, MODEL, recipe="small", time_budget_s=15, device="cpu")
    fit_gem(MODEL, device="cpu")
    return trained


@pytest.fixture(scope="module")
def workbench(model):
    from gem_core.service.user_models import user_workbench

    return user_workbench(MODEL, "cpu")


def test_a_numeric_outcome_trains_a_regressor_with_a_regressors_figures(model, workbench):
    assert model.regression and model.meta["kind"] == "number" and model.classes == ()
    assert model.salts == "refuse"  # the reading's rule, recorded
    spec = get_spec(MODEL)
    assert spec.regression and spec.num_classes == 1 and spec.class_names == ("logp",)
    assert spec.value_tolerance is not None and spec.value_tolerance > 0
    test = model.metrics["test"]
    assert {"n", "rmse", "mae", "r2", "points"} <= set(test) and "accuracy" not in test
    # the saved figures are what the engine's workbench predicts on the saved test molecules
    instances = workbench.instances("test")
    values = workbench.predict_values(instances)
    measured = torch.tensor([float(inst.y) for inst in instances], dtype=torch.float64)
    assert test["n"] == len(instances) == len(test["points"])
    assert test["rmse"] == pytest.approx(float((values - measured).pow(2).mean().sqrt()), rel=1e-5)
    assert test["mae"] == pytest.approx(float((values - measured).abs().mean()), rel=1e-5)
    sst = float((measured - measured.mean()).pow(2).sum())
    r2 = 1 - float((values - measured).pow(2).sum()) / sst
    assert test["r2"] == pytest.approx(r2, rel=1e-5, abs=1e-6)
    # the head predicts in the table's units: its shift is the training values' mean
    train_y = torch.tensor([float(i.y) for i in workbench.instances("train")])
    net = workbench.target().model
    assert float(net.value_shift) == pytest.approx(float(train_y.mean()), rel=1e-4)
    assert workbench.black_box.regression and workbench.black_box.tolerance == spec.value_tolerance


def test_gem_reads_a_regressors_ranking_cover_first(model, workbench):
    """A regressor's Gem scores, read cover-first (decisions/008): going down the ranking, every
    bond that brings a new atom comes before any bond between atoms already touched."""
    from gem_core.chemistry.smiles import smiles_to_instance
    from gem_core.gem.presets import dataset_settings
    from gem_core.gem.settings import PairOrder
    from gem_core.service.molecules import explain_molecules

    assert dataset_settings(get_spec(MODEL), "strong").network.order is PairOrder.cover
    assert dataset_settings(get_spec("mutagenicity"), "strong").network.order is PairOrder.score
    smiles = workbench.dataset.info["smiles"]
    molecules = [smiles_to_instance(smiles[i]) for i in workbench.dataset.split["test"].tolist()]
    for res in explain_molecules(molecules, ["gem"], model=workbench):
        pairs = res.molecule.instance.pairs
        touched: set[int] = set()
        brought = []
        for u, v in res.bonds("gem", pairs.shape[1])[0]:
            brought.append(not {u, v} <= touched)
            touched |= {u, v}
        # once a bond brings no new atom, no later bond does
        assert brought == sorted(brought, reverse=True), res.molecule.input_smiles


def test_every_method_explains_every_test_molecule(model, workbench):
    from gem_core.chemistry.smiles import smiles_to_instance
    from gem_core.service.molecules import explain_molecules

    smiles = workbench.dataset.info["smiles"]
    test_ids = workbench.dataset.split["test"].tolist()
    molecules = [smiles_to_instance(smiles[i]) for i in test_ids]
    results = explain_molecules(molecules, METHODS, model=workbench)
    values = workbench.predict_values([m.instance for m in molecules])
    for res, value in zip(results, values.tolist()):
        assert res.regression and res.value == pytest.approx(value)
        assert res.label_name.startswith("logp = ") and math.isnan(res.probability)
        assert not res.errors
        for method in METHODS:
            scores = res.scores[method]
            assert scores.shape == (res.molecule.instance.num_pairs,)
            assert torch.isfinite(scores).all(), (method, res.molecule.input_smiles)
            k = max(1, res.molecule.instance.num_pairs // 4)
            assert len(res.bonds(method, k)[0]) == k
        as_json = res.to_json("gem", 3)
        assert as_json["prediction"] == {"outcome": "logp", "value": res.value}


def test_the_distillation_effect_is_the_squared_change_of_the_value(model, workbench):
    """Δ of a pair = (f(G \\ e) - f(G))² against the model's own value (predicted labels)."""
    from gem_core.models.predict import predict_values

    dist = workbench.distillation("test", label_source="predicted")
    instances = workbench.instances("test")
    for i in range(3):
        inst = instances[i]
        whole = workbench.predict_values([inst])
        masks = [torch.ones(inst.num_pairs, dtype=torch.bool) for _ in range(inst.num_pairs)]
        for j, mask in enumerate(masks):
            mask[j] = False
        without = predict_values(workbench.black_box, [inst] * inst.num_pairs, masks)
        expected = (without - whole) ** 2
        assert torch.allclose(dist.instance(i).delta.double(), expected, atol=1e-4), i


def test_faithfulness_is_judged_within_the_tolerance_and_alerts_are_refused(model):
    from gem_core.evaluation.user_model_bench import evaluate_user_model

    result = evaluate_user_model(MODEL, methods=("gem", "random"), device="cpu")
    assert set(result["methods"]) == {"gem", "random"}
    for row in result["methods"].values():
        assert 0.0 <= row["sufficiency"] <= 1.0 and 0.0 <= row["necessity"] <= 1.0
        assert row["toxicophore_auc"] is None and row["ms_per_molecule"] > 0
    with pytest.raises(ValueError, match="predicts a number"):
        evaluate_user_model(MODEL, methods=("random",), device="cpu", alert_class="mutagen")


def test_models_evaluate_chooses_on_the_validation_split_with_the_methods_asked(
        model, workbench, tmp_path, capsys):
    """``models evaluate NAME --split val --methods …``: those methods on the validation
    molecules (the test split only reports); an unknown method in one line."""
    out = tmp_path / "val.json"
    assert main(["models", "evaluate", MODEL, "--split", "val", "--methods", "random,gem",
                 "--no-progress", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["split"] == "val" and set(result["methods"]) == {"random", "gem"}
    assert result["molecules"] == len(workbench.instances("val"))
    assert f"{result['molecules']} val molecules" in capsys.readouterr().out
    assert main(["models", "evaluate", MODEL, "--methods", "gem,oracle", "--no-progress"]) != 0
    assert "unknown method 'oracle'" in capsys.readouterr().err


def test_a_screen_writes_the_values(model, workbench, tmp_path, capsys):
    import pyarrow.csv as pacsv

    from gem_core.chemistry.smiles import smiles_to_instance

    library = tmp_path / "library.csv"
    library.write_text(logp_table(2000, 12))
    out = tmp_path / "screened.csv"
    args = ["screen", str(library), "--model", MODEL, "--out", str(out), "--workers", "1"]
    assert main([*args, "--no-progress", "--json", str(tmp_path / "s.json")]) == 0
    table = pacsv.read_csv(out).to_pydict()
    assert "value_logp" in table and "p_mutagen" not in table
    ok = [i for i, s in enumerate(table["status"]) if s == "ok"]
    assert ok
    instances = [smiles_to_instance(table["smiles"][i]).instance for i in ok]
    values = workbench.predict_values(instances).tolist()
    for i, value in zip(ok, values):
        assert table["value_logp"][i] == pytest.approx(value, rel=1e-5)
        assert float(table["prediction"][i]) == pytest.approx(value, rel=1e-3, abs=1e-3)
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["model"] == MODEL and summary["ok"] == len(ok)
    assert not any(key.startswith("predicted_") for key in summary), summary


def test_the_cli_trains_explains_and_lists_a_regressor(cache, tmp_path, capsys):
    table = tmp_path / "logp.csv"
    table.write_text(logp_table(500, 80))
    args = ["train", "--csv", str(table), "--name", "cli_logp", "--recipe", "small"]
    assert main([*args, "--time-budget", "5", "--no-progress", "--no-gem", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "a number: regression" in out and "test RMSE" in out and "R²" in out
    assert main(["explain", "--model", "cli_logp", "--smiles", "CCCCCCO", "--method", "random",
                 "--no-progress", "--json", "-"]) == 0
    said = capsys.readouterr().out
    result = json.loads(said[said.index("{"):])
    assert result["model"] == "cli_logp" and set(result["prediction"]) == {"outcome", "value"}
    assert "reading" not in result
    assert main(["models", "list"]) == 0
    assert "logp (number)" in capsys.readouterr().out
    assert main(["models", "delete", "cli_logp"]) == 0


def test_an_exported_regressor_predicts_the_same_values_elsewhere(model, workbench, tmp_path,
                                                                   monkeypatch):
    from gem_core.service import user_models as um

    blob = um.export_user_model(MODEL)
    instances = workbench.instances("test")
    before = workbench.predict_values(instances)
    monkeypatch.setenv("GEM_CACHE_DIR", str(tmp_path))
    imported = um.import_user_model(blob)
    assert imported.regression
    after = um.user_workbench(MODEL, "cpu").predict_values(instances)
    assert torch.equal(before, after)


def test_a_classifier_has_no_value_buffers_so_its_checkpoints_load_as_before():
    from gem_core.models.strong_target import GINETarget

    assert not GINETarget(14, 2).regression
    assert "value_scale" not in GINETarget(14, 2).state_dict()
    reg = GINETarget(14, 1)
    reg.set_value_scale(torch.tensor([1.0, 3.0, 5.0]))
    assert reg.regression and float(reg.value_shift) == 3.0 and float(reg.value_scale) == 2.0
    x, ei = torch.eye(14)[:3], torch.tensor([[0, 1], [1, 0]])
    reg.eval()
    out = reg(x, ei)
    reg.value_shift.fill_(0.0)
    reg.value_scale.fill_(1.0)
    assert torch.allclose(out, reg(x, ei) * 2.0 + 3.0, atol=1e-5)


def test_models_table_writes_the_crippen_regression_table(tmp_path, capsys):
    out = tmp_path / "logp.csv"
    assert main(["models", "table", "--crippen", "--out", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert lines[0] == "smiles,logp,id" and len(lines) > 4900
    smiles, logp, ident = lines[1].split(",")
    assert float(logp) == pytest.approx(Crippen.MolLogP(Chem.MolFromSmiles(smiles)), abs=1e-4)
    assert ident == "nci-1"
    assert main(["models", "table", "--out", str(out)]) == 2  # neither --dataset nor --crippen


def test_methods_whose_objective_reads_classes_are_refused_in_one_line(model, workbench):
    from gem_core.chemistry.smiles import smiles_to_instance
    from gem_core.service.molecules import explain_molecules

    mol = smiles_to_instance("CCCCCCO")
    for method in ("gnnexplainer", "pgexplainer", "subgraphx"):
        with pytest.raises(ValueError, match="explains classifiers"):
            workbench.explain(method, [mol.instance])
    (res,) = explain_molecules([mol], ["gem", "gnnexplainer"], model=workbench, strict=False)
    assert "gem" in res.scores and "explains classifiers" in res.errors["gnnexplainer"]
    # models evaluate refuses it before computing the others (not after minutes of them)
    from gem_core.evaluation.user_model_bench import evaluate_user_model

    calls = []
    original = workbench.explain
    workbench.explain = lambda *a, **k: calls.append(a) or original(*a, **k)
    try:
        with pytest.raises(ValueError, match="explains classifiers"):
            evaluate_user_model(MODEL, methods=["gem", "gnnexplainer"], device="cpu")
    finally:
        del workbench.explain
    assert calls == []
