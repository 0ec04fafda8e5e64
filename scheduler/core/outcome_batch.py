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
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import Connection

from cronchain.scheduler.core.effects import Message, Stepped
from cronchain.scheduler.errors import TransientError
from cronchain.scheduler.invokers import Outcome
from cronchain.scheduler.storage import job_store, run_store, statistics
from cronchain.scheduler.storage.rows import ConcurrentUpdate, InvocationRow, JobRow

if TYPE_CHECKING:
    from cronchain.scheduler.core.host import CoreHost
    from cronchain.scheduler.storage.rows import InvocationRow as Run
    from cronchain.statemachine import Event

log = logging.getLogger("cronchain.engine")


class Runs(Protocol):
    """What a group takes of ``scheduler.core.runs.Runs``, which holds it."""

    engine: CoreHost

    def record_outcome(
        self,
        conn: Connection,
        inv: Run,
        job: JobRow,
        outcome: Outcome,
        now: datetime,
        held: HeldWrites | None = None,
    ) -> Stepped: ...

    def reads(self, job: JobRow, inv: Run, outcome: Outcome) -> bool: ...

    def finish_invocation(
        self,
        invocation_id: int,
        outcome: Outcome,
        *,
        attempt: int | None = None,
        job_id: int | None = None,
        filed_at: datetime | None = None,
    ) -> bool: ...


@dataclass(eq=False)
class Report:
    """An attempt's outcome, as its worker reports it."""

    invocation_id: int
    attempt: int
    outcome: Outcome
    job_id: int | None = None
    filed_at: datetime | None = None  # where the run is filed (``Call``)
    recorded: bool | None = None  # True once the group's transaction committed it
    error: BaseException | None = None
    alone: bool = False  # not for the group: its own thread records it, as before
    done: bool = False


class GroupCommit:
    """Where a process's threads hand their outcomes to be written together."""

    def __init__(self, runs: Runs, write: Callable[[Runs, list[Report]], None] | None = None):
        self.runs = runs
        self._write = write or finish_together
        self._changed = threading.Condition()
        self._waiting: list[Report] = []
        self._writing = False

    def _write_group(self, group: list[Report]) -> None:
        try:
            self._write(self.runs, group)
        except BaseException as err:  # the others' outcomes are not lost with it
            for other in group:
                if other.recorded is None and other.error is None and not other.alone:
                    other.error = TransientError(f"the thread writing it failed: {err!r}")
            raise
        finally:
            with self._changed:
                for written in group:
                    written.done = True
                self._writing = False
                self._changed.notify_all()

    def finish_all(self, reports: list[Report]) -> None:
        """Write ``reports`` with whatever else is waiting, and return once they are
        written, each with its ``recorded``, ``error`` or ``alone`` set: the outcomes of
        one thread's batch, which it records together. A report not recorded is for the
        caller to record alone (``Runs.report_all``)."""
        group: list[Report] = []
        with self._changed:
            self._waiting.extend(reports)
            while not all(r.done for r in reports) and not group:
                if self._writing:
                    self._changed.wait()
                else:
                    group, self._waiting, self._writing = self._waiting, [], True
        if group:
            self._write_group(group)

    def finish(self, report: Report) -> bool:
        """Record ``report`` with whatever else is waiting; returns once it is written,
        as ``Runs.finish_invocation`` does, and raises what writing it raised. A report
        the group does not take is recorded by its own thread, so that a wait for its
        locks holds up no other thread's."""
        group: list[Report] = []
        with self._changed:
            self._waiting.append(report)
            while not report.done and not group:
                if self._writing:
                    self._changed.wait()
                else:  # this thread writes every report waiting, its own among them
                    group, self._waiting, self._writing = self._waiting, [], True
        if group:
            self._write_group(group)
        if report.alone:
            return self.runs.finish_invocation(
                report.invocation_id,
                report.outcome,
                attempt=report.attempt,
                job_id=report.job_id,
                filed_at=report.filed_at,
            )
        if isinstance(report.error, TransientError):  # one for each thread that raises it
            raise TransientError(str(report.error)) from report.error
        if report.error is not None:
            raise report.error
        return bool(report.recorded)


