"""History at scale: 180M invocation rows in six monthly partitions (PostgreSQL).

    python -m bench.history_scale [--rows 180000000 | --rows largest] [--jobs 1000]
                                  [--queries 500]

The rows are written by SQL (``generate_series``), as half a year of a busy deployment
would leave them: succeeded runs of 1,000 jobs, their slots spread evenly over six
months, with start and finish times and the revision, as the engine writes them. Each
month is loaded into a table of its own (after the first, two at once), indexed once
full (far faster than keeping the indexes up row by row), then attached as that month's
partition: the table cronchain's migrations made, with every key and index it declares.

Before writing anything it checks that the database's disk can take the rows (at
``BYTES_PER_ROW`` with a margin for the index builds) and refuses if not, saying how many
rows would fit; ``--rows largest`` takes that many instead. The database it made is
dropped at the end, whatever happens.

Figures, in one run: with the first month loaded (a sixth of the rows) and again with
all six, the time of ``history JOB --limit 50`` (``Scheduler.history``, as the CLI runs
it) and of ``explain JOB --at SLOT`` (``Scheduler.explain``, a slot that ran), p50 and
p99, for random jobs; the p99 must not grow with the size. Then bytes per row on disk
(tables, indexes and TOAST), the time of the oldest month's daily rollup (what
retention writes before it drops a month) and of its drop, as retention makes it. The
month's files are first dropped from the OS's cache, as a month six months old would be
before the rollup reads it (``oldest_month_evicted_from_cache``: the size of the files
asked; 0 if they are not readable here, or the user may not CHECKPOINT):
``detach_oldest_month`` (the transaction that locks history), ``drop_oldest_month``
(that, then the foreign keys and the detached table dropped, each in a transaction of
its own), and ``history_stall_max``, the longest a probe took meanwhile (every 2 ms, a
job's row written and history read, as a tick does; ``history_stall_failed``: probes
that failed). The previous code's drop follows, of the next month, in one transaction
(``drop_in_one_transaction``, its stall and failures). Last, the CLI's own wall time
(process start included).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy

from bench.common import cluster, database, figure, percentile
from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.storage import history_days, partitions

CHUNK = 2_000_000
MONTHS = 6
FIRST = datetime(2025, 1, 1, tzinfo=UTC)
# On disk per row (tables, indexes, TOAST) as measured at 10M and 6M rows (239, 243 B),
# with room to spare; index builds need as much again for their sort of one month.
BYTES_PER_ROW = 260
MARGIN = 1.25

# The columns of one month, ids numbered in the month's own range.
_LOAD = """
INSERT INTO {table} (id, job_id, slot, revision, status, attempt, created_at, started_at,
    finished_at, backfill, filed_at)
SELECT %(base)s + g, %(low)s + g %% %(jobs)s, t, %(revision)s, 'SUCCEEDED', 1, t,
       t + interval '15 milliseconds', t + interval '40 milliseconds', false, t
FROM generate_series(%(first)s, %(last)s) AS g,
     LATERAL (SELECT %(start)s::timestamptz
                      + (g / %(jobs)s)::bigint * %(step)s * interval '1 microsecond'
              AS t) AS s
"""
# The parent's indexes, built on the full month before it is attached (ATTACH takes an
# equal index as the partition's own), and its range as a CHECK, so that ATTACH need
# not scan the month to prove it.
_INDEXES = (
    "ALTER TABLE {table} ADD PRIMARY KEY (id, filed_at)",
    "ALTER TABLE {table} ADD UNIQUE (job_id, slot, filed_at)",
    "CREATE INDEX ON {table} (job_id, id)",
    "CREATE INDEX ON {table} (deadline) WHERE deadline IS NOT NULL",
    "CREATE INDEX ON {table} (reason, backfill) WHERE status = 'WAITING'",
)
# Months loaded at once after the first: PostgreSQL runs each INSERT ... SELECT and each
# index build in one backend, one core; two months at once keep both cores busy.
AT_ONCE = 2


def fitting_rows(db: sqlalchemy.Engine) -> tuple[int, int]:
    """How many rows the database's disk can take, and the bytes free there."""
    with db.connect() as conn:
        folder = conn.exec_driver_sql("SHOW data_directory").scalar_one()
    free = shutil.disk_usage(folder).free
    return int(free / (BYTES_PER_ROW * MARGIN)), free


