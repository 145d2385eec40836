"""A molecule against the training molecules of the model that explains it.

:func:`nearest_training` gives the closest training molecules of a workbench's model (Tanimoto
of Morgan fingerprints, :mod:`gem_core.chemistry.neighbours`) and whether the molecule lies
inside the model's applicability domain; :func:`domain_record` is the model's own held-out
record on each side of that line (its test molecules: how often it was right, or how far off,
inside and outside), so that a front-end states what "outside" has cost on molecules it never
saw rather than a general rule. Both are built once per workbench and shared (thread-safe).
Without the training data (a workbench opened from checkpoints only) there is nothing to compare
with: None.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from rdkit import Chem

from gem_core.chemistry.convert import instance_to_mol
from gem_core.chemistry.dataset_table import restore_dropped_charges
from gem_core.chemistry.neighbours import DOMAIN_SIMILARITY, Neighbour, TrainingIndex
from gem_core.data.config import dataset_cache_dir
from gem_core.data.datasets import DataUnavailableError
from gem_core.runtime.store import ArtifactError, load_torch, save_torch

__all__ = [
    "SIMILARITY_EDGES",
    "DomainRecord",
    "closest_similarities",
    "NearestTraining",
    "domain_record",
    "nearest_training",
    "similarity_bins",
]

#: the edges of :func:`similarity_bins` (closest-training similarity)
SIMILARITY_EDGES = (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0)

_LOCK = threading.Lock()
_INDEXES: "weakref.WeakKeyDictionary[Any, TrainingIndex]" = weakref.WeakKeyDictionary()
_RECORDS: "weakref.WeakKeyDictionary[Any, DomainRecord]" = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class NearestTraining:
    """A molecule's ``neighbours`` among the ``training`` molecules (most similar first) and
    whether it is ``inside`` the domain (closest similarity ≥ ``threshold``)."""

    neighbours: tuple[Neighbour, ...]
    training: int
    threshold: float

    @property
    def closest(self) -> float:
        return self.neighbours[0].similarity if self.neighbours else 0.0

    @property
    def inside(self) -> bool:
        return self.closest >= self.threshold

    def to_json(self) -> dict[str, Any]:
        return {
            "inside_domain": self.inside,
            "threshold": self.threshold,
            "training_molecules": self.training,
            "neighbours": [
                {"similarity": round(n.similarity, 4), "smiles": n.smiles, "label": n.label}
                for n in self.neighbours
            ],
        }


@dataclass(frozen=True)
class DomainRecord:
    """The model on its test molecules, inside and outside the domain: ``n_inside`` /
    ``n_outside`` molecules; a classifier's share predicted right (``right_*``), a regressor's
    root-mean-square error (``rmse_*``); None where a side has no molecule."""

    threshold: float
    n_inside: int
    n_outside: int
    right_inside: Optional[float] = None
    right_outside: Optional[float] = None
    rmse_inside: Optional[float] = None
    rmse_outside: Optional[float] = None


def _labels(wb: Any, instances: Sequence[Any]) -> list[str]:
    if wb.regression:
        return [f"{float(inst.y):.3g}" for inst in instances]
    names = wb.spec.class_names
    return [str(names[int(inst.y)]) if names else str(int(inst.y)) for inst in instances]


def _mols(wb: Any, instances: Sequence[Any]) -> list[Chem.Mol]:
    """The instances as molecules, with the charges a data set's file dropped put back (so a
    neighbour's SMILES reads as a chemist writes it; the fingerprint is the same)."""
    symbols = wb.dataset.atom_symbols
    return [restore_dropped_charges(instance_to_mol(inst, symbols)) for inst in instances]


#: the file of a model's training index, in its data set's cache folder
INDEX_FILE = "{stem}-training-index.pt"
_INDEX_KIND = "training_index"


def _index_path(wb: Any) -> Path:
    return dataset_cache_dir(wb.name) / INDEX_FILE.format(stem=wb.name)


