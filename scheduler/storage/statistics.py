"""The planner's statistics of cronchain's tables, where autovacuum has given none.

The hot path's statements read a few rows by key and join them to their jobs. With no
statistics PostgreSQL cannot tell that a key names one row, and plans hash joins over
every job instead (measured: a worker's claim of five runs took 9 ms rather than 0.1 ms,
and the database's CPU doubled). Autovacuum analyzes a table soon after it fills, but a
server may run without it (this project's CI machine does), a month's partition is new
each month, and ``pg_upgrade`` leaves every table without statistics. So the watchdog's
history pass analyzes each of cronchain's tables that holds rows and has no statistics
(again once its rows are in, if an ANALYZE found every row still being inserted, which
records the table as empty: the planner then takes it for one row however it grows).
Once is enough for the shape of those plans (ids unique, a job's many runs), which
does not change as the tables grow: the planner scales the counts to the tables' sizes
itself. It is not enough for estimates of ranges of time, which go stale: a
deployment still wants autovacuum (or a periodic ANALYZE).

Statistics do not settle the batches' plans, though: ``keyed`` does.
"""

from __future__ import annotations

from sqlalchemy import Connection, text

from cronchain.scheduler.storage.models import metadata

# Enough for a sample to show the data's shape (several hundred rows); below it, the
# plan hardly matters.
BYTES = 128 * 1024
# cronchain's tables and months (not a month retention is dropping, ``..._detached``),
# that this user may analyze (it owns them), holding ``bytes`` and without statistics:
# never analyzed, or analyzed with no live row and holding live rows since (an ANALYZE
# that found every row still being inserted). One whose rows are all dead (``revokes``
# emptied) is left alone: analyzing it again would find none either.
_WITHOUT = text(
    "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
    " LEFT JOIN pg_stat_user_tables a ON a.relid = c.oid"
    " WHERE n.nspname = current_schema() AND c.relkind = 'r'"
    " AND (c.relname = ANY(:names) OR c.relname ~ '^invocations_(p[0-9]{4}_[0-9]{2}|default)$')"
    " AND pg_has_role(c.relowner, 'USAGE')"
    " AND pg_relation_size(c.oid) >= :bytes"
    " AND NOT EXISTS (SELECT 1 FROM pg_stats s"
    " WHERE s.schemaname = n.nspname AND s.tablename = c.relname)"
    " AND (c.reltuples < 0 OR a.n_live_tup > 0)"
    " ORDER BY c.relname"
)
# A table busy with DDL is left to the next pass (``pg_relation_size`` and ANALYZE take
# locks that DDL holds off).
_LOCK_TIMEOUT = "2s"


def without(conn: Connection, size: int = BYTES) -> list[str]:
    """cronchain's tables that hold at least ``size`` bytes and have no statistics."""
    conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{_LOCK_TIMEOUT}'")
    names = sorted(metadata.tables)
    return list(conn.execute(_WITHOUT, {"bytes": size, "names": names}).scalars())


def analyze(conn: Connection, table: str) -> None:
    """ANALYZE ``table`` (a name ``without`` read from the catalog) in a transaction of
    its own; its lock is one that reads and writes do not wait for."""
    conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{_LOCK_TIMEOUT}'")
    conn.exec_driver_sql(f'ANALYZE "{table}"')


# ``keyed``: one statement (a round trip) for the three settings, for this transaction.
_KEYED = text(
    "SELECT set_config('enable_seqscan', 'off', true),"
    " set_config('enable_hashjoin', 'off', true),"
    " set_config('enable_mergejoin', 'off', true)"
)


def keyed(conn: Connection, rows: int) -> None:
    """Plan the rest of this transaction's statements as lookups by key: those of a
    batch (a tick batch's, a claim's, an outcome group's) of ``rows`` rows, which read
    and write each by its primary key, in tables of any size.

    Left to its costs, PostgreSQL weighs each index probe at four page reads
    (``random_page_cost``) and reads a table whole (a hash join) up to tens of
    thousands of rows: the month's runs, every job, for each batch of a hundred, fresh
    statistics or not (``test_batch_plans`` analyzes first). Those pages are all in
    memory; the whole read cost each batch more than its own rows did. A month's
    partition is empty at its start, and a herd fills it faster than any ANALYZE.

    The settings penalize a scan or a join by hashing or merging rather than forbid
    it: a statement with no index to use still runs. They end with the transaction;
    a plan made under them need not. PostgreSQL keeps a trigger function's plans for
    the session, and a prepared statement's generic plan, with the settings they were
    first made under, keyed or not: here they are the same statements on the same keys
    either way. One row is a lone statement's, by key already: no round trip for it.
    SQLite plans by rules: nothing to do."""
    if rows > 1 and conn.dialect.name == "postgresql":
        conn.execute(_KEYED)
