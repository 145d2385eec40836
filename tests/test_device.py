"""Device and thread selection."""
from __future__ import annotations

import pytest
import torch
from threadpoolctl import threadpool_info, threadpool_limits

from gem_core.runtime.device import configure_threads, resolve_device


def test_auto_device_and_missing_cuda_message():
    from gem_core.runtime.device_choice import choose_device

    # auto is the device measured faster for the workload (tests/test_device_choice.py), the CPU
    # without CUDA
    assert resolve_device("auto").type == choose_device("interactive").device
    if not torch.cuda.is_available():
        assert resolve_device("auto").type == "cpu"
    assert resolve_device("cpu") == torch.device("cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device"):
            resolve_device("cuda")


def test_thread_count_reaches_torch_and_every_blas(monkeypatch):
    before = torch.get_num_threads()
    with threadpool_limits(limits=2, user_api="blas"):  # restores the BLAS pools afterwards
        monkeypatch.setenv("GEM_NUM_THREADS", "1")
        try:
            assert configure_threads() == 1
            blas = [i for i in threadpool_info() if i["user_api"] == "blas"]
            assert blas and all(i["num_threads"] == 1 for i in blas)
            with pytest.raises(ValueError, match=">= 1"):
                configure_threads(0)
        finally:
            torch.set_num_threads(before)


def test_deterministic_algorithms_is_scoped_and_a_no_op_on_cpu():
    from gem_core.runtime.device import deterministic_algorithms

    before = torch.are_deterministic_algorithms_enabled()
    with deterministic_algorithms("cpu"):
        assert torch.are_deterministic_algorithms_enabled() == before
    with deterministic_algorithms("cuda"):  # only flips PyTorch's mode: no GPU needed
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.is_deterministic_algorithms_warn_only_enabled()
    assert torch.are_deterministic_algorithms_enabled() == before
