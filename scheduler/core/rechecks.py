"""Work on jobs done soon, in a thread of the worker's own (``Host.soon``).

A run found waiting for an upstream whose row another transaction held (a success may
be under way) is looked at again once its own transaction has committed, first waiting
for that other transaction (``upstream_waits.look_again``). That wait lasts as long as
the other transaction: under load, an outcome group on the work path holds its jobs for tens or
hundreds of milliseconds. Done in the task that asked (a tick, or the watchdog's pass),
it held up every tick queued behind that task on the worker (see docs/benchmarks-archive.md);
here a thread of the same process waits, and the task goes on.

A recheck still queued when the process exits is lost, as one interrupted by a crash
is: the watchdog's pass looks again at every waiting run within an interval.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("cronchain.engine")


# Work on jobs: called with the host that queued it and one job's id at a time.
Work = Callable[[Any, list[int]], None]


class Rechecks:
    """One daemon thread per process takes the work queued on jobs, what was queued
    together one job after the other, the same work on one job once."""

    def __init__(self, host: Any):
        self._host = host
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[tuple[Work, int]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._pid = 0

    def put(self, work: Work, job_ids: list[int]) -> None:
        with self._lock:
            if self._pid != os.getpid():  # a forked child has no thread, and a new queue
                self._queue, self._thread, self._pid = queue.SimpleQueue(), None, os.getpid()
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, args=(self._queue,), name="cronchain-rechecks", daemon=True
                )
                self._thread.start()
            for job_id in job_ids:
                self._queue.put((work, job_id))

    def _run(self, jobs: queue.SimpleQueue[tuple[Work, int]]) -> None:
        while True:
            due = {jobs.get()}
            while not jobs.empty():
                due.add(jobs.get_nowait())
            for work, job_id in sorted(due, key=lambda d: (d[1], d[0].__qualname__)):
                try:  # one job's failure must not drop the others
                    work(self._host, [job_id])
                except Exception:  # the work logs its own; this thread must go on
                    log.exception("job %s: %s failed", job_id, work.__qualname__)
