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
from sqlalchemy.exc import ArgumentError, DBAPIError, InterfaceError, OperationalError

from cronchain.scheduler.errors import SpecError, TransientError

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
    """An engine for ``url``; one that names no database cronchain can use (malformed, an
    unknown dialect, a driver not installed) raises ``SpecError``. Nothing connects yet."""
    url = normalize_url(url)
    try:
        if make_url(url).get_backend_name() == "sqlite":
            return _sqlite_engine(url)
        return _server_engine(url)
    except (ArgumentError, ImportError, ValueError) as err:  # ValueError: a bad port
        raise SpecError(
            "database URL",
            "must be a PostgreSQL or SQLite URL (postgresql://user:pass@host/db,"
            f" sqlite:///path/cronchain.db): {first_line(err)}",
        ) from None


def _server_engine(url: str) -> Engine:
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
    engine = create_engine(url, pool_size=16, max_overflow=0)
    if engine.dialect.name != "postgresql":
        return engine

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record):  # type: ignore[no-untyped-def]
        # The session's zone is UTC, whatever the server's (``timezone`` in its
        # postgresql.conf, often the machine's, such as ``Etc/UTC``): the driver then
        # gives each time in UTC, as the engine keeps them (``UTCDateTime``), and
        # converts none: a time read cost 0.85 µs, fetched and made UTC, and costs 0.35;
        # a batch's rows hold a dozen each.
        autocommit = dbapi_connection.autocommit
        dbapi_connection.autocommit = True
        cursor = dbapi_connection.cursor()
        cursor.execute("SET TIME ZONE 'UTC'")
        cursor.close()
        dbapi_connection.autocommit = autocommit

    return engine


def _sqlite_engine(url: str) -> Engine:
    database = make_url(url).database
    if database and database != ":memory:":
        try:
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            where = make_url(url).render_as_string(hide_password=True)
            raise TransientError(
                f"database {where} is unreachable: cannot make its folder: {err.strerror}"
            ) from err
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


# SQLSTATE classes of a server that cannot be reached or will not take us: connection
# exception, invalid authorization, unknown database, operator intervention (shutting
# down, starting up), insufficient resources (too many connections).
_UNREACHABLE = ("08", "28", "3D", "57P", "53")
_NOT_MIGRATED = ("42P01", "42703")  # undefined table, undefined column


@contextmanager
def explained_failures(engine: Engine) -> Iterator[None]:
    """Around a command a person runs (the CLI, a script): a database that cannot be
    reached, or that is not migrated, raises ``TransientError`` with one line that says so
    and names the database (without its password). The engine's own ``TransientError``
    (a write transaction that failed) is explained from its cause in the same way.
    Any other error passes unchanged."""
    try:
        yield
    except DBAPIError as err:
        explained = explain_failure(engine, err)
        if explained is None:
            raise
        raise explained from err
    except TransientError as err:
        cause = err.__cause__
        explained = explain_failure(engine, cause) if isinstance(cause, DBAPIError) else None
        if explained is None:
            raise
        raise explained from cause


def described(engine: Engine) -> str:
    """``database URL`` as the user wrote it, without its password."""
    url = engine.url
    if url.drivername == "postgresql+psycopg":  # as the user wrote it (normalize_url)
        url = url.set(drivername="postgresql")
    return f"database {url.render_as_string(hide_password=True)}"


def explain_failure(engine: Engine, err: DBAPIError) -> TransientError | None:
    """What ``err`` means to whoever ran the command, in one line; None for an error that
    is neither an unreachable database nor a missing schema (a bug, or a constraint)."""
    where = described(engine)
    first = first_line(err.orig or err)
    code = getattr(err.orig, "sqlstate", None) or ""
    if code in _NOT_MIGRATED or first.startswith(("no such table", "no such column")):
        return TransientError(f"{where} is not migrated ({first}): run `cronchain db upgrade`")
    if unreachable(err):
        return TransientError(f"{where} is unreachable: {first}")
    if isinstance(err, OperationalError | InterfaceError):
        return TransientError(f"{where} failed: {first}")  # a deadlock, a lock timeout
    return None


def unreachable(err: DBAPIError) -> bool:
    """Whether the database could not be used at all, rather than failing a statement."""
    sqlite_error = getattr(err.orig, "sqlite_errorname", None)
    if sqlite_error is not None:  # a folder, a file that is no database, no permission
        return sqlite_error in ("SQLITE_CANTOPEN", "SQLITE_NOTADB", "SQLITE_PERM")
    if not isinstance(err, OperationalError | InterfaceError):
        return False
    code = getattr(err.orig, "sqlstate", None)
    return code is None or code.startswith(_UNREACHABLE)  # psycopg: none before connecting


def first_line(err: BaseException) -> str:
    """An error's message in one line, for a log or a person."""
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__
