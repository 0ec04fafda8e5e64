"""Retention (PostgreSQL): a month older than CRONCHAIN_RETENTION is dropped whole,
after its per-job daily rollup; ``explain`` answers ``pruned`` with that day's counts.
SQLite's history is kept whole."""

from __future__ import annotations

import threading
from datetime import UTC, date, datetime, timedelta

import pytest
import sqlalchemy
from sqlalchemy import func, select

from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.errors import SpecError
from cronchain.scheduler.invokers.call import SUCCEEDED
from cronchain.scheduler.maintenance.retention import HistoryReport, run_once
from cronchain.scheduler.queries.explain import explain
from cronchain.scheduler.storage import partitions, run_store, statistics
from cronchain.scheduler.storage.models import invocation_days, invocations, jobs
from tests.support.deliver import deliver_runs
from tests.support.engine import Clock, RecordingPort
from tests.support.jobs import apply, make
from tests.support.locks import wait_for_lock_wait

pytestmark = pytest.mark.postgres

RETENTION = timedelta(days=180)
JANUARY = datetime(2029, 1, 1, tzinfo=UTC)


def run(
    conn: sqlalchemy.Connection, slot: datetime, status: str, lag: float, reason: str | None = None
) -> None:
    """An ended run of p/a's slot, started ``lag`` seconds late."""
    job_id, revision = conn.execute(select(jobs.c.id, jobs.c.revision)).one()
    started = slot + timedelta(seconds=lag)
    values = run_store.invocation_values(
        job_id, slot=slot, trigger_id=None, revision=revision, status=status, now=slot,
        reason=reason, started_at=started, finished_at=started + timedelta(seconds=1),
    )  # fmt: skip
    conn.execute(invocations.insert().values(values))


def drop_months_before(engine: Engine, t: datetime) -> None:
    """Drop the partitions the template made for the real month, before ``t``'s."""
    while run_once(engine.db, t, timedelta(0)).dropped:
        pass


def history(engine: Engine) -> list[datetime]:
    with engine.db.connect() as conn:
        query = select(invocations.c.slot).order_by(invocations.c.slot)
        return list(conn.execute(query).scalars())


def test_an_expired_month_is_rolled_up_then_dropped_whole(pg_engine: Engine, clock: Clock):
    engine = pg_engine
    clock.now = JANUARY - timedelta(days=30)
    apply(engine, make("0 * * * *"))  # hourly
    drop_months_before(engine, JANUARY)
    run_once(engine.db, JANUARY, timedelta(days=36_500))  # January to March 2029
    day = JANUARY + timedelta(days=9)  # 2029-01-10
    with engine.db.begin() as conn:
        for hour, lag in enumerate((0.1, 0.2, 0.3, 0.4, 10.0)):
            run(conn, day + timedelta(hours=hour), "SUCCEEDED", lag)
        run(conn, day + timedelta(hours=5), "FAILED", 1.0, reason="timeout")
        run(conn, day + timedelta(hours=6), "SKIPPED", 0.0, reason="overlap")
        run(conn, day + timedelta(days=1), "SUCCEEDED", 2.0)
        run(conn, JANUARY + timedelta(days=40), "SUCCEEDED", 0.5)  # February: kept

    # Mid-July: January ended more than 180 days before; February did not.
    now = datetime(2029, 7, 31, tzinfo=UTC)
    report = run_once(engine.db, now, RETENTION)
    assert report.dropped == "invocations_p2029_01"
    assert report.rolled_up == 2
    with engine.db.connect() as conn:
        names = [m.name for m in partitions.months(conn)]
        days = {
            r.day: r for r in conn.execute(select(invocation_days).order_by(invocation_days.c.day))
        }
    assert "invocations_p2029_01" not in names and "invocations_p2029_02" in names
    assert history(engine) == [JANUARY + timedelta(days=40)]
    ten = days[date(2029, 1, 10)]
    assert ten.runs == 7
    assert ten.statuses == {"SUCCEEDED": 5, "FAILED": 1, "SKIPPED": 1}
    assert ten.reasons == {"FAILED/timeout": 1, "SKIPPED/overlap": 1}
    assert ten.lag_p50 == pytest.approx(0.3)
    assert 0.4 < ten.lag_p95 < ten.lag_p99 <= 10.0
    assert days[date(2029, 1, 11)].statuses == {"SUCCEEDED": 1}
    # Done: the next pass finds nothing to drop, and the rollup is not written twice.
    assert run_once(engine.db, now, RETENTION) == HistoryReport()
    with engine.db.connect() as conn:
        assert conn.execute(select(func.count()).select_from(invocation_days)).scalar() == 2

    with engine.db.connect() as conn:
        ten_oclock = explain(conn, "p/a", day + timedelta(hours=2), now)
        quiet = explain(conn, "p/a", JANUARY + timedelta(days=20, hours=3), now)
        february = explain(conn, "p/a", JANUARY + timedelta(days=40), now)
    assert ten_oclock["answer"] == "pruned"
    assert ten_oclock["statuses"] == {"SUCCEEDED": 5, "FAILED": 1, "SKIPPED": 1}
    assert ten_oclock["runs"] == 7 and ten_oclock["day"] == "2029-01-10"
    assert "5 SUCCEEDED" in ten_oclock["text"]
    assert quiet["answer"] == "pruned" and quiet["runs"] == 0 and "no run" in quiet["text"]
    assert february["answer"] == "ran"


