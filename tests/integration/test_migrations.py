"""Migrations go up, down and up again, and the migrated schema is the declared one."""

from __future__ import annotations

import pytest
import sqlalchemy
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from cronchain.migrations import downgrade, upgrade
from cronchain.scheduler.storage.db import make_engine
from cronchain.scheduler.storage.models import metadata
from tests.support import services
from tests.support.plans import log_plans

pytestmark = pytest.mark.postgres


# What PostgreSQL's partitioned ``invocations`` holds otherwise than the models declare
# (scheduler/storage/partitions.py says why): the primary key and the slot's unique key
# include ``filed_at`` (the partition key must be in both; alembic does not compare
# primary keys), a trigger id's key is ``invocation_triggers``' primary key, and
# ``revokes`` loses its foreign key (which cannot reference ``id`` alone) for a trigger.
PARTITIONED = {
    ("remove_constraint", "uq_invocations_job_id_slot", ("job_id", "slot", "filed_at")),
    ("add_constraint", "uq_invocations_job_id_slot", ("job_id", "slot")),
    ("add_constraint", "uq_invocations_job_id_trigger_id", ("job_id", "trigger_id")),
    ("add_fk", "fk_revokes_invocation_id_invocations", ("invocation_id",)),
    ("remove_table", "invocation_triggers", ()),
}


def _described(diff: object) -> tuple[str, str, tuple[str, ...]]:
    kind, thing = diff[0], diff[1]  # type: ignore[index]
    if kind == "remove_table":
        return kind, thing.name, ()
    columns = tuple(c.name for c in (thing.columns if kind != "add_fk" else thing.columns))
    return kind, thing.name, columns


def differences(engine: sqlalchemy.Engine) -> list[object]:
    """The migrated schema against the models; on PostgreSQL, less the partitioned
    table's differences above, each of which must be there."""
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "include_name": _not_a_partition}
        )
        found = compare_metadata(context, metadata)
    if engine.dialect.name != "postgresql":
        return found
    described = [_described(diff) for diff in found]
    assert set(described) >= PARTITIONED, described
    return [diff for diff, d in zip(found, described, strict=True) if d not in PARTITIONED]


def _not_a_partition(name: str | None, kind: str, parent: object) -> bool:
    return not (kind == "table" and name is not None and name.startswith("invocations_"))


def tables(engine: sqlalchemy.Engine) -> set[str]:
    names = set(sqlalchemy.inspect(engine).get_table_names()) - {"alembic_version"}
    return {n for n in names if _not_a_partition(n, "table", None)}


def declared_tables(engine: sqlalchemy.Engine) -> set[str]:
    names = {"jobs", "invocations", "job_changes", "revokes", "invocation_days", "watchdog"}
    names |= {"slot_outcomes", "fire_lags", "alerts", "channels", "requirements", "pools"}
    return names | ({"invocation_triggers"} if engine.dialect.name == "postgresql" else set())


def test_up_down_up_matches_the_models(db: sqlalchemy.Engine):
    assert differences(db) == []
    downgrade(db, "base")
    assert tables(db) == set()
    upgrade(db)
    assert tables(db) == declared_tables(db)
    assert differences(db) == []


