"""A chemist's assay table (CSV / TSV / SMI bytes) read into what the "Your data" page shows.

Three steps, each refusing bad input with a :class:`TableError` whose message says what to do:

* :func:`read_table` turns the uploaded bytes into a :class:`Table` of text cells (header row,
  delimiter sniffed, comments and blank lines skipped), within the upload and row limits.
* :func:`guess_columns` proposes the SMILES, outcome and id columns the page pre-selects.
* :func:`read_molecules` converts every SMILES with :func:`smiles_to_instance` and reads its
  outcome (class label or number), giving per-row refusals, duplicates and conflicts, and the
  training set (one molecule per canonical SMILES) in a :class:`TableReading`, whose
  :meth:`TableReading.problem` is what blocks training, if anything.

Formats: a table has a header row and ``,``, ``;`` or tab between cells (``.csv`` / ``.tsv``,
or any name when the first line holds one of them); a ``.smi`` file has ``SMILES [id]`` per line,
optionally under a header line starting with a SMILES column name. Lines starting with ``#`` are
comments.
"""

from __future__ import annotations

import csv
import io
import math
import re
import statistics
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Callable, Optional, TypeVar, Union

from rdkit import Chem, rdBase

from gem_core.chemistry.assay_columns import (
    companion_column,
    is_bound,
    mixed_warning,
    relation,
    undetermined_classes,
)
from gem_core.chemistry.sdf_table import looks_like_sdf, read_sdf
from gem_core.chemistry.smiles import (
    REJECTION_WORDS,
    WHOLE_SALT_NOTE,
    MoleculeError,
    MoleculeInstance,
    check_salts,
    smiles_to_instance,
    without_cx_extension,
)

__all__ = [
    "MAX_UPLOAD_BYTES",
    "MAX_ROWS",
    "MIN_TRAINING_MOLECULES",
    "MAX_CLASSES",
    "SMILES_HEADERS",
    "ID_HEADERS",
    "OUTCOME_HEADERS",
    "TableError",
    "Table",
    "read_table",
    "ColumnGuess",
    "guess_columns",
    "smiles_column_by_name",
    "id_column_by_name",
    "RowOutcome",
    "TableReading",
    "read_molecules",
    "CLASS_LEFT_OUT",
    "CENSORED",
    "LEFT_OUT_KINDS",
]

MAX_UPLOAD_BYTES: int = 50 * 2**20  # stated by the page
MAX_ROWS: int = 50_000
MIN_TRAINING_MOLECULES: int = 50
MAX_CLASSES: int = 20
#: "auto" reads integer outcomes with at most this many distinct values as class labels
MAX_INTEGER_CLASSES = 10
#: a class with fewer molecules than this gets a warning
FEW_CLASS_MOLECULES = 10
#: a share of refused rows at or above this gets a warning
REFUSED_WARNING_SHARE = 0.10
#: repeated measurements of one molecule conflict when they spread over more than this share of
#: the outcome's standard deviation
CONFLICT_STD_SHARE = 0.10
_T = TypeVar("_T")
_PROGRESS_EVERY = 200
_GUESS_SAMPLE = 20

# header names, compared after _normal(): lower case, spaces and hyphens as underscores (the
# screen's reader finds its SMILES and id columns by the same names: smiles_column_by_name,
# id_column_by_name)
SMILES_HEADERS = (
    "smiles",
    "canonical_smiles",
    "smile",
    "isomeric_smiles",
    "smiles_string",
    "mol_smiles",
    "molecule_smiles",
    "cxsmiles",
)
ID_HEADERS = (
    "id",
    "molecule_chembl_id",  # a ChEMBL export (it also has "Molecule Name", often empty)
    "pubchem_cid",  # a PubChem assay export
    "name",
    "title",
    "compound",
    "compound_id",
    "compound_name",
    "mol_id",
    "molecule",
    "molecule_id",
    "molecule_name",
    "mol_name",
    "cmpd_id",
    "chembl_id",
    "cid",
    "cas",
    "cas_number",
    "identifier",
    "inchikey",
)
#: preferred outcome headers, most specific first
OUTCOME_HEADERS = (
    "label",
    "activity",
    "y",
    "class",
    "outcome",
    "value",
    "pchembl_value",  # a ChEMBL export: -log10 of the molar value, before its "Standard Value"
    "standard_value",
    "target",
    "logp",
    "active",
    "activity_class",
    "pic50",
    "ic50",
    "ec50",
    "ki",
    "pki",
    "kd",
    "logs",
    "logd",
    "solubility",
    "toxicity",
    "mutagenic",
    "mutagenicity",
    "response",
    "measured",
    "property",
    "score",
)
#: outcome cells read as missing (an empty outcome), compared in lower case
_MISSING = frozenset({"", "nan", "na", "n/a", "null", "none", "-", "?", "#n/a"})
_TABLE_DELIMITERS = (",", ";", "\t")
_SEPARATOR_LINE = re.compile(r"sep=[,;\t]", re.IGNORECASE)  # Excel's first line "sep=;"
_DECIMAL_COMMA = re.compile(r"[+-]?\d+,\d+(?:[eE][+-]?\d+)?")  # 0,5 / 1,2E-05
# 1,200 / 12,345,678.5: a number grouped by thousands, or (one comma, no point) a decimal comma
_THOUSANDS = re.compile(r"[+-]?[1-9]\d{0,2}(?:,\d{3})+(?:\.\d+)?")
_DECIMAL_POINT = re.compile(r"[+-]?\d*\.\d+(?:[eE][+-]?\d+)?")
# characters a SMILES has and a header word hardly ever does (headerless-table check)
_SMILES_MARKS = re.compile(r"[=#()\[\]@+1-9]")


class TableError(ValueError):
    """A whole-table refusal. ``str(err)`` tells the user what to do; ``err.kind`` names it for
    code: ``too_large``, ``too_many_rows``, ``empty``, ``encoding``, ``no_smiles_column``,
    ``no_column``, ``one_class``, ``too_many_classes``, ``outcome_not_numeric``,
    ``too_few_molecules``, ``same_column``."""

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind


