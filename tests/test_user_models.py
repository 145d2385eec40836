"""Models trained on a user's table (gem_core.service.user_models): training, the saved folder,
the engine treating the name as a dataset, owners, cancel, concurrency, export / import, the CLI."""

from __future__ import annotations

import io
import threading

import pytest
import torch

from gem_core.chemistry.scaffolds import murcko_scaffold, scaffold_split
from gem_core.chemistry.tables import read_molecules, read_table
from gem_core.data.config import get_spec, user_models_root
from gem_core.service import user_models as um

from .assay_tables import analogue_csv


def _csv() -> bytes:
    return analogue_csv()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GEM_CACHE_DIR", str(tmp_path))
    return tmp_path


@pytest.fixture
def reading():
    return read_molecules(read_table(_csv(), "t.csv"), "smiles", "activity", "id")


def _train(reading, name="assay", **kw):
    kw = {"recipe": "small", "time_budget_s": 20, "device": "cpu", **kw}
    return um.train_user_model(reading, name, **kw)


def test_a_trained_model_is_a_dataset_of_the_engine(cache, reading):
    model = _train(reading)
    assert model.path == user_models_root() / "assay"
    assert sorted(p.name for p in model.path.iterdir()) == ["dataset.pt", "model.json", "targets"]
    spec = get_spec("assay")
    assert spec.class_names == ("active", "inactive") and spec.task == "graph"
    test = model.metrics["test"]
    assert test["n"] == model.meta["split_sizes"]["test"] == 6
    assert sum(map(sum, test["confusion"])) == 6
    assert 0.0 <= test["accuracy"] <= 1.0
    # the saved model predicts what the engine's workbench predicts on its own test molecules
    wb = um.user_workbench("assay", "cpu")
    test_instances = wb.instances("test")
    proba = wb.predict_proba(test_instances)
    labels = torch.tensor([inst.y for inst in test_instances])
    assert test["accuracy"] == pytest.approx(float((proba.argmax(-1) == labels).float().mean()))
    assert not list(user_models_root().glob(".staging-*"))


def test_held_out_metrics_by_hand():
    proba = torch.tensor([[0.9, 0.1], [0.4, 0.6], [0.3, 0.7], [0.8, 0.2]])
    y = torch.tensor([0, 0, 1, 1])
    m = um.held_out_metrics(proba, y, ("a", "b"))
    assert m["accuracy"] == 0.5
    assert m["confusion"] == [[1, 1], [1, 1]]
    # P(b): positives 0.7, 0.2; negatives 0.1, 0.6 -> pairs won: (0.7>0.1, 0.7>0.6, 0.2>0.1) = 3/4
    assert m["roc_auc"] == pytest.approx(0.75)


def test_names_are_checked_and_never_taken_twice(cache, reading):
    for bad in ("", "1abc", "a-b", "mutagenicity", "x" * 41, "../up"):
        with pytest.raises(ValueError):
            um.check_name(bad)
    _train(reading)
    with pytest.raises(ValueError, match="exists already"):
        _train(reading)


def test_two_trainings_of_one_name_leave_one_whole_model(cache, reading, monkeypatch):
    # both pass the name check, then race to the rename: one wins, one gets a message
    monkeypatch.setattr(um, "check_name", lambda name, taken_ok=False: name)
    outcomes: list[str] = []

    def run():
        try:
            _train(reading, time_budget_s=2)
            outcomes.append("saved")
        except ValueError as exc:
            outcomes.append(str(exc))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes)[-1] == "saved" and any("meanwhile" in o for o in outcomes), outcomes
    assert [p.name for p in user_models_root().iterdir()] == ["assay"]
    um.user_workbench("assay", "cpu")  # the winner loads whole


def test_a_cancelled_training_saves_nothing(cache, reading):
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(um.TrainingCancelled):
        _train(reading, cancel=cancel)
    assert not (user_models_root() / "assay").exists()
    assert not list(user_models_root().glob(".staging-*"))


def test_owners_see_their_models_and_shared_ones(cache, reading):
    _train(reading, name="mine", owner="alice")
    assert [m.name for m in um.list_user_models("alice")] == ["mine"]
    assert um.list_user_models("bob") == []
    with pytest.raises(ValueError, match="No model named"):
        um.user_model("mine", "bob")
    with pytest.raises(ValueError):
        um.share_user_model("mine", "bob")
    um.share_user_model("mine", "alice")
    assert um.user_model("mine", "bob").shared
    with pytest.raises(ValueError, match="not yours"):
        um.delete_user_model("mine", "bob")
    um.delete_user_model("mine", "alice")
    assert um.list_user_models() == []


def test_export_import_round_trip_and_refusals(cache, reading):
    _train(reading)
    um.fit_gem("assay", "cpu")
    blob = um.export_user_model("assay")
    wb = um.user_workbench("assay", "cpu")
    instances = wb.instances("test")
    before = wb.predict_proba(instances)
    scores_before = wb.explain("gem", instances)
    um.delete_user_model("assay")
    model = um.import_user_model(blob, owner="carol")
    assert model.owner == "carol" and not model.shared
    wb = um.user_workbench("assay", "cpu")
    assert wb.is_fitted("gem")  # Gem's fit travelled with it, byte for byte
    assert torch.equal(wb.predict_proba(instances), before)
    for a, b in zip(wb.explain("gem", instances), scores_before):
        assert torch.equal(torch.as_tensor(a), torch.as_tensor(b))
    with pytest.raises(ValueError, match="exists already"):
        um.import_user_model(blob)

    def saved(obj) -> bytes:
        buf = io.BytesIO()
        torch.save(obj, buf)
        return buf.getvalue()

    bad = [
        b"not a model",
        saved({"kind": "something else"}),
        saved({"kind": um.BUNDLE_KIND, "name": "x", "files": {"../x.pt": torch.zeros(1).byte()}}),
        saved({"kind": um.BUNDLE_KIND, "name": "x", "files": {}}),
        saved(io.StringIO),  # a class: refused by weights_only
    ]
    for data in bad:
        with pytest.raises(Exception, match="not a Gem Explorer model|refused|lacks"):
            um.import_user_model(data)


