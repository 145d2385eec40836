"""docs/results.md is generated from the recorded results: it must be what the command writes."""
from __future__ import annotations

import json

from gem_core.evaluation import report


def test_results_page_is_what_the_command_writes():
    assert report.DOC_PATH.read_text() == report.render(), (
        "docs/results.md is stale: run `python -m gem_core results`")


def test_results_page_is_short_and_names_every_recorded_dataset():
    text = report.render()
    assert len(text.splitlines()) <= 400
    for stem in report.DATASET_FILES:
        if (report.RESULTS_DIR / f"{stem}.json").is_file():
            assert f"## {stem}:" in text


def test_the_verdict_follows_the_numbers(tmp_path):
    """Gem alone below a baseline at one K is said, by how much; above everywhere is said too."""
    result = json.loads((report.RESULTS_DIR / "tree_cycles.json").read_text())
    gem = result["methods"]["gem"]["accuracy_at_k"]
    pg = result["methods"]["pgexplainer"]["accuracy_at_k"]
    for k in pg:
        pg[k] = min(gem[k], pg[k])
    assert "≥ PGExplainer at every K" in report.dataset_section("tree_cycles", result)[4]
    k = next(iter(pg))
    pg[k] = gem[k] + 0.05
    line = report.dataset_section("tree_cycles", result)[4]
    assert f"below PGExplainer at K = {k} by 5.0 points" in line
    (tmp_path / "tree_cycles.json").write_text(json.dumps(result))
    assert "by 5.0 points" in report.render(tmp_path)


def test_where_gem_reads_the_prediction_the_page_says_how_much_of_its_time_is_the_target():
    result = json.loads((report.RESULTS_DIR / "mutagenicity.json").read_text())
    result["target"]["forward_ms_per_instance"] = 0.01
    result["methods"]["gem"]["ms_per_instance"] = 0.04
    line = report.dataset_section("mutagenicity", result)[2]
    assert "the target's forward over the test split, 0.01 ms per instance" in line
    assert "part of Gem's 0.04 ms (Gem's own pass: about 0.03 ms)" in line
    del result["target"]["forward_ms_per_instance"]
    assert "target's forward" not in report.dataset_section("mutagenicity", result)[2]
