"""cronchain's cron dialect (scheduler/timing/cron.py): what each field accepts, what is
refused and with which message, the canonical expression croniter walks, and a seeded
field-by-field comparison with cronsim's parser (``CRONCHAIN_DIFF_SEED``, default 14)."""

from __future__ import annotations

import os
import random
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cronsim.cronsim import CronSimError, Field

from cronchain.scheduler.errors import SpecError
from cronchain.scheduler.timing.cron import DAY, HOUR, MINUTE, MONTH, SECOND, WEEKDAY, parse_cron
from cronchain.scheduler.timing.schedules import parse_schedule

SEED = int(os.environ.get("CRONCHAIN_DIFF_SEED", "14"))
T = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("expression", "minutes", "hours", "days", "months", "weekdays"),
    [
        ("45-45 3 * * *", (45,), (3,), "*", "*", "*"),  # croniter 7 read 45-45 as *
        ("0 12 1-1 * *", (0,), (12,), (1,), "*", "*"),
        ("*/20 0-6/3 */10 */5 */2", (0, 20, 40), (0, 3, 6), (1, 11, 21, 31), (1, 6, 11),
         (0, 2, 4, 6)),
        ("5/15 22/1 30/1 11/1 5/1", (5, 20, 35, 50), (22, 23), (30, 31), (11, 12), (0, 5, 6)),
        ("0 0 * jan-mar,Dec MON-FRI", (0,), (0,), "*", (1, 2, 3, 12), (1, 2, 3, 4, 5)),
        ("0 0 * * 7", (0,), (0,), "*", "*", (0,)),  # 0 and 7 are Sunday
        ("0 0 * * 5-7", (0,), (0,), "*", "*", (0, 5, 6)),
        ("0 0 * * sun,7,0", (0,), (0,), "*", "*", (0,)),
        ("00,05 08 * * *", (0, 5), (8,), "*", "*", "*"),
        ("1-5,3-8/2,*/30 * * * *", (0, 1, 2, 3, 4, 5, 7, 30), "*", "*", "*", "*"),
        ("0 0 * * *,1", (0,), (0,), "*", "*", "*"),
        ("@hourly", (0,), "*", "*", "*", "*"),
        ("@WEEKLY", (0,), (0,), "*", "*", (0,)),
        ("0 0 * * fri-sun", (0,), (0,), "*", "*", (0, 5, 6)),  # a name: sun is 7 here
    ],
)  # fmt: skip
def test_each_field_names_a_set(
    expression: str, minutes: object, hours: object, days: object, months: object, weekdays: object
) -> None:
    fields = parse_cron(expression)
    every = {"minutes": 60, "hours": 24, "days": 31, "months": 12, "weekdays": 7}
    for name, want in zip(every, (minutes, hours, days, months, weekdays), strict=True):
        got = getattr(fields, name)
        assert got == want or (want == "*" and len(got) == every[name]), name


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("60 * * * *", "minute: 60 is out of range 0-59"),
        ("* 24 * * *", "hour: 24 is out of range 0-23"),
        ("0 0 32 * *", "day of month: 32 is out of range 1-31"),
        ("0 0 0 * *", "day of month: 0 is out of range 1-31"),
        ("0 0 * 13 *", "month: 13 is out of range 1-12"),
        ("0 0 * * 8", "day of week: 8 is out of range 0-7"),
        ("0 0 * * * 60", "second: 60 is out of range 0-59"),
        ("0 0 L * *", "day of month: 'l' is not a number; cron has no L, W, #, ? or H"),
        ("0 0 15W * *", "cron has no L"),
        ("0 0 LW * *", "cron has no L"),
        ("0 0 * * 5L", "day of week: '5l' is not a number or a name (sun-sat); cron has no L"),
        ("0 0 * * 1#2", "cron has no L, W, #"),
        ("0 0 ? * *", "cron has no L, W, #, ?"),
        ("H * * * *", "cron has no L, W, #, ? or H"),
        ("H(0-29) * * * *", "minute"),
        ("5-1 * * * *", "minute: 5-1 runs backwards"),
        ("0 0 * * 5-0", "day of week: 5-0 runs backwards (Sunday is also 7)"),
        ("0 0 * * thursday", "'thursday' is not a number or a name (sun-sat)'"[:-1]),
        ("*/0 * * * *", "minute: a step of 0 never advances"),
        ("1,,2 * * * *", "minute: a value is missing"),
        ("1, * * * *", "minute: a value is missing"),
        ("1- * * * *", "minute: a value is missing"),
        ("/5 * * * *", "minute: a value is missing"),
        ("*/ * * * *", "minute: step '' is not a whole number"),
        ("*/mon * * * *", "minute: step 'mon' is not a whole number"),
        ("*/5/2 * * * *", "minute: step '5/2'"),
        ("*5 * * * *", "minute: '*5' is not a number"),
        ("1-5-7 * * * *", "minute: '5-7' is not a number"),
        ("+5 * * * *", "minute: '+5' is not a number"),
        ("0 0 * * monday", "day of week: 'monday' is not a number or a name (sun-sat)"),
        ("0 0 * jan-feb/x *", "month: step 'x'"),
        ("0 jan * * *", "hour: 'jan' is not a number"),
        ("0 0 * * * * *", "is not a schedule: use 5 cron fields"),
        ("* * * *", "is not a schedule: use 5 cron fields"),
        ("@reboot", "unknown alias"),
        ("0 0 30 2 *", "day of month: never fires: February has at most 29 days"),
        ("0 0 31 4,6 *", "day of month: never fires: April and June have at most 30 days"),
        ("0 0 30,31 feb *", "never fires: February"),
        ("0 0 31 2,4,6,9,11 */2", "never fires"),  # */2 starts with *: both must match
    ],
)
def test_refused_naming_the_cron_field(expression: str, message: str) -> None:
    with pytest.raises(SpecError, match=re.escape(message)) as err:
        parse_schedule(expression)
    assert err.value.field == "schedule"
    if "cron has no" not in message:  # the hint is for croniter's extensions only
        assert "cron has no" not in str(err.value)


