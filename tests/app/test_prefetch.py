"""The background prefetcher: memoises, computes ahead, never computes a key twice at once."""
from __future__ import annotations

import threading
import time

from prefetch import Prefetcher


def _wait_for(cond, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_get_memoises_and_request_computes_in_the_background():
    pf = Prefetcher()
    calls: list[str] = []
    assert pf.get("a", lambda: calls.append("a") or 1) == 1
    assert pf.get("a", lambda: calls.append("a again") or 2) == 1  # memoised
    pf.request([("b", lambda: calls.append("b") or 3), ("a", lambda: calls.append("x") or 0)])
    _wait_for(lambda: "b" in pf)
    assert pf.get("b", lambda: 99) == 3
    assert calls == ["a", "b"]  # "a" was known: not queued again


def test_foreground_waits_for_the_running_job_instead_of_recomputing():
    pf = Prefetcher()
    started, release = threading.Event(), threading.Event()
    calls: list[str] = []

    def slow():
        calls.append("background")
        started.set()
        release.wait(5)
        return "value"

    pf.request([("k", slow)])
    assert started.wait(5)
    threading.Timer(0.2, release.set).start()
    assert pf.get("k", lambda: calls.append("foreground") or "other") == "value"
    assert calls == ["background"]


def test_a_failed_background_job_is_retried_in_the_foreground():
    pf = Prefetcher()

    def boom():
        raise RuntimeError("no")

    pf.request([("k", boom)])
    _wait_for(lambda: not pf._running and not pf._queued)
    assert "k" not in pf
    assert pf.get("k", lambda: 5) == 5


def test_queue_is_bounded_and_newest_requests_come_first():
    pf = Prefetcher(max_queued=2)
    gate = threading.Event()
    order: list[int] = []
    pf.request([("block", lambda: gate.wait(5))])
    _wait_for(lambda: "block" in pf._running)
    pf.request([(i, lambda i=i: order.append(i)) for i in (1, 2)])
    pf.request([(i, lambda i=i: order.append(i)) for i in (3, 4)])
    gate.set()
    _wait_for(lambda: not pf._running and not pf._queued)
    assert order == [3, 4]  # 1 and 2 were dropped for the newer request


def test_background_jobs_wait_while_a_page_script_runs():
    pf = Prefetcher()
    ran = threading.Event()
    with pf.foreground():
        pf.request([("k", lambda: ran.set() or 1)])
        assert not ran.wait(0.3)  # held back while the script runs
    assert ran.wait(5)
    _wait_for(lambda: "k" in pf)
