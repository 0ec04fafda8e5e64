"""An engine for tests: a clock that moves only when told to, a port that records the
messages it would send, and engines built on them."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import sqlalchemy

from cronchain.scheduler.engine import Engine
from cronchain.scheduler.invokers import Call, HttpInvoker, Outcome, default_invokers
from cronchain.scheduler.invokers.netguard import parse_allow
from cronchain.statemachine import InvocationStatus

GRACE = timedelta(seconds=15)  # the engines' grace here (the ``engine`` fixture's too)


@dataclass
class Clock:
    """The tests' clock: it moves only when told to."""

    now: datetime = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


class WorkerDied(BaseException):
    """Raised by a test's invoker to leave its attempt claimed and never reported, as a
    work-path worker killed mid-run does (not an Exception: the work path records those)."""


class SendingApp:
    """What cronchain's port reads of a Celery app, keeping each task it is asked to send
    as ``(name, options)``: its broker (for priorities) and Celery's default limits of
    an ``argsrepr``."""

    def __init__(self, broker_url: str = "redis://127.0.0.1:6379/0") -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.conf = SimpleNamespace(broker_url=broker_url, task_repr_maxlevels=3)
        self.amqp = SimpleNamespace(argsrepr_maxsize=1024)

    def send_task(self, name: str, **options: Any) -> None:
        self.sent.append((name, options))


@dataclass
class RecordingPort:
    """An enqueue port that keeps messages in lists instead of sending them."""

    ticks: list[tuple[int, int, datetime]] = field(default_factory=list)
    batches: list[list[tuple[int, int]]] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    start_messages: list[tuple[int, int | None, datetime | None]] = field(default_factory=list)
    tasks: list[tuple[str, int, int]] = field(default_factory=list)
    runs: list[Call] = field(default_factory=list)
    run_batches: list[list[Call]] = field(default_factory=list)
    revoked: list[str] = field(default_factory=list)
    alerts: list[tuple[int, datetime | None]] = field(default_factory=list)
    gates: list[tuple[int, str, int, int, datetime | None]] = field(default_factory=list)

    def tick_later(self, job_id: int, nonce: int, eta: datetime) -> None:
        self.ticks.append((job_id, nonce, eta))

    def tick_batch(self, ticks: list[tuple[int, int]], eta: datetime) -> None:
        """Kept in ``ticks`` like single ones, so that tests deliver them the same way."""
        self.batches.append(list(ticks))
        self.ticks += [(job_id, nonce, eta) for job_id, nonce in ticks]

    def start_invocation(
        self, invocation_id: int, attempt: int | None = None, eta: datetime | None = None
    ) -> None:
        self.starts.append(invocation_id)
        self.start_messages.append((invocation_id, attempt, eta))

    def run(self, call: Call) -> None:
        """Every attempt sent; a ``celery`` one is also kept as its task in ``tasks``."""
        self.runs.append(call)
        if call.kind == "celery":
            self.tasks.append((call.options["task"], call.invocation_id, call.attempt))

    def run_batch(self, calls: list[Call]) -> None:
        """Kept in ``runs`` like single ones, so that tests deliver them the same way."""
        self.run_batches.append(list(calls))
        self.runs += calls

    def revoke(self, task_id: str) -> None:
        self.revoked.append(task_id)

    def alert(self, alert_id: int, eta: datetime | None = None) -> None:
        self.alerts.append((alert_id, eta))

    def gate(
        self, invocation_id: int, gate: str, number: int, job_id: int, eta: datetime | None
    ) -> None:
        self.gates.append((invocation_id, gate, number, job_id, eta))

    def clear(self) -> None:
        self.ticks.clear()
        self.batches.clear()
        self.starts.clear()
        self.start_messages.clear()
        self.tasks.clear()
        self.runs.clear()
        self.run_batches.clear()
        self.revoked.clear()
        self.alerts.clear()
        self.gates.clear()


class DroppingPort(RecordingPort):
    """A broker that accepts nothing: every send after a commit raises."""

    def tick_later(self, *args: Any) -> None:
        raise ConnectionError("broker down")

    def tick_batch(self, *args: Any) -> None:
        raise ConnectionError("broker down")

    def start_invocation(self, *args: Any, **kwargs: Any) -> None:
        raise ConnectionError("broker down")


class Scripted:
    """A work-path invoker that answers from a script: one outcome per attempt, or None
    to hang like a worker that died."""

    def __init__(self, *outcomes: Outcome | None):
        self.outcomes = list(outcomes)
        self.calls: list[Call] = []

    def invoke(self, call: Call) -> Outcome:
        self.calls.append(call)
        outcome = self.outcomes.pop(0) if self.outcomes else Outcome(InvocationStatus.SUCCEEDED)
        if outcome is None:
            raise WorkerDied
        return outcome


def engine_with(
    db: sqlalchemy.Engine, clock: Clock, invoker: Any = None
) -> tuple[Engine, RecordingPort]:
    """An engine on ``db`` with a port of its own and jitter fixed at its middle;
    ``invoker`` (say, :class:`Scripted`) runs the ``noop`` jobs."""
    port = RecordingPort()
    invokers = default_invokers()
    if invoker is not None:
        invokers["noop"] = invoker
    engine = Engine(db, port, invokers, grace=GRACE, clock=clock, rand=lambda: 0.5)
    return engine, port


def http_engine(db: sqlalchemy.Engine, clock: Clock) -> tuple[Engine, RecordingPort]:
    """:func:`engine_with`, whose ``http`` jobs and gates may call loopback."""
    engine, port = engine_with(db, clock)
    engine.invokers["http"] = HttpInvoker(parse_allow("127.0.0.1/32"))
    return engine, port
