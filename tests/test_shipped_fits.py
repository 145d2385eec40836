"""The fits shipped in ``assets/explainers/``, Gem's and PGExplainer's, one per dataset and target:
each one loads through the session without a refit, for the target and settings it was fitted
for, and a PGExplainer fit is the fit a fresh machine would make (so ``reproduce`` and the app give
the same numbers with or without it, only sooner)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gem_core.data.config import DATASETS, get_spec, target_names
from gem_core.runtime.store import ASSETS_DIR

SHIPPED = [(name, target) for name in DATASETS for target in target_names(get_spec(name))]


def _stem(dataset: str, target: str) -> str:
    return f"{dataset}-pgexplainer" if target == "paper" else f"{dataset}-{target}-pgexplainer"


def test_every_dataset_and_target_ships_a_pgexplainer_fit():
    files = {p.stem for p in (ASSETS_DIR / "explainers").glob("*-pgexplainer.pt")}
    assert files == {_stem(d, t) for d, t in SHIPPED}


@pytest.mark.parametrize("method", ["gem", "pgexplainer"])
@pytest.mark.parametrize("dataset, target", SHIPPED)
def test_each_shipped_fit_loads_without_a_refit(method, dataset, target, monkeypatch, tmp_path):
    from gem_core.explainers import REGISTRY
    from gem_core.service.session import Workbench

    from tests.test_gem_settings import SHIPPED_KEYS

    monkeypatch.setenv("GEM_CACHE_DIR", str(tmp_path))  # nothing cached: only the assets count
    wb = Workbench(dataset, "cpu", target=target)

    def no_fit(*args, **kwargs):
        raise AssertionError(f"the shipped {method} was refitted")

    monkeypatch.setattr(type(REGISTRY[method].create(wb.context)), "fit", no_fit)
    assert wb.is_fitted(method)
    exp = wb.explainer(method)
    gem_stem = dataset if target == "paper" else f"{dataset}-{target}"
    stem = gem_stem if method == "gem" else _stem(dataset, target)
    assert Path(exp.loaded_from_).name == f"{stem}.pt"
    if method == "gem":
        assert exp.state_key(wb.context) == SHIPPED_KEYS[(dataset, target)]
    test = wb.instances("test")[:3]
    scores = exp.explain(test)
    assert all(s.shape == (inst.num_pairs,) and bool(torch.isfinite(s).all())
               for s, inst in zip(scores, test))


def test_a_shipped_fit_of_another_target_is_not_used(monkeypatch, tmp_path):
    """The paper target's file is refused for the strong target (its meta names another
    target digest), so a retrained target never reads a stale fit."""
    import shutil

    from gem_core.service.session import Workbench

    from gem_core.explainers import method_spec

    monkeypatch.setenv("GEM_CACHE_DIR", str(tmp_path))
    wb = Workbench("mutagenicity", "cpu", target="strong")
    exp = method_spec("pgexplainer").create(wb.context)
    cached = wb.checkpoint_path(exp)
    cached.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(ASSETS_DIR / "explainers" / "mutagenicity-pgexplainer.pt", cached)
    monkeypatch.setattr(Workbench, "shipped_path", lambda self, e: tmp_path / "none.pt")
    assert wb._load_saved(exp) is None


def test_the_shipped_fit_is_what_a_fresh_fit_gives(monkeypatch, tmp_path):
    """Tree-cycles (the quickest fit, about 30 s on one thread): a refit from the seed gives the
    same weights, bit for bit."""
    from gem_core.explainers import method_spec
    from gem_core.service.session import Workbench

    monkeypatch.setenv("GEM_CACHE_DIR", str(tmp_path))
    wb = Workbench("tree_cycles", "cpu")
    shipped = wb.explainer("pgexplainer")
    assert Path(shipped.loaded_from_).name == "tree_cycles-pgexplainer.pt"
    fresh = method_spec("pgexplainer").create(wb.context).fit(wb.instances("train"),
                                                              wb.instances("val"))
    a, b = shipped.to_state()["mlp"], fresh.to_state()["mlp"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
