"""Imported beat schedules fire when Celery's own schedule objects would have fired them
(issue 19: equivalence, not just parsing).

For each entry, Celery's side is beat's own decision, ``is_due``, asked on a clock that
moves as beat's loop moves it (by the seconds ``is_due`` says to wait), with
``last_run_at`` set to each fire, as beat sets it. cronchain's side is ``cronchain next``
for the imported schedule and zone. The first 20 fires from a fixed start must be equal
(up to the earlier of the two 20th fires, where a DST day shifted one list), except for
the entries in :data:`DST_DIFFERENCES`, where cronchain's documented daylight saving
rule (Debian's cron: docs/concepts/time.md, *Daylight saving*) differs from Celery's, and
only within two hours of the transition.

An interval starts from the first multiple of its period, where cronchain's ``every``
slots are: Celery counts from beat's start, cronchain from the epoch
(docs/tutorials/import-beat.md); the period is the same.
"""

from __future__ import annotations

import os
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from celery.schedules import crontab, maybe_schedule, schedule

from cronchain.scheduler.declare.beatimport.entries import BeatEntry, convert
from tests.support.beat import (
    JAN,
    beat_fires,
    both_restricted,
    cronchain_fires,
    day_field_combinations,
)

# The two transitions of 2026 in each DST zone: (zone, UTC instant)
TRANSITIONS = {
    "Europe/Berlin": (datetime(2026, 3, 29, 1, tzinfo=UTC), datetime(2026, 10, 25, 1, tzinfo=UTC)),
    "America/New_York": (
        datetime(2026, 3, 8, 7, tzinfo=UTC),
        datetime(2026, 11, 1, 6, tzinfo=UTC),
    ),
}

UTC_CASES: dict[str, Any] = {
    "every minute": crontab(),
    "hourly": crontab(minute=0),
    "daily": crontab(minute=0, hour=0),
    "minute step */15": crontab(minute="*/15"),
    "minute step */7": crontab(minute="*/7"),
    "minute list": crontab(minute="0,30"),
    "minute range": crontab(minute="5-10"),
    "minute range step": crontab(minute="1-59/10"),
    "minute 0-59/20": crontab(minute="0-59/20"),
    "hour step": crontab(minute=0, hour="*/3"),
    "hour range": crontab(minute=0, hour="9-17"),
    "hour range step": crontab(minute=0, hour="9-17/2"),
    "hour list": crontab(minute=30, hour="0,12"),
    "every minute of one hour": crontab(hour=5),
    "weekdays by name": crontab(minute=0, hour=0, day_of_week="mon-fri"),
    "sunday by full name": crontab(minute=0, hour=7, day_of_week="sunday"),
    "weekend list of names": crontab(minute=0, hour=7, day_of_week="sat,sun"),
    "sunday as 0": crontab(minute=0, hour=7, day_of_week="0"),
    "weekday range step": crontab(minute=0, hour=7, day_of_week="1-5/2"),
    "weekday int": crontab(minute=45, hour=23, day_of_week=3),
    "first of the month": crontab(minute=0, hour=0, day_of_month=1),
    "day of month list": crontab(minute=0, hour=0, day_of_month="1,15"),
    "day of month range step": crontab(minute=0, hour=0, day_of_month="10-20/5"),
    "the 31st": crontab(minute=0, hour=0, day_of_month=31),
    "every other day of month": crontab(minute=15, hour=3, day_of_month="*/2"),
    "leap day": crontab(minute=0, hour=12, day_of_month=29, month_of_year=2),
    "quarterly": crontab(minute=0, hour=0, day_of_month=1, month_of_year="*/3"),
    "month list": crontab(minute=0, hour=0, day_of_month=1, month_of_year="1,6"),
    "months and a weekday": crontab(minute=0, hour=0, month_of_year="3-5", day_of_week="mon"),
    "office hours": crontab(minute="*/30", hour="8-18", day_of_week="mon-fri"),
    "from_string": crontab.from_string("0 4 * * 2"),
    "interval number": 10,
    "interval float": 30.0,
    "interval prime": 7,
    "interval sub-second part": timedelta(seconds=1.5),
    "interval minutes": timedelta(minutes=5),
    "interval hour and a half": timedelta(hours=1, minutes=30),
    "interval day": timedelta(days=1),
    "interval schedule object": schedule(timedelta(seconds=45)),
}
DST_CASES: dict[str, Any] = {
    "2:00 daily": crontab(minute=0, hour=2),
    "2:30 daily": crontab(minute=30, hour=2),
    "3:00 daily": crontab(minute=0, hour=3),
    "midnight": crontab(minute=0, hour=0),
    "quarter hours": crontab(minute="*/15"),
    "hourly": crontab(minute=0),
    "hourly as a range": crontab(minute=0, hour="0-23"),  # full, but fixed local times
    "every two hours": crontab(minute=0, hour="*/2"),
    "even hours as a list": crontab(minute=0, hour="0,2,4,6,8,10,12,14,16,18,20,22"),
    "half hours at 2 as a list": crontab(minute="0,30", hour=2),
    "half hours at 2 as a step": crontab(minute="*/30", hour=2),
    "1-3 hourly": crontab(minute=0, hour="1-3"),
    "sunday 1:30": crontab(minute=30, hour=1, day_of_week="sun"),
    "interval hour": timedelta(hours=1),
}

