"""Schedules: when a job's slots are, in UTC, for a job's IANA time zone.

Four kinds, all parsed by :func:`parse_schedule`:

- cron: 5 fields, or 6 with croniter's trailing seconds field, or an ``@hourly`` alias;
  evaluated in the job's time zone.
- fixed rate: ``every 30s``, ``every 1h30m``; slots are multiples of the period since the
  Unix epoch, so they are the same on every machine and after every restart.
- fixed delay: ``with 10m interval`` (LUCI's syntax); the next slot counts from the end of
  the previous invocation.
- ``triggered``: no slots; runs only when triggered.

Every function takes the time as an argument; nothing here reads the clock.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cached_property
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from scheduler.errors import SpecError
from scheduler.timing.localtime import MAX_SHIFT, Kind, is_ambiguous, resolve, wall

_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1, "ms": 0.001}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|d|h|m|s)")
_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_seconds(value: object, field: str) -> float:
    """A duration from a job file: a number of seconds or text like ``1h30m``."""
    if isinstance(value, bool):
        raise SpecError(field, "must be a duration like 10s")
    if isinstance(value, int | float):
        if value < 0:
            raise SpecError(field, "must not be negative")
        return float(value)
    return parse_duration(str(value), field).total_seconds()


def parse_duration(text: str, field: str = "duration") -> timedelta:
    """``"1h30m"`` -> 90 minutes. Units: d, h, m, s, ms; at least one, no sign."""
    compact = text.replace(" ", "")
    parts = _DURATION.findall(compact)
    if not compact or "".join(n + u for n, u in parts) != compact:
        raise SpecError(field, f"{text!r} is not a duration like 30s, 10m or 1h30m")
    seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise SpecError(field, f"{text!r} must be longer than zero")
    return timedelta(seconds=seconds)


def parse_zone(name: str, field: str = "timezone") -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise SpecError(field, f"unknown time zone {name!r}") from None


def _require_aware(t: datetime) -> None:
    if t.tzinfo is None:
        raise ValueError("schedules take timezone-aware datetimes")


def _default_grace(period: timedelta) -> timedelta:
    """A late slot still fires normally if it is late by less than half a period,
    at least 10 s (so a busy worker does not turn lag into skips) and at most an hour."""
    return min(max(period / 2, timedelta(seconds=10)), timedelta(hours=1))


@dataclass(frozen=True)
class Cron:
    """A cron expression in a time zone, with Vixie cron's rule for DST transitions.

    A job at a fixed local time fires once on a transition day: a time the clocks skip
    fires at the first instant after the gap, a time they show twice fires at its first
    occurrence. A job whose hour field is ``*`` or a step (``*/2``) fires at every real
    instant that matches: never in a gap, twice in a fold, so it keeps its hourly beat.

    croniter walks the wall-clock readings; each is resolved to instants here, not by
    croniter, whose own handling fires a fixed time twice in a fold.
    """

    expression: str
    zone: ZoneInfo

    relative = False

    @cached_property
    def misfire_grace(self) -> timedelta:
        first = self.next_after(EPOCH + timedelta(days=10_957))  # 2000-01-01
        assert first is not None
        second = self.next_after(first)
        assert second is not None
        return _default_grace(second - first)

    @cached_property
    def follows_real_hours(self) -> bool:
        """Vixie's "wildcard" job: the hour field is ``*`` or a step."""
        hour = self.expression.split()[1]
        return hour.startswith("*") or "/" in hour

    def instants(self, local: datetime) -> list[datetime]:
        """The instants at which the wall-clock reading ``local`` fires."""
        r = resolve(local, self.zone)
        if r.kind is Kind.PLAIN:
            return [r.first]
        if not self.follows_real_hours:
            return [r.first]  # the first instant after a gap; a fold's first occurrence
        return [] if r.second is None else [r.first, r.second]

    def next_after(self, t: datetime) -> datetime | None:
        _require_aware(t)
        start = wall(t, self.zone)
        if is_ambiguous(t, self.zone):  # the fold's second readings may still be ahead
            start -= MAX_SHIFT
        it = croniter(self.expression, start)
        best: datetime | None = None
        while True:
            local = it.get_next(datetime)
            for instant in self.instants(local):
                if instant > t and (best is None or instant < best):
                    best = instant
            # Instants grow with the readings except inside a fold, so the first plain
            # reading past t ends the search.
            if best is not None and resolve(local, self.zone).kind is Kind.PLAIN:
                return best

    def latest_at_or_before(self, t: datetime) -> datetime | None:
        _require_aware(t)
        start = wall(t, self.zone) + timedelta(microseconds=1)
        if is_ambiguous(t, self.zone):
            start += MAX_SHIFT
        it = croniter(self.expression, start)
        best: datetime | None = None
        while True:
            local = it.get_prev(datetime)
            for instant in self.instants(local):
                if instant <= t and (best is None or instant > best):
                    best = instant
            if best is not None and resolve(local, self.zone).kind is Kind.PLAIN:
                return best


@dataclass(frozen=True)
class Every:
    """Slots at ``offset`` past each multiple of ``period`` since the epoch. The offset
    spreads many jobs of one period over it, rather than firing them in one burst."""

    period: timedelta
    offset: timedelta = timedelta(0)

    relative = False

    @property
    def misfire_grace(self) -> timedelta:
        return _default_grace(self.period)

    def next_after(self, t: datetime) -> datetime | None:
        _require_aware(t)
        start = EPOCH + self.offset
        return start + ((t - start) // self.period + 1) * self.period

    def latest_at_or_before(self, t: datetime) -> datetime | None:
        _require_aware(t)
        start = EPOCH + self.offset
        return start + ((t - start) // self.period) * self.period


@dataclass(frozen=True)
class FixedDelay:
    interval: timedelta

    relative = True

    @property
    def misfire_grace(self) -> timedelta:
        return _default_grace(self.interval)

    def next_after(self, t: datetime) -> datetime | None:
        _require_aware(t)
        return t + self.interval

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


def parse_schedule(text: str, timezone: str = "UTC", field: str = "schedule") -> Schedule:
    """Parse a schedule string; raises :class:`SpecError` naming ``field``."""
    zone = parse_zone(timezone)
    spec = " ".join(str(text).split()).lower()
    if spec == "triggered":
        return Triggered()
    if m := _EVERY.fullmatch(spec):
        period = parse_duration(m.group(1), field)
        offset = timedelta(0)
        if m.group(2) is not None:
            offset = parse_duration(m.group(2), field)
            if offset >= period:
                raise SpecError(field, f"the offset {m.group(2)} must be shorter than {m.group(1)}")
        return Every(period, offset)
    if m := _WITH_INTERVAL.fullmatch(spec):
        return FixedDelay(parse_duration(m.group(1), field))
    expression = _ALIASES.get(spec, spec)
    if spec.startswith("@") and spec not in _ALIASES:
        raise SpecError(field, f"unknown alias {text!r}; use one of {', '.join(_ALIASES)}")
    if len(expression.split()) not in (5, 6) or not croniter.is_valid(expression):
        raise SpecError(
            field,
            f"{text!r} is not a schedule: use 5 cron fields (6 with seconds), an alias "
            "like @hourly, 'every 30s', 'with 10m interval' or 'triggered'",
        )
    return Cron(expression, zone)