def test_0003_records_what_is_known_of_existing_jobs(db: sqlalchemy.Engine):
    """Jobs from before 0003 get change records, so that explain does not call an enabled
    job disabled for want of history."""
    downgrade(db, "0002")
    with db.begin() as conn:
        for name, enabled, paused in (
            ("on", True, False),
            ("off", False, False),
            ("p", True, True),
        ):
            state = "SUSPENDED" if paused else ("SCHEDULED" if enabled else "DISABLED")
            conn.execute(
                sqlalchemy.text(
                    "INSERT INTO jobs (project, name, kind, schedule, timezone, spec, revision,"
                    " enabled, paused, pause_reason, state, generation, invocation_running,"
                    " overruns, active, buffered, created_at, updated_at) VALUES ('m', :name,"
                    " 'noop', 'every 10s', 'UTC', '{}', 'r1', :enabled, :paused, :reason, :state,"
                    " 0, false, 0, 0, 0, '2026-01-01 00:00:00+00', '2026-01-02 00:00:00+00')"
                ),
                dict(
                    name=name,
                    enabled=enabled,
                    paused=paused,
                    reason="ops" if paused else None,
                    state=state,
                ),
            )
    upgrade(db)
    with db.connect() as conn:
        rows = conn.execute(
            sqlalchemy.text(
                "SELECT j.name, c.change, c.reason FROM job_changes c JOIN jobs j"
                " ON j.id = c.job_id ORDER BY j.name, c.id"
            )
        ).all()
    assert [tuple(r) for r in rows] == [
        ("off", "created", None),
        ("on", "created", None),
        ("on", "enabled", None),
        ("p", "created", None),
        ("p", "enabled", None),
        ("p", "paused", "ops"),
    ]


def _insert_job(conn: sqlalchemy.Connection, name: str) -> int:
    conn.execute(
        sqlalchemy.text(
            "INSERT INTO jobs (project, name, kind, schedule, timezone, spec, revision, enabled,"
            " paused, state, generation, invocation_running, overruns, active, buffered,"
            " created_at, updated_at) VALUES ('m', :name, 'celery', 'triggered', 'UTC', '{}',"
            " 'r1', true, false, 'SCHEDULED', 0, false, 0, 0, 0, '2026-01-01 00:00:00+00',"
            " '2026-01-01 00:00:00+00')"
        ),
        {"name": name},
    )
    query = sqlalchemy.text("SELECT id FROM jobs WHERE name = :name")
    return conn.execute(query, {"name": name}).scalar_one()


def _insert_run(conn: sqlalchemy.Connection, job_id: int, trigger: str) -> int:
    """A triggered run, as the schema of the moment takes it (0006 added ``filed_at``)."""
    columns = {c["name"] for c in sqlalchemy.inspect(conn).get_columns("invocations")}
    filed = ("", "") if "filed_at" not in columns else (", filed_at", ", '2026-01-01 00:00:00+00'")
    conn.execute(
        sqlalchemy.text(
            "INSERT INTO invocations (job_id, trigger_id, revision, status, attempt, created_at,"
            f" started_at, deadline, backfill{filed[0]}) VALUES (:job, :trigger, 'r1', 'RUNNING',"
            " 1, '2026-01-01 00:00:00+00', '2026-01-01 00:00:00+00', '2026-01-01 00:01:00+00',"
            f" false{filed[1]})"
        ),
        {"job": job_id, "trigger": trigger},
    )
    query = sqlalchemy.text("SELECT id FROM invocations WHERE trigger_id = :trigger")
    return conn.execute(query, {"trigger": trigger}).scalar_one()


def _everything(engine: sqlalchemy.Engine) -> dict[str, list[tuple[object, ...]]]:
    queries = {
        "jobs": "SELECT id, name FROM jobs ORDER BY id",
        "invocations": "SELECT id, job_id, trigger_id, status FROM invocations ORDER BY id",
        "revokes": "SELECT task_id, invocation_id FROM revokes ORDER BY task_id",
        "job_changes": "SELECT id, job_id, change FROM job_changes ORDER BY id",
    }
    with engine.connect() as conn:
        return {t: [tuple(r) for r in conn.execute(sqlalchemy.text(q))] for t, q in queries.items()}


