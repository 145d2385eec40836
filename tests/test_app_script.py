"""``scripts/app.sh``: the front door installs into the project's .venv once, then starts without
re-running pip, and never asks the interpreter's own pip (which a stock Debian python3 refuses)."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _app_sh(env: dict) -> subprocess.CompletedProcess:
    # `streamlit run … --help` goes through the whole script and exits without serving
    return subprocess.run(["bash", "scripts/app.sh", "--help"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def _debian_like_python3(tmp_path: Path) -> Path:
    """A folder with a ``python3`` that behaves as Debian's own does under PEP 668: ``-m pip
    install`` is refused (externally-managed-environment); everything else runs."""
    real = shutil.which("python3")
    assert real is not None
    folder = tmp_path / "debian-bin"
    folder.mkdir()
    shim = folder / "python3"
    shim.write_text(
        "#!/usr/bin/env bash\n"
        'if [ "${1:-}" = "-m" ] && [ "${2:-}" = "pip" ]; then\n'
        '  echo "error: externally-managed-environment" >&2; exit 1\n'
        "fi\n"
        f'exec "{real}" "$@"\n')
    shim.chmod(0o755)
    return folder


def test_app_sh_installs_into_the_venv_once_then_skips_pip(tmp_path):
    debian = _debian_like_python3(tmp_path)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "PATH": f"{debian}{os.pathsep}{os.environ['PATH']}"}
    first = _app_sh(env)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "Usage: streamlit run" in first.stdout
    assert "externally-managed-environment" not in first.stderr  # python3's pip never asked
    stamps = list((tmp_path / "cache" / "gem-explorer").glob("installed-*"))
    assert len(stamps) == 1
    # with no package index at all, any pip install fails: the second start must not call pip
    offline = {**env, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": ""}
    second = _app_sh(offline)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "Usage: streamlit run" in second.stdout
    # a changed requirement set (another stamp name) installs again: here pip finds no index
    stamps[0].rename(stamps[0].with_name("installed-stale"))
    third = _app_sh(offline)
    assert third.returncode != 0


def test_the_scripts_never_run_the_interpreters_own_pip():
    """Every pip in the front door's scripts is the venv's (``$GEM_PY -m pip``)."""
    for script in ("app.sh", "test.sh", "venv.sh"):
        text = (ROOT / "scripts" / script).read_text()
        for line in text.splitlines():
            if "pip install" in line and not line.lstrip().startswith("#"):
                assert "$GEM_PY\" -m pip" in line, (script, line)
