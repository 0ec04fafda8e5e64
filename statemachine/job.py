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

from statemachine.actions import (
    AbortActive,
    Action,
    BufferInvocation,
    RecordSkipped,
    StartBuffered,
    StartInvocation,
    TickLater,
)
from statemachine.events import (
    Abandon,
    Event,
    InvocationFinished,
    Repair,
    Resume,
    Tick,
    Trigger,
)
from statemachine.policy import Misfire, MisfirePolicy, Overlap, OverlapPolicy

# A misfire or a resume records the slots it does not run, the newest this many.
MAX_SKIPPED_RECORDS = 1000

DEFAULT_POLICY = OverlapPolicy()
DEFAULT_MISFIRE = MisfirePolicy()


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
    invocation_id: int | None = None  # the newest invocation started
    invocation_running: bool = False  # an active invocation has reported its start
    overruns: int = 0
    active: int = 0  # invocations STARTING or RUNNING
    buffered: int = 0  # invocations WAITING for a free place
    missed_from: datetime | None = None  # paused: the first slot not fired


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
    policy: OverlapPolicy
    misfire: MisfirePolicy
    plan: _Plan | None = None


@dataclass
class _Plan:
    """What a due tick does: the slots to run, those to record as SKIPPED ("misfire"),
    and whether the runs are a catch-up (they wait their turn, whatever the overlap)."""

    run: list[datetime]
    skip: list[datetime]
    catch_up: bool


def step(
    snapshot: JobSnapshot,
    event: Event,
    *,
    now: datetime,
    schedule: Schedule,
    nonce: int,
    policy: OverlapPolicy = DEFAULT_POLICY,
    misfire: MisfirePolicy = DEFAULT_MISFIRE,
) -> Step:
    """Feed one event to the machine; the input snapshot is left untouched.

    ``nonce`` is a fresh random value, used if the step schedules a tick. The engine
    feeds each invocation's start and finish exactly once (the invocation row's own
    status guards that), so the machine can count active runs.
    """
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    model = dataclasses.replace(snapshot)
    actions: list[Action] = []
    if not _ignored(snapshot, event):
        ctx = _Context(now, schedule, nonce, event, actions, policy, misfire)
        try:
            done = _MACHINE.events[_event_name(event)].trigger(model, ctx=ctx)
        except MachineError as err:
            raise InvalidTransition(event, snapshot.state) from err
        if not done:
            raise InvalidTransition(event, snapshot.state)
    return Step(model, actions, changed=bool(actions) or model != snapshot)


def _ignored(snapshot: JobSnapshot, event: Event) -> bool:
    """Events that are facts about the past and no longer apply: stale ticks, repairs
    of a job that has no tick pending."""
    match event:
        case Tick(nonce=nonce):
            return snapshot.tick_nonce is None or nonce != snapshot.tick_nonce
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
    if ctx.schedule.relative and job.active:
        _set_tick(job, ctx, None)  # armed again when the last active invocation finishes
        return
    _set_tick(job, ctx, ctx.schedule.next_after(ctx.now))


def _disarm(ev: EventData) -> None:
    job: JobSnapshot = ev.model
    job.tick_at = job.tick_nonce = None
    job.missed_from = None


def _suspend(ev: EventData) -> None:
    """Pause: remember the first slot not fired, for resume to account for."""
    job: JobSnapshot = ev.model
    missed_from = job.tick_at
    _disarm(ev)
    job.missed_from = missed_from


def _resume(ev: EventData) -> None:
    """Record the slots missed while paused as SKIPPED ("paused") and tick from now; with
    catch-up, tick at the first missed slot instead and let the misfire policy decide."""
    job: JobSnapshot = ev.model
    ctx = _ctx(ev)
    assert isinstance(ctx.event, Resume)
    first, job.missed_from = job.missed_from, None
    if first is None or ctx.schedule.relative or first > ctx.now:
        _arm(ev)
    elif ctx.event.catch_up:
        _set_tick(job, ctx, first)
    else:
        for slot in _slots_between(ctx.schedule, first, ctx.now, MAX_SKIPPED_RECORDS):
            ctx.actions.append(RecordSkipped(slot, "paused"))
        _arm(ev)


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


