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

from celery import Celery
from celery.schedules import maybe_schedule

from cronchain.scheduler.declare.beatimport.schedules import Unsupported, both_days, schedule_text
from cronchain.scheduler.declare.celery_app import NotFaithful, send_options
from cronchain.scheduler.errors import SpecError
from cronchain.scheduler.spec.jobspec import JobSpec

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


@dataclass(frozen=True)
class Imported:
    """A job file entry, with the beat entry's name and its schedule as Celery shows it
    (``was``), for the comment above it."""

    name: str
    was: str
    job: dict[str, Any]


@dataclass
class Converted:
    """Job file entries, and what was left out or ignored, each (entry name, why)."""

    jobs: list[Imported] = field(default_factory=list)
    left_out: list[tuple[str, str]] = field(default_factory=list)
    ignored: list[tuple[str, str]] = field(default_factory=list)  # beat runs them no more
    notes: list[str] = field(default_factory=list)


# What beat would send for an entry: ``queue``, and ``priority``/``expires`` if any.
RouteOf = Callable[[BeatEntry], Mapping[str, Any]]


def convert(entries: Iterable[BeatEntry], project: str, route_of: RouteOf) -> Converted:
    """The job entries for ``entries``, named uniquely within the project."""
    out = Converted()
    taken: set[str] = set()
    for entry in entries:
        try:
            job = {"name": _unique(job_name(entry.name), taken), **job_entry(entry, route_of)}
            JobSpec.from_dict(project, job)  # as apply will: a refusal is named now
        except Unsupported as why:
            out.left_out.append((entry.name, str(why)))
            continue
        except SpecError as err:
            out.left_out.append((entry.name, f"{err.field}: {err.reason}"))
            continue
        taken.add(job["name"])
        out.jobs.append(Imported(entry.name, " ".join(repr(entry.schedule).split()), job))
    return out


def job_entry(entry: BeatEntry, route_of: RouteOf) -> dict[str, Any]:
    """One job file entry (without its name), or :class:`Unsupported`."""
    unknown = sorted(set(entry.options or {}) - set(CARRIED))
    if unknown:
        raise Unsupported(f"option {', '.join(unknown)} has no cronchain equivalent")
    job: dict[str, Any] = {"schedule": schedule_text(entry.schedule)}
    if entry.zone != "UTC" and not job["schedule"].startswith("every "):
        job["timezone"] = entry.zone  # an interval is the same in every zone
    if both_days(entry.schedule):
        job["days"] = "both"
    celery = _celery(entry, route_of)
    if "expires" in celery:
        # The message is dropped unrun once it expires: the run fails then, not in an hour.
        job["schedule_to_start"] = max(celery["expires"], 1.0)
    job["celery"] = celery
    if entry.paused:
        job["paused"] = entry.paused
    return job


def _celery(entry: BeatEntry, route_of: RouteOf) -> dict[str, Any]:
    """The task, its arguments, and how beat would send it."""
    try:
        sent = dict(route_of(entry))
    except NotFaithful as why:
        raise Unsupported(str(why)) from None
    celery: dict[str, Any] = {"task": entry.task, "queue": sent["queue"]}
    if entry.args:
        celery["args"] = _json("args", list(entry.args))
    if entry.kwargs:
        celery["kwargs"] = _json("kwargs", dict(entry.kwargs))
    if sent.get("priority") is not None:
        celery["priority"] = sent["priority"]
    expires = sent.get("expires")
    if isinstance(expires, datetime):
        raise Unsupported("expires is a fixed time, after which every run would be dropped")
    if isinstance(expires, timedelta):
        raise Unsupported("expires is a timedelta, which Celery's send_task fails on")
    if expires is not None:
        celery["expires"] = expires
    return celery


def entries_of_app(app: Celery, zone: str) -> tuple[list[BeatEntry], list[tuple[str, str]]]:
    """The app's beat schedule as beat builds it (``maybe_schedule`` with the entry's
    ``relative``), and the entries that name no task, each with the reason."""
    entries, broken = [], []
    for name, fields in (app.conf.beat_schedule or {}).items():
        if not isinstance(fields, dict) or not isinstance(fields.get("task"), str):
            broken.append((str(name), "names no task"))
            continue
        entries.append(
            BeatEntry(
                name=str(name),
                task=fields["task"],
                schedule=maybe_schedule(fields.get("schedule"), fields.get("relative", False)),
                zone=zone,
                args=fields.get("args") or (),
                kwargs=fields.get("kwargs"),
                options=fields.get("options") or {},
            )
        )
    return entries, broken


def app_route(app: Celery) -> RouteOf:
    """What beat would send for an entry of ``app``: its options over the task's own,
    then the app's routes."""

    def route_of(entry: BeatEntry) -> Mapping[str, Any]:
        return send_options(app, entry.task, entry.args, entry.kwargs, entry.options)

    return route_of


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
