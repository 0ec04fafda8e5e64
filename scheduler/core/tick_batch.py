"""Ticks, fed in one transaction of a few statements: a herd's and a lone tick's alike.

A herd (2,000 ``every 10s`` jobs, a fleet's ``0 * * * *`` jobs) comes due at one instant
and reaches a worker as ``tick_batch`` messages. Fed one job per transaction, each fire
cost a lock, an insert, an update and a commit: four round trips and a WAL flush. Here a
batch is one transaction whatever its size: the jobs locked in id order by one
statement, their machines stepped in memory, their runs inserted by one statement and
the jobs saved by one more. A job whose slots are spread sends its ticks alone: each is
a batch of one, on the same path.

Only the common steps are held: a tick that starts a run (through the admission chain,
as ``Core.feed`` starts one), records skipped slots, or just re-arms. Any other step (a
run to buffer, a run to abort, a slot whose run exists already) is fed by
``Core.feed`` in the same transaction, after the held writes, as any other event is: the
rows are the same either way (tests compare them).

Exactly once still rests on the unique (job, slot) key, not on the batching: the insert
skips a slot that has its row, and that job's tick is then fed by ``Core.feed``, which
finds the row and abandons the start.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from cronchain.scheduler.core import actions, admission
from cronchain.scheduler.core.attempts import STARTING
from cronchain.scheduler.core.effects import Message, SendRun, SendStart, Stepped
from cronchain.scheduler.core.host import Admitting, Held
from cronchain.scheduler.storage import job_store, run_store, statistics
from cronchain.scheduler.storage.rows import JobRow
from cronchain.statemachine import (
    Action,
    InvocationStarted,
    InvocationStatus,
    RecordSkipped,
    StartInvocation,
    Tick,
    TickLater,
)

if TYPE_CHECKING:
    from cronchain.scheduler.core.host import CoreHost

log = logging.getLogger("cronchain.engine")
SKIPPED = InvocationStatus.SKIPPED.value


@dataclass
class _Held:
    """One job's tick, stepped in memory: what it saves and the rows it inserts."""

    job: JobRow
    nonce: int
    fed: Stepped
    changed: bool
    rows: list[dict[str, Any]] = field(default_factory=list)
    slot: datetime | None = None  # the slot of the run it starts, if it starts one
    hold: Held | None = None  # what holds that run, if a hold of the chain does
    skips: list[tuple[datetime, str]] = field(default_factory=list)  # (slot, reason)


def feed_ticks(
    engine: CoreHost, conn: Connection, ticks: Sequence[tuple[int, int]], *, start_here: bool
) -> list[Message]:
    """Feed each ``(job, nonce)`` tick in ``conn``'s transaction; returns what to send
    once it commits. With ``start_here``, a run a tick starts is created RUNNING and
    sent to its worker (``Core.tick_many``)."""
    statistics.keyed(conn, len(ticks))
    jobs = job_store.lock_jobs(conn, [job_id for job_id, _ in ticks])
    now = engine.clock()  # once the locks are held: a wait for one is not time gone by
    held, later = _hold_all(engine, conn, ticks, jobs, now, start_here)
    inserted = run_store.insert_invocations(conn, [row for h in held.values() for row in h.rows])
    messages: list[Message] = []
    saves = []
    for job_id, step in held.items():
        # The skips are written whatever becomes of the start: heard as any end is
        # (alerts, say), here, since ``Core.feed`` would find their rows written.
        for slot, reason in step.skips:
            skipped = inserted.get((job_id, slot))
            if skipped is not None:
                messages += engine.runs.skipped(conn, step.job, skipped, slot, reason, now)
        if step.slot is not None:
            inv_id = inserted.get((job_id, step.slot))
            if inv_id is None:  # that slot has its run already: ``Core.feed`` abandons
                later.append((job_id, step.nonce))
                continue
            _started(engine, conn, step, inv_id, now, start_here)
        watchdog_at = engine.stepper.settle_tick(step.job, Tick(step.nonce), step.fed)
        values = job_store.saved_values(
            step.job, step.fed.snapshot, watchdog_at=watchdog_at, now=now
        )
        saves.append(values | {"b_id": job_id, "b_generation": step.job.generation})
        messages += step.fed.messages
    job_store.save_jobs(conn, saves, copy=False)
    for job_id, nonce in later:
        job = job_store.lock_job(conn, job_id)
        if job is not None:
            messages += engine.feed(conn, job, Tick(nonce), now, start_here=start_here).messages
    return messages


