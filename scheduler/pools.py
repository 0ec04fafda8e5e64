"""Pools: named numbers of places that jobs share (``pool: gpu``, ``pools: {gpu: 4}``).

A run of a pooled job takes a place while it is STARTING or RUNNING, retries' backoffs
included. It never starts by itself: it is written WAITING with reason ``pool`` and the
pool is filled (``fill``), in the same transaction. ``fill`` locks the pool's row, counts
the places taken and hands the free ones to the waiters, best ranked first
(``statemachine.pool``): so every start of a pool, on any worker of any machine, is
counted under that lock, and the pool never holds more runs than its size. A run that
ends fills its pool again in its own transaction, so a waiter starts at once.

A waiter is the run its job's machine started (QUEUED), like a run waiting for its
upstreams, and takes its place in the order of the pool, not of its job. The waiters'
rows are taken with SKIP LOCKED and without their jobs' locks, so a fill never waits on
another job's transaction: the job whose run ends holds its own job, then the pool.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, func, select, update
from sqlalchemy.dialects import postgresql, sqlite

from cronchain.scheduler import debuglog
from cronchain.scheduler.effects import Fill, Message, SendStart
from cronchain.scheduler.invokers.call import DEFAULT_PRIORITY
from cronchain.scheduler.storage.models import invocations, jobs, pools
from cronchain.scheduler.timing.iso import iso
from cronchain.statemachine import InvocationStatus
from cronchain.statemachine.pool import Waiter, choose

if TYPE_CHECKING:
    from cronchain.scheduler.engine import Engine

REASON = "pool"
HOLDING = ("STARTING", "RUNNING")
S = InvocationStatus
_SHOWN_HOLDERS = 10  # the runs ``explain`` names as holding a full pool


def waiting_columns(
    pool: str, log: str | None, now: datetime, checks: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The columns of a run about to start that must first get a place in ``pool``
    (``checks``: what was checked of it before, kept); since when it waits is its rank's
    age (``statemachine.pool``)."""
    return dict(
        status=S.WAITING.value,
        reason=REASON,
        pool=pool,
        deadline=None,
        checks={**(checks or {}), REASON: {"name": pool, "since": iso(now)}},
        log=debuglog.append(log, now, f"waits for a place in pool {pool}"),
    )


def fill(engine: Engine, conn: Connection, pool: str, now: datetime) -> list[Message]:
    """Hand ``pool``'s free places to its waiters, under the pool's lock, in a
    transaction that holds no job: ``Fill`` messages bring each run that waits for a
    place or ends one here, once its own transaction has committed (``Engine.send``),
    so that no lock is ever taken after a pool's. A waiter left waiting records, the
    first time, how full the pool was and who held it (for ``explain``)."""
    size = conn.execute(
        select(pools.c.size).where(pools.c.name == pool).with_for_update()
    ).scalar_one_or_none()
    size = 0 if size is None else size  # a pool that was never made holds every run
    taken = conn.execute(
        select(func.count())
        .select_from(invocations)
        .where(invocations.c.pool == pool, invocations.c.status.in_(HOLDING))
    ).scalar_one()
    rows: dict[int, Any] = {}
    waiting = _waiters(conn, pool, rows)
    chosen = choose(waiting, size - taken, now)
    for waiter in chosen:
        row = rows[waiter.id]
        checks = row.checks or {}
        place = checks.get(REASON, {}) | {"released_at": iso(now)}
        _update(
            conn,
            waiter.id,
            {
                "status": S.STARTING.value,
                "reason": None,
                "deadline": now + engine.grace,
                "checks": checks | {REASON: place},
                "log": debuglog.append(row.log, now, f"a place in pool {pool}: starting"),
            },
        )
    left = [w.id for w in waiting if w not in chosen and "held_by" not in _place(rows[w.id])]
    if left:
        full = {"size": size, "taken": taken + len(chosen), "held_by": _holders(conn, pool)}
        for inv_id in left:
            checks = rows[inv_id].checks or {}
            _update(conn, inv_id, {"checks": checks | {REASON: _place(rows[inv_id]) | full}})
    return [SendStart(w.id) for w in chosen]


def _place(row: Any) -> dict[str, Any]:
    return (row.checks or {}).get(REASON, {})