# ----------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class Table:
    """An uploaded table as text: column names, rows (stripped cells, each padded or cut to
    ``len(columns)``), the ``format`` read (``csv``, ``tsv``, ``smi`` or ``sdf``) and
    ``problems``: row index -> why the file gives that row no molecule (an SD record RDKit
    cannot read), refused as ``unreadable_record`` whatever its columns say."""

    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    format: str
    problems: Mapping[int, str] = field(default_factory=dict)

    def index(self, name: str) -> int:
        """Position of column ``name`` (exact, else any case); TableError ``no_column`` naming
        the columns there are."""
        if name in self.columns:
            return self.columns.index(name)
        lower = [c.lower() for c in self.columns]
        wanted = str(name).strip().lower()
        if wanted in lower:
            return lower.index(wanted)
        listed = ", ".join(repr(c) for c in self.columns) or "none"
        raise TableError(
            f"The table has no column {name!r}. Its columns are: {listed}. Choose one of them "
            f"(or rename the column in your file and upload it again).",
            "no_column",
        )

    def column(self, name: str) -> list[str]:
        """The cells of column ``name`` (any case), one per row."""
        i = self.index(name)
        return [row[i] for row in self.rows]


def _megabytes(n: int) -> str:
    return f"{n / 2**20:.1f}".removesuffix(".0")


def _check_size(data: bytes, max_bytes: int) -> None:
    if len(data) > max_bytes:
        raise TableError(
            f"The file is {_megabytes(len(data))} MB; uploads are limited to "
            f"{_megabytes(max_bytes)} MB. Upload fewer rows (split the file) or remove columns "
            f"the model does not need (keep the SMILES, outcome and id).",
            "too_large",
        )


def _check_binary(data: bytes) -> None:
    """Refuse spreadsheets, archives and UTF-16 text by their first bytes, before decoding."""
    if data.startswith((b"PK\x03\x04", b"\xd0\xcf\x11\xe0")):
        raise TableError(
            "This is a spreadsheet workbook (.xlsx / .xls) or a zip archive, not a text table. "
            "In your spreadsheet program use Save As → 'CSV UTF-8 (comma delimited)' and upload "
            "the .csv file.",
            "encoding",
        )
    if data.startswith(b"\x1f\x8b"):
        raise TableError(
            "This is a gzip-compressed file. Decompress it and upload the .csv / .tsv / .smi "
            "file itself.",
            "encoding",
        )
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise TableError(
            "This file is UTF-16 text ('Unicode text' in Excel). Save it as 'CSV UTF-8' and upload "
            "it again.",
            "encoding",
        )


def _decode(data: bytes) -> str:
    """UTF-8 text without a BOM; TableError ``encoding`` naming the first bad line."""
    _check_binary(data)
    data = data.removeprefix(b"\xef\xbb\xbf")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise TableError(
            f"Line {line} is not UTF-8 text (byte 0x{data[exc.start]:02x}). Save the file as "
            f"UTF-8 (in Excel: Save As → 'CSV UTF-8') and upload it again.",
            "encoding",
        ) from None
    nul = text.find("\x00")
    if nul >= 0:
        raise TableError(
            f"Line {text.count(chr(10), 0, nul) + 1} holds a NUL byte: this is a binary file, not "
            f"a text table. Export your data as CSV (UTF-8) and upload that.",
            "encoding",
        )
    return text


def _lines(text: str) -> Iterator[str]:
    """The lines of ``text`` (any line ending, kept) that are neither blank nor ``#`` comments."""
    for line in io.StringIO(text, newline=""):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            yield line


def _normal(header: str) -> str:
    """A header for comparison with the name lists: lower case, spaces/hyphens as ``_``."""
    return re.sub(r"[\s\-]+", "_", header.strip().lower())


def _parses(text: str) -> bool:
    """Whether ``text`` is a SMILES RDKit reads (quietly; no whitespace allowed)."""
    if not text or any(c.isspace() for c in text):
        return False
    with rdBase.BlockLogs():
        return Chem.MolFromSmiles(text) is not None


def _is_table(first: str, filename: str) -> bool:
    """Whether the first line starts a delimited table rather than a ``.smi`` file: the file name
    is a hint; otherwise ``,``, ``;`` or a tab mean a table unless the line starts with a SMILES
    and whitespace (a ``.smi`` line whose id holds a comma, or follows a tab)."""
    name = filename.lower()
    token = first.split(None, 1)[0] if first.split() else ""
    if name.endswith((".csv", ".tsv", ".tab")) or _SEPARATOR_LINE.fullmatch(first.strip()):
        return True
    if name.endswith((".smi", ".smiles", ".ism", ".can")):
        return "," in token or ";" in token  # a SMILES has neither
    if "," in first or ";" in first:
        return not _parses(token)  # "CCO ethanol, absolute" is a .smi line
    if "\t" in first:
        return _normal(token) in SMILES_HEADERS or not _parses(token)
    return False


def _delimiter(first: str, filename: str) -> str:
    """The most frequent of ``,`` ``;`` tab in the first line (tab for a ``.tsv`` on a tie)."""
    if _SEPARATOR_LINE.fullmatch(first.strip()):
        return first.strip()[-1]
    order = ("\t", ",", ";") if filename.lower().endswith((".tsv", ".tab")) else _TABLE_DELIMITERS
    return max(order, key=first.count)


def _unique(names: Sequence[str]) -> tuple[str, ...]:
    """Column names, stripped, empty ones as ``column N``, repeats (any case) as ``name (2)``."""
    out: list[str] = []
    seen: set[str] = set()
    for i, raw in enumerate(names):
        base = raw.strip() or f"column {i + 1}"
        name, k = base, 2
        while name.lower() in seen:
            name, k = f"{base} ({k})", k + 1
        seen.add(name.lower())
        out.append(name)
    return tuple(out)


def _fit(cells: Sequence[str], width: int) -> tuple[str, ...]:
    """Cells stripped and padded with ``""`` or cut to ``width``."""
    row = [c.strip() for c in cells[:width]]
    return tuple(row + [""] * (width - len(row)))


def _chain(head: Iterable[_T], rest: Iterable[_T]) -> Iterator[_T]:
    """``head``, then ``rest`` (a line or row read ahead, put back)."""
    yield from head
    yield from rest


def _empty_file() -> TableError:
    return TableError(
        "The file is empty (only blank lines or # comments). Upload a table with a header "
        "row, e.g. 'smiles,activity', and one molecule per row.",
        "empty",
    )


def _too_many_rows(max_rows: int) -> TableError:
    return TableError(
        f"The file has more than {max_rows:,} rows; at most {max_rows:,} rows are read. Upload "
        f"a part of it (split the file), e.g. the first {max_rows:,} rows.",
        "too_many_rows",
    )


def _limited(rows: Iterable[list[str]], max_rows: int) -> list[list[str]]:
    """The rows that have any non-empty cell, refusing more than ``max_rows`` of them."""
    out: list[list[str]] = []
    for cells in rows:
        if not any(c.strip() for c in cells):  # e.g. ",,," lines a spreadsheet leaves at the end
            continue
        if len(out) >= max_rows:
            raise _too_many_rows(max_rows)
        out.append(cells)
    return out


