"""``bench.delay``'s proxy, which the benchmarks' ``--delay-ms`` put between a deployment
and its servers: it must hold every byte for the delay, and lose or reorder none, or the
figures measured through it say nothing about a network."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis

from bench.delay import delays, round_trip_ms
from tests.support.services import redis_server


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    with redis_server(tmp_path) as running:
        yield running.url


def test_a_round_trip_takes_at_least_the_delay(server: str):
    with delays(2) as delay:
        client = redis.Redis.from_url(delay.url(server))
        assert round_trip_ms(client.ping, times=20) >= 2.0  # a bound no slowness can break
        assert round_trip_ms(redis.Redis.from_url(server).ping, times=20) < 2.0


def test_bytes_arrive_whole_and_in_order_both_ways(server: str):
    with delays(1) as delay:
        client = redis.Redis.from_url(delay.url(server))
        big = bytes(range(256)) * 40_000  # 10 MB: many chunks, and full socket buffers
        client.set("big", big)
        assert client.get("big") == big
        pipe = client.pipeline()
        for n in range(5000):
            pipe.rpush("order", n)
        pipe.execute()
        assert [int(n) for n in client.lrange("order", 0, -1)] == list(range(5000))


def test_a_half_closed_connection_still_gets_its_answer():
    """A client that sends, then shuts its side, reads the whole answer before the end."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def echo() -> None:
        conn, _ = listener.accept()
        with conn:
            data = b""
            while chunk := conn.recv(65536):
                data += chunk
            conn.sendall(data[::-1])

    thread = threading.Thread(target=echo, daemon=True)
    thread.start()
    with delays(1) as delay:
        proxied = urlsplit(delay.url(f"tcp://127.0.0.1:{port}")).port
        with socket.create_connection(("127.0.0.1", proxied or 0)) as conn:
            sent = b"abc" * 100_000
            started = time.perf_counter()
            conn.sendall(sent)
            conn.shutdown(socket.SHUT_WR)
            got = b""
            while chunk := conn.recv(65536):
                got += chunk
            assert got == sent[::-1] and time.perf_counter() - started >= 0.001
    thread.join(5)
    listener.close()
