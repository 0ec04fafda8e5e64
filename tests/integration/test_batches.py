"""Ticks of jobs due at the same instant travel in one message and run in one task, and
each is still checked against its own nonce."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
import sqlalchemy
from sqlalchemy import Connection

from cronchain.scheduler.engine import Engine
from cronchain.scheduler.errors import TransientError
from cronchain.scheduler.invokers import default_invokers
from cronchain.scheduler.maintenance import watchdog
from cronchain.scheduler.storage import run_store
from cronchain.scheduler.storage.db import make_engine
from cronchain.scheduler.workers import work
from tests.support.deliver import deliver_runs, sent
from tests.support.engine import GRACE, Clock, RecordingPort
from tests.support.jobs import apply, make
from tests.support.locks import wait_for_lock_wait
from tests.support.rows import job, rows

pytestmark = pytest.mark.postgres


def batching_engine(db: sqlalchemy.Engine, clock: Clock, port: RecordingPort) -> Engine:
    return Engine(db, port, default_invokers(), grace=GRACE, clock=clock, batch=2)


def test_jobs_due_together_tick_together(db: sqlalchemy.Engine, clock: Clock):
    port = RecordingPort()
    engine = batching_engine(db, clock, port)
    apply(engine, *(make(name=name) for name in "abc"))
    assert [len(batch) for batch in port.batches] == [2]  # and the third on its own
    assert {eta for *_, eta in port.ticks} == {clock.now + timedelta(seconds=10)}

    clock.advance(10)
    engine.tick_many(sent(port), start_here=True)
    assert port.starts == []  # every run was begun in the batch's own task
    assert len(port.runs) == 3  # and sent to the work path
    assert [len(batch) for batch in port.batches] == [2]  # the next slot's ticks: together
    assert len(port.ticks) == 3
    deliver_runs(engine, port)
    assert [(r["status"], r["slot"]) for r in rows(engine)] == [("SUCCEEDED", clock.now)] * 3


def test_each_tick_of_a_batch_is_checked_against_its_own_nonce(db: sqlalchemy.Engine, clock: Clock):
    port = RecordingPort()
    engine = batching_engine(db, clock, port)
    apply(engine, make(name="a"), make(name="b"))
    clock.advance(10)
    (a, a_nonce), (b, b_nonce) = sent(port)
    engine.tick_many([(a, a_nonce), (b, b_nonce + 1), (a, a_nonce)], start_here=True)
    deliver_runs(engine, port)
    assert [(r["job_id"], r["status"]) for r in rows(engine)] == [(a, "SUCCEEDED")]
    engine.tick_many([(a, a_nonce), (b, b_nonce)], start_here=True)  # a redelivery
    deliver_runs(engine, port)
    assert [(r["job_id"], r["status"]) for r in rows(engine)] == [
        (a, "SUCCEEDED"),
        (b, "SUCCEEDED"),
    ]


class FailingEngine(Engine):
    """An engine that counts its transactions; the database goes away at the
    ``fail_at``-th."""

    fail_at = 0
    transactions = 0

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        self.transactions += 1
        if self.transactions == self.fail_at:
            raise TransientError("database unavailable")
        with super().transaction() as conn:
            yield conn


def test_a_batch_is_one_transaction(db: sqlalchemy.Engine, clock: Clock):
    """The database gone as the batch commits: nothing of it was written or sent, and
    Celery's retry of the whole batch fires each job once."""
    port = RecordingPort()
    engine = FailingEngine(db, port, default_invokers(), grace=GRACE, clock=clock, batch=2)
    apply(engine, make(name="a"), make(name="b"))
    clock.advance(10)
    ticks = sent(port)
    engine.fail_at = engine.transactions + 1
    with pytest.raises(TransientError):
        engine.tick_many(ticks)
    assert rows(engine) == [] and port.starts == port.ticks == []

    engine.tick_many(ticks)
    engine.tick_many(ticks)  # a redelivery: both nonces are stale now
    assert len(rows(engine)) == 2 and len(port.starts) == 2 and len(port.ticks) == 2


def test_parked_ticks_due_together_are_woken_together(
    engine: Engine, port: RecordingPort, clock: Clock
):
    apply(engine, make("@daily", name="a"), make("@daily", name="b"))
    assert port.ticks == []  # parked: a day away
    parked = job(engine)
    clock.now = parked.watchdog_at + timedelta(seconds=1)
    assert watchdog.run_once(engine).woken == 2
    [batch] = port.batches
    assert len(batch) == 2 and {eta for *_, eta in port.ticks} == {parked.snapshot.tick_at}


def test_a_batch_of_fires_is_one_transaction_of_the_control_path(
    db: sqlalchemy.Engine, clock: Clock
):
    port = RecordingPort()
    engine = FailingEngine(db, port, default_invokers(), grace=GRACE, clock=clock, batch=2)
    apply(engine, make(name="a"), make(name="b"))
    clock.advance(10)
    before = engine.transactions
    engine.tick_many(sent(port), start_here=True)
    assert engine.transactions - before == 1  # the control path: one for the batch
    deliver_runs(engine, port)
    assert [r["status"] for r in rows(engine)] == ["SUCCEEDED"] * 2
    assert engine.transactions - before == 5  # and per fire: its claim, its outcome