def test_a_scaffold_split_keeps_each_scaffold_in_one_split():
    smiles = [f"O=[N+]([O-])c1ccc({'C' * i})cc1" for i in range(1, 11)]
    smiles += [f"C1CCC(CC1){'C' * i}O" for i in range(1, 11)] + ["CCO", "CCCO", "c1ccncc1"]
    split = scaffold_split(smiles, seed=3)
    where = {}
    for part in ("train", "val", "test"):
        for i in split[part].tolist():
            where.setdefault(murcko_scaffold(smiles[i]), set()).add(part)
    assert all(len(parts) == 1 for parts in where.values()), where
    assert sum(split.sizes()) == len(smiles)
    assert torch.equal(scaffold_split(smiles, seed=3).test, split.test)


def test_the_cli_trains_explains_lists_and_deletes(cache, tmp_path, capsys):
    from gem_core.cli import main

    table = tmp_path / "assay.csv"
    table.write_bytes(_csv())
    args = ["train", "--csv", str(table), "--name", "cli_model", "--recipe", "small"]
    assert main([*args, "--time-budget", "10", "--no-progress", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "read 60 rows: 60 valid molecules" in out and "test accuracy" in out
    assert main(["explain", "--model", "cli_model", "--smiles", "O=[N+]([O-])c1ccccc1",
                 "--no-progress", "--json", "-"]) == 0
    assert '"model": "cli_model"' in capsys.readouterr().out
    assert main(["models", "list"]) == 0
    assert "cli_model" in capsys.readouterr().out
    assert main(["explain", "--model", "nope", "--smiles", "CCO"]) == 2
    assert "No model named" in capsys.readouterr().err
    assert main([*args, "--time-budget", "5"]) == 2  # the name is taken
    assert main(["models", "delete", "cli_model"]) == 0
    assert main(["models", "list"]) == 0
    assert "no models yet" in capsys.readouterr().out


def test_the_cli_trains_on_the_classes_named(cache, tmp_path, capsys):
    from gem_core.cli import main

    table = tmp_path / "assay.csv"
    table.write_bytes(analogue_csv(["CCOC,inconclusive,x1", "CCCOC,inconclusive,x2"]))
    args = ["train", "--csv", str(table), "--name", "cli_two", "--recipe", "small", "--no-gem",
            "--time-budget", "5", "--no-progress", "--device", "cpu"]
    assert main([*args, "--classes", "active,unknown"]) == 2
    assert "has no class 'unknown'" in capsys.readouterr().err
    assert main([*args, "--classes", "ACTIVE,inactive"]) == 0
    out = capsys.readouterr().out
    assert "read 62 rows: 62 valid molecules, 60 to train on" in out, out
    assert "left out 2 (class_left_out)" in out
    assert set(um.user_model("cli_two").classes) == {"active", "inactive"}


@pytest.mark.parametrize("salts", ["largest", "whole"])
def test_a_molecule_dataset_written_as_a_table_reads_back(salts):
    """Every Mutagenicity graph written as SMILES reads back (N-oxides, azoxy groups, quaternary
    ammonium and oxonium rings too: their charges are restored), as the same graph: the same
    elements and the same number of single, double and triple bonds. Salts read ``whole`` are
    the TU graphs themselves, counter-ions included (only graphs over the atom limit refused);
    cut to their ``largest`` fragment, every row reads and the salts are not compared."""
    from collections import Counter

    from gem_core.chemistry.dataset_table import dataset_rows
    from gem_core.data.datasets import DataUnavailableError, load_dataset

    try:
        ds = load_dataset("mutagenicity")
    except DataUnavailableError:
        pytest.skip("no Mutagenicity raw data")
    rows = dataset_rows(ds)
    text = "smiles,label,id\n" + "".join(f"{s},{c},{i}\n" for s, c, i in rows)
    reading = read_molecules(read_table(text.encode(), "m.csv"), "smiles", "label", "id",
                             salts=salts)
    refused = reading.refused_by_reason()
    if salts == "whole":
        assert set(refused) <= {"too_large"} and refused["too_large"][0] < 10, refused
    else:
        assert reading.rows_read == len(ds.graphs) == reading.valid, refused
    assert set(reading.classes) == {"mutagen", "nonmutagen"}
    by_id = {r.id: r.canonical for r in reading.rows}
    molecules = {m.smiles: m for m in reading.molecules}
    compared = salted = 0
    for (smiles, _, ident), graph in zip(rows, ds.graphs):
        if ("." in smiles and salts == "largest") or by_id[ident] is None:
            continue
        read = molecules[by_id[ident]].instance
        assert Counter(read.x.argmax(1).tolist()) == Counter(graph.x.argmax(1).tolist()), smiles
        bonds = Counter(graph.edge_attr.argmax(1).tolist())
        if "+3]" not in by_id[ident]:  # RDKit writes perchlorate, periodate charge-separated
            assert Counter(read.edge_attr.argmax(1).tolist()) == {
                k: v // 2 for k, v in bonds.items()
            }, smiles
        compared += 1
        salted += "." in smiles
    assert compared > 0.9 * len(rows)
    assert (salted > 250) == (salts == "whole")
