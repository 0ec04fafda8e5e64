"""Schedules: when a job's slots are, in UTC, for a job's IANA time zone.

Four kinds, all parsed by :func:`parse_schedule`:

- cron: 5 fields, or 6 with croniter's trailing seconds field, or an ``@hourly`` alias
  (the dialect is :mod:`scheduler.timing.cron`); evaluated in the job's time zone.
- fixed rate: ``every 30s``, ``every 1h30m``; slots are multiples of the period since the
  Unix epoch, so they are the same on every machine and after every restart.
- fixed delay: ``with 10m interval`` (LUCI's syntax); the next slot counts from the end of
  the previous invocation.
- ``triggered``: no slots; runs only when triggered.

Periods and intervals run from 1 s to :data:`LONGEST_PERIOD`. Every function takes the
time as an argument; nothing here reads the clock. Near the ends of ``datetime``'s range
(years 1 and 9999) a slot that would fall outside it is ``None``, not an error.
"""

from __future__ import annotations

import copy
import logging
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import MAXYEAR, MINYEAR, UTC, datetime, timedelta
from difflib import get_close_matches
from functools import cached_property, lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from croniter import CroniterBadDateError, croniter

from cronchain.scheduler.errors import SpecError
from cronchain.scheduler.timing.cron import CronFields, StoredCron, parse_cron
from cronchain.scheduler.timing.localtime import Kind, Resolved, fold_occurrence, resolve, wall

log = logging.getLogger(__name__)

_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1, "ms": 0.001}
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|d|h|m|s)")
_DURATION = re.compile(r"(?:[0-9]+(?:\.[0-9]+)?(?:ms|d|h|m|s))+")  # linear: a unit ends each part
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
SHORTEST_PERIOD = timedelta(seconds=1)
LONGEST_PERIOD = timedelta(days=1000)
# croniter looks up to 50 years ahead for a match; a search that starts this close to
# the end of datetime's range may run past it, which ends the schedule.
_EDGE_YEARS = 60


def parse_seconds(value: object, field: str) -> float:
    """A duration from a job file: a number of seconds or text like ``1h30m``."""
    if isinstance(value, bool):
        raise SpecError(field, "must be a duration like 10s")
    if isinstance(value, int | float):
        if value < 0:
            raise SpecError(field, "must not be negative")
        return _checked_seconds(value, value, field)
    return parse_duration(str(value), field).total_seconds()


@lru_cache(maxsize=4096)
def parse_duration(text: str, field: str = "duration") -> timedelta:
    """``"1h30m"`` -> 90 minutes. Units: d, h, m, s, ms; at least one, no sign. Raises
    :class:`SpecError`, and nothing else, for any text that is not such a duration.
    Cached: a fleet's schedules repeat a few periods (``every 1h offset ...``), which
    the forecast parses once per schedule; a refusal is raised each time."""
    compact = text.replace(" ", "")
    if not _DURATION.fullmatch(compact):
        raise SpecError(field, f"{_shown(text)} is not a duration like 30s, 10m or 1h30m")
    parts = _DURATION_PART.findall(compact)
    seconds = _checked_seconds(sum(float(n) * _UNITS[u] for n, u in parts), text, field)
    if timedelta(seconds=seconds) <= timedelta(0):
        raise SpecError(field, f"{_shown(text)} must be longer than zero")
    return timedelta(seconds=seconds)


def _checked_seconds(seconds: float, given: object, field: str) -> float:
    """``seconds`` as a float, if it is finite and fits in a ``timedelta``."""
    try:
        seconds = float(seconds) + 0.0  # + 0.0: no -0.0
        if math.isfinite(seconds) and timedelta(seconds=seconds) >= timedelta(0):
            return seconds
    except OverflowError:
        pass
    raise SpecError(field, f"{_shown(given)} is not a duration cronchain can hold")


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:36] + "..."


def _period(text: str, what: str, field: str) -> timedelta:
    """A schedule's period or interval, from 1 s to LONGEST_PERIOD."""
    period = parse_duration(text, field)
    if not SHORTEST_PERIOD <= period <= LONGEST_PERIOD:
        raise SpecError(field, f"the {what} must be from 1s to 1000d, not {_shown(text)}")
    return period


def parse_zone(name: str, field: str = "timezone") -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise SpecError(field, f"unknown time zone {name!r}{_zone_like(name)}") from None


def _zone_like(name: str) -> str:
    """``; did you mean 'Europe/Berlin'?`` for a misspelt zone name, or nothing."""
    if not isinstance(name, str):
        return ""
    zones = {zone.lower(): zone for zone in available_timezones()}
    close = get_close_matches(name.lower(), zones, n=1, cutoff=0.75)
    return f"; did you mean {zones[close[0]]!r}?" if close else ""


def _require_aware(t: datetime) -> None:
    if t.tzinfo is None:
        raise ValueError("schedules take timezone-aware datetimes")


_LEAST_GRACE, _MOST_GRACE = timedelta(seconds=10), timedelta(hours=1)


