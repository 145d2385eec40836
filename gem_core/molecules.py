"""Explain a chemist's molecule: SMILES in, Mutagenicity prediction and explanation bonds out.

This is the engine side of the app's Molecule page and of ``python -m gem_core explain``:

* :func:`molecule_model` loads the Mutagenicity target GNN (and, lazily, the explainers). When
  the raw dataset is present it goes through the shared :class:`~gem_core.pipeline.Workbench`;
  when it is absent (:class:`~gem_core.datasets.DataUnavailableError`) the target is read straight
  from its checkpoint (cached or shipped in ``assets/targets/``), which records its own shapes,
  and Gem from a fitted checkpoint for that target. Methods that need training data
  (PGExplainer, fitting Gem) then raise :class:`ModelUnavailableError`.
* :func:`explain_molecules` predicts and explains many molecules in one batch per method.
* :func:`explain_smiles` is the one-molecule flow with the CLI's JSON shape::

    {"smiles": ..., "prediction": {"label": "mutagen" | "nonmutagen", "probability": p},
     "explanation": {"bonds": [[i, j], ...], "scores": [...]}}

  Bonds are atom-index pairs ``i < j`` numbered like ``Chem.AddHs(Chem.MolFromSmiles(smiles))``,
  best first, ``K`` of them (fewer when the molecule has fewer bonds); ``probability`` is the
  model's probability of the predicted label (class 0 = mutagen, 1 = nonmutagen).

Bad input raises :class:`~gem_core.chem.MoleculeError` (a ``ValueError``) with a message meant
for the user; the CLI turns it into exit status 2, the app into an error box.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch
from torch import Tensor

from .chem import MoleculeError, MoleculeInstance, fragment_smarts, smiles_to_instance
from .config import check_k, get_spec
from .datasets import MUTAGENICITY_CLASSES, DataUnavailableError
from .device import resolve_device
from .evaluate import topk_mask
from .instances import Instance, collate
from .progress import ProgressFn, report, scaled

DATASET = "mutagenicity"
CLASS_NAMES: tuple[str, ...] = MUTAGENICITY_CLASSES  # class 0 = mutagen, 1 = nonmutagen

__all__ = [
    "DATASET", "CLASS_NAMES", "ModelUnavailableError", "MoleculeModel", "MoleculeExplanation",
    "molecule_model", "target_checkpoint_available", "forget_explainer", "explain_molecules",
    "explain_smiles", "ranked_bonds", "default_k",
]


class ModelUnavailableError(ValueError):
    """The Mutagenicity target or an explainer cannot be loaded (no checkpoint, no data)."""


def default_k() -> int:
    """The paper's default K for Mutagenicity (from the config table)."""
    return get_spec(DATASET).default_k


# ----------------------------------------------------------------------------- the model

