"""The validation sweep of Gem settings (``python -m gem_core tune``)."""
from __future__ import annotations

import pytest
import torch

from gem_core.cli import main
from gem_core.evaluation.metrics import evaluate_scores
from gem_core.gem.autoencoder import GemAutoEncoder
from gem_core.gem.pipeline import GemPipeline
from gem_core.gem.training_targets import explainer_targets
from gem_core.evaluation import tuning
from gem_core.service.session import Workbench
from gem_core.evaluation.tuning import (CURRENT, Variant, check_variants, format_sweep,
                                        parse_variant, validation_sweep)


def test_parse_variant_types_each_setting():
    v = parse_variant("wide:hidden=64/64/32,decoder=mlp,degree_features=yes,lr=3e-3,patience=7")
    assert v.name == "wide"
    assert v.overrides == {"hidden": (64, 64, 32), "decoder": "mlp", "degree_features": True,
                           "lr": 0.003, "patience": 7}
    assert parse_variant("plain").overrides == {}
    t = parse_variant("t:topk_policy=paper,target=weights,label_source=predicted,train_on=correct")
    assert t.explainer_overrides() == {}
    assert parse_variant("f:target_ks=1-4").overrides == {"target_ks": (1, 2, 3, 4)}
    assert parse_variant("f:target_ks=10/5/10").overrides == {"target_ks": (5, 10)}
    assert parse_variant("n:necessity_lead=5").overrides == {"necessity_lead": 5}
    c = parse_variant("c:check=sustain,check_width=5,check_late=climb")
    assert c.overrides == {"check": "sustain", "check_width": 5, "check_late": "climb"}
    assert c.explainer_overrides() == {}  # read at explain time
    settings = c.settings(Workbench("nci1", "cpu").gem_settings)
    assert (settings.check.value, settings.check_width, settings.check_late.value) == (
        "sustain", 5, "climb")
    b = parse_variant("b:check_backward=grid,check_lead=5")
    assert b.overrides == {"check_backward": "grid", "check_lead": 5}
    assert b.explainer_overrides() == {}  # read at explain time too
    settings = b.settings(Workbench("nci1", "cpu").gem_settings)
    assert (settings.check_backward.value, settings.check_lead) == ("grid", 5)
    from gem_core.gem.training_targets import format_ks, parse_ks

    assert format_ks(parse_ks("1-4")) == "1-4" and format_ks(parse_ks("10/5")) == "5/10"


@pytest.mark.parametrize("text, message", [
    ("x:foo=1", "unknown setting 'foo'"),
    ("x:decoder", "expected key=value"),
    (":lr=0.1", "needs a name"),
    ("x:degree_features=maybe", "expected true or false"),
    ("x:hidden=a/b", "hidden widths"),
    ("x:patience=1.5", "patience"),
    ("x:target_ks=a-b", "budgets look like"),
    ("x:target_ks=0-3", "at least 1"),
])
def test_parse_variant_errors_are_clear(text, message):
    with pytest.raises(ValueError, match=message):
        parse_variant(text)


@pytest.mark.parametrize("variants, message", [
    ([Variant(CURRENT)], "dataset's own settings"),
    ([Variant("a"), Variant("a")], "unique"),
    ([Variant("a", {"target": "nope"})], "target_kind: 'nope' is not one of"),
    ([Variant("a", {"topk_policy": "nope"})], "topk_policy: 'nope' is not one of"),
    ([Variant("a", {"train_on": "some"})], "train_on must be one of"),
    ([Variant("a", {"label_source": "guess"})], "label"),
    ([Variant("a", {"decoder": "dense"})], "decoder: 'dense' is not one of"),
    ([Variant("a", {"check_late": "off"})], "check_late: 'off' is not one of"),
    ([Variant("a", {"check_backward": "always"})], "check_backward: 'always' is not one of"),
    ([Variant("a", {"check_lead": -1})], "check_lead"),
])
def test_check_variants_rejects_bad_settings(variants, message):
    with pytest.raises(ValueError, match=message):
        check_variants(variants, Workbench("tree_cycles", "cpu").gem_settings)


class _NoTestSplit(Workbench):
    """A workbench that fails loudly if anything asks for the test split."""

    def instances(self, split: str = "test"):
        assert split != "test", "the sweep read the test split"
        return super().instances(split)


