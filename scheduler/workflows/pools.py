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

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from cronchain.scheduler import debuglog
from cronchain.scheduler.core.effects import InProcess, Message, SendStart, Stepped
from cronchain.scheduler.core.host import Admitting, Ended, Held
from cronchain.scheduler.storage import pool_store, run_store
from cronchain.scheduler.storage.pool_store import HOLDING
from cronchain.scheduler.timing.iso import iso
from cronchain.statemachine import InvocationStatus, Reason
from cronchain.statemachine.pool import Waiter, choose

if TYPE_CHECKING:
    from cronchain.scheduler.core.host import Host
    from cronchain.scheduler.storage.rows import InvocationRow, JobRow

log = logging.getLogger("cronchain.engine")

REASON = Reason.POOL  # the hold's name: a run WAITING for a place, and its checks
S = InvocationStatus
_SHOWN_HOLDERS = 10  # the runs ``explain`` names as holding a full pool


@dataclass(frozen=True)
class Fill(InProcess):
    """Hand a pool's free places to its waiters: a run came to wait for one, or ended
    holding one. Carried out in this process: the pool is filled in a transaction of
    its own once the one that asked has committed (``fill_pools``)."""

    pool: str


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


def fill(conn: Connection, pool: str, now: datetime, grace: timedelta) -> list[Message]:
    """Hand ``pool``'s free places to its waiters, under the pool's lock, in a
    transaction that holds no job: ``Fill`` messages bring each run that waits for a
    place or ends one here, once its own transaction has committed (``Core.send``),
    so that no lock is ever taken after a pool's. A waiter left waiting records, the
    first time, how full the pool was and who held it (for ``explain``). A chosen run
    starts within ``grace``."""
    size = pool_store.lock_size(conn, pool)
    taken = pool_store.taken(conn, pool)
    rows = {row.id: row for row in pool_store.lock_waiters(conn, pool, REASON)}
    waiting = [Waiter(row.id, row.priority, _came(row), row.filed_at) for row in rows.values()]
    chosen = choose(waiting, size - taken, now)
    for waiter in chosen:
        row = rows[waiter.id]
        checks = row.checks or {}
        place = checks.get(REASON, {}) | {"released_at": iso(now)}
        run_store.update_invocation(
            conn,
            waiter.id,
            status=S.STARTING.value,
            reason=None,
            deadline=now + grace,
            checks=checks | {REASON: place},
            log=debuglog.append(row.log, now, f"a place in pool {pool}: starting"),
        )
    left = [w.id for w in waiting if w not in chosen and "held_by" not in _place(rows[w.id])]
    if left:
        held_by = pool_store.holders(conn, pool, _SHOWN_HOLDERS)
        full = {"size": size, "taken": taken + len(chosen), "held_by": held_by}
        for inv_id in left:
            checks = rows[inv_id].checks or {}
            run_store.update_invocation(
                conn, inv_id, checks=checks | {REASON: _place(rows[inv_id]) | full}
            )
    return [SendStart(w.id) for w in chosen]


def _place(row: Any) -> dict[str, Any]:
    return (row.checks or {}).get(REASON, {})


def _came(row: Any) -> datetime:
    """A waiter waits since it came to the pool (``waiting_columns``)."""
    since = _place(row).get("since")
    return datetime.fromisoformat(since) if since else row.created_at


def set_sizes(
    conn: Connection, sizes: Mapping[str, int], now: datetime, grace: timedelta
) -> list[Message]:
    """Make or resize pools, then fill them: a pool made larger starts its waiters in
    the same transaction. Returns what to send once it commits."""
    messages: list[Message] = []
    for name, size in sorted(sizes.items()):
        pool_store.set_size(conn, name, size, now)
        messages += fill(conn, name, now, grace)
    return messages


class PoolHold:
    """The admission chain's last hold: a run of a pooled job waits for a place."""

    name = REASON

    def admit(self, conn: Connection, run: Admitting, now: datetime) -> Held | dict[str, Any]:
        pool = run.job.controls.pool
        if pool is None:
            return {}
        fill: list[Message] = [Fill(pool)]
        return Held(waiting_columns(pool, run.log, now, run.checks), lambda _: fill)

    def lapse(
        self, host: Host, conn: Connection, inv: InvocationRow, job: JobRow, now: datetime
    ) -> Stepped:
        raise AssertionError(f"invocation {inv.id}: a wait for a place has no deadline")


class PlaceFreed:
    """Hears a run's end: if it held a place, the pool's waiters may take it."""

    def reads(self, job: JobRow, was: InvocationRow, status: str) -> bool:
        return False

    def ended(self, host: Host, conn: Connection, end: Ended) -> list[Message]:
        return freed(end.was.pool, end.was.status) if end.final else []


def freed(pool: str | None, was: str) -> list[Message]:
    """A run of ``pool`` that was ``was`` has ended: if it held a place, the pool's
    waiters may take it."""
    return [Fill(pool)] if pool is not None and was in HOLDING else []


def fill_pools(host: Host, messages: list[Fill]) -> None:
    """Fill each pool ``messages`` name in a transaction of its own (``fill``). A failure
    is logged: the watchdog's pass fills every pool with waiters."""
    for name in sorted({m.pool for m in messages}):
        try:
            with host.transaction() as conn:
                started = fill(conn, name, host.clock(), host.grace)
        except Exception:
            log.exception("pool %s could not be filled; the watchdog will", name)
            continue
        host.send(started)


class WaitersFilled:
    """The watchdog's duty for pools: fill every pool that has waiters, each in its own
    transaction, so that a place freed without an end (a job deleted with its running
    run, a size raised by hand in the database) is handed out."""

    def sweep(
        self, host: Host, now: datetime, limit: int, backlog: timedelta
    ) -> tuple[dict[str, int], list[Message]]:
        with host.transaction() as conn:
            names = pool_store.with_waiters(conn, REASON)
        fill_pools(host, [Fill(name) for name in names])  # each sends what it starts
        return {}, []