def test_rows_the_default_holds_from_before_a_dropped_month_go_with_it(
    pg_engine: Engine, clock: Clock
):
    """A backfill of slots older than every partition lands in the default: counted in
    the rollup of the month retention drops next, and dropped with it."""
    engine = pg_engine
    clock.now = datetime(2028, 1, 1, tzinfo=UTC)
    apply(engine, make("0 * * * *"))
    drop_months_before(engine, JANUARY)
    run_once(engine.db, JANUARY, timedelta(days=36_500))
    old = datetime(2028, 6, 1, 3, tzinfo=UTC)  # before January 2029's partition
    with engine.db.begin() as conn:
        run(conn, old, "SUCCEEDED", 1.0)
        run(conn, JANUARY + timedelta(hours=1), "SUCCEEDED", 1.0)
    report = run_once(engine.db, datetime(2029, 7, 31, tzinfo=UTC), RETENTION)
    assert report.dropped == "invocations_p2029_01" and report.rolled_up == 2
    assert history(engine) == []
    with engine.db.connect() as conn:
        assert [r.day for r in conn.execute(select(invocation_days.c.day).order_by("day"))] == [
            date(2028, 6, 1),
            date(2029, 1, 1),
        ]


def test_sqlite_history_is_neither_partitioned_nor_pruned(engine: Engine, clock: Clock):
    """On PostgreSQL the pass drops the month (the tests above); SQLite keeps it all."""
    clock.now = JANUARY
    apply(engine, make("0 * * * *"))
    with engine.db.begin() as conn:
        run(conn, JANUARY + timedelta(hours=1), "SUCCEEDED", 1.0)
    report = run_once(engine.db, datetime(2031, 1, 1, tzinfo=UTC), RETENTION)
    if engine.db.dialect.name == "sqlite":
        assert report == HistoryReport()
        assert history(engine) == [JANUARY + timedelta(hours=1)]
    else:
        assert report.dropped is not None


