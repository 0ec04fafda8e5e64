"""Celery beat's fires beside cronchain's: when beat would send an entry (``is_due`` on a
clock that moves as beat's loop moves it), and what ``cronchain next`` says."""

from __future__ import annotations

import contextlib
import io
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from celery import Celery
from celery.schedules import crontab, maybe_schedule, schedule

from cronchain.scheduler.cli import main as cli

COUNT = 20
JAN = datetime(2026, 1, 1, tzinfo=UTC)

# Day fields full in every spelling Celery takes, and partial ones: cron reads any field
# not written ``*`` as restricted, and fires when either restricted day field matches,
# while Celery wants both; a full set must be written ``*`` (issue 34), and two
# restricted ones need ``days: both`` (issue 35).
DAYS_OF_MONTH = ["*", "1-31", "*/1", "13", "1-7", "*/2"]
DAYS_OF_WEEK = ["*", "0-6", "mon-sun", "sun,mon,tue,wed,thu,fri,sat", "*/1", "fri", "1-5", "0,6"]


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


def cronchain_fires(
    text: str, zone: str, start: datetime, days: str | None = None
) -> list[datetime]:
    """The first :data:`COUNT` fires ``cronchain next`` gives after ``start``."""
    out = io.StringIO()
    argv = ["next", text, "--tz", zone, "--after", start.isoformat(), "--count", str(COUNT)]
    argv += ["--days", days] if days else []
    with contextlib.redirect_stdout(out):
        assert cli.main([*argv, "--json"]) == 0
    return [datetime.fromisoformat(row["utc"]) for row in json.loads(out.getvalue())]


def day_field_combinations() -> list[tuple[str, str]]:
    return [(dom, dow) for dom in DAYS_OF_MONTH for dow in DAYS_OF_WEEK]


def both_restricted(cron: crontab) -> bool:
    return len(cron.day_of_month) < 31 and len(cron.day_of_week) < 7
