"""A session over one dataset: its data, its target model and the explainers of the registry.

:class:`Workbench` is what the CLI, ``reproduce``, ``tune`` and the app ask for a dataset's
target, instances, predictions and explanations. It loads lazily, keeps fitted explainers in
memory, saves and reloads the ones that can be saved (Gem) through the artifact store, and is
thread-safe (the app shares one workbench per dataset and device across sessions).

Without the raw data (``$GEM_DATA_ROOT`` unset, files missing) a workbench still opens from
checkpoints: the target from its cached or shipped checkpoint, Gem from a fitted checkpoint for
that target. What needs data (fitting, the dataset's instances) then raises
:class:`ModelUnavailableError` with a message meant for the user.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from pathlib import Path
from typing import Any, Optional, Sequence

from torch import Tensor

from gem_core.data.config import (
    DEFAULT_TARGET,
    DatasetSpec,
    dataset_cache_dir,
    get_spec,
    target_config,
    target_spec,
)
from gem_core.data.datasets import DataUnavailableError, GemDataset, load_dataset
from gem_core.data.instances import Instance, dataset_instances, split_instances
from gem_core.explainers import (
    Explainer,
    ExplainerContext,
    Explanation,
    check_method,
    method_spec,
    title,
)
from gem_core.gem.presets import dataset_settings
from gem_core.gem.settings import GemSettings
from gem_core.models.targets import (
    GNNBlackBox,
    TrainedTarget,
    get_target,
    load_saved_target,
    target_filename,
)
from gem_core.runtime.device import resolve_device
from gem_core.runtime.progress import ProgressFn, report, scaled
from gem_core.runtime.store import ASSETS_DIR, ArtifactError, load_torch, save_torch

SPLITS = ("train", "val", "test")
#: distillations of instances outside the splits a workbench keeps (the app's contrast nodes,
#: a what-if's edited graphs), most recently used last
DISTILL_MEMO = 256


class ModelUnavailableError(ValueError):
    """A target model or an explainer cannot be loaded here: no checkpoint and no data to fit one."""


class MethodNotApplicableError(ModelUnavailableError):
    """A method that cannot explain this model: one whose objective reads class probabilities,
    asked of a regressor. Front-ends show it like an unavailable model: one line, no fit offer."""


class Workbench:
    """Everything needed to explain one dataset's target model, loaded lazily.

    Args:
        dataset: dataset name (``ba_shapes``, ``tree_cycles``, ``mutagenicity``, ``nci1``).
        device: ``auto`` (the device measured faster, per workload), ``cpu`` or ``cuda``.
        target: which target model: ``paper`` (the paper's architecture) or, where the dataset has
            one, ``strong`` (bond-aware). Everything fitted for one target is kept apart from the
            other's (cache keys hold the target checkpoint's digest).
    """

    def __init__(self, dataset: str, device: str = "auto", target: str = DEFAULT_TARGET):
        self.spec: DatasetSpec = get_spec(dataset)
        # Gem's settings: the dataset's, with those its target chose for itself (a clear error
        # for a target the dataset lacks)
        self.gem_settings: GemSettings = dataset_settings(self.spec, target)
        self.target_name = str(target).strip().lower()
        self.device = resolve_device(device)
        self._lock = threading.RLock()
        self._dataset: Optional[GemDataset] = None
        self._data_error: Optional[DataUnavailableError] = None
        self._target: Optional[TrainedTarget] = None
        self._context: Optional[ExplainerContext] = None
        self._instances: dict[str, list[Instance]] = {}
        self._split_keys: dict[str, tuple] = {}
        self._explainers: dict[str, Explainer] = {}
        self._never_saved: set[str] = set()
        # one lock per method: explainers (PyG's in particular) are not safe to share across threads
        self._method_locks: dict[str, threading.Lock] = defaultdict(threading.Lock)
        self._memo: dict[tuple, Any] = {}  # (instances, labels) -> their Distillation
        self._memo_lock = threading.Lock()

    # ------------------------------------------------------------------ data and target
    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def dataset(self) -> GemDataset:
        """The dataset (raises :class:`DataUnavailableError` when its raw files are missing)."""
        with self._lock:
            if self._dataset is None:
                if self._data_error is not None:
                    raise self._data_error
                try:
                    self._dataset = load_dataset(self.spec.name)
                except DataUnavailableError as exc:
                    self._data_error = exc
                    raise
            return self._dataset

    def has_data(self) -> bool:
        """Whether the dataset can be loaded here (checked once)."""
        try:
            self.dataset  # noqa: B018
        except DataUnavailableError:
            return False
        return True

    def target(self, progress: Optional[ProgressFn] = None) -> TrainedTarget:
        """The target GNN: cached or shipped checkpoint, else trained on the data (and cached).

        A checkpoint is checked against the dataset's shapes: against the row's own facts when
        it has them (one-hot atoms, constant features; the data is then not loaded, a second
        of a cold ``explain --smiles``), else against the loaded data
        (:func:`~gem_core.models.targets.get_target`); without data, a checkpoint is loaded on
        its own.
        """
        with self._lock:
            if self._target is None:
                known = self.spec.known_num_features
                saved = (
                    None
                    if known is None
                    else load_saved_target(self.name, self.target_name, in_channels=known)
                )
                if saved is not None:
                    self._target = saved
                elif self.has_data():
                    self._target = get_target(
                        self.dataset,
                        device=str(self.device),
                        progress=progress,
                        name=self.target_name,
                    )
                else:
                    self._target = self._target_from_checkpoint()
            return self._target

    @property
    def label(self) -> str:
        """The dataset and, when it is not the paper's, the target: "Mutagenicity (strong)"."""
        return target_spec(self.target_name).label(self.spec.title)

    @property
    def asset_name(self) -> str:
        """File-name stem of this dataset and target: ``mutagenicity``, ``mutagenicity-strong``."""
        return target_spec(self.target_name).stem(self.name)

    def _target_from_checkpoint(self) -> TrainedTarget:
        target = load_saved_target(self.name, self.target_name)
        if target is None:
            raise ModelUnavailableError(
                f"No {self.label} target model is available: no checkpoint in the cache or in "
                f"assets/targets/{target_filename(self.name, self.target_name)}, and the raw "
                f"data to train one is missing ({self._data_error})"
            )
        return target

    @property
    def black_box(self) -> GNNBlackBox:
        """The target as a black box (instances in, logits out)."""
        return self.context.black_box

    def instances(self, split: str = "test") -> list[Instance]:
        """The explainer's instances of a split (motif nodes for node tasks, graphs otherwise)."""
        with self._lock:
            if split not in self._instances:
                self._instances[split] = split_instances(self.dataset, split)
            return self._instances[split]

    def browse_instances(self, split: str = "test") -> list[Instance]:
        """Every instance a user may pick in a split, so that each class can be shown: the
        explainer's instances first (:meth:`instances`, same positions), then, on node tasks,
        the split's other nodes (the base / tree nodes the paper does not explain), by id."""
        with self._lock:
            key = f"browse:{split}"
            if key not in self._instances:
                ds = self.dataset
                explained = set(ds.explain_split[split].tolist())
                others = sorted(int(i) for i in ds.split[split].tolist() if int(i) not in explained)
                extra = dataset_instances(ds, others) if ds.task == "node" else []
                self._instances[key] = [*self.instances(split), *extra]
            return self._instances[key]

    def predict_proba(
        self,
        instances: Sequence[Instance],
        pair_masks: Optional[Sequence[Tensor]] = None,
        max_nodes: Optional[int] = None,
    ) -> Tensor:
        """Class probabilities ``[N, C]`` of the target (optionally keeping only some pairs;
        ``max_nodes``: forwards of at most that many nodes, :func:`~gem_core.models.predict.predict_proba`)."""
        from gem_core.models.predict import predict_proba

        return predict_proba(self.black_box, list(instances), pair_masks, max_nodes=max_nodes)

    @property
    def regression(self) -> bool:
        """Whether the target is a regressor (a user's table with a numeric outcome)."""
        return self.spec.regression

    def predict_values(
        self, instances: Sequence[Instance], pair_masks: Optional[Sequence[Tensor]] = None
    ) -> Tensor:
        """A regressor's values ``[N]`` (float64) on ``instances`` (optionally keeping only some
        pairs, as :meth:`predict_proba`)."""
        from gem_core.models.predict import predict_values

        return predict_values(self.black_box, list(instances), pair_masks)

    def predicted(self, instances: Sequence[Instance]) -> Tensor:
        """The target's predictions on ``instances``: classes ``[N]`` (int64) of a classifier,
        values ``[N]`` (float64) of a regressor: what explainers are told and judged by."""
        if self.regression:
            return self.predict_values(instances)
        return self.predict_proba(instances).argmax(-1)

    # ------------------------------------------------------------------ distillation
    def distillation(
        self,
        split: str = "train",
        progress: Optional[ProgressFn] = None,
        label_source: str = "true",
    ):
        """The (cached) distillation of a split (:func:`gem_core.gem.distill.distill_dataset`)."""
        from gem_core.gem.distill import distill_dataset

        return distill_dataset(
            self.dataset,
            self.target(),
            split=split,
            device=self.device,
            label_source=label_source,
            progress=progress,
        )

    def _distill(
        self, instances: Sequence[Instance], label_source: str, progress: Optional[ProgressFn]
    ):
        """Distil ``instances``: through the split cache when they are one of the splits, else
        through this session's memo of the last :data:`DISTILL_MEMO` distillations.

        The memo is keyed by the instances and the labels the losses are taken against, so the
        true-label and predicted-label teachers share one distillation wherever the target
        predicts the true label (every BA-shapes test node): a 1,500-edge contrast node's
        distillation asks the target 1,500 times, a second or more.
        """
        split = self._split_of(instances)
        if split is not None:
            return self.distillation(split, progress, label_source)
        from dataclasses import replace

        from gem_core.gem.distill import distill

        instances = list(instances)
        labels: tuple
        if self.regression:
            labels = (
                tuple(float(inst.y) for inst in instances)
                if label_source == "true"
                else tuple(self.predict_values(instances).tolist())
            )
        elif label_source == "true" and all(inst.y >= 0 for inst in instances):
            labels = tuple(int(inst.y) for inst in instances)
        else:
            labels = tuple(self.predict_proba(instances).argmax(-1).tolist())
        key = (tuple(_content_key(inst) for inst in instances), labels)
        with self._memo_lock:
            found = self._memo.pop(key, None)
            if found is not None:
                self._memo[key] = found  # most recently used last
        if found is None:
            found = distill(
                instances,
                self.black_box,
                connected=self.spec.connected,
                label_source=label_source,
                device=self.device,
                progress=progress,
            )
            with self._memo_lock:
                self._memo[key] = found
                while len(self._memo) > DISTILL_MEMO:
                    self._memo.pop(next(iter(self._memo)))
        else:
            report(progress, 1.0, "distilled before")
        return (
            found
            if found.label_source == label_source
            else replace(found, label_source=label_source)
        )

    def _split_of(self, instances: Sequence[Instance]) -> Optional[str]:
        keys = tuple((inst.dataset, inst.index, inst.target) for inst in instances)
        for split in SPLITS:
            if split not in self._split_keys:
                self._split_keys[split] = tuple(
                    (inst.dataset, inst.index, inst.target) for inst in self.instances(split)
                )
            if self._split_keys[split] == keys:
                return split
        return None

    # ------------------------------------------------------------------ explainers
    @property
    def context(self) -> ExplainerContext:
        """What every explainer of this session may know: target, settings, device, cache."""
        with self._lock:
            if self._context is None:
                self._context = ExplainerContext(
                    self.target(),
                    self.spec,
                    self.device,
                    distiller=self._distill,
                    gem_settings=self.gem_settings,
                )
            return self._context

    def is_fitted(self, method: str) -> bool:
        """Whether ``method`` explains now without a long fit (fitted, saved, or nothing to fit)."""
        method = check_method(method)
        with self._lock:
            if method in self._explainers or not method_spec(method).needs_fit:
                return True
            if method in self._never_saved:  # its fits live in memory only
                return False
            exp = method_spec(method).create(self.context)
            if self.checkpoint_path(exp) is None:
                self._never_saved.add(method)
                return False
            saved = self._load_saved(exp)
            if saved is not None:
                self._explainers[method] = saved
            return saved is not None

    def explainer(self, method: str, progress: Optional[ProgressFn] = None) -> Explainer:
        """The explainer of ``method``: held, loaded from a checkpoint, or fitted now (and saved)."""
        method = check_method(method)
        with self._lock:
            if method not in self._explainers:
                exp = method_spec(method).create(self.context)
                if method_spec(method).needs_fit:
                    exp = self._load_saved(exp) or self._fit(exp, progress)
                self._explainers[method] = exp
            return self._explainers[method]

    def fit(
        self, method: str, progress: Optional[ProgressFn] = None, refresh: bool = False
    ) -> Explainer:
        """Fit ``method`` on the training split (reusing a held or saved fit unless ``refresh``)."""
        method = check_method(method)
        if not refresh:
            return self.explainer(method, progress)
        with self._lock:
            exp = self._fit(method_spec(method).create(self.context), progress)
            self._explainers[method] = exp
            return exp

    def forget(self, method: Optional[str] = None) -> None:
        """Drop held explainers (all, or one method's), e.g. after a refit elsewhere."""
        with self._lock:
            if method is None:
                self._explainers.clear()
            else:
                self._explainers.pop(check_method(method), None)

    def check_applicable(self, method: str) -> str:
        """``method`` (checked) if it can explain this model; a one-line
        :class:`MethodNotApplicableError` for a classifiers-only method of a regressor."""
        method = check_method(method)
        if self.regression and method_spec(method).classifiers_only:
            raise MethodNotApplicableError(
                f"{method_spec(method).title} explains classifiers (its objective reads class "
                f"probabilities); {self.name} predicts a number: choose Gem, Gem + check, "
                f"Integrated Gradients or random."
            )
        return method

    def explain(
        self,
        method: str,
        instances: Sequence[Instance],
        progress: Optional[ProgressFn] = None,
        predicted: Optional[Tensor] = None,
    ) -> Explanation:
        """Scores (one per undirected pair) of ``method`` for ``instances``, timed.

        ``predicted``: the target's predicted classes when the caller has them (see
        :meth:`~gem_core.explainers.base.Explainer.explain`), to spare a forward pass.
        """
        method = self.check_applicable(method)
        exp = self.explainer(method, scaled(progress, 0.0, 0.5))
        lock = self._method_locks[method]
        if not lock.acquire(blocking=False):
            if not method_spec(method).needs_fit:
                # another thread (a browser session of the app) is using the shared explainer:
                # a method with nothing to fit gets one of its own (its own model copy) rather
                # than waiting, so two sessions' GNNExplainer runs share the cores
                out = (
                    method_spec(method)
                    .create(self.context)
                    .explain(list(instances), predicted=predicted)
                )
                report(progress, 1.0, "explained")
                return out
            lock.acquire()
        try:
            out = exp.explain(list(instances), predicted=predicted)
        finally:
            lock.release()
        report(progress, 1.0, "explained")
        return out

    # ------------------------------------------------------------------ fitting and saving
    def _fit(self, exp: Explainer, progress: Optional[ProgressFn]) -> Explainer:
        if not self.has_data():
            raise ModelUnavailableError(
                f"Fitting {title(exp.name)} needs the raw {self.spec.title} data, which is "
                f"missing: set GEM_DATA_ROOT to a folder holding "
                f"{self.spec.title}/raw/{self.spec.title}_*.txt ({self._data_error})"
            )
        exp.fit(self.instances("train"), self.instances("val"), progress)
        path = self.checkpoint_path(exp)
        if path is not None:
            state = exp.to_state()
            state.setdefault("meta", {}).update(self._meta(exp))
            save_torch(state, path)
        return exp

    def _meta(self, exp: Explainer) -> dict:
        return {
            "dataset": self.name,
            "target": self.target().digest,
            "key": exp.state_key(self.context),
        }

    def checkpoint_path(self, exp: Explainer) -> Optional[Path]:
        """Where a fit of ``exp`` is cached (None for explainers that are never saved)."""
        key = exp.state_key(self.context)
        return (
            None
            if key is None
            else dataset_cache_dir(self.name) / "explainers" / f"{self.name}-{key}.pt"
        )

    def shipped_path(self, exp: Explainer) -> Path:
        """The fitted explainer shipped in ``assets/explainers/`` (see ``Explainer.asset_stem``)."""
        stem = exp.asset_stem.format(dataset=self.asset_name, method=exp.name)
        return ASSETS_DIR / "explainers" / f"{stem}.pt"

    def _load_saved(self, exp: Explainer) -> Optional[Explainer]:
        """``exp`` restored from the cache or the shipped asset when one fits this target."""
        cached = self.checkpoint_path(exp)
        if cached is None:
            return None
        meta_wanted = self._meta(exp)
        for path in (cached, self.shipped_path(exp)):
            if not path.exists():
                continue
            try:
                state = load_torch(path, kind=exp.state_kind)
                meta = state.get("meta", {})
                if any(meta.get(k) != v for k, v in meta_wanted.items()):
                    continue  # fitted for another dataset, target or settings
                loaded = exp.load_state(state)
                loaded.loaded_from_ = str(path)
                return loaded
            except (ArtifactError, KeyError, TypeError, ValueError, RuntimeError):
                continue  # corrupted or foreign: never trusted
        return None


