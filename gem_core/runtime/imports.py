"""Start-up without PyG's import tax: modules imported eagerly that a command never runs.

``import torch_geometric`` imports ``torch._dynamo`` (``torch.compile``'s tracer, with sympy and
pandas behind it) only so that ``torch_geometric.is_torch_instance`` can name the class of a compiled
model: 1.0-1.5 s of every cold command on 2 cores, for a module no command of ours uses. In the
command line's own process, :func:`defer_unused_imports` puts a stand-in under that name; the first
attribute anyone reads from it (``torch.compile``, ``is_torch_instance``, ``from torch._dynamo
import …``) imports the real module and answers from it, so behaviour is unchanged, only the cost
moves to where it is needed.

Only the command line installs it: a library must not change its host's imports, so ``import
gem_core`` (the PyG adapter, the app) never does.
"""
from __future__ import annotations

import importlib
import sys
import threading
import types
from typing import Any

__all__ = ["DEFERRED", "defer_unused_imports", "is_deferred"]

#: modules imported eagerly by PyG that no command of ours runs
DEFERRED: tuple[str, ...] = ("torch._dynamo",)

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
            raise AttributeError(f"module {self.__name__!r} (not imported yet) has no "
                                 f"attribute {attr!r}")
        return getattr(_load(self.__name__, self), attr)


def _load(name: str, stand_in: types.ModuleType) -> types.ModuleType:
    with _LOCK:
        if sys.modules.get(name) is stand_in:
            del sys.modules[name]  # the import system then loads the real module
        return importlib.import_module(name)


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
    return installed


def is_deferred(name: str) -> bool:
    """Whether ``name`` is still a stand-in (its real module not imported yet)."""
    return isinstance(sys.modules.get(name), _DeferredModule)
