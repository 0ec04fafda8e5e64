"""``cronchain up``: one command that runs cronchain whole, for a laptop or a small host.

It migrates, applies the given job files, then runs both paths (DESIGN.md, "Two paths")
as child processes until stopped: the control path (a prefork worker with beat
embedded) and the work path (a worker of threads). :mod:`scheduler.supervise` starts,
stops and watches them.
"""

from __future__ import annotations

import os
import sys

from kombu.utils.url import maybe_sanitize_url
from sqlalchemy.engine import make_url

# Set for up's workers: each knows the other path runs beside it.
STARTED_BY_UP = "CRONCHAIN_STARTED_BY_UP"


def up(
    files: list[str],
    *,
    concurrency: int,
    queues: list[str],
    work_concurrency: int | None,
    loglevel: str,
) -> int:
    """Exit status: 0 when SIGINT or SIGTERM, to ``up`` alone or to its process group,
    stopped both paths (in time, or by force at the third signal); 1 when a path exited
    on its own or did not stop in time (scheduler.supervise)."""
    from cronchain.scheduler.api import Scheduler
    from cronchain.scheduler.supervise import supervise
    from cronchain.scheduler.workers.runtime import Runtime

    runtime = Runtime.for_command()
    settings = runtime.settings
    sched = Scheduler(runtime.engine)
    sched.upgrade()
    for path in files:
        report = sched.apply(path)
        print(
            f"{path}: created {len(report.created)}, updated {len(report.updated)}, "
            f"disabled {len(report.disabled)}, unchanged {len(report.unchanged)}"
        )
    if runtime.unsent is not None:  # the workers wait for the broker; the watchdog sends
        print(f"cronchain: {runtime.unsent}; starting the workers anyway", file=sys.stderr)
    # Beat keeps its schedule file there, whichever the database and broker.
    settings.home.mkdir(parents=True, exist_ok=True)
    control_queues = ",".join([settings.queue, *queues])
    threads = work_concurrency or settings.work_concurrency
    # No banner (two screens of it) unless asked for at DEBUG, with Celery's per-task
    # lines (scheduler.workers.logs).
    quiet = [] if loglevel.upper() == "DEBUG" else ["--quiet"]
    celery = [sys.executable, "-m", "celery", "-A", "cronchain.tasks", *quiet]
    celery += ["worker", "--loglevel", loglevel]
    os.environ[STARTED_BY_UP] = "1"  # inherited by the workers
    commands = {
        "control": [
            *celery,
            *("--beat", "--queues", control_queues, "--concurrency", str(concurrency)),
            *("--hostname", "control@%h"),
        ],
        "work": [
            *celery,
            *("--queues", settings.work_queue, "--pool", "threads"),
            *("--concurrency", str(threads), "--hostname", "work@%h"),
        ],
    }
    database = make_url(settings.database_url).render_as_string(hide_password=True)
    print(f"cronchain: database {database}, broker {maybe_sanitize_url(settings.broker_url)}")
    print(
        f"cronchain: control path on {control_queues} (prefork, {concurrency} processes, "
        f"beat); work path on {settings.work_queue} (threads, {threads})",
        flush=True,
    )
    return supervise(commands)
