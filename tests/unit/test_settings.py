"""The settings: every ``CRONCHAIN_*`` variable is checked when read, and a value that
cannot be used is a ``ConfigError`` naming the variable and what it accepts (the CLI's
exit status 2), never a ValueError from deep inside."""

from datetime import timedelta
from pathlib import Path

import pytest

from cronchain.scheduler.errors import ConfigError, SpecError
from cronchain.scheduler.settings import TICK_BATCH, TICK_SLACK, WORK_CONCURRENCY, Settings


def refused(variable: str, value: str) -> ConfigError:
    with pytest.raises(ConfigError) as raised:
        Settings.from_env({variable: value})
    assert raised.value.field == variable
    assert str(raised.value).startswith(f"{variable}: must ")
    return raised.value


def test_nothing_set_is_the_embedded_default(tmp_path: Path):
    settings = Settings.from_env({"CRONCHAIN_HOME": str(tmp_path)})
    assert settings.database_url == f"sqlite:///{tmp_path}/cronchain.db"
    assert settings.broker_url == "filesystem://" and settings.embedded_broker
    assert (settings.watchdog_interval, settings.reconcile_interval) == (30, 60)
    assert (settings.queue, settings.work_queue) == ("cronchain", "cronchain.work")
    assert (settings.tick_batch, settings.work_concurrency) == (TICK_BATCH, WORK_CONCURRENCY)
    assert (settings.imports, settings.http_allow, settings.jobs_dir) == ((), "", None)


def test_empty_values_take_the_defaults():
    empty = {
        name: ""
        for name in (
            "CRONCHAIN_WATCHDOG_INTERVAL",
            "CRONCHAIN_TICK_BATCH",
            "CRONCHAIN_TICK_SLACK_MS",
            "CRONCHAIN_QUEUE",
            "CRONCHAIN_BROKER_URL",
        )
    }
    assert Settings.from_env(empty) == Settings.from_env({})


def test_the_slack_defaults_to_a_divisor_of_a_second():
    settings = Settings.from_env({})
    assert settings.tick_slack == TICK_SLACK
    assert timedelta(seconds=1) % settings.tick_slack == timedelta(0)


@pytest.mark.parametrize("value, slack", [("0", 0), ("25", 25), ("125", 125), ("1000", 1000)])
def test_a_slack_that_divides_a_second_is_taken(value: str, slack: int):
    settings = Settings.from_env({"CRONCHAIN_TICK_SLACK_MS": value})
    assert settings.tick_slack == timedelta(milliseconds=slack)


@pytest.mark.parametrize("value", ["7", "30", "-5", "2000", "abc", "2.5", "nan", "9" * 30])
def test_a_slack_that_would_move_whole_seconds_is_refused(value: str):
    err = refused("CRONCHAIN_TICK_SLACK_MS", value)
    assert "must divide a second: 0 (exact), 1, 2, 4, 5, 8" in str(err)
    assert "500 or 1000 milliseconds" in str(err) and repr(value) in str(err)


@pytest.mark.parametrize(
    "variable", ["CRONCHAIN_WATCHDOG_INTERVAL", "CRONCHAIN_RECONCILE_INTERVAL"]
)
@pytest.mark.parametrize("value", ["0", "-1", "0.5", "abc", "nan", "inf", "-inf", "1e400", "86401"])
def test_an_interval_is_a_number_of_seconds_in_range(variable: str, value: str):
    err = refused(variable, value)
    assert "a number of seconds from 1 to" in str(err)


@pytest.mark.parametrize("value", ["241", "300", "3600", "86400"])
def test_a_watchdog_interval_that_would_make_parked_ticks_late_is_refused(value: str):
    err = refused("CRONCHAIN_WATCHDOG_INTERVAL", value)
    assert "a number of seconds from 1 to 240" in str(err) and repr(value) in str(err)
    assert "parked" in str(err)


def test_a_reconcile_interval_may_be_a_day():
    assert Settings.from_env({"CRONCHAIN_RECONCILE_INTERVAL": "86400"}).reconcile_interval == 86400


