"""``celery`` jobs on a real worker: the task's own success or failure, reported back
through the worker side (scheduler.workers.hooks), finishes the invocation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.harness import Cluster
from tests.support.cli import Cli
from tests.support.wait import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis]

FILE = """
project: etl
jobs:
  - name: add
    schedule: triggered
    celery: {task: sample.add, queue: etl, args: [2, 3]}
  - name: boom
    schedule: triggered
    celery: {task: sample.boom, queue: etl}
"""


@pytest.fixture
def cluster(tasks_cluster: Cluster) -> Cluster:
    return tasks_cluster


def test_the_task_outcome_finishes_the_invocation(cluster: Cluster, cli: Cli, tmp_path: Path):
    cluster.start_worker(queues="cronchain,etl")
    cluster.wait_ready()
    (tmp_path / "etl.yaml").write_text(FILE)
    cli("apply", str(tmp_path / "etl.yaml"))
    cli("trigger", "etl/add")
    cli("trigger", "etl/boom")

    def finished():  # type: ignore[no-untyped-def]
        rows = json.loads(cli("history", "--json").stdout)
        done = {r["job"]: r for r in rows if r["status"] not in ("STARTING", "RUNNING")}
        return done if len(done) == 2 else None

    done = wait_until(finished, 30, "both celery runs to finish")
    assert done["etl/add"]["status"] == "SUCCEEDED"
    assert done["etl/boom"]["status"] == "FAILED"
    assert done["etl/boom"]["error"] == "RuntimeError: boom"  # the exception, not just an id
    jobs = {j["id"]: j["state"] for j in json.loads(cli("jobs", "--json").stdout)}
    assert jobs == {"etl/add": "SCHEDULED", "etl/boom": "SCHEDULED"}


OUTSIDE = """
project: etl
jobs:
  - name: nul
    schedule: triggered
    celery: {task: sample.nul_error, queue: etl}
  - name: unprintable
    schedule: triggered
    celery: {task: sample.unprintable_error, queue: etl}
"""


def test_a_task_error_no_database_stores_fails_the_run_and_blocks_nothing(
    cluster: Cluster, cli: Cli, tmp_path: Path
):
    """A task that raises NUL text, or an exception whose text cannot be read: its run
    ends FAILED once, its lease is let go, and the next trigger runs (it is not skipped
    as an overlap behind a run left RUNNING)."""
    cluster.start_worker(queues="cronchain,etl")
    cluster.wait_ready()
    (tmp_path / "etl.yaml").write_text(OUTSIDE)
    cli("apply", str(tmp_path / "etl.yaml"))
    for job in ("etl/nul", "etl/unprintable"):
        cli("trigger", job)

    def ended(count: int):  # type: ignore[no-untyped-def]
        rows = json.loads(cli("history", "--json").stdout)
        done = [r for r in rows if r["status"] not in ("STARTING", "RUNNING")]
        return rows if len(done) == count else None

    rows = wait_until(lambda: ended(2), 30, "both celery runs to end")
    errors = {r["job"]: (r["status"], r["attempt"], r["error"]) for r in rows}
    assert errors["etl/nul"] == (
        "FAILED",
        1,
        "ValueError: bad bytes: \ufffd\x01"
        " [cronchain replaced 1 character(s) it cannot store with U+FFFD]",
    )
    assert errors["etl/unprintable"] == (
        "FAILED",
        1,
        "_Unprintable (its message could not be read: RuntimeError)",
    )
    for job in ("etl/nul", "etl/unprintable"):
        assert cli("trigger", job).stdout.strip().endswith("started")
    wait_until(lambda: ended(4), 30, "the next runs to end")
