"""``step`` runs the job machine's transitions from a table read out of the
``transitions`` machine; here both answer the same inputs, and must agree: the same
snapshot, the same actions, the same refusals.

The inputs cover every event from every state, with snapshots, policies and schedules
drawn so that every arm of the table is taken (a tick on time, late and early; runs
active, waiting and at each policy's limit)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from transitions import MachineError

from cronchain.scheduler.timing.schedules import Every, FixedDelay, Triggered
from cronchain.statemachine import (
    Abandon,
    Backfill,
    Disable,
    Enable,
    InvalidTransition,
    InvocationFinished,
    InvocationStarted,
    JobSnapshot,
    JobState,
    Pause,
    Repair,
    Resume,
    ScheduleChanged,
    Tick,
    Trigger,
    Unbuffer,
    job,
    step,
)
from cronchain.statemachine.events import Event
from cronchain.statemachine.policy import Misfire, MisfirePolicy, Overlap, OverlapPolicy
from cronchain.statemachine.snapshot import Context

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
SCHEDULES = [
    Every(timedelta(seconds=10)),
    Every(timedelta(hours=1)),
    FixedDelay(timedelta(seconds=30)),
    Triggered(),
]
CASES = 20_000


def by_transitions(snapshot: JobSnapshot, event: Event, **inputs) -> tuple | str:  # type: ignore[no-untyped-def]
    """The reference: the same step through ``transitions``' own ``Event.trigger``."""
    model, actions = replace(snapshot), []
    if not job._ignored(snapshot, event):
        ctx = Context(event=event, actions=actions, **inputs)
        try:
            done = job._MACHINE.events[job._event_name(event)].trigger(model, ctx=ctx)
        except MachineError:
            return "refused"
        if not done:
            return "refused"
    return model, actions


def by_table(snapshot: JobSnapshot, event: Event, **inputs) -> tuple | str:  # type: ignore[no-untyped-def]
    try:
        answer = step(snapshot, event, **inputs)
    except InvalidTransition:
        return "refused"
    return answer.snapshot, answer.actions


def drawn(rng: random.Random) -> tuple[JobSnapshot, Event, dict]:
    def at() -> datetime | None:
        return rng.choice([None, T0 + timedelta(seconds=rng.choice([-7200, -20, -5, 0, 5, 3600]))])

    tick_at = at()  # a pending tick has both its time and its nonce
    snapshot = JobSnapshot(
        state=rng.choice(list(JobState)),
        tick_at=tick_at,
        tick_nonce=None if tick_at is None else rng.choice([1, 2]),
        invocation_id=rng.choice([None, 5]),
        invocation_running=rng.random() < 0.5,
        overruns=rng.choice([0, 3]),
        active=rng.choice([0, 0, 1, 2, 3]),
        buffered=rng.choice([0, 0, 1, 2]),
        missed_from=at(),
    )
    event = rng.choice(
        [
            Enable(),
            Disable(),
            Pause(rng.choice([None, "why"])),
            Resume(catch_up=rng.random() < 0.5),
            ScheduleChanged(),
            Tick(rng.choice([1, 2])),
            Trigger("t1", strict=rng.random() < 0.5),
            Backfill(),
            InvocationStarted(5),
            InvocationFinished(5, T0),
            Repair(),
            Abandon(rng.choice([None, 5])),
            Unbuffer(),
        ]
    )
    inputs = dict(
        now=T0,
        schedule=rng.choice(SCHEDULES),
        nonce=777,
        policy=OverlapPolicy(rng.choice(list(Overlap)), rng.choice([1, 2]), rng.choice([1, 2, 3])),
        misfire=MisfirePolicy(
            rng.choice(list(Misfire)), rng.choice([None, timedelta(seconds=1)]), 3
        ),
    )
    return snapshot, event, inputs


def test_every_event_type_is_drawn():
    assert {
        type(e).__name__.lower() for e in [drawn(random.Random(n))[1] for n in range(500)]
    } == set(job._MACHINE.events)


@pytest.mark.parametrize("seed", range(4))
def test_the_table_answers_as_transitions_does(seed: int):
    rng = random.Random(seed)
    outcomes = set()
    for _ in range(CASES // 4):
        snapshot, event, inputs = drawn(rng)
        expected = by_transitions(snapshot, event, **inputs)
        assert by_table(snapshot, event, **inputs) == expected, (snapshot, event, inputs)
        outcomes.add(expected if expected == "refused" else expected[0].state)
    assert outcomes == {"refused", *JobState}  # every state reached, and refusals


def test_the_inputs_take_every_arm_of_the_table(monkeypatch: pytest.MonkeyPatch):
    """Else an arm that the inputs never reach would differ unseen."""
    taken: set[tuple] = set()

    def marked(key: tuple) -> Callable[[object], None]:
        return lambda _: taken.add(key)

    table = {
        key: tuple((c, d, (*a, marked((key, i)))) for i, (c, d, a) in enumerate(arms))
        for key, arms in job._TABLE.items()
    }
    monkeypatch.setattr(job, "_TABLE", table)
    rng = random.Random(0)
    for _ in range(CASES):
        snapshot, event, inputs = drawn(rng)
        by_table(snapshot, event, **inputs)
    every = {(key, i) for key, arms in table.items() for i in range(len(arms))}
    assert every - taken == set()
