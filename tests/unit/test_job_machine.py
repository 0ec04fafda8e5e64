"""The job machine, rolled with a fixed clock: every transition and its exact actions."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
import transitions

from scheduler.schedules import Every, FixedDelay, Triggered
from statemachine import (
    Abandon,
    Disable,
    Enable,
    InvalidTransition,
    InvocationFinished,
    InvocationStarted,
    JobSnapshot,
    JobState,
    Pause,
    RecordSkipped,
    Repair,
    Resume,
    ScheduleChanged,
    StartInvocation,
    Tick,
    TickLater,
    Trigger,
    step,
)

S = JobState
T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
EVERY10 = Every(timedelta(seconds=10))
NEW = 777  # the nonce the step is handed


def sec(n: float) -> datetime:
    return T0 + timedelta(seconds=n)


def run(snap, event, now=T0, schedule=EVERY10):  # type: ignore[no-untyped-def]
    return step(snap, event, now=now, schedule=schedule, nonce=NEW)


def scheduled(at: float = 10, nonce: int = 1) -> JobSnapshot:
    return JobSnapshot(S.SCHEDULED, tick_at=sec(at), tick_nonce=nonce)


def busy(state: JobState, running: bool = True, at: float = 10) -> JobSnapshot:
    return JobSnapshot(
        state, tick_at=sec(at), tick_nonce=1, invocation_id=5, invocation_running=running
    )


def test_enable_schedules_the_first_slot_after_now():
    r = run(JobSnapshot(), Enable(), now=sec(3))
    assert r.snapshot == JobSnapshot(S.SCHEDULED, tick_at=sec(10), tick_nonce=NEW)
    assert r.actions == [TickLater(sec(10), NEW)]


def test_enable_of_an_enabled_job_changes_nothing():
    r = run(scheduled(), Enable())
    assert not r.changed and r.actions == []


@pytest.mark.parametrize("nonce", [0, 2, NEW])
def test_a_stale_tick_is_ignored(nonce: int):
    r = run(scheduled(nonce=1), Tick(nonce), now=sec(10))
    assert not r.changed and r.actions == []


@pytest.mark.parametrize("state", [S.SUSPENDED, S.DISABLED])
def test_ticks_are_ignored_while_idle(state: JobState):
    r = run(JobSnapshot(state), Tick(1), now=sec(10))
    assert not r.changed


def test_a_due_tick_starts_the_slot_and_schedules_the_next():
    r = run(scheduled(), Tick(1), now=sec(10.2))
    assert r.snapshot.state == S.QUEUED
    assert r.actions == [StartInvocation(sec(10)), TickLater(sec(20), NEW)]
    assert (r.snapshot.tick_at, r.snapshot.tick_nonce) == (sec(20), NEW)


def test_the_same_tick_delivered_twice_fires_once():
    first = run(scheduled(), Tick(1), now=sec(10))
    second = run(first.snapshot, Tick(1), now=sec(10.5))
    assert not second.changed and second.actions == []


def test_the_next_slot_counts_from_the_slot_not_from_a_late_worker():
    r = run(scheduled(), Tick(1), now=sec(17))  # 7 s late, within the grace
    assert r.actions == [StartInvocation(sec(10)), TickLater(sec(20), NEW)]


def test_an_early_tick_hops_with_a_new_nonce():
    r = run(scheduled(at=900), Tick(1), now=sec(300))
    assert r.snapshot.state == S.SCHEDULED
    assert r.actions == [TickLater(sec(900), NEW)]
    assert r.snapshot.tick_nonce == NEW


def test_a_misfire_runs_the_newest_slot_and_records_the_others():
    r = run(scheduled(), Tick(1), now=sec(45))  # slots 10..40 passed; grace is 10 s
    assert r.actions == [
        RecordSkipped(sec(10), "misfire"),
        RecordSkipped(sec(20), "misfire"),
        RecordSkipped(sec(30), "misfire"),
        StartInvocation(sec(40)),
        TickLater(sec(50), NEW),
    ]


@pytest.mark.parametrize("state", [S.QUEUED, S.RUNNING, S.OVERRUN])
def test_a_tick_during_a_run_is_an_overrun(state: JobState):
    r = run(busy(state), Tick(1), now=sec(10))
    assert r.snapshot.state == S.OVERRUN
    assert r.snapshot.overruns == 1
    assert r.snapshot.invocation_id == 5
    assert r.actions == [RecordSkipped(sec(10), "overlap"), TickLater(sec(20), NEW)]


def test_started_then_finished_returns_to_scheduled():
    queued = busy(S.QUEUED, running=False)
    running = run(queued, InvocationStarted(5)).snapshot
    assert (running.state, running.invocation_running) == (S.RUNNING, True)
    done = run(running, InvocationFinished(5, sec(1)))
    assert done.snapshot == JobSnapshot(S.SCHEDULED, tick_at=sec(10), tick_nonce=1)
    assert done.actions == []


def test_finishing_an_overrun_returns_to_scheduled():
    r = run(busy(S.OVERRUN), InvocationFinished(5, sec(1)))
    assert r.snapshot.state == S.SCHEDULED


@pytest.mark.parametrize("event", [InvocationStarted(6), InvocationFinished(6, T0)])
def test_reports_about_another_invocation_are_ignored(event):  # type: ignore[no-untyped-def]
    r = run(busy(S.QUEUED, running=False), event)
    assert not r.changed


@pytest.mark.parametrize("state", [S.SCHEDULED, S.QUEUED, S.RUNNING, S.OVERRUN])
def test_pause_stops_the_ticks_and_keeps_the_run(state: JobState):
    snap = scheduled() if state == S.SCHEDULED else busy(state)
    r = run(snap, Pause("maintenance"))
    assert r.snapshot.state == S.SUSPENDED
    assert (r.snapshot.tick_at, r.snapshot.tick_nonce) == (None, None)
    assert r.snapshot.invocation_id == snap.invocation_id
    assert r.actions == []


def test_a_run_that_ends_while_paused_stays_paused():
    paused = run(busy(S.RUNNING), Pause()).snapshot
    r = run(paused, InvocationFinished(5, sec(1)))
    assert r.snapshot == JobSnapshot(S.SUSPENDED)


def test_resume_starts_from_now_not_from_the_missed_slots():
    r = run(JobSnapshot(S.SUSPENDED), Resume(), now=sec(95))
    assert r.snapshot == JobSnapshot(S.SCHEDULED, tick_at=sec(100), tick_nonce=NEW)
    assert r.actions == [TickLater(sec(100), NEW)]


@pytest.mark.parametrize(("running", "state"), [(True, S.RUNNING), (False, S.QUEUED)])
def test_resume_and_enable_land_in_the_state_of_the_run(running: bool, state: JobState):
    for idle, event in ((S.SUSPENDED, Resume()), (S.DISABLED, Enable())):
        snap = JobSnapshot(idle, invocation_id=5, invocation_running=running)
        assert run(snap, event).snapshot.state == state


@pytest.mark.parametrize("state", [S.SCHEDULED, S.QUEUED, S.RUNNING, S.OVERRUN, S.SUSPENDED])
def test_disable_from_any_state(state: JobState):
    snap = JobSnapshot(state) if state == S.SUSPENDED else busy(state)
    r = run(snap, Disable())
    assert r.snapshot.state == S.DISABLED and r.snapshot.tick_nonce is None


@pytest.mark.parametrize("event", [Pause(), Resume(), Trigger("t")])
def test_a_disabled_job_refuses_commands(event):  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidTransition, match="DISABLED"):
        run(JobSnapshot(), event)


def test_trigger_starts_a_manual_run_and_keeps_the_tick():
    r = run(scheduled(), Trigger("abc"))
    assert r.snapshot.state == S.QUEUED
    assert r.snapshot.tick_nonce == 1
    assert r.actions == [StartInvocation(None, "abc")]


def test_trigger_during_a_run_is_recorded_as_skipped():
    r = run(busy(S.RUNNING), Trigger("abc"))
    assert r.snapshot.state == S.RUNNING and r.snapshot.overruns == 1
    assert r.actions == [RecordSkipped(None, "overlap", "abc")]


def test_trigger_of_a_paused_job_is_refused():
    with pytest.raises(InvalidTransition, match="cannot trigger a job that is SUSPENDED"):
        run(JobSnapshot(S.SUSPENDED), Trigger("abc"))


def test_a_changed_schedule_moves_the_pending_tick():
    r = run(scheduled(at=10), ScheduleChanged(), now=sec(3), schedule=Every(timedelta(hours=1)))
    assert r.actions == [TickLater(datetime(2026, 3, 1, 13, tzinfo=UTC), NEW)]
    assert r.snapshot.tick_nonce == NEW


def test_repair_resends_the_pending_tick_with_a_new_nonce():
    r = run(busy(S.RUNNING, at=10), Repair(), now=sec(30))
    assert r.snapshot.state == S.RUNNING
    assert r.actions == [TickLater(sec(10), NEW)]


def test_repair_without_a_pending_tick_does_nothing():
    assert not run(JobSnapshot(S.SUSPENDED), Repair()).changed


def test_abandon_returns_a_queued_job_to_scheduled():
    r = run(busy(S.QUEUED, running=False), Abandon())
    assert r.snapshot == JobSnapshot(S.SCHEDULED, tick_at=sec(10), tick_nonce=1)


def test_fixed_delay_counts_from_the_end_of_the_run():
    delay = FixedDelay(timedelta(minutes=10))
    enabled = run(JobSnapshot(), Enable(), schedule=delay)
    assert enabled.actions == [TickLater(sec(600), NEW)]
    fired = run(enabled.snapshot, Tick(NEW), now=sec(600), schedule=delay)
    assert fired.actions == [StartInvocation(sec(600))]
    assert fired.snapshot.tick_nonce is None
    queued = replace(fired.snapshot, invocation_id=9)
    done = run(queued, InvocationFinished(9, sec(700)), now=sec(700), schedule=delay)
    assert done.actions == [TickLater(sec(1300), NEW)]


def test_a_triggered_job_never_ticks():
    r = run(JobSnapshot(), Enable(), schedule=Triggered())
    assert r.snapshot == JobSnapshot(S.SCHEDULED) and r.actions == []


def test_step_leaves_its_input_alone():
    snap = scheduled()
    run(snap, Tick(1), now=sec(10))
    assert snap == scheduled()


def test_naive_now_is_rejected():
    with pytest.raises(ValueError, match="timezone-aware"):
        run(scheduled(), Tick(1), now=datetime(2026, 3, 1, 12))


def test_the_transitions_machine_is_built_once(monkeypatch: pytest.MonkeyPatch):
    def refuse(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("a Machine was built during a step")

    monkeypatch.setattr(transitions.Machine, "__init__", refuse)
    assert run(scheduled(), Tick(1), now=sec(10)).snapshot.state == S.QUEUED
