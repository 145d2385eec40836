"""The Molecule page's "File of molecules" tab: the engine path of `python -m gem_core screen`.

The upload is read by ``gem_core.service.screening.iter_rows`` and computed by ``explain_rows``; the page
sorts (flagged first, rejected last), filters, downloads, and draws the selected row.
"""
from __future__ import annotations

import io

import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from gem_core.chemistry.labels import bond_labels
from gem_core.chemistry.smiles import smiles_to_instance
from gem_core.explainers import METHODS, method_spec
from gem_core.service.screening import ScreenSettings, csv_table, explain_rows, iter_rows
from gem_core.service.screening.runner import check_settings

from .conftest import make_app, no_exception, texts

# One row of each kind: valid (a mutagen and a non-mutagen), invalid SMILES, an unsupported
# element, an empty line, a line that is not UTF-8, a salt.
MIXED = (b"smiles,name\n"
         b"OC(=O)c1ccccc1,benzoic acid\n"
         b"C1CC(,broken\n"
         b"O=[N+]([O-])c1ccc2c(c1)Cc1ccccc1-2,2-nitrofluorene\n"
         b"C[Se]C,selenide\n"
         b"\n"
         b"\xff\xfeCCO,latin\n"
         b"Nc1ccc2cc3ccccc3cc2c1,2-aminoanthracene\n"
         b"Nc1ccccc1.Cl,aniline hcl\n")
MIXED_STATUS = {1: ("ok", None), 2: ("rejected", "parse"), 3: ("ok", None),
                4: ("rejected", "element"), 5: ("rejected", "empty"), 6: ("rejected", "encoding"),
                7: ("ok", None), 8: ("rejected", "fragments")}


def _page(methods=("random",)):
    at = make_app(methods=methods)
    at.switch_page("views/molecule.py").run()
    no_exception(at)
    return at


def _upload(at, name: str, data: bytes, mime: str = "text/csv"):
    at.file_uploader(key="mol_file").upload(name, data, mime).run()
    no_exception(at)
    return at


def _table(at):
    """The result table element (its key changes with the result and the filters)."""
    found = [d for d in at.dataframe if (d.key or "").startswith("mol_batch_df")]
    assert len(found) == 1, [d.key for d in at.dataframe]
    return found[0]


def _expected(data: bytes, method: str = "random", k: int | None = None, salts: str = "refuse"):
    """The engine's rows, with the Molecule page's default target (the molecule default)."""
    from gem_core.data.config import molecule_default_target

    rows = list(iter_rows(io.BytesIO(data)))
    return explain_rows(rows, check_settings(ScreenSettings(
        method=method, k=k, target=molecule_default_target(), device="auto",
        salts=salts)))


def _select(at, position: int):
    """Select the ``position``-th shown row, the way Streamlit stores a dataframe selection."""
    at.session_state[_table(at).key] = {"selection": {"rows": [position], "columns": []}}
    at.run()
    no_exception(at)
    return at


def test_the_cli_command_is_shown_above_the_uploader():
    at = _page()
    codes = [c.value for c in at.code]
    assert "python -m gem_core screen library.smi --out hits.parquet" in codes
    assert any("1,000 rows" in c and "command line" in c for c in texts(at.caption))


def test_only_batched_methods_are_offered(needs_mutagenicity_model):
    from theme import method_title

    at = _upload(_page(), "one.smi", b"Nc1ccccc1 aniline\n", "text/plain")
    batched = [m for m in METHODS if method_spec(m).batched]
    assert at.selectbox(key="mol_batch_method").options == [method_title(m) for m in batched]
    assert len(batched) < len(METHODS)


