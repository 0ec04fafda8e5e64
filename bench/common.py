"""What the benchmarks share: a fresh database and a private Redis, real celery processes
(both paths, as ``cronchain up`` runs them), CPU and memory read from /proc, and one
printed line per figure."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy
from celery import Celery
from sqlalchemy import select

from bench.delay import Delays, delays
from bench.folders import private_folder
from bench.load import offset
from cronchain.migrations import upgrade
from cronchain.scheduler.storage.db import make_engine
from cronchain.scheduler.storage.models import invocations, jobs
from cronchain.scheduler.workers.runtime import Runtime
from tests.e2e.harness import Cluster
from tests.support.repo import ROOT
from tests.support.services import RedisServer, redis_server
from tests.support.wait import wait_until

PG_ADMIN = os.environ.get(
    "CRONCHAIN_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
TICKS = os.sysconf("SC_CLK_TCK")
# As ``cronchain up`` deploys: the control path on two prefork processes, the work path
# on a hundred threads (CRONCHAIN_WORK_CONCURRENCY's default).
CONTROL_CONCURRENCY = 2
WORK_CONCURRENCY = 100


def figure(bench: str, name: str, value: float, unit: str = "") -> None:
    """One line per figure: ``bench name value unit``, greppable and diffable; a count
    (an int) whole, anything else to four significant digits."""
    text = str(value) if isinstance(value, int) else f"{value:.4g}"
    print(f"{bench} {name} {text} {unit}".rstrip(), flush=True)


@contextmanager
def database(migrated: bool = True) -> Iterator[tuple[str, sqlalchemy.Engine]]:
    """A fresh database on the shared PostgreSQL, migrated unless asked not to (the code
    that will use it migrates it), dropped afterwards."""
    admin = sqlalchemy.create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    name = f"cronchain_bench_{uuid.uuid4().hex[:8]}"
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    url = sqlalchemy.engine.make_url(PG_ADMIN).set(database=name)
    url_text = url.render_as_string(hide_password=False)
    engine = make_engine(url_text)
    try:
        if migrated:
            upgrade(engine)
        yield url_text, engine
    finally:
        engine.dispose()
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.dispose()


def cluster(folder: Path, **env: str) -> Cluster:
    return Cluster.create(folder, **{"PYTHONPATH": own_code(), **env})


def own_code() -> str:
    """A ``PYTHONPATH`` under which ``cronchain`` is this checkout's code. ``ROOT`` alone
    is not enough: ``cronchain`` would be found where the virtualenv's editable install
    points, another checkout's for a worktree that shares it (a benchmark run from a
    snapshot while its checkout is edited)."""
    checkout = hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]
    link = private_folder() / "names" / checkout / "cronchain"
    if not link.exists():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.unlink(missing_ok=True)  # a dangling link left by a removed checkout
        with suppress(FileExistsError):  # another benchmark made it meanwhile
            link.symlink_to(ROOT)
    return f"{link.parent}:{ROOT}"


@contextmanager
def previous_code(revision: str, folder: Path) -> Iterator[str]:
    """The code at git ``revision``, checked out in a worktree under ``folder``: yields a
    ``PYTHONPATH`` under which ``cronchain`` (and ``tests``) are that code's, for a
    deployment to run as the baseline of the same benchmark run."""
    tree, names = folder / "previous", folder / "previous-names"
    git = ["git", "-C", str(ROOT), "worktree"]
    subprocess.run([*git, "add", "--detach", "-q", str(tree), revision], check=True)
    try:
        names.mkdir()
        (names / "cronchain").symlink_to(tree)  # the installed name, mapped as pip maps it
        yield f"{names}:{tree}"
    finally:
        subprocess.run([*git, "remove", "--force", str(tree)], check=False)


@dataclass
class Deployment:
    """cronchain on a fresh database and a private Redis; processes start on demand."""

    db: sqlalchemy.Engine
    redis: RedisServer
    cluster: Cluster
    # The proxies between the deployment and its servers (``--delay-ms``); the benchmark
    # itself reads and measures through ``db`` and ``redis`` directly.
    delays: Delays = field(default_factory=lambda: Delays(0))

    def apply_jobs(self, jobs: int, period: float, timeout: float = 120, step: float = 0) -> None:
        self.apply(job_document(jobs, period, step), timeout=timeout)

    def apply(self, document: dict, timeout: float = 120) -> None:
        path = self.cluster.folder / "jobs.yaml"
        path.write_text(json.dumps(document))  # JSON is YAML
        self.cluster.cronchain_alone("apply", str(path), timeout=timeout)
        analyze(self.db, DECLARED)

    def start(self, loglevel: str = "INFO", beat: bool = True) -> None:
        """Both paths, as ``cronchain up`` runs them: the control path (``worker``:
        ticks, starts, the watchdog; prefork), the work path (``work``: claims and runs
        the noop and http runs; threads), and beat (``beat``) as a process of its own."""
        self.cluster.start_worker(concurrency=CONTROL_CONCURRENCY, loglevel=loglevel)
        self.cluster.start_work_worker(concurrency=WORK_CONCURRENCY, loglevel=loglevel)
        if beat:
            self.cluster.start_beat()

    def wait_ready(self, timeout: float = 60) -> None:
        """Until both paths' workers answer a ping (at WARNING, celery logs no "ready.")."""
        wait_workers(self.redis.url, ("worker@", "work@"), timeout)

    @property
    def worker_pids(self) -> dict[str, int]:
        """The running workers' main processes, by name (``worker``, ``work``)."""
        return {
            name: p.pid for name, p in self.cluster.processes.items() if name in ("worker", "work")
        }

    def runtime(self) -> Runtime:
        """The engine in this process, wired as the deployment's workers are."""
        os.environ.update(self.cluster.env)
        return Runtime.from_env()