def _plan(job: JobSnapshot, ctx: _Context) -> _Plan:
    """A slot late by no more than the grace fires normally. Later than that, the tick
    is a misfire and the policy covers every slot from it up to now."""
    if ctx.plan is not None:
        return ctx.plan
    slot = job.tick_at
    assert slot is not None
    grace = ctx.misfire.grace
    if grace is None:
        grace = ctx.schedule.misfire_grace
    if ctx.schedule.relative or ctx.now - slot <= grace:
        ctx.plan = _Plan([slot], [], catch_up=False)
        return ctx.plan
    runs = ctx.misfire.catchup_limit if ctx.misfire.mode is Misfire.ALL else 1
    missed = _slots_between(ctx.schedule, slot, ctx.now, MAX_SKIPPED_RECORDS + runs)
    match ctx.misfire.mode:
        case Misfire.SKIP:
            ctx.plan = _Plan([], missed, catch_up=False)
        case Misfire.LATEST:
            ctx.plan = _Plan(missed[-1:], missed[:-1], catch_up=False)
        case Misfire.ALL:
            limit = ctx.misfire.catchup_limit
            ctx.plan = _Plan(missed[-limit:], missed[:-limit], catch_up=True)
    return ctx.plan


def _slots_between(schedule: Schedule, first: datetime, now: datetime, most: int) -> list[datetime]:
    """The slots from ``first`` up to ``now``, oldest first: the newest ``most`` of them
    (an outage of a frequent job must not turn into millions of rows)."""
    newest: list[datetime] = []
    t = schedule.latest_at_or_before(now)
    while t is not None and t >= first and len(newest) < most:
        newest.append(t)
        t = schedule.latest_at_or_before(t - _INSTANT)
    return newest[::-1] or [first]


_INSTANT = timedelta(microseconds=1)


def _start(job: JobSnapshot, ctx: _Context, slot: datetime | None, trigger_id: str | None):
    ctx.actions.append(StartInvocation(slot, trigger_id))
    job.active += 1


def _run(job: JobSnapshot, ctx: _Context, slot: datetime | None, trigger_id: str | None) -> None:
    """Start a run for a slot or trigger, or apply the overlap policy if one is active."""
    policy = ctx.policy
    if job.active < policy.capacity and not job.buffered:
        _start(job, ctx, slot, trigger_id)
        return
    job.overruns += 1
    if policy.mode is Overlap.CANCEL_OTHER:
        ctx.actions.append(AbortActive("cancel_other"))
        job.active = 0
        _start(job, ctx, slot, trigger_id)
    elif job.buffered < policy.buffer_size:
        ctx.actions.append(BufferInvocation(slot, trigger_id))
        job.buffered += 1
    else:
        ctx.actions.append(RecordSkipped(slot, "overlap", trigger_id))


def _queue(job: JobSnapshot, ctx: _Context, slot: datetime) -> None:
    """A catch-up run: start if there is room, else wait for a place."""
    if job.active < ctx.policy.capacity and not job.buffered:
        _start(job, ctx, slot, None)
    else:
        ctx.actions.append(BufferInvocation(slot, None))
        job.buffered += 1


def _fire(ev: EventData) -> None:
    job: JobSnapshot = ev.model
    ctx = _ctx(ev)
    plan = _plan(job, ctx)
    for slot in plan.skip:
        ctx.actions.append(RecordSkipped(slot, "misfire"))
    for slot in plan.run:
        if plan.catch_up:
            _queue(job, ctx, slot)
        else:
            _run(job, ctx, slot, None)
    last = max(plan.run + plan.skip)
    _set_tick(job, ctx, None if ctx.schedule.relative else ctx.schedule.next_after(last))


