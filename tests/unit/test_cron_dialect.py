"""cronchain's cron dialect (scheduler/timing/cron.py): what each field accepts, what is
refused and with which message, the canonical expression croniter walks, and a seeded
field-by-field comparison with cronsim's parser (``CRONCHAIN_DIFF_SEED``, default 14)."""

from __future__ import annotations

import os
import random
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from cronsim.cronsim import CronSimError, Field

from cronchain.scheduler.errors import SpecError
from cronchain.scheduler.spec.jobspec import JobSpec
from cronchain.scheduler.timing.cron import DAY, HOUR, MINUTE, MONTH, SECOND, WEEKDAY, parse_cron
from cronchain.scheduler.timing.schedules import parse_schedule
from tests.support.repo import manual

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
        ("0 0 15W * *", "day of month: '15w' is not a number; cron has no W, ? or H"),
        ("0 0 LW * *", "cron has no W"),
        ("0 0 * * 5L", "day of week: '5l' is not a number or a name (sun-sat); cron has no W"),
        ("0 0 * * L", "day of week: 'l' is not a number or a name (sun-sat); cron has no W"),
        ("0 0 1#2 * *", "day of month: '1#2' is not a number; cron has no W, ? or H"),
        ("1#2 0 * * *", "minute: '1#2' is not a number; cron has no W"),
        ("0 0 * * 1#0", "day of week: '1#0': a month has a 1st to a 5th"),
        ("0 0 * * fri#6", "day of week: 'fri#6': a month has a 1st to a 5th"),
        ("0 0 * * fri#", "day of week: 'fri#'"),
        ("0 0 * * mon#" + "9" * 5000, "a month has a 1st to a 5th"),  # not int()'s limit
        ("0 0 * * mon#\u0665", "a month has a 1st to a 5th"),  # an Arabic-Indic 5
        ("0 0 * * 1#2-3", "day of week: '1#2' is not a number or a name (sun-sat); cron has no"),
        ("0 0 L-5 * *", "day of month: 'l' is not a number; cron has no W, ? or H (L is a day"),
        ("0 0 ? * *", "cron has no W, ?"),
        ("H * * * *", "cron has no W, ? or H"),
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


def slots(expression: str, count: int = 4, days: str | None = None) -> list[str]:
    schedule, t, found = parse_schedule(expression, days=days), T, []
    for _ in range(count):
        t = schedule.next_after(t)
        found.append(f"{t:%Y-%m-%d}")
    return found


@pytest.mark.parametrize(
    ("expression", "days", "first"),
    [
        ("0 0 L * *", None, ["2026-03-31", "2026-04-30", "2026-05-31", "2026-06-30"]),
        ("0 0 L 2 *", None, ["2027-02-28", "2028-02-29", "2029-02-28", "2030-02-28"]),
        ("0 0 1,L * *", None, ["2026-03-31", "2026-04-01", "2026-04-30", "2026-05-01"]),
        ("0 12 * * mon#1", None, ["2026-03-02", "2026-04-06", "2026-05-04", "2026-06-01"]),
        ("0 12 * * fri#5", None, ["2026-05-29", "2026-07-31", "2026-10-30", "2027-01-29"]),
        ("0 12 * * 7#1,sat", None, ["2026-03-07", "2026-03-14", "2026-03-21", "2026-03-28"]),
        ("0 0 13 * 5", "both", ["2026-03-13", "2026-11-13", "2027-08-13", "2028-10-13"]),
        ("0 12 1-7 * mon", "both", ["2026-03-02", "2026-04-06", "2026-05-04", "2026-06-01"]),
        ("0 0 L * fri", "both", ["2026-07-31", "2027-04-30", "2027-12-31", "2028-03-31"]),
        ("0 0 L * fri", None, ["2026-03-06", "2026-03-13", "2026-03-20", "2026-03-27"]),
        ("0 0 */2 * 5", "both", ["2026-03-13", "2026-03-27", "2026-04-03", "2026-04-17"]),
        ("0 0 29 2 mon#5", "both", ["2044-02-29", "2072-02-29", "2112-02-29", "2140-02-29"]),
        ("0 12 * * mon#05", None, ["2026-03-30", "2026-06-29", "2026-08-31", "2026-11-30"]),
    ],
)
def test_quartz_day_items_and_days_both(expression: str, days: str | None, first: list[str]):
    """``L``, ``d#k`` (issue 35) and both day fields: with ``days: both`` the 13th that
    is a Friday, the Monday among the first seven days; one field begins with ``*``: cron
    ANDs them anyway."""
    assert slots(expression, days=days) == first
    assert parse_schedule(expression, days=days).latest_at_or_before(
        datetime.fromisoformat(first[1]).replace(tzinfo=UTC, hour=23)
    ) == parse_schedule(expression, days=days).next_after(
        datetime.fromisoformat(first[0]).replace(tzinfo=UTC, hour=23)
    )  # walked backwards, the same slots


