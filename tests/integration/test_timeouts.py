"""The three timeouts, each with its own name and reason: schedule-to-start (waiting for a
worker to claim the attempt), the lease (from the claim) and the run's timeout (from the
claim). An attempt that waits is sent again, never failed for waiting."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy

from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.invokers import SUCCEEDED
from cronchain.scheduler.maintenance import watchdog
from cronchain.scheduler.storage import run_store
from tests.support.deliver import deliver, deliver_runs
from tests.support.engine import Clock, engine_with
from tests.support.jobs import apply, spec
from tests.support.rows import rows

pytestmark = pytest.mark.postgres
CELERY = dict(kind="celery", options={"task": "etl.run", "queue": "etl"})


def test_an_attempt_no_worker_takes_is_sent_again_under_the_same_number(
    db: sqlalchemy.Engine, clock: Clock
):
    """Its queue has no consumer for far longer than its lease: the watchdog sends it
    again, each time after waiting as long as it has waited, and never fails it."""
    engine, port = engine_with(db, clock)
    apply(engine, spec(lease="6s", retries={"max_attempts": 2}, **CELERY))
    inv = Scheduler(engine).trigger("p/a")["invocation"]
    deliver(engine, port)
    assert [(c.invocation_id, c.attempt) for c in port.runs] == [(inv, 1)]
    port.runs.clear()
    resent_at = []
    for _ in range(60):  # ten minutes, far past the 6 s lease
        clock.advance(10)
        if watchdog.run_once(engine).resent:
            resent_at.append(clock.now)
    assert [(c.invocation_id, c.attempt) for c in port.runs] == [(inv, 1)] * len(resent_at)
    # After 15 s, then each wait as long as the wait so far: 5 copies in 10 minutes, not 60.
    assert [(t - resent_at[0]).total_seconds() for t in resent_at] == [0, 30, 90, 210, 450]
    [row] = rows(engine)
    assert (row["status"], row["attempt"], row["worker"]) == ("RUNNING", 1, None)
    assert port.revoked == []

    clock.advance(1)
    # A consumer starts at last: the first copy claims the attempt, the others are refused.
    claims = [engine.attempts.claim(c.invocation_id, c.attempt, "celery@test") for c in port.runs]
    assert [c is not None for c in claims] == [True] + [False] * (len(claims) - 1)
    [row] = rows(engine)
    assert row["deadline"] == clock.now + timedelta(seconds=6)  # the lease counts from here
    assert engine.runs.finish_invocation(inv, SUCCEEDED, attempt=1)
    [row] = rows(engine)
    assert (row["status"], row["attempt"], row["attempts"]) == ("SUCCEEDED", 1, None)


def test_schedule_to_start_ends_an_attempt_nobody_took_without_a_retry(
    db: sqlalchemy.Engine, clock: Clock
):
    engine, port = engine_with(db, clock)
    apply(engine, spec(schedule_to_start="1m", retries={"max_attempts": 3}, **CELERY))
    inv = Scheduler(engine).trigger("p/a")["invocation"]
    deliver(engine, port)
    for _ in range(7):
        clock.advance(10)
        watchdog.run_once(engine)
    [row] = rows(engine)
    assert (row["status"], row["reason"], row["attempt"]) == ("FAILED", "schedule_to_start", 1)
    assert "within 0:01:00" in row["error"]
    assert port.starts == [] and port.revoked == []  # no retry; no task to stop
    assert engine.attempts.claim(inv, 1, "celery@late") is None  # a late delivery is fenced off


def test_a_run_claimed_late_has_its_whole_timeout(db: sqlalchemy.Engine, clock: Clock):
    engine, port = engine_with(db, clock)
    apply(engine, spec(timeout="30s", lease="60s", **CELERY))
    Scheduler(engine).trigger("p/a")
    deliver(engine, port)
    clock.advance(40)  # longer than the timeout, waiting in the queue
    assert watchdog.run_once(engine).resent == 1
    clock.advance(1)
    assert engine.attempts.claim(port.runs[0].invocation_id, 1, "celery@test") is not None
    [row] = rows(engine)
    assert (row["status"], row["timeout_at"]) == ("RUNNING", clock.now + timedelta(seconds=30))
    clock.advance(31)
    assert watchdog.run_once(engine).expired == 1
    [row] = rows(engine)
    assert (row["status"], row["reason"]) == ("FAILED", "timeout")


def test_a_work_path_run_waits_for_its_worker_too(db: sqlalchemy.Engine, clock: Clock):
    """A noop run sent while no work-path worker runs is sent again, and runs when one
    comes: its lease was never counted while it waited."""
    engine, port = engine_with(db, clock)
    apply(engine, spec(lease="5s"))
    Scheduler(engine).trigger("p/a")
    engine.attempts.start_invocation(port.starts.pop())
    for _ in range(12):  # two minutes without a work-path worker
        clock.advance(10)
        watchdog.run_once(engine)
    assert rows(engine)[0]["status"] == "RUNNING"
    assert deliver_runs(engine, port) >= 2  # the first copy runs it, the others are fenced
    [row] = rows(engine)
    assert (row["status"], row["attempt"]) == ("SUCCEEDED", 1)
    assert row["log"].count("claimed by") == 1


def test_an_attempt_sent_before_schedule_to_start_existed_is_resent_then_ended(
    db: sqlalchemy.Engine, clock: Clock
):
    """Older code wrote an unclaimed celery attempt without ``timeout_at``: the watchdog
    counts its schedule-to-start from when it was sent, and the pass goes on."""
    engine, port = engine_with(db, clock)
    apply(engine, spec(schedule_to_start="1m", **CELERY))
    inv = Scheduler(engine).trigger("p/a")["invocation"]
    deliver(engine, port)
    with engine.transaction() as conn:
        run_store.update_invocation(conn, inv, timeout_at=None)
    clock.advance(20)
    assert watchdog.run_once(engine).resent == 1
    clock.advance(45)
    assert watchdog.run_once(engine).expired == 1
    [row] = rows(engine)
    assert (row["status"], row["reason"]) == ("FAILED", "schedule_to_start")


def test_a_run_that_cannot_be_repaired_does_not_stop_the_pass(
    db: sqlalchemy.Engine, clock: Clock, monkeypatch: pytest.MonkeyPatch
):
    engine, port = engine_with(db, clock)
    apply(engine, spec(name="a", **CELERY), spec(name="b", **CELERY))
    first = Scheduler(engine).trigger("p/a")["invocation"]
    Scheduler(engine).trigger("p/b")
    deliver(engine, port)
    repair = watchdog.repair_run

    def broken_for_the_first(engine: Any, invocation_id: int) -> str | None:
        if invocation_id == first:
            raise RuntimeError("a row this code cannot handle")
        return repair(engine, invocation_id)

    monkeypatch.setattr(watchdog, "repair_run", broken_for_the_first)
    clock.advance(20)
    assert watchdog.run_once(engine).resent == 1  # the second run, after the first failed