class HeldWrites:
    """The updates of a group's runs and jobs, held to be written by a statement per
    set of columns rather than one each. Anything that reads the rows (a run to start
    after a finish, a job finishing twice in one group) writes them first, so that every
    read sees what the one-outcome path would have written. Rows that another path of the
    same transaction would change behind the group's back are kept out of it: an end that
    a listener reads more for is recorded alone (``Runs.reads``)."""

    def __init__(self) -> None:
        # Each run's held update, by its set of columns; a second update of a run joins
        # its first (a claim and the end recorded with it: one new row version, not two).
        self._runs: dict[frozenset[str], dict[int, dict[str, Any]]] = {}
        self._columns: dict[int, frozenset[str]] = {}
        self._jobs: list[dict[str, Any]] = []
        # The group's successes of upstreams (``requires``) so far, where each is filed:
        # their runs' updates may still be held when a downstream is checked.
        self.fresh: dict[str, datetime] = {}

    def update_run(self, run: InvocationRow, **values: Any) -> None:
        earlier = self._columns.pop(run.id, None)
        row = (
            {"b_id": run.id, "b_filed": run.filed_at}
            if earlier is None
            else self._runs[earlier].pop(run.id)
        )
        row |= values
        self._columns[run.id] = key = frozenset(row)
        self._runs.setdefault(key, {})[run.id] = row

    def feed(
        self, engine: CoreHost, conn: Connection, job: JobRow, event: Event, now: datetime
    ) -> Stepped:
        """``Core.feed``, with the job's save held if the step asks for nothing more."""
        result = engine.stepper.step(job, job.snapshot, event, now)
        if result.actions:
            self.write(conn)
            return engine.feed(conn, job, event, now)
        fed = Stepped(result.snapshot)
        if result.changed:
            watchdog_at = engine.stepper.settle_tick(job, event, fed)
            values = job_store.saved_values(job, fed.snapshot, watchdog_at=watchdog_at, now=now)
            self._jobs.append(values | {"b_id": job.id, "b_generation": job.generation})
        return fed

    def write(self, conn: Connection) -> None:
        for rows in self._runs.values():
            if rows:
                run_store.update_invocations(conn, list(rows.values()))
        job_store.save_jobs(conn, self._jobs, copy=False)
        self._runs, self._columns, self._jobs = {}, {}, []


def finish_together(runs: Runs, reports: list[Report]) -> None:
    """Record ``reports`` in one transaction, setting each one's ``recorded`` or
    ``error``, or ``alone`` for one the group does not take: a run whose locks another
    transaction holds (skipped, not waited for), a stale attempt or another job's run
    (``finish_invocation`` says why), an end a listener reads or writes more for (a
    trigger would change rows the group has read: ``Runs.reads``). If the group fails
    for another reason than the database's absence, each is recorded alone."""
    messages: list[Message] = []
    recorded: list[Report] = []
    try:
        with runs.engine.transaction() as conn:
            now = runs.engine.clock()
            statistics.keyed(conn, len(reports))
            ids = [r.invocation_id for r in reports]
            locked = run_store.lock_runs(conn, ids, [r.filed_at for r in reports])
            held, seen = HeldWrites(), set()
            for report in sorted(reports, key=lambda r: _order(locked.get(r.invocation_id))):
                found = locked.get(report.invocation_id)
                if found is not None and found[1].id in seen:  # the group changed its job
                    held.write(conn)
                    found = run_store.lock_run(conn, found[1].id, found[0].id, found[0].filed_at)
                if (
                    found is None
                    or not _current(report, *found)
                    or runs.reads(found[1], found[0], report.outcome)
                ):
                    report.alone = True
                    continue
                inv, job = found
                seen.add(job.id)
                messages += runs.record_outcome(conn, inv, job, report.outcome, now, held).messages
                recorded.append(report)
            held.write(conn)
    except ConcurrentUpdate:  # a TransientError, but one that recording alone resolves
        log.warning("outcomes recorded together met a changed job; one by one")
        _all_alone(reports)
        return
    except TransientError as err:
        for report in reports:
            report.error = err
        return
    except Exception:
        log.exception("%s outcomes recorded together failed; one by one", len(reports))
        _all_alone(reports)
        return
    for report in recorded:
        report.recorded = True
    runs.engine.send(messages)


def _all_alone(reports: list[Report]) -> None:
    for report in reports:
        report.alone = True


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
