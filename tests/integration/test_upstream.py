"""``requires``: a run waits (WAITING, ``upstream``) until each upstream has succeeded
within its window of the slot, is released by the transaction of the success that
completes them, and is settled by the watchdog's ``on_unmet`` once ``max_wait`` passes."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy
import yaml

from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.core.outcome_batch import Report, finish_together
from cronchain.scheduler.errors import SpecError
from cronchain.scheduler.invokers import Outcome
from cronchain.scheduler.maintenance import watchdog
from cronchain.scheduler.spec.jobspec import JobSpec, load_job_file
from cronchain.scheduler.storage.db import make_engine
from cronchain.statemachine import InvocationStatus
from tests.support.deliver import deliver, run_now, settle
from tests.support.engine import Clock, Scripted, engine_with
from tests.support.jobs import apply, spec
from tests.support.locks import wait_for_lock_wait
from tests.support.rows import job, rows
from tests.support.upstream import WITHIN, d_waits_for_a_and_b_running, needs, tick_batch_holding

pytestmark = pytest.mark.postgres
S = InvocationStatus


def test_a_run_waits_for_its_last_upstream_and_starts_in_that_success_s_transaction(
    db: sqlalchemy.Engine, clock: Clock
):
    engine, port = engine_with(db, clock)
    apply(engine, spec("a"), spec("b"), spec("d", **needs("a", "b", max_wait="10m")))
    run_now(engine, port, "a")
    clock.advance(5)
    Scheduler(engine).trigger("p/d")
    [held] = rows(engine, "d")
    assert (held["status"], held["reason"]) == ("WAITING", "upstream")
    assert held["deadline"] == clock.now + timedelta(minutes=10)
    met = {c["job"]: c["met"] for c in held["checks"]["upstream"]}
    assert met == {"p/a": True, "p/b": False}
    assert "p/b has no success filed" in held["log"]
    assert port.starts == [] and job(engine, "p/d").snapshot.active == 1

    clock.advance(5)
    Scheduler(engine).trigger("p/b")
    deliver(engine, port)  # b starts, runs and succeeds; its outcome releases d
    [d] = rows(engine, "d")
    # Begun in b's transaction: its attempt sent to the work path, no start message.
    assert (d["status"], d["reason"], d["attempt"]) == ("RUNNING", None, 1)
    assert all(c["met"] for c in d["checks"]["upstream"])
    assert port.start_messages == [] and [c.invocation_id for c in port.runs] == [d["id"]]
    assert job(engine, "p/d").snapshot.active == 1
    deliver(engine, port)
    [d] = rows(engine, "d")
    assert d["status"] == "SUCCEEDED" and job(engine, "p/d").snapshot.active == 0


def test_a_success_outside_the_window_does_not_count(db: sqlalchemy.Engine, clock: Clock):
    engine, port = engine_with(db, clock)
    apply(engine, spec("a"), spec("d", **needs("a")))
    run_now(engine, port, "a")
    clock.advance(3601)
    Scheduler(engine).trigger("p/d")
    [d] = rows(engine, "d")
    assert d["status"] == "WAITING"
    [check] = d["checks"]["upstream"]
    assert check["last_success"] is not None and check["success"] is None


def test_a_failed_upstream_releases_nothing(db: sqlalchemy.Engine, clock: Clock):
    engine, port = engine_with(db, clock, Scripted(Outcome.failed("no")))
    apply(engine, spec("a"), spec("d", **needs("a")))
    Scheduler(engine).trigger("p/d")
    run_now(engine, port, "a")
    assert [r["status"] for r in rows(engine, "a")] == ["FAILED"]
    assert [r["status"] for r in rows(engine, "d")] == ["WAITING"]


@pytest.mark.parametrize(
    ("on_unmet", "status", "runs"),
    [("skip", "SKIPPED", 0), ("fail", "FAILED", 0), ("run", "SUCCEEDED", 1)],
)
def test_max_wait_then_on_unmet_once(
    db: sqlalchemy.Engine, clock: Clock, on_unmet: str, status: str, runs: int
):
    invoker = Scripted()
    engine, port = engine_with(db, clock, invoker)
    apply(engine, spec("a"), spec("d", **needs("a", max_wait="10m", on_unmet=on_unmet)))
    Scheduler(engine).trigger("p/d")
    clock.advance(599)
    watchdog.run_once(engine)
    assert [r["status"] for r in rows(engine, "d")] == ["WAITING"]
    clock.advance(2)
    assert watchdog.run_once(engine).settled == 1
    assert watchdog.run_once(engine).settled == 0
    settle(engine, port)
    [d] = rows(engine, "d")
    assert d["status"] == status and len(invoker.calls) == runs
    if on_unmet != "run":
        assert d["reason"] == "upstream" and "p/a has no success" in d["error"]
    assert job(engine, "p/d").snapshot.active == 0


def test_the_watchdog_starts_a_run_whose_upstreams_were_met_meanwhile(
    db: sqlalchemy.Engine, clock: Clock
):
    """A release that never came (the upstream's success was recorded before this job
    required it): at ``max_wait`` the run starts, since its upstreams are met."""
    engine, port = engine_with(db, clock)
    apply(engine, spec("a"), spec("d", **needs("a", max_wait="10m", on_unmet="fail")))
    Scheduler(engine).trigger("p/d")
    with engine.transaction() as conn:  # a success its release did not see
        conn.execute(sqlalchemy.text("UPDATE jobs SET downstream = false WHERE name = 'a'"))
    run_now(engine, port, "a")
    assert rows(engine, "d")[0]["status"] == "WAITING"
    clock.advance(601)
    watchdog.run_once(engine)
    settle(engine, port)
    assert rows(engine, "d")[0]["status"] == "SUCCEEDED"


def test_abort_ends_a_waiting_run_and_frees_its_place(db: sqlalchemy.Engine, clock: Clock):
    engine, port = engine_with(db, clock)
    apply(engine, spec("a"), spec("d", **needs("a")))
    Scheduler(engine).trigger("p/d")
    aborted = Scheduler(engine).abort("p/d")
    assert len(aborted["WAITING"]) == 1
    assert rows(engine, "d")[0]["status"] == "ABORTED"
    assert job(engine, "p/d").snapshot.active == 0
    run_now(engine, port, "a")  # releases nothing
    assert [r["status"] for r in rows(engine, "d")] == ["ABORTED"]


def test_a_buffered_run_whose_turn_comes_waits_for_its_upstreams(
    db: sqlalchemy.Engine, clock: Clock
):
    engine, port = engine_with(db, clock, Scripted(Outcome(S.SUCCEEDED), None))
    apply(engine, spec("a"), spec("d", overlap="buffer_one", **needs("a", max_wait="10m")))
    run_now(engine, port, "a")  # a's success: d's first run may start
    Scheduler(engine).trigger("p/d")
    deliver(engine, port)  # d's first run hangs (its worker died)
    clock.advance(3601)  # a's success is too old for anything triggered from now
    Scheduler(engine).trigger("p/d")  # buffered behind the first
    engine.runs.abort(invocation_id=rows(engine, "d")[0]["id"])
    first, second = rows(engine, "d")
    assert (first["status"], second["status"], second["reason"]) == (
        "ABORTED",
        "WAITING",
        "upstream",
    )
    assert job(engine, "p/d").snapshot.active == 1
    run_now(engine, port, "a")
    assert rows(engine, "d")[1]["status"] == "SUCCEEDED"


def test_scheduled_slots_wait_in_a_tick_batch_too(
    db: sqlalchemy.Engine, clock: Clock, caplog: pytest.LogCaptureFixture
):
    engine, port = engine_with(db, clock)
    apply(engine, spec("a", "every 60s"), spec("d", "every 60s", **needs("a")))
    clock.now = max(eta for _, _, eta in port.ticks)
    ticks = [(job_id, nonce) for job_id, nonce, _ in port.ticks]
    port.clear()
    engine.tick_many(ticks, start_here=True)
    assert "one by one" not in caplog.text  # the batch took them both
    [d] = rows(engine, "d")
    assert (d["status"], d["reason"], d["slot"]) == ("WAITING", "upstream", clock.now)
    deliver(engine, port)  # a runs and succeeds: d starts
    settle(engine, port)
    assert [r["status"] for r in rows(engine, "d")] == ["SUCCEEDED"]


def test_a_backfill_runs_each_day_only_where_that_day_s_upstream_succeeded(
    db: sqlalchemy.Engine, clock: Clock
):
    ok, no = Outcome(S.SUCCEEDED), Outcome.failed("no data")
    engine, port = engine_with(db, clock, Scripted(ok, no, ok))
    daily = {"requires": [{"job": "a", "succeeded_within": "2h"}]}
    apply(engine, spec("a", "0 2 * * *"), spec("d", "0 3 * * *", **daily))
    first, last = datetime(2026, 2, 25, tzinfo=UTC), datetime(2026, 2, 27, 23, tzinfo=UTC)
    sched = Scheduler(engine)
    sched.backfill("p/a", first, last)
    settle(engine, port)
    assert [r["status"] for r in rows(engine, "a")] == ["SUCCEEDED", "FAILED", "SUCCEEDED"]
    sched.backfill("p/d", first, last, max_concurrent=2)
    settle(engine, port)
    by_day = {r["slot"].day: (r["status"], r["reason"]) for r in rows(engine, "d")}
    assert by_day == {
        25: ("SUCCEEDED", None),
        26: ("SKIPPED", "upstream"),
        27: ("SUCCEEDED", None),
    }


def test_apply_refuses_unknown_upstreams_and_cycles(db: sqlalchemy.Engine, clock: Clock):
    engine, _ = engine_with(db, clock)
    sched = Scheduler(engine)
    with pytest.raises(SpecError, match="no job named 'q/x' in the database"):
        apply(engine, spec("d", **needs("q/x")))
    sched.apply([JobSpec("q", "x", "triggered")], project="q")
    apply(engine, spec("d", **needs("q/x")))
    cycle = {"requires": [{"job": "p/d", **WITHIN}]}
    with pytest.raises(SpecError, match=r"require each other in a cycle: q/x -> p/d -> q/x"):
        sched.apply([JobSpec("q", "x", "triggered", controls=cycle)], project="q")
    with pytest.raises(SpecError, match="cycle: p/d -> p/e -> p/d"):
        apply(engine, spec("d", **needs("e")), spec("e", **needs("d")))
    with pytest.raises(SpecError, match="cannot require itself"):
        spec("d", **needs("d"))


def test_a_job_made_again_is_an_upstream_again(db: sqlalchemy.Engine, clock: Clock):
    engine, port = engine_with(db, clock)
    sched = Scheduler(engine)
    sched.apply([JobSpec("q", "x", "triggered")], project="q")
    apply(engine, spec("d", **needs("q/x")))
    assert job(engine, "q/x").downstream
    apply(engine, spec("d"))  # requires nothing: q/x may go
    sched.apply([], project="q", prune=True)
    sched.apply([JobSpec("q", "x", "triggered")], project="q")
    apply(engine, spec("d", **needs("q/x")))
    assert job(engine, "q/x").downstream
    Scheduler(engine).trigger("p/d")
    sched.trigger("q/x")
    settle(engine, port)
    assert [r["status"] for r in rows(engine, "d")] == ["SUCCEEDED"]


def test_the_readme_workflow_waits_and_runs_as_the_readme_says(db: sqlalchemy.Engine, clock: Clock):
    example = Path(__file__).parents[2] / "examples" / "workflows.yaml"
    page = (Path(__file__).parents[2] / "docs" / "concepts" / "workflows.md").read_text()
    block = page.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert yaml.safe_load(block) == yaml.safe_load(example.read_text())
    engine, port = engine_with(db, clock, Scripted())  # no sleeps
    declared = load_job_file(example)
    Scheduler(engine).apply(declared.jobs, project=declared.project)
    clock.now = max(eta for _, _, eta in port.ticks)
    ticks = [(job_id, nonce) for job_id, nonce, _ in port.ticks]
    port.clear()
    engine.tick_many(ticks, start_here=True)
    status = {}
    for name in ("retrain", "publish"):
        [row] = rows(engine, name, project="ml")
        status[name] = (row["status"], row["reason"])
    assert status == {"retrain": ("WAITING", "upstream"), "publish": ("WAITING", "upstream")}
    settle(engine, port)
    for name in ("features", "labels", "retrain", "publish"):
        [row] = rows(engine, name, project="ml")
        assert row["status"] == "SUCCEEDED", name
        if name in ("retrain", "publish"):
            assert row["checks"]["held_at"] and row["checks"]["released_at"]


def test_apply_looks_again_at_the_waiting_runs_of_the_jobs_it_changes(
    db: sqlalchemy.Engine, clock: Clock
):
    engine, port = engine_with(db, clock)
    apply(engine, spec("a"), spec("d", **needs("a")), spec("e", **needs("a")))
    sched = Scheduler(engine)
    sched.trigger("p/d")
    sched.trigger("p/e")
    apply(engine, spec("a"), spec("d"))  # d requires nothing now; e is disabled, kept
    assert rows(engine, "d")[0]["status"] == "STARTING"
    assert rows(engine, "e")[0]["status"] == "WAITING"
    run_now(engine, port, "a")  # a disabled job's waiting run is still released
    assert [r["status"] for r in rows(engine, "d")] == ["SUCCEEDED"]
    assert [r["status"] for r in rows(engine, "e")] == ["SUCCEEDED"]


def test_a_run_whose_turn_comes_after_its_window_is_settled_at_once(
    db: sqlalchemy.Engine, clock: Clock
):
    engine, port = engine_with(db, clock, Scripted(Outcome(S.SUCCEEDED), None))
    apply(engine, spec("a"), spec("d", overlap="buffer_one", **needs("a", max_wait="10m")))
    run_now(engine, port, "a")
    Scheduler(engine).trigger("p/d")
    deliver(engine, port)  # d's first run hangs
    clock.advance(3601)
    Scheduler(engine).trigger("p/d")  # buffered, its window: until 10 min from now
    clock.advance(1200)
    engine.runs.abort(invocation_id=rows(engine, "d")[0]["id"])
    second = rows(engine, "d")[1]
    assert (second["status"], second["deadline"]) == ("WAITING", clock.now - timedelta(minutes=10))
    watchdog.run_once(engine)
    second = rows(engine, "d")[1]
    assert (second["status"], second["reason"]) == ("SKIPPED", "upstream")


def test_a_success_does_not_wait_for_a_downstream_another_transaction_holds(
    pg_url: str, clock: Clock
):
    """A tick batch locks its jobs in id order: d (made first), then a. Were a's
    success to wait for d's lock while holding a's, the two would deadlock; it looks at
    d again once it has committed instead. (PostgreSQL alone: SQLite has one writer at
    a time, so no transaction can hold d meanwhile.)"""
    engine, port = engine_with(make_engine(pg_url), clock, Scripted(None))
    apply(engine, spec("d", **needs("a")), spec("a"))
    d, a = job(engine, "p/d"), job(engine, "p/a")
    assert d.id < a.id
    Scheduler(engine).trigger("p/d")
    Scheduler(engine).trigger("p/a")
    deliver(engine, port)  # a's attempt is claimed; its worker died
    [run] = rows(engine, "a")
    through = threading.Event()  # a's success does not wait for d: it looks again
    thread, errors = tick_batch_holding(engine, d.id, a.id, through)
    assert engine.runs.finish_invocation(run["id"], Outcome(S.SUCCEEDED), attempt=1)
    through.set()
    thread.join()
    assert errors == []
    [d_run] = rows(engine, "d")
    assert d_run["status"] == "STARTING"  # d was held: started by the control path
    assert [m[0] for m in port.start_messages] == [d_run["id"]]
    deliver(engine, port)
    assert rows(engine, "d")[0]["status"] == "SUCCEEDED"
    engine.db.dispose()


def test_a_success_that_triggers_a_job_begins_its_downstream_only_after_the_trigger(
    pg_url: str, clock: Clock
):
    """a triggers t and releases d. A tick batch holds t and then wants d. Had a's
    success begun d before waiting for t's lock, each would wait for the other."""
    engine, port = engine_with(make_engine(pg_url), clock, Scripted(None))
    apply(engine, spec("t"), spec("a", triggers=["t"]), spec("d", **needs("a")))
    t, d = job(engine, "p/t"), job(engine, "p/d")
    Scheduler(engine).trigger("p/d")
    Scheduler(engine).trigger("p/a")
    deliver(engine, port)  # a's attempt is claimed; its worker died
    [run] = rows(engine, "a")
    thread, errors = tick_batch_holding(engine, t.id, d.id)  # a's success waits for t
    try:
        assert engine.runs.finish_invocation(run["id"], Outcome(S.SUCCEEDED), attempt=1)
    except Exception as err:  # a deadlock ends one of the two
        errors.append(err)
    thread.join()
    assert errors == []
    assert [r["status"] for r in rows(engine, "d")] == ["RUNNING"]
    assert len(rows(engine, "t")) == 1
    engine.db.dispose()


