"""Class probabilities of a target model (seen as a black box) on instances, optionally with only
some of each instance's pairs kept: the one forward-pass helper every layer above uses."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

import torch
from torch import Tensor

from gem_core.data.instances import Instance, collate


@torch.no_grad()
def predict_proba(black_box, instances: Sequence[Instance],
                  pair_masks: Optional[Sequence[Tensor]] = None,
                  batch_size: Optional[int] = None) -> Tensor:
    """Class probabilities ``[N, C]`` (CPU, float64) of the black box on the instances.

    ``pair_masks`` keeps only the selected pairs of each instance (others deleted).
    One forward pass, or one per chunk of ``batch_size`` instances.
    """
    n = len(instances)
    if n == 0:
        raise ValueError("no instances to predict")
    step = n if not batch_size else int(batch_size)
    out = []
    for start in range(0, n, step):
        chunk = instances[start:start + step]
        masks = None if pair_masks is None else pair_masks[start:start + step]
        logits = black_box(collate(chunk, masks))
        out.append(torch.softmax(logits.detach().to("cpu", torch.float64), dim=-1))
    return torch.cat(out, dim=0)
