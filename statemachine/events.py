"""The inputs of the job machine, one frozen dataclass per event."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Enable:
    """Start ticking a disabled job from the first slot after now."""


@dataclass(frozen=True)
class Disable:
    """Stop ticking; a running invocation is left to finish."""


@dataclass(frozen=True)
class Pause:
    reason: str | None = None


@dataclass(frozen=True)
class Resume:
    """Continue from the first slot after now, recording the slots missed while paused
    as SKIPPED ("paused"); with ``catch_up``, the misfire policy decides about them."""

    catch_up: bool = False


@dataclass(frozen=True)
class ScheduleChanged:
    """The schedule (or its time zone) was edited: the pending tick moves."""


@dataclass(frozen=True)
class Tick:
    nonce: int


@dataclass(frozen=True)
class Trigger:
    """Run now. ``strict`` (a user's command) refuses a paused or disabled job; a trigger
    from another job is recorded as SKIPPED there instead."""

    trigger_id: str
    strict: bool = True


@dataclass(frozen=True)
class Backfill:
    """A user's backfill of past slots. Its runs go beside the schedule, so the machine
    changes nothing for it; but a disabled job refuses it, as it refuses a trigger. A
    paused job takes it: a pause stops the schedule, not the runs a user asks for."""


@dataclass(frozen=True)
class InvocationStarted:
    invocation_id: int


@dataclass(frozen=True)
class InvocationFinished:
    invocation_id: int
    at: datetime


@dataclass(frozen=True)
class Repair:
    """The watchdog found the pending tick overdue: assume its message was lost."""


@dataclass(frozen=True)
class Abandon:
    """The invocation row for the slot already existed: nothing was started after all."""

    invocation_id: int | None = None


@dataclass(frozen=True)
class Unbuffer:
    """A WAITING invocation was aborted, or its row existed already."""


Event = (
    Enable
    | Disable
    | Pause
    | Resume
    | ScheduleChanged
    | Tick
    | Trigger
    | Backfill
    | InvocationStarted
    | InvocationFinished
    | Repair
    | Abandon
    | Unbuffer
)
