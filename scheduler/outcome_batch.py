"""Outcomes that finish together, recorded in one transaction.

The runs of a herd finish together too: a work-path worker's threads report 20 no-op
outcomes within a millisecond. Recorded one per transaction, each paid a lock, two
updates and a commit. Here a process records outcomes as a group commit does: one
thread at a time writes, and takes every outcome that arrived while the previous write
was under way, so that a lone outcome waits for nothing and a herd's share a commit.

Each outcome is recorded as ``Runs.record_outcome`` records it alone, in the order of
its job: only the transaction and the locking statement are shared. If the group's
transaction fails for any reason but the database's absence, each outcome is recorded
again on its own, so that one bad row fails alone.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from scheduler.effects import Fed, Message
from scheduler.errors import TransientError
from scheduler.invokers import Outcome
from scheduler.storage import job_store, run_store
from scheduler.storage.rows import InvocationRow, JobRow

if TYPE_CHECKING:
    from scheduler.engine import Engine
    from scheduler.runs import Runs
    from statemachine import Event

log = logging.getLogger("cronchain.engine")


@dataclass(eq=False)
class Report:
    """An attempt's outcome, as its worker reports it."""

    invocation_id: int
    attempt: int
    outcome: Outcome
    job_id: int | None = None
    recorded: bool | None = None  # finish_invocation's answer, once written
    error: BaseException | None = None
    done: bool = False


class GroupCommit:
    """Where a process's threads hand their outcomes to be written together."""

    def __init__(self, runs: Runs) -> None:
        self.runs = runs
        self._changed = threading.Condition()
        self._waiting: list[Report] = []
        self._writing = False

    def finish(self, report: Report) -> bool:
        """Record ``report`` with whatever else is waiting; returns once it is written,
        as ``Runs.finish_invocation`` does, and raises what writing it raised."""
        group: list[Report] = []
        with self._changed:
            self._waiting.append(report)
            while not report.done and not group:
                if self._writing:
                    self._changed.wait()
                else:  # this thread writes every report waiting, its own among them
                    group, self._waiting, self._writing = self._waiting, [], True
        if group:
            try:
                finish_together(self.runs, group)
            finally:
                with self._changed:
                    for written in group:
                        written.done = True
                    self._writing = False
                    self._changed.notify_all()
        if report.error is not None:
            raise report.error
        return bool(report.recorded)


class HeldWrites:
    """The updates of a group's runs and jobs, held to be written by a statement per
    set of columns rather than one each. Anything that reads the rows (a run to start
    after a finish, a job triggered, a job finishing twice in one group) writes them
    first, so that every read sees what the one-outcome path would have written."""

    def __init__(self) -> None:
        self._runs: dict[frozenset[str], list[dict[str, Any]]] = {}
        self._jobs: list[dict[str, Any]] = []

    def update_run(self, invocation_id: int, **values: Any) -> None:
        self._runs.setdefault(frozenset(values), []).append(values | {"b_id": invocation_id})

    def feed(
        self, engine: Engine, conn: Connection, job: JobRow, event: Event, now: datetime
    ) -> Fed:
        """``Engine.feed``, with the job's save held if the step asks for nothing more."""
        result = engine.step_of(job, job.snapshot, event, now)
        if result.actions:
            self.write(conn)
            return engine.feed(conn, job, event, now)
        fed = Fed(result.snapshot)
        if result.changed:
            watchdog_at = engine.settle_tick(job, event, fed)
            values = job_store.saved_values(job, fed.snapshot, watchdog_at=watchdog_at, now=now)
            self._jobs.append(values | {"b_id": job.id, "b_generation": job.generation})
        return fed

    def write(self, conn: Connection) -> None:
        for rows in self._runs.values():
            run_store.update_invocations(conn, rows)
        job_store.save_jobs(conn, self._jobs)
        self._runs, self._jobs = {}, []


def finish_together(runs: Runs, reports: list[Report]) -> None:
    """Record ``reports`` in one transaction, setting each one's ``recorded`` or
    ``error``; a report the group cannot take (a stale attempt, another job's run) is
    left to ``finish_invocation``, which says why."""
    if len(reports) == 1:
        _alone(runs, reports)
        return
    messages: list[Message] = []
    try:
        with runs.engine.transaction() as conn:
            now = runs.engine.clock()
            locked = run_store.lock_runs(conn, [r.invocation_id for r in reports])
            held, odd, seen = HeldWrites(), [], set()
            for report in sorted(reports, key=lambda r: _order(locked.get(r.invocation_id))):
                found = locked.get(report.invocation_id)
                if found is None or not _current(report, *found):
                    odd.append(report)
                    continue
                inv, job = found
                if job.id in seen:  # an earlier outcome of the group saved it
                    held.write(conn)
                    job = job_store.lock_job(conn, job.id) or job
                seen.add(job.id)
                messages += runs.record_outcome(conn, inv, job, report.outcome, now, held).messages
                report.recorded = True
            held.write(conn)
    except TransientError as err:
        for report in reports:
            report.error, report.recorded = err, None
        return
    except Exception:
        log.exception("%s outcomes recorded together failed; one by one", len(reports))
        _alone(runs, reports)
        return
    runs.engine.send(messages)
    _alone(runs, odd)


def _order(found: tuple[InvocationRow, JobRow] | None) -> tuple[int, int]:
    """Job first, then run: the order the group's statement locked them in."""
    return (0, 0) if found is None else (found[1].id, found[0].id)


def _current(report: Report, inv: InvocationRow, job: JobRow) -> bool:
    """Whether the group may record ``report``: the attempt it names is the running one
    of the job it names. Anything else is the one-outcome path's to refuse and log."""
    return (
        (report.job_id is None or report.job_id == job.id)
        and inv.status == "RUNNING"
        and inv.attempt == report.attempt
    )


def _alone(runs: Runs, reports: list[Report]) -> None:
    for report in reports:
        try:
            report.recorded = runs.finish_invocation(
                report.invocation_id, report.outcome, attempt=report.attempt, job_id=report.job_id
            )
        except Exception as err:  # that outcome's own
            report.error = err
