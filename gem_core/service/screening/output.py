"""Crash-safe output of a screen: chunk files plus a manifest, compacted into one file at the end.

While a run works, its results live in ``OUTPUT.parts/``: ``chunk-000042.arrow`` per finished
chunk (written to a temporary name and renamed into place, so a chunk file is whole or absent)
and ``manifest.json`` (the run's settings, atomically rewritten). A run killed at any point and
started again with the same arguments finds the finished chunks and computes only the others;
different settings are refused rather than mixed. When every chunk is there, they are streamed in
order into ``OUTPUT`` (Parquet, or CSV for a ``.csv`` name; again through a temporary file) and
the parts folder is removed.

A chunk file is Arrow's IPC format, LZ4-compressed: the process that feeds the workers writes one
in 0.5 ms per 2,000 rows against Parquet's 3.4 ms, and the end reads it back in 0.1 ms against 0.5
(400 KB on disk against 300 KB, until the run ends).
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.ipc as paipc
import pyarrow.parquet as pq

from gem_core.runtime.store import atomic_path, load_json, save_json
from gem_core.service.screening.chunk import (
    MUTAGENICITY_CLASSES,
    SCHEMA,
    STATUS_OK,
    class_column,
)

__all__ = ["OUTPUT_FORMATS", "output_format", "ChunkStore", "Summary", "compact", "csv_table"]

OUTPUT_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv"}
MANIFEST_VERSION = 1
#: A finished chunk's file name: ``chunk-000042.arrow``.
CHUNK_PREFIX, CHUNK_SUFFIX = "chunk-", ".arrow"
_CHUNK_WRITE_OPTIONS = paipc.IpcWriteOptions(
    compression="lz4" if pa.Codec.is_available("lz4") else None
)


def output_format(path: Path) -> str:
    """``parquet`` or ``csv`` from the output's extension; anything else is a clear error."""
    fmt = OUTPUT_FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise ValueError(f"Output {str(path)!r} must end in .parquet (or .pq) or .csv.")
    return fmt


@dataclass
class Summary:
    """Counts of a finished screen: rows, accepted, rejected by reason, and the rows predicted
    as the model's ``first_class`` (``mutagens``: Mutagenicity's flagged mutagens; for a user
    model, e.g. its predicted actives)."""

    rows: int = 0
    ok: int = 0
    mutagens: int = 0
    rejected: Counter = field(default_factory=Counter)
    #: None for a model of a number: no class to count
    first_class: Optional[str] = MUTAGENICITY_CLASSES[0]

    def add(self, table: pa.Table) -> None:
        cols = table.select(["status", "reason", "prediction"]).to_pydict()
        self.rows += table.num_rows
        for status, reason, prediction in zip(cols["status"], cols["reason"], cols["prediction"]):
            if status == STATUS_OK:
                self.ok += 1
                self.mutagens += self.first_class is not None and prediction == self.first_class
            else:
                self.rejected[reason] += 1

    @property
    def predicted_key(self) -> str:
        """The JSON key of :attr:`mutagens`: ``predicted_mutagens`` for Mutagenicity (as ever),
        ``predicted_<first class>`` for a user model (``predicted_active``; the class name made
        safe as in its ``p_<first class>`` column)."""
        if self.first_class == MUTAGENICITY_CLASSES[0]:
            return "predicted_mutagens"
        return f"predicted_{class_column(str(self.first_class))}"

    def as_dict(self) -> dict[str, Any]:
        out = {
            "rows": self.rows,
            "ok": self.ok,
            "rejected": sum(self.rejected.values()),
            "rejected_by_reason": dict(sorted(self.rejected.items())),
        }
        if self.first_class is not None:
            out[self.predicted_key] = self.mutagens
        return out


