"""The job machine's callbacks: they change the snapshot and append actions, nothing
else. :mod:`statemachine.job` names them in its transition table."""

from __future__ import annotations

from datetime import datetime, timedelta

from transitions import EventData

from cronchain.statemachine.actions import (
    AbortActive,
    BufferInvocation,
    RecordSkipped,
    StartBuffered,
    StartInvocation,
    TickLater,
)
from cronchain.statemachine.events import Abandon, InvocationFinished, Resume, Tick, Trigger
from cronchain.statemachine.policy import Misfire, Overlap
from cronchain.statemachine.reasons import Reason
from cronchain.statemachine.snapshot import Context, JobSnapshot, JobState, Plan, Schedule

# A misfire or a resume records the slots it does not run, the newest this many.
MAX_SKIPPED_RECORDS = 1000


def _ctx(ev: EventData) -> Context:
    return ev.kwargs["ctx"]


def arm(ev: EventData) -> None:
    """Schedule the first slot after now (fixed delay: now + interval, once idle)."""
    job: JobSnapshot = ev.model
    ctx = _ctx(ev)
    if ctx.schedule.relative and job.active:
        _set_tick(job, ctx, None)  # armed again when the last active invocation finishes
        return
    _set_tick(job, ctx, ctx.schedule.next_after(ctx.now))


def disarm(ev: EventData) -> None:
    job: JobSnapshot = ev.model
    job.tick_at = job.tick_nonce = None
    job.missed_from = None


def suspend(ev: EventData) -> None:
    """Pause: remember the first slot not fired, for resume to account for."""
    job: JobSnapshot = ev.model
    missed_from = job.tick_at
    disarm(ev)
    job.missed_from = missed_from


def resume(ev: EventData) -> None:
    """Record the slots missed while paused as SKIPPED ("paused") and tick from now; with
    catch-up, tick at the first missed slot instead and let the misfire policy decide."""
    job: JobSnapshot = ev.model
    ctx = _ctx(ev)
    assert isinstance(ctx.event, Resume)
    first, job.missed_from = job.missed_from, None
    if first is None or ctx.schedule.relative or first > ctx.now:
        arm(ev)
    elif ctx.event.catch_up:
        _set_tick(job, ctx, first)
    else:
        for slot in _slots_between(ctx.schedule, first, ctx.now, MAX_SKIPPED_RECORDS):
            ctx.actions.append(RecordSkipped(slot, Reason.PAUSED))
        arm(ev)


def rearm(ev: EventData) -> None:
    """Send the pending tick again with a new nonce, so the old message becomes stale."""
    job: JobSnapshot = ev.model
    _set_tick(job, _ctx(ev), job.tick_at)


def _set_tick(job: JobSnapshot, ctx: Context, when: datetime | None) -> None:
    job.tick_at = when
    job.tick_nonce = None if when is None else ctx.nonce
    if when is not None:
        ctx.actions.append(TickLater(when, ctx.nonce))


def is_due(ev: EventData) -> bool:
    job: JobSnapshot = ev.model
    assert job.tick_at is not None
    return job.tick_at <= _ctx(ev).now


def _plan(job: JobSnapshot, ctx: Context) -> Plan:
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
        ctx.plan = Plan([slot], [], catch_up=False)
        return ctx.plan
    runs = ctx.misfire.catchup_limit if ctx.misfire.mode is Misfire.ALL else 1
    missed = _slots_between(ctx.schedule, slot, ctx.now, MAX_SKIPPED_RECORDS + runs)
    match ctx.misfire.mode:
        case Misfire.SKIP:
            ctx.plan = Plan([], missed, catch_up=False)
        case Misfire.LATEST:
            ctx.plan = Plan(missed[-1:], missed[:-1], catch_up=False)
        case Misfire.ALL:
            limit = ctx.misfire.catchup_limit
            ctx.plan = Plan(missed[-limit:], missed[:-limit], catch_up=True)
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


def _start(job: JobSnapshot, ctx: Context, slot: datetime | None, trigger_id: str | None):
    ctx.actions.append(StartInvocation(slot, trigger_id))
    job.active += 1


def _run(job: JobSnapshot, ctx: Context, slot: datetime | None, trigger_id: str | None) -> None:
    """Start a run for a slot or trigger, or apply the overlap policy if one is active."""
    policy = ctx.policy
    if job.active < policy.capacity and not job.buffered:
        _start(job, ctx, slot, trigger_id)
        return
    job.overruns += 1
    if policy.mode is Overlap.CANCEL_OTHER:
        ctx.actions.append(AbortActive(Reason.CANCEL_OTHER))
        job.active = 0
        _start(job, ctx, slot, trigger_id)
    elif job.buffered < policy.buffer_size:
        ctx.actions.append(BufferInvocation(slot, trigger_id))
        job.buffered += 1
    else:
        ctx.actions.append(RecordSkipped(slot, Reason.OVERLAP, trigger_id))