def _runs_nothing(ev: EventData) -> bool:
    return not _plan(ev.model, _ctx(ev)).run


def _catches_up(ev: EventData) -> bool:
    return _plan(ev.model, _ctx(ev)).catch_up


def _trigger(ev: EventData) -> None:
    ctx = _ctx(ev)
    assert isinstance(ctx.event, Trigger)
    _run(ev.model, ctx, None, ctx.event.trigger_id)


def _skip_idle_trigger(ev: EventData) -> None:
    ctx = _ctx(ev)
    assert isinstance(ctx.event, Trigger)
    reason = "paused" if ev.model.state is JobState.SUSPENDED else "disabled"
    ctx.actions.append(RecordSkipped(None, reason, ctx.event.trigger_id))


def _lenient(ev: EventData) -> bool:
    return not _ctx(ev).event.strict  # type: ignore[union-attr]


def _has_room(ev: EventData) -> bool:
    """A run may start alongside the active ones (``allow``)."""
    job: JobSnapshot = ev.model
    return job.active < _ctx(ev).policy.capacity and not job.buffered


def _cancels(ev: EventData) -> bool:
    ctx = _ctx(ev)
    if ctx.policy.mode is not Overlap.CANCEL_OTHER:
        return False
    return not (isinstance(ctx.event, Tick) and _catches_up(ev))


def _mark_running(ev: EventData) -> None:
    ev.model.invocation_running = True


def _one_fewer(ev: EventData) -> None:
    job: JobSnapshot = ev.model
    job.active = max(0, job.active - 1)
    if not job.active:
        job.invocation_id = None
        job.invocation_running = False


def _may_start_buffered(ev: EventData) -> bool:
    """After this event, a waiting run has a free place."""
    job: JobSnapshot = ev.model
    return job.buffered > 0 and _active_after(ev) < _ctx(ev).policy.capacity


def _last_active(ev: EventData) -> bool:
    return _active_after(ev) == 0


def _active_after(ev: EventData) -> int:
    """Active runs once this event is applied: a finish or an abandon frees a place."""
    job: JobSnapshot = ev.model
    frees = isinstance(_ctx(ev).event, InvocationFinished | Abandon)
    return max(0, job.active - 1) if frees else job.active


def _start_buffered(ev: EventData) -> None:
    job: JobSnapshot = ev.model
    _ctx(ev).actions.append(StartBuffered())
    job.buffered -= 1
    job.active += 1


def _finish(ev: EventData) -> None:
    """The last active run ended: a fixed delay counts from now."""
    _one_fewer(ev)
    ctx = _ctx(ev)
    if ctx.schedule.relative:
        assert isinstance(ctx.event, InvocationFinished)
        _set_tick(ev.model, ctx, ctx.schedule.next_after(ctx.event.at))


def _abandon(ev: EventData) -> None:
    """The row for that slot or trigger existed already, so nothing started: undo the
    count; a fixed delay, which arms only when idle, counts from now."""
    _one_fewer(ev)
    ctx = _ctx(ev)
    if ctx.schedule.relative and not ev.model.active:
        _set_tick(ev.model, ctx, ctx.schedule.next_after(ctx.now))


def _unbuffer(ev: EventData) -> None:
    ev.model.buffered = max(0, ev.model.buffered - 1)


def _has_running(ev: EventData) -> bool:
    return ev.model.active > 0 and ev.model.invocation_running


def _has_active(ev: EventData) -> bool:
    return ev.model.active > 0


# --- the machine, built once ----------------------------------------------------------

S = JobState
ACTIVE = [S.SCHEDULED, S.QUEUED, S.RUNNING, S.OVERRUN]
BUSY = [S.QUEUED, S.RUNNING, S.OVERRUN]
IDLE = [S.DISABLED, S.SUSPENDED]


