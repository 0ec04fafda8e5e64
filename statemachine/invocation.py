"""The invocation life cycle: which status may follow which.

The database repeats these rules as CHECK constraints; this table is what the engine
consults before it writes, so that an illegal move is an error with a name, not a row.
"""

from __future__ import annotations

from enum import StrEnum


class InvocationStatus(StrEnum):
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    ABORTED = "ABORTED"
    SKIPPED = "SKIPPED"
    WAITING = "WAITING"  # for room (overlap policy, backfill) or its upstreams


_MOVES: dict[InvocationStatus, frozenset[InvocationStatus]] = {
    InvocationStatus.WAITING: frozenset(
        {
            InvocationStatus.STARTING,
            InvocationStatus.ABORTED,
            InvocationStatus.SKIPPED,  # its upstreams were not met in time
            InvocationStatus.FAILED,  # the same, with ``on_unmet: fail``
        }
    ),
    InvocationStatus.STARTING: frozenset(
        {InvocationStatus.RUNNING, InvocationStatus.FAILED, InvocationStatus.ABORTED}
    ),
    InvocationStatus.RUNNING: frozenset(
        {
            InvocationStatus.SUCCEEDED,
            InvocationStatus.FAILED,
            InvocationStatus.ABORTED,
            InvocationStatus.STARTING,  # a failed attempt that will be retried
        }
    ),
}


def check_move(current: str, new: str) -> None:
    """Raise ``ValueError`` unless an invocation may go from ``current`` to ``new``."""
    if InvocationStatus(new) not in _MOVES.get(InvocationStatus(current), frozenset()):
        raise ValueError(f"an invocation cannot go from {current} to {new}")
