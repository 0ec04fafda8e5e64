"""Named queries over the jobs and invocations tables (SQLAlchemy Core, no ORM churn).

Every function takes an open connection inside the caller's transaction: the engine
decides where transactions begin and end, the store only says what to read and write.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    LABEL_STYLE_TABLENAME_PLUS_COL,
    Connection,
    Row,
    bindparam,
    case,
    func,
    select,
    true,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from scheduler import debuglog
from scheduler.errors import NotFound, TransientError
from scheduler.models import invocations, job_changes, jobs
from scheduler.spec import JobSpec
from statemachine import JobSnapshot, JobState


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

    @property
    def ref(self) -> str:
        return f"{self.project}/{self.name}"

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

    @classmethod
    def from_row(cls, row: Row[Any], prefix: str = "") -> InvocationRow:
        m = row._mapping
        return cls(**{k: m[prefix + k] for k in cls.__dataclass_fields__})


# --- jobs ------------------------------------------------------------------------------


# The hot path's statements are built once: building one costs about as much as running
# it (bench/hot_path.py). Values come as execution parameters.
_LOCK_JOB = select(jobs).where(jobs.c.id == bindparam("b_id")).with_for_update()
_SAVE_JOB = update(jobs).where(
    jobs.c.id == bindparam("b_id"), jobs.c.generation == bindparam("b_generation")
)
_LOCK_INVOCATION = (
    select(invocations).where(invocations.c.id == bindparam("b_id")).with_for_update()
)
# A run and its job, both locked by one statement. PostgreSQL locks each joined row's
# parts in the order of the FROM list: the job first, as every writer does. The join
# has no condition so that a run of another job still comes back, for the caller to
# refuse (Engine.lock).
_LOCK_RUN = (
    select(jobs, invocations)
    .select_from(jobs.join(invocations, true()))
    .where(jobs.c.id == bindparam("b_job"), invocations.c.id == bindparam("b_inv"))
    .with_for_update()
    .set_label_style(LABEL_STYLE_TABLENAME_PLUS_COL)
)
# A worker's claim locks the run alone: it never waits on the job, so it cannot take the
# two locks in the other order than the writers that lock the job first.
_LOCK_ATTEMPT = (
    select(jobs, invocations)
    .select_from(jobs.join(invocations, jobs.c.id == invocations.c.job_id))
    .where(invocations.c.id == bindparam("b_inv"))
    .with_for_update(of=invocations)
    .set_label_style(LABEL_STYLE_TABLENAME_PLUS_COL)
)
_INSERT_JOB = jobs.insert().returning(jobs.c.id)
_INSERT_CHANGE = job_changes.insert()
_UPDATE_INVOCATION = update(invocations).where(invocations.c.id == bindparam("b_id"))
_INSERT_INVOCATION = {
    name: dialect.insert(invocations).on_conflict_do_nothing().returning(invocations.c.id)
    for name, dialect in (("postgresql", postgresql), ("sqlite", sqlite))
}


def lock_job(conn: Connection, job_id: int) -> JobRow | None:
    row = conn.execute(_LOCK_JOB, {"b_id": job_id}).first()
    return None if row is None else JobRow.from_row(row)


def read_job(conn: Connection, job_id: int) -> JobRow:
    """A job row without a lock, for readers."""
    row = conn.execute(select(jobs).where(jobs.c.id == job_id)).first()
    if row is None:
        raise NotFound(f"no job {job_id}")
    return JobRow.from_row(row)


def resolve_job(conn: Connection, ref: str) -> int:
    """The id of ``project/name``, or of ``name`` when one project has it."""
    project, _, name = ref.rpartition("/")
    query = select(jobs.c.id).where(jobs.c.name == name)
    if project:
        query = query.where(jobs.c.project == project)
    ids = conn.execute(query.limit(2)).scalars().all()
    if len(ids) != 1:
        why = "no job" if not ids else "more than one job"
        raise NotFound(f"{why} named {ref!r}" + ("; use project/name" if ids else ""))
    return ids[0]


def lock_job_named(conn: Connection, ref: str) -> JobRow:
    """Resolve ``ref`` and lock the job; NotFound if there is none (or it just went)."""
    job = lock_job(conn, resolve_job(conn, ref))
    if job is None:
        raise NotFound(f"no job named {ref!r}")
    return job


def jobs_of_project(conn: Connection, project: str) -> dict[str, JobRow]:
    rows = conn.execute(
        select(jobs).where(jobs.c.project == project).order_by(jobs.c.id).with_for_update()
    )
    return {r.name: JobRow.from_row(r) for r in rows}


def insert_job(conn: Connection, spec: JobSpec, now: datetime) -> int:
    values = _spec_values(spec) | dict(
        project=spec.project,
        name=spec.name,
        enabled=False,
        paused=False,
        state=JobState.DISABLED.value,
        generation=0,
        invocation_running=False,
        overruns=0,
        active=0,
        buffered=0,
        created_at=now,
        updated_at=now,
    )
    job_id = conn.execute(_INSERT_JOB, values).scalar_one()
    _record_change(conn, job_id, now, "created", spec.revision, spec.schedule, spec.timezone)
    return job_id


def _record_change(
    conn: Connection,
    job_id: int,
    at: datetime,
    change: str,
    revision: str,
    schedule: str,
    timezone: str,
    reason: str | None = None,
) -> None:
    conn.execute(
        _INSERT_CHANGE,
        dict(
            job_id=job_id,
            at=at,
            change=change,
            revision=revision,
            schedule=schedule,
            timezone=timezone,
            reason=reason,
        ),
    )


def _changes(job: JobRow, spec: JobSpec | None, flags: dict[str, Any]) -> list[str]:
    """What a save changes that ``explain`` must know about later."""
    changes = []
    if spec is not None and spec.revision != job.revision:
        changes.append("updated")
    if "enabled" in flags and flags["enabled"] != job.enabled:
        changes.append("enabled" if flags["enabled"] else "disabled")
    if "paused" in flags and flags["paused"] != job.paused:
        changes.append("paused" if flags["paused"] else "resumed")
    return changes


def _spec_values(spec: JobSpec) -> dict[str, Any]:
    return dict(
        kind=spec.kind,
        schedule=spec.schedule,
        timezone=spec.timezone,
        spec=spec.normalized(),
        revision=spec.revision,
    )


def save_job(
    conn: Connection,
    job: JobRow,
    snapshot: JobSnapshot,
    *,
    watchdog_at: datetime | None,
    now: datetime,
    spec: JobSpec | None = None,
    **flags: Any,
) -> None:
    """Write the machine's snapshot (and optionally a new spec or flags) if the row is
    still at the generation that was read; bump the generation."""
    values = dict(
        state=snapshot.state.value,
        tick_at=snapshot.tick_at,
        tick_nonce=snapshot.tick_nonce,
        invocation_id=snapshot.invocation_id,
        invocation_running=snapshot.invocation_running,
        overruns=snapshot.overruns,
        active=snapshot.active,
        buffered=snapshot.buffered,
        missed_from=snapshot.missed_from,
        watchdog_at=watchdog_at,
        generation=job.generation + 1,
        updated_at=now,
        **flags,
    )
    if spec is not None:
        values |= _spec_values(spec)
    result = conn.execute(_SAVE_JOB, {**values, "b_id": job.id, "b_generation": job.generation})
    if result.rowcount != 1:
        raise ConcurrentUpdate(f"job {job.ref} changed while it was being updated")
    revision, schedule, timezone = (
        (spec.revision, spec.schedule, spec.timezone)
        if spec is not None
        else (job.revision, job.schedule, job.timezone)
    )
    for change in _changes(job, spec, flags):
        reason = flags.get("pause_reason") if change == "paused" else None
        _record_change(conn, job.id, now, change, revision, schedule, timezone, reason)


def changes_of(conn: Connection, job_id: int) -> list[dict[str, Any]]:
    """A job's changes, oldest first."""
    rows = conn.execute(
        select(job_changes)
        .where(job_changes.c.job_id == job_id)
        .order_by(job_changes.c.at, job_changes.c.id)
    )
    return [dict(r._mapping) for r in rows]


