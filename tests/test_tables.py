"""gem_core.chemistry.tables: an uploaded assay table read into molecules and outcomes."""

from __future__ import annotations

import os
import random
import time

import pytest

from gem_core.chemistry.assay_columns import companion_column, undetermined_classes
from gem_core.chemistry.tables import (
    MAX_CLASSES,
    MIN_TRAINING_MOLECULES,
    ColumnGuess,
    Table,
    TableError,
    guess_columns,
    read_molecules,
    read_table,
)

NITROBENZENE = "O=[N+]([O-])c1ccccc1"
BENZENE = "c1ccccc1"
ETHANOL = "CCO"
ANILINE = "Nc1ccccc1"
PHENOL = "Oc1ccccc1"
TOLUENE = "Cc1ccccc1"


def _distinct(n: int) -> list[str]:
    """``n`` different real molecules: primary alcohols and amines, C1 to C30."""
    pool = [f"{'C' * k}O" for k in range(1, 31)] + [f"{'C' * k}N" for k in range(1, 31)]
    assert n <= len(pool)
    return pool[:n]


def _csv(header: str, rows: list[tuple[object, ...]]) -> bytes:
    return "\n".join([header, *(",".join(map(str, r)) for r in rows)]).encode()


def _refusal(data: bytes, kind: str, *words: str, **kw) -> TableError:
    with pytest.raises(TableError) as info:
        read_table(data, **kw)
    err = info.value
    assert err.kind == kind, str(err)
    for word in words:
        assert word.lower() in str(err).lower(), str(err)
    return err


# ----------------------------------------------------------------------------- read_table


def test_too_large_is_refused_before_parsing():
    data = b"\xff" * (60 * 2**20)  # not UTF-8: parsing it would fail differently
    start = time.perf_counter()
    _refusal(data, "too_large", "60 MB", "50 MB", "split")
    assert time.perf_counter() - start < 1.0


def test_too_many_rows_states_the_limit():
    data = _csv("smiles,y", [(ETHANOL, i) for i in range(6)])
    _refusal(data, "too_many_rows", "5", "split", max_rows=5)
    assert len(read_table(data, max_rows=6).rows) == 6


@pytest.mark.parametrize(
    "data", [b"", b"   \n\n", b"# only a comment\n\n# another\n", b"\xef\xbb\xbf\r\n"]
)
def test_empty_files(data):
    _refusal(data, "empty", "upload")


@pytest.mark.parametrize("data", [b"smiles,activity\n", b"smiles,activity\n# no rows\n,,\n"])
def test_header_only_is_empty(data):
    err = _refusal(data, "empty", "no data rows")
    assert "smiles, activity" in str(err)


def test_header_only_smi_is_empty():
    _refusal(b"smiles name\n", "empty", "no molecules")


def test_not_utf8_names_the_line():
    data = "smiles,name\nCCO,ethanol\nc1ccccc1,b\u00e9nzene\n".encode("latin-1")
    _refusal(data, "encoding", "line 3", "utf-8")


@pytest.mark.parametrize(
    "data, word",
    [
        (b"PK\x03\x04\x14\x00\x06\x00rest of a workbook", "xlsx"),
        (b"\x1f\x8b\x08\x00gzip", "gzip"),
        ("smiles,y\nCCO,1\n".encode("utf-16"), "utf-16"),
        (b"smiles,y\nCCO\x00,1\n", "binary"),
    ],
)
def test_binary_files_are_refused(data, word):
    _refusal(data, "encoding", word)


def test_garbage_never_raises_anything_but_table_error():
    rng = random.Random(0)
    inputs = [os.urandom(2000), bytes(range(256)) * 4, b'"', b'a,"b\n', b"\r\r\r", b",,,\n;;;"]
    inputs += [bytes(rng.randrange(32, 127) for _ in range(500)) for _ in range(20)]
    inputs += [bytes(rng.choice(b",;\t\n\r\"#CcO1()= ") for _ in range(300)) for _ in range(40)]
    for data in inputs:
        for name in ("", "x.csv", "x.tsv", "x.smi"):
            try:
                table = read_table(data, name)
            except TableError:
                continue
            guess = guess_columns(table)
            assert all(len(r) == len(table.columns) for r in table.rows)
            others = [c for c in table.columns if c != table.columns[0]]
            if others:
                try:
                    read_molecules(table, guess.smiles or table.columns[0], others[0])
                except TableError:
                    pass


def test_small_csv_bom_crlf_quotes_ragged_comments():
    data = (
        b"\xef\xbb\xbfmol_id,smiles,logP,note\r\n"
        b"# a comment\r\n"
        b'1,O=[N+]([O-])c1ccccc1,1.85,"nitro, aromatic"\r\n'
        b"\r\n"
        b"2, c1ccccc1 ,2.13\r\n"
        b"3,CCO,-0.31,x,extra,cells\r\n"
        b",,,\r\n"
    )
    table = read_table(data, "assay.csv")
    assert table.format == "csv"
    assert table.columns == ("mol_id", "smiles", "logP", "note")
    assert table.rows == (
        ("1", NITROBENZENE, "1.85", "nitro, aromatic"),
        ("2", BENZENE, "2.13", ""),
        ("3", ETHANOL, "-0.31", "x"),
    )
    assert table.column("LOGP") == ["1.85", "2.13", "-0.31"]


