"""Pools: a run of a pooled job takes a place while STARTING or RUNNING; one that finds
its pool full waits (WAITING, ``pool``) and takes a place as soon as one frees, best
ranked first (priority, then slot); the pool never holds more than its size."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import sqlalchemy
from sqlalchemy import select

from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.errors import SpecError
from cronchain.scheduler.invokers import Outcome
from cronchain.scheduler.maintenance import watchdog
from cronchain.scheduler.spec.jobspec import parse_job_file
from cronchain.scheduler.storage.models import invocations
from cronchain.statemachine import InvocationStatus
from tests.support.deliver import deliver, settle
from tests.support.engine import Clock, Scripted, engine_with
from tests.support.jobs import apply_with_pools, spec
from tests.support.rows import job, rows

pytestmark = pytest.mark.postgres
S = InvocationStatus
HANG = None  # a run whose worker died: claimed, RUNNING until it is finished by hand


def running(engine, pool: str = "gpu") -> int:  # type: ignore[no-untyped-def]
    query = select(sqlalchemy.func.count()).where(
        invocations.c.pool == pool, invocations.c.status.in_(("STARTING", "RUNNING"))
    )
    with engine.db.connect() as conn:
        return conn.execute(query).scalar_one()


def test_a_full_pool_makes_runs_wait_and_hands_out_places_by_priority(
    db: sqlalchemy.Engine, clock: Clock
):
    engine, port = engine_with(db, clock, Scripted(HANG, HANG, HANG, HANG))
    jobs = [spec(f"j{p}", pool="gpu", priority=p) for p in (1, 9, 5, 3)]
    apply_with_pools(engine, *jobs, pools={"gpu": 2})
    sched = Scheduler(engine)
    for name in ("j1", "j9", "j5", "j3"):  # j1 and j9 take the places
        clock.advance(1)
        sched.trigger(f"p/{name}")
    settle(engine, port)
    assert running(engine) == 2
    waiting = {n: rows(engine, n)[0] for n in ("j5", "j3")}
    assert {(r["status"], r["reason"]) for r in waiting.values()} == {("WAITING", "pool")}
    assert waiting["j5"]["checks"]["pool"]["taken"] == 2
    assert {h["job"] for h in waiting["j5"]["checks"]["pool"]["held_by"]} == {"p/j1", "p/j9"}
    assert all(job(engine, f"p/{n}").snapshot.active == 1 for n in ("j5", "j3"))
    explained = sched.pools()
    assert explained == [{"name": "gpu", "size": 2, "taken": 2, "waiting": 2}]

    first = rows(engine, "j1")[0]["id"]
    assert engine.runs.finish_invocation(first, Outcome(S.SUCCEEDED), attempt=1)
    assert [r["status"] for r in rows(engine, "j5")] == ["STARTING"]  # 5 before 3
    assert rows(engine, "j5")[0]["checks"]["pool"]["released_at"] is not None
    assert rows(engine, "j3")[0]["status"] == "WAITING" and running(engine) == 2


def test_a_pool_made_larger_starts_its_waiters_at_once(db: sqlalchemy.Engine, clock: Clock):
    engine, port = engine_with(db, clock)
    apply_with_pools(engine, spec("a", pool="gpu"), spec("b", pool="gpu"), pools={"gpu": 0})
    sched = Scheduler(engine)
    sched.trigger("p/a")
    sched.trigger("p/b")
    assert [r["status"] for r in rows(engine)] == ["WAITING", "WAITING"]
    sched.set_pool("gpu", 1)
    assert sorted(r["status"] for r in rows(engine)) == ["STARTING", "WAITING"]
    settle(engine, port)  # a runs and ends: b takes its place
    assert [r["status"] for r in rows(engine)] == ["SUCCEEDED", "SUCCEEDED"]


def test_abort_of_a_waiter_or_a_holder(db: sqlalchemy.Engine, clock: Clock):
    engine, port = engine_with(db, clock, Scripted(HANG))
    apply_with_pools(engine, spec("a", pool="gpu"), spec("b", pool="gpu"), pools={"gpu": 1})
    sched = Scheduler(engine)
    sched.trigger("p/a")
    settle(engine, port)  # a holds the place, hung
    sched.trigger("p/b")
    sched.trigger("p/b")  # skipped: b's run waiting for the pool is its active run
    assert [(r["status"], r["reason"]) for r in rows(engine, "b")] == [
        ("WAITING", "pool"),
        ("SKIPPED", "overlap"),
    ]
    assert sched.abort("p/b")["WAITING"]  # a waiter: ended, frees nothing
    assert job(engine, "p/b").snapshot.active == 0 and running(engine) == 1
    sched.trigger("p/b")
    sched.abort("p/a")  # the holder: b takes its place in the same transaction
    assert rows(engine, "b")[-1]["status"] == "STARTING"
    settle(engine, port)
    assert rows(engine, "b")[-1]["status"] == "SUCCEEDED" and running(engine) == 0


def test_a_retry_s_backoff_keeps_its_place(db: sqlalchemy.Engine, clock: Clock):
    engine, port = engine_with(db, clock, Scripted(Outcome.failed("once")))
    retries = {"max_attempts": 2, "backoff": "10s", "jitter": 0}
    apply_with_pools(
        engine, spec("a", pool="gpu", retries=retries), spec("b", pool="gpu"), pools={"gpu": 1}
    )
    sched = Scheduler(engine)
    sched.trigger("p/a")
    deliver(engine, port)  # a's first attempt fails: it waits 10 s, in its place
    sched.trigger("p/b")
    assert rows(engine, "a")[0]["status"] == "STARTING"
    assert rows(engine, "b")[0]["status"] == "WAITING"
    clock.advance(11)
    settle(engine, port)
    assert [r["status"] for r in rows(engine)] == ["SUCCEEDED", "SUCCEEDED"]


def test_a_backfill_goes_through_its_pool(db: sqlalchemy.Engine, clock: Clock):
    engine, port = engine_with(db, clock, Scripted(HANG))
    apply_with_pools(
        engine, spec("a", pool="gpu"), spec("d", "0 3 * * *", pool="gpu"), pools={"gpu": 1}
    )
    sched = Scheduler(engine)
    sched.trigger("p/a")
    settle(engine, port)  # a holds the only place
    first, last = datetime(2026, 2, 25, tzinfo=UTC), datetime(2026, 2, 27, 23, tzinfo=UTC)
    sched.backfill("p/d", first, last, max_concurrent=2)
    assert [(r["status"], r["reason"]) for r in rows(engine, "d")] == [
        ("WAITING", "pool"),
        ("WAITING", "pool"),
        ("WAITING", None),
    ]
    engine.runs.finish_invocation(rows(engine, "a")[0]["id"], Outcome(S.SUCCEEDED), attempt=1)
    settle(engine, port)
    assert [r["status"] for r in rows(engine, "d")] == ["SUCCEEDED"] * 3
    assert running(engine) == 0


def test_a_place_freed_by_a_deleted_job_is_filled(db: sqlalchemy.Engine, clock: Clock):
    engine, port = engine_with(db, clock, Scripted(HANG))
    apply_with_pools(engine, spec("a", pool="gpu"), spec("b", pool="gpu"), pools={"gpu": 1})
    sched = Scheduler(engine)
    sched.trigger("p/a")
    settle(engine, port)
    sched.trigger("p/b")
    apply_with_pools(engine, spec("b", pool="gpu"))  # a is disabled: its run still holds the place
    assert running(engine) == 1
    sched.apply([spec("b", pool="gpu")], project="p", prune=True)  # a deleted with its run
    assert rows(engine, "b")[0]["status"] == "STARTING"  # filled once the apply committed


def test_a_job_names_a_pool_that_exists(db: sqlalchemy.Engine, clock: Clock):
    engine, _ = engine_with(db, clock)
    with pytest.raises(SpecError, match="no pool named 'gpu'"):
        apply_with_pools(engine, spec("a", pool="gpu"))
    Scheduler(engine).set_pool("gpu", 3)
    apply_with_pools(engine, spec("a", pool="gpu"))
    assert Scheduler(engine).jobs()[0]["pool"] == "gpu"
    declared = parse_job_file({"project": "p", "pools": {"cpu": 2}, "jobs": []})
    assert declared.pools == {"cpu": 2}
    for bad, message in (({"x": -1}, "pools.x: must be a whole number"), ([1], "mapping")):
        with pytest.raises(SpecError, match=message):
            parse_job_file({"project": "p", "pools": bad, "jobs": []})


def test_the_watchdog_fills_a_pool_whose_fill_was_lost(db: sqlalchemy.Engine, clock: Clock):
    engine, _ = engine_with(db, clock)
    apply_with_pools(engine, spec("a", pool="gpu"), pools={"gpu": 0})
    Scheduler(engine).trigger("p/a")
    with engine.transaction() as conn:  # a place made without a fill (a worker died)
        conn.execute(sqlalchemy.text("UPDATE pools SET size = 1 WHERE name = 'gpu'"))
    assert rows(engine, "a")[0]["status"] == "WAITING"
    watchdog.run_once(engine)
    assert rows(engine, "a")[0]["status"] == "STARTING"


def test_explain_says_how_long_a_run_that_ran_waited_for_its_place(
    db: sqlalchemy.Engine, clock: Clock
):
    engine, port = engine_with(db, clock)
    apply_with_pools(
        engine,
        spec("a", "every 60s", pool="gpu"),
        spec("b", "every 60s", pool="gpu"),
        pools={"gpu": 1},
    )
    clock.now = max(eta for _, _, eta in port.ticks)
    ticks = [(job_id, nonce) for job_id, nonce, _ in port.ticks]
    port.clear()
    engine.tick_many(ticks, start_here=True)
    clock.advance(5)
    settle(engine, port)  # one runs, then the other takes its place
    assert [r["status"] for r in rows(engine)] == ["SUCCEEDED", "SUCCEEDED"]
    waited = max(rows(engine), key=lambda r: r["checks"]["pool"]["released_at"])
    name = "a" if waited["job_id"] == job(engine, "p/a").id else "b"
    answer = Scheduler(engine).explain(f"p/{name}", waited["slot"])
    since, until = waited["checks"]["pool"]["since"], waited["checks"]["pool"]["released_at"]
    assert f"it waited for a place in pool gpu from {since} until {until}" in answer["text"]
