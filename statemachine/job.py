"""The job machine, after LUCI Scheduler's ``engine/cron/machine.go``.

A step is ``(snapshot, event, now, schedule, nonce) -> (snapshot', actions)``. The
``transitions`` machine below is built once per process and driven on plain snapshot
dataclasses; its callbacks only change the snapshot and append actions.

Ticks carry a nonce. A tick whose nonce is not the pending one (stale, repeated, or sent
before a pause) is ignored, so a tick delivered twice can never fire a slot twice. The
next slot is computed from the slot just handled, never from the time the worker ran.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

from transitions import EventData, Machine, MachineError

from statemachine.actions import Action, RecordSkipped, StartInvocation, TickLater
from statemachine.events import (
    Event,
    InvocationFinished,
    InvocationStarted,
    Repair,
    Tick,
    Trigger,
)

# A tick handled long after its slot records every skipped slot, up to this many rows.
MAX_SKIPPED_RECORDS = 1000


class JobState(StrEnum):
    DISABLED = "DISABLED"
    SCHEDULED = "SCHEDULED"
    SUSPENDED = "SUSPENDED"
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    OVERRUN = "OVERRUN"


class Schedule(Protocol):
    """The schedule maths the machine needs (``scheduler.schedules`` implements it)."""

    @property
    def relative(self) -> bool:
        """True for a fixed delay: the next slot counts from the end of the last run."""

    @property
    def misfire_grace(self) -> timedelta:
        """A slot handled later than this after its time is a misfire."""

    def next_after(self, t: datetime) -> datetime | None:
        """The first slot strictly after ``t`` (None: the job never ticks)."""

    def latest_at_or_before(self, t: datetime) -> datetime | None:
        """The newest slot at or before ``t``."""


@dataclass
class JobSnapshot:
    """The part of a job row the machine reads and writes."""

    state: JobState = JobState.DISABLED
    tick_at: datetime | None = None
    tick_nonce: int | None = None
    invocation_id: int | None = None
    invocation_running: bool = False
    overruns: int = 0


@dataclass
class Step:
    """The machine's answer: the new snapshot, the actions, and whether either differs
    from doing nothing (so the engine can skip a write)."""

    snapshot: JobSnapshot
    actions: list[Action]
    changed: bool


class InvalidTransition(Exception):
    """The event is not allowed in the job's state (for example: trigger a paused job)."""

    def __init__(self, event: Event, state: JobState):
        super().__init__(f"cannot {_event_name(event)} a job that is {state.value}")
        self.event = event
        self.state = state


@dataclass
class _Context:
    now: datetime
    schedule: Schedule
    nonce: int
    event: Event
    actions: list[Action]


def step(
    snapshot: JobSnapshot, event: Event, *, now: datetime, schedule: Schedule, nonce: int
) -> Step:
    """Feed one event to the machine; the input snapshot is left untouched.

    ``nonce`` is a fresh random value, used if the step schedules a tick.
    """
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    model = dataclasses.replace(snapshot)
    actions: list[Action] = []
    if not _ignored(snapshot, event):
        ctx = _Context(now, schedule, nonce, event, actions)
        try:
            _MACHINE.events[_event_name(event)].trigger(model, ctx=ctx)
        except MachineError as err:
            raise InvalidTransition(event, snapshot.state) from err
    return Step(model, actions, changed=bool(actions) or model != snapshot)


def _ignored(snapshot: JobSnapshot, event: Event) -> bool:
    """Events that are facts about the past and no longer apply: stale ticks, reports
    about an invocation that is not the job's current one."""
    match event:
        case Tick(nonce=nonce):
            return snapshot.tick_nonce is None or nonce != snapshot.tick_nonce
        case InvocationStarted(invocation_id=inv) | InvocationFinished(invocation_id=inv):
            return inv != snapshot.invocation_id
        case Repair():
            return snapshot.tick_nonce is None
    return False


def _event_name(event: Event) -> str:
    return type(event).__name__.lower()


# --- callbacks: they change the snapshot and append actions, nothing else -------------


def _ctx(ev: EventData) -> _Context:
    return ev.kwargs["ctx"]


def _arm(ev: EventData) -> None:
    """Schedule the first slot after now (fixed delay: now + interval, once idle)."""
    job: JobSnapshot = ev.model
    ctx = _ctx(ev)
    if ctx.schedule.relative and job.invocation_id is not None:
        _set_tick(job, ctx, None)  # armed again when the running invocation finishes
        return
    _set_tick(job, ctx, ctx.schedule.next_after(ctx.now))


def _disarm(ev: EventData) -> None:
    job: JobSnapshot = ev.model
    job.tick_at = job.tick_nonce = None


def _rearm(ev: EventData) -> None:
    """Send the pending tick again with a new nonce, so the old message becomes stale."""
    job: JobSnapshot = ev.model
    _set_tick(job, _ctx(ev), job.tick_at)


def _set_tick(job: JobSnapshot, ctx: _Context, when: datetime | None) -> None:
    job.tick_at = when
    job.tick_nonce = None if when is None else ctx.nonce
    if when is not None:
        ctx.actions.append(TickLater(when, ctx.nonce))


def _is_due(ev: EventData) -> bool:
    job: JobSnapshot = ev.model
    assert job.tick_at is not None
    return job.tick_at <= _ctx(ev).now


def _due_slot(job: JobSnapshot, ctx: _Context) -> datetime:
    """The slot this tick fires: its own, or after a misfire the newest one missed,
    recording the others as skipped."""
    slot = job.tick_at
    assert slot is not None
    if ctx.schedule.relative or ctx.now - slot <= ctx.schedule.misfire_grace:
        return slot
    latest = ctx.schedule.latest_at_or_before(ctx.now) or slot
    missed = slot
    for _ in range(MAX_SKIPPED_RECORDS):
        if missed is None or missed >= latest:
            break
        ctx.actions.append(RecordSkipped(missed, "misfire"))
        missed = ctx.schedule.next_after(missed)
    return max(latest, slot)


