"""What ``pip install .`` ships: every engine package, the shipped models and results, and no
dependency on the app's Streamlit, pyvis or Plotly."""
from __future__ import annotations

import fnmatch
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]


def test_every_engine_package_is_listed():
    found = {".".join(p.parent.relative_to(ROOT).parts)
             for p in (ROOT / "gem_core").rglob("__init__.py")}
    listed = set(SETUPTOOLS["packages"]) - {"gem_core.assets"}
    assert listed == found, f"missing {sorted(found - listed)}, stale {sorted(listed - found)}"


def test_every_shipped_asset_travels_in_the_wheel():
    assert SETUPTOOLS["package-dir"]["gem_core.assets"] == "assets"
    globs = SETUPTOOLS["package-data"]["gem_core.assets"]
    files = [p.relative_to(ROOT / "assets").as_posix()
             for p in (ROOT / "assets").rglob("*") if p.is_file()]
    assert files
    left_out = [f for f in files if not any(fnmatch.fnmatch(f, g) for g in globs)]
    assert not left_out, f"assets the wheel would not carry: {left_out}"


def test_the_engine_needs_none_of_the_apps_packages():
    app = {"streamlit", "pyvis", "plotly"}
    engine = {name.split(">")[0].split("<")[0].split("=")[0].strip().lower()
              for name in PYPROJECT["project"]["dependencies"]}
    assert not engine & app
    assert {name.split(">")[0].split("<")[0].lower()
            for name in PYPROJECT["project"]["optional-dependencies"]["app"]} == app
    # the CLI's explain path and the public API import none of them
    code = ("import sys, gem_core.api, gem_core.cli, gem_core.cli.explain, gem_core.pyg; "
            f"print(sorted(m for m in {sorted(app)!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout
