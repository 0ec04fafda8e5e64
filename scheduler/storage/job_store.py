"""Named queries over the jobs table and its change records (SQLAlchemy Core).

Every function takes an open connection inside the caller's transaction: the engine
decides where transactions begin and end, the store only says what to read and write.
"""

from __future__ import annotations

import zlib
from datetime import datetime
from difflib import get_close_matches
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy import (
    ARRAY,
    BigInteger,
    ColumnElement,
    Connection,
    Integer,
    Select,
    and_,
    any_,
    bindparam,
    cast,
    func,
    literal,
    or_,
    select,
    update,
)

from cronchain.scheduler.errors import NotFound
from cronchain.scheduler.spec.model import NAME
from cronchain.scheduler.storage import bulk
from cronchain.scheduler.storage.models import job_changes, jobs
from cronchain.scheduler.storage.rows import (
    JOB_COLUMNS,
    ConcurrentUpdate,
    JobRow,
    columns,
    driver_sql,
)
from cronchain.statemachine import JobSnapshot, JobState

if TYPE_CHECKING:
    from cronchain.scheduler.spec.jobspec import JobSpec


# The hot path's statements are built once: building one costs about as much as running
# it (bench/hot_path.py). Values come as execution parameters.
# Jobs are locked FOR NO KEY UPDATE (``key_share``): writers of a job still exclude each
# other, and share locks (``scheduler.workflows.upstream``) still wait for them, but the foreign
# key checks of their runs' rows (FOR KEY SHARE) do not, so a run row written twice in
# one transaction never waits on its job's lock.


def _lock_jobs(*selected: Any) -> Select[Any]:
    """Jobs locked as every writer of a job locks them (above), whichever dialect and
    reader takes the rows."""
    return select(*selected).with_for_update(key_share=True)


_LOCK_JOB = _lock_jobs(jobs).where(jobs.c.id == bindparam("b_id"))
_SAVE_JOB = update(jobs).where(
    jobs.c.id == bindparam("b_id"), jobs.c.generation == bindparam("b_generation")
)
_SAVED_MATCH = {"b_id": "id", "b_generation": "generation"}
_INSERT_JOB = jobs.insert().returning(jobs.c.id)
_INSERT_CHANGE = job_changes.insert()


def lock_job(conn: Connection, job_id: int) -> JobRow | None:
    if conn.dialect.name == "postgresql":  # read by the driver (``rows.from_values``)
        found = conn.exec_driver_sql(_LOCK_ONE, {"b_id": job_id}).first()
        return None if found is None else JobRow.from_values(found)
    row = conn.execute(_LOCK_JOB, {"b_id": job_id}).first()
    return None if row is None else JobRow.from_row(row)


def read_jobs(conn: Connection, job_ids: set[int]) -> list[JobRow]:
    """Jobs as they are, not locked."""
    return [JobRow.from_row(r) for r in conn.execute(select(jobs).where(jobs.c.id.in_(job_ids)))]


def read_job(conn: Connection, job_id: int) -> JobRow:
    """A job row without a lock, for readers."""
    row = conn.execute(select(jobs).where(jobs.c.id == job_id)).first()
    if row is None:
        raise NotFound(f"no job {job_id}")
    return JobRow.from_row(row)


def resolve_job(conn: Connection, ref: str) -> int:
    """The id of ``project/name``, or of ``name`` when one project has it. A ref no
    job can have (a NUL, a name too long) is looked for no further."""
    project, _, name = ref.rpartition("/")
    if not NAME.fullmatch(name) or (project and not NAME.fullmatch(project)):
        raise NotFound(f"no job named {ref!r}")
    query = select(jobs.c.id).where(jobs.c.name == name)
    if project:
        query = query.where(jobs.c.project == project)
    ids = conn.execute(query.limit(2)).scalars().all()
    if len(ids) > 1:
        raise NotFound(f"more than one job named {ref!r}; use project/name")
    if not ids:
        raise NotFound(f"no job named {ref!r}{_named_like(conn, ref)}")
    return ids[0]


def _named_like(conn: Connection, ref: str) -> str:
    """``; did you mean 'etl/nightly'?`` for a misspelt job, or nothing. Reads every
    job's name: a mistake's price, never the found path's."""
    rows = conn.execute(select(jobs.c.project, jobs.c.name))
    # A bare name is compared with the names, project/name with the refs.
    known = {n if "/" not in ref else f"{p}/{n}": f"{p}/{n}" for p, n in rows}
    close = get_close_matches(ref, known, n=1, cutoff=0.75)
    return f"; did you mean {known[close[0]]!r}?" if close else ""


