"""Slow runs beside fast ones: no endpoint, however slow, makes another job late.

    python -m bench.slow_runs [--fast 1000] [--slow 50] [--period 10] [--duration 5]
                              [--window 60] [--order baseline,mixed] [--no-check]
                              [--delay-ms 0]

On one machine's default deployment, as ``cronchain up`` runs it (the control path's
worker, prefork, two processes; the work path's, 100 threads; beat), with the product's
default settings (watchdog every 30 s), two runs one after the other, each on a fresh
database and Redis:

- ``baseline``: the fast jobs alone: ``--fast`` no-op jobs every ``--period`` seconds,
  spread over it as ``bench.fire_rate`` spreads them (1,000 every 10 s: 100 fires/s);
- ``mixed``: the same fast jobs, and ``--slow`` http jobs of the same period, spread the
  same way, whose endpoint (in this process) answers after ``--duration`` seconds (50
  jobs, 5 s every 10 s: 25 runs in flight on average).

Lag is a run's start (when a work-path worker claimed it) minus its slot. After steady
state (``bench.common.settle``), every slot due in a window of ``--window`` seconds is
followed until the deployment stops, ``DRAIN`` seconds after the window's end: lags of
the runs that started, and ``unstarted``, the slots whose run no worker had claimed by
then. Figures per run and per group (fast, slow), then the mixed run's fast lags over the
baseline's.

With ``--delay-ms``, the deployment reaches PostgreSQL and Redis a round trip of that
long away (``bench.delay``); the endpoint stays on loopback.

The issue's targets are checked at the end, one ``check`` line each, PASS or FAIL with
the margin left (how far under its bound the figure is, as a share of the bound); the
script exits with status 1 if any check fails (``--no-check``: 0 whatever they say).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from sqlalchemy import select

from bench.common import (
    MachineCpu,
    PeakRss,
    analyze,
    cpu_seconds,
    deployment,
    figure,
    job_specs,
    percentile,
    recent_lags,
    settle,
    started_runs,
    transactions,
)
from bench.delay import round_trips
from cronchain.scheduler.storage.models import invocations, jobs
from cronchain.scheduler.timing.schedules import parse_schedule
from tests.e2e.harness import Endpoint
from tests.support.services import serving

# The debug log's line of a claim (scheduler.core.attempts.Attempts.claim): how long the
# attempt had waited for a work-path worker since it was sent.
CLAIMED = re.compile(r"claimed by \S+ after ([\d.]+)s")
DRAIN = 5.0  # s the deployment runs on after the window, for its last slots to start
GROUPS = ("fast", "slow")
# The targets.
FAST_P50, FAST_P99, SLOW_P99, RATIO = 0.050, 0.250, 0.250, 1.2


class SlowServer(Endpoint):
    """Takes 256 pending connections (``Endpoint``; the standard 5 drops SYNs when the
    work path calls it many at once) and answers each on a daemon thread of its own."""

    daemon_threads = True


@contextmanager
def slow_endpoint(duration: float) -> Iterator[str]:
    """An HTTP endpoint on loopback that answers 200 after ``duration`` seconds."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            time.sleep(duration)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    with serving(SlowServer(("127.0.0.1", 0), Handler)) as port:
        yield f"http://127.0.0.1:{port}/slow"


@dataclass
class Group:
    lags: list[float] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)  # claim minus send: the work path's
    expected: int = 0  # slots due in the window
    unstarted: int = 0
    failed: int = 0
    busy: float = 0.0  # seconds of runs, summed (a measure of runs in flight)


@dataclass
class Result:
    groups: dict[str, Group]
    fires: int
    warmup: float
    control_cpu: float
    work_cpu: float
    transactions: int
    work_peak_rss: int
    machine: MachineCpu
    round_trips: dict[str, float]  # ms, to each server, as the deployment makes them


def group_of(name: str) -> str:
    return "slow" if name.startswith("slow") else "fast"


def slots_due(schedule: str, start: datetime, end: datetime) -> list[datetime]:
    every = parse_schedule(schedule, "UTC")
    slots, t = [], every.next_after(start - timedelta(microseconds=1))
    while t is not None and t < end:
        slots.append(t)
        t = every.next_after(t)
    return slots


