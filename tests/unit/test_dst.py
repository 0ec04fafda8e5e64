# ruff: noqa: E501  (the golden table reads best one case per line)
"""Golden DST cases with the real zone database: Vixie cron's rule as Debian's cron (and
cronsim) apply it, pinned.

Fixed-time jobs fire once on each transition day (a skipped time at the first instant
after the gap, several skipped times there once, a repeated time at its first
occurrence); wildcard jobs, whose minute or hour field begins with ``*``, fire at every
real instant that matches: never in a gap, in both occurrences of a fold.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cronchain.scheduler.timing.schedules import parse_schedule


def slots(expression: str, zone: str, after: str, until: str) -> list[str]:
    """Every slot in (after, until], as UTC times."""
    schedule = parse_schedule(expression, zone)
    t, end = datetime.fromisoformat(after), datetime.fromisoformat(until)
    out = []
    while (t := schedule.next_after(t)) <= end:
        out.append(t.astimezone(UTC).strftime("%m-%d %H:%M"))
    return out


GOLDEN = [
    # Europe/Berlin, spring 2026-03-29: 02:00 CET -> 03:00 CEST at 01:00Z.
    ("30 2 * * *", "Europe/Berlin", "2026-03-28", "2026-03-31", ["03-28 01:30", "03-29 01:00", "03-30 00:30"]),
    # Berlin, fall 2026-10-25: 03:00 CEST -> 02:00 CET at 01:00Z; 02:30 fires once, first.
    ("30 2 * * *", "Europe/Berlin", "2026-10-24", "2026-10-27", ["10-24 00:30", "10-25 00:30", "10-26 01:30"]),
    ("30 * * * *", "Europe/Berlin", "2026-03-28T23:00Z", "2026-03-29T03:00Z", ["03-28 23:30", "03-29 00:30", "03-29 01:30", "03-29 02:30"]),
    ("30 * * * *", "Europe/Berlin", "2026-10-24T23:00Z", "2026-10-25T03:00Z", ["10-24 23:30", "10-25 00:30", "10-25 01:30", "10-25 02:30"]),
    ("0 */2 * * *", "Europe/Berlin", "2026-10-24T21:30Z", "2026-10-25T04:00Z", ["10-24 22:00", "10-25 00:00", "10-25 01:00", "10-25 03:00"]),
    # America/New_York, spring 2026-03-08 02:00 EST -> 03:00 EDT at 07:00Z.
    ("30 2 * * *", "America/New_York", "2026-03-07", "2026-03-10", ["03-07 07:30", "03-08 07:00", "03-09 06:30"]),
    ("0 2 * * *", "America/New_York", "2026-03-07", "2026-03-10", ["03-07 07:00", "03-08 07:00", "03-09 06:00"]),
    # New York, fall 2026-11-01 02:00 EDT -> 01:00 EST at 06:00Z; 01:30 is shown twice.
    ("30 1 * * *", "America/New_York", "2026-10-31", "2026-11-03", ["10-31 05:30", "11-01 05:30", "11-02 06:30"]),
    ("*/30 * * * *", "America/New_York", "2026-11-01T04:50Z", "2026-11-01T07:00Z", ["11-01 05:00", "11-01 05:30", "11-01 06:00", "11-01 06:30", "11-01 07:00"]),
    # Australia/Lord_Howe moves by 30 minutes: 02:00 -> 02:30 (+10:30 -> +11) on
    # 2026-10-04 at 15:30Z the day before, and 02:00 -> 01:30 on 2026-04-05 at 15:00Z.
    ("15 2 * * *", "Australia/Lord_Howe", "2026-10-02T12:00Z", "2026-10-05T12:00Z", ["10-02 15:45", "10-03 15:30", "10-04 15:15"]),
    ("45 1 * * *", "Australia/Lord_Howe", "2026-04-03T12:00Z", "2026-04-06T12:00Z", ["04-03 14:45", "04-04 14:45", "04-05 15:15"]),
    ("*/20 * * * *", "Australia/Lord_Howe", "2026-04-04T14:30Z", "2026-04-04T16:00Z", ["04-04 14:40", "04-04 15:10", "04-04 15:30", "04-04 15:50"]),
    # A wildcard minute with a fixed hour is a wildcard job (Debian's rule): on the fall-back
    # day it fires in both occurrences of 02:xx, on the spring-forward day not at all.
    ("*/20 2 * * *", "Europe/Berlin", "2026-10-24T23:00Z", "2026-10-26T00:00Z", ["10-25 00:00", "10-25 00:20", "10-25 00:40", "10-25 01:00", "10-25 01:20", "10-25 01:40"]),
    ("*/20 2 * * *", "Europe/Berlin", "2026-03-28T23:00Z", "2026-03-29T22:00Z", []),
    # An hour range with a step is a fixed-time job: 02:07 and 02:30 fall in the gap and
    # fire once, at 03:00 CEST. (Until issue 14, the step made it skip the gap.)
    ("7,30 2-23/2 * * *", "Europe/Berlin", "2026-03-28T23:00Z", "2026-03-29T03:00Z", ["03-29 01:00", "03-29 02:07", "03-29 02:30"]),
    ("7,30 2-23/2 * * *", "America/New_York", "2026-03-08T05:00Z", "2026-03-08T09:00Z", ["03-08 07:00", "03-08 08:07", "03-08 08:30"]),
    # ... and fires once in a fold, at the first occurrence (until issue 14: twice).
    ("30 1-23/2 * * *", "America/New_York", "2026-11-01T04:00Z", "2026-11-01T09:00Z", ["11-01 05:30", "11-01 08:30"]),
    # A seconds field does not change the class: 02:30:15 fires once, after the gap.
    ("30 2 * * * 15", "Europe/Berlin", "2026-03-28T23:00Z", "2026-03-30T00:00Z", ["03-29 01:00"]),
    # Asia/Tokyo has no DST: the same instant every day.
    ("30 2 * * *", "Asia/Tokyo", "2026-03-28", "2026-03-31", ["03-28 17:30", "03-29 17:30", "03-30 17:30"]),
]  # fmt: skip


@pytest.mark.parametrize(("expression", "zone", "after", "until", "expected"), GOLDEN)
def test_golden(expression: str, zone: str, after: str, until: str, expected: list[str]) -> None:
    after = after if "T" in after else after + "T00:00Z"
    until = until if "T" in until else until + "T00:00Z"
    assert slots(expression, zone, after, until) == expected


@pytest.mark.parametrize(("expression", "zone", "after", "until", "expected"), GOLDEN)
def test_latest_at_or_before_agrees(
    expression: str, zone: str, after: str, until: str, expected: list[str]
) -> None:
    """Walking backwards finds the same slots: each slot is its own latest, and just
    before it the latest is the previous slot."""
    schedule = parse_schedule(expression, zone)
    if not expected:  # no slot in the window: none is found walking back from its end
        end = datetime.fromisoformat(until if "T" in until else until + "T00:00Z")
        start = datetime.fromisoformat(after if "T" in after else after + "T00:00Z")
        latest = schedule.latest_at_or_before(end)
        assert latest is None or latest <= start
        return
    after = after if "T" in after else after + "T00:00Z"
    t = datetime.fromisoformat(after)
    found = []
    for _ in expected:
        t = schedule.next_after(t)
        found.append(t)
    for previous, slot in zip(found, found[1:], strict=False):
        assert schedule.latest_at_or_before(slot) == slot
        assert schedule.latest_at_or_before(slot - timedelta(seconds=1)) == previous


def test_croniter_alone_would_fire_twice_in_the_fold() -> None:
    """Why the resolution is ours: croniter 7 fires a fixed local time twice in a fold.
    If this starts failing, croniter fixed it and the comment in schedules.py can go."""
    from zoneinfo import ZoneInfo

    from croniter import croniter

    zone = ZoneInfo("America/New_York")
    it = croniter("30 1 * * *", datetime(2026, 11, 1, 0, 0, tzinfo=zone))
    first, second = it.get_next(datetime), it.get_next(datetime)
    assert (second - first) < timedelta(hours=2)
