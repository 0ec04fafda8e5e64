"""How a feature plugs into the core, which names none (docs/design.md).

The core (the engine, a run's life, tick batches, the group commit of outcomes) hosts the
job machine. A feature joins it at four points, each a protocol here; ``scheduler.engine``
registers cronchain's own, in order, as :class:`Plugins`:

- a :class:`Hold` joins the admission chain: a run about to start passes each hold in
  turn (upstreams, gates, a pool) and waits at the first that holds it; when that wait
  ends, the chain goes on from the next hold (``Host.go_on``);
- a :class:`RunEnd` hears each end of a run (and each failed attempt that retries) in the
  transaction that records it: alerts, pools, requirements, backfill, triggers; a
  :class:`Claimed` hears a worker claim an attempt (alerts of a late start);
- a :class:`Sweeper` is one of the watchdog's duties, run by its budgeted loop;
- a :data:`InProcessHandler` carries out, once a transaction has committed, the messages of
  its own kind that the feature asked for (``effects.InProcess``): nothing is sent for them.

A plug-in sees the core as a :class:`Host`: a clock, the grace within which a run must
begin, transactions with a run's rows locked, a job's machine to feed, the one place
that decides what follows a run's end (``runs.finished``), the start of the runs that
end released (``attempts.begin_released``) and the sending of what was committed.
Nothing more of the engine is its own, and it is typed against this, never against the
engine, so that the engine imports no feature (``pyproject.toml``'s import-linter
contracts, ``tests/unit/test_layers.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from cronchain.scheduler.core.effects import Message, Stepped
    from cronchain.scheduler.core.stepping import Stepper
    from cronchain.scheduler.invokers import Outcome
    from cronchain.scheduler.storage.rows import InvocationRow, JobRow
    from cronchain.statemachine import Event


@runtime_checkable
class RunStarts(Protocol):
    def begin_released(
        self, conn: Connection, messages: list[Message], held: Any = None
    ) -> list[Message]:
        """The runs ``messages`` ask to start, begun in this transaction."""
        ...


@runtime_checkable
class RunEnds(Protocol):
    def finished(
        self,
        conn: Connection,
        job: JobRow,
        inv: InvocationRow,
        outcome: Outcome,
        now: datetime,
        event: Event | None = None,
    ) -> Stepped:
        """What follows a run's end, its row written ended as ``outcome`` says."""
        ...

    def record_outcome(
        self,
        conn: Connection,
        inv: InvocationRow,
        job: JobRow,
        outcome: Outcome,
        now: datetime,
        held: Any = None,
    ) -> Stepped:
        """End a locked attempt as ``outcome`` says; with ``held`` (an
        ``outcome_batch.HeldWrites``), its writes are held with others'."""
        ...

    def reads(self, job: JobRow, inv: InvocationRow, outcome: Outcome) -> bool:
        """Whether a listener of this end reads or writes rows beyond the run and its job."""
        ...


@runtime_checkable
class Host(Protocol):
    grace: timedelta
    clock: Callable[[], datetime]
    rand: Callable[[], float]

    @property
    def repair_grace(self) -> timedelta: ...

    @property
    def attempts(self) -> RunStarts: ...

    @property
    def runs(self) -> RunEnds: ...

    def transaction(self) -> AbstractContextManager[Connection]: ...

    def lock(
        self,
        conn: Connection,
        invocation_id: int,
        job_id: int | None = None,
        filed_at: datetime | None = None,
    ) -> tuple[InvocationRow, JobRow] | None: ...

    def feed(self, conn: Connection, job: JobRow, event: Event, now: datetime) -> Stepped: ...

    def go_on(
        self,
        conn: Connection,
        job: JobRow,
        inv: InvocationRow,
        columns: dict[str, Any],
        now: datetime,
        after: str | None,
    ) -> list[Message]: ...

    def soon(self, work: Callable[[Any, list[int]], None], job_ids: list[int]) -> None: ...

    def send(self, messages: list[Message]) -> None: ...


@runtime_checkable
class CoreHost(Host, Protocol):
    """What the core's own parts (a run's life, tick batches, the group commit) use of
    the engine that holds them: a Host, and how it steps a job's machine (its
    ``stepper``, which also holds its grace and horizon). They are typed against this,
    never against the engine, so that no import of the core loops back."""

    leases: Any
    plugins: Plugins
    stepper: Stepper

    def feed(  # type: ignore[override]
        self, conn: Connection, job: JobRow, event: Event, now: datetime, **flags: Any
    ) -> Stepped: ...


