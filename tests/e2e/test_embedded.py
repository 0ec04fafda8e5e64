"""``cronchain up`` with nothing configured: SQLite and the filesystem broker under
CRONCHAIN_HOME, worker and beat in one command, 20 jobs every second."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.harness import Cluster, HitCounter, check_ledger, database, job_file, now, wait_until

pytestmark = pytest.mark.e2e


def test_up_runs_twenty_jobs_on_sqlite_without_lock_errors(tmp_path: Path):
    hits = HitCounter()
    cluster = Cluster.create(tmp_path)
    path = job_file(tmp_path / "jobs.yaml", hits.url)
    try:
        cluster.start("up", sys.executable, "-m", "scheduler.cli", "up", str(path))
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
        assert ledger.succeeded >= 0.95 * ledger.expected, ledger.summary()
        assert set(ledger.skipped) <= {"overlap"} and ledger.failed == {}
    finally:
        cluster.kill("up", signal.SIGTERM)
        hits.close()
    log = cluster.log("up")
    assert "database is locked" not in log
    assert "Traceback" not in log, log[-3000:]
