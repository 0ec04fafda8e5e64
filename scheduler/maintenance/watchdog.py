"""The watchdog: keeps the promises written in ``jobs.watchdog_at`` and
``invocations.deadline`` when the message that should have kept them was lost
(Redis flushed, a worker killed, a crash between commit and send).

It re-emits the lost step with a new nonce, so the old message, should it still arrive,
is stale; the unique (job, slot) key means a repair can never fire a slot twice.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import Connection

from cronchain.scheduler.core.attempts import RUNNING
from cronchain.scheduler.core.effects import Message, SendRevoke, SendRun, SendStart
from cronchain.scheduler.core.engine import Core
from cronchain.scheduler.errors import TransientError
from cronchain.scheduler.invokers import Outcome
from cronchain.scheduler.maintenance.retention import run_once as retention_pass
from cronchain.scheduler.settings import history_retention
from cronchain.scheduler.spec.controls import controls_of
from cronchain.scheduler.storage import job_store, observed, revokes, run_store
from cronchain.scheduler.storage.db import write_transaction
from cronchain.scheduler.storage.models import REPAIRS
from cronchain.scheduler.storage.rows import InvocationRow, JobRow
from cronchain.statemachine import Reason, Repair

log = logging.getLogger("cronchain.watchdog")

BATCH = 500
# Parked ticks sent per statement: a wake is a row update and a share of a message, and
# a pass at a million hourly and daily jobs wakes about 7,000 (30 s of their slots).
WAKES = 5000


@dataclass(frozen=True)
class WatchdogReport:
    """What one pass repaired: ticks re-sent, starts re-sent, attempts ended (a lease or
    a timeout lapsed), attempts that no worker had claimed sent again, revokes sent
    again."""

    ticks: int = 0
    starts: int = 0
    expired: int = 0
    resent: int = 0
    revokes: int = 0
    # Runs that waited ``max_wait`` for their upstreams or gates, settled: not a repair.
    settled: int = 0
    # Gate checks asked again, their message lost.
    asked: int = 0
    # Parked ticks taken as their slots came within the horizon: sent, or parked again
    # if still past it. Not a repair.
    woken: int = 0

    @property
    def repairs(self) -> int:
        return self.ticks + self.starts + self.expired + self.resent + self.revokes

    def __add__(self, other: WatchdogReport) -> WatchdogReport:
        return WatchdogReport(
            self.ticks + other.ticks,
            self.starts + other.starts,
            self.expired + other.expired,
            self.resent + other.resent,
            self.revokes + other.revokes,
            self.settled + other.settled,
            self.asked + other.asked,
            self.woken + other.woken,
        )


def pass_for(engine: Core, interval: float, backlog: timedelta) -> WatchdogReport:
    """The pass of a watchdog run that waited ``backlog`` in the queue; each run may spend
    half an interval, so that runs do not pile up behind a slow database.

    Behind a queue deeper than an interval, a run only wakes parked ticks. Its repairs
    are the next run's, sent since, which knows better what is lost: this is the
    watchdog's backpressure, since resending late ticks with new nonces would double an
    overloaded worker's work. Wakes are not repairs, and nothing else sends parked
    ticks: skipped while a backlog lasts, every job of a long period would wait for it to
    drain while jobs of short periods went on ticking."""
    if backlog > timedelta(seconds=interval):
        _BEHIND.run(backlog, interval)
        return wake_all(engine, budget=interval / 2)
    _BEHIND.caught_up()
    return sweep(engine, budget=interval / 2, backlog=backlog)


class _Behind:
    """This process's runs behind a deep queue, said as the backlog begins, every ten
    minutes while it lasts, and as it ends: a worker back from a three-minute outage ran
    36 such runs one after the other, and a warning each told nothing the first had not.
    The control worker's processes take the runs in turns, so a process whose last run
    was behind the queue may not see that backlog end: a run behind it more than two
    intervals after the last begins another."""

    REPEAT = 600.0  # seconds between the warnings of one backlog

    def __init__(self) -> None:
        self.runs, self.most, self.last, self.said = 0, timedelta(0), 0.0, 0.0

    def run(self, backlog: timedelta, interval: float) -> None:
        now = time.monotonic()
        if self.runs and now - self.last > 2 * interval:
            self.caught_up()  # an earlier backlog, ended in another process
        self.runs += 1
        self.most, self.last = max(self.most, backlog), now
        if self.runs == 1 or now - self.said >= self.REPEAT:
            self.said = now
            log.warning(
                "the watchdog's run waited %.1f s in the queue, more than an interval: it"
                " sends the parked ticks due and leaves its repairs to the next run, as"
                " will the runs behind it until the queue has caught up (%s so far)",
                backlog.total_seconds(),
                self.runs,
            )

    def caught_up(self) -> None:
        if self.runs:
            log.warning(
                "the watchdog's queue has caught up: %s runs behind it (waits up to %.1f s)"
                " only sent parked ticks",
                self.runs,
                self.most.total_seconds(),
            )
        self.runs, self.most = 0, timedelta(0)


_BEHIND = _Behind()


def wake_all(engine: Core, budget: float) -> WatchdogReport:
    """Wakes (``wake``), a transaction each, until none is left or ``budget`` seconds
    are spent."""
    deadline = time.monotonic() + budget
    woken = 0
    while True:
        with engine.transaction() as conn:
            claimed, messages = wake(engine, conn, engine.clock())
        engine.send(messages)
        woken += claimed
        if claimed < WAKES or time.monotonic() >= deadline:
            return WatchdogReport(woken=woken)


def sweep(
    engine: Core,
    budget: float,
    limit: int = BATCH,
    backlog: timedelta = timedelta(0),
    retention: timedelta | None = None,
) -> WatchdogReport:
    """Passes of at most ``limit`` each until nothing lapsed is left or ``budget``
    seconds are spent: a mass loss (Redis flushed under 10,000 jobs) is then repaired by
    one watchdog run, not one batch per interval. Then the history's upkeep (partitions
    made ahead, expired months dropped: :mod:`scheduler.maintenance.retention`), which
    the watchdog's beat entry drives too; ``retention`` defaults to ``CRONCHAIN_RETENTION``."""
    deadline = time.monotonic() + budget
    total = WatchdogReport()
    while True:
        report = run_once(engine, limit, backlog)
        total += report
        most = max(
            report.ticks,
            report.starts,
            report.expired + report.resent,
            report.revokes,
            report.settled,
        )  # not ``asked``: those checks are taken by the work path, not by this pass
        full = most >= limit or report.woken >= WAKES
        if not full or time.monotonic() >= deadline:
            break
    record_pass(engine, total)
    keep_history(engine, retention or history_retention())
    return total


