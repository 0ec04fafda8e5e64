"""``bench.delay``'s proxy, which the benchmarks' ``--delay-ms`` put between a deployment
and its servers: it must hold every byte for the delay, and lose or reorder none, or the
figures measured through it say nothing about a network."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis

from bench.delay import delays, round_trip_ms
from tests.support.services import redis_server, unavailable


@pytest.fixture(autouse=True)
def compiler() -> None:
    if shutil.which("cc") is None:
        unavailable("a C compiler, cc (apt-get install gcc), to build the proxy")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    with redis_server(tmp_path) as running:
        yield running.url


@pytest.fixture
def silent() -> Iterator[int]:
    """A port whose server accepts connections and never reads from them."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    thread = threading.Thread(target=lambda: accepted.append(listener.accept()[0]), daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    for conn in accepted:
        conn.close()
    listener.close()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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


def test_a_reader_that_stops_stops_the_sender(silent: int):
    """Flow control reaches through: the proxy holds at most a few MiB for a reader that
    takes nothing, and the sender's writes block, as they would on a network."""
    with delays(1) as delay:
        port = urlsplit(delay.url(f"tcp://127.0.0.1:{silent}")).port
        with socket.create_connection(("127.0.0.1", port or 0)) as conn:
            conn.setblocking(False)
            sent, block = 0, b"x" * 65536
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline and sent < 256 << 20:
                try:
                    sent += conn.send(block)
                except BlockingIOError:
                    time.sleep(0.01)
            resident = int(Path(f"/proc/{delay.pids[0]}/statm").read_text().split()[1])
    assert sent < 64 << 20, sent  # the proxy's 4 MiB and the sockets' buffers
    assert resident * os.sysconf("SC_PAGE_SIZE") < 32 << 20


def test_a_stream_closed_by_its_server_costs_no_cpu(server: str):
    """The server closes first, then the client sends: the proxy sleeps rather than
    spin on the closed socket, until the client closes too."""
    with delays(1) as delay:
        port = urlsplit(delay.url(server)).port
        with socket.create_connection(("127.0.0.1", port or 0)) as conn:
            conn.sendall(b"QUIT\r\n")  # Redis answers +OK and closes
            assert conn.recv(100) == b"+OK\r\n"
            time.sleep(0.1)
            conn.sendall(b"PING\r\n")  # to a server gone
            time.sleep(0.1)
            before = cpu_seconds(delay.pids[0])
            time.sleep(0.5)
            assert cpu_seconds(delay.pids[0]) - before < 0.1


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