def test_semicolon_table_and_decimal_commas():
    table = read_table(b"SMILES;pIC50\nCCO;5,5\nc1ccccc1;6,25\n")
    assert table.format == "csv" and table.columns == ("SMILES", "pIC50")
    reading = read_molecules(table, "smiles", "pic50")
    assert reading.outcome_kind == "number" and reading.outcomes == (5.5, 6.25)



def _values(text: str) -> list:
    reading = read_molecules(read_table(text.encode()), "smiles", "y")
    return [r.outcome if r.refusal is None else r.refusal[0] for r in reading.rows]


def test_thousands_commas_are_not_read_as_decimal_commas():
    # a US export: "1,200" is 1200 where the column shows decimal points
    assert _values('smiles,y\nCCO,"1,200"\nCCC,300\nCCN,2.5\n') == [1200.0, 300.0, 2.5]
    assert _values('smiles,y\nCCO,"1,200,000"\nCCC,"1,234.5"\n') == [1200000.0, 1234.5]
    # a European export: "1,200" is 1.2 where the column shows decimal commas
    assert _values("smiles;y\nCCO;1,200\nCCC;0,5\nCCN;3\n") == [1.2, 0.5, 3.0]
    # scientific notation either way (Excel in a German locale writes 1,2E-05)
    assert _values("smiles;y\nCCO;1,2E-05\nCCC;3,5e2\n") == [1.2e-05, 350.0]
    assert _values("smiles,y\nCCO,1.2E-05\nCCC,\"1,200\"\n") == [1.2e-05, 1200.0]


def test_cxsmiles_extensions_are_read_and_other_spaces_refused():
    """A Marvin / ChemDraw export writes CXSMILES (``CCO |$;;$|``): the block after the SMILES
    is read past; a name in the SMILES cell is still refused, as before."""
    rows = "".join(f"{'C' * n}O,{n % 2}\n" for n in range(1, 12))
    text = f'smiles,y\nC[C@H](O)CC |&1:1|,1\n"c1ccccc1 |c:0,2,4|",0\nCCN ethylamine,1\n{rows}'
    reading = read_molecules(read_table(text.encode()), "smiles", "y")
    assert [r.canonical is not None for r in reading.rows[:3]] == [True, True, False]
    assert reading.rows[0].canonical == "CC[C@H](C)O"
    assert "contains a space" in reading.rows[2].refusal[1]
    # a .smi line: the id after the block
    table = read_table(b"CCO |$;;$| ethanol\nc1ccccc1 benzene\n", "a.smi")
    assert table.rows == (("CCO", "ethanol"), ("c1ccccc1", "benzene"))


def test_a_comma_the_column_does_not_explain_refuses_its_row():
    rows = "".join(f"{'C' * n}O,{n}\n" for n in range(1, 12))  # 11 integers: a number column
    reading = read_molecules(read_table(f'smiles,y\nCCN,"1,200"\n{rows}'.encode()), "smiles", "y")
    assert reading.outcome_kind == "number"
    assert reading.rows[0].refusal[0] == "outcome_unclear"
    count, message = reading.refused_by_reason()["outcome_unclear"]
    assert count == 1 and "could be 1.2 or 1200" in message
    assert [r.outcome for r in reading.rows[1:]] == [float(n) for n in range(1, 12)]
    # decimal commas and decimal points in one column: "1,200" reads both ways there too
    assert _values("smiles;y\nCCO;1,200\nCCC;0,5\nCCN;2.5\n") == ["outcome_unclear", 0.5, 2.5]


def test_labels_that_differ_only_in_letter_case_are_one_class():
    labels = ["Active", "active", "inactive", "Active", "ACTIVE", "Inactive", "inactive"]
    text = "smiles,activity\n" + "".join(f"{'C' * (i + 1)}O,{a}\n" for i, a in enumerate(labels))
    reading = read_molecules(read_table(text.encode()), "smiles", "activity")
    assert reading.classes == ("Active", "inactive")  # each group's most frequent spelling
    assert reading.class_counts() == {"Active": 4, "inactive": 3}
    assert [r.outcome for r in reading.rows] == [
        "Active", "Active", "inactive", "Active", "Active", "inactive", "inactive"]
    assert any("'active' and 'ACTIVE' were read as 'Active'" in w for w in reading.warnings)
    assert any("Label 'Inactive' was read as 'inactive'" in w for w in reading.warnings)
    # one molecule listed as "Active" and "active" agrees with itself
    same = read_molecules(read_table(b"smiles,y\nCCO,Active\nOCC,active\nCCN,no\n"), "smiles", "y")
    assert same.conflicting == 0 and same.duplicates == 1 and same.classes == ("Active", "no")

def test_tsv():
    table = read_table(b"Name\tSMILES\tActive\nnitrobenzene\tO=[N+]([O-])c1ccccc1\t1\n", "a.tsv")
    assert table.format == "tsv"
    assert table.columns == ("Name", "SMILES", "Active")
    assert table.rows == (("nitrobenzene", NITROBENZENE, "1"),)
    # a tab without the extension: a table too
    assert read_table(b"smiles\ty\nCCO\t1\n").format == "tsv"


