"""Named queries over the jobs table and its change records (SQLAlchemy Core).

Every function takes an open connection inside the caller's transaction: the engine
decides where transactions begin and end, the store only says what to read and write.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, and_, bindparam, func, or_, select, update

from scheduler.errors import NotFound
from scheduler.storage.models import job_changes, jobs
from scheduler.storage.rows import ConcurrentUpdate, JobRow
from statemachine import JobSnapshot, JobState

if TYPE_CHECKING:
    from scheduler.spec import JobSpec


# The hot path's statements are built once: building one costs about as much as running
# it (bench/hot_path.py). Values come as execution parameters.
_LOCK_JOB = select(jobs).where(jobs.c.id == bindparam("b_id")).with_for_update()
_SAVE_JOB = update(jobs).where(
    jobs.c.id == bindparam("b_id"), jobs.c.generation == bindparam("b_generation")
)
_INSERT_JOB = jobs.insert().returning(jobs.c.id)
_INSERT_CHANGE = job_changes.insert()


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


# Any constant: the key of the one advisory lock that serializes changes of triggers.
_TRIGGER_GRAPH_LOCK = 0x63726F6E  # "cron"


def lock_trigger_graph(conn: Connection) -> None:
    """Until this transaction ends, be the only one changing jobs' triggers, so that two
    applies that each add half of a cycle cannot both find none. SQLite's writers are
    one at a time already; PostgreSQL takes a transaction-level advisory lock."""
    if conn.dialect.name == "postgresql":
        conn.execute(select(func.pg_advisory_xact_lock(_TRIGGER_GRAPH_LOCK)))


def triggers_of(conn: Connection, refs: set[str], *, besides: str) -> dict[str, list[str]]:
    """What each of the enabled jobs ``refs`` (``project/name``) triggers on success,
    leaving out project ``besides`` (the one being applied, whose edges are declared)."""
    wanted: dict[str, list[str]] = {}
    for ref in refs:
        project, _, name = ref.rpartition("/")
        if project != besides:
            wanted.setdefault(project, []).append(name)
    if not wanted:
        return {}
    match = or_(*(and_(jobs.c.project == p, jobs.c.name.in_(n)) for p, n in wanted.items()))
    query = select(jobs.c.project, jobs.c.name, jobs.c.spec).where(jobs.c.enabled, match)
    return {f"{r.project}/{r.name}": r.spec.get("triggers", []) for r in conn.execute(query)}


def list_jobs(conn: Connection) -> list[JobRow]:
    rows = conn.execute(select(jobs).order_by(jobs.c.project, jobs.c.name))
    return [JobRow.from_row(r) for r in rows]