def _headerless(header: Sequence[str]) -> bool:
    """Whether a table's first row is data rather than a header: no cell is a known column name,
    and some cell is a SMILES that is no word (ring digits, brackets, bonds), or one is a SMILES
    and another a number (``CCO,1``)."""
    cells = [c.strip() for c in header]
    known = set(SMILES_HEADERS) | set(ID_HEADERS) | set(OUTCOME_HEADERS)
    if any(_normal(c) in known for c in cells):
        return False
    molecules = [c for c in cells if _parses(c)]
    if any(_SMILES_MARKS.search(c) for c in molecules):
        return True
    return bool(molecules) and any(_number(c) is not None for c in cells)


def _read_delimited(lines: Iterator[str], first: str, filename: str, max_rows: int) -> Table:
    delimiter = _delimiter(first, filename)
    if _SEPARATOR_LINE.fullmatch(first.strip()):
        next(lines)  # the "sep=;" line itself
    reader = csv.reader(lines, delimiter=delimiter)
    try:
        header = next(reader, [])
        if _headerless(header):
            body = _limited(_chain([header], reader), max_rows)
            header = [f"column {i + 1}" for i in range(max(map(len, body)))]
        else:
            body = _limited(reader, max_rows)
    except csv.Error as exc:
        raise TableError(
            f"The table cannot be read at its line {reader.line_num} (blank and # lines not "
            f"counted): {exc}. Check the quotes there (a cell that starts with \" must end with "
            f"\"), or export the file again as CSV.",
            "encoding",
        ) from None
    if not header:
        raise _empty_file()
    columns = _unique(header)
    if not body:
        raise TableError(
            f"The table has a header ({', '.join(columns)}) but no data rows. Upload a file with "
            f"one molecule per row under the header.",
            "empty",
        )
    rows = tuple(_fit(cells, len(columns)) for cells in body)
    return Table(columns, rows, "tsv" if delimiter == "\t" else "csv")


def _read_smi(lines: Iterator[str], first: str, max_rows: int) -> Table:
    """A ``.smi`` file: ``SMILES [id]`` per line, under an optional header whose first word is a
    SMILES column name (its words then name the columns)."""
    tokens = first.split()
    has_header = _normal(tokens[0]) in SMILES_HEADERS or _normal(tokens[0]) == "structure"
    names = tokens if has_header else ["smiles"]
    split = max(len(names) - 1, 1)
    rows = _limited(
        (
            without_cx_extension(line).split(None, split)
            for line in (lines if has_header else _chain([first], lines))
        ),
        max_rows,
    )
    if not rows:
        raise TableError(
            f"The file has a header ({' '.join(tokens)}) but no molecules. Upload a file with one "
            f"SMILES per line under the header.",
            "empty",
        )
    width = max(map(len, rows))
    if width > len(names):
        names = [*names, "id"]
    columns = _unique(names)
    return Table(columns, tuple(_fit(cells, len(columns)) for cells in rows), "smi")


def _read_sdf(text: str, max_rows: int) -> Table:
    """An SD file: a ``SMILES`` column from each record's molfile, its ``Name``, its data items
    (:func:`gem_core.chemistry.sdf_table.read_sdf`)."""
    records = read_sdf(text, max_rows)
    if records is None:
        raise _too_many_rows(max_rows)
    if len(records.problems) == len(records.rows):  # no record, or none RDKit can read
        raise TableError(
            "No record of this SD file is a molfile RDKit can read (a record is a molfile "
            "ending in 'M  END', its data items, then '$$$$'). Export the molecules again as an "
            "SD file, or upload a CSV with a SMILES column.",
            "empty",
        )
    columns = _unique(records.columns)
    return Table(columns, records.rows, "sdf", dict(records.problems))


def read_table(
    data: bytes, filename: str = "", max_bytes: int = MAX_UPLOAD_BYTES, max_rows: int = MAX_ROWS
) -> Table:
    """The uploaded ``data`` (CSV / TSV / SMI / SDF bytes) as a :class:`Table`.

    The size is checked before anything is parsed. ``filename``'s extension hints the format;
    without one, molfile records ending in ``$$$$`` mean an SD file, else a ``,``, ``;`` or tab
    in the first line means a table (see :func:`_is_table`).

    Raises:
        TableError: ``too_large`` (over ``max_bytes``), ``encoding`` (not UTF-8 text, a
            workbook or binary file), ``empty`` (nothing but blank lines and comments, or a
            header without rows), ``too_many_rows`` (over ``max_rows`` data rows).
    """
    _check_size(data, max_bytes)
    text = _decode(data)
    if looks_like_sdf(text, filename):
        return _read_sdf(text, max_rows)
    lines = _lines(text)
    first = next(lines, None)
    if first is None:
        raise _empty_file()
    if _is_table(first, filename):
        return _read_delimited(_chain([first], lines), first, filename, max_rows)
    return _read_smi(lines, first, max_rows)


# ----------------------------------------------------------------------------- column guess


@dataclass(frozen=True)
class ColumnGuess:
    """The columns the page pre-selects (None: no good candidate)."""

    smiles: Optional[str]
    outcome: Optional[str]
    id: Optional[str]


def _by_name(columns: Sequence[str], names: Sequence[str], word: str) -> Optional[str]:
    """The first column whose header is one of ``names`` (in their order), else the first whose
    header has ``word`` as one of its words (``'Canonical SMILES (RDKit)'``)."""
    normal = [_normal(c) for c in columns]
    for name in names:
        if name in normal:
            return columns[normal.index(name)]
    for column, n in zip(columns, normal):
        if word in re.split(r"[^a-z0-9]+", n):
            return column
    return None


def smiles_column_by_name(columns: Sequence[str]) -> Optional[str]:
    """The column named like SMILES: one of :data:`SMILES_HEADERS` (any case), else the first
    whose header has the word ``smiles`` (``PUBCHEM_EXT_DATASOURCE_SMILES``)."""
    return _by_name(columns, SMILES_HEADERS, "smiles")


def _smiles_by_content(table: Table) -> Optional[str]:
    """The column whose first non-empty cells parse as SMILES most often (at least half)."""
    best: Optional[str] = None
    best_score = (0.5, 0.0)
    for i, column in enumerate(table.columns):
        sample = [row[i] for row in table.rows if row[i]][:_GUESS_SAMPLE]
        if not sample:
            continue
        share = sum(map(_parses, sample)) / len(sample)
        score = (share, sum(map(len, sample)) / len(sample))  # ties: the longer strings
        if share >= 0.5 and score > best_score:
            best, best_score = column, score
    return best


