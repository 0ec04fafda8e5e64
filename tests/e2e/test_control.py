"""The invocation control plane with real processes: a worker and beat on PostgreSQL and
a private Redis. Overlap policies with a slow noop job, retries and timeouts against a
real HTTP endpoint, and a worker killed with ``kill -9`` in the middle of a celery run."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy
from celery import Celery

from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.invokers import default_invokers
from cronchain.scheduler.workers.port import CeleryPort
from tests.e2e.harness import WATCHDOG_INTERVAL, Cluster, Endpoint, database
from tests.support import services
from tests.support.repo import ROOT
from tests.support.services import RedisServer, redis_server
from tests.support.wait import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis]
WORKER_PROCESSES = 8  # the etl queue's tasks (one sleeps a minute) beside the control path

POLICIES = """
project: overlap
jobs:
"""
for _mode, _extra in [
    ("skip", ""),
    ("buffer_one", ""),
    ("buffer_all", ""),
    ("allow", ", max_concurrent: 2"),
    ("cancel_other", ""),
]:
    POLICIES += (
        f"  - {{name: {_mode}, schedule: triggered, noop: {{sleep: 3s}},"
        f" overlap: {_mode}{_extra}}}\n"
    )


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with redis_server(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture(scope="module")
def pg(pg_admin: sqlalchemy.Engine, pg_template: str) -> Iterator[str]:
    name = services.create_database(pg_admin, template=pg_template)
    yield services.database_url(name)
    services.drop_database(pg_admin, name)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, redis: RedisServer, pg: str):
    folder = tmp_path_factory.mktemp("cluster")
    c = Cluster.create(
        folder,
        CRONCHAIN_DATABASE_URL=pg,
        CRONCHAIN_BROKER_URL=redis.url,
        CRONCHAIN_IMPORTS="tests.e2e.sample_tasks",
        CRONCHAIN_HTTP_ALLOW="127.0.0.1",
        PYTHONPATH=str(ROOT),
    )
    c.start_worker(queues="cronchain,etl", concurrency=WORKER_PROCESSES)
    c.start_work_worker()
    c.start_beat()
    c.wait_ready()
    yield c
    c.stop_all()


@pytest.fixture(scope="module")
def sched(cluster: Cluster, redis: RedisServer, pg: str) -> Scheduler:
    """The Python API in the test process, on the cluster's database and broker."""
    app = Celery("test", broker=redis.url)
    app.conf.task_serializer = "json"
    port = CeleryPort(app, "cronchain")
    engine = Engine(database(pg), port, default_invokers(), grace=timedelta(seconds=2.5))
    return Scheduler(engine)


def apply_text(cluster: Cluster, folder: Path, text: str) -> None:
    """``text`` as the job file in ``folder``, applied by ``cronchain apply``."""
    path = folder / "jobs.yaml"
    path.write_text(text)
    cluster.cronchain("apply", str(path))


def settled(sched: Scheduler, job: str, count: int, timeout: float = 60) -> list[dict[str, Any]]:
    """The job's invocations, oldest first, once ``count`` of them have ended."""

    def done() -> list[dict[str, Any]] | None:
        rows = sched.history(job)[::-1]
        ended = [r for r in rows if r["status"] not in ("WAITING", "STARTING", "RUNNING")]
        return rows if len(rows) == count and len(ended) == count else None

    return wait_until(done, timeout, f"{count} finished invocations of {job}")


@pytest.fixture(scope="module")
def policies(cluster: Cluster, sched: Scheduler, tmp_path_factory: pytest.TempPathFactory):
    """Each policy's job triggered three times while its first run (3 s) is active."""
    apply_text(cluster, tmp_path_factory.mktemp("jobs"), POLICIES)
    for mode in ("skip", "buffer_one", "buffer_all", "allow", "cancel_other"):
        for _ in range(3):
            sched.trigger(f"overlap/{mode}")
    return {
        mode: settled(sched, f"overlap/{mode}", 3)
        for mode in ("skip", "buffer_one", "buffer_all", "allow", "cancel_other")
    }