@contextmanager
def deployment(
    folder: Path, delay_ms: float = 0, code: str | None = None, **env: str
) -> Iterator[Deployment]:
    """cronchain's processes on a fresh database and Redis, each ``delay_ms`` of round
    trip away (``bench.delay``). ``code``: the ``PYTHONPATH`` of other code to deploy
    (``previous_code``), which migrates the database to its own schema."""
    paths = {} if code is None else {"PYTHONPATH": code}
    with (
        database(migrated=code is None) as (url, db),
        redis_server(folder) as redis,
        delays(delay_ms) as delay,
    ):
        c = cluster(
            folder,
            CRONCHAIN_DATABASE_URL=delay.url(url),
            CRONCHAIN_BROKER_URL=delay.url(redis.url),
            **paths,
            **env,
        )
        if code is not None:
            c.cronchain_alone("db", "upgrade")
        try:
            yield Deployment(db, redis, c, delay)
        finally:
            c.stop_all()


def wait_workers(broker: str, prefixes: tuple[str, ...], timeout: float = 60) -> None:
    """Until a worker whose hostname starts with each of ``prefixes`` answers a ping."""
    app = Celery(broker=broker)

    def answered() -> bool:
        names = [name for reply in app.control.ping(timeout=1) or [] for name in reply]
        return all(any(n.startswith(p) for n in names) for p in prefixes)

    wait_until(answered, timeout, f"workers {', '.join(prefixes)}")


def job_specs(
    jobs: int, period: float, step: float = 0, prefix: str = "noop", **kind: dict
) -> list[dict]:
    """N jobs of one period, spread over it (see ``bench.load.offset``); a no-op each
    unless ``kind`` gives another (``http={...}``)."""
    specs = []
    for i in range(jobs):
        offset_ms = round(offset(i, jobs, period, step) * 1000)
        schedule = f"every {period:g}s" + (f" offset {offset_ms}ms" if offset_ms else "")
        specs.append({"name": f"{prefix}{i:05d}", "schedule": schedule, **(kind or {"noop": {}})})
    return specs


def job_document(jobs: int, period: float, step: float = 0, requires: bool = False) -> dict:
    """N no-op jobs of one period, spread over it (see ``bench.load.offset``); with
    ``requires``, a third of them require three others each (``with_requirements``)."""
    specs = job_specs(jobs, period, step)
    if requires:
        with_requirements(specs, within=f"{2 * period:g}s")
    return {"project": "bench", "jobs": specs}


# A large registry's periods, as a fleet has them: few jobs every minute, most hourly or
# slower. (period in seconds, share of the jobs); at 1,000,000 jobs about 830 fire a second.
MIXED_PERIODS = ((60, 0.02), (300, 0.08), (900, 0.10), (3600, 0.40), (21600, 0.20), (86400, 0.20))


def mixed_document(jobs: int) -> dict:
    """N no-op jobs with periods from a minute to a day (``MIXED_PERIODS``), each share
    spread over its period on whole seconds, as cron jobs are."""
    specs: list[dict] = []
    for period, share in MIXED_PERIODS:
        count = round(jobs * share) if period != MIXED_PERIODS[-1][0] else jobs - len(specs)
        specs += job_specs(count, period, step=1, prefix=f"p{period}-")
    return {"project": "bench", "jobs": specs}