def test_a_month_s_files_are_removed_without_locking_history(pg_engine: Engine, clock: Clock):
    """The drop of a month's table (its files: gigabytes for a busy month) is not made
    under the lock that takes the partition out of history: while it is under way, a
    run is still written and read. Dropped where it is detached, every tick and outcome
    waited for it (about a second at 30M rows)."""
    engine = pg_engine
    clock.now = JANUARY - timedelta(days=30)
    apply(engine, make("0 * * * *"))
    drop_months_before(engine, JANUARY)
    run_once(engine.db, JANUARY, timedelta(days=36_500))
    with engine.db.begin() as conn:
        run(conn, JANUARY + timedelta(hours=1), "SUCCEEDED", 1.0)
    seen: list[str] = []
    real = partitions.drop_detached

    def dropping(conn: sqlalchemy.Connection, name: str) -> None:
        real(conn, name)  # its lock is held until this transaction commits
        seen.append(name)
        with engine.db.begin() as other:
            other.exec_driver_sql("SET LOCAL lock_timeout = '1s'")
            run(other, JANUARY + timedelta(days=40), "SUCCEEDED", 0.5)  # February
            assert other.execute(select(func.count()).select_from(invocations)).scalar() == 1

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(partitions, "drop_detached", dropping)
        report = run_once(engine.db, datetime(2029, 7, 31, tzinfo=UTC), RETENTION)
    assert report.dropped == "invocations_p2029_01" and not report.busy
    assert seen == ["invocations_p2029_01_detached"]
    with engine.db.connect() as conn:
        assert partitions.detached(conn) == []
    assert history(engine) == [JANUARY + timedelta(days=40)]


def test_a_table_left_detached_is_dropped_by_the_next_pass(pg_engine: Engine, clock: Clock):
    """A pass that stopped between the detach and the drop (its process killed) leaves
    the month's table detached, renamed: not a partition, and not in the way of one
    made for that month again. The next pass drops it first; then that month, made
    again and expired, is taken out under the same name."""
    engine = pg_engine
    clock.now = JANUARY - timedelta(days=30)
    apply(engine, make("0 * * * *"))
    drop_months_before(engine, JANUARY)
    run_once(engine.db, JANUARY, timedelta(days=36_500))
    january = partitions.month_of(JANUARY)
    with engine.db.begin() as conn:
        assert partitions.detach(conn, january) == "invocations_p2029_01_detached"
    with engine.db.connect() as conn:
        assert partitions.detached(conn) == ["invocations_p2029_01_detached"]
        assert january not in partitions.months(conn)
    with engine.db.begin() as conn:  # made again (a slot may still come due): both exist
        partitions.create(conn, january)
    report = run_once(engine.db, datetime(2029, 7, 31, tzinfo=UTC), RETENTION)
    assert report.dropped == "invocations_p2029_01" and not report.busy
    with engine.db.connect() as conn:
        assert partitions.detached(conn) == []
        assert january not in partitions.months(conn)


def test_a_month_taken_out_while_a_tick_holds_its_job_does_not_deadlock(
    pg_engine: Engine, clock: Clock
):
    """A tick writes its job, then history (a batch's second tick of a job, an outcome
    group's next run); taking a partition out locks history and ``jobs`` both (its
    foreign key). Taken in the other order, the two deadlocked:
    retention takes ``jobs`` first, and waits for the tick."""
    engine = pg_engine
    clock.now = JANUARY - timedelta(days=30)
    apply(engine, make("0 * * * *"))
    drop_months_before(engine, JANUARY)
    run_once(engine.db, JANUARY, timedelta(days=36_500))
    reports: list[HistoryReport] = []
    pass_ = threading.Thread(
        target=lambda: reports.append(
            run_once(engine.db, datetime(2029, 7, 31, tzinfo=UTC), RETENTION)
        )
    )
    with engine.db.connect() as tick:
        tick.begin()
        tick.exec_driver_sql("UPDATE jobs SET generation = generation")  # its job written
        pass_.start()
        wait_for_lock_wait(engine.db, "the pass to roll January up and wait to take it out")
        run(tick, JANUARY + timedelta(days=40), "SUCCEEDED", 0.5)  # history written
        tick.commit()
    pass_.join(10)
    assert [r.dropped for r in reports] == ["invocations_p2029_01"], reports
    assert not reports[0].busy
    assert history(engine) == [JANUARY + timedelta(days=40)]


def counted_at_commit(conn: sqlalchemy.Connection) -> None:
    """The transaction's rows counted in ``pg_stat_user_tables`` as it commits, which a
    backend otherwise does up to ten seconds later."""
    conn.exec_driver_sql("SELECT pg_stat_force_next_flush()")


