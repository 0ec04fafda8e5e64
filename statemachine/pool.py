"""Which runs waiting for a pool take the places that are free: pure.

A pool is a named number of places shared by jobs (``pools: {gpu: 4}``). A run that finds
its pool full waits; when places free, the waiters take them highest priority first,
then earliest slot. A waiter gains one priority step for every ``AGING`` it has waited,
so that a steady stream of high priorities cannot keep a low one waiting forever: after
``(9 - p) * AGING`` a waiter of priority ``p`` outranks any newcomer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

AGING = timedelta(minutes=10)


@dataclass(frozen=True)
class Waiter:
    """A run waiting for a place: its priority (0-9, 9 first), since when it waits, and
    its slot (a triggered run: when it was triggered)."""

    id: int
    priority: int
    since: datetime
    slot: datetime


def rank(waiter: Waiter, now: datetime) -> tuple[int, datetime, int]:
    """The sort key of a waiter at ``now``: lower goes first."""
    aged = max(now - waiter.since, timedelta(0)) // AGING
    return (-(waiter.priority + aged), waiter.slot, waiter.id)


def choose(waiters: Iterable[Waiter], free: int, now: datetime) -> list[Waiter]:
    """The waiters that take the ``free`` places, in the order they take them."""
    if free <= 0:
        return []
    return sorted(waiters, key=lambda w: rank(w, now))[:free]
