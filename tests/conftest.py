"""Shared fixtures: a private cache folder per test session and the TU data root."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)

PROJECT = Path(__file__).resolve().parent.parent


def _default_data_root() -> str | None:
    candidate = PROJECT.parent / "shared" / "data" / "TUDataset"
    return str(candidate) if candidate.is_dir() else None


@pytest.fixture(scope="session", autouse=True)
def _gem_env(tmp_path_factory: pytest.TempPathFactory):
    """Point the engine at a fresh cache (unless GEM_CACHE_DIR is set) and at the raw TU data."""
    if "GEM_CACHE_DIR" not in os.environ:
        os.environ["GEM_CACHE_DIR"] = str(tmp_path_factory.mktemp("gem-cache"))
    if "GEM_DATA_ROOT" not in os.environ and _default_data_root():
        os.environ["GEM_DATA_ROOT"] = _default_data_root()
    yield


def tu_data_available(name: str) -> bool:
    root = os.environ.get("GEM_DATA_ROOT") or _default_data_root()
    return bool(root) and (Path(root) / name / "raw" / f"{name}_A.txt").is_file()


requires_mutagenicity = pytest.mark.skipif(
    not tu_data_available("Mutagenicity"), reason="Mutagenicity raw files not found (set GEM_DATA_ROOT)")
requires_nci1 = pytest.mark.skipif(
    not tu_data_available("NCI1"), reason="NCI1 raw files not found (set GEM_DATA_ROOT)")