def _queue(job: JobSnapshot, ctx: Context, slot: datetime) -> None:
    """A catch-up run: start if there is room, else wait for a place."""
    if job.active < ctx.policy.capacity and not job.buffered:
        _start(job, ctx, slot, None)
    else:
        ctx.actions.append(BufferInvocation(slot, None))
        job.buffered += 1


def fire(ev: EventData) -> None:
    job: JobSnapshot = ev.model
    ctx = _ctx(ev)
    plan = _plan(job, ctx)
    for slot in plan.skip:
        ctx.actions.append(RecordSkipped(slot, Reason.MISFIRE))
    for slot in plan.run:
        if plan.catch_up:
            _queue(job, ctx, slot)
        else:
            _run(job, ctx, slot, None)
    last = max(plan.run + plan.skip)
    _set_tick(job, ctx, None if ctx.schedule.relative else ctx.schedule.next_after(last))


def runs_nothing(ev: EventData) -> bool:
    return not _plan(ev.model, _ctx(ev)).run


def _catches_up(ev: EventData) -> bool:
    return _plan(ev.model, _ctx(ev)).catch_up


def trigger(ev: EventData) -> None:
    ctx = _ctx(ev)
    assert isinstance(ctx.event, Trigger)
    _run(ev.model, ctx, None, ctx.event.trigger_id)


def skip_idle_trigger(ev: EventData) -> None:
    ctx = _ctx(ev)
    assert isinstance(ctx.event, Trigger)
    reason = Reason.PAUSED if ev.model.state is JobState.SUSPENDED else Reason.DISABLED
    ctx.actions.append(RecordSkipped(None, reason, ctx.event.trigger_id))


def lenient(ev: EventData) -> bool:
    return not _ctx(ev).event.strict  # type: ignore[union-attr]


def has_room(ev: EventData) -> bool:
    """A run may start alongside the active ones (``allow``)."""
    job: JobSnapshot = ev.model
    return job.active < _ctx(ev).policy.capacity and not job.buffered


def cancels(ev: EventData) -> bool:
    ctx = _ctx(ev)
    if ctx.policy.mode is not Overlap.CANCEL_OTHER:
        return False
    return not (isinstance(ctx.event, Tick) and _catches_up(ev))


def mark_running(ev: EventData) -> None:
    ev.model.invocation_running = True


def one_fewer(ev: EventData) -> None:
    job: JobSnapshot = ev.model
    job.active = max(0, job.active - 1)
    if not job.active:
        job.invocation_id = None
        job.invocation_running = False


def may_start_buffered(ev: EventData) -> bool:
    """After this event, a waiting run has a free place."""
    job: JobSnapshot = ev.model
    return job.buffered > 0 and _active_after(ev) < _ctx(ev).policy.capacity


def last_active(ev: EventData) -> bool:
    return _active_after(ev) == 0


def _active_after(ev: EventData) -> int:
    """Active runs once this event is applied: a finish or an abandon frees a place."""
    job: JobSnapshot = ev.model
    frees = isinstance(_ctx(ev).event, InvocationFinished | Abandon)
    return max(0, job.active - 1) if frees else job.active


def start_buffered(ev: EventData) -> None:
    job: JobSnapshot = ev.model
    _ctx(ev).actions.append(StartBuffered())
    job.buffered -= 1
    job.active += 1


def finish(ev: EventData) -> None:
    """The last active run ended: a fixed delay counts from now."""
    one_fewer(ev)
    ctx = _ctx(ev)
    if ctx.schedule.relative:
        assert isinstance(ctx.event, InvocationFinished)
        _set_tick(ev.model, ctx, ctx.schedule.next_after(ctx.event.at))


def abandon(ev: EventData) -> None:
    """The row for that slot or trigger existed already, so nothing started: undo the
    count; a fixed delay, which arms only when idle, counts from now."""
    one_fewer(ev)
    ctx = _ctx(ev)
    if ctx.schedule.relative and not ev.model.active:
        _set_tick(ev.model, ctx, ctx.schedule.next_after(ctx.now))


def unbuffer(ev: EventData) -> None:
    ev.model.buffered = max(0, ev.model.buffered - 1)


def has_running(ev: EventData) -> bool:
    return ev.model.active > 0 and ev.model.invocation_running


def has_active(ev: EventData) -> bool:
    return ev.model.active > 0
