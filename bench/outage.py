"""A control worker gone for minutes: no consumer on the control queue while slots come,
parked ticks' among them.

    python -m bench.outage [--far 300] [--near 100] [--outage 180]

As ``cronchain up`` deploys it (both paths, beat; the e2e harness's 5 s watchdog
interval): ``--far`` no-op jobs every 360 s (their ticks parked until 5 minutes before
each slot) and ``--near`` every 10 s, spread on whole seconds. Once steady, the control
worker stops (a warm shutdown) for ``--outage`` seconds, then starts again. Figures, for
the slots due from the stop to 30 s after the return: expected and recorded per group
(every slot once), the lag p50 and max of their starts, the watchdog runs that only
woke parked ticks (they waited more than an interval behind the stopped queue) and the
repairs it made.
"""

from __future__ import annotations

import argparse
import re
import signal
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy
from sqlalchemy import select

from bench.common import (
    CONTROL_CONCURRENCY,
    deployment,
    figure,
    job_specs,
    percentile,
    recent_lags,
    settle,
)
from bench.registry_scale import slots_between
from cronchain.scheduler.storage.models import invocations, jobs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.outage", description=__doc__)
    parser.add_argument("--far", type=int, default=300, help="jobs every 360 s")
    parser.add_argument("--near", type=int, default=100, help="jobs every 10 s")
    parser.add_argument("--outage", type=float, default=180, help="seconds without a worker")
    args = parser.parse_args(argv)
    name = f"outage[far={args.far},near={args.near},outage={args.outage:g}s]"
    groups = {
        "far": job_specs(args.far, 360, step=1, prefix="far"),
        "near": job_specs(args.near, 10, step=1, prefix="near"),
    }
    with tempfile.TemporaryDirectory(prefix="bench-outage-") as tmp, deployment(Path(tmp)) as d:
        c = d.cluster
        d.start()
        d.wait_ready()
        d.apply({"project": "bench", "jobs": [s for specs in groups.values() for s in specs]})
        settle(lambda: recent_lags(d.db), 10)
        t0 = time.time()
        c.kill("worker", signal.SIGTERM)
        time.sleep(args.outage)
        c.start_worker(concurrency=CONTROL_CONCURRENCY)
        c.wait_ready("worker", times=2)
        t1 = time.time() + 30
        time.sleep(max(0.0, t1 - time.time()))
        expected = {group: slots_between(specs, t0, t1) for group, specs in groups.items()}
        runs = recorded(d.db, t0, t1, sum(expected.values()))
        log = c.log("worker")
    for group in groups:
        mine = [r for r in runs if r[0].startswith(group)]
        figure(name, f"{group}_slots_expected", expected[group])
        figure(name, f"{group}_slots_recorded", len({(job, slot) for job, slot, *_ in mine}))
        # Slots a misfire or overlap policy skipped are recorded, not run.
        figure(name, f"{group}_slots_skipped", sum(r[2] == "SKIPPED" for r in mine))
        unstarted = [r for r in mine if r[3] is None and r[2] != "SKIPPED"]
        figure(name, f"{group}_runs_unstarted", len(unstarted))
        started = [r[3] for r in mine if r[3] is not None]
        figure(name, f"{group}_lag_p50", percentile(started, 0.5), "s")
        figure(name, f"{group}_lag_max", max(started, default=float("nan")), "s")
    figure(name, "watchdog_runs_wake_only", log.count("more than an interval"))
    repaired = re.findall(r"watchdog repaired .*?ticks=(\d+)", log)
    figure(name, "watchdog_tick_repairs", sum(map(int, repaired)))


def recorded(
    db: sqlalchemy.Engine, t0: float, t1: float, expected: int, patience: float = 60
) -> list[tuple[str, datetime, str, float | None]]:
    """(job, slot, status, lag of its start or None) of the slots in ``[t0, t1)``, once
    ``expected`` have started or been skipped, or ``patience`` seconds pass."""
    start, end = (datetime.fromtimestamp(t, UTC) for t in (t0, t1))
    query = (
        select(jobs.c.name, invocations.c.slot, invocations.c.status, invocations.c.started_at)
        .join(jobs, jobs.c.id == invocations.c.job_id)
        .where(invocations.c.slot >= start, invocations.c.slot < end)
    )
    deadline = time.monotonic() + patience
    while True:
        with db.connect() as conn:
            rows = conn.execute(query).all()
        done = sum(r.started_at is not None or r.status == "SKIPPED" for r in rows) >= expected
        if done or time.monotonic() > deadline:
            return [
                (
                    r.name,
                    r.slot,
                    r.status,
                    (r.started_at - r.slot).total_seconds() if r.started_at else None,
                )
                for r in rows
            ]
        time.sleep(1)


if __name__ == "__main__":
    main()
