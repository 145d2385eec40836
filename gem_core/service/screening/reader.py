"""Input rows of a screen: a ``.smi`` or ``.csv``/``.tsv`` file (or stdin), streamed line by line.

Every line after the header is one row, in input order, and keeps its place even when it cannot
be a molecule: an empty line or a line that is not UTF-8 becomes a row whose ``error`` says so,
so that rows out = rows in. Lines starting with ``#`` are comments (not rows).

* ``.smi``: ``SMILES [whitespace id]`` per line; a first line ``smiles ...`` is a header.
* SD files (``.sdf``, sniffed from a molfile's counts line): one row per record, its SMILES
  written by RDKit from the molfile, its id the record's title or the data item
  ``--id-column`` names; a record RDKit cannot read is a row with its ``unreadable_record``
  error (:mod:`gem_core.chemistry.sdf_table`).
* tables (``,``, ``;`` or tab): a header naming the columns; the SMILES column is
  ``--smiles-column`` or the one named like SMILES, the id column ``--id-column`` or the one
  named like an id (none: no ids), by the names the Your data page reads
  (:func:`~gem_core.chemistry.tables.smiles_column_by_name`,
  :func:`~gem_core.chemistry.tables.id_column_by_name`: ``smiles``, ``Canonical SMILES``,
  ``PUBCHEM_EXT_DATASOURCE_SMILES``; ``id``, ``Molecule ChEMBL ID``, ``PUBCHEM_CID``).

The format is sniffed from the first lines (as the Molecule page's upload does): a molfile's counts
line as the fourth means an SD file; else a ``,`` or ``;`` in the first line, or a tab next to a
SMILES header, means a table.
"""

from __future__ import annotations

import csv
import io
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Optional, Union

from gem_core.chemistry.sdf_table import SDF_SUFFIXES, head_is_sdf, iter_records
from gem_core.chemistry.smiles import MoleculeError, without_cx_extension
from gem_core.chemistry.tables import (
    ID_HEADERS,
    SMILES_HEADERS,
    id_column_by_name,
    smiles_column_by_name,
)

__all__ = ["InputRow", "SMILES_HEADERS", "ID_HEADERS", "open_source", "iter_rows", "count_lines"]


@dataclass(frozen=True)
class InputRow:
    """One input row: 1-based ``row`` number (rows only, header and comments not counted),
    optional ``id``, the ``smiles`` text, and ``error`` = ``(reason, message)`` when the line
    itself is unusable (empty, not UTF-8)."""

    row: int
    id: Optional[str]
    smiles: str
    error: Optional[tuple[str, str]] = None


def open_source(source: Union[str, Path]) -> BinaryIO:
    """The input as a binary stream: ``-`` is stdin; a missing file is a clear error."""
    if str(source) == "-":
        return sys.stdin.buffer
    path = Path(source)
    if not path.is_file():
        raise MoleculeError(f"Input file {str(path)!r} does not exist (or is not a file).", "file")
    return open(path, "rb")