def test_prune_keeps_a_job_another_project_requires(db: sqlalchemy.Engine, clock: Clock):
    engine, _ = engine_with(db, clock)
    sched = Scheduler(engine)
    sched.apply([JobSpec("q", "x", "triggered"), JobSpec("q", "y", "triggered")], project="q")
    apply(engine, spec("d", **needs("q/x")))
    with pytest.raises(SpecError, match="job 'x': prune: p/d requires it"):
        sched.apply([], project="q", prune=True)
    sched.apply([JobSpec("q", "x", "triggered")], project="q", prune=True)  # y goes
    assert {j["id"] for j in sched.jobs()} == {"p/d", "q/x"}


def test_upstreams_that_succeed_in_one_group_of_outcomes_release_their_downstream(
    db: sqlalchemy.Engine, clock: Clock
):
    """A group holds its runs' updates until its end: the second success must still
    find the first one's, unwritten."""
    engine, port = engine_with(db, clock, Scripted(None, None))
    a_run, b_run = d_waits_for_a_and_b_running(engine, port)
    ok = Outcome(S.SUCCEEDED)
    reports = [Report(run["id"], 1, ok) for run in (a_run, b_run)]
    finish_together(engine.runs, reports)
    assert [r.recorded for r in reports] == [True, True]
    assert rows(engine, "d")[0]["status"] == "RUNNING"  # begun in the group's transaction
    assert [j["status"] for j in (rows(engine, "a")[0], rows(engine, "b")[0])] == ["SUCCEEDED"] * 2


