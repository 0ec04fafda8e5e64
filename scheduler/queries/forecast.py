"""``forecast``: every job's slots over the coming hours, counted by the second, and the
herds among them (many jobs due in one second), each with the change that would spread
it.

A herd is ``THRESHOLD`` (100) fires or more in one second, by default. Not for
cronchain's sake: it starts a herd of thousands within seconds (docs/how-to/herds.md).
It is for the work: a work worker runs 20 runs at once, so of 100 runs that take
seconds, 80 wait for a thread, and whatever they call (a database, an API, a GPU
queue) gets them all in the same second. Spread over the minute, the same jobs come
two a second.

The slots are the schedules' own (``timing.schedules``), walked from the window's
start, so the forecast agrees with ``cronchain next`` slot for slot. Jobs alike (one
schedule, zone and ``days``) are walked once, however many they are. A fixed-delay
job's next slot hangs on when its run ends: only its pending tick is counted.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

from cronchain.scheduler.storage.ahead import Planned
from cronchain.scheduler.timing.iso import iso
from cronchain.scheduler.timing.schedules import EPOCH, Cron, Every, Schedule, stored_schedule

THRESHOLD = 100  # fires in one second that make a herd (the module's docstring says why)
CELLS = 96  # the heat strip's cells: a quarter of an hour each, over a day
WINDOW = timedelta(hours=24)
MAX_WINDOW = timedelta(days=7)
EXAMPLES = 5  # job names a herd lists
SHOWN = 20  # herds a person is shown (one that comes again is one); --json has each


@dataclass(frozen=True)
class Cell:
    """A stretch of the window: its fires, and the most in any one second of it."""

    start: datetime
    fires: int
    peak: int


@dataclass(frozen=True)
class Herd:
    """A second with ``fires`` of ``THRESHOLD`` or more: how many of each project, a few
    of the jobs, and what would spread them. ``alike``: which of the forecast's groups of
    jobs make it (the same set makes the same herd, each time it comes)."""

    at: datetime
    fires: int
    projects: dict[str, int]
    examples: list[str]
    advice: list[str]
    alike: frozenset[int] = field(default=frozenset(), compare=False, repr=False)


class Busiest(NamedTuple):
    """The second with the most fires."""

    at: datetime
    fires: int


@dataclass(frozen=True)
class Forecast:
    start: datetime
    end: datetime
    threshold: int
    jobs: int
    fires: int
    peak: Busiest | None
    cells: list[Cell]
    herds: list[Herd] = field(default_factory=list)

    def as_json(self) -> dict[str, object]:
        return {
            "start": iso(self.start),
            "end": iso(self.end),
            "threshold": self.threshold,
            "jobs": self.jobs,
            "fires": self.fires,
            "peak": None
            if self.peak is None
            else {"at": iso(self.peak.at), "fires": self.peak.fires},
            "herds": [
                {
                    "at": iso(h.at),
                    "fires": h.fires,
                    "projects": h.projects,
                    "examples": h.examples,
                    "advice": h.advice,
                }
                for h in self.herds
            ],
            "cells": [
                {"start": iso(c.start), "fires": c.fires, "peak": c.peak} for c in self.cells
            ],
        }


@dataclass
class _Alike:
    """Jobs that fire in the same seconds, the seconds (since the epoch), and their
    schedule."""

    members: list[Planned]
    seconds: list[int]
    schedule: Schedule
    jobs: int = 0
    index: int = 0  # its place among the forecast's groups: what a herd's ``alike`` names

    def __post_init__(self) -> None:
        self.jobs = sum(m.jobs for m in self.members)


def forecast(
    planned: Iterable[Planned],
    start: datetime,
    end: datetime,
    threshold: int = THRESHOLD,
    cells: int = CELLS,
) -> Forecast:
    """The fires of ``planned`` after ``start`` and up to ``end``, by the second: the
    slots a job would take from ``start`` on, as its pending tick is the first slot
    after now. A window under ``cells`` seconds has a cell a second."""
    end = start + timedelta(seconds=math.floor((end - start).total_seconds()))  # whole seconds
    cells = max(1, min(cells, int((end - start).total_seconds())))
    alike = _walked(planned, start, end)
    per_second: Counter[int] = Counter()
    for group in alike:
        if group.jobs == 1:
            per_second.update(group.seconds)  # counted in C: most groups are one job
        else:
            for second in group.seconds:
                per_second[second] += group.jobs
    first, span = start.timestamp(), max(1.0, (end - start).total_seconds())
    fires = [0] * cells
    peaks = [0] * cells
    for second, count in per_second.items():
        i = min(cells - 1, int((second - first) * cells / span))
        fires[i] += count
        peaks[i] = max(peaks[i], count)
    strip = [Cell(start + (end - start) * i / cells, fires[i], peaks[i]) for i in range(cells)]
    busiest = max(per_second.items(), key=lambda kv: (kv[1], -kv[0]), default=None)
    peak = None if busiest is None else Busiest(_instant(busiest[0]), busiest[1])
    herds = _herds(alike, sorted(s for s, n in per_second.items() if n >= threshold), per_second)
    return Forecast(
        start,
        end,
        threshold,
        sum(g.jobs for g in alike),
        sum(per_second.values()),
        peak,
        strip,
        herds,
    )


def repeated(herds: list[Herd]) -> list[tuple[Herd, list[datetime]]]:
    """The herds that are one herd again and again (the same jobs: an hourly schedule's
    each hour), each with every second it comes, in the order they first come: how a
    person reads them, where ``--json`` lists each."""
    same: dict[frozenset[int], tuple[Herd, list[datetime]]] = {}
    for herd in herds:
        same.setdefault(herd.alike, (herd, []))[1].append(herd.at)
    return list(same.values())


def when(times: list[datetime]) -> str:
    """The seconds a repeated herd comes, in words: its first, how many more, and how
    often, when it comes at one pace (``at 04:00:00Z and 23 more, every 1h``)."""
    said = f"at {iso(times[0])}"
    if len(times) == 1:
        return said
    gaps = {b - a for a, b in zip(times, times[1:], strict=False)}
    pace = f", every {_period(gaps.pop())}" if len(gaps) == 1 else ""
    return f"{said} and {len(times) - 1} more{pace}"


def fixed_delays(planned: Iterable[Planned]) -> set[str]:
    """The schedules among ``planned`` that are fixed delays: their jobs are counted one
    by one, by their pending ticks (``ahead.pending_ticks``). Only a schedule that reads
    ``with ...`` once spaces and case are set aside can be one, and only those are
    parsed here: the walk parses every schedule once, later."""
    candidates = {p for p in planned if "".join(p.schedule.split()).lower().startswith("with")}
    return {p.schedule for p in candidates if _parsed(p).relative}


def _walked(planned: Iterable[Planned], start: datetime, end: datetime) -> list[_Alike]:
    """Each schedule's seconds in the window, walked once for all the jobs that fire in
    the same seconds: one schedule, or fixed rates of one whole-second period whose
    offsets fall in the same second (jobs spread over an hour come 3,600 ways, not one
    per job)."""
    folded: dict[Hashable, list[Planned]] = defaultdict(list)
    schedules: dict[Hashable, Schedule] = {}
    alike = []
    for p in planned:
        parsed = _parsed(p)
        if p.tick_at is not None:  # a fixed delay: its pending tick alone
            inside = start < p.tick_at <= end
            seconds = [math.floor(p.tick_at.timestamp())] if inside else []
            alike.append(_Alike([p], seconds, parsed))
        elif not parsed.relative:  # (a fixed delay's group: its jobs come one by one)
            key = _fold(parsed)
            folded[key].append(p)
            schedules.setdefault(key, parsed)
    for key, members in folded.items():
        alike.append(_Alike(members, _seconds(schedules[key], start, end), schedules[key]))
    for index, group in enumerate(alike):
        group.index = index
    return alike


def _fold(schedule: Schedule) -> Hashable:
    """What makes two schedules fire in the same seconds: a fixed rate's whole-second
    period and the second of its offset; any other, itself."""
    if isinstance(schedule, Every) and _micros(schedule.period) % 1_000_000 == 0:
        return ("every", schedule.period, _micros(schedule.offset) // 1_000_000)
    return schedule


def _parsed(p: Planned) -> Schedule:
    return stored_schedule(p.schedule, p.timezone, p.days)


def _seconds(schedule: Schedule, start: datetime, end: datetime) -> list[int]:
    """The seconds of the schedule's slots after ``start``, up to ``end``: a fixed rate's
    by arithmetic (a hundred thousand jobs spread over an hour are as many schedules),
    any other's walked slot by slot, as the job's ticks walk them."""
    if isinstance(schedule, Every):
        period, offset = _micros(schedule.period), _micros(schedule.offset)
        after, until = _micros(start - EPOCH), _micros(end - EPOCH)
        first = offset + ((after - offset) // period + 1) * period
        return [t // 1_000_000 for t in range(first, until + 1, period)]
    found = []
    t = schedule.next_after(start)
    while t is not None and t <= end:
        found.append(math.floor(t.timestamp()))
        t = schedule.next_after(t)
    return found


def _micros(span: timedelta) -> int:
    return (span.days * 86400 + span.seconds) * 1_000_000 + span.microseconds


def _herds(alike: list[_Alike], seconds: list[int], per_second: Counter[int]) -> list[Herd]:
    if not seconds:
        return []
    wanted = set(seconds)
    found: dict[int, list[_Alike]] = defaultdict(list)
    for group in alike:
        for second in wanted.intersection(group.seconds):
            found[second].append(group)
    return [_herd(second, per_second[second], found[second]) for second in seconds]


def _herd(second: int, fires: int, groups: list[_Alike]) -> Herd:
    projects: Counter[str] = Counter()
    cron = 0
    every: Counter[timedelta] = Counter()
    for group in groups:
        for member in group.members:
            projects[member.project] += member.jobs
        parsed = group.schedule
        if isinstance(parsed, Cron):
            cron += group.jobs
        elif isinstance(parsed, Every):
            every[parsed.period] += group.jobs
    examples = sorted(f"{m.project}/{m.example}" for g in groups for m in g.members)
    return Herd(
        _instant(second),
        fires,
        dict(sorted(projects.items(), key=lambda kv: (-kv[1], kv[0]))),
        examples[:EXAMPLES],
        _advice(cron, every),
        frozenset(group.index for group in groups),
    )


def _advice(cron: int, every: Counter[timedelta]) -> list[str]:
    """What would spread a herd: a second of its own for each cron job (a 6th field),
    an offset for each fixed-rate one, over its period."""
    said = []
    if cron:
        said.append(
            f"give its {cron:,} cron jobs each a second of the minute, a 6th field from 0 to"
            f' 59 ("0 * * * *" becomes "0 * * * * 17"): about {math.ceil(cron / 60)}'
            " a second"
        )
    for period, jobs in sorted(every.items()):
        seconds = max(1, int(period.total_seconds()))
        said.append(
            f"give its {jobs:,} jobs of period {_period(period)} offsets from 0 to"
            f' {seconds - 1} s ("every {_period(period)} offset Ns"):'
            f" about {math.ceil(jobs / seconds):,} a second"
        )
    return said


def _period(period: timedelta) -> str:
    seconds = int(period.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _instant(second: int) -> datetime:
    return datetime.fromtimestamp(second, UTC)