def lock_job_named(conn: Connection, ref: str) -> JobRow:
    """Resolve ``ref`` and lock the job; NotFound if there is none (or it just went)."""
    job = lock_job(conn, resolve_job(conn, ref))
    if job is None:
        raise NotFound(f"no job named {ref!r}")
    return job


class JobHead(NamedTuple):
    """What ``apply`` reads of every job of a project to tell which ones change."""

    id: int
    enabled: bool
    revision: str


def heads_of_project(conn: Connection, project: str) -> dict[str, JobHead]:
    """Each job of ``project`` by name, unlocked: only ``apply`` changes these columns,
    and applies of a project take turns (``lock_project``). So an apply that changes
    nothing locks nothing, and reads three columns rather than whole rows."""
    query = select(jobs.c.name, jobs.c.id, jobs.c.enabled, jobs.c.revision)
    rows = conn.execute(query.where(jobs.c.project == project).order_by(jobs.c.id))
    return {r.name: JobHead(r.id, r.enabled, r.revision) for r in rows}


def lock_jobs(conn: Connection, job_ids: list[int]) -> dict[int, JobRow]:
    """Jobs ``job_ids``, locked in id order (as every batch locks), by id. One job (a
    lone tick) is locked by ``lock_job``'s statement: the same text every time, it is
    prepared once, where the array's costs as much Python again as the lock itself."""
    if len(job_ids) == 1:
        job = lock_job(conn, job_ids[0])
        return {} if job is None else {job.id: job}
    ordered = sorted(job_ids)
    if conn.dialect.name == "postgresql":  # read by the driver (``rows.from_values``)
        locked = conn.exec_driver_sql(_LOCK_ANY, {"b_ids": ordered})
        return {r[0]: JobRow.from_values(r) for r in locked.all()}  # as lock_runs reads
    found: dict[int, JobRow] = {}
    for i in range(0, len(ordered), _IDS_PER_STATEMENT):
        query = _lock_jobs(jobs).where(_id_in(conn, ordered[i : i + _IDS_PER_STATEMENT]))
        rows = conn.execute(query.order_by(jobs.c.id))
        found |= {r.id: JobRow.from_row(r) for r in rows}
    return found


_IDS_PER_STATEMENT = 10_000  # below SQLite's 32,766 parameters
# ``_LOCK_JOB`` and ``lock_jobs``' statement on PostgreSQL, read by the driver.
_LOCK_ONE = driver_sql(
    _lock_jobs(*columns(jobs, JOB_COLUMNS)).where(jobs.c.id == bindparam("b_id"))
)
_LOCK_ANY = driver_sql(
    _lock_jobs(*columns(jobs, JOB_COLUMNS))
    .where(jobs.c.id == any_(bindparam("b_ids", type_=ARRAY(BigInteger))))
    .order_by(jobs.c.id)
)


def _id_in(conn: Connection, job_ids: list[int]) -> ColumnElement[bool]:
    """``jobs.id IN job_ids``: one array parameter on PostgreSQL, whose driver would
    parse as many placeholders as ids, slowly."""
    if conn.dialect.name == "postgresql":
        return jobs.c.id == any_(literal(job_ids, ARRAY(Integer)))
    return jobs.c.id.in_(job_ids)


def new_job_values(spec: JobSpec, now: datetime) -> dict[str, Any]:
    """The row a new job starts as, before its machine's first step: disabled."""
    return _spec_values(spec) | dict(
        project=spec.project,
        name=spec.name,
        enabled=False,
        paused=False,
        pause_reason=None,
        state=JobState.DISABLED.value,
        generation=0,
        tick_at=None,
        tick_nonce=None,
        watchdog_at=None,
        invocation_id=None,
        invocation_running=False,
        overruns=0,
        active=0,
        buffered=0,
        missed_from=None,
        alert_failing=False,
        downstream=False,
        created_at=now,
        updated_at=now,
    )


def insert_job(conn: Connection, spec: JobSpec, now: datetime) -> int:
    job_id = conn.execute(_INSERT_JOB, new_job_values(spec, now)).scalar_one()
    conn.execute(_INSERT_CHANGE, created(job_id, spec, now))
    return job_id


def reserve_job_ids(conn: Connection, count: int) -> list[int]:
    """``count`` ids, ascending, that no other job will get: for new jobs whose rows are
    written later, many in one statement (``insert_jobs``)."""
    if count < 1:
        return []
    if conn.dialect.name == "postgresql":
        taken = func.nextval(func.pg_get_serial_sequence("jobs", "id"))
        query = select(func.array_agg(taken)).select_from(func.generate_series(1, count))
        return sorted(conn.execute(query).scalar_one())
    # SQLite: this transaction is the one writer (BEGIN IMMEDIATE), and AUTOINCREMENT
    # hands out ids after the largest it ever did, which sqlite_sequence keeps.
    last = conn.exec_driver_sql(
        "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'jobs'), 0),"
        " coalesce((SELECT max(id) FROM jobs), 0))"
    ).scalar_one()
    return list(range(last + 1, last + 1 + count))


