"""Per-job policies the machines consult: what an overlap does, how failures retry.

Plain values, validated by ``scheduler.spec.jobspec``; the maths here is pure so that the
retry delays and the overlap decisions are tested without a clock or a database.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum


class Overlap(StrEnum):
    """What a due slot (or a trigger) does while the job has a run active."""

    SKIP = "skip"  # LUCI's default: record the slot SKIPPED ("overlap"), count the overrun
    BUFFER_ONE = "buffer_one"  # one run waits for the active one; further ones skipped
    BUFFER_ALL = "buffer_all"  # every run waits, up to max_buffered
    ALLOW = "allow"  # start alongside, up to max_concurrent runs at once
    CANCEL_OTHER = "cancel_other"  # abort the active runs, then start


@dataclass(frozen=True)
class OverlapPolicy:
    mode: Overlap = Overlap.SKIP
    max_buffered: int = 100
    max_concurrent: int = 10

    @property
    def capacity(self) -> int:
        """How many runs may be active at once."""
        return self.max_concurrent if self.mode is Overlap.ALLOW else 1

    @property
    def buffer_size(self) -> int:
        """How many runs may wait for a free place."""
        match self.mode:
            case Overlap.BUFFER_ONE:
                return 1
            case Overlap.BUFFER_ALL:
                return self.max_buffered
        return 0


class Misfire(StrEnum):
    """What a tick does when its slot is later than the grace allows (downtime, a late
    tick, a resume with catch-up): the policy covers every slot from it up to now."""

    SKIP = "skip"  # run none; record each SKIPPED ("misfire")
    LATEST = "latest"  # run the newest; record the others SKIPPED
    ALL = "all"  # run each, oldest first, one after another (up to catchup_limit)


@dataclass(frozen=True)
class MisfirePolicy:
    mode: Misfire = Misfire.LATEST
    grace: timedelta | None = None  # None: the schedule's own, scaled to its period
    catchup_limit: int = 100  # ``all`` runs at most this many; older ones are SKIPPED


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter; ``max_attempts`` counts the first attempt."""

    max_attempts: int = 1
    backoff: timedelta = timedelta(seconds=10)
    max_backoff: timedelta = timedelta(minutes=10)
    jitter: float = 0.1

    def delay(self, failed_attempt: int, unit: float) -> timedelta | None:
        """How long to wait after attempt ``failed_attempt`` (1-based) failed, or None
        when no attempts are left. ``unit`` is a random number in [0, 1)."""
        if failed_attempt >= self.max_attempts:
            return None
        # Doubled in float seconds, so that a late attempt's 2**n cannot overflow a
        # timedelta before the cap applies.
        doubled = self.backoff.total_seconds() * 2.0 ** min(failed_attempt - 1, 1000)
        base = min(timedelta(seconds=min(doubled, 1e9)), self.max_backoff)
        return base * (1 + self.jitter * (2 * unit - 1))
