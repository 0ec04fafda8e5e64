"""The forecast as a pure function of the planned jobs: fires counted by the second,
each schedule walked once for all its jobs, herds found at the threshold with what
would spread them, and cells that add up to the whole."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cronchain.scheduler.queries.forecast import forecast
from cronchain.scheduler.storage.ahead import Planned

START = datetime(2026, 3, 1, 0, 0, 30, tzinfo=UTC)
DAY = START + timedelta(days=1)


def test_jobs_alike_fire_together_and_make_a_herd_at_the_threshold() -> None:
    planned = [
        Planned("0 * * * *", "UTC", None, "etl", 150, "a"),
        Planned("0 * * * *", "UTC", None, "ml", 50, "m"),
        Planned("every 10m", "UTC", None, "etl", 20, "b"),  # on the hour too
        Planned("30 2 * * *", "Europe/Paris", None, "etl", 99, "c"),  # 99: under it
    ]
    ahead = forecast(planned, START, DAY, threshold=100)
    assert ahead.jobs == 319
    assert ahead.fires == 24 * 200 + 144 * 20 + 99
    # Each hour's 220; and at 02:30 in Paris (01:30 UTC), 99 beside 20: a herd of 119.
    hourly = [START.replace(second=0) + timedelta(hours=h) for h in range(1, 25)]
    paris = START.replace(hour=1, minute=30, second=0)
    assert [(h.at, h.fires) for h in ahead.herds] == sorted(
        [(t, 220) for t in hourly] + [(paris, 119)]
    )
    assert ahead.peak == (hourly[0], 220)
    first = ahead.herds[0]
    assert (first.at, first.fires) == (START.replace(hour=1, second=0), 220)
    assert first.projects == {"etl": 170, "ml": 50}
    assert first.examples == ["etl/a", "etl/b", "ml/m"]
    assert first.advice == [
        "give its 200 cron jobs each a second of the minute, a 6th field from 0 to 59"
        ' ("0 * * * *" becomes "0 * * * * 17"): about 4 a second',
        'give its 20 jobs of period 10m offsets from 0 to 599 s ("every 10m offset Ns"):'
        " about 1 a second",
    ]
    assert sum(c.fires for c in ahead.cells) == ahead.fires
    assert max(c.peak for c in ahead.cells) == 220 and len(ahead.cells) == 96


def test_a_spread_herd_is_no_herd() -> None:
    spread = [Planned(f"0 * * * * {s}", "UTC", None, "etl", 4, f"j{s}") for s in range(60)]
    ahead = forecast(spread, START, DAY, threshold=100)
    assert ahead.herds == [] and ahead.peak is not None and ahead.peak[1] == 4


def test_the_window_starts_after_now_and_a_fixed_delay_counts_its_pending_tick() -> None:
    planned = [
        Planned("every 1h", "UTC", None, "p", 1, "h"),
        Planned("with 5m interval", "UTC", None, "p", 1, "d", START + timedelta(minutes=3)),
        Planned("with 5m interval", "UTC", None, "p", 1, "late", DAY + timedelta(seconds=1)),
    ]
    ahead = forecast(planned, START, START + timedelta(hours=2))
    assert ahead.fires == 2 + 1  # 01:00 and 02:00 (not 00:00: before the start), the tick
    on_the_hour = START.replace(hour=1, second=0)
    edges = forecast(planned[:1], on_the_hour, on_the_hour + timedelta(hours=1))
    assert edges.fires == 1 and edges.peak == (on_the_hour + timedelta(hours=1), 1)


def test_nothing_planned_is_an_empty_forecast() -> None:
    ahead = forecast([], START, DAY)
    assert (ahead.fires, ahead.peak, ahead.herds) == (0, None, [])
    assert ahead.as_json()["peak"] is None


def test_a_fixed_rate_counted_by_arithmetic_is_its_walk() -> None:
    """The arithmetic that counts a fixed rate's slots gives the seconds its ticks walk
    (``next_after``), at slot edges and sub-second offsets too."""
    from cronchain.scheduler.queries.forecast import _seconds
    from cronchain.scheduler.timing.schedules import stored_schedule

    for text in ("every 10s", "every 7s offset 500ms", "every 1h offset 90s", "every 1d"):
        schedule = stored_schedule(text, "UTC")
        for start in (START, START.replace(second=0), START + timedelta(milliseconds=500)):
            end = start + timedelta(hours=30)
            walked, t = [], schedule.next_after(start)
            while t is not None and t <= end:
                walked.append(int(t.timestamp() // 1))
                t = schedule.next_after(t)
            assert _seconds(schedule, start, end) == walked, (text, start)


def test_a_fixed_delay_is_told_by_its_parser_however_it_is_written() -> None:
    """``With 5m interval`` is a fixed delay as much as ``with 5m interval``: its jobs
    come one by one, by their pending ticks, never walked as a group from the start."""
    from cronchain.scheduler.queries.forecast import fixed_delays

    written = [
        Planned("With 5m interval", "UTC", None, "p", 300, "a"),
        Planned("with\t5m   interval", "UTC", None, "p", 2, "b"),
        Planned("every 5m", "UTC", None, "p", 1, "c"),
    ]
    assert fixed_delays(written) == {"With 5m interval", "with\t5m   interval"}
    ahead = forecast(written, START, DAY)
    assert ahead.fires == 288 and ahead.herds == []  # every 5m's alone


def test_fixed_rates_that_fire_in_the_same_seconds_are_walked_as_one() -> None:
    """Offsets within one second of a whole-second period fire in the same seconds:
    folded, they count as their jobs, and a sub-second end counts no half second."""
    planned = [
        Planned("every 1m offset 1300ms", "UTC", None, "p", 1, "a"),
        Planned("every 1m offset 1700ms", "UTC", None, "p", 1, "b"),
        Planned("every 1m offset 2s", "UTC", None, "p", 1, "c"),
    ]
    start = START.replace(second=0)
    ahead = forecast(planned, start, start + timedelta(seconds=61.5))
    assert ahead.fires == 3  # 00:00:01.3, 00:00:01.7 and 00:00:02, each once
    assert ahead.peak == (start + timedelta(seconds=1), 2)
    assert forecast(list(reversed(planned)), start, start + timedelta(seconds=61.5)) == ahead


def test_a_window_under_a_second_counts_into_one_cell() -> None:
    ahead = forecast([Planned("every 1s", "UTC", None, "p", 1, "a")], START, START)
    assert (ahead.fires, len(ahead.cells)) == (0, 1)
