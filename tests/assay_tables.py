"""A small assay table shared by the Your data tests (engine, AppTest, browser)."""

from __future__ import annotations

from collections.abc import Sequence


def analogue_csv(extra_rows: Sequence[str] = ()) -> bytes:
    """60 distinct molecules in two classes: para-alkyl nitrobenzenes (active) and benzoic
    acids (inactive), chains of 1 to 30 carbons; header ``smiles,activity,id``."""
    rows = ["smiles,activity,id"]
    for i in range(1, 31):
        rows.append(f"O=[N+]([O-])c1ccc({'C' * i})cc1,active,n{i}")
        rows.append(f"OC(=O)c1ccc({'C' * i})cc1,inactive,a{i}")
    return ("\n".join([*rows, *extra_rows]) + "\n").encode()
