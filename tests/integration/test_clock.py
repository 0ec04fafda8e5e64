"""Every process reads the database's clock (``scheduler.storage.clock``): measured
against the real server, kept when the server cannot be reached, the machine's own on
SQLite. Skewed machines are the fault suite's (tests/faults/test_skew.py)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy

from cronchain.scheduler.storage.clock import DatabaseClock, clock_for, utcnow
from tests.support.services import free_port

pytestmark = pytest.mark.postgres


def test_the_offset_to_the_servers_clock_is_measured(pg_url: str):
    clock = clock_for(pg_url)
    assert isinstance(clock, DatabaseClock)
    before = clock()
    with sqlalchemy.create_engine(pg_url).connect() as conn:
        theirs = conn.execute(sqlalchemy.text("SELECT clock_timestamp()")).scalar_one()
    after = clock()
    # the server runs on this machine: the same clock, read one round trip apart
    assert abs(clock.offset) < timedelta(milliseconds=50)
    assert before - timedelta(milliseconds=50) <= theirs <= after + timedelta(milliseconds=50)
    assert clock_for(pg_url.replace("postgresql+psycopg://", "postgresql://")) is clock


def test_a_server_that_does_not_answer_leaves_the_last_offset():
    clock = DatabaseClock(f"postgresql+psycopg://nobody@127.0.0.1:{free_port()}/none")
    clock.offset = timedelta(seconds=7)
    assert abs(clock() - utcnow() - timedelta(seconds=7)) < timedelta(seconds=1)
    assert clock.offset == timedelta(seconds=7)


def test_sqlite_reads_the_machines_clock(tmp_path: Path):
    assert clock_for(f"sqlite:///{tmp_path}/cronchain.db") is utcnow
