"""The chain with real processes: PostgreSQL, a private Redis, celery worker and beat.

20 jobs fire every second; each test checks the ledger: every slot exactly once in
history, every run delivered to the HTTP endpoint exactly once.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery
from kombu import Connection

from tests.e2e.harness import (
    WATCHDOG_INTERVAL,
    Cluster,
    HitCounter,
    Ledger,
    check_ledger,
    database,
    first_fire_after,
    job_file,
    now,
    wait_until,
)
from tests.services import RedisServer, redis_server

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis]
JOBS = 20


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    with redis_server(tmp_path) as server:
        yield server


@pytest.fixture
def hits() -> Iterator[HitCounter]:
    counter = HitCounter()
    yield counter
    counter.close()


@pytest.fixture
def cluster(tmp_path: Path, pg_url: str, redis: RedisServer) -> Iterator[Cluster]:
    c = Cluster.create(tmp_path, CRONCHAIN_DATABASE_URL=pg_url, CRONCHAIN_BROKER_URL=redis.url)
    yield c
    c.stop_all()


def run_jobs(cluster: Cluster, hits: HitCounter) -> None:
    cluster.start_worker()
    cluster.start_beat()
    cluster.wait_ready()
    cluster.cronchain("apply", str(job_file(cluster.folder / "jobs.yaml", hits.url, JOBS)))


def settle_and_check(cluster: Cluster, hits: HitCounter, end, pg_url: str) -> Ledger:  # type: ignore[no-untyped-def]
    """Wait until every slot up to ``end`` is recorded and final, then check the ledger."""
    db = database(pg_url)

    def settled():  # type: ignore[no-untyped-def]
        ledger = check_ledger(db, hits.hits, end)
        return ledger if not ledger.missing and not ledger.unfinished else None

    try:
        ledger = wait_until(settled, 30, "every slot to be recorded")
    except AssertionError:
        ledger = check_ledger(db, hits.hits, end)
        pytest.fail(
            f"{ledger.summary()}; missing {ledger.missing[:5]}\n" + cluster.log("worker")[-3000:]
        )
    print(ledger.summary())
    assert ledger.executed_twice == []
    assert ledger.undelivered == []
    return ledger


def restart_and_recover(cluster: Cluster, pg_url: str) -> None:
    """Start a worker again; every job must fire within two watchdog intervals."""
    restarted = now()
    cluster.start_worker()
    db = database(pg_url)

    def every_job_fired():  # type: ignore[no-untyped-def]
        fired = first_fire_after(db, restarted)
        return fired if len(fired) == JOBS else None

    fired = wait_until(every_job_fired, 4 * WATCHDOG_INTERVAL, "every job to fire again")
    recovery = (max(fired.values()) - restarted).total_seconds()
    print(f"every job fired again {recovery:.1f} s after the worker restarted")
    assert recovery <= 2 * WATCHDOG_INTERVAL
    time.sleep(3)  # let the slots caught up on finish before the ledger check


def test_twenty_jobs_every_second_fire_every_slot_once(
    cluster: Cluster, hits: HitCounter, pg_url: str
):
    run_jobs(cluster, hits)
    time.sleep(30)
    ledger = settle_and_check(cluster, hits, now(), pg_url)
    assert ledger.expected >= JOBS * 29
    assert ledger.succeeded == ledger.expected, ledger.summary()


def test_flushed_redis_every_chain_comes_back(
    cluster: Cluster, hits: HitCounter, redis: RedisServer, pg_url: str
):
    run_jobs(cluster, hits)
    time.sleep(8)
    # Stop the worker warmly (it hands its messages back to Redis), then flush: every
    # tick and start message of every chain is gone.
    cluster.kill("worker", signal.SIGTERM)
    redis.client().flushall()
    restart_and_recover(cluster, pg_url)
    settle_and_check(cluster, hits, now(), pg_url)


def test_killed_worker_every_chain_comes_back(cluster: Cluster, hits: HitCounter, pg_url: str):
    run_jobs(cluster, hits)
    time.sleep(8)
    cluster.kill("worker", signal.SIGKILL)  # the whole process group, mid-run
    time.sleep(2)
    restart_and_recover(cluster, pg_url)
    ledger = settle_and_check(cluster, hits, now(), pg_url)
    assert set(ledger.failed) <= {"lease expired"}


def test_malformed_messages_are_dropped_and_the_worker_lives_on(
    cluster: Cluster, hits: HitCounter, redis: RedisServer, pg_url: str
):
    run_jobs(cluster, hits)
    producer = Celery(broker=redis.url)
    producer.send_task("cronchain.tick_later", args=["not-a-job", None], queue="cronchain")
    producer.send_task("cronchain.tick_later", args=[1], queue="cronchain")  # arity
    producer.send_task("cronchain.start_invocation", args=[10**12], queue="cronchain")
    with Connection(redis.url) as conn:  # a body that is not JSON at all
        conn.default_channel.basic_publish(
            conn.default_channel.prepare_message(
                "{not json",
                content_type="application/json",
                headers={"task": "cronchain.tick_later", "id": "x1"},
            ),
            exchange="",
            routing_key="cronchain",
        )
    started = now()
    time.sleep(6)
    log = cluster.log("worker")
    assert "malformed tick_later message dropped" in log
    assert cluster.processes["worker"].poll() is None, log[-3000:]
    fired = first_fire_after(database(pg_url), started)
    assert len(fired) == JOBS  # every chain kept firing
    settle_and_check(cluster, hits, now(), pg_url)
