"""Device and thread selection: ``auto`` is the device measured faster for the workload
(:mod:`gem_core.runtime.device_choice`), and a configurable CPU thread count."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

import torch


def resolve_device(
    device: str | torch.device | None = "auto", workload: str | tuple[str, ...] = "interactive"
) -> torch.device:
    """``"auto"``/None → the device measured faster for ``workload`` on this machine (CPU without
    CUDA; see :func:`~gem_core.runtime.device_choice.choose_device`; a tuple of workloads: one
    device for all of them, :func:`~gem_core.runtime.device_choice.choose_for_run`); ``"cuda"``
    without a GPU is a clear error; an explicit device is used as given."""
    if device is None or str(device) == "auto":
        from gem_core.runtime import device_choice

        if isinstance(workload, tuple):
            return torch.device(device_choice.choose_for_run(workload).device)
        return torch.device(device_choice.choose_device(workload).device)
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("CUDA was requested but no CUDA device is available; use 'cpu' or 'auto'.")
    return dev


def configure_threads(num_threads: int | None = None) -> int:
    """Set the CPU thread count from the argument or ``$GEM_NUM_THREADS`` (default: keep).

    Applies to torch and to the BLAS libraries numpy and scipy loaded (OpenBLAS, through
    threadpoolctl): the graph layouts' eigendecompositions took 0.5–1.5 s with two OpenBLAS
    threads on two busy cores, 12 ms with one.
    """
    value = num_threads if num_threads is not None else os.environ.get("GEM_NUM_THREADS")
    if value is not None:
        n = int(value)
        if n < 1:
            raise ValueError(f"thread count must be >= 1, got {n}")
        torch.set_num_threads(n)
        import scipy.linalg  # noqa: F401  (loads scipy's own BLAS, so the limit reaches it too)
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=n, user_api="blas")
    return torch.get_num_threads()


@contextmanager
def deterministic_algorithms(device: torch.device | str | None = None) -> Iterator[None]:
    """Run the block with PyTorch's deterministic kernels, so training on CUDA is repeatable.

    CUDA's scatter/gather backward passes add with atomics, in an order that changes from run to
    run: the same seed then trains different weights (seen on an H100: ``GemAutoEncoder.fit``
    twice gave different state dicts). Inside this block PyTorch picks its deterministic
    kernels; ops that have none only warn. cuBLAS needs a fixed workspace for that
    (``CUBLAS_WORKSPACE_CONFIG``, set here unless the user set it). On CPU, where the kernels are
    deterministic already, nothing changes. The previous mode is restored on exit.
    """
    if device is not None and torch.device(device).type != "cuda":
        yield
        return
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
