"""A beat schedule entry, wherever it was declared, as a cronchain ``celery`` job entry.

``app.conf.beat_schedule``, ``add_periodic_task`` and django-celery-beat's tables all
come down to a :class:`BeatEntry`; :func:`convert` turns a list of them into job file
entries, validated as ``apply`` will validate them, and names each entry it left out
with the reason.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from scheduler.beatimport.schedules import Unsupported, schedule_text
from scheduler.errors import SpecError
from scheduler.spec import JobSpec

# The options a beat entry may carry that a ``celery`` job carries the same way.
CARRIED = ("queue", "priority", "expires")


@dataclass(frozen=True)
class BeatEntry:
    """One periodic task as beat knows it. ``schedule`` is what beat would evaluate: a
    Celery schedule object, a number of seconds or a ``timedelta``; ``zone`` the zone
    its crontab is read in (the app's ``timezone``, or django-celery-beat's per row)."""

    name: str
    task: str
    schedule: Any
    zone: str = "UTC"
    args: Any = ()
    kwargs: Any = None
    options: Mapping[str, Any] = field(default_factory=dict)
    paused: str | None = None  # why the job should be created paused


@dataclass
class Converted:
    """Job file entries, each with the beat entry it came from, and what was left out."""

    jobs: list[tuple[BeatEntry, dict[str, Any]]] = field(default_factory=list)
    left_out: list[tuple[str, str]] = field(default_factory=list)  # (entry name, why)


def convert(
    entries: Iterable[BeatEntry], project: str, queue_of: Callable[[BeatEntry], str]
) -> Converted:
    """The job entries for ``entries``; ``queue_of`` gives the queue an entry without a
    ``queue`` option is routed to. Names are made unique within the project."""
    out = Converted()
    taken: set[str] = set()
    for entry in entries:
        try:
            job = {"name": _unique(job_name(entry.name), taken), **job_entry(entry, queue_of)}
            JobSpec.from_dict(project, job)  # as apply will: a refusal is named now
        except Unsupported as why:
            out.left_out.append((entry.name, str(why)))
            continue
        except SpecError as err:
            out.left_out.append((entry.name, f"{err.field}: {err.reason}"))
            continue
        taken.add(job["name"])
        out.jobs.append((entry, job))
    return out


def job_entry(entry: BeatEntry, queue_of: Callable[[BeatEntry], str]) -> dict[str, Any]:
    """One job file entry (without its name), or :class:`Unsupported`."""
    options = dict(entry.options or {})
    unknown = sorted(set(options) - set(CARRIED))
    if unknown:
        raise Unsupported(f"option {', '.join(unknown)} has no cronchain equivalent")
    celery: dict[str, Any] = {"task": entry.task, "queue": options.get("queue") or queue_of(entry)}
    if not isinstance(celery["queue"], str):
        raise Unsupported(f"queue {celery['queue']!r} is not a queue name")
    if entry.args:
        celery["args"] = _json("args", list(entry.args))
    if entry.kwargs:
        celery["kwargs"] = _json("kwargs", dict(entry.kwargs))
    job: dict[str, Any] = {"schedule": schedule_text(entry.schedule)}
    if entry.zone != "UTC":
        job["timezone"] = entry.zone
    if options.get("priority") is not None:
        celery["priority"] = options["priority"]
    expires = options.get("expires")
    if isinstance(expires, datetime):
        raise Unsupported("expires is a fixed time, after which every run would be dropped")
    if expires is not None:
        seconds = expires.total_seconds() if isinstance(expires, timedelta) else expires
        celery["expires"] = seconds
        # The message is dropped unrun once it expires: the run fails then, not in an hour.
        job["schedule_to_start"] = max(seconds, 1.0)
    job["celery"] = celery
    if entry.paused:
        job["paused"] = entry.paused
    return job


def _json(what: str, value: Any) -> Any:
    """``value`` as the job file will hold it (tuples become lists)."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError):
        raise Unsupported(f"{what} hold values that are not JSON (a job file holds JSON)") from None


_NOT_A_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


def job_name(entry_name: str) -> str:
    """A job name for a beat entry's name: runs of other characters become ``-``."""
    name = _NOT_A_NAME.sub("-", entry_name).strip("-._")[:100].rstrip("-._")
    return name or "entry"


def _unique(name: str, taken: set[str]) -> str:
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        suffix = f"-{n}"
        candidate = name[: 100 - len(suffix)] + suffix
    return candidate
