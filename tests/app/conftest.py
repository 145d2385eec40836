"""Helpers for the Streamlit AppTest tests of the app (no browser)."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

import pytest

APP = Path(__file__).resolve().parents[2] / "app" / "streamlit_app.py"
# Importing torch / PyG on the first run takes far longer than AppTest's 3 s default.
TIMEOUT = 180


def make_app(methods: Iterable[str] = ("random", "gnnexplainer"), **state):
    """An AppTest of the whole app (router + sidebar), run once, with preset session state."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.session_state["sb_methods"] = list(methods)
    for key, value in state.items():
        at.session_state[key] = value
    return at.run()


def networks(at) -> list[dict]:
    """The arguments of every live network view on the page (nodes, edges, options, legend)."""
    import json

    out: list[dict] = []

    def walk(node):
        for child in getattr(node, "children", {}).values():
            if getattr(child, "type", None) == "component_instance" and \
                    child.proto.component_name.endswith("gem_vis_network"):
                args = json.loads(child.proto.json_args)
                args.update(json.loads(args.pop("view")))  # the view's one JSON string
                out.append(args)
            walk(child)

    walk(at.main)
    return out


def block_paths(at, marker: str) -> dict[str, tuple]:
    """Where each keyed container whose key holds ``marker`` sits in the page's element tree
    (its delta path), by the rest of its key. A drawn view whose path changes between reruns
    is rebuilt from scratch by the browser instead of updated in place."""
    found: dict[str, tuple] = {}

    def walk(node, path=()):
        for i, child in getattr(node, "children", {}).items():
            ident = str(getattr(getattr(child, "proto", None), "id", ""))
            if marker in ident:
                found[ident.rsplit(marker, 1)[1]] = path + (i,)
            walk(child, path + (i,))

    walk(at.main)
    return found


def texts(elements) -> list[str]:
    return [e.value for e in elements]


def no_exception(at) -> None:
    assert not at.exception, [e.value for e in at.exception]


def mutagenicity_target_available() -> bool:
    """The Molecule page's default Mutagenicity target loads from a checkpoint."""
    from gem_core.data.config import molecule_default_target
    from gem_core.models.targets import load_saved_target

    return load_saved_target("mutagenicity", molecule_default_target()) is not None


@pytest.fixture
def needs_mutagenicity_model():
    if not mutagenicity_target_available():
        pytest.skip("no Mutagenicity target checkpoint (cache or assets/targets/mutagenicity.pt)")


# The app's own modules (components, state, teaching) live in app/, which `streamlit run` puts
# on sys.path; do the same for the unit tests of those modules.
import sys  # noqa: E402

if str(APP.parent) not in sys.path:
    sys.path.insert(0, str(APP.parent))


def _track_media_managers():
    """The last ``MediaFileManager`` objects AppTest made (one per run, on its mock runtime,
    dropped with it after the run): the runs' files are found there. (Found through the
    garbage collector before; the app's ``gc.freeze`` hides long-lived objects from it.)"""
    from collections import deque

    from streamlit.runtime.media_file_manager import MediaFileManager

    made: deque = deque(maxlen=8)
    init = MediaFileManager.__init__

    def tracking(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.appendleft(self)

    MediaFileManager.__init__ = tracking
    return made


_MEDIA_MANAGERS = _track_media_managers()


def download_bytes(at, key: str) -> bytes:
    """The bytes behind a download button of the last run (its data made now when the page
    gave a callable, as a click does)."""
    proto = at.download_button(key=key).proto
    deferred = proto.deferred_file_id  # data made on click (a callable): made here
    file_id = deferred or proto.url.rsplit("/", 1)[-1].split(".")[0]
    for manager in list(_MEDIA_MANAGERS):
        if deferred:
            try:
                file_id = manager.execute_deferred(deferred).rsplit("/", 1)[-1].split(".")[0]
            except Exception:  # another run's manager
                continue
        try:
            return bytes(manager._storage.get_file(file_id).content)
        except Exception:  # another run's manager
            continue
    raise LookupError(f"no media file behind the download button {key!r}")


@pytest.fixture
def pgexplainer_not_fitted(monkeypatch, tmp_path):
    """A machine where PGExplainer has never been fitted: no fit held, cached or shipped (the
    repository ships one per dataset and target in ``assets/explainers/``)."""
    import streamlit as st

    import gem_core.service.session as session

    shipped = session.Workbench.shipped_path

    def without_pgexplainer(self, exp):
        return tmp_path / "not-shipped.pt" if exp.name == "pgexplainer" else shipped(self, exp)

    monkeypatch.setattr(session.Workbench, "shipped_path", without_pgexplainer)
    monkeypatch.setattr(session, "_WORKBENCHES", {})
    monkeypatch.setenv("GEM_CACHE_DIR", str(tmp_path / "cache"))
    st.cache_resource.clear()
    yield
    st.cache_resource.clear()
