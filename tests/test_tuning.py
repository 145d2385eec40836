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
    v = parse_variant("wide:network.hidden=64/64/32,network.decoder=mlp,"
                      "inputs.degree_features=yes,training.lr=3e-3,training.patience=7")
    assert v.name == "wide"
    assert v.overrides == {"network.hidden": (64, 64, 32), "network.decoder": "mlp",
                           "inputs.degree_features": True, "training.lr": 0.003,
                           "training.patience": 7}
    assert v.refits()
    assert parse_variant("plain").overrides == {}
    t = parse_variant("t:teacher.topk_policy=paper,teacher.kind=weights,"
                      "teacher.label_source=predicted,train_on=correct")
    assert t.train_on == "correct" and t.refits()
    assert parse_variant("f:teacher.ks=1-4").overrides == {"teacher.ks": (1, 2, 3, 4)}
    assert parse_variant("f:teacher.ks=10/5/10").overrides == {"teacher.ks": (5, 10)}
    assert parse_variant("n:teacher.necessity_lead=5").overrides == {"teacher.necessity_lead": 5}
    c = parse_variant("c:check.rule=sustain,check.width=5,check.late=climb")
    assert c.overrides == {"check.rule": "sustain", "check.width": 5, "check.late": "climb"}
    assert not c.refits()  # read at explain time
    settings = c.settings(Workbench("nci1", "cpu").gem_settings)
    assert (settings.check.rule.name, settings.check.width, settings.check.late.name) == (
        "sustain", 5, "climb")
    b = parse_variant("b:check.backward=grid,check.lead=5")
    assert b.overrides == {"check.backward": "grid", "check.lead": 5}
    assert not b.refits()
    settings = b.settings(Workbench("nci1", "cpu").gem_settings)
    assert (settings.check.backward.name, settings.check.lead) == ("grid", 5)
    from gem_core.gem.training_targets import format_ks, parse_ks

    assert format_ks(parse_ks("1-4")) == "1-4" and format_ks(parse_ks("10/5")) == "5/10"


@pytest.mark.parametrize("text, message", [
    ("x:foo=1", "unknown setting 'foo'"),
    ("x:network.decoder", "expected key=value"),
    (":training.lr=0.1", "needs a name"),
    ("x:inputs.degree_features=maybe", "expected true or false"),
    ("x:network.hidden=a/b", "hidden widths"),
    ("x:training.patience=1.5", "patience"),
    ("x:teacher.ks=a-b", "budgets look like"),
    ("x:teacher.ks=0-3", "at least 1"),
])
def test_parse_variant_errors_are_clear(text, message):
    with pytest.raises(ValueError, match=message):
        parse_variant(text)


@pytest.mark.parametrize("variants, message", [
    ([Variant(CURRENT)], "dataset's own settings"),
    ([Variant("a"), Variant("a")], "unique"),
    ([Variant("a", {"teacher.kind": "nope"})], "teacher.kind: 'nope' is not one of"),
    ([Variant("a", {"teacher.topk_policy": "nope"})], "topk_policy: 'nope' is not one of"),
    ([Variant("a", {"train_on": "some"})], "train_on must be one of"),
    ([Variant("a", {"teacher.label_source": "guess"})], "label"),
    ([Variant("a", {"network.decoder": "dense"})], "decoder: 'dense' is not one of"),
    ([Variant("a", {"check.late": "off"})], "check.late: 'off' is not a rule"),
    ([Variant("a", {"check.backward": "always"})], "check.backward: 'always' is not one of"),
    ([Variant("a", {"check.lead": -1})], "check.lead"),
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
    variants = [Variant("short", {"training.max_epochs": 4}),
                Variant("inner-nobias", {"training.max_epochs": 4, "network.decoder_bias": False})]
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
    assert result["variants"]["inner-nobias"]["overrides"] == {"training.max_epochs": 4,
                                                               "network.decoder_bias": False}
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
    validation_sweep(wb, [Variant("c", {"training.max_epochs": 2, "train_on": "correct"})], seeds=[0],
                     include_current=False)
    assert seen["train"] == [i.index for n, i in enumerate(train) if n % 3 != 0]
    assert seen["val"] == [i.index for n, i in enumerate(val) if n % 3 != 0]


def test_cli_tune_prints_current_and_variants(capsys, tmp_path):
    out = tmp_path / "tune.json"
    assert main(["tune", "--dataset", "tree_cycles", "--variant", "short:training.max_epochs=3",
                 "--seeds", "0", "--no-progress", "--threads", "1", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "validation instances" in text and "current" in text and "short" in text
    assert "short: training.max_epochs=3" in text
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
    settings = wb.gem_settings.with_overrides({"teacher.kind": "graded",
                                               "teacher.topk_policy": "refine",
                                               "teacher.necessity_lead": 0})
    coarse = explainer_targets(dist, settings, spec.k_grid, instances=val, black_box=wb.black_box)
    fine_settings = settings.with_overrides({"teacher.ks": tuple(range(1, max(spec.k_grid) + 1))})
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
