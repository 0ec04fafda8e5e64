"""The queries behind the web page (``scheduler.web``): a page of jobs, their last
outcomes, one job's runs and the jobs linked to it.

The page must stay fast at 100,000 jobs and a history of months, so no query here
reads the history whole: each job's newest runs come from ``ix_invocations_job_id_id``
(job_id, id), newest first, and a page's strips of outcomes are one statement for all
its jobs, not one per job. The list reads the jobs alone: by name from the unique key,
while a filter (state, outcome, text), another order or a page far down (an offset)
reads the jobs table through (bench.scrape times each).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ARRAY,
    Connection,
    Integer,
    Select,
    Text,
    and_,
    case,
    cast,
    false,
    func,
    literal,
    or_,
    select,
    true,
    tuple_,
)

from cronchain.scheduler.spec.model import NAME
from cronchain.scheduler.storage.models import JOB_STATES, invocations, jobs
from cronchain.scheduler.storage.observed import WAITING_REASON
from cronchain.scheduler.timing.iso import parsed

STRIP = 30  # outcomes a job's strip shows
_IDS_PER_STATEMENT = 1000  # a page is 200 jobs; this only bounds a caller's list


@dataclass(frozen=True)
class JobLine:
    """One job as the list shows it."""

    id: int
    project: str
    name: str
    state: str
    schedule: str
    timezone: str
    tick_at: datetime | None
    last_success_at: datetime | None
    paused: bool
    pause_reason: str | None
    last_failure_at: datetime | None = None

    @property
    def ref(self) -> str:
        return f"{self.project}/{self.name}"

    @property
    def outcome(self) -> str:
        """How its latest run that ended succeeded or failed: ``succeeded``, ``failed``,
        or ``never`` (no run has yet). Skipped and aborted runs did not run: they leave
        it as it was."""
        if self.last_failure_at is None and self.last_success_at is None:
            return "never"
        if self.last_success_at is None or (
            self.last_failure_at is not None and self.last_failure_at > self.last_success_at
        ):
            return "failed"
        return "succeeded"


@dataclass(frozen=True)
class Run:
    """One invocation as a strip cell, a timeline row or a history row shows it.
    ``reason`` is why it was skipped or waits: for a WAITING run without a recorded
    reason, what made it wait (``backfill`` or ``buffered``), as /metrics counts it."""

    id: int
    slot: datetime | None
    trigger_id: str | None
    status: str
    reason: str | None
    error: str | None
    created_at: datetime
    attempt: int = 0
    started_at: datetime | None = None
    finished_at: datetime | None = None
    backfill: bool = False
    start_at: datetime | None = None  # when its next attempt is due (a retry waits)


# A WAITING run's reason as /metrics counts it (scheduler.storage.observed).
_REASON = case((invocations.c.status == "WAITING", WAITING_REASON), else_=invocations.c.reason)


_RUN_COLUMNS = (
    invocations.c.id,
    invocations.c.slot,
    invocations.c.trigger_id,
    invocations.c.status,
    _REASON.label("reason"),
    invocations.c.error,
    invocations.c.created_at,
    invocations.c.attempt,
    invocations.c.started_at,
    invocations.c.finished_at,
    invocations.c.backfill,
    invocations.c.start_at,
)
# A strip cell's: what its colour and title need. The error is cut to a line (a title
# needs no traceback, and a page has 6,000 cells), and no time it does not show is read
# (each costs a conversion per row).
_STRIP_COLUMNS = (
    *_RUN_COLUMNS[:5],
    func.substr(invocations.c.error, 1, 200).label("error"),
    invocations.c.created_at,
)
_LINE_COLUMNS = (
    jobs.c.id,
    jobs.c.project,
    jobs.c.name,
    jobs.c.state,
    jobs.c.schedule,
    jobs.c.timezone,
    jobs.c.tick_at,
    jobs.c.last_success_at,
    jobs.c.paused,
    jobs.c.pause_reason,
    jobs.c.last_failure_at,
)


def projects(conn: Connection) -> list[tuple[str, int]]:
    """Each project with its number of jobs, by name: read from the unique key's index
    (project, name), which holds every job once."""
    query = select(jobs.c.project, func.count()).group_by(jobs.c.project).order_by(jobs.c.project)
    return [(p, n) for p, n in conn.execute(query)]


STATES = JOB_STATES
_SEARCHABLE = re.compile(r"[A-Za-z0-9_./-]+")  # what a project/name may hold
OUTCOMES = ("succeeded", "failed", "never")  # what the list filters a job's outcome by
_FAILED_LAST = and_(
    jobs.c.last_failure_at.is_not(None),
    or_(jobs.c.last_success_at.is_(None), jobs.c.last_failure_at > jobs.c.last_success_at),
)
_OUTCOME = {
    "failed": _FAILED_LAST,
    "succeeded": and_(jobs.c.last_success_at.is_not(None), ~_FAILED_LAST),
    "never": and_(jobs.c.last_success_at.is_(None), jobs.c.last_failure_at.is_(None)),
}
# The list's orders, each ending in the unique key so that a page is always the same:
# by name; the next tick first (none last); the newest success or failure first.
SORTS: dict[str, tuple[Any, ...]] = {
    "name": (jobs.c.project, jobs.c.name),
    "next": (jobs.c.tick_at.asc().nulls_last(), jobs.c.project, jobs.c.name),
    "success": (jobs.c.last_success_at.desc().nulls_last(), jobs.c.project, jobs.c.name),
    "failure": (jobs.c.last_failure_at.desc().nulls_last(), jobs.c.project, jobs.c.name),
}


@dataclass(frozen=True)
class JobQuery:
    """Which jobs the list shows, in which order: of ``project``, in ``state``, whose
    last outcome is ``outcome`` (``OUTCOMES``), whose ``project/name`` holds ``text``
    (any case); ``sort`` is one of ``SORTS``."""

    project: str | None = None
    state: str | None = None
    outcome: str | None = None
    text: str | None = None
    sort: str = "name"


def listing(
    conn: Connection,
    query: JobQuery,
    *,
    offset: int,
    limit: int,
    after: tuple[str, str] | None = None,
    before: tuple[str, str] | None = None,
) -> tuple[list[JobLine], int]:
    """A page of the jobs ``query`` finds, and how many it finds in all: ``limit`` of
    them after the first ``offset``, in ``query.sort``'s order. In name order, the page
    after the job ``after`` (project, name), or the one before ``before``, is read from
    the unique key from there (keyset paging: the 500th page costs what the first does,
    where an offset reads every job before it)."""
    where = []
    if query.project is not None:
        where.append(jobs.c.project == query.project)
    if query.state is not None:
        where.append(jobs.c.state == query.state)
    if query.outcome is not None:
        where.append(_OUTCOME[query.outcome])
    if query.text and not _SEARCHABLE.fullmatch(query.text):
        where.append(false())  # a character no name holds (PostgreSQL refuses a NUL)
    elif query.text:
        ref = func.lower(jobs.c.project + "/" + jobs.c.name)
        where.append(ref.contains(query.text.lower(), autoescape=True))
    scanning = query.state is not None or query.outcome is not None or bool(query.text)
    if scanning and after is None and before is None:
        # Such a filter reads every job anyway: the count comes with the page, one read.
        counted = select(*_LINE_COLUMNS, func.count().over()).where(*where)
        rows = conn.execute(counted.order_by(*SORTS[query.sort]).offset(offset).limit(limit))
        found = rows.all()
        if found:
            return [JobLine(*row[:-1]) for row in found], found[0][-1]
    count = conn.execute(select(func.count()).select_from(jobs).where(*where)).scalar_one()
    page = select(*_LINE_COLUMNS).where(*where).limit(limit)
    key = tuple_(jobs.c.project, jobs.c.name)
    if query.sort == "name" and before is not None:
        page = page.where(key < tuple_(*before)).order_by(jobs.c.project.desc(), jobs.c.name.desc())
        return [JobLine(*row) for row in reversed(conn.execute(page).all())], count
    if query.sort == "name" and after is not None:
        page = page.where(key > tuple_(*after)).order_by(*SORTS["name"])
    else:
        page = page.order_by(*SORTS[query.sort]).offset(offset)
    return [JobLine(*row) for row in conn.execute(page)], count


def job_line(conn: Connection, project: str, name: str) -> JobLine | None:
    """The job ``project/name``; None if there is none, or the names are none a job can
    have (a scanner's NUL, a name too long: asked nothing)."""
    if not (NAME.fullmatch(project) and NAME.fullmatch(name)):
        return None
    query = select(*_LINE_COLUMNS).where(jobs.c.project == project, jobs.c.name == name)
    row = conn.execute(query).first()
    return None if row is None else JobLine(*row)


def strips(conn: Connection, job_ids: list[int], per_job: int = STRIP) -> dict[int, list[Run]]:
    """The newest ``per_job`` runs of each job, oldest first, by job id: one statement.

    PostgreSQL: a LATERAL subquery per job id, each an index scan of (job_id, id)
    backwards with a LIMIT (one per month partition, merged). SQLite has no LATERAL: each
    job's ``per_job``-th newest id is found by a correlated subquery on the same index,
    and the runs from that id on are a range of it."""
    found: dict[int, list[Run]] = {job_id: [] for job_id in job_ids}
    for i in range(0, len(job_ids), _IDS_PER_STATEMENT):
        chunk = job_ids[i : i + _IDS_PER_STATEMENT]
        query = (_lateral if conn.dialect.name == "postgresql" else _ranged)(chunk, per_job)
        for row in conn.execute(query).all():
            found[row[0]].append(Run(*row[1:]))
    for runs in found.values():
        runs.sort(key=lambda r: r.id)
    return found


def _lateral(job_ids: list[int], per_job: int) -> Select[Any]:
    # One array parameter (its driver would parse one placeholder per id, slowly).
    ids = literal(job_ids, ARRAY(Integer))
    wanted = func.unnest(ids).table_valued("job_id").render_derived("wanted")
    newest = (
        select(*_STRIP_COLUMNS)
        .where(invocations.c.job_id == wanted.c.job_id)
        .order_by(invocations.c.id.desc())
        .limit(per_job)
        .lateral("newest")
    )
    return select(wanted.c.job_id, *newest.c).select_from(wanted.join(newest, true()))


def _ranged(job_ids: list[int], per_job: int) -> Select[Any]:
    other = invocations.alias("other")
    nth_newest = (
        select(other.c.id)
        .where(other.c.job_id == jobs.c.id)
        .order_by(other.c.id.desc())
        .limit(1)
        .offset(per_job - 1)
        .correlate(jobs)
        .scalar_subquery()
    )
    return (
        select(jobs.c.id.label("job_id"), *_STRIP_COLUMNS)
        .select_from(jobs)
        .join(
            invocations,
            and_(
                invocations.c.job_id == jobs.c.id,
                invocations.c.id >= func.coalesce(nth_newest, 0),
            ),
        )
        .where(jobs.c.id.in_(job_ids))
    )


def runs_of(
    conn: Connection, job_id: int, *, before: int | None = None, limit: int = 50
) -> list[Run]:
    """A job's runs, newest first, with ids below ``before`` (keyset paging on the index
    (job_id, id))."""
    query = select(*_RUN_COLUMNS).where(invocations.c.job_id == job_id)
    if before is not None:
        query = query.where(invocations.c.id < before)
    query = query.order_by(invocations.c.id.desc()).limit(limit)
    return [Run(*row) for row in conn.execute(query)]


@dataclass(frozen=True)
class RunDetail(Run):
    """One run as its own page shows it: a ``Run`` and what only that page reads (the
    earlier attempts a retry recorded, what its holds checked, its debug log)."""

    worker: str | None = None
    attempts: list[dict[str, Any]] | None = None
    checks: dict[str, Any] | None = None
    revision: str = ""
    log: str | None = None


def run_detail(conn: Connection, job_id: int, run_id: int) -> RunDetail | None:
    """The run ``run_id`` if it is the job's (a run id under another job's page is not
    found), read from the index (job_id, id)."""
    query = select(
        *_RUN_COLUMNS,
        invocations.c.worker,
        invocations.c.attempts,
        invocations.c.checks,
        invocations.c.revision,
        invocations.c.log,
    ).where(invocations.c.job_id == job_id, invocations.c.id == run_id)
    row = conn.execute(query).first()
    return None if row is None else RunDetail(*row)


@dataclass(frozen=True)
class Timing:
    """When a run was due (its slot; when it was made, for a triggered or backfilled run,
    whose slot may be weeks old), when its first attempt started, and when its last
    attempt started and ended: what the chart of a job's last runs draws
    (``scheduler.web.chart``)."""

    id: int
    status: str
    due: datetime
    first_started_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None


def timings(conn: Connection, job_id: int, limit: int = 100) -> list[Timing]:
    """The job's newest ``limit`` runs' times, newest first: the first attempt's start
    is the first recorded attempt's (a retried run), else the run's own."""
    first = invocations.c.attempts[(0, "started_at")].as_string()
    query = (
        select(
            invocations.c.id,
            invocations.c.status,
            case(
                (invocations.c.backfill, invocations.c.created_at),
                else_=func.coalesce(invocations.c.slot, invocations.c.created_at),
            ),
            first,
            invocations.c.started_at,
            invocations.c.finished_at,
        )
        .where(invocations.c.job_id == job_id)
        .order_by(invocations.c.id.desc())
        .limit(limit)
    )
    found = []
    for run_id, status, due, first_text, started, finished in conn.execute(query):
        first_start = parsed(first_text) or started
        found.append(Timing(run_id, status, due, first_start, started, finished))
    return found


def specs_mentioning(conn: Connection, key: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(project, name, spec) of the jobs whose stored spec has the key ``key`` (e.g.
    ``triggers``): the jobs that may point at another one. A scan of the registry's
    specs as text, which returns only the few jobs that have such edges."""
    query = select(jobs.c.project, jobs.c.name, jobs.c.spec).where(
        cast(jobs.c.spec, Text).like(f'%"{key}"%')
    )
    return [(p, n, spec) for p, n, spec in conn.execute(query)]
