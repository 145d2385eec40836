"""Models trained on a user's table: train, list, open, delete, export and import.

A chemist brings a table of SMILES and outcomes (read by :mod:`gem_core.chemistry.tables`); this
module trains the bond-aware target recipe on it (a seeded random or scaffold split, early
stopping, a time budget, a cancel), reports the held-out figures a chemist expects, and saves the
model as a dataset of its own: ``<cache>/user_models/<name>/`` holds ``model.json`` (its facts,
read by :func:`gem_core.data.config.user_spec`), ``dataset.pt`` (the molecules and the split) and
``targets/<name>-strong.pt``; Gem's fits and distillations for it are cached in the same folder,
so every part of the engine (the Molecule flow, screening, the Benchmarks, the CLI) treats the
name like a shipped dataset whose target is ``strong``, and deleting the folder removes all.

Nothing half-written stays: a model is built in a staging folder and renamed into place in one
step (a second training under a name already taken fails there, leaving the first); a cancel or
a crash leaves the staging folder, which is removed (at once, or by the next training).

Names are one namespace per cache folder (one server, or one machine's CLI). A model records its
``owner``: the CLI's is ``"local"`` and the app's is the browser session that trained it. A model
is listed for, opened and deleted by its owner only, unless it is ``shared``: then anyone who
knows its name may open it (never delete it). The CLI (``owner=None``) sees and manages all.

Export writes one file (``torch.save`` of plain containers and uint8 tensors, the model's files
byte for byte); import reads it with ``weights_only=True`` and accepts only the files a model
has, so nothing uploaded is ever executed or unpickled into code.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

import torch
from torch import Tensor

from gem_core.data.config import (
    USER_MODEL_FILE,
    USER_NAME_PATTERN,
    USER_RECIPES,
    check_user_name,
    user_model_spec,
    user_models_root,
    user_recipe,
)
from gem_core.data.datasets import TABLE_FILE, graph_dataset, random_split, table_state
from gem_core.data.ranking import roc_auc
from gem_core.runtime.progress import ProgressFn, report
from gem_core.runtime.store import ArtifactError, save_torch

if TYPE_CHECKING:
    from torch_geometric.data import Data

    from gem_core.chemistry.smiles import MoleculeInstance
    from gem_core.chemistry.tables import TableReading
    from gem_core.service.session import Workbench

__all__ = [
    "OWNER_LOCAL",
    "TARGET",
    "DEFAULT_TIME_BUDGET_S",
    "UserModel",
    "TrainingCancelled",
    "check_name",
    "check_model_name",
    "train_user_model",
    "fit_gem",
    "list_user_models",
    "user_model",
    "user_workbench",
    "delete_user_model",
    "export_user_model",
    "import_user_model",
]

#: the owner of models made on the command line (the machine's user)
OWNER_LOCAL = "local"
#: a user model's target row (its recipe is the bond-aware one, or a smaller version)
TARGET = "strong"
#: the longest a training may run before the best checkpoint so far is kept
DEFAULT_TIME_BUDGET_S = 600.0
BUNDLE_KIND = "gem-user-model-bundle"
#: the files a model's folder (and so a bundle) may hold: top level, or one level down here
_BUNDLE_DIRS = ("targets", "explainers")
_STAGING = ".staging-"


class TrainingCancelled(ValueError):
    """A user cancelled a training (or Gem's fit): nothing was saved."""


@dataclass(frozen=True)
class UserModel:
    """A saved user model: its facts (``model.json``) and its folder."""

    meta: dict[str, Any]
    path: Path

    @property
    def name(self) -> str:
        return str(self.meta["name"])

    @property
    def classes(self) -> tuple[str, ...]:
        return tuple(self.meta["classes"])

    @property
    def regression(self) -> bool:
        """Whether it predicts a number (its table's outcome was numeric), not a class."""
        return self.meta.get("kind", "class") == "number"

    @property
    def salts(self) -> Optional[str]:
        """How its table read salts (:data:`~gem_core.data.config.SALT_RULES`); None for a
        model trained before the rule was recorded."""
        rule = self.meta.get("source", {}).get("salts")
        return str(rule) if rule else None

    @property
    def owner(self) -> str:
        return str(self.meta.get("owner", OWNER_LOCAL))

    @property
    def shared(self) -> bool:
        return bool(self.meta.get("shared", False))

    @property
    def metrics(self) -> dict[str, Any]:
        """Held-out figures: ``{"test": {...}, "val": {...}}`` (see :func:`held_out_metrics`)."""
        return dict(self.meta.get("metrics", {}))

    def visible_to(self, owner: Optional[str]) -> bool:
        """Whether ``owner`` may open it (None: the CLI, which sees every model)."""
        return owner is None or owner == self.owner or self.shared


# ----------------------------------------------------------------------------- names


def check_name(name: str, taken_ok: bool = False) -> str:
    """A valid new model name (lower-cased), or a one-line error (:func:`check_user_name`)."""
    return check_user_name(name, taken_ok)


#: the name front-ends check a new model's name with
check_model_name = check_name


# ----------------------------------------------------------------------------- training


def molecule_graphs(
    molecules: Sequence[MoleculeInstance], labels: Sequence[Union[int, float]]
) -> list[Data]:
    """The molecules as PyG graphs the target trains on: one-hot atoms, both directions of each
    bond with its one-hot bond order, the class index (an ``int``) or the value (a ``float``,
    kept as float32) as ``y``."""
    from torch_geometric.data import Data

    graphs = []
    for mol, label in zip(molecules, labels):
        inst = mol.instance
        assert inst.edge_attr is not None, "a molecule's bonds carry their orders"
        graphs.append(
            Data(
                x=inst.x.float(),
                edge_index=inst.edge_index(),
                edge_attr=torch.cat([inst.edge_attr, inst.edge_attr]).float(),
                y=torch.tensor([label], dtype=torch.float32 if isinstance(label, float) else None),
                num_nodes=inst.num_nodes,
            )
        )
    return graphs


@torch.no_grad()
def _outputs(model: torch.nn.Module, graphs: Sequence[Data]) -> Optional[Tensor]:
    """``[N, C]`` raw outputs of the target ``model`` for ``graphs`` (eval mode, batches of
    512); None without graphs."""
    from torch_geometric.data import Batch

    model.eval()
    out = []
    for s in range(0, len(graphs), 512):
        b = Batch.from_data_list(list(graphs[s : s + 512]))
        out.append(model(b.x, b.edge_index, b.batch, b.num_graphs, edge_attr=b.edge_attr))
    return torch.cat(out) if out else None


def class_probabilities(model: torch.nn.Module, graphs: Sequence[Data]) -> Tensor:
    """``[N, C]`` class probabilities of the target ``model`` for ``graphs`` (eval mode)."""
    out = _outputs(model, graphs)
    return out.softmax(-1) if out is not None else torch.zeros(0, 0)


def held_out_metrics(proba: Tensor, y: Tensor, classes: Sequence[str]) -> dict[str, Any]:
    """What a chemist reads of a classifier on held-out molecules: ``n``, ``accuracy``,
    ``roc_auc`` (two classes: of the second class's probability; more: the mean one-vs-rest
    AUC; None when the split holds one class) and ``confusion`` (rows: measured class,
    columns: predicted)."""
    n = int(y.numel())
    pred = proba.argmax(-1) if n else y
    c = len(classes)
    confusion = torch.zeros(c, c, dtype=torch.long)
    if n:
        confusion.index_put_((y.long(), pred.long()), torch.ones(n, dtype=torch.long), True)
    if c == 2:
        auc = roc_auc(proba[:, 1], y == 1) if n else None
    else:
        aucs = [roc_auc(proba[:, k], y == k) for k in range(c)] if n else []
        kept = [a for a in aucs if a is not None]
        auc = sum(kept) / len(kept) if kept else None
    return {
        "n": n,
        "accuracy": float((pred == y).float().mean()) if n else None,
        "roc_auc": None if auc is None else float(auc),
        "confusion": confusion.tolist(),
    }


def predicted_values(model: torch.nn.Module, graphs: Sequence[Data]) -> Tensor:
    """``[N]`` values (float64) of a regressor ``model`` for ``graphs`` (eval mode)."""
    out = _outputs(model, graphs)
    return out[:, 0].double() if out is not None else torch.zeros(0, dtype=torch.float64)


#: at most this many (measured, predicted) pairs of a split are kept for its plot
MAX_PLOT_POINTS = 2000


def regression_metrics(pred: Tensor, y: Tensor) -> dict[str, Any]:
    """What a chemist reads of a regressor on held-out molecules: ``n``, ``rmse``, ``mae``,
    ``r2`` (None without molecules) and ``points``: (measured, predicted) pairs for a
    predicted-against-measured plot."""
    from gem_core.models.strong_target import r_squared

    n = int(y.numel())
    pred, y = pred.double().reshape(-1), y.double().reshape(-1)
    err = pred - y
    return {
        "n": n,
        "rmse": float(err.pow(2).mean().sqrt()) if n else None,
        "mae": float(err.abs().mean()) if n else None,
        "r2": r_squared(pred, y) if n > 1 else None,
        "points": [
            [round(float(a), 4), round(float(b), 4)]
            for a, b in zip(y[:MAX_PLOT_POINTS], pred[:MAX_PLOT_POINTS])
        ],
    }


def _split(kind: str, smiles: Sequence[str], seed: int):
    if kind == "random":
        return random_split(len(smiles), seed)
    if kind == "scaffold":
        from gem_core.chemistry.scaffolds import scaffold_split

        return scaffold_split(smiles, seed)
    raise ValueError(f"Unknown split {kind!r}. Choose random or scaffold.")


def train_user_model(
    reading: TableReading,
    name: str,
    *,
    recipe: str = "default",
    split: str = "random",
    seed: int = 0,
    time_budget_s: float = DEFAULT_TIME_BUDGET_S,
    device: str = "auto",
    progress: Optional[ProgressFn] = None,
    cancel: Optional[threading.Event] = None,
    owner: str = OWNER_LOCAL,
    shared: bool = False,
    source_file: str = "",
) -> UserModel:
    """Train the target ``recipe`` on the molecules of ``reading`` and save it as ``name``.

    The split is seeded (``random``, or ``scaffold``: Bemis-Murcko groups); training stops
    early on validation, at ``time_budget_s`` (the best checkpoint so far is kept) or on
    ``cancel`` (nothing is saved: :class:`TrainingCancelled`). Gem is not fitted here
    (:func:`fit_gem`), so a model is usable for predictions as soon as it is saved.

    A numeric outcome trains a regressor (the same recipe, one output, the squared error;
    held-out RMSE, MAE and R², :func:`regression_metrics`); classes train a classifier
    (accuracy, ROC-AUC, confusion, :func:`held_out_metrics`).

    Raises:
        ValueError: a bad name, recipe or split; a table that cannot train a model (its
            :meth:`~gem_core.chemistry.tables.TableReading.problem`).
        TrainingCancelled: ``cancel`` was set.
    """
    from gem_core.models.strong_target import train_strong_target
    from gem_core.models.targets import (
        TargetMetrics,
        gine_recipe,
        save_target,
        target_filename,
    )
    from gem_core.runtime.device import resolve_device

    name = check_name(name)
    if recipe not in USER_RECIPES:
        raise ValueError(f"Unknown recipe {recipe!r}. Choose one of: {', '.join(USER_RECIPES)}.")
    problem = reading.problem()
    if problem is not None:
        raise problem
    regression = reading.outcome_kind == "number"
    classes = [] if regression else list(reading.classes)
    labels: list[Union[int, float]] = (
        [float(o) for o in reading.outcomes]
        if regression
        else [classes.index(str(o)) for o in reading.outcomes]
    )
    smiles = [m.input_smiles for m in reading.molecules]
    parts = _split(split, smiles, seed)
    for part in ("train", "val", "test"):
        if len(parts[part]) == 0:
            raise ValueError(f"The {split} split left no molecule for {part}: add molecules.")
    graphs = molecule_graphs(reading.molecules, labels)
    cfg = replace(user_recipe(recipe), seed=int(seed))
    meta: dict[str, Any] = {
        "name": name,
        "title": name,
        "kind": "number" if regression else "class",
        "classes": classes,
        "recipe": recipe,
        "split": split,
        "seed": int(seed),
        "owner": str(owner),
        "shared": bool(shared),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "source": {
            "file": str(source_file),
            "smiles_column": reading.smiles_column,
            "outcome_column": reading.outcome_column,
            "id_column": reading.id_column,
            "rows": reading.rows_read,
            "valid": reading.valid,
            "molecules": len(graphs),
            "salts": reading.salts,
        },
        "outcome_column": reading.outcome_column,
        "split_sizes": {p: len(parts[p]) for p in ("train", "val", "test")},
    }
    ds = graph_dataset(user_model_spec(meta), graphs, parts)
    deadline = time.monotonic() + float(time_budget_s)

    def stop() -> Optional[str]:
        if cancel is not None and cancel.is_set():
            return "cancelled"
        return "time budget" if time.monotonic() > deadline else None

    def on_epoch(epoch: int, max_epochs: int, val_score: float) -> None:
        score = f"R² {val_score:.3f}" if regression else f"{val_score:.1%}"
        report(progress, 0.95 * epoch / max_epochs, f"epoch {epoch}: validation {score}")

    report(progress, 0.0, f"training on {len(parts.train)} molecules")
    model, m = train_strong_target(
        ds,
        seed=int(seed),
        device=resolve_device(device, "fit"),
        stop=stop,
        on_epoch=on_epoch,
        **gine_recipe(cfg),
    )
    if cancel is not None and cancel.is_set():
        raise TrainingCancelled("Training cancelled: nothing was saved.")
    meta["training"] = {
        "seconds": m["train_seconds"],
        "epochs": m["epochs"],
        "best_epoch": m["best_epoch"],
        "stopped": m["stopped"],
        "time_budget_s": float(time_budget_s),
    }
    meta["metrics"] = _held_out(model, graphs, labels, parts, classes, regression)
    if regression:
        from gem_core.data.protocol import regression_tolerance

        train_values = predicted_values(model, [graphs[int(i)] for i in parts["train"]])
        meta["tolerance"] = regression_tolerance(train_values)
    report(progress, 0.97, "saving")
    root = user_models_root()
    root.mkdir(parents=True, exist_ok=True)
    _remove_stale_staging(root)
    stage = root / f"{_STAGING}{name}-{uuid.uuid4().hex[:8]}"
    try:
        stage.mkdir()
        save_torch(table_state(graphs, parts, smiles), stage / TABLE_FILE)
        metrics = TargetMetrics(
            m["train_accuracy"],
            m["val_accuracy"],
            m["test_accuracy"],
            m["train_seconds"],
            m["epochs"],
        )
        save_target(model, metrics, ds, stage / "targets" / target_filename(name, TARGET), cfg)
        (stage / USER_MODEL_FILE).write_text(json.dumps(meta, indent=2))
        _commit(stage, root / name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    report(progress, 1.0, "saved")
    return user_model(name)


def _held_out(
    model: torch.nn.Module,
    graphs: Sequence[Data],
    labels: Sequence[Union[int, float]],
    parts: Any,
    classes: Sequence[str],
    regression: bool,
) -> dict[str, Any]:
    """The held-out figures of the validation and test splits (see :func:`train_user_model`)."""
    out = {}
    for part in ("val", "test"):
        kept = [graphs[int(i)] for i in parts[part]]
        measured = [labels[int(i)] for i in parts[part]]
        if regression:
            out[part] = regression_metrics(
                predicted_values(model, kept), torch.tensor(measured, dtype=torch.float64)
            )
        else:
            out[part] = held_out_metrics(
                class_probabilities(model, kept), torch.tensor(measured, dtype=torch.long), classes
            )
    return out


def _commit(stage: Path, final: Path) -> None:
    """Move a finished staging folder into place in one rename (refused when taken); the
    process's workbenches of an earlier model of that name are forgotten."""
    from gem_core.service.session import drop_workbenches

    try:
        os.rename(stage, final)
        drop_workbenches(final.name)
    except OSError as exc:
        if final.exists():
            raise ValueError(
                f"A model named {final.name!r} was saved meanwhile (another training?): "
                f"choose another name."
            ) from exc
        raise


def _remove_stale_staging(root: Path, older_than_s: float = 6 * 3600) -> None:
    """Remove staging folders a killed training left (older than ``older_than_s``)."""
    now = time.time()
    for path in root.glob(f"{_STAGING}*"):
        try:
            if now - path.stat().st_mtime > older_than_s:
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            continue


def fit_gem(
    name: str,
    device: str = "auto",
    progress: Optional[ProgressFn] = None,
    cancel: Optional[threading.Event] = None,
    method: str = "gem",
) -> Workbench:
    """Fit Gem (or ``method``) for the user model ``name`` on its training molecules, saved in
    its folder; a set ``cancel`` stops it (:class:`TrainingCancelled`, nothing saved)."""

    def watched(fraction: float, message: str = "") -> None:
        if cancel is not None and cancel.is_set():
            raise TrainingCancelled("Gem's fit was cancelled: nothing was saved.")
        report(progress, fraction, message)

    wb = user_workbench(name, device)
    wb.fit(method, watched)
    return wb


# ----------------------------------------------------------------------------- the saved models


def _read(path: Path) -> Optional[UserModel]:
    try:
        meta = json.loads((path / USER_MODEL_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("name") != path.name:
        return None
    return UserModel(meta, path)


def list_user_models(owner: Optional[str] = None) -> list[UserModel]:
    """The saved user models ``owner`` may open (None: all), by name."""
    root = user_models_root()
    if not root.is_dir():
        return []
    found = (_read(p) for p in sorted(root.iterdir()) if not p.name.startswith("."))
    return [m for m in found if m is not None and m.visible_to(owner)]


def user_model(name: str, owner: Optional[str] = None) -> UserModel:
    """The saved user model ``name`` if ``owner`` may open it; a one-line error otherwise
    (the same for a private model of another owner as for no model: names are not revealed)."""
    key = str(name).strip().lower()
    found = _read(user_models_root() / key) if USER_NAME_PATTERN.match(key) else None
    if found is None or not found.visible_to(owner):
        raise ValueError(f"No model named {name!r} is open to you (python -m gem_core models).")
    return found


def user_workbench(name: str, device: str = "auto") -> Workbench:
    """The shared workbench of user model ``name`` (its ``strong`` target loaded)."""
    from gem_core.service.session import workbench

    wb = workbench(user_model(name).name, device, TARGET)
    wb.target()
    return wb


def delete_user_model(name: str, owner: Optional[str] = None) -> None:
    """Delete user model ``name`` and everything cached for it; only its owner (or the CLI,
    ``owner=None``) may."""
    from gem_core.service.session import drop_workbenches

    model = user_model(name, owner)
    if owner is not None and model.owner != owner:
        raise ValueError(f"Model {model.name!r} is shared with you, not yours: it stays.")
    trash = model.path.parent / f"{_STAGING}deleted-{model.name}-{uuid.uuid4().hex[:8]}"
    os.rename(model.path, trash)  # gone from the list in one step, then removed
    drop_workbenches(model.name)
    shutil.rmtree(trash, ignore_errors=True)


def share_user_model(name: str, owner: Optional[str], shared: bool = True) -> UserModel:
    """Let anyone who knows the name open the model (or take that back); owner only."""
    model = user_model(name, owner)
    if owner is not None and model.owner != owner:
        raise ValueError(f"Model {model.name!r} is not yours to share.")
    meta = {**model.meta, "shared": bool(shared)}
    tmp = model.path / f".{USER_MODEL_FILE}.{uuid.uuid4().hex[:8]}"
    tmp.write_text(json.dumps(meta, indent=2))
    os.replace(tmp, model.path / USER_MODEL_FILE)
    return user_model(model.name, owner)


def _bundle_files(path: Path) -> list[Path]:
    """The files of a model folder that a bundle carries (its facts, molecules, target and
    explainers; distillations are recomputed where needed)."""
    files = [path / USER_MODEL_FILE, path / TABLE_FILE]
    for sub in _BUNDLE_DIRS:
        files += sorted((path / sub).glob("*.pt"))
    return [f for f in files if f.is_file()]


def export_user_model(name: str, owner: Optional[str] = None) -> bytes:
    """One file holding user model ``name`` (see the module docstring), for another machine."""
    model = user_model(name, owner)
    files = {
        str(f.relative_to(model.path)): torch.frombuffer(
            bytearray(f.read_bytes()), dtype=torch.uint8
        )
        for f in _bundle_files(model.path)
    }
    buf = io.BytesIO()
    torch.save({"kind": BUNDLE_KIND, "version": 1, "name": model.name, "files": files}, buf)
    return buf.getvalue()


def _allowed(rel: str) -> bool:
    parts = rel.split("/")
    if any(p in ("", ".", "..") or p.startswith(".") for p in parts):
        return False
    if len(parts) == 1:
        return parts[0] in (USER_MODEL_FILE, TABLE_FILE)
    return len(parts) == 2 and parts[0] in _BUNDLE_DIRS and parts[1].endswith(".pt")


def import_user_model(data: bytes, owner: str = OWNER_LOCAL, shared: bool = False) -> UserModel:
    """Save the bundle ``data`` (from :func:`export_user_model`) as a model of ``owner``, under
    the name it was exported with (its files name it); refuses anything that is not such a
    bundle, and a name taken here."""
    from gem_core.runtime.store import load_torch

    try:
        bundle = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable upload is one message
        raise ArtifactError(
            f"This file is not a Gem Explorer model ({type(exc).__name__})."
        ) from exc
    if not isinstance(bundle, dict) or bundle.get("kind") != BUNDLE_KIND:
        raise ArtifactError(
            "This file is not a Gem Explorer model (exported with 'models export')."
        )
    files = bundle.get("files")
    if not isinstance(files, dict) or not all(
        isinstance(k, str) and _allowed(k) and isinstance(v, Tensor) and v.dtype == torch.uint8
        for k, v in files.items()
    ):
        raise ArtifactError("This model file holds files a model does not have: refused.")
    if USER_MODEL_FILE not in files or TABLE_FILE not in files:
        raise ArtifactError("This model file lacks its facts or its molecules: refused.")
    try:
        meta = json.loads(bytes(files[USER_MODEL_FILE].numpy()).decode("utf-8"))
        user_model_spec(meta)
    except (ValueError, KeyError, TypeError) as exc:
        raise ArtifactError(f"This model file's facts are unreadable ({exc}).") from exc
    if meta.get("name") != bundle.get("name"):
        raise ArtifactError("This model file names two different models: refused.")
    new = check_name(str(meta["name"]))
    meta.update(owner=str(owner), shared=bool(shared))
    root = user_models_root()
    root.mkdir(parents=True, exist_ok=True)
    stage = root / f"{_STAGING}{new}-{uuid.uuid4().hex[:8]}"
    try:
        stage.mkdir()
        for rel, blob in files.items():
            if rel == USER_MODEL_FILE:
                continue
            dst = stage / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(blob.numpy().tobytes())
            load_torch(dst)  # each part loads with weights_only, or the import is refused
        (stage / USER_MODEL_FILE).write_text(json.dumps(meta, indent=2))
        _commit(stage, root / new)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return user_model(new, owner)