class MoleculeModel:
    """The Mutagenicity target GNN plus its explainers, usable with or without the raw dataset.

    The target comes from its checkpoint (no data needed). Gem comes from a fitted checkpoint
    for that target when one exists; fitting Gem or PGExplainer needs the raw data and goes
    through the shared :class:`~gem_core.pipeline.Workbench`.

    Args:
        target: the trained target (:class:`~gem_core.targets.TrainedTarget`).
        device: torch device the black box runs on.
    """

    def __init__(self, target, device: torch.device):
        self.target = target
        self.device = device
        self._black_box = None
        self._workbench: Any = None
        self._data_checked = False
        self._explainers: dict[str, Any] = {}
        self._lock = threading.RLock()

    @property
    def black_box(self):
        if self._black_box is None:
            self._black_box = self.target.black_box(self.device)
        return self._black_box

    def workbench(self):
        """The dataset's workbench when the raw data is available, else None (checked once)."""
        with self._lock:
            if not self._data_checked:
                from .pipeline import workbench

                wb = workbench(DATASET, str(self.device))
                try:
                    wb.dataset  # noqa: B018 - loads, or fails fast when the raw files are missing
                    self._workbench = wb
                except DataUnavailableError:
                    self._workbench = None
                self._data_checked = True
            return self._workbench

    @torch.no_grad()
    def predict_proba(self, instances: Sequence[Instance],
                      pair_masks: Optional[Sequence[Tensor]] = None) -> Tensor:
        """Class probabilities ``[N, 2]`` of the target (optionally keeping only some pairs)."""
        logits = self.black_box(collate(list(instances), pair_masks))
        return torch.softmax(logits.float(), dim=-1).cpu()

    # ---- explainers
    def _gem_checkpoints(self) -> list[Path]:
        from .store import ASSETS_DIR, cache_dir

        folder = cache_dir() / "explainers"
        found = sorted(folder.glob(f"{DATASET}-*.pt"), key=lambda p: p.stat().st_mtime,
                       reverse=True) if folder.is_dir() else []
        return found + [ASSETS_DIR / "explainers" / f"{DATASET}.pt"]

    def _load_fitted_gem(self):
        """Gem from a checkpoint fitted for this target, or None."""
        from .explainer import GemExplainer
        from .pipeline import EXPLAINER_KIND
        from .store import ArtifactError, load_torch

        for path in self._gem_checkpoints():
            if not path.exists():
                continue
            try:
                state = load_torch(path, kind=EXPLAINER_KIND)
            except ArtifactError:
                continue
            meta = state.get("meta", {})
            if meta.get("dataset") == DATASET and meta.get("target") == self.target.digest:
                return GemExplainer.from_state(state, device=self.device)
        return None

    def is_ready(self, method: str) -> bool:
        """Whether ``method`` can explain right now without a (slow) fit."""
        from .pipeline import check_method

        method = check_method(method)
        if method in self._explainers or method in ("random", "gnnexplainer", "distilled"):
            return True
        if method == "gem":
            with self._lock:
                gem = self._load_fitted_gem()
                if gem is not None:
                    self._explainers["gem"] = gem
                return gem is not None
        return False  # pgexplainer: trained in memory on first use

    def forget(self, method: Optional[str] = None) -> None:
        """Drop cached explainers (e.g. after Gem was refitted elsewhere)."""
        with self._lock:
            if method is None:
                self._explainers.clear()
            else:
                self._explainers.pop(method, None)

    def _needs_data(self, what: str):
        wb = self.workbench()
        if wb is None:
            raise ModelUnavailableError(
                f"{what} needs the raw Mutagenicity data, which is missing: set GEM_DATA_ROOT to "
                "a folder holding Mutagenicity/raw/Mutagenicity_*.txt (or ship "
                "assets/explainers/mutagenicity.pt for Gem).")
        return wb

    def explainer(self, method: str, progress: Optional[ProgressFn] = None):
        """The explainer for ``method`` (Gem / PGExplainer fitted on first use, needing data)."""
        from .pipeline import check_method

        method = check_method(method)
        with self._lock:
            if method in self._explainers:
                return self._explainers[method]
            if method == "gem":
                exp = self._load_fitted_gem()
                if exp is None:
                    exp = self._needs_data("Fitting Gem").explainer("gem", progress)
            elif method == "pgexplainer":
                exp = self._needs_data("PGExplainer (trained on Mutagenicity graphs)").explainer(
                    "pgexplainer", progress)
            elif method == "gnnexplainer":
                from .baselines import GNNExplainerBaseline

                exp = GNNExplainerBaseline(self.target.model, "graph", device=str(self.device))
            elif method == "distilled":
                from .pipeline import DistilledExplainer

                exp = DistilledExplainer(self.black_box, get_spec(DATASET).connected,
                                         device=self.device)
            else:
                from .baselines import RandomExplainer

                exp = RandomExplainer(seed=0)
            self._explainers[method] = exp
            return exp

    def explain(self, method: str, instances: Sequence[Instance],
                progress: Optional[ProgressFn] = None) -> tuple[list[Tensor], float]:
        """Scores (one per pair) of ``method`` for the instances, and ms per instance."""
        exp = self.explainer(method, scaled(progress, 0.0, 0.5))
        instances = list(instances)
        start = time.perf_counter()
        scores = exp.explain(instances)
        ms = 1000.0 * (time.perf_counter() - start) / max(len(instances), 1)
        report(progress, 1.0, f"{method} explained")
        return [torch.as_tensor(s).detach().float().cpu() for s in scores], ms