def test_a_fire_started_here_writes_each_row_once(db: sqlalchemy.Engine, clock: Clock):
    """The tick's transaction locks the job, inserts the run already RUNNING and saves
    the job once; the claim locks the run and updates it; the outcome's locks the job
    and the run in one statement and updates both."""
    port = RecordingPort()
    engine = batching_engine(db, clock, port)
    apply(engine, make(name="a"))
    clock.advance(10)
    statements: list[str] = []

    def count(conn, cursor, statement, *_):  # noqa: ANN001
        verb = statement.split(None, 1)[0].upper()
        if verb != "BEGIN":  # SQLite's BEGIN IMMEDIATE
            statements.append(verb)

    sqlalchemy.event.listen(db, "before_cursor_execute", count)
    try:
        engine.tick_many(sent(port), start_here=True)
        deliver_runs(engine, port)
    finally:
        sqlalchemy.event.remove(db, "before_cursor_execute", count)
    assert [r["status"] for r in rows(engine)] == ["SUCCEEDED"]
    tick, claim = ["SELECT", "INSERT", "UPDATE"], ["SELECT", "UPDATE"]
    outcome = ["SELECT", "UPDATE", "UPDATE"]
    assert statements == tick + claim + outcome


def test_one_statement_locks_the_job_before_the_run(pg_url: str, clock: Clock):
    """Every writer locks a job before its runs, or two could deadlock. With the run
    held elsewhere, ``lock_run`` must already hold the job while it waits for the run."""
    db = make_engine(pg_url)
    port = RecordingPort()
    engine = batching_engine(db, clock, port)
    apply(engine, make(name="a"))
    clock.advance(10)
    engine.tick_many(sent(port), start_here=True)
    [run] = rows(engine)
    with db.connect() as holder, db.connect() as prober:
        holder.begin()
        holder.exec_driver_sql("SELECT 1 FROM invocations WHERE id = %s FOR UPDATE", (run["id"],))
        waiter = threading.Thread(target=lambda: lock_both(db, run["job_id"], run["id"]))
        waiter.start()
        wait_for_lock_wait(db, "the waiter to be blocked on the run")
        prober.begin()
        with pytest.raises(sqlalchemy.exc.OperationalError, match="could not obtain lock"):
            prober.exec_driver_sql(
                "SELECT 1 FROM jobs WHERE id = %s FOR UPDATE NOWAIT", (run["job_id"],)
            )
        prober.rollback()
        holder.rollback()
        waiter.join(timeout=5)
    db.dispose()


def lock_both(db: sqlalchemy.Engine, job_id: int, invocation_id: int) -> None:
    with db.begin() as conn:
        assert run_store.lock_run(conn, job_id, invocation_id) is not None


def test_ticks_due_within_the_slack_share_a_message(db: sqlalchemy.Engine, clock: Clock):
    """Ticks go out at the next multiple of the slack at or after their slot: jobs due a
    few milliseconds apart share a message, none fires before its slot, and whole
    seconds stay whole."""
    port = RecordingPort()
    slack = timedelta(milliseconds=20)
    engine = Engine(db, port, default_invokers(), grace=GRACE, clock=clock, slack=slack)
    offsets = {"a": 3, "b": 17, "c": 23, "d": 0}
    apply(
        engine,
        *(
            make(f"every 10s offset {ms}ms" if ms else "every 10s", name=n)
            for n, ms in offsets.items()
        ),
    )
    second = clock.now  # a, b and c are due just after it, d ten seconds later
    etas = {job(engine, f"p/{n}").id: n for n in offsets}
    sent_at = {etas[job_id]: eta for job_id, _, eta in port.ticks}
    ms = timedelta(milliseconds=1)
    assert sent_at == {
        "a": second + 20 * ms,
        "b": second + 20 * ms,
        "c": second + 40 * ms,
        "d": second + timedelta(seconds=10),
    }
    assert [len(batch) for batch in port.batches] == [2]  # a and b; c and d on their own

    clock.now = second + 20 * ms
    engine.tick_many([(j, n) for j, n, eta in port.ticks if eta <= clock.now], start_here=True)
    ran = {r["job_id"]: (r["slot"], r["started_at"]) for r in rows(engine)}
    assert ran == {
        job(engine, "p/a").id: (second + 3 * ms, clock.now),
        job(engine, "p/b").id: (second + 17 * ms, clock.now),
    }


def test_runs_begun_together_go_to_the_work_path_together(db: sqlalchemy.Engine, clock: Clock):
    """One message and one claiming transaction for the runs a tick batch began; each
    run still has its own call, lease and outcome, and a repeated message claims none."""
    port = RecordingPort()
    engine = batching_engine(db, clock, port)
    apply(engine, *(make(name=name) for name in "abc"))
    clock.advance(10)
    engine.tick_many(sent(port), start_here=True)
    assert [len(batch) for batch in port.run_batches] == [2]  # and the third on its own
    [batch] = port.run_batches
    attempts = [(call.invocation_id, call.attempt) for call in batch]
    outcomes = work.execute_batch(engine, attempts, "work@test", threads=4)
    assert [o.status for o in outcomes] == ["SUCCEEDED"] * 2
    done = {r["id"]: (r["status"], r["worker"]) for r in rows(engine)}
    assert [done[inv] for inv, _ in attempts] == [("SUCCEEDED", "work@test")] * 2
    assert work.execute_batch(engine, attempts, "work@again", threads=4) == []


def test_a_batch_is_claimed_in_one_transaction(db: sqlalchemy.Engine, clock: Clock):
    port = RecordingPort()
    engine = FailingEngine(db, port, default_invokers(), grace=GRACE, clock=clock, batch=2)
    apply(engine, make(name="a"), make(name="b"))
    clock.advance(10)
    engine.tick_many(sent(port), start_here=True)
    [batch] = port.run_batches
    before = engine.transactions
    calls, _ = engine.attempts.claim_many([(c.invocation_id, c.attempt) for c in batch], "w")
    assert len(calls) == 2 and engine.transactions - before == 1