def _index(wb: Any) -> Optional[TrainingIndex]:
    """The training fingerprints of ``wb`` (made once per model and kept in its cache folder,
    so that a cold ``explain`` reads a file instead of the data set); None without training
    data and no such file."""
    with _LOCK:
        held = _INDEXES.get(wb)
    if held is not None:
        return held
    path = _index_path(wb)
    try:
        built = TrainingIndex.from_state(load_torch(path, kind=_INDEX_KIND))
    except (ArtifactError, KeyError, ValueError):  # none yet, or not ours: made again
        try:
            train = wb.instances("train")
        except DataUnavailableError:
            return None
        built = TrainingIndex.of_molecules(_mols(wb, train), _labels(wb, train))
        save_torch({"kind": _INDEX_KIND, **built.state()}, path)
    with _LOCK:
        return _INDEXES.setdefault(wb, built)


def nearest_training(wb: Any, mol: Chem.Mol, n: int = 3) -> Optional[NearestTraining]:
    """The ``n`` training molecules of ``wb``'s model closest to ``mol`` (an RDKit molecule,
    e.g. :attr:`MoleculeInstance.mol`); None when the training data is not here."""
    index = _index(wb)
    if index is None:
        return None
    return NearestTraining(tuple(index.nearest(mol, n)), len(index), DOMAIN_SIMILARITY)


def closest_similarities(wb: Any, mols: Sequence[Chem.Mol]) -> Optional[list[float]]:
    """The similarity of each molecule's closest training molecule of ``wb``'s model (a
    screen's ``closest_training`` column); None when the training data is not here."""
    index = _index(wb)
    return None if index is None else index.closest_many(mols)


def domain_record(wb: Any) -> Optional[DomainRecord]:
    """How ``wb``'s model did on its test molecules inside and outside the domain (built once);
    None without the data."""
    with _LOCK:
        held = _RECORDS.get(wb)
    if held is not None:
        return held
    index = _index(wb)
    if index is None:
        return None
    closest, predicted, measured = _scored(wb, "test")
    sides: dict[bool, list[tuple[Any, Any]]] = {True: [], False: []}
    for c, p, y in zip(closest, predicted, measured):
        sides[c >= DOMAIN_SIMILARITY].append((p, y))
    kind = "rmse" if wb.regression else "right"
    values = {
        f"{kind}_{k}": _measure(wb, sides[v]) for k, v in (("inside", True), ("outside", False))
    }
    record = DomainRecord(DOMAIN_SIMILARITY, len(sides[True]), len(sides[False]), **values)
    with _LOCK:
        return _RECORDS.setdefault(wb, record)


def _scored(wb: Any, split: str) -> tuple[list[float], list[Any], list[Any]]:
    """Closest-training similarity, prediction and measured outcome of each molecule of
    ``split``."""
    index = _index(wb)
    if index is None:
        raise DataUnavailableError(f"{wb.name}: its training molecules are not here")
    instances = wb.instances(split)
    closest = [index.closest(m) for m in _mols(wb, instances)]
    return closest, wb.predicted(instances).tolist(), [inst.y for inst in instances]


def _measure(wb: Any, pairs: Sequence[tuple[Any, Any]]) -> Optional[float]:
    """Of ``(predicted, measured)`` pairs: a classifier's share right, a regressor's RMSE;
    None for no pair."""
    if not pairs:
        return None
    if wb.regression:
        return math.sqrt(sum((float(p) - float(y)) ** 2 for p, y in pairs) / len(pairs))
    return sum(int(p) == int(y) for p, y in pairs) / len(pairs)


def similarity_bins(
    wb: Any, split: str = "val", edges: Sequence[float] = SIMILARITY_EDGES
) -> list[dict[str, Any]]:
    """``wb``'s model on the molecules of ``split`` grouped by their closest training
    similarity (``[low, high)``, the last bin closed): per bin ``molecules`` and the share
    predicted ``right`` (a classifier) or the ``rmse`` (a regressor; None for an empty bin).
    The evidence for :data:`~gem_core.chemistry.neighbours.DOMAIN_SIMILARITY` (read on
    ``val``; ``test`` only reports)."""
    closest, predicted, measured = _scored(wb, split)
    rows = []
    for i, (low, high) in enumerate(zip(edges[:-1], edges[1:])):
        last = i == len(edges) - 2
        members = [
            (p, y)
            for c, p, y in zip(closest, predicted, measured)
            if low <= c < high or (last and c == high)
        ]
        row: dict[str, Any] = {"low": low, "high": high, "molecules": len(members)}
        row["rmse" if wb.regression else "right"] = _measure(wb, members)
        rows.append(row)
    return rows
