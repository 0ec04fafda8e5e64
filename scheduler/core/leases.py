"""Leases of running attempts, renewed from the process that runs them.

A RUNNING attempt holds a lease (``lease: 60s`` per job); whoever runs it renews it at a
third of its length. If the process dies, renewals stop, the deadline lapses and the
watchdog ends the attempt as "lease expired". One daemon thread per process renews every
lease that process holds; a renewal that finds its attempt no longer current (retried,
aborted, timed out) sets ``lost`` so the work can stop early.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import Engine as Database

from cronchain.scheduler import debuglog, outside
from cronchain.scheduler.storage import run_store
from cronchain.scheduler.storage.db import write_transaction

log = logging.getLogger("cronchain.leases")


@dataclass(eq=False)
class Lease:
    invocation_id: int
    attempt: int
    length: timedelta
    lost: threading.Event = field(default_factory=threading.Event)
    due: datetime | None = None
    failures: int = 0  # renewals in a row that could not reach the database
    job_id: int | None = None  # saves the outcome a lookup of the job to lock first
    filed_at: datetime | None = None  # where the run is filed (``Call``)


def retry_delay(failures: int, length: timedelta) -> timedelta:
    """How long after its ``failures``-th failed renewal in a row a lease is tried again:
    from a quarter second, doubling, never more than the usual third of its length, so
    that a database outage costs a few attempts per lease rather than a busy loop."""
    return min(timedelta(seconds=0.25 * 2 ** min(failures - 1, 16)), length / 3)


class Leases:
    """Holds leases for this process and renews them in one background thread."""

    def __init__(self, db: Database, clock: Callable[[], datetime]):
        self.db = db
        self.clock = clock
        self._held: set[Lease] = set()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._wakes_at: datetime | None = None  # while the thread waits

    def hold(self, lease: Lease) -> Lease:
        with self._lock:
            lease.due = self.clock() + lease.length / 3
            self._held.add(lease)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="cronchain-leases")
                self._thread.daemon = True
                self._thread.start()
            elif self._wakes_at is not None and lease.due < self._wakes_at:
                # Waking the thread for every lease would cost a thread switch per
                # run, and most runs end before their first renewal.
                self._wake.notify()
        return lease

    def release(self, lease: Lease) -> None:
        with self._lock:
            self._held.discard(lease)

    def renew(self, lease: Lease, note: str | None = None) -> bool:
        """Renew now, adding ``note`` to the debug log; False (and ``lost`` set) if the
        attempt is no longer current."""
        now = self.clock()
        try:
            with write_transaction(self.db) as conn:
                current = run_store.renew_lease(
                    conn,
                    lease.invocation_id,
                    lease.attempt,
                    now + lease.length,
                    lease.job_id,
                    lease.filed_at,
                )
                if current and note:  # a task's words: kept as text from outside is
                    line = outside.kept(note, debuglog.LINE_LIMIT)
                    run_store.append_log(conn, lease.invocation_id, now, line, lease.filed_at)
        except Exception as err:  # the database is away: try again, less and less often
            lease.failures += 1
            lease.due = now + retry_delay(lease.failures, lease.length)
            log.warning(
                "renewing the lease of invocation %s: %s; again in %.1f s",
                lease.invocation_id,
                err,
                (lease.due - now).total_seconds(),
            )
            return not lease.lost.is_set()
        lease.failures = 0
        if not current:
            lease.lost.set()
            self.release(lease)
        lease.due = now + lease.length / 3
        return current

    def _run(self) -> None:
        while True:
            with self._lock:
                now = self.clock()
                due = [lease for lease in self._held if lease.due and lease.due <= now]
                if not due:
                    wait = min(
                        ((lease.due - now).total_seconds() for lease in self._held if lease.due),
                        default=1.0,
                    )
                    timeout = max(0.05, min(wait, 1.0))
                    self._wakes_at = now + timedelta(seconds=timeout)
                    self._wake.wait(timeout=timeout)
                    self._wakes_at = None
                    continue
            for lease in due:
                self.renew(lease)
