"""Every run is accounted for on its own job (issue 15, item 1).

SQLite's ``INTEGER PRIMARY KEY`` hands the id of a deleted last row out again. A
``celery`` run of a job deleted while its task still ran then had its task id, its
heartbeats and its outcome matched to the next job's run that got the same ids: its
exception was recorded there, that run was retried while its first task still ran, and
its task body ran twice at once. Ids that messages, task ids and outcomes name are never
handed out again, on either backend, and an outcome must also name the job of its run.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import sqlalchemy
from celery import Celery
from celery.app.trace import build_tracer
from sqlalchemy import select

from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.invokers import SUCCEEDED, Call, Outcome, default_invokers, filed_from
from cronchain.scheduler.invokers import celery as celery_kind
from cronchain.scheduler.invokers.call import ERROR_LIMIT, bounded_error
from cronchain.scheduler.settings import Settings
from cronchain.scheduler.spec.jobspec import JobSpec
from cronchain.scheduler.storage import run_store
from cronchain.scheduler.storage.models import invocations, jobs
from cronchain.scheduler.workers import hooks, runtime, work
from cronchain.scheduler.workers.port import CeleryPort
from tests.support.engine import Clock, RecordingPort, SendingApp
from tests.support.wait import wait_until

pytestmark = pytest.mark.postgres
REDIS = "redis://127.0.0.1:6379/0"  # the broker the fake apps name: its priorities


@dataclass
class CeleryWire(RecordingPort):
    """A port that sends ``celery`` attempts through cronchain's own ``send_task`` and
    keeps each message (task name, options, headers) as the broker would."""

    messages: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    conf: SimpleNamespace = field(default_factory=lambda: SimpleNamespace(broker_url=REDIS))

    def run(self, call: Call) -> None:
        super().run(call)
        if call.kind == "celery":
            celery_kind.send_task(self, call)  # type: ignore[arg-type]  # self is the app

    def send_task(self, name: str, **options: Any) -> None:
        self.messages.append((name, options))


@dataclass
class Bodies:
    """What the user's task bodies did: each start, and how many of each job's ran at
    once at most. A body waits for its job's gate before it ends."""

    started: list[tuple[str, Any]] = field(default_factory=list)
    running: Counter[str] = field(default_factory=Counter)
    most: Counter[str] = field(default_factory=Counter)
    gates: dict[str, threading.Event] = field(default_factory=dict)
    heartbeats: list[bool] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def gate(self, name: str) -> threading.Event:
        with self.lock:
            return self.gates.setdefault(name, threading.Event())


def until(condition: Callable[[], Any], what: str) -> None:
    """In-process threads: asked often, so that the test waits no longer than they do."""
    wait_until(condition, 10, what, every=0.01)


# The user's worker: an app with cronchain's hooks installed, and one task whose body
# records itself in the running test's ``Bodies``. One for the module: Celery keeps one
# callable per task name for the whole process.
APP = Celery("ids-test", set_as_current=False)
hooks.install(APP)
BODIES: list[Bodies] = []


@APP.task(name="ids.body", bind=True)
def body(self: Any, name: str) -> None:
    bodies = BODIES[-1]
    with bodies.lock:
        bodies.started.append((name, getattr(self.request, celery_kind.HEADER, None)))
        bodies.running[name] += 1
        bodies.most[name] = max(bodies.most[name], bodies.running[name])
    try:
        bodies.gate(name).wait(10)
        if name == "x/a":  # the deleted job's task: it goes on, then fails
            bodies.heartbeats.append(hooks.heartbeat("x/a is still going"))
            raise RuntimeError("x/a failed late")
    finally:
        with bodies.lock:
            bodies.running[name] -= 1


@pytest.fixture
def bodies() -> Iterator[Bodies]:
    BODIES.append(Bodies())
    yield BODIES[-1]
    for gate in BODIES.pop().gates.values():
        gate.set()