def test_smi_without_header():
    table = read_table(f"{ETHANOL} ethanol\n{BENZENE}\tbenzene ring\n{ANILINE}\n".encode(), "a.smi")
    assert table.format == "smi"
    assert table.columns == ("smiles", "id")
    assert table.rows == ((ETHANOL, "ethanol"), (BENZENE, "benzene ring"), (ANILINE, ""))
    assert read_table(f"{ETHANOL}\n{BENZENE}\n".encode()).columns == ("smiles",)
    # a .smi line with a tab before its id is no table
    assert read_table(f"{ETHANOL}\tethanol\n".encode()).format == "smi"


def test_smi_with_header():
    table = read_table(f"SMILES Name\n{ETHANOL} ethanol\n{BENZENE} benzene\n".encode(), "a.smi")
    assert table.format == "smi"
    assert table.columns == ("SMILES", "Name")
    assert table.rows == ((ETHANOL, "ethanol"), (BENZENE, "benzene"))


def test_smi_extension_with_comma_is_a_table():
    assert read_table(b"smiles,y\nCCO,1\n", "a.smi").format == "csv"


def test_headerless_csv_gets_numbered_columns():
    table = read_table(f"{NITROBENZENE},1\n{ETHANOL},0\n".encode())
    assert table.columns == ("column 1", "column 2")
    assert len(table.rows) == 2
    assert guess_columns(table) == ColumnGuess(smiles="column 1", outcome="column 2", id=None)


def test_duplicate_and_empty_header_names_are_made_unique():
    table = read_table(b"smiles,y,Y,\nCCO,1,2,3\n")
    assert table.columns == ("smiles", "y", "Y (2)", "column 4")


def test_column_unknown_names_the_columns():
    table = read_table(b"smiles,activity\nCCO,1\n")
    with pytest.raises(TableError) as info:
        table.column("label")
    assert info.value.kind == "no_column"
    assert "'smiles', 'activity'" in str(info.value) and "choose" in str(info.value).lower()


# ----------------------------------------------------------------------------- guess_columns


@pytest.mark.parametrize(
    "header, row, guess",
    [
        ("SMILES,Activity", f"{ETHANOL},1", ColumnGuess("SMILES", "Activity", None)),
        ("mol_id,smiles,logP", f"m1,{ETHANOL},0.1", ColumnGuess("smiles", "logP", "mol_id")),
        (
            "Compound ID,structure,pIC50",
            f"c1,{NITROBENZENE},5",
            ColumnGuess("structure", "pIC50", "Compound ID"),
        ),
        (
            "notes,Canonical SMILES,label",
            f"x,{ETHANOL},0",
            ColumnGuess("Canonical SMILES", "label", None),
        ),
        ("name,mol,weight,class", f"aniline,{ANILINE},93,1", ColumnGuess("mol", "class", "name")),
    ],
)
def test_guess_columns(header, row, guess):
    table = read_table(f"{header}\n{row}\n".encode(), "t.csv")
    assert guess_columns(table) == guess


CHEMBL_EXPORT = (
    '"Molecule ChEMBL ID";"Molecule Name";"Molecule Max Phase";"Molecular Weight";"Smiles";'
    '"Standard Type";"Standard Relation";"Standard Value";"Standard Units";"pChEMBL Value";'
    '"Assay ChEMBL ID"\n'
    f'"CHEMBL25";"ASPIRIN";"4";"180.16";"{NITROBENZENE}";"IC50";"\'=\'";"1500.0";"nM";"5.82";'
    '"CHEMBL123"\n'
    f'"CHEMBL112";"";"None";"151.16";"{ANILINE}";"IC50";"\'>\'";"10000.0";"nM";"";"CHEMBL123"\n'
    f'"CHEMBL113";"PHENOL";"4";"94.11";"{PHENOL}";"IC50";"\'=\'";"20.0";"nM";"7.70";"CHEMBL123"\n'
)
PUBCHEM_EXPORT = (
    "PUBCHEM_RESULT_TAG,PUBCHEM_SID,PUBCHEM_CID,PUBCHEM_EXT_DATASOURCE_SMILES,"
    "PUBCHEM_ACTIVITY_OUTCOME,PUBCHEM_ACTIVITY_SCORE,PUBCHEM_ACTIVITY_URL,Potency\n"
    f"1,842121,6603008,{NITROBENZENE},Inactive,0,,\n"
    f"2,842122,6602571,{ANILINE},Active,40,,12.5\n"
)


@pytest.mark.parametrize(
    "text, filename, guess",
    [
        # ChEMBL's activity export (semicolons, quoted): its id, not its often empty name; the
        # pChEMBL value (-log10 molar, given for exact measurements only), not the first column
        (CHEMBL_EXPORT, "DOWNLOAD-x.csv", ColumnGuess("Smiles", "pChEMBL Value", "Molecule ChEMBL ID")),
        (
            PUBCHEM_EXPORT,
            "AID_1.csv",
            ColumnGuess("PUBCHEM_EXT_DATASOURCE_SMILES", "PUBCHEM_ACTIVITY_OUTCOME", "PUBCHEM_CID"),
        ),
        # no outcome header: the first other column that is not a column of names
        (f"smiles,chem,pot\n{ETHANOL},ethanol,1.2\n{PHENOL},phenol,3.4\n", "t.csv",
         ColumnGuess("smiles", "pot", None)),
        # repeated text is a class, not a name
        (f"smiles,chem,pot\n{ETHANOL},toxic,1.2\n{PHENOL},toxic,3.4\n", "t.csv",
         ColumnGuess("smiles", "chem", None)),
    ],
)
def test_guess_columns_of_public_exports(text, filename, guess):
    table = read_table(text.encode(), filename)
    assert guess_columns(table) == guess