def insert_jobs(conn: Connection, rows: list[dict[str, Any]]) -> None:
    """Insert new jobs (rows of the same columns, ``new_job_values``'s and an ``id`` of
    ``reserve_job_ids``'s): one COPY on PostgreSQL."""
    bulk.insert(conn, jobs, rows)


def save_jobs(conn: Connection, saves: list[dict[str, Any]], *, copy: bool = True) -> None:
    """``save_job``'s update of many rows (of the same columns) at once, each with the
    ``b_id`` and ``b_generation`` it was read at; ConcurrentUpdate if any row moved on.
    ``copy=False``, as the batches of the hot path pass: ``bulk.update_joined``, never
    ``bulk.update``'s temporary table, which needs the TEMP privilege and writes the
    catalog at every batch."""
    if not saves:
        return
    if len(saves) == 1:  # a lone tick's: save_job's statement, prepared once
        updated = conn.execute(_SAVE_JOB, saves[0]).rowcount
    elif copy:
        updated = bulk.update(conn, jobs, saves, _SAVED_MATCH)
    else:
        updated = bulk.update_joined(conn, jobs, saves, _SAVED_MATCH)
    if updated != len(saves):
        raise ConcurrentUpdate("jobs changed while they were being updated")


def record_changes(conn: Connection, records: list[dict[str, Any]]) -> None:
    bulk.insert(conn, job_changes, records)


def created(job_id: int, spec: JobSpec, now: datetime) -> dict[str, Any]:
    """The change record of a job's creation."""
    when = (spec.schedule, spec.timezone, spec.days)
    return _change(job_id, now, "created", spec.revision, when)