def test_0005_keeps_every_row_and_id_and_never_hands_an_id_out_again(db: sqlalchemy.Engine):
    """SQLite's tables are rebuilt with AUTOINCREMENT (PostgreSQL's sequences already
    never reuse): every row and id is kept, rows that reference the rebuilt tables too
    (with foreign keys on, dropping the old table would have deleted them), up, down and
    up again. Then the last job and its run are deleted: no new row gets their ids, nor
    those of a job deleted before the upgrade."""
    downgrade(db, "0004")
    with db.begin() as conn:
        a, gap, last = (_insert_job(conn, name) for name in ("a", "gap", "last"))
        runs = [_insert_run(conn, job, f"t{job}") for job in (a, gap, last)]
        conn.execute(sqlalchemy.text("DELETE FROM jobs WHERE id = :id"), {"id": gap})
        conn.execute(
            sqlalchemy.text("INSERT INTO revokes VALUES (:task, :inv, '2026-01-01 00:00:00+00')"),
            {"task": f"cronchain-{runs[2]}-1", "inv": runs[2]},
        )
        conn.execute(
            sqlalchemy.text(
                "INSERT INTO job_changes (job_id, at, change, revision, schedule, timezone)"
                " VALUES (:job, '2026-01-01 00:00:00+00', 'created', 'r1', 'triggered', 'UTC')"
            ),
            {"job": last},
        )
        # Deleted before the upgrade, its start message perhaps still queued: its ids
        # must not come back either, although no row is left above them to say so.
        doomed = _insert_job(conn, "doomed")
        doomed_run = _insert_run(conn, doomed, "doomed")
        conn.execute(sqlalchemy.text("DELETE FROM jobs WHERE id = :id"), {"id": doomed})
    before = _everything(db)
    assert [len(rows) for rows in before.values()] == [2, 2, 1, 1]
    upgrade(db)
    assert _everything(db) == before
    downgrade(db, "0004")
    assert _everything(db) == before
    upgrade(db)
    assert _everything(db) == before
    assert differences(db) == []
    if db.dialect.name == "sqlite":
        with db.connect() as conn:
            query = "SELECT name, sql FROM sqlite_master WHERE name IN ('jobs', 'invocations')"
            sql = dict(conn.exec_driver_sql(query).all())
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1  # on again
        assert all("AUTOINCREMENT" in sql[t] for t in ("jobs", "invocations")), sql
    with db.begin() as conn:
        conn.execute(sqlalchemy.text("DELETE FROM jobs WHERE id = :id"), {"id": last})
    after = _everything(db)  # the references still hold: its rows went with it
    assert [len(rows) for rows in after.values()] == [1, 1, 0, 0]
    assert after["invocations"] == before["invocations"][:1]
    with db.begin() as conn:
        job = _insert_job(conn, "new")
        run = _insert_run(conn, job, "new")
    assert job > doomed > last and run > doomed_run > runs[2]


def test_a_new_database_numbers_from_one(db: sqlalchemy.Engine):
    """The margin 0005 leaves past ids deleted before an upgrade is for used tables: a
    new database's first job and invocation are 1."""
    with db.begin() as conn:
        job = _insert_job(conn, "first")
        run = _insert_run(conn, job, "first")
    assert (job, run) == (1, 1)


def _last_success(engine: sqlalchemy.Engine) -> dict[str, object]:
    with engine.connect() as conn:
        query = "SELECT name, last_success_at FROM jobs ORDER BY name"
        return {name: at and str(at)[:19] for name, at in conn.exec_driver_sql(query)}