def _restore(
    trigger: str, source: JobState, arm: Callable[..., None] = _arm
) -> list[dict[str, Any]]:
    """Leaving DISABLED or SUSPENDED lands in the state the invocations are in; a run
    that waited while the job was idle starts now."""
    return [
        dict(
            trigger=trigger,
            source=source,
            dest=S.QUEUED,
            conditions=[_may_start_buffered],
            after=[arm, _start_buffered],
        ),
        dict(
            trigger=trigger, source=source, dest=S.RUNNING, conditions=[_has_running], after=[arm]
        ),
        dict(trigger=trigger, source=source, dest=S.QUEUED, conditions=[_has_active], after=[arm]),
        dict(trigger=trigger, source=source, dest=S.SCHEDULED, after=[arm]),
    ]


def _freed(trigger: str, last: Callable[..., None]) -> list[dict[str, Any]]:
    """A finish (or an abandoned start) frees a place: a waiting run takes it, or the job
    is idle again (``last`` runs), or other runs are still active."""
    return [
        dict(
            trigger=trigger,
            source=BUSY,
            dest=S.QUEUED,
            conditions=[_may_start_buffered],
            after=[_one_fewer, _start_buffered],
        ),
        dict(
            trigger=trigger, source=BUSY, dest=S.SCHEDULED, conditions=[_last_active], after=[last]
        ),
        _internal(trigger, [*ACTIVE, *IDLE], _one_fewer),
    ]


def _overlap(trigger: str, after: Callable[..., None], *due: Callable[..., bool]):
    """A slot or trigger while busy: ``cancel_other`` starts afresh, ``allow`` starts
    alongside while there is room, the rest wait or are skipped (an overrun)."""
    return [
        dict(
            trigger=trigger, source=BUSY, dest=S.QUEUED, conditions=[*due, _cancels], after=[after]
        ),
        dict(trigger=trigger, source=BUSY, dest=None, conditions=[*due, _has_room], after=[after]),
        dict(trigger=trigger, source=BUSY, dest=S.OVERRUN, conditions=[*due], after=[after]),
    ]


def _internal(trigger: str, source: list[JobState], *after: Callable[..., None]):
    return dict(trigger=trigger, source=source, dest=None, after=list(after))


_TRANSITIONS: list[dict[str, Any]] = [
    *_restore("enable", S.DISABLED),
    _internal("enable", [*ACTIVE, S.SUSPENDED]),
    dict(trigger="disable", source=[*ACTIVE, S.SUSPENDED], dest=S.DISABLED, after=[_disarm]),
    _internal("disable", [S.DISABLED]),
    dict(trigger="pause", source=ACTIVE, dest=S.SUSPENDED, after=[_suspend]),
    _internal("pause", [S.SUSPENDED]),
    *_restore("resume", S.SUSPENDED, _resume),
    _internal("resume", ACTIVE),
    _internal("schedulechanged", ACTIVE, _arm),
    _internal("schedulechanged", IDLE),
    _internal("tick", ACTIVE, _fire) | dict(conditions=[_is_due, _runs_nothing]),
    dict(trigger="tick", source=S.SCHEDULED, dest=S.QUEUED, conditions=[_is_due], after=[_fire]),
    *_overlap("tick", _fire, _is_due),
    _internal("tick", ACTIVE, _rearm),  # early: the ETA horizon made it hop
    dict(trigger="trigger", source=S.SCHEDULED, dest=S.QUEUED, after=[_trigger]),
    *_overlap("trigger", _trigger),
    dict(
        trigger="trigger", source=IDLE, dest=None, conditions=[_lenient], after=[_skip_idle_trigger]
    ),
    dict(trigger="invocationstarted", source=S.QUEUED, dest=S.RUNNING, after=[_mark_running]),
    _internal("invocationstarted", [S.SCHEDULED, S.RUNNING, S.OVERRUN, *IDLE], _mark_running),
    *_freed("invocationfinished", _finish),
    *_freed("abandon", _abandon),
    _internal("unbuffer", [*ACTIVE, *IDLE], _unbuffer),
    _internal("repair", ACTIVE, _rearm),
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
