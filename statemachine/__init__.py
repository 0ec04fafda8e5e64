"""Pure state machines of cronchain: no database, no broker, no clock reads.

Everything the machines need from the outside world (the time, the schedule, a fresh
nonce) comes in as an argument, so a step is a plain function that tests roll with a
fixed clock, and the engine hosts it inside a database transaction.
"""

from cronchain.statemachine.actions import (
    AbortActive,
    Action,
    BufferInvocation,
    RecordSkipped,
    StartBuffered,
    StartInvocation,
    TickLater,
)
from cronchain.statemachine.events import (
    Abandon,
    Backfill,
    Disable,
    Enable,
    Event,
    InvocationFinished,
    InvocationStarted,
    Pause,
    Repair,
    Resume,
    ScheduleChanged,
    Tick,
    Trigger,
    Unbuffer,
)
from cronchain.statemachine.invocation import InvocationStatus, check_move
from cronchain.statemachine.job import (
    InvalidTransition,
    JobSnapshot,
    JobState,
    Schedule,
    Step,
    step,
)
from cronchain.statemachine.policy import (
    Misfire,
    MisfirePolicy,
    Overlap,
    OverlapPolicy,
    RetryPolicy,
)
from cronchain.statemachine.reasons import Reason

__all__ = [
    "Abandon",
    "AbortActive",
    "Backfill",
    "BufferInvocation",
    "Misfire",
    "MisfirePolicy",
    "Overlap",
    "OverlapPolicy",
    "RetryPolicy",
    "StartBuffered",
    "Unbuffer",
    "Action",
    "Disable",
    "Enable",
    "Event",
    "InvalidTransition",
    "InvocationFinished",
    "InvocationStarted",
    "InvocationStatus",
    "JobSnapshot",
    "JobState",
    "Pause",
    "Reason",
    "RecordSkipped",
    "Repair",
    "Resume",
    "Schedule",
    "ScheduleChanged",
    "StartInvocation",
    "Step",
    "Tick",
    "TickLater",
    "Trigger",
    "check_move",
    "step",
]
