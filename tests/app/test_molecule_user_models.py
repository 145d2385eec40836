"""Models trained on a user's table, beside the shipped targets (issue 52, point 3): chosen in the
Molecule page's sidebar, they predict and explain one molecule (a classifier's class and the
probability of its first class, a regressor's value), answer the What-if, screen a file; the
Benchmarks page measures them on their test splits. Every number is the engine's.

One small classifier and one small regressor are trained for the module (seconds); Gem is not
fitted for them (a fit takes minutes on 2 cores), so the pages explain with fit-free methods and
offer Gem's fit, as they do for any model without one.
"""
from __future__ import annotations

import os

import pytest

from gem_core.chemistry.smiles import smiles_to_instance

from ..assay_tables import analogue_csv
from .conftest import make_app, no_exception, texts

OWNER = "molpageowner1"
CLASSIFIER = "molpage_assay"
REGRESSOR = "molpage_logp"
WHOLE = "molpage_whole_salts"  # the classifier's table, its salts read whole
NITRO = "O=[N+]([O-])c1ccc(CCC)cc1"  # 4-propylnitrobenzene: the nitro bond is 0-1
OCTANOL = "CCCCCCCCO"
LIBRARY = (b"OC(=O)c1ccc(CC)cc1 ethylbenzoic-acid\nC1CC( broken\n"
           b"O=[N+]([O-])c1ccc(CCC)cc1 propylnitrobenzene\nCCCCCCCCO octanol\n")
WORSE = "How much worse the model does"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """The two models, saved for :data:`OWNER` in a cache of the module's own."""
    import streamlit as st

    from gem_core.chemistry.tables import read_molecules, read_table
    from gem_core.service.user_models import train_user_model

    from ..test_user_regression import logp_table

    old = os.environ.get("GEM_CACHE_DIR")
    os.environ["GEM_CACHE_DIR"] = str(tmp_path_factory.mktemp("molecule-user-models"))
    try:
        classes = read_molecules(read_table(analogue_csv(), "assay.csv"), "smiles", "activity",
                                 "id")
        train_user_model(classes, CLASSIFIER, recipe="small", time_budget_s=5, device="cpu",
                         owner=OWNER)
        whole = read_molecules(read_table(analogue_csv(), "assay.csv"), "smiles", "activity",
                               "id", salts="whole")
        train_user_model(whole, WHOLE, recipe="small", time_budget_s=5, device="cpu",
                         owner=OWNER)
        numbers = read_molecules(read_table(logp_table(0, 80).encode(), "logp.csv"), "smiles",
                                 "logp")
        train_user_model(numbers, REGRESSOR, recipe="small", time_budget_s=5, device="cpu",
                         owner=OWNER)
        yield
    finally:
        st.cache_resource.clear()
        if old is None:
            os.environ.pop("GEM_CACHE_DIR", None)
        else:
            os.environ["GEM_CACHE_DIR"] = old


def _workbench(name: str):
    from gem_core.service.molecules import molecule_model

    return molecule_model("cpu", model=name)


def _page(name: str, methods=("gem", "random"), owner: str = OWNER):
    """The Molecule page of a session of ``owner`` with user model ``name`` chosen."""
    at = make_app(methods=methods, owner_token=owner, sb_device="cpu")
    at.switch_page("views/molecule.py").run()
    no_exception(at)
    box = at.sidebar.selectbox(key="sb_target_molecule")
    assert box.value == "strong"  # the Mutagenicity default, whatever models there are
    box.set_value(f"user:{name}").run()
    no_exception(at)
    return at


def _submit(at, smiles: str):
    at.text_input(key="mol_smiles").input(smiles)
    at.button(key="mol_explain").click().run()
    no_exception(at)
    return at


def _metrics(at) -> dict[str, str]:
    return {m.label: m.value for m in at.main.metric}


def _edges(at):
    found = [w for w in at.multiselect if (w.key or "").startswith("mol_whatif_edges_")]
    assert len(found) == 1
    return found[0]


def _no_mutagenicity_claim(at) -> None:
    words = " ".join(texts(at.main.markdown) + texts(at.main.caption) + list(_metrics(at)))
    assert "P(mutagen)" not in words and "Mutagenicity model (the graph" not in words


