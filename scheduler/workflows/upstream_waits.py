"""Runs that wait for their upstreams, looked at again (``requires``).

A success releases the runs that wait for it in its own transaction
(``upstream.release_after``). A run that transaction could not see, or could not lock,
is looked at again here: soon after, in this process (``look_again_soon``, for the
``Recheck`` a hold or a check sent), and at each watchdog pass (``WaitingLookedAt``).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from sqlalchemy import Connection

from cronchain.scheduler.core.effects import Message
from cronchain.scheduler.spec.controls import controls_of
from cronchain.scheduler.storage import job_store, upstream_store
from cronchain.scheduler.storage.rows import JobRow
from cronchain.scheduler.workflows import upstream
from cronchain.scheduler.workflows.pools import Fill
from cronchain.scheduler.workflows.triggergraph import target_ref
from cronchain.scheduler.workflows.upstream import WAIT_MOST, Recheck

if TYPE_CHECKING:
    from cronchain.scheduler.core.host import Host

log = logging.getLogger("cronchain.engine")


def look_again_soon(host: Host, messages: list[Recheck]) -> None:
    """Look again, soon, at the jobs ``messages`` name (``look_again``)."""
    host.soon(look_again, sorted({m.job_id for m in messages}))


def look_again(host: Host, job_ids: list[int], *, again: bool = True) -> None:
    """Look again at the runs of ``job_ids`` that wait for their upstreams, each job in
    transactions of its own: first wait, holding nothing, for any transaction that
    holds one of its upstreams (a success may be under way), then lock the job and
    look. An upstream held again by then is looked at once more (``again``), then left
    to the watchdog's pass, as is a failure."""
    for job_id in job_ids:
        try:
            with host.transaction() as conn:
                job = job_store.read_jobs(conn, {job_id})
                if job:
                    wait_for_upstreams(conn, job[0])
            with host.transaction() as conn:
                locked = job_store.lock_job(conn, job_id)
                now = host.clock()
                found = [] if locked is None else upstream.recheck(host, conn, locked, now)
                messages = host.attempts.begin_released(conn, found)
        except Exception:
            log.exception("job %s: its waiting runs could not be looked at again", job_id)
            continue
        pool = None if locked is None else controls_of(locked).pool
        if pool is not None:  # a waiter's lock this held kept a fill from starting it
            messages.append(Fill(pool))
        busy = [m for m in messages if isinstance(m, Recheck)]
        host.send([m for m in messages if not isinstance(m, Recheck)])
        if busy and again:
            look_again(host, [job_id], again=False)


def wait_for_upstreams(conn: Connection, job: JobRow) -> None:
    """Wait, holding no other lock, until no transaction holds a row of ``job``'s
    upstreams: a success of theirs under way has then committed (``look_again``)."""
    refs = [upstream.pair(target_ref(job.ref, up.job)) for up in controls_of(job).requires]
    if refs:
        upstream_store.wait_for_upstreams(conn, refs, WAIT_MOST)


class WaitingLookedAt:
    """The watchdog's duty for ``requires``: look again, soon, at the jobs with runs
    waiting for their upstreams (a success that could not release them, a recheck lost
    with its process)."""

    def sweep(
        self, host: Host, now: datetime, limit: int, backlog: timedelta
    ) -> tuple[dict[str, int], list[Message]]:
        with host.transaction() as conn:
            waiting = upstream_store.waiting_jobs(conn, limit)
        host.soon(look_again, waiting)
        return {}, []