def test_a_chembl_export_reads_its_pchembl_values():
    table = read_table(CHEMBL_EXPORT.encode(), "DOWNLOAD-x.csv")
    guess = guess_columns(table)
    read = read_molecules(table, guess.smiles, guess.outcome, guess.id)
    assert read.outcome_kind == "number"
    assert [round(v, 2) for v in read.outcomes] == [5.82, 7.7]  # the censored row has none
    assert [r.id for r in read.rows if r.refusal is not None] == ["CHEMBL112"]
    # its pChEMBL Value is empty because its Standard Relation gives a bound: said so, not
    # "fill in the value"
    assert read.refused_by_reason()["censored"][0] == 1
    assert "'Standard Relation'" in read.refused_by_reason()["censored"][1]
    assert read.valid == 3 and read.left_out == 1


def _chembl(rows: list[tuple[str, str, str, str, str]]) -> Table:
    """A ChEMBL-style export: SMILES, Standard Type / Relation / Value / Units, pChEMBL Value."""
    head = '"Smiles";"Standard Type";"Standard Relation";"Standard Value";"Standard Units";' \
        '"pChEMBL Value"\n'
    body = "".join(";".join(f'"{c}"' for c in row) + "\n" for row in rows)
    return read_table((head + body).encode(), "DOWNLOAD.csv")


def test_a_bound_is_left_out_not_read_as_a_value():
    """``> 10000`` in Standard Relation / Standard Value is a bound: a regression on Standard
    Value must not read it as 10000 (a silent wrong answer); '=', '~' and an empty relation are
    measurements, quoted or not."""
    mols = _distinct(6)
    table = _chembl([
        (mols[0], "IC50", "'='", "15", "nM", "7.82"),
        (mols[1], "IC50", "'>'", "10000", "nM", ""),
        (mols[2], "IC50", "=", "250", "nM", "6.60"),
        (mols[3], "IC50", "'<='", "1", "nM", ""),
        (mols[4], "IC50", "'~'", "40", "nM", "7.40"),
        (mols[5], "IC50", "", "90", "nM", "7.05"),
    ])
    read = read_molecules(table, "Smiles", "Standard Value", outcome="number")
    assert sorted(read.outcomes) == [15.0, 40.0, 90.0, 250.0]
    left = {r.row: r.refusal for r in read.rows if r.refusal is not None}
    assert sorted(left) == [2, 4] and {k for k, _ in left.values()} == {"censored"}
    assert left[2][1].startswith("> 10000 is a bound") and left[4][1].startswith("<= 1 is")
    assert read.valid == 6 and read.left_out == 2 and read.problem() is not None  # 4 < 50
    assert "2 rows were refused" not in read.problem().args[0]
    assert "2 rows left out" in read.problem().args[0]
    bound = [w for w in read.warnings if "give a bound" in w]
    assert bound == ["2 rows give a bound ('>', '<' in 'Standard Relation') rather than a "
                     "measured 'Standard Value': left out of training."]
    # no refused-share warning: a bound is a rule, not a fault of the row
    assert not any("were refused" in w for w in read.warnings), read.warnings


def test_mixed_kinds_and_units_are_warned_and_pchembl_is_named():
    mols = _distinct(5)
    table = _chembl([
        (mols[0], "IC50", "'='", "15", "nM", "7.82"),
        (mols[1], "Ki", "'='", "30000", "nM", "4.52"),
        (mols[2], "IC50", "'='", "2.5", "ug.mL-1", ""),
        (mols[3], "IC50", "'>'", "10", "ug.mL-1", ""),  # left out: its kind and unit too
        (mols[4], "IC50", "'='", "80", "nM", "7.10"),
    ])
    read = read_molecules(table, "Smiles", "Standard Value", outcome="number")
    kinds = [w for w in read.warnings if "mixes kinds" in w]
    units = [w for w in read.warnings if "mixes units" in w]
    assert kinds and "'Standard Type'" in kinds[0] and "(IC50: 3, Ki: 1 rows)" in kinds[0]
    assert units and "'Standard Units'" in units[0] and "(nM: 3, ug.mL-1: 1 rows)" in units[0]
    scale = [w for w in read.warnings if "orders of magnitude" in w]
    assert scale and "has it as 'pChEMBL Value': choose that column" in scale[0]
    # pChEMBL values are unitless, but a pIC50 and a pKi are still two kinds
    p = read_molecules(table, "Smiles", "pChEMBL Value", outcome="number")
    assert any("mixes kinds" in w for w in p.warnings)
    assert not any("mixes units" in w for w in p.warnings)
    assert p.refused_by_reason()["censored"][0] == 1  # the bound's empty pChEMBL
    assert p.refused_by_reason()["empty_outcome"][0] == 1  # an exact value without one
    # one kind, one unit: nothing to say
    one = read_molecules(table, "Smiles", "Standard Value", outcome="number")
    same = _chembl([(m, "IC50", "=", str(v), "nM", "") for m, v in zip(mols, (1, 2, 3, 4, 5))])
    quiet = read_molecules(same, "Smiles", "Standard Value", outcome="number")
    assert not any("mixes" in w or "bound" in w for w in quiet.warnings), quiet.warnings
    assert one.warnings == read.warnings  # deterministic


