"""A large registry: 100k jobs applied, swept while idle, held in flight by a worker.

    python -m bench.registry_scale [--jobs 100000] [--period 3600 | --mixed] [--hold 60]
                                   [--baseline GITREF]

Figures: the time of ``cronchain apply`` of a file of the jobs (one transaction, then the
tick messages), of the same file again (nothing to change) and, at the end, of the file
with every job's time zone changed (every job updated, its tick moved); a watchdog pass
when nothing has lapsed, timed in this process, with PostgreSQL's plan for its query;
and the peak resident size of each worker process while the workers (both paths, as
``cronchain up`` deploys them) hold every job's chain. Each apply is timed alone: the
file is written before. ``--baseline`` also times the apply of the same file by the code
of a git commit (``git archive``), on a database of its own: the figure to compare with.
With ``--mixed`` the jobs' periods run from a minute to a day (``MIXED_PERIODS``), as a
large registry's do, rather than all ``--period``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import select

from bench.common import (
    PeakRss,
    database,
    deployment,
    figure,
    job_document,
    mixed_document,
    percentile,
)
from cronchain.scheduler.maintenance.watchdog import run_once
from cronchain.scheduler.storage.models import jobs
from tests.e2e.harness import Cluster
from tests.support.repo import ROOT
from tests.support.services import redis_server

PER_FILE = 100_000


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.registry_scale", description=__doc__)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--period", type=float, default=3600)
    parser.add_argument("--mixed", action="store_true", help="periods from a minute to a day")
    parser.add_argument("--hold", type=float, default=60, help="seconds the worker runs")
    parser.add_argument("--baseline", metavar="GITREF", help="also time this commit's apply")
    args = parser.parse_args(argv)
    periods = "mixed" if args.mixed else f"{args.period:g}s"
    name = f"registry_scale[jobs={args.jobs},period={periods}]"
    with (
        tempfile.TemporaryDirectory(prefix="bench-registry-") as tmp,
        deployment(Path(tmp)) as d,
    ):
        db, redis, c = d.db, d.redis, d.cluster
        document = mixed_document(args.jobs) if args.mixed else job_document(args.jobs, args.period)
        paths = write(Path(tmp), document)
        applied_at = datetime.now(UTC)
        figure(name, "apply", timed(lambda: apply(c, paths)), "s")
        figure(name, "tick_messages_queued", redis.client().llen("cronchain"))
        figure(name, "apply_unchanged", timed(lambda: apply(c, paths)), "s")
        if args.baseline:
            figure(name, "apply_baseline", baseline(args.baseline, paths, Path(tmp)), "s")

        # An idle pass: the watchdog's clock reads the moment apply began, when no job
        # had lapsed. (By now, those whose first slot came during the apply have: no
        # worker runs yet.) The query and its plan are the same at any instant.
        engine = d.runtime().engine
        engine.clock = lambda: applied_at
        passes = []
        for _ in range(20):
            t = time.perf_counter()
            report = run_once(engine)
            passes.append(time.perf_counter() - t)
            assert report.repairs == 0, report
        figure(name, "idle_watchdog_pass_p50", percentile(passes, 0.5) * 1000, "ms")
        figure(name, "idle_watchdog_pass_max", max(passes) * 1000, "ms")
        claim = (  # the watchdog's own query (job_store.claim_lapsed_jobs)
            select(jobs)
            .where(jobs.c.watchdog_at < applied_at)
            .order_by(jobs.c.watchdog_at)
            .limit(500)
            .with_for_update(skip_locked=True)
        )
        with db.connect() as conn:  # run for real (ANALYZE): it locks nothing, as idle
            plan = conn.exec_driver_sql(
                "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "
                + str(claim.compile(db, compile_kwargs={"literal_binds": True}))
            ).scalar_one()
        node = plan[0]["Plan"]
        while node.get("Plans") and node["Node Type"] in ("Limit", "LockRows", "Sort"):
            node = node["Plans"][0]
        print(f"{name} idle_watchdog_plan {node['Node Type']} {node.get('Index Name', '')}")
        # FOR UPDATE rules out an index-only scan; what shows that the pass reads only the
        # index is that it touches a couple of index pages and no heap page at all.
        pages = node.get("Shared Hit Blocks", 0) + node.get("Shared Read Blocks", 0)
        figure(name, "idle_watchdog_pages_read", pages)
        figure(name, "idle_watchdog_rows", node.get("Actual Rows", 0))

        d.start(beat=False)
        pids = d.worker_pids
        with PeakRss(pids["worker"]) as rss, PeakRss(pids["work"]) as work_rss:
            d.wait_ready()
            time.sleep(args.hold)
        figure(name, "worker_peak_rss_per_process", rss.peak / 2**20, "MiB")
        figure(name, "work_worker_peak_rss", work_rss.peak / 2**20, "MiB")
        figure(name, "tick_messages_left_in_queue", redis.client().llen("cronchain"))
        client = redis.client()  # runs wait in the work queue's list of their priority
        lists = ["cronchain.work", *(f"cronchain.work\x06\x16{step}" for step in (3, 6, 9))]
        figure(name, "runs_left_in_work_queue", sum(client.llen(key) for key in lists))
        c.stop_all()

        # Last, as it sends every job a new tick: each job's zone changed, each one updated.
        for job in document["jobs"]:
            job["timezone"] = "Europe/Berlin"
        paths = write(Path(tmp), document)
        figure(name, "apply_every_job_updated", timed(lambda: apply(c, paths)), "s")
        engine.db.dispose()


def write(folder: Path, document: dict) -> list[Path]:
    """The document as files of at most ``PER_FILE`` jobs, each a project of its own
    (``bench-0``, ``bench-1``, ...): a registry of a million jobs is many teams' files,
    and one file of them would pass the bound on a YAML file's size."""
    specs = document["jobs"]
    paths = []
    for n, i in enumerate(range(0, len(specs), PER_FILE)):
        path = folder / f"jobs-{n}.yaml"
        path.write_text(json.dumps({"project": f"bench-{n}", "jobs": specs[i : i + PER_FILE]}))
        paths.append(path)  # JSON is YAML
    return paths


def apply(c: Cluster, paths: list[Path]) -> None:
    """``cronchain apply`` of each file, one after another."""
    for path in paths:
        c.cronchain("apply", str(path), timeout=900)


def timed(run: Callable[[], object]) -> float:
    t = time.perf_counter()
    run()
    return time.perf_counter() - t


def baseline(ref: str, paths: list[Path], folder: Path) -> float:
    """The time the code of commit ``ref`` takes to apply ``paths`` (a checkout of it
    made with ``git archive``), on a fresh database and a Redis of its own."""
    checkout, redis_folder = folder / "baseline", folder / "baseline-redis"
    checkout.mkdir()
    redis_folder.mkdir()
    archive = subprocess.run(["git", "archive", ref], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(checkout)], input=archive.stdout, check=True)
    with database() as (url, _), redis_server(redis_folder) as redis:
        c = Cluster.create(
            checkout,
            PYTHONPATH=str(checkout),
            CRONCHAIN_DATABASE_URL=url,
            CRONCHAIN_BROKER_URL=redis.url,
        )
        return timed(lambda: apply(c, paths))


if __name__ == "__main__":
    main()
