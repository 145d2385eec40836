"""The model zoo and the Crippen logP yardstick: the rank agreement with a known truth, quick
end-to-end runs of both benches, the acceptance lines, and bad input refused before torch."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gem_core.cli import bench_zoo
from gem_core.evaluation.crippen_bench import rank_agreement, run_crippen
from gem_core.evaluation.zoo import BOND_MODELS, ZOO_MODELS, run_zoo, zoo_checks

ROOT = Path(__file__).resolve().parent.parent


def test_rank_agreement_reads_order_and_skips_what_has_none():
    truth = [torch.tensor([0.1, 0.5, -0.3, 0.9]), torch.tensor([1.0, 2.0, 3.0])]
    same = rank_agreement([t * 3 + 1 for t in truth], truth)
    assert same["spearman"] == pytest.approx(1.0) and same["kendall"] == pytest.approx(1.0)
    flipped = rank_agreement([-t for t in truth], truth)
    assert flipped["spearman"] == pytest.approx(-1.0)
    constant = rank_agreement([torch.ones(4), torch.tensor([3.0, 2.0, 1.0])], truth)
    assert constant["molecules"] == 1 and constant["spearman"] == pytest.approx(-1.0)
    none = rank_agreement([torch.ones(2)], [torch.tensor([1.0, 2.0])])  # too few bonds
    assert none["molecules"] == 0 and math.isnan(none["spearman"])


def test_crippen_bench_end_to_end_on_a_few_molecules():
    result = run_crippen(
        limit=6,
        train_limit=20,
        methods=("gem", "gem_check", "integrated_gradients", "random"),
        gem_epochs=20,
        molecules=200,
        model_epochs=3,
    )
    assert result["test_molecules"] == 6 and result["gem_train_molecules"] == 20
    assert set(result["regressor"]) >= {"train_r2", "val_r2", "test_r2"}
    rows = {r["method"]: r for r in result["rows"]}
    assert list(rows) == ["gem", "gem_check", "integrated_gradients", "random"]
    for r in rows.values():
        assert -1.0 <= r["spearman"] <= 1.0 and 0.0 <= r["mean_sufficiency"] <= 1.0
        assert r["molecules_ranked"] > 0 and r["ms_per_molecule"] >= 0
    assert rows["gem_check"]["check"] == "repair" and "check" not in rows["gem"]


def test_zoo_runs_a_regressor_end_to_end_and_names_its_checks():
    result = run_zoo(["crippen_gine"], limit=5, train_limit=15, model_epochs=2, molecules=150)
    (entry,) = result["models"]
    assert entry["task"] == "regression" and entry["reads_bonds"]
    assert [r["method"] for r in entry["rows"]] == ["gem", "gem_check", "random", "gnnexplainer"]
    lines = zoo_checks(entry)
    assert len(lines) == 4 and all("mean sufficiency" in text for _, text in lines)


def test_zoo_checks_compare_both_gem_rows_with_both_baselines():
    entry = {"rows": [
        {"method": "gem", "mean_sufficiency": 0.8},
        {"method": "gem_check", "mean_sufficiency": 0.6},
        {"method": "random", "mean_sufficiency": 0.7},
        {"method": "gnnexplainer", "mean_sufficiency": 0.75},
    ]}
    assert [ok for ok, _ in zoo_checks(entry)] == [True, True, False, False]


def test_zoo_covers_the_acceptance_and_refuses_bad_input_before_torch():
    assert bench_zoo.MODELS == ZOO_MODELS
    assert len(ZOO_MODELS) >= 10 and len(BOND_MODELS) >= 4
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "gem_core", "bench", "zoo",
                           "--models", "gin,graphormer"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]
    assert len(lines) == 1 and "unknown model 'graphormer'" in lines[0]
    imported = {line.rsplit("|", 1)[1].strip().split(".")[0] for line in proc.stderr.splitlines()
                if line.startswith("import time:") and "|" in line}
    assert not imported & {"torch", "torch_geometric"}


def test_zoo_on_the_validation_split_fits_gem_with_the_given_settings():
    result = run_zoo(["crippen_gine"], limit=5, train_limit=15, model_epochs=2, molecules=150,
                     split="val", methods=("gem", "random"),
                     gem_settings={"network.decoder": "inner"})
    (entry,) = result["models"]
    assert result["split"] == "val" and result["gem_settings"] == {"network.decoder": "inner"}
    assert list(entry["quality"]) == ["val_r2"]
    rows = {r["method"]: r for r in entry["rows"]}
    assert list(rows) == ["gem", "random"]
    assert rows["gem"]["settings"] == {"network.decoder": "inner"} and "settings" not in rows["random"]
    with pytest.raises(ValueError, match="zoo methods"):
        run_zoo(["crippen_gine"], methods=("gem", "pgexplainer"))
    with pytest.raises(ValueError, match="split"):
        run_zoo(["crippen_gine"], split="train")


def test_the_sweep_table_reads_every_variant_against_random():
    from gem_core.evaluation.tuning import Variant

    def run(gem: dict[str, float], random: bool) -> dict:
        return {"models": [
            {"model": m, "rows": [{"method": "gem", "mean_sufficiency": s, "mean_necessity": 0.5}]
             + ([{"method": "random", "mean_sufficiency": 0.7, "mean_necessity": 0.2}]
                if random else [])}
            for m, s in gem.items()]}

    variants = [Variant("current"), Variant("wide", {"network.hidden": (64, 64, 32)})]
    runs = [run({"gin": 0.9, "gat": 0.65}, True), run({"gin": 0.8, "gat": 0.75}, False)]
    table = bench_zoo._sweep_table(variants, runs, ["gin", "gat"], "gem")
    current, wide = table["summary"]
    assert current["mean_sufficiency"] == pytest.approx(0.775) and current["leads"] == 1
    assert current["below_random"] == ["gat"] and wide["below_random"] == []
    assert wide["leads"] == 1 and wide["mean_sufficiency"] == pytest.approx(0.775)
    assert any(line.startswith("gat") and "0.650/0.500" in line and "0.700" in line
               for line in table["lines"])


def test_a_bad_sweep_variant_is_one_line():
    proc = subprocess.run([sys.executable, "-m", "gem_core", "bench", "zoo", "--variant",
                           "x:network.nonsense=1"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "network.nonsense" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "gem_core", "bench", "zoo", "--methods",
                           "random", "--variant", "x:network.ensemble=3"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "keep gem or gem_check" in proc.stderr
