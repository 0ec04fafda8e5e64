"""The jobs' schedules as the forecast reads them (``scheduler.queries.forecast``): the
jobs that will fire, grouped by what fires them alike, so that a hundred thousand jobs
on a dozen schedules are a few dozen rows, not a hundred thousand."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, func, select

from cronchain.scheduler.storage.models import jobs


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
    """Every job with a pending tick, grouped: one that is paused, disabled or only
    triggered has none, and fires only when someone says so."""
    days = jobs.c.spec["days"].as_string()
    alike = (
        select(
            jobs.c.schedule,
            jobs.c.timezone,
            days,
            jobs.c.project,
            func.count(),
            func.min(jobs.c.name),
        )
        .where(jobs.c.tick_at.is_not(None))
        .group_by(jobs.c.schedule, jobs.c.timezone, days, jobs.c.project)
    )
    return [Planned(*row) for row in conn.execute(alike)]


def pending_ticks(conn: Connection, schedules: Collection[str]) -> list[Planned]:
    """Each job on one of ``schedules`` (fixed delays, which only the schedule's parser
    tells as it is written: ``With 5m interval`` is one) with its pending tick."""
    days = jobs.c.spec["days"].as_string()
    query = select(
        jobs.c.schedule, jobs.c.timezone, days, jobs.c.project, jobs.c.name, jobs.c.tick_at
    ).where(jobs.c.tick_at.is_not(None), jobs.c.schedule.in_(list(schedules)))
    return [Planned(s, z, d, p, 1, n, t) for s, z, d, p, n, t in conn.execute(query)]
