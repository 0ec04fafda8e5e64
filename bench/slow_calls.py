"""Thousands of slow calls at once: N ``http`` jobs due at one instant, each answered
after ``--duration`` seconds, on one work-path worker.

    python -m bench.slow_calls [--jobs 1000] [--duration 2] [--period 20]
                               [--baseline REV] [--order baseline,current] [--no-check]

Each run deploys cronchain as ``cronchain up`` does (the control path's worker, prefork,
two processes; one work-path worker, 100 threads; beat) on a fresh database and Redis,
with ``--jobs`` http jobs of one period that all fire at its start, against an endpoint
in this process (asyncio: it holds every connection at once and answers each after
``--duration``). The workers start first, then the jobs are applied; their first herd
is followed until every run has finished, or for a period at most:

- ``sent``: when the control path sent each run to the work path, minus the slot (the
  claim, less the wait the claim logs);
- ``claim``: when the work path claimed each run (its ``started_at``), minus the slot;
- ``start``: when the endpoint received each run's call, minus the slot;
- ``finish``: when each run's outcome was recorded (its ``finished_at``), minus the slot;
- ``answer``: when the endpoint answered each call, minus the slot;
- ``record``: from the endpoint's answer to the record;
- ``work_peak_rss``: the work-path worker's largest resident size during the herd.

``baseline`` is the code at ``--baseline`` (a git revision, checked out in a worktree
and run in the same way), ``current`` this checkout's. The issue's targets are checked
on ``current``: every call started within 1 s and finished within 3.5 s, the worker
under 300 MiB; the script exits 1 if one fails (``--no-check``: 0 whatever they say).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import func, select

from bench.common import (
    PeakRss,
    deployment,
    figure,
    job_specs,
    percentile,
    previous_code,
)
from bench.slow_runs import CLAIMED, check
from cronchain.scheduler.storage.models import invocations, jobs

# The targets.
START_BOUND, FINISH_BOUND, RSS_BOUND = 1.0, 3.5, 300 * 2**20
# The last code whose work path made http calls on its pool of threads.
BASELINE = "4162c2e"


class SlowEndpoint:
    """Answers every request 200 after ``duration`` seconds, all of them at once (one
    asyncio loop on a thread of its own), and notes when each came, by invocation."""

    def __init__(self, duration: float):
        self.duration = duration
        self.received: dict[int, float] = {}  # by invocation: when its call came
        self.answered: dict[int, float] = {}  # and when it was answered
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.port = 0
        self.server: asyncio.Server | None = None
        self.stop = asyncio.Event()

        async def serve() -> None:
            self.server = await asyncio.start_server(self._answer, "127.0.0.1", 0, backlog=4096)
            self.port = self.server.sockets[0].getsockname()[1]
            ready.set()
            try:
                await self.stop.wait()
            finally:
                self.server.close()
                answering = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                for task in answering:
                    task.cancel()
                await asyncio.gather(*answering, return_exceptions=True)

        self.thread = threading.Thread(
            target=self.loop.run_until_complete, args=(serve(),), daemon=True
        )
        self.thread.start()
        ready.wait(10)

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        at = time.time()
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            invocation = None
            for line in head.decode("latin-1").split("\r\n"):
                name, _, value = line.partition(":")
                if name.lower() == "x-cronchain-invocation":
                    invocation = int(value)
                    self.received.setdefault(invocation, at)
            await asyncio.sleep(at + self.duration - time.time())  # from its arrival
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await writer.drain()
            if invocation is not None:
                self.answered.setdefault(invocation, time.time())
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/slow"

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(10)
        self.loop.close()


@contextmanager
def slow_endpoint(duration: float) -> Iterator[SlowEndpoint]:
    endpoint = SlowEndpoint(duration)
    try:
        yield endpoint
    finally:
        endpoint.close()


@dataclass
class Result:
    starts: list[float]
    answers: list[float]
    records: list[float]  # from the endpoint's answer to the outcome's record
    sends: list[float]  # when the control path sent each run to the work path
    claims: list[float]
    finishes: list[float]
    expected: int
    failed: int
    work_peak_rss: int


def run(folder: Path, args: argparse.Namespace, pythonpath: str | None) -> Result:
    env = dict(CRONCHAIN_HTTP_ALLOW="127.0.0.1")  # the endpoint listens on loopback
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    with slow_endpoint(args.duration) as endpoint, deployment(folder, **env) as d:
        http = {"url": endpoint.url, "timeout": "60s"}
        # The workers first, so that they wait for the herd; step = period: every job at
        # offset 0, one herd a period, the first one measured.
        d.start(loglevel="WARNING")
        d.wait_ready()
        specs = job_specs(args.jobs, args.period, args.period, "slow", http=http)
        d.apply({"project": "bench", "jobs": specs})
        with d.db.connect() as conn:
            at = conn.execute(select(func.min(jobs.c.tick_at))).scalar_one()
        query = select(
            invocations.c.id,
            invocations.c.status,
            invocations.c.started_at,
            invocations.c.finished_at,
            invocations.c.worker,
            invocations.c.log,
        ).where(invocations.c.slot == at)
        done = select(func.count()).where(
            invocations.c.slot == at, invocations.c.finished_at.isnot(None)
        )
        with PeakRss(d.worker_pids["work"]) as rss:
            time.sleep(max(0.0, at.timestamp() - time.time()))
            deadline = time.monotonic() + args.period - 1  # before the next herd
            while time.monotonic() < deadline:
                time.sleep(0.5)
                with d.db.connect() as conn:
                    if conn.execute(done).scalar_one() == args.jobs:
                        break
        with d.db.connect() as conn:
            rows = conn.execute(query).all()
        d.cluster.stop_all()
        slot = at.timestamp()
    claimed = [r for r in rows if r.worker is not None]
    answered = endpoint.answered
    return Result(
        records=[
            r.finished_at.timestamp() - answered[r.id]
            for r in claimed
            if r.finished_at and r.id in answered
        ],
        starts=[endpoint.received[r.id] - slot for r in rows if r.id in endpoint.received],
        answers=[answered[r.id] - slot for r in rows if r.id in answered],
        claims=[(r.started_at - at).total_seconds() for r in claimed],
        sends=[
            (r.started_at - at).total_seconds() - float(waited[-1])
            for r in claimed
            if (waited := CLAIMED.findall(r.log or ""))
        ],
        finishes=[(r.finished_at - at).total_seconds() for r in claimed if r.finished_at],
        expected=args.jobs,
        failed=sum(r.status == "FAILED" for r in rows),
        work_peak_rss=rss.peak,
    )


def report(name: str, r: Result) -> None:
    figure(name, "jobs", r.expected)
    figure(name, "started", len(r.starts))
    figure(name, "finished", len(r.finishes))
    figure(name, "failed", r.failed)
    figures = (("sent", r.sends), ("claim", r.claims), ("start", r.starts), ("finish", r.finishes))
    for what, values in (*figures, ("answer", r.answers), ("record", r.records)):
        figure(name, f"{what}_p50", percentile(values, 0.5), "s")
        figure(name, f"{what}_p99", percentile(values, 0.99), "s")
        figure(name, f"{what}_max", max(values, default=math.inf), "s")
    figure(name, "work_peak_rss", r.work_peak_rss / 2**20, "MiB")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.slow_calls", description=__doc__)
    parser.add_argument("--jobs", type=int, default=1000, help="http jobs due at one instant")
    parser.add_argument("--duration", type=float, default=2, help="each call's length, s")
    parser.add_argument("--period", type=float, default=60, help="every job's period, s")
    parser.add_argument("--baseline", default=BASELINE, help="the baseline's git revision")
    parser.add_argument("--order", default="baseline,current", help="which runs, in order")
    parser.add_argument("--no-check", action="store_true", help="exit 0 whatever the checks")
    args = parser.parse_args(argv)
    label = f"slow_calls[jobs={args.jobs},duration={args.duration:g}s]"
    results: dict[str, Result] = {}
    for which in args.order.split(","):
        if which not in ("baseline", "current"):
            parser.error(f"unknown run {which!r}: baseline or current")
        with tempfile.TemporaryDirectory(prefix=f"bench-calls-{which}-") as tmp:
            if which == "baseline":
                with previous_code(args.baseline, Path(tmp)) as pythonpath:
                    results[which] = run(Path(tmp), args, pythonpath)
            else:
                results[which] = run(Path(tmp), args, None)
        report(f"{label} {which}", results[which])
    checks = []
    current = results.get("current")
    if current is not None:
        name = f"{label} current"
        complete = len(current.starts) == len(current.finishes) == current.expected
        checks.append(check(name, "calls not made or not recorded", 0 if complete else 1, 0))
        checks.append(
            check(name, "start_max", max(current.starts, default=math.inf), START_BOUND, " s")
        )
        checks.append(
            check(name, "finish_max", max(current.finishes, default=math.inf), FINISH_BOUND, " s")
        )
        checks.append(
            check(name, "work_peak_rss", current.work_peak_rss / 2**20, RSS_BOUND / 2**20, " MiB")
        )
    failed = checks.count(False)
    print(f"{label} checks {len(checks) - failed} PASS, {failed} FAIL", flush=True)
    return 1 if failed and not args.no_check else 0


if __name__ == "__main__":
    sys.exit(main())
