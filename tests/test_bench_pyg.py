"""``bench pyg`` end to end on a small run: one process, and several whose medians it combines."""
import json
import statistics
import subprocess
import sys

import pytest

from gem_core.evaluation.result_file import load_bench
from tests.conftest import requires_mutagenicity


def _bench(tmp_path, *extra):
    out = tmp_path / "pyg.json"
    cmd = [sys.executable, "-m", "gem_core", "bench", "pyg", "--no-progress", "--graphs", "6",
           "--baseline-graphs", "1", "--fit-graphs", "20", "--epochs", "2", "--model-epochs", "2",
           "--json", str(out), *extra]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout, json.loads(out.read_text())


@requires_mutagenicity
def test_bench_pyg_reports_the_median_of_several_processes(tmp_path, monkeypatch):
    monkeypatch.setenv("GEM_CACHE_DIR", str(tmp_path / "cache"))
    printed, data = _bench(tmp_path, "--processes", "2")
    rows = data["bench"]["pyg"]["rows"]
    assert set(rows) == {"gem", "gem_check", "pyg_gnnexplainer"}
    for row in rows.values():
        each = row["process_medians_ms"]
        assert len(each) == 2 and all(m > 0 for m in each)
        assert row["median_ms"] == pytest.approx(statistics.median(each), rel=1e-3)
        assert row["times_gem"] == pytest.approx(row["median_ms"] / rows["gem"]["median_ms"])
    assert rows["gem"]["calls"] == 6 and rows["pyg_gnnexplainer"]["calls"] == 1
    assert "median of 2 processes" in printed and "processes:" in printed
    bench = load_bench(tmp_path / "pyg.json").pyg  # the results page reads it
    assert bench is not None and bench.rows["gem_check"].process_medians_ms == tuple(
        rows["gem_check"]["process_medians_ms"])
    # one process: no per-process list
    _, single = _bench(tmp_path)
    assert all("process_medians_ms" not in r for r in single["bench"]["pyg"]["rows"].values())


def test_bench_pyg_refuses_a_bad_count_in_one_line():
    done = subprocess.run([sys.executable, "-m", "gem_core", "bench", "pyg", "--processes", "0"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--processes must be a positive integer" in done.stderr
    assert "Traceback" not in done.stderr
