"""A class on one server: each rerun's server time is measured, and work is shared by sessions.

Every browser session runs the script in its own thread of one server process; what a rerun
computes for one student must not be computed again for the next (issue 49). These tests run
two AppTest sessions in one process, as two students on one server.
"""
from __future__ import annotations

import re

from .conftest import make_app, no_exception, texts

NITROBENZENE = "O=[N+]([O-])c1ccccc1"


def test_every_rerun_logs_its_server_time_and_the_sidebar_shows_it(capfd):
    at = make_app(methods=("random",))
    no_exception(at)
    at.run()
    lines = re.findall(r"rerun session=(\S+) page=(\S+) start=([\d.]+) ms=([\d.]+)",
                       capfd.readouterr().err)
    assert len(lines) >= 2 and all(page == "explore" and float(ms) > 0
                                   for _, page, _, ms in lines[-2:]), lines
    captions = texts(at.sidebar.caption)
    assert any(re.match(r"Session \S+ · this run \d+ ms so far", c) for c in captions), captions
    assert any(c.startswith("Last runs (page, ms): explore ") for c in captions), captions


def test_a_molecule_is_explained_once_for_every_session(monkeypatch):
    """The Molecule page kept its results per browser session: each student typing the
    class's example paid for its explanation (GNNExplainer alone: half a second on the strong
    target). Now a second session showing the same molecule explains nothing."""
    from gem_core.service import molecules

    calls = []
    real = molecules.explain_molecules

    def counting(mols, methods=("gem",), *args, **kwargs):
        calls.append(tuple(methods))
        return real(mols, methods, *args, **kwargs)

    monkeypatch.setattr(molecules, "explain_molecules", counting)
    pages = []
    for _ in range(2):
        at = make_app(methods=("gem", "random"))
        at.switch_page("views/molecule.py").run()
        at.text_input(key="mol_smiles").input(NITROBENZENE)
        at.button(key="mol_explain").click().run()
        no_exception(at)
        pages.append([m.value for m in at.main.metric])
    assert pages[0] == pages[1] and pages[0]
    assert len([c for c in calls if "gem" in c]) <= 1, calls


def test_bench_users_reads_each_actions_server_time_from_the_rerun_log():
    """``bench app --users``: an action's server time is the sum of its session's runs that
    started between its click and its result; other sessions' runs are not counted."""
    from tools.bench_users import User, _p, _server_times

    log = "\n".join([
        "2026-11-29 05:00:00,000 gem_app.rerun rerun session=aaaaaaaa-1 page=explore "
        "start=100.000 ms=120.0",
        "2026-11-29 05:00:00,100 gem_app.rerun rerun session=bbbbbbbb-2 page=explore "
        "start=100.050 ms=900.0",
        "2026-11-29 05:00:01,000 gem_app.rerun rerun session=aaaaaaaa-1 page=molecule "
        "start=101.000 ms=80.0",
        "2026-11-29 05:00:01,200 gem_app.rerun rerun session=aaaaaaaa-1 page=molecule "
        "start=101.200 ms=40.0",
        "2026-11-29 05:00:09,000 gem_app.rerun rerun session=aaaaaaaa-1 page=explore "
        "start=109.000 ms=50.0"])
    user = User("u0", 0, 35, 70, 0.0, 60.0)
    user.session = "aaaaaaaa"
    user.records = [{"action": "open", "start": 99.99, "end": 100.5},
                    {"action": "molecule", "start": 100.98, "end": 101.5}]
    _server_times(log, [user])
    assert [r["server_s"] for r in user.records] == [0.12, 0.12]
    assert [r["reruns"] for r in user.records] == [1, 2]
    assert _p([3.0, 1.0, 2.0], 0.5) == 2.0 and _p([1.0, 2.0, 3.0, 4.0], 0.95) == 4.0


