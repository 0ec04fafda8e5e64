"""The engine hosts the job machine inside database transactions.

Every step has the same shape: lock the row, feed the event to the machine, write what
changed, commit, and only then send messages. A crash between the commit and the send
loses at most a message; the ``watchdog_at`` (job) and ``deadline`` (invocation) columns
written in the same commit are the durable promise that the watchdog keeps.

Locks are always taken job first, then its invocations, so that two steps of one job
never wait on each other in opposite orders. The invocation life cycle (attempts,
outcomes, retries, abort) is in :mod:`scheduler.core.runs`.
"""

from __future__ import annotations

import logging
import random
import secrets
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from functools import lru_cache, partial
from typing import Any

import sqlalchemy.exc
from sqlalchemy import Connection
from sqlalchemy import Engine as Database

from cronchain.scheduler import debuglog
from cronchain.scheduler.core import admission, tick_batch
from cronchain.scheduler.core.effects import (
    InProcess,
    Message,
    Port,
    SendRun,
    SendStart,
    SendTick,
    Stepped,
    send,
)
from cronchain.scheduler.core.host import Admitting, Held, Plugins
from cronchain.scheduler.core.leases import Leases
from cronchain.scheduler.core.rechecks import Rechecks, Work
from cronchain.scheduler.core.runs import RUNNING, STARTING, WAITING, Runs
from cronchain.scheduler.errors import TransientError
from cronchain.scheduler.invokers import Invoker, Outcome
from cronchain.scheduler.settings import ETA_HORIZON, TICK_BATCH, TICK_SLACK
from cronchain.scheduler.spec.controls import controls_of
from cronchain.scheduler.spec.jobspec import JobSpec
from cronchain.scheduler.storage import job_store, revokes, run_store
from cronchain.scheduler.storage.db import unreachable, write_transaction
from cronchain.scheduler.storage.rows import InvocationRow, JobRow
from cronchain.scheduler.timing.eta import tick_eta
from cronchain.scheduler.timing.schedules import Schedule, stored_schedule
from cronchain.statemachine import (
    Abandon,
    AbortActive,
    Action,
    BufferInvocation,
    Event,
    InvocationStarted,
    InvocationStatus,
    JobSnapshot,
    RecordSkipped,
    Repair,
    StartBuffered,
    StartInvocation,
    Step,
    Tick,
    TickLater,
    Trigger,
    Unbuffer,
    step,
)

log = logging.getLogger("cronchain.engine")
S = InvocationStatus


def utcnow() -> datetime:
    return datetime.now(UTC)


def random_nonce() -> int:
    return secrets.randbits(62) + 1


def _is_tick(message: Message, nonce: int | None) -> bool:
    return isinstance(message, SendTick) and message.nonce == nonce