def id_column_by_name(columns: Sequence[str]) -> Optional[str]:
    """A column named like an id: one of :data:`ID_HEADERS`, or ending in ``_id``."""
    found = _by_name(columns, ID_HEADERS, "id")
    if found is not None:
        return found
    return next((c for c in columns if _normal(c).endswith("_id")), None)


def _names_rows(values: Sequence[str]) -> bool:
    """Whether a column reads as an identifier rather than an outcome: its first filled cells
    are all different and not numbers (``CHEMBL25``, ``aspirin``), so not a class nor a value."""
    sample = [v.strip() for v in values if not _missing(v)][:_GUESS_SAMPLE]
    if len(sample) < 2 or len(set(sample)) < len(sample):
        return False
    return sum(_number(v) is not None for v in sample) < len(sample) / 2


def _repeats(values: Sequence[str]) -> bool:
    filled = [v for v in values if v]
    return len(set(filled)) < len(filled)


def guess_columns(table: Table) -> ColumnGuess:
    """The likely SMILES, outcome and id columns of ``table``.

    SMILES: a header among :data:`SMILES_HEADERS` (any case), else the column whose cells parse
    as SMILES most often. Id: a header among :data:`ID_HEADERS`. Outcome: the first other
    column with a header among :data:`OUTCOME_HEADERS`, else the first other column that does
    not read as an identifier (all different text: a ChEMBL or PubChem id, a name); when no
    column is left and the id column repeats values (a ``.smi`` file of ``SMILES label``), that
    column is the outcome instead.
    """
    columns = table.columns
    smiles = smiles_column_by_name(columns)
    if smiles is None:
        smiles = _smiles_by_content(table)
    rest = [c for c in columns if c != smiles]
    ident = id_column_by_name(rest)
    rest = [c for c in rest if c != ident]
    outcome = _by_name(rest, OUTCOME_HEADERS, "activity") if rest else None
    if outcome is None and rest:
        outcome = next((c for c in rest if not _names_rows(table.column(c))), rest[0])
    if outcome is None and ident is not None and _repeats(table.column(ident)):
        outcome, ident = ident, None
    return ColumnGuess(smiles=smiles, outcome=outcome, id=ident)


# ----------------------------------------------------------------------------- outcomes


def _number(text: str, commas: str = "decimal") -> Optional[float]:
    """``text`` as a finite float, else None. ``commas`` is how its column writes commas
    (:func:`_comma_use`): ``decimal`` (``0,5``), ``thousands`` (``1,200``) or ``unclear``, where
    a cell such as ``1,200`` reads both ways and is not a number."""
    text = text.strip()
    grouped = _THOUSANDS.fullmatch(text) is not None
    only_grouping = grouped and ("." in text or text.count(",") > 1)  # 1,200.5 / 1,200,000
    if only_grouping or (grouped and commas == "thousands"):
        text = text.replace(",", "")
    elif _DECIMAL_COMMA.fullmatch(text) and (commas == "decimal" or not grouped):
        text = text.replace(",", ".")
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _comma_use(values: Sequence[str]) -> str:
    """How a column of numbers writes its commas: ``decimal`` when a cell reads only as a decimal
    comma (``0,5``, ``6,25``), ``thousands`` when one reads only as a grouping (``1,200.5``,
    ``1,200,000``) or another cell has a decimal point (``2.5``), else ``unclear`` (then a cell
    such as ``1,200``, 1.2 or 1200, is refused rather than guessed)."""
    cells = [v.strip() for v in values]
    decimal = any(_DECIMAL_COMMA.fullmatch(v) and not _THOUSANDS.fullmatch(v) for v in cells)
    grouping = any(
        _THOUSANDS.fullmatch(v) and ("." in v or v.count(",") > 1) for v in cells
    ) or any(_DECIMAL_POINT.fullmatch(v) for v in cells)
    if decimal != grouping:
        return "decimal" if decimal else "thousands"
    return "unclear"


def _missing(text: str) -> bool:
    return text.strip().lower() in _MISSING


def _label(text: str) -> str:
    """A class label: the stripped text, numbers written one way (``1.0`` and ``1`` -> ``1``)."""
    value = _number(text)
    if value is None:
        return text.strip()
    return str(int(value)) if value.is_integer() else repr(value)


def _label_key(label: str) -> tuple[int, float, str]:
    """Natural order: numeric labels first, as numbers; then text, ignoring case."""
    value = _number(label)
    return (0, value, label) if value is not None else (1, 0.0, label.lower() + "\0" + label)


def _outcome_kind(values: Sequence[str], outcome: str, column: str, commas: str) -> str:
    """``class`` or ``number`` for the outcome cells ``values`` (see :func:`read_molecules`);
    ``commas``: how the column writes them (:func:`_comma_use`)."""
    if outcome not in ("auto", "class", "number"):
        raise ValueError(f"outcome must be 'auto', 'class' or 'number', not {outcome!r}")
    filled = [v for v in values if not _missing(v)]
    # a cell read both ways (1,200 where the column does not say) is still a number here
    numbers = [_number(v, commas if commas != "unclear" else "thousands") for v in filled]
    if outcome == "number":
        bad = [v for v, x in zip(filled, numbers) if x is None]
        if bad and len(bad) * 2 > len(filled):
            raise TableError(
                f"Column {column!r} is not numeric: {len(bad):,} of its {len(filled):,} values "
                f"are text, e.g. {bad[0]!r}. Choose the column that holds the measured numbers, "
                f"or read this column as class labels.",
                "outcome_not_numeric",
            )
        return "number"
    if outcome == "class" or any(x is None for x in numbers):
        return "class"
    present = [x for x in numbers if x is not None]
    if len(set(present)) <= MAX_INTEGER_CLASSES and all(x.is_integer() for x in present):
        return "class"
    return "number"


def _read_outcome(
    text: str, kind: str, commas: str = "decimal"
) -> tuple[Optional[Union[str, float]], Optional[str]]:
    """``(outcome, refusal kind)`` of one cell; ``commas``: its column's (:func:`_comma_use`)."""
    if _missing(text):
        return None, "empty_outcome"
    if kind == "class":
        return _label(text), None
    value = _number(text, commas)
    if value is None and _THOUSANDS.fullmatch(text.strip()):
        return text, "outcome_unclear"
    return (text, "outcome_not_numeric") if value is None else (value, None)


# ----------------------------------------------------------------------------- rows


