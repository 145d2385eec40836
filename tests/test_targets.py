import json

import pytest
import torch

from gem_core.cli import main
from gem_core.data.config import TargetConfig
from gem_core.data.datasets import load_dataset
from gem_core.runtime.store import ArtifactError, save_torch
from gem_core.models.targets import (get_target, load_target, save_target, shipped_target_path,
                                     train_target)


def test_training_smoke_learns_something():
    ds = load_dataset("ba_shapes")
    cfg = TargetConfig(lr=0.01, max_epochs=150, patience=150)
    model, m = train_target(ds, cfg, device="cpu")
    # constant features: only structure can separate the 4 classes; majority class is 300/700
    assert m.train_accuracy > 0.6
    assert 0.0 <= m.test_accuracy <= 1.0 and m.epochs <= 150


def test_checkpoint_round_trip_and_mismatch(tmp_path):
    ds = load_dataset("ba_shapes")
    model, m = train_target(ds, TargetConfig(max_epochs=3, patience=3), device="cpu")
    path = save_target(model, m, ds, tmp_path / "t.pt")
    loaded = load_target(path, ds)
    x, ei = ds.graph.x, ds.graph.edge_index
    assert torch.allclose(loaded.model(x, ei), model(x, ei))
    with pytest.raises(ArtifactError, match="not 'tree_cycles'"):
        load_target(path, load_dataset("tree_cycles"))
    foreign = save_torch({"kind": "gem-target", "dataset": "ba_shapes", "in_channels": 3,
                          "num_classes": 4}, tmp_path / "f.pt")
    with pytest.raises(ArtifactError, match="does not match"):
        load_target(foreign, ds)


def test_a_checkpoint_is_checked_against_the_rows_own_feature_count(tmp_path):
    """Mutagenicity's row knows its 14 one-hot atoms: a session loads its target without reading
    the data set (a second of a cold `explain --smiles`), and a checkpoint for other features is
    refused the same way the loaded data would refuse it."""
    from gem_core.data.config import get_spec
    from gem_core.models.targets import load_target_checkpoint
    from gem_core.service.session import Workbench

    spec = get_spec("mutagenicity")
    assert spec.known_num_features == len(spec.atom_symbols) == 14
    assert get_spec("ba_shapes").known_num_features == 10
    assert get_spec("nci1").known_num_features is None  # only the data knows
    path = shipped_target_path("mutagenicity", "strong")
    assert load_target_checkpoint(path, "mutagenicity", in_channels=14).dataset == "mutagenicity"
    with pytest.raises(ArtifactError, match="does not match the shapes"):
        load_target_checkpoint(path, "mutagenicity", in_channels=13)
    wb = Workbench("mutagenicity", device="cpu", target="strong")
    assert wb.target().digest and wb._dataset is None


@pytest.mark.parametrize("name", ["ba_shapes", "tree_cycles", "mutagenicity", "nci1"])
def test_shipped_targets_load(name):
    path = shipped_target_path(name)
    if not path.exists():
        pytest.fail(f"missing shipped checkpoint {path}")
    if name in ("mutagenicity", "nci1"):
        from .conftest import tu_data_available
        if not tu_data_available({"mutagenicity": "Mutagenicity", "nci1": "NCI1"}[name]):
            pytest.skip("raw data missing")
    ds = load_dataset(name)
    t = get_target(ds)
    assert t.metrics.test_accuracy > 0.7


