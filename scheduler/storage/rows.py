"""What the store reads: a job or an invocation row, as the engine uses them.

Each is read from a row of SQLAlchemy's (``from_row``, by its columns' names), or on
PostgreSQL's hot paths from the driver's values in the order of ``JOB_COLUMNS`` and
``INVOCATION_COLUMNS`` (``from_values``): the locks of a batch of ticks or runs read
them so, without SQLAlchemy's processing of each value, which cost more than the rest
of reading them (``bench.hot_path``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from functools import cached_property
from typing import Any, TypeVar

from sqlalchemy import Column, Row, Select, Table
from sqlalchemy.dialects.postgresql import psycopg

from cronchain.scheduler.errors import TransientError
from cronchain.scheduler.spec.controls import Controls, controls_of
from cronchain.scheduler.storage.models import UTCDateTime, invocations, jobs
from cronchain.statemachine import JobSnapshot, JobState, Reason

_Made = TypeVar("_Made")

# Why a run the machine started may still wait before its first attempt.
HOLDS = (Reason.UPSTREAM, Reason.GATE, Reason.POOL)


class ConcurrentUpdate(TransientError):
    """The job row changed under us (only possible without row locks): retry the step."""


@dataclass(frozen=True)
class JobRow:
    id: int
    project: str
    name: str
    kind: str
    schedule: str
    timezone: str
    spec: dict[str, Any]
    revision: str
    enabled: bool
    paused: bool
    pause_reason: str | None
    generation: int
    watchdog_at: datetime | None
    snapshot: JobSnapshot
    # A ``failed`` or ``retries_exhausted`` alert of the job awaits its ``recovered``.
    alert_failing: bool = False
    # Some job requires this one (``scheduler.workflows.upstream``).
    downstream: bool = False

    @property
    def ref(self) -> str:
        return f"{self.project}/{self.name}"

    @cached_property
    def controls(self) -> Controls:
        """The job's controls, parsed once for the row read: a fire's steps, claim and
        end ask for them a dozen times."""
        return controls_of(self)

    @property
    def days(self) -> str | None:
        """``both`` when the spec asks both day fields to match (``JobSpec.days``)."""
        return self.spec.get("days")

    @classmethod
    def from_row(cls, row: Row[Any], prefix: str = "") -> JobRow:
        """From a row of ``jobs``; ``prefix`` is that of its columns' labels in a join."""
        m = row._mapping
        snapshot = JobSnapshot(
            state=JobState(m[prefix + "state"]),
            tick_at=m[prefix + "tick_at"],
            tick_nonce=m[prefix + "tick_nonce"],
            invocation_id=m[prefix + "invocation_id"],
            invocation_running=m[prefix + "invocation_running"],
            overruns=m[prefix + "overruns"],
            active=m[prefix + "active"],
            buffered=m[prefix + "buffered"],
            missed_from=m[prefix + "missed_from"],
        )
        values = {k: m[prefix + k] for k in cls.__dataclass_fields__ if k != "snapshot"}
        return cls(**values, snapshot=snapshot)

    @classmethod
    def from_values(cls, values: Sequence[Any], at: int = 0) -> JobRow:
        """From the driver's values of ``JOB_COLUMNS``, beginning at ``at``: a hot
        path's read, without SQLAlchemy's processing (see the module's docstring)."""
        v = _in_utc(values[at : at + len(JOB_COLUMNS)], _JOB_TIMES)
        snapshot = _made(JobSnapshot, _SNAPSHOT_FIELDS, v[_JOB_OWN:])
        snapshot.state = JobState(snapshot.state)
        job = _made(cls, JOB_COLUMNS[:_JOB_OWN], v[:_JOB_OWN])
        job.__dict__["snapshot"] = snapshot
        return job