def test_a_mixed_file_gives_one_row_per_input_row(needs_mutagenicity_model):
    at = _upload(_page(), "mixed.csv", MIXED)
    df = _table(at).value
    assert len(df) == len(MIXED_STATUS)
    by_row = {int(r["row"]): r for _, r in df.iterrows()}
    assert {r: (by_row[r]["status"], by_row[r]["reason"] if by_row[r]["status"] != "ok" else None)
            for r in by_row} == MIXED_STATUS
    assert by_row[6]["id"] == "latin" and "not UTF-8" in by_row[6]["message"]
    assert by_row[4]["id"] == "selenide" and "Se" in by_row[4]["message"]
    summary = next(m for m in texts(at.markdown) if "3 of 8 rows screened" in m)
    # counts in words a chemist reads: singular for one, reasons named, not coded
    assert not any(f" 1 {w}s" in summary for w in ("predicted mutagen", "predicted non-mutagen"))
    assert "invalid SMILES" in summary and "salt or mixture" in summary
    assert "fragments" not in summary and " parse" not in summary


def test_flagged_first_by_p_then_rejected_last(needs_mutagenicity_model):
    at = _upload(_page(), "mixed.csv", MIXED)
    df = _table(at).value
    status = list(df["status"])
    ok = [i for i, s in enumerate(status) if s == "ok"]
    assert ok == list(range(len(ok)))  # accepted rows first, rejected after them
    p = list(df["p_mutagen"][: len(ok)])
    assert p == sorted(p, reverse=True)
    flagged = [pred == "mutagen" for pred in df["prediction"][: len(ok)]]
    assert flagged == sorted(flagged, reverse=True)  # flagged before the other accepted ones
    assert list(df["row"][len(ok):]) == sorted(df["row"][len(ok):])  # rejected in input order


def test_the_numbers_shown_are_those_of_explain_rows(needs_mutagenicity_model):
    at = _upload(_page(), "mixed.csv", MIXED)
    df = _table(at).value
    expected = {r["row"]: r for r in _expected(MIXED).to_pylist()}
    for _, shown in df.iterrows():
        exp = expected[int(shown["row"])]
        assert shown["status"] == exp["status"]
        if exp["status"] == "ok":
            assert shown["p_mutagen"] == exp["p_mutagen"]  # exactly, not rounded
            assert shown["fragment"] == exp["fragment"]
            # how like the training molecules: the engine's number where the data is here
            if exp["closest_training"] is not None:
                assert shown["closest_training"] == exp["closest_training"]
            assert shown["prediction"] == {"mutagen": "mutagen",
                                           "nonmutagen": "non-mutagen"}[exp["prediction"]]
        else:
            assert shown["message"] == exp["message"]


def test_gem_numbers_match_the_engine(needs_mutagenicity_model):
    from gem_core.service.molecules import molecule_model

    if not molecule_model("cpu").is_fitted("gem"):
        pytest.skip("Gem is not fitted for the Mutagenicity target (no checkpoint)")
    at = _upload(_page(methods=("gem",)), "mixed.csv", MIXED)
    at.toggle(key="mol_batch_same_k").set_value(True).run()
    at.number_input(key="mol_batch_k").set_value(5).run()
    no_exception(at)
    assert at.selectbox(key="mol_batch_method").value == "gem"
    expected = {r["row"]: r for r in _expected(MIXED, "gem", 5).to_pylist()}
    for _, shown in _table(at).value.iterrows():
        exp = expected[int(shown["row"])]
        if exp["status"] == "ok":
            assert (shown["p_mutagen"], shown["fragment"]) == (exp["p_mutagen"], exp["fragment"])


