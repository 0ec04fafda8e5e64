"""The queries behind ``/metrics``, ``/healthz`` and ``cronchain health``, and the
watchdog's record of its passes.

They run at every scrape, on a database whose ``invocations`` may hold months of runs:
each reads the ``jobs`` registry or an index, never the history. Runs waiting are read
from a partial index of the WAITING rows alone (``ix_invocations_waiting``), overdue
ticks from ``ix_jobs_tick_at``, a job's last success from its own row (a trigger keeps
``jobs.last_success_at``: migration 0007).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Connection, case, func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from cronchain.scheduler.storage.models import (
    FIRE_LAG_BUCKETS,
    REPAIRS,
    fire_lags,
    invocations,
    jobs,
    slot_outcomes,
    watchdog,
)
from cronchain.statemachine import Reason


@dataclass(frozen=True)
class WatchdogPasses:
    """The watchdog's newest pass (None: it never passed) and its repairs so far."""

    passed_at: datetime | None
    repairs: Mapping[str, int]


@dataclass(frozen=True)
class FireLags:
    """The fire-lag histogram: runs claimed with a lag at most each bound (cumulative,
    ``FIRE_LAG_BUCKETS`` then "+Inf"), and the lags' sum in seconds."""

    buckets: list[tuple[str, int]]
    seconds: float

    @property
    def count(self) -> int:
        return self.buckets[-1][1]


@dataclass(frozen=True)
class Overdue:
    """Ticks whose slot is past its grace: how many, and the oldest slot among them."""

    count: int
    oldest: datetime | None


def _epoch(conn: Connection, column: ColumnElement[Any]) -> ColumnElement[float]:
    """A time column as seconds since the epoch, computed by the database: a scrape of
    10,000 jobs then builds no datetime objects."""
    if conn.dialect.name == "postgresql":
        return func.date_part("epoch", column)  # double precision (extract: numeric)
    # julianday's double holds about 50 us at today's dates: rounded to the millisecond.
    return func.round((func.julianday(column) - 2440587.5) * 86400.0, 3)


# A job as /metrics shows it: project, name, state, next tick, last success, last failure,
# failures, runs timed and their seconds (times in seconds since the epoch).
JobSeries = tuple[str, str, str, float | None, float | None, float | None, int, int, float]


def job_series(conn: Connection) -> list[JobSeries]:
    """Every job as /metrics shows it (``JobSeries``). One read of ``jobs``, the
    registry: the trigger of migration 0014 keeps the counts on each job's row."""
    query = select(
        jobs.c.project,
        jobs.c.name,
        jobs.c.state,
        _epoch(conn, jobs.c.tick_at),
        _epoch(conn, jobs.c.last_success_at),
        _epoch(conn, jobs.c.last_failure_at),
        jobs.c.failures,
        jobs.c.runs_timed,
        jobs.c.run_seconds,
    ).order_by(jobs.c.project, jobs.c.name)
    return [tuple(row) for row in conn.execute(query).all()]  # type: ignore[misc]


def jobs_by_state(conn: Connection) -> dict[str, int]:
    """How many jobs are in each state (what /metrics reports without per-job series)."""
    query = select(jobs.c.state, func.count()).group_by(jobs.c.state)
    return dict(conn.execute(query).all())  # type: ignore[arg-type]


def overdue_ticks(conn: Connection, cut: datetime) -> Overdue:
    """Pending ticks whose slot is before ``cut`` (now less the grace), from the index
    on ``jobs.tick_at``. Paused and disabled jobs have no tick: they are never overdue."""
    query = select(func.count(), func.min(jobs.c.tick_at)).where(jobs.c.tick_at < cut)
    count, oldest = conn.execute(query).one()
    return Overdue(count, oldest)


# A WAITING run's reason: the one recorded on it (``upstream``, ``pool``), else what made
# it wait: a backfill, or the job's overlap policy and catch-up, which both buffer it.
WAITING_REASON = func.coalesce(
    invocations.c.reason,
    case((invocations.c.backfill, Reason.BACKFILL.value), else_=Reason.BUFFERED.value),
)
_WAITING = (
    select(WAITING_REASON.label("reason"), func.count())
    .where(invocations.c.status == "WAITING")
    .group_by(WAITING_REASON)
)


