"""From Celery beat in one command (issue 19): a Celery app with a ``beat_schedule`` and
an ``add_periodic_task`` handler, imported with ``cronchain import-beat``, applied, and
run by cronchain's worker and beat, while the user's tasks run on the user's own worker
and queue, each slot once."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from tests.e2e.harness import Cluster
from tests.support.repo import ROOT
from tests.support.services import redis_server
from tests.support.wait import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis]

USER_APP = """
import os
from pathlib import Path

from celery import Celery
from celery.schedules import crontab

import cronchain.scheduler

app = Celery("shop", broker=os.environ["CRONCHAIN_BROKER_URL"])
app.conf.timezone = "Europe/Berlin"
app.conf.task_routes = {"shop.*": {"queue": "shop"}}
cronchain.scheduler.install(app)  # before the tasks: the worker claims and reports cronchain's runs
app.conf.beat_schedule = {
    "ping every 2s": {"task": "shop.ping", "schedule": 2.0, "args": ("a",)},
    "nightly report": {
        "task": "shop.report",
        "schedule": crontab(minute=0, hour=3, day_of_week="mon-fri"),
        "options": {"queue": "reports", "expires": 600},
    },
}


@app.on_after_configure.connect
def more(sender, **_):
    sender.add_periodic_task(3.0, ping.s("b"), name="ping b")


@app.task(name="shop.ping", bind=True)
def ping(self, tag):
    hits = Path(os.environ["HITS"])
    queue = self.request.delivery_info["routing_key"]
    (hits / f"{tag}.{self.request.id}").write_text(f"{self.request.hostname} {queue}")


@app.task(name="shop.report")
def report():
    pass
"""


@pytest.fixture
def cluster(tmp_path: Path, pg_url: str) -> Iterator[Cluster]:
    (tmp_path / "hits").mkdir()
    (tmp_path / "userapp.py").write_text(USER_APP)
    with redis_server(tmp_path) as redis:
        c = Cluster.create(
            tmp_path,
            CRONCHAIN_DATABASE_URL=pg_url,
            CRONCHAIN_BROKER_URL=redis.url,
            HITS=str(tmp_path / "hits"),
            PYTHONPATH=f"{ROOT}:{tmp_path}",
        )
        yield c
        c.stop_all()


def test_an_imported_beat_schedule_runs_on_the_users_worker_once_per_slot(
    cluster: Cluster, tmp_path: Path
):
    out = cluster.cronchain("import-beat", "userapp:app", "-o", "shop.yaml")
    assert out == "wrote 3 jobs of project shop-beat to shop.yaml\n"
    jobs = {
        job["name"]: job for job in yaml.safe_load((tmp_path / "shop.yaml").read_text())["jobs"]
    }
    assert jobs == {
        "ping-every-2s": {
            "name": "ping-every-2s",
            "schedule": "every 2s",
            "celery": {"task": "shop.ping", "queue": "shop", "args": ["a"]},
        },
        "nightly-report": {
            "name": "nightly-report",
            "schedule": "0 3 * * mon-fri",
            "timezone": "Europe/Berlin",
            "schedule_to_start": 600,
            "celery": {"task": "shop.report", "queue": "reports", "expires": 600},
        },
        "ping-b": {
            "name": "ping-b",
            "schedule": "every 3s",
            "celery": {"task": "shop.ping", "queue": "shop", "args": ["b"]},
        },
    }
    cluster.cronchain("apply", "shop.yaml")
    cluster.start_worker("worker", queues="cronchain")
    cluster.start(
        "user",
        *(sys.executable, "-m", "celery", "-A", "userapp", "worker", "--queues", "shop"),
        *("--pool", "threads", "--concurrency", "4", "--hostname", "user@%h"),
        *("--loglevel", "INFO"),
    )
    cluster.start_beat()
    cluster.wait_ready("worker")
    cluster.wait_ready("user")

    def succeeded() -> list[dict[str, object]] | None:
        rows = json.loads(cluster.cronchain("history", "--json", "--limit", "200"))
        done = [r for r in rows if r["status"] == "SUCCEEDED"]
        jobs = ("shop-beat/ping-every-2s", "shop-beat/ping-b")
        counts = {job: sum(r["job"] == job for r in done) for job in jobs}
        return done if min(counts.values()) >= 3 else None

    done = wait_until(succeeded, 60, "three runs of each imported ping job")
    hits = {p.name: p.read_text() for p in (tmp_path / "hits").iterdir()}
    # Every hit ran on the user's worker, from the user's queue.
    assert {text.split()[0].split("@")[0] for text in hits.values()} == {"user"}
    assert {text.split()[1] for text in hits.values()} == {"shop"}
    # Each succeeded run is one task body, under its attempt's task id, never twice.
    for run in done:
        tag = "a" if run["job"] == "shop-beat/ping-every-2s" else "b"
        assert f"{tag}.cronchain-{run['id']}-1" in hits
    slots = [(r["job"], r["slot"]) for r in done]
    assert len(slots) == len(set(slots))

    # An edit, applied while everything runs: the next slots follow it, no restart.
    text = (tmp_path / "shop.yaml").read_text()
    (tmp_path / "shop.yaml").write_text(text.replace("schedule: every 2s", "schedule: every 5s"))
    assert "updated: 1\n  shop-beat/ping-every-2s\n" in cluster.cronchain(
        "apply", "-v", "shop.yaml"
    )
    applied = datetime.now(UTC)

    def slots_after_edit() -> list[datetime] | None:
        rows = json.loads(cluster.cronchain("history", "shop-beat/ping-every-2s", "--json"))
        slots = sorted(
            datetime.fromisoformat(r["slot"]) for r in rows if r["status"] == "SUCCEEDED"
        )
        later = [slot for slot in slots if slot > applied]
        return later if len(later) >= 2 else None

    later = wait_until(slots_after_edit, 30, "two runs on the edited schedule")
    assert later[0] - applied <= timedelta(seconds=5)
    assert [b - a for a, b in zip(later, later[1:], strict=False)] == [timedelta(seconds=5)] * (
        len(later) - 1
    )
    assert all(slot.timestamp() % 5 == 0 for slot in later)