class ChunkStore:
    """The ``OUTPUT.parts/`` folder of one run, whose chunks are tables of ``schema`` (the
    screen's :attr:`~gem_core.service.screening.chunk.ScreenSettings.schema`)."""

    def __init__(self, output: Path, settings: dict[str, Any], schema: pa.Schema = SCHEMA):
        self.output = Path(output)
        self.folder = self.output.with_name(self.output.name + ".parts")
        self.settings = settings
        self.schema = schema
        self.manifest = self.folder / "manifest.json"

    def open(self, restart: bool = False) -> set[int]:
        """Prepare the folder; the indices of chunks already finished by an earlier run of the
        same settings. Raises ``ValueError`` when it holds a run of other settings."""
        if restart and self.folder.exists():
            shutil.rmtree(self.folder)
        if self.manifest.exists():
            try:
                old = load_json(self.manifest)
            except Exception:  # unreadable manifest: it is rewritten before any chunk counts
                old = None
            if old is not None and old.get("settings") != self.settings:
                changed = sorted(
                    k
                    for k in set(old.get("settings", {})) | set(self.settings)
                    if old.get("settings", {}).get(k) != self.settings.get(k)
                )
                raise ValueError(
                    f"{self.folder} holds an unfinished screen with other settings "
                    f"({', '.join(changed)} differ). Run again with the same arguments to resume, "
                    f"or add --restart to discard it."
                )
        self.folder.mkdir(parents=True, exist_ok=True)
        save_json({"version": MANIFEST_VERSION, "settings": self.settings}, self.manifest)
        return {
            i
            for i in (self._index(p) for p in self.folder.glob(f"{CHUNK_PREFIX}*{CHUNK_SUFFIX}"))
            if i is not None
        }

    @staticmethod
    def _index(path: Path) -> Optional[int]:
        stem = path.name[len(CHUNK_PREFIX) : -len(CHUNK_SUFFIX)]
        return int(stem) if stem.isdigit() else None

    def path(self, index: int) -> Path:
        return self.folder / f"{CHUNK_PREFIX}{index:06d}{CHUNK_SUFFIX}"

    def write(self, index: int, table: pa.Table) -> None:
        """Write one finished chunk (whole, or not at all)."""
        with atomic_path(self.path(index)) as tmp:
            with (
                pa.OSFile(str(tmp), "wb") as sink,
                paipc.new_file(sink, table.schema, options=_CHUNK_WRITE_OPTIONS) as writer,
            ):
                writer.write_table(table)

    def read(self, index: int) -> pa.Table:
        """One finished chunk, in the store's schema."""
        with pa.OSFile(str(self.path(index)), "rb") as source:
            return paipc.open_file(source).read_all().cast(self.schema)

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def csv_table(table: pa.Table) -> pa.Table:
    """The table with its list columns as text, for CSV: bonds ``"3-7;4-9"``, scores
    ``"0.91;0.88"`` (``repr`` of the float: exact round trip), toxicophores ``"aromatic_nitro;…"``."""
    cols = {name: table.column(name) for name in table.column_names}
    d = table.select(["bonds", "scores", "toxicophores"]).to_pydict()
    cols["bonds"] = pa.array(
        [None if b is None else ";".join(f"{i}-{j}" for i, j in b) for b in d["bonds"]], pa.string()
    )
    cols["scores"] = pa.array(
        [None if s is None else ";".join(repr(float(x)) for x in s) for s in d["scores"]],
        pa.string(),
    )
    cols["toxicophores"] = pa.array(
        [None if t is None else ";".join(t) for t in d["toxicophores"]], pa.string()
    )
    return pa.table(cols)


def compact(
    store: ChunkStore,
    num_chunks: int,
    fmt: str,
    metadata: Optional[dict[str, Any]] = None,
    first_class: Optional[str] = MUTAGENICITY_CLASSES[0],
) -> Summary:
    """Stream chunks ``0..num_chunks-1`` in order into the single output file (in the store's
    schema); count them (``first_class``: the model's class 0, whose predictions are counted)."""
    missing = [i for i in range(num_chunks) if not store.path(i).exists()]
    if missing:
        raise RuntimeError(f"chunks {missing[:5]} of {store.folder} are missing; run again")
    summary = Summary(first_class=first_class)
    meta = {b"gem_screen": json.dumps(metadata or {}, sort_keys=True).encode()}
    with atomic_path(store.output) as tmp:
        if fmt == "parquet":
            with pq.ParquetWriter(tmp, store.schema.with_metadata(meta)) as writer:
                for i in range(num_chunks):
                    table = store.read(i)
                    summary.add(table)
                    writer.write_table(table.replace_schema_metadata(meta))
        else:
            writer = None
            with open(tmp, "wb") as fh:
                for i in range(num_chunks):
                    table = store.read(i)
                    summary.add(table)
                    text = csv_table(table)
                    if writer is None:
                        writer = pacsv.CSVWriter(fh, text.schema)
                    writer.write_table(text)
                if writer is None:  # no rows at all: a header only
                    pacsv.write_csv(csv_table(store.schema.empty_table()), fh)
                else:
                    writer.close()
    return summary
