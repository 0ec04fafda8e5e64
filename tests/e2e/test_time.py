"""Two minutes of total downtime with real processes, under each misfire policy.

Three ``every 10s`` jobs, one per policy, come from a jobs folder that beat reconciles
(``CRONCHAIN_JOBS_DIR``). Worker, beat and Redis are then stopped for two minutes, and
everything is started again with an empty Redis. PostgreSQL alone remembers. The history
must then be exact: every slot once, the missed ones decided together by one misfire
step, and recorded as the job's policy says.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from cronchain.scheduler.storage.models import invocations, jobs
from tests.e2e.harness import Cluster, database, now, wait_until
from tests.services import RedisServer

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis]
PERIOD = timedelta(seconds=10)
OUTAGE = 120  # seconds
POLICIES = ("skip", "latest", "all")
JOBS = "project: time\njobs:\n" + "".join(
    f"  - {{name: {p}, schedule: every 10s, misfire: {p}, noop: {{}}}}\n" for p in POLICIES
)


def history(url: str) -> dict[str, list[dict[str, Any]]]:
    db = database(url)
    try:
        with db.connect() as conn:
            query = (
                select(jobs.c.name, invocations)
                .join(jobs, jobs.c.id == invocations.c.job_id)
                .where(jobs.c.project == "time")
                .order_by(invocations.c.slot)
            )
            found: dict[str, list[dict[str, Any]]] = {p: [] for p in POLICIES}
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


def test_two_minutes_down_under_each_misfire_policy(
    tmp_path: Path, pg_url: str, redis: RedisServer
):
    folder = tmp_path / "jobs"
    folder.mkdir()
    (folder / "time.yaml").write_text(JOBS)
    cluster = Cluster.create(
        tmp_path,
        CRONCHAIN_DATABASE_URL=pg_url,
        CRONCHAIN_BROKER_URL=redis.url,
        CRONCHAIN_JOBS_DIR=str(folder),
        CRONCHAIN_RECONCILE_INTERVAL="2",
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
        time.sleep(OUTAGE)
        redis.start()  # empty: every message in flight is gone
        up = now()
        start(cluster)

        def caught_up() -> bool:
            done = history(pg_url)
            return all(any(r["slot"] > up + 3 * PERIOD for r in done[p]) for p in POLICIES)

        wait_until(caught_up, 90, "every job to fire again on time")
        time.sleep(2)  # let the last runs finish
        cluster.stop_all()
    finally:
        cluster.stop_all()

    for policy, rows in history(pg_url).items():
        check(policy, rows, down, up)


def check(policy: str, rows: list[dict[str, Any]], down: datetime, up: datetime) -> None:
    slots = [r["slot"] for r in rows]
    assert len(set(slots)) == len(slots), f"{policy}: a slot twice"
    assert all(b - a == PERIOD for a, b in zip(slots, slots[1:], strict=False)), (
        f"{policy}: a hole in the history: {slots}"
    )
    # The missed slots are those created after the outage began: one misfire step
    # decided them all, in one transaction, so they share its time.
    missed = [r for r in rows if r["created_at"] > down and r["slot"] <= up + 3 * PERIOD]
    missed = [r for r in missed if r["created_at"] == missed[0]["created_at"]]
    decided = missed[0]["created_at"]
    assert decided > up, f"{policy}: decided before the restart"
    assert len(missed) >= OUTAGE / PERIOD.total_seconds(), f"{policy}: {len(missed)} missed"
    before = [r for r in rows if r["slot"] < missed[0]["slot"]]
    after = [r for r in rows if r["slot"] > missed[-1]["slot"]]
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