def _default_grace(period: timedelta) -> timedelta:
    """A late slot still fires normally if it is late by less than half a period,
    at least 10 s (so a busy worker does not turn lag into skips) and at most an hour."""
    return min(max(period / 2, _LEAST_GRACE), _MOST_GRACE)


def _near_the_edge(t: datetime) -> bool:
    return t.year >= MAXYEAR - _EDGE_YEARS or t.year <= MINYEAR + _EDGE_YEARS


def _unless_past_the_edge(
    find: Callable[[datetime], datetime | None], t: datetime
) -> datetime | None:
    """``find(t)``, or None when the search ran out of ``datetime``'s range (years 1 and
    9999): date arithmetic there raises OverflowError, or ValueError from croniter."""
    try:
        return find(t)
    except (OverflowError, ValueError):
        if _near_the_edge(t):
            return None
        raise


_LAST_SECOND = timedelta(days=1, seconds=-1)  # from a day's start, its last second


@dataclass(frozen=True)
class Cron:
    """A cron expression in a time zone, with Vixie cron's rule for DST transitions, as
    Debian's cron applies it (and cronsim, which the differential test compares with).

    A *wildcard* job (its minute or hour field begins with ``*``) fires at every real
    instant that matches: never in a gap, in both occurrences of a fold. Any other job
    names fixed local times, which fire once on a transition day: a time the clocks
    skip fires at the first instant after the gap (several skipped times fire there
    once), a time they show twice fires at its first occurrence.

    croniter walks the wall-clock readings of the canonical expression; each reading is
    resolved to instants here, not by croniter, whose own handling fires a fixed time
    twice in a fold.
    """

    fields: CronFields | StoredCron
    zone: ZoneInfo

    relative = False

    @property
    def expression(self) -> str:
        return self.fields.text

    @property
    def wildcard(self) -> bool:
        """Vixie's "wildcard" job: the minute or the hour field begins with ``*``."""
        return self.fields.wildcard

    @cached_property
    def misfire_grace(self) -> timedelta:
        first = self.next_after(EPOCH + timedelta(days=10_957))  # 2000-01-01
        assert first is not None
        second = self.next_after(first)
        assert second is not None
        return _default_grace(second - first)

    @cached_property
    def _walker(self) -> croniter:
        expression, day_or = self.fields.for_croniter()
        return croniter(expression, EPOCH.replace(tzinfo=None), day_or=day_or)

    def _readings(self, start: datetime, backwards: bool) -> Iterator[datetime]:
        """The matching wall-clock readings after (or before) the naive ``start``. A copy
        of one walker, not a new croniter, because parsing is most of croniter's cost;
        a copy because schedules are shared between threads.

        A sifted walk (``CronFields.sifted``) leaves a day that is not the job's at
        once, rather than reading by reading (every minute of it, for ``* * 13 * 5``),
        and gives up after 400 years (the calendar's whole cycle) without one."""
        walker = copy.copy(self._walker)
        walker.set_current(start, force=True)
        step = walker.get_prev if backwards else walker.get_next
        fields = self.fields if isinstance(self.fields, CronFields) else None
        sifted = fields is not None and fields.sifted
        try:
            while True:
                reading = step(datetime)
                if not sifted or fields.day_matches(reading):  # type: ignore[union-attr]
                    yield reading
                    continue
                if abs(reading.year - start.year) > 400:
                    return
                day = reading.replace(hour=0, minute=0, second=0, microsecond=0)
                walker.set_current(day if backwards else day + _LAST_SECOND, force=True)
        except CroniterBadDateError:  # no match within croniter's 50 years
            return

    def _instants(self, r: Resolved) -> tuple[datetime, ...]:
        """The instants at which a resolved wall-clock reading fires."""
        if r.kind is Kind.PLAIN or not self.wildcard:
            return (r.first,)  # for a fixed time: the instant after a gap, a fold's first
        return () if r.second is None else (r.first, r.second)

    def next_after(self, t: datetime) -> datetime | None:
        _require_aware(t)
        return _unless_past_the_edge(self._next_after, t)

    def _next_after(self, t: datetime) -> datetime | None:
        start = wall(t, self.zone)
        occurrence, length = fold_occurrence(t, self.zone)
        if occurrence == 0 and self.wildcard:  # readings behind t come again, after it
            start -= length
        best: datetime | None = None
        for local in self._readings(start, backwards=False):
            r = resolve(local, self.zone)
            for instant in self._instants(r):
                if instant > t and (best is None or instant < best):
                    best = instant
            # Instants grow with the readings except inside a fold, so the first plain
            # reading past t ends the search.
            if best is not None and r.kind is Kind.PLAIN:
                return best
        return best

    def latest_at_or_before(self, t: datetime) -> datetime | None:
        _require_aware(t)
        return _unless_past_the_edge(self._latest_at_or_before, t)

    def _latest_at_or_before(self, t: datetime) -> datetime | None:
        start = wall(t, self.zone) + timedelta(microseconds=1)
        occurrence, length = fold_occurrence(t, self.zone)
        if occurrence == 1:  # readings ahead of t came already, at their first occurrence
            start += length
        best: datetime | None = None
        for local in self._readings(start, backwards=True):
            r = resolve(local, self.zone)
            for instant in self._instants(r):
                if instant <= t and (best is None or instant > best):
                    best = instant
            if best is not None and r.kind is Kind.PLAIN:
                return best
        return best


