"""The engine's packages are layers: every import runs downward, none runs back up or sideways.

Reads every module's import statements (including those inside functions and under
``TYPE_CHECKING``) with :mod:`ast`, so a lazy import cannot hide an upward edge or a cycle.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parents[1] / "gem_core"
# lowest first; a package may import its own modules and any package listed before it
LAYERS = ["runtime", "data", "chemistry", "models", "gem", "explainers", "pyg", "service",
          "evaluation", "cli", "examples"]
TOP_LEVEL_FILES = {"__init__.py", "__main__.py"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ENGINE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Absolute names of the gem_core modules (or packages) one file imports."""
    tree = ast.parse(path.read_text())
    is_pkg = path.name == "__init__.py"
    here = _module_name(path).split(".")
    base = here if is_pkg else here[:-1]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("gem_core"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                root = base[: len(base) - (node.level - 1)]
                mod = ".".join(root + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.startswith("gem_core"):
                found.add(mod)
                found.update(f"{mod}.{a.name}" for a in node.names)
    return found


def _engine_files() -> list[Path]:
    return sorted(ENGINE.rglob("*.py"))


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def test_at_most_five_modules_at_the_top_of_the_engine():
    top = {p.name for p in ENGINE.glob("*.py")}
    assert top <= TOP_LEVEL_FILES | {"api.py"}, f"modules outside a layer package: {sorted(top)}"


def test_every_engine_module_lives_in_a_layer_package():
    strays = [str(p.relative_to(ENGINE)) for p in _engine_files()
              if p.parent != ENGINE and p.relative_to(ENGINE).parts[0] not in LAYERS]
    assert not strays, f"modules in a package that is not a layer: {strays}"


@pytest.mark.parametrize("path", _engine_files(), ids=lambda p: str(p.relative_to(ENGINE)))
def test_imports_run_downward(path: Path):
    own = _layer(_module_name(path))
    if own is None:
        return  # gem_core/__init__.py and __main__.py sit above every layer
    rank = LAYERS.index(own)
    upward = sorted(m for m in _imports(path)
                    if _layer(m) is not None and _layer(m) != own and LAYERS.index(_layer(m)) >= rank)
    assert not upward, f"{path.relative_to(ENGINE)} ({own}) imports from a layer not below it: {upward}"


def test_no_import_cycle_between_engine_modules():
    modules = {_module_name(p): p for p in _engine_files()}
    graph = {m: {i for i in _imports(p) if i in modules and i != m} for m, p in modules.items()}
    # a package's __init__ re-exporting its own modules is not a cycle of separate modules
    for m in graph:
        graph[m] = {i for i in graph[m] if not m.startswith(i + ".")}
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycle = path[path.index(n):] + [n]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n)
        path.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_no_sys_path_edits_anywhere():
    root = ENGINE.parent
    offenders = [str(p.relative_to(root)) for d in ("gem_core", "app", "tools", "scripts")
                 for p in (root / d).rglob("*.py") if "sys.path" in p.read_text()]
    assert not offenders, f"sys.path edited in {offenders}"
