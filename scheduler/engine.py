"""The engine hosts the job machine inside database transactions.

Every step has the same shape: lock the row, feed the event to the machine, write what
changed, commit, and only then send messages. A crash between the commit and the send
loses at most a message; the ``watchdog_at`` (job) and ``deadline`` (invocation) columns
written in the same commit are the durable promise that the watchdog keeps.

Locks are always taken job first, then its invocations, so that two steps of one job
never wait on each other in opposite orders.
"""

from __future__ import annotations

import logging
import os
import random
import secrets
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache, partial
from typing import Any, Protocol

import sqlalchemy.exc
from sqlalchemy import Connection
from sqlalchemy import Engine as Database

from scheduler import debuglog, store
from scheduler.controls import Controls
from scheduler.db import write_transaction
from scheduler.errors import NotFound, TransientError
from scheduler.invokers import Call, Invoker, Outcome, celery_task_id
from scheduler.leases import Lease, Leases
from scheduler.schedules import Schedule, parse_schedule
from scheduler.settings import ETA_HORIZON
from scheduler.spec import JobSpec
from scheduler.store import InvocationRow, JobRow
from statemachine import (
    Abandon,
    AbortActive,
    BufferInvocation,
    Event,
    InvocationFinished,
    InvocationStarted,
    InvocationStatus,
    JobSnapshot,
    RecordSkipped,
    StartBuffered,
    StartInvocation,
    Tick,
    TickLater,
    Trigger,
    Unbuffer,
    check_move,
    step,
)

log = logging.getLogger("cronchain.engine")
OUTCOME_RETRY_DELAYS = (0.25, 0.5, 1, 2, 4, 8)  # seconds
S = InvocationStatus
STARTING, RUNNING, WAITING = S.STARTING.value, S.RUNNING.value, S.WAITING.value
ACTIVE = (STARTING, RUNNING)


class Port(Protocol):
    """Where the engine sends its messages: Celery in production, a list in tests."""

    def tick_later(self, job_id: int, nonce: int, eta: datetime) -> None: ...

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


_CONTROLS: dict[str, Controls] = {}


def controls_of(job: JobRow) -> Controls:
    """A job's controls, parsed once per revision (a hash of the spec that holds them)."""
    controls = _CONTROLS.get(job.revision)
    if controls is None:
        if len(_CONTROLS) > 8192:
            _CONTROLS.clear()
        controls = _CONTROLS[job.revision] = Controls.of(job.spec)
    return controls


