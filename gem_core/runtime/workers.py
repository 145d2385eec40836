"""Worker processes that use one core each and never outlive the process that started them.

Shared by the screen's chunk workers and ``reproduce --all``'s dataset workers: a
:class:`~concurrent.futures.ProcessPoolExecutor` whose workers set one torch thread and end when
their parent dies, even by ``kill -9`` (a killed parent otherwise leaves its pool's workers
waiting on a queue for ever, each holding its memory).
"""

from __future__ import annotations

import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Optional

__all__ = ["worker_pool", "die_with_parent", "WorkerLostError"]


class WorkerLostError(RuntimeError):
    """A worker process of a pool died (killed, out of memory, a crash in native code): said
    in one line by the command line, with what to do, instead of ``BrokenProcessPool``'s
    traceback."""


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def worker_pool(workers: int) -> ProcessPoolExecutor:
    """A pool of ``workers`` forked processes, each with one torch thread and bound to this
    process.

    Forked, they start at once and share what this process loaded (the engine, the model). That
    holds when this process uses CUDA too, as PyTorch's data loaders do: a forked child may not
    use CUDA itself, and ours only parse (``screen --device cuda``). Spawned workers would each
    import torch and RDKit again before their first task."""
    import threading

    ctx = multiprocessing.get_context("fork")
    # A forked worker knows it came from the main thread by that thread's id (die_with_parent).
    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=ctx,
        initializer=_worker_init,
        initargs=(os.getpid(), threading.main_thread().ident),
    )


def _worker_init(parent: int, parent_main_thread: Optional[int]) -> None:
    """Worker set-up: one thread, and never outlive the process that started it."""
    os.environ["GEM_NUM_THREADS"] = "1"
    import sys

    if "torch" in sys.modules:  # a forked worker inherits torch and its thread count
        sys.modules["torch"].set_num_threads(1)
    die_with_parent(parent, parent_main_thread)


def die_with_parent(parent: int, parent_main_thread: Optional[int], poll_s: float = 0.5) -> None:
    """End this worker when process ``parent`` dies, even by SIGKILL.

    A pool's workers wait on a queue whose pipe their siblings also hold open, so a killed
    parent leaves them waiting for ever. Two guards: on Linux, ``PR_SET_PDEATHSIG`` has the kernel
    send SIGKILL at once when the forking thread exits; it is set only when that thread was the
    parent's main thread (a forked child keeps the forking thread's id), since a short-lived
    caller thread would otherwise take the pool down with it. Always, a daemon thread checks
    every ``poll_s`` seconds whether the parent is gone (the worker has been re-parented) and
    exits. The parent pid is checked right after the signal is armed, to close the race of a
    parent that died before.
    """
    import sys
    import threading

    if sys.platform.startswith("linux") and threading.get_ident() == parent_main_thread:
        import ctypes
        import signal

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # pragma: no cover (no prctl: the watcher alone)
            pass
    if os.getppid() != parent:
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(1)

    threading.Thread(target=watch, name="gem-parent-watch", daemon=True).start()
