"""An attempt's beginning: the start that records it RUNNING, sent to the worker that
will claim it, and the claim by which that worker takes it (the attempt number is the
fencing epoch). A run's end is in :mod:`scheduler.core.runs`.

``Attempts`` belongs to the core that hosts the job machine (``engine.attempts``), which
it sees as a ``host.CoreHost``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeGuard

from sqlalchemy import Connection

from cronchain.scheduler import debuglog, outside
from cronchain.scheduler.core.effects import Message, SendRun, SendStart, Stepped
from cronchain.scheduler.core.outcome_batch import HeldWrites
from cronchain.scheduler.errors import TransientError
from cronchain.scheduler.invokers import Call, Outcome
from cronchain.scheduler.storage import run_store, statistics
from cronchain.scheduler.storage.rows import ConcurrentUpdate, InvocationRow, JobRow
from cronchain.statemachine import InvocationStarted, InvocationStatus

if TYPE_CHECKING:
    from cronchain.scheduler.core.host import CoreHost

log = logging.getLogger("cronchain.engine")
S = InvocationStatus
STARTING, RUNNING, WAITING = S.STARTING.value, S.RUNNING.value, S.WAITING.value
SKIPPED = S.SKIPPED.value
ACTIVE = (STARTING, RUNNING)
WORKER_LIMIT = 200  # characters of a worker's name kept (invocations.worker)
# An attempt as a worker names it: (invocation, attempt, job, filed), as the engine's
# messages carry it (``Call.ref``): the run's job, and where the run is filed. Older
# messages name (invocation, attempt, job) or (invocation, attempt).
AttemptRef = (
    tuple[int, int] | tuple[int, int, int | None] | tuple[int, int, int | None, datetime | None]
)


class Attempts:
    """The beginning of a job's attempts (started, sent, claimed), hosted by an engine:
    its transactions, its machine steps and its sends. ``engine.attempts``."""

    def __init__(self, engine: CoreHost):
        self.engine = engine

    def start_invocation(
        self, invocation_id: int, attempt: int | None = None, *, job_id: int | None = None
    ) -> None:
        """Record the next attempt RUNNING and commit, then send it to the worker that
        will claim it. A start for any other attempt (a repeated or stale message) does
        nothing: the attempt number is the fencing epoch."""
        with self.engine.transaction() as conn:
            messages = self.begin_attempt(conn, invocation_id, attempt, job_id=job_id)
        self.engine.send(messages)

    def begin_attempt(
        self, conn: Connection, invocation_id: int, attempt: int | None, *, job_id: int | None
    ) -> list[Message]:
        """Within ``conn``'s transaction: record the next attempt RUNNING, not yet
        claimed. What it returns is to be sent once that transaction has committed."""
        locked = self.engine.lock(conn, invocation_id, job_id)
        return [] if locked is None else self._begin(conn, *locked, attempt)

    def _begin(
        self, conn: Connection, inv: InvocationRow, job: JobRow, attempt: int | None
    ) -> list[Message]:
        """``begin_attempt`` of a run and job this transaction has locked."""
        number = inv.attempt + 1
        if inv.status != STARTING or attempt not in (None, number):
            return []  # already started, or a message from an older attempt
        now = self.engine.clock()
        if inv.start_at is not None and inv.start_at > now:  # early: a retry's backoff
            return [SendStart(inv.id, number, min(inv.start_at, now + self.engine.stepper.horizon))]
        run_store.update_invocation(conn, inv, **self.attempt_columns(job, number, inv.log, now))
        fed = (
            Stepped(job.snapshot)  # the machine does not count backfill runs
            if inv.backfill
            else self.engine.feed(conn, job, InvocationStarted(inv.id), now)
        )
        return [*fed.messages, SendRun(self.call_of(job, inv, number))]

    def begin_released(
        self, conn: Connection, messages: list[Message], held: HeldWrites | None = None
    ) -> list[Message]:
        """``messages``, the runs they ask the control path to start begun here instead,
        in this transaction (which holds their rows: it has just released them), where
        no other transaction holds their job: their attempts go straight to the work
        path, with no start message and no transaction of their own. A run whose job is
        held is started as asked: waiting for that lock here could close a cycle of
        waits (the releasing transaction holds an upstream, or a gate's run).

        ``held``: a group's writes, written first so that the jobs are read as they now
        are. A job changed here whose own run the group records later meets the
        generation check, and the group is recorded one outcome at a time."""
        wanted = {m.invocation_id for m in messages if _first_start(m)}
        if not wanted:
            return messages
        if held is not None:
            held.write(conn)
        locked = run_store.lock_runs(conn, sorted(wanted))  # skips what others hold
        changed: set[int] = set()
        kept: list[Message] = []
        for message in messages:
            found = locked.get(message.invocation_id) if _first_start(message) else None
            if found is None:
                kept.append(message)
                continue
            inv, job = found
            if job.id in changed:  # read again: an earlier start here changed it
                found = run_store.lock_run(conn, job.id, inv.id, inv.filed_at)
                assert found is not None  # locked by this transaction
                inv, job = found
            kept += self._begin(conn, inv, job, 1)
            changed.add(job.id)
        return kept

    def attempt_columns(
        self, job: JobRow, number: int, log_text: str | None, now: datetime
    ) -> dict[str, Any]:
        """The columns of attempt ``number`` of one of ``job``'s runs, sent now and not
        yet claimed: to update a run that waited, or to insert one that starts as it is
        created. Until a worker claims it, ``timeout_at`` is when schedule-to-start runs
        out, and ``deadline`` when the watchdog sends it again."""
        return dict(
            status=RUNNING,
            attempt=number,
            started_at=now,
            start_at=None,
            deadline=now + self.engine.stepper.grace,
            timeout_at=now + job.controls.schedule_to_start,
            worker=None,
            error=None,
            reason=None,
            log=debuglog.append(log_text, now, f"attempt {number} sent"),
        )

    def call_of(self, job: JobRow, inv: InvocationRow, number: int) -> Call:
        """The call of an attempt that ``attempt_columns`` recorded."""
        return self.new_call(job, inv.id, number, inv.slot, inv.trigger_id, inv.filed_at)

    def new_call(
        self,
        job: JobRow,
        invocation_id: int,
        number: int,
        slot: datetime | None,
        trigger_id: str | None,
        filed_at: datetime | None,
    ) -> Call:
        """``call_of`` a run known by its parts: one this transaction has just filed."""
        controls = job.controls
        return Call(
            invocation_id,
            number,
            job.ref,
            slot,
            job.spec[job.kind],
            controls.lease,
            controls.timeout,
            kind=job.kind,
            job_id=job.id,
            priority=controls.priority,
            trigger_id=trigger_id,
            filed_at=filed_at,
        )

    def claim(
        self,
        invocation_id: int,
        attempt: int,
        worker: str,
        *,
        job_id: int | None = None,
        filed_at: datetime | None = None,
    ) -> Call | None:
        """Take an attempt for ``worker``, before its work begins: only the current
        attempt, and only one delivery of it, can be claimed. From now on its lease and
        its timeout count. None: it is not current, or was claimed already, or (with
        ``job_id``, which the engine's messages carry) it is not that job's run.
        ``filed_at``: where the run is filed, as the messages carry it."""
        calls, _ = self.claim_many([(invocation_id, attempt, job_id, filed_at)], worker)
        return next(iter(calls), None)

    def claim_many(
        self,
        attempts: list[AttemptRef],
        worker: str,
        answer: Callable[[Call], Outcome | None] | None = None,
    ) -> tuple[list[Call], dict[int, Outcome]]:
        """``claim`` for attempts sent together, in one transaction: the calls of those
        that could be claimed, and the outcomes recorded, by invocation. Each attempt is
        an ``AttemptRef``.

        A call that ``answer`` makes at once (a ``noop`` that does not sleep: nothing
        outside is called, so it may be made again) and that succeeds is recorded in
        the same transaction, as the group commit records it
        (``scheduler.core.outcome_batch``): no lease, no second transaction, no second
        lock of its rows. Its job is locked with it, as the group locks it; a run whose
        rows another transaction holds is claimed after, without ``answer``. Should
        that transaction fail, the batch is claimed again without ``answer``: the calls
        are then the caller's to make."""
        if answer is None:
            claimed = self._claim(attempts, worker, None)
        else:
            try:
                claimed = self._claim(attempts, worker, answer)
            except ConcurrentUpdate:  # a job changed under us (SQLite has no row locks)
                log.warning("%s attempts met a changed job: claimed, not recorded", len(attempts))
                claimed = self._claim(attempts, worker, None)
            except TransientError:
                raise
            except Exception:
                log.exception("%s attempts claimed and recorded together failed", len(attempts))
                claimed = self._claim(attempts, worker, None)
        calls = claimed.calls
        self.engine.send(claimed.messages)  # what was committed stays so, whatever follows
        if claimed.left:  # locked elsewhere: claimed as any claim is
            try:
                more = self._claim(claimed.left, worker, None)
            except Exception:  # unclaimed, they are the watchdog's to send again
                log.exception("%s attempts locked elsewhere were not claimed", len(claimed.left))
            else:
                calls += more.calls
                self.engine.send(more.messages)
        return calls, claimed.answered

    def _claim(
        self,
        attempts: list[AttemptRef],
        worker: str,
        answer: Callable[[Call], Outcome | None] | None,
    ) -> _Claimed:
        """One transaction of ``claim_many``: nothing is sent from here."""
        refs = {ref[0]: ref for ref in attempts}  # an attempt named twice is claimed once
        wanted = {id_: (ref[1], ref[2] if len(ref) > 2 else None) for id_, ref in refs.items()}
        filed = [ref[3] if len(ref) > 3 else None for ref in refs.values()]
        worker = outside.storable(worker)[:WORKER_LIMIT]  # a host's name, as its worker says
        claimed = _Claimed()
        claims: list[dict[str, Any]] = []
        held, jobs_ended = HeldWrites(), set()
        with self.engine.transaction() as conn:
            now = self.engine.clock()
            statistics.keyed(conn, len(attempts))
            if answer is None:  # the runs alone: a claim never waits on a job
                found = run_store.lock_attempts(conn, list(wanted), filed)
            else:  # and their jobs, which an end writes, locked as the group locks them:
                # in id order, none waited for
                found = list(run_store.lock_runs(conn, list(wanted), filed).values())
            for inv, job in found:
                attempt, job_id = wanted[inv.id]
                if job_id is not None and job_id != job.id:
                    log_other_job("claim", inv.id, attempt, job_id, job.id)
                    continue
                if inv.status != RUNNING or inv.attempt != attempt or inv.worker:
                    continue
                call = self.call_of(job, inv, inv.attempt)
                columns = _claim_columns(inv, call, worker, now)
                claimed.calls.append(call)
                for hook in self.engine.plugins.claims:
                    claimed.messages += hook.claimed(conn, job, inv, now)
                # Left to the caller, made and recorded after the claim: a job's second
                # run in the batch (its end would step a job row this one's end changed);
                # a failure (a retry would give the claim back in the same UPDATE, and
                # the fire lag counts a claim that a statement makes); an end that a
                # listener reads or writes more for (a trigger of another job: it would
                # change rows read here already).
                outcome = None if answer is None or job.id in jobs_ended else answer(call)
                if outcome is not None and (
                    outcome.status != S.SUCCEEDED or self.engine.runs.reads(job, inv, outcome)
                ):
                    outcome = None
                if outcome is None:
                    claims.append(columns | {"b_id": inv.id, "b_filed": inv.filed_at})
                    continue
                claimed.answered[inv.id] = outcome
                jobs_ended.add(job.id)
                held.update_run(inv, **columns)  # joined by the end's own update
                run = inv.changed(**columns)
                ended = self.engine.runs.record_outcome(conn, run, job, outcome, now, held)
                claimed.messages += ended.messages
            run_store.update_invocations(conn, claims)
            held.write(conn)
        seen = {inv.id for inv, _ in found}
        claimed.left = [ref for ref in attempts if ref[0] not in seen] if answer else []
        return claimed


@dataclass
class _Claimed:
    """What one claim's transaction did: the calls claimed, the outcomes it recorded (by
    invocation), what to send now that it has committed, and the attempts it skipped
    (locked elsewhere)."""

    calls: list[Call] = field(default_factory=list)
    answered: dict[int, Outcome] = field(default_factory=dict)
    messages: list[Message] = field(default_factory=list)
    left: list[AttemptRef] = field(default_factory=list)


def log_other_job(
    what: str, invocation_id: int, attempt: int | None, job_id: int | None, owner: int
) -> None:
    """A claim or outcome sent for one job's run that names another job's: ids were
    handed out again (SQLite before migration 0005) or the message was forged."""
    log.warning(
        "%s of invocation %s attempt %s refused: it was sent for job %s, and invocation %s"
        " is job %s's",
        what,
        invocation_id,
        attempt,
        job_id,
        invocation_id,
        owner,
    )


def _claim_columns(inv: InvocationRow, call: Call, worker: str, now: datetime) -> dict[str, Any]:
    timeout_at = None if call.timeout is None else now + call.timeout
    deadline = now + call.lease
    waited = (now - inv.started_at).total_seconds() if inv.started_at else 0.0
    return dict(
        worker=worker,
        started_at=now,
        deadline=deadline if timeout_at is None else min(deadline, timeout_at),
        timeout_at=timeout_at,
        log=debuglog.append(
            inv.log, now, f"attempt {inv.attempt} claimed by {worker} after {waited:.3f}s"
        ),
    )


def _first_start(message: Message) -> TypeGuard[SendStart]:
    """A message that starts a run's first attempt now (``begin_released``'s)."""
    return isinstance(message, SendStart) and message.attempt == 1 and message.eta is None
