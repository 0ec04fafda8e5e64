"""A worker process's long-lived objects, kept out of the cyclic collector's way.

A full collection (generation 2) walks every container object the process tracks and
stops every thread of the process meanwhile. In a worker under load (10,000 jobs at 200
fires/s, a third with upstreams) those pauses were measured at 100-200 ms, every ~8 s in
the work path's process (its claims wait) and now and then in the control path's (the
ticks queued behind wait): the long tail of the fire lag (bench/RESULTS.md, twelfth
round). Most of what they walked lives as long as the process: modules, Celery's app,
SQLAlchemy's tables and engine, the compiled statements. Frozen (``gc.freeze``) once
made, they are never walked again; what a task makes and drops is collected as before.
"""

from __future__ import annotations

import gc
import os

_frozen: set[tuple[int, str]] = set()  # (process, moment): a forked child has not


def freeze(moment: str) -> None:
    """Leave every object the process has now to the end of the process, once per
    process and ``moment``: call it once what lives that long has been made (``ready``:
    cronchain's worker ready; ``runtime``: its runtime made, at its first task, later
    in the same process for a worker of threads). Garbage is collected first, else it
    would stay. Only in cronchain's own workers: a user's worker that runs cronchain's
    hooks keeps its collector as it set it."""
    key = (os.getpid(), moment)
    if key not in _frozen:
        _frozen.add(key)
        gc.collect()
        gc.freeze()
