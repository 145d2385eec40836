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
                out.append(json.loads(child.proto.json_args))
            walk(child)

    walk(at.main)
    return out


def texts(elements) -> list[str]:
    return [e.value for e in elements]


def no_exception(at) -> None:
    assert not at.exception, [e.value for e in at.exception]


def mutagenicity_target_available() -> bool:
    from gem_core.targets import load_saved_target

    return load_saved_target("mutagenicity") is not None


@pytest.fixture
def needs_mutagenicity_model():
    if not mutagenicity_target_available():
        pytest.skip("no Mutagenicity target checkpoint (cache or assets/targets/mutagenicity.pt)")


# The app's own modules (components, state, teaching) live in app/, which `streamlit run` puts
# on sys.path; do the same for the unit tests of those modules.
import sys  # noqa: E402

if str(APP.parent) not in sys.path:
    sys.path.insert(0, str(APP.parent))
