"""``apply``: make a project's jobs in the database match a declared list.

Jobs in the list are created or updated; jobs of the project missing from it are
disabled (their history kept), or with ``prune`` deleted with their history. An
unchanged spec writes nothing at all.

``reconcile_folder`` applies every job file of a folder: beat runs it on an interval
when ``CRONCHAIN_JOBS_DIR`` is set, so the folder is the source of truth.
"""

from __future__ import annotations

import contextlib
import logging
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from sqlalchemy import Connection

from scheduler.effects import Message
from scheduler.engine import Engine
from scheduler.errors import CronchainError, SpecError, TransientError
from scheduler.spec import JobFile, JobSpec, load_job_file
from scheduler.storage import job_store
from scheduler.storage.rows import JobRow
from scheduler.triggergraph import trigger_cycle
from statemachine import Disable, Enable, Event, Pause, Resume, ScheduleChanged

log = logging.getLogger(__name__)


@dataclass
class ApplyReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    disabled: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


def apply(
    engine: Engine,
    project: str,
    specs: list[JobSpec],
    *,
    dry_run: bool = False,
    prune: bool = False,
) -> ApplyReport:
    if any(spec.project != project for spec in specs):
        raise ValueError(f"every job must belong to project {project!r}")
    report = ApplyReport()
    messages: list[Message] = []
    with engine.transaction() as conn:
        now = engine.clock()
        existing = job_store.jobs_of_project(conn, project)
        _refuse_trigger_cycles(conn, project, specs)
        for spec in specs:
            job = existing.pop(spec.name, None)
            if job is not None and job.enabled and job.revision == spec.revision:
                report.unchanged.append(spec.id)
                continue
            (report.created if job is None else report.updated).append(spec.id)
            if dry_run:
                continue
            was_paused = None if job is None else job.spec.get("paused")
            if job is None:
                job = job_store.lock_job(conn, job_store.insert_job(conn, spec, now))
                assert job is not None
            messages += engine.feed(
                conn, job, _event_for(job, spec), now, spec=spec, enabled=True
            ).messages
            messages += _declare_pause(engine, conn, job.id, spec, now, was_paused=was_paused)
        for job in existing.values():
            messages += _retire(engine, conn, job, report, now, dry_run=dry_run, prune=prune)
    engine.send(messages)
    return report


def _refuse_trigger_cycles(conn: Connection, project: str, specs: list[JobSpec]) -> None:
    """A cycle of triggers turns one run into runs without end: refuse the file."""
    declared = {s.id: s.controls["triggers"] for s in specs if "triggers" in s.controls}
    if declared:
        job_store.lock_trigger_graph(conn)
    cycle = trigger_cycle(declared, lambda refs: job_store.triggers_of(conn, refs, besides=project))
    if cycle:
        first = next((ref for ref in cycle if ref in declared), cycle[0])
        path = " -> ".join(cycle)
        raise SpecError(
            "triggers",
            f"the jobs trigger each other in a cycle: {path}",
            where=f"job {first.rpartition('/')[2]!r}",
        )


def _retire(
    engine: Engine,
    conn: Connection,
    job: JobRow,
    report: ApplyReport,
    now: datetime,
    *,
    dry_run: bool,
    prune: bool,
) -> list[Message]:
    """A job missing from the list: delete it (``prune``) or disable it."""
    if prune:
        report.deleted.append(job.ref)
        if not dry_run:
            job_store.delete_job(conn, job.id)
        return []
    if not job.enabled:
        return []
    report.disabled.append(job.ref)
    if dry_run:
        return []
    fed = engine.feed(conn, job, Disable(), now, enabled=False, paused=False, pause_reason=None)
    return fed.messages


def _declare_pause(
    engine: Engine,
    conn: Connection,
    job_id: int,
    spec: JobSpec,
    now: datetime,
    *,
    was_paused: str | bool | None,
) -> list[Message]:
    """``paused`` in a changed spec pauses the job; taken out, it resumes the job the spec
    had paused, if it is still paused for that reason. An operator's own pause or resume
    stands until the spec changes, and an operator's own pause even then."""
    declared = spec.controls.get("paused")
    if not declared and not was_paused:
        return []
    job = job_store.lock_job(conn, job_id)
    assert job is not None
    paused_by_spec = job.pause_reason == (was_paused if isinstance(was_paused, str) else None)
    if declared and not job.paused:
        reason = declared if isinstance(declared, str) else None
        return engine.feed(conn, job, Pause(reason), now, paused=True, pause_reason=reason).messages
    if not declared and was_paused and job.paused and paused_by_spec:
        return engine.feed(conn, job, Resume(), now, paused=False, pause_reason=None).messages
    return []


def _event_for(job: JobRow, spec: JobSpec) -> Event:
    """Enable a new or disabled job; move the tick of an enabled one whose schedule
    changed. Enable on an enabled job is a no-op for the machine: only the spec is saved."""
    if job.enabled and (job.schedule, job.timezone) != (spec.schedule, spec.timezone):
        return ScheduleChanged()
    return Enable()


@dataclass
class FolderReport:
    applied: dict[str, ApplyReport] = field(default_factory=dict)  # file name -> report
    failed: dict[str, str] = field(default_factory=dict)  # file name -> error
    owners: dict[str, str] = field(default_factory=dict)  # project -> the file declaring it


_PROJECT_LINE = re.compile(rb"^project:[ \t]*[\"']?([A-Za-z0-9][A-Za-z0-9_.-]{0,99})", re.M)


def _load_claiming(path: Path, owners: dict[str, str]) -> JobFile:
    """Load a job file; one that does not load still claims the project its text names,
    so that a typo in it does not hand its project to the next file, which would then
    disable its jobs."""
    try:
        return load_job_file(path)
    except SpecError:
        with contextlib.suppress(OSError), path.open("rb") as file:
            if m := _PROJECT_LINE.search(file.read(64 * 1024)):
                owners.setdefault(m.group(1).decode(), path.name)
        raise


def reconcile_folder(engine: Engine, folder: Path) -> FolderReport:
    """Apply each ``*.yaml``/``*.yml`` file of ``folder``, each on its own: a file that
    does not load or apply is reported and left out, and the other files are still
    applied. A project belongs to one file, the first by name: a second file naming it
    is refused (two files of one project would disable each other's jobs on every pass).
    A project whose file is removed keeps its jobs: empty the file (``jobs: []``) to
    disable them. A database outage is not a file's fault: it ends the pass."""
    report = FolderReport()
    owners = report.owners
    for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
        try:
            job_file = _load_claiming(path, owners)
            owner = owners.setdefault(job_file.project, path.name)
            if owner != path.name:
                why = f"is declared by {owner} already; a project belongs to one file"
                raise SpecError("project", f"{job_file.project!r} {why}", where=str(path))
            report.applied[path.name] = apply(engine, job_file.project, job_file.jobs)
        except TransientError:
            raise
        except (CronchainError, OSError) as err:
            report.failed[path.name] = str(err)
        except Exception as err:  # a bug, but one file's: the others still apply
            log.exception("job file %s: applying it failed", path)
            report.failed[path.name] = f"{type(err).__name__}: {err}"
    return report