def test_0007_finds_each_jobs_last_success_and_keeps_it(db: sqlalchemy.Engine):
    """The upgrade reads each job's newest success from the history; from then on the
    trigger keeps it as runs succeed (not when they fail), up, down and up again."""
    downgrade(db, "0006")
    with db.begin() as conn:
        done, failed, running = (_insert_job(conn, name) for name in ("done", "failed", "run"))
        for job, trigger in ((done, "d1"), (done, "d2"), (failed, "f1"), (running, "r1")):
            _insert_run(conn, job, trigger)
        finish = (
            "UPDATE invocations SET status = :status, finished_at = :at, deadline = NULL"
            " WHERE trigger_id = :trigger"
        )
        for trigger, status, at in (
            ("d1", "SUCCEEDED", "2026-01-01 00:02:00+00"),
            ("d2", "SUCCEEDED", "2026-01-01 00:05:00+00"),
            ("f1", "FAILED", "2026-01-01 00:03:00+00"),
        ):
            conn.execute(sqlalchemy.text(finish), {"trigger": trigger, "status": status, "at": at})
    upgrade(db)
    expected = {"done": "2026-01-01 00:05:00", "failed": None, "run": None}
    assert _last_success(db) == expected
    downgrade(db, "0006")
    upgrade(db)
    assert _last_success(db) == expected
    with db.begin() as conn:
        conn.execute(
            sqlalchemy.text(finish),
            {"trigger": "r1", "status": "SUCCEEDED", "at": "2026-01-01 00:09:00+00"},
        )
        conn.execute(
            sqlalchemy.text(finish),
            {"trigger": "d2", "status": "SUCCEEDED", "at": "2026-01-01 00:09:30+00"},
        )  # not a new success (already SUCCEEDED): the trigger leaves it
    assert _last_success(db) == {**expected, "run": "2026-01-01 00:09:00"}


def test_0008_counts_the_runs_that_end_from_the_upgrade_on(db: sqlalchemy.Engine):
    """Runs ended before the upgrade are not counted (the counters start there); each
    run that ends after it is, once; down again, ending a run counts nothing and fails
    nothing; up again, counting starts afresh."""
    finish = (
        "UPDATE invocations SET status = :status, finished_at = '2026-01-01 00:02:00+00',"
        " deadline = NULL WHERE trigger_id = :trigger"
    )

    def end(conn: sqlalchemy.Connection, trigger: str, status: str) -> None:
        conn.execute(sqlalchemy.text(finish), {"trigger": trigger, "status": status})

    def counted() -> dict[str, int]:
        with db.connect() as conn:
            query = "SELECT status, sum(count) FROM slot_outcomes GROUP BY status"
            return {status: int(n) for status, n in conn.exec_driver_sql(query)}

    downgrade(db, "0007")
    with db.begin() as conn:
        job = _insert_job(conn, "j")
        for trigger in ("before", "after", "twice", "down"):
            _insert_run(conn, job, trigger)
        end(conn, "before", "FAILED")
    upgrade(db)
    assert counted() == {}
    with db.begin() as conn:
        end(conn, "after", "SUCCEEDED")
        end(conn, "twice", "FAILED")
        end(conn, "twice", "FAILED")  # already ended: not counted again
    assert counted() == {"SUCCEEDED": 1, "FAILED": 1}
    downgrade(db, "0007")
    with db.begin() as conn:
        end(conn, "down", "ABORTED")
    upgrade(db)
    assert counted() == {}


def test_0009_counts_a_bulk_insert_once_per_statement(db: sqlalchemy.Engine):
    """Runs inserted ended by one statement (a tick batch's skips, a bulk load) are
    counted right, those the insert skips (ON CONFLICT) not at all; on PostgreSQL by a
    statement trigger: a row trigger made a statement of N such runs cost N²/2 steps
    (400,000 rows: about 19 minutes)."""
    with db.begin() as conn:
        job = _insert_job(conn, "bulk")
        conn.execute(
            sqlalchemy.text(
                "INSERT INTO invocations (job_id, trigger_id, revision, status, reason, attempt,"
                " created_at, finished_at, backfill, filed_at)"
                " VALUES (:job, 'a', 'r', 'SKIPPED', 'overlap', 0, :at, :at, false, :at),"
                " (:job, 'b', 'r', 'SKIPPED', 'overlap', 0, :at, :at, false, :at),"
                " (:job, 'c', 'r', 'SKIPPED', 'misfire', 0, :at, :at, false, :at),"
                " (:job, 'd', 'r', 'STARTING', NULL, 0, :at, NULL, false, :at)"
            ),
            {"job": job, "at": "2026-01-01 00:00:00+00"},
        )
        conn.execute(
            sqlalchemy.text(
                "INSERT INTO invocations (job_id, trigger_id, revision, status, reason, attempt,"
                " created_at, finished_at, backfill, filed_at)"
                " VALUES (:job, 'a', 'r', 'SKIPPED', 'overlap', 0, :at, :at, false, :at)"
                " ON CONFLICT DO NOTHING"
            ),
            {"job": job, "at": "2026-01-01 00:00:00+00"},
        )
    with db.connect() as conn:
        query = "SELECT reason, sum(count) FROM slot_outcomes GROUP BY reason"
        assert dict(conn.exec_driver_sql(query).all()) == {"overlap": 2, "misfire": 1}
        if db.dialect.name == "postgresql":
            query = "SELECT tgtype & 1 FROM pg_trigger WHERE tgname = 'invocations_count_inserted'"
            assert conn.exec_driver_sql(query).scalar_one() == 0  # FOR EACH STATEMENT


