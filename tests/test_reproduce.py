"""End-to-end: target → distillation → Gem → evaluation on BA-shapes, and the reproduce CLI."""
import json

import pytest

from gem_core.cli import main
from gem_core.evaluation.metrics import evaluate_scores
from gem_core.gem.training_targets import explainer_targets
from gem_core.explainers import Explanation, check_method
from gem_core.service.session import Workbench
from gem_core.evaluation.reproduce import format_tables, run_reproduce


@pytest.fixture(scope="module")
def ba_bench():
    return Workbench("ba_shapes", "cpu")


def test_gem_end_to_end_on_ba_shapes():
    """Fit Gem from scratch (no shipped explainer) and reach >= 0.90 explanation accuracy at K=6.

    The dataset's preset with one network instead of its ensemble of three (each member is the
    same fit from another seed): 30 s of the suite instead of 85; the shipped three-network fit
    is what ``reproduce --dataset ba_shapes`` makes and ``test_shipped_fits`` loads."""
    bench = Workbench("ba_shapes", "cpu")
    assert bench.gem_settings.network.ensemble > 1
    bench.gem_settings = bench.gem_settings.with_overrides({"network.ensemble": 1})
    gem = bench.fit("gem", refresh=True)
    ba_bench = bench
    test = ba_bench.instances("test")
    scores = gem.explain(test)
    assert [s.numel() for s in scores] == [i.num_pairs for i in test]
    result = evaluate_scores(ba_bench.black_box, test, scores, [6], fidelity=False)
    assert result.accuracy_at_k[6] >= 0.90
    assert result.edge_auc is not None and result.edge_auc > 0.9


def test_explainer_targets_are_in_unit_interval(ba_bench):
    dist = ba_bench.distillation("val")
    for kind in ("weights", "graded", "mix"):
        settings = ba_bench.gem_settings.with_overrides({"teacher.kind": kind})
        # the dataset's row leads with its necessity order (forward passes of the target)
        assert settings.teacher.necessity_lead > 0
        targets = explainer_targets(dist, settings, ba_bench.spec.k_grid,
                                    instances=ba_bench.instances("val"),
                                    black_box=ba_bench.black_box)
        assert len(targets) == len(dist)
        assert all(t.numel() == 0 or (float(t.min()) >= 0 and float(t.max()) <= 1) for t in targets)
    with pytest.raises(ValueError, match="teacher.kind: 'bogus' is not one of"):
        ba_bench.gem_settings.with_overrides({"teacher.kind": "bogus"})


def test_a_subset_of_methods_never_overwrites_the_shipped_results(ba_bench, monkeypatch, tmp_path):
    import gem_core.evaluation.reproduce as reproduce

    target = tmp_path / "ba_shapes.json"
    monkeypatch.setattr(reproduce, "results_path", lambda name: target)
    run_reproduce("ba_shapes", device="cpu", methods=["random"], bench=ba_bench)
    assert not target.exists()  # the other methods' results would be lost


def test_reproduce_json_shape_and_table(ba_bench):
    out = run_reproduce("ba_shapes", device="cpu", methods=["gem", "random"], limit=8,
                        bench=ba_bench, write_assets=False)
    assert out["dataset"] == "ba_shapes"
    assert set(out["target"]) >= {"train_accuracy", "val_accuracy", "test_accuracy"}
    assert set(out["distillation"]) >= {"accuracy_at_k", "ms_per_instance", "instances"}
    for method in ("gem", "random"):
        res = out["methods"][method]
        assert set(res["accuracy_at_k"]) == {"5", "6", "7", "8", "9"}
        assert len(res["log_odds"]) == 8 and "edge_auc" in res
        assert res["ms_per_instance"] > 0
    table = format_tables(out)
    assert "Gem" in table and "Random" in table and "K=6" in table and "( 97.1)" in table
    # BA-shapes' Gem does not read the predicted class: no target forward inside its time
    assert out["target"]["forward_ms_per_instance"] is None


