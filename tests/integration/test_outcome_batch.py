"""Outcomes reported together are recorded in one transaction (``scheduler.core.outcome_batch``),
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

from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.core.attempts import AttemptRef
from cronchain.scheduler.core.leases import Lease
from cronchain.scheduler.core.outcome_batch import GroupCommit, Report, finish_together
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.errors import TransientError
from cronchain.scheduler.invokers import Call, Outcome, default_invokers
from cronchain.scheduler.spec.jobspec import JobSpec
from cronchain.scheduler.storage.db import make_engine
from cronchain.scheduler.storage.models import jobs
from cronchain.scheduler.workers import work
from cronchain.statemachine import InvocationStatus
from tests.support.deliver import sent
from tests.support.engine import GRACE, Clock, RecordingPort
from tests.support.jobs import apply, make
from tests.support.rows import described, job, rows

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
    attempts = [(c.invocation_id, c.attempt, c.job_id) for c in port.runs]
    calls, _ = engine.attempts.claim_many(attempts, "w")
    port.runs.clear()
    return calls


def reports(calls: list[Call], outcome: Outcome = OK) -> list[Report]:
    return [Report(c.invocation_id, c.attempt, outcome, c.job_id) for c in calls]


def test_outcomes_of_a_group_share_one_transaction(db: sqlalchemy.Engine, clock: Clock):
    port = RecordingPort()
    engine = CountingEngine(db, port, default_invokers(), grace=GRACE, clock=clock, batch=100)
    apply(engine, *(make(name=name) for name in "abc"))
    calls = running(engine, port, clock)
    group = reports(calls)
    before = engine.transactions
    finish_together(engine.runs, group)
    assert engine.transactions - before == 1
    assert [(r.recorded, r.error, r.alone) for r in group] == [(True, None, False)] * 3
    assert [r["status"] for r in rows(engine)] == ["SUCCEEDED"] * 3
    apply(engine, make(name="d"))
    [lone] = [r for r in reports(running(engine, port, clock)) if r.job_id == job(engine, "p/d").id]
    before = engine.transactions
    finish_together(engine.runs, [lone])  # written by the group, in its window, so
    assert (lone.recorded, lone.alone, engine.transactions - before) == (True, False, 1)
    again = reports(calls)  # reported again: left to each thread, which refuses it
    finish_together(engine.runs, again)
    assert [(r.recorded, r.alone) for r in again] == [(None, True)] * 3
    assert [engine.runs.together.finish(r) for r in reports(calls)] == [False] * 3


SPECS: dict[str, dict[str, Any]] = {
    "plain": {},
    "retried": {"retries": {"max_attempts": 3, "jitter": 0}},
    "allow": {"overlap": "allow", "max_concurrent": 3},
    "buffered": {"overlap": "buffer_all"},
    "triggers": {"triggers": ["plain"]},
    "a_trigger": {"triggers": ["z_cancel"]},  # its target: a later id, cancel_other
    "z_cancel": {"overlap": "cancel_other", "retries": {"max_attempts": 2, "jitter": 0}},
}


def test_a_group_writes_the_rows_one_outcome_at_a_time_writes(
    db: sqlalchemy.Engine, clock: Clock, caplog: pytest.LogCaptureFixture
):
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
            engine.attempts.start_invocation(invocation_id)
        port.starts.clear()
        calls += engine.attempts.claim_many(
            [(c.invocation_id, c.attempt, c.job_id) for c in port.runs], "w"
        )[0]
        port.runs.clear()
        if round_ % 2:  # two rounds' runs finish together: two of one job ("allow")
            outcome = {c.invocation_id: FAILED if c.job.endswith("retried") else OK for c in calls}
            ours = [c for c in calls if c.job_id in grouped]
            group = [
                Report(c.invocation_id, c.attempt, outcome[c.invocation_id], c.job_id) for c in ours
            ]
            finish_together(engine.runs, group)
            for report in group:  # what each one's own thread does
                if report.alone:
                    engine.runs.finish_invocation(
                        report.invocation_id,
                        report.outcome,
                        attempt=report.attempt,
                        job_id=report.job_id,
                    )
            # One at a time in the order the group serializes them: by job, and the
            # outcomes of jobs that trigger others (recorded apart) after the group's.
            order = {
                c.invocation_id: (
                    bool(SPECS[c.job.split("/")[1]].get("triggers")),
                    c.job_id,
                    c.invocation_id,
                )
                for c in calls
            }
            for c in sorted(calls, key=lambda c: order[c.invocation_id]):
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
    assert "one by one" not in caplog.text  # the groups were written as groups
    statuses = [run[2] for run in group[1]]  # name, slot, status, ...
    assert statuses.count("SUCCEEDED") > 10 and "STARTING" in statuses and "SKIPPED" in statuses


def test_one_bad_row_fails_alone(db: sqlalchemy.Engine, clock: Clock):
    port = RecordingPort()
    engine = Engine(db, port, default_invokers(), grace=GRACE, clock=clock, batch=100)
    apply(engine, *(make(name=name) for name in "abc"))
    group = reports(running(engine, port, clock))
    with engine.transaction() as conn:
        conn.execute(update(jobs).where(jobs.c.id == group[1].job_id).values(timezone="No/Zone"))
    finish_together(engine.runs, group)  # fails as a whole: each left to its thread
    assert [(r.recorded, r.alone) for r in group] == [(None, True)] * 3
    got = []
    for r in group:  # what each one's own thread does
        try:
            got.append(
                engine.runs.together.finish(Report(r.invocation_id, r.attempt, OK, r.job_id))
            )
        except Exception as err:  # noqa: BLE001
            got.append(type(err).__name__)
    assert got == [True, "SpecError", True]
    assert [r["status"] for r in rows(engine)] == ["SUCCEEDED", "RUNNING", "SUCCEEDED"]


def test_a_run_locked_elsewhere_is_left_to_its_own_thread(pg_url: str, clock: Clock):
    """The group skips a run whose job another transaction holds (an apply, a tick
    batch) rather than make every outcome wait: the others are recorded at once, and
    that one by its own thread (``finish_invocation``) once the lock is free."""
    db = make_engine(pg_url)
    port = RecordingPort()
    engine = CountingEngine(db, port, default_invokers(), grace=GRACE, clock=clock, batch=100)
    apply(engine, *(make(name=f"j{i}") for i in range(4)))
    group = reports(running(engine, port, clock))
    with db.connect() as holder:
        holder.begin()
        holder.exec_driver_sql(f"SELECT 1 FROM jobs WHERE id = {group[0].job_id} FOR UPDATE")
        before = engine.transactions
        finish_together(engine.runs, group)
        assert engine.transactions - before == 1
        assert [(r.recorded, r.alone) for r in group] == [(None, True)] + [(True, False)] * 3
        holder.rollback()
    first = group[0]  # its thread, alone: as it reports it (a report of its own)
    assert engine.runs.together.finish(Report(first.invocation_id, 1, OK, first.job_id))
    assert [r["status"] for r in rows(engine)] == ["SUCCEEDED"] * 4
    db.dispose()


class Writes:
    """A stand-in for the group's write (the thread logic alone): it records the
    groups it is given, and the first one waits until told to go on."""

    def __init__(self, fail_second: BaseException | None = None) -> None:
        self.groups: list[list[int]] = []
        self.go = threading.Event()
        self.fail_second = fail_second

    def __call__(self, runs: Any, group: list[Report]) -> None:
        self.groups.append([r.invocation_id for r in group])
        if len(self.groups) == 1:
            assert self.go.wait(10)
        elif self.fail_second is not None:
            raise self.fail_second
        for report in group:
            report.recorded = True


def run_threads(together: GroupCommit, writes: Writes, count: int) -> dict[int, Any]:
    """``count`` reports: the first is being written while the others arrive."""
    results: dict[int, Any] = {}

    def finish(i: int) -> None:
        try:
            results[i] = together.finish(Report(i, 1, OK))
        except BaseException as err:  # noqa: BLE001 - what each thread got is the test
            results[i] = err

    threads = [threading.Thread(target=finish, args=(i,), daemon=True) for i in range(count)]
    threads[0].start()
    deadline = time.monotonic() + 10
    while not writes.groups and time.monotonic() < deadline:
        time.sleep(0.01)
    for thread in threads[1:]:
        thread.start()
    while len(together._waiting) < count - 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    writes.go.set()
    for thread in threads:
        thread.join(timeout=10)
    return results


def test_reports_that_arrive_while_one_is_written_are_written_together():
    writes = Writes()
    together = GroupCommit(runs=None, write=writes)  # type: ignore[arg-type]
    assert run_threads(together, writes, 6) == {i: True for i in range(6)}
    assert writes.groups == [[0], [1, 2, 3, 4, 5]]


def test_a_writer_that_dies_leaves_the_others_to_retry():
    """A BaseException in the thread writing a group (a worker shutting down) is that
    thread's own; the others of its group are not taken for recorded: each raises a
    TransientError of its own, which ``record_patiently`` retries."""
    writes = Writes(fail_second=KeyboardInterrupt())
    together = GroupCommit(runs=None, write=writes)  # type: ignore[arg-type]
    results = run_threads(together, writes, 4)
    assert writes.groups[0] == [0] and sorted(writes.groups[1]) == [1, 2, 3]
    assert results[0] is True
    got = sorted(type(results[i]).__name__ for i in (1, 2, 3))
    assert got == ["KeyboardInterrupt", "TransientError", "TransientError"]
    errors = [results[i] for i in (1, 2, 3) if isinstance(results[i], TransientError)]
    assert errors[0] is not errors[1]
    assert not together._writing and not together._waiting


def test_a_threads_outcomes_are_written_as_one_group_and_the_rest_alone(
    db: sqlalchemy.Engine, clock: Clock
):
    """``Runs.report_all``: the outcomes one thread has together share one transaction;
    one the group does not record (its attempt ended elsewhere) goes the one-outcome way
    and is refused there, and every lease is let go."""
    port = RecordingPort()
    engine = CountingEngine(db, port, default_invokers(), grace=GRACE, clock=clock, batch=100)
    apply(engine, *(make(name=name) for name in "abc"))
    calls = running(engine, port, clock)
    stale = calls[0]
    assert engine.runs.finish_invocation(stale.invocation_id, FAILED, attempt=stale.attempt)
    leases = [
        engine.leases.hold(Lease(c.invocation_id, c.attempt, c.lease, job_id=c.job_id))
        for c in calls
    ]
    before = engine.transactions
    assert engine.runs.report_all(leases, [OK] * 3) == [False, True, True]
    # The group; then the stale one as one outcome is: a group of one, which leaves it to
    # finish_invocation, which refuses it.
    assert engine.transactions - before == 3
    assert engine.leases._held == set()
    statuses = {r["job_id"]: r["status"] for r in rows(engine)}
    assert statuses[stale.job_id] == "FAILED"
    assert sorted(statuses.values()) == ["FAILED", "SUCCEEDED", "SUCCEEDED"]


def ticked_batch(
    db: sqlalchemy.Engine, clock: Clock, *specs: JobSpec
) -> tuple[CountingEngine, list[AttemptRef]]:
    """Project ``p`` is ``specs``, ticked at their first slot: the engine, and the
    attempts of the one batch of runs it sent to the work path."""
    port = RecordingPort()
    engine = CountingEngine(db, port, default_invokers(), grace=GRACE, clock=clock, batch=100)
    apply(engine, *specs)
    clock.advance(10)
    engine.tick_many(sent(port), start_here=True)
    [batch] = port.run_batches
    return engine, [(c.invocation_id, c.attempt, c.job_id) for c in batch]


def test_a_batch_of_runs_that_answer_at_once_is_recorded_in_one_transaction(
    db: sqlalchemy.Engine, clock: Clock
):
    """The work path's batch of no-ops: claimed and recorded in one transaction, by the
    thread that took the message (``scheduler.workers.work``)."""
    engine, batch = ticked_batch(db, clock, *(make(name=f"n{i}") for i in range(20)))
    before = engine.transactions
    outcomes = work.execute_batch(engine, batch, "w", threads=2)
    assert engine.transactions - before == 1
    assert [o.status for o in outcomes] == ["SUCCEEDED"] * 20
    written = rows(engine)
    assert {r["status"] for r in written} == {"SUCCEEDED"}
    assert {r["worker"] for r in written} == {"w"}
    assert all(r["started_at"] == r["finished_at"] == clock() for r in written)
    assert all(r["log"].index("claimed by w") < r["log"].index("SUCCEEDED") for r in written)
    assert engine.leases._held == set()
    again = work.execute_batch(engine, batch, "w", threads=2)  # delivered twice: ended
    assert again == [] and rows(engine) == written


def test_runs_claimed_and_recorded_together_write_the_rows_of_a_claim_and_each_outcome(
    db: sqlalchemy.Engine, clock: Clock, caplog: pytest.LogCaptureFixture
):
    """The same no-op jobs in two projects (successes, failures that retry, a retry and
    a slot of one job in one batch, a success that triggers another job): each round's
    runs are claimed and recorded in one transaction (``work.execute_batch``) in one
    project, and claimed, then recorded one by one in the other."""
    port = RecordingPort()
    engine = Engine(db, port, default_invokers(), grace=GRACE, clock=clock, batch=100)
    fails = {"retried", "z_cancel"}
    for project in ("together", "each"):
        specs = [
            JobSpec(project, n, "every 10s", kind="noop", options={"fail": n in fails}, controls=c)
            for n, c in SPECS.items()
        ]
        Scheduler(engine).apply(specs, project=project)
    with db.connect() as conn:
        together = set(
            conn.execute(select(jobs.c.id).where(jobs.c.project == "together")).scalars()
        )
    for _ in range(6):
        clock.advance(10)
        engine.tick_many(sent(port), start_here=True)
        for invocation_id in port.starts:  # retries and triggered runs
            engine.attempts.start_invocation(invocation_id)
        port.starts.clear()
        refs = sorted((c.job_id, c.invocation_id, c.attempt) for c in port.runs)
        port.runs.clear()
        ours = [(inv, attempt, job_id) for job_id, inv, attempt in refs if job_id in together]
        work.execute_batch(engine, ours, "w", threads=2)
        theirs = [(inv, attempt, job_id) for job_id, inv, attempt in refs if job_id not in together]
        calls, answered = engine.attempts.claim_many(theirs, "w")
        assert answered == {}
        for c in in_batch_order(calls, fails):
            outcome = work.make_call(engine.invokers.get(c.kind), c)
            engine.runs.finish_invocation(
                c.invocation_id, outcome, attempt=c.attempt, job_id=c.job_id
            )
    ours_written, theirs_written = described(engine, "together"), described(engine, "each")
    assert ours_written == theirs_written
    assert "failed" not in caplog.text  # claimed and recorded together every time
    statuses = [run[2] for run in ours_written[1]]  # name, slot, status, ...
    assert statuses.count("SUCCEEDED") > 10
    # a failure whose retry is due, a run that a triggered run cancelled
    assert {("retried", "STARTING"), ("z_cancel", "ABORTED")} <= {
        (r[0], r[2]) for r in ours_written[1]
    }


def in_batch_order(calls: list[Call], failing: set[str]) -> list[Call]:
    """The order ``work.execute_batch`` records a batch's no-ops in: by job, each job's
    first run that succeeds, in the claim; then, as a group, a job's second run and the
    failures, and after the group's the ends of jobs that trigger others (recorded
    apart)."""
    first: dict[int, int] = {}
    for c in sorted(calls, key=lambda c: c.invocation_id):
        first.setdefault(c.job_id, c.invocation_id)

    def order(c: Call) -> tuple[bool, bool, int, int]:
        name = c.job.split("/")[1]
        triggers = bool(SPECS[name].get("triggers"))
        later = triggers or name in failing or first[c.job_id] != c.invocation_id
        return later, triggers, c.job_id, c.invocation_id

    return sorted(calls, key=order)


def test_a_claim_that_cannot_record_its_runs_claims_them_for_their_calls(
    db: sqlalchemy.Engine,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
):
    """Should recording in the claim's transaction fail, the batch is claimed without
    it, and its calls are made and recorded as any are."""
    engine, batch = ticked_batch(db, clock, *(make(name=f"n{i}") for i in range(3)))
    real = engine.runs.record_outcome
    broken = iter([RuntimeError("a bug")])

    def record_once_broken(*args: Any, **kwargs: Any) -> Any:
        error = next(broken, None)
        if error is not None:
            raise error
        return real(*args, **kwargs)

    monkeypatch.setattr(engine.runs, "record_outcome", record_once_broken)
    before = engine.transactions
    outcomes = work.execute_batch(engine, batch, "w", threads=2)
    assert "3 attempts claimed and recorded together failed" in caplog.text
    assert engine.transactions - before == 3  # the one that failed, the claim, the group
    assert [o.status for o in outcomes] == ["SUCCEEDED"] * 3
    assert [(r["status"], r["worker"], r["attempt"]) for r in rows(engine)] == [
        ("SUCCEEDED", "w", 1)
    ] * 3
    assert engine.leases._held == set()


def test_a_batchs_failures_are_claimed_apart_from_their_retries(
    db: sqlalchemy.Engine, clock: Clock
):
    """A no-op that fails with attempts left is not recorded in its claim's UPDATE: its
    retry would give the claim back in the same statement, and the fire lag counts each
    slot's first claim as a statement makes it (migration 0016)."""
    retried = {"retries": {"max_attempts": 2, "jitter": 0}}
    specs = [
        JobSpec("p", f"f{i}", "every 10s", kind="noop", options={"fail": True}, controls=retried)
        for i in range(3)
    ]
    engine, batch = ticked_batch(db, clock, *specs)
    outcomes = work.execute_batch(engine, batch, "w", threads=2)
    assert [o.status for o in outcomes] == ["FAILED"] * 3
    assert [(r["status"], r["attempt"]) for r in rows(engine)] == [("STARTING", 1)] * 3
    with db.connect() as conn:
        counted = conn.exec_driver_sql("SELECT sum(count) FROM fire_lags").scalar_one()
    assert counted == 3