def run(folder: Path, args: argparse.Namespace, slow: int) -> Result:
    env = dict(
        CRONCHAIN_WATCHDOG_INTERVAL="30",  # the product's default, not the tests' 5 s
        CRONCHAIN_HTTP_ALLOW="127.0.0.1",  # the endpoint listens on loopback
    )
    with (
        slow_endpoint(args.duration) as url,
        deployment(folder, delay_ms=args.delay_ms, **env) as d,
    ):
        db, c = d.db, d.cluster
        specs = job_specs(args.fast, args.period, prefix="fast")
        http = {"url": url, "timeout": "30s"}
        specs += job_specs(slow, args.period, prefix="slow", http=http)
        # The workers first, as in fire_rate, so that no slot passes before they run.
        d.start(loglevel="WARNING")
        d.wait_ready()
        d.apply({"project": "bench", "jobs": specs})
        try:
            warmup = settle(lambda: recent_lags(db), args.period)
            analyze(db)  # the runs of the warm-up are in the history now
            pids = d.worker_pids
            trips = round_trips(c.env["CRONCHAIN_BROKER_URL"], c.env["CRONCHAIN_DATABASE_URL"])
            with PeakRss(pids["work"]) as rss:
                cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
                with MachineCpu(db, frozenset(d.delays.pids)) as machine:
                    x0, t0 = transactions(db), datetime.now(UTC)
                    time.sleep(args.window)
                    x1, t1 = transactions(db), datetime.now(UTC)
                cpu = {name: cpu_seconds(pid) - cpu0[name] for name, pid in pids.items()}
                time.sleep(DRAIN)
        finally:
            c.stop_all()
        groups = {g: Group() for g in GROUPS}
        with db.connect() as conn:
            for job in conn.execute(select(jobs.c.name, jobs.c.schedule)):
                groups[group_of(job.name)].expected += len(slots_due(job.schedule, t0, t1))
            # The runs of the window's slots that a worker claimed (started) by the stop.
            claimed = conn.execute(
                select(
                    jobs.c.name,
                    invocations.c.slot,
                    invocations.c.status,
                    invocations.c.started_at,
                    invocations.c.finished_at,
                    invocations.c.log,
                )
                .join(jobs, jobs.c.id == invocations.c.job_id)
                .where(
                    invocations.c.slot >= t0,
                    invocations.c.slot < t1,
                    invocations.c.worker.isnot(None),
                )
            ).all()
        for r in claimed:
            g = groups[group_of(r.name)]
            g.lags.append((r.started_at - r.slot).total_seconds())
            waited = CLAIMED.findall(r.log or "")
            if waited:
                g.waits.append(float(waited[-1]))
            g.failed += r.status == "FAILED"
            if r.finished_at is not None:
                g.busy += (r.finished_at - r.started_at).total_seconds()
        for g in groups.values():
            g.unstarted = g.expected - len(g.lags)
        fires = len(started_runs(db, t0, t1))
        return Result(
            groups,
            fires,
            warmup,
            cpu["worker"],
            cpu["work"],
            x1 - x0,
            rss.peak,
            machine,
            trips,
        )


def report(name: str, result: Result, window: float) -> None:
    figure(name, "warmup", result.warmup, "s")
    figure(name, "fires", result.fires / window, "fires/s")
    for group, g in result.groups.items():
        if not g.expected:
            continue
        figure(name, f"{group} slots", g.expected)
        figure(name, f"{group} lag_p50", percentile(g.lags, 0.5) * 1000, "ms")
        figure(name, f"{group} lag_p99", percentile(g.lags, 0.99) * 1000, "ms")
        figure(name, f"{group} lag_max", max(g.lags, default=float("nan")) * 1000, "ms")
        # Of the lag, the work path's share: from the send to the claim.
        figure(name, f"{group} claim_wait_p50", percentile(g.waits, 0.5) * 1000, "ms")
        figure(name, f"{group} claim_wait_p99", percentile(g.waits, 0.99) * 1000, "ms")
        figure(name, f"{group} unstarted", g.unstarted)
        figure(name, f"{group} failed", g.failed)
        if group == "slow":
            figure(name, f"{group} runs_in_flight_mean", g.busy / window)
    if result.fires:
        figure(name, "control_cpu_per_fire", result.control_cpu / result.fires * 1000, "ms")
        figure(name, "work_cpu_per_fire", result.work_cpu / result.fires * 1000, "ms")
        figure(name, "transactions_per_fire", result.transactions / result.fires)
    figure(name, "work_peak_rss", result.work_peak_rss / 2**20, "MiB")
    # Of the machine's two cores: this deployment's, and what else ran (on a shared
    # machine, other people's tests: a figure of a run where this is high is suspect).
    result.machine.print_figures(name, result.fires)
    for server, trip in result.round_trips.items():
        figure(name, f"{server}_round_trip", trip, "ms")