class Deliveries:
    """The user's worker: each message the wire carried is run on a thread of its own,
    through Celery's tracer (so the hooks claim, heartbeat and report as on a worker);
    start messages whose time has come are handed to the engine."""

    def __init__(self, engine: Engine, port: CeleryWire, app: Celery, clock: Clock):
        self.engine, self.port, self.app, self.clock = engine, port, app, clock
        self.threads: dict[str, threading.Thread] = {}  # by task id: the last delivery
        self.delivered = 0

    def pump(self) -> None:
        for message in list(self.port.start_messages):
            invocation_id, attempt, eta = message
            if eta is None or eta <= self.clock.now:
                self.port.start_messages.remove(message)
                self.engine.attempts.start_invocation(invocation_id, attempt)
        while self.delivered < len(self.port.messages):
            name, options = self.port.messages[self.delivered]
            self.delivered += 1
            self._run(name, options)

    def _run(self, name: str, options: dict[str, Any]) -> None:
        task = self.app.tasks[name]
        request = {"id": options["task_id"], "task": name, "hostname": "user@test"}
        request |= options["headers"]  # a worker reads custom headers off the request
        tracer = build_tracer(name, task, eager=True, propagate=False, app=self.app)
        args = (options["task_id"], options["args"], options["kwargs"], request)
        thread = threading.Thread(target=tracer, args=args, daemon=True)
        thread.start()
        self.threads[options["task_id"]] = thread

    def join(self, task_id: str | None = None) -> None:
        """Wait until a task (or every task) has ended and its outcome is reported: the
        hook reports it before the tracer returns."""
        for thread in [self.threads[task_id]] if task_id else self.threads.values():
            thread.join(timeout=15)
            assert not thread.is_alive()


def celery_job(project: str, name: str, **controls: Any) -> JobSpec:
    options = {"task": "ids.body", "queue": "user", "args": [f"{project}/{name}"]}
    return JobSpec(project, name, "triggered", kind="celery", options=options, controls=controls)


def start_due(engine: Engine, port: RecordingPort) -> None:
    """Deliver the start messages sent so far (the control path's start_invocation)."""
    for invocation_id, attempt, _eta in port.start_messages:
        engine.attempts.start_invocation(invocation_id, attempt)
    port.start_messages.clear()


def every_run(db: sqlalchemy.Engine) -> list[dict[str, Any]]:
    query = (
        select(invocations, (jobs.c.project + "/" + jobs.c.name).label("job"))
        .join(jobs, jobs.c.id == invocations.c.job_id)
        .order_by(invocations.c.id)
    )
    with db.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(query)]