def record_pass(engine: Core, report: WatchdogReport) -> None:
    """The pass's time and repairs, for /metrics and the health check, which tell from
    it that beat and the watchdog still run; and the counters of exited backends folded
    (``observed.fold_counters``). A failure to write them (the database went away since
    the repairs) is logged: the repairs are done, and it is the next pass's."""
    repairs = {kind: getattr(report, kind) for kind in REPAIRS}
    try:
        with write_transaction(engine.db) as conn:
            observed.record_watchdog_pass(conn, engine.clock(), repairs)
            observed.fold_counters(conn)
    except Exception:
        log.exception("the watchdog's pass could not be recorded; the next pass tries again")


def keep_history(engine: Core, retention: timedelta) -> None:
    """The history pass must not stop the watchdog's: a failure is logged, and the next
    pass (30 s later by default, months before a partition is needed) tries again."""
    try:
        retention_pass(engine.db, engine.clock(), retention)
    except Exception:
        log.exception("history upkeep failed; the next watchdog pass tries again")


def run_once(engine: Core, limit: int = BATCH, backlog: timedelta = timedelta(0)) -> WatchdogReport:
    """One pass over what has lapsed, at most ``limit`` jobs and ``limit`` invocations,
    and over at most ``WAKES`` parked ticks due to be sent.

    ``backlog`` is how long this watchdog run waited in the queue. Ticks and starts wait
    in the same queue, so one whose deadline passed less than that long ago is taken
    for late rather than lost, and left alone: resent, it would be done twice, and under
    load the extra work would make every tick later still."""
    with engine.transaction() as conn:
        now = engine.clock()
        woken, messages = wake(engine, conn, now)
        jobs = job_store.claim_lapsed_jobs(conn, now - backlog, limit)
        for job in jobs:
            messages += engine.feed(conn, job, Repair(), now).messages
    with engine.transaction() as conn:
        now = engine.clock()
        # A start that never came is sent again; one UPDATE moves all their deadlines.
        starts = run_store.claim_lapsed_starts(conn, now - backlog, limit)
        run_store.extend_deadlines(conn, [inv.id for inv in starts], now + engine.repair_grace)
        messages += [SendStart(inv.id, inv.attempt + 1) for inv in starts]
        lapsed = run_store.lapsed(conn, "RUNNING", now, limit)
        holds = run_store.lapsed(conn, "WAITING", now, limit)
        # Revokes not sent yet: the send forgets each that goes out.
        due = revokes.claim_due(conn, now, limit, again_at=now + engine.grace)
        messages += [SendRevoke(task_id) for task_id in due]
    engine.send(messages)  # committed: sent before any sweeper may fail
    done: Counter[str] = Counter()
    for sweeper in engine.plugins.sweepers:  # the features' duties, each on its own
        try:
            counts, sent = sweeper.sweep(engine, now, limit, backlog)
        except TransientError:
            raise  # the database is gone: Celery retries the pass
        except Exception:
            log.exception("%s failed; the next pass tries again", type(sweeper).__name__)
            continue
        done.update(counts)
        engine.send(sent)
    # A lease (or timeout) that lapsed ends its attempt, an unclaimed one is sent again;
    # each locks its own job first.
    repaired = Counter(_repair_one(engine, inv_id) for inv_id in lapsed)
    repaired.update(_repair_one(engine, inv_id, settle_hold) for inv_id in holds)
    return WatchdogReport(
        ticks=len(jobs),
        starts=len(starts),
        expired=repaired["expired"],
        resent=repaired["resent"],
        revokes=len(due),
        settled=repaired["settled"],
        asked=done["asked"],
        woken=woken,
    )


