"""Arithmetic on flat tensors holding one segment per instance: per-segment stable sorts and
segment gathers, without Python loops (segment pointers, aranges and ranges live with the
packing, :mod:`gem_core.data.packed`)."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from gem_core.data.packed import segment_ranges


def _np_segment_order(keys: Tensor, owner: Tensor) -> Tensor:
    """:func:`_segment_order` computed by numpy (a stable lexsort; torch's sort can be very slow
    on a busy multi-threaded CPU)."""
    return torch.from_numpy(np.lexsort((keys.numpy(), owner.numpy())))


def _segment_order(keys: Tensor, owner: Tensor) -> Tensor:
    """Permutation sorting pairs by (owner, key, position) — a per-instance stable sort."""
    by_key = torch.sort(keys, stable=True).indices
    by_owner = torch.sort(owner[by_key], stable=True).indices
    return by_key[by_owner]


def _gather_segments(values: Tensor, ptr: Tensor, ids: Tensor) -> Tensor:
    """Concatenate the segments ``ids`` of a flat per-pair tensor."""
    return values[segment_ranges(ptr[:-1][ids], ptr[1:][ids] - ptr[:-1][ids])]
