"""The named queries of pools (:mod:`scheduler.workflows.pools` says what a pool is and how its
places are handed out): the pool's row, its holders and its waiters."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Row, func, select
from sqlalchemy.dialects import postgresql, sqlite

from cronchain.scheduler.spec.model import DEFAULT_PRIORITY
from cronchain.scheduler.storage.models import invocations, jobs, pools

HOLDING = ("STARTING", "RUNNING")  # a run in these holds a place
WAITING = "WAITING"


def lock_size(conn: Connection, pool: str) -> int:
    """The pool's size, its row locked (0: a pool never made, which holds every run):
    every hand-out of its places is counted under this lock."""
    query = select(pools.c.size).where(pools.c.name == pool).with_for_update()
    size = conn.execute(query).scalar_one_or_none()
    return 0 if size is None else size


def taken(conn: Connection, pool: str) -> int:
    query = (
        select(func.count())
        .select_from(invocations)
        .where(invocations.c.pool == pool, invocations.c.status.in_(HOLDING))
    )
    return conn.execute(query).scalar_one()


def lock_waiters(conn: Connection, pool: str, reason: str) -> list[Row[Any]]:
    """The runs waiting (``reason``) for a place in ``pool``, with their jobs' priorities,
    locked unless another transaction holds them (it is ending them: an abort). Taken
    without their jobs' locks, so that a fill never waits on another job's step."""
    priority = func.coalesce(jobs.c.spec["priority"].as_integer(), DEFAULT_PRIORITY)
    query = (
        select(
            invocations.c.id,
            priority.label("priority"),
            invocations.c.created_at,
            invocations.c.filed_at,
            invocations.c.log,
            invocations.c.checks,
        )
        .select_from(invocations.join(jobs, jobs.c.id == invocations.c.job_id))
        .where(
            invocations.c.pool == pool,
            invocations.c.status == WAITING,
            invocations.c.reason == reason,
        )
        .with_for_update(of=invocations, skip_locked=True)
    )
    return list(conn.execute(query))


def holders(conn: Connection, pool: str, limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` runs holding places in ``pool``, for ``explain``."""
    query = (
        select(invocations.c.id, jobs.c.project, jobs.c.name, invocations.c.status)
        .select_from(invocations.join(jobs, jobs.c.id == invocations.c.job_id))
        .where(invocations.c.pool == pool, invocations.c.status.in_(HOLDING))
        .order_by(invocations.c.id)
        .limit(limit)
    )
    return [
        {"invocation": r.id, "job": f"{r.project}/{r.name}", "status": r.status}
        for r in conn.execute(query)
    ]


def with_waiters(conn: Connection, reason: str) -> list[str]:
    """Every pool that has a run waiting (``reason``) for a place."""
    query = (
        select(invocations.c.pool)
        .where(invocations.c.status == WAITING, invocations.c.reason == reason)
        .distinct()
    )
    return sorted(name for name in conn.execute(query).scalars() if name is not None)


def set_size(conn: Connection, name: str, size: int, now: datetime) -> None:
    """Make the pool, or change its size."""
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    statement = dialect.insert(pools).values(name=name, size=size, updated_at=now)
    conn.execute(
        statement.on_conflict_do_update(
            index_elements=[pools.c.name], set_={"size": size, "updated_at": now}
        )
    )


def listing(conn: Connection) -> list[dict[str, Any]]:
    """Every pool: its size, the places taken and the runs waiting."""
    counts: dict[str, dict[str, int]] = {}
    query = (
        select(invocations.c.pool, invocations.c.status, func.count())
        .where(invocations.c.pool.isnot(None), invocations.c.status.in_((*HOLDING, WAITING)))
        .group_by(invocations.c.pool, invocations.c.status)
    )
    for name, status, n in conn.execute(query):
        slot = "waiting" if status == WAITING else "taken"
        counts.setdefault(name, {"taken": 0, "waiting": 0})[slot] += n
    rows = conn.execute(select(pools).order_by(pools.c.name))
    return [
        {"name": r.name, "size": r.size, **counts.get(r.name, {"taken": 0, "waiting": 0})}
        for r in rows
    ]


def existing(conn: Connection, names: Iterable[str]) -> set[str]:
    wanted = sorted(names)
    if not wanted:
        return set()
    return set(conn.execute(select(pools.c.name).where(pools.c.name.in_(wanted))).scalars())


def held_by(conn: Connection, job_ids: list[int]) -> list[str]:
    """The pools in which runs of ``job_ids`` hold places."""
    if not job_ids:
        return []
    query = (
        select(invocations.c.pool)
        .where(
            invocations.c.job_id.in_(job_ids),
            invocations.c.pool.isnot(None),
            invocations.c.status.in_(HOLDING),
        )
        .distinct()
    )
    return sorted(conn.execute(query).scalars())
