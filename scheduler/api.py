"""The Python API: ``from scheduler import Scheduler, JobSpec``.

    sched = Scheduler.from_env()
    sched.apply([JobSpec("demo", "ping", "every 5s")], project="demo")
    sched.trigger("demo/ping")

Everything the CLI does goes through here, so scripts and the CLI cannot disagree.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from scheduler.declarative import ApplyReport, apply
from scheduler.engine import Engine
from scheduler.errors import NotFound
from scheduler.explain import explain, iso
from scheduler.spec import JobSpec, load_job_file
from scheduler.storage import job_store, run_store
from statemachine import Pause, Resume, Trigger


class Scheduler:
    def __init__(self, engine: Engine):
        self.engine = engine

    @classmethod
    def from_env(cls) -> Scheduler:
        from scheduler.workers.runtime import Runtime

        return cls(Runtime.from_env().engine)

    def upgrade(self) -> None:
        """Bring the database schema to the newest migration."""
        from migrations import upgrade

        upgrade(self.engine.db)

    def apply(
        self,
        jobs: list[JobSpec] | str | Path,
        *,
        project: str | None = None,
        dry_run: bool = False,
        prune: bool = False,
    ) -> ApplyReport:
        """Make ``project``'s jobs match ``jobs`` (a list of specs or a job file); jobs
        of the project not in it are disabled, or deleted with ``prune``."""
        if isinstance(jobs, str | Path):
            job_file = load_job_file(jobs)
            project, jobs = job_file.project, job_file.jobs
        if project is None:
            raise ValueError("apply needs the project the jobs belong to")
        return apply(self.engine, project, jobs, dry_run=dry_run, prune=prune)

    def jobs(self) -> list[dict[str, Any]]:
        with self.engine.db.connect() as conn:
            rows = job_store.list_jobs(conn)
        return [
            {
                "id": job.ref,
                "state": job.snapshot.state.value,
                "schedule": job.schedule,
                "timezone": job.timezone,
                "next_tick": iso(job.snapshot.tick_at),
                "paused": job.paused,
                "pause_reason": job.pause_reason,
                "revision": job.revision,
                "kind": job.kind,
                "enabled": job.enabled,
                "overruns": job.snapshot.overruns,
            }
            for job in rows
        ]

    def history(
        self, job: str | None = None, *, since: datetime | None = None, limit: int = 50
    ) -> list[dict[str, Any]]:
        """Invocations, newest first; ``job`` is ``project/name`` (or a unique name)."""
        with self.engine.db.connect() as conn:
            job_id = None if job is None else job_store.resolve_job(conn, job)
            rows = run_store.history(conn, job_id=job_id, since=since, limit=limit)
        return [_summary(r) for r in rows]

    def invocation(self, invocation_id: int) -> dict[str, Any]:
        """One invocation whole: its earlier attempts and its debug log too."""
        with self.engine.db.connect() as conn:
            row = run_store.invocation(conn, invocation_id)
        if row is None:
            raise NotFound(f"no invocation {invocation_id}")
        return _summary(row) | {
            "attempts": row["attempts"] or [],
            "worker": row["worker"],
            "created_at": iso(row["created_at"]),
            "start_at": iso(row["start_at"]),
            "deadline": iso(row["deadline"]),
            "timeout_at": iso(row["timeout_at"]),
            "log": row["log"] or "",
        }

    def abort(self, job: str | None = None, *, invocation: int | None = None) -> list[int]:
        """Abort the job's active invocations, or one invocation; returns the ids."""
        if (job is None) == (invocation is None):
            raise ValueError("abort needs a job or an invocation id")
        return self.engine.runs.abort(job=job, invocation_id=invocation)

    def trigger(self, job: str) -> dict[str, Any]:
        """Start a run now; if one is active it is recorded as SKIPPED ("overlap")."""
        trigger_id = uuid.uuid4().hex
        fed = self.engine.command(job, Trigger(trigger_id))
        if fed.started is not None:
            return {"trigger_id": trigger_id, "invocation": fed.started, "skipped": None}
        return {"trigger_id": trigger_id, "invocation": None, "skipped": "overlap"}

    def pause(self, job: str, reason: str | None = None) -> None:
        self.engine.command(job, Pause(reason), paused=True, pause_reason=reason)

    def resume(self, job: str, *, catch_up: bool = False) -> None:
        """Tick again from now; the slots missed while paused are recorded SKIPPED
        ("paused"), or with ``catch_up`` the job's misfire policy decides about them."""
        self.engine.command(job, Resume(catch_up), paused=False, pause_reason=None)

    def explain(self, job: str, at: datetime) -> dict[str, Any]:
        """Why ``job`` did or did not run at ``at``: an ``answer`` code (ran, skipped,
        paused, disabled, not_a_slot, not_created, future, pending, missing) and a text."""
        with self.engine.db.connect() as conn:
            return explain(conn, job, at, self.engine.clock())

    def backfill(
        self,
        job: str,
        start: datetime,
        end: datetime,
        *,
        max_concurrent: int = 1,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Run ``job`` once for each slot in ``[start, end]`` that has no invocation yet,
        ``max_concurrent`` at a time, beside its schedule."""
        report = self.engine.backfill(
            job, start, end, max_concurrent=max_concurrent, dry_run=dry_run
        )
        return {
            "job": report.job,
            "dry_run": dry_run,
            "slots": [iso(s) for s in report.slots],
            "existing": [iso(s) for s in report.existing],
            "started": report.started,
        }


def _summary(r: Any) -> dict[str, Any]:
    return {
        "id": r["id"],
        "job": r["job"],
        "slot": iso(r["slot"]),
        "status": r["status"],
        "attempt": r["attempt"],
        "started_at": iso(r["started_at"]),
        "finished_at": iso(r["finished_at"]),
        "error": r["error"],
        "reason": r["reason"],
        "trigger_id": r["trigger_id"],
        "revision": r["revision"],
    }
