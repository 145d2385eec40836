"""Library screening: every row accounted for, the same bytes on every path, resumable."""
from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from rdkit import Chem, RDConfig

from gem_core.chemistry.smiles import MoleculeError, smiles_to_instance
from gem_core.service.molecules import explain_smiles
from gem_core.service.screening import ScreenSettings, iter_rows, screen
from gem_core.service.screening.output import CHUNK_PREFIX, CHUNK_SUFFIX

PROJECT = Path(__file__).resolve().parent.parent
NCI_SMI = Path(RDConfig.RDDataDir) / "NCI" / "first_5K.smi"  # real NCI compounds, shipped by RDKit

CHUNK_FILES = f"{CHUNK_PREFIX}*{CHUNK_SUFFIX}"  # a run's finished chunks in its parts folder
MIXED_LINES = [
    b"O=[N+]([O-])c1ccccc1 nitrobenzene",      # ok
    b"CCO ethanol",                            # ok
    b"",                                       # empty line
    b"C1CC unclosed",                          # invalid SMILES
    b"c1ccccc1[Se]C selenide",                 # unsupported element
    b"Nc1ccccc1.Cl aniline-HCl",               # salt
    b"# a comment, not a row",
    b"CC\xff\xfeO latin1",                     # not UTF-8
    b"[N-]=[N+]=Nc1ccccc1 phenyl-azide",       # ok
]
# (status, reason) per row; the comment line is not a row
EXPECTED = [("ok", None), ("ok", None), ("rejected", "empty"), ("rejected", "parse"),
            ("rejected", "element"), ("rejected", "fragments"), ("rejected", "encoding"),
            ("ok", None)]


def _write(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def _nci_rows(tmp_path: Path, n: int) -> Path:
    lines = NCI_SMI.read_bytes().splitlines()[:n]
    return _write(tmp_path / f"nci{n}.smi", lines)


def _run_cli(*args: str, env: Optional[dict[str, str]] = None,
             **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "GEM_NUM_THREADS": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "gem_core", *args], capture_output=True,
                          text=True, cwd=PROJECT, env=env, timeout=600, **kw)


def test_mixed_file_gives_one_row_per_input_row_with_the_right_status(tmp_path):
    src = _write(tmp_path / "mixed.smi", MIXED_LINES)
    result = screen(src, tmp_path / "out.parquet", ScreenSettings(k=5), workers=1)
    table = pq.read_table(tmp_path / "out.parquet").to_pydict()
    assert table["row"] == list(range(1, 9))
    assert list(zip(table["status"], table["reason"])) == EXPECTED
    assert table["id"][:2] == ["nitrobenzene", "ethanol"] and table["id"][2] is None
    assert result.summary.rows == 8 and result.summary.ok == 3
    assert dict(result.summary.rejected) == {"empty": 1, "parse": 1, "element": 1,
                                             "fragments": 1, "encoding": 1}
    # rejected rows carry the app's one-line message, accepted rows the model's columns
    assert "Se" in table["message"][4] and "largest fragment" in table["message"][5]
    assert "UTF-8" in table["message"][6]
    assert all("\n" not in (m or "") for m in table["message"])
    for i, (status, _) in enumerate(EXPECTED):
        assert (table["prediction"][i] is None) == (status != "ok")
    assert "aromatic_nitro" in table["toxicophores"][0]
    assert not (tmp_path / "out.parquet.parts").exists()


def test_salts_follow_the_salts_rule(tmp_path):
    src = _write(tmp_path / "salt.smi", [b"Nc1ccccc1.Cl"])
    screen(src, tmp_path / "a.parquet", ScreenSettings(salts="largest"), workers=1)
    row = pq.read_table(tmp_path / "a.parquet").to_pylist()[0]
    assert row["status"] == "ok" and row["canonical_smiles"] == "Nc1ccccc1"
    assert "largest" in row["message"]
    screen(src, tmp_path / "b.parquet", ScreenSettings(salts="whole"), workers=1)
    row = pq.read_table(tmp_path / "b.parquet").to_pylist()[0]
    assert row["status"] == "ok" and row["canonical_smiles"] == "Cl.Nc1ccccc1"
    assert "Read whole" in row["message"]


def test_the_salts_options_of_the_commands():
    """``--salts RULE``, ``--largest-fragment`` its shorthand, never both (screen and train)."""
    from gem_core.cli import build_parser

    parser = build_parser()
    for command in (["screen", "in.smi", "--out", "o.csv"], ["train", "--csv", "t.csv"]):
        assert parser.parse_args(command).salts == "refuse"
        assert parser.parse_args([*command, "--salts", "whole"]).salts == "whole"
        assert parser.parse_args([*command, "--largest-fragment"]).salts == "largest"
        for bad in (["--salts", "whole", "--largest-fragment"], ["--salts", "cut"]):
            with pytest.raises(SystemExit):
                parser.parse_args([*command, *bad])