@pytest.mark.parametrize("seconds", ["", " *"])
def test_a_sifted_walk_leaves_a_day_that_is_not_the_jobs_at_once(seconds: str) -> None:
    """Every minute (or second) of Friday the 13th: from its last one to the next
    Friday the 13th, and back (the reviewer's case: minute by minute, this took 0.3 s;
    with seconds, 12 s)."""
    schedule = parse_schedule(f"* * 13 * 5{seconds}", days="both")
    last = datetime(2026, 3, 13, 23, 59, 59 if seconds else 0, tzinfo=UTC)
    assert schedule.next_after(last) == datetime(2026, 11, 13, tzinfo=UTC)
    assert schedule.latest_at_or_before(datetime(2026, 11, 12, 12, tzinfo=UTC)) == last


@pytest.mark.parametrize(
    ("expression", "days", "message"),
    [
        ("0 0 1 * mon#5", "both", "never fires: none of its days of month is a 5th weekday"),
        ("0 0 L 4 sun#4", "both", "is a 4th weekday of its month (days: both)"),
        ("0 0 8-14 * mon#1,tue#3", "both", "is a 1st or 3rd weekday"),
        ("0 0 */20 * mon#5", None, "is a 5th weekday of its month"),  # * ANDs them too
        ("* * */14 */3 5#4", None, "is a 4th weekday of its month"),
        ("every 5m", "both", "days: both applies to a cron schedule only"),
        ("0 0 13 * 5", "all", "days: 'all' is not one of either, both"),
    ],
)
def test_days_refused(expression: str, days: str | None, message: str) -> None:
    with pytest.raises(SpecError, match=re.escape(message)):
        parse_schedule(expression, days=days)


def test_days_is_a_job_field_that_keeps_old_revisions() -> None:
    """``days`` joins the stored spec only as ``both``: a job without it, or with cron's
    own ``either``, keeps the revision it had, and apply does not call it changed."""
    plain = JobSpec("p", "a", "0 0 13 * 5")
    assert JobSpec("p", "a", "0 0 13 * 5", days="either").revision == plain.revision
    assert "days" not in plain.normalized()
    both = JobSpec.from_dict(
        "p", {"name": "a", "schedule": "0 0 13 * 5", "days": "both", "noop": {}}
    )
    assert both.normalized()["days"] == "both" and both.revision != plain.revision
    assert both.parsed_schedule().next_after(T) == datetime(2026, 3, 13, tzinfo=UTC)
    with pytest.raises(SpecError, match="job 'a': days: both applies to a cron schedule only"):
        JobSpec.from_dict("p", {"name": "a", "schedule": "every 5s", "days": "both", "noop": {}})
    either = {"name": "a", "schedule": "every 5s", "days": "either", "noop": {}}
    assert JobSpec.from_dict("p", either).revision == JobSpec("p", "a", "every 5s").revision
    with pytest.raises(SpecError, match="job 'a': days: 'all' is not one of either, both"):
        JobSpec.from_dict("p", {"name": "a", "schedule": "* * * * *", "days": "all", "noop": {}})


# --- field by field against cronsim ----------------------------------------------------

OURS = {"minute": MINUTE, "hour": HOUR, "day-of-month": DAY, "month": MONTH}
OURS |= {"day-of-week": WEEKDAY, "second": SECOND}
THEIRS = {"minute": Field.MINUTE, "hour": Field.HOUR, "day-of-month": Field.DAY}
THEIRS |= {"month": Field.MONTH, "day-of-week": Field.DOW, "second": Field.SECOND}
VALUES = ["0", "1", "5", "7", "12", "23", "24", "29", "31", "59", "60", "05", "007", "99"]
VALUES += ["jan", "Dec", "feb", "mon", "SUN", "sat", "Fri", "monday", "L", "W", "5L", "1#2"]
VALUES += ["LW", "mon#1", "7#5", "0#3", "3#0", "fri#6", "L#1"]
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
        if kind == "day-of-month" and rng.random() < 0.2:
            items.append(rng.choice(["L", "l", "L/2", "L-3", "5-L"]))
        elif kind == "day-of-week" and rng.random() < 0.3:
            items.append(f"{a}#{rng.choice([0, 1, 2, 3, 4, 5, 5, 6, 12])}")
        else:
            items.append(rng.choice(SHAPES).format(a=a, b=b, c=c, n=rng.choice(STEPS)))
    return ",".join(items)


