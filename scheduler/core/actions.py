"""A step's actions, carried out in the step's transaction: a run started (through the
admission chain), buffered, or skipped; the run that waited longest started; the
active runs of a ``cancel_other`` job aborted; the next tick. An action whose write
could not be made (a slot that has its run already) feeds the machine a follow-up
event, whose actions are carried out in turn (``Core.feed``'s queue).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from cronchain.scheduler import debuglog
from cronchain.scheduler.core import admission
from cronchain.scheduler.core.attempts import RUNNING, STARTING, WAITING
from cronchain.scheduler.core.effects import Message, SendRun, SendStart, Stepped
from cronchain.scheduler.core.host import Admitting, Held
from cronchain.scheduler.invokers import Outcome
from cronchain.scheduler.storage import run_store
from cronchain.scheduler.storage.rows import JobRow
from cronchain.statemachine import (
    Abandon,
    AbortActive,
    Action,
    BufferInvocation,
    Event,
    InvocationStarted,
    InvocationStatus,
    RecordSkipped,
    StartBuffered,
    StartInvocation,
    TickLater,
    Unbuffer,
)

if TYPE_CHECKING:
    from cronchain.scheduler.core.host import CoreHost

log = logging.getLogger("cronchain.engine")
S = InvocationStatus


def perform(
    core: CoreHost,
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
            fed.messages.append(core.stepper.tick_message(job, when, nonce, now))
        case StartInvocation(slot=slot, trigger_id=trigger_id):
            return _start_new(core, conn, job, slot, trigger_id, fed, now, insert, start_here)
        case BufferInvocation(slot=slot, trigger_id=trigger_id):
            inv_id = insert(slot=slot, trigger_id=trigger_id, status=WAITING)
            if inv_id is None:
                return _follow_up(core, job, fed, Unbuffer(), now)
        case StartBuffered():
            return _start_buffered(core, conn, job, fed, now)
        case AbortActive(reason=reason):
            fed.messages += _abort_active(core, conn, job, reason, now)
        case RecordSkipped(slot=slot, reason=reason, trigger_id=trigger_id):
            inv_id = insert(slot=slot, trigger_id=trigger_id, status=S.SKIPPED.value, reason=reason)
            if inv_id is not None:
                fed.messages += core.runs.skipped(
                    conn, job, inv_id, slot, reason, now, trigger_id, revision
                )
        case _:
            raise AssertionError(f"unknown action {action!r}")
    return []


def _start_buffered(
    core: CoreHost, conn: Connection, job: JobRow, fed: Stepped, now: datetime
) -> list[Action]:
    """The run that waited longest for its turn has it: it goes through the
    admission chain, and starts or waits at the first hold that holds it."""
    waiting = next(iter(run_store.oldest_waiting(conn, job.id)), None)
    if waiting is None:
        log.error("job %s counted a waiting run it does not have", job.ref)
        return _follow_up(core, job, fed, Abandon(), now)
    fed.snapshot.invocation_id = waiting.id
    messages = core.go_on(conn, job, waiting, {}, now, None)
    if any(isinstance(m, SendStart) and m.invocation_id == waiting.id for m in messages):
        fed.started = waiting.id
    fed.messages += messages
    return []


def _start_new(
    core: CoreHost,
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
    filed_at = run_store.place(slot, now)
    said = admission.admit(core.plugins.holds, conn, Admitting(job, filed_at), now)
    if isinstance(said, Held):
        values = said.columns
    elif start_here:
        values = core.attempts.attempt_columns(job, 1, None, now) | said
    else:
        values = dict(status=STARTING, deadline=now + core.stepper.grace, **said)
    inv_id = insert(slot=slot, trigger_id=trigger_id, **values)
    if inv_id is None:  # that slot has its invocation already
        log.warning("job %s: slot %s already fired", job.ref, slot or trigger_id)
        return _follow_up(core, job, fed, Abandon(), now)
    fed.snapshot.invocation_id = inv_id
    if isinstance(said, Held):
        fed.messages += said.then(inv_id)
        return []
    fed.started = inv_id
    if not start_here:
        fed.messages.append(SendStart(inv_id))
        return []
    call = core.attempts.new_call(job, inv_id, 1, slot, trigger_id, filed_at=filed_at)
    fed.messages.append(SendRun(call))
    return _follow_up(core, job, fed, InvocationStarted(inv_id), now)


def _follow_up(
    core: CoreHost, job: JobRow, fed: Stepped, event: Event, now: datetime
) -> list[Action]:
    """Feed the snapshot being built an event that follows from the step's own writes
    (a row that could not be written, so the count is undone; a run begun here), and
    return that step's actions for the caller to carry out like any other."""
    result = core.stepper.step(job, fed.snapshot, event, now)
    fed.snapshot = result.snapshot
    return list(result.actions)


def _abort_active(
    core: CoreHost, conn: Connection, job: JobRow, reason: str, now: datetime
) -> list[Message]:
    """``cancel_other``: end the job's active invocations; the machine has already
    counted them out, so no event is fed for them."""
    messages: list[Message] = []
    ended = run_store.lock_started(conn, job.id)
    error = f"aborted: a newer run replaced it (overlap: {reason})"
    for inv in ended:
        run_store.update_invocation(
            conn,
            inv,
            status=S.ABORTED.value,
            error=error,
            reason=reason,
            finished_at=now,
            deadline=None,
            log=debuglog.append(inv.log, now, error),
        )
        if inv.status == RUNNING and job.kind == "celery" and inv.worker is not None:
            messages.append(core.runs.revoke(conn, inv, now))
    outcome = Outcome(S.ABORTED, error, reason)
    for inv in ended:  # heard once every row is written: a pool's places among them
        messages += core.runs.finished(conn, job, inv, outcome, now, counted=False).messages
    return messages