def test_the_file_and_the_one_molecule_tab_explain_a_molecule_alike(needs_mutagenicity_model):
    """One K rule (a quarter of the molecule's bonds) for both tabs: the file's row of a
    molecule has the bonds of the single view, its K is in the table, and its detail says
    whether the prediction holds on the explanation alone, as the single view does."""
    from gem_core.service.molecules import suggested_k

    smiles = "O=[N+]([O-])c1ccccc1"
    at = _page(methods=("gem",))
    at.text_input(key="mol_smiles").input(smiles)
    at.button(key="mol_explain").click().run()
    no_exception(at)
    k_single = at.slider(key="mol_k").value
    alone_single = [m for m in texts(at.markdown) if "bonds alone:" in m]
    _upload(at, "two.smi", f"{smiles} nitrobenzene\nCCO ethanol\n".encode(), "text/plain")
    assert at.toggle(key="mol_batch_same_k").value is False
    df = _table(at).value
    by_id = {r["id"]: r for _, r in df.iterrows()}
    n_nitro = smiles_to_instance(smiles).instance.num_pairs
    assert int(by_id["nitrobenzene"]["k"]) == suggested_k(n_nitro) == k_single
    assert int(by_id["ethanol"]["k"]) == suggested_k(smiles_to_instance("CCO").instance.num_pairs) < 8
    assert "k" in list(_table(at).proto.column_order)
    assert any("a quarter of each molecule" in m for m in texts(at.markdown))
    rows = _expected(f"{smiles} nitrobenzene\n".encode(), "gem")
    _select(at, list(df["id"]).index("nitrobenzene"))
    assert any("bonds alone:" in m for m in texts(at.markdown))
    # the same bonds and the same sentence as the single view's Gem panel
    detail = [m for m in texts(at.markdown) if "bonds alone:" in m]
    assert detail[-1] == alone_single[0]
    labels = bond_labels(smiles_to_instance(smiles).mol, rows.to_pylist()[0]["bonds"])[0]
    assert "\n".join(labels) in [c.value for c in at.code]
    assert any("(aromatic nitro)" in label for label in labels)


def test_downloads_are_the_whole_result_in_input_order(needs_mutagenicity_model):
    at = _upload(_page(), "mixed.csv", MIXED)
    entry = next(iter(at.session_state["mol_batch"].values()))
    expected = _expected(MIXED)
    got = pq.read_table(io.BytesIO(entry["parquet"]))
    assert got.to_pylist() == expected.to_pylist()
    assert b"gem_screen" in got.schema.metadata
    buf = io.BytesIO()
    pacsv.write_csv(csv_table(expected), buf)
    assert entry["csv"] == buf.getvalue()


def test_filters_by_prediction_status_and_text(needs_mutagenicity_model):
    at = _upload(_page(), "mixed.csv", MIXED)
    at.radio(key="mol_batch_show").set_value("rejected").run()
    no_exception(at)
    assert set(_table(at).value["status"]) == {"rejected"} and len(_table(at).value) == 5
    # rejected rows show why, not empty prediction columns
    assert list(_table(at).proto.column_order) == ["row", "id", "smiles", "reason", "message"]
    at.radio(key="mol_batch_show").set_value("mutagen").run()
    assert set(_table(at).value["prediction"]) <= {"mutagen"}
    at.radio(key="mol_batch_show").set_value("all").run()
    at.text_input(key="mol_batch_search").input("NITRO").run()  # ids: any case
    assert list(_table(at).value["id"]) == ["2-nitrofluorene"]
    at.text_input(key="mol_batch_search").input("[Se]").run()  # SMILES: as typed
    assert list(_table(at).value["id"]) == ["selenide"]
    at.text_input(key="mol_batch_search").input("no such thing").run()
    no_exception(at)
    assert not [d for d in at.dataframe if (d.key or "").startswith("mol_batch_df")]
    assert any("No row matches" in i for i in texts(at.info))


def test_selecting_a_row_opens_that_molecule(needs_mutagenicity_model):
    at = _upload(_page(), "mixed.csv", MIXED)
    assert not any(s.startswith("Row ") for s in texts(at.subheader))  # nothing selected yet
    df = _table(at).value
    expected = {r["row"]: r for r in _expected(MIXED).to_pylist()}
    first = expected[int(df["row"][0])]  # the most likely mutagen
    _select(at, 0)
    assert f"Row {first['row']}" in texts(at.subheader)[-1]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["P(mutagen)"] == f"{first['p_mutagen']:.3f}"
    codes = [c.value for c in at.code]
    assert first["canonical_smiles"] in codes and first["fragment"] in codes
    # the bonds as a chemist reads them: atoms numbered like the drawing, with their group
    assert "\n".join(bond_labels(smiles_to_instance(first["smiles"]).mol,
                                  first["bonds"])[0]) in codes
    # the bonds are pairs of the molecule re-parsed from the row's SMILES
    mol = smiles_to_instance(first["smiles"]).mol
    assert all(mol.GetBondBetweenAtoms(a, b) is not None for a, b in first["bonds"])
    assert len(at.image) >= 1


