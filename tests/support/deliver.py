"""Carrying what a :class:`~tests.support.engine.RecordingPort` recorded through the engine,
as the workers that take those messages would. Each says which messages it delivers."""

from __future__ import annotations

import contextlib
from typing import Any

from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.workers import gatecheck
from tests.support.engine import Clock, RecordingPort, WorkerDied
from tests.support.rows import rows


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
    """The ticks sent so far, and nothing else: the starts they send stay queued."""
    ticks = list(port.ticks)
    port.ticks.clear()
    for job_id, nonce, _eta in ticks:
        engine.tick(job_id, nonce)


def deliver_ticks_and_starts(engine: Engine, port: RecordingPort) -> None:
    """The ticks sent so far, then the starts they sent (their runs are sent on)."""
    ticks, port.ticks[:] = list(port.ticks), []
    for job_id, nonce, _eta in ticks:
        engine.tick(job_id, nonce)
    starts, port.starts[:] = list(port.starts), []
    for invocation_id in starts:
        engine.attempts.start_invocation(invocation_id)


def deliver_starts(engine: Engine, port: RecordingPort) -> None:
    """Deliver the start messages (first attempts, any ETA), then the runs they sent to
    the work path."""
    starts = list(port.starts)
    port.starts.clear()
    for invocation_id in starts:
        engine.attempts.start_invocation(invocation_id)
    deliver_runs(engine, port)


def deliver(engine: Engine, port: RecordingPort, clock: Clock | None = None) -> int:
    """Deliver the start messages whose ETA has come (all of them without ``clock``), with
    their attempts, then the runs sent to the work path; returns how many starts."""
    due = [m for m in port.start_messages if clock is None or m[2] is None or m[2] <= clock.now]
    for m in due:
        port.start_messages.remove(m)
        engine.attempts.start_invocation(m[0], m[1])
    port.starts.clear()
    deliver_runs(engine, port)
    return len(due)


def settle(engine: Engine, port: RecordingPort) -> None:
    """Carry every start and run through with :func:`deliver`, as workers would, until
    none is left (ticks stay queued)."""
    while port.start_messages or port.runs:
        deliver(engine, port)


def run_now(engine: Engine, port: RecordingPort, name: str) -> None:
    """Trigger ``p/NAME`` and :func:`settle`."""
    Scheduler(engine).trigger(f"p/{name}")
    settle(engine, port)


def claim_tasks(engine: Engine, port: RecordingPort) -> None:
    """What the user's worker does before a ``celery`` attempt's task body runs."""
    for call in port.runs:
        assert engine.attempts.claim(call.invocation_id, call.attempt, "celery@test") is not None
    port.runs.clear()


def sent(port: RecordingPort) -> list[tuple[int, int]]:
    """The (job id, nonce) of every tick sent so far; clears everything the port kept."""
    ticks = [(job_id, nonce) for job_id, nonce, _ in port.ticks]
    port.clear()
    return ticks


def ask_due(engine: Engine, port: RecordingPort, clock: Clock, app: Any = None) -> int:
    """Deliver the gate checks whose ETA has come, as the work path does."""
    due = [g for g in port.gates if g[4] is None or g[4] <= clock.now]
    for g in due:
        port.gates.remove(g)
        gatecheck.check(engine, app, *g[:4])
    return len(due)


def started_celery_run(engine: Engine, port: RecordingPort, name: str = "c") -> dict[str, Any]:
    """A triggered run of ``p/NAME``, a ``celery`` job, claimed as the hooks claim it."""
    Scheduler(engine).trigger(f"p/{name}")
    deliver(engine, port)
    [run] = rows(engine, name)
    assert engine.attempts.claim(run["id"], 1, "celery@test") is not None
    return run
