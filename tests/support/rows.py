"""Reading back what the engine wrote: runs, alerts and jobs, as plain dicts."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import select

from cronchain.scheduler.engine import Engine
from cronchain.scheduler.storage import job_store
from cronchain.scheduler.storage.db import make_engine
from cronchain.scheduler.storage.models import alerts, invocations, jobs
from cronchain.scheduler.storage.rows import JobRow
from tests.support.wait import wait_until


def job(engine: Engine, ref: str = "p/a") -> JobRow:
    """The job ``ref`` (``project/name``), as the engine locks and reads it."""
    with engine.db.connect() as conn:
        row = job_store.lock_job(conn, job_store.resolve_job(conn, ref))
        assert row is not None
        return row


def rows(engine: Engine, name: str | None = None, project: str = "p") -> list[dict[str, Any]]:
    """The runs (invocations), oldest first: every job's, or only ``project/name``'s."""
    query = select(invocations).order_by(invocations.c.id)
    if name is not None:
        query = query.where(invocations.c.job_id == job(engine, f"{project}/{name}").id)
    with engine.db.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(query)]


def alert_rows(engine: Engine) -> list[dict[str, Any]]:
    """The alerts, oldest first."""
    with engine.db.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(select(alerts).order_by(alerts.c.id))]


def described(engine: Engine, project: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """A project's jobs and runs, without ids and nonces."""
    with engine.db.connect() as conn:
        query = select(jobs.c.id, jobs.c.name).where(jobs.c.project == project)
        names = {job_id: name for job_id, name in conn.execute(query)}
        job_rows = conn.execute(select(jobs).where(jobs.c.project == project).order_by(jobs.c.name))
        run_rows = conn.execute(
            select(invocations).where(invocations.c.job_id.in_(names)).order_by(invocations.c.id)
        )
        skip = {"id", "project", "revision", "tick_nonce", "invocation_id", "spec", "job_id"}
        skip.add("trigger_id")  # "after:ID" names the source's run
        return (
            [tuple(v for k, v in r._mapping.items() if k not in skip) for r in job_rows],
            sorted(
                (
                    (names[r.job_id], *(v for k, v in r._mapping.items() if k not in skip))
                    for r in run_rows
                ),
                key=repr,
            ),
        )


def slot_rows(pg_url: str, slot: datetime) -> dict[str, dict[str, Any]]:
    """Each job's run of ``slot``, by job name, in the database at ``pg_url``."""
    db = make_engine(pg_url)
    query = (
        select(jobs.c.name, invocations)
        .select_from(invocations.join(jobs, jobs.c.id == invocations.c.job_id))
        .where(invocations.c.slot == slot)
    )
    with db.connect() as conn:
        found = {r.name: dict(r._mapping) for r in conn.execute(query)}
    db.dispose()
    return found


def first_slot(pg_url: str) -> datetime:
    """The earliest slot of any run in the database at ``pg_url``, once there is one."""
    db = make_engine(pg_url)
    query = select(invocations.c.slot).order_by(invocations.c.slot).limit(1)

    def found() -> datetime | None:
        with db.connect() as conn:
            return conn.execute(query).scalar()

    slot = wait_until(found, 60, "a first slot")
    db.dispose()
    return slot


def parked(row: Mapping[str, Any]) -> bool:
    """Whether a row of the jobs table waits on a parked tick (``Stepper.settle_tick``):
    not sent, its deadline before its slot."""
    tick_at, watchdog_at = row["tick_at"], row["watchdog_at"]
    return tick_at is not None and watchdog_at is not None and watchdog_at < tick_at
