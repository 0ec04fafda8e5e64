"""The engine on real databases (SQLite and PostgreSQL) with a recording port and a fixed
clock: the chain's steps, what is committed before what is sent, and the watchdog."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy
from sqlalchemy import select, update

from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.errors import TransientError
from cronchain.scheduler.invokers import Call, Outcome, default_invokers
from cronchain.scheduler.maintenance import watchdog
from cronchain.scheduler.storage import job_store, run_store
from cronchain.scheduler.storage.models import invocations, jobs
from cronchain.statemachine import InvalidTransition, InvocationStatus
from tests.support.deliver import deliver_runs, deliver_starts, deliver_ticks
from tests.support.engine import Clock, DroppingPort, RecordingPort, WorkerDied
from tests.support.jobs import apply, make
from tests.support.rows import job, rows

pytestmark = pytest.mark.postgres


def test_apply_commits_the_job_then_sends_its_first_tick(
    engine: Engine, port: RecordingPort, clock: Clock
):
    apply(engine, make())
    row = job(engine)
    assert row.snapshot.state == "SCHEDULED"
    assert port.ticks == [(row.id, row.snapshot.tick_nonce, clock.now + timedelta(seconds=10))]
    assert row.watchdog_at == clock.now + timedelta(seconds=25)  # eta + grace


def test_one_fire_is_one_tick_and_one_start(engine: Engine, port: RecordingPort, clock: Clock):
    apply(engine, make())
    clock.advance(10)
    deliver_ticks(engine, port)
    [inv] = rows(engine)
    assert (inv["status"], inv["slot"]) == ("STARTING", clock.now)
    assert port.starts == [inv["id"]] and len(port.ticks) == 1  # the next slot's tick
    deliver_starts(engine, port)
    [inv] = rows(engine)
    assert (inv["status"], inv["attempt"], inv["error"]) == ("SUCCEEDED", 1, None)
    assert job(engine).snapshot.state == "SCHEDULED"
    assert job(engine).snapshot.tick_at == clock.now + timedelta(seconds=10)


def test_the_tick_begins_its_run_and_sends_it_to_the_work_path(
    db: sqlalchemy.Engine, port: RecordingPort, clock: Clock
):
    engine = Engine(db, port, default_invokers(), grace=timedelta(seconds=15), clock=clock)
    apply(engine, make(sleep=5))
    clock.advance(10)
    [(job_id, nonce, _)] = port.ticks
    engine.tick(job_id, nonce, start_here=True)  # returns at once: the run is not made here
    [inv] = rows(engine)
    assert (inv["status"], inv["attempt"], inv["worker"]) == ("RUNNING", 1, None)  # unclaimed
    assert port.starts == []  # no start message: the tick began the run
    assert [(c.invocation_id, c.attempt, c.kind) for c in port.runs] == [(inv["id"], 1, "noop")]
    clock.advance(0.5)
    make_instant = update(jobs).values(spec={"noop": {"sleep": 0, "fail": False}})
    with engine.transaction() as conn:
        conn.execute(make_instant)
    deliver_runs(engine, port)
    [inv] = rows(engine)
    assert (inv["status"], inv["worker"]) == ("SUCCEEDED", "work@test")
    assert inv["started_at"] == clock.now  # claimed now: the lease counts from here


def test_a_run_started_here_commits_with_its_tick(
    db: sqlalchemy.Engine, clock: Clock, monkeypatch: pytest.MonkeyPatch
):
    port = RecordingPort()
    engine = Engine(db, port, default_invokers(), grace=timedelta(seconds=15), clock=clock)
    apply(engine, make())
    clock.advance(10)
    [(job_id, nonce, _)] = port.ticks
    port.clear()

    def database_gone(*_: Any, **__: Any) -> None:
        raise TransientError("database unavailable")

    with monkeypatch.context() as patched:  # the job's save, after the run's insert
        patched.setattr(job_store, "save_job", database_gone)
        patched.setattr(job_store, "save_jobs", database_gone)
        with pytest.raises(TransientError):
            engine.tick(job_id, nonce, start_here=True)
    assert rows(engine) == [] and port.ticks == []  # the run was rolled back with its tick
    assert job(engine).snapshot.tick_nonce == nonce  # so Celery's retry fires the slot

    engine.tick(job_id, nonce, start_here=True)
    deliver_runs(engine, port)
    [inv] = rows(engine)
    assert (inv["status"], inv["slot"], inv["attempt"]) == ("SUCCEEDED", clock.now, 1)


def test_stale_and_repeated_ticks_fire_nothing(engine: Engine, port: RecordingPort, clock: Clock):
    apply(engine, make())
    clock.advance(10)
    [(job_id, nonce, _)] = port.ticks
    engine.tick(job_id, nonce)
    engine.tick(job_id, nonce)  # a redelivery of the same message
    engine.tick(job_id, nonce + 1)  # a message nobody sent
    assert len(rows(engine)) == 1
    assert len(port.starts) == 1


def test_a_crash_between_commit_and_send_is_repaired(db: sqlalchemy.Engine, clock: Clock):
    dropping = Engine(db, DroppingPort(), {}, grace=timedelta(seconds=15), clock=clock)
    apply(dropping, make())  # committed; the first tick was never sent
    assert job(dropping).snapshot.state == "SCHEDULED"

    port = RecordingPort()
    engine = Engine(db, port, dropping.invokers, grace=dropping.grace, clock=clock)
    clock.advance(24)
    assert watchdog.run_once(engine).repairs == 0  # not overdue yet: eta 10 s + grace 15 s
    clock.advance(2)
    assert watchdog.run_once(engine).ticks == 1
    assert watchdog.run_once(engine).repairs == 0  # the repair's grace counts from now
    [(_, nonce, eta)] = port.ticks
    assert eta == clock.now  # overdue since 16 s: it goes out to run at once
    deliver_ticks(engine, port)
    # 16 s late is past the 10 s misfire grace: the newest slot runs, the older is recorded.
    ledger = [(r["slot"], r["status"], r["reason"]) for r in rows(engine)]
    assert ledger == [
        (clock.now - timedelta(seconds=16), "SKIPPED", "misfire"),
        (clock.now - timedelta(seconds=6), "STARTING", None),
    ]


def test_a_repair_has_longer_to_arrive_than_a_regular_tick(db: sqlalchemy.Engine, clock: Clock):
    """A mass repair queues thousands of ticks at once: repairing the slowest again, with
    a new nonce and at the back of the queue, would keep the queue from ever draining."""
    dropping = Engine(db, DroppingPort(), {}, grace=timedelta(seconds=15), clock=clock)
    apply(dropping, make())
    clock.advance(26)
    port = RecordingPort()
    engine = Engine(db, port, {}, grace=timedelta(seconds=15), clock=clock)
    assert engine.repair_grace == timedelta(seconds=45)
    assert watchdog.run_once(engine).ticks == 1
    clock.advance(44)  # long past a regular tick's grace: still on its way
    assert watchdog.run_once(engine).repairs == 0
    clock.advance(2)  # lost again
    assert watchdog.run_once(engine).ticks == 1


def test_a_watchdog_that_waited_holds_back_repairs_of_ticks_as_late_as_itself(
    db: sqlalchemy.Engine, clock: Clock
):
    """Behind a backlog, ticks and the watchdog's own run wait in the same queue: a tick
    overdue by less than the watchdog waited is late, not lost. Resent with a new
    nonce, it would be done twice and the backlog would grow."""
    dropping = Engine(db, DroppingPort(), {}, grace=timedelta(seconds=15), clock=clock)
    apply(dropping, make())
    port = RecordingPort()
    engine = Engine(db, port, {}, grace=timedelta(seconds=15), clock=clock)
    clock.advance(30)  # overdue since 5 s (eta 10 s + grace 15 s)
    assert watchdog.run_once(engine, backlog=timedelta(seconds=8)).repairs == 0
    assert watchdog.sweep(engine, budget=60, backlog=timedelta(seconds=8)).repairs == 0
    assert watchdog.run_once(engine, backlog=timedelta(seconds=4)).ticks == 1


def test_a_sweep_repairs_a_mass_loss_in_one_run(db: sqlalchemy.Engine, clock: Clock):
    dropping = Engine(db, DroppingPort(), {}, grace=timedelta(seconds=15), clock=clock)
    apply(dropping, *(make(name=f"j{i}") for i in range(7)))  # every first tick lost
    port = RecordingPort()
    engine = Engine(db, port, dropping.invokers, grace=dropping.grace, clock=clock)
    clock.advance(26)
    assert watchdog.run_once(engine, limit=3).ticks == 3  # one pass: one batch
    assert watchdog.sweep(engine, budget=60, limit=3).ticks == 4  # the rest, in batches
    assert watchdog.sweep(engine, budget=60, limit=3).repairs == 0
    assert len(port.ticks) == 7
    # Each pass's repairs go out now, together: a batch per pass, a lone one on its own.
    assert [len(batch) for batch in port.batches] == [3, 3]


def test_a_lost_start_is_sent_again(engine: Engine, port: RecordingPort, clock: Clock):
    apply(engine, make())
    clock.advance(10)
    deliver_ticks(engine, port)
    port.starts.clear()  # the start message is lost
    clock.advance(16)
    report = watchdog.run_once(engine)
    assert report.starts == 1
    deliver_starts(engine, port)
    assert [r["status"] for r in rows(engine)] == ["SUCCEEDED"]


class HangingInvoker:
    """Claims and never reports, like a worker that died mid-run."""

    def invoke(self, call: Call) -> Outcome:
        raise WorkerDied


def test_a_lapsed_lease_fails_the_run_and_frees_the_job(db: sqlalchemy.Engine, clock: Clock):
    port = RecordingPort()
    engine = Engine(db, port, {"noop": HangingInvoker()}, grace=timedelta(seconds=15), clock=clock)
    apply(engine, make("triggered"))
    Scheduler(engine).trigger("p/a")
    deliver_starts(engine, port)
    assert job(engine).snapshot.state == "RUNNING"
    clock.advance(59)  # the default lease is 60 s; nothing renews it
    assert watchdog.run_once(engine).expired == 0
    clock.advance(2)
    assert watchdog.run_once(engine).expired == 1
    [inv] = rows(engine)
    assert (inv["status"], inv["error"]) == ("FAILED", "lease expired")
    assert job(engine).snapshot.state == "SCHEDULED"
    # The run's own report arrives late: it changes nothing.
    assert engine.runs.finish_invocation(inv["id"], Outcome(InvocationStatus.SUCCEEDED)) is False
    assert rows(engine)[0]["status"] == "FAILED"


def test_the_database_refuses_a_second_invocation_for_a_slot(engine: Engine, clock: Clock):
    apply(engine, make())
    row = job(engine)
    values = dict(slot=clock.now, trigger_id=None, revision="r", now=clock.now)
    with engine.db.begin() as conn:
        assert run_store.insert_invocation(conn, row.id, status="STARTING", **values) is not None
        assert (
            run_store.insert_invocation(conn, row.id, status="SKIPPED", reason="x", **values)
            is None
        )
    with pytest.raises(sqlalchemy.exc.IntegrityError), engine.db.begin() as conn:
        conn.execute(
            invocations.insert().values(
                job_id=row.id,
                slot=clock.now,
                revision="r",
                status="STARTING",
                attempt=0,
                created_at=clock.now,
            )
        )


def test_the_database_ties_states_to_their_fields(engine: Engine):
    apply(engine, make())
    with pytest.raises(sqlalchemy.exc.IntegrityError), engine.db.begin() as conn:
        conn.execute(update(jobs).values(state="SUSPENDED"))  # paused is false
    with pytest.raises(sqlalchemy.exc.IntegrityError), engine.db.begin() as conn:
        conn.execute(update(jobs).values(tick_nonce=None))  # tick_at is set


def test_trigger_pause_resume(engine: Engine, port: RecordingPort, clock: Clock):
    sched = Scheduler(engine)
    apply(engine, make("every 1h"))
    first = sched.trigger("p/a")
    assert first["invocation"] is not None
    second = sched.trigger("a")  # a unique name needs no project
    # Since issue 15 a trigger says what happened, and names the row it recorded.
    assert second == {
        "trigger_id": second["trigger_id"],
        "result": "skipped",
        "invocation": first["invocation"] + 1,
        "status": "SKIPPED",
        "skipped": "overlap",
        "waiting": None,
    }
    deliver_starts(engine, port)
    sched.pause("p/a", "maintenance")
    row = job(engine)
    assert (row.snapshot.state, row.paused, row.watchdog_at) == ("SUSPENDED", True, None)
    with pytest.raises(InvalidTransition):
        sched.trigger("p/a")
    clock.advance(7200)
    port.clear()
    sched.resume("p/a")
    row = job(engine)
    assert (row.snapshot.state, row.paused) == ("SCHEDULED", False)
    assert row.snapshot.tick_at == clock.now + timedelta(hours=1)  # not the missed slots
    assert port.ticks == []  # an hour away: parked until it is within the horizon
    assert row.watchdog_at == row.snapshot.tick_at - engine.horizon
    statuses = [(h["status"], h["reason"]) for h in sched.history("p/a")]
    paused = [("SKIPPED", "paused")] * 2  # the two hourly slots missed while paused
    assert statuses == [*paused, ("SKIPPED", "overlap"), ("SUCCEEDED", None)]


def test_apply_is_declarative(engine: Engine, port: RecordingPort, clock: Clock):
    report = apply(engine, make(name="a"), make(name="b"))
    assert (report.created, report.updated) == (["p/a", "p/b"], [])
    before = job(engine, "p/a")
    port.clear()

    report = apply(engine, make(name="a"), make(name="b"))
    assert report.unchanged == ["p/a", "p/b"]
    assert job(engine, "p/a") == before and port.ticks == []  # not even updated_at

    clock.advance(3)
    report = apply(engine, make("every 1m", name="a"))
    assert (report.updated, report.disabled) == (["p/a"], ["p/b"])
    moved = job(engine, "p/a")
    assert moved.snapshot.tick_at == clock.now.replace(second=0) + timedelta(minutes=1)
    assert moved.snapshot.tick_nonce != before.snapshot.tick_nonce
    assert job(engine, "p/b").snapshot.state == "DISABLED"

    report = apply(engine, make(name="a"), make(name="b"), dry_run=True)
    assert (report.updated, report.created) == (["p/a", "p/b"], [])
    assert job(engine, "p/b").snapshot.state == "DISABLED"


def test_celery_jobs_finish_when_the_worker_reports(engine: Engine, port: RecordingPort):
    apply(engine, make("triggered", kind="celery", task="etl.run", queue="etl"))
    inv = Scheduler(engine).trigger("p/a")["invocation"]
    deliver_starts(engine, port)
    assert port.tasks == [("etl.run", inv, 1)]
    assert job(engine).snapshot.state == "RUNNING"
    assert engine.runs.finish_invocation(inv, Outcome(InvocationStatus.SUCCEEDED)) is True
    repeated = engine.runs.finish_invocation(inv, Outcome(InvocationStatus.FAILED))
    assert repeated is False
    assert rows(engine)[0]["status"] == "SUCCEEDED"
    assert job(engine).snapshot.state == "SCHEDULED"


class CommittedCheckingPort(RecordingPort):
    """At the moment of each send, reads the database through another connection: what
    the message announces must already be committed."""

    def __init__(self, db: sqlalchemy.Engine):
        super().__init__()
        self.db = db

    def tick_later(self, job_id: int, nonce: int, eta: Any) -> None:
        with self.db.connect() as conn:
            pending = conn.execute(select(jobs.c.tick_nonce).where(jobs.c.id == job_id))
            assert pending.scalar_one() == nonce, "tick sent before its nonce was committed"
        super().tick_later(job_id, nonce, eta)

    def tick_batch(self, ticks: list[tuple[int, int]], eta: Any) -> None:
        for job_id, nonce in ticks:
            self.tick_later(job_id, nonce, eta)

    def start_invocation(self, invocation_id: int, attempt: Any = None, eta: Any = None) -> None:
        with self.db.connect() as conn:
            status = conn.execute(
                select(invocations.c.status).where(invocations.c.id == invocation_id)
            ).scalar_one()
            assert status == "STARTING", "start sent before its invocation was committed"
        super().start_invocation(invocation_id, attempt, eta)


def test_every_message_is_sent_after_its_state_is_committed(db: sqlalchemy.Engine, clock: Clock):
    port = CommittedCheckingPort(db)
    engine = Engine(db, port, default_invokers(), grace=timedelta(seconds=15), clock=clock)
    apply(engine, make())
    for _ in range(3):
        clock.advance(10)
        deliver_ticks(engine, port)  # the port asserts inside each send
        deliver_starts(engine, port)
    assert [r["status"] for r in rows(engine)] == ["SUCCEEDED"] * 3


def test_reads_do_not_wait_for_a_writer(engine: Engine):
    """On SQLite only write transactions take the write lock; `jobs` and `history` read
    while the worker writes."""
    apply(engine, make())
    with engine.transaction():  # a writer holds the lock
        assert [j["id"] for j in Scheduler(engine).jobs()] == ["p/a"]


class _ServerError(Exception):
    """What the driver raises, with the server's SQLSTATE."""

    def __init__(self, message: str, sqlstate: str | None):
        super().__init__(message)
        self.sqlstate = sqlstate


@pytest.mark.parametrize(
    ("sqlstate", "said"),
    [("40P01", "database transaction failed: deadlock"), ("08006", "database unavailable")],
)
def test_a_failed_transaction_says_whether_the_database_was_there(
    engine: Engine, sqlstate: str, said: str
):
    """A deadlock is logged as a failed transaction, not as the database's absence."""
    failure = sqlalchemy.exc.OperationalError("UPDATE", {}, _ServerError("deadlock", sqlstate))
    with pytest.raises(TransientError, match=said), engine.transaction():
        raise failure