@dataclass(frozen=True)
class Every:
    """Slots at ``offset`` past each multiple of ``period`` since the epoch. The offset
    spreads many jobs of one period over it, rather than firing them in one burst."""

    period: timedelta
    offset: timedelta = timedelta(0)

    relative = False

    @cached_property
    def misfire_grace(self) -> timedelta:
        return _default_grace(self.period)

    def next_after(self, t: datetime) -> datetime | None:
        _require_aware(t)
        return _unless_past_the_edge(lambda t: self._slot(t, 1), t)

    def latest_at_or_before(self, t: datetime) -> datetime | None:
        _require_aware(t)
        return _unless_past_the_edge(lambda t: self._slot(t, 0), t)

    def _slot(self, t: datetime, ahead: int) -> datetime:
        start = EPOCH + self.offset
        return start + ((t - start) // self.period + ahead) * self.period


@dataclass(frozen=True)
class FixedDelay:
    interval: timedelta

    relative = True

    @cached_property
    def misfire_grace(self) -> timedelta:
        return _default_grace(self.interval)

    def next_after(self, t: datetime) -> datetime | None:
        _require_aware(t)
        return _unless_past_the_edge(lambda t: t + self.interval, t)

    def latest_at_or_before(self, t: datetime) -> datetime | None:
        return None


@dataclass(frozen=True)
class Triggered:
    relative = False
    misfire_grace = timedelta(0)

    def next_after(self, t: datetime) -> datetime | None:
        return None

    def latest_at_or_before(self, t: datetime) -> datetime | None:
        return None


Schedule = Cron | Every | FixedDelay | Triggered

_EVERY = re.compile(r"every\s+(\S+)(?:\s+offset\s+(\S+))?")
_WITH_INTERVAL = re.compile(r"with\s+(\S+)\s+interval")


DAYS = ("either", "both")  # a job's ``days``: cron's rule for its two day fields, or both


def parse_schedule(
    text: str, timezone: str = "UTC", field: str = "schedule", days: str | None = None
) -> Schedule:
    """Parse a schedule string; raises :class:`SpecError` naming ``field``. ``days``
    (a job's, cron schedules only): ``both`` wants the day of month and the day of week
    to match together, ``either`` (cron's rule, the default) takes one."""
    if days is not None and days not in DAYS:
        raise SpecError("days", f"{days!r} is not one of {', '.join(DAYS)}")
    schedule = _parsed(" ".join(str(text).split()).lower(), parse_zone(timezone), field, days)
    if days == "both" and not isinstance(schedule, Cron):
        raise SpecError("days", "both applies to a cron schedule only")
    return schedule


@lru_cache(maxsize=16384)
def _parsed(spec: str, zone: ZoneInfo, field: str, days: str | None) -> Schedule:
    """Cached: schedules are frozen, and a large file repeats a few (a fleet's
    ``0 * * * *``); parsing each job's again was 8% of an apply. A refusal is raised
    each time, never cached."""
    if spec == "triggered":
        return Triggered()
    if m := _EVERY.fullmatch(spec):
        period = _period(m.group(1), "period", field)
        offset = timedelta(0)
        if m.group(2) is not None:
            offset = parse_duration(m.group(2), field)
            if offset >= period:
                raise SpecError(field, f"the offset {m.group(2)} must be shorter than {m.group(1)}")
        return Every(period, offset)
    if m := _WITH_INTERVAL.fullmatch(spec):
        return FixedDelay(_period(m.group(1), "interval", field))
    return Cron(parse_cron(spec, field, both=days == "both"), zone)


def stored_schedule(text: str, timezone: str, days: str | None = None) -> Schedule:
    """The schedule of a job as stored. A schedule that an earlier cronchain accepted
    and this one refuses (a period under a second, croniter's ``W`` or ``?``) is read
    as it was then, with a warning, rather than stopping the job and every watchdog pass
    over it; ``apply`` refuses it, so it goes with the next change of the job's file."""
    try:
        return parse_schedule(text, timezone, days=days)
    except SpecError as err:
        legacy = _as_before(" ".join(str(text).split()).lower(), parse_zone(timezone))
        if legacy is None:
            raise
        log.warning("schedule %r is no longer accepted (%s); it runs as before", text, err)
        return legacy


def _as_before(spec: str, zone: ZoneInfo) -> Schedule | None:
    """What cronchain before its own cron dialect made of ``spec``, or None."""
    try:
        if m := _EVERY.fullmatch(spec):
            offset = parse_duration(m.group(2)) if m.group(2) else timedelta(0)
            return Every(parse_duration(m.group(1)), offset)
        if m := _WITH_INTERVAL.fullmatch(spec):
            return FixedDelay(parse_duration(m.group(1)))
    except SpecError:
        return None
    parts = spec.split()
    if len(parts) in (5, 6) and croniter.is_valid(spec):
        return Cron(StoredCron(spec, parts[0].startswith("*") or parts[1].startswith("*")), zone)
    return None
