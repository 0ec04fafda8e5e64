"""Parked ticks: a tick whose slot is more than the ETA horizon away waits in its job's
row, and the watchdog sends it as its slot comes within the horizon
(``Stepper.settle_tick``, ``watchdog.wake``)."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

import pytest
import sqlalchemy
from sqlalchemy import select, update

from cronchain.scheduler.engine import Engine
from cronchain.scheduler.maintenance import watchdog
from cronchain.scheduler.storage import job_store
from cronchain.scheduler.storage.models import jobs
from tests.support.deliver import deliver_starts, deliver_ticks
from tests.support.engine import Clock, DroppingPort, RecordingPort
from tests.support.jobs import apply, make
from tests.support.rows import job, parked, rows

pytestmark = pytest.mark.postgres


def is_parked(engine: Engine) -> bool:
    row = job(engine)
    return parked({"tick_at": row.snapshot.tick_at, "watchdog_at": row.watchdog_at})


def test_a_far_tick_waits_in_its_row_until_its_slot_comes_within_the_horizon(
    engine: Engine, port: RecordingPort, clock: Clock
):
    """No message waits in the broker for a day's slot, nor hops each horizon: the tick
    is parked in the job's row and the watchdog sends it a horizon before its slot."""
    apply(engine, make("@daily"))
    assert port.ticks == []
    parked = job(engine)
    tick_at, nonce = parked.snapshot.tick_at, parked.snapshot.tick_nonce
    assert tick_at is not None and parked.watchdog_at == tick_at - engine.horizon
    clock.now = parked.watchdog_at - timedelta(seconds=1)
    assert watchdog.run_once(engine) == watchdog.WatchdogReport() and port.ticks == []
    clock.advance(2)
    report = watchdog.run_once(engine)
    assert (report.woken, report.repairs) == (1, 0)
    assert port.ticks == [(parked.id, nonce, tick_at)]  # the nonce it was parked with
    assert job(engine).watchdog_at == tick_at + engine.grace  # as any sent tick's
    assert job(engine).generation == parked.generation + 1
    assert watchdog.run_once(engine) == watchdog.WatchdogReport()  # sent once
    clock.now = tick_at
    deliver_ticks(engine, port)
    assert [r["slot"] for r in rows(engine)] == [tick_at]
    assert port.ticks == [] and job(engine).watchdog_at == job(engine).snapshot.tick_at - (
        engine.horizon
    )  # the next day's slot, parked in turn


def test_a_woken_tick_lost_is_repaired_as_any_lost_tick(db: sqlalchemy.Engine, clock: Clock):
    dropping = Engine(db, DroppingPort(), {}, grace=timedelta(seconds=15), clock=clock)
    apply(dropping, make("@daily"))
    tick_at = job(dropping).snapshot.tick_at
    assert tick_at is not None
    parked_with = job(dropping).snapshot.tick_nonce
    clock.now = tick_at - dropping.horizon + timedelta(seconds=1)
    assert watchdog.run_once(dropping).woken == 1  # committed, then its message lost
    port = RecordingPort()
    engine = Engine(db, port, {}, grace=timedelta(seconds=15), clock=clock)
    clock.now = tick_at + timedelta(seconds=14)  # within the grace of its slot
    assert watchdog.run_once(engine) == watchdog.WatchdogReport()
    clock.advance(2)
    assert watchdog.run_once(engine).ticks == 1  # a repair, with a new nonce
    [(_, nonce, eta)] = port.ticks
    assert eta == clock.now and nonce == job(engine).snapshot.tick_nonce != parked_with


def test_a_parked_tick_woken_past_its_slot_fires_late_and_has_a_repair_s_grace(
    engine: Engine, port: RecordingPort, clock: Clock
):
    """The watchdog was down through a parked slot: its wake sends the tick now, with the
    nonce it was parked with, and the misfire policy judges the late slot (the default
    runs it); like a mass
    repair's, its deadline leaves it the repair grace to arrive."""
    apply(engine, make("@daily"))
    parked = job(engine)
    tick_at = parked.snapshot.tick_at
    assert tick_at is not None
    clock.now = tick_at + timedelta(minutes=10)
    report = watchdog.run_once(engine)
    assert (report.woken, report.repairs) == (1, 0)
    assert port.ticks == [(parked.id, parked.snapshot.tick_nonce, clock.now)]
    assert job(engine).watchdog_at == clock.now + engine.repair_grace
    deliver_ticks(engine, port)
    [run] = rows(engine)
    assert (run["slot"], run["status"]) == (tick_at, "STARTING")  # the default: run it late