@pytest.mark.parametrize(
    ("columns", "outcome", "what", "found"),
    [
        (["smiles", "Standard Value", "Standard Relation"], "Standard Value", "relation",
         "Standard Relation"),
        (["smiles", "standard_value", "standard_relation"], "standard_value", "relation",
         "standard_relation"),
        (["smiles", "Value", "Relation", "Units"], "Value", "units", "Units"),
        (["smiles", "value", "unit"], "value", "units", "unit"),
        (["smiles", "pChEMBL Value", "Standard Type"], "pChEMBL Value", "type", "Standard Type"),
        (["smiles", "pChEMBL Value", "Standard Units"], "pChEMBL Value", "units", None),
        (["smiles", "logP", "Relation"], "logP", "relation", None),  # no "value": no pairing
        (["smiles", "Standard Value", "Relation"], "Standard Value", "relation", None),
    ],
)
def test_companion_columns_are_paired_by_name(columns, outcome, what, found):
    assert companion_column(columns, outcome, what) == found


def test_labels_that_record_no_outcome_are_named():
    assert undetermined_classes(["Active", "Inactive", "Inconclusive", "Unspecified"]) == (
        "Inconclusive", "Unspecified")
    assert undetermined_classes(["positive", "negative", "equivocal", "N.D."]) == (
        "equivocal", "N.D.")
    assert undetermined_classes(["toxic", "safe"]) == ()


def _assay(labels: list[str]) -> Table:
    smiles = [NITROBENZENE, BENZENE, ETHANOL, ANILINE, PHENOL, TOLUENE]
    rows = "".join(f"{s},{label}\n" for s, label in zip(smiles, labels))
    return read_table(f"smiles,PUBCHEM_ACTIVITY_OUTCOME\n{rows}".encode(), "aid.csv")


def test_classes_to_train_on_leave_the_others_out():
    table = _assay(["Active", "Inactive", "Inconclusive", "active", "Inactive", "Inconclusive"])
    whole = read_molecules(table, "smiles", "PUBCHEM_ACTIVITY_OUTCOME")
    assert whole.classes == ("Active", "Inactive", "Inconclusive")
    chosen = read_molecules(table, "smiles", "PUBCHEM_ACTIVITY_OUTCOME",
                            classes=["active", "INACTIVE"])  # any letter case
    assert chosen.classes == ("Active", "Inactive")
    assert chosen.class_counts() == {"Active": 2, "Inactive": 2}
    assert len(chosen.molecules) == 4
    left = [r for r in chosen.rows if r.refusal is not None]
    assert [r.row for r in left] == [3, 6]
    assert {r.refusal[0] for r in left} == {"class_left_out"}
    assert "Inconclusive" in left[0].refusal[1] and "Active, Inactive" in left[0].refusal[1]
    # a chosen leave-out is not a problem of the table: no "rows were refused" warning
    assert not any("refused" in w for w in chosen.warnings), chosen.warnings
    # trained on, Inconclusive is named as no outcome, with the flag that leaves it out
    named = [w for w in whole.warnings if "records no outcome" in w]
    assert named and "Class 'Inconclusive'" in named[0], whole.warnings
    assert "train --classes Active,Inactive" in named[0]
    assert not any("records no outcome" in w for w in chosen.warnings)


@pytest.mark.parametrize(
    ("classes", "kind", "words"),
    [
        (["Active", "Toxic"], "no_class", "no class 'Toxic'"),
        ([], "no_class", "Its classes: 'Active', 'Inactive'"),
    ],
)
def test_classes_that_are_not_there_are_one_message(classes, kind, words):
    table = _assay(["Active", "Inactive"] * 3)
    with pytest.raises(TableError) as info:
        read_molecules(table, "smiles", "PUBCHEM_ACTIVITY_OUTCOME", classes=classes)
    assert info.value.kind == kind
    assert words in str(info.value)


def test_classes_of_a_numeric_outcome_are_refused():
    table = read_table(f"smiles,logP\n{ETHANOL},0.1\n{PHENOL},1.5\n".encode())
    with pytest.raises(TableError) as info:
        read_molecules(table, "smiles", "logP", classes=["0.1"])
    assert info.value.kind == "classes_of_a_number"


@pytest.mark.parametrize(
    ("values", "warned"),
    [
        (["20", "1500", "10000", "35000"], True),  # an IC50 in nM: over three decades
        (["5.8", "7.7", "4.1", "6.0"], False),  # its pIC50
        (["-2.5", "0.3", "4.1", "1000"], False),  # not all positive: no logarithm to take
        (["1", "10", "100", "999"], False),  # under three decades
    ],
)
def test_a_numeric_outcome_over_orders_of_magnitude_is_warned(values, warned):
    smiles = [NITROBENZENE, BENZENE, ETHANOL, ANILINE]
    text = "smiles,Standard Value\n" + "".join(f"{s},{v}\n" for s, v in zip(smiles, values))
    read = read_molecules(read_table(text.encode()), "smiles", "Standard Value", outcome="number")
    scale = [w for w in read.warnings if "orders of magnitude" in w]
    assert bool(scale) == warned, read.warnings
    if warned:
        assert "'Standard Value' span 3 orders of magnitude (20 to 3.5e+04)" in scale[0]