def test_a_late_outcome_of_a_deleted_job_lands_on_no_other_run(
    db: sqlalchemy.Engine,
    clock: Clock,
    bodies: Bodies,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
):
    """``x/a``'s task is claimed and running when ``apply --prune`` deletes ``x/a``; then
    a job takes its place and runs are triggered. ``x/a``'s heartbeat and its exception
    reach no other run: each other run's attempt 1 runs once and succeeds, and no body
    runs twice."""
    caplog.set_level(logging.INFO, logger="cronchain")
    port = CeleryWire()
    engine = Engine(
        db, port, default_invokers(), grace=timedelta(seconds=15), clock=clock, rand=lambda: 0.5
    )
    settings = Settings(str(db.url), "memory://", Path("."), 1.0)
    monkeypatch.setattr(runtime, "_current", (os.getpid(), runtime.Runtime(settings, engine)))
    worker = Deliveries(engine, port, APP, clock)
    api = Scheduler(engine)
    retried = {"retries": {"max_attempts": 2, "backoff": "1s"}}
    api.apply([celery_job("y", "b", **retried)], project="y")
    api.apply([celery_job("x", "a")], project="x")  # the last job: SQLite's max id
    deleted = api.trigger("x/a")["invocation"]
    worker.pump()
    until(lambda: [n for n, _ in bodies.started] == ["x/a"], "x/a's task body to start")

    api.apply([], project="x", prune=True)  # x/a and its run are deleted
    api.apply([celery_job("x", "c", **retried)], project="x")
    for job in ("x/c", "y/b"):
        api.trigger(job)
    worker.pump()
    until(lambda: len(bodies.started) == 3, "the new runs' task bodies to start")

    bodies.gate("x/a").set()  # x/a's task goes on: a heartbeat, then its exception
    worker.join(f"cronchain-{deleted}-1")
    clock.advance(5)  # past any retry's backoff
    worker.pump()
    bodies.gate("x/c").set()
    bodies.gate("y/b").set()
    until(lambda: not bodies.running["x/c"] and not bodies.running["y/b"], "the bodies to end")
    worker.pump()
    worker.join()

    assert bodies.heartbeats == [False]  # x/a's run is gone: its task is told to stop
    runs = every_run(db)
    for run in runs:
        text = f"{run['error']} {run['attempts']} {run['log']}"
        assert "x/a" not in text, f"x/a's report recorded on {run['job']}'s run {run['id']}"
    assert [(r["job"], r["status"], r["attempt"]) for r in runs] == [
        ("x/c", "SUCCEEDED", 1),
        ("y/b", "SUCCEEDED", 1),
    ]
    assert all(r["id"] > deleted for r in runs)  # no id handed out again
    assert sorted(n for n, _ in bodies.started) == ["x/a", "x/c", "y/b"]  # each body once
    assert max(bodies.most.values()) == 1  # and none twice at once
    refused = [r.getMessage() for r in caplog.records if f"invocation {deleted} " in r.getMessage()]
    assert any("ignored" in line or "refused" in line for line in refused), refused


def test_an_id_is_never_handed_out_again(db: sqlalchemy.Engine, clock: Clock):
    """Delete the last job with its last run, then make new ones: none gets an old id
    (SQLite's INTEGER PRIMARY KEY without AUTOINCREMENT gave both out again)."""
    engine = Engine(
        db, RecordingPort(), default_invokers(), grace=timedelta(seconds=15), clock=clock
    )
    api = Scheduler(engine)
    api.apply([celery_job("x", "a")], project="x")
    first = api.trigger("x/a")["invocation"]
    [old_job] = [r["job_id"] for r in every_run(db)]
    api.apply([], project="x", prune=True)
    api.apply([celery_job("x", "a")], project="x")  # the same name again
    again = api.trigger("x/a")["invocation"]
    [run] = every_run(db)
    assert run["id"] == again and again > first
    assert run["job_id"] > old_job


def sent_run(db: sqlalchemy.Engine, clock: Clock) -> tuple[Engine, CeleryWire, Call, int]:
    """A celery attempt of ``p/a``, sent and not claimed yet, and another job's id."""
    port = CeleryWire()
    engine = Engine(db, port, default_invokers(), grace=timedelta(seconds=15), clock=clock)
    api = Scheduler(engine)
    api.apply([celery_job("p", "a"), celery_job("p", "b")], project="p")
    api.trigger("p/a")
    start_due(engine, port)
    [call] = port.runs
    with db.connect() as conn:
        other = conn.execute(select(jobs.c.id).where(jobs.c.name == "b")).scalar_one()
    return engine, port, call, other