@dataclass(frozen=True)
class RowOutcome:
    """One data row as read: 1-based ``row`` (header not counted), ``id``, ``smiles`` text,
    ``outcome`` (class label or number; the raw text when not numeric; None when empty),
    ``canonical`` SMILES of the converted molecule (None when refused) and ``refusal`` =
    ``(reason kind, message)``: a :class:`MoleculeError` kind, ``empty_outcome``,
    ``outcome_not_numeric``, ``outcome_unclear`` (``1,200`` in a column that does not say
    whether its commas are decimal or thousands), ``class_left_out`` (a class the user did not
    choose to train on) or ``censored`` (a number its relation column, ChEMBL's ``Standard
    Relation``, marks as a bound: ``> 10000``)."""

    row: int
    id: Optional[str]
    smiles: str
    outcome: Optional[Union[str, float]]
    canonical: Optional[str]
    refusal: Optional[tuple[str, str]]


def _convert(smiles: str, salts: str) -> Union[MoleculeInstance, MoleculeError]:
    """The molecule of a SMILES cell, or the error that refuses it (never raises)."""
    smiles = without_cx_extension(smiles.strip())
    if any(c.isspace() for c in smiles):
        return MoleculeError(
            f"{smiles!r} contains a space, which a SMILES never has. Put names and notes in a "
            f"column of their own.",
            "parse",
        )
    try:
        return smiles_to_instance(smiles, salts=salts)
    except MoleculeError as exc:
        return exc
    except Exception as exc:  # an RDKit failure no check above foresaw: refuse the row only
        return MoleculeError(f"{smiles!r} could not be converted ({exc}).", "invalid")


def _outcome_message(kind: str, column: str, text: str) -> str:
    if kind == "empty_outcome":
        return f"No value in column {column!r}: fill it in or remove the row."
    if kind == "outcome_unclear":
        one = text.strip()
        small, large = f"{float(one.replace(',', '.')):g}", one.replace(",", "")
        return (
            f"{one!r} in column {column!r} could be {small} or {large}: write it without the "
            f"thousands comma ({large}) or with a decimal point ({small})."
        )
    return (
        f"{text!r} in column {column!r} is not a number: write a number (e.g. 1.5) or leave it out."
    )


# ----------------------------------------------------------------------------- the reading


@dataclass(frozen=True)
class TableReading:
    """The molecules and outcomes of a table, as read for training (see :func:`read_molecules`).

    ``molecules`` and ``outcomes`` are the training set: one per canonical SMILES, aligned.
    ``classes``: sorted labels of the training set (``()`` for numbers). ``duplicates``: valid
    rows repeating an earlier valid row's molecule. ``conflicting``: molecules whose rows
    disagree (different labels; numbers spread over more than 10 % of the outcome's std).
    """

    smiles_column: str
    outcome_column: str
    id_column: Optional[str]
    outcome_kind: str
    rows: tuple[RowOutcome, ...]
    molecules: tuple[MoleculeInstance, ...]
    outcomes: tuple[Union[str, float], ...]
    classes: tuple[str, ...]
    duplicates: int
    conflicting: int
    warnings: tuple[str, ...]
    salts: str = "refuse"

    @property
    def rows_read(self) -> int:
        return len(self.rows)

    @property
    def valid(self) -> int:
        """Rows that converted and have an outcome (a row left out by a rule too: a class not
        chosen, a bound instead of a value)."""
        return sum(1 for r in self.rows if r.refusal is None or r.refusal[0] in LEFT_OUT_KINDS)

    @property
    def left_out(self) -> int:
        """Valid rows left out of training by a rule: :data:`LEFT_OUT_KINDS`."""
        return sum(1 for r in self.rows if r.refusal is not None and r.refusal[0] in LEFT_OUT_KINDS)

    def refused_by_reason(self) -> dict[str, tuple[int, str]]:
        """Reason kind -> ``(rows, first message prefixed with its row number)``, most common
        first."""
        found: dict[str, tuple[int, str]] = {}
        for r in self.rows:
            if r.refusal is not None:
                kind, message = r.refusal
                count, first = found.get(kind, (0, f"Row {r.row}: {message}"))
                found[kind] = (count + 1, first)
        return dict(sorted(found.items(), key=lambda kv: -kv[1][0]))

    def class_counts(self) -> dict[str, int]:
        """Molecules of each class in the training set, in :attr:`classes` order."""
        tally = (
            Counter(str(v) for v in self.outcomes) if self.outcome_kind == "class" else Counter()
        )
        return {c: tally[c] for c in self.classes}

    def outcome_summary(self) -> dict[str, float]:
        """Numbers: count, min, max, mean, std (sample; 0 for one value), median of the training
        set. ``{}`` for classes or no molecules."""
        if self.outcome_kind != "number" or not self.outcomes:
            return {}
        values = [float(v) for v in self.outcomes]
        return {
            "count": float(len(values)),
            "min": min(values),
            "max": max(values),
            "mean": statistics.fmean(values),
            "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "median": statistics.median(values),
        }

    def problem(self) -> Optional[TableError]:
        """What blocks training (None: nothing): no or too few molecules, more than
        :data:`MAX_CLASSES` classes, one class only (or a number that never changes)."""
        n = len(self.molecules)
        if n == 0:
            return self._too_few()
        if self.outcome_kind == "class" and len(self.classes) > MAX_CLASSES:
            return self._too_many_classes()
        if self.outcome_kind == "class" and len(self.classes) < 2:
            return TableError(
                f"All {n:,} molecules have the same label in {self.outcome_column!r} "
                f"({self.classes[0]!r}): a model needs examples of at least two classes. Add "
                f"molecules of another class, or choose another outcome column.",
                "one_class",
            )
        if self.outcome_kind == "number" and len(set(self.outcomes)) < 2:
            return TableError(
                f"All {n:,} values of {self.outcome_column!r} are equal ({self.outcomes[0]:g}): "
                f"there is nothing to learn. Choose the column with the measured values.",
                "one_class",
            )
        if n < MIN_TRAINING_MOLECULES:
            return self._too_few()
        return None

    def _too_few(self) -> TableError:
        n = len(self.molecules)
        notes = []
        if self.rows_read > self.valid:
            notes.append(
                f"{self.rows_read - self.valid:,} of the {self.rows_read:,} rows were refused"
            )
        if self.left_out:
            notes.append(f"{self.left_out:,} rows left out (a class not chosen, or a bound)")
        if self.duplicates:
            notes.append(f"{self.duplicates:,} rows repeat a molecule")
        if self.conflicting and self.outcome_kind == "class":
            notes.append(f"{self.conflicting:,} molecules with conflicting labels left out")
        why = f" ({'; '.join(notes)})" if notes else ""
        fix = ", or fix the refused rows listed below" if self.rows_read > self.valid else ""
        return TableError(
            f"Only {n:,} distinct molecules with an outcome could be read{why}; training needs "
            f"at least {MIN_TRAINING_MOLECULES}. Add molecules{fix}.",
            "too_few_molecules",
        )

    def _too_many_classes(self) -> TableError:
        numeric = sum(1 for c in self.classes if _number(c) is not None)
        hint = (
            " Most labels are numbers: read the column as numbers (regression) instead; rows "
            "with text such as '>10' are then refused."
            if numeric * 2 > len(self.classes)
            else " Choose the column that holds the class labels, or merge classes."
        )
        return TableError(
            f"{self.outcome_column!r} has {len(self.classes):,} different labels; at most "
            f"{MAX_CLASSES} classes can be trained.{hint}",
            "too_many_classes",
        )


