"""The named queries of ``requires`` (:mod:`scheduler.workflows.upstream` says what a slot waits
for and when it is released): upstreams' rows, their successes in a window, the
downstreams waiting for them and the ``requirements`` an apply writes."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import (
    Connection,
    Row,
    bindparam,
    delete,
    exists,
    func,
    insert,
    literal,
    literal_column,
    or_,
    select,
    text,
    tuple_,
    update,
)

from cronchain.scheduler.storage.models import REQUIRING, invocations, jobs, requirements
from cronchain.statemachine import Reason

REASON = Reason.UPSTREAM  # a run WAITING with this reason waits for its upstreams
WAITING = "WAITING"
Ref = tuple[str, str]  # (project, name)

_UPSTREAMS = select(
    jobs.c.id, jobs.c.project, jobs.c.name, jobs.c.last_success_at, jobs.c.last_success_filed
).where(tuple_(jobs.c.project, jobs.c.name).in_(bindparam("refs", expanding=True)))
_LOCKED = {
    None: _UPSTREAMS,
    "wait": _UPSTREAMS.order_by(jobs.c.id).with_for_update(read=True),
    "skip": _UPSTREAMS.order_by(jobs.c.id).with_for_update(read=True, skip_locked=True),
}


def upstreams(
    conn: Connection, refs: Sequence[Ref], lock: Literal["wait", "skip"] | None = None
) -> list[Row[Any]]:
    """The rows of the jobs ``refs`` names: as they are, or under a share lock that
    waits for a transaction holding one (``wait``) or leaves such a row out (``skip``)."""
    return list(conn.execute(_LOCKED[lock], {"refs": list(refs)}))


def wait_for_upstreams(conn: Connection, refs: Sequence[Ref], at_most: str) -> None:
    """Wait until no transaction holds a row of ``refs``, or ``at_most`` has passed
    (PostgreSQL's lock_timeout: then the statement fails)."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{at_most}'")
    upstreams(conn, refs, "wait")


# An upstream's latest success filed in a window. The window bounds ``slot`` too, so that
# PostgreSQL reads the (job, slot) index and only the partitions of those months; a
# triggered run has no slot.
_FILED = invocations.c.filed_at
_IN_WINDOW = select(func.max(_FILED)).where(
    invocations.c.job_id == bindparam("b_job"),
    invocations.c.status == "SUCCEEDED",
    _FILED.between(bindparam("b_since"), bindparam("b_until")),
    or_(
        invocations.c.slot.between(bindparam("b_since"), bindparam("b_until")),
        invocations.c.slot.is_(None),
    ),
)


def latest_success(
    conn: Connection, job_id: int, since: datetime, until: datetime
) -> datetime | None:
    """When the job's latest success filed from ``since`` to ``until`` is filed."""
    window = {"b_job": job_id, "b_since": since, "b_until": until}
    return conn.execute(_IN_WINDOW, window).scalar()


# The jobs that require an upstream and have a run waiting for it (one its job's machine
# counts as started: ``active``, the cheaper test, first). Most successes find none and
# end here, in one statement.
_DOWNSTREAMS = (
    select(requirements.c.job_id, jobs.c.spec)
    .select_from(requirements.join(jobs, jobs.c.id == requirements.c.job_id))
    .where(
        requirements.c.project == bindparam("b_project"),
        requirements.c.name == bindparam("b_name"),
        jobs.c.active > 0,
        # Literals, not parameters: a prepared statement's generic plan cannot use a
        # partial index (ix_invocations_waiting: the WAITING runs alone) on a parameter.
        exists().where(
            invocations.c.status == literal_column(f"'{WAITING}'"),
            invocations.c.reason == literal_column(f"'{REASON}'"),
            invocations.c.job_id == requirements.c.job_id,
        ),
    )
)


def waiting_downstreams(conn: Connection, project: str, name: str) -> dict[int, dict[str, Any]]:
    """The jobs requiring ``project/name`` that have a run waiting for their upstreams,
    each with its spec."""
    query = {"b_project": project, "b_name": name}
    return {r.job_id: r.spec for r in conn.execute(_DOWNSTREAMS, query)}


def waiting_jobs(conn: Connection, limit: int) -> list[int]:
    """Jobs with runs that wait for their upstreams, those looked at longest ago first."""
    checked = invocations.c.checks["checked_at"].as_string()
    query = (
        select(invocations.c.job_id, func.min(checked).label("checked"))
        .where(invocations.c.status == WAITING, invocations.c.reason == REASON)
        .group_by(invocations.c.job_id)
        .order_by("checked")
        .limit(limit)
    )
    return [row.job_id for row in conn.execute(query)]


def waiting_among(conn: Connection, job_ids: list[int]) -> list[int]:
    """Which of ``job_ids`` have runs that wait for their upstreams."""
    if not job_ids:
        return []
    query = (
        select(invocations.c.job_id)
        .where(
            invocations.c.status == WAITING,
            invocations.c.reason == REASON,
            invocations.c.job_id.in_(job_ids),
        )
        .distinct()
    )
    return sorted(conn.execute(query).scalars())


# --- requirements, as apply writes them ------------------------------------------------


def requiring(conn: Connection, project: str) -> list[Row[Any]]:
    """``project``'s jobs whose stored specs require something: id, name and spec."""
    query = select(jobs.c.id, jobs.c.name, jobs.c.spec).where(
        jobs.c.project == project, text(REQUIRING[conn.dialect.name])
    )
    return list(conn.execute(query))


def replace_requirements(conn: Connection, project: str, rows: list[dict[str, Any]]) -> None:
    """``project``'s jobs' requirements become ``rows`` (job_id, project, name)."""
    mine = select(jobs.c.id).where(jobs.c.project == project)
    conn.execute(delete(requirements).where(requirements.c.job_id.in_(mine)))
    if rows:
        conn.execute(insert(requirements), rows)


def flag_required(conn: Connection) -> None:
    """Flag every job that some requirement names (``jobs.downstream``): never cleared."""
    named = select(requirements.c.project, requirements.c.name)
    conn.execute(
        update(jobs)
        .where(~jobs.c.downstream, tuple_(jobs.c.project, jobs.c.name).in_(named))
        .values(downstream=True)
    )


def required_by_others(conn: Connection, project: str, names: list[str]) -> dict[str, str]:
    """Of ``project``'s jobs ``names``, those that a job of another project requires:
    each with one such job."""
    if not names:
        return {}
    query = (
        select(requirements.c.name, jobs.c.project, jobs.c.name.label("downstream"))
        .select_from(requirements.join(jobs, jobs.c.id == requirements.c.job_id))
        .where(
            requirements.c.project == project,
            requirements.c.name.in_(names),
            jobs.c.project != project,
        )
    )
    return {r.name: f"{r.project}/{r.downstream}" for r in conn.execute(query)}


def ever_required(conn: Connection, project: str) -> bool:
    """Whether any of ``project``'s jobs has requirements written."""
    query = (
        select(literal(1))
        .select_from(requirements.join(jobs, jobs.c.id == requirements.c.job_id))
        .where(jobs.c.project == project)
        .limit(1)
    )
    return conn.execute(query).first() is not None
