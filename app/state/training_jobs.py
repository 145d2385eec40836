"""Trainings of users' models, run in background threads of the server process.

A training (the target on the user's table, then Gem's fit) takes minutes; a Streamlit rerun must
not block that long, and a user must be able to cancel. Each job runs in a thread of its own and
reports its progress here; the Your data page polls it once a second. Jobs are per server process
and keyed by owner (the browser session's token, :func:`owner_token`): one running job per owner,
and at most :data:`MAX_RUNNING` at once on the server (two cores train two models well; a class
waits its turn rather than slowing everyone down).
"""

from __future__ import annotations

import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from typing import Any, Optional

import streamlit as st

from gem_core.api import TrainingCancelled, fit_gem, train_user_model

#: trainings running at once on this server
MAX_RUNNING = 2
#: share of the bar the target's training takes (the rest is Gem's fit)
TRAIN_SHARE = 0.6


@dataclass
class Job:
    """One training: its progress, its end (``done``, ``failed``, ``cancelled``), its message."""

    owner: str
    name: str
    cancel: threading.Event = field(default_factory=threading.Event)
    fraction: float = 0.0
    message: str = "starting"
    state: str = "running"
    error: Optional[str] = None
    started: float = field(default_factory=time.monotonic)
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:10])

    @property
    def running(self) -> bool:
        return self.state == "running"

    def report(self, lo: float, hi: float):
        """A progress callback filling ``lo``..``hi`` of this job's bar."""

        def progress(fraction: float, message: str = "") -> None:
            self.fraction = lo + (hi - lo) * max(0.0, min(1.0, float(fraction)))
            if message:
                self.message = message

        return progress


_JOBS: dict[str, Job] = {}
_LOCK = threading.Lock()


def owner_token() -> str:
    """This browser session's owner token: kept in the session and in the page's URL
    (``?owner=``), so a reload keeps the user's models; whoever has the URL is the owner."""
    token = st.session_state.get("owner_token") or st.query_params.get("owner")
    if not token or not str(token).isalnum():
        token = uuid.uuid4().hex[:16]
    st.session_state["owner_token"] = str(token)
    if st.query_params.get("owner") != token:
        st.query_params["owner"] = str(token)
    return str(token)


#: the owner a session without a token lists models as: no token is ever it (tokens are
#: alphanumeric), so such a session owns nothing and is offered the models shared by name
NO_OWNER = "-"


def known_owner() -> Optional[str]:
    """This session's owner token when it has one (kept in the session, or in the URL after a
    reload), without making one: pages that only list models leave the URL alone."""
    token = st.session_state.get("owner_token") or st.query_params.get("owner")
    return str(token) if token and str(token).isalnum() else None


def session_models() -> list:
    """The user models this browser session may open (its own and those shared by name;
    a session without a token yet: the shared ones), by name."""
    from gem_core.api import list_user_models

    return list_user_models(known_owner() or NO_OWNER)


def job_of(owner: str) -> Optional[Job]:
    """The owner's latest job (running or ended), if any."""
    with _LOCK:
        return _JOBS.get(owner)


def forget_job(owner: str) -> None:
    """Forget the owner's ended job (its message has been read)."""
    with _LOCK:
        job = _JOBS.get(owner)
        if job is not None and not job.running:
            del _JOBS[owner]


def start_training(owner: str, reading: Any, name: str, **options: Any) -> Job:
    """Start training ``name`` on ``reading`` for ``owner`` in a thread; the options are
    :func:`~gem_core.service.user_models.train_user_model`'s. Refused (ValueError, a message
    for the user) while the owner has a running job or the server is full."""
    with _LOCK:
        current = _JOBS.get(owner)
        if current is not None and current.running:
            raise ValueError(f"You are training {current.name!r} already: wait for it or cancel it.")
        running = sum(j.running for j in _JOBS.values())
        if running >= MAX_RUNNING:
            raise ValueError(
                f"The server is training {running} models already (at most {MAX_RUNNING} at once, "
                f"so that every one finishes in its time budget): try again in a few minutes."
            )
        job = Job(owner, name)
        _JOBS[owner] = job
    threading.Thread(
        target=_run, args=(job, reading, options), name=f"train-{name}", daemon=True
    ).start()
    return job


def _run(job: Job, reading: Any, options: dict[str, Any]) -> None:
    """The job's thread: train, then fit Gem; every end is recorded, none raises."""
    try:
        train_user_model(
            reading,
            job.name,
            owner=job.owner,
            cancel=job.cancel,
            progress=job.report(0.0, TRAIN_SHARE),
            **options,
        )
    except TrainingCancelled:
        job.state, job.message = "cancelled", "Training cancelled: nothing was saved."
        return
    except ValueError as exc:  # a refusal meant for the user (a name taken meanwhile)
        job.state, job.error = "failed", str(exc)
        return
    except Exception as exc:  # noqa: BLE001 - every failure becomes the page's message
        job.state, job.error = "failed", f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
        return
    try:
        job.message = "fitting Gem"
        fit_gem(job.name, options.get("device", "auto"), job.report(TRAIN_SHARE, 1.0), job.cancel)
    except TrainingCancelled:
        job.state = "cancelled"
        job.message = (
            f"Model {job.name!r} is saved; Gem's fit was cancelled (it is fitted when you first "
            f"ask for an explanation)."
        )
        return
    except Exception as exc:  # noqa: BLE001
        job.state, job.error = "failed", f"Model saved, but Gem's fit failed: {exc}"
        traceback.print_exc()
        return
    job.fraction, job.state, job.message = 1.0, "done", f"Model {job.name!r} is trained and Gem fitted."
