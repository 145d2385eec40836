"""``--device auto`` picks, per workload, the device a probe measured faster, and never a slower one."""
from __future__ import annotations

import json

import pytest
import torch

from tests.conftest import requires_mutagenicity

from gem_core.runtime import device_choice
from gem_core.runtime.device import resolve_device
from gem_core.runtime.device_choice import WORKLOADS, choose_device


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GEM_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("GEM_AUTO_DEVICE", raising=False)
    return tmp_path


def _stub(times: dict[str, float], calls: list):
    def probe(workload: str, device: torch.device) -> float:
        calls.append((workload, device.type))
        return times[device.type]
    return probe


def test_without_cuda_auto_is_the_cpu_and_nothing_is_probed(cache):
    calls: list = []
    choice = choose_device("batched", probe=_stub({"cpu": 9.0, "cuda": 1.0}, calls),
                           cuda_available=False)
    assert choice.device == "cpu" and calls == [] and "no CUDA" in choice.reason


def test_the_cpu_is_chosen_where_the_probe_measured_it_faster(cache):
    calls: list = []
    choice = choose_device("interactive", probe=_stub({"cpu": 2.0, "cuda": 7.5}, calls),
                           cuda_available=True)
    assert choice.device == "cpu"
    assert choice.cpu_ms == 2.0 and choice.cuda_ms == 7.5
    assert "CPU 2.00 ms, CUDA 7.50 ms" in choice.reason and "3.8x" in choice.reason
    assert calls == [("interactive", "cpu"), ("interactive", "cuda")]


def test_cuda_is_chosen_only_where_it_was_faster_by_the_workloads_margin(cache):
    # batched work must be measured more than 4x faster on CUDA (real loops gain less than the probe)
    assert choose_device("batched", probe=_stub({"cpu": 8.0, "cuda": 1.0}, []),
                         cuda_available=True).device == "cuda"
    lead = choose_device("distillation", probe=_stub({"cpu": 3.0, "cuda": 1.0}, []),
                         cuda_available=True)
    assert lead.device == "cpu" and "too small to pay off" in lead.reason and "3.0x" in lead.reason
    # a screening chunk is mostly CPU work: even a 9.5x faster probe (an H200's) keeps it there
    assert choose_device("screen", probe=_stub({"cpu": 19.0, "cuda": 2.0}, []),
                         cuda_available=True).device == "cpu"
    assert choose_device("fit", probe=_stub({"cpu": 3.0, "cuda": 3.0}, []),
                         cuda_available=True).device == "cpu"
    assert set(device_choice.CUDA_MARGIN) == set(WORKLOADS)
    assert all(margin >= 1.0 for margin in device_choice.CUDA_MARGIN.values())


def test_the_stored_times_are_judged_by_todays_margins(cache, monkeypatch):
    calls: list = []
    assert choose_device("batched", probe=_stub({"cpu": 5.0, "cuda": 1.0}, calls),
                         cuda_available=True).device == "cuda"
    monkeypatch.setitem(device_choice.CUDA_MARGIN, "batched", 6.0)
    again = choose_device("batched", probe=_stub({"cpu": 5.0, "cuda": 1.0}, calls),
                          cuda_available=True)
    assert again.device == "cpu" and len(calls) == 2  # not probed again, judged again


def test_a_run_of_several_workloads_goes_to_cuda_only_if_each_of_them_does(cache):
    def probe(workload: str, device: torch.device) -> float:
        # CUDA 20x ahead on everything but the fit, where the CPU is faster
        return {"cpu": 20.0, "cuda": 60.0 if workload == "fit" else 1.0}[device.type]

    run = device_choice.choose_for_run(("fit", "distillation", "batched"), probe=probe,
                                       cuda_available=True)
    assert run.device == "cpu" and run.workload == "fit+distillation+batched"
    assert run.reason.startswith("fit: ") and "distillation" not in run.reason
    fast = device_choice.choose_for_run(("distillation", "batched"), probe=probe,
                                        cuda_available=True)
    assert fast.device == "cuda"
    none = device_choice.choose_for_run(device_choice.REPRODUCE_WORKLOADS, probe=probe,
                                        cuda_available=False)
    assert none.device == "cpu" and none.reason == "no CUDA device"
    with pytest.raises(ValueError, match="at least one workload"):
        device_choice.choose_for_run(())


def test_the_verdict_is_remembered_per_machine_and_workload(cache):
    calls: list = []
    first = choose_device("distillation", probe=_stub({"cpu": 1.0, "cuda": 4.0}, calls),
                          cuda_available=True)
    again = choose_device("distillation", probe=_stub({"cpu": 99.0, "cuda": 0.1}, calls),
                          cuda_available=True)
    assert again == first and len(calls) == 2  # probed once, then read from the store
    stored = json.loads((cache / "device-choice.json").read_text())
    assert any("distillation" in row for row in stored.values())
    other = choose_device("batched", probe=_stub({"cpu": 5.0, "cuda": 1.0}, calls),
                          cuda_available=True)
    assert other.device == "cuda" and len(calls) == 4  # another workload, its own probe


