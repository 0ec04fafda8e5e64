"""Fixtures of the end-to-end tests: a private Redis and a cluster of real processes on
it and a fresh PostgreSQL database (tests that need other brokers define their own)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Cluster
from tests.support.cli import Cli
from tests.support.repo import ROOT
from tests.support.services import RedisServer, redis_server


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    with redis_server(tmp_path) as server:
        yield server


@pytest.fixture
def cluster(tmp_path: Path, pg_url: str, redis: RedisServer) -> Iterator[Cluster]:
    c = Cluster.create(tmp_path, CRONCHAIN_DATABASE_URL=pg_url, CRONCHAIN_BROKER_URL=redis.url)
    yield c
    c.stop_all()


@pytest.fixture
def tasks_cluster(tmp_path: Path, pg_url: str, redis: RedisServer) -> Iterator[Cluster]:
    """A cluster whose workers also run the sample tasks (tests/e2e/sample_tasks.py),
    on queues of their own: the user's side of ``celery`` jobs and gates."""
    c = Cluster.create(
        tmp_path,
        CRONCHAIN_DATABASE_URL=pg_url,
        CRONCHAIN_BROKER_URL=redis.url,
        CRONCHAIN_IMPORTS="tests.e2e.sample_tasks",
        PYTHONPATH=str(ROOT),
    )
    yield c
    c.stop_all()


@pytest.fixture
def cli(cluster: Cluster) -> Iterator[Cli]:
    """The ``cronchain`` command on the test's cluster (its environment and folder), each
    command a process of its own forked from one that imported cronchain once, as
    ``cluster.cronchain`` runs it; this one answers with the exit status and stderr too."""
    with Cli(cluster.env, cluster.folder, timeout=120) as run:
        yield run
