from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from scheduler.engine import Engine
from scheduler.invokers import default_invokers
from scheduler.storage.db import make_engine
from tests.conftest import Clock, RecordingPort


@pytest.fixture
def pg_engine(pg_url: str, port: RecordingPort, clock: Clock) -> Iterator[Engine]:
    """The engine on PostgreSQL alone, for what only PostgreSQL has (SQLite's history
    is not partitioned)."""
    db = make_engine(pg_url)
    yield Engine(db, port, default_invokers(), grace=timedelta(seconds=15), clock=clock)
    db.dispose()
