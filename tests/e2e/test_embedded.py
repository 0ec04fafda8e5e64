"""``cronchain up`` with nothing configured: SQLite and the filesystem broker under
CRONCHAIN_HOME, worker and beat in one command, 20 jobs every second."""

from __future__ import annotations

import signal
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select

from cronchain.scheduler.storage.models import invocations, jobs
from tests.e2e.harness import Cluster, HitCounter, check_ledger, database, first_fire_after
from tests.support.jobs import http_job_file
from tests.support.wait import now, wait_until

pytestmark = pytest.mark.e2e


def test_up_runs_twenty_jobs_on_sqlite_without_lock_errors(tmp_path: Path):
    hits = HitCounter()
    cluster = Cluster.create(tmp_path)
    path = http_job_file(tmp_path / "jobs.yaml", hits.url)
    try:
        cluster.start("up", sys.executable, "-m", "cronchain.scheduler.cli", "up", str(path))
        db = database(f"sqlite:///{tmp_path}/home/cronchain.db")
        wait_until(lambda: (tmp_path / "home" / "cronchain.db").exists(), 30, "the database")
        time.sleep(30)
        end = now()

        def settled():  # type: ignore[no-untyped-def]
            ledger = check_ledger(db, hits.hits, end)
            return (
                ledger if ledger.expected and not ledger.missing and not ledger.unfinished else None
            )

        ledger = wait_until(settled, 30, "every slot to be recorded")
        print(ledger.summary())
        assert ledger.expected >= 20 * 25
        assert ledger.executed_twice == [] and ledger.undelivered == []
        assert set(ledger.skipped) <= {"overlap"} and ledger.failed == {}
        # The slots that came while the processes started are skipped (overlap) as the
        # first runs begin: as many as the start took seconds, which a loaded machine
        # stretches (to 15 s at most). Once every job has run, and its start's backlog
        # has had 5 s, the jobs keep up.
        with db.connect() as conn:
            applied = conn.execute(select(func.min(jobs.c.created_at))).scalar_one()
        first = first_fire_after(db, end - timedelta(minutes=5))
        assert len(first) == 20, f"{20 - len(first)} jobs never ran"
        assert max(first.values()) - applied <= timedelta(seconds=15), "a start that slow"
        warm = max(first.values()) + timedelta(seconds=5)
        with db.connect() as conn:
            after = conn.execute(
                select(func.count()).where(invocations.c.slot > warm, invocations.c.slot <= end)
            ).scalar_one()
        skipped_after = sum(slot > warm for _, slot in ledger.skipped_slots)
        assert skipped_after <= 0.05 * after, f"{skipped_after} of {after}: {ledger.summary()}"
    finally:
        cluster.kill("up", signal.SIGTERM)
        hits.close()
    log = cluster.log("up")
    assert "database is locked" not in log
    assert "Traceback" not in log, log[-3000:]
