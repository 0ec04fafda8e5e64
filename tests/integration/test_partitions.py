"""History by month (PostgreSQL): each slot and each trigger id still has one run at most,
enforced by the database on the partitioned table; partitions are made ahead, rows the
default partition caught move into their month's, and two passes never collide."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy
from sqlalchemy import func, select

from cronchain.scheduler.engine import Engine
from cronchain.scheduler.maintenance.retention import LOCK_KEY, HistoryReport, run_once
from cronchain.scheduler.storage import partitions, run_store
from cronchain.scheduler.storage.models import invocations, jobs
from tests.support.engine import Clock
from tests.support.jobs import apply, make
from tests.support.rows import job

pytestmark = pytest.mark.postgres

RETENTION = timedelta(days=36_500)  # nothing here is old enough to drop


def insert(engine: Engine, conn: sqlalchemy.Connection, **columns: object) -> int | None:
    """Insert p/a's run in ``conn``'s transaction (the job read there: another
    connection's lock of the job would wait for this transaction)."""
    job_id, revision = conn.execute(select(jobs.c.id, jobs.c.revision)).one()
    values = dict(slot=None, trigger_id=None, revision=revision, status="STARTING")
    return run_store.insert_invocation(conn, job_id, **(values | columns))  # type: ignore[arg-type]


def count(engine: Engine) -> int:
    with engine.db.connect() as conn:
        return conn.execute(select(func.count()).select_from(invocations)).scalar_one()


def partition_of(engine: Engine, invocation_id: int) -> str:
    with engine.db.connect() as conn:
        query = "SELECT tableoid::regclass::text FROM invocations WHERE id = %(id)s"
        return conn.exec_driver_sql(query, {"id": invocation_id}).scalar_one()


def test_a_slot_and_a_trigger_id_have_one_run_at_most(engine: Engine, clock: Clock):
    """Inserted twice, each leaves one row; a trigger id made again months later too (a
    retried trigger is made at another time, so filed elsewhere). On PostgreSQL the
    table is partitioned, so this is the partitioned table's guard."""
    apply(engine, make())
    if engine.db.dialect.name == "postgresql":
        with engine.db.connect() as conn:
            assert partitions.is_partitioned(conn)
    slot = clock.now
    later = clock.now + timedelta(days=95)
    with engine.db.begin() as conn:
        assert insert(engine, conn, slot=slot, now=slot) is not None
        assert insert(engine, conn, slot=slot, now=later, status="SKIPPED", reason="x") is None
        assert insert(engine, conn, trigger_id="t1", now=slot) is not None
        assert insert(engine, conn, trigger_id="t1", now=later) is None
    assert count(engine) == 2
    with pytest.raises(sqlalchemy.exc.IntegrityError), engine.db.begin() as conn:
        row = job(engine)
        conn.execute(
            invocations.insert().values(
                job_id=row.id, slot=slot, revision="r", status="STARTING", attempt=0,
                created_at=later, backfill=False,
            )
        )  # fmt: skip
    assert count(engine) == 2


def test_a_trigger_id_inserted_at_once_by_two_transactions_has_one_run(pg_engine: Engine):
    """The second waits for the first and then inserts nothing, as a unique index
    makes it (SQLite has one writer at a time: nothing to race there)."""
    engine = pg_engine
    apply(engine, make())
    now = datetime(2026, 3, 1, tzinfo=UTC)
    second: list[int | None] = []
    with engine.db.connect() as first:
        first.begin()
        assert insert(engine, first, trigger_id="t", now=now) is not None

        def other() -> None:
            with engine.db.begin() as conn:
                second.append(insert(engine, conn, trigger_id="t", now=now + timedelta(days=40)))

        thread = threading.Thread(target=other)
        thread.start()
        thread.join(0.5)
        assert thread.is_alive()  # waiting for the first transaction
        first.commit()
    thread.join(10)
    assert second == [None]
    assert count(engine) == 1


def test_partitions_are_made_ahead_and_take_their_rows_from_the_default(pg_engine: Engine):
    engine = pg_engine
    apply(engine, make())
    far = datetime(2031, 5, 10, 12, tzinfo=UTC)
    with engine.db.begin() as conn:
        inv = insert(engine, conn, slot=far, now=far)
        triggered = insert(engine, conn, trigger_id="t", now=far)
    assert inv is not None and triggered is not None
    assert partition_of(engine, inv) == partitions.DEFAULT
    report = run_once(engine.db, datetime(2031, 4, 30, tzinfo=UTC), RETENTION)
    assert report.created == (
        "invocations_p2031_04",
        "invocations_p2031_05",
        "invocations_p2031_06",
    )
    assert report.moved == 2
    assert partition_of(engine, inv) == "invocations_p2031_05"
    assert partition_of(engine, triggered) == "invocations_p2031_05"
    assert count(engine) == 2
    with engine.db.connect() as conn:
        assert run_store.invocation(conn, inv)["slot"] == far  # type: ignore[index]
    # Nothing more to do: a second pass finds every month it needs.
    assert run_once(engine.db, datetime(2031, 4, 30, tzinfo=UTC), RETENTION) == HistoryReport()
    # The slot's key holds in its new partition, the trigger id's too.
    with engine.db.begin() as conn:
        assert insert(engine, conn, slot=far, now=far) is None
        assert insert(engine, conn, trigger_id="t", now=far) is None


def test_a_second_pass_skips_while_the_first_holds_the_lock(pg_engine: Engine):
    """Two beats send two watchdogs: the one that finds the lock taken does nothing."""
    engine = pg_engine
    now = datetime(2032, 1, 15, tzinfo=UTC)
    with engine.db.connect() as conn:
        conn.begin()
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({LOCK_KEY})")
        assert run_once(engine.db, now, RETENTION) == HistoryReport(busy=True)
        conn.rollback()
    report = run_once(engine.db, now, RETENTION)
    assert report.created == (
        "invocations_p2032_01",
        "invocations_p2032_02",
        "invocations_p2032_03",
    )


def test_db_upgrade_makes_the_current_months(pg_engine: Engine, clock: Clock):
    from cronchain.scheduler.api import Scheduler

    clock.now = datetime(2033, 7, 4, tzinfo=UTC)
    Scheduler(pg_engine).upgrade()
    with pg_engine.db.connect() as conn:
        names = [m.name for m in partitions.months(conn)]
    assert names[-3:] == ["invocations_p2033_07", "invocations_p2033_08", "invocations_p2033_09"]


def test_the_watchdog_sweep_makes_the_months_ahead(pg_engine: Engine, clock: Clock):
    """Beat drives the history pass through the watchdog: no task of its own to lose."""
    from cronchain.scheduler.maintenance.watchdog import sweep

    clock.now = datetime(2034, 2, 10, tzinfo=UTC)
    sweep(pg_engine, budget=1.0, retention=RETENTION)
    with pg_engine.db.connect() as conn:
        names = [m.name for m in partitions.months(conn)]
    assert names[-3:] == ["invocations_p2034_02", "invocations_p2034_03", "invocations_p2034_04"]
