"""Background prefetch: compute what the user will probably look at next.

The Explore page shows one test instance at a time. Gem answers in microseconds, but
GNNExplainer optimises a mask for ~0.5 s per instance and a large computation graph needs a
layout; done on click, that makes changing the instance slow. While the user looks at instance
``p``, one background thread computes the same things for the next few positions, so the next
click finds them ready.

One process-wide worker (a single thread, so it takes at most one core from the sessions),
deduplicated jobs, and results shared by every session. The worker is polite: it starts a job
only while no page script runs (:meth:`Prefetcher.foreground`), because a CPU-bound Python
thread slows every other thread through the GIL. A job asked for in the foreground while
the worker runs it is waited for, not computed twice. Results are the same values the
foreground would compute (same functions, same seeds); the prefetch only changes *when*.
"""
from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

log = logging.getLogger("gem_app.prefetch")


class Prefetcher:
    """A memo of ``key -> value`` filled by one background thread or by the caller.

    Args:
        max_items: finished results kept (least recently used dropped first).
        max_queued: jobs waiting at most; older requests are dropped when exceeded.
    """

    def __init__(self, max_items: int = 2000, max_queued: int = 16):
        self._done: OrderedDict[Hashable, Any] = OrderedDict()
        self._running: dict[Hashable, Future] = {}
        self._queued: OrderedDict[Hashable, Callable[[], Any]] = OrderedDict()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gem-prefetch")
        self._max_items = max_items
        self._max_queued = max_queued
        self._worker_busy = False
        self._foreground = 0
        self._idle = threading.Condition(self._lock)

    @contextmanager
    def foreground(self) -> Iterator[None]:
        """Mark a page script run; background jobs wait to start until none is running."""
        with self._lock:
            self._foreground += 1
        try:
            yield
        finally:
            with self._lock:
                self._foreground -= 1
                if not self._foreground:
                    self._idle.notify_all()

    def get(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """The value for ``key``: memoised, awaited if the worker computes it now, else computed
        here (and memoised)."""
        with self._lock:
            if key in self._done:
                self._done.move_to_end(key)
                return self._done[key]
            self._queued.pop(key, None)
            future = self._running.get(key)
        if future is not None:
            try:
                return future.result()
            except Exception:  # the background attempt failed: try once more, here
                pass
        value = compute()
        self._store(key, value)
        return value

    def request(self, jobs: Iterable[tuple[Hashable, Callable[[], Any]]]) -> None:
        """Queue jobs (most wanted first) for the background thread; known keys are skipped."""
        with self._lock:
            for key, compute in reversed(list(jobs)):
                if key in self._done or key in self._running:
                    continue
                self._queued[key] = compute
                self._queued.move_to_end(key, last=False)  # newest requests first
            while len(self._queued) > self._max_queued:
                self._queued.popitem(last=True)
            if self._queued and not self._worker_busy:
                self._worker_busy = True
                self._pool.submit(self._drain)

    def _drain(self) -> None:
        while True:
            with self._lock:
                while self._foreground and self._queued:
                    self._idle.wait(timeout=1.0)
                if not self._queued:
                    self._worker_busy = False
                    return
                key, compute = self._queued.popitem(last=False)
                future: Future = Future()
                self._running[key] = future
            try:
                value = compute()
            except Exception as exc:  # the foreground will retry and show the error
                log.info("prefetch of %r failed: %s", key, exc)
                future.set_exception(exc)
            else:
                self._store(key, value)
                future.set_result(value)
            finally:
                with self._lock:
                    self._running.pop(key, None)

    def _store(self, key: Hashable, value: Any) -> None:
        with self._lock:
            self._done[key] = value
            self._done.move_to_end(key)
            while len(self._done) > self._max_items:
                self._done.popitem(last=False)

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._done
