"""The line between the app and the engine: the app reaches the engine through a small public API,
only the app/state/ package touches Streamlit's caching and session state, and only the entry point
draws the sidebar."""
from __future__ import annotations

import ast
import re
from pathlib import Path

APP = Path(__file__).resolve().parents[2] / "app"
MAX_ENGINE_MODULES = 5


def _app_files() -> list[Path]:
    return sorted(APP.rglob("*.py"))


def _engine_modules(path: Path) -> set[str]:
    """The gem_core modules one app file imports (``from gem_core.x import y`` counts x, or x.y
    when y is a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gem_core"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("gem_core"))
    return found


def test_app_imports_at_most_five_engine_modules():
    used = set().union(*(_engine_modules(p) for p in _app_files()))
    assert len(used) <= MAX_ENGINE_MODULES, f"the app imports {len(used)} engine modules: {sorted(used)}"


def test_streamlit_caching_and_session_state_live_in_the_state_package():
    pattern = re.compile(r"st\.(cache_data|cache_resource|session_state)\b")
    state = APP / "state"
    offenders = {str(p.relative_to(APP)): sorted(set(pattern.findall(p.read_text())))
                 for p in _app_files()
                 if state not in p.parents and pattern.search(p.read_text())}
    assert not offenders, f"Streamlit caching / session state outside app/state/: {offenders}"
    assert not (APP / "state.py").exists(), "app/state.py and the app/state/ package both exist"


def test_only_the_entry_point_draws_the_sidebar():
    importers = {str(p.relative_to(APP)) for p in _app_files()
                 for node in ast.walk(ast.parse(p.read_text()))
                 if isinstance(node, (ast.Import, ast.ImportFrom))
                 and "sidebar" in ([a.name for a in node.names] if isinstance(node, ast.Import)
                                   else [node.module or ""])}
    assert importers == {"streamlit_app.py"}, importers


def test_every_name_of_the_public_api_loads_from_its_module():
    import importlib

    import gem_core.api as api

    for name in api.__all__:
        value = getattr(api, name)
        module = importlib.import_module(api._EXPORTS[name])
        assert value is getattr(module, name, None) or value.__name__.endswith(f".{name}"), name
