"""Lazy package exports (PEP 562): a package names what its submodules define, and a submodule is
imported when one of its names is first used.

Why: a package ``__init__`` that imports its submodules makes every light name (the registry's
method names, a default) cost the heaviest submodule's imports (torch, PyG). With this, the CLI's
``--help`` and input checks load only what they read.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, Sequence[str]]
) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """``(__all__, __getattr__, __dir__)`` for ``package`` from ``{submodule: names}``.

    ``__getattr__(name)`` imports ``package.submodule`` and caches the value in the package's
    namespace, so later look-ups are plain attribute reads.
    """
    module_of = {name: module for module, names in exports.items() for name in names}
    names = list(module_of)

    def __getattr__(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(importlib.import_module(package), name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(importlib.import_module(package)), *names})

    return names, __getattr__, __dir__
