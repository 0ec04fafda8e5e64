"""cronchain's cron dialect: one meaning per expression.

Five fields read as cronie's crontab(5), Vixie cron and POSIX read them, the ``@`` aliases,
and croniter's optional sixth field of seconds. Each field becomes the set of values it
names. croniter then walks a canonical expression built from those sets (each restricted
field an explicit sorted list), so none of croniter's own readings (``5-5`` as ``*``, ``L``,
``W``, ``#``, ``?``, ``H``) can change what an expression means. cronsim, an independent
evaluator, checks both this module and the walk (tests/unit/test_cron_differential.py).

Grammar of a field (case-insensitive)::

    field = item {"," item}
    item  = "*" ["/" step] | value ["-" value] ["/" step]
    value = number | name      (names: jan-dec for months, sun-sat for days of week)

``a/n`` means ``a-max/n`` as in cronsim and croniter (cronie refuses it; croniter accepted
it before this module, so jobs may use it). A range with equal ends is that one value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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
# croniter's and Quartz's extensions: L, 15W, LW, 5L, 5#2, ?, H and H(0-29)/10.
_EXTENSION = re.compile(r"l|w|lw|\d+[lw]|\d+#\d+|\?|h(\(\d+-\d+\))?(/\d+)?")


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
        hint = "; cron has no L, W, #, ? or H" if _EXTENSION.fullmatch(token) else ""
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
        values: set[int] = set()
        for item in text.split(","):
            values.update(self.item(item, field))
        return tuple(sorted(values))


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
    ``*``, so a day matches if its day of month or its day of week does; otherwise both
    must. Build one with :func:`parse_cron`.
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

    def for_croniter(self) -> tuple[str, bool]:
        """An expression croniter cannot misread, and its ``day_or`` argument."""
        days, weekdays = _listed(self.days, 31), _listed(self.weekdays, 7)
        if self.day_or and "*" in (days, weekdays):
            days = weekdays = "*"  # one side matches every day, so every day matches
        parts = [_listed(self.minutes, 60), _listed(self.hours, 24), days]
        parts += [_listed(self.months, 12), weekdays]
        if self.seconds is not None:
            parts.append(_listed(self.seconds, 60))
        return " ".join(parts), self.day_or


@dataclass(frozen=True)
class StoredCron:
    """A cron expression stored by an earlier cronchain that this dialect refuses
    (croniter's ``L``, ``W``, ``#``, ``?``, ``H``): croniter reads it as it did then, so
    that an upgrade neither stops nor changes a running job. Only stored jobs get one
    (``scheduler.timing.schedules.stored_schedule``); ``apply`` refuses the expression."""

    text: str
    wildcard: bool

    def for_croniter(self) -> tuple[str, bool]:
        return self.text, True  # croniter's own day rule, as before


def _listed(values: tuple[int, ...], every: int) -> str:
    return "*" if len(values) == every else ",".join(map(str, values))


def parse_cron(text: str, field: str = "schedule") -> CronFields:
    """Read a cron expression or alias; raises :class:`SpecError` naming ``field`` and,
    in the message, the cron field at fault."""
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
    values = [kind.parse(part, field) for kind, part in zip(_FIELDS, parts, strict=False)]
    fields = CronFields(
        text=spec,
        minutes=values[0],
        hours=values[1],
        days=values[2],
        months=values[3],
        weekdays=tuple(sorted({day % 7 for day in values[4]})),
        seconds=values[5] if len(values) == 6 else None,
        wildcard=parts[0].startswith("*") or parts[1].startswith("*"),
        day_or=not (parts[2].startswith("*") or parts[4].startswith("*")),
    )
    _require_a_day(fields, field)
    return fields


def _require_a_day(fields: CronFields, field: str) -> None:
    """Refuse a schedule that can never fire, decided from the calendar: a day of month
    that no month of the expression has, when the day of week cannot stand in for it."""
    if fields.day_or:
        return  # every month has every day of the week
    longest = max(_MONTH_DAYS[month - 1] for month in fields.months)
    if fields.days[0] > longest:
        names = [_MONTH_NAMES[month - 1] for month in fields.months]
        months = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
        verb = "has" if len(names) == 1 else "have"
        raise SpecError(field, f"day of month: never fires: {months} {verb} at most {longest} days")
