"""Runs as Flower sees them: each one a task of its own, under its job's name, in the
state it ended in.

Flower (and any monitor of Celery's task events) shows Celery tasks. The work path runs
its runs inside tasks of its own, ``cronchain.run`` and ``cronchain.run_batch``, which
succeed whatever their runs did: Flower would show ``cronchain.run`` with ids for args,
SUCCESS for a failed run, and one entry for a batch of a hundred. So the work path sends,
for each run it takes, task events of the run's own, as Celery sends a task's:

- ``task-started`` when it claims the attempt: the task's ``name`` is the job's
  (``project/name``), its ``args`` the slot (or ``triggered``) and its ``kwargs`` the
  attempt and the invocation;
- when the outcome is recorded, ``task-succeeded`` (its runtime), ``task-failed`` (the
  error, and the reason: ``timeout``, ``status``, ...), or ``task-revoked`` for an
  attempt that cronchain ended elsewhere while it ran (aborted, timed out, its lease
  lapsed), whose outcome was therefore not this worker's to record.

Their ``uuid`` is the attempt's task id (``cronchain-INVOCATION-ATTEMPT``). They go
through the worker's own event dispatcher, so they are sent exactly when Celery sends
its own task events: while a monitor has asked for them (Flower does as it starts, or
``celery worker -E``), batched with the others where the worker batches them, and not at
all otherwise. ``CRONCHAIN_RUN_EVENTS=false`` keeps them off even then.

A ``celery`` run is its user's task, whose events its worker sends: cronchain sends it
with the job's name as Celery's ``shadow`` (``scheduler.invokers.celery``), so that
Flower lists it under the job too.
"""

from __future__ import annotations

import logging
from typing import Any

from celery.signals import worker_ready

from cronchain.scheduler.invokers import Call, Outcome
from cronchain.scheduler.settings import Settings
from cronchain.scheduler.timing.iso import iso
from cronchain.statemachine import InvocationStatus

log = logging.getLogger("cronchain.work")
_consumer: Any = None  # the worker's consumer, whose dispatcher is made anew on reconnect
_wanted = True


def install() -> None:
    """Keep the worker's consumer once it is ready (cronchain's app does this)."""
    worker_ready.connect(_keep, weak=False)


def _keep(sender: Any, **_: Any) -> None:
    global _consumer, _wanted
    _consumer = sender
    _wanted = Settings.from_env().run_events


def _dispatcher() -> Any:
    """The worker's event dispatcher while task events are on; None otherwise."""
    dispatcher = getattr(_consumer, "event_dispatcher", None) if _wanted else None
    if dispatcher is None or not dispatcher.enabled:
        return None
    groups = dispatcher.groups
    return dispatcher if not groups or "task" in groups else None


def started(call: Call) -> None:
    """The attempt is claimed. (Its worker is the event's hostname, as Celery's: a field
    named ``worker`` would replace the worker Flower keeps for the task.)"""
    dispatcher = _dispatcher()
    if dispatcher is None:
        return
    slot = iso(call.slot) if call.slot else "triggered"
    _send(
        dispatcher,
        "task-started",
        uuid=call.task_id,
        name=call.job,
        args=repr((slot,)),
        kwargs=repr({"attempt": call.attempt, "invocation": call.invocation_id}),
    )


def ended(call: Call, outcome: Outcome, recorded: bool | None, seconds: float) -> None:
    """The run's end as Flower shows it. ``recorded``: True if this outcome is the
    run's, False if cronchain had ended the attempt elsewhere, None if it could not be
    recorded (its lease lapses: the watchdog's)."""
    dispatcher = _dispatcher()
    if dispatcher is None:
        return
    if recorded is False:
        why = "ended elsewhere while it ran: aborted, timed out, or its lease lapsed"
        _send(dispatcher, "task-revoked", uuid=call.task_id, terminated=True, reason=why)
    elif outcome.status == InvocationStatus.SUCCEEDED:
        _send(dispatcher, "task-succeeded", uuid=call.task_id, result="SUCCEEDED", runtime=seconds)
    else:
        kept = outcome.recorded()  # the error as history has it: storable, bounded
        reason = f"{kept.reason}: " if kept.reason else ""
        error = f"{reason}{kept.error or kept.status.value}"
        _send(dispatcher, "task-failed", uuid=call.task_id, exception=error, traceback="")


def _send(dispatcher: Any, type_: str, **fields: Any) -> None:
    try:
        dispatcher.send(type_, **fields)
    except Exception:  # monitoring must never cost a run: the next event may pass
        log.debug("task event %s not sent", type_, exc_info=True)