def check(name: str, what: str, value: float, bound: float, unit: str = "") -> bool:
    """``value`` <= ``bound``: PASS or FAIL, with the margin left as a share of the bound."""
    ok = value <= bound
    margin = f" (margin {(bound - value) / bound * 100:.0f}%)" if bound else ""
    verdict = "PASS" if ok else "FAIL"
    print(
        f"{name} check {what}: {value:.4g}{unit} <= {bound:.4g}{unit}{margin} {verdict}", flush=True
    )
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.slow_runs", description=__doc__)
    parser.add_argument("--fast", type=int, default=1000, help="fast (no-op) jobs")
    parser.add_argument("--slow", type=int, default=50, help="slow (http) jobs")
    parser.add_argument("--period", type=float, default=10, help="every job's period, s")
    parser.add_argument("--duration", type=float, default=5, help="a slow run's length, s")
    parser.add_argument("--window", type=float, default=60, help="seconds measured")
    parser.add_argument("--order", default="baseline,mixed", help="which runs, in order")
    parser.add_argument("--no-check", action="store_true", help="exit 0 whatever the checks")
    parser.add_argument(
        "--delay-ms",
        type=float,
        default=0,
        help="a round trip this long between the deployment and its servers (bench.delay)",
    )
    args = parser.parse_args(argv)
    delay = f",delay={args.delay_ms:g}ms" if args.delay_ms else ""
    label = (
        f"slow_runs[fast={args.fast},slow={args.slow},period={args.period:g}s,"
        f"duration={args.duration:g}s{delay}]"
    )
    results: dict[str, Result] = {}
    for which in args.order.split(","):
        if which not in ("baseline", "mixed"):
            parser.error(f"unknown run {which!r}: baseline or mixed")
        with tempfile.TemporaryDirectory(prefix=f"bench-slow-{which}-") as tmp:
            slow = args.slow if which == "mixed" else 0
            results[which] = run(Path(tmp), args, slow)
        report(f"{label} {which}", results[which], args.window)

    checks = []
    mixed, base = results.get("mixed"), results.get("baseline")
    if mixed is not None:
        fast, slow = mixed.groups["fast"], mixed.groups["slow"]
        name = f"{label} mixed"
        checks.append(
            check(name, "fast lag_p50", percentile(fast.lags, 0.5) * 1000, FAST_P50 * 1000, " ms")
        )
        checks.append(
            check(name, "fast lag_p99", percentile(fast.lags, 0.99) * 1000, FAST_P99 * 1000, " ms")
        )
        checks.append(
            check(name, "slow lag_p99", percentile(slow.lags, 0.99) * 1000, SLOW_P99 * 1000, " ms")
        )
        checks.append(check(name, "fast unstarted", fast.unstarted, 0))
        checks.append(check(name, "slow unstarted", slow.unstarted, 0))
    if mixed is not None and base is not None:
        name = f"{label} mixed/baseline"
        for q, tag in ((0.5, "p50"), (0.99, "p99")):
            ratio = percentile(mixed.groups["fast"].lags, q) / percentile(
                base.groups["fast"].lags, q
            )
            figure(name, f"fast lag_{tag}_ratio", ratio)
            checks.append(check(name, f"fast lag_{tag}_ratio", ratio, RATIO))
    failed = checks.count(False)
    print(f"{label} checks {len(checks) - failed} PASS, {failed} FAIL", flush=True)
    return 1 if failed and not args.no_check else 0


if __name__ == "__main__":
    sys.exit(main())