def load_month(db: sqlalchemy.Engine, index: int, rows: int, jobs: int, low: int, revision: str):  # type: ignore[no-untyped-def]
    month = partitions.month_of(partitions.add_months(FIRST, index))
    seconds = (month.end - month.start).total_seconds()
    step = int(seconds * 1_000_000 * jobs / rows)  # microseconds between a job's slots
    table = month.name
    with db.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE TABLE {table} (LIKE invocations INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
        )
    for first in range(0, rows, CHUNK):
        with db.begin() as conn:
            conn.exec_driver_sql("SET LOCAL synchronous_commit = off")
            conn.exec_driver_sql(
                _LOAD.format(table=table),
                dict(
                    base=index * rows + 1,
                    low=low,
                    jobs=jobs,
                    revision=revision,
                    first=first,
                    last=min(first + CHUNK, rows) - 1,
                    start=month.start,
                    step=step,
                ),
            )
    lo, hi = f"'{month.start.isoformat()}'", f"'{month.end.isoformat()}'"
    with db.begin() as conn:
        # A month's sort in memory rather than in temporary files (the default is 64 MB).
        conn.exec_driver_sql("SET LOCAL maintenance_work_mem = '1GB'")
        for statement in _INDEXES:
            conn.exec_driver_sql(statement.format(table=table))
        conn.exec_driver_sql(
            f"ALTER TABLE {table} ADD CONSTRAINT within"
            f" CHECK (filed_at >= {lo} AND filed_at < {hi})"
        )
        conn.exec_driver_sql(
            f"ALTER TABLE invocations ATTACH PARTITION {table} FOR VALUES FROM ({lo}) TO ({hi})"
        )
        conn.exec_driver_sql(f"ALTER TABLE {table} DROP CONSTRAINT within")
    with db.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql(f"VACUUM ANALYZE {table}")
    return month, step


