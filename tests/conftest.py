from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy

from cronchain.migrations import upgrade
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.invokers import Call, default_invokers
from cronchain.scheduler.storage.db import make_engine
from tests import services
from tests.faults.rig import SUMMARY


@dataclass
class Clock:
    """The tests' clock: it moves only when told to."""

    now: datetime = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


class WorkerDied(BaseException):
    """Raised by a test's invoker to leave its attempt claimed and never reported, as a
    work-path worker killed mid-run does (not an Exception: the work path records those)."""


def deliver_runs(engine: Engine, port: RecordingPort) -> int:
    """Do what a work-path worker does with each ``cronchain.run`` message sent so far
    (``celery`` attempts are the user's workers'); returns how many."""
    from cronchain.scheduler.workers import work

    calls = [call for call in port.runs if call.kind != "celery"]
    port.runs[:] = [call for call in port.runs if call.kind == "celery"]
    for call in calls:
        with contextlib.suppress(WorkerDied):
            work.execute(engine, call.invocation_id, call.attempt, "work@test")
    return len(calls)


def deliver_ticks(engine: Engine, port: RecordingPort) -> None:
    """The ticks sent so far, then the starts they sent (their runs are sent on)."""
    ticks, port.ticks[:] = list(port.ticks), []
    for job_id, nonce, _eta in ticks:
        engine.tick(job_id, nonce)
    starts, port.starts[:] = list(port.starts), []
    for invocation_id in starts:
        engine.runs.start_invocation(invocation_id)


@dataclass
class RecordingPort:
    """An enqueue port that keeps messages in lists instead of sending them."""

    ticks: list[tuple[int, int, datetime]] = field(default_factory=list)
    batches: list[list[tuple[int, int]]] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    start_messages: list[tuple[int, int | None, datetime | None]] = field(default_factory=list)
    tasks: list[tuple[str, int, int]] = field(default_factory=list)
    runs: list[Call] = field(default_factory=list)
    run_batches: list[list[Call]] = field(default_factory=list)
    revoked: list[str] = field(default_factory=list)
    alerts: list[tuple[int, datetime | None]] = field(default_factory=list)
    gates: list[tuple[int, str, int, int, datetime | None]] = field(default_factory=list)

    def tick_later(self, job_id: int, nonce: int, eta: datetime) -> None:
        self.ticks.append((job_id, nonce, eta))

    def tick_batch(self, ticks: list[tuple[int, int]], eta: datetime) -> None:
        """Kept in ``ticks`` like single ones, so that tests deliver them the same way."""
        self.batches.append(list(ticks))
        self.ticks += [(job_id, nonce, eta) for job_id, nonce in ticks]

    def start_invocation(
        self, invocation_id: int, attempt: int | None = None, eta: datetime | None = None
    ) -> None:
        self.starts.append(invocation_id)
        self.start_messages.append((invocation_id, attempt, eta))

    def run(self, call: Call) -> None:
        """Every attempt sent; a ``celery`` one is also kept as its task in ``tasks``."""
        self.runs.append(call)
        if call.kind == "celery":
            self.tasks.append((call.options["task"], call.invocation_id, call.attempt))

    def run_batch(self, calls: list[Call]) -> None:
        """Kept in ``runs`` like single ones, so that tests deliver them the same way."""
        self.run_batches.append(list(calls))
        self.runs += calls

    def revoke(self, task_id: str) -> None:
        self.revoked.append(task_id)

    def alert(self, alert_id: int, eta: datetime | None = None) -> None:
        self.alerts.append((alert_id, eta))

    def gate(
        self, invocation_id: int, gate: str, number: int, job_id: int, eta: datetime | None
    ) -> None:
        self.gates.append((invocation_id, gate, number, job_id, eta))

    def clear(self) -> None:
        self.ticks.clear()
        self.batches.clear()
        self.starts.clear()
        self.start_messages.clear()
        self.tasks.clear()
        self.runs.clear()
        self.run_batches.clear()
        self.revoked.clear()
        self.alerts.clear()
        self.gates.clear()


@pytest.fixture(scope="session")
def pg_admin() -> sqlalchemy.Engine:
    return services.pg_admin()


@pytest.fixture(scope="session")
def pg_template(pg_admin: sqlalchemy.Engine) -> Iterator[str]:
    """A migrated database that each test clones (cheaper than migrating each time)."""
    name = services.create_database(pg_admin)
    engine = make_engine(services.database_url(name))
    upgrade(engine)
    engine.dispose()
    yield name
    services.drop_database(pg_admin, name)


@pytest.fixture
def pg_url(pg_admin: sqlalchemy.Engine, pg_template: str) -> Iterator[str]:
    name = services.create_database(pg_admin, template=pg_template)
    yield services.database_url(name)
    services.drop_database(pg_admin, name)


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[sqlalchemy.Engine]:
    """A migrated, empty database: SQLite (the embedded default) and PostgreSQL."""
    if request.param == "sqlite":
        engine = make_engine(f"sqlite:///{tmp_path}/cronchain.db")
        upgrade(engine)
    else:
        engine = make_engine(request.getfixturevalue("pg_url"))
    yield engine
    engine.dispose()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def port() -> RecordingPort:
    return RecordingPort()


@pytest.fixture
def engine(db: sqlalchemy.Engine, port: RecordingPort, clock: Clock) -> Engine:
    return Engine(db, port, default_invokers(), grace=timedelta(seconds=15), clock=clock)


Cli = Callable[..., "subprocess.CompletedProcess[str]"]


def cli_runner(env: Mapping[str, str], cwd: Path) -> Cli:
    """``cronchain ARGS`` as an operator runs it, in ``cwd``; asserts its exit status
    (``code=``, default 0) and returns what it printed."""

    def run(*args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "cronchain.scheduler.cli", *args],
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=60,
            cwd=cwd,
        )
        assert done.returncode == code, done.stderr
        return done

    run.env = dict(env)  # type: ignore[attr-defined]  # for a test's own processes
    return run


# ``make test`` runs pytest-xdist's ``--dist loadgroup``. The tests that start real
# worker and beat processes (``e2e``, ``faults``) each own their folder, databases and
# Redis and mostly wait on those processes, so xdist spreads them over its workers; every
# other test stays in one group, run by one worker in file order as before.
IN_PROCESS = "in_process"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("e2e") is None:
            item.add_marker(pytest.mark.xdist_group(IN_PROCESS))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """In an xdist worker: hand this worker's fault ledger lines to the controller."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["fault_ledger"] = list(SUMMARY)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """In xdist's controller: gather the ledger lines each worker handed over."""
    SUMMARY.extend(getattr(node, "workeroutput", {}).get("fault_ledger", []))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The fault suite's ledger: one line per fault, at the end of the run."""
    if SUMMARY:
        terminalreporter.section("fault suite ledger")
        for line in sorted(SUMMARY):
            terminalreporter.write_line(line)