def statuses(rows: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    return [(r["status"], r["reason"]) for r in rows]


def at(text: str | None) -> datetime:
    assert text is not None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_skip_records_the_triggers_that_came_during_the_run(policies):  # type: ignore[no-untyped-def]
    assert statuses(policies["skip"]) == [
        ("SUCCEEDED", None),
        ("SKIPPED", "overlap"),
        ("SKIPPED", "overlap"),
    ]


def test_buffer_one_runs_one_after_the_other_and_skips_the_rest(policies):  # type: ignore[no-untyped-def]
    rows = policies["buffer_one"]
    assert statuses(rows) == [("SUCCEEDED", None), ("SUCCEEDED", None), ("SKIPPED", "overlap")]
    assert at(rows[1]["started_at"]) >= at(rows[0]["finished_at"])


def test_buffer_all_runs_every_one_in_turn(policies):  # type: ignore[no-untyped-def]
    rows = policies["buffer_all"]
    assert statuses(rows) == [("SUCCEEDED", None)] * 3
    for before, after in zip(rows, rows[1:], strict=False):
        assert at(after["started_at"]) >= at(before["finished_at"])


def test_allow_runs_two_side_by_side(policies):  # type: ignore[no-untyped-def]
    rows = policies["allow"]
    assert statuses(rows) == [("SUCCEEDED", None), ("SUCCEEDED", None), ("SKIPPED", "overlap")]
    assert at(rows[1]["started_at"]) < at(rows[0]["finished_at"])


def test_cancel_other_keeps_only_the_newest(policies):  # type: ignore[no-untyped-def]
    assert statuses(policies["cancel_other"]) == [
        ("ABORTED", "cancel_other"),
        ("ABORTED", "cancel_other"),
        ("SUCCEEDED", None),
    ]


class Flaky:
    """An HTTP endpoint: ``/flaky`` answers 500 twice then 200; ``/hang`` never answers."""

    def __init__(self) -> None:
        self.calls: list[float] = []
        flaky = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                if self.path == "/hang":
                    time.sleep(10)
                    return
                flaky.calls.append(time.monotonic())
                self.send_response(500 if len(flaky.calls) <= 2 else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = Endpoint(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_a_flaky_endpoint_succeeds_on_the_third_attempt_with_growing_delays(
    cluster: Cluster, sched: Scheduler, tmp_path: Path
):
    flaky = Flaky()
    apply_text(
        cluster,
        tmp_path,
        f"""
project: retry
jobs:
  - name: flaky
    schedule: triggered
    http: {{url: "{flaky.url}/flaky", method: POST}}
    retries: {{max_attempts: 3, backoff: 1s, jitter: 0}}
  - name: hang
    schedule: triggered
    http: {{url: "{flaky.url}/hang", method: POST, timeout: 1s}}
""",
    )
    sched.trigger("retry/flaky")
    sched.trigger("retry/hang")
    [flaky_run] = settled(sched, "retry/flaky", 1, timeout=30)
    detail = sched.invocation(flaky_run["id"])
    assert (detail["status"], detail["attempt"]) == ("SUCCEEDED", 3)
    assert [(a["attempt"], a["reason"]) for a in detail["attempts"]] == [
        (1, "status"),
        (2, "status"),
    ]
    first, second = flaky.calls[1] - flaky.calls[0], flaky.calls[2] - flaky.calls[1]
    assert 1 <= first < second  # 1 s, then 2 s
    [hang] = settled(sched, "retry/hang", 1, timeout=30)
    assert (hang["status"], hang["reason"]) == ("FAILED", "timeout")
    flaky.server.shutdown()


def test_a_run_whose_queue_has_no_consumer_waits_and_runs_once_when_one_comes(
    cluster: Cluster, sched: Scheduler, tmp_path: Path
):
    """Longer than its lease and than two watchdog intervals without a consumer: the
    attempt is sent again, never failed; when a worker starts, its body runs once, and
    the copies refused beside it leave its lease and its outcome alone."""
    apply_text(
        cluster,
        tmp_path,
        f"""
project: queue
jobs:
  - name: later
    schedule: triggered
    celery: {{task: sample.slow_once, queue: later, args: ["{tmp_path}", 3]}}
    lease: 2s
    retries: {{max_attempts: 2, backoff: 1s, jitter: 0}}
""",
    )
    inv = sched.trigger("queue/later")["invocation"]
    time.sleep(2 + 3 * WATCHDOG_INTERVAL)
    waiting = sched.invocation(inv)
    assert (waiting["status"], waiting["attempt"], waiting["worker"]) == ("RUNNING", 1, None)
    assert "sent again" in cluster.log("worker")  # the watchdog's resend, and its warning
    assert "does not consume cronchain.work" in cluster.log("worker")  # said at its start
    # On threads, as I/O-bound tasks often run: the copies the watchdog sent are taken
    # while the first runs, in the same process, and each must be refused alone.
    cluster.start_worker("later", queues="later", concurrency=8, pool="threads")
    try:
        [run] = settled(sched, "queue/later", 1, timeout=60)
    finally:
        cluster.kill("later")
    assert (run["status"], run["attempt"], run["error"]) == ("SUCCEEDED", 1, None)
    assert len((tmp_path / "runs").read_text().split()) == 1  # every other copy refused
    assert not sched.invocation(inv)["attempts"]  # no attempt was failed for waiting


def test_a_killed_worker_loses_its_lease_and_the_retry_runs_on_a_new_one(
    cluster: Cluster, sched: Scheduler, tmp_path: Path, redis: RedisServer
):
    apply_text(
        cluster,
        tmp_path,
        f"""
project: lease
jobs:
  - name: slow
    schedule: triggered
    celery: {{task: sample.slow_once, queue: etl, args: ["{tmp_path}", 60]}}
    lease: 6s
    retries: {{max_attempts: 2, backoff: 1s, jitter: 0}}
""",
    )
    inv = sched.trigger("lease/slow")["invocation"]
    wait_until(lambda: (tmp_path / "runs").exists(), 30, "the task to start")
    assert sched.invocation(inv)["worker"]  # claimed by the worker
    killed = time.monotonic()
    cluster.kill("worker", signal.SIGKILL)
    cluster.start_worker(queues="cronchain,etl", concurrency=WORKER_PROCESSES)
    cluster.wait_ready("worker", times=2)
    # The lapse is noticed by a watchdog pass, which runs on the control worker just
    # started: count from the later of the lease's end and that worker's start (which a
    # loaded machine stretches to seconds).
    watched = max(killed + 6, time.monotonic())

    def retried() -> dict[str, Any] | None:
        detail = sched.invocation(inv)
        return detail if detail["attempts"] else None

    detail = wait_until(retried, 30, "the lease to expire")
    expired_after = time.monotonic() - watched
    assert detail["attempts"][0]["reason"] == "lease expired"
    assert expired_after <= WATCHDOG_INTERVAL + 1.5  # one interval (+ polling)
    [run] = settled(sched, "lease/slow", 1, timeout=60)
    detail = sched.invocation(inv)
    assert (detail["status"], detail["attempt"]) == ("SUCCEEDED", 2)
    assert len((tmp_path / "runs").read_text().split()) == 2
    shown = cluster.cronchain("history", "--invocation", str(inv))
    assert "attempt 1: FAILED (lease expired)" in shown  # every attempt's reason
    # The first attempt's message is delivered again, to a worker that has not seen its
    # revoke (revoked ids live in worker memory, and a starting worker learns them from
    # the others: none is left to tell it): the database fence refuses it.
    cluster.kill("work", signal.SIGKILL)
    cluster.kill("worker", signal.SIGTERM)
    cluster.start_worker(queues="cronchain,etl", concurrency=WORKER_PROCESSES)
    cluster.wait_ready()
    app = Celery("replay", broker=redis.url)
    app.conf.task_serializer = "json"
    header = {"invocation": inv, "attempt": 1, "lease": 6}
    app.send_task(
        "sample.slow_once",
        args=[str(tmp_path), 60],
        queue="etl",
        task_id=f"cronchain-{inv}-1",
        headers={"cronchain": header},
    )
    wait_until(lambda: "not current or was claimed" in cluster.log("worker"), 30, "the refusal")
    assert len((tmp_path / "runs").read_text().split()) == 2  # the body did not run
    after = sched.invocation(inv)
    assert (after["status"], after["attempt"], after["attempts"]) == (
        "SUCCEEDED",
        2,
        detail["attempts"],
    )
    assert json.dumps(after["log"]).count("claimed by") == 2