def test_a_classifier_of_your_own_predicts_explains_and_answers_the_what_if(models):
    from gem_core.service.molecules import explain_molecules
    from gem_core.service.whatif import Edit, evaluate_edits

    at = _page(CLASSIFIER)
    assert any(f"**Model:** {CLASSIFIER}" in m and "active / inactive" in m
               for m in texts(at.sidebar.markdown))
    # the Mutagenicity targets' figures are not said of a model of one's own
    assert not [c for c in texts(at.sidebar.caption) if c.startswith("Test split")]
    # nor that its explainers' fits ship with the app: they are made on this server
    learn = [c for c in texts(at.sidebar.caption) if " learn from " in c]
    assert len(learn) == 1 and "ship with the app" not in learn[0]
    assert "its training molecules once, on this server" in learn[0]
    _submit(at, NITRO)
    wb = _workbench(CLASSIFIER)
    mol = smiles_to_instance(NITRO)
    res = explain_molecules([mol], [], model=wb)[0]
    shown = _metrics(at)
    assert shown["Prediction"] == res.label_name
    assert shown["P(active)"] == f"{res.probabilities[0]:.3f}"  # its first class, its words
    _no_mutagenicity_claim(at)
    # a classifier's molecule still shows the alerts it carries, and the halo toggle
    assert any(m.startswith("**Toxicophores**") for m in texts(at.main.markdown))
    assert [t for t in at.toggle if t.key == "mol_tox_outline"]
    # the explainers' bonds: Random's panel and its sentence; Gem is offered its one-off fit
    k = at.slider(key="mol_k").value
    assert sum(f"on these {k} bonds alone" in m and m.startswith("P(active) = ")
               for m in texts(at.markdown)) == 1
    assert any(f"Gem is not fitted for the model {CLASSIFIER} yet" in i for i in texts(at.info))
    assert at.button(key="mol_fit_gem").label == "Fit Gem now"
    reading = [m for m in texts(at.markdown) if m.startswith("**In words.**")]
    assert len(reading) == 1 and f"The model predicts {res.label_name}" in reading[0]
    # What if the nitro group's C–N bond were gone: the same model answers
    j = mol.pairs.index((0, 1)) if (0, 1) in mol.pairs else 0
    _edges(at).set_value([j]).run()
    no_exception(at)
    original, (cut,) = evaluate_edits(wb, mol.instance, [Edit.of([mol.pairs[j]])])
    after = _metrics(at)
    assert after["P(active)"] == f"{original.probabilities[0]:.3f} → {cut.probabilities[0]:.3f}"
    assert after[WORSE] == f"{cut.delta_loss:+.3f}"
    assert "**Random**, top" in " ".join(texts(at.markdown))  # re-explained after the edit


def test_a_regressor_of_your_own_gives_its_value_and_its_what_if(models):
    from gem_core.service.molecules import explain_molecules
    from gem_core.service.whatif import Edit, evaluate_edits

    at = _page(REGRESSOR)
    assert any(f"**Model:** {REGRESSOR}" in m and "predicts logp" in m
               for m in texts(at.sidebar.markdown))
    _submit(at, OCTANOL)
    wb = _workbench(REGRESSOR)
    mol = smiles_to_instance(OCTANOL)
    res = explain_molecules([mol], [], model=wb)[0]
    shown = _metrics(at)
    assert shown["Predicted logp"] == f"{res.value:.4g}"
    from gem_core.service.user_models import user_model

    r2 = user_model(REGRESSOR).metrics["test"]["r2"]
    assert shown["Test R² of the model"] == ("n/a" if r2 is None else f"{r2:.3f}")
    assert not [label for label in shown if label.startswith("P(")]
    _no_mutagenicity_claim(at)
    # the Kazius mutagenicity alerts are not a logP model's question: no line, no halo toggle
    words = " ".join(texts(at.main.markdown) + texts(at.main.caption))
    assert "toxicophore" not in words.lower()
    assert not [t for t in at.toggle if t.key == "mol_tox_outline"]
    k = at.slider(key="mol_k").value
    alone = [m for m in texts(at.markdown) if f"on these {k} bonds alone" in m]
    assert len(alone) == 1 and alone[0].startswith("logp = **") and "without them" in alone[0]
    assert not [m for m in texts(at.markdown) if m.startswith("**In words.**")]  # no classes
    _edges(at).set_value([0]).run()
    no_exception(at)
    original, (cut,) = evaluate_edits(wb, mol.instance, [Edit.of([mol.pairs[0]])])
    assert cut.value is not None and not cut.probabilities
    after = _metrics(at)
    assert after["logp"] == f"{original.value:.4g} → {cut.value:.4g}"
    assert after[WORSE] == f"{cut.delta_loss:+.3g}"
    assert cut.delta_loss == pytest.approx((cut.value - original.value) ** 2)


