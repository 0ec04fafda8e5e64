"""The engine hosts the job machine inside database transactions.

Every step has the same shape: lock the row, feed the event to the machine, write what
changed, commit, and only then send messages. A crash between the commit and the send
loses at most a message; the ``watchdog_at`` (job) and ``deadline`` (invocation) columns
written in the same commit are the durable promise that the watchdog keeps.

Locks are always taken job first, then its invocations, so that two steps of one job
never wait on each other in opposite orders. What a step's actions write is in
:mod:`scheduler.core.actions`; an attempt's beginning and claim in
:mod:`scheduler.core.attempts`; its end (outcomes, retries, abort) in
:mod:`scheduler.core.runs`.
"""

from __future__ import annotations

import logging
import random
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy.exc
from sqlalchemy import Connection
from sqlalchemy import Engine as Database

from cronchain.scheduler.core import actions, admission, tick_batch
from cronchain.scheduler.core.attempts import Attempts
from cronchain.scheduler.core.effects import (
    InProcess,
    Message,
    Port,
    Stepped,
    send,
)
from cronchain.scheduler.core.host import Plugins
from cronchain.scheduler.core.leases import Leases
from cronchain.scheduler.core.rechecks import Rechecks, Work
from cronchain.scheduler.core.runs import Runs
from cronchain.scheduler.core.stepping import Stepper, random_nonce
from cronchain.scheduler.errors import TransientError
from cronchain.scheduler.invokers import Invoker
from cronchain.scheduler.settings import ETA_HORIZON, TICK_BATCH, TICK_SLACK
from cronchain.scheduler.spec.jobspec import JobSpec
from cronchain.scheduler.storage import job_store, revokes, run_store
from cronchain.scheduler.storage.db import unreachable, write_transaction
from cronchain.scheduler.storage.rows import InvocationRow, JobRow
from cronchain.statemachine import Event, Tick, TickLater, Trigger

log = logging.getLogger("cronchain.engine")


def utcnow() -> datetime:
    return datetime.now(UTC)


