"""Time on real databases with a fixed clock: misfire policies after downtime, pause and
resume with and without catch-up, backfill run twice, an edited schedule, explain."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.maintenance import watchdog
from cronchain.scheduler.spec.jobspec import JobSpec
from tests.support.deliver import deliver_runs, deliver_starts, deliver_ticks
from tests.support.engine import Clock, RecordingPort
from tests.support.rows import job, rows
from tests.support.slots import at, history, run_until, settle_starts

pytestmark = pytest.mark.postgres


def apply_one(engine: Engine, schedule: str = "every 10s", **controls: Any) -> Scheduler:
    """Project ``p`` is the job ``a`` alone, on ``schedule`` with ``controls``; returns the
    scheduler it was applied with."""
    sched = Scheduler(engine)
    sched.apply([JobSpec("p", "a", schedule, controls=controls)], project="p")
    return sched


def outage(engine: Engine, port: RecordingPort, clock: Clock, seconds: float) -> None:
    """Lose every message, then let the watchdog repair the chain ``seconds`` later."""
    port.clear()
    clock.advance(seconds)
    watchdog.run_once(engine)
    deliver_ticks(engine, port)
    settle_starts(engine, port)


OK = "SUCCEEDED"


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("skip", [(s, "SKIPPED", "misfire") for s in range(30, 80, 10)]),
        ("latest", [*((s, "SKIPPED", "misfire") for s in range(30, 70, 10)), (70, OK, None)]),
        ("all", [(s, OK, None) for s in range(30, 80, 10)]),
    ],
)
def test_downtime_under_each_misfire_policy(
    engine: Engine, port: RecordingPort, clock: Clock, policy: str, expected: list[Any]
):
    apply_one(engine, misfire=policy)
    run_until(engine, port, clock, 20)
    outage(engine, port, clock, 55)  # slots 30..70 are missed; now is 75
    assert history(engine) == [(10, OK, None), (20, OK, None), *expected]
    assert job(engine).snapshot.tick_at == at(80)
    assert job(engine).snapshot.active == 0


def test_catchup_limit_keeps_the_newest_slots(engine: Engine, port: RecordingPort, clock: Clock):
    apply_one(engine, misfire="all", catchup_limit=2)
    outage(engine, port, clock, 55)  # slots 10..50 missed
    assert history(engine) == [
        (10, "SKIPPED", "misfire"),
        (20, "SKIPPED", "misfire"),
        (30, "SKIPPED", "misfire"),
        (40, OK, None),
        (50, OK, None),
    ]


def test_a_late_tick_within_the_grace_fires_normally(
    engine: Engine, port: RecordingPort, clock: Clock
):
    apply_one(engine, misfire="skip", misfire_grace="30s")
    clock.advance(35)  # slot 10 is 25 s late
    deliver_ticks(engine, port)
    settle_starts(engine, port)
    assert history(engine) == [(10, OK, None)]


def test_pause_and_resume_records_the_missed_slots(
    engine: Engine, port: RecordingPort, clock: Clock
):
    sched = apply_one(engine)
    run_until(engine, port, clock, 10)
    clock.advance(5)
    sched.pause("p/a", "maintenance")
    clock.advance(40)  # now 55: slots 20..50 are missed
    sched.resume("p/a")
    assert history(engine) == [
        (10, OK, None),
        *((s, "SKIPPED", "paused") for s in (20, 30, 40, 50)),
    ]
    assert job(engine).snapshot.tick_at == at(60)


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("latest", [(20, "SKIPPED", "misfire"), (30, "SKIPPED", "misfire"), (40, OK, None)]),
        ("all", [(20, OK, None), (30, OK, None), (40, OK, None)]),
    ],
)
def test_resume_with_catch_up_applies_the_misfire_policy(
    engine: Engine, port: RecordingPort, clock: Clock, policy: str, expected: list[Any]
):
    sched = apply_one(engine, misfire=policy)
    run_until(engine, port, clock, 10)
    sched.pause("p/a")
    clock.advance(35)  # now 45: slots 20..40 are missed
    port.clear()
    sched.resume("p/a", catch_up=True)
    deliver_ticks(engine, port)
    settle_starts(engine, port)
    assert history(engine) == [(10, OK, None), *expected]
    assert job(engine).snapshot.tick_at == at(50)


def test_re_enabling_does_not_fire_the_slots_missed_while_disabled(
    engine: Engine, port: RecordingPort, clock: Clock
):
    sched = Scheduler(engine)
    apply_one(engine)
    sched.apply([], project="p")  # disables p/a
    clock.advance(60)
    apply_one(engine)
    assert history(engine) == []
    assert job(engine).snapshot.tick_at == at(70)


def test_backfill_twice_runs_each_slot_once(engine: Engine, port: RecordingPort, clock: Clock):
    clock.advance(1000)
    sched = apply_one(engine, "every 1m")
    dry = sched.backfill("p/a", at(0), at(300), dry_run=True)
    assert len(dry["slots"]) == 6 and rows(engine) == []
    first = sched.backfill("p/a", at(0), at(300), max_concurrent=2)
    assert len(first["started"]) == 2 and len(first["slots"]) == 6
    settle_starts(engine, port)
    again = sched.backfill("p/a", at(0), at(300), max_concurrent=2)
    assert (again["slots"], len(again["existing"]), again["started"]) == ([], 6, [])
    assert history(engine) == [(s, OK, None) for s in range(0, 360, 60)]
    assert all(r["backfill"] for r in rows(engine))
    assert job(engine).snapshot.active == 0  # the schedule's machine never counted them


def test_backfill_keeps_max_concurrent_in_flight(engine: Engine, port: RecordingPort):
    sched = apply_one(engine, "every 1m")
    sched.backfill("p/a", at(-600), at(-60), max_concurrent=3)
    in_flight = []
    while port.starts:
        in_flight.append(sum(r["status"] in ("STARTING", "RUNNING") for r in rows(engine)))
        engine.attempts.start_invocation(port.starts.pop(0))
        deliver_runs(engine, port)
    assert max(in_flight) == 3 and len(in_flight) == 10


def test_aborting_the_job_stops_its_backfill(engine: Engine, port: RecordingPort):
    sched = apply_one(engine, "every 1m")
    sched.backfill("p/a", at(-600), at(-60), max_concurrent=2)
    aborted = sched.abort("p/a")  # by status since issue 15
    assert (len(aborted["STARTING"]), len(aborted["WAITING"])) == (2, 8)
    assert {r["status"] for r in rows(engine)} == {"ABORTED"}
    port.clear()
    deliver_starts(engine, port)
    assert port.starts == []


def test_an_edited_schedule_moves_the_tick_and_runs_with_the_new_revision(
    engine: Engine, port: RecordingPort, clock: Clock
):
    sched = apply_one(engine, "every 10s")
    before = job(engine)
    unchanged = sched.apply([JobSpec("p", "a", "every 10s")], project="p")
    assert unchanged.unchanged == ["p/a"] and job(engine).generation == before.generation
    [(_, old_nonce, _)] = port.ticks
    port.clear()
    sched.apply([JobSpec("p", "a", "every 30s")], project="p")
    after = job(engine)
    assert after.snapshot.tick_nonce != old_nonce and after.snapshot.tick_at == at(30)
    clock.advance(10)
    engine.tick(after.id, old_nonce)  # the old schedule's tick is ignored
    assert rows(engine) == []
    clock.advance(20)
    deliver_ticks(engine, port)
    [inv] = rows(engine)
    assert inv["slot"] == at(30) and inv["revision"] == after.revision != before.revision


def test_explain_answers(engine: Engine, port: RecordingPort, clock: Clock):
    sched = apply_one(engine, misfire="skip")
    answer = lambda s: sched.explain("p/a", at(s))["answer"]  # noqa: E731
    assert answer(-10) == "not_created"
    run_until(engine, port, clock, 20)
    ran = sched.explain("p/a", at(10))
    assert (ran["answer"], ran["status"]) == ("ran", OK)
    assert answer(15) == "not_a_slot"
    assert [n["slot"] for n in sched.explain("p/a", at(15))["nearest"]] == [
        "2026-03-01T12:00:10Z",
        "2026-03-01T12:00:20Z",
    ]
    outage(engine, port, clock, 30)  # slots 30, 40 missed (skip); now 50
    skipped = sched.explain("p/a", at(30))
    assert (skipped["answer"], skipped["reason"]) == ("skipped", "misfire")
    assert answer(60) == "future"
    sched.pause("p/a", "deploy")
    assert answer(60) == "paused"
    assert sched.explain("p/a", at(60))["reason"] == "deploy"
    clock.advance(30)  # now 80
    sched.resume("p/a")
    assert sched.explain("p/a", at(60))["reason"] == "paused"  # the recorded SKIPPED row
    assert answer(100) == "future"
    sched.apply([], project="p")  # disabled at 80
    clock.advance(100)
    disabled = sched.explain("p/a", at(100))
    assert disabled["answer"] == "disabled" and disabled["until"] is None


def test_days_both_moves_the_tick_fires_its_own_days_and_is_explained(
    engine: Engine, port: RecordingPort, clock: Clock
):
    """``days: both`` (issue 35): changing it alone moves the tick, the job fires on
    Friday the 13th only, ``jobs()`` shows it and ``explain`` reads each past time with
    the rule then in force."""
    sched = Scheduler(engine)
    sched.apply([JobSpec("p", "a", "0 0 13 * 5")], project="p")  # T0: Sunday 2026-03-01
    assert job(engine).snapshot.tick_at == datetime(2026, 3, 6, tzinfo=UTC)  # a Friday
    clock.advance(3600)
    report = sched.apply([JobSpec("p", "a", "0 0 13 * 5", days="both")], project="p")
    assert report.updated == ["p/a"]
    friday_13th = datetime(2026, 3, 13, tzinfo=UTC)
    assert job(engine).snapshot.tick_at == friday_13th
    assert [j["days"] for j in sched.jobs()] == ["both"]

    clock.now = friday_13th - engine.horizon + timedelta(seconds=1)
    assert watchdog.run_once(engine).woken == 1  # parked until now
    clock.now = friday_13th
    deliver_ticks(engine, port)
    settle_starts(engine, port)
    assert [r["slot"] for r in rows(engine)] == [friday_13th]
    assert job(engine).snapshot.tick_at == datetime(2026, 11, 13, tzinfo=UTC)

    sixth = sched.explain("p/a", datetime(2026, 3, 6, tzinfo=UTC))
    assert (sixth["answer"], sixth["days"]) == ("not_a_slot", "both")
    assert "'0 0 13 * 5' (UTC, days: both)" in sixth["text"]
    ran = sched.explain("p/a", friday_13th)
    assert ran["answer"] == "ran"


def test_a_jobs_folder_is_reconciled_file_by_file(engine: Engine, tmp_path):  # type: ignore[no-untyped-def]
    from cronchain.scheduler.declare.apply import reconcile_folder

    (tmp_path / "a.yaml").write_text(
        "project: p\njobs:\n  - {name: a, schedule: every 10s, noop: {}}\n"
    )
    (tmp_path / "broken.yml").write_text(
        "project: q\njobs:\n  - {name: b, schedule: every 0s, noop: {}}\n"
    )
    report = reconcile_folder(engine, tmp_path)
    assert report.applied["a.yaml"].created == ["p/a"]
    assert "schedule" in report.failed["broken.yml"]
    again = reconcile_folder(engine, tmp_path)
    assert again.applied["a.yaml"].unchanged == ["p/a"]
    (tmp_path / "a.yaml").write_text("project: p\njobs: []\n")
    assert reconcile_folder(engine, tmp_path).applied["a.yaml"].disabled == ["p/a"]