def with_requirements(specs: list[dict], within: str) -> list[dict]:
    """Every third job (0, 3, 6, ...) requires three of the others (the two before it and
    the fourth before it; at the start, the first such ones after it), each
    ``succeeded_within``: with a window of two periods, each slot finds its upstreams'
    last success in it, so what is measured is the cost of checking (and of the
    upstreams' releases), not of waiting. Returns ``specs``, changed."""
    plain = [i for i in range(len(specs)) if i % 3]
    for i in range(0, len(specs), 3):
        ups = [j for j in (i - 1, i - 2, i - 4) if j >= 0]
        ups += [j for j in plain if j not in ups][: 3 - len(ups)]
        specs[i]["requires"] = [{"job": specs[j]["name"], "succeeded_within": within} for j in ups]
    return specs


def settle(
    recent_lags: Callable[[], list[float]],
    period: float,
    ready: Callable[[], bool] = lambda: True,
    within: float = 1.0,
) -> float:
    """Wait for steady state: every fire of the last two seconds less than ``within``
    seconds late (startup leaves a backlog: the slots that passed while the worker
    started), and ``ready``. Gives up after a period and a minute, and measures whatever
    state that is."""
    started = time.monotonic()
    deadline = started + period + 60
    time.sleep(min(period, 10))
    while time.monotonic() < deadline:
        lags = recent_lags()
        if lags and max(lags) < within and ready():
            break
        time.sleep(1)
    return time.monotonic() - started


# The tables an apply fills (not the history, which the workers fill as they run).
DECLARED = ("jobs", "job_changes", "pools", "requirements", "channels")


def analyze(db: sqlalchemy.Engine, tables: tuple[str, ...] = ()) -> None:
    """Give the planner statistics, as a deployment's autovacuum would have: this
    machine's PostgreSQL runs with autovacuum off (its conf.d/90-ci.conf), so a new
    database's tables, filled by the benchmark, would never be analyzed. Without
    statistics the planner took hash joins over every job for the hot path's locks of
    a few runs (9 ms where 0.1 ms does), in some runs and not others.

    ``tables``: those of them that exist (an older baseline's schema may lack some);
    none named, every table. Name none while the workers fill the current month: an
    ANALYZE that finds its rows all still being inserted records it as empty, with
    pages, and the planner takes it for one row however it grows. A run's claims of 300
    runs then read the whole month, up to 16 s each, until the watchdog's pass analyzed
    it again, itself waiting behind the backlog those claims made."""
    with db.connect() as conn:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")
        if tables:
            found = "SELECT t FROM unnest(%(t)s::text[]) t WHERE to_regclass(t) IS NOT NULL"
            tables = tuple(conn.exec_driver_sql(found, {"t": list(tables)}).scalars())
            if not tables:
                return
        conn.exec_driver_sql(" ".join(["ANALYZE", ", ".join(tables)]).strip())


def history_partitions(db: sqlalchemy.Engine, now: datetime, before: int) -> None:
    """The partitions of a deployment in its steady state: the clock's month and the
    next (what the watchdog makes), and ``before`` months of history. Made before the
    workers start: a partition's DDL beside a live worker can deadlock with it (the
    watchdog, which makes them months ahead, tries again at its next pass). None where
    history is not partitioned (SQLite, or the code before partitioning)."""
    try:
        from cronchain.scheduler.maintenance.retention import run_once
        from cronchain.scheduler.storage import partitions
    except ImportError:
        return
    with db.begin() as conn:
        if not partitions.is_partitioned(conn):
            return
        first = partitions.add_months(partitions.month_start(now), -before)
        for month in partitions.missing(conn, first, now):
            partitions.create(conn, month)
    run_once(db, now, timedelta(days=36_500))
    with db.connect() as conn:
        print(f"partitions: {len(partitions.months(conn))} months and the default", flush=True)


def history_runs(db: sqlalchemy.Engine, now: datetime, before: int, runs: int) -> None:
    """``runs`` runs of every job in each of the ``before`` months before ``now``'s, a
    day apart, analyzed: a probe of a month's index then descends a tree, not an empty
    one."""
    if runs > 28:
        raise ValueError(f"{runs} runs a day apart do not fit in every month (28 do)")
    if not before or not runs:
        return
    start = datetime(now.year, now.month, 1, tzinfo=UTC)
    months = []
    with db.begin() as conn:
        for _ in range(before):
            start = (start - timedelta(days=1)).replace(day=1)  # the month before
            months.append(f"invocations_p{start:%Y_%m}")
            conn.exec_driver_sql(
                "INSERT INTO invocations (job_id, slot, revision, status, attempt, created_at,"
                " started_at, finished_at, backfill, filed_at) SELECT j.id, s, j.revision,"
                " 'SUCCEEDED', 1, s, s, s, false, s FROM jobs j, generate_series(%(start)s,"
                " %(start)s + (%(runs)s - 1) * interval '1 day', interval '1 day') s",
                {"start": start, "runs": runs},
            )
    analyze(db, tuple(months))  # not the current month, which the workers fill


