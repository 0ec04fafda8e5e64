"""What a machine step asks the engine to do once (or while) it commits.

Actions are data, not calls: the engine performs them with an exhaustive ``match``, so
an action it does not know is a bug that raises instead of being silently dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from cronchain.statemachine.reasons import Reason


@dataclass(frozen=True)
class TickLater:
    """Send ``tick_later(job, nonce)`` so that it runs at ``when`` (parked until the watchdog
    sends it if that is past the ETA horizon)."""

    when: datetime
    nonce: int


@dataclass(frozen=True)
class StartInvocation:
    """Create the invocation row for a slot (scheduled) or a trigger id (manual), then
    send ``start_invocation`` for it after the commit."""

    slot: datetime | None
    trigger_id: str | None = None


@dataclass(frozen=True)
class RecordSkipped:
    """Record a slot (or a manual trigger) that was deliberately not run, with why."""

    slot: datetime | None
    reason: Reason
    trigger_id: str | None = None


@dataclass(frozen=True)
class BufferInvocation:
    """Create the invocation row for a slot (or trigger id) as WAITING: it starts when
    the job has a free place (overlap policies ``buffer_one`` and ``buffer_all``)."""

    slot: datetime | None
    trigger_id: str | None = None


@dataclass(frozen=True)
class StartBuffered:
    """Move the oldest WAITING invocation to STARTING and send its start."""


@dataclass(frozen=True)
class AbortActive:
    """End every STARTING or RUNNING invocation of the job as ABORTED (``cancel_other``)."""

    reason: Reason


Action = (
    TickLater | StartInvocation | RecordSkipped | BufferInvocation | StartBuffered | AbortActive
)