def test_guess_smiles_by_content_and_no_smiles():
    table = read_table(
        f"a,b,c\n1,{NITROBENZENE},x\n2,{BENZENE},y\n3,not a smiles,z\n4,{ANILINE},w\n".encode()
    )
    assert guess_columns(table).smiles == "b"
    assert guess_columns(read_table(b"a,b\n1,x\n2,y\n")).smiles is None


def test_guess_smi_labels_are_the_outcome():
    table = read_table(f"{ETHANOL} 1\n{BENZENE} 0\n{ANILINE} 1\n".encode())
    assert guess_columns(table) == ColumnGuess("smiles", "id", None)
    named = read_table(f"{ETHANOL} ethanol\n{BENZENE} benzene\n".encode())
    assert guess_columns(named) == ColumnGuess("smiles", None, "id")


# ----------------------------------------------------------------------------- read_molecules


def _table(rows: list[tuple[object, ...]], header: str = "smiles,y") -> Table:
    return read_table(_csv(header, rows), "t.csv")


@pytest.mark.parametrize(
    "values, kind, classes",
    [
        (["0", "1", "1", "0"], "class", ("0", "1")),
        (["active", "inactive", "active", "inactive"], "class", ("active", "inactive")),
        (["1.5", "2.25", "-0.5", "3"], "number", ()),
        (["1", "2", "3", "4"], "class", ("1", "2", "3", "4")),
        (["1.0", "0.0", "1", "0"], "class", ("0", "1")),
    ],
)
def test_outcome_auto(values, kind, classes):
    smiles = [NITROBENZENE, BENZENE, ETHANOL, ANILINE]
    reading = read_molecules(_table(list(zip(smiles, values))), "smiles", "y")
    assert reading.outcome_kind == kind
    assert reading.classes == classes


def test_many_integers_are_numbers_and_classes_sort_naturally():
    smiles = _distinct(12)
    reading = read_molecules(_table([(s, i * 3) for i, s in enumerate(smiles)]), "smiles", "y")
    assert reading.outcome_kind == "number"
    forced = read_molecules(
        _table([(s, [10, 2, 1][i % 3]) for i, s in enumerate(smiles)]),
        "smiles",
        "y",
        outcome="class",
    )
    assert forced.classes == ("1", "2", "10")
    assert forced.class_counts() == {"1": 4, "2": 4, "10": 4}


def test_outcome_class_forced_normalises_numbers():
    rows = [(NITROBENZENE, "1"), (BENZENE, "1.0"), (ETHANOL, " 2.5 "), (ANILINE, "0")]
    reading = read_molecules(_table(rows), "smiles", "y", outcome="class")
    assert reading.outcome_kind == "class"
    assert reading.outcomes == ("1", "1", "2.5", "0")
    assert reading.classes == ("0", "1", "2.5")


def test_outcome_number_refuses_text_rows():
    rows = [(NITROBENZENE, "1.5"), (BENZENE, ">10"), (ETHANOL, "2"), (ANILINE, "3")]
    reading = read_molecules(_table(rows), "smiles", "y", outcome="number")
    assert reading.outcome_kind == "number"
    assert reading.rows[1].refusal is not None
    assert reading.rows[1].refusal[0] == "outcome_not_numeric"
    assert reading.rows[1].outcome == ">10"
    assert reading.valid == 3
    count, message = reading.refused_by_reason()["outcome_not_numeric"]
    assert count == 1 and message.startswith("Row 2:") and "'>10'" in message


def test_outcome_number_on_a_text_column_is_refused():
    rows = [(NITROBENZENE, "active"), (BENZENE, "inactive"), (ETHANOL, "1")]
    with pytest.raises(TableError) as info:
        read_molecules(_table(rows), "smiles", "y", outcome="number")
    assert info.value.kind == "outcome_not_numeric"
    message = str(info.value)
    assert "'y'" in message and "'active'" in message and "choose" in message.lower()


def test_same_and_unknown_columns():
    table = _table([(ETHANOL, 1)])
    with pytest.raises(TableError) as info:
        read_molecules(table, "smiles", "SMILES")
    assert info.value.kind == "same_column" and "choose" in str(info.value).lower()
    for args in (("smile", "y"), ("smiles", "activity"), ("smiles", "y", "id")):
        with pytest.raises(TableError) as info:
            read_molecules(table, *args)
        assert info.value.kind == "no_column"


def test_a_column_without_smiles_is_refused():
    table = _table([("ethanol", ETHANOL, 1), ("benzene", BENZENE, 0)], "name,structure,y")
    with pytest.raises(TableError) as info:
        read_molecules(table, "name", "y")
    assert info.value.kind == "no_smiles_column"
    assert "'structure' looks like SMILES" in str(info.value)


