"""An attempt's call and its outcome: what the engine sends and what a worker reports."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from cronchain.scheduler import outside
from cronchain.scheduler.debuglog import LINE_LIMIT
from cronchain.scheduler.spec.model import DEFAULT_PRIORITY
from cronchain.statemachine import InvocationStatus
from cronchain.statemachine.reasons import Reason

# A job's priority is 0-9, 9 first.


@dataclass(frozen=True)
class Call:
    invocation_id: int
    attempt: int  # the epoch: reports from any other attempt are refused
    job: str
    slot: datetime | None
    options: dict[str, Any]
    lease: timedelta = timedelta(seconds=60)
    timeout: timedelta | None = None
    kind: str = "noop"
    # The run's job: it travels with the attempt, and a claim, heartbeat or outcome is
    # recorded only on a run of that job (the engine's calls always name it).
    job_id: int | None = None
    priority: int = DEFAULT_PRIORITY  # the job's: that of the attempt's Celery messages
    trigger_id: str | None = None  # a triggered run's, which has no slot
    # Where the run is filed (its slot, or when it was triggered): claims and outcomes
    # find its row by its id and this, in one month's partition of history.
    filed_at: datetime | None = None

    @property
    def lost(self) -> threading.Event:
        """Set when the attempt is over for its maker (its lease lost, its worker
        stopping): stop. Made when first asked for, once, whichever thread asks (the
        dict's ``setdefault`` is atomic): the control path makes a call for each run it
        sends and never waits on one, and the Event was two fifths of making a call
        (8.3 against 5.0 µs). A copy of the call (``dataclasses.replace``) has its own."""
        event = self.__dict__.get("_lost")
        return event if event is not None else self.__dict__.setdefault("_lost", threading.Event())

    @property
    def key(self) -> str:
        """The run as a receiver should know it, the same on every attempt: its job and
        slot, or its job and trigger. Not its invocation id: a database that lost its last
        transactions (an asynchronous replica promoted, a backup restored) hands those ids
        out again, and fires the lost slots again; this key names one run, and names a
        slot fired again as before, so the receiver can drop the second."""
        if self.slot is not None:
            if self.slot.tzinfo is None:
                raise ValueError(f"a slot without a time zone: {self.slot}")
            slot = self.slot.astimezone(UTC)
            spelled = slot.strftime(
                "%Y-%m-%dT%H:%M:%S.%fZ" if slot.microsecond else "%Y-%m-%dT%H:%M:%SZ"
            )
            return f"cronchain/{self.job}/{spelled}"
        if self.trigger_id is not None:
            return f"cronchain/{self.job}/trigger-{self.trigger_id}"
        return f"cronchain/{self.job}/run-{self.invocation_id}"  # neither: not the engine's

    @property
    def task_id(self) -> str:
        """The Celery task id of this attempt, known before it is sent (to revoke it)."""
        return celery_task_id(self.invocation_id, self.attempt)

    @property
    def ref(self) -> tuple[int, int, int | None, datetime | None]:
        """The attempt as a worker names it to claim it (``core.attempts.AttemptRef``)."""
        return (self.invocation_id, self.attempt, self.job_id, self.filed_at)

    @property
    def filed_us(self) -> int | None:
        """Where the run is filed as its messages carry it: ``filed_at`` in microseconds
        since 1970, exactly (a plain integer, which every serializer keeps as it is)."""
        return None if self.filed_at is None else (self.filed_at - EPOCH) // MICROSECOND


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)


def filed_from(us: int | None) -> datetime | None:
    """``Call.filed_us`` as the worker reads it back; None for none, or for a number no
    date has (a malformed message)."""
    if us is None:
        return None
    try:
        return EPOCH + us * MICROSECOND
    except OverflowError:
        return None


def message_priority(priority: int, broker_url: str | None) -> int:
    """A job's priority (9 first) as the broker reads a message's. Redis's transport
    takes 0 first: kombu's default steps (0, 3, 6, 9) keep a list for each of 0-2, 3-5,
    6-8 and 9, so a job's priorities 9-7, then 6-4, then 3-1, then 0 are taken first,
    each group in the order sent. RabbitMQ takes the highest first (in a queue declared
    with ``x-max-priority``), as the job's own number says; so does any other broker."""
    scheme = (broker_url or "amqp://").split("://", 1)[0].lower()
    return 9 - priority if scheme.startswith(("redis", "sentinel")) else priority


def celery_task_id(invocation_id: int, attempt: int) -> str:
    return f"cronchain-{invocation_id}-{attempt}"


@dataclass(frozen=True)
class Outcome:
    status: InvocationStatus
    error: str | None = None
    reason: str | None = None  # a word of statemachine.reasons (as a report carries it)
    log: tuple[str, ...] = ()  # lines for the invocation's debug log

    def recorded(self) -> Outcome:
        """This outcome as it is stored, whoever reported it: every text in it from
        outside (an error, a response, what a task raised) storable and bounded."""
        if self.error is None and self.reason is None and not self.log:
            return self  # a plain success: the hot path
        return Outcome(
            self.status,
            bounded_error(self.error),
            outside.kept(self.reason, REASON_LIMIT),
            tuple(outside.kept(line, LINE_LIMIT) for line in self.log),
        )

    def without_text(self) -> Outcome:
        """This outcome with none of its text but its reason (cronchain's own word,
        which decides a retry): what is recorded when the database refused the text,
        so that the run's end is never lost for what a task or an endpoint said (the
        log says why, at ERROR: ``scheduler.core.recording``)."""
        note = "its text could not be stored"
        error = note if self.error is not None else None
        return Outcome(self.status, error, outside.kept(self.reason, REASON_LIMIT), (note,))

    @classmethod
    def failed(cls, error: str, reason: Reason | None = None, log: tuple[str, ...] = ()) -> Outcome:
        return cls(InvocationStatus.FAILED, error, reason, log)


SUCCEEDED = Outcome(InvocationStatus.SUCCEEDED)

ERROR_LIMIT = 4 * 1024  # characters of an attempt's error that are recorded
REASON_LIMIT = 200  # characters of its reason, a short cause


def bounded_error(error: str | None, limit: int = ERROR_LIMIT) -> str | None:
    """``error`` as an attempt records it (``Outcome.recorded``): storable, and at most
    ``limit`` characters, its start and its end kept (``scheduler.outside``)."""
    return outside.kept(error, limit)


class Invoker(Protocol):
    def invoke(self, call: Call) -> Outcome: ...
