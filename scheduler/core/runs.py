"""How a run's attempts end: record an outcome, retry after a backoff, abort; and the
one place a run's end is decided (``Runs.finished``), which its listeners hear
(``host.RunEnd``). An attempt's beginning and claim are in :mod:`scheduler.core.attempts`.

``Runs`` belongs to the core that hosts the job machine (``engine.runs``), which it sees
as a ``host.CoreHost``; the watchdog's repairs of lapsed runs are in
:mod:`scheduler.maintenance.watchdog`.
"""

from __future__ import annotations

import logging
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from cronchain.scheduler import debuglog, outside
from cronchain.scheduler.core.attempts import (
    ACTIVE,
    RUNNING,
    SKIPPED,
    STARTING,
    WAITING,
    log_other_job,
)
from cronchain.scheduler.core.effects import Message, SendRevoke, SendStart, Stepped
from cronchain.scheduler.core.host import Ended
from cronchain.scheduler.core.outcome_batch import GroupCommit, HeldWrites, Report
from cronchain.scheduler.core.recording import patiently, textless_if_refused
from cronchain.scheduler.errors import NotFound
from cronchain.scheduler.invokers import Outcome, celery_task_id
from cronchain.scheduler.storage import job_store, revokes, run_store
from cronchain.scheduler.storage.rows import InvocationRow, JobRow
from cronchain.scheduler.timing.iso import iso
from cronchain.statemachine import (
    Event,
    InvocationFinished,
    InvocationStatus,
    Reason,
    Unbuffer,
    check_move,
)

log = logging.getLogger("cronchain.engine")
S = InvocationStatus

if TYPE_CHECKING:
    from cronchain.scheduler.core.host import CoreHost
    from cronchain.scheduler.core.leases import Lease
# Why an attempt that cronchain ended (not its worker) may still run: a ``celery`` task
# is revoked for these.
ENDED_HERE = (Reason.TIMEOUT, Reason.LEASE_EXPIRED, Reason.ABORTED)
# An attempt that no worker took in time is not retried: a retry would wait in the same
# queue (Temporal's schedule-to-start timeout is not retried either).
NOT_RETRIED = (Reason.SCHEDULE_TO_START,)


