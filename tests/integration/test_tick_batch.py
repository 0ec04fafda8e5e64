"""A tick batch is one transaction (``scheduler.core.tick_batch``): exactly once per slot
still holds for every job in it, one job's bad row does not fail the others, a lone
tick is a batch of one, and the rows written are those ``Core.feed`` writes for a tick
(the path of every other event)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy
from sqlalchemy import update

from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.errors import TransientError
from cronchain.scheduler.invokers import default_invokers
from cronchain.scheduler.spec.jobspec import JobSpec
from cronchain.scheduler.storage import job_store, run_store
from cronchain.scheduler.storage.db import make_engine
from cronchain.scheduler.storage.models import jobs
from cronchain.scheduler.storage.rows import JobRow
from cronchain.scheduler.workers import work
from cronchain.statemachine import Tick
from tests.support.deliver import sent
from tests.support.engine import GRACE, Clock, RecordingPort
from tests.support.jobs import alerting_job_file, apply, make
from tests.support.rows import alert_rows, described, job, rows

pytestmark = pytest.mark.postgres


def batching_engine(db: sqlalchemy.Engine, clock: Clock, port: RecordingPort) -> Engine:
    return Engine(db, port, default_invokers(), grace=GRACE, clock=clock, batch=100)


def filed_elsewhere(engine: Engine, job: JobRow, slot: datetime) -> None:
    """``job``'s ``slot`` gets its row outside the batch (as a repaired tick's would)."""
    with engine.transaction() as conn:
        run_store.insert_invocation(
            conn, job.id, slot=slot, trigger_id=None, revision=job.revision,
            status="SKIPPED", reason="test", now=slot,
        )  # fmt: skip


def runs_of(engine: Engine) -> dict[int, list[str]]:
    found: dict[int, list[str]] = {}
    for r in rows(engine):
        found.setdefault(r["job_id"], []).append(r["status"])
    return found


def test_deleted_paused_and_stale_jobs_in_a_batch_leave_the_others_one_run_each(
    db: sqlalchemy.Engine, clock: Clock
):
    port = RecordingPort()
    engine = batching_engine(db, clock, port)
    apply(engine, *(make(name=name) for name in "abcde"))
    ids = {name: job(engine, f"p/{name}").id for name in "abcde"}
    clock.advance(10)
    ticks = sent(port)
    with engine.transaction() as conn:
        job_store.delete_jobs(conn, [ids["c"]])
    Scheduler(engine).pause("p/d")
    stale = [(j, n + 1) if j == ids["e"] else (j, n) for j, n in ticks]

    engine.tick_many(stale, start_here=True)
    engine.tick_many(stale, start_here=True)  # redelivered
    assert runs_of(engine) == {ids["a"]: ["RUNNING"], ids["b"]: ["RUNNING"]}
    assert len(port.runs) == 2
    assert sorted(j for j, *_ in port.ticks) == [ids["a"], ids["b"]]  # each one next tick
    e = job(engine, "p/e").snapshot  # still waiting for its tick's right nonce
    assert (e.state, e.tick_nonce) == ("SCHEDULED", dict(ticks)[ids["e"]])


def test_a_slot_that_has_its_run_is_not_fired_again(db: sqlalchemy.Engine, clock: Clock):
    """A's slot got its row elsewhere (say, a repaired tick raced the original): the
    batch's insert skips it, a's tick abandons its start as ``Core.feed`` does, and
    b fires."""
    port = RecordingPort()
    engine = batching_engine(db, clock, port)
    apply(engine, make(name="a"), make(name="b"))
    a, b = job(engine, "p/a"), job(engine, "p/b")
    clock.advance(10)
    ticks = sent(port)
    filed_elsewhere(engine, a, clock.now)
    engine.tick_many(ticks, start_here=True)
    assert runs_of(engine) == {a.id: ["SKIPPED"], b.id: ["RUNNING"]}
    after = job(engine, "p/a").snapshot
    assert (after.state, after.active, after.tick_at) == (
        "SCHEDULED",
        0,
        clock.now + timedelta(seconds=10),
    )
    assert [call.job_id for call in port.runs] == [b.id]


def test_one_jobs_bad_row_does_not_fail_the_others(
    db: sqlalchemy.Engine, clock: Clock, caplog: pytest.LogCaptureFixture
):
    """B's stored spec lost its kind's section: its step fails. The batch is rolled
    back and fed one job per transaction, so that a and c fire and b alone is left to
    the watchdog (its deadline unmoved)."""
    port = RecordingPort()
    engine = batching_engine(db, clock, port)
    apply(engine, *(make(name=name) for name in "abc"))
    ids = {name: job(engine, f"p/{name}").id for name in "abc"}
    with engine.transaction() as conn:
        conn.execute(update(jobs).where(jobs.c.id == ids["b"]).values(spec={}))
    deadline = job(engine, "p/b").watchdog_at
    clock.advance(10)
    with caplog.at_level(logging.ERROR, "cronchain.engine"):
        engine.tick_many(sent(port), start_here=True)
    assert runs_of(engine) == {ids["a"]: ["RUNNING"], ids["c"]: ["RUNNING"]}
    assert job(engine, "p/b").watchdog_at == deadline
    assert [r.message for r in caplog.records] == [
        "a batch of 3 ticks failed; feeding them one by one",
        f"tick of job {ids['b']} failed; the watchdog will repeat it",
    ]


SPECS: dict[str, dict[str, Any]] = {
    "plain": {},
    "skip": {"overlap": "skip"},
    "buffer": {"overlap": "buffer_one"},
    "all": {"overlap": "buffer_all", "max_buffered": 2},
    "allow": {"overlap": "allow", "max_concurrent": 2},
    "cancel": {"overlap": "cancel_other"},
    "latest": {"misfire": "latest", "misfire_grace": 2},
    "catchup": {"misfire": "all", "misfire_grace": 2, "catchup_limit": 3},
    "late": {"misfire": "skip", "misfire_grace": 2},
}


def test_a_lone_ticks_failure_is_raised_and_writes_nothing(db: sqlalchemy.Engine, clock: Clock):
    """A lone tick is a batch of one: its job's bad row fails the tick's task (logged by
    Celery), with nothing written or sent and the deadline left for the watchdog."""
    port = RecordingPort()
    engine = batching_engine(db, clock, port)
    apply(engine, make(name="b"))
    b = job(engine, "p/b")
    with engine.transaction() as conn:
        conn.execute(update(jobs).where(jobs.c.id == b.id).values(spec={}))
    clock.advance(10)
    ((job_id, nonce),) = sent(port)
    with pytest.raises(KeyError):
        engine.tick(job_id, nonce, start_here=True)
    assert rows(engine) == [] and port.runs == port.ticks == []
    assert job(engine, "p/b").watchdog_at == b.watchdog_at


def test_a_fault_of_the_batch_path_stops_no_job(
    db: sqlalchemy.Engine, clock: Clock, monkeypatch: pytest.MonkeyPatch
):
    """The batch's own insert fails (a bug of its code, not the database's absence): a
    lone tick and the ticks of a batch are each fed again through ``Core.feed``, and
    every job fires its slot once."""
    port = RecordingPort()
    engine = batching_engine(db, clock, port)
    apply(engine, *(make(name=name) for name in "abc"))

    def broken(*_: Any, **__: Any) -> None:
        raise RuntimeError("a bug of the batch path")

    monkeypatch.setattr(run_store, "insert_invocations", broken)
    clock.advance(10)
    lone, *batch = sent(port)
    engine.tick(*lone, start_here=True)
    engine.tick_many(batch, start_here=True)
    assert sorted(r["status"] for r in rows(engine)) == ["RUNNING"] * 3
    assert len(port.runs) == len(port.ticks) == 3


def fed_alone(engine: Engine, job_id: int, nonce: int, start_here: bool) -> None:
    """A tick fed as any other event is, by ``Core.feed`` in a transaction of its own."""
    with engine.transaction() as conn:
        locked = job_store.lock_job(conn, job_id)
        assert locked is not None
        fed = engine.feed(conn, locked, Tick(nonce), engine.clock(), start_here=start_here)
    engine.send(fed.messages)


@pytest.mark.parametrize("start_here", [True, False])
def test_a_batch_writes_the_rows_that_feed_writes(
    db: sqlalchemy.Engine, clock: Clock, start_here: bool, caplog: pytest.LogCaptureFixture
):
    """The same jobs in two projects, through the same rounds: ticks that start runs,
    overlap (skipped, buffered, allowed, cancelled), misfires after a late round, runs
    finishing. One project's ticks go as batches, the other's through ``Core.feed``,
    one at a time."""
    port = RecordingPort()
    engine = batching_engine(db, clock, port)
    for project in ("batch", "each"):
        specs = [
            JobSpec(project, n, "every 10s", kind="noop", controls=c) for n, c in SPECS.items()
        ]
        Scheduler(engine).apply(specs, project=project)
    batched = {job(engine, f"batch/{n}").id for n in SPECS}
    for advance, finish in ((10, False), (10, False), (10, True), (35, False), (10, True)):
        clock.advance(advance)
        due = [(j, n) for j, n, eta in port.ticks if eta <= clock.now]
        port.ticks[:] = [t for t in port.ticks if t[2] > clock.now]
        engine.tick_many([t for t in due if t[0] in batched], start_here=start_here)
        for tick in (t for t in due if t[0] not in batched):
            fed_alone(engine, *tick, start_here=start_here)
        for invocation_id in port.starts:
            engine.attempts.start_invocation(invocation_id)
        port.starts.clear()
        if finish:
            for call in port.runs:
                work.execute(engine, call.invocation_id, call.attempt, "work@test")
            port.runs.clear()
    assert described(engine, "batch") == described(engine, "each")
    assert len(described(engine, "batch")[1]) > 30
    assert "one by one" not in caplog.text  # the batches were written as batches


def test_a_connection_lost_mid_batch_loses_and_doubles_nothing(pg_url: str, clock: Clock):
    """PostgreSQL ends the batch's session between its insert and its update, as a
    restart does: nothing of the batch is written or sent, the error is one Celery
    retries, and the retry fires every job once."""
    db = make_engine(pg_url)
    port = RecordingPort()
    engine = batching_engine(db, clock, port)
    apply(engine, *(make(name=name) for name in "abc"))
    clock.advance(10)
    ticks = sent(port)
    killed: list[int] = []

    def kill_after_insert(conn, cursor, statement, *_):  # noqa: ANN001
        if statement.startswith("INSERT INTO invocations") and not killed:
            pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
            with db.connect() as other:
                other.exec_driver_sql(f"SELECT pg_terminate_backend({pid})")
            killed.append(pid)

    sqlalchemy.event.listen(db, "after_cursor_execute", kill_after_insert)
    try:
        with pytest.raises(TransientError):
            engine.tick_many(ticks, start_here=True)
    finally:
        sqlalchemy.event.remove(db, "after_cursor_execute", kill_after_insert)
    assert killed and rows(engine) == [] and port.runs == port.ticks == []
    engine.tick_many(ticks, start_here=True)
    engine.tick_many(ticks, start_here=True)
    assert [r["status"] for r in rows(engine)] == ["RUNNING"] * 3
    assert len(port.runs) == len(port.ticks) == 3
    db.dispose()


def test_a_full_batch_writes_without_a_temporary_table(pg_url: str, clock: Clock):
    """A batch as large as the default (100, and more): the jobs' saves are one
    executemany, never ``bulk.update``'s temporary table (which would need the TEMP
    privilege and write the catalog at every batch), and every job fires once."""
    db = make_engine(pg_url)
    port = RecordingPort()
    engine = Engine(db, port, default_invokers(), grace=GRACE, clock=clock, batch=1000)
    apply(engine, *(make(name=f"j{i:03}") for i in range(150)))
    clock.advance(10)
    statements: list[str] = []
    sqlalchemy.event.listen(db, "before_cursor_execute", lambda *a: statements.append(a[2]))
    engine.tick_many(sent(port), start_here=True)
    assert not [s for s in statements if "TEMPORARY" in s or s.startswith("COPY")]
    assert [r["status"] for r in rows(engine)] == ["RUNNING"] * 150
    assert len(port.runs) == len(port.ticks) == 150
    db.dispose()


def test_a_late_tick_s_skips_alert_though_its_start_s_slot_has_its_run(
    db: sqlalchemy.Engine, clock: Clock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """flaky's tick comes 30 s late (``misfire: latest``): the batch writes its three
    missed slots SKIPPED, and would start the latest, whose run exists already, so the
    tick is fed through ``Core.feed``, which abandons that start. The skips the batch
    wrote raise their alerts all the same."""
    monkeypatch.setenv("TEST_HOOK_URL", "http://127.0.0.1:9/")
    port = RecordingPort()
    engine = batching_engine(db, clock, port)
    path = alerting_job_file(tmp_path / "jobs.yaml", fail=False, on="[skipped]")
    text = path.read_text().replace("    alerts:", "    misfire: latest\n    alerts:")
    path.write_text(text + "  - name: other\n    schedule: every 10s\n    noop: {}\n")
    Scheduler(engine).apply(path)
    flaky = job(engine, "p/flaky")
    ticks = sent(port)
    clock.advance(40)
    filed_elsewhere(engine, flaky, clock.now)
    engine.tick_many(ticks, start_here=True)
    skips = [r for r in rows(engine) if r["job_id"] == flaky.id and r["reason"] != "test"]
    assert [r["status"] for r in skips] == ["SKIPPED"] * 3
    alerted = sorted(r["invocation_id"] for r in alert_rows(engine) if r["event"] == "skipped")
    assert alerted == sorted(r["id"] for r in skips)