def test_a_claim_heartbeat_or_outcome_naming_another_job_is_refused(
    db: sqlalchemy.Engine, clock: Clock, caplog: pytest.LogCaptureFixture
):
    """Whatever the ids, a report is recorded only on a run of the job it names: one
    that names another job's run is refused and logged, and the run is left as it was."""
    engine, _port, call, other = sent_run(db, clock)
    inv, attempt = call.invocation_id, call.attempt
    assert call.job_id is not None and call.job_id != other
    assert engine.attempts.claim(inv, attempt, "w@other", job_id=other) is None
    assert engine.attempts.claim(inv, attempt, "w@test", job_id=call.job_id) is not None
    with engine.db.begin() as conn:
        lease = clock.now + timedelta(seconds=60)
        assert not run_store.renew_lease(conn, inv, attempt, lease, job_id=other)
        assert run_store.renew_lease(conn, inv, attempt, lease, job_id=call.job_id)
    failed = Outcome.failed("RuntimeError: not mine", "error")
    assert engine.runs.finish_invocation(inv, failed, attempt=attempt, job_id=other) is False
    [run] = every_run(db)
    assert (run["status"], run["attempt"], run["worker"], run["error"]) == (
        "RUNNING",
        1,
        "w@test",
        None,
    )
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refusals) == 2 and all(f"job {call.job_id}'s" in line for line in refusals)
    assert engine.runs.finish_invocation(inv, SUCCEEDED, attempt=attempt, job_id=call.job_id)
    assert every_run(db)[0]["status"] == "SUCCEEDED"


def test_a_work_path_attempt_naming_another_job_is_not_run(db: sqlalchemy.Engine, clock: Clock):
    port = RecordingPort()
    engine = Engine(db, port, default_invokers(), grace=timedelta(seconds=15), clock=clock)
    api = Scheduler(engine)
    api.apply([JobSpec("p", n, "triggered") for n in ("a", "b")], project="p")
    api.trigger("p/a")
    start_due(engine, port)
    [call] = port.runs
    with db.connect() as conn:
        other = conn.execute(select(jobs.c.id).where(jobs.c.name == "b")).scalar_one()
    assert work.execute(engine, call.invocation_id, call.attempt, "w", other) is None
    assert work.execute_batch(engine, [(call.invocation_id, call.attempt, other)], "w", 2) == []
    assert every_run(db)[0]["worker"] is None  # not claimed
    outcome = work.execute(engine, call.invocation_id, call.attempt, "w", call.job_id)
    assert outcome == SUCCEEDED and every_run(db)[0]["status"] == "SUCCEEDED"


def test_a_work_path_attempt_is_claimed_where_its_run_is_filed(db: sqlalchemy.Engine, clock: Clock):
    """Its messages say where the run is filed (a triggered run: when it was made), and
    the claim finds it there; a message from before they did finds it by its id. One
    naming another place finds nothing, as one naming another job."""
    port = RecordingPort()
    engine = Engine(db, port, default_invokers(), grace=timedelta(seconds=15), clock=clock)
    api = Scheduler(engine)
    api.apply([JobSpec("p", n, "triggered") for n in ("a", "b")], project="p")
    clock.advance(0.25)
    for name in ("a", "b"):
        api.trigger(f"p/{name}")
    start_due(engine, port)
    first, second = port.runs
    assert first.filed_at == every_run(db)[0]["filed_at"] == clock.now
    elsewhere = clock.now + timedelta(microseconds=1)
    assert work.execute(engine, *first.ref[:2], "w", first.job_id, elsewhere) is None
    assert work.execute_batch(engine, [(*first.ref[:3], elsewhere)], "w", 2) == []
    assert every_run(db)[0]["worker"] is None  # not claimed
    in_its_message = filed_from(first.filed_us)
    assert work.execute(engine, *first.ref[:2], "w", first.job_id, in_its_message) == SUCCEEDED
    assert work.execute(engine, *second.ref[:2], "w", second.job_id) == SUCCEEDED  # by id
    assert [r["status"] for r in every_run(db)] == ["SUCCEEDED", "SUCCEEDED"]


