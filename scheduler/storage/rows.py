"""What the store reads: a job or an invocation row, as the engine uses them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Row

from cronchain.scheduler.errors import TransientError
from cronchain.statemachine import JobSnapshot, JobState

# Why a run the machine started may still wait before its first attempt.
HOLDS = ("upstream", "gate", "pool")


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
        fields = {k: m[prefix + k] for k in cls.__dataclass_fields__ if k != "snapshot"}
        return cls(**fields, snapshot=snapshot)


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
