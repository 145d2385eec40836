"""What an assay export's other columns say about its outcome column.

A ChEMBL activity export writes one measurement as four columns: ``Standard Type`` (IC50, Ki,
...), ``Standard Relation`` (``=``, ``>``, ``<``, ...; quoted as ``'='`` in the web export),
``Standard Value`` and ``Standard Units``. A chemist who trains on ``Standard Value`` without
reading the other three gets a silently wrong model: ``> 10000`` read as exactly 10000, IC50s
mixed with Ki, nM with µg/mL. This module finds those companion columns by name (``X Value`` ->
``X Relation`` / ``X Type`` / ``X Units``) and says which rows give a bound rather than a value,
and whether kinds or units are mixed. A PubChem assay's ``Inconclusive`` (or an Ames test's
``equivocal``) is named here too: a label that says "no outcome", not an outcome to predict.

Pure functions over header names and cell texts; :mod:`gem_core.chemistry.tables` applies them.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Optional

__all__ = [
    "MEASURED_RELATIONS",
    "UNDETERMINED_LABELS",
    "companion_column",
    "relation",
    "is_bound",
    "mixed_warning",
    "undetermined_classes",
]

#: relations that mean "this is the measured value" (``~``: ChEMBL's approximately); any other
#: (``>``, ``<``, ``>=``, ``<=``, ``>>``, ``<<``) gives a bound
MEASURED_RELATIONS = frozenset({"", "=", "==", "~"})

#: class labels that record the lack of an outcome (compared in lower case, dots and spaces
#: ignored): PubChem's ``Inconclusive`` and ``Unspecified``, an Ames test's ``equivocal``
UNDETERMINED_LABELS = frozenset(
    {
        "inconclusive",
        "unspecified",
        "unknown",
        "undetermined",
        "notdetermined",
        "nd",
        "nottested",
        "untested",
        "equivocal",
        "ambiguous",
    }
)

_COMPANION_WORDS = {"relation": ("relation",), "type": ("type",), "units": ("units", "unit")}
_SHOWN = 3  # kinds or units named in a warning


def _words(header: str) -> list[str]:
    return [w for w in re.split(r"[^a-z0-9]+", header.strip().lower()) if w]


def companion_column(columns: Sequence[str], outcome: str, what: str) -> Optional[str]:
    """The column that qualifies ``outcome``: ``what`` is ``relation``, ``type`` or ``units``;
    ``Standard Value`` -> ``Standard Relation`` (``standard_value`` -> ``standard_relation``),
    ``Value`` -> ``Relation``; ``pChEMBL Value`` -> ``Standard Type`` (its kind: a pIC50 or a
    pKi) and ``Standard Relation``. None when ``outcome`` has no word ``value`` or no such column."""
    words = _words(outcome)
    if "value" not in words:
        return None
    at = words.index("value")
    wanted = [[*words[:at], word, *words[at + 1 :]] for word in _COMPANION_WORDS[what]]
    if words == ["pchembl", "value"] and what != "units":
        # pChEMBL is -log10 of the molar Standard Value, left empty where that is a bound
        wanted.append(["standard", what])
    for names in wanted:
        found = next((c for c in columns if c != outcome and _words(c) == names), None)
        if found is not None:
            return found
    return None


def relation(cell: str) -> str:
    """A relation cell as written, without spaces and the quotes ChEMBL's export puts round it
    (``"'>'"`` -> ``">"``)."""
    return re.sub(r"[\s'\"]", "", cell)


def is_bound(cell: str) -> bool:
    """Whether a relation cell makes its row's value a bound (``>``, ``<=``), not a measurement."""
    return relation(cell) not in MEASURED_RELATIONS


def mixed_warning(values: Sequence[str], column: str, what: str) -> Optional[str]:
    """A warning when the training rows' cells ``values`` of ``column`` hold more than one kind
    (``what="type"``) or unit (``what="units"``); None when they agree (empty cells ignored)."""
    tally = Counter(v.strip() for v in values if v.strip())
    if len(tally) < 2:
        return None
    named = ", ".join(f"{k}: {n:,}" for k, n in tally.most_common(_SHOWN))
    more = f" and {len(tally) - _SHOWN} more" if len(tally) > _SHOWN else ""
    if what == "type":
        return (
            f"Column {column!r} mixes kinds of measurement ({named}{more} rows): a model of one "
            f"number should learn one kind. Keep the rows of one {column!r} (filter the table) "
            f"before training."
        )
    return (
        f"Column {column!r} mixes units ({named}{more} rows): values in different units are not "
        f"comparable. Convert them to one unit, or keep the rows of one unit, before training."
    )


def undetermined_classes(classes: Sequence[str]) -> tuple[str, ...]:
    """The labels of ``classes`` that record no outcome (:data:`UNDETERMINED_LABELS`), in order."""
    return tuple(c for c in classes if re.sub(r"[\s._\-]", "", c.lower()) in UNDETERMINED_LABELS)