def delete_job(conn: Connection, job_id: int) -> None:
    """Delete a job; its invocations and changes go with it (ON DELETE CASCADE).
    Messages still in flight for it find no row and are dropped."""
    conn.execute(jobs.delete().where(jobs.c.id == job_id))


def claim_lapsed_jobs(conn: Connection, now: datetime, limit: int) -> list[JobRow]:
    """Jobs whose promised tick is overdue, locked; rows other sweeps hold are skipped."""
    query = (
        select(jobs)
        .where(jobs.c.watchdog_at < now)
        .order_by(jobs.c.watchdog_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return [JobRow.from_row(r) for r in conn.execute(query)]


def list_jobs(conn: Connection) -> list[JobRow]:
    rows = conn.execute(select(jobs).order_by(jobs.c.project, jobs.c.name))
    return [JobRow.from_row(r) for r in rows]


# --- invocations -----------------------------------------------------------------------


def insert_invocation(
    conn: Connection,
    job_id: int,
    *,
    slot: datetime | None,
    trigger_id: str | None,
    revision: str,
    status: str,
    now: datetime,
    deadline: datetime | None = None,
    reason: str | None = None,
    backfill: bool = False,
    **attempt: Any,
) -> int | None:
    """Insert an invocation for a slot or trigger id; None if that slot or trigger id has
    one already. ``attempt`` holds the columns of a first attempt that starts as the row
    is created (``Runs.attempt_columns``)."""
    values = dict(
        job_id=job_id,
        slot=slot,
        trigger_id=trigger_id,
        revision=revision,
        status=status,
        reason=reason,
        attempt=0,  # no attempt has been made yet
        created_at=now,
        finished_at=now if status == "SKIPPED" else None,
        deadline=deadline,
        backfill=backfill,
    )
    return conn.execute(
        _INSERT_INVOCATION[conn.dialect.name], values | attempt
    ).scalar_one_or_none()


def lock_run(
    conn: Connection, job_id: int, invocation_id: int
) -> tuple[InvocationRow, JobRow] | None:
    """An invocation and the job it is said to belong to, both locked; None if either
    is gone. The caller checks that the invocation is that job's."""
    row = conn.execute(_LOCK_RUN, {"b_job": job_id, "b_inv": invocation_id}).first()
    if row is None:
        return None
    return InvocationRow.from_row(row, "invocations_"), JobRow.from_row(row, "jobs_")


def lock_attempt(conn: Connection, invocation_id: int) -> tuple[InvocationRow, JobRow] | None:
    """An invocation, locked, and its job as it stands (not locked): what a worker needs
    to claim an attempt and make its call."""
    row = conn.execute(_LOCK_ATTEMPT, {"b_inv": invocation_id}).first()
    if row is None:
        return None
    return InvocationRow.from_row(row, "invocations_"), JobRow.from_row(row, "jobs_")


def lock_invocation(conn: Connection, invocation_id: int) -> InvocationRow | None:
    row = conn.execute(_LOCK_INVOCATION, {"b_id": invocation_id}).first()
    return None if row is None else InvocationRow.from_row(row)


def invocation_job(conn: Connection, invocation_id: int) -> int | None:
    """The job of an invocation, read without a lock: callers lock the job first, then
    the invocation, the one order every writer keeps."""
    query = select(invocations.c.job_id).where(invocations.c.id == invocation_id)
    return conn.execute(query).scalar_one_or_none()


def update_invocation(conn: Connection, invocation_id: int, **values: Any) -> None:
    conn.execute(_UPDATE_INVOCATION, {**values, "b_id": invocation_id})


def lock_invocations_of(
    conn: Connection, job_id: int, statuses: tuple[str, ...], *, backfill: bool | None = False
) -> list[InvocationRow]:
    """A job's invocations in the given statuses, oldest first, locked: those the machine
    counts (the default), the backfill's (True) or both (None)."""
    query = select(invocations).where(
        invocations.c.job_id == job_id, invocations.c.status.in_(statuses)
    )
    if backfill is not None:
        query = query.where(invocations.c.backfill == backfill)
    query = query.order_by(invocations.c.id).with_for_update()
    return [InvocationRow.from_row(r) for r in conn.execute(query)]


def oldest_waiting(
    conn: Connection, job_id: int, *, backfill: bool = False, limit: int = 1
) -> list[InvocationRow]:
    """The runs that wait longest (a backfill's: the earliest slots), locked."""
    order = invocations.c.slot if backfill else invocations.c.id
    query = (
        select(invocations)
        .where(
            invocations.c.job_id == job_id,
            invocations.c.status == "WAITING",
            invocations.c.backfill == backfill,
        )
        .order_by(order)
        .limit(limit)
        .with_for_update()
    )
    return [InvocationRow.from_row(r) for r in conn.execute(query)]


def invocation_at(conn: Connection, job_id: int, slot: datetime) -> dict[str, Any] | None:
    """The invocation of a job's slot, if it has one."""
    query = select(invocations).where(invocations.c.job_id == job_id, invocations.c.slot == slot)
    row = conn.execute(query).first()
    return None if row is None else dict(row._mapping)


def slots_taken(conn: Connection, job_id: int, first: datetime, last: datetime) -> set[datetime]:
    """The slots in ``[first, last]`` that have an invocation, of any status."""
    query = select(invocations.c.slot).where(
        invocations.c.job_id == job_id, invocations.c.slot.between(first, last)
    )
    return set(conn.execute(query).scalars())


def count_backfill(conn: Connection, job_id: int, statuses: tuple[str, ...]) -> int:
    query = select(func.count()).where(
        invocations.c.job_id == job_id,
        invocations.c.backfill.is_(True),
        invocations.c.status.in_(statuses),
    )
    return conn.execute(query).scalar_one()


def renew_lease(conn: Connection, invocation_id: int, attempt: int, deadline: datetime) -> bool:
    """Move a claimed attempt's lease deadline (never past its timeout). False: the
    attempt is not (or no longer) the current one: it was retried, aborted or timed out."""
    query = update(invocations).where(
        invocations.c.id == invocation_id,
        invocations.c.attempt == attempt,
        invocations.c.status == "RUNNING",
        invocations.c.worker.isnot(None),
    )
    timeout_at = invocations.c.timeout_at
    deadline_value = case((timeout_at < deadline, timeout_at), else_=deadline)
    return conn.execute(query.values(deadline=deadline_value)).rowcount == 1


def extend_deadlines(conn: Connection, invocation_ids: list[int], deadline: datetime) -> None:
    if invocation_ids:
        conn.execute(
            update(invocations)
            .where(invocations.c.id.in_(invocation_ids))
            .values(deadline=deadline)
        )


def append_log(conn: Connection, invocation_id: int, now: datetime, line: str) -> None:
    inv = lock_invocation(conn, invocation_id)
    if inv is not None:
        update_invocation(conn, invocation_id, log=debuglog.append(inv.log, now, line))


def claim_lapsed_starts(conn: Connection, now: datetime, limit: int) -> list[InvocationRow]:
    """STARTING invocations past their deadline: their start message was lost."""
    query = (
        select(invocations)
        .where(invocations.c.deadline < now, invocations.c.status == "STARTING")
        .order_by(invocations.c.deadline)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return [InvocationRow.from_row(r) for r in conn.execute(query)]


def lapsed_runs(conn: Connection, now: datetime, limit: int) -> list[int]:
    """RUNNING invocations whose lease or timeout lapsed (read only: each is then ended
    in a transaction that locks its job first)."""
    query = (
        select(invocations.c.id)
        .where(invocations.c.deadline < now, invocations.c.status == "RUNNING")
        .order_by(invocations.c.deadline)
        .limit(limit)
    )
    return list(conn.execute(query).scalars())


def invocation(conn: Connection, invocation_id: int) -> dict[str, Any] | None:
    ref = (jobs.c.project + "/" + jobs.c.name).label("job")
    query = (
        select(invocations, ref)
        .join(jobs, jobs.c.id == invocations.c.job_id)
        .where(invocations.c.id == invocation_id)
    )
    row = conn.execute(query).first()
    return None if row is None else dict(row._mapping)


def history(
    conn: Connection,
    *,
    job_id: int | None = None,
    since: datetime | None = None,
    limit: int = 50,
) -> list[dict[str, Any]]:
    """Invocations, newest first, with the job's ``project/name``."""
    ref = (jobs.c.project + "/" + jobs.c.name).label("job")
    query = select(invocations, ref).join(jobs, jobs.c.id == invocations.c.job_id)
    if job_id is not None:
        query = query.where(invocations.c.job_id == job_id)
    if since is not None:
        query = query.where(invocations.c.created_at >= since)
    query = query.order_by(invocations.c.id.desc()).limit(limit)
    return [dict(r._mapping) for r in conn.execute(query)]