def _load_target_checkpoint():
    """The Mutagenicity target from its checkpoint alone (cache first, then shipped asset).

    Returns None when there is no checkpoint at all.
    """
    from .config import TargetConfig
    from .store import ArtifactError, file_digest, load_torch
    from .targets import (TARGET_KIND, TargetMetrics, TrainedTarget, build_model,
                          cached_target_path, shipped_target_path)

    for path in (cached_target_path(DATASET), shipped_target_path(DATASET)):
        if not path.exists():
            continue
        try:
            state = load_torch(path, kind=TARGET_KIND)
            if state.get("dataset") != DATASET:
                continue
            spec = get_spec(DATASET)
            if int(state["num_classes"]) != spec.num_classes:
                continue
            cfg = TargetConfig(**state["config"])
            # same architecture as targets.load_target, with the shapes the checkpoint records
            model = build_model(spec, int(state["in_channels"]), cfg)
            model.load_state_dict(state["state_dict"])
            metrics = TargetMetrics(**state["metrics"])
        except (ArtifactError, KeyError, TypeError, RuntimeError):
            continue  # like get_target: a bad file is skipped
        return TrainedTarget(model.eval(), metrics, DATASET, file_digest(path), Path(path))
    return None


def target_checkpoint_available() -> bool:
    """Whether the Mutagenicity target loads from a checkpoint (no training needed)."""
    from .targets import cached_target_path, shipped_target_path

    with _MODELS_LOCK:
        if _MODELS:
            return True
    return any(p.exists() for p in (cached_target_path(DATASET), shipped_target_path(DATASET)))


_MODELS: dict[str, MoleculeModel] = {}
_MODELS_LOCK = threading.Lock()


def molecule_model(device: str = "auto", progress: Optional[ProgressFn] = None) -> MoleculeModel:
    """The process-wide :class:`MoleculeModel` for ``device`` (loaded on first call).

    The target comes from its checkpoint when there is one (no data needed); otherwise it is
    trained on the raw data (minutes).

    Raises:
        ModelUnavailableError: no usable checkpoint and no raw data to train one.
    """
    dev = resolve_device(device)
    key = str(dev)
    with _MODELS_LOCK:
        if key in _MODELS:
            return _MODELS[key]
        target = _load_target_checkpoint()
        model = None
        if target is None:
            from .pipeline import workbench

            wb = workbench(DATASET, key)
            try:
                wb.dataset  # noqa: B018
            except DataUnavailableError as exc:
                raise ModelUnavailableError(
                    "No Mutagenicity target model is available: no checkpoint in the cache or in "
                    "assets/targets/mutagenicity.pt, and the raw data to train one is missing "
                    f"({exc})") from exc
            model = MoleculeModel(wb.target(progress), dev)
            model._workbench, model._data_checked = wb, True
        else:
            model = MoleculeModel(target, dev)
        _MODELS[key] = model
        return model


def forget_explainer(method: Optional[str] = None) -> None:
    """Drop a cached explainer from every loaded :class:`MoleculeModel` (e.g. after a refit)."""
    with _MODELS_LOCK:
        models = list(_MODELS.values())
    for model in models:
        model.forget(method)


# ----------------------------------------------------------------------------- explanations

def ranked_bonds(pairs: Tensor, scores: Tensor, k: int) -> tuple[list[list[int]], list[float]]:
    """The top-``k`` pairs as ``[[i, j], ...]``, best first (ties: lower pair index), and scores."""
    k = check_k(int(k))
    s = torch.as_tensor(scores).detach().double().cpu()
    mask = topk_mask(s, k)
    chosen = torch.nonzero(mask).view(-1)
    order = chosen[torch.sort(s[chosen], descending=True, stable=True).indices]
    bonds = [[int(pairs[0, j]), int(pairs[1, j])] for j in order.tolist()]
    return bonds, [float(s[j]) for j in order.tolist()]


