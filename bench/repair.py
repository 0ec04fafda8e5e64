"""Recovery from a lost Redis: 10k chains gone at once, the watchdog brings them back.

    python -m bench.repair [--jobs 10000] [--period 60] [--interval 10]

Phase 1, end to end: N no-op jobs spread over the period run on both paths, as ``cronchain
up`` deploys them (the control path's worker, the work path's, beat). Both workers are
killed and Redis flushed (every message is gone, queued or held by a worker: ticks, and
runs sent to the work path but not yet claimed), then both start again. Figures: how late
the first slot of each job after the loss was handled (the watchdog's repair, target two
watchdog intervals), how many of those slots fired or were skipped and why, how long
until every job was back, and how many lost runs the watchdog sent again.

Phase 2, the watchdog alone: with every chain lost and lapsed, watchdog passes in this
process until no tick is left to repair, timed: CPU per repaired job and wall time.
"""

from __future__ import annotations

import argparse
import re
import signal
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Row, func, select

from bench.common import analyze, deployment, figure, percentile, recent_lags, settle
from cronchain.scheduler.maintenance.watchdog import run_once
from cronchain.scheduler.storage.models import invocations, jobs


def first_slots_after(db, t: datetime) -> list[Row]:  # type: ignore[no-untyped-def]
    """Each job's first slot after ``t`` that is recorded: its status, reason, and when
    it was handled (started, or recorded as skipped)."""
    first = (
        select(invocations.c.job_id, func.min(invocations.c.slot).label("slot"))
        .where(invocations.c.slot > t)
        .group_by(invocations.c.job_id)
        .subquery()
    )
    handled = func.coalesce(invocations.c.started_at, invocations.c.created_at)
    query = select(
        invocations.c.slot,
        invocations.c.status,
        invocations.c.reason,
        handled.label("handled"),
    ).join(
        first,
        (invocations.c.job_id == first.c.job_id) & (invocations.c.slot == first.c.slot),
    )
    with db.connect() as conn:
        return list(conn.execute(query))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.repair", description=__doc__)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--period", type=float, default=60)
    parser.add_argument("--interval", type=float, default=10, help="watchdog interval, s")
    args = parser.parse_args(argv)
    name = f"repair[jobs={args.jobs},period={args.period:g}s,interval={args.interval:g}s]"
    with (
        tempfile.TemporaryDirectory(prefix="bench-repair-") as tmp,
        deployment(Path(tmp), CRONCHAIN_WATCHDOG_INTERVAL=f"{args.interval:g}") as d,
    ):
        db, redis, c = d.db, d.redis, d.cluster
        # As in fire_rate: the workers first, so that no slot passes before they run,
        # then steady state (every fire less than a second late) before anything is lost.
        d.start()
        d.wait_ready()
        d.apply_jobs(args.jobs, args.period)
        settle(lambda: recent_lags(db), args.period)
        analyze(db)  # the runs of the warm-up are in the history now

        c.kill("worker", signal.SIGKILL)  # with the ETA ticks it held
        c.kill("work", signal.SIGKILL)  # with the runs it had taken and not yet claimed
        redis.client().flushall()  # and every message queued
        lost = datetime.now(UTC)
        log_mark = len(c.log("worker"))  # the restarted worker appends to the same log
        d.start(beat=False)
        deadline = time.monotonic() + args.period + 4 * args.interval
        while time.monotonic() < deadline:
            if len(first_slots_after(db, lost)) == args.jobs:
                break
            time.sleep(1)
        beat_alive = c.processes["beat"].poll() is None
        c.stop_all()
        figure(name, "beat_alive_at_end", int(beat_alive))
        first = first_slots_after(db, lost)
        lags = [(r.handled - r.slot).total_seconds() for r in first]
        figure(name, "jobs_back", len(first))
        figure(name, "first_slot_fired", sum(r.status != "SKIPPED" for r in first))
        # A run that was under way when its worker was killed holds its job until its
        # lease (60 s by default) lapses; the slots meanwhile are skipped as overlaps.
        skipped = Counter(r.reason for r in first if r.status == "SKIPPED")
        for reason, count in sorted(skipped.items()):
            figure(name, f"first_slot_skipped_{reason}", count)
        figure(name, "first_slot_lag_p50", percentile(lags, 0.5), "s")
        figure(name, "first_slot_lag_max", max(lags, default=float("nan")), "s")
        figure(name, "first_slot_lag_max_in_intervals", max(lags, default=0) / args.interval)
        if first:
            everyone = max(r.handled for r in first)
            figure(name, "every_job_back_after", (everyone - lost).total_seconds(), "s")
        # More repairs than jobs: some were repaired again while still on their way.
        log = c.log("worker")[log_mark:]
        reports = re.findall(r"watchdog repaired .*?ticks=(\d+)", log)
        figure(name, "watchdog_tick_repairs", sum(map(int, reports)))
        resent = re.findall(r"watchdog repaired .*?resent=(\d+)", log)
        figure(name, "watchdog_runs_resent", sum(map(int, resent)))
        figure(name, "watchdog_runs", len(re.findall(r"cronchain\.watchdog\[\S+\] succeeded", log)))
        waits = [float(w) for w in re.findall(r"watchdog repaired .*\(it waited ([\d.]+) s\)", log)]
        figure(name, "watchdog_repairing_runs_max_wait", max(waits, default=0), "s")
        figure(name, "watchdog_runs_expired", log.count("revoked task: cronchain.watchdog"))
        figure(
            name, "watchdog_runs_failed", len(re.findall(r"cronchain\.watchdog\[\S+\] raised", log))
        )

        # Phase 2: every chain lost again, and lapsed; one sweep, in this process.
        redis.client().flushall()
        with db.connect() as conn:
            # Parked ticks (periods past the horizon) are not lost: only sent ones are.
            sent = jobs.c.tick_at <= jobs.c.watchdog_at
            last = conn.execute(select(func.max(jobs.c.watchdog_at)).where(sent)).scalar_one()
        time.sleep(max(0.0, (last - datetime.now(UTC)).total_seconds()) + 1)
        # Passes until no tick is left to repair.
        runtime = d.runtime()
        # A fixed clock: with no worker, every chain would lapse again a period later,
        # and the passes would never end. Each job is repaired once, as of this instant.
        frozen = datetime.now(UTC)
        runtime.engine.clock = lambda: frozen
        cpu, wall = time.process_time(), time.perf_counter()
        report = total = run_once(runtime.engine)
        while report.ticks:
            report = run_once(runtime.engine)
            total += report
        report = total
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        figure(name, "sweep_repaired", report.ticks)
        figure(name, "sweep_starts_resent", report.starts)
        figure(name, "sweep_runs_resent", report.resent)  # unclaimed when the workers stopped
        figure(name, "sweep_woken", report.woken)  # parked ticks due meanwhile: not repairs
        figure(name, "sweep_wall", wall, "s")
        if report.ticks:
            figure(name, "sweep_cpu_per_repaired_job", cpu / report.ticks * 1000, "ms")
        runtime.engine.db.dispose()


if __name__ == "__main__":
    main()
