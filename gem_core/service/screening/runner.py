"""Run a screen: read rows in chunks, run the chunk function somewhere, keep the results safe.

Three places run :func:`~gem_core.service.screening.chunk.screen_chunk`, with identical results:

* ``workers=1``: this process;
* ``workers=N``: N worker processes of this machine (forked, so the loaded model is shared);
* ``ray``: Ray tasks, on a running cluster (``address``) or on a local one started here with
  only the processes tasks need (CPU workers: ``auto`` is the CPU). The driver never imports
  torch (its workers load the model and report the target's digest), the workers defer PyG's
  unused imports in their first task, and Ray shuts down while the output is compacted.

On CUDA the model runs in this process and the worker processes only parse. At most
``2 * workers`` chunks are in flight, so memory does not grow with the input.
"""

from __future__ import annotations

import logging
import os
import pickle
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional, TypeGuard, Union

from gem_core.data.config import check_k, check_salts
from gem_core.explainers import check_method, method_spec
from gem_core.runtime.workers import WorkerLostError, worker_pool
from gem_core.service.screening.chunk import (
    USER_TARGET,
    ScreenSettings,
    check_model,
    finish_rows,
    parse_chunk,
    screen_chunk,
    unpack_parsed,
    warm_up,
)
from gem_core.service.screening.output import ChunkStore, Summary, compact, output_format
from gem_core.service.screening.reader import InputRow, count_lines, iter_rows, open_source

__all__ = ["DEFAULT_CHUNK_SIZE", "ScreenResult", "screen", "check_settings", "default_workers"]

DEFAULT_CHUNK_SIZE = 2000
#: called with (rows done, rows expected or None, rows skipped as already done)
RowsProgress = Callable[[int, Optional[int]], None]


@dataclass
class ScreenResult:
    """What :func:`screen` did: the summary of the output, seconds, chunks resumed, and the
    model that answered: Mutagenicity's ``target``, or the user ``model`` of that name (then
    ``target`` is its own target row)."""

    output: Path
    summary: Summary
    seconds: float
    chunks: int
    chunks_resumed: int
    workers: int
    backend: str
    target: str = ""
    model: Optional[str] = None

    @property
    def molecules_per_second(self) -> float:
        return self.summary.rows / self.seconds if self.seconds > 0 else float("nan")

    def as_dict(self) -> dict[str, Any]:
        return {
            "output": str(self.output),
            **self.summary.as_dict(),
            "seconds": self.seconds,
            "molecules_per_second": self.molecules_per_second,
            "chunks": self.chunks,
            "chunks_resumed": self.chunks_resumed,
            "workers": self.workers,
            "backend": self.backend,
            "target": self.target,
            # a Mutagenicity screen's JSON as before user models existed
            **({} if self.model is None else {"model": self.model}),
        }