def test_selecting_a_rejected_row_says_why(needs_mutagenicity_model):
    at = _upload(_page(), "mixed.csv", MIXED)
    at.radio(key="mol_batch_show").set_value("rejected").run()
    df = _table(at).value
    pos = list(df["row"]).index(4)  # the selenide
    _select(at, pos)
    assert any(s.startswith("Row 4") for s in texts(at.subheader))
    assert any("Rejected (element)" in e and "Se" in e for e in texts(at.error))
    assert "C[Se]C" in [c.value for c in at.code]
    # another filter is another table: the selection does not carry over to another molecule
    at.radio(key="mol_batch_show").set_value("all").run()
    no_exception(at)
    assert not any(s.startswith("Row ") for s in texts(at.subheader))


def test_a_table_without_a_smiles_column_is_a_message():
    at = _upload(_page(), "weights.csv", b"name,weight\nfoo,1\n")
    errors = texts(at.error)
    assert any("no SMILES column" in e for e in errors), errors
    assert not [d for d in at.dataframe if (d.key or "").startswith("mol_batch_df")]


def test_a_file_longer_than_the_cap_is_read_up_to_it(needs_mutagenicity_model):
    data = b"".join(b"CCO ethanol-%d\n" % i for i in range(1005))
    at = _upload(_page(), "big library.smi", data, "text/plain")
    assert any("1,005 rows" in w and "first 1,000" in w for w in texts(at.warning))
    assert "python -m gem_core screen 'big library.smi' --out hits.parquet" in \
        [c.value for c in at.code]
    assert len(_table(at).value) == 1000
    assert any("1,000 of 1,000 rows screened" in m for m in texts(at.markdown))


def test_a_method_that_needs_a_fit_is_offered_a_fit(needs_mutagenicity_model,
                                                    pgexplainer_not_fitted):
    from gem_core.service.molecules import molecule_model

    assert not molecule_model("cpu").is_fitted("pgexplainer")
    at = _upload(_page(), "one.smi", b"Nc1ccccc1 aniline\n", "text/plain")
    at.selectbox(key="mol_batch_method").set_value("pgexplainer").run()
    no_exception(at)
    assert at.button(key="mol_fit_pgexplainer").label == "Fit PGExplainer now"
    assert not [d for d in at.dataframe if (d.key or "").startswith("mol_batch_df")]


def test_an_sd_file_is_screened_one_row_per_record(needs_mutagenicity_model):
    """A library as an SD file: each record a row, its title the id, a record RDKit cannot read
    a rejected row named in words."""
    from rdkit import Chem

    out = io.StringIO()
    writer = Chem.SDWriter(out)
    for smiles, title in (("OC(=O)c1ccccc1", "benzoic acid"),
                          ("O=[N+]([O-])c1ccc2c(c1)Cc1ccccc1-2", "2-nitrofluorene")):
        mol = Chem.AddHs(Chem.MolFromSmiles(smiles))
        mol.SetProp("_Name", title)
        writer.write(mol)
    writer.close()
    broken = "broken\n  x\n\n  2  1  0  0  0  0  0  0  0  0999 V2000\nno atom\nM  END\n$$$$\n"
    at = _upload(_page(), "library.sdf", (out.getvalue() + broken).encode(), "chemical/x-mdl-sdfile")
    by_row = {int(r["row"]): r for _, r in _table(at).value.iterrows()}
    assert [by_row[r]["id"] for r in (1, 2)] == ["benzoic acid", "2-nitrofluorene"]
    assert [by_row[r]["status"] for r in (1, 2, 3)] == ["ok", "ok", "rejected"]
    assert by_row[2]["prediction"] == "mutagen"
    summary = next(m for m in texts(at.markdown) if "2 of 3 rows screened" in m)
    assert "unreadable SD record" in summary, summary