def test_refused_rows_keep_their_reason():
    rows = [
        (NITROBENZENE, 1),
        ("C1CC", 0),  # unclosed ring
        ("[Se]c1ccccc1", 1),  # selenium: not a training element
        ("CC(=O)[O-].[Na+]", 0),  # a salt
        (ANILINE, ""),  # no outcome
        ("", 1),  # no SMILES
        ("CCO ethanol", 1),  # a name in the SMILES cell
    ]
    reading = read_molecules(_table(rows, "smiles,label"), "smiles", "label")
    kinds = [r.refusal[0] if r.refusal else None for r in reading.rows]
    assert kinds == [None, "parse", "element", "fragments", "empty_outcome", "empty", "parse"]
    assert [r.row for r in reading.rows] == list(range(1, 8))
    assert reading.rows[0].canonical == NITROBENZENE and reading.rows[1].canonical is None
    assert reading.rows[4].outcome is None and reading.rows[4].canonical is None
    assert reading.rows_read == 7 and reading.valid == 1
    refused = reading.refused_by_reason()
    assert refused["element"][1].startswith("Row 3:") and "Se" in refused["element"][1]
    assert "largest fragment" in refused["fragments"][1]

    kept = read_molecules(_table(rows, "smiles,label"), "smiles", "label", salts="largest")
    assert kept.rows[3].refusal is None and kept.rows[3].canonical == "CC(=O)[O-]"
    assert kept.valid == 2 and kept.salts == "largest"
    assert any("largest fragment" in w for w in kept.warnings)
    whole = read_molecules(_table(rows, "smiles,label"), "smiles", "label", salts="whole")
    assert whole.rows[3].refusal is None and whole.rows[3].canonical == "CC(=O)[O-].[Na+]"
    assert whole.valid == 2 and whole.salts == "whole"
    assert any("1 salt or mixture is read whole" in w for w in whole.warnings)
    with pytest.raises(ValueError, match="salts must be one of"):
        read_molecules(_table(rows, "smiles,label"), "smiles", "label", salts="cut")


def test_ids_are_read():
    table = _table([("a1", ETHANOL, 1), ("", BENZENE, 0)], "id,smiles,y")
    reading = read_molecules(table, "smiles", "y", "ID")
    assert reading.id_column == "id"
    assert [r.id for r in reading.rows] == ["a1", None]


def test_class_duplicates_and_conflicts():
    rows = [
        (BENZENE, 1),
        ("C1=CC=CC=C1", 1),  # benzene again (Kekulé): a duplicate, same label
        (ETHANOL, 0),
        ("OCC", 1),  # ethanol again with another label: a conflict
        (ANILINE, 0),
    ]
    reading = read_molecules(_table(rows), "smiles", "y")
    assert reading.duplicates == 2
    assert reading.conflicting == 1
    assert [m.smiles for m in reading.molecules] == [BENZENE, ANILINE]
    assert reading.outcomes == ("1", "0")
    assert reading.molecules[0].input_smiles == BENZENE  # the first occurrence
    assert reading.class_counts() == {"0": 1, "1": 1}
    assert any("different labels" in w for w in reading.warnings)


def test_number_duplicates_are_averaged():
    rows = [(s, float(i)) for i, s in enumerate(_distinct(10))]
    rows += [("OCC", 1.2), (ETHANOL, 1.4)]  # ethanol ("CCO" = _distinct()[1], value 1.0) twice
    reading = read_molecules(_table(rows), "smiles", "y")
    assert reading.outcome_kind == "number"
    assert reading.duplicates == 2
    assert len(reading.molecules) == 10
    assert reading.outcomes[1] == pytest.approx((1.0 + 1.2 + 1.4) / 3)
    assert reading.molecules[1].input_smiles == ETHANOL
    assert reading.conflicting == 1  # spread 0.4 > 10 % of the std (about 2.8)
    close = read_molecules(_table([*rows[:10], (ETHANOL, 1.05)]), "smiles", "y")
    assert close.duplicates == 1 and close.conflicting == 0


def test_outcome_summary():
    rows = [(s, v) for s, v in zip([BENZENE, ETHANOL, ANILINE, PHENOL], [1.0, 2.0, 3.5, 4.5])]
    summary = read_molecules(_table(rows), "smiles", "y").outcome_summary()
    assert summary["count"] == 4 and summary["min"] == 1.0 and summary["max"] == 4.5
    assert summary["mean"] == pytest.approx(2.75) and summary["median"] == pytest.approx(2.75)
    assert summary["std"] == pytest.approx(1.5546, abs=1e-3)
    labelled = read_molecules(_table([(BENZENE, "a"), (ETHANOL, "b")]), "smiles", "y")
    assert labelled.outcome_summary() == {}


def test_half_invalid_gives_a_warning():
    good = _distinct(20)
    rows = [(s, i % 2) for i, s in enumerate(good)] + [("C1CC", 0), ("xyz", 1)] * 10
    reading = read_molecules(_table(rows), "smiles", "y")
    assert reading.valid == 20
    warning = next(w for w in reading.warnings if "refused" in w)
    assert warning.startswith("50 %") and "invalid SMILES" in warning


def test_a_clean_table_has_no_problem():
    rows = [(s, i % 2) for i, s in enumerate(_distinct(MIN_TRAINING_MOLECULES))]
    reading = read_molecules(_table(rows), "smiles", "y")
    assert reading.problem() is None
    assert reading.warnings == ()
    assert len(reading.molecules) == len(reading.outcomes) == MIN_TRAINING_MOLECULES


def test_one_class_is_a_problem():
    rows = [(s, "active") for s in _distinct(60)]
    problem = read_molecules(_table(rows), "smiles", "y").problem()
    assert problem is not None and problem.kind == "one_class"
    assert "two classes" in str(problem)


