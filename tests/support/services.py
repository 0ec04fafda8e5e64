"""Access to the real services the tests use, and the rule for when they are missing:
skip on a developer's machine, fail in CI (``CI=true``), never pretend to pass."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
import sqlalchemy

PG_ADMIN_URL = os.environ.get(
    "CRONCHAIN_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


def unavailable(what: str) -> None:
    """Skip locally; in CI a missing service is a failure."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{what} is required in CI", pytrace=False)
    pytest.skip(f"{what} is not available")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pg_admin() -> sqlalchemy.Engine:
    engine = sqlalchemy.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect():
            pass
    except sqlalchemy.exc.OperationalError as err:
        unavailable(f"PostgreSQL at {PG_ADMIN_URL} ({err.orig})")
    return engine


def database_url(name: str) -> str:
    return (
        sqlalchemy.engine.make_url(PG_ADMIN_URL)
        .set(database=name)
        .render_as_string(hide_password=False)
    )


def create_database(admin: sqlalchemy.Engine, template: str | None = None) -> str:
    name = f"cronchain_test_{uuid.uuid4().hex[:12]}"
    clause = f" TEMPLATE {template}" if template else ""
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}{clause}")
    return name


def drop_database(admin: sqlalchemy.Engine, name: str) -> None:
    with admin.connect() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


class RedisServer:
    """A private ``redis-server`` on a free port, so a test may flush or kill it."""

    def __init__(self, folder: Path):
        self.port = free_port()
        self.folder = folder
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            unavailable("redis-server")
        self.process = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.folder),
            ],
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.ping():
                return
            time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2)

    def ping(self) -> bool:
        try:
            return bool(self.client().ping())
        except redis.exceptions.ConnectionError:
            return False

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@contextmanager
def redis_server(folder: Path) -> Iterator[RedisServer]:
    server = RedisServer(folder)
    server.start()
    try:
        yield server
    finally:
        server.stop()


class PostgresServer:
    """A private PostgreSQL cluster (initdb + pg_ctl), so a test may restart it.

    initdb and pg_ctl refuse to run as root: as root they run as ``postgres``, in a
    folder that user owns."""

    def __init__(self) -> None:
        self.port = free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="cronchain-pg-"))
        self.data = self.folder / "data"

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *args], check=True, capture_output=True, timeout=120)

    def init(self) -> None:
        if shutil.which("initdb") is None or shutil.which("pg_ctl") is None:
            unavailable("initdb and pg_ctl")
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync")
        self.start()

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.folder} -c fsync=off"
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-o",
            options,
            "-w",
            "-l",
            str(self.folder / "log"),
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def destroy(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop("immediate")
        shutil.rmtree(self.folder, ignore_errors=True)


@contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    server = PostgresServer()
    try:
        server.init()
        yield server
    finally:
        server.destroy()
