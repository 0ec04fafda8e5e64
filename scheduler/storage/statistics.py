"""The planner's statistics of cronchain's tables, where autovacuum has given none.

The hot path's statements read a few rows by key and join them to their jobs. With no
statistics PostgreSQL cannot tell that a key names one row, and plans hash joins over
every job instead (measured: a worker's claim of five runs took 9 ms rather than 0.1 ms,
and the database's CPU doubled). Autovacuum analyzes a table soon after it fills, but a
server may run without it (this project's CI machine does), a month's partition is new
each month, and ``pg_upgrade`` leaves every table without statistics. So the watchdog's
history pass analyzes each table of the schema that holds rows and has no statistics,
once. That is enough for the shape of those plans (ids unique, a job's many runs),
which does not change as the tables grow: the planner scales the counts to the tables'
sizes itself. It is not enough for estimates of ranges of time, which go stale: a
deployment still wants autovacuum (or a periodic ANALYZE).
"""

from __future__ import annotations

from sqlalchemy import Connection, text

# Enough for a sample to show the data's shape (several hundred rows); below it, the
# plan hardly matters.
BYTES = 128 * 1024
_WITHOUT = text(
    "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
    " WHERE n.nspname = current_schema() AND c.relkind = 'r'"
    " AND c.relname NOT LIKE '%\\_detached'"  # a month retention is dropping
    " AND pg_relation_size(c.oid) >= :bytes"
    " AND NOT EXISTS (SELECT 1 FROM pg_stats s"
    " WHERE s.schemaname = n.nspname AND s.tablename = c.relname)"
    " ORDER BY c.relname"
)
_LOCK_TIMEOUT = "2s"  # a table busy with DDL is left to the next pass


def without(conn: Connection, size: int = BYTES) -> list[str]:
    """The tables of the schema that hold at least ``size`` bytes and have no
    statistics."""
    return list(conn.execute(_WITHOUT, {"bytes": size}).scalars())


def analyze(conn: Connection, table: str) -> None:
    """ANALYZE ``table`` (a name ``without`` read from the catalog) in a transaction of
    its own; its lock is one that reads and writes do not wait for."""
    conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{_LOCK_TIMEOUT}'")
    conn.exec_driver_sql(f'ANALYZE "{table}"')
