"""Invokers: how an invocation's work is launched, one per job kind.

Single-stage invokers (noop, http) return the outcome from ``invoke``; the engine records
it in one more commit. Multi-stage ones (celery) return None and the outcome arrives
later as a message. An invoker is called only after the RUNNING state that describes the
call is committed.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from statemachine import InvocationStatus


@dataclass(frozen=True)
class Call:
    invocation_id: int
    job: str
    slot: datetime | None
    options: dict[str, Any]


@dataclass(frozen=True)
class Outcome:
    status: InvocationStatus
    error: str | None = None

    @classmethod
    def failed(cls, error: str) -> Outcome:
        return cls(InvocationStatus.FAILED, error)


SUCCEEDED = Outcome(InvocationStatus.SUCCEEDED)


class Dispatcher(Protocol):
    """Sends a named Celery task whose outcome is reported back for an invocation."""

    def send_task(
        self, name: str, args: list[Any], kwargs: dict[str, Any], queue: str, invocation_id: int
    ) -> None: ...


class Invoker(Protocol):
    def lease(self, options: dict[str, Any]) -> timedelta | None:
        """How long a RUNNING invocation may go unreported before it counts as lost
        (None: no lease; it is reported by another process)."""

    def invoke(self, call: Call) -> Outcome | None: ...


class NoopInvoker:
    """Does nothing (after ``sleep`` seconds), or fails if ``fail`` is set: for tests,
    demos and measuring cronchain itself."""

    def lease(self, options: dict[str, Any]) -> timedelta | None:
        return timedelta(seconds=options["sleep"])

    def invoke(self, call: Call) -> Outcome | None:
        if call.options["sleep"]:
            time.sleep(call.options["sleep"])
        return Outcome.failed("noop: fail is set") if call.options["fail"] else SUCCEEDED


class HttpInvoker:
    """One HTTP request; a 2xx response succeeds, anything else fails with its status."""

    def lease(self, options: dict[str, Any]) -> timedelta | None:
        return timedelta(seconds=options["timeout"])

    def invoke(self, call: Call) -> Outcome | None:
        o = call.options
        body = o["body"].encode() if o["body"] is not None else None
        request = urllib.request.Request(o["url"], data=body, method=o["method"])
        for name, value in o["headers"].items():
            request.add_header(name, value)
        request.add_header("X-Cronchain-Invocation", str(call.invocation_id))
        try:
            with urllib.request.urlopen(request, timeout=o["timeout"]) as response:
                status = response.status
        except urllib.error.HTTPError as err:
            status = err.code
        except (urllib.error.URLError, TimeoutError, OSError) as err:
            reason = getattr(err, "reason", err)
            return Outcome.failed(f"http: {o['method']} {o['url']}: {reason}")
        if 200 <= status < 300:
            return SUCCEEDED
        return Outcome.failed(f"http: {o['method']} {o['url']} answered {status}")


class CeleryInvoker:
    """``send_task`` of a named task on a named queue; the worker's outcome finishes the
    invocation through the link callbacks the dispatcher attaches."""

    def __init__(self, dispatcher: Dispatcher):
        self.dispatcher = dispatcher

    def lease(self, options: dict[str, Any]) -> timedelta | None:
        return None

    def invoke(self, call: Call) -> Outcome | None:
        o = call.options
        try:
            self.dispatcher.send_task(
                o["task"], o["args"], o["kwargs"], o["queue"], call.invocation_id
            )
        except Exception as err:  # the broker refused: a launch failure, recorded as such
            return Outcome.failed(f"celery: could not send {o['task']}: {err}")
        return None


def default_invokers(dispatcher: Dispatcher) -> dict[str, Invoker]:
    return {"noop": NoopInvoker(), "http": HttpInvoker(), "celery": CeleryInvoker(dispatcher)}
