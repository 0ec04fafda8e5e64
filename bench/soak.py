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

The hour is cut into windows at the restarts; each window begins with its restart, so
that the slots that come while workers stop and start are counted in it. Once the soak
is over, each window prints its runs as recorded: their lag (a claim minus its slot, by
kind: p50, p99, max), its fires, the runs no worker ever claimed (``unclaimed``: a
stalled path shows here, not as fewer fires) and the slots skipped (``misfire`` or
``overlap``, the default policies); and as measured while it ran, the CPU per fire of
the workers, and each worker's resident memory 60 s after it started and at the
window's end (its growth over one life). Beat's memory is sampled at every window's end
(it lives the whole hour). The first window, with no restart, is the baseline the later
ones are read against: a leak shows as memory that grows window after window, a
slowdown as a p99 that climbs.

At the end the fault suite's ledger is taken over the whole hour: every slot recorded
once, every task body and call made once per attempt, nothing lost, crossed, unexpected
or left unfinished. ``check`` lines: 0 duplicates, 0 lost, 0 crossed, 0 failed, 0
unfinished, 0 unexpected, and for each window a p99 lag under 1 s and 0 unclaimed; the
script exits 1 if any fails (``--no-check``: 0).
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
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


@dataclass
class Runs:
    """A window's runs, as recorded once the soak is over: each claimed run's lag by
    kind, the runs that no worker ever claimed, and the slots skipped."""

    lags: dict[str, list[float]]
    unclaimed: int
    skipped: int


def runs_in(rig: Rig, start: datetime, end: datetime) -> Runs:
    """The runs whose slot lies in ``[start, end)``. A claimed run's lag is its claim
    minus its slot (until a worker claims it, ``started_at`` is when the attempt was
    sent: ``bench.common.started_runs``)."""
    query = (
        select(jobs.c.name, invocations.c.slot, invocations.c.started_at)
        .add_columns(invocations.c.worker, invocations.c.status)
        .join(jobs, jobs.c.id == invocations.c.job_id)
        .where(invocations.c.slot >= start, invocations.c.slot < end)
    )
    runs = Runs({kind: [] for kind in KINDS}, 0, 0)
    with rig.db.connect() as conn:
        for name, slot, started, worker, status in conn.execute(query):
            if status == "SKIPPED":
                runs.skipped += 1
            elif worker is None:
                runs.unclaimed += 1
            else:
                runs.lags[name.rstrip("0123456789")].append((started - slot).total_seconds())
    return runs


def restart(rig: Rig, sig: signal.Signals) -> None:
    """Each worker in turn, as a rolling deploy restarts them."""
    for name in WORKERS:
        rig.cluster.kill(name, sig)
        rig.start_worker(name)


def pids(rig: Rig) -> dict[str, int]:
    return {name: rig.cluster.processes[name].pid for name in (*WORKERS, "beat")}


@dataclass
class Window:
    """What a window measured while it ran; its runs are read at the end."""

    start: datetime
    end: datetime
    cpu: float  # the workers' CPU seconds from their start (after the restart) to the end
    warm: dict[str, int]  # each process's memory ``WARM`` s after its start
    rss: dict[str, int]  # and at the window's end


def window(rig: Rig, start: datetime, minutes: float, sig: signal.Signals | None) -> Window:
    """One window from ``start`` (the previous one's end): the rolling restart (with
    ``sig``; none for the first window), then the load until ``minutes`` have passed."""
    clock = time.monotonic()
    if sig is not None:
        restart(rig, sig)
    cpu = {name: cpu_seconds(pid) for name, pid in pids(rig).items() if name != "beat"}
    time.sleep(WARM)
    warm = {name: rss_tree(pid) for name, pid in pids(rig).items()}
    time.sleep(max(0.0, minutes * 60 - (time.monotonic() - clock)))
    rss = {name: rss_tree(pid) for name, pid in pids(rig).items()}
    spent = sum(cpu_seconds(pids(rig)[name]) - was for name, was in cpu.items())
    return Window(start, now(), spent, warm, rss)


def report(rig: Rig, n: int, w: Window) -> bool:
    """The window's figures; whether its p99 lag and its unclaimed runs pass."""
    runs = runs_in(rig, w.start, w.end)
    fires = sum(map(len, runs.lags.values()))
    figure(BENCH, f"w{n}_fires", fires)
    figure(BENCH, f"w{n}_unclaimed", runs.unclaimed)
    figure(BENCH, f"w{n}_skipped", runs.skipped)
    figure(BENCH, f"w{n}_worker_cpu_per_fire", 1000 * w.cpu / max(fires, 1), "ms")
    for kind, values in runs.lags.items():
        for q in (0.5, 0.99):
            figure(BENCH, f"w{n}_{kind}_lag_p{round(q * 100)}", 1000 * percentile(values, q), "ms")
        figure(BENCH, f"w{n}_{kind}_lag_max", 1000 * max(values, default=float("nan")), "ms")
    for name in WORKERS:
        figure(BENCH, f"w{n}_{name}_rss_warm", w.warm[name] / 2**20, "MiB")
        figure(BENCH, f"w{n}_{name}_rss_end", w.rss[name] / 2**20, "MiB")
    figure(BENCH, f"w{n}_beat_rss_end", w.rss["beat"] / 2**20, "MiB")
    every = [v for values in runs.lags.values() for v in values]
    checks = [
        check(f"w{n}_lag_p99", percentile(every, 0.99), LAG_P99, "s"),
        check(f"w{n}_unclaimed", runs.unclaimed, 0),
    ]
    return all(checks)


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
    count_windows = max(1, round(args.minutes / args.restart_every))
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
        windows: list[Window] = []
        start = now()
        for n in range(count_windows):
            windows.append(window(rig, start, args.restart_every, sig if n else None))
            start = windows[-1].end
        end = now() - timedelta(seconds=1)
        ledger = settle(rig, end, timeout=120)
        checks += [report(rig, n, w) for n, w in enumerate(windows, 1)]
        print(
            f"{BENCH} ledger {ledger.line('soak')}, {windows[0].start:%H:%M:%S} to {end:%H:%M:%S}"
        )
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
            check("unexpected", len(ledger.unexpected), 0),
        ]
    return 0 if args.no_check or all(checks) else 1


if __name__ == "__main__":
    sys.exit(main())
