"""Invokers: how an invocation's work is launched, one per job kind.

Single-stage invokers (noop, http) return the outcome from ``invoke``; the engine records
it in one more commit. Multi-stage ones (celery) return None; the worker that runs the
task claims the attempt, heartbeats and reports the outcome (``scheduler.worker``). An
invoker is called only after the RUNNING state that describes the call is committed.
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


class Dispatcher(Protocol):
    """Sends a named Celery task that reports back for an invocation's attempt."""

    def send_task(self, call: Call) -> None: ...

    def revoke(self, task_id: str) -> None: ...


class Invoker(Protocol):
    single_stage: bool
    """True: ``invoke`` returns the outcome, and this process holds the lease meanwhile.
    False: the outcome and the heartbeats come from another process."""

    def invoke(self, call: Call) -> Outcome | None: ...


class NoopInvoker:
    """Does nothing (after ``sleep`` seconds), or fails if ``fail`` is set: for tests,
    demos and measuring cronchain itself."""

    single_stage = True

    def invoke(self, call: Call) -> Outcome | None:
        if call.options["sleep"] and call.lost.wait(call.options["sleep"]):
            return Outcome.failed("noop: stopped, the attempt is no longer current")
        return Outcome.failed("noop: fail is set") if call.options["fail"] else SUCCEEDED


class CeleryInvoker:
    """``send_task`` of a named task on a named queue; the worker's outcome finishes the
    invocation through the link callbacks the dispatcher attaches."""

    single_stage = False

    def __init__(self, dispatcher: Dispatcher):
        self.dispatcher = dispatcher

    def invoke(self, call: Call) -> Outcome | None:
        try:
            self.dispatcher.send_task(call)
        except Exception as err:  # the broker refused: a launch failure, recorded as such
            return Outcome.failed(f"celery: could not send {call.options['task']}: {err}", "launch")
        return None


def default_invokers(dispatcher: Dispatcher, http_allow: str = "") -> dict[str, Invoker]:
    from scheduler.http import HttpInvoker
    from scheduler.netguard import parse_allow

    return {
        "noop": NoopInvoker(),
        "http": HttpInvoker(parse_allow(http_allow)),
        "celery": CeleryInvoker(dispatcher),
    }
