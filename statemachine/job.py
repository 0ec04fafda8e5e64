"""The job machine, after LUCI Scheduler's ``engine/cron/machine.go``.

A step is ``(snapshot, event, now, schedule, nonce) -> (snapshot', actions)``. The
``transitions`` machine below is built once per process; its callbacks
(:mod:`statemachine.callbacks`) only change the snapshot and append actions. A step
runs the machine's own resolved transitions (``_TABLE``, read from it once) on a plain
snapshot dataclass, without ``Event.trigger``'s generic dispatch, which was a fifth of
the control path's CPU; ``tests/unit/test_machine_table.py`` holds the two to the same
answers.

Ticks carry a nonce. A tick whose nonce is not the pending one (stale, repeated, or sent
before a pause) is ignored, so a tick delivered twice can never fire a slot twice. The
next slot is computed from the slot just handled, never from the time the worker ran.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from transitions import EventData, Machine

from cronchain.statemachine import callbacks as cb
from cronchain.statemachine.actions import Action
from cronchain.statemachine.events import Event, Repair, Tick
from cronchain.statemachine.policy import MisfirePolicy, OverlapPolicy
from cronchain.statemachine.snapshot import Context, JobSnapshot, JobState, Schedule, Step

__all__ = ["InvalidTransition", "JobSnapshot", "JobState", "Schedule", "Step", "step"]

# transitions logs every callback at INFO, three lines per state change: in any worker
# that steps a machine (cronchain's, or a project's own through install(app)) they would
# drown the log. Its warnings still show.
logging.getLogger("transitions").setLevel(logging.WARNING)

DEFAULT_POLICY = OverlapPolicy()
DEFAULT_MISFIRE = MisfirePolicy()


class InvalidTransition(Exception):
    """The event is not allowed in the job's state (for example: trigger a paused job)."""

    def __init__(self, event: Event, state: JobState):
        super().__init__(f"cannot {_event_name(event)} a job that is {state.value}")
        self.event = event
        self.state = state


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
    model = snapshot.copy()
    actions: list[Action] = []
    if not _ignored(snapshot, event):
        ctx = Context(now, schedule, nonce, event, actions, policy, misfire)
        fired = EventData(None, None, _MACHINE, model, (), {"ctx": ctx})
        for conditions, dest, after in _TABLE.get((_event_name(event), snapshot.state), ()):
            if all(condition(fired) for condition in conditions):
                if dest is not None:
                    model.state = dest
                for callback in after:
                    callback(fired)
                break
        else:
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
    return _NAMES.get(type(event)) or type(event).__name__.lower()


# --- the machine, built once ----------------------------------------------------------

S = JobState
ACTIVE = [S.SCHEDULED, S.QUEUED, S.RUNNING, S.OVERRUN]
BUSY = [S.QUEUED, S.RUNNING, S.OVERRUN]
IDLE = [S.DISABLED, S.SUSPENDED]


def _restore(
    trigger: str, source: JobState, arm: Callable[..., None] = cb.arm
) -> list[dict[str, Any]]:
    """Leaving DISABLED or SUSPENDED lands in the state the invocations are in; a run
    that waited while the job was idle starts now."""
    return [
        dict(
            trigger=trigger,
            source=source,
            dest=S.QUEUED,
            conditions=[cb.may_start_buffered],
            after=[arm, cb.start_buffered],
        ),
        dict(
            trigger=trigger, source=source, dest=S.RUNNING, conditions=[cb.has_running], after=[arm]
        ),
        dict(
            trigger=trigger, source=source, dest=S.QUEUED, conditions=[cb.has_active], after=[arm]
        ),
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
            conditions=[cb.may_start_buffered],
            after=[cb.one_fewer, cb.start_buffered],
        ),
        dict(
            trigger=trigger,
            source=BUSY,
            dest=S.SCHEDULED,
            conditions=[cb.last_active],
            after=[last],
        ),
        _internal(trigger, [*ACTIVE, *IDLE], cb.one_fewer),
    ]


def _overlap(trigger: str, after: Callable[..., None], *due: Callable[..., bool]):
    """A slot or trigger while busy: ``cancel_other`` starts afresh, ``allow`` starts
    alongside while there is room, the rest wait or are skipped (an overrun)."""
    return [
        dict(
            trigger=trigger,
            source=BUSY,
            dest=S.QUEUED,
            conditions=[*due, cb.cancels],
            after=[after],
        ),
        dict(
            trigger=trigger, source=BUSY, dest=None, conditions=[*due, cb.has_room], after=[after]
        ),
        dict(trigger=trigger, source=BUSY, dest=S.OVERRUN, conditions=[*due], after=[after]),
    ]


