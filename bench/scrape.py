"""A Prometheus scrape of ``cronchain serve``'s /metrics at 10,000 jobs (issue 17: under
200 ms, reading indexes only), and the web page at the same size.

    python -m bench.scrape [--jobs 10000] [--scrapes 50] [--history 30] [--period 60]

A fresh PostgreSQL database gets the jobs through a bulk apply (one file of no-op jobs,
as ``cronchain apply`` writes it), ``--history`` finished runs per job (so that the
history is there to be avoided) and a last success on every job. A real ``cronchain
serve`` process answers; the scrapes are real HTTP requests, one after another. Figures:
the scrape's wall time p50/p99/max, its size, and the time of one in-process render
(the database's part and the text format's, without HTTP). Then the same for the
page: ``/`` (its first 200 jobs, each with its strip of 30 runs), a page near the end
as its links reach it (``?after=``) and as a typed number (an offset), the jobs that
failed last (one in a hundred), a search by name, the list by next tick, one job's
page and the forecast of the next 24 hours; with each, the share of a core an open
page's refresh every 5 s costs at most.
Last, the scrape again with ``CRONCHAIN_METRICS_PER_JOB=false`` (``no_per_job_*``), and
again a minute later (``no_per_job_a_minute_on_*``), when a slow count of the jobs by state
is counted again.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from datetime import timedelta

from bench.common import database, figure, job_specs, percentile
from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.invokers import default_invokers
from cronchain.scheduler.settings import Settings
from cronchain.scheduler.spec.jobspec import JobSpec
from cronchain.scheduler.web.metrics import STALE_COUNT, DatabaseCollector, render
from cronchain.scheduler.web.views import PAGE
from tests.support.engine import RecordingPort
from tests.support.repo import ROOT
from tests.support.services import free_port
from tests.support.wait import wait_until

NAME = "scrape"
LIVE = 5  # seconds between an open page's refreshes (scheduler/web/static/cronchain.js)


def main() -> None:
    args = _arguments()
    with database() as (url, db), tempfile.TemporaryDirectory() as folder:
        engine = Engine(db, RecordingPort(), default_invokers(), grace=timedelta(seconds=15))
        specs = [
            JobSpec.from_dict("bench", entry) for entry in job_specs(args.jobs, period=args.period)
        ]
        Scheduler(engine).apply(specs, project="bench")
        _history(db, args.history)
        figure(NAME, "jobs", args.jobs)
        settings = Settings.from_env({"CRONCHAIN_DATABASE_URL": url})
        collector = DatabaseCollector(db, settings)
        render(collector)  # the first: connection opened, statements compiled
        started = time.perf_counter()
        render(collector)
        figure(NAME, "render_in_process", (time.perf_counter() - started) * 1000, "ms")
        names = sorted(s.name for s in specs)
        last = f"bench/{names[-300]}"
        late = max(1, args.jobs // PAGE - 1)  # its first job follows names[(late-1)*PAGE-1]
        after = f"bench/{names[max(0, (late - 1) * PAGE - 1)]}"
        with _serving(url, folder) as base:
            _scrapes(f"{base}/metrics", args.scrapes)
            for name, path in (
                ("page", "/"),
                ("page_late", f"/?page={late}&after={after}"),  # as its links reach it
                ("page_late_typed", f"/?page={late}"),  # a number typed: an offset
                ("page_failed", "/?outcome=failed"),
                ("page_search", f"/?q={last.split('/')[1][:-1]}"),
                ("page_by_next_tick", "/?sort=next"),
                ("job_page", f"/jobs/{last}"),
                ("forecast_24h", "/forecast"),
            ):
                p50 = _scrapes(base + path, args.scrapes, name)
                # An open page asks again every LIVE seconds: its share of a core, at most
                # (the server's whole time, the database's part within it).
                figure(NAME, f"{name}_live_core_share", p50 / 1000 / LIVE * 100, "%")
        with _serving(url, folder, CRONCHAIN_METRICS_PER_JOB="false") as base:
            _scrapes(f"{base}/metrics", args.scrapes, "no_per_job")
            # A minute on, the count of jobs by state that a slow registry's scrapes keep
            # is stale: the scrapes answer with it while it is counted again beside them.
            time.sleep(STALE_COUNT.total_seconds())
            _scrapes(f"{base}/metrics", args.scrapes, "no_per_job_a_minute_on", warm=True)


@contextlib.contextmanager
def _serving(url: str, folder: str, **env: str) -> Iterator[str]:
    """A ``cronchain serve`` process on the database; its base URL."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "cronchain.scheduler.cli", "serve", "--port", str(port)],
        env=dict(os.environ, CRONCHAIN_DATABASE_URL=url, PYTHONPATH=str(ROOT), **env),
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


def _history(db, runs_per_job: int) -> None:  # type: ignore[no-untyped-def]
    """Finished runs for every job, over the last days, and a last success on each."""
    with db.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO invocations (job_id, slot, revision, status, attempt, created_at,"
            " started_at, finished_at, backfill, filed_at) SELECT j.id, date_trunc('minute',"
            " now()) - s * interval '1 hour', j.revision, 'SUCCEEDED', 1, now(), now(), now(),"
            " false, date_trunc('minute', now()) - s * interval '1 hour' FROM jobs j,"
            f" generate_series(1, {runs_per_job}) s"
        )
        conn.exec_driver_sql("UPDATE jobs SET last_success_at = now() - interval '1 minute'")
        # One job in a hundred failed since (what ?outcome=failed finds).
        conn.exec_driver_sql("UPDATE jobs SET last_failure_at = now() WHERE mod(id, 100) = 0")
    with db.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("VACUUM ANALYZE")


def _scrapes(url: str, count: int, name: str = "", warm: bool = False) -> float:
    """``count`` requests, timed, after one that is not unless the server is ``warm``;
    returns their p50, in ms."""

    def get() -> bytes:
        with urllib.request.urlopen(url, timeout=30) as answer:
            return answer.read()

    if not warm:
        wait_until(lambda: _answers(url), 60, "cronchain serve")
        get()  # the first: connections opened, templates and code warmed
    times, size = [], 0
    for _ in range(count):
        started = time.perf_counter()
        size = len(get())
        times.append((time.perf_counter() - started) * 1000)
    prefix = f"{name}_" if name else ""
    figure(NAME, f"{prefix}bytes", size)
    figure(NAME, f"{prefix}p50", percentile(times, 0.5), "ms")
    figure(NAME, f"{prefix}p99", percentile(times, 0.99), "ms")
    figure(NAME, f"{prefix}max", max(times), "ms")
    return percentile(times, 0.5)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=30):
            return True
    except OSError:
        return False


def _arguments() -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.scrape", description=__doc__)
    p.add_argument("--jobs", type=int, default=10_000)
    p.add_argument("--scrapes", type=int, default=50)
    p.add_argument("--history", type=int, default=30, help="finished runs per job")
    p.add_argument("--period", type=float, default=60, help="the jobs' period, in seconds")
    return p.parse_args()


if __name__ == "__main__":
    sys.exit(main())
