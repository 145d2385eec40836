"""The distillation of a dataset split, cached in the artifact store: its file (keyed by
everything that determines it), loading it, and :func:`distill_dataset` (compute once, then
load)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional, Union

import torch

from gem_core.data.config import dataset_cache_dir
from gem_core.gem.distill.conventions import TIE_TOL, check_label_source
from gem_core.gem.distill.engine import distill
from gem_core.gem.distill.result import DISTILL_KIND, DISTILL_VERSION, Distillation
from gem_core.runtime.progress import ProgressFn, report
from gem_core.runtime.store import config_key, load_torch, save_torch

if TYPE_CHECKING:  # pragma: no cover
    from gem_core.data.datasets import GemDataset
    from gem_core.models.targets import TrainedTarget


def distillation_path(
    dataset: str,
    split: str,
    target_digest: str,
    label_source: str,
    connected: bool,
    tol: float = TIE_TOL,
) -> Path:
    """Cache file of a distillation, keyed by everything that determines it."""
    key = config_key(
        dataset=dataset,
        split=split,
        target=target_digest,
        label_source=label_source,
        connected=bool(connected),
        tol=tol,
        version=DISTILL_VERSION,
    )
    return (
        dataset_cache_dir(dataset) / "distillations" / f"{dataset}-{split}-{label_source}-{key}.pt"
    )


def load_distillation(
    ds: "GemDataset",
    target: "TrainedTarget",
    split: str = "train",
    label_source: str = "true",  # checked: "true" or "predicted"
    connected: Optional[bool] = None,
) -> Optional[Distillation]:
    """The cached distillation of a split, or None when absent, corrupted or outdated."""
    from gem_core.runtime.store import ArtifactError

    check_label_source(label_source)
    conn = ds.spec.connected if connected is None else bool(connected)
    path = distillation_path(ds.name, split, target.digest, label_source, conn)
    if not path.exists():
        return None
    try:
        state = load_torch(path, kind=DISTILL_KIND)
        if state.get("version") != DISTILL_VERSION:
            return None
        return Distillation.from_state(state)
    except (ArtifactError, KeyError, TypeError):
        return None


def distill_dataset(
    ds: "GemDataset",
    target: "TrainedTarget",
    split: str = "train",
    label_source: str = "true",  # checked: "true" or "predicted"
    connected: Optional[bool] = None,
    device: Union[str, torch.device, None] = "auto",
    max_edges_per_forward: Optional[int] = None,
    refresh: bool = False,
    progress: Optional[ProgressFn] = None,
) -> Distillation:
    """Distil one split of a dataset, cached in the artifact store.

    The cache key holds the dataset, the target checkpoint digest, the split, the label source
    and the connectivity rule (default: ``ds.spec.connected``). A corrupted or foreign cache file
    is recomputed; ``refresh=True`` always recomputes.
    """
    from gem_core.data.instances import split_instances

    check_label_source(label_source)
    conn = ds.spec.connected if connected is None else bool(connected)
    if not refresh:
        found = load_distillation(ds, target, split, label_source, conn)
        if found is not None:
            report(progress, 1.0, "cached")
            return found
    instances = split_instances(ds, split)
    result = distill(
        instances,
        target.black_box(device),
        connected=conn,
        label_source=label_source,
        device=device,
        max_edges_per_forward=max_edges_per_forward,
        progress=progress,
    )
    result.dataset = ds.name
    save_torch(
        result.to_state(), distillation_path(ds.name, split, target.digest, label_source, conn)
    )
    return result
