"""Named queries of ``invocation_days``: each job's day of runs, kept when retention
drops the month that held them (see :data:`scheduler.storage.models.invocation_days`)."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from sqlalchemy import Connection, select

from cronchain.scheduler.storage import partitions
from cronchain.scheduler.storage.models import invocation_days

# One statement over the runs filed before ``end`` (a month's partition and what the
# default holds from before it): counts by status and by status/reason, and the lag of
# the runs of a slot that started. A day rolled up already is written again from the runs
# there now: a pass that is repeated (its drop failed, two beats, a detach undone because
# a run was filed in the month meanwhile) writes what the month holds when it is dropped.
# The month's days are its own (UTC days, UTC months): a day of the default's older rows,
# deleted by an earlier pass, finds no run here and keeps its row.
_ROLL_UP = """
WITH runs AS (
    SELECT job_id, (filed_at AT TIME ZONE 'UTC')::date AS day, status, reason,
           EXTRACT(EPOCH FROM started_at - slot) AS lag
    FROM invocations WHERE filed_at < %(end)s
), by_status AS (
    SELECT job_id, day, jsonb_object_agg(status, n) AS statuses
    FROM (SELECT job_id, day, status, count(*) AS n FROM runs GROUP BY 1, 2, 3) s
    GROUP BY 1, 2
), by_reason AS (
    SELECT job_id, day, jsonb_object_agg(status || '/' || reason, n) AS reasons
    FROM (SELECT job_id, day, status, reason, count(*) AS n FROM runs
          WHERE reason IS NOT NULL GROUP BY 1, 2, 3, 4) r
    GROUP BY 1, 2
), lags AS (
    SELECT job_id, day, count(*) AS runs,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY lag) AS p50,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY lag) AS p95,
           percentile_cont(0.99) WITHIN GROUP (ORDER BY lag) AS p99
    FROM runs GROUP BY 1, 2
)
INSERT INTO invocation_days (job_id, day, runs, statuses, reasons, lag_p50, lag_p95, lag_p99)
SELECT l.job_id, l.day, l.runs, s.statuses, COALESCE(r.reasons, '{}'::jsonb), l.p50, l.p95,
       l.p99
FROM lags l JOIN by_status s USING (job_id, day) LEFT JOIN by_reason r USING (job_id, day)
ON CONFLICT (job_id, day) DO UPDATE SET (runs, statuses, reasons, lag_p50, lag_p95, lag_p99) =
    (EXCLUDED.runs, EXCLUDED.statuses, EXCLUDED.reasons, EXCLUDED.lag_p50, EXCLUDED.lag_p95,
     EXCLUDED.lag_p99)
"""


def roll_up(conn: Connection, end: datetime) -> int:
    """Write the days of the runs filed before ``end`` (PostgreSQL: retention drops the
    older months first, so these are the oldest month's and the default's older rows);
    returns the (job, day) rows written."""
    return conn.exec_driver_sql(_ROLL_UP, {"end": end}).rowcount


def pruned_before(conn: Connection) -> datetime | None:
    """Where the records that retention left begin: the oldest month partition's start,
    once retention has dropped any (it drops whole months, oldest first, and rolls each
    up before). None: nothing was ever pruned (SQLite: never)."""
    if not partitions.is_partitioned(conn):
        return None
    if conn.execute(select(invocation_days.c.day).limit(1)).first() is None:
        return None
    kept = partitions.months(conn)
    return kept[0].start if kept else None


def day_of(conn: Connection, job_id: int, day: date) -> dict[str, Any] | None:
    """A job's rolled-up day; None if it had no run that day."""
    query = select(invocation_days).where(
        invocation_days.c.job_id == job_id, invocation_days.c.day == day
    )
    row = conn.execute(query).first()
    return None if row is None else dict(row._mapping)
