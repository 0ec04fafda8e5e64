"""A private PostgreSQL cluster restarted under the engine: nothing is lost, and an
invocation whose outcome arrives while the database is away still records it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest
import sqlalchemy

from cronchain.migrations import upgrade
from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.invokers import Call, Outcome
from cronchain.scheduler.spec.jobspec import JobSpec
from cronchain.scheduler.storage.db import make_engine
from cronchain.statemachine import InvocationStatus
from tests.support.deliver import deliver_runs
from tests.support.engine import Clock, RecordingPort
from tests.support.services import PostgresServer, postgres_server

pytestmark = pytest.mark.postgres


@pytest.fixture
def server() -> Iterator[PostgresServer]:
    with postgres_server() as s:
        yield s


@pytest.fixture
def db(server: PostgresServer) -> Iterator[sqlalchemy.Engine]:
    engine = make_engine(server.url)
    upgrade(engine)
    yield engine
    engine.dispose()


class RestartingInvoker:
    """A run during which the database restarts: it is down when the run ends and comes
    back a moment later."""

    def __init__(self, server: PostgresServer, mode: str):
        self.server = server
        self.mode = mode

    def invoke(self, call: Call) -> Outcome:
        self.server.stop(self.mode)
        threading.Timer(1.5, self.server.start).start()
        return Outcome(InvocationStatus.SUCCEEDED)


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_an_outcome_survives_a_database_restart(
    db: sqlalchemy.Engine, server: PostgresServer, mode: str
):
    port = RecordingPort()
    engine = Engine(
        db,
        port,
        {"noop": RestartingInvoker(server, mode)},
        grace=timedelta(seconds=15),
        clock=Clock(),
    )
    sched = Scheduler(engine)
    sched.apply([JobSpec("p", "a", "triggered")], project="p")
    invocation = sched.trigger("p/a")["invocation"]
    engine.attempts.start_invocation(invocation)
    deliver_runs(engine, port)  # the database goes away during the run
    [run] = sched.history("p/a")
    assert (run["id"], run["status"], run["error"]) == (invocation, "SUCCEEDED", None)
    assert sched.jobs()[0]["state"] == "SCHEDULED"
