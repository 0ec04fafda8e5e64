"""One private deployment per fault test, the faults themselves, and the ledger.

A rig is a PostgreSQL cluster and a Redis server of the test's own (so it can kill them),
celery workers (control path, work path, the user's queue) and beat as real processes,
50 noop jobs firing every 1 s or 2 s, a few slow ``celery`` jobs and a few slow ``http``
jobs against an endpoint of the rig's own. A fault is a function of the rig; the ledger
then checks the whole window against each job's own schedule, and each run's outcome
against the work done for that job (each slow job's task body writes to a file of its
own job, each http call names its run).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import redis
import sqlalchemy
from celery import Celery
from kombu import Connection
from sqlalchemy import func, select

from cronchain.migrations import upgrade
from cronchain.scheduler.storage.db import make_engine
from cronchain.scheduler.storage.models import UTCDateTime, invocations, jobs
from cronchain.scheduler.timing.schedules import parse_schedule
from tests.e2e.harness import Cluster, HitCounter
from tests.support.jobs import write_job_file
from tests.support.netns import Namespace
from tests.support.repo import ROOT
from tests.support.services import PostgresServer, RedisServer
from tests.support.wait import now, wait_until

NOOP_JOBS = 50
SLOW_JOBS = 3
HTTP_JOBS = 3  # http runs of 1.5 s against an endpoint of the rig's own, on the work path
WATCHDOG_INTERVAL = 2.0
LEASE = 3.0  # seconds; how long the rig must be quiet before nothing may be unfinished
# cronchain's control path, its work path (noop and http runs, on threads) and the
# user's slow task run on workers of their own, as the manual advises (docs/how-to/work-path.md).
WORKERS = {"worker": "cronchain", "work": "cronchain.work", "tasks": "slow"}
POOLS = {"work": ("threads", 20)}  # the others: prefork, two processes
SUMMARY: list[str] = []  # one line per fault, printed at the end of the run
FINAL = ("SUCCEEDED", "SKIPPED", "FAILED", "ABORTED")
WITNESSED = ("slow", "http")  # the jobs whose work the rig sees done (name prefixes)


def fault_job_file(path: Path, slow_logs: Path, slow_url: str) -> Path:
    """The rig's jobs: noop ones, celery tasks that take 1.5 s on the ``slow`` queue, and
    http runs of 1.5 s against ``slow_url`` (each on a path of its own name); each with a
    short lease and five attempts."""
    controls = {"lease": f"{LEASE:g}s", "retries": {"max_attempts": 5, "backoff": "1s"}}
    specs = [
        {"name": f"noop{i:02d}", "schedule": f"every {1 + i % 2}s", "noop": {}, **controls}
        for i in range(NOOP_JOBS)
    ]
    specs += [
        {
            "name": f"slow{i}",
            "schedule": "every 2s",
            "celery": {
                "task": "faults.slow",
                "queue": "slow",
                "kwargs": {"log": str(slow_logs / f"slow{i}"), "seconds": 1.5},
            },
            **controls,
        }
        for i in range(SLOW_JOBS)
    ]
    specs += [
        {
            "name": f"http{i}",
            "schedule": "every 2s",
            "http": {"url": f"{slow_url}/http{i}", "method": "POST", "timeout": "10s"},
            **controls,
        }
        for i in range(HTTP_JOBS)
    ]
    return write_job_file(path, "faults", specs)


# A worker to start: its queues, and the rig's worker whose pool it has (None: its own).
Started = tuple[str | None, str | None]


@dataclass
class Rig:
    folder: Path
    pg: PostgresServer
    redis: RedisServer
    standby: PostgresServer | None = None  # a streaming replica of pg (the failovers)
    host: str = "127.0.0.1"  # where the servers and the http jobs' endpoint listen
    namespace: Namespace | None = None  # where the workers that a partition cuts off run
    broker: str | None = None  # another broker than the rig's Redis (RabbitMQ's URL)
    # When the database lost what it committed (a replica promoted without it): work
    # begun in that window may be done again, as the manual says (``Ledger.redone``).
    forgotten: tuple[float, float] | None = None
    # The jobs (``fault_job_file``'s arguments), how long the endpoint takes to answer
    # each http call, and how often the watchdog passes: ``bench.soak`` runs a bigger
    # mix. (The faults' bounds, ``recovery_bound``, assume ``WATCHDOG_INTERVAL``.)
    jobs: Callable[[Path, Path, str], Path] = fault_job_file
    call_seconds: float = 1.5
    watchdog_interval: float = WATCHDOG_INTERVAL
    cluster: Cluster = field(init=False)
    db: sqlalchemy.Engine = field(init=False)

    @property
    def url(self) -> str:
        """The database cronchain reaches: pg, or with a standby whichever of the two
        takes writes (a multi-host URL, as a user's failover setup names both)."""
        if self.standby is None:
            return self.pg.url
        hosts = "&".join(f"host=127.0.0.1:{s.port}" for s in (self.pg, self.standby))
        return f"postgresql+psycopg://postgres@/postgres?{hosts}&target_session_attrs=read-write"

    def __post_init__(self) -> None:
        self.slow_logs = self.folder / "slow-runs"  # a file per slow job, named after it
        self.cluster = Cluster.create(
            self.folder,
            CRONCHAIN_DATABASE_URL=self.url,
            CRONCHAIN_BROKER_URL=self.broker or self.redis.url,
            CRONCHAIN_WATCHDOG_INTERVAL=f"{self.watchdog_interval:g}",
            CRONCHAIN_IMPORTS="tests.faults.fault_tasks",
            CRONCHAIN_HTTP_ALLOW=self.host,
            PYTHONPATH=str(ROOT),
        )
        self.db = make_engine(self.url)
        self.endpoint = HitCounter(delay=self.call_seconds, host=self.host)

    def up(self) -> None:
        """Migrate, start a worker and beat, apply the jobs, and let them run a while."""
        upgrade(self.db)
        self.slow_logs.mkdir()
        self.start_beat()
        self.start_workers()
        jobs_file = self.jobs(self.folder / "jobs.yaml", self.slow_logs, self.endpoint.url)
        self.cluster.cronchain("apply", str(jobs_file))
        self.fired_since(now(), 20)

    def start_workers(self, which: Mapping[str, Started] | None = None) -> None:
        """Start the rig's workers, or ``which`` (name: queues and the rig's worker whose
        pool it has, as ``start_worker`` takes them), all at once, then wait until each
        consumes: a worker takes about 2 s to boot, and one after another they took
        that much each."""
        if which is None:
            which = dict.fromkeys(WORKERS, (None, None))
        readies = {name: self._readies(name) for name in which}
        for name, (queues, like) in which.items():
            self._launch(name, queues, like)
        for name in which:
            self.cluster.wait_ready(name, times=readies[name] + 1)

    def kill_workers(self) -> None:
        for name in WORKERS:
            self.kill(name)

    def start_worker(
        self, name: str = "worker", queues: str | None = None, like: str | None = None
    ) -> None:
        """Start a worker (with the pool of the rig's worker ``like``, else its own) and
        wait until it consumes (its log says "ready." once more)."""
        before = self._readies(name)
        self._launch(name, queues, like)
        self.cluster.wait_ready(name, times=before + 1)

    def _readies(self, name: str) -> int:
        """How many times the worker ``name``'s log has said it was ready."""
        path = self.folder / f"{name}.log"
        return path.read_text(errors="replace").count(" ready.") if path.exists() else 0

    def _launch(self, name: str, queues: str | None = None, like: str | None = None) -> None:
        pool, concurrency = POOLS.get(like or name, ("prefork", 2))
        self.cluster.start_worker(
            name, queues=queues or WORKERS[name], concurrency=concurrency, pool=pool
        )

    def start_beat(self, name: str = "beat") -> None:
        self.cluster.start_beat(name)

    def kill(self, name: str) -> None:
        self.cluster.kill(name, signal.SIGKILL)

    def fired_since(self, t: datetime, timeout: float) -> float:
        """Seconds from ``t`` until every job had started a run after it (a paused job,
        or one whose period is longer than ``timeout``, makes it time out)."""
        query = (
            select(invocations.c.job_id, func.min(invocations.c.started_at, type_=UTCDateTime))
            .where(invocations.c.started_at >= t)
            .group_by(invocations.c.job_id)
        )

        def every_job() -> dict[int, datetime] | None:
            try:
                with self.db.connect() as conn:
                    fired = dict(conn.execute(query).all())
                    count = conn.execute(select(func.count()).select_from(jobs)).scalar_one()
            except sqlalchemy.exc.OperationalError:
                return None  # the database is still coming back
            return fired if len(fired) == count else None

        fired = wait_until(every_job, timeout, "every job to fire again")
        return (max(fired.values()) - t).total_seconds()

    def down(self) -> None:
        self.cluster.stop_all()
        self.db.dispose()
        self.endpoint.close()


@contextmanager
def running(
    folder: Path,
    pg: PostgresServer,
    before: Callable[[Rig], None] = lambda rig: None,
    **options: Any,
) -> Iterator[Rig]:
    """A rig on ``pg`` and a Redis of its own (started unless ``options`` give another
    broker; on ``broker_host`` if they give one, else on ``host``), up until the block
    ends; ``before`` sets it up further before it starts."""
    broker_host = options.pop("broker_host", None)
    redis = RedisServer(folder, broker_host or options.get("host", "127.0.0.1"))
    if options.get("broker") is None:
        redis.start()
    try:
        rig = Rig(folder, pg, redis, **options)
    except BaseException:
        redis.stop()
        raise
    try:
        before(rig)
        rig.up()
        yield rig
    finally:
        rig.down()
        redis.stop()


def lapsed_leases(rig: Rig) -> list[dict[str, Any]]:
    """Every attempt the watchdog ended because its lease lapsed."""
    with rig.db.connect() as conn:
        attempts = conn.execute(select(invocations.c.attempts)).scalars().all()
    return [a for run in attempts for a in run or [] if a["reason"] == "lease expired"]


def fault_seed() -> int:
    """``CRONCHAIN_FAULT_SEED`` replays a run; otherwise each run draws its own."""
    return int(os.environ.get("CRONCHAIN_FAULT_SEED") or int.from_bytes(os.urandom(4)))


# --- faults: each returns the moment the system was whole again -------------------------


def kill_worker(rig: Rig, rng: random.Random) -> datetime:
    """kill -9 of each worker's whole process group, three times, mid-run."""
    for _ in range(3):
        rig.kill_workers()
        time.sleep(rng.uniform(0.2, 1.5))
        rig.start_workers()
        time.sleep(rng.uniform(1.0, 3.0))
    return now()


def kill_beat(rig: Rig, rng: random.Random) -> datetime:
    rig.kill("beat")
    time.sleep(rng.uniform(2.0, 4.0))
    rig.start_beat()
    return now()


def kill_both(rig: Rig, rng: random.Random) -> datetime:
    rig.kill_workers()
    rig.kill("beat")
    time.sleep(rng.uniform(1.0, 3.0))
    rig.start_beat()
    rig.start_workers()
    return now()


def redis_flushall(rig: Rig, rng: random.Random) -> datetime:
    """Every queued and unacknowledged message gone, under a running worker."""
    rig.redis.client().flushall()
    return now()


def redis_restart_empty(rig: Rig, rng: random.Random) -> datetime:
    rig.redis.stop()
    time.sleep(rng.uniform(1.0, 3.0))
    rig.redis.start()  # same port, nothing on disk
    return now()


def _postgres_restart(mode: str) -> Callable[[Rig, random.Random], datetime]:
    def restart(rig: Rig, rng: random.Random) -> datetime:
        rig.pg.stop(mode)
        time.sleep(rng.uniform(1.0, 3.0))
        rig.pg.start()
        return now()

    restart.__name__ = f"postgres_restart_{mode}"
    restart.__doc__ = f"pg_ctl stop -m {mode} while ticks are in flight, then start."
    return restart


postgres_restart_fast = _postgres_restart("fast")
postgres_restart_immediate = _postgres_restart("immediate")


def two_beats(rig: Rig, rng: random.Random) -> datetime:
    """A second beat for a while: every watchdog pass runs twice."""
    rig.start_beat("beat2")
    time.sleep(rng.uniform(5.0, 8.0))
    rig.kill("beat2")
    return now()


def two_workers(rig: Rig, rng: random.Random) -> datetime:
    """A second worker on every queue; it stays until the end of the test."""
    if "worker2" not in rig.cluster.processes:
        rig.start_worker("worker2", ",".join(WORKERS.values()))
    time.sleep(rng.uniform(3.0, 5.0))
    return now()


def replay_messages(rig: Rig, rng: random.Random) -> datetime:
    """Deliver every message twice: each one waiting in a queue, and each one a worker
    holds unacknowledged (the ETA ticks), is pushed onto its queue again.

    Right after a flush or an empty restart (in a mix) Redis holds nothing until the
    worker is back and the watchdog has repaired the chains: wait for that, rather than
    replay nothing."""
    r = rig.redis.client()
    deadline = time.monotonic() + RECOVERY_BOUND
    while not (replayed := _replay(r)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert replayed > 0, "nothing to replay: the rig is not running"
    return now()


# kombu's Redis lists of a queue: one per priority step (0, 3, 6, 9), the first bare.
PRIORITY_STEPS = (0, 3, 6, 9)


def _list_of(queue: str, priority: int) -> str:
    step = max(s for s in PRIORITY_STEPS if s <= priority)
    return f"{queue}\x06\x16{step}" if step else queue


def _replay(r: redis.Redis) -> int:
    """Every message again: those waiting in each of a queue's lists, and those taken
    and not acknowledged, each to the list of its priority."""
    replayed = 0
    for queue in WORKERS.values():
        for key in (_list_of(queue, step) for step in PRIORITY_STEPS):
            for body in r.lrange(key, 0, -1):
                r.lpush(key, body)
                replayed += 1
    for value in r.hvals("unacked"):
        message, _exchange, routing_key = json.loads(value)
        priority = message.get("properties", {}).get("priority") or 0
        r.lpush(_list_of(routing_key or "cronchain", priority), json.dumps(message))
        replayed += 1
    return replayed


def malformed_messages(rig: Rig, rng: random.Random) -> datetime:
    producer = Celery(broker=rig.redis.url)
    producer.send_task("cronchain.tick_later", args=["not-a-job", None], queue="cronchain")
    producer.send_task("cronchain.tick_later", args=[1], queue="cronchain")  # arity
    producer.send_task("cronchain.start_invocation", args=[10**12], queue="cronchain")
    # types, arity, no such run or attempt, a place no date has, one no run is filed at
    for args in (["1", 1], [1], [10**12, 1], [1, 10**6], [1, 1, None, 10**20], [1, 1, None, 0]):
        producer.send_task("cronchain.run", args=args, queue="cronchain.work")
    for attempts in ([[1, "x"]], [], "1,1", [[10**12, 1], [10**12 + 1, 1]]):
        producer.send_task("cronchain.run_batch", args=[attempts], queue="cronchain.work")
    for ticks in ([[1, 2, 3]], [], "1,2", [[1, None]], [[10**12, 1], [10**12, 2]]):
        producer.send_task("cronchain.tick_batch", args=[ticks], queue="cronchain")
    producer.send_task("faults.slow", kwargs={"log": "x"}, queue="slow")  # arity, no header
    for header in ({"invocation": "?"}, {"invocation": 1, "attempt": 1, "filed": "x"}):
        producer.send_task(
            "faults.slow", args=["x", 0], queue="slow", headers={"cronchain": header}
        )
    with Connection(rig.redis.url) as conn:  # a body that is not JSON at all
        channel = conn.default_channel
        message = channel.prepare_message(
            "{not json",
            content_type="application/json",
            headers={"task": "cronchain.tick_later", "id": "not-json"},
        )
        channel.basic_publish(message, exchange="", routing_key="cronchain")
    return now()


# A process killed and started again, or every message flushed: the manual promises
# every job fires again within two watchdog intervals of the restart.
WITHIN_TWO_INTERVALS = {"kill_worker", "kill_beat", "kill_both", "redis_flushall"}
# Otherwise Celery's own reconnection comes first: it retries Redis after 2, 4, 6 s...,
# and a psycopg pool notices a restarted PostgreSQL on its next checkout.
RECOVERY_BOUND = 15.0

Fault = Callable[[Rig, random.Random], datetime]
FAULTS: dict[str, Fault] = {
    f.__name__: f
    for f in (
        kill_worker,
        kill_beat,
        kill_both,
        redis_flushall,
        redis_restart_empty,
        postgres_restart_fast,
        postgres_restart_immediate,
        two_beats,
        two_workers,
        replay_messages,
        malformed_messages,
    )
}


# --- the ledger ------------------------------------------------------------------------


@dataclass
class Ledger:
    expected: int = 0
    fired: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    failed: Counter[str] = field(default_factory=Counter)
    lost: list[tuple[str, datetime]] = field(default_factory=list)
    unexpected: list[tuple[str, datetime]] = field(default_factory=list)
    duplicates: int = 0
    crossed: int = 0  # work done or outcomes recorded on another job's run
    redone: int = 0  # work begun while the database forgot it, done again or recorded nowhere
    detail: list[str] = field(default_factory=list)  # what each duplicate and crossing was
    unfinished: int = 0
    recover: float = 0.0

    def line(self, fault: str) -> str:
        skipped = ",".join(f"{k}={v}" for k, v in sorted(self.skipped.items())) or "-"
        failed = sum(self.failed.values())
        return (
            f"{fault:<28} expected {self.expected:>5}  fired {self.fired:>5}  "
            f"skipped {sum(self.skipped.values()):>3} ({skipped})  failed {failed}  "
            f"duplicates {self.duplicates}  crossed {self.crossed}  lost {len(self.lost)}  "
            f"recovered in {self.recover:.1f} s"
            + (f"  unfinished {self.unfinished}" if self.unfinished else "")
            + (f"  redone {self.redone}" if self.redone else "")
        )

    @property
    def whole(self) -> bool:
        return not (self.lost or self.unexpected or self.duplicates or self.crossed or self.failed)


def check_ledger(rig: Rig, end: datetime) -> Ledger:
    """Every slot of every job, from its first to ``end``, against history: exactly once,
    as SUCCEEDED or SKIPPED with a reason; no celery body run twice for one attempt, no
    http call made twice for one attempt; no outcome recorded on another job's run."""
    ledger = Ledger()
    witnessed_at = now()  # the work done is read first: every run it names exists
    work = witnessed(rig)
    with rig.db.connect() as conn:
        job_rows = conn.execute(
            select(jobs.c.id, jobs.c.name, jobs.c.schedule, jobs.c.created_at)
        ).all()
        rows = conn.execute(
            select(
                invocations.c.job_id, invocations.c.slot, invocations.c.status,
                invocations.c.reason, invocations.c.error,
            ).where(invocations.c.slot <= end)
        ).all()  # fmt: skip
    by_slot: dict[tuple[int, datetime], list[sqlalchemy.Row]] = {}
    for row in rows:
        by_slot.setdefault((row.job_id, row.slot), []).append(row)
    ledger.duplicates = sum(len(v) - 1 for v in by_slot.values())
    ledger.detail += [
        f"slot {key} recorded {len(v)} times" for key, v in by_slot.items() if len(v) > 1
    ]
    for job in job_rows:
        schedule = parse_schedule(job.schedule)
        slots, slot = set(), schedule.next_after(job.created_at)
        while slot is not None and slot <= end:
            slots.add(slot)
            slot = schedule.next_after(slot)
        ledger.expected += len(slots)
        ledger.lost += [(job.name, s) for s in sorted(slots) if (job.id, s) not in by_slot]
        ledger.unexpected += [(job.name, s) for (j, s) in by_slot if j == job.id and s not in slots]
    for row in rows:
        if row.status == "SUCCEEDED":
            ledger.fired += 1
        elif row.status == "SKIPPED" and row.reason:
            ledger.skipped[row.reason] += 1
        elif row.status in FINAL:
            ledger.failed[f"{row.status}: {row.error or row.reason}"] += 1
        else:
            ledger.unfinished += 1
            ledger.detail.append(f"job {row.job_id} slot {row.slot:%H:%M:%S} still {row.status}")
    with rig.db.connect() as conn:
        owner = owners(conn)
        ended = ended_by_a_body(conn, owner, witnessed_at)
    check_work(ledger, work, owner, ended, rig.forgotten)
    return ledger


@dataclass(frozen=True)
class Work:
    """A slow job's task body or an http job's call, as the job saw it done."""

    job: str
    invocation: int
    attempt: int
    at: float  # time.time() when it began
    key: str | None = None  # an http call's Idempotency-Key


def witnessed(rig: Rig) -> list[Work]:
    work = [
        Work(path.name, int(inv), int(attempt), float(at))
        for path in rig.slow_logs.iterdir()
        for inv, attempt, at in (line.split() for line in path.read_text().splitlines())
    ]
    return work + [
        Work(call.path.rsplit("/", 1)[-1], call.invocation, call.attempt, call.at, call.key)
        for call in list(rig.endpoint.received)
    ]


def owners(conn: sqlalchemy.Connection) -> dict[int, str]:
    """The job of each run of a witnessed job (slow or http), by the run's id."""
    names = dict(conn.execute(select(jobs.c.id, jobs.c.name)).all())
    watched = [j for j, n in names.items() if n.startswith(WITNESSED)]
    ids = conn.execute(select(invocations.c.id, invocations.c.job_id).where(
        invocations.c.job_id.in_(watched))).all()  # fmt: skip
    return {inv: names[job_id] for inv, job_id in ids}


def ended_by_a_body(
    conn: sqlalchemy.Connection, owner: dict[int, str], witnessed_at: datetime
) -> list[tuple[str, int, int]]:
    """Each attempt of a slow job's run that ended by its task before ``witnessed_at``
    (SUCCEEDED, or FAILED with the task's ``error``): a body must have run for it."""
    slow = [inv for inv, name in owner.items() if name.startswith("slow")]
    runs = conn.execute(
        select(
            invocations.c.id, invocations.c.status, invocations.c.reason,
            invocations.c.attempt, invocations.c.finished_at, invocations.c.attempts,
        ).where(invocations.c.id.in_(slow))
    ).all()  # fmt: skip
    ended = []
    for run in runs:
        attempts = [
            (a["attempt"], datetime.fromisoformat(a["finished_at"]))
            for a in run.attempts or []
            if a["reason"] == "error"
        ]
        if run.finished_at and (run.status == "SUCCEEDED" or run.reason == "error"):
            attempts.append((run.attempt, run.finished_at))
        ended += [(owner[run.id], run.id, a) for a, at in attempts if at < witnessed_at]
    return ended


def check_work(
    ledger: Ledger,
    work: list[Work],
    owner: dict[int, str],
    ended: list[tuple[str, int, int]],
    forgotten: tuple[float, float] | None,
) -> None:
    """The work done against the runs recorded. A duplicate: a body run or a call made
    twice for one attempt. A crossing: work done under another job's run, an attempt
    ended by a body it never ran (an outcome taken from another job's task), or one
    Idempotency-Key sent by two jobs. Each is a claim or an outcome matched by an id that
    named another run. Work begun in the ``forgotten`` window is the exception: its run
    is no longer recorded, or its id was handed out again, and it may be done again
    (counted as ``redone``)."""

    def lost_with_the_database(first: Work) -> bool:
        return forgotten is not None and forgotten[0] <= first.at <= forgotten[1]

    by_attempt: dict[tuple[str, int, int], list[Work]] = {}
    for done in sorted(work, key=lambda w: w.at):
        by_attempt.setdefault((done.job, done.invocation, done.attempt), []).append(done)
    for (job, inv, attempt), done in by_attempt.items():
        what = f"{job}'s work for run {inv} attempt {attempt}"
        once_more = len(done) == 2 or (len(done) == 1 and owner.get(inv) != job)
        if lost_with_the_database(done[0]) and once_more:
            ledger.redone += 1
        elif len(done) > 1:
            ledger.duplicates += len(done) - 1
            ledger.detail.append(f"{what} done {len(done)} times")
        elif owner.get(inv) != job:
            ledger.crossed += 1
            ledger.detail.append(f"{what}, which is {owner.get(inv)}'s")
    crossed = [f"run {inv} attempt {a} of {job} ended by a body it never ran"
               for job, inv, a in ended if (job, inv, a) not in by_attempt]  # fmt: skip
    keys: dict[str, set[str]] = {}
    for done in work:
        if done.key is not None:
            keys.setdefault(done.key, set()).add(done.job)
    crossed += [f"Idempotency-Key {k} sent by {sorted(j)}" for k, j in keys.items() if len(j) > 1]
    ledger.crossed += len(crossed)
    ledger.detail += crossed


def settle(rig: Rig, end: datetime, timeout: float = 30) -> Ledger:
    """Wait until every slot up to ``end`` is recorded and final, then take the ledger."""

    def settled() -> Ledger | None:
        ledger = check_ledger(rig, end)
        return ledger if not ledger.lost and not ledger.unfinished else None

    try:
        return wait_until(settled, timeout, "every slot to be recorded and final")
    except AssertionError:
        return check_ledger(rig, end)


def recovery_bound(faults: list[str]) -> float:
    """How long after its last fault the rig may take to fire every job again."""
    if set(faults) <= WITHIN_TWO_INTERVALS:
        return 2 * WATCHDOG_INTERVAL + 1  # a second for the first tick to commit
    return RECOVERY_BOUND


def whole_after(
    rig: Rig, faults: list[Fault], label: str, settle_within: float = 30
) -> tuple[Ledger, str]:
    """Run ``faults`` (with a seed printed to replay them), and check that the ledger is
    whole and nothing unfinished within ``settle_within`` seconds; the ledger, and what
    a failure should say."""
    seed = fault_seed()
    print(f"{label}: seed {seed}")
    ledger = run_fault(rig, faults, random.Random(seed), settle_within)
    detail = account(rig, ledger, label)
    assert ledger.whole and ledger.unfinished == 0, detail
    return ledger, detail


def account(rig: Rig, ledger: Ledger, label: str) -> str:
    """Add the ledger's line to the suite's summary; return what a failure should say."""
    SUMMARY.append(ledger.line(label))
    detail = f"{ledger.line(label)}\nlost {ledger.lost[:5]} unexpected {ledger.unexpected[:5]} "
    detail += f"failed {dict(ledger.failed)}\n" + "\n".join(ledger.detail[:20])
    return f"{detail}\n{logs_tail(rig)}"


def logs_tail(rig: Rig) -> str:
    tails = [f"--- {name}\n{rig.cluster.log(name)[-2000:]}" for name in (*WORKERS, "beat")]
    return "\n".join(tails)


def run_fault(
    rig: Rig, faults: list[Fault], rng: random.Random, settle_within: float = 30
) -> Ledger:
    """Run ``faults`` one after another on a running rig, then check the whole window
    once every slot in it is final (or ``settle_within`` seconds have passed)."""
    restored = now()
    for fault in faults:
        restored = fault(rig, rng)
        time.sleep(rng.uniform(0.5, 2.0))
    recover = rig.fired_since(restored, RECOVERY_BOUND + 10)
    time.sleep(2)  # a little steady state after the recovery
    end = now() - timedelta(seconds=1)
    ledger = settle(rig, end, settle_within)
    ledger.recover = recover
    for name, process in rig.cluster.processes.items():
        assert process.poll() is None, f"{name} died:\n{logs_tail(rig)}"
    print(ledger.line("+".join(f.__name__ for f in faults)), file=sys.stderr)
    return ledger
