"""What an engine step asks the world to do once its transaction has committed.

A step returns messages rather than sending them, so that nothing leaves the process
before the state that explains it is durable.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from cronchain.scheduler.invokers import Call
from cronchain.statemachine import JobSnapshot

log = logging.getLogger("cronchain.engine")


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

    def run_batch(self, calls: list[Call]) -> None:
        """Send attempts of the work path (not ``celery``) that were begun together, as
        one message for one task."""

    def revoke(self, task_id: str) -> None: ...

    def alert(self, alert_id: int, eta: datetime | None = None) -> None:
        """Send an alert's delivery to the work path."""

    def gate(
        self, invocation_id: int, gate: str, number: int, job_id: int, eta: datetime | None
    ) -> None:
        """Send a check of a run's gate to the work path."""


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


@dataclass(frozen=True)
class SendAlert:
    """An alert raised (or due again): for the work path to deliver."""

    alert_id: int
    eta: datetime | None = None


class InProcess:
    """A message not sent: carried out in this process, once the transaction that asked
    has committed, by the plug-in whose kind it is (``host.Plugins.in_process``)."""


@dataclass(frozen=True)
class CheckGate:
    """Ask a run's gate (by its name) once more, on the work path: check ``number`` of
    it, at ``eta`` (``scheduler.workflows.gates``)."""

    invocation_id: int
    gate: str
    number: int
    job_id: int
    eta: datetime | None = None


Message = SendTick | SendStart | SendRevoke | SendRun | SendAlert | CheckGate | InProcess
# What a port sends (``send``): all but what the engine keeps.
Sent = SendTick | SendStart | SendRevoke | SendRun | SendAlert | CheckGate


@dataclass
class Stepped:
    """What one step did: the snapshot it saved and the messages to send after commit."""

    snapshot: JobSnapshot
    messages: list[Message] = field(default_factory=list)
    started: int | None = None


def send(port: Port, messages: list[Sent], batch: int) -> list[str]:
    """Send what committed steps asked for; returns the task ids of the revokes sent. A
    failed send is logged, not raised: the watchdog repeats what was promised.

    Ticks due at the same instant, and the work path's attempts begun together, go in
    batches of at most ``batch``: one message and one task for many, yet small enough
    that the last of a batch does not wait long for the others."""
    ticks: dict[datetime, list[tuple[int, int]]] = {}
    work: list[Call] = []
    revoked: list[str] = []
    for message in messages:
        match message:
            case SendTick(job_id=job_id, nonce=nonce, eta=eta):
                ticks.setdefault(eta, []).append((job_id, nonce))
            case SendRun(call=call) if call.kind != "celery":
                work.append(call)
            case SendStart() | SendRun() | SendRevoke() | SendAlert() | CheckGate():
                if _send_one(port, message) and isinstance(message, SendRevoke):
                    revoked.append(message.task_id)
            case _:
                raise AssertionError(f"unknown message {message!r}")
    for eta, pairs in ticks.items():
        for i in range(0, len(pairs), batch):
            _send_ticks(port, pairs[i : i + batch], eta)
    work.sort(key=lambda call: -call.priority)  # stable: a batch is of one priority
    for i in range(0, len(work), batch):
        chunk = work[i : i + batch]
        for priority in sorted({call.priority for call in chunk}, reverse=True):
            _send_runs(port, [call for call in chunk if call.priority == priority])
    return revoked


def _send_one(
    port: Port, message: SendStart | SendRun | SendRevoke | SendAlert | CheckGate
) -> bool:
    try:
        match message:
            case SendStart(invocation_id=invocation_id, attempt=attempt, eta=eta):
                port.start_invocation(invocation_id, attempt, eta)
            case SendRun(call=call):
                port.run(call)
            case SendRevoke(task_id=task_id):
                port.revoke(task_id)
            case SendAlert(alert_id=alert_id, eta=eta):
                port.alert(alert_id, eta)
            case CheckGate(invocation_id=inv_id, gate=gate, number=number, job_id=job_id, eta=eta):
                port.gate(inv_id, gate, number, job_id, eta)
    except Exception:
        log.exception("could not send %s; the watchdog will repeat it", message)
        return False
    return True


def _send_runs(port: Port, chunk: list[Call]) -> None:
    try:
        if len(chunk) == 1:
            port.run(chunk[0])
        else:
            port.run_batch(chunk)
    except Exception:
        log.exception("could not send runs %s; the watchdog will repeat them", chunk)


def _send_ticks(port: Port, chunk: list[tuple[int, int]], eta: datetime) -> None:
    try:
        if len(chunk) == 1:
            port.tick_later(*chunk[0], eta)
        else:
            port.tick_batch(chunk, eta)
    except Exception:
        log.exception("could not send ticks %s; the watchdog will repeat them", chunk)