@pytest.mark.parametrize(
    ("expression", "first"),
    [
        ("0 0 29 2 *", datetime(2028, 2, 29, tzinfo=UTC)),  # February's 29th counts
        ("0 0 31 2,4 1", datetime(2026, 4, 6, tzinfo=UTC)),  # either day field: Mondays
        ("0 0 30 1-2 *", datetime(2027, 1, 30, tzinfo=UTC)),
    ],
)
def test_rare_schedules_are_not_refused(expression: str, first: datetime) -> None:
    assert parse_schedule(expression).next_after(T) == first


def test_equal_ends_are_one_value() -> None:
    """The issue's examples: croniter read these as ``*``."""
    daily = parse_schedule("45-45 3 * * *")
    assert daily.next_after(T) == datetime(2026, 3, 2, 3, 45, tzinfo=UTC)
    assert daily.next_after(daily.next_after(T)) == datetime(2026, 3, 3, 3, 45, tzinfo=UTC)
    monthly = parse_schedule("0 12 1-1 * *")
    assert monthly.next_after(T) == datetime(2026, 4, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("expression", "canonical", "day_or"),
    [
        ("45-45 3 * * *", "45 3 * * *", False),
        ("*/15 9-17 * * mon-fri", "0,15,30,45 9,10,11,12,13,14,15,16,17 * * 1,2,3,4,5", False),
        ("0 0 13 * 5", "0 0 13 * 5", True),  # Vixie: the 13th or a Friday
        ("0 0 */2 * 5", "0 0 1,3,5,7,9,11,13,15,17,19,21,23,25,27,29,31 * 5", False),
        ("0 0 1-31 * 1", "0 0 * * *", True),  # one side matches every day: every day
        ("0 0 1 * 0-7", "0 0 * * *", True),
        ("0 0 * * sun,7", "0 0 * * 0", False),
        ("* * * * * 5/20", "* * * * * 5,25,45", False),
    ],
)
def test_croniter_walks_a_canonical_expression(expression: str, canonical: str, day_or: bool):
    assert parse_cron(expression).for_croniter() == (canonical, day_or)


def test_vixies_day_rule() -> None:
    """Both day fields restricted: either matches. One begins with ``*``: both must."""
    either = parse_schedule("0 0 13 * 5")  # 2026-03-06 is a Friday
    assert either.next_after(T) == datetime(2026, 3, 6, tzinfo=UTC)
    assert either.next_after(datetime(2026, 3, 12, tzinfo=UTC)) == datetime(2026, 3, 13, tzinfo=UTC)
    both = parse_schedule("0 0 */2 * 5")  # odd days that are Fridays
    assert both.next_after(T) == datetime(2026, 3, 13, tzinfo=UTC)


# --- field by field against cronsim ----------------------------------------------------

