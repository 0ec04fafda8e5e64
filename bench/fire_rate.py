"""Sustained fires per second and fire lag, cronchain against Celery beat and RedBeat.

    python -m bench.fire_rate [--jobs 1000] [--period 10] [--window 40] [--step 0]

N no-op jobs fire every P seconds, spread evenly over the period (``every P offset O``);
with ``--step 1`` on whole seconds, as cron jobs are, so that jobs share instants.
Each system gets the same slots, a fresh private Redis, and one worker with
``--concurrency 2``; lag is the start of each run minus its slot, for every run that
started inside the measured window. cronchain also records every fire in PostgreSQL;
the baselines record nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from celery import Celery
from sqlalchemy import select

from bench.common import (
    PeakRss,
    cluster,
    cpu_seconds,
    deployment,
    figure,
    percentile,
    recent_lags,
    settle,
    transactions,
)
from scheduler.models import invocations
from tests.e2e.harness import wait_until
from tests.services import redis_server

SYSTEMS = ("cronchain", "beat", "redbeat")


@dataclass
class Run:
    fires: int
    lags: list[float]
    worker_cpu: float
    other_cpu: float  # beat's process
    peak_rss: int
    warmup: float  # seconds until steady state
    transactions: int | None = None


def measure(worker_pid: int, beat_pid: int, window: float) -> tuple[float, float, float, float]:
    t0, w0, b0 = time.time(), cpu_seconds(worker_pid), cpu_seconds(beat_pid)
    time.sleep(window)
    return t0, time.time(), cpu_seconds(worker_pid) - w0, cpu_seconds(beat_pid) - b0


def run_cronchain(folder: Path, jobs: int, period: float, window: float, step: float) -> Run:
    with deployment(folder) as d:
        db, redis, c = d.db, d.redis, d.cluster
        # The worker runs before the jobs exist: each job's first slot comes after its
        # creation, so none is overdue when it starts (no startup backlog to drain).
        # WARNING, as the baseline's worker: INFO writes two lines per task.
        c.start_worker(concurrency=2, loglevel="WARNING")
        c.start_beat()
        wait_until(lambda: Celery(broker=redis.url).control.ping(timeout=1), 60, "the worker")
        d.apply_jobs(jobs, period, step=step)

        try:
            warmup = settle(lambda: recent_lags(db), period)
            with PeakRss(c.processes["worker"].pid) as rss:
                x0 = transactions(db)
                t0, t1, worker, beat = measure(
                    c.processes["worker"].pid, c.processes["beat"].pid, window
                )
                x1 = transactions(db)
        finally:
            c.stop_all()
        start, end = (datetime.fromtimestamp(t, UTC) for t in (t0, t1))
        with db.connect() as conn:
            rows = conn.execute(
                select(invocations.c.slot, invocations.c.started_at).where(
                    invocations.c.started_at >= start, invocations.c.started_at < end
                )
            ).all()
        lags = [(r.started_at - r.slot).total_seconds() for r in rows]
        return Run(len(rows), lags, worker, beat, rss.peak, warmup, x1 - x0)


def run_baseline(
    folder: Path, jobs: int, period: float, window: float, step: float, redbeat: bool
) -> Run:
    with redis_server(folder) as redis:
        env = dict(
            BENCH_BROKER=redis.url,
            BENCH_JOBS=str(jobs),
            BENCH_PERIOD=f"{period:g}",
            BENCH_STEP=f"{step:g}",
        )
        c = cluster(folder, **env)
        app = [sys.executable, "-m", "celery", "-A", "bench.beat_app"]
        c.start("worker", *app, "worker", "--concurrency", "2", "--loglevel", "WARNING")
        beat = [*app, "beat", "--loglevel", "WARNING", "--schedule", str(folder / "schedule")]
        if redbeat:
            beat += ["--scheduler", "redbeat.RedBeatScheduler", "--max-interval", "1"]
        c.start("beat", *beat)

        def recent_lags() -> list[float]:
            since = time.time() - 2
            lags = []
            for record in redis.client().lrange("bench:lags", -2000, -1):
                started, slot = map(float, record.split())
                if started >= since:
                    lags.append(started - slot)
            return lags

        try:
            warmup = settle(recent_lags, period)
            with PeakRss(c.processes["worker"].pid) as rss:
                t0, t1, worker, beat_cpu = measure(
                    c.processes["worker"].pid, c.processes["beat"].pid, window
                )
        finally:
            c.stop_all()
        lags = []
        for record in redis.client().lrange("bench:lags", 0, -1):
            started, slot = map(float, record.split())
            if t0 <= started < t1:
                lags.append(started - slot)
        return Run(len(lags), lags, worker, beat_cpu, rss.peak, warmup)


def report(label: str, system: str, run: Run, window: float, offered: float) -> None:
    name = f"fire_rate[{label}] {system}"
    figure(name, "offered", offered, "fires/s")
    figure(name, "warmup", run.warmup, "s")
    figure(name, "fires", run.fires / window, "fires/s")
    for q, tag in ((0.5, "p50"), (0.99, "p99")):
        figure(name, f"lag_{tag}", percentile(run.lags, q) * 1000, "ms")
    figure(name, "lag_max", max(run.lags, default=float("nan")) * 1000, "ms")
    if run.fires:
        figure(name, "worker_cpu_per_fire", run.worker_cpu / run.fires * 1000, "ms")
        figure(name, "beat_cpu_per_fire", run.other_cpu / run.fires * 1000, "ms")
        if run.transactions is not None:
            figure(name, "transactions_per_fire", run.transactions / run.fires)
    figure(name, "worker_peak_rss", run.peak_rss / 2**20, "MiB")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fire_rate", description=__doc__)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--period", type=float, default=10)
    parser.add_argument("--window", type=float, default=40, help="seconds measured")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument(
        "--step", type=float, default=0, help="slots on multiples of this many seconds (1: cron)"
    )
    args = parser.parse_args(argv)
    label = f"jobs={args.jobs},period={args.period:g}s"
    label += f",step={args.step:g}s" if args.step else ""
    offered = args.jobs / args.period
    for system in args.systems.split(","):
        with tempfile.TemporaryDirectory(prefix=f"bench-{system}-") as tmp:
            folder = Path(tmp)
            if system == "cronchain":
                run = run_cronchain(folder, args.jobs, args.period, args.window, args.step)
            elif system in ("beat", "redbeat"):
                redbeat = system == "redbeat"
                run = run_baseline(folder, args.jobs, args.period, args.window, args.step, redbeat)
            else:
                parser.error(f"unknown system {system!r}; use {', '.join(SYSTEMS)}")
            report(label, system, run, args.window, offered)


if __name__ == "__main__":
    main()
