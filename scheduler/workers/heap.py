"""A worker process's long-lived objects, kept out of the cyclic collector's way.

A full collection (generation 2) walks every container object the process tracks and
stops every thread of the process meanwhile. In a worker under load (10,000 jobs at 200
fires/s, a third with upstreams) those pauses were measured at 100-200 ms, every ~8 s in
the work path's process (its claims wait) and now and then in the control path's (the
ticks queued behind wait): the long tail of the fire lag (docs/benchmarks-archive.md, twelfth
round). Most of what they walked lives as long as the process: modules, Celery's app,
SQLAlchemy's tables and engine, the compiled statements. Frozen (``gc.freeze``) once
made, they are never walked again; what a task makes and drops is collected as before.

The young generation is collected less often than Python's default, which collects it
once 700 more tracked objects have been made than freed: a batch of a hundred fires
holds thousands (rows, calls, messages) until it ends, so at 700 the collector ran every
twenty fires or so, walked what the batch under way still held, and passed it on to the
next generation, to be walked again. In ``bench.hot_path`` (2,000 jobs, 10,000 fires)
that was 500 collections and 10 µs a fire; at ``YOUNG``, six and 1.4 µs. What waits to
be collected is at most that many objects more.
"""

from __future__ import annotations

import gc
import logging
import os
from typing import Any

YOUNG = 10_000  # objects made and not yet freed that start a young collection (Python: 700)
FREEZE_EVERY = 1.0  # seconds: what a consumer held this long is frozen
SWEEP_EVERY = 3600.0  # seconds: a full collection of all, for cycles that froze alive

log = logging.getLogger("cronchain.heap")

_frozen: set[tuple[int, str]] = set()  # (process, moment): a forked child has not


def freeze(moment: str) -> None:
    """Leave every object the process has now to the end of the process, once per
    process and ``moment``: call it once what lives that long has been made (``fork``:
    a prefork worker about to fork its children, which inherit it frozen; ``ready``:
    cronchain's worker ready; ``runtime``: its runtime made, as each prefork child starts
    or once a worker of threads is ready, else at the first task). Garbage is collected
    first, else it would stay; from then on the young generation is collected at
    ``YOUNG``. Only in cronchain's own workers: a user's worker that runs cronchain's
    hooks keeps its collector as it set it."""
    key = (os.getpid(), moment)
    if key not in _frozen:
        _frozen.add(key)
        gc.collect()
        gc.freeze()
        gc.set_threshold(YOUNG, *gc.get_threshold()[1:])


def keep_frozen(timer: Any) -> None:
    """Freeze what the process made every second, and collect all of it once an hour, on
    a consumer's ``timer``: for the main process of a worker whose tasks run elsewhere
    (prefork), where what is made is what the consumer holds.

    That process holds each tick until its ETA: 23 tracked objects each, 230,000 at
    10,000 jobs, and every full collection walked them all (about 145 ms, twice a minute,
    in bench.fire_rate). They die by reference counting once run (Celery's cycle is
    broken, ``patches.release_fired_eta_entries``): frozen, they are freed as before and
    never walked. What leaks until the hourly pass is garbage in cycles that were alive
    when frozen, or dead and made since the last young collection (the young
    generations are collected before each freeze, which walks only what the last second
    made): measured, 50 objects over 3,000 ticks. A child forked later inherits the
    frozen heap (as children do) and not the timer."""
    timer.call_repeatedly(FREEZE_EVERY, freeze_new)
    timer.call_repeatedly(SWEEP_EVERY, collect_frozen)


def freeze_new() -> None:
    """Collect the young generations, then freeze what survives."""
    gc.collect(1)
    gc.freeze()


def collect_frozen() -> int:
    """Collect everything, the frozen heap included, then freeze what is left; returns
    how many objects were collected (logged: the leak that the freezing bounds)."""
    gc.unfreeze()
    collected = gc.collect()
    gc.freeze()
    log.info("collected %d objects of the frozen heap", collected)
    return collected
