"""``screen --model NAME``: a library screened with a model trained on a user's table.

One small model is trained once for the module (80 real NCI compounds, labelled active /
inactive; a private cache folder), with Gem fitted for it; every screen path (this process,
worker processes, the CUDA layout's parsing workers, Ray) must give its class names, its
``p_active`` column instead of ``p_mutagen``, and the same bytes.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from rdkit import RDConfig

from gem_core.cli import main
from gem_core.service.screening import SCHEMA, ScreenSettings, iter_rows, screen, screen_schema
from gem_core.service.screening.chunk import class_column

PROJECT = Path(__file__).resolve().parent.parent
NCI_SMI = Path(RDConfig.RDDataDir) / "NCI" / "first_5K.smi"  # real compounds, shipped by RDKit
MODEL = "screenme"
CLASSES = ("active", "inactive")  # sorted: "active" is the model's first class


def _label(smiles: str) -> str:
    """A learnable outcome for the test's table: nitrogen or not."""
    return "active" if "N" in smiles else "inactive"


@pytest.fixture(scope="module")
def user_model(tmp_path_factory):
    """The user model ``screenme`` (recipe ``small``, Gem fitted) in a cache folder of its own;
    the session's cache folder is back afterwards."""
    from gem_core.chemistry.tables import read_molecules, read_table
    from gem_core.service.user_models import fit_gem, train_user_model

    old = os.environ.get("GEM_CACHE_DIR")
    os.environ["GEM_CACHE_DIR"] = str(tmp_path_factory.mktemp("user-model-cache"))
    try:
        lines = [line.decode().split("\t")[0] for line in NCI_SMI.read_bytes().splitlines()[:80]]
        text = "smiles,activity\n" + "\n".join(f"{s},{_label(s)}" for s in lines)
        reading = read_molecules(read_table(text.encode(), "assay.csv"), "smiles", "activity")
        assert reading.classes == CLASSES
        model = train_user_model(reading, MODEL, recipe="small", time_budget_s=5, device="cpu")
        fit_gem(MODEL, device="cpu")
        yield model
    finally:
        if old is None:
            os.environ.pop("GEM_CACHE_DIR", None)
        else:
            os.environ["GEM_CACHE_DIR"] = old


def _library(tmp_path: Path, start: int = 1000, n: int = 24) -> Path:
    """``n`` NCI compounds the model has not seen, and two rows that are no molecules."""
    lines = NCI_SMI.read_bytes().splitlines()[start : start + n] + [b"C1CC broken", b""]
    path = tmp_path / "library.smi"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def _probabilities(smiles: list[str]) -> list[list[float]]:
    from gem_core.chemistry.smiles import smiles_to_instance
    from gem_core.service.molecules import molecule_model

    wb = molecule_model("cpu", model=MODEL)
    instances = [smiles_to_instance(s).instance for s in smiles]
    return wb.predict_proba(instances).tolist()


def test_the_schema_is_mutagenicitys_unless_a_user_model_answers():
    assert screen_schema() == SCHEMA and "p_mutagen" in SCHEMA.names
    assert ScreenSettings().schema is SCHEMA and "model" not in ScreenSettings().as_dict()
    other = screen_schema("Active (IC50)")
    assert other.names == ["p_active__ic50_" if n == "p_mutagen" else n for n in SCHEMA.names]
    assert [class_column(c) for c in ("active", "0", "Non-Toxic", "µM")] == [
        "active",
        "0",
        "non_toxic",
        "_m",
    ]