def test_a_claim_heartbeat_or_outcome_naming_another_place_is_refused(
    db: sqlalchemy.Engine, clock: Clock, caplog: pytest.LogCaptureFixture
):
    """As one naming another job: a report names where its run is filed too, and a run
    filed elsewhere is not the one it reports on."""
    engine, _port, call, _other = sent_run(db, clock)
    inv, attempt, job = call.invocation_id, call.attempt, call.job_id
    assert call.filed_at is not None
    elsewhere = call.filed_at - timedelta(days=40)  # another month's partition
    assert engine.attempts.claim(inv, attempt, "w@other", job_id=job, filed_at=elsewhere) is None
    assert engine.attempts.claim(inv, attempt, "w@test", job_id=job, filed_at=call.filed_at)
    with engine.db.begin() as conn:
        lease = clock.now + timedelta(seconds=60)
        assert not run_store.renew_lease(conn, inv, attempt, lease, job, elsewhere)
        assert run_store.renew_lease(conn, inv, attempt, lease, job, call.filed_at)
    failed = Outcome.failed("RuntimeError: not there", "error")
    finish = engine.runs.finish_invocation
    assert finish(inv, failed, attempt=attempt, job_id=job, filed_at=elsewhere) is False
    [run] = every_run(db)
    assert (run["status"], run["worker"], run["error"]) == ("RUNNING", "w@test", None)
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refusals) == 1 and f"filed at {elsewhere}" in refusals[0]
    assert finish(inv, SUCCEEDED, attempt=attempt, job_id=job, filed_at=call.filed_at)
    assert every_run(db)[0]["status"] == "SUCCEEDED"


def test_an_attempt_named_twice_in_a_batch_is_claimed_once(db: sqlalchemy.Engine, clock: Clock):
    """A batch's places are paired with its runs, whatever it repeats: each run is found
    where it is filed, and claimed once."""
    port = RecordingPort()
    engine = Engine(db, port, default_invokers(), grace=timedelta(seconds=15), clock=clock)
    api = Scheduler(engine)
    api.apply([JobSpec("p", n, "triggered") for n in ("a", "b", "c")], project="p")
    for name in ("a", "b", "c"):
        api.trigger(f"p/{name}")
        clock.advance(1)  # each filed at a second of its own
    start_due(engine, port)
    a, b, c = (call.ref for call in port.runs)
    outcomes = work.execute_batch(engine, [a, a, b, c], "w", 2)
    assert outcomes == [SUCCEEDED] * 3
    assert [r["status"] for r in every_run(db)] == ["SUCCEEDED"] * 3


def test_a_run_of_a_batch_filed_elsewhere_is_left_alone(db: sqlalchemy.Engine, clock: Clock):
    """A batch's runs are found by their ids and kept where their places agree: the run
    whose message names another place is not claimed, the others are; whether the claim
    locks the runs alone or, recording their outcomes at once, their jobs too."""
    port = RecordingPort()
    engine = Engine(db, port, default_invokers(), grace=timedelta(seconds=15), clock=clock)
    api = Scheduler(engine)
    names = ("a", "b", "c", "d", "e", "f")
    api.apply([JobSpec("p", n, "triggered") for n in names], project="p")
    for name in names:
        api.trigger(f"p/{name}")
    start_due(engine, port)
    refs = [call.ref for call in port.runs]
    for first, answer in ((0, None), (3, lambda call: SUCCEEDED)):
        one, two, three = refs[first : first + 3]
        elsewhere = (*two[:3], two[3] + timedelta(days=40))  # another month's partition
        calls, _ = engine.attempts.claim_many([one, elsewhere, three], "w", answer)
        assert {call.invocation_id for call in calls} == {one[0], three[0]}
    runs = {r["id"]: r for r in every_run(db)}
    assert [runs[ref[0]]["worker"] for ref in refs] == ["w", None, "w", "w", None, "w"]