def _fire(ev: EventData) -> None:
    job: JobSnapshot = ev.model
    ctx = _ctx(ev)
    slot = _due_slot(job, ctx)
    ctx.actions.append(StartInvocation(slot))
    job.invocation_running = False
    _set_tick(job, ctx, None if ctx.schedule.relative else ctx.schedule.next_after(slot))


def _overrun(ev: EventData) -> None:
    """LUCI's default overlap policy: do not start a second run, count the overrun."""
    job: JobSnapshot = ev.model
    ctx = _ctx(ev)
    slot = _due_slot(job, ctx)
    ctx.actions.append(RecordSkipped(slot, "overlap"))
    job.overruns += 1
    _set_tick(job, ctx, ctx.schedule.next_after(slot))


def _start_manual(ev: EventData) -> None:
    ctx = _ctx(ev)
    assert isinstance(ctx.event, Trigger)
    ctx.actions.append(StartInvocation(None, ctx.event.trigger_id))
    ev.model.invocation_running = False


def _skip_manual(ev: EventData) -> None:
    ctx = _ctx(ev)
    assert isinstance(ctx.event, Trigger)
    ctx.actions.append(RecordSkipped(None, "overlap", ctx.event.trigger_id))
    ev.model.overruns += 1


def _mark_running(ev: EventData) -> None:
    ev.model.invocation_running = True


def _clear_invocation(ev: EventData) -> None:
    job: JobSnapshot = ev.model
    job.invocation_id = None
    job.invocation_running = False


def _finish(ev: EventData) -> None:
    _clear_invocation(ev)
    ctx = _ctx(ev)
    if ctx.schedule.relative:
        assert isinstance(ctx.event, InvocationFinished)
        _set_tick(ev.model, ctx, ctx.schedule.next_after(ctx.event.at))


def _has_running(ev: EventData) -> bool:
    return ev.model.invocation_id is not None and ev.model.invocation_running


def _has_queued(ev: EventData) -> bool:
    return ev.model.invocation_id is not None and not ev.model.invocation_running


# --- the machine, built once ----------------------------------------------------------

S = JobState
ACTIVE = [S.SCHEDULED, S.QUEUED, S.RUNNING, S.OVERRUN]
BUSY = [S.QUEUED, S.RUNNING, S.OVERRUN]
IDLE = [S.DISABLED, S.SUSPENDED]


def _restore(trigger: str, source: JobState) -> list[dict[str, Any]]:
    """Leaving DISABLED or SUSPENDED lands in the state the invocation is in."""
    return [
        dict(
            trigger=trigger, source=source, dest=S.RUNNING, conditions=[_has_running], after=[_arm]
        ),
        dict(trigger=trigger, source=source, dest=S.QUEUED, conditions=[_has_queued], after=[_arm]),
        dict(trigger=trigger, source=source, dest=S.SCHEDULED, after=[_arm]),
    ]


def _internal(trigger: str, source: list[JobState], *after: Callable[..., None]):
    return dict(trigger=trigger, source=source, dest=None, after=list(after))


_TRANSITIONS: list[dict[str, Any]] = [
    *_restore("enable", S.DISABLED),
    _internal("enable", [*ACTIVE, S.SUSPENDED]),
    dict(trigger="disable", source=[*ACTIVE, S.SUSPENDED], dest=S.DISABLED, after=[_disarm]),
    _internal("disable", [S.DISABLED]),
    dict(trigger="pause", source=ACTIVE, dest=S.SUSPENDED, after=[_disarm]),
    _internal("pause", [S.SUSPENDED]),
    *_restore("resume", S.SUSPENDED),
    _internal("resume", ACTIVE),
    _internal("schedulechanged", ACTIVE, _arm),
    _internal("schedulechanged", IDLE),
    dict(trigger="tick", source=S.SCHEDULED, dest=S.QUEUED, conditions=[_is_due], after=[_fire]),
    dict(trigger="tick", source=BUSY, dest=S.OVERRUN, conditions=[_is_due], after=[_overrun]),
    _internal("tick", ACTIVE, _rearm),  # early: the ETA horizon made it hop
    dict(trigger="trigger", source=S.SCHEDULED, dest=S.QUEUED, after=[_start_manual]),
    _internal("trigger", BUSY, _skip_manual),
    dict(trigger="invocationstarted", source=S.QUEUED, dest=S.RUNNING, after=[_mark_running]),
    _internal("invocationstarted", [S.RUNNING, S.OVERRUN, *IDLE], _mark_running),
    dict(trigger="invocationfinished", source=BUSY, dest=S.SCHEDULED, after=[_finish]),
    _internal("invocationfinished", IDLE, _clear_invocation),
    _internal("repair", ACTIVE, _rearm),
    dict(trigger="abandon", source=S.QUEUED, dest=S.SCHEDULED, after=[_clear_invocation]),
    _internal("abandon", [S.RUNNING, S.OVERRUN, *IDLE], _clear_invocation),
]

_MACHINE = Machine(
    model=None,
    states=list(JobState),
    transitions=_TRANSITIONS,
    initial=S.DISABLED,
    auto_transitions=False,
    send_event=True,
)

# Every event type must have a trigger, or step() would fail with a KeyError at run time.
_MISSING = {e.__name__.lower() for e in Event.__args__} - set(_MACHINE.events)  # type: ignore[attr-defined]
assert not _MISSING, f"events without a trigger: {_MISSING}"