def test_0016_counts_what_one_update_ends_and_claims_once_per_statement(
    db: sqlalchemy.Engine,
):
    """Runs claimed, then ended, by one UPDATE each (an outcome group's, a batch's of
    no-ops) are counted as row by row they were: lags, outcomes, each job's successes,
    failures and run time; on PostgreSQL by one statement trigger (a row trigger added to
    one counter row N times in a statement: N²/2 steps)."""

    def typed(text: str) -> str:  # PostgreSQL types a CASE of strings as text
        return f"CAST({text} AS timestamptz)" if db.dialect.name == "postgresql" else text

    runs = {"a1": "a", "a2": "a", "b1": "b", "b2": "b", "b3": "b"}
    with db.begin() as conn:
        jobs = {name: _insert_job(conn, name) for name in ("a", "b")}
        for n, (trigger, job) in enumerate(runs.items()):
            _insert_run(conn, jobs[job], trigger)
            slot = f"2025-12-31 23:59:{('59.3', '58', '57', '56', '54')[n]}+00:00"
            conn.execute(
                sqlalchemy.text(
                    "UPDATE invocations SET slot = :slot, filed_at = :slot, worker = NULL"
                    " WHERE trigger_id = :t"
                ),
                {"slot": slot, "t": trigger},
            )
        conn.exec_driver_sql(
            "UPDATE invocations SET worker = 'w', started_at = '2026-01-01 00:00:00+00:00'"
        )
        ends = {
            "a1": ("SUCCEEDED", "00:02"),
            "a2": ("SUCCEEDED", "00:05"),
            "b1": ("FAILED", "00:03"),
            "b2": ("SUCCEEDED", "00:04"),
            "b3": ("ABORTED", "00:06"),
        }
        status = " ".join(f"WHEN '{t}' THEN '{s}'" for t, (s, _) in ends.items())
        at = " ".join(f"WHEN '{t}' THEN '2026-01-01 {m}:00+00:00'" for t, (_, m) in ends.items())
        end = (
            f"UPDATE invocations SET status = CASE trigger_id {status} END,"
            f" finished_at = {typed(f'CASE trigger_id {at} END')}, deadline = NULL"
        )
        conn.exec_driver_sql(end)
        conn.exec_driver_sql(end)  # ended already: counted once
    with db.connect() as conn:
        outcomes = "SELECT status, sum(count) FROM slot_outcomes GROUP BY status"
        assert {s: int(n) for s, n in conn.exec_driver_sql(outcomes)} == {
            "SUCCEEDED": 3,
            "FAILED": 1,
            "ABORTED": 1,
        }
        lags = "SELECT le, sum(count), sum(seconds) FROM fire_lags GROUP BY le"
        found = {le: (int(n), round(s, 3)) for le, n, s in conn.exec_driver_sql(lags)}
        # lags of 0.7, 2, 3, 4 and 6 s: each bucket counts those up to its bound
        assert found == {"1": (1, 0.7), "2.5": (1, 2.0), "5": (2, 7.0), "10": (1, 6.0)}
        kept = (
            "SELECT name, last_success_at, last_failure_at, failures, runs_timed, run_seconds"
            " FROM jobs ORDER BY name"
        )
        found = [
            (name, str(ok)[:16] if ok else None, str(ko)[:16] if ko else None, n, timed, round(s))
            for name, ok, ko, n, timed, s in conn.exec_driver_sql(kept)  # SQLite: julianday
        ]
        assert found == [
            ("a", "2026-01-01 00:05", None, 0, 2, 420),  # 2 + 5 minutes
            ("b", "2026-01-01 00:04", "2026-01-01 00:03", 1, 2, 420),  # 3 + 4
        ]
        if db.dialect.name == "postgresql":
            query = "SELECT tgtype & 1 FROM pg_trigger WHERE tgname = 'invocations_count_updated'"
            assert conn.exec_driver_sql(query).scalar_one() == 0  # FOR EACH STATEMENT