def default_workers() -> int:
    """The cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover (not Linux)
        return max(1, os.cpu_count() or 1)


def check_settings(settings: ScreenSettings) -> ScreenSettings:
    """Validate the method (a batched explainer), K (``None``: each molecule's own), device and
    user model (it must exist; its name lower-cased, and the target then its own row); the
    device resolved."""
    method = check_method(settings.method)
    if not method_spec(method).batched:
        from gem_core.explainers import BATCH_METHODS

        raise ValueError(
            f"{method!r} explains one molecule at a time; a screen needs a batched "
            f"method: {', '.join(BATCH_METHODS)}."
        )
    k = None if settings.k is None else check_k(settings.k)
    model = None if settings.model is None else check_model(settings.model)
    device = _screen_device(settings.device)
    return ScreenSettings(
        method=method,
        k=k,
        # a user model answers with its own target: Mutagenicity's choice is not read (nor kept,
        # so that it does not refuse a resume)
        target=settings.target if model is None else USER_TARGET,
        device=device,
        salts=check_salts(settings.salts),
        model=model,
    )


def _screen_device(device: str) -> str:
    """The device name ``device`` resolves to for a screen; ``"cpu"`` without importing torch
    (a Ray screen's driver starts Ray first and loads its model beside it)."""
    if str(device) == "cpu":
        return "cpu"
    from gem_core.runtime.device import resolve_device

    return resolve_device(device, "screen").type


def _chunks(rows: Iterator[InputRow], size: int) -> Iterator[tuple[int, list[InputRow]]]:
    batch: list[InputRow] = []
    index = 0
    for row in rows:
        batch.append(row)
        if len(batch) == size:
            yield index, batch
            index, batch = index + 1, []
    if batch:
        yield index, batch


# ----------------------------------------------------------------------------- backends


class _Inline:
    name = "process"

    def __init__(self, settings: ScreenSettings):
        self.settings = settings

    def submit(self, index: int, rows: list[InputRow]) -> Any:
        return screen_chunk(index, rows, self.settings)

    def result(self, handle: Any) -> Any:
        return handle

    def close(self) -> None:
        pass


def _worker_lost() -> WorkerLostError:
    return WorkerLostError(
        "A worker process of this screen died before finishing its chunk (killed, out of "
        "memory, or a crash in native code). The chunks finished so far are kept: run the same "
        "command again to resume, or with --workers 1 to screen in this process."
    )


class _Processes:
    name = "processes"

    def __init__(self, settings: ScreenSettings, workers: int):
        self.settings = settings
        # On CUDA the workers parse and this process runs the model: forked children must not
        # touch CUDA. On the CPU each worker screens whole chunks with the model it shares.
        self.gpu = settings.device != "cpu"
        self.pool = worker_pool(workers)

    def submit(self, index: int, rows: list[InputRow]) -> Any:
        fn = parse_chunk if self.gpu else screen_chunk
        try:
            return self.pool.submit(fn, index, rows, self.settings)
        except BrokenProcessPool as exc:  # a worker died since the last result
            raise _worker_lost() from exc

    def result(self, handle: Any) -> Any:
        try:
            index, out = handle.result()
        except BrokenProcessPool as exc:
            raise _worker_lost() from exc
        return (index, finish_rows(unpack_parsed(out), self.settings)) if self.gpu else (index, out)

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


class _Ray:
    name = "ray"

    def __init__(self, settings: ScreenSettings, workers: int, address: Optional[str]):
        try:
            import ray
        except ImportError as exc:
            raise ValueError("--ray needs Ray: pip install '.[ray]' (or pip install ray).") from exc
        self.ray = ray
        self.started = False
        self.node: Any = None  # the local cluster this run started, when it started its own
        if not ray.is_initialized():
            if address:
                ray.init(address=address, include_dashboard=False, log_to_driver=False)
            else:
                self.node = _start_task_node(workers)
                if self.node is not None:
                    try:  # Ray's "connecting to an existing cluster" would say otherwise
                        ray.init(
                            address=self.node.address,
                            log_to_driver=False,
                            logging_level=logging.WARNING,
                        )
                    except BaseException:
                        self.node.kill_all_processes(check_alive=False, allow_graceful=True)
                        raise
                else:
                    ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
            self.started = True
        self.settings = settings
        self.task = ray.remote(num_cpus=1)(ray_screen_chunk)
        # Each worker imports the engine and loads the model while this process reads its
        # input; the driver itself loads no model (the run's target digest comes from them).
        warm = ray.remote(num_cpus=1)(ray_warm_up)
        self.warming = [warm.remote(settings) for _ in range(workers)]

    def target_digest(self) -> str:
        """The target checkpoint digest of the first worker ready; a worker that cannot load
        the model raises the engine's own error (e.g. ModelUnavailableError)."""
        ready, _ = self.ray.wait(self.warming, num_returns=1)
        try:
            return str(self.result(ready[0]))
        except self.ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if _engine_error(cause):  # e.g. no usable target: said as the engine says it
                raise cause from exc
            first_line = (str(cause).strip().splitlines() or [""])[0]
            raise WorkerLostError(
                f"The Ray workers of this screen cannot load the engine and its model "
                f"({type(cause).__name__}: {first_line}). Install gem_core where Ray's "
                f"workers run (pip install -e . from this checkout)."
            ) from exc

    def submit(self, index: int, rows: list[InputRow]) -> Any:
        # One pickle of the chunk: Ray's own serializer handles each row on its own (6.0 ms of
        # the driver per 2,000 rows against 2.2, on the cores its workers need; the worker
        # rebuilt them one by one too).
        return self.task.remote(
            index, pickle.dumps(rows, protocol=pickle.HIGHEST_PROTOCOL), self.settings
        )

    def result(self, handle: Any) -> Any:
        try:
            return self.ray.get(handle)
        except self.ray.exceptions.WorkerCrashedError as exc:
            raise WorkerLostError(
                "A Ray worker of this screen died before finishing its chunk (killed, out of "
                "memory, a crash in native code, or a worker that cannot import gem_core: "
                "install it where Ray's workers run, e.g. pip install -e .). The chunks "
                "finished so far are kept: run the same command again to resume."
            ) from exc

    def close(self) -> None:
        if self.started:
            self.started = False
            if self.node is None:
                _stop_monitor(self.ray)
            self.ray.shutdown()
            if self.node is not None:
                self.node.destroy_external_storage()
                self.node.kill_all_processes(check_alive=False, allow_graceful=True, wait=True)
                self.node = None


def _engine_error(error: Any) -> TypeGuard[Exception]:
    """Whether a worker's ``error`` is one the engine raises for the user (bad settings, a
    missing or corrupted model, missing data), rather than a broken worker environment."""
    return isinstance(error, (ValueError, FileNotFoundError)) or (
        isinstance(error, Exception) and type(error).__module__.startswith("gem_core.")
    )


#: objects up to this size go inline with a task's messages on the node a screen starts itself
#: (Ray's default is 100 KB): a 2,000-row chunk's rows and result, up to about 20,000 rows
_INLINE_BYTES = 8 << 20


def _start_task_node(workers: int) -> Any:
    """Start a local Ray head node of ``workers`` CPUs with what tasks need: the GCS, the raylet
    and its agents. ``ray.init``'s own node also starts the dashboard's API server (and waits
    up to a second for its address), the autoscaler monitor and the log monitor: three Python
    processes, ~1.4 s of CPU while the workers boot, for a dashboard, autoscaling and log
    forwarding that a screen does not use (2 cores: 2.4-2.7 s -> 1.1 s to a connected driver,
    with :func:`_await_registration`). Its raylet starts the ``workers`` worker processes as it
    starts, as Ray's ``enable_worker_prestart`` allows, rather than when the driver connects: they
    boot while the node registers (warm 0.1-0.4 s sooner). A chunk's rows (250 KB per 2,000) and
    its result (790 KB) travel inside the task's messages, not through the node's shared-memory
    object store, which Ray uses above 100 KB: the store's puts, gets and their wake-ups cost the
    driver and the raylet about a third of their CPU while the workers run on the same cores.

    Ray's private node API (the ``ray`` extra pins the version); ``None`` where that API is not
    there, and the caller lets ``ray.init`` start its usual node. The node's processes share the
    driver's fate (they end with it, even on ``kill -9``), as ``ray.init``'s do.
    """
    try:
        from ray._private.node import Node
        from ray._private.parameter import RayParams

        # Ray annotates these narrower than the values it takes: include_log_monitor (a bool
        # flag) as a string, the RayConfig overrides (of RayConfig's own types) as strings
        system_config: dict[str, Any] = {
            "enable_worker_prestart": True,
            "max_direct_call_object_size": _INLINE_BYTES,
        }
        params = RayParams(
            num_cpus=workers,
            include_dashboard=False,
            no_monitor=True,
            include_log_monitor=False,  # type: ignore[arg-type]
            _system_config=system_config,
        )
    except (ImportError, TypeError):  # pragma: no cover (another Ray version)
        return None

    class TaskNode(Node):
        def start_api_server(self, **_: Any) -> None:  # no dashboard or job API to serve
            return None

        def start_ray_processes(self) -> None:
            super().start_ray_processes()
            _await_registration(self)

    return TaskNode(
        params, head=True, shutdown_at_exit=False, spawn_reaper=True, ray_init_cluster=True
    )


def _await_registration(node: Any, timeout_s: float = 30.0, poll_s: float = 0.02) -> None:
    """Return once ``node``'s raylet has registered with the GCS (about 0.45 s after it starts:
    it waits for its agents). The node's own wait asks once, 0.1 s after the start, and the
    GCS then answers the next ask only a second later; polling here first lets that one ask
    find the node: 0.6 s less to a connected driver. Anything unexpected leaves the node's own
    wait to decide, as before."""
    try:
        gcs = node.get_gcs_client()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(node_id.hex() == node.node_id for node_id in gcs.get_all_node_info(timeout=5)):
                return
            time.sleep(poll_s)
    except Exception:  # pragma: no cover (another Ray version)
        return


def _stop_monitor(ray: Any) -> None:
    """Kill the autoscaler monitor of the local cluster ``ray.init`` started. It does not exit on
    SIGTERM, so ``ray.shutdown`` would give it a full second of grace (of its 1.35 s) before
    killing it; a local cluster's monitor has nothing to save. Ray's private process table: if
    it is not there (another Ray version), ``ray.shutdown`` does it as before."""
    node = getattr(getattr(getattr(ray, "_private", None), "worker", None), "_global_node", None)
    for info in (getattr(node, "all_processes", None) or {}).get("monitor", []):
        process = getattr(info, "process", None)
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=5)


def ray_warm_up(settings: ScreenSettings) -> str:
    """:func:`~gem_core.service.screening.chunk.warm_up` in a Ray worker: the worker is this
    run's own process, so it defers PyG's unused imports first, as the command line does
    (:mod:`gem_core.runtime.imports`; 1.3 s of a worker's boot). A runtime-env setup hook would
    do the same but costs every worker 0.6 s more to start."""
    from gem_core.runtime.imports import defer_unused_imports

    defer_unused_imports()
    return warm_up(settings)


def ray_screen_chunk(index: int, rows: bytes, settings: ScreenSettings) -> tuple[int, Any]:
    """:func:`~gem_core.service.screening.chunk.screen_chunk` in a Ray worker (which may not
    have run :func:`ray_warm_up`) of the chunk's rows as :meth:`_Ray.submit` pickled them."""
    from gem_core.runtime.imports import defer_unused_imports

    defer_unused_imports()
    return screen_chunk(index, pickle.loads(rows), settings)


# ----------------------------------------------------------------------------- the run


def _fingerprint(
    source: Union[str, Path],
    settings: ScreenSettings,
    chunk_size: int,
    smiles_column: Optional[str],
    id_column: Optional[str],
    target_digest: str,
) -> dict:
    if str(source) == "-":
        where: dict[str, Any] = {"input": "-"}
    else:
        st = Path(source).stat()
        where = {
            "input": str(Path(source).resolve()),
            "input_bytes": st.st_size,
            "input_mtime_ns": st.st_mtime_ns,
        }
    return {
        **where,
        **settings.as_dict(),
        "chunk_size": chunk_size,
        "smiles_column": smiles_column,
        "id_column": id_column,
        "target_digest": target_digest,
    }


def screen(
    source: Union[str, Path],
    output: Union[str, Path],
    settings: ScreenSettings,
    workers: Optional[int] = None,
    ray_address: Optional[str] = None,
    use_ray: bool = False,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    smiles_column: Optional[str] = None,
    id_column: Optional[str] = None,
    restart: bool = False,
    progress: Optional[RowsProgress] = None,
) -> ScreenResult:
    """Screen every row of ``source`` (path or ``-``) into ``output`` (``.parquet``/``.csv``)
    with Mutagenicity's target, or the user model ``settings.model``
    (:attr:`~gem_core.service.screening.chunk.ScreenSettings.schema`: its columns).

    Resumes an interrupted run of the same arguments (``restart`` discards it instead).

    Raises:
        ValueError: bad settings (a user model that is not there, too), output name, chunk
            size, or a parts folder of other settings (another model's, too).
        MoleculeError: missing input, or a table without its SMILES column.
        ModelUnavailableError: the target or the explainer cannot be loaded.
    """
    from gem_core.service.screening.chunk import _model

    start = time.perf_counter()
    output = Path(output)
    fmt = output_format(output)
    if chunk_size < 1:
        raise ValueError(f"chunk size must be >= 1, got {chunk_size}")
    if use_ray and str(settings.device) == "auto":
        settings = replace(settings, device="cpu")  # Ray's workers are CPU workers
    settings = check_settings(settings)
    workers = default_workers() if workers is None else int(workers)
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if use_ray and settings.device != "cpu":
        raise ValueError("--ray runs the chunks on CPU workers: add --device cpu.")
    stream = open_source(source)
    backend: Any = None
    try:
        rows = iter_rows(stream, smiles_column, id_column)
        first = next(rows, None)  # header errors surface before any model is loaded
        num_chunks, resumed = 0, 0
        try:
            # A Ray screen's driver never imports torch: its workers load the model and tell
            # it the target's digest. Other screens load the model here (forked workers share it).
            if use_ray:
                backend = _Ray(settings, workers, ray_address)
                digest = backend.target_digest()
            else:
                digest = _model(settings).target().digest
            store = ChunkStore(
                output,
                _fingerprint(source, settings, chunk_size, smiles_column, id_column, digest),
                schema=settings.schema,
            )
            done = store.open(restart=restart)
            expected = count_lines(source)
            all_rows = rows if first is None else _prepend(first, rows)
            if backend is None:
                backend = _Processes(settings, workers) if workers > 1 else _Inline(settings)
            rows_done = 0
            pending: deque = deque()
            window = 2 * workers

            def drain_one() -> None:
                nonlocal rows_done
                index, table = backend.result(pending.popleft())
                store.write(index, table)
                rows_done += table.num_rows
                if progress is not None:
                    progress(rows_done, expected)

            for index, chunk in _chunks(all_rows, chunk_size):
                num_chunks = index + 1
                if index in done:
                    resumed += 1
                    rows_done += len(chunk)
                    if progress is not None:
                        progress(rows_done, expected)
                    continue
                while len(pending) >= window:
                    drain_one()
                pending.append(backend.submit(index, chunk))
            while pending:
                drain_one()
        except BaseException:
            if backend is not None:
                backend.close()
            raise
    finally:
        if stream is not getattr(__import__("sys").stdin, "buffer", None):
            stream.close()
    # Every chunk is stored: the workers are shut down (Ray: 1.3 s, mostly waiting for its
    # processes to exit) while this thread compacts the output.
    closing = threading.Thread(target=backend.close, name="gem-screen-close")
    closing.start()
    try:
        summary = compact(
            store,
            num_chunks,
            fmt,
            metadata={**store.settings, "format": fmt, "chunks": num_chunks},
            first_class=None if settings.regression else settings.first_class,
        )
    finally:
        closing.join()
    store.remove()
    return ScreenResult(
        output,
        summary,
        time.perf_counter() - start,
        num_chunks,
        resumed,
        workers,
        backend.name,
        settings.target,
        settings.model,
    )


def _prepend(first: InputRow, rest: Iterator[InputRow]) -> Iterator[InputRow]:
    yield first
    yield from rest
