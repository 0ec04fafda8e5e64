"""Backfill: run a job for every slot of a past range, beside its schedule.

A backfill is for the past: a range that holds a slot after now is refused whole, since
that slot is the schedule's to fire when its time comes (had the backfill taken it, the
schedule would find it fired already). A disabled job refuses a backfill (the engine asks
its machine); a paused one takes it.

Each slot becomes a WAITING invocation marked ``backfill``. The slot's unique key makes
a second backfill of the same range a no-op, and a slot that already ran (or was
skipped) keeps its row. The job machine does not count backfill runs, so the schedule
keeps firing meanwhile; instead each backfill run that ends starts the next waiting one,
in the same transaction, which keeps ``max_concurrent`` of them in flight.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from sqlalchemy import Connection

from cronchain.scheduler import debuglog, progress
from cronchain.scheduler.core.effects import Message, SendStart
from cronchain.scheduler.errors import SpecError
from cronchain.scheduler.storage import job_store, partitions, run_store
from cronchain.scheduler.storage.rows import InvocationRow, JobRow
from cronchain.scheduler.timing.iso import iso
from cronchain.scheduler.timing.schedules import Schedule, stored_schedule
from cronchain.scheduler.workflows import upstream
from cronchain.statemachine import Backfill

if TYPE_CHECKING:
    from cronchain.scheduler.core.host import Ended, Host

MAX_SLOTS = 10_000  # one backfill; split a longer range in several
_INSTANT = timedelta(microseconds=1)


@dataclass
class BackfillReport:
    job: str
    slots: list[datetime] = field(default_factory=list)  # created, or would be
    existing: list[datetime] = field(default_factory=list)  # had an invocation already
    started: list[int] = field(default_factory=list)


def backfill(
    host: Host,
    ref: str,
    first: datetime,
    last: datetime,
    *,
    max_concurrent: int = 1,
    dry_run: bool = False,
    retention: timedelta | None = None,
) -> BackfillReport:
    """One invocation per slot of ``[first, last]`` that has none yet. Refused for a
    disabled job (the machine says so), for a range with a slot after now and for
    one that starts in a month history ``retention`` drops."""
    messages: list[Message] = []
    with host.transaction() as conn:
        job = job_store.lock_job_named(conn, ref)
        now = host.clock()
        host.feed(conn, job, Backfill(), now)  # changes nothing, or raises
        schedule = stored_schedule(job.schedule, job.timezone, job.days)
        report = plan(conn, job, schedule, first, last, now, retention)
        if not dry_run:
            messages = create(host, conn, job, report, max_concurrent=max_concurrent, now=now)
    host.send(messages)
    return report


class NextSlot:
    """Hears the end of a backfill's run that was in flight: the backfill's next slot
    takes its place (``promote``). It reads the job's waiting runs, which a group of
    outcomes must have written first."""

    def reads(self, job: JobRow, was: InvocationRow, status: str) -> bool:
        return was.backfill

    def ended(self, host: Host, conn: Connection, end: Ended) -> list[Message]:
        if not end.was.backfill or not end.final or end.was.queued:
            return []
        return promote(host, conn, end.job, end.now)


def slots_in(schedule: Schedule, first: datetime, last: datetime) -> list[datetime]:
    """The schedule's slots in ``[first, last]``."""
    if schedule.relative or schedule.next_after(first) is None:
        raise SpecError("backfill", "the job's schedule has no fixed slots to backfill")
    found: list[datetime] = []
    t = first - _INSTANT
    while (t := schedule.next_after(t)) is not None and t <= last:  # type: ignore[assignment]
        if len(found) == MAX_SLOTS:
            raise SpecError("backfill", f"the range holds more than {MAX_SLOTS} slots")
        found.append(t)
    return found


