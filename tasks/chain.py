"""cronchain's Celery tasks: each one checks its message and calls the engine.

A malformed message (wrong types, unknown ids) is logged and dropped: it must never
crash a worker or touch a row. Database outages raise ``TransientError``, which Celery
retries with backoff; if retries run out, the watchdog repairs the step anyway.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from scheduler.errors import TransientError
from scheduler.runtime import Runtime
from scheduler.watchdog import run_once
from statemachine import InvocationStatus
from tasks import app

log = logging.getLogger("cronchain.tasks")
_runtime: tuple[int, Runtime] | None = None
RETRY = dict(autoretry_for=(TransientError,), retry_backoff=1, retry_backoff_max=30, max_retries=8)


def runtime() -> Runtime:
    """One engine per worker process, made after the fork (connections do not survive it)."""
    global _runtime
    if _runtime is None or _runtime[0] != os.getpid():
        _runtime = (os.getpid(), Runtime.from_env(app))
    return _runtime[1]


def _ints(*values: Any) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in values)


@app.task(name="cronchain.tick_later", **RETRY)
def tick_later(job_id: int, nonce: int) -> None:
    if not _ints(job_id, nonce):
        log.error("malformed tick_later message dropped: %r %r", job_id, nonce)
        return
    runtime().engine.tick(job_id, nonce)


@app.task(name="cronchain.start_invocation", **RETRY)
def start_invocation(invocation_id: int) -> None:
    if not _ints(invocation_id):
        log.error("malformed start_invocation message dropped: %r", invocation_id)
        return
    runtime().engine.start_invocation(invocation_id)


@app.task(name="cronchain.invocation_succeeded", **RETRY)
def invocation_succeeded(result: Any = None, *, invocation_id: int) -> None:
    """Linked to a ``celery`` job's task: called with its return value on success."""
    if _ints(invocation_id):
        runtime().engine.finish_invocation(invocation_id, InvocationStatus.SUCCEEDED)


@app.task(name="cronchain.invocation_failed", **RETRY)
def invocation_failed(task_id: str | None = None, *, invocation_id: int) -> None:
    """Linked as the error callback of a ``celery`` job's task."""
    if _ints(invocation_id):
        error = f"celery task {task_id} failed"
        runtime().engine.finish_invocation(invocation_id, InvocationStatus.FAILED, error)


@app.task(name="cronchain.watchdog", **RETRY)
def watchdog() -> dict[str, int]:
    report = run_once(runtime().engine)
    if report.repairs:
        log.warning("watchdog repaired %s", report)
    return {"ticks": report.ticks, "starts": report.starts, "expired": report.expired}
