"""A total outage with real processes, under each misfire policy.

Three ``every 1s`` jobs, one per policy, come from a jobs folder that beat reconciles
(``CRONCHAIN_JOBS_DIR``). Worker, beat and Redis are then stopped for ``OUTAGE``, and
everything is started again with an empty Redis. PostgreSQL alone remembers. The history
must then be exact: every slot once, the missed ones decided together by one misfire
step, and recorded as the job's policy says.

What makes the outage one is its length against the period, the misfire grace and the
watchdog interval, so all four are in seconds: at 10 s slots, a 10 s grace and a 5 s
watchdog, two minutes of downtime said the same as five seconds say here.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from cronchain.scheduler.storage.models import invocations, jobs
from tests.e2e.harness import Cluster, database
from tests.support.services import RedisServer
from tests.support.wait import now, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis]
PERIOD = timedelta(seconds=1)
# The jobs' own misfire grace, one period: a slot late by more is missed. Unset, it would
# be 10 s (schedules._default_grace has that floor); 1 s is the least a skip job may set.
GRACE = PERIOD
# The watchdog's interval, the least CRONCHAIN_WATCHDOG_INTERVAL takes (settings._SECONDS).
WATCHDOG = PERIOD
# Five periods, five graces, five watchdog intervals: every job misses several slots.
OUTAGE = 5 * PERIOD
POLICIES = ("skip", "latest", "all")
# overlap: buffer_all, so that a slot due while the catch-up (or latest's run) is still
# running waits for it rather than being SKIPPED ("overlap"): the next slot comes up to a
# period after the misfire step, a race that one-second slots would lose often.
JOBS = "project: time\njobs:\n" + "".join(
    f"  - {{name: {p}, schedule: every {PERIOD.seconds}s, misfire: {p},"
    f" misfire_grace: {GRACE.seconds}s, overlap: buffer_all, noop: {{}}}}\n"
    for p in POLICIES
)
Rows = list[dict[str, Any]]
History = dict[str, Rows]


def history(url: str) -> History:
    db = database(url)
    try:
        with db.connect() as conn:
            query = (
                select(jobs.c.name, invocations)
                .join(jobs, jobs.c.id == invocations.c.job_id)
                .where(jobs.c.project == "time")
                .order_by(invocations.c.slot)
            )
            found: History = {p: [] for p in POLICIES}
            for row in conn.execute(query):
                found[row.name].append(dict(row._mapping))
            return found
    finally:
        db.dispose()


def start(cluster: Cluster) -> None:
    cluster.start_worker()
    cluster.start_work_worker()
    cluster.start_beat()
    cluster.wait_ready()


def around(rows: Rows, down: datetime) -> tuple[Rows, Rows, Rows]:
    """One job's history as the slots before the outage, those it missed and those after.
    The missed slots are those created after the outage began: one misfire step decided
    them all, in one transaction, so they share its time."""
    late = [r for r in rows if r["created_at"] > down]
    if not late:
        return rows, [], []
    missed = [r for r in late if r["created_at"] == late[0]["created_at"]]
    before = [r for r in rows if r["slot"] < missed[0]["slot"]]
    after = [r for r in rows if r["slot"] > missed[-1]["slot"]]
    return before, missed, after


def test_outage_under_each_misfire_policy(tmp_path: Path, pg_url: str, redis: RedisServer):
    folder = tmp_path / "jobs"
    folder.mkdir()
    (folder / "time.yaml").write_text(JOBS)
    cluster = Cluster.create(
        tmp_path,
        CRONCHAIN_DATABASE_URL=pg_url,
        CRONCHAIN_BROKER_URL=redis.url,
        CRONCHAIN_JOBS_DIR=str(folder),
        CRONCHAIN_RECONCILE_INTERVAL="2",
        CRONCHAIN_WATCHDOG_INTERVAL=str(WATCHDOG.seconds),
    )
    cluster.cronchain("db", "upgrade")
    try:
        start(cluster)

        def ran_twice() -> bool:
            done = history(pg_url)
            return all(sum(r["status"] == "SUCCEEDED" for r in done[p]) >= 2 for p in POLICIES)

        wait_until(ran_twice, 60, "beat to apply the jobs folder and each job to run twice")
        cluster.stop_all()
        redis.stop()
        down = now()
        time.sleep(OUTAGE.total_seconds())
        redis.start()  # empty: every message in flight is gone
        up = now()
        start(cluster)

        def caught_up() -> History | None:
            """Three slots after the missed ones, and every run so far finished: the
            history to check (later slots keep coming until the processes stop)."""
            done = history(pg_url)
            finished = all(r["finished_at"] for rows in done.values() for r in rows)
            again = all(len(around(done[p], down)[2]) >= 3 for p in POLICIES)
            return done if finished and again else None

        found = wait_until(caught_up, 90, "every job to fire again on time")
    finally:
        cluster.stop_all()

    for policy, rows in found.items():
        check(policy, rows, down, up)


def check(policy: str, rows: Rows, down: datetime, up: datetime) -> None:
    slots = [r["slot"] for r in rows]
    assert len(set(slots)) == len(slots), f"{policy}: a slot twice"
    assert all(b - a == PERIOD for a, b in zip(slots, slots[1:], strict=False)), (
        f"{policy}: a hole in the history: {slots}"
    )
    before, missed, after = around(rows, down)
    assert missed, f"{policy}: nothing decided after the outage"
    decided = missed[0]["created_at"]
    assert decided > up, f"{policy}: decided before the restart"
    assert len(missed) >= OUTAGE / PERIOD, f"{policy}: {len(missed)} missed"
    assert before and after
    for r in before + after:  # on time, outside the outage
        assert (r["status"], r["reason"]) == ("SUCCEEDED", None), (policy, r)
        assert r["created_at"] - r["slot"] < PERIOD, (policy, r)
    statuses = [(r["status"], r["reason"]) for r in missed]
    skipped = ("SKIPPED", "misfire")
    ok = ("SUCCEEDED", None)
    expected = {
        "skip": [skipped] * len(missed),
        "latest": [skipped] * (len(missed) - 1) + [ok],
        "all": [ok] * len(missed),
    }[policy]
    assert statuses == expected, f"{policy}: {statuses}"
    if policy == "all":  # one after another, oldest first
        starts = [r["started_at"] for r in missed]
        assert starts == sorted(starts)
        assert all(
            a["finished_at"] <= b["started_at"] for a, b in zip(missed, missed[1:], strict=False)
        )
