"""Many rows in a few statements: COPY on PostgreSQL, executemany on SQLite and for few.

On psycopg 3, a multi-row ``INSERT ... VALUES`` of 100,000 job rows (SQLAlchemy's
insertmanyvalues) took 57 s, most of it psycopg parsing the placeholders of each
26,000-parameter statement, and an executemany costs a round trip in a pipeline per
row (30 us). COPY takes the same rows in about a second. Each value goes through its
column type's own bind processing first (aware UTC datetimes, JSON), so the rows are
the ones an INSERT or UPDATE of SQLAlchemy's would write. SQLite is in-process: its
executemany is quick already.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy import Connection, Table, and_, bindparam
from sqlalchemy.dialects import postgresql

# Fewer rows go as plain statements (an executemany): an apply of a few jobs writes as
# it always did, and needs no temporary table (nor the TEMP privilege) to update them.
COPY_FROM = 100


def _copies(conn: Connection, rows: list[dict[str, Any]]) -> bool:
    return conn.dialect.name == "postgresql" and len(rows) >= COPY_FROM


def insert(conn: Connection, table: Table, rows: list[dict[str, Any]]) -> None:
    """Insert ``rows`` (dicts of the same columns) into ``table``."""
    if not rows:
        return
    if not _copies(conn, rows):
        conn.execute(table.insert(), rows)
        return
    columns = list(rows[0])
    _copy(conn, table, table.name, columns, ([row[c] for c in columns] for row in rows))


def update(
    conn: Connection, table: Table, rows: list[dict[str, Any]], match: dict[str, str]
) -> int:
    """Update ``table``'s rows that match each of ``rows`` (dicts of the same keys): the
    keys of ``match`` name the values to match, and its values the columns they must
    equal; the other keys are the columns to set. Returns how many rows were updated.
    On PostgreSQL, the rows are copied into a temporary table, which one UPDATE joins."""
    if not rows:
        return 0
    sets = [key for key in rows[0] if key not in match]
    if not _copies(conn, rows):
        where = and_(*(table.c[column] == bindparam(key) for key, column in match.items()))
        return conn.execute(table.update().where(where), rows).rowcount
    temporary = f"cronchain_{table.name}_updates"
    picked = [f"{column} AS {key}" for key, column in match.items()] + sets
    conn.exec_driver_sql(
        f"CREATE TEMPORARY TABLE {temporary} ON COMMIT DROP AS"
        f" SELECT {', '.join(picked)} FROM {table.name} WITH NO DATA"
    )
    columns = [*match, *sets]
    types = {key: table.c[column] for key, column in match.items()}
    _copy(conn, table, temporary, columns, ([row[c] for c in columns] for row in rows), types)
    assigned = ", ".join(f"{column} = u.{column}" for column in sets)
    matched = " AND ".join(f"{table.name}.{column} = u.{key}" for key, column in match.items())
    updated = conn.exec_driver_sql(
        f"UPDATE {table.name} SET {assigned} FROM {temporary} AS u WHERE {matched}"
    ).rowcount
    conn.exec_driver_sql(f"DROP TABLE {temporary}")
    return updated


def update_joined(
    conn: Connection, table: Table, rows: list[dict[str, Any]], match: dict[str, str]
) -> int:
    """``update``'s work for the hot path's batches (a tick batch's jobs, an outcome
    group's runs and jobs): on PostgreSQL, when the rows name distinct rows, one UPDATE
    joined to an array per column, whose text is the same for the same columns (parsed
    once, then prepared by psycopg, once for each set of columns sent as no array); an
    executemany (a pipeline of a statement per row) paid SQLAlchemy's and psycopg's work
    per row, a fifth of a herd's CPU on each path.
    Otherwise, and on SQLite (in-process, quick already), that executemany. An UPDATE
    joined to two rows that name the same row sets it once, where the executemany set
    it twice in order: such rows take the executemany. The arrays go in binary, as
    ``run_store.insert_invocations``'s do."""
    if not rows:
        return 0
    first = next(iter(match))
    if conn.dialect.name != "postgresql" or len({r[first] for r in rows}) < len(rows):
        return conn.execute(_matched_update(table, tuple(match.items())), rows).rowcount
    keys = tuple(rows[0])
    columns = [table.c[match.get(key, key)] for key in keys]
    processors = [_processor(conn, column) for column in columns]
    arrays = tuple(
        unnested([row[key] for row in rows] if p is None else [p(row[key]) for row in rows])
        for key, p in zip(keys, processors, strict=True)
    )
    return conn.exec_driver_sql(_joined_update(table, keys, tuple(match.items())), arrays).rowcount


def unnested(values: list[Any]) -> list[Any] | None:
    """One column's array for ``unnest``: None for a column that is NULL in every row
    (an error, a log, a worker not yet known), which ``unnest`` pads with NULLs as it
    would have read them; a list of NULLs cost psycopg and the server 70 µs for 300
    rows, a few in each of a batch's statements."""
    return None if all(v is None for v in values) else values


@functools.cache
def _matched_update(table: Table, match: tuple[tuple[str, str], ...]) -> Any:
    where = and_(*(table.c[column] == bindparam(key) for key, column in match))
    return table.update().where(where)


@functools.cache
def _joined_update(table: Table, keys: tuple[str, ...], match: tuple[tuple[str, str], ...]) -> str:
    dialect = postgresql.dialect()
    matched = dict(match)
    arrays = ", ".join(
        f"%b::{table.c[matched.get(k, k)].type.compile(dialect=dialect)}[]" for k in keys
    )
    assigned = ", ".join(f"{k} = u.{k}" for k in keys if k not in matched)
    where = " AND ".join(f"t.{column} = u.{key}" for key, column in match)
    return (
        f"UPDATE {table.name} AS t SET {assigned}"
        f" FROM unnest({arrays}) AS u({', '.join(keys)}) WHERE {where}"
    )


def _copy(
    conn: Connection,
    table: Table,
    target: str,
    columns: list[str],
    rows: Iterable[list[Any]],
    types: dict[str, Any] | None = None,
) -> None:
    """COPY ``rows`` into ``target``'s ``columns``, each value processed as ``table``'s
    column of that name (or as ``types`` says) would process it for an INSERT."""
    found = {**{c: table.c[c] for c in columns if c in table.c}, **(types or {})}
    processors = [_processor(conn, found[c]) for c in columns]
    statement = f"COPY {target} ({', '.join(columns)}) FROM STDIN"
    with (
        conn.connection.driver_connection.cursor() as cursor,  # type: ignore[union-attr]
        cursor.copy(statement) as copy,
    ):
        for row in rows:
            copy.write_row([v if p is None else p(v) for v, p in zip(row, processors, strict=True)])


def _processor(conn: Connection, column: Any) -> Callable[[Any], Any] | None:
    dialect = conn.dialect
    return column.type.dialect_impl(dialect).bind_processor(dialect)
