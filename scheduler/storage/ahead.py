"""The jobs' schedules as the forecast reads them (``scheduler.queries.forecast``): the
jobs that will fire, grouped by what fires them alike, so that a hundred thousand jobs
on a dozen schedules are a few dozen rows, not a hundred thousand."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, func, select

from cronchain.scheduler.storage.models import jobs

FIXED_DELAY = "with %"  # a fixed delay's next slot hangs on its run's end (timing.schedules)


@dataclass(frozen=True)
class Planned:
    """``jobs`` jobs of ``project`` on one schedule, zone and ``days`` (``example`` is
    one of their names). For a fixed-delay schedule, one job and its pending tick, the
    only slot of it known ahead."""

    schedule: str
    timezone: str
    days: str | None
    project: str
    jobs: int
    example: str
    tick_at: datetime | None = None


def planned(conn: Connection) -> list[Planned]:
    """Every job with a pending tick: one that is paused, disabled or only triggered has
    none, and fires only when someone says so."""
    days = jobs.c.spec["days"].as_string()
    ticking = jobs.c.tick_at.is_not(None)
    alike = (
        select(
            jobs.c.schedule,
            jobs.c.timezone,
            days,
            jobs.c.project,
            func.count(),
            func.min(jobs.c.name),
        )
        .where(ticking, jobs.c.schedule.not_like(FIXED_DELAY))
        .group_by(jobs.c.schedule, jobs.c.timezone, days, jobs.c.project)
    )
    found = [Planned(*row) for row in conn.execute(alike)]
    delayed = select(
        jobs.c.schedule, jobs.c.timezone, days, jobs.c.project, jobs.c.name, jobs.c.tick_at
    ).where(ticking, jobs.c.schedule.like(FIXED_DELAY))
    found += [Planned(s, z, d, p, 1, n, t) for s, z, d, p, n, t in conn.execute(delayed)]
    return found
