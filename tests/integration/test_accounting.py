"""Every run accounted for (issue 15): a backfill stays in the past, abort stops every
run of the job (waiting ones too), trigger says what it did, a disabled job is not
backfilled, and times are written one way. On SQLite and PostgreSQL, with a fixed clock;
the CLI runs in this process on the same engine, so that its words are checked against
the same rows."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy

from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.errors import SpecError
from cronchain.scheduler.invokers import Outcome
from cronchain.scheduler.timing.schedules import Every
from cronchain.statemachine import (
    Backfill,
    InvalidTransition,
    InvocationStatus,
    JobSnapshot,
    JobState,
    step,
)
from tests.support.deliver import deliver, deliver_ticks
from tests.support.engine import Clock, RecordingPort, Scripted, engine_with
from tests.support.jobs import apply, spec
from tests.support.rows import job, rows
from tests.support.slots import T0, at, history, run_until, settle_starts

pytestmark = pytest.mark.postgres
S = InvocationStatus
OK = "SUCCEEDED"


def statuses(engine: Engine) -> list[tuple[str, str | None]]:
    return [(r["status"], r["reason"]) for r in rows(engine)]


# --- 2. a backfill is for the past ------------------------------------------------------


def test_a_backfill_past_now_is_refused_and_the_schedule_fires_every_slot(
    engine: Engine, port: RecordingPort, clock: Clock, cli: Any
):
    sched = Scheduler(engine)
    apply(engine, spec(schedule="every 10s"))
    for dry_run in (True, False):
        with pytest.raises(SpecError, match=r"^--to: .* after now"):
            sched.backfill("p/a", at(-10), at(30), dry_run=dry_run)
    window = ("--from", "2026-03-01T11:59:50Z", "--to", "2026-03-01T12:00:30Z")
    code, out, err = cli(engine, "backfill", "p/a", *window)
    assert (code, out) == (2, "")
    assert err.startswith("cronchain: --to: ") and "2026-03-01T12:00:10Z" in err
    assert rows(engine) == []  # nothing written
    run_until(engine, port, clock, 30)
    assert history(engine) == [(10, OK, None), (20, OK, None), (30, OK, None)]
    assert not any(r["backfill"] for r in rows(engine))


def test_a_backfill_leaves_the_slot_the_schedule_is_about_to_fire(
    engine: Engine, port: RecordingPort, clock: Clock
):
    """The pending tick's slot is the schedule's even once it is past (its message is in
    flight, or the workers are down): a backfill taking it would run it without the
    overlap and misfire policies and without triggering anything."""
    sched = Scheduler(engine)
    apply(engine, spec(schedule="every 10s"))
    clock.now = at(10) + timedelta(seconds=0.5)  # the tick for 12:00:10 not handled yet
    with pytest.raises(SpecError, match=r"^--to: .*2026-03-01T12:00:10Z"):
        sched.backfill("p/a", at(5), at(10.5))
    assert len(sched.backfill("p/a", at(-20), at(5))["slots"]) == 3  # before it: fine
    deliver_ticks(engine, port)  # the late tick arrives: its slot is still the schedule's
    settle_starts(engine, port)
    assert (10, OK, None) in history(engine)
    assert [r["slot"] for r in rows(engine) if not r["backfill"]] == [at(10)]


def test_a_backfill_up_to_now_runs_the_past_slots_beside_the_schedule(
    engine: Engine, port: RecordingPort, clock: Clock
):
    sched = Scheduler(engine)
    apply(engine, spec(schedule="every 10s"))
    report = sched.backfill("p/a", at(-30), at(0), max_concurrent=4)  # now is a slot: taken
    assert len(report["slots"]) == len(report["started"]) == 4
    settle_starts(engine, port)
    run_until(engine, port, clock, 20)
    assert history(engine) == [(s, OK, None) for s in range(-30, 30, 10)]
    assert [r["backfill"] for r in rows(engine)] == [True] * 4 + [False] * 2


# --- 3. abort stops every run of the job -------------------------------------------------


def test_abort_ends_the_runs_waiting_under_buffer_all_and_none_starts(
    db: sqlalchemy.Engine, clock: Clock, cli: Any
):
    engine, port = engine_with(db, clock, Scripted(None))  # the first run hangs
    apply(engine, spec(overlap="buffer_all"))
    sched = Scheduler(engine)
    sched.trigger("p/a")
    deliver(engine, port)
    sched.trigger("p/a")
    sched.trigger("p/a")
    assert statuses(engine) == [("RUNNING", None), ("WAITING", None), ("WAITING", None)]
    ids = [r["id"] for r in rows(engine)]
    code, out, err = cli(engine, "abort", "p/a")
    deliver(engine, port)
    assert statuses(engine) == [("ABORTED", "aborted")] * 3
    assert port.start_messages == [] and port.runs == []
    assert (code, err) == (0, "")
    assert out == f"p/a: aborted 1 running ({ids[0]}) and 2 waiting ({ids[1]}, {ids[2]})\n"
    snapshot = job(engine).snapshot
    assert (snapshot.state, snapshot.active, snapshot.buffered) == ("SCHEDULED", 0, 0)
    assert sched.abort("p/a") == {"STARTING": [], "RUNNING": [], "WAITING": []}
    assert sched.trigger("p/a")["result"] == "started"  # the job runs again


def test_abort_of_many_runs_names_a_few_and_counts_the_rest(
    db: sqlalchemy.Engine, clock: Clock, cli: Any
):
    engine, port = engine_with(db, clock, Scripted(None))
    apply(engine, spec(overlap="buffer_all"))
    for _ in range(13):
        Scheduler(engine).trigger("p/a")
    ids = [r["id"] for r in rows(engine)]
    code, out, _ = cli(engine, "abort", "p/a")
    shown = ", ".join(map(str, ids[1:11]))
    assert out == f"p/a: aborted 1 starting ({ids[0]}) and 12 waiting ({shown}, ... 2 more)\n"


def test_abort_ends_the_waiting_catch_up_runs_of_misfire_all(db: sqlalchemy.Engine, clock: Clock):
    engine, port = engine_with(db, clock, Scripted(None))  # the first catch-up run hangs
    apply(engine, spec(schedule="every 10s", misfire="all"))
    clock.advance(55)  # slots 10 to 50 are missed
    deliver_ticks(engine, port)
    deliver(engine, port)
    assert [r["status"] for r in rows(engine)] == ["RUNNING"] + ["WAITING"] * 4
    first, *waiting = [r["id"] for r in rows(engine)]
    aborted = Scheduler(engine).abort("p/a")
    deliver(engine, port)
    assert {r["status"] for r in rows(engine)} == {"ABORTED"}
    assert aborted == {"STARTING": [], "RUNNING": [first], "WAITING": waiting}
    assert (job(engine).snapshot.active, job(engine).snapshot.buffered) == (0, 0)
    clock.advance(5)  # the schedule goes on: slot 60
    deliver_ticks(engine, port)
    deliver(engine, port)
    assert history(engine)[-1] == (60, OK, None)


def test_abort_of_one_invocation_still_lets_a_waiting_run_take_its_place(
    db: sqlalchemy.Engine, clock: Clock, cli: Any
):
    engine, port = engine_with(db, clock, Scripted(None))
    apply(engine, spec(overlap="buffer_one"))
    sched = Scheduler(engine)
    first = sched.trigger("p/a")["invocation"]
    deliver(engine, port)
    second = sched.trigger("p/a")["invocation"]
    code, out, _ = cli(engine, "abort", "--invocation", str(first))
    assert (code, out) == (0, f"invocation {first}: aborted 1 running ({first})\n")
    deliver(engine, port)
    assert statuses(engine) == [("ABORTED", "aborted"), ("SUCCEEDED", None)]
    assert rows(engine)[1]["id"] == second
    assert cli(engine, "abort", "p/a")[1] == "p/a: nothing active or waiting\n"


# --- 4. trigger says what happened ------------------------------------------------------


def test_trigger_says_whether_its_run_started_waits_or_was_skipped(
    db: sqlalchemy.Engine, clock: Clock, cli: Any
):
    engine, port = engine_with(db, clock, Scripted(None))
    apply(engine, spec(overlap="buffer_one"))
    sched = Scheduler(engine)
    started = sched.trigger("p/a")
    deliver(engine, port)
    buffered = sched.trigger("p/a")
    waiting = rows(engine)[1]
    assert buffered["skipped"] is None  # it was not skipped: it waits
    assert started | {"trigger_id": None} == {
        "trigger_id": None,
        "result": "started",
        "invocation": rows(engine)[0]["id"],
        "status": "STARTING",
        "skipped": None,
        "waiting": None,
    }
    assert (waiting["status"], waiting["trigger_id"]) == ("WAITING", buffered["trigger_id"])
    assert buffered | {"trigger_id": None} == {
        "trigger_id": None,
        "result": "buffered",
        "invocation": waiting["id"],
        "status": "WAITING",
        "skipped": None,
        "waiting": None,
    }
    code, out, _ = cli(engine, "trigger", "p/a")  # buffer_one: one waits already
    skipped = rows(engine)[2]
    assert (skipped["status"], skipped["reason"]) == ("SKIPPED", "overlap")
    assert code == 0
    assert out == (
        f"p/a: skipped (overlap): another run is active; recorded as invocation {skipped['id']}\n"
    )
    engine.runs.finish_invocation(started["invocation"], Outcome(S.SUCCEEDED), attempt=1)
    code, out, _ = cli(engine, "trigger", "p/a")  # the buffered run is active now
    assert out == (
        f"p/a: invocation {rows(engine)[3]['id']} is WAITING: another run is active;"
        " it starts in its turn\n"
    )
    assert rows(engine)[3]["status"] == "WAITING"
    while port.start_messages:  # the buffered runs start and succeed, one after the other
        deliver(engine, port)
    assert [r["status"] for r in rows(engine)] == [OK, OK, "SKIPPED", OK]
    code, out, _ = cli(engine, "trigger", "p/a")  # idle again
    assert out == f"p/a: invocation {rows(engine)[4]['id']} started\n"


# --- 5. a disabled job is not backfilled -------------------------------------------------


def test_a_disabled_job_refuses_a_backfill_and_a_paused_one_takes_it(
    engine: Engine, port: RecordingPort, clock: Clock, cli: Any
):
    sched = Scheduler(engine)
    apply(engine, spec(schedule="every 10s"), spec("b", schedule="every 10s"))
    sched.apply([spec("b", schedule="every 10s")], project="p")  # p/a is disabled
    assert job(engine).enabled is False
    for dry_run in (True, False):
        with pytest.raises(InvalidTransition, match="cannot backfill a job that is DISABLED"):
            sched.backfill("p/a", at(-30), at(-10), dry_run=dry_run)
    window = ("--from", "2026-03-01T11:59:30Z", "--to", "2026-03-01T11:59:50Z")
    code, out, err = cli(engine, "backfill", "p/a", *window)
    assert (code, out) == (2, "")
    assert err == "cronchain: cannot backfill a job that is DISABLED\n"
    assert rows(engine) == []

    sched.pause("p/b", "maintenance")  # a paused job: its schedule stops, a backfill runs
    code, out, _ = cli(engine, "backfill", "p/b", *window)
    assert code == 0 and out.startswith("p/b: created 3 invocations")
    settle_starts(engine, port)
    assert [(r["status"], r["backfill"]) for r in rows(engine)] == [(OK, True)] * 3
    assert job(engine, "p/b").snapshot.state == "SUSPENDED"


@pytest.mark.parametrize("state", ["SCHEDULED", "RUNNING", "SUSPENDED"])
def test_the_machine_takes_a_backfill_unchanged_unless_the_job_is_disabled(state: str):
    """The pure rule the engine asks before it plans a backfill."""
    schedule = Every(timedelta(seconds=10))
    with pytest.raises(InvalidTransition, match="cannot backfill a job that is DISABLED"):
        step(JobSnapshot(), Backfill(), now=T0, schedule=schedule, nonce=1)
    snapshot = JobSnapshot(JobState(state), active=int(state == "RUNNING"), buffered=1)
    done = step(snapshot, Backfill(), now=T0, schedule=schedule, nonce=1)
    assert (done.snapshot, done.actions, done.changed) == (snapshot, [], False)


# --- 7. one way to write a time ----------------------------------------------------------


def test_attempt_times_are_written_with_a_z_like_every_other_time(
    db: sqlalchemy.Engine, clock: Clock, cli: Any
):
    failed = Outcome.failed("boom", "error")
    engine, port = engine_with(db, clock, Scripted(failed))
    apply(engine, spec(retries={"max_attempts": 2, "backoff": "1s", "jitter": 0}))
    inv = Scheduler(engine).trigger("p/a")["invocation"]
    deliver(engine, port)
    clock.advance(2)
    deliver(engine, port, clock)
    code, out, _ = cli(engine, "history", "--invocation", str(inv), "--json")
    detail = json.loads(out)
    [attempt] = detail["attempts"]
    assert attempt["started_at"] == "2026-03-01T12:00:00Z"
    assert attempt["finished_at"] == "2026-03-01T12:00:00Z"
    assert detail["finished_at"] == "2026-03-01T12:00:02Z" == detail["started_at"]
    assert Scheduler(engine).invocation(inv)["attempts"] == [attempt]


def test_explain_does_not_say_ran_of_a_run_that_has_not(
    engine: Engine, port: RecordingPort, clock: Clock
):
    """A backfill's slot still WAITING, or a run under way, has an invocation but has
    not run: explain says which (found by review: it answered "ran")."""
    sched = Scheduler(engine)
    apply(engine, spec(schedule="every 10s"))
    sched.backfill("p/a", at(-30), at(-10))  # one at a time: two of them wait
    assert sched.explain("p/a", at(-10))["answer"] == "waiting"
    assert sched.explain("p/a", at(-30))["answer"] == "running"  # STARTING: sent
    settle_starts(engine, port)
    assert sched.explain("p/a", at(-10))["answer"] == "ran"
