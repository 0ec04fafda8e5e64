"""On PostgreSQL the locks of a batch read their rows through the driver
(``rows.from_values``), not SQLAlchemy's typed rows (``from_row``): both must give the
same jobs and runs, their times in UTC whatever the session's zone."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest
from sqlalchemy import select

from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.storage import job_store, run_store
from cronchain.scheduler.storage.models import invocations, jobs
from cronchain.scheduler.storage.rows import InvocationRow, JobRow
from cronchain.statemachine import JobSnapshot
from tests.support.engine import Clock, RecordingPort
from tests.support.jobs import apply, spec

pytestmark = pytest.mark.postgres


def times(row: object) -> list[datetime]:
    """The times a row holds, its snapshot's too."""
    values = list(vars(row).values())
    values += [
        v for value in values if isinstance(value, JobSnapshot) for v in vars(value).values()
    ]
    return [v for v in values if isinstance(v, datetime)]


@pytest.mark.parametrize("zone", ["UTC", "Asia/Kathmandu", "America/St_Johns"])
def test_the_driver_reads_what_sqlalchemy_reads(
    pg_engine: Engine, port: RecordingPort, clock: Clock, zone: str
):
    paris = dataclasses.replace(spec("hourly", "@hourly"), timezone="Europe/Paris")
    apply(pg_engine, spec("plain", "every 10s"), spec("slow", "every 7s", timeout=30), paris)
    Scheduler(pg_engine).pause("p/slow", reason="a <reason>")
    clock.advance(11)
    pg_engine.tick_many([(j, n) for j, n, _ in port.ticks], start_here=True)
    with pg_engine.db.begin() as conn:
        conn.exec_driver_sql(f"SET LOCAL TimeZone = '{zone}'")
        ids = [r.id for r in conn.execute(select(jobs.c.id))]
        run_ids = [r.id for r in conn.execute(select(invocations.c.id))]
        assert len(ids) == 3 and run_ids
        typed = {r.id: JobRow.from_row(r) for r in conn.execute(select(jobs))}
        read = job_store.lock_jobs(conn, ids)
        assert read == typed
        assert job_store.lock_job(conn, ids[0]) == typed[ids[0]]
        runs = run_store.lock_runs(conn, run_ids)
        both = conn.execute(run_store._LOCKS_RUNS[False], {"b_invs": run_ids})
        assert runs == {
            r.invocations_id: (
                InvocationRow.from_row(r, "invocations_"),
                JobRow.from_row(r, "jobs_"),
            )
            for r in both
        }
    found = [t for job in read.values() for t in times(job)]
    found += [t for inv, job in runs.values() for t in times(inv) + times(job)]
    assert len(found) > 6 and all(t.tzinfo is UTC for t in found)
    assert {j.pause_reason for j in read.values()} == {None, "a <reason>"}
