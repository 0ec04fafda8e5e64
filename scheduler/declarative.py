"""``apply``: make a project's jobs in the database match a declared list.

Jobs in the list are created or updated; jobs of the project missing from it are
disabled (their history kept). An unchanged spec writes nothing at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler import store
from scheduler.engine import Engine, Message
from scheduler.spec import JobSpec
from scheduler.store import JobRow
from statemachine import Disable, Enable, Event, ScheduleChanged


@dataclass
class ApplyReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    disabled: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


def apply(
    engine: Engine, project: str, specs: list[JobSpec], *, dry_run: bool = False
) -> ApplyReport:
    if any(spec.project != project for spec in specs):
        raise ValueError(f"every job must belong to project {project!r}")
    report = ApplyReport()
    messages: list[Message] = []
    with engine.transaction() as conn:
        now = engine.clock()
        existing = store.jobs_of_project(conn, project)
        for spec in specs:
            job = existing.pop(spec.name, None)
            if job is not None and job.enabled and job.revision == spec.revision:
                report.unchanged.append(spec.id)
                continue
            (report.created if job is None else report.updated).append(spec.id)
            if dry_run:
                continue
            if job is None:
                job = store.lock_job(conn, store.insert_job(conn, spec, now))
                assert job is not None
            messages += engine.feed(
                conn, job, _event_for(job, spec), now, spec=spec, enabled=True
            ).messages
        for job in existing.values():
            if not job.enabled:
                continue
            report.disabled.append(job.ref)
            if not dry_run:
                messages += engine.feed(
                    conn, job, Disable(), now, enabled=False, paused=False, pause_reason=None
                ).messages
    engine.send(messages)
    return report


def _event_for(job: JobRow, spec: JobSpec) -> Event:
    """Enable a new or disabled job; move the tick of an enabled one whose schedule
    changed. Enable on an enabled job is a no-op for the machine: only the spec is saved."""
    if job.enabled and (job.schedule, job.timezone) != (spec.schedule, spec.timezone):
        return ScheduleChanged()
    return Enable()
