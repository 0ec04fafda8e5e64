"""cronchain's cron dialect: one meaning per expression.

Five fields read as cronie's crontab(5), Vixie cron and POSIX read them, the ``@`` aliases,
croniter's optional sixth field of seconds, and two of Quartz's day items as cronsim reads
them: ``L`` in the day of month (the month's last day) and ``d#k`` in the day of week (the
k-th such weekday of the month: ``mon#1``, the first Monday). Each field becomes the set
of values it names (and those two items beside them). croniter then walks a canonical
expression built from those sets (each restricted field an explicit sorted list), so none
of croniter's own readings (``5-5`` as ``*``, ``W``, ``?``, ``H``) can change what an
expression means. cronsim, an independent evaluator, checks both this module and the walk
(tests/unit/test_cron_differential.py).

Grammar of a field (case-insensitive)::

    field = item {"," item}
    item  = "*" ["/" step] | value ["-" value] ["/" step]
          | "L"                (day of month: the last day of the month)
          | value "#" k        (day of week, k 1-5: the k-th one of the month)
    value = number | name      (names: jan-dec for months, sun-sat for days of week)

``a/n`` means ``a-max/n`` as in cronsim and croniter (cronie refuses it; croniter accepted
it before this module, so jobs may use it). A range with equal ends is that one value.

Which days match: by default cron's rule, a day of month *or* a day of week when neither
day field begins with ``*``. ``parse_cron(..., both=True)`` (a job's ``days: both``)
wants both, as Celery's ``crontab`` and Quartz do.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import datetime

from cronchain.scheduler.errors import SpecError

ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

# The longest each month can be: February's 29th counts, it comes every leap year.
_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_MONTH_NAMES = ("January", "February", "March", "April", "May", "June", "July", "August")
_MONTH_NAMES += ("September", "October", "November", "December")  # not calendar's: locale
_WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# croniter's and Quartz's extensions cronchain does not take: 15W, LW, 5L, ?, H and
# H(0-29)/10 (L and d#k it takes, in their fields).
_EXTENSION = re.compile(r"w|lw|\d+[lw]|\?|h(\(\d+-\d+\))?(/\d+)?|l|\w+#\d+")
_ORDINALS = ("1st", "2nd", "3rd", "4th", "5th")
LAST = "l"  # the day-of-month item for the month's last day
_NTH = re.compile(r"(\w+)#(\d+)")


@dataclass(frozen=True)
class FieldGrammar:
    """One cron field's grammar: its name in messages, its range and its names."""

    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()  # names[i] is the value low + i

    def value(self, token: str, field: str) -> int:
        if token.isascii() and token.isdigit():
            number = int(token) if len(token) <= 9 else self.high + 1
            if not self.low <= number <= self.high:
                raise SpecError(
                    field, f"{self.name}: {_cut(token)} is out of range {self.low}-{self.high}"
                )
            return number
        if token in self.names:
            return self.low + self.names.index(token)
        if not token:
            raise SpecError(field, f"{self.name}: a value is missing")
        accepted = "a number"
        if self.names:
            accepted += f" or a name ({self.names[0]}-{self.names[-1]})"
        hint = "; cron has no W, ? or H (L is a day of month, d#k a day of week)"
        hint = hint if _EXTENSION.fullmatch(token) else ""
        raise SpecError(field, f"{self.name}: {_cut(token)!r} is not {accepted}{hint}")

    def step(self, token: str, field: str) -> int:
        if not (token.isascii() and token.isdigit()):
            raise SpecError(field, f"{self.name}: step {_cut(token)!r} is not a whole number")
        step = int(token) if len(token) <= 9 else self.high + 1
        if step == 0:
            raise SpecError(field, f"{self.name}: a step of 0 never advances")
        return step

    def item(self, text: str, field: str) -> range:
        """One item of a list: ``*``, ``a``, ``a-b``, each with an optional ``/step``."""
        base, slash, step_text = text.partition("/")
        step = self.step(step_text, field) if slash else 1
        if base == "*":
            return range(self.low, self.high + 1, step)
        first, dash, last = base.partition("-")
        low = self.value(first, field)
        high = low
        if dash:
            high = self.value(last, field)
        elif slash:
            high = self.high  # a/n runs from a to the field's end
        if self.high == 7 and high == 0 and last == "sun" and low > 0:
            high = 7  # fri-sun: Sunday is also 7, and only that reading runs forwards
        if low > high:
            hint = " (Sunday is also 7)" if self.high == 7 and high == 0 else ""
            raise SpecError(field, f"{self.name}: {_cut(base)} runs backwards{hint}")
        return range(low, high + 1, step)

    def parse(self, text: str, field: str) -> tuple[int, ...]:
        """The values of a field without day items (``parse_day_field`` takes those)."""
        values, last, nth = self.parse_day_field(text, field)
        if last or nth:
            raise SpecError(field, f"{self.name}: only values here, not {text!r}")
        return values

    def parse_day_field(
        self, text: str, field: str
    ) -> tuple[tuple[int, ...], bool, tuple[tuple[int, int], ...]]:
        """The values, whether ``L`` is there (day of month) and the ``d#k`` items as
        (weekday 0-6, k) pairs (day of week): only the day fields take these items."""
        values: set[int] = set()
        last = False
        nth: set[tuple[int, int]] = set()
        for item in text.split(","):
            if self is DAY and item == LAST:
                last = True
            elif self is WEEKDAY and (m := _NTH.fullmatch(item)):
                digits = m[2]
                k = int(digits) if digits.isascii() and digits.isdigit() and len(digits) <= 9 else 0
                if not 1 <= k <= 5:
                    why = f"{self.name}: {_cut(item)!r}: a month has a 1st to a 5th"
                    raise SpecError(field, why)
                nth.add((self.value(m[1], field) % 7, k))
            else:
                values.update(self.item(item, field))
        return tuple(sorted(values)), last, tuple(sorted(nth))


