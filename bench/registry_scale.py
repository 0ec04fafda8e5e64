"""A large registry: 100k jobs applied, swept while idle, held in flight by a worker.

    python -m bench.registry_scale [--jobs 100000] [--period 3600 | --mixed] [--hold 60]
                                   [--baseline GITREF]

Figures: the time of ``cronchain apply`` of a file of the jobs (one transaction, then the
tick messages), of the same file again (nothing to change) and, at the end, of the file
with every job's time zone changed (every job updated, its tick moved); a watchdog pass
when nothing has lapsed, timed in this process, with PostgreSQL's plan of each of its
statements and the pages they read together;
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
import math
import subprocess
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import redis
import sqlalchemy
from sqlalchemy import select

from bench.common import (
    PeakRss,
    analyze,
    cpu_seconds,
    database,
    deployment,
    figure,
    job_document,
    mixed_document,
    percentile,
    recent_lags,
    settle,
)
from cronchain.scheduler.maintenance.watchdog import run_once
from cronchain.scheduler.storage.models import invocations
from tests.e2e.harness import Cluster
from tests.support.plans import pages, plan, scans, selects
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
        analyze(db)  # as the watchdog's history pass does in a deployment
        passes = []
        for _ in range(20):
            t = time.perf_counter()
            report = run_once(engine)
            passes.append(time.perf_counter() - t)
            assert report.repairs == 0, report
        figure(name, "idle_watchdog_pass_p50", percentile(passes, 0.5) * 1000, "ms")
        figure(name, "idle_watchdog_pass_max", max(passes) * 1000, "ms")
        # PostgreSQL's plan for each statement of an idle pass, as it ran it (the claims
        # of lapsed and of parked jobs, of lapsed starts, runs and revokes, and the
        # features' sweeps).
        total = 0
        ran = selects(engine.db, lambda: run_once(engine))
        for n, (statement, parameters) in enumerate(ran):
            with db.connect() as conn:  # run for real (ANALYZE): idle, it locks nothing
                top = plan(conn, statement, parameters, analyze=True)
            read = pages(top)
            total += read
            print(f"{name} idle_watchdog_plan[{n}] {'+'.join(scans(top))} pages={read}")
        # FOR UPDATE rules out an index-only scan; what shows that the pass reads only the
        # indexes is that it touches a few index pages and no heap page at all.
        figure(name, "idle_watchdog_pages_read", total)

        # The deployment as it runs: both paths and beat (whose watchdog sends parked
        # ticks). Stopped through the applies, the workers first drain the slots that
        # passed meanwhile; then a window of ``--hold`` seconds is measured.
        d.start()
        pids = d.worker_pids
        with PeakRss(pids["worker"]) as rss, PeakRss(pids["work"]) as work_rss:
            d.wait_ready()
            figure(name, "settled_after", settle(lambda: recent_lags(db), 300), "s")
            t0 = time.time()
            cpu0 = {path: cpu_seconds(pid) for path, pid in pids.items()}
            time.sleep(args.hold)
            cpu = {path: cpu_seconds(pid) - cpu0[path] for path, pid in pids.items()}
            t1 = time.time()
            held = held_messages(redis.client())
            expected = slots_between(document["jobs"], t0, t1)
            runs = wait_drained(db, t0, t1, expected)
        lags = [(started - slot).total_seconds() for slot, started in runs if started]
        figure(name, "window", t1 - t0, "s")
        figure(name, "fires_expected", expected)
        figure(name, "fires_recorded", len(runs))
        figure(name, "fire_lag_p50", percentile(lags, 0.5) * 1000, "ms")
        figure(name, "fire_lag_p99", percentile(lags, 0.99) * 1000, "ms")
        for path, seconds in cpu.items():
            figure(name, f"{path}_cpu_per_fire", seconds / max(len(runs), 1) * 1000, "ms")
        figure(name, "worker_peak_rss_per_process", rss.peak / 2**20, "MiB")
        figure(name, "work_worker_peak_rss", work_rss.peak / 2**20, "MiB")
        figure(name, "workers_peak_rss_total", (rss.total + work_rss.total) / 2**20, "MiB")
        figure(name, "redis_rss", redis.client().info("memory")["used_memory_rss"] / 2**20, "MiB")
        figure(name, "messages_held", held)
        c.stop_all()

        # Last, as it sends every job a new tick: each job's zone changed, each one updated.
        for job in document["jobs"]:
            job["timezone"] = "Europe/Berlin"
        paths = write(Path(tmp), document)
        figure(name, "apply_every_job_updated", timed(lambda: apply(c, paths)), "s")
        engine.db.dispose()


def slots_between(specs: list[dict], t0: float, t1: float) -> int:
    """How many slots of ``specs`` (``every Ps offset Oms``, counted from the epoch) lie
    in ``[t0, t1)``."""
    count = 0
    for spec in specs:
        words = spec["schedule"].split()
        period = float(words[1].removesuffix("s"))
        offset = float(words[3].removesuffix("ms")) / 1000 if len(words) > 2 else 0.0
        count += math.ceil((t1 - offset) / period) - math.ceil((t0 - offset) / period)
    return count


def wait_drained(
    db: sqlalchemy.Engine, t0: float, t1: float, expected: int, patience: float = 60
) -> list[tuple[datetime, datetime | None]]:
    """The runs of the slots in ``[t0, t1)`` (slot, start), once all ``expected`` are
    recorded or ``patience`` seconds pass without one more."""
    start, end = (datetime.fromtimestamp(t, UTC) for t in (t0, t1))
    query = select(invocations.c.slot, invocations.c.started_at).where(
        invocations.c.slot >= start, invocations.c.slot < end
    )
    last, since = -1, time.monotonic()
    while True:
        with db.connect() as conn:
            runs = [tuple(row) for row in conn.execute(query)]
        if len(runs) >= expected or time.monotonic() - since > patience:
            return runs  # type: ignore[return-value]
        if len(runs) > last:
            last, since = len(runs), time.monotonic()
        time.sleep(2)


def held_messages(client: redis.Redis) -> int:
    """Messages in the control queue and held unacknowledged by workers (ETA ticks)."""
    return client.llen("cronchain") + client.hlen("unacked")


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
        c.cronchain_alone("apply", str(path), timeout=900)


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