def test_a_tick_parked_further_than_the_horizon_is_parked_again(
    db: sqlalchemy.Engine, clock: Clock
):
    """A hop in flight when parking began (or a tick parked under a longer horizon) is
    claimed before its slot is within the horizon: it is parked again, not sent."""
    port = RecordingPort()
    engine = Engine(db, port, {}, grace=timedelta(seconds=15), clock=clock)
    apply(engine, make("@daily"))
    row = job(engine)
    tick_at = row.snapshot.tick_at
    assert tick_at is not None
    hop = clock.now + engine.horizon  # where the old code held its tick
    with engine.db.begin() as conn:
        conn.execute(update(jobs).where(jobs.c.id == row.id).values(watchdog_at=hop))
    clock.now = hop + timedelta(seconds=1)
    assert watchdog.run_once(engine) == watchdog.WatchdogReport(woken=1)  # taken, not sent
    assert port.ticks == [] and job(engine).watchdog_at == tick_at - engine.horizon


def test_the_lapsed_claim_leaves_an_overdue_parked_tick_to_the_wake(
    engine: Engine, port: RecordingPort, clock: Clock
):
    """A parked row's deadline passes before its slot, by design: taken for a lapsed
    tick, it would be repaired with a new nonce at every pass instead of woken once."""
    apply(engine, make("@daily"))
    row = job(engine)
    assert row.watchdog_at is not None
    clock.now = row.watchdog_at + timedelta(minutes=1)
    with engine.db.begin() as conn:
        assert job_store.claim_lapsed_jobs(conn, clock.now, 10) == []
        assert [p.id for p in job_store.claim_parked_jobs(conn, clock.now, 10)] == [row.id]


def test_a_watchdog_run_behind_a_deep_queue_wakes_parked_ticks_and_repairs_nothing(
    db: sqlalchemy.Engine, clock: Clock, caplog: pytest.LogCaptureFixture
):
    """A run that waited longer than an interval leaves its repairs to the next run,
    sent since (the backpressure), but still sends the parked ticks: nothing else does,
    and a backlog that lasts must not starve every job of a long period."""
    dropping = Engine(db, DroppingPort(), {}, grace=timedelta(seconds=15), clock=clock)
    apply(dropping, make(name="lost"), make("@daily", name="far"))  # lost's first tick lost
    far = job(dropping, "far")
    assert far.snapshot.tick_at is not None and far.watchdog_at is not None
    port = RecordingPort()
    engine = Engine(db, port, {}, grace=timedelta(seconds=15), clock=clock)
    clock.now = far.watchdog_at + timedelta(seconds=1)  # lost's is long overdue too
    with caplog.at_level(logging.WARNING, "cronchain.watchdog"):
        report = watchdog.pass_for(engine, interval=30, backlog=timedelta(seconds=31))
        assert (report.woken, report.repairs) == (1, 0)
        assert port.ticks == [(far.id, far.snapshot.tick_nonce, far.snapshot.tick_at)]
        for waited in (45, 38):  # the runs queued behind it: said once for all
            watchdog.pass_for(engine, interval=30, backlog=timedelta(seconds=waited))
        report = watchdog.pass_for(engine, interval=30, backlog=timedelta(seconds=30))
        assert (report.woken, report.ticks) == (0, 1)  # the next run, in time: lost's repair
        watchdog.pass_for(engine, interval=30, backlog=timedelta(seconds=2))
    said = [r.getMessage() for r in caplog.records if r.name == "cronchain.watchdog"]
    assert len(said) == 2, said  # as the backlog began, and as it ended
    assert "waited 31.0 s in the queue" in said[0]  # as the health check will say
    assert "caught up: 3 runs behind it (waits up to 45.0 s)" in said[1]


