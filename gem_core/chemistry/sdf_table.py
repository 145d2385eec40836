"""An SD file (``.sdf``: molfiles with ``> <property>`` data items) as table columns.

Chemists' exports (ChEMBL, PubChem, a registration system, a vendor's library) often come as SD
files rather than CSV. Each record becomes one row: a ``SMILES`` column written by RDKit from its
molfile, a ``Name`` column from its title line (when any record has one), then one column per
data item, in the order first met. The molfile is read without sanitising, so a chemically
impossible record still gets a SMILES and is refused later with the same message as a typed one
(an impossible valence, an unsupported element); a record RDKit cannot read at all is a row
without a SMILES and with a note of its own (``problems``). Nothing in the file is executed.

:func:`gem_core.chemistry.tables.read_table` calls :func:`read_sdf` for a ``.sdf`` / ``.sd``
name, or for text that starts as a molfile does; a screen streams :func:`iter_records`.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO, Optional

from rdkit import Chem, rdBase

__all__ = [
    "SDF_SUFFIXES",
    "SdfRecord",
    "SdfRecords",
    "head_is_sdf",
    "iter_records",
    "looks_like_sdf",
    "read_sdf",
]

#: file name endings read as SD files
SDF_SUFFIXES = (".sdf", ".sd")
#: the generated columns' names (a data item of the same name is renamed by the table reader)
SMILES_COLUMN, NAME_COLUMN = "SMILES", "Name"


@dataclass(frozen=True)
class SdfRecords:
    """The records of an SD file as text cells: ``columns``, one ``rows`` entry per record
    (missing items ``""``), and ``problems``: row index -> why its record has no SMILES."""

    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    problems: dict[int, str]


@dataclass(frozen=True)
class SdfRecord:
    """One record: its ``title`` line, ``smiles`` (``""`` when there is none), data ``items``
    and the ``problem`` that left it without a SMILES (None when it has one)."""

    title: str
    smiles: str
    items: dict[str, str]
    problem: Optional[str]


def head_is_sdf(head: bytes) -> bool:
    """Whether the first bytes of a file start a molfile: its fourth line is a counts line
    (``V2000`` or ``V3000``)."""
    lines = head.split(b"\n")
    return len(lines) > 3 and (b"V2000" in lines[3] or b"V3000" in lines[3])


def looks_like_sdf(text: str, filename: str = "") -> bool:
    """Whether ``text`` is an SD file: a ``.sdf`` / ``.sd`` name, or a first molfile."""
    return filename.lower().endswith(SDF_SUFFIXES) or head_is_sdf(text[:4096].encode())


def _record(index: int, mol: Optional[Chem.Mol]) -> SdfRecord:
    if mol is None:
        problem = (
            f"SD record {index + 1} is not a molfile RDKit can read: check its atom and bond "
            f"lines, or export the file again."
        )
        return SdfRecord("", "", {}, problem)
    items = {k: mol.GetProp(k).strip() for k in mol.GetPropNames()}
    title = mol.GetProp("_Name").strip() if mol.HasProp("_Name") else ""
    smiles = _smiles(mol)
    unwritten = f"SD record {index + 1}: RDKit cannot write it as SMILES."
    return SdfRecord(title, smiles, items, None if smiles else unwritten)


def iter_records(stream: BinaryIO) -> Iterator[SdfRecord]:
    """The records of an SD file, streamed (RDKit's ``ForwardSDMolSupplier``, unsanitised):
    one per record, in order, a record RDKit cannot read included (with its ``problem``)."""
    supplier = iter(
        Chem.ForwardSDMolSupplier(stream, sanitize=False, removeHs=False, strictParsing=False)
    )
    index = 0
    while True:
        with rdBase.BlockLogs():  # RDKit's complaints become the records' problems
            try:
                record = _record(index, next(supplier))
            except StopIteration:
                return
        yield record
        index += 1


def _smiles(mol: Chem.Mol) -> str:
    """SMILES of a molfile molecule (:func:`~gem_core.chemistry.convert.molecule_smiles`:
    canonical where it sanitises, else written as it stands, so that reading it gives the usual
    refusal); ``""`` when RDKit cannot write it."""
    from gem_core.chemistry.convert import molecule_smiles  # torch and PyG: only when needed

    try:
        mol.UpdatePropertyCache(strict=False)
        return molecule_smiles(mol)
    except Exception:  # noqa: BLE001 - a record RDKit cannot write is a refused row
        return ""


def read_sdf(text: str, max_rows: int) -> Optional[SdfRecords]:
    """The records of ``text`` (an SD file) as columns; None when there are more than
    ``max_rows``."""
    records: list[SdfRecord] = []
    for record in iter_records(io.BytesIO(text.encode())):
        if len(records) == max_rows:
            return None
        records.append(record)
    keys = list(dict.fromkeys(k for r in records for k in r.items))  # in the order first met
    with_names = any(r.title for r in records)
    columns = (SMILES_COLUMN, *((NAME_COLUMN,) if with_names else ()), *keys)
    rows = tuple(
        (r.smiles, *((r.title,) if with_names else ()), *(r.items.get(k, "") for k in keys))
        for r in records
    )
    problems = {i: r.problem for i, r in enumerate(records) if r.problem is not None}
    return SdfRecords(tuple(columns), rows, problems)