class Engine:
    """Feeds events to job machines and runs invocations. Build one per process; it is
    thread-safe.

    ``clock`` and ``rand`` are the only seams: tests pass fixed ones and drive every step."""

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
        rand: Callable[[], float] = random.random,
    ):
        self.db = db
        self.port = port
        self.invokers = invokers
        self.grace = grace
        self.horizon = horizon
        self.clock = clock
        self.nonces = nonces
        self.rand = rand
        self.leases = Leases(db, clock)
        self.name = f"{socket.gethostname()}:{os.getpid()}"

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A write transaction; database outages surface as ``TransientError``."""
        try:
            with write_transaction(self.db) as conn:
                yield conn
        except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError) as err:
            raise TransientError(f"database unavailable: {err.orig or err}") from err

    def lock(self, conn: Connection, invocation_id: int) -> tuple[InvocationRow, JobRow] | None:
        """Lock an invocation and its job, job first."""
        job_id = store.invocation_job(conn, invocation_id)
        job = None if job_id is None else store.lock_job(conn, job_id)
        inv = None if job is None else store.lock_invocation(conn, invocation_id)
        return None if inv is None or job is None else (inv, job)

    # --- the chain ---------------------------------------------------------------------

    def tick(self, job_id: int, nonce: int) -> None:
        with self.transaction() as conn:
            job = store.lock_job(conn, job_id)
            if job is None:
                log.warning("tick for job %s, which no longer exists", job_id)
                return
            fed = self.feed(conn, job, Tick(nonce), self.clock())
        self.send(fed.messages)

    def start_invocation(self, invocation_id: int, attempt: int | None = None) -> None:
        """Record RUNNING for the next attempt and commit, then launch it; single-stage
        kinds finish here. A start for any other attempt (a repeated or stale message)
        does nothing: the attempt number is the fencing epoch."""
        with self.transaction() as conn:
            locked = self.lock(conn, invocation_id)
            if locked is None:
                return
            inv, job = locked
            number = inv.attempt + 1
            if inv.status != STARTING or attempt not in (None, number):
                return  # already started, or a message from an older attempt
            now = self.clock()
            if inv.start_at is not None and inv.start_at > now:  # early: a retry's backoff
                eta = min(inv.start_at, now + self.horizon)
                self.send([SendStart(inv.id, number, eta)])
                return
            controls = controls_of(job)
            invoker = self.invokers[job.kind]
            lease = Lease(inv.id, number, controls.lease)
            timeout_at = None if controls.timeout is None else now + controls.timeout
            deadline = now + controls.lease
            store.update_invocation(
                conn,
                inv.id,
                status=RUNNING,
                attempt=number,
                started_at=now,
                start_at=None,
                deadline=deadline if timeout_at is None else min(deadline, timeout_at),
                timeout_at=timeout_at,
                worker=self.name if invoker.single_stage else None,
                error=None,
                reason=None,
                log=debuglog.append(inv.log, now, f"attempt {number} started"),
            )
            fed = self.feed(conn, job, InvocationStarted(inv.id), now)
        self.send(fed.messages)
        call = Call(
            inv.id,
            number,
            job.ref,
            inv.slot,
            job.spec[job.kind],
            lease.length,
            controls.timeout,
            lease.lost,
        )
        if invoker.single_stage:
            self.leases.hold(lease)
        try:
            outcome = invoker.invoke(call)
        except Exception as err:  # an invoker bug must not leave the run RUNNING
            log.exception("invoker %s failed for invocation %s", job.kind, inv.id)
            outcome = Outcome.failed(f"{job.kind}: {type(err).__name__}: {err}")
        finally:
            self.leases.release(lease)
        if outcome is not None:
            self.record_patiently(inv.id, number, outcome)

    def record_patiently(self, invocation_id: int, attempt: int, outcome: Outcome) -> None:
        """The outcome exists only in this process: if the database is away, wait for it
        (about 15 s) rather than leave a finished run to expire as "lease expired"."""
        for delay in (*OUTCOME_RETRY_DELAYS, None):
            try:
                self.finish_invocation(invocation_id, outcome, attempt=attempt)
                return
            except TransientError as err:
                if delay is None:
                    raise
                log.warning("recording invocation %s: %s; again in %s s", invocation_id, err, delay)
                time.sleep(delay)

    def finish_invocation(
        self, invocation_id: int, outcome: Outcome, *, attempt: int | None = None
    ) -> bool:
        """Record the outcome of a RUNNING attempt; False if that attempt had already
        ended or is not the current one (a zombie, a repeated report)."""
        with self.transaction() as conn:
            locked = self.lock(conn, invocation_id)
            inv = locked and locked[0]
            if locked is None or inv.status != RUNNING or attempt not in (None, inv.attempt):
                log.info(
                    "outcome %s of invocation %s attempt %s ignored: it is %s (attempt %s)",
                    outcome.status,
                    invocation_id,
                    attempt,
                    inv and inv.status,
                    inv and inv.attempt,
                )
                return False
            fed = self.record_outcome(conn, *locked, outcome, self.clock())
        self.send(fed.messages)
        return True

    def record_outcome(
        self, conn: Connection, inv: InvocationRow, job: JobRow, outcome: Outcome, now: datetime
    ) -> Fed:
        """Within ``conn``'s transaction: end a locked attempt. A failure with attempts
        left goes back to STARTING after a backoff; anything else ends the invocation
        and steps its job."""
        status = outcome.status.value
        check_move(inv.status, status)
        text = debuglog.append(
            inv.log,
            now,
            f"attempt {inv.attempt} {status}" + (f": {outcome.error}" if outcome.error else ""),
        )
        for line in outcome.log:
            text = debuglog.append(text, now, line)
        controls = controls_of(job)
        revoke = (
            []
            if self.invokers[job.kind].single_stage or outcome.reason in (None, "launch")
            else [SendRevoke(celery_task_id(inv.id, inv.attempt))]
        )
        delay = controls.retry.delay(inv.attempt, self.rand()) if status == S.FAILED else None
        if delay is not None:
            start_at = now + delay
            earlier = [*(inv.attempts or []), _attempt_record(inv, outcome, now)]
            store.update_invocation(
                conn,
                inv.id,
                status=STARTING,
                start_at=start_at,
                deadline=start_at + self.grace,
                timeout_at=None,
                worker=None,
                attempts=earlier,
                error=outcome.error,
                reason=outcome.reason,
                log=debuglog.append(
                    text,
                    now,
                    f"retry: attempt {inv.attempt + 1} at "
                    f"{start_at.isoformat()} (after {delay.total_seconds():.1f}s)",
                ),
            )
            log.info(
                "%s invocation %s attempt %s failed (%s); retry in %.1fs",
                job.ref,
                inv.id,
                inv.attempt,
                outcome.error,
                delay.total_seconds(),
            )
            eta = min(start_at, now + self.horizon)
            return Fed(job.snapshot, [*revoke, SendStart(inv.id, inv.attempt + 1, eta)])
        store.update_invocation(
            conn,
            inv.id,
            status=status,
            error=outcome.error,
            reason=outcome.reason,
            finished_at=now,
            deadline=None,
            log=text,
        )
        slot = inv.slot.isoformat() if inv.slot else f"trigger {inv.trigger_id}"
        error = f" ({outcome.error})" if outcome.error else ""
        log.info("%s %s: %s%s", job.ref, slot, status, error)
        fed = self.feed(conn, job, InvocationFinished(inv.id, now), now)
        fed.messages[:0] = revoke
        if status == S.SUCCEEDED:
            for target in controls.triggers:
                fed.messages += self._trigger_other(conn, job, target, inv.id, now)
        return fed

    def _trigger_other(
        self, conn: Connection, source: JobRow, target: str, invocation_id: int, now: datetime
    ) -> list[Message]:
        """Trigger ``target`` for a success of ``source``, in the same transaction. The
        trigger id names the invocation, so a repeated step cannot trigger twice."""
        ref = target if "/" in target else f"{source.project}/{target}"
        try:
            job = store.lock_job(conn, store.resolve_job(conn, ref))
        except NotFound:
            log.warning("%s: cannot trigger %s: no such job", source.ref, ref)
            return []
        assert job is not None
        return self.feed(conn, job, Trigger(f"after:{invocation_id}", strict=False), now).messages

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

    def abort(self, *, job: str | None = None, invocation_id: int | None = None) -> list[int]:
        """Abort a job's active invocations, or one invocation (also a waiting one);
        returns the ids aborted. A ``celery`` attempt's task is revoked."""
        messages: list[Message] = []
        aborted: list[int] = []
        with self.transaction() as conn:
            now = self.clock()
            if invocation_id is not None:
                locked = self.lock(conn, invocation_id)
                if locked is None:
                    raise NotFound(f"no invocation {invocation_id}")
                targets = [locked[0]] if locked[0].status in (*ACTIVE, WAITING) else []
                job_id = locked[1].id
            else:
                job_id = store.resolve_job(conn, job or "")
                store.lock_job(conn, job_id)
                targets = store.lock_invocations_of(conn, job_id, ACTIVE)
            for inv in targets:
                row = store.lock_job(conn, job_id)
                assert row is not None
                outcome = Outcome(S.ABORTED, "aborted by a user", "aborted")
                messages += self._end(conn, inv, row, outcome, now).messages
                aborted.append(inv.id)
        self.send(messages)
        return aborted

    def _end(
        self, conn: Connection, inv: InvocationRow, job: JobRow, outcome: Outcome, now: datetime
    ) -> Fed:
        """End an invocation for good, whatever its state (abort, not retried)."""
        if inv.status == RUNNING:
            return self.record_outcome(conn, inv, job, outcome, now)
        store.update_invocation(
            conn,
            inv.id,
            status=outcome.status.value,
            error=outcome.error,
            reason=outcome.reason,
            finished_at=now,
            deadline=None,
            log=debuglog.append(inv.log, now, f"{outcome.status.value}: {outcome.error}"),
        )
        event: Event = Unbuffer() if inv.status == WAITING else InvocationFinished(inv.id, now)
        return self.feed(conn, job, event, now)

    def expire(self, invocation_id: int) -> bool:
        """End a RUNNING attempt whose lease or timeout lapsed (the watchdog's repair)."""
        with self.transaction() as conn:
            now = self.clock()
            locked = self.lock(conn, invocation_id)
            if locked is None:
                return False
            inv, job = locked
            if inv.status != RUNNING or inv.deadline is None or inv.deadline >= now:
                return False  # renewed or finished meanwhile
            if inv.timeout_at is not None and inv.timeout_at <= now:
                timeout = controls_of(job).timeout
                outcome = Outcome.failed(f"timed out after {timeout}", "timeout")
            else:
                outcome = Outcome.failed("lease expired", "lease expired")
            fed = self.record_outcome(conn, inv, job, outcome, now)
        self.send(fed.messages)
        return True

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
        policy = controls_of(job).overlap
        result = step(
            job.snapshot, event, now=now, schedule=schedule, nonce=self.nonces(), policy=policy
        )
        fed = Fed(result.snapshot)
        if not result.changed and spec is None and not flags:
            return fed
        revision = spec.revision if spec else job.revision
        watchdog_at = job.watchdog_at

        for action in result.actions:
            if isinstance(action, TickLater):
                eta = min(action.when, now + self.horizon)
                watchdog_at = eta + self.grace
                fed.messages.append(SendTick(job.id, action.nonce, eta))
            else:
                self._perform(conn, job, action, fed, now, revision)
        if fed.snapshot.tick_nonce is None:
            watchdog_at = None
        store.save_job(
            conn, job, fed.snapshot, watchdog_at=watchdog_at, now=now, spec=spec, **flags
        )
        return fed

    def _perform(
        self, conn: Connection, job: JobRow, action: Any, fed: Fed, now: datetime, revision: str
    ) -> None:
        """Carry out one of a step's actions in the step's transaction."""
        insert = partial(store.insert_invocation, conn, job.id, revision=revision, now=now)
        match action:
            case StartInvocation(slot=slot, trigger_id=trigger_id):
                inv = insert(
                    slot=slot, trigger_id=trigger_id, status=STARTING, deadline=now + self.grace
                )
                if inv is None:  # that slot has its invocation already
                    log.warning("job %s: slot %s already fired", job.ref, slot or trigger_id)
                    self._correct(job, fed, Abandon(), now)
                    return
                fed.snapshot.invocation_id = fed.started = inv
                fed.messages.append(SendStart(inv))
            case BufferInvocation(slot=slot, trigger_id=trigger_id):
                inv = insert(slot=slot, trigger_id=trigger_id, status=WAITING)
                if inv is None:
                    self._correct(job, fed, Unbuffer(), now)
            case StartBuffered():
                waiting = store.oldest_waiting(conn, job.id)
                if waiting is None:
                    log.error("job %s counted a waiting run it does not have", job.ref)
                    self._correct(job, fed, Abandon(), now)
                    return
                store.update_invocation(
                    conn, waiting.id, status=STARTING, deadline=now + self.grace
                )
                fed.snapshot.invocation_id = fed.started = waiting.id
                fed.messages.append(SendStart(waiting.id))
            case AbortActive(reason=reason):
                fed.messages += self._abort_active(conn, job, reason, now)
            case RecordSkipped(slot=slot, reason=reason, trigger_id=trigger_id):
                insert(slot=slot, trigger_id=trigger_id, status=S.SKIPPED.value, reason=reason)
            case _:
                raise AssertionError(f"unknown action {action!r}")

    def _correct(self, job: JobRow, fed: Fed, event: Event, now: datetime) -> None:
        """Undo a count the machine made for a row that could not be written."""
        schedule = schedule_of(job.schedule, job.timezone)
        policy = controls_of(job).overlap
        fed.snapshot = step(
            fed.snapshot, event, now=now, schedule=schedule, nonce=self.nonces(), policy=policy
        ).snapshot

    def _abort_active(
        self, conn: Connection, job: JobRow, reason: str, now: datetime
    ) -> list[Message]:
        """``cancel_other``: end the job's active invocations; the machine has already
        counted them out, so no event is fed for them."""
        messages: list[Message] = []
        for inv in store.lock_invocations_of(conn, job.id, ACTIVE):
            error = f"aborted: a newer run replaced it (overlap: {reason})"
            store.update_invocation(
                conn,
                inv.id,
                status=S.ABORTED.value,
                error=error,
                reason=reason,
                finished_at=now,
                deadline=None,
                log=debuglog.append(inv.log, now, error),
            )
            if inv.status == RUNNING and not self.invokers[job.kind].single_stage:
                messages.append(SendRevoke(celery_task_id(inv.id, inv.attempt)))
        return messages

    def send(self, messages: list[Message]) -> None:
        """Send after commit. A failed send is logged, not raised: the state is committed
        and the watchdog repeats the step when its deadline lapses."""
        for message in messages:
            try:
                match message:
                    case SendTick(job_id=job_id, nonce=nonce, eta=eta):
                        self.port.tick_later(job_id, nonce, eta)
                    case SendStart(invocation_id=invocation_id, attempt=attempt, eta=eta):
                        self.port.start_invocation(invocation_id, attempt, eta)
                    case SendRevoke(task_id=task_id):
                        self.port.revoke(task_id)
                    case _:
                        raise AssertionError(f"unknown message {message!r}")
            except AssertionError:
                raise
            except Exception:
                log.exception("could not send %s; the watchdog will repeat it", message)


def _attempt_record(inv: InvocationRow, outcome: Outcome, now: datetime) -> dict[str, Any]:
    return {
        "attempt": inv.attempt,
        "status": outcome.status.value,
        "started_at": inv.started_at.isoformat() if inv.started_at else None,
        "finished_at": now.isoformat(),
        "error": outcome.error,
        "reason": outcome.reason,
        "worker": inv.worker,
    }
