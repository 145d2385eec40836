"""The Your data page (AppTest, no browser): upload a table → what was read → train → ask why →
screen the file; models private per browser session unless shared; bad tables are messages."""

from __future__ import annotations

import time

import pytest

from ..assay_tables import analogue_csv
from .conftest import make_app, no_exception, texts

ACTIVE = [
    "O=[N+]([O-])c1ccccc1",
    "O=[N+]([O-])c1ccc(Cl)cc1",
    "O=[N+]([O-])c1ccc(C)cc1",
    "O=[N+]([O-])c1ccc(O)cc1",
    "O=[N+]([O-])c1ccc(N)cc1",
    "O=[N+]([O-])c1cccc(C)c1",
    "O=[N+]([O-])c1cccc(Cl)c1",
    "O=[N+]([O-])c1ccc2ccccc2c1",
    "O=[N+]([O-])c1cccc(O)c1",
    "O=[N+]([O-])c1ccc(Br)cc1",
]
INACTIVE = [
    "OC(=O)c1ccccc1",
    "OC(=O)c1ccc(Cl)cc1",
    "OC(=O)c1ccc(C)cc1",
    "OC(=O)c1ccc(O)cc1",
    "CCO",
    "CCCO",
    "CCCCO",
    "CC(C)O",
    "OC(=O)c1cccc(C)c1",
    "OC(=O)CCC",
]


def _table(copies: int = 4) -> bytes:
    """A small assay table: nitro-aromatics active, acids and alcohols inactive (with an
    invalid SMILES and a salt, refused)."""
    rows = ["compound,smiles,outcome"]
    n = 0
    for _ in range(copies):
        for s in ACTIVE:
            n += 1
            rows.append(f"c{n},{s},active")
        for s in INACTIVE:
            n += 1
            rows.append(f"c{n},{s},inactive")
    rows += ["bad1,C1CC(,active", "salt1,CCO.Cl,inactive"]
    return ("\n".join(rows) + "\n").encode()


def _analogue_table() -> bytes:
    return analogue_csv()


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GEM_CACHE_DIR", str(tmp_path))
    return tmp_path


def _page(**state):
    at = make_app(methods=("gem",), **state)
    at.switch_page("views/your_data.py").run()
    no_exception(at)
    return at


def _upload(at, name: str, data: bytes):
    at.file_uploader(key="yd_upload").upload(name, data, "text/csv").run()
    no_exception(at)
    return at


def _errors(at) -> list[str]:
    return [e.value for e in at.error]


def test_the_summary_says_what_was_read(own_cache):
    at = _upload(_page(), "assay.csv", _table())
    assert at.selectbox(key="yd_smiles_col").value == "smiles"
    assert at.selectbox(key="yd_outcome_col").value == "outcome"
    assert at.selectbox(key="yd_id_col").value == "compound"
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Rows"] == "82"
    assert metrics["Valid molecules"] == "80"
    assert metrics["To train on"] == "20"  # 4 copies of 20 molecules
    assert metrics["Duplicates"] == "60"
    refused = " ".join(str(d.value) for d in at.dataframe)
    assert "parse" in refused and "fragments" in refused
    # 20 molecules cannot train a model: the page says why and offers no Train button
    assert any("molecules" in e for e in _errors(at)), _errors(at)
    assert not [b for b in at.button if b.key == "yd_train"]


def test_salts_are_refused_cut_or_read_whole_as_chosen(own_cache):
    """The salt row ``CCO.Cl``: refused by default; its largest fragment (ethanol, a molecule
    the table already has: a duplicate) or the whole salt (a molecule of its own) on request."""
    at = _upload(_page(), "assay.csv", _table())
    assert at.selectbox(key="yd_salts").value == "refuse"
    at.selectbox(key="yd_salts").set_value("largest").run()
    no_exception(at)
    metrics = {m.label: m.value for m in at.metric}
    assert (metrics["Valid molecules"], metrics["To train on"]) == ("81", "20")
    assert any("reduced to the largest fragment" in w for w in texts(at.warning))
    at.selectbox(key="yd_salts").set_value("whole").run()
    no_exception(at)
    metrics = {m.label: m.value for m in at.metric}
    assert (metrics["Valid molecules"], metrics["To train on"]) == ("81", "21")
    assert any("read whole" in w for w in texts(at.warning))