def test_a_constant_number_is_a_problem():
    rows = [(s, 2.5) for s in _distinct(60)]
    problem = read_molecules(_table(rows), "smiles", "y", outcome="number").problem()
    assert problem is not None and problem.kind == "one_class"


def test_too_few_molecules_is_a_problem():
    rows = [(s, i % 2) for i, s in enumerate(_distinct(MIN_TRAINING_MOLECULES - 1))]
    problem = read_molecules(_table(rows), "smiles", "y").problem()
    assert problem is not None and problem.kind == "too_few_molecules"
    assert str(MIN_TRAINING_MOLECULES) in str(problem) and "add molecules" in str(problem).lower()
    nothing = read_molecules(_table([("C1CC", 1), ("C1CC", 0)]), "smiles", "y").problem()
    assert nothing is not None and nothing.kind == "too_few_molecules"


def test_too_many_classes_is_a_problem():
    rows = [(s, f"class {i}") for i, s in enumerate(_distinct(MAX_CLASSES + 1))]
    reading = read_molecules(_table(rows), "smiles", "y")
    problem = reading.problem()
    assert problem is not None and problem.kind == "too_many_classes"
    assert str(MAX_CLASSES) in str(problem) and "choose" in str(problem).lower()


def test_a_rare_class_gets_a_warning():
    rows = [(s, "rare" if i < 3 else "common") for i, s in enumerate(_distinct(60))]
    reading = read_molecules(_table(rows), "smiles", "y")
    assert reading.problem() is None
    assert reading.class_counts() == {"common": 57, "rare": 3}
    assert [w for w in reading.warnings if "only" in w] == [
        "Class 'rare' has only 3 molecules: too few to learn it reliably; add more examples of "
        "it or merge it with another class."
    ]


def test_4000_rows_read_quickly_with_progress():
    # 3,920 different SMILES (chains around a hetero group), each converted once, then repeats
    groups = ["O", "N", "S", "C(=O)", "OC(=O)"]
    pool = [f"{'C' * a}{g}{'C' * b}" for g in groups for a in range(1, 29) for b in range(1, 29)]
    rows = [(pool[i % len(pool)], i % 2) for i in range(4000)]
    rows[7] = ("C1CC", 1)
    table = read_table(_csv("smiles,y", rows))
    calls: list[tuple[float, str]] = []
    start = time.perf_counter()
    reading = read_molecules(table, "smiles", "y", progress=lambda f, m: calls.append((f, m)))
    assert time.perf_counter() - start < 15
    assert reading.rows_read == 4000 and reading.valid == 3999
    assert 20 <= len(calls) <= 22 and calls[-1][0] == 1.0
    assert [f for f, _ in calls] == sorted(f for f, _ in calls)
    count, message = reading.refused_by_reason()["parse"]
    assert count == 1 and message.startswith("Row 8: Could not parse 'C1CC'")
    # CnOCm is CmOCn: same canonical SMILES, and some repeat rows carry the other label
    assert reading.duplicates > 0 and len(reading.molecules) < 3999


def test_excel_separator_line():
    table = read_table(b"sep=;\r\nsmiles;y\r\nCCO;1\r\n")
    assert table.columns == ("smiles", "y") and table.rows == (("CCO", "1"),)
    _refusal(b"sep=;\r\n", "empty", "upload")


def test_smi_name_with_a_comma_is_no_table():
    table = read_table(f"{ETHANOL} ethanol, absolute\n{BENZENE} benzene\n".encode())
    assert table.format == "smi" and table.rows[0] == (ETHANOL, "ethanol, absolute")


def test_an_overlong_cell_is_a_table_error():
    _refusal(b"smiles,y\n" + b"C" * 200_000 + b",1\n", "encoding", "line 2")


def test_many_classes_give_one_problem_not_many_warnings():
    rows = [(s, f"c{i}") for i, s in enumerate(_distinct(60))]
    reading = read_molecules(_table(rows), "smiles", "y")
    assert reading.problem() is not None and reading.problem().kind == "too_many_classes"
    assert not any("only 1 molecule" in w for w in reading.warnings)


def test_mostly_numeric_labels_suggest_numbers():
    rows = [(s, f"{i * 0.37:.2f}") for i, s in enumerate(_distinct(59))] + [(PHENOL, ">10")]
    reading = read_molecules(_table(rows), "smiles", "y")
    assert reading.outcome_kind == "class"
    problem = reading.problem()
    assert problem is not None and problem.kind == "too_many_classes"
    assert "numbers" in str(problem)
    as_numbers = read_molecules(_table(rows), "smiles", "y", outcome="number")
    assert as_numbers.valid == 59 and as_numbers.problem() is None


def test_the_cli_summary_says_bounds_are_left_out_not_refused():
    from gem_core.cli.train import describe_reading

    mols = _distinct(3)
    table = _chembl([
        (mols[0], "IC50", "'='", "15.5", "nM", "7.81"),
        (mols[1], "IC50", "'>'", "10000", "nM", ""),
        (mols[2], "IC50", "'='", "250.5", "nM", "6.60"),
    ])
    text = describe_reading(read_molecules(table, "Smiles", "Standard Value"))
    assert "read 3 rows: 3 valid molecules, 2 to train on" in text, text
    assert "left out 1 (censored), e.g. Row 2: > 10000 is a bound" in text, text
    assert "note: 1 row gives a bound ('>', '<' in 'Standard Relation')" in text, text
