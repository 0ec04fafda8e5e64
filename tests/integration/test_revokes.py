"""Revokes are durable: one that cannot be sent is sent later by the watchdog, until it
is sent or the task reports that it has ended."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy
from sqlalchemy import select

from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.invokers import SUCCEEDED, default_invokers
from cronchain.scheduler.maintenance import watchdog
from cronchain.scheduler.storage.models import revokes
from tests.support.deliver import claim_tasks, deliver
from tests.support.engine import Clock, RecordingPort
from tests.support.jobs import apply, spec
from tests.support.rows import rows

pytestmark = pytest.mark.postgres


class FlakyControl(RecordingPort):
    """A broker whose broadcast fails ``failures`` times before it works again."""

    failures = 1

    def revoke(self, task_id: str) -> None:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("broker unavailable")
        super().revoke(task_id)


def pending(engine: Engine) -> list[str]:
    with engine.db.connect() as conn:
        return list(conn.execute(select(revokes.c.task_id)).scalars())


def timed_out_task(db: sqlalchemy.Engine, clock: Clock) -> tuple[Engine, FlakyControl, int]:
    port = FlakyControl()
    engine = Engine(db, port, default_invokers(), grace=timedelta(seconds=15), clock=clock)
    apply(engine, spec(kind="celery", options={"task": "etl.run"}, timeout="30s"))
    inv = Scheduler(engine).trigger("p/a")["invocation"]
    deliver(engine, port)
    claim_tasks(engine, port)
    clock.advance(31)
    assert watchdog.run_once(engine).expired == 1  # its revoke fails to go out
    return engine, port, inv


def test_a_revoke_that_fails_once_is_delivered_later(db: sqlalchemy.Engine, clock: Clock):
    engine, port, inv = timed_out_task(db, clock)
    assert rows(engine)[0]["reason"] == "timeout"
    assert port.revoked == [] and pending(engine) == [f"cronchain-{inv}-1"]
    assert watchdog.run_once(engine).revokes == 0  # not due yet: a grace to go out
    clock.advance(16)
    assert watchdog.run_once(engine).revokes == 1
    assert port.revoked == [f"cronchain-{inv}-1"] and pending(engine) == []
    clock.advance(60)
    assert watchdog.run_once(engine).repairs == 0  # sent once is enough


def test_a_task_that_reports_its_end_needs_no_revoke(db: sqlalchemy.Engine, clock: Clock):
    engine, port, inv = timed_out_task(db, clock)
    assert engine.runs.finish_invocation(inv, SUCCEEDED, attempt=1) is False  # too late to count
    assert pending(engine) == []
    clock.advance(60)
    assert watchdog.run_once(engine).revokes == 0 and port.revoked == []