@dataclass(frozen=True)
class InvocationRow:
    id: int
    job_id: int
    slot: datetime | None
    trigger_id: str | None
    revision: str
    status: str
    attempt: int
    deadline: datetime | None
    started_at: datetime | None
    start_at: datetime | None
    timeout_at: datetime | None
    worker: str | None
    attempts: list[dict[str, Any]] | None
    log: str | None
    backfill: bool
    reason: str | None = None
    filed_at: datetime | None = None  # its slot, or when it was triggered
    checks: dict[str, Any] | None = None  # what was checked before it could start
    pool: str | None = None  # the pool whose place it takes

    @property
    def held(self) -> bool:
        """WAITING for its upstreams (``scheduler.workflows.upstream``) or a place in its pool
        (``scheduler.workflows.pools``): the job's machine counts it as the run it started, unlike
        a run that waits for its turn (buffered, backfill)."""
        return self.status == "WAITING" and self.reason in HOLDS

    @property
    def queued(self) -> bool:
        """WAITING for its turn (buffered, a backfill's), never begun nor held: the
        machine has not counted it as started."""
        return self.status == "WAITING" and not self.held

    @classmethod
    def from_row(cls, row: Row[Any], prefix: str = "") -> InvocationRow:
        m = row._mapping
        return cls(**{k: m[prefix + k] for k in cls.__dataclass_fields__})

    @classmethod
    def from_values(cls, values: Sequence[Any], at: int = 0) -> InvocationRow:
        """From the driver's values of ``INVOCATION_COLUMNS``, beginning at ``at``: a
        hot path's read, without SQLAlchemy's processing (see the module's docstring)."""
        values = _in_utc(values[at : at + len(INVOCATION_COLUMNS)], _INVOCATION_TIMES)
        return _made(cls, INVOCATION_COLUMNS, values)

    def changed(self, **columns: Any) -> InvocationRow:
        """This row with ``columns`` written, as ``dataclasses.replace`` makes it but
        without the frozen ``__init__``: a claim changes each run it records."""
        if not columns.keys() <= _INVOCATION_FIELDS:
            raise TypeError(f"not an invocation's fields: {columns.keys() - _INVOCATION_FIELDS}")
        row = object.__new__(InvocationRow)
        row.__dict__.update(self.__dict__, **columns)
        return row


def _made(cls: type[_Made], names: Sequence[str], values: Sequence[Any]) -> _Made:
    """A dataclass ``cls`` of ``values`` for ``names``, every field of it, made without
    its ``__init__``: a frozen one's sets each field through ``object.__setattr__``, which
    took 2.5 times as long (a run's 19 fields: 4.4 against 1.8 µs), for rows read by the
    hundred."""
    made = object.__new__(cls)
    made.__dict__.update(zip(names, values, strict=True))
    return made


def _own(cls: type) -> list[str]:
    return [f.name for f in fields(cls)]


def _times(table: Table, names: Sequence[str]) -> tuple[int, ...]:
    """The positions of ``names`` that hold times: the driver reads them in the
    session's zone, and the engine wants them in UTC, as ``UTCDateTime`` gives them."""
    return tuple(i for i, name in enumerate(names) if isinstance(table.c[name].type, UTCDateTime))


def _in_utc(values: Sequence[Any], times: tuple[int, ...]) -> list[Any]:
    v = list(values)
    for i in times:
        if v[i] is not None:
            v[i] = v[i].astimezone(UTC)
    return v


# A job's own columns, in its fields' order, then those of its snapshot.
JOB_COLUMNS = tuple(name for name in _own(JobRow) if name != "snapshot") + tuple(_own(JobSnapshot))
_JOB_OWN = len(JOB_COLUMNS) - len(_own(JobSnapshot))
_JOB_TIMES = _times(jobs, JOB_COLUMNS)
INVOCATION_COLUMNS = tuple(_own(InvocationRow))
_INVOCATION_TIMES = _times(invocations, INVOCATION_COLUMNS)
_INVOCATION_FIELDS = frozenset(INVOCATION_COLUMNS)
_SNAPSHOT_FIELDS = tuple(_own(JobSnapshot))


def columns(table: Table, names: Sequence[str]) -> list[Column[Any]]:
    """``names`` of ``table``, for a statement whose rows ``from_values`` reads."""
    return [table.c[name] for name in names]


def driver_sql(statement: Select[Any]) -> str:
    """``statement`` as PostgreSQL's driver takes it (``exec_driver_sql``, named
    parameters), compiled once: a hot path reads its rows by position, and its locks
    and order stay those SQLAlchemy writes for the statement's other dialects."""
    return str(statement.compile(dialect=psycopg.dialect()))
