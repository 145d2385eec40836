"""How a page run goes on the server: the process's tuning, each rerun's timing, the profiler.

Once per process, torch and BLAS get ``$GEM_NUM_THREADS`` threads (on import of this module, which
the entry point imports before anything else of the app). Every script run is timed and logged
(:func:`timed_rerun`, what ``bench app --users`` reads); every page runs through :func:`run_page`,
which turns an unexpected error into a message box, settles the heap (:func:`settle_heap`) and,
with ``$GEM_APP_PROFILE`` set, writes one cProfile file per rerun.
"""

from __future__ import annotations

import gc
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import streamlit as st
from messages import show_error

from gem_core.api import configure_threads

# ----------------------------------------------------------------------------- threads


@st.cache_resource(show_spinner=False)
def _threads() -> int:
    """Apply ``$GEM_NUM_THREADS`` once per process."""
    return configure_threads()


_threads()


# ----------------------------------------------------------------------------- cache keys


def memoize_cache_signatures() -> bool:
    """Read each cached function's signature once per process, not on every call.

    Streamlit builds a cached call's key from the names of its positional arguments, which it
    reads with ``inspect.signature`` once per argument on every call (``type_util.
    get_func_parameters``): 8-11 % of an Explore or Molecule rerun whose results are all
    cached (py-spy), time every session of a class queues behind on the interpreter's lock. A
    function's signature does not change while the server runs, so the lookup is memoized per
    function. Returns whether the memo is in place (False where this Streamlit has no such
    function: its keys are then built as before)."""
    import functools

    from streamlit import type_util

    original = getattr(type_util, "get_func_parameters", None)
    if original is None:
        return False
    if getattr(original, "memoized", False):
        return True
    memo = functools.lru_cache(maxsize=4096)(original)

    def get_func_parameters(func):
        try:
            return memo(func)
        except TypeError:  # an unhashable callable: read it as Streamlit does
            return original(func)

    get_func_parameters.memoized = True  # type: ignore[attr-defined]
    type_util.get_func_parameters = get_func_parameters
    return True


memoize_cache_signatures()


# ----------------------------------------------------------------------------- heap

# A full garbage collection walks every object Python tracks: about half a million once torch,
# Streamlit and a data set are loaded, a 0.25-0.3 s pause on 2 cores that fell into a random
# click (an instance change took 0.37 s instead of 0.1 s of server time). When a page run leaves
# that many objects for the collector to walk (the first run; a new data set or model), the app
# collects once and freezes the survivors (``gc.freeze``: long-lived models, data sets, caches),
# so later collections walk only what is new. Collecting first leaves no garbage in the frozen
# set (freezing after every collection instead kept 0.15 MB of each rerun's garbage for good).
FREEZE_AT = 100_000  # objects the collector walks (~50 ms a full collection on 2 cores)


#: reruns (of every session) between two looks at the heap: listing the collector's objects
#: costs a few milliseconds under the GIL, which a class's reruns queue behind
SETTLE_EVERY = 16
_reruns_since_look = [SETTLE_EVERY]  # the first run looks


def settle_heap(threshold: int = FREEZE_AT, every: int = SETTLE_EVERY) -> bool:
    """Every ``every`` reruns of the process: collect and freeze when the collector has
    ``threshold`` or more objects to walk (see above); whether it did."""
    _reruns_since_look[0] += 1
    if _reruns_since_look[0] < every:
        return False
    _reruns_since_look[0] = 0
    if len(gc.get_objects()) < threshold:
        return False
    gc.collect()
    gc.freeze()
    return True


# ----------------------------------------------------------------------------- rerun timing

RERUN_LOG = logging.getLogger("gem_app.rerun")
#: the reruns a session's debug expander lists
RECENT_RERUNS = 8
#: where the session keeps its last reruns (page, ms)
_RERUNS = "_reruns"


class _StderrHandler(logging.StreamHandler):
    """A stream handler on whatever ``sys.stderr`` is when a line is written (the server's log;
    a test's capture), not on the stream of the moment it was made."""

    @property  # type: ignore[override]
    def stream(self):
        import sys

        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


@st.cache_resource(show_spinner=False)
def _rerun_log_handler() -> bool:
    """Send the rerun lines to stderr (the server's log) once per process: Streamlit sets up
    only its own loggers."""
    if not RERUN_LOG.handlers:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
        RERUN_LOG.addHandler(handler)
        RERUN_LOG.setLevel(logging.INFO)
        RERUN_LOG.propagate = False
    return True


def session_id() -> str:
    """This browser session's id on the server (empty outside a script run)."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    return "" if ctx is None else "_".join(str(ctx.session_id).split())  # one word in the log


@contextmanager
def timed_rerun(page: str) -> Iterator[Callable[[], float]]:
    """Time this script run on the server (the whole rerun: sidebar, page, caches) and log it
    as ``rerun session=ID page=PAGE start=EPOCH ms=MS`` (what ``bench app --users`` reads).
    Yields a function giving the milliseconds so far (the debug expander shows them)."""
    _rerun_log_handler()
    wall, start = time.time(), time.perf_counter()

    def so_far() -> float:
        return 1000.0 * (time.perf_counter() - start)

    try:
        yield so_far
    finally:
        ms = so_far()
        RERUN_LOG.info(
            "rerun session=%s page=%s start=%.3f ms=%.1f", session_id(), page or "explore", wall, ms
        )
        recent = st.session_state.setdefault(_RERUNS, [])
        recent.append((page or "explore", round(ms, 1)))
        del recent[:-RECENT_RERUNS]


def recent_reruns() -> list[tuple[str, float]]:
    """This session's last reruns, oldest first: (page, server milliseconds)."""
    return list(st.session_state.get(_RERUNS, []))


# ----------------------------------------------------------------------------- page runs


def run_page(render: Callable[[], None]) -> None:
    """Run a page; an unexpected error becomes a message box instead of a traceback.

    Streamlit's own control flow (``st.rerun``, ``st.stop``) derives from BaseException and
    passes through.
    """
    # a developer's look at the reruns: one cProfile file per rerun in this folder
    profile_to = os.environ.get("GEM_APP_PROFILE")
    if profile_to:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    try:
        render()
    except Exception as exc:
        show_error(exc, "This page stopped on an unexpected error")
    finally:
        settle_heap()
        if profile_to:
            profiler.disable()
            Path(profile_to).mkdir(parents=True, exist_ok=True)
            profiler.dump_stats(Path(profile_to) / f"{time.time():.3f}.prof")