def test_a_third_class_can_be_left_out(own_cache):
    """A PubChem-style assay with an Inconclusive class: the page offers the classes to train
    on, with Inconclusive (a label that records no outcome) left out to begin with; the user
    may take it back, or leave out another."""
    rows = ["smiles,outcome"]
    rows += [f"{s},active" for s in ACTIVE] + [f"{s},inactive" for s in INACTIVE]
    rows += ["CCOC,inconclusive", "CCCOC,inconclusive", "c1ccncc1,inconclusive"]
    at = _upload(_page(), "aid.csv", ("\n".join(rows) + "\n").encode())
    choice = at.multiselect(key="yd_classes_outcome")
    assert list(choice.options) == ["active", "inactive", "inconclusive"]
    assert list(choice.value) == ["active", "inactive"]
    assert {m.label: m.value for m in at.metric}["To train on"] == "20"
    refused = " ".join(str(d.value) for d in at.dataframe)
    assert "class_left_out" in refused and "inconclusive" in refused
    assert any(m.value == "**Rows refused or left out**" for m in at.markdown)
    choice.set_value(["active", "inactive", "inconclusive"]).run()
    no_exception(at)
    assert {m.label: m.value for m in at.metric}["To train on"] == "23"
    # trained on, it is named in a warning that says how to leave it out
    warned = " ".join(w.value for w in at.warning)
    assert "'inconclusive'" in warned and "records no outcome" in warned, warned


def test_an_sd_file_is_read_as_its_records(own_cache):
    """A chemist's SD file: the page guesses the SMILES written from each record, the data item
    that is the outcome and the title as the id."""
    from rdkit import Chem
    import io

    out = io.StringIO()
    writer = Chem.SDWriter(out)
    for copy in range(3):
        for label, group in (("active", ACTIVE), ("inactive", INACTIVE)):
            for i, smiles in enumerate(group):
                mol = Chem.AddHs(Chem.MolFromSmiles(smiles))
                mol.SetProp("_Name", f"{label}{copy}-{i}")
                mol.SetProp("Ames", label)
                writer.write(mol)
    writer.close()
    at = _upload(_page(), "library.sdf", out.getvalue().encode())
    assert at.selectbox(key="yd_smiles_col").value == "SMILES"
    assert at.selectbox(key="yd_outcome_col").value == "Ames"
    assert at.selectbox(key="yd_id_col").value == "Name"
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Rows"] == "60" and metrics["Valid molecules"] == "60"
    assert metrics["To train on"] == "20" and metrics["Duplicates"] == "40"


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"", "empty"),
        (b"name,activity\nfoo,1\nbar,0\n", "SMILES"),
        (b"smiles,y\n" + b"".join(f"{'C' * i}O,1\n".encode() for i in range(1, 70)), "class"),
    ],
)
def test_bad_tables_are_one_message(own_cache, data, words):
    at = _upload(_page(), "bad.csv", data)
    assert any(words.lower() in e.lower() for e in _errors(at)), _errors(at)
    assert not [b for b in at.button if b.key == "yd_train"]