def wake(
    engine: Core, conn: Connection, now: datetime, limit: int = WAKES
) -> tuple[int, list[Message]]:
    """The parked ticks whose slots have come within the horizon (``Stepper.settle_tick``
    parks them): how many were claimed, and their messages, to send once ``conn``'s
    transaction commits. One statement claims them, one moves their deadlines past their
    slots, as a sent tick's are, and the ticks go out as ``tick_batch`` messages of those
    due together. Each keeps the nonce it was parked with. Lost after the commit, they
    are repaired as any lost tick is. One still past the horizon is parked again."""
    moved: list[tuple[job_store.Parked, datetime]] = []
    messages: list[Message] = []
    for job in job_store.claim_parked_jobs(conn, now, limit):
        message, deadline = engine.stepper.wake(job.id, job.tick_at, job.tick_nonce, now)
        moved.append((job, deadline))
        messages += [message] if message is not None else []
    job_store.move_deadlines(conn, moved)
    return len(moved), messages


def _repair_one(
    engine: Core, invocation_id: int, repair: Callable[[Core, int], str | None] | None = None
) -> str | None:
    """One run that cannot be repaired must not stop the pass: it would come first in
    every pass (lapsed runs are taken oldest deadline first) and hold back all others."""
    try:
        return (repair or repair_run)(engine, invocation_id)
    except Exception:
        log.exception(
            "invocation %s could not be repaired; the next pass tries again", invocation_id
        )
        return None


def repair_run(engine: Core, invocation_id: int) -> str | None:
    """The watchdog's repair of a RUNNING attempt past its deadline: one that no
    worker has claimed is sent again under the same attempt number ("resent") until
    schedule-to-start runs out; a claimed one whose lease or timeout lapsed is ended
    ("expired"), and the retry policy applies. None: renewed or ended meanwhile."""

    def repair(conn: Connection, inv: InvocationRow, job: JobRow, now: datetime) -> Repaired:
        if inv.status != RUNNING or inv.deadline is None or inv.deadline >= now:
            return None
        outcome = _lapsed(inv, job, now)
        if outcome is None:
            return "resent", _resend(engine, conn, inv, job, now)
        return "expired", engine.runs.record_outcome(conn, inv, job, outcome, now).messages

    return _on_run(engine, invocation_id, repair)