# Where cronchain's rule (Debian's, docs/concepts/time.md: *Daylight saving*) differs from
# beat's, by entry and transition day. Both zones skip 02:00-02:59 in spring; in autumn
# Berlin shows 02:00-02:59 twice, New York 01:00-01:59. Everywhere else each entry fires
# as beat does.
BOTH = ("Europe/Berlin", "America/New_York")
DST_DIFFERENCES = {
    ("2:30 daily", BOTH, "spring"): "a fixed time the clocks skip runs as they change, at"
    " 03:00; beat runs it an hour after 02:30 standard time, at 03:30",
    ("quarter hours", BOTH, "autumn"): "a '*' field runs in real time through the repeated"
    " hour; beat's wall clock skips the repeated quarter hours",
    ("hourly", BOTH, "autumn"): "a '*' hour runs at both occurrences of the repeated hour;"
    " beat's wall clock at the first",
    ("every two hours", BOTH, "spring"): "a '*' hour does not fire in the gap, and 02:00"
    " does not exist; beat runs it at 03:00",
    ("every two hours", ("Europe/Berlin",), "autumn"): "a '*' hour runs at both 02:00;"
    " beat at the first",
    ("half hours at 2 as a step", BOTH, "spring"): "a '*' minute does not fire in the gap;"
    " beat runs 02:00 at 03:00",
    ("half hours at 2 as a step", ("Europe/Berlin",), "autumn"): "a '*' minute runs in both"
    " 02:00-02:59; beat in the first",
}


def imported(name: str, beat_schedule: Any, zone: str) -> tuple[str, str]:
    """The schedule and zone of the job ``import-beat`` makes of the entry."""
    entry = BeatEntry(name, "tasks.t", maybe_schedule(beat_schedule), zone)
    converted = convert([entry], "p", lambda entry: {"queue": "celery"})
    assert converted.left_out == []
    (imported_job,) = converted.jobs
    return imported_job.job["schedule"], imported_job.job.get("timezone", "UTC")


