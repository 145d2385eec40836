"""Device and thread selection: CUDA when present, a configurable CPU thread count otherwise."""
from __future__ import annotations

import os

import torch


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """``"auto"``/None → CUDA if available else CPU; ``"cuda"`` without a GPU is a clear error."""
    if device is None or str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
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