def first_waits_over(db: sqlalchemy.Engine) -> bool:
    """No run waits for its upstreams since more than a second after its slot. A fleet
    of dependent jobs applied together starts with such waits: a job's first slot can
    come before its upstreams' first (a period later at most), and waits for it. Those
    are the first period's, not the steady state's; measured in the window, a few of
    them set its maximum (about a period) and its p99."""
    since = datetime.now(UTC) - timedelta(seconds=1)
    query = (
        select(invocations.c.id)
        .where(
            invocations.c.status == "WAITING",
            invocations.c.reason == "upstream",
            invocations.c.slot < since,
        )
        .limit(1)
    )
    with db.connect() as conn:
        return conn.execute(query).first() is None


def recent_lags(db: sqlalchemy.Engine) -> list[float]:
    """How late each cronchain run that started in the last two seconds was."""
    since = datetime.now(UTC) - timedelta(seconds=2)
    return [(r.started_at - r.slot).total_seconds() for r in started_runs(db, since)]


def started_runs(
    db: sqlalchemy.Engine, start: datetime, end: datetime | None = None
) -> list[sqlalchemy.Row]:
    """Runs that started in ``[start, end)``: the job's name, the slot and the start.

    A run starts when a worker claims its attempt (``started_at`` is then set again, and
    ``worker``): until then ``started_at`` is when the attempt was sent, and the run has
    not started."""
    query = (
        select(jobs.c.name, invocations.c.slot, invocations.c.started_at)
        .join(jobs, jobs.c.id == invocations.c.job_id)
        .where(invocations.c.worker.isnot(None), invocations.c.started_at >= start)
    )
    if end is not None:
        query = query.where(invocations.c.started_at < end)
    with db.connect() as conn:
        return list(conn.execute(query))


def transactions(engine: sqlalchemy.Engine) -> int:
    """Committed and rolled back transactions of this database so far (the statistics
    lag by up to a second; windows are long enough for that not to matter)."""
    with engine.connect() as conn:
        return conn.exec_driver_sql(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database "
            "WHERE datname = current_database()"
        ).scalar_one()


