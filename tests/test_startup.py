"""The CLI answers ``--help``, argument errors, invalid SMILES and missing files without importing
torch or PyG (whole processes, ``-X importtime``), and the light copies it reads agree with the
engine's facts."""
from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "torch_geometric")


def _run(*argv: str) -> subprocess.CompletedProcess:
    """``python -X importtime -m gem_core ARGV`` from the checkout."""
    return subprocess.run([sys.executable, "-X", "importtime", "-m", "gem_core", *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def _python_lines(code: str, timeout: int = 300) -> list[str]:
    """Stdout lines of ``python -c code`` run in the repository, which must exit 0."""
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()


def _imported(stderr: str) -> set[str]:
    """Top-level package names in ``-X importtime`` output."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return names


def _messages(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if not line.startswith("import time:")]


@pytest.mark.parametrize("argv", [
    ("--help",),
    ("explain", "--help"),
    ("screen", "--help"),
])
def test_help_does_not_import_torch(argv):
    proc = _run(*argv)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage:" in proc.stdout
    imported = _imported(proc.stderr)
    assert "gem_core" in imported  # the parse worked: the output is read right
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))


def test_every_command_help_is_light():
    """All commands' parsers built and ``--help`` printed in one process: no torch, no PyG."""
    code = (
        "import sys\n"
        "from gem_core.cli import COMMANDS, main\n"
        "for argv in [[c, '--help'] for c in COMMANDS] + [['bench', 'startup', '--help']]:\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit as exc:\n"
        "        assert exc.code == 0, (argv, exc.code)\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n")
    assert _python_lines(code, timeout=120)[-1] == "[]"


def test_bad_argument_is_one_line_without_torch():
    proc = _run("explain", "--smiles", "CCO", "--method", "no-such-method")
    assert proc.returncode == 2
    lines = _messages(proc.stderr)
    assert len(lines) == 1 and "invalid choice: 'no-such-method'" in lines[0], lines
    assert not _imported(proc.stderr) & set(HEAVY)


def test_invalid_smiles_is_refused_by_rdkit_alone():
    from gem_core.chemistry.smiles import MoleculeError, smiles_to_instance

    bad = "c1ccc(cc1"
    with pytest.raises(MoleculeError) as err:
        smiles_to_instance(bad)
    proc = _run("explain", "--smiles", bad)
    assert proc.returncode == 2
    assert _messages(proc.stderr) == [f"error: {err.value}"]
    imported = _imported(proc.stderr)
    assert "rdkit" in imported and not imported & set(HEAVY)


def test_bad_k_is_refused_before_the_smiles_is_built():
    proc = _run("explain", "--smiles", "O=[N+]([O-])c1ccccc1", "--k", "0")
    assert proc.returncode == 2
    lines = _messages(proc.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert not _imported(proc.stderr) & set(HEAVY)


def test_missing_screen_input_is_refused_without_torch(tmp_path):
    missing = tmp_path / "nothing.smi"
    proc = _run("screen", str(missing), "--out", str(tmp_path / "out.csv"))
    assert proc.returncode == 2
    lines = _messages(proc.stderr)
    assert len(lines) == 1 and str(missing) in lines[0] and "does not exist" in lines[0], lines
    assert not _imported(proc.stderr) & set(HEAVY)
    assert not (tmp_path / "out.csv").exists()


def test_a_cpu_screen_checks_its_settings_without_torch():
    """``screen`` sets no threads of its own (each chunk runs on one thread in its worker) and a
    CPU screen's settings are checked without torch, so a Ray screen's driver starts Ray
    (2-3 s of waiting for its processes) before the 1 s torch import instead of after it."""
    code = ("import sys\n"
            "from gem_core.cli import build_parser\n"
            "from gem_core.service.screening.runner import ScreenSettings, check_settings\n"
            "args = build_parser().parse_args(['screen', 'in.smi', '--out', 'o.parquet', '--ray'])\n"
            "assert not hasattr(args, 'threads'), args\n"
            "print(check_settings(ScreenSettings(device='cpu')).device)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'torch_geometric')))\n")
    assert _python_lines(code, timeout=120)[:2] == ["cpu", "[]"]


def test_a_screening_process_loads_no_scipy():
    """A screen removes no edge, so the connectivity rule's scipy.sparse (0.1 s of every
    screening process's start, Ray workers' too) is not loaded: it waits for a removal."""
    code = ("import io, sys\n"
            "from gem_core.service.screening import ScreenSettings, iter_rows\n"
            "from gem_core.service.screening.chunk import screen_chunk, warm_up\n"
            "settings = ScreenSettings(device='cpu')\n"
            "warm_up(settings)\n"
            "rows = list(iter_rows(io.BytesIO(b'O=[N+]([O-])c1ccccc1 a\\nCCO b\\n')))\n"
            "print(screen_chunk(0, rows, settings)[1].num_rows)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'scipy'))\n")
    assert _python_lines(code)[:2] == ["2", "[]"]


def test_light_copies_agree_with_the_engine():
    """The constants the CLI and chemistry read without torch are the engine's."""
    from gem_core.cli import screen as screen_command
    from gem_core.chemistry import smiles
    from gem_core.data.datasets import MUTAGENICITY_ATOMS
    from gem_core.service.screening.runner import DEFAULT_CHUNK_SIZE

    assert screen_command.DEFAULT_CHUNK_SIZE == DEFAULT_CHUNK_SIZE
    assert smiles.MUTAGENICITY_ATOMS == MUTAGENICITY_ATOMS


@pytest.mark.parametrize("package", ["gem_core.explainers", "gem_core.service.screening"])
def test_lazy_exports_are_the_submodules_names(package):
    """Every name a lazily exporting package lists resolves to its submodule's object; an unknown
    name is an AttributeError, as for any module."""
    pkg = importlib.import_module(package)
    assert pkg.__all__ and len(set(pkg.__all__)) == len(pkg.__all__)
    for name in pkg.__all__:
        value = getattr(pkg, name)
        owners = [m for m in vars(pkg).values()
                  if getattr(m, "__name__", "").startswith(package + ".")
                  and name in vars(m) and vars(m)[name] is value]
        assert owners, name
        assert name in dir(pkg)
    with pytest.raises(AttributeError):
        getattr(pkg, "no_such_name")


# ----------------------------------------------------------------------------- deferred imports

_DEFERRED_PROBE = """
import inspect, json, sys
from gem_core.runtime.imports import defer_unused_imports, is_deferred
defer_unused_imports()
steps = {}
import torch
steps["torch"] = is_deferred("torch._dynamo")
import torch_geometric
from gem_core.models.targets import build_model
steps["pyg"] = is_deferred("torch._dynamo")
steps["datasets"] = is_deferred("torch_geometric.datasets") and "pandas" not in sys.modules
steps["datasets_attribute"] = torch_geometric.datasets is sys.modules["torch_geometric.datasets"]
for module in list(sys.modules.values()):  # what inspect.getmodule does (torch does it too)
    hasattr(module, "__file__")
steps["introspection"] = is_deferred("torch._dynamo") and is_deferred("torch_geometric.datasets")
steps["dataset_class"] = torch_geometric.datasets.TUDataset.__module__
steps["datasets_loaded"] = not is_deferred("torch_geometric.datasets")
from torch_geometric.datasets.motif_generator import HouseMotif  # a submodule of the real one
steps["motif"] = HouseMotif()().num_nodes
steps["optimized_module"] = torch._dynamo.OptimizedModule.__name__
steps["after_use"] = is_deferred("torch._dynamo")
import torch._dynamo.utils  # a submodule of the real package
compiled = torch.compile(lambda a: a * 2, backend="eager")
steps["compile"] = compiled(torch.ones(2)).tolist()
steps["is_torch_instance"] = torch_geometric.is_torch_instance(torch.compile(torch.nn.Linear(1, 1)),
                                                               torch.nn.Linear)
print(json.dumps(steps))
"""


def test_dynamo_and_pyg_datasets_wait_for_their_first_use_and_then_work():
    """PyG imports torch._dynamo and all its datasets (with pandas) eagerly (1.3-1.8 s of a cold
    command); the command line's process defers them: torch, PyG and the engine import without
    them, introspection of sys.modules does not load them, ``torch_geometric.datasets`` is still
    PyG's attribute, and their first real use (a dataset class, a submodule, torch.compile, PyG's
    is_torch_instance) loads and works."""
    import json

    steps = json.loads(_python_lines(_DEFERRED_PROBE)[-1])
    assert steps == {"torch": True, "pyg": True, "datasets": True, "datasets_attribute": True,
                     "introspection": True, "dataset_class": "torch_geometric.datasets.tu_dataset",
                     "datasets_loaded": True, "motif": 5,
                     "optimized_module": "OptimizedModule", "after_use": False,
                     "compile": [2.0, 2.0], "is_torch_instance": True}


def test_a_cold_explain_never_imports_dynamo_and_answers_as_in_process(tmp_path):
    """`explain --smiles` in its own process (dynamo deferred, never loaded) writes the same JSON
    as the same command run in this process, where torch._dynamo is imported for real."""
    import json

    import torch._dynamo  # noqa: F401  (this process: the real module, nothing deferred)
    from gem_core.cli import main

    argv = ["explain", "--smiles", "c1ccc(cc1)[N+](=O)[O-]", "--no-progress"]
    assert main([*argv, "--json", str(tmp_path / "here.json")]) == 0
    code = ("import sys\nfrom gem_core.cli import main\n"
            f"code = main({[*argv, '--json', str(tmp_path / 'there.json')]!r})\n"
            "from gem_core.runtime.imports import is_deferred\n"
            "print('deferred' if is_deferred('torch._dynamo') else 'loaded')\n"
            "sys.exit(code)\n")
    assert _python_lines(code)[-1] == "deferred"
    assert json.loads((tmp_path / "there.json").read_text()) == \
        json.loads((tmp_path / "here.json").read_text())


def test_importing_the_entry_point_runs_nothing(monkeypatch):
    """A ``spawn`` worker of a process started from ``gem_core/__main__.py``'s path imports that
    file again as ``__mp_main__``: it must not run the command line on the worker's arguments.
    (Started with ``-m``, CPython skips the re-import; ``tests/test_screen.py`` runs that layout.)"""
    import runpy

    monkeypatch.setattr(sys, "argv", ["gem_core", "--multiprocessing-fork"])
    runpy.run_module("gem_core.__main__", run_name="__mp_main__")  # must not raise SystemExit
