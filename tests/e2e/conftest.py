"""Fixtures of the end-to-end tests: a private Redis and a cluster of real processes on
it and a fresh PostgreSQL database (tests that need other brokers define their own)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Cluster
from tests.services import RedisServer, redis_server


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    with redis_server(tmp_path) as server:
        yield server


@pytest.fixture
def cluster(tmp_path: Path, pg_url: str, redis: RedisServer) -> Iterator[Cluster]:
    c = Cluster.create(tmp_path, CRONCHAIN_DATABASE_URL=pg_url, CRONCHAIN_BROKER_URL=redis.url)
    yield c
    c.stop_all()
