"""What an engine step asks the world to do once its transaction has committed.

A step returns messages rather than sending them, so that nothing leaves the process
before the state that explains it is durable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from scheduler.invokers import Call
from statemachine import JobSnapshot


class Port(Protocol):
    """Where the engine sends its messages: Celery in production, a list in tests."""

    def tick_later(self, job_id: int, nonce: int, eta: datetime) -> None: ...

    def tick_batch(self, ticks: list[tuple[int, int]], eta: datetime) -> None: ...

    def start_invocation(
        self, invocation_id: int, attempt: int | None = None, eta: datetime | None = None
    ) -> None: ...

    def run(self, call: Call) -> None:
        """Send an attempt to the worker that will claim and run it: a ``celery`` job's
        own task on its queue, or ``cronchain.run`` on the work path."""

    def revoke(self, task_id: str) -> None: ...


@dataclass(frozen=True)
class SendTick:
    job_id: int
    nonce: int
    eta: datetime


@dataclass(frozen=True)
class SendStart:
    invocation_id: int
    attempt: int = 1
    eta: datetime | None = None


@dataclass(frozen=True)
class SendRevoke:
    """Stop a ``celery`` attempt's task wherever it runs (timeout, abort, lapsed lease)."""

    task_id: str


@dataclass(frozen=True)
class SendRun:
    """An attempt recorded RUNNING and not yet claimed: for a worker to claim and run."""

    call: Call


Message = SendTick | SendStart | SendRevoke | SendRun


@dataclass
class Fed:
    """What one step did: the snapshot it saved and the messages to send after commit."""

    snapshot: JobSnapshot
    messages: list[Message] = field(default_factory=list)
    started: int | None = None
