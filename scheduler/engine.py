"""The engine hosts the job machine inside database transactions.

Every step has the same shape: lock the row, feed the event to the machine, write what
changed, commit, and only then send messages. A crash between the commit and the send
loses at most a message; the ``watchdog_at`` (job) and ``deadline`` (invocation) columns
written in the same commit are the durable promise that the watchdog keeps.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any, Protocol

import sqlalchemy.exc
from sqlalchemy import Connection
from sqlalchemy import Engine as Database

from scheduler import store
from scheduler.db import write_transaction
from scheduler.errors import NotFound, TransientError
from scheduler.invokers import Call, Invoker, Outcome
from scheduler.schedules import Schedule, parse_schedule
from scheduler.settings import ETA_HORIZON
from scheduler.spec import JobSpec
from scheduler.store import JobRow
from statemachine import (
    Abandon,
    Event,
    InvocationFinished,
    InvocationStarted,
    InvocationStatus,
    JobSnapshot,
    RecordSkipped,
    StartInvocation,
    Tick,
    TickLater,
    check_move,
    step,
)

log = logging.getLogger("cronchain.engine")
OUTCOME_RETRY_DELAYS = (0.25, 0.5, 1, 2, 4, 8)  # seconds
STARTING = InvocationStatus.STARTING.value
RUNNING = InvocationStatus.RUNNING.value


class Port(Protocol):
    """Where the engine sends its messages: Celery in production, a list in tests."""

    def tick_later(self, job_id: int, nonce: int, eta: datetime) -> None: ...

    def start_invocation(self, invocation_id: int, eta: datetime | None = None) -> None: ...


@dataclass(frozen=True)
class SendTick:
    job_id: int
    nonce: int
    eta: datetime


@dataclass(frozen=True)
class SendStart:
    invocation_id: int


Message = SendTick | SendStart


@dataclass
class Fed:
    """What one step did: the snapshot it saved and the messages to send after commit."""

    snapshot: JobSnapshot
    messages: list[Message] = field(default_factory=list)
    started: int | None = None


def utcnow() -> datetime:
    return datetime.now(UTC)


def random_nonce() -> int:
    return secrets.randbits(62) + 1


@lru_cache(maxsize=8192)
def schedule_of(text: str, timezone: str) -> Schedule:
    return parse_schedule(text, timezone)


class Engine:
    """Feeds events to job machines. Build one per process; it is thread-safe.

    ``clock`` is the only clock seam: tests pass a fixed one and drive every step."""

    def __init__(
        self,
        db: Database,
        port: Port,
        invokers: dict[str, Invoker],
        *,
        grace: timedelta,
        horizon: timedelta = ETA_HORIZON,
        clock: Callable[[], datetime] = utcnow,
        nonces: Callable[[], int] = random_nonce,
    ):
        self.db = db
        self.port = port
        self.invokers = invokers
        self.grace = grace
        self.horizon = horizon
        self.clock = clock
        self.nonces = nonces

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A write transaction; database outages surface as ``TransientError``."""
        try:
            with write_transaction(self.db) as conn:
                yield conn
        except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError) as err:
            raise TransientError(f"database unavailable: {err.orig or err}") from err

    # --- the chain ---------------------------------------------------------------------

    def tick(self, job_id: int, nonce: int) -> None:
        with self.transaction() as conn:
            job = store.lock_job(conn, job_id)
            if job is None:
                log.warning("tick for job %s, which no longer exists", job_id)
                return
            fed = self.feed(conn, job, Tick(nonce), self.clock())
        self.send(fed.messages)

    def start_invocation(self, invocation_id: int) -> None:
        """Record RUNNING and commit, then launch; single-stage kinds finish here."""
        with self.transaction() as conn:
            inv = store.lock_invocation(conn, invocation_id)
            if inv is None or inv.status != STARTING:
                return  # a repeated message: the invocation already moved on
            job = store.lock_job(conn, inv.job_id)
            assert job is not None  # invocations cascade with their job
            now = self.clock()
            options = job.spec[job.kind]
            lease = self.invokers[job.kind].lease(options)
            store.update_invocation(
                conn,
                inv.id,
                status=RUNNING,
                attempt=inv.attempt + 1,
                started_at=now,
                deadline=None if lease is None else now + lease + self.grace,
            )
            fed = self.feed(conn, job, InvocationStarted(inv.id), now)
        self.send(fed.messages)
        call = Call(inv.id, job.ref, inv.slot, options)
        try:
            outcome = self.invokers[job.kind].invoke(call)
        except Exception as err:  # an invoker bug must not leave the run RUNNING
            log.exception("invoker %s failed for invocation %s", job.kind, inv.id)
            outcome = Outcome.failed(f"{job.kind}: {type(err).__name__}: {err}")
        if outcome is not None:
            self._record_patiently(inv.id, outcome)

    def _record_patiently(self, invocation_id: int, outcome: Outcome) -> None:
        """The outcome exists only in this process: if the database is away, wait for it
        (about 15 s) rather than leave a finished run to expire as "lease expired"."""
        for delay in (*OUTCOME_RETRY_DELAYS, None):
            try:
                self.finish_invocation(invocation_id, outcome.status, outcome.error)
                return
            except TransientError as err:
                if delay is None:
                    raise
                log.warning("recording invocation %s: %s; again in %s s", invocation_id, err, delay)
                time.sleep(delay)

    def finish_invocation(self, invocation_id: int, status: str, error: str | None = None) -> bool:
        """Record the outcome of a RUNNING invocation; False if it had already ended
        (a late report after a lease expired, or a repeated one)."""
        with self.transaction() as conn:
            inv = store.lock_invocation(conn, invocation_id)
            if inv is None or inv.status != RUNNING:
                log.info(
                    "outcome %s for invocation %s ignored: it is %s",
                    status,
                    invocation_id,
                    inv and inv.status,
                )
                return False
            fed = self.record_outcome(conn, inv, status, error, self.clock())
        self.send(fed.messages)
        return True

    def record_outcome(
        self,
        conn: Connection,
        inv: store.InvocationRow,
        status: str,
        error: str | None,
        now: datetime,
    ) -> Fed:
        """Within ``conn``'s transaction: end a locked invocation and step its job."""
        check_move(inv.status, status)
        store.update_invocation(
            conn, inv.id, status=status, error=error, finished_at=now, deadline=None
        )
        job = store.lock_job(conn, inv.job_id)
        assert job is not None
        slot = inv.slot.isoformat() if inv.slot else f"trigger {inv.trigger_id}"
        log.info("%s %s: %s%s", job.ref, slot, status, f" ({error})" if error else "")
        return self.feed(conn, job, InvocationFinished(inv.id, now), now)

    # --- commands ----------------------------------------------------------------------

    def command(self, ref: str, event: Event, **flags: Any) -> Fed:
        """Feed a user's command (pause, resume, trigger, ...) to the job named ``ref``."""
        with self.transaction() as conn:
            job = store.lock_job(conn, store.resolve_job(conn, ref))
            if job is None:
                raise NotFound(f"no job named {ref!r}")
            fed = self.feed(conn, job, event, self.clock(), **flags)
        self.send(fed.messages)
        return fed

    # --- hosting the machine -----------------------------------------------------------

    def feed(
        self,
        conn: Connection,
        job: JobRow,
        event: Event,
        now: datetime,
        *,
        spec: JobSpec | None = None,
        **flags: Any,
    ) -> Fed:
        """Step the machine for ``job`` and write the result in ``conn``'s transaction."""
        schedule = (
            schedule_of(spec.schedule, spec.timezone)
            if spec
            else schedule_of(job.schedule, job.timezone)
        )
        result = step(job.snapshot, event, now=now, schedule=schedule, nonce=self.nonces())
        fed = Fed(result.snapshot)
        if not result.changed and spec is None and not flags:
            return fed
        revision = spec.revision if spec else job.revision
        watchdog_at = job.watchdog_at
        for action in result.actions:
            match action:
                case TickLater(when=when, nonce=nonce):
                    eta = min(when, now + self.horizon)
                    watchdog_at = eta + self.grace
                    fed.messages.append(SendTick(job.id, nonce, eta))
                case StartInvocation(slot=slot, trigger_id=trigger_id):
                    inv = store.insert_invocation(
                        conn,
                        job.id,
                        slot=slot,
                        trigger_id=trigger_id,
                        revision=revision,
                        status=STARTING,
                        now=now,
                        deadline=now + self.grace,
                    )
                    if inv is None:  # that slot has its invocation already
                        log.warning("job %s: slot %s already fired", job.ref, slot)
                        fed.snapshot = step(
                            fed.snapshot, Abandon(), now=now, schedule=schedule, nonce=0
                        ).snapshot
                        continue
                    fed.snapshot.invocation_id = fed.started = inv
                    fed.messages.append(SendStart(inv))
                case RecordSkipped(slot=slot, reason=reason, trigger_id=trigger_id):
                    store.insert_invocation(
                        conn,
                        job.id,
                        slot=slot,
                        trigger_id=trigger_id,
                        revision=revision,
                        status=InvocationStatus.SKIPPED.value,
                        reason=reason,
                        now=now,
                    )
                case _:
                    raise AssertionError(f"unknown action {action!r}")
        if fed.snapshot.tick_nonce is None:
            watchdog_at = None
        store.save_job(
            conn, job, fed.snapshot, watchdog_at=watchdog_at, now=now, spec=spec, **flags
        )
        return fed

    def send(self, messages: list[Message]) -> None:
        """Send after commit. A failed send is logged, not raised: the state is committed
        and the watchdog repeats the step when its deadline lapses."""
        for message in messages:
            try:
                match message:
                    case SendTick(job_id=job_id, nonce=nonce, eta=eta):
                        self.port.tick_later(job_id, nonce, eta)
                    case SendStart(invocation_id=invocation_id):
                        self.port.start_invocation(invocation_id)
                    case _:
                        raise AssertionError(f"unknown message {message!r}")
            except AssertionError:
                raise
            except Exception:
                log.exception("could not send %s; the watchdog will repeat it", message)