def _content_key(inst: Instance) -> tuple:
    """What decides an instance's distillation: its structure, features and target node (an
    edited graph of a what-if is another key than its original)."""
    import hashlib

    h = hashlib.blake2b(digest_size=16)
    for t in (inst.pairs, inst.x, inst.edge_attr):
        if t is not None:
            h.update(str((t.dtype, tuple(t.shape))).encode())
            h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return (inst.dataset, inst.index, inst.target, h.hexdigest())


_WORKBENCHES: dict[tuple[str, str, str], Workbench] = {}
_WB_LOCK = threading.Lock()


def workbench(dataset: str, device: str = "auto", target: str = DEFAULT_TARGET) -> Workbench:
    """The process-wide shared :class:`Workbench` of (dataset, device, target)."""
    spec = get_spec(dataset)
    target_config(spec, target)
    key = (spec.name, str(resolve_device(device)), str(target).strip().lower())
    with _WB_LOCK:
        if key not in _WORKBENCHES:
            _WORKBENCHES[key] = Workbench(spec.name, device, target)
        return _WORKBENCHES[key]


def forget_explainer(dataset: str, method: Optional[str] = None) -> None:
    """Drop a held explainer from every shared workbench of ``dataset`` (e.g. after a refit)."""
    name = get_spec(dataset).name
    with _WB_LOCK:
        benches = [wb for (ds, _, _), wb in _WORKBENCHES.items() if ds == name]
    for wb in benches:
        wb.forget(method)


def drop_workbenches(dataset: str) -> None:
    """Forget every shared workbench of ``dataset`` (a user model deleted or replaced): the next
    :func:`workbench` call starts over from its files."""
    key = str(dataset).strip().lower()
    with _WB_LOCK:
        for k in [k for k in _WORKBENCHES if k[0] == key]:
            del _WORKBENCHES[k]
