"""History upkeep on PostgreSQL: partitions made ahead, expired months dropped whole.

A pass runs beside each watchdog sweep (``scheduler.maintenance.watchdog.sweep``) and at
``db upgrade``. It first reads the catalog (no lock): most passes find the months they
need and nothing expired, and stop there. Otherwise, under a transaction-scoped advisory
lock that a second beat's pass does not wait for (it skips), it

- makes the current month's partition and the next ``partitions.AHEAD``, so that a slot
  never comes due without its partition (the DEFAULT partition catches any that did);
- takes the oldest month older than ``CRONCHAIN_RETENTION`` (one a pass: bounded work)
  whose runs have all ended (a month that holds a run still waiting or in flight, a
  backfill's, is kept until they end: its outcome must have a row to land on), writes
  its per-job daily rollup (``invocation_days``) in one transaction, with the
  default's few rows of that age (rows are never deleted one by one otherwise), then
  takes the partition out in steps that each lock one hot table for catalog changes
  alone (``partitions.detach``, ``unlink``, ``drop_detached``). A step that cannot get
  its lock within ``partitions.LOCK_TIMEOUT`` is left to the next pass, which writes
  the rollup again from the month's runs (``history_days``), and a table left detached
  is finished first. The detach looks for runs not ended once more, under its lock, and
  is undone if one was filed in the month since the first look.

Last, outside that lock, it analyzes each of cronchain's tables that holds rows and has
no statistics (``statistics``: a server without autovacuum, a month's new partition).

SQLite's history is not partitioned and never pruned: every pass returns at once.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import OperationalError

from cronchain.scheduler.storage import history_days, partitions, statistics
from cronchain.scheduler.storage.db import first_line, write_transaction

log = logging.getLogger("cronchain.retention")

# pg_try_advisory_xact_lock's key: one history pass at a time, whatever the beats.
LOCK_KEY = 0x63726F6E68  # "cronh"


@dataclass(frozen=True)
class HistoryReport:
    """What one pass did: partitions made (and rows they took from the default), the
    month dropped and the (job, day) rows of its rollup, the tables analyzed; ``busy``:
    another pass held the lock, or a lock wait timed out (the next pass does it);
    ``kept``: the expired month kept because runs of it have not ended."""

    created: tuple[str, ...] = ()
    moved: int = 0
    dropped: str | None = None
    rolled_up: int = 0
    busy: bool = False
    analyzed: tuple[str, ...] = ()
    kept: str | None = None


def run_once(db: Engine, now: datetime, retention: timedelta) -> HistoryReport:
    """One pass (see the module's docstring)."""
    with db.connect() as conn:
        if not partitions.is_partitioned(conn):
            return HistoryReport()
        wanted = _missing(conn, now)
        expired = _expired(conn, now, retention)
        left = partitions.detached(conn)
        conn.rollback()
    report = HistoryReport()
    try:
        if wanted:
            report = _create(db, now)
        if left:  # a pass stopped part way: finished first, so that its name is free
            _finish_detached(db)
        if expired:
            report = _detach_oldest(db, now, retention, report)
            _finish_detached(db)
    except OperationalError as err:  # a lock wait timed out: the next pass tries again
        log.warning("history upkeep postponed: %s", str(err.orig or err).strip())
        report = replace(report, busy=True)
    return replace(report, analyzed=_analyze(db))


def ensure_partitions(db: Engine, now: datetime) -> HistoryReport:
    """The months a slot may come due in, made if missing (``db upgrade``)."""
    with db.connect() as conn:
        if not partitions.is_partitioned(conn):
            return HistoryReport()
    return _create(db, now)


def _analyze(db: Engine) -> tuple[str, ...]:
    """Analyze each of cronchain's tables that has no statistics (``statistics``); one
    that fails (a lock wait timed out) is left to the next pass. Nothing it meets stops
    the pass. A table is not remembered as done: an ANALYZE counts no row another
    transaction is still inserting, and a month caught with all its rows so stays
    without statistics, recorded as empty (which the planner takes for one row however
    it grows) until a pass analyzes it again."""
    try:
        with write_transaction(db) as conn:
            tables = statistics.without(conn)
    except Exception as err:
        log.warning("could not look for tables without statistics: %s", first_line(err))
        return ()
    done = []
    for table in tables:
        try:
            with write_transaction(db) as conn:
                statistics.analyze(conn, table)
        except Exception as err:
            log.warning("could not analyze %s: %s", table, first_line(err))
            continue
        done.append(table)
    if done:
        log.warning("analyzed %s: they had no statistics (is autovacuum off?)", ", ".join(done))
    return tuple(done)


def _missing(conn: Connection, now: datetime) -> list[partitions.Month]:
    last = partitions.add_months(partitions.month_start(now), partitions.AHEAD)
    return partitions.missing(conn, now, last)


def _expired(conn: Connection, now: datetime, retention: timedelta) -> list[partitions.Month]:
    return [m for m in partitions.months(conn) if m.end <= now - retention]


def _locked(conn: Connection) -> bool:
    query = f"SELECT pg_try_advisory_xact_lock({LOCK_KEY})"
    if not conn.exec_driver_sql(query).scalar():
        return False
    partitions.limit_lock_waits(conn)
    return True


def _create(db: Engine, now: datetime) -> HistoryReport:
    with write_transaction(db) as conn:
        if not _locked(conn):
            return HistoryReport(busy=True)
        made = _missing(conn, now)  # again, under the lock
        moved = sum(partitions.create(conn, month) for month in made)
    if made:
        log.warning("made history partitions %s", ", ".join(m.name for m in made))
    return HistoryReport(created=tuple(m.name for m in made), moved=moved)


def _detach_oldest(
    db: Engine, now: datetime, retention: timedelta, report: HistoryReport
) -> HistoryReport:
    with write_transaction(db) as conn:
        if not _locked(conn):
            return HistoryReport(report.created, report.moved, busy=True)
        expired = _expired(conn, now, retention)
        if not expired:
            return report
        oldest = expired[0]
        in_flight = partitions.in_flight_before(conn, oldest.end)
        if in_flight:
            return _kept(report, oldest, in_flight)
        days = history_days.roll_up(conn, oldest.end)
        partitions.forget_before(conn, oldest)
    try:
        with write_transaction(db) as conn:
            if not _locked(conn):
                return HistoryReport(report.created, report.moved, None, days, busy=True)
            if oldest not in partitions.months(conn):  # another pass took it meanwhile
                return HistoryReport(report.created, report.moved, None, days)
            if oldest.name + partitions.DETACHED in partitions.detached(conn):  # unfinished
                return HistoryReport(report.created, report.moved, None, days, busy=True)
            gone = partitions.detach(conn, oldest)
            filed_since = partitions.in_flight_in(conn, gone)
            if filed_since:  # the detach is undone; the next pass rolls the month up again
                raise _InFlight(filed_since)
    except _InFlight as found:
        return _kept(report, oldest, found.args[0])
    log.warning("took %s out of history (%s job-days rolled up)", oldest.name, days)
    return HistoryReport(report.created, report.moved, oldest.name, days)


class _InFlight(Exception):
    """Runs not ended were filed in the month being taken out: its detach is undone."""


KEPT_LOG_EVERY = 3600.0  # seconds between two warnings that a month is kept
_kept_logged: dict[str, float] = {}  # month -> when this process last said so (monotonic)


def _kept(report: HistoryReport, month: partitions.Month, in_flight: int) -> HistoryReport:
    """A month past its retention kept for its runs: said once an hour, as a warning,
    since a run that never ends (one held in a pool of size 0) keeps every later month
    too, until someone ends it (``cronchain abort``)."""
    now = time.monotonic()
    if now - _kept_logged.get(month.name, -KEPT_LOG_EVERY) >= KEPT_LOG_EVERY:
        _kept_logged[month.name] = now
        log.warning(
            "kept %s past its retention: %s of its runs are still waiting or in flight;"
            " it is taken out once they have ended, and no later month before it",
            month.name,
            in_flight,
        )
    return replace(report, kept=month.name)


def _finish_detached(db: Engine) -> None:
    """Unlink, then drop, each table a detach left (one transaction a step: see
    ``scheduler.storage.partitions``)."""
    with db.connect() as conn:
        names = partitions.detached(conn)
    for name in names:
        for step in (partitions.unlink, partitions.drop_detached):
            with write_transaction(db) as conn:
                if not _locked(conn):
                    return
                if name in partitions.detached(conn):
                    step(conn, name)
        log.warning("dropped %s", name)
