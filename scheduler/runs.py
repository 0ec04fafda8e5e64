"""The life of an invocation once its row exists: start each attempt, record its
outcome, retry after a backoff, time out, abort, and trigger the jobs that follow a
success.

``Runs`` is a part of :class:`scheduler.engine.Engine`, kept apart because it is the
half that talks to invokers and leases; the other half hosts the job machine.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from scheduler import backfill, debuglog, store
from scheduler.controls import controls_of
from scheduler.errors import NotFound, TransientError
from scheduler.invokers import Call, Invoker, Outcome, celery_task_id
from scheduler.leases import Lease, Leases
from scheduler.outbox import Fed, Launch, Message, SendRevoke, SendStart
from scheduler.store import InvocationRow, JobRow
from statemachine import (
    Event,
    InvocationFinished,
    InvocationStarted,
    InvocationStatus,
    Trigger,
    Unbuffer,
    check_move,
)

log = logging.getLogger("cronchain.engine")
OUTCOME_RETRY_DELAYS = (0.25, 0.5, 1, 2, 4, 8)  # seconds
S = InvocationStatus
STARTING, RUNNING, WAITING = S.STARTING.value, S.RUNNING.value, S.WAITING.value
ACTIVE = (STARTING, RUNNING)


@dataclass(frozen=True)
class Begun:
    """What beginning an attempt leaves for after the commit."""

    messages: list[Message] = field(default_factory=list)
    launch: Launch | None = None


class Runs:
    """Invocation life cycle; the host (the engine) provides the attributes below."""

    invokers: dict[str, Invoker]
    grace: timedelta
    horizon: timedelta
    clock: Callable[[], datetime]
    rand: Callable[[], float]
    leases: Leases
    name: str

    if TYPE_CHECKING:

        def transaction(self) -> AbstractContextManager[Connection]: ...
        def lock(
            self, conn: Connection, invocation_id: int, job_id: int | None = None
        ) -> tuple[InvocationRow, JobRow] | None: ...
        def feed(
            self, conn: Connection, job: JobRow, event: Event, now: datetime, **kw: Any
        ) -> Fed: ...
        def send(self, messages: list[Message]) -> None: ...

    def start_invocation(
        self, invocation_id: int, attempt: int | None = None, *, job_id: int | None = None
    ) -> None:
        """Record RUNNING for the next attempt and commit, then launch it; single-stage
        kinds finish here. A start for any other attempt (a repeated or stale message)
        does nothing: the attempt number is the fencing epoch."""
        with self.transaction() as conn:
            begun = self.begin_attempt(conn, invocation_id, attempt, job_id=job_id)
        self.send(begun.messages)
        if begun.launch is not None:
            self.launch(begun.launch)

    def begin_attempt(
        self, conn: Connection, invocation_id: int, attempt: int | None, *, job_id: int | None
    ) -> Begun:
        """Within ``conn``'s transaction: record the next attempt RUNNING, with its lease.
        What it returns is to be sent and launched once that transaction has committed."""
        locked = self.lock(conn, invocation_id, job_id)
        if locked is None:
            return Begun()
        inv, job = locked
        number = inv.attempt + 1
        if inv.status != STARTING or attempt not in (None, number):
            return Begun()  # already started, or a message from an older attempt
        now = self.clock()
        if inv.start_at is not None and inv.start_at > now:  # early: a retry's backoff
            return Begun([SendStart(inv.id, number, min(inv.start_at, now + self.horizon))])
        store.update_invocation(conn, inv.id, **self.attempt_columns(job, number, inv.log, now))
        fed = (
            Fed(job.snapshot)  # the machine does not count backfill runs
            if inv.backfill
            else self.feed(conn, job, InvocationStarted(inv.id), now)
        )
        return Begun(fed.messages, self.launch_of(job, inv.id, number, inv.slot))

    def attempt_columns(
        self, job: JobRow, number: int, log_text: str | None, now: datetime
    ) -> dict[str, Any]:
        """The columns of attempt ``number`` of one of ``job``'s runs, starting now: to
        update a run that waited, or to insert one that starts as it is created."""
        controls = controls_of(job)
        timeout_at = None if controls.timeout is None else now + controls.timeout
        deadline = now + controls.lease
        return dict(
            status=RUNNING,
            attempt=number,
            started_at=now,
            start_at=None,
            deadline=deadline if timeout_at is None else min(deadline, timeout_at),
            timeout_at=timeout_at,
            worker=self.name if self.invokers[job.kind].single_stage else None,
            error=None,
            reason=None,
            log=debuglog.append(log_text, now, f"attempt {number} started"),
        )

    def launch_of(
        self, job: JobRow, invocation_id: int, number: int, slot: datetime | None
    ) -> Launch:
        """The call of an attempt that ``attempt_columns`` recorded, with its lease."""
        controls = controls_of(job)
        lease = Lease(invocation_id, number, controls.lease)
        call = Call(
            invocation_id,
            number,
            job.ref,
            slot,
            job.spec[job.kind],
            lease.length,
            controls.timeout,
            lease.lost,
        )
        return Launch(job.id, job.kind, self.invokers[job.kind], lease, call)

    def launch(self, launch: Launch) -> None:
        """Make the call of an attempt whose RUNNING row is committed; record the outcome
        of a single-stage one."""
        call = launch.call
        if launch.invoker.single_stage:
            self.leases.hold(launch.lease)
        try:
            outcome = launch.invoker.invoke(call)
        except Exception as err:  # an invoker bug must not leave the run RUNNING
            log.exception("invoker %s failed for invocation %s", launch.kind, call.invocation_id)
            outcome = Outcome.failed(f"{launch.kind}: {type(err).__name__}: {err}")
        finally:
            self.leases.release(launch.lease)
        if outcome is not None:
            self.record_patiently(call.invocation_id, call.attempt, outcome, job_id=launch.job_id)

    def record_patiently(
        self, invocation_id: int, attempt: int, outcome: Outcome, *, job_id: int | None = None
    ) -> None:
        """The outcome exists only in this process: if the database is away, wait for it
        (about 15 s) rather than leave a finished run to expire as "lease expired"."""
        for delay in (*OUTCOME_RETRY_DELAYS, None):
            try:
                self.finish_invocation(invocation_id, outcome, attempt=attempt, job_id=job_id)
                return
            except TransientError as err:
                if delay is None:
                    raise
                log.warning("recording invocation %s: %s; again in %s s", invocation_id, err, delay)
                time.sleep(delay)

    def finish_invocation(
        self,
        invocation_id: int,
        outcome: Outcome,
        *,
        attempt: int | None = None,
        job_id: int | None = None,
    ) -> bool:
        """Record the outcome of a RUNNING attempt; False if that attempt had already
        ended or is not the current one (a zombie, a repeated report)."""
        with self.transaction() as conn:
            locked = self.lock(conn, invocation_id, job_id)
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
        if inv.backfill:  # the next waiting slot of the backfill takes its place
            return Fed(job.snapshot, [*revoke, *backfill.promote(conn, job, now, self.grace)])
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
            job = store.lock_job_named(conn, ref)
        except NotFound:
            log.warning("%s: cannot trigger %s: no such job", source.ref, ref)
            return []
        return self.feed(conn, job, Trigger(f"after:{invocation_id}", strict=False), now).messages

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
                job_id = store.lock_job_named(conn, job or "").id
                # A backfill's waiting runs first, so that ending its active ones
                # starts none of them.
                targets = store.lock_invocations_of(conn, job_id, (WAITING,), backfill=True)
                targets += store.lock_invocations_of(conn, job_id, ACTIVE, backfill=None)
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
        if inv.backfill:
            if inv.status == WAITING:
                return Fed(job.snapshot)
            return Fed(job.snapshot, backfill.promote(conn, job, now, self.grace))
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