OURS = {"minute": MINUTE, "hour": HOUR, "day-of-month": DAY, "month": MONTH}
OURS |= {"day-of-week": WEEKDAY, "second": SECOND}
THEIRS = {"minute": Field.MINUTE, "hour": Field.HOUR, "day-of-month": Field.DAY}
THEIRS |= {"month": Field.MONTH, "day-of-week": Field.DOW, "second": Field.SECOND}
VALUES = ["0", "1", "5", "7", "12", "23", "24", "29", "31", "59", "60", "05", "007", "99"]
VALUES += ["jan", "Dec", "feb", "mon", "SUN", "sat", "Fri", "monday", "L", "W", "5L", "1#2"]
VALUES += ["?", "H", "", "x", "-1", "+2"]
SHAPES = ["{a}", "{a}", "{a}-{b}", "{a}-{a}", "{a}-{b}/{n}", "{a}-{a}/{n}", "{a}/{n}", "*/{n}"]
SHAPES += ["*", "*{a}", "{a}-", "-{a}", "{a}/", "{a}--{b}", "{a}-{b}-{c}", "*/{n}/{n}"]
STEPS = ["1", "2", "3", "5", "7", "10", "30", "60", "0", "00", "", "x", "mon"]


def random_field(rng: random.Random, kind: str) -> str:
    """A list of one to three items, mostly well formed, of values mostly in range."""
    field = OURS[kind]

    def value() -> str:
        if rng.random() < 0.3:
            return rng.choice(VALUES)
        number = rng.randint(field.low, field.high)
        if field.names and number - field.low < len(field.names) and rng.random() < 0.3:
            return field.names[number - field.low]
        return str(number)

    items = []
    for _ in range(rng.choice([1, 1, 2, 3])):
        a, b, c = value(), value(), value()
        items.append(rng.choice(SHAPES).format(a=a, b=b, c=c, n=rng.choice(STEPS)))
    return ",".join(items)


def cronsim_reads(kind: str, text: str) -> set[int] | str:
    try:
        values = THEIRS[kind].parse(text.upper())
    except (CronSimError, ValueError, IndexError):
        return "refused"
    return {v % 7 if kind == "day-of-week" and isinstance(v, int) else v for v in values}


def cronchain_reads(kind: str, text: str) -> set[int] | str:
    try:
        values = OURS[kind].parse(text.lower(), "schedule")
    except SpecError:
        return "refused"
    return {v % 7 if kind == "day-of-week" else v for v in values}


# Differences kept on purpose, each with the sentence of README.md (Cron dialect) that
# explains it. cronsim reads L, LW, nW, nL and n#k (Quartz's syntax), and 5-5/10 as 5/10,
# that is 5-59/10 (cronie reads it as 5).
QUARTZ_TOKENS = re.compile(r"[LW#]", re.I)
QUARTZ_README = "croniter's and Quartz's `L`, `W`, `#`, `?` and `H`"
EQUAL_WITH_STEP = re.compile(r"(?<![\w-])(\w+)-(\w+)/(\d+)")
EQUAL_WITH_STEP_README = "A range with equal ends is that one value, with a step or not"
ENDS_ON_SUNDAY = re.compile(r"-sun\b", re.I)  # cronsim refuses fri-sun as backwards
ENDS_ON_SUNDAY_README = "A range that ends in `sun` (`fri-sun`) ends on Sunday"


def test_the_readme_explains_each_accepted_difference() -> None:
    readme = " ".join((Path(__file__).parents[2] / "README.md").read_text().split())
    assert QUARTZ_README in readme
    assert EQUAL_WITH_STEP_README in readme
    assert ENDS_ON_SUNDAY_README in readme


def test_fields_read_as_cronsim_reads_them() -> None:
    rng = random.Random(f"{SEED}:fields")
    counts = {"agree": 0, "accepted by both": 0, "L, W, #": 0, "a-a/n": 0, "x-sun": 0}
    failures = []
    for index in range(6000):
        kind = rng.choice(list(OURS))
        text = random_field(rng, kind)
        ours, theirs = cronchain_reads(kind, text), cronsim_reads(kind, text)
        if ours == theirs:
            counts["agree"] += 1
            counts["accepted by both"] += ours != "refused"
        elif ours == "refused" and QUARTZ_TOKENS.search(text):
            counts["L, W, #"] += 1
        elif EQUAL_WITH_STEP.search(text) and ours == cronsim_reads(kind, _one_value(kind, text)):
            counts["a-a/n"] += 1
        elif theirs == "refused" and ENDS_ON_SUNDAY.search(text):
            counts["x-sun"] += 1
        else:
            failures.append(f"{kind} {text!r} (seed {SEED}, field {index}): {ours} vs {theirs}")
    print(f"seed {SEED}: {counts}")
    assert not failures, "\n".join(failures[:10])


def _one_value(kind: str, text: str) -> str:
    """``a-a/n`` written ``a``: the question cronsim answers as cron does."""

    def one(m: re.Match[str]) -> str:
        low, high = (cronchain_reads(kind, v) for v in m.group(1, 2))
        return m.group(1) if low == high and low != "refused" else m.group(0)

    return EQUAL_WITH_STEP.sub(one, text)
