"""``--device auto`` picks, per workload, the device a probe measured faster, and never a slower one."""
from __future__ import annotations

import json

import pytest
import torch

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


def test_cuda_is_chosen_only_where_it_was_faster_and_a_tie_stays_on_the_cpu(cache):
    assert choose_device("screen", probe=_stub({"cpu": 8.0, "cuda": 1.0}, []),
                         cuda_available=True).device == "cuda"
    assert choose_device("fit", probe=_stub({"cpu": 3.0, "cuda": 3.0}, []),
                         cuda_available=True).device == "cpu"


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
    assert asked == ["screen", "interactive"]


def test_the_probe_itself_runs_on_the_cpu():
    for workload in WORKLOADS:
        assert device_choice.measure_workload(workload, torch.device("cpu"), repeats=1) > 0