def plan(
    conn: Connection,
    job: JobRow,
    schedule: Schedule,
    first: datetime,
    last: datetime,
    now: datetime,
    retention: timedelta | None = None,
) -> BackfillReport:
    """The slots of ``[first, last]`` that have no invocation yet, and those that have;
    SpecError if the range is empty, too long, holds a slot of the schedule's (one after
    ``now``, or the one its pending tick is for) or one in a month that ``retention``
    drops."""
    if last < first:
        raise SpecError("--to", "must not be before --from")
    upcoming = None if schedule.relative else schedule.next_after(now)
    if upcoming is not None and upcoming <= last:
        raise SpecError(
            "--to",
            f"{iso(last)} is after now ({iso(now)}): the range holds {iso(upcoming)}, a slot"
            " the schedule fires when its time comes. A backfill runs past slots only:"
            " give a --to at or before now",
        )
    pending = job.snapshot.tick_at  # past already when its tick is in flight or late
    if pending is not None and not schedule.relative and first <= pending <= last:
        raise SpecError(
            "--to",
            f"the range holds {iso(pending)}, the slot the schedule fires next (its tick"
            f" is due): give a --to before {iso(pending)}",
        )
    slots = slots_in(schedule, first, last)
    if slots and retention is not None:
        _refuse_pruned(conn, slots[0], now, retention)
    taken = run_store.slots_taken(conn, job.id, first, last) if slots else set()
    return BackfillReport(
        job.ref,
        slots=[s for s in slots if s not in taken],
        existing=[s for s in slots if s in taken],
    )


def _refuse_pruned(conn: Connection, slot: datetime, now: datetime, retention: timedelta) -> None:
    """A slot in a month that history retention drops (PostgreSQL) is refused: its run's
    record would go with the month (retention keeps a month until its runs have ended,
    then takes it, so the backfill would leave no trace but a day's counts)."""
    if not partitions.is_partitioned(conn):
        return  # SQLite's history is never pruned
    kept_from = partitions.month_start(now - retention)
    if slot < kept_from:
        days = retention.days
        raise SpecError(
            "--from",
            f"{iso(slot)} is in a month that history retention drops (CRONCHAIN_RETENTION="
            f"{days} days): its runs would leave no record. Backfill from {iso(kept_from)}"
            " on, or keep history longer",
        )


def create(
    host: Host,
    conn: Connection,
    job: JobRow,
    report: BackfillReport,
    *,
    max_concurrent: int,
    now: datetime,
) -> list[Message]:
    """Insert the report's slots as WAITING backfill runs and start up to
    ``max_concurrent`` of the job's waiting backfill runs."""
    if max_concurrent < 1:
        raise SpecError("--max-concurrent", "must be at least 1")
    with progress.stage(f"backfill {job.ref}", len(report.slots), "slots") as advance:
        for slot in report.slots:
            run_store.insert_invocation(
                conn,
                job.id,
                slot=slot,
                trigger_id=None,
                revision=job.revision,
                status="WAITING",
                now=now,
                backfill=True,
            )
            advance(1)
    in_flight = run_store.count_backfill(conn, job.id)
    messages = promote(host, conn, job, now, max_concurrent - in_flight)
    report.started = [m.invocation_id for m in messages if isinstance(m, SendStart)]
    return messages


def promote(
    host: Host, conn: Connection, job: JobRow, now: datetime, count: int = 1
) -> list[Message]:
    """Start the ``count`` earliest waiting backfill runs of ``job`` (a pooled job's
    through its pool, where they wait their turn and count as in flight). A job with
    ``requires`` checks each slot's upstreams as it comes to start, and a slot they do
    not allow is settled there and then by ``on_unmet`` (the next one takes its place):
    a backfill is of the past, whose upstream runs are there or not."""
    messages: list[Message] = []
    while count > 0:
        waiting = run_store.oldest_waiting(conn, job.id, backfill=True, limit=count)
        if not waiting:
            break
        for inv in waiting:
            columns, alerts, ended = (
                upstream.settle(conn, job, inv, now, waited=False)
                if "requires" in job.spec
                else ({}, [], None)
            )
            messages += alerts
            if ended is not None:
                run_store.update_invocation(conn, inv, **columns)
                messages += host.runs.finished(conn, job, inv, ended, now).messages
                continue
            text = debuglog.append(columns.pop("log", inv.log), now, "backfill: starting")
            columns |= {"log": text}
            messages += host.go_on(conn, job, inv, columns, now, upstream.REASON)
            count -= 1
    return messages