def test_one_success_begins_every_run_of_a_job_it_releases(db: sqlalchemy.Engine, clock: Clock):
    engine, port = engine_with(db, clock)
    apply(engine, spec("a"), spec("d", overlap="allow", **needs("a")))
    Scheduler(engine).trigger("p/d")
    Scheduler(engine).trigger("p/d")
    assert [r["status"] for r in rows(engine, "d")] == ["WAITING", "WAITING"]
    Scheduler(engine).trigger("p/a")
    deliver(engine, port)  # a succeeds: both of d's runs are begun in its transaction
    assert [(r["status"], r["attempt"]) for r in rows(engine, "d")] == [("RUNNING", 1)] * 2
    assert port.start_messages == [] and len(port.runs) == 2
    snapshot = job(engine, "p/d").snapshot
    assert (snapshot.state.value, snapshot.active) == ("RUNNING", 2)


def test_a_group_begins_a_released_run_from_its_job_as_the_group_left_it(
    db: sqlalchemy.Engine, clock: Clock
):
    """The group records d's first run (its job's save held), then a's success, which
    releases d's second run and begins it in the group's transaction: both outcomes
    are recorded by the group, and d ends RUNNING with one run active."""
    engine, port = engine_with(db, clock, Scripted(Outcome(S.SUCCEEDED), None, None))
    apply(engine, spec("d", overlap="allow", **needs("a")), spec("a"))
    assert job(engine, "p/d").id < job(engine, "p/a").id  # the group records d first
    run_now(engine, port, "a")  # a succeeds
    run_now(engine, port, "d")  # d's first run starts; claimed, its worker died
    clock.advance(3601)  # a's success no longer counts
    Scheduler(engine).trigger("p/d")
    Scheduler(engine).trigger("p/a")
    deliver(engine, port)  # a's second run: claimed, its worker died
    d1, d2 = rows(engine, "d")
    assert (d1["status"], d2["status"], d2["reason"]) == ("RUNNING", "WAITING", "upstream")
    ok = Outcome(S.SUCCEEDED)
    reports = [Report(d1["id"], 1, ok), Report(rows(engine, "a")[1]["id"], 1, ok)]
    finish_together(engine.runs, reports)
    assert [(r.recorded, r.alone) for r in reports] == [(True, False), (True, False)]
    d1, d2 = rows(engine, "d")
    assert (d1["status"], d2["status"], d2["attempt"]) == ("SUCCEEDED", "RUNNING", 1)
    snapshot = job(engine, "p/d").snapshot
    assert (snapshot.state.value, snapshot.active) == ("RUNNING", 1)