def _internal(trigger: str, source: list[JobState], *after: Callable[..., None]):
    return dict(trigger=trigger, source=source, dest=None, after=list(after))


_TRANSITIONS: list[dict[str, Any]] = [
    *_restore("enable", S.DISABLED),
    _internal("enable", [*ACTIVE, S.SUSPENDED]),
    dict(trigger="disable", source=[*ACTIVE, S.SUSPENDED], dest=S.DISABLED, after=[cb.disarm]),
    _internal("disable", [S.DISABLED]),
    dict(trigger="pause", source=ACTIVE, dest=S.SUSPENDED, after=[cb.suspend]),
    _internal("pause", [S.SUSPENDED]),
    *_restore("resume", S.SUSPENDED, cb.resume),
    _internal("resume", ACTIVE),
    _internal("schedulechanged", ACTIVE, cb.arm),
    _internal("schedulechanged", IDLE),
    _internal("tick", ACTIVE, cb.fire) | dict(conditions=[cb.is_due, cb.runs_nothing]),
    dict(
        trigger="tick", source=S.SCHEDULED, dest=S.QUEUED, conditions=[cb.is_due], after=[cb.fire]
    ),
    *_overlap("tick", cb.fire, cb.is_due),
    _internal("tick", ACTIVE, cb.rearm),  # early: a hop of an older version, or a clock ahead
    dict(trigger="trigger", source=S.SCHEDULED, dest=S.QUEUED, after=[cb.trigger]),
    *_overlap("trigger", cb.trigger),
    dict(
        trigger="trigger",
        source=IDLE,
        dest=None,
        conditions=[cb.lenient],
        after=[cb.skip_idle_trigger],
    ),
    _internal("backfill", [*ACTIVE, S.SUSPENDED]),  # refused when DISABLED
    dict(trigger="invocationstarted", source=S.QUEUED, dest=S.RUNNING, after=[cb.mark_running]),
    _internal("invocationstarted", [S.SCHEDULED, S.RUNNING, S.OVERRUN, *IDLE], cb.mark_running),
    *_freed("invocationfinished", cb.finish),
    *_freed("abandon", cb.abandon),
    _internal("unbuffer", [*ACTIVE, *IDLE], cb.unbuffer),
    _internal("repair", ACTIVE, cb.rearm),
]

_MACHINE = Machine(
    model=None,
    states=list(JobState),
    transitions=_TRANSITIONS,
    initial=S.DISABLED,
    auto_transitions=False,
    send_event=True,
)

_NAMES: dict[type, str] = {e: e.__name__.lower() for e in Event.__args__}  # type: ignore[attr-defined]

# Every event type must have a trigger, or step() would fail with a KeyError at run time.
_MISSING = set(_NAMES.values()) - set(_MACHINE.events)
assert not _MISSING, f"events without a trigger: {_MISSING}"

# An arm of an event from one state: its conditions, its destination (None: the state
# stays), its callbacks.
Conditions = tuple[Callable[[EventData], bool], ...]
Arm = tuple[Conditions, JobState | None, tuple[Callable[[EventData], None], ...]]


def _arms(machine: Machine) -> dict[tuple[str, JobState], tuple[Arm, ...]]:
    """Each event's transitions from each state, in the machine's order, as resolved by
    ``transitions``. The table holds only what this machine uses: conditions that must
    hold, destinations and ``after`` callbacks. Anything else (``unless``, ``before``,
    ``prepare``, a state's ``on_enter``, machine-wide callbacks) would be skipped by
    ``step``, so it is refused here, when the module loads."""
    machine_wide = ("prepare_event", "before_state_change", "after_state_change")
    _refuse(any(getattr(machine, name) for name in (*machine_wide, "finalize_event")), "")
    _refuse(bool(machine.on_exception or machine.on_final), "")
    for state in machine.states.values():
        _refuse(bool(state.on_enter or state.on_exit or state.final), state)
    table: dict[tuple[str, JobState], tuple[Arm, ...]] = {}
    for name, event in machine.events.items():
        for source, transitions in event.transitions.items():
            arms = []
            for t in transitions:
                _refuse(bool(t.prepare or t.before), t)
                _refuse(not all(c.target for c in t.conditions), t)  # an ``unless``
                callables = [c.func for c in t.conditions] + list(t.after)
                _refuse(not all(callable(f) for f in callables), t)  # a name to resolve
                dest = machine.get_state(t.dest).value if t.dest else None
                arms.append((tuple(c.func for c in t.conditions), dest, tuple(t.after)))
            table[name, JobState(source)] = tuple(arms)
    return table


def _refuse(found: bool, where: object) -> None:
    if found:
        raise TypeError(f"the job machine uses what step() does not run: {where or 'machine'}")


_TABLE = _arms(_MACHINE)