def test_upload_train_explain_screen(own_cache):
    at = _upload(_page(), "analogues.csv", _analogue_table())
    assert not _errors(at), _errors(at)
    at.text_input(key="yd_name").input("analogues")
    at.radio(key="yd_recipe").set_value("small")
    at.slider(key="yd_budget").set_value(30)
    at.button(key="yd_train").click().run()
    no_exception(at)
    from gem_core.service.user_models import user_model

    deadline = time.monotonic() + 240
    from state.training_jobs import job_of

    owner = at.session_state["owner_token"]
    while job_of(owner) is not None and job_of(owner).running and time.monotonic() < deadline:
        time.sleep(1)
    job = job_of(owner)
    assert job is not None and job.state == "done", (job.state, job.error, job.message)
    model = user_model("analogues", owner)
    at.run()
    no_exception(at)
    assert at.selectbox(key="yd_model").value == "analogues"
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Test molecules"] == str(model.metrics["test"]["n"])
    # how its test molecules unlike its training ones fared: the engine's record
    from gem_core.api import domain_record, molecule_model

    record = domain_record(molecule_model("auto", model="analogues"))
    line = [c for c in texts(at.caption) if c.startswith("Test molecules unlike the training")]
    assert len(line) == 1, texts(at.caption)
    assert f": {record.n_outside} of {model.metrics['test']['n']}" in line[0]
    at.text_input(key="yd_ask").input("O=[N+]([O-])c1ccc(CCC)cc1").run()
    no_exception(at)
    answer = " ".join(m.value for m in at.markdown if "predicts" in m.value)
    from gem_core.service.molecules import explain_smiles

    expected = explain_smiles("O=[N+]([O-])c1ccc(CCC)cc1", model="analogues", read=False)
    assert f"predicts {expected['prediction']['label']}" in answer
    assert f"p = {expected['prediction']['probability']:.3f}" in answer
    at.button(key="yd_screen_go").click().run()
    no_exception(at)
    screened = [d for d in at.dataframe if "probability" in d.value.columns]
    assert len(screened) == 1 and len(screened[0].value) == 60
    at.button(key="yd_bench_go").click().run()
    no_exception(at)
    bench = [d.value for d in at.dataframe if "sufficiency" in d.value.columns]
    assert len(bench) == 1 and len(bench[0]) == 4
    assert bench[0]["sufficiency"].between(0, 1).all()
    assert (bench[0]["ms per molecule"] > 0).all()

    # another browser session does not see the model until it is shared by name
    other = _page()
    assert not [s for s in other.selectbox if s.key == "yd_model"]
    other.text_input(key="yd_shared_name").input("analogues").run()
    assert any("No model named" in e for e in _errors(other))
    at.toggle(key="yd_share_analogues").set_value(True).run()
    other = _page()
    other.text_input(key="yd_shared_name").input("analogues").run()
    no_exception(other)
    assert not _errors(other)
    assert not [b for b in other.button if b.key == "yd_delete"]  # shared, not theirs
    at.button(key="yd_delete").click().run()
    no_exception(at)
    with pytest.raises(ValueError):
        user_model("analogues")


def test_a_bad_model_name_is_said_at_once(own_cache):
    from state.training_jobs import job_of

    at = _upload(_page(), "analogues.csv", _analogue_table())
    for name in ("Bad-Name!", "mutagenicity", ""):
        at.text_input(key="yd_name").input(name)
        at.button(key="yd_train").click().run()
        no_exception(at)
        assert any("name" in e.lower() for e in _errors(at)), (name, _errors(at))
        assert job_of(at.session_state["owner_token"]) is None


def test_a_numeric_outcome_trains_a_regressor_and_is_explained(own_cache):
    """A table of numbers (Crippen logP of real molecules): summary, train, figures, ask, screen."""
    from state.training_jobs import job_of

    from gem_core.service.molecules import explain_smiles

    from ..test_user_regression import logp_table

    at = _upload(_page(), "logp.csv", logp_table(0, 80).encode())
    assert not _errors(at), _errors(at)
    assert any("a number: the model will be a regressor" in m.value for m in at.markdown)
    assert at.get("plotly_chart")  # the outcome's histogram, on a numeric axis
    at.text_input(key="yd_name").input("logp_page")
    at.radio(key="yd_recipe").set_value("small")
    at.slider(key="yd_budget").set_value(30)
    at.button(key="yd_train").click().run()
    no_exception(at)
    owner = at.session_state["owner_token"]
    deadline = time.monotonic() + 240
    while job_of(owner) is not None and job_of(owner).running and time.monotonic() < deadline:
        time.sleep(1)
    job = job_of(owner)
    assert job is not None and job.state == "done", (job.state, job.error, job.message)
    at.run()
    no_exception(at)
    metrics = {m.label: m.value for m in at.metric}
    assert "Test R²" in metrics and "Test RMSE" in metrics and "Test accuracy" not in metrics
    assert any("Predicted against measured logp" in m.value for m in at.markdown)
    at.text_input(key="yd_ask").input("CCCCCCCCO").run()
    no_exception(at)
    answer = " ".join(m.value for m in at.markdown if "predicts" in m.value)
    expected = explain_smiles("CCCCCCCCO", model="logp_page", read=False)
    assert f"predicts logp = {expected['prediction']['value']:.4g}" in answer, answer
    at.button(key="yd_screen_go").click().run()
    no_exception(at)
    screened = [d.value for d in at.dataframe if "predicted" in d.value.columns]
    assert len(screened) == 1 and "probability" not in screened[0].columns
    assert screened[0]["predicted"].dtype.kind == "f" and len(screened[0]) > 60
    assert any("mean absolute error" in c.value for c in at.caption)
    at.button(key="yd_bench_go").click().run()
    no_exception(at)
    bench = [d.value for d in at.dataframe if "sufficiency" in d.value.columns]
    assert len(bench) == 1 and len(bench[0]) == 4 and "toxicophore AUC" not in bench[0].columns
