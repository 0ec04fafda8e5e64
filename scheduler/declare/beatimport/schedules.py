"""Celery beat's schedule objects as cronchain schedules, or the reason there is none.

A ``crontab`` is written from the sets Celery itself expands its fields to, so that
every spelling Celery accepts (names, ranges, steps, lists, ``*/n``) means here what it
meant there (``cron_text`` says how each field is spelled).
An interval becomes ``every``. Anything whose firing times cronchain cannot reproduce is
:class:`Unsupported`, never approximated.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from celery.schedules import crontab, schedule, solar

from cronchain.scheduler.errors import SpecError
from cronchain.scheduler.timing.cron import DAY, HOUR, MINUTE, MONTH, WEEKDAY, FieldGrammar


class Unsupported(Exception):
    """A beat entry that has no faithful cronchain equivalent; the text says why."""


_DAY = 86_400
_MAX_PERIOD = 1000 * _DAY  # cronchain's longest `every`
_UNITS = (("d", _DAY * 1000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1))


def schedule_text(beat_schedule: Any) -> str:
    """The cronchain schedule for a beat entry's ``schedule`` value."""
    if beat_schedule is None or isinstance(beat_schedule, bool):
        raise Unsupported(f"schedule {beat_schedule!r} is not a schedule")
    if isinstance(beat_schedule, int | float | timedelta):
        return every_text(beat_schedule)
    if type(beat_schedule) is schedule:
        if beat_schedule.relative:
            raise Unsupported("relative=True rounds the start to the period; cronchain does not")
        _no_nowfun(beat_schedule)
        return every_text(beat_schedule.run_every)
    if type(beat_schedule) is crontab:
        _no_nowfun(beat_schedule)
        return cron_text(beat_schedule)
    if isinstance(beat_schedule, solar):
        raise Unsupported(f"solar schedule ({beat_schedule.event}) has no cron equivalent")
    what = type(beat_schedule).__name__
    raise Unsupported(f"custom schedule class {what} cannot be read as cron or an interval")


def _no_nowfun(beat_schedule: schedule | crontab) -> None:
    if beat_schedule.nowfun is not None:
        raise Unsupported("nowfun replaces the clock; cronchain keeps its own")


def every_text(period: float | timedelta) -> str:
    """``every`` for a period of whole milliseconds from 1 s to 1000 days."""
    seconds = period.total_seconds() if isinstance(period, timedelta) else float(period)
    ms = round(seconds * 1000)
    if not 1 <= seconds <= _MAX_PERIOD or abs(ms - seconds * 1000) > 1e-6:
        raise Unsupported(
            f"interval {seconds:g}s: cronchain's periods are whole milliseconds from 1s to 1000d"
        )
    parts = []
    for unit, size in _UNITS:
        count, ms = divmod(ms, size)
        if count:
            parts.append(f"{count}{unit}")
    return "every " + "".join(parts)


def cron_text(cron: crontab) -> str:
    """Five cron fields with the values Celery expanded each field to.

    A day field whose set is full is written ``*``, whatever the user wrote: cron reads
    any other spelling (``0-6``, ``mon-sun``, ``1-31``) as restricted, and with one day
    field restricted cron fires on days that match either, where Celery wants both.
    Any other field keeps the user's text where cron reads it as the same values, and
    is otherwise spelled from them, with ``*`` or ``*/n`` only where the user wrote a
    ``*``: that keeps the job in the daylight saving class the user chose, which the
    minute and hour fields decide (docs/concepts/time.md, Daylight saving; ``0 0-23 * * *`` names
    fixed local times, ``0 * * * *`` real hours). With both day fields restricted, the
    job wants both to match (``days: both``: :func:`both_days`)."""
    days, weekdays = cron.day_of_month, cron.day_of_week
    return " ".join(
        [
            _field(cron._orig_minute, cron.minute, MINUTE),
            _field(cron._orig_hour, cron.hour, HOUR),
            _field(cron._orig_day_of_month, days, DAY, full_is_star=True),
            _field(cron._orig_month_of_year, cron.month_of_year, MONTH),
            _field(cron._orig_day_of_week, weekdays, WEEKDAY, modulo=7, full_is_star=True),
        ]
    )


def both_days(beat_schedule: Any) -> bool:
    """Whether the job must say ``days: both``: a ``crontab`` with both day fields
    restricted, which Celery runs on days that match both (cron: either)."""
    if type(beat_schedule) is not crontab:
        return False
    return len(beat_schedule.day_of_month) < 31 and len(beat_schedule.day_of_week) < 7


def _field(
    written: Any, values: set[int], kind: FieldGrammar, modulo: int = 0, full_is_star: bool = False
) -> str:
    text = written.strip().lower() if isinstance(written, str) else ""
    ordered = sorted(values)
    if full_is_star and _full(ordered, kind):
        return "*"
    if text and _reads_as(text, kind, modulo) == set(values):
        return text  # the user's own words (mon-fri), where cron reads them alike
    return _spelled(ordered, kind, wildcard=text.startswith("*"))


def _full(ordered: list[int], kind: FieldGrammar) -> bool:
    return ordered == list(range(kind.low, (6 if kind is WEEKDAY else kind.high) + 1))


def _reads_as(text: str, kind: FieldGrammar, modulo: int) -> set[int] | None:
    try:
        read = kind.parse(text, "schedule")
    except SpecError:
        return None
    return {v % modulo for v in read} if modulo else set(read)


def _spelled(ordered: list[int], kind: FieldGrammar, *, wildcard: bool) -> str:
    """``*`` or ``*/n`` for a field written with ``*`` whose values allow it; ``a-b/n``
    for values an even step apart; otherwise a list of values and ranges."""
    low, high = kind.low, 6 if kind is WEEKDAY else kind.high
    if wildcard and ordered == list(range(low, high + 1)):
        return "*"
    if wildcard and len(ordered) > 1:
        step = ordered[1] - ordered[0]
        if ordered[0] == low and ordered == list(range(low, high + 1, step)):
            return f"*/{step}"
    if len(ordered) > 2:  # an even step: 8-18/2
        step = ordered[1] - ordered[0]
        if step > 1 and ordered == list(range(ordered[0], ordered[-1] + 1, step)):
            return f"{ordered[0]}-{ordered[-1]}/{step}"
    runs: list[list[int]] = []  # runs of consecutive values
    for value in ordered:
        if runs and value == runs[-1][-1] + 1:
            runs[-1].append(value)
        else:
            runs.append([value])
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)
