from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

import cronchain.scheduler.cli.main
from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.invokers import default_invokers
from cronchain.scheduler.storage.db import make_engine
from tests.support.engine import Clock, RecordingPort


@pytest.fixture
def pg_engine(pg_url: str, port: RecordingPort, clock: Clock) -> Iterator[Engine]:
    """The engine on PostgreSQL alone, for what only PostgreSQL has (SQLite's history
    is not partitioned)."""
    db = make_engine(pg_url)
    yield Engine(db, port, default_invokers(), grace=timedelta(seconds=15), clock=clock)
    db.dispose()


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    """``cronchain ARGV`` on a test's engine: (exit status, stdout, stderr)."""

    def run(engine: Engine, *argv: str) -> tuple[int, str, str]:
        monkeypatch.setattr(
            cronchain.scheduler.cli.main, "_scheduler", lambda args: Scheduler(engine)
        )
        code = cronchain.scheduler.cli.main.main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return run