def _change(
    job_id: int,
    at: datetime,
    change: str,
    revision: str,
    when: tuple[str, str, str | None],
    reason: str | None = None,
) -> dict[str, Any]:
    """``when``: the schedule, zone and ``days`` in force after the change."""
    schedule, timezone, days = when
    return dict(
        job_id=job_id,
        at=at,
        change=change,
        revision=revision,
        schedule=schedule,
        timezone=timezone,
        days=days,
        reason=reason,
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
    values = saved_values(job, snapshot, watchdog_at=watchdog_at, now=now, spec=spec, **flags)
    result = conn.execute(_SAVE_JOB, {**values, "b_id": job.id, "b_generation": job.generation})
    if result.rowcount != 1:
        raise ConcurrentUpdate(f"job {job.ref} changed while it was being updated")
    for change in change_records(job, now, spec=spec, **flags):
        conn.execute(_INSERT_CHANGE, change)


def saved_values(
    job: JobRow,
    snapshot: JobSnapshot,
    *,
    watchdog_at: datetime | None,
    now: datetime,
    spec: JobSpec | None = None,
    **flags: Any,
) -> dict[str, Any]:
    """The columns ``save_job`` writes, for a caller that holds saves to write many at
    once (``scheduler.storage.job_batch``)."""
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
    return values


def change_records(
    job: JobRow, now: datetime, *, spec: JobSpec | None = None, **flags: Any
) -> list[dict[str, Any]]:
    """The change records of a save of ``job`` with ``spec`` and ``flags``."""
    declared = spec or job
    revision, when = declared.revision, (declared.schedule, declared.timezone, declared.days)
    return [
        _change(
            job.id,
            now,
            change,
            revision,
            when,
            flags.get("pause_reason") if change == "paused" else None,
        )
        for change in _changes(job, spec, flags)
    ]


def changes_of(conn: Connection, job_id: int) -> list[dict[str, Any]]:
    """A job's changes, oldest first."""
    rows = conn.execute(
        select(job_changes)
        .where(job_changes.c.job_id == job_id)
        .order_by(job_changes.c.at, job_changes.c.id)
    )
    return [dict(r._mapping) for r in rows]


def delete_jobs(conn: Connection, job_ids: list[int]) -> None:
    """Delete jobs; their invocations and changes go with them (ON DELETE CASCADE).
    Messages still in flight for them find no row and are dropped."""
    for i in range(0, len(job_ids), _IDS_PER_STATEMENT):
        conn.execute(jobs.delete().where(_id_in(conn, job_ids[i : i + _IDS_PER_STATEMENT])))


# A parked tick's deadline is when it is to be sent, before its slot; a sent tick's is
# after its slot, by a grace (``Stepper.settle_tick``). A row with a deadline has a slot
# (the ``tick`` and ``watchdog_tick`` checks): ``NOT _PARKED`` is never NULL.
_PARKED = jobs.c.tick_at > jobs.c.watchdog_at


def claim_lapsed_jobs(conn: Connection, now: datetime, limit: int) -> list[JobRow]:
    """Jobs whose promised tick is overdue, locked; rows other sweeps hold are skipped."""
    query = (
        select(jobs)
        .where(jobs.c.watchdog_at < now, ~_PARKED)
        .order_by(jobs.c.watchdog_at)
        .limit(limit)
        .with_for_update(skip_locked=True, key_share=True)
    )
    return [JobRow.from_row(r) for r in conn.execute(query)]


class Parked(NamedTuple):
    id: int
    generation: int
    tick_at: datetime
    tick_nonce: int


def claim_parked_jobs(conn: Connection, now: datetime, limit: int) -> list[Parked]:
    """Jobs whose parked tick is due to be sent, locked; rows others hold are skipped."""
    query = (
        select(jobs.c.id, jobs.c.generation, jobs.c.tick_at, jobs.c.tick_nonce)
        .where(jobs.c.watchdog_at < now, _PARKED)
        .order_by(jobs.c.watchdog_at)
        .limit(limit)
        .with_for_update(skip_locked=True, key_share=True)
    )
    return [Parked(*row) for row in conn.execute(query)]


def move_deadlines(conn: Connection, moved: list[tuple[Parked, datetime]]) -> None:
    """Give each claimed job its new watchdog deadline, in one statement."""
    rows = [
        {"b_id": job.id, "watchdog_at": at, "generation": job.generation + 1} for job, at in moved
    ]
    bulk.update_joined(conn, jobs, rows, {"b_id": "id"})


# Any constant: the key of the one advisory lock that serializes changes of triggers.
_TRIGGER_GRAPH_LOCK = 0x63726F6E  # "cron"


def lock_trigger_graph(conn: Connection) -> None:
    """Until this transaction ends, be the only one changing jobs' triggers, so that two
    applies that each add half of a cycle cannot both find none. SQLite's writers are
    one at a time already; PostgreSQL takes a transaction-level advisory lock."""
    if conn.dialect.name == "postgresql":
        conn.execute(select(func.pg_advisory_xact_lock(_TRIGGER_GRAPH_LOCK)))


# The first key of the advisory locks that serialize the applies of a project; the
# second is the project's name hashed (projects that share a hash wait for each other).
_PROJECT_LOCK = 0x6A6F6273  # "jobs"


def lock_project(conn: Connection, project: str) -> None:
    """Until this transaction ends, be the only ``apply`` of ``project``. Two applies of
    a new file would each insert its jobs, and all but one fail on the unique key; in
    turn, the second finds the first's rows and only what the first left to change.
    SQLite's writers are one at a time already; PostgreSQL takes an advisory lock."""
    if conn.dialect.name == "postgresql":
        key = zlib.crc32(project.encode()) - 2**31  # into PostgreSQL's integer
        conn.execute(
            select(func.pg_advisory_xact_lock(cast(_PROJECT_LOCK, Integer), cast(key, Integer)))
        )


def specs_of(conn: Connection, refs: set[str], *, besides: str) -> dict[str, dict[str, Any]]:
    """The specs of the enabled jobs ``refs`` (``project/name``), leaving out project
    ``besides`` (the one being applied, whose jobs are declared): the edges of the graphs
    of triggers and requirements that an apply walks for cycles."""
    wanted: dict[str, list[str]] = {}
    for ref in refs:
        project, _, name = ref.rpartition("/")
        if project != besides:
            wanted.setdefault(project, []).append(name)
    if not wanted:
        return {}
    query = select(jobs.c.project, jobs.c.name, jobs.c.spec).where(jobs.c.enabled, _named(wanted))
    return {f"{r.project}/{r.name}": r.spec for r in conn.execute(query)}


def existing(conn: Connection, refs: set[str]) -> set[str]:
    """Which of ``refs`` (``project/name``) are jobs, enabled or not."""
    wanted: dict[str, list[str]] = {}
    for ref in refs:
        project, _, name = ref.rpartition("/")
        wanted.setdefault(project, []).append(name)
    if not wanted:
        return set()
    query = select(jobs.c.project, jobs.c.name).where(_named(wanted))
    return {f"{r.project}/{r.name}" for r in conn.execute(query)}


def _named(wanted: dict[str, list[str]]) -> ColumnElement[bool]:
    return or_(*(and_(jobs.c.project == p, jobs.c.name.in_(n)) for p, n in wanted.items()))


def list_jobs(conn: Connection) -> list[JobRow]:
    rows = conn.execute(select(jobs).order_by(jobs.c.project, jobs.c.name))
    return [JobRow.from_row(r) for r in rows]
