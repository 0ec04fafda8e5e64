"""Race tests on PostgreSQL: going on only once another transaction waits on a lock."""

from __future__ import annotations

import time
from collections.abc import Callable

import sqlalchemy

_WAITING = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
    " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
)
_BACKENDS = (
    "SELECT pid, state, wait_event_type, wait_event, left(query, 80) FROM pg_stat_activity"
    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
)


def wait_for_lock_wait(
    db: sqlalchemy.Engine,
    what: str,
    *,
    or_done: Callable[[], bool] | None = None,
    timeout: float = 10.0,
) -> None:
    """Return once a backend of ``db``'s database waits on a lock, as PostgreSQL reports
    it (``pg_stat_activity.wait_event_type = 'Lock'``), or once ``or_done()`` is true;
    after ``timeout`` seconds, raise ``AssertionError`` naming ``what`` was awaited.

    A race test holds rows in one transaction and must not go on before the other
    transaction is stuck behind them: a fixed sleep assumed it was, and when it was not,
    the test passed without the race. Each test has a database of its own, and the
    transactions a test holds open are idle, so any lock wait there is the one awaited.
    ``or_done`` is for a side that the code under test lets through without waiting (a
    lock skipped): its having finished while the rows were held is the race then.

    ``AssertionError`` is an ``Exception``, so that a test's thread that collects what it
    raises collects this too. PostgreSQL alone: SQLite has one writer at a time, and no
    view of who waits."""
    assert db.dialect.name == "postgresql", "only PostgreSQL reports who waits on a lock"
    deadline = time.monotonic() + timeout
    with db.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        # In autocommit each query sees pg_stat_activity anew, not a transaction's snapshot.
        while time.monotonic() < deadline:
            if conn.exec_driver_sql(_WAITING).scalar_one() or (or_done and or_done()):
                return
            time.sleep(0.01)
        backends = conn.exec_driver_sql(_BACKENDS).all()
    raise AssertionError(
        f"timed out after {timeout} s waiting for {what}; the database's backends:"
        f" {[tuple(row) for row in backends]}"
    )
