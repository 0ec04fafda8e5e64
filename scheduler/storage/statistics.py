"""The planner's statistics of the hot tables, where autovacuum has given none.

The hot path's statements read a few rows by key, and join them to their jobs; with no
statistics PostgreSQL cannot tell that a key names one row, and plans hash joins over
every job instead (measured: a worker's claim of five runs took 9 ms rather than 0.1 ms,
and the database's CPU doubled). Autovacuum analyzes a table soon after it fills, but a
server may run without it (this project's CI machine does), and a month's partition is
new each month. So the watchdog's history pass analyzes ``jobs`` and each month of
``invocations`` that holds rows and has never been analyzed, once: the shape of the data
(ids unique, a job's many runs) is what the plans need, and it does not change as the
tables grow; the planner scales the counts to the tables' sizes itself.
"""

from __future__ import annotations

from sqlalchemy import Connection, text

# Enough rows for the sample to show the data's shape; fewer, and a plan hardly matters.
ROWS = 1000
_NEVER_ANALYZED = text(
    "SELECT relname FROM pg_stat_user_tables"
    " WHERE schemaname = current_schema()"
    " AND (relname = 'jobs' OR relname ~ '^invocations_(p\\d{4}_\\d{2}|default)$')"
    " AND last_analyze IS NULL AND last_autoanalyze IS NULL AND n_live_tup >= :rows"
    " ORDER BY relname"
)


def never_analyzed(conn: Connection, rows: int = ROWS) -> list[str]:
    """The hot tables that hold at least ``rows`` rows and have no statistics."""
    return list(conn.execute(_NEVER_ANALYZED, {"rows": rows}).scalars())


def analyze(conn: Connection, tables: list[str]) -> None:
    """ANALYZE each of ``tables`` (names ``never_analyzed`` read from the catalog). It
    takes a lock that reads and writes do not wait for."""
    for table in tables:
        conn.exec_driver_sql(f'ANALYZE "{table}"')
