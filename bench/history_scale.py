"""History at scale: ``cronchain history JOB --limit 50`` over 10M invocation rows.

    python -m bench.history_scale [--rows 10000000] [--jobs 1000] [--queries 500]

The rows are written by SQL (``generate_series``), as a year of a busy deployment would
leave them: succeeded runs of 1,000 jobs, one slot a second each, with start and finish
times and the revision, as the engine writes them. The figures: bytes per row on disk
(table, indexes and TOAST), and the time of the history query for a random job, as the
CLI runs it (``Scheduler.history``, resolving the job's name), p50 and p99. The CLI's own
process start (Python importing Celery) comes on top; it is printed apart.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from bench.common import cluster, database, figure, percentile
from scheduler.api import Scheduler
from scheduler.engine import Engine

CHUNK = 1_000_000


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.history_scale", description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=500)
    args = parser.parse_args(argv)
    name = f"history_scale[rows={args.rows}]"
    with tempfile.TemporaryDirectory(prefix="bench-history-") as tmp, database() as (url, db):
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
        c.cronchain("apply", str(folder / "jobs.yaml"))
        started = time.perf_counter()
        with db.begin() as conn:
            low, revision = conn.exec_driver_sql("SELECT min(id), min(revision) FROM jobs").one()
        for first in range(0, args.rows, CHUNK):
            with db.begin() as conn:
                conn.exec_driver_sql(
                    """
                    INSERT INTO invocations (job_id, slot, revision, status, attempt,
                        created_at, started_at, finished_at, backfill)
                    SELECT %(low)s + g %% %(jobs)s,
                           timestamptz '2025-01-01' + (g / %(jobs)s) * interval '1 second',
                           %(revision)s, 'SUCCEEDED', 1,
                           timestamptz '2025-01-01' + (g / %(jobs)s) * interval '1 second',
                           timestamptz '2025-01-01' + (g / %(jobs)s) * interval '1 second'
                               + interval '15 milliseconds',
                           timestamptz '2025-01-01' + (g / %(jobs)s) * interval '1 second'
                               + interval '40 milliseconds',
                           false
                    FROM generate_series(%(first)s, %(last)s) AS g
                    """,
                    dict(
                        low=low,
                        jobs=args.jobs,
                        revision=revision,
                        first=first,
                        last=min(first + CHUNK, args.rows) - 1,
                    ),
                )
        figure(name, "write_rows", args.rows / (time.perf_counter() - started), "rows/s")
        with db.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM ANALYZE invocations")
            total, heap = conn.exec_driver_sql(
                "SELECT pg_total_relation_size('invocations'), pg_relation_size('invocations')"
            ).one()
        figure(name, "bytes_per_row", total / args.rows, "B")
        figure(name, "heap_bytes_per_row", heap / args.rows, "B")

        engine = Engine(db, port=None, invokers={}, grace=timedelta(seconds=15))  # type: ignore[arg-type]
        scheduler = Scheduler(engine)
        rng = random.Random(0)
        times = []
        for _ in range(args.queries):
            job = f"bench/job{rng.randrange(args.jobs):04d}"
            t = time.perf_counter()
            rows = scheduler.history(job, limit=50)
            times.append(time.perf_counter() - t)
            assert len(rows) == 50, rows
        figure(name, "history_p50", percentile(times, 0.5) * 1000, "ms")
        figure(name, "history_p99", percentile(times, 0.99) * 1000, "ms")

        t = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "scheduler.cli", "history", "bench/job0007", "--limit", "50"],
            env=c.env,
            check=True,
            capture_output=True,
        )
        figure(name, "cli_wall_with_process_start", (time.perf_counter() - t) * 1000, "ms")


if __name__ == "__main__":
    main()
