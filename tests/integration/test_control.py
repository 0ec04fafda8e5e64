"""The invocation control plane on real databases with a fixed clock: attempts and
their fencing, retries, timeouts, abort, overlap policies, job-to-job triggers."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy

from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.invokers import Outcome
from cronchain.scheduler.maintenance import watchdog
from cronchain.statemachine import InvocationStatus
from tests.support.deliver import claim_tasks, deliver, deliver_ticks
from tests.support.engine import Clock, RecordingPort, Scripted, engine_with
from tests.support.jobs import apply, spec
from tests.support.rows import job, rows

pytestmark = pytest.mark.postgres
S = InvocationStatus


def fire(engine: Engine, port: RecordingPort, clock: Clock, slots: int) -> None:
    """Let ``slots`` slots of an ``every 10s`` job come, delivering every message."""
    for _ in range(slots):
        clock.advance(10)
        deliver_ticks(engine, port)
        deliver(engine, port)


def test_a_failure_is_retried_with_growing_delays_and_every_attempt_is_kept(
    db: sqlalchemy.Engine, clock: Clock
):
    failed = Outcome.failed("http: boom", "status")
    engine, port = engine_with(db, clock, Scripted(failed, failed))
    apply(engine, spec(retries={"max_attempts": 3, "backoff": "2s", "jitter": 0}))
    Scheduler(engine).trigger("p/a")
    deliver(engine, port)
    [inv] = rows(engine)
    assert (inv["status"], inv["attempt"]) == ("STARTING", 1)
    assert inv["start_at"] == clock.now + timedelta(seconds=2)
    assert deliver(engine, port) == 1  # delivered early: it hops, nothing runs
    assert rows(engine)[0]["attempt"] == 1
    clock.advance(2)
    deliver(engine, port, clock)
    inv = rows(engine)[0]
    assert (inv["status"], inv["attempt"]) == ("STARTING", 2)
    assert inv["start_at"] == clock.now + timedelta(seconds=4)  # the delay doubled
    clock.advance(4)
    deliver(engine, port, clock)
    inv = rows(engine)[0]
    assert (inv["status"], inv["attempt"]) == ("SUCCEEDED", 3)
    assert [(a["attempt"], a["status"], a["error"]) for a in inv["attempts"]] == [
        (1, "FAILED", "http: boom"),
        (2, "FAILED", "http: boom"),
    ]
    assert "retry: attempt 3" in inv["log"] and "attempt 3 SUCCEEDED" in inv["log"]
    assert job(engine).snapshot.state == "SCHEDULED"


def test_an_old_attempt_can_neither_report_nor_start_again(db: sqlalchemy.Engine, clock: Clock):
    engine, port = engine_with(db, clock, Scripted(None, None))  # both attempts hang
    apply(engine, spec(retries={"max_attempts": 2, "backoff": "1s", "jitter": 0}, lease="10s"))
    inv = Scheduler(engine).trigger("p/a")["invocation"]
    deliver(engine, port)
    clock.advance(11)
    assert watchdog.run_once(engine).expired == 1  # attempt 1: lease expired, retried
    clock.advance(1)
    deliver(engine, port, clock)
    assert (rows(engine)[0]["status"], rows(engine)[0]["attempt"]) == ("RUNNING", 2)
    # The zombie of attempt 1 reports, and its start message is delivered again.
    assert engine.runs.finish_invocation(inv, Outcome(S.SUCCEEDED), attempt=1) is False
    engine.attempts.start_invocation(inv, 1)
    engine.attempts.start_invocation(inv, 2)  # a repeated start of the current attempt, too
    [row] = rows(engine)
    assert (row["status"], row["attempt"]) == ("RUNNING", 2)
    assert engine.runs.finish_invocation(inv, Outcome(S.SUCCEEDED), attempt=2) is True
    assert rows(engine)[0]["attempts"][0]["reason"] == "lease expired"


def test_a_run_past_its_timeout_fails_and_its_celery_task_is_revoked(
    db: sqlalchemy.Engine, clock: Clock
):
    engine, port = engine_with(db, clock)
    apply(engine, spec(kind="celery", options={"task": "etl.run"}, timeout="30s", lease="60s"))
    inv = Scheduler(engine).trigger("p/a")["invocation"]
    deliver(engine, port)
    clock.advance(5)  # in the queue: the timeout counts from the claim
    claim_tasks(engine, port)
    assert rows(engine)[0]["deadline"] == clock.now + timedelta(seconds=30)
    clock.advance(31)
    assert watchdog.run_once(engine).expired == 1
    row = rows(engine)[0]
    assert (row["status"], row["reason"]) == ("FAILED", "timeout")
    assert port.revoked == [f"cronchain-{inv}-1"]


def test_abort_ends_the_running_invocation_and_revokes_its_task(
    db: sqlalchemy.Engine, clock: Clock
):
    engine, port = engine_with(db, clock)
    apply(engine, spec(kind="celery", options={"task": "etl.run"}))
    inv = Scheduler(engine).trigger("p/a")["invocation"]
    deliver(engine, port)
    claim_tasks(engine, port)
    # abort returns the ids by the status each had (issue 15: it says how many of each)
    assert Scheduler(engine).abort("p/a") == {"STARTING": [], "RUNNING": [inv], "WAITING": []}
    row = rows(engine)[0]
    assert (row["status"], row["reason"]) == ("ABORTED", "aborted")
    assert port.revoked == [f"cronchain-{inv}-1"]
    assert job(engine).snapshot.state == "SCHEDULED"
    assert engine.runs.finish_invocation(inv, Outcome(S.SUCCEEDED), attempt=1) is False
    assert Scheduler(engine).abort("p/a") == {"STARTING": [], "RUNNING": [], "WAITING": []}


def test_buffer_one_runs_one_waiting_slot_after_the_active_one(db: sqlalchemy.Engine, clock: Clock):
    engine, port = engine_with(db, clock, Scripted(None))  # the first run hangs
    apply(engine, spec(schedule="every 10s", overlap="buffer_one"))
    fire(engine, port, clock, 3)
    assert [(r["status"], r["reason"]) for r in rows(engine)] == [
        ("RUNNING", None),
        ("WAITING", None),
        ("SKIPPED", "overlap"),
    ]
    first = rows(engine)[0]["id"]
    engine.runs.finish_invocation(first, Outcome(S.SUCCEEDED), attempt=1)
    deliver(engine, port)
    assert [r["status"] for r in rows(engine)] == ["SUCCEEDED", "SUCCEEDED", "SKIPPED"]
    assert (job(engine).snapshot.active, job(engine).snapshot.buffered) == (0, 0)


def test_aborting_a_waiting_invocation_frees_its_place(db: sqlalchemy.Engine, clock: Clock):
    engine, port = engine_with(db, clock, Scripted(None))
    apply(engine, spec(overlap="buffer_all"))
    sched = Scheduler(engine)
    sched.trigger("p/a")
    deliver(engine, port)
    sched.trigger("p/a")
    waiting = rows(engine)[1]
    assert waiting["status"] == "WAITING"
    # by status since issue 15
    assert sched.abort(invocation=waiting["id"])["WAITING"] == [waiting["id"]]
    assert job(engine).snapshot.buffered == 0
    assert rows(engine)[1]["status"] == "ABORTED"


def test_cancel_other_aborts_the_active_run_and_starts_the_new_slot(
    db: sqlalchemy.Engine, clock: Clock
):
    engine, port = engine_with(db, clock, Scripted(None))
    apply(engine, spec(schedule="every 10s", overlap="cancel_other"))
    fire(engine, port, clock, 2)
    assert [(r["status"], r["reason"]) for r in rows(engine)] == [
        ("ABORTED", "cancel_other"),
        ("SUCCEEDED", None),
    ]
    assert job(engine).snapshot.active == 0


def test_allow_runs_side_by_side_up_to_max_concurrent(db: sqlalchemy.Engine, clock: Clock):
    engine, port = engine_with(db, clock, Scripted(None, None))
    apply(engine, spec(schedule="every 10s", overlap="allow", max_concurrent=2))
    fire(engine, port, clock, 3)
    assert [(r["status"], r["reason"]) for r in rows(engine)] == [
        ("RUNNING", None),
        ("RUNNING", None),
        ("SKIPPED", "overlap"),
    ]
    assert job(engine).snapshot.active == 2


def test_a_success_triggers_the_other_job_once(db: sqlalchemy.Engine, clock: Clock):
    engine, port = engine_with(db, clock, Scripted(None))
    apply(engine, spec("a", triggers=["b"]), spec("b"), spec("c"))
    Scheduler(engine).pause("p/c")
    apply(engine, spec("a", triggers=["b", "c"]), spec("b"), spec("c"))
    first = Scheduler(engine).trigger("p/a")["invocation"]
    deliver(engine, port)
    assert engine.runs.finish_invocation(first, Outcome(S.SUCCEEDED), attempt=1)
    assert engine.runs.finish_invocation(first, Outcome(S.SUCCEEDED), attempt=1) is False
    deliver(engine, port)
    [b] = rows(engine, "b")
    assert (b["status"], b["trigger_id"]) == ("SUCCEEDED", f"after:{first}")
    [c] = rows(engine, "c")
    assert (c["status"], c["reason"]) == ("SKIPPED", "paused")


def test_a_failure_triggers_nothing(db: sqlalchemy.Engine, clock: Clock):
    engine, port = engine_with(db, clock, Scripted(Outcome.failed("no")))
    apply(engine, spec("a", triggers=["b"]), spec("b"))
    Scheduler(engine).trigger("p/a")
    deliver(engine, port)
    assert rows(engine, "b") == []


def test_the_runner_renews_its_lease_and_learns_when_it_is_over(
    db: sqlalchemy.Engine, clock: Clock
):
    engine, port = engine_with(db, clock, Scripted(None))
    apply(engine, spec(lease="30s"))
    inv = Scheduler(engine).trigger("p/a")["invocation"]
    deliver(engine, port)
    from cronchain.scheduler.core.leases import Lease

    lease = Lease(inv, 1, timedelta(seconds=30))
    clock.advance(20)
    assert engine.leases.renew(lease, note="halfway") is True
    row = rows(engine)[0]
    assert row["deadline"] == clock.now + timedelta(seconds=30)
    assert "halfway" in row["log"]
    Scheduler(engine).abort(invocation=inv)
    assert engine.leases.renew(lease) is False and lease.lost.is_set()
