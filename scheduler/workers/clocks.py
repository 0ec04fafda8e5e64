"""Celery's times in the database's clock (``scheduler.storage.clock``).

cronchain computes every ETA and expiry by the database's clock, and Celery compares
them with the clock of the machine that holds the message: a worker 30 s behind would
hold each tick 30 s too long, and one 30 s ahead would drop every watchdog run as
expired. So cronchain's app tells the time by the database's clock (``app.now``, which
Celery's ``expires`` and ``countdown`` are reckoned from, and beat's schedule), and its
workers read each message's ETA and expiry back into their own machine's clock.
"""

from __future__ import annotations

import functools
import os
from datetime import UTC, datetime, timedelta
from typing import Any

import celery
from celery import Celery
from celery.worker.request import Request as CeleryRequest
from sqlalchemy.exc import ArgumentError

from cronchain.scheduler.errors import ConfigError, SpecError
from cronchain.scheduler.settings import Settings
from cronchain.scheduler.storage.clock import DatabaseClock, clock_for


def database_clock() -> DatabaseClock | None:
    """This process's clock of the configured database; None on SQLite (one machine), or
    for a setting that names no database (the engine says why, where it connects)."""
    return _clock_of(os.environ.get("CRONCHAIN_DATABASE_URL"), os.environ.get("CRONCHAIN_HOME"))


@functools.cache
def _clock_of(url: str | None, home: str | None) -> DatabaseClock | None:
    """Read once for each setting of the two variables that name the database."""
    try:
        clock = clock_for(Settings.from_env().database_url)
    except (ConfigError, SpecError, ArgumentError, ValueError):
        return None
    return clock if isinstance(clock, DatabaseClock) else None


def now() -> datetime:
    """The time by the database's clock (``app.now``)."""
    clock = database_clock()
    return clock() if clock is not None else datetime.now(UTC)


def offset() -> timedelta:
    """The database's clock minus this machine's, measured at most ``EVERY`` s ago."""
    clock = database_clock()
    if clock is None:
        return timedelta(0)
    clock()  # measures again when the last measurement is old
    return clock.offset


class Request(CeleryRequest):
    """A cronchain task's message, its ETA and expiry read into this machine's clock.
    Only cronchain's own: a task of a project's on cronchain's app (``CRONCHAIN_IMPORTS``)
    may be sent with times of its producer's machine."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not self.name.startswith("cronchain."):
            return
        if self._eta is not None or self._expires is not None:
            shift = offset()
            if self._eta is not None:
                self._eta -= shift
            if self._expires is not None:
                self._expires -= shift


class Task(celery.Task):
    """cronchain's tasks: their requests read times in the database's clock."""

    Request = "cronchain.scheduler.workers.clocks:Request"


def use_database_clock(app: Celery) -> Celery:
    """``app`` tells the time by the database's clock (Celery's ``expires``, ``countdown``
    and beat's schedule are reckoned from ``app.now``)."""
    app.now = now  # type: ignore[method-assign]
    return app