LAST = -1000  # cronsim's value for L in the day of month


def cronsim_reads(kind: str, text: str) -> set[Any] | str:
    """The values, with ``L`` as cronsim's -1000 and ``d#k`` as ``(d, k)``, Sunday 0."""
    try:
        values = THEIRS[kind].parse(text.upper())
    except (CronSimError, ValueError, IndexError):
        return "refused"
    if kind != "day-of-week":
        return set(values)
    return {v % 7 if isinstance(v, int) else (v[0] % 7, v[1]) for v in values}


def cronchain_reads(kind: str, text: str) -> set[Any] | str:
    try:
        values, last, nth = OURS[kind].parse_day_field(text.lower(), "schedule")
    except SpecError:
        return "refused"
    days = {LAST} if last else set()
    return {v % 7 if kind == "day-of-week" else v for v in values} | days | set(nth)


# Differences kept on purpose, each with the sentence of docs/reference/schedules.md (Cron
# dialect) that explains it. cronsim reads LW, nW and nL (Quartz's syntax) and L with a
# step (L/2 as L), and 5-5/10 as 5/10, that is 5-59/10 (cronie reads it as 5).
QUARTZ_TOKENS = re.compile(r"w|\dl|l/", re.I)
QUARTZ_README = "croniter's and Quartz's `W`, `LW`, `5L`, `?` and `H`"
EQUAL_WITH_STEP = re.compile(r"(?<![\w-])(\w+)-(\w+)/(\d+)")
EQUAL_WITH_STEP_README = "A range with equal ends is that one value, with a step or not"
ENDS_ON_SUNDAY = re.compile(r"-sun\b", re.I)  # cronsim refuses fri-sun as backwards
ENDS_ON_SUNDAY_README = "A range that ends in `sun` (`fri-sun`) ends on Sunday"


def test_the_readme_explains_each_accepted_difference() -> None:
    readme = " ".join(manual().split())
    assert QUARTZ_README in readme
    assert EQUAL_WITH_STEP_README in readme
    assert ENDS_ON_SUNDAY_README in readme


def test_fields_read_as_cronsim_reads_them() -> None:
    rng = random.Random(f"{SEED}:fields")
    counts = {"agree": 0, "accepted by both": 0, "W, nL": 0, "a-a/n": 0, "x-sun": 0}
    counts |= {"L, d#k": 0}
    failures = []
    for index in range(6000):
        kind = rng.choice(list(OURS))
        text = random_field(rng, kind)
        ours, theirs = cronchain_reads(kind, text), cronsim_reads(kind, text)
        if ours == theirs:
            counts["agree"] += 1
            counts["accepted by both"] += ours != "refused"
            counts["L, d#k"] += ours != "refused" and not ours <= set(range(60))
        elif ours == "refused" and QUARTZ_TOKENS.search(text):
            counts["W, nL"] += 1
        elif EQUAL_WITH_STEP.search(text) and ours == cronsim_reads(kind, _one_value(kind, text)):
            counts["a-a/n"] += 1
        elif theirs == "refused" and ENDS_ON_SUNDAY.search(text):
            counts["x-sun"] += 1
        else:
            failures.append(f"{kind} {text!r} (seed {SEED}, field {index}): {ours} vs {theirs}")
    print(f"seed {SEED}: {counts}")
    assert not failures, "\n".join(failures[:10])
    assert counts["L, d#k"] > 20  # the day items were drawn, and read alike


def _one_value(kind: str, text: str) -> str:
    """``a-a/n`` written ``a``: the question cronsim answers as cron does."""

    def one(m: re.Match[str]) -> str:
        low, high = (cronchain_reads(kind, v) for v in m.group(1, 2))
        return m.group(1) if low == high and low != "refused" else m.group(0)

    return EQUAL_WITH_STEP.sub(one, text)