def count_lines(source: Union[str, Path]) -> Optional[int]:
    """Newlines in a regular file (a cheap upper bound of its rows for a progress bar);
    None for stdin."""
    if str(source) == "-":
        return None
    n = 0
    mark = b"$$$$" if str(source).lower().endswith(SDF_SUFFIXES) else b"\n"  # SD records
    with open(source, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            n += block.count(mark)
    return n


def _decode(raw: bytes, row: int) -> tuple[str, Optional[tuple[str, str]]]:
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        message = (
            f"Row {row} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at position "
            f"{exc.start + 1}); save the file as UTF-8."
        )
        return raw.decode("utf-8", errors="replace"), ("encoding", message)


def _column(
    header: list[str],
    wanted: Optional[str],
    by_name: Callable[[list[str]], Optional[str]],
    what: str,
) -> Optional[int]:
    """The position of column ``wanted`` (any case), or of the one ``by_name`` finds."""
    lower = [h.strip().lower() for h in header]
    if wanted is not None:
        if wanted.strip().lower() not in lower:
            raise MoleculeError(
                f"The table has no {what} column {wanted!r} (columns: "
                f"{', '.join(h.strip() for h in header) or 'none'}).",
                "file",
            )
        return lower.index(wanted.strip().lower())
    stripped = [h.strip() for h in header]
    found = by_name(stripped)
    return None if found is None else stripped.index(found)


def _empty_error() -> tuple[str, str]:
    try:
        from gem_core.chemistry.smiles import smiles_to_instance

        smiles_to_instance("")
    except MoleculeError as exc:
        return exc.kind, str(exc)
    raise AssertionError("an empty SMILES must be rejected")  # pragma: no cover


def iter_rows(
    stream: BinaryIO, smiles_column: Optional[str] = None, id_column: Optional[str] = None
) -> Iterator[InputRow]:
    """Stream the rows of ``stream`` (see the module docstring), never more than a line in memory.

    Raises:
        MoleculeError: a table without the SMILES column asked for (or any known one), or an
            ``--id-column`` that is not there; ``--smiles-column`` given for a ``.smi`` file.
    """
    empty = _empty_error()
    start = _peek(stream)
    if start is not None and head_is_sdf(start):
        if smiles_column is not None:
            raise MoleculeError(
                "--smiles-column applies to tables; an SD file's molecules are its molfiles.",
                "file",
            )
        yield from _sdf_rows(stream, id_column, empty)
        return
    lines = (raw.rstrip(b"\r\n") for raw in stream)
    first: Optional[bytes] = None
    for raw in lines:
        if raw.strip() and not raw.lstrip().startswith(b"#"):
            first = raw.removeprefix(b"\xef\xbb\xbf")
            break
    if first is None:
        return
    head = first.decode("utf-8", errors="replace")
    sniff = without_cx_extension(head)  # a CXSMILES block's ";" and "," make no table
    tokens = [t.strip().lower() for t in sniff.replace(";", ",").replace("\t", ",").split(",")]
    is_table = (
        "," in sniff
        or ";" in sniff
        or ("\t" in sniff and smiles_column_by_name(tokens) is not None)
    )
    if is_table or smiles_column is not None:
        delimiter = max((",", ";", "\t"), key=head.count)
        header = next(csv.reader([head], delimiter=delimiter))
        s_col = _column(header, smiles_column, smiles_column_by_name, "SMILES")
        if s_col is None:
            raise MoleculeError(
                f"The table has no SMILES column (columns: {', '.join(header) or 'none'}). Name it "
                f"'smiles' or pass --smiles-column.",
                "file",
            )
        i_col = _column(header, id_column, id_column_by_name, "id")
        yield from _table_rows(lines, delimiter, s_col, i_col, empty)
        return
    if id_column is not None:
        raise MoleculeError(
            "--id-column applies to tables (.csv/.tsv); in a .smi file the id is "
            "the text after the SMILES.",
            "file",
        )
    body: Iterator[bytes] = lines
    if smiles_column_by_name(head.split()[:1]) is None:
        body = _chain(first, lines)
    yield from _smi_rows(body, empty)


def _peek(stream: BinaryIO, size: int = 4096) -> Optional[bytes]:
    """The first bytes of ``stream``, left unread (None when it can neither peek nor seek)."""
    peek = getattr(stream, "peek", None)
    if peek is not None:
        return bytes(peek(size)[:size])
    if stream.seekable():
        at = stream.tell()
        head = stream.read(size)
        stream.seek(at)
        return head
    return None


def _sdf_rows(
    stream: BinaryIO, id_column: Optional[str], empty: tuple[str, str]
) -> Iterator[InputRow]:
    """One row per SD record: its SMILES, its title (or data item ``id_column``) as the id."""
    for row, record in enumerate(iter_records(stream), start=1):
        if id_column is not None and row == 1 and id_column not in record.items:
            listed = ", ".join(record.items) or "none"
            raise MoleculeError(
                f"The SD file's first record has no data item {id_column!r} (its items: "
                f"{listed}); leave --id-column out to use the records' titles.",
                "file",
            )
        ident = record.items.get(id_column, "") if id_column is not None else record.title
        error = None
        if record.problem is not None:
            error = ("unreadable_record", record.problem)
        elif not record.smiles:
            error = empty
        yield InputRow(row, ident or None, record.smiles, error)


def _chain(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    yield first
    yield from rest


def _numbered(lines: Iterator[bytes]) -> Iterator[tuple[int, str, Optional[tuple[str, str]]]]:
    """``(row, text, decode error)`` of every line that is not a ``#`` comment (rows from 1)."""
    row = 0
    for raw in lines:
        if raw.lstrip().startswith(b"#"):
            continue
        row += 1
        yield (row, *_decode(raw, row))


def _smi_rows(lines: Iterator[bytes], empty: tuple[str, str]) -> Iterator[InputRow]:
    for row, text, error in _numbered(lines):
        parts = without_cx_extension(text.strip()).split(None, 1)
        if error is None and not parts:
            error = empty
        smiles = parts[0] if parts else ""
        ident = parts[1].strip() if len(parts) > 1 else None
        yield InputRow(row, ident or None, smiles, error)


def _table_rows(
    lines: Iterator[bytes], delimiter: str, s_col: int, i_col: Optional[int], empty: tuple[str, str]
) -> Iterator[InputRow]:
    for row, text, error in _numbered(lines):
        fields = next(csv.reader(io.StringIO(text), delimiter=delimiter), [])
        smiles = fields[s_col].strip() if s_col < len(fields) else ""
        ident = fields[i_col].strip() if i_col is not None and i_col < len(fields) else None
        if error is None and not smiles:
            error = empty
        yield InputRow(row, ident or None, smiles, error)