def test_the_job_travels_with_every_attempt_sent():
    """In the celery task's header, and in the work path's messages."""
    app = SendingApp(REDIS)
    port = CeleryPort(app, "cronchain", "cronchain.work")  # type: ignore[arg-type]
    slot = datetime(2026, 3, 1, 12, 0, 10, 500_000, tzinfo=UTC)
    noop = Call(11, 2, "p/a", slot, {}, kind="noop", job_id=5, filed_at=slot)
    options = {"task": "t", "args": [], "kwargs": {}, "queue": "q"}
    task = Call(
        12, 1, "p/b", None, options, kind="celery", job_id=6, trigger_id="t9", filed_at=slot
    )
    port.run(noop)
    port.run(task)
    port.run_batch([noop])
    (run_name, run), (task_name, sent), (batch_name, batch) = app.sent
    filed = 1772366410_500_000  # where each run is filed: its row is found there
    assert (run_name, run["args"]) == ("cronchain.run", (11, 2, 5, filed))
    assert (task_name, sent["task_id"]) == ("t", "cronchain-12-1")
    assert sent["headers"]["cronchain"] | {"lease": None} == {
        "invocation": 12,
        "attempt": 1,
        "job": 6,
        "filed": filed,
        "key": "cronchain/p/b/trigger-t9",  # the run's, which no other run has (Call.key)
        "lease": None,
    }
    assert (batch_name, batch["args"]) == ("cronchain.run_batch", ([[11, 2, 5, filed]],))


@pytest.mark.parametrize(
    "task, args",
    [
        ("run", (1, 1, "5")),
        ("run", (1, 1, True)),
        ("run", (1, 1, 5, "2026-03-01")),
        ("run", (1, 1, 5, 10**20)),  # no date is there
        ("run_batch", ([[1, 1, "5"]],)),
        ("run_batch", ([[1, 1, 5, 1.5]],)),
        ("run_batch", ([[1, 1, 5, 6, 7]],)),
    ],
)
def test_a_malformed_job_or_place_in_a_work_message_is_dropped(
    task: str, args: tuple[Any, ...], caplog: pytest.LogCaptureFixture
):
    from cronchain.tasks import chain

    getattr(chain, task).run(*args)  # dropped before any database is reached
    assert "malformed" in caplog.text


# --- the error an attempt records is bounded (issue 15, item 7) -------------------------


def test_bounded_error_keeps_head_and_tail_and_says_what_was_cut():
    assert bounded_error(None) is None
    assert bounded_error("x" * ERROR_LIMIT) == "x" * ERROR_LIMIT
    text = "HEAD" + "m" * 200_000 + "TAIL"
    cut = bounded_error(text)
    assert cut is not None and len(cut) <= ERROR_LIMIT
    assert cut.startswith("HEAD") and cut.endswith("TAIL")
    kept = len(cut) - len(re.search(r"\n\[\.\.\. \d+ characters cut \.\.\.\]\n", cut)[0])
    assert f"[... {len(text) - kept} characters cut ...]" in cut


def test_a_200_kb_exception_is_recorded_bounded(db: sqlalchemy.Engine, clock: Clock):
    """At the one place outcomes are recorded, so that every kind's error is bounded:
    the error column, each earlier attempt's, the debug log, and what ``history
    --invocation`` shows."""
    port = CeleryWire()
    engine = Engine(
        db, port, default_invokers(), grace=timedelta(seconds=15), clock=clock, rand=lambda: 0.5
    )
    api = Scheduler(engine)
    retried = {"retries": {"max_attempts": 2, "backoff": "1s"}}
    api.apply([celery_job("p", "a", **retried)], project="p")
    inv = api.trigger("p/a")["invocation"]
    huge = "RuntimeError: " + "".join(f"line {i}\n" for i in range(25_000)) + "the end"
    assert len(huge) > 200_000
    for attempt in (1, 2):
        start_due(engine, port)
        assert engine.attempts.claim(inv, attempt, "w") is not None
        engine.runs.finish_invocation(inv, Outcome.failed(huge, "error"), attempt=attempt)
        clock.advance(5)
    shown = api.invocation(inv)
    assert (shown["status"], shown["attempt"]) == ("FAILED", 2)
    for error in (shown["error"], shown["attempts"][0]["error"]):
        assert len(error) <= ERROR_LIMIT
        assert error.startswith("RuntimeError: line 0\n") and error.endswith("the end")
        assert "characters cut ...]" in error
    assert len(shown["log"]) <= 16 * 1024
