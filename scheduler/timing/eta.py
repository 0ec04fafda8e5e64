"""When a tick's message goes out: its slot, rounded up to the tick slack so that ticks
due a few milliseconds apart share a message, never in the past, and never further
ahead than the ETA horizon (a tick that cap would move is parked instead:
``Stepper.settle_tick``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def round_up(when: datetime, step: timedelta) -> datetime:
    """The first multiple of ``step`` (counted from the Unix epoch) at or after ``when``."""
    if not step:
        return when
    late = (when - EPOCH) % step
    return when + (step - late) if late else when


def tick_eta(when: datetime, now: datetime, *, slack: timedelta, horizon: timedelta) -> datetime:
    """Slots a few ms apart and past ticks (which go out now) share ETAs, and so
    messages; an ETA earlier than its rounded slot is one the horizon capped."""
    return max(min(round_up(when, slack), now + horizon), now)
