"""Sustained fires per second and fire lag, cronchain against Celery beat and RedBeat.

    python -m bench.fire_rate [--jobs 1000] [--period 10] [--window 40] [--step 0]

N no-op jobs fire every P seconds, spread evenly over the period (``every P offset O``);
with ``--step 1`` on whole seconds, as cron jobs are, so that jobs share instants.
Each system gets the same slots, a fresh private Redis, and one worker with
``--concurrency 2``; cronchain is deployed as ``cronchain up`` deploys it, with the work
path besides (a worker of 100 threads that claims and runs each noop run). Lag is the
start of each run minus its slot, for every run that started inside the measured window:
for cronchain, the moment a work-path worker claimed it. cronchain also records every
fire in PostgreSQL; the baselines record nothing. cronchain's ``worker`` figures are both
paths together; ``control`` and ``work`` are each path alone.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from bench.common import (
    MachineCpu,
    PeakRss,
    cluster,
    cpu_seconds,
    deployment,
    figure,
    percentile,
    recent_lags,
    settle,
    started_runs,
    transactions,
)
from tests.e2e.harness import Cluster
from tests.services import redis_server

SYSTEMS = ("cronchain", "beat", "redbeat")


@dataclass
class Run:
    fires: int
    lags: list[float]
    worker_cpu: float  # every worker's
    other_cpu: float  # beat's process
    peak_rss: int
    warmup: float  # seconds until steady state
    transactions: int | None = None
    paths: dict[str, tuple[float, int]] = field(default_factory=dict)  # CPU, peak RSS
    died: list[str] = field(default_factory=list)  # processes that exited during the run
    machine: MachineCpu | None = None  # cronchain's: its CPU, and the rest of the machine's


def measure(pids: dict[str, int], window: float) -> tuple[float, float, dict[str, float]]:
    """CPU seconds of each named process tree over ``window`` seconds from now."""
    t0, before = time.time(), {name: cpu_seconds(pid) for name, pid in pids.items()}
    time.sleep(window)
    t1 = time.time()
    return t0, t1, {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}


def run_cronchain(folder: Path, jobs: int, period: float, window: float, step: float) -> Run:
    with deployment(folder) as d:
        db, c = d.db, d.cluster
        # The workers run before the jobs exist: each job's first slot comes after its
        # creation, so none is overdue when it starts (no startup backlog to drain).
        # WARNING, as the baseline's worker: INFO writes two lines per task.
        d.start(loglevel="WARNING")
        d.wait_ready()
        d.apply_jobs(jobs, period, step=step)

        try:
            warmup = settle(lambda: recent_lags(db), period)
            pids = {**d.worker_pids, "beat": c.processes["beat"].pid}
            with (
                PeakRss(pids["worker"]) as control_rss,
                PeakRss(pids["work"]) as work_rss,
                MachineCpu(db) as machine,
            ):
                x0 = transactions(db)
                t0, t1, cpu = measure(pids, window)
                x1 = transactions(db)
            died = dead(c)
        finally:
            c.stop_all()
        start, end = (datetime.fromtimestamp(t, UTC) for t in (t0, t1))
        rows = started_runs(db, start, end)
        lags = [(r.started_at - r.slot).total_seconds() for r in rows]
        paths = {
            "control": (cpu["worker"], control_rss.peak),
            "work": (cpu["work"], work_rss.peak),
        }
        worker = cpu["worker"] + cpu["work"]
        peak = max(control_rss.peak, work_rss.peak)
        run = Run(len(rows), lags, worker, cpu["beat"], peak, warmup, x1 - x0, paths, died)
        run.machine = machine
        return run


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
                pids = {name: c.processes[name].pid for name in ("worker", "beat")}
                t0, t1, cpu = measure(pids, window)
                worker, beat_cpu = cpu["worker"], cpu["beat"]
            died = dead(c)
        finally:
            c.stop_all()
        lags = []
        for record in redis.client().lrange("bench:lags", 0, -1):
            started, slot = map(float, record.split())
            if t0 <= started < t1:
                lags.append(started - slot)
        return Run(len(lags), lags, worker, beat_cpu, rss.peak, warmup, died=died)


def dead(c: Cluster) -> list[str]:
    """The processes of ``c`` that exited before the end of the run, each with the end
    of its log on stderr (RedBeat's beat, for one, exits when a pass outlasts its lock)."""
    died = [name for name, process in c.processes.items() if process.poll() is not None]
    for name in died:
        print(f"--- {name} exited; the end of its log:", c.log(name)[-2000:], file=sys.stderr)
    return died


def report(label: str, system: str, run: Run, window: float, offered: float) -> None:
    name = f"fire_rate[{label}] {system}"
    for process in run.died:
        figure(name, f"{process}_exited_during_run", 1)
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
        for path, (cpu, _) in run.paths.items():
            figure(name, f"{path}_cpu_per_fire", cpu / run.fires * 1000, "ms")
    figure(name, "worker_peak_rss", run.peak_rss / 2**20, "MiB")
    for path, (_, rss) in run.paths.items():
        figure(name, f"{path}_peak_rss", rss / 2**20, "MiB")
    if run.machine is not None:  # with its PostgreSQL backends; and what else ran
        run.machine.print_figures(name, run.fires)


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
