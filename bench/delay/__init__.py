"""A network in between, on one machine: every connection to PostgreSQL and Redis made
through a proxy that holds each byte for half a round trip in each direction.

The kernel here has no netem (``tc qdisc ... netem`` answers "Specified qdisc kind is
unknown", and no qdisc it has delays packets), so the delay is a process's:
``delayproxy.c``, a single-threaded epoll loop built with the machine's C compiler on
first use. It adds its own hop to the delay asked for (the measured round trip is
printed with each run), and its CPU, counted apart, is the network's and not the
system's under test.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import redis
import sqlalchemy

from bench.folders import private_folder
from tests.support.services import free_port

SOURCE = Path(__file__).with_name("delayproxy.c")


def binary() -> Path:
    """The proxy, built once per version of its source, in a folder of this user's: built
    under a name of its own and renamed, so that builders at once (tests on several
    workers) never run a half-written one."""
    version = hashlib.sha1(SOURCE.read_bytes()).hexdigest()[:12]
    folder = private_folder()
    built = folder / f"delayproxy-{version}"
    if not built.exists():
        with tempfile.NamedTemporaryFile(dir=folder, delete=False) as partial:
            pass
        try:
            subprocess.run(["cc", "-O2", "-o", partial.name, str(SOURCE)], check=True)
            os.replace(partial.name, built)
        finally:
            Path(partial.name).unlink(missing_ok=True)
    return built


class Delays:
    """The proxies of one deployment: ``url(u)`` is ``u`` reached through a proxy that
    adds ``round_trip_ms``; with 0, ``u`` itself."""

    def __init__(self, round_trip_ms: float) -> None:
        self.round_trip_ms = round_trip_ms
        self.processes: list[subprocess.Popen[bytes]] = []

    def url(self, url: str) -> str:
        if not self.round_trip_ms:
            return url
        parts = urlsplit(url)
        host, port = parts.hostname or "127.0.0.1", parts.port
        if host not in ("127.0.0.1", "localhost") or port is None:
            raise ValueError(f"a delay reaches loopback ports only, not {url!r}")
        listen = free_port()
        half = round(self.round_trip_ms * 500)  # microseconds each way
        process = subprocess.Popen(
            [str(binary()), str(listen), str(port), str(half)], stdout=subprocess.PIPE
        )
        self.processes.append(process)
        if process.stdout is None or process.stdout.readline() != b"ready\n":
            raise RuntimeError(f"the delay proxy for {url!r} did not start")
        netloc = parts.netloc.rsplit("@", 1)
        netloc[-1] = f"127.0.0.1:{listen}"
        return urlunsplit(parts._replace(netloc="@".join(netloc)))

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def stop(self) -> None:
        for process in self.processes:
            process.kill()
            process.wait()


@contextmanager
def delays(round_trip_ms: float) -> Iterator[Delays]:
    made = Delays(round_trip_ms)
    try:
        yield made
    finally:
        made.stop()


def round_trips(broker: str, database: str | None = None) -> dict[str, float]:
    """A round trip to each server, in milliseconds, as a deployment's processes make it
    (through its proxies, given its URLs)."""
    with redis.Redis.from_url(broker) as client:
        trips = {"broker": round_trip_ms(client.ping)}
    if database is not None:
        url = sqlalchemy.engine.make_url(database).set(drivername="postgresql")
        with psycopg.connect(url.render_as_string(hide_password=False)) as conn:
            trips["database"] = round_trip_ms(lambda: conn.execute("SELECT 1"))
    return trips


def round_trip_ms(ping: Callable[[], object], times: int = 200) -> float:
    """The mean time of ``ping`` (one round trip to a server), in milliseconds."""
    ping()
    started = time.perf_counter()
    for _ in range(times):
        ping()
    return (time.perf_counter() - started) / times * 1000