def _rows(
    table: Table,
    columns: tuple[int, int, Optional[int]],
    names: tuple[str, str],
    kind: str,
    commas: str,
    salts: str,
    progress: Optional[Callable[[float, str], None]],
) -> tuple[list[RowOutcome], list[Optional[MoleculeInstance]]]:
    """Each row read, with its molecule (None when refused)."""
    s_col, o_col, i_col = columns
    out: list[RowOutcome] = []
    mols: list[Optional[MoleculeInstance]] = []
    total = len(table.rows)
    converted_before: dict[str, Union[MoleculeInstance, MoleculeError]] = {}  # repeated SMILES
    for n, cells in enumerate(table.rows, start=1):
        if progress is not None and n % _PROGRESS_EVERY == 1:
            progress((n - 1) / total, f"Reading molecule {n:,} of {total:,}")
        smiles = cells[s_col]
        ident = (cells[i_col] or None) if i_col is not None else None
        problem = table.problems.get(n - 1)
        converted = converted_before.get(smiles)
        if problem is not None:
            converted = MoleculeError(problem, UNREADABLE_RECORD)
        elif converted is None:
            converted = converted_before[smiles] = _convert(smiles, salts)
        value, bad = _read_outcome(cells[o_col], kind, commas)
        mol: Optional[MoleculeInstance] = None
        refusal: Optional[tuple[str, str]] = None
        if isinstance(converted, MoleculeError):
            refusal = (converted.kind, str(converted))
        elif bad is not None:
            refusal = (bad, _outcome_message(bad, names[1], cells[o_col]))
        else:
            mol = converted
        canonical = mol.smiles if mol is not None else None
        out.append(RowOutcome(n, ident, smiles, value, canonical, refusal))
        mols.append(mol)
    if progress is not None:
        progress(1.0, f"Read {total:,} rows")
    return out, mols


def _as_float(value: Optional[Union[str, float]]) -> float:
    """A valid row's numeric outcome (read as a float by :func:`_read_outcome`)."""
    assert isinstance(value, float)
    return value


def _population_std(values: Sequence[float]) -> float:
    return statistics.pstdev(values) if len(values) > 1 else 0.0


def _training_set(
    rows: Sequence[RowOutcome], mols: Sequence[Optional[MoleculeInstance]], kind: str
) -> tuple[list[MoleculeInstance], list[Union[str, float]], int, int]:
    """``(molecules, outcomes, duplicates, conflicting)``: one molecule per canonical SMILES
    (first row kept); conflicting labels left out, repeated numbers averaged."""
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        if r.refusal is None and r.canonical is not None:
            groups.setdefault(r.canonical, []).append(i)
    duplicates = sum(len(g) - 1 for g in groups.values())
    values = [_as_float(r.outcome) for r in rows if r.refusal is None] if kind == "number" else []
    threshold = CONFLICT_STD_SHARE * _population_std(values)
    molecules: list[MoleculeInstance] = []
    outcomes: list[Union[str, float]] = []
    conflicting = 0
    for members in groups.values():
        seen = [rows[i].outcome for i in members]
        mol = mols[members[0]]
        assert mol is not None
        if kind == "class":
            if len(set(seen)) > 1:
                conflicting += 1
                continue
            outcomes.append(str(seen[0]))
        else:
            numbers = [_as_float(v) for v in seen]
            if max(numbers) - min(numbers) > threshold:
                conflicting += 1
            outcomes.append(statistics.fmean(numbers))
        molecules.append(mol)
    return molecules, outcomes, duplicates, conflicting


def _merge_letter_case(rows: list[RowOutcome]) -> list[tuple[str, list[str]]]:
    """Class labels that differ only in letter case (``Active``, ``active``, ``ACTIVE``) are one
    class: each row's label is rewritten, in place, to the group's most frequent spelling (the
    first met on a tie). Returns ``(kept spelling, other spellings)`` per merged group."""
    spellings: dict[str, Counter] = {}
    for r in rows:
        if r.refusal is None and isinstance(r.outcome, str):
            spellings.setdefault(r.outcome.casefold(), Counter())[r.outcome] += 1
    chosen: dict[str, str] = {}
    merged: list[tuple[str, list[str]]] = []
    for group in spellings.values():
        if len(group) > 1:
            kept = group.most_common(1)[0][0]
            merged.append((kept, [w for w in group if w != kept]))
            chosen.update({w: kept for w in group})
    if chosen:
        for i, r in enumerate(rows):
            if r.refusal is None and isinstance(r.outcome, str) and r.outcome in chosen:
                rows[i] = replace(r, outcome=chosen[r.outcome])
    return merged


#: the refusal of a row whose record the file itself garbles (an SD record RDKit cannot read)
UNREADABLE_RECORD = "unreadable_record"
#: the refusal of a row whose class the user left out (a choice, not a problem of the row)
CLASS_LEFT_OUT = "class_left_out"
#: the refusal of a row whose number is a bound (``>``, ``<`` in its relation column)
CENSORED = "censored"
#: refusals of valid rows, left out of training by a rule rather than for a fault of the row
LEFT_OUT_KINDS = (CLASS_LEFT_OUT, CENSORED)


def _leave_out_classes(rows: list[RowOutcome], classes: Sequence[str], column: str) -> None:
    """Refuse, in place, the rows whose class is not one of ``classes`` (any letter case), as
    :data:`CLASS_LEFT_OUT`; a name that is no class of the column is an error."""
    found = {
        r.outcome.casefold(): r.outcome
        for r in rows
        if r.refusal is None and isinstance(r.outcome, str)
    }
    wanted = [str(c).strip() for c in classes if str(c).strip()]
    unknown = [c for c in wanted if c.casefold() not in found]
    if unknown or not wanted:
        listed = ", ".join(repr(c) for c in sorted(found.values(), key=_label_key))
        what = (
            f"Column {column!r} has no class {', '.join(repr(c) for c in unknown)}."
            if unknown
            else f"No class of column {column!r} was chosen."
        )
        raise TableError(f"{what} Its classes: {listed}. Name two or more of them.", "no_class")
    keep = {c.casefold() for c in wanted}
    kept = ", ".join(found[c] for c in sorted(keep, key=lambda c: _label_key(found[c])))
    for i, r in enumerate(rows):
        if r.refusal is None and isinstance(r.outcome, str) and r.outcome.casefold() not in keep:
            message = f"class {r.outcome!r} is left out (training on {kept})"
            rows[i] = replace(r, refusal=(CLASS_LEFT_OUT, message))