def start_for(beat_schedule: Any, start: datetime) -> datetime:
    """Intervals start on a multiple of their period, as cronchain's slots do."""
    parsed = maybe_schedule(beat_schedule)
    if isinstance(parsed, crontab):
        return start
    period = parsed.run_every.total_seconds()
    return datetime.fromtimestamp(start.timestamp() // period * period, UTC)


def test_the_table_is_large_enough():
    assert len(UTC_CASES) + 2 * len(DST_CASES) >= 40


@pytest.mark.parametrize("name", UTC_CASES)
def test_an_imported_entry_fires_when_beat_would(name: str):
    text, zone = imported(name, UTC_CASES[name], "UTC")
    start = start_for(UTC_CASES[name], JAN)
    assert cronchain_fires(text, zone, start) == beat_fires(UTC_CASES[name], "UTC", start)


def differences(text: str, zone: str, beat_schedule: Any) -> dict[str, set[datetime]]:
    """The fires that differ on each transition day (spring, autumn), from three hours
    before it to the earlier of the two 20th fires (a skipped or doubled fire shifts the
    tails); a difference further than two hours from the transition fails."""
    seasons = {}
    for season, transition in zip(("spring", "autumn"), TRANSITIONS[zone], strict=True):
        start = start_for(beat_schedule, transition - timedelta(hours=3))
        ours = cronchain_fires(text, zone, start)
        theirs = beat_fires(beat_schedule, zone, start)
        horizon = min(ours[-1], theirs[-1])
        apart = {t for t in set(ours) ^ set(theirs) if t <= horizon}
        far = sorted(t for t in apart if abs(t - transition) > timedelta(hours=2))
        assert far == [], f"{text}: differs away from the transition at {transition}: {far}"
        if apart:
            seasons[season] = apart
    return seasons


@pytest.mark.parametrize("zone", TRANSITIONS)
@pytest.mark.parametrize("name", DST_CASES)
def test_in_a_dst_zone_only_the_listed_entries_differ_and_only_at_a_transition(
    name: str, zone: str
):
    text, job_zone = imported(name, DST_CASES[name], zone)
    assert job_zone == (zone if "every" not in text else "UTC")
    found = differences(text, zone, DST_CASES[name])
    listed = {s for (entry, zones, s) in DST_DIFFERENCES if entry == name and zone in zones}
    assert set(found) == listed, {s: sorted(found[s]) for s in found}


@pytest.mark.parametrize(("day_of_month", "day_of_week"), day_field_combinations())
def test_every_combination_of_full_and_partial_day_fields_means_what_celery_means(
    day_of_month: str, day_of_week: str
):
    """Celery runs on days that match both fields; what cronchain writes fires on the
    same days, with ``days: both`` when both are restricted."""
    cron = crontab(minute=0, hour=0, day_of_month=day_of_month, day_of_week=day_of_week)
    text, days = imported_days(cron)
    assert days == ("both" if both_restricted(cron) else None)
    assert cronchain_fires(text, "UTC", JAN, days) == beat_fires(cron, "UTC", JAN)


def imported_days(cron: crontab) -> tuple[str, str | None]:
    """The schedule and ``days`` of the job ``import-beat`` makes of ``cron``."""
    entry = BeatEntry("days", "tasks.t", cron, "UTC")
    converted = convert([entry], "p", lambda entry: {"queue": "celery"})
    assert converted.left_out == []
    (job,) = converted.jobs
    return job.job["schedule"], job.job.get("days")


def random_days(rng: random.Random) -> crontab:
    """Both day fields restricted (and sometimes the month), as a ``crontab`` takes them."""
    day_of_month = random_field(rng, 1, 31)
    while day_of_month.startswith("*"):
        day_of_month = random_field(rng, 1, 31)
    day_of_week = rng.choice([random_field(rng, 0, 6), rng.choice(["mon", "fri", "sat,sun"])])
    while day_of_week.startswith("*"):
        day_of_week = random_field(rng, 0, 6)
    month = rng.choice(["*", "*", "*", random_field(rng, 1, 12)])
    hour, minute = rng.choice(["0", "12", "*/6", "9-17"]), rng.choice(["0", "30", "*/20"])
    return crontab(minute, hour, day_of_week, day_of_month, month)


def test_random_crontabs_with_both_day_fields_fire_when_beat_would():
    """Seeded random day fields, both restricted (replay: CRONCHAIN_DIFF_SEED=N): the
    imported job (``days: both``) fires at beat's times, over the first 20 fires from a
    random start in 2020-2035."""
    rng = random.Random(f"{SEED}:days")
    both = 0
    for _ in range(120):
        cron = random_days(rng)
        start = JAN.replace(year=rng.randint(2020, 2035), month=rng.randint(1, 12))
        text, days = imported_days(cron)
        assert days == ("both" if both_restricted(cron) else None), cron
        both += days == "both"
        theirs = beat_fires(cron, "UTC", start)
        assert cronchain_fires(text, "UTC", start, days) == theirs, (cron, start)
    assert both > 90  # a range that happens to cover the week is the exception


def random_field(rng: random.Random, low: int, high: int) -> str:
    """A crontab field as users write them: ``*``, ``*/n``, a value, a range, a list."""
    shape = rng.choice(["*", "step", "value", "range", "list"])
    if shape == "*":
        return "*"
    if shape == "step":
        return f"*/{rng.choice([2, 3, 4, 5, 6, 10, 12, 15, 20, 30])}"
    if shape == "value":
        return str(rng.randint(low, high))
    if shape == "range":
        a = rng.randint(low, high - 1)
        return f"{a}-{rng.randint(a + 1, high)}"
    return ",".join(map(str, sorted(rng.sample(range(low, high + 1), rng.randint(2, 4)))))


SEED = int(os.environ.get("CRONCHAIN_DIFF_SEED", "19"))


def test_random_crontabs_differ_from_beat_only_as_the_dst_rule_says():
    """Seeded random minute and hour fields in Berlin (replay: CRONCHAIN_DIFF_SEED=N).
    A job with no ``*`` in them (fixed times) differs only in spring, and only if one of
    its times falls in the skipped hour; any job differs only near a transition."""
    rng = random.Random(SEED)
    fixed_in_gap = fixed_elsewhere = 0
    for _ in range(150):
        minute, hour = random_field(rng, 0, 59), random_field(rng, 0, 23)
        cron = crontab(minute=minute, hour=hour)
        text, _ = imported("random", cron, "Europe/Berlin")
        found = differences(text, "Europe/Berlin", cron)
        if "*" in minute + hour:
            continue  # the wildcard class: near a transition only, checked above
        assert "autumn" not in found, (minute, hour, sorted(found["autumn"]))
        if 2 in cron.hour:
            fixed_in_gap += 1
        else:
            fixed_elsewhere += 1
            assert found == {}, (minute, hour, found)
    assert fixed_in_gap and fixed_elsewhere  # both kinds were drawn