def test_where_gem_reads_the_prediction_the_target_forward_in_its_time_is_measured():
    out = run_reproduce("mutagenicity", device="cpu", methods=["gem"], limit=8,
                        write_assets=False)
    forward = out["target"]["forward_ms_per_instance"]
    assert 0 < forward < out["methods"]["gem"]["ms_per_instance"]


def test_cli_reproduce_quick(tmp_path, capsys):
    path = tmp_path / "r.json"
    assert main(["reproduce", "--dataset", "tree_cycles", "--methods", "random", "--limit", "5",
                 "--no-progress", "--device", "cpu", "--json", str(path)]) == 0
    data = json.loads(path.read_text())
    assert data["methods"]["random"]["accuracy_at_k"].keys() == {"6", "7", "8", "9", "10"}
    assert "Random" in capsys.readouterr().out


def test_unknown_method_is_a_clear_error(capsys):
    with pytest.raises(ValueError, match="Unknown method 'foo'"):
        check_method("foo")
    assert main(["reproduce", "--dataset", "ba_shapes", "--methods", "foo", "--no-progress"]) == 2
    assert "Unknown method" in capsys.readouterr().err


def test_batched_methods_are_timed_warm_and_gnnexplainer_once(monkeypatch):
    """The first (cold) call of a batched explainer is not its reported time; GNNExplainer runs once."""
    from gem_core.evaluation import reproduce

    wb = Workbench("tree_cycles", "cpu")
    real_explain = Workbench.explain
    calls: dict[str, int] = {}
    cold_then_warm = [50.0, 3.0, 1.0, 2.0, 9.0, 4.0]  # ms per instance of successive calls

    def fake_timing(self, method, instances, progress=None):
        out = real_explain(self, method, instances, progress)
        n = calls.get(method, 0)
        calls[method] = n + 1
        return Explanation(out.method, out.scores, cold_then_warm[n] if n < len(cold_then_warm) else 0.0)

    monkeypatch.setattr(Workbench, "explain", fake_timing)
    out = run_reproduce("tree_cycles", methods=["random", "gnnexplainer"], limit=2,
                        write_assets=False, bench=wb)
    assert calls == {"random": 1 + reproduce.TIMING_REPEATS, "gnnexplainer": 1}
    assert out["methods"]["random"]["ms_per_instance"] == 3.0  # median of 3, 1, 2, 9, 4
    assert out["methods"]["gnnexplainer"]["ms_per_instance"] == 50.0


def test_a_loaded_explainer_says_where_it_came_from():
    """The session marks a fit it loaded (the Pipeline page says so instead of 'fitted in')."""
    wb = Workbench("tree_cycles", "cpu")
    gem = wb.explainer("gem")  # the shipped checkpoint, or this session's cache
    assert gem.loaded_from_ is not None and gem.loaded_from_.endswith(".pt")
    assert wb.explainer("random").loaded_from_ is None  # nothing to load


def test_recorded_target_summary_reads_the_shipped_results_or_says_none(monkeypatch, tmp_path):
    from gem_core.evaluation import reproduce

    path = tmp_path / "mutagenicity.json"
    monkeypatch.setattr(reproduce, "results_path", lambda dataset, target="paper": path)
    assert reproduce.recorded_target_summary("mutagenicity") is None  # no file
    path.write_text("{not json")
    assert reproduce.recorded_target_summary("mutagenicity") is None  # corrupted
    path.write_text(json.dumps({"schema_version": 2, "dataset": "mutagenicity", "methods": {},
                                "target": {"test_accuracy": 0.8}}))
    assert reproduce.recorded_target_summary("mutagenicity") is None  # another schema version
    path.write_text(json.dumps({"dataset": "mutagenicity", "methods": {},
                                "target": {"test_accuracy": 0.8}}))
    assert reproduce.recorded_target_summary("mutagenicity") == {"test_accuracy": 0.8}
    path.write_text(json.dumps({"dataset": "mutagenicity", "methods": {},
                                "target": {"test_accuracy": 0.8},
                                "toxicophores": {"methods": {"gem": {"auc": 0.7}}}}))
    assert reproduce.recorded_target_summary("mutagenicity") == {"test_accuracy": 0.8,
                                                                "toxicophore_auc": 0.7}


