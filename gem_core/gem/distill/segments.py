"""Arithmetic on flat tensors holding one segment per instance: segment pointers, per-segment
aranges, per-segment stable sorts and segment gathers, without Python loops."""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


def segment_arange(counts: Tensor) -> Tensor:
    """``cat([arange(c) for c in counts])`` without a Python loop."""
    total = int(counts.sum())
    if total == 0:
        return torch.zeros(0, dtype=torch.long, device=counts.device)
    starts = torch.cumsum(counts, 0) - counts
    return torch.arange(total, device=counts.device) - torch.repeat_interleave(starts, counts)


def np_segment_arange(counts: np.ndarray) -> np.ndarray:
    """:func:`segment_arange` for numpy arrays."""
    total = int(counts.sum())
    return np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)


def _np_segment_order(keys: Tensor, owner: Tensor) -> Tensor:
    """:func:`_segment_order` computed by numpy (a stable lexsort; torch's sort can be very slow
    on a busy multi-threaded CPU)."""
    return torch.from_numpy(np.lexsort((keys.numpy(), owner.numpy())))


def _exclusive_cumsum(counts: Tensor) -> Tensor:
    return torch.cumsum(counts, 0) - counts


def segment_ptr(counts: Tensor) -> Tensor:
    """Segment pointers ``[0, c0, c0 + c1, …]`` (``len(counts) + 1`` entries) of segment sizes:
    segment ``i`` is ``ptr[i]:ptr[i + 1]`` of the flat tensors."""
    return torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])


def _segment_order(keys: Tensor, owner: Tensor) -> Tensor:
    """Permutation sorting pairs by (owner, key, position) — a per-instance stable sort."""
    by_key = torch.sort(keys, stable=True).indices
    by_owner = torch.sort(owner[by_key], stable=True).indices
    return by_key[by_owner]


def _gather_segments(values: Tensor, ptr: Tensor, ids: Tensor) -> Tensor:
    """Concatenate the segments ``ids`` of a flat per-pair tensor."""
    counts = ptr[1:][ids] - ptr[:-1][ids]
    return values[torch.repeat_interleave(ptr[:-1][ids], counts) + segment_arange(counts)]