def test_panels_read_their_ranking_once_per_server_process(monkeypatch):
    """A panel's scores are read once per server process and its ranking at K (top-K, ties)
    once per K: a second session showing the same instance at the same K computes nothing, and
    a K change ranks the same scores anew."""
    from state import engine_cache

    engine_cache.ranked_test_instance.clear()
    engine_cache.scored_test_instance.clear()
    made, ranked = [], []
    real = engine_cache.Explanation

    class Counting(real):
        def ranked(self, i, k):
            ranked.append((self.method, k))
            return super().ranked(i, k)

    def counting(method, *args, **kwargs):
        made.append(method)
        return Counting(method, *args, **kwargs)

    monkeypatch.setattr(engine_cache, "Explanation", counting)
    first = make_app(methods=("random", "gem"))
    no_exception(first)
    assert sorted(made) == ["gem", "random"], made
    k = first.session_state["sb_k_ba_shapes"]
    assert sorted(ranked) == [("gem", k), ("random", k)], ranked
    second = make_app(methods=("random", "gem"))
    no_exception(second)
    assert len(made) == 2 and len(ranked) == 2  # nothing computed for the second session
    assert [m.value for m in second.main.markdown if "on the explanation" in m.value] == \
        [m.value for m in first.main.markdown if "on the explanation" in m.value]
    other = k + 1 if k < 9 else k - 1
    second.slider(key="sb_k_ba_shapes").set_value(other).run()
    no_exception(second)
    assert len(made) == 2  # the same scores
    assert sorted(ranked[2:]) == [("gem", other), ("random", other)], ranked


def test_cache_keys_read_a_function_signature_once():
    """Streamlit reads a cached function's signature on every call to name its arguments; the
    app memoizes that per function, and a cached call still skips ``_`` arguments."""
    import inspect

    import streamlit as st
    from state.runtime import memoize_cache_signatures
    from streamlit import type_util

    assert memoize_cache_signatures()
    assert memoize_cache_signatures()  # idempotent: not wrapped twice

    def f(a, b, _model=None, *rest, c=1):
        return a

    params = type_util.get_func_parameters(f)
    assert [p.name for p in params] == list(inspect.signature(f).parameters)
    assert type_util.get_func_parameters(f) is params  # read once

    calls = []

    @st.cache_data(show_spinner=False)
    def cached(x, _unhashable):
        calls.append(x)
        return x * 2

    assert cached(3, lambda: None) == 6 and cached(3, object()) == 6 and cached(4, None) == 8
    assert calls == [3, 4]


def test_spinner_shows_only_while_a_key_is_first_computed(monkeypatch):
    from contextlib import contextmanager

    import pytest
    from state import engine_cache

    shown = []

    @contextmanager
    def spinner(text):
        shown.append(text)
        yield

    monkeypatch.setattr(engine_cache.st, "spinner", spinner)
    key = ("test-spinner", object())
    with pytest.raises(ValueError):
        with engine_cache.spinner_on_first(key, "first"):
            raise ValueError("failed: not marked computed")
    with engine_cache.spinner_on_first(key, "again"):
        pass
    with engine_cache.spinner_on_first(key, "hit"):
        pass
    assert shown == ["first", "again"]


def test_what_is_kept_with_a_shared_result_is_computed_once_and_goes_with_it():
    import gc

    from state.view_cache import _kept, kept_with

    class Result:  # a shared result, as a cached molecule explanation
        pass

    owner, calls = Result(), []
    first = kept_with(owner, ("svg", 1), lambda: calls.append(1) or "picture")
    assert kept_with(owner, ("svg", 1), lambda: calls.append(2) or "other") == first == "picture"
    assert kept_with(owner, ("svg", 2), lambda: calls.append(3) or "second") == "second"
    assert calls == [1, 3]
    ident = id(owner)
    assert ident in _kept()
    del owner
    gc.collect()
    assert ident not in _kept()  # gone with its owner: a new result at that address starts anew


def test_a_second_session_draws_no_molecule_again(monkeypatch):
    from components import molecule_view

    drawn = []
    real = molecule_view.molecule_svg

    def counting(*args, **kwargs):
        drawn.append(args[1] if len(args) > 1 else kwargs.get("pairs"))
        return real(*args, **kwargs)

    monkeypatch.setattr(molecule_view, "molecule_svg", counting)
    images = []
    for _ in range(2):
        at = make_app(methods=("gem", "random"))
        at.switch_page("views/molecule.py").run()
        at.text_input(key="mol_smiles").input("O=[N+]([O-])c1ccc(Cl)cc1")
        at.button(key="mol_explain").click().run()
        no_exception(at)
        images.append(len(drawn))
    assert images[0] >= 3 and images[1] == images[0], images  # the second session drew nothing
