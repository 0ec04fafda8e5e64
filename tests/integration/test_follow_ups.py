"""Follow-up steps: an event the engine feeds its machine because of its own writes (a
row that already existed, a run begun in the tick's transaction). Their actions are
carried out like any step's: a follow-up that asks for a tick must send one."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import insert

from scheduler.engine import Engine
from scheduler.models import invocations
from statemachine import Trigger
from tests.conftest import Clock, RecordingPort
from tests.integration.test_engine import apply, job, make, rows

pytestmark = pytest.mark.postgres


def test_an_abandoned_trigger_of_a_fixed_delay_job_sends_its_next_tick(
    engine: Engine, port: RecordingPort, clock: Clock
):
    """The trigger's row exists already (a repeated trigger), so nothing starts: the
    fixed delay counts from now, and its tick must go out, or the chain stalls until
    the watchdog notices."""
    apply(engine, make("with 10m interval"))
    row = job(engine)
    with engine.transaction() as conn:
        conn.execute(
            insert(invocations).values(
                job_id=row.id,
                trigger_id="t1",
                revision=row.revision,
                status="SUCCEEDED",
                attempt=1,
                created_at=clock.now,
                started_at=clock.now,
                finished_at=clock.now,
                backfill=False,
            )
        )
    port.clear()
    engine.command("p/a", Trigger("t1"))
    after = job(engine).snapshot
    assert after.active == 0 and after.tick_nonce is not None
    assert port.ticks == [(row.id, after.tick_nonce, clock.now + timedelta(minutes=5))]
    assert len(rows(engine)) == 1
