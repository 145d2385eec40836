"""An SD file read as a table: one row per record, a SMILES written by RDKit from its molfile,
its name and data items as columns; a record RDKit cannot read refused by name, a chemically
impossible one refused as a typed SMILES would be."""

from __future__ import annotations

import io

import pytest
from rdkit import Chem

from gem_core.chemistry.tables import TableError, guess_columns, read_molecules, read_table

MOLECULES = [f"{'C' * k}O" for k in range(1, 31)] + [f"{'C' * k}N" for k in range(1, 31)]


def _sdf(records: list[tuple[str, str, dict[str, str]]], hydrogens: bool = True) -> str:
    """An SD file written by RDKit's SDWriter: (SMILES, title, data items) per record."""
    out = io.StringIO()
    writer = Chem.SDWriter(out)
    for smiles, title, items in records:
        mol = Chem.MolFromSmiles(smiles)
        mol = Chem.AddHs(mol) if hydrogens else mol
        mol.SetProp("_Name", title)
        for key, value in items.items():
            mol.SetProp(key, value)
        writer.write(mol)
    writer.close()
    return out.getvalue()


def _library() -> str:
    return _sdf([(s, f"cpd{i}", {"activity": "active" if "N" in s else "inactive", "MW": "1"})
                 for i, s in enumerate(MOLECULES)])


@pytest.mark.parametrize("filename", ["library.sdf", "LIB.SD", "export.txt", ""])
def test_an_sd_file_reads_as_a_table_by_name_or_by_content(filename):
    table = read_table(_library().encode(), filename)
    assert table.format == "sdf"
    assert table.columns == ("SMILES", "Name", "activity", "MW")
    assert len(table.rows) == len(MOLECULES)
    assert guess_columns(table) == guess_columns(table).__class__("SMILES", "activity", "Name")
    read = read_molecules(table, "SMILES", "activity", "Name")
    assert read.valid == len(MOLECULES) and len(read.molecules) == len(MOLECULES)
    assert read.classes == ("active", "inactive")
    # the molecules are the records' own, hydrogens written explicitly or not
    assert [r.canonical for r in read.rows] == [Chem.MolToSmiles(Chem.MolFromSmiles(s))
                                               for s in MOLECULES]
    assert [r.id for r in read.rows][:2] == ["cpd0", "cpd1"]
    heavy = read_table(_sdf([(s, "", {"y": "1"}) for s in MOLECULES], hydrogens=False).encode())
    assert heavy.columns == ("SMILES", "y")  # no titles: no Name column
    assert [r[0] for r in heavy.rows] == [r[0] for r in table.rows]


def test_a_broken_record_and_an_impossible_molecule_are_refused_by_name():
    good = _sdf([("c1ccccc1O", "phenol", {"y": "1.5"})])
    broken = "bad\n  x\n\n  2  1  0  0  0  0  0  0  0  0999 V2000\nnot an atom line\nM  END\n> <y>\n2\n\n$$$$\n"
    five = Chem.RWMol()
    carbon = five.AddAtom(Chem.Atom(6))
    for _ in range(5):
        five.AddBond(carbon, five.AddAtom(Chem.Atom(9)), Chem.BondType.SINGLE)
    impossible = Chem.MolToMolBlock(five.GetMol(), kekulize=False) + "> <y>\n3\n\n$$$$\n"
    table = read_table((good + broken + impossible).encode(), "mixed.sdf")
    assert len(table.rows) == 3
    read = read_molecules(table, "SMILES", "y", outcome="number")
    kinds = {r.row: r.refusal for r in read.rows}
    assert kinds[1] is None
    assert kinds[2][0] == "unreadable_record" and "SD record 2" in kinds[2][1]
    assert kinds[3][0] == "valence", kinds[3]  # the message a typed SMILES gets


def test_a_data_item_called_smiles_keeps_its_own_column():
    text = _sdf([(s, "", {"SMILES": "as the vendor wrote it", "y": "1"}) for s in MOLECULES[:3]])
    table = read_table(text.encode(), "v.sdf")
    assert table.columns[:2] == ("SMILES", "SMILES (2)")
    assert table.rows[0][0] == "CO" and table.rows[0][1] == "as the vendor wrote it"


@pytest.mark.parametrize(
    ("data", "kind", "words"),
    [
        (b"smiles,y\nCCO,1\n", "empty", "No record of this SD file"),  # a CSV named .sdf
        (b"$$$$\n$$$$\n", "empty", "No record of this SD file"),
    ],
)
def test_an_sd_file_without_a_readable_record_is_one_message(data, kind, words):
    with pytest.raises(TableError) as info:
        read_table(data, "x.sdf")
    assert info.value.kind == kind and words in str(info.value)


def test_an_sd_file_over_the_row_limit_is_refused():
    with pytest.raises(TableError) as info:
        read_table(_library().encode(), "big.sdf", max_rows=10)
    assert info.value.kind == "too_many_rows"
