"""Access to the real services the tests use, and the rule for when they are missing:
skip on a developer's machine, fail in CI (``CI=true``), never pretend to pass."""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import shutil
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

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


def ephemeral_ports() -> range:
    """The ports the kernel gives outgoing connections and ``bind(0)``."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    except OSError:
        low, high = "32768", "60999"
    return range(int(low), int(high) + 1)


_PORT_BLOCK = 1000
_ports_taken = itertools.count()


def free_port() -> int:
    """A port for a test's own server, outside the ephemeral range and in a block of 1,000
    of this process's own, not handed out again until the block wraps: a server a test
    stops and starts again finds its port free. A port from ``bind(0)`` did not, now and
    then, when an outgoing connection or another worker's server took it meanwhile.
    xdist's workers take the blocks of the area's lower half, by number; other processes
    (a benchmark, a pytest run alone) the upper half, by pid."""
    blocks = _port_blocks()
    half = len(blocks) // 2
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker[2:].isdigit():
        block = blocks[int(worker[2:]) % half]
    else:
        block = blocks[half + os.getpid() % (len(blocks) - half)]
    for _ in range(_PORT_BLOCK):
        port = block + next(_ports_taken) % _PORT_BLOCK
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))  # taken on any address, or in TIME_WAIT: next
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {block}-{block + _PORT_BLOCK - 1}")


def _port_blocks() -> range:
    """The first port of each block, in the wider of the areas below (from 10000) and
    above the ephemeral range."""
    ephemeral = ephemeral_ports()
    below = range(10000, max(10000, ephemeral.start))
    above = range(min(65536, ephemeral.stop), 65536)
    area = max(below, above, key=len)
    if len(area) < 2 * _PORT_BLOCK:
        raise RuntimeError(
            f"the ephemeral ports ({ephemeral.start}-{ephemeral.stop - 1}) leave no"
            f" {2 * _PORT_BLOCK} ports outside them for the tests' servers"
        )
    return range(area.start, area.stop - _PORT_BLOCK + 1, _PORT_BLOCK)


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
    """A private ``redis-server`` on a free port, so a test may flush or kill it; on
    ``host`` as well as loopback, when given one (a network namespace's)."""

    def __init__(self, folder: Path, host: str = "127.0.0.1"):
        self.port = free_port()
        self.folder = folder
        self.host = host
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

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
                " ".join(dict.fromkeys(["127.0.0.1", self.host])),
                # A namespace's clients are not on loopback; the address is this
                # machine's own, which nothing outside reaches.
                "--protected-mode",
                "no" if self.host != "127.0.0.1" else "yes",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.folder),
                "--logfile",
                str(self.folder / "redis.log"),
            ],
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self.process.poll() is None:
            if self.ping():
                return
            time.sleep(0.05)
        logged = self.folder / "redis.log"
        log = logged.read_text(errors="replace")[-2000:] if logged.exists() else "(no log)"
        raise RuntimeError(
            f"redis-server did not start on port {self.port} (exit {self.process.poll()}):\n{log}"
        )

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
    folder that user owns. Given a ``host`` (a network namespace's), it listens there as
    well as on loopback, and trusts the clients of ``clients`` (a CIDR)."""

    def __init__(self, host: str = "127.0.0.1", clients: str | None = None) -> None:
        self.port = free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="cronchain-pg-"))
        self.data = self.folder / "data"
        self.host = host
        self.clients = clients

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@{self.host}:{self.port}/postgres"

    def sql(self, statement: str) -> None:
        """One statement as the superuser, outside a transaction (ALTER SYSTEM, say)."""
        self._run("psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                  "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-qc", statement)  # fmt: skip

    def replica(self) -> PostgresServer:
        """A streaming replica of this cluster, started: a base backup with its
        ``standby.signal`` and ``primary_conninfo`` (``pg_basebackup -R``), on its own port.
        initdb's trust rules admit replication from 127.0.0.1."""
        standby = PostgresServer()
        if os.geteuid() == 0:
            shutil.chown(standby.folder, "postgres", "postgres")
        self._run("pg_basebackup", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                  "-D", str(standby.data), "-R", "-X", "stream", "--no-sync")  # fmt: skip
        standby.start()
        return standby

    def synchronous(self, on: bool = True) -> None:
        """Every commit waits for a standby to have flushed it (or, off, for nobody)."""
        self.sql(f"ALTER SYSTEM SET synchronous_standby_names = '{'*' if on else ''}'")
        self.sql("SELECT pg_reload_conf()")

    def promote(self) -> None:
        """A standby becomes a primary that takes writes (``pg_ctl promote -w``)."""
        self._run("pg_ctl", "-D", str(self.data), "-w", "promote")

    def _run(self, *args: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *args], check=True, capture_output=True, timeout=120)

    def init(self) -> None:
        if shutil.which("initdb") is None or shutil.which("pg_ctl") is None:
            unavailable("initdb and pg_ctl")
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres", "postgres")
        self._run("cp", "-a", str(self._initialized()), str(self.data))
        if self.clients:
            with (self.data / "pg_hba.conf").open("a") as hba:
                hba.write(f"host all all {self.clients} trust\n")
        self.start()

    def _initialized(self) -> Path:
        """A cluster as initdb makes it, made once per user, machine and version and
        copied for each server: initdb takes half a second of CPU, a copy a tenth. Made
        under a lock and marked whole once made, so that a test in another process never
        copies half of one, and one left half made (a run killed) is made again."""
        said = subprocess.run(
            ["initdb", "--version"], capture_output=True, text=True, timeout=30
        ).stdout
        version = said.removeprefix("initdb (PostgreSQL) ").split()[0]  # 15.20
        made = Path(tempfile.gettempdir()) / f"cronchain-initdb-{version}-{os.geteuid()}"
        whole = made.with_name(f"{made.name}.whole")
        with open(f"{made}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (whole.exists() and (made / "PG_VERSION").exists()):
                whole.unlink(missing_ok=True)
                self._run("rm", "-rf", str(made))
                self._run("initdb", "-D", str(made), "-U", "postgres", "--auth=trust", "--no-sync")
                whole.touch()
        return made

    def start(self) -> None:
        listen = ",".join(dict.fromkeys(["127.0.0.1", self.host]))
        options = f"-p {self.port} -c listen_addresses={listen} -k {self.folder} -c fsync=off"
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
def serving(server: socketserver.BaseServer) -> Iterator[int]:
    """``server`` answering on a thread of its own until the block ends: its port."""
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def postgres_server(
    host: str = "127.0.0.1", clients: str | None = None
) -> Iterator[PostgresServer]:
    server = PostgresServer(host, clients)
    try:
        server.init()
        yield server
    finally:
        server.destroy()


RABBITMQ = os.environ.get("CRONCHAIN_TEST_RABBITMQ", "amqp://guest:guest@127.0.0.1:5672")


def rabbitmqctl(*args: str) -> str:
    done = subprocess.run(
        ["rabbitmqctl", *args], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout


@contextmanager
def rabbitmq_vhost() -> Iterator[str]:
    """A virtual host of the test's own on the machine's RabbitMQ (its queues are no
    other test's), made and deleted with ``rabbitmqctl``: the broker URL on it."""
    if shutil.which("rabbitmqctl") is None:
        unavailable("rabbitmqctl")
    host, port = RABBITMQ.rsplit("@", 1)[1].split(":")
    with socket.socket() as probe:
        if probe.connect_ex((host, int(port))) != 0:
            unavailable(f"RabbitMQ at {host}:{port}")
    vhost = f"cronchain_test_{uuid.uuid4().hex[:12]}"
    user = RABBITMQ.split("//", 1)[1].split(":", 1)[0]
    rabbitmqctl("add_vhost", vhost)
    try:
        rabbitmqctl("set_permissions", "-p", vhost, user, ".*", ".*", ".*")
        yield f"{RABBITMQ}/{vhost}"
    finally:
        with contextlib.suppress(subprocess.SubprocessError):
            rabbitmqctl("delete_vhost", vhost)


RABBITMQ_BIN = Path("/usr/lib/rabbitmq/bin")


class RabbitMQServer:
    """A private RabbitMQ node (its own name, ports, data and epmd), so a test may stop
    and start it. It runs as root from RabbitMQ's own scripts, with root's Erlang
    cookie, beside the machine's node (which the packaged wrappers run as ``rabbitmq``);
    guest may log in on loopback."""

    def __init__(self, folder: Path, config: str = "", advanced: str = "[]") -> None:
        """``config`` adds lines to its ``rabbitmq.conf``; ``advanced`` is its
        ``advanced.config`` (an Erlang term, without the final full stop)."""
        self.config, self.advanced = config, advanced
        self.port, self.dist_port, self.epmd_port = free_port(), free_port(), free_port()
        self.folder = folder / "rabbitmq"
        self.node = f"cronchain-{uuid.uuid4().hex[:8]}@localhost"
        self.process: subprocess.Popen[bytes] | None = None
        self._output: BinaryIO | None = None

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}//"

    def _env(self) -> dict[str, str]:
        return os.environ | {
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "ERL_EPMD_PORT": str(self.epmd_port),  # an epmd of its own, stopped with it
            "RABBITMQ_MNESIA_BASE": str(self.folder / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.folder / "log"),
            "RABBITMQ_CONFIG_FILE": str(self.folder / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(self.folder / "advanced.config"),
            "RABBITMQ_CONF_ENV_FILE": str(self.folder / "rabbitmq-env.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.folder / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(self.folder / "rabbitmq.pid"),
            "HOME": str(Path.home()),
        }

    def start(self) -> None:
        if not (RABBITMQ_BIN / "rabbitmq-server").exists():
            unavailable("rabbitmq-server")
        if self.process is None:  # the first start: its files
            (self.folder / "log").mkdir(parents=True)
            (self.folder / "rabbitmq.conf").write_text(f"loopback_users = none\n{self.config}")
            (self.folder / "advanced.config").write_text(f"{self.advanced}.\n")
            (self.folder / "rabbitmq-env.conf").write_text("")
            (self.folder / "enabled_plugins").write_text("[].\n")
        self._output = (self.folder / "log" / "stdout.log").open("ab")
        self.process = subprocess.Popen(
            [str(RABBITMQ_BIN / "rabbitmq-server")],
            env=self._env(),
            stdout=self._output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._await_startup(deadline=time.monotonic() + 120)

    def _await_startup(self, deadline: float) -> None:
        """``await_startup`` waits for a node that has begun to boot; one that has not
        registered its name yet is refused at once (status 69): ask again."""
        assert self.process is not None
        while True:
            try:
                self.ctl("await_startup", "--timeout", "60", timeout=70)
                return
            except subprocess.CalledProcessError as err:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError(f"RabbitMQ did not start: {err.stderr}") from err
                time.sleep(1)

    def ctl(self, *args: str, timeout: float = 60) -> str:
        """``rabbitmqctl`` against this node."""
        done = subprocess.run(
            [str(RABBITMQ_BIN / "rabbitmqctl"), "-n", self.node, *args],
            env=self._env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        )
        return done.stdout

    def stop(self) -> None:
        """A clean stop, as ``systemctl stop`` makes one (a node that does not stop in
        a minute is killed, and says so), and its epmd with it."""
        if self.process is not None and self.process.poll() is None:
            try:
                self.ctl("stop")
            except subprocess.SubprocessError as err:
                print(f"rabbitmqctl stop failed, the node will be killed: {err}", file=sys.stderr)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                print("the RabbitMQ node did not stop in 60 s: killed", file=sys.stderr)
                os.killpg(self.process.pid, 9)
                self.process.wait()
        if self._output is not None:
            self._output.close()
            self._output = None
        epmd = shutil.which("epmd")
        if epmd is not None:
            subprocess.run(
                [epmd, "-port", str(self.epmd_port), "-kill"], capture_output=True, timeout=30
            )


@contextmanager
def rabbitmq_server(
    folder: Path, config: str = "", advanced: str = "[]"
) -> Iterator[RabbitMQServer]:
    """A private RabbitMQ node (``RabbitMQServer``'s settings), started, stopped at the
    end of the block."""
    server = RabbitMQServer(folder, config, advanced)
    try:
        server.start()
        yield server
    finally:
        server.stop()