class Runs:
    """The end of a job's runs (outcomes, retries, abort), hosted by an engine:
    its transactions, its machine steps and its sends. ``engine.runs``."""

    def __init__(self, engine: CoreHost):
        self.engine = engine
        self.together = GroupCommit(self)

    def report(self, lease: Lease, outcome: Outcome) -> bool | None:
        """Record the outcome of the attempt that ``lease`` holds, then let the lease go,
        recorded or not: an outcome that cannot be recorded must not leave its run
        RUNNING for good behind a lease this process keeps renewing. Its lease then
        lapses, and the watchdog ends the attempt as "lease expired" and applies the
        job's retries. True when it was recorded, False when the attempt had ended
        elsewhere (aborted, timed out: ``finish_invocation``), None, logged at ERROR,
        when it could not be recorded."""
        try:
            return self.record_patiently(
                lease.invocation_id,
                lease.attempt,
                outcome,
                job_id=lease.job_id,
                filed_at=lease.filed_at,
            )
        except Exception:
            log.exception(
                "invocation %s attempt %s: its outcome (%s) was not recorded; its lease is"
                " no longer renewed, so the watchdog ends the attempt once the lease lapses",
                lease.invocation_id,
                lease.attempt,
                outcome.status.value,
            )
            return None
        finally:
            self.engine.leases.release(lease)

    def report_all(self, leases: list[Lease], outcomes: list[Outcome]) -> list[bool | None]:
        """``report`` for outcomes that one thread has together (a batch's runs that
        answered at once): written as one group, with what other threads report
        meanwhile; an outcome the group did not record (a run another transaction
        holds, a database away, a group whose writing raised) goes the way of ``report``,
        patiently and alone, and so lets its lease go whatever happens to it."""
        reports = [
            Report(lease.invocation_id, lease.attempt, outcome, lease.job_id, lease.filed_at)
            for lease, outcome in zip(leases, outcomes, strict=True)
        ]
        try:
            self.together.finish_all(reports)
        except Exception:  # e.g. the messages after the commit: what was not recorded
            log.exception("%s outcomes written together: one by one", len(reports))
        results: list[bool | None] = []
        for lease, outcome, written in zip(leases, outcomes, reports, strict=True):
            if written.recorded:
                self.engine.leases.release(lease)
                results.append(True)
            else:
                results.append(self.report(lease, outcome))
        return results

    def record_patiently(
        self,
        invocation_id: int,
        attempt: int,
        outcome: Outcome,
        *,
        job_id: int | None = None,
        filed_at: datetime | None = None,
    ) -> bool:
        """Record an outcome that exists only in this process (``scheduler.core.recording``):
        through a database restart, and without its text if the database refuses it.
        Outcomes that threads of this process report together are recorded together
        (``scheduler.core.outcome_batch``). False: the attempt had ended already (as
        ``finish_invocation`` says)."""

        def record(with_text: bool) -> bool:
            told = outcome if with_text else outcome.without_text()
            report = partial(Report, invocation_id, attempt, told, job_id, filed_at)
            return patiently(lambda: self.together.finish(report()), f"invocation {invocation_id}")

        what = f"invocation {invocation_id} attempt {attempt}: its outcome"
        return textless_if_refused(record, what)

    def finish_invocation(
        self,
        invocation_id: int,
        outcome: Outcome,
        *,
        attempt: int | None = None,
        job_id: int | None = None,
        filed_at: datetime | None = None,
    ) -> bool:
        """Record the outcome of a RUNNING attempt; False if that attempt had already
        ended or is not the current one (a zombie, a repeated report), if its run is gone
        (deleted with its job), or if ``job_id`` is given and the run is another job's.
        ``filed_at``: where the run is filed, if known (``Call``)."""
        with self.engine.transaction() as conn:
            locked = self.engine.lock(conn, invocation_id, job_id, filed_at)
            inv = locked and locked[0]
            if locked is None or inv.status != RUNNING or attempt not in (None, inv.attempt):
                owner = None if locked else run_store.invocation_job(conn, invocation_id)
                if owner is not None:  # another job's, or filed elsewhere: leave it alone
                    if job_id is not None and owner != job_id:
                        log_other_job("outcome", invocation_id, attempt, job_id, owner)
                    else:
                        log.warning(
                            "outcome of invocation %s attempt %s refused: it was sent for a"
                            " run filed at %s, and invocation %s is not",
                            invocation_id,
                            attempt,
                            filed_at,
                            invocation_id,
                        )
                    return False
                if attempt is not None:  # that attempt's task has ended: no need to stop it
                    revokes.forget(conn, [celery_task_id(invocation_id, attempt)])
                log.info(
                    "outcome %s of invocation %s attempt %s ignored: %s",
                    outcome.status,
                    invocation_id,
                    attempt,
                    f"it is {inv.status} (attempt {inv.attempt})"
                    if inv
                    else "no such invocation (deleted with its job)",
                )
                return False
            fed = self.record_outcome(conn, *locked, outcome, self.engine.clock())
        self.engine.send(fed.messages)
        return True

    def record_outcome(
        self,
        conn: Connection,
        inv: InvocationRow,
        job: JobRow,
        outcome: Outcome,
        now: datetime,
        held: HeldWrites | None = None,
    ) -> Stepped:
        """Within ``conn``'s transaction: end a locked attempt. A failure with attempts
        left goes back to STARTING after a backoff; anything else ends the invocation
        (``finished``). The error recorded is bounded (``bounded_error``), whatever kind
        of run reported it. With ``held``, the updates of the run and its job are held
        there to be written with others' (``scheduler.core.outcome_batch``), unless the
        outcome reads or writes anything more."""
        outcome = outcome.recorded()
        status = outcome.status.value
        check_move(inv.status, status)
        text = debuglog.append(
            inv.log,
            now,
            f"attempt {inv.attempt} {status}" + (f": {outcome.error}" if outcome.error else ""),
        )
        for line in outcome.log:
            text = debuglog.append(text, now, line)
        controls = job.controls
        revoke = (
            [self.revoke(conn, inv, now)]
            if job.kind == "celery" and inv.worker is not None and outcome.reason in ENDED_HERE
            else []
        )
        if held is not None and (revoke or self.reads(job, inv, outcome)):
            held.write(conn)  # what follows reads the rows as they now are
            held = None
        update = partial(run_store.update_invocation, conn) if held is None else held.update_run
        retried = status == S.FAILED and outcome.reason not in NOT_RETRIED
        delay = controls.retry.delay(inv.attempt, self.engine.rand()) if retried else None
        if delay is not None:
            start_at = now + delay
            earlier = [*(inv.attempts or []), _attempt_record(inv, outcome, now)]
            update(
                inv,
                status=STARTING,
                start_at=start_at,
                deadline=start_at + self.engine.stepper.grace,
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
            _log_outcome(job, inv, outcome, now, f"; retry in {delay.total_seconds():.1f} s")
            eta = min(start_at, now + self.engine.stepper.horizon)
            heard = self._hear(conn, Ended(job, inv, outcome, now, final=False))
            return Stepped(job.snapshot, [*revoke, *heard, SendStart(inv.id, inv.attempt + 1, eta)])
        update(
            inv,
            status=status,
            error=outcome.error,
            reason=outcome.reason,
            finished_at=now,
            deadline=None,
            log=text,
        )
        _log_outcome(job, inv, outcome, now)
        fed = self.finished(conn, job, inv, outcome, now, held=held)
        fed.messages[:0] = revoke
        return fed

    def revoke(self, conn: Connection, inv: InvocationRow, now: datetime) -> SendRevoke:
        """Stop the task of ``inv``'s current attempt, which cronchain ended. Recorded in
        ``conn``'s transaction, so that a revoke that cannot be sent now is sent by the
        watchdog later, until it is sent or the task reports that it has ended."""
        task_id = celery_task_id(inv.id, inv.attempt)
        revokes.record(conn, task_id, inv.id, now + self.engine.stepper.grace)
        return SendRevoke(task_id)

    def abort(
        self, *, job: str | None = None, invocation_id: int | None = None
    ) -> dict[str, list[int]]:
        """Abort every active (STARTING, RUNNING) and waiting (WAITING: buffered,
        catch-up, backfill, upstream) invocation of a job, or one invocation; returns the ids
        aborted by the status each had. A ``celery`` attempt's task is revoked."""
        messages: list[Message] = []
        aborted: dict[str, list[int]] = {STARTING: [], RUNNING: [], WAITING: []}
        with self.engine.transaction() as conn:
            now = self.engine.clock()
            if invocation_id is not None:
                locked = self.engine.lock(conn, invocation_id)
                if locked is None:
                    raise NotFound(f"no invocation {invocation_id}")
                targets = [locked[0]] if locked[0].status in (*ACTIVE, WAITING) else []
                job_id = locked[1].id
            else:
                job_id = job_store.lock_job_named(conn, job or "").id
                # Every run waiting for its turn first (each one the machine counted is
                # counted out), so that ending the started ones (active, or waiting for
                # their upstreams) frees a place for none of them: in this transaction,
                # nothing of the job starts.
                waiting = run_store.lock_invocations_of(conn, job_id, (WAITING,), backfill=None)
                targets = sorted(waiting, key=lambda inv: inv.held)
                targets += run_store.lock_invocations_of(conn, job_id, ACTIVE, backfill=None)
            for inv in targets:
                row = job_store.lock_job(conn, job_id)
                assert row is not None
                outcome = Outcome(S.ABORTED, "aborted by a user", Reason.ABORTED)
                messages += self._end(conn, inv, row, outcome, now).messages
                aborted[inv.status].append(inv.id)
        self.engine.send(messages)
        return aborted

    def _end(
        self, conn: Connection, inv: InvocationRow, job: JobRow, outcome: Outcome, now: datetime
    ) -> Stepped:
        """End an invocation for good, whatever its state (abort, not retried)."""
        if inv.status == RUNNING:
            return self.record_outcome(conn, inv, job, outcome, now)
        run_store.update_invocation(
            conn,
            inv,
            status=outcome.status.value,
            error=outcome.error,
            reason=outcome.reason,
            finished_at=now,
            deadline=None,
            log=debuglog.append(inv.log, now, f"{outcome.status.value}: {outcome.error}"),
        )
        return self.finished(conn, job, inv, outcome, now, Unbuffer() if inv.queued else None)

    def finished(
        self,
        conn: Connection,
        job: JobRow,
        inv: InvocationRow,
        outcome: Outcome,
        now: datetime,
        event: Event | None = None,
        *,
        held: HeldWrites | None = None,
        counted: bool = True,
    ) -> Stepped:
        """What follows a run's end, its row written ended as ``outcome`` says: the one
        place it is decided, whoever ended it (an outcome, an abort, a hold's
        ``on_unmet``; a slot skipped as it is filed is heard alone: ``skipped``). The
        listeners hear it first (``host.RunEnd``); then the
        job's machine, if it counts the run (not a backfill's; not one ``counted`` out
        already), is fed ``event`` (``InvocationFinished`` unless given), its save held
        in ``held`` if given; then what the listeners left for after; and last the runs
        they released are begun here: a listener that waits for a lock (a trigger's
        target) never waits while this holds the jobs of the runs it begins."""
        end = Ended(job, inv, outcome, now, fresh=held.fresh if held is not None else {})
        heard = self._hear(conn, end)
        if inv.backfill or not counted:
            fed = Stepped(job.snapshot)
        else:
            event = event or InvocationFinished(inv.id, now)
            fed = (
                self.engine.feed(conn, job, event, now)
                if held is None
                else held.feed(self.engine, conn, job, event, now)
            )
        for work in end.later:
            fed.messages += work()
        fed.messages[:0] = [*heard, *self.engine.attempts.begin_released(conn, end.released, held)]
        return fed

    def skipped(
        self,
        conn: Connection,
        job: JobRow,
        invocation_id: int,
        slot: datetime | None,
        reason: str,
        now: datetime,
        trigger_id: str | None = None,
        revision: str | None = None,
    ) -> list[Message]:
        """A run the machine recorded SKIPPED as it was filed (under ``revision``, the
        job's unless given), heard as any end is (the machine has counted it already).
        A skip starts nothing and leaves nothing for after: a listener that asked for
        either would be lost, so it fails here."""
        inv = InvocationRow(
            id=invocation_id,
            job_id=job.id,
            slot=slot,
            trigger_id=trigger_id,
            revision=revision or job.revision,
            status=SKIPPED,
            attempt=0,
            deadline=None,
            started_at=None,
            start_at=None,
            timeout_at=None,
            worker=None,
            attempts=None,
            log=None,
            backfill=False,
            reason=reason,
            filed_at=run_store.place(slot, now),
        )
        end = Ended(job, inv, Outcome(S.SKIPPED, None, reason), now)
        heard = self._hear(conn, end)
        assert not end.released and not end.later, f"a listener of skip {invocation_id}"
        return heard

    def reads(self, job: JobRow, inv: InvocationRow, outcome: Outcome) -> bool:
        """Whether a listener of this end reads or writes rows beyond the run and its job
        (a group of outcomes records such an end alone, its writes made first)."""
        status = outcome.status.value
        return any(listener.reads(job, inv, status) for listener in self.engine.plugins.run_ends)

    def _hear(self, conn: Connection, end: Ended) -> list[Message]:
        heard: list[Message] = []
        for listener in self.engine.plugins.run_ends:
            heard += listener.ended(self.engine, conn, end)
        return heard


def _log_outcome(
    job: JobRow, inv: InvocationRow, outcome: Outcome, now: datetime, then: str = ""
) -> None:
    """The one line a run's end (or an attempt's failure, ``then`` a retry) is logged as:
    its job, slot, attempt, status, how long since its claim, why; at WARNING when it
    failed (a lapsed lease, a timeout, retries given up among them). A log shipper reads
    the same as fields (``scheduler.workers.logs``)."""
    level = logging.WARNING if outcome.status == S.FAILED else logging.INFO
    if not log.isEnabledFor(level):  # a worker at WARNING: a success is not written
        return
    slot = iso(inv.slot) if inv.slot else "triggered"
    seconds = (now - inv.started_at).total_seconds() if inv.started_at else None
    took = "" if seconds is None else f" in {seconds:.3f} s"
    error = outside.one_line(outcome.error) if outcome.error else None
    why = f" ({error})" if error else ""
    status = outcome.status.value
    fields = dict(
        job=job.ref, slot=slot, attempt=inv.attempt, status=status, duration=seconds, error=error
    )
    text = "%s %s attempt %s %s%s%s%s"
    log.log(level, text, job.ref, slot, inv.attempt, status, took, why, then, extra=fields)


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
