"""A worker reads a cronchain message's ETA and expiry into its own machine's clock.

The message is celery's test double (``celery.contrib.testing.mocks.TaskMessage``); the
worker's offset from the database's clock is given, as ``DatabaseClock`` measures it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from celery import Celery
from celery.contrib.testing.mocks import TaskMessage
from kombu.utils.imports import symbol_by_name

from cronchain.scheduler.workers import clocks

ETA = datetime(2026, 11, 28, 6, 0, tzinfo=UTC)
EXPIRES = ETA + timedelta(seconds=20)
AHEAD = timedelta(seconds=30)  # the database's clock minus this machine's


@pytest.fixture
def app(monkeypatch: pytest.MonkeyPatch) -> Celery:
    monkeypatch.setattr(clocks, "offset", lambda: AHEAD)
    app = Celery(set_as_current=False)
    for name in ("cronchain.request_clock_test", "project.report"):
        app.task(name=name, base=clocks.Task)(nothing)
    return app


def nothing() -> None:
    pass


def request(app: Celery, name: str, **times: datetime) -> clocks.Request:
    options = {key: value.isoformat() for key, value in times.items()}
    message = TaskMessage(name, **options)
    return clocks.Request(message, app=app, task=app.tasks[name])


def test_a_cronchain_message_is_due_when_the_database_says(app: Celery):
    """The database's clock reads 06:00 when this machine's reads 05:59:30: that is
    when the tick is due here."""
    req = request(app, "cronchain.request_clock_test", eta=ETA, expires=EXPIRES)
    assert req.eta == ETA - AHEAD
    assert req.expires == EXPIRES - AHEAD


def test_a_message_with_no_times_is_left_alone(app: Celery):
    req = request(app, "cronchain.request_clock_test")
    assert req.eta is None and req.expires is None


def test_a_project_task_keeps_its_producers_times(app: Celery):
    """A project's task on cronchain's app may be sent by a producer that knows nothing
    of the database's clock: its times are its machine's, and stay so."""
    req = request(app, "project.report", eta=ETA, expires=EXPIRES)
    assert req.eta == ETA
    assert req.expires == EXPIRES


def test_cronchains_own_tasks_are_read_so():
    from cronchain.tasks import app as cronchain_app

    task = cronchain_app.tasks["cronchain.tick_later"]
    assert isinstance(task, clocks.Task)
    assert symbol_by_name(task.Request) is clocks.Request