def _leave_out_bounds(
    rows: list[RowOutcome], relations: Sequence[str], names: Sequence[str]
) -> int:
    """Refuse, in place, the valid rows whose relation cell (``relations[i]`` of row ``i``) makes
    their number a bound, as :data:`CENSORED`; ``names``: the outcome and relation columns.
    Returns how many."""
    outcome, rel = names
    count = 0
    for i, r in enumerate(rows):
        if not is_bound(relations[i]):
            continue
        if r.refusal is None:
            bound = f"{relation(relations[i])} {_as_float(r.outcome):g}"
            message = (
                f"{bound} is a bound, not a measured {outcome!r} (column {rel!r}): a model of "
                f"the number would read it as exact, so the row is left out."
            )
        elif r.refusal[0] == "empty_outcome":  # ChEMBL leaves a bound's pChEMBL Value empty
            message = (
                f"no {outcome!r}: column {rel!r} says the measurement is a bound "
                f"({relation(relations[i])}), not a value, so the row is left out."
            )
        else:
            continue
        rows[i] = replace(r, refusal=(CENSORED, message))
        count += 1
    return count


def _measurement_warnings(
    table: Table, rows: Sequence[RowOutcome], outcome: str, censored: Optional[tuple[int, str]]
) -> list[str]:
    """A numeric outcome's notes from its companion columns: rows left out as bounds, kinds of
    measurement or units mixed among the rows trained on."""
    out: list[str] = []
    if censored is not None and censored[0]:
        out.append(
            f"{_rows_word(censored[0])} {'gives' if censored[0] == 1 else 'give'} a bound "
            f"('>', '<' in {censored[1]!r}) rather than a "
            f"measured {outcome!r}: left out of training."
        )
    kept = [i for i, r in enumerate(rows) if r.refusal is None]
    for what in ("type", "units"):
        column = companion_column(table.columns, outcome, what)
        if column is not None:
            cells = table.column(column)
            note = mixed_warning([cells[i] for i in kept], column, what)
            out += [note] if note else []
    return out


def _undetermined_warning(counts: dict[str, int], column: str) -> list[str]:
    """A note for each trained class that records no outcome (PubChem's ``Inconclusive``)."""
    named = undetermined_classes(list(counts))
    others = [c for c in counts if c not in named]
    if not named or len(others) < 2:
        return []
    listed = " and ".join(repr(c) for c in named)
    return [
        f"{'Classes' if len(named) > 1 else 'Class'} {listed} of {column!r} "
        f"{'record' if len(named) > 1 else 'records'} no outcome rather than an outcome, yet the "
        f"model will learn to predict {'them' if len(named) > 1 else 'it'}. Leave "
        f"{'them' if len(named) > 1 else 'it'} out: the page's 'Classes to train on', or "
        f"train --classes {','.join(others)}."
    ]


def _rows_word(n: int) -> str:
    return f"{n:,} row{'s' if n != 1 else ''}"


def _warnings(
    rows: Sequence[RowOutcome],
    kind: str,
    counts: dict[str, int],
    duplicates: int,
    conflicting: int,
    salts: str,
    mols: Sequence[Optional[MoleculeInstance]],
) -> list[str]:
    """Notes that do not block training."""
    out: list[str] = []
    refused = [r for r in rows if r.refusal is not None and r.refusal[0] not in LEFT_OUT_KINDS]
    if rows and len(refused) / len(rows) >= REFUSED_WARNING_SHARE:
        reasons: dict[str, int] = {}
        for r in refused:
            assert r.refusal is not None
            reasons[r.refusal[0]] = reasons.get(r.refusal[0], 0) + 1
        top = max(reasons, key=lambda k: reasons[k])
        word = REJECTION_WORDS.get(top, top.replace("_", " "))
        out.append(
            f"{round(100 * len(refused) / len(rows))} % of the rows were refused ({len(refused):,} "
            f"of {len(rows):,}; most often: {word}, {_rows_word(reasons[top])}). Check that the "
            f"right SMILES and outcome columns are chosen, and see the refused rows below."
        )
    for label, count in counts.items() if len(counts) <= MAX_CLASSES else ():
        if count < FEW_CLASS_MOLECULES:
            out.append(
                f"Class {label!r} has only {count} molecule{'s' if count != 1 else ''}: too few "
                f"to learn it reliably; add more examples of it or merge it with another class."
            )
    if duplicates:
        out.append(
            f"{duplicates:,} rows repeat a molecule of an earlier row (same canonical SMILES); "
            f"each molecule is trained on once."
        )
    if conflicting and kind == "class":
        out.append(
            f"{conflicting:,} molecules occur with different labels; they are left out of "
            f"training. Check their rows."
        )
    elif conflicting:
        out.append(
            f"{conflicting:,} molecules have repeated values that differ by more than "
            f"{round(100 * CONFLICT_STD_SHARE)} % of the outcome's standard deviation; their "
            f"mean is used. Check their rows."
        )
    note = {"largest": "Kept the", "whole": WHOLE_SALT_NOTE}.get(salts)
    if note is not None:
        kept = sum(1 for m in mols if m is not None and any(w.startswith(note) for w in m.warnings))
        what = f"{kept:,} salts or mixtures" if kept != 1 else "1 salt or mixture"
        if kept and salts == "largest":
            out.append(f"{what} {'was' if kept == 1 else 'were'} reduced to the largest fragment.")
        elif kept:
            out.append(
                f"{what} {'is' if kept == 1 else 'are'} read whole: the counter-ions are atoms "
                f"of the molecule's graph."
            )
    return out


#: positive outcomes whose largest is this many times their smallest span "orders of magnitude"
WIDE_SPAN = 1000.0


def _scale_warning(values: Sequence[float], column: str, columns: Sequence[str]) -> list[str]:
    """A numeric outcome of positive values over three or more orders of magnitude (an IC50 in
    nM, a raw concentration): a regressor's squared error is then ruled by the largest values,
    and such measurements are modelled as logarithms (pIC50), so say so (naming the table's
    ``pChEMBL Value`` column when it has one)."""
    if len(values) < 2 or min(values) <= 0:
        return []
    low, high = min(values), max(values)
    if high / low < WIDE_SPAN:
        return []
    decades = math.log10(high / low)
    pchembl = next((c for c in columns if _normal(c) == "pchembl_value"), None)
    fix = (
        f"this table has it as {pchembl!r}: choose that column"
        if pchembl is not None and pchembl != column
        else "add that column and choose it"
    )
    return [
        f"The values of {column!r} span {decades:.0f} orders of magnitude ({low:.3g} to "
        f"{high:.3g}): a model fits such values poorly, ruled by the largest. A potency or a "
        f"concentration is usually modelled as its negative logarithm (pIC50 = 9 − log10 of an "
        f"IC50 in nM; ChEMBL's 'pChEMBL Value'): {fix}."
    ]


