"""An attempt's call and its outcome: what the engine sends and what a worker reports."""

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
