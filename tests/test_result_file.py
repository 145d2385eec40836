"""The typed reader of assets/results (gem_core.evaluation.result_file): what the writer writes
reads back field for field, every shipped file loads, a malformed or foreign-version file is
refused in one line that names the file and the field."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gem_core.evaluation.reproduce import run_reproduce
from gem_core.evaluation.result_file import (SCHEMA_VERSION, ResultFile, ResultFileError,
                                             load_bench, load_result)
from gem_core.runtime.store import ASSETS_DIR, save_json

RESULTS = ASSETS_DIR / "results"
SHIPPED = sorted(RESULTS.glob("*.json"))


def _by_k(row: dict) -> dict:
    return {int(k): v for k, v in row.items()}


def _load(path: Path):
    return load_bench(path) if path.name.startswith("bench-") else load_result(path)


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_every_shipped_result_file_loads_at_the_current_version(path):
    assert json.loads(path.read_text())["schema_version"] == SCHEMA_VERSION
    assert _load(path).schema_version == SCHEMA_VERSION


def test_the_shipped_files_are_all_there():
    names = {p.name for p in SHIPPED}
    assert {"ba_shapes.json", "mutagenicity.json", "bench-pyg.json"} <= names


def test_the_writer_s_json_reads_back_field_for_field(tmp_path):
    """reproduce's JSON, written as the shipped files are, reads back with every value."""
    from gem_core.service.session import Workbench

    out = run_reproduce("tree_cycles", device="cpu", methods=["random", "distilled_predicted"],
                        limit=4, write_assets=False, bench=Workbench("tree_cycles", "cpu"))
    assert next(iter(out)) == "schema_version" and out["schema_version"] == SCHEMA_VERSION
    raw = json.loads(save_json(out, tmp_path / "tree_cycles.json").read_text())
    typed = load_result(tmp_path / "tree_cycles.json")
    assert isinstance(typed, ResultFile) and load_result(typed) is typed
    assert (typed.dataset, typed.test_instances, typed.log_odds_k) == (
        "tree_cycles", 4, raw["log_odds_k"])
    assert typed.k_grid == tuple(raw["k_grid"]) and typed.faithfulness_k == tuple(
        raw["faithfulness_k"])
    assert vars(typed.target) == raw["target"]
    dist = raw["distillation"]
    assert vars(typed.distillation) == {**dist, "accuracy_at_k": _by_k(dist["accuracy_at_k"])}
    assert dict(typed.machine.recorded()) == raw["machine"]
    assert typed.seconds == raw["seconds"] and typed.toxicophores is None
    assert list(typed.methods) == list(raw["methods"])
    for name, row in raw["methods"].items():
        mine = typed.methods[name]
        for key in ("accuracy_at_k", "agreement_at_k", "fidelity_at_k"):
            assert getattr(mine, key) == _by_k(row[key])
        assert list(mine.log_odds) == row["log_odds"] and mine.edge_auc == row.get("edge_auc")
        assert (mine.ms_per_instance, mine.fit_seconds) == (row["ms_per_instance"],
                                                            row["fit_seconds"])
        for metric in ("sufficiency", "necessity"):
            for protocol, curve in row[f"{metric}_at_k"].items():
                assert mine.curve(metric, protocol) == _by_k(curve)
            per_class = getattr(mine, f"{metric}_at_k_per_class")
            assert per_class == {p: {int(c): _by_k(v) for c, v in classes.items()}
                                 for p, classes in row[f"{metric}_at_k_per_class"].items()}
        assert mine.stability is not None and mine.stability.to_dict() == row["stability"]


def test_a_molecule_file_reads_its_toxicophore_benchmark():
    raw = json.loads((RESULTS / "mutagenicity.json").read_text())
    typed = load_result(RESULTS / "mutagenicity.json")
    tox, k = typed.toxicophores, raw["toxicophores"]["k"]
    assert tox is not None and tox.k == k and tox.molecules == raw["toxicophores"]["molecules"]
    gem = raw["toxicophores"]["methods"]["gem"]
    assert (tox.methods["gem"].auc, tox.methods["gem"].recall) == (gem["auc"],
                                                                   gem[f"recall_at_{k}"])
    nitro = raw["toxicophores"]["by_class"]["aromatic_nitro"]
    assert tox.by_class["aromatic_nitro"].molecules == nitro["molecules"]
    assert tox.random_recall == raw["toxicophores"][f"random_recall_at_{k}"]
    assert typed.methods["gem"].accuracy(mutagen_only=True) == _by_k(
        raw["methods"]["gem"]["accuracy_at_k_mutagen"])