class Core:
    """Feeds events to job machines and records runs; names no feature: ``plugins``
    are the features it hosts (``scheduler.core.host``; ``scheduler.engine.Engine`` is the
    core with cronchain's own). Build one per process; it is thread-safe. ``invokers``
    are the kinds whose calls this process makes if it serves the work path
    (``scheduler.workers.work``).

    ``clock`` and ``rand`` are the only seams: tests pass fixed ones and drive every step."""

    def __init__(
        self,
        db: Database,
        port: Port,
        invokers: dict[str, Invoker],
        *,
        plugins: Plugins,
        grace: timedelta,
        horizon: timedelta = ETA_HORIZON,
        batch: int = TICK_BATCH,
        slack: timedelta = TICK_SLACK,
        clock: Callable[[], datetime] = utcnow,
        nonces: Callable[[], int] = random_nonce,
        rand: Callable[[], float] = random.random,
        background_rechecks: bool = False,
    ):
        self.db = db
        self.plugins = plugins
        self.port = port
        self.invokers = invokers
        # How a job's machine is stepped: the grace, horizon, slack and nonces are the
        # stepper's alone (the properties below read two of them), so that each has
        # one value.
        self.stepper = Stepper(grace, horizon, slack, nonces)
        self.batch = batch
        self.clock = clock
        self.rand = rand
        self.leases = Leases(db, clock)
        self.attempts = Attempts(self)
        self.runs = Runs(self)
        # A worker does work on jobs that may wait (``soon``: looking again at waiting
        # runs) in a thread (``scheduler.core.rechecks``); a command, which exits when it is
        # done, and the tests, which drive every step, do it before ``send`` returns.
        self.rechecks = Rechecks(self) if background_rechecks else None

    @property
    def grace(self) -> timedelta:
        """How long a step may take to arrive before the watchdog repeats it."""
        return self.stepper.grace

    @property
    def repair_grace(self) -> timedelta:
        return self.stepper.repair_grace

    @property
    def horizon(self) -> timedelta:
        return self.stepper.horizon

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A write transaction; database outages surface as ``TransientError``."""
        try:
            with write_transaction(self.db) as conn:
                yield conn
        except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError) as err:
            what = "unavailable" if unreachable(err) else "transaction failed"  # a deadlock
            raise TransientError(f"database {what}: {err.orig or err}") from err
        except sqlalchemy.exc.TimeoutError as err:  # every pooled connection is busy
            raise TransientError(f"no database connection free: {err}") from err

    def lock(
        self,
        conn: Connection,
        invocation_id: int,
        job_id: int | None = None,
        filed_at: datetime | None = None,
    ) -> tuple[InvocationRow, JobRow] | None:
        """Lock an invocation and its job, job first; None if there is none, or if it is
        not ``job_id``'s (nor filed at ``filed_at``). A caller that knows the job saves
        the lookup (the hot path does: the tick knows its job, the start passes it on),
        and one that knows where the run is filed, a probe of each month of history."""
        if job_id is None:
            job_id = run_store.invocation_job(conn, invocation_id)
        if job_id is None:
            return None
        return run_store.lock_run(conn, job_id, invocation_id, filed_at)

    # --- the chain ---------------------------------------------------------------------

    def tick(self, job_id: int, nonce: int, *, start_here: bool = False) -> None:
        """Feed a tick to its job. With ``start_here`` (as the worker's task does), a run
        it makes due is begun in the tick's transaction, rather than by a start message."""
        self.tick_many([(job_id, nonce)], start_here=start_here)

    def tick_many(self, ticks: Sequence[tuple[int, int]], *, start_here: bool = False) -> None:
        """Feed each tick to its job, then send what they all asked for together: the
        next ticks of jobs that share an instant travel in one message again.

        The ticks are fed in one transaction (``scheduler.core.tick_batch``), a lone
        tick as a herd's: one path. If that fails for any reason but the database's
        absence (a row no statement expected, a bug one job's step meets), nothing of
        it was written: each tick is fed again in a transaction of its own, through
        ``Core.feed`` (the path of every other event), so that the job at fault fails
        alone and is repaired by the watchdog, the others fire, and a fault of the
        batch's own code stops no job. A lone tick that fails there too is raised.

        With ``start_here``, a run that is due at once is begun in its tick's own
        transaction, and its attempt sent straight to the worker that will claim it: no
        start message, no second task. The tick never waits for the run."""
        if not ticks:
            return
        try:
            with self.transaction() as conn:
                outgoing = tick_batch.feed_ticks(self, conn, ticks, start_here=start_here)
        except TransientError:
            raise  # nothing committed: Celery retries the whole batch
        except Exception:
            if len(ticks) == 1:
                log.exception("the tick of job %s failed; feeding it alone", ticks[0][0])
            else:
                log.exception("a batch of %s ticks failed; feeding them one by one", len(ticks))
            self._tick_each(ticks, start_here)
        else:
            self.send(outgoing)

    def _tick_each(self, ticks: Sequence[tuple[int, int]], start_here: bool) -> None:
        """One transaction per tick, through ``feed``. A job whose step fails is logged
        and left to the watchdog; if the database fails part way, what was committed is
        still sent before the error is raised, and a retry of the whole batch finds the
        committed ticks' nonces stale and ignores them."""
        outgoing: list[Message] = []
        try:
            for job_id, nonce in ticks:
                try:
                    with self.transaction() as conn:
                        job = job_store.lock_job(conn, job_id)
                        if job is None:
                            log.warning("tick for job %s, which no longer exists", job_id)
                            continue
                        fed = self.feed(conn, job, Tick(nonce), self.clock(), start_here=start_here)
                except TransientError:
                    raise
                except Exception:
                    if len(ticks) == 1:
                        raise
                    log.exception("tick of job %s failed; the watchdog will repeat it", job_id)
                    continue
                outgoing += fed.messages  # committed
        finally:
            self.send(outgoing)

    # --- commands ----------------------------------------------------------------------

    def command(self, ref: str, event: Event, **flags: Any) -> Stepped:
        """Feed a user's command (pause, resume, trigger, ...) to the job named ``ref``."""
        with self.transaction() as conn:
            job = job_store.lock_job_named(conn, ref)
            fed = self.feed(conn, job, event, self.clock(), **flags)
        self.send(fed.messages)
        return fed

    def trigger(self, ref: str, trigger_id: str) -> dict[str, Any]:
        """Run the job named ``ref`` now, under its overlap policy. Returns the row the
        trigger made, as its transaction commits it: STARTING (started), WAITING
        (buffered) or SKIPPED with its reason."""
        with self.transaction() as conn:
            job = job_store.lock_job_named(conn, ref)
            fed = self.feed(conn, job, Trigger(trigger_id), self.clock())
            made = run_store.invocation_of_trigger(conn, job.id, trigger_id)
        self.send(fed.messages)
        if made is None:  # every outcome of a trigger writes its row
            raise AssertionError(f"trigger {trigger_id} of {ref} left no invocation")
        return made

    # --- hosting the machine -----------------------------------------------------------

    def feed(
        self,
        conn: Connection,
        job: JobRow,
        event: Event,
        now: datetime,
        *,
        spec: JobSpec | None = None,
        start_here: bool = False,
        **flags: Any,
    ) -> Stepped:
        """Step the machine for ``job`` and write the result in ``conn``'s transaction.
        With ``start_here``, a run the step creates is created RUNNING and sent to its
        worker, rather than STARTING with a start message to send."""
        result = self.stepper.step(job, job.snapshot, event, now, spec)
        fed = Stepped(result.snapshot)
        if not result.changed and spec is None and not flags:
            return fed
        revision = spec.revision if spec else job.revision
        pending = deque(result.actions)
        while pending:  # a follow-up step's actions join the queue
            pending += actions.perform(
                self, conn, job, pending.popleft(), fed, now, revision, start_here
            )
        watchdog_at = self.stepper.settle_tick(job, event, fed)
        job_store.save_job(
            conn, job, fed.snapshot, watchdog_at=watchdog_at, now=now, spec=spec, **flags
        )
        return fed

    def feed_held(
        self, job: JobRow, event: Event, now: datetime, *, spec: JobSpec | None = None
    ) -> tuple[Stepped, datetime | None] | None:
        """The step ``feed`` takes and the watchdog deadline it saves, with nothing
        written, for a caller that saves many jobs at once (``apply``, through
        ``job_batch``). None for a step that asks for more than a tick (a run to start,
        buffer, abort or record): only ``feed`` carries that out."""
        result = self.stepper.step(job, job.snapshot, event, now, spec)
        if not all(isinstance(action, TickLater) for action in result.actions):
            return None
        tick = self.stepper.tick_message
        fed = Stepped(result.snapshot, [tick(job, a.when, a.nonce, now) for a in result.actions])
        return fed, self.stepper.settle_tick(job, event, fed)

    def go_on(
        self,
        conn: Connection,
        job: JobRow,
        inv: InvocationRow,
        columns: dict[str, Any],
        now: datetime,
        after: str | None,
    ) -> list[Message]:
        """Hand a locked run on through the admission chain from the hold ``after``
        (``admission.resume``)."""
        return admission.resume(self.plugins.holds, conn, job, inv, columns, now, self.grace, after)

    def soon(self, work: Work, job_ids: list[int]) -> None:
        """``work`` on ``job_ids``, in this process's thread for it, if it has one, else
        now (``scheduler.core.rechecks``)."""
        if self.rechecks is not None:
            self.rechecks.put(work, job_ids)
        else:
            work(self, job_ids)

    def send(self, messages: list[Message]) -> None:
        """Send after commit. A failed send is logged, not raised: the state is committed
        and the watchdog repeats the step when its deadline lapses (a revoke: when its
        row in ``revokes`` is due), so a revoke that was sent is forgotten."""
        here: dict[type, list[InProcess]] = {}
        for message in messages:
            if isinstance(message, InProcess):
                here.setdefault(type(message), []).append(message)
        revoked = send(self.port, [m for m in messages if not isinstance(m, InProcess)], self.batch)
        if revoked:
            try:
                with self.transaction() as conn:
                    revokes.forget(conn, revoked)
            except TransientError as err:  # sent again when due: a second one is harmless
                log.warning("could not forget the revokes sent of %s: %s", revoked, err)
        for kind, these in here.items():  # each by the plug-in whose kind it is
            self.plugins.in_process[kind](self, these)
