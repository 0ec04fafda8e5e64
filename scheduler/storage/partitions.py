"""PostgreSQL's ``invocations``: one partition per month of ``filed_at``, and a default.

Why the table has a ``filed_at`` column rather than being partitioned by ``slot``:
PostgreSQL's partition key must be part of every primary key and unique constraint, and
a key column NOT NULL, while ``slot`` is NULL for triggered runs. ``filed_at`` is the
slot, or a triggered run's creation time; a CHECK ties it to the slot. So

- the primary key is (id, filed_at): ids still come from one sequence, never reused;
- the unique (job_id, slot, filed_at) is the unique (job_id, slot) it stands for, since
  ``filed_at`` is the slot itself: a second insert of a slot meets the first in its
  partition and does nothing (ON CONFLICT), or fails;
- a trigger id has no such tie to a month (a retried trigger is made at another time),
  so its key lives in ``invocation_triggers``, an unpartitioned table keyed by (job_id,
  trigger_id). A BEFORE INSERT trigger on ``invocations`` claims the key there, in the
  insert's own statement; if it was taken, the row is not inserted, which is what
  ``INSERT ... ON CONFLICT DO NOTHING`` (every insert ``run_store`` makes) does with a
  duplicate: the caller sees no id. A concurrent insert of the same key waits for the
  first transaction and then does nothing, as a unique index would make it;
- ``revokes`` cannot reference (id) alone; an AFTER DELETE trigger deletes the revokes
  of a deleted run, as the foreign key's ON DELETE CASCADE did.

Partitions exist ahead of the slots that come due: ``db upgrade`` and every watchdog
pass make the current month and the next ``AHEAD`` (see :mod:`scheduler.maintenance.retention`).
The DEFAULT partition is the safety net for any other month: a backfill of slots older
than the oldest partition, or a month whose partition was not made in time (no
watchdog ran for a month). When the partition of a month is made, that month's rows in
the default move into it in the same transaction; rows in the default older than a
month that retention drops are dropped with it (after the rollup counts them).
SQLite's table is never partitioned.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Connection

PARENT = "invocations"
DEFAULT = "invocations_default"
AHEAD = 2  # months made ahead of the current one
# Long enough for the hot path's short transactions to finish, short enough that the
# statements queued behind a DDL's lock wait a moment, never a stall: a DDL that times
# out is tried again by the next pass.
LOCK_TIMEOUT = "2s"
_NAME = re.compile(r"invocations_p(\d{4})_(\d{2})")
DETACHED = "_detached"  # a month's table once ``detach`` took it out, until it is dropped
_DETACHED_NAME = re.compile(_NAME.pattern + DETACHED)


@dataclass(frozen=True)
class Month:
    """A month partition: its table and the range of ``filed_at`` it holds."""

    name: str
    start: datetime
    end: datetime


def month_start(t: datetime) -> datetime:
    t = t.astimezone(UTC)
    return datetime(t.year, t.month, 1, tzinfo=UTC)


def add_months(month: datetime, n: int) -> datetime:
    index = month.year * 12 + month.month - 1 + n
    return datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC)


def month_of(start: datetime) -> Month:
    return Month(f"invocations_p{start:%Y_%m}", start, add_months(start, 1))


def is_partitioned(conn: Connection) -> bool:
    if conn.dialect.name != "postgresql":
        return False
    query = "SELECT relkind FROM pg_class WHERE oid = to_regclass('invocations')"
    return conn.exec_driver_sql(query).scalar() == "p"


def months(conn: Connection) -> list[Month]:
    """The month partitions that exist, oldest first (catalog reads: no lock taken)."""
    query = (
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = to_regclass('invocations')"
    )
    found = []
    for name in conn.exec_driver_sql(query).scalars():
        match = _NAME.fullmatch(name)
        if match:
            found.append(month_of(datetime(int(match[1]), int(match[2]), 1, tzinfo=UTC)))
    return sorted(found, key=lambda m: m.start)


def missing(conn: Connection, first: datetime, last: datetime) -> list[Month]:
    """The months from ``first``'s to ``last``'s that have no partition yet."""
    have = {m.start for m in months(conn)}
    wanted, month = [], month_start(first)
    while month <= last:
        if month not in have:
            wanted.append(month_of(month))
        month = add_months(month, 1)
    return wanted


def limit_lock_waits(conn: Connection) -> None:
    """For the rest of the transaction, a lock not granted in ``LOCK_TIMEOUT`` fails the
    statement (a DDL of the parent waits for every transaction that uses it, and every
    statement that comes after waits behind it)."""
    conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")


def _lock_jobs_first(conn: Connection) -> None:
    """Making, attaching or detaching a partition locks ``jobs`` too (the partition's
    foreign key), after ``invocations``. A tick or an outcome group writes a job, then
    history: in that order, the two deadlocked (a test and bench.history_scale's probe
    did). So ``jobs`` is locked first, as they lock it: the DDL waits for them."""
    conn.exec_driver_sql("LOCK TABLE jobs IN SHARE ROW EXCLUSIVE MODE")


def create(conn: Connection, month: Month) -> int:
    """Make a month's partition; the rows of that month in the default move into it.
    Returns how many moved (almost always 0)."""
    _lock_jobs_first(conn)
    bounds = f"FOR VALUES FROM ('{month.start.isoformat()}') TO ('{month.end.isoformat()}')"
    within = f"filed_at >= '{month.start.isoformat()}' AND filed_at < '{month.end.isoformat()}'"
    has_default = conn.exec_driver_sql(f"SELECT to_regclass('{DEFAULT}')").scalar() is not None
    stranded = (
        has_default
        and conn.exec_driver_sql(f"SELECT EXISTS (SELECT 1 FROM {DEFAULT} WHERE {within})").scalar()
    )
    if not stranded:
        conn.exec_driver_sql(
            f"CREATE TABLE IF NOT EXISTS {month.name} PARTITION OF {PARENT} {bounds}"
        )
        return 0
    # Made apart, filled from the default, then attached: PostgreSQL refuses to make a
    # partition whose rows the default still holds.
    conn.exec_driver_sql(
        f"CREATE TABLE {month.name} (LIKE {PARENT} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
    )
    moved = conn.exec_driver_sql(
        f"WITH gone AS (DELETE FROM {DEFAULT} WHERE {within} RETURNING *)"
        f" INSERT INTO {month.name} SELECT * FROM gone"
    ).rowcount
    conn.exec_driver_sql(f"ALTER TABLE {PARENT} ATTACH PARTITION {month.name} {bounds}")
    return moved


def create_default(conn: Connection) -> None:
    conn.exec_driver_sql(f"CREATE TABLE IF NOT EXISTS {DEFAULT} PARTITION OF {PARENT} DEFAULT")


def forget_before(conn: Connection, month: Month) -> None:
    """Delete the rows of the default and the trigger keys filed before ``month``'s end
    (the rollup has counted them): rows, not the month's partition (``detach``)."""
    end = month.end.isoformat()
    conn.exec_driver_sql(f"DELETE FROM {DEFAULT} WHERE filed_at < '{end}'")
    conn.exec_driver_sql(f"DELETE FROM invocation_triggers WHERE filed_at < '{end}'")