def settle_hold(engine: Core, invocation_id: int) -> str | None:
    """A run held past its hold's deadline (``max_wait`` for its upstreams or its
    gates) goes on, or ends by ``on_unmet`` (the hold's ``lapse``). None: released or
    aborted meanwhile."""

    def settle(conn: Connection, inv: InvocationRow, job: JobRow, now: datetime) -> Repaired:
        hold = next((h for h in engine.plugins.holds if h.name == inv.reason), None)
        if hold is None or not inv.held or inv.deadline is None or inv.deadline >= now:
            return None
        return "settled", hold.lapse(engine, conn, inv, job, now).messages

    return _on_run(engine, invocation_id, settle)


# What a repair of one run did (its name) and what it sends; None: nothing to do.
Repaired = tuple[str, list[Message]] | None


def _on_run(
    engine: Core,
    invocation_id: int,
    act: Callable[[Connection, InvocationRow, JobRow, datetime], Repaired],
) -> str | None:
    """``act`` on a run and its job, both locked, in a transaction; then send."""
    with engine.transaction() as conn:
        locked = engine.lock(conn, invocation_id)
        done = None if locked is None else act(conn, *locked, engine.clock())
    if done is None:
        return None
    engine.send(done[1])
    return done[0]


def _resend(
    engine: Core, conn: Connection, inv: InvocationRow, job: JobRow, now: datetime
) -> list[Message]:
    """Send an unclaimed attempt again: its message may have been lost (Redis
    flushed), or may still wait behind others. Only one delivery can claim it, and
    each resend waits as long as it has waited so far, so that a queue with no
    consumer for an hour holds a dozen copies, not hundreds."""
    assert inv.started_at is not None  # a RUNNING row's CHECK
    waited = now - inv.started_at
    deadline = min(now + max(engine.grace, waited), _start_by(inv, job))  # then it ends
    run_store.update_invocation(conn, inv, deadline=deadline)
    where = f"queue {job.spec['celery']['queue']}" if job.kind == "celery" else "the work path"
    log.warning(
        "%s invocation %s attempt %s: no worker has claimed it in %.0f s; sent again."
        " Is a worker consuming %s?",
        job.ref,
        inv.id,
        inv.attempt,
        waited.total_seconds(),
        where,
    )
    return [SendRun(engine.attempts.call_of(job, inv, inv.attempt))]


def _lapsed(inv: InvocationRow, job: JobRow, now: datetime) -> Outcome | None:
    """How an attempt past its deadline ends, by the timeout that ran out; None for
    one that is still waiting to be claimed within its schedule-to-start."""
    controls = controls_of(job)
    if inv.worker is None:
        if _start_by(inv, job) > now:
            return None
        wait = controls.schedule_to_start
        return Outcome.failed(f"no worker claimed it within {wait}", Reason.SCHEDULE_TO_START)
    if inv.timeout_at is not None and inv.timeout_at <= now:
        return Outcome.failed(f"timed out after {controls.timeout}", Reason.TIMEOUT)
    return Outcome.failed("lease expired", Reason.LEASE_EXPIRED)


def _start_by(inv: InvocationRow, job: JobRow) -> datetime:
    """When an unclaimed attempt's schedule-to-start runs out. An attempt sent before
    cronchain had that timeout has no ``timeout_at``: it counts from when it was sent."""
    assert inv.started_at is not None  # a RUNNING row's CHECK
    return inv.timeout_at or inv.started_at + controls_of(job).schedule_to_start


def waited(expires: datetime | str | None, lifetime: float, now: datetime) -> timedelta:
    """How long a watchdog run waited in the queue, from the expiry its beat entry gives
    it: ``lifetime`` seconds after it was sent. Zero if it was sent without one."""
    if expires is None:
        return timedelta(0)
    if isinstance(expires, str):
        expires = datetime.fromisoformat(expires)
    if expires.tzinfo is None:  # Celery's are aware; cronchain's clock is UTC
        expires = expires.replace(tzinfo=UTC)
    sent = expires - timedelta(seconds=lifetime)
    return max(now - sent, timedelta(0))
