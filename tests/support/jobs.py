"""Jobs for tests: specs of project ``p``, applying them to an engine, and job files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cronchain.scheduler.api import Scheduler
from cronchain.scheduler.declare.apply import apply as declare
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.spec.jobspec import JobSpec


def make(schedule: str = "every 10s", name: str = "a", kind: str = "noop", **options: Any):
    """``p/NAME`` on ``schedule``; keywords are the kind's options (no controls)."""
    return JobSpec("p", name, schedule, kind=kind, options=options)


def spec(
    name: str = "a",
    schedule: str = "triggered",
    kind: str = "noop",
    options: Any = None,
    **controls: Any,
) -> JobSpec:
    """``p/NAME``, triggered unless given a schedule; keywords are its controls."""
    return JobSpec("p", name, schedule, kind=kind, options=options or {}, controls=controls)


def apply(engine: Engine, *specs: JobSpec, dry_run: bool = False):  # type: ignore[no-untyped-def]
    """Project ``p`` is ``specs``, as ``Scheduler.apply`` makes it; returns its report."""
    return Scheduler(engine).apply(list(specs), project="p", dry_run=dry_run)


def apply_with_pools(engine, *specs, pools: dict[str, int] | None = None) -> None:  # type: ignore[no-untyped-def]
    """Project ``p`` is ``specs``, with the pools of these sizes, as a declared project
    is applied (:func:`cronchain.scheduler.declare.apply.apply`)."""
    declare(engine, "p", list(specs), pool_sizes=pools)


def write_job_file(path: Path, project: str, jobs: list[dict[str, Any]], **top: Any) -> Path:
    """A job file at ``path``: ``project``, any other top-level keys, then ``jobs``,
    written as JSON (JSON is YAML)."""
    path.write_text(json.dumps({"project": project, **top, "jobs": jobs}))
    return path


def noop_job_file(
    path: Path,
    count: int,
    *,
    project: str,
    name: str = "job{:04d}",
    schedule: str = "every 1h",
    timezone: str | None = "UTC",
    more: tuple[dict[str, Any], ...] = (),
) -> Path:
    """``count`` noop jobs on ``schedule``, named ``name.format(i)`` (``timezone`` None:
    none written), then the jobs in ``more``."""
    zone = {} if timezone is None else {"timezone": timezone}
    jobs = [
        {"name": name.format(i), "schedule": schedule, **zone, "noop": {}} for i in range(count)
    ]
    return write_job_file(path, project, [*jobs, *more])


def http_job_file(path: Path, url: str, count: int = 20, schedule: str = "every 1s") -> Path:
    """Project ``e2e``: ``count`` jobs ``jobNN`` that POST to ``url`` on ``schedule``."""
    http = {"url": url, "method": "POST", "timeout": "2s"}
    jobs = [{"name": f"job{i:02d}", "schedule": schedule, "http": http} for i in range(count)]
    return write_job_file(path, "e2e", jobs)


def alerting_job_file(
    path: Path,
    *,
    fail: bool,
    on: str = "[failed, recovered]",
    project: str = "p",
    schedule: str = "every 10s",
    lease: str | None = None,
    mail: bool = False,
) -> Path:
    """Written as YAML, which tests edit as text: a noop job ``flaky`` that fails or not,
    alerting ``on`` (YAML's list) to the webhook at ``$TEST_HOOK_URL``, and with ``mail``
    also by email through the SMTP server at ``$TEST_SMTP_URL``."""
    channels = "  hook: {webhook: {env: TEST_HOOK_URL}}\n"
    to = "hook"
    if mail:
        channels += "  mail: {email: [oncall@example.com], smtp: {env: TEST_SMTP_URL}}\n"
        to = "hook, mail"
    lease_line = f"    lease: {lease}\n" if lease else ""
    path.write_text(
        f"""
project: {project}
channels:
{channels}jobs:
  - name: flaky
    schedule: {schedule}
{lease_line}    noop: {{fail: {str(fail).lower()}}}
    alerts: {{on: {on}, to: [{to}]}}
"""
    )
    return path
