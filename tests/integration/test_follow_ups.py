"""Follow-up steps: an event the engine feeds its machine because of its own writes (a
row that already existed, a run begun in the tick's transaction). Their actions are
carried out like any step's. Each row of the table drives one event and its follow-up
through the engine on a fixed clock and lists the messages sent."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import insert, update

from cronchain.scheduler.engine import Engine
from cronchain.scheduler.storage import job_store, run_store
from cronchain.scheduler.storage.models import invocations
from cronchain.statemachine import InvocationFinished, Trigger
from tests.support.engine import Clock, RecordingPort
from tests.support.jobs import apply, spec
from tests.support.rows import job, rows

pytestmark = pytest.mark.postgres


def existing_row(engine: Engine, clock: Clock, **key: Any) -> None:
    """A row for that slot or trigger id, as a repeated step would find it."""
    with engine.transaction() as conn:
        conn.execute(
            insert(invocations).values(
                job_id=job(engine, "p/a").id,
                revision=job(engine, "p/a").revision,
                status="SUCCEEDED",
                attempt=1,
                created_at=clock.now,
                started_at=clock.now,
                finished_at=clock.now,
                backfill=False,
                **key,
            )
        )


def tick(engine: Engine, port: RecordingPort, clock: Clock) -> None:
    [(job_id, nonce, eta)] = port.ticks
    port.clear()
    clock.now = eta
    engine.tick(job_id, nonce, start_here=True)


def trigger(trigger_id: str) -> Callable[[Engine, RecordingPort, Clock], None]:
    def feed(engine: Engine, port: RecordingPort, clock: Clock) -> None:
        port.clear()
        engine.command("p/a", Trigger(trigger_id))

    return feed


def finish_with_a_lost_waiting_row(engine: Engine, port: RecordingPort, clock: Clock) -> None:
    """The machine counts a waiting run whose row is gone: the run that finishes frees a
    place for nobody (StartBuffered, then Abandon)."""
    [first, waiting] = rows(engine)
    with engine.transaction() as conn:
        conn.execute(
            update(invocations)
            .where(invocations.c.id == waiting["id"])
            .values(status="ABORTED", finished_at=clock.now)
        )
    port.clear()
    with engine.transaction() as conn:
        row = job_store.lock_job(conn, first["job_id"])
        assert row is not None
        run_store.update_invocation(conn, first["id"], status="FAILED", finished_at=clock.now)
        fed = engine.feed(conn, row, InvocationFinished(first["id"], clock.now), clock.now)
    engine.send(fed.messages)


def busy_with_one_waiting(engine: Engine, port: RecordingPort, clock: Clock) -> None:
    engine.command("p/a", Trigger("first"))
    engine.command("p/a", Trigger("second"))  # buffered


@dataclass(frozen=True)
class Case:
    name: str
    schedule: str
    event: Callable[[Engine, RecordingPort, Clock], None]
    controls: dict[str, Any]
    setup: Callable[[Engine, RecordingPort, Clock], None] | None = None
    taken: dict[str, Any] | None = None  # a row that exists already, by its key
    ticks: int = 0  # tick messages sent, at the job's current nonce
    runs: int = 0  # attempts sent to the work path
    starts: int = 0  # start messages (a run begun by a command, not by its tick)
    active: int = 0


CASES = [
    Case("tick -> started", "every 10s", tick, {}, ticks=1, runs=1, active=1),
    Case("tick -> abandon", "every 10s", tick, {}, taken={"slot": "tick"}, ticks=1),
    Case("trigger -> started", "triggered", trigger("t"), {}, starts=1, active=1),
    Case(
        "trigger -> abandon, fixed delay re-arms",
        "with 4m interval",
        trigger("t"),
        {},
        taken={"trigger_id": "t"},
        ticks=1,
    ),
    Case(
        "trigger while busy -> buffered row exists -> unbuffer",
        "triggered",
        trigger("again"),
        {"overlap": "buffer_all"},
        setup=lambda e, p, c: e.command("p/a", Trigger("first")),
        taken={"trigger_id": "again"},
        active=1,
    ),
    Case(
        "finish -> start buffered -> no row -> abandon, fixed delay re-arms",
        "with 4m interval",
        finish_with_a_lost_waiting_row,
        {"overlap": "buffer_all"},
        setup=busy_with_one_waiting,
        ticks=1,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_follow_up_step_sends_what_it_asks_for(
    engine: Engine, port: RecordingPort, clock: Clock, case: Case
):
    apply(engine, spec(schedule=case.schedule, **case.controls))
    if case.setup is not None:
        case.setup(engine, port, clock)
    if case.taken is not None:
        key = dict(case.taken)
        if key.get("slot") == "tick":
            key["slot"] = port.ticks[0][2]
        existing_row(engine, clock, **key)
    case.event(engine, port, clock)
    after = job(engine, "p/a").snapshot
    assert after.active == case.active
    sent_ticks = [(j, n) for j, n, _ in port.ticks]
    assert sent_ticks == [(job(engine, "p/a").id, after.tick_nonce)] * case.ticks
    assert len(port.runs) == case.runs
    assert len(port.starts) == case.starts


def test_an_abandoned_trigger_of_a_fixed_delay_job_sends_its_next_tick(
    engine: Engine, port: RecordingPort, clock: Clock
):
    """The trigger's row exists already (a repeated trigger), so nothing starts: the
    fixed delay counts from now, and its tick must go out, or the chain stalls until
    the watchdog notices."""
    apply(engine, spec(schedule="with 4m interval"))
    row = job(engine, "p/a")
    existing_row(engine, clock, trigger_id="t1")
    port.clear()
    engine.command("p/a", Trigger("t1"))
    after = job(engine, "p/a").snapshot
    assert after.active == 0 and after.tick_nonce is not None
    assert port.ticks == [(row.id, after.tick_nonce, clock.now + timedelta(minutes=4))]
    assert len(rows(engine)) == 1
