"""Artifact store: cache folder, content keys, atomic writes and safe loads.

Everything the engine computes (target checkpoints, distillations, explainers, results) is kept
under :func:`cache_dir`. Writes go to a temporary file in the same folder and are renamed into
place, so a run killed mid-write leaves either the old file or none, never half a file. Tensors
are read back with ``torch.load(weights_only=True)``: a checkpoint can never execute code.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parents[2]
# a checkout's assets/ (the editable install, the app, the tests), else the copy an installed
# wheel carries as package data (gem_core/assets: pyproject.toml's package-dir)
ASSETS_DIR = (
    PROJECT_ROOT / "assets"
    if (PROJECT_ROOT / "assets").is_dir()
    else Path(__file__).resolve().parents[1] / "assets"
)


class ArtifactError(RuntimeError):
    """A cached or shipped artifact is missing, corrupted or was made for something else."""


def cache_dir() -> Path:
    """The cache folder: ``$GEM_CACHE_DIR`` or ``~/.cache/gem-explorer`` (outside the source tree)."""
    root = os.environ.get("GEM_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache"), "gem-explorer"
    )
    path = Path(root).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def config_key(**parts: Any) -> str:
    """A short stable hash of keyword parts (JSON-serialisable), used in file names."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def file_digest(path: Path) -> str:
    """sha256 prefix of a file's bytes (identifies a checkpoint in downstream keys)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:12]


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only if the block succeeds.

    The file keeps the mode of the one it replaces (new files: 0644, not mkstemp's private 0600,
    so shipped results and shared caches stay readable).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, path.stat().st_mode & 0o777 if path.exists() else 0o644)
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def save_torch(obj: Any, path: Path) -> Path:
    """Atomically ``torch.save`` a state (tensors, numbers, strings, lists and dicts only)."""
    import torch

    with atomic_path(path) as tmp:
        torch.save(obj, tmp)
    return Path(path)


def load_torch(path: Path, kind: str | None = None) -> Any:
    """Load a file written by :func:`save_torch` with ``weights_only=True``.

    Args:
        path: the file.
        kind: if given, the loaded dict must carry ``{"kind": kind}`` (rejects foreign files).
    """
    import torch

    path = Path(path)
    if not path.exists():
        raise ArtifactError(f"No artifact at {path}.")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # corrupted, truncated or pickled with code
        raise ArtifactError(
            f"Cannot read {path}: not a valid Gem artifact ({type(exc).__name__}: {exc})."
        ) from exc
    if kind is not None and not (isinstance(obj, dict) and obj.get("kind") == kind):
        found = obj.get("kind") if isinstance(obj, dict) else type(obj).__name__
        raise ArtifactError(f"{path} is not a {kind!r} artifact (found {found!r}).")
    return obj


def save_json(obj: Any, path: Path) -> Path:
    """Atomically write JSON (UTF-8, indented)."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return Path(path)


def load_json(path: Path) -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ArtifactError(f"No artifact at {path}.") from exc
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{path} is not valid JSON: {exc}.") from exc


def cached(path: Path, build: Callable[[], Any], kind: str, refresh: bool = False) -> Any:
    """Return the artifact at ``path``, building and atomically saving it when absent or stale."""
    path = Path(path)
    if path.exists() and not refresh:
        try:
            return load_torch(path, kind=kind)
        except ArtifactError:
            pass  # corrupted or foreign: rebuild over it
    obj = build()
    save_torch(obj, path)
    return obj
