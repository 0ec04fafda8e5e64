"""``cronchain up``: one command that runs cronchain whole, for a laptop or a small host.

It migrates, applies the given job files, then runs both paths (docs/concepts/two-paths.md)
as child processes until stopped: the control path (a prefork worker with beat
embedded) and the work path (a worker of threads). :mod:`scheduler.cli.supervise` starts,
stops and watches them.
"""

from __future__ import annotations

import os
import socket
import sys
from datetime import UTC, datetime

from kombu.utils.url import maybe_sanitize_url
from sqlalchemy import Engine
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
    on its own or did not stop in time (scheduler.cli.supervise)."""
    from cronchain.scheduler.api import Scheduler
    from cronchain.scheduler.cli.supervise import supervise
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
    host = socket.gethostname()  # what %h is to Celery
    commands = {
        "control": [
            *celery,
            *("--beat", "--queues", control_queues, "--concurrency", str(concurrency)),
            *("--hostname", f"control@{host}"),
        ],
        "work": [
            *celery,
            *("--queues", settings.work_queue, "--pool", "threads"),
            *("--concurrency", str(threads), "--hostname", f"work@{host}"),
        ],
    }
    database = make_url(settings.database_url).render_as_string(hide_password=True)
    print(f"cronchain: database {database}, broker {maybe_sanitize_url(settings.broker_url)}")
    print(
        f"cronchain: control path on {control_queues} (prefork, {concurrency} processes, "
        f"beat); work path on {settings.work_queue} (threads, {threads})",
        flush=True,
    )
    workers = [f"{name}@{host}" for name in commands]
    return supervise(commands, waiting=lambda: runs_in_hand(runtime.engine.db, workers))


def runs_in_hand(db: Engine, workers: list[str], shown: int = 5) -> str:
    """The runs ``workers`` have claimed and not ended, in words: what a first Ctrl-C
    waits for (``2 runs: demo/slow (slot 12:37:00Z, 1.2 s in), ...``)."""
    from cronchain.scheduler.storage import run_store
    from cronchain.scheduler.timing.iso import iso

    with db.connect() as conn:
        runs = run_store.claimed_by(conn, workers)
    if not runs:
        return "no run"
    now = datetime.now(UTC)
    said = [
        f"{job} ({'slot ' + iso(slot) if slot else 'triggered'}"
        f"{f', {(now - started).total_seconds():.1f} s in' if started else ''})"
        for job, slot, started in runs[:shown]
    ]
    more = f" and {len(runs) - shown} more" if len(runs) > shown else ""
    return f"{len(runs)} run(s): {', '.join(said)}{more}"