def _waiters(conn: Connection, pool: str, rows: dict[int, Any]) -> list[Waiter]:
    """The runs waiting for ``pool``, locked unless another transaction holds them (it
    is ending them: an abort), with their jobs' priorities; their rows go to ``rows``.
    A waiter waits since it came to the pool (``waiting_columns``)."""
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
            invocations.c.status == S.WAITING.value,
            invocations.c.reason == REASON,
        )
        .with_for_update(of=invocations, skip_locked=True)
    )
    waiters = []
    for row in conn.execute(query):
        rows[row.id] = row
        since = _place(row).get("since")
        came = datetime.fromisoformat(since) if since else row.created_at
        waiters.append(Waiter(row.id, row.priority, came, row.filed_at))
    return waiters


def _holders(conn: Connection, pool: str) -> list[dict[str, Any]]:
    query = (
        select(invocations.c.id, jobs.c.project, jobs.c.name, invocations.c.status)
        .select_from(invocations.join(jobs, jobs.c.id == invocations.c.job_id))
        .where(invocations.c.pool == pool, invocations.c.status.in_(HOLDING))
        .order_by(invocations.c.id)
        .limit(_SHOWN_HOLDERS)
    )
    return [
        {"invocation": r.id, "job": f"{r.project}/{r.name}", "status": r.status}
        for r in conn.execute(query)
    ]


def fill_waiting(engine: Engine, now: datetime) -> list[Message]:
    """The watchdog's: fill every pool that has waiters, each in its own transaction.
    A place freed without an end (a job deleted with its running run, a size raised by
    hand in the database) is handed out here."""
    with engine.db.connect() as conn:
        names = conn.execute(
            select(invocations.c.pool)
            .where(invocations.c.status == S.WAITING.value, invocations.c.reason == REASON)
            .distinct()
        ).scalars()
        names = sorted(n for n in names if n is not None)
    messages: list[Message] = []
    for name in names:
        with engine.transaction() as conn:
            messages += fill(engine, conn, name, engine.clock())
    return messages


# --- sizes ---------------------------------------------------------------------------


def set_sizes(engine: Engine, conn: Connection, sizes: Mapping[str, int], now: datetime):
    """Make or resize pools, then fill them: a pool made larger starts its waiters in
    the same transaction. Returns what to send once it commits."""
    messages: list[Message] = []
    for name, size in sorted(sizes.items()):
        values = {"name": name, "size": size, "updated_at": now}
        dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
        statement = dialect.insert(pools).values(values)
        conn.execute(
            statement.on_conflict_do_update(
                index_elements=[pools.c.name], set_={"size": size, "updated_at": now}
            )
        )
        messages += fill(engine, conn, name, now)
    return messages


def listing(conn: Connection) -> list[dict[str, Any]]:
    """Every pool: its size, the places taken and the runs waiting."""
    counts: dict[str, dict[str, int]] = {}
    query = (
        select(invocations.c.pool, invocations.c.status, func.count())
        .where(invocations.c.pool.isnot(None), invocations.c.status.in_((*HOLDING, "WAITING")))
        .group_by(invocations.c.pool, invocations.c.status)
    )
    for name, status, n in conn.execute(query):
        slot = "waiting" if status == "WAITING" else "taken"
        counts.setdefault(name, {"taken": 0, "waiting": 0})[slot] += n
    rows = conn.execute(select(pools).order_by(pools.c.name))
    return [
        {"name": r.name, "size": r.size, **counts.get(r.name, {"taken": 0, "waiting": 0})}
        for r in rows
    ]


def existing(conn: Connection, names: set[str]) -> set[str]:
    if not names:
        return set()
    query = select(pools.c.name).where(pools.c.name.in_(sorted(names)))
    return set(conn.execute(query).scalars())


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


def begin(
    conn: Connection,
    pool: str | None,
    inv_id: int,
    columns: dict[str, Any],
    log: str | None,
    now: datetime,
    grace: timedelta,
) -> list[Message]:
    """Start a run that may start (its row is locked): at once, or, in ``pool``, as a
    waiter for its place. ``columns`` are what else to write of it (what was checked,
    its log)."""
    if pool is None:
        values = {**columns, "status": S.STARTING.value, "reason": None}
        _update(conn, inv_id, values | {"deadline": now + grace})
        return [SendStart(inv_id)]
    text = columns.pop("log", log)
    _update(conn, inv_id, {**columns, **waiting_columns(pool, text, now, columns.get("checks"))})
    return [Fill(pool)]


def freed(pool: str | None, was: str) -> list[Message]:
    """A run of ``pool`` that was ``was`` has ended: if it held a place, the pool's
    waiters may take it."""
    return [Fill(pool)] if pool is not None and was in HOLDING else []


def _update(conn: Connection, inv_id: int, values: dict[str, Any]) -> None:
    conn.execute(update(invocations).where(invocations.c.id == inv_id).values(**values))
