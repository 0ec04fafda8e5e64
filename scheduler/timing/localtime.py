"""Wall-clock times to instants, around daylight saving transitions.

A local time can name no instant (it falls in a spring-forward gap) or two (it falls
in a fall-back fold). ``zoneinfo`` answers either case silently with the ``fold``
attribute; cron needs an explicit rule, so this module tells the cases apart and finds
the transition instants themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum
from zoneinfo import ZoneInfo

# No zone in the database has moved its clocks by more than this at once.
MAX_SHIFT = timedelta(hours=3)


class Kind(Enum):
    PLAIN = "plain"  # one instant
    GAP = "gap"  # no instant: the clocks skipped it
    FOLD = "fold"  # two instants: the clocks showed it twice


@dataclass(frozen=True)
class Resolved:
    kind: Kind
    first: datetime  # UTC; for a gap, the first instant after it
    second: datetime | None = None  # UTC; the second occurrence in a fold


def resolve(local: datetime, zone: ZoneInfo) -> Resolved:
    """Where the naive wall-clock time ``local`` falls in ``zone``."""
    early = local.replace(tzinfo=zone, fold=0).astimezone(UTC)
    late = local.replace(tzinfo=zone, fold=1).astimezone(UTC)
    if early == late:
        return Resolved(Kind.PLAIN, early)
    if early.astimezone(zone).replace(tzinfo=None) != local:
        # A gap: zoneinfo maps it with the offset before (fold=0) or after (fold=1) the
        # transition, so the transition lies between the two readings.
        return Resolved(Kind.GAP, transition_between(min(early, late), max(early, late), zone))
    return Resolved(Kind.FOLD, early, late)


def transition_between(start: datetime, end: datetime, zone: ZoneInfo) -> datetime:
    """The first instant in ``(start, end]`` whose UTC offset differs from ``start``'s;
    zone transitions fall on whole seconds, so a bisection on seconds finds it."""
    before = start.astimezone(zone).utcoffset()
    lo, hi = start.replace(microsecond=0), end
    while hi - lo > timedelta(seconds=1):
        mid = lo + (hi - lo) / 2
        mid = mid.replace(microsecond=0)
        if mid.astimezone(zone).utcoffset() == before:
            lo = mid
        else:
            hi = mid
    return hi


@dataclass(frozen=True)
class Transition:
    at: datetime  # UTC
    before: timedelta  # UTC offset before
    after: timedelta  # UTC offset after


def transitions(start: datetime, end: datetime, zone: ZoneInfo) -> list[Transition]:
    """Every offset change in ``(start, end]``, found by sampling each day (zones do not
    change twice in a day) and bisecting where the offset moved."""
    found: list[Transition] = []
    t = start
    while t < end:
        step_end = min(t + timedelta(hours=12), end)
        if t.astimezone(zone).utcoffset() != step_end.astimezone(zone).utcoffset():
            at = transition_between(t, step_end, zone)
            found.append(
                Transition(
                    at,
                    (at - timedelta(seconds=1)).astimezone(zone).utcoffset() or timedelta(0),
                    at.astimezone(zone).utcoffset() or timedelta(0),
                )
            )
            t = at
        else:
            t = step_end
    return found


def wall(t: datetime, zone: ZoneInfo) -> datetime:
    """The naive wall-clock reading of instant ``t`` in ``zone``."""
    return t.astimezone(zone).replace(tzinfo=None)


def is_ambiguous(t: datetime, zone: ZoneInfo) -> bool:
    """True when the wall-clock reading of ``t`` is one the clocks show twice."""
    return resolve(wall(t, zone), zone).kind is Kind.FOLD