# Runs that have not ended, of a month retention would take out: it keeps the month
# until they end. Each is found through a small partial index, never by reading the
# month: WAITING runs (``ix_invocations_waiting``), and STARTING and RUNNING ones by their
# deadline (``ix_invocations_deadline``: every one has one, which the watchdog's repairs
# of lost starts and lapsed leases rely on too). Before the rollup, over history (the
# oldest month and the default), each watchdog pass while the month is kept; and in the
# transaction that detaches the month, over its table, under the lock that holds up
# every tick, where a scan of the month would stall them all (so no scan is allowed).
_IN_FLIGHT = """
SELECT (SELECT count(*) FROM {table} WHERE status = 'WAITING'{within})
     + (SELECT count(*) FROM {table}
        WHERE deadline IS NOT NULL AND status IN ('STARTING', 'RUNNING'){within})
"""


def in_flight_before(conn: Connection, end: datetime) -> int:
    """How many runs filed before ``end`` are waiting or in flight."""
    query = _IN_FLIGHT.format(table=PARENT, within=" AND filed_at < %(end)s")
    return conn.exec_driver_sql(query, {"end": end}).scalar() or 0


def in_flight_in(conn: Connection, name: str) -> int:
    """How many runs of a month's table (detached, by ``detach``) have not ended."""
    _check_detached(name)
    conn.exec_driver_sql("SET LOCAL enable_seqscan = off")  # the indexes, never the month
    try:
        return conn.exec_driver_sql(_IN_FLIGHT.format(table=name, within="")).scalar() or 0
    finally:
        conn.exec_driver_sql("SET LOCAL enable_seqscan = on")


