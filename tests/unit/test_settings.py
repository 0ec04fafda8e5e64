"""The tick settings: validated when read, with defaults that keep cron's slots exact."""

from datetime import timedelta

import pytest

from scheduler.settings import TICK_SLACK, Settings


def test_the_slack_defaults_to_a_divisor_of_a_second():
    settings = Settings.from_env({})
    assert settings.tick_slack == TICK_SLACK
    assert timedelta(seconds=1) % settings.tick_slack == timedelta(0)


@pytest.mark.parametrize("value, slack", [("0", 0), ("25", 25), ("1000", 1000)])
def test_a_slack_that_divides_a_second_is_taken(value: str, slack: int):
    settings = Settings.from_env({"CRONCHAIN_TICK_SLACK_MS": value})
    assert settings.tick_slack == timedelta(milliseconds=slack)


@pytest.mark.parametrize("value", ["30", "-5", "2000"])
def test_a_slack_that_would_move_whole_seconds_is_refused(value: str):
    with pytest.raises(ValueError, match="CRONCHAIN_TICK_SLACK_MS must divide a second"):
        Settings.from_env({"CRONCHAIN_TICK_SLACK_MS": value})


def test_a_batch_of_nothing_is_refused():
    with pytest.raises(ValueError, match="CRONCHAIN_TICK_BATCH"):
        Settings.from_env({"CRONCHAIN_TICK_BATCH": "0"})


def test_the_work_path_has_a_queue_and_threads_of_its_own():
    settings = Settings.from_env({"CRONCHAIN_WORK_CONCURRENCY": "250"})
    assert settings.work_queue == "cronchain.work" != settings.queue
    assert settings.work_concurrency == 250


def test_a_work_path_without_threads_is_refused():
    with pytest.raises(ValueError, match="CRONCHAIN_WORK_CONCURRENCY"):
        Settings.from_env({"CRONCHAIN_WORK_CONCURRENCY": "0"})
