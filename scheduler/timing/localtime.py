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

ZERO = timedelta(0)


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
    """Where the naive wall-clock time ``local`` falls in ``zone``.

    zoneinfo reads a reading in a fold with the offset before the transition when
    ``fold=0`` and the one after when ``fold=1`` (PEP 495), and a reading in a gap the
    same way; so the two offsets tell the three cases apart without a round trip."""
    before = local.replace(tzinfo=zone, fold=0).utcoffset() or ZERO
    after = local.replace(tzinfo=zone, fold=1).utcoffset() or ZERO
    read_before = (local - before).replace(tzinfo=UTC)
    if before == after:
        return Resolved(Kind.PLAIN, read_before)
    read_after = (local - after).replace(tzinfo=UTC)
    if before > after:  # the clocks went back: the reading came twice
        return Resolved(Kind.FOLD, read_before, read_after)
    # The clocks went forward, past the reading: the transition lies between the two.
    return Resolved(Kind.GAP, transition_between(read_after, read_before, zone))


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
        step_end = t + min(timedelta(hours=12), end - t)  # never past datetime's range
        if t.astimezone(zone).utcoffset() != step_end.astimezone(zone).utcoffset():
            at = transition_between(t, step_end, zone)
            found.append(
                Transition(
                    at,
                    (at - timedelta(seconds=1)).astimezone(zone).utcoffset() or ZERO,
                    at.astimezone(zone).utcoffset() or ZERO,
                )
            )
            t = at
        else:
            t = step_end
    return found


def wall(t: datetime, zone: ZoneInfo) -> datetime:
    """The naive wall-clock reading of instant ``t`` in ``zone``."""
    return t.astimezone(zone).replace(tzinfo=None)


def fold_occurrence(t: datetime, zone: ZoneInfo) -> tuple[int, timedelta]:
    """Where instant ``t`` stands in a fold: ``(0, length)`` at the first occurrence of a
    reading the clocks show twice, ``(1, length)`` at the second, ``(0, 0)`` anywhere
    else; ``length`` is how far the clocks went back."""
    local = t.astimezone(zone)
    other = local.replace(fold=1 - local.fold).utcoffset() or ZERO
    return local.fold, abs((local.utcoffset() or ZERO) - other)
