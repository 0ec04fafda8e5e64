"""Flower, started against the same broker, shows cronchain's workers and tasks."""

from __future__ import annotations

import base64
import json
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.e2e.harness import Cluster, HitCounter, job_file, wait_until
from tests.services import free_port, redis_server

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
            cluster.cronchain("apply", str(job_file(tmp_path / "jobs.yaml", hits.url, 2)))
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