# Statements that end and claim runs, as the engine's paths make them: a claim of three
# (one a retry's, one a backfill's: not counted in the lag), a claim and an end in one
# statement, ends of several jobs at once (a failure that never started among them: r5), an
# update that ends nothing, and an end of a run ended already.
_UPDATES = (
    "UPDATE invocations SET status = 'RUNNING', worker = 'w',"
    " started_at = slot + interval '2 seconds' WHERE trigger_id IN ('r1', 'r2', 'r3')",
    "UPDATE invocations SET worker = 'w', started_at = slot + interval '30 seconds',"
    " status = 'SUCCEEDED', finished_at = slot + interval '40 seconds', deadline = NULL"
    " WHERE trigger_id = 'r4'",
    "UPDATE invocations SET status = CASE trigger_id WHEN 'r1' THEN 'SUCCEEDED'"
    " WHEN 'r2' THEN 'FAILED' ELSE 'FAILED' END, reason = CASE trigger_id WHEN 'r2'"
    " THEN 'timeout' END, finished_at = slot + interval '90 seconds', deadline = NULL"
    " WHERE trigger_id IN ('r1', 'r2', 'r5')",
    "UPDATE invocations SET deadline = deadline + interval '1 minute' WHERE status = 'RUNNING'",
    "UPDATE invocations SET status = 'ABORTED', reason = 'aborted', finished_at ="
    " slot + interval '95 seconds', deadline = NULL WHERE trigger_id IN ('r3', 'r1')",
)


def _counted_after_updates(pg_url: str, revision: str | None) -> tuple[object, ...]:
    """What the triggers of ``revision`` (None: the newest) count for ``_UPDATES``, on
    the migrated database at ``pg_url``."""
    db = make_engine(pg_url)
    try:
        if revision is not None:
            downgrade(db, revision)
        with db.begin() as conn:
            jobs = [_insert_job(conn, name) for name in ("a", "b", "c")]
            for n, (trigger, job, attempt, backfill) in enumerate(
                (
                    ("r1", jobs[0], 1, False),
                    ("r2", jobs[1], 2, False),
                    ("r3", jobs[2], 1, True),
                    ("r4", jobs[2], 1, False),
                    ("r5", jobs[2], 1, False),
                )
            ):
                _insert_run(conn, job, trigger)
                conn.execute(
                    sqlalchemy.text(
                        "UPDATE invocations SET slot = :slot, filed_at = :slot, worker = NULL,"
                        " status = 'STARTING', started_at = NULL, attempt = :attempt,"
                        " backfill = :backfill"
                        " WHERE trigger_id = :t"
                    ),
                    {
                        "slot": f"2026-01-01 00:0{n}:00+00",
                        "attempt": attempt,
                        "backfill": backfill,
                        "t": trigger,
                    },
                )
        for statement in _UPDATES:
            with db.begin() as conn:
                conn.exec_driver_sql(statement)
        with db.connect() as conn:
            return tuple(
                conn.exec_driver_sql(query).all()
                for query in (
                    "SELECT status, reason, sum(count) FROM slot_outcomes GROUP BY 1, 2"
                    " ORDER BY 1, 2",
                    "SELECT le, sum(count), sum(seconds) FROM fire_lags GROUP BY 1 ORDER BY 1",
                    "SELECT name, last_success_at, last_success_filed, last_failure_at,"
                    " failures, runs_timed, run_seconds FROM jobs ORDER BY name",
                )
            )
    finally:
        db.dispose()