# --- the admission chain ----------------------------------------------------------------


@dataclass(frozen=True)
class Admitting:
    """A run about to start, as each hold of the chain sees it: its job, the time its
    waits count from (its slot, or when it was triggered), its log so far, and what
    the holds it passed recorded of it (``checks``)."""

    job: JobRow
    reference: datetime
    log: str | None = None
    checks: dict[str, Any] | None = None


def _nothing(invocation_id: int) -> list[Message]:
    return []


@dataclass
class Held:
    """A hold's answer for a run it holds: the columns that make it wait (WAITING, the
    hold's name as its reason, until when, what it waits for) and what to send once its
    row is written, given the row's id."""

    columns: dict[str, Any]
    then: Callable[[int], list[Message]] = _nothing


class Hold(Protocol):
    """One link of the admission chain. ``admit`` answers :class:`Held` to hold the run,
    else the columns to write of it as it passes (what was checked: ``{}`` for a job
    the hold has nothing to say about). It may read, never wait: the caller holds the
    job's row. A run it holds is WAITING with the hold's ``name`` as its reason; the
    watchdog hands it to ``lapse`` once its deadline passes."""

    name: str

    def admit(self, conn: Connection, run: Admitting, now: datetime) -> Held | dict[str, Any]: ...

    def lapse(
        self, host: Host, conn: Connection, inv: InvocationRow, job: JobRow, now: datetime
    ) -> Stepped:
        """The run may wait for this hold no longer (its deadline passed; both rows
        locked): it goes on, or ends as the job's ``on_unmet`` says. A hold whose wait
        has no deadline (a pool's) is never asked."""
        ...


# --- a run's end --------------------------------------------------------------------------


@dataclass
class Ended:
    """A run's end as its listeners hear it, in the transaction that records it.
    ``final`` is False for a failed attempt that is retried. ``was`` is the run's row
    before it ended (its status then, its pool, whether it was a backfill's).
    ``fresh``: the successes this transaction records and has not written yet (a group
    of outcomes holds its writes), by job ref and where each is filed; this one's
    among them. ``release`` takes runs a listener let start, begun in this transaction
    once every listener has heard (``Attempts.begin_released``); ``after`` takes work that
    must wait until the run's own job has heard the end."""

    job: JobRow
    was: InvocationRow
    outcome: Outcome
    now: datetime
    final: bool = True
    fresh: dict[str, datetime] = field(default_factory=dict)
    released: list[Message] = field(default_factory=list)
    later: list[Callable[[], list[Message]]] = field(default_factory=list)

    @property
    def status(self) -> str:
        return self.outcome.status.value

    def release(self, messages: list[Message]) -> None:
        self.released += messages

    def after(self, work: Callable[[], list[Message]]) -> None:
        self.later.append(work)


class RunEnd(Protocol):
    """A listener of runs' ends. ``reads``: whether hearing this end reads rows that a
    group of outcomes may hold unwritten, so that they are written first."""

    def reads(self, job: JobRow, was: InvocationRow, status: str) -> bool: ...

    def ended(self, host: Host, conn: Connection, end: Ended) -> list[Message]: ...


class Claimed(Protocol):
    """Hears a worker claim an attempt, in the claim's transaction (a late start)."""

    def claimed(
        self, conn: Connection, job: JobRow, inv: InvocationRow, now: datetime
    ) -> list[Message]: ...


# --- the watchdog's duties ------------------------------------------------------------------


class Sweeper(Protocol):
    """One duty of the watchdog's pass, in a file of its own. ``sweep`` does at most
    ``limit`` of it, each in transactions of its own, and returns how many it did, by
    the name ``WatchdogReport`` counts it under, and what to send."""

    def sweep(
        self, host: Host, now: datetime, limit: int, backlog: timedelta
    ) -> tuple[dict[str, int], list[Message]]: ...


# What carries out a kind of in-process message, once the transaction that asked commits.
InProcessHandler = Callable[[Host, list[Any]], None]


@dataclass(frozen=True)
class Plugins:
    """The features a core runs with, each list in its order: the admission chain's
    holds, the listeners of a run's end and of a claim, the watchdog's sweepers, and the
    handlers of in-process messages by their type."""

    holds: tuple[Hold, ...] = ()
    run_ends: tuple[RunEnd, ...] = ()
    claims: tuple[Claimed, ...] = ()
    sweepers: tuple[Sweeper, ...] = ()
    in_process: Mapping[type, InProcessHandler] = field(default_factory=dict)