@lru_cache(maxsize=8192)
def schedule_of(text: str, timezone: str, days: str | None = None) -> Schedule:
    return stored_schedule(text, timezone, days)


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
        self.grace = grace
        self.horizon = horizon
        self.batch = batch
        self.slack = slack
        self.clock = clock
        self.nonces = nonces
        self.rand = rand
        self.leases = Leases(db, clock)
        self.runs = Runs(self)
        # A worker does work on jobs that may wait (``soon``: looking again at waiting
        # runs) in a thread (``scheduler.core.rechecks``); a command, which exits when it is
        # done, and the tests, which drive every step, do it before ``send`` returns.
        self.rechecks = Rechecks(self) if background_rechecks else None

    @property
    def repair_grace(self) -> timedelta:
        """How long a step the watchdog repaired may take: an interval more than any
        other (grace is half an interval). A mass repair (Redis flushed under 10,000
        jobs) sends thousands of ticks at once; if the next pass repaired the slowest of
        them again, each time with a new nonce and at the back of the queue, the queue
        would never drain."""
        return 3 * self.grace

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
        self, conn: Connection, invocation_id: int, job_id: int | None = None
    ) -> tuple[InvocationRow, JobRow] | None:
        """Lock an invocation and its job, job first; None if there is none, or if it is
        not ``job_id``'s. A caller that knows the job saves the lookup (the hot path does:
        the tick knows its job, the start passes it on)."""
        if job_id is None:
            job_id = run_store.invocation_job(conn, invocation_id)
        return None if job_id is None else run_store.lock_run(conn, job_id, invocation_id)

    # --- the chain ---------------------------------------------------------------------

    def tick(self, job_id: int, nonce: int, *, start_here: bool = False) -> None:
        """Feed a tick to its job. With ``start_here`` (as the worker's task does), a run
        it makes due is begun in the tick's transaction, rather than by a start message."""
        self.tick_many([(job_id, nonce)], start_here=start_here)

    def tick_many(self, ticks: Sequence[tuple[int, int]], *, start_here: bool = False) -> None:
        """Feed each tick to its job, then send what they all asked for together: the
        next ticks of jobs that share an instant travel in one message again.

        The ticks of a batch are fed in one transaction (``scheduler.core.tick_batch``). If
        that fails for any reason but the database's absence (a row no statement
        expected, a bug one job's step meets), nothing of it was written: the ticks
        are fed again one job per transaction, so that the job at fault fails alone
        and is repaired by the watchdog, and the others fire.

        With ``start_here``, a run that is due at once is begun in its tick's own
        transaction, and its attempt sent straight to the worker that will claim it: no
        start message, no second task. The tick never waits for the run."""
        if len(ticks) > 1:
            try:
                with self.transaction() as conn:
                    outgoing = tick_batch.feed_ticks(self, conn, ticks, start_here=start_here)
            except TransientError:
                raise  # nothing committed: Celery retries the whole batch
            except Exception:
                log.exception("a batch of %s ticks failed; feeding them one by one", len(ticks))
            else:
                self.send(outgoing)
                return
        self._tick_each(ticks, start_here)

    def _tick_each(self, ticks: Sequence[tuple[int, int]], start_here: bool) -> None:
        """One transaction per tick. A job whose step fails is logged and left to the
        watchdog; if the database fails part way, what was committed is still sent
        before the error is raised, and a retry of the whole batch finds the committed
        ticks' nonces stale and ignores them."""
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
        result = self._step(job, job.snapshot, event, now, self._schedule(job, spec))
        fed = Stepped(result.snapshot)
        if not result.changed and spec is None and not flags:
            return fed
        revision = spec.revision if spec else job.revision
        pending = deque(result.actions)
        while pending:  # a follow-up step's actions join the queue
            pending += self.perform(conn, job, pending.popleft(), fed, now, revision, start_here)
        watchdog_at = self.settle_tick(job, event, fed)
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
        result = self._step(job, job.snapshot, event, now, self._schedule(job, spec))
        if not all(isinstance(action, TickLater) for action in result.actions):
            return None
        fed = Stepped(
            result.snapshot, [self.tick_message(job, a.when, a.nonce, now) for a in result.actions]
        )
        return fed, self.settle_tick(job, event, fed)

    def settle_tick(self, job: JobRow, event: Event, fed: Stepped) -> datetime | None:
        """Keep the current nonce's tick alone (a follow-up may have replaced the tick)
        and return the watchdog deadline that goes with it."""
        tick = next((m for m in fed.messages if _is_tick(m, fed.snapshot.tick_nonce)), None)
        fed.messages = [m for m in fed.messages if not isinstance(m, SendTick) or m is tick]
        if fed.snapshot.tick_nonce is None:
            return None
        # A tick due in the past (a repair, a late slot) is sent to run now: its grace
        # counts from then, or the next sweep would repair it again.
        grace = self.repair_grace if isinstance(event, Repair) else self.grace
        return job.watchdog_at if tick is None else tick.eta + grace

    def _schedule(self, job: JobRow, spec: JobSpec | None) -> Schedule:
        declared = spec or job  # a new spec's schedule, or the job's own
        return schedule_of(declared.schedule, declared.timezone, declared.days)

    def tick_message(self, job: JobRow, when: datetime, nonce: int, now: datetime) -> SendTick:
        return SendTick(job.id, nonce, tick_eta(when, now, slack=self.slack, horizon=self.horizon))

    def perform(
        self,
        conn: Connection,
        job: JobRow,
        action: Any,
        fed: Stepped,
        now: datetime,
        revision: str,
        start_here: bool = False,
    ) -> list[Action]:
        """Carry out one of a step's actions in the step's transaction; returns the
        actions of the follow-up step it fed, if any, to be carried out in turn."""
        insert = partial(run_store.insert_invocation, conn, job.id, revision=revision, now=now)
        match action:
            case TickLater(when=when, nonce=nonce):
                fed.messages.append(self.tick_message(job, when, nonce, now))
            case StartInvocation(slot=slot, trigger_id=trigger_id):
                return self._start_new(conn, job, slot, trigger_id, fed, now, insert, start_here)
            case BufferInvocation(slot=slot, trigger_id=trigger_id):
                inv_id = insert(slot=slot, trigger_id=trigger_id, status=WAITING)
                if inv_id is None:
                    return self._follow_up(job, fed, Unbuffer(), now)
            case StartBuffered():
                return self._start_buffered(conn, job, fed, now)
            case AbortActive(reason=reason):
                fed.messages += self._abort_active(conn, job, reason, now)
            case RecordSkipped(slot=slot, reason=reason, trigger_id=trigger_id):
                inv_id = insert(
                    slot=slot, trigger_id=trigger_id, status=S.SKIPPED.value, reason=reason
                )
                if inv_id is not None:
                    fed.messages += self.runs.skipped(
                        conn, job, inv_id, slot, reason, now, trigger_id, revision
                    )
            case _:
                raise AssertionError(f"unknown action {action!r}")
        return []

    def _start_buffered(
        self, conn: Connection, job: JobRow, fed: Stepped, now: datetime
    ) -> list[Action]:
        """The run that waited longest for its turn has it: it goes through the
        admission chain, and starts or waits at the first hold that holds it."""
        waiting = next(iter(run_store.oldest_waiting(conn, job.id)), None)
        if waiting is None:
            log.error("job %s counted a waiting run it does not have", job.ref)
            return self._follow_up(job, fed, Abandon(), now)
        fed.snapshot.invocation_id = waiting.id
        messages = self.go_on(conn, job, waiting, {}, now, None)
        if any(isinstance(m, SendStart) and m.invocation_id == waiting.id for m in messages):
            fed.started = waiting.id
        fed.messages += messages
        return []

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

    def admit(
        self, conn: Connection, job: JobRow, reference: datetime, now: datetime
    ) -> Held | dict[str, Any]:
        """What the admission chain says of a new run of ``job`` filed at ``reference``
        (``admission.admit``): ``Held``, or the columns it starts with."""
        return admission.admit(self.plugins.holds, conn, Admitting(job, reference), now)

    def _start_new(
        self,
        conn: Connection,
        job: JobRow,
        slot: datetime | None,
        trigger_id: str | None,
        fed: Stepped,
        now: datetime,
        insert: Callable[..., int | None],
        start_here: bool,
    ) -> list[Action]:
        """Create the run a step started. Started here, it is written once, RUNNING and
        not yet claimed, and sent to its worker; else STARTING, for a start message to
        begin it. A run a hold of the admission chain holds is written WAITING for it:
        the machine counts it as started all the same."""
        said = self.admit(conn, job, slot or now, now)
        if isinstance(said, Held):
            values = said.columns
        elif start_here:
            values = self.runs.attempt_columns(job, 1, None, now) | said
        else:
            values = dict(status=STARTING, deadline=now + self.grace, **said)
        inv_id = insert(slot=slot, trigger_id=trigger_id, **values)
        if inv_id is None:  # that slot has its invocation already
            log.warning("job %s: slot %s already fired", job.ref, slot or trigger_id)
            return self._follow_up(job, fed, Abandon(), now)
        fed.snapshot.invocation_id = inv_id
        if isinstance(said, Held):
            fed.messages += said.then(inv_id)
            return []
        fed.started = inv_id
        if not start_here:
            fed.messages.append(SendStart(inv_id))
            return []
        fed.messages.append(SendRun(self.runs.call_of(job, inv_id, 1, slot)))
        return self._follow_up(job, fed, InvocationStarted(inv_id), now)

    def _follow_up(self, job: JobRow, fed: Stepped, event: Event, now: datetime) -> list[Action]:
        """Feed the snapshot being built an event that follows from the step's own writes
        (a row that could not be written, so the count is undone; a run begun here), and
        return that step's actions for the caller to carry out like any other."""
        schedule = schedule_of(job.schedule, job.timezone, job.days)
        result = self._step(job, fed.snapshot, event, now, schedule)
        fed.snapshot = result.snapshot
        return list(result.actions)

    def step_of(self, job: JobRow, snapshot: JobSnapshot, event: Event, now: datetime) -> Step:
        """One step of ``job``'s machine under its own schedule and policies, from
        ``snapshot``: what a caller that writes the step itself needs."""
        return self._step(job, snapshot, event, now, self._schedule(job, None))

    def _step(
        self, job: JobRow, snapshot: JobSnapshot, event: Event, now: datetime, schedule: Schedule
    ) -> Step:
        """One step of the machine under the job's policies."""
        controls = controls_of(job)
        return step(
            snapshot,
            event,
            now=now,
            schedule=schedule,
            nonce=self.nonces(),
            policy=controls.overlap,
            misfire=controls.misfire,
        )

    def _abort_active(
        self, conn: Connection, job: JobRow, reason: str, now: datetime
    ) -> list[Message]:
        """``cancel_other``: end the job's active invocations; the machine has already
        counted them out, so no event is fed for them."""
        messages: list[Message] = []
        ended = run_store.lock_started(conn, job.id)
        error = f"aborted: a newer run replaced it (overlap: {reason})"
        for inv in ended:
            run_store.update_invocation(
                conn,
                inv.id,
                status=S.ABORTED.value,
                error=error,
                reason=reason,
                finished_at=now,
                deadline=None,
                log=debuglog.append(inv.log, now, error),
            )
            if inv.status == RUNNING and job.kind == "celery" and inv.worker is not None:
                messages.append(self.runs.revoke(conn, inv, now))
        outcome = Outcome(S.ABORTED, error, reason)
        for inv in ended:  # heard once every row is written: a pool's places among them
            messages += self.runs.finished(conn, job, inv, outcome, now, counted=False).messages
        return messages

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