def _hold_all(
    engine: CoreHost,
    conn: Connection,
    ticks: Sequence[tuple[int, int]],
    jobs: dict[int, JobRow],
    now: datetime,
    start_here: bool,
) -> tuple[dict[int, _Held], list[tuple[int, int]]]:
    """Step each locked job's machine in memory. Returns the steps to write together,
    by job, and the ticks to feed through ``Core.feed`` after them."""
    held: dict[int, _Held] = {}
    later: list[tuple[int, int]] = []
    for job_id, nonce in sorted(ticks):
        job = jobs.get(job_id)
        if job is None:
            log.warning("tick for job %s, which no longer exists", job_id)
        elif job_id in held:  # a second tick of one job: it steps the saved row
            later.append((job_id, nonce))
        else:
            step = _hold(engine, conn, job, nonce, now, start_here)
            if step is None:
                later.append((job_id, nonce))
            elif step.changed:  # else a stale tick: nothing to write, as ``feed`` writes
                held[job_id] = step
    return held, later


def _hold(
    engine: CoreHost, conn: Connection, job: JobRow, nonce: int, now: datetime, start_here: bool
) -> _Held | None:
    """Step ``job``'s machine for the tick without writing; None if the step asks for
    more than a run to start, slots to skip and the next tick."""
    result = engine.stepper.step(job, job.snapshot, Tick(nonce), now)
    if not _common(result.actions):
        return None
    step = _Held(job, nonce, Stepped(result.snapshot), result.changed)
    for action in result.actions:
        match action:
            case TickLater(when=when, nonce=next_nonce):
                step.fed.messages.append(engine.stepper.tick_message(job, when, next_nonce, now))
            case RecordSkipped(slot=slot, reason=reason):
                step.rows.append(_row(job, slot, now, status=SKIPPED, reason=reason))
                step.skips.append((slot, reason))
            case StartInvocation(slot=slot):
                said = admission.admit(engine.plugins.holds, conn, Admitting(job, slot), now)
                if isinstance(said, Held):
                    columns, step.hold = said.columns, said
                elif start_here:
                    columns = engine.attempts.attempt_columns(job, 1, None, now) | said
                else:
                    columns = dict(status=STARTING, deadline=now + engine.stepper.grace, **said)
                step.rows.append(_row(job, slot, now, **columns))
                step.slot = slot
    return step


def _common(actions: Sequence[Action]) -> bool:
    """Whether a step asks for no more than a batch holds: the next tick, slots to skip
    and one run to start, none of them a trigger's. Asked before anything is done, so
    that a step left to ``Core.feed`` has not been through the admission chain."""
    starts = 0
    for action in actions:
        match action:
            case TickLater() | RecordSkipped(trigger_id=None):
                pass
            case StartInvocation(trigger_id=None):
                starts += 1
            case _:
                return False
    return starts <= 1


def _row(job: JobRow, slot: datetime, now: datetime, **columns: Any) -> dict[str, Any]:
    return run_store.invocation_values(
        job.id, slot=slot, trigger_id=None, revision=job.revision, now=now, **columns
    )


def _started(
    engine: CoreHost, conn: Connection, step: _Held, inv_id: int, now: datetime, start_here: bool
) -> None:
    """The run of a held step was inserted as ``inv_id``: count it in, and with
    ``start_here`` send it to its worker, as ``Core.feed`` does; unless a hold holds
    it: then what the hold sends once its row is written."""
    step.fed.snapshot.invocation_id = inv_id
    if step.hold is not None:
        step.fed.messages += step.hold.then(inv_id)
        return
    step.fed.started = inv_id
    if not start_here:
        step.fed.messages.append(SendStart(inv_id))
        return
    call = engine.attempts.new_call(
        step.job, inv_id, 1, step.slot, trigger_id=None, filed_at=step.slot
    )
    step.fed.messages.append(SendRun(call))
    result = engine.stepper.step(step.job, step.fed.snapshot, InvocationStarted(inv_id), now)
    step.fed.snapshot = result.snapshot
    pending = deque(result.actions)  # none that the machine has today; carried out if any
    while pending:
        action = pending.popleft()
        pending += actions.perform(
            engine, conn, step.job, action, step.fed, now, step.job.revision, start_here
        )