def test_two_upstreams_succeeding_at_once_release_their_downstream(pg_url: str, clock: Clock):
    """a's and b's successes are recorded at once, each transaction holding its own
    upstream: a's finds b held by b's transaction and cannot know whether b succeeds,
    and b's finds d's waiting run held by a's. a's looks at d again once it has
    committed, under a share lock on b that waits for b's transaction."""
    engine, port = engine_with(make_engine(pg_url), clock, Scripted(None, None))
    a_run, b_run = d_waits_for_a_and_b_running(engine, port)
    ok, checked, b_recorded, errors = Outcome(S.SUCCEEDED), threading.Event(), threading.Event(), []

    def a_succeeds() -> None:
        try:
            with engine.transaction() as conn:
                locked = engine.lock(conn, a_run["id"])
                assert locked is not None
                fed = engine.runs.record_outcome(conn, *locked, ok, clock.now)
                checked.set()  # d: b is held by b's transaction
                # b's success waits for d's run, or skips it and is recorded meanwhile
                wait_for_lock_wait(engine.db, "b's success", or_done=b_recorded.is_set)
            engine.send(fed.messages)
        except Exception as err:
            errors.append(err)

    thread = threading.Thread(target=a_succeeds)
    with engine.transaction() as conn:
        locked = engine.lock(conn, b_run["id"])
        assert locked is not None
        thread.start()
        assert checked.wait(5)
        fed = engine.runs.record_outcome(conn, *locked, ok, clock.now)  # d's run: a's holds it
        b_recorded.set()
    engine.send(fed.messages)
    thread.join()
    assert errors == []
    assert rows(engine, "d")[0]["status"] == "RUNNING"  # begun by a's look again
    engine.db.dispose()