def machine_busy() -> float:
    """CPU seconds the machine's cores have been busy since boot (``/proc/stat``: all but
    idle and iowait)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields)
    return (user + nice + system + irq + softirq + steal) / TICKS


def backends(db: sqlalchemy.Engine) -> list[int]:
    """PostgreSQL's processes serving this database now (but the one asking)."""
    with db.connect() as conn:
        return list(
            conn.exec_driver_sql(
                "SELECT pid FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).scalars()
        )


def process_times() -> dict[int, tuple[float, float, int]]:
    """For every process: its CPU seconds, its reaped children's (``cutime`` and
    ``cstime``: a short-lived process's time ends up in its parent's), and its parent."""
    times = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        own, children = sum(map(int, fields[11:13])), sum(map(int, fields[13:15]))
        times[int(stat.parent.name)] = (own / TICKS, children / TICKS, int(fields[1]))
    return times


def postgres_cpu(db: sqlalchemy.Engine) -> float | None:
    """CPU seconds of ``db``'s PostgreSQL server so far: each of its processes' (the
    backends, the WAL writer, the checkpointer), and the postmaster's reaped children's
    (the backends that exited). Other databases' work on the same server counts too: a
    benchmark has it to itself. None if the server is not a process of this machine's
    (another host, a container's own pids)."""
    with db.connect() as conn:
        backend = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
    try:
        local = Path(f"/proc/{backend}/comm").read_text().strip() == "postgres"
    except OSError:
        local = False
    times = process_times()
    if not local or backend not in times or times[backend][2] not in times:
        return None
    postmaster = times[backend][2]
    own, reaped, _ = times[postmaster]
    return own + reaped + sum(t[0] for t in times.values() if t[2] == postmaster)


def sessions(db: sqlalchemy.Engine) -> int:
    """Connections made to this database so far (PostgreSQL 14 and later)."""
    with db.connect() as conn:
        return conn.exec_driver_sql(
            "SELECT sessions FROM pg_stat_database WHERE datname = current_database()"
        ).scalar_one()


@dataclass
class MachineCpu:
    """Where the machine's CPU went over a window, in cores on average:

    - ``ours``: this deployment: this process and its children (workers, beat, Redis),
      and the PostgreSQL backends serving its database that lived through the window;
    - ``backends_exited``: PostgreSQL backends that exited during the window, of any
      database (the server is shared): a pool that opens and closes connections shows
      here, as does another test's;
    - ``others``: every other process (on a shared machine, other people's tests);
    - ``kernel``: work charged to no process: what is left of the machine's busy time
      once the processes' is taken out. The machine's is counted in ticks and the
      processes' from their exact run time, so it reads a hundredth of a core or so
      below zero when there is none (-0.007 and -0.010 cores seen);
    - ``network``: the delay proxies of ``network_pids`` (``bench.delay``), children of
      this process but not the deployment's: a real network takes no CPU from it.

    ``connections``: connections made to this database during the window."""

    db: sqlalchemy.Engine
    network_pids: frozenset[int] = frozenset()
    ours: float = 0.0
    backends_exited: float = 0.0
    others: float = 0.0
    kernel: float = 0.0
    connections: int = 0
    network: float = 0.0

    def print_figures(self, bench: str, fires: int) -> None:
        """One line per share of the machine, and the connections opened per fire."""
        figure(bench, "deployment_cpu", self.ours, "cores")
        figure(bench, "postgres_exited_backends_cpu", self.backends_exited, "cores")
        figure(bench, "other_processes_cpu", self.others, "cores")
        figure(bench, "kernel_cpu", self.kernel, "cores")
        if self.network_pids:
            figure(bench, "delay_proxies_cpu", self.network, "cores")
        if fires:  # PostgreSQL connections opened to its database
            figure(bench, "connections_per_fire", self.connections / fires)

    def _ours(self) -> set[int]:
        return {*tree(os.getpid()), *backends(self.db)} - self.network_pids

    def __enter__(self) -> MachineCpu:
        self._t, self._busy, self._sessions = time.monotonic(), machine_busy(), sessions(self.db)
        self._pids, self._times = self._ours(), process_times()
        return self

    def __exit__(self, *_: object) -> None:
        elapsed, busy = time.monotonic() - self._t, machine_busy() - self._busy
        self.connections = sessions(self.db) - self._sessions
        pids, times = self._pids | self._ours(), process_times()
        backend = next(iter(backends(self.db)), None)
        postmaster = times[backend][2] if backend in times else None
        ours = exited = others = network = 0.0
        for pid, (own, children, _) in times.items():
            was = self._times.get(pid, (0.0, 0.0, 0))
            spent, reaped = max(0.0, own - was[0]), max(0.0, children - was[1])
            # A process that exited is not listed: its time went to its parent's
            # children's. None of ours exits during a window, so a parent's reaped
            # children are the postmaster's backends, or someone else's processes.
            if pid in pids:
                ours += spent
            elif pid in self.network_pids:
                network += spent
            else:
                others += spent
            if pid == postmaster:
                exited += reaped
            elif pid not in pids:
                others += reaped
        self.ours, self.backends_exited = ours / elapsed, exited / elapsed
        self.others, self.network = others / elapsed, network / elapsed
        self.kernel = busy / elapsed - self.ours - self.backends_exited - self.others
        self.kernel -= self.network


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        text = (task / "children").read_text() if (task / "children").exists() else ""
        found += [int(c) for c in text.split()]
    return found


def tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (a prefork worker and its pool)."""
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        with suppress(OSError):
            todo += _children(p)
    return pids


def cpu_seconds(pid: int) -> float:
    """User and system CPU of a process tree, as the kernel counts it."""
    total = 0
    for p in tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICKS


def measure(pids: dict[str, int], window: float) -> tuple[float, float, dict[str, float]]:
    """CPU seconds of each named process tree over ``window`` seconds from now."""
    t0, before = time.time(), {name: cpu_seconds(pid) for name, pid in pids.items()}
    time.sleep(window)
    t1 = time.time()
    return t0, t1, {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}


def rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@dataclass
class PeakRss:
    """The largest resident size any one process of a tree reached (``peak``) and the
    largest the tree's processes reached together (``total``), sampled twice a second on
    a thread."""

    pid: int
    peak: int = 0
    total: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> PeakRss:
        threading.Thread(target=self._sample, daemon=True).start()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set():
            sizes = [rss_bytes(p) for p in tree(self.pid)]
            self.peak = max([self.peak, *sizes])
            self.total = max(self.total, sum(sizes))
            time.sleep(0.5)

    def __exit__(self, *_: object) -> None:
        self._stop.set()


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
