from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scheduler.errors import SpecError
from scheduler.timing.schedules import (
    Cron,
    Every,
    FixedDelay,
    Triggered,
    parse_duration,
    parse_schedule,
)

T = datetime(2026, 3, 1, 12, 0, 7, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("1h30m", 5400), ("2d", 172800), ("250ms", 0.25), ("1m 30s", 90)],
)
def test_durations(text: str, seconds: float):
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "10", "s", "1x", "-5s", "0s", "1h-30m"])
def test_bad_durations(text: str):
    with pytest.raises(SpecError):
        parse_duration(text)


def test_every_is_aligned_to_the_epoch_and_never_drifts():
    every = parse_schedule("every 30s")
    assert every == Every(timedelta(seconds=30))
    assert every.next_after(T) == T.replace(second=30)
    assert every.next_after(T.replace(second=30)) == T.replace(minute=1, second=0)
    assert every.latest_at_or_before(T) == T.replace(second=0)
    assert every.latest_at_or_before(T.replace(second=30)) == T.replace(second=30)


def test_an_offset_shifts_every_slot_and_keeps_the_period():
    every = parse_schedule("every 30s offset 2500ms")
    assert every == Every(timedelta(seconds=30), timedelta(seconds=2.5))
    first = T.replace(second=32, microsecond=500000)  # T is 12:00:07
    assert every.next_after(T) == first
    assert every.next_after(first) == first + timedelta(seconds=30)
    assert every.latest_at_or_before(first) == first
    assert every.latest_at_or_before(T) == first - timedelta(seconds=30)
    with pytest.raises(SpecError, match="shorter than 30s"):
        parse_schedule("every 30s offset 30s")


def test_cron_in_a_time_zone():
    cron = parse_schedule("0 2 * * *", "Europe/Berlin")
    assert isinstance(cron, Cron)
    assert cron.next_after(T) == datetime(2026, 3, 2, 1, 0, tzinfo=UTC)  # CET = UTC+1
    assert cron.latest_at_or_before(T) == datetime(2026, 3, 1, 1, 0, tzinfo=UTC)


def test_cron_seconds_field_and_aliases():
    assert parse_schedule("* * * * * */15").next_after(T) == T.replace(second=15)
    assert parse_schedule("@hourly").next_after(T) == T.replace(hour=13, second=0)


def test_misfire_grace_scales_with_the_period():
    assert parse_schedule("every 1s").misfire_grace == timedelta(seconds=10)
    assert parse_schedule("*/10 * * * *").misfire_grace == timedelta(minutes=5)
    assert parse_schedule("@daily").misfire_grace == timedelta(hours=1)


def test_fixed_delay_and_triggered():
    assert parse_schedule("with 10m interval") == FixedDelay(timedelta(minutes=10))
    assert parse_schedule("with 10m interval").relative
    assert parse_schedule("triggered") == Triggered()
    assert parse_schedule("triggered").next_after(T) is None


@pytest.mark.parametrize(
    ("text", "zone", "field", "message"),
    [
        ("61 * * * *", "UTC", "schedule", "is not a schedule"),
        ("* * *", "UTC", "schedule", "is not a schedule"),
        ("@sometimes", "UTC", "schedule", "unknown alias"),
        ("every never", "UTC", "schedule", "not a duration"),
        ("* * * * *", "Mars/Olympus", "timezone", "unknown time zone"),
    ],
)
def test_bad_schedules_name_the_field(text: str, zone: str, field: str, message: str):
    with pytest.raises(SpecError, match=message) as err:
        parse_schedule(text, zone)
    assert err.value.field == field


def test_naive_times_are_refused():
    with pytest.raises(ValueError):
        parse_schedule("every 1s").next_after(datetime(2026, 1, 1))