@pytest.mark.parametrize(
    "variable", ["CRONCHAIN_WATCHDOG_INTERVAL", "CRONCHAIN_RECONCILE_INTERVAL"]
)
@pytest.mark.parametrize(
    "value, seconds", [("1", 1.0), ("2.5", 2.5), (" 30 ", 30.0), ("240", 240.0)]
)
def test_an_interval_in_range_is_taken(variable: str, value: str, seconds: float):
    settings = Settings.from_env({variable: value})
    read = {
        "CRONCHAIN_WATCHDOG_INTERVAL": settings.watchdog_interval,
        "CRONCHAIN_RECONCILE_INTERVAL": settings.reconcile_interval,
    }
    assert read[variable] == seconds


COUNTS = [
    ("CRONCHAIN_TICK_BATCH", "tick_batch", 1000, "ticks"),
    ("CRONCHAIN_WORK_CONCURRENCY", "work_concurrency", 10_000, "threads"),
]


@pytest.mark.parametrize("variable, attribute, high, unit", COUNTS)
@pytest.mark.parametrize("value", ["0", "-3", "abc", "1.5", "nan", "inf", "+1e3", "9" * 5000])
def test_a_count_is_a_whole_number_in_range(
    variable: str, attribute: str, high: int, unit: str, value: str
):
    err = refused(variable, value)
    assert f"a whole number of {unit} from 1 to {high}" in str(err)


@pytest.mark.parametrize("variable, attribute, high, unit", COUNTS)
def test_a_count_at_its_bounds_is_taken(variable: str, attribute: str, high: int, unit: str):
    for value in (1, high):
        assert getattr(Settings.from_env({variable: str(value)}), attribute) == value
    refused(variable, str(high + 1))


def test_the_work_path_has_a_queue_and_threads_of_its_own():
    settings = Settings.from_env({"CRONCHAIN_WORK_CONCURRENCY": "250"})
    assert settings.work_queue == "cronchain.work" != settings.queue
    assert settings.work_concurrency == 250


@pytest.mark.parametrize("variable", ["CRONCHAIN_QUEUE", "CRONCHAIN_WORK_QUEUE"])
@pytest.mark.parametrize("value", ["two words", "a,b", "x" * 201])
def test_a_queue_is_one_name(variable: str, value: str):
    assert "a queue name" in str(refused(variable, value))


def test_the_two_paths_do_not_share_a_queue():
    with pytest.raises(ConfigError, match="CRONCHAIN_WORK_QUEUE: must differ from"):
        Settings.from_env({"CRONCHAIN_QUEUE": "jobs", "CRONCHAIN_WORK_QUEUE": "jobs"})


@pytest.mark.parametrize("value", ["nonsense", "localhost:5432/db", "://x"])
def test_a_database_url_needs_a_scheme(value: str):
    assert "a database URL" in str(refused("CRONCHAIN_DATABASE_URL", value))


def test_a_database_url_with_a_password_is_not_echoed():
    err = refused("CRONCHAIN_DATABASE_URL", "user:secret@host/db")
    assert "secret" not in str(err)


@pytest.mark.parametrize("value", ["nonsense", "foo://host", "http://host"])
def test_a_broker_url_names_a_kombu_transport(value: str):
    assert "a broker URL" in str(refused("CRONCHAIN_BROKER_URL", value))


@pytest.mark.parametrize("value", ["redis://h:6379/0", "rediss://h/0", "amqp://h//"])
def test_a_broker_url_kombu_knows_is_taken(value: str):
    assert Settings.from_env({"CRONCHAIN_BROKER_URL": value}).broker_url == value


def test_imports_are_module_names():
    settings = Settings.from_env({"CRONCHAIN_IMPORTS": "etl.tasks, models ,"})
    assert settings.imports == ("etl.tasks", "models")
    assert "module names" in str(refused("CRONCHAIN_IMPORTS", "etl-tasks"))


def test_http_allow_is_addresses_or_networks():
    allowed = "10.0.0.0/8, 127.0.0.1"
    assert Settings.from_env({"CRONCHAIN_HTTP_ALLOW": allowed}).http_allow == allowed
    with pytest.raises(ConfigError, match="CRONCHAIN_HTTP_ALLOW: 'intranet' is not an address"):
        Settings.from_env({"CRONCHAIN_HTTP_ALLOW": "10.0.0.0/8,intranet"})


def test_a_config_error_is_bad_input():
    """Celery tasks do not retry it, and the CLI exits 2 for it, as for any SpecError."""
    assert issubclass(ConfigError, SpecError)