@pytest.mark.parametrize("method", ["gem", "gem_check"])
def test_rows_match_the_explain_command(tmp_path, method):
    """The screen's rows are `explain`'s (and the Molecule page's) for Gem and for Gem + check
    (the target's explain-time search in both)."""
    smiles = ["O=[N+]([O-])c1ccc(C)cc1", "Nc1ccc2cc3ccccc3cc2c1", "C1OC1c1ccccc1"]
    src = _write(tmp_path / "x.smi", [s.encode() for s in smiles])
    screen(src, tmp_path / "x.parquet", ScreenSettings(k=6, method=method), workers=1)
    rows = pq.read_table(tmp_path / "x.parquet").to_pylist()
    for smi, row in zip(smiles, rows):
        ref = explain_smiles(smi, k=6, device="cpu", method=method)
        assert row["bonds"] == ref["explanation"]["bonds"]
        # float32 batches of other sizes round differently in the last digits
        assert row["scores"] == pytest.approx(ref["explanation"]["scores"], abs=1e-5)
        assert row["prediction"] == ref["prediction"]["label"]
        p_pred = row["p_mutagen"] if row["prediction"] == "mutagen" else 1 - row["p_mutagen"]
        assert p_pred == pytest.approx(ref["prediction"]["probability"], abs=1e-5)
        assert row["fragment"]


