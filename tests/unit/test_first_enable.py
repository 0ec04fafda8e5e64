"""``declarative.first_enable``, the step apply takes for each new job without the
``transitions`` machine, is the machine's own step of ``Enable`` from a new job's
snapshot: compared over seeded random specs (every kind of schedule, zones with DST,
every overlap and misfire policy) and instants (DST changes, ends of months, the far
future where a schedule ends). It steps on the schedule the spec's validation parsed
(``JobSpec.parsed_schedule``), the machine on one parsed from the stored text, as the
engine reads a job's schedule."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cronchain.scheduler.declare.apply import first_enable
from cronchain.scheduler.spec.controls import Controls
from cronchain.scheduler.spec.jobspec import JobSpec
from cronchain.scheduler.timing.schedules import parse_schedule, stored_schedule
from cronchain.statemachine import Enable, JobSnapshot, JobState, TickLater, step

ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"]
CRONS = [
    "30 2 * * *",  # in the spring gap, and twice in the fall, in Berlin and New York
    "*/5 * * * *",
    "0 0 31 * *",
    "15 1,3 * 3,10,11 0",
    "0 9 * * 1-5",
    "@hourly",
    "0 0 29 2 *",
    "*/7 */3 * * * 30",  # croniter's seconds field
]
INSTANTS = [
    datetime(2026, 3, 29, 0, 59, 59, tzinfo=UTC),  # Berlin springs forward at 01:00 UTC
    datetime(2026, 10, 25, 0, 30, tzinfo=UTC),  # and falls back at 01:00 UTC
    datetime(2026, 3, 8, 6, 59, tzinfo=UTC),  # New York springs forward at 07:00 UTC
    datetime(2026, 1, 31, 23, 59, 59, 999999, tzinfo=UTC),
    datetime(2028, 2, 28, 12, tzinfo=UTC),
    datetime(9999, 12, 31, 23, 59, tzinfo=UTC),  # no slot left: no tick
]


def random_schedule(rng: random.Random) -> str:
    match rng.randrange(4):
        case 0:
            period = rng.choice([1, 15, 60, 3600, 86400, 7 * 86400])
            offset = rng.choice(["", f" offset {rng.randrange(period * 1000)}ms"])
            return f"every {period}s{offset}"
        case 1:
            return f"with {rng.randrange(1, 600)}m interval"
        case 2:
            return rng.choice(CRONS)
    return "triggered"


def random_controls(rng: random.Random) -> dict[str, Any]:
    controls: dict[str, Any] = {}
    overlap = rng.choice([None, "skip", "buffer_one", "buffer_all", "allow", "cancel_other"])
    if overlap is not None:
        controls["overlap"] = overlap
    if overlap == "buffer_all" and rng.random() < 0.5:
        controls["max_buffered"] = rng.randrange(1, 50)
    if overlap == "allow" and rng.random() < 0.5:
        controls["max_concurrent"] = rng.randrange(1, 50)
    misfire = rng.choice([None, "skip", "latest", "all"])
    if misfire is not None:
        controls["misfire"] = misfire
        controls["misfire_grace"] = rng.choice([1, 30, 3600])
    if misfire == "all":
        controls["catchup_limit"] = rng.randrange(1, 100)
    return controls


def random_instant(rng: random.Random) -> datetime:
    if rng.random() < 0.3:
        return rng.choice(INSTANTS) + timedelta(microseconds=rng.randrange(2))
    start = datetime(2000, 1, 1, tzinfo=UTC)
    return start + timedelta(seconds=rng.uniform(0, 60 * 365 * 86400))


def test_the_step_is_the_machines_over_random_specs_and_instants():
    rng = random.Random(18_2)
    ticked = untimed = 0
    for i in range(3000):
        spec = JobSpec(
            "p",
            f"job{i}",
            random_schedule(rng),
            timezone=rng.choice(ZONES),
            controls=random_controls(rng),
        )
        controls = Controls.of(spec.normalized())
        now, nonce = random_instant(rng), rng.getrandbits(62) + 1
        machine = step(
            JobSnapshot(),
            Enable(),
            now=now,
            schedule=stored_schedule(spec.schedule, spec.timezone),
            nonce=nonce,
            policy=controls.overlap,
            misfire=controls.misfire,
        )
        assert first_enable(now, spec.parsed_schedule(), nonce) == machine, (spec, now)
        if machine.snapshot.tick_at is None:
            untimed += 1
        else:
            ticked += 1
    assert ticked > 2000 and untimed > 300  # both ways out of the step were taken


@pytest.mark.parametrize("schedule", ["every 10s", "with 5m interval", "30 2 * * *", "triggered"])
def test_a_new_job_is_scheduled_at_its_first_slot_after_now(schedule: str):
    now = datetime(2026, 3, 29, 0, 59, 59, tzinfo=UTC)
    spec = JobSpec("p", "j", schedule, timezone="Europe/Berlin")
    found = first_enable(now, spec.parsed_schedule(), 7)
    when = parse_schedule(schedule, "Europe/Berlin").next_after(now)
    assert found.snapshot == JobSnapshot(
        state=JobState.SCHEDULED, tick_at=when, tick_nonce=None if when is None else 7
    )
    assert found.actions == ([] if when is None else [TickLater(when, 7)])
    assert found.changed


def test_a_spec_keeps_the_schedule_its_validation_parsed():
    spec = JobSpec("p", "j", "every  1h  offset 90s", timezone="Asia/Kolkata")
    assert spec.parsed_schedule() is spec.parsed_schedule()
    assert spec.parsed_schedule() == parse_schedule(spec.schedule, spec.timezone)
    assert JobSpec.from_dict("p", {"name": "j", "schedule": "triggered", "noop": {}})