def _cut(token: str) -> str:
    return token if len(token) <= 20 else token[:17] + "..."


MINUTE = FieldGrammar("minute", 0, 59)
HOUR = FieldGrammar("hour", 0, 23)
DAY = FieldGrammar("day of month", 1, 31)
MONTH = FieldGrammar("month", 1, 12, _MONTHS)
WEEKDAY = FieldGrammar("day of week", 0, 7, _WEEKDAYS)  # 0 and 7 are Sunday
SECOND = FieldGrammar("second", 0, 59)
_FIELDS = (MINUTE, HOUR, DAY, MONTH, WEEKDAY, SECOND)


@dataclass(frozen=True)
class CronFields:
    """A parsed cron expression: the values of each field, plus the two facts Vixie cron
    reads from how fields are written rather than from their values.

    ``wildcard``: the minute or the hour field begins with ``*``. Such a job fires at every
    real instant that matches, whatever the clocks do; any other job names fixed local
    times (see ``Cron`` for daylight saving). ``day_or``: neither day field begins with
    ``*`` (and the job did not ask for both), so a day matches if its day of month or its
    day of week does; otherwise both must. ``last_day`` and ``nth`` are the day items
    beside the values: the month's last day (``L``), the k-th weekdays (``(1, 1)``: the
    first Monday). Build one with :func:`parse_cron`.
    """

    text: str  # the expression as written, aliases resolved
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: tuple[int, ...]
    months: tuple[int, ...]
    weekdays: tuple[int, ...]  # 0-6, Sunday 0
    seconds: tuple[int, ...] | None  # the optional sixth field
    wildcard: bool
    day_or: bool
    last_day: bool = False
    nth: tuple[tuple[int, int], ...] = ()  # (weekday 0-6, k): the k-th of the month
    both: bool = False  # both day fields restricted, and both must match (days: both)

    @property
    def sifted(self) -> bool:
        """Whether croniter's walk names more days than the job's, for ``day_matches``
        to sift: croniter knows neither ``days: both`` nor ``L`` and ``d#k`` in a list
        (it refuses ``3#4,5``), so it walks a wider day set written in plain values."""
        return self.both or self.last_day or bool(self.nth)

    def for_croniter(self) -> tuple[str, bool]:
        """An expression croniter cannot misread, and its ``day_or`` argument: exact,
        or (``sifted``) a walk over every day the job's could be."""
        days = set(self.days) | ({28, 29, 30, 31} if self.last_day else set())
        weekdays = set(self.weekdays) | {weekday for weekday, _ in self.nth}
        days, weekdays = _listed(tuple(sorted(days)), 31), _listed(tuple(sorted(weekdays)), 7)
        if self.both:
            weekdays = "*"  # the day of week is day_matches's alone
        if self.day_or and "*" in (days, weekdays):
            days = weekdays = "*"  # one side matches every day, so every day matches
        parts = [_listed(self.minutes, 60), _listed(self.hours, 24), days]
        parts += [_listed(self.months, 12), weekdays]
        if self.seconds is not None:
            parts.append(_listed(self.seconds, 60))
        return " ".join(parts), self.day_or

    def day_matches(self, when: datetime) -> bool:
        """Whether ``when``'s day is one of the job's, by cron's rule (either field, when
        ``day_or``) or by both fields."""
        day = when.day in self.days
        if self.last_day and not day:
            day = when.day == calendar.monthrange(when.year, when.month)[1]
        weekday = (when.weekday() + 1) % 7  # Sunday 0, as cron counts
        week = weekday in self.weekdays or (weekday, (when.day - 1) // 7 + 1) in self.nth
        return day or week if self.day_or else day and week


@dataclass(frozen=True)
class StoredCron:
    """A cron expression stored by an earlier cronchain that this dialect refuses
    (croniter's ``W``, ``?`` and the like): croniter reads it as it did then, so
    that an upgrade neither stops nor changes a running job. Only stored jobs get one
    (``scheduler.timing.schedules.stored_schedule``); ``apply`` refuses the expression."""

    text: str
    wildcard: bool

    def for_croniter(self) -> tuple[str, bool]:
        return self.text, True  # croniter's own day rule, as before


def _listed(values: tuple[int, ...], every: int) -> str:
    return "*" if len(values) == every else ",".join(map(str, values))


def parse_cron(text: str, field: str = "schedule", both: bool = False) -> CronFields:
    """Read a cron expression or alias; raises :class:`SpecError` naming ``field`` and,
    in the message, the cron field at fault. ``both``: a day must match both day fields
    (a job's ``days: both``), where cron's rule takes either."""
    spec = " ".join(text.split()).lower()
    if spec.startswith("@"):
        if spec not in ALIASES:
            raise SpecError(field, f"unknown alias {text!r}; use one of {', '.join(ALIASES)}")
        spec = ALIASES[spec]
    parts = spec.split()
    if len(parts) not in (5, 6):
        raise SpecError(
            field,
            f"{text!r} is not a schedule: use 5 cron fields (6 with seconds), an alias "
            "like @hourly, 'every 30s', 'with 10m interval' or 'triggered'",
        )
    values = [
        kind.parse(part, field) if kind not in (DAY, WEEKDAY) else ()
        for kind, part in zip(_FIELDS, parts, strict=False)
    ]
    days, last_day, _ = DAY.parse_day_field(parts[2], field)
    weekdays, _, nth = WEEKDAY.parse_day_field(parts[4], field)
    restricted = not (parts[2].startswith("*") or parts[4].startswith("*"))
    fields = CronFields(
        text=spec,
        minutes=values[0],
        hours=values[1],
        days=days,
        months=values[3],
        weekdays=tuple(sorted({day % 7 for day in weekdays})),
        seconds=values[5] if len(values) == 6 else None,
        wildcard=parts[0].startswith("*") or parts[1].startswith("*"),
        day_or=restricted and not both,
        last_day=last_day,
        nth=nth,
        both=restricted and both,
    )
    _require_a_day(fields, field)
    return fields


def _require_a_day(fields: CronFields, field: str) -> None:
    """Refuse a schedule that can never fire, decided from the calendar: a day of month
    that no month of the expression has, when the day of week cannot stand in for it, or
    (both day fields to match) days of month that are never the k-th weekday asked for."""
    if fields.day_or:
        return  # every month has every day of the week
    longest = max(_MONTH_DAYS[month - 1] for month in fields.months)
    if fields.days and fields.days[0] > longest and not fields.last_day:
        names = [_MONTH_NAMES[month - 1] for month in fields.months]
        months = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
        verb = "has" if len(names) == 1 else "have"
        raise SpecError(field, f"day of month: never fires: {months} {verb} at most {longest} days")
    if fields.nth and not fields.weekdays:  # only k-th weekdays: does a day allow one?
        days = [day for day in fields.days if day <= longest]
        if fields.last_day:
            days += [_MONTH_DAYS[month - 1] for month in fields.months]
            days += [28] if 2 in fields.months else []  # February's, in most years
        weeks = {k for _, k in fields.nth}
        if not any((day - 1) // 7 + 1 in weeks for day in days):
            ordinals = " or ".join(_ORDINALS[week - 1] for week in sorted(weeks))
            why = f"never fires: none of its days of month is a {ordinals} weekday of its month"
            raise SpecError(field, why + (" (days: both)" if fields.both else ""))