@dataclass
class MoleculeExplanation:
    """Prediction and explanations of one molecule.

    Attributes:
        molecule: the parsed molecule (graph instance + RDKit molecule, same numbering).
        probabilities: class probabilities of the target on the whole molecule.
        scores: method -> one score per bond (in ``molecule.instance.pairs`` order).
        ms_per_instance: method -> explain time per molecule of the batch it was explained in.
        errors: method -> message, for methods that could not run.
    """

    molecule: MoleculeInstance
    probabilities: list[float]
    scores: dict[str, Tensor] = field(default_factory=dict)
    ms_per_instance: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> int:
        return int(max(range(len(self.probabilities)), key=lambda c: self.probabilities[c]))

    @property
    def label_name(self) -> str:
        return CLASS_NAMES[self.label]

    @property
    def probability(self) -> float:
        """Probability of the predicted label."""
        return float(self.probabilities[self.label])

    def bonds(self, method: str, k: int) -> tuple[list[list[int]], list[float]]:
        """Top-``k`` explanation bonds of ``method``, best first, with their scores."""
        return ranked_bonds(self.molecule.instance.pairs, self.scores[method], k)

    def mask(self, method: str, k: int) -> Tensor:
        return topk_mask(self.scores[method], check_k(int(k)))

    def fragment(self, method: str, k: int) -> str:
        """The explanation bonds as a SMARTS-like fragment."""
        bonds, _ = self.bonds(method, k)
        return fragment_smarts(self.molecule.mol, [tuple(b) for b in bonds])

    def to_json(self, method: str, k: int) -> dict[str, Any]:
        """The CLI's JSON shape for one method."""
        bonds, scores = self.bonds(method, k)
        return {
            "smiles": self.molecule.input_smiles,
            "prediction": {"label": self.label_name, "probability": self.probability},
            "explanation": {"bonds": bonds, "scores": scores},
        }


def explain_molecules(molecules: Sequence[MoleculeInstance], methods: Sequence[str] = ("gem",),
                      device: str = "auto", progress: Optional[ProgressFn] = None,
                      strict: bool = True, model: Optional[MoleculeModel] = None,
                      ) -> list[MoleculeExplanation]:
    """Predict and explain parsed molecules, one batched call per method.

    Args:
        molecules: from :func:`~gem_core.chem.smiles_to_instance`.
        methods: explainer names (see :data:`gem_core.pipeline.METHODS`).
        device: ``auto``, ``cpu`` or ``cuda``.
        progress: optional ``progress(fraction, message)`` callback.
        strict: raise when a method cannot run; otherwise record the message in ``errors``.
        model: an already loaded :class:`MoleculeModel` (default: :func:`molecule_model`).
    """
    from .pipeline import check_method

    methods = [check_method(m) for m in methods]
    molecules = list(molecules)
    if not molecules:
        return []
    model = model or molecule_model(device)
    instances = [m.instance for m in molecules]
    proba = model.predict_proba(instances)
    out = [MoleculeExplanation(m, [float(p) for p in row]) for m, row in zip(molecules, proba)]
    for i, method in enumerate(methods):
        part = scaled(progress, i / len(methods), (i + 1) / len(methods))
        report(part, 0.0, f"explaining with {method}")
        try:
            scores, ms = model.explain(method, instances, part)
        except (ModelUnavailableError, DataUnavailableError) as exc:
            if strict:
                raise
            for res in out:
                res.errors[method] = str(exc)
            continue
        for res, s in zip(out, scores):
            res.scores[method] = s
            res.ms_per_instance[method] = ms
    report(progress, 1.0, "done")
    return out


def explain_smiles(smiles: str, k: Optional[int] = None, method: str = "gem", device: str = "auto",
                   progress: Optional[ProgressFn] = None) -> dict[str, Any]:
    """Predict a SMILES with the Mutagenicity target and explain it with ``method``.

    Returns ``{"smiles", "prediction": {"label", "probability"}, "explanation": {"bonds",
    "scores"}}`` (see the module docstring). ``k`` defaults to the paper's default K for
    Mutagenicity.

    Raises:
        MoleculeError: empty, unparsable or unsupported input (message for the user).
        ModelUnavailableError: no target model / explainer can be loaded.
        ValueError: bad K or method.
    """
    from .pipeline import check_method

    method = check_method(method)
    k = default_k() if k is None else check_k(k)
    mol = smiles_to_instance(smiles)
    result = explain_molecules([mol], [method], device=device, progress=progress)[0]
    return result.to_json(method, k)


__all__ += ["MoleculeError"]