def test_0016_counts_what_0015s_row_triggers_counted(
    pg_admin: sqlalchemy.Engine, pg_template: str, pg_url: str
):
    """The same statements, on PostgreSQL, counted by 0015's row triggers and by 0016's
    statement triggers: the same counters, the same outcomes on each job."""
    other = services.create_database(pg_admin, template=pg_template)
    try:
        before = _counted_after_updates(services.database_url(other), "0015")
    finally:
        services.drop_database(pg_admin, other)
    after = _counted_after_updates(pg_url, None)
    outcomes, lags, jobs = after
    assert len(outcomes) == 4 and lags and len(jobs) == 3  # it counted something
    assert after == before


def _nested_loops_over_transition_tables(plan: dict) -> int:
    """The nested loops of ``plan`` (auto_explain's JSON) that join two transition
    tables: each scans one of them again for every row of the other."""
    children = plan.get("Plans", [])
    found = sum(_nested_loops_over_transition_tables(child) for child in children)
    scans = [c.get("Plans", [c])[0] if c["Node Type"] == "Materialize" else c for c in children]
    both = sum(s["Node Type"] == "Named Tuplestore Scan" for s in scans) == 2
    return found + (plan["Node Type"] == "Nested Loop" and both)


def _loops_of_a_group(db: sqlalchemy.Engine) -> list[int]:
    """The nested loops over transition tables in the plans of each statement that the
    triggers ran for a group's claim and end of 200 runs in one UPDATE, in a session
    whose first UPDATE changed one run: PostgreSQL keeps a trigger's statement's first
    plan for the session."""
    with db.begin() as conn:
        conn.exec_driver_sql(
            "UPDATE invocations SET worker = NULL, status = 'RUNNING', finished_at = NULL"
        )
    db.dispose()  # a new session
    plans: list[dict] = []
    with db.begin() as conn:
        conn.exec_driver_sql("UPDATE invocations SET worker = 'w' WHERE trigger_id = 'r0'")
        log_plans(conn.connection.driver_connection, plans, local=True, nested=True)
        conn.exec_driver_sql(
            "UPDATE invocations SET worker = 'w', status = 'SUCCEEDED',"
            " finished_at = started_at + interval '1 second', deadline = NULL"
        )
    triggered = [p["Plan"] for p in plans if "after_update" in p["Query Text"]]
    assert len(triggered) == 3  # slot_outcomes, fire_lags, the jobs' outcomes
    return [_nested_loops_over_transition_tables(p) for p in triggered]


def test_0017_pairs_a_statements_runs_before_and_after_without_a_nested_loop(pg_url: str):
    """The statement triggers pair each run an UPDATE changed with its row before, in
    n log n steps whatever plan the session kept; 0016's joins, planned for the one run
    a session's first UPDATE changed, scanned one table for each row of the other: N²
    (an outcome group of a hundred runs, 10,000)."""
    db = make_engine(pg_url)
    try:
        with db.begin() as conn:
            job = _insert_job(conn, "a")
            for n in range(200):
                _insert_run(conn, job, f"r{n}")
            conn.exec_driver_sql(
                "UPDATE invocations SET slot = filed_at + id * interval '1 second',"
                " filed_at = filed_at + id * interval '1 second'"
            )
        assert _loops_of_a_group(db) == [0, 0, 0]
        downgrade(db, "0016")
        assert sum(_loops_of_a_group(db)) > 0  # what this test would see of 0016's
    finally:
        db.dispose()
