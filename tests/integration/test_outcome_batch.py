"""Outcomes reported together are recorded in one transaction (``scheduler.outcome_batch``),
with the rows the one-outcome path writes, and one bad row fails alone."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy
from sqlalchemy import Connection, select, update

from scheduler.api import Scheduler
from scheduler.engine import Engine
from scheduler.invokers import Call, Outcome, default_invokers
from scheduler.outcome_batch import Report, finish_together
from scheduler.spec import JobSpec
from scheduler.storage.db import make_engine
from scheduler.storage.models import jobs
from statemachine import InvocationStatus
from tests.conftest import Clock, RecordingPort
from tests.integration.test_batches import GRACE, sent
from tests.integration.test_engine import apply, make, rows
from tests.integration.test_tick_batch import described

pytestmark = pytest.mark.postgres
OK, FAILED = Outcome(InvocationStatus.SUCCEEDED), Outcome.failed("boom")


class CountingEngine(Engine):
    transactions = 0

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        self.transactions += 1
        with super().transaction() as conn:
            yield conn


def running(engine: Engine, port: RecordingPort, clock: Clock, advance: float = 10) -> list[Call]:
    """Tick what is due and claim the runs it sent: their outcomes are for the test."""
    clock.advance(advance)
    engine.tick_many(sent(port), start_here=True)
    calls = engine.runs.claim_many([(c.invocation_id, c.attempt, c.job_id) for c in port.runs], "w")
    port.runs.clear()
    return calls


def reports(calls: list[Call], outcome: Outcome = OK) -> list[Report]:
    return [Report(c.invocation_id, c.attempt, outcome, c.job_id) for c in calls]


def test_outcomes_of_a_group_share_one_transaction(db: sqlalchemy.Engine, clock: Clock):
    port = RecordingPort()
    engine = CountingEngine(db, port, default_invokers(), grace=GRACE, clock=clock, batch=100)
    apply(engine, *(make(name=name) for name in "abc"))
    group = reports(running(engine, port, clock))
    before = engine.transactions
    finish_together(engine.runs, group)
    assert engine.transactions - before == 1
    assert [(r.recorded, r.error) for r in group] == [(True, None)] * 3
    assert [r["status"] for r in rows(engine)] == ["SUCCEEDED"] * 3
    finish_together(engine.runs, group)  # reported again: refused, one by one, as before
    assert [r.recorded for r in group] == [False] * 3


SPECS: dict[str, dict[str, Any]] = {
    "plain": {},
    "retried": {"retries": {"max_attempts": 3, "jitter": 0}},
    "allow": {"overlap": "allow", "max_concurrent": 3},
    "buffered": {"overlap": "buffer_all"},
    "triggers": {"triggers": ["plain"]},
}


def test_a_group_writes_the_rows_one_outcome_at_a_time_writes(db: sqlalchemy.Engine, clock: Clock):
    """The same jobs in two projects; each round's outcomes (successes, failures that
    retry, two runs of one job, a buffered run started by a finish, a success that
    triggers another job) are recorded as a group in one project and one by one in the
    other."""
    port = RecordingPort()
    engine = Engine(db, port, default_invokers(), grace=GRACE, clock=clock, batch=100)
    for project in ("group", "each"):
        specs = [
            JobSpec(project, n, "every 10s", kind="noop", controls=c) for n, c in SPECS.items()
        ]
        Scheduler(engine).apply(specs, project=project)
    with db.connect() as conn:
        grouped = set(conn.execute(select(jobs.c.id).where(jobs.c.project == "group")).scalars())
    calls: list[Call] = []
    for round_ in range(6):
        calls += running(engine, port, clock)
        for invocation_id in port.starts:  # retries and triggered runs
            engine.runs.start_invocation(invocation_id)
        port.starts.clear()
        calls += engine.runs.claim_many(
            [(c.invocation_id, c.attempt, c.job_id) for c in port.runs], "w"
        )
        port.runs.clear()
        if round_ % 2:  # two rounds' runs finish together: two of one job ("allow")
            outcome = {c.invocation_id: FAILED if c.job.endswith("retried") else OK for c in calls}
            ours = [c for c in calls if c.job_id in grouped]
            finish_together(
                engine.runs,
                [
                    Report(c.invocation_id, c.attempt, outcome[c.invocation_id], c.job_id)
                    for c in ours
                ],
            )
            for c in calls:
                if c.job_id not in grouped:
                    engine.runs.finish_invocation(
                        c.invocation_id,
                        outcome[c.invocation_id],
                        attempt=c.attempt,
                        job_id=c.job_id,
                    )
            calls.clear()
    group, each = described(engine, "group"), described(engine, "each")
    assert group == each
    statuses = [run[2] for run in group[1]]  # name, slot, status, ...
    assert statuses.count("SUCCEEDED") > 10 and "STARTING" in statuses and "SKIPPED" in statuses


def test_one_bad_row_fails_alone(db: sqlalchemy.Engine, clock: Clock):
    port = RecordingPort()
    engine = Engine(db, port, default_invokers(), grace=GRACE, clock=clock, batch=100)
    apply(engine, *(make(name=name) for name in "abc"))
    group = reports(running(engine, port, clock))
    with engine.transaction() as conn:
        conn.execute(update(jobs).where(jobs.c.id == group[1].job_id).values(timezone="No/Zone"))
    finish_together(engine.runs, group)
    assert [r.recorded for r in group] == [True, None, True]
    assert group[1].error is not None and "No/Zone" in str(group[1].error)
    assert [r["status"] for r in rows(engine)] == ["SUCCEEDED", "RUNNING", "SUCCEEDED"]


def test_reports_that_arrive_while_one_is_written_are_written_together(pg_url: str, clock: Clock):
    """The first report's write waits on a job the test holds locked; five more arrive
    meanwhile and are written by one transaction once it is through."""
    db = make_engine(pg_url)
    port = RecordingPort()
    engine = CountingEngine(db, port, default_invokers(), grace=GRACE, clock=clock, batch=100)
    apply(engine, *(make(name=f"j{i}") for i in range(6)))
    first, *rest = reports(running(engine, port, clock))
    before = engine.transactions
    together = engine.runs.together
    with db.connect() as holder:
        holder.begin()
        holder.exec_driver_sql(f"SELECT 1 FROM jobs WHERE id = {first.job_id} FOR UPDATE")
        threads = [threading.Thread(target=together.finish, args=(r,)) for r in (first, *rest)]
        threads[0].start()
        while not together._writing:
            time.sleep(0.01)
        for thread in threads[1:]:
            thread.start()
        while len(together._waiting) < len(rest):
            time.sleep(0.01)
        holder.rollback()
        for thread in threads:
            thread.join(timeout=10)
    assert [r.recorded for r in (first, *rest)] == [True] * 6
    assert engine.transactions - before == 2
    db.dispose()
