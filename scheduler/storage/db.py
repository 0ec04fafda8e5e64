"""Creating SQLAlchemy engines that behave the same on PostgreSQL and on SQLite.

SQLite needs care once several processes write: WAL so readers never block the writer,
a busy timeout so writers wait instead of failing, and ``BEGIN IMMEDIATE`` for write
transactions so that they take the write lock up front (a deferred one that reads and
then writes fails at once with "database is locked" when another process wrote in
between). Reads stay deferred and never wait for writers.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url

_WRITE = "cronchain_write"


@contextmanager
def write_transaction(engine: Engine) -> Iterator[Connection]:
    """A transaction that will write: on SQLite it takes the write lock when it begins."""
    with engine.connect() as conn:
        conn.execution_options(**{_WRITE: True})
        with conn.begin():
            yield conn


def normalize_url(url: str) -> str:
    """Use psycopg 3 for PostgreSQL URLs that name no driver."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def make_engine(url: str) -> Engine:
    url = normalize_url(url)
    if make_url(url).get_backend_name() == "sqlite":
        return _sqlite_engine(url)
    # No pre-ping: it costs a round trip and a transaction on every checkout, as many as
    # the work itself on the hot path. After a PostgreSQL restart, the first statement on
    # a stale connection fails instead; SQLAlchemy then discards the whole pool, and the
    # failure surfaces as TransientError, which the task retries.
    # A work-path worker's threads (100 by default) share this pool: each holds a
    # connection only for a claim or an outcome (milliseconds), never during the call,
    # so 16 serve them and the rest wait their turn (pool_timeout). The pool keeps them
    # open: a connection closed on return (SQLAlchemy's overflow) is opened again for
    # the next outcome, and that cost PostgreSQL 3.7 ms per fire at 200 fires/s, more
    # than any other part of a fire. A process with one thread opens one or two.
    return create_engine(url, pool_size=16, max_overflow=0)


def _sqlite_engine(url: str) -> Engine:
    database = make_url(url).database
    if database and database != ":memory:":
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"timeout": 60, "check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record):  # type: ignore[no-untyped-def]
        dbapi_connection.isolation_level = None  # let the begin hook below issue BEGIN
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=60000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection):  # type: ignore[no-untyped-def]
        write = connection.get_execution_options().get(_WRITE, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine
