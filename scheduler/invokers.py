"""Invokers: how the work path makes a run's call, one per kind it runs (noop, http).

Every attempt is sent as a message after the RUNNING record that describes it commits,
and claimed by the worker that takes it: ``cronchain.run`` on the work path for these
kinds (``scheduler.work``), the job's own task for the ``celery`` kind
(``scheduler.worker``). ``invoke`` runs in a work-path thread and returns the outcome.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from statemachine import InvocationStatus


@dataclass(frozen=True)
class Call:
    invocation_id: int
    attempt: int  # the epoch: reports from any other attempt are refused
    job: str
    slot: datetime | None
    options: dict[str, Any]
    lease: timedelta = timedelta(seconds=60)
    timeout: timedelta | None = None
    lost: threading.Event = field(default_factory=threading.Event)  # set: stop, it is over
    kind: str = "noop"
    job_id: int | None = None  # saves the outcome a lookup of the job to lock first

    @property
    def task_id(self) -> str:
        """The Celery task id of this attempt, known before it is sent (to revoke it)."""
        return celery_task_id(self.invocation_id, self.attempt)


def celery_task_id(invocation_id: int, attempt: int) -> str:
    return f"cronchain-{invocation_id}-{attempt}"


@dataclass(frozen=True)
class Outcome:
    status: InvocationStatus
    error: str | None = None
    reason: str | None = None  # a short cause: "timeout", "launch", ...
    log: tuple[str, ...] = ()  # lines for the invocation's debug log

    @classmethod
    def failed(cls, error: str, reason: str | None = None, log: tuple[str, ...] = ()) -> Outcome:
        return cls(InvocationStatus.FAILED, error, reason, log)


SUCCEEDED = Outcome(InvocationStatus.SUCCEEDED)


class Invoker(Protocol):
    def invoke(self, call: Call) -> Outcome: ...


class NoopInvoker:
    """Does nothing (after ``sleep`` seconds), or fails if ``fail`` is set: for tests,
    demos and measuring cronchain itself."""

    def invoke(self, call: Call) -> Outcome:
        if call.options["sleep"] and call.lost.wait(call.options["sleep"]):
            return Outcome.failed("noop: stopped, the attempt is no longer current")
        return Outcome.failed("noop: fail is set") if call.options["fail"] else SUCCEEDED


def default_invokers(http_allow: str = "") -> dict[str, Invoker]:
    """The kinds the work path runs; ``celery`` runs on the user's own workers."""
    from scheduler.http import HttpInvoker
    from scheduler.netguard import parse_allow

    return {"noop": NoopInvoker(), "http": HttpInvoker(parse_allow(http_allow))}