def test_cli_train_json(tmp_path, monkeypatch, capsys):
    out = tmp_path / "out.json"
    # The 5-epoch target below is saved to the cache: keep it out of the session's shared cache.
    monkeypatch.setenv("GEM_CACHE_DIR", str(tmp_path / "cache"))
    import gem_core.data.config as config
    monkeypatch.setitem(config.DATASETS, "ba_shapes", config.DATASETS["ba_shapes"].__class__(
        **{**config.DATASETS["ba_shapes"].__dict__, "target": TargetConfig(max_epochs=5, patience=5)}))
    assert main(["train", "--dataset", "ba_shapes", "--no-progress", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["dataset"] == "ba_shapes"
    assert set(result["target"]) >= {"train_accuracy", "val_accuracy", "test_accuracy", "train_seconds"}
    assert "test" in capsys.readouterr().out


def test_cli_unknown_dataset_is_a_clear_error(capsys):
    assert main(["train", "--dataset", "cora", "--no-progress"]) == 2
    assert "Unknown dataset 'cora'" in capsys.readouterr().err


def test_target_names_and_the_bond_aware_architecture(capsys):
    """Mutagenicity has a second, bond-aware target; the others only the paper's."""
    from gem_core.data.config import get_spec, target_config, target_names
    from gem_core.service.session import Workbench
    from gem_core.models.targets import GNNBlackBox, build_model, target_filename

    mut, nci1 = get_spec("mutagenicity"), get_spec("nci1")
    assert target_names(mut) == ("paper", "strong") and target_names(nci1) == ("paper",)
    assert target_config(mut, "paper") is mut.target and target_config(mut, "strong").arch == "gine"
    assert target_filename("mutagenicity") == "mutagenicity.pt"
    assert target_filename("mutagenicity", "strong") == "mutagenicity-strong.pt"
    with pytest.raises(ValueError, match="Unknown target 'strong' for NCI1. Choose one of: paper"):
        Workbench("nci1", "cpu", target="strong")
    model = build_model(mut, 14, target_config(mut, "strong")).eval()
    bb = GNNBlackBox(model, "graph", 2, "cpu")
    assert bb.uses_edge_attr  # its batches must carry the bond types
    assert main(["reproduce", "--dataset", "nci1", "--target", "strong", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Unknown target 'strong' for NCI1" in err


def test_a_target_brings_its_own_gem_settings_and_keeps_its_fits_apart():
    """The strong Mutagenicity target's Gem learns graded targets over its own budgets; the
    paper's target keeps the dataset's, and the two settings never share a fitted Gem."""
    from dataclasses import replace

    from gem_core.data.config import get_spec, target_config
    from gem_core.explainers.registry import method_spec
    from gem_core.gem.presets import dataset_settings, preset
    from gem_core.service.session import Workbench

    mut = get_spec("mutagenicity")
    strong = dataset_settings(mut, "strong")
    paper = dataset_settings(mut, "paper")
    assert paper == dataset_settings(mut)
    chosen = dict(target_config(mut, "strong").gem)
    assert strong == preset(chosen["preset"]).with_overrides(
        {k: v for k, v in chosen.items() if k != "preset"})
    assert strong.teacher.ks != paper.teacher.ks
    # a misspelt setting is a clear error, not a silently ignored choice
    typo = replace(mut, strong_target=replace(mut.strong_target, gem={"network.decodr": "mlp"}))
    with pytest.raises(ValueError, match="unknown Gem setting 'network.decodr'"):
        dataset_settings(typo, "strong")
    assert Workbench("mutagenicity", "cpu", target="strong").gem_settings == strong
    assert Workbench("mutagenicity", "cpu").gem_settings == paper
    # the budgets are part of Gem's key: another grid is another fit
    wb = Workbench("mutagenicity", "cpu")
    gem = method_spec("gem").create(wb.context)
    other = replace(wb.context, gem_settings=paper.with_overrides({"teacher.ks": (1, 2, 3)}))
    assert gem.state_key(wb.context) != method_spec("gem").create(other).state_key(other)


def test_train_target_hands_its_device_to_the_bond_aware_trainer(monkeypatch):
    """The strong (GINE) target trains on the device train_target is given (it used to be
    dropped, so the strong target always trained on the CPU)."""
    import gem_core.models.strong_target as strong
    from gem_core.data.config import get_spec, target_config

    seen = {}

    def fake(ds, **kwargs):
        seen.update(kwargs)
        return torch.nn.Linear(1, 1), {"train_accuracy": 1.0, "val_accuracy": 1.0,
                                       "test_accuracy": 1.0, "train_seconds": 0.0, "epochs": 1}

    monkeypatch.setattr(strong, "train_strong_target", fake)
    cfg = target_config(get_spec("mutagenicity"), "strong")
    model, metrics = train_target(object(), cfg, device="meta")
    assert seen["device"] == torch.device("meta") and metrics.epochs == 1


def test_an_extra_target_row_trains_and_names_its_files_through_its_row(tmp_path, monkeypatch):
    """A new target (a new name, an existing architecture) is one row of the target registry:
    its recipe is trained, its checkpoint, results and titles carry its name, nothing else
    knows it."""
    from dataclasses import replace

    import gem_core.data.config as config
    from gem_core.evaluation.reproduce import results_path
    from gem_core.models.targets import cached_target_path, load_saved_target, target_filename
    from gem_core.service.session import Workbench

    monkeypatch.setenv("GEM_CACHE_DIR", str(tmp_path / "cache"))
    row = config.TargetSpec("quick", "a quick one", lambda spec: replace(
        spec.target, max_epochs=3, patience=3) if spec.task == "node" else None)
    monkeypatch.setitem(config.TARGETS, "quick", row)
    ba = config.get_spec("ba_shapes")
    assert config.target_names(ba) == ("paper", "quick")
    assert config.target_names(config.get_spec("mutagenicity")) == ("paper", "strong")
    assert config.target_config(ba, "quick").max_epochs == 3
    assert target_filename("ba_shapes", "quick") == "ba_shapes-quick.pt"
    assert results_path("ba_shapes", "quick").name == "ba_shapes-quick.json"
    target = get_target(load_dataset("ba_shapes"), device="cpu", name="quick")
    assert target.metrics.epochs == 3 and target.path == cached_target_path("ba_shapes", "quick")
    assert load_saved_target("ba_shapes", "quick").digest == target.digest
    wb = Workbench("ba_shapes", "cpu", target="quick")
    assert wb.label == "BA-shapes (quick)" and wb.asset_name == "ba_shapes-quick"
    assert wb.target().digest == target.digest
    with pytest.raises(ValueError, match="Unknown target 'quick' for NCI1"):
        Workbench("nci1", "cpu", target="quick")
    # the paper's row is the plain one: no target name in its files or titles
    paper = Workbench("ba_shapes", "cpu")
    assert paper.label == "BA-shapes" and paper.asset_name == "ba_shapes"


def test_every_architecture_row_builds_its_model_and_refuses_other_tasks():
    from dataclasses import replace

    from gem_core.data.config import get_spec
    from gem_core.models.targets import ARCHITECTURES, architecture, build_model

    ba, mut = get_spec("ba_shapes"), get_spec("mutagenicity")
    for name, row in ARCHITECTURES.items():
        assert architecture(name) is row and row.name == name and row.tasks
        cfg = replace(mut.target, arch=name)
        assert isinstance(build_model(mut, 14, cfg), torch.nn.Module)
        if "node" not in row.tasks:
            with pytest.raises(ValueError, match="classifier"):
                build_model(ba, 10, replace(ba.target, arch=name))
    with pytest.raises(ValueError, match="unknown target architecture 'mlp'"):
        build_model(ba, 10, replace(ba.target, arch="mlp"))
