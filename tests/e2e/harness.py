"""Real processes for end-to-end tests: celery workers and beat, an HTTP endpoint that
counts how often each invocation really arrives, and the exactly-once ledger check."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple

import sqlalchemy
from sqlalchemy import select

from cronchain.scheduler.storage.clock import SLOW
from cronchain.scheduler.storage.db import make_engine
from cronchain.scheduler.storage.models import UTCDateTime, invocations, jobs
from tests.support.cli import Cli
from tests.support.services import unavailable
from tests.support.wait import wait_until

WATCHDOG_INTERVAL = 5


class Endpoint(ThreadingHTTPServer):
    """A local HTTP server that takes as many connections at once as the work path
    makes: with the standard library's listen backlog of 5, the sixth concurrent
    connection's SYN is dropped and retried a second later, which looks like a slow run."""

    request_queue_size = 256


class Received(NamedTuple):
    at: float  # time.time() as the call came
    path: str
    key: str  # its Idempotency-Key
    invocation: int
    attempt: int


class HitCounter:
    """An HTTP endpoint on loopback that answers after ``delay`` seconds (a test may
    change it while it runs); counts requests per invocation (``hits``) and per attempt
    (``calls``: a call made twice for one attempt is a duplicate; a retry is a new
    attempt)."""

    def __init__(self, delay: float = 0.0, host: str = "127.0.0.1") -> None:
        self.delay = delay
        self.hits: Counter[int] = Counter()
        self.calls: Counter[tuple[int, int]] = Counter()
        self.received: list[Received] = []  # every call, in the order it came
        lock = threading.Lock()
        hits, calls, received, counter = self.hits, self.calls, self.received, self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                invocation = int(self.headers["X-Cronchain-Invocation"])
                attempt = int(self.headers["X-Cronchain-Attempt"])
                came = Received(
                    time.time(), self.path, self.headers["Idempotency-Key"], invocation, attempt
                )
                with lock:
                    hits[invocation] += 1
                    calls[invocation, attempt] += 1
                    received.append(came)
                time.sleep(counter.delay)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = Endpoint((host, 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://{host}:{self.server.server_address[1]}/hit"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


FAKETIME = next(iter(Path("/usr/lib").glob("*/faketime/libfaketime.so.1")), None)


def faketime(offset: str) -> dict[str, str]:
    """The environment of a process whose clock reads ``offset`` ("+30s") off the
    machine's (Debian's libfaketime). Its monotonic clock moves by as much, which keeps
    every length of time: libfaketime 0.9.10 fails Python's ``time.sleep`` (EINVAL) when
    only the wall clock is moved."""
    if FAKETIME is None:
        unavailable("libfaketime (Debian's faketime)")
    return {"LD_PRELOAD": str(FAKETIME), "FAKETIME": offset}


@dataclass
class Cluster:
    """cronchain's processes for one test, sharing one environment."""

    folder: Path
    env: dict[str, str]
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    # A process's clock set off from the machine's by libfaketime ("+30s"), by its name.
    skew: dict[str, str] = field(default_factory=dict)
    # The processes that run in a network namespace (the command prefix that enters it).
    netns: dict[str, list[str]] = field(default_factory=dict)
    _cli: Cli | None = field(default=None, init=False, repr=False)
    _cli_env: dict[str, str] = field(default_factory=dict, init=False, repr=False)

    @classmethod
    def create(cls, folder: Path, **settings: str) -> Cluster:
        env = dict(
            os.environ,
            CRONCHAIN_HOME=str(folder / "home"),
            CRONCHAIN_WATCHDOG_INTERVAL=str(WATCHDOG_INTERVAL),
            CRONCHAIN_HTTP_ALLOW="127.0.0.1",  # the tests' endpoints listen on loopback
        )
        env.update(settings)
        for name in ("CRONCHAIN_DATABASE_URL", "CRONCHAIN_BROKER_URL"):
            if name not in settings:
                env.pop(name, None)
        return cls(folder, env)

    def cronchain(self, *args: str, timeout: float = 120) -> str:
        """``cronchain ARGS`` in the cluster's folder and environment, asserted to exit 0:
        a process of its own, forked from one that imported cronchain once (``Cli``).
        Tests poll history with it, and a new interpreter each time cost a second of CPU;
        a change to ``env`` starts another forker."""
        if self._cli is None or self._cli_env != self.env:
            self.close_cli()
            self._cli, self._cli_env = Cli(self.env, self.folder), dict(self.env)
        self._cli.timeout = timeout
        try:
            return self._cli(*args).stdout
        except subprocess.TimeoutExpired:
            self._cli = None  # it closed itself: the next command starts another
            raise

    def cronchain_alone(self, *args: str, timeout: float = 120) -> str:
        """``cronchain ARGS`` in a new interpreter, as a shell starts it: what the
        benchmarks time, and what a revision without the forker's modules can run."""
        done = subprocess.run(
            [sys.executable, "-m", "cronchain.scheduler.cli", *args],
            env=self.env,
            cwd=self.folder,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def close_cli(self) -> None:
        if self._cli is not None:
            self._cli.close()
            self._cli = None

    def start(self, name: str, *args: str) -> None:
        """Start a process in a session of its own, so that a kill reaches its children."""
        env = self.env | faketime(self.skew[name]) if name in self.skew else self.env
        with (self.folder / f"{name}.log").open("ab") as log:  # the child keeps its own
            self.processes[name] = subprocess.Popen(
                [*self.netns.get(name, []), *args],
                env=env,
                cwd=self.folder,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def start_celery(self, name: str, *args: str) -> None:
        """``celery -A cronchain.tasks ARGS``, as the docs deploy it (docs/how-to/deploy.md)."""
        self.start(name, sys.executable, "-m", "celery", "-A", "cronchain.tasks", *args)

    def start_worker(
        self,
        name: str = "worker",
        queues: str = "cronchain",
        concurrency: int = 2,
        loglevel: str = "INFO",
        pool: str = "prefork",
    ) -> None:
        self.start_celery(
            name,
            "worker",
            "--queues",
            queues,
            "--pool",
            pool,
            "--concurrency",
            str(concurrency),
            "--loglevel",
            loglevel,
            "--hostname",
            f"{name}@%h",
        )

    def start_work_worker(
        self, name: str = "work", concurrency: int = 20, loglevel: str = "INFO"
    ) -> None:
        """The work path, as the docs deploy it (docs/how-to/deploy.md): noop and http
        runs, on threads."""
        self.start_worker(name, "cronchain.work", concurrency, loglevel, pool="threads")

    def wait_ready(self, name: str = "worker", timeout: float = 60, times: int = 1) -> None:
        """Wait for celery's own "ready." line in the worker's log; a log appended to by
        ``times - 1`` earlier starts waits for this start's line."""
        wait_until(lambda: self.log(name).count(" ready.") >= times, timeout, f"{name} to be ready")

    def start_beat(self, name: str = "beat") -> None:
        schedule = str(self.folder / f"{name}-schedule")
        self.start_celery(name, "beat", "--loglevel", "INFO", "--schedule", schedule)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """SIGKILL takes the whole process group at once (a crash); any other signal goes
        to the main process, which stops its children itself (a warm shutdown)."""
        process = self.processes.pop(name)
        if process.poll() is None:
            if sig == signal.SIGKILL:
                os.killpg(process.pid, sig)
            else:
                process.send_signal(sig)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            raise

    def stop_all(self) -> None:
        try:
            for name in list(self.processes):
                self.kill(name, signal.SIGKILL)
        finally:
            self.close_cli()

    def log(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text(errors="replace")


@dataclass
class Ledger:
    expected: int
    succeeded: int
    skipped: dict[str, int]
    skipped_slots: list[tuple[int, datetime]]
    failed: dict[str, int]
    missing: list[tuple[str, datetime]]
    executed_twice: list[int]
    undelivered: list[int]
    unfinished: int
    unexplained: list[tuple[int, datetime]] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"slots expected {self.expected}, succeeded {self.succeeded}, "
            f"skipped {self.skipped} {self.skipped_slots[:3]}, failed {self.failed}, "
            f"lost {len(self.missing)}, "
            f"executed twice {len(self.executed_twice)}, succeeded but never delivered "
            f"{len(self.undelivered)}, unfinished {self.unfinished}, overlap skips with no"
            f" run active {self.unexplained[:3]}"
        )


def check_ledger(db: sqlalchemy.Engine, hits: Counter[int], end: datetime) -> Ledger:
    """Every second-slot of every job, from its first slot to ``end``, must be in history
    exactly once (run, or skipped with a reason); each run must reach the endpoint once."""
    with db.connect() as conn:
        created = dict(conn.execute(select(jobs.c.id, jobs.c.created_at)).all())
        rows = conn.execute(
            select(
                invocations.c.id,
                invocations.c.job_id,
                invocations.c.slot,
                invocations.c.status,
                invocations.c.reason,
                invocations.c.error,
                invocations.c.created_at,
                invocations.c.finished_at,
            ).where(invocations.c.slot <= end)
        ).all()
    found = {(r.job_id, r.slot): r for r in rows}
    assert len(found) == len(rows), "a slot has two invocations"
    missing, expected = [], 0
    for job_id, created_at in created.items():
        slot = created_at.replace(microsecond=0) + timedelta(seconds=1)
        while slot <= end:
            expected += 1
            if (job_id, slot) not in found:
                missing.append((str(job_id), slot))
            slot += timedelta(seconds=1)
    skipped = Counter(r.reason for r in rows if r.status == "SKIPPED")
    failed = Counter(r.error for r in rows if r.status == "FAILED")
    return Ledger(
        expected=expected,
        succeeded=sum(r.status == "SUCCEEDED" for r in rows),
        skipped=dict(skipped),
        skipped_slots=sorted((r.job_id, r.slot) for r in rows if r.status == "SKIPPED"),
        failed=dict(failed),
        missing=missing,
        executed_twice=[inv for inv, n in hits.items() if n > 1],
        undelivered=[r.id for r in rows if r.status == "SUCCEEDED" and hits[r.id] == 0],
        unfinished=sum(r.status in ("STARTING", "RUNNING") for r in rows),
        unexplained=_unexplained_overlaps(rows),
    )


# How far apart two processes' readings of one instant may be: each reads the database's
# clock within half a round trip it keeps (under ``clock.SLOW``), and a group of
# outcomes reads its time a moment before it takes its locks.
CLOCKS_AGREE = timedelta(seconds=SLOW + 0.25)


def _unexplained_overlaps(rows: Sequence[Any]) -> list[tuple[int, datetime]]:
    """The slots skipped as ``overlap`` when no other run of their job was active.

    A slot is skipped as overlap, under the default policy, when its tick finds the
    job's last run still going: on a loaded machine (a cold worker's first calls, the
    suite's busiest minute) a run of an ``every 1s`` job can outlast its second. That
    skip is the policy, not a fault; one with no run active when it was recorded is.
    Only slots' runs are read (the ledger's rows have a slot): a triggered run could
    explain a skip too, and is not looked at."""
    runs: dict[int, list[Any]] = {}
    for r in rows:
        if r.status != "SKIPPED":
            runs.setdefault(r.job_id, []).append(r)
    return sorted(
        (r.job_id, r.slot)
        for r in rows
        if r.status == "SKIPPED"
        and r.reason == "overlap"
        and not any(
            run.created_at <= r.created_at + CLOCKS_AGREE
            and (run.finished_at is None or run.finished_at >= r.created_at - CLOCKS_AGREE)
            for run in runs.get(r.job_id, [])
        )
    )


def first_fire_after(db: sqlalchemy.Engine, t: datetime) -> dict[int, datetime]:
    """For each job, when its first run started at or after ``t``."""
    with db.connect() as conn:
        query = (
            select(
                invocations.c.job_id,
                sqlalchemy.func.min(invocations.c.started_at, type_=UTCDateTime),
            )
            .where(invocations.c.started_at >= t)
            .group_by(invocations.c.job_id)
        )
        return dict(conn.execute(query).all())


def database(url: str) -> sqlalchemy.Engine:
    return make_engine(url)