def test_the_command_screens_with_the_user_model_into_parquet_and_csv(user_model, tmp_path, capsys):
    from gem_core.service.molecules import explain_smiles

    src = _library(tmp_path)
    out = tmp_path / "hits.parquet"
    common = ["--workers", "1", "--no-progress", "--json", "-", "--k", "4"]
    assert main(["screen", str(src), "--out", str(out), "--model", "ScreenMe", *common]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["model"] == MODEL and summary["target"] == "strong"
    assert "predicted_mutagens" not in summary and "p_mutagen" not in captured.out
    assert f"with model {MODEL} (trained on your table)" in captured.err
    assert "Mutagenicity" not in captured.err

    table = pq.read_table(out)
    assert table.schema.names == screen_schema("active").names
    assert "p_active" in table.column_names and "p_mutagen" not in table.column_names
    rows = table.to_pylist()
    ok = [r for r in rows if r["status"] == "ok"]
    assert len(rows) == 26 and len(ok) >= 20 and rows[-2]["status"] == "rejected"
    assert {r["prediction"] for r in ok} <= set(CLASSES)
    assert all(r["prediction"] is None and r["p_active"] is None for r in rows[-2:])
    assert all(0.0 <= r["p_active"] <= 1.0 for r in ok)
    assert summary["predicted_active"] == sum(r["prediction"] == "active" for r in ok)
    assert summary["ok"] == len(ok) and summary["rows"] == 26
    assert f"({summary['predicted_active']} predicted active)" in captured.err
    # the model's own probabilities, and `explain --model`'s bonds
    some = ok[:5]
    for row, proba in zip(some, _probabilities([r["smiles"] for r in some])):
        assert row["p_active"] == pytest.approx(proba[0], abs=1e-5)
        assert row["prediction"] == CLASSES[int(proba[1] > proba[0])]
    for row in some[:2]:
        ref = explain_smiles(row["smiles"], k=4, device="cpu", model=MODEL, read=False)
        assert row["bonds"] == ref["explanation"]["bonds"]
        assert ref["prediction"]["label"] == row["prediction"]
    # the toxicophores are the molecule's chemistry, whichever model answered
    assert "toxicophores" in table.column_names

    csv_out = tmp_path / "hits.csv"
    assert main(["screen", str(src), "--out", str(csv_out), "--model", MODEL, *common]) == 0
    capsys.readouterr()
    text = pacsv.read_csv(csv_out).to_pydict()
    assert "p_active" in text and "p_mutagen" not in text
    kept = [i for i, r in enumerate(rows) if r["status"] == "ok"]
    assert [text["p_active"][i] for i in kept] == [rows[i]["p_active"] for i in kept]
    assert [text["prediction"][i] for i in kept] == [rows[i]["prediction"] for i in kept]


def test_every_path_gives_the_same_bytes_with_a_user_model(user_model, tmp_path):
    """This process, worker processes, the CUDA layout's parsing workers and Ray."""
    from gem_core.service.screening.chunk import screen_chunk
    from gem_core.service.screening.runner import _Processes, check_settings

    src = _library(tmp_path, start=2000, n=30)
    settings = ScreenSettings(model=MODEL, k=3)
    one = screen(src, tmp_path / "one.parquet", settings, workers=1, chunk_size=7)
    two = screen(src, tmp_path / "two.parquet", settings, workers=2, chunk_size=7)
    assert (one.backend, two.backend, one.model) == ("process", "processes", MODEL)
    assert (tmp_path / "one.parquet").read_bytes() == (tmp_path / "two.parquet").read_bytes()
    assert "p_active" in pq.read_table(tmp_path / "one.parquet").column_names

    rows = list(iter_rows(io.BytesIO(src.read_bytes())))
    checked = check_settings(settings)
    backend = _Processes(checked, 2)
    backend.gpu = True  # what a CUDA device selects: the workers parse, this process predicts
    try:
        index, table = backend.result(backend.submit(0, rows))
    finally:
        backend.close()
    assert table.equals(screen_chunk(0, rows, checked)[1])
    assert table.schema == screen_schema("active")

    pytest.importorskip("ray")
    ray = screen(src, tmp_path / "ray.parquet", settings, workers=2, use_ray=True, chunk_size=7)
    assert ray.backend == "ray" and ray.model == MODEL
    assert (tmp_path / "ray.parquet").read_bytes() == (tmp_path / "one.parquet").read_bytes()


def test_settings_keep_the_model_and_another_models_run_is_not_resumed(user_model, tmp_path):
    from gem_core.runtime.store import save_json
    from gem_core.service.screening.chunk import USER_TARGET
    from gem_core.service.screening.runner import check_settings
    from gem_core.service.user_models import TARGET

    assert USER_TARGET == TARGET  # repeated in the screen so that its settings need no torch
    checked = check_settings(ScreenSettings(model=" ScreenMe ", target="paper"))
    assert (checked.model, checked.target) == (MODEL, "strong")  # --target is not read
    assert checked.as_dict()["model"] == MODEL and checked.first_class == "active"
    with pytest.raises(ValueError, match="No model named 'nope'"):
        check_settings(ScreenSettings(model="nope"))

    src = _library(tmp_path, n=6)
    out = tmp_path / "o.parquet"
    screen(src, out, ScreenSettings(model=MODEL), workers=1)
    meta = json.loads(pq.read_schema(out).metadata[b"gem_screen"])
    assert meta["model"] == MODEL
    # an unfinished run of another model (or of Mutagenicity) in the parts folder: refused
    parts = tmp_path / "o.parquet.parts"
    for other in ({**meta, "model": "another"}, {k: v for k, v in meta.items() if k != "model"}):
        settings = {k: v for k, v in other.items() if k not in ("format", "chunks")}
        parts.mkdir(exist_ok=True)
        save_json({"version": 1, "settings": settings}, parts / "manifest.json")
        with pytest.raises(ValueError, match=r"other settings \(model differ"):
            screen(src, out, ScreenSettings(model=MODEL), workers=1)
    again = screen(src, out, ScreenSettings(model=MODEL), workers=1, restart=True)
    assert again.summary.rows == 8 and again.chunks_resumed == 0


def test_an_empty_library_still_names_the_models_column(user_model, tmp_path):
    src = tmp_path / "empty.smi"
    src.write_text("# nothing to screen\n")
    result = screen(src, tmp_path / "empty.csv", ScreenSettings(model=MODEL), workers=1)
    assert result.summary.rows == 0 and result.summary.as_dict()["predicted_active"] == 0
    header = (tmp_path / "empty.csv").read_text().splitlines()[0]
    assert '"p_active"' in header and "p_mutagen" not in header


def test_an_unknown_model_is_one_line_before_torch(user_model, tmp_path):
    src = _library(tmp_path, n=2)
    code = (
        "import sys\n"
        "from gem_core.cli import main\n"
        f"rc = main(['screen', {str(src)!r}, '--out', 'x.parquet', '--model', 'nope'])\n"
        "print(rc, 'torch' in sys.modules)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "GEM_NUM_THREADS": "1"},
        timeout=120,
    )
    assert proc.stdout.split() == ["2", "False"], proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: No model named 'nope' (python -m gem_core models list)."
    ]
    assert not (tmp_path / "x.parquet").exists()
    help_text = subprocess.run(
        [sys.executable, "-m", "gem_core", "screen", "--help"],
        capture_output=True,
        text=True,
        cwd=PROJECT,
        timeout=120,
    ).stdout
    assert "--model NAME" in help_text and "ignored with --model" in help_text
