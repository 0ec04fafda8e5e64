"""A job's priority orders its runs' messages in a queue that has backed up: real
Redis, real worker processes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from sqlalchemy import select

from cronchain.scheduler.storage.models import invocations, jobs
from tests.e2e.harness import Cluster, database
from tests.support.cli import Cli
from tests.support.wait import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]


def test_higher_priorities_are_claimed_first_from_a_backed_up_queue(
    cluster: Cluster, cli: Cli, pg_url: str, tmp_path: Path
):
    entries = [
        f"  - {{name: {level}-{i}, schedule: triggered, priority: {priority}, noop: {{}}}}"
        for level, priority in (("low", 1), ("high", 9))
        for i in range(5)
    ]
    path = tmp_path / "jobs.yaml"
    path.write_text("project: p\njobs:\n" + "\n".join(entries) + "\n")
    cli("db", "upgrade")
    cli("apply", str(path))
    cluster.start_worker()  # the control path alone: runs wait in the work queue
    db = database(pg_url)

    def runs() -> list[tuple[str, str | None, object]]:
        query = (
            select(jobs.c.name, invocations.c.worker, invocations.c.started_at)
            .select_from(invocations.join(jobs, jobs.c.id == invocations.c.job_id))
            .where(invocations.c.status.in_(("RUNNING", "SUCCEEDED")))
        )
        with db.connect() as conn:
            return [tuple(r) for r in conn.execute(query)]

    cluster.wait_ready()
    for level in ("low", "high"):  # the low ones queued first, one after another
        for i in range(5):
            cli("trigger", f"p/{level}-{i}")
            sent = 5 * (level == "high") + i + 1
            wait_until(
                lambda n=sent: len(runs()) == n, 60, f"{sent} runs sent to the work path", 0.05
            )
    assert all(worker is None for _, worker, _ in runs())  # none claimed yet
    cluster.start(
        "work",
        sys.executable,
        *("-m", "celery", "-A", "cronchain.tasks", "worker", "--queues", "cronchain.work"),
        *("--pool", "threads", "--concurrency", "1", "--prefetch-multiplier", "1"),
    )
    wait_until(lambda: all(w for _, w, _ in runs()) and len(runs()) == 10, 60, "all claimed")
    claimed = [name for name, _, _ in sorted(runs(), key=lambda r: r[2])]
    assert [n.split("-")[0] for n in claimed] == ["high"] * 5 + ["low"] * 5, claimed
    db.dispose()