def test_sweep_scores_each_variant_on_validation_like_a_direct_fit():
    wb = _NoTestSplit("tree_cycles", "cpu")
    variants = [Variant("short", {"max_epochs": 4}), Variant("inner-nobias", {"max_epochs": 4,
                                                                              "decoder_bias": False})]
    result = validation_sweep(wb, variants, seeds=[0, 1], include_current=False)
    assert list(result["variants"]) == ["short", "inner-nobias"]
    assert result["split"] == "val" and result["val_instances"] == len(wb.instances("val"))

    # the same fit done by hand gives the same validation accuracy at every K
    train, val = wb.instances("train"), wb.instances("val")
    targets = [explainer_targets(wb.distillation(s), wb.gem_settings, wb.spec.k_grid, instances=i,
                                 black_box=wb.black_box)
               for s, i in (("train", train), ("val", val))]
    gem = GemAutoEncoder.from_settings(wb.gem_settings, device="cpu", max_epochs=4, seed=1)
    gem.fit(train, targets[0], val, targets[1])
    # explained as the registry's Gem explains: the auto-encoder, then the row's check
    pipeline = GemPipeline(wb.gem_settings, wb.spec.k_grid, wb.black_box, wb.spec.num_classes)
    direct = evaluate_scores(wb.black_box, val, pipeline.explain(gem, val), wb.spec.k_grid,
                             fidelity=False)
    swept = result["variants"]["short"]["per_seed"][1]
    assert swept["seed"] == 1
    for k in wb.spec.k_grid:
        assert swept["accuracy_at_k"][str(k)] == pytest.approx(direct.accuracy_at_k[k])
    short = result["variants"]["short"]
    for k in wb.spec.k_grid:
        mean = sum(r["accuracy_at_k"][str(k)] for r in short["per_seed"]) / 2
        assert short["accuracy_at_k"][str(k)] == pytest.approx(mean)
    # each variant keeps its own overrides and scores
    a = [r["accuracy_at_k"] for r in result["variants"]["inner-nobias"]["per_seed"]]
    assert result["variants"]["inner-nobias"]["overrides"] == {"max_epochs": 4, "decoder_bias": False}
    assert all(0.0 <= x <= 1.0 for acc in a for x in acc.values())
    # stability across the two seeds: the Jaccard of their top-K edges at the smallest K
    from gem_core.evaluation.faithfulness import stability

    seed1 = pipeline.explain(gem, val)
    seed0 = pipeline.explain(GemAutoEncoder.from_settings(
        wb.gem_settings, device="cpu", max_epochs=4, seed=0).fit(
        train, targets[0], val, targets[1]), val)
    k = min(wb.spec.k_grid)
    assert short["stability"] == {"k": k, "value": pytest.approx(stability([seed0, seed1], k))}
    assert "stability across the seeds" in format_sweep(result)


def test_correct_only_training_fits_on_the_correctly_classified_instances(monkeypatch):
    wb = Workbench("tree_cycles", "cpu")
    train, val = wb.instances("train"), wb.instances("val")
    # the real target classifies every Tree-cycles instance correctly
    assert bool(tuning.correctly_classified(wb.black_box, train).all())
    # pretend it gets every third instance wrong: those must not be trained on
    monkeypatch.setattr(tuning, "correctly_classified",
                        lambda bb, insts: torch.arange(len(insts)) % 3 != 0)
    seen = {}
    real_fit = GemAutoEncoder.fit

    def spy(self, instances, weights, val_instances=None, val_weights=None, progress=None):
        seen["train"] = [i.index for i in instances]
        seen["val"] = [i.index for i in val_instances]
        return real_fit(self, instances, weights, val_instances, val_weights, progress)

    monkeypatch.setattr(GemAutoEncoder, "fit", spy)
    validation_sweep(wb, [Variant("c", {"max_epochs": 2, "train_on": "correct"})], seeds=[0],
                     include_current=False)
    assert seen["train"] == [i.index for n, i in enumerate(train) if n % 3 != 0]
    assert seen["val"] == [i.index for n, i in enumerate(val) if n % 3 != 0]


def test_cli_tune_prints_current_and_variants(capsys, tmp_path):
    out = tmp_path / "tune.json"
    assert main(["tune", "--dataset", "tree_cycles", "--variant", "short:max_epochs=3",
                 "--seeds", "0", "--no-progress", "--threads", "1", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "validation instances" in text and "current" in text and "short" in text
    assert "short: max_epochs=3" in text
    import json
    data = json.loads(out.read_text())
    assert list(data["variants"]) == [CURRENT, "short"]


def test_cli_tune_bad_variant_is_one_line(capsys):
    assert main(["tune", "--dataset", "tree_cycles", "--variant", "x:nope=1", "--no-progress"]) == 2
    assert "unknown setting 'nope'" in capsys.readouterr().err


def test_finer_target_budgets_grade_the_order_inside_the_smallest_explanation():
    """``target_ks`` averages the distilled top-K masks over other budgets than the K grid: with
    1..max K every pair of the top-K ranks by how small a budget still keeps it."""
    from dataclasses import replace

    wb = Workbench("tree_cycles", "cpu")
    val = wb.instances("val")
    dist = wb.distillation("val")
    # the "refine" descent: nested top-K masks, one descent for every budget
    spec = wb.spec
    settings = replace(wb.gem_settings, target_kind="graded", topk_policy="refine",
                       necessity_lead=0)
    coarse = explainer_targets(dist, settings, spec.k_grid, instances=val, black_box=wb.black_box)
    fine_settings = replace(settings, target_ks=tuple(range(1, max(spec.k_grid) + 1)))
    fine = explainer_targets(dist, fine_settings, spec.k_grid, instances=val,
                             black_box=wb.black_box)
    smallest = min(spec.k_grid)
    masks = dist.topk_grid([1, smallest], "refine", instances=val, black_box=wb.black_box)
    for c, f, top1, top_small in zip(coarse, fine, masks[1], masks[smallest]):
        assert torch.equal(c > 0, f > 0)  # the same pairs are kept somewhere in the grid
        # the coarse grid gives every pair of the smallest explanation the same grade ...
        assert torch.unique(c[top_small.bool()]).numel() == 1
        # ... the fine one puts the single best pair strictly above every other pair
        best = top1.bool()
        assert int(best.sum()) == 1
        assert float(f[best]) == 1.0 and float(f[~best].max()) < 1.0
