"""Flower, started against the same broker, shows cronchain's workers and tasks, and
each run as a task of its own, under its job's name (scheduler.workers.events)."""

from __future__ import annotations

import base64
import json
import re
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import Cluster, HitCounter
from tests.support.jobs import http_job_file
from tests.support.services import free_port, redis_server
from tests.support.wait import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis]


def get(url: str) -> object:
    request = urllib.request.Request(url)
    request.add_header("Authorization", "Basic " + base64.b64encode(b"ops:secret").decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())
    except OSError:
        return None


def test_flower_lists_cronchain_tasks(tmp_path: Path, pg_url: str):
    hits = HitCounter()
    with redis_server(tmp_path) as redis:
        cluster = Cluster.create(
            tmp_path, CRONCHAIN_DATABASE_URL=pg_url, CRONCHAIN_BROKER_URL=redis.url
        )
        port = free_port()
        try:
            cluster.start(
                "flower",
                sys.executable,
                "-m",
                "celery",
                "-A",
                "cronchain.tasks",
                "flower",
                "--address=127.0.0.1",
                f"--port={port}",
                "--basic-auth=ops:secret",
            )
            cluster.start_worker()
            cluster.start_work_worker()
            cluster.cronchain("apply", str(http_job_file(tmp_path / "jobs.yaml", hits.url, 2)))
            base = f"http://127.0.0.1:{port}/api"

            def registered():  # type: ignore[no-untyped-def]
                workers = get(f"{base}/workers?refresh=1") or {}
                return [t for w in workers.values() for t in w.get("registered", [])]

            names = wait_until(registered, 60, "flower to see the worker")
            assert {
                "cronchain.tick_later",
                "cronchain.tick_batch",
                "cronchain.start_invocation",
                "cronchain.watchdog",
            } <= set(names)

            def seen():  # type: ignore[no-untyped-def]
                # A run starts inside the tick task that creates it: start_invocation
                # messages go out only for starts that must wait (retries, buffers).
                # The two jobs share their instants, so their ticks mostly travel as
                # one tick_batch; a tick on its own is a tick_later.
                tasks = get(f"{base}/tasks") or {}
                ticks = {"cronchain.tick_later", "cronchain.tick_batch"}
                return bool(ticks & {t["name"] for t in tasks.values()})

            wait_until(seen, 60, "flower to list cronchain's tasks")
            with pytest.raises(urllib.error.HTTPError):  # no credentials, no API
                urllib.request.urlopen(f"{base}/tasks", timeout=10)
        finally:
            cluster.stop_all()
            hits.close()


RUNS = """
project: shop
jobs:
  - {name: ok, schedule: every 2s, noop: {}}
  - {name: bad, schedule: every 2s, noop: {fail: true}}
  - {name: long, schedule: triggered, lease: 3s, noop: {sleep: 60s}}
  - {name: add, schedule: triggered, celery: {task: sample.add, queue: etl, args: [2, 3]}}
"""


def test_flower_shows_each_run_under_its_job_in_the_state_it_ended_in(
    tasks_cluster: Cluster, tmp_path: Path
):
    """Real task events read by a real Flower: the work path's runs (which travel in
    cronchain.run and cronchain.run_batch tasks) are each an entry named after the job,
    with the slot and attempt, SUCCESS or FAILURE (with the error) as they ended, REVOKED
    when aborted while running; a celery run is listed under its job too (shadow)."""
    cluster = tasks_cluster
    port = free_port()
    cluster.start_celery(
        "flower", "flower", "--address=127.0.0.1", f"--port={port}", "--basic-auth=ops:secret"
    )
    base = f"http://127.0.0.1:{port}/api"
    wait_until(lambda: get(f"{base}/workers") is not None, 60, "flower to answer")
    cluster.start_worker(queues="cronchain,etl")
    cluster.start_work_worker()
    cluster.wait_ready()
    cluster.wait_ready("work")
    (tmp_path / "runs.yaml").write_text(RUNS)
    cluster.cronchain("apply", str(tmp_path / "runs.yaml"))

    def tasks() -> dict[str, dict[str, Any]]:
        return get(f"{base}/tasks?limit=1000") or {}  # type: ignore[return-value]

    def named(name: str, state: str) -> list[dict[str, Any]]:
        return [t for t in tasks().values() if t["name"] == name and t["state"] == state]

    wait_until(lambda: named("shop/ok", "SUCCESS"), 60, "a run of shop/ok in Flower")
    [ok, *_] = named("shop/ok", "SUCCESS")
    assert ok["uuid"].startswith("cronchain-") and ok["uuid"].endswith("-1")
    assert re.fullmatch(r"\('\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ',\)", ok["args"]), ok["args"]
    assert "'attempt': 1" in ok["kwargs"] and ok["runtime"] is not None
    [bad, *_] = wait_until(lambda: named("shop/bad", "FAILURE"), 60, "shop/bad's failure")
    assert bad["exception"] == "noop: fail is set"
    # ok and bad share their instants: their runs travel in one cronchain.run_batch. Its
    # own events may reach Flower after its runs': the worker's main process buffers the
    # task events it sends, and the runs' are sent from the process that runs them.
    wait_until(lambda: named("cronchain.run_batch", "SUCCESS"), 30, "their cronchain.run_batch")

    cluster.cronchain("trigger", "shop/long")
    wait_until(lambda: named("shop/long", "STARTED"), 60, "shop/long to be started")
    cluster.cronchain("abort", "shop/long")
    [long] = wait_until(lambda: named("shop/long", "REVOKED"), 60, "shop/long revoked")
    assert re.fullmatch(r"cronchain-\d+-1", long["uuid"])
    carriers = [t for t in tasks().values() if t["name"] == "cronchain.run"]
    assert all(t["uuid"].endswith("-work") for t in carriers)  # apart from the runs

    cluster.cronchain("trigger", "shop/add")
    wait_until(lambda: named("shop/add", "SUCCESS"), 60, "the celery run under its job")
