"""Property: for random cron schedules, zones and ranges, no slot repeats and, away
from DST transitions, none is missing (checked against a minute-by-minute search)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from cronsim.cronsim import Field
from hypothesis import given, settings
from hypothesis import strategies as st

from cronchain.scheduler.timing.localtime import Kind, resolve, transitions, wall
from cronchain.scheduler.timing.schedules import Cron, parse_schedule

ZONES = [
    "UTC",
    "Asia/Tokyo",
    "Europe/Berlin",
    "Europe/London",
    "America/New_York",
    "America/Santiago",
    "Australia/Lord_Howe",
    "Pacific/Chatham",  # +12:45 / +13:45
    "Asia/Tehran",
]
MINUTES = ["0", "15", "30", "45", "*/15", "*/20", "5,35", "0-10/5", "*"]
HOURS = ["*", "*/2", "*/3", "0", "1", "2", "3", "1,2,3", "0-4", "22-23", "1-23/2", "2-2"]
WEEKDAYS = ["*", "*", "1-5", "0,6"]
RANGE = timedelta(hours=26)


@st.composite
def cases(draw: st.DrawFn) -> tuple[str, str, datetime]:
    expression = f"{draw(st.sampled_from(MINUTES))} {draw(st.sampled_from(HOURS))} * * "
    expression += draw(st.sampled_from(WEEKDAYS))
    zone = draw(st.sampled_from(ZONES))
    year = draw(st.integers(2020, 2035))
    year_start = datetime(year, 1, 1, tzinfo=UTC)
    changes = transitions(year_start, year_start + timedelta(days=366), ZoneInfo(zone))
    if changes and draw(st.booleans()):  # most ranges straddle a transition
        around = draw(st.sampled_from(changes)).at
        start = around - timedelta(minutes=draw(st.integers(0, 20 * 60)))
    else:
        start = year_start + timedelta(minutes=draw(st.integers(0, 365 * 24 * 60)))
    return expression, zone, start


@settings(max_examples=80, deadline=None)
@given(cases())
def test_no_slot_repeats_and_none_is_missing(case: tuple[str, str, datetime]) -> None:
    expression, zone_name, start = case
    schedule = parse_schedule(expression, zone_name)
    assert isinstance(schedule, Cron)
    zone = schedule.zone
    end = start + RANGE

    found = []
    t = start
    while (t := schedule.next_after(t)) <= end:
        found.append(t)
    assert found == sorted(set(found)), "slots must strictly increase"

    matches = _matcher(expression)
    expected = set()
    minute = start.replace(second=0, microsecond=0) + timedelta(minutes=1)
    while minute <= end:
        local = wall(minute, zone)
        if matches(local):
            kind = resolve(local, zone).kind
            if kind is Kind.PLAIN:
                expected.add(minute)
            else:  # a fold: both readings for a wildcard job, the first one for fixed times
                assert (minute in found) == (
                    schedule.wildcard or resolve(local, zone).first == minute
                )
        minute += timedelta(minutes=1)
    assert expected <= set(found), "no plain slot may be missing"
    extra = set(found) - expected
    for slot in extra:  # a fold's reading, or the instant after a gap for a fixed time
        kind = resolve(wall(slot, zone), zone).kind
        assert kind is Kind.FOLD or any(c.at == slot for c in transitions(start, end, zone))


def _matcher(expression: str):  # type: ignore[no-untyped-def]
    """An independent reading of the expression: the sets cronsim reads it as, matched
    field by field (cron's day of week: 0 and 7 are Sunday). Not croniter's, which reads
    ``2-2`` as ``*``."""
    minute, hour, _, _, weekday = expression.upper().split()
    minutes, hours = Field.MINUTE.parse(minute), Field.HOUR.parse(hour)
    weekdays = {day % 7 for day in Field.DOW.parse(weekday)}

    def matches(local: datetime) -> bool:
        return (
            local.minute in minutes
            and local.hour in hours
            and (local.weekday() + 1) % 7 in weekdays
        )

    return matches
