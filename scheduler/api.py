"""The Python API: ``from scheduler import Scheduler, JobSpec``.

    sched = Scheduler.from_env()
    sched.apply([JobSpec("demo", "ping", "every 5s")], project="demo")
    sched.trigger("demo/ping")

Everything the CLI does goes through here, so scripts and the CLI cannot disagree.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from sqlalchemy.exc import DBAPIError

from cronchain.scheduler import outside
from cronchain.scheduler.declare.apply import ApplyReport, apply
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.errors import NotFound, SpecError, TransientError
from cronchain.scheduler.queries import forecast as forecasting
from cronchain.scheduler.queries.explain import explain
from cronchain.scheduler.settings import history_retention
from cronchain.scheduler.spec.controls import controls_of
from cronchain.scheduler.spec.jobspec import JobSpec, load_job_file, validate_pools
from cronchain.scheduler.storage import ahead, alert_store, job_store, pool_store, run_store
from cronchain.scheduler.storage.db import (
    described,
    explain_failure,
    explained_failures,
    first_line,
)
from cronchain.scheduler.storage.rows import HOLDS
from cronchain.scheduler.timing.iso import iso
from cronchain.scheduler.workflows.backfill import backfill
from cronchain.scheduler.workflows.pools import set_sizes as set_pool_sizes
from cronchain.statemachine import Pause, Resume

# The times cronchain takes from a person: far enough either way for any schedule,
# backfill or question, and far from the year 9999 where date arithmetic overflows.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)
MAX_HISTORY = 10_000  # rows one history call returns at most
MAX_BACKFILL_CONCURRENCY = 10_000  # a backfill holds 10,000 slots at most
MAX_ID = 2**63 - 1  # ids are 64-bit: a larger one names no invocation

P = ParamSpec("P")
R = TypeVar("R")


def check_time(field: str, value: datetime) -> datetime:
    """``value``, if it has a time zone and lies in [EARLIEST, LATEST); else SpecError."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise SpecError(field, f"{value.isoformat()} has no time zone")
    if not EARLIEST <= value < LATEST:
        raise SpecError(
            field,
            f"{value.isoformat()} is out of range: from {EARLIEST:%Y-%m-%d} to {LATEST:%Y-%m-%d}",
        )
    return value