def test_each_molecule_gets_its_own_k_by_default_as_explain_and_the_app(tmp_path):
    """Without --k (or with --k auto) each molecule keeps a quarter of its bonds, the K of
    `explain` and of the Molecule page, so a small molecule is not explained by all its bonds."""
    from gem_core.service.molecules import suggested_k

    smiles = ["O=[N+]([O-])c1ccc(C)cc1", "CCO", "Nc1ccc2cc3ccccc3cc2c1"]
    src = _write(tmp_path / "x.smi", [s.encode() for s in smiles])
    assert ScreenSettings().k is None
    screen(src, tmp_path / "x.parquet", ScreenSettings(), workers=1)
    rows = pq.read_table(tmp_path / "x.parquet").to_pylist()
    for smi, row in zip(smiles, rows):
        n = smiles_to_instance(smi).instance.num_pairs
        assert len(row["bonds"]) == suggested_k(n) < n
        assert row["bonds"] == explain_smiles(smi, device="cpu", read=False)["explanation"]["bonds"]
    proc = _run_cli("screen", str(src), "--out", str(tmp_path / "auto.parquet"), "--k", "auto",
                    "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert pq.read_table(tmp_path / "auto.parquet").to_pylist() == rows


def test_without_check_the_screen_ranks_with_gems_one_pass(tmp_path):
    """By default a screen keeps Gem's one-pass ranking (the target's search costs milliseconds
    per molecule); --check is Gem + check, the same fitted auto-encoder with the search."""
    from gem_core.service.screening.chunk import _explainer, _model
    from gem_core.service.screening.runner import check_settings

    settings = check_settings(ScreenSettings())
    model = _model(settings)
    plain = _explainer(model, settings)
    searched = _explainer(model, check_settings(ScreenSettings(method="gem_check")))
    assert str(plain.settings.check.rule) == "off" and not plain.settings.asks_target
    assert str(searched.settings.check.rule) != "off"  # the molecule row's choice
    # one fit: the same saved auto-encoder behind both
    assert plain.state_key(model.context) == searched.state_key(model.context)
    assert plain.loaded_from_ == searched.loaded_from_ is not None
    smiles = ["O=[N+]([O-])c1ccc(C)cc1", "Nc1ccc2cc3ccccc3cc2c1"]
    src = _write(tmp_path / "x.smi", [s.encode() for s in smiles])
    screen(src, tmp_path / "x.parquet", ScreenSettings(k=6), workers=1)
    rows = pq.read_table(tmp_path / "x.parquet").to_pylist()
    import torch

    from gem_core.data.ranking import ranked_pairs

    for smi, row in zip(smiles, rows):
        inst = smiles_to_instance(smi).instance
        (scores,) = plain.explain([inst]).scores
        pairs = inst.pairs
        assert row["bonds"] == [[int(pairs[0, j]), int(pairs[1, j])]
                                for j in ranked_pairs(torch.as_tensor(scores), 6)]


def test_table_input_with_named_columns_and_csv_output(tmp_path):
    src = tmp_path / "lib.csv"
    src.write_text("Compound,SMILES,mw\nA1,CCO,46\nA2,,0\nA3,\"O=[N+]([O-])c1ccccc1\",123\n")
    with pytest.raises(ValueError, match="no SMILES column 'smi'"):
        screen(src, tmp_path / "o.csv", ScreenSettings(), workers=1, smiles_column="smi")
    screen(src, tmp_path / "o.csv", ScreenSettings(k=3), workers=1, smiles_column="SMILES",
           id_column="Compound")
    screen(src, tmp_path / "o.parquet", ScreenSettings(k=3), workers=1, smiles_column="SMILES",
           id_column="Compound")
    csv_rows = pacsv.read_csv(tmp_path / "o.csv").to_pylist()
    pq_rows = pq.read_table(tmp_path / "o.parquet").to_pylist()
    assert [r["id"] for r in csv_rows] == ["A1", "A2", "A3"]
    assert [r["status"] for r in csv_rows] == ["ok", "rejected", "ok"]
    for c, p in zip(csv_rows, pq_rows):
        if p["bonds"] is None:
            continue
        assert c["bonds"] == ";".join(f"{i}-{j}" for i, j in p["bonds"])
        assert [float(x) for x in c["scores"].split(";")] == p["scores"]  # exact round trip


def test_stdin_input(tmp_path):
    out = tmp_path / "s.parquet"
    proc = _run_cli("screen", "-", "--out", str(out), "--workers", "1", "--no-progress",
                    input="CCO\nC1CC\n")
    assert proc.returncode == 0, proc.stderr
    assert pq.read_table(out).column("status").to_pylist() == ["ok", "rejected"]
    assert "ok 1" in proc.stderr and "parse 1" in proc.stderr


def test_worker_processes_give_identical_bytes(tmp_path):
    src = _nci_rows(tmp_path, 300)
    one = screen(src, tmp_path / "one.parquet", ScreenSettings(), workers=1, chunk_size=37)
    two = screen(src, tmp_path / "two.parquet", ScreenSettings(), workers=2, chunk_size=37)
    assert one.backend == "process" and two.backend == "processes"
    assert one.summary.rows == two.summary.rows == 300
    assert one.summary.ok > 200  # real compounds: most are accepted
    assert (tmp_path / "one.parquet").read_bytes() == (tmp_path / "two.parquet").read_bytes()


def test_ray_path_equals_the_local_path(tmp_path):
    import ray

    src = _nci_rows(tmp_path, 300)
    screen(src, tmp_path / "local.parquet", ScreenSettings(), workers=1, chunk_size=50)
    assert not ray.is_initialized()
    result = screen(src, tmp_path / "ray.parquet", ScreenSettings(), workers=2, use_ray=True,
                    chunk_size=50)
    assert result.backend == "ray" and not ray.is_initialized()  # a local Ray, shut down
    assert (tmp_path / "ray.parquet").read_bytes() == (tmp_path / "local.parquet").read_bytes()


def test_ray_workers_defer_dynamo_like_the_command_line_and_a_dead_one_is_one_line():
    """Each Ray worker the screen starts defers PyG's unused torch._dynamo and datasets in its
    first task, before it imports the engine, as the command line's process does, and reports
    the target's digest; a worker that dies mid-chunk is the screen's one-line WorkerLostError,
    not Ray's traceback; one that cannot load the model raises the engine's own error, one that
    cannot import the engine says what to install, in one line; the local cluster runs no
    dashboard, autoscaler or log monitor, and closing ends every process of it."""
    import os

    import ray

    from gem_core.service.session import ModelUnavailableError
    from gem_core.runtime.workers import WorkerLostError
    from gem_core.service.molecules import molecule_model
    from gem_core.service.screening.runner import _Ray

    backend = _Ray(ScreenSettings(), workers=1, address=None)
    try:
        assert backend.target_digest() == molecule_model("cpu").target().digest
        assert ray.get(backend.warming) == [backend.target_digest()]

        @ray.remote(num_cpus=1)
        def probe() -> list[bool]:
            import torch_geometric  # noqa: F401
            from gem_core.runtime.imports import DEFERRED, is_deferred

            return [is_deferred(name) for name in DEFERRED]

        assert ray.get(probe.remote()) == [True, True]

        @ray.remote(num_cpus=1, max_retries=0)
        def dies() -> None:
            os._exit(1)

        with pytest.raises(WorkerLostError, match="Ray worker of this screen died"):
            backend.result(dies.remote())

        @ray.remote(num_cpus=1, max_retries=0)
        def cannot_load() -> str:
            raise ModelUnavailableError("no target model here")

        backend.warming = [cannot_load.remote()]
        with pytest.raises(ModelUnavailableError, match="no target model here"):
            backend.target_digest()

        @ray.remote(num_cpus=1, max_retries=0)
        def cannot_import() -> str:
            import gem_core_is_not_here  # noqa: F401  (a worker without the engine)

        backend.warming = [cannot_import.remote()]
        with pytest.raises(WorkerLostError, match="cannot load the engine.*pip install"):
            backend.target_digest()
        processes = dict(backend.node.all_processes)
    finally:
        backend.close()
    assert not ray.is_initialized()
    assert {"gcs_server", "raylet"} <= set(processes)
    assert not {"dashboard", "monitor", "log_monitor"} & set(processes)
    assert all(info.process.poll() is not None for infos in processes.values() for info in infos)


def test_ray_through_ray_init_kills_its_autoscaler_monitor(monkeypatch):
    """Where Ray's node API is missing, ``ray.init`` starts the usual local cluster; its
    autoscaler monitor, which ignores SIGTERM, is killed at close rather than waited for."""
    import ray

    from gem_core.service.screening import runner

    monkeypatch.setattr(runner, "_start_task_node", lambda workers: None)
    backend = runner._Ray(ScreenSettings(), workers=1, address=None)
    try:
        assert backend.node is None
        monitors = [info.process for info in
                    ray._private.worker._global_node.all_processes.get("monitor", [])]
    finally:
        backend.close()
    assert not ray.is_initialized()
    assert monitors and all(proc.poll() is not None for proc in monitors)


def test_a_ray_screen_driver_never_imports_torch(tmp_path):
    """The driver of a Ray screen reads, stores and compacts; its workers load the model and
    report the target's digest, so the driver's process never pays torch's import."""
    src = _nci_rows(tmp_path, 40)
    code = ("import sys\n"
            "from gem_core.service.screening import ScreenSettings, screen\n"
            f"r = screen({str(src)!r}, {str(tmp_path / 'ray.parquet')!r}, ScreenSettings(),\n"
            "           workers=1, use_ray=True, chunk_size=20)\n"
            "print(r.summary.rows, r.backend, 'torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-3:] == ["40", "ray", "False"]


def _start_screen(tmp_path, src, args: list[str]):
    """A real ``screen`` process writing ``run.parquet`` (its chunks in ``run.parquet.parts``)."""
    out = tmp_path / "run.parquet"
    env = {**os.environ, "GEM_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "gem_core", "screen", str(src), "--out",
                             str(out), *args], cwd=PROJECT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return out, tmp_path / "run.parquet.parts", proc


def test_kill_9_then_resume_gives_the_uninterrupted_output(tmp_path):
    src = _nci_rows(tmp_path, 2000)
    reference = tmp_path / "ref.parquet"
    args = ["--chunk-size", "20", "--workers", "1", "--no-progress"]
    assert _run_cli("screen", str(src), "--out", str(reference), *args).returncode == 0

    out, parts, proc = _start_screen(tmp_path, src, args)
    deadline = time.time() + 300
    while len(list(parts.glob(CHUNK_FILES))) < 5 and time.time() < deadline:
        assert proc.poll() is None, "the run ended before it could be killed"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not out.exists(), "killed mid-run: no final output yet"
    finished = len(list(parts.glob(CHUNK_FILES)))
    assert 5 <= finished < 100

    again = _run_cli("screen", str(src), "--out", str(out), *args)
    assert again.returncode == 0, again.stderr
    assert f"resumed: {finished} of 100 chunks" in again.stderr
    assert out.read_bytes() == reference.read_bytes()
    assert pq.read_table(out).num_rows == 2000 and not parts.exists()


def test_workers_end_with_a_killed_screen_and_the_run_resumes(tmp_path):
    """kill -9 of a 2-worker screen: no process of the run outlives it by 10 s; started again,
    it resumes and writes the bytes of an uninterrupted run."""
    psutil = pytest.importorskip("psutil")
    src = _nci_rows(tmp_path, 400)
    args = ["--chunk-size", "20", "--workers", "2", "--device", "cpu", "--no-progress"]
    out, parts, proc = _start_screen(tmp_path, src, args)
    parent = psutil.Process(proc.pid)
    seen: dict[int, "psutil.Process"] = {}  # every descendant ever seen (Process guards pid reuse)
    deadline = time.time() + 300
    while time.time() < deadline:
        assert proc.poll() is None, "the run ended before it could be killed"
        try:
            for child in parent.children(recursive=True):
                seen.setdefault(child.pid, child)
        except psutil.NoSuchProcess:  # pragma: no cover
            break
        if len(seen) >= 2 and any(parts.glob(CHUNK_FILES)):
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert len(seen) >= 2, "no worker processes were seen"
    _, alive = psutil.wait_procs(list(seen.values()), timeout=10)
    for p in alive:  # do not leave them behind when the assertion fails
        p.kill()
    assert not alive, f"{len(alive)} process(es) of the killed run still alive after 10 s"
    finished = len(list(parts.glob(CHUNK_FILES)))
    assert 1 <= finished < 20 and not out.exists()

    again = _run_cli("screen", str(src), "--out", str(out), *args)
    assert again.returncode == 0, again.stderr
    assert f"resumed: {finished} of 20 chunks" in again.stderr
    reference = tmp_path / "ref.parquet"  # uninterrupted, here (same bytes as the CLI's)
    # one worker: this pytest process has run Ray (its threads do not survive a fork well, and a
    # forked worker here once died); any worker count gives these bytes (test above)
    screen(src, reference, ScreenSettings(), workers=1, chunk_size=20)
    assert out.read_bytes() == reference.read_bytes()


def test_a_stored_chunk_reads_back_as_written_and_counts_as_done(tmp_path):
    """Chunk files (Arrow IPC) give back the very table; a reopened run finds them done."""
    from gem_core.service.screening.chunk import explain_rows
    from gem_core.service.screening.output import ChunkStore

    table = explain_rows(list(iter_rows(io.BytesIO(b"\n".join(MIXED_LINES) + b"\n"))),
                         ScreenSettings(k=5, device="cpu"))
    store = ChunkStore(tmp_path / "o.parquet", {"k": 5})
    assert store.open() == set()
    store.write(7, table)
    assert store.read(7).equals(table) and store.read(7).schema == table.schema
    assert ChunkStore(tmp_path / "o.parquet", {"k": 5}).open() == {7}
    assert [p.name for p in store.folder.iterdir() if p.name != "manifest.json"] == \
        [f"{CHUNK_PREFIX}000007{CHUNK_SUFFIX}"]  # no temporary file left beside it


def test_other_settings_do_not_mix_into_an_unfinished_run(tmp_path):
    src = _nci_rows(tmp_path, 40)
    out = tmp_path / "o.parquet"
    parts = tmp_path / "o.parquet.parts"
    parts.mkdir()
    (parts / "manifest.json").write_text('{"version": 1, "settings": {"k": 3}}')
    (parts / f"{CHUNK_PREFIX}000000{CHUNK_SUFFIX}").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="other settings .*--restart"):
        screen(src, out, ScreenSettings(), workers=1)
    result = screen(src, out, ScreenSettings(), workers=1, restart=True)
    assert result.summary.rows == 40 and result.chunks_resumed == 0


def test_help_and_bad_arguments():
    ok = _run_cli("screen", "--help")
    assert ok.returncode == 0 and "--ray" in ok.stdout and "--largest-fragment" in ok.stdout
    for bad in (["screen"], ["screen", "x.smi", "--out", "y.parquet", "--k", "0"],
                ["screen", "x.smi", "--out", "y.parquet", "--method", "gnnexplainer"],
                ["screen", "missing.smi", "--out", "y.parquet"],
                ["screen", __file__, "--out", "y.txt"]):
        proc = _run_cli(*bad)
        assert proc.returncode == 2, bad
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_reader_keeps_every_row_in_order():
    text = b"smiles,name\nCCO,a\n\n\"C(=O)O\",b\n# note\nCC\xff,c\n"
    rows = list(iter_rows(io.BytesIO(text)))
    assert [(r.row, r.id, r.smiles) for r in rows] == [
        (1, "a", "CCO"), (2, None, ""), (3, "b", "C(=O)O"), (4, "c", "CC\ufffd")]
    assert [r.error and r.error[0] for r in rows] == [None, "empty", None, "encoding"]


@pytest.mark.parametrize(
    "text, ids",
    [
        # a PubChem assay export: its SMILES and compound id columns by their words
        (b"PUBCHEM_RESULT_TAG,PUBCHEM_SID,PUBCHEM_CID,PUBCHEM_EXT_DATASOURCE_SMILES,"
         b"PUBCHEM_ACTIVITY_OUTCOME\n1,842121,6603008,CCO,Inactive\n2,842122,6602571,CC(=O)O,Active\n",
         ["6603008", "6602571"]),
        # a ChEMBL export (semicolons): its ChEMBL id, not its often empty name
        (b'"Molecule ChEMBL ID";"Molecule Name";"Smiles";"pChEMBL Value"\n'
         b'"CHEMBL545";"ETHANOL";"CCO";"4.1"\n"CHEMBL539";"";"CC(=O)O";""\n',
         ["CHEMBL545", "CHEMBL539"]),
        # a tab-separated table whose SMILES header is a phrase
        (b"Canonical SMILES\tid\nCCO\tm1\nCC(=O)O\tm2\n", ["m1", "m2"]),
    ],
)
def test_reader_finds_the_columns_of_public_exports(text, ids):
    """The screen names its columns as the Your data page does (the same header lists)."""
    rows = list(iter_rows(io.BytesIO(text)))
    assert [r.smiles for r in rows] == ["CCO", "CC(=O)O"]
    assert [r.id for r in rows] == ids


def test_reader_reads_past_a_cxsmiles_extension():
    rows = list(iter_rows(io.BytesIO(b"CCO |$;;$| ethanol\nC[C@H](O)CC |&1:1|\n")))
    assert [(r.smiles, r.id) for r in rows] == [("CCO", "ethanol"), ("C[C@H](O)CC", None)]


def test_parse_only_workers_feeding_this_process_give_the_same_table(tmp_path):
    """The CUDA layout (workers parse, this process predicts and explains), run on CPU."""
    from gem_core.service.screening.chunk import screen_chunk
    from gem_core.service.screening.runner import _Processes

    rows = list(iter_rows(io.BytesIO(b"\n".join(MIXED_LINES) + b"\n")))
    settings = ScreenSettings(k=5, device="cpu")
    backend = _Processes(settings, 2)
    backend.gpu = True  # what a CUDA device selects
    try:
        index, table = backend.result(backend.submit(3, rows))
    finally:
        backend.close()
    assert index == 3
    assert table.equals(screen_chunk(3, rows, settings)[1])


def test_timing_the_steps_of_a_chunk_changes_nothing_and_names_every_step():
    """``bench screen --steps`` reads these times; timing must not change the rows."""
    from gem_core.service.screening.chunk import StepTimes, explain_rows

    rows = list(iter_rows(io.BytesIO(b"\n".join(MIXED_LINES) + b"\n")))
    settings = ScreenSettings(k=5, device="cpu")
    times = StepTimes()
    assert explain_rows(rows, settings, times).equals(explain_rows(rows, settings))
    assert set(times.seconds) == {"parsing", "target's forward", "explainer", "top-K bonds",
                                  "toxicophore classes", "fragment SMILES", "output table",
                                  "closest training molecule"}
    assert all(sec >= 0 for sec in times.seconds.values())


def test_screen_opens_on_the_molecule_default_target_and_keeps_target_paper(tmp_path, capsys):
    """Issue 27, item 11: ``screen`` uses the target row marked as the molecule default (the
    strong one) unless ``--target`` says otherwise, and says which model answered."""
    import json

    from gem_core.cli import main
    from gem_core.data.config import molecule_default_target

    assert ScreenSettings().target == molecule_default_target() == "strong"
    src = _write(tmp_path / "one.smi", [b"O=[N+]([O-])c1ccccc1 nitrobenzene"])
    runs = {}
    for target in (None, "paper"):
        out = tmp_path / f"{target}.parquet"
        # --check: Gem + check (the paper target's lead is ordered by the target)
        args = ["screen", str(src), "--out", str(out), "--workers", "1", "--no-progress",
                "--json", "-", "--k", "4", "--check"] + (["--target", target] if target else [])
        assert main(args) == 0
        captured = capsys.readouterr()
        runs[target] = json.loads(captured.out)
        expected = target or "strong"
        assert runs[target]["target"] == expected
        assert f"with the {expected} Mutagenicity target" in captured.err
        row = pq.read_table(out).to_pylist()[0]
        ref = explain_smiles("O=[N+]([O-])c1ccccc1", k=4, device="cpu", target=expected,
                             read=False, method="gem_check")
        assert row["bonds"] == ref["explanation"]["bonds"]
        assert row["p_mutagen"] == pytest.approx(
            ref["prediction"]["probability"] if ref["prediction"]["label"] == "mutagen"
            else 1 - ref["prediction"]["probability"], abs=1e-5)


def _die_in_the_worker(index, rows, settings):
    os._exit(3)  # a worker killed mid-chunk (out of memory, a crash in native code)


def test_a_dead_worker_is_one_clear_error_and_the_run_then_resumes(tmp_path, monkeypatch):
    from gem_core.runtime.workers import WorkerLostError
    from gem_core.service.screening import runner

    src = _nci_rows(tmp_path, 40)
    out = tmp_path / "out.parquet"
    with monkeypatch.context() as patch:
        patch.setattr(runner, "screen_chunk", _die_in_the_worker)
        with pytest.raises(WorkerLostError, match="run the same command again to resume"):
            screen(src, out, ScreenSettings(), workers=2, chunk_size=10)
    again = screen(src, out, ScreenSettings(), workers=1, chunk_size=10)  # resumes in-process
    assert again.summary.rows == 40 and out.is_file()
    # the command line says it in one line, without a traceback
    from gem_core.cli import _user_error_types

    assert WorkerLostError in _user_error_types()


_CUDA_LAYOUT = """
import runpy, sys
from gem_core.runtime.workers import worker_pool
from gem_core.service.screening import runner

def parsing_workers(self, settings, workers):
    import torch

    self.settings = settings
    self.gpu = True  # the CUDA layout: the workers parse, this process predicts and explains
    self.pool = worker_pool(workers)
    # on one thread, as a CPU chunk is: a CUDA model's math does not depend on this process's
    # threads, but a CPU model's float sums do (16 threads on a 16-core machine gave other bits)
    torch.set_num_threads(1)

runner._Processes.__init__ = parsing_workers
sys.argv = ["gem_core", *sys.argv[1:]]
runpy.run_module("gem_core", run_name="__main__", alter_sys=True)  # as `python -m gem_core`
"""


def test_the_cuda_layout_with_parsing_workers_runs_from_the_command_line(tmp_path):
    """What `screen --device cuda --workers N` starts (the workers parse and send packed chunks,
    this process runs the model), run on the CPU from the command line's own entry point: the
    same bytes as one process."""
    src = _nci_rows(tmp_path, 60)
    common = ["--device", "cpu", "--no-progress", "--chunk-size", "20"]
    env = {**os.environ, "GEM_NUM_THREADS": "1"}
    layout = subprocess.run([sys.executable, "-c", _CUDA_LAYOUT, "screen", str(src), "--out",
                             str(tmp_path / "layout.parquet"), "--workers", "2", *common],
                            capture_output=True, text=True, cwd=PROJECT, env=env, timeout=600)
    assert layout.returncode == 0, layout.stderr[-2000:]
    assert "2 worker(s), processes" in layout.stderr  # the summary goes to stderr
    one = _run_cli("screen", str(src), "--out", str(tmp_path / "one.parquet"), "--workers", "1",
                   *common)
    assert one.returncode == 0, one.stderr[-2000:]
    assert (tmp_path / "layout.parquet").read_bytes() == (tmp_path / "one.parquet").read_bytes()


@pytest.mark.parametrize("lines", [MIXED_LINES, [b"not-a-smiles", b"[Na+].[Cl-]"]],
                         ids=["mixed", "all rejected"])
def test_a_packed_chunk_arrives_field_for_field_as_it_was_parsed(lines):
    """The parsing workers' wire format: columns, positions, molecules and every Instance field
    (dtype and values) come back as parse_rows made them, also for a chunk with no molecule."""
    import dataclasses

    import torch

    from gem_core.service.screening.chunk import parse_chunk, parse_rows, unpack_parsed

    rows = list(iter_rows(io.BytesIO(b"\n".join(lines) + b"\n")))
    sent = parse_rows(rows, ScreenSettings())
    index, blob = parse_chunk(7, rows, ScreenSettings())
    got = unpack_parsed(blob)
    assert index == 7 and isinstance(blob, bytes)
    assert got.columns == sent.columns
    assert [i for i, _ in got.parsed] == [i for i, _ in sent.parsed]
    for (_, a), (_, b) in zip(sent.parsed, got.parsed):
        assert (a.smiles, a.input_smiles, a.warnings, a.name, a.pair_bond_index) == (
            b.smiles, b.input_smiles, b.warnings, b.name, b.pair_bond_index)
        assert a.mol.GetNumAtoms() == b.mol.GetNumAtoms()
        for field in dataclasses.fields(a.instance):
            u, v = getattr(a.instance, field.name), getattr(b.instance, field.name)
            if isinstance(u, torch.Tensor):
                assert u.dtype == v.dtype and torch.equal(u, v), field.name
            else:
                assert u == v, field.name


def test_bench_screen_repeats_in_rounds_and_reports_medians(tmp_path):
    """``bench screen --repeat 2``: every configuration runs twice, the outputs are the same bytes,
    each run's figure is the median of its rounds, and the speed-up the median of the rounds'
    ratios (each taken between runs of one round), not a ratio of medians; its temporary folder
    is gone at the end."""
    import json
    import statistics

    out = tmp_path / "bench.json"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = _run_cli("bench", "screen", "--rows", "30", "--no-ray", "--repeat", "2",
                    "--json", str(out), env={"TMPDIR": str(scratch)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    # its input and outputs go with it (PyG leaves its generated propagate modules there)
    assert list(scratch.glob("gem-bench-screen-*")) == []
    result = json.loads(out.read_text())["bench"]["screen"]
    assert result["identical_outputs"] is True
    rounds = result["rounds"]
    assert len(rounds) == 2 and all(set(r) == set(result["runs"]) for r in rounds)
    for name, run in result["runs"].items():
        assert run["seconds"] == statistics.median(r[name]["seconds"] for r in rounds)
    many = next(name for name in result["runs"] if name != "1 process")
    ratios = [r["1 process"]["seconds"] / r[many]["seconds"] for r in rounds]
    assert result["process_speedup_rounds"] == ratios
    assert result["process_speedup"] == statistics.median(ratios)
    assert "median of 2 rounds" in proc.stdout


def _sd_file(records: list[tuple[str, str, dict[str, str]]]) -> bytes:
    """An SD file written by RDKit's SDWriter: (SMILES, title, data items) per record."""
    out = io.StringIO()
    writer = Chem.SDWriter(out)
    for smiles, title, items in records:
        mol = Chem.AddHs(Chem.MolFromSmiles(smiles))
        mol.SetProp("_Name", title)
        for key, value in items.items():
            mol.SetProp(key, value)
        writer.write(mol)
    writer.close()
    return out.getvalue().encode()


SD_BROKEN = b"broken\n  x\n\n  2  1  0  0  0  0  0  0  0  0999 V2000\nno atom here\nM  END\n$$$$\n"


def test_reader_streams_an_sd_file_one_row_per_record():
    data = _sd_file([("O=[N+]([O-])c1ccccc1", "nb", {"reg": "R1"}), ("CCO", "eth", {"reg": "R2"})])
    data += SD_BROKEN + _sd_file([("Nc1ccccc1", "", {"reg": "R4"})])
    rows = list(iter_rows(io.BytesIO(data)))
    assert [(r.row, r.id, r.smiles) for r in rows] == [
        (1, "nb", "O=[N+]([O-])c1ccccc1"), (2, "eth", "CCO"), (3, None, ""),
        (4, None, "Nc1ccccc1")]
    assert [r.error and r.error[0] for r in rows] == [None, None, "unreadable_record", None]
    assert "SD record 3" in rows[2].error[1]
    by_item = list(iter_rows(io.BytesIO(data), id_column="reg"))
    assert [r.id for r in by_item] == ["R1", "R2", None, "R4"]
    with pytest.raises(MoleculeError, match="no data item 'CAS'"):
        list(iter_rows(io.BytesIO(data), id_column="CAS"))
    with pytest.raises(MoleculeError, match="an SD file's molecules are its molfiles"):
        list(iter_rows(io.BytesIO(data), smiles_column="SMILES"))


def test_an_sd_file_is_screened_row_for_row_like_its_smiles(tmp_path):
    """Screening a library's SD file gives the rows that screening its SMILES gives."""
    smiles = [line.split()[0] for line in NCI_SMI.read_text().splitlines()[:40]]
    kept = [s for s in smiles if Chem.MolFromSmiles(s) is not None]
    sdf = tmp_path / "lib.sdf"
    sdf.write_bytes(_sd_file([(s, f"m{i}", {}) for i, s in enumerate(kept)]))
    smi = _write(tmp_path / "lib.smi",
                 [f"{Chem.MolToSmiles(Chem.MolFromSmiles(s))} m{i}".encode()
                  for i, s in enumerate(kept)])
    screen(sdf, tmp_path / "sdf.parquet", ScreenSettings(k=5), workers=1)
    screen(smi, tmp_path / "smi.parquet", ScreenSettings(k=5), workers=1)
    a = pq.read_table(tmp_path / "sdf.parquet").to_pydict()
    b = pq.read_table(tmp_path / "smi.parquet").to_pydict()
    assert a["id"] == b["id"] and a["status"] == b["status"]
    assert a["prediction"] == b["prediction"] and a["scores"] == b["scores"]


@pytest.mark.skipif(not __import__("tests.conftest", fromlist=["x"]).tu_data_available(
    "Mutagenicity"), reason="the training molecules come from the Mutagenicity raw files")
def test_each_accepted_row_says_how_like_the_training_molecules_it_is(tmp_path):
    """``closest_training``: the Tanimoto similarity of the model's closest training molecule,
    the same as the Molecule page's; null for a rejected row."""
    from gem_core.service.molecules import molecule_model
    from gem_core.service.neighbours import nearest_training

    src = _write(tmp_path / "mixed.smi", MIXED_LINES)
    screen(src, tmp_path / "out.parquet", ScreenSettings(k=5), workers=1)
    table = pq.read_table(tmp_path / "out.parquet").to_pydict()
    wb = molecule_model("auto")
    for status, smiles, closest in zip(table["status"], table["smiles"], table["closest_training"]):
        if status != "ok":
            assert closest is None
            continue
        assert closest == pytest.approx(nearest_training(wb, smiles_to_instance(smiles).mol).closest)
