"""The job machine, rolled with a fixed clock: every transition and its exact actions."""

from __future__ import annotations

import logging
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
import transitions

from cronchain.scheduler.timing.schedules import Every, FixedDelay, Triggered
from cronchain.statemachine import (
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
    Unbuffer,
    step,
)
from cronchain.statemachine.actions import AbortActive, BufferInvocation, StartBuffered
from cronchain.statemachine.policy import (
    Misfire,
    MisfirePolicy,
    Overlap,
    OverlapPolicy,
    RetryPolicy,
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
        state, tick_at=sec(at), tick_nonce=1, invocation_id=5, invocation_running=running, active=1
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


def test_a_finish_with_other_runs_active_keeps_the_job_busy():
    snap = replace(busy(S.RUNNING), active=2)
    r = run(snap, InvocationFinished(5, sec(1)))
    assert r.snapshot.state == S.RUNNING and r.snapshot.active == 1 and r.actions == []


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
    assert r.snapshot == JobSnapshot(S.SUSPENDED, missed_from=sec(10))


def test_resume_starts_from_now_not_from_the_missed_slots():
    r = run(JobSnapshot(S.SUSPENDED), Resume(), now=sec(95))
    assert r.snapshot == JobSnapshot(S.SCHEDULED, tick_at=sec(100), tick_nonce=NEW)
    assert r.actions == [TickLater(sec(100), NEW)]


@pytest.mark.parametrize(("running", "state"), [(True, S.RUNNING), (False, S.QUEUED)])
def test_resume_and_enable_land_in_the_state_of_the_run(running: bool, state: JobState):
    for idle, event in ((S.SUSPENDED, Resume()), (S.DISABLED, Enable())):
        snap = JobSnapshot(idle, invocation_id=5, invocation_running=running, active=1)
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
    assert r.snapshot.state == S.OVERRUN and r.snapshot.overruns == 1
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


# --- overlap policies -------------------------------------------------------------------


def tick_while_busy(mode: Overlap, **limits: int) -> tuple[JobSnapshot, list]:
    """Three slots due while the first run is active, with the given policy."""
    policy = OverlapPolicy(mode, **limits)
    snap = busy(S.RUNNING, at=10)
    actions: list = []
    for n in range(3):
        now = sec(10 * (n + 1))
        r = step(snap, Tick(snap.tick_nonce), now=now, schedule=EVERY10, nonce=n + 2, policy=policy)
        snap, actions = r.snapshot, actions + [a for a in r.actions if not isinstance(a, TickLater)]
    return snap, actions


def test_skip_records_each_overlapping_slot():
    snap, actions = tick_while_busy(Overlap.SKIP)
    assert actions == [RecordSkipped(sec(t), "overlap") for t in (10, 20, 30)]
    assert (snap.state, snap.active, snap.buffered, snap.overruns) == (S.OVERRUN, 1, 0, 3)


def test_buffer_one_keeps_one_waiting_and_skips_the_rest():
    snap, actions = tick_while_busy(Overlap.BUFFER_ONE)
    assert actions == [
        BufferInvocation(sec(10)),
        RecordSkipped(sec(20), "overlap"),
        RecordSkipped(sec(30), "overlap"),
    ]
    assert (snap.active, snap.buffered) == (1, 1)


def test_buffer_all_waits_up_to_max_buffered():
    snap, actions = tick_while_busy(Overlap.BUFFER_ALL, max_buffered=2)
    assert actions == [
        BufferInvocation(sec(10)),
        BufferInvocation(sec(20)),
        RecordSkipped(sec(30), "overlap"),
    ]
    assert (snap.active, snap.buffered) == (1, 2)


def test_allow_starts_alongside_up_to_max_concurrent():
    snap, actions = tick_while_busy(Overlap.ALLOW, max_concurrent=3)
    assert actions == [
        StartInvocation(sec(10)),
        StartInvocation(sec(20)),
        RecordSkipped(sec(30), "overlap"),
    ]
    assert (snap.state, snap.active, snap.overruns) == (S.OVERRUN, 3, 1)


def test_cancel_other_aborts_the_active_run_then_starts():
    snap, actions = tick_while_busy(Overlap.CANCEL_OTHER)
    assert actions == [AbortActive("cancel_other"), StartInvocation(sec(10))] * 1 + [
        AbortActive("cancel_other"),
        StartInvocation(sec(20)),
        AbortActive("cancel_other"),
        StartInvocation(sec(30)),
    ]
    assert (snap.state, snap.active, snap.overruns) == (S.QUEUED, 1, 3)


def test_a_finish_starts_the_oldest_waiting_run():
    policy = OverlapPolicy(Overlap.BUFFER_ALL)
    snap = replace(busy(S.OVERRUN), buffered=2)
    r = step(
        snap, InvocationFinished(5, sec(1)), now=sec(1), schedule=EVERY10, nonce=9, policy=policy
    )
    assert r.actions == [StartBuffered()]
    assert (r.snapshot.state, r.snapshot.active, r.snapshot.buffered) == (S.QUEUED, 1, 1)


def test_an_aborted_waiting_run_frees_its_place_in_the_buffer():
    r = run(replace(busy(S.OVERRUN), buffered=1), Unbuffer())
    assert (r.snapshot.state, r.snapshot.active, r.snapshot.buffered) == (S.OVERRUN, 1, 0)


def test_resume_starts_a_run_that_waited_while_paused():
    snap = JobSnapshot(S.SUSPENDED, buffered=1)
    r = run(snap, Resume(), now=sec(3))
    assert r.actions == [TickLater(sec(10), NEW), StartBuffered()]
    assert (r.snapshot.state, r.snapshot.active, r.snapshot.buffered) == (S.QUEUED, 1, 0)


@pytest.mark.parametrize(("state", "reason"), [(S.SUSPENDED, "paused"), (S.DISABLED, "disabled")])
def test_a_trigger_from_another_job_is_recorded_when_idle(state: JobState, reason: str):
    r = run(JobSnapshot(state), Trigger("job:1", strict=False))
    assert r.actions == [RecordSkipped(None, reason, "job:1")]


# --- retries ------------------------------------------------------------------------------


def test_retry_delays_grow_and_stop_at_max_attempts():
    policy = RetryPolicy(max_attempts=4, backoff=timedelta(seconds=1), jitter=0)
    delays = [policy.delay(n, 0.5) for n in (1, 2, 3, 4)]
    assert delays == [timedelta(seconds=1), timedelta(seconds=2), timedelta(seconds=4), None]


def test_retry_delay_is_capped_and_jittered_within_bounds():
    policy = RetryPolicy(
        max_attempts=20, backoff=timedelta(seconds=1), max_backoff=timedelta(seconds=30), jitter=0.2
    )
    assert policy.delay(10, 0.0) == timedelta(seconds=24)
    assert policy.delay(10, 0.999999) < timedelta(seconds=36)


def test_the_hundredth_attempt_waits_max_backoff_without_overflowing():
    """10 s doubled 99 times is past any timedelta: the cap applies before the sum."""
    policy = RetryPolicy(max_attempts=100, jitter=0)
    assert policy.delay(99, 0.5) == timedelta(minutes=10)


# --- misfire policies, resume with and without catch-up ------------------------------


def misfire(mode: Misfire, snap: JobSnapshot | None = None, now: float = 45, **kw: object):  # type: ignore[no-untyped-def]
    policy = MisfirePolicy(mode, **kw)  # type: ignore[arg-type]
    snap = snap or scheduled()
    tick = Tick(snap.tick_nonce or 0)
    return step(snap, tick, now=sec(now), schedule=EVERY10, nonce=NEW, misfire=policy)


def test_a_slot_late_within_the_grace_fires_under_every_policy():
    for mode in Misfire:
        r = misfire(mode, now=19)  # slot 10 is 9 s late; the grace of every 10s is 10 s
        assert r.actions == [StartInvocation(sec(10)), TickLater(sec(20), NEW)]


def test_misfire_skip_runs_nothing_and_records_every_missed_slot():
    r = misfire(Misfire.SKIP)
    assert r.snapshot.state == S.SCHEDULED and r.snapshot.active == 0
    assert r.actions == [
        RecordSkipped(sec(10), "misfire"),
        RecordSkipped(sec(20), "misfire"),
        RecordSkipped(sec(30), "misfire"),
        RecordSkipped(sec(40), "misfire"),
        TickLater(sec(50), NEW),
    ]


def test_misfire_all_runs_every_slot_one_after_another():
    r = misfire(Misfire.ALL)
    assert r.snapshot.state == S.QUEUED
    assert (r.snapshot.active, r.snapshot.buffered) == (1, 3)
    assert r.actions == [
        StartInvocation(sec(10)),
        BufferInvocation(sec(20), None),
        BufferInvocation(sec(30), None),
        BufferInvocation(sec(40), None),
        TickLater(sec(50), NEW),
    ]


def test_misfire_all_keeps_the_newest_catchup_limit_slots():
    r = misfire(Misfire.ALL, catchup_limit=2)
    assert r.actions == [
        RecordSkipped(sec(10), "misfire"),
        RecordSkipped(sec(20), "misfire"),
        StartInvocation(sec(30)),
        BufferInvocation(sec(40), None),
        TickLater(sec(50), NEW),
    ]


def test_misfire_all_waits_behind_an_active_run_even_with_cancel_other():
    snap = busy(S.RUNNING)
    r = step(
        snap,
        Tick(1),
        now=sec(25),
        schedule=EVERY10,
        nonce=NEW,
        policy=OverlapPolicy(Overlap.CANCEL_OTHER),
        misfire=MisfirePolicy(Misfire.ALL),
    )
    assert r.snapshot.state == S.OVERRUN
    assert r.actions == [
        BufferInvocation(sec(10), None),
        BufferInvocation(sec(20), None),
        TickLater(sec(30), NEW),
    ]


def test_misfire_skip_while_busy_is_not_an_overrun():
    r = misfire(Misfire.SKIP, busy(S.RUNNING))
    assert r.snapshot.state == S.RUNNING and r.snapshot.overruns == 0


def test_a_custom_grace_decides_what_is_late():
    r = misfire(Misfire.SKIP, now=40, grace=timedelta(seconds=30))
    assert r.actions == [StartInvocation(sec(10)), TickLater(sec(20), NEW)]
    r = misfire(Misfire.SKIP, now=12, grace=timedelta(seconds=1))
    assert r.actions == [RecordSkipped(sec(10), "misfire"), TickLater(sec(20), NEW)]


def test_resume_records_the_slots_missed_while_paused():
    paused = run(scheduled(at=10), Pause(), now=sec(5)).snapshot
    assert paused.missed_from == sec(10)
    r = run(paused, Resume(), now=sec(35))
    assert r.snapshot == JobSnapshot(S.SCHEDULED, tick_at=sec(40), tick_nonce=NEW)
    assert r.actions == [
        RecordSkipped(sec(10), "paused"),
        RecordSkipped(sec(20), "paused"),
        RecordSkipped(sec(30), "paused"),
        TickLater(sec(40), NEW),
    ]


def test_resume_with_catch_up_ticks_at_the_first_missed_slot():
    paused = run(scheduled(at=10), Pause(), now=sec(5)).snapshot
    r = run(paused, Resume(catch_up=True), now=sec(35))
    assert r.actions == [TickLater(sec(10), NEW)]
    after = misfire(Misfire.LATEST, r.snapshot, now=35)  # the tick: a misfire
    assert after.actions == [
        RecordSkipped(sec(10), "misfire"),
        RecordSkipped(sec(20), "misfire"),
        StartInvocation(sec(30)),
        TickLater(sec(40), NEW),
    ]


def test_a_short_pause_misses_nothing():
    paused = run(scheduled(at=10), Pause(), now=sec(5)).snapshot
    r = run(paused, Resume(), now=sec(8))
    assert r.actions == [TickLater(sec(10), NEW)]


def test_enable_after_disable_does_not_record_or_run_missed_slots():
    off = run(scheduled(at=10), Disable(), now=sec(5)).snapshot
    assert off.missed_from is None
    r = run(off, Enable(), now=sec(95))
    assert r.actions == [TickLater(sec(100), NEW)]


def test_a_long_outage_records_only_the_newest_skipped_slots():
    from cronchain.statemachine.callbacks import MAX_SKIPPED_RECORDS

    r = misfire(Misfire.LATEST, now=10 * 50_000 + 5)  # 50,000 slots missed
    skipped = [a for a in r.actions if isinstance(a, RecordSkipped)]
    assert len(skipped) == MAX_SKIPPED_RECORDS
    assert skipped[-1].slot == sec(10 * 49_999)
    assert r.actions[-2] == StartInvocation(sec(10 * 50_000))


def test_the_machine_library_logs_no_line_per_callback():
    """transitions logs three INFO lines per state change; any worker that steps a
    machine (cronchain's, or a project's own through install(app)) imports the machine,
    not cronchain's app, so the machine's module keeps it to warnings."""
    script = (  # a worker logs at INFO, as Celery's logging sets it up
        "import logging; logging.basicConfig(level=logging.INFO);"
        "import cronchain.statemachine.job;"
        "print(logging.getLogger('transitions').getEffectiveLevel())"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert int(done.stdout) >= logging.WARNING, done.stderr
