"""An attempt's beginning: the start that records it RUNNING, sent to the worker that
will claim it, and the claim by which that worker takes it (the attempt number is the
fencing epoch). A run's end is in :mod:`scheduler.core.runs`.

``Attempts`` belongs to the core that hosts the job machine (``engine.attempts``), which
it sees as a ``host.CoreHost``.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeGuard

from sqlalchemy import Connection

from cronchain.scheduler import debuglog, outside
from cronchain.scheduler.core.effects import Message, SendRun, SendStart, Stepped
from cronchain.scheduler.invokers import Call
from cronchain.scheduler.spec.controls import controls_of
from cronchain.scheduler.storage import run_store
from cronchain.scheduler.storage.rows import InvocationRow, JobRow
from cronchain.statemachine import InvocationStarted, InvocationStatus

if TYPE_CHECKING:
    from cronchain.scheduler.core.host import CoreHost
    from cronchain.scheduler.core.outcome_batch import HeldWrites

log = logging.getLogger("cronchain.engine")
S = InvocationStatus
STARTING, RUNNING, WAITING = S.STARTING.value, S.RUNNING.value, S.WAITING.value
SKIPPED = S.SKIPPED.value
ACTIVE = (STARTING, RUNNING)
WORKER_LIMIT = 200  # characters of a worker's name kept (invocations.worker)
# An attempt as a worker names it: (invocation, attempt), or with its job as the
# engine's messages carry it, (invocation, attempt, job).
AttemptRef = tuple[int, int] | tuple[int, int, int | None]


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
        run_store.update_invocation(conn, inv.id, **self.attempt_columns(job, number, inv.log, now))
        fed = (
            Stepped(job.snapshot)  # the machine does not count backfill runs
            if inv.backfill
            else self.engine.feed(conn, job, InvocationStarted(inv.id), now)
        )
        return [*fed.messages, SendRun(self.call_of(job, inv.id, number, inv.slot, inv.trigger_id))]

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
                found = run_store.lock_run(conn, job.id, inv.id)
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
            timeout_at=now + controls_of(job).schedule_to_start,
            worker=None,
            error=None,
            reason=None,
            log=debuglog.append(log_text, now, f"attempt {number} sent"),
        )

    def call_of(
        self,
        job: JobRow,
        invocation_id: int,
        number: int,
        slot: datetime | None,
        trigger_id: str | None = None,
    ) -> Call:
        """The call of an attempt that ``attempt_columns`` recorded."""
        controls = controls_of(job)
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
        )

    def claim(
        self, invocation_id: int, attempt: int, worker: str, *, job_id: int | None = None
    ) -> Call | None:
        """Take an attempt for ``worker``, before its work begins: only the current
        attempt, and only one delivery of it, can be claimed. From now on its lease and
        its timeout count. None: it is not current, or was claimed already, or (with
        ``job_id``, which the engine's messages carry) it is not that job's run."""
        return next(iter(self.claim_many([(invocation_id, attempt, job_id)], worker)), None)

    def claim_many(self, attempts: list[AttemptRef], worker: str) -> list[Call]:
        """``claim`` for attempts sent together, in one transaction: the calls of those
        that could be claimed. Each is ``(invocation, attempt)`` or ``(invocation,
        attempt, job)``."""
        wanted = {ref[0]: (ref[1], ref[2] if len(ref) > 2 else None) for ref in attempts}
        worker = outside.storable(worker)[:WORKER_LIMIT]  # a host's name, as its worker says
        calls, claims, alerts = [], [], []
        with self.engine.transaction() as conn:
            now = self.engine.clock()
            for inv, job in run_store.lock_attempts(conn, list(wanted)):
                attempt, job_id = wanted[inv.id]
                if job_id is not None and job_id != job.id:
                    log_other_job("claim", inv.id, attempt, job_id, job.id)
                    continue
                if inv.status != RUNNING or inv.attempt != attempt or inv.worker:
                    continue
                call = self.call_of(job, inv.id, inv.attempt, inv.slot, inv.trigger_id)
                claims.append(_claim_columns(inv, call, worker, now) | {"b_id": inv.id})
                calls.append(call)
                for hook in self.engine.plugins.claims:
                    alerts += hook.claimed(conn, job, inv, now)
            run_store.update_invocations(conn, claims)
        self.engine.send(alerts)
        return calls


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
