"""``bench splits``: Gem alone on its training graphs against test, per predicted class (issue 50's
diagnosis), its JSON read back and its section of docs/results.md."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gem_core.evaluation import report
from gem_core.evaluation.faithfulness import sufficiency_at_k
from gem_core.evaluation.result_file import load_bench
from gem_core.evaluation.split_diagnosis import findings, parse_target, split_diagnosis
from tests.conftest import requires_mutagenicity


@requires_mutagenicity
def test_the_split_curves_are_the_yardsticks_own_on_the_same_graphs():
    """Per split, Gem's curve is sufficiency_at_k on the same evenly spaced graphs, and per-class
    counts cover them: the training split is measured on training graphs, not on test."""
    from gem_core.api import workbench

    run = split_diagnosis("mutagenicity", "paper", splits=("train", "test"), limit=60)
    assert [s["split"] for s in run["splits"]] == ["train", "test"]
    bench = workbench("mutagenicity", device="cpu")
    for split in run["splits"]:
        assert split["instances"] == 60
        assert sum(split["class_counts"].values()) == 60
        instances = bench.instances(split["split"])
        step = len(instances) / 60
        picked = [instances[int(i * step)] for i in range(60)]
        gem = next(r for r in split["methods"] if r["method"] == "gem")
        direct = sufficiency_at_k(bench.black_box, bench.explain("gem", picked),
                                  (5, 10, 15, 20, 25), "drop_isolated")
        assert gem["sufficiency"] == {str(k): pytest.approx(v) for k, v in direct.at_k.items()}
        assert gem["mean_sufficiency"] == pytest.approx(sum(direct.at_k.values()) / 5)
        for c, n in split["class_counts"].items():
            assert (c in gem["sufficiency_per_class"]) == (n > 0)


def _recorded(gem_train, gem_test, random_curve):
    def row(method, curve):
        return {"method": method, "sufficiency": {"5": curve[0], "10": curve[1]},
                "necessity": {"2": 0.5}, "sufficiency_per_class": {"0": {"5": curve[0]},
                                                                   "1": {"5": curve[1]}},
                "necessity_per_class": {"0": {"2": 0.5}, "1": {"2": 0.5}},
                "mean_sufficiency": sum(curve) / 2, "mean_necessity": 0.5, "seconds": 0.1}

    return {"schema_version": 2, "bench": {"splits": [{
        "dataset": "mutagenicity", "target": "paper", "protocol": "drop_isolated",
        "splits": [{"split": name, "instances": 10, "class_counts": {"0": 5, "1": 5},
                    "methods": [row("gem", gem), row("random", random_curve)]}
                   for name, gem in (("train", gem_train), ("test", gem_test))]}]}}


def test_the_findings_follow_the_numbers():
    from gem_core.evaluation.result_file import SCHEMA_VERSION

    data = _recorded([0.9, 0.9], [0.9, 0.88], [0.5, 0.5])
    data["schema_version"] = SCHEMA_VERSION
    (run,) = load_bench(data).splits
    said = " ".join(findings(run))
    assert "train and test agree" in said and "below random" not in said
    data = _recorded([0.9, 0.9], [0.4, 0.8], [0.5, 0.5])
    data["schema_version"] = SCHEMA_VERSION
    (run,) = load_bench(data).splits
    said = " ".join(findings(run))
    assert "a generalisation gap of 0.300" in said
    assert "test: Gem below random at k = 5" in said
    assert "below random over the curve for the predicted class mutagen" in said


def test_the_results_page_shows_a_recorded_splits_run(tmp_path):
    from gem_core.evaluation.result_file import SCHEMA_VERSION

    data = _recorded([0.9, 0.9], [0.4, 0.8], [0.5, 0.5])
    data["schema_version"] = SCHEMA_VERSION
    (tmp_path / "bench-splits.json").write_text(json.dumps(data))
    text = report.render(tmp_path)
    assert "`bench splits`" in text
    assert "| mutagenicity | test (10) | Gem | 0.400 0.800 | mutagen (5) 0.400 / nonmutagen (5) 0.800" in text


def test_a_node_task_or_unknown_target_is_refused_in_one_line():
    for entry, words in (("ba_shapes", "node task"), ("nci1:strong", "has no target"),
                         ("qm9", "unknown dataset")):
        with pytest.raises(ValueError, match=words):
            parse_target(entry)
    done = subprocess.run([sys.executable, "-m", "gem_core", "bench", "splits", "--targets",
                           "tree_cycles"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "node task" in done.stderr and "Traceback" not in done.stderr
