from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cronchain.scheduler.errors import SpecError
from cronchain.scheduler.timing.schedules import (
    Cron,
    Every,
    FixedDelay,
    Triggered,
    parse_duration,
    parse_schedule,
    parse_seconds,
)

T = datetime(2026, 3, 1, 12, 0, 7, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("1h30m", 5400), ("2d", 172800), ("250ms", 0.25), ("1m 30s", 90)],
)
def test_durations(text: str, seconds: float):
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    "text",
    ["", "10", "s", "1x", "-5s", "0s", "1h-30m", "1e400s", "nan", "inf", "0.0001ms",
     "99999999999d", "9" * 400 + "s", "\u0663s", "1.5.5s", "9" * 50_000],
)  # fmt: skip
def test_bad_durations(text: str):
    """Any text that is not a duration is a SpecError, never another error or a hang:
    no overflow (99999999999d), no non-finite number, no zero (0.0001ms rounds to 0)."""
    with pytest.raises(SpecError):
        parse_duration(text)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 1e300, 10**400, -1, "1e400s"])
def test_bad_seconds(value: object):
    with pytest.raises(SpecError, match="timeout"):
        parse_seconds(value, "timeout")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("every 1ms", "from 1s to 1000d, not '1ms'"),
        ("every 0.5s", "from 1s to 1000d"),
        ("with 500ms interval", "the interval must be from 1s to 1000d"),
        ("every 1001d", "from 1s to 1000d"),
        ("with 99999999999d interval", "not a duration cronchain can hold"),
        ("every 0.0001ms", "must be longer than zero"),
        ("every 1e400s", "not a duration"),
    ],
)
def test_periods_run_from_one_second_to_a_thousand_days(text: str, message: str):
    with pytest.raises(SpecError, match=message) as err:
        parse_schedule(text)
    assert err.value.field == "schedule"


def test_the_longest_and_shortest_periods_are_accepted():
    assert parse_schedule("every 1s") == Every(timedelta(seconds=1))
    assert parse_schedule("every 1000d offset 999d").next_after(T) is not None
    assert parse_schedule("with 1000d interval") == FixedDelay(timedelta(days=1000))


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
        # Was "is not a schedule" (croniter's verdict); cronchain's own parser names the
        # cron field at fault.
        ("61 * * * *", "UTC", "schedule", "minute: 61 is out of range 0-59"),
        ("0 0 30 2 *", "UTC", "schedule", "never fires: February has at most 29 days"),
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


END = datetime(9999, 12, 31, 23, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "zone"),
    [
        ("0 0 1 1 *", "UTC"),
        ("0 0 29 2 *", "UTC"),
        ("* * * * *", "Pacific/Kiritimati"),  # 10000-01-01 there at 10:00Z on 9999-12-31
        ("30 2 * * *", "Europe/Berlin"),
        ("every 1000d", "UTC"),
        ("with 10m interval", "UTC"),
    ],
)
def test_near_year_9999_a_slot_past_the_range_is_none(text: str, zone: str):
    """Past datetime's range a schedule ends: next_after says None, never OverflowError
    (date arithmetic there overflows, and croniter raises ValueError)."""
    schedule = parse_schedule(text, zone)
    assert schedule.next_after(datetime.max.replace(tzinfo=UTC)) is None
    assert schedule.next_after(END + timedelta(minutes=59)) is None
    assert schedule.latest_at_or_before(datetime.min.replace(tzinfo=UTC)) is None


def test_near_year_9999_slots_inside_the_range_still_come():
    assert parse_schedule("* * * * *").next_after(END) == END + timedelta(minutes=1)
    assert parse_schedule("every 30s").next_after(END) == END + timedelta(seconds=30)
    assert parse_schedule("0 0 1 1 *").next_after(datetime(9998, 6, 1, tzinfo=UTC)) == datetime(
        9999, 1, 1, tzinfo=UTC
    )


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ("0 0 30 2 *", "schedule: day of month: never fires: February has at most 29 days"),
        ("0 0 31 4,6 *", "schedule: day of month: never fires: April and June"),
        ("45-45 3 * * 8", "schedule: day of week: 8 is out of range 0-7"),
        ("0 0 LW * *", "schedule: day of month: 'lw' is not a number"),
        ("every 1ms", "schedule: the period must be from 1s to 1000d"),
        ("every 99999999999d", "schedule: '99999999999d' is not a duration cronchain can hold"),
        ("every 0.0001ms", "schedule: '0.0001ms' must be longer than zero"),
        ("with 500ms interval", "schedule: the interval must be from 1s to 1000d"),
    ],
)
def test_cronchain_next_and_apply_refuse_a_bad_schedule(
    schedule: str,
    message: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One line naming the field, exit status 2, no traceback (until issue 14 the first
    two crashed ``next`` and ``apply`` with one), and ``apply`` writes nothing."""
    from cronchain.scheduler.cli.main import main

    assert main(["next", schedule, "--after", "2026-01-01T00:00Z"]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err and err.count("\n") == 1

    for name in [n for n in os.environ if n.startswith("CRONCHAIN_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("CRONCHAIN_HOME", str(tmp_path))  # the embedded default
    file = tmp_path / "jobs.yaml"
    file.write_text(f"project: p\njobs:\n  - {{name: a, schedule: {schedule!r}, noop: {{}}}}\n")
    assert main(["apply", str(file)]) == 2
    err = capsys.readouterr().err
    assert err == f"cronchain: {file}: job 'a': {message}" + err.split(message, 1)[1]
    assert "Traceback" not in err and err.count("\n") == 1
    assert not (tmp_path / "cronchain.db").exists()
