"""The bond-aware Mutagenicity target (experiment module gem_core/strong_target.py)."""
from pathlib import Path

import pytest
import torch

from gem_core.models.strong_target import GINETarget, train_strong_target

from .conftest import requires_mutagenicity

ASSET = Path(__file__).resolve().parent.parent / "assets" / "targets" / "mutagenicity-strong.pt"


def _two_molecules():
    x = torch.eye(14)[torch.tensor([0, 0, 1, 0, 4])]
    pairs = torch.tensor([[0, 1, 3], [1, 2, 4]])
    edge_index = torch.cat([pairs, pairs.flip(0)], dim=1)
    bonds = torch.eye(3)[torch.tensor([0, 1, 2])]
    return x, edge_index, torch.cat([bonds, bonds]), torch.tensor([0, 0, 0, 1, 1])


def test_forward_shapes_bonds_optional_and_deterministic():
    torch.manual_seed(0)
    model = GINETarget().eval()
    x, ei, ea, batch = _two_molecules()
    out = model(x, ei, batch=batch, num_graphs=2, edge_attr=ea)
    assert out.shape == (2, 2)
    assert torch.equal(out, model(x, ei, batch=batch, num_graphs=2, edge_attr=ea))
    assert model(x, ei, batch=batch, num_graphs=2).shape == (2, 2)  # edge_attr=None
    # bond-order classes instead of one-hot give the same logits
    assert torch.allclose(out, model(x, ei, batch=batch, num_graphs=2, edge_attr=ea.argmax(1)))
    # a graph that lost all its edges, and a trailing graph with no nodes at all, still get rows
    empty = torch.zeros(2, 0, dtype=torch.long)
    assert model(x, empty, batch=batch, num_graphs=3).shape == (3, 2)
    assert model(x, empty, batch=batch, num_graphs=3, edge_attr=torch.zeros(0, 3)).shape == (3, 2)


def test_prediction_depends_only_on_own_edges():
    torch.manual_seed(0)
    model = GINETarget().eval()
    x, ei, ea, batch = _two_molecules()
    # drop the edge of molecule 1: molecule 0's logits do not move
    keep = torch.tensor([True, True, False, True, True, False])
    a = model(x, ei, batch=batch, num_graphs=2, edge_attr=ea)
    b = model(x, ei[:, keep], batch=batch, num_graphs=2, edge_attr=ea[keep])
    assert torch.allclose(a[0], b[0]) and not torch.allclose(a[1], b[1])


def test_none_bond_modes_differ():
    x, ei, ea, batch = _two_molecules()
    single = torch.eye(3)[torch.zeros(ei.size(1), dtype=torch.long)]
    torch.manual_seed(0)
    m = GINETarget(none_bond="single").eval()
    assert torch.allclose(m(x, ei, batch=batch, num_graphs=2),
                          m(x, ei, batch=batch, num_graphs=2, edge_attr=single))
    with pytest.raises(ValueError):
        GINETarget(none_bond="aromatic")


@requires_mutagenicity
def test_train_smoke():
    from gem_core.data.datasets import load_dataset

    ds = load_dataset("mutagenicity")
    model, m = train_strong_target(ds, seed=0, max_epochs=2, patience=2, hidden=16, num_layers=2)
    assert not model.training and m["epochs"] == 2 and 0.5 < m["val_accuracy"] <= 1.0
    assert "test_accuracy" in m
    with pytest.raises(TypeError):
        train_strong_target(ds, seed=0, hiden=16)


def test_shipped_strong_target_loads_through_the_engine():
    """The shipped checkpoint is an engine target: loaded on its own, a GINE reading the bonds."""
    from gem_core.models.targets import load_saved_target

    assert ASSET.exists() and ASSET.stat().st_size < 1_000_000
    target = load_saved_target("mutagenicity", "strong")
    assert isinstance(target.model, GINETarget) and target.black_box("cpu").uses_edge_attr
    assert target.metrics.test_accuracy > 0.8  # what the recipe reached (82.5 %, seed 0)
    x, ei, ea, batch = _two_molecules()
    assert target.model(x, ei, batch=batch, num_graphs=2, edge_attr=ea).shape == (2, 2)


@requires_mutagenicity
def test_shipped_gem_for_the_strong_target_is_found_and_kept_apart(monkeypatch, tmp_path):
    """assets/explainers/mutagenicity-strong.pt is the strong target's Gem: found without a fit,
    and never taken for the paper target's."""
    from gem_core.service.session import Workbench

    monkeypatch.setenv("GEM_CACHE_DIR", str(tmp_path))  # nothing cached: only the assets count
    strong = Workbench("mutagenicity", "cpu", target="strong")
    assert strong.is_fitted("gem")
    gem = strong.explainer("gem")
    assert Path(gem.loaded_from_).name == "mutagenicity-strong.pt"
    paper = Workbench("mutagenicity", "cpu", target="paper")
    assert Path(paper.explainer("gem").loaded_from_).name == "mutagenicity.pt"
    instances = strong.instances("test")[:3]
    ours, theirs = strong.explain("gem", instances), paper.explain("gem", instances)
    assert [len(s) for s in ours] == [inst.num_pairs for inst in instances]
    assert not all(torch.allclose(a, b) for a, b in zip(ours, theirs))


@requires_mutagenicity
def test_training_runs_on_the_requested_device(monkeypatch):
    """The model and its batches go to the device asked for (the bond-aware target once ignored
    it and always trained on the CPU); the trained model comes back on the CPU."""
    import gem_core.models.strong_target as strong
    from gem_core.data.datasets import load_dataset

    asked, used = [], []
    monkeypatch.setattr(strong, "resolve_device",
                        lambda device: asked.append(device) or torch.device("cpu"))
    real_batches = strong._batches

    def batches(*args, **kwargs):
        used.append(kwargs.get("device", args[4] if len(args) > 4 else None))
        return real_batches(*args, **kwargs)

    monkeypatch.setattr(strong, "_batches", batches)
    ds = load_dataset("mutagenicity")
    model, m = train_strong_target(ds, seed=0, device="cuda:1", max_epochs=1, patience=1,
                                   hidden=8, num_layers=1)
    assert asked == ["cuda:1"] and used and all(d == torch.device("cpu") for d in used)
    assert all(p.device.type == "cpu" for p in model.parameters()) and m["epochs"] == 1