def test_the_bench_file_reads_its_rows():
    raw = json.loads((RESULTS / "bench-pyg.json").read_text())["bench"]["pyg"]
    bench = load_bench(RESULTS / "bench-pyg.json").pyg
    assert bench is not None and bench.model == raw["model"]
    got = {n: {**vars(r), "process_medians_ms": list(r.process_medians_ms)} for n, r in bench.rows.items()}
    assert got == {n: {"process_medians_ms": [], **r} for n, r in raw["rows"].items()}


def _shipped(name: str = "ba_shapes.json") -> dict:
    return json.loads((RESULTS / name).read_text())


@pytest.mark.parametrize("version", [0, 2, 99])
def test_another_schema_version_is_refused_in_one_line(tmp_path, version):
    data = {**_shipped(), "schema_version": version}
    path = tmp_path / "ba_shapes.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ResultFileError) as info:
        load_result(path)
    message = str(info.value)
    assert message.startswith(f"ba_shapes.json: schema_version {version} is not supported")
    assert f"reads version {SCHEMA_VERSION}" in message and "\n" not in message
    assert info.value.file == "ba_shapes.json" and info.value.problem in message


def test_a_file_without_a_version_is_version_one():
    data = _shipped()
    del data["schema_version"]
    assert load_result(data).schema_version == 1


def _broken(change) -> dict:
    data = _shipped()
    change(data)
    return data


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(schema_version="1"), "schema_version: expected an integer, got the text '1'"),
    (lambda d: d.pop("methods"), "missing field 'methods'"),
    (lambda d: d["methods"]["gem"].update(accuracy_at_k=[0.9]),
     "methods.gem.accuracy_at_k: expected an object, got a list"),
    (lambda d: d["methods"]["gem"]["accuracy_at_k"].update({"5": "high"}),
     "methods.gem.accuracy_at_k.5: expected a number, got the text 'high'"),
    (lambda d: d["methods"]["gem"]["accuracy_at_k"].update({"five": 0.5}),
     "methods.gem.accuracy_at_k: expected whole numbers as keys, got 'five'"),
    (lambda d: d["target"].update(accuracy=0.9), "target: unknown field 'accuracy'"),
    (lambda d: d["methods"]["random"]["stability"].update(measured="yes"),
     "methods.random.stability.measured: expected true or false, got the text 'yes'"),
    (lambda d: d.update(k_grid=[5, True]), "k_grid.1: expected an integer, got true/false"),
])
def test_a_malformed_file_names_the_field_in_one_line(tmp_path, change, message):
    path = tmp_path / "ba_shapes.json"
    path.write_text(json.dumps(_broken(change)))
    with pytest.raises(ResultFileError) as info:
        load_result(path)
    assert str(info.value) == f"ba_shapes.json: {message}"
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        load_result(_broken(change))  # JSON already read: the field alone


def test_not_json_at_all_is_one_line_too(tmp_path):
    path = tmp_path / "nci1.json"
    path.write_text("{not json")
    with pytest.raises(ResultFileError, match=r"^nci1\.json: not valid JSON \(.*line 1\)$"):
        load_result(path)
    with pytest.raises(ResultFileError, match="^expected a JSON object, got a list$"):
        load_result([1, 2])  # type: ignore[arg-type]
    with pytest.raises(ResultFileError, match="^bench: unknown field 'distill'"):
        load_bench({"schema_version": SCHEMA_VERSION, "bench": {"distill": {}}})


def test_a_partial_file_reads_with_defaults():
    """Quick runs and hand-made files may hold only a dataset and its methods."""
    typed = load_result({"dataset": "toy", "methods": {"gem": {"accuracy_at_k": {"3": 0.5}}}})
    gem = typed.methods["gem"]
    assert gem.accuracy_at_k == {3: 0.5} and gem.agreement_at_k == {} and gem.stability is None
    assert gem.ms_per_instance == 0.0 and gem.curve("necessity", "drop_isolated") == {}
    assert typed.target.name == "paper" and typed.target.test_accuracy is None
    assert typed.toxicophores is None and typed.machine.recorded() == []