def test_a_backlog_is_said_again_while_it_lasts_and_anew_after_another_process_ran(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    """The control worker's processes take the watchdog's runs in turns: a process may
    not see the end of a backlog, and must not fold the next one into it."""
    behind, now = watchdog._Behind(), [1000.0]
    monkeypatch.setattr(watchdog.time, "monotonic", lambda: now[0])
    with caplog.at_level(logging.WARNING, "cronchain.watchdog"):
        for _ in range(3):  # a backlog of 20 minutes, a run every 5 s in this process
            for _ in range(120):
                behind.run(timedelta(seconds=40), interval=30)
                now[0] += 5
        now[0] += 61  # the backlog ended; another process ran the runs since
        behind.run(timedelta(seconds=33), interval=30)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 5, said  # begun, 10 and 20 minutes on, ended, begun again
    assert "(1 so far)" in said[0] and "(121 so far)" in said[1] and "(241 so far)" in said[2]
    assert "caught up: 360 runs behind it (waits up to 40.0 s)" in said[3]
    assert "waited 33.0 s" in said[4] and "(1 so far)" in said[4]


def test_a_fixed_delay_job_is_parked_again_after_each_run(
    engine: Engine, port: RecordingPort, clock: Clock
):
    """A fixed delay arms its next slot when a run ends, an interval later: past the
    horizon, that tick is parked as a schedule's is, and woken in its turn."""
    apply(engine, make("with 1h interval"))
    first = job(engine)
    assert port.ticks == [] and is_parked(engine)
    assert first.snapshot.tick_at == clock.now + timedelta(hours=1)
    for _ in range(2):
        clock.now = job(engine).snapshot.tick_at or clock.now
        assert watchdog.run_once(engine).woken == 1
        deliver_ticks(engine, port)
        clock.advance(5)  # the run ends 5 s after its slot: the delay counts from there
        deliver_starts(engine, port)
        assert port.ticks == [] and is_parked(engine)
        assert job(engine).snapshot.tick_at == clock.now + timedelta(hours=1)
    assert [r["status"] for r in rows(engine)] == ["SUCCEEDED", "SUCCEEDED"]


def test_a_wake_skips_a_job_another_transaction_holds(
    pg_engine: Engine, port: RecordingPort, clock: Clock
):
    """A tick, an apply or a trigger holding the job's row: the wake skips it rather
    than wait, and takes it at a later pass from the state that transaction left. (SQLite
    has no row locks: its writers take turns.)"""
    engine = pg_engine
    apply(engine, make("@daily"))
    row = job(engine)
    assert row.watchdog_at is not None
    clock.now = row.watchdog_at + timedelta(seconds=1)
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with engine.db.begin() as conn:
            conn.execute(select(jobs.c.id).where(jobs.c.id == row.id).with_for_update())
            holding.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(10)
        assert watchdog.run_once(engine) == watchdog.WatchdogReport()  # not blocked
    finally:
        release.set()
        holder.join()
    assert watchdog.run_once(engine).woken == 1
    assert port.ticks == [(row.id, row.snapshot.tick_nonce, row.snapshot.tick_at)]


def test_a_woken_tick_is_stale_once_an_apply_moves_the_slot(
    engine: Engine, port: RecordingPort, clock: Clock
):
    """An apply after the wake re-arms the job with a new nonce: the woken tick, still
    on its way, fires nothing, and the new slot is parked in its turn."""
    apply(engine, make("@daily"))
    row = job(engine)
    assert row.watchdog_at is not None
    clock.now = row.watchdog_at + timedelta(seconds=1)
    assert watchdog.run_once(engine).woken == 1
    [(job_id, woken_nonce, _)] = port.ticks
    port.ticks.clear()
    apply(engine, make("0 12 * * *"))
    assert job(engine).snapshot.tick_nonce != woken_nonce
    engine.tick(job_id, woken_nonce)
    assert rows(engine) == [] and is_parked(engine)
