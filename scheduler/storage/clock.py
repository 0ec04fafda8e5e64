"""The database's clock, read through this machine's: one clock for every process.

Each decision that compares instants written by different processes (a slot due, a
lease lapsed, a timeout, a misfire) must read the same clock, or a worker whose clock
runs 30 s ahead fires a slot 30 s early and takes a live attempt's lease for a lapsed
one. Reading PostgreSQL's ``clock_timestamp()`` in every transaction would cost a round
trip each; instead a thread of each process measures how far its machine's clock is
from the database's, every ``EVERY`` seconds, and every reading adds that offset to the
machine's. The error is half the shortest of a few round trips (under a millisecond on a
network), plus what the clocks drift apart in ``EVERY`` seconds.

SQLite has no server and no clock of its own: every process of an embedded deployment
runs on one machine, and reads that machine's clock.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from cronchain.scheduler.storage.db import normalize_url

log = logging.getLogger("cronchain.clock")

EVERY = 30.0  # seconds between measurements
RETRY = 10.0  # seconds before a failed measurement is tried again
SAMPLES = 3  # round trips per measurement: the shortest one's reading is kept
SLOW = 0.25  # seconds: a measurement whose every round trip took longer is not kept
TIMEOUT = 3  # seconds to connect, and for the statements (a server cut off mid-way)
LOUD = timedelta(seconds=1)  # an offset this large is worth a warning


def utcnow() -> datetime:
    return datetime.now(UTC)


class DatabaseClock:
    """The time by the database's clock, as ``utcnow`` reads the machine's. A process
    keeps one per database (``clock_for``). Reading it never waits on the database: a
    thread of its own measures the offset, the first time in each process (after a fork
    too) before the first reading returns, then every ``EVERY`` seconds."""

    def __init__(self, url: str, every: float = EVERY) -> None:
        self._db = create_engine(
            url,
            poolclass=NullPool,
            connect_args={
                "connect_timeout": TIMEOUT,
                "tcp_user_timeout": TIMEOUT * 1000,
                "options": f"-c statement_timeout={TIMEOUT * 1000}",
            },
        )
        self._every = every
        self.offset = timedelta(0)  # the database's clock minus this machine's
        self._pid: int | None = None  # the process whose thread measures
        self._lock = threading.Lock()
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        """A forked child has no measuring thread, and may hold a copy of a taken lock."""
        self._pid = None
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        if self._pid is None:  # none measures in this process yet (``_forked``)
            self._start()
        return utcnow() + self.offset

    def _start(self) -> None:
        with self._lock:
            if self._pid is not None:
                return
            self._pid = os.getpid()
            self.measure()
            threading.Thread(target=self._measure_on, daemon=True, name="cronchain-clock").start()

    def _measure_on(self) -> None:
        while True:
            time.sleep(self._every if self.measure() else RETRY)

    def measure(self) -> bool:
        """Measure the offset now: the reading of the shortest of ``SAMPLES`` round trips
        on one connection, taken as at its middle. A database that does not answer, or
        answers too slowly to tell, leaves the last offset in place."""
        try:
            with self._db.connect() as conn:
                samples = []
                for _ in range(SAMPLES):
                    before = time.time()
                    theirs = conn.execute(text("SELECT clock_timestamp()")).scalar_one()
                    after = time.time()
                    samples.append((after - before, theirs, (before + after) / 2))
        except DBAPIError as err:
            log.debug("the database's clock could not be read: %s", err)
            return False
        trip, theirs, mine = min(samples, key=lambda sample: sample[0])
        if trip > SLOW:
            log.debug("the database's clock: round trips too slow to tell (%.3f s)", trip)
            return False
        offset = theirs - datetime.fromtimestamp(mine, UTC)
        if abs(offset) > LOUD and abs(offset - self.offset) > LOUD:
            log.warning(
                "this machine's clock is %+.3f s from the database's: cronchain decides by"
                " the database's; keep both on NTP",
                -offset.total_seconds(),
            )
        self.offset = offset
        return True


_clocks: dict[str, DatabaseClock] = {}
_clocks_lock = threading.Lock()


def clock_for(url: str) -> Callable[[], datetime]:
    """This process's clock for the database at ``url``: the database's on PostgreSQL,
    the machine's on SQLite."""
    parsed = make_url(normalize_url(url))
    if parsed.get_backend_name() != "postgresql":
        return utcnow
    url = parsed.render_as_string(hide_password=False)  # one spelling, one clock
    with _clocks_lock:
        if url not in _clocks:
            _clocks[url] = DatabaseClock(url)
        return _clocks[url]


def database_clock(db: Engine) -> Callable[[], datetime]:
    """``clock_for`` the database ``db`` is on."""
    return clock_for(db.url.render_as_string(hide_password=False))
