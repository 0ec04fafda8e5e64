"""Named queries over the invocations table (SQLAlchemy Core).

Every function takes an open connection inside the caller's transaction, like
:mod:`scheduler.storage.job_store`; locks are taken job first, as every writer does.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    ARRAY,
    JSON,
    LABEL_STYLE_TABLENAME_PLUS_COL,
    BigInteger,
    Connection,
    Row,
    Select,
    and_,
    any_,
    bindparam,
    case,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from cronchain.scheduler import debuglog
from cronchain.scheduler.storage import bulk
from cronchain.scheduler.storage.models import UTCDateTime, invocations, jobs
from cronchain.scheduler.storage.rows import (
    HOLDS,
    INVOCATION_COLUMNS,
    JOB_COLUMNS,
    InvocationRow,
    JobRow,
    columns,
    driver_sql,
)
from cronchain.statemachine import Reason

# The hot path's statements are built once: building one costs about as much as running
# it (bench/hot_path.py). Values come as execution parameters.
#
# A lone run is found by its id and, where the caller knows it, where it is filed
# (``filed_at``: its slot, or when it was triggered). PostgreSQL partitions the table by
# month of ``filed_at``: by id alone, a statement probes the index of every month that
# retention keeps (half a year by default); by both, it reads one month's, pruned as
# the statement starts. A batch's runs are found by their ids alone, each kept if it is
# filed where it was said to be (``_found_where_filed``). Joined to their places from
# arrays, PostgreSQL could prune each run as it came, but costed each month's probe as
# if it were made, and its plans for a batch, kept for the connection once prepared,
# read the growing month whole for each batch instead (a herd of 10,000 drained in
# 3.1-7.2 s at the median instead of 2.3); by a range or a single place for the batch,
# it read the herd's whole second for each batch.
_FILED = invocations.c.filed_at == bindparam("b_filed")
_INVOCATION = select(invocations).where(invocations.c.id == bindparam("b_id"))
_LOCKS_INVOCATION = (  # by id alone, and where filed
    _INVOCATION.with_for_update(),
    _INVOCATION.where(_FILED).with_for_update(),
)
# A run and its job, both locked by one statement. PostgreSQL locks each joined row's
# parts in the order of the FROM list: the job first, as every writer does. A run that
# is not that job's does not come back (nor is it locked): a late report naming a job
# and a run of another job is refused, never recorded there.
_LOCK_RUN = (
    select(jobs, invocations)
    .select_from(jobs.join(invocations, jobs.c.id == invocations.c.job_id))
    .where(jobs.c.id == bindparam("b_job"), invocations.c.id == bindparam("b_inv"))
    .with_for_update(key_share=True)
    .set_label_style(LABEL_STYLE_TABLENAME_PLUS_COL)
)
_LOCKS_RUN = (_LOCK_RUN, _LOCK_RUN.where(_FILED))  # by id alone, and where filed
_BY_ID = invocations.c.id.in_(bindparam("b_invs", expanding=True))
_BY_ANY_ID = invocations.c.id == any_(bindparam("b_invs", type_=ARRAY(BigInteger)))


def _runs(selected: tuple[Any, ...], placed: bool, ids: Any = _BY_ID) -> Select[Any]:
    """``selected`` of runs and their jobs, the job first in the FROM list, then the run,
    so that a lock takes them in that order; ``placed``: a lone run, by its id and
    place."""
    query = select(*selected).select_from(jobs.join(invocations, jobs.c.id == invocations.c.job_id))
    return query.where(ids, _FILED) if placed else query.where(ids)


def _attempts(placed: bool) -> Select[Any]:
    """A worker's claim locks the runs alone: it never waits on a job, so it cannot take
    the two locks in the other order than the writers that lock the job first. (A claim
    that records its no-ops at once locks their jobs too, by ``_locked_runs``.)"""
    query = _runs((jobs, invocations), placed).order_by(invocations.c.id)
    return query.with_for_update(of=invocations).set_label_style(LABEL_STYLE_TABLENAME_PLUS_COL)


def _locked_runs(selected: tuple[Any, ...], placed: bool, ids: Any = _BY_ID) -> Select[Any]:
    """Runs and their jobs, all locked by one statement, job first then run as every
    writer locks, the jobs in id order as every batch locks them. Rows locked elsewhere
    are skipped, not waited for: the outcome group records those apart (outcome_batch),
    and a claim that records its no-ops claims those after (``Attempts.claim_many``)."""
    query = _runs(selected, placed, ids).order_by(jobs.c.id, invocations.c.id)
    return query.with_for_update(skip_locked=True, key_share=True)


# Each by ids alone, and a lone run by its id and place.
_LOCKS_ATTEMPTS = (_attempts(False), _attempts(True))
_LOCKS_RUNS = tuple(
    _locked_runs((jobs, invocations), placed).set_label_style(LABEL_STYLE_TABLENAME_PLUS_COL)
    for placed in (False, True)
)
# The same on PostgreSQL, read by the driver (``rows.from_values``): a batch's lock.
_ROW_COLUMNS = (*columns(jobs, JOB_COLUMNS), *columns(invocations, INVOCATION_COLUMNS))
_LOCKS_RUNS_PG = tuple(
    driver_sql(_locked_runs(_ROW_COLUMNS, placed, _BY_ANY_ID)) for placed in (False, True)
)
_UPDATE_INVOCATION = update(invocations).where(invocations.c.id == bindparam("b_id"))
_UPDATE_FILED = _UPDATE_INVOCATION.where(_FILED)
_INSERT_INVOCATION = {
    name: dialect.insert(invocations).on_conflict_do_nothing().returning(invocations.c.id)
    for name, dialect in (("postgresql", postgresql), ("sqlite", sqlite))
}
_INSERT_SLOTS = {
    name: dialect.insert(invocations)
    .on_conflict_do_nothing()
    .returning(invocations.c.id, invocations.c.job_id, invocations.c.slot)
    for name, dialect in (("postgresql", postgresql), ("sqlite", sqlite))
}


def invocation_values(
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
) -> dict[str, Any]:
    """The row of a new invocation for a slot or trigger id, as every insert writes it.
    ``attempt`` holds the columns of a first attempt that starts as the row is created
    (``Attempts.attempt_columns``)."""
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
        filed_at=place(slot, now),
    )
    return values | attempt


def place(slot: datetime | None, made: datetime) -> datetime:
    """Where a run is filed (``filed_at``), PostgreSQL's partition key: its slot, so that
    a slot's unique key holds across partitions; a triggered run, when it was made (its
    trigger id is kept unique apart: scheduler/storage/partitions.py)."""
    return slot if slot is not None else made


def insert_invocation(conn: Connection, job_id: int, **columns: Any) -> int | None:
    """Insert an invocation (``invocation_values``'s row); None if that slot or trigger
    id has one already."""
    values = invocation_values(job_id, **columns)
    return conn.execute(_INSERT_INVOCATION[conn.dialect.name], values).scalar_one_or_none()


def insert_invocations(
    conn: Connection, rows: list[dict[str, Any]]
) -> dict[tuple[int, datetime], int]:
    """Insert the runs of many slots (``invocation_values``'s rows): one statement per
    set of columns. Returns the id of each (job, slot) inserted; a slot that had its run
    already is not among them. One row (a lone tick's run) is inserted by
    ``insert_invocation``'s statement, prepared once, not by arrays."""
    if len(rows) == 1:
        (row,) = rows
        id_ = conn.execute(_INSERT_INVOCATION[conn.dialect.name], row).scalar_one_or_none()
        return {} if id_ is None else {(row["job_id"], row["slot"]): id_}
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(sorted(row)), []).append(row)
    if conn.dialect.name == "postgresql":
        return {
            key: id_
            for columns, group in groups.items()
            for key, id_ in _unnest(conn, columns, group)
        }
    statement = _INSERT_SLOTS[conn.dialect.name]
    return {
        (r.job_id, r.slot): r.id
        for group in groups.values()
        for r in conn.execute(statement, group)
    }


def _unnest(
    conn: Connection, columns: tuple[str, ...], rows: list[dict[str, Any]]
) -> list[tuple[tuple[int, datetime], int]]:
    """PostgreSQL: the rows as one array per column, unnested by the server. A multi-row
    INSERT (SQLAlchemy's "insertmanyvalues") is a new statement of some 1,800 parameters
    for each batch of 100 runs: psycopg parsed it anew each time, a third of a tick
    batch's CPU, and the server planned it anew; this one is the same text each time,
    parsed once and prepared by psycopg after a few uses (once for each set of columns
    sent as no array, ``bulk.unnested``). The arrays go in binary
    (``%b``): psycopg writes a text array element by element in Python, a timestamp in
    some 4 µs, ten times binary's cost (a fifth of a tick batch's CPU)."""
    arrays = [[row[c] for row in rows] for c in columns]
    for n, (column, values) in enumerate(zip(columns, arrays, strict=True)):
        kind = invocations.c[column].type
        if isinstance(kind, UTCDateTime) and any(
            v is not None and v.tzinfo is None for v in values
        ):
            raise ValueError(f"naive datetime in {column} cannot be stored")
        if isinstance(kind, JSON):  # as text, which the server casts to json[]
            arrays[n] = [None if v is None else json.dumps(v) for v in values]
    found = conn.exec_driver_sql(_unnest_insert(columns), tuple(map(bulk.unnested, arrays)))
    return [((job_id, slot.astimezone(UTC)), id_) for id_, job_id, slot in found.all()]


@functools.cache
def _unnest_insert(columns: tuple[str, ...]) -> str:
    dialect = postgresql.dialect()
    arrays = ", ".join(f"%b::{invocations.c[c].type.compile(dialect=dialect)}[]" for c in columns)
    return (
        f"INSERT INTO invocations ({', '.join(columns)}) SELECT * FROM unnest({arrays})"
        " ON CONFLICT DO NOTHING RETURNING id, job_id, slot"
    )


def _placed(filed: Iterable[datetime | None]) -> list[datetime] | None:
    """Where each run is filed, or None if any is not known: the runs are then found by
    their ids alone."""
    places = list(filed)
    return None if not places or None in places else places  # type: ignore[return-value]


def _parameters(ids: list[int], places: list[datetime] | None) -> tuple[bool, dict[str, Any]]:
    """Whether a lock finds a lone run by its id and place, and its parameters."""
    if places is not None and len(places) == 1:
        return True, {"b_invs": ids, "b_filed": places[0]}
    return False, {"b_invs": ids}


def lock_run(
    conn: Connection, job_id: int, invocation_id: int, filed_at: datetime | None = None
) -> tuple[InvocationRow, JobRow] | None:
    """An invocation and the job it is said to belong to, both locked; None if either
    is gone, or if the invocation is another job's (or not filed at ``filed_at``)."""
    parameters = {"b_job": job_id, "b_inv": invocation_id, "b_filed": filed_at}
    row = conn.execute(_LOCKS_RUN[filed_at is not None], parameters).first()
    if row is None:
        return None
    return InvocationRow.from_row(row, "invocations_"), JobRow.from_row(row, "jobs_")


def lock_attempts(
    conn: Connection, invocation_ids: list[int], filed: Iterable[datetime | None] = ()
) -> list[tuple[InvocationRow, JobRow]]:
    """Invocations, locked in id order, each with its job as it stands (not locked):
    what a worker needs to claim attempts and make their calls. ``filed``: where each
    is filed, in the same order, if known; a run filed elsewhere is not found."""
    places = _placed(filed)
    placed, parameters = _parameters(invocation_ids, places)
    rows = conn.execute(_LOCKS_ATTEMPTS[placed], parameters)
    return _found_where_filed(_pairs(rows), invocation_ids, places)


def lock_runs(
    conn: Connection, invocation_ids: list[int], filed: Iterable[datetime | None] = ()
) -> dict[int, tuple[InvocationRow, JobRow]]:
    """Invocations and their jobs, all locked (jobs in id order), by invocation id; one
    whose run or job another transaction holds is left out. ``filed``: where each is
    filed, in the same order, if known; a run filed elsewhere is not found."""
    places = _placed(filed)
    placed, parameters = _parameters(invocation_ids, places)
    if conn.dialect.name == "postgresql":
        at = len(JOB_COLUMNS)
        found = conn.exec_driver_sql(_LOCKS_RUNS_PG[placed], parameters)
        rows = found.all()  # at once: iterated, SQLAlchemy fetches row by row (1.5 µs a row)
        locked = [(InvocationRow.from_values(r, at), JobRow.from_values(r)) for r in rows]
    else:
        locked = _pairs(conn.execute(_LOCKS_RUNS[placed], parameters))
    return {inv.id: (inv, job) for inv, job in _found_where_filed(locked, invocation_ids, places)}


def _pairs(rows: Iterable[Row[Any]]) -> list[tuple[InvocationRow, JobRow]]:
    """The rows of a statement that labels each column with its table's name."""
    return [(InvocationRow.from_row(r, "invocations_"), JobRow.from_row(r, "jobs_")) for r in rows]


def _found_where_filed(
    locked: list[tuple[InvocationRow, JobRow]], ids: list[int], places: list[datetime] | None
) -> list[tuple[InvocationRow, JobRow]]:
    """The runs of a batch, found by their ids, that are filed where they were said to
    be (a lone run's statement matched its place already). A run filed elsewhere stays
    locked until the transaction ends, and is left alone."""
    if places is None or len(places) == 1:
        return locked
    wanted = dict(zip(ids, places, strict=True))
    return [(inv, job) for inv, job in locked if inv.filed_at == wanted[inv.id]]


def lock_invocation(
    conn: Connection, invocation_id: int, filed_at: datetime | None = None
) -> InvocationRow | None:
    parameters = {"b_id": invocation_id, "b_filed": filed_at}
    row = conn.execute(_LOCKS_INVOCATION[filed_at is not None], parameters).first()
    return None if row is None else InvocationRow.from_row(row)


def invocation_job(conn: Connection, invocation_id: int) -> int | None:
    """The job of an invocation, read without a lock: callers lock the job first, then
    the invocation, the one order every writer keeps."""
    query = select(invocations.c.job_id).where(invocations.c.id == invocation_id)
    return conn.execute(query).scalar_one_or_none()


def update_invocation(conn: Connection, run: InvocationRow | int, **values: Any) -> None:
    """Update a run, found by its row's id and where it is filed (by its id alone if
    only that is given)."""
    if isinstance(run, int):
        conn.execute(_UPDATE_INVOCATION, {**values, "b_id": run})
    else:
        update_invocations(conn, [{**values, "b_id": run.id, "b_filed": run.filed_at}])


def update_invocations(conn: Connection, rows: list[dict[str, Any]]) -> None:
    """Update many invocations, each row naming its own by ``b_id`` and, if known, where
    it is filed by ``b_filed``, all with the same columns: one statement by their ids
    (``bulk.update_joined``; not joined by place too: see ``_FILED``'s comment), a lone
    row by its id and place."""
    if not rows:
        return
    if len(rows) == 1 and rows[0].get("b_filed") is not None:
        conn.execute(_UPDATE_FILED, rows[0])
        return
    if "b_filed" in rows[0]:
        rows = [{k: v for k, v in row.items() if k != "b_filed"} for row in rows]
    bulk.update_joined(conn, invocations, rows, {"b_id": "id"})


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


def lock_started(conn: Connection, job_id: int) -> list[InvocationRow]:
    """The runs the job's machine counts as started: STARTING, RUNNING, and WAITING for
    their upstreams; oldest first, locked."""
    started = or_(
        invocations.c.status.in_(("STARTING", "RUNNING")),
        and_(invocations.c.status == "WAITING", invocations.c.reason.in_(HOLDS)),
    )
    query = (
        select(invocations)
        .where(invocations.c.job_id == job_id, invocations.c.backfill.is_(False), started)
        .order_by(invocations.c.id)
        .with_for_update()
    )
    return [InvocationRow.from_row(r) for r in conn.execute(query)]


def oldest_waiting(
    conn: Connection, job_id: int, *, backfill: bool = False, limit: int = 1
) -> list[InvocationRow]:
    """The runs that wait for their turn longest (a backfill's: the earliest slots),
    locked; not those that wait for their upstreams."""
    order = invocations.c.slot if backfill else invocations.c.id
    query = (
        select(invocations)
        .where(
            invocations.c.job_id == job_id,
            invocations.c.status == "WAITING",
            invocations.c.backfill == backfill,
            invocations.c.reason.is_(None),
        )
        .order_by(order)
        .limit(limit)
        .with_for_update()
    )
    return [InvocationRow.from_row(r) for r in conn.execute(query)]


def waiting_checks(conn: Connection, reason: str) -> Iterator[Row[Any]]:
    """Every run WAITING for ``reason``, oldest first: its id, job and ``checks``."""
    query = (
        select(invocations.c.id, invocations.c.job_id, invocations.c.checks)
        .where(invocations.c.status == "WAITING", invocations.c.reason == reason)
        .order_by(invocations.c.id)
    )
    yield from conn.execute(query)


def held_runs(
    conn: Connection,
    job_ids: list[int],
    reason: str,
    filed_since: datetime | None = None,
    *,
    skip_locked: bool = False,
) -> list[InvocationRow]:
    """The runs of ``job_ids`` that wait for ``reason`` (``upstream``:
    scheduler.workflows.upstream), oldest first, locked (with ``skip_locked``: those no other
    transaction holds); only those filed since ``filed_since``, if given (PostgreSQL
    then reads the partitions of those months alone)."""
    if not job_ids:
        return []
    query = (
        select(invocations)
        .where(
            invocations.c.job_id.in_(job_ids),
            invocations.c.status == "WAITING",
            invocations.c.reason == reason,
        )
        .order_by(invocations.c.id)
        .with_for_update(skip_locked=skip_locked)
    )
    if filed_since is not None:
        query = query.where(invocations.c.filed_at >= filed_since)
    return [InvocationRow.from_row(r) for r in conn.execute(query)]


def invocation_of_trigger(conn: Connection, job_id: int, trigger_id: str) -> dict[str, Any] | None:
    """The run a trigger made (started, WAITING or SKIPPED), by its unique trigger id."""
    query = select(invocations).where(
        invocations.c.job_id == job_id, invocations.c.trigger_id == trigger_id
    )
    row = conn.execute(query).first()
    return None if row is None else dict(row._mapping)


def invocation_at(conn: Connection, job_id: int, slot: datetime) -> dict[str, Any] | None:
    """The invocation of a job's slot, if it has one."""
    query = select(invocations).where(
        invocations.c.job_id == job_id,
        invocations.c.slot == slot,
        invocations.c.filed_at == slot,  # the same rows: PostgreSQL reads one partition
    )
    row = conn.execute(query).first()
    return None if row is None else dict(row._mapping)


def slots_taken(conn: Connection, job_id: int, first: datetime, last: datetime) -> set[datetime]:
    """The slots in ``[first, last]`` that have an invocation, of any status."""
    query = select(invocations.c.slot).where(
        invocations.c.job_id == job_id,
        invocations.c.slot.between(first, last),
        invocations.c.filed_at.between(first, last),  # the same rows, fewer partitions
    )
    return set(conn.execute(query).scalars())


# A backfill's run waiting here is in flight: the machine started it, its holds admit it.
_ADMITTING = (Reason.GATE, Reason.POOL)


def count_backfill(conn: Connection, job_id: int) -> int:
    """A job's backfill runs in flight: started, or waiting for their gates or a place
    in their pool."""
    in_flight = or_(
        invocations.c.status.in_(("STARTING", "RUNNING")),
        and_(invocations.c.status == "WAITING", invocations.c.reason.in_(_ADMITTING)),
    )
    query = select(func.count()).where(
        invocations.c.job_id == job_id, invocations.c.backfill.is_(True), in_flight
    )
    return conn.execute(query).scalar_one()


def renew_lease(
    conn: Connection,
    invocation_id: int,
    attempt: int,
    deadline: datetime,
    job_id: int | None = None,
    filed_at: datetime | None = None,
) -> bool:
    """Move a claimed attempt's lease deadline (never past its timeout). False: the
    attempt is not (or no longer) the current one: it was retried, aborted or timed out,
    or (``job_id`` given) the run is not that job's (or not filed at ``filed_at``)."""
    query = update(invocations).where(
        invocations.c.id == invocation_id,
        invocations.c.attempt == attempt,
        invocations.c.status == "RUNNING",
        invocations.c.worker.isnot(None),
    )
    if job_id is not None:
        query = query.where(invocations.c.job_id == job_id)
    if filed_at is not None:
        query = query.where(invocations.c.filed_at == filed_at)
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


def append_log(
    conn: Connection, invocation_id: int, now: datetime, line: str, filed_at: datetime | None = None
) -> None:
    inv = lock_invocation(conn, invocation_id, filed_at)
    if inv is not None:
        update_invocation(conn, inv, log=debuglog.append(inv.log, now, line))


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


def lapsed(conn: Connection, status: str, now: datetime, limit: int) -> list[int]:
    """Invocations of ``status`` past their deadline, the oldest first: RUNNING ones whose
    lease or timeout lapsed, WAITING ones past their upstreams' ``max_wait`` (read only:
    each is then settled in a transaction that locks its job first)."""
    query = (
        select(invocations.c.id)
        .where(invocations.c.deadline < now, invocations.c.status == status)
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
    before: int | None = None,
    limit: int = 50,
) -> list[dict[str, Any]]:
    """Invocations, newest first, with the job's ``project/name``; ``before``: with ids
    below it (the next page)."""
    ref = (jobs.c.project + "/" + jobs.c.name).label("job")
    query = select(invocations, ref).join(jobs, jobs.c.id == invocations.c.job_id)
    if job_id is not None:
        query = query.where(invocations.c.job_id == job_id)
    if since is not None:
        query = query.where(invocations.c.created_at >= since)
    if before is not None:
        query = query.where(invocations.c.id < before)
    query = query.order_by(invocations.c.id.desc()).limit(limit)
    return [dict(r._mapping) for r in conn.execute(query)]


def claimed_by(
    conn: Connection, workers: list[str]
) -> list[tuple[str, datetime | None, datetime | None]]:
    """The RUNNING runs that a worker named by one of ``workers`` (``work@host``, as its
    hostname goes) has claimed: (job, slot, claimed at), oldest claim first. Read from
    the partial index of deadlines, which every RUNNING run has."""
    claimed = or_(*(invocations.c.worker.like(f"{name}:%") for name in workers))
    query = (
        select(
            (jobs.c.project + "/" + jobs.c.name).label("job"),
            invocations.c.slot,
            invocations.c.started_at,
        )
        .join(jobs, jobs.c.id == invocations.c.job_id)
        .where(invocations.c.deadline.isnot(None), invocations.c.status == "RUNNING", claimed)
        .order_by(invocations.c.started_at)
    )
    return [tuple(row) for row in conn.execute(query)]  # type: ignore[misc]