def measure(
    name: str, scheduler: Scheduler, args: argparse.Namespace, loaded: list, suffix: str
) -> None:
    """History and explain of random jobs, over the months loaded."""
    rng = random.Random(0)
    history, explained = [], []
    for _ in range(args.queries):
        k = rng.randrange(args.jobs)  # the job low + k
        job = args.refs[k]
        t = time.perf_counter()
        rows = scheduler.history(job, limit=50)
        history.append(time.perf_counter() - t)
        assert len(rows) == 50, rows
        # A slot of that job in a random month loaded: the g-th of the month is job
        # low + g % jobs, at start + (g // jobs) * step.
        month, step, per_month = rng.choice(loaded)
        g = rng.randrange(per_month // args.jobs) * args.jobs + k
        at = month.start + timedelta(microseconds=(g // args.jobs) * step)
        t = time.perf_counter()
        answer = scheduler.explain(job, at)
        explained.append(time.perf_counter() - t)
        assert answer["answer"] == "ran", answer
    figure(name, f"history_p50{suffix}", percentile(history, 0.5) * 1000, "ms")
    figure(name, f"history_p99{suffix}", percentile(history, 0.99) * 1000, "ms")
    figure(name, f"explain_p50{suffix}", percentile(explained, 0.5) * 1000, "ms")
    figure(name, f"explain_p99{suffix}", percentile(explained, 0.99) * 1000, "ms")


def out_of_cache(db: sqlalchemy.Engine, table: str) -> int:
    """Ask the OS to drop the cached pages of ``table``'s files (heap, indexes, TOAST),
    as a month not read for months would have none; returns the bytes of the files it
    could open (0 if the database's files are not this machine's to read)."""
    query = (
        "SELECT current_setting('data_directory'), pg_relation_filepath(c.oid) FROM pg_class c"
        " WHERE c.oid = %(t)s::regclass OR c.oid = (SELECT reltoastrelid FROM pg_class"
        " WHERE oid = %(t)s::regclass) OR c.oid IN (SELECT indexrelid FROM pg_index"
        " WHERE indrelid IN (%(t)s::regclass, (SELECT reltoastrelid FROM pg_class"
        " WHERE oid = %(t)s::regclass)))"
    )
    try:
        with db.connect() as conn:
            conn.exec_driver_sql("CHECKPOINT")  # written out: only clean pages can go
            paths = [Path(d, p) for d, p in conn.exec_driver_sql(query, {"t": table}) if p]
    except sqlalchemy.exc.DBAPIError:  # not a superuser
        return 0
    done = 0
    for first in paths:
        for segment in [first, *sorted(first.parent.glob(f"{first.name}.*"))]:
            try:
                fd = os.open(segment, os.O_RDONLY)
            except OSError:
                continue
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                done += os.fstat(fd).st_size
            finally:
                os.close(fd)
    return done


class Probe:
    """Every 2 ms, on a thread and a connection of its own, what a tick's transaction
    locks, in its order: a job's row written, then history read. ``longest`` is the
    longest any took while the probe ran (how long a drop held the hot path up), one
    that failed (a lock wait, a deadlock) included; ``failed`` counts those."""

    def __init__(self, db: sqlalchemy.Engine):
        self.db, self.longest, self.failed = db, 0.0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with self.db.connect() as conn:
            while not self._stop.is_set():
                t = time.perf_counter()
                try:
                    with conn.begin():
                        conn.exec_driver_sql(
                            "UPDATE jobs SET generation = generation"
                            " WHERE id = (SELECT min(id) FROM jobs)"
                        )
                        conn.exec_driver_sql("SELECT count(*) FROM invocations WHERE id = 1").all()
                except sqlalchemy.exc.DBAPIError:
                    self.failed += 1
                self.longest = max(self.longest, time.perf_counter() - t)
                time.sleep(0.002)

    def __enter__(self) -> Probe:
        self._thread.start()
        while self._thread.is_alive() and not self.longest:  # a first statement run
            time.sleep(0.01)
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.history_scale", description=__doc__)
    parser.add_argument("--rows", default="180000000", help="a number, or 'largest'")
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=500)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-history-") as tmp, database() as (url, db):
        fits, free = fitting_rows(db)
        if args.rows == "largest":
            args.rows = fits
        rows = int(args.rows) // (MONTHS * args.jobs) * (MONTHS * args.jobs)
        if rows > fits:
            raise SystemExit(
                f"not enough disk for {rows:,} rows: they need about"
                f" {rows * BYTES_PER_ROW * MARGIN / 1e9:.0f} GB, the database's disk has"
                f" {free / 1e9:.0f} GB free, enough for {fits:,} (--rows largest takes"
                " that many). Nothing was written."
            )
        name = f"history_scale[rows={rows}]"
        per_month = rows // MONTHS
        folder = Path(tmp)
        c = cluster(folder, CRONCHAIN_DATABASE_URL=url)  # the embedded broker: no ticks run
        document = {
            "project": "bench",
            "jobs": [
                {"name": f"job{i:04d}", "schedule": "every 1h", "noop": {}}
                for i in range(args.jobs)
            ],
        }
        (folder / "jobs.yaml").write_text(json.dumps(document))
        c.cronchain_alone("apply", str(folder / "jobs.yaml"))
        with db.begin() as conn:
            low, revision = conn.exec_driver_sql("SELECT min(id), min(revision) FROM jobs").one()
            named = conn.exec_driver_sql("SELECT id, project || '/' || name FROM jobs").all()
        args.refs = {job_id - low: ref for job_id, ref in named}
        engine = Engine(db, port=None, invokers={}, grace=timedelta(seconds=15))  # type: ignore[arg-type]
        scheduler = Scheduler(engine)

        def load(index: int) -> tuple:
            month, step = load_month(db, index, per_month, args.jobs, low, revision)
            return month, step, per_month

        started = time.perf_counter()
        loaded = [load(0)]
        built = time.perf_counter() - started
        measure(name, scheduler, args, loaded, "_at_a_sixth")
        started = time.perf_counter()
        with ThreadPoolExecutor(AT_ONCE) as pool:
            loaded += pool.map(load, range(1, MONTHS))
        with db.begin() as conn:
            conn.exec_driver_sql(f"SELECT setval('invocations_id_seq', {MONTHS * per_month})")
        built += time.perf_counter() - started
        figure(name, "build", built / 60, "min")
        figure(name, "write_rows", rows / built, "rows/s")
        measure(name, scheduler, args, loaded, "")

        with db.connect() as conn:
            total = conn.exec_driver_sql(
                "SELECT sum(pg_total_relation_size(inhrelid)) FROM pg_inherits"
                " WHERE inhparent = 'invocations'::regclass"
            ).scalar_one()
        figure(name, "bytes_per_row", total / rows, "B")

        oldest = loaded[0][0]
        # A month retention drops has not been read for six months: its pages are long
        # out of the OS's cache (a month here is gigabytes), until the rollup reads it,
        # seconds before the drop. This one was written minutes ago, all of it cached,
        # and dropping a file the cache holds costs about twice as much (2.7 GB tables:
        # 641-650 ms cached, 307-326 ms not). So its files leave the cache before the
        # rollup, which reads back what it reads, as retention's would.
        evicted = out_of_cache(db, oldest.name)
        figure(name, "oldest_month_evicted_from_cache", evicted / 2**20, "MiB")
        t = time.perf_counter()
        with db.begin() as conn:
            days = history_days.roll_up(conn, oldest.end)
            partitions.forget_before(conn, oldest)
        figure(name, "rollup_oldest_month", time.perf_counter() - t, "s")
        figure(name, "rollup_job_days", days)
        with Probe(db) as probe:  # as retention takes a month out, a transaction a step
            t = time.perf_counter()
            with db.begin() as conn:
                gone = partitions.detach(conn, oldest)
            detached = time.perf_counter() - t
            with db.begin() as conn:
                partitions.unlink(conn, gone)
            with db.begin() as conn:
                partitions.drop_detached(conn, gone)
            dropped = time.perf_counter() - t
        figure(name, "detach_oldest_month", detached * 1000, "ms")
        figure(name, "drop_oldest_month", dropped * 1000, "ms")
        figure(name, "history_stall_max", probe.longest * 1000, "ms")
        figure(name, "history_stall_failed", probe.failed)
        # The previous code, in the same run: the next month (as many rows) detached and
        # dropped in one transaction, history locked throughout.
        out_of_cache(db, loaded[1][0].name)  # and read back by a rollup, as the first
        with db.begin() as conn:
            history_days.roll_up(conn, loaded[1][0].end)
        with Probe(db) as probe:
            t = time.perf_counter()
            with db.begin() as conn:
                partitions.forget_before(conn, loaded[1][0])
                gone = partitions.detach(conn, loaded[1][0])
                partitions.unlink(conn, gone)
                partitions.drop_detached(conn, gone)
            dropped = time.perf_counter() - t
        figure(name, "drop_in_one_transaction", dropped * 1000, "ms")
        figure(name, "history_stall_max_in_one_transaction", probe.longest * 1000, "ms")
        figure(name, "history_stall_failed_in_one_transaction", probe.failed)

        t = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "cronchain.scheduler.cli",
                "history",
                "bench/job0007",
                "--limit",
                "50",
            ],
            env=c.env,
            check=True,
            capture_output=True,
        )
        figure(name, "cli_wall_with_process_start", (time.perf_counter() - t) * 1000, "ms")


if __name__ == "__main__":
    main()
