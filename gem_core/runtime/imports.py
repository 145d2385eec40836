"""Start-up without PyG's import tax: modules imported eagerly that a command never runs.

``import torch_geometric`` imports ``torch._dynamo`` (``torch.compile``'s tracer, with sympy and
pandas behind it) only so that ``torch_geometric.is_torch_instance`` can name the class of a compiled
model: 1.0-1.5 s of every cold command on 2 cores, for a module no command of ours uses. It also
imports every dataset class it has, ``torch_geometric.datasets``, and with them its LLM package
and pandas (590 modules, 0.3 s), where a command that loads no dataset (``explain --smiles``, a
screen's workers) uses none. In the command line's own process, :func:`defer_unused_imports` puts
a stand-in under those names; the first attribute anyone reads from one (``torch.compile``,
``is_torch_instance``, ``from torch_geometric.datasets import TUDataset``, a submodule import)
imports the real module and answers from it, so behaviour is unchanged, only the cost moves to
where it is needed. The stand-in of a submodule is also its package's attribute
(``torch_geometric.datasets``), as the import system makes a submodule it loads.

Only the command line installs it: a library must not change its host's imports, so ``import
gem_core`` (the PyG adapter, the app) never does.
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys
import threading
import types
from typing import Any, Optional

__all__ = ["DEFERRED", "defer_unused_imports", "is_deferred"]

#: modules PyG imports eagerly that most commands of ours never use
DEFERRED: tuple[str, ...] = ("torch._dynamo", "torch_geometric.datasets")

_LOCK = threading.RLock()


#: the special names that need the real module (submodule imports, ``import *``)
_LOADING_DUNDERS = frozenset({"__path__", "__all__"})


class _DeferredModule(types.ModuleType):
    """Stands in for a module until its first attribute is read, then imports it and forwards.

    Other special names (``__file__``, ``__wrapped__`` …) are answered as missing without
    loading: tools that walk ``sys.modules`` ask for them (``inspect.getmodule``, which torch runs
    while it is itself being imported, when the real module cannot load yet).
    """

    def __getattr__(self, attr: str) -> Any:  # only called for names the stand-in lacks
        if attr.startswith("__") and attr.endswith("__") and attr not in _LOADING_DUNDERS:
            raise AttributeError(
                f"module {self.__name__!r} (not imported yet) has no attribute {attr!r}"
            )
        return getattr(_load(self.__name__, self), attr)


def _load(name: str, stand_in: types.ModuleType) -> types.ModuleType:
    with _LOCK:
        if sys.modules.get(name) is stand_in:
            del sys.modules[name]  # the import system then loads the real module
        return importlib.import_module(name)


class _NameStandInsInPackage(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when a package with deferred submodules is imported, it wraps the
    package's loader so that once the package has run, each stand-in is also its attribute.
    ``import torch_geometric.datasets`` inside ``torch_geometric`` finds the stand-in in
    ``sys.modules`` and, unlike a load, binds nothing; without this, ``torch_geometric.datasets``
    read as an attribute would be missing until the real module loads."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        children = [
            child for child in DEFERRED if child.rpartition(".")[0] == name and is_deferred(child)
        ]
        if not children:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if getattr(spec.loader, "exec_module", None) is not None:
            spec.loader = _ThenName(spec.loader, children)
        return spec


class _ThenName(importlib.abc.Loader):
    """``loader``, then the stand-ins of ``children`` named in the package it ran; the package is
    left with ``loader`` itself as its loader."""

    def __init__(self, loader: Any, children: list[str]):
        self.loader = loader
        self.children = children

    def create_module(self, spec: Any) -> Optional[types.ModuleType]:
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        for child in self.children:
            stand_in = sys.modules.get(child)
            short = child.rpartition(".")[2]
            if isinstance(stand_in, _DeferredModule) and short not in vars(module):
                setattr(module, short, stand_in)


_FINDER = _NameStandInsInPackage()


def defer_unused_imports() -> list[str]:
    """Install stand-ins for the :data:`DEFERRED` modules not imported yet; returns their names.

    Cheap (torch itself is not imported) and idempotent.
    """
    installed = []
    with _LOCK:
        for name in DEFERRED:
            if name not in sys.modules:
                sys.modules[name] = _DeferredModule(name)
                installed.append(name)
                parent, _, short = name.rpartition(".")
                package = sys.modules.get(parent)
                if package is not None and short not in vars(package):
                    setattr(package, short, sys.modules[name])
        if installed and _FINDER not in sys.meta_path:
            sys.meta_path.insert(0, _FINDER)
    return installed


def is_deferred(name: str) -> bool:
    """Whether ``name`` is still a stand-in (its real module not imported yet)."""
    return isinstance(sys.modules.get(name), _DeferredModule)