@pytest.mark.parametrize(("name", "column"), [(CLASSIFIER, "p_active"),
                                              (REGRESSOR, "value_logp")])
def test_the_file_tab_screens_with_your_model(models, name, column):
    import io

    from gem_core.service.screening import ScreenSettings, explain_rows, iter_rows

    at = _page(name, methods=("random",))
    assert any(f"--model {name}" in c for c in texts(at.code))
    at.file_uploader(key="mol_file").upload("library.smi", LIBRARY, "text/plain").run()
    no_exception(at)
    at.selectbox(key="mol_batch_method").set_value("random").run()
    no_exception(at)
    summary = [m for m in texts(at.markdown) if "rows screened" in m]
    assert len(summary) == 1 and f"by {name} with Random" in summary[0], summary
    assert "mutagen" not in summary[0]
    df = next(d for d in at.dataframe if (d.key or "").startswith("mol_batch_df")).value
    assert column in df.columns and "p_mutagen" not in df.columns
    expected = explain_rows(list(iter_rows(io.BytesIO(LIBRARY))),
                            ScreenSettings(method="random", model=name))
    values = dict(zip(expected.column("row").to_pylist(), expected.column(column).to_pylist()))
    ok = df[df["status"] == "ok"]
    assert len(ok) == 3
    for _, row in ok.iterrows():
        assert row[column] == pytest.approx(values[int(row["row"])])


def test_the_benchmarks_page_measures_your_model_on_its_test_split(models):
    from gem_core.service.user_models import user_model

    at = make_app(methods=("random",), owner_token=OWNER, sb_device="cpu")
    at.switch_page("views/benchmarks.py").run()
    no_exception(at)
    assert "Your models" in texts(at.subheader)
    at.selectbox(key="bm_user_model").set_value(CLASSIFIER).run()
    no_exception(at)
    # Gem and Gem + check wait for Gem's fit: offered, measured once fitted
    assert {b.key for b in at.button} >= {"bm_user_fit_gem", "bm_user_fit_gem_check"}
    at.button(key="bm_user_go").click().run()
    no_exception(at)

    def table():
        found = [d.value for d in at.dataframe if "sufficiency" in d.value.columns]
        assert len(found) == 1
        return found[0]

    bench = table()
    assert list(bench["method"]) == ["Integrated Gradients", "Random"]
    assert bench["sufficiency"].between(0, 1).all() and bench["necessity"].between(0, 1).all()
    assert (bench["ms per molecule"] > 0).all()
    n = user_model(CLASSIFIER).metrics["test"]["n"]
    assert any(f"{n} test molecules" in c for c in texts(at.caption))
    at.run()  # a rerun shows it again, without measuring
    no_exception(at)
    assert table().equals(bench)


def test_another_session_is_not_offered_your_models(models):
    at = make_app(methods=("random",), owner_token="someoneelse2")
    at.switch_page("views/molecule.py").run()
    no_exception(at)
    options = at.sidebar.selectbox(key="sb_target_molecule").options
    assert not [o for o in options if CLASSIFIER in o or REGRESSOR in o], options
    at.switch_page("views/benchmarks.py").run()
    no_exception(at)
    assert "Your models" not in texts(at.subheader)


def test_the_salts_rule_follows_the_model_until_the_user_changes_it(models):
    """A model trained on a table whose salts were read whole reads a chemist's molecules the
    same way when chosen; a rule picked on the page then stays; back on the Mutagenicity
    models, the page reads salts as it did before."""
    at = _page(WHOLE)
    assert at.selectbox(key="mol_salts").value == "whole"
    at.selectbox(key="mol_salts").set_value("largest").run()
    no_exception(at)
    at.run()
    assert at.selectbox(key="mol_salts").value == "largest"  # the user's pick stays
    at.sidebar.selectbox(key="sb_target_molecule").set_value("strong").run()
    no_exception(at)
    assert at.selectbox(key="mol_salts").value == "refuse"  # as before the model was chosen
    at.sidebar.selectbox(key="sb_target_molecule").set_value(f"user:{CLASSIFIER}").run()
    assert at.selectbox(key="mol_salts").value == "refuse"  # its table refused salts
