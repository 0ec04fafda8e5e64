"""kombu's Redis channel builds a new redis-py client for every publish and every
acknowledgement; cronchain's patch makes a channel reuse one client per connection pool.
Pinned against a private redis-server, with the messages still flowing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kombu import Connection

from cronchain.scheduler.workers.patches import reuse_redis_clients
from tests.support.services import RedisServer, redis_server

pytestmark = pytest.mark.redis


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    with redis_server(tmp_path) as server:
        yield server


def test_a_channel_reuses_its_client_until_its_pool_changes(redis: RedisServer):
    reuse_redis_clients()
    reuse_redis_clients()  # twice is once
    with Connection(redis.url) as conn:
        channel = conn.default_channel
        client = channel._create_client()
        assert channel._create_client() is client
        assert channel._create_client(asynchronous=True) is not client

        channel._disconnect_pools()  # as kombu does when the connection is lost
        assert channel._create_client() is not client
        assert channel._create_client().connection_pool is channel.pool


def test_messages_still_go_through_and_are_acknowledged(redis: RedisServer):
    reuse_redis_clients()
    with Connection(redis.url) as conn:
        queue = conn.SimpleQueue("cronchain-patch-test")
        for i in range(3):
            queue.put({"n": i})
        got = []
        for _ in range(3):
            message = queue.get(timeout=5)
            got.append(message.payload["n"])
            message.ack()
        queue.close()
    assert got == [0, 1, 2]
    client = redis.client()
    assert client.llen("cronchain-patch-test") == 0
    assert client.hlen("unacked") == 0  # every acknowledgement reached Redis