# Retention takes a month out in steps of their own transactions, each holding one hot
# table's lock for catalog changes alone (``scheduler.maintenance.retention``):
#
# - ``detach``: the partition out of history, renamed (``jobs``, then ``invocations``
#   locked: ``_lock_jobs_first``);
# - ``unlink``: its foreign keys dropped (``jobs`` locked, even against reads: dropping a
#   key locks the table it references);
# - ``drop_detached``: the table and its files, gigabytes for a busy month (nothing
#   anyone else uses is locked). At 30M rows the steps take about 1.2 s in all, almost
#   all of it removing files after the locks are let go; a tick-like probe waited at
#   most 28 ms, and 52 ms with every step in one transaction (bench.history_scale).
#
# Renamed, a table left detached by a pass that stopped cannot be taken for its month's
# partition, made again; the next pass finishes it.


def detach(conn: Connection, month: Month) -> str:
    """Take a month's partition out of history; returns the name it has now."""
    _lock_jobs_first(conn)
    conn.exec_driver_sql(f"ALTER TABLE {PARENT} DETACH PARTITION {month.name}")
    gone = month.name + DETACHED
    conn.exec_driver_sql(f"ALTER TABLE {month.name} RENAME TO {gone}")
    return gone


def unlink(conn: Connection, name: str) -> None:
    """Drop the foreign keys of a detached month's table."""
    _check_detached(name)
    keys = conn.exec_driver_sql(
        "SELECT conname FROM pg_constraint WHERE conrelid = %(t)s::regclass AND contype = 'f'",
        {"t": name},
    ).scalars()
    quote = conn.dialect.identifier_preparer.quote
    for key in list(keys):
        conn.exec_driver_sql(f"ALTER TABLE {name} DROP CONSTRAINT {quote(key)}")


def drop_detached(conn: Connection, name: str) -> None:
    """Drop a detached month's table, ``unlink``ed, its rows and files with it."""
    _check_detached(name)
    conn.exec_driver_sql(f"DROP TABLE IF EXISTS {name}")


def detached(conn: Connection) -> list[str]:
    """The month tables detached and not dropped yet (catalog reads: no lock taken)."""
    query = (
        "SELECT relname FROM pg_class"
        " WHERE relkind = 'r' AND relnamespace = current_schema()::regnamespace"
        " AND relname ~ '^invocations_p[0-9]{4}_[0-9]{2}_detached$'"
    )
    return sorted(conn.exec_driver_sql(query).scalars())


def _check_detached(name: str) -> None:
    if not _DETACHED_NAME.fullmatch(name):
        raise ValueError(f"not a detached month: {name!r}")


# The keys and the cascade that the partitioned table cannot hold (see the docstring).
KEYS_DDL = (
    """
    CREATE TABLE invocation_triggers (
        job_id INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
        trigger_id VARCHAR(64) NOT NULL,
        filed_at TIMESTAMPTZ NOT NULL,
        CONSTRAINT pk_invocation_triggers PRIMARY KEY (job_id, trigger_id)
    )
    """,
    """
    CREATE FUNCTION invocations_claim_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.trigger_id IS NULL THEN
            RETURN NEW;
        END IF;
        INSERT INTO invocation_triggers (job_id, trigger_id, filed_at)
        VALUES (NEW.job_id, NEW.trigger_id, NEW.filed_at) ON CONFLICT DO NOTHING;
        IF FOUND THEN
            RETURN NEW;
        END IF;
        RETURN NULL;  -- the trigger id has its run: this row is not inserted
    END $$
    """,
    """
    CREATE TRIGGER claim_trigger BEFORE INSERT ON invocations
    FOR EACH ROW EXECUTE FUNCTION invocations_claim_trigger()
    """,
    """
    CREATE FUNCTION invocations_forget_revokes() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        DELETE FROM revokes WHERE invocation_id = OLD.id;
        RETURN NULL;
    END $$
    """,
    """
    CREATE TRIGGER forget_revokes AFTER DELETE ON invocations
    FOR EACH ROW EXECUTE FUNCTION invocations_forget_revokes()
    """,
)
DROP_KEYS_DDL = (
    "DROP TRIGGER IF EXISTS forget_revokes ON invocations",
    "DROP TRIGGER IF EXISTS claim_trigger ON invocations",
    "DROP FUNCTION IF EXISTS invocations_forget_revokes()",
    "DROP FUNCTION IF EXISTS invocations_claim_trigger()",
    "DROP TABLE IF EXISTS invocation_triggers",
)