def waiting_by_reason(conn: Connection) -> dict[str, int]:
    """Runs WAITING, counted by reason, from the partial index of WAITING rows."""
    return {reason: count for reason, count in conn.execute(_WAITING)}


def watchdog_passes(conn: Connection) -> WatchdogPasses:
    row = conn.execute(select(watchdog).where(watchdog.c.id == 1)).first()
    if row is None:
        return WatchdogPasses(None, dict.fromkeys(REPAIRS, 0))
    return WatchdogPasses(row.passed_at, {kind: row._mapping[kind] for kind in REPAIRS})


def record_watchdog_pass(conn: Connection, now: datetime, repairs: Mapping[str, int]) -> None:
    """The pass at ``now`` and its repairs, added to the counts: one upsert of one row
    (two beats' passes both land on it; the later time wins)."""
    insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    counts = {kind: repairs.get(kind, 0) for kind in REPAIRS}
    statement = insert(watchdog).values(id=1, passed_at=now, **counts)
    later = case(
        (watchdog.c.passed_at > statement.excluded.passed_at, watchdog.c.passed_at),
        else_=statement.excluded.passed_at,
    )
    added = {kind: watchdog.c[kind] + statement.excluded[kind] for kind in REPAIRS}
    conn.execute(
        statement.on_conflict_do_update(index_elements=["id"], set_={"passed_at": later, **added})
    )


def slots_by_outcome(conn: Connection) -> dict[tuple[str, str], int]:
    """Runs ended so far, by (status, reason), from the counters the triggers of
    migration 0008 keep: a few rows per backend, never the history."""
    query = select(slot_outcomes.c.status, slot_outcomes.c.reason, func.sum(slot_outcomes.c.count))
    grouped = query.group_by(slot_outcomes.c.status, slot_outcomes.c.reason)
    return {(status, reason): int(count) for status, reason, count in conn.execute(grouped)}


def fire_lag_histogram(conn: Connection) -> FireLags:
    """The fire-lag histogram from the counters the triggers of migration 0008 keep."""
    query = select(fire_lags.c.le, func.sum(fire_lags.c.count), func.sum(fire_lags.c.seconds))
    found = {le: (int(n), float(s)) for le, n, s in conn.execute(query.group_by(fire_lags.c.le))}
    buckets, running = [], 0
    for le in (*FIRE_LAG_BUCKETS, "+Inf"):
        running += found.get(le, (0, 0.0))[0]
        buckets.append((le, running))
    return FireLags(buckets, sum(seconds for _, seconds in found.values()))


# Counter rows of PostgreSQL backends that have exited, folded into shard 0 (no backend
# has process id 0), so that the tables stay as small as the live backends make them.
_FOLD = """
WITH gone AS (
    DELETE FROM {table} WHERE shard <> 0
    AND shard NOT IN (SELECT pid FROM pg_stat_activity WHERE pid IS NOT NULL)
    RETURNING {keys}, {values}
)
INSERT INTO {table} AS t ({keys}, shard, {values})
SELECT {keys}, 0, {sums} FROM gone GROUP BY {keys}
ON CONFLICT ({keys}, shard) DO UPDATE SET {added}
"""
_COUNTERS = {
    "slot_outcomes": (("status", "reason"), ("count",)),
    "fire_lags": (("le",), ("count", "seconds")),
}


def fold_counters(conn: Connection) -> None:
    """Fold the counter rows of exited backends into shard 0 (PostgreSQL; SQLite counts
    in shard 0 alone). A backend that starts meanwhile with a folded row's process id
    writes a row anew, or its update is folded too: no count is lost or counted twice."""
    if conn.dialect.name != "postgresql":
        return
    for table, (keys, values) in _COUNTERS.items():
        conn.exec_driver_sql(
            _FOLD.format(
                table=table,
                keys=", ".join(keys),
                values=", ".join(values),
                sums=", ".join(f"sum({v})" for v in values),
                added=", ".join(f"{v} = t.{v} + excluded.{v}" for v in values),
            )
        )