def _check_smiles_column(table: Table, s_col: int) -> None:
    """Refuse a column not named like SMILES none of whose first non-empty cells is a SMILES:
    a wrong choice, caught before converting every row. (A column named ``smiles`` full of
    invalid SMILES is read: each row's refusal then says what is wrong with it.)"""
    if _by_name([table.columns[s_col]], SMILES_HEADERS, "smiles") is not None:
        return
    sample = [row[s_col] for row in table.rows if row[s_col]][:_GUESS_SAMPLE]
    if any(map(_parses, sample)):
        return
    example = f" (e.g. {sample[0]!r})" if sample else " (it is empty)"
    guess = _by_name(table.columns, SMILES_HEADERS, "smiles") or _smiles_by_content(table)
    hint = (
        f" Column {guess!r} looks like SMILES." if guess and guess != table.columns[s_col] else ""
    )
    raise TableError(
        f"Column {table.columns[s_col]!r} holds no SMILES{example}. Choose the column with the "
        f"molecules' SMILES.{hint}",
        "no_smiles_column",
    )


def read_molecules(
    table: Table,
    smiles_column: str,
    outcome_column: str,
    id_column: Optional[str] = None,
    outcome: str = "auto",
    salts: str = "refuse",
    progress: Optional[Callable[[float, str], None]] = None,
    classes: Optional[Sequence[str]] = None,
) -> TableReading:
    """Convert every row's SMILES and read its outcome into a :class:`TableReading`.

    ``outcome``: ``"class"`` (labels as text; ``1.0`` is ``1``; ``Active`` and ``active`` one
    class, with a warning), ``"number"`` (a non-numeric value refuses its row), or ``"auto"``:
    numbers when every non-empty value is numeric, except integers with at most 10 distinct
    values, which are classes; any text means classes.
    Numbers may write a decimal comma (``0,5``) or thousands commas (``1,200.5``); which one a
    column uses is read from its cells, and a cell that reads both ways there (``1,200`` in a
    column of ``1,200`` and ``300``) refuses its row (``outcome_unclear``) rather than guess.
    ``salts`` (:data:`~gem_core.chemistry.smiles.SALT_RULES`): a salt's row is refused
    (``refuse``), or its molecule is the salt's largest fragment (``largest``) or the whole salt,
    counter-ions as atoms (``whole``, as the TU Mutagenicity graphs keep them).
    ``classes``: a class outcome's classes to train on (any letter case; e.g. a PubChem assay's
    ``Active`` and ``Inactive`` without its ``Inconclusive``): the other rows are refused as
    ``class_left_out``. A numeric outcome named ``X Value`` is read with its companions, as a
    ChEMBL export writes them (:mod:`gem_core.chemistry.assay_columns`): a row whose ``X
    Relation`` is not ``=`` gives a bound and is left out (``censored``); ``X Type`` or ``X Units``
    mixed among the rows trained on are warned. ``progress(fraction, message)`` is called every
    200 rows.

    Raises:
        TableError: ``no_column`` (a column name not in the table), ``same_column`` (SMILES and
            outcome the same column), ``no_smiles_column`` (a column not named like SMILES
            whose first 20 cells hold none), ``outcome_not_numeric`` (``outcome="number"`` with more
            than half of the values text), ``no_class`` (``classes`` names a class the
            column lacks), ``classes_of_a_number`` (``classes`` for a numeric outcome).
    """
    check_salts(salts)
    s_col, o_col = table.index(smiles_column), table.index(outcome_column)
    i_col = table.index(id_column) if id_column is not None else None
    if s_col == o_col:
        raise TableError(
            f"The SMILES and the outcome are both column {table.columns[s_col]!r}. Choose the "
            f"column with the measured outcome (activity, label, value...) as the outcome.",
            "same_column",
        )
    names = (table.columns[s_col], table.columns[o_col])
    _check_smiles_column(table, s_col)
    values = table.column(names[1])
    commas = _comma_use([v for v in values if not _missing(v)])  # the column's, decided once
    kind = _outcome_kind(values, outcome, names[1], commas)
    rows, mols = _rows(table, (s_col, o_col, i_col), names, kind, commas, salts, progress)
    merged = _merge_letter_case(rows) if kind == "class" else []
    if classes is not None:
        if kind != "class":
            raise TableError(
                f"Column {names[1]!r} reads as numbers, which have no classes to choose: read "
                f"it as a class outcome, or train on every value.",
                "classes_of_a_number",
            )
        _leave_out_classes(rows, classes, names[1])
    censored: Optional[tuple[int, str]] = None
    relation_column = companion_column(table.columns, names[1], "relation")
    if kind == "number" and relation_column is not None:
        relations = table.column(relation_column)
        censored = (
            _leave_out_bounds(rows, relations, (names[1], relation_column)),
            relation_column,
        )
    molecules, outcomes, duplicates, conflicting = _training_set(rows, mols, kind)
    classes = tuple(sorted({str(v) for v in outcomes}, key=_label_key)) if kind == "class" else ()
    tally = Counter(str(v) for v in outcomes) if kind == "class" else Counter()
    counts = {c: tally[c] for c in classes}
    warnings = _warnings(rows, kind, counts, duplicates, conflicting, salts, mols)
    if kind == "number":
        warnings += _measurement_warnings(table, rows, names[1], censored)
        warnings += _scale_warning([float(v) for v in outcomes], names[1], table.columns)
    else:
        warnings += _undetermined_warning(counts, names[1])
    merges = [
        f"{'Labels' if len(others) > 1 else 'Label'} {' and '.join(repr(w) for w in others)} "
        f"{'were' if len(others) > 1 else 'was'} read as {kept!r} (they differ only in letter "
        f"case). Correct the table if they are different classes."
        for kept, others in merged
    ]
    warnings = merges + warnings
    return TableReading(
        smiles_column=names[0],
        outcome_column=names[1],
        id_column=table.columns[i_col] if i_col is not None else None,
        outcome_kind=kind,
        rows=tuple(rows),
        molecules=tuple(molecules),
        outcomes=tuple(outcomes),
        classes=classes,
        duplicates=duplicates,
        conflicting=conflicting,
        warnings=tuple(warnings),
        salts=salts,
    )