def test_a_corrupted_cache_is_measured_again(cache):
    (cache / "device-choice.json").write_text("{not json")
    choice = choose_device("fit", probe=_stub({"cpu": 1.0, "cuda": 2.0}, []), cuda_available=True)
    assert choice.device == "cpu"
    json.loads((cache / "device-choice.json").read_text())  # rewritten whole


def test_an_unknown_workload_is_refused(cache):
    with pytest.raises(ValueError, match="Unknown workload 'training'"):
        choose_device("training")


def test_explicit_devices_are_never_second_guessed(cache, monkeypatch):
    monkeypatch.setattr(device_choice, "choose_device",
                        lambda *a, **k: pytest.fail("auto was consulted for an explicit device"))
    assert resolve_device("cpu", "screen").type == "cpu"


def test_resolve_device_asks_the_workloads_choice_for_auto(cache, monkeypatch):
    asked = []

    def fake(workload="interactive", **_):
        asked.append(workload)
        return device_choice.DeviceChoice(workload, "cpu", "stub")

    monkeypatch.setattr(device_choice, "choose_device", fake)
    assert resolve_device("auto", "screen").type == "cpu"
    assert resolve_device(None).type == "cpu"
    assert resolve_device("auto", ("fit", "batched")).type == "cpu"  # every part asked
    assert asked == ["screen", "interactive", "fit", "batched"]


def test_the_probe_itself_runs_on_the_cpu():
    for workload in WORKLOADS:
        assert device_choice.measure_workload(workload, torch.device("cpu"), repeats=1) > 0


def test_bench_devices_times_every_workload_and_names_autos_pick(cache, tmp_path, capsys):
    from gem_core.cli import main
    from gem_core.cli.bench_devices import ROW_WORKLOAD

    out = tmp_path / "devices.json"
    assert main(["bench", "devices", "--datasets", "ba_shapes", "--limit", "6", "--interactive", "2",
                 "--epochs", "1", "--repeats", "1", "--no-progress", "--json", str(out)]) == 0
    bench = json.loads(out.read_text())["bench"]["devices"]
    expected = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    assert bench["devices"] == expected
    for device in expected:
        rows = bench["ms"]["ba_shapes"][device]
        # every workload row but the molecule-only screen and library, each a real positive time
        assert set(rows) == set(ROW_WORKLOAD) - {"screen", "library"}
        assert all(ms > 0 for ms in rows.values())
    assert set(bench["auto"]) == set(WORKLOADS) | {"reproduce"}
    assert set(ROW_WORKLOAD.values()) <= set(WORKLOADS)
    printed = capsys.readouterr().out
    assert "integrated_gradients" in printed and "reproduce -> " in printed
    if not torch.cuda.is_available():
        assert bench["auto"]["reproduce"]["device"] == "cpu"
        assert main(["bench", "devices", "--devices", "cpu,cuda", "--no-progress"]) == 2
        assert "no CUDA device" in capsys.readouterr().err


@requires_mutagenicity
def test_bench_devices_explains_a_library_of_molecules_in_one_call(cache, tmp_path, capsys):
    from gem_core.cli import main

    out = tmp_path / "devices.json"
    assert main(["bench", "devices", "--datasets", "mutagenicity", "--limit", "4", "--interactive",
                 "1", "--epochs", "1", "--repeats", "1", "--library", "50,5000", "--no-progress",
                 "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["bench"]["devices"]["ms"]["mutagenicity"]["cpu"]
    # 5000 is more molecules than Mutagenicity has: they are repeated to make the library
    assert rows["library_50"] > 0 and rows["library_5000"] > 0 and "screen" in rows
    assert "library_5000" in capsys.readouterr().out
    assert main(["bench", "devices", "--library", "ten", "--no-progress"]) == 2
    assert "--library takes sizes" in capsys.readouterr().err


def test_reproduce_asks_auto_about_every_workload_it_runs(cache, monkeypatch):
    """``reproduce`` fits, distils and explains whole splits on one workbench: ``auto`` is asked
    about each of these (a single slower part once made it slower than the CPU on an H200)."""
    import argparse

    from gem_core.cli.reproduce import _workers

    asked = []

    def fake(workload="interactive", **_):
        asked.append(workload)
        return device_choice.DeviceChoice(workload, "cpu", "stub")

    monkeypatch.setattr(device_choice, "choose_device", fake)
    args = argparse.Namespace(device="auto", workers=None)
    assert _workers(args, 2) >= 1
    assert asked == list(device_choice.REPRODUCE_WORKLOADS) == ["fit", "distillation", "batched"]
