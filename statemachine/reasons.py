"""Why a run did not simply succeed: the one vocabulary of a run's ``reason``.

Every writer of a reason names it from here: the machine (a skipped slot), the
invokers and the worker hooks (a failed attempt), the watchdog (a run it ended), the
holds (what a run waits for). `cronchain history`, the page, ``explain`` and the
``reason`` label of ``/metrics`` show these words, and the reference's Reasons table is
written from ``MEANINGS`` at build time, so a reason cannot reach a user unexplained.
It lives beside the machine because the machine writes some of them and may import
nothing above it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from cronchain.statemachine.invocation import InvocationStatus as S


class Reason(StrEnum):
    """A run's reason, stored as its word: the words never change (rows, ``/metrics``
    labels and users' scripts read them)."""

    # Slots the machine does not run.
    OVERLAP = "overlap"
    MISFIRE = "misfire"
    PAUSED = "paused"
    DISABLED = "disabled"
    # Attempts that failed.
    ERROR = "error"
    STATUS = "status"
    LAUNCH = "launch"
    REFUSED = "refused"
    TIMEOUT = "timeout"
    LEASE_EXPIRED = "lease expired"
    SCHEDULE_TO_START = "schedule_to_start"
    # Runs ended by hand or by a newer one.
    ABORTED = "aborted"
    CANCEL_OTHER = "cancel_other"
    # What a WAITING run waits for; the holds' runs end with theirs when unmet.
    BUFFERED = "buffered"
    BACKFILL = "backfill"
    UPSTREAM = "upstream"
    GATE = "gate"
    POOL = "pool"


@dataclass(frozen=True)
class Meaning:
    """What a reason tells a reader: the statuses a run has with it, and a clause that
    reads after them ("the slot was SKIPPED (overlap): <means>")."""

    on: tuple[S, ...]
    means: str  # names of fields and settings in backquotes, as the reference shows them


# A failed attempt's reason stays on its run while the run waits for its retry
# (STARTING), until the next attempt is sent.
_FAILED = (S.FAILED, S.STARTING)


MEANINGS: dict[Reason, Meaning] = {
    Reason.OVERLAP: Meaning(
        (S.SKIPPED,), "another run was active and the overlap policy skipped the slot"
    ),
    Reason.MISFIRE: Meaning(
        (S.SKIPPED,),
        "handled later than the misfire grace; the misfire policy did not run it",
    ),
    Reason.PAUSED: Meaning(
        (S.SKIPPED,),
        "missed while the job was paused (resumed without catch-up), or triggered while it"
        " was paused",
    ),
    Reason.DISABLED: Meaning(
        (S.SKIPPED,),
        "a trigger that reached a disabled job (the slots a disabled job misses are not recorded)",
    ),
    Reason.ERROR: Meaning(_FAILED, "a `celery` task raised"),
    Reason.STATUS: Meaning(_FAILED, "an `http` answer not in `accept`"),
    Reason.LAUNCH: Meaning(
        _FAILED,
        "an `http` call that could not be made: the endpoint could not be reached, a"
        " header's `env` variable is not set, or a header's value holds CR, LF or NUL",
    ),
    Reason.REFUSED: Meaning(
        _FAILED,
        "an `http` job's address is not public and `CRONCHAIN_HTTP_ALLOW` does not list it",
    ),
    Reason.TIMEOUT: Meaning(
        _FAILED,
        "ran longer than the job's `timeout`, or an `http` call longer than `http.timeout`",
    ),
    Reason.LEASE_EXPIRED: Meaning(
        _FAILED,
        "its worker stopped renewing the lease (died, or was cut off); `retries` apply",
    ),
    Reason.SCHEDULE_TO_START: Meaning(
        (S.FAILED,), "no worker claimed it within `schedule_to_start`; not retried"
    ),
    Reason.ABORTED: Meaning((S.ABORTED,), "aborted by an operator"),
    Reason.CANCEL_OTHER: Meaning(
        (S.ABORTED,), "the next slot's run took its place (overlap policy `cancel_other`)"
    ),
    Reason.BUFFERED: Meaning(
        (S.WAITING,), "waits for the active run (the overlap policy, or a catch-up)"
    ),
    Reason.BACKFILL: Meaning(
        (S.WAITING,), "a backfill's run, waiting for its turn (`max_concurrent`)"
    ),
    Reason.UPSTREAM: Meaning(
        (S.WAITING, S.SKIPPED, S.FAILED),
        "waits for its upstreams; skipped or failed when they were not met within"
        " `max_wait` (`on_unmet: skip` or `fail`)",
    ),
    Reason.GATE: Meaning(
        (S.WAITING, S.SKIPPED, S.FAILED),
        "waits for its gates to answer yes; skipped or failed when they did not within"
        " `max_wait` (`on_unmet: skip` or `fail`)",
    ),
    Reason.POOL: Meaning((S.WAITING,), "waits for a place in its pool"),
}


def meaning_of(reason: str) -> str:
    """What ``reason`` means, as plain text; a word from elsewhere (an older row) as is."""
    meaning = MEANINGS.get(reason)  # type: ignore[call-overload]
    return reason if meaning is None else meaning.means.replace("`", "")


# What a WAITING run may wait for (/metrics reports each, at 0 when none waits).
WAITING_REASONS = tuple(r for r, m in MEANINGS.items() if S.WAITING in m.on)
