"""A soak: an hour of steady load with workers restarted on the way; nothing may drift.

    python -m bench.soak [--rate 100] [--period 10] [--minutes 60] [--restart-every 10]
                         [--call 0.2] [--signal TERM] [--no-check]

The fault suite's rig (``tests.faults.rig``: a PostgreSQL cluster and a Redis of its own,
the control path's worker, the work path's, a worker of the user's ``slow`` queue, beat)
runs ``--rate * --period`` jobs of one period, spread over it as ``bench.fire_rate``
spreads them: 90% no-op, 5% ``http`` calls to a local endpoint and 5% ``celery`` tasks,
each call or task body taking ``--call`` seconds, with three attempts each. Every
``--restart-every`` minutes the three workers are restarted in turn, as a deploy does
(``--signal TERM``: a warm shutdown; ``KILL``: a crash, whose attempts in flight lapse and
are retried). Beat runs throughout.

Each window between restarts prints its lag (a run's start minus its slot, by kind: p50,
p99, max), its fires, the CPU per fire of the workers, and each worker's resident memory
60 s after it started and at the window's end (its growth over one life). Beat's memory
is sampled at every window's end (it lives the whole hour). The first window is the
baseline the later ones are read against: a leak shows as memory that grows window after
window, a slowdown as a p99 that climbs.

At the end the fault suite's ledger is taken over the whole hour: every slot recorded
once, every task body and call made once per attempt, nothing lost, crossed or left
unfinished. ``check`` lines: 0 duplicates, 0 lost, 0 crossed, 0 failed, and each
window's p99 lag under 1 s; the script exits 1 if any fails (``--no-check``: 0).
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import select

from bench.common import cpu_seconds, figure, job_specs, percentile, rss_bytes, tree
from cronchain.scheduler.storage.models import invocations, jobs
from tests.faults.rig import WORKERS, Rig, running, settle
from tests.support.jobs import write_job_file
from tests.support.services import postgres_server
from tests.support.wait import now

BENCH = "soak"
KINDS = ("noop", "http", "slow")  # the jobs' name prefixes (``slow``: celery tasks)
WARM = 60.0  # s after a worker's start at which its memory is its baseline
LAG_P99 = 1.0  # s: the bound each window's p99 lag is checked against


def soak_jobs(count: int, period: float, call: float) -> Callable[[Path, Path, str], Path]:
    """The rig's ``jobs``: ``count`` jobs of ``period``, spread over it; one in ten an
    http call or a celery task, alternately, each of ``call`` seconds."""
    controls = {"retries": {"max_attempts": 3, "backoff": "1s"}}

    def write(path: Path, slow_logs: Path, url: str) -> Path:
        specs = job_specs(count, period)
        for i, spec in enumerate(specs):
            spec.pop("noop")
            spec.update(controls)
            if i % 20 == 10:
                spec["name"] = f"http{i:05d}"
                spec["http"] = {"url": f"{url}/{spec['name']}", "method": "POST"}
            elif i % 20 == 0:
                spec["name"] = f"slow{i:05d}"
                log = str(slow_logs / spec["name"])
                spec["celery"] = {
                    "task": "faults.slow",
                    "queue": "slow",
                    "kwargs": {"log": log, "seconds": call},
                }
            else:
                spec["noop"] = {}
        return write_job_file(path, "soak", specs)

    return write


def rss_tree(pid: int) -> int:
    return sum(rss_bytes(p) for p in tree(pid))


def lags_by_kind(rig: Rig, start: datetime, end: datetime) -> dict[str, list[float]]:
    """The lag of every run whose slot lies in ``[start, end)`` and that a worker claimed,
    by kind."""
    query = (
        select(jobs.c.name, invocations.c.slot, invocations.c.started_at)
        .join(jobs, jobs.c.id == invocations.c.job_id)
        .where(invocations.c.slot >= start, invocations.c.slot < end)
        .where(invocations.c.worker.isnot(None))  # claimed: until then, started_at is
    )  # when the attempt was sent (``bench.common.started_runs``)
    lags: dict[str, list[float]] = {kind: [] for kind in KINDS}
    with rig.db.connect() as conn:
        for name, slot, started in conn.execute(query):
            lags[name.rstrip("0123456789")].append((started - slot).total_seconds())
    return lags


def restart(rig: Rig, sig: signal.Signals) -> None:
    """Each worker in turn, as a rolling deploy restarts them."""
    for name in WORKERS:
        rig.cluster.kill(name, sig)
        rig.start_worker(name)


def pids(rig: Rig) -> dict[str, int]:
    return {name: rig.cluster.processes[name].pid for name in (*WORKERS, "beat")}


def window(rig: Rig, n: int, minutes: float, checks: list[bool]) -> None:
    """Run one window (the workers just started), then print its figures."""
    started, clock = now(), time.monotonic()
    cpu = {name: cpu_seconds(pid) for name, pid in pids(rig).items() if name != "beat"}
    time.sleep(WARM)
    warm = {name: rss_tree(pid) for name, pid in pids(rig).items()}
    time.sleep(max(0.0, minutes * 60 - (time.monotonic() - clock)))
    ended = now()
    rss = {name: rss_tree(pid) for name, pid in pids(rig).items()}
    spent = sum(cpu_seconds(pids(rig)[name]) - was for name, was in cpu.items())
    lags = lags_by_kind(rig, started, ended)
    fires = sum(map(len, lags.values()))
    figure(BENCH, f"w{n}_fires", fires)
    figure(BENCH, f"w{n}_worker_cpu_per_fire", 1000 * spent / max(fires, 1), "ms")
    for kind, values in lags.items():
        for q in (0.5, 0.99):
            figure(BENCH, f"w{n}_{kind}_lag_p{round(q * 100)}", 1000 * percentile(values, q), "ms")
        figure(BENCH, f"w{n}_{kind}_lag_max", 1000 * max(values, default=float("nan")), "ms")
    for name in WORKERS:
        figure(BENCH, f"w{n}_{name}_rss_warm", warm[name] / 2**20, "MiB")
        figure(BENCH, f"w{n}_{name}_rss_end", rss[name] / 2**20, "MiB")
    figure(BENCH, f"w{n}_beat_rss_end", rss["beat"] / 2**20, "MiB")
    every = [v for values in lags.values() for v in values]
    checks.append(check(f"w{n}_lag_p99", percentile(every, 0.99), LAG_P99, "s"))


def check(what: str, value: float, bound: float, unit: str = "") -> bool:
    ok = value <= bound
    print(f"{BENCH} check {what} {value:.4g}{unit} <= {bound:g}{unit}: {'PASS' if ok else 'FAIL'}")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=100, help="fires per second")
    parser.add_argument("--period", type=float, default=10, help="every job's period, s")
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--restart-every", type=float, default=10, help="minutes")
    parser.add_argument("--call", type=float, default=0.2, help="s per http call or task")
    parser.add_argument("--signal", choices=("TERM", "KILL"), default="TERM")
    parser.add_argument("--no-check", action="store_true")
    args = parser.parse_args(argv)
    count = round(args.rate * args.period)
    windows = max(1, round(args.minutes / args.restart_every))
    sig = signal.Signals[f"SIG{args.signal}"]
    checks: list[bool] = []
    with (
        tempfile.TemporaryDirectory(prefix="cronchain-soak-") as folder,
        postgres_server() as pg,
        running(
            Path(folder),
            pg,
            jobs=soak_jobs(count, args.period, args.call),
            call_seconds=args.call,
            watchdog_interval=30.0,  # the product's default
        ) as rig,
    ):
        figure(BENCH, "jobs", count)
        figure(BENCH, "offered_rate", count / args.period, "fires/s")
        first = now()
        for n in range(1, windows + 1):
            if n > 1:
                restart(rig, sig)
            window(rig, n, args.restart_every, checks)
        end = now() - timedelta(seconds=1)
        ledger = settle(rig, end, timeout=120)
        print(f"{BENCH} ledger {ledger.line('soak')}, {first:%H:%M:%S} to {end:%H:%M:%S}")
        for line in ledger.detail[:20]:
            print(f"{BENCH} detail {line}")
        figure(BENCH, "duplicates", ledger.duplicates)
        figure(BENCH, "lost", len(ledger.lost))
        checks += [
            check("duplicates", ledger.duplicates, 0),
            check("lost", len(ledger.lost), 0),
            check("crossed", ledger.crossed, 0),
            check("failed", sum(ledger.failed.values()), 0),
            check("unfinished", ledger.unfinished, 0),
        ]
    return 0 if args.no_check or all(checks) else 1


if __name__ == "__main__":
    sys.exit(main())