def _check_curves(res, ks):
    for name in ("sufficiency_at_k", "necessity_at_k"):
        assert set(res[name]) == {"keep_nodes", "drop_isolated"}
        for protocol, curve in res[name].items():
            assert list(curve) == ks and all(0.0 <= v <= 1.0 for v in curve.values())
            per_class = res[f"{name}_per_class"][protocol]
            assert per_class and all(list(c) == ks and all(0.0 <= v <= 1.0 for v in c.values())
                                     for c in per_class.values())


def test_cli_reproduce_json_has_the_fields_faithfulness_metrics(tmp_path):
    path = tmp_path / "r.json"
    assert main(["reproduce", "--dataset", "ba_shapes", "--methods", "random,distilled_predicted",
                 "--limit", "4", "--stability", "--no-progress", "--device", "cpu",
                 "--json", str(path)]) == 0
    data = json.loads(path.read_text())
    ks = [str(k) for k in range(1, 11)]  # node task: the fine grid 1..10
    assert data["faithfulness_k"] == list(range(1, 11))
    for method in ("random", "distilled_predicted"):
        res = data["methods"][method]
        _check_curves(res, ks)
        stab = res["stability"]
        assert stab["seeds"] == [0, 1, 2] and stab["measured"] and 0.0 <= stab["value"] <= 1.0
    assert data["methods"]["distilled_predicted"]["stability"]["deterministic"] is True
    assert data["methods"]["distilled_predicted"]["stability"]["value"] == 1.0
    assert data["methods"]["random"]["stability"]["deterministic"] is False
    assert data["methods"]["random"]["stability"]["value"] < 1.0  # other seeds, other top-5


def test_stability_of_a_seeded_method_is_opt_in_and_says_so(ba_bench):
    out = run_reproduce("ba_shapes", device="cpu", methods=["random"], limit=3, bench=ba_bench,
                        write_assets=False)
    stab = out["methods"]["random"]["stability"]
    assert stab["value"] is None and not stab["measured"] and "--stability" in stab["note"]
    _check_curves(out["methods"]["random"], [str(k) for k in range(1, 11)])
    assert "sufficiency" in format_tables(out)


def test_a_plain_run_keeps_the_stability_an_earlier_run_measured(monkeypatch, tmp_path):
    """``reproduce`` without ``--stability`` rewrites the results file: a stability measured by
    an earlier run is kept while this run repeats that run's results, and dropped once they differ."""
    import gem_core.evaluation.reproduce as reproduce

    target = tmp_path / "tree_cycles.json"
    monkeypatch.setattr(reproduce, "results_path", lambda *args: target)
    bench = Workbench("tree_cycles", "cpu")
    first = run_reproduce("tree_cycles", device="cpu", bench=bench)
    assert first["methods"]["gem"]["stability"]["measured"] is False
    assert first["methods"]["random"]["stability"]["measured"] is False

    def measured_earlier(change=None):
        written = json.loads(target.read_text())
        for method in ("gem", "random"):
            written["methods"][method]["stability"] = {
                "value": 0.5, "seeds": [0, 1, 2], "deterministic": False, "k": 6, "measured": True}
        if change:
            change(written)
        target.write_text(json.dumps(written))

    measured_earlier()
    again = run_reproduce("tree_cycles", device="cpu", bench=bench)
    for method in ("gem", "random"):
        kept = again["methods"][method]["stability"]
        assert kept["measured"] is True and kept["value"] == 0.5 and "earlier run" in kept["note"]
    assert json.loads(target.read_text())["methods"]["gem"]["stability"]["value"] == 0.5

    # the earlier run's Gem explained differently: its stability no longer describes this Gem
    def other_gem(written):
        written["methods"]["gem"]["accuracy_at_k"]["6"] -= 0.1

    measured_earlier(other_gem)
    third = run_reproduce("tree_cycles", device="cpu", bench=bench)
    assert third["methods"]["gem"]["stability"]["measured"] is False
    assert third["methods"]["random"]["stability"]["value"] == 0.5
