"""Reading a user's Celery app in a process of its own.

``import-beat APP``, ``apply --app`` and beat's reconcile of ``CRONCHAIN_APPS`` need the
user's app loaded, which runs the user's code. Not in cronchain's process: there the
user's signal handlers would stay connected to cronchain's worker, its configuration
would be loaded beside cronchain's, and an edited module would never be read again. So
a child interpreter (``python -m cronchain.scheduler.declare.app_process``, in the current
directory, with the same environment) loads the app and answers in JSON; a
:class:`SpecError` there is one here.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from typing import Any, Literal

from cronchain.scheduler.errors import SpecError

LOAD_TIMEOUT = 120.0  # seconds: an app that connects somewhere as it is imported
Reading = Literal["beat", "periodic"]


def read_app(reading: Reading, ref: str, project: str | None = None) -> dict[str, Any]:
    """What the child answers for the app ``ref``: its beat schedule as job entries
    (``beat``), or the jobs its ``@periodic`` tasks declare (``periodic``)."""
    argv = [
        sys.executable,
        "-m",
        "cronchain.scheduler.declare.app_process",
        reading,
        ref,
        project or "",
    ]
    # The child finds modules where this process does (a worker's -A folder, a test's).
    path = os.pathsep.join(p for p in sys.path if p)
    env = os.environ | {"PYTHONPATH": path}
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=LOAD_TIMEOUT, cwd=os.getcwd(), env=env
        )
    except subprocess.TimeoutExpired:
        raise SpecError("app", f"loading {ref!r} took longer than {LOAD_TIMEOUT:g}s") from None
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        lines = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
        raise SpecError("app", f"loading {ref!r} failed: {lines[-1]}") from None
    if "error" in answer:
        error = answer["error"]
        raise SpecError(error["field"], error["reason"], where=error["where"])
    return answer


def _answer(reading: str, ref: str, project: str | None) -> dict[str, Any]:
    from cronchain.scheduler.declare.celery_app import load_app

    app = load_app(ref)
    if reading == "beat":
        return _beat(app, project)
    from cronchain.scheduler.declare.periodic import declared_jobs

    declared = declared_jobs(app)
    return {
        "projects": {
            name: [
                {k: getattr(spec, k) for k in ("name", "schedule", "timezone", "days", "kind")}
                | {"options": dict(spec.options), "controls": dict(spec.controls)}
                for spec in specs
            ]
            for name, specs in declared.items()
        }
    }


def _beat(app: Any, project: str | None) -> dict[str, Any]:
    from cronchain.scheduler.declare.beatimport.entries import app_route, convert, entries_of_app
    from cronchain.scheduler.declare.celery_app import app_zone
    from cronchain.scheduler.spec.model import NAME

    zone, note = app_zone(app)
    entries, broken = entries_of_app(app, zone)
    if project is None:
        main = f"{app.main}-beat"
        project = main if NAME.fullmatch(main) else "beat"
    converted = convert(entries, project, app_route(app))
    return {
        "project": project,
        "jobs": [dataclasses.asdict(job) for job in converted.jobs],
        "left_out": broken + converted.left_out,
        "notes": [note] if note else [],
    }


def main(argv: list[str]) -> int:
    reading, ref, project = argv
    answers, sys.stdout = sys.stdout, sys.stderr  # what the user's modules print is not JSON
    try:
        answer = _answer(reading, ref, project or None)
    except SpecError as err:
        answer = {"error": {"field": err.field, "reason": err.reason, "where": err.where}}
    finally:
        sys.stdout = answers
    json.dump(answer, answers)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
