"""The Molecule page: SMILES submit (good and each bad-input case) and file uploads."""
from __future__ import annotations

import pytest

from gem_core.chem import MoleculeError, smiles_to_instance

from .conftest import make_app, no_exception, texts

BAD = {
    "empty": "",
    "parse": "C1CC(",
    "element": "C[Se]C",
    "fragments": "CC(=O)[O-].[Na+]",
    "too_large": "C" * 80,
}


def _molecule_page(methods=("random",)):
    at = make_app(methods=methods)
    at.switch_page("views/molecule.py").run()
    no_exception(at)
    assert texts(at.header) == ["Explain a molecule"]
    return at


def _submit(at, smiles):
    at.text_input(key="mol_smiles").input(smiles)
    at.button(key="mol_explain").click().run()
    no_exception(at)
    return at


def test_each_bad_input_gets_its_own_message():
    at = _molecule_page()
    for kind, smiles in BAD.items():
        with pytest.raises(MoleculeError) as info:
            smiles_to_instance(smiles)
        assert info.value.kind == kind
        _submit(at, smiles)
        errors = texts(at.error)
        assert errors == [str(info.value)], (kind, errors)
        assert not at.metric  # no prediction shown


def test_salt_accepted_on_request(needs_mutagenicity_model):
    at = _molecule_page()
    at.toggle(key="mol_largest").set_value(True).run()
    _submit(at, BAD["fragments"])
    assert not at.error
    assert any("largest of 2 fragments" in w for w in texts(at.warning))
    assert {m.label for m in at.metric} >= {"Prediction"}


def test_example_smiles_is_predicted_and_explained(needs_mutagenicity_model):
    at = _molecule_page(methods=("random", "gnnexplainer"))
    at.button(key="mol_example_nitrobenzene").click().run()
    no_exception(at)
    assert at.text_input(key="mol_smiles").value == "O=[N+]([O-])c1ccccc1"
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Prediction"] in ("mutagen", "nonmutagen")
    p = float(metrics[f"P({metrics['Prediction']})"])
    assert 0.5 <= p <= 1.0
    assert metrics["Atoms (with H) / bonds"] == "14 / 14"
    assert texts(at.subheader) == ["GNNExplainer", "Random"]  # the sidebar's order
    assert len(at.image) == 2
    md = texts(at.markdown)
    assert sum("explanation bonds" in m for m in md) == 2
    assert any(c.startswith("Fragment: `") for c in texts(at.caption))
    assert at.download_button(key="mol_download_json").label == "Download explanation (JSON)"
    # K change re-thresholds the cached scores
    at.slider(key="mol_k").set_value(3).run()
    no_exception(at)
    assert sum("on the 3 explanation bonds" in m for m in texts(at.markdown)) == 2


def test_typed_smiles(needs_mutagenicity_model):
    at = _molecule_page()
    _submit(at, "Nc1ccc2cc3ccccc3cc2c1 aminoanthracene")
    assert not at.error
    assert any("aminoanthracene" in c for c in texts(at.caption))
    assert {m.label for m in at.metric} >= {"Prediction"}


def test_batch_file_gives_a_table(needs_mutagenicity_model):
    at = _molecule_page()
    data = b"O=[N+]([O-])c1ccccc1 nitrobenzene\nC1CC( broken\nNc1ccccc1 aniline\n"
    at.file_uploader(key="mol_file").upload("mols.smi", data, "text/plain").run()
    no_exception(at)
    assert any("2 of 3 molecules explained" in m for m in texts(at.markdown))
    df = at.dataframe[-1].value
    assert list(df["name"]) == ["nitrobenzene", "broken", "aniline"]
    assert list(df["status"]) == ["ok", "error", "ok"]
    assert "Could not parse" in df["message"][1]
    assert set(df["prediction"].dropna()) <= {"mutagen", "nonmutagen"}
    assert all("-" in b for b in df["bonds"].dropna())
    assert at.download_button(key="mol_batch_csv").label == "Download table (CSV)"


def test_empty_file_is_refused():
    at = _molecule_page()
    at.file_uploader(key="mol_file").upload("empty.csv", b"\n# nothing\n", "text/csv").run()
    no_exception(at)
    assert any("The file is empty" in e for e in texts(at.error))


def test_missing_model_and_data_is_a_message(monkeypatch):
    import streamlit as st

    import gem_core.molecules as molecules
    import gem_core.session as session
    from gem_core.datasets import DataUnavailableError

    def missing(name, *args, **kwargs):
        raise DataUnavailableError(f"Dataset {name} not found (test)")

    monkeypatch.setattr(session, "load_saved_target", lambda name: None)
    monkeypatch.setattr(molecules, "target_checkpoint_available", lambda: False)
    monkeypatch.setattr(session, "load_dataset", missing)
    monkeypatch.setattr(session, "_WORKBENCHES", {})
    st.cache_resource.clear()
    try:
        at = _molecule_page()
        _submit(at, "Nc1ccccc1")
        errors = texts(at.error)
        assert any("No Mutagenicity target model is available" in e for e in errors), errors
        assert not at.metric
    finally:
        st.cache_resource.clear()


def test_toxicophores_are_named_counted_and_outlined(needs_mutagenicity_model):
    """4-nitrotoluene: the aromatic nitro is named, its bonds counted in each explanation and
    outlined in the drawing; Gem's panel says how much of it the distilled teacher keeps."""
    from gem_core.chem import OUTLINE_HEX
    from gem_core.molecules import molecule_model

    if not molecule_model("cpu").is_fitted("gem"):
        pytest.skip("Gem is not fitted for the Mutagenicity target (no checkpoint)")
    at = _molecule_page(methods=("gem", "random"))
    _submit(at, "Cc1ccc(cc1)[N+](=O)[O-]")
    assert any("Toxicophores" in m and "Aromatic nitro" in m and "3 bonds" in m
               for m in texts(at.markdown))
    panel = {m for m in texts(at.markdown) if "toxicophore bonds are in the explanation" in m}
    assert len(panel) >= 1 and any("distilled teacher (predicted label) shares" in m for m in panel)
    # the drawing outlines the toxicophore bonds in their own colour
    from gem_core.chem import draw_molecule_svg, smiles_to_instance

    mol = smiles_to_instance("Cc1ccc(cc1)[N+](=O)[O-]")
    assert OUTLINE_HEX.lower()[1:] not in draw_molecule_svg(mol.mol, [(0, 1)]).lower()
    assert OUTLINE_HEX.lower()[1:] in draw_molecule_svg(mol.mol, [(0, 1)],
                                                        outline_pairs=[(4, 7)]).lower()
    at.toggle(key="mol_tox_outline").set_value(False).run()
    no_exception(at)


def test_a_molecule_without_toxicophores_says_so(needs_mutagenicity_model):
    at = _molecule_page()
    _submit(at, "OC(=O)c1ccccc1")  # benzoic acid
    assert any("None of the encoded mutagenicity toxicophores" in c for c in texts(at.caption))
