"""Imported beat schedules fire when Celery's own schedule objects would have fired them
(issue 19: equivalence, not just parsing).

For each entry, Celery's side is beat's own decision, ``is_due``, asked on a clock that
moves as beat's loop moves it (by the seconds ``is_due`` says to wait), with
``last_run_at`` set to each fire, as beat sets it. cronchain's side is ``cronchain next``
for the imported schedule and zone. The first 20 fires from a fixed start must be equal
(up to the earlier of the two 20th fires, where a DST day shifted one list), except for
the entries in :data:`DST_DIFFERENCES`, where cronchain's documented daylight saving
rule (README: *Daylight saving*, Debian's cron) differs from Celery's, and only within
two hours of the transition.

An interval starts from the first multiple of its period, where cronchain's ``every``
slots are: Celery counts from beat's start, cronchain from the epoch (README: *Coming from
Celery beat*); the period is the same.
"""

from __future__ import annotations

import contextlib
import io
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from celery import Celery
from celery.schedules import crontab, maybe_schedule, schedule

from scheduler import cli
from scheduler.beatimport.entries import BeatEntry, convert

COUNT = 20
JAN = datetime(2026, 1, 1, tzinfo=UTC)
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
    "every two hours": crontab(minute=0, hour="*/2"),
    "1-3 hourly": crontab(minute=0, hour="1-3"),
    "sunday 1:30": crontab(minute=30, hour=1, day_of_week="sun"),
    "interval hour": timedelta(hours=1),
}

# Where cronchain's rule (Debian's) differs from Celery's, and why. Both zones behave
# alike; each difference is checked in both.
DST_DIFFERENCES = {
    "2:30 daily": "spring: a fixed time in the skipped hour runs as the clocks change (03:00);"
    " Celery runs it an hour after 02:30 standard time (03:30)",
    "quarter hours": "autumn: a '*' job runs in real time through the repeated hour;"
    " Celery's wall clock skips the repeated quarter hours",
    "hourly": "autumn: a '*' hour runs at both 02:00; Celery's wall clock runs the first",
    "every two hours": "autumn: as hourly",
}


def beat_fires(beat_schedule: Any, zone: str, start: datetime) -> list[datetime]:
    """When beat would send the entry: ``is_due`` on a clock that moves as beat's loop
    moves it."""
    app = Celery(set_as_current=False)
    app.conf.timezone = zone
    clock = [start]
    parsed = maybe_schedule(beat_schedule)
    if isinstance(parsed, crontab):
        fields = parsed.__reduce__()[1]
        sched: Any = crontab(*fields, nowfun=lambda: clock[0], app=app)
    else:
        sched = schedule(parsed.run_every, nowfun=lambda: clock[0], app=app)
    last, fires = start, []
    while len(fires) < COUNT:
        due, wait = sched.is_due(last)
        if due:
            fires.append(clock[0])
            last = clock[0]
        else:
            clock[0] += timedelta(seconds=wait)
    return fires


def cronchain_fires(text: str, zone: str, start: datetime) -> list[datetime]:
    out = io.StringIO()
    argv = ["next", text, "--tz", zone, "--after", start.isoformat(), "--count", str(COUNT)]
    with contextlib.redirect_stdout(out):
        assert cli.main([*argv, "--json"]) == 0
    return [datetime.fromisoformat(row["utc"]) for row in json.loads(out.getvalue())]


def imported(name: str, beat_schedule: Any, zone: str) -> tuple[str, str]:
    """The schedule and zone of the job ``import-beat`` makes of the entry."""
    entry = BeatEntry(name, "tasks.t", maybe_schedule(beat_schedule), zone)
    converted = convert([entry], "p", lambda entry: "celery")
    assert converted.left_out == []
    ((_, job),) = converted.jobs
    return job["schedule"], job.get("timezone", "UTC")


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


@pytest.mark.parametrize("zone", TRANSITIONS)
@pytest.mark.parametrize("name", DST_CASES)
def test_in_a_dst_zone_only_the_listed_entries_differ_and_only_at_a_transition(
    name: str, zone: str
):
    text, job_zone = imported(name, DST_CASES[name], zone)
    assert job_zone == zone
    differing = set()
    for transition in TRANSITIONS[zone]:
        start = start_for(DST_CASES[name], transition - timedelta(hours=3))
        ours = cronchain_fires(text, zone, start)
        theirs = beat_fires(DST_CASES[name], zone, start)
        horizon = min(ours[-1], theirs[-1])  # a skipped or doubled fire shifts the tails
        apart = {t for t in set(ours) ^ set(theirs) if t <= horizon}
        far = [t for t in apart if abs(t - transition) > timedelta(hours=2)]
        assert far == [], f"{name}: differs away from the transition at {transition}"
        differing |= apart
    assert bool(differing) == (name in DST_DIFFERENCES), sorted(differing)
