"""``scripts/app.sh``: the front door installs once, then starts without re-running pip."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _app_sh(env: dict) -> subprocess.CompletedProcess:
    # `streamlit run … --help` goes through the whole script and exits without serving
    return subprocess.run(["bash", "scripts/app.sh", "--help"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_app_sh_installs_once_then_skips_pip(tmp_path):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    first = _app_sh(env)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "Usage: streamlit run" in first.stdout
    stamps = list((tmp_path / "gem-explorer").glob("installed-*"))
    assert len(stamps) == 1
    # pip refuses to run outside a virtualenv with this set: the second start must not call it
    second = _app_sh({**env, "PIP_REQUIRE_VIRTUALENV": "1"})
    assert second.returncode == 0, second.stderr[-2000:]
    assert "Usage: streamlit run" in second.stdout
    # a changed requirement set (another stamp name) installs again: here pip is refused
    stamps[0].rename(stamps[0].with_name("installed-stale"))
    third = _app_sh({**env, "PIP_REQUIRE_VIRTUALENV": "1"})
    assert third.returncode != 0 and "virtualenv" in third.stderr