def check_count(field: str, value: int, high: int) -> int:
    """``value``, if it is a whole number from 1 to ``high``; else SpecError."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise SpecError(field, f"must be a whole number from 1 to {high}, not {value!r}")
    return value


def _explained(
    method: Callable[Concatenate[Scheduler, P], R],
) -> Callable[Concatenate[Scheduler, P], R]:
    """A database that cannot be reached or is not migrated raises TransientError with
    one line that says which and what to do (scheduler.storage.db.explained_failures)."""

    @functools.wraps(method)
    def explained(self: Scheduler, *args: P.args, **kwargs: P.kwargs) -> R:
        with explained_failures(self.engine.db):
            return method(self, *args, **kwargs)

    return explained


class Scheduler:
    """What a person or a script does with cronchain; the CLI is a thin shell over it.

    Bad input raises ``SpecError`` (naming the field) or ``NotFound``; a database that
    cannot be reached or is not migrated raises ``TransientError`` saying which. A
    message the broker does not take is logged, not raised: the change is committed, and
    the watchdog sends it once the broker is back."""

    def __init__(self, engine: Engine):
        self.engine = engine

    @classmethod
    def from_env(cls) -> Scheduler:
        """The scheduler of the database that the ``CRONCHAIN_*`` settings name (the
        embedded default with none set)."""
        from cronchain.scheduler.workers.runtime import Runtime

        return cls(Runtime.from_env().engine)

    @_explained
    def revision(self) -> str | None:
        """The migration the database is at (None: never migrated)."""
        from cronchain.migrations import current

        return current(self.engine.db)

    @_explained
    def upgrade(self) -> None:
        """Bring the database schema to the newest migration, and make the history
        partitions that slots may come due in (PostgreSQL)."""
        from cronchain.migrations import upgrade
        from cronchain.scheduler.maintenance.retention import ensure_partitions

        try:
            upgrade(self.engine.db)
        except DBAPIError as err:  # a statement the database refused (a table in the way)
            if explain_failure(self.engine.db, err) is not None:
                raise  # unreachable, or a lock: said by explained_failures
            where, why = described(self.engine.db), first_line(err.orig or err)
            raise TransientError(f"{where} could not be migrated: {why}") from err
        ensure_partitions(self.engine.db, self.engine.clock())

    @_explained
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
        channels = pool_sizes = None
        if isinstance(jobs, str | Path):
            job_file = load_job_file(jobs)
            project, jobs, channels = job_file.project, job_file.jobs, job_file.channels
            pool_sizes = job_file.pools
        if project is None:
            raise ValueError("apply needs the project the jobs belong to")
        return apply(
            self.engine,
            project,
            jobs,
            dry_run=dry_run,
            prune=prune,
            channels=channels,
            pool_sizes=pool_sizes,
        )

    @_explained
    def apply_app(
        self,
        ref: str,
        *,
        project: str | None = None,
        dry_run: bool = False,
        prune: bool = False,
    ) -> dict[str, ApplyReport]:
        """Apply the jobs that the tasks of the Celery app ``ref`` (``module:attribute``)
        declare with ``@periodic``, project by project as ``apply`` does with a file; or
        ``project``'s alone. Every project is checked (a dry run) before any is written,
        so that one refused project leaves the others as they were."""
        from cronchain.scheduler.declare.apps import jobs_of_app

        declared = jobs_of_app(ref, project)
        if not dry_run:
            for name, specs in declared.items():
                apply(self.engine, name, specs, dry_run=True)
        return {
            name: apply(self.engine, name, specs, dry_run=dry_run, prune=prune)
            for name, specs in declared.items()
        }

    @_explained
    def jobs(self) -> list[dict[str, Any]]:
        """Every job, with its state, schedule and next tick (``cronchain jobs --json``
        prints the same fields)."""
        with self.engine.db.connect() as conn:
            rows = job_store.list_jobs(conn)
        return [
            {
                "id": job.ref,
                "state": job.snapshot.state.value,
                "schedule": job.schedule,
                "timezone": job.timezone,
                "days": job.days or "either",
                "next_tick": iso(job.snapshot.tick_at),
                "paused": job.paused,
                "pause_reason": job.pause_reason,
                "revision": job.revision,
                "kind": job.kind,
                "enabled": job.enabled,
                "overruns": job.snapshot.overruns,
                "priority": controls_of(job).priority,
                "requires": job.spec.get("requires", []),
                "pool": controls_of(job).pool,
                "gates": [_gate_shown(g) for g in controls_of(job).gates],
            }
            for job in rows
        ]

    @_explained
    def history(
        self,
        job: str | None = None,
        *,
        since: datetime | None = None,
        before: int | None = None,
        limit: int = 50,
    ) -> list[dict[str, Any]]:
        """Invocations, newest first, at most ``limit`` (up to MAX_HISTORY); ``job`` is
        ``project/name`` (or a unique name). ``before``: only older than that invocation
        id, the last one of a page: the next page (keyset paging, the page's way)."""
        check_count("limit", limit, MAX_HISTORY)
        if since is not None:
            check_time("since", since)
        if before is not None:
            check_count("before", before, MAX_ID)
        with self.engine.db.connect() as conn:
            job_id = None if job is None else job_store.resolve_job(conn, job)
            rows = run_store.history(conn, job_id=job_id, since=since, before=before, limit=limit)
        return [_summary(r) for r in rows]

    @_explained
    def alerts(self, job: str | None = None, *, limit: int = 50) -> list[dict[str, Any]]:
        """Alerts, newest first, with where each was delivered and its last errors."""
        check_count("limit", limit, MAX_HISTORY)
        with self.engine.db.connect() as conn:
            job_id = None if job is None else job_store.resolve_job(conn, job)
            rows = alert_store.listing(conn, job_id, limit)
        return [row.as_json() for row in rows]

    @_explained
    def invocation(self, invocation_id: int) -> dict[str, Any]:
        """One invocation whole: its earlier attempts and its debug log too."""
        if not 1 <= invocation_id <= MAX_ID:
            raise NotFound(f"no invocation {invocation_id}")
        with self.engine.db.connect() as conn:
            row = run_store.invocation(conn, invocation_id)
        if row is None:
            raise NotFound(f"no invocation {invocation_id}")
        return _summary(row) | {
            "attempts": [_attempt(a) for a in row["attempts"] or []],
            "worker": row["worker"],
            "created_at": iso(row["created_at"]),
            "start_at": iso(row["start_at"]),
            "deadline": iso(row["deadline"]),
            "timeout_at": iso(row["timeout_at"]),
            "log": row["log"] or "",
        }

    @_explained
    def abort(
        self, job: str | None = None, *, invocation: int | None = None
    ) -> dict[str, list[int]]:
        """Abort every active and waiting invocation of the job (so that none of them
        starts after), or one invocation; returns the ids aborted by the status each had:
        ``{"STARTING": [...], "RUNNING": [...], "WAITING": [...]}``."""
        if (job is None) == (invocation is None):
            raise ValueError("abort needs a job or an invocation id")
        if invocation is not None and not 1 <= invocation <= MAX_ID:
            raise NotFound(f"no invocation {invocation}")
        return self.engine.runs.abort(job=job, invocation_id=invocation)

    @_explained
    def trigger(self, job: str) -> dict[str, Any]:
        """Run the job now, under its overlap policy, and say what happened: ``result``
        is ``started``, ``buffered`` (the run is WAITING for the active one), ``waiting``
        (WAITING for its upstreams, its gates or a place in its pool) or ``skipped``
        (recorded SKIPPED, ``skipped`` giving the reason; ``waiting`` gives what it waits
        for); ``invocation`` and ``status`` are the run the trigger made, whichever it
        was."""
        trigger_id = uuid.uuid4().hex
        made = self.engine.trigger(job, trigger_id)
        result = _TRIGGER_RESULTS.get(made["status"], "skipped")
        if made["status"] == "WAITING" and made["reason"] in HOLDS:
            result = "waiting"
        return {
            "trigger_id": trigger_id,
            "result": result,
            "invocation": made["id"],
            "status": made["status"],
            "skipped": made["reason"] if result == "skipped" else None,
            "waiting": made["reason"] if result == "waiting" else None,
        }

    @_explained
    def set_pool(self, name: str, size: int) -> None:
        """Make pool ``name`` hold ``size`` places (0 holds every run), now: runs that
        waited for a place it now has start in the same transaction."""
        sizes = validate_pools({name: size})
        with self.engine.transaction() as conn:
            messages = set_pool_sizes(conn, sizes, self.engine.clock(), self.engine.grace)
        self.engine.send(messages)

    @_explained
    def pools(self) -> list[dict[str, Any]]:
        """Every pool: ``name``, ``size``, places ``taken`` (runs STARTING or RUNNING)
        and runs ``waiting`` for one."""
        with self.engine.db.connect() as conn:
            return pool_store.listing(conn)

    @_explained
    def pause(self, job: str, reason: str | None = None) -> None:
        """Stop the job's ticks until it is resumed; a running invocation finishes.
        ``reason`` is kept with the pause, for ``jobs`` and ``explain`` to show."""
        if reason is not None and outside.unstorable(reason) is not None:
            raise SpecError("reason", outside.UNSTORABLE_WHY)
        self.engine.command(job, Pause(reason), paused=True, pause_reason=reason)

    @_explained
    def resume(self, job: str, *, catch_up: bool = False) -> None:
        """Tick again from now; the slots missed while paused are recorded SKIPPED
        ("paused"), or with ``catch_up`` the job's misfire policy decides about them."""
        self.engine.command(job, Resume(catch_up), paused=False, pause_reason=None)

    @_explained
    def explain(self, job: str, at: datetime) -> dict[str, Any]:
        """Why ``job`` did or did not run at ``at``: an ``answer`` code (ran, running,
        waiting, skipped, paused, disabled, not_a_slot, not_created, future, pending,
        missing) and a text."""
        check_time("at", at)
        with self.engine.db.connect() as conn:
            return explain(conn, job, at, self.engine.clock())

    @_explained
    def forecast(
        self,
        window: timedelta = forecasting.WINDOW,
        threshold: int = forecasting.THRESHOLD,
        start: datetime | None = None,
    ) -> forecasting.Forecast:
        """Every job's slots from ``start`` (now, to the second) for ``window``, counted
        by the second, and the herds: seconds with ``threshold`` fires or more."""
        if not timedelta(seconds=1) <= window <= forecasting.MAX_WINDOW:
            raise SpecError("window", f"must be from 1s to {forecasting.MAX_WINDOW.days}d")
        if threshold < 1:
            raise SpecError("threshold", "must be a whole number from 1")
        begin = (start or self.engine.clock()).replace(microsecond=0)
        with self.engine.db.connect() as conn:
            planned = ahead.planned(conn)
            delays = forecasting.fixed_delays(planned)
            if delays:
                planned += ahead.pending_ticks(conn, delays)
        return forecasting.forecast(planned, begin, begin + window, threshold)

    @_explained
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
        check_time("start", start)
        check_time("end", end)
        check_count("max_concurrent", max_concurrent, MAX_BACKFILL_CONCURRENCY)
        report = backfill(
            self.engine,
            job,
            start,
            end,
            max_concurrent=max_concurrent,
            dry_run=dry_run,
            retention=history_retention(),  # as the watchdog's history pass reads it
        )
        return {
            "job": report.job,
            "dry_run": dry_run,
            "slots": [iso(s) for s in report.slots],
            "existing": [iso(s) for s in report.existing],
            "started": report.started,
        }


_TRIGGER_RESULTS = {"STARTING": "started", "RUNNING": "started", "WAITING": "buffered"}


def _attempt(record: dict[str, Any]) -> dict[str, Any]:
    """An earlier attempt as stored (times in ISO 8601 with an offset), its times
    written as every other time is (``iso``)."""
    times = {
        k: iso(datetime.fromisoformat(record[k]))
        for k in ("started_at", "finished_at")
        if record.get(k)
    }
    return record | times


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
        # What was checked before it could start, and how long it waited for that
        # (``requires``: scheduler.workflows.upstream); None for a job that requires nothing.
        "checks": r["checks"],
    }


def _gate_shown(gate: dict[str, Any]) -> dict[str, Any]:
    """A gate as ``jobs --json`` shows it: what it asks, not its headers (secrets)."""
    asks = {"http": gate["http"]["url"]} if "http" in gate else {"celery": gate["celery"]["task"]}
    return {"name": gate["name"], **asks, "every": gate["every"]}