def test_a_pass_analyzes_once_a_month_that_has_rows_and_no_statistics(
    pg_engine: Engine, clock: Clock
):
    """Without statistics (autovacuum off, as on this project's CI machine; a month's
    new partition) the planner took hash joins over every job for a claim of a few
    runs. Autovacuum would analyze the month; the pass does if it has not, and not again."""
    engine = pg_engine
    apply(engine, make("every 10s"))
    now = datetime.now(UTC)  # a month the template made
    first = partitions.month_start(now)
    month = partitions.month_of(first).name
    with engine.db.begin() as conn:
        conn.exec_driver_sql(f"ALTER TABLE {month} SET (autovacuum_enabled = off)")
        for i in range(2 * statistics.BYTES // 130):  # about 130 B a row: twice enough
            run(conn, first + timedelta(seconds=10 * i), "SUCCEEDED", 0.5)
        # The application's own table in the same schema is not cronchain's to analyze.
        conn.exec_driver_sql("CREATE TABLE app_notes AS SELECT repeat('x', 200) AS note"
                             " FROM generate_series(1, 2000)")  # fmt: skip
        counted_at_commit(conn)

    def statistics_of(table: str) -> int:
        with engine.db.connect() as conn:
            query = "SELECT count(*) FROM pg_stats WHERE tablename = %(t)s"
            return conn.exec_driver_sql(query, {"t": table}).scalar_one()

    assert statistics_of(month) == 0
    assert run_once(engine.db, now, RETENTION).analyzed == (month,)  # jobs: one row
    assert statistics_of(month) > 0
    assert run_once(engine.db, now, RETENTION).analyzed == ()


def test_a_month_analyzed_while_its_rows_were_being_inserted_is_analyzed_again(
    pg_engine: Engine, clock: Clock
):
    """An ANALYZE counts no row another transaction is still inserting: a month caught
    so is recorded as empty with pages, which the planner takes for one row however it
    grows (claims of 300 runs read the whole month, seconds each, in a benchmark). A new
    month (never analyzed) that the pass analyzed so was remembered as done: the next
    pass analyzes it again, with its rows in."""
    engine = pg_engine
    apply(engine, make("every 10s"))
    first = JANUARY  # a month the pass makes: never analyzed
    month = partitions.month_of(first).name
    assert run_once(engine.db, first, RETENTION).analyzed == ()
    estimate = "SELECT reltuples FROM pg_class WHERE relname = %(t)s"
    with engine.db.connect() as conn:
        assert conn.exec_driver_sql(estimate, {"t": month}).scalar_one() < 0
        conn.exec_driver_sql(f"ALTER TABLE {month} SET (autovacuum_enabled = off)")
        conn.commit()
        for i in range(2 * statistics.BYTES // 130):
            run(conn, first + timedelta(seconds=10 * i), "SUCCEEDED", 0.5)
        assert run_once(engine.db, first, RETENTION).analyzed == (month,)  # none counted
        counted_at_commit(conn)
        conn.commit()
        assert conn.exec_driver_sql(estimate, {"t": month}).scalar_one() == 0
    assert run_once(engine.db, first, RETENTION).analyzed == (month,)
    with engine.db.connect() as conn:
        assert conn.exec_driver_sql(estimate, {"t": month}).scalar_one() > 0
    assert run_once(engine.db, first, RETENTION).analyzed == ()


def test_a_month_another_analyze_found_empty_is_analyzed_once_its_rows_are_in(
    pg_engine: Engine, clock: Clock
):
    """The same, from an ANALYZE of anyone's (an operator's, a benchmark's): the pass
    leaves the month while its rows are not in, and analyzes it once they are."""
    engine = pg_engine
    apply(engine, make("every 10s"))
    now = datetime.now(UTC)
    first = partitions.month_start(now)
    month = partitions.month_of(first).name
    with engine.db.connect() as conn:
        conn.exec_driver_sql(f"ALTER TABLE {month} SET (autovacuum_enabled = off)")
        conn.commit()
        for i in range(2 * statistics.BYTES // 130):
            run(conn, first + timedelta(seconds=10 * i), "SUCCEEDED", 0.5)
        with engine.db.connect() as other:
            other.exec_driver_sql(f"ANALYZE {month}")
            other.commit()
        assert run_once(engine.db, now, RETENTION).analyzed == ()  # none in yet
        counted_at_commit(conn)
        conn.commit()
    assert run_once(engine.db, now, RETENTION).analyzed == (month,)
    assert run_once(engine.db, now, RETENTION).analyzed == ()


def test_a_table_of_dead_rows_only_is_analyzed_once(pg_engine: Engine, clock: Clock):
    """An ANALYZE of a table whose rows are all deleted writes no statistics either: the
    pass must not analyze it (and warn) again at every pass."""
    engine = pg_engine
    apply(engine, make("every 10s"))
    month = partitions.month_of(JANUARY).name  # never analyzed
    run_once(engine.db, JANUARY, RETENTION)
    with engine.db.begin() as conn:
        conn.exec_driver_sql(f"ALTER TABLE {month} SET (autovacuum_enabled = off)")
        for i in range(2 * statistics.BYTES // 130):
            run(conn, JANUARY + timedelta(seconds=10 * i), "SUCCEEDED", 0.5)
    with engine.db.begin() as conn:
        conn.exec_driver_sql(f"DELETE FROM {month}")
        counted_at_commit(conn)
    assert run_once(engine.db, JANUARY, RETENTION).analyzed == (month,)
    assert run_once(engine.db, JANUARY, RETENTION).analyzed == ()


def test_a_month_with_runs_waiting_or_in_flight_is_kept_until_they_end(
    pg_engine: Engine, clock: Clock, port: RecordingPort
):
    """A backfill of the oldest month is still under way (a run RUNNING, five WAITING)
    when that month expires: retention keeps the month, and takes it once they ended."""
    engine = pg_engine
    clock.now = JANUARY - timedelta(days=30)
    apply(engine, make("0 * * * *"))
    drop_months_before(engine, JANUARY)
    run_once(engine.db, JANUARY, timedelta(days=36_500))
    clock.now = JANUARY + timedelta(days=5)
    start, end = JANUARY + timedelta(hours=1), JANUARY + timedelta(hours=6)
    assert len(Scheduler(engine).backfill("p/a", start, end)["slots"]) == 6
    for invocation_id, attempt, _ in port.start_messages:
        engine.attempts.start_invocation(invocation_id, attempt)
    [call] = port.runs
    assert engine.attempts.claim(call.invocation_id, call.attempt, "w") is not None  # RUNNING

    july = datetime(2029, 7, 31, tzinfo=UTC)
    report = run_once(engine.db, july, RETENTION)
    assert report.dropped is None and report.kept == "invocations_p2029_01"
    assert report.rolled_up == 0  # rolled up once its runs have ended, not before
    with engine.db.connect() as conn:
        assert "invocations_p2029_01" in [m.name for m in partitions.months(conn)]
    statuses = [r["status"] for r in Scheduler(engine).history("p/a", limit=10)]
    assert sorted(statuses) == ["RUNNING"] + ["WAITING"] * 5

    engine.runs.record_patiently(call.invocation_id, call.attempt, SUCCEEDED)
    port.runs.clear()
    while port.start_messages:  # the backfill's next slots, one at a time
        messages, port.start_messages[:] = list(port.start_messages), []
        for invocation_id, attempt, _ in messages:
            engine.attempts.start_invocation(invocation_id, attempt)
        deliver_runs(engine, port)
    statuses = [r["status"] for r in Scheduler(engine).history("p/a", limit=10)]
    assert statuses == ["SUCCEEDED"] * 6
    report = run_once(engine.db, july, RETENTION)
    assert report.dropped == "invocations_p2029_01" and report.rolled_up == 1
    with engine.db.connect() as conn:
        answer = explain(conn, "p/a", start, july)
    assert answer["answer"] == "pruned" and answer["statuses"] == {"SUCCEEDED": 6}


def test_a_run_filed_in_the_month_while_it_is_taken_out_keeps_it(
    pg_engine: Engine, clock: Clock, monkeypatch: pytest.MonkeyPatch
):
    """A run filed in the expired month after the first look (a catch-up slot, say):
    the transaction that detaches the month finds it, and the detach is undone."""
    engine = pg_engine
    clock.now = JANUARY - timedelta(days=30)
    apply(engine, make("0 * * * *"))
    drop_months_before(engine, JANUARY)
    run_once(engine.db, JANUARY, timedelta(days=36_500))
    clock.now = JANUARY + timedelta(days=5)
    Scheduler(engine).backfill("p/a", JANUARY + timedelta(hours=1), JANUARY + timedelta(hours=2))
    monkeypatch.setattr(partitions, "in_flight_before", lambda conn, end: 0)  # not seen then
    report = run_once(engine.db, datetime(2029, 7, 31, tzinfo=UTC), RETENTION)
    assert report.dropped is None and report.kept == "invocations_p2029_01"
    with engine.db.connect() as conn:
        assert "invocations_p2029_01" in [m.name for m in partitions.months(conn)]
        assert partitions.detached(conn) == []
    assert len(Scheduler(engine).history("p/a")) == 2
    monkeypatch.undo()  # the runs end; the next pass takes the month, counted as it ends
    with engine.db.begin() as conn:
        conn.execute(
            invocations.update().values(status="SKIPPED", reason="test", finished_at=clock.now)
        )
    report = run_once(engine.db, datetime(2029, 7, 31, tzinfo=UTC), RETENTION)
    assert report.dropped == "invocations_p2029_01"
    with engine.db.connect() as conn:
        [day] = conn.execute(select(invocation_days)).all()
    assert (day.runs, day.statuses) == (2, {"SKIPPED": 2})


def test_the_look_under_the_detach_s_lock_reads_indexes_not_the_month(
    pg_engine: Engine, clock: Clock
):
    """Under the lock that holds up every tick, the runs not ended are found through the
    partial indexes of WAITING runs and of deadlines, never by a scan of the month."""
    engine = pg_engine
    clock.now = JANUARY - timedelta(days=30)
    apply(engine, make("0 * * * *"))
    drop_months_before(engine, JANUARY)
    run_once(engine.db, JANUARY, timedelta(days=36_500))
    with engine.db.begin() as conn:
        for hour in range(500):
            run(conn, JANUARY + timedelta(hours=hour), "SUCCEEDED", 0.1)
        conn.exec_driver_sql("ANALYZE invocations_p2029_01")
        name = partitions.detach(conn, partitions.month_of(JANUARY))
        plans = []
        real = conn.exec_driver_sql

        def explained(statement: str, *args: object) -> object:
            if statement.lstrip().startswith("SELECT (SELECT count(*)"):
                plans.append("\n".join(real("EXPLAIN " + statement, *args).scalars()))
            return real(statement, *args)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(conn, "exec_driver_sql", explained)
            assert partitions.in_flight_in(conn, name) == 0
        conn.rollback()
    [plan] = plans
    assert "Seq Scan" not in plan, plan
    assert "reason_backfill_idx" in plan and "deadline_idx" in plan, plan  # the two partial


def test_a_backfill_into_a_month_retention_drops_is_refused(pg_engine: Engine, clock: Clock):
    engine = pg_engine
    clock.now = datetime(2029, 7, 31, tzinfo=UTC)
    apply(engine, make("0 * * * *"))
    january = JANUARY + timedelta(hours=1)
    with pytest.raises(SpecError, match="CRONCHAIN_RETENTION") as refused:
        Scheduler(engine).backfill("p/a", january, january + timedelta(days=40))
    assert "2029-02-01" in str(refused.value)  # where a backfill may start
    february = datetime(2029, 2, 1, 1, tzinfo=UTC)
    made = Scheduler(engine).backfill("p/a", february, february, dry_run=True)
    assert made["slots"] == ["2029-02-01T01:00:00Z"]
