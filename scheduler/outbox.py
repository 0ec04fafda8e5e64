"""What an engine step asks the world to do once its transaction has committed.

A step returns messages rather than sending them, so that nothing leaves the process
before the state that explains it is durable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from scheduler.invokers import Call, Invoker
from scheduler.leases import Lease
from statemachine import JobSnapshot


class Port(Protocol):
    """Where the engine sends its messages: Celery in production, a list in tests."""

    def tick_later(self, job_id: int, nonce: int, eta: datetime) -> None: ...

    def tick_batch(self, ticks: list[tuple[int, int]], eta: datetime) -> None: ...

    def start_invocation(
        self, invocation_id: int, attempt: int | None = None, eta: datetime | None = None
    ) -> None: ...

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


Message = SendTick | SendStart | SendRevoke


@dataclass(frozen=True)
class Launch:
    """An attempt recorded RUNNING, to be launched once that record is committed."""

    job_id: int
    kind: str
    invoker: Invoker
    lease: Lease
    call: Call


@dataclass
class Fed:
    """What one step did: the snapshot it saved, the messages to send after commit and,
    for a step told to start its runs here, the runs to launch after commit."""

    snapshot: JobSnapshot
    messages: list[Message] = field(default_factory=list)
    started: int | None = None
    launches: list[Launch] = field(default_factory=list)