def test_a_run_whose_job_is_locked_elsewhere_is_claimed_after_the_others(pg_url: str, clock: Clock):
    """A batch's run whose job another transaction holds (a tick, the watchdog) is not
    waited for by the claim that records the others: it is claimed after (a claim does
    not wait on a job), and its call is the caller's to make."""
    db = make_engine(pg_url)
    engine, batch = ticked_batch(db, clock, *(make(name=name) for name in "ab"))
    a, b = job(engine, "p/a").id, job(engine, "p/b").id
    with db.begin() as conn:
        conn.execute(select(jobs.c.id).where(jobs.c.id == b).with_for_update())
        calls, answered = engine.attempts.claim_many(
            batch, "w", lambda call: work.make_call(engine.invokers.get(call.kind), call)
        )
    assert sorted(c.job_id for c in calls) == [a, b]
    assert [c.job_id for c in calls if c.invocation_id in answered] == [a]
    assert [(r["job_id"], r["status"], r["worker"]) for r in rows(engine)] == [
        (a, "SUCCEEDED", "w"),
        (b, "RUNNING", "w"),
    ]
    db.dispose()


def test_outcomes_of_a_group_whose_writing_raised_are_recorded_alone(
    db: sqlalchemy.Engine, clock: Clock
):
    """A group that raises after its commit (sending its messages, say) or before it:
    what it did not record is recorded one by one, and every lease is let go."""
    port = RecordingPort()
    engine = CountingEngine(db, port, default_invokers(), grace=GRACE, clock=clock, batch=100)
    apply(engine, *(make(name=name) for name in "ab"))
    calls = running(engine, port, clock)

    def broken(runs: Any, group: list[Report]) -> None:
        raise RuntimeError("the broker went away")

    leases = [
        engine.leases.hold(Lease(c.invocation_id, c.attempt, c.lease, job_id=c.job_id))
        for c in calls
    ]
    engine.runs.together._write = finish_together_once(broken)
    assert engine.runs.report_all(leases, [OK] * 2) == [True, True]
    assert engine.leases._held == set()
    assert [r["status"] for r in rows(engine)] == ["SUCCEEDED"] * 2


def finish_together_once(first: Any) -> Any:
    """A group writer that calls ``first`` once, then writes as groups do."""
    calls = []

    def write(runs: Any, group: list[Report]) -> None:
        calls.append(group)
        if len(calls) == 1:
            first(runs, group)
        else:
            finish_together(runs, group)

    return write
